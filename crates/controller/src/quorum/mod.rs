//! The controller quorum: the metadata log replicated by Raft among the controller
//! voters. The Raft log is the metadata log, the Raft leader is the active
//! controller, and every voter applies committed entries to its own
//! [`MetadataImage`].
//!
//! - `types`: openraft's type configuration; one entry carries one proposal, a batch
//!   of metadata records.
//! - `log_store`: the Raft log and vote on disk (`quorum.log`, `quorum.state`).
//! - `state_machine`: the image the committed entries build, and its snapshots
//!   (`quorum.snapshot`).
//! - `network`: [`QuorumTransport`], the bytes the voters exchange.
//! - `frame`: CRC-32C frames and atomic file replacement.
//!
//! # Leadership
//!
//! Only the leader proposes. A leader taking office first calls
//! [`Quorum::barrier`]: it commits an empty entry and returns once that entry is
//! applied here, and so everything in this leader's log before it — whatever any
//! earlier leader committed (Raft's leader completeness), and any entry of its own
//! whose proposal timed out — is in [`Quorum::image`]. Only then may it decide from
//! the image. [`Quorum::propose`] returns after the entry is committed by a majority
//! and applied to this voter's image; a `Timeout` or a lost leadership leaves the
//! outcome unknown (the entry may still commit under this or a later leader), so the
//! caller resigns and the barrier of whoever takes office next — this voter again
//! in the same term included — settles it.

mod frame;
mod log_store;
mod network;
mod state_machine;
mod types;

#[cfg(test)]
mod tests;

use std::collections::BTreeMap;
use std::fmt;
use std::io;
use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

use bytes::Bytes;
use openraft::alias::WatchReceiverOf;
use openraft::async_runtime::watch::WatchReceiver;
use openraft::error::{ClientWriteError, InitializeError, RaftError};
use openraft::{BasicNode, Config, Instant as _, RaftMetrics, ServerState, SnapshotPolicy};
use syncline_proto::pb;
use tokio::sync::watch;
use tokio::task::JoinHandle;

use crate::MetadataImage;
use log_store::LogStore;
use network::Network;
pub use network::{heartbeat_request, request_sender, QuorumTransport};
use state_machine::StateMachine;
use types::{raft_id, voter_id, MetadataBatch, TypeConfig};

type Raft = openraft::Raft<TypeConfig, StateMachine>;

/// Static configuration of one voter.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct QuorumConfig {
    /// This voter's id; one of `voters`.
    pub node_id: i32,
    /// Every voter: id -> "host:port" (opaque here; passed to the transport).
    pub voters: BTreeMap<i32, String>,
    /// Directory of the Raft log, vote and snapshot (the broker passes
    /// `<log_dir>/__cluster_metadata`).
    pub dir: PathBuf,
    /// How often the leader heartbeats the followers.
    pub heartbeat_interval_ms: u64,
    /// A follower that hears from no leader for a random time in
    /// [min, max] starts an election.
    pub election_timeout_min_ms: u64,
    /// See `election_timeout_min_ms`.
    pub election_timeout_max_ms: u64,
    /// Snapshot (and purge the log behind it) every N applied entries.
    pub snapshot_every_entries: u64,
}

impl QuorumConfig {
    /// A configuration with the default timings: heartbeats every 100 ms, elections
    /// after 1-2 s of silence, a snapshot every 1000 entries.
    pub fn new(node_id: i32, voters: BTreeMap<i32, String>, dir: impl Into<PathBuf>) -> Self {
        QuorumConfig {
            node_id,
            voters,
            dir: dir.into(),
            ..QuorumConfig::default()
        }
    }

    fn validate(&self) -> Result<(), QuorumError> {
        let invalid = |what: String| Err(QuorumError::InvalidConfig(what));
        if self.voters.is_empty() {
            return invalid("no voters".into());
        }
        if let Some(id) = self.voters.keys().find(|&&id| id < 0) {
            return invalid(format!("negative voter id {id}"));
        }
        if !self.voters.contains_key(&self.node_id) {
            return invalid(format!("node {} is not one of the voters", self.node_id));
        }
        if self.heartbeat_interval_ms == 0
            || self.heartbeat_interval_ms >= self.election_timeout_min_ms
        {
            return invalid(format!(
                "the heartbeat interval ({} ms) must be above 0 and below the election timeout ({} ms)",
                self.heartbeat_interval_ms, self.election_timeout_min_ms
            ));
        }
        if self.election_timeout_min_ms >= self.election_timeout_max_ms {
            return invalid(format!(
                "the election timeout range [{}, {}] ms is empty",
                self.election_timeout_min_ms, self.election_timeout_max_ms
            ));
        }
        if self.snapshot_every_entries == 0 {
            return invalid("snapshot_every_entries must be above 0".into());
        }
        Ok(())
    }
}

