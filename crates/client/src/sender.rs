//! The producer's sender task: drains sendable batches into one ProduceRequest
//! per leader broker (at most `max_in_flight_requests_per_connection`
//! outstanding per broker), completes the records' futures from the responses,
//! and puts batches that failed with a retriable error back for a retry after a
//! backoff, refreshing metadata when the error says the leader moved.

use std::collections::{BTreeMap, HashMap, HashSet};
use std::sync::Arc;
use std::time::Duration;

use futures::future::BoxFuture;
use futures::stream::FuturesUnordered;
use futures::{FutureExt, StreamExt};
use syncline_proto::{pb, ErrorCode};
use tokio::time::Instant;

use crate::accumulator::ProducerBatch;
use crate::cluster::{expect_body, Cluster};
use crate::config::{Acks, ClientConfig, ProducerConfig};
use crate::connection::Connection;
use crate::error::{ClientError, ProduceError};
use crate::producer::Shared;

/// A produce request that came back (or failed).
struct Done {
    broker: i32,
    /// The request opened the broker's connection (there was none when it was
    /// drained).
    opened: bool,
    batches: Vec<ProducerBatch>,
    /// `None` for acks=0 (no response exists).
    result: Result<Option<pb::ProduceResponse>, ClientError>,
}

/// What to do with a batch whose attempt failed.
#[derive(Debug, Clone)]
pub(crate) enum RetryDecision {
    /// Send it again after this backoff.
    Retry(Duration),
    /// Fail its records with this error.
    Fail(ProduceError),
}

/// Attempt limits for [`retry_decision`].
#[derive(Debug, Clone, Copy)]
pub(crate) struct RetryPolicy<'a> {
    pub(crate) retries: u32,
    pub(crate) delivery_timeout: Duration,
    pub(crate) client: &'a ClientConfig,
}

/// Decides about a batch after attempt number `attempts` failed with `error`.
/// Retriable errors are retried while retries remain and the retry would start
/// before the batch's delivery deadline.
pub(crate) fn retry_decision(
    error: ProduceError,
    retriable: bool,
    attempts: u32,
    deadline: Instant,
    now: Instant,
    policy: RetryPolicy<'_>,
) -> RetryDecision {
    if !retriable || attempts > policy.retries {
        return RetryDecision::Fail(error);
    }
    // `attempts` counts sends, this failure included.
    let wait = policy
        .client
        .retry_backoff()
        .delay(attempts.saturating_sub(1));
    if now + wait >= deadline {
        return RetryDecision::Fail(ProduceError::DeliveryTimeout {
            timeout_ms: policy.delivery_timeout.as_millis() as u64,
            last_error: Some(Box::new(error)),
        });
    }
    RetryDecision::Retry(wait)
}

/// Whether an error code means the client's leader information is stale.
pub(crate) fn needs_metadata_refresh(code: ErrorCode) -> bool {
    code.is_leadership_error()
        || matches!(
            code,
            ErrorCode::NetworkException
                | ErrorCode::BrokerNotAvailable
                | ErrorCode::ReplicaNotAvailable
        )
}

/// Builds the ProduceRequest for one broker's batches, grouped by topic.
pub(crate) fn produce_request(
    acks: Acks,
    timeout_ms: u64,
    batches: &mut [ProducerBatch],
) -> pb::ProduceRequest {
    let mut topics: BTreeMap<String, Vec<pb::ProducePartition>> = BTreeMap::new();
    for batch in batches.iter_mut() {
        let partition = pb::ProducePartition {
            partition: batch.tp.partition,
            current_leader_epoch: Some(batch.leader_epoch),
            records: batch.bytes(),
        };
        topics
            .entry(batch.tp.topic.to_string())
            .or_default()
            .push(partition);
    }
    pb::ProduceRequest {
        acks: acks.wire(),
        timeout_ms: i32::try_from(timeout_ms).unwrap_or(i32::MAX),
        topics: topics
            .into_iter()
            .map(|(name, partitions)| pb::ProduceTopic { name, partitions })
            .collect(),
    }
}

