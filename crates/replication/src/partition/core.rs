//! The partition core: every replication rule of one partition replica, as a pure
//! state machine. It holds the replica's role (leader with its [`LeaderState`], or
//! not), the announced leader, epochs, replicas and ISR, and the **one** high
//! watermark; it takes events (a LeaderAndIsr announcement, an append, a follower
//! fetch, an AlterPartition answer, a timer tick, a follower append or truncation)
//! with `now` and the log's facts passed in, and returns [`Effects`]: values that
//! say what must happen (record a new leader epoch, publish the new high
//! watermark, count a committed ISR change, send an AlterPartition, start or stop
//! fetching, wake waiting fetches and produces). It does no I/O and reads no clock.
//!
//! The shell executes effects in two layers, each the only one for its part:
//! The broker's `Partition` shell executes those on the log and its own mirrors
//! while it holds the partition's lock (`start_epoch` before any append of the new
//! epoch, `high_watermark`, `isr_committed`); the replica manager executes the rest
//! (`wake`, `alter_partition`, `fetcher`).

use std::time::Duration;

use std::time::Instant;

use syncline_proto::{pb, EpochEndOffset, ErrorCode, TimestampOffset, NO_LEADER};

use super::leader_state::{BecomeLeader, FollowerFetch, IsrChangeKind, IsrProposal, LeaderState};
use crate::announcement::{freshness, Epochs, Freshness};
use crate::planted::PlantedBugs;
use crate::produce::Acks;

/// The part of a topic's config the replication rules read.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ReplicationConfig {
    /// `min.insync.replicas` (at least 1).
    pub min_insync_replicas: usize,
    /// `replica.lag.time.max.ms`.
    pub lag_time_max: Duration,
    /// Rules a simulation run undoes (none outside it).
    pub planted: PlantedBugs,
}

/// One partition's state as the controller announces it (LeaderAndIsr).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Announcement {
    /// The leader (None: offline).
    pub leader: Option<i32>,
    /// The leader epoch.
    pub leader_epoch: i32,
    /// The partition epoch (bumped by every change of leader, ISR or replicas).
    pub partition_epoch: i32,
    /// The assigned replicas, in preference order.
    pub replicas: Vec<i32>,
    /// The committed ISR.
    pub isr: Vec<i32>,
}

impl Announcement {
    /// Its epochs, to compare with a known state's.
    #[must_use]
    pub fn epochs(&self) -> Epochs {
        Epochs {
            leader_epoch: self.leader_epoch,
            partition_epoch: self.partition_epoch,
        }
    }
}

impl From<&pb::PartitionState> for Announcement {
    fn from(ps: &pb::PartitionState) -> Announcement {
        Announcement {
            leader: (ps.leader != NO_LEADER).then_some(ps.leader),
            leader_epoch: ps.leader_epoch,
            partition_epoch: ps.partition_epoch,
            replicas: ps.replicas.clone(),
            isr: ps.isr.clone(),
        }
    }
}

/// An ISR the controller committed in answer to our AlterPartition.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CommittedIsr {
    /// The new ISR.
    pub isr: Vec<i32>,
    /// The leader epoch it was committed under.
    pub leader_epoch: i32,
    /// Its partition epoch.
    pub partition_epoch: i32,
}

/// The controller's answer to an AlterPartition.
pub type AlterPartitionResult = Result<CommittedIsr, ErrorCode>;

/// What changed in a role transition.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum RoleChange {
    /// Stale or identical announcement: nothing to do.
    #[default]
    None,
    /// Same leader and epoch; ISR/replicas/partition epoch updated.
    Updated,
    /// This replica leads a new leader epoch.
    BecameLeader,
    /// This replica follows a new leader or leader epoch.
    BecameFollower,
    /// No leader: the partition is offline.
    BecameOffline,
    /// This broker is no longer a replica (a reassignment moved it off, or the
    /// topic was deleted): it serves nothing and its copy goes.
    Removed,
}

/// Whom to wake in the purgatories, weakest first (merging keeps the strongest).
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Default)]
pub enum Wake {
    /// No one.
    #[default]
    Nobody,
    /// Fetches waiting on the partition: records were appended.
    Fetches,
    /// Fetches and acks=all produces: the high watermark moved, or the partition
    /// changed under them (role, epoch) and they must answer.
    FetchesAndProduces,
}

/// What the replica fetchers must do for the partition.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum FetcherChange {
    /// Fetch from `leader` under `leader_epoch` (truncating first).
    Follow {
        /// The leader to fetch from.
        leader: i32,
        /// Its leader epoch.
        leader_epoch: i32,
    },
    /// Stop fetching the partition (it leads, or is offline).
    Stop,
}

/// A new leader epoch starts at `start_offset`: record it in the leader-epoch
/// cache before anything is appended under it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct EpochStart {
    /// The new leader epoch.
    pub epoch: i32,
    /// Its first offset (the leader's LEO when it took office).
    pub start_offset: i64,
}

/// What an event requires of the shell. See the module docs for who executes what.
#[must_use = "effects do nothing unless the shell executes them"]
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Effects {
    /// The role transition an announcement made (for logs and callers).
    pub role: RoleChange,
    /// Record a new leader epoch in the log's epoch cache.
    pub start_epoch: Option<EpochStart>,
    /// The high watermark moved to this value: publish it.
    pub high_watermark: Option<i64>,
    /// Our own ISR proposal committed (count it, with the new ISR for the log).
    pub isr_committed: Option<(IsrChangeKind, Vec<i32>)>,
    /// Propose this ISR change to the controller.
    pub alter_partition: Option<IsrProposal>,
    /// Start or stop fetching.
    pub fetcher: Option<FetcherChange>,
    /// Wake waiting operations.
    pub wake: Wake,
}

impl Effects {
    /// The same effects, waking every waiter on the partition.
    pub fn wake_all(self) -> Effects {
        self.wake(Wake::FetchesAndProduces)
    }

    fn wake(mut self, wake: Wake) -> Effects {
        self.wake = self.wake.max(wake);
        self
    }

    /// The high watermark moved to `hw`: publish it and wake every waiter on it.
    fn high_watermark(mut self, hw: i64) -> Effects {
        self.high_watermark = Some(hw);
        self.wake(Wake::FetchesAndProduces)
    }
}

/// Where an acks=all produce stands.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ProduceCheck {
    /// The high watermark has not reached it yet.
    Pending,
    /// Done, acknowledged.
    Acked {
        /// The ISR members that have the records.
        isr: Vec<i32>,
        /// The partition's replica count at that moment (a reassignment adds
        /// and removes replicas while records wait, so it is taken with the
        /// ISR, not at append).
        replicas: i32,
    },
    /// Done, with this error.
    Failed(ErrorCode),
}

/// Why a fetch waiting in the purgatory should be answered now.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum FetchReadiness {
    /// This many bytes are there to read.
    Bytes(u64),
    /// The partition changed under the fetch (role, epoch, truncation, divergence):
    /// answer now with whatever the read says.
    Changed,
}

/// Health figures of a partition this broker leads.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct LeaderHealth {
    /// Members of the committed ISR.
    pub isr_size: usize,
    /// Assigned replicas.
    pub replicas: usize,
    /// The topic's `min.insync.replicas`.
    pub min_insync_replicas: usize,
    /// The largest follower lag, in offsets.
    pub max_follower_lag: i64,
}

#[derive(Debug, Clone)]
enum Role {
    Leader(Box<LeaderState>),
    /// Following, offline, or not told yet: the high watermark is the follower's.
    NotLeader {
        high_watermark: i64,
    },
}

/// See the module docs. Invariants (checked in debug builds): HW ≤ LEO, the leader
/// epoch never decreases, a leader's ISR contains it.
#[derive(Debug, Clone)]
pub struct PartitionCore {
    local_id: i32,
    leader: Option<i32>,
    /// -1 until the first announcement.
    leader_epoch: i32,
    /// -1 until the first announcement.
    partition_epoch: i32,
    replicas: Vec<i32>,
    isr: Vec<i32>,
    role: Role,
    /// The log's end offset, as the shell last reported it.
    log_end_offset: i64,
    /// When the leader's next ISR shrink check is due (None: at the next tick).
    next_shrink_check: Option<Instant>,
    config: ReplicationConfig,
}

/// What ListOffsets answers for one partition.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ListedOffset {
    /// The offset found (-1: none).
    pub offset: i64,
    /// The record's timestamp; -1 for earliest and latest, and when nothing was
    /// found.
    pub timestamp: i64,
    /// The epoch of the record's batch; the current one for earliest and latest.
    pub leader_epoch: i32,
}

impl ListedOffset {
    /// No record at or after the timestamp asked for (Kafka's UNKNOWN_OFFSET).
    pub const NOT_FOUND: ListedOffset = ListedOffset {
        offset: -1,
        timestamp: -1,
        leader_epoch: -1,
    };
}

/// KIP-320: a request's leader epoch against the replica's. Older is fenced, newer
/// is not known here yet; none given is not checked.
pub fn check_epoch(current: i32, requested: Option<i32>) -> Result<(), ErrorCode> {
    match requested {
        Some(e) if e < current => Err(ErrorCode::FencedLeaderEpoch),
        Some(e) if e > current => Err(ErrorCode::UnknownLeaderEpoch),
        _ => Ok(()),
    }
}

/// KIP-595: a follower that last fetched `last_fetched_epoch` and is at
/// `fetch_offset` diverges from this leader's log, where that epoch ends at
/// `local_end`, when this log has no such epoch or it ends before the follower's
/// LEO. Returns where the follower must truncate to.
pub fn diverging_epoch(
    last_fetched_epoch: i32,
    fetch_offset: i64,
    local_end: EpochEndOffset,
) -> Option<EpochEndOffset> {
    (local_end.epoch < last_fetched_epoch || local_end.end_offset < fetch_offset)
        .then_some(local_end)
}

/// Whether a waiting fetch at `fetch_offset`, validated under `request_epoch`, must
/// be answered now: it reads up to `end` (the leader's LEO for a follower, the high
/// watermark for a consumer) under `epoch`, `available` counts the bytes between.
pub fn fetch_readiness(
    end: i64,
    epoch: i32,
    request_epoch: Option<i32>,
    fetch_offset: i64,
    available: impl FnOnce() -> Option<u64>,
) -> FetchReadiness {
    if request_epoch.is_some_and(|e| e != epoch) || end < fetch_offset {
        return FetchReadiness::Changed;
    }
    if end == fetch_offset {
        return FetchReadiness::Bytes(0);
    }
    // None: the offset left the log (truncation, retention): answer now.
    available().map_or(FetchReadiness::Changed, FetchReadiness::Bytes)
}

