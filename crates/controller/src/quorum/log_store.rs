//! The Raft log and vote on disk.
//!
//! - `quorum.log`: CRC-32C frames, each a postcard [`LogFrame`]: optionally first the
//!   id of the last purged entry, then the entries in index order. `append` writes and
//!   fsyncs before it reports the entries flushed. Truncation (a conflict with the
//!   leader's log) and purging (behind a snapshot) rewrite the file atomically: the
//!   metadata log is small, and both are rare. A torn or corrupt tail is cut on open.
//! - `quorum.state`: one frame, the vote and the committed log id, replaced
//!   atomically. The vote must survive a crash (a voter must never vote twice in a
//!   term); the committed id lets a restarted voter apply what was committed at once.
//!
//! Unpurged entries are also kept in memory: reads never touch the disk. I/O is
//! blocking and short (one write and one fsync per call); openraft runs the log store
//! in its own task.

use std::collections::BTreeMap;
use std::fmt::Debug;
use std::fs::{self, File, OpenOptions};
use std::io::{self, Write};
use std::ops::RangeBounds;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use openraft::alias::{EntryOf, LogIdOf, VoteOf};
use openraft::storage::{IOFlushed, LogState, RaftLogStorage};
use openraft::{OptionalSend, RaftLogReader};
use serde::{Deserialize, Serialize};
use tokio::sync::Mutex;

use super::frame::{self, corrupt};
use super::types::TypeConfig;

/// The log file inside the quorum directory.
pub(crate) const LOG_FILE: &str = "quorum.log";
/// The vote and committed id file inside the quorum directory.
pub(crate) const STATE_FILE: &str = "quorum.state";
/// The mode of every file in the quorum directory: the log and snapshots hold
/// the users' SCRAM verifiers.
pub(crate) const FILE_MODE: u32 = 0o600;
/// The mode of the quorum directory.
pub(crate) const DIR_MODE: u32 = 0o700;

/// One frame of `quorum.log`.
#[derive(Serialize, Deserialize)]
enum LogFrame {
    /// Every entry up to this one was purged (it is in a snapshot).
    Purged(LogIdOf<TypeConfig>),
    /// A log entry.
    Entry(EntryOf<TypeConfig>),
}

/// The content of `quorum.state`.
#[derive(Serialize, Deserialize, Default)]
struct HardState {
    vote: Option<VoteOf<TypeConfig>>,
    committed: Option<LogIdOf<TypeConfig>>,
}

/// The log store; clones share it (the reader openraft asks for is a clone).
#[derive(Debug, Clone)]
pub(crate) struct LogStore {
    inner: Arc<Mutex<LogInner>>,
}

#[derive(Debug)]
struct LogInner {
    dir: PathBuf,
    /// `quorum.log`, opened for appending.
    file: File,
    entries: BTreeMap<u64, EntryOf<TypeConfig>>,
    purged: Option<LogIdOf<TypeConfig>>,
    vote: Option<VoteOf<TypeConfig>>,
    committed: Option<LogIdOf<TypeConfig>>,
    /// An earlier write or fsync failed: after a failed fsync the page cache cannot be
    /// trusted, so every later write is refused (openraft stops the node anyway).
    failed: bool,
}

