//! The storage seam (`syncline_log::disk`): an installed disk sees every
//! segment write and takes every segment fsync, and a write it refuses fails
//! the append cleanly. One test in its own binary: the disk is process-wide.

mod common;

use std::io;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};

use common::batch;
use syncline_log::disk::{self, Disk};
use syncline_log::{Log, LogConfig, LogError};

const TS: i64 = 1_700_000_000_000;

#[derive(Debug, Default)]
struct Recording {
    /// ("write" | "sync", file name, length)
    calls: Mutex<Vec<(&'static str, String, u64)>>,
    full: Mutex<bool>,
}

fn name(path: &Path) -> String {
    path.file_name().unwrap().to_string_lossy().into_owned()
}

impl Disk for Recording {
    fn writing(&self, path: &Path, position: u64) -> io::Result<()> {
        if *self.full.lock().unwrap() {
            return Err(io::Error::new(io::ErrorKind::StorageFull, "disk full"));
        }
        self.calls
            .lock()
            .unwrap()
            .push(("write", name(path), position));
        Ok(())
    }

    fn sync(&self, path: &Path, len: u64) -> io::Result<()> {
        self.calls.lock().unwrap().push(("sync", name(path), len));
        Ok(())
    }
}

fn segment_len(dir: &Path) -> u64 {
    let path: PathBuf = dir.join(format!("{:020}.log", 0));
    std::fs::metadata(path).unwrap().len()
}

#[test]
fn the_disk_sees_segment_writes_takes_their_fsyncs_and_may_refuse_them() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("topic-0");
    let recording = Arc::new(Recording::default());
    disk::install(Some(recording.clone()));
    let config = LogConfig {
        flush_messages: 1,
        ..LogConfig::default()
    };
    let mut log = Log::open(&path, config).unwrap();
    log.append_as_leader(&batch(3, 50, TS), 0, TS).unwrap();
    let first = segment_len(&path);
    log.append_as_leader(&batch(2, 50, TS), 0, TS).unwrap();
    let second = segment_len(&path);
    let segment = format!("{:020}.log", 0);
    assert_eq!(
        *recording.calls.lock().unwrap(),
        vec![
            ("write", segment.clone(), 0),
            ("sync", segment.clone(), first),
            ("write", segment.clone(), first),
            ("sync", segment.clone(), second),
        ],
        "flush.messages=1: each append written, then fsynced whole"
    );

    *recording.full.lock().unwrap() = true;
    let e = log.append_as_leader(&batch(1, 50, TS), 0, TS).unwrap_err();
    assert!(
        matches!(&e, LogError::Io { source, .. } if source.kind() == io::ErrorKind::StorageFull),
        "{e:?}"
    );
    assert_eq!(log.log_end_offset(), 5, "nothing of the refused append");
    assert_eq!(segment_len(&path), second);
    *recording.full.lock().unwrap() = false;
    log.append_as_leader(&batch(1, 50, TS), 0, TS).unwrap();
    assert_eq!(
        log.log_end_offset(),
        6,
        "the log goes on once there is room"
    );
    disk::install(None);
}
