//! The controller role hosted in a broker process: the I/O shell around the pure
//! [`syncline_controller::Controller`] and the controller quorum
//! ([`syncline_controller::Quorum`]).
//!
//! Every voter runs the quorum; the one the quorum elects leader takes office as
//! the active controller:
//! 1. it waits until every record earlier controllers committed is applied to its
//!    image (the quorum's barrier), so it decides on the whole committed state;
//! 2. it builds a [`Controller`] over that image (every broker gets a fresh session
//!    from now) and commits a `ControllerStartRecord` with the next controller
//!    epoch, which brokers fence on;
//! 3. it sends every registered broker the whole image (LeaderAndIsr, `full`), then
//!    serves: for every operation it decides (pure), commits the records through
//!    the quorum (a majority has them), applies them, then answers and announces the
//!    changes. A per-broker sender pushes LeaderAndIsr requests in order and falls
//!    back to the whole image after any failure; announcements are idempotent on
//!    the broker (partition epochs), so resending is always safe.
//!
//! It resigns when the quorum elects another leader, when a commit fails (no
//! majority within `controller_quorum_commit_timeout_ms`: the outcome is unknown,
//! so its run-time state cannot be trusted) or when a commit lands at an offset its
//! image did not expect. A voter that is not the active controller answers
//! controller requests with NOT_CONTROLLER and the leader it knows of.

use std::collections::{BTreeSet, HashMap, VecDeque};
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use futures::future::BoxFuture;
use parking_lot::Mutex;
use syncline_client::Connection;
use syncline_controller::{
    changed_brokers, changed_partitions, changed_topic_configs, client_quotas_changed,
    deleted_topics, parse_scram_bootstrap, security_changed, Controller, ControllerConfig,
    ControllerResult, ProposeError, Quorum, QuorumConfig, QuorumStatus, QuorumTransport,
};
use syncline_proto::{pb, ErrorCode};
use tokio::sync::{mpsc, oneshot, watch, Notify};
use tokio::time::Instant;
use tokio_util::sync::CancellationToken;

use crate::config::BrokerConfig;
use crate::metrics::BrokerMetrics;
use crate::net::Network;

/// Requests queued for the event loop before callers wait.
const QUEUE: usize = 1024;
/// Pause between attempts to reach a broker that did not answer.
const PUSH_BACKOFF: Duration = Duration::from_millis(200);
/// Pause before a leader that could not take office tries again.
const RETAKE_PAUSE: Duration = Duration::from_millis(100);

enum Command {
    /// A controller request and where its answer goes.
    Request(pb::request::Body, oneshot::Sender<pb::response::Body>),
    /// A sender lost its broker: queue the whole image for it.
    FullSync { broker_id: i32, broker_epoch: i64 },
}

impl std::fmt::Debug for Command {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Command::Request(body, _) => f.write_str(syncline_proto::api_name(body)),
            Command::FullSync { .. } => f.write_str("FullSync"),
        }
    }
}

/// The handle request handlers use to reach the controller.
#[derive(Debug, Clone)]
pub(crate) struct ControllerHandle {
    tx: mpsc::Sender<Command>,
    task: Arc<parking_lot::Mutex<Option<tokio::task::JoinHandle<()>>>>,
    quorum: Quorum,
}

impl ControllerHandle {
    /// Waits for the event loop to finish (after its shutdown token fired), then
    /// stops the quorum member.
    pub(crate) async fn join(&self) {
        let task = self.task.lock().take();
        if let Some(t) = task {
            let _ = t.await;
        }
        self.quorum.shutdown().await;
    }

    /// Runs a controller request (registration, heartbeat, AlterPartition,
    /// CreateTopics, DescribeQuorum); None when the controller has stopped. A voter
    /// that is not the active controller answers an `ErrorResponse` NOT_CONTROLLER
    /// with a hint.
    pub(crate) async fn handle(&self, body: pb::request::Body) -> Option<pb::response::Body> {
        if let pb::request::Body::DescribeQuorum(_) = body {
            return Some(self.describe_quorum());
        }
        let (tx, rx) = oneshot::channel();
        self.tx.send(Command::Request(body, tx)).await.ok()?;
        rx.await.ok()
    }

    /// Runs one message of the quorum's protocol from another voter.
    pub(crate) async fn raft(&self, request: pb::RaftRequest) -> pb::RaftResponse {
        match self.quorum.handle_rpc(request.payload).await {
            Ok(payload) => pb::RaftResponse {
                error_code: ErrorCode::None as i32,
                error_message: String::new(),
                payload,
            },
            Err(e) => pb::RaftResponse {
                error_code: ErrorCode::InvalidRequest as i32,
                error_message: e,
                payload: Bytes::new(),
            },
        }
    }

    /// The quorum as this voter sees it; the leader's view when it is the leader,
    /// NOT_CONTROLLER (with a hint) otherwise.
    fn describe_quorum(&self) -> pb::response::Body {
        let status = self.quorum.status();
        if !status.is_leader {
            return not_controller(&status, "");
        }
        pb::response::Body::DescribeQuorum(pb::DescribeQuorumResponse {
            error_code: ErrorCode::None as i32,
            error_message: String::new(),
            leader_id: status.node_id,
            leader_epoch: status.term as i64,
            high_watermark: status.committed.map_or(0, |c| c as i64 + 1),
            controller_epoch: self.quorum.controller_epoch(),
            voters: status
                .voters
                .iter()
                .map(|v| pb::QuorumVoter {
                    id: v.id,
                    log_end_offset: v.log_end_offset as i64,
                    lag: v.lag as i64,
                    last_contact_ms: v.last_contact_ms.map_or(-1, |ms| ms as i64),
                })
                .collect(),
        })
    }
}

