//! The leader-epoch cache: for each leader epoch, the first offset written in it
//! (Kafka's `LeaderEpochFileCache`). Followers use it to find where their log
//! diverges from a new leader's (KIP-101, KIP-279) instead of truncating to the
//! high watermark.
//!
//! This type is a plain state machine; the [`crate::Log`] owns one, keeps it
//! consistent with the log on truncation and retention, and checkpoints it.

use crate::checkpoint;
use crate::LogError;

/// One cache entry: leader `epoch` wrote its first record at `start_offset`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct EpochEntry {
    pub epoch: i32,
    pub start_offset: i64,
}

/// Entries strictly increasing in both epoch and start offset.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct LeaderEpochCache {
    entries: Vec<EpochEntry>,
}

impl LeaderEpochCache {
    /// An empty cache.
    pub fn new() -> Self {
        Self::default()
    }

    /// The entries, oldest first.
    pub fn entries(&self) -> &[EpochEntry] {
        &self.entries
    }

    /// The newest entry.
    pub fn latest(&self) -> Option<EpochEntry> {
        self.entries.last().copied()
    }

    /// The newest epoch.
    pub fn latest_epoch(&self) -> Option<i32> {
        self.latest().map(|e| e.epoch)
    }

    /// The first offset of `epoch`, if the cache holds it.
    pub fn start_offset(&self, epoch: i32) -> Option<i64> {
        self.entries
            .iter()
            .find(|e| e.epoch == epoch)
            .map(|e| e.start_offset)
    }

    /// Records that `epoch` starts at `start_offset`. A no-op when `epoch` is the
    /// latest epoch and `start_offset` is not below its start (the common case: every
    /// append of the current leader). Otherwise every entry that would break
    /// monotonicity (epoch >= `epoch` or start offset >= `start_offset`) is removed
    /// first. Returns whether the cache changed.
    pub fn assign(&mut self, epoch: i32, start_offset: i64) -> Result<bool, LogError> {
        if epoch < 0 || start_offset < 0 {
            return Err(LogError::InvalidEpochEntry {
                epoch,
                start_offset,
            });
        }
        if let Some(latest) = self.latest() {
            if latest.epoch == epoch && start_offset >= latest.start_offset {
                return Ok(false);
            }
        }
        let keep = self
            .entries
            .iter()
            .rposition(|e| e.epoch < epoch && e.start_offset < start_offset)
            .map_or(0, |i| i + 1);
        let removed = self.entries.split_off(keep);
        // Removing an entry that starts where the new one does is routine (an epoch
        // that never got a record); removing anything else drops history.
        if removed.len() > 1
            || removed
                .first()
                .is_some_and(|e| e.start_offset != start_offset)
        {
            tracing::warn!(
                epoch,
                start_offset,
                ?removed,
                "new leader epoch entry removed conflicting entries"
            );
        }
        self.entries.push(EpochEntry {
            epoch,
            start_offset,
        });
        Ok(true)
    }

    /// Where `requested_epoch` ends in a log whose end offset is `log_end_offset`:
    /// `(epoch, end_offset)`, as Kafka's `endOffsetFor` (the answer to
    /// OffsetsForLeaderEpoch):
    /// - the latest epoch: `(latest, log_end_offset)`;
    /// - an epoch between known ones: the largest known epoch <= the requested one,
    ///   and the start offset of the first larger epoch;
    /// - an epoch smaller than every entry: `(requested_epoch, first start offset)`.
    ///   Current Kafka returns the *requested* epoch here (older versions returned
    ///   -1): the data before the first entry was removed by retention, and the
    ///   follower should truncate to where the leader's known history starts;
    /// - a negative epoch, an epoch newer than the latest, or an empty cache: `None`
    ///   (UNDEFINED_EPOCH, UNDEFINED_OFFSET on the wire).
    pub fn end_offset_for(&self, requested_epoch: i32, log_end_offset: i64) -> Option<(i32, i64)> {
        if requested_epoch < 0 {
            return None;
        }
        let latest = self.latest()?;
        if requested_epoch == latest.epoch {
            return Some((requested_epoch, log_end_offset));
        }
        let higher = self.entries.partition_point(|e| e.epoch <= requested_epoch);
        let next = self.entries.get(higher)?;
        match higher.checked_sub(1).map(|i| self.entries[i]) {
            Some(floor) => Some((floor.epoch, next.start_offset)),
            None => Some((requested_epoch, next.start_offset)),
        }
    }

