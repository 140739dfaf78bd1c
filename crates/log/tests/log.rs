//! Behaviour of `Log` through its public API.

mod common;

use std::fs::{self, OpenOptions};

use common::{batch, headers, read_all, segment_files, small_config};
use syncline_log::{EpochEntry, Log, LogConfig, LogError, SequenceCheck};
use syncline_proto::batch::{self as rb, HEADER_LEN};
use syncline_proto::EpochEndOffset;

const TS: i64 = 1_700_000_000_000;

fn entries(pairs: &[(i32, i64)]) -> Vec<EpochEntry> {
    pairs
        .iter()
        .map(|&(epoch, start_offset)| EpochEntry {
            epoch,
            start_offset,
        })
        .collect()
}

/// Appends `count` batches of `records` 50-byte records as leader at `epoch`.
fn fill(log: &mut Log, count: usize, records: usize, epoch: i32) {
    for _ in 0..count {
        log.append_as_leader(&batch(records, 50, TS), epoch, TS)
            .unwrap();
    }
}

#[test]
fn empty_directory_becomes_an_empty_log_at_zero() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("topic-0");
    let log = Log::open(&path, LogConfig::default()).unwrap();
    assert_eq!(log.log_start_offset(), 0);
    assert_eq!(log.log_end_offset(), 0);
    assert_eq!(log.segment_count(), 1);
    assert_eq!(log.size_bytes(), 0);
    assert!(path.join("00000000000000000000.log").exists());
    let read = log.read(0, 1000, 0, true).unwrap();
    assert!(read.records.is_empty());
    assert_eq!(read.next_offset, 0);
    assert!(matches!(
        log.read(1, 1000, 1, true),
        Err(LogError::OffsetOutOfRange { offset: 1, .. })
    ));
}

#[test]
fn a_new_log_writes_no_checkpoint_and_reopens_the_same() {
    // Creating thousands of partitions must not cost fsyncs of files that
    // would only say "empty": a missing checkpoint reads as an empty one.
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("topic-0");
    let log = Log::open(&path, LogConfig::default()).unwrap();
    let mut names: Vec<String> = fs::read_dir(&path)
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .collect();
    names.sort();
    assert_eq!(names, ["00000000000000000000.log"]);
    drop(log);
    let mut log = Log::open(&path, LogConfig::default()).unwrap();
    assert_eq!(log.log_end_offset(), 0);
    assert_eq!(log.recovery_point(), 0);
    assert!(log.epoch_entries().is_empty());
    assert_eq!(log.read_high_watermark(), None);
    // And it takes appends as any log does.
    fill(&mut log, 2, 3, 4);
    drop(log);
    let log = Log::open(&path, LogConfig::default()).unwrap();
    assert_eq!(log.log_end_offset(), 6);
    assert_eq!(log.epoch_entries(), entries(&[(4, 0)]));
}

#[test]
fn a_new_leaders_epoch_is_written_with_its_first_batch_or_at_close() {
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("leader-epoch-checkpoint");
    let mut log = Log::open(dir.path(), small_config(1 << 20)).unwrap();
    fill(&mut log, 1, 2, 1);
    log.assign_epoch(3, 2).unwrap();
    // At the log end: nothing depends on it yet, so it is not written...
    assert_eq!(fs::read_to_string(&file).unwrap(), "0\n1\n1 0\n");
    assert_eq!(log.epoch_entries(), entries(&[(1, 0), (3, 2)]));
    // ...until a batch of it is (even one stamped by the same epoch).
    fill(&mut log, 1, 2, 3);
    assert_eq!(fs::read_to_string(&file).unwrap(), "0\n2\n1 0\n3 2\n");
    // A clean close writes an entry no batch has needed yet.
    log.assign_epoch(4, 4).unwrap();
    log.close().unwrap();
    assert_eq!(fs::read_to_string(&file).unwrap(), "0\n3\n1 0\n3 2\n4 4\n");
}

#[test]
fn an_unchanged_high_watermark_is_not_written_again() {
    let dir = tempfile::tempdir().unwrap();
    let mut log = Log::open(dir.path(), small_config(1 << 20)).unwrap();
    fill(&mut log, 2, 5, 1);
    let file = dir.path().join("high-watermark");
    // 0 is what no file says already.
    log.write_high_watermark(0).unwrap();
    assert!(!file.exists());
    log.write_high_watermark(7).unwrap();
    assert_eq!(log.read_high_watermark(), Some(7));
    // Removed behind the log's back, the same value is not rewritten: the
    // log knows what it last wrote, and writes only a change.
    fs::remove_file(&file).unwrap();
    log.write_high_watermark(7).unwrap();
    assert!(!file.exists());
    log.write_high_watermark(8).unwrap();
    assert_eq!(log.read_high_watermark(), Some(8));
    // A reopened log knows what its file holds.
    drop(log);
    let log = Log::open(dir.path(), small_config(1 << 20)).unwrap();
    fs::remove_file(&file).unwrap();
    log.write_high_watermark(8).unwrap();
    assert!(!file.exists());
    log.write_high_watermark(9).unwrap();
    assert_eq!(log.read_high_watermark(), Some(9));
}

