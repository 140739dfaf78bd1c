//! The producer: [`Producer::send`] puts a record in the accumulator and returns
//! a future of its acknowledgement; a background sender task (see
//! [`crate::sender`]) batches, routes, retries and completes those futures.

use std::collections::BTreeSet;
use std::future::Future;
use std::pin::Pin;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::task::{Context, Poll};
use std::time::Duration;

use parking_lot::Mutex;
use syncline_proto::batch::HEADER_LEN;
use tokio::sync::{oneshot, Notify};
use tokio::task::JoinHandle;
use tokio::time::Instant;

use crate::accumulator::{Accumulator, AccumulatorConfig, DeliverySender, RecordFields};
use crate::buffer::BufferPool;
use crate::cluster::Cluster;
use crate::config::ProducerConfig;
use crate::error::{ClientError, ProduceError};
use crate::partitioner::{partition_for_key, StickyPartitioner};
use crate::record::{ProducerRecord, RecordMetadata};
use syncline_proto::{wall_clock_ms, TopicPartition};

/// When a `send` stops waiting (for metadata, for buffer memory):
/// `max_block_ms` after its first wait begins. The clock is read only when a
/// wait is needed, not for every record.
#[derive(Debug)]
struct BlockDeadline {
    max_block: Duration,
    at: Option<Instant>,
}

impl BlockDeadline {
    fn new(max_block: Duration) -> Self {
        BlockDeadline {
            max_block,
            at: None,
        }
    }

    fn at(&mut self) -> Instant {
        *self
            .at
            .get_or_insert_with(|| Instant::now() + self.max_block)
    }
}

/// State the producer handles and the sender task share.
#[derive(Debug)]
pub(crate) struct Shared {
    pub(crate) state: Mutex<State>,
    pub(crate) buffer: BufferPool,
    /// Wakes the sender: a new or full batch, a flush, a close.
    pub(crate) wake: Notify,
    /// Wakes flush and close waiters: some batch completed.
    pub(crate) completed: Notify,
    /// No more records are accepted.
    pub(crate) closed: AtomicBool,
}

/// The accumulator and what is decided under the same lock.
#[derive(Debug)]
pub(crate) struct State {
    pub(crate) accumulator: Accumulator,
    sticky: StickyPartitioner,
    /// Topics this producer has sent to: the ones its metadata refreshes ask for.
    pub(crate) topics: BTreeSet<String>,
    last_topic: LastTopic,
}

/// The name of the topic last sent to, shared: a record to the same topic names
/// its partition without allocating.
#[derive(Debug, Default)]
struct LastTopic(Option<Arc<str>>);

impl LastTopic {
    /// `topic`'s name, shared with the last record's when the topic is the
    /// same, and whether it was.
    fn share(&mut self, topic: &str) -> (Arc<str>, bool) {
        match &self.0 {
            Some(last) if **last == *topic => (last.clone(), true),
            _ => (self.0.insert(Arc::from(topic)).clone(), false),
        }
    }
}

impl Shared {
    /// Waits until `done` holds, re-checking whenever a batch completes.
    async fn wait_until(&self, mut done: impl FnMut(&State) -> bool) {
        loop {
            let notified = self.completed.notified();
            tokio::pin!(notified);
            notified.as_mut().enable();
            if done(&self.state.lock()) {
                return;
            }
            notified.await;
        }
    }

    fn begin_close(&self) {
        self.closed.store(true, Ordering::Release);
        self.state.lock().accumulator.begin_close();
        self.wake.notify_one();
    }
}

/// An asynchronous, batching producer. Cheap to clone; the clones share the
/// buffer, the connections and the sender task.
///
/// ```no_run
/// # async fn example() -> Result<(), Box<dyn std::error::Error>> {
/// use syncline_client::{Producer, ProducerConfig, ProducerRecord};
///
/// let producer = Producer::new(ProducerConfig::new("127.0.0.1:9092"))?;
/// let ack = producer.send(ProducerRecord::new("events", "hello").with_key("k1")).await?;
/// println!("written at {}-{} offset {}", ack.topic, ack.partition, ack.offset);
/// producer.close().await;
/// # Ok(()) }
/// ```
#[derive(Debug, Clone)]
pub struct Producer {
    inner: Arc<Inner>,
}

