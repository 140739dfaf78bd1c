//! The replica manager: the partitions this broker hosts, and the data-plane
//! requests on them (Produce, Fetch, ListOffsets, OffsetsForLeaderEpoch), role
//! changes from the controller (LeaderAndIsr), and the two purgatories.

use std::collections::{BTreeSet, HashMap};
use std::sync::atomic::{AtomicI64, Ordering};
use std::sync::Arc;
use std::time::Duration;

use parking_lot::RwLock;
use syncline_proto::{batch, pb, ErrorCode};
use syncline_purgatory::{Purgatory, Watched};
use tokio::sync::mpsc;
use tokio::time::Instant;

use crate::config::BrokerConfig;
#[cfg(feature = "legacy-truncation")]
use crate::config::TruncationRule;
use crate::control::metadata_cache::MetadataCache;
use crate::metrics::BrokerMetrics;
use crate::replica::delayed::{
    read_partitions, DelayedFetch, DelayedProduce, FetchParams, FetchPartitionStatus,
    ProducePartitionStatus, ReadSummary, Waiting,
};
use crate::replica::fetch_session::FetchSessionCache;
use crate::replica::fetcher::FetcherManager;
#[cfg(feature = "legacy-truncation")]
use crate::replica::partition::RoleChange;
use crate::replica::partition::{
    AlterPartitionResult, Effects, FetcherChange, FollowerFetch, IsrListener, LeaderAppend,
    Partition, TopicPartition, Wake,
};
use crate::replica::quota::ReplicationQuota;
use crate::responder::Responder;
use crate::topic_config::TopicConfig;
use syncline_replication::announcement;
use syncline_replication::fetch::{self, FetchFrom};
use syncline_replication::partition::{IsrChangeKind, IsrProposal};
use syncline_replication::produce::{self, AckWhen, Acks};
use syncline_replication::topic::{self, TopicId};

/// How often the partitions' ISR shrink checks are polled.
const SHRINK_POLL: Duration = Duration::from_millis(100);

/// An ISR change for the AlterPartition sender.
#[derive(Debug, Clone)]
pub(crate) struct IsrRequest {
    pub tp: TopicPartition,
    pub proposal: IsrProposal,
}

/// A refused append: the code, and the partition when known (for the leader hint).
type AppendError = (ErrorCode, Option<Arc<Partition>>);

/// One topic's hosted partitions, by index.
type TopicPartitions = HashMap<i32, Arc<Partition>>;

/// Hosted partitions by topic, then index (looked up by `&str` without allocating).
type PartitionMap = HashMap<Arc<str>, TopicPartitions>;

/// See the module docs.
#[derive(Debug)]
pub struct ReplicaManager {
    config: Arc<BrokerConfig>,
    local_id: i32,
    broker_epoch: Arc<AtomicI64>,
    partitions: RwLock<PartitionMap>,
    fetch_purgatory: Arc<Purgatory<TopicPartition, Arc<DelayedFetch>>>,
    produce_purgatory: Arc<Purgatory<TopicPartition, Arc<DelayedProduce>>>,
    metadata: Arc<MetadataCache>,
    fetch_sessions: Arc<FetchSessionCache>,
    fetchers: Arc<FetcherManager>,
    isr_requests: mpsc::UnboundedSender<IsrRequest>,
    metrics: Arc<BrokerMetrics>,
    /// `leader_replication_throttled_rate`, when set.
    leader_quota: Option<Arc<ReplicationQuota>>,
    /// A replica whose log could not be opened for an I/O error, and why: the
    /// broker must stop (see [`ReplicaManager::flush_due`]).
    open_failure: parking_lot::Mutex<Option<(TopicPartition, String)>>,
    /// The leaders' next ISR shrink checks, earliest first: a tick runs the due
    /// ones only, instead of visiting every hosted partition (thousands, nearly
    /// all of them not due: each checks every `replica.lag.time.max.ms / 2`).
    /// An entry may be stale (the partition stopped leading, or its check was
    /// re-paced): running a check that is not due does nothing, and a partition
    /// that no longer leads is not scheduled again.
    shrink_checks: parking_lot::Mutex<BTreeSet<(Instant, TopicPartition)>>,
    /// Told when a check is queued before every other: the timer that polls
    /// the queue sleeps until the earliest.
    shrink_check_earlier: tokio::sync::Notify,
    /// What the last flush walk saw (see [`ReplicaManager::flush_due`]).
    flush_walk: parking_lot::Mutex<FlushWalk>,
}

/// The last walk of [`ReplicaManager::flush_due`]: the log crate's attention
/// counter before it, and whether it met a log whose policy fsyncs by time or
/// count. With neither a move of the counter nor such a log, the next walk
/// would find nothing to flush and no failed log, and is skipped.
#[derive(Debug, Default)]
struct FlushWalk {
    attention: Option<u64>,
    some_log_flushes: bool,
}

impl FlushWalk {
    /// Whether a walk is needed now, the counter reading `attention`.
    #[must_use]
    fn needed(&self, attention: u64) -> bool {
        self.some_log_flushes || self.attention != Some(attention)
    }
}

use syncline_proto::wall_clock_ms;

impl ReplicaManager {
    pub(crate) fn new(
        config: Arc<BrokerConfig>,
        metadata: Arc<MetadataCache>,
        fetchers: Arc<FetcherManager>,
        broker_epoch: Arc<AtomicI64>,
        isr_requests: mpsc::UnboundedSender<IsrRequest>,
        metrics: Arc<BrokerMetrics>,
    ) -> ReplicaManager {
        let leader_quota = config
            .leader_replication_throttled_rate
            .map(|rate| Arc::new(ReplicationQuota::new(rate, Instant::now())));
        ReplicaManager {
            leader_quota,
            fetch_sessions: Arc::new(FetchSessionCache::new(
                config.max_incremental_fetch_session_cache_slots,
                config.max_incremental_fetch_session_partitions,
            )),
            local_id: config.node_id,
            config,
            broker_epoch,
            partitions: RwLock::new(HashMap::new()),
            fetch_purgatory: Arc::new(Purgatory::new("Fetch")),
            produce_purgatory: Arc::new(Purgatory::new("Produce")),
            metadata,
            fetchers,
            isr_requests,
            metrics,
            open_failure: parking_lot::Mutex::new(None),
            flush_walk: parking_lot::Mutex::default(),
            shrink_checks: parking_lot::Mutex::new(BTreeSet::new()),
            shrink_check_earlier: tokio::sync::Notify::new(),
        }
    }

    /// This broker's epoch (-1 until registered).
    pub fn broker_epoch(&self) -> i64 {
        self.broker_epoch.load(Ordering::Acquire)
    }

    /// The hosted replica of `topic`'s partition `partition`, if any.
    pub fn partition(&self, topic: &str, partition: i32) -> Option<Arc<Partition>> {
        self.partitions.read().get(topic)?.get(&partition).cloned()
    }

    /// Every hosted partition.
    pub fn all_partitions(&self) -> Vec<Arc<Partition>> {
        self.partitions
            .read()
            .values()
            .flat_map(|m| m.values().cloned())
            .collect()
    }

    /// Open incremental fetch sessions.
    pub fn fetch_session_count(&self) -> usize {
        self.fetch_sessions.len()
    }

    /// The ids of the open incremental fetch sessions, in no order.
    pub fn fetch_session_ids(&self) -> Vec<i32> {
        self.fetch_sessions.ids()
    }

    /// (fetch, produce) purgatory sizes.
    pub fn purgatory_sizes(&self) -> (usize, usize) {
        (
            self.fetch_purgatory.delayed(),
            self.produce_purgatory.delayed(),
        )
    }