/// The background task behind a [`crate::Producer`].
pub(crate) struct Sender {
    config: ProducerConfig,
    cluster: Arc<Cluster>,
    shared: Arc<Shared>,
    in_flight: FuturesUnordered<BoxFuture<'static, Done>>,
    in_flight_per_broker: HashMap<i32, usize>,
    /// Brokers whose request in flight is opening their connection: nothing
    /// more is drained for them until it is answered. A request drained
    /// meanwhile would open a connection of its own, which may be ready after
    /// one drained later found the first: the later request would be written
    /// first, and records acknowledged out of the order they were sent in,
    /// with no error to explain it (Kafka's producer drains only for a broker
    /// whose connection is ready).
    connecting: HashSet<i32>,
    /// The metadata refresh in progress (at most one).
    refresh: FuturesUnordered<BoxFuture<'static, ()>>,
    /// The idempotent producer's InitProducerId in progress (at most one).
    init: FuturesUnordered<BoxFuture<'static, Result<(i64, i16), ClientError>>>,
    /// When InitProducerId may be asked again after a failure.
    init_retry_at: Option<Instant>,
    last_refresh: Option<Instant>,
    refresh_wanted: bool,
}

impl Sender {
    pub(crate) fn new(config: ProducerConfig, cluster: Arc<Cluster>, shared: Arc<Shared>) -> Self {
        Sender {
            config,
            cluster,
            shared,
            in_flight: FuturesUnordered::new(),
            in_flight_per_broker: HashMap::new(),
            connecting: HashSet::new(),
            refresh: FuturesUnordered::new(),
            init: FuturesUnordered::new(),
            init_retry_at: None,
            last_refresh: None,
            refresh_wanted: false,
        }
    }