#[derive(Debug)]
struct Inner {
    config: ProducerConfig,
    cluster: Arc<Cluster>,
    shared: Arc<Shared>,
    sender: Mutex<Option<JoinHandle<()>>>,
}

impl Drop for Inner {
    fn drop(&mut self) {
        // The sender finishes what is queued (bounded by delivery_timeout_ms) and
        // stops.
        self.shared.begin_close();
    }
}

/// The acknowledgement of one record: resolves when the broker acknowledged it
/// (as `acks` asks) or it failed for good.
#[derive(Debug)]
pub struct DeliveryFuture {
    rx: oneshot::Receiver<Result<RecordMetadata, ProduceError>>,
}

impl Future for DeliveryFuture {
    type Output = Result<RecordMetadata, ProduceError>;

    fn poll(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Self::Output> {
        Pin::new(&mut self.rx)
            .poll(cx)
            .map(|r| r.unwrap_or(Err(ProduceError::Closed)))
    }
}

impl Producer {
    /// A producer for this configuration. Spawns the sender task, so it must be
    /// called within a tokio runtime; connects lazily.
    pub fn new(config: ProducerConfig) -> Result<Producer, ClientError> {
        config.validate()?;
        let cluster = Cluster::new(config.client.clone())?;
        Ok(Self::with_cluster(config, cluster))
    }

    fn with_cluster(config: ProducerConfig, cluster: Arc<Cluster>) -> Producer {
        let accumulator = Accumulator::new(AccumulatorConfig {
            batch_size: config.batch_size,
            linger: Duration::from_millis(config.linger_ms),
            delivery_timeout: Duration::from_millis(config.delivery_timeout_ms),
            guarantee_order: config.max_in_flight_requests_per_connection == 1,
            compression: config.compression_type,
            idempotent: config.idempotent(),
            max_in_flight: config.max_in_flight_requests_per_connection,
        });
        let shared = Arc::new(Shared {
            state: Mutex::new(State {
                accumulator,
                sticky: StickyPartitioner::default(),
                topics: BTreeSet::new(),
                last_topic: LastTopic::default(),
            }),
            buffer: BufferPool::new(
                config.buffer_memory,
                Duration::from_millis(config.max_block_ms),
            ),
            wake: Notify::new(),
            completed: Notify::new(),
            closed: AtomicBool::new(false),
        });
        let sender = crate::sender::Sender::new(config.clone(), cluster.clone(), shared.clone());
        let handle = tokio::spawn(sender.run());
        Producer {
            inner: Arc::new(Inner {
                config,
                cluster,
                shared,
                sender: Mutex::new(Some(handle)),
            }),
        }
    }

    /// The configuration in use.
    pub fn config(&self) -> &ProducerConfig {
        &self.inner.config
    }

    /// Sends a record: enqueues it (waiting up to `max_block_ms` for the topic's
    /// metadata and for room in `buffer_memory`) when first polled, then waits for
    /// its acknowledgement.
    ///
    /// Futures that are polled concurrently may enqueue in any order; to keep the
    /// order of records to one partition, use [`Producer::enqueue`] in sequence.
    pub fn send(
        &self,
        record: ProducerRecord,
    ) -> impl Future<Output = Result<RecordMetadata, ProduceError>> + Send + 'static {
        let producer = self.clone();
        async move { producer.enqueue(record).await?.await }
    }

    /// Enqueues a record and returns the future of its acknowledgement. Records
    /// enqueued one after the other keep that order within their partition (across
    /// retries too when `max_in_flight_requests_per_connection` is 1).
    ///
    /// Waits up to `max_block_ms` for the topic's metadata and for room in the
    /// buffer, then fails with [`ProduceError::BufferFull`] or the metadata error.
    pub async fn enqueue(&self, record: ProducerRecord) -> Result<DeliveryFuture, ProduceError> {
        let (tx, rx) = oneshot::channel();
        self.accept(record, DeliverySender::Future(tx)).await?;
        Ok(DeliveryFuture { rx })
    }

