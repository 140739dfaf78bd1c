//! One partition replica on this broker: its log and its replication state.
//!
//! Locking: `state` (role, epochs, ISR bookkeeping) is taken before `log` whenever
//! both are needed, and neither is held across an `.await` or across partitions.
//! Reads of the log (consumer and follower fetches) take only the log's read lock so
//! they do not stall appends for long.

pub mod leader_state;
pub mod truncation;

use std::path::Path;
use std::sync::atomic::{AtomicI64, Ordering};
use std::sync::Arc;

use bytes::Bytes;
use parking_lot::{Mutex, RwLock};
use syncline_log::{Log, LogError};
pub use syncline_proto::TopicPartition;
use syncline_proto::{pb, ErrorCode, NO_LEADER};
use tokio::time::Instant;

use crate::topic_config::TopicConfig;
use leader_state::{BecomeLeader, FollowerFetchOutcome, IsrChangeKind, IsrProposal, LeaderState};

/// Records read for a fetch.
#[derive(Debug, Clone)]
pub struct ReadResult {
    pub records: Bytes,
    pub high_watermark: i64,
    pub log_start_offset: i64,
    pub log_end_offset: i64,
    /// Set when a follower's log diverges from this leader's (no records then).
    pub diverging_epoch: Option<(i32, i64)>,
}

/// A follower's fetch, as the leader records it.
#[derive(Debug, Clone, Copy)]
pub struct FollowerFetch {
    pub follower_id: i32,
    /// The broker epoch it fetched with (-1 unknown).
    pub broker_epoch: i64,
    /// Its log end offset.
    pub fetch_offset: i64,
    /// The leader's log end offset when the fetch was read.
    pub leader_leo: i64,
    /// The leader epoch the fetch was validated against.
    pub request_epoch: i32,
    /// The controller would accept the follower into the ISR (unfenced, current
    /// broker epoch).
    pub eligible: bool,
}

/// A leader append.
#[derive(Debug, Clone)]
pub struct LeaderAppend {
    pub base_offset: i64,
    pub last_offset: i64,
    pub log_start_offset: i64,
    pub leader_epoch: i32,
    pub high_watermark_advanced: bool,
}

/// Where an acks=all produce stands.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ProduceCheck {
    Pending,
    /// Done: acknowledged by these replicas.
    Acked(Vec<i32>),
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

/// What changed in a role transition.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum RoleChange {
    /// Stale or identical announcement: nothing to do.
    None,
    /// Same leader and epoch; ISR/replicas/partition epoch updated.
    Updated,
    BecameLeader,
    BecameFollower,
    BecameOffline,
}

/// The outcome of applying a committed ISR.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct IsrCommit {
    pub high_watermark_advanced: bool,
    /// Our own proposal of this kind was the one committed.
    pub committed_change: Option<IsrChangeKind>,
}

#[derive(Debug)]
struct State {
    leader_id: i32,
    leader_epoch: i32,
    /// -1 until the first announcement.
    partition_epoch: i32,
    replicas: Vec<i32>,
    isr: Vec<i32>,
    leader: Option<LeaderState>,
    /// This replica's high watermark while it is not leader.
    follower_high_watermark: i64,
    /// When the leader's next ISR shrink check is due (None: at the next poll).
    next_shrink_check: Option<Instant>,
    config: TopicConfig,
}

/// Told of every ISR change this leader proposed and the controller committed, while
/// the partition's state lock is held: whoever observes the new ISR observes the
/// count too.
pub type IsrListener = Arc<dyn Fn(&TopicPartition, IsrChangeKind, &[i32]) + Send + Sync>;

/// A partition replica.
pub struct Partition {
    pub tp: TopicPartition,
    local_id: i32,
    isr_listener: IsrListener,
    log: RwLock<Log>,
    state: Mutex<State>,
    /// Mirrors for lock-free reads (metrics, purgatory checks).
    log_end_offset: AtomicI64,
    high_watermark: AtomicI64,
}