/// NOT_CONTROLLER from a voter, naming the leader it knows of (if another).
fn not_controller(status: &QuorumStatus, why: &str) -> pb::response::Body {
    let hint = status.leader_id.filter(|l| *l != status.node_id);
    let message = match (hint, why) {
        (_, why) if !why.is_empty() => why.to_string(),
        (Some(l), _) => format!(
            "voter {} is not the active controller; voter {l} is",
            status.node_id
        ),
        (None, _) => format!(
            "voter {} is not the active controller, and knows of none (an election is under way, or a majority of voters is unreachable)",
            status.node_id
        ),
    };
    pb::response::Body::Error(pb::ErrorResponse {
        error_code: ErrorCode::NotController as i32,
        error_message: message,
        controller_hint: hint,
    })
}

/// The active controller's Raft heartbeat interval for an election timeout of
/// `election_ms` (the voters' [`QuorumConfig::election_timeout_min_ms`]): a
/// quarter of it, so that three heartbeats in a row may be lost before a voter
/// stands for election (a heartbeat is sent at openraft's first tick after it is
/// due, and its tick period is 13/64 of the heartbeat interval: the longest gap
/// between two heartbeats is then about 0.3 of the election timeout). A tenth,
/// as before, made openraft tick every 20 ms on every voter for nothing: a
/// third of an idle broker's CPU. A lost active controller is noticed after the
/// same election timeout either way.
#[must_use]
pub(crate) fn quorum_heartbeat_ms(election_ms: u64) -> u64 {
    (election_ms / 4).max(10)
}

/// Starts this node's controller voter: opens the quorum's log under `dir`, joins
/// the quorum and runs the event loop until `shutdown`. On a metadata-log failure
/// it stops and fires `fatal` (the process must not carry on with an unknown
/// metadata state).
pub(crate) async fn start(
    dir: &Path,
    config: &BrokerConfig,
    network: Arc<dyn Network>,
    metrics: Arc<BrokerMetrics>,
    shutdown: CancellationToken,
    fatal: CancellationToken,
) -> anyhow::Result<ControllerHandle> {
    let legacy = dir.join("metadata.log");
    anyhow::ensure!(
        !legacy.exists(),
        "{} is the metadata log of a single-voter controller from an earlier syncline, which the \
         controller quorum does not read; move it away (and the rest of the cluster's data \
         directories with it) to start a new cluster",
        legacy.display()
    );
    let mut cc = ControllerConfig::new(config.node_id, config.cluster_id.clone());
    cc.broker_session_timeout_ms = config.broker_session_timeout_ms;
    cc.num_partitions = config.num_partitions;
    cc.default_replication_factor = config.default_replication_factor;
    cc.topic_defaults = crate::topic_config::controller_defaults(config);
    cc.offsets_topic.num_partitions = config.groups.offsets_topic_num_partitions;
    cc.offsets_topic.replication_factor = config.groups.offsets_topic_replication_factor;
    cc.offsets_topic.eager_creation = config.groups.offsets_topic_eager_creation;
    cc.auto_create_max_partitions_per_request =
        config.auto_create_topics_max_partitions_per_request;
    cc.auto_create_max_cluster_partitions = config.auto_create_topics_max_cluster_partitions;
    cc.validate().map_err(|e| anyhow::anyhow!("{e}"))?;

    let election = config.controller_quorum_election_timeout_ms;
    let mut qc = QuorumConfig::new(
        config.node_id,
        config
            .controller_quorum_voters
            .iter()
            .map(|v| (v.node_id, v.address.to_string()))
            .collect(),
        dir.to_path_buf(),
    );
    qc.election_timeout_min_ms = election;
    qc.election_timeout_max_ms = election * 2;
    qc.heartbeat_interval_ms = quorum_heartbeat_ms(election);
    qc.snapshot_every_entries = config.metadata_snapshot_max_new_records;
    let transport = Arc::new(RaftTransport {
        inner: Arc::new(TransportInner {
            network: network.clone(),
            connections: Mutex::new(HashMap::new()),
            timeout: Duration::from_millis(config.controller_quorum_request_timeout_ms),
            max_frame_bytes: config.socket_request_max_bytes,
            client_id: format!("controller-{}", config.node_id),
        }),
    });
    let quorum = Quorum::start(qc, transport).await?;
    tracing::info!(
        voters = ?config.controller_quorum_voters.iter().map(|v| v.node_id).collect::<Vec<_>>(),
        dir = %dir.display(),
        "controller voter started"
    );
    let (tx, rx) = mpsc::channel(QUEUE);
    let mut host = Host {
        config: cc,
        quorum: quorum.clone(),
        senders: HashMap::new(),
        network,
        metrics,
        commands: tx.clone(),
        shutdown: shutdown.clone(),
        commit_timeout: Duration::from_millis(config.controller_quorum_commit_timeout_ms),
        push_timeout: Duration::from_millis(config.controller_socket_timeout_ms),
        session: Duration::from_millis(config.broker_session_timeout_ms),
        last_leader: None,
        scram_bootstrap_file: config.scram_bootstrap_file.clone(),
        rebalance: Rebalance {
            enabled: config.auto_leader_rebalance_enable,
            every: Duration::from_secs(config.leader_imbalance_check_interval_seconds),
            imbalance_percentage: config.leader_imbalance_per_broker_percentage,
        },
    };
    let task = tokio::spawn(async move {
        if let Err(e) = host.run(rx).await {
            tracing::error!(error = %e, "controller stopped: the metadata log cannot be written");
            fatal.cancel();
        }
        host.resign_senders();
        host.metrics.active_controller.set(0);
    });
    Ok(ControllerHandle {
        tx,
        task: Arc::new(parking_lot::Mutex::new(Some(task))),
        quorum,
    })
}