#[test]
fn leader_append_stamps_offsets_and_epoch_without_touching_the_crc_region() {
    let dir = tempfile::tempdir().unwrap();
    let mut log = Log::open(dir.path(), LogConfig::default()).unwrap();
    let first = batch(3, 10, TS);
    let info = log.append_as_leader(&first, 5, TS).unwrap();
    assert_eq!((info.first_offset, info.last_offset), (0, 2));
    assert_eq!(info.max_timestamp, TS);
    assert_eq!(info.size_bytes, first.len() as u64);

    let two = [batch(2, 10, TS + 1), batch(4, 10, TS + 2)].concat();
    let info = log.append_as_leader(&two, 5, TS).unwrap();
    assert_eq!((info.first_offset, info.last_offset), (3, 8));
    assert_eq!(info.max_timestamp, TS + 2);
    assert_eq!(log.log_end_offset(), 9);

    let all = read_all(&log);
    let hs = headers(&all);
    assert_eq!(
        hs.iter().map(|h| h.base_offset).collect::<Vec<_>>(),
        [0, 3, 5]
    );
    assert!(hs.iter().all(|h| h.partition_leader_epoch == 5));
    for (_, bytes) in rb::split(&all).map(Result::unwrap) {
        rb::validate(bytes).unwrap();
    }
    // Beyond the stamp, the stored bytes are the producer's.
    assert_eq!(&all[17..first.len()], &first[17..]);
}

#[test]
fn leader_append_rejects_bad_input_without_writing() {
    let dir = tempfile::tempdir().unwrap();
    let mut log = Log::open(dir.path(), small_config(4096)).unwrap();
    fill(&mut log, 1, 2, 3);
    let good = batch(2, 10, TS);
    let torn = &good[..good.len() - 1];
    assert!(matches!(
        log.append_as_leader(torn, 3, TS),
        Err(LogError::InvalidBatch(_))
    ));
    let good_then_torn = [&good[..], torn].concat();
    assert!(matches!(
        log.append_as_leader(&good_then_torn, 3, TS),
        Err(LogError::InvalidBatch(_))
    ));
    assert!(matches!(
        log.append_as_leader(&good, 2, TS),
        Err(LogError::StaleLeaderEpoch {
            epoch: 2,
            latest_epoch: 3
        })
    ));
    assert!(matches!(
        log.append_as_leader(&good, -1, TS),
        Err(LogError::InvalidEpochEntry { .. })
    ));
    let huge = batch(100, 100, TS);
    assert!(matches!(
        log.append_as_leader(&huge, 3, TS),
        Err(LogError::BatchTooLarge { .. })
    ));
    assert_eq!(log.log_end_offset(), 2);
    let empty = log.append_as_leader(&[], 3, TS).unwrap();
    assert_eq!((empty.first_offset, empty.last_offset), (2, 1));
    assert_eq!(log.log_end_offset(), 2);
}

#[test]
fn segments_roll_by_size_and_are_named_by_base_offset() {
    let dir = tempfile::tempdir().unwrap();
    let one = batch(2, 50, TS).len() as u64;
    let mut log = Log::open(dir.path(), small_config(one * 3)).unwrap();
    fill(&mut log, 10, 2, 0);
    assert_eq!(log.segment_count(), 4);
    let files = segment_files(dir.path());
    let names: Vec<String> = files
        .iter()
        .map(|p| p.file_name().unwrap().to_string_lossy().into_owned())
        .collect();
    assert_eq!(
        names,
        [
            "00000000000000000000.log",
            "00000000000000000006.log",
            "00000000000000000012.log",
            "00000000000000000018.log"
        ]
    );
    for f in &files {
        assert!(fs::metadata(f).unwrap().len() <= one * 3);
    }
    assert_eq!(log.size_bytes(), one * 10);
    // One append that spans segments is split between them.
    let many: Vec<u8> = (0..5).flat_map(|_| batch(2, 50, TS).to_vec()).collect();
    log.append_as_leader(&many, 0, TS).unwrap();
    assert_eq!(log.segment_count(), 5);
    assert_eq!(log.log_end_offset(), 30);
    assert_eq!(headers(&read_all(&log)).len(), 15);
}

#[test]
fn a_config_changed_live_rolls_by_the_new_size_from_the_next_append() {
    let dir = tempfile::tempdir().unwrap();
    let one = batch(2, 50, TS).len() as u64;
    let mut log = Log::open(dir.path(), small_config(one * 100)).unwrap();
    fill(&mut log, 4, 2, 0);
    assert_eq!(log.segment_count(), 1);
    log.set_config(small_config(one * 2));
    assert_eq!(log.config().segment_bytes, one * 2);
    // The active segment holds 4 batches, more than the new size: the next append
    // rolls, and from then on every segment holds at most two.
    fill(&mut log, 4, 2, 0);
    assert_eq!(log.segment_count(), 3);
    assert_eq!(log.log_end_offset(), 16);
    assert_eq!(headers(&read_all(&log)).len(), 8);
}

#[test]
fn segments_roll_by_age_of_record_timestamps() {
    let dir = tempfile::tempdir().unwrap();
    let config = LogConfig {
        segment_ms: Some(1000),
        ..LogConfig::default()
    };
    let mut log = Log::open(dir.path(), config).unwrap();
    for ts in [TS, TS + 500, TS + 1000] {
        log.append_as_leader(&batch(1, 10, ts), 0, 0).unwrap();
    }
    assert_eq!(log.segment_count(), 1);
    log.append_as_leader(&batch(1, 10, TS + 1001), 0, 0)
        .unwrap();
    assert_eq!(log.segment_count(), 2);
    log.append_as_leader(&batch(1, 10, TS + 1500), 0, 0)
        .unwrap();
    assert_eq!(
        log.segment_count(),
        2,
        "age counts from the new segment's first batch"
    );
}

#[test]
fn read_from_the_middle_of_a_batch_returns_the_whole_batch() {
    let dir = tempfile::tempdir().unwrap();
    let mut log = Log::open(dir.path(), small_config(1 << 20)).unwrap();
    fill(&mut log, 20, 5, 0);
    for offset in 0..100 {
        let read = log.read(offset, 1, 100, true).unwrap();
        let hs = headers(&read.records);
        assert_eq!(hs.len(), 1, "offset {offset}");
        assert_eq!(hs[0].base_offset, offset / 5 * 5);
        assert_eq!(read.next_offset, offset / 5 * 5 + 5);
    }
}

