//! One segment: a file of batches stored exactly as they travel, named by the
//! offset of its first batch, plus its sparse index. Appends go to the end of the
//! file; reads use positional reads so that they need only `&self`.

use std::fs::{File, OpenOptions};
use std::io::{self, BufReader, IoSlice, Read, Write};
use std::os::unix::fs::FileExt;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::UNIX_EPOCH;

use syncline_proto::batch::{self, BatchHeader, HEADER_LEN, STAMPED_PREFIX_LEN};

use crate::epoch_cache::LeaderEpochCache;
use crate::error::{IoContext, LogError};
use crate::index::{remove_if_exists, IndexEntry, SegmentIndex};
use crate::planted::{self, Bug};

pub(crate) const LOG_SUFFIX: &str = ".log";
pub(crate) const INDEX_SUFFIX: &str = ".index";
pub(crate) const TIME_INDEX_SUFFIX: &str = ".timeindex";

/// "No timestamp", as in Kafka's batches.
const NO_TIMESTAMP: i64 = -1;
/// Recovery reads segments sequentially through a buffer of this size.
const RECOVERY_READ_BYTES: usize = 1 << 20;
/// Header scans read this much at a time, so that small batches cost one read
/// per several headers.
const HEADER_READ_AHEAD_BYTES: usize = 4096;

/// `<dir>/<base offset, 20 digits><suffix>`.
pub(crate) fn segment_file(dir: &Path, base_offset: i64, suffix: &str) -> PathBuf {
    dir.join(format!("{base_offset:020}{suffix}"))
}

/// The base offset in a segment file name with `suffix`.
pub(crate) fn parse_segment_file(name: &str, suffix: &str) -> Option<i64> {
    let digits = name.strip_suffix(suffix)?;
    if digits.len() != 20 || !digits.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    digits.parse().ok()
}

/// Deletes the files of the segment at `base_offset`, the log file first: index
/// files without their log file are removed at the next open.
pub(crate) fn remove_segment_files(dir: &Path, base_offset: i64) -> Result<(), LogError> {
    for suffix in [LOG_SUFFIX, INDEX_SUFFIX, TIME_INDEX_SUFFIX] {
        remove_if_exists(&segment_file(dir, base_offset, suffix))?;
    }
    Ok(())
}

/// A batch about to be written: its header as it will be stored and its bytes as
/// received. A leader append also carries the stamped first bytes, written in place
/// of the producer's so that the rest is written without a copy.
#[derive(Debug)]
pub(crate) struct PendingBatch<'a> {
    pub(crate) header: BatchHeader,
    pub(crate) bytes: &'a [u8],
    pub(crate) stamp: Option<[u8; STAMPED_PREFIX_LEN]>,
}

/// Offset and size checks on a batch header that `BatchHeader::parse` leaves to
/// the caller.
pub(crate) fn check_header(header: &BatchHeader) -> Result<(), &'static str> {
    if header.last_offset_delta < 0 {
        return Err("negative last_offset_delta");
    }
    if header
        .base_offset
        .checked_add(i64::from(header.last_offset_delta) + 1)
        .is_none()
    {
        return Err("offsets overflow");
    }
    Ok(())
}

/// What a segment holds, maintained batch by batch as batches are appended or
/// scanned at open.
#[derive(Debug)]
struct Contents {
    base_offset: i64,
    next_offset: i64,
    size_bytes: u64,
    max_timestamp: i64,
    /// Max timestamp of the first batch: the start of the segment's age for
    /// `segment_ms` (as Kafka's `rollingBasedTimestamp`).
    first_batch_timestamp: Option<i64>,
    bytes_since_index_entry: u64,
    index: SegmentIndex,
}

impl Contents {
    fn empty(dir: &Path, base_offset: i64) -> Self {
        Contents {
            base_offset,
            next_offset: base_offset,
            size_bytes: 0,
            max_timestamp: NO_TIMESTAMP,
            first_batch_timestamp: None,
            bytes_since_index_entry: 0,
            index: SegmentIndex::empty(
                segment_file(dir, base_offset, INDEX_SUFFIX),
                segment_file(dir, base_offset, TIME_INDEX_SUFFIX),
            ),
        }
    }

