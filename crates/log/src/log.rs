//! The partition log: an ordered list of segments (the last one is active and
//! takes appends), the leader-epoch cache, and the checkpoints that let a restart
//! resume without revalidating everything.

use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Mutex, PoisonError};

use bytes::{Bytes, BytesMut};
use syncline_proto::batch::{self, BatchError, BatchHeader, HEADER_LEN};

use crate::checkpoint::{
    self, CLEAN_SHUTDOWN_FILE, HIGH_WATERMARK_FILE, LEADER_EPOCH_FILE, RECOVERY_POINT_FILE,
};
use crate::epoch_cache::{EpochEntry, LeaderEpochCache};
use crate::error::IoContext;
use crate::index::remove_if_exists;
use crate::producer_state::{ProducerStates, SNAPSHOT_SUFFIX};
use crate::recovery::recover_dir;
use crate::region::{FileRegion, RegionRead, Truncations};
use crate::segment::{
    check_header, parse_segment_file, remove_segment_files, segment_file, PendingBatch, Segment,
};
use crate::{LogConfig, LogError};

/// Moves whenever some log of this process may need a periodic flush check: one
/// failed (see [`Log::failure`]), or one was opened or reconfigured with a
/// flush policy that fsyncs by time or count. A broker's periodic walk over its
/// logs can be skipped while this has not moved and its last walk found no log
/// with such a policy: with the default policy (never) an idle broker then
/// visits none of its thousands of logs. Process-wide: a move caused by another
/// broker of the same process (the simulation) only costs a walk that finds
/// nothing.
static ATTENTION: AtomicU64 = AtomicU64::new(0);

/// The current value of the attention counter (see [`ATTENTION`]): read it
/// before a walk, and walk again when it differs.
pub fn attention() -> u64 {
    ATTENTION.load(Ordering::Acquire)
}

fn ask_for_attention() {
    ATTENTION.fetch_add(1, Ordering::AcqRel);
}

/// What an append wrote.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct AppendInfo {
    /// Offset of the first record (the log end offset before the append).
    pub first_offset: i64,
    /// Offset of the last record; `first_offset - 1` when nothing was appended.
    pub last_offset: i64,
    /// Largest record timestamp of the appended batches (-1 when none).
    pub max_timestamp: i64,
    /// Bytes written.
    pub size_bytes: u64,
}

/// What a read returned.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ReadInfo {
    /// Whole batches, exactly as stored.
    pub records: Bytes,
    /// The offset after the last returned batch; the requested offset when
    /// nothing was returned.
    pub next_offset: i64,
}

pub use syncline_proto::TimestampOffset;

/// What a retention pass deleted.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RetentionInfo {
    pub deleted_segments: usize,
    pub deleted_bytes: u64,
    /// The log start offset after the pass.
    pub log_start_offset: i64,
}

/// One partition's log on disk. See the crate documentation for the layout and
/// the guarantees.
pub struct Log {
    dir: PathBuf,
    config: LogConfig,
    /// Ordered by base offset, contiguous, never empty; the last one is active.
    /// Only the active segment may hold unflushed batches.
    segments: Vec<Segment>,
    epochs: LeaderEpochCache,
    /// The epoch cache holds an entry its checkpoint does not: a new leader's
    /// epoch, assigned at the log end before any batch of it. It is written
    /// with the first batch that needs it (or at close), not at once: until
    /// then no batch depends on it, and a new leader of thousands of empty
    /// partitions would otherwise pay two fsyncs for each.
    epochs_unpersisted: bool,
    /// Every batch below this offset is fsynced.
    recovery_point: i64,
    /// The recovery point in the checkpoint file; behind `recovery_point` while both
    /// lie in the active segment (recovery validates whole segments, so moving it
    /// within one would change nothing).
    persisted_recovery_point: i64,
    /// When the oldest append not yet fsynced happened (for `flush_ms`).
    oldest_unflushed_append_ms: Option<i64>,
    /// Set when an I/O failure left the files in a state the log cannot describe.
    failed: Option<String>,
    /// The high watermark the checkpoint file holds (`None`: unknown), under a
    /// lock because `write_high_watermark` takes `&self` and concurrent callers
    /// would share the checkpoint's temporary file. An unchanged value is not
    /// written again: the broker checkpoints every partition every few seconds,
    /// and two fsyncs per idle partition would keep the disk busy (thousands of
    /// partitions saturated it, and the controller quorum's own fsyncs queued
    /// behind them).
    high_watermark_on_disk: Mutex<Option<i64>>,
    /// Idempotent producers' state, folded from every batch in the log.
    producers: ProducerStates,
    /// Counts truncations, for the file regions of reads in flight.
    truncations: Truncations,
}

impl std::fmt::Debug for Log {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Log")
            .field("dir", &self.dir)
            .field("log_start_offset", &self.log_start_offset())
            .field("log_end_offset", &self.log_end_offset())
            .field("recovery_point", &self.recovery_point)
            .field("segments", &self.segments.len())
            .field("failed", &self.failed)
            .finish()
    }
}

impl Log {
    /// Opens the log in `dir`, creating the directory and an empty log at offset 0
    /// when needed, and recovers it (see the crate documentation).
    pub fn open(dir: &Path, config: LogConfig) -> Result<Log, LogError> {
        config.validate()?;
        if config.flushes() {
            ask_for_attention();
        }
        let recovered = recover_dir(dir, &config)?;
        let mut log = Log {
            dir: dir.to_path_buf(),
            config,
            segments: recovered.segments,
            epochs: recovered.epochs,
            epochs_unpersisted: false,
            recovery_point: 0,
            persisted_recovery_point: 0,
            oldest_unflushed_append_ms: None,
            failed: None,
            high_watermark_on_disk: Mutex::new(None),
            producers: ProducerStates::default(),
            truncations: Truncations::default(),
        };
        // No checkpoint file reads as 0, as a file holding 0 would.
        *log.high_watermark_on_disk
            .get_mut()
            .unwrap_or_else(PoisonError::into_inner) =
            checkpoint::read_offset(&log.dir, HIGH_WATERMARK_FILE)
                .ok()
                .map(|hw| hw.unwrap_or(0));
        log.rebuild_producers()?;
        if recovered.epochs_changed {
            log.write_epochs()?;
        }
        // What survived is made durable with its index, so that the recovery point
        // can move to the end and the next crash revalidates only new batches.
        // An empty segment has nothing to make durable (its index is rebuilt,
        // trivially, if its files are missing): a new partition's log costs no
        // fsync here.
        for segment in log.segments.iter_mut().filter(|s| s.size_bytes() > 0) {
            segment.persist_index()?;
            segment.flush()?;
        }
        log.recovery_point = log.log_end_offset();
        log.persisted_recovery_point = log.recovery_point;
        // No checkpoint reads as recovery point 0, as one holding 0 would.
        if recovered.persisted_recovery_point.unwrap_or(0) != log.recovery_point {
            checkpoint::write_offset(&log.dir, RECOVERY_POINT_FILE, log.recovery_point)?;
        }
        if recovered.clean_shutdown {
            // From here on the files change again; a crash must not be mistaken
            // for a clean shutdown.
            remove_if_exists(&log.dir.join(CLEAN_SHUTDOWN_FILE))?;
            checkpoint::sync_dir(&log.dir)?;
        }
        Ok(log)
    }

    /// Idempotent producers' state (Kafka's producer state): what a leader
    /// checks a producer's batch against before appending it.
    pub fn producer_states(&self) -> &ProducerStates {
        &self.producers
    }

