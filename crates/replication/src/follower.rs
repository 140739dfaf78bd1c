//! One followed partition's fetch phases as a pure state machine: which request
//! the partition needs next, and how each answer, error code and failure moves it.
//! No I/O, no clock: `now` comes in with every event, and every decision comes out
//! as an [`Effect`] that the replica fetcher (the broker's `fetcher`) executes and
//! answers with the next event.
//!
//! The transitions:
//!
//! - added: `Truncating` under the epoch rule, `Fetching` under the legacy HW rule
//!   (the role change already truncated to the high watermark).
//! - `Truncating`: an empty log fetches at once; otherwise ask where its latest
//!   epoch ends, truncate as [`decide`] says, then `Fetching` — or `Truncating`
//!   again when the leader answered with an epoch this replica never had (KIP-279).
//! - `Fetching`: records are appended; a `diverging_epoch` truncates (and may lead
//!   back to `Truncating`); OFFSET_OUT_OF_RANGE asks where the leader's log starts,
//!   then either starts over there (below it) or goes back to `Truncating` (above
//!   the leader's end).
//! - any error or failure: `BackingOff` for 10 ms, doubling with every failure in
//!   a row up to `replica_fetch_backoff_ms`, then back to the phase it paused. A
//!   lost fetch session retries at once (the next fetch opens a new one).
//! - FENCED_LEADER_EPOCH from the leader, or the local partition refusing the
//!   epoch: `Fenced` until the next LeaderAndIsr replaces the machine.
//!
//! A partition leaving the fetcher (it became leader, went offline, or follows
//! another leader or epoch) simply drops its machine; a LeaderAndIsr for a new
//! leader or epoch starts a new one with [`FollowerState::new`].

use std::time::Instant;

use syncline_proto::{Backoff, EpochEndOffset, ErrorCode};

use crate::partition::truncation::{decide, LocalLog};

/// Where a partition is in its fetch cycle.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Phase {
    /// Must agree with the leader on where the logs diverge before fetching
    /// (OffsetsForLeaderEpoch, then truncation).
    Truncating,
    /// Fetching from the log end.
    Fetching,
    /// Skipped until `until` after a failure, then back to `resume`.
    BackingOff {
        /// When the pause ends.
        until: Instant,
        /// The phase the pause interrupted.
        resume: Resume,
    },
    /// The leader epoch this machine follows is over (the leader has a newer one,
    /// or the local partition moved on): idle until a LeaderAndIsr replaces it.
    Fenced,
}

/// The phase a pause returns to.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Resume {
    /// Back to [`Phase::Truncating`].
    Truncating,
    /// Back to [`Phase::Fetching`].
    Fetching,
}

/// The follower's log position, read by the shell when it asks what is next.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct LogPosition {
    /// The local log end offset: the next fetch offset.
    pub log_end_offset: i64,
    /// The latest leader epoch in the local log, if any batch was ever written.
    pub latest_epoch: Option<i32>,
    /// The local log start offset (reported to the leader in fetches).
    pub log_start_offset: i64,
}

/// Why a truncation happens; the shell logs it with the truncation.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum TruncationCause {
    /// The leader's answer to OffsetsForLeaderEpoch for `asked_epoch`.
    OffsetsForLeaderEpoch {
        /// The local epoch we asked about.
        asked_epoch: i32,
    },
    /// A fetch response's `diverging_epoch`.
    DivergingEpoch,
}

/// One partition's answer in a fetch response.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum FetchAnswer {
    /// No error: records (possibly none) to append, with the leader's HW.
    Records,
    /// The leader's log diverges from ours at `leader`; `local` is our log as the
    /// truncation decision needs it.
    DivergingEpoch {
        /// Where the leader says the epoch ends.
        leader: EpochEndOffset,
        /// This replica's log.
        local: LocalLog,
    },
    /// The partition's error code (never `NONE`).
    Error(ErrorCode),
}

