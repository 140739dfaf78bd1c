//! Producer state (Kafka's `ProducerStateManager`): per producer id, its epoch and
//! the offsets and sequence numbers of its last five batches in this log. It is
//! what makes an idempotent producer's retries exactly-once per partition: the
//! leader answers a batch whose sequence numbers it already has with the offsets it
//! was written at, instead of writing it again, and refuses a gap in the sequence
//! or a fenced (older) epoch.
//!
//! The state is a pure function of the log's batches: [`ProducerStates::update`]
//! folds one batch in, in log order, and every log (leader or follower) applies it
//! to each batch it appends, so a follower that becomes leader dedupes retries of
//! batches its predecessor wrote. After a truncation or at start-up the state is
//! rebuilt by folding the remaining batches' headers again
//! ([`ProducerStates::rebuild`]).
//!
//! Batches without a producer id (-1: a non-idempotent producer) are ignored.

use std::collections::{HashMap, VecDeque};

use syncline_proto::batch::{last_sequence, next_sequence, BatchHeader};

/// How many of a producer's last batches are remembered for deduplication: a
/// producer has at most this many requests in flight (Kafka's bound on
/// `max.in.flight.requests.per.connection` with idempotence).
pub const BATCHES_PER_PRODUCER: usize = 5;

/// One remembered batch of a producer.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct BatchRef {
    pub first_sequence: i32,
    pub last_sequence: i32,
    pub first_offset: i64,
    pub last_offset: i64,
}

/// One producer's state in this log.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ProducerEntry {
    /// The latest epoch written.
    pub epoch: i16,
    /// Its last batches in this epoch, oldest first, at most
    /// [`BATCHES_PER_PRODUCER`].
    pub batches: VecDeque<BatchRef>,
    /// The max timestamp of its last batch.
    pub last_timestamp: i64,
}

impl ProducerEntry {
    fn last_sequence(&self) -> Option<i32> {
        self.batches.back().map(|b| b.last_sequence)
    }
}

/// What to do with a producer's batch.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SequenceCheck {
    /// Append it: no producer id, or the next sequence.
    Append,
    /// Already written, at these offsets: answer with them, write nothing.
    Duplicate { first_offset: i64, last_offset: i64 },
}

/// Why a producer's batch is refused.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
pub enum SequenceError {
    /// Not the sequence that follows the producer's last batch (Kafka's
    /// `OUT_OF_ORDER_SEQUENCE_NUMBER`).
    #[error("producer {producer_id}: sequence {got} does not follow {expected:?} (out of order)")]
    OutOfOrder {
        producer_id: i64,
        /// The sequence the next batch must start with (None: a new producer or
        /// epoch, whose first batch starts at 0).
        expected: Option<i32>,
        got: i32,
    },
    /// A batch past sequence 0 from a producer this log has no state of: its
    /// state expired (`producer_id_expiration_ms`) or went with the segments
    /// retention deleted (Kafka's `UNKNOWN_PRODUCER_ID`, KIP-360). The producer
    /// starts a new epoch at sequence 0.
    #[error("producer {producer_id}: no state here for sequence {got} (unknown producer)")]
    UnknownProducer { producer_id: i64, got: i32 },
    /// An epoch older than the producer's latest: a fenced, zombie instance
    /// (Kafka's `INVALID_PRODUCER_EPOCH`).
    #[error("producer {producer_id}: epoch {got} is older than its epoch {current} (fenced)")]
    FencedEpoch {
        producer_id: i64,
        current: i16,
        got: i16,
    },
}

fn batch_ref(h: &BatchHeader) -> BatchRef {
    BatchRef {
        first_sequence: h.base_sequence,
        last_sequence: last_sequence(h.base_sequence, h.records_count),
        first_offset: h.base_offset,
        last_offset: h.last_offset(),
    }
}

/// Every producer's state in one log.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct ProducerStates {
    producers: HashMap<i64, ProducerEntry>,
}

impl ProducerStates {
    /// The state of a log holding these batches (their headers, in log order).
    pub fn rebuild(headers: impl IntoIterator<Item = BatchHeader>) -> ProducerStates {
        let mut s = ProducerStates::default();
        for h in headers {
            s.update(&h);
        }
        s
    }