impl Default for QuorumConfig {
    fn default() -> Self {
        QuorumConfig {
            node_id: 0,
            voters: BTreeMap::new(),
            dir: PathBuf::new(),
            heartbeat_interval_ms: 100,
            election_timeout_min_ms: 1000,
            election_timeout_max_ms: 2000,
            snapshot_every_entries: 1000,
        }
    }
}

/// The quorum as one voter sees it.
#[derive(Clone, Debug, PartialEq)]
pub struct QuorumStatus {
    /// This voter.
    pub node_id: i32,
    /// The leader this voter knows of.
    pub leader_id: Option<i32>,
    /// The current Raft term: the quorum's leader epoch.
    pub term: u64,
    /// Whether this voter is the leader (the active controller).
    pub is_leader: bool,
    /// This voter's last Raft log index + 1.
    pub log_end_offset: u64,
    /// The committed Raft index this voter knows of.
    pub committed: Option<u64>,
    /// The last Raft index applied to this voter's image.
    pub applied: Option<u64>,
    /// On the leader, every voter, the leader included, by id; empty elsewhere.
    pub voters: Vec<VoterStatus>,
}

/// One voter's replication, as the leader sees it.
#[derive(Clone, Debug, PartialEq)]
pub struct VoterStatus {
    /// The voter.
    pub id: i32,
    /// Its matched Raft index + 1; 0 if nothing is known to match.
    pub log_end_offset: u64,
    /// The leader's log end minus this voter's.
    pub lag: u64,
    /// Milliseconds since the leader last heard from it; 0 for the leader itself,
    /// `None` if never.
    pub last_contact_ms: Option<u64>,
}

/// Why a proposal (or a barrier) failed.
#[derive(Debug, thiserror::Error)]
pub enum ProposeError {
    /// This voter is not the leader; `leader` is the one it knows of.
    #[error("this controller is not the quorum leader (the leader is {})",
        leader.map_or_else(|| "unknown".to_owned(), |l| format!("voter {l}")))]
    NotLeader {
        /// The known leader.
        leader: Option<i32>,
    },
    /// Nothing was confirmed within the timeout: the entry may or may not commit.
    #[error("the controller quorum did not commit within {timeout_ms} ms: fewer than a majority of voters reachable?")]
    Timeout {
        /// The timeout given.
        timeout_ms: u64,
    },
    /// A proposal that can never apply (a record with nothing set); nothing was
    /// proposed.
    #[error("invalid metadata proposal: {0}")]
    Invalid(String),
    /// The Raft node stopped: storage failure, an entry that does not apply to the
    /// image, or shutdown.
    #[error("the controller quorum node failed: {0}")]
    Fatal(String),
}

/// Why the quorum could not start.
#[derive(Debug, thiserror::Error)]
pub enum QuorumError {
    /// The configuration cannot work.
    #[error("invalid controller quorum configuration: {0}")]
    InvalidConfig(String),
    /// Opening or reading the quorum's files failed.
    #[error("controller quorum storage in {dir}: {source}")]
    Storage {
        /// The quorum directory.
        dir: PathBuf,
        /// What failed.
        source: io::Error,
    },
    /// The Raft node failed to start.
    #[error("the controller quorum's Raft node failed to start: {0}")]
    Raft(String),
}

/// One voter of the controller quorum. Clones share it.
#[derive(Clone, Debug)]
pub struct Quorum {
    inner: Arc<Inner>,
}

struct Inner {
    node_id: i32,
    raft: Raft,
    state_machine: StateMachine,
    status: watch::Sender<QuorumStatus>,
    status_task: Mutex<Option<JoinHandle<()>>>,
    stopped: AtomicBool,
}

impl fmt::Debug for Inner {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Quorum")
            .field("node_id", &self.node_id)
            .field("status", &*self.status.borrow())
            .finish_non_exhaustive()
    }
}