/// What happened to the partition, as the shell reports it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Event {
    /// The shell starts a round: what does the partition need now? Ends a pause
    /// whose time has come.
    Poll(LogPosition),
    /// The leader answered OffsetsForLeaderEpoch for `asked_epoch` without error.
    EpochEnd {
        /// The local epoch we asked about.
        asked_epoch: i32,
        /// The leader's answer.
        leader: EpochEndOffset,
        /// This replica's log, with its own end for the leader's epoch.
        local: LocalLog,
    },
    /// The truncation asked for by [`Effect::TruncateTo`] or
    /// [`Effect::TruncateFullyAndStartAt`] was done, or refused with this code.
    Truncated(Result<(), ErrorCode>),
    /// The partition's part of a fetch response.
    Fetched(FetchAnswer),
    /// The append asked for by [`Effect::Append`]: the new log end offset, or the
    /// refusal.
    Appended {
        /// The local log end offset after the append, or why it was refused.
        result: Result<i64, ErrorCode>,
        /// The leader's high watermark from the same response.
        leader_high_watermark: i64,
    },
    /// The leader's log start offset (ListOffsets EARLIEST), asked by
    /// [`Effect::AskLogStart`], and our log end offset now.
    LogStart {
        /// Where the leader's log starts.
        leader_log_start: i64,
        /// The local log end offset.
        log_end_offset: i64,
    },
    /// A request for this partition failed: not sent, no answer, an answer without
    /// this partition, or an error code for it or for the whole request
    /// (`NETWORK_EXCEPTION` stands for "no answer").
    Failed(ErrorCode),
}

/// What the shell must do next for the partition.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[must_use]
pub enum Effect {
    /// Nothing now.
    None,
    /// Ask the leader where `epoch` ends (OffsetsForLeaderEpoch), then report
    /// [`Event::EpochEnd`] or [`Event::Failed`].
    AskEpochEnd {
        /// The local epoch to ask about.
        epoch: i32,
    },
    /// Fetch from `offset`, then report [`Event::Fetched`] (or nothing, if the
    /// response leaves the partition out: an incremental session's "no news").
    Fetch {
        /// The fetch offset: the local log end.
        offset: i64,
        /// `last_fetched_epoch` for the leader's divergence check (epoch rule only).
        last_fetched_epoch: Option<i32>,
        /// The local log start offset.
        log_start_offset: i64,
    },
    /// Append the response's records with the leader's HW, then report
    /// [`Event::Appended`].
    Append,
    /// Truncate the log to `offset`, then report [`Event::Truncated`].
    TruncateTo {
        /// The new log end offset.
        offset: i64,
        /// Where the leader said the epoch ends (for the log line).
        leader: EpochEndOffset,
        /// Why (for the log line).
        cause: TruncationCause,
    },
    /// Ask the leader where its log starts (ListOffsets EARLIEST), then report
    /// [`Event::LogStart`] or [`Event::Failed`].
    AskLogStart,
    /// Empty the log and restart it at `offset`, then report [`Event::Truncated`].
    TruncateFullyAndStartAt {
        /// The leader's log start.
        offset: i64,
    },
    /// Skip the partition until then.
    PauseUntil(Instant),
}

/// The first pause after a failure; each further failure in a row doubles it, up
/// to `replica_fetch_backoff_ms` (see [`retry_backoff`]). The usual failures clear within milliseconds (a
/// new leader that has not yet applied the LeaderAndIsr making it leader answers
/// `UNKNOWN_TOPIC_OR_PARTITION`, `NOT_LEADER_OR_FOLLOWER` or
/// `UNKNOWN_LEADER_EPOCH`), and a whole second's pause there would hold every
/// `acks=all` produce to the partition for that second.
pub const FIRST_RETRY_DELAY: std::time::Duration = std::time::Duration::from_millis(10);

/// The pauses after failed rounds: from [`FIRST_RETRY_DELAY`], doubling, up to
/// `replica_fetch_backoff_ms`.
pub fn retry_backoff(replica_fetch_backoff_ms: u64) -> Backoff {
    Backoff::new(
        FIRST_RETRY_DELAY,
        std::time::Duration::from_millis(replica_fetch_backoff_ms),
    )
}

/// What the machine does once the truncation it asked for is done.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum AfterTruncation {
    Truncating,
    Fetching,
}

/// One followed partition in one leader epoch.
#[derive(Debug, Clone)]
pub struct FollowerState {
    leader_epoch: i32,
    /// Truncation by leader epoch (KIP-101/279) and `last_fetched_epoch` on fetches
    /// (KIP-595); false only under the test-only legacy rule.
    by_leader_epoch: bool,
    phase: Phase,
    backoff: Backoff,
    /// Failed rounds in a row: the next pause doubles with each one.
    failures: u32,
    /// Leader HW − our log end, from the last append.
    lag: i64,
    /// The truncation the shell is executing, and where it leads.
    truncating: Option<AfterTruncation>,
}

