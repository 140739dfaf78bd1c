//! The Raft state machine: the [`MetadataImage`] the committed entries build, and its
//! snapshots.
//!
//! A snapshot is the image as a protobuf `MetadataSnapshot`, stored in
//! `quorum.snapshot` (one frame: the postcard [`SnapshotFile`]) and sent whole to a
//! voter that is behind the leader's purged log.

use std::io;
use std::path::{Path, PathBuf};
use std::sync::{Arc, PoisonError, RwLock, RwLockReadGuard, RwLockWriteGuard};

use futures::{Stream, TryStreamExt};
use openraft::alias::{LogIdOf, SnapshotMetaOf, SnapshotOf, StoredMembershipOf};
use openraft::storage::{EntryResponder, RaftStateMachine};
use openraft::{EntryPayload, OptionalSend, RaftSnapshotBuilder, Snapshot, StoredMembership};
use prost::Message;
use serde::{Deserialize, Serialize};
use syncline_proto::pb;
use tokio::sync::Mutex;

use super::frame::{self, corrupt};
use super::types::TypeConfig;
use crate::MetadataImage;

/// The snapshot file inside the quorum directory.
pub(crate) const SNAPSHOT_FILE: &str = "quorum.snapshot";

/// The content of `quorum.snapshot`.
#[derive(Serialize, Deserialize)]
struct SnapshotFile {
    meta: SnapshotMetaOf<TypeConfig>,
    /// A protobuf `MetadataSnapshot`.
    data: Vec<u8>,
}

/// What the applied entries built.
#[derive(Debug)]
pub(crate) struct Applied {
    pub(crate) image: MetadataImage,
    pub(crate) last_applied: Option<LogIdOf<TypeConfig>>,
    pub(crate) membership: StoredMembershipOf<TypeConfig>,
}

/// The state machine; clones share it (the quorum reads the image through one).
#[derive(Debug, Clone)]
pub(crate) struct StateMachine {
    shared: Arc<Shared>,
}

#[derive(Debug)]
struct Shared {
    dir: PathBuf,
    applied: RwLock<Applied>,
    /// The last snapshot built or installed.
    snapshot: Mutex<Option<SnapshotOf<TypeConfig, Vec<u8>>>>,
}

impl StateMachine {
    /// Opens the state machine under `dir`: the image of the stored snapshot, or the
    /// empty image.
    pub(crate) fn open(dir: &Path) -> io::Result<StateMachine> {
        let path = dir.join(SNAPSHOT_FILE);
        let (applied, snapshot) = match frame::read_single_frame(&path)? {
            None => (
                Applied {
                    image: MetadataImage::new(),
                    last_applied: None,
                    membership: StoredMembership::default(),
                },
                None,
            ),
            Some(payload) => {
                let file = postcard::from_bytes::<SnapshotFile>(&payload)
                    .map_err(|e| corrupt(&path, &e.to_string()))?;
                let image = decode_image(&file.data).map_err(|e| corrupt(&path, &e.to_string()))?;
                let applied = Applied {
                    image,
                    last_applied: file.meta.last_log_id,
                    membership: file.meta.last_membership.clone(),
                };
                let snapshot = Snapshot {
                    meta: file.meta,
                    snapshot: file.data,
                };
                (applied, Some(snapshot))
            }
        };
        Ok(StateMachine {
            shared: Arc::new(Shared {
                dir: dir.to_owned(),
                applied: RwLock::new(applied),
                snapshot: Mutex::new(snapshot),
            }),
        })
    }

    /// The applied state, for reading.
    pub(crate) fn read(&self) -> RwLockReadGuard<'_, Applied> {
        // A panic while the lock was held cannot leave a half-applied record: the image
        // changes only through `MetadataImage::apply`, which leaves it untouched on
        // error (and a refused record stops this voter anyway).
        self.shared
            .applied
            .read()
            .unwrap_or_else(PoisonError::into_inner)
    }

    fn write(&self) -> RwLockWriteGuard<'_, Applied> {
        self.shared
            .applied
            .write()
            .unwrap_or_else(PoisonError::into_inner)
    }

    fn store(&self, snapshot: &SnapshotOf<TypeConfig, Vec<u8>>) -> io::Result<()> {
        let file = SnapshotFile {
            meta: snapshot.meta.clone(),
            data: snapshot.snapshot.clone(),
        };
        let payload = postcard::to_allocvec(&file).map_err(io::Error::other)?;
        let mut buf = Vec::new();
        frame::put_frame(&mut buf, &payload)?;
        syncline_durable::write_atomic_with_mode(
            &self.shared.dir.join(SNAPSHOT_FILE),
            &buf,
            super::log_store::FILE_MODE,
        )
    }
}

