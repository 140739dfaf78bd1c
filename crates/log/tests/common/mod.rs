//! Helpers shared by the integration tests.
#![allow(dead_code, unreachable_pub)]

use std::path::{Path, PathBuf};

use bytes::Bytes;
use syncline_log::{Log, LogConfig};
use syncline_proto::batch::{self, BatchBuilder, BatchHeader};

/// A batch of `records` records with `value_bytes`-byte values, all at `timestamp`.
pub fn batch(records: usize, value_bytes: usize, timestamp: i64) -> Bytes {
    let mut b = BatchBuilder::new(timestamp);
    for i in 0..records {
        let value = vec![(i % 251) as u8; value_bytes];
        b.push(timestamp, Some(b"key"), Some(&value), &[]);
    }
    b.finish()
}

/// Small segments and a dense index, so that tests cross segment and index
/// boundaries with little data.
pub fn small_config(segment_bytes: u64) -> LogConfig {
    LogConfig {
        segment_bytes,
        index_interval_bytes: 128,
        ..LogConfig::default()
    }
}

/// Headers of the whole batches in `bytes`.
pub fn headers(bytes: &[u8]) -> Vec<BatchHeader> {
    batch::split(bytes).map(|b| b.unwrap().0).collect()
}

/// Everything the log holds, read in one go.
pub fn read_all(log: &Log) -> Bytes {
    log.read(
        log.log_start_offset(),
        usize::MAX,
        log.log_end_offset(),
        true,
    )
    .unwrap()
    .records
}

/// The segment files in `dir`, sorted.
pub fn segment_files(dir: &Path) -> Vec<PathBuf> {
    let mut files: Vec<PathBuf> = std::fs::read_dir(dir)
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| p.extension().is_some_and(|e| e == "log"))
        .collect();
    files.sort();
    files
}