impl FollowerState {
    /// A partition that starts following in `leader_epoch`. Under the epoch rule
    /// (`by_leader_epoch`) it truncates first; under the legacy HW rule the role
    /// change already truncated to the high watermark, so it fetches at once.
    pub fn new(leader_epoch: i32, by_leader_epoch: bool, backoff: Backoff) -> FollowerState {
        FollowerState {
            leader_epoch,
            by_leader_epoch,
            phase: if by_leader_epoch {
                Phase::Truncating
            } else {
                Phase::Fetching
            },
            backoff,
            failures: 0,
            lag: 0,
            truncating: None,
        }
    }

    /// The leader epoch this machine follows.
    pub fn leader_epoch(&self) -> i32 {
        self.leader_epoch
    }

    /// The current phase.
    #[cfg(test)]
    pub fn phase(&self) -> Phase {
        self.phase
    }

    /// Leader HW − our log end offset, from the last append.
    pub fn lag(&self) -> i64 {
        self.lag
    }

    /// Failed rounds in a row.
    #[cfg(test)]
    pub fn failures(&self) -> u32 {
        self.failures
    }

    /// Moves the machine by one event at `now`.
    pub fn on_event(&mut self, event: Event, now: Instant) -> Effect {
        match event {
            Event::Poll(log) => self.poll(log, now),
            Event::EpochEnd {
                asked_epoch,
                leader,
                local,
            } => {
                self.failures = 0;
                self.truncate(
                    leader,
                    local,
                    TruncationCause::OffsetsForLeaderEpoch { asked_epoch },
                )
            }
            Event::Truncated(Ok(())) => {
                match self.truncating.take() {
                    Some(AfterTruncation::Truncating) => self.phase = Phase::Truncating,
                    Some(AfterTruncation::Fetching) => self.phase = Phase::Fetching,
                    None => debug_assert!(false, "a truncation nobody asked for"),
                }
                Effect::None
            }
            Event::Truncated(Err(code)) => {
                self.truncating = None;
                self.fail(code, now)
            }
            Event::Fetched(FetchAnswer::Records) => Effect::Append,
            Event::Fetched(FetchAnswer::DivergingEpoch { leader, local }) => {
                self.truncate(leader, local, TruncationCause::DivergingEpoch)
            }
            Event::Fetched(FetchAnswer::Error(ErrorCode::OffsetOutOfRange)) => Effect::AskLogStart,
            Event::Fetched(FetchAnswer::Error(code)) => self.fail(code, now),
            Event::Appended {
                result: Ok(log_end_offset),
                leader_high_watermark,
            } => {
                self.lag = (leader_high_watermark - log_end_offset).max(0);
                self.failures = 0;
                Effect::None
            }
            Event::Appended {
                result: Err(code), ..
            } => self.fail(code, now),
            Event::LogStart {
                leader_log_start,
                log_end_offset,
            } => {
                if log_end_offset < leader_log_start {
                    // Retention on the leader moved past everything we have.
                    self.truncating = Some(AfterTruncation::Fetching);
                    Effect::TruncateFullyAndStartAt {
                        offset: leader_log_start,
                    }
                } else {
                    // Above the leader's end: our log diverges; find out where.
                    self.phase = Phase::Truncating;
                    Effect::None
                }
            }
            Event::Failed(code) => self.fail(code, now),
        }
    }

    /// Ends a pause that is over, then says what the phase needs.
    fn poll(&mut self, log: LogPosition, now: Instant) -> Effect {
        self.phase = match self.phase {
            Phase::BackingOff { until, .. } if until > now => return Effect::PauseUntil(until),
            Phase::BackingOff {
                resume: Resume::Truncating,
                ..
            } => Phase::Truncating,
            Phase::BackingOff {
                resume: Resume::Fetching,
                ..
            } => Phase::Fetching,
            phase => phase,
        };
        match self.phase {
            Phase::Truncating => match log.latest_epoch {
                Some(epoch) => Effect::AskEpochEnd { epoch },
                // Nothing written under any epoch: nothing to truncate.
                None => {
                    self.phase = Phase::Fetching;
                    self.fetch(log)
                }
            },
            Phase::Fetching => self.fetch(log),
            Phase::Fenced | Phase::BackingOff { .. } => Effect::None,
        }
    }