/// Why an office ended early.
#[derive(Debug, thiserror::Error)]
enum Resign {
    /// The quorum has another leader (or none).
    #[error("the quorum has another leader, or none")]
    NotLeader,
    /// A commit did not reach a majority in time: its outcome is unknown.
    #[error("{0}")]
    NoQuorum(String),
    /// A commit landed at another offset than the image expected.
    #[error("a commit landed at metadata offset {got}, but the image expected {expected}")]
    Diverged { expected: i64, got: i64 },
    /// The log cannot be written or a committed record cannot be applied.
    #[error("{0}")]
    Fatal(anyhow::Error),
}

impl Resign {
    /// The answer a request whose commit ended the office gets.
    fn answer(&self, status: &QuorumStatus) -> pb::response::Body {
        match self {
            Resign::NoQuorum(why) => pb::response::Body::Error(pb::ErrorResponse {
                error_code: ErrorCode::RequestTimedOut as i32,
                error_message: why.clone(),
                controller_hint: None,
            }),
            _ => not_controller(status, ""),
        }
    }
}

struct Host {
    config: ControllerConfig,
    quorum: Quorum,
    senders: HashMap<i32, Arc<BrokerSender>>,
    network: Arc<dyn Network>,
    metrics: Arc<BrokerMetrics>,
    commands: mpsc::Sender<Command>,
    shutdown: CancellationToken,
    commit_timeout: Duration,
    /// `controller_socket_timeout_ms`: one LeaderAndIsr's bound.
    push_timeout: Duration,
    session: Duration,
    /// The (term, leader) last seen, to count elections.
    last_leader: Option<(u64, i32)>,
    /// `scram_bootstrap_file`: users to add while none was ever added.
    scram_bootstrap_file: Option<PathBuf>,
    rebalance: Rebalance,
}

/// The automatic leader rebalance's settings.
#[derive(Debug, Clone, Copy)]
struct Rebalance {
    /// `auto_leader_rebalance_enable`.
    enabled: bool,
    /// `leader_imbalance_check_interval_seconds`.
    every: Duration,
    /// `leader_imbalance_per_broker_percentage`.
    imbalance_percentage: u32,
}

impl Host {
    /// Follows the quorum: takes office whenever this voter leads it, refuses
    /// controller requests otherwise. Returns on shutdown; an error is fatal.
    async fn run(&mut self, mut rx: mpsc::Receiver<Command>) -> anyhow::Result<()> {
        let mut status = self.quorum.subscribe();
        loop {
            let now = status.borrow_and_update().clone();
            self.observe(&now);
            if now.is_leader {
                match self.hold_office(now.term, &mut rx, &mut status).await {
                    Ok(()) => return Ok(()),
                    Err(Resign::Fatal(e)) => return Err(e),
                    Err(reason) => {
                        tracing::warn!(%reason, term = now.term, "the active controller resigned");
                        // Give the quorum a moment before trying again as its leader.
                        tokio::select! {
                            _ = self.shutdown.cancelled() => return Ok(()),
                            _ = status.changed() => {}
                            _ = tokio::time::sleep(RETAKE_PAUSE) => {}
                        }
                        continue;
                    }
                }
            }
            tokio::select! {
                _ = self.shutdown.cancelled() => return Ok(()),
                changed = status.changed() => if changed.is_err() { return Ok(()) },
                cmd = rx.recv() => match cmd {
                    None => return Ok(()),
                    Some(cmd) => refuse(cmd, &now),
                },
            }
        }
    }

    /// Metrics and logs of the quorum's state.
    fn observe(&mut self, status: &QuorumStatus) {
        self.metrics
            .metadata_log_end_offset
            .set(status.log_end_offset as i64);
        if let Some(leader) = status.leader_id {
            if self.last_leader != Some((status.term, leader)) {
                self.last_leader = Some((status.term, leader));
                self.metrics.controller_elections.inc();
                tracing::info!(
                    term = status.term,
                    leader,
                    "the controller quorum has a leader"
                );
            }
        }
    }

    /// Takes office as the leader of `term` and serves until it ends: `Ok` on
    /// shutdown, the reason otherwise.
    async fn hold_office(
        &mut self,
        term: u64,
        rx: &mut mpsc::Receiver<Command>,
        status: &mut watch::Receiver<QuorumStatus>,
    ) -> Result<(), Resign> {
        // 1. Everything earlier controllers committed is in the image first.
        {
            let quorum = self.quorum.clone();
            let barrier = quorum.barrier(self.commit_timeout);
            tokio::pin!(barrier);
            loop {
                tokio::select! {
                    _ = self.shutdown.cancelled() => return Ok(()),
                    r = &mut barrier => {
                        r.map_err(|e| resign_for(e, self.commit_timeout))?;
                        break;
                    }
                    cmd = rx.recv() => match cmd {
                        None => return Ok(()),
                        Some(cmd) => refuse(cmd, &status.borrow().clone()),
                    },
                }
            }
        }
        let image = self.quorum.image();
        self.metrics
            .baseline_unclean_elections(image.unclean_elections_total());
        let mut controller = Controller::new(self.config.clone(), image, Instant::now())
            .map_err(|e| Resign::Fatal(anyhow::anyhow!("{e}")))?;
        let start = controller.start();
        self.commit(&mut controller, start).await?;
        self.bootstrap_users(&mut controller).await?;
        let mut office = Office { controller };
        tracing::info!(
            controller_epoch = office.controller.controller_epoch(),
            term,
            metadata_offset = office.controller.image().last_applied_offset(),
            brokers = office.controller.image().brokers().count(),
            partitions = office.controller.image().partition_count(),
            "controller took office"
        );
        self.metrics.active_controller.set(1);
        let outcome = self.serve(&mut office, term, rx, status).await;
        self.metrics.active_controller.set(0);
        self.resign_senders();
        outcome
    }

