//! One partition replica's rules:
//! - [`core`]: every replication rule of a replica (roles and epochs from
//!   LeaderAndIsr, acks=all completion, fencing by epoch, the follower's high
//!   watermark, the KIP-595 divergence check, shrink pacing, AlterPartition
//!   answers), as a pure machine that returns [`Effects`];
//! - [`leader_state`]: the leader's bookkeeping inside it (follower LEOs,
//!   `lastCaughtUpTime`, ISR shrink/expand proposals, the high watermark);
//! - [`truncation`]: where a follower truncates before fetching.
//!
//! The broker's `partition` module is the shell: it owns the log, runs the
//! core under one lock and executes the effects.

pub mod core;
pub mod leader_state;
pub mod truncation;

pub use self::core::{
    AlterPartitionResult, Announcement, CommittedIsr, Effects, FetchReadiness, FetcherChange,
    LeaderHealth, ListedOffset, PartitionCore, ProduceCheck, ReplicationConfig, RoleChange, Wake,
};
pub use leader_state::{FollowerFetch, IsrChangeKind, IsrEvidence, IsrProposal};
