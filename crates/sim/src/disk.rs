//! The simulated disk: it watches every segment file the brokers write and
//! takes their fsyncs (through `syncline_log::disk`), so a power loss can take
//! away exactly what was not fsynced; it fills up, and fails fsyncs with EIO,
//! on command.

use std::collections::{BTreeMap, BTreeSet};
use std::io;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};

/// What the disk knows: per segment file, the length its last fsync made
/// durable; the directories that are full, and those whose fsyncs fail.
#[derive(Debug, Default)]
struct State {
    durable: BTreeMap<PathBuf, u64>,
    full: BTreeSet<PathBuf>,
    failing: BTreeSet<PathBuf>,
}

/// The disk of every broker of one run (each broker under its own directory).
#[derive(Debug, Default)]
pub struct SimDisk {
    state: Mutex<State>,
}

impl syncline_log::disk::Disk for SimDisk {
    fn writing(&self, path: &Path, position: u64) -> io::Result<()> {
        let mut s = self.state.lock().unwrap_or_else(|e| e.into_inner());
        if s.full.iter().any(|d| path.starts_with(d)) {
            return Err(io::Error::new(
                io::ErrorKind::StorageFull,
                "no space left on device (simulated)",
            ));
        }
        // A file first seen now holds only what survived so far: durable.
        s.durable.entry(path.to_path_buf()).or_insert(position);
        Ok(())
    }

    fn sync(&self, path: &Path, len: u64) -> io::Result<()> {
        let mut s = self.state.lock().unwrap_or_else(|e| e.into_inner());
        if s.failing.iter().any(|d| path.starts_with(d)) {
            // What was written stays in the page cache, not durable.
            return Err(io::Error::other("input/output error (simulated EIO)"));
        }
        s.durable.insert(path.to_path_buf(), len);
        Ok(())
    }
}

impl SimDisk {
    /// Fills (or frees) the disk under `dir`: writes there fail with ENOSPC.
    pub fn set_full(&self, dir: &Path, full: bool) {
        let mut s = self.state.lock().unwrap_or_else(|e| e.into_inner());
        mark(&mut s.full, dir, full);
    }

    /// Makes fsyncs under `dir` fail with EIO (or work again): the disk takes
    /// writes but cannot make them durable.
    pub fn set_failing(&self, dir: &Path, failing: bool) {
        let mut s = self.state.lock().unwrap_or_else(|e| e.into_inner());
        mark(&mut s.failing, dir, failing);
    }

    /// A power loss under `dir`: every segment file there is cut back to what
    /// its last fsync made durable. Returns the bytes lost. (The broker must be
    /// down: its process went with the power.)
    pub fn lose_unsynced(&self, dir: &Path) -> io::Result<u64> {
        let s = self.state.lock().unwrap_or_else(|e| e.into_inner());
        let mut lost = 0;
        for (path, &durable) in s.durable.range(dir.to_path_buf()..) {
            if !path.starts_with(dir) {
                break;
            }
            let len = match std::fs::metadata(path) {
                Ok(m) => m.len(),
                // Deleted (retention, a truncation): nothing to lose.
                Err(e) if e.kind() == io::ErrorKind::NotFound => continue,
                Err(e) => return Err(e),
            };
            if len > durable {
                std::fs::OpenOptions::new()
                    .write(true)
                    .open(path)?
                    .set_len(durable)?;
                lost += len - durable;
            }
        }
        Ok(lost)
    }

    /// Installs this disk for every log of the process until the guard drops.
    pub fn install(self: &Arc<SimDisk>) -> Installed {
        syncline_log::disk::install(Some(self.clone()));
        Installed(())
    }
}

/// The installed simulated disk; dropping it restores the real disk alone.
#[derive(Debug)]
pub struct Installed(());

impl Drop for Installed {
    fn drop(&mut self) {
        syncline_log::disk::install(None);
    }
}

/// Puts `dir` in `set` or takes it out.
fn mark(set: &mut BTreeSet<PathBuf>, dir: &Path, on: bool) {
    if on {
        set.insert(dir.to_path_buf());
    } else {
        set.remove(dir);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use syncline_log::disk::Disk;

    #[test]
    fn a_power_loss_keeps_what_was_synced_and_a_full_disk_refuses_writes() {
        let dir = tempfile::tempdir().unwrap();
        let b1 = dir.path().join("broker-1");
        let b2 = dir.path().join("broker-2");
        std::fs::create_dir_all(&b1).unwrap();
        std::fs::create_dir_all(&b2).unwrap();
        let (f1, f2) = (b1.join("0.log"), b2.join("0.log"));
        let disk = SimDisk::default();
        for f in [&f1, &f2] {
            disk.writing(f, 0).unwrap();
            std::fs::write(f, [1u8; 100]).unwrap();
        }
        disk.sync(&f1, 60).unwrap();
        disk.sync(&f2, 60).unwrap();
        disk.writing(&f1, 100).unwrap();
        std::fs::write(&f1, [1u8; 150]).unwrap();

        assert_eq!(disk.lose_unsynced(&b1).unwrap(), 90);
        assert_eq!(std::fs::metadata(&f1).unwrap().len(), 60);
        assert_eq!(
            std::fs::metadata(&f2).unwrap().len(),
            100,
            "another broker's disk"
        );
        assert_eq!(disk.lose_unsynced(&b1).unwrap(), 0);

        disk.set_full(&b2, true);
        let e = disk.writing(&f2, 100).unwrap_err();
        assert_eq!(e.kind(), io::ErrorKind::StorageFull);
        disk.writing(&f1, 60).unwrap();
        disk.set_full(&b2, false);
        disk.writing(&f2, 100).unwrap();

        disk.set_failing(&b1, true);
        assert!(disk.sync(&f1, 150).is_err(), "a failing disk's fsync");
        disk.sync(&f2, 100).unwrap();
        assert_eq!(
            disk.lose_unsynced(&b1).unwrap(),
            0,
            "the failed fsync made nothing durable"
        );
        std::fs::write(&f1, [1u8; 150]).unwrap();
        assert_eq!(disk.lose_unsynced(&b1).unwrap(), 90);
        disk.set_failing(&b1, false);
        disk.sync(&f1, 60).unwrap();
    }
}