    /// Removes the entries starting at or after `end_offset` (the log was truncated
    /// there). Returns whether the cache changed.
    pub fn truncate_from_end(&mut self, end_offset: i64) -> bool {
        let keep = self
            .entries
            .partition_point(|e| e.start_offset < end_offset);
        let changed = keep < self.entries.len();
        self.entries.truncate(keep);
        changed
    }

    /// Drops the entries wholly before `start_offset` (retention removed their
    /// records); the epoch in force at `start_offset` is kept, moved to start there.
    /// Returns whether the cache changed.
    pub fn truncate_from_start(&mut self, start_offset: i64) -> bool {
        let covered = self
            .entries
            .partition_point(|e| e.start_offset <= start_offset);
        let Some(in_force) = covered.checked_sub(1).map(|i| self.entries[i]) else {
            return false;
        };
        let changed = covered > 1 || in_force.start_offset != start_offset;
        self.entries.drain(..covered - 1);
        self.entries[0].start_offset = start_offset;
        changed
    }

    /// Removes every entry. Returns whether the cache changed.
    pub fn clear(&mut self) -> bool {
        let changed = !self.entries.is_empty();
        self.entries.clear();
        changed
    }

    /// The checkpoint text (Kafka's `leader-epoch-checkpoint` format).
    pub fn to_checkpoint(&self) -> String {
        checkpoint::encode(
            self.entries
                .iter()
                .map(|e| format!("{} {}", e.epoch, e.start_offset)),
        )
    }