    /// Rebuilds the producer state (at start-up and after a truncation): from the
    /// newest producer-state snapshot within the log, written when a segment
    /// rolled or the log closed, and the batch headers after it; from every
    /// header when no snapshot is usable. Snapshots past the log end (left by a
    /// truncation or a crash) or before its start are deleted, and so is one that
    /// does not decode.
    fn rebuild_producers(&mut self) -> Result<(), LogError> {
        let (start, end) = (self.log_start_offset(), self.log_end_offset());
        let mut offsets = self.snapshot_offsets()?;
        offsets.sort_unstable();
        let mut loaded = None;
        while let Some(offset) = offsets.pop() {
            if offset > end || offset < start {
                remove_if_exists(&self.snapshot_path(offset))?;
                continue;
            }
            if loaded.is_some() {
                // Older ones stay: a truncation below the newest loads one of them.
                continue;
            }
            let path = self.snapshot_path(offset);
            let bytes = std::fs::read(&path).ctx(&path)?;
            match ProducerStates::decode_snapshot(&bytes) {
                Ok(states) => loaded = Some((offset, states)),
                Err(e) => {
                    tracing::warn!(path = %path.display(), error = %e, "an unusable producer-state snapshot: rebuilding from the log");
                    remove_if_exists(&path)?;
                }
            }
        }
        let (from, mut states) = loaded.unwrap_or((start, ProducerStates::default()));
        for segment in self.segments.iter().filter(|s| s.next_offset() > from) {
            segment.each_header(|h| {
                if h.base_offset >= from {
                    states.update(h);
                }
            })?;
        }
        states.prune_below(start);
        self.producers = states;
        Ok(())
    }

    fn snapshot_path(&self, offset: i64) -> PathBuf {
        segment_file(&self.dir, offset, SNAPSHOT_SUFFIX)
    }

    /// The offsets of the producer-state snapshots in the log's directory.
    fn snapshot_offsets(&self) -> Result<Vec<i64>, LogError> {
        let mut offsets = Vec::new();
        for entry in std::fs::read_dir(&self.dir).ctx(&self.dir)? {
            let entry = entry.ctx(&self.dir)?;
            if let Some(offset) = entry
                .file_name()
                .to_str()
                .and_then(|name| parse_segment_file(name, SNAPSHOT_SUFFIX))
            {
                offsets.push(offset);
            }
        }
        Ok(offsets)
    }

    /// Writes the producer state as of `offset` (every batch below it, which
    /// must be the log end) to its snapshot file.
    fn write_producer_snapshot(&self, offset: i64) -> Result<(), LogError> {
        let name = format!("{offset:020}{SNAPSHOT_SUFFIX}");
        checkpoint::write_atomic(&self.dir, &name, &self.producers.encode_snapshot())
    }

    /// Deletes the producer-state snapshots for which `remove` holds.
    fn remove_snapshots(&self, remove: impl Fn(i64) -> bool) -> Result<(), LogError> {
        for offset in self.snapshot_offsets()? {
            if remove(offset) {
                remove_if_exists(&self.snapshot_path(offset))?;
            }
        }
        Ok(())
    }

    /// Forgets idempotent producers whose last batch is older than `max_age_ms`
    /// (Kafka's `producer.id.expiration.ms`); returns how many.
    pub fn expire_producers(&mut self, now_ms: i64, max_age_ms: i64) -> usize {
        self.producers.expire(now_ms, max_age_ms)
    }

    /// The directory holding the log.
    pub fn dir(&self) -> &Path {
        &self.dir
    }

    /// The settings in force.
    pub fn config(&self) -> &LogConfig {
        &self.config
    }

    /// Changes the settings (a topic config altered live). Rolling, flushing and
    /// retention follow the new ones from the next append, flush check or
    /// retention pass; segments already written stay as they are.
    pub fn set_config(&mut self, config: LogConfig) {
        self.config = config;
        if self.config.flushes() {
            ask_for_attention();
        }
    }

    /// Why the log is failed (an fsync or the undo of a partial write failed,
    /// so its files may not hold what it believes): it refuses everything
    /// until reopened. `None` while it works.
    pub fn failure(&self) -> Option<&str> {
        self.failed.as_deref()
    }

    /// The offset the next appended record gets (LEO).
    pub fn log_end_offset(&self) -> i64 {
        self.active().next_offset()
    }

    /// The first offset still in the log.
    pub fn log_start_offset(&self) -> i64 {
        self.segments.first().map_or(0, Segment::base_offset)
    }

    /// Bytes of batches in all segments.
    pub fn size_bytes(&self) -> u64 {
        self.segments.iter().map(Segment::size_bytes).sum()
    }

    /// Number of segments (at least one).
    pub fn segment_count(&self) -> usize {
        self.segments.len()
    }

    /// Every batch below this offset is fsynced.
    pub fn recovery_point(&self) -> i64 {
        self.recovery_point
    }

    fn active(&self) -> &Segment {
        // `segments` is never empty: see the field's invariant.
        &self.segments[self.segments.len() - 1]
    }

    fn active_mut(&mut self) -> &mut Segment {
        let last = self.segments.len() - 1;
        &mut self.segments[last]
    }

    /// The segment that holds `offset` (the last one starting at or before it).
    fn segment_index(&self, offset: i64) -> usize {
        self.segments
            .partition_point(|s| s.base_offset() <= offset)
            .saturating_sub(1)
    }

    fn check_failed(&self) -> Result<(), LogError> {
        match &self.failed {
            Some(reason) => Err(LogError::Failed(reason.clone())),
            None => Ok(()),
        }
    }

    /// Marks the log failed: the files may no longer match what it believes.
    fn latch(&mut self, error: &LogError) {
        if self.failed.is_none() {
            tracing::error!(dir = %self.dir.display(), %error, "log failed; it must be reopened");
            self.failed = Some(error.to_string());
            ask_for_attention();
        }
    }

    /// Passes `result` through, marking the log failed on error.
    fn fatal<T>(&mut self, result: Result<T, LogError>) -> Result<T, LogError> {
        if let Err(e) = &result {
            self.latch(e);
        }
        result
    }

    // --- appends ---

    /// Leader append: `batches` holds one or more whole batches (validated by the
    /// broker). Each gets consecutive offsets from the log end and the leader's
    /// `leader_epoch`; the stamp is written in place of the first 17 bytes and the
    /// rest is written untouched. A new epoch is recorded in the epoch cache first.
    /// Segments roll by size and age; the flush policy is applied after the write.
    /// On error nothing was appended. An empty `batches` appends nothing.
    pub fn append_as_leader(
        &mut self,
        batches: &[u8],
        leader_epoch: i32,
        now_ms: i64,
    ) -> Result<AppendInfo, LogError> {
        self.check_failed()?;
        let log_end_offset = self.log_end_offset();
        if leader_epoch < 0 {
            return Err(LogError::InvalidEpochEntry {
                epoch: leader_epoch,
                start_offset: log_end_offset,
            });
        }
        if let Some(latest_epoch) = self.epochs.latest_epoch() {
            if leader_epoch < latest_epoch {
                return Err(LogError::StaleLeaderEpoch {
                    epoch: leader_epoch,
                    latest_epoch,
                });
            }
        }
        let mut pending = Vec::new();
        let mut next_offset = log_end_offset;
        for item in batch::split(batches) {
            let (header, bytes) = item?;
            self.check_batch_size(bytes.len())?;
            let mut stamped = header;
            stamped.base_offset = next_offset;
            stamped.partition_leader_epoch = leader_epoch;
            check_header(&stamped).map_err(BatchError::BadRecords)?;
            next_offset = stamped.next_offset();
            pending.push(PendingBatch {
                header: stamped,
                bytes,
                stamp: Some(batch::stamped_prefix(
                    bytes,
                    stamped.base_offset,
                    leader_epoch,
                )),
            });
        }
        if pending.is_empty() {
            return Ok(nothing_appended(log_end_offset));
        }
        if self.epochs.assign(leader_epoch, log_end_offset)? || self.epochs_unpersisted {
            let written = self.write_epochs();
            self.fatal(written)?;
        }
        self.write(&pending, now_ms)
    }