    /// How many producers have state here.
    pub fn len(&self) -> usize {
        self.producers.len()
    }

    /// True when no producer has state here.
    pub fn is_empty(&self) -> bool {
        self.producers.is_empty()
    }

    /// A producer's state.
    pub fn get(&self, producer_id: i64) -> Option<&ProducerEntry> {
        self.producers.get(&producer_id)
    }

    /// What the leader does with a producer's batch `h` (not yet stamped with
    /// offsets). Kafka's rules: a newer epoch starts at sequence 0; within the
    /// epoch, a batch matching one of the last five is a duplicate, and any other
    /// must start right after the last; an older epoch is fenced.
    pub fn check(&self, h: &BatchHeader) -> Result<SequenceCheck, SequenceError> {
        if h.producer_id < 0 {
            return Ok(SequenceCheck::Append);
        }
        let out_of_order = |expected| SequenceError::OutOfOrder {
            producer_id: h.producer_id,
            expected,
            got: h.base_sequence,
        };
        let Some(entry) = self.producers.get(&h.producer_id) else {
            return if h.base_sequence == 0 {
                Ok(SequenceCheck::Append)
            } else {
                Err(SequenceError::UnknownProducer {
                    producer_id: h.producer_id,
                    got: h.base_sequence,
                })
            };
        };
        if h.producer_epoch < entry.epoch {
            return Err(SequenceError::FencedEpoch {
                producer_id: h.producer_id,
                current: entry.epoch,
                got: h.producer_epoch,
            });
        }
        if h.producer_epoch > entry.epoch {
            return if h.base_sequence == 0 {
                Ok(SequenceCheck::Append)
            } else {
                Err(out_of_order(None))
            };
        }
        let last = last_sequence(h.base_sequence, h.records_count);
        if let Some(b) = entry
            .batches
            .iter()
            .find(|b| b.first_sequence == h.base_sequence && b.last_sequence == last)
        {
            return Ok(SequenceCheck::Duplicate {
                first_offset: b.first_offset,
                last_offset: b.last_offset,
            });
        }
        let expected = entry.last_sequence().map(next_sequence);
        if expected == Some(h.base_sequence) || (expected.is_none() && h.base_sequence == 0) {
            Ok(SequenceCheck::Append)
        } else {
            Err(out_of_order(expected))
        }
    }

    /// Forgets batches below `log_start` (deleted by retention), and producers
    /// left with none: the same state a rebuild from the remaining log gives.
    pub fn prune_below(&mut self, log_start: i64) {
        self.producers.retain(|_, entry| {
            entry.batches.retain(|b| b.last_offset >= log_start);
            !entry.batches.is_empty()
        });
    }

    /// Folds in batch `h` as written to the log (stamped with its offsets). No
    /// check: a follower takes what its leader wrote.
    pub fn update(&mut self, h: &BatchHeader) {
        if h.producer_id < 0 {
            return;
        }
        let entry = self
            .producers
            .entry(h.producer_id)
            .or_insert_with(|| ProducerEntry {
                epoch: h.producer_epoch,
                batches: VecDeque::new(),
                last_timestamp: -1,
            });
        if h.producer_epoch != entry.epoch {
            entry.epoch = h.producer_epoch;
            entry.batches.clear();
        }
        if entry.batches.len() == BATCHES_PER_PRODUCER {
            entry.batches.pop_front();
        }
        entry.batches.push_back(batch_ref(h));
        entry.last_timestamp = h.max_timestamp;
    }
}

/// What a producer-state snapshot file's name ends with: `<offset, 20 digits>.snapshot`
/// holds the state of every batch below that offset.
pub(crate) const SNAPSHOT_SUFFIX: &str = ".snapshot";

const SNAPSHOT_MAGIC: &[u8; 4] = b"SLPS";
const SNAPSHOT_VERSION: u8 = 1;

/// Reads big-endian fields off the front of a snapshot.
struct Reader<'a>(&'a [u8]);