    /// Something happened on `tp`: an append (`hw_advanced` false) wakes fetches
    /// waiting for data; an HW advance also wakes acks=all produces. A follower's
    /// appends (its HW may have moved) wake consumer fetches reading from it.
    pub(crate) fn wake(&self, tp: &TopicPartition, hw_advanced: bool) {
        self.fetch_purgatory.check_and_complete(tp);
        if hw_advanced {
            self.produce_purgatory.check_and_complete(tp);
        }
    }

    /// Executes the replica manager's share of a partition's effects (the
    /// partition executed its own under its lock): wake waiting operations, send the
    /// ISR change to the controller, start or stop fetching.
    fn execute(&self, partition: &Arc<Partition>, effects: Effects) {
        if let Some(proposal) = effects.alter_partition {
            self.propose_isr(partition, proposal);
        }
        match effects.fetcher {
            Some(FetcherChange::Follow {
                leader,
                leader_epoch,
            }) => self
                .fetchers
                .add_partition(partition.clone(), leader, leader_epoch),
            Some(FetcherChange::Stop) => self.fetchers.remove_partition(&partition.tp),
            None => {}
        }
        match effects.wake {
            Wake::Nobody => {}
            Wake::Fetches => self.wake(&partition.tp, false),
            Wake::FetchesAndProduces => self.wake(&partition.tp, true),
        }
    }

    // --- Produce ---

    pub(crate) fn handle_produce(&self, req: pb::ProduceRequest, mut responder: Responder) {
        let acks = Acks::from_wire(req.acks);
        let internal = responder.connection().internal;
        let now_ms = wall_clock_ms();
        let mut pending = Vec::new();
        let mut response = pb::ProduceResponse {
            topics: Vec::with_capacity(req.topics.len()),
            throttle_time_ms: 0,
        };
        for (ti, topic) in req.topics.iter().enumerate() {
            let mut out_topic = pb::ProduceTopicResponse {
                name: topic.name.clone(),
                partitions: Vec::with_capacity(topic.partitions.len()),
            };
            for (pi, p) in topic.partitions.iter().enumerate() {
                let mut out = pb::ProducePartitionResponse {
                    partition: p.partition,
                    base_offset: -1,
                    log_append_time_ms: -1,
                    log_start_offset: -1,
                    ..Default::default()
                };
                let result = acks
                    .and_then(|acks| produce::check_writable(&topic.name, internal).map(|()| acks))
                    .map_err(|code| (code, None))
                    .and_then(|acks| self.append_one(&topic.name, p, acks, now_ms));
                match result {
                    Ok((partition, append, effects)) => {
                        // Charged once the append is accepted (as Kafka records it).
                        responder.charge_quota(p.records.len());
                        if append.duplicate {
                            self.metrics.produce_duplicate();
                        }
                        out.base_offset = append.base_offset;
                        out.log_start_offset = append.log_start_offset;
                        if partition.log_append_time() {
                            out.log_append_time_ms = now_ms;
                        }
                        let rf = partition.replicas().len() as i32;
                        out.replication_factor = rf;
                        self.execute(&partition, effects);
                        if acks.map(Acks::ack_when) == Ok(AckWhen::Replicated) {
                            pending.push(ProducePartitionStatus {
                                topic_index: ti,
                                partition_index: pi,
                                partition,
                                required_offset: append.last_offset + 1,
                                append_epoch: append.leader_epoch,
                                replication_factor: rf,
                            });
                        } else {
                            out.acked_isr = vec![self.local_id];
                        }
                    }
                    Err((code, partition)) => {
                        if code == ErrorCode::OutOfOrderSequenceNumber {
                            self.metrics.produce_out_of_order();
                        }
                        out.error_code = code as i32;
                        out.error_message = code.name().to_string();
                        if let Some(p) = partition.filter(|_| code.is_leadership_error()) {
                            out.current_leader = Some(p.current_leader());
                        }
                    }
                }
                out_topic.partitions.push(out);
            }
            response.topics.push(out_topic);
        }
        if !Acks::answered(acks) {
            responder.no_response();
            return;
        }
        if pending.is_empty() {
            responder.send(pb::response::Body::Produce(response));
            return;
        }
        let timeout = produce::produce_timeout(req.timeout_ms);
        let keys: Vec<TopicPartition> = pending.iter().map(|p| p.partition.tp.clone()).collect();
        let conn = responder.connection().clone();
        let op = Arc::new(DelayedProduce::new(pending, response, responder));
        if let Watched::Waiting(handle) = self
            .produce_purgatory
            .try_complete_else_watch(op, timeout, &keys)
        {
            conn.track(Box::new(Waiting {
                purgatory: self.produce_purgatory.clone(),
                handle,
            }));
        }
    }

    /// Validates and appends one partition's batches. The error carries the
    /// partition, when known, for the leader hint in the answer.
    fn append_one(
        &self,
        topic: &str,
        p: &pb::ProducePartition,
        acks: Acks,
        now_ms: i64,
    ) -> Result<(Arc<Partition>, LeaderAppend, Effects), AppendError> {
        let partition = self
            .partition(topic, p.partition)
            .ok_or((ErrorCode::UnknownTopicOrPartition, None))?;
        if p.records.is_empty() {
            return Err((ErrorCode::CorruptMessage, Some(partition)));
        }
        for b in batch::split(&p.records) {
            let (_, bytes) = b.map_err(|e| ((&e).into(), Some(partition.clone())))?;
            if bytes.len() > self.config.message_max_bytes {
                return Err((ErrorCode::MessageTooLarge, Some(partition)));
            }
            if let Err(e) = batch::validate(bytes) {
                tracing::debug!(partition = %partition.tp, error = %e, "refusing produce");
                return Err(((&e).into(), Some(partition)));
            }
        }
        // A topic with its own compression.type stores batches in that codec.
        let records = match partition.compression() {
            None => p.records.clone(),
            Some(codec) => {
                let records = batch::recompress_all(&p.records, codec)
                    .map_err(|e| ((&e).into(), Some(partition.clone())))?;
                let too_large = batch::split(&records)
                    .any(|b| b.is_ok_and(|(_, bytes)| bytes.len() > self.config.message_max_bytes));
                if too_large {
                    return Err((ErrorCode::MessageTooLarge, Some(partition)));
                }
                records
            }
        };
        // message.timestamp.type=LogAppendTime: the leader's clock.
        let records = if partition.log_append_time() {
            batch::with_log_append_time(&records, now_ms)
                .map_err(|e| ((&e).into(), Some(partition.clone())))?
        } else {
            records
        };
        let (append, effects) = partition
            .append_as_leader(&records, acks, p.current_leader_epoch, now_ms)
            .map_err(|code| (code, Some(partition.clone())))?;
        self.metrics.bytes_in(p.records.len());
        Ok((partition, append, effects))
    }

    // --- Fetch ---