impl LogStore {
    /// Opens (creating) the log and vote under `dir`.
    pub(crate) fn open(dir: &Path) -> io::Result<LogStore> {
        // The vote written in it must survive a crash: so must the directory.
        // The log and snapshots hold the users' SCRAM verifiers: the directory
        // and every file in it are the owner's only.
        syncline_durable::create_private_dir_all(dir, DIR_MODE)?;
        narrow_files(dir)?;
        let state_path = dir.join(STATE_FILE);
        let state = match frame::read_single_frame(&state_path)? {
            Some(payload) => postcard::from_bytes::<HardState>(&payload)
                .map_err(|e| corrupt(&state_path, &e.to_string()))?,
            None => HardState::default(),
        };

        let log_path = dir.join(LOG_FILE);
        let data = match fs::read(&log_path) {
            Ok(data) => data,
            Err(e) if e.kind() == io::ErrorKind::NotFound => Vec::new(),
            Err(e) => return Err(e),
        };
        let mut entries = BTreeMap::new();
        let mut purged = None;
        let mut valid = 0;
        while valid < data.len() {
            let rest = &data[valid..];
            let parsed = frame::next_frame(rest).and_then(|(payload, len)| {
                let decoded = postcard::from_bytes::<LogFrame>(payload)
                    .map_err(|_| "undecodable log frame")?;
                Ok((decoded, len))
            });
            let accepted = parsed.and_then(|(decoded, len)| {
                let expected = entries
                    .keys()
                    .next_back()
                    .map(|i| i + 1)
                    .or(purged.as_ref().map(|p: &LogIdOf<TypeConfig>| p.index + 1));
                match decoded {
                    LogFrame::Purged(id) if valid == 0 => purged = Some(id),
                    LogFrame::Purged(_) => return Err("a purge marker after the first frame"),
                    LogFrame::Entry(e) => {
                        if expected.is_some_and(|x| x != e.log_id.index) {
                            return Err("entry index out of sequence");
                        }
                        entries.insert(e.log_id.index, e);
                    }
                }
                Ok(len)
            });
            match accepted {
                Ok(len) => valid += len,
                Err(reason) => {
                    tracing::warn!(
                        path = %log_path.display(),
                        position = valid,
                        dropped_bytes = rest.len(),
                        reason,
                        "truncating the controller quorum log's torn or corrupt tail"
                    );
                    break;
                }
            }
        }
        let file = {
            use std::os::unix::fs::OpenOptionsExt as _;
            OpenOptions::new()
                .append(true)
                .create(true)
                .mode(FILE_MODE)
                .open(&log_path)?
        };
        if valid < data.len() {
            file.set_len(u64::try_from(valid).unwrap_or(u64::MAX))?;
            file.sync_all()?;
        }
        syncline_durable::sync_dir(dir)?;
        Ok(LogStore {
            inner: Arc::new(Mutex::new(LogInner {
                dir: dir.to_owned(),
                file,
                entries,
                purged,
                vote: state.vote,
                committed: state.committed,
                failed: false,
            })),
        })
    }
}

impl LogInner {
    fn check(&self) -> io::Result<()> {
        if self.failed {
            return Err(io::Error::other(
                "an earlier write to the controller quorum log failed; restart the node",
            ));
        }
        Ok(())
    }

    /// Runs a write; a failure poisons the store.
    fn write(&mut self, f: impl FnOnce(&mut Self) -> io::Result<()>) -> io::Result<()> {
        self.check()?;
        let result = f(self);
        if result.is_err() {
            self.failed = true;
        }
        result
    }

    fn save_state(&self) -> io::Result<()> {
        let state = HardState {
            vote: self.vote,
            committed: self.committed,
        };
        let payload = postcard::to_allocvec(&state).map_err(io::Error::other)?;
        let mut buf = Vec::new();
        frame::put_frame(&mut buf, &payload)?;
        syncline_durable::write_atomic_with_mode(&self.dir.join(STATE_FILE), &buf, FILE_MODE)
    }

    /// Writes the whole log anew (purge marker, then every entry) and replaces the
    /// file.
    fn rewrite(&mut self) -> io::Result<()> {
        let mut buf = Vec::new();
        if let Some(purged) = &self.purged {
            put_log_frame(&mut buf, &LogFrame::Purged(*purged))?;
        }
        for entry in self.entries.values() {
            put_log_frame(&mut buf, &LogFrame::Entry(entry.clone()))?;
        }
        let path = self.dir.join(LOG_FILE);
        syncline_durable::write_atomic_with_mode(&path, &buf, FILE_MODE)?;
        self.file = OpenOptions::new().append(true).open(&path)?;
        Ok(())
    }
}

/// Makes every file in `dir` [`FILE_MODE`]: those an older version wrote
/// readable by all.
fn narrow_files(dir: &Path) -> io::Result<()> {
    use std::os::unix::fs::PermissionsExt as _;
    for entry in fs::read_dir(dir)? {
        let entry = entry?;
        let meta = entry.metadata()?;
        if meta.is_file() && meta.permissions().mode() & 0o7777 != FILE_MODE {
            fs::set_permissions(entry.path(), fs::Permissions::from_mode(FILE_MODE))?;
        }
    }
    Ok(())
}

