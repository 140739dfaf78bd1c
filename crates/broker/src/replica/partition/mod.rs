//! One partition replica on this broker: the shell around its log and its
//! [`PartitionCore`].
//!
//! Where each rule lives:
//! - [`core`]: every replication rule of a replica (roles and epochs from
//!   LeaderAndIsr, acks=all completion, fencing by epoch, the follower's high
//!   watermark, the KIP-595 divergence check, shrink pacing, AlterPartition answers),
//!   as a pure machine that returns [`Effects`];
//! - [`leader_state`]: the leader's bookkeeping inside it (follower LEOs,
//!   `lastCaughtUpTime`, ISR shrink/expand proposals, the high watermark);
//! - [`truncation`]: where a follower truncates before fetching;
//! - this module: the [`Partition`] shell, which owns the log, runs the core under
//!   one lock and executes the effects that touch the log and its mirrors.
//!
//! Locking: `core` is taken before `log` whenever both are needed, and neither is
//! held across an `.await` or across partitions. Reads of the log (consumer and
//! follower fetches) take only the log's read lock so they do not stall appends for
//! long.

pub use syncline_replication::partition::{core, leader_state, truncation};

use std::path::Path;
use std::sync::atomic::{AtomicBool, AtomicI64, AtomicU8, Ordering};
use std::sync::Arc;

use bytes::Bytes;
use parking_lot::{Mutex, RwLock};
use syncline_log::{Log, LogError, Records};
use syncline_log::{ProducerStates, SequenceCheck, SequenceError};
use syncline_proto::batch;
use syncline_proto::compression::Compression;
pub use syncline_proto::TopicPartition;
use syncline_proto::{pb, EpochEndOffset, ErrorCode};
use tokio::time::Instant;

use crate::topic_config::TopicConfig;
use syncline_replication::fetch::{self, FollowerRead, LogBounds, Reader};
use syncline_replication::follower::LogPosition;
pub use syncline_replication::partition::{
    AlterPartitionResult, Announcement, CommittedIsr, Effects, FetchReadiness, FetcherChange,
    FollowerFetch, LeaderHealth, ListedOffset, PartitionCore, ProduceCheck, ReplicationConfig,
    RoleChange, Wake,
};
use syncline_replication::partition::{IsrChangeKind, IsrProposal};
pub use syncline_replication::produce::Acks;
use syncline_replication::topic::{same_topic, TopicId};
use syncline_replication::PlantedBugs;

/// The suffix of a removed replica's directory, deleted in the background (and at
/// the next start if the broker stopped first).
pub const DELETE_SUFFIX: &str = "-delete";

/// Moves a partition directory aside for deletion, to
/// `<topic>-<partition>.<random>-delete`; returns where it went.
pub fn move_aside(dir: &Path) -> std::io::Result<std::path::PathBuf> {
    let name = dir.file_name().unwrap_or_default().to_string_lossy();
    let doomed = dir.with_file_name(format!(
        "{name}.{:016x}{DELETE_SUFFIX}",
        rand::random::<u64>()
    ));
    std::fs::rename(dir, &doomed)?;
    // Until the parent is synced a crash can undo the move, and the replica's
    // directory would be back under its name.
    syncline_durable::sync_parent(&doomed)?;
    Ok(doomed)
}

/// The file of a partition directory naming its topic id (Kafka's name).
pub const PARTITION_METADATA_FILE: &str = "partition.metadata";

/// The topic id `partition.metadata` in `dir` names, if it is there and readable.
pub fn read_topic_id(dir: &Path) -> Option<i64> {
    let text = std::fs::read_to_string(dir.join(PARTITION_METADATA_FILE)).ok()?;
    text.lines()
        .find_map(|l| l.strip_prefix("topic_id: "))
        .and_then(|id| id.trim().parse().ok())
}

fn write_topic_id(dir: &Path, topic_id: i64) -> std::io::Result<()> {
    syncline_durable::write_atomic(
        &dir.join(PARTITION_METADATA_FILE),
        format!("version: 0\ntopic_id: {topic_id}\n").as_bytes(),
    )
}