#[test]
fn reads_cross_segments() {
    let dir = tempfile::tempdir().unwrap();
    let one = batch(2, 50, TS).len();
    let mut log = Log::open(dir.path(), small_config(one as u64 * 3)).unwrap();
    fill(&mut log, 10, 2, 0);
    assert!(log.segment_count() > 3);
    let read = log.read(3, one * 5, 20, false).unwrap();
    let bases: Vec<i64> = headers(&read.records)
        .iter()
        .map(|h| h.base_offset)
        .collect();
    assert_eq!(bases, [2, 4, 6, 8, 10]);
    assert_eq!(read.next_offset, 12);
    assert_eq!(read_all(&log).len(), one * 10);
    // Starting exactly at a segment boundary.
    let read = log.read(6, usize::MAX, 20, false).unwrap();
    assert_eq!(headers(&read.records)[0].base_offset, 6);
    assert_eq!(read.records.len(), one * 7);
}

#[test]
fn reads_stop_before_a_batch_reaching_the_upper_bound() {
    let dir = tempfile::tempdir().unwrap();
    let mut log = Log::open(dir.path(), small_config(1 << 20)).unwrap();
    fill(&mut log, 4, 5, 0); // batches [0,4] [5,9] [10,14] [15,19]
    let bases = |upper: i64| -> Vec<i64> {
        headers(&log.read(0, usize::MAX, upper, true).unwrap().records)
            .iter()
            .map(|h| h.base_offset)
            .collect()
    };
    assert_eq!(bases(10), [0, 5]);
    assert_eq!(
        bases(14),
        [0, 5],
        "a batch whose last offset reaches the bound is held back"
    );
    assert_eq!(bases(15), [0, 5, 10]);
    assert_eq!(bases(4), Vec::<i64>::new());
    assert_eq!(
        bases(1000),
        [0, 5, 10, 15],
        "the bound is capped at the log end"
    );
    // Reading at the bound, or between the bound and the log end, is empty.
    assert!(log.read(10, 1000, 10, true).unwrap().records.is_empty());
    assert!(log.read(12, 1000, 10, true).unwrap().records.is_empty());
    assert!(log.read(20, 1000, 20, true).unwrap().records.is_empty());
}

#[test]
fn max_bytes_and_min_one_batch() {
    let dir = tempfile::tempdir().unwrap();
    let mut log = Log::open(dir.path(), small_config(1 << 20)).unwrap();
    fill(&mut log, 4, 5, 0);
    let one = batch(5, 50, TS).len();
    let len = |max: usize, min_one: bool| log.read(0, max, 20, min_one).unwrap().records.len();
    assert_eq!(len(one * 2, false), one * 2);
    assert_eq!(len(one * 2 + one / 2, false), one * 2, "no partial batch");
    assert_eq!(len(one - 1, false), 0);
    assert_eq!(
        len(one - 1, true),
        one,
        "a first batch larger than max_bytes comes whole"
    );
    assert_eq!(len(0, true), one);
    assert_eq!(len(one + 1, true), one);
}

#[test]
fn offsets_outside_the_log_are_out_of_range() {
    let dir = tempfile::tempdir().unwrap();
    let mut log = Log::open(dir.path(), small_config(1 << 20)).unwrap();
    fill(&mut log, 2, 5, 0);
    assert!(matches!(
        log.read(11, 10, 11, true),
        Err(LogError::OffsetOutOfRange {
            offset: 11,
            log_start_offset: 0,
            log_end_offset: 10
        })
    ));
    assert!(matches!(
        log.read(-1, 10, 10, true),
        Err(LogError::OffsetOutOfRange { .. })
    ));
    log.truncate_fully_and_start_at(50).unwrap();
    assert!(matches!(
        log.read(49, 10, 50, true),
        Err(LogError::OffsetOutOfRange { .. })
    ));
    assert!(log.read(50, 10, 50, true).unwrap().records.is_empty());
}

#[test]
fn truncate_to_in_a_middle_segment() {
    let dir = tempfile::tempdir().unwrap();
    let one = batch(4, 50, TS).len();
    let mut log = Log::open(dir.path(), small_config(one as u64 * 3)).unwrap();
    fill(&mut log, 3, 4, 1); // segment 0: [0, 12)
    fill(&mut log, 3, 4, 2); // segment 12: [12, 24)
    fill(&mut log, 3, 4, 3); // segment 24: [24, 36)
    assert_eq!(log.segment_count(), 3);
    assert_eq!(log.epoch_entries(), entries(&[(1, 0), (2, 12), (3, 24)]));

    log.truncate_to(18).unwrap(); // inside the batch [16, 20)
    assert_eq!(log.log_end_offset(), 16);
    assert_eq!(log.segment_count(), 2);
    assert!(!dir.path().join("00000000000000000024.log").exists());
    assert!(!dir.path().join("00000000000000000024.index").exists());
    assert_eq!(log.epoch_entries(), entries(&[(1, 0), (2, 12)]));
    assert_eq!(log.size_bytes(), one as u64 * 4);
    assert!(log.recovery_point() <= 16);
    for offset in 0..16 {
        let read = log.read(offset, 1, 16, true).unwrap();
        assert_eq!(headers(&read.records)[0].base_offset, offset / 4 * 4);
    }
    // Appends continue at the new log end, in the truncated segment.
    let info = log.append_as_leader(&batch(4, 50, TS), 4, TS).unwrap();
    assert_eq!(info.first_offset, 16);
    assert_eq!(log.epoch_entries(), entries(&[(1, 0), (2, 12), (4, 16)]));
    let before = read_all(&log);
    drop(log);
    let log = Log::open(dir.path(), small_config(one as u64 * 3)).unwrap();
    assert_eq!(read_all(&log), before);
    assert_eq!(log.epoch_entries(), entries(&[(1, 0), (2, 12), (4, 16)]));

    // Truncating at a segment's base empties it; at or past the end does nothing.
    let mut log = log;
    log.truncate_to(100).unwrap();
    assert_eq!(log.log_end_offset(), 20);
    log.truncate_to(12).unwrap();
    assert_eq!(log.log_end_offset(), 12);
    assert_eq!(log.segment_count(), 2);
    assert_eq!(log.epoch_entries(), entries(&[(1, 0)]));
    assert_eq!(read_all(&log).len(), one * 3);
}

