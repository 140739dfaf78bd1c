//! [`Purgatory`]: delayed operations watched by key and expired by a
//! [`Timer`], in the manner of Kafka's `DelayedOperationPurgatory`.
//!
//! # Locks
//!
//! Each operation has its own lock (`OpState::slot`). Holding it, the
//! purgatory may take a watcher shard lock or the timer's wheel lock, both
//! leaves; it never takes an operation's lock while holding either, and
//! never runs `on_complete` under any lock.
//!
//! # Counting stale watcher entries
//!
//! An operation watched on several keys and completed through one of them
//! (or by expiry, or cancel) leaves entries on the others. They are purged
//! eagerly from the list an event checks, and by a sweep over all lists once
//! the stale entries (`watched entries - entries of pending operations`)
//! pass both `purge_interval_requests` (Kafka's `purgeInterval`) and the
//! entries of pending operations. Memory follows the pending operations, not
//! the completed ones, and a sweep costs O(1) per entry it removes.

use std::fmt;
use std::hash::Hash;
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::Duration;

use parking_lot::MutexGuard;

use crate::operation::{Completion, DelayedOperation, OpHandle, OpState, Slot, Watched};
use crate::timer::Timer;
use crate::watchers::WatcherMap;
use crate::wheel::TimerKey;

/// Distinguishes purgatories, so that a handle only cancels in its own.
static NEXT_PURGATORY_ID: AtomicU64 = AtomicU64::new(0);

/// Tuning of a [`Purgatory`].
#[derive(Debug, Clone)]
pub struct PurgatoryConfig {
    /// Sweep all watcher lists once more than this many entries of completed
    /// operations remain in them, and more than entries of pending ones (Kafka's
    /// `fetch.purgatory.purge.interval.requests` /
    /// `producer.purgatory.purge.interval.requests`, default 1000).
    pub purge_interval_requests: usize,
    /// Number of watcher shards: each is a mutex around a map of keys.
    pub watcher_shards: usize,
}

impl Default for PurgatoryConfig {
    fn default() -> Self {
        Self {
            purge_interval_requests: 1000,
            // Kafka uses 512 for large machines; 64 keeps two events on
            // different partitions apart nearly always at a fraction of the
            // memory.
            watcher_shards: 64,
        }
    }
}

/// Delayed operations of type `O`, watched by keys of type `K` (a topic
/// partition, typically) and expired by a timing wheel.
///
/// A waiting operation holds no task and no thread: it is an entry in the
/// watcher list of each of its keys and one in the timer. It completes,
/// exactly once, in the first of these ways:
/// - an event on one of its keys ([`check_and_complete`](Self::check_and_complete))
///   finds that `try_complete` returns true: [`Completion::Satisfied`];
/// - its timeout passes: [`Completion::Expired`], on the reaper task;
/// - [`cancel`](Self::cancel) or [`cancel_key`](Self::cancel_key):
///   [`Completion::Cancelled`].
///
/// Completing everything on a key for a reason, such as the loss of
/// leadership of a partition, is [`check_and_complete`](Self::check_and_complete):
/// `try_complete` sees the new partition state, returns true, and
/// `on_complete` answers with the matching error.
///
/// Dropping the purgatory stops its reaper; operations still pending are
/// dropped without `on_complete`.
pub struct Purgatory<K, O = Arc<dyn DelayedOperation>> {
    shared: Arc<Shared<K, O>>,
    timer: Timer<Arc<OpState<O>>>,
}

/// What the reaper's expiry handler needs, apart from the timer itself.
struct Shared<K, O> {
    id: u64,
    name: String,
    watchers: WatcherMap<K, O>,
    /// Watcher entries of operations still pending: an operation adds its
    /// `watches` when it enters the timer and removes them when it completes.
    pending_entries: AtomicUsize,
    purge_interval: usize,
    /// One sweep at a time.
    purging: AtomicBool,
}

/// Whether marking an operation completed won, and what is left to undo.
enum Marked {
    AlreadyCompleted,
    /// Its timer key, if it went pending (stale if the timer is expiring it).
    Completed(Option<TimerKey>),
}

/// The outcome of trying one watched operation.
enum Attempt {
    Completed,
    AlreadyCompleted,
    NotYet,
}

