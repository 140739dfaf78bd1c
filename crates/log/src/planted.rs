//! Bugs the simulation (`crates/sim`) plants to show that its checker catches
//! them: each undoes one rule of the replication contract. Planting needs the
//! `planted-bugs` feature, which only the simulation enables (through
//! `syncline-broker`'s feature of the same name); without it [`active`] is a
//! constant `false` and every rule holds. (As with the other test-only
//! features, cargo's feature unification compiles the switch into a workspace
//! build's `synclined`, where nothing ever calls [`plant`].)
//!
//! The switch lives in the lowest crate with a rule to undo (the log); the
//! broker re-exports it as `syncline_broker::planted`.

/// One rule the simulation can undo.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[repr(u32)]
pub enum Bug {
    /// A follower's `lastCaughtUpTime` only from fetches at the leader's log
    /// end (the second rule, "it has what the leader had at its previous
    /// fetch", removed): under a steady stream of small produces a healthy
    /// follower is evicted (I11).
    NoSecondCaughtUpRule = 1,
    /// An append leaves its segment marked clean, so the flush policy's fsync
    /// skips it while the recovery point moves on: with `flush.messages=1` a
    /// record is acknowledged as durable that a power loss takes away.
    LostFsync = 2,
    /// The leader's high watermark advances, and acks=all produces are
    /// acknowledged, while the ISR is below `min.insync.replicas` (the check
    /// before the append stays): records acknowledged on fewer replicas than
    /// promised.
    NoMinIsrCheck = 4,
}

#[cfg(feature = "planted-bugs")]
static PLANTED: std::sync::atomic::AtomicU32 = std::sync::atomic::AtomicU32::new(0);

/// Plants `bugs` in every broker of this process (replacing earlier ones).
#[cfg(feature = "planted-bugs")]
pub fn plant(bugs: &[Bug]) {
    let mask = bugs.iter().fold(0, |m, b| m | *b as u32);
    PLANTED.store(mask, std::sync::atomic::Ordering::Relaxed);
}

/// True when `bug` is planted.
#[inline]
#[must_use]
pub fn active(bug: Bug) -> bool {
    #[cfg(feature = "planted-bugs")]
    return PLANTED.load(std::sync::atomic::Ordering::Relaxed) & bug as u32 != 0;
    #[cfg(not(feature = "planted-bugs"))]
    {
        let _ = bug;
        false
    }
}
