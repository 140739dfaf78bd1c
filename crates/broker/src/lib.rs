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
//! - `broker`: the parts of a broker, request dispatch, start and shutdown.
//! - `server`: connections, framing, responders; [`net`]: the network seam.
//! - `replica_manager`: the hosted partitions and the data-plane requests.
//! - [`partition`]: one replica. Its rules are pure and table-tested:
//!   [`partition::core`] (`PartitionCore`: roles and epochs from LeaderAndIsr,
//!   acks=all completion, fencing, the one high watermark, the follower's HW, the
//!   divergence check, shrink pacing, AlterPartition answers; every event returns
//!   `Effects`), [`partition::leader_state`] (follower LEOs, `lastCaughtUpTime`,
//!   ISR shrink/expand proposals) and [`partition::truncation`] (where a follower
//!   truncates). [`partition::Partition`] is the shell around the log that runs
//!   the core and executes its effects on the log; the replica manager executes
//!   the rest (purgatory wake-ups, AlterPartition, fetchers).
//! - `delayed`: DelayedFetch and DelayedProduce, waiting in purgatories.
//! - `fetcher`: replica fetchers (follower side of replication).
//! - `controller_host`: the controller role's I/O shell; `controller_client`:
//!   registration, heartbeats and AlterPartition from the broker side.
//! - `metadata_cache`: the cluster as this broker knows it.
//! - [`metrics`], `http`: Prometheus metrics and their endpoint.
//! - [`topic_config`]: a topic's effective settings.

mod broker;
pub mod config;
mod controller_client;
mod controller_host;
mod delayed;
mod fetch_session;
mod fetcher;
mod http;
mod metadata_cache;
pub mod metrics;
pub mod net;
pub mod partition;
mod replica_manager;
mod server;
pub mod topic_config;

pub use broker::{start, start_on, Broker, BrokerHandle};
pub use config::BrokerConfig;
pub use controller_client::BrokerStatus;
pub use replica_manager::ReplicaManager;
