//! Replica fetchers: how a follower replicates. One task per (source leader broker,
//! fetcher index) carries every partition this broker follows from that leader in
//! one long-polling Fetch (`replica_id` = this broker), and sends the next fetch as
//! soon as the response is appended. A partition joins a fetcher *truncating*: it
//! first asks the leader where its latest epoch ends (OffsetsForLeaderEpoch),
//! truncates there, and only then fetches from its new LEO.

use std::collections::HashMap;
use std::hash::{Hash, Hasher};
use std::sync::atomic::{AtomicI64, Ordering};
use std::sync::Arc;
use std::time::Duration;

use parking_lot::Mutex;
use syncline_client::Connection;
use syncline_proto::{pb, ErrorCode, EARLIEST_TIMESTAMP};
use tokio::sync::Notify;
use tokio::time::Instant;
use tokio_util::sync::CancellationToken;

use crate::config::BrokerConfig;
use crate::metadata_cache::MetadataCache;
use crate::metrics::BrokerMetrics;
use crate::net::Network;
use crate::partition::truncation::{decide, LeaderEpochEnd};
use crate::partition::{Partition, TopicPartition};

/// Longest a request to a leader may take beyond its own wait.
const REQUEST_TIMEOUT: Duration = Duration::from_secs(30);

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Phase {
    /// Must agree with the leader on where the logs diverge before fetching.
    Truncating,
    Fetching,
}

#[derive(Debug)]
struct FetchState {
    partition: Arc<Partition>,
    leader_epoch: i32,
    phase: Phase,
    /// Skip the partition until then (after an error).
    backoff_until: Option<Instant>,
    /// Failed rounds in a row: the next pause doubles with each one.
    failures: u32,
    /// Leader HW − our fetch offset, from the last response.
    lag: i64,
}

/// One fetcher's partitions, shared between the manager and its task.
#[derive(Debug)]
struct Fetcher {
    leader_id: i32,
    partitions: Mutex<HashMap<TopicPartition, FetchState>>,
    changed: Notify,
}

/// Starts, feeds and stops the fetchers.
#[derive(Debug)]
pub(crate) struct FetcherManager {
    config: Arc<BrokerConfig>,
    metadata: Arc<MetadataCache>,
    network: Arc<dyn Network>,
    broker_epoch: Arc<AtomicI64>,
    metrics: Arc<BrokerMetrics>,
    fetchers: Mutex<HashMap<(i32, usize), Arc<Fetcher>>>,
    /// Every fetcher task ever started (finished ones are pruned), so shutdown can
    /// wait for them: a fetcher must not touch a log after it is closed.
    tasks: Mutex<Vec<tokio::task::JoinHandle<()>>>,
    /// Told after each follower append: consumer fetches reading from this follower
    /// (KIP-392) may be waiting for its high watermark.
    on_append: std::sync::OnceLock<AppendListener>,
    shutdown: CancellationToken,
}

/// See [`FetcherManager::set_on_append`].
pub(crate) struct AppendListener(pub Box<dyn Fn(&TopicPartition) + Send + Sync>);

impl std::fmt::Debug for AppendListener {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("AppendListener")
    }
}

fn now_ms() -> i64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_millis() as i64)
}

impl FetcherManager {
    pub(crate) fn new(
        config: Arc<BrokerConfig>,
        metadata: Arc<MetadataCache>,
        network: Arc<dyn Network>,
        broker_epoch: Arc<AtomicI64>,
        metrics: Arc<BrokerMetrics>,
        shutdown: CancellationToken,
    ) -> FetcherManager {
        FetcherManager {
            config,
            metadata,
            network,
            broker_epoch,
            metrics,
            fetchers: Mutex::new(HashMap::new()),
            tasks: Mutex::new(Vec::new()),
            on_append: std::sync::OnceLock::new(),
            shutdown,
        }
    }

    /// Sets what to tell after each follower append (once).
    pub(crate) fn set_on_append(&self, listener: AppendListener) {
        let _ = self.on_append.set(listener);
    }

    /// Stops every fetcher and waits until none runs.
    pub(crate) async fn stop(&self) {
        self.shutdown.cancel();
        let tasks = std::mem::take(&mut *self.tasks.lock());
        for t in &tasks {
            t.abort();
        }
        for t in tasks {
            let _ = t.await;
        }
        self.fetchers.lock().clear();
    }

