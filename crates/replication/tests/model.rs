//! Model-based property tests of the partition core: random event sequences
//! (LeaderAndIsr announcements, appends with acks=all produces, follower
//! fetches, ticks, AlterPartition answers, `min.insync.replicas` changes,
//! follower appends and truncations) drive broker 1's `PartitionCore` of a
//! partition with replicas [1, 2, 3], against a controller that is consistent
//! (leader and partition epochs only grow, the leader is in its ISR, an ISR
//! grows only through the leader's own AlterPartition) and a reference model
//! of plain bookkeeping: the leader's LEO, what each follower reported under
//! the current leader epoch, the committed ISR and the proposal in flight,
//! `min.insync.replicas`, the acks=all produces waiting.
//!
//! After every event the core is held to the contract of the README ("The
//! replication contract") and docs/INVARIANTS.md:
//! - the high watermark stays ≤ the LEO and never goes back within a leader
//!   epoch (I7); it advances only while the committed ISR has at least
//!   `min.insync.replicas` members and only up to what every member of the
//!   maximal ISR (committed ∪ proposed) last reported; it never stands above
//!   what an ISR member has reported in this leader epoch (I1, I2); and it
//!   does advance once every ISR member has the records (no stuck HW);
//! - an acks=all produce is refused before the append below the minimum ISR
//!   (I6, I8), acknowledged only once the HW has passed it with the ISR at the
//!   minimum, by members that have it, failed once leadership or the epoch
//!   moved, and every change of its outcome comes with a wake-up of produces;
//! - ISR proposals: one at a time, not within the retry backoff, under the
//!   current epochs, never without the leader; an expansion exactly when a
//!   follower's fetch reaches the HW and the start of the leader epoch (I9); a
//!   shrink exactly for followers not caught up within the lag time (I11);
//!   one an answer left undecided sent again as is, by the first tick once
//!   its backoff is over (and the next tick asked for by then);
//! - stale announcements and fetches read under another epoch change nothing;
//!   a replica that does not lead refuses every leader-only call;
//! - a follower's HW is the leader's capped by its own log end, never lowered
//!   but by a truncation, and a role change keeps the HW.
//!
//! AlterPartition answers may be held back and reach broker 1 late: after
//! announcements, after the proposal they answer was overtaken and a newer one
//! made; the controller may also commit a change whose answer is lost (broker 1
//! gets an error). The leader is held to the rules for answers: a commit under
//! its leader epoch is applied whichever proposal it answers; any other answer
//! to a proposal no longer pending changes nothing; INELIGIBLE_REPLICA ends the
//! pending proposal (a backoff follows); any other answer leaves it pending,
//! sent again (to the controller, as a new request) by the first tick after
//! `ISR_RETRY_BACKOFF`. The two tests at the end search the two ways answers
//! once let the HW pass a follower the controller had put in the ISR.

use std::cell::Cell;
use std::collections::VecDeque;
use std::time::{Duration, Instant};

use proptest::prelude::*;
use proptest::test_runner::{RngAlgorithm, RngSeed, TestError, TestRunner};
use syncline_proto::ErrorCode;
use syncline_replication::partition::core::EpochStart;
use syncline_replication::partition::leader_state::ISR_RETRY_BACKOFF;
use syncline_replication::partition::{
    AlterPartitionResult, Announcement, CommittedIsr, Effects, FetcherChange, FollowerFetch,
    IsrChangeKind, IsrProposal, PartitionCore, ProduceCheck, ReplicationConfig, RoleChange, Wake,
};
use syncline_replication::produce::Acks;
use syncline_replication::PlantedBugs;

/// The replica under test.
const ME: i32 = 1;
const FOLLOWERS: [i32; 2] = [2, 3];
const REPLICAS: [i32; 3] = [1, 2, 3];
const LAG: Duration = Duration::from_millis(10_000);
const BROKER_EPOCH: i64 = 100;
/// The seed of every run unless `PROPTEST_RNG_SEED` names another: CI sees the
/// same cases each time.
const SEED: u64 = 0x5EED_1517;

fn follower_broker_epoch(id: i32) -> i64 {
    20 + i64::from(id)
}

// --- events ---

/// How the test starts: broker 1's log and checkpointed high watermark, the
/// ISR it is first named leader with, `min.insync.replicas`.
#[derive(Debug, Clone)]
struct Setup {
    leo: i64,
    hw: i64,
    isr_mask: u8,
    min_isr: usize,
}

#[derive(Debug, Clone)]
enum Event {
    /// The controller elects `leader` (None: offline) in a new leader epoch
    /// with the ISR of `isr_mask` (bit i: replica i + 1; the leader always);
    /// broker 1 hears of it now if `announce`.
    Elect {
        leader: Option<i32>,
        isr_mask: u8,
        announce: bool,
    },
    /// The controller takes `member` out of the ISR in the same leader epoch
    /// (its broker was fenced).
    Fence { member: i32, announce: bool },
    /// Broker 1 hears the controller's latest state.
    AnnounceLatest,
    /// An announcement `back` states older than the latest arrives late.
    AnnounceOld { back: usize },
    /// A produce of `records` records.
    Append {
        records: i64,
        acks_all: bool,
        client_epoch: ClientEpoch,
    },
    /// A follower's fetch reaches broker 1.
    Fetch {
        follower: i32,
        offset: FetchOffset,
        epoch: FetchEpoch,
        eligible: bool,
    },
    /// Time passes; the timer fires.
    Tick { ms: u64 },
    /// The controller handles the oldest AlterPartition request it has.
    Answer(Outcome),
    /// The oldest answer held back reaches broker 1.
    DeliverAnswer,
    /// `min.insync.replicas` changes.
    MinIsr { min: usize },
    /// As follower: appends what it fetched, with the leader's high watermark
    /// (`leader_hw` / 255 of a little past its new log end).
    FollowerAppend { records: i64, leader_hw: u8 },
    /// As follower: truncates `back` records.
    FollowerTruncate { back: i64 },
    /// As follower: empties its log to restart `ahead` past its end.
    FollowerRestart { ahead: i64 },
}

#[derive(Debug, Clone, Copy)]
enum ClientEpoch {
    None,
    Current,
    Stale,
    Newer,
}

/// Where a follower's fetch is.
#[derive(Debug, Clone, Copy)]
enum FetchOffset {
    /// At the leader's log end.
    LeaderEnd,
    /// At the leader's log end as of the follower's previous fetch: it has
    /// what that fetch returned.
    PreviousLeaderEnd,
    /// Where it last reported.
    Same,
    /// Some way back from where it last reported (truncated, or a late fetch).
    Back(i64),
    /// Anywhere in the leader's log (n / 255 of it).
    Anywhere(u8),
}

/// The leader epoch a fetch was read under.
#[derive(Debug, Clone, Copy)]
enum FetchEpoch {
    Current,
    Older,
    Newer,
}

#[derive(Debug, Clone, Copy)]
enum Outcome {
    /// Commit the change if valid. `announce_first`: broker 1 hears the new
    /// state before the answer; `deliver`: the answer is not held back.
    Commit { announce_first: bool, deliver: bool },
    /// Refuse it with this error, applying nothing.
    Refuse(ErrorCode),
    /// The controller commits, but the answer is lost: broker 1 gets this
    /// error instead (NETWORK_EXCEPTION once the controller channel gives up;
    /// INVALID_UPDATE_VERSION when it resends the request, which the commit
    /// made stale). Only with [`Answers::LateOrLost`]; otherwise the request
    /// never reached the controller and nothing is committed.
    CommitAnswerLost(ErrorCode),
}

/// How often each kind of event comes.
#[derive(Debug, Clone, Copy)]
enum Mix {
    /// Broker 1 leads most of the time: appends, fetches, ticks, answers.
    Leading,
    /// Leadership moves a lot; broker 1 follows in between.
    RoleChanges,
}

