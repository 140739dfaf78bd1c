//! The controller role hosted in a broker process: the I/O shell around the pure
//! [`syncline_controller::Controller`].
//!
//! One event loop owns the controller. For every operation it decides (pure),
//! appends the records to the metadata log (fsync), applies them, then answers and
//! announces the changes: a per-broker sender pushes LeaderAndIsr requests (partition
//! states, topic configs, the broker list) in order, and falls back to a full image
//! after any failure. Announcements are idempotent on the broker (partition epochs),
//! so resending is always safe.

use std::collections::{BTreeSet, HashMap, VecDeque};
use std::path::Path;
use std::sync::Arc;
use std::time::Duration;

use parking_lot::Mutex;
use syncline_client::Connection;
use syncline_controller::{
    changed_brokers, changed_partitions, Controller, ControllerConfig, ControllerResult,
    MetadataImage, MetadataLog,
};
use syncline_proto::{pb, ErrorCode};
use tokio::sync::{mpsc, oneshot, Notify};
use tokio::time::Instant;
use tokio_util::sync::CancellationToken;

use crate::config::BrokerConfig;
use crate::metrics::BrokerMetrics;
use crate::net::Network;

/// Requests queued for the event loop before callers wait.
const QUEUE: usize = 1024;
/// Pause between attempts to reach a broker that did not answer.
const PUSH_BACKOFF: Duration = Duration::from_millis(200);
const PUSH_TIMEOUT: Duration = Duration::from_secs(10);

enum Command {
    Register(
        pb::BrokerRegistrationRequest,
        oneshot::Sender<pb::BrokerRegistrationResponse>,
    ),
    Heartbeat(
        pb::BrokerHeartbeatRequest,
        oneshot::Sender<pb::BrokerHeartbeatResponse>,
    ),
    CreateTopics(
        pb::CreateTopicsRequest,
        oneshot::Sender<pb::CreateTopicsResponse>,
    ),
    AlterPartition(
        pb::AlterPartitionRequest,
        oneshot::Sender<pb::AlterPartitionResponse>,
    ),
    /// A sender lost its broker: queue the whole image for it.
    FullSync { broker_id: i32, broker_epoch: i64 },
}

/// The handle request handlers use to reach the controller.
#[derive(Debug, Clone)]
pub(crate) struct ControllerHandle {
    tx: mpsc::Sender<Command>,
    task: Arc<parking_lot::Mutex<Option<tokio::task::JoinHandle<()>>>>,
}

impl std::fmt::Debug for Command {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            Command::Register(..) => "Register",
            Command::Heartbeat(..) => "Heartbeat",
            Command::CreateTopics(..) => "CreateTopics",
            Command::AlterPartition(..) => "AlterPartition",
            Command::FullSync { .. } => "FullSync",
        })
    }
}

impl ControllerHandle {
    /// Waits for the event loop to finish (after its shutdown token fired).
    pub(crate) async fn join(&self) {
        let task = self.task.lock().take();
        if let Some(t) = task {
            let _ = t.await;
        }
    }

    async fn ask<T>(&self, make: impl FnOnce(oneshot::Sender<T>) -> Command) -> Option<T> {
        let (tx, rx) = oneshot::channel();
        self.tx.send(make(tx)).await.ok()?;
        rx.await.ok()
    }

    /// Runs a controller request; None when the controller has stopped.
    pub(crate) async fn handle(&self, body: pb::request::Body) -> Option<pb::response::Body> {
        use pb::request::Body as Req;
        use pb::response::Body as Resp;
        Some(match body {
            Req::BrokerRegistration(r) => {
                Resp::BrokerRegistration(self.ask(|tx| Command::Register(r, tx)).await?)
            }
            Req::BrokerHeartbeat(r) => {
                Resp::BrokerHeartbeat(self.ask(|tx| Command::Heartbeat(r, tx)).await?)
            }
            Req::CreateTopics(r) => {
                Resp::CreateTopics(self.ask(|tx| Command::CreateTopics(r, tx)).await?)
            }
            Req::AlterPartition(r) => {
                Resp::AlterPartition(self.ask(|tx| Command::AlterPartition(r, tx)).await?)
            }
            _ => return None,
        })
    }
}

