//! A partition directory as a crash, a bad disk or a hostile peer may leave it,
//! opened with `Log::open` (recovery: trusted segments, validated segments, index
//! files, checkpoints), then driven as a broker drives it: reads from every offset,
//! leader appends of batches the broker accepted, follower appends of whatever a
//! leader sent, truncation; then closed and reopened (nothing may change), then
//! dropped without closing (a crash) and reopened (the log may only shrink).
//!
//! The segment files are built from "batches" that are, when asked, patched into
//! shape (magic, length, consecutive offsets, CRC) so that the fuzzer reaches the
//! checks behind the framing; everything else is raw bytes.
#![no_main]

use std::fs;
use std::path::Path;

use arbitrary::Arbitrary;
use libfuzzer_sys::fuzz_target;
use syncline_log::{Log, LogConfig};
use syncline_proto::batch::{self, HEADER_LEN};

#[derive(Debug, Arbitrary)]
struct RawBatch {
    bytes: Vec<u8>,
    /// Patch magic, length, base offset (the next expected), epoch and CRC.
    patch: bool,
    epoch: u8,
}

#[derive(Debug, Arbitrary)]
struct Seg {
    /// Added to the expected base offset (0: contiguous).
    gap: u8,
    batches: Vec<RawBatch>,
    tail: Vec<u8>,
    index: Option<Vec<u8>>,
    time_index: Option<Vec<u8>>,
}

#[derive(Debug, Arbitrary)]
enum Op {
    Read {
        offset: u16,
        max_bytes: u16,
        min_one: bool,
    },
    Leader {
        batch: RawBatch,
        epoch: u8,
    },
    Follower {
        batches: Vec<RawBatch>,
        patch_offsets: bool,
    },
    Truncate(u16),
    TruncateFully(u16),
    BytesBetween(u16, u16),
    Epoch(u8),
}

#[derive(Debug, Arbitrary)]
struct Input {
    segments: Vec<Seg>,
    clean_shutdown: bool,
    recovery_point: Option<Vec<u8>>,
    epoch_checkpoint: Option<Vec<u8>>,
    segment_bytes: u16,
    index_interval_bytes: u8,
    ops: Vec<Op>,
}

/// The bytes of `raw`, patched to start at `offset` when asked; returns them and
/// the offset after them by their header.
fn patched(raw: &RawBatch, offset: i64) -> (Vec<u8>, i64) {
    let mut b = raw.bytes.clone();
    if !raw.patch {
        return (b, offset);
    }
    if b.len() < HEADER_LEN {
        b.resize(HEADER_LEN, 0);
    }
    b[16] = batch::MAGIC as u8;
    batch::stamp(&mut b, offset, i32::from(raw.epoch));
    syncline_fuzz::fix_length_and_crc(&mut b, true, true);
    let delta = i32::from_be_bytes([b[23], b[24], b[25], b[26]]);
    (b, offset.saturating_add(i64::from(delta)).saturating_add(1))
}

fn write_dir(dir: &Path, input: &Input) {
    fs::create_dir_all(dir).unwrap();
    let mut next = 0i64;
    for seg in input.segments.iter().take(4) {
        let base = next + i64::from(seg.gap);
        next = base;
        let mut bytes = Vec::new();
        for raw in seg.batches.iter().take(16) {
            let (b, after) = patched(raw, next);
            bytes.extend_from_slice(&b);
            next = after;
        }
        bytes.extend_from_slice(&seg.tail);
        let name = |suffix: &str| dir.join(format!("{base:020}{suffix}"));
        fs::write(name(".log"), &bytes).unwrap();
        if let Some(i) = &seg.index {
            fs::write(name(".index"), i).unwrap();
        }
        if let Some(t) = &seg.time_index {
            fs::write(name(".timeindex"), t).unwrap();
        }
    }
    if input.clean_shutdown {
        fs::write(dir.join("clean-shutdown"), b"").unwrap();
    }
    if let Some(rp) = &input.recovery_point {
        fs::write(dir.join("recovery-point"), rp).unwrap();
    }
    if let Some(e) = &input.epoch_checkpoint {
        fs::write(dir.join("leader-epoch-checkpoint"), e).unwrap();
    }
}