    fn fetcher_index(&self, tp: &TopicPartition) -> usize {
        let mut h = std::collections::hash_map::DefaultHasher::new();
        tp.hash(&mut h);
        (h.finish() % self.config.num_replica_fetchers as u64) as usize
    }

    /// Follows `leader_id` for `partition` in `leader_epoch`, starting with truncation.
    /// Called for every LeaderAndIsr that makes this broker follower or changes the
    /// leader epoch.
    pub(crate) fn add_partition(
        self: &Arc<Self>,
        partition: Arc<Partition>,
        leader_id: i32,
        leader_epoch: i32,
    ) {
        let tp = partition.tp.clone();
        self.remove_partition(&tp);
        let key = (leader_id, self.fetcher_index(&tp));
        let mut fetchers = self.fetchers.lock();
        let fetcher = fetchers.entry(key).or_insert_with(|| {
            let f = Arc::new(Fetcher {
                leader_id,
                partitions: Mutex::new(HashMap::new()),
                changed: Notify::new(),
            });
            let task = FetcherTask {
                manager: self.clone(),
                fetcher: f.clone(),
                key,
                connection: None,
                session: FetchSessionBuilder::default(),
            };
            let mut tasks = self.tasks.lock();
            tasks.retain(|t| !t.is_finished());
            tasks.push(tokio::spawn(task.run()));
            f
        });
        fetcher.partitions.lock().insert(
            tp,
            FetchState {
                partition,
                leader_epoch,
                // Under the legacy rule, truncated to the high watermark already when
                // the role changed.
                phase: if self.config.truncates_by_leader_epoch() {
                    Phase::Truncating
                } else {
                    Phase::Fetching
                },
                backoff_until: None,
                failures: 0,
                lag: 0,
            },
        );
        fetcher.changed.notify_one();
    }

    /// Stops fetching `tp` (it became leader, offline, or follows another leader).
    pub(crate) fn remove_partition(&self, tp: &TopicPartition) {
        for f in self.fetchers.lock().values() {
            if f.partitions.lock().remove(tp).is_some() {
                f.changed.notify_one();
            }
        }
    }

    /// Max over followed partitions of (leader HW − next fetch offset).
    pub(crate) fn max_lag(&self) -> i64 {
        self.fetchers
            .lock()
            .values()
            .flat_map(|f| {
                f.partitions
                    .lock()
                    .values()
                    .map(|s| s.lag)
                    .collect::<Vec<_>>()
            })
            .max()
            .unwrap_or(0)
    }
}

struct FetcherTask {
    manager: Arc<FetcherManager>,
    fetcher: Arc<Fetcher>,
    key: (i32, usize),
    connection: Option<Connection>,
    session: FetchSessionBuilder,
}

/// The follower's half of an incremental fetch session (KIP-227): remembers what
/// the leader's session holds, and sends only what changed.
#[derive(Debug, Default)]
struct FetchSessionBuilder {
    /// 0: no session; the next fetch is a full one asking for a session.
    id: i32,
    next_epoch: i32,
    /// The partitions (and positions) the leader's session holds.
    sent: HashMap<TopicPartition, pb::FetchPartition>,
    /// What the request in flight would make `sent`.
    in_flight: HashMap<TopicPartition, pb::FetchPartition>,
}

type SessionRequest = (i32, i32, Vec<pb::FetchTopic>, Vec<pb::ForgottenTopic>);