fn arb_setup() -> impl Strategy<Value = Setup> {
    (0i64..40).prop_flat_map(|leo| {
        let min_isr = prop_oneof![3 => Just(1), 3 => Just(2), 1 => Just(3)];
        (0..=leo, 0u8..8, min_isr).prop_map(move |(hw, isr_mask, min_isr)| Setup {
            leo,
            hw,
            isr_mask,
            min_isr,
        })
    })
}

fn arb_event(mix: Mix) -> BoxedStrategy<Event> {
    // (elect, fence, announce, follower events, answers, fetches, appends)
    let (elect, fence, announce, following, answer, fetch, append) = match mix {
        Mix::Leading => (2, 2, 2, 1, 10, 40, 20),
        Mix::RoleChanges => (8, 4, 6, 5, 6, 20, 12),
    };
    let leader = prop_oneof![
        3 => Just(Some(ME)),
        1 => Just(Some(2)),
        1 => Just(Some(3)),
        1 => Just(None),
    ];
    let refusal = prop_oneof![
        Just(ErrorCode::FencedLeaderEpoch),
        Just(ErrorCode::InvalidUpdateVersion),
        Just(ErrorCode::IneligibleReplica),
        Just(ErrorCode::NetworkException),
    ];
    let outcome = prop_oneof![
        4 => (any::<bool>(), prop::bool::weighted(0.7)).prop_map(|(announce_first, deliver)| {
            Outcome::Commit { announce_first, deliver }
        }),
        2 => refusal.prop_map(Outcome::Refuse),
        1 => prop_oneof![
            Just(ErrorCode::NetworkException),
            Just(ErrorCode::InvalidUpdateVersion),
        ]
        .prop_map(Outcome::CommitAnswerLost),
    ];
    let client_epoch = prop_oneof![
        4 => Just(ClientEpoch::Current),
        2 => Just(ClientEpoch::None),
        1 => Just(ClientEpoch::Stale),
        1 => Just(ClientEpoch::Newer),
    ];
    let offset = prop_oneof![
        6 => Just(FetchOffset::LeaderEnd),
        3 => Just(FetchOffset::PreviousLeaderEnd),
        2 => Just(FetchOffset::Same),
        1 => (1i64..10).prop_map(FetchOffset::Back),
        2 => any::<u8>().prop_map(FetchOffset::Anywhere),
    ];
    let epoch = prop_oneof![
        10 => Just(FetchEpoch::Current),
        1 => Just(FetchEpoch::Older),
        1 => Just(FetchEpoch::Newer),
    ];
    let tick = prop_oneof![
        4 => 0u64..1_000,
        3 => 1_000u64..6_000,
        2 => 9_000u64..11_000,
    ];
    prop_oneof![
        elect => (leader, 0u8..8, prop::bool::weighted(0.85)).prop_map(
            |(leader, isr_mask, announce)| Event::Elect { leader, isr_mask, announce }
        ),
        fence => (prop::sample::select(vec![2, 3]), prop::bool::weighted(0.85))
            .prop_map(|(member, announce)| Event::Fence { member, announce }),
        announce => Just(Event::AnnounceLatest),
        announce => (0usize..4).prop_map(|back| Event::AnnounceOld { back }),
        append => (1i64..=5, prop::bool::weighted(0.7), client_epoch).prop_map(
            |(records, acks_all, client_epoch)| Event::Append { records, acks_all, client_epoch }
        ),
        fetch => (prop::sample::select(vec![2, 3]), offset, epoch, prop::bool::weighted(0.9))
            .prop_map(|(follower, offset, epoch, eligible)| Event::Fetch {
                follower,
                offset,
                epoch,
                eligible,
            }),
        12 => tick.prop_map(|ms| Event::Tick { ms }),
        answer => outcome.prop_map(Event::Answer),
        2 => Just(Event::DeliverAnswer),
        3 => (1usize..=3).prop_map(|min| Event::MinIsr { min }),
        following * 2 => (0i64..=5, any::<u8>())
            .prop_map(|(records, leader_hw)| Event::FollowerAppend { records, leader_hw }),
        following => (0i64..8).prop_map(|back| Event::FollowerTruncate { back }),
        following => (1i64..20).prop_map(|ahead| Event::FollowerRestart { ahead }),
    ]
    .boxed()
}

fn scenario(mix: Mix) -> impl Strategy<Value = (Setup, Vec<Event>)> {
    (arb_setup(), prop::collection::vec(arb_event(mix), 1..60))
}

/// Failure persistence off (nothing to commit), and a fixed seed unless
/// `PROPTEST_RNG_SEED` is set; `PROPTEST_CASES` overrides `cases`. The
/// generator is XorShift unless `PROPTEST_RNG_ALGORITHM` names another: in a
/// debug build, ChaCha takes most of a run's time.
fn config(cases: u32) -> ProptestConfig {
    let default = ProptestConfig::default();
    let set = |var| std::env::var_os(var).is_some();
    ProptestConfig {
        cases: if set("PROPTEST_CASES") {
            default.cases
        } else {
            cases
        },
        failure_persistence: None,
        rng_seed: match default.rng_seed {
            RngSeed::Random => RngSeed::Fixed(SEED),
            fixed => fixed,
        },
        rng_algorithm: if set("PROPTEST_RNG_ALGORITHM") {
            default.rng_algorithm
        } else {
            RngAlgorithm::XorShift
        },
        ..default
    }
}

// --- the controller ---

/// A consistent controller: it alone changes the partition's state, each
/// change with a larger partition epoch, a leader change with a larger leader
/// epoch; it validates AlterPartition as `alter_partition.rs` does.
#[derive(Debug)]
struct Controller {
    leader: Option<i32>,
    leader_epoch: i32,
    partition_epoch: i32,
    isr: Vec<i32>,
    /// Every state it announced, oldest first.
    history: Vec<Announcement>,
    /// AlterPartition requests received and not handled yet, with the id of
    /// the proposal each carries (a resend carries its proposal's id).
    requests: VecDeque<(u64, IsrProposal)>,
    /// Answers held back, each with the id of the proposal it answers and the
    /// request as sent.
    answers: VecDeque<(u64, IsrProposal, AlterPartitionResult)>,
    /// The ids of the proposals it committed.
    committed: Vec<u64>,
}

impl Controller {
    fn change(&mut self, leader: Option<i32>, new_leader_epoch: bool, isr: Vec<i32>) {
        self.leader = leader;
        self.leader_epoch += i32::from(new_leader_epoch);
        self.partition_epoch += 1;
        self.isr = isr;
        self.history.push(Announcement {
            leader,
            leader_epoch: self.leader_epoch,
            partition_epoch: self.partition_epoch,
            replicas: REPLICAS.to_vec(),
            isr: self.isr.clone(),
        });
    }

    /// KRaft's order of checks for an AlterPartition from broker 1.
    fn validate(&self, p: &IsrProposal) -> Result<(), ErrorCode> {
        if p.leader_epoch < self.leader_epoch {
            return Err(ErrorCode::FencedLeaderEpoch);
        }
        if self.leader != Some(ME) {
            return Err(ErrorCode::InvalidRequest);
        }
        if p.partition_epoch < self.partition_epoch {
            return Err(ErrorCode::InvalidUpdateVersion);
        }
        Ok(())
    }
}

/// `members` in assignment order, as the controller writes every ISR.
fn in_replica_order(members: impl Fn(i32) -> bool) -> Vec<i32> {
    REPLICAS.iter().copied().filter(|&r| members(r)).collect()
}

fn same_set(a: &[i32], b: &[i32]) -> bool {
    a.len() == b.len() && a.iter().all(|r| b.contains(r))
}

// --- the model ---

/// What broker 1's core must know and hold, by plain bookkeeping of the
/// events it was given.
#[derive(Debug)]
struct View {
    leader: Option<i32>,
    leader_epoch: i32,
    partition_epoch: i32,
    /// The committed ISR.
    isr: Vec<i32>,
    /// Set while broker 1 leads.
    lead: Option<Lead>,
}