impl std::fmt::Debug for Partition {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Partition")
            .field("tp", &self.tp)
            .field("log_end_offset", &self.log_end_offset())
            .field("high_watermark", &self.high_watermark())
            .finish_non_exhaustive()
    }
}

fn storage(e: LogError) -> ErrorCode {
    tracing::error!(error = %e, "log operation failed");
    ErrorCode::StorageError
}

fn check_epoch(current: i32, requested: Option<i32>) -> Result<(), ErrorCode> {
    match requested {
        Some(e) if e < current => Err(ErrorCode::FencedLeaderEpoch),
        Some(e) if e > current => Err(ErrorCode::UnknownLeaderEpoch),
        _ => Ok(()),
    }
}

impl Partition {
    /// Opens (recovering) the partition's log under `log_dir`. The replica has no role
    /// until the controller announces one.
    pub fn open(
        log_dir: &Path,
        tp: TopicPartition,
        local_id: i32,
        config: TopicConfig,
        isr_listener: IsrListener,
    ) -> Result<Partition, LogError> {
        let log = Log::open(&log_dir.join(tp.dir_name()), config.log.clone())?;
        let leo = log.log_end_offset();
        let hw = log
            .read_high_watermark()
            .unwrap_or(0)
            .min(leo)
            .max(log.log_start_offset());
        Ok(Partition {
            tp,
            local_id,
            isr_listener,
            log: RwLock::new(log),
            state: Mutex::new(State {
                leader_id: NO_LEADER,
                leader_epoch: -1,
                partition_epoch: -1,
                replicas: Vec::new(),
                isr: Vec::new(),
                leader: None,
                follower_high_watermark: hw,
                next_shrink_check: None,
                config,
            }),
            log_end_offset: AtomicI64::new(leo),
            high_watermark: AtomicI64::new(hw),
        })
    }

    pub fn log_end_offset(&self) -> i64 {
        self.log_end_offset.load(Ordering::Acquire)
    }

    pub fn high_watermark(&self) -> i64 {
        self.high_watermark.load(Ordering::Acquire)
    }

    pub fn log_start_offset(&self) -> i64 {
        self.log.read().log_start_offset()
    }

    pub fn is_leader(&self) -> bool {
        self.state.lock().leader.is_some()
    }

    pub fn leader_epoch(&self) -> i32 {
        self.state.lock().leader_epoch
    }

    pub fn leader_id(&self) -> i32 {
        self.state.lock().leader_id
    }

    /// (leader id, leader epoch), for error hints.
    pub fn current_leader(&self) -> pb::LeaderIdAndEpoch {
        let st = self.state.lock();
        pb::LeaderIdAndEpoch {
            leader_id: st.leader_id,
            leader_epoch: st.leader_epoch,
        }
    }

    /// Leader-only snapshot for metrics: (ISR size, replicas, min ISR, under-replicated
    /// count helpers). None when not leader.
    pub fn leader_health(&self) -> Option<LeaderHealth> {
        let st = self.state.lock();
        let l = st.leader.as_ref()?;
        let leo = self.log_end_offset();
        Some(LeaderHealth {
            isr_size: l.isr().len(),
            replicas: l.replicas().len(),
            min_insync_replicas: l.min_insync_replicas(),
            max_follower_lag: l
                .followers()
                .iter()
                .map(|f| {
                    if f.log_end_offset < 0 {
                        leo
                    } else {
                        leo - f.log_end_offset
                    }
                })
                .max()
                .unwrap_or(0),
        })
    }

    fn set_high_watermark(&self, hw: i64) {
        self.high_watermark.store(hw, Ordering::Release);
    }

    // --- leader: produce ---