#[test]
fn truncate_fully_and_start_at_restarts_an_empty_log() {
    let dir = tempfile::tempdir().unwrap();
    let one = batch(2, 50, TS).len() as u64;
    let mut log = Log::open(dir.path(), small_config(one * 2)).unwrap();
    fill(&mut log, 5, 2, 7);
    log.truncate_fully_and_start_at(1000).unwrap();
    assert_eq!(log.log_start_offset(), 1000);
    assert_eq!(log.log_end_offset(), 1000);
    assert_eq!(log.segment_count(), 1);
    assert_eq!(log.size_bytes(), 0);
    assert!(log.epoch_entries().is_empty());
    assert_eq!(
        segment_files(dir.path()),
        [dir.path().join("00000000000000001000.log")]
    );
    let mut stamped = batch(2, 50, TS).to_vec();
    rb::stamp(&mut stamped, 1000, 9);
    log.append_as_follower(&stamped, TS).unwrap();
    assert_eq!(log.log_end_offset(), 1002);
    assert_eq!(log.epoch_entries(), entries(&[(9, 1000)]));
    drop(log);
    let log = Log::open(dir.path(), small_config(one * 2)).unwrap();
    assert_eq!((log.log_start_offset(), log.log_end_offset()), (1000, 1002));
    // Below the log start, truncate_to restarts the log too.
    let mut log = log;
    log.truncate_to(10).unwrap();
    assert_eq!((log.log_start_offset(), log.log_end_offset()), (10, 10));
}

#[test]
fn follower_append_checks_offsets_and_crc_and_records_epochs() {
    let dir = tempfile::tempdir().unwrap();
    let mut log = Log::open(dir.path(), small_config(1 << 20)).unwrap();
    let stamped = |base: i64, epoch: i32| {
        let mut b = batch(3, 20, TS).to_vec();
        rb::stamp(&mut b, base, epoch);
        b
    };
    assert!(matches!(
        log.append_as_follower(&stamped(1, 0), TS),
        Err(LogError::OffsetMismatch {
            expected: 0,
            actual: 1
        })
    ));
    let info = log
        .append_as_follower(&[stamped(0, 1), stamped(3, 1), stamped(6, 4)].concat(), TS)
        .unwrap();
    assert_eq!((info.first_offset, info.last_offset), (0, 8));
    assert_eq!(log.epoch_entries(), entries(&[(1, 0), (4, 6)]));
    assert!(matches!(
        log.append_as_follower(&[stamped(9, 4), stamped(11, 4)].concat(), TS),
        Err(LogError::NonMonotonicOffset {
            expected: 12,
            actual: 11
        })
    ));
    assert!(matches!(
        log.append_as_follower(&[stamped(9, 4), stamped(13, 4)].concat(), TS),
        Err(LogError::NonMonotonicOffset { .. })
    ));
    let mut corrupt = stamped(9, 4);
    let last = corrupt.len() - 1;
    corrupt[last] ^= 1;
    assert!(matches!(
        log.append_as_follower(&corrupt, TS),
        Err(LogError::InvalidBatch(rb::BatchError::CrcMismatch { .. }))
    ));
    assert_eq!(log.log_end_offset(), 9, "rejected appends write nothing");
    // An older epoch from the leader is stored but not recorded as new.
    log.append_as_follower(&stamped(9, 2), TS).unwrap();
    assert_eq!(log.epoch_entries(), entries(&[(1, 0), (4, 6)]));
    assert_eq!(
        read_all(&log)[..],
        [stamped(0, 1), stamped(3, 1), stamped(6, 4), stamped(9, 2)].concat()[..]
    );
}

#[test]
fn retention_by_time_spares_the_active_segment_and_data_at_or_above_the_high_watermark() {
    let dir = tempfile::tempdir().unwrap();
    let one = batch(2, 50, TS).len() as u64;
    let config = LogConfig {
        retention_ms: 1000,
        ..small_config(one * 2)
    };
    let mut log = Log::open(dir.path(), config).unwrap();
    for i in 0..6 {
        log.append_as_leader(&batch(2, 50, TS + i * 100), i as i32, TS)
            .unwrap();
    }
    // Segments: [0,4) newest TS+100, [4,8) newest TS+300, [8,12) active.
    assert_eq!(log.segment_count(), 3);
    let info = log.delete_old_segments(TS + 1100, 12).unwrap();
    assert_eq!(
        info.deleted_segments, 0,
        "exactly retention_ms old is not expired"
    );
    let info = log.delete_old_segments(TS + 1101, 3).unwrap();
    assert_eq!(
        info.deleted_segments, 0,
        "segment 0 holds offset 3, at the high watermark"
    );
    let info = log.delete_old_segments(TS + 1101, 4).unwrap();
    assert_eq!(info.deleted_segments, 1);
    assert_eq!(info.deleted_bytes, one * 2);
    assert_eq!(info.log_start_offset, 4);
    assert_eq!(log.log_start_offset(), 4);
    assert!(!dir.path().join("00000000000000000000.log").exists());
    assert_eq!(
        log.epoch_entries()[0],
        EpochEntry {
            epoch: 2,
            start_offset: 4
        }
    );
    assert!(matches!(
        log.read(3, 100, 12, true),
        Err(LogError::OffsetOutOfRange { .. })
    ));
    // Everything expired, high watermark at the end: the active segment stays.
    let info = log.delete_old_segments(TS + 1_000_000, 12).unwrap();
    assert_eq!(info.deleted_segments, 1);
    assert_eq!(log.segment_count(), 1);
    assert_eq!(log.log_start_offset(), 8);
    assert_eq!(log.epoch_entries(), entries(&[(4, 8), (5, 10)]));
    drop(log);
    let log = Log::open(dir.path(), small_config(one * 2)).unwrap();
    assert_eq!(log.log_start_offset(), 8);
    assert_eq!(log.epoch_entries(), entries(&[(4, 8), (5, 10)]));
}