    /// Adds the users of `scram_bootstrap_file` if no user was ever added or removed.
    /// A file that cannot be read or parsed is logged (naming the file and the line)
    /// and skipped: the controller serves without them, and the next controller to
    /// take office tries again.
    async fn bootstrap_users(&mut self, c: &mut Controller) -> Result<(), Resign> {
        let Some(path) = self.scram_bootstrap_file.clone() else {
            return Ok(());
        };
        if c.image().users_initialized() {
            tracing::debug!(file = %path.display(), "users exist already: scram_bootstrap_file not read");
            return Ok(());
        }
        let credentials = match read_scram_bootstrap(&path) {
            Ok(credentials) => credentials,
            Err(e) => {
                tracing::error!("{e}; the controller carries on without its bootstrap users");
                return Ok(());
            }
        };
        let r = c.bootstrap_scram_credentials(&credentials);
        let added = self.commit(c, r).await?;
        if added > 0 {
            tracing::info!(users = added, file = %path.display(), "bootstrap users added (scram_bootstrap_file)");
        }
        Ok(())
    }

    /// The active controller's loop.
    async fn serve(
        &mut self,
        office: &mut Office,
        term: u64,
        rx: &mut mpsc::Receiver<Command>,
        status: &mut watch::Receiver<QuorumStatus>,
    ) -> Result<(), Resign> {
        // Every registered broker gets the whole image.
        let ids: Vec<i32> = office
            .controller
            .image()
            .brokers()
            .map(|b| b.broker_id)
            .collect();
        for id in ids {
            self.ensure_sender(&office.controller, id, true);
        }
        let session = self.session;
        let every = (session / 10).clamp(Duration::from_millis(10), Duration::from_millis(500));
        let mut tick = tokio::time::interval(every);
        tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        // A gap between ticks of half a session means this process did not run
        // (SIGSTOP, a long pause, a starved runtime): the brokers' heartbeats waited
        // unread meanwhile, and their silence is ours.
        let stalled_after = (session / 2).max(every * 3);
        let mut last_tick = Instant::now();
        // The first check comes one interval after taking office, as in Kafka.
        let Rebalance {
            enabled: rebalancing,
            every: rebalance_every,
            imbalance_percentage,
        } = self.rebalance;
        let mut rebalance =
            tokio::time::interval_at(Instant::now() + rebalance_every, rebalance_every);
        rebalance.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        loop {
            tokio::select! {
                _ = self.shutdown.cancelled() => return Ok(()),
                changed = status.changed() => {
                    if changed.is_err() {
                        return Ok(());
                    }
                    let now = status.borrow_and_update().clone();
                    self.observe(&now);
                    if !now.is_leader || now.term != term {
                        return Err(Resign::NotLeader);
                    }
                }
                _ = tick.tick() => {
                    let now = Instant::now();
                    let gap = now.saturating_duration_since(last_tick);
                    last_tick = now;
                    if gap > stalled_after {
                        tracing::warn!(stalled_ms = gap.as_millis() as u64, "the controller did not run for a while: every broker gets a new session");
                        office.controller.restart_sessions(now);
                    }
                    // Each fenced broker is logged once, by the controller's decision
                    // ("broker session expired: fencing", with its silence).
                    let r = office.controller.tick(now);
                    self.commit(&mut office.controller, r).await?;
                    let r = office.controller.create_internal_topics();
                    for topic in self.commit(&mut office.controller, r).await? {
                        tracing::info!(%topic, "internal topic created: enough brokers are up for its replication factor (offsets_topic_eager_creation)");
                    }
                }
                _ = rebalance.tick(), if rebalancing => {
                    let r = office.controller.rebalance_leaders(imbalance_percentage);
                    let moved = self.commit(&mut office.controller, r).await?;
                    if !moved.is_empty() {
                        tracing::info!(partitions = moved.len(), "leader rebalance: preferred replicas lead again");
                    }
                }
                cmd = rx.recv() => match cmd {
                    None => return Ok(()),
                    Some(Command::Request(body, reply)) => {
                        match self.decide(&mut office.controller, body).await {
                            Ok(response) => { let _ = reply.send(response); }
                            Err(resign) => {
                                let _ = reply.send(resign.answer(&self.quorum.status()));
                                return Err(resign);
                            }
                        }
                    }
                    Some(Command::FullSync { broker_id, broker_epoch }) => {
                        let current = office.controller.image().broker(broker_id).map(|b| b.epoch);
                        if current == Some(broker_epoch) {
                            if let Some(s) = self.senders.get(&broker_id) {
                                s.replace_with(full_request(&office.controller, broker_id));
                            }
                        }
                    }
                },
            }
        }
    }

