//! A segment's sparse index: every `index_interval_bytes` of batches, the relative
//! offset and file position of a batch, and the largest record timestamp up to and
//! including that batch.
//!
//! Kept in memory and persisted as two append-only files, `.index` (relative offset
//! u32, position u32) and `.timeindex` (max timestamp i64, relative offset u32), both
//! big-endian. Entries are written lazily — when the segment stops being active
//! (roll, close) or is truncated — because the active segment is always rebuilt from
//! its batches after a crash; an index on disk is only ever read for a segment whose
//! batches were fsynced with it. Even then it is checked before use and rebuilt from
//! the batches when it does not hold together.

use std::fs::{self, OpenOptions};
use std::io;
use std::os::unix::fs::FileExt;
use std::path::{Path, PathBuf};

use crate::error::{IoContext, LogError};

const OFFSET_ENTRY_BYTES: usize = 8;
const TIME_ENTRY_BYTES: usize = 12;

/// One index point.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct IndexEntry {
    /// Base offset of the batch, minus the segment's base offset.
    pub(crate) relative_offset: u32,
    /// Byte position of the batch in the segment file.
    pub(crate) position: u32,
    /// Largest record timestamp of the segment's batches up to this one.
    pub(crate) max_timestamp: i64,
}

pub(crate) struct SegmentIndex {
    offset_path: PathBuf,
    time_path: PathBuf,
    entries: Vec<IndexEntry>,
    /// `entries[..persisted]` are in the files (after `persist`).
    persisted: usize,
    /// The files differ from `entries[..persisted]` or may be longer.
    dirty: bool,
}

impl std::fmt::Debug for SegmentIndex {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("SegmentIndex")
            .field("offset_path", &self.offset_path)
            .field("entries", &self.entries.len())
            .field("persisted", &self.persisted)
            .finish()
    }
}

impl SegmentIndex {
    /// An empty index whose files will be (re)written on the next `persist`.
    pub(crate) fn empty(offset_path: PathBuf, time_path: PathBuf) -> Self {
        SegmentIndex {
            offset_path,
            time_path,
            entries: Vec::new(),
            persisted: 0,
            dirty: true,
        }
    }

    /// Loads the index files of a segment whose file is `segment_bytes` long.
    /// Returns the index and, when the files were missing or did not hold together,
    /// why they were discarded (the index is then empty, to be rebuilt).
    pub(crate) fn load(
        offset_path: PathBuf,
        time_path: PathBuf,
        segment_bytes: u64,
    ) -> Result<(Self, Option<String>), LogError> {
        let mut index = Self::empty(offset_path, time_path);
        match index.read_entries(segment_bytes)? {
            Ok(entries) => {
                index.persisted = entries.len();
                index.entries = entries;
                index.dirty = false;
                Ok((index, None))
            }
            Err(reason) => Ok((index, Some(reason))),
        }
    }

    fn read_entries(
        &self,
        segment_bytes: u64,
    ) -> Result<Result<Vec<IndexEntry>, String>, LogError> {
        // A batch takes more than 12 bytes, so an index file larger than its segment
        // is garbage; checking first keeps a garbled length from costing memory.
        let Some(offsets) = read_bounded(&self.offset_path, segment_bytes)? else {
            return Ok(Err("index file missing or oversized".into()));
        };
        let Some(times) = read_bounded(&self.time_path, segment_bytes)? else {
            return Ok(Err("time index file missing or oversized".into()));
        };
        if offsets.len() % OFFSET_ENTRY_BYTES != 0
            || times.len() % TIME_ENTRY_BYTES != 0
            || offsets.len() / OFFSET_ENTRY_BYTES != times.len() / TIME_ENTRY_BYTES
        {
            return Ok(Err(format!(
                "index sizes do not match ({} and {} bytes)",
                offsets.len(),
                times.len()
            )));
        }
        let mut entries: Vec<IndexEntry> = Vec::with_capacity(offsets.len() / OFFSET_ENTRY_BYTES);
        for (o, t) in offsets
            .chunks_exact(OFFSET_ENTRY_BYTES)
            .zip(times.chunks_exact(TIME_ENTRY_BYTES))
        {
            let entry = IndexEntry {
                relative_offset: u32::from_be_bytes([o[0], o[1], o[2], o[3]]),
                position: u32::from_be_bytes([o[4], o[5], o[6], o[7]]),
                max_timestamp: i64::from_be_bytes([t[0], t[1], t[2], t[3], t[4], t[5], t[6], t[7]]),
            };
            let time_offset = u32::from_be_bytes([t[8], t[9], t[10], t[11]]);
            let follows = entries.last().is_none_or(|prev| {
                entry.relative_offset > prev.relative_offset
                    && entry.position > prev.position
                    && entry.max_timestamp >= prev.max_timestamp
            });
            if time_offset != entry.relative_offset
                || !follows
                || u64::from(entry.position) >= segment_bytes
            {
                return Ok(Err(format!("entry {} is inconsistent", entries.len())));
            }
            entries.push(entry);
        }
        Ok(Ok(entries))
    }