#[test]
fn retention_by_bytes_deletes_oldest_while_the_rest_stays_above_the_limit() {
    let dir = tempfile::tempdir().unwrap();
    let one = batch(2, 50, TS).len() as u64;
    let config = LogConfig {
        retention_ms: -1,
        retention_bytes: (one * 5) as i64,
        ..small_config(one * 2)
    };
    let mut log = Log::open(dir.path(), config).unwrap();
    fill(&mut log, 9, 2, 0); // 5 segments: 4 full of 2 batches, active with 1
    assert_eq!(log.segment_count(), 5);
    let info = log.delete_old_segments(TS, 6).unwrap();
    assert_eq!(
        info.deleted_segments, 1,
        "the high watermark protects segments from offset 4 on"
    );
    let info = log.delete_old_segments(TS, 18).unwrap();
    // 7 batches left; deleting 2 leaves 5 (= the limit); deleting 2 more would leave 3.
    assert_eq!(info.deleted_segments, 1);
    assert_eq!(log.size_bytes(), one * 5);
    assert_eq!(log.log_start_offset(), 8);
    let info = log.delete_old_segments(TS, 18).unwrap();
    assert_eq!(info.deleted_segments, 0);
}

#[test]
fn epoch_queries_follow_the_log() {
    let dir = tempfile::tempdir().unwrap();
    let mut log = Log::open(dir.path(), small_config(1 << 20)).unwrap();
    assert_eq!(log.end_offset_for_epoch(0), None);
    fill(&mut log, 2, 5, 1); // [0, 10) epoch 1
    fill(&mut log, 2, 5, 3); // [10, 20) epoch 3
    log.assign_epoch(5, 20).unwrap(); // a new leader that has not written yet
    assert_eq!(log.latest_epoch(), Some(5));
    assert_eq!(log.epoch_start_offset(3), Some(10));
    assert_eq!(log.epoch_start_offset(2), None);
    assert_eq!(
        log.end_offset_for_epoch(5),
        Some(EpochEndOffset {
            epoch: 5,
            end_offset: 20
        })
    );
    assert_eq!(
        log.end_offset_for_epoch(3),
        Some(EpochEndOffset {
            epoch: 3,
            end_offset: 20
        })
    );
    assert_eq!(
        log.end_offset_for_epoch(2),
        Some(EpochEndOffset {
            epoch: 1,
            end_offset: 10
        })
    );
    assert_eq!(
        log.end_offset_for_epoch(0),
        Some(EpochEndOffset {
            epoch: 0,
            end_offset: 0
        })
    );
    assert_eq!(log.end_offset_for_epoch(6), None);
    assert!(matches!(
        log.assign_epoch(6, 21),
        Err(LogError::InvalidEpochEntry { .. })
    ));
    // An unclean reopen drops the epoch that has no record.
    drop(log);
    let log = Log::open(dir.path(), small_config(1 << 20)).unwrap();
    assert_eq!(log.epoch_entries(), entries(&[(1, 0), (3, 10)]));
    let text = fs::read_to_string(dir.path().join("leader-epoch-checkpoint")).unwrap();
    assert_eq!(text, "0\n2\n1 0\n3 10\n");
}

#[test]
fn checkpoints_survive_reopen() {
    let dir = tempfile::tempdir().unwrap();
    let mut log = Log::open(dir.path(), small_config(1 << 20)).unwrap();
    assert_eq!(log.read_high_watermark(), None);
    fill(&mut log, 3, 5, 2);
    log.write_high_watermark(10).unwrap();
    log.close().unwrap();
    let log = Log::open(dir.path(), small_config(1 << 20)).unwrap();
    assert_eq!(log.read_high_watermark(), Some(10));
    assert_eq!(log.epoch_entries(), entries(&[(2, 0)]));
    assert_eq!(log.recovery_point(), 15);
    // A high watermark beyond what survived is clamped to the log end.
    log.write_high_watermark(99).unwrap();
    assert_eq!(log.read_high_watermark(), Some(15));
    fs::write(dir.path().join("high-watermark"), "garbage").unwrap();
    assert_eq!(log.read_high_watermark(), None);
}

#[test]
fn clean_shutdown_is_marked_and_consumed() {
    let dir = tempfile::tempdir().unwrap();
    let marker = dir.path().join("clean-shutdown");
    let mut log = Log::open(dir.path(), small_config(1000)).unwrap();
    fill(&mut log, 5, 3, 0);
    let before = read_all(&log);
    log.close().unwrap();
    assert!(marker.exists());
    let log = Log::open(dir.path(), small_config(1000)).unwrap();
    assert!(
        !marker.exists(),
        "a crash after this open must not look clean"
    );
    assert_eq!(read_all(&log), before);
    assert_eq!(log.recovery_point(), 15);
}