    /// Decides one request, commits what it changes, returns the answer.
    async fn decide(
        &mut self,
        c: &mut Controller,
        body: pb::request::Body,
    ) -> Result<pb::response::Body, Resign> {
        use pb::request::Body as Req;
        use pb::response::Body as Resp;
        let now = Instant::now();
        Ok(match body {
            Req::BrokerRegistration(req) => {
                let r = c.register_broker(&req, now);
                Resp::BrokerRegistration(self.commit(c, r).await?)
            }
            Req::BrokerHeartbeat(req) => {
                let r = c.heartbeat(&req, now);
                Resp::BrokerHeartbeat(self.commit(c, r).await?)
            }
            Req::CreateTopics(req) => {
                let r = c.create_topics(&req);
                let response = self.commit(c, r).await?;
                for t in &response.topics {
                    if t.error_code == 0 && !req.validate_only {
                        tracing::info!(topic = %t.name, partitions = t.num_partitions, replication_factor = t.replication_factor, "topic created");
                    }
                }
                Resp::CreateTopics(response)
            }
            Req::AlterPartition(req) => {
                let r = c.alter_partition(&req);
                let response = self.commit(c, r).await?;
                let completed = c.complete_reassignments();
                self.commit(c, completed).await?;
                Resp::AlterPartition(response)
            }
            Req::AlterTopic(req) => {
                let r = c.alter_topic(&req);
                Resp::AlterTopic(self.commit(c, r).await?)
            }
            Req::ElectLeaders(req) => {
                let r = c.elect_leaders(&req);
                Resp::ElectLeaders(self.commit(c, r).await?)
            }
            Req::DeleteTopics(req) => {
                let r = c.delete_topics(&req);
                Resp::DeleteTopics(self.commit(c, r).await?)
            }
            Req::AlterUserScramCredentials(req) => {
                let r = c.alter_user_scram_credentials(&req);
                Resp::AlterUserScramCredentials(self.commit(c, r).await?)
            }
            Req::AlterClientQuotas(req) => {
                let r = c.alter_client_quotas(&req);
                Resp::AlterClientQuotas(self.commit(c, r).await?)
            }
            Req::CreateAcls(req) => {
                let r = c.create_acls(&req);
                Resp::CreateAcls(self.commit(c, r).await?)
            }
            Req::DeleteAcls(req) => {
                let r = c.delete_acls(&req);
                Resp::DeleteAcls(self.commit(c, r).await?)
            }
            Req::AllocateProducerIds(req) => {
                let r = c.allocate_producer_ids(&req);
                Resp::AllocateProducerIds(self.commit(c, r).await?)
            }
            Req::AlterReassignments(req) => {
                let r = c.alter_reassignments(&req);
                Resp::AlterReassignments(self.commit(c, r).await?)
            }
            other => Resp::Error(pb::ErrorResponse {
                error_code: ErrorCode::InvalidRequest as i32,
                error_message: format!(
                    "{} is not a controller request",
                    syncline_proto::api_name(&other)
                ),
                controller_hint: None,
            }),
        })
    }

    /// Makes a decision true: commit through the quorum (a majority of voters has
    /// the records durably), apply, announce.
    async fn commit<T>(
        &mut self,
        c: &mut Controller,
        result: ControllerResult<T>,
    ) -> Result<T, Resign> {
        if result.records.is_empty() {
            return Ok(result.response);
        }
        let first = self
            .quorum
            .propose(result.records.clone(), self.commit_timeout)
            .await
            .map_err(|e| resign_for(e, self.commit_timeout))?;
        if first != c.next_offset() {
            return Err(Resign::Diverged {
                expected: c.next_offset(),
                got: first,
            });
        }
        c.replay_all(first, &result.records)
            .map_err(|e| Resign::Fatal(e.into()))?;
        self.announce(c, &result.records);
        let image = c.image();
        self.metrics
            .offline_partitions_count
            .set(image.offline_partitions_count() as i64);
        self.metrics
            .preferred_replica_imbalance_count
            .set(image.preferred_replica_imbalance_count() as i64);
        self.metrics
            .reassigning_partitions
            .set(image.reassigning_partitions_count() as i64);
        self.metrics
            .set_unclean_elections_total(image.unclean_elections_total());
        self.metrics
            .set_broker_counts(image.brokers().count(), image.fenced_brokers_count());
        Ok(result.response)
    }