    /// Accounts for the batch written at `position`; `may_index` is false for a
    /// batch that already has its index entry.
    fn track(
        &mut self,
        position: u64,
        header: &BatchHeader,
        index_interval_bytes: u32,
        may_index: bool,
    ) {
        self.max_timestamp = self.max_timestamp.max(header.max_timestamp);
        if position == 0 {
            self.first_batch_timestamp =
                (header.max_timestamp >= 0).then_some(header.max_timestamp);
        }
        if may_index && self.bytes_since_index_entry >= u64::from(index_interval_bytes) {
            // Offsets and positions fit in u32 by the roll rules and the open-time
            // checks; an entry that would not fit is simply not written (the index
            // is sparse, reads scan forward from the previous entry).
            let relative = u32::try_from(header.base_offset - self.base_offset);
            if let (Ok(relative_offset), Ok(position)) = (relative, u32::try_from(position)) {
                self.index.push(IndexEntry {
                    relative_offset,
                    position,
                    max_timestamp: self.max_timestamp,
                });
                self.bytes_since_index_entry = 0;
            }
        }
        let len = header.total_len() as u64;
        self.bytes_since_index_entry += len;
        self.size_bytes = position + len;
        self.next_offset = header.next_offset();
    }

    /// Checks that `header` can follow the batches tracked so far.
    fn check_next(&self, header: &BatchHeader) -> Result<(), String> {
        check_header(header)?;
        if header.base_offset != self.next_offset {
            return Err(format!(
                "batch at offset {} where {} was expected",
                header.base_offset, self.next_offset
            ));
        }
        if header.last_offset() - self.base_offset > i64::from(u32::MAX) {
            return Err("offset too far from the segment base".into());
        }
        Ok(())
    }
}

/// Reads batch headers at arbitrary positions, a few KiB at a time.
pub(crate) struct HeaderReader<'a> {
    file: &'a File,
    path: &'a Path,
    len: u64,
    buf: [u8; HEADER_READ_AHEAD_BYTES],
    buf_start: u64,
    buf_len: usize,
}

impl<'a> HeaderReader<'a> {
    /// A reader over the first `len` bytes of `file`.
    fn new(file: &'a File, path: &'a Path, len: u64) -> Self {
        HeaderReader {
            file,
            path,
            len,
            buf: [0; HEADER_READ_AHEAD_BYTES],
            buf_start: 0,
            buf_len: 0,
        }
    }

    /// The header of the batch at `position`, which must lie wholly within the
    /// reader's length.
    pub(crate) fn header_at(&mut self, position: u64) -> Result<BatchHeader, LogError> {
        let corrupt = |reason: String| LogError::Corrupt {
            path: self.path.to_path_buf(),
            position,
            reason,
        };
        let header_end = position.saturating_add(HEADER_LEN as u64);
        if header_end > self.len {
            return Err(corrupt("batch header cut short by the segment end".into()));
        }
        let buffered =
            position >= self.buf_start && header_end <= self.buf_start + self.buf_len as u64;
        if !buffered {
            let n = (self.len - position).min(HEADER_READ_AHEAD_BYTES as u64) as usize;
            self.file
                .read_exact_at(&mut self.buf[..n], position)
                .ctx(self.path)?;
            self.buf_start = position;
            self.buf_len = n;
        }
        let at = (position - self.buf_start) as usize;
        let header =
            BatchHeader::parse(&self.buf[at..self.buf_len]).map_err(|e| corrupt(e.to_string()))?;
        check_header(&header).map_err(|e| corrupt(e.into()))?;
        if position + header.total_len() as u64 > self.len {
            return Err(corrupt("batch runs past the segment end".into()));
        }
        Ok(header)
    }
}

/// Why a segment could not be loaded as-is and must be validated batch by batch.
pub(crate) type Distrust = String;

