//! Rules the simulation (`crates/sim`) undoes to show that its checker
//! catches their loss: planted bugs. Here they are plain fields of a
//! partition's [`ReplicationConfig`](crate::partition::ReplicationConfig),
//! all off by default; the broker's shell fills them from the process-wide
//! switch (`syncline_log::planted`, compiled in only with the `planted-bugs`
//! feature), so this crate keeps no process-wide state.

/// The replication rules a simulation run may undo. Each field names the
/// rule it removes; `Default` removes none.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct PlantedBugs {
    /// A follower's `lastCaughtUpTime` only from fetches at the leader's log
    /// end (the second rule, "it has what the leader had at its previous
    /// fetch", removed): under a steady stream of small produces a healthy
    /// follower is evicted (I11).
    pub no_second_caught_up_rule: bool,
    /// The high watermark advances, and acks=all produces are acknowledged,
    /// while the ISR is below `min.insync.replicas` (the check before the
    /// append stays): records acknowledged on fewer replicas than promised
    /// (I2).
    pub no_min_isr_check: bool,
}
