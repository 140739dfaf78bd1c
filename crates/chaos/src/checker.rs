//! Judges a run's [`History`] against the state read after healing ([`Final`]):
//! the verdicts of Jepsen's Kafka queue workload and the invariants of
//! docs/INVARIANTS.md. Pure: a table of hand-made histories shows each verdict can
//! be reached (the checker can fail).

use std::collections::{BTreeMap, BTreeSet};
use std::fmt;

use crate::history::{Final, History, Outcome};

/// The kinds of violation, each a broken promise.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Kind {
    /// An acknowledged record is not in the log (I1).
    LostWrite,
    /// An acknowledged record is in the log at another offset than acknowledged,
    /// or a consumer read one value at an offset where the log has another (I2).
    InconsistentOffset,
    /// A value of a promised producer in the log twice (I3: under safe settings
    /// the promised producers are idempotent).
    Duplicate,
    /// A value in the log that nobody sent.
    Unexpected,
    /// A producer's acknowledged offsets on a partition not growing in the order
    /// it sent (I4).
    Reordered,
    /// Acknowledged with an ISR smaller than `min.insync.replicas` (I8).
    SmallIsr,
    /// A consumer's next record was past the one after its last (a hole) (I5).
    PollSkip,
    /// A consumer's next record was at or before its last, with no reset (I5).
    NonMonotonicPoll,
    /// A consumer read a record the log no longer has: it was served above
    /// what became the high watermark (I5).
    ReadAboveHighWatermark,
    /// A high watermark went back: within one leader's epoch, or below what a
    /// leader once gave (committed records gone) (I7).
    HighWatermarkBackwards,
    /// Two leaders in one epoch, a leader outside its ISR, an epoch going back
    /// (I7, I8).
    Leadership,
    /// Replicas differ below the high watermark (I2).
    ReplicasDiffer,
    /// No full ISR and readable acknowledged records within the bound after
    /// healing (I9).
    NotHealed,
    /// A replica left the ISR with no fault in force near it (I11; judged by
    /// the simulation, which knows every fault's time).
    SpuriousShrink,
    /// A consumer group's acknowledged offset commit is not in its final
    /// committed offsets (judged by the simulation's group workload).
    LostCommit,
}

impl fmt::Display for Kind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let name = match self {
            Kind::LostWrite => "lost write",
            Kind::InconsistentOffset => "inconsistent offset",
            Kind::Duplicate => "duplicate",
            Kind::Unexpected => "unexpected value",
            Kind::Reordered => "reordered acknowledgements",
            Kind::SmallIsr => "acknowledged below min.insync.replicas",
            Kind::PollSkip => "poll skip",
            Kind::NonMonotonicPoll => "non-monotonic poll",
            Kind::ReadAboveHighWatermark => "read above the high watermark",
            Kind::HighWatermarkBackwards => "high watermark went backwards",
            Kind::Leadership => "leadership",
            Kind::ReplicasDiffer => "replicas differ",
            Kind::NotHealed => "not healed",
            Kind::SpuriousShrink => "spurious ISR shrink",
            Kind::LostCommit => "committed offset lost",
        };
        f.write_str(name)
    }
}

/// One broken promise, with what shows it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Violation {
    pub kind: Kind,
    pub detail: String,
}

/// What the run's settings promise.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Promise {
    /// Every acknowledgement rests on at least this many replicas.
    pub min_isr: usize,
}

/// The checker's verdict and the run's figures.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Verdict {
    pub sends: usize,
    pub acked: usize,
    pub failed: usize,
    pub unknown: usize,
    /// Failed or unknown sends whose record is in the log (allowed: not
    /// acknowledged is not "not written").
    pub not_acked_but_written: usize,
    pub polls: usize,
    pub records: usize,
    pub violations: Vec<Violation>,
}

impl Verdict {
    /// True when no promise was broken.
    #[must_use]
    pub fn valid(&self) -> bool {
        self.violations.is_empty()
    }