impl PartitionCore {
    /// A replica opened with its log at `log_end_offset` and a checkpointed high
    /// watermark (clamped to `log_start_offset..=log_end_offset`). It has no role
    /// until the controller announces one.
    pub fn new(
        local_id: i32,
        checkpointed_high_watermark: Option<i64>,
        log_start_offset: i64,
        log_end_offset: i64,
        config: ReplicationConfig,
    ) -> PartitionCore {
        let high_watermark = checkpointed_high_watermark
            .unwrap_or(0)
            .min(log_end_offset)
            .max(log_start_offset);
        PartitionCore {
            local_id,
            leader: None,
            leader_epoch: -1,
            partition_epoch: -1,
            replicas: Vec::new(),
            isr: Vec::new(),
            role: Role::NotLeader { high_watermark },
            log_end_offset,
            next_shrink_check: None,
            config,
        }
    }

    /// The high watermark (the leader's, or this follower's).
    pub fn high_watermark(&self) -> i64 {
        match &self.role {
            Role::Leader(l) => l.high_watermark(),
            Role::NotLeader { high_watermark } => *high_watermark,
        }
    }

    /// The log end offset as last reported by the shell.
    pub fn log_end_offset(&self) -> i64 {
        self.log_end_offset
    }

    /// The current leader epoch (-1 before the first announcement).
    pub fn leader_epoch(&self) -> i32 {
        self.leader_epoch
    }

    /// This replica leads the partition.
    pub fn is_leader(&self) -> bool {
        matches!(self.role, Role::Leader(_))
    }

    /// The assigned replicas, as last announced.
    pub fn replicas(&self) -> &[i32] {
        &self.replicas
    }

    /// (leader id, leader epoch), for error hints.
    pub fn current_leader(&self) -> pb::LeaderIdAndEpoch {
        pb::LeaderIdAndEpoch {
            leader_id: self.leader.unwrap_or(NO_LEADER),
            leader_epoch: self.leader_epoch,
        }
    }

    /// The leader's bookkeeping, when leading.
    pub fn leader_state(&self) -> Option<&LeaderState> {
        match &self.role {
            Role::Leader(l) => Some(l),
            Role::NotLeader { .. } => None,
        }
    }

    fn leader_mut(&mut self) -> Option<&mut LeaderState> {
        match &mut self.role {
            Role::Leader(l) => Some(l),
            Role::NotLeader { .. } => None,
        }
    }

    // --- leader: produce ---

    /// May records be appended as leader? Checks the client's epoch first
    /// (KIP-320: a stale client learns it is stale), then leadership, then for
    /// acks=all the ISR against `min.insync.replicas` (below it nothing is written:
    /// `NOT_ENOUGH_REPLICAS`). Returns the leader epoch to append under.
    pub fn check_leader_append(
        &self,
        acks: Acks,
        client_epoch: Option<i32>,
    ) -> Result<i32, ErrorCode> {
        check_epoch(self.leader_epoch, client_epoch)?;
        let leader = self.leader_state().ok_or(ErrorCode::NotLeaderOrFollower)?;
        if acks == Acks::All && leader.is_under_min_isr() {
            return Err(ErrorCode::NotEnoughReplicas);
        }
        Ok(self.leader_epoch)
    }