    #[cfg(test)]
    pub(crate) fn entries(&self) -> &[IndexEntry] {
        &self.entries
    }

    pub(crate) fn last(&self) -> Option<IndexEntry> {
        self.entries.last().copied()
    }

    /// The last entry at or before `relative_offset`.
    pub(crate) fn floor(&self, relative_offset: u32) -> Option<IndexEntry> {
        let i = self
            .entries
            .partition_point(|e| e.relative_offset <= relative_offset);
        i.checked_sub(1).map(|i| self.entries[i])
    }

    /// The last entry whose running max timestamp is below `target`: every batch
    /// up to and including its batch is older than `target`.
    pub(crate) fn last_older_than(&self, target: i64) -> Option<IndexEntry> {
        let i = self.entries.partition_point(|e| e.max_timestamp < target);
        i.checked_sub(1).map(|i| self.entries[i])
    }

    pub(crate) fn push(&mut self, entry: IndexEntry) {
        debug_assert!(self.last().is_none_or(
            |l| l.relative_offset < entry.relative_offset && l.position < entry.position
        ));
        self.entries.push(entry);
        self.dirty = true;
    }

    /// Drops the entries of batches at or after `position`.
    pub(crate) fn truncate_from_position(&mut self, position: u32) {
        let keep = self.entries.partition_point(|e| e.position < position);
        if keep < self.entries.len() {
            self.entries.truncate(keep);
            self.persisted = self.persisted.min(keep);
            self.dirty = true;
        }
    }

    /// Makes the files hold exactly the in-memory entries, durably.
    pub(crate) fn persist(&mut self) -> Result<(), LogError> {
        if !self.dirty {
            return Ok(());
        }
        let new = &self.entries[self.persisted..];
        let mut offsets = Vec::with_capacity(new.len() * OFFSET_ENTRY_BYTES);
        let mut times = Vec::with_capacity(new.len() * TIME_ENTRY_BYTES);
        for e in new {
            offsets.extend_from_slice(&e.relative_offset.to_be_bytes());
            offsets.extend_from_slice(&e.position.to_be_bytes());
            times.extend_from_slice(&e.max_timestamp.to_be_bytes());
            times.extend_from_slice(&e.relative_offset.to_be_bytes());
        }
        write_tail(
            &self.offset_path,
            self.persisted * OFFSET_ENTRY_BYTES,
            &offsets,
        )?;
        write_tail(&self.time_path, self.persisted * TIME_ENTRY_BYTES, &times)?;
        self.persisted = self.entries.len();
        self.dirty = false;
        Ok(())
    }

    pub(crate) fn delete_files(&self) -> Result<(), LogError> {
        remove_if_exists(&self.offset_path)?;
        remove_if_exists(&self.time_path)
    }
}

/// Cuts `path` to `keep` bytes, appends `bytes`, and fsyncs.
fn write_tail(path: &Path, keep: usize, bytes: &[u8]) -> Result<(), LogError> {
    let file = OpenOptions::new()
        .write(true)
        .create(true)
        .truncate(false)
        .open(path)
        .ctx(path)?;
    file.set_len(keep as u64).ctx(path)?;
    file.write_all_at(bytes, keep as u64).ctx(path)?;
    file.sync_data().ctx(path)
}