    /// Enqueues a record like [`Producer::enqueue`], and calls `callback` with its
    /// outcome the moment it is known (Kafka's `send(record, callback)`).
    ///
    /// An error returned here means the record was not accepted (the callback is
    /// then never called); every accepted record's callback is called exactly
    /// once. The callback runs on the producer's sender task, between handling one
    /// response and the next: keep it short (record a figure, send on a channel).
    /// A callback that panics is logged and does not stop the producer.
    ///
    /// ```no_run
    /// # async fn example(producer: syncline_client::Producer) -> Result<(), syncline_client::ProduceError> {
    /// use syncline_client::ProducerRecord;
    /// let sent = tokio::time::Instant::now();
    /// producer
    ///     .send_with_callback(ProducerRecord::new("events", "hello"), move |outcome| {
    ///         match outcome {
    ///             Ok(ack) => println!("offset {} after {:?}", ack.offset, sent.elapsed()),
    ///             Err(e) => eprintln!("not written: {e}"),
    ///         }
    ///     })
    ///     .await?;
    /// # Ok(()) }
    /// ```
    pub async fn send_with_callback(
        &self,
        record: ProducerRecord,
        callback: impl FnOnce(Result<RecordMetadata, ProduceError>) + Send + 'static,
    ) -> Result<(), ProduceError> {
        self.accept(record, DeliverySender::Callback(Box::new(callback)))
            .await
    }

    /// Puts a record in its partition's batch; `done` learns its outcome.
    async fn accept(
        &self,
        record: ProducerRecord,
        done: DeliverySender,
    ) -> Result<(), ProduceError> {
        let inner = &*self.inner;
        let shared = &inner.shared;
        if shared.closed.load(Ordering::Acquire) {
            return Err(ProduceError::Closed);
        }
        let mut deadline = BlockDeadline::new(Duration::from_millis(inner.config.max_block_ms));
        let cached = inner
            .cluster
            .with_metadata(|m| m.partition_count(&record.topic));
        let partitions = match cached {
            Some(n) => n,
            None => {
                inner
                    .cluster
                    .wait_for_topic(&record.topic, deadline.at())
                    .await?
            }
        };
        if let Some(p) = record.partition {
            if p < 0 || p as usize >= partitions {
                return Err(ClientError::UnknownPartition {
                    topic: record.topic.clone(),
                    partition: p,
                    partitions,
                }
                .into());
            }
        }
        let timestamp = record.timestamp.unwrap_or_else(wall_clock_ms);
        let fields = RecordFields::new(
            timestamp,
            record.key.as_deref(),
            record.value.as_deref(),
            &record.headers,
        );
        let size = fields.max_size();
        let max_request = inner.config.max_request_size;
        if size + HEADER_LEN > max_request {
            return Err(ProduceError::RecordTooLarge {
                size: size + HEADER_LEN,
                limit: max_request,
                setting: "max_request_size",
            });
        }
        let reservation = match shared.buffer.try_reserve(size)? {
            Some(r) => r,
            None => shared.buffer.reserve(size, deadline.at()).await?,
        };
        if shared.closed.load(Ordering::Acquire) {
            return Err(ProduceError::Closed);
        }

        // Partitions with a leader: looked up only when the sticky partitioner has
        // to choose (a new batch), not for every record.
        let available = || -> Vec<i32> {
            inner.cluster.with_metadata(|m| {
                m.topic(&record.topic)
                    .map(|t| {
                        t.partitions
                            .iter()
                            .filter(|p| p.leader.is_some())
                            .map(|p| p.partition)
                            .collect()
                    })
                    .unwrap_or_default()
            })
        };
        let mut closed_full_batch = false;
        let appended = {
            let mut state = shared.state.lock();
            let state = &mut *state;
            let (topic, same_as_last) = state.last_topic.share(&record.topic);
            // The last record's topic is in the set already.
            if !same_as_last && !state.topics.contains(&record.topic) {
                state.topics.insert(record.topic.clone());
            }
            let tp = |partition| TopicPartition {
                topic: topic.clone(),
                partition,
            };
            let tp = match (record.partition, &record.key) {
                (Some(p), _) => tp(p),
                (None, Some(key)) => tp(partition_for_key(key, partitions)),
                (None, None) => {
                    let p = match state.sticky.current(&record.topic, partitions) {
                        Some(p) => p,
                        None => state
                            .sticky
                            .partition(&record.topic, partitions, &available()),
                    };
                    let current = tp(p);
                    if state.accumulator.would_start_batch(&current, &fields) {
                        closed_full_batch = state.accumulator.close_open_batch(&current);
                        let next =
                            state
                                .sticky
                                .on_new_batch(&record.topic, p, partitions, &available());
                        tp(next)
                    } else {
                        current
                    }
                }
            };
            state
                .accumulator
                .append(&tp, fields, reservation, done, Instant::now)
        };
        if appended.new_batch || appended.batch_full || closed_full_batch {
            shared.wake.notify_one();
        }
        Ok(())
    }