#[test]
fn unclean_reopen_cuts_a_torn_tail_and_clean_reopen_still_checks_the_last_batch() {
    for clean in [false, true] {
        let dir = tempfile::tempdir().unwrap();
        let mut log = Log::open(dir.path(), small_config(1 << 20)).unwrap();
        fill(&mut log, 4, 3, 0);
        let before = read_all(&log);
        if clean {
            log.close().unwrap();
        } else {
            drop(log);
        }
        // Half a batch after the last whole one.
        let extra = batch(3, 50, TS);
        let path = dir.path().join("00000000000000000000.log");
        let mut file = OpenOptions::new().append(true).open(&path).unwrap();
        std::io::Write::write_all(&mut file, &extra[..extra.len() / 2]).unwrap();
        drop(file);
        let mut log = Log::open(dir.path(), small_config(1 << 20)).unwrap();
        assert_eq!(log.log_end_offset(), 12, "clean: {clean}");
        assert_eq!(read_all(&log), before);
        assert_eq!(fs::metadata(&path).unwrap().len(), before.len() as u64);
        fill(&mut log, 1, 3, 0);
        assert_eq!(log.log_end_offset(), 15);
    }
}

#[test]
fn only_segments_past_the_recovery_point_are_revalidated() {
    let dir = tempfile::tempdir().unwrap();
    let one = batch(2, 50, TS).len() as u64;
    let mut log = Log::open(dir.path(), small_config(one * 2)).unwrap();
    fill(&mut log, 5, 2, 0); // segments 0, 4 (rolled, fsynced) and 8 (active)
    assert_eq!(
        log.recovery_point(),
        8,
        "rolling flushes the outgoing segment"
    );
    drop(log);
    // Corrupt a record byte (CRC-covered) in the first segment and in the active one.
    let flip = |name: &str| {
        let path = dir.path().join(name);
        let mut bytes = fs::read(&path).unwrap();
        bytes[HEADER_LEN + 5] ^= 0xff;
        fs::write(&path, bytes).unwrap();
    };
    flip("00000000000000000000.log");
    flip("00000000000000000008.log");
    let log = Log::open(dir.path(), small_config(one * 2)).unwrap();
    assert_eq!(
        log.log_end_offset(),
        8,
        "the active segment was validated and cut"
    );
    assert_eq!(log.segment_count(), 3);
    assert_eq!(
        log.read(0, 10, 8, true).unwrap().records.len() as u64,
        one,
        "the flushed segment was trusted"
    );
}

#[test]
fn a_garbled_or_missing_index_is_rebuilt() {
    let dir = tempfile::tempdir().unwrap();
    let config = small_config(1 << 20);
    let mut log = Log::open(dir.path(), config.clone()).unwrap();
    fill(&mut log, 30, 3, 0);
    let before = read_all(&log);
    log.close().unwrap();
    let index = dir.path().join("00000000000000000000.index");
    let time_index = dir.path().join("00000000000000000000.timeindex");
    assert!(fs::metadata(&index).unwrap().len() > 0);
    let good = fs::read(&index).unwrap();

    let mut garbled = good.clone();
    garbled[5] ^= 0x40; // a position that no longer matches
    for damage in [Some(garbled), Some(good[..good.len() - 3].to_vec()), None] {
        match &damage {
            Some(bytes) => fs::write(&index, bytes).unwrap(),
            None => fs::remove_file(&time_index).unwrap(),
        }
        let mut log = Log::open(dir.path(), config.clone()).unwrap();
        assert_eq!(read_all(&log), before);
        for offset in 0..90 {
            let read = log.read(offset, 1, 90, true).unwrap();
            assert_eq!(headers(&read.records)[0].base_offset, offset / 3 * 3);
        }
        log.close().unwrap();
        assert_eq!(
            fs::read(&index).unwrap(),
            good,
            "the rebuilt index is written back"
        );
    }
}

#[test]
fn a_garbled_epoch_checkpoint_is_rebuilt_from_the_batches() {
    let dir = tempfile::tempdir().unwrap();
    let mut log = Log::open(dir.path(), small_config(1000)).unwrap();
    fill(&mut log, 3, 3, 1);
    fill(&mut log, 3, 3, 4);
    fill(&mut log, 3, 3, 6);
    log.close().unwrap();
    let checkpoint = dir.path().join("leader-epoch-checkpoint");
    for garbage in ["0\n3\n1 0\n4 9\n", "nonsense", ""] {
        fs::write(&checkpoint, garbage).unwrap();
        let mut log = Log::open(dir.path(), small_config(1000)).unwrap();
        assert_eq!(log.epoch_entries(), entries(&[(1, 0), (4, 9), (6, 18)]));
        log.close().unwrap();
    }
    fs::remove_file(&checkpoint).unwrap();
    let log = Log::open(dir.path(), small_config(1000)).unwrap();
    assert_eq!(log.epoch_entries(), entries(&[(1, 0), (4, 9), (6, 18)]));
}

#[test]
fn flush_policy_moves_the_recovery_point() {
    let dir = tempfile::tempdir().unwrap();
    let every_record = LogConfig {
        flush_messages: 1,
        ..small_config(1 << 20)
    };
    let mut log = Log::open(dir.path(), every_record).unwrap();
    for i in 1..=5 {
        fill(&mut log, 1, 2, 0);
        assert_eq!(log.recovery_point(), i * 2);
    }

    let dir = tempfile::tempdir().unwrap();
    let mut log = Log::open(dir.path(), small_config(1 << 20)).unwrap();
    fill(&mut log, 5, 2, 0);
    assert_eq!(
        log.recovery_point(),
        0,
        "the default never flushes by count or time"
    );
    assert!(!log.flush_if_due(i64::MAX).unwrap());
    log.flush().unwrap();
    assert_eq!(log.recovery_point(), 10);

    let dir = tempfile::tempdir().unwrap();
    let by_time = LogConfig {
        flush_ms: 1000,
        ..small_config(1 << 20)
    };
    let mut log = Log::open(dir.path(), by_time).unwrap();
    log.append_as_leader(&batch(2, 10, TS), 0, 5_000).unwrap();
    log.append_as_leader(&batch(2, 10, TS), 0, 5_600).unwrap();
    assert!(!log.flush_if_due(5_999).unwrap());
    assert_eq!(log.recovery_point(), 0);
    assert!(
        log.flush_if_due(6_000).unwrap(),
        "the oldest unflushed append is 1000 ms old"
    );
    assert_eq!(log.recovery_point(), 4);
    assert!(!log.flush_if_due(100_000).unwrap(), "nothing left to flush");
    // An append that finds the policy due flushes at once.
    log.append_as_leader(&batch(2, 10, TS), 0, 7_000).unwrap();
    log.append_as_leader(&batch(2, 10, TS), 0, 8_000).unwrap();
    assert_eq!(log.recovery_point(), 8);
}