impl Reader<'_> {
    fn take<const N: usize>(&mut self) -> Result<[u8; N], String> {
        if self.0.len() < N {
            return Err("cut short".into());
        }
        let (head, rest) = self.0.split_at(N);
        self.0 = rest;
        Ok(head.try_into().expect("split at N"))
    }
    fn i64(&mut self) -> Result<i64, String> {
        self.take().map(i64::from_be_bytes)
    }
    fn i32(&mut self) -> Result<i32, String> {
        self.take().map(i32::from_be_bytes)
    }
    fn i16(&mut self) -> Result<i16, String> {
        self.take().map(i16::from_be_bytes)
    }
    fn u8(&mut self) -> Result<u8, String> {
        self.take::<1>().map(|[b]| b)
    }
}

impl ProducerStates {
    /// The state as a snapshot file's bytes (Kafka snapshots producer state
    /// beside segments so that a restart replays only the log after it):
    /// magic, version, every producer (by id) with its epoch, last timestamp and
    /// remembered batches, then a CRC-32C of all before it.
    pub fn encode_snapshot(&self) -> Vec<u8> {
        let mut ids: Vec<&i64> = self.producers.keys().collect();
        ids.sort_unstable();
        let mut out = Vec::with_capacity(16 + ids.len() * 64);
        out.extend_from_slice(SNAPSHOT_MAGIC);
        out.push(SNAPSHOT_VERSION);
        out.extend_from_slice(&(ids.len() as u32).to_be_bytes());
        for id in ids {
            let entry = &self.producers[id];
            out.extend_from_slice(&id.to_be_bytes());
            out.extend_from_slice(&entry.epoch.to_be_bytes());
            out.extend_from_slice(&entry.last_timestamp.to_be_bytes());
            // At most BATCHES_PER_PRODUCER (5).
            out.push(entry.batches.len() as u8);
            for b in &entry.batches {
                out.extend_from_slice(&b.first_sequence.to_be_bytes());
                out.extend_from_slice(&b.last_sequence.to_be_bytes());
                out.extend_from_slice(&b.first_offset.to_be_bytes());
                out.extend_from_slice(&b.last_offset.to_be_bytes());
            }
        }
        let crc = crc32c::crc32c(&out);
        out.extend_from_slice(&crc.to_be_bytes());
        out
    }

    /// A snapshot's state back; `Err` says why the bytes are not one (torn,
    /// corrupt, another version), and the log then rebuilds from its batches.
    pub fn decode_snapshot(bytes: &[u8]) -> Result<ProducerStates, String> {
        let Some((body, crc)) = bytes.split_last_chunk::<4>() else {
            return Err("cut short".into());
        };
        if crc32c::crc32c(body) != u32::from_be_bytes(*crc) {
            return Err("CRC mismatch".into());
        }
        let mut r = Reader(body);
        if &r.take::<4>()? != SNAPSHOT_MAGIC {
            return Err("not a producer-state snapshot".into());
        }
        let version = r.u8()?;
        if version != SNAPSHOT_VERSION {
            return Err(format!("version {version}, not {SNAPSHOT_VERSION}"));
        }
        let count = u32::from_be_bytes(r.take()?);
        let mut producers = HashMap::new();
        for _ in 0..count {
            let id = r.i64()?;
            let epoch = r.i16()?;
            let last_timestamp = r.i64()?;
            let n = usize::from(r.u8()?);
            if n == 0 || n > BATCHES_PER_PRODUCER {
                return Err(format!("producer {id} with {n} batches"));
            }
            let mut batches = VecDeque::with_capacity(n);
            for _ in 0..n {
                batches.push_back(BatchRef {
                    first_sequence: r.i32()?,
                    last_sequence: r.i32()?,
                    first_offset: r.i64()?,
                    last_offset: r.i64()?,
                });
            }
            let entry = ProducerEntry {
                epoch,
                batches,
                last_timestamp,
            };
            if producers.insert(id, entry).is_some() {
                return Err(format!("producer {id} twice"));
            }
        }
        if !r.0.is_empty() {
            return Err("bytes after the last producer".into());
        }
        Ok(ProducerStates { producers })
    }

