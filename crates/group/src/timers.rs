//! Deadlines by what they are for: at most one per key, earliest first.

use std::collections::{BTreeSet, HashMap};
use std::hash::Hash;

#[derive(Debug)]
pub(crate) struct Timers<K> {
    at: HashMap<K, i64>,
    order: BTreeSet<(i64, K)>,
}

impl<K> Default for Timers<K> {
    fn default() -> Self {
        Timers {
            at: HashMap::new(),
            order: BTreeSet::new(),
        }
    }
}

impl<K: Clone + Ord + Hash> Timers<K> {
    /// Sets (or moves) `key`'s deadline.
    pub(crate) fn set(&mut self, key: K, deadline: i64) {
        if let Some(old) = self.at.insert(key.clone(), deadline) {
            self.order.remove(&(old, key.clone()));
        }
        self.order.insert((deadline, key));
    }

    pub(crate) fn clear(&mut self, key: &K) {
        if let Some(old) = self.at.remove(key) {
            self.order.remove(&(old, key.clone()));
        }
    }

    pub(crate) fn next(&self) -> Option<i64> {
        self.order.first().map(|(at, _)| *at)
    }

    /// The earliest key whose deadline is at or before `now`, cleared.
    pub(crate) fn pop_due(&mut self, now: i64) -> Option<K> {
        let (at, _) = self.order.first()?;
        if *at > now {
            return None;
        }
        let (_, key) = self.order.pop_first()?;
        self.at.remove(&key);
        Some(key)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_moved_deadline_replaces_the_old_one_and_due_keys_come_out_earliest_first() {
        let mut t = Timers::default();
        t.set("a", 30);
        t.set("b", 10);
        t.set("a", 5);
        t.set("c", 20);
        t.clear(&"c");
        assert_eq!(t.next(), Some(5));
        assert_eq!(t.pop_due(4), None);
        assert_eq!(t.pop_due(10), Some("a"));
        assert_eq!(t.pop_due(10), Some("b"));
        assert_eq!(t.pop_due(i64::MAX), None);
        assert_eq!(t.next(), None);
    }
}