    /// Serves a fetch. `may_read`: the authorizer's topic filter of a
    /// consumer's fetch (applied to its session's partitions too).
    pub(crate) fn handle_fetch(
        &self,
        req: pb::FetchRequest,
        mut responder: Responder,
        may_read: Option<crate::authorizer::TopicFilter>,
    ) {
        let principal = responder.connection().principal();
        let (session, entries) = match self.fetch_sessions.begin(&req, &principal, Instant::now()) {
            Ok(resolved) => resolved,
            Err(code) => {
                responder.send(pb::response::Body::Fetch(pb::FetchResponse {
                    error_code: code as i32,
                    ..Default::default()
                }));
                return;
            }
        };
        let params = FetchParams {
            from: FetchFrom::from_wire(req.replica_id, req.replica_epoch, &req.rack_id),
            push_high_watermark: req.replica_id >= 0
                && self.config.replica_selector == crate::config::ReplicaSelector::RackAware,
            min_bytes: req.min_bytes.max(0) as u64,
            // Never more than the broker's cap, whatever the request asks.
            max_bytes: self.config.fetch_bytes_cap(req.max_bytes),
            zero_copy: responder.zero_copy(),
        };
        let is_follower = params.is_follower();
        let select_by_rack = params.from.follower_read()
            && self.config.replica_selector == crate::config::ReplicaSelector::RackAware;
        let mut response = pb::FetchResponse::default();
        let mut statuses = Vec::with_capacity(entries.len());
        let mut immediate_error = false;
        // A follower's session names every partition it follows here, twice a
        // second at idle: one read lock for all of them, and each topic's map
        // looked up once for its run of partitions.
        let hosted = self.partitions.read();
        let mut topic: Option<(Arc<str>, Option<&TopicPartitions>)> = None;
        // Each topic's place in the response: found in constant time, so
        // that a request naming many topics costs linear time, not quadratic.
        let mut topic_at: HashMap<Arc<str>, usize> = HashMap::new();
        for e in entries {
            let ti = match response.responses.last() {
                // A topic's partitions usually come in a run.
                Some(last) if *last.topic == *e.topic => response.responses.len() - 1,
                _ => *topic_at.entry(e.topic.clone()).or_insert_with(|| {
                    response.responses.push(pb::FetchableTopicResponse {
                        topic: e.topic.to_string(),
                        partitions: Vec::new(),
                    });
                    response.responses.len() - 1
                }),
            };
            let out_topic = &mut response.responses[ti];
            let mut out = pb::PartitionData {
                partition: e.partition,
                high_watermark: -1,
                last_stable_offset: -1,
                log_start_offset: -1,
                ..Default::default()
            };
            let denied = may_read.as_ref().is_some_and(|may| !may(&e.topic));
            let same_topic =
                |(name, _): &(Arc<str>, _)| Arc::ptr_eq(name, &e.topic) || **name == *e.topic;
            if !topic.as_ref().is_some_and(same_topic) {
                topic = Some((e.topic.clone(), hosted.get(&*e.topic)));
            }
            let found = topic
                .as_ref()
                .and_then(|(_, partitions)| (*partitions)?.get(&e.partition).cloned());
            match found {
                _ if denied => {
                    out.error_code = ErrorCode::TopicAuthorizationFailed as i32;
                    immediate_error = true;
                }
                None => {
                    out.error_code = ErrorCode::UnknownTopicOrPartition as i32;
                    immediate_error = true;
                }
                Some(_) if e.partition_max_bytes < 0 => {
                    out.error_code = ErrorCode::InvalidFetchSize as i32;
                    immediate_error = true;
                }
                Some(partition)
                    if select_by_rack
                        && partition
                            .preferred_read_replica(&req.rack_id, |id| {
                                self.metadata.broker_rack(id)
                            })
                            .inspect(|r| out.preferred_read_replica = Some(*r))
                            .is_some() =>
                {
                    // A replica in the consumer's rack serves it from now on.
                    out.high_watermark = partition.high_watermark();
                    out.last_stable_offset = out.high_watermark;
                    out.log_start_offset = partition.log_start_offset();
                }
                Some(partition) => statuses.push(FetchPartitionStatus {
                    topic_index: ti,
                    partition_index: out_topic.partitions.len(),
                    fetch_offset: e.fetch_offset,
                    current_leader_epoch: e.current_leader_epoch,
                    last_fetched_epoch: e.last_fetched_epoch,
                    partition_max_bytes: (e.partition_max_bytes as usize)
                        .min(self.config.fetch_max_bytes),
                    high_watermark_seen: -1,
                    throttle: self.leader_throttle(
                        is_follower,
                        &e.topic,
                        e.partition,
                        req.replica_id,
                    ),
                    partition,
                }),
            }
            out_topic.partitions.push(out);
        }
        drop(hosted);
        let template = response.clone();
        let mut read = read_partitions(&params, &statuses, &mut response);
        if params.push_high_watermark {
            for s in &mut statuses {
                s.high_watermark_seen =
                    response.responses[s.topic_index].partitions[s.partition_index].high_watermark;
            }
        }
        if let FetchFrom::Follower { id, epoch } = params.from {
            self.record_follower_progress(id, epoch, &statuses, &read);
        }
        let errors = immediate_error
            || response
                .responses
                .iter()
                .flat_map(|t| &t.partitions)
                .any(|p| p.error_code != ErrorCode::None as i32 || p.diverging_epoch.is_some());
        let max_wait = produce::fetch_wait(req.max_wait_ms);
        if fetch::answer_now(
            max_wait,
            read.bytes,
            params.min_bytes,
            errors || statuses.is_empty(),
        ) {
            // Counted out only if sent (a throttled consumer's are withheld).
            if responder.charge_fetch(&mut response, &mut read.regions) {
                read.count(&self.metrics);
            }
            self.fetch_sessions
                .finish(session, &mut response, &read.regions);
            responder.send_fetch(response, read.regions);
            return;
        }
        let keys: Vec<TopicPartition> = statuses.iter().map(|s| s.partition.tp.clone()).collect();
        let conn = responder.connection().clone();
        let op = Arc::new(DelayedFetch::new(
            params,
            statuses,
            template,
            responder,
            self.metrics.clone(),
            (self.fetch_sessions.clone(), session),
        ));
        if let Watched::Waiting(handle) = self
            .fetch_purgatory
            .try_complete_else_watch(op, max_wait, &keys)
        {
            conn.track(Box::new(Waiting {
                purgatory: self.fetch_purgatory.clone(),
                handle,
            }));
        }
    }

    /// The leader's throttle for `follower`'s fetch of the partition, if throttled.
    fn leader_throttle(
        &self,
        is_follower: bool,
        topic: &str,
        partition: i32,
        follower: i32,
    ) -> Option<Arc<ReplicationQuota>> {
        let quota = self.leader_quota.as_ref().filter(|_| is_follower)?;
        self.metadata
            .is_throttled_replica(topic, partition, follower)
            .then(|| quota.clone())
    }

    /// The leader records each follower partition's fetch offset (its LEO): this is
    /// the acknowledgement of everything below it. It is recorded against the leader
    /// epoch and LEO the partition was read under: a fetch read under an epoch that
    /// has ended since records nothing.
    fn record_follower_progress(
        &self,
        follower_id: i32,
        broker_epoch: Option<i64>,
        statuses: &[FetchPartitionStatus],
        read: &ReadSummary,
    ) {
        let now = Instant::now();
        let eligible = self.metadata.is_eligible(follower_id, broker_epoch);
        for (s, point) in statuses.iter().zip(&read.points) {
            let Some(point) = point else {
                continue;
            };
            let fetch = FollowerFetch {
                follower_id,
                broker_epoch,
                fetch_offset: s.fetch_offset,
                leader_leo: point.log_end_offset.max(s.fetch_offset),
                request_epoch: point.leader_epoch,
                eligible,
            };
            let effects = s.partition.record_follower_fetch(now, &fetch);
            self.execute(&s.partition, effects);
        }
    }