    /// The leader appended; its log now ends at `log_end_offset`. Wakes fetches
    /// waiting for data; with an ISR of one the high watermark follows at once.
    pub fn on_leader_append(&mut self, log_end_offset: i64) -> Effects {
        let effects = 'event: {
            self.log_end_offset = log_end_offset;
            let effects = Effects::default().wake(Wake::Fetches);
            let Some(l) = self.leader_mut() else {
                break 'event effects;
            };
            if l.on_leader_append(log_end_offset) {
                let hw = l.high_watermark();
                effects.high_watermark(hw)
            } else {
                effects
            }
        };
        self.checked(effects)
    }

    /// Where an acks=all produce that needs `required_offset` (last offset + 1),
    /// appended under `append_epoch`, stands: acknowledged once the high watermark
    /// reaches it, failed with `NOT_ENOUGH_REPLICAS_AFTER_APPEND` if the ISR shrank
    /// below `min.insync.replicas` meanwhile, failed with `NOT_LEADER_OR_FOLLOWER`
    /// once this replica stopped leading that epoch (the records may be truncated).
    pub fn check_produce(&self, required_offset: i64, append_epoch: i32) -> ProduceCheck {
        let Some(leader) = self.leader_state() else {
            return ProduceCheck::Failed(ErrorCode::NotLeaderOrFollower);
        };
        if self.leader_epoch != append_epoch {
            return ProduceCheck::Failed(ErrorCode::NotLeaderOrFollower);
        }
        if leader.high_watermark() < required_offset {
            ProduceCheck::Pending
        } else if leader.is_under_min_isr() && !self.config.planted.no_min_isr_check {
            ProduceCheck::Failed(ErrorCode::NotEnoughReplicasAfterAppend)
        } else {
            ProduceCheck::Acked {
                isr: leader.acked_isr(required_offset),
                replicas: i32::try_from(self.replicas.len()).unwrap_or(i32::MAX),
            }
        }
    }

    /// The final word on an acks=all produce whose timeout passed.
    pub fn expired_produce_error(&self) -> ErrorCode {
        match self.leader_state() {
            Some(l) if l.is_under_min_isr() => ErrorCode::NotEnoughReplicasAfterAppend,
            Some(_) => ErrorCode::RequestTimedOut,
            None => ErrorCode::NotLeaderOrFollower,
        }
    }

    // --- reads ---

    /// How far a consumer may read here: the leader's high watermark, or on a
    /// follower, for a consumer that fetches from followers (KIP-392), the
    /// follower's own.
    pub fn consumer_high_watermark(
        &self,
        client_epoch: Option<i32>,
        allow_follower_read: bool,
    ) -> Result<i64, ErrorCode> {
        check_epoch(self.leader_epoch, client_epoch)?;
        match &self.role {
            Role::Leader(l) => Ok(l.high_watermark()),
            Role::NotLeader { high_watermark }
                if allow_follower_read
                    && self.leader.is_some()
                    && self.replicas.contains(&self.local_id) =>
            {
                Ok(*high_watermark)
            }
            Role::NotLeader { .. } => Err(ErrorCode::NotLeaderOrFollower),
        }
    }

    /// May `follower_id` fetch from this replica? Only a leader serves followers,
    /// and only its own replicas. Returns the high watermark to send.
    pub fn check_follower_read(
        &self,
        follower_id: i32,
        client_epoch: Option<i32>,
    ) -> Result<i64, ErrorCode> {
        check_epoch(self.leader_epoch, client_epoch)?;
        let leader = self.leader_state().ok_or(ErrorCode::NotLeaderOrFollower)?;
        if !leader.replicas().contains(&follower_id) {
            return Err(ErrorCode::NotLeaderOrFollower);
        }
        Ok(leader.high_watermark())
    }

    /// What a waiting fetch reads up to, and under which leader epoch: the leader's
    /// LEO for a follower, the consumer's high watermark otherwise. None when the
    /// partition can no longer serve it (it must answer now).
    pub fn fetch_wait_target(
        &self,
        is_follower: bool,
        allow_follower_read: bool,
    ) -> Option<(i64, i32)> {
        let end = if is_follower {
            self.is_leader().then_some(self.log_end_offset)?
        } else {
            self.consumer_high_watermark(None, allow_follower_read)
                .ok()?
        };
        Some((end, self.leader_epoch))
    }

    /// May OffsetsForLeaderEpoch (or a replica-side lookup with `require_leader`
    /// false) be answered here?
    pub fn check_epoch_lookup(
        &self,
        client_epoch: Option<i32>,
        require_leader: bool,
    ) -> Result<(), ErrorCode> {
        check_epoch(self.leader_epoch, client_epoch)?;
        if require_leader && !self.is_leader() {
            return Err(ErrorCode::NotLeaderOrFollower);
        }
        Ok(())
    }

    /// ListOffsets on the leader: -2 the log start, -1 the high watermark for
    /// consumers or the LEO for replicas (timestamp -1, the current epoch);
    /// a timestamp (>= 0) or -3, the largest one, is looked up in the log by
    /// `find` and answers the record found with its timestamp and its batch's
    /// epoch, or offset and timestamp -1 when none is found below the high
    /// watermark (the LEO for replicas), as Kafka does. Other negative
    /// timestamps are INVALID_REQUEST.
    pub fn list_offset(
        &self,
        timestamp: i64,
        client_epoch: Option<i32>,
        from_replica: bool,
        log_start_offset: i64,
        find: impl FnOnce(i64) -> Result<Option<TimestampOffset>, ErrorCode>,
    ) -> Result<ListedOffset, ErrorCode> {
        check_epoch(self.leader_epoch, client_epoch)?;
        let leader = self.leader_state().ok_or(ErrorCode::NotLeaderOrFollower)?;
        let fetchable_below = if from_replica {
            self.log_end_offset
        } else {
            leader.high_watermark()
        };
        let at = |offset| ListedOffset {
            offset,
            timestamp: -1,
            leader_epoch: self.leader_epoch,
        };
        match timestamp {
            syncline_proto::EARLIEST_TIMESTAMP => Ok(at(log_start_offset)),
            syncline_proto::LATEST_TIMESTAMP => Ok(at(fetchable_below)),
            t if t >= 0 || t == syncline_proto::MAX_TIMESTAMP => Ok(match find(t)? {
                Some(found) if found.offset < fetchable_below => ListedOffset {
                    offset: found.offset,
                    timestamp: found.timestamp,
                    leader_epoch: found.leader_epoch,
                },
                _ => ListedOffset::NOT_FOUND,
            }),
            _ => Err(ErrorCode::InvalidRequest),
        }
    }

    /// The replica a consumer in `client_rack` should read from instead of this
    /// leader (KIP-392's rack-aware selector): an ISR member in the client's rack,
    /// unless the leader is in it. None when not leader or nothing better.
    pub fn preferred_read_replica(
        &self,
        client_rack: &str,
        rack_of: impl Fn(i32) -> Option<String>,
    ) -> Option<i32> {
        let leader = self.leader_state()?;
        if rack_of(self.local_id).as_deref() == Some(client_rack) {
            return None;
        }
        self.replicas
            .iter()
            .copied()
            .filter(|r| *r != self.local_id && leader.isr().contains(r))
            .find(|r| rack_of(*r).as_deref() == Some(client_rack))
    }

    // --- leader: follower progress and the ISR ---

    /// A follower's fetch reached the leader: its fetch offset acknowledges
    /// everything below it (caught-up time, high watermark, ISR expansion). A fetch
    /// read under another leader epoch than the current one records nothing.
    pub fn on_follower_fetch(&mut self, now: Instant, fetch: &FollowerFetch) -> Effects {
        let effects = 'event: {
            if fetch.request_epoch != self.leader_epoch {
                break 'event Effects::default();
            }
            let Some(leader) = self.leader_mut() else {
                break 'event Effects::default();
            };
            let Some(outcome) = leader.on_follower_fetch(now, fetch) else {
                break 'event Effects::default();
            };
            let hw = leader.high_watermark();
            let mut effects = Effects {
                alter_partition: outcome.expand,
                ..Effects::default()
            };
            if outcome.high_watermark_advanced {
                effects = effects.high_watermark(hw);
            }
            effects
        };
        self.checked(effects)
    }

    /// The timer: the leader's periodic ISR shrink check, run every
    /// `replica.lag.time.max.ms / 2` of this partition's topic (the shell ticks more
    /// often; each partition keeps its own pace, so a topic's shorter lag time
    /// applies from the moment it is known).
    pub fn on_tick(&mut self, now: Instant) -> Effects {
        let effects = 'event: {
            let due = self.next_shrink_check.is_none_or(|t| now >= t);
            let leo = self.log_end_offset;
            let Some(leader) = self.leader_mut() else {
                break 'event Effects::default();
            };
            // An undecided proposal due again goes first (no other can be made
            // while it is pending).
            let resend = leader.due_resend(now);
            if !due {
                break 'event Effects {
                    alter_partition: resend,
                    ..Effects::default()
                };
            }
            let next = now + leader.lag_time_max() / 2;
            let proposal = resend.or_else(|| leader.maybe_shrink(now, leo));
            self.next_shrink_check = Some(next);
            Effects {
                alter_partition: proposal,
                ..Effects::default()
            }
        };
        self.checked(effects)
    }

    /// When the leader's next tick is due: its ISR shrink check, or sending an
    /// undecided proposal again, whichever is first (`now` when at the next
    /// tick); None when not leading, as nothing is then due.
    pub fn next_shrink_check(&self, now: Instant) -> Option<Instant> {
        let leader = self.leader_state()?;
        let check = self.next_shrink_check.unwrap_or(now);
        Some(leader.resend_at().map_or(check, |resend| resend.min(check)))
    }

    /// The controller answered `sent`, our AlterPartition. A commit under our
    /// leader epoch is applied (whichever proposal it answers: a committed ISR
    /// newer than ours is the controller's truth). A refusal decides only the
    /// proposal pending, never one an announcement overtook since: an
    /// INELIGIBLE_REPLICA ends it (not applied, the committed ISR stands, the
    /// next proposal waits a pause) and may let the high watermark advance
    /// (the maximal ISR shrank back: produces and fetches waiting on it are
    /// woken too); any other answer leaves it pending, sent again after the
    /// pause, until an answer or an announcement decides it.
    pub fn on_alter_partition_result(
        &mut self,
        sent: &IsrProposal,
        result: AlterPartitionResult,
        now: Instant,
    ) -> Effects {
        let effects = 'event: {
            let leo = self.log_end_offset;
            let epoch = self.leader_epoch;
            let Some(leader) = self.leader_mut() else {
                break 'event Effects::default();
            };
            match result {
                Ok(c) if c.leader_epoch == epoch => {
                    let effects = self.commit_isr(None, c.isr.clone(), c.partition_epoch);
                    if effects.is_some() {
                        self.isr = c.isr;
                        self.partition_epoch = c.partition_epoch;
                    }
                    effects.unwrap_or_default()
                }
                _ if !leader.is_pending(sent) => Effects::default(),
                Err(ErrorCode::IneligibleReplica) => {
                    if leader.on_isr_change_failed(leo, now) {
                        let hw = leader.high_watermark();
                        Effects::default().high_watermark(hw)
                    } else {
                        Effects::default()
                    }
                }
                Ok(_) | Err(_) => {
                    leader.resend_later(now);
                    Effects::default()
                }
            }
        };
        self.checked(effects)
    }

    /// Applies a committed ISR to the leader state. None when it is not newer than
    /// what the leader has.
    /// Applies a committed ISR (and, from a LeaderAndIsr, the replica set it comes
    /// with) to this leader.
    fn commit_isr(
        &mut self,
        replicas: Option<Vec<i32>>,
        isr: Vec<i32>,
        partition_epoch: i32,
    ) -> Option<Effects> {
        let leo = self.log_end_offset;
        let leader = self.leader_mut()?;
        if partition_epoch <= leader.partition_epoch() {
            return None;
        }
        // The controller may order the ISR its own way: compare as sets.
        let same_members =
            |a: &[i32], b: &[i32]| a.len() == b.len() && a.iter().all(|r| b.contains(r));
        let committed = leader
            .pending()
            .filter(|p| same_members(&p.isr, &isr))
            .map(|p| (p.change, isr.clone()));
        let advanced = match replicas {
            Some(replicas) if replicas != leader.replicas() => {
                leader.on_replicas_committed(replicas, isr, partition_epoch, leo)
            }
            _ => leader.on_isr_committed(isr, partition_epoch, leo),
        };
        let hw = leader.high_watermark();
        let mut effects = Effects {
            isr_committed: committed,
            ..Effects::default()
        };
        if advanced {
            effects = effects.high_watermark(hw);
        }
        Some(effects)
    }

    // --- role changes ---

    /// Applies the controller's announcement of the partition, with the topic's
    /// config. An announcement that is not newer than what this replica knows
    /// ([`freshness`]: the same epochs, or older in either) changes only the
    /// config.
    ///
    /// - This replica is named leader of a new epoch: it leads from its LEO (the new
    ///   epoch starts there: record it), keeping the high watermark it had, and stops
    ///   fetching.
    /// - Leader of the same epoch: only the ISR, replicas or partition epoch moved;
    ///   a committed ISR is applied as an AlterPartition answer would be.
    /// - Another leader: follow it (truncating first), keeping the high watermark.
    /// - No leader: offline; stop fetching.
    ///
    /// Waiting operations are woken on every change, so that they see the new state
    /// and answer (e.g. with `NOT_LEADER_OR_FOLLOWER`).
    pub fn on_leader_and_isr(
        &mut self,
        a: &Announcement,
        config: ReplicationConfig,
        local_broker_epoch: i64,
        now: Instant,
    ) -> Effects {
        let effects = 'event: {
            let known = Epochs {
                leader_epoch: self.leader_epoch,
                partition_epoch: self.partition_epoch,
            };
            if freshness(a.epochs(), Some(known)) != Freshness::Newer {
                break 'event self.on_config(config);
            }
            let hw_before = self.high_watermark();
            let same_epoch = a.leader_epoch == self.leader_epoch;
            let was_leader = self.is_leader();
            self.replicas = a.replicas.clone();
            self.isr = a.isr.clone();
            self.partition_epoch = a.partition_epoch;
            self.leader = a.leader;
            self.leader_epoch = a.leader_epoch;
            // Its high watermark is published with the role's, below.
            let _ = self.apply_config(config);
            let mut effects = if a.leader == Some(self.local_id) {
                if same_epoch && was_leader {
                    let mut effects = self
                        .commit_isr(Some(a.replicas.clone()), a.isr.clone(), a.partition_epoch)
                        .unwrap_or_default();
                    effects.role = RoleChange::Updated;
                    effects
                } else {
                    self.become_leader(a, local_broker_epoch, now)
                }
            } else {
                let high_watermark = self.high_watermark();
                self.role = Role::NotLeader { high_watermark };
                match a.leader {
                    _ if !was_leader && same_epoch => Effects {
                        // Still following the same leader in the same epoch: only the
                        // ISR or the replica set changed.
                        role: RoleChange::Updated,
                        ..Effects::default()
                    },
                    None => Effects {
                        role: RoleChange::BecameOffline,
                        fetcher: Some(FetcherChange::Stop),
                        ..Effects::default()
                    },
                    Some(leader) => Effects {
                        role: RoleChange::BecameFollower,
                        fetcher: Some(FetcherChange::Follow {
                            leader,
                            leader_epoch: a.leader_epoch,
                        }),
                        ..Effects::default()
                    },
                }
            };
            let hw = self.high_watermark();
            effects.high_watermark = (hw != hw_before).then_some(hw);
            effects.wake(Wake::FetchesAndProduces)
        };
        self.checked(effects)
    }

    fn become_leader(
        &mut self,
        a: &Announcement,
        local_broker_epoch: i64,
        now: Instant,
    ) -> Effects {
        let leo = self.log_end_offset;
        let leader = LeaderState::new(
            BecomeLeader {
                local_id: self.local_id,
                local_broker_epoch,
                leader_epoch: a.leader_epoch,
                partition_epoch: a.partition_epoch,
                replicas: a.replicas.clone(),
                isr: a.isr.clone(),
                high_watermark: self.high_watermark(),
                log_end_offset: leo,
                min_insync_replicas: self.config.min_insync_replicas,
                lag_time_max: self.config.lag_time_max,
                planted: self.config.planted,
            },
            now,
        );
        self.role = Role::Leader(Box::new(leader));
        self.next_shrink_check = Some(now + self.config.lag_time_max / 2);
        Effects {
            role: RoleChange::BecameLeader,
            start_epoch: Some(EpochStart {
                epoch: a.leader_epoch,
                start_offset: leo,
            }),
            fetcher: Some(FetcherChange::Stop),
            ..Effects::default()
        }
    }

    /// This broker is no longer one of the partition's replicas: it leads and
    /// follows nothing from now on, stops fetching, and every waiting operation
    /// wakes to find it so (and answers `NOT_LEADER_OR_FOLLOWER`).
    pub fn on_removed(&mut self) -> Effects {
        let high_watermark = self.high_watermark();
        self.role = Role::NotLeader { high_watermark };
        self.leader = None;
        self.replicas.retain(|&r| r != self.local_id);
        let effects = Effects {
            role: RoleChange::Removed,
            fetcher: Some(FetcherChange::Stop),
            ..Effects::default()
        };
        self.checked(effects.wake(Wake::FetchesAndProduces))
    }

    /// Adopts a topic config: a new lag time re-paces the shrink check at the next
    /// tick; a new `min.insync.replicas` may let the high watermark advance.
    pub fn on_config(&mut self, config: ReplicationConfig) -> Effects {
        let effects = self.apply_config(config);
        self.checked(effects)
    }

    /// [`Self::on_config`] without the invariants' check: also a step of
    /// [`Self::on_leader_and_isr`], in the middle of its change.
    fn apply_config(&mut self, config: ReplicationConfig) -> Effects {
        let leo = self.log_end_offset;
        let lag_changed = config.lag_time_max != self.config.lag_time_max;
        self.config = config;
        let Some(l) = self.leader_mut() else {
            return Effects::default();
        };
        l.set_lag_time_max(config.lag_time_max);
        l.set_planted(config.planted);
        let advanced = l.set_min_insync_replicas(config.min_insync_replicas, leo);
        let hw = l.high_watermark();
        if lag_changed {
            self.next_shrink_check = None;
        }
        if advanced {
            Effects::default().high_watermark(hw)
        } else {
            Effects::default()
        }
    }

    // --- follower ---

    /// May the replica fetcher change this follower's log for `leader_epoch`? Not
    /// once it leads, or follows another epoch (`FENCED_LEADER_EPOCH`).
    pub fn check_follower(&self, leader_epoch: i32) -> Result<(), ErrorCode> {
        if self.is_leader() || self.leader_epoch != leader_epoch {
            return Err(ErrorCode::FencedLeaderEpoch);
        }
        Ok(())
    }

    /// The follower appended what it fetched; its log ends at `log_end_offset`.
    /// Its high watermark becomes min(leader's, own LEO), and never moves back
    /// below what it already had (up to its LEO).
    pub fn on_follower_append(
        &mut self,
        leader_high_watermark: i64,
        log_end_offset: i64,
    ) -> Effects {
        let effects = 'event: {
            self.log_end_offset = log_end_offset;
            let Role::NotLeader { high_watermark } = &mut self.role else {
                break 'event Effects::default();
            };
            let hw = leader_high_watermark
                .min(log_end_offset)
                .max((*high_watermark).min(log_end_offset));
            let changed = hw != *high_watermark;
            *high_watermark = hw;
            if changed {
                Effects::default().high_watermark(hw)
            } else {
                Effects::default()
            }
        };
        self.checked(effects)
    }

    /// The follower's log was truncated (or emptied to restart) and now ends at
    /// `log_end_offset`: a high watermark above it comes down with it.
    pub fn on_follower_truncated(&mut self, log_end_offset: i64) -> Effects {
        let effects = 'event: {
            self.log_end_offset = log_end_offset;
            let Role::NotLeader { high_watermark } = &mut self.role else {
                break 'event Effects::default();
            };
            if *high_watermark > log_end_offset {
                *high_watermark = log_end_offset;
                break 'event Effects::default().high_watermark(log_end_offset);
            }
            Effects::default()
        };
        self.checked(effects)
    }

    /// The follower's log was emptied to restart at `offset` (the leader's log
    /// starts after ours): the high watermark restarts there too.
    pub fn on_follower_restarted_at(&mut self, offset: i64) -> Effects {
        let effects = 'event: {
            self.log_end_offset = offset;
            let Role::NotLeader { high_watermark } = &mut self.role else {
                break 'event Effects::default();
            };
            *high_watermark = offset;
            Effects::default().high_watermark(offset)
        };
        self.checked(effects)
    }

    // --- describe ---

    /// The leader's figures for the metrics; None when not leading.
    pub fn leader_health(&self) -> Option<LeaderHealth> {
        let l = self.leader_state()?;
        Some(LeaderHealth {
            isr_size: l.isr().len(),
            replicas: l.replicas().len(),
            min_insync_replicas: l.min_insync_replicas(),
            max_follower_lag: l
                .followers()
                .iter()
                .map(|f| f.lag(self.log_end_offset))
                .max()
                .unwrap_or(0),
        })
    }

    /// DescribeTopics' leader view; None when not leading.
    pub fn describe(
        &self,
        partition: i32,
        log_start_offset: i64,
        now: Instant,
    ) -> Option<pb::PartitionDescription> {
        let l = self.leader_state()?;
        let leo = self.log_end_offset;
        let mut statuses = vec![pb::ReplicaStatus {
            broker_id: self.local_id,
            log_end_offset: leo,
            lag_offsets: 0,
            last_caught_up_ms_ago: 0,
            in_isr: true,
        }];
        statuses.extend(l.followers().iter().map(|f| {
            pb::ReplicaStatus {
                broker_id: f.broker_id,
                log_end_offset: f.log_end_offset.unwrap_or(-1),
                lag_offsets: f.lag(leo),
                last_caught_up_ms_ago: f
                    .last_caught_up
                    .map_or(-1, |t| now.saturating_duration_since(t).as_millis() as i64),
                in_isr: l.isr().contains(&f.broker_id),
            }
        }));
        Some(pb::PartitionDescription {
            partition,
            error_code: ErrorCode::None as i32,
            leader_id: self.local_id,
            leader_epoch: self.leader_epoch,
            partition_epoch: l.partition_epoch(),
            replicas: l.replicas().to_vec(),
            isr: l.isr().to_vec(),
            from_leader: true,
            high_watermark: l.high_watermark(),
            log_end_offset: leo,
            log_start_offset,
            replica_statuses: statuses,
            pending_isr: l.pending().map(|p| p.isr.clone()).unwrap_or_default(),
            ..Default::default()
        })
    }

    /// Every event handler ends here: the invariants hold after each event
    /// (checked in debug builds: the unit tests, and the brokers the end-to-end
    /// tests start; docs/INVARIANTS.md).
    fn checked(&self, effects: Effects) -> Effects {
        self.check_invariants();
        effects
    }

    fn check_invariants(&self) {
        debug_assert!(
            self.high_watermark() <= self.log_end_offset,
            "HW {} above LEO {}",
            self.high_watermark(),
            self.log_end_offset
        );
        debug_assert!(
            !self.is_leader() || self.leader == Some(self.local_id),
            "leading while {:?} is the announced leader",
            self.leader
        );
    }
}