#[test]
fn bytes_between_counts_whole_batches_like_a_read() {
    let dir = tempfile::tempdir().unwrap();
    let one = batch(4, 50, TS).len() as u64;
    let mut log = Log::open(dir.path(), small_config(one * 3)).unwrap();
    fill(&mut log, 8, 4, 0); // 32 offsets over 3 segments
    for from in 0..=32 {
        for to in from..=34 {
            let expected = log
                .read(from.min(32), usize::MAX, to, false)
                .unwrap()
                .records
                .len() as u64;
            assert_eq!(
                log.bytes_between(from, to).unwrap(),
                expected,
                "[{from}, {to})"
            );
        }
    }
    assert_eq!(log.bytes_between(0, 32).unwrap(), one * 8);
    assert_eq!(log.bytes_between(20, 10).unwrap(), 0);
}

#[test]
fn invalid_config_is_rejected() {
    let dir = tempfile::tempdir().unwrap();
    for config in [
        LogConfig {
            segment_bytes: 10,
            ..LogConfig::default()
        },
        LogConfig {
            segment_bytes: 1 << 33,
            ..LogConfig::default()
        },
        LogConfig {
            retention_ms: -2,
            ..LogConfig::default()
        },
        LogConfig {
            retention_bytes: -2,
            ..LogConfig::default()
        },
        LogConfig {
            flush_messages: 0,
            ..LogConfig::default()
        },
    ] {
        assert!(matches!(
            Log::open(dir.path(), config),
            Err(LogError::InvalidConfig(_))
        ));
    }
}

#[test]
fn a_failed_roll_undoes_the_part_of_the_append_already_written() {
    let dir = tempfile::tempdir().unwrap();
    let one = batch(2, 50, TS).len() as u64;
    let mut log = Log::open(dir.path(), small_config(one * 2)).unwrap();
    fill(&mut log, 1, 2, 0);
    // The segment this append would roll to cannot be created.
    let blocker = dir.path().join("00000000000000000004.log");
    fs::write(&blocker, b"").unwrap();
    let three: Vec<u8> = (0..3).flat_map(|_| batch(2, 50, TS).to_vec()).collect();
    assert!(matches!(
        log.append_as_leader(&three, 0, TS),
        Err(LogError::Io { .. })
    ));
    assert_eq!(log.log_end_offset(), 2);
    assert_eq!(log.segment_count(), 1);
    assert_eq!(
        fs::metadata(dir.path().join("00000000000000000000.log"))
            .unwrap()
            .len(),
        one
    );
    let before = read_all(&log);
    drop(log);
    // The stray empty segment does not continue the log; recovery removes it.
    fs::write(&blocker, b"").unwrap();
    let mut log = Log::open(dir.path(), small_config(one * 2)).unwrap();
    assert!(!blocker.exists());
    assert_eq!(read_all(&log), before);
    log.append_as_leader(&three, 0, TS).unwrap();
    assert_eq!(log.log_end_offset(), 8);
}

#[test]
fn defaults_are_kafkas_and_the_log_can_sit_behind_a_shared_lock() {
    let config = LogConfig::default();
    assert_eq!(config.segment_bytes, 1 << 30);
    assert_eq!(config.segment_ms, Some(604_800_000));
    assert_eq!(config.retention_ms, 604_800_000);
    assert_eq!(config.retention_bytes, -1);
    assert_eq!(config.index_interval_bytes, 4096);
    assert_eq!(config.flush_messages, u64::MAX);
    assert_eq!(config.flush_ms, u64::MAX);
    fn shareable<T: Send + Sync>() {}
    shareable::<Log>();
}

/// A batch of producer `pid` in `epoch`: `records` records from sequence `seq`.
fn producer_batch(pid: i64, epoch: i16, seq: i32, records: usize) -> bytes::Bytes {
    let mut b = rb::BatchBuilder::new(TS);
    for _ in 0..records {
        b.push(TS, None, Some(&[7u8; 50]), &[]);
    }
    b.set_producer(pid, epoch, seq);
    b.finish()
}