    /// Follower append: `batches` arrive stamped by the leader. The first must start
    /// at the log end offset (else [`LogError::OffsetMismatch`]) and each next one
    /// right after the previous (else [`LogError::NonMonotonicOffset`]); CRCs are
    /// verified. A batch whose epoch is newer than the cache's latest is recorded
    /// in the epoch cache. On error nothing was appended.
    pub fn append_as_follower(
        &mut self,
        batches: &[u8],
        now_ms: i64,
    ) -> Result<AppendInfo, LogError> {
        self.check_failed()?;
        let log_end_offset = self.log_end_offset();
        let mut pending = Vec::new();
        let mut expected = log_end_offset;
        for item in batch::split(batches) {
            let (_, bytes) = item?;
            let header = batch::verify_crc(bytes)?;
            check_header(&header).map_err(BatchError::BadRecords)?;
            if header.base_offset != expected {
                return Err(if pending.is_empty() {
                    LogError::OffsetMismatch {
                        expected,
                        actual: header.base_offset,
                    }
                } else {
                    LogError::NonMonotonicOffset {
                        expected,
                        actual: header.base_offset,
                    }
                });
            }
            self.check_batch_size(bytes.len())?;
            expected = header.next_offset();
            pending.push(PendingBatch {
                header,
                bytes,
                stamp: None,
            });
        }
        if pending.is_empty() {
            return Ok(nothing_appended(log_end_offset));
        }
        let mut epochs_changed = false;
        for b in &pending {
            let epoch = b.header.partition_leader_epoch;
            if epoch >= 0
                && self
                    .epochs
                    .latest_epoch()
                    .is_none_or(|latest| epoch > latest)
            {
                epochs_changed |= self.epochs.assign(epoch, b.header.base_offset)?;
            }
        }
        if epochs_changed || self.epochs_unpersisted {
            let written = self.write_epochs();
            self.fatal(written)?;
        }
        self.write(&pending, now_ms)
    }

    fn check_batch_size(&self, batch_bytes: usize) -> Result<(), LogError> {
        if batch_bytes as u64 > self.config.segment_bytes {
            return Err(LogError::BatchTooLarge {
                batch_bytes,
                segment_bytes: self.config.segment_bytes,
            });
        }
        Ok(())
    }