    /// Appends producer batches (already validated) as leader.
    pub fn append_as_leader(
        &self,
        batches: &[u8],
        acks: i32,
        client_epoch: Option<i32>,
        now_ms: i64,
    ) -> Result<LeaderAppend, ErrorCode> {
        let mut st = self.state.lock();
        let epoch = st.leader_epoch;
        // The client's epoch first (KIP-320): a stale client learns it is stale.
        check_epoch(epoch, client_epoch)?;
        let leader = st.leader.as_mut().ok_or(ErrorCode::NotLeaderOrFollower)?;
        if acks == syncline_proto::ACKS_ALL {
            if let Err(isr_size) = leader.check_enough_replicas() {
                tracing::debug!(
                    partition = %self.tp, isr_size, min_insync_replicas = leader.min_insync_replicas(),
                    "refusing acks=all produce: ISR below min.insync.replicas"
                );
                return Err(ErrorCode::NotEnoughReplicas);
            }
        }
        let mut log = self.log.write();
        let info = log
            .append_as_leader(batches, epoch, now_ms)
            .map_err(storage)?;
        let leo = log.log_end_offset();
        let log_start_offset = log.log_start_offset();
        drop(log);
        self.log_end_offset.store(leo, Ordering::Release);
        let advanced = leader.on_leader_append(leo);
        if advanced {
            self.set_high_watermark(leader.high_watermark());
        }
        Ok(LeaderAppend {
            base_offset: info.first_offset,
            last_offset: info.last_offset,
            log_start_offset,
            leader_epoch: epoch,
            high_watermark_advanced: advanced,
        })
    }

    /// Where an acks=all produce that needs `required_offset` (last offset + 1),
    /// appended under `append_epoch`, stands.
    pub fn check_produce(&self, required_offset: i64, append_epoch: i32) -> ProduceCheck {
        let st = self.state.lock();
        let Some(leader) = st.leader.as_ref() else {
            return ProduceCheck::Failed(ErrorCode::NotLeaderOrFollower);
        };
        if st.leader_epoch != append_epoch {
            // Leadership moved away and back: the records may have been truncated.
            return ProduceCheck::Failed(ErrorCode::NotLeaderOrFollower);
        }
        if leader.high_watermark() >= required_offset {
            if leader.is_under_min_isr() {
                ProduceCheck::Failed(ErrorCode::NotEnoughReplicasAfterAppend)
            } else {
                ProduceCheck::Acked(leader.acked_isr(required_offset))
            }
        } else {
            ProduceCheck::Pending
        }
    }

    /// Final word on an acks=all produce whose timeout passed.
    pub fn expired_produce_error(&self) -> ErrorCode {
        let st = self.state.lock();
        match st.leader.as_ref() {
            Some(l) if l.is_under_min_isr() => ErrorCode::NotEnoughReplicasAfterAppend,
            Some(_) => ErrorCode::RequestTimedOut,
            None => ErrorCode::NotLeaderOrFollower,
        }
    }

    // --- leader: fetch ---

    /// A consumer read: records below the high watermark only. Touches no
    /// replication state.
    pub fn read_for_consumer(
        &self,
        fetch_offset: i64,
        max_bytes: usize,
        client_epoch: Option<i32>,
        allow_follower_read: bool,
    ) -> Result<ReadResult, ErrorCode> {
        let hw = {
            let st = self.state.lock();
            check_epoch(st.leader_epoch, client_epoch)?;
            self.consumer_high_watermark(&st, allow_follower_read)?
        };
        let log = self.log.read();
        let (start, leo) = (log.log_start_offset(), log.log_end_offset());
        if fetch_offset < start || fetch_offset > leo {
            return Err(ErrorCode::OffsetOutOfRange);
        }
        let records = if fetch_offset >= hw {
            Bytes::new()
        } else {
            log.read(fetch_offset, max_bytes, hw, true)
                .map_err(storage)?
                .records
        };
        Ok(ReadResult {
            records,
            high_watermark: hw,
            log_start_offset: start,
            log_end_offset: leo,
            diverging_epoch: None,
        })
    }