/// The model of one leadership of broker 1 (one leader epoch).
#[derive(Debug)]
struct Lead {
    /// The LEO when it took office: the start of its leader epoch.
    epoch_start: i64,
    /// The HW it took office with.
    start_hw: i64,
    pending: Option<Pending>,
    retry_after: Option<Instant>,
    /// When the ISR shrink check is due.
    next_check: Option<Instant>,
    /// Followers 2 and 3.
    books: [Book; 2],
}

/// The proposal in flight: pending until committed, refused as
/// INELIGIBLE_REPLICA, or overtaken by an announcement.
#[derive(Debug)]
struct Pending {
    id: u64,
    /// The proposal as sent (and sent again as is).
    sent: IsrProposal,
    /// When it is to be sent again: set by an answer that did not decide it.
    resend_at: Option<Instant>,
}

/// One follower, as its fetches under this leader epoch showed it.
#[derive(Debug, Clone, Copy, Default)]
struct Book {
    /// Its last fetch offset.
    reported: Option<i64>,
    /// Its largest fetch offset.
    max_reported: Option<i64>,
    /// Last time it was caught up with the leader's LEO (Kafka's two rules:
    /// at the LEO now, or holding what the leader had at its previous fetch).
    caught_up: Option<Instant>,
    /// Time and leader LEO of its previous fetch.
    last_fetch: Option<(Instant, i64)>,
}

impl Lead {
    fn book(&self, id: i32) -> &Book {
        &self.books[(id - 2) as usize]
    }

    fn book_mut(&mut self, id: i32) -> &mut Book {
        &mut self.books[(id - 2) as usize]
    }

    fn backing_off(&self, now: Instant) -> bool {
        self.retry_after.is_some_and(|t| now < t)
    }

    fn caught_up_within_lag(&self, id: i32, now: Instant) -> bool {
        self.book(id)
            .caught_up
            .is_some_and(|t| now.saturating_duration_since(t) <= LAG)
    }
}

/// An acks=all produce waiting in the purgatory.
#[derive(Debug, Clone, Copy)]
struct Produce {
    /// Last offset + 1.
    required: i64,
    epoch: i32,
    /// Registered by the event being checked (checked at registration).
    fresh: bool,
}

#[derive(Debug, Clone, Copy)]
struct Opts {
    planted: PlantedBugs,
    answers: Answers,
}

/// How AlterPartition answers reach broker 1. Either way an answer may be
/// held back and arrive after announcements and after the next proposal, as
/// it can from the broker's AlterPartition sender, and an answer reaches
/// broker 1 whether or not the proposal it answers is still pending.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Answers {
    /// An error means nothing was applied.
    Late,
    /// The controller may also commit a change whose answer is lost
    /// ([`Outcome::CommitAnswerLost`]).
    LateOrLost,
}

const SOUND: Opts = Opts {
    planted: PlantedBugs {
        no_second_caught_up_rule: false,
        no_min_isr_check: false,
    },
    answers: Answers::LateOrLost,
};

/// How often the runs met the cases the two answer rules are for.
#[derive(Debug, Clone, Copy, Default)]
struct Tally {
    /// Scenarios run.
    cases: u64,
    /// Answers to a proposal an announcement had overtaken, reaching broker
    /// 1 while a newer proposal was pending.
    overtaken_while_pending: u64,
    /// Answers that left the pending proposal undecided.
    undecided: u64,
    /// Proposals sent again.
    resends: u64,
    /// Commits whose answer was lost.
    lost_commits: u64,
    /// Resent proposals the controller had committed before, refused as
    /// stale (INVALID_UPDATE_VERSION).
    committed_resent: u64,
}

impl Tally {
    fn add(self, o: Tally) -> Tally {
        Tally {
            cases: self.cases + o.cases,
            overtaken_while_pending: self.overtaken_while_pending + o.overtaken_while_pending,
            undecided: self.undecided + o.undecided,
            resends: self.resends + o.resends,
            lost_commits: self.lost_commits + o.lost_commits,
            committed_resent: self.committed_resent + o.committed_resent,
        }
    }
}

/// The core's state before a call.
#[derive(Debug, Clone, Copy)]
struct Before {
    hw: i64,
    leading: bool,
    leader_epoch: i32,
}

macro_rules! ensure {
    ($cond:expr, $($msg:tt)+) => {
        if !$cond {
            return Err(format!($($msg)+));
        }
    };
}

/// The model's state before an event, for a failure's message.
struct State {
    leo: i64,
    hw: i64,
    epoch: i32,
    isr: Vec<i32>,
    maximal: Vec<i32>,
    min_isr: usize,
    books: Option<[Book; 2]>,
}

impl std::fmt::Display for State {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "leo {} hw {} epoch {} leading {} isr {:?} maximal {:?} min {} books {:?}",
            self.leo,
            self.hw,
            self.epoch,
            self.books.is_some(),
            self.isr,
            self.maximal,
            self.min_isr,
            self.books,
        )
    }
}

struct Harness {
    core: PartitionCore,
    now: Instant,
    /// Broker 1's log end.
    leo: i64,
    min_isr: usize,
    opts: Opts,
    ctrl: Controller,
    view: View,
    produces: Vec<Produce>,
    proposals: u64,
    tally: Tally,
}

impl Harness {
    fn new(setup: &Setup, opts: Opts) -> Result<Harness, String> {
        let min_isr = setup.min_isr;
        let config = ReplicationConfig {
            min_insync_replicas: min_isr,
            lag_time_max: LAG,
            planted: opts.planted,
        };
        let mut h = Harness {
            core: PartitionCore::new(ME, Some(setup.hw), 0, setup.leo, config),
            // The one clock read: every later instant is this plus the ticks.
            now: Instant::now(),
            leo: setup.leo,
            min_isr,
            opts,
            ctrl: Controller {
                leader: None,
                leader_epoch: 0,
                partition_epoch: 0,
                isr: Vec::new(),
                history: Vec::new(),
                requests: VecDeque::new(),
                answers: VecDeque::new(),
                committed: Vec::new(),
            },
            view: View {
                leader: None,
                leader_epoch: -1,
                partition_epoch: -1,
                isr: Vec::new(),
                lead: None,
            },
            produces: Vec::new(),
            proposals: 0,
            tally: Tally::default(),
        };
        h.step(&Event::Elect {
            leader: Some(ME),
            isr_mask: setup.isr_mask,
            announce: true,
        })?;
        Ok(h)
    }

    fn config(&self) -> ReplicationConfig {
        ReplicationConfig {
            min_insync_replicas: self.min_isr,
            lag_time_max: LAG,
            planted: self.opts.planted,
        }
    }

    fn before(&self) -> Before {
        Before {
            hw: self.core.high_watermark(),
            leading: self.core.is_leader(),
            leader_epoch: self.core.leader_epoch(),
        }
    }

    /// Committed ISR ∪ proposed ISR.
    fn maximal_isr(&self) -> Vec<i32> {
        let mut m = self.view.isr.clone();
        if let Some(p) = self.view.lead.as_ref().and_then(|l| l.pending.as_ref()) {
            m.extend(p.sent.new_isr.iter().filter(|r| !self.view.isr.contains(r)));
        }
        m
    }

    /// The state to show with a failure (formatted only then).
    fn state(&self) -> State {
        State {
            leo: self.leo,
            hw: self.core.high_watermark(),
            epoch: self.view.leader_epoch,
            isr: self.view.isr.clone(),
            maximal: self.maximal_isr(),
            min_isr: self.min_isr,
            books: self.view.lead.as_ref().map(|l| l.books),
        }
    }