/// Everything a log holds, read from its start, with the checks a reader relies on.
fn contents(log: &Log) -> (i64, i64, Vec<u8>) {
    let (start, end) = (log.log_start_offset(), log.log_end_offset());
    assert!(start <= end, "log start {start} after log end {end}");
    let read = log
        .read(start, usize::MAX, end, true)
        .expect("a recovered log reads");
    let mut expected = start;
    let mut first = true;
    for item in batch::split(&read.records) {
        let (h, _) = item.expect("a read returns whole batches");
        if first {
            assert!(h.base_offset <= start && start <= h.last_offset().max(start));
            first = false;
        } else {
            assert_eq!(h.base_offset, expected, "batches are consecutive");
        }
        expected = h.next_offset();
    }
    if !read.records.is_empty() {
        assert_eq!(read.next_offset, expected);
        assert_eq!(read.next_offset, end, "a whole read reaches the log end");
    }
    (start, end, read.records.to_vec())
}

fn config(input: &Input) -> LogConfig {
    LogConfig {
        segment_bytes: u64::from(input.segment_bytes).max(HEADER_LEN as u64),
        index_interval_bytes: u32::from(input.index_interval_bytes).max(1),
        segment_ms: None,
        ..LogConfig::default()
    }
}

fn run(dir: &Path, input: &Input) {
    write_dir(dir, input);
    let mut log = match Log::open(dir, config(input)) {
        Ok(log) => log,
        Err(e) => panic!("recovery gave up instead of cutting the log: {e}"),
    };
    contents(&log);
    let mut now = 1_000i64;
    for op in input.ops.iter().take(16) {
        now += 1;
        let end = log.log_end_offset();
        match op {
            Op::Read {
                offset,
                max_bytes,
                min_one,
            } => {
                let offset = log.log_start_offset() + i64::from(*offset);
                let _ = log.read(offset, usize::from(*max_bytes), end, *min_one);
            }
            Op::Leader { batch: raw, epoch } => {
                let (bytes, _) = patched(raw, 0);
                // The broker appends only what it validated.
                if batch::validate(&bytes).is_ok() {
                    if let Ok(info) = log.append_as_leader(&bytes, i32::from(*epoch), now) {
                        assert_eq!(info.first_offset, end);
                        assert_eq!(log.log_end_offset(), info.last_offset + 1);
                    }
                }
            }
            Op::Follower {
                batches,
                patch_offsets,
            } => {
                let mut bytes = Vec::new();
                let mut next = end;
                for raw in batches.iter().take(8) {
                    let (b, after) = patched(raw, if *patch_offsets { next } else { 0 });
                    bytes.extend_from_slice(&b);
                    next = after;
                }
                if log.append_as_follower(&bytes, now).is_err() {
                    assert_eq!(
                        log.log_end_offset(),
                        end,
                        "a refused append changed the log"
                    );
                }
            }
            Op::Truncate(o) => {
                let _ = log.truncate_to(log.log_start_offset() + i64::from(*o));
            }
            Op::TruncateFully(o) => {
                let _ = log.truncate_fully_and_start_at(i64::from(*o));
            }
            Op::BytesBetween(a, b) => {
                let _ = log.bytes_between(i64::from(*a), i64::from(*b));
            }
            Op::Epoch(e) => {
                let _ = log.end_offset_for_epoch(i32::from(*e));
                let _ = log.epoch_start_offset(i32::from(*e));
            }
        }
        contents(&log);
    }
    let before = contents(&log);
    log.close().expect("close");
    drop(log);
    let log = Log::open(dir, config(input)).expect("a closed log reopens");
    assert_eq!(contents(&log), before, "a clean reopen changed the log");
    // A crash: dropped without closing.
    drop(log);
    let log = Log::open(dir, config(input)).expect("a crashed log reopens");
    let after = contents(&log);
    // Recovery only cuts the log.
    assert_eq!(after.0, before.0, "recovery moved the log start");
    assert!(before.2.starts_with(&after.2), "recovery changed batches");
    // Without a clean-shutdown marker or a recovery point among the input files,
    // the first open validated every batch, so nothing is cut now. (With them it
    // trusted the files, and a batch with a bad CRC may be cut now.)
    if !input.clean_shutdown && input.recovery_point.is_none() {
        assert_eq!(after, before, "recovery cut batches that were whole");
    }
}

fuzz_target!(|input: Input| {
    let tmp = Path::new("/dev/shm");
    let dir = if tmp.is_dir() {
        tempfile::tempdir_in(tmp)
    } else {
        tempfile::tempdir()
    }
    .expect("a temporary directory");
    run(&dir.path().join("t-0"), &input);
});