    /// How far a consumer may read here: the leader's HW, or on a follower (for a
    /// consumer that fetches from followers, KIP-392) the follower's own HW.
    fn consumer_high_watermark(
        &self,
        st: &State,
        allow_follower_read: bool,
    ) -> Result<i64, ErrorCode> {
        match st.leader.as_ref() {
            Some(leader) => Ok(leader.high_watermark()),
            None if allow_follower_read
                && st.leader_id != NO_LEADER
                && st.replicas.contains(&self.local_id) =>
            {
                Ok(st.follower_high_watermark)
            }
            None => Err(ErrorCode::NotLeaderOrFollower),
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
        let st = self.state.lock();
        let leader = st.leader.as_ref()?;
        if rack_of(self.local_id).as_deref() == Some(client_rack) {
            return None;
        }
        st.replicas
            .iter()
            .copied()
            .filter(|r| *r != self.local_id && leader.isr().contains(r))
            .find(|r| rack_of(*r).as_deref() == Some(client_rack))
    }

    /// A follower read: records up to the leader's LEO, or the point where the
    /// follower's log diverges. Does not record the follower's progress: see
    /// [`Partition::record_follower_fetch`].
    pub fn read_for_follower(
        &self,
        follower_id: i32,
        fetch_offset: i64,
        last_fetched_epoch: Option<i32>,
        client_epoch: Option<i32>,
        max_bytes: usize,
    ) -> Result<ReadResult, ErrorCode> {
        let hw = {
            let st = self.state.lock();
            check_epoch(st.leader_epoch, client_epoch)?;
            let leader = st.leader.as_ref().ok_or(ErrorCode::NotLeaderOrFollower)?;
            if !leader.replicas().contains(&follower_id) {
                return Err(ErrorCode::NotLeaderOrFollower);
            }
            leader.high_watermark()
        };
        let log = self.log.read();
        let (start, leo) = (log.log_start_offset(), log.log_end_offset());
        let mut result = ReadResult {
            records: Bytes::new(),
            high_watermark: hw,
            log_start_offset: start,
            log_end_offset: leo,
            diverging_epoch: None,
        };
        if let Some(epoch) = last_fetched_epoch {
            // KIP-595: where does the follower's last epoch end here? If this log has no
            // such epoch, or it ends before the follower's LEO, the logs diverge.
            let (end_epoch, end_offset) = log.end_offset_for_epoch(epoch).unwrap_or((-1, -1));
            if end_epoch < epoch || end_offset < fetch_offset {
                result.diverging_epoch = Some((end_epoch, end_offset));
                return Ok(result);
            }
        }
        if fetch_offset < start || fetch_offset > leo {
            return Err(ErrorCode::OffsetOutOfRange);
        }
        if fetch_offset < leo {
            result.records = log
                .read(fetch_offset, max_bytes, leo, true)
                .map_err(storage)?
                .records;
        }
        Ok(result)
    }

    /// Records a follower's fetch offset (its LEO) on the leader: caught-up time, HW,
    /// ISR expansion. `request_epoch` is the leader epoch the fetch was validated
    /// against; if leadership changed since, nothing is recorded.
    pub fn record_follower_fetch(
        &self,
        now: Instant,
        f: &FollowerFetch,
    ) -> Option<FollowerFetchOutcome> {
        let mut st = self.state.lock();
        if st.leader_epoch != f.request_epoch {
            return None;
        }
        let leader = st.leader.as_mut()?;
        let outcome = leader.on_follower_fetch(
            now,
            f.follower_id,
            f.broker_epoch,
            f.fetch_offset,
            f.leader_leo,
            f.eligible,
        )?;
        if outcome.high_watermark_advanced {
            self.set_high_watermark(leader.high_watermark());
        }
        Some(outcome)
    }

    /// For a waiting fetch: how many bytes are available past `fetch_offset`, or
    /// whether the partition changed under it.
    pub fn fetch_readiness(
        &self,
        fetch_offset: i64,
        is_follower: bool,
        request_epoch: Option<i32>,
        allow_follower_read: bool,
    ) -> FetchReadiness {
        let (end, epoch) = {
            let st = self.state.lock();
            let end = if is_follower {
                if st.leader.is_none() {
                    return FetchReadiness::Changed;
                }
                self.log_end_offset()
            } else {
                match self.consumer_high_watermark(&st, allow_follower_read) {
                    Ok(hw) => hw,
                    Err(_) => return FetchReadiness::Changed,
                }
            };
            (end, st.leader_epoch)
        };
        if request_epoch.is_some_and(|e| e != epoch) || end < fetch_offset {
            return FetchReadiness::Changed;
        }
        if end == fetch_offset {
            return FetchReadiness::Bytes(0);
        }
        match self.log.read().bytes_between(fetch_offset, end) {
            Ok(n) => FetchReadiness::Bytes(n),
            // The offset left the log (truncation, retention): answer now.
            Err(_) => FetchReadiness::Changed,
        }
    }

    /// OffsetsForLeaderEpoch on the leader: where `epoch` ends in this log.
    pub fn end_offset_for_epoch(
        &self,
        epoch: i32,
        client_epoch: Option<i32>,
        require_leader: bool,
    ) -> Result<(i32, i64), ErrorCode> {
        let st = self.state.lock();
        check_epoch(st.leader_epoch, client_epoch)?;
        if require_leader && st.leader.is_none() {
            return Err(ErrorCode::NotLeaderOrFollower);
        }
        let log = self.log.read();
        Ok(log.end_offset_for_epoch(epoch).unwrap_or((-1, -1)))
    }

    /// ListOffsets: -2 earliest, -1 latest (HW for consumers, LEO for replicas).
    pub fn list_offset(
        &self,
        timestamp: i64,
        client_epoch: Option<i32>,
        from_replica: bool,
    ) -> Result<(i64, i32), ErrorCode> {
        let st = self.state.lock();
        check_epoch(st.leader_epoch, client_epoch)?;
        let leader = st.leader.as_ref().ok_or(ErrorCode::NotLeaderOrFollower)?;
        let offset = match timestamp {
            syncline_proto::EARLIEST_TIMESTAMP => self.log.read().log_start_offset(),
            syncline_proto::LATEST_TIMESTAMP if from_replica => self.log_end_offset(),
            syncline_proto::LATEST_TIMESTAMP => leader.high_watermark(),
            _ => return Err(ErrorCode::InvalidRequest),
        };
        Ok((offset, st.leader_epoch))
    }

    // --- leader: ISR ---

    /// The periodic ISR shrink check, every `replica.lag.time.max.ms / 2` of this
    /// partition's topic (the broker polls more often; each partition keeps its own
    /// pace, so a topic's shorter lag time applies from the moment it is known).
    pub fn maybe_shrink_isr(&self, now: Instant) -> Option<IsrProposal> {
        let mut st = self.state.lock();
        let leo = self.log_end_offset();
        let due = st.next_shrink_check.is_none_or(|t| now >= t);
        let leader = st.leader.as_mut()?;
        if !due {
            return None;
        }
        let next = now + leader.lag_time_max() / 2;
        let proposal = leader.maybe_shrink(now, leo);
        st.next_shrink_check = Some(next);
        proposal
    }

    /// The controller answered our AlterPartition.
    pub fn on_alter_partition_result(
        &self,
        result: Result<(Vec<i32>, i32, i32), ErrorCode>,
        now: Instant,
    ) -> Option<IsrCommit> {
        let mut st = self.state.lock();
        let leo = self.log_end_offset();
        let epoch = st.leader_epoch;
        let leader = st.leader.as_mut()?;
        match result {
            Ok((isr, leader_epoch, partition_epoch)) if leader_epoch == epoch => {
                let commit = self.apply_commit(leader, isr.clone(), partition_epoch, leo)?;
                if commit.high_watermark_advanced {
                    self.set_high_watermark(leader.high_watermark());
                }
                st.isr = isr;
                st.partition_epoch = partition_epoch;
                Some(commit)
            }
            Ok(_) => {
                leader.on_isr_change_failed(leo, now);
                None
            }
            Err(_) => {
                let advanced = leader.on_isr_change_failed(leo, now);
                if advanced {
                    self.set_high_watermark(leader.high_watermark());
                }
                None
            }
        }
    }

    // --- role changes ---

    /// Applies the controller's announcement. Announcements with an older partition
    /// epoch than the last one applied are ignored.
    pub fn apply_partition_state(
        &self,
        ps: &pb::PartitionState,
        config: TopicConfig,
        local_broker_epoch: i64,
        now: Instant,
    ) -> (RoleChange, Option<IsrCommit>) {
        let mut st = self.state.lock();
        if ps.partition_epoch < st.partition_epoch
            || (ps.partition_epoch == st.partition_epoch && ps.leader_epoch == st.leader_epoch)
        {
            if st.config != config {
                self.apply_config(&mut st, config);
            }
            return (RoleChange::None, None);
        }
        if ps.leader_epoch < st.leader_epoch {
            return (RoleChange::None, None);
        }
        let leo = self.log_end_offset();
        let same_epoch = ps.leader_epoch == st.leader_epoch;
        let was_leader = st.leader.is_some();
        st.replicas = ps.replicas.clone();
        st.isr = ps.isr.clone();
        st.partition_epoch = ps.partition_epoch;
        st.leader_id = ps.leader;
        st.leader_epoch = ps.leader_epoch;
        self.apply_config(&mut st, config.clone());

        if ps.leader == self.local_id {
            if same_epoch && was_leader {
                let leader = st.leader.as_mut().expect("was leader");
                let commit = self.apply_commit(leader, ps.isr.clone(), ps.partition_epoch, leo);
                if commit.is_some_and(|c| c.high_watermark_advanced) {
                    let hw = leader.high_watermark();
                    self.set_high_watermark(hw);
                }
                return (RoleChange::Updated, commit);
            }
            // A new leader epoch starts at our LEO.
            if let Err(e) = self.log.write().assign_epoch(ps.leader_epoch, leo) {
                tracing::error!(partition = %self.tp, error = %e, "cannot record the new leader epoch");
            }
            let hw = if was_leader {
                self.high_watermark()
            } else {
                st.follower_high_watermark
            };
            let leader = LeaderState::new(
                BecomeLeader {
                    local_id: self.local_id,
                    local_broker_epoch,
                    leader_epoch: ps.leader_epoch,
                    partition_epoch: ps.partition_epoch,
                    replicas: ps.replicas.clone(),
                    isr: ps.isr.clone(),
                    high_watermark: hw,
                    log_end_offset: leo,
                    min_insync_replicas: config.min_insync_replicas,
                    lag_time_max: config.replica_lag_time_max,
                },
                now,
            );
            self.set_high_watermark(leader.high_watermark());
            st.next_shrink_check = Some(now + config.replica_lag_time_max / 2);
            st.leader = Some(leader);
            tracing::info!(
                partition = %self.tp, leader_epoch = ps.leader_epoch, isr = ?ps.isr,
                log_end_offset = leo, high_watermark = self.high_watermark(),
                "became leader"
            );
            return (RoleChange::BecameLeader, None);
        }
        let stepped_down = match st.leader.take() {
            Some(l) => {
                st.follower_high_watermark = l.high_watermark();
                true
            }
            None => false,
        };
        if !stepped_down && same_epoch {
            // Still following the same leader in the same epoch: only the ISR or the
            // replica set changed.
            return (RoleChange::Updated, None);
        }
        if ps.leader == NO_LEADER {
            tracing::info!(partition = %self.tp, leader_epoch = ps.leader_epoch, "partition offline");
            return (RoleChange::BecameOffline, None);
        }
        tracing::info!(
            partition = %self.tp, leader = ps.leader, leader_epoch = ps.leader_epoch,
            "became follower"
        );
        (RoleChange::BecameFollower, None)
    }

    fn apply_config(&self, st: &mut State, config: TopicConfig) {
        let leo = self.log_end_offset();
        if let Some(l) = st.leader.as_mut() {
            if l.lag_time_max() != config.replica_lag_time_max {
                // Re-paced at the next poll.
                st.next_shrink_check = None;
            }
            l.set_lag_time_max(config.replica_lag_time_max);
            if l.set_min_insync_replicas(config.min_insync_replicas, leo) {
                self.set_high_watermark(l.high_watermark());
            }
        }
        st.config = config;
    }

    /// The replicas this partition is assigned to (as last announced).
    pub fn replicas(&self) -> Vec<i32> {
        self.state.lock().replicas.clone()
    }

    // --- follower ---

    /// The follower's fetch position: (LEO, latest leader epoch in its log, log start).
    pub fn follower_fetch_position(&self) -> (i64, Option<i32>, i64) {
        let log = self.log.read();
        (
            log.log_end_offset(),
            log.latest_epoch(),
            log.log_start_offset(),
        )
    }

    /// This replica's own end offset for `epoch` (truncation decisions).
    pub fn local_end_offset_for_epoch(&self, epoch: i32) -> Option<(i32, i64)> {
        self.log.read().end_offset_for_epoch(epoch)
    }

    /// Appends batches fetched from the leader, then sets HW = min(leader HW, LEO).
    /// Refused if this replica is not a follower of `leader_epoch` any more.
    pub fn append_as_follower(
        &self,
        batches: &[u8],
        leader_high_watermark: i64,
        leader_epoch: i32,
        now_ms: i64,
    ) -> Result<i64, ErrorCode> {
        let mut st = self.state.lock();
        if st.leader.is_some() || st.leader_epoch != leader_epoch {
            return Err(ErrorCode::FencedLeaderEpoch);
        }
        let mut log = self.log.write();
        if !batches.is_empty() {
            log.append_as_follower(batches, now_ms).map_err(|e| {
                tracing::warn!(partition = %self.tp, error = %e, "follower append failed");
                match e {
                    LogError::Io { .. } | LogError::Failed(_) => ErrorCode::StorageError,
                    _ => ErrorCode::CorruptMessage,
                }
            })?;
        }
        let leo = log.log_end_offset();
        drop(log);
        self.log_end_offset.store(leo, Ordering::Release);
        let hw = leader_high_watermark
            .min(leo)
            .max(st.follower_high_watermark.min(leo));
        st.follower_high_watermark = hw;
        self.set_high_watermark(hw);
        Ok(leo)
    }

    /// Truncates the follower's log to `offset` (epoch-based truncation; never below
    /// what the leader confirmed).
    pub fn truncate_to(&self, offset: i64, leader_epoch: i32) -> Result<i64, ErrorCode> {
        let mut st = self.state.lock();
        if st.leader.is_some() || st.leader_epoch != leader_epoch {
            return Err(ErrorCode::FencedLeaderEpoch);
        }
        let mut log = self.log.write();
        let before = log.log_end_offset();
        if offset < before {
            log.truncate_to(offset).map_err(storage)?;
            // The fetcher logs the truncation with its reason, at info.
            tracing::debug!(
                partition = %self.tp, from = before, to = log.log_end_offset(),
                "truncated log"
            );
        }
        let leo = log.log_end_offset();
        drop(log);
        self.log_end_offset.store(leo, Ordering::Release);
        if st.follower_high_watermark > leo {
            st.follower_high_watermark = leo;
            self.set_high_watermark(leo);
        }
        Ok(leo)
    }

    /// The leader's log starts after our LEO: start over, empty, at `offset`.
    pub fn truncate_fully_and_start_at(
        &self,
        offset: i64,
        leader_epoch: i32,
    ) -> Result<(), ErrorCode> {
        let mut st = self.state.lock();
        if st.leader.is_some() || st.leader_epoch != leader_epoch {
            return Err(ErrorCode::FencedLeaderEpoch);
        }
        let mut log = self.log.write();
        log.truncate_fully_and_start_at(offset).map_err(storage)?;
        // The atomic still holds the LEO from before the truncation.
        tracing::info!(
            topic = %self.tp.topic, partition = self.tp.partition,
            reason = "fetch offset below the leader's log start", from = self.log_end_offset(),
            to = offset, leader_epoch, "truncation: log emptied to restart at the leader's log start"
        );
        drop(log);
        self.log_end_offset.store(offset, Ordering::Release);
        st.follower_high_watermark = offset;
        self.set_high_watermark(offset);
        Ok(())
    }

    // --- housekeeping ---

    /// Writes the high-watermark checkpoint.
    pub fn checkpoint_high_watermark(&self) {
        let hw = self.high_watermark();
        if let Err(e) = self.log.read().write_high_watermark(hw) {
            tracing::warn!(partition = %self.tp, error = %e, "cannot checkpoint the high watermark");
        }
    }

    /// Runs the flush policy (`flush_ms`).
    pub fn flush_if_due(&self, now_ms: i64) {
        if let Err(e) = self.log.write().flush_if_due(now_ms) {
            tracing::warn!(partition = %self.tp, error = %e, "flush failed");
        }
    }

    /// Runs retention, below the high watermark only.
    pub fn apply_retention(&self, now_ms: i64) {
        let hw = self.high_watermark();
        match self.log.write().delete_old_segments(now_ms, hw) {
            Ok(info) => tracing::debug!(partition = %self.tp, ?info, "retention"),
            Err(e) => tracing::warn!(partition = %self.tp, error = %e, "retention failed"),
        }
    }

    /// Checkpoints, flushes and closes the log (clean shutdown): the next start
    /// trusts its files instead of validating them.
    pub fn close(&self) {
        self.checkpoint_high_watermark();
        if let Err(e) = self.log.write().close() {
            tracing::warn!(partition = %self.tp, error = %e, "closing the log failed");
        }
    }

    /// Applies a committed ISR to the leader state (caller holds the state lock).
    fn apply_commit(
        &self,
        leader: &mut LeaderState,
        isr: Vec<i32>,
        partition_epoch: i32,
        leo: i64,
    ) -> Option<IsrCommit> {
        if partition_epoch <= leader.partition_epoch() {
            return None;
        }
        // The controller may order the ISR its own way: compare as sets.
        let same_members =
            |a: &[i32], b: &[i32]| a.len() == b.len() && a.iter().all(|r| b.contains(r));
        let committed_change = leader
            .pending()
            .filter(|p| same_members(&p.isr, &isr))
            .map(|p| p.change);
        if let Some(kind) = committed_change {
            (self.isr_listener)(&self.tp, kind, &isr);
        }
        let advanced = leader.on_isr_committed(isr, partition_epoch, leo);
        Some(IsrCommit {
            high_watermark_advanced: advanced,
            committed_change,
        })
    }

    /// DescribeTopics' leader view; None when not leader.
    pub fn describe(&self, now: Instant) -> Option<pb::PartitionDescription> {
        let st = self.state.lock();
        let l = st.leader.as_ref()?;
        let leo = self.log_end_offset();
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
                log_end_offset: f.log_end_offset,
                lag_offsets: if f.log_end_offset < 0 {
                    leo
                } else {
                    leo - f.log_end_offset
                },
                last_caught_up_ms_ago: f
                    .last_caught_up
                    .map_or(-1, |t| now.saturating_duration_since(t).as_millis() as i64),
                in_isr: l.isr().contains(&f.broker_id),
            }
        }));
        Some(pb::PartitionDescription {
            partition: self.tp.partition,
            error_code: ErrorCode::None as i32,
            leader_id: self.local_id,
            leader_epoch: st.leader_epoch,
            partition_epoch: l.partition_epoch(),
            replicas: l.replicas().to_vec(),
            isr: l.isr().to_vec(),
            from_leader: true,
            high_watermark: l.high_watermark(),
            log_end_offset: leo,
            log_start_offset: self.log.read().log_start_offset(),
            replica_statuses: statuses,
            pending_isr: l.pending().map(|p| p.isr.clone()).unwrap_or_default(),
        })
    }
}

/// Health figures of a partition this broker leads.
#[derive(Debug, Clone, Copy)]
pub struct LeaderHealth {
    pub isr_size: usize,
    pub replicas: usize,
    pub min_insync_replicas: usize,
    pub max_follower_lag: i64,
}