impl Quorum {
    /// Opens the storage under `config.dir` (creating it) and starts the Raft node.
    /// If the log and vote are empty, initializes the membership with every voter:
    /// every voter does this with the same configuration, which Raft's voting makes
    /// safe (one leader per term; the others' identical initial entries are replaced).
    pub async fn start(
        config: QuorumConfig,
        transport: Arc<dyn QuorumTransport>,
    ) -> Result<Quorum, QuorumError> {
        config.validate()?;
        let storage = |source| QuorumError::Storage {
            dir: config.dir.clone(),
            source,
        };
        let log = LogStore::open(&config.dir).map_err(storage)?;
        let state_machine = StateMachine::open(&config.dir).map_err(storage)?;
        let raft_config = Config {
            cluster_name: "syncline-controller".into(),
            heartbeat_interval: config.heartbeat_interval_ms,
            election_timeout_min: config.election_timeout_min_ms,
            election_timeout_max: config.election_timeout_max_ms,
            snapshot_policy: SnapshotPolicy::LogsSinceLast(config.snapshot_every_entries),
            // Purge right behind each snapshot: a voter that is further behind gets
            // the (small) snapshot instead.
            max_in_snapshot_log_to_keep: 0,
            // Retry an unreachable voter every heartbeat, not on openraft's
            // default backoff (200 ms doubling to 1 s): after a short cut that
            // would keep the leader silent for about an election timeout, and
            // the healed followers would elect a new leader for nothing.
            backoff: format!("{hb}ms ..{hb}ms", hb = config.heartbeat_interval_ms),
            ..Config::default()
        }
        .validate()
        .map_err(|e| QuorumError::InvalidConfig(e.to_string()))?;
        let node_id = raft_id(config.node_id).ok_or_else(|| {
            QuorumError::InvalidConfig(format!("negative node id {}", config.node_id))
        })?;
        let raft = Raft::new(
            node_id,
            Arc::new(raft_config),
            Network { transport },
            log,
            state_machine.clone(),
        )
        .await
        .map_err(|e| QuorumError::Raft(e.to_string()))?;

        let initialized = raft
            .is_initialized()
            .await
            .map_err(|e| QuorumError::Raft(e.to_string()))?;
        if !initialized {
            let members: BTreeMap<u64, BasicNode> = config
                .voters
                .iter()
                .filter_map(|(&id, address)| Some((raft_id(id)?, BasicNode::new(address))))
                .collect();
            match raft.initialize(members).await {
                Ok(()) | Err(RaftError::APIError(InitializeError::NotAllowed(_))) => {}
                Err(e) => return Err(QuorumError::Raft(e.to_string())),
            }
        }

        let initial = status_of(config.node_id, &raft.metrics().borrow_watched());
        let (status, _) = watch::channel(initial);
        let quorum = Quorum {
            inner: Arc::new(Inner {
                node_id: config.node_id,
                raft,
                state_machine,
                status,
                status_task: Mutex::new(None),
                stopped: AtomicBool::new(false),
            }),
        };
        let task = tokio::spawn(publish_status(
            config.node_id,
            quorum.inner.raft.metrics(),
            quorum.inner.status.clone(),
        ));
        *quorum.lock_task() = Some(task);
        Ok(quorum)
    }

    fn lock_task(&self) -> std::sync::MutexGuard<'_, Option<JoinHandle<()>>> {
        self.inner
            .status_task
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
    }

    /// Server side of the transport: decodes a request another voter's transport
    /// sent, runs it on this voter and encodes the reply. Bad bytes are an `Err`.
    pub async fn handle_rpc(&self, request: Bytes) -> Result<Bytes, String> {
        network::serve(&self.inner.raft, &request).await
    }

    /// Leader only: replicates `records` as one Raft entry and waits until it is
    /// committed and applied to this voter's image; returns the metadata offset of the
    /// first record (the records get consecutive offsets).
    ///
    /// `NotLeader` if this voter is not the leader, or lost leadership before the
    /// entry committed (then the outcome is unknown, as after a `Timeout`); `Timeout`
    /// if not confirmed within `timeout`; `Fatal` if the node stopped.
    pub async fn propose(
        &self,
        records: Vec<pb::MetadataRecord>,
        timeout: Duration,
    ) -> Result<i64, ProposeError> {
        if let Some(i) = records.iter().position(|r| r.record.is_none()) {
            // It would stop every voter when applied.
            return Err(ProposeError::Invalid(format!(
                "record {i} of the batch is empty"
            )));
        }
        self.write(MetadataBatch(records), timeout).await
    }

    /// Commits `batch` and waits until it is applied here.
    async fn write(&self, batch: MetadataBatch, timeout: Duration) -> Result<i64, ProposeError> {
        let write = self.inner.raft.client_write(batch);
        match tokio::time::timeout(timeout, write).await {
            Err(_) => Err(timed_out(timeout)),
            Ok(Ok(response)) => Ok(response.data),
            Ok(Err(RaftError::APIError(
                ClientWriteError::ForwardToLeader(f) | ClientWriteError::LogEntryDiscarded(f),
            ))) => Err(ProposeError::NotLeader {
                leader: f.leader_id.and_then(voter_id),
            }),
            Ok(Err(e)) => Err(ProposeError::Fatal(e.to_string())),
        }
    }

    /// Leader only: returns once every entry in this leader's log before the call
    /// is committed and applied to [`image`](Self::image) — in particular
    /// everything earlier leaders committed, and any entry of this leader whose
    /// proposal timed out. A leader calls it before deciding anything.
    ///
    /// It commits an empty entry: Raft commits an entry only with every entry
    /// before it, and entries apply in order. (A read index would not do: it
    /// waits for the commit index only, and an entry of this term that timed out
    /// may still be uncommitted in the log, to commit after decisions taken on an
    /// image without it.) Same errors as [`propose`](Self::propose).
    pub async fn barrier(&self, timeout: Duration) -> Result<(), ProposeError> {
        self.write(MetadataBatch(Vec::new()), timeout)
            .await
            .map(|_| ())
    }

    /// The controller epoch of this voter's applied image (no copy of the image).
    pub fn controller_epoch(&self) -> i32 {
        self.inner.state_machine.read().image.controller_epoch()
    }

    /// A copy of this voter's applied image.
    pub fn image(&self) -> MetadataImage {
        self.inner.state_machine.read().image.clone()
    }

    /// The current status.
    pub fn status(&self) -> QuorumStatus {
        status_of(
            self.inner.node_id,
            &self.inner.raft.metrics().borrow_watched(),
        )
    }

    /// A receiver that changes whenever the leader, term, log end, commit or applied
    /// index (or a voter's replication on the leader) changes. Its `last_contact_ms`
    /// values are as of the last such change: call [`status`](Self::status) for
    /// fresh ones.
    pub fn subscribe(&self) -> watch::Receiver<QuorumStatus> {
        self.inner.status.subscribe()
    }

    /// Stops the Raft node; idempotent. Later proposals fail with `Fatal`.
    pub async fn shutdown(&self) {
        if self.inner.stopped.swap(true, Ordering::SeqCst) {
            return;
        }
        if let Err(e) = self.inner.raft.shutdown().await {
            tracing::warn!(error = %e, "the controller quorum's Raft node did not stop cleanly");
        }
        if let Some(task) = self.lock_task().take() {
            task.abort();
        }
    }
}