    fn fetch(&self, log: LogPosition) -> Effect {
        Effect::Fetch {
            offset: log.log_end_offset,
            last_fetched_epoch: log.latest_epoch.filter(|_| self.by_leader_epoch),
            log_start_offset: log.log_start_offset,
        }
    }

    fn truncate(
        &mut self,
        leader: EpochEndOffset,
        local: LocalLog,
        cause: TruncationCause,
    ) -> Effect {
        let decision = decide(leader, local);
        debug_assert!(decision.offset <= local.log_end_offset);
        self.truncating = Some(if decision.complete {
            AfterTruncation::Fetching
        } else {
            AfterTruncation::Truncating
        });
        Effect::TruncateTo {
            offset: decision.offset,
            leader,
            cause,
        }
    }

    /// A failed round: fenced for good, retried at once, or paused.
    fn fail(&mut self, code: ErrorCode, now: Instant) -> Effect {
        match code {
            // Our epoch is over: retrying with it can never succeed.
            ErrorCode::FencedLeaderEpoch => {
                self.phase = Phase::Fenced;
                Effect::None
            }
            // A lost or expired fetch session: the next fetch starts a new one at once.
            ErrorCode::FetchSessionIdNotFound | ErrorCode::InvalidFetchSessionEpoch => Effect::None,
            _ => {
                let resume = match self.phase {
                    Phase::Truncating => Resume::Truncating,
                    Phase::Fetching => Resume::Fetching,
                    Phase::BackingOff { resume, .. } => resume,
                    Phase::Fenced => return Effect::None,
                };
                let until = now + self.backoff.delay(self.failures);
                self.failures = self.failures.saturating_add(1);
                self.phase = Phase::BackingOff { until, resume };
                Effect::PauseUntil(until)
            }
        }
    }
}

#[cfg(test)]
mod tests {
    //! Each test is a table of steps (time, event → effect, phase) through one
    //! machine, named after the Kafka AbstractFetcherThreadTest /
    //! ReplicaFetcherThreadTest case it mirrors where one exists.

    use std::sync::OnceLock;
    use std::time::Duration;

    use super::*;
    use ErrorCode as E;

    /// Milliseconds after a fixed base instant.
    fn at(ms: u64) -> Instant {
        static BASE: OnceLock<Instant> = OnceLock::new();
        *BASE.get_or_init(Instant::now) + Duration::from_millis(ms)
    }

    /// `replica_fetch_backoff_ms` = 1000: pauses of 10, 20, 40 ... 1000 ms.
    fn machine(by_leader_epoch: bool) -> FollowerState {
        FollowerState::new(5, by_leader_epoch, retry_backoff(1000))
    }

    /// Past truncation, under the epoch rule.
    fn fetching() -> FollowerState {
        let mut m = machine(true);
        m.phase = Phase::Fetching;
        m
    }

    fn pos(log_end_offset: i64, latest_epoch: Option<i32>) -> Event {
        Event::Poll(LogPosition {
            log_end_offset,
            latest_epoch,
            log_start_offset: 0,
        })
    }

    fn end(epoch: i32, end_offset: i64) -> EpochEndOffset {
        EpochEndOffset { epoch, end_offset }
    }

    fn local(
        log_end_offset: i64,
        high_watermark: i64,
        epoch_end: Option<EpochEndOffset>,
    ) -> LocalLog {
        LocalLog {
            log_end_offset,
            high_watermark,
            epoch_end,
        }
    }

    fn fetch(offset: i64, last_fetched_epoch: Option<i32>) -> Effect {
        Effect::Fetch {
            offset,
            last_fetched_epoch,
            log_start_offset: 0,
        }
    }

    fn truncate_to(offset: i64, leader: EpochEndOffset, asked_epoch: i32) -> Effect {
        Effect::TruncateTo {
            offset,
            leader,
            cause: TruncationCause::OffsetsForLeaderEpoch { asked_epoch },
        }
    }

    fn paused(until_ms: u64, resume: Resume) -> Phase {
        Phase::BackingOff {
            until: at(until_ms),
            resume,
        }
    }

    fn appended(log_end_offset: i64, leader_high_watermark: i64) -> Event {
        Event::Appended {
            result: Ok(log_end_offset),
            leader_high_watermark,
        }
    }

    /// Runs the steps, checking each effect and the phase after it.
    fn run(mut m: FollowerState, steps: &[(u64, Event, Effect, Phase)]) -> FollowerState {
        for (i, (ms, event, effect, phase)) in steps.iter().enumerate() {
            let got = m.on_event(*event, at(*ms));
            assert_eq!(
                (got, m.phase()),
                (*effect, *phase),
                "step {i}: {event:?} at {ms} ms"
            );
        }
        m
    }