    fn propose_isr(&self, partition: &Arc<Partition>, proposal: IsrProposal) {
        let tp = &partition.tp;
        let kind = match proposal.kind {
            IsrChangeKind::Shrink => "shrink",
            IsrChangeKind::Expand => "expand",
        };
        for e in &proposal.replicas {
            // -1: never caught up under this leader.
            let ms = e.since_caught_up.map_or(-1, |d| d.as_millis() as i64);
            tracing::info!(
                topic = %tp.topic, partition = tp.partition, replica = e.broker_id,
                last_caught_up_ms_ago = ms, lag_offsets = e.lag,
                replica_lag_time_max_ms = self.lag_time_ms(tp),
                new_isr = ?proposal.new_isr, "isr {kind} proposed"
            );
        }
        let request = IsrRequest {
            tp: tp.clone(),
            proposal,
        };
        if let Err(mpsc::error::SendError(request)) = self.isr_requests.send(request) {
            // The AlterPartition sender is gone (shutting down): the proposal
            // stays undecided and is tried again after the pause.
            tracing::warn!(partition = %tp, "isr change not sent: the AlterPartition sender has stopped");
            self.on_isr_result(tp, &request.proposal, Err(ErrorCode::NetworkException));
        }
    }

    fn lag_time_ms(&self, tp: &TopicPartition) -> u64 {
        self.topic_config(&tp.topic)
            .replica_lag_time_max
            .as_millis() as u64
    }

    fn topic_config(&self, topic: &str) -> TopicConfig {
        TopicConfig::resolve(&self.config, topic, &self.metadata.topic_configs(topic))
    }

    /// Applies the controller's answer to an AlterPartition.
    pub(crate) fn on_isr_result(
        &self,
        tp: &TopicPartition,
        sent: &IsrProposal,
        result: AlterPartitionResult,
    ) {
        let Some(partition) = self.partition(&tp.topic, tp.partition) else {
            return;
        };
        if let Err(code) = &result {
            self.metrics.failed_isr_update();
            tracing::warn!(partition = %tp, error = %code, "isr update failed");
        }
        let now = Instant::now();
        let effects = partition.on_alter_partition_result(sent, result, now);
        self.execute(&partition, effects);
        // An undecided proposal is sent again at its own time.
        self.schedule_shrink_check(&partition, now);
    }

    /// The periodic ISR shrink check of the partitions this broker leads whose
    /// check is due (each runs at its own pace: see [`Partition::on_tick`]).
    pub(crate) fn maybe_shrink_isrs(&self) {
        let now = Instant::now();
        let due: Vec<TopicPartition> = {
            let mut checks = self.shrink_checks.lock();
            let mut due = Vec::new();
            while checks.first().is_some_and(|(at, _)| *at <= now) {
                due.extend(checks.pop_first().map(|(_, tp)| tp));
            }
            due
        };
        for tp in due {
            let Some(p) = self.partition(&tp.topic, tp.partition) else {
                continue;
            };
            let effects = p.on_tick(now);
            self.execute(&p, effects);
            self.schedule_shrink_check(&p, now);
        }
    }

    /// Queues `partition`'s next ISR shrink check, if it leads.
    fn schedule_shrink_check(&self, partition: &Partition, now: Instant) {
        let Some(at) = partition.next_shrink_check(now) else {
            return;
        };
        let mut checks = self.shrink_checks.lock();
        let earliest = checks.first().is_none_or(|(first, _)| at < *first);
        checks.insert((at, partition.tp.clone()));
        drop(checks);
        if earliest {
            self.shrink_check_earlier.notify_one();
        }
    }

    /// When to poll the shrink checks next, the last poll having been at
    /// `last_poll`: once the earliest is due, but not sooner than
    /// [`ReplicaManager::shrink_check_interval`] after the last poll, so
    /// that checks due close together run together. None: none is queued.
    pub(crate) fn next_shrink_poll(&self, last_poll: Instant) -> Option<Instant> {
        let first = self.shrink_checks.lock().first().map(|(at, _)| *at)?;
        Some(first.max(last_poll + self.shrink_check_interval()))
    }

    /// Completes when a shrink check is queued before every other (see
    /// [`ReplicaManager::next_shrink_poll`]); one queued meanwhile counts.
    pub(crate) async fn shrink_check_queued_earlier(&self) {
        self.shrink_check_earlier.notified().await;
    }

    /// Leaders with a shrink check queued (stale entries included).
    #[cfg(test)]
    fn shrink_checks_queued(&self) -> usize {
        self.shrink_checks.lock().len()
    }

    /// How often at most to poll the partitions' shrink checks (each runs at its
    /// own pace).
    pub(crate) fn shrink_check_interval(&self) -> Duration {
        (Duration::from_millis(self.config.replica_lag_time_max_ms) / 2).min(SHRINK_POLL)
    }

    // --- ListOffsets / OffsetsForLeaderEpoch ---

    pub(crate) fn list_offsets(&self, req: &pb::ListOffsetsRequest) -> pb::ListOffsetsResponse {
        pb::ListOffsetsResponse {
            topics: req
                .topics
                .iter()
                .map(|t| pb::ListOffsetsTopicResponse {
                    name: t.name.clone(),
                    partitions: t
                        .partitions
                        .iter()
                        .map(|p| {
                            let mut out = pb::ListOffsetsPartitionResponse {
                                partition: p.partition,
                                timestamp: -1,
                                offset: -1,
                                leader_epoch: -1,
                                ..Default::default()
                            };
                            let result = self
                                .partition(&t.name, p.partition)
                                .ok_or(ErrorCode::UnknownTopicOrPartition)
                                .and_then(|part| {
                                    part.list_offset(
                                        p.timestamp,
                                        p.current_leader_epoch,
                                        req.replica_id >= 0,
                                    )
                                    .inspect_err(|code| {
                                        if code.is_leadership_error() {
                                            out.current_leader = Some(part.current_leader());
                                        }
                                    })
                                });
                            match result {
                                Ok(listed) => {
                                    out.offset = listed.offset;
                                    out.timestamp = listed.timestamp;
                                    out.leader_epoch = listed.leader_epoch;
                                }
                                Err(code) => out.error_code = code as i32,
                            }
                            out
                        })
                        .collect(),
                })
                .collect(),
        }
    }

    pub(crate) fn offsets_for_leader_epoch(
        &self,
        req: &pb::OffsetsForLeaderEpochRequest,
    ) -> pb::OffsetsForLeaderEpochResponse {
        pb::OffsetsForLeaderEpochResponse {
            topics: req
                .topics
                .iter()
                .map(|t| pb::OffsetForLeaderTopicResult {
                    topic: t.topic.clone(),
                    partitions: t
                        .partitions
                        .iter()
                        .map(|p| {
                            let result = self
                                .partition(&t.topic, p.partition)
                                .ok_or(ErrorCode::UnknownTopicOrPartition)
                                .and_then(|part| {
                                    part.end_offset_for_epoch(
                                        p.leader_epoch,
                                        p.current_leader_epoch,
                                        true,
                                    )
                                });
                            match result {
                                Ok(end) => pb::EpochEndOffsetResult {
                                    partition: p.partition,
                                    error_code: ErrorCode::None as i32,
                                    leader_epoch: end.epoch,
                                    end_offset: end.end_offset,
                                },
                                Err(code) => pb::EpochEndOffsetResult {
                                    partition: p.partition,
                                    error_code: code as i32,
                                    leader_epoch: -1,
                                    end_offset: -1,
                                },
                            }
                        })
                        .collect(),
                })
                .collect(),
        }
    }

    // --- DescribeTopics ---

    /// The cluster's view, with the leader's own view for partitions led here.
    pub(crate) fn describe_topics(&self, topics: &[String]) -> pb::DescribeTopicsResponse {
        let mut response = self.metadata.describe_topics(topics);
        let now = Instant::now();
        for t in &mut response.topics {
            for p in &mut t.partitions {
                if let Some(local) = self
                    .partition(&t.name, p.partition)
                    .and_then(|part| part.describe(now))
                {
                    // The reassignment in progress is the controller's to say.
                    *p = pb::PartitionDescription {
                        adding_replicas: std::mem::take(&mut p.adding_replicas),
                        removing_replicas: std::mem::take(&mut p.removing_replicas),
                        ..local
                    };
                }
            }
        }
        response
    }

