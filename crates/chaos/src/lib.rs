//! The fault harness: a cluster of real `synclined` processes, a workload of
//! producers and consumers that records every operation, a nemesis of process,
//! network and power faults that overlap, and a checker of the history.
//! `scripts/chaos.sh` runs it; `cargo nextest run -p syncline-chaos` runs its
//! bounded version.

pub mod checker;
pub mod final_read;
pub mod history;
pub mod nemesis;
pub mod net;
pub mod power;
pub mod run;
pub mod scenarios;
pub mod workload;