impl<K, O> Purgatory<K, O>
where
    K: Hash + Eq + Clone + Send + Sync + 'static,
    O: DelayedOperation,
{
    /// A purgatory with the default [`PurgatoryConfig`]; `name` labels its
    /// logs (e.g. `"Fetch"`, `"Produce"`).
    ///
    /// # Panics
    ///
    /// Outside a tokio runtime, which the reaper task is spawned on.
    pub fn new(name: &str) -> Self {
        Self::with_config(name, PurgatoryConfig::default())
    }

    /// A purgatory with the given tuning.
    ///
    /// # Panics
    ///
    /// Outside a tokio runtime.
    pub fn with_config(name: &str, config: PurgatoryConfig) -> Self {
        let shared = Arc::new(Shared {
            id: NEXT_PURGATORY_ID.fetch_add(1, Ordering::Relaxed),
            name: name.to_owned(),
            watchers: WatcherMap::new(config.watcher_shards),
            pending_entries: AtomicUsize::new(0),
            purge_interval: config.purge_interval_requests,
            purging: AtomicBool::new(false),
        });
        let on_expire = Arc::clone(&shared);
        let timer = Timer::new(name, move |op: Arc<OpState<O>>| on_expire.expire(&op));
        Self { shared, timer }
    }

    /// The name given at construction.
    pub fn name(&self) -> &str {
        &self.shared.name
    }

    /// Tries to complete `op` now; if it cannot, watches it on every key
    /// and schedules its expiry `timeout` from now, then tries once more:
    /// an event that happened between the first try and the watch would
    /// otherwise be missed.
    ///
    /// `on_complete` runs on the calling thread if the operation completes
    /// here. An operation with no keys completes only by timeout or cancel.
    pub fn try_complete_else_watch(&self, op: O, timeout: Duration, keys: &[K]) -> Watched<O> {
        let state = Arc::new(OpState::new(op, self.shared.id));
        // The lock is held until the operation is fully registered, so no
        // event can complete it half-watched (Kafka's safeTryCompleteOrElse).
        let mut slot = state.slot.lock();
        if state.op.try_complete() {
            self.complete(&state, slot, Completion::Satisfied);
            return Watched::Completed(Completion::Satisfied);
        }
        for key in keys {
            self.shared.watchers.watch(key, Arc::clone(&state));
        }
        slot.watches = keys.len();
        let how = if state.op.try_complete() {
            Completion::Satisfied
        } else {
            match self.timer.schedule(timeout, Arc::clone(&state)) {
                Ok(timer_key) => {
                    slot.timer_key = Some(timer_key);
                    self.shared
                        .pending_entries
                        .fetch_add(keys.len(), Ordering::Relaxed);
                    drop(slot);
                    return Watched::Waiting(OpHandle(state));
                }
                Err(_already_due) => Completion::Expired,
            }
        };
        // Its watcher entries stay behind for the purge to collect.
        self.complete(&state, slot, how);
        self.shared.maybe_purge();
        Watched::Completed(how)
    }

    /// Something happened on `key` (an append, a high watermark advance, a
    /// leadership change): tries every operation watching it, and drops the
    /// completed ones from its list. Returns how many completed.
    ///
    /// `on_complete` of those runs on the calling thread. Call it without
    /// holding locks that `try_complete` takes. A key nobody watches costs a
    /// hash and a shard lock, and allocates nothing.
    pub fn check_and_complete(&self, key: &K) -> usize {
        let Some(watching) = self.shared.watchers.snapshot(key) else {
            return 0;
        };
        let mut completed = 0;
        let mut saw_completed = false;
        for state in &watching {
            match self.try_complete_watched(state) {
                Attempt::Completed => completed += 1,
                Attempt::AlreadyCompleted => saw_completed = true,
                Attempt::NotYet => {}
            }
        }
        if completed > 0 || saw_completed {
            self.shared.watchers.remove_completed(key);
        }
        self.shared.maybe_purge();
        completed
    }

    /// Completes the operation with [`Completion::Cancelled`] if it has not
    /// completed yet, removing its timer entry in O(1). Returns whether it
    /// did (false also for a handle from another purgatory).
    ///
    /// `on_complete` runs on the calling thread.
    pub fn cancel(&self, handle: &OpHandle<O>) -> bool {
        let state = &handle.0;
        if state.owner != self.shared.id || state.is_completed() {
            return false;
        }
        let slot = state.slot.lock();
        if state.is_completed() {
            return false;
        }
        let cancelled = self.complete(state, slot, Completion::Cancelled);
        self.shared.maybe_purge();
        cancelled
    }

    /// Stops watching `key` and completes every operation still pending on
    /// it with [`Completion::Cancelled`] (the partition was deleted or moved
    /// away). Returns how many it completed.
    ///
    /// To answer them with an error that depends on the partition's state,
    /// use [`check_and_complete`](Self::check_and_complete) instead.
    pub fn cancel_key(&self, key: &K) -> usize {
        let mut cancelled = 0;
        for state in self.shared.watchers.take(key) {
            if state.is_completed() {
                continue;
            }
            let slot = state.slot.lock();
            if !state.is_completed() && self.complete(&state, slot, Completion::Cancelled) {
                cancelled += 1;
            }
        }
        self.shared.maybe_purge();
        cancelled
    }

    /// Gauge: operations pending (in the timer).
    pub fn delayed(&self) -> usize {
        self.timer.len()
    }

    /// Gauge: watcher entries over all keys, including those of completed
    /// operations not yet purged. An operation watched on n keys counts n.
    pub fn watched(&self) -> usize {
        self.shared.watchers.len()
    }

    /// Stops the reaper and waits for it; see [`Timer::shutdown`].
    pub async fn shutdown(self) {
        self.timer.shutdown().await;
    }

    fn try_complete_watched(&self, state: &OpState<O>) -> Attempt {
        if state.is_completed() {
            return Attempt::AlreadyCompleted;
        }
        let slot = state.slot.lock();
        if state.is_completed() {
            return Attempt::AlreadyCompleted;
        }
        if !state.op.try_complete() {
            return Attempt::NotYet;
        }
        if self.complete(state, slot, Completion::Satisfied) {
            Attempt::Completed
        } else {
            Attempt::AlreadyCompleted
        }
    }

    /// Completes an operation whose lock the caller holds: releases the
    /// lock, removes the timer entry, then runs `on_complete`. Returns false
    /// (and does nothing) if it had completed already.
    fn complete(&self, state: &OpState<O>, slot: MutexGuard<'_, Slot>, how: Completion) -> bool {
        match self.shared.mark_completed(state, slot) {
            Marked::AlreadyCompleted => return false,
            Marked::Completed(Some(timer_key)) => {
                // Dropped here, outside the wheel's lock.
                drop(self.timer.cancel(timer_key));
            }
            Marked::Completed(None) => {}
        }
        state.op.on_complete(how);
        true
    }
}