impl FetchSessionBuilder {
    /// The request's session fields and partitions for fetching `wanted`.
    fn build(&mut self, wanted: HashMap<TopicPartition, pb::FetchPartition>) -> SessionRequest {
        let full = self.id == 0;
        let mut topics: Vec<pb::FetchTopic> = Vec::new();
        let mut add = |tp: &TopicPartition, p: &pb::FetchPartition| match topics
            .iter_mut()
            .find(|t| *t.topic == *tp.topic)
        {
            Some(t) => t.partitions.push(*p),
            None => topics.push(pb::FetchTopic {
                topic: tp.topic.to_string(),
                partitions: vec![*p],
            }),
        };
        let mut forgotten: Vec<pb::ForgottenTopic> = Vec::new();
        for (tp, p) in &wanted {
            if full || self.sent.get(tp) != Some(p) {
                add(tp, p);
            }
        }
        if !full {
            for tp in self.sent.keys().filter(|tp| !wanted.contains_key(*tp)) {
                match forgotten.iter_mut().find(|f| *f.topic == *tp.topic) {
                    Some(f) => f.partitions.push(tp.partition),
                    None => forgotten.push(pb::ForgottenTopic {
                        topic: tp.topic.to_string(),
                        partitions: vec![tp.partition],
                    }),
                }
            }
        }
        self.in_flight = wanted;
        let epoch = if full {
            crate::fetch_session::INITIAL_EPOCH
        } else {
            self.next_epoch
        };
        (self.id, epoch, topics, forgotten)
    }

    /// The fetch was answered without a request-level error.
    fn on_response(&mut self, session_id: i32) {
        if self.id == 0 {
            // 0: the leader declined; keep sending full fetches.
            self.id = session_id;
            self.next_epoch = 1;
        } else {
            self.next_epoch = self.next_epoch.checked_add(1).unwrap_or(1);
        }
        self.sent = std::mem::take(&mut self.in_flight);
    }

    /// Start over with a full fetch (error, lost connection).
    fn reset(&mut self) {
        *self = FetchSessionBuilder::default();
    }
}

/// A snapshot of one partition for one round.
struct Round {
    tp: TopicPartition,
    partition: Arc<Partition>,
    leader_epoch: i32,
}

impl FetcherTask {
    fn config(&self) -> &BrokerConfig {
        &self.manager.config
    }

    async fn run(mut self) {
        let leader = self.fetcher.leader_id;
        tracing::debug!(leader, "replica fetcher started");
        self.manager.metrics.fetcher_started(leader);
        loop {
            if self.manager.shutdown.is_cancelled() {
                break;
            }
            let (truncating, fetching, next_wake) = self.snapshot();
            if truncating.is_empty() && fetching.is_empty() && next_wake.is_none() {
                // No partitions left: stop, unless one was added meanwhile.
                let mut fetchers = self.manager.fetchers.lock();
                if self.fetcher.partitions.lock().is_empty() {
                    fetchers.remove(&self.key);
                    break;
                }
                continue;
            }
            if truncating.is_empty() && fetching.is_empty() {
                self.idle_until(next_wake).await;
                continue;
            }
            let Some(conn) = self.connection().await else {
                self.manager.metrics.fetcher_failure(leader);
                let backoff =
                    Instant::now() + Duration::from_millis(self.config().replica_fetch_backoff_ms);
                self.idle_until(Some(backoff)).await;
                continue;
            };
            if !truncating.is_empty() {
                self.truncate(&conn, truncating).await;
                continue;
            }
            self.fetch(&conn, fetching).await;
        }
        tracing::debug!(leader, "replica fetcher stopped");
    }

    async fn idle_until(&self, deadline: Option<Instant>) {
        let deadline = deadline.unwrap_or_else(|| Instant::now() + Duration::from_secs(1));
        tokio::select! {
            _ = self.fetcher.changed.notified() => {}
            _ = tokio::time::sleep_until(deadline) => {}
            _ = self.manager.shutdown.cancelled() => {}
        }
    }

    fn snapshot(&self) -> (Vec<Round>, Vec<Round>, Option<Instant>) {
        let now = Instant::now();
        let mut truncating = Vec::new();
        let mut fetching = Vec::new();
        let mut next_wake: Option<Instant> = None;
        for (tp, s) in self.fetcher.partitions.lock().iter() {
            if let Some(until) = s.backoff_until.filter(|u| *u > now) {
                next_wake = Some(next_wake.map_or(until, |w| w.min(until)));
                continue;
            }
            let r = Round {
                tp: tp.clone(),
                partition: s.partition.clone(),
                leader_epoch: s.leader_epoch,
            };
            match s.phase {
                Phase::Truncating => truncating.push(r),
                Phase::Fetching => fetching.push(r),
            }
        }
        (truncating, fetching, next_wake)
    }

