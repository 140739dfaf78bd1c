//! Opening a log directory: which segments to trust, which to validate batch by
//! batch, and how to make the leader-epoch cache agree with what survived.
//!
//! - After a clean shutdown every segment is trusted: its index is checked and
//!   the batch headers after the last index entry are walked to the end of the file.
//! - Otherwise segments wholly below the persisted recovery point are trusted the
//!   same way, and every later segment is validated (sizes, CRC, consecutive
//!   offsets). The first invalid batch and everything after it, including later
//!   segments, are removed with a warning: a torn tail is the expected result of
//!   a crash, and nothing after a gap can be served.
//! - A trusted segment that does not hold together is validated instead.

use std::fs;
use std::path::Path;

use crate::checkpoint::{
    self, CLEAN_SHUTDOWN_FILE, LEADER_EPOCH_FILE, RECOVERY_POINT_FILE, TMP_SUFFIX,
};
use crate::epoch_cache::LeaderEpochCache;
use crate::error::{IoContext, LogError};
use crate::index::remove_if_exists;
use crate::segment::{
    parse_segment_file, remove_segment_files, Segment, INDEX_SUFFIX, LOG_SUFFIX, TIME_INDEX_SUFFIX,
};
use crate::LogConfig;

/// The state of a directory after recovery.
#[derive(Debug)]
pub(crate) struct Recovered {
    /// Ordered, contiguous, never empty.
    pub(crate) segments: Vec<Segment>,
    pub(crate) epochs: LeaderEpochCache,
    /// The epoch cache differs from its checkpoint.
    pub(crate) epochs_changed: bool,
    pub(crate) clean_shutdown: bool,
    pub(crate) persisted_recovery_point: Option<i64>,
}

pub(crate) fn recover_dir(dir: &Path, config: &LogConfig) -> Result<Recovered, LogError> {
    // A new partition's directory must survive a crash as much as the files the
    // log then writes (and fsyncs) in it.
    syncline_durable::create_dir_all(dir).ctx(dir)?;
    let bases = list_segments(dir)?;
    let clean_shutdown = dir.join(CLEAN_SHUTDOWN_FILE).exists();
    let persisted_recovery_point = checkpoint::read_offset(dir, RECOVERY_POINT_FILE)?;
    let epoch_text = checkpoint::read(dir, LEADER_EPOCH_FILE)?;
    let epoch_file = epoch_text.is_some();
    let (mut epochs, epochs_trusted) = match epoch_text {
        Some(text) => match LeaderEpochCache::from_checkpoint(&text) {
            Ok(cache) => (cache, true),
            Err(reason) => {
                tracing::warn!(dir = %dir.display(), %reason, "garbled leader-epoch checkpoint; rebuilding it from the batches");
                (LeaderEpochCache::new(), false)
            }
        },
        None => (LeaderEpochCache::new(), false),
    };
    let loaded_epochs = epochs.clone();

    let mut segments: Vec<Segment> = Vec::with_capacity(bases.len());
    for (i, &base) in bases.iter().enumerate() {
        let later = &bases[i + 1..];
        if let Some(prev) = segments.last() {
            if prev.next_offset() != base {
                tracing::warn!(
                    dir = %dir.display(),
                    segment = base,
                    expected = prev.next_offset(),
                    "segment does not start where the previous one ends; removing it and every later segment"
                );
                remove_all(dir, &bases[i..])?;
                break;
            }
        }
        let below_recovery_point = later
            .first()
            .is_some_and(|&next| persisted_recovery_point.is_some_and(|rp| next <= rp));
        let trusted = if clean_shutdown || below_recovery_point {
            match Segment::open_trusted(dir, base, config.index_interval_bytes)? {
                Ok(segment) => Some(segment),
                Err(reason) => {
                    tracing::warn!(dir = %dir.display(), segment = base, %reason, "segment does not hold together; validating every batch");
                    None
                }
            }
        } else {
            None
        };
        let (segment, cut) = match trusted {
            Some(segment) => (segment, false),
            None => Segment::recover(dir, base, config.index_interval_bytes, &mut epochs)?,
        };
        segments.push(segment);
        if cut && !later.is_empty() {
            tracing::warn!(dir = %dir.display(), segments = ?later, "removing the segments after a truncated one");
            remove_all(dir, later)?;
            break;
        }
    }
    if segments.is_empty() {
        // Its directory is fsynced with its first bytes (`Segment::flush`).
        segments.push(Segment::create(dir, 0)?);
    }

    let log_start_offset = segments[0].base_offset();
    let log_end_offset = segments.last().map_or(0, Segment::next_offset);
    if !epochs_trusted {
        epochs = rebuild_epochs(&segments)?;
    }
    epochs.truncate_from_end(log_end_offset);
    epochs.truncate_from_start(log_start_offset);
    Ok(Recovered {
        segments,
        // A missing checkpoint of an empty cache (a new log) is not rewritten
        // empty.
        epochs_changed: (!epochs_trusted && (epoch_file || !epochs.entries().is_empty()))
            || epochs != loaded_epochs,
        epochs,
        clean_shutdown,
        persisted_recovery_point,
    })
}

/// The base offsets of the segment files in `dir`, sorted. Leftovers of
/// interrupted work (temporary checkpoint files, index files whose segment was
/// deleted) are removed.
fn list_segments(dir: &Path) -> Result<Vec<i64>, LogError> {
    let mut bases = Vec::new();
    let mut indexed = Vec::new();
    for entry in fs::read_dir(dir).ctx(dir)? {
        let entry = entry.ctx(dir)?;
        let Some(name) = entry.file_name().to_str().map(str::to_owned) else {
            continue;
        };
        if name.ends_with(TMP_SUFFIX) {
            remove_if_exists(&entry.path())?;
        } else if let Some(base) = parse_segment_file(&name, LOG_SUFFIX) {
            bases.push(base);
        } else if let Some(base) = parse_segment_file(&name, INDEX_SUFFIX)
            .or_else(|| parse_segment_file(&name, TIME_INDEX_SUFFIX))
        {
            indexed.push((base, entry.path()));
        }
    }
    for (base, path) in indexed {
        if !bases.contains(&base) {
            remove_if_exists(&path)?;
        }
    }
    bases.sort_unstable();
    Ok(bases)
}

fn remove_all(dir: &Path, bases: &[i64]) -> Result<(), LogError> {
    // Newest first: a crash part-way leaves a contiguous log.
    for &base in bases.iter().rev() {
        remove_segment_files(dir, base)?;
    }
    checkpoint::sync_dir(dir)
}

/// The epoch cache as the batches describe it: every batch carries the epoch of
/// the leader that wrote it.
fn rebuild_epochs(segments: &[Segment]) -> Result<LeaderEpochCache, LogError> {
    let mut epochs = LeaderEpochCache::new();
    for segment in segments {
        let mut headers = segment.headers();
        let mut position = 0;
        while position < segment.size_bytes() {
            let header = headers.header_at(position)?;
            let epoch = header.partition_leader_epoch;
            if epoch >= 0 && epochs.latest_epoch().is_none_or(|latest| epoch > latest) {
                epochs.assign(epoch, header.base_offset)?;
            }
            position += header.total_len() as u64;
        }
    }
    Ok(epochs)
}