/// Deletes a moved-aside directory off the request path.
pub fn delete_in_background(dir: std::path::PathBuf) {
    let delete = move || match std::fs::remove_dir_all(&dir) {
        Ok(()) => tracing::debug!(dir = %dir.display(), "deleted"),
        Err(e) => {
            tracing::warn!(dir = %dir.display(), error = %e, "cannot delete a removed replica's log")
        }
    };
    match tokio::runtime::Handle::try_current() {
        Ok(rt) => {
            rt.spawn_blocking(delete);
        }
        Err(_) => delete(),
    }
}

/// Records read for a fetch.
#[derive(Debug, Clone)]
pub struct ReadResult {
    /// The records (empty when none, or when the logs diverge): regions of the
    /// segment files for a zero-copy read.
    pub records: Records,
    /// The high watermark to send.
    pub high_watermark: i64,
    /// The log's start offset.
    pub log_start_offset: i64,
    /// The log's end offset when read.
    pub log_end_offset: i64,
    /// The leader epoch the read was validated under.
    pub leader_epoch: i32,
    /// Set when a follower's log diverges from this leader's (no records then).
    pub diverging_epoch: Option<EpochEndOffset>,
}

/// A leader append.
#[derive(Debug, Clone)]
pub struct LeaderAppend {
    /// The first offset assigned.
    pub base_offset: i64,
    /// The last offset assigned.
    pub last_offset: i64,
    /// The log's start offset.
    pub log_start_offset: i64,
    /// The leader epoch the records were written under.
    pub leader_epoch: i32,
    /// An idempotent producer's retry of a batch already in the log: nothing was
    /// written, the offsets are the original's.
    pub duplicate: bool,
}

/// Told of every ISR change this leader proposed and the controller committed, while
/// the partition's lock is held: whoever observes the new ISR observes the count too.
pub type IsrListener = Arc<dyn Fn(&TopicPartition, IsrChangeKind, &[i32]) + Send + Sync>;

/// A partition replica: see the module docs.
pub struct Partition {
    /// Its name.
    pub tp: TopicPartition,
    /// The topic id it was opened for (0: unknown).
    pub topic_id: i64,
    isr_listener: IsrListener,
    log: RwLock<Log>,
    core: Mutex<PartitionCore>,
    /// Mirrors for lock-free reads (metrics, purgatory checks). `high_watermark` is
    /// written only by [`Partition::execute`], from the core's effects.
    log_end_offset: AtomicI64,
    high_watermark: AtomicI64,
    /// The topic's `compression.type` as a codec id, [`PRODUCER_CODEC`] for
    /// `producer`: read on every produce, written when the config changes.
    compression: AtomicU8,
    /// The topic's `message.timestamp.type` is `LogAppendTime`.
    log_append_time: AtomicBool,
}

/// [`Partition::compression`] of `compression.type=producer`.
const PRODUCER_CODEC: u8 = u8::MAX;