    fn step(&mut self, event: &Event) -> Result<(), String> {
        match *event {
            Event::Elect {
                leader,
                isr_mask,
                announce,
            } => {
                let isr = in_replica_order(|r| Some(r) == leader || isr_mask & (1 << (r - 1)) != 0);
                self.ctrl.change(leader, true, isr);
                if announce {
                    self.announce_latest()?;
                }
            }
            Event::Fence { member, announce } => {
                let Some(leader) = self.ctrl.leader else {
                    return Ok(());
                };
                if member == leader || !self.ctrl.isr.contains(&member) {
                    return Ok(());
                }
                let isr = in_replica_order(|r| r != member && self.ctrl.isr.contains(&r));
                self.ctrl.change(Some(leader), false, isr);
                if announce {
                    self.announce_latest()?;
                }
            }
            Event::AnnounceLatest => self.announce_latest()?,
            Event::AnnounceOld { back } => {
                let n = self.ctrl.history.len();
                let a = self.ctrl.history[n - 1 - back.min(n - 1)].clone();
                self.announce(&a)?;
            }
            Event::Append {
                records,
                acks_all,
                client_epoch,
            } => self.append(records, acks_all, client_epoch)?,
            Event::Fetch {
                follower,
                offset,
                epoch,
                eligible,
            } => self.fetch(follower, offset, epoch, eligible)?,
            Event::Tick { ms } => self.tick(ms)?,
            Event::Answer(outcome) => self.answer(outcome)?,
            Event::DeliverAnswer => {
                if let Some((id, sent, result)) = self.ctrl.answers.pop_front() {
                    self.deliver_answer(id, &sent, result)?;
                }
            }
            Event::MinIsr { min } => {
                self.min_isr = min;
                let before = self.before();
                let e = self.core.on_config(self.config());
                if self.view.lead.is_none() {
                    ensure!(
                        e == Effects::default(),
                        "a config change on a non-leader had effects {e:?}"
                    );
                }
                ensure!(
                    e.alter_partition.is_none() && e.role == RoleChange::None,
                    "a config change had effects {e:?}"
                );
                self.after_call(&e, before)?;
            }
            Event::FollowerAppend { records, leader_hw } => {
                if !self.following()? {
                    return Ok(());
                }
                let before = self.before();
                self.leo += records;
                let leader_hw = (self.leo + 3) * i64::from(leader_hw) / 255;
                let e = self.core.on_follower_append(leader_hw, self.leo);
                let (hw, old) = (self.core.high_watermark(), before.hw);
                ensure!(
                    hw >= old.min(self.leo),
                    "a follower's HW went back from {old} to {hw} on an append (LEO {})",
                    self.leo
                );
                ensure!(
                    hw >= leader_hw.min(self.leo),
                    "a follower's HW {hw} is below the leader's {leader_hw} capped by its LEO {}",
                    self.leo
                );
                ensure!(
                    hw <= old.max(leader_hw),
                    "a follower's HW {hw} passed both its own {old} and the leader's {leader_hw}"
                );
                self.after_call(&e, before)?;
            }
            Event::FollowerTruncate { back } => {
                if !self.following()? {
                    return Ok(());
                }
                let before = self.before();
                self.leo = (self.leo - back).max(0);
                let e = self.core.on_follower_truncated(self.leo);
                ensure!(
                    self.core.high_watermark() == before.hw.min(self.leo),
                    "truncated to {} with HW {}: HW now {}",
                    self.leo,
                    before.hw,
                    self.core.high_watermark()
                );
                self.after_call(&e, before)?;
            }
            Event::FollowerRestart { ahead } => {
                if !self.following()? {
                    return Ok(());
                }
                let before = self.before();
                self.leo += ahead;
                let e = self.core.on_follower_restarted_at(self.leo);
                ensure!(
                    self.core.high_watermark() == self.leo,
                    "restarted at {}: HW {}",
                    self.leo,
                    self.core.high_watermark()
                );
                self.after_call(&e, before)?;
            }
        }
        Ok(())
    }

    /// May the follower events apply? Not while leading (the fetcher's check
    /// refuses them) or offline (no fetcher runs).
    fn following(&self) -> Result<bool, String> {
        let epoch = self.view.leader_epoch;
        if self.view.lead.is_some() {
            ensure!(
                self.core.check_follower(epoch) == Err(ErrorCode::FencedLeaderEpoch),
                "a leader lets the replica fetcher change its log"
            );
            return Ok(false);
        }
        if self.view.leader.is_none() {
            return Ok(false);
        }
        ensure!(
            self.core.check_follower(epoch) == Ok(()),
            "a follower of epoch {epoch} refuses its fetcher"
        );
        Ok(true)
    }

    fn announce_latest(&mut self) -> Result<(), String> {
        let a = self.ctrl.history.last().cloned().expect("announced");
        self.announce(&a)
    }

    /// LeaderAndIsr `a` reaches broker 1.
    fn announce(&mut self, a: &Announcement) -> Result<(), String> {
        let before = self.before();
        let v = &self.view;
        let stale = a.partition_epoch < v.partition_epoch
            || (a.partition_epoch == v.partition_epoch && a.leader_epoch == v.leader_epoch)
            || a.leader_epoch < v.leader_epoch;
        if stale {
            let seen = format!("{:?}", self.core);
            let e = self
                .core
                .on_leader_and_isr(a, self.config(), BROKER_EPOCH, self.now);
            ensure!(
                e == Effects::default(),
                "a stale announcement had effects {e:?}"
            );
            ensure!(
                format!("{:?}", self.core) == seen,
                "a stale announcement changed the core:\n  was {seen}\n  now {:?}",
                self.core
            );
            return self.after_call(&e, before);
        }
        let same_epoch = a.leader_epoch == v.leader_epoch;
        let was_leading = v.lead.is_some();
        let mut committed = None;
        let (role, fetcher, start_epoch) = if a.leader == Some(ME) {
            if same_epoch && was_leading {
                let lead = self.view.lead.as_mut().expect("leading");
                if let Some(p) = lead.pending.take() {
                    if same_set(&p.sent.new_isr, &a.isr) {
                        committed = Some((p.sent.kind, a.isr.clone()));
                    }
                }
                (RoleChange::Updated, None, None)
            } else {
                let now = self.now;
                let caught_up = |id: i32| Book {
                    caught_up: a.isr.contains(&id).then_some(now),
                    ..Book::default()
                };
                self.view.lead = Some(Lead {
                    epoch_start: self.leo,
                    start_hw: before.hw,
                    pending: None,
                    retry_after: None,
                    next_check: Some(now + LAG / 2),
                    books: [caught_up(2), caught_up(3)],
                });
                let start = EpochStart {
                    epoch: a.leader_epoch,
                    start_offset: self.leo,
                };
                (
                    RoleChange::BecameLeader,
                    Some(FetcherChange::Stop),
                    Some(start),
                )
            }
        } else {
            self.view.lead = None;
            match a.leader {
                _ if !was_leading && same_epoch => (RoleChange::Updated, None, None),
                None => (RoleChange::BecameOffline, Some(FetcherChange::Stop), None),
                Some(leader) => (
                    RoleChange::BecameFollower,
                    Some(FetcherChange::Follow {
                        leader,
                        leader_epoch: a.leader_epoch,
                    }),
                    None,
                ),
            }
        };
        self.view.leader = a.leader;
        self.view.leader_epoch = a.leader_epoch;
        self.view.partition_epoch = a.partition_epoch;
        self.view.isr = a.isr.clone();
        let e = self
            .core
            .on_leader_and_isr(a, self.config(), BROKER_EPOCH, self.now);
        ensure!(
            e.role == role,
            "announcement {a:?}: role {:?}, expected {role:?}",
            e.role
        );
        ensure!(
            e.fetcher == fetcher,
            "announcement {a:?}: fetcher {:?}, expected {fetcher:?}",
            e.fetcher
        );
        ensure!(
            e.start_epoch == start_epoch,
            "announcement {a:?}: start_epoch {:?}, expected {start_epoch:?}",
            e.start_epoch
        );
        ensure!(
            e.isr_committed == committed,
            "announcement {a:?}: isr_committed {:?}, expected {committed:?}",
            e.isr_committed
        );
        ensure!(
            e.alter_partition.is_none(),
            "an announcement proposed {:?}",
            e.alter_partition
        );
        ensure!(
            e.wake == Wake::FetchesAndProduces,
            "an announcement that changed the partition woke only {:?}",
            e.wake
        );
        let hw = self.core.high_watermark();
        ensure!(
            hw >= before.hw,
            "a role change lowered the HW from {} to {hw}",
            before.hw
        );
        if self.view.lead.is_none() {
            ensure!(
                hw == before.hw,
                "a non-leader's HW moved from {} to {hw} on an announcement",
                before.hw
            );
        }
        self.after_call(&e, before)
    }