    /// Writes checked batches, rolling as needed; undoes a partial append on error.
    fn write(&mut self, pending: &[PendingBatch<'_>], now_ms: i64) -> Result<AppendInfo, LogError> {
        let log_end_before = self.log_end_offset();
        if let Err(e) = self.write_runs(pending) {
            if let LogError::Failed(_) = e {
                self.latch(&e);
            } else if self.failed.is_none() && self.log_end_offset() > log_end_before {
                // Batches of this append reached an earlier segment before a roll
                // or a later write failed: an append is all or nothing.
                if let Err(undo) = self.truncate_inner(log_end_before) {
                    self.latch(&undo);
                }
            }
            return Err(e);
        }
        self.oldest_unflushed_append_ms.get_or_insert(now_ms);
        for b in pending {
            self.producers.update(&b.header);
        }
        let info = AppendInfo {
            first_offset: log_end_before,
            last_offset: self.log_end_offset() - 1,
            max_timestamp: pending
                .iter()
                .map(|b| b.header.max_timestamp)
                .max()
                .unwrap_or(-1),
            size_bytes: pending.iter().map(|b| b.bytes.len() as u64).sum(),
        };
        if self.flush_due(now_ms) {
            self.flush()?;
        }
        Ok(info)
    }

    /// Splits `pending` into runs that fit the active segment, rolling between them.
    fn write_runs(&mut self, pending: &[PendingBatch<'_>]) -> Result<(), LogError> {
        let mut start = 0;
        while start < pending.len() {
            if self.needs_roll(0, None, &pending[start].header) {
                self.roll(pending[start].header.base_offset)?;
            }
            let mut end = start + 1;
            let mut run_bytes = pending[start].bytes.len() as u64;
            while end < pending.len()
                && !self.needs_roll(
                    run_bytes,
                    Some(&pending[start].header),
                    &pending[end].header,
                )
            {
                run_bytes += pending[end].bytes.len() as u64;
                end += 1;
            }
            let index_interval_bytes = self.config.index_interval_bytes;
            self.active_mut()
                .append(&pending[start..end], index_interval_bytes)?;
            start = end;
        }
        Ok(())
    }

    /// Whether `next` must start a new segment, once `run_bytes` more bytes (a run
    /// starting with `run_first`) are in the active segment.
    fn needs_roll(
        &self,
        run_bytes: u64,
        run_first: Option<&BatchHeader>,
        next: &BatchHeader,
    ) -> bool {
        let active = self.active();
        let size = active.size_bytes() + run_bytes;
        if size == 0 {
            return false;
        }
        let full = size + next.total_len() as u64 > self.config.segment_bytes;
        // Index entries hold offsets relative to the segment base in 32 bits.
        let offsets_full = next.last_offset() - active.base_offset() > i64::from(u32::MAX);
        let first_timestamp = if active.size_bytes() > 0 {
            active.first_batch_timestamp()
        } else {
            run_first.map(|h| h.max_timestamp).filter(|&ts| ts >= 0)
        };
        // Age is measured on record timestamps, as Kafka does, so that replicas
        // roll at the same batches whatever their clocks.
        let too_old = match (self.config.segment_ms, first_timestamp) {
            (Some(segment_ms), Some(first)) if next.max_timestamp >= 0 => {
                let age_ms = next.max_timestamp.saturating_sub(first);
                age_ms > i64::try_from(segment_ms).unwrap_or(i64::MAX)
            }
            _ => false,
        };
        full || offsets_full || too_old
    }

    /// Starts a new active segment at `base_offset`.
    fn roll(&mut self, base_offset: i64) -> Result<(), LogError> {
        // The outgoing segment becomes durable with its index before the new one
        // exists, so that recovery after a crash starts at the new segment.
        self.active_mut().persist_index()?;
        let flushed = self.active_mut().flush();
        self.fatal(flushed)?;
        let segment = Segment::create(&self.dir, base_offset)?;
        self.segments.push(segment);
        // (write_atomic syncs the directory, the new segment's entry with it.)
        self.write_producer_snapshot(base_offset)?;
        self.recovery_point = base_offset;
        self.persist_recovery_point()
    }

    // --- flushing ---

    /// fsyncs every batch and moves the recovery point to the log end.
    pub fn flush(&mut self) -> Result<(), LogError> {
        self.check_failed()?;
        let mut flushed = Ok(());
        for segment in &mut self.segments {
            flushed = flushed.and_then(|()| segment.flush());
        }
        // After a failed fsync the kernel may have dropped the dirty pages: what
        // is on disk is unknown until recovery reads it back.
        self.fatal(flushed)?;
        self.recovery_point = self.log_end_offset();
        self.oldest_unflushed_append_ms = None;
        self.persist_recovery_point()
    }

    /// Flushes when the flush policy says so (`flush_ms` since the oldest
    /// unflushed append, or `flush_messages` unflushed offsets). For the broker's
    /// periodic flusher; returns whether it flushed.
    pub fn flush_if_due(&mut self, now_ms: i64) -> Result<bool, LogError> {
        self.check_failed()?;
        if !self.flush_due(now_ms) {
            return Ok(false);
        }
        self.flush()?;
        Ok(true)
    }

    fn flush_due(&self, now_ms: i64) -> bool {
        let unflushed = self.log_end_offset() - self.recovery_point;
        let by_count =
            u64::try_from(unflushed).is_ok_and(|n| n > 0 && n >= self.config.flush_messages);
        let by_time = self.oldest_unflushed_append_ms.is_some_and(|since| {
            u64::try_from(now_ms.saturating_sub(since)).is_ok_and(|age| age >= self.config.flush_ms)
        });
        by_count || by_time
    }

    /// Writes the recovery point when the checkpoint is above it or in an older
    /// segment than the active one.
    fn persist_recovery_point(&mut self) -> Result<(), LogError> {
        let persisted = self.persisted_recovery_point;
        if persisted <= self.recovery_point && persisted >= self.active().base_offset() {
            return Ok(());
        }
        checkpoint::write_offset(&self.dir, RECOVERY_POINT_FILE, self.recovery_point)?;
        self.persisted_recovery_point = self.recovery_point;
        Ok(())
    }

    // --- reads ---

    /// Reads whole batches, starting with the one that holds `offset`, up to
    /// `max_bytes` in total, never including a batch whose last offset is at or
    /// beyond `upper_bound` (the high watermark for consumers, the log end for
    /// followers). With `min_one_batch`, a first batch larger than `max_bytes` is
    /// returned whole, so that a large batch cannot stall a reader. An `offset` at
    /// or above `upper_bound` (up to the log end) reads nothing; one below the log
    /// start or above the log end is [`LogError::OffsetOutOfRange`].
    pub fn read(
        &self,
        offset: i64,
        max_bytes: usize,
        upper_bound: i64,
        min_one_batch: bool,
    ) -> Result<ReadInfo, LogError> {
        let mut records = BytesMut::new();
        let next_offset =
            self.walk_batches(offset, max_bytes, upper_bound, min_one_batch, |span| {
                let start = records.len();
                records.resize(start + span.len as usize, 0);
                span.segment
                    .read_exact_at(&mut records[start..], span.position)?;
                let walk = whole_batches(
                    span.segment,
                    span.position,
                    &records[start..],
                    span.first_offset,
                    span.upper_bound,
                    span.cut,
                )?;
                records.truncate(start + walk.used_bytes);
                Ok(walk)
            })?;
        Ok(ReadInfo {
            records: records.freeze(),
            next_offset,
        })
    }

    /// What [`Log::read`] reads, with the same bounds (`upper_bound`,
    /// `max_bytes`, `min_one_batch`, whole batches only), as regions of the
    /// segment files instead of copied bytes: only batch headers are read, to
    /// find where the batches end. The regions stay valid until the log is
    /// truncated ([`FileRegion::check`]).
    pub fn read_regions(
        &self,
        offset: i64,
        max_bytes: usize,
        upper_bound: i64,
        min_one_batch: bool,
    ) -> Result<RegionRead, LogError> {
        let mut regions = Vec::new();
        let next_offset =
            self.walk_batches(offset, max_bytes, upper_bound, min_one_batch, |span| {
                let walk = whole_batch_headers(
                    span.segment,
                    span.position,
                    span.len,
                    span.first_offset,
                    span.upper_bound,
                    span.cut,
                )?;
                if walk.used_bytes > 0 {
                    regions.push(FileRegion::new(
                        span.segment.shared_file().clone(),
                        span.position,
                        walk.used_bytes as u64,
                        &self.truncations,
                    ));
                }
                Ok(walk)
            })?;
        Ok(RegionRead {
            regions,
            next_offset,
        })
    }

    /// The batch walk [`Log::read`] and [`Log::read_regions`] share: from the
    /// batch holding `offset`, segment by segment, the span of each segment that
    /// may hold what is asked for (within `max_bytes` in all, but the whole first
    /// batch with `min_one_batch`). `take` reads or maps the span and says which
    /// whole batches below `upper_bound` it holds. Returns the offset after the
    /// last batch taken (`offset` when none).
    fn walk_batches(
        &self,
        offset: i64,
        max_bytes: usize,
        upper_bound: i64,
        min_one_batch: bool,
        mut take: impl FnMut(Span<'_>) -> Result<Walk, LogError>,
    ) -> Result<i64, LogError> {
        self.check_failed()?;
        let (log_start_offset, log_end_offset) = (self.log_start_offset(), self.log_end_offset());
        if offset < log_start_offset || offset > log_end_offset {
            return Err(LogError::OffsetOutOfRange {
                offset,
                log_start_offset,
                log_end_offset,
            });
        }
        let upper_bound = upper_bound.min(log_end_offset);
        let mut used = 0u64;
        // Base offset of the next batch to take, once the first one is found.
        let mut expected: Option<i64> = None;
        let first_segment = if offset < upper_bound {
            self.segment_index(offset)
        } else {
            self.segments.len()
        };
        for segment in &self.segments[first_segment..] {
            let (position, first_len) = match expected {
                None => match segment.locate(offset)? {
                    Some((position, header)) => {
                        expected = Some(header.base_offset);
                        (position, header.total_len() as u64)
                    }
                    None => continue,
                },
                Some(next) if next == segment.base_offset() => (0, 0),
                Some(next) => {
                    return Err(LogError::Corrupt {
                        path: segment.path().to_path_buf(),
                        position: 0,
                        reason: format!(
                            "segment starts at offset {} where {next} was expected",
                            segment.base_offset()
                        ),
                    })
                }
            };
            let available = segment.size_bytes() - position;
            let mut want = (max_bytes as u64).saturating_sub(used).min(available);
            if used == 0 && min_one_batch {
                want = want.max(first_len).min(available);
            }
            if want < HEADER_LEN as u64 {
                break;
            }
            // Less than the rest of the segment is taken: the last batch may be cut.
            let cut = want < available;
            let walk = take(Span {
                segment,
                position,
                len: want,
                first_offset: expected.unwrap_or(offset),
                upper_bound,
                cut,
            })?;
            used += walk.used_bytes as u64;
            expected = Some(walk.next_offset);
            if walk.stopped || cut {
                break;
            }
        }
        Ok(if used == 0 {
            offset
        } else {
            expected.unwrap_or(offset)
        })
    }

    /// ListOffsets by timestamp, as Kafka answers it: the first record (in offset
    /// order) whose timestamp is at or after `target`, found from the segments'
    /// max timestamps, their time indexes and a scan of the batch headers after
    /// the index entry; its batch's records are read only for the batch found.
    /// `None` when no record is that recent.
    pub fn offset_for_timestamp(&self, target: i64) -> Result<Option<TimestampOffset>, LogError> {
        self.check_failed()?;
        for segment in &self.segments {
            let Some(mut position) = segment.timestamp_scan_start(target) else {
                continue;
            };
            let mut headers = segment.headers();
            while position < segment.size_bytes() {
                let header = headers.header_at(position)?;
                if header.max_timestamp >= target {
                    if let Some(found) =
                        first_record_at_or_after(segment, position, &header, target)?
                    {
                        return Ok(Some(found));
                    }
                }
                position += header.total_len() as u64;
            }
        }
        Ok(None)
    }

    /// ListOffsets' -3 (KIP-734): the first record with the log's largest
    /// timestamp; `None` when no batch has a timestamp.
    pub fn offset_of_max_timestamp(&self) -> Result<Option<TimestampOffset>, LogError> {
        let max = self.segments.iter().map(Segment::max_timestamp).max();
        match max {
            Some(max) if max >= 0 => self.offset_for_timestamp(max),
            _ => Ok(None),
        }
    }

    /// Bytes of the whole batches a read from `from` bounded by `to` could return
    /// (from the batch holding `from` to the last batch ending before `to`), found
    /// from index positions and a few headers. For delayed fetches deciding whether
    /// `min_bytes` are available. Offsets are clamped to the log.
    pub fn bytes_between(&self, from: i64, to: i64) -> Result<u64, LogError> {
        self.check_failed()?;
        let from = from.max(self.log_start_offset());
        let to = to.min(self.log_end_offset());
        if from >= to {
            return Ok(0);
        }
        let (first, first_position) = self.position_of(from)?;
        let (last, last_position) = self.position_of(to)?;
        if first == last {
            return Ok(last_position - first_position);
        }
        let middle: u64 = self.segments[first + 1..last]
            .iter()
            .map(Segment::size_bytes)
            .sum();
        Ok(self.segments[first].size_bytes() - first_position + middle + last_position)
    }

    /// Where the batch holding `offset` starts: (segment, position); the end of
    /// the log for the log end offset.
    fn position_of(&self, offset: i64) -> Result<(usize, u64), LogError> {
        let i = self.segment_index(offset);
        let segment = &self.segments[i];
        Ok(match segment.locate(offset)? {
            Some((position, _)) => (i, position),
            None => (i, segment.size_bytes()),
        })
    }

    // --- truncation ---

    /// Removes every batch that holds an offset at or after `offset`: a batch that
    /// holds `offset` goes too, and the log end becomes its base offset. No batch
    /// goes when `offset` is at or past the log end; below the log start it is
    /// [`Log::truncate_fully_and_start_at`]. The epoch cache is truncated to the
    /// new log end, also when no batch went: an epoch this replica started as a
    /// leader and wrote nothing in, before another leader was elected, starts at
    /// the log end, and the leader has never heard of it (as Kafka's
    /// `UnifiedLog.truncateTo`). Kept, it would be this follower's latest epoch
    /// for ever, and each round of epoch truncation would ask about it again.
    /// For follower truncation after a leader change.
    pub fn truncate_to(&mut self, offset: i64) -> Result<(), LogError> {
        self.check_failed()?;
        if offset < 0 {
            return Err(LogError::InvalidOffset(offset));
        }
        if offset >= self.log_end_offset() {
            if self.epochs.truncate_from_end(self.log_end_offset()) {
                let written = self.write_epochs();
                self.fatal(written)?;
            }
            return Ok(());
        }
        if offset <= self.log_start_offset() {
            return self.truncate_fully_and_start_at(offset);
        }
        let truncated = self.truncate_inner(offset);
        self.fatal(truncated)
    }

    fn truncate_inner(&mut self, offset: i64) -> Result<(), LogError> {
        // Before any file changes: regions read until now must not be sent.
        self.truncations.bump();
        let i = self.segment_index(offset);
        let (position, new_end) = match self.segments[i].locate(offset)? {
            Some((position, header)) => (position, header.base_offset),
            None => (
                self.segments[i].size_bytes(),
                self.segments[i].next_offset(),
            ),
        };
        // Lowered on disk first: if the truncation is interrupted, recovery
        // revalidates every segment it touched.
        self.recovery_point = self.recovery_point.min(new_end);
        if self.persisted_recovery_point > self.recovery_point {
            checkpoint::write_offset(&self.dir, RECOVERY_POINT_FILE, self.recovery_point)?;
            self.persisted_recovery_point = self.recovery_point;
        }
        let removed = self.segments.split_off(i + 1);
        if !removed.is_empty() {
            // Newest first: a crash part-way leaves a contiguous log.
            for segment in removed.into_iter().rev() {
                segment.delete()?;
            }
            checkpoint::sync_dir(&self.dir)?;
        }
        self.segments[i].truncate(position, new_end)?;
        self.remove_snapshots(|at| at > new_end)?;
        if self.epochs.truncate_from_end(new_end) {
            self.write_epochs()?;
        }
        // As it was before the removed batches (KIP-101: a truncated batch is not
        // a duplicate, its producer's next sequence is again the one it had).
        self.rebuild_producers()?;
        if self.recovery_point >= new_end {
            self.oldest_unflushed_append_ms = None;
        }
        Ok(())
    }

    /// Deletes every batch and restarts the log, empty, at `offset`; the epoch
    /// cache is cleared. For a follower whose fetch offset fell below the leader's
    /// log start. (A crash part-way leaves an empty log or a prefix of the old one,
    /// both behind the leader's log start, so the follower resets again.)
    pub fn truncate_fully_and_start_at(&mut self, offset: i64) -> Result<(), LogError> {
        self.check_failed()?;
        if offset < 0 {
            return Err(LogError::InvalidOffset(offset));
        }
        let restarted = self.restart_at(offset);
        self.fatal(restarted)
    }

    fn restart_at(&mut self, offset: i64) -> Result<(), LogError> {
        self.truncations.bump();
        for segment in self.segments.iter().rev() {
            remove_segment_files(&self.dir, segment.base_offset())?;
        }
        self.remove_snapshots(|_| true)?;
        checkpoint::sync_dir(&self.dir)?;
        let segment = Segment::create(&self.dir, offset)?;
        self.segments = vec![segment];
        checkpoint::sync_dir(&self.dir)?;
        if self.epochs.clear() {
            self.write_epochs()?;
        }
        self.producers = ProducerStates::default();
        self.recovery_point = offset;
        self.oldest_unflushed_append_ms = None;
        checkpoint::write_offset(&self.dir, RECOVERY_POINT_FILE, offset)?;
        self.persisted_recovery_point = offset;
        Ok(())
    }

    // --- retention ---

    /// Deletes the oldest segments, never the active one nor one holding an offset
    /// at or above `high_watermark`, while either the segment's newest record is
    /// more than `retention_ms` older than `now_ms`, or the log without it is still
    /// at least `retention_bytes` large (Kafka's rules). Advances the log start and
    /// trims the epoch cache from the start.
    pub fn delete_old_segments(
        &mut self,
        now_ms: i64,
        high_watermark: i64,
    ) -> Result<RetentionInfo, LogError> {
        self.check_failed()?;
        let (retention_ms, retention_bytes) =
            (self.config.retention_ms, self.config.retention_bytes);
        let mut remaining_bytes = self.size_bytes();
        let mut count = 0;
        while count + 1 < self.segments.len() {
            let segment = &self.segments[count];
            if segment.next_offset() > high_watermark {
                break;
            }
            let expired = retention_ms >= 0
                && now_ms.saturating_sub(segment.largest_timestamp_ms()?) > retention_ms;
            let oversized = u64::try_from(retention_bytes)
                .is_ok_and(|limit| remaining_bytes - segment.size_bytes() >= limit);
            if !(expired || oversized) {
                break;
            }
            remaining_bytes -= segment.size_bytes();
            count += 1;
        }
        let mut info = RetentionInfo {
            deleted_segments: count,
            deleted_bytes: 0,
            log_start_offset: self.log_start_offset(),
        };
        if count == 0 {
            return Ok(info);
        }
        let removed: Vec<Segment> = self.segments.drain(..count).collect();
        info.deleted_bytes = removed.iter().map(Segment::size_bytes).sum();
        info.log_start_offset = self.log_start_offset();
        let deleted = self.remove_oldest(removed);
        self.fatal(deleted)?;
        Ok(info)
    }

    fn remove_oldest(&mut self, removed: Vec<Segment>) -> Result<(), LogError> {
        // Oldest first: a crash part-way leaves a contiguous log.
        for segment in removed {
            segment.delete()?;
        }
        checkpoint::sync_dir(&self.dir)?;
        if self.epochs.truncate_from_start(self.log_start_offset()) {
            self.write_epochs()?;
        }
        self.producers.prune_below(self.log_start_offset());
        let start = self.log_start_offset();
        self.remove_snapshots(|at| at < start)
    }

    // --- leader epochs ---

    /// Records that leader `epoch` starts at `start_offset` (a new leader calls it
    /// with its log end offset). See [`LeaderEpochCache::assign`].
    pub fn assign_epoch(&mut self, epoch: i32, start_offset: i64) -> Result<(), LogError> {
        self.check_failed()?;
        if start_offset > self.log_end_offset() {
            return Err(LogError::InvalidEpochEntry {
                epoch,
                start_offset,
            });
        }
        if self.epochs.assign(epoch, start_offset)? {
            if start_offset == self.log_end_offset() {
                self.epochs_unpersisted = true;
            } else {
                let written = self.write_epochs();
                self.fatal(written)?;
            }
        }
        Ok(())
    }

    /// The newest leader epoch in the cache.
    pub fn latest_epoch(&self) -> Option<i32> {
        self.epochs.latest_epoch()
    }

    /// The first offset of `epoch`, if the cache holds it.
    pub fn epoch_start_offset(&self, epoch: i32) -> Option<i64> {
        self.epochs.start_offset(epoch)
    }

    /// Where `epoch` ends in this log, for OffsetsForLeaderEpoch; `None` is
    /// UNDEFINED. See [`LeaderEpochCache::end_offset_for`].
    pub fn end_offset_for_epoch(&self, epoch: i32) -> Option<syncline_proto::EpochEndOffset> {
        self.epochs
            .end_offset_for(epoch, self.log_end_offset())
            .map(|(epoch, end_offset)| syncline_proto::EpochEndOffset { epoch, end_offset })
    }

    /// The epoch cache's entries, oldest first.
    pub fn epoch_entries(&self) -> Vec<EpochEntry> {
        self.epochs.entries().to_vec()
    }

    fn write_epochs(&mut self) -> Result<(), LogError> {
        checkpoint::write_atomic(
            &self.dir,
            LEADER_EPOCH_FILE,
            self.epochs.to_checkpoint().as_bytes(),
        )?;
        self.epochs_unpersisted = false;
        Ok(())
    }

    // --- checkpoints and shutdown ---

    /// Checkpoints the high watermark (written periodically by the broker).
    pub fn write_high_watermark(&self, high_watermark: i64) -> Result<(), LogError> {
        self.check_failed()?;
        let mut on_disk = self
            .high_watermark_on_disk
            .lock()
            .unwrap_or_else(PoisonError::into_inner);
        if *on_disk == Some(high_watermark) {
            return Ok(());
        }
        // Unknown until the write succeeds: a failed write may have left either.
        *on_disk = None;
        checkpoint::write_offset(&self.dir, HIGH_WATERMARK_FILE, high_watermark)?;
        *on_disk = Some(high_watermark);
        Ok(())
    }

    /// The checkpointed high watermark, clamped to the log: a crash may have taken
    /// the tail it pointed into, and a high watermark must never exceed the log end.
    pub fn read_high_watermark(&self) -> Option<i64> {
        match checkpoint::read_offset(&self.dir, HIGH_WATERMARK_FILE) {
            Ok(hw) => hw.map(|hw| hw.clamp(self.log_start_offset(), self.log_end_offset())),
            Err(error) => {
                tracing::warn!(dir = %self.dir.display(), %error, "cannot read the high-watermark checkpoint");
                None
            }
        }
    }

    /// Flushes everything and marks a clean shutdown, so that the next open trusts
    /// the files instead of validating the active segment. Dropping a `Log` without
    /// closing it is a crash, as far as the files are concerned. A closed log refuses
    /// every later operation (the marker would otherwise lie).
    pub fn close(&mut self) -> Result<(), LogError> {
        self.flush()?;
        if self.epochs_unpersisted {
            self.write_epochs()?;
        }
        for segment in &mut self.segments {
            segment.persist_index()?;
        }
        self.write_producer_snapshot(self.log_end_offset())?;
        checkpoint::write_atomic(&self.dir, CLEAN_SHUTDOWN_FILE, b"")?;
        self.failed = Some("the log was closed".to_string());
        Ok(())
    }
}

/// The whole batches at the start of a chunk read for `Log::read`.
/// A span of one segment that [`Log::walk_batches`] hands to its reader.
struct Span<'a> {
    segment: &'a Segment,
    position: u64,
    len: u64,
    /// The base offset of the first batch the span must start with.
    first_offset: i64,
    upper_bound: i64,
    /// The span ends before the segment does: its last batch may be cut.
    cut: bool,
}

struct Walk {
    used_bytes: usize,
    /// The offset after the last whole batch.
    next_offset: i64,
    /// A batch reaching the upper bound, or cut by the end of the chunk, was found.
    stopped: bool,
}

/// Walks the batches of `chunk`, read from `position` in `segment`, the first
/// starting at `first_offset`; `cut` says the chunk ends before the segment does.
fn whole_batches(
    segment: &Segment,
    position: u64,
    chunk: &[u8],
    first_offset: i64,
    upper_bound: i64,
    cut: bool,
) -> Result<Walk, LogError> {
    let mut walk = Walk {
        used_bytes: 0,
        next_offset: first_offset,
        stopped: false,
    };
    while walk.used_bytes < chunk.len() {
        let rest = &chunk[walk.used_bytes..];
        let corrupt = |reason: String| LogError::Corrupt {
            path: segment.path().to_path_buf(),
            position: position + walk.used_bytes as u64,
            reason,
        };
        if rest.len() < HEADER_LEN && cut {
            walk.stopped = true;
            break;
        }
        let header = BatchHeader::parse(rest).map_err(|e| corrupt(e.to_string()))?;
        check_header(&header).map_err(|e| corrupt(e.to_string()))?;
        if header.base_offset != walk.next_offset {
            return Err(corrupt(format!(
                "batch at offset {} where {} was expected",
                header.base_offset, walk.next_offset
            )));
        }
        if header.total_len() > rest.len() {
            if cut {
                walk.stopped = true;
                break;
            }
            return Err(corrupt("batch runs past the segment end".into()));
        }
        if header.next_offset() > upper_bound {
            walk.stopped = true;
            break;
        }
        walk.used_bytes += header.total_len();
        walk.next_offset = header.next_offset();
    }
    Ok(walk)
}

/// [`whole_batches`] over the `len` bytes of `segment` from `position`,
/// reading only the batch headers.
fn whole_batch_headers(
    segment: &Segment,
    position: u64,
    len: u64,
    first_offset: i64,
    upper_bound: i64,
    cut: bool,
) -> Result<Walk, LogError> {
    let mut walk = Walk {
        used_bytes: 0,
        next_offset: first_offset,
        stopped: false,
    };
    let mut headers = segment.headers();
    while (walk.used_bytes as u64) < len {
        let at = position + walk.used_bytes as u64;
        let rest = len - walk.used_bytes as u64;
        if rest < HEADER_LEN as u64 && cut {
            walk.stopped = true;
            break;
        }
        let header = headers.header_at(at)?;
        if header.base_offset != walk.next_offset {
            return Err(LogError::Corrupt {
                path: segment.path().to_path_buf(),
                position: at,
                reason: format!(
                    "batch at offset {} where {} was expected",
                    header.base_offset, walk.next_offset
                ),
            });
        }
        if header.total_len() as u64 > rest {
            if cut {
                walk.stopped = true;
                break;
            }
            return Err(LogError::Corrupt {
                path: segment.path().to_path_buf(),
                position: at,
                reason: "batch runs past the segment end".into(),
            });
        }
        if header.next_offset() > upper_bound {
            walk.stopped = true;
            break;
        }
        walk.used_bytes += header.total_len();
        walk.next_offset = header.next_offset();
    }
    Ok(walk)
}

fn nothing_appended(log_end_offset: i64) -> AppendInfo {
    AppendInfo {
        first_offset: log_end_offset,
        last_offset: log_end_offset - 1,
        max_timestamp: -1,
        size_bytes: 0,
    }
}

/// The first record of the batch at `position` whose timestamp is at or after
/// `target` (every record of a LogAppendTime batch has its max timestamp).
fn first_record_at_or_after(
    segment: &Segment,
    position: u64,
    header: &BatchHeader,
    target: i64,
) -> Result<Option<TimestampOffset>, LogError> {
    let found = |offset, timestamp| TimestampOffset {
        offset,
        timestamp,
        leader_epoch: header.partition_leader_epoch,
    };
    if header.is_log_append_time() {
        return Ok(Some(found(header.base_offset, header.max_timestamp)));
    }
    let mut bytes = vec![0; header.total_len()];
    segment.read_exact_at(&mut bytes, position)?;
    let records = batch::records(&bytes)?;
    for record in records.iter() {
        let record = record?;
        if record.timestamp >= target {
            return Ok(Some(found(record.offset, record.timestamp)));
        }
    }
    Ok(None)
}

#[cfg(test)]
mod tests {
    use super::*;
    use syncline_proto::batch::BatchBuilder;

    const TS: i64 = 1_700_000_000_000;

    fn batch(records: usize) -> Bytes {
        let mut b = BatchBuilder::new(TS);
        for _ in 0..records {
            b.push(TS, None, Some(&[7; 40]), &[]);
        }
        b.finish()
    }

    fn config() -> LogConfig {
        LogConfig {
            index_interval_bytes: 300,
            ..LogConfig::default()
        }
    }

    /// The producer state as a rebuild from every batch header gives it.
    fn producers_from_every_header(log: &Log) -> ProducerStates {
        let mut headers = Vec::new();
        for segment in &log.segments {
            segment.each_header(|h| headers.push(*h)).unwrap();
        }
        ProducerStates::rebuild(headers)
    }

    fn producer_batch(pid: i64, epoch: i16, sequence: i32, records: usize) -> Bytes {
        let mut b = BatchBuilder::new(TS);
        b.set_producer(pid, epoch, sequence);
        for _ in 0..records {
            b.push(TS, None, Some(&[7; 40]), &[]);
        }
        b.finish()
    }

    #[derive(Debug, Clone)]
    enum Op {
        /// A batch of producer `pid` (0..3), a new epoch first if `bump`.
        Append {
            pid: i64,
            bump: bool,
            records: usize,
        },
        /// Truncate to this fraction (in 1/8ths) of the log end.
        Truncate(u8),
        /// Retention deletes the oldest segments, all but the last `keep`.
        Retain(usize),
        /// Close and open again, or drop (a crash) and open again.
        Reopen { clean: bool },
    }

    fn arb_op() -> impl proptest::strategy::Strategy<Value = Op> {
        use proptest::prelude::*;
        prop_oneof![
            6 => (0i64..3, proptest::bool::weighted(0.1), 1usize..4)
                .prop_map(|(pid, bump, records)| Op::Append { pid, bump, records }),
            1 => (0u8..8).prop_map(Op::Truncate),
            1 => (1usize..4).prop_map(Op::Retain),
            1 => any::<bool>().prop_map(|clean| Op::Reopen { clean }),
        ]
    }

    proptest::proptest! {
        #![proptest_config(proptest::prelude::ProptestConfig::with_cases(48))]
        /// Whatever appends, truncations, retention, clean restarts and crashes do,
        /// the producer state the log keeps — folded live, or loaded from a
        /// snapshot and the batches after it — equals a rebuild from every batch
        /// header it holds.
        #[test]
        fn producer_state_from_snapshots_equals_a_rebuild_from_the_log(
            ops in proptest::collection::vec(arb_op(), 1..40)
        ) {
            let dir = tempfile::tempdir().unwrap();
            // About three batches per segment: rolls (and snapshots) are frequent.
            let config = LogConfig { segment_bytes: 400, ..config() };
            let mut log = Log::open(dir.path(), config.clone()).unwrap();
            let mut next: std::collections::HashMap<i64, (i16, i32)> = Default::default();
            for op in ops {
                match op {
                    Op::Append { pid, bump, records } => {
                        // Number from the log's own state, so truncations count.
                        let (epoch, sequence) = match log.producer_states().get(pid) {
                            Some(e) if !bump => (e.epoch, batch::next_sequence(
                                e.batches.back().unwrap().last_sequence)),
                            Some(e) => (e.epoch + 1, 0),
                            None => (next.get(&pid).map_or(0, |(e, _)| e + 1), 0),
                        };
                        next.insert(pid, (epoch, sequence));
                        let b = producer_batch(pid, epoch, sequence, records);
                        log.append_as_leader(&b, 0, TS).unwrap();
                    }
                    Op::Truncate(eighths) => {
                        let start = log.log_start_offset();
                        let to = start + (log.log_end_offset() - start) * i64::from(eighths) / 8;
                        log.truncate_to(to).unwrap();
                    }
                    Op::Retain(keep) => {
                        let count = log.segments.len().saturating_sub(keep);
                        if count > 0 {
                            let removed: Vec<Segment> = log.segments.drain(..count).collect();
                            log.remove_oldest(removed).unwrap();
                        }
                    }
                    Op::Reopen { clean } => {
                        if clean {
                            log.close().unwrap();
                        }
                        drop(log);
                        log = Log::open(dir.path(), config.clone()).unwrap();
                    }
                }
                proptest::prop_assert_eq!(log.producer_states(), &producers_from_every_header(&log));
            }
            // And the snapshots left on disk are within the log.
            for offset in log.snapshot_offsets().unwrap() {
                proptest::prop_assert!(
                    (log.log_start_offset()..=log.log_end_offset()).contains(&offset)
                );
            }
        }
    }

    #[test]
    fn a_restart_loads_the_producer_snapshot_and_a_damaged_one_is_rebuilt() {
        let dir = tempfile::tempdir().unwrap();
        let config = LogConfig {
            segment_bytes: 400,
            ..config()
        };
        let mut log = Log::open(dir.path(), config.clone()).unwrap();
        for sequence in 0..6 {
            log.append_as_leader(&producer_batch(5, 0, sequence, 1), 0, TS)
                .unwrap();
        }
        assert!(log.segments.len() > 1, "rolled");
        let end = log.log_end_offset();
        let kept = log.producer_states().clone();
        log.close().unwrap();
        drop(log);
        let snapshot = segment_file(dir.path(), end, SNAPSHOT_SUFFIX);
        // A snapshot holding a producer the log never saw: loaded, so it is there.
        let mut planted = kept.clone();
        planted.update(&batch::validate(&producer_batch(99, 0, 0, 1)).unwrap());
        std::fs::write(&snapshot, planted.encode_snapshot()).unwrap();
        let log = Log::open(dir.path(), config.clone()).unwrap();
        assert_eq!(log.producer_states(), &planted, "the snapshot was loaded");
        drop(log);
        // A damaged one is deleted and the state rebuilt from the batches.
        std::fs::write(&snapshot, b"SLPS torn").unwrap();
        let log = Log::open(dir.path(), config).unwrap();
        assert_eq!(log.producer_states(), &kept);
        assert!(!snapshot.exists());
    }

    #[test]
    fn truncating_at_the_end_drops_an_epoch_that_wrote_nothing() {
        let dir = tempfile::tempdir().unwrap();
        let mut log = Log::open(dir.path(), config()).unwrap();
        log.assign_epoch(3, 0).unwrap();
        log.append_as_leader(&batch(3), 3, TS).unwrap();
        // Leader in epoch 5 for a moment, without an append.
        log.assign_epoch(5, 3).unwrap();
        assert_eq!(log.latest_epoch(), Some(5));
        // A follower again: truncation to the log end removes no batch, but the
        // empty epoch goes (on disk too).
        log.truncate_to(3).unwrap();
        assert_eq!(log.log_end_offset(), 3);
        assert_eq!(log.latest_epoch(), Some(3));
        log.truncate_to(10).unwrap();
        assert_eq!(log.latest_epoch(), Some(3));
        log.close().unwrap();
        drop(log);
        let log = Log::open(dir.path(), config()).unwrap();
        assert_eq!(log.latest_epoch(), Some(3));
        assert_eq!(log.log_end_offset(), 3);
    }

    #[test]
    fn a_failed_write_is_cut_off_and_the_log_goes_on() {
        let dir = tempfile::tempdir().unwrap();
        let mut log = Log::open(dir.path(), config()).unwrap();
        log.append_as_leader(&batch(3), 0, TS).unwrap();
        let size = log.size_bytes();
        log.active_mut().fail_write_after_bytes = Some(30);
        let failed = log.append_as_leader(&batch(3), 0, TS);
        assert!(matches!(failed, Err(LogError::Io { .. })), "{failed:?}");
        assert_eq!(log.log_end_offset(), 3);
        assert_eq!(
            std::fs::metadata(log.active().path()).unwrap().len(),
            size,
            "no half batch on disk"
        );
        log.append_as_leader(&batch(2), 0, TS).unwrap();
        assert_eq!(log.log_end_offset(), 5);
        let all = log.read(0, usize::MAX, 5, true).unwrap().records;
        drop(log);
        let log = Log::open(dir.path(), config()).unwrap();
        assert_eq!(log.read(0, usize::MAX, 5, true).unwrap().records, all);
    }

    #[test]
    fn a_write_that_cannot_be_undone_fails_the_log_until_reopened() {
        let dir = tempfile::tempdir().unwrap();
        let mut log = Log::open(dir.path(), config()).unwrap();
        log.append_as_leader(&batch(3), 0, TS).unwrap();
        let segment = log.active_mut();
        segment.fail_write_after_bytes = Some(30);
        segment.fail_set_len = true;
        assert!(matches!(
            log.append_as_leader(&batch(3), 0, TS),
            Err(LogError::Failed(_))
        ));
        assert!(matches!(
            log.read(0, 100, 3, true),
            Err(LogError::Failed(_))
        ));
        assert!(matches!(
            log.append_as_leader(&batch(3), 0, TS),
            Err(LogError::Failed(_))
        ));
        assert!(matches!(log.flush(), Err(LogError::Failed(_))));
        assert!(matches!(log.truncate_to(0), Err(LogError::Failed(_))));
        assert!(log.close().is_err());
        // Recovery cuts the half batch that could not be removed.
        let log = Log::open(dir.path(), config()).unwrap();
        assert_eq!(log.log_end_offset(), 3);
        assert!(!dir.path().join(CLEAN_SHUTDOWN_FILE).exists());
    }

    #[test]
    fn the_index_is_sparse_and_points_at_batch_starts() {
        let dir = tempfile::tempdir().unwrap();
        let mut log = Log::open(dir.path(), config()).unwrap();
        let one = batch(2).len() as u32; // 150-odd bytes: an entry every second batch
        for _ in 0..20 {
            log.append_as_leader(&batch(2), 0, TS).unwrap();
        }
        let entries = log.active().index_entries();
        assert_eq!(entries.len(), 9);
        for e in entries {
            assert_eq!(e.position % one, 0);
            assert_eq!(e.relative_offset, e.position / one * 2);
            assert_eq!(e.max_timestamp, TS);
        }
        let gaps: Vec<u32> = entries
            .windows(2)
            .map(|w| w[1].position - w[0].position)
            .collect();
        assert!(gaps.iter().all(|&g| g >= 300 && g < 300 + one), "{gaps:?}");
    }

    /// A batch whose records have these timestamps (relative to `TS`), gzip
    /// compressed when `compress`.
    fn timed_batch(deltas: &[i64], compress: bool) -> Bytes {
        let mut b = BatchBuilder::new(TS + deltas[0]);
        for d in deltas {
            b.push(TS + d, None, Some(&[3; 30]), &[]);
        }
        if compress {
            b.finish_with(syncline_proto::compression::Compression::Gzip)
        } else {
            b.finish()
        }
    }

    /// Every record of the log as (offset, timestamp, its batch's epoch).
    fn every_record(log: &Log) -> Vec<TimestampOffset> {
        let read = log
            .read(log.log_start_offset(), usize::MAX, i64::MAX, true)
            .unwrap();
        let mut out = Vec::new();
        for item in batch::split(&read.records) {
            let (header, bytes) = item.unwrap();
            for r in batch::records(bytes).unwrap().iter() {
                let r = r.unwrap();
                out.push(TimestampOffset {
                    offset: r.offset,
                    timestamp: r.timestamp,
                    leader_epoch: header.partition_leader_epoch,
                });
            }
        }
        out
    }

    proptest::proptest! {
        #![proptest_config(proptest::prelude::ProptestConfig::with_cases(64))]
        /// ListOffsets by timestamp through segments' max timestamps, time
        /// indexes and header scans finds what a scan of every record finds: the
        /// first record at or after the target (timestamps out of order within
        /// and across batches, compressed batches, several segments, indexes
        /// loaded from disk after a restart), and -3 the first record with the
        /// largest timestamp.
        #[test]
        fn offset_for_timestamp_equals_a_scan_of_every_record(
            batches in proptest::collection::vec(
                (proptest::collection::vec(-20i64..200, 1..6), proptest::bool::ANY), 1..30),
            targets in proptest::collection::vec(-30i64..230, 1..12),
            reopen in proptest::bool::ANY,
        ) {
            let dir = tempfile::tempdir().unwrap();
            let config = LogConfig { segment_bytes: 700, index_interval_bytes: 150, ..config() };
            let mut log = Log::open(dir.path(), config.clone()).unwrap();
            for (n, (deltas, compress)) in batches.iter().enumerate() {
                let epoch = (n / 10) as i32;
                log.append_as_leader(&timed_batch(deltas, *compress), epoch, TS).unwrap();
            }
            if reopen {
                log.close().unwrap();
                log = Log::open(dir.path(), config).unwrap();
            }
            let all = every_record(&log);
            for target in targets {
                let target = TS + target;
                let expected = all.iter().find(|r| r.timestamp >= target).copied();
                proptest::prop_assert_eq!(log.offset_for_timestamp(target).unwrap(), expected);
            }
            let max = all.iter().map(|r| r.timestamp).max().unwrap();
            let first_max = all.iter().find(|r| r.timestamp == max).copied();
            proptest::prop_assert_eq!(log.offset_of_max_timestamp().unwrap(), first_max);
        }
    }

    #[test]
    fn offset_for_timestamp_of_an_empty_log_or_a_future_time_is_none() {
        let dir = tempfile::tempdir().unwrap();
        let mut log = Log::open(dir.path(), config()).unwrap();
        assert_eq!(log.offset_for_timestamp(0).unwrap(), None);
        assert_eq!(log.offset_of_max_timestamp().unwrap(), None);
        log.append_as_leader(&timed_batch(&[0, 5], false), 2, TS)
            .unwrap();
        assert_eq!(log.offset_for_timestamp(TS + 6).unwrap(), None);
        assert_eq!(
            log.offset_for_timestamp(TS + 1).unwrap(),
            Some(TimestampOffset {
                offset: 1,
                timestamp: TS + 5,
                leader_epoch: 2
            })
        );
    }
}