fn put_log_frame(buf: &mut Vec<u8>, f: &LogFrame) -> io::Result<()> {
    let payload = postcard::to_allocvec(f).map_err(io::Error::other)?;
    frame::put_frame(buf, &payload)
}

impl RaftLogReader<TypeConfig> for LogStore {
    async fn try_get_log_entries<RB: RangeBounds<u64> + Clone + Debug + OptionalSend>(
        &mut self,
        range: RB,
    ) -> Result<Vec<EntryOf<TypeConfig>>, io::Error> {
        let inner = self.inner.lock().await;
        Ok(inner.entries.range(range).map(|(_, e)| e.clone()).collect())
    }

    async fn read_vote(&mut self) -> Result<Option<VoteOf<TypeConfig>>, io::Error> {
        Ok(self.inner.lock().await.vote)
    }
}

impl RaftLogStorage<TypeConfig> for LogStore {
    type LogReader = LogStore;

    async fn get_log_state(&mut self) -> Result<LogState<TypeConfig>, io::Error> {
        let inner = self.inner.lock().await;
        let last = inner.entries.values().next_back().map(|e| e.log_id);
        Ok(LogState {
            last_purged_log_id: inner.purged,
            last_log_id: last.or_else(|| inner.purged),
        })
    }

    async fn get_log_reader(&mut self) -> Self::LogReader {
        self.clone()
    }

    async fn save_vote(&mut self, vote: &VoteOf<TypeConfig>) -> Result<(), io::Error> {
        let mut inner = self.inner.lock().await;
        let previous = inner.vote.replace(*vote);
        inner.write(|i| i.save_state()).inspect_err(|_| {
            tracing::error!(?previous, "failed to persist the controller quorum vote");
        })
    }

    async fn save_committed(
        &mut self,
        committed: Option<LogIdOf<TypeConfig>>,
    ) -> Result<(), io::Error> {
        let mut inner = self.inner.lock().await;
        if inner.committed == committed {
            return Ok(());
        }
        inner.committed = committed;
        inner.write(|i| i.save_state())
    }

    async fn read_committed(&mut self) -> Result<Option<LogIdOf<TypeConfig>>, io::Error> {
        Ok(self.inner.lock().await.committed)
    }

    async fn append<I>(
        &mut self,
        entries: I,
        callback: IOFlushed<TypeConfig>,
    ) -> Result<(), io::Error>
    where
        I: IntoIterator<Item = EntryOf<TypeConfig>> + OptionalSend,
        I::IntoIter: OptionalSend,
    {
        let mut inner = self.inner.lock().await;
        let entries: Vec<_> = entries.into_iter().collect();
        let mut buf = Vec::new();
        for entry in &entries {
            put_log_frame(&mut buf, &LogFrame::Entry(entry.clone()))?;
        }
        inner.write(|i| {
            i.file.write_all(&buf)?;
            i.file.sync_data()
        })?;
        for entry in entries {
            inner.entries.insert(entry.log_id.index, entry);
        }
        drop(inner);
        // Durable: only now may openraft count these entries (vote for them, ack them).
        callback.io_completed(Ok(()));
        Ok(())
    }

    async fn truncate_after(
        &mut self,
        last_log_id: Option<LogIdOf<TypeConfig>>,
    ) -> Result<(), io::Error> {
        let mut inner = self.inner.lock().await;
        let first_removed = last_log_id.map_or(0, |id| id.index + 1);
        if inner.entries.range(first_removed..).next().is_none() {
            return Ok(());
        }
        inner.entries.split_off(&first_removed);
        inner.write(|i| i.rewrite())
    }

    async fn purge(&mut self, log_id: LogIdOf<TypeConfig>) -> Result<(), io::Error> {
        let mut inner = self.inner.lock().await;
        if inner
            .purged
            .as_ref()
            .is_some_and(|p| p.index >= log_id.index)
        {
            return Ok(());
        }
        let keep = inner.entries.split_off(&(log_id.index + 1));
        inner.entries = keep;
        inner.purged = Some(log_id);
        inner.write(|i| i.rewrite())
    }
}