    fn append(&mut self, records: i64, acks_all: bool, client: ClientEpoch) -> Result<(), String> {
        let epoch = self.view.leader_epoch;
        let client_epoch = match client {
            ClientEpoch::None => None,
            ClientEpoch::Current => Some(epoch),
            ClientEpoch::Stale => Some(epoch - 1),
            ClientEpoch::Newer => Some(epoch + 1),
        };
        let expected = match client_epoch {
            Some(e) if e < epoch => Err(ErrorCode::FencedLeaderEpoch),
            Some(e) if e > epoch => Err(ErrorCode::UnknownLeaderEpoch),
            _ if self.view.lead.is_none() => Err(ErrorCode::NotLeaderOrFollower),
            _ if acks_all && self.view.isr.len() < self.min_isr => {
                Err(ErrorCode::NotEnoughReplicas)
            }
            _ => Ok(epoch),
        };
        let acks = if acks_all { Acks::All } else { Acks::Leader };
        let got = self.core.check_leader_append(acks, client_epoch);
        ensure!(
            got == expected,
            "check_leader_append(acks {acks:?}, epoch {client_epoch:?}) = {got:?}, expected {expected:?}"
        );
        let Ok(append_epoch) = got else {
            return Ok(());
        };
        let before = self.before();
        self.leo += records;
        let e = self.core.on_leader_append(self.leo);
        ensure!(e.wake >= Wake::Fetches, "an append woke nobody: {e:?}");
        ensure!(
            e.alter_partition.is_none() && e.role == RoleChange::None,
            "an append had effects {e:?}"
        );
        if acks_all {
            self.produces.push(Produce {
                required: self.leo,
                epoch: append_epoch,
                fresh: true,
            });
        }
        self.after_call(&e, before)
    }

    fn fetch(
        &mut self,
        follower: i32,
        at: FetchOffset,
        epoch: FetchEpoch,
        eligible: bool,
    ) -> Result<(), String> {
        let (now, leo, before) = (self.now, self.leo, self.before());
        let leader_epoch = self.view.leader_epoch;
        let request_epoch = match epoch {
            FetchEpoch::Current => leader_epoch,
            FetchEpoch::Older => leader_epoch - 1,
            FetchEpoch::Newer => leader_epoch + 1,
        };
        let book = self
            .view
            .lead
            .as_ref()
            .map(|l| *l.book(follower))
            .unwrap_or_default();
        let offset = match at {
            FetchOffset::LeaderEnd => leo,
            FetchOffset::PreviousLeaderEnd => book.last_fetch.map_or(leo, |(_, l)| l),
            FetchOffset::Same => book.reported.unwrap_or(0),
            FetchOffset::Back(n) => book.reported.unwrap_or(leo) - n,
            FetchOffset::Anywhere(n) => leo * i64::from(n) / 255,
        }
        .clamp(0, leo);
        let fetch = FollowerFetch {
            follower_id: follower,
            broker_epoch: Some(follower_broker_epoch(follower)),
            fetch_offset: offset,
            leader_leo: leo,
            request_epoch,
            eligible,
        };
        let isr = self.view.isr.clone();
        let under_min = isr.len() < self.min_isr;
        let recorded = self.view.lead.is_some() && request_epoch == leader_epoch;
        // Why an expansion must not be proposed (empty: it must be).
        let mut against: Vec<String> = Vec::new();
        if recorded {
            let lead = self.view.lead.as_mut().expect("leading");
            let b = lead.book_mut(follower);
            b.reported = Some(offset);
            b.max_reported = b.max_reported.max(Some(offset));
            if offset >= leo {
                b.caught_up = b.caught_up.max(Some(now));
            } else if let Some((time, prev_leo)) = b.last_fetch {
                if offset >= prev_leo {
                    b.caught_up = b.caught_up.max(Some(time));
                }
            }
            b.last_fetch = Some((now, leo));
            if !eligible {
                against.push("it is not eligible".into());
            }
            if lead.pending.is_some() {
                against.push("a proposal is pending".into());
            }
            if isr.contains(&follower) {
                against.push("it is in the ISR".into());
            }
            if lead.backing_off(now) {
                against.push("a refused proposal's backoff runs".into());
            }
            if offset < before.hw {
                against.push(format!("its LEO {offset} is below the HW {}", before.hw));
            }
            if offset < lead.epoch_start {
                against.push(format!(
                    "its LEO {offset} is below the leader epoch's start {}",
                    lead.epoch_start
                ));
            }
            if under_min && !lead.caught_up_within_lag(follower, now) {
                against.push(
                    "the ISR is under min and it has not caught up within the lag time".into(),
                );
            }
        }
        let seen = (!recorded).then(|| format!("{:?}", self.core));
        let e = self.core.on_follower_fetch(now, &fetch);
        if let Some(seen) = seen {
            ensure!(
                e == Effects::default(),
                "an unrecorded fetch had effects {e:?}"
            );
            ensure!(
                format!("{:?}", self.core) == seen,
                "a fetch read under epoch {request_epoch} (current {leader_epoch}, leading {}) changed the core",
                before.leading
            );
            return self.after_call(&e, before);
        }
        match (&e.alter_partition, against.is_empty()) {
            (Some(p), true) => {
                ensure!(p.kind == IsrChangeKind::Expand, "a fetch proposed {p:?}");
                let mut expected = isr.clone();
                expected.push(follower);
                ensure!(
                    same_set(&p.new_isr, &expected),
                    "expansion of {follower} proposes {:?}, expected {expected:?}",
                    p.new_isr
                );
            }
            (Some(p), false) => {
                return Err(format!("proposed {p:?} although {}", against.join(", ")));
            }
            (None, true) => {
                let lead = self.view.lead.as_ref().expect("leading");
                let caught_up = lead.book(follower).caught_up.map_or(String::new(), |t| {
                    let ago = now.saturating_duration_since(t).as_millis();
                    format!(", caught up {ago} ms ago")
                });
                return Err(format!(
                    "follower {follower} fetching at {offset} (HW {}, epoch start {}{caught_up}) was not proposed into the ISR {isr:?} (min.insync.replicas {})",
                    before.hw, lead.epoch_start, self.min_isr
                ));
            }
            (None, false) => {}
        }
        ensure!(
            e.role == RoleChange::None,
            "a fetch changed the role: {e:?}"
        );
        self.record_proposal(&e)?;
        self.after_call(&e, before)
    }