#[cfg(test)]
mod tests {
    //! Named after Kafka's PartitionTest / ReplicaManagerTest cases where one exists.
    use super::*;
    use crate::partition::leader_state::ISR_RETRY_BACKOFF;

    const LAG: Duration = Duration::from_millis(10_000);
    const BROKER_EPOCH: i64 = 100;

    fn config(min_isr: usize) -> ReplicationConfig {
        ReplicationConfig {
            min_insync_replicas: min_isr,
            lag_time_max: LAG,
            planted: PlantedBugs::default(),
        }
    }

    fn announce(
        leader: Option<i32>,
        leader_epoch: i32,
        partition_epoch: i32,
        isr: &[i32],
    ) -> Announcement {
        Announcement {
            leader,
            leader_epoch,
            partition_epoch,
            replicas: vec![1, 2, 3],
            isr: isr.to_vec(),
        }
    }

    /// Replica 1 with its log at `leo` and a checkpointed high watermark `hw`.
    fn replica(leo: i64, hw: i64) -> PartitionCore {
        PartitionCore::new(1, Some(hw), 0, leo, config(1))
    }

    /// Replica 1 leading epoch 5 (partition epoch 10) with `isr`, log at `leo`.
    fn leader(isr: &[i32], leo: i64, hw: i64, min_isr: usize, now: Instant) -> PartitionCore {
        let mut c = PartitionCore::new(1, Some(hw), 0, leo, config(min_isr));
        let e = c.on_leader_and_isr(
            &announce(Some(1), 5, 10, isr),
            config(min_isr),
            BROKER_EPOCH,
            now,
        );
        assert_eq!(e.role, RoleChange::BecameLeader);
        c
    }

    /// Replica 1 following 2 in epoch 5, log at `leo`, high watermark `hw`.
    fn follower(leo: i64, hw: i64, now: Instant) -> PartitionCore {
        let mut c = replica(leo, hw);
        let e = c.on_leader_and_isr(
            &announce(Some(2), 5, 10, &[1, 2, 3]),
            config(1),
            BROKER_EPOCH,
            now,
        );
        assert_eq!(e.role, RoleChange::BecameFollower);
        c
    }

    fn fetch(id: i32, offset: i64, leader_leo: i64, request_epoch: i32) -> FollowerFetch {
        FollowerFetch {
            follower_id: id,
            broker_epoch: Some(20 + id as i64),
            fetch_offset: offset,
            leader_leo,
            request_epoch,
            eligible: true,
        }
    }

    fn ms(n: u64) -> Duration {
        Duration::from_millis(n)
    }

    // --- invariants ---