    /// How many violations of each kind.
    #[must_use]
    pub fn counts(&self) -> BTreeMap<Kind, usize> {
        let mut counts = BTreeMap::new();
        for v in &self.violations {
            *counts.entry(v.kind).or_default() += 1;
        }
        counts
    }

    /// Adds `other`'s figures and violations (each detail after `prefix`):
    /// one verdict for several topics judged apart.
    pub fn absorb(&mut self, other: Verdict, prefix: &str) {
        self.sends += other.sends;
        self.acked += other.acked;
        self.failed += other.failed;
        self.unknown += other.unknown;
        self.not_acked_but_written += other.not_acked_but_written;
        self.polls += other.polls;
        self.records += other.records;
        self.violations
            .extend(other.violations.into_iter().map(|v| Violation {
                kind: v.kind,
                detail: format!("{prefix}{}", v.detail),
            }));
    }

    fn violate(&mut self, kind: Kind, detail: String) {
        self.violations.push(Violation { kind, detail });
    }
}

/// Judges `history` against `after`, for the settings' `promise`.
#[must_use]
pub fn check(history: &History, after: &Final, promise: Promise) -> Verdict {
    let mut v = Verdict {
        sends: history.sends.len(),
        polls: history.polls.len(),
        ..Verdict::default()
    };
    // The final logs, by partition: value at each offset, offsets of each value.
    let mut at: BTreeMap<i32, BTreeMap<i64, &str>> = BTreeMap::new();
    let mut where_: BTreeMap<i32, BTreeMap<&str, Vec<i64>>> = BTreeMap::new();
    for (p, log) in &after.logs {
        v.records += log.len();
        let at = at.entry(*p).or_default();
        let where_ = where_.entry(*p).or_default();
        if let Some((i, (offset, _))) = log
            .iter()
            .enumerate()
            .find(|(i, (offset, _))| *offset != *i as i64)
        {
            v.violate(
                Kind::InconsistentOffset,
                format!("partition {p}: the log has offset {offset} at position {i}"),
            );
        }
        for (offset, value) in log {
            at.insert(*offset, value);
            where_.entry(value).or_default().push(*offset);
        }
    }
    let empty_at = BTreeMap::new();
    let empty_where = BTreeMap::new();
    let sent: BTreeSet<(i32, &str)> = history
        .sends
        .iter()
        .map(|s| (s.partition, s.value.as_str()))
        .collect();
    // Values of producers outside the promise (acks=1 or 0, not idempotent):
    // they may be lost, written twice, or acknowledged by anyone.
    let unpromised: BTreeSet<(i32, &str)> = history
        .sends
        .iter()
        .filter(|s| !s.promised)
        .map(|s| (s.partition, s.value.as_str()))
        .collect();

    // Writes.
    let mut last_acked: BTreeMap<(usize, i32), (i64, &str)> = BTreeMap::new();
    for s in &history.sends {
        let offsets = where_
            .get(&s.partition)
            .unwrap_or(&empty_where)
            .get(s.value.as_str());
        match &s.outcome {
            Outcome::Ok { .. } if !s.promised => v.acked += 1,
            Outcome::Ok { offset, acked_isr } => {
                v.acked += 1;
                match offsets {
                    None => v.violate(
                        Kind::LostWrite,
                        format!(
                            "{} acknowledged at {}:{offset} (ISR {acked_isr:?}, sent {:?} after \
                             the workload started) is not in the log",
                            s.value, s.partition, s.at
                        ),
                    ),
                    Some(found) if !found.contains(offset) => v.violate(
                        Kind::InconsistentOffset,
                        format!(
                            "{} acknowledged at {}:{offset} is at {found:?}",
                            s.value, s.partition
                        ),
                    ),
                    Some(_) => {}
                }
                if acked_isr.len() < promise.min_isr {
                    v.violate(
                        Kind::SmallIsr,
                        format!(
                            "{} acknowledged by ISR {acked_isr:?} (min.insync.replicas {})",
                            s.value, promise.min_isr
                        ),
                    );
                }
                if let Some((before, value)) = last_acked.get(&(s.producer, s.partition)) {
                    if offset <= before {
                        v.violate(
                            Kind::Reordered,
                            format!(
                                "{} acknowledged at {}:{offset}, after {value} at {before}",
                                s.value, s.partition
                            ),
                        );
                    }
                }
                last_acked.insert((s.producer, s.partition), (*offset, &s.value));
            }
            Outcome::Failed(_) | Outcome::Unknown(_) => {
                if matches!(s.outcome, Outcome::Failed(_)) {
                    v.failed += 1;
                } else {
                    v.unknown += 1;
                }
                if offsets.is_some() {
                    v.not_acked_but_written += 1;
                }
            }
        }
    }
    for (p, values) in &where_ {
        for (value, offsets) in values {
            if offsets.len() > 1 && !unpromised.contains(&(*p, value)) {
                v.violate(
                    Kind::Duplicate,
                    format!("{value} is in partition {p} at offsets {offsets:?}"),
                );
            }
            if !sent.contains(&(*p, value)) {
                v.violate(
                    Kind::Unexpected,
                    format!("{value} at {p}:{offsets:?} was never sent to partition {p}"),
                );
            }
        }
    }

    // Reads: each consumer's polls of a partition, in order.
    let mut position: BTreeMap<(usize, i32), i64> = BTreeMap::new();
    let mut polls_seen: BTreeMap<usize, usize> = BTreeMap::new();
    let mut resets: BTreeMap<usize, std::collections::VecDeque<_>> = BTreeMap::new();
    let mut sorted_resets: Vec<_> = history.resets.iter().collect();
    sorted_resets.sort_by_key(|r| (r.consumer, r.after_polls));
    for r in sorted_resets {
        resets.entry(r.consumer).or_default().push_back(r);
    }
    for poll in &history.polls {
        let n = polls_seen.entry(poll.consumer).or_default();
        // Resets this consumer made before this poll.
        if let Some(queue) = resets.get_mut(&poll.consumer) {
            while queue.front().is_some_and(|r| r.after_polls <= *n) {
                if let Some(r) = queue.pop_front() {
                    position.insert((r.consumer, r.partition), r.to);
                }
            }
        }
        *n += 1;
        let key = (poll.consumer, poll.partition);
        if let Some(expected) = position.get(&key) {
            if poll.offset > *expected {
                v.violate(
                    Kind::PollSkip,
                    format!(
                        "consumer {} read {}:{} after {}:{}",
                        poll.consumer,
                        poll.partition,
                        poll.offset,
                        poll.partition,
                        expected - 1
                    ),
                );
            } else if poll.offset < *expected {
                v.violate(
                    Kind::NonMonotonicPoll,
                    format!(
                        "consumer {} read {}:{} after {}:{}",
                        poll.consumer,
                        poll.partition,
                        poll.offset,
                        poll.partition,
                        expected - 1
                    ),
                );
            }
        }
        position.insert(key, poll.offset + 1);
        match at
            .get(&poll.partition)
            .unwrap_or(&empty_at)
            .get(&poll.offset)
        {
            None => v.violate(
                Kind::ReadAboveHighWatermark,
                format!(
                    "consumer {} read {} at {}:{}, which the log no longer has",
                    poll.consumer, poll.value, poll.partition, poll.offset
                ),
            ),
            Some(value) if *value != poll.value => v.violate(
                Kind::InconsistentOffset,
                format!(
                    "consumer {} read {} at {}:{}, where the log has {value}",
                    poll.consumer, poll.value, poll.partition, poll.offset
                ),
            ),
            Some(_) => {}
        }
    }

    // High watermarks: never back within a leader's epoch (as each consumer
    // saw them, in order); never above the final log (what was once committed
    // stays).
    let mut last_hw: BTreeMap<(usize, i32, i32, i32), i64> = BTreeMap::new();
    let mut max_hw: BTreeMap<i32, i64> = BTreeMap::new();
    for hw in &history.high_watermarks {
        let key = (hw.consumer, hw.partition, hw.broker, hw.leader_epoch);
        if let Some(before) = last_hw.get(&key) {
            if hw.value < *before {
                v.violate(
                    Kind::HighWatermarkBackwards,
                    format!(
                        "partition {}: broker {} in epoch {} gave {} after {before}",
                        hw.partition, hw.broker, hw.leader_epoch, hw.value
                    ),
                );
            }
        }
        last_hw.insert(key, hw.value);
        let m = max_hw.entry(hw.partition).or_insert(hw.value);
        *m = (*m).max(hw.value);
    }
    for (p, hw) in max_hw {
        let len = after.logs.get(&p).map_or(0, Vec::len) as i64;
        if hw > len {
            v.violate(
                Kind::HighWatermarkBackwards,
                format!("partition {p}: a leader gave high watermark {hw}, the log ends at {len}"),
            );
        }
    }

    for (p, r) in &after.replicas {
        if let Err(e) = r {
            v.violate(Kind::ReplicasDiffer, format!("partition {p}: {e}"));
        }
    }
    if let Err(e) = &after.healed {
        v.violate(Kind::NotHealed, e.clone());
    }
    for l in &after.leadership {
        v.violate(Kind::Leadership, l.clone());
    }
    v
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use super::*;
    use crate::history::{HighWatermark, Poll, Reset, Send};

    const SAFE: Promise = Promise { min_isr: 2 };

    fn ok(producer: usize, value: &str, offset: i64) -> Send {
        Send {
            producer,
            partition: 0,
            value: value.into(),
            at: Duration::ZERO,
            outcome: Outcome::Ok {
                offset,
                acked_isr: vec![1, 2],
            },
            promised: true,
        }
    }

    fn unknown(value: &str) -> Send {
        Send {
            producer: 0,
            partition: 0,
            value: value.into(),
            at: Duration::ZERO,
            outcome: Outcome::Unknown("timed out".into()),
            promised: true,
        }
    }

    fn poll(consumer: usize, offset: i64, value: &str) -> Poll {
        Poll {
            consumer,
            partition: 0,
            offset,
            value: value.into(),
        }
    }

    fn hw(broker: i32, epoch: i32, value: i64) -> HighWatermark {
        HighWatermark {
            consumer: 0,
            partition: 0,
            broker,
            leader_epoch: epoch,
            value,
        }
    }

    fn log(values: &[&str]) -> Final {
        Final {
            logs: BTreeMap::from([(
                0,
                values
                    .iter()
                    .enumerate()
                    .map(|(i, v)| (i as i64, v.to_string()))
                    .collect(),
            )]),
            replicas: BTreeMap::from([(0, Ok(()))]),
            healed: Ok(Duration::from_secs(1)),
            leadership: Vec::new(),
        }
    }

    fn kinds(history: &History, after: &Final) -> Vec<Kind> {
        check(history, after, SAFE)
            .violations
            .iter()
            .map(|v| v.kind)
            .collect()
    }

    #[test]
    fn a_clean_history_is_valid_and_counted() {
        let history = History {
            sends: vec![ok(0, "a", 0), ok(1, "b", 1), unknown("c"), unknown("d")],
            polls: vec![poll(0, 0, "a"), poll(0, 1, "b"), poll(0, 2, "c")],
            resets: Vec::new(),
            high_watermarks: vec![hw(1, 0, 2), hw(1, 0, 3), hw(2, 1, 2)],
        };
        let v = check(&history, &log(&["a", "b", "c"]), SAFE);
        assert!(v.valid(), "{:?}", v.violations);
        assert_eq!(
            (v.sends, v.acked, v.unknown, v.not_acked_but_written),
            (4, 2, 2, 1)
        );
        assert_eq!((v.polls, v.records), (3, 3));
    }

    #[test]
    fn each_broken_promise_is_its_verdict() {
        let base = || History {
            sends: vec![ok(0, "a", 0), ok(0, "b", 1), unknown("c")],
            ..History::default()
        };
        let cases: Vec<(&str, History, Final, Kind)> = vec![
            ("acknowledged, gone", base(), log(&["a"]), Kind::LostWrite),
            (
                "acknowledged at another offset",
                History {
                    sends: vec![ok(0, "a", 0), unknown("c"), ok(0, "b", 1)],
                    ..History::default()
                },
                log(&["a", "c", "b"]),
                Kind::InconsistentOffset,
            ),
            (
                "written twice",
                base(),
                log(&["a", "b", "b"]),
                Kind::Duplicate,
            ),
            (
                "never sent",
                base(),
                log(&["a", "b", "x"]),
                Kind::Unexpected,
            ),
            (
                "acknowledged out of order",
                History {
                    sends: vec![ok(0, "a", 1), ok(0, "b", 0)],
                    ..History::default()
                },
                log(&["b", "a"]),
                Kind::Reordered,
            ),
            (
                "acknowledged by one replica",
                History {
                    sends: vec![Send {
                        outcome: Outcome::Ok {
                            offset: 0,
                            acked_isr: vec![1],
                        },
                        ..ok(0, "a", 0)
                    }],
                    ..History::default()
                },
                log(&["a"]),
                Kind::SmallIsr,
            ),
            (
                "a consumer skips",
                History {
                    polls: vec![poll(0, 0, "a"), poll(0, 2, "c")],
                    ..base()
                },
                log(&["a", "b", "c"]),
                Kind::PollSkip,
            ),
            (
                "a consumer goes back",
                History {
                    polls: vec![poll(0, 0, "a"), poll(0, 1, "b"), poll(0, 1, "b")],
                    ..base()
                },
                log(&["a", "b"]),
                Kind::NonMonotonicPoll,
            ),
            (
                "a consumer read what was lost",
                History {
                    sends: vec![ok(0, "a", 0), unknown("b")],
                    polls: vec![poll(0, 0, "a"), poll(0, 1, "b")],
                    ..History::default()
                },
                log(&["a"]),
                Kind::ReadAboveHighWatermark,
            ),
            (
                "a consumer read another value at an offset",
                History {
                    sends: vec![ok(0, "a", 0), unknown("b"), unknown("c")],
                    polls: vec![poll(0, 0, "a"), poll(0, 1, "c")],
                    ..History::default()
                },
                log(&["a", "b"]),
                Kind::InconsistentOffset,
            ),
            (
                "a high watermark back within an epoch",
                History {
                    high_watermarks: vec![hw(1, 3, 2), hw(1, 3, 1)],
                    ..base()
                },
                log(&["a", "b"]),
                Kind::HighWatermarkBackwards,
            ),
            (
                "a high watermark above the final log",
                History {
                    sends: vec![ok(0, "a", 0), unknown("b")],
                    high_watermarks: vec![hw(1, 3, 2)],
                    ..History::default()
                },
                log(&["a"]),
                Kind::HighWatermarkBackwards,
            ),
            (
                "replicas differ",
                base(),
                Final {
                    replicas: BTreeMap::from([(0, Err("broker 3 differs at 1".into()))]),
                    ..log(&["a", "b"])
                },
                Kind::ReplicasDiffer,
            ),
            (
                "not healed",
                base(),
                Final {
                    healed: Err("partition 0 ISR [1] after 30 s".into()),
                    ..log(&["a", "b"])
                },
                Kind::NotHealed,
            ),
            (
                "two leaders in an epoch",
                base(),
                Final {
                    leadership: vec!["partition 0 epoch 4: two leaders".into()],
                    ..log(&["a", "b"])
                },
                Kind::Leadership,
            ),
        ];
        for (name, history, after, kind) in cases {
            assert_eq!(kinds(&history, &after), vec![kind], "{name}");
        }
    }

    /// Records of producers beside the promise (acks=1 or 0, not
    /// idempotent) may be lost, written twice, acknowledged by one replica or
    /// out of order; the same history from a promised producer breaks each
    /// promise. What holds for every record still holds for them.
    #[test]
    fn unpromised_records_are_held_only_to_what_every_record_is() {
        let side = |s: Send| Send {
            promised: false,
            ..s
        };
        let small_isr = |s: Send| Send {
            outcome: Outcome::Ok {
                offset: 2,
                acked_isr: vec![1],
            },
            ..s
        };
        let sends = vec![
            ok(5, "lost", 0),
            ok(5, "twice", 1),
            small_isr(ok(5, "one", 2)),
            ok(5, "moved", 1),
        ];
        let after = log(&["twice", "twice", "one", "moved"]);
        let promised = History {
            sends: sends.clone(),
            ..History::default()
        };
        let promised_kinds = kinds(&promised, &after);
        for k in [
            Kind::LostWrite,
            Kind::InconsistentOffset,
            Kind::Duplicate,
            Kind::SmallIsr,
            Kind::Reordered,
        ] {
            assert!(
                promised_kinds.contains(&k),
                "{k} not seen: {promised_kinds:?}"
            );
        }
        let beside = History {
            sends: sends.into_iter().map(side).collect(),
            ..History::default()
        };
        let v = check(&beside, &after, SAFE);
        assert!(v.valid(), "{:?}", v.violations);
        assert_eq!((v.sends, v.acked), (4, 4));
        // Never sent, or read where the log has another value: still wrong.
        let mut read_wrong = beside.clone();
        read_wrong.polls = vec![poll(0, 0, "one")];
        assert_eq!(kinds(&read_wrong, &after), vec![Kind::InconsistentOffset]);
        assert_eq!(
            kinds(&beside, &log(&["twice", "x"])),
            vec![Kind::Unexpected]
        );
    }

    #[test]
    fn verdicts_absorb_each_other() {
        let mut all = check(
            &History {
                sends: vec![ok(0, "a", 0)],
                ..History::default()
            },
            &log(&["a"]),
            SAFE,
        );
        let lost = check(
            &History {
                sends: vec![ok(0, "b", 0), unknown("c")],
                ..History::default()
            },
            &log(&[]),
            SAFE,
        );
        all.absorb(lost, "topic t: ");
        assert_eq!(
            (all.sends, all.acked, all.unknown, all.records),
            (3, 2, 1, 1)
        );
        assert_eq!(all.violations.len(), 1);
        assert_eq!(all.violations[0].kind, Kind::LostWrite);
        assert!(
            all.violations[0].detail.starts_with("topic t: b "),
            "{:?}",
            all.violations
        );
    }

    #[test]
    fn a_reset_lets_a_consumer_go_back() {
        let history = History {
            sends: vec![ok(0, "a", 0), ok(0, "b", 1)],
            polls: vec![poll(0, 0, "a"), poll(0, 1, "b"), poll(0, 0, "a")],
            resets: vec![Reset {
                consumer: 0,
                partition: 0,
                after_polls: 2,
                to: 0,
            }],
            high_watermarks: Vec::new(),
        };
        assert_eq!(kinds(&history, &log(&["a", "b"])), Vec::<Kind>::new());
        // Without the reset, the same polls are non-monotonic.
        let history = History {
            resets: Vec::new(),
            ..history
        };
        assert_eq!(
            kinds(&history, &log(&["a", "b"])),
            vec![Kind::NonMonotonicPoll]
        );
    }

    #[test]
    fn consumers_and_partitions_are_judged_apart() {
        let mut b = ok(0, "b", 0);
        b.partition = 1;
        let history = History {
            sends: vec![ok(0, "a", 0), b],
            polls: vec![
                poll(0, 0, "a"),
                poll(1, 0, "a"),
                Poll {
                    partition: 1,
                    ..poll(0, 0, "b")
                },
            ],
            ..History::default()
        };
        let mut after = log(&["a"]);
        after.logs.insert(1, vec![(0, "b".into())]);
        assert_eq!(kinds(&history, &after), Vec::<Kind>::new());
    }

    #[test]
    fn a_value_sent_to_one_partition_is_unexpected_in_another() {
        let history = History {
            sends: vec![ok(0, "a", 0)],
            ..History::default()
        };
        let mut after = log(&["a"]);
        after.logs.insert(1, vec![(0, "a".into())]);
        assert_eq!(kinds(&history, &after), vec![Kind::Unexpected]);
    }
}