    fn tick(&mut self, ms: u64) -> Result<(), String> {
        self.now += Duration::from_millis(ms);
        let (now, leo, before) = (self.now, self.leo, self.before());
        let isr = self.view.isr.clone();
        // A shrink (its ISR), or the pending proposal sent again.
        let mut expected: Option<Vec<i32>> = None;
        let mut resend: Option<IsrProposal> = None;
        let mut blocked = None;
        if let Some(lead) = self.view.lead.as_mut() {
            // An undecided proposal due again is sent, whether or not the
            // shrink check is due.
            resend = lead
                .pending
                .as_mut()
                .filter(|p| p.resend_at.is_some_and(|t| now >= t))
                .map(|p| {
                    p.resend_at = None;
                    p.sent.clone()
                });
            let due = lead.next_check.is_none_or(|t| now >= t);
            if due {
                lead.next_check = Some(now + LAG / 2);
                let out: Vec<i32> = FOLLOWERS
                    .iter()
                    .copied()
                    .filter(|f| isr.contains(f))
                    .filter(|&f| {
                        lead.book(f).reported != Some(leo) && !lead.caught_up_within_lag(f, now)
                    })
                    .collect();
                if lead.pending.is_some() {
                    blocked = Some("a proposal is pending");
                } else if lead.backing_off(now) {
                    blocked = Some("a refused proposal's backoff runs");
                } else if !out.is_empty() {
                    expected = Some(isr.iter().copied().filter(|r| !out.contains(r)).collect());
                }
            } else {
                blocked = Some("the shrink check is not due");
            }
        }
        let e = self.core.on_tick(now);
        if self.view.lead.is_none() {
            ensure!(
                e == Effects::default(),
                "a tick on a non-leader had effects {e:?}"
            );
            return self.after_call(&e, before);
        }
        ensure!(
            e.role == RoleChange::None && e.high_watermark.is_none(),
            "a tick had effects {e:?}"
        );
        match (&e.alter_partition, &expected, &resend) {
            (Some(p), _, Some(sent)) => ensure!(
                p == sent,
                "a tick sent {p:?} instead of the pending proposal {sent:?}, due again"
            ),
            (None, _, Some(sent)) => {
                return Err(format!(
                    "the pending proposal {sent:?} was not sent again, although an answer left it undecided at least {} ms ago",
                    ISR_RETRY_BACKOFF.as_millis()
                ));
            }
            (Some(p), Some(new_isr), None) => {
                ensure!(p.kind == IsrChangeKind::Shrink, "a tick proposed {p:?}");
                ensure!(
                    same_set(&p.new_isr, new_isr),
                    "shrink proposes {:?}, expected {new_isr:?}",
                    p.new_isr
                );
            }
            (Some(p), None, None) => {
                let lead = self.view.lead.as_ref().expect("leading");
                if let Some(pending) = &lead.pending {
                    let due_in = pending.resend_at.map(|t| t.saturating_duration_since(now));
                    return Err(format!(
                        "a tick proposed {p:?} while {:?} is pending, not due again (due in {due_in:?})",
                        pending.sent
                    ));
                }
                let why = FOLLOWERS
                    .iter()
                    .filter(|f| isr.contains(f) && !p.new_isr.contains(f))
                    .map(|&f| {
                        let b = lead.book(f);
                        if lead.caught_up_within_lag(f, now) {
                            let ago = now.saturating_duration_since(b.caught_up.expect("caught up"));
                            format!(
                                "spurious shrink: follower {f} was caught up {} ms ago, within the lag time",
                                ago.as_millis()
                            )
                        } else if b.reported == Some(leo) {
                            format!("spurious shrink: follower {f} is at the leader's LEO {leo}")
                        } else {
                            format!("follower {f} is out of sync, but {}", blocked.unwrap_or("?"))
                        }
                    })
                    .collect::<Vec<_>>();
                return Err(format!("a tick proposed {p:?}: {}", why.join("; ")));
            }
            (None, Some(new_isr), None) => {
                return Err(format!(
                    "followers out of sync for more than the lag time were not proposed out: expected ISR {new_isr:?}"
                ));
            }
            (None, None, None) => {}
        }
        self.record_proposal(&e)?;
        self.after_call(&e, before)
    }

    /// An ISR proposal in `e`: check what holds for every kind and make it
    /// pending, sent to the controller; or the pending proposal sent again (a
    /// new request to the controller, for the same proposal).
    fn record_proposal(&mut self, e: &Effects) -> Result<(), String> {
        let Some(p) = &e.alter_partition else {
            return Ok(());
        };
        let now = self.now;
        let (leader_epoch, partition_epoch) = (self.view.leader_epoch, self.view.partition_epoch);
        let Some(lead) = self.view.lead.as_mut() else {
            return Err(format!("a non-leader proposed {p:?}"));
        };
        ensure!(
            !lead.backing_off(now),
            "proposed {p:?} within the retry backoff"
        );
        ensure!(
            p.new_isr.contains(&ME),
            "a proposal removes the leader: {p:?}"
        );
        ensure!(
            p.members.contains(&(ME, BROKER_EPOCH)),
            "a proposal without the leader's broker epoch: {p:?}"
        );
        ensure!(
            (p.leader_epoch, p.partition_epoch) == (leader_epoch, partition_epoch),
            "proposed under epochs {:?}, the current are {:?}",
            (p.leader_epoch, p.partition_epoch),
            (leader_epoch, partition_epoch)
        );
        if let Some(pending) = &lead.pending {
            ensure!(
                pending.sent.same_change(p),
                "proposed {p:?} while {:?} is pending",
                pending.sent
            );
            self.tally.resends += 1;
            self.ctrl.requests.push_back((pending.id, p.clone()));
            return Ok(());
        }
        self.proposals += 1;
        lead.pending = Some(Pending {
            id: self.proposals,
            sent: p.clone(),
            resend_at: None,
        });
        self.ctrl.requests.push_back((self.proposals, p.clone()));
        Ok(())
    }

    /// The controller handles the oldest request it has; its answer reaches
    /// broker 1 after the answers held back, or is held back too.
    fn answer(&mut self, outcome: Outcome) -> Result<(), String> {
        let Some((id, request)) = self.ctrl.requests.pop_front() else {
            return Ok(());
        };
        let commits = match outcome {
            Outcome::Commit { .. } => true,
            Outcome::CommitAnswerLost(_) => self.opts.answers == Answers::LateOrLost,
            Outcome::Refuse(_) => false,
        };
        let result = match self.ctrl.validate(&request) {
            Err(code) => {
                if code == ErrorCode::InvalidUpdateVersion && self.ctrl.committed.contains(&id) {
                    self.tally.committed_resent += 1;
                }
                Err(code)
            }
            Ok(()) if !commits => Err(match outcome {
                Outcome::Refuse(code) | Outcome::CommitAnswerLost(code) => code,
                Outcome::Commit { .. } => unreachable!("commits"),
            }),
            Ok(()) => {
                let proposed = request.new_isr.clone();
                let isr = in_replica_order(|r| proposed.contains(&r));
                self.ctrl.change(Some(ME), false, isr.clone());
                self.ctrl.committed.push(id);
                if let Outcome::Commit {
                    announce_first: true,
                    ..
                } = outcome
                {
                    self.announce_latest()?;
                }
                match outcome {
                    Outcome::CommitAnswerLost(code) => {
                        self.tally.lost_commits += 1;
                        Err(code)
                    }
                    _ => Ok(CommittedIsr {
                        isr,
                        leader_epoch: self.ctrl.leader_epoch,
                        partition_epoch: self.ctrl.partition_epoch,
                    }),
                }
            }
        };
        self.ctrl.answers.push_back((id, request, result));
        if !matches!(outcome, Outcome::Commit { deliver: false, .. }) {
            let (id, sent, result) = self.ctrl.answers.pop_front().expect("queued");
            self.deliver_answer(id, &sent, result)?;
        }
        Ok(())
    }