pub(crate) struct Segment {
    /// Shared with the file regions of reads in flight (zero-copy fetches).
    file: Arc<File>,
    path: PathBuf,
    contents: Contents,
    /// Bytes were written (or the file was cut) since the last fsync.
    unflushed: bool,
    /// The file was created and its directory not fsynced since: the first
    /// fsync of its bytes fsyncs the directory too, so that the bytes cannot
    /// outlive their name. Deferred to then, creating an empty log costs no
    /// fsync (an empty log and a missing one are the same).
    dir_unsynced: bool,
    /// Test hook: the next write stops after this many bytes and fails.
    #[cfg(test)]
    pub(crate) fail_write_after_bytes: Option<usize>,
    /// Test hook: cutting the file back fails.
    #[cfg(test)]
    pub(crate) fail_set_len: bool,
}

impl std::fmt::Debug for Segment {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Segment")
            .field("path", &self.path)
            .field("base_offset", &self.contents.base_offset)
            .field("next_offset", &self.contents.next_offset)
            .field("size_bytes", &self.contents.size_bytes)
            .finish()
    }
}

impl Segment {
    fn from_parts(file: File, path: PathBuf, contents: Contents, unflushed: bool) -> Self {
        Segment {
            file: Arc::new(file),
            path,
            contents,
            unflushed,
            dir_unsynced: false,
            #[cfg(test)]
            fail_write_after_bytes: None,
            #[cfg(test)]
            fail_set_len: false,
        }
    }

    fn open_file(path: &Path, create: bool) -> Result<File, LogError> {
        // Append mode: every write lands at the end, whatever happened before.
        OpenOptions::new()
            .read(true)
            .append(true)
            .create_new(create)
            .open(path)
            .ctx(path)
    }

    /// Creates an empty segment starting at `base_offset`.
    pub(crate) fn create(dir: &Path, base_offset: i64) -> Result<Self, LogError> {
        let path = segment_file(dir, base_offset, LOG_SUFFIX);
        let file = Self::open_file(&path, true)?;
        let mut segment = Self::from_parts(file, path, Contents::empty(dir, base_offset), false);
        segment.dir_unsynced = true;
        Ok(segment)
    }

    /// Loads a segment whose batches were fsynced (below the recovery point, or
    /// after a clean shutdown) without validating CRCs: takes the persisted index
    /// (if it holds together) and walks the batch headers from its last entry to the
    /// end of the file, which must be reached exactly. Returns why the segment
    /// cannot be trusted when the walk fails.
    pub(crate) fn open_trusted(
        dir: &Path,
        base_offset: i64,
        index_interval_bytes: u32,
    ) -> Result<Result<Self, Distrust>, LogError> {
        let path = segment_file(dir, base_offset, LOG_SUFFIX);
        let file = Self::open_file(&path, false)?;
        let file_len = file.metadata().ctx(&path)?.len();
        let (index, discarded) = SegmentIndex::load(
            segment_file(dir, base_offset, INDEX_SUFFIX),
            segment_file(dir, base_offset, TIME_INDEX_SUFFIX),
            file_len,
        )?;
        if let (Some(reason), true) = (&discarded, file_len > 0) {
            tracing::warn!(file = %path.display(), %reason, "rebuilding the segment index from its batches");
        }
        let mut contents = Contents::empty(dir, base_offset);
        contents.index = index;
        let mut position = 0;
        let mut may_index = true;
        if let Some(last) = contents.index.last() {
            position = u64::from(last.position);
            contents.size_bytes = position;
            contents.next_offset = base_offset + i64::from(last.relative_offset);
            contents.max_timestamp = last.max_timestamp;
            may_index = false;
        }
        let mut reader = HeaderReader::new(&file, &path, file_len);
        let distrust = |e: LogError| match e {
            LogError::Corrupt {
                position, reason, ..
            } => Ok(Err(format!("at byte {position}: {reason}"))),
            other => Err(other),
        };
        while position < file_len {
            let header = match reader.header_at(position) {
                Ok(h) => h,
                Err(e) => return distrust(e),
            };
            if let Err(reason) = contents.check_next(&header) {
                return Ok(Err(format!("at byte {position}: {reason}")));
            }
            contents.track(position, &header, index_interval_bytes, may_index);
            may_index = true;
            position += header.total_len() as u64;
        }
        if file_len > 0 {
            match reader.header_at(0) {
                Ok(first) => {
                    contents.first_batch_timestamp =
                        (first.max_timestamp >= 0).then_some(first.max_timestamp)
                }
                Err(e) => return distrust(e),
            }
        }
        Ok(Ok(Self::from_parts(file, path, contents, false)))
    }