    fn announce(&mut self, c: &Controller, records: &[pb::MetadataRecord]) {
        let partitions = changed_partitions(records);
        let brokers_changed = changed_brokers(records);
        let configs_changed = changed_topic_configs(records);
        let deleted = deleted_topics(records);
        // Users and ACLs go whole, whenever one changed.
        let security = security_changed(records).then(|| c.image().security_image());
        // So do client quotas.
        let client_quotas = client_quotas_changed(records).then(|| c.image().client_quota_image());
        let topics: BTreeSet<&str> = partitions
            .iter()
            .map(|tp| &*tp.topic)
            .chain(configs_changed.iter().map(String::as_str))
            .collect();
        let image = c.image();
        let states: Vec<pb::PartitionState> = partitions
            .iter()
            .filter_map(|tp| image.partition_state(tp))
            .collect();
        let topic_states: Vec<pb::TopicState> = image
            .topic_states()
            .into_iter()
            .filter(|t| topics.contains(t.name.as_str()))
            .collect();
        let broker_infos = if brokers_changed.is_empty() {
            Vec::new()
        } else {
            image.broker_infos()
        };
        // A (re)registration starts a new sender with the whole image.
        let registered: Vec<i32> = records
            .iter()
            .filter_map(|r| match &r.record {
                Some(pb::metadata_record::Record::RegisterBroker(b)) => Some(b.broker_id),
                _ => None,
            })
            .collect();
        for id in &registered {
            self.ensure_sender(c, *id, true);
        }
        if states.is_empty()
            && broker_infos.is_empty()
            && topic_states.is_empty()
            && deleted.is_empty()
            && security.is_none()
            && client_quotas.is_none()
        {
            return;
        }
        for (id, sender) in &self.senders {
            if registered.contains(id) {
                continue;
            }
            let Some(b) = image.broker(*id) else {
                continue;
            };
            sender.push(pb::LeaderAndIsrRequest {
                controller_id: c.config().node_id,
                controller_epoch: c.controller_epoch(),
                broker_epoch: b.epoch,
                metadata_offset: image.last_applied_offset(),
                full: false,
                topics: topic_states.clone(),
                partition_states: states.clone(),
                brokers: broker_infos.clone(),
                deleted_topics: deleted.clone(),
                security: security.clone(),
                client_quotas: client_quotas.clone(),
            });
        }
    }

    /// Starts (or restarts, for a new registration) the sender of `broker_id`.
    fn ensure_sender(&mut self, c: &Controller, broker_id: i32, full: bool) {
        let Some(b) = c.image().broker(broker_id) else {
            return;
        };
        let epoch = b.epoch;
        let address = format!("{}:{}", b.endpoint.host, b.endpoint.port);
        let reuse = self
            .senders
            .get(&broker_id)
            .is_some_and(|s| s.broker_epoch == epoch && s.address == address);
        if !reuse {
            if let Some(old) = self.senders.remove(&broker_id) {
                old.cancel.cancel();
            }
            let sender = Arc::new(BrokerSender {
                broker_id,
                broker_epoch: epoch,
                address,
                outbox: Mutex::new(Outbox::default()),
                notify: Notify::new(),
                cancel: self.shutdown.child_token(),
                timeout: self.push_timeout,
            });
            tokio::spawn(
                sender
                    .clone()
                    .run(self.network.clone(), self.commands.clone()),
            );
            self.senders.insert(broker_id, sender);
        }
        if full {
            if let Some(s) = self.senders.get(&broker_id) {
                s.replace_with(full_request(c, broker_id));
            }
        }
    }

    /// Stops every sender (the office ended: its announcements would be refused).
    fn resign_senders(&mut self) {
        for (_, s) in self.senders.drain() {
            s.cancel.cancel();
        }
        self.metrics.offline_partitions_count.set(0);
        self.metrics.preferred_replica_imbalance_count.set(0);
        self.metrics.reassigning_partitions.set(0);
        self.metrics.set_broker_counts(0, 0);
    }
}

/// The active controller's state for one term.
struct Office {
    controller: Controller,
}

/// The resignation a failed proposal or barrier calls for.
fn resign_for(e: ProposeError, timeout: Duration) -> Resign {
    match e {
        ProposeError::NotLeader { .. } => Resign::NotLeader,
        ProposeError::Timeout { .. } => Resign::NoQuorum(format!(
            "the controller quorum lost its majority: a metadata change was not committed within \
             {} ms (controller_quorum_commit_timeout_ms); metadata changes fail until a majority \
             of the controller voters is reachable again",
            timeout.as_millis()
        )),
        ProposeError::Fatal(e) => Resign::Fatal(anyhow::anyhow!(e)),
        // The controller decided a record with nothing in it: a bug, never input.
        ProposeError::Invalid(e) => Resign::Fatal(anyhow::anyhow!("invalid proposal: {e}")),
    }
}

/// Answers a request this voter cannot serve now.
fn refuse(cmd: Command, status: &QuorumStatus) {
    if let Command::Request(_, reply) = cmd {
        let _ = reply.send(not_controller(status, ""));
    }
}

fn full_request(c: &Controller, broker_id: i32) -> pb::LeaderAndIsrRequest {
    let image = c.image();
    pb::LeaderAndIsrRequest {
        controller_id: c.config().node_id,
        controller_epoch: c.controller_epoch(),
        broker_epoch: image.broker(broker_id).map_or(-1, |b| b.epoch),
        metadata_offset: image.last_applied_offset(),
        full: true,
        topics: image.topic_states(),
        partition_states: image.partition_states(),
        brokers: image.broker_infos(),
        deleted_topics: Vec::new(),
        security: Some(image.security_image()),
        client_quotas: Some(image.client_quota_image()),
    }
}

/// Why `scram_bootstrap_file` gave no users.
#[derive(Debug, thiserror::Error)]
enum BootstrapFileError {
    #[error("cannot read scram_bootstrap_file {}: {source}", path.display())]
    Read {
        path: PathBuf,
        source: std::io::Error,
    },
    #[error("scram_bootstrap_file {}: {source}", path.display())]
    Parse {
        path: PathBuf,
        source: syncline_controller::ScramBootstrapError,
    },
}

/// The credentials of a bootstrap file.
fn read_scram_bootstrap(path: &Path) -> Result<Vec<pb::ScramCredential>, BootstrapFileError> {
    let text = std::fs::read_to_string(path).map_err(|source| BootstrapFileError::Read {
        path: path.to_path_buf(),
        source,
    })?;
    parse_scram_bootstrap(&text).map_err(|source| BootstrapFileError::Parse {
        path: path.to_path_buf(),
        source,
    })
}

