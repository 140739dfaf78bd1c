//! The one error type of the crate.

use std::io;
use std::path::{Path, PathBuf};

use syncline_proto::batch::BatchError;

/// Why a log operation failed.
#[derive(Debug, thiserror::Error)]
pub enum LogError {
    /// An operating-system call failed on `path`.
    #[error("I/O error on {}: {source}", path.display())]
    Io {
        path: PathBuf,
        #[source]
        source: io::Error,
    },
    /// A read asked for an offset below the log start or above the log end.
    #[error(
        "offset {offset} is out of range: the log holds [{log_start_offset}, {log_end_offset})"
    )]
    OffsetOutOfRange {
        offset: i64,
        log_start_offset: i64,
        log_end_offset: i64,
    },
    /// Appended bytes are not a sequence of whole, well-formed batches.
    #[error("invalid record batch: {0}")]
    InvalidBatch(#[from] BatchError),
    /// One batch is larger than a whole segment may be.
    #[error("a batch of {batch_bytes} bytes does not fit in a segment of {segment_bytes} bytes")]
    BatchTooLarge {
        batch_bytes: usize,
        segment_bytes: u64,
    },
    /// A follower append does not start at the log end offset.
    #[error("the first batch starts at offset {actual}, but the log end offset is {expected}")]
    OffsetMismatch { expected: i64, actual: i64 },
    /// In a follower append, a batch does not start right after the previous one.
    #[error("a batch starts at offset {actual}, expected {expected}: offsets must be consecutive")]
    NonMonotonicOffset { expected: i64, actual: i64 },
    /// A leader append carries an epoch older than one the log already holds.
    #[error("leader epoch {epoch} is older than the latest epoch {latest_epoch} in the log")]
    StaleLeaderEpoch { epoch: i32, latest_epoch: i32 },
    /// A leader-epoch entry with a negative field, or starting beyond the log end.
    #[error("invalid leader epoch entry: epoch {epoch}, start offset {start_offset}")]
    InvalidEpochEntry { epoch: i32, start_offset: i64 },
    /// A negative offset where an offset in the log is required.
    #[error("invalid offset {0}")]
    InvalidOffset(i64),
    /// A [`crate::LogConfig`] value out of its range.
    #[error("invalid log config: {0}")]
    InvalidConfig(String),
    /// Bytes on disk are not what the log wrote (found while reading, after recovery).
    #[error("corrupt data in {} at byte {position}: {reason}", path.display())]
    Corrupt {
        path: PathBuf,
        position: u64,
        reason: String,
    },
    /// An earlier I/O failure left the on-disk state unknown (a failed fsync, or a
    /// failed undo of a partial write); the log refuses everything until it is
    /// reopened, which runs recovery.
    #[error("the log is failed after an earlier error and must be reopened: {0}")]
    Failed(String),
}

/// Attaches the path to an I/O error.
pub(crate) trait IoContext<T> {
    fn ctx(self, path: &Path) -> Result<T, LogError>;
}

impl<T> IoContext<T> for io::Result<T> {
    fn ctx(self, path: &Path) -> Result<T, LogError> {
        self.map_err(|source| LogError::Io {
            path: path.to_path_buf(),
            source,
        })
    }
}
