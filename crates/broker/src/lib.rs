//! The syncline broker (`synclined`).
//!
//! A broker stores partition replicas, serves producers and consumers for the
//! partitions it leads, replicates the ones it follows by fetching from their
//! leaders, and tracks each led partition's in-sync replicas. One broker also hosts
//! the controller, which decides leadership and commits ISR changes.
//!
//! # Layout
//!
//! - [`config`]: the TOML configuration (Kafka's names and defaults).
//! - [`broker`]: the parts of a broker, request dispatch, start and shutdown.
//! - [`server`]: connections, framing, responders; [`net`]: the network seam.
//! - [`replica_manager`]: the hosted partitions and the data-plane requests.
//! - [`partition`]: one replica's log and replication state;
//!   [`partition::leader_state`] is the pure ISR/HW state machine and
//!   [`partition::truncation`] the pure truncation decision.
//! - [`delayed`]: DelayedFetch and DelayedProduce, waiting in purgatories.
//! - [`fetcher`]: replica fetchers (follower side of replication), the I/O shell
//!   of [`follower`], the pure machine of one followed partition's fetch phases.
//! - [`controller_host`]: the controller role's I/O shell; [`controller_client`]:
//!   registration, heartbeats and AlterPartition from the broker side, the I/O
//!   shell of [`lifecycle`], the pure machine of the broker's standing with the
//!   controller.
//! - [`metadata_cache`]: the cluster as this broker knows it.
//! - [`metrics`], [`http`]: Prometheus metrics and their endpoint.
//! - [`topic_config`]: a topic's effective settings.

pub mod broker;
pub mod config;
pub mod controller_client;
pub mod controller_host;
pub mod delayed;
pub mod fetch_session;
pub mod fetcher;
pub mod follower;
pub mod http;
pub mod lifecycle;
pub mod metadata_cache;
pub mod metrics;
pub mod net;
pub mod partition;
pub mod replica_manager;
pub mod server;
pub mod topic_config;

pub use broker::{start, start_on, Broker, BrokerHandle};
pub use config::BrokerConfig;