fn codec_id(c: Option<Compression>) -> u8 {
    c.map_or(PRODUCER_CODEC, Compression::id)
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

/// A fetch's read of whole batches from `offset` below `upper_bound`: copied,
/// or as regions of the segment files (`zero_copy`).
fn read_records(
    log: &Log,
    offset: i64,
    max_bytes: usize,
    upper_bound: i64,
    zero_copy: bool,
) -> Result<Records, ErrorCode> {
    Ok(if zero_copy {
        Records::Regions(
            log.read_regions(offset, max_bytes, upper_bound, true)
                .map_err(storage)?
                .regions,
        )
    } else {
        Records::Bytes(
            log.read(offset, max_bytes, upper_bound, true)
                .map_err(storage)?
                .records,
        )
    })
}

/// What the leader does with produced `batches` (validated) given the log's
/// producer state. An idempotent producer's batch must come alone (Kafka's rule:
/// one batch per partition in a request), else `INVALID_RECORD`.
fn sequence_check(states: &ProducerStates, batches: &[u8]) -> Result<SequenceCheck, ErrorCode> {
    let mut headers = batch::split(batches).filter_map(Result::ok).map(|(h, _)| h);
    let Some(first) = headers.next() else {
        return Ok(SequenceCheck::Append);
    };
    let mut idempotent = first.producer_id >= 0;
    let mut alone = true;
    for h in headers {
        alone = false;
        idempotent |= h.producer_id >= 0;
    }
    match (idempotent, alone) {
        (false, _) => Ok(SequenceCheck::Append),
        (true, false) => Err(ErrorCode::InvalidRecord),
        (true, true) => states.check(&first).map_err(|e| {
            tracing::debug!(error = %e, "refusing an idempotent producer's batch");
            match e {
                SequenceError::OutOfOrder { .. } => ErrorCode::OutOfOrderSequenceNumber,
                SequenceError::FencedEpoch { .. } => ErrorCode::InvalidProducerEpoch,
                SequenceError::UnknownProducer { .. } => ErrorCode::UnknownProducerId,
            }
        }),
    }
}

/// A follower's position in its log.
fn position(log: &Log) -> LogPosition {
    LogPosition {
        log_end_offset: log.log_end_offset(),
        latest_epoch: log.latest_epoch(),
        log_start_offset: log.log_start_offset(),
    }
}

/// The core's view of a topic config.
fn replication_config(config: &TopicConfig) -> ReplicationConfig {
    ReplicationConfig {
        min_insync_replicas: config.min_insync_replicas,
        lag_time_max: config.replica_lag_time_max,
        planted: planted_bugs(),
    }
}

/// The rules the simulation undid in this process (none outside it: without
/// the `planted-bugs` feature every switch is off).
fn planted_bugs() -> PlantedBugs {
    use crate::planted::{active, Bug};
    PlantedBugs {
        no_second_caught_up_rule: active(Bug::NoSecondCaughtUpRule),
        no_min_isr_check: active(Bug::NoMinIsrCheck),
    }
}

impl Partition {
    /// Opens (recovering) the partition's log under `log_dir`. The replica has no role
    /// until the controller announces one.
    ///
    /// The directory records the topic id in `partition.metadata` (as Kafka): a
    /// directory written for another topic id is a deleted topic's copy under the
    /// same name, so it is moved aside for deletion and the log starts empty.
    pub fn open(
        log_dir: &Path,
        tp: TopicPartition,
        topic_id: i64,
        local_id: i32,
        config: TopicConfig,
        isr_listener: IsrListener,
    ) -> Result<Partition, LogError> {
        let dir = log_dir.join(tp.dir_name());
        let announced = TopicId::from_wire(topic_id);
        if announced.is_some() {
            match read_topic_id(&dir) {
                Some(found) if !same_topic(announced, TopicId::from_wire(found)) => {
                    let doomed = move_aside(&dir).map_err(|source| LogError::Io {
                        path: dir.clone(),
                        source,
                    })?;
                    tracing::info!(partition = %tp, topic_id, found, dir = %doomed.display(), "a deleted topic's copy under the same name; moved aside");
                    delete_in_background(doomed);
                }
                _ => {}
            }
        }
        let log = Log::open(&dir, config.log.clone())?;
        if topic_id != 0 && read_topic_id(&dir) != Some(topic_id) {
            write_topic_id(&dir, topic_id).map_err(|source| LogError::Io {
                path: dir.join(PARTITION_METADATA_FILE),
                source,
            })?;
        }
        let core = PartitionCore::new(
            local_id,
            log.read_high_watermark(),
            log.log_start_offset(),
            log.log_end_offset(),
            replication_config(&config),
        );
        Ok(Partition {
            tp,
            topic_id,
            isr_listener,
            log_end_offset: AtomicI64::new(core.log_end_offset()),
            high_watermark: AtomicI64::new(core.high_watermark()),
            compression: AtomicU8::new(codec_id(config.compression)),
            log_append_time: AtomicBool::new(config.log_append_time),
            log: RwLock::new(log),
            core: Mutex::new(core),
        })
    }

    /// Executes the effects that belong to the partition (the core's lock is held,
    /// so nothing can run between the decision and these): a new leader epoch is in
    /// the epoch cache before any append under it, the high watermark mirror moves,
    /// committed ISR changes are counted. The rest is the replica manager's.
    fn execute(&self, effects: Effects) -> Effects {
        if let Some(start) = effects.start_epoch {
            if let Err(e) = self
                .log
                .write()
                .assign_epoch(start.epoch, start.start_offset)
            {
                tracing::error!(partition = %self.tp, error = %e, "cannot record the new leader epoch");
            }
        }
        if let Some(hw) = effects.high_watermark {
            self.high_watermark.store(hw, Ordering::Release);
        }
        if let Some((kind, isr)) = &effects.isr_committed {
            (self.isr_listener)(&self.tp, *kind, isr);
        }
        effects
    }

    /// The log end offset (lock-free).
    pub fn log_end_offset(&self) -> i64 {
        self.log_end_offset.load(Ordering::Acquire)
    }

    /// The high watermark (lock-free).
    pub fn high_watermark(&self) -> i64 {
        self.high_watermark.load(Ordering::Acquire)
    }

    /// The log's start offset.
    pub fn log_start_offset(&self) -> i64 {
        self.log.read().log_start_offset()
    }

    /// This replica leads the partition.
    pub fn is_leader(&self) -> bool {
        self.core.lock().is_leader()
    }

    /// The current leader epoch (-1 before the first announcement).
    pub fn leader_epoch(&self) -> i32 {
        self.core.lock().leader_epoch()
    }

    /// (leader id, leader epoch), for error hints.
    pub fn current_leader(&self) -> pb::LeaderIdAndEpoch {
        self.core.lock().current_leader()
    }

    /// The assigned replicas (as last announced).
    pub fn replicas(&self) -> Vec<i32> {
        self.core.lock().replicas().to_vec()
    }

    /// Leader-only figures for the metrics; None when not leader.
    pub fn leader_health(&self) -> Option<LeaderHealth> {
        self.core.lock().leader_health()
    }

    // --- leader: produce ---

    /// Appends producer batches (already validated) as leader.
    pub fn append_as_leader(
        &self,
        batches: &[u8],
        acks: Acks,
        client_epoch: Option<i32>,
        now_ms: i64,
    ) -> Result<(LeaderAppend, Effects), ErrorCode> {
        let mut core = self.core.lock();
        let epoch = core.check_leader_append(acks, client_epoch).inspect_err(|code| {
            if *code == ErrorCode::NotEnoughReplicas {
                tracing::debug!(partition = %self.tp, "refusing acks=all produce: ISR below min.insync.replicas");
            }
        })?;
        let mut log = self.log.write();
        if let SequenceCheck::Duplicate {
            first_offset,
            last_offset,
        } = sequence_check(log.producer_states(), batches)?
        {
            tracing::debug!(partition = %self.tp, first_offset, "duplicate of a batch in the log");
            return Ok((
                LeaderAppend {
                    base_offset: first_offset,
                    last_offset,
                    log_start_offset: log.log_start_offset(),
                    leader_epoch: epoch,
                    duplicate: true,
                },
                Effects::default(),
            ));
        }
        let info = log
            .append_as_leader(batches, epoch, now_ms)
            .map_err(storage)?;
        let leo = log.log_end_offset();
        let log_start_offset = log.log_start_offset();
        drop(log);
        self.log_end_offset.store(leo, Ordering::Release);
        let effects = self.execute(core.on_leader_append(leo));
        Ok((
            LeaderAppend {
                base_offset: info.first_offset,
                last_offset: info.last_offset,
                log_start_offset,
                leader_epoch: epoch,
                duplicate: false,
            },
            effects,
        ))
    }

    /// Producers with state in this replica's log.
    pub fn producer_count(&self) -> usize {
        self.log.read().producer_states().len()
    }

    /// Where an acks=all produce that needs `required_offset` (last offset + 1),
    /// appended under `append_epoch`, stands.
    pub fn check_produce(&self, required_offset: i64, append_epoch: i32) -> ProduceCheck {
        self.core
            .lock()
            .check_produce(required_offset, append_epoch)
    }

    /// Final word on an acks=all produce whose timeout passed.
    pub fn expired_produce_error(&self) -> ErrorCode {
        self.core.lock().expired_produce_error()
    }

    // --- fetch ---

    /// A consumer read: records below the high watermark only. Touches no
    /// replication state. `zero_copy`: the records as file regions.
    pub fn read_for_consumer(
        &self,
        fetch_offset: i64,
        max_bytes: usize,
        client_epoch: Option<i32>,
        allow_follower_read: bool,
        zero_copy: bool,
    ) -> Result<ReadResult, ErrorCode> {
        let (hw, leader_epoch) = {
            let core = self.core.lock();
            let hw = core.consumer_high_watermark(client_epoch, allow_follower_read)?;
            (hw, core.leader_epoch())
        };
        let log = self.log.read();
        let (start, leo) = (log.log_start_offset(), log.log_end_offset());
        let reader = Reader::Consumer { high_watermark: hw };
        let records = match fetch::plan_read(reader, fetch_offset, LogBounds { start, end: leo })? {
            None => Records::default(),
            Some(upper) => read_records(&log, fetch_offset, max_bytes, upper, zero_copy)?,
        };
        Ok(ReadResult {
            records,
            high_watermark: hw,
            log_start_offset: start,
            log_end_offset: leo,
            leader_epoch,
            diverging_epoch: None,
        })
    }

    /// The leader reading its own log up to its log end, in `leader_epoch`
    /// (a group coordinator loading its state: what the last leader appended
    /// survives in the new leader's log, committed or about to be).
    pub fn read_as_leader(
        &self,
        fetch_offset: i64,
        max_bytes: usize,
        leader_epoch: i32,
    ) -> Result<Bytes, ErrorCode> {
        {
            let core = self.core.lock();
            if !core.is_leader() {
                return Err(ErrorCode::NotLeaderOrFollower);
            }
            if core.leader_epoch() != leader_epoch {
                return Err(ErrorCode::FencedLeaderEpoch);
            }
        }
        let log = self.log.read();
        let bounds = LogBounds {
            start: log.log_start_offset(),
            end: log.log_end_offset(),
        };
        match fetch::plan_read(Reader::Replica, fetch_offset, bounds)? {
            None => Ok(Bytes::new()),
            Some(upper) => Ok(log
                .read(fetch_offset, max_bytes, upper, true)
                .map_err(storage)?
                .records),
        }
    }

    /// The replica a consumer in `client_rack` should read from instead of this
    /// leader (KIP-392). None when not leader or nothing better.
    pub fn preferred_read_replica(
        &self,
        client_rack: &str,
        rack_of: impl Fn(i32) -> Option<String>,
    ) -> Option<i32> {
        self.core
            .lock()
            .preferred_read_replica(client_rack, rack_of)
    }

    /// A follower read: records up to the leader's LEO, or the point where the
    /// follower's log diverges. Does not record the follower's progress: see
    /// [`Partition::record_follower_fetch`]. `zero_copy`: the records as file
    /// regions.
    pub fn read_for_follower(
        &self,
        follower_id: i32,
        fetch_offset: i64,
        last_fetched_epoch: Option<i32>,
        client_epoch: Option<i32>,
        max_bytes: usize,
        zero_copy: bool,
    ) -> Result<ReadResult, ErrorCode> {
        let (hw, leader_epoch) = {
            let core = self.core.lock();
            let hw = core.check_follower_read(follower_id, client_epoch)?;
            (hw, core.leader_epoch())
        };
        let log = self.log.read();
        let (start, leo) = (log.log_start_offset(), log.log_end_offset());
        let mut result = ReadResult {
            records: Records::default(),
            high_watermark: hw,
            log_start_offset: start,
            log_end_offset: leo,
            leader_epoch,
            diverging_epoch: None,
        };
        let end_offset_for_epoch = |epoch| {
            log.end_offset_for_epoch(epoch)
                .unwrap_or(EpochEndOffset::UNDEFINED)
        };
        let bounds = LogBounds { start, end: leo };
        match fetch::plan_follower_read(
            fetch_offset,
            last_fetched_epoch,
            end_offset_for_epoch,
            bounds,
        )? {
            FollowerRead::Diverging(d) => result.diverging_epoch = Some(d),
            FollowerRead::Records(None) => {}
            FollowerRead::Records(Some(upper)) => {
                result.records = read_records(&log, fetch_offset, max_bytes, upper, zero_copy)?;
            }
        }
        Ok(result)
    }

    /// Records a follower's fetch offset (its LEO) on the leader: caught-up time, HW,
    /// ISR expansion. If leadership changed since the fetch was read under
    /// `f.request_epoch`, nothing is recorded.
    pub fn record_follower_fetch(&self, now: Instant, f: &FollowerFetch) -> Effects {
        let mut core = self.core.lock();
        let effects = core.on_follower_fetch(now.into_std(), f);
        self.execute(effects)
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
        let target = self
            .core
            .lock()
            .fetch_wait_target(is_follower, allow_follower_read);
        let Some((end, epoch)) = target else {
            return FetchReadiness::Changed;
        };
        core::fetch_readiness(end, epoch, request_epoch, fetch_offset, || {
            self.log.read().bytes_between(fetch_offset, end).ok()
        })
    }

    /// OffsetsForLeaderEpoch: where `epoch` ends in this log.
    pub fn end_offset_for_epoch(
        &self,
        epoch: i32,
        client_epoch: Option<i32>,
        require_leader: bool,
    ) -> Result<EpochEndOffset, ErrorCode> {
        self.core
            .lock()
            .check_epoch_lookup(client_epoch, require_leader)?;
        Ok(self
            .log
            .read()
            .end_offset_for_epoch(epoch)
            .unwrap_or(EpochEndOffset::UNDEFINED))
    }

    /// ListOffsets: -2 earliest, -1 latest (HW for consumers, LEO for replicas),
    /// a timestamp or -3 (the largest timestamp) looked up in the log.
    pub fn list_offset(
        &self,
        timestamp: i64,
        client_epoch: Option<i32>,
        from_replica: bool,
    ) -> Result<ListedOffset, ErrorCode> {
        // A lookup by time reads the log (index, headers, one batch): done
        // under the log's read lock alone, never holding the core's lock, which
        // every produce and follower fetch takes.
        let (log_start, found) = {
            let log = self.log.read();
            let found = match timestamp {
                syncline_proto::MAX_TIMESTAMP => Some(log.offset_of_max_timestamp()),
                t if t >= 0 => Some(log.offset_for_timestamp(t)),
                _ => None,
            };
            (log.log_start_offset(), found)
        };
        let found = found.map(|r| r.map_err(storage));
        self.core
            .lock()
            .list_offset(timestamp, client_epoch, from_replica, log_start, |_| {
                found.unwrap_or(Ok(None))
            })
    }

    // --- leader: ISR ---

    /// The timer: the periodic ISR shrink check, at this partition's own pace.
    pub fn on_tick(&self, now: Instant) -> Effects {
        let effects = self.core.lock().on_tick(now.into_std());
        self.execute(effects)
    }

    /// When this leader's next ISR shrink check is due; None when not leading
    /// (see [`PartitionCore::next_shrink_check`]).
    pub fn next_shrink_check(&self, now: Instant) -> Option<Instant> {
        self.core
            .lock()
            .next_shrink_check(now.into_std())
            .map(Instant::from_std)
    }

    /// The controller answered `sent`, our AlterPartition.
    pub fn on_alter_partition_result(
        &self,
        sent: &IsrProposal,
        result: AlterPartitionResult,
        now: Instant,
    ) -> Effects {
        let mut core = self.core.lock();
        let effects = core.on_alter_partition_result(sent, result, now.into_std());
        self.execute(effects)
    }

    /// The codec the topic's `compression.type` asks produced batches to be
    /// stored in; `None`: as the producer sent them.
    pub fn compression(&self) -> Option<Compression> {
        match self.compression.load(Ordering::Relaxed) {
            PRODUCER_CODEC => None,
            id => Compression::from_id(id).ok(),
        }
    }

    /// The topic's `message.timestamp.type` is `LogAppendTime`: produced
    /// batches are stamped with the leader's append time.
    pub fn log_append_time(&self) -> bool {
        self.log_append_time.load(Ordering::Relaxed)
    }

    // --- role changes ---

    /// Applies the controller's announcement, with the topic's config.
    pub fn apply_partition_state(
        &self,
        ps: &pb::PartitionState,
        config: TopicConfig,
        local_broker_epoch: i64,
        now: Instant,
    ) -> Effects {
        // Announcements rarely change the config: compare under the read lock, so
        // appends are not held up by a write lock for nothing.
        self.compression
            .store(codec_id(config.compression), Ordering::Relaxed);
        self.log_append_time
            .store(config.log_append_time, Ordering::Relaxed);
        let changed = *self.log.read().config() != config.log;
        if changed {
            tracing::info!(partition = %self.tp, config = ?config.log, "log config changed");
            self.log.write().set_config(config.log.clone());
        }
        let mut core = self.core.lock();
        let effects = core.on_leader_and_isr(
            &Announcement::from(ps),
            replication_config(&config),
            local_broker_epoch,
            now.into_std(),
        );
        match effects.role {
            RoleChange::BecameLeader => tracing::info!(
                partition = %self.tp, leader_epoch = ps.leader_epoch, isr = ?ps.isr,
                log_end_offset = core.log_end_offset(), high_watermark = core.high_watermark(),
                "became leader"
            ),
            RoleChange::BecameFollower => tracing::info!(
                partition = %self.tp, leader = ps.leader, leader_epoch = ps.leader_epoch,
                "became follower"
            ),
            RoleChange::BecameOffline => {
                tracing::info!(partition = %self.tp, leader_epoch = ps.leader_epoch, "partition offline")
            }
            RoleChange::Updated | RoleChange::None | RoleChange::Removed => {}
        }
        self.execute(effects)
    }

    /// This broker is no longer a replica (see [`PartitionCore::on_removed`]): it
    /// stops serving, its log is closed and its directory moved aside to
    /// `<topic>-<partition>.<random>-delete` (Kafka's name), for the caller to delete
    /// in the background. Returns the effects and where the directory went.
    pub fn remove(&self) -> (Effects, std::io::Result<std::path::PathBuf>) {
        let mut core = self.core.lock();
        let effects = core.on_removed();
        let effects = self.execute(effects);
        let mut log = self.log.write();
        if let Err(e) = log.close() {
            tracing::warn!(partition = %self.tp, error = %e, "closing the log of a removed replica failed");
        }
        (effects, move_aside(log.dir()))
    }

    // --- follower ---

    /// The follower's position: its log end (the next fetch offset), the
    /// latest leader epoch in its log, and its log start.
    pub fn follower_fetch_position(&self) -> LogPosition {
        position(&self.log.read())
    }

    /// As [`Partition::follower_fetch_position`], or None when the log failed
    /// (see [`Partition::log_failure`]): the fetcher's poll, under one lock.
    pub fn follower_poll_position(&self) -> Option<LogPosition> {
        let log = self.log.read();
        log.failure().is_none().then(|| position(&log))
    }

    /// This replica's own end offset for `epoch` (truncation decisions).
    pub fn local_end_offset_for_epoch(&self, epoch: i32) -> Option<EpochEndOffset> {
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
        let mut core = self.core.lock();
        core.check_follower(leader_epoch)?;
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
        let effects = core.on_follower_append(leader_high_watermark, leo);
        let _ = self.execute(effects);
        Ok(leo)
    }

    /// Truncates the follower's log to `offset` (epoch-based truncation; never below
    /// what the leader confirmed).
    pub fn truncate_to(&self, offset: i64, leader_epoch: i32) -> Result<i64, ErrorCode> {
        let mut core = self.core.lock();
        core.check_follower(leader_epoch)?;
        let mut log = self.log.write();
        let before = log.log_end_offset();
        // Also at or past the log end: the log then drops an epoch that starts
        // there (one this replica led without writing), removing no batch.
        log.truncate_to(offset).map_err(storage)?;
        if offset < before {
            // The fetcher logs the truncation with its reason, at info.
            tracing::debug!(
                partition = %self.tp, from = before, to = log.log_end_offset(),
                "truncated log"
            );
        }
        let leo = log.log_end_offset();
        drop(log);
        self.log_end_offset.store(leo, Ordering::Release);
        let effects = core.on_follower_truncated(leo);
        let _ = self.execute(effects);
        Ok(leo)
    }

    /// The leader's log starts after our LEO: start over, empty, at `offset`.
    pub fn truncate_fully_and_start_at(
        &self,
        offset: i64,
        leader_epoch: i32,
    ) -> Result<(), ErrorCode> {
        let mut core = self.core.lock();
        core.check_follower(leader_epoch)?;
        let mut log = self.log.write();
        log.truncate_fully_and_start_at(offset).map_err(storage)?;
        tracing::info!(
            topic = %self.tp.topic, partition = self.tp.partition,
            reason = "fetch offset below the leader's log start", from = core.log_end_offset(),
            to = offset, leader_epoch, "truncation: log emptied to restart at the leader's log start"
        );
        drop(log);
        self.log_end_offset.store(offset, Ordering::Release);
        let effects = core.on_follower_restarted_at(offset);
        let _ = self.execute(effects);
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

    /// Runs the flush policy (`flush_ms`); returns why the log failed, if it
    /// did (see [`Partition::log_failure`]), found under the same lock, and
    /// whether the log's policy ever fsyncs by time or count.
    pub fn flush_if_due(&self, now_ms: i64) -> (Option<String>, bool) {
        let mut log = self.log.write();
        if let Err(e) = log.flush_if_due(now_ms) {
            tracing::warn!(partition = %self.tp, error = %e, "flush failed");
        }
        (log.failure().map(str::to_string), log.config().flushes())
    }

    /// Runs retention, below the high watermark only, and forgets idempotent
    /// producers silent for longer than `producer_id_expiration_ms`.
    pub fn apply_retention(&self, now_ms: i64, producer_id_expiration_ms: i64) {
        let hw = self.high_watermark();
        let mut log = self.log.write();
        match log.delete_old_segments(now_ms, hw) {
            Ok(info) => tracing::debug!(partition = %self.tp, ?info, "retention"),
            Err(e) => tracing::warn!(partition = %self.tp, error = %e, "retention failed"),
        }
        let expired = log.expire_producers(now_ms, producer_id_expiration_ms);
        if expired > 0 {
            tracing::info!(partition = %self.tp, expired, "idempotent producers expired");
        }
    }

    /// Why the log failed, if it did (see [`Log::failure`]).
    pub fn log_failure(&self) -> Option<String> {
        self.log.read().failure().map(str::to_string)
    }

    /// Checkpoints, flushes and closes the log (clean shutdown): the next start
    /// trusts its files instead of validating them.
    pub fn close(&self) {
        self.checkpoint_high_watermark();
        if let Err(e) = self.log.write().close() {
            tracing::warn!(partition = %self.tp, error = %e, "closing the log failed");
        }
    }

    /// DescribeTopics' leader view; None when not leader.
    pub fn describe(&self, now: Instant) -> Option<pb::PartitionDescription> {
        let core = self.core.lock();
        let log_start = self.log.read().log_start_offset();
        let mut description = core.describe(self.tp.partition, log_start, now.into_std())?;
        description.producer_count = i32::try_from(self.producer_count()).unwrap_or(i32::MAX);
        Some(description)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::BrokerConfig;

    fn open(dir: &Path, topic_id: i64) -> Partition {
        let broker = BrokerConfig::parse(
            "node_id = 1\nprocess_roles = \"broker,controller\"\n\
             controller_quorum_voters = \"1@127.0.0.1:9092\"\n",
        )
        .expect("broker config");
        let config = TopicConfig::resolve(&broker, "t", &Default::default());
        let listener: IsrListener = Arc::new(|_: &TopicPartition, _: IsrChangeKind, _: &[i32]| {});
        Partition::open(
            dir,
            TopicPartition::new("t", 0),
            topic_id,
            1,
            config,
            listener,
        )
        .expect("opens")
    }

    #[test]
    fn a_directory_of_another_topic_id_is_moved_aside_and_the_log_starts_empty() {
        let base = tempfile::tempdir().unwrap();
        let dir = base.path().join("t-0");
        let p = open(base.path(), 5);
        p.close();
        drop(p);
        assert_eq!(read_topic_id(&dir), Some(5));
        std::fs::write(dir.join("marker"), b"old").unwrap();
        // The same topic: its directory is kept.
        open(base.path(), 5).close();
        assert!(dir.join("marker").exists());
        // Unknown topic id (0): kept too.
        open(base.path(), 0).close();
        assert!(dir.join("marker").exists());
        // Another topic id: a deleted topic's copy; moved aside (and, with no
        // runtime here, deleted at once).
        let p = open(base.path(), 7);
        assert_eq!(read_topic_id(&dir), Some(7));
        assert!(!dir.join("marker").exists());
        assert_eq!(p.log_end_offset(), 0);
        let left: Vec<_> = std::fs::read_dir(base.path())
            .unwrap()
            .map(|e| e.unwrap().file_name())
            .collect();
        assert_eq!(left, vec![std::ffi::OsString::from("t-0")]);
    }
}
