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
//! - [`planted`]: the rules a simulation run may undo, as config fields.

#![warn(missing_docs)]

pub mod follower;
pub mod lifecycle;
pub mod partition;
pub mod planted;

pub use planted::PlantedBugs;