    // --- role changes ---

    /// Applies a LeaderAndIsr request from the controller.
    pub(crate) fn apply_leader_and_isr(
        &self,
        req: &pb::LeaderAndIsrRequest,
    ) -> pb::LeaderAndIsrResponse {
        let serial = self.metadata.lock_for_update();
        let refuse = |code: ErrorCode| pb::LeaderAndIsrResponse {
            error_code: code as i32,
            partition_errors: vec![],
        };
        let broker_epoch = self.broker_epoch();
        if let Err(code) = announcement::check_request(
            req.controller_epoch,
            self.metadata.controller_epoch(),
            req.broker_epoch,
            broker_epoch,
        ) {
            return refuse(code);
        }
        // Names become directory names: a bad one is refused before any path.
        if let Err(why) = check_names(req) {
            tracing::warn!(error = %why, "refused a LeaderAndIsr naming an invalid partition");
            return refuse(ErrorCode::InvalidTopicException);
        }
        let applied = self.metadata.apply(req);
        tracing::debug!(
            full = req.full,
            announced = req.partition_states.len(),
            changed = applied.partitions.len(),
            metadata_offset = req.metadata_offset,
            "applying LeaderAndIsr"
        );
        for (topic, topic_id) in &applied.deleted {
            self.remove_topic(topic, *topic_id);
        }
        let now = Instant::now();
        let mut partition_errors = Vec::new();
        let mut touched: Vec<(String, i32)> = Vec::new();
        for ps in &applied.partitions {
            touched.push((ps.topic.clone(), ps.partition));
            if !ps.replicas.contains(&self.local_id) {
                self.remove_replica(&ps.topic, ps.partition);
                continue;
            }
            let config = self.topic_config(&ps.topic);
            let partition = match self.get_or_create(ps, &config) {
                Ok(p) => p,
                Err(code) => {
                    partition_errors.push(pb::LeaderAndIsrPartitionError {
                        topic: ps.topic.clone(),
                        partition: ps.partition,
                        error_code: code as i32,
                    });
                    continue;
                }
            };
            let effects = partition.apply_partition_state(ps, config, broker_epoch, now);
            self.schedule_shrink_check(&partition, now);
            #[cfg(feature = "legacy-truncation")]
            if effects.role == RoleChange::BecameFollower
                && self.config.truncation_rule == TruncationRule::HighWatermark
            {
                self.truncate_to_high_watermark(&partition, ps);
            }
            self.execute(&partition, effects);
        }
        // Config changes for partitions whose state did not change.
        for topic in &applied.changed_configs {
            let config = self.topic_config(topic);
            let hosted: Vec<Arc<Partition>> = self
                .partitions
                .read()
                .get(topic.as_str())
                .map(|m| m.values().cloned().collect())
                .unwrap_or_default();
            for p in hosted {
                if touched
                    .iter()
                    .any(|(t, i)| t == topic && *i == p.tp.partition)
                {
                    continue;
                }
                if let Some(ps) = self.metadata.partition_state(topic, p.tp.partition) {
                    let effects = p.apply_partition_state(&ps, config.clone(), broker_epoch, now);
                    self.schedule_shrink_check(&p, now);
                    self.execute(&p, effects.wake_all());
                }
            }
        }
        if req.full {
            self.delete_strays();
        }
        // Unlocked first: the woken waiters look again at once (see
        // `MetadataCache::have_leaders`).
        drop(serial);
        self.metadata.notify_applied();
        pb::LeaderAndIsrResponse {
            error_code: ErrorCode::None as i32,
            partition_errors,
        }
    }

    /// The legacy rule, as Kafka's makeFollowers did before KIP-101: a new
    /// follower truncates to its high watermark. Built only for the tests that show
    /// what leader epochs prevent.
    #[cfg(feature = "legacy-truncation")]
    fn truncate_to_high_watermark(&self, partition: &Partition, ps: &pb::PartitionState) {
        let hw = partition.high_watermark();
        let leo = partition.log_end_offset();
        match partition.truncate_to(hw, ps.leader_epoch) {
            // The one event of this truncation (the partition logs it at debug), as
            // the fetcher's are for the epoch rule.
            Ok(to) if to < leo => tracing::info!(
                topic = %partition.tp.topic, partition = partition.tp.partition,
                reason = "high watermark (legacy truncation rule)", leader = ps.leader,
                leader_epoch = ps.leader_epoch, high_watermark = hw, from = leo, to,
                truncated_offsets = leo - to, "truncation"
            ),
            Ok(_) => {}
            Err(code) => {
                tracing::warn!(partition = %partition.tp, error = %code, "truncation to the high watermark failed")
            }
        }
    }

    /// Drops the local replica of a partition this broker no longer hosts (moved
    /// off by a reassignment, or deleted): it stops fetching, waiting operations
    /// answer `NOT_LEADER_OR_FOLLOWER`, and its directory is deleted in the
    /// background. Nothing when it is not hosted here.
    fn remove_replica(&self, topic: &str, index: i32) {
        let removed = {
            let mut all = self.partitions.write();
            let removed = all.get_mut(topic).and_then(|m| m.remove(&index));
            if all.get(topic).is_some_and(HashMap::is_empty) {
                all.remove(topic);
            }
            removed
        };
        let Some(partition) = removed else {
            return;
        };
        let (effects, moved) = partition.remove();
        self.execute(&partition, effects);
        match moved {
            Ok(doomed) => {
                tracing::info!(partition = %partition.tp, dir = %doomed.display(), "replica removed; deleting its log");
                crate::replica::partition::delete_in_background(doomed);
            }
            Err(e) => {
                tracing::error!(partition = %partition.tp, error = %e, "cannot move the log of a removed replica aside")
            }
        }
    }

    /// After a full sync: deletes the logs in the log dir of partitions the
    /// metadata knows but no longer places here (moved off while this broker was
    /// down), so they cannot come back stale if a replica is placed here again.
    fn delete_strays(&self) {
        let entries = match std::fs::read_dir(&self.config.log_dir) {
            Ok(entries) => entries,
            Err(e) => {
                tracing::warn!(error = %e, "cannot list the log dir for stray replicas");
                return;
            }
        };
        for entry in entries.flatten() {
            let Some(tp) = entry
                .file_name()
                .to_str()
                .and_then(TopicPartition::from_dir_name)
            else {
                continue;
            };
            let placed_here = match self.metadata.partition_state(&tp.topic, tp.partition) {
                Some(ps) => {
                    ps.replicas.contains(&self.local_id)
                        && crate::replica::partition::read_topic_id(&entry.path())
                            .is_none_or(|id| same_topic_id(id, ps.topic_id))
                }
                // A topic the image does not have (deleted while this broker was
                // down); a partition it does not have yet is kept.
                None => self.metadata.topic_id(&tp.topic).is_some(),
            };
            let stray = self.partition(&tp.topic, tp.partition).is_none() && !placed_here;
            if !stray {
                continue;
            }
            match crate::replica::partition::move_aside(&entry.path()) {
                Ok(doomed) => {
                    tracing::info!(partition = %tp, "deleting the log of a replica no longer placed here");
                    crate::replica::partition::delete_in_background(doomed);
                }
                Err(e) => {
                    tracing::warn!(partition = %tp, error = %e, "cannot move a stray log aside")
                }
            }
        }
    }

    /// Drops every hosted partition of a deleted topic (of that topic id; 0 matches
    /// any), as [`remove_replica`](Self::remove_replica) does.
    fn remove_topic(&self, topic: &str, topic_id: i64) {
        let hosted: Vec<Arc<Partition>> = self
            .partitions
            .read()
            .get(topic)
            .map(|m| m.values().cloned().collect())
            .unwrap_or_default();
        for p in hosted {
            if same_topic_id(p.topic_id, topic_id) {
                self.remove_replica(topic, p.tp.partition);
            }
        }
    }