/// The quorum's transport over the brokers' own connections: a `Raft` request on
/// the voter's inter-broker listener.
#[derive(Debug)]
struct RaftTransport {
    inner: Arc<TransportInner>,
}

#[derive(Debug)]
struct TransportInner {
    network: Arc<dyn Network>,
    connections: Mutex<HashMap<i32, Connection>>,
    timeout: Duration,
    max_frame_bytes: usize,
    client_id: String,
}

impl QuorumTransport for RaftTransport {
    fn call(
        &self,
        target: i32,
        address: &str,
        request: Bytes,
    ) -> BoxFuture<'static, Result<Bytes, String>> {
        let inner = self.inner.clone();
        let address = address.to_string();
        Box::pin(async move {
            let result = tokio::time::timeout(inner.timeout, inner.call(target, &address, request))
                .await
                .unwrap_or_else(|_| {
                    Err(format!(
                        "voter {target} at {address} did not answer in time"
                    ))
                });
            if result.is_err() {
                inner.connections.lock().remove(&target);
            }
            result
        })
    }
}

impl TransportInner {
    async fn call(&self, target: i32, address: &str, request: Bytes) -> Result<Bytes, String> {
        let cached = self
            .connections
            .lock()
            .get(&target)
            .filter(|c| !c.is_closed())
            .cloned();
        let conn = match cached {
            Some(c) => c,
            None => {
                let stream =
                    self.network.connect(address).await.map_err(|e| {
                        format!("cannot connect to voter {target} at {address}: {e}")
                    })?;
                let c =
                    Connection::from_stream(stream, address, &self.client_id, self.max_frame_bytes);
                self.connections.lock().insert(target, c.clone());
                c
            }
        };
        match conn
            .send(pb::request::Body::Raft(pb::RaftRequest {
                payload: request,
            }))
            .await
        {
            Ok(pb::response::Body::Raft(r)) if r.error_code == ErrorCode::None as i32 => {
                Ok(r.payload)
            }
            Ok(pb::response::Body::Raft(r)) => Err(format!(
                "voter {target} refused: {}: {}",
                ErrorCode::from_wire(r.error_code),
                r.error_message
            )),
            Ok(_) => Err(format!("voter {target} sent an unexpected response")),
            Err(e) => Err(format!("voter {target}: {e}")),
        }
    }
}

/// Pushes LeaderAndIsr requests to one broker, in order.
#[derive(Debug)]
struct BrokerSender {
    broker_id: i32,
    broker_epoch: i64,
    address: String,
    outbox: Mutex<Outbox>,
    notify: Notify,
    cancel: CancellationToken,
    /// `controller_socket_timeout_ms`.
    timeout: Duration,
}

/// Requests waiting to be sent, each with a sequence number so that a request
/// sent while the queue was replaced is not mistaken for its replacement.
/// Queued requests are never merged: each is sent as it was queued (so a
/// `security` image in one is never dropped), and only a full request, which
/// carries everything (users and ACLs included), replaces the queue.
#[derive(Debug, Default)]
struct Outbox {
    queue: VecDeque<(u64, pb::LeaderAndIsrRequest)>,
    next_seq: u64,
}

impl BrokerSender {
    fn push(&self, request: pb::LeaderAndIsrRequest) {
        let mut outbox = self.outbox.lock();
        let seq = outbox.next_seq;
        outbox.next_seq += 1;
        outbox.queue.push_back((seq, request));
        drop(outbox);
        self.notify.notify_one();
    }

    /// A full image supersedes everything queued.
    fn replace_with(&self, request: pb::LeaderAndIsrRequest) {
        self.outbox.lock().queue.clear();
        self.push(request);
    }

    async fn run(self: Arc<Self>, network: Arc<dyn Network>, commands: mpsc::Sender<Command>) {
        let mut conn: Option<Connection> = None;
        loop {
            let next = self.outbox.lock().queue.front().cloned();
            let Some((seq, request)) = next else {
                tokio::select! {
                    _ = self.cancel.cancelled() => return,
                    _ = self.notify.notified() => continue,
                }
            };
            let (full, states) = (request.full, request.partition_states.len());
            match self.send(&network, &mut conn, request).await {
                Ok(()) => {
                    tracing::debug!(
                        broker = self.broker_id,
                        full,
                        partitions = states,
                        "LeaderAndIsr delivered"
                    );
                    let mut outbox = self.outbox.lock();
                    if outbox.queue.front().is_some_and(|(s, _)| *s == seq) {
                        outbox.queue.pop_front();
                    }
                }
                Err(reason) => {
                    tracing::debug!(broker = self.broker_id, %reason, "LeaderAndIsr not delivered; will resend the whole image");
                    conn = None;
                    self.outbox.lock().queue.clear();
                    tokio::select! {
                        _ = self.cancel.cancelled() => return,
                        _ = tokio::time::sleep(PUSH_BACKOFF) => {}
                    }
                    let sync = Command::FullSync {
                        broker_id: self.broker_id,
                        broker_epoch: self.broker_epoch,
                    };
                    if commands.send(sync).await.is_err() {
                        return;
                    }
                }
            }
        }
    }