    async fn connection(&mut self) -> Option<Connection> {
        if let Some(c) = self.connection.as_ref().filter(|c| !c.is_closed()) {
            return Some(c.clone());
        }
        let leader = self.fetcher.leader_id;
        let addr = self.manager.metadata.broker_address(leader)?;
        let connect = self.manager.network.connect(&addr);
        match tokio::time::timeout(Duration::from_secs(10), connect).await {
            Ok(Ok(stream)) => {
                let client_id = format!("replica-fetcher-{}-{}", self.config().node_id, leader);
                // A new connection starts a new fetch session.
                self.session.reset();
                let c = Connection::from_stream(
                    stream,
                    &addr,
                    &client_id,
                    self.config().socket_request_max_bytes,
                );
                self.connection = Some(c.clone());
                Some(c)
            }
            Ok(Err(e)) => {
                tracing::debug!(leader, %addr, error = %e, "cannot connect to leader");
                None
            }
            Err(_) => {
                tracing::debug!(leader, %addr, "timed out connecting to leader");
                None
            }
        }
    }

    /// Updates one partition's state if it is still the one this round was for.
    fn update(&self, r: &Round, f: impl FnOnce(&mut FetchState)) {
        if let Some(s) = self.fetcher.partitions.lock().get_mut(&r.tp) {
            if Arc::ptr_eq(&s.partition, &r.partition) && s.leader_epoch == r.leader_epoch {
                f(s);
            }
        }
    }

    /// Pauses a partition after a failed round. The pause starts short and
    /// doubles up to `replica_fetch_backoff_ms`: the usual failures clear within
    /// milliseconds (a new leader that has not yet applied the LeaderAndIsr making
    /// it leader answers `UNKNOWN_TOPIC_OR_PARTITION`, `NOT_LEADER_OR_FOLLOWER` or
    /// `UNKNOWN_LEADER_EPOCH`), and a whole second's pause there would hold every
    /// `acks=all` produce to the partition for that second.
    fn back_off(&self, r: &Round) {
        let max = self.config().replica_fetch_backoff_ms;
        self.update(r, |s| {
            s.backoff_until = Some(Instant::now() + retry_delay(s.failures, max));
            s.failures = s.failures.saturating_add(1);
        });
    }

    /// A round for the partition succeeded: the next failure pauses briefly again.
    fn succeeded(&self, r: &Round) {
        self.update(r, |s| s.failures = 0);
    }

    /// One round of epoch-based truncation for the partitions that need it.
    async fn truncate(&mut self, conn: &Connection, rounds: Vec<Round>) {
        let mut asks = Vec::new();
        for r in rounds {
            let (_, latest_epoch, _) = r.partition.follower_fetch_position();
            match latest_epoch {
                // Nothing written under any epoch: nothing to truncate.
                None => self.update(&r, |s| s.phase = Phase::Fetching),
                Some(epoch) => asks.push((r, epoch)),
            }
        }
        if asks.is_empty() {
            return;
        }
        let mut by_topic: HashMap<Arc<str>, Vec<pb::OffsetForLeaderPartition>> = HashMap::new();
        for (r, epoch) in &asks {
            by_topic
                .entry(r.tp.topic.clone())
                .or_default()
                .push(pb::OffsetForLeaderPartition {
                    partition: r.tp.partition,
                    current_leader_epoch: Some(r.leader_epoch),
                    leader_epoch: *epoch,
                });
        }
        let req = pb::OffsetsForLeaderEpochRequest {
            replica_id: self.config().node_id,
            topics: by_topic
                .into_iter()
                .map(|(topic, partitions)| pb::OffsetForLeaderTopic {
                    topic: topic.to_string(),
                    partitions,
                })
                .collect(),
        };
        let response = match self
            .send(
                conn,
                pb::request::Body::OffsetsForLeaderEpoch(req),
                REQUEST_TIMEOUT,
            )
            .await
        {
            Some(pb::response::Body::OffsetsForLeaderEpoch(r)) => r,
            _ => {
                self.manager.metrics.fetcher_failure(self.fetcher.leader_id);
                for (r, _) in &asks {
                    self.back_off(r);
                }
                return;
            }
        };
        let mut answers: HashMap<(String, i32), pb::EpochEndOffsetResult> = HashMap::new();
        for t in response.topics {
            for p in t.partitions {
                answers.insert((t.topic.clone(), p.partition), p);
            }
        }
        for (r, asked_epoch) in asks {
            let Some(a) = answers.remove(&(r.tp.topic.to_string(), r.tp.partition)) else {
                self.back_off(&r);
                continue;
            };
            let code = ErrorCode::from_wire(a.error_code);
            if code != ErrorCode::None {
                tracing::debug!(partition = %r.tp, error = %code, "OffsetsForLeaderEpoch failed");
                self.back_off(&r);
                continue;
            }
            let leader_end = LeaderEpochEnd {
                epoch: a.leader_epoch,
                end_offset: a.end_offset,
            };
            self.succeeded(&r);
            self.apply_truncation(&r, leader_end, Some(asked_epoch));
        }
    }