/// The file's bytes, or `None` when it is missing or larger than `limit`.
fn read_bounded(path: &Path, limit: u64) -> Result<Option<Vec<u8>>, LogError> {
    match fs::metadata(path) {
        Ok(meta) if meta.len() > limit => Ok(None),
        Ok(_) => fs::read(path).map(Some).ctx(path),
        Err(e) if e.kind() == io::ErrorKind::NotFound => Ok(None),
        Err(e) => Err(e).ctx(path),
    }
}

pub(crate) fn remove_if_exists(path: &Path) -> Result<(), LogError> {
    match fs::remove_file(path) {
        Ok(()) => Ok(()),
        Err(e) if e.kind() == io::ErrorKind::NotFound => Ok(()),
        Err(e) => Err(e).ctx(path),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn entry(rel: u32, pos: u32, ts: i64) -> IndexEntry {
        IndexEntry {
            relative_offset: rel,
            position: pos,
            max_timestamp: ts,
        }
    }

    fn paths(dir: &Path) -> (PathBuf, PathBuf) {
        (dir.join("0.index"), dir.join("0.timeindex"))
    }

    #[test]
    fn persist_load_truncate_round_trip() {
        let dir = tempfile::tempdir().unwrap();
        let (o, t) = paths(dir.path());
        let mut index = SegmentIndex::empty(o.clone(), t.clone());
        index.push(entry(3, 100, 7));
        index.push(entry(9, 250, 7));
        index.persist().unwrap();
        index.push(entry(12, 400, 9));
        index.persist().unwrap();
        assert_eq!(fs::metadata(&o).unwrap().len(), 24);
        assert_eq!(fs::metadata(&t).unwrap().len(), 36);

        let (loaded, why) = SegmentIndex::load(o.clone(), t.clone(), 1000).unwrap();
        assert_eq!(why, None);
        assert_eq!(loaded.entries(), index.entries());
        assert_eq!(loaded.floor(2), None);
        assert_eq!(loaded.floor(3), Some(entry(3, 100, 7)));
        assert_eq!(loaded.floor(11), Some(entry(9, 250, 7)));
        assert_eq!(loaded.floor(u32::MAX), Some(entry(12, 400, 9)));

        index.truncate_from_position(250);
        index.push(entry(5, 300, 8));
        index.persist().unwrap();
        let (loaded, _) = SegmentIndex::load(o, t, 1000).unwrap();
        assert_eq!(loaded.entries(), &[entry(3, 100, 7), entry(5, 300, 8)]);
    }

    #[test]
    fn garbled_files_are_discarded() {
        let dir = tempfile::tempdir().unwrap();
        let (o, t) = paths(dir.path());
        let (_, why) = SegmentIndex::load(o.clone(), t.clone(), 1000).unwrap();
        assert!(why.is_some(), "missing files");

        let mut index = SegmentIndex::empty(o.clone(), t.clone());
        index.push(entry(3, 100, 7));
        index.push(entry(9, 250, 8));
        index.persist().unwrap();
        let good_offsets = fs::read(&o).unwrap();

        let cases: Vec<(Vec<u8>, u64)> = vec![
            (good_offsets[..12].to_vec(), 1000), // torn entry
            (good_offsets.clone(), 200),         // position past the segment end
            ([&good_offsets[8..], &good_offsets[..8]].concat(), 1000), // not increasing
            (vec![0xff; 16], 1000),              // does not match the time index
            (good_offsets.clone(), 10),          // larger than the segment
        ];
        for (bytes, segment_bytes) in cases {
            fs::write(&o, &bytes).unwrap();
            let (loaded, why) = SegmentIndex::load(o.clone(), t.clone(), segment_bytes).unwrap();
            assert!(why.is_some(), "{bytes:?}");
            assert!(loaded.entries().is_empty());
        }
    }
}
