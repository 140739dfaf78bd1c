//! The metadata log file: round trip, torn and corrupt tails, reopen-and-append.

use std::fs::{self, OpenOptions};
use std::io::Write;

use syncline_controller::{MetadataLog, MetadataLogError, MAX_RECORD_BYTES, METADATA_LOG_FILE};
use syncline_proto::pb::{self, metadata_record::Record};

fn fence(broker_id: i32) -> pb::MetadataRecord {
    pb::MetadataRecord {
        record: Some(Record::FenceBroker(pb::FenceBrokerRecord {
            broker_id,
            broker_epoch: 7,
        })),
    }
}

fn partition(partition: i32) -> pb::MetadataRecord {
    pb::MetadataRecord {
        record: Some(Record::Partition(pb::PartitionRecord {
            topic: "events".into(),
            partition,
            replicas: vec![1, 2, 3],
            isr: vec![1, 2],
            leader: 1,
            leader_epoch: 4,
            partition_epoch: 9,
            adding_replicas: vec![],
            removing_replicas: vec![],
        })),
    }
}

fn records(n: i32) -> Vec<pb::MetadataRecord> {
    (0..n)
        .map(|i| if i % 2 == 0 { partition(i) } else { fence(i) })
        .collect()
}

fn frame_len(r: &pb::MetadataRecord) -> u64 {
    8 + prost::Message::encoded_len(r) as u64
}

fn with_offsets(records: &[pb::MetadataRecord]) -> Vec<(i64, pb::MetadataRecord)> {
    (0..).zip(records.iter().cloned()).collect()
}

#[test]
fn appended_records_come_back_with_their_offsets() {
    let dir = tempfile::tempdir().unwrap();
    let all = records(5);
    {
        let (mut log, replayed) = MetadataLog::open(dir.path()).unwrap();
        assert!(replayed.is_empty());
        assert_eq!(log.append(&all[..3]).unwrap(), 0);
        assert_eq!(log.append(&[]).unwrap(), 3, "an empty append is a no-op");
        assert_eq!(log.append(&all[3..]).unwrap(), 3);
        assert_eq!(log.next_offset(), 5);
    }
    let (log, replayed) = MetadataLog::open(dir.path()).unwrap();
    assert_eq!(replayed, with_offsets(&all));
    assert_eq!(log.next_offset(), 5);
    let expected_len: u64 = all.iter().map(frame_len).sum();
    assert_eq!(fs::metadata(log.path()).unwrap().len(), expected_len);
}

#[test]
fn the_frame_is_length_crc_payload() {
    let dir = tempfile::tempdir().unwrap();
    let (mut log, _) = MetadataLog::open(dir.path()).unwrap();
    let record = fence(3);
    log.append(std::slice::from_ref(&record)).unwrap();
    let bytes = fs::read(dir.path().join(METADATA_LOG_FILE)).unwrap();
    let payload = prost::Message::encode_to_vec(&record);
    assert_eq!(&bytes[..4], &(payload.len() as u32).to_be_bytes());
    assert_eq!(&bytes[4..8], &crc32c::crc32c(&payload).to_be_bytes());
    assert_eq!(&bytes[8..], &payload[..]);
}

/// Writes `n` records, lets `damage` alter the file, reopens: returns what replays and
/// the file length afterwards.
fn reopen_after(
    n: i32,
    damage: impl FnOnce(&std::path::Path),
) -> (Vec<(i64, pb::MetadataRecord)>, u64, tempfile::TempDir) {
    let dir = tempfile::tempdir().unwrap();
    let (mut log, _) = MetadataLog::open(dir.path()).unwrap();
    log.append(&records(n)).unwrap();
    drop(log);
    damage(&dir.path().join(METADATA_LOG_FILE));
    let (log, replayed) = MetadataLog::open(dir.path()).unwrap();
    let len = fs::metadata(log.path()).unwrap().len();
    (replayed, len, dir)
}

fn prefix_len(n: usize) -> u64 {
    records(3)[..n].iter().map(frame_len).sum()
}

#[test]
fn a_torn_last_record_is_cut_off() {
    let (replayed, len, _dir) = reopen_after(3, |path| {
        let full = fs::metadata(path).unwrap().len();
        OpenOptions::new()
            .write(true)
            .open(path)
            .unwrap()
            .set_len(full - 3)
            .unwrap();
    });
    assert_eq!(replayed, with_offsets(&records(3)[..2]));
    assert_eq!(len, prefix_len(2), "the torn bytes are gone from the file");
}