fn decode_image(data: &[u8]) -> io::Result<MetadataImage> {
    let snapshot = pb::MetadataSnapshot::decode(data)
        .map_err(|e| io::Error::new(io::ErrorKind::InvalidData, e))?;
    MetadataImage::from_snapshot(&snapshot)
        .map_err(|e| io::Error::new(io::ErrorKind::InvalidData, e))
}

impl RaftSnapshotBuilder<TypeConfig> for StateMachine {
    type SnapshotData = Vec<u8>;

    async fn build_snapshot(&mut self) -> Result<SnapshotOf<TypeConfig, Vec<u8>>, io::Error> {
        let snapshot = {
            let applied = self.read();
            Snapshot {
                meta: SnapshotMetaOf::<TypeConfig> {
                    last_log_id: applied.last_applied,
                    last_membership: applied.membership.clone(),
                },
                snapshot: applied.image.to_snapshot().encode_to_vec(),
            }
        };
        let mut current = self.shared.snapshot.lock().await;
        self.store(&snapshot)?;
        tracing::debug!(last_log_id = ?snapshot.meta.last_log_id, bytes = snapshot.snapshot.len(),
            "controller quorum snapshot built");
        *current = Some(snapshot.clone());
        Ok(snapshot)
    }
}

impl RaftStateMachine<TypeConfig> for StateMachine {
    type SnapshotData = Vec<u8>;
    type SnapshotBuilder = StateMachine;

    async fn applied_state(
        &mut self,
    ) -> Result<(Option<LogIdOf<TypeConfig>>, StoredMembershipOf<TypeConfig>), io::Error> {
        let applied = self.read();
        Ok((applied.last_applied, applied.membership.clone()))
    }

    async fn apply<Strm>(&mut self, mut entries: Strm) -> Result<(), io::Error>
    where
        Strm: Stream<Item = Result<EntryResponder<TypeConfig>, io::Error>> + Unpin + OptionalSend,
    {
        while let Some((entry, responder)) = entries.try_next().await? {
            let first = {
                let mut applied = self.write();
                let first = applied.image.next_offset();
                match &entry.payload {
                    EntryPayload::Normal(batch) => {
                        for (offset, record) in (first..).zip(&batch.0) {
                            // A refused record is a bug or a damaged log: stop this
                            // voter (openraft treats the error as fatal) rather than
                            // diverge from the others. The records before it in the
                            // batch stay applied; the node is unusable from here on.
                            applied.image.apply(offset, record).map_err(|e| {
                                io::Error::other(format!(
                                    "controller quorum entry {} does not apply to the metadata image: {e}",
                                    entry.log_id
                                ))
                            })?;
                        }
                    }
                    EntryPayload::Membership(membership) => {
                        applied.membership =
                            StoredMembership::new(Some(entry.log_id), membership.clone());
                    }
                    EntryPayload::Blank => {}
                }
                applied.last_applied = Some(entry.log_id);
                first
            };
            if let Some(responder) = responder {
                responder.send(first);
            }
        }
        Ok(())
    }

    async fn get_snapshot_builder(&mut self) -> Self::SnapshotBuilder {
        self.clone()
    }

    async fn install_snapshot(
        &mut self,
        meta: &SnapshotMetaOf<TypeConfig>,
        snapshot: Vec<u8>,
    ) -> Result<(), io::Error> {
        let image = decode_image(&snapshot)?;
        let snapshot = Snapshot {
            meta: meta.clone(),
            snapshot,
        };
        let mut current = self.shared.snapshot.lock().await;
        self.store(&snapshot)?;
        {
            let mut applied = self.write();
            applied.image = image;
            applied.last_applied = meta.last_log_id;
            applied.membership = meta.last_membership.clone();
        }
        tracing::info!(last_log_id = ?meta.last_log_id, "controller quorum snapshot installed");
        *current = Some(snapshot);
        Ok(())
    }

    async fn get_current_snapshot(
        &mut self,
    ) -> Result<Option<SnapshotOf<TypeConfig, Vec<u8>>>, io::Error> {
        Ok(self.shared.snapshot.lock().await.clone())
    }
}
