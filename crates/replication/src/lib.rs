//! syncline's replication rules, as pure machines: events and `now` in,
//! `#[must_use]` decisions out, table-tested. Nothing here does I/O, reads a
//! clock (every `now` is passed in as a [`std::time::Instant`]; the broker
//! passes tokio's clock, the simulation its virtual one), spawns a task or
//! keeps process-wide state; `tests/purity.rs` checks it. The broker's shells
//! execute what these machines decide.
//!
//! - [`partition`]: one replica. [`partition::core`] (`PartitionCore`: roles
//!   and epochs from LeaderAndIsr, acks=all completion, fencing, the one high
//!   watermark, the follower's HW, the divergence check, shrink pacing,
//!   AlterPartition answers; every event returns `Effects` and checks the
//!   invariants of docs/INVARIANTS.md in debug builds),
//!   [`partition::leader_state`] (follower LEOs, `lastCaughtUpTime`, ISR
//!   shrink/expand proposals) and [`partition::truncation`] (where a follower
//!   truncates).
//! - [`follower`]: one followed partition's fetch phases (truncating,
//!   fetching, backing off, fenced); the broker's replica fetcher executes it.
//! - [`lifecycle`]: the broker's standing with the controller (registering,
//!   fenced, unfenced, shutting down); the broker's controller client executes
//!   it.
//! - [`announcement`]: which LeaderAndIsr requests a broker takes, and which
//!   announced partition states are newer than the known ones.
//! - [`fetch`]: a fetch's byte budget, when a waiting fetch is ready, which
//!   offsets a read may ask for and up to where it reads.
//! - [`isr`]: who may join an ISR, and AlterPartition answers matched to
//!   what was sent.
//! - [`produce`]: the `acks` contract request-wide (values, when each is
//!   answered, the wait caps, the offsets topic's write guard).
//! - [`throttle`]: which replicas a reassignment throttles, and the token
//!   bucket that bounds them.
//! - [`client_quota`]: client byte-rate quotas (Kafka's KIP-13/124/219):
//!   the sampled rate, the throttle time, which configured quota applies.
//!   Not a replication rule, but a pure one; replication is what it never
//!   charges.
//! - [`topic`]: topic identity (KIP-516): `TopicId`, which ids name the same
//!   topic, and how a cached topic takes an announced id.
//! - [`planted`]: the rules a simulation run may undo, as config fields.

#![warn(missing_docs)]

pub mod announcement;
pub mod client_quota;
pub mod fetch;
pub mod follower;
pub mod isr;
pub mod lifecycle;
pub mod partition;
pub mod planted;
pub mod produce;
pub mod throttle;
pub mod topic;

pub use planted::PlantedBugs;