    /// The hosted replica `ps` announces, opened (or created) if needed; a hosted
    /// one of another topic id (a deleted topic's) is removed first.
    fn get_or_create(
        &self,
        ps: &pb::PartitionState,
        config: &TopicConfig,
    ) -> Result<Arc<Partition>, ErrorCode> {
        let (topic, index) = (ps.topic.as_str(), ps.partition);
        if let Some(p) = self.partition(topic, index) {
            if same_topic_id(p.topic_id, ps.topic_id) {
                return Ok(p);
            }
            self.remove_replica(topic, index);
        }
        let tp = TopicPartition::new(topic, index);
        let metrics = self.metrics.clone();
        let listener: IsrListener = Arc::new(
            move |tp: &TopicPartition, kind: IsrChangeKind, isr: &[i32]| {
                let change = match kind {
                    IsrChangeKind::Shrink => {
                        metrics.isr_shrink();
                        "shrink"
                    }
                    IsrChangeKind::Expand => {
                        metrics.isr_expand();
                        "expand"
                    }
                };
                tracing::info!(topic = %tp.topic, partition = tp.partition, ?isr, "isr {change} committed");
            },
        );
        let partition = Partition::open(
            &self.config.log_dir,
            tp.clone(),
            ps.topic_id,
            self.local_id,
            config.clone(),
            listener,
        )
        .map_err(|e| {
            if out_of_resources(&e) {
                // Not the log's fault: nothing on disk is in doubt, and a
                // restart would run out again opening every log. The
                // partition is refused (STORAGE_ERROR) until a later
                // LeaderAndIsr finds room.
                tracing::error!(partition = %tp, error = %e, "cannot open partition log: out of file descriptors or memory (raise the open-files limit)");
                return ErrorCode::StorageError;
            }
            tracing::error!(partition = %tp, error = %e, "cannot open partition log");
            if matches!(
                e,
                syncline_log::LogError::Io { .. } | syncline_log::LogError::Failed(_)
            ) {
                self.open_failure
                    .lock()
                    .get_or_insert_with(|| (tp.clone(), e.to_string()));
            }
            ErrorCode::StorageError
        })?;
        let partition = Arc::new(partition);
        let mut all = self.partitions.write();
        let entry = all.entry(tp.topic.clone()).or_default();
        Ok(entry.entry(index).or_insert(partition).clone())
    }

    // --- housekeeping ---

    pub(crate) fn checkpoint_high_watermarks(&self) {
        for p in self.all_partitions() {
            p.checkpoint_high_watermark();
        }
    }

    /// Runs every partition's flush policy, and returns a replica whose log
    /// failed, or could not be opened for an I/O error, and why (the first
    /// found): its files may not hold what the broker believes, and only a
    /// restart (recovery) can tell. One walk over the partitions does both.
    ///
    /// The walk is skipped while it would find nothing (see [`FlushWalk`]).
    pub(crate) fn flush_due(&self) -> Option<(TopicPartition, String)> {
        let mut failed = self.open_failure.lock().clone();
        // Read before the walk: a log failing during it moves the counter past
        // this reading, and the next call walks again.
        let attention = syncline_log::attention();
        let mut walk = self.flush_walk.lock();
        if !walk.needed(attention) {
            return failed;
        }
        let now_ms = wall_clock_ms();
        let mut some_log_flushes = false;
        for p in self.all_partitions() {
            let (why, flushes) = p.flush_if_due(now_ms);
            some_log_flushes |= flushes;
            if let Some(why) = why {
                failed.get_or_insert_with(|| (p.tp.clone(), why));
            }
        }
        *walk = FlushWalk {
            attention: Some(attention),
            some_log_flushes,
        };
        failed
    }

    pub(crate) fn apply_retention(&self) {
        let now_ms = wall_clock_ms();
        let expiration = self.config.producer_id_expiration_ms;
        for p in self.all_partitions() {
            p.apply_retention(now_ms, expiration);
        }
    }

    /// Clean shutdown: checkpoint and flush every log.
    pub(crate) fn close_all(&self) {
        for p in self.all_partitions() {
            p.close();
        }
    }
}

/// Whether two wire topic ids (0: none given) name the same topic
/// (`syncline_replication::topic::same_topic`).
fn same_topic_id(a: i64, b: i64) -> bool {
    topic::same_topic(TopicId::from_wire(a), TopicId::from_wire(b))
}

/// Deletes what removed replicas left in `log_dir` when the broker stopped before
/// their deletion finished (directories ending in `-delete`).
pub(crate) fn delete_leftovers(log_dir: &std::path::Path) -> std::io::Result<()> {
    for entry in std::fs::read_dir(log_dir)? {
        let entry = entry?;
        let name = entry.file_name();
        if entry.file_type()?.is_dir()
            && name
                .to_str()
                .is_some_and(|n| n.ends_with(crate::replica::partition::DELETE_SUFFIX))
        {
            tracing::info!(dir = %entry.path().display(), "deleting the log of a removed replica");
            std::fs::remove_dir_all(entry.path())?;
        }
    }
    Ok(())
}

/// Every topic name in `req` is a valid one, every partition index >= 0.
fn check_names(req: &pb::LeaderAndIsrRequest) -> Result<(), String> {
    let names = req
        .topics
        .iter()
        .map(|t| t.name.as_str())
        .chain(req.partition_states.iter().map(|p| p.topic.as_str()))
        .chain(req.deleted_topics.iter().map(|t| t.name.as_str()));
    for name in names {
        syncline_proto::validate_topic_name(name)?;
    }
    match req.partition_states.iter().find(|p| p.partition < 0) {
        Some(p) => Err(format!("{}: negative partition {}", p.topic, p.partition)),
        None => Ok(()),
    }
}

