//! Bugs the simulation (`crates/sim`) plants to show that its checker catches
//! them: each undoes one rule of the replication contract. Planting needs the
//! `planted-bugs` feature, which only the simulation enables; without it
//! [`active`] is a constant `false` and every rule holds. (As with the other
//! test-only features, cargo's feature unification compiles the switch into a
//! workspace build's `synclined`, where nothing ever calls [`plant`].)

/// One rule the simulation can undo.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[repr(u32)]
pub enum Bug {
    /// A follower's `lastCaughtUpTime` only from fetches at the leader's log
    /// end (the second rule, "it has what the leader had at its previous
    /// fetch", removed): under a steady stream of small produces a healthy
    /// follower is evicted (I11).
    NoSecondCaughtUpRule = 1,
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
