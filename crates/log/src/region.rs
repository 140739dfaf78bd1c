//! File regions: a read that names where its batches lie in the segment files
//! instead of copying them, so that a fetch response can hand them to the
//! socket (`sendfile`) without passing them through user space (Kafka's
//! `FileRecords.transferTo`).
//!
//! A region holds its segment's file open, so that retention deleting the
//! segment does not take the bytes away. What could change them is a
//! truncation: the file is cut and later appends write other batches at the
//! same positions. Each log counts its truncations; a region remembers the
//! count it was read under, and whoever sends it checks, after the bytes left
//! the file, that the count did not move ([`FileRegion::check`]). If it moved,
//! the bytes may be the rewritten ones: the sender must not complete the
//! response (the broker closes the connection and the client retries).

use std::fs::File;
use std::io;
use std::os::unix::fs::FileExt;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

use bytes::{Bytes, BytesMut};

/// A log's truncation count, shared with the regions read from it.
#[derive(Debug, Clone, Default)]
pub(crate) struct Truncations(Arc<AtomicU64>);

impl Truncations {
    /// Counts a truncation: called *before* the files change, so that a reader
    /// who sees the old count after reading read the old bytes.
    pub(crate) fn bump(&self) {
        self.0.fetch_add(1, Ordering::SeqCst);
    }

    fn now(&self) -> u64 {
        self.0.load(Ordering::SeqCst)
    }
}

/// `len` bytes of a segment file from `position`, as they were when read.
#[derive(Clone)]
pub struct FileRegion {
    file: Arc<File>,
    position: u64,
    len: u64,
    truncations: Truncations,
    /// The log's truncation count when the region was read.
    seen: u64,
}

impl std::fmt::Debug for FileRegion {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("FileRegion")
            .field("position", &self.position)
            .field("len", &self.len)
            .field("seen", &self.seen)
            .finish()
    }
}

/// Why a region's bytes cannot be trusted any more.
pub fn stale_region() -> io::Error {
    io::Error::other("the log was truncated under a fetch response: not sending it")
}

impl FileRegion {
    pub(crate) fn new(
        file: Arc<File>,
        position: u64,
        len: u64,
        truncations: &Truncations,
    ) -> FileRegion {
        FileRegion {
            file,
            position,
            len,
            seen: truncations.now(),
            truncations: truncations.clone(),
        }
    }

    /// The segment file.
    pub fn file(&self) -> &File {
        &self.file
    }

    /// Where the region starts in the file.
    pub fn position(&self) -> u64 {
        self.position
    }

    /// Its length in bytes.
    pub fn len(&self) -> u64 {
        self.len
    }

    /// Whether it is empty.
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// The part of it from `from` (relative), `len` bytes long.
    pub fn slice(&self, from: u64, len: u64) -> FileRegion {
        assert!(
            from.checked_add(len).is_some_and(|end| end <= self.len),
            "slice {from}+{len} of a region of {}",
            self.len
        );
        FileRegion {
            position: self.position + from,
            len,
            ..self.clone()
        }
    }

    /// `Ok` while the log has not been truncated since the region was read:
    /// bytes taken from the file before this returns `Ok` are the region's.
    pub fn check(&self) -> io::Result<()> {
        if self.truncations.now() == self.seen {
            Ok(())
        } else {
            Err(stale_region())
        }
    }

    /// Appends the region's bytes to `buf` (the copying path: TLS, simulated
    /// networks). Fails if the file is now shorter or the log was truncated.
    pub fn read_into(&self, buf: &mut BytesMut) -> io::Result<()> {
        let len = usize::try_from(self.len).map_err(io::Error::other)?;
        let start = buf.len();
        buf.resize(start + len, 0);
        let read = self.file.read_exact_at(&mut buf[start..], self.position);
        if let Err(e) = read.and_then(|()| self.check()) {
            buf.truncate(start);
            return Err(e);
        }
        Ok(())
    }

    /// The region's bytes, copied (see [`FileRegion::read_into`]).
    pub fn read(&self) -> io::Result<Bytes> {
        let mut buf = BytesMut::with_capacity(self.len as usize);
        self.read_into(&mut buf)?;
        Ok(buf.freeze())
    }
}

/// Records read for a fetch: bytes in memory, or regions of the segment files.
#[derive(Debug, Clone)]
pub enum Records {
    Bytes(Bytes),
    Regions(Vec<FileRegion>),
}

impl Default for Records {
    fn default() -> Self {
        Records::Bytes(Bytes::new())
    }
}

impl Records {
    /// Their length in bytes.
    pub fn len(&self) -> usize {
        match self {
            Records::Bytes(b) => b.len(),
            Records::Regions(r) => r.iter().map(|r| r.len as usize).sum(),
        }
    }

    /// Whether there are none.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// The bytes, copied out of the files for regions.
    pub fn read(&self) -> io::Result<Bytes> {
        match self {
            Records::Bytes(b) => Ok(b.clone()),
            Records::Regions(regions) => {
                let mut buf = BytesMut::with_capacity(self.len());
                for r in regions {
                    r.read_into(&mut buf)?;
                }
                Ok(buf.freeze())
            }
        }
    }
}

/// What [`crate::Log::read_regions`] returned.
#[derive(Debug, Clone)]
pub struct RegionRead {
    /// Whole batches, in order; at most one region per segment.
    pub regions: Vec<FileRegion>,
    /// The offset after the last batch; the requested offset when none.
    pub next_offset: i64,
}

impl RegionRead {
    /// Bytes of all the regions.
    pub fn len(&self) -> usize {
        self.regions.iter().map(|r| r.len as usize).sum()
    }

    /// Whether no batch was read.
    pub fn is_empty(&self) -> bool {
        self.regions.is_empty()
    }
}

impl syncline_proto::frame::RegionLen for FileRegion {
    fn region_len(&self) -> u64 {
        self.len
    }
}
