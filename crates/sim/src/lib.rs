//! Deterministic simulation: a whole syncline cluster — brokers, the Raft
//! controller quorum and the fault harness' workload of producers and
//! consumers — runs on one thread inside turmoil, over a simulated network and
//! clock. A seed chooses the faults (crashes, cuts, one-way cuts, isolation,
//! held links, the client cut from a broker), the run heals, and the fault
//! harness' checker judges the history. `scripts/sim.sh` runs seeds;
//! `cargo nextest run -p syncline-sim` runs the fixed seed set.

pub mod entropy;
pub mod net;
pub mod plan;
pub mod run;