    #[test]
    fn should_move_partitions_out_of_truncating_log_state() {
        // Same epoch on both sides; the leader's ends at 120, ours at our LEO 150.
        let m = run(
            machine(true),
            &[
                (
                    0,
                    pos(150, Some(2)),
                    Effect::AskEpochEnd { epoch: 2 },
                    Phase::Truncating,
                ),
                (
                    1,
                    Event::EpochEnd {
                        asked_epoch: 2,
                        leader: end(2, 120),
                        local: local(150, 0, Some(end(2, 150))),
                    },
                    truncate_to(120, end(2, 120), 2),
                    Phase::Truncating,
                ),
                (2, Event::Truncated(Ok(())), Effect::None, Phase::Fetching),
                (3, pos(120, Some(2)), fetch(120, Some(2)), Phase::Fetching),
            ],
        );
        assert_eq!(m.leader_epoch(), 5);
    }

    #[test]
    fn should_fetch_leader_epoch_second_time_if_leader_replies_with_epoch_not_known_to_follower() {
        // KIP-279: our epochs are 1 (from 50) and 3 (from 100); the leader answers
        // for our 3 with its 2, which we never had: drop our epoch 3, ask about 1.
        run(
            machine(true),
            &[
                (
                    0,
                    pos(200, Some(3)),
                    Effect::AskEpochEnd { epoch: 3 },
                    Phase::Truncating,
                ),
                (
                    0,
                    Event::EpochEnd {
                        asked_epoch: 3,
                        leader: end(2, 90),
                        local: local(200, 0, Some(end(1, 100))),
                    },
                    truncate_to(100, end(2, 90), 3),
                    Phase::Truncating,
                ),
                (0, Event::Truncated(Ok(())), Effect::None, Phase::Truncating),
                (
                    0,
                    pos(100, Some(1)),
                    Effect::AskEpochEnd { epoch: 1 },
                    Phase::Truncating,
                ),
                (
                    0,
                    Event::EpochEnd {
                        asked_epoch: 1,
                        leader: end(1, 80),
                        local: local(100, 0, Some(end(1, 100))),
                    },
                    truncate_to(80, end(1, 80), 1),
                    Phase::Truncating,
                ),
                (0, Event::Truncated(Ok(())), Effect::None, Phase::Fetching),
                (0, pos(80, Some(1)), fetch(80, Some(1)), Phase::Fetching),
            ],
        );
    }

    #[test]
    fn test_truncate_to_high_watermark_if_leader_epoch_info_not_available() {
        run(
            machine(true),
            &[
                (
                    0,
                    pos(70, Some(4)),
                    Effect::AskEpochEnd { epoch: 4 },
                    Phase::Truncating,
                ),
                (
                    0,
                    Event::EpochEnd {
                        asked_epoch: 4,
                        leader: EpochEndOffset::UNDEFINED,
                        local: local(70, 55, Some(end(4, 70))),
                    },
                    truncate_to(55, EpochEndOffset::UNDEFINED, 4),
                    Phase::Truncating,
                ),
                (0, Event::Truncated(Ok(())), Effect::None, Phase::Fetching),
            ],
        );
    }

    #[test]
    fn truncation_skipped_when_the_log_has_no_epoch() {
        // A new (empty) replica: nothing written under any epoch, nothing to ask.
        run(
            machine(true),
            &[(0, pos(0, None), fetch(0, None), Phase::Fetching)],
        );
    }

    #[test]
    fn should_not_issue_leader_epoch_request_if_interbroker_version_below11() {
        // The legacy rule (Kafka before KIP-101): truncated to the HW at the role
        // change, no OffsetsForLeaderEpoch, no `last_fetched_epoch` in fetches.
        run(
            machine(false),
            &[(0, pos(150, Some(2)), fetch(150, None), Phase::Fetching)],
        );
    }

    #[test]
    fn test_simple_fetch() {
        let m = run(
            fetching(),
            &[
                (0, pos(100, Some(5)), fetch(100, Some(5)), Phase::Fetching),
                (
                    1,
                    Event::Fetched(FetchAnswer::Records),
                    Effect::Append,
                    Phase::Fetching,
                ),
                (1, appended(110, 150), Effect::None, Phase::Fetching),
            ],
        );
        assert_eq!(m.lag(), 40);
        // A follower ahead of the leader's HW has no lag, not a negative one.
        let m = run(m, &[(2, appended(160, 150), Effect::None, Phase::Fetching)]);
        assert_eq!(m.lag(), 0);
    }