    /// Sends everything buffered now without waiting for `linger_ms`, and waits
    /// until each of those records is acknowledged or failed.
    pub async fn flush(&self) {
        let shared = &self.inner.shared;
        let token = shared.state.lock().accumulator.begin_flush();
        shared.wake.notify_one();
        shared.wait_until(|s| s.accumulator.flushed(token)).await;
    }

    /// Stops accepting records, sends what is buffered, waits for every
    /// outstanding record to complete (bounded by `delivery_timeout_ms`), and stops
    /// the sender task.
    pub async fn close(&self) {
        let shared = &self.inner.shared;
        shared.begin_close();
        shared.buffer.close();
        shared.wait_until(|s| s.accumulator.all_complete()).await;
        let handle = self.inner.sender.lock().take();
        if let Some(handle) = handle {
            let _ = handle.await;
        }
    }

    /// The number of partitions of `topic`, waiting up to `max_block_ms` for its
    /// metadata.
    pub async fn partition_count(&self, topic: &str) -> Result<usize, ClientError> {
        let deadline = Instant::now() + Duration::from_millis(self.inner.config.max_block_ms);
        self.inner.cluster.wait_for_topic(topic, deadline).await
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::Acks;
    use crate::testing::{cluster_with_peer, Peer};
    use bytes::Bytes;
    use syncline_proto::{pb, ErrorCode};

    #[test]
    fn records_to_one_topic_share_its_name() {
        let mut last = LastTopic::default();
        let (a0, known) = last.share("a");
        assert!(!known, "the first record's topic is new");
        let (a2, known) = last.share("a");
        assert!(known && &*a2 == "a");
        assert!(Arc::ptr_eq(&a0, &a2), "one allocation for the name");
        let (b1, known) = last.share("b");
        assert!(!known && &*b1 == "b");
        let (a1, known) = last.share("a");
        assert!(!known && &*a1 == "a");
        assert!(!Arc::ptr_eq(&a0, &a1), "the last topic only is kept");
    }

    const MS: Duration = Duration::from_millis(1);

    /// A producer against a scripted broker. Unless a test says otherwise, it is
    /// not idempotent: the scripts answer plain produce requests.
    fn producer(mut config: ProducerConfig) -> (Producer, Peer) {
        config.enable_idempotence.get_or_insert(false);
        let (cluster, peer) = cluster_with_peer(config.client.clone(), 2);
        (Producer::with_cluster(config, cluster), peer)
    }

    fn produce(req: &pb::Request) -> &pb::ProduceRequest {
        match &req.body {
            Some(pb::request::Body::Produce(p)) => p,
            other => panic!("expected a produce request, got {other:?}"),
        }
    }

    /// Per partition: (records in the batch, its bytes).
    fn batches(req: &pb::Request) -> Vec<(i32, i32, Bytes)> {
        produce(req).topics[0]
            .partitions
            .iter()
            .map(|p| {
                assert_eq!(p.current_leader_epoch, Some(5));
                let h = syncline_proto::batch::validate(&p.records).unwrap();
                (p.partition, h.records_count, p.records.clone())
            })
            .collect()
    }

    fn answer(parts: &[(i32, ErrorCode, i64)]) -> pb::response::Body {
        pb::response::Body::Produce(pb::ProduceResponse {
            topics: vec![pb::ProduceTopicResponse {
                name: "t".into(),
                partitions: parts
                    .iter()
                    .map(
                        |&(partition, code, base_offset)| pb::ProducePartitionResponse {
                            partition,
                            error_code: code as i32,
                            base_offset,
                            acked_isr: vec![1, 2],
                            replication_factor: 3,
                            ..Default::default()
                        },
                    )
                    .collect(),
            }],
            throttle_time_ms: 0,
        })
    }

    async fn send_to(p: &Producer, partition: i32, value: &str) -> DeliveryFuture {
        p.enqueue(ProducerRecord::new("t", value.to_string()).with_partition(partition))
            .await
            .unwrap()
    }

    /// Records enqueued one after another are acknowledged in that order while
    /// the first connection to their leader is being made, with no error and no
    /// retry (not idempotent, five requests in flight: Kafka's producer keeps
    /// the order then). A request drained while the first one was still
    /// connecting opened a connection of its own; when that one was slower, a
    /// request drained after the first connection was made went out before it
    /// (the simulation's steady acks=1 load, seed 1 on branch quota2:
    /// 1-0-2 acknowledged at offset 1, 1-0-1 at 13).
    #[tokio::test(start_paused = true)]
    async fn records_keep_their_order_while_the_first_connection_is_made() {
        let config = ProducerConfig {
            acks: Acks::Leader,
            linger_ms: 0,
            enable_idempotence: Some(false),
            ..Default::default()
        };
        let cluster = crate::testing::cluster_unconnected(config.client.clone(), 1);
        let producer = Producer::with_cluster(config, cluster);
        // The first connect takes 10 ms, any later one 50 ms.
        let (accepted, mut streams) = tokio::sync::mpsc::unbounded_channel();
        let dials = Arc::new(std::sync::atomic::AtomicUsize::new(0));
        let counted = dials.clone();
        let dialer: crate::dial::Dialer = Arc::new(move |_addr| {
            let n = counted.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
            let accepted = accepted.clone();
            Box::pin(async move {
                tokio::time::sleep(if n == 0 { 10 * MS } else { 50 * MS }).await;
                let (client, broker) = tokio::io::duplex(1 << 20);
                let _ = accepted.send(broker);
                Ok(Box::new(client) as crate::dial::BoxStream)
            })
        });
        crate::dial::set_thread_dialer(Some(dialer));
        // The broker: each produce request's batch goes at the next offset.
        tokio::spawn(async move {
            let next = Arc::new(std::sync::atomic::AtomicI64::new(0));
            while let Some(stream) = streams.recv().await {
                let next = next.clone();
                tokio::spawn(async move {
                    let mut peer = Peer::new(stream);
                    while let Some(req) = peer.next_request().await {
                        let offset = next.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
                        peer.reply(&req, answer(&[(0, ErrorCode::None, offset)]))
                            .await;
                    }
                });
            }
        });
        let a = send_to(&producer, 0, "a").await;
        tokio::time::sleep(MS).await;
        let b = send_to(&producer, 0, "b").await;
        tokio::time::sleep(19 * MS).await;
        let c = send_to(&producer, 0, "c").await;
        let mut offsets = Vec::new();
        for ack in [a, b, c] {
            offsets.push(ack.await.expect("acknowledged").offset);
        }
        crate::dial::set_thread_dialer(None);
        assert_eq!(
            offsets,
            vec![0, 1, 2],
            "a, b, c acknowledged at these offsets"
        );
        assert_eq!(
            dials.load(std::sync::atomic::Ordering::SeqCst),
            1,
            "one connection"
        );
    }

    #[tokio::test(start_paused = true)]
    async fn a_sends_deadline_is_fixed_at_its_first_wait() {
        let mut deadline = BlockDeadline::new(Duration::from_millis(500));
        tokio::time::advance(Duration::from_millis(100)).await;
        let first_wait = Instant::now();
        assert_eq!(deadline.at(), first_wait + Duration::from_millis(500));
        tokio::time::advance(Duration::from_millis(300)).await;
        // A second wait (buffer memory after metadata) shares it.
        assert_eq!(deadline.at(), first_wait + Duration::from_millis(500));
    }

    #[tokio::test(start_paused = true)]
    async fn batches_are_combined_per_broker_retried_and_acknowledged_with_offsets() {
        let (producer, mut peer) = producer(ProducerConfig {
            max_in_flight_requests_per_connection: 1,
            ..Default::default()
        });
        let start = Instant::now();
        let mut acks = Vec::new();
        for v in ["a", "b", "c"] {
            acks.push(send_to(&producer, 1, v).await);
        }
        let other = send_to(&producer, 0, "d").await;

        // After linger_ms, one request carries both partitions' batches.
        let req = peer.recv().await;
        assert_eq!(start.elapsed(), 5 * MS);
        assert_eq!(produce(&req).acks, -1);
        let mut sent = batches(&req);
        sent.sort_by_key(|b| b.0);
        assert_eq!((sent[0].0, sent[0].1, sent[1].0, sent[1].1), (0, 1, 1, 3));
        peer.reply(
            &req,
            answer(&[
                (0, ErrorCode::None, 7),
                (1, ErrorCode::NotEnoughReplicas, -1),
            ]),
        )
        .await;
        let md = other.await.unwrap();
        assert_eq!((md.partition, md.offset), (0, 7));

        // Partition 1 is retried after retry_backoff_ms with the same bytes.
        let answered = Instant::now();
        let retry = peer.recv().await;
        assert_eq!(answered.elapsed(), 100 * MS);
        let resent = batches(&retry);
        assert_eq!(resent.len(), 1);
        assert_eq!(resent[0].2, sent[1].2);
        peer.reply(&retry, answer(&[(1, ErrorCode::None, 40)]))
            .await;
        for (i, ack) in acks.into_iter().enumerate() {
            let md = ack.await.unwrap();
            assert_eq!((md.partition, md.offset), (1, 40 + i as i64));
            assert_eq!(
                (md.acked_isr.to_vec(), md.replication_factor),
                (vec![1, 2], 3)
            );
            assert!(md.is_under_replicated());
        }
        producer.close().await;
        assert!(matches!(
            producer.enqueue(ProducerRecord::new("t", "late")).await,
            Err(ProduceError::Closed)
        ));
    }

    #[tokio::test(start_paused = true)]
    async fn a_fatal_error_fails_every_record_of_the_batch() {
        let (producer, mut peer) = producer(ProducerConfig::default());
        let acks = [
            send_to(&producer, 0, "a").await,
            send_to(&producer, 0, "b").await,
        ];
        let req = peer.recv().await;
        peer.reply(&req, answer(&[(0, ErrorCode::MessageTooLarge, -1)]))
            .await;
        for ack in acks {
            let err = ack.await.unwrap_err();
            assert_eq!(err.code(), Some(ErrorCode::MessageTooLarge));
        }
    }

    #[tokio::test(start_paused = true)]
    async fn retries_run_out_with_the_last_error() {
        let (producer, mut peer) = producer(ProducerConfig {
            retries: 2,
            ..Default::default()
        });
        let ack = send_to(&producer, 0, "a").await;
        for _ in 0..3 {
            let req = peer.recv().await;
            peer.reply(
                &req,
                answer(&[(0, ErrorCode::NotEnoughReplicasAfterAppend, -1)]),
            )
            .await;
        }
        let err = ack.await.unwrap_err();
        assert_eq!(err.code(), Some(ErrorCode::NotEnoughReplicasAfterAppend));
    }

    #[tokio::test(start_paused = true)]
    async fn acks_zero_completes_once_written_without_a_response() {
        let (producer, mut peer) = producer(ProducerConfig {
            acks: Acks::None,
            ..Default::default()
        });
        let ack = send_to(&producer, 1, "a").await;
        let req = peer.recv().await;
        assert_eq!(produce(&req).acks, 0);
        let md = ack.await.unwrap();
        assert_eq!((md.offset, md.acked_isr.len()), (-1, 0));
    }

    #[tokio::test(start_paused = true)]
    async fn flush_sends_without_waiting_for_linger() {
        let (producer, mut peer) = producer(ProducerConfig {
            linger_ms: 10_000,
            delivery_timeout_ms: 120_000,
            ..Default::default()
        });
        let start = Instant::now();
        let ack = send_to(&producer, 0, "a").await;
        let flush = tokio::spawn({
            let producer = producer.clone();
            async move { producer.flush().await }
        });
        let req = peer.recv().await;
        assert_eq!(start.elapsed(), Duration::ZERO);
        assert!(!flush.is_finished());
        peer.reply(&req, answer(&[(0, ErrorCode::None, 0)])).await;
        flush.await.unwrap();
        assert_eq!(ack.await.unwrap().offset, 0);
    }

    #[tokio::test(start_paused = true)]
    async fn full_buffer_blocks_send_until_an_acknowledgement_frees_it() {
        let (producer, mut peer) = producer(ProducerConfig {
            buffer_memory: 200,
            max_block_ms: 1_000,
            ..Default::default()
        });
        let value = "x".repeat(100);
        let first = send_to(&producer, 0, &value).await;
        let req = peer.recv().await;

        let start = Instant::now();
        let err = producer
            .enqueue(ProducerRecord::new("t", value.clone()).with_partition(0))
            .await
            .unwrap_err();
        assert!(
            matches!(
                err,
                ProduceError::BufferFull {
                    max_block_ms: 1_000,
                    ..
                }
            ),
            "{err:?}"
        );
        assert_eq!(start.elapsed(), 1_000 * MS);

        let waiting = tokio::spawn({
            let producer = producer.clone();
            let value = value.clone();
            async move {
                producer
                    .enqueue(ProducerRecord::new("t", value).with_partition(0))
                    .await
            }
        });
        tokio::time::sleep(100 * MS).await;
        assert!(!waiting.is_finished());
        peer.reply(&req, answer(&[(0, ErrorCode::None, 0)])).await;
        first.await.unwrap();
        assert!(waiting.await.unwrap().is_ok());

        let too_big = producer
            .enqueue(ProducerRecord::new("t", "y".repeat(300)))
            .await
            .unwrap_err();
        assert!(matches!(
            too_big,
            ProduceError::RecordTooLarge {
                setting: "buffer_memory",
                ..
            }
        ));
    }

    #[tokio::test(start_paused = true)]
    async fn keyed_records_follow_the_hash_and_bad_partitions_are_refused() {
        let (producer, mut peer) = producer(ProducerConfig::default());
        let ack = producer
            .enqueue(ProducerRecord::new("t", "v").with_key("foobar"))
            .await
            .unwrap();
        let req = peer.recv().await;
        let partition = batches(&req)[0].0;
        assert_eq!(
            partition,
            crate::partitioner::partition_for_key(b"foobar", 2)
        );
        peer.reply(&req, answer(&[(partition, ErrorCode::None, 3)]))
            .await;
        assert_eq!(ack.await.unwrap().partition, partition);

        let err = producer
            .enqueue(ProducerRecord::new("t", "v").with_partition(2))
            .await
            .unwrap_err();
        assert!(err.to_string().contains("has no partition 2"), "{err}");
    }

    #[tokio::test(start_paused = true)]
    async fn a_full_keyless_batch_goes_at_once_when_the_partitioner_moves_on() {
        // Regression: the batch a record did not fit in used to wait out linger_ms
        // once the sticky partitioner had moved to another partition.
        let (producer, mut peer) = producer(ProducerConfig {
            linger_ms: 10_000,
            batch_size: 200,
            ..Default::default()
        });
        let start = Instant::now();
        let value = "x".repeat(80);
        let first = producer
            .enqueue(ProducerRecord::new("t", value.clone()))
            .await
            .unwrap();
        // Does not fit beside the first: a new batch on the other partition.
        let second = producer
            .enqueue(ProducerRecord::new("t", value))
            .await
            .unwrap();
        let req = peer.recv().await;
        assert_eq!(start.elapsed(), Duration::ZERO, "sent without lingering");
        // A ready broker takes the front batch of every partition it leads (as
        // Kafka's drain does): the second batch rides along.
        let sent = batches(&req);
        assert_eq!(
            sent.iter().map(|b| b.1).collect::<Vec<_>>(),
            [1, 1],
            "one record per batch"
        );
        peer.reply(
            &req,
            answer(&[
                (sent[0].0, ErrorCode::None, 0),
                (sent[1].0, ErrorCode::None, 0),
            ]),
        )
        .await;
        first.await.unwrap();
        second.await.unwrap();
    }

    #[tokio::test(start_paused = true)]
    async fn full_batches_are_pipelined_up_to_max_in_flight() {
        for max_in_flight in [5, 1] {
            let (producer, mut peer) = producer(ProducerConfig {
                batch_size: 100,
                max_in_flight_requests_per_connection: max_in_flight,
                ..Default::default()
            });
            let start = Instant::now();
            let value = "x".repeat(80);
            let mut acks = Vec::new();
            for _ in 0..3 {
                acks.push(send_to(&producer, 0, &value).await);
            }
            // Two full batches go out at once, each its own request (one batch per
            // partition per request), unless only one request may be in flight.
            let first = peer.recv().await;
            assert_eq!(start.elapsed(), Duration::ZERO);
            if max_in_flight > 1 {
                let second = peer.recv().await;
                assert_eq!(start.elapsed(), Duration::ZERO);
                peer.reply(&first, answer(&[(0, ErrorCode::None, 0)])).await;
                peer.reply(&second, answer(&[(0, ErrorCode::None, 1)]))
                    .await;
            } else {
                tokio::time::sleep(50 * MS).await;
                peer.reply(&first, answer(&[(0, ErrorCode::None, 0)])).await;
                let second = peer.recv().await;
                assert_eq!(start.elapsed(), 50 * MS);
                peer.reply(&second, answer(&[(0, ErrorCode::None, 1)]))
                    .await;
            }
            let third = peer.recv().await;
            peer.reply(&third, answer(&[(0, ErrorCode::None, 2)])).await;
            let offsets: Vec<i64> = futures::future::join_all(acks)
                .await
                .into_iter()
                .map(|r| r.unwrap().offset)
                .collect();
            assert_eq!(offsets, [0, 1, 2], "max_in_flight {max_in_flight}");
        }
    }

    #[tokio::test(start_paused = true)]
    async fn an_idempotent_producer_pipelines_and_retries_in_order_with_the_same_bytes() {
        let (producer, mut peer) = producer(ProducerConfig {
            batch_size: 100,
            enable_idempotence: Some(true),
            ..Default::default()
        });
        let value = "x".repeat(80);
        let mut acks = Vec::new();
        for _ in 0..3 {
            acks.push(send_to(&producer, 0, &value).await);
        }
        let init = peer.recv().await;
        assert!(matches!(
            init.body,
            Some(pb::request::Body::InitProducerId(_))
        ));
        peer.reply(
            &init,
            pb::response::Body::InitProducerId(pb::InitProducerIdResponse {
                producer_id: 900,
                producer_epoch: 2,
                ..Default::default()
            }),
        )
        .await;
        // Three batches of partition 0 in flight at once (two full ones, then the
        // last after linger_ms), numbered 0, 1 and 2.
        let sent = [peer.recv().await, peer.recv().await, peer.recv().await];
        let numbering = |req: &pb::Request| {
            let h = syncline_proto::batch::validate(&batches(req)[0].2).unwrap();
            (h.producer_id, h.producer_epoch, h.base_sequence)
        };
        let numbers: Vec<_> = sent.iter().map(numbering).collect();
        assert_eq!(numbers, [(900, 2, 0), (900, 2, 1), (900, 2, 2)]);
        // The leader refuses the first (too few replicas in sync), so it finds the
        // later two out of order; their answers happen to come first.
        for req in &sent[1..] {
            peer.reply(req, answer(&[(0, ErrorCode::OutOfOrderSequenceNumber, -1)]))
                .await;
        }
        peer.reply(&sent[0], answer(&[(0, ErrorCode::NotEnoughReplicas, -1)]))
            .await;
        // Retried one at a time, in order, with the same bytes.
        for (i, original) in sent.iter().enumerate() {
            let retry = peer.recv().await;
            assert_eq!(batches(&retry)[0].2, batches(original)[0].2, "batch {i}");
            peer.reply(&retry, answer(&[(0, ErrorCode::None, 10 + i as i64)]))
                .await;
        }
        let offsets: Vec<i64> = futures::future::join_all(acks)
            .await
            .into_iter()
            .map(|r| r.unwrap().offset)
            .collect();
        assert_eq!(offsets, [10, 11, 12]);
    }
}