fn timed_out(timeout: Duration) -> ProposeError {
    ProposeError::Timeout {
        timeout_ms: u64::try_from(timeout.as_millis()).unwrap_or(u64::MAX),
    }
}

/// Follows openraft's metrics and publishes a [`QuorumStatus`] when it changes (other
/// than in contact times).
async fn publish_status(
    node_id: i32,
    mut metrics: WatchReceiverOf<TypeConfig, RaftMetrics<TypeConfig>>,
    status: watch::Sender<QuorumStatus>,
) {
    while metrics.changed().await.is_ok() {
        let next = status_of(node_id, &metrics.borrow_watched());
        status.send_if_modified(|current| {
            let changed = !same_progress(current, &next);
            if changed {
                *current = next;
            }
            changed
        });
    }
}

/// Whether two statuses differ in contact times only.
fn same_progress(a: &QuorumStatus, b: &QuorumStatus) -> bool {
    let strip = |s: &QuorumStatus| QuorumStatus {
        voters: s
            .voters
            .iter()
            .map(|v| VoterStatus {
                last_contact_ms: None,
                ..v.clone()
            })
            .collect(),
        ..s.clone()
    };
    strip(a) == strip(b)
}

fn status_of(node_id: i32, m: &RaftMetrics<TypeConfig>) -> QuorumStatus {
    let log_end_offset = m.last_log_index.map_or(0, |i| i + 1);
    let is_leader = m.state == ServerState::Leader;
    let mut voters = Vec::new();
    if let (true, Some(replication)) = (is_leader, &m.replication) {
        for raft_voter in m.membership_config.voter_ids() {
            let Some(id) = voter_id(raft_voter) else {
                continue;
            };
            let (end, last_contact_ms) = if raft_voter == m.id {
                (log_end_offset, Some(0))
            } else {
                let matched = replication
                    .get(&raft_voter)
                    .and_then(|l| l.as_ref())
                    .map_or(0, |l| l.index + 1);
                let contact = m
                    .heartbeat
                    .as_ref()
                    .and_then(|h| h.get(&raft_voter).copied().flatten())
                    .map(|at| u64::try_from(at.elapsed().as_millis()).unwrap_or(u64::MAX));
                (matched, contact)
            };
            voters.push(VoterStatus {
                id,
                log_end_offset: end,
                lag: log_end_offset.saturating_sub(end),
                last_contact_ms,
            });
        }
        voters.sort_by_key(|v| v.id);
    }
    QuorumStatus {
        node_id,
        leader_id: m.current_leader.and_then(voter_id),
        term: m.current_term,
        is_leader,
        log_end_offset,
        committed: m.local_committed.as_ref().map(|l| l.index),
        applied: m.last_applied.as_ref().map(|l| l.index),
        voters,
    }
}