impl<K: Hash + Eq + Clone, O: DelayedOperation> Shared<K, O> {
    /// Marks the operation completed and releases its lock.
    fn mark_completed(&self, state: &OpState<O>, mut slot: MutexGuard<'_, Slot>) -> Marked {
        if !state.mark_completed() {
            return Marked::AlreadyCompleted;
        }
        let timer_key = slot.timer_key.take();
        let watches = slot.watches;
        drop(slot);
        // Only an operation that went pending added its watches.
        if timer_key.is_some() {
            self.pending_entries.fetch_sub(watches, Ordering::Relaxed);
        }
        Marked::Completed(timer_key)
    }

    /// The timer's handler: the operation's timeout has passed.
    fn expire(&self, state: &OpState<O>) {
        if state.is_completed() {
            return;
        }
        let slot = state.slot.lock();
        // Completed between the timer's drain and now, by an event or a
        // cancel: that completion was the only one.
        if state.is_completed() {
            return;
        }
        // The timer has already removed the entry its key names.
        if let Marked::Completed(_expired_entry) = self.mark_completed(state, slot) {
            state.op.on_complete(Completion::Expired);
            self.maybe_purge();
        }
    }

    fn maybe_purge(&self) {
        let watched = self.watchers.len();
        let pending = self.pending_entries.load(Ordering::Relaxed);
        // The two loads race with concurrent watches and completions; the
        // estimate is off by the operations in flight, far below the
        // interval, and corrects itself at the next call.
        let stale = watched.saturating_sub(pending);
        // Kafka sweeps once `stale` passes the interval alone; with many
        // pending entries every sweep then walks them all to remove a few
        // (a mass expiry turns quadratic). Waiting until stale entries also
        // outnumber pending ones makes each sweep remove at least half of
        // what it walks, and still bounds memory by pending operations.
        if stale <= self.purge_interval.max(pending) {
            return;
        }
        if self.purging.swap(true, Ordering::Acquire) {
            return;
        }
        let purged = self.watchers.purge_completed();
        self.purging.store(false, Ordering::Release);
        tracing::debug!(purgatory = %self.name, purged, "purged completed operations from watcher lists");
    }
}