#[test]
fn producer_state_follows_appends_truncation_retention_and_reopening() {
    let dir = tempfile::tempdir().unwrap();
    let one = producer_batch(1, 0, 0, 4).len();
    let config = || LogConfig {
        retention_bytes: one as i64 * 2,
        ..small_config(one as u64 * 2)
    };
    let mut log = Log::open(dir.path(), config()).unwrap();
    // Producer 1: sequences 0..4, 4..8, 8..12 at offsets 0, 4, 8; producer 2 at 12.
    for seq in [0, 4, 8] {
        log.append_as_leader(&producer_batch(1, 0, seq, 4), 1, TS)
            .unwrap();
    }
    log.append_as_leader(&producer_batch(2, 3, 0, 4), 1, TS)
        .unwrap();
    let header = |pid, epoch, seq| headers(&producer_batch(pid, epoch, seq, 4))[0];
    let dup = |first_offset| SequenceCheck::Duplicate {
        first_offset,
        last_offset: first_offset + 3,
    };
    assert_eq!(log.producer_states().check(&header(1, 0, 4)), Ok(dup(4)));
    assert_eq!(
        log.producer_states().check(&header(1, 0, 12)),
        Ok(SequenceCheck::Append)
    );
    assert_eq!(log.producer_states().len(), 2);

    // A follower's truncation removes the batch at 8: it is no duplicate any more,
    // and sequence 8 is next again (KIP-101).
    log.truncate_to(8).unwrap();
    assert_eq!(
        log.producer_states().check(&header(1, 0, 8)),
        Ok(SequenceCheck::Append)
    );
    assert!(log.producer_states().check(&header(1, 0, 12)).is_err());
    assert!(log.producer_states().get(2).is_none());
    // A follower's appends fold in too.
    let mut stamped = producer_batch(1, 0, 8, 4).to_vec();
    rb::stamp(&mut stamped, 8, 1);
    log.append_as_follower(&stamped, TS).unwrap();
    assert_eq!(log.producer_states().check(&header(1, 0, 8)), Ok(dup(8)));

    // Reopened, the state is rebuilt from the log.
    let before = log.producer_states().clone();
    drop(log);
    let mut log = Log::open(dir.path(), config()).unwrap();
    assert_eq!(log.producer_states(), &before);

    // Retention: the segment [0, 8) goes, and with it what the log said of it.
    log.append_as_leader(&producer_batch(1, 0, 12, 4), 1, TS)
        .unwrap();
    let deleted = log.delete_old_segments(TS, 16).unwrap();
    assert_eq!(deleted.log_start_offset, 8);
    assert!(log.producer_states().check(&header(1, 0, 4)).is_err());
    assert_eq!(log.producer_states().check(&header(1, 0, 8)), Ok(dup(8)));
    let pruned = log.producer_states().clone();
    drop(log);
    assert_eq!(
        Log::open(dir.path(), config()).unwrap().producer_states(),
        &pruned
    );
}

/// The regions' bytes, read back.
fn region_bytes(read: &syncline_log::RegionRead) -> Vec<u8> {
    syncline_log::Records::Regions(read.regions.clone())
        .read()
        .unwrap()
        .to_vec()
}

#[test]
fn regions_hold_what_read_returns() {
    let dir = tempfile::tempdir().unwrap();
    let one = batch(2, 50, TS).len();
    let mut log = Log::open(dir.path(), small_config(one as u64 * 3)).unwrap();
    fill(&mut log, 10, 2, 0);
    assert!(log.segment_count() > 3);
    for offset in 0..=20 {
        for max_bytes in [
            0,
            1,
            one - 1,
            one,
            one + 1,
            one * 3,
            one * 5 + 7,
            usize::MAX,
        ] {
            for upper in [0, 5, 10, 19, 20, 100] {
                for min_one in [false, true] {
                    let read = log.read(offset, max_bytes, upper, min_one).unwrap();
                    let regions = log.read_regions(offset, max_bytes, upper, min_one).unwrap();
                    let at = format!("offset {offset} max {max_bytes} upper {upper} {min_one}");
                    assert_eq!(region_bytes(&regions), read.records.to_vec(), "{at}");
                    assert_eq!(regions.len(), read.records.len(), "{at}");
                    assert_eq!(regions.next_offset, read.next_offset, "{at}");
                    // At most one region per segment, none empty.
                    assert!(regions.regions.iter().all(|r| !r.is_empty()), "{at}");
                }
            }
        }
    }
    assert!(matches!(
        log.read_regions(21, 100, 100, true),
        Err(LogError::OffsetOutOfRange { .. })
    ));
}

#[test]
fn a_truncation_makes_regions_read_before_it_stale() {
    let dir = tempfile::tempdir().unwrap();
    let mut log = Log::open(dir.path(), small_config(1 << 20)).unwrap();
    fill(&mut log, 4, 5, 0);
    let before = log.read_regions(0, usize::MAX, 20, true).unwrap();
    let expected = log.read(0, usize::MAX, 20, true).unwrap().records;
    assert_eq!(region_bytes(&before), expected.to_vec());
    // Appends do not invalidate regions.
    fill(&mut log, 1, 5, 0);
    for r in &before.regions {
        r.check().unwrap();
    }
    // A follower's truncation, then other batches written where the old ones were.
    log.truncate_to(10).unwrap();
    fill(&mut log, 2, 7, 1);
    for r in &before.regions {
        assert!(r.check().is_err());
    }
    let err = syncline_log::Records::Regions(before.regions.clone())
        .read()
        .unwrap_err();
    assert!(err.to_string().contains("truncated"), "{err}");
    // Regions read after the truncation are good.
    let after = log.read_regions(0, usize::MAX, 100, true).unwrap();
    let expected = log.read(0, usize::MAX, 100, true).unwrap().records;
    assert_eq!(region_bytes(&after), expected.to_vec());
    // So are the regions of a log restarted elsewhere, until its next truncation.
    log.truncate_fully_and_start_at(50).unwrap();
    assert!(after.regions.iter().all(|r| r.check().is_err()));
}

#[test]
fn a_region_of_a_file_cut_behind_the_log_fails_to_read() {
    let dir = tempfile::tempdir().unwrap();
    let mut log = Log::open(dir.path(), small_config(1 << 20)).unwrap();
    fill(&mut log, 4, 5, 0);
    let read = log.read_regions(0, usize::MAX, 20, true).unwrap();
    assert_eq!(read.regions.len(), 1);
    // Something else cut the file (the log cannot know).
    let file = segment_files(dir.path())[0].clone();
    let len = fs::metadata(&file).unwrap().len();
    OpenOptions::new()
        .write(true)
        .open(&file)
        .unwrap()
        .set_len(len / 2)
        .unwrap();
    let err = syncline_log::Records::Regions(read.regions)
        .read()
        .unwrap_err();
    assert_eq!(err.kind(), std::io::ErrorKind::UnexpectedEof);
}
