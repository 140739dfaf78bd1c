//! The controller's append-only metadata log: the only I/O in this crate.
//!
//! One file, `metadata.log`, of frames `[u32 BE length][u32 BE CRC-32C of the
//! payload][protobuf MetadataRecord]`. A record's offset is its index in the file.
//! Appends are fsynced before they return: the controller acts on a record (answers
//! a broker, announces a leader) only once it is durable. Opening replays the file
//! and cuts off a torn or corrupt tail: nothing after a bad frame can be trusted,
//! and nothing after it was acted upon unless the fsync had returned.

use std::fs::{self, File, OpenOptions};
use std::io::{self, Read, Seek, SeekFrom, Write};
use std::path::{Path, PathBuf};

use bytes::{Buf, BufMut};
use prost::Message;
use syncline_proto::pb;

/// The file name inside the metadata directory.
pub const METADATA_LOG_FILE: &str = "metadata.log";

/// The largest record payload accepted (metadata records are a few hundred bytes;
/// the bound keeps a corrupt length field from meaning "read 4 GiB").
pub const MAX_RECORD_BYTES: usize = 16 << 20;

const HEADER_BYTES: usize = 8;

/// A failure of the metadata log.
#[derive(Debug, thiserror::Error)]
pub enum MetadataLogError {
    /// Reading, writing or syncing the file failed.
    #[error("metadata log I/O error: {0}")]
    Io(#[from] io::Error),
    /// A record that encodes to more than [`MAX_RECORD_BYTES`]; nothing was written.
    #[error("metadata record of {size} bytes exceeds the {MAX_RECORD_BYTES}-byte limit")]
    RecordTooLarge {
        /// The encoded size.
        size: usize,
    },
    /// A `MetadataRecord` with no record set (replay would refuse it); nothing was
    /// written.
    #[error("refusing to append an empty metadata record")]
    EmptyRecord,
    /// An earlier write or fsync failed. After a failed fsync the page cache cannot be
    /// trusted, so the log refuses further appends; reopening recovers.
    #[error("an earlier write to the metadata log failed; reopen it")]
    Failed,
}

/// The open metadata log.
#[derive(Debug)]
pub struct MetadataLog {
    file: File,
    path: PathBuf,
    /// Bytes of valid frames: where the next append goes.
    len: u64,
    next_offset: i64,
    failed: bool,
}

impl MetadataLog {
    /// Opens (creating if needed) the log in `dir` and returns every valid record with
    /// its offset. A torn or corrupt tail is truncated, with a warning.
    pub fn open(
        dir: impl AsRef<Path>,
    ) -> Result<(MetadataLog, Vec<(i64, pb::MetadataRecord)>), MetadataLogError> {
        let dir = dir.as_ref();
        fs::create_dir_all(dir)?;
        let path = dir.join(METADATA_LOG_FILE);
        let existed = path.try_exists()?;
        let mut file = OpenOptions::new()
            .read(true)
            .write(true)
            .create(true)
            .truncate(false)
            .open(&path)?;
        if !existed {
            // The new file's directory entry must be durable before records in it are.
            File::open(dir)?.sync_all()?;
        }
        let mut data = Vec::new();
        file.read_to_end(&mut data)?;

        let mut records = Vec::new();
        let mut valid = 0;
        let mut rest = &data[..];
        while !rest.is_empty() {
            match decode_frame(rest) {
                Ok((record, frame_len)) => {
                    records.push((i64::try_from(records.len()).unwrap_or(i64::MAX), record));
                    valid += frame_len;
                    rest = &rest[frame_len..];
                }
                Err(reason) => {
                    tracing::warn!(
                        path = %path.display(),
                        offset = records.len(),
                        position = valid,
                        dropped_bytes = rest.len(),
                        reason,
                        "truncating the metadata log's torn or corrupt tail"
                    );
                    break;
                }
            }
        }
        let len = u64::try_from(valid).unwrap_or(u64::MAX);
        if valid < data.len() {
            file.set_len(len)?;
            file.sync_all()?;
        }
        let log = MetadataLog {
            file,
            path,
            len,
            next_offset: i64::try_from(records.len()).unwrap_or(i64::MAX),
            failed: false,
        };
        Ok((log, records))
    }

    /// Appends `records` and fsyncs; returns the offset of the first. Every record is
    /// checked before anything is written.
    pub fn append(&mut self, records: &[pb::MetadataRecord]) -> Result<i64, MetadataLogError> {
        if self.failed {
            return Err(MetadataLogError::Failed);
        }
        let first = self.next_offset;
        if records.is_empty() {
            return Ok(first);
        }
        let mut buf = Vec::new();
        for record in records {
            if record.record.is_none() {
                return Err(MetadataLogError::EmptyRecord);
            }
            let payload = record.encode_to_vec();
            let size = payload.len();
            let len = u32::try_from(size)
                .ok()
                .filter(|_| size <= MAX_RECORD_BYTES)
                .ok_or(MetadataLogError::RecordTooLarge { size })?;
            buf.put_u32(len);
            buf.put_u32(crc32c::crc32c(&payload));
            buf.extend_from_slice(&payload);
        }
        if let Err(e) = self.write_and_sync(&buf) {
            self.failed = true;
            return Err(e.into());
        }
        self.len += u64::try_from(buf.len()).unwrap_or(u64::MAX);
        self.next_offset += i64::try_from(records.len()).unwrap_or(i64::MAX);
        Ok(first)
    }

    fn write_and_sync(&mut self, buf: &[u8]) -> io::Result<()> {
        self.file.seek(SeekFrom::Start(self.len))?;
        self.file.write_all(buf)?;
        self.file.sync_data()
    }

    /// The offset the next appended record will get.
    pub fn next_offset(&self) -> i64 {
        self.next_offset
    }

    /// The log file.
    pub fn path(&self) -> &Path {
        &self.path
    }
}

/// One frame at the start of `buf`: the record and the frame's length, or why the
/// bytes there are not a valid frame.
fn decode_frame(mut buf: &[u8]) -> Result<(pb::MetadataRecord, usize), &'static str> {
    if buf.len() < HEADER_BYTES {
        return Err("torn frame header");
    }
    let len = usize::try_from(buf.get_u32()).unwrap_or(usize::MAX);
    let crc = buf.get_u32();
    if len > MAX_RECORD_BYTES {
        return Err("frame length beyond the limit");
    }
    let payload = buf.get(..len).ok_or("torn record")?;
    if crc32c::crc32c(payload) != crc {
        return Err("checksum mismatch");
    }
    let record = pb::MetadataRecord::decode(payload).map_err(|_| "undecodable record")?;
    if record.record.is_none() {
        // Also what a zero-filled tail (length 0, CRC 0) decodes to.
        return Err("empty record");
    }
    Ok((record, HEADER_BYTES + len))
}