    /// Every event handler checks the invariants once its event is applied
    /// (debug builds): a core put into a state that breaks one fails at
    /// whichever event comes next, and the same event on a sound core does not.
    #[cfg(debug_assertions)]
    #[test]
    fn every_event_handler_checks_the_invariants() {
        use std::panic::{catch_unwind, AssertUnwindSafe};
        let now = Instant::now();
        // Leading while the announcement names another leader.
        let leading = |broken: bool| {
            let mut c = leader(&[1, 2, 3], 10, 10, 1, now);
            if broken {
                c.leader = Some(2);
            }
            c
        };
        // Following with a high watermark above its log's end.
        let following = |broken: bool| {
            let mut c = follower(10, 10, now);
            if broken {
                c.log_end_offset = 5;
            }
            c
        };
        type Event<'a> = Box<dyn Fn(&mut PartitionCore) -> Effects + 'a>;
        type Core<'a> = &'a dyn Fn(bool) -> PartitionCore;
        let cases: [(&str, Core, Event); 10] = [
            (
                "on_leader_append",
                &leading,
                Box::new(|c| c.on_leader_append(10)),
            ),
            (
                "on_follower_fetch",
                &leading,
                Box::new(|c| c.on_follower_fetch(now, &fetch(2, 10, 10, 5))),
            ),
            ("on_tick", &leading, Box::new(|c| c.on_tick(now + LAG))),
            (
                "on_alter_partition_result",
                &leading,
                Box::new(|c| {
                    let sent = IsrProposal {
                        kind: IsrChangeKind::Shrink,
                        new_isr: vec![1],
                        members: vec![(1, BROKER_EPOCH)],
                        leader_epoch: 5,
                        partition_epoch: 10,
                        replicas: vec![],
                    };
                    c.on_alter_partition_result(&sent, Err(ErrorCode::FencedLeaderEpoch), now)
                }),
            ),
            (
                "on_leader_and_isr",
                &following,
                Box::new(|c| {
                    c.on_leader_and_isr(&announce(Some(2), 5, 9, &[1, 2]), config(1), 1, now)
                }),
            ),
            ("on_removed", &following, Box::new(|c| c.on_removed())),
            ("on_config", &leading, Box::new(|c| c.on_config(config(2)))),
            (
                "on_follower_append",
                &leading,
                Box::new(|c| c.on_follower_append(10, 10)),
            ),
            (
                "on_follower_truncated",
                &leading,
                Box::new(|c| c.on_follower_truncated(10)),
            ),
            (
                "on_follower_restarted_at",
                &leading,
                Box::new(|c| c.on_follower_restarted_at(10)),
            ),
        ];
        for (name, core, event) in cases {
            let mut sound = core(false);
            let _ = event(&mut sound);
            let mut broken = core(true);
            let caught = catch_unwind(AssertUnwindSafe(|| {
                let _ = event(&mut broken);
            }));
            assert!(caught.is_err(), "{name} does not check the invariants");
        }
    }

    // --- epochs (KIP-320) ---

    #[test]
    fn request_epochs_are_fenced_when_older_and_unknown_when_newer() {
        let cases = [
            (None, Ok(())),
            (Some(5), Ok(())),
            (Some(4), Err(ErrorCode::FencedLeaderEpoch)),
            (Some(6), Err(ErrorCode::UnknownLeaderEpoch)),
        ];
        for (requested, expected) in cases {
            assert_eq!(
                check_epoch(5, requested),
                expected,
                "requested {requested:?}"
            );
        }
    }

    // --- produce ---