    #[test]
    fn test_diverging_epochs() {
        run(
            fetching(),
            &[
                (
                    0,
                    Event::Fetched(FetchAnswer::DivergingEpoch {
                        leader: end(3, 90),
                        local: local(120, 80, Some(end(3, 120))),
                    }),
                    Effect::TruncateTo {
                        offset: 90,
                        leader: end(3, 90),
                        cause: TruncationCause::DivergingEpoch,
                    },
                    Phase::Fetching,
                ),
                (0, Event::Truncated(Ok(())), Effect::None, Phase::Fetching),
                (0, pos(90, Some(3)), fetch(90, Some(3)), Phase::Fetching),
            ],
        );
    }

    #[test]
    fn should_truncate_if_leader_replies_with_diverging_epoch_not_known_to_follower() {
        // The leader diverges at its epoch 3, which we never had: our epoch 2 ends
        // at 100. Truncate there and ask again about epoch 2.
        run(
            fetching(),
            &[
                (
                    0,
                    Event::Fetched(FetchAnswer::DivergingEpoch {
                        leader: end(3, 90),
                        local: local(120, 80, Some(end(2, 100))),
                    }),
                    Effect::TruncateTo {
                        offset: 100,
                        leader: end(3, 90),
                        cause: TruncationCause::DivergingEpoch,
                    },
                    Phase::Fetching,
                ),
                (0, Event::Truncated(Ok(())), Effect::None, Phase::Truncating),
                (
                    0,
                    pos(100, Some(2)),
                    Effect::AskEpochEnd { epoch: 2 },
                    Phase::Truncating,
                ),
            ],
        );
    }

    #[test]
    fn test_follower_fetch_out_of_range_high() {
        // Our fetch offset is above the leader's end: our log diverges; truncate by
        // epoch before fetching again.
        run(
            fetching(),
            &[
                (
                    0,
                    Event::Fetched(FetchAnswer::Error(E::OffsetOutOfRange)),
                    Effect::AskLogStart,
                    Phase::Fetching,
                ),
                (
                    0,
                    Event::LogStart {
                        leader_log_start: 0,
                        log_end_offset: 200,
                    },
                    Effect::None,
                    Phase::Truncating,
                ),
                (
                    0,
                    pos(200, Some(5)),
                    Effect::AskEpochEnd { epoch: 5 },
                    Phase::Truncating,
                ),
            ],
        );
    }

    #[test]
    fn test_follower_fetch_out_of_range_low() {
        // Retention on the leader moved past our log end: start over at its start.
        let m = run(
            fetching(),
            &[
                (
                    0,
                    Event::Fetched(FetchAnswer::Error(E::OffsetOutOfRange)),
                    Effect::AskLogStart,
                    Phase::Fetching,
                ),
                (
                    0,
                    Event::LogStart {
                        leader_log_start: 50,
                        log_end_offset: 10,
                    },
                    Effect::TruncateFullyAndStartAt { offset: 50 },
                    Phase::Fetching,
                ),
                (0, Event::Truncated(Ok(())), Effect::None, Phase::Fetching),
                (0, pos(50, None), fetch(50, None), Phase::Fetching),
            ],
        );
        assert_eq!(m.failures(), 0);
    }

    #[test]
    fn test_fetch_out_of_range_unknown_leader_epoch() {
        // The leader cannot say where its log starts yet: pause, then fetch again.
        run(
            fetching(),
            &[
                (
                    0,
                    Event::Fetched(FetchAnswer::Error(E::OffsetOutOfRange)),
                    Effect::AskLogStart,
                    Phase::Fetching,
                ),
                (
                    0,
                    Event::Failed(E::UnknownLeaderEpoch),
                    Effect::PauseUntil(at(10)),
                    paused(10, Resume::Fetching),
                ),
                (10, pos(7, Some(5)), fetch(7, Some(5)), Phase::Fetching),
            ],
        );
    }