    /// Truncates as the leader's answer (or a fetch's diverging epoch) requires.
    fn apply_truncation(&self, r: &Round, leader_end: LeaderEpochEnd, asked_epoch: Option<i32>) {
        let p = &r.partition;
        let (leo, _, _) = p.follower_fetch_position();
        let decision = decide(leader_end, leo, p.high_watermark(), |e| {
            p.local_end_offset_for_epoch(e)
                .map(|e| (e.epoch, e.end_offset))
        });
        match p.truncate_to(decision.offset, r.leader_epoch) {
            Ok(new_leo) => {
                if new_leo < leo {
                    // The one event per truncation (the partition logs it at debug).
                    let reason = if asked_epoch.is_some() {
                        "OffsetsForLeaderEpoch"
                    } else {
                        "diverging epoch in a fetch response"
                    };
                    tracing::info!(
                        topic = %r.tp.topic, partition = r.tp.partition, reason, asked_epoch = ?asked_epoch,
                        leader = self.fetcher.leader_id, leader_epoch = leader_end.epoch,
                        leader_end_offset = leader_end.end_offset, high_watermark = p.high_watermark(),
                        from = leo, to = new_leo, truncated_offsets = leo - new_leo, "truncation"
                    );
                }
                let phase = if decision.complete {
                    Phase::Fetching
                } else {
                    Phase::Truncating
                };
                self.update(r, |s| s.phase = phase);
            }
            Err(code) => {
                tracing::debug!(partition = %r.tp, error = %code, "truncation refused");
                self.back_off(r);
            }
        }
    }

    async fn send(
        &mut self,
        conn: &Connection,
        body: pb::request::Body,
        timeout: Duration,
    ) -> Option<pb::response::Body> {
        match tokio::time::timeout(timeout, conn.send(body)).await {
            Ok(Ok(b)) => Some(b),
            Ok(Err(e)) => {
                tracing::debug!(leader = self.fetcher.leader_id, error = %e, "request to leader failed");
                self.connection = None;
                self.session.reset();
                None
            }
            Err(_) => {
                tracing::debug!(
                    leader = self.fetcher.leader_id,
                    "request to leader timed out"
                );
                self.connection = None;
                self.session.reset();
                None
            }
        }
    }