    async fn send(
        &self,
        network: &Arc<dyn Network>,
        conn: &mut Option<Connection>,
        request: pb::LeaderAndIsrRequest,
    ) -> Result<(), String> {
        let c = match conn.as_ref().filter(|c| !c.is_closed()) {
            Some(c) => c.clone(),
            None => {
                let stream = tokio::time::timeout(self.timeout, network.connect(&self.address))
                    .await
                    .map_err(|_| "connect timed out".to_string())?
                    .map_err(|e| e.to_string())?;
                let c = Connection::from_stream(stream, &self.address, "controller", usize::MAX);
                *conn = Some(c.clone());
                c
            }
        };
        let body = pb::request::Body::LeaderAndIsr(request);
        match tokio::time::timeout(self.timeout, c.send(body)).await {
            Err(_) => Err("timed out".into()),
            Ok(Err(e)) => Err(e.to_string()),
            Ok(Ok(pb::response::Body::LeaderAndIsr(r))) => match ErrorCode::from_wire(r.error_code)
            {
                ErrorCode::None => {
                    for e in r.partition_errors {
                        tracing::warn!(broker = self.broker_id, topic = %e.topic, partition = e.partition, error = %ErrorCode::from_wire(e.error_code), "broker could not apply a partition state");
                    }
                    Ok(())
                }
                code => Err(code.to_string()),
            },
            Ok(Ok(_)) => Err("unexpected response".into()),
        }
    }
}

#[cfg(test)]
mod tests {
    use syncline_auth::{Mechanism, Verifier};
    use syncline_controller::{scram_bootstrap_line, MetadataImage};

    use super::*;

    #[test]
    fn a_bad_bootstrap_file_is_named_with_its_line() {
        let dir = tempfile::tempdir().unwrap();
        let missing = dir.path().join("missing");
        let e = read_scram_bootstrap(&missing).unwrap_err().to_string();
        assert!(
            e.contains("cannot read scram_bootstrap_file") && e.contains("missing"),
            "{e}"
        );

        let path = dir.path().join("users");
        let verifier = Verifier::new(Mechanism::ScramSha256, "pw", b"salt", 4096);
        let good = scram_bootstrap_line("admin", &verifier);
        std::fs::write(&path, format!("# users\n{good}\n")).unwrap();
        let users = read_scram_bootstrap(&path).unwrap();
        assert_eq!(users.len(), 1);
        assert_eq!(users[0].name, "admin");

        std::fs::write(&path, format!("{good}\nadmin SCRAM-SHA-256 salt=AAAA\n")).unwrap();
        let e = read_scram_bootstrap(&path).unwrap_err().to_string();
        assert!(e.contains(&path.display().to_string()), "{e}");
        assert!(e.contains("line 2:"), "{e}");
    }

    #[test]
    fn the_quorum_heartbeats_four_times_an_election_timeout() {
        for (election, heartbeat) in [(1_000, 250), (50, 12), (600_000, 150_000), (39, 10)] {
            assert_eq!(
                quorum_heartbeat_ms(election),
                heartbeat,
                "election {election}"
            );
        }
        // Every election timeout the broker accepts (50 ms .. 10 min): openraft
        // sends a heartbeat at its first tick (13/64 of the interval) after it
        // is due, and three of those gaps in a row stay within the timeout.
        for election in (50..=600_000).step_by(7) {
            let heartbeat = quorum_heartbeat_ms(election);
            let tick = (heartbeat * 13 / 64).max(1);
            assert!(
                3 * (heartbeat + tick) < election,
                "election {election} ms, heartbeat {heartbeat} ms"
            );
        }
    }

    /// A controller that replayed its own start.
    fn started_controller() -> Controller {
        let mut c = Controller::new(
            ControllerConfig::new(0, "c"),
            MetadataImage::new(),
            Instant::now(),
        )
        .unwrap();
        let start = c.start();
        c.replay_all(0, &start.records).unwrap();
        c
    }

    #[test]
    fn full_requests_carry_every_user_and_acl() {
        let mut c = started_controller();
        let verifier = Verifier::new(Mechanism::ScramSha512, "pw", b"salt", 4096);
        let r = c.alter_user_scram_credentials(&pb::AlterUserScramCredentialsRequest {
            upsertions: vec![syncline_controller::credential_of("alice", &verifier)],
            ..Default::default()
        });
        assert!(security_changed(&r.records));
        let first = c.next_offset();
        c.replay_all(first, &r.records).unwrap();
        let full = full_request(&c, 1);
        assert!(full.full);
        let security = full.security.expect("the security image");
        assert_eq!(security, c.image().security_image());
        assert_eq!(security.credentials[0].name, "alice");
    }

    #[test]
    fn full_requests_carry_every_client_quota() {
        let mut c = started_controller();
        assert!(full_request(&c, 1)
            .client_quotas
            .is_some_and(|q| q.entries.is_empty()));
        let r = c.alter_client_quotas(&pb::AlterClientQuotasRequest {
            entries: vec![pb::ClientQuotaAlteration {
                entity: vec![pb::ClientQuotaEntityComponent {
                    entity_type: "client-id".into(),
                    entity_name: None,
                }],
                ops: vec![pb::ClientQuotaOp {
                    key: "producer_byte_rate".into(),
                    value: 1024.0,
                    remove: false,
                }],
            }],
            validate_only: false,
            forwarded: false,
        });
        assert!(client_quotas_changed(&r.records));
        assert!(!security_changed(&r.records));
        let first = c.next_offset();
        c.replay_all(first, &r.records).unwrap();
        let quotas = full_request(&c, 1).client_quotas.expect("the quota image");
        assert_eq!(quotas, c.image().client_quota_image());
        assert_eq!(quotas.entries.len(), 1);
    }
}