impl<K, O> fmt::Debug for Purgatory<K, O> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Purgatory")
            .field("name", &self.shared.name)
            .field("delayed", &self.timer.len())
            .field("watched", &self.shared.watchers.len())
            .finish()
    }
}

#[cfg(test)]
mod tests {
    use std::sync::atomic::AtomicUsize;

    use super::*;

    struct Gate {
        open: AtomicBool,
        completions: AtomicUsize,
    }

    impl DelayedOperation for Gate {
        fn try_complete(&self) -> bool {
            self.open.load(Ordering::Acquire)
        }

        fn on_complete(&self, _how: Completion) {
            self.completions.fetch_add(1, Ordering::Relaxed);
        }
    }

    fn gate() -> Arc<Gate> {
        Arc::new(Gate {
            open: AtomicBool::new(false),
            completions: AtomicUsize::new(0),
        })
    }

    /// Stale entries are exactly `watched - pending_entries` once quiet: if
    /// this drifted, the purge would run on every call, or never.
    #[tokio::test(start_paused = true)]
    async fn stale_entry_accounting_is_exact() {
        let purgatory: Purgatory<u32, Arc<Gate>> = Purgatory::with_config(
            "accounting",
            PurgatoryConfig {
                purge_interval_requests: usize::MAX,
                ..PurgatoryConfig::default()
            },
        );
        let mut handles = Vec::new();
        for i in 0..40u32 {
            let op = gate();
            match purgatory.try_complete_else_watch(
                op.clone(),
                Duration::from_secs(1),
                &[i % 4, 100 + i % 3],
            ) {
                Watched::Waiting(handle) => handles.push((op, handle)),
                Watched::Completed(how) => panic!("completed at once: {how:?}"),
            }
        }
        // Complete some by event, some by cancel, leave the rest pending.
        for (op, _) in &handles[..10] {
            op.open.store(true, Ordering::Release);
        }
        let satisfied: usize = (0..4).map(|key| purgatory.check_and_complete(&key)).sum();
        assert_eq!(satisfied, 10);
        for (_, handle) in &handles[10..20] {
            assert!(purgatory.cancel(handle));
        }
        let stale = purgatory.shared.watchers.len()
            - purgatory.shared.pending_entries.load(Ordering::Relaxed);
        // Opened ops left one entry each on keys 100..103; cancelled ones two.
        assert_eq!(stale, 10 + 2 * 10);
        assert_eq!(purgatory.shared.watchers.purge_completed(), stale);
        assert_eq!(purgatory.watched(), 2 * 20);
        assert_eq!(
            purgatory.shared.pending_entries.load(Ordering::Relaxed),
            2 * 20
        );

        // Expiry of the rest leaves nothing pending.
        tokio::time::sleep(Duration::from_millis(1001)).await;
        assert_eq!(purgatory.delayed(), 0);
        assert_eq!(purgatory.shared.pending_entries.load(Ordering::Relaxed), 0);
        for (op, _) in &handles {
            assert_eq!(op.completions.load(Ordering::Relaxed), 1);
        }
    }

    #[tokio::test(start_paused = true)]
    async fn checking_an_unwatched_key_adds_no_list() {
        let purgatory: Purgatory<u32, Arc<Gate>> = Purgatory::new("unwatched");
        assert_eq!(purgatory.check_and_complete(&7), 0);
        assert_eq!(purgatory.shared.watchers.keys(), 0);

        // A key whose last operation completed loses its list as well.
        let op = gate();
        let Watched::Waiting(_handle) =
            purgatory.try_complete_else_watch(op.clone(), Duration::from_secs(1), &[7])
        else {
            panic!("completed at once");
        };
        assert_eq!(purgatory.shared.watchers.keys(), 1);
        op.open.store(true, Ordering::Release);
        assert_eq!(purgatory.check_and_complete(&7), 1);
        assert_eq!(purgatory.shared.watchers.keys(), 0);
    }
}