    async fn fetch(&mut self, conn: &Connection, rounds: Vec<Round>) {
        let config = self.manager.config.clone();
        let mut wanted = HashMap::with_capacity(rounds.len());
        let mut offsets = HashMap::new();
        for r in &rounds {
            let (leo, latest_epoch, log_start) = r.partition.follower_fetch_position();
            offsets.insert(r.tp.clone(), leo);
            wanted.insert(
                r.tp.clone(),
                pb::FetchPartition {
                    partition: r.tp.partition,
                    current_leader_epoch: Some(r.leader_epoch),
                    fetch_offset: leo,
                    last_fetched_epoch: latest_epoch.filter(|_| config.truncates_by_leader_epoch()),
                    log_start_offset: log_start,
                    partition_max_bytes: config.replica_fetch_max_bytes as i32,
                },
            );
        }
        let (session_id, session_epoch, topics, forgotten) = self.session.build(wanted);
        let req = pb::FetchRequest {
            replica_id: config.node_id,
            replica_epoch: self.manager.broker_epoch.load(Ordering::Acquire),
            max_wait_ms: config.replica_fetch_wait_max_ms as i32,
            min_bytes: config.replica_fetch_min_bytes as i32,
            max_bytes: config.replica_fetch_response_max_bytes as i32,
            isolation_level: pb::IsolationLevel::ReadUncommitted as i32,
            session_id,
            session_epoch,
            topics,
            forgotten_topics_data: forgotten,
            ..Default::default()
        };
        self.manager.metrics.fetcher_request(self.fetcher.leader_id);
        let wait = Duration::from_millis(config.replica_fetch_wait_max_ms);
        let response = match self
            .send(conn, pb::request::Body::Fetch(req), wait + REQUEST_TIMEOUT)
            .await
        {
            Some(pb::response::Body::Fetch(r)) => r,
            _ => {
                self.manager.metrics.fetcher_failure(self.fetcher.leader_id);
                self.session.reset();
                for r in &rounds {
                    self.back_off(r);
                }
                return;
            }
        };
        if response.error_code != ErrorCode::None as i32 {
            self.manager.metrics.fetcher_failure(self.fetcher.leader_id);
            // A lost or expired session: the next fetch starts a new one at once.
            let session_error = matches!(
                ErrorCode::from_wire(response.error_code),
                ErrorCode::FetchSessionIdNotFound | ErrorCode::InvalidFetchSessionEpoch
            );
            self.session.reset();
            if !session_error {
                for r in &rounds {
                    self.back_off(r);
                }
            }
            return;
        }
        self.session.on_response(response.session_id);
        let mut by_tp: HashMap<(String, i32), pb::PartitionData> = HashMap::new();
        for t in response.responses {
            for p in t.partitions {
                by_tp.insert((t.topic.clone(), p.partition), p);
            }
        }
        let now_ms = now_ms();
        for r in rounds {
            let Some(data) = by_tp.remove(&(r.tp.topic.to_string(), r.tp.partition)) else {
                continue;
            };
            let fetch_offset = offsets[&r.tp];
            self.handle_partition(conn, &r, data, fetch_offset, now_ms)
                .await;
        }
    }

    async fn handle_partition(
        &mut self,
        conn: &Connection,
        r: &Round,
        data: pb::PartitionData,
        fetch_offset: i64,
        now_ms: i64,
    ) {
        // Removed or re-added with another epoch while the fetch was in flight.
        let current = self.fetcher.partitions.lock().get(&r.tp).is_some_and(|s| {
            Arc::ptr_eq(&s.partition, &r.partition) && s.leader_epoch == r.leader_epoch
        });
        if !current {
            return;
        }
        match ErrorCode::from_wire(data.error_code) {
            ErrorCode::None => {
                if let Some(d) = data.diverging_epoch {
                    let end = LeaderEpochEnd {
                        epoch: d.epoch,
                        end_offset: d.end_offset,
                    };
                    self.apply_truncation(r, end, None);
                    return;
                }
                match r.partition.append_as_follower(
                    &data.records,
                    data.high_watermark,
                    r.leader_epoch,
                    now_ms,
                ) {
                    Ok(leo) => {
                        let lag = (data.high_watermark - leo).max(0);
                        self.update(r, |s| {
                            s.lag = lag;
                            s.failures = 0;
                        });
                        if let Some(tell) = self.manager.on_append.get() {
                            (tell.0)(&r.tp);
                        }
                    }
                    Err(code) => {
                        tracing::warn!(partition = %r.tp, fetch_offset, error = %code, "follower append failed");
                        self.back_off(r);
                    }
                }
            }
            ErrorCode::OffsetOutOfRange => self.handle_out_of_range(conn, r).await,
            code => {
                tracing::debug!(partition = %r.tp, error = %code, "fetch error");
                self.back_off(r);
            }
        }
    }

