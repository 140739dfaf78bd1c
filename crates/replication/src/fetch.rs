//! The rules of a fetch that span its partitions or bound one read:
//! - [`FetchBudget`]: the request's `max_bytes` across partitions, where only
//!   the first partition with data may go past it (one batch at least, so a
//!   large batch cannot stall the reader);
//! - [`answer_now`] and [`ready`]: whether a fetch is answered at once or
//!   parked in the purgatory, and when a parked one may be answered;
//! - [`plan_read`] and [`plan_follower_read`]: which offsets a read may ask
//!   for (OFFSET_OUT_OF_RANGE outside the log), up to where it reads (the high
//!   watermark for consumers, the log end for followers and the leader's own
//!   reads), and for followers the KIP-595 divergence check before the range.
//!
//! [`FetchFrom`] says who fetches. Per partition, the core decides the rest: who may read and under which
//! epoch (`PartitionCore::consumer_high_watermark`, `check_follower_read`),
//! where logs diverge (`diverging_epoch`), and whether a waiting fetch's
//! partition changed (`fetch_readiness`).

use std::time::Duration;

use syncline_proto::{EpochEndOffset, ErrorCode};

use crate::partition::core::diverging_epoch;
use crate::partition::FetchReadiness;

/// Who a fetch (or a ListOffsets) is from.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum FetchFrom {
    /// A consumer. `follower_read`: it named its rack (KIP-392), so a
    /// follower may serve it, up to that follower's high watermark.
    Consumer {
        /// Whether a follower may serve it.
        follower_read: bool,
    },
    /// A follower replica.
    Follower {
        /// Its broker id.
        id: i32,
        /// The broker epoch it runs in, when it named one.
        epoch: Option<i64>,
    },
}

impl FetchFrom {
    /// From the wire: a `replica_id` of a broker (≥ 0) is a follower, any
    /// other a consumer; a negative `replica_epoch` names none.
    #[must_use]
    pub fn from_wire(replica_id: i32, replica_epoch: i64, rack_id: &str) -> FetchFrom {
        if replica_id >= 0 {
            FetchFrom::Follower {
                id: replica_id,
                epoch: crate::isr::named_broker_epoch(replica_epoch),
            }
        } else {
            FetchFrom::Consumer {
                follower_read: !rack_id.is_empty(),
            }
        }
    }

    /// Whether a follower replica fetches.
    #[must_use]
    pub fn is_follower(self) -> bool {
        matches!(self, FetchFrom::Follower { .. })
    }

    /// Whether a consumer may be served by a follower.
    #[must_use]
    pub fn follower_read(self) -> bool {
        matches!(
            self,
            FetchFrom::Consumer {
                follower_read: true
            }
        )
    }
}

/// A fetch's byte budget (`max_bytes`) as its partitions are read in order.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct FetchBudget {
    max_bytes: usize,
    used: usize,
}

impl FetchBudget {
    /// A budget of `max_bytes` for the whole response.
    #[must_use]
    pub fn new(max_bytes: usize) -> FetchBudget {
        FetchBudget { max_bytes, used: 0 }
    }

    /// Bytes sent so far.
    #[must_use]
    pub fn used(&self) -> usize {
        self.used
    }

    /// The most the next partition may read: its own `partition_max_bytes`
    /// within what is left, and at least one byte (so one whole batch) while
    /// no partition has sent data yet.
    #[must_use]
    pub fn read_limit(&self, partition_max_bytes: usize) -> usize {
        let max = partition_max_bytes.min(self.remaining());
        if self.used == 0 {
            max.max(1)
        } else {
            max
        }
    }

    /// Whether `len` bytes read for the next partition are sent: not when a
    /// replication throttle holds them back, nor past the budget unless no
    /// partition has sent data yet. What is sent counts against the budget.
    pub fn admit(&mut self, len: usize, held_back: bool) -> bool {
        let send = !held_back && (self.used == 0 || len <= self.remaining());
        if send {
            self.used += len;
        }
        send
    }

    fn remaining(&self) -> usize {
        self.max_bytes.saturating_sub(self.used)
    }
}