/// Whether opening a log failed for want of descriptors or memory (the
/// process's or the system's), not because of anything on disk.
fn out_of_resources(e: &syncline_log::LogError) -> bool {
    use nix::errno::Errno;
    let syncline_log::LogError::Io { source, .. } = e else {
        return false;
    };
    source.raw_os_error().is_some_and(|code| {
        [Errno::EMFILE, Errno::ENFILE, Errno::ENOMEM]
            .iter()
            .any(|e| *e as i32 == code)
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::net::Tcp;
    use crate::replica::delayed::fetch_ready;
    use tokio_util::sync::CancellationToken;

    #[test]
    fn leader_and_isr_names_are_checked_before_they_become_paths() {
        let state = |topic: &str, partition| pb::PartitionState {
            topic: topic.into(),
            partition,
            ..Default::default()
        };
        let request =
            |states: Vec<pb::PartitionState>, deleted: Option<&str>| pb::LeaderAndIsrRequest {
                partition_states: states,
                deleted_topics: deleted
                    .map(|name| pb::DeletedTopic {
                        name: name.into(),
                        topic_id: 1,
                    })
                    .into_iter()
                    .collect(),
                ..Default::default()
            };
        assert!(check_names(&request(vec![state("orders", 0)], Some("old"))).is_ok());
        for bad in ["../../etc", "a/b", "..", "", &"x".repeat(250)] {
            assert!(
                check_names(&request(vec![state(bad, 0)], None)).is_err(),
                "{bad:?}"
            );
            assert!(
                check_names(&request(vec![], Some(bad))).is_err(),
                "deleted {bad:?}"
            );
        }
        assert!(check_names(&request(vec![state("orders", -1)], None)).is_err());
    }

    #[test]
    fn the_flush_walk_is_skipped_until_a_log_may_need_it() {
        let walk = |attention, some_log_flushes| FlushWalk {
            attention,
            some_log_flushes,
        };
        for (last, counter, needed, why) in [
            (walk(None, false), 5, true, "never walked"),
            (
                walk(Some(5), false),
                5,
                false,
                "nothing moved, no log flushes",
            ),
            (
                walk(Some(5), false),
                6,
                true,
                "a log failed, or one that flushes opened",
            ),
            (
                walk(Some(5), true),
                5,
                true,
                "a log fsyncs by time or count",
            ),
        ] {
            assert_eq!(last.needed(counter), needed, "{why}");
        }
    }

    #[tokio::test]
    async fn a_flush_walk_notes_whether_some_log_flushes() {
        for (extra, flushes) in [("", false), ("flush_ms = 1000", true)] {
            let dir = tempfile::tempdir().unwrap();
            let (tx, _rx) = mpsc::unbounded_channel();
            let rm = replica_manager_with(dir.path(), tx, extra);
            lead(&rm);
            assert_eq!(rm.flush_due(), None);
            let walk = rm.flush_walk.lock();
            assert!(walk.attention.is_some(), "{extra:?}: walked");
            assert_eq!(walk.some_log_flushes, flushes, "{extra:?}");
        }
    }

    /// Running out of file descriptors while opening a partition refuses that
    /// partition (STORAGE_ERROR) and does not stop the broker: nothing on disk
    /// is in doubt, and a restart would run out again opening every log (a
    /// crash loop). A log that fails for an I/O error of its own still stops
    /// it (`a_flush_walk_notes_whether_some_log_flushes` and the log crate).
    ///
    /// Lowers this process's open-files limit for a moment: nextest runs each
    /// test in a process of its own.
    #[tokio::test]
    async fn running_out_of_file_descriptors_refuses_the_partition_without_stopping_the_broker() {
        use nix::sys::resource::{getrlimit, setrlimit, Resource};
        let dir = tempfile::tempdir().unwrap();
        let (tx, _rx) = mpsc::unbounded_channel();
        let rm = replica_manager(dir.path(), tx);
        lead(&rm);
        let mut request = t0_state(
            2,
            pb::PartitionState {
                leader: 1,
                leader_epoch: 1,
                isr: vec![1],
                partition_epoch: 1,
                replicas: vec![1],
                ..Default::default()
            },
        );
        request.topics[0].name = "u".into();
        request.partition_states[0].topic = "u".into();
        let (soft, hard) = getrlimit(Resource::RLIMIT_NOFILE).unwrap();
        // No descriptor numbered 3 or above may be opened: past stdio, none.
        setrlimit(Resource::RLIMIT_NOFILE, 3, hard).unwrap();
        let answer = rm.apply_leader_and_isr(&request);
        setrlimit(Resource::RLIMIT_NOFILE, soft, hard).unwrap();
        assert_eq!(
            answer.partition_errors,
            vec![pb::LeaderAndIsrPartitionError {
                topic: "u".into(),
                partition: 0,
                error_code: ErrorCode::StorageError as i32,
            }]
        );
        assert!(rm.partition("u", 0).is_none());
        assert_eq!(rm.flush_due(), None, "the broker goes on");
        // With descriptors again, the next change the controller announces
        // (here a new leader epoch) opens it; until then it stays refused.
        request.metadata_offset = 3;
        request.partition_states[0].leader_epoch = 2;
        let answer = rm.apply_leader_and_isr(&request);
        assert_eq!(answer.partition_errors, vec![]);
        assert!(rm.partition("u", 0).is_some());
    }

    /// A replica manager for broker 1 whose AlterPartition sender is `isr_requests`.
    fn replica_manager(
        log_dir: &std::path::Path,
        isr_requests: mpsc::UnboundedSender<IsrRequest>,
    ) -> ReplicaManager {
        replica_manager_with(log_dir, isr_requests, "")
    }

    /// As [`replica_manager`], with `extra` lines of broker config.
    fn replica_manager_with(
        log_dir: &std::path::Path,
        isr_requests: mpsc::UnboundedSender<IsrRequest>,
        extra: &str,
    ) -> ReplicaManager {
        let config = Arc::new(
            BrokerConfig::parse(&format!(
                "node_id = 1\nprocess_roles = \"broker,controller\"\n\
                 controller_quorum_voters = \"1@127.0.0.1:9092\"\nlog_dirs = {:?}\n\
                 replica_lag_time_max_ms = 1000\n{extra}",
                log_dir.display().to_string()
            ))
            .expect("broker config"),
        );
        let metadata = Arc::new(MetadataCache::new("test"));
        let metrics = Arc::new(BrokerMetrics::new());
        let broker_epoch = Arc::new(AtomicI64::new(7));
        let fetchers = Arc::new(FetcherManager::new(
            config.clone(),
            metadata.clone(),
            Arc::new(Tcp),
            broker_epoch.clone(),
            metrics.clone(),
            CancellationToken::new(),
        ));
        ReplicaManager::new(
            config,
            metadata,
            fetchers,
            broker_epoch,
            isr_requests,
            metrics,
        )
    }

    /// Broker 1 leads `t-0` in epoch 1 with replicas {1,2} and ISR {1,2}.
    fn lead(rm: &ReplicaManager) -> Arc<Partition> {
        lead_with(rm, &[1, 2], &[1, 2], &[])
    }

    /// Broker 1 leads `t-0` in epoch 1 with these replicas, ISR and adding replicas.
    fn lead_with(
        rm: &ReplicaManager,
        replicas: &[i32],
        isr: &[i32],
        adding: &[i32],
    ) -> Arc<Partition> {
        let answer = rm.apply_leader_and_isr(&t0_state(
            1,
            pb::PartitionState {
                leader: 1,
                leader_epoch: 1,
                isr: isr.to_vec(),
                partition_epoch: 1,
                replicas: replicas.to_vec(),
                adding_replicas: adding.to_vec(),
                ..Default::default()
            },
        ));
        assert_eq!(answer.error_code, 0);
        rm.partition("t", 0).expect("created")
    }

    /// A LeaderAndIsr (metadata offset `metadata_offset`) giving `t-0` `state`.
    fn t0_state(metadata_offset: i64, state: pb::PartitionState) -> pb::LeaderAndIsrRequest {
        pb::LeaderAndIsrRequest {
            controller_id: 1,
            controller_epoch: 1,
            broker_epoch: 7,
            metadata_offset,
            full: false,
            topics: vec![pb::TopicState {
                name: "t".into(),
                ..Default::default()
            }],
            partition_states: vec![pb::PartitionState {
                topic: "t".into(),
                partition: 0,
                ..state
            }],
            brokers: vec![],
            deleted_topics: vec![],
            security: None,
            client_quotas: None,
        }
    }

    #[tokio::test(start_paused = true)]
    async fn an_isr_change_that_cannot_be_sent_is_sent_again_after_the_pause() {
        let dir = tempfile::tempdir().unwrap();
        let (tx, rx) = mpsc::unbounded_channel();
        // The AlterPartition sender task is gone.
        drop(rx);
        let rm = replica_manager(dir.path(), tx);
        let partition = lead(&rm);
        // Follower 2 never fetches: past the lag time the shrink check proposes {1}.
        tokio::time::advance(Duration::from_millis(1_001)).await;
        rm.maybe_shrink_isrs();
        // Undecided (it may not have been sent, or its answer lost): it stays
        // pending, and nothing else may be proposed meanwhile.
        let described = partition.describe(Instant::now()).unwrap();
        assert_eq!(described.pending_isr, vec![1]);
        // Sent again once the retry pause has passed: the resend is queued as
        // a check of its own, before the next shrink check.
        let (tx, mut rx) = mpsc::unbounded_channel();
        let rm = ReplicaManager {
            isr_requests: tx,
            ..rm
        };
        tokio::time::advance(syncline_replication::partition::leader_state::ISR_RETRY_BACKOFF)
            .await;
        rm.maybe_shrink_isrs();
        let sent = rx.try_recv().expect("the proposal again");
        assert_eq!(sent.proposal.new_isr, vec![1]);
        assert!(rx.try_recv().is_err(), "once");
    }

    #[tokio::test(start_paused = true)]
    async fn the_shrink_tick_runs_the_due_checks_and_still_shrinks_in_time() {
        let dir = tempfile::tempdir().unwrap();
        let (tx, mut rx) = mpsc::unbounded_channel();
        let rm = replica_manager(dir.path(), tx);
        // Lag time 1000 ms: the leader checks every 500 ms, the first 500 ms
        // after it took office.
        let t0 = Instant::now();
        let partition = lead(&rm);
        assert_eq!(rm.shrink_checks_queued(), 1);
        // The broker's timer is told, and polls once the check is due.
        tokio::time::timeout(Duration::ZERO, rm.shrink_check_queued_earlier())
            .await
            .expect("told of the first check");
        let half_lag = Duration::from_millis(500);
        assert_eq!(rm.next_shrink_poll(t0), Some(t0 + half_lag));
        tokio::time::advance(Duration::from_millis(600)).await;
        rm.maybe_shrink_isrs();
        assert!(rx.try_recv().is_err(), "follower 2 is within the lag time");
        assert_eq!(rm.shrink_checks_queued(), 1, "queued again, once");
        let next = t0 + Duration::from_millis(1_100);
        assert_eq!(partition.next_shrink_check(Instant::now()), Some(next));
        assert_eq!(rm.next_shrink_poll(Instant::now()), Some(next));
        // Checks due within the poll interval of the last poll wait for it.
        let last_poll = next - Duration::from_millis(50);
        assert_eq!(
            rm.next_shrink_poll(last_poll),
            Some(last_poll + rm.shrink_check_interval())
        );
        // Ticks before the next check is due leave it queued as it was.
        tokio::time::advance(Duration::from_millis(400)).await;
        rm.maybe_shrink_isrs();
        assert!(rx.try_recv().is_err());
        assert_eq!(rm.shrink_checks_queued(), 1);
        // Follower 2 never fetched: the first check past the lag time removes it.
        tokio::time::advance(Duration::from_millis(100)).await;
        rm.maybe_shrink_isrs();
        let sent = rx.try_recv().expect("a shrink proposal");
        assert_eq!(sent.proposal.new_isr, vec![1]);
        assert_eq!(rm.shrink_checks_queued(), 1);
        // A partition this broker no longer hosts leaves the queue at its next
        // due time.
        let answer = rm.apply_leader_and_isr(&t0_state(
            2,
            pb::PartitionState {
                leader: 2,
                leader_epoch: 2,
                isr: vec![2, 3],
                partition_epoch: 2,
                replicas: vec![2, 3],
                ..Default::default()
            },
        ));
        assert_eq!(answer.error_code, 0);
        assert!(rm.partition("t", 0).is_none());
        tokio::time::advance(Duration::from_millis(500)).await;
        rm.maybe_shrink_isrs();
        assert_eq!(rm.shrink_checks_queued(), 0);
        assert_eq!(rm.next_shrink_poll(Instant::now()), None);
    }

    #[tokio::test(start_paused = true)]
    async fn the_leader_throttles_a_joining_replica_out_of_the_isr_and_nothing_else() {
        let dir = tempfile::tempdir().unwrap();
        let (tx, _rx) = mpsc::unbounded_channel();
        let rm = replica_manager_with(dir.path(), tx, "leader_replication_throttled_rate = 1000\n");
        // A reassignment is adding broker 3 to t-0's replicas {1,2}.
        let partition = lead_with(&rm, &[1, 2, 3], &[1, 2], &[3]);
        let quota = rm.leader_throttle(true, "t", 0, 3).expect("3 is throttled");
        assert!(
            rm.leader_throttle(true, "t", 0, 2).is_none(),
            "2 is in the ISR"
        );
        assert!(
            rm.leader_throttle(false, "t", 0, -1).is_none(),
            "a consumer"
        );
        for _ in 0..3 {
            let mut b = batch::BatchBuilder::new(0);
            b.push(0, None, Some(&[7u8; 500]), &[]);
            let (_append, _effects) = partition
                .append_as_leader(&b.finish(), Acks::Leader, None, 0)
                .unwrap();
        }
        let params = FetchParams {
            from: FetchFrom::Follower { id: 3, epoch: None },
            push_high_watermark: false,
            min_bytes: 1,
            max_bytes: 1 << 20,
            zero_copy: false,
        };
        let status = |throttle: Option<Arc<ReplicationQuota>>| FetchPartitionStatus {
            topic_index: 0,
            partition_index: 0,
            partition: partition.clone(),
            fetch_offset: 0,
            current_leader_epoch: Some(1),
            last_fetched_epoch: None,
            partition_max_bytes: 1 << 20,
            high_watermark_seen: -1,
            throttle,
        };
        let read_with = |params: &FetchParams, statuses: &[FetchPartitionStatus]| {
            let mut response = pb::FetchResponse {
                responses: vec![pb::FetchableTopicResponse {
                    topic: "t".into(),
                    partitions: vec![pb::PartitionData::default()],
                }],
                ..Default::default()
            };
            let summary = read_partitions(params, statuses, &mut response);
            (summary, response.responses[0].partitions[0].clone())
        };
        let read = |statuses: &[FetchPartitionStatus]| read_with(&params, statuses);
        let throttled = [status(Some(quota.clone()))];
        // A full bucket (one second: 1000 bytes) lets the first fetch take all
        // three batches, which overdraws it.
        let (first, data) = read(&throttled);
        assert!(first.bytes > 1500, "{} bytes", first.bytes);
        assert_eq!(first.throttled_bytes, first.bytes);
        assert_eq!(data.records.len(), first.bytes);
        // Now the partition is answered without records (its high watermark and
        // the follower's progress still count), and a waiting fetch is not
        // completed by bytes it would not get.
        let (held, data) = read(&throttled);
        assert_eq!((held.bytes, held.throttled_bytes), (0, 0));
        assert!(data.records.is_empty());
        assert_eq!(data.error_code, 0);
        assert!(
            held.points[0].is_some(),
            "the fetch offset is still recorded"
        );
        assert!(!fetch_ready(&params, &throttled));
        // The same fetch unthrottled would get the bytes at once.
        assert!(fetch_ready(&params, &[status(None)]));
        let (copied, data) = read(&[status(None)]);
        assert!(copied.bytes > 1500);
        assert!(copied.regions.is_empty());
        // Read for zero-copy, the same records are left in the file: regions
        // outside the response, counted all the same.
        let zero_copy = FetchParams {
            zero_copy: true,
            ..params
        };
        let (mut regions, without) = read_with(&zero_copy, &[status(None)]);
        assert_eq!(regions.bytes, copied.bytes);
        assert!(without.records.is_empty());
        assert!(regions.regions.has("t", 0));
        let held = syncline_log::Records::Regions(regions.regions.take("t", 0));
        assert_eq!(held.read().unwrap(), data.records);
        assert!(regions.regions.is_empty());
        // Once the bucket refills, the records flow again.
        tokio::time::advance(quota.wait(Instant::now())).await;
        assert!(fetch_ready(&params, &throttled));
        assert!(read(&throttled).0.bytes > 1500);
    }
}