    /// Loads a segment that may have a torn or corrupt tail: validates every batch
    /// (sizes, CRC, consecutive offsets), rebuilds the index, and cuts the file at
    /// the first invalid batch. Epochs newer than the cache's latest are recorded,
    /// as the checkpoint may predate them. Returns the segment and whether it was cut.
    pub(crate) fn recover(
        dir: &Path,
        base_offset: i64,
        index_interval_bytes: u32,
        epochs: &mut LeaderEpochCache,
    ) -> Result<(Self, bool), LogError> {
        let path = segment_file(dir, base_offset, LOG_SUFFIX);
        let file = Self::open_file(&path, false)?;
        let file_len = file.metadata().ctx(&path)?.len();
        let mut contents = Contents::empty(dir, base_offset);
        let mut reader = BufReader::with_capacity(RECOVERY_READ_BYTES, &file);
        let mut batch = Vec::new();
        let invalid: Option<String> = loop {
            let position = contents.size_bytes;
            let left = file_len - position;
            if left == 0 {
                break None;
            }
            if left < HEADER_LEN as u64 {
                break Some(format!("{left} trailing bytes, too few for a batch header"));
            }
            batch.resize(HEADER_LEN, 0);
            reader.read_exact(&mut batch).ctx(&path)?;
            let header = match BatchHeader::parse(&batch) {
                Ok(h) => h,
                Err(e) => break Some(e.to_string()),
            };
            let len = header.total_len();
            if len as u64 > left {
                break Some(format!("batch of {len} bytes cut short at {left} bytes"));
            }
            batch.resize(len, 0);
            reader.read_exact(&mut batch[HEADER_LEN..]).ctx(&path)?;
            if let Err(e) = batch::verify_crc(&batch) {
                break Some(e.to_string());
            }
            if let Err(reason) = contents.check_next(&header) {
                break Some(reason);
            }
            let epoch = header.partition_leader_epoch;
            if epoch >= 0 && epochs.latest_epoch().is_none_or(|latest| epoch > latest) {
                epochs.assign(epoch, header.base_offset)?;
            }
            contents.track(position, &header, index_interval_bytes, true);
        };
        drop(reader);
        let cut = invalid.is_some();
        if let Some(reason) = invalid {
            tracing::warn!(
                file = %path.display(),
                position = contents.size_bytes,
                %reason,
                "truncating the segment at its first invalid batch"
            );
            file.set_len(contents.size_bytes).ctx(&path)?;
        }
        // What was read may sit only in the page cache (the process crashed, the
        // machine did not); it is fsynced before the recovery point moves past it.
        Ok((Self::from_parts(file, path, contents, true), cut))
    }

    pub(crate) fn base_offset(&self) -> i64 {
        self.contents.base_offset
    }

    pub(crate) fn next_offset(&self) -> i64 {
        self.contents.next_offset
    }

    pub(crate) fn size_bytes(&self) -> u64 {
        self.contents.size_bytes
    }

    pub(crate) fn first_batch_timestamp(&self) -> Option<i64> {
        self.contents.first_batch_timestamp
    }

    /// The largest record timestamp of the segment's batches (-1 when none has one).
    pub(crate) fn max_timestamp(&self) -> i64 {
        self.contents.max_timestamp
    }

    /// Where a scan for the first batch whose max timestamp is at or after
    /// `target` starts (from the time index), or `None` when the segment has no
    /// such batch.
    pub(crate) fn timestamp_scan_start(&self, target: i64) -> Option<u64> {
        (self.contents.max_timestamp >= target).then(|| {
            self.contents
                .index
                .last_older_than(target)
                .map_or(0, |e| u64::from(e.position))
        })
    }