/// Whether a fetch is answered at once rather than parked in the purgatory:
/// it may not wait (`max_wait` zero), it already has `min_bytes`, or it has
/// something to say at once (`must_answer`: an error, a diverging epoch,
/// nothing to wait on).
#[must_use]
pub fn answer_now(
    max_wait: Duration,
    read_bytes: usize,
    min_bytes: u64,
    must_answer: bool,
) -> bool {
    max_wait.is_zero() || read_bytes as u64 >= min_bytes || must_answer
}

/// One partition of a waiting fetch, as [`ready`] weighs it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct WaitingPartition {
    /// What the partition has for the fetch.
    pub readiness: FetchReadiness,
    /// The partition's `partition_max_bytes`: no more of its bytes count.
    pub partition_max_bytes: usize,
    /// A replication throttle holds its records back now: they would be
    /// answered as nothing, and the follower would ask again at once.
    pub held_back: bool,
    /// Its high watermark moved past the one the fetch's first read saw, and
    /// the fetch wants to learn it at once (`push_high_watermark`).
    pub high_watermark_moved: bool,
}

/// Whether a waiting fetch may be answered now: a partition changed under it,
/// a high watermark it watches moved, or `min_bytes` are there to read. The
/// partitions are looked at in order and no further than needed.
pub fn ready(min_bytes: u64, partitions: impl IntoIterator<Item = WaitingPartition>) -> bool {
    let mut available = 0u64;
    for p in partitions {
        match p.readiness {
            FetchReadiness::Changed => return true,
            FetchReadiness::Bytes(_) if p.held_back => {}
            FetchReadiness::Bytes(n) => available += n.min(p.partition_max_bytes as u64),
        }
        if p.high_watermark_moved {
            return true;
        }
    }
    available >= min_bytes
}

/// A log's offsets as a read sees them.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct LogBounds {
    /// The log start offset.
    pub start: i64,
    /// The log end offset.
    pub end: i64,
}

/// Who reads, and so up to where.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Reader {
    /// A consumer: up to the high watermark it was given.
    Consumer {
        /// The high watermark the read is cut at.
        high_watermark: i64,
    },
    /// A follower, or the leader reading its own log: up to the log end.
    Replica,
}

/// Where a read may go: `Ok(None)` reads nothing (at or past its upper
/// bound), `Ok(Some(upper))` reads from the fetch offset up to `upper`. An
/// offset below the log start or past its end is `OFFSET_OUT_OF_RANGE` (the
/// log end itself is in range: nothing to read yet).
pub fn plan_read(
    reader: Reader,
    fetch_offset: i64,
    log: LogBounds,
) -> Result<Option<i64>, ErrorCode> {
    if fetch_offset < log.start || fetch_offset > log.end {
        return Err(ErrorCode::OffsetOutOfRange);
    }
    let upper = match reader {
        Reader::Consumer { high_watermark } => high_watermark,
        Reader::Replica => log.end,
    };
    Ok((fetch_offset < upper).then_some(upper))
}

/// What a follower's fetch reads.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum FollowerRead {
    /// The follower's log diverges from this leader's: no records, and where
    /// its epoch ends here (KIP-595), so that it truncates first.
    Diverging(EpochEndOffset),
    /// Records from the fetch offset up to this offset (None: nothing yet).
    Records(Option<i64>),
}