    /// Our fetch offset is outside the leader's log: either below its log start
    /// (retention moved on: start over there) or above its end (truncate by epoch).
    async fn handle_out_of_range(&mut self, conn: &Connection, r: &Round) {
        let req = pb::ListOffsetsRequest {
            replica_id: self.config().node_id,
            isolation_level: 0,
            topics: vec![pb::ListOffsetsTopic {
                name: r.tp.topic.to_string(),
                partitions: vec![pb::ListOffsetsPartition {
                    partition: r.tp.partition,
                    current_leader_epoch: Some(r.leader_epoch),
                    timestamp: EARLIEST_TIMESTAMP,
                }],
            }],
        };
        let earliest = match self
            .send(conn, pb::request::Body::ListOffsets(req), REQUEST_TIMEOUT)
            .await
        {
            Some(pb::response::Body::ListOffsets(resp)) => resp
                .topics
                .into_iter()
                .flat_map(|t| t.partitions)
                .find(|p| p.error_code == 0)
                .map(|p| p.offset),
            _ => None,
        };
        let Some(earliest) = earliest else {
            self.back_off(r);
            return;
        };
        let (leo, _, _) = r.partition.follower_fetch_position();
        if leo < earliest {
            if r.partition
                .truncate_fully_and_start_at(earliest, r.leader_epoch)
                .is_err()
            {
                self.back_off(r);
            }
        } else {
            self.update(r, |s| s.phase = Phase::Truncating);
        }
    }
}

/// The first pause after a failed round; each further failure in a row doubles it.
const FIRST_RETRY_DELAY: Duration = Duration::from_millis(10);

/// The pause after `failures` earlier failures in a row, at most `max_ms`.
fn retry_delay(failures: u32, max_ms: u64) -> Duration {
    FIRST_RETRY_DELAY
        .saturating_mul(1 << failures.min(31))
        .min(Duration::from_millis(max_ms))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn retry_delay_starts_short_and_doubles_up_to_the_configured_backoff() {
        let ms = |failures| retry_delay(failures, 1000).as_millis();
        assert_eq!(
            (0..9).map(ms).collect::<Vec<_>>(),
            vec![10, 20, 40, 80, 160, 320, 640, 1000, 1000]
        );
        // No overflow however long the failures last.
        assert_eq!(ms(31), 1000);
        assert_eq!(ms(u32::MAX), 1000);
        // A backoff below the first pause caps it.
        assert_eq!(retry_delay(0, 0), Duration::ZERO);
        assert_eq!(retry_delay(3, 5), Duration::from_millis(5));
    }

    fn p(partition: i32, offset: i64) -> (TopicPartition, pb::FetchPartition) {
        (
            TopicPartition::new("t", partition),
            pb::FetchPartition {
                partition,
                fetch_offset: offset,
                ..Default::default()
            },
        )
    }

    fn sent_partitions(topics: &[pb::FetchTopic]) -> Vec<(i32, i64)> {
        let mut v: Vec<(i32, i64)> = topics
            .iter()
            .flat_map(|t| t.partitions.iter().map(|p| (p.partition, p.fetch_offset)))
            .collect();
        v.sort();
        v
    }

    #[test]
    fn session_builder_sends_everything_then_only_changes() {
        let mut b = FetchSessionBuilder::default();
        let (id, epoch, topics, forgotten) = b.build([p(0, 5), p(1, 7)].into_iter().collect());
        assert_eq!((id, epoch), (0, 0));
        assert_eq!(sent_partitions(&topics), vec![(0, 5), (1, 7)]);
        assert!(forgotten.is_empty());
        b.on_response(42);
        // Partition 0 advanced, partition 1 did not: only 0 is sent.
        let (id, epoch, topics, _) = b.build([p(0, 9), p(1, 7)].into_iter().collect());
        assert_eq!((id, epoch), (42, 1));
        assert_eq!(sent_partitions(&topics), vec![(0, 9)]);
        b.on_response(42);
        // Partition 1 leaves the fetcher: forgotten.
        let (_, epoch, topics, forgotten) = b.build([p(0, 9)].into_iter().collect());
        assert_eq!(epoch, 2);
        assert!(topics.is_empty());
        assert_eq!(forgotten[0].partitions, vec![1]);
        // After an error, a full fetch again.
        b.reset();
        let (id, epoch, topics, _) = b.build([p(0, 9)].into_iter().collect());
        assert_eq!((id, epoch, sent_partitions(&topics)), (0, 0, vec![(0, 9)]));
        // A declined session keeps full fetches.
        b.on_response(0);
        let (id, epoch, topics, _) = b.build([p(0, 9)].into_iter().collect());
        assert_eq!((id, epoch, sent_partitions(&topics)), (0, 0, vec![(0, 9)]));
    }
}
