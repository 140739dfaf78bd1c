//! Deterministic simulation: a whole syncline cluster — brokers, the Raft
//! controller quorum and the fault harness' workload of producers and
//! consumers — runs on one thread inside turmoil, over a simulated network and
//! clock and disk. A seed chooses the faults (crashes, power losses of one
//! broker or of all, full disks, cuts both ways and one way, isolation, slow links, the client cut
//! from a broker), the run heals, and the fault harness' checker judges the
//! history. `scripts/sim.sh` runs seeds;
//! `cargo nextest run -p syncline-sim` runs the fixed seed set.

pub mod disk;
pub mod entropy;
pub mod group;
pub mod net;
pub mod plan;
pub mod run;