/// A follower's read: the divergence check comes first (KIP-595: a follower
/// whose last fetched epoch ends earlier here must truncate, even when its
/// offset is past this log's end), then [`plan_read`]'s range.
/// `end_offset_for_epoch` is this log's end of an epoch.
pub fn plan_follower_read(
    fetch_offset: i64,
    last_fetched_epoch: Option<i32>,
    end_offset_for_epoch: impl FnOnce(i32) -> EpochEndOffset,
    log: LogBounds,
) -> Result<FollowerRead, ErrorCode> {
    if let Some(epoch) = last_fetched_epoch {
        if let Some(d) = diverging_epoch(epoch, fetch_offset, end_offset_for_epoch(epoch)) {
            return Ok(FollowerRead::Diverging(d));
        }
    }
    plan_read(Reader::Replica, fetch_offset, log).map(FollowerRead::Records)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_broker_id_is_a_follower_and_a_rack_lets_a_consumer_read_from_one() {
        for (replica_id, epoch, rack, want) in [
            (
                2,
                7,
                "",
                FetchFrom::Follower {
                    id: 2,
                    epoch: Some(7),
                },
            ),
            (2, -1, "r1", FetchFrom::Follower { id: 2, epoch: None }),
            (
                0,
                0,
                "",
                FetchFrom::Follower {
                    id: 0,
                    epoch: Some(0),
                },
            ),
            (
                -1,
                -1,
                "",
                FetchFrom::Consumer {
                    follower_read: false,
                },
            ),
            (
                -1,
                -1,
                "r1",
                FetchFrom::Consumer {
                    follower_read: true,
                },
            ),
            (
                -5,
                3,
                "r1",
                FetchFrom::Consumer {
                    follower_read: true,
                },
            ),
        ] {
            let from = FetchFrom::from_wire(replica_id, epoch, rack);
            assert_eq!(from, want, "replica_id {replica_id}, rack {rack:?}");
            assert_eq!(from.is_follower(), replica_id >= 0);
            assert_eq!(from.follower_read(), replica_id < 0 && !rack.is_empty());
        }
    }

    /// Kafka's ReplicaManagerTest "fetch max bytes": the first partition with
    /// data may go past the budget, later ones send nothing this round.
    #[test]
    fn only_the_first_partition_with_data_may_exceed_the_budget() {
        // (partition_max_bytes, bytes read, held back) -> (limit asked, sent)
        struct Case {
            name: &'static str,
            max_bytes: usize,
            parts: Vec<(usize, usize, bool)>,
            want: Vec<(usize, bool)>,
        }
        let cases = [
            Case {
                name: "within the budget",
                max_bytes: 100,
                parts: vec![(50, 40, false), (50, 40, false)],
                want: vec![(50, true), (50, true)],
            },
            Case {
                name: "a first batch larger than everything is sent",
                max_bytes: 10,
                parts: vec![(50, 40, false), (50, 5, false)],
                want: vec![(10, true), (0, false)],
            },
            Case {
                name: "a zero budget still reads one batch",
                max_bytes: 0,
                parts: vec![(50, 30, false)],
                want: vec![(1, true)],
            },
            Case {
                name: "an empty first partition leaves the exception to the next",
                max_bytes: 10,
                parts: vec![(50, 0, false), (50, 30, false), (50, 1, false)],
                want: vec![(10, true), (10, true), (0, false)],
            },
            Case {
                name: "held back by a throttle: nothing sent, nothing used",
                max_bytes: 100,
                parts: vec![(50, 40, true), (50, 40, false)],
                want: vec![(50, false), (50, true)],
            },
            Case {
                name: "a later partition past what is left sends nothing",
                max_bytes: 100,
                parts: vec![(80, 80, false), (50, 30, false), (50, 20, false)],
                want: vec![(80, true), (20, false), (20, true)],
            },
        ];
        for c in cases {
            let mut budget = FetchBudget::new(c.max_bytes);
            let got: Vec<(usize, bool)> = c
                .parts
                .iter()
                .map(|&(pmax, len, held)| (budget.read_limit(pmax), budget.admit(len, held)))
                .collect();
            assert_eq!(got, c.want, "{}", c.name);
        }
    }

    #[test]
    fn a_waiting_fetch_is_ready_when_a_partition_changed_its_hw_moved_or_min_bytes_are_there() {
        let bytes = |n, held_back, moved| WaitingPartition {
            readiness: FetchReadiness::Bytes(n),
            partition_max_bytes: 100,
            held_back,
            high_watermark_moved: moved,
        };
        let changed = WaitingPartition {
            readiness: FetchReadiness::Changed,
            ..bytes(0, false, false)
        };
        for (name, min_bytes, parts, want) in [
            ("nothing yet", 1, vec![bytes(0, false, false)], false),
            (
                "min_bytes over two partitions",
                10,
                vec![bytes(6, false, false), bytes(4, false, false)],
                true,
            ),
            (
                "a partition counts up to its max",
                150,
                vec![bytes(500, false, false), bytes(40, false, false)],
                false,
            ),
            (
                "held-back bytes do not count",
                1,
                vec![bytes(50, true, false)],
                false,
            ),
            (
                "a changed partition answers at once",
                1_000,
                vec![bytes(0, false, false), changed],
                true,
            ),
            (
                "a moved HW answers at once",
                1_000,
                vec![bytes(0, true, true)],
                true,
            ),
            (
                "min_bytes 0 answers at once",
                0,
                vec![bytes(0, false, false)],
                true,
            ),
        ] {
            assert_eq!(ready(min_bytes, parts), want, "{name}");
        }
    }

    #[test]
    fn ready_looks_no_further_than_the_first_changed_partition() {
        let mut looked = 0;
        let parts = [FetchReadiness::Changed, FetchReadiness::Bytes(1)].map(|r| WaitingPartition {
            readiness: r,
            partition_max_bytes: 1,
            held_back: false,
            high_watermark_moved: false,
        });
        assert!(ready(10, parts.into_iter().inspect(|_| looked += 1)));
        assert_eq!(looked, 1);
    }

    /// Kafka's ReplicaManagerTest/PartitionTest "fetch offset out of range":
    /// the log end is in range, one past it is not; consumers stop at the HW.
    #[test]
    fn offsets_out_of_the_log_are_refused_and_reads_stop_at_their_bound() {
        let log = LogBounds { start: 10, end: 50 };
        let consumer = Reader::Consumer { high_watermark: 40 };
        for (name, reader, offset, want) in [
            (
                "below the log start",
                consumer,
                9,
                Err(ErrorCode::OffsetOutOfRange),
            ),
            (
                "past the log end",
                consumer,
                51,
                Err(ErrorCode::OffsetOutOfRange),
            ),
            ("a consumer reads to the HW", consumer, 10, Ok(Some(40))),
            ("a consumer at the HW reads nothing", consumer, 40, Ok(None)),
            (
                "a consumer past the HW, below the end: nothing",
                consumer,
                45,
                Ok(None),
            ),
            ("a consumer at the log end: nothing", consumer, 50, Ok(None)),
            (
                "a replica reads to the end",
                Reader::Replica,
                45,
                Ok(Some(50)),
            ),
            (
                "a replica at the end reads nothing",
                Reader::Replica,
                50,
                Ok(None),
            ),
            (
                "a replica past the end",
                Reader::Replica,
                51,
                Err(ErrorCode::OffsetOutOfRange),
            ),
            (
                "a replica below the start",
                Reader::Replica,
                0,
                Err(ErrorCode::OffsetOutOfRange),
            ),
        ] {
            assert_eq!(plan_read(reader, offset, log), want, "{name}");
        }
    }

    /// KIP-595: the divergence check before the range, so a follower past
    /// the leader's end with a divergent epoch learns where to truncate
    /// instead of getting OFFSET_OUT_OF_RANGE.
    #[test]
    fn a_follower_read_checks_divergence_before_the_offset_range() {
        let log = LogBounds { start: 0, end: 50 };
        // Epoch 3 ends at 30 here; the follower fetched epoch 3 up to 60.
        let ends_at_30 = |_| EpochEndOffset {
            epoch: 3,
            end_offset: 30,
        };
        assert_eq!(
            plan_follower_read(60, Some(3), ends_at_30, log),
            Ok(FollowerRead::Diverging(EpochEndOffset {
                epoch: 3,
                end_offset: 30
            }))
        );
        // Within epoch 3's end here: no divergence, the range applies.
        assert_eq!(
            plan_follower_read(20, Some(3), ends_at_30, log),
            Ok(FollowerRead::Records(Some(50)))
        );
        // No last fetched epoch: no check; past the end is out of range.
        assert_eq!(
            plan_follower_read(60, None, |_| unreachable!(), log),
            Err(ErrorCode::OffsetOutOfRange)
        );
    }

    #[test]
    fn a_fetch_is_answered_at_once_only_when_it_may_not_or_need_not_wait() {
        let wait = Duration::from_millis(500);
        // (max wait, bytes read, min bytes, something to say now) -> answer now
        let cases = [
            (Duration::ZERO, 0, 1, false, true),
            (wait, 10, 10, false, true),
            (wait, 9, 10, false, false),
            (wait, 0, 1, true, true),
            (wait, 0, 0, false, true),
        ];
        for (max_wait, read, min, must, expected) in cases {
            assert_eq!(
                answer_now(max_wait, read, min, must),
                expected,
                "{max_wait:?} {read} {min} {must}"
            );
        }
    }
}