/// Starts the controller: replays the metadata log under `dir`, takes office and
/// runs the event loop until `shutdown`. On a metadata-log failure it stops and
/// fires `fatal` (the process must not carry on with an unknown metadata state).
pub(crate) fn start(
    dir: &Path,
    config: &BrokerConfig,
    network: Arc<dyn Network>,
    metrics: Arc<BrokerMetrics>,
    shutdown: CancellationToken,
    fatal: CancellationToken,
) -> anyhow::Result<ControllerHandle> {
    let (log, replayed) = MetadataLog::open(dir)?;
    let mut image = MetadataImage::new();
    for (offset, record) in &replayed {
        image.apply(*offset, record)?;
    }
    let mut cc = ControllerConfig::new(config.node_id, config.cluster_id.clone());
    cc.broker_session_timeout_ms = config.broker_session_timeout_ms;
    cc.num_partitions = config.num_partitions;
    cc.default_replication_factor = config.default_replication_factor;
    cc.topic_defaults = crate::topic_config::controller_defaults(config);
    let controller =
        Controller::new(cc, image, Instant::now()).map_err(|e| anyhow::anyhow!("{e}"))?;
    tracing::info!(
        records = replayed.len(),
        brokers = controller.image().brokers().count(),
        partitions = controller.image().partition_count(),
        "controller replayed the metadata log"
    );
    let (tx, rx) = mpsc::channel(QUEUE);
    let mut host = Host {
        controller,
        log,
        senders: HashMap::new(),
        network,
        metrics,
        commands: tx.clone(),
        shutdown: shutdown.clone(),
    };
    let session = Duration::from_millis(config.broker_session_timeout_ms);
    let task = tokio::spawn(async move {
        if let Err(e) = host.run(rx, session).await {
            tracing::error!(error = %e, "controller stopped: the metadata log cannot be written");
            fatal.cancel();
        }
        for s in host.senders.values() {
            s.cancel.cancel();
        }
    });
    Ok(ControllerHandle {
        tx,
        task: Arc::new(parking_lot::Mutex::new(Some(task))),
    })
}

struct Host {
    controller: Controller,
    log: MetadataLog,
    senders: HashMap<i32, Arc<BrokerSender>>,
    network: Arc<dyn Network>,
    metrics: Arc<BrokerMetrics>,
    commands: mpsc::Sender<Command>,
    shutdown: CancellationToken,
}

impl Host {
    async fn run(
        &mut self,
        mut rx: mpsc::Receiver<Command>,
        session: Duration,
    ) -> anyhow::Result<()> {
        let start = self.controller.start();
        self.commit(start)?;
        tracing::info!(
            controller_epoch = self.controller.controller_epoch(),
            "controller took office"
        );
        self.metrics.active_controller.set(1);
        // Every registered broker gets the whole image.
        let ids: Vec<i32> = self
            .controller
            .image()
            .brokers()
            .map(|b| b.broker_id)
            .collect();
        for id in ids {
            self.ensure_sender(id, true);
        }
        let every = (session / 10).clamp(Duration::from_millis(10), Duration::from_millis(500));
        let mut tick = tokio::time::interval(every);
        tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        // A gap between ticks of half a session means this process did not run
        // (SIGSTOP, a long pause, a starved runtime): the brokers' heartbeats waited
        // unread meanwhile, and their silence is ours.
        let stalled_after = (session / 2).max(every * 3);
        let mut last_tick = Instant::now();
        loop {
            tokio::select! {
                _ = self.shutdown.cancelled() => break,
                _ = tick.tick() => {
                    let now = Instant::now();
                    let gap = now.saturating_duration_since(last_tick);
                    last_tick = now;
                    if gap > stalled_after {
                        tracing::warn!(stalled_ms = gap.as_millis() as u64, "the controller did not run for a while: every broker gets a new session");
                        self.controller.restart_sessions(now);
                    }
                    // Each fenced broker is logged once, by the controller's decision
                    // ("broker session expired: fencing", with its silence).
                    let r = self.controller.tick(now);
                    self.commit(r)?;
                }
                cmd = rx.recv() => match cmd {
                    None => break,
                    Some(cmd) => self.handle(cmd)?,
                },
            }
        }
        self.metrics.active_controller.set(0);
        Ok(())
    }