    #[test]
    fn append_checks_client_epoch_then_leadership_then_min_isr() {
        let now = Instant::now();
        let l = leader(&[1], 10, 10, 2, now);
        let f = follower(10, 10, now);
        type Case<'a> = (&'a PartitionCore, Acks, Option<i32>, Result<i32, ErrorCode>);
        let cases: [Case; 7] = [
            (&l, Acks::Leader, None, Ok(5)),
            (&l, Acks::None, Some(5), Ok(5)),
            // testNotEnoughReplicas: below min ISR acks=all is refused before append.
            (&l, Acks::All, None, Err(ErrorCode::NotEnoughReplicas)),
            // The client's epoch first: a stale client learns it is stale.
            (&l, Acks::All, Some(4), Err(ErrorCode::FencedLeaderEpoch)),
            (
                &l,
                Acks::Leader,
                Some(6),
                Err(ErrorCode::UnknownLeaderEpoch),
            ),
            (&f, Acks::Leader, None, Err(ErrorCode::NotLeaderOrFollower)),
            (&f, Acks::Leader, Some(4), Err(ErrorCode::FencedLeaderEpoch)),
        ];
        for (i, (core, acks, epoch, expected)) in cases.into_iter().enumerate() {
            assert_eq!(core.check_leader_append(acks, epoch), expected, "case {i}");
        }
    }

    #[test]
    fn append_with_an_isr_of_one_advances_the_high_watermark_and_wakes_produces() {
        let now = Instant::now();
        let mut l = leader(&[1], 10, 10, 1, now);
        let e = l.on_leader_append(15);
        assert_eq!(e.high_watermark, Some(15));
        assert_eq!(e.wake, Wake::FetchesAndProduces);
        assert_eq!(l.high_watermark(), 15);
    }

    #[test]
    fn append_with_followers_in_the_isr_wakes_only_fetches() {
        let now = Instant::now();
        let mut l = leader(&[1, 2], 10, 10, 1, now);
        let e = l.on_leader_append(15);
        assert_eq!(
            e,
            Effects {
                wake: Wake::Fetches,
                ..Effects::default()
            }
        );
        assert_eq!(l.high_watermark(), 10);
    }

    #[test]
    fn acks_all_completion_follows_the_high_watermark_isr_and_epoch() {
        let now = Instant::now();
        // ISR {1,2}, min ISR 2; records appended up to 20; follower 2 at 15.
        let mut l = leader(&[1, 2], 10, 10, 2, now);
        let _ = l.on_leader_append(20);
        let _ = l.on_follower_fetch(now, &fetch(2, 15, 20, 5));
        assert_eq!(l.high_watermark(), 15);
        let cases = [
            (
                15,
                5,
                ProduceCheck::Acked {
                    isr: vec![1, 2],
                    replicas: 3,
                },
            ),
            (16, 5, ProduceCheck::Pending),
            // Appended under another epoch: leadership moved away and back, the
            // records may have been truncated.
            (15, 4, ProduceCheck::Failed(ErrorCode::NotLeaderOrFollower)),
        ];
        for (required, epoch, expected) in cases {
            assert_eq!(
                l.check_produce(required, epoch),
                expected,
                "required {required} epoch {epoch}"
            );
        }
        assert_eq!(l.expired_produce_error(), ErrorCode::RequestTimedOut);
        // A reassignment adds replica 4 while the records wait: the count is the
        // replica set's at the acknowledgement, the one its ISR belongs to.
        let mut grown = announce(Some(1), 5, 11, &[1, 2]);
        grown.replicas = vec![1, 2, 3, 4];
        let _ = l.on_leader_and_isr(&grown, config(2), BROKER_EPOCH, now);
        assert_eq!(
            l.check_produce(15, 5),
            ProduceCheck::Acked {
                isr: vec![1, 2],
                replicas: 4
            }
        );
    }

    #[test]
    fn acks_all_fails_with_not_enough_replicas_after_append_when_the_isr_shrank_below_min() {
        let now = Instant::now();
        let mut l = leader(&[1, 2, 3], 10, 10, 2, now);
        let _ = l.on_leader_append(20);
        let _ = l.on_follower_fetch(now, &fetch(2, 20, 20, 5));
        let _ = l.on_follower_fetch(now, &fetch(3, 20, 20, 5));
        assert_eq!(l.high_watermark(), 20);
        // The controller commits an ISR of the leader alone (below min ISR 2).
        let e = l.on_leader_and_isr(
            &announce(Some(1), 5, 11, &[1]),
            config(2),
            BROKER_EPOCH,
            now,
        );
        assert_eq!(e.role, RoleChange::Updated);
        assert_eq!(
            l.check_produce(20, 5),
            ProduceCheck::Failed(ErrorCode::NotEnoughReplicasAfterAppend)
        );
        assert_eq!(
            l.expired_produce_error(),
            ErrorCode::NotEnoughReplicasAfterAppend
        );
    }

    #[test]
    fn a_produce_on_a_replica_that_stopped_leading_fails_with_not_leader() {
        let now = Instant::now();
        let mut l = leader(&[1, 2], 10, 10, 1, now);
        let _ = l.on_leader_and_isr(
            &announce(Some(2), 6, 11, &[1, 2]),
            config(1),
            BROKER_EPOCH,
            now,
        );
        assert_eq!(
            l.check_produce(10, 5),
            ProduceCheck::Failed(ErrorCode::NotLeaderOrFollower)
        );
        assert_eq!(l.expired_produce_error(), ErrorCode::NotLeaderOrFollower);
    }

    // --- follower fetches on the leader ---

    #[test]
    fn follower_fetch_advancing_the_high_watermark_publishes_it_and_wakes_produces() {
        let now = Instant::now();
        let mut l = leader(&[1, 2], 10, 10, 1, now);
        let _ = l.on_leader_append(20);
        let e = l.on_follower_fetch(now, &fetch(2, 20, 20, 5));
        assert_eq!(e.high_watermark, Some(20));
        assert_eq!(e.wake, Wake::FetchesAndProduces);
        // The same offset again moves nothing.
        assert_eq!(
            l.on_follower_fetch(now, &fetch(2, 20, 20, 5)),
            Effects::default()
        );
    }

    #[test]
    fn follower_fetch_read_under_another_epoch_records_nothing() {
        // testFollowerFetchWithStaleEpoch: a fetch validated under epoch 4 (or one
        // newer than ours) must not move the high watermark of epoch 5.
        let now = Instant::now();
        for stale in [4, 6] {
            let mut l = leader(&[1, 2], 10, 10, 1, now);
            let _ = l.on_leader_append(20);
            assert_eq!(
                l.on_follower_fetch(now, &fetch(2, 20, 20, stale)),
                Effects::default()
            );
            assert_eq!(l.high_watermark(), 10);
        }
    }

    #[test]
    fn follower_fetch_on_a_non_leader_or_from_a_non_replica_records_nothing() {
        let now = Instant::now();
        let mut f = follower(10, 10, now);
        assert_eq!(
            f.on_follower_fetch(now, &fetch(3, 10, 10, 5)),
            Effects::default()
        );
        let mut l = leader(&[1, 2], 10, 10, 1, now);
        assert_eq!(
            l.on_follower_fetch(now, &fetch(9, 10, 10, 5)),
            Effects::default()
        );
    }

    #[test]
    fn a_joining_replica_is_a_follower_that_enters_the_isr_only_once_caught_up() {
        // A reassignment adds broker 4 in the same leader epoch, then (once 4 is
        // in the ISR) removes broker 3: the leader follows both without a new epoch.
        let now = Instant::now();
        let mut l = leader(&[1, 2, 3], 10, 10, 2, now);
        let joined = Announcement {
            replicas: vec![1, 2, 4, 3],
            ..announce(Some(1), 5, 11, &[1, 2, 3])
        };
        let e = l.on_leader_and_isr(&joined, config(2), BROKER_EPOCH, now);
        assert_eq!((e.role, e.start_epoch), (RoleChange::Updated, None));
        let _ = l.on_leader_append(20);
        // Behind: fetches are served but no expansion is proposed.
        assert_eq!(l.check_follower_read(4, Some(5)), Ok(10));
        let behind = l.on_follower_fetch(now, &fetch(4, 5, 20, 5));
        assert_eq!(behind.alter_partition, None);
        // Caught up: proposed into the ISR.
        let e = l.on_follower_fetch(now, &fetch(4, 20, 20, 5));
        let proposal = e.alter_partition.expect("an expansion");
        assert_eq!(proposal.new_isr, vec![1, 2, 3, 4]);
        // The completion: replicas and ISR without 3.
        let done = Announcement {
            replicas: vec![1, 2, 4],
            ..announce(Some(1), 5, 13, &[1, 2, 4])
        };
        let e = l.on_leader_and_isr(&done, config(2), BROKER_EPOCH, now);
        assert_eq!(e.role, RoleChange::Updated);
        assert_eq!(
            l.check_follower_read(3, Some(5)),
            Err(ErrorCode::NotLeaderOrFollower),
            "a replica that left is not served"
        );
        // The high watermark now rests on 2 and 4 only.
        let _ = l.on_follower_fetch(now, &fetch(2, 20, 20, 5));
        let e = l.on_follower_fetch(now, &fetch(4, 20, 20, 5));
        assert_eq!(l.high_watermark(), 20, "{e:?}");
    }

    #[test]
    fn a_removed_replica_stops_fetching_and_serves_nothing() {
        let now = Instant::now();
        let mut f = follower(10, 10, now);
        let e = f.on_removed();
        assert_eq!(e.role, RoleChange::Removed);
        assert_eq!(e.fetcher, Some(FetcherChange::Stop));
        assert_eq!(e.wake, Wake::FetchesAndProduces);
        assert!(!f.replicas().contains(&1));
        let mut l = leader(&[1, 2], 10, 10, 1, now);
        let _ = l.on_removed();
        assert!(!l.is_leader());
        assert_eq!(
            l.check_follower_read(2, Some(5)),
            Err(ErrorCode::NotLeaderOrFollower)
        );
    }

    #[test]
    fn caught_up_follower_out_of_the_isr_is_proposed_for_expansion() {
        // testIsrExpansion: LEO ≥ HW (and ≥ the epoch start) brings it back.
        let now = Instant::now();
        let mut l = leader(&[1, 2], 10, 10, 1, now);
        let e = l.on_follower_fetch(now, &fetch(3, 10, 10, 5));
        let proposal = e.alter_partition.expect("an expansion");
        assert_eq!(proposal.kind, IsrChangeKind::Expand);
        assert_eq!(proposal.new_isr, vec![1, 2, 3]);
        assert_eq!((proposal.leader_epoch, proposal.partition_epoch), (5, 10));
    }

    #[test]
    fn only_a_leader_serves_followers_and_only_its_replicas() {
        let now = Instant::now();
        let l = leader(&[1, 2], 10, 10, 1, now);
        let f = follower(10, 10, now);
        assert_eq!(l.check_follower_read(2, Some(5)), Ok(10));
        assert_eq!(
            l.check_follower_read(9, None),
            Err(ErrorCode::NotLeaderOrFollower)
        );
        assert_eq!(
            l.check_follower_read(2, Some(4)),
            Err(ErrorCode::FencedLeaderEpoch)
        );
        assert_eq!(
            f.check_follower_read(3, Some(5)),
            Err(ErrorCode::NotLeaderOrFollower)
        );
    }

    // --- the ISR ---

    #[test]
    fn shrink_check_runs_at_half_the_lag_time_and_proposes_stale_followers() {
        let t0 = Instant::now();
        let mut l = leader(&[1, 2, 3], 10, 10, 1, t0);
        let _ = l.on_leader_append(20);
        // Follower 2 keeps up; 3 never fetches.
        let check = |l: &mut PartitionCore, at: Instant| l.on_tick(at).alter_partition;
        // Not due before lag/2 after becoming leader.
        assert_eq!(check(&mut l, t0 + ms(4_999)), None);
        // Due, but nobody is stale yet (ISR followers start caught up now).
        assert_eq!(check(&mut l, t0 + ms(5_000)), None);
        let _ = l.on_follower_fetch(t0 + ms(10_000), &fetch(2, 20, 20, 5));
        // The next check is due at 10 s; 3 has not caught up for more than 10 s at 10.001.
        let shrink = check(&mut l, t0 + ms(10_001)).expect("3 is stale");
        assert_eq!(shrink.kind, IsrChangeKind::Shrink);
        assert_eq!(shrink.new_isr, vec![1, 2]);
        assert_eq!(shrink.replicas[0].broker_id, 3);
        // A proposal is in flight: no second one.
        assert_eq!(check(&mut l, t0 + ms(20_000)), None);
    }

    #[test]
    fn a_shorter_lag_time_applies_at_the_next_tick() {
        let t0 = Instant::now();
        let mut l = leader(&[1, 2], 10, 10, 1, t0);
        let _ = l.on_leader_append(20);
        // With 10 s the next check is at 5 s; the topic's lag time drops to 1 s.
        let short = ReplicationConfig {
            lag_time_max: ms(1_000),
            ..config(1)
        };
        let _ = l.on_config(short);
        let shrink = l.on_tick(t0 + ms(1_001)).alter_partition;
        assert_eq!(shrink.map(|p| p.new_isr), Some(vec![1]));
    }

    #[test]
    fn committed_isr_change_is_counted_and_applied() {
        let now = Instant::now();
        let mut l = leader(&[1, 2], 10, 10, 1, now);
        let proposal = l
            .on_follower_fetch(now, &fetch(3, 10, 10, 5))
            .alter_partition
            .unwrap();
        let e = l.on_alter_partition_result(
            &proposal,
            Ok(CommittedIsr {
                // The controller may order it its own way.
                isr: vec![3, 1, 2],
                leader_epoch: 5,
                partition_epoch: 11,
            }),
            now,
        );
        assert_eq!(
            e.isr_committed,
            Some((IsrChangeKind::Expand, vec![3, 1, 2]))
        );
        assert_eq!(proposal.new_isr.len(), 3);
        let l = l.leader_state().unwrap();
        assert_eq!(
            (l.isr().len(), l.partition_epoch(), l.pending()),
            (3, 11, None)
        );
    }

    #[test]
    fn refused_isr_change_that_lets_the_high_watermark_advance_wakes_produces() {
        // The maximal ISR {1,2,3} holds the HW at 10 while 3 is proposed; the
        // controller refuses 3, the ISR is {1,2} again and 2 has 20: the HW moves,
        // and acks=all produces waiting on it must be woken.
        let now = Instant::now();
        let mut l = leader(&[1, 2], 10, 10, 1, now);
        let _ = l.on_leader_append(20);
        let sent = l
            .on_follower_fetch(now, &fetch(3, 10, 20, 5))
            .alter_partition
            .unwrap();
        let e = l.on_follower_fetch(now, &fetch(2, 20, 20, 5));
        assert_eq!(e.high_watermark, None, "3 is in the maximal ISR");
        let e = l.on_alter_partition_result(&sent, Err(ErrorCode::IneligibleReplica), now);
        assert_eq!(e.high_watermark, Some(20));
        assert_eq!(e.wake, Wake::FetchesAndProduces);
        assert_eq!(e.isr_committed, None);
    }

    #[test]
    fn alter_partition_answers_for_another_epoch_or_an_old_partition_epoch_commit_nothing() {
        let now = Instant::now();
        let committed = |leader_epoch, partition_epoch| {
            Ok(CommittedIsr {
                isr: vec![1, 2, 3],
                leader_epoch,
                partition_epoch,
            })
        };
        for (result, why) in [
            (committed(4, 11), "other leader epoch"),
            (committed(5, 10), "not newer"),
        ] {
            let mut l = leader(&[1, 2], 10, 10, 1, now);
            let sent = l
                .on_follower_fetch(now, &fetch(3, 10, 10, 5))
                .alter_partition
                .unwrap();
            let e = l.on_alter_partition_result(&sent, result, now);
            assert_eq!(e.isr_committed, None, "{why}");
            assert_eq!(l.leader_state().unwrap().isr(), &[1, 2], "{why}");
        }
    }

    /// Kafka's PartitionTest testAlterIsrInvalidVersion and
    /// testAlterIsrUnexpectedError: an answer that does not say the change
    /// was not applied (a lost answer to a committed expansion comes back as
    /// INVALID_UPDATE_VERSION once resent, or as a network error) leaves the
    /// expansion pending: the high watermark keeps waiting for the joining
    /// follower, and the proposal is sent again after the pause until an
    /// announcement decides it.
    #[test]
    fn an_undecided_answer_keeps_the_expansion_pending_and_sends_it_again() {
        for code in [
            ErrorCode::InvalidUpdateVersion,
            ErrorCode::FencedLeaderEpoch,
            ErrorCode::NetworkException,
            ErrorCode::UnknownServerError,
            ErrorCode::InvalidRequest,
        ] {
            let t0 = Instant::now();
            let mut l = leader(&[1], 10, 10, 1, t0);
            let sent = l
                .on_follower_fetch(t0, &fetch(2, 10, 10, 5))
                .alter_partition
                .unwrap();
            let e = l.on_alter_partition_result(&sent, Err(code), t0);
            assert_eq!(e, Effects::default(), "{code:?}");
            // 2 has 10: the HW may not pass it while 2 may be in the ISR.
            assert_eq!(l.on_leader_append(20).high_watermark, None, "{code:?}");
            let resend_at = t0 + ISR_RETRY_BACKOFF;
            assert_eq!(l.next_shrink_check(t0), Some(resend_at), "{code:?}");
            assert_eq!(l.on_tick(t0 + ms(1)).alter_partition, None, "{code:?}");
            let again = l.on_tick(resend_at).alter_partition.expect("sent again");
            assert!(again.same_change(&sent), "{code:?}");
            // Committed after all, as the announcement says: 2 is in.
            let _ = l.on_leader_and_isr(&announce(Some(1), 5, 11, &[1, 2]), config(1), 1, t0);
            assert_eq!(l.leader_state().unwrap().isr(), &[1, 2], "{code:?}");
            assert_eq!(l.leader_state().unwrap().pending(), None, "{code:?}");
            assert_eq!(l.high_watermark(), 10, "{code:?}");
        }
    }

    /// Kafka's Partition.submitAlterPartition ignores an answer to a state it
    /// no longer proposes: a refusal of a proposal an announcement overtook
    /// must not end the newer one (the HW would pass its joining follower).
    #[test]
    fn a_refusal_of_an_overtaken_proposal_decides_nothing() {
        let now = Instant::now();
        let mut l = leader(&[1, 3], 10, 10, 1, now);
        let first = l
            .on_follower_fetch(now, &fetch(2, 10, 10, 5))
            .alter_partition
            .unwrap();
        // An announcement overtakes it (3 left the ISR): 2 is proposed again.
        let _ = l.on_leader_and_isr(&announce(Some(1), 5, 11, &[1]), config(1), 1, now);
        let second = l
            .on_follower_fetch(now, &fetch(2, 10, 10, 5))
            .alter_partition
            .unwrap();
        assert!(!second.same_change(&first));
        let _ = l.on_leader_append(20);
        for code in [
            ErrorCode::InvalidUpdateVersion,
            ErrorCode::IneligibleReplica,
        ] {
            let e = l.on_alter_partition_result(&first, Err(code), now);
            assert_eq!(e, Effects::default(), "{code:?}");
            let pending = l
                .leader_state()
                .unwrap()
                .pending()
                .map(|p| p.proposal.clone());
            assert_eq!(pending, Some(second.clone()), "{code:?}");
            assert_eq!(l.high_watermark(), 10, "{code:?}: 2 has only 10");
        }
        // Its own refusal ends it.
        let e = l.on_alter_partition_result(&second, Err(ErrorCode::IneligibleReplica), now);
        assert_eq!(e.high_watermark, Some(20));
    }

    #[test]
    fn lowering_min_isr_lets_a_frozen_high_watermark_advance() {
        let now = Instant::now();
        let mut l = leader(&[1], 10, 10, 2, now);
        assert_eq!(
            l.on_leader_append(20).high_watermark,
            None,
            "frozen under min ISR"
        );
        let e = l.on_config(config(1));
        assert_eq!(e.high_watermark, Some(20));
        assert_eq!(e.wake, Wake::FetchesAndProduces);
    }

    // --- role transitions (LeaderAndIsr) ---

    /// One rule for every reader of an announcement ([`freshness`]): one that
    /// is not newer in its epochs changes no role, but the topic's config it
    /// carries applies (here a lower `min.insync.replicas` unfreezes the HW).
    #[test]
    fn an_announcement_not_newer_changes_only_the_config() {
        let now = Instant::now();
        for (name, a) in [
            ("the same epochs", announce(Some(1), 5, 10, &[1])),
            ("an older partition epoch", announce(Some(2), 6, 9, &[2])),
            ("an older leader epoch", announce(Some(2), 4, 12, &[2])),
        ] {
            let mut l = leader(&[1], 10, 10, 2, now);
            assert_eq!(l.on_leader_append(20).high_watermark, None, "{name}");
            let e = l.on_leader_and_isr(&a, config(1), BROKER_EPOCH, now);
            assert_eq!(e.role, RoleChange::None, "{name}");
            assert_eq!(e.high_watermark, Some(20), "{name}");
            assert!(l.is_leader(), "{name}");
            assert_eq!(l.leader_epoch(), 5, "{name}");
        }
    }

    #[test]
    fn role_transitions() {
        let now = Instant::now();
        struct Case {
            name: &'static str,
            /// None: a new replica; Some(true): leading epoch 5; Some(false): following in 5.
            start: Option<bool>,
            announce: Announcement,
            role: RoleChange,
            start_epoch: Option<EpochStart>,
            fetcher: Option<FetcherChange>,
            is_leader: bool,
            leader_epoch: i32,
        }
        let follow = |leader, leader_epoch| {
            Some(FetcherChange::Follow {
                leader,
                leader_epoch,
            })
        };
        let start = |epoch| {
            Some(EpochStart {
                epoch,
                start_offset: 20,
            })
        };
        let cases = [
            Case {
                name: "testMakeLeader: new replica named leader",
                start: None,
                announce: announce(Some(1), 5, 10, &[1, 2, 3]),
                role: RoleChange::BecameLeader,
                start_epoch: start(5),
                fetcher: Some(FetcherChange::Stop),
                is_leader: true,
                leader_epoch: 5,
            },
            Case {
                name: "testMakeFollower: new replica follows 2",
                start: None,
                announce: announce(Some(2), 5, 10, &[1, 2, 3]),
                role: RoleChange::BecameFollower,
                start_epoch: None,
                fetcher: follow(2, 5),
                is_leader: false,
                leader_epoch: 5,
            },
            Case {
                name: "leader steps down to follow 2",
                start: Some(true),
                announce: announce(Some(2), 6, 11, &[1, 2]),
                role: RoleChange::BecameFollower,
                start_epoch: None,
                fetcher: follow(2, 6),
                is_leader: false,
                leader_epoch: 6,
            },
            Case {
                name: "follower becomes leader of a new epoch",
                start: Some(false),
                announce: announce(Some(1), 6, 11, &[1, 3]),
                role: RoleChange::BecameLeader,
                start_epoch: start(6),
                fetcher: Some(FetcherChange::Stop),
                is_leader: true,
                leader_epoch: 6,
            },
            Case {
                name: "leader re-elected in a new epoch starts it at its LEO",
                start: Some(true),
                announce: announce(Some(1), 6, 11, &[1]),
                role: RoleChange::BecameLeader,
                start_epoch: start(6),
                fetcher: Some(FetcherChange::Stop),
                is_leader: true,
                leader_epoch: 6,
            },
            Case {
                name: "follower of 2 follows 3 in a new epoch",
                start: Some(false),
                announce: announce(Some(3), 6, 11, &[1, 3]),
                role: RoleChange::BecameFollower,
                start_epoch: None,
                fetcher: follow(3, 6),
                is_leader: false,
                leader_epoch: 6,
            },
            Case {
                name: "leader: same epoch, new ISR",
                start: Some(true),
                announce: announce(Some(1), 5, 11, &[1, 2]),
                role: RoleChange::Updated,
                start_epoch: None,
                fetcher: None,
                is_leader: true,
                leader_epoch: 5,
            },
            Case {
                name: "follower: same epoch, new ISR",
                start: Some(false),
                announce: announce(Some(2), 5, 11, &[1, 2]),
                role: RoleChange::Updated,
                start_epoch: None,
                fetcher: None,
                is_leader: false,
                leader_epoch: 5,
            },
            Case {
                name: "no leader: offline",
                start: Some(false),
                announce: announce(None, 6, 11, &[]),
                role: RoleChange::BecameOffline,
                start_epoch: None,
                fetcher: Some(FetcherChange::Stop),
                is_leader: false,
                leader_epoch: 6,
            },
            Case {
                name: "leader loses leadership to no one",
                start: Some(true),
                announce: announce(None, 6, 11, &[]),
                role: RoleChange::BecameOffline,
                start_epoch: None,
                fetcher: Some(FetcherChange::Stop),
                is_leader: false,
                leader_epoch: 6,
            },
            Case {
                name: "older partition epoch ignored",
                start: Some(true),
                announce: announce(Some(2), 6, 9, &[2]),
                role: RoleChange::None,
                start_epoch: None,
                fetcher: None,
                is_leader: true,
                leader_epoch: 5,
            },
            Case {
                name: "same partition and leader epoch ignored",
                start: Some(false),
                announce: announce(Some(2), 5, 10, &[1, 2, 3]),
                role: RoleChange::None,
                start_epoch: None,
                fetcher: None,
                is_leader: false,
                leader_epoch: 5,
            },
            Case {
                name: "older leader epoch ignored",
                start: Some(true),
                announce: announce(Some(2), 4, 12, &[2]),
                role: RoleChange::None,
                start_epoch: None,
                fetcher: None,
                is_leader: true,
                leader_epoch: 5,
            },
        ];
        for c in cases {
            let mut core = match c.start {
                None => replica(20, 20),
                Some(true) => leader(&[1, 2, 3], 20, 20, 1, now),
                Some(false) => follower(20, 20, now),
            };
            let e = core.on_leader_and_isr(&c.announce, config(1), BROKER_EPOCH, now);
            assert_eq!(e.role, c.role, "{}", c.name);
            assert_eq!(e.start_epoch, c.start_epoch, "{}", c.name);
            assert_eq!(e.fetcher, c.fetcher, "{}", c.name);
            assert_eq!(core.is_leader(), c.is_leader, "{}", c.name);
            assert_eq!(core.leader_epoch(), c.leader_epoch, "{}", c.name);
            // Waiting operations must see every change; nothing else wakes them.
            let expected_wake = if c.role == RoleChange::None {
                Wake::Nobody
            } else {
                Wake::FetchesAndProduces
            };
            assert_eq!(e.wake, expected_wake, "{}", c.name);
            // The high watermark is kept across every transition.
            assert_eq!(core.high_watermark(), 20, "{}", c.name);
        }
    }

    #[test]
    fn a_new_leader_keeps_the_high_watermark_it_had_as_follower() {
        // testMakeLeaderDoesNotUpdateHWOnBecomingLeader-style: the follower's HW (15),
        // not its LEO (20), until the followers report.
        let now = Instant::now();
        let mut c = follower(20, 15, now);
        let e = c.on_leader_and_isr(
            &announce(Some(1), 6, 11, &[1, 2]),
            config(1),
            BROKER_EPOCH,
            now,
        );
        assert_eq!(e.role, RoleChange::BecameLeader);
        assert_eq!(e.high_watermark, None);
        assert_eq!(c.high_watermark(), 15);
        // A sole leader commits at once.
        let mut c = follower(20, 15, now);
        let e = c.on_leader_and_isr(
            &announce(Some(1), 6, 11, &[1]),
            config(1),
            BROKER_EPOCH,
            now,
        );
        assert_eq!(e.high_watermark, Some(20));
    }

    #[test]
    fn same_epoch_announcement_commits_the_pending_isr_change() {
        let now = Instant::now();
        let mut l = leader(&[1, 2, 3], 20, 20, 1, now);
        let shrink = l.on_tick(now + LAG * 2).alter_partition.unwrap();
        assert_eq!(shrink.new_isr, vec![1]);
        let e = l.on_leader_and_isr(
            &announce(Some(1), 5, 11, &[1]),
            config(1),
            BROKER_EPOCH,
            now,
        );
        assert_eq!(e.isr_committed, Some((IsrChangeKind::Shrink, vec![1])));
    }

    // --- follower ---

    #[test]
    fn follower_high_watermark_is_the_leaders_capped_by_its_own_log_end() {
        let now = Instant::now();
        // (own HW, own LEO after the append, leader HW) -> new HW
        let cases = [
            (10, 20, 15, 15),
            (10, 20, 30, 20),
            // Never back below what it had (up to its LEO): an old leader answer.
            (15, 20, 12, 15),
            (10, 10, 10, 10),
        ];
        for (hw, leo, leader_hw, expected) in cases {
            let mut f = follower(hw, hw, now);
            let e = f.on_follower_append(leader_hw, leo);
            assert_eq!(f.high_watermark(), expected, "{hw} {leo} {leader_hw}");
            assert_eq!(e.high_watermark, (expected != hw).then_some(expected));
        }
    }

    #[test]
    fn follower_truncation_lowers_a_high_watermark_above_the_new_end() {
        let now = Instant::now();
        let mut f = follower(20, 18, now);
        assert_eq!(f.on_follower_truncated(19).high_watermark, None);
        assert_eq!(f.on_follower_truncated(12).high_watermark, Some(12));
        assert_eq!(f.high_watermark(), 12);
        assert_eq!(f.on_follower_restarted_at(40).high_watermark, Some(40));
        assert_eq!((f.high_watermark(), f.log_end_offset()), (40, 40));
    }

    #[test]
    fn only_a_follower_of_the_current_epoch_changes_its_log() {
        let now = Instant::now();
        let f = follower(10, 10, now);
        let l = leader(&[1], 10, 10, 1, now);
        assert_eq!(f.check_follower(5), Ok(()));
        assert_eq!(f.check_follower(4), Err(ErrorCode::FencedLeaderEpoch));
        assert_eq!(f.check_follower(6), Err(ErrorCode::FencedLeaderEpoch));
        assert_eq!(l.check_follower(5), Err(ErrorCode::FencedLeaderEpoch));
    }

    // --- reads ---

    #[test]
    fn consumers_read_up_to_the_leaders_high_watermark_or_a_followers_when_allowed() {
        let now = Instant::now();
        let l = leader(&[1, 2], 20, 12, 1, now);
        let f = follower(20, 15, now);
        let offline = replica(20, 15);
        assert_eq!(l.consumer_high_watermark(None, false), Ok(12));
        assert_eq!(
            l.consumer_high_watermark(Some(4), false),
            Err(ErrorCode::FencedLeaderEpoch)
        );
        assert_eq!(f.consumer_high_watermark(None, true), Ok(15));
        assert_eq!(
            f.consumer_high_watermark(None, false),
            Err(ErrorCode::NotLeaderOrFollower)
        );
        assert_eq!(
            offline.consumer_high_watermark(None, true),
            Err(ErrorCode::NotLeaderOrFollower)
        );
    }

    #[test]
    fn divergence_is_where_the_followers_epoch_ends_here_when_before_its_end() {
        let end = |epoch, end_offset| EpochEndOffset { epoch, end_offset };
        // (follower's last fetched epoch, its fetch offset, where that epoch ends here)
        let cases = [
            (3, 50, end(3, 60), None),
            (3, 60, end(3, 60), None),
            (3, 61, end(3, 40), Some(end(3, 40))),
            // This log has no epoch 3: it ends with epoch 2 at 30.
            (3, 20, end(2, 30), Some(end(2, 30))),
            (
                3,
                20,
                EpochEndOffset::UNDEFINED,
                Some(EpochEndOffset::UNDEFINED),
            ),
        ];
        for (epoch, offset, local, expected) in cases {
            assert_eq!(
                diverging_epoch(epoch, offset, local),
                expected,
                "{epoch} {offset} {local:?}"
            );
        }
    }

    #[test]
    fn waiting_fetch_readiness() {
        let some = |n| move || Some(n);
        assert_eq!(
            fetch_readiness(20, 5, Some(5), 10, some(100)),
            FetchReadiness::Bytes(100)
        );
        assert_eq!(
            fetch_readiness(20, 5, None, 20, || unreachable!()),
            FetchReadiness::Bytes(0)
        );
        // The epoch changed, the log was truncated below the offset, or the offset
        // left the log: answer now.
        assert_eq!(
            fetch_readiness(20, 6, Some(5), 10, some(1)),
            FetchReadiness::Changed
        );
        assert_eq!(
            fetch_readiness(8, 5, Some(5), 10, some(1)),
            FetchReadiness::Changed
        );
        assert_eq!(
            fetch_readiness(20, 5, Some(5), 10, || None),
            FetchReadiness::Changed
        );
    }

    #[test]
    fn a_waiting_fetch_reads_up_to_the_leo_for_followers_and_the_high_watermark_for_consumers() {
        let now = Instant::now();
        let l = leader(&[1, 2], 20, 12, 1, now);
        let f = follower(20, 15, now);
        assert_eq!(l.fetch_wait_target(true, false), Some((20, 5)));
        assert_eq!(l.fetch_wait_target(false, false), Some((12, 5)));
        assert_eq!(f.fetch_wait_target(true, false), None);
        assert_eq!(f.fetch_wait_target(false, true), Some((15, 5)));
    }

    #[test]
    fn list_offsets_earliest_latest_for_consumers_and_replicas() {
        let now = Instant::now();
        let l = leader(&[1, 2], 20, 12, 1, now);
        use syncline_proto::{EARLIEST_TIMESTAMP, LATEST_TIMESTAMP};
        let unused = |_| -> Result<Option<TimestampOffset>, ErrorCode> {
            panic!("earliest and latest need no lookup")
        };
        let at = |offset| ListedOffset {
            offset,
            timestamp: -1,
            leader_epoch: 5,
        };
        assert_eq!(
            l.list_offset(EARLIEST_TIMESTAMP, None, false, 3, unused),
            Ok(at(3))
        );
        assert_eq!(
            l.list_offset(LATEST_TIMESTAMP, None, false, 3, unused),
            Ok(at(12))
        );
        assert_eq!(
            l.list_offset(LATEST_TIMESTAMP, None, true, 3, unused),
            Ok(at(20))
        );
        assert_eq!(
            l.list_offset(-4, None, false, 3, unused),
            Err(ErrorCode::InvalidRequest)
        );
        assert_eq!(
            follower(20, 12, now).list_offset(LATEST_TIMESTAMP, None, false, 0, unused),
            Err(ErrorCode::NotLeaderOrFollower)
        );
        assert_eq!(
            l.list_offset(LATEST_TIMESTAMP, Some(4), false, 0, unused),
            Err(ErrorCode::FencedLeaderEpoch)
        );
    }

    #[test]
    fn list_offsets_by_timestamp_answer_what_the_log_finds_below_the_high_watermark() {
        let now = Instant::now();
        let l = leader(&[1, 2], 20, 12, 1, now);
        let found = |offset| {
            move |_| {
                Ok(Some(TimestampOffset {
                    offset,
                    timestamp: 1_000 + offset,
                    leader_epoch: 3,
                }))
            }
        };
        let listed = ListedOffset {
            offset: 11,
            timestamp: 1_011,
            leader_epoch: 3,
        };
        // Below the high watermark (12): the record found, with its batch's epoch.
        assert_eq!(l.list_offset(1_000, None, false, 0, found(11)), Ok(listed));
        assert_eq!(
            l.list_offset(syncline_proto::MAX_TIMESTAMP, None, false, 0, found(11)),
            Ok(listed)
        );
        // At or above it: not yet committed, so not found for a consumer; a
        // replica may see up to the LEO.
        assert_eq!(
            l.list_offset(1_000, None, false, 0, found(12)),
            Ok(ListedOffset::NOT_FOUND)
        );
        assert_eq!(
            l.list_offset(1_000, None, true, 0, found(12))
                .map(|o| o.offset),
            Ok(12)
        );
        assert_eq!(
            l.list_offset(1_000, None, false, 0, |_| Ok(None)),
            Ok(ListedOffset::NOT_FOUND)
        );
        assert_eq!(
            l.list_offset(1_000, None, false, 0, |_| Err(ErrorCode::StorageError)),
            Err(ErrorCode::StorageError)
        );
        // The timestamp asked for reaches the lookup as asked.
        assert_eq!(
            l.list_offset(777, None, false, 0, |t| {
                assert_eq!(t, 777);
                Ok(None)
            }),
            Ok(ListedOffset::NOT_FOUND)
        );
    }

    #[test]
    fn rack_aware_consumers_are_sent_to_an_isr_member_in_their_rack() {
        let now = Instant::now();
        let l = leader(&[1, 2], 20, 20, 1, now);
        let rack = |id: i32| Some(["a", "b", "c"][(id - 1) as usize].to_string());
        assert_eq!(l.preferred_read_replica("b", rack), Some(2));
        assert_eq!(
            l.preferred_read_replica("a", rack),
            None,
            "the leader is in it"
        );
        assert_eq!(
            l.preferred_read_replica("c", rack),
            None,
            "3 is not in the ISR"
        );
    }

    #[test]
    fn describe_and_health_report_each_followers_lag_by_one_formula() {
        let now = Instant::now();
        let mut l = leader(&[1, 2, 3], 20, 20, 2, now);
        let _ = l.on_follower_fetch(now, &fetch(2, 15, 20, 5));
        let d = l.describe(0, 0, now).unwrap();
        let lags: Vec<(i32, i64, i64)> = d
            .replica_statuses
            .iter()
            .map(|s| (s.broker_id, s.log_end_offset, s.lag_offsets))
            .collect();
        assert_eq!(lags, vec![(1, 20, 0), (2, 15, 5), (3, -1, 20)]);
        let h = l.leader_health().unwrap();
        assert_eq!(
            (
                h.isr_size,
                h.replicas,
                h.min_insync_replicas,
                h.max_follower_lag
            ),
            (3, 3, 2, 20)
        );
        assert!(follower(20, 20, now).describe(0, 0, now).is_none());
    }
}