    #[test]
    fn test_fenced_truncation() {
        // The leader has a newer epoch than ours: retrying with ours can never
        // succeed; wait for the LeaderAndIsr that brings the new one.
        run(
            machine(true),
            &[
                (
                    0,
                    pos(10, Some(4)),
                    Effect::AskEpochEnd { epoch: 4 },
                    Phase::Truncating,
                ),
                (
                    0,
                    Event::Failed(E::FencedLeaderEpoch),
                    Effect::None,
                    Phase::Fenced,
                ),
                (60_000, pos(10, Some(4)), Effect::None, Phase::Fenced),
            ],
        );
    }

    #[test]
    fn test_fenced_fetch() {
        run(
            fetching(),
            &[
                (
                    0,
                    Event::Fetched(FetchAnswer::Error(E::FencedLeaderEpoch)),
                    Effect::None,
                    Phase::Fenced,
                ),
                (60_000, pos(10, Some(4)), Effect::None, Phase::Fenced),
                // A late failure of an older request does not wake it.
                (
                    60_000,
                    Event::Failed(E::NetworkException),
                    Effect::None,
                    Phase::Fenced,
                ),
            ],
        );
    }

    #[test]
    fn test_unknown_leader_epoch_in_truncation() {
        // The leader has not applied our epoch yet: pause briefly, ask again. An
        // answer resets the failure count.
        let m = run(
            machine(true),
            &[
                (
                    0,
                    pos(10, Some(5)),
                    Effect::AskEpochEnd { epoch: 5 },
                    Phase::Truncating,
                ),
                (
                    0,
                    Event::Failed(E::UnknownLeaderEpoch),
                    Effect::PauseUntil(at(10)),
                    paused(10, Resume::Truncating),
                ),
                (
                    9,
                    pos(10, Some(5)),
                    Effect::PauseUntil(at(10)),
                    paused(10, Resume::Truncating),
                ),
                (
                    10,
                    pos(10, Some(5)),
                    Effect::AskEpochEnd { epoch: 5 },
                    Phase::Truncating,
                ),
                (
                    10,
                    Event::EpochEnd {
                        asked_epoch: 5,
                        leader: end(5, 10),
                        local: local(10, 0, Some(end(5, 10))),
                    },
                    truncate_to(10, end(5, 10), 5),
                    Phase::Truncating,
                ),
            ],
        );
        assert_eq!(m.failures(), 0);
    }

    #[test]
    fn test_unknown_leader_epoch_while_fetching() {
        run(
            fetching(),
            &[
                (
                    0,
                    Event::Fetched(FetchAnswer::Error(E::UnknownLeaderEpoch)),
                    Effect::PauseUntil(at(10)),
                    paused(10, Resume::Fetching),
                ),
                (10, pos(10, Some(5)), fetch(10, Some(5)), Phase::Fetching),
            ],
        );
    }

    #[test]
    fn should_poll_indefinitely_if_leader_returns_any_exception() {
        // Each failure in a row doubles the pause, up to replica_fetch_backoff_ms;
        // a successful append makes the next pause short again.
        let mut m = fetching();
        let mut now = 0;
        for delay in [10, 20, 40, 80, 160, 320, 640, 1000, 1000, 1000] {
            m = run(
                m,
                &[
                    (now, pos(0, None), fetch(0, None), Phase::Fetching),
                    (
                        now,
                        Event::Failed(E::NetworkException),
                        Effect::PauseUntil(at(now + delay)),
                        paused(now + delay, Resume::Fetching),
                    ),
                ],
            );
            now += delay;
        }
        run(
            m,
            &[
                (now, pos(0, None), fetch(0, None), Phase::Fetching),
                (now, appended(0, 0), Effect::None, Phase::Fetching),
                (
                    now,
                    Event::Failed(E::NetworkException),
                    Effect::PauseUntil(at(now + 10)),
                    paused(now + 10, Resume::Fetching),
                ),
            ],
        );
    }

    #[test]
    fn test_corrupt_message() {
        run(
            fetching(),
            &[
                (
                    0,
                    Event::Fetched(FetchAnswer::Records),
                    Effect::Append,
                    Phase::Fetching,
                ),
                (
                    0,
                    Event::Appended {
                        result: Err(E::CorruptMessage),
                        leader_high_watermark: 100,
                    },
                    Effect::PauseUntil(at(10)),
                    paused(10, Resume::Fetching),
                ),
            ],
        );
    }