    pub(crate) fn path(&self) -> &Path {
        &self.path
    }

    /// The newest record timestamp, or the file's modification time when no
    /// batch has a timestamp (as Kafka does for retention).
    pub(crate) fn largest_timestamp_ms(&self) -> Result<i64, LogError> {
        if self.contents.max_timestamp >= 0 {
            return Ok(self.contents.max_timestamp);
        }
        let modified = self
            .file
            .metadata()
            .and_then(|m| m.modified())
            .ctx(&self.path)?;
        Ok(modified
            .duration_since(UNIX_EPOCH)
            .map_or(0, |d| i64::try_from(d.as_millis()).unwrap_or(i64::MAX)))
    }

    /// The segment's file, for regions of it that outlive the read (zero-copy
    /// fetches).
    pub(crate) fn shared_file(&self) -> &Arc<File> {
        &self.file
    }

    /// A header reader over this segment's batches.
    pub(crate) fn headers(&self) -> HeaderReader<'_> {
        HeaderReader::new(&self.file, &self.path, self.contents.size_bytes)
    }

    /// Calls `f` with every batch header of the segment, in order.
    pub(crate) fn each_header(&self, mut f: impl FnMut(&BatchHeader)) -> Result<(), LogError> {
        let mut headers = self.headers();
        let mut position = 0u64;
        while position < self.contents.size_bytes {
            let header = headers.header_at(position)?;
            f(&header);
            position += header.total_len() as u64;
        }
        Ok(())
    }

    /// Appends batches that follow the segment's last one (checked by the caller).
    /// A failed write is undone by cutting the file back; when even that fails the
    /// segment's end on disk is unknown and the error is `LogError::Failed`.
    pub(crate) fn append(
        &mut self,
        batches: &[PendingBatch<'_>],
        index_interval_bytes: u32,
    ) -> Result<(), LogError> {
        let mut slices = Vec::with_capacity(batches.len() * 2);
        for b in batches {
            match &b.stamp {
                Some(prefix) => {
                    slices.push(IoSlice::new(prefix));
                    slices.push(IoSlice::new(&b.bytes[STAMPED_PREFIX_LEN..]));
                }
                None => slices.push(IoSlice::new(b.bytes)),
            }
        }
        if let Err(write_error) = self.write_all(&mut slices) {
            return Err(match self.set_len(self.contents.size_bytes) {
                Ok(()) => LogError::Io {
                    path: self.path.clone(),
                    source: write_error,
                },
                Err(undo_error) => LogError::Failed(format!(
                    "writing {} failed ({write_error}) and cutting off the partial write failed ({undo_error})",
                    self.path.display()
                )),
            });
        }
        self.unflushed = !planted::active(Bug::LostFsync);
        for b in batches {
            let position = self.contents.size_bytes;
            self.contents
                .track(position, &b.header, index_interval_bytes, true);
        }
        Ok(())
    }

    fn write_all(&mut self, slices: &mut [IoSlice<'_>]) -> io::Result<()> {
        crate::disk::writing(&self.path, self.contents.size_bytes)?;
        #[cfg(test)]
        if let Some(limit) = self.fail_write_after_bytes.take() {
            let mut left = limit;
            for s in slices.iter() {
                let n = left.min(s.len());
                (&*self.file).write_all(&s[..n])?;
                left -= n;
            }
            return Err(io::Error::new(
                io::ErrorKind::StorageFull,
                "injected write failure",
            ));
        }
        let mut slices = slices;
        while !slices.is_empty() {
            match (&*self.file).write_vectored(slices) {
                Ok(0) => return Err(io::ErrorKind::WriteZero.into()),
                Ok(n) => IoSlice::advance_slices(&mut slices, n),
                Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
                Err(e) => return Err(e),
            }
        }
        Ok(())
    }

    fn set_len(&self, len: u64) -> io::Result<()> {
        #[cfg(test)]
        if self.fail_set_len {
            return Err(io::Error::other("injected set_len failure"));
        }
        self.file.set_len(len)
    }

    /// The position and header of the first batch that ends after `offset` (the
    /// batch holding it), or `None` when `offset` is at or past the segment's end.
    pub(crate) fn locate(&self, offset: i64) -> Result<Option<(u64, BatchHeader)>, LogError> {
        if offset >= self.contents.next_offset {
            return Ok(None);
        }
        let relative = (offset - self.contents.base_offset).clamp(0, i64::from(u32::MAX)) as u32;
        let (mut position, mut expected) = match self.contents.index.floor(relative) {
            Some(e) => (
                u64::from(e.position),
                self.contents.base_offset + i64::from(e.relative_offset),
            ),
            None => (0, self.contents.base_offset),
        };
        let mut headers = self.headers();
        loop {
            let header = headers.header_at(position)?;
            if header.base_offset != expected {
                return Err(LogError::Corrupt {
                    path: self.path.clone(),
                    position,
                    reason: format!(
                        "batch at offset {} where {expected} was expected",
                        header.base_offset
                    ),
                });
            }
            if offset < header.next_offset() {
                return Ok(Some((position, header)));
            }
            position += header.total_len() as u64;
            expected = header.next_offset();
        }
    }

    /// Fills `buf` from `position`.
    pub(crate) fn read_exact_at(&self, buf: &mut [u8], position: u64) -> Result<(), LogError> {
        self.file.read_exact_at(buf, position).ctx(&self.path)
    }

    /// Cuts the segment before the batch at `position` (a batch boundary), whose
    /// base offset `next_offset` becomes the segment's end, and makes the cut
    /// durable with the index.
    pub(crate) fn truncate(&mut self, position: u64, next_offset: i64) -> Result<(), LogError> {
        self.set_len(position).ctx(&self.path)?;
        let index = &mut self.contents.index;
        index.truncate_from_position(u32::try_from(position).unwrap_or(u32::MAX));
        // The max timestamp and the bytes since the last index entry are rebuilt
        // from that entry: at most an index interval (plus a batch) of headers.
        let (mut scan, mut max_timestamp) = match index.last() {
            Some(e) => (u64::from(e.position), e.max_timestamp),
            None => (0, NO_TIMESTAMP),
        };
        let since_entry = position - scan;
        let mut headers = HeaderReader::new(&self.file, &self.path, position);
        while scan < position {
            let header = headers.header_at(scan)?;
            max_timestamp = max_timestamp.max(header.max_timestamp);
            scan += header.total_len() as u64;
        }
        let contents = &mut self.contents;
        contents.max_timestamp = max_timestamp;
        contents.bytes_since_index_entry = since_entry;
        contents.size_bytes = position;
        contents.next_offset = next_offset;
        if position == 0 {
            contents.first_batch_timestamp = None;
        }
        contents.index.persist()?;
        crate::disk::sync_data(&self.file, &self.path, position).ctx(&self.path)?;
        self.unflushed = false;
        self.sync_dir_once()
    }

    /// fsyncs the batches written since the last flush.
    pub(crate) fn flush(&mut self) -> Result<(), LogError> {
        if self.unflushed {
            crate::disk::sync_data(&self.file, &self.path, self.contents.size_bytes)
                .ctx(&self.path)?;
            self.unflushed = false;
            self.sync_dir_once()?;
        }
        Ok(())
    }

    /// fsyncs the directory of a file created since, once.
    fn sync_dir_once(&mut self) -> Result<(), LogError> {
        if self.dir_unsynced {
            if let Some(dir) = self.path.parent() {
                crate::checkpoint::sync_dir(dir)?;
            }
            self.dir_unsynced = false;
        }
        Ok(())
    }

    /// Writes the index entries not yet on disk, durably.
    pub(crate) fn persist_index(&mut self) -> Result<(), LogError> {
        self.contents.index.persist()
    }

    /// Deletes the segment's files.
    pub(crate) fn delete(self) -> Result<(), LogError> {
        remove_if_exists(&self.path)?;
        self.contents.index.delete_files()
    }

    #[cfg(test)]
    pub(crate) fn index_entries(&self) -> &[IndexEntry] {
        self.contents.index.entries()
    }
}