    /// The controller's `result` for `sent`, a request for proposal `id`,
    /// reaches broker 1.
    fn deliver_answer(
        &mut self,
        id: u64,
        sent: &IsrProposal,
        result: AlterPartitionResult,
    ) -> Result<(), String> {
        let (now, before) = (self.now, self.before());
        let (leader_epoch, partition_epoch) = (self.view.leader_epoch, self.view.partition_epoch);
        let mut committed = None;
        // Nothing changes in the core.
        let mut no_op = false;
        // The pending proposal stays pending, to be sent again: no effects.
        let mut undecided = false;
        match (self.view.lead.as_mut(), &result) {
            (None, _) => no_op = true,
            // A commit under the current leader epoch, whichever proposal it
            // answers.
            (Some(lead), Ok(c)) if c.leader_epoch == leader_epoch => {
                if c.partition_epoch > partition_epoch {
                    if let Some(p) = lead.pending.take() {
                        if same_set(&p.sent.new_isr, &c.isr) {
                            committed = Some((p.sent.kind, c.isr.clone()));
                        }
                    }
                    self.view.isr = c.isr.clone();
                    self.view.partition_epoch = c.partition_epoch;
                } else {
                    no_op = true;
                }
            }
            // Anything else about a proposal an announcement overtook.
            (Some(lead), _) if lead.pending.as_ref().is_none_or(|p| p.id != id) => {
                no_op = true;
                if lead.pending.is_some() {
                    self.tally.overtaken_while_pending += 1;
                }
            }
            // Not applied, says the controller: back to the committed ISR.
            (Some(lead), Err(ErrorCode::IneligibleReplica)) => {
                lead.pending = None;
                lead.retry_after = Some(now + ISR_RETRY_BACKOFF);
            }
            // Maybe applied: it stays pending, sent again after the backoff.
            (Some(lead), _) => {
                let p = lead.pending.as_mut().expect("pending");
                p.resend_at = Some(now + ISR_RETRY_BACKOFF);
                undecided = true;
                self.tally.undecided += 1;
            }
        }
        let seen = no_op.then(|| format!("{:?}", self.core));
        let e = self
            .core
            .on_alter_partition_result(sent, result.clone(), now);
        if no_op || undecided {
            ensure!(
                e == Effects::default(),
                "answer {result:?} to {sent:?} had effects {e:?}"
            );
        }
        if let Some(seen) = seen {
            ensure!(
                format!("{:?}", self.core) == seen,
                "answer {result:?} to {sent:?} changed the core although it applies to nothing"
            );
        }
        ensure!(
            e.isr_committed == committed,
            "answer {result:?}: isr_committed {:?}, expected {committed:?}",
            e.isr_committed
        );
        ensure!(
            e.alter_partition.is_none() && e.role == RoleChange::None && e.fetcher.is_none(),
            "answer {result:?} had effects {e:?}"
        );
        self.after_call(&e, before)
    }

    /// What holds after every call into the core.
    fn after_call(&mut self, e: &Effects, before: Before) -> Result<(), String> {
        let c = &self.core;
        let hw = c.high_watermark();
        let epoch = self.view.leader_epoch;
        ensure!(
            c.leader_epoch() == epoch,
            "leader epoch {}, the model has {epoch}",
            c.leader_epoch()
        );
        ensure!(
            c.is_leader() == self.view.lead.is_some(),
            "is_leader {}, the model says {}",
            c.is_leader(),
            self.view.lead.is_some()
        );
        ensure!(
            c.log_end_offset() == self.leo,
            "LEO {}, the model has {}",
            c.log_end_offset(),
            self.leo
        );
        ensure!(hw <= self.leo, "HW {hw} above the LEO {}", self.leo);
        if hw != before.hw {
            ensure!(
                e.high_watermark == Some(hw),
                "the HW moved from {} to {hw} but the effects publish {:?}",
                before.hw,
                e.high_watermark
            );
        }
        if let Some(published) = e.high_watermark {
            ensure!(
                published == hw,
                "published HW {published}, the core has {hw}"
            );
            ensure!(
                e.wake == Wake::FetchesAndProduces,
                "HW {hw} published without waking produces"
            );
        }
        match (&self.view.lead, c.leader_state()) {
            (Some(lead), Some(l)) => {
                ensure!(
                    same_set(l.isr(), &self.view.isr),
                    "leader's ISR {:?}, the model has {:?}",
                    l.isr(),
                    self.view.isr
                );
                let pending = lead.pending.as_ref().map(|p| (&p.sent, p.resend_at));
                ensure!(
                    l.pending().map(|p| (&p.proposal, p.resend_at)) == pending
                        && l.pending().map(|p| &p.isr) == pending.map(|(p, _)| &p.new_isr),
                    "pending {:?}, the model has {pending:?}",
                    l.pending()
                );
                let next = lead.next_check.unwrap_or(self.now);
                let next = pending
                    .and_then(|(_, resend_at)| resend_at)
                    .map_or(next, |t| t.min(next));
                let got = c.next_shrink_check(self.now);
                ensure!(
                    got == Some(next),
                    "next tick due in {:?}, the model has in {:?}",
                    got.map(|t| t.saturating_duration_since(self.now)),
                    next.saturating_duration_since(self.now)
                );
                ensure!(
                    l.partition_epoch() == self.view.partition_epoch,
                    "partition epoch {}, the model has {}",
                    l.partition_epoch(),
                    self.view.partition_epoch
                );
                ensure!(
                    l.min_insync_replicas() == self.min_isr,
                    "min ISR {}",
                    l.min_insync_replicas()
                );
                if before.leading && before.leader_epoch == epoch {
                    ensure!(
                        hw >= before.hw,
                        "HW went back from {} to {hw} within leader epoch {epoch}",
                        before.hw
                    );
                }
                let maximal = self.maximal_isr();
                let members = || FOLLOWERS.into_iter().filter(|f| maximal.contains(f));
                if hw > before.hw {
                    ensure!(
                        self.view.isr.len() >= self.min_isr,
                        "HW advanced from {} to {hw} while the ISR {:?} is below min.insync.replicas {}",
                        before.hw,
                        self.view.isr,
                        self.min_isr
                    );
                    for f in members() {
                        let reported = lead.book(f).reported;
                        ensure!(
                            reported.is_some_and(|r| r >= hw),
                            "HW advanced to {hw} although ISR member {f} last reported {reported:?}"
                        );
                    }
                }
                if hw > lead.start_hw {
                    for f in members() {
                        let most = lead.book(f).max_reported;
                        ensure!(
                            most.is_some_and(|r| r >= hw),
                            "HW {hw} is above anything ISR member {f} reported in leader epoch {epoch} ({most:?}): it lacks committed records"
                        );
                    }
                }
                if self.view.isr.len() >= self.min_isr {
                    let reported: Option<Vec<i64>> =
                        members().map(|f| lead.book(f).reported).collect();
                    if let Some(reported) = reported {
                        let all_have = reported.into_iter().fold(self.leo, i64::min);
                        ensure!(
                            hw >= all_have,
                            "HW {hw} stuck below {all_have}, which every member of the ISR {maximal:?} has"
                        );
                    }
                }
            }
            (None, None) => {
                ensure!(
                    e.alter_partition.is_none(),
                    "a non-leader proposed {:?}",
                    e.alter_partition
                );
                let refused = Some(ErrorCode::NotLeaderOrFollower);
                ensure!(
                    c.check_leader_append(Acks::All, None).err() == refused
                        && c.check_leader_append(Acks::Leader, Some(epoch)).err() == refused,
                    "a non-leader accepts appends"
                );
                ensure!(
                    c.check_follower_read(2, None).err() == refused,
                    "a non-leader serves follower fetches"
                );
                ensure!(
                    c.check_epoch_lookup(None, true).err() == refused,
                    "a non-leader answers OffsetsForLeaderEpoch as leader"
                );
                ensure!(
                    c.check_produce(0, epoch)
                        == ProduceCheck::Failed(ErrorCode::NotLeaderOrFollower),
                    "a non-leader completes acks=all produces"
                );
                ensure!(
                    c.next_shrink_check(self.now).is_none(),
                    "a non-leader has a shrink check due"
                );
            }
            (lead, state) => {
                return Err(format!(
                    "leading {} but leader state {}",
                    lead.is_some(),
                    state.is_some()
                ))
            }
        }
        self.check_produces(e)
    }

