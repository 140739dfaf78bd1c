//! The watcher lists: for each key, the operations waiting on it.
//!
//! Keys are spread over shards, each a mutex around a map, so that events on
//! different partitions rarely meet on a lock. A shard lock is a leaf: it is
//! never held while an operation's lock is taken or `try_complete` runs
//! (callers work on a snapshot), which is what keeps the purgatory free of
//! lock-order deadlocks.

use std::collections::HashMap;
use std::hash::{BuildHasher, Hash, RandomState};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;

use parking_lot::Mutex;

use crate::operation::OpState;

/// Below this capacity a list keeps its allocation when it shrinks.
const MIN_SHRINK_CAPACITY: usize = 64;

type List<O> = Vec<Arc<OpState<O>>>;
type Shard<K, O> = Mutex<HashMap<K, List<O>>>;

pub(crate) struct WatcherMap<K, O> {
    shards: Box<[Shard<K, O>]>,
    hasher: RandomState,
    /// Watcher entries over all lists, completed ones included.
    entries: AtomicUsize,
}

impl<K, O> WatcherMap<K, O> {
    pub(crate) fn len(&self) -> usize {
        self.entries.load(Ordering::Relaxed)
    }
}

impl<K: Hash + Eq + Clone, O> WatcherMap<K, O> {
    pub(crate) fn new(shards: usize) -> Self {
        Self {
            shards: (0..shards.max(1))
                .map(|_| Mutex::new(HashMap::new()))
                .collect(),
            hasher: RandomState::new(),
            entries: AtomicUsize::new(0),
        }
    }

    fn shard(&self, key: &K) -> &Shard<K, O> {
        let hash = self.hasher.hash_one(key);
        // The remainder is below the shard count, which is a usize.
        &self.shards[(hash % self.shards.len() as u64) as usize]
    }

    pub(crate) fn watch(&self, key: &K, op: Arc<OpState<O>>) {
        let mut shard = self.shard(key).lock();
        match shard.get_mut(key) {
            Some(list) => list.push(op),
            None => {
                shard.insert(key.clone(), vec![op]);
            }
        }
        self.entries.fetch_add(1, Ordering::Relaxed);
    }

    /// The operations watching `key`, or `None` (without allocating) if
    /// there are none.
    pub(crate) fn snapshot(&self, key: &K) -> Option<List<O>> {
        self.shard(key).lock().get(key).cloned()
    }

    /// Drops completed operations from `key`'s list, and the list itself
    /// once empty so that keys do not accumulate.
    pub(crate) fn remove_completed(&self, key: &K) {
        let mut shard = self.shard(key).lock();
        let Some(list) = shard.get_mut(key) else {
            return;
        };
        let removed = retain_pending(list);
        if list.is_empty() {
            shard.remove(key);
        }
        drop(shard);
        self.entries.fetch_sub(removed, Ordering::Relaxed);
    }

    /// Removes `key`'s list and returns it.
    pub(crate) fn take(&self, key: &K) -> List<O> {
        let list = self.shard(key).lock().remove(key).unwrap_or_default();
        self.entries.fetch_sub(list.len(), Ordering::Relaxed);
        list
    }

    /// Drops completed operations from every list; returns how many entries
    /// went. Takes one shard lock at a time.
    pub(crate) fn purge_completed(&self) -> usize {
        let mut purged = 0;
        for shard in self.shards.iter() {
            let mut shard = shard.lock();
            shard.retain(|_, list| {
                purged += retain_pending(list);
                !list.is_empty()
            });
        }
        self.entries.fetch_sub(purged, Ordering::Relaxed);
        purged
    }

    #[cfg(test)]
    pub(crate) fn keys(&self) -> usize {
        self.shards.iter().map(|shard| shard.lock().len()).sum()
    }
}

/// Keeps the operations not yet completed; returns how many were dropped.
fn retain_pending<O>(list: &mut List<O>) -> usize {
    let before = list.len();
    list.retain(|op| !op.is_completed());
    // A list that once held a burst keeps its capacity otherwise, and memory
    // would grow with past load rather than pending operations.
    if list.capacity() > MIN_SHRINK_CAPACITY && list.len() < list.capacity() / 4 {
        list.shrink_to(list.len() * 2);
    }
    before - list.len()
}
