//! The replica layer: the partitions this broker hosts and the data-plane
//! requests on them. It executes what the replication rules
//! (`syncline-replication`) decide and answers through the leaf
//! [`Responder`](crate::responder::Responder); it knows neither the
//! listeners nor the broker that composes it.
//!
//! - `manager`: the hosted partitions, produce, fetch and ListOffsets, role
//!   changes from LeaderAndIsr, the effects of each partition's rules;
//! - [`partition`]: one replica, the shell around its log and its core;
//! - `delayed`: DelayedFetch and DelayedProduce, waiting in purgatories;
//! - `fetch_session`: incremental fetch sessions (KIP-227);
//! - `fetcher`: the replica fetcher tasks, one per source leader;
//! - `quota`: the replication throttles' shared buckets;
//! - `alter_partition`: the AlterPartition sender (ISR proposals to the
//!   controller, answers back to the partitions).

pub(crate) mod alter_partition;
pub(crate) mod delayed;
pub(crate) mod fetch_session;
pub(crate) mod fetcher;
pub(crate) mod manager;
pub mod partition;
pub(crate) mod quota;