    fn policy(&self) -> RetryPolicy<'_> {
        RetryPolicy {
            retries: self.config.retries,
            delivery_timeout: Duration::from_millis(self.config.delivery_timeout_ms),
            client: &self.config.client,
        }
    }

    pub(crate) async fn run(mut self) {
        loop {
            let now = Instant::now();
            let (next_check, sent) = self.step(now);
            if sent {
                // More may be sendable now (a broker with room for another request
                // and a partition with another ready batch): look again at once.
                tokio::task::yield_now().await;
                continue;
            }
            let (closing, finished) = {
                let state = self.shared.state.lock();
                (
                    self.shared
                        .closed
                        .load(std::sync::atomic::Ordering::Acquire),
                    state.accumulator.all_complete(),
                )
            };
            if closing && finished && self.in_flight.is_empty() {
                self.shared.completed.notify_waiters();
                return;
            }
            let sleep =
                tokio::time::sleep_until(next_check.unwrap_or(now + Duration::from_secs(3600)));
            tokio::select! {
                () = self.shared.wake.notified() => {}
                () = sleep => {}
                Some(done) = self.in_flight.next(), if !self.in_flight.is_empty() => {
                    self.handle(done, Instant::now());
                }
                Some(()) = self.refresh.next(), if !self.refresh.is_empty() => {}
                Some(init) = self.init.next(), if !self.init.is_empty() => {
                    self.on_producer_id(init, Instant::now());
                }
            }
        }
    }

    /// Asks any broker for the idempotent producer's id (once at a time).
    fn start_init_producer_id(&mut self) {
        let cluster = self.cluster.clone();
        self.init.push(
            async move {
                let body = pb::request::Body::InitProducerId(pb::InitProducerIdRequest {
                    transactional_id: String::new(),
                    transaction_timeout_ms: 60_000,
                    producer_id: -1,
                    producer_epoch: -1,
                });
                match cluster.send_any(body).await? {
                    pb::response::Body::InitProducerId(r) if r.error_code == 0 => {
                        let epoch = i16::try_from(r.producer_epoch).unwrap_or(0);
                        Ok((r.producer_id, epoch))
                    }
                    pb::response::Body::InitProducerId(r) => Err(ClientError::Protocol {
                        code: ErrorCode::from_wire(r.error_code),
                        message: r.error_message,
                    }),
                    other => Err(ClientError::Protocol {
                        code: ErrorCode::UnknownServerError,
                        message: format!("unexpected answer to InitProducerId: {other:?}"),
                    }),
                }
            }
            .boxed(),
        );
    }

    /// InitProducerId answered: batches may go (or it is asked again later).
    fn on_producer_id(&mut self, init: Result<(i64, i16), ClientError>, now: Instant) {
        match init {
            Ok((id, epoch)) => {
                tracing::debug!(
                    producer_id = id,
                    producer_epoch = epoch,
                    "idempotent producer id"
                );
                self.shared.state.lock().accumulator.set_producer(id, epoch);
                self.init_retry_at = None;
            }
            // Not authorized (Kafka's rule: Write on some topic, or
            // IdempotentWrite on the cluster): no retry makes it so, so what
            // waits fails now, as Kafka's producer does; a later send asks again.
            Err(ClientError::Protocol { code, message })
                if matches!(
                    code,
                    ErrorCode::ClusterAuthorizationFailed | ErrorCode::TopicAuthorizationFailed
                ) =>
            {
                tracing::debug!(%code, %message, "InitProducerId refused");
                let error = ProduceError::Broker { code, message };
                let mut state = self.shared.state.lock();
                let mut refused = state.accumulator.take_queued();
                for batch in &mut refused {
                    batch.fail(&error);
                    state.accumulator.producer_failed(batch);
                    state.accumulator.expired_done(batch);
                }
                drop(state);
                self.shared.completed.notify_waiters();
                self.init_retry_at =
                    Some(now + Duration::from_millis(self.config.client.retry_backoff_ms));
            }
            Err(e) => {
                tracing::warn!(error = %e, "InitProducerId failed; retrying");
                self.init_retry_at =
                    Some(now + Duration::from_millis(self.config.client.retry_backoff_ms));
            }
        }
    }

    /// Expires, drains and sends what is due; returns when to look again and
    /// whether a request went out.
    fn step(&mut self, now: Instant) -> (Option<Instant>, bool) {
        let max_in_flight = self.config.max_in_flight_requests_per_connection;
        let (requests, expired, mut next_check, topics, start_init) = {
            let mut state = self.shared.state.lock();
            let acc = &mut state.accumulator;
            let expired = acc.expire(now);
            let needs_id = acc.needs_producer_id();
            let (check, drained) = self.cluster.with_metadata(|md| {
                let leader_of = |tp: &_| md.leader(tp);
                let check = acc.ready(now, leader_of);
                let mut drained = Vec::new();
                for &broker in check.brokers.iter().filter(|_| !needs_id) {
                    if self.in_flight_per_broker.get(&broker).copied().unwrap_or(0) >= max_in_flight
                        || self.connecting.contains(&broker)
                    {
                        continue;
                    }
                    let conn = md
                        .brokers
                        .get(&broker)
                        .and_then(|b| self.cluster.open_connection(broker, &b.address()));
                    let batches = acc.drain(broker, leader_of, self.config.max_request_size, now);
                    if !batches.is_empty() {
                        drained.push((broker, conn, batches));
                    }
                }
                (check, drained)
            });
            if check.unknown_leader {
                self.refresh_wanted = true;
            }
            let mut next = [check.next_check, acc.next_deadline()]
                .into_iter()
                .flatten()
                .min();
            let mut start_init = false;
            if needs_id && !check.brokers.is_empty() && self.init.is_empty() {
                match self.init_retry_at.filter(|at| now < *at) {
                    Some(at) => next = Some(next.map_or(at, |n| n.min(at))),
                    None => start_init = true,
                }
            }
            let topics: Vec<String> = state.topics.iter().cloned().collect();
            (drained, expired, next, topics, start_init)
        };
        if start_init {
            self.start_init_producer_id();
        }
        let any_expired = !expired.is_empty();
        let mut expired = expired;
        for batch in &mut expired {
            let error = ProduceError::DeliveryTimeout {
                timeout_ms: self.config.delivery_timeout_ms,
                last_error: batch.last_error.clone().map(Box::new),
            };
            batch.fail(&error);
        }
        if any_expired {
            let mut state = self.shared.state.lock();
            for batch in &expired {
                state.accumulator.producer_failed(batch);
                state.accumulator.expired_done(batch);
            }
            drop(state);
            // Flush and close waiters may be done now.
            self.shared.completed.notify_waiters();
        }
        let sent = !requests.is_empty();
        for (broker, conn, batches) in requests {
            self.start_request(broker, conn, batches);
        }

        let max_age = self.config.client.metadata_max_age_ms;
        if self
            .cluster
            .with_metadata(|m| m.needs_refresh(now, max_age))
            && !topics.is_empty()
        {
            self.refresh_wanted = true;
        }
        if self.refresh_wanted && self.refresh.is_empty() {
            let allowed_at = self.last_refresh.map_or(now, |t| {
                t + Duration::from_millis(self.config.client.retry_backoff_ms)
            });
            if now >= allowed_at {
                self.refresh_wanted = false;
                self.last_refresh = Some(now);
                let cluster = self.cluster.clone();
                self.refresh.push(
                    async move {
                        if let Err(e) = cluster.refresh_metadata(topics).await {
                            tracing::debug!(error = %e, "metadata refresh failed");
                        }
                    }
                    .boxed(),
                );
            } else {
                next_check = Some(next_check.map_or(allowed_at, |n| n.min(allowed_at)));
            }
        }
        (next_check, sent)
    }

    /// Sends `batches` to `broker` on `conn`, its open connection, or on one
    /// this request opens (`None`: the broker is `connecting` until the answer).
    fn start_request(
        &mut self,
        broker: i32,
        conn: Option<Connection>,
        mut batches: Vec<ProducerBatch>,
    ) {
        let acks = self.config.acks;
        let request = produce_request(acks, self.config.client.request_timeout_ms, &mut batches);
        *self.in_flight_per_broker.entry(broker).or_default() += 1;
        let opened = conn.is_none();
        if opened {
            self.connecting.insert(broker);
        }
        let cluster = self.cluster.clone();
        let body = pb::request::Body::Produce(request);
        self.in_flight.push(
            async move {
                let conn = match conn {
                    Some(conn) => Ok(conn),
                    None if acks == Acks::None => cluster.broker_connection(broker).await,
                    None => cluster.known_broker_connection(broker).await,
                };
                let result = match conn {
                    Err(e) => Err(e),
                    Ok(conn) if acks == Acks::None => {
                        conn.send_no_response(body).await.map(|()| None)
                    }
                    Ok(conn) => cluster
                        .send_on(&conn, body)
                        .await
                        .and_then(|b| expect_body!(b, Produce))
                        .map(Some),
                };
                Done {
                    broker,
                    opened,
                    batches,
                    result,
                }
            }
            .boxed(),
        );
    }

    fn handle(&mut self, done: Done, now: Instant) {
        if let Some(n) = self.in_flight_per_broker.get_mut(&done.broker) {
            *n = n.saturating_sub(1);
        }
        if done.opened {
            self.connecting.remove(&done.broker);
        }
        match done.result {
            Ok(None) => {
                for mut batch in done.batches {
                    batch.complete_unacknowledged();
                    self.shared.state.lock().accumulator.finished(batch);
                }
            }
            Ok(Some(response)) => self.handle_response(done.batches, &response, now),
            Err(error) => {
                tracing::debug!(broker = done.broker, %error, "produce request failed");
                let retriable = error.is_retriable();
                if retriable {
                    self.cluster.with_metadata_mut(|m| m.mark_stale());
                    self.refresh_wanted = true;
                }
                let error = ProduceError::from(error);
                for batch in done.batches {
                    self.retry_or_fail(batch, error.clone(), retriable, now);
                }
            }
        }
        self.shared.completed.notify_waiters();
    }

    fn handle_response(
        &mut self,
        batches: Vec<ProducerBatch>,
        response: &pb::ProduceResponse,
        now: Instant,
    ) {
        for mut batch in batches {
            let answer = response
                .topics
                .iter()
                .filter(|t| *t.name == *batch.tp.topic)
                .flat_map(|t| &t.partitions)
                .find(|p| p.partition == batch.tp.partition);
            let Some(answer) = answer else {
                let error = ProduceError::Broker {
                    code: ErrorCode::UnknownServerError,
                    message: "the broker's response has no entry for this partition".into(),
                };
                self.retry_or_fail(batch, error, false, now);
                continue;
            };
            let code = ErrorCode::from_wire(answer.error_code);
            if code == ErrorCode::None {
                batch.complete(answer);
                self.shared.state.lock().accumulator.finished(batch);
                continue;
            }
            tracing::debug!(tp = %batch.tp, %code, attempt = batch.attempts, "produce error");
            if needs_metadata_refresh(code) {
                let hinted = answer.current_leader.as_ref().is_some_and(|l| {
                    self.cluster.with_metadata_mut(|m| {
                        m.apply_leader_hint(&batch.tp, l.leader_id, l.leader_epoch)
                    })
                });
                if !hinted {
                    self.cluster.with_metadata_mut(|m| m.mark_stale());
                    self.refresh_wanted = true;
                }
            }
            let error = ProduceError::Broker {
                code,
                message: answer.error_message.clone(),
            };
            let retriable = self
                .shared
                .state
                .lock()
                .accumulator
                .sequence_error(&mut batch, code)
                .unwrap_or_else(|| code.is_retriable());
            self.retry_or_fail(batch, error, retriable, now);
        }
    }

    fn retry_or_fail(
        &mut self,
        mut batch: ProducerBatch,
        error: ProduceError,
        retriable: bool,
        now: Instant,
    ) {
        let deadline = batch.deadline(Duration::from_millis(self.config.delivery_timeout_ms));
        let decision = retry_decision(
            error.clone(),
            retriable,
            batch.attempts,
            deadline,
            now,
            self.policy(),
        );
        let mut state = self.shared.state.lock();
        match decision {
            RetryDecision::Retry(wait) => {
                batch.last_error = Some(error);
                state.accumulator.reenqueue(batch, wait, now);
            }
            RetryDecision::Fail(error) => {
                state.accumulator.producer_failed(&batch);
                // Outside the lock: callbacks run arbitrary code.
                drop(state);
                batch.fail(&error);
                self.shared.state.lock().accumulator.finished(batch);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn policy(client: &ClientConfig, retries: u32) -> RetryPolicy<'_> {
        RetryPolicy {
            retries,
            delivery_timeout: Duration::from_secs(120),
            client,
        }
    }

    /// The backoff of a retry, or the failure's code.
    fn outcome(d: RetryDecision) -> Result<Duration, Option<ErrorCode>> {
        match d {
            RetryDecision::Retry(wait) => Ok(wait),
            RetryDecision::Fail(e) => Err(e.code()),
        }
    }

    fn broker(code: ErrorCode) -> ProduceError {
        ProduceError::Broker {
            code,
            message: String::new(),
        }
    }

    #[tokio::test(start_paused = true)]
    async fn retry_decisions_per_error_code() {
        let client = ClientConfig::default();
        let now = Instant::now();
        let deadline = now + Duration::from_secs(120);
        let p = policy(&client, 3);
        let retriable = [
            ErrorCode::NotLeaderOrFollower,
            ErrorCode::UnknownLeaderEpoch,
            ErrorCode::FencedLeaderEpoch,
            ErrorCode::UnknownTopicOrPartition,
            ErrorCode::LeaderNotAvailable,
            ErrorCode::NotEnoughReplicas,
            ErrorCode::NotEnoughReplicasAfterAppend,
            ErrorCode::RequestTimedOut,
        ];
        for code in retriable {
            assert_eq!(
                outcome(retry_decision(
                    broker(code),
                    code.is_retriable(),
                    1,
                    deadline,
                    now,
                    p
                )),
                Ok(Duration::from_millis(100)),
                "{code}"
            );
        }
        for code in [
            ErrorCode::CorruptMessage,
            ErrorCode::MessageTooLarge,
            ErrorCode::InvalidRecord,
            ErrorCode::InvalidRequiredAcks,
            ErrorCode::InvalidTimestamp,
        ] {
            assert_eq!(
                outcome(retry_decision(
                    broker(code),
                    code.is_retriable(),
                    1,
                    deadline,
                    now,
                    p
                )),
                Err(Some(code)),
                "{code}"
            );
        }
        // Leadership errors refresh metadata; NOT_ENOUGH_REPLICAS does not.
        assert!(needs_metadata_refresh(ErrorCode::NotLeaderOrFollower));
        assert!(needs_metadata_refresh(ErrorCode::FencedLeaderEpoch));
        assert!(!needs_metadata_refresh(ErrorCode::NotEnoughReplicas));
    }

    #[tokio::test(start_paused = true)]
    async fn retries_back_off_and_are_bounded_by_count_and_deadline() {
        let client = ClientConfig::default();
        let now = Instant::now();
        let far = now + Duration::from_secs(120);
        let e = broker(ErrorCode::NotEnoughReplicas);
        let p = policy(&client, 3);
        let waits: Vec<_> = (1..=4)
            .map(|a| outcome(retry_decision(e.clone(), true, a, far, now, p)))
            .collect();
        let ms = Duration::from_millis;
        assert_eq!(
            waits,
            [
                Ok(ms(100)),
                Ok(ms(200)),
                Ok(ms(400)),
                Err(Some(ErrorCode::NotEnoughReplicas))
            ]
        );
        // The retry would start after the delivery deadline: a timeout naming the
        // last error.
        let near = now + Duration::from_millis(50);
        match retry_decision(e.clone(), true, 1, near, now, p) {
            RetryDecision::Fail(ProduceError::DeliveryTimeout {
                last_error: Some(last),
                ..
            }) => {
                assert_eq!(last.code(), Some(ErrorCode::NotEnoughReplicas));
            }
            other => panic!("{other:?}"),
        }
    }

    #[test]
    fn request_groups_batches_by_topic_with_leader_epochs() {
        use crate::accumulator::{Accumulator, AccumulatorConfig, RecordFields};
        use crate::buffer::Reservation;
        use syncline_proto::TopicPartition;
        let rt = tokio::runtime::Builder::new_current_thread()
            .enable_time()
            .start_paused(true)
            .build()
            .unwrap();
        rt.block_on(async {
            let mut acc = Accumulator::new(AccumulatorConfig {
                batch_size: 1000,
                linger: Duration::ZERO,
                delivery_timeout: Duration::from_secs(1),
                guarantee_order: false,
                compression: syncline_proto::compression::Compression::None,
                idempotent: false,
                max_in_flight: 5,
            });
            let now = Instant::now();
            for (t, p) in [("a", 0), ("b", 1), ("a", 2)] {
                let (tx, _rx) = tokio::sync::oneshot::channel();
                let f = RecordFields::new(5, Some(b"k"), Some(b"v"), &[]);
                acc.append(
                    &TopicPartition::new(t, p),
                    f,
                    Reservation::empty(),
                    tx,
                    || now,
                );
            }
            let mut batches = acc.drain(1, |tp| Some((1, 10 + tp.partition)), 1 << 20, now);
            let req = produce_request(Acks::All, 30_000, &mut batches);
            assert_eq!((req.acks, req.timeout_ms), (-1, 30_000));
            let names: Vec<&str> = req.topics.iter().map(|t| t.name.as_str()).collect();
            assert_eq!(names, ["a", "b"]);
            let a: Vec<(i32, Option<i32>)> = req.topics[0]
                .partitions
                .iter()
                .map(|p| (p.partition, p.current_leader_epoch))
                .collect();
            assert_eq!(a, [(0, Some(10)), (2, Some(12))]);
            for t in &req.topics {
                for p in &t.partitions {
                    let h = syncline_proto::batch::validate(&p.records).unwrap();
                    assert_eq!(h.records_count, 1);
                }
            }
        });
    }
}