    /// Every acks=all produce waiting: where it must stand, and one that is
    /// done is answered (it was woken, or checked as it was registered).
    fn check_produces(&mut self, e: &Effects) -> Result<(), String> {
        let hw = self.core.high_watermark();
        let maximal = self.maximal_isr();
        let mut waiting = Vec::new();
        for p in std::mem::take(&mut self.produces) {
            let got = self.core.check_produce(p.required, p.epoch);
            let leading_its_epoch = self.view.lead.is_some() && p.epoch == self.view.leader_epoch;
            let under_min = self.view.isr.len() < self.min_isr;
            let what = format!(
                "produce up to {} of epoch {} (HW {hw})",
                p.required, p.epoch
            );
            match &got {
                _ if !leading_its_epoch => ensure!(
                    got == ProduceCheck::Failed(ErrorCode::NotLeaderOrFollower),
                    "{what}: {got:?} after broker 1 stopped leading epoch {}",
                    p.epoch
                ),
                ProduceCheck::Pending => ensure!(
                    hw < p.required,
                    "{what}: still pending although the HW has passed it"
                ),
                _ if hw < p.required => {
                    return Err(format!("{what}: {got:?} before the HW passed it"));
                }
                ProduceCheck::Acked { isr, replicas } => {
                    ensure!(
                        !under_min,
                        "{what}: acknowledged while the ISR {:?} is below min.insync.replicas {}",
                        self.view.isr,
                        self.min_isr
                    );
                    ensure!(
                        *replicas == 3,
                        "{what}: acknowledged with {replicas} replicas"
                    );
                    ensure!(
                        isr.len() >= self.min_isr && isr.contains(&ME),
                        "{what}: acknowledged by {isr:?} (min.insync.replicas {})",
                        self.min_isr
                    );
                    let lead = self.view.lead.as_ref().expect("leading");
                    for &m in isr.iter().filter(|&&m| m != ME) {
                        let most = lead.book(m).max_reported;
                        ensure!(
                            maximal.contains(&m) && most.is_some_and(|r| r >= p.required),
                            "{what}: acknowledged by {isr:?}, but {m} reported only {most:?}"
                        );
                    }
                }
                ProduceCheck::Failed(code) => ensure!(
                    under_min && *code == ErrorCode::NotEnoughReplicasAfterAppend,
                    "{what}: failed with {code:?} (ISR {:?}, min {})",
                    self.view.isr,
                    self.min_isr
                ),
            }
            if got == ProduceCheck::Pending {
                waiting.push(Produce { fresh: false, ..p });
            } else {
                ensure!(
                    p.fresh || e.wake == Wake::FetchesAndProduces,
                    "{what}: done ({got:?}) but the event woke only {:?}: it waits forever",
                    e.wake
                );
            }
        }
        self.produces = waiting;
        Ok(())
    }
}

/// Runs one scenario; the failure names the event and the model's state.
fn run(setup: &Setup, events: &[Event], opts: Opts) -> Result<Tally, TestCaseError> {
    let mut h =
        Harness::new(setup, opts).map_err(|e| TestCaseError::fail(format!("setup: {e}")))?;
    for (i, event) in events.iter().enumerate() {
        let state = h.state();
        h.step(event).map_err(|e| {
            TestCaseError::fail(format!("event {i} {event:?}: {e}\n  state before: {state}"))
        })?;
    }
    Ok(Tally {
        cases: 1,
        ..h.tally
    })
}

proptest! {
    #![proptest_config(config(256))]

    /// Broker 1 leading most of the time: the high watermark, the ISR
    /// proposals and acks=all completion follow the model after every event.
    #[test]
    fn a_leaders_high_watermark_isr_and_acks_follow_the_model(
        (setup, events) in scenario(Mix::Leading)
    ) {
        run(&setup, &events, SOUND)?;
    }

    /// Leadership moving between brokers, stale and skipped announcements,
    /// broker 1 following in between: roles, epochs and high watermarks
    /// follow the model after every event.
    #[test]
    fn role_changes_and_stale_announcements_follow_the_model(
        (setup, events) in scenario(Mix::RoleChanges)
    ) {
        run(&setup, &events, SOUND)?;
    }
}

/// A failure found by [`search`]: the message, and the scenario that gives it.
type Failure = (String, Setup, Vec<Event>);

/// Runs `cases` scenarios with `opts`: what they met, or the first failure,
/// shrunk by proptest and then by dropping each event that the failure does
/// not need.
fn search(opts: Opts, mix: Mix, cases: u32) -> Result<Tally, Failure> {
    let mut runner = TestRunner::new(config(cases));
    let tally = Cell::new(Tally::default());
    let found = runner.run(&scenario(mix), |(setup, events)| {
        let t = run(&setup, &events, opts)?;
        tally.set(tally.get().add(t));
        Ok(())
    });
    let (setup, mut events) = match found {
        Ok(()) => return Ok(tally.get()),
        Err(TestError::Fail(_, found)) => found,
        Err(TestError::Abort(reason)) => panic!("search aborted: {reason}"),
    };
    let mut i = 0;
    while i < events.len() {
        let mut fewer = events.clone();
        fewer.remove(i);
        if run(&setup, &fewer, opts).is_err() {
            events = fewer;
        } else {
            i += 1;
        }
    }
    let reason = run(&setup, &events, opts).expect_err("still fails");
    Err((reason.to_string(), setup, events))
}

/// The model can fail: each rule a simulation run may undo (`PlantedBugs`) is
/// caught, with the message naming the broken rule. Neither is caught by the
/// core's own debug invariants.
#[test]
fn the_model_catches_each_planted_bug() {
    let cases: [(&str, PlantedBugs, &str); 2] = [
        (
            "no_min_isr_check",
            PlantedBugs {
                no_min_isr_check: true,
                ..PlantedBugs::default()
            },
            "below min.insync.replicas",
        ),
        (
            "no_second_caught_up_rule",
            PlantedBugs {
                no_second_caught_up_rule: true,
                ..PlantedBugs::default()
            },
            "caught up",
        ),
    ];
    for (name, planted, expected) in cases {
        let opts = Opts { planted, ..SOUND };
        let (reason, setup, events) = search(opts, Mix::Leading, 1024)
            .err()
            .unwrap_or_else(|| panic!("{name}: not caught"));
        eprintln!("{name}: {reason}\n  minimal: {setup:?}\n  {events:#?}");
        assert!(
            reason.contains(expected),
            "{name}: caught, but not as {expected:?}: {reason}"
        );
    }
}

/// Found by this model: an AlterPartition answer that arrived after an
/// announcement ended its proposal was applied to whatever proposal was
/// pending by then. A refusal of the old proposal ended a newer expansion,
/// the maximal ISR dropped the follower, the HW passed its log end; the
/// controller then committed the expansion, and an ISR member lacked
/// committed records. The leader now matches an answer to the proposal sent,
/// as Kafka's `Partition` does: an answer to an overtaken proposal decides
/// nothing (a commit under its leader epoch is still applied). Errors here
/// mean that nothing was applied, so that only late answers are in play.
#[test]
fn an_answer_to_an_overtaken_proposal_never_leaves_an_isr_member_without_committed_records() {
    let opts = Opts {
        answers: Answers::Late,
        ..SOUND
    };
    match search(opts, Mix::Leading, 2048) {
        Ok(tally) => {
            eprintln!("{tally:?}");
            assert!(
                tally.overtaken_while_pending >= tally.cases / 100,
                "too few answers to overtaken proposals met a newer one: {tally:?}"
            );
        }
        Err((reason, setup, events)) => panic!("{reason}\n  minimal: {setup:?}\n  {events:#?}"),
    }
}

/// Found by this model: when the controller committed an expansion but its
/// answer was lost (the controller channel gives up with NETWORK_EXCEPTION,
/// or resends and gets INVALID_UPDATE_VERSION), the leader took the error for
/// a refusal and dropped the follower from the maximal ISR; the HW passed the
/// follower's log end before the announcement of the committed ISR arrived,
/// and an ISR member lacked committed records. As Kafka's
/// `Partition::handleAlterPartitionError` does, only INELIGIBLE_REPLICA (the
/// controller applied nothing) now ends the proposal; any other answer keeps
/// it pending, sent again after `ISR_RETRY_BACKOFF` (a resent committed change
/// comes back as INVALID_UPDATE_VERSION) until an announcement decides it.
#[test]
fn a_lost_answer_to_a_committed_expansion_never_leaves_an_isr_member_without_committed_records() {
    let opts = Opts {
        answers: Answers::LateOrLost,
        ..SOUND
    };
    match search(opts, Mix::Leading, 2048) {
        Ok(tally) => {
            eprintln!("{tally:?}");
            assert!(
                tally.lost_commits >= tally.cases / 100
                    && tally.committed_resent >= tally.cases / 100,
                "too few lost answers to commits, or resends of committed changes: {tally:?}"
            );
        }
        Err((reason, setup, events)) => panic!("{reason}\n  minimal: {setup:?}\n  {events:#?}"),
    }
}
