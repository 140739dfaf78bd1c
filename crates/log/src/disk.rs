//! The storage seam. A simulated disk (the simulation's, `crates/sim`) is told
//! where each segment file is written, and it takes over the segment files'
//! fsyncs: what each makes durable is its record, so that a simulated power
//! loss can take away exactly the unsynced tails (a real fsync would only cost
//! time there). It may also refuse writes (a full disk). With none installed —
//! every real broker — each hook is one atomic load, and fsync is the file's.
//!
//! Only segment files are watched: every other file of a log (indexes,
//! checkpoints, producer snapshots) is fsynced in the same call that writes it,
//! so it has no unsynced state to lose.

use std::fs::File;
use std::io;
use std::path::Path;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, RwLock};

/// A disk that watches the segment files.
pub trait Disk: Send + Sync {
    /// Bytes are about to be written to `path` from `position` (the file's
    /// length). An error fails the write as the disk's own would
    /// (`StorageFull` for ENOSPC).
    fn writing(&self, path: &Path, position: u64) -> io::Result<()>;
    /// fsync of `path`, holding `len` bytes: once it returns `Ok`, a power loss
    /// leaves at least those.
    fn sync(&self, path: &Path, len: u64) -> io::Result<()>;
}

static INSTALLED: AtomicBool = AtomicBool::new(false);
static DISK: RwLock<Option<Arc<dyn Disk>>> = RwLock::new(None);

/// Installs `disk` for every log of this process (`None`: the real disk
/// alone).
pub fn install(disk: Option<Arc<dyn Disk>>) {
    let mut slot = DISK.write().unwrap_or_else(|e| e.into_inner());
    INSTALLED.store(disk.is_some(), Ordering::Release);
    *slot = disk;
}

fn installed() -> Option<Arc<dyn Disk>> {
    if !INSTALLED.load(Ordering::Acquire) {
        return None;
    }
    DISK.read().unwrap_or_else(|e| e.into_inner()).clone()
}

pub(crate) fn writing(path: &Path, position: u64) -> io::Result<()> {
    installed().map_or(Ok(()), |d| d.writing(path, position))
}

/// fsyncs `file` (at `path`, holding `len` bytes), or lets the installed disk
/// do it.
pub(crate) fn sync_data(file: &File, path: &Path, len: u64) -> io::Result<()> {
    match installed() {
        Some(d) => d.sync(path, len),
        None => file.sync_data(),
    }
}