    fn handle(&mut self, cmd: Command) -> anyhow::Result<()> {
        let now = Instant::now();
        match cmd {
            Command::Register(req, reply) => {
                let r = self.controller.register_broker(&req, now);
                let response = self.commit(r)?;
                let _ = reply.send(response);
            }
            Command::Heartbeat(req, reply) => {
                let r = self.controller.heartbeat(&req, now);
                let response = self.commit(r)?;
                let _ = reply.send(response);
            }
            Command::CreateTopics(req, reply) => {
                let r = self.controller.create_topics(&req);
                let response = self.commit(r)?;
                for t in &response.topics {
                    if t.error_code == 0 && !req.validate_only {
                        tracing::info!(topic = %t.name, partitions = t.num_partitions, replication_factor = t.replication_factor, "topic created");
                    }
                }
                let _ = reply.send(response);
            }
            Command::AlterPartition(req, reply) => {
                let r = self.controller.alter_partition(&req);
                let response = self.commit(r)?;
                let _ = reply.send(response);
            }
            Command::FullSync {
                broker_id,
                broker_epoch,
            } => {
                let current = self.controller.image().broker(broker_id).map(|b| b.epoch);
                if current == Some(broker_epoch) {
                    if let Some(s) = self.senders.get(&broker_id) {
                        s.replace_with(self.full_request(broker_id));
                    }
                }
            }
        }
        Ok(())
    }

    /// Makes a decision true: append durably, apply, announce.
    fn commit<T>(&mut self, result: ControllerResult<T>) -> anyhow::Result<T> {
        if result.records.is_empty() {
            return Ok(result.response);
        }
        let first = self.log.append(&result.records)?;
        self.controller.replay_all(first, &result.records)?;
        self.announce(&result.records);
        let image = self.controller.image();
        self.metrics
            .offline_partitions_count
            .set(image.offline_partitions_count() as i64);
        self.metrics
            .set_unclean_elections_total(image.unclean_elections_total());
        self.metrics
            .set_broker_counts(image.brokers().count(), image.fenced_brokers_count());
        Ok(result.response)
    }

    fn announce(&mut self, records: &[pb::MetadataRecord]) {
        let partitions = changed_partitions(records);
        let brokers_changed = changed_brokers(records);
        let topics: BTreeSet<&str> = partitions.iter().map(|tp| &*tp.topic).collect();
        let image = self.controller.image();
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
            self.ensure_sender(*id, true);
        }
        if states.is_empty() && broker_infos.is_empty() {
            return;
        }
        let ids: Vec<i32> = self.senders.keys().copied().collect();
        for id in ids {
            if registered.contains(&id) {
                continue;
            }
            let Some(b) = self.controller.image().broker(id) else {
                continue;
            };
            let request = pb::LeaderAndIsrRequest {
                controller_id: self.controller.config().node_id,
                controller_epoch: self.controller.controller_epoch(),
                broker_epoch: b.epoch,
                metadata_offset: self.controller.image().last_applied_offset(),
                full: false,
                topics: topic_states.clone(),
                partition_states: states.clone(),
                brokers: broker_infos.clone(),
            };
            if let Some(s) = self.senders.get(&id) {
                s.push(request);
            }
        }
    }

    fn full_request(&self, broker_id: i32) -> pb::LeaderAndIsrRequest {
        let image = self.controller.image();
        pb::LeaderAndIsrRequest {
            controller_id: self.controller.config().node_id,
            controller_epoch: self.controller.controller_epoch(),
            broker_epoch: image.broker(broker_id).map_or(-1, |b| b.epoch),
            metadata_offset: image.last_applied_offset(),
            full: true,
            topics: image.topic_states(),
            partition_states: image.partition_states(),
            brokers: image.broker_infos(),
        }
    }

    /// Starts (or restarts, for a new registration) the sender of `broker_id`.
    fn ensure_sender(&mut self, broker_id: i32, full: bool) {
        let Some(b) = self.controller.image().broker(broker_id) else {
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
            });
            tokio::spawn(
                sender
                    .clone()
                    .run(self.network.clone(), self.commands.clone()),
            );
            self.senders.insert(broker_id, sender);
        }
        if full {
            let request = self.full_request(broker_id);
            if let Some(s) = self.senders.get(&broker_id) {
                s.replace_with(request);
            }
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
}

/// Requests waiting to be sent, each with a sequence number so that a request
/// sent while the queue was replaced is not mistaken for its replacement.
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
                let stream = tokio::time::timeout(PUSH_TIMEOUT, network.connect(&self.address))
                    .await
                    .map_err(|_| "connect timed out".to_string())?
                    .map_err(|e| e.to_string())?;
                let c = Connection::from_stream(stream, &self.address, "controller", usize::MAX);
                *conn = Some(c.clone());
                c
            }
        };
        let body = pb::request::Body::LeaderAndIsr(request);
        match tokio::time::timeout(PUSH_TIMEOUT, c.send(body)).await {
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
