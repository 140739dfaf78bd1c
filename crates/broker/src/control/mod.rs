//! The control layer: this broker's side of the controller quorum.
//!
//! - `client`: the broker's lifecycle with the controller (registration,
//!   heartbeats, controlled shutdown; the machine is
//!   `syncline_replication::lifecycle`) and the AlterPartition sender;
//! - `host`: the controller role, when this broker is a voter (the rules are
//!   `syncline-controller`'s);
//! - `metadata_cache`: the cluster as this broker knows it, from the
//!   controller's announcements.

pub(crate) mod client;
pub(crate) mod host;
pub(crate) mod metadata_cache;