    /// Forgets producers whose last batch is older than `max_age_ms` at `now_ms`
    /// (Kafka's `producer.id.expiration.ms`); returns how many. A retry of such
    /// a producer is then answered `UNKNOWN_PRODUCER_ID`.
    pub fn expire(&mut self, now_ms: i64, max_age_ms: i64) -> usize {
        let before = self.producers.len();
        self.producers
            .retain(|_, e| now_ms.saturating_sub(e.last_timestamp) <= max_age_ms);
        before - self.producers.len()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn header(pid: i64, epoch: i16, seq: i32, count: i32, base_offset: i64) -> BatchHeader {
        BatchHeader {
            base_offset,
            batch_length: 0,
            partition_leader_epoch: 0,
            magic: 2,
            crc: 0,
            attributes: 0,
            last_offset_delta: count - 1,
            base_timestamp: 0,
            max_timestamp: base_offset,
            producer_id: pid,
            producer_epoch: epoch,
            base_sequence: seq,
            records_count: count,
        }
    }

    #[test]
    fn sequences_follow_on_duplicates_answer_with_their_offsets_and_gaps_are_refused() {
        let mut s = ProducerStates::default();
        // Table: (pid, epoch, seq, count) -> outcome, then written at the next offset.
        let mut offset = 0;
        type Case = (i64, i16, i32, i32, Result<SequenceCheck, SequenceError>);
        let cases: &[Case] = &[
            (7, 0, 0, 3, Ok(SequenceCheck::Append)),
            (7, 0, 3, 2, Ok(SequenceCheck::Append)),
            // A retry of the first batch.
            (
                7,
                0,
                0,
                3,
                Ok(SequenceCheck::Duplicate {
                    first_offset: 0,
                    last_offset: 2,
                }),
            ),
            // A gap.
            (
                7,
                0,
                6,
                1,
                Err(SequenceError::OutOfOrder {
                    producer_id: 7,
                    expected: Some(5),
                    got: 6,
                }),
            ),
            // A producer with no state here must start at 0.
            (
                8,
                0,
                4,
                1,
                Err(SequenceError::UnknownProducer {
                    producer_id: 8,
                    got: 4,
                }),
            ),
            (-1, -1, -1, 4, Ok(SequenceCheck::Append)),
            // A new epoch starts at 0 and fences the old one.
            (7, 1, 0, 1, Ok(SequenceCheck::Append)),
            (
                7,
                0,
                5,
                1,
                Err(SequenceError::FencedEpoch {
                    producer_id: 7,
                    current: 1,
                    got: 0,
                }),
            ),
            (
                7,
                2,
                3,
                1,
                Err(SequenceError::OutOfOrder {
                    producer_id: 7,
                    expected: None,
                    got: 3,
                }),
            ),
        ];
        for (i, &(pid, epoch, seq, count, expected)) in cases.iter().enumerate() {
            let h = header(pid, epoch, seq, count, offset);
            assert_eq!(s.check(&h), expected, "case {i}");
            if expected == Ok(SequenceCheck::Append) {
                s.update(&h);
                offset += i64::from(count);
            }
        }
        assert_eq!(s.len(), 1, "only producer 7 wrote");
        assert_eq!(s.get(7).unwrap().epoch, 1);
    }

    #[test]
    fn only_the_last_five_batches_are_remembered_and_sequences_wrap() {
        let mut s = ProducerStates::default();
        for i in 0..7 {
            s.update(&header(1, 0, i, 1, i64::from(i)));
        }
        let entry = s.get(1).unwrap();
        assert_eq!(entry.batches.len(), BATCHES_PER_PRODUCER);
        assert_eq!(entry.batches.front().unwrap().first_sequence, 2);
        // Batch 1 fell out of the window: it is neither a duplicate nor next.
        assert!(s.check(&header(1, 0, 1, 1, 9)).is_err());
        assert_eq!(
            s.check(&header(1, 0, 6, 1, 9)),
            Ok(SequenceCheck::Duplicate {
                first_offset: 6,
                last_offset: 6
            })
        );
        // A batch ending at i32::MAX is followed by one starting at 0.
        let mut s = ProducerStates::default();
        s.update(&header(2, 0, 0, 1, 0));
        s.update(&header(2, 0, 1, 1, 1));
        let mut w = ProducerStates::default();
        w.update(&header(3, 0, i32::MAX - 1, 2, 0));
        assert_eq!(last_sequence(i32::MAX - 1, 2), i32::MAX);
        assert_eq!(w.check(&header(3, 0, 0, 1, 2)), Ok(SequenceCheck::Append));
        assert_eq!(last_sequence(i32::MAX, 3), 1);
    }

    #[test]
    fn snapshots_round_trip_and_damage_is_refused() {
        let mut s = ProducerStates::default();
        for i in 0..7 {
            s.update(&header(i % 3, 0, i32::try_from(i / 3).unwrap(), 1, i));
        }
        let bytes = s.encode_snapshot();
        assert_eq!(ProducerStates::decode_snapshot(&bytes), Ok(s.clone()));
        assert_eq!(
            ProducerStates::decode_snapshot(&ProducerStates::default().encode_snapshot()),
            Ok(ProducerStates::default())
        );
        for cut in [0, 3, bytes.len() - 1] {
            assert!(
                ProducerStates::decode_snapshot(&bytes[..cut]).is_err(),
                "cut at {cut}"
            );
        }
        let mut flipped = bytes.clone();
        flipped[10] ^= 1;
        assert_eq!(
            ProducerStates::decode_snapshot(&flipped),
            Err("CRC mismatch".into())
        );
    }

    #[test]
    fn producers_expire_after_their_last_batch() {
        let mut s = ProducerStates::default();
        // header(): max_timestamp is the base offset.
        s.update(&header(1, 0, 0, 1, 100));
        s.update(&header(2, 0, 0, 1, 500));
        assert_eq!(s.expire(600, 200), 1);
        assert!(s.get(1).is_none() && s.get(2).is_some());
        assert_eq!(
            s.check(&header(1, 0, 1, 1, 700)),
            Err(SequenceError::UnknownProducer {
                producer_id: 1,
                got: 1
            })
        );
    }

    /// One producer step: (producer 0..3, epoch bump?, records 1..4).
    fn arb_steps() -> impl Strategy<Value = Vec<(i64, bool, i32)>> {
        proptest::collection::vec((0i64..3, proptest::bool::weighted(0.1), 1i32..4), 1..60)
    }

    proptest! {
        /// The state kept by folding each append equals the state rebuilt from the
        /// log's headers, at every point: what a restart or a truncation to that
        /// point rebuilds is what the leader had.
        #[test]
        fn folding_appends_equals_rebuilding_from_any_prefix(steps in arb_steps()) {
            let mut live = ProducerStates::default();
            let mut log: Vec<BatchHeader> = Vec::new();
            let mut next: HashMap<i64, (i16, i32)> = HashMap::new();
            let mut offset = 0i64;
            let mut snapshots = Vec::new();
            for (pid, bump, count) in steps {
                let (epoch, seq) = next.entry(pid).or_insert((0, 0));
                if bump {
                    *epoch += 1;
                    *seq = 0;
                }
                let h = header(pid, *epoch, *seq, count, offset);
                prop_assert_eq!(live.check(&h), Ok(SequenceCheck::Append));
                live.update(&h);
                *seq = next_sequence(last_sequence(*seq, count));
                offset += i64::from(count);
                log.push(h);
                snapshots.push(live.clone());
            }
            for (i, snapshot) in snapshots.iter().enumerate() {
                prop_assert_eq!(&ProducerStates::rebuild(log[..=i].iter().copied()), snapshot);
            }
            // Retention: pruning below any batch start equals rebuilding from there.
            for start in 0..log.len() {
                let mut pruned = live.clone();
                pruned.prune_below(log[start].base_offset);
                prop_assert_eq!(&pruned, &ProducerStates::rebuild(log[start..].iter().copied()));
            }
            // Every batch still in a producer's window is a duplicate of itself.
            for h in &log {
                let entry = live.get(h.producer_id).unwrap();
                if entry.epoch == h.producer_epoch
                    && entry.batches.iter().any(|b| b.first_offset == h.base_offset)
                {
                    prop_assert_eq!(
                        live.check(h),
                        Ok(SequenceCheck::Duplicate { first_offset: h.base_offset, last_offset: h.last_offset() })
                    );
                }
            }
        }
    }
}
