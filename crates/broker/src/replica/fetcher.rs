//! Replica fetchers: how a follower replicates. One task per (source leader broker,
//! fetcher index) carries every partition this broker follows from that leader in
//! one long-polling Fetch (`replica_id` = this broker), and sends the next fetch as
//! soon as the response is appended. A partition joins a fetcher *truncating*: it
//! first asks the leader where its latest epoch ends (OffsetsForLeaderEpoch),
//! truncates there, and only then fetches from its new LEO.
//!
//! This module is the I/O shell: which request a partition needs, and how each
//! answer or error moves it, is decided by its [`FollowerState`] machine
//! ([`syncline_replication::follower`]); the task here sends the requests, touches the log, and
//! feeds the outcomes back.

use std::collections::HashMap;
use std::hash::{Hash, Hasher};
use std::sync::atomic::{AtomicI64, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;

use parking_lot::Mutex;
use syncline_client::Connection;
use syncline_proto::{pb, wall_clock_ms, EpochEndOffset, ErrorCode, EARLIEST_TIMESTAMP};
use tokio::sync::Notify;
use tokio::time::Instant;
use tokio_util::sync::CancellationToken;

use crate::config::BrokerConfig;
use crate::control::metadata_cache::MetadataCache;
use crate::metrics::{BrokerMetrics, ThrottleSide};
use crate::net::Network;
use crate::replica::partition::{Partition, TopicPartition};
use crate::replica::quota::ReplicationQuota;
use syncline_replication::follower::{
    retry_backoff, Effect, Event, FetchAnswer, FollowerState, LogPosition, TruncationCause,
};
use syncline_replication::partition::truncation::LocalLog;

/// Longest a request to a leader may take beyond its own wait.
const REQUEST_TIMEOUT: Duration = Duration::from_secs(30);
/// Longest an idle fetcher's fetch waits at the leader (see [`fetch_wait`]).
const IDLE_FETCH_WAIT_MAX: Duration = Duration::from_secs(5);
/// An idle fetcher's fetch waits at most this part of the smallest
/// `replica.lag.time.max.ms` of its topics (see [`fetch_wait`]).
const IDLE_FETCH_WAIT_LAG_PART: u32 = 6;

/// How long the next fetch asks the leader to wait for records.
///
/// `configured` (`replica_fetch_wait_max_ms`), unless the fetcher is `idle`: its
/// last fetch was an incremental one answered with nothing (no records, no new
/// high watermark or log start, no error), and none of its partitions waits out
/// a pause. Then it waits longer: a sixth of `min_lag`, the smallest
/// `replica.lag.time.max.ms` of its topics, at most [`IDLE_FETCH_WAIT_MAX`],
/// never less than `configured`. An idle follower of thousands of partitions
/// thus costs its leader a round every few seconds instead of twice a second,
/// and nothing waits for it: an append (or a leadership change) answers the
/// waiting fetch at once, as before, and the round after any answer with news
/// waits `configured` again, so the follower learns the high watermark its
/// fetch advanced as soon as it does now. The bound keeps the wait well under
/// the lag time: the leader counts a follower caught up as of its last fetch,
/// which at the moment records arrive is up to one wait old, and a follower
/// must never look out of sync for an idle wait.
#[must_use]
fn fetch_wait(configured: Duration, idle: bool, min_lag: Duration) -> Duration {
    if !idle {
        return configured;
    }
    (min_lag / IDLE_FETCH_WAIT_LAG_PART)
        .min(IDLE_FETCH_WAIT_MAX)
        .max(configured)
}

/// One followed partition: its replica and its fetch phase machine.
#[derive(Debug)]
struct FetchState {
    partition: Arc<Partition>,
    machine: FollowerState,
}

/// One fetcher's partitions, shared between the manager and its task.
#[derive(Debug)]
struct Fetcher {
    leader_id: i32,
    partitions: Mutex<HashMap<TopicPartition, FetchState>>,
    /// Counts the changes of `partitions` (a partition joined or left), under
    /// its lock: a fetch in flight knows whether it still carries them all.
    generation: AtomicU64,
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
    /// `follower_replication_throttled_rate`, when set: one bound for all of this
    /// broker's fetchers.
    follower_quota: Option<ReplicationQuota>,
    shutdown: CancellationToken,
}

/// See [`FetcherManager::set_on_append`].
pub(crate) struct AppendListener(pub Box<dyn Fn(&TopicPartition) + Send + Sync>);

impl std::fmt::Debug for AppendListener {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("AppendListener")
    }
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
        let follower_quota = config
            .follower_replication_throttled_rate
            .map(|rate| ReplicationQuota::new(rate, Instant::now()));
        FetcherManager {
            follower_quota,
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
                generation: AtomicU64::new(0),
                changed: Notify::new(),
            });
            let task = FetcherTask {
                manager: self.clone(),
                fetcher: f.clone(),
                key,
                connection: None,
                session: FetchSessionBuilder::default(),
                idle: false,
            };
            let mut tasks = self.tasks.lock();
            tasks.retain(|t| !t.is_finished());
            tasks.push(tokio::spawn(task.run()));
            f
        });
        let machine = FollowerState::new(
            leader_epoch,
            self.config.truncates_by_leader_epoch(),
            retry_backoff(self.config.replica_fetch_backoff_ms),
        );
        let mut partitions = fetcher.partitions.lock();
        partitions.insert(tp, FetchState { partition, machine });
        fetcher.generation.fetch_add(1, Ordering::Relaxed);
        drop(partitions);
        fetcher.changed.notify_one();
    }

    /// Stops fetching `tp` (it became leader, offline, or follows another leader).
    pub(crate) fn remove_partition(&self, tp: &TopicPartition) {
        for f in self.fetchers.lock().values() {
            let mut partitions = f.partitions.lock();
            if partitions.remove(tp).is_some() {
                f.generation.fetch_add(1, Ordering::Relaxed);
                drop(partitions);
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
                    .map(|s| s.machine.lag())
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
    /// The last fetch was incremental and answered with nothing: the next may
    /// wait longer ([`fetch_wait`]).
    idle: bool,
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
    in_flight: InFlight,
    /// A session given up with a fetch in flight (its answer is never read):
    /// the next request closes it (the final epoch), so that the leader forgets
    /// it rather than keep it in a slot until evicted. 0: none.
    closing: i32,
}

/// What the request in flight changes in the session once answered: a full
/// fetch replaces it, an incremental one changes only what it sent, so that an
/// idle round (nothing sent) rebuilds nothing per partition.
#[derive(Debug, Default)]
enum InFlight {
    #[default]
    Nothing,
    Full(HashMap<TopicPartition, pb::FetchPartition>),
    Changes {
        updated: Vec<(TopicPartition, pb::FetchPartition)>,
        forgotten: Vec<TopicPartition>,
    },
}

type SessionRequest = (i32, i32, Vec<pb::FetchTopic>, Vec<pb::ForgottenTopic>);

impl FetchSessionBuilder {
    /// The request's session fields and partitions for fetching `wanted` (each
    /// partition once).
    fn build(&mut self, wanted: Vec<(TopicPartition, pb::FetchPartition)>) -> SessionRequest {
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
        let mut updated = Vec::new();
        let mut in_session = 0;
        for (tp, p) in &wanted {
            let sent = self.sent.get(tp);
            in_session += usize::from(sent.is_some());
            if full || sent != Some(p) {
                add(tp, p);
                if !full {
                    updated.push((tp.clone(), *p));
                }
            }
        }
        let mut gone = Vec::new();
        // Partitions of the session no longer wanted (rare: counted first, so
        // that a round that forgets nothing looks nothing up).
        if !full && in_session < self.sent.len() {
            let wanted_now: std::collections::BTreeSet<&TopicPartition> =
                wanted.iter().map(|(tp, _)| tp).collect();
            for tp in self.sent.keys().filter(|tp| !wanted_now.contains(tp)) {
                match forgotten.iter_mut().find(|f| *f.topic == *tp.topic) {
                    Some(f) => f.partitions.push(tp.partition),
                    None => forgotten.push(pb::ForgottenTopic {
                        topic: tp.topic.to_string(),
                        partitions: vec![tp.partition],
                    }),
                }
                gone.push(tp.clone());
            }
        }
        self.in_flight = if full {
            InFlight::Full(wanted.into_iter().collect())
        } else {
            InFlight::Changes {
                updated,
                forgotten: gone,
            }
        };
        let (id, epoch) = if !full {
            (self.id, self.next_epoch)
        } else if self.closing != 0 {
            // A full, sessionless fetch that also closes the abandoned session;
            // the one after it asks for a new session.
            (self.closing, crate::replica::fetch_session::FINAL_EPOCH)
        } else {
            (0, crate::replica::fetch_session::INITIAL_EPOCH)
        };
        (id, epoch, topics, forgotten)
    }

    /// The fetch was answered without a request-level error.
    fn on_response(&mut self, session_id: i32) {
        self.closing = 0;
        if self.id == 0 {
            // 0: the leader declined; keep sending full fetches.
            self.id = session_id;
            self.next_epoch = 1;
        } else {
            self.next_epoch = self.next_epoch.checked_add(1).unwrap_or(1);
        }
        match std::mem::take(&mut self.in_flight) {
            InFlight::Nothing => {}
            InFlight::Full(sent) => self.sent = sent,
            InFlight::Changes { updated, forgotten } => {
                for tp in &forgotten {
                    self.sent.remove(tp);
                }
                self.sent.extend(updated);
            }
        }
    }

    /// Start over with a full fetch (error, lost connection).
    fn reset(&mut self) {
        *self = FetchSessionBuilder::default();
    }

    /// The fetch in flight is given up (its answer will not be read): start
    /// over with a full fetch, which closes the session.
    fn abandon(&mut self) {
        let closing = if self.id != 0 { self.id } else { self.closing };
        *self = FetchSessionBuilder {
            closing,
            ..FetchSessionBuilder::default()
        };
    }
}

/// Awaits `answer`, unless `fetcher`'s partitions change (its generation
/// moves past `generation`) first: then `None`, and `answer` is dropped.
async fn unless_changed<F: std::future::Future>(
    answer: F,
    fetcher: &Fetcher,
    generation: u64,
) -> Option<F::Output> {
    tokio::pin!(answer);
    loop {
        // A notification may be older than the round (stored while nothing
        // waited): only a moved generation counts.
        if fetcher.generation.load(Ordering::Relaxed) != generation {
            return None;
        }
        tokio::select! {
            out = &mut answer => return Some(out),
            () = fetcher.changed.notified() => {}
        }
    }
}

/// One partition in one round, as it was when the round started.
struct Round {
    tp: TopicPartition,
    partition: Arc<Partition>,
    leader_epoch: i32,
    /// This broker's replication of the partition is throttled ([`crate::replica::quota`]).
    throttled: bool,
}

/// What one round sends: OffsetsForLeaderEpoch asks, fetches, and when the next
/// paused partition resumes.
#[derive(Default)]
struct Wants {
    asks: Vec<(Round, i32)>,
    fetches: Vec<(Round, pb::FetchPartition)>,
    next_wake: Option<Instant>,
    /// The fetcher's [`Fetcher::generation`] the round was taken at.
    generation: u64,
}

/// [`FetcherTask::step`] on the fetcher's partitions, already locked.
fn step_in(
    partitions: &mut HashMap<TopicPartition, FetchState>,
    r: &Round,
    event: Event,
    now: Instant,
) -> Option<Effect> {
    let s = partitions.get_mut(&r.tp)?;
    if !Arc::ptr_eq(&s.partition, &r.partition) || s.machine.leader_epoch() != r.leader_epoch {
        return None;
    }
    Some(s.machine.on_event(event, now.into_std()))
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
            let wants = self.poll();
            if wants.asks.is_empty() && wants.fetches.is_empty() {
                if wants.next_wake.is_none() {
                    // No partitions left: stop, unless one was added meanwhile.
                    let mut fetchers = self.manager.fetchers.lock();
                    if self.fetcher.partitions.lock().is_empty() {
                        fetchers.remove(&self.key);
                        break;
                    }
                }
                // Paused or fenced partitions only (or one just added: its
                // notification is already stored).
                self.idle_until(wants.next_wake).await;
                continue;
            }
            let Some(conn) = self.connection().await else {
                self.manager.metrics.fetcher_failure(leader);
                let backoff =
                    Instant::now() + Duration::from_millis(self.config().replica_fetch_backoff_ms);
                self.idle_until(Some(backoff)).await;
                continue;
            };
            // Truncation first: a partition fetches only once it agrees with the
            // leader on where their logs diverge.
            if !wants.asks.is_empty() {
                self.truncate(&conn, wants.asks).await;
                continue;
            }
            // A partition waiting out a pause (or a throttle) is due before an
            // idle wait would end: the fetch waits as configured.
            let none_paused = wants.next_wake.is_none();
            self.fetch(&conn, wants.fetches, wants.generation, none_paused)
                .await;
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

    /// Asks every partition's machine what it needs now.
    fn poll(&self) -> Wants {
        let (rounds, generation) = {
            let partitions = self.fetcher.partitions.lock();
            let rounds: Vec<Round> = partitions
                .iter()
                .map(|(tp, s)| Round {
                    tp: tp.clone(),
                    partition: s.partition.clone(),
                    leader_epoch: s.machine.leader_epoch(),
                    throttled: false,
                })
                .collect();
            (rounds, self.fetcher.generation.load(Ordering::Relaxed))
        };
        let now = Instant::now();
        // Read outside the fetcher's lock: no log lock is taken under it. A
        // failed log (an fsync failed: its end may hold what is not on disk) is
        // fetched for no more, so that its end never counts towards the
        // leader's high watermark; the broker stops.
        let positioned: Vec<(Round, LogPosition)> = rounds
            .into_iter()
            .filter_map(|r| {
                let log = r.partition.follower_poll_position()?;
                Some((r, log))
            })
            .collect();
        // Every machine asked under one lock, not one lock per partition.
        let asked: Vec<(Round, Option<Effect>)> = {
            let mut partitions = self.fetcher.partitions.lock();
            positioned
                .into_iter()
                .map(|(r, log)| {
                    let effect = step_in(&mut partitions, &r, Event::Poll(log), now);
                    (r, effect)
                })
                .collect()
        };
        let replica_fetch_max_bytes = self.config().replica_fetch_max_bytes as i32;
        let mut wants = Wants {
            generation,
            ..Wants::default()
        };
        for (mut r, effect) in asked {
            match effect {
                Some(Effect::AskEpochEnd { epoch }) => wants.asks.push((r, epoch)),
                Some(Effect::Fetch {
                    offset,
                    last_fetched_epoch,
                    log_start_offset,
                }) => {
                    if let Some(quota) = self.throttle(&r.tp) {
                        // Left out until the throttle allows it again.
                        let wait = quota.wait(now);
                        if !wait.is_zero() {
                            let until = now + wait;
                            wants.next_wake = Some(wants.next_wake.map_or(until, |w| w.min(until)));
                            continue;
                        }
                        r.throttled = true;
                    }
                    let p = pb::FetchPartition {
                        partition: r.tp.partition,
                        current_leader_epoch: Some(r.leader_epoch),
                        fetch_offset: offset,
                        last_fetched_epoch,
                        log_start_offset,
                        partition_max_bytes: replica_fetch_max_bytes,
                    };
                    wants.fetches.push((r, p));
                }
                Some(Effect::PauseUntil(until)) => {
                    let until = Instant::from_std(until);
                    wants.next_wake = Some(wants.next_wake.map_or(until, |w| w.min(until)));
                }
                Some(other) => debug_assert_eq!(other, Effect::None, "poll of {}", r.tp),
                None => {}
            }
        }
        wants
    }

    /// The follower throttle, if this broker's replication of `tp` is throttled.
    fn throttle(&self, tp: &TopicPartition) -> Option<&ReplicationQuota> {
        let quota = self.manager.follower_quota.as_ref()?;
        self.manager
            .metadata
            .is_throttled_replica(&tp.topic, tp.partition, self.config().node_id)
            .then_some(quota)
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

    /// Feeds one event to the partition's machine, if the machine is still the one
    /// this round was for (not removed, nor replaced for another leader epoch while
    /// the round was in flight); `None` otherwise.
    fn step(&self, r: &Round, event: Event) -> Option<Effect> {
        step_in(
            &mut self.fetcher.partitions.lock(),
            r,
            event,
            Instant::now(),
        )
    }

    /// Executes the effects an event leads to, feeding each outcome back, until the
    /// machine has nothing more to do in this round. `data` is the partition's part
    /// of the fetch response the event came from, if any.
    async fn drive(
        &mut self,
        conn: &Connection,
        r: &Round,
        event: Event,
        data: Option<&pb::PartitionData>,
    ) {
        let mut next = self.step(r, event);
        while let Some(effect) = next {
            let event = match effect {
                Effect::None | Effect::PauseUntil(_) => return,
                Effect::Append => {
                    let Some(data) = data else {
                        debug_assert!(false, "append without a fetch response");
                        return;
                    };
                    let result = r.partition.append_as_follower(
                        &data.records,
                        data.high_watermark,
                        r.leader_epoch,
                        wall_clock_ms(),
                    );
                    match result {
                        Ok(_) => {
                            if r.throttled {
                                self.record_throttled(data.records.len());
                            }
                            if let Some(tell) = self.manager.on_append.get() {
                                (tell.0)(&r.tp);
                            }
                        }
                        Err(code) => {
                            tracing::warn!(partition = %r.tp, error = %code, "follower append failed");
                        }
                    }
                    Event::Appended {
                        result,
                        leader_high_watermark: data.high_watermark,
                    }
                }
                Effect::TruncateTo {
                    offset,
                    leader,
                    cause,
                } => Event::Truncated(self.truncate_to(r, offset, leader, cause)),
                Effect::TruncateFullyAndStartAt { offset } => Event::Truncated(
                    r.partition
                        .truncate_fully_and_start_at(offset, r.leader_epoch)
                        .inspect_err(|code| {
                            tracing::debug!(partition = %r.tp, error = %code, "truncation refused");
                        }),
                ),
                Effect::AskLogStart => match self.leader_log_start(conn, r).await {
                    Ok(leader_log_start) => Event::LogStart {
                        leader_log_start,
                        log_end_offset: r.partition.follower_fetch_position().log_end_offset,
                    },
                    Err(code) => Event::Failed(code),
                },
                Effect::AskEpochEnd { .. } | Effect::Fetch { .. } => {
                    debug_assert!(false, "{effect:?} outside a poll");
                    return;
                }
            };
            next = self.step(r, event);
        }
    }

    /// Counts `bytes` a throttled partition appended against the follower throttle.
    fn record_throttled(&self, bytes: usize) {
        if let Some(quota) = &self.manager.follower_quota {
            quota.record(bytes, Instant::now());
            self.manager
                .metrics
                .throttled_replication_bytes(ThrottleSide::Follower, bytes);
        }
    }

    /// Truncates as the leader's answer (or a fetch's diverging epoch) requires,
    /// and logs the truncation with its reason.
    fn truncate_to(
        &self,
        r: &Round,
        offset: i64,
        leader: EpochEndOffset,
        cause: TruncationCause,
    ) -> Result<(), ErrorCode> {
        let p = &r.partition;
        let leo = p.follower_fetch_position().log_end_offset;
        match p.truncate_to(offset, r.leader_epoch) {
            Ok(new_leo) => {
                if new_leo < leo {
                    // The one event per truncation (the partition logs it at debug).
                    let (reason, asked_epoch) = match cause {
                        TruncationCause::OffsetsForLeaderEpoch { asked_epoch } => {
                            ("OffsetsForLeaderEpoch", Some(asked_epoch))
                        }
                        TruncationCause::DivergingEpoch => {
                            ("diverging epoch in a fetch response", None)
                        }
                    };
                    tracing::info!(
                        topic = %r.tp.topic, partition = r.tp.partition, reason, asked_epoch = ?asked_epoch,
                        leader = self.fetcher.leader_id, leader_epoch = leader.epoch,
                        leader_end_offset = leader.end_offset, high_watermark = p.high_watermark(),
                        from = leo, to = new_leo, truncated_offsets = leo - new_leo, "truncation"
                    );
                }
                Ok(())
            }
            Err(code) => {
                tracing::debug!(partition = %r.tp, error = %code, "truncation refused");
                Err(code)
            }
        }
    }

    /// This replica's log as the truncation decision needs it, for the epoch the
    /// leader answered with.
    fn local_log(r: &Round, leader: EpochEndOffset) -> LocalLog {
        let p = &r.partition;
        LocalLog {
            log_end_offset: p.follower_fetch_position().log_end_offset,
            high_watermark: p.high_watermark(),
            epoch_end: p.local_end_offset_for_epoch(leader.epoch),
        }
    }

    /// One round of epoch-based truncation for the partitions that need it.
    async fn truncate(&mut self, conn: &Connection, asks: Vec<(Round, i32)>) {
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
                    self.drive(conn, r, Event::Failed(ErrorCode::NetworkException), None)
                        .await;
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
            let event = match answers.remove(&(r.tp.topic.to_string(), r.tp.partition)) {
                None => Event::Failed(ErrorCode::NetworkException),
                Some(a) => match ErrorCode::from_wire(a.error_code) {
                    ErrorCode::None => {
                        let leader = EpochEndOffset {
                            epoch: a.leader_epoch,
                            end_offset: a.end_offset,
                        };
                        Event::EpochEnd {
                            asked_epoch,
                            leader,
                            local: Self::local_log(&r, leader),
                        }
                    }
                    code => {
                        tracing::debug!(partition = %r.tp, error = %code, "OffsetsForLeaderEpoch failed");
                        Event::Failed(code)
                    }
                },
            };
            self.drive(conn, &r, event, None).await;
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

    /// The smallest `replica.lag.time.max.ms` of the topics of `fetches`.
    fn min_lag_time(&self, fetches: &[(Round, pb::FetchPartition)]) -> Duration {
        let broker_default = self.config().replica_lag_time_max_ms;
        let mut min = broker_default;
        let mut last: Option<&Arc<str>> = None;
        for (r, _) in fetches {
            // A fetcher's partitions come topic by topic, mostly.
            if last.is_some_and(|t| Arc::ptr_eq(t, &r.tp.topic) || **t == *r.tp.topic) {
                continue;
            }
            last = Some(&r.tp.topic);
            let lag = self
                .manager
                .metadata
                .replica_lag_time_override_ms(&r.tp.topic)
                .unwrap_or(broker_default);
            min = min.min(lag);
        }
        Duration::from_millis(min)
    }

    /// One fetch of `fetches`, the round taken at the fetcher's `generation`;
    /// `none_paused`: no partition of the fetcher waits out a pause.
    async fn fetch(
        &mut self,
        conn: &Connection,
        fetches: Vec<(Round, pb::FetchPartition)>,
        generation: u64,
        none_paused: bool,
    ) {
        let config = self.manager.config.clone();
        let configured = Duration::from_millis(config.replica_fetch_wait_max_ms);
        let idle = std::mem::take(&mut self.idle) && none_paused;
        let min_lag = if idle {
            self.min_lag_time(&fetches)
        } else {
            Duration::MAX
        };
        let wait = fetch_wait(configured, idle, min_lag);
        let wanted = fetches.iter().map(|(r, p)| (r.tp.clone(), *p)).collect();
        let (session_id, session_epoch, topics, forgotten) = self.session.build(wanted);
        let incremental = session_epoch > crate::replica::fetch_session::INITIAL_EPOCH;
        let req = pb::FetchRequest {
            replica_id: config.node_id,
            replica_epoch: self.manager.broker_epoch.load(Ordering::Acquire),
            max_wait_ms: wait.as_millis().try_into().unwrap_or(i32::MAX),
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
        let fetcher = self.fetcher.clone();
        let send = self.send(conn, pb::request::Body::Fetch(req), wait + REQUEST_TIMEOUT);
        let answer = if wait > configured {
            // A partition that joins (or leaves) the fetcher must not wait for an
            // idle wait to end: the fetch is given up, and the next round
            // carries it.
            unless_changed(send, &fetcher, generation).await
        } else {
            Some(send.await)
        };
        let Some(answer) = answer else {
            tracing::debug!(
                leader = self.fetcher.leader_id,
                "the fetcher's partitions changed: an idle fetch is given up"
            );
            self.session.abandon();
            return;
        };
        let failure = match answer {
            Some(pb::response::Body::Fetch(r)) if r.error_code == ErrorCode::None as i32 => {
                // Nothing to tell in an incremental answer: the fetcher is idle.
                self.idle = incremental && r.responses.iter().all(|t| t.partitions.is_empty());
                self.on_fetch_response(conn, fetches, r).await;
                return;
            }
            Some(pb::response::Body::Fetch(r)) => ErrorCode::from_wire(r.error_code),
            _ => ErrorCode::NetworkException,
        };
        self.manager.metrics.fetcher_failure(self.fetcher.leader_id);
        // Whatever went wrong, the next fetch is a full one; the machines decide
        // whether it waits.
        self.session.reset();
        for (r, _) in &fetches {
            self.drive(conn, r, Event::Failed(failure), None).await;
        }
    }

    async fn on_fetch_response(
        &mut self,
        conn: &Connection,
        fetches: Vec<(Round, pb::FetchPartition)>,
        response: pb::FetchResponse,
    ) {
        self.session.on_response(response.session_id);
        let mut by_tp: HashMap<TopicPartition, pb::PartitionData> = HashMap::new();
        for t in response.responses {
            let topic: Arc<str> = Arc::from(t.topic);
            for p in t.partitions {
                let tp = TopicPartition {
                    topic: topic.clone(),
                    partition: p.partition,
                };
                by_tp.insert(tp, p);
            }
        }
        for (r, sent) in fetches {
            if by_tp.is_empty() {
                // The rest were left out of an incremental response: nothing
                // new for them (an idle round ends here at once).
                break;
            }
            // Left out of an incremental response: nothing new for it.
            let Some(data) = by_tp.remove(&r.tp) else {
                continue;
            };
            let answer = match ErrorCode::from_wire(data.error_code) {
                ErrorCode::None => match data.diverging_epoch {
                    Some(d) => {
                        let leader = EpochEndOffset {
                            epoch: d.epoch,
                            end_offset: d.end_offset,
                        };
                        FetchAnswer::DivergingEpoch {
                            leader,
                            local: Self::local_log(&r, leader),
                        }
                    }
                    None => FetchAnswer::Records,
                },
                code => {
                    tracing::debug!(partition = %r.tp, fetch_offset = sent.fetch_offset, error = %code, "fetch error");
                    FetchAnswer::Error(code)
                }
            };
            self.drive(conn, &r, Event::Fetched(answer), Some(&data))
                .await;
        }
    }

    /// Where the leader's log starts (ListOffsets EARLIEST), after our fetch
    /// offset was out of its range.
    async fn leader_log_start(&mut self, conn: &Connection, r: &Round) -> Result<i64, ErrorCode> {
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
        let answer = self
            .send(conn, pb::request::Body::ListOffsets(req), REQUEST_TIMEOUT)
            .await;
        log_start_answer(answer, r.tp.partition)
    }
}

/// The leader's log start from its ListOffsets answer for `partition`, or the
/// error the follower machine is told: the partition's own code (a
/// `FENCED_LEADER_EPOCH` ends our epoch's fetching), or `NETWORK_EXCEPTION`
/// when there is no answer for it.
fn log_start_answer(answer: Option<pb::response::Body>, partition: i32) -> Result<i64, ErrorCode> {
    let Some(pb::response::Body::ListOffsets(resp)) = answer else {
        return Err(ErrorCode::NetworkException);
    };
    let p = resp
        .topics
        .into_iter()
        .flat_map(|t| t.partitions)
        .find(|p| p.partition == partition)
        .ok_or(ErrorCode::NetworkException)?;
    match ErrorCode::from_wire(p.error_code) {
        ErrorCode::None => Ok(p.offset),
        code => Err(code),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

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
    fn a_list_offsets_answer_gives_the_log_start_or_the_partitions_own_error() {
        let answer = |partition: i32, code: ErrorCode| {
            Some(pb::response::Body::ListOffsets(pb::ListOffsetsResponse {
                topics: vec![pb::ListOffsetsTopicResponse {
                    name: "t".into(),
                    partitions: vec![pb::ListOffsetsPartitionResponse {
                        partition,
                        error_code: code as i32,
                        offset: 42,
                        ..Default::default()
                    }],
                }],
            }))
        };
        let cases = [
            (answer(0, ErrorCode::None), Ok(42)),
            // Our epoch is over: the follower machine stops, it does not back off.
            (
                answer(0, ErrorCode::FencedLeaderEpoch),
                Err(ErrorCode::FencedLeaderEpoch),
            ),
            (
                answer(0, ErrorCode::NotLeaderOrFollower),
                Err(ErrorCode::NotLeaderOrFollower),
            ),
            // Another partition's answer, another API's, or none at all.
            (answer(1, ErrorCode::None), Err(ErrorCode::NetworkException)),
            (
                Some(pb::response::Body::Fetch(Default::default())),
                Err(ErrorCode::NetworkException),
            ),
            (None, Err(ErrorCode::NetworkException)),
        ];
        for (i, (answer, expected)) in cases.into_iter().enumerate() {
            assert_eq!(log_start_answer(answer, 0), expected, "case {i}");
        }
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
        b.on_response(42);
        assert_eq!(b.sent.len(), 1, "the session forgot partition 1");
        // An idle round sends nothing and leaves the session as it was.
        let (_, epoch, topics, forgotten) = b.build([p(0, 9)].into_iter().collect());
        assert_eq!(epoch, 3);
        assert!(topics.is_empty() && forgotten.is_empty());
        b.on_response(42);
        assert_eq!(
            b.sent
                .get(&TopicPartition::new("t", 0))
                .map(|p| p.fetch_offset),
            Some(9)
        );
        assert_eq!(b.sent.len(), 1);
        // After an error, a full fetch again.
        b.reset();
        let (id, epoch, topics, _) = b.build([p(0, 9)].into_iter().collect());
        assert_eq!((id, epoch, sent_partitions(&topics)), (0, 0, vec![(0, 9)]));
        // A declined session keeps full fetches.
        b.on_response(0);
        let (id, epoch, topics, _) = b.build([p(0, 9)].into_iter().collect());
        assert_eq!((id, epoch, sent_partitions(&topics)), (0, 0, vec![(0, 9)]));
    }

    #[test]
    fn an_abandoned_session_is_closed_by_the_next_fetch_then_a_new_one_starts() {
        let mut b = FetchSessionBuilder::default();
        b.build([p(0, 5), p(1, 7)].into_iter().collect());
        b.on_response(42);
        // An incremental fetch in flight is given up (a partition joined).
        b.build([p(0, 5), p(1, 7)].into_iter().collect());
        b.abandon();
        // The next fetch is full, sessionless, and closes session 42.
        let (id, epoch, topics, forgotten) =
            b.build([p(0, 5), p(1, 7), p(2, 0)].into_iter().collect());
        assert_eq!(
            (id, epoch),
            (42, crate::replica::fetch_session::FINAL_EPOCH)
        );
        assert_eq!(sent_partitions(&topics), vec![(0, 5), (1, 7), (2, 0)]);
        assert!(forgotten.is_empty());
        // Given up again before its answer: still session 42 to close.
        b.abandon();
        let (id, epoch, _, _) = b.build([p(0, 5)].into_iter().collect());
        assert_eq!(
            (id, epoch),
            (42, crate::replica::fetch_session::FINAL_EPOCH)
        );
        // Answered (sessionless: id 0): the next asks for a new session.
        b.on_response(0);
        let (id, epoch, topics, _) = b.build([p(0, 5)].into_iter().collect());
        assert_eq!(
            (id, epoch, sent_partitions(&topics)),
            (
                0,
                crate::replica::fetch_session::INITIAL_EPOCH,
                vec![(0, 5)]
            )
        );
        b.on_response(43);
        let (id, epoch, topics, _) = b.build([p(0, 5)].into_iter().collect());
        assert_eq!((id, epoch, topics.len()), (43, 1, 0));
        // Abandoning a fetch that was to open a session closes nothing.
        b.reset();
        b.build([p(0, 5)].into_iter().collect());
        b.abandon();
        let (id, epoch, _, _) = b.build([p(0, 5)].into_iter().collect());
        assert_eq!(
            (id, epoch),
            (0, crate::replica::fetch_session::INITIAL_EPOCH)
        );
    }

    #[test]
    fn only_an_idle_fetcher_waits_longer_and_never_near_the_lag_time() {
        let ms = Duration::from_millis;
        // (configured wait, idle, smallest lag time of the fetcher's topics) -> wait
        let table = [
            // Not idle: as configured, whatever the lag time.
            (500, false, 30_000, 500),
            (500, false, 600_000, 500),
            // Idle, Kafka's defaults: a sixth of the lag time, 5 s.
            (500, true, 30_000, 5_000),
            // Idle: at most 5 s, however long the lag time.
            (500, true, 600_000, 5_000),
            // Idle under a short lag time: a sixth of it...
            (500, true, 12_000, 2_000),
            // ...but never less than configured.
            (500, true, 1_000, 500),
            (500, true, 100, 500),
            // A configured wait above the idle cap stays.
            (8_000, true, 60_000, 8_000),
        ];
        for (configured, idle, lag, want) in table {
            assert_eq!(
                fetch_wait(ms(configured), idle, ms(lag)),
                ms(want),
                "configured {configured} ms, idle {idle}, lag {lag} ms"
            );
        }
        // Above the configured wait, the idle wait is always well under half
        // the lag time (a leader checks each follower every half of it).
        for lag in (1..=600_000u64).step_by(997) {
            let wait = fetch_wait(ms(500), true, ms(lag));
            assert!(
                wait == ms(500) || wait * 3 <= ms(lag) / 2,
                "lag {lag} ms: {wait:?}"
            );
        }
    }
}

#[cfg(test)]
mod throttle_tests {
    use super::*;
    use crate::topic_config::TopicConfig;

    /// Broker 1 follows leader 2 for `t-0` (a reassignment adding broker 1, not in
    /// the ISR yet) and `t-1` (in the ISR), with a follower throttle of 1000 B/s.
    fn follower(dir: &std::path::Path) -> FetcherTask {
        let config = Arc::new(
            BrokerConfig::parse(&format!(
                "node_id = 1\nprocess_roles = \"broker,controller\"\n\
                 controller_quorum_voters = \"1@127.0.0.1:9092\"\nlog_dirs = {:?}\n\
                 follower_replication_throttled_rate = 1000\n",
                dir.display().to_string()
            ))
            .expect("broker config"),
        );
        let metadata = Arc::new(MetadataCache::new("test"));
        let state = |partition, isr: Vec<i32>, adding: Vec<i32>| pb::PartitionState {
            topic: "t".into(),
            partition,
            leader: 2,
            leader_epoch: 1,
            isr,
            partition_epoch: 1,
            replicas: vec![2, 3, 1],
            adding_replicas: adding,
            ..Default::default()
        };
        let _ = metadata.apply(&pb::LeaderAndIsrRequest {
            controller_id: 1,
            controller_epoch: 1,
            topics: vec![pb::TopicState {
                name: "t".into(),
                ..Default::default()
            }],
            partition_states: vec![
                state(0, vec![2, 3], vec![1]),
                state(1, vec![2, 3, 1], vec![]),
            ],
            ..Default::default()
        });
        let manager = Arc::new(FetcherManager::new(
            config.clone(),
            metadata,
            Arc::new(crate::net::Tcp),
            Arc::new(AtomicI64::new(7)),
            Arc::new(BrokerMetrics::new()),
            CancellationToken::new(),
        ));
        let fetcher = Arc::new(Fetcher {
            leader_id: 2,
            partitions: Mutex::new(HashMap::new()),
            generation: AtomicU64::new(0),
            changed: Notify::new(),
        });
        for index in [0, 1] {
            let tp = TopicPartition::new("t", index);
            let topic_config = TopicConfig::resolve(&config, "t", &HashMap::new());
            let listener: crate::replica::partition::IsrListener = Arc::new(|_, _, _| {});
            let partition =
                Partition::open(dir, tp.clone(), 0, 1, topic_config, listener).expect("partition");
            let machine = FollowerState::new(1, true, retry_backoff(1000));
            fetcher.partitions.lock().insert(
                tp,
                FetchState {
                    partition: Arc::new(partition),
                    machine,
                },
            );
        }
        FetcherTask {
            manager,
            fetcher,
            key: (2, 0),
            connection: None,
            session: FetchSessionBuilder::default(),
            idle: false,
        }
    }

    fn fetched(wants: &Wants) -> Vec<(i32, bool)> {
        let mut v: Vec<(i32, bool)> = wants
            .fetches
            .iter()
            .map(|(r, _)| (r.tp.partition, r.throttled))
            .collect();
        v.sort();
        v
    }

    #[tokio::test(start_paused = true)]
    async fn an_idle_fetch_is_given_up_when_a_partition_leaves_or_joins_and_only_then() {
        let dir = tempfile::tempdir().unwrap();
        let task = follower(dir.path());
        let fetcher = task.fetcher.clone();
        task.manager
            .fetchers
            .lock()
            .insert(task.key, fetcher.clone());
        let wait = |generation| {
            let fetcher = fetcher.clone();
            tokio::spawn(async move {
                let answer = tokio::time::sleep(Duration::from_secs(5));
                unless_changed(answer, &fetcher, generation).await
            })
        };
        // A notification from before the round (stored while nothing waited)
        // gives nothing up: the answer is awaited.
        let generation = task.poll().generation;
        fetcher.changed.notify_one();
        let started = Instant::now();
        assert_eq!(wait(generation).await.unwrap(), Some(()));
        assert_eq!(started.elapsed(), Duration::from_secs(5));
        // A partition leaves the fetcher: the wait is given up at once.
        let started = Instant::now();
        let waiting = wait(generation);
        tokio::task::yield_now().await;
        let tp = TopicPartition::new("t", 1);
        let partition = fetcher.partitions.lock()[&tp].partition.clone();
        task.manager.remove_partition(&tp);
        assert_eq!(waiting.await.unwrap(), None);
        assert_eq!(started.elapsed(), Duration::ZERO);
        // One joins: the same.
        let generation = task.poll().generation;
        let waiting = wait(generation);
        tokio::task::yield_now().await;
        task.manager.add_partition(partition, 2, 1);
        assert_eq!(waiting.await.unwrap(), None);
        assert_eq!(started.elapsed(), Duration::ZERO);
        assert_ne!(task.poll().generation, generation);
        // A change before the wait starts counts too.
        let waiting = wait(generation);
        assert_eq!(waiting.await.unwrap(), None);
    }

    #[tokio::test(start_paused = true)]
    async fn an_idle_wait_follows_the_shortest_lag_time_of_the_fetched_topics() {
        let dir = tempfile::tempdir().unwrap();
        let task = follower(dir.path());
        let wants = task.poll();
        assert_eq!(task.min_lag_time(&wants.fetches), Duration::from_secs(30));
        // The topic's own replica.lag.time.max.ms counts.
        let _ = task.manager.metadata.apply(&pb::LeaderAndIsrRequest {
            controller_id: 1,
            controller_epoch: 1,
            metadata_offset: 1,
            topics: vec![pb::TopicState {
                name: "t".into(),
                configs: [(
                    syncline_controller::REPLICA_LAG_TIME_MAX_MS.to_string(),
                    "6000".to_string(),
                )]
                .into(),
                ..Default::default()
            }],
            ..Default::default()
        });
        assert_eq!(task.min_lag_time(&wants.fetches), Duration::from_secs(6));
        let configured = Duration::from_millis(500);
        assert_eq!(
            fetch_wait(configured, true, task.min_lag_time(&wants.fetches)),
            Duration::from_secs(1)
        );
    }

    #[tokio::test(start_paused = true)]
    async fn a_throttled_follower_leaves_out_only_its_joining_partition_until_the_bucket_refills() {
        let dir = tempfile::tempdir().unwrap();
        let task = follower(dir.path());
        // A full bucket: both are fetched, t-0 counted against the throttle.
        let wants = task.poll();
        assert_eq!(fetched(&wants), [(0, true), (1, false)]);
        assert_eq!(wants.next_wake, None);
        // t-0's fetch brought 2500 bytes: 1500 overdrawn, 1.5 s to wait.
        task.record_throttled(2500);
        let wants = task.poll();
        assert_eq!(
            fetched(&wants),
            [(1, false)],
            "the in-sync partition goes on"
        );
        let wake = wants.next_wake.expect("a wake-up for the held-back one");
        assert_eq!(wake - Instant::now(), Duration::from_millis(1501));
        tokio::time::advance(Duration::from_millis(1501)).await;
        assert_eq!(fetched(&task.poll()), [(0, true), (1, false)]);
    }
}