#[test]
fn a_torn_header_is_cut_off() {
    let (replayed, len, _dir) = reopen_after(3, |path| {
        OpenOptions::new()
            .append(true)
            .open(path)
            .unwrap()
            .write_all(&[0, 0, 1])
            .unwrap();
    });
    assert_eq!(replayed, with_offsets(&records(3)));
    assert_eq!(len, prefix_len(3));
}

#[test]
fn a_flipped_byte_drops_that_record_and_everything_after_it() {
    let (replayed, len, _dir) = reopen_after(3, |path| {
        let mut bytes = fs::read(path).unwrap();
        let in_second_payload = prefix_len(1) as usize + 8 + 2;
        bytes[in_second_payload] ^= 0x40;
        fs::write(path, bytes).unwrap();
    });
    assert_eq!(replayed, with_offsets(&records(3)[..1]));
    assert_eq!(len, prefix_len(1));
}

#[test]
fn a_zero_filled_tail_is_cut_off() {
    // What a file system may leave after a crash: length 0 and CRC 0 "match".
    let (replayed, len, _dir) = reopen_after(2, |path| {
        OpenOptions::new()
            .append(true)
            .open(path)
            .unwrap()
            .write_all(&[0; 64])
            .unwrap();
    });
    assert_eq!(replayed, with_offsets(&records(2)));
    assert_eq!(len, prefix_len(2));
}

#[test]
fn an_absurd_length_is_corruption_not_an_allocation() {
    let (replayed, len, _dir) = reopen_after(1, |path| {
        let mut f = OpenOptions::new().append(true).open(path).unwrap();
        f.write_all(&u32::MAX.to_be_bytes()).unwrap();
        f.write_all(&[0; 12]).unwrap();
    });
    assert_eq!(replayed, with_offsets(&records(1)));
    assert_eq!(len, prefix_len(1));
}

#[test]
fn appending_after_a_truncated_tail_continues_cleanly() {
    let dir = tempfile::tempdir().unwrap();
    let (mut log, _) = MetadataLog::open(dir.path()).unwrap();
    log.append(&records(3)).unwrap();
    drop(log);
    let path = dir.path().join(METADATA_LOG_FILE);
    let full = fs::metadata(&path).unwrap().len();
    OpenOptions::new()
        .write(true)
        .open(&path)
        .unwrap()
        .set_len(full - 1)
        .unwrap();

    let (mut log, replayed) = MetadataLog::open(dir.path()).unwrap();
    assert_eq!(replayed.len(), 2);
    assert_eq!(log.append(&[fence(42)]).unwrap(), 2);
    drop(log);

    let (log, replayed) = MetadataLog::open(dir.path()).unwrap();
    let mut expected = records(3)[..2].to_vec();
    expected.push(fence(42));
    assert_eq!(replayed, with_offsets(&expected));
    assert_eq!(log.next_offset(), 3);
}

#[test]
fn records_replay_would_refuse_are_not_written() {
    let dir = tempfile::tempdir().unwrap();
    let (mut log, _) = MetadataLog::open(dir.path()).unwrap();
    let empty = pb::MetadataRecord { record: None };
    assert!(matches!(
        log.append(&[fence(1), empty]),
        Err(MetadataLogError::EmptyRecord)
    ));
    let huge = pb::MetadataRecord {
        record: Some(Record::Topic(pb::TopicRecord {
            name: "t".into(),
            configs: [("k".to_owned(), "v".repeat(MAX_RECORD_BYTES))]
                .into_iter()
                .collect(),
        })),
    };
    assert!(matches!(
        log.append(&[fence(1), huge]),
        Err(MetadataLogError::RecordTooLarge { .. })
    ));
    assert_eq!(
        fs::metadata(log.path()).unwrap().len(),
        0,
        "nothing of either batch was written"
    );
    assert_eq!(log.append(&[fence(1)]).unwrap(), 0);
}

#[test]
fn open_creates_the_directory() {
    let dir = tempfile::tempdir().unwrap();
    let nested = dir.path().join("a").join("b");
    let (log, replayed) = MetadataLog::open(&nested).unwrap();
    assert!(replayed.is_empty());
    assert_eq!(log.path(), nested.join(METADATA_LOG_FILE));
    assert!(log.path().exists());
}