    /// Parses checkpoint text; the entries must be valid and strictly increasing.
    pub fn from_checkpoint(text: &str) -> Result<Self, String> {
        let mut cache = LeaderEpochCache::new();
        for line in checkpoint::decode(text)? {
            let mut fields = line.split_whitespace();
            let (Some(epoch), Some(offset), None) = (fields.next(), fields.next(), fields.next())
            else {
                return Err(format!("bad entry line {line:?}"));
            };
            let entry = EpochEntry {
                epoch: epoch
                    .parse()
                    .map_err(|e| format!("bad epoch {epoch:?}: {e}"))?,
                start_offset: offset
                    .parse()
                    .map_err(|e| format!("bad offset {offset:?}: {e}"))?,
            };
            let increasing = cache.latest().is_none_or(|last| {
                entry.epoch > last.epoch && entry.start_offset > last.start_offset
            });
            if entry.epoch < 0 || entry.start_offset < 0 || !increasing {
                return Err(format!("entry {line:?} breaks monotonicity"));
            }
            cache.entries.push(entry);
        }
        Ok(cache)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Cache entries as (epoch, start offset) pairs.
    type Pairs = &'static [(i32, i64)];

    fn cache(entries: &[(i32, i64)]) -> LeaderEpochCache {
        let mut c = LeaderEpochCache::new();
        for &(e, o) in entries {
            c.assign(e, o).unwrap();
        }
        assert_eq!(pairs(&c), entries, "fixture must be monotonic");
        c
    }

    fn pairs(c: &LeaderEpochCache) -> Vec<(i32, i64)> {
        c.entries()
            .iter()
            .map(|e| (e.epoch, e.start_offset))
            .collect()
    }

    #[test]
    fn assign_table() {
        // (initial, assign, changed, result)
        let cases: &[(Pairs, (i32, i64), bool, Pairs)] = &[
            (&[], (0, 0), true, &[(0, 0)]),
            (&[(1, 5)], (2, 10), true, &[(1, 5), (2, 10)]),
            // same epoch, later offset: the epoch started earlier, no-op
            (&[(1, 5)], (1, 9), false, &[(1, 5)]),
            (&[(1, 5)], (1, 5), false, &[(1, 5)]),
            // same epoch, earlier offset: the entry moves back
            (&[(1, 5)], (1, 3), true, &[(1, 3)]),
            // a new epoch at the same offset replaces an epoch that wrote nothing
            (&[(1, 5), (2, 8)], (3, 8), true, &[(1, 5), (3, 8)]),
            // an older epoch removes every newer one
            (
                &[(1, 5), (2, 8), (4, 12)],
                (3, 20),
                true,
                &[(1, 5), (2, 8), (3, 20)],
            ),
            // a larger epoch at a smaller offset removes entries at or after it
            (&[(1, 5), (2, 8), (4, 12)], (5, 8), true, &[(1, 5), (5, 8)]),
            (&[(1, 5), (2, 8)], (6, 0), true, &[(6, 0)]),
        ];
        for (initial, (epoch, offset), changed, result) in cases {
            let mut c = cache(initial);
            assert_eq!(
                c.assign(*epoch, *offset).unwrap(),
                *changed,
                "{initial:?} + {epoch},{offset}"
            );
            assert_eq!(pairs(&c), *result, "{initial:?} + {epoch},{offset}");
        }
    }

    #[test]
    fn assign_rejects_negative_fields() {
        let mut c = LeaderEpochCache::new();
        assert!(matches!(
            c.assign(-1, 0),
            Err(LogError::InvalidEpochEntry { .. })
        ));
        assert!(matches!(
            c.assign(0, -1),
            Err(LogError::InvalidEpochEntry { .. })
        ));
        assert!(c.entries().is_empty());
    }

    #[test]
    fn end_offset_for_table() {
        let c = cache(&[(1, 0), (3, 10), (6, 25)]);
        let leo = 40;
        let cases = [
            (6, Some((6, 40))), // the latest epoch ends at the log end
            (3, Some((3, 25))), // a known older epoch ends where the next starts
            (1, Some((1, 10))),
            (4, Some((3, 25))), // unknown epoch between: the largest known below it
            (5, Some((3, 25))),
            (2, Some((1, 10))),
            (0, Some((0, 0))), // older than every entry: (requested, first start)
            (7, None),         // newer than the latest: undefined
            (-1, None),        // UNDEFINED_EPOCH
        ];
        for (requested, expected) in cases {
            assert_eq!(
                c.end_offset_for(requested, leo),
                expected,
                "epoch {requested}"
            );
        }
        assert_eq!(LeaderEpochCache::new().end_offset_for(0, leo), None);
        let first_at_seven = cache(&[(2, 7), (5, 9)]);
        assert_eq!(first_at_seven.end_offset_for(1, leo), Some((1, 7)));
    }

    #[test]
    fn truncate_from_end_table() {
        const BASE: Pairs = &[(1, 0), (3, 10), (6, 25)];
        let cases: [(i64, bool, Pairs); 5] = [
            (30, false, BASE),
            (26, false, BASE),
            (25, true, &[(1, 0), (3, 10)]),
            (11, true, &[(1, 0), (3, 10)]),
            (0, true, &[]),
        ];
        for (end, changed, result) in cases {
            let mut c = cache(BASE);
            assert_eq!(c.truncate_from_end(end), changed, "end {end}");
            assert_eq!(pairs(&c), result, "end {end}");
        }
    }

    #[test]
    fn truncate_from_start_table() {
        const BASE: Pairs = &[(1, 0), (3, 10), (6, 25)];
        let cases: [(i64, bool, Pairs); 6] = [
            (0, false, BASE),
            (5, true, &[(1, 5), (3, 10), (6, 25)]),
            (10, true, &[(3, 10), (6, 25)]),
            (11, true, &[(3, 11), (6, 25)]),
            (25, true, &[(6, 25)]),
            (40, true, &[(6, 40)]),
        ];
        for (start, changed, result) in cases {
            let mut c = cache(BASE);
            assert_eq!(c.truncate_from_start(start), changed, "start {start}");
            assert_eq!(pairs(&c), result, "start {start}");
        }
        let mut later = cache(&[(2, 7)]);
        assert!(
            !later.truncate_from_start(3),
            "nothing before the first entry"
        );
        assert_eq!(pairs(&later), [(2, 7)]);
    }

    #[test]
    fn checkpoint_round_trip_and_rejects() {
        let c = cache(&[(1, 0), (3, 10), (6, 25)]);
        let text = c.to_checkpoint();
        assert_eq!(text, "0\n3\n1 0\n3 10\n6 25\n");
        assert_eq!(LeaderEpochCache::from_checkpoint(&text).unwrap(), c);
        assert_eq!(
            LeaderEpochCache::from_checkpoint("0\n0\n").unwrap(),
            LeaderEpochCache::new()
        );
        for bad in [
            "",
            "0\n2\n1 0\n",
            "0\n2\n3 10\n1 20\n",
            "0\n2\n1 10\n3 10\n",
            "0\n1\n1\n",
            "0\n1\n1 2 3\n",
            "0\n1\n-1 0\n",
            "7\n1\n1 0\n",
        ] {
            assert!(LeaderEpochCache::from_checkpoint(bad).is_err(), "{bad:?}");
        }
    }
}