    #[test]
    fn test_fetcher_thread_handling_partition_failure_during_appending() {
        // A storage error pauses; the local partition refusing our epoch (it became
        // leader or moved on to another epoch) fences this machine.
        run(
            fetching(),
            &[
                (
                    0,
                    Event::Appended {
                        result: Err(E::StorageError),
                        leader_high_watermark: 100,
                    },
                    Effect::PauseUntil(at(10)),
                    paused(10, Resume::Fetching),
                ),
                (10, pos(0, None), fetch(0, None), Phase::Fetching),
                (
                    10,
                    Event::Appended {
                        result: Err(E::FencedLeaderEpoch),
                        leader_high_watermark: 100,
                    },
                    Effect::None,
                    Phase::Fenced,
                ),
            ],
        );
    }

    #[test]
    fn test_fetcher_thread_handling_partition_failure_during_truncation() {
        let ask = |ms| {
            (
                ms,
                pos(10, Some(5)),
                Effect::AskEpochEnd { epoch: 5 },
                Phase::Truncating,
            )
        };
        let answer = |ms| {
            (
                ms,
                Event::EpochEnd {
                    asked_epoch: 5,
                    leader: end(5, 8),
                    local: local(10, 0, Some(end(5, 10))),
                },
                truncate_to(8, end(5, 8), 5),
                Phase::Truncating,
            )
        };
        run(
            machine(true),
            &[
                ask(0),
                answer(0),
                (
                    0,
                    Event::Truncated(Err(E::StorageError)),
                    Effect::PauseUntil(at(10)),
                    paused(10, Resume::Truncating),
                ),
                ask(10),
                answer(10),
                (
                    10,
                    Event::Truncated(Err(E::FencedLeaderEpoch)),
                    Effect::None,
                    Phase::Fenced,
                ),
            ],
        );
        // Emptying the log after an out-of-range fetch fails the same way.
        run(
            fetching(),
            &[
                (
                    0,
                    Event::LogStart {
                        leader_log_start: 50,
                        log_end_offset: 10,
                    },
                    Effect::TruncateFullyAndStartAt { offset: 50 },
                    Phase::Fetching,
                ),
                (
                    0,
                    Event::Truncated(Err(E::StorageError)),
                    Effect::PauseUntil(at(10)),
                    paused(10, Resume::Fetching),
                ),
            ],
        );
    }

    #[test]
    fn lost_fetch_session_retries_at_once() {
        // The next fetch starts a new session; the partition is not at fault.
        for code in [E::FetchSessionIdNotFound, E::InvalidFetchSessionEpoch] {
            let m = run(
                fetching(),
                &[(0, Event::Failed(code), Effect::None, Phase::Fetching)],
            );
            assert_eq!(m.failures(), 0, "{code:?}");
        }
    }

    #[test]
    fn every_other_error_pauses_the_phase_it_interrupted() {
        let codes = [
            E::UnknownServerError,
            E::CorruptMessage,
            E::UnknownTopicOrPartition,
            E::LeaderNotAvailable,
            E::NotLeaderOrFollower,
            E::RequestTimedOut,
            E::BrokerNotAvailable,
            E::ReplicaNotAvailable,
            E::NetworkException,
            E::StorageError,
            E::UnknownLeaderEpoch,
            E::OffsetNotAvailable,
            E::StaleBrokerEpoch,
            E::InvalidRequest,
        ];
        for code in codes {
            // As a partition's answer in a fetch.
            run(
                fetching(),
                &[(
                    0,
                    Event::Fetched(FetchAnswer::Error(code)),
                    Effect::PauseUntil(at(10)),
                    paused(10, Resume::Fetching),
                )],
            );
            // As the answer to OffsetsForLeaderEpoch.
            run(
                machine(true),
                &[(
                    0,
                    Event::Failed(code),
                    Effect::PauseUntil(at(10)),
                    paused(10, Resume::Truncating),
                )],
            );
        }
    }

    #[test]
    fn a_failure_during_a_pause_lengthens_it_and_keeps_the_phase_to_resume() {
        run(
            machine(true),
            &[
                (
                    0,
                    Event::Failed(E::NetworkException),
                    Effect::PauseUntil(at(10)),
                    paused(10, Resume::Truncating),
                ),
                (
                    5,
                    Event::Failed(E::NetworkException),
                    Effect::PauseUntil(at(25)),
                    paused(25, Resume::Truncating),
                ),
                (
                    25,
                    pos(3, Some(5)),
                    Effect::AskEpochEnd { epoch: 5 },
                    Phase::Truncating,
                ),
            ],
        );
    }
}
