//! The record accumulator: per-partition queues of batches waiting to be sent.
//! Pure (time comes in as `now`): the producer's sender task asks it which
//! brokers have sendable batches, drains one request's worth per broker, and puts
//! failed batches back at the front for a retry.
//!
//! A batch is sendable when it is full (`batch_size`), when it has lingered
//! `linger_ms`, when a flush or close asks for everything, or — for a retry —
//! when its backoff has passed. A draining broker takes the front batch of every
//! partition it leads (one batch per partition per request) up to
//! `max_request_size`.

use std::collections::{BTreeMap, BTreeSet, HashMap, HashSet, VecDeque};
use std::sync::Arc;
use std::time::Duration;

use bytes::{Bytes, BytesMut};
use syncline_proto::batch::{
    last_sequence, next_sequence, restamp_producer, BatchBuilder, RecordLen, HEADER_LEN,
};
use syncline_proto::compression::Compression;
use syncline_proto::pb;
use tokio::sync::oneshot;
use tokio::time::Instant;

use crate::buffer::Reservation;
use crate::error::ProduceError;
use crate::record::{Header, RecordMetadata};
use syncline_proto::ErrorCode;
use syncline_proto::TopicPartition;

/// What a callback given to [`crate::Producer::send_with_callback`] looks like.
pub(crate) type Callback = Box<dyn FnOnce(Result<RecordMetadata, ProduceError>) + Send>;

/// Where one record's outcome goes.
pub(crate) enum DeliverySender {
    /// A [`crate::DeliveryFuture`] waits on the other end.
    Future(oneshot::Sender<Result<RecordMetadata, ProduceError>>),
    /// Called on the sender task the moment the outcome is known (Kafka's send
    /// callback): no task wake-up between the response and the caller's code.
    Callback(Callback),
}

impl DeliverySender {
    fn deliver(self, outcome: Result<RecordMetadata, ProduceError>) {
        match self {
            // The future may have been dropped: nobody wants the outcome then.
            DeliverySender::Future(tx) => {
                let _ = tx.send(outcome);
            }
            // A panicking callback must not take the sender task down with it:
            // every later record (and flush, and close) would wait forever.
            DeliverySender::Callback(f) => {
                let call = std::panic::AssertUnwindSafe(|| f(outcome));
                if std::panic::catch_unwind(call).is_err() {
                    tracing::error!("a send callback panicked; the producer goes on");
                }
            }
        }
    }
}

impl std::fmt::Debug for DeliverySender {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            DeliverySender::Future(_) => "Future",
            DeliverySender::Callback(_) => "Callback",
        })
    }
}

impl From<oneshot::Sender<Result<RecordMetadata, ProduceError>>> for DeliverySender {
    fn from(tx: oneshot::Sender<Result<RecordMetadata, ProduceError>>) -> Self {
        DeliverySender::Future(tx)
    }
}

/// A record waiting in a batch.
#[derive(Debug)]
pub(crate) struct PendingRecord {
    pub(crate) timestamp: i64,
    pub(crate) done: DeliverySender,
}

/// The fields of a record to append, borrowed, with their encoded length
/// measured once.
#[derive(Debug, Clone, Copy)]
pub(crate) struct RecordFields<'a> {
    pub(crate) timestamp: i64,
    pub(crate) key: Option<&'a [u8]>,
    pub(crate) value: Option<&'a [u8]>,
    pub(crate) headers: &'a [Header],
    len: RecordLen,
}

impl<'a> RecordFields<'a> {
    pub(crate) fn new(
        timestamp: i64,
        key: Option<&'a [u8]>,
        value: Option<&'a [u8]>,
        headers: &'a [Header],
    ) -> Self {
        RecordFields {
            timestamp,
            key,
            value,
            headers,
            len: RecordLen::of(key, value, &header_refs(headers)),
        }
    }

    /// Encoded size at the given position in a batch.
    fn size_at(&self, offset_delta: i32, timestamp_delta: i64) -> usize {
        self.len.at(offset_delta, timestamp_delta)
    }

    /// An upper bound of the encoded size wherever it lands (largest deltas).
    pub(crate) fn max_size(&self) -> usize {
        self.size_at(i32::MAX, i64::MAX)
    }
}

/// Headers as the batch encoding borrows them (no allocation for none).
fn header_refs(headers: &[Header]) -> Vec<(&[u8], Option<&[u8]>)> {
    headers
        .iter()
        .map(|h| (h.key.as_bytes(), h.value.as_deref()))
        .collect()
}

/// Records of one partition sent (and retried) as one unit.
#[derive(Debug)]
pub(crate) struct ProducerBatch {
    pub(crate) id: u64,
    pub(crate) tp: TopicPartition,
    builder: Option<BatchBuilder>,
    /// The finished bytes, kept so that a retry resends exactly the same batch.
    encoded: Option<Bytes>,
    pub(crate) records: Vec<PendingRecord>,
    _reservation: Reservation,
    created_at: Instant,
    /// Sends so far.
    pub(crate) attempts: u32,
    retry_at: Option<Instant>,
    /// The error of the last attempt, reported if the batch then expires.
    pub(crate) last_error: Option<ProduceError>,
    /// The leader epoch of the leader the batch was drained for.
    pub(crate) leader_epoch: i32,
    /// `compression.type`: how the records are compressed when the batch is encoded.
    compression: Compression,
    /// No more appends (the bytes are encoded when first sent).
    appends_closed: bool,
    /// An idempotent producer's numbering of the encoded bytes: the producer
    /// generation (see [`Accumulator`]) and the base sequence.
    stamp: Option<(u32, i32)>,
    /// The leader refused the last attempt's numbering (a sequence or producer
    /// epoch error): nothing of that attempt was written, so the batch may be
    /// numbered anew. Cleared at every send.
    numbering_refused: bool,
}

impl ProducerBatch {
    fn new(
        id: u64,
        tp: TopicPartition,
        builder: BatchBuilder,
        compression: Compression,
        now: Instant,
    ) -> Self {
        ProducerBatch {
            compression,
            appends_closed: false,
            stamp: None,
            numbering_refused: false,
            id,
            tp,
            builder: Some(builder),
            encoded: None,
            records: Vec::new(),
            _reservation: Reservation::empty(),
            created_at: now,
            attempts: 0,
            retry_at: None,
            last_error: None,
            leader_epoch: -1,
        }
    }

    /// Size of the batch on the wire.
    pub(crate) fn size_bytes(&self) -> usize {
        match (&self.encoded, &self.builder) {
            (Some(b), _) => b.len(),
            (None, Some(b)) => b.size_bytes(),
            (None, None) => 0,
        }
    }

    fn is_open(&self) -> bool {
        self.builder.is_some() && !self.appends_closed
    }

    /// Stops appends (idempotent); the bytes are encoded when first sent.
    fn close(&mut self) {
        self.appends_closed = true;
    }

    /// Encodes the batch once, as an idempotent producer's batch when `producer`
    /// (id, epoch, base sequence) is given; later calls keep the first bytes.
    fn encode(&mut self, producer: Option<(i64, i16, i32)>) {
        self.close();
        if let Some(mut builder) = self.builder.take() {
            if !builder.is_empty() {
                if let Some((id, epoch, sequence)) = producer {
                    builder.set_producer(id, epoch, sequence);
                }
                self.encoded = Some(builder.finish_with(self.compression));
            }
        }
    }

    /// Numbers encoded bytes anew: another producer epoch (or id) and sequence.
    fn restamp(&mut self, producer_id: i64, producer_epoch: i16, base_sequence: i32) {
        if let Some(bytes) = self.encoded.take() {
            let mut bytes = bytes.to_vec();
            restamp_producer(&mut bytes, producer_id, producer_epoch, base_sequence);
            self.encoded = Some(Bytes::from(bytes));
        }
    }

    /// Whether the bytes are encoded already (sent before).
    fn is_encoded(&self) -> bool {
        self.encoded.is_some()
    }

    /// The batch's bytes (encoding it, without a producer id, if not yet).
    pub(crate) fn bytes(&mut self) -> Bytes {
        self.encode(None);
        self.encoded.clone().unwrap_or_default()
    }

    /// Would this record fit in the open batch?
    fn fits(&self, record: &RecordFields<'_>, batch_size: usize) -> bool {
        let Some(b) = self.builder.as_ref().filter(|_| !self.appends_closed) else {
            return false;
        };
        let base = self
            .records
            .first()
            .map_or(record.timestamp, |r| r.timestamp);
        let size = record.size_at(b.len() as i32, record.timestamp - base);
        b.is_empty() || b.size_bytes() + size <= batch_size
    }

    /// When the batch reaches its delivery timeout.
    pub(crate) fn deadline(&self, delivery_timeout: Duration) -> Instant {
        self.created_at + delivery_timeout
    }

    // Outcomes are delivered before the accumulator hears the batch is complete
    // ([`Accumulator::completed`]): `flush` returns only once every callback of
    // its records has run and every future is resolved, as in Kafka.

    /// Acknowledges every record: offsets are `base_offset` + the record's index.
    pub(crate) fn complete(&mut self, response: &pb::ProducePartitionResponse) {
        // One allocation per batch, not per record.
        let acked_isr: Arc<[i32]> = response.acked_isr.as_slice().into();
        for (index, record) in std::mem::take(&mut self.records).into_iter().enumerate() {
            let timestamp = if response.log_append_time_ms > 0 {
                response.log_append_time_ms
            } else {
                record.timestamp
            };
            record.done.deliver(Ok(RecordMetadata {
                topic: self.tp.topic.clone(),
                partition: self.tp.partition,
                offset: response.base_offset + index as i64,
                acked_isr: acked_isr.clone(),
                replication_factor: response.replication_factor,
                timestamp,
            }));
        }
    }

    /// Completes every record of an `acks=0` batch: sent, offsets unknown.
    pub(crate) fn complete_unacknowledged(&mut self) {
        let none: Arc<[i32]> = Arc::from([]);
        for record in std::mem::take(&mut self.records) {
            record.done.deliver(Ok(RecordMetadata {
                topic: self.tp.topic.clone(),
                partition: self.tp.partition,
                offset: -1,
                acked_isr: none.clone(),
                replication_factor: 0,
                timestamp: record.timestamp,
            }));
        }
    }

    /// Fails every record with `error`.
    pub(crate) fn fail(&mut self, error: &ProduceError) {
        for record in std::mem::take(&mut self.records) {
            record.done.deliver(Err(error.clone()));
        }
    }
}

/// What `append` did.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Appended {
    /// The record started a new batch.
    pub(crate) new_batch: bool,
    /// A batch of the partition is full: the sender should look now rather than
    /// at the linger deadline.
    pub(crate) batch_full: bool,
}

/// Which brokers have something to send, and when to look again.
#[derive(Debug, Default, PartialEq, Eq)]
pub(crate) struct ReadyCheck {
    pub(crate) brokers: BTreeSet<i32>,
    /// The earliest linger or backoff deadline of a batch not yet sendable.
    pub(crate) next_check: Option<Instant>,
    /// Some partition with batches has no known leader: refresh metadata.
    pub(crate) unknown_leader: bool,
}

/// Settings the accumulator needs.
#[derive(Debug, Clone, Copy)]
pub(crate) struct AccumulatorConfig {
    pub(crate) batch_size: usize,
    pub(crate) linger: Duration,
    pub(crate) delivery_timeout: Duration,
    /// With one request in flight per connection, partitions with a batch in
    /// flight are muted so that a retry cannot be overtaken.
    pub(crate) guarantee_order: bool,
    /// `compression.type`.
    pub(crate) compression: Compression,
    /// `enable.idempotence`: batches are numbered per partition; a partition has
    /// up to `max_in_flight` batches in flight, and a retry goes only once no
    /// earlier batch of its partition is (so the log keeps the send order).
    pub(crate) idempotent: bool,
    /// Batches of one partition in flight at most (idempotent producer).
    pub(crate) max_in_flight: usize,
}

/// Per-partition batch queues.
#[derive(Debug)]
pub(crate) struct Accumulator {
    config: AccumulatorConfig,
    queues: BTreeMap<TopicPartition, VecDeque<ProducerBatch>>,
    muted: HashSet<TopicPartition>,
    next_batch_id: u64,
    /// Batches (queued or in flight) not completed yet, by id.
    incomplete: BTreeSet<u64>,
    /// Batches with an id below this are sendable at once (a flush is waiting).
    flush_before: u64,
    closing: bool,
    /// Rotates the first partition a drain looks at, so that a request full at
    /// `max_request_size` does not always leave out the same partitions.
    drain_rotation: usize,
    /// The idempotent producer's id and epoch, once InitProducerId answered.
    producer: Option<(i64, i16)>,
    /// Counts the idempotent producer's (id, epoch) pairs: a batch numbered in an
    /// older generation is numbered again before it is sent again.
    generation: u32,
    /// The idempotent producer's next sequence number per partition.
    sequences: HashMap<TopicPartition, i32>,
    /// The idempotent producer's batches in flight per partition: batch id ->
    /// the generation it was numbered in.
    in_flight: HashMap<TopicPartition, BTreeMap<u64, u32>>,
    /// Buffers of completed batches, for new ones ([`Accumulator::recycle`]).
    spare_buffers: Vec<BytesMut>,
}

/// Completed batches' buffers kept for reuse at most: in a steady stream about
/// as many as batches in flight; each is at most `2 * batch_size`, kept
/// outside `buffer_memory`.
const SPARE_BUFFERS_MAX: usize = 8;

impl Accumulator {
    pub(crate) fn new(config: AccumulatorConfig) -> Self {
        Accumulator {
            config,
            queues: BTreeMap::new(),
            muted: HashSet::new(),
            next_batch_id: 0,
            incomplete: BTreeSet::new(),
            flush_before: 0,
            closing: false,
            drain_rotation: 0,
            producer: None,
            generation: 0,
            sequences: HashMap::new(),
            in_flight: HashMap::new(),
            spare_buffers: Vec::new(),
        }
    }

    /// Whether batches may be drained: an idempotent producer first needs its id.
    pub(crate) fn needs_producer_id(&self) -> bool {
        self.config.idempotent && self.producer.is_none()
    }

    /// The idempotent producer's id and epoch (InitProducerId's answer).
    pub(crate) fn set_producer(&mut self, producer_id: i64, producer_epoch: i16) {
        self.producer = Some((producer_id, producer_epoch));
        self.generation += 1;
    }

    /// The idempotent producer starts a new generation, as Kafka's does after a
    /// sequence it cannot resolve (KIP-360): the next epoch of its id (a new id
    /// once the epoch is exhausted, or when `new_id`), sequence 0 in every
    /// partition. A batch numbered before is numbered again when next sent only
    /// if it was never sent or a leader refused its numbering; one sent before
    /// and not refused (in any partition: the trouble was another batch's) may
    /// be in a leader's log, whose producer state recognises a retry only under
    /// that numbering, so it keeps it (Kafka rewrites only the partitions that
    /// asked for the bump), and its partition's new batches wait for it. Only the
    /// first batch of a generation to report trouble resets it.
    fn reset_producer(&mut self, batch_generation: u32, new_id: bool) {
        if batch_generation != self.generation {
            return;
        }
        self.sequences.clear();
        match self.producer {
            Some((id, epoch)) if !new_id && epoch < i16::MAX => {
                tracing::info!(
                    producer_id = id,
                    producer_epoch = epoch + 1,
                    "idempotent producer: a new epoch"
                );
                self.set_producer(id, epoch + 1);
            }
            _ => {
                tracing::info!("idempotent producer: asking for a new producer id");
                self.producer = None;
                self.generation += 1;
            }
        }
    }

    /// A batch that was sent failed for good (or expired): its sequence numbers
    /// may be a gap the leader would refuse every later batch for, so the
    /// idempotent producer starts a new generation.
    pub(crate) fn producer_failed(&mut self, batch: &ProducerBatch) {
        if let Some((generation, _)) = batch.stamp.filter(|_| self.config.idempotent) {
            self.reset_producer(generation, false);
        }
    }

    /// For an idempotent producer's batch refused with a sequence or producer
    /// error: whether to retry it (`None`: not such an error, decide as usual).
    /// The leader wrote nothing, so a retry is safe; what it takes:
    /// - numbered in an older generation: nothing more (it is numbered again);
    /// - `OUT_OF_ORDER_SEQUENCE_NUMBER` behind an earlier batch of its partition
    ///   still in flight or waiting for its retry: that one failed first, this
    ///   one follows it;
    /// - otherwise (out of order with nothing before it, `UNKNOWN_PRODUCER_ID`
    ///   after the leader forgot the producer, an epoch the leader fenced): a new
    ///   generation, and the retry starts its sequence again.
    pub(crate) fn sequence_error(
        &mut self,
        batch: &mut ProducerBatch,
        code: ErrorCode,
    ) -> Option<bool> {
        let (generation, _) = batch.stamp.filter(|_| self.config.idempotent)?;
        if !matches!(
            code,
            ErrorCode::OutOfOrderSequenceNumber
                | ErrorCode::UnknownProducerId
                | ErrorCode::InvalidProducerEpoch
        ) {
            return None;
        }
        batch.numbering_refused = true;
        if generation != self.generation {
            return Some(true);
        }
        let earlier_in_flight = self
            .in_flight
            .get(&batch.tp)
            .is_some_and(|f| f.range(..batch.id).any(|(_, g)| *g == generation));
        let earlier_queued = self.queues.get(&batch.tp).is_some_and(|q| {
            q.iter()
                .any(|b| b.id < batch.id && b.stamp.is_some_and(|(g, _)| g == generation))
        });
        if code == ErrorCode::OutOfOrderSequenceNumber && (earlier_in_flight || earlier_queued) {
            return Some(true);
        }
        tracing::warn!(tp = %batch.tp, %code, "idempotent producer: the leader refused the batch's numbering");
        self.reset_producer(generation, code == ErrorCode::InvalidProducerEpoch);
        Some(true)
    }

    /// Whether the idempotent producer may send `front`, the first queued batch of
    /// `tp`, now: fewer than `max_in_flight` of the partition's batches in flight,
    /// none of them numbered in an older generation, and for a retry none earlier
    /// than it (a batch numbered in an older generation waits for all).
    fn may_send(&self, tp: &TopicPartition, front: &ProducerBatch) -> bool {
        if !self.config.idempotent {
            return !self.muted.contains(tp);
        }
        let Some(flying) = self.in_flight.get(tp) else {
            return true;
        };
        if flying.len() >= self.config.max_in_flight
            || flying.values().any(|g| *g != self.generation)
        {
            return false;
        }
        match front.stamp {
            None => true,
            Some((g, _)) if g == self.generation => {
                flying.keys().next().is_none_or(|first| *first > front.id)
            }
            Some(_) => flying.is_empty(),
        }
    }

    /// Numbers a batch about to be sent: an idempotent producer's next sequence
    /// numbers of its partition are its own from now on (a retry resends the same
    /// bytes, and the leader writes them once), unless the producer moved to a
    /// new generation since and a leader refused the batch's numbering, which
    /// numbers it anew (see [`Accumulator::reset_producer`]).
    fn encode_for_send(&mut self, batch: &mut ProducerBatch) {
        let current = self.generation;
        let refused = std::mem::take(&mut batch.numbering_refused);
        if batch.is_encoded() && batch.stamp.is_none_or(|(g, _)| g == current || !refused) {
            return;
        }
        let Some((id, epoch)) = self.producer.filter(|_| self.config.idempotent) else {
            batch.encode(None);
            return;
        };
        let next = self.sequences.entry(batch.tp.clone()).or_insert(0);
        let first = *next;
        let count = i32::try_from(batch.records.len()).unwrap_or(i32::MAX);
        *next = next_sequence(last_sequence(first, count));
        if batch.is_encoded() {
            batch.restamp(id, epoch, first);
        } else {
            batch.encode(Some((id, epoch, first)));
        }
        batch.stamp = Some((current, first));
    }

    /// True if appending this record to `tp` would start a new batch.
    pub(crate) fn would_start_batch(&self, tp: &TopicPartition, record: &RecordFields<'_>) -> bool {
        !self
            .queues
            .get(tp)
            .and_then(|q| q.back())
            .is_some_and(|b| b.fits(record, self.config.batch_size))
    }

    /// Closes `tp`'s open batch to further records, making it sendable now; true
    /// if there was one. For a batch a record did not fit in while the next batch
    /// starts on another partition (the sticky partitioner moving on): as full as
    /// it gets, it must not wait out `linger_ms` (Kafka closes it for appends too).
    pub(crate) fn close_open_batch(&mut self, tp: &TopicPartition) -> bool {
        match self.queues.get_mut(tp).and_then(|q| q.back_mut()) {
            Some(batch) if batch.is_open() => {
                batch.close();
                true
            }
            _ => false,
        }
    }

    /// Appends a record to the partition's open batch, or to a new one (created
    /// at `now()`: the clock is read only for a new batch).
    pub(crate) fn append(
        &mut self,
        tp: &TopicPartition,
        record: RecordFields<'_>,
        reservation: Reservation,
        done: impl Into<DeliverySender>,
        now: impl FnOnce() -> Instant,
    ) -> Appended {
        let batch_size = self.config.batch_size;
        // Look up before inserting: the key is cloned only for a new partition.
        let queue = match self.queues.get_mut(tp) {
            Some(queue) => queue,
            None => self.queues.entry(tp.clone()).or_default(),
        };
        let new_batch = !queue.back().is_some_and(|b| b.fits(&record, batch_size));
        if new_batch {
            if let Some(last) = queue.back_mut() {
                last.close();
            }
            let id = self.next_batch_id;
            self.next_batch_id += 1;
            self.incomplete.insert(id);
            let builder = match self.spare_buffers.pop() {
                Some(buf) => BatchBuilder::with_buffer(record.timestamp, buf),
                None => {
                    BatchBuilder::with_capacity(record.timestamp, record.max_size().min(batch_size))
                }
            };
            queue.push_back(ProducerBatch::new(
                id,
                tp.clone(),
                builder,
                self.config.compression,
                now(),
            ));
        }
        let batch = queue.back_mut().expect("a batch was just ensured");
        let builder = batch.builder.as_mut().expect("the back batch is open");
        builder.push_measured(
            record.len,
            record.timestamp,
            record.key,
            record.value,
            &header_refs(record.headers),
        );
        batch.records.push(PendingRecord {
            timestamp: record.timestamp,
            done: done.into(),
        });
        batch._reservation.merge(reservation);
        let batch_full =
            queue.len() > 1 || queue.back().is_some_and(|b| b.size_bytes() >= batch_size);
        Appended {
            new_batch,
            batch_full,
        }
    }

    fn sendable(
        &self,
        batch: &ProducerBatch,
        queue_len: usize,
        now: Instant,
    ) -> Result<(), Instant> {
        if let Some(at) = batch.retry_at {
            return if now >= at { Ok(()) } else { Err(at) };
        }
        let linger_end = batch.created_at + self.config.linger;
        if queue_len > 1
            || !batch.is_open()
            || batch.size_bytes() >= self.config.batch_size
            || batch.id < self.flush_before
            || self.closing
            || now >= linger_end
        {
            Ok(())
        } else {
            Err(linger_end)
        }
    }

    /// The brokers that lead a partition with a sendable batch.
    pub(crate) fn ready(
        &self,
        now: Instant,
        leader_of: impl Fn(&TopicPartition) -> Option<(i32, i32)>,
    ) -> ReadyCheck {
        let mut check = ReadyCheck::default();
        for (tp, queue) in &self.queues {
            let Some(first) = queue.front() else { continue };
            if !self.may_send(tp, first) {
                continue;
            }
            match self.sendable(first, queue.len(), now) {
                Ok(()) => match leader_of(tp) {
                    Some((leader, _)) => {
                        check.brokers.insert(leader);
                    }
                    None => check.unknown_leader = true,
                },
                Err(at) => {
                    check.next_check = Some(check.next_check.map_or(at, |c| c.min(at)));
                }
            }
        }
        check
    }

    /// Takes one request's worth of batches for `broker`: the front batch of each
    /// partition it leads (not muted, not backing off), while the total stays
    /// within `max_request_size` (one batch is always taken).
    pub(crate) fn drain(
        &mut self,
        broker: i32,
        leader_of: impl Fn(&TopicPartition) -> Option<(i32, i32)>,
        max_request_size: usize,
        now: Instant,
    ) -> Vec<ProducerBatch> {
        if self.needs_producer_id() {
            return Vec::new();
        }
        let tps: Vec<TopicPartition> = self
            .queues
            .iter()
            .filter(|(tp, q)| q.front().is_some_and(|front| self.may_send(tp, front)))
            .map(|(tp, _)| tp.clone())
            .collect();
        if tps.is_empty() {
            return Vec::new();
        }
        let start = self.drain_rotation % tps.len();
        self.drain_rotation = self.drain_rotation.wrapping_add(1);
        let mut drained = Vec::new();
        let mut size = 0;
        for tp in tps[start..].iter().chain(&tps[..start]) {
            let Some((leader, epoch)) = leader_of(tp) else {
                continue;
            };
            if leader != broker {
                continue;
            }
            let queue = self.queues.get_mut(tp).expect("listed above");
            let front = queue.front().expect("non-empty");
            if front.retry_at.is_some_and(|at| now < at) {
                continue;
            }
            if !drained.is_empty() && size + front.size_bytes() > max_request_size {
                break;
            }
            let mut batch = queue.pop_front().expect("non-empty");
            self.encode_for_send(&mut batch);
            size += batch.size_bytes();
            batch.attempts += 1;
            batch.retry_at = None;
            batch.leader_epoch = epoch;
            if self.config.idempotent {
                // The generation of its numbering (an older one for a batch
                // that keeps it).
                let generation = batch.stamp.map_or(self.generation, |(g, _)| g);
                self.in_flight
                    .entry(tp.clone())
                    .or_default()
                    .insert(batch.id, generation);
            } else if self.config.guarantee_order {
                self.muted.insert(tp.clone());
            }
            drained.push(batch);
        }
        self.queues.retain(|_, q| !q.is_empty());
        drained
    }

    /// Puts a failed batch back in its queue, to be sent again after `backoff`:
    /// in the order the batches were made, ahead of every later one (several of a
    /// partition's batches may come back from flight, in any order).
    pub(crate) fn reenqueue(&mut self, mut batch: ProducerBatch, backoff: Duration, now: Instant) {
        self.landed(&batch);
        batch.retry_at = Some(now + backoff);
        let queue = self.queues.entry(batch.tp.clone()).or_default();
        let at = queue.partition_point(|b| b.id < batch.id);
        queue.insert(at, batch);
    }

    /// A batch came back from flight.
    fn landed(&mut self, batch: &ProducerBatch) {
        self.muted.remove(&batch.tp);
        if let Some(flying) = self.in_flight.get_mut(&batch.tp) {
            flying.remove(&batch.id);
            if flying.is_empty() {
                self.in_flight.remove(&batch.tp);
            }
        }
    }

    /// A batch sent or retried is done (acknowledged or failed), its outcomes
    /// delivered.
    pub(crate) fn completed(&mut self, batch: &ProducerBatch) {
        self.landed(batch);
        self.incomplete.remove(&batch.id);
    }

    /// A batch's outcome is delivered: [`Accumulator::completed`], then its
    /// buffer kept for a later batch ([`Accumulator::recycle`]).
    pub(crate) fn finished(&mut self, batch: ProducerBatch) {
        self.completed(&batch);
        self.recycle(batch);
    }

    /// Keeps a completed batch's buffer for a later batch, if nothing else
    /// holds its bytes any more (the request that carried them is written) and
    /// fewer than [`SPARE_BUFFERS_MAX`] are kept. A new batch's buffer would
    /// grow by doubling up to `batch_size`, copying the records at each step,
    /// and a fresh buffer of `batch_size` page-faults on first touch; a reused
    /// one does neither.
    pub(crate) fn recycle(&mut self, batch: ProducerBatch) {
        if self.spare_buffers.len() >= SPARE_BUFFERS_MAX {
            return;
        }
        let Some(buf) = batch.encoded.and_then(|b| b.try_into_mut().ok()) else {
            return;
        };
        // A batch of one record larger than `batch_size` is not worth keeping.
        if buf.capacity() <= 2 * (self.config.batch_size + HEADER_LEN) {
            self.spare_buffers.push(buf);
        }
    }

    /// An expired batch's outcomes are delivered. Unlike [`Accumulator::completed`]
    /// its partition stays muted: it never was in flight, another batch may be.
    pub(crate) fn expired_done(&mut self, batch: &ProducerBatch) {
        self.incomplete.remove(&batch.id);
    }

    /// Removes the queued batches past their delivery timeout; they stay
    /// incomplete until [`Accumulator::expired_done`].
    pub(crate) fn expire(&mut self, now: Instant) -> Vec<ProducerBatch> {
        let timeout = self.config.delivery_timeout;
        let mut expired = Vec::new();
        for queue in self.queues.values_mut() {
            while queue.front().is_some_and(|b| now >= b.deadline(timeout)) {
                expired.push(queue.pop_front().expect("checked"));
            }
        }
        self.queues.retain(|_, q| !q.is_empty());
        expired
    }

    /// Removes every queued batch (the producer cannot send any: it may not
    /// get an id); they stay incomplete until [`Accumulator::expired_done`].
    pub(crate) fn take_queued(&mut self) -> Vec<ProducerBatch> {
        let mut taken = Vec::new();
        for queue in self.queues.values_mut() {
            taken.extend(queue.drain(..));
        }
        self.queues.clear();
        taken
    }

    /// The earliest delivery deadline of a queued batch.
    pub(crate) fn next_deadline(&self) -> Option<Instant> {
        let timeout = self.config.delivery_timeout;
        self.queues
            .values()
            .filter_map(VecDeque::front)
            .map(|b| b.deadline(timeout))
            .min()
    }

    /// Makes every batch that exists now sendable at once; returns the token
    /// [`Accumulator::flushed`] takes.
    pub(crate) fn begin_flush(&mut self) -> u64 {
        self.flush_before = self.flush_before.max(self.next_batch_id);
        self.next_batch_id
    }

    /// Whether every batch created before the flush `token` is complete.
    pub(crate) fn flushed(&self, token: u64) -> bool {
        self.incomplete.first().is_none_or(|&id| id >= token)
    }

    /// Makes everything sendable at once from now on.
    pub(crate) fn begin_close(&mut self) {
        self.closing = true;
    }

    /// No batch is queued.
    #[cfg(test)]
    pub(crate) fn is_empty(&self) -> bool {
        self.queues.is_empty()
    }

    /// No batch is queued or in flight.
    pub(crate) fn all_complete(&self) -> bool {
        self.incomplete.is_empty()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::buffer::BufferPool;
    use syncline_proto::batch;

    pub(super) const MS: Duration = Duration::from_millis(1);

    fn config() -> AccumulatorConfig {
        AccumulatorConfig {
            batch_size: 200,
            linger: 5 * MS,
            delivery_timeout: 1000 * MS,
            guarantee_order: false,
            compression: Compression::None,
            idempotent: false,
            max_in_flight: 5,
        }
    }

    fn value(n: usize) -> Vec<u8> {
        vec![b'x'; n]
    }

    type Receiver = oneshot::Receiver<Result<RecordMetadata, ProduceError>>;

    #[test]
    fn a_panicking_callback_is_contained() {
        let called = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
        let seen = called.clone();
        DeliverySender::Callback(Box::new(move |_| {
            seen.store(true, std::sync::atomic::Ordering::SeqCst);
            panic!("a user's bug");
        }))
        .deliver(Err(ProduceError::Closed));
        // Delivery returned: the sender task would go on with the next outcome.
        assert!(called.load(std::sync::atomic::Ordering::SeqCst));
    }

    fn push(
        acc: &mut Accumulator,
        tp: &TopicPartition,
        v: &[u8],
        now: Instant,
    ) -> (Appended, Receiver) {
        let (tx, rx) = oneshot::channel();
        let fields = RecordFields::new(1_000, None, Some(v), &[]);
        (acc.append(tp, fields, Reservation::empty(), tx, || now), rx)
    }

    fn leaders(tp: &TopicPartition) -> Option<(i32, i32)> {
        // Partition p is led by broker p % 2 + 1 at epoch 7; partition 9 has no leader.
        (tp.partition != 9).then_some((tp.partition % 2 + 1, 7))
    }

    fn idempotent(max_in_flight: usize) -> Accumulator {
        Accumulator::new(AccumulatorConfig {
            idempotent: true,
            max_in_flight,
            ..config()
        })
    }

    /// (producer id, epoch, base sequence, records) of a batch's bytes, its CRC
    /// checked.
    fn numbering(batch: &mut ProducerBatch) -> (i64, i16, i32, i32) {
        let h = batch::verify_crc(&batch.bytes()).unwrap();
        (
            h.producer_id,
            h.producer_epoch,
            h.base_sequence,
            h.records_count,
        )
    }

    /// One batch of `tp` drained for broker 1 (partitions 0 and 2 are its).
    fn drain_one(acc: &mut Accumulator, now: Instant) -> Option<ProducerBatch> {
        let mut drained = acc.drain(1, leaders, 1 << 20, now);
        assert!(drained.len() <= 1, "one partition in these tests");
        drained.pop()
    }

    #[tokio::test(start_paused = true)]
    async fn an_idempotent_producer_pipelines_a_partitions_batches_with_consecutive_sequences() {
        let mut acc = idempotent(2);
        let t0 = Instant::now();
        let a = TopicPartition::new("t", 0);
        // 60-byte records, 200-byte batches: three records per batch at most.
        for _ in 0..7 {
            push(&mut acc, &a, &value(60), t0);
        }
        assert!(acc.needs_producer_id());
        assert!(acc.drain(1, leaders, 1 << 20, t0).is_empty(), "no id yet");
        acc.set_producer(77, 3);
        let later = t0 + 10 * MS;
        let mut first = drain_one(&mut acc, later).unwrap();
        let (_, _, _, n) = numbering(&mut first);
        assert_eq!(numbering(&mut first), (77, 3, 0, n));
        let mut second = drain_one(&mut acc, later).expect("two in flight allowed");
        let (_, _, s2, n2) = numbering(&mut second);
        assert_eq!(s2, n, "the second batch continues the sequence");
        assert!(drain_one(&mut acc, later).is_none(), "max_in_flight = 2");
        acc.completed(&first);
        let mut third = drain_one(&mut acc, later).expect("room again");
        assert_eq!(numbering(&mut third).2, n + n2);
    }

    #[tokio::test(start_paused = true)]
    async fn a_completed_batchs_buffer_is_reused_once_nothing_holds_its_bytes() {
        let mut acc = Accumulator::new(config());
        let t0 = Instant::now();
        let tp = TopicPartition::new("t", 0);
        let sent_batch = |acc: &mut Accumulator, fill: u8| {
            let (_, _rx) = push(acc, &tp, &[fill; 60], t0);
            let mut batch = drain_one(acc, t0 + 10 * MS).expect("lingered");
            let bytes = batch.bytes();
            acc.completed(&batch);
            (batch, bytes)
        };
        // The request still holds the bytes: the buffer is not reused.
        let (first, held) = sent_batch(&mut acc, b'a');
        let copy = held.to_vec();
        acc.recycle(first);
        let (second, second_bytes) = sent_batch(&mut acc, b'b');
        assert_ne!(second_bytes.as_ptr(), held.as_ptr());
        assert_eq!(held.to_vec(), copy, "held bytes are never written");
        // Nothing holds them any more: the next batch is written in that buffer.
        let at = second_bytes.as_ptr();
        drop(second_bytes);
        acc.recycle(second);
        let (_third, third_bytes) = sent_batch(&mut acc, b'c');
        assert_eq!(third_bytes.as_ptr(), at);
        let header = batch::verify_crc(&third_bytes).unwrap();
        assert_eq!(header.records_count, 1);
        let set = batch::records(&third_bytes).unwrap();
        let values: Vec<Vec<u8>> = set
            .iter()
            .map(|r| r.unwrap().view.value.unwrap().to_vec())
            .collect();
        assert_eq!(values, [vec![b'c'; 60]]);
    }

    #[tokio::test(start_paused = true)]
    async fn idempotent_retries_keep_the_send_order() {
        let mut acc = idempotent(5);
        let t0 = Instant::now();
        let a = TopicPartition::new("t", 0);
        for _ in 0..9 {
            push(&mut acc, &a, &value(60), t0);
        }
        acc.set_producer(77, 0);
        let later = t0 + 10 * MS;
        let mut b0 = drain_one(&mut acc, later).unwrap();
        let mut b1 = drain_one(&mut acc, later).unwrap();
        let (bytes0, bytes1) = (b0.bytes(), b1.bytes());
        // The later batch fails first: it waits for the earlier one.
        acc.reenqueue(b1, Duration::ZERO, later);
        assert!(
            drain_one(&mut acc, later).is_none(),
            "b1 waits for b0, and the batches behind it wait for b1"
        );
        acc.reenqueue(b0, Duration::ZERO, later);
        let mut again0 = drain_one(&mut acc, later).unwrap();
        assert_eq!(again0.bytes(), bytes0, "the same bytes, resent");
        assert!(
            drain_one(&mut acc, later).is_none(),
            "b1 waits for b0 again"
        );
        acc.completed(&again0);
        let mut again1 = drain_one(&mut acc, later).unwrap();
        assert_eq!(again1.bytes(), bytes1);
        // Behind the retries, the next batch goes with the sequence after b1's.
        let (_, _, s1, n1) = numbering(&mut again1);
        let mut b2 = drain_one(&mut acc, later).expect("a new batch pipelines");
        assert_eq!(numbering(&mut b2).2, s1 + n1);
    }

    #[tokio::test(start_paused = true)]
    async fn sequence_errors_retry_behind_an_earlier_failure_or_start_a_new_epoch() {
        let mut acc = idempotent(5);
        let t0 = Instant::now();
        let a = TopicPartition::new("t", 0);
        for _ in 0..9 {
            push(&mut acc, &a, &value(60), t0);
        }
        acc.set_producer(77, 3);
        let later = t0 + 10 * MS;
        let mut b0 = drain_one(&mut acc, later).unwrap();
        let mut b1 = drain_one(&mut acc, later).unwrap();
        assert_eq!(
            acc.sequence_error(&mut b1, ErrorCode::NotLeaderOrFollower),
            None,
            "not a sequence error"
        );
        // b1 out of order while b0 is in flight: b0's failure explains it.
        assert_eq!(
            acc.sequence_error(&mut b1, ErrorCode::OutOfOrderSequenceNumber),
            Some(true)
        );
        assert_eq!(acc.producer, Some((77, 3)), "no new epoch for that");
        // b0 finds the leader without the producer's state: a new epoch.
        assert_eq!(
            acc.sequence_error(&mut b0, ErrorCode::UnknownProducerId),
            Some(true)
        );
        assert_eq!(acc.producer, Some((77, 4)));
        acc.reenqueue(b0, Duration::ZERO, later);
        assert!(
            drain_one(&mut acc, later).is_none(),
            "nothing goes while a batch of the old epoch is in flight"
        );
        // b1 of the old epoch comes back fenced: retried, no second new epoch.
        assert_eq!(
            acc.sequence_error(&mut b1, ErrorCode::InvalidProducerEpoch),
            Some(true)
        );
        assert_eq!(acc.producer, Some((77, 4)));
        acc.reenqueue(b1, Duration::ZERO, later);
        let mut again0 = drain_one(&mut acc, later).unwrap();
        let (pid, epoch, s0, n0) = numbering(&mut again0);
        assert_eq!((pid, epoch, s0), (77, 4, 0), "numbered anew from 0");
        assert!(
            drain_one(&mut acc, later).is_none(),
            "a batch numbered in the old epoch waits until nothing is in flight"
        );
        acc.completed(&again0);
        let mut again1 = drain_one(&mut acc, later).unwrap();
        let (pid, epoch, s1, _) = numbering(&mut again1);
        assert_eq!((pid, epoch, s1), (77, 4, n0), "b1 renumbered after b0");
        // A batch that fails for good starts another epoch; an exhausted epoch
        // asks for a new id.
        acc.producer_failed(&again1);
        assert_eq!(acc.producer, Some((77, 5)));
        acc.completed(&again1);
        acc.set_producer(77, i16::MAX);
        let b = drain_one(&mut acc, later).unwrap();
        acc.producer_failed(&b);
        assert!(acc.needs_producer_id());
    }

    /// A new epoch for one partition's trouble leaves another partition's
    /// batch, sent and not refused, numbered as it was: it may be in its
    /// leader's log, and only that numbering makes its retry a duplicate there.
    /// Once nothing of the old epoch is in flight there, the partition's new
    /// batches start the new epoch at sequence 0.
    #[tokio::test(start_paused = true)]
    async fn a_new_epoch_keeps_the_numbering_of_other_partitions_sent_batches() {
        let mut acc = idempotent(5);
        let t0 = Instant::now();
        let (a, b) = (TopicPartition::new("t", 0), TopicPartition::new("t", 2));
        for _ in 0..6 {
            push(&mut acc, &a, &value(60), t0);
            push(&mut acc, &b, &value(60), t0);
        }
        acc.set_producer(77, 3);
        let later = t0 + 10 * MS;
        let drain_tp = |acc: &mut Accumulator, tp: &TopicPartition| {
            let only = |p: &TopicPartition| (p == tp).then(|| leaders(p)).flatten();
            let mut d = acc.drain(1, only, 1 << 20, later);
            assert!(d.len() <= 1);
            d.pop()
        };
        let mut a0 = drain_tp(&mut acc, &a).unwrap();
        let mut b0 = drain_tp(&mut acc, &b).unwrap();
        let b0_numbering = numbering(&mut b0);
        // a0's leader has no state of the producer: a new epoch.
        assert_eq!(
            acc.sequence_error(&mut a0, ErrorCode::UnknownProducerId),
            Some(true)
        );
        assert_eq!(acc.producer, Some((77, 4)));
        // b0 timed out (maybe written): resent with its old numbering.
        acc.reenqueue(b0, Duration::ZERO, later);
        let mut again_b0 = drain_tp(&mut acc, &b).unwrap();
        assert_eq!(
            numbering(&mut again_b0),
            b0_numbering,
            "b0 kept its numbering"
        );
        assert!(
            drain_tp(&mut acc, &b).is_none(),
            "b's next batch waits for the old epoch's"
        );
        // a0 was refused: numbered anew.
        acc.reenqueue(a0, Duration::ZERO, later);
        let mut again_a0 = drain_tp(&mut acc, &a).unwrap();
        let (pid, epoch, seq, _) = numbering(&mut again_a0);
        assert_eq!((pid, epoch, seq), (77, 4, 0), "a0 numbered anew");
        acc.completed(&again_b0);
        let mut b1 = drain_tp(&mut acc, &b).unwrap();
        let (pid, epoch, seq, _) = numbering(&mut b1);
        assert_eq!((pid, epoch, seq), (77, 4, 0), "b starts the new epoch at 0");
    }

    #[tokio::test(start_paused = true)]
    async fn batch_is_sendable_after_linger_or_when_full() {
        let mut acc = Accumulator::new(config());
        let t0 = Instant::now();
        let tp = TopicPartition::new("t", 0);
        let (a, _r) = push(&mut acc, &tp, &value(10), t0);
        assert_eq!(
            a,
            Appended {
                new_batch: true,
                batch_full: false
            }
        );
        let check = acc.ready(t0, leaders);
        assert!(check.brokers.is_empty());
        assert_eq!(check.next_check, Some(t0 + 5 * MS));
        assert_eq!(acc.ready(t0 + 5 * MS, leaders).brokers, BTreeSet::from([1]));

        // Filling up: the record that does not fit starts a second batch, and the
        // first is sendable before its linger ends.
        let tp2 = TopicPartition::new("t", 1);
        let mut appended = Vec::new();
        for _ in 0..10 {
            appended.push(push(&mut acc, &tp2, &value(30), t0).0);
        }
        assert!(appended[0].new_batch);
        let first_new = appended.iter().skip(1).position(|a| a.new_batch).unwrap() + 1;
        assert!(appended[first_new].batch_full);
        assert_eq!(acc.ready(t0, leaders).brokers, BTreeSet::from([2]));
        let drained = acc.drain(2, leaders, 1 << 20, t0);
        assert_eq!(drained.len(), 1, "one batch per partition per request");
        assert!(drained[0].size_bytes() <= 200);
        assert_eq!(drained[0].records.len(), first_new);
        assert_eq!(drained[0].leader_epoch, 7);
    }

    #[tokio::test(start_paused = true)]
    async fn a_batch_closed_when_the_partitioner_moves_on_is_sendable_before_linger() {
        let mut acc = Accumulator::new(config());
        let t0 = Instant::now();
        let tp = TopicPartition::new("t", 0);
        push(&mut acc, &tp, &value(100), t0);
        let next = RecordFields::new(1_000, None, Some(&[b'x'; 100]), &[]);
        assert!(acc.would_start_batch(&tp, &next));
        assert!(acc.ready(t0, leaders).brokers.is_empty(), "lingering");
        assert!(acc.close_open_batch(&tp));
        assert_eq!(acc.ready(t0, leaders).brokers, BTreeSet::from([1]));
        assert!(!acc.close_open_batch(&tp), "already closed");
        assert!(!acc.close_open_batch(&TopicPartition::new("t", 5)));
        // The partition's next record starts a new batch behind the closed one.
        let (a, _r) = push(&mut acc, &tp, &value(10), t0);
        assert!(a.new_batch);
    }

    #[tokio::test(start_paused = true)]
    async fn record_larger_than_batch_size_gets_its_own_batch() {
        let mut acc = Accumulator::new(config());
        let t0 = Instant::now();
        let tp = TopicPartition::new("t", 0);
        push(&mut acc, &tp, &value(10), t0);
        let (big, _r) = push(&mut acc, &tp, &value(500), t0);
        assert!(big.new_batch && big.batch_full);
        let (after, _r) = push(&mut acc, &tp, &value(10), t0);
        assert!(after.new_batch);
        let b = acc.drain(1, leaders, 1 << 20, t0);
        assert_eq!(b[0].records.len(), 1);
        let mut second = acc.drain(1, leaders, 1 << 20, t0);
        assert!(second[0].size_bytes() > 500);
        batch::validate(&second[0].bytes()).unwrap();
    }

    #[tokio::test(start_paused = true)]
    async fn drain_combines_partitions_per_broker_within_max_request_size() {
        let mut acc = Accumulator::new(config());
        let t0 = Instant::now();
        for p in 0..6 {
            push(&mut acc, &TopicPartition::new("t", p), &value(100), t0);
        }
        push(&mut acc, &TopicPartition::new("t", 9), &value(100), t0);
        let later = t0 + 5 * MS;
        let check = acc.ready(later, leaders);
        assert_eq!(check.brokers, BTreeSet::from([1, 2]));
        assert!(check.unknown_leader, "partition 9 has no leader");

        // Broker 1 leads 0, 2, 4: all three fit in one request.
        let b1 = acc.drain(1, leaders, 1 << 20, later);
        let mut ps: Vec<i32> = b1.iter().map(|b| b.tp.partition).collect();
        ps.sort();
        assert_eq!(ps, [0, 2, 4]);
        // Broker 2 leads 1, 3, 5, but only two batches fit in 300 bytes.
        let one = b1[0].size_bytes();
        let b2 = acc.drain(2, leaders, 2 * one + 1, later);
        assert_eq!(b2.len(), 2);
        assert!(b2
            .iter()
            .all(|b| b.tp.partition % 2 == 1 && b.attempts == 1));
        let b2 = acc.drain(2, leaders, 1, later);
        assert_eq!(b2.len(), 1, "one batch always goes, whatever its size");
        assert!(acc.drain(2, leaders, 1 << 20, later).is_empty());
    }

    #[tokio::test(start_paused = true)]
    async fn retry_goes_first_after_backoff_and_muting_keeps_order() {
        let mut acc = Accumulator::new(AccumulatorConfig {
            guarantee_order: true,
            ..config()
        });
        let t0 = Instant::now();
        let tp = TopicPartition::new("t", 0);
        push(&mut acc, &tp, &value(150), t0);
        push(&mut acc, &tp, &value(150), t0); // second batch
        let first = acc.drain(1, leaders, 1 << 20, t0).pop().unwrap();
        // Muted while in flight: the second batch waits.
        assert!(acc.ready(t0, leaders).brokers.is_empty());
        assert!(acc.drain(1, leaders, 1 << 20, t0).is_empty());
        // The first fails and comes back in front, after its backoff.
        let first_id = first.id;
        acc.reenqueue(first, 100 * MS, t0);
        let check = acc.ready(t0, leaders);
        assert!(check.brokers.is_empty());
        assert_eq!(check.next_check, Some(t0 + 100 * MS));
        let again = acc.drain(1, leaders, 1 << 20, t0 + 100 * MS);
        assert_eq!(again.len(), 1);
        assert_eq!((again[0].id, again[0].attempts), (first_id, 2));
        acc.completed(&again[0]);
        let second = acc.drain(1, leaders, 1 << 20, t0 + 100 * MS);
        assert_eq!(second[0].id, first_id + 1);
    }

    #[tokio::test(start_paused = true)]
    async fn flush_makes_batches_sendable_and_tracks_completion() {
        let mut acc = Accumulator::new(config());
        let t0 = Instant::now();
        let tp = TopicPartition::new("t", 0);
        push(&mut acc, &tp, &value(10), t0);
        let token = acc.begin_flush();
        assert_eq!(acc.ready(t0, leaders).brokers, BTreeSet::from([1]));
        // A batch created after the flush lingers as usual.
        push(&mut acc, &TopicPartition::new("t", 2), &value(10), t0);
        let drained = acc.drain(1, leaders, 1 << 20, t0);
        assert!(!acc.flushed(token));
        for b in drained.iter().filter(|b| b.tp.partition == 0) {
            acc.completed(b);
        }
        assert!(acc.flushed(token));
        assert!(!acc.all_complete());
    }

    #[tokio::test(start_paused = true)]
    async fn expired_batches_are_removed_and_failed() {
        let mut acc = Accumulator::new(config());
        let t0 = Instant::now();
        let tp = TopicPartition::new("t", 9); // no leader: never sent
        let (_, rx) = push(&mut acc, &tp, &value(10), t0);
        assert!(acc.expire(t0 + 999 * MS).is_empty());
        let expired = acc.expire(t0 + 1000 * MS);
        assert_eq!(expired.len(), 1);
        assert!(acc.is_empty());
        // Incomplete (a flush still waits) until its outcomes are delivered.
        assert!(!acc.all_complete());
        let err = ProduceError::DeliveryTimeout {
            timeout_ms: 1000,
            last_error: None,
        };
        for mut b in expired {
            b.fail(&err);
            acc.expired_done(&b);
        }
        assert!(acc.all_complete());
        assert!(matches!(
            rx.await.unwrap(),
            Err(ProduceError::DeliveryTimeout { .. })
        ));
    }

    #[tokio::test(start_paused = true)]
    async fn acknowledgement_maps_offsets_to_records_in_order() {
        let mut acc = Accumulator::new(config());
        let t0 = Instant::now();
        let tp = TopicPartition::new("t", 0);
        let rxs: Vec<Receiver> = (0..3)
            .map(|i| push(&mut acc, &tp, &value(i + 1), t0).1)
            .collect();
        let mut batch = acc.drain(1, leaders, 1 << 20, t0 + 5 * MS).pop().unwrap();
        batch.complete(&pb::ProducePartitionResponse {
            partition: 0,
            base_offset: 40,
            acked_isr: vec![1, 2],
            replication_factor: 3,
            ..Default::default()
        });
        for (i, rx) in rxs.into_iter().enumerate() {
            let md = rx.await.unwrap().unwrap();
            assert_eq!(md.offset, 40 + i as i64);
            assert_eq!((&*md.topic, md.partition), ("t", 0));
            assert_eq!(*md.acked_isr, [1, 2]);
            assert!(md.is_under_replicated());
            assert_eq!(md.timestamp, 1_000);
        }
    }

    #[tokio::test(start_paused = true)]
    async fn batch_holds_its_records_buffer_until_it_is_dropped() {
        let pool = BufferPool::new(1000, Duration::ZERO);
        let mut acc = Accumulator::new(config());
        let t0 = Instant::now();
        let tp = TopicPartition::new("t", 0);
        for _ in 0..2 {
            let r = pool.reserve(100, Instant::now()).await.unwrap();
            let (tx, _rx) = oneshot::channel();
            let v = value(50);
            let fields = RecordFields::new(0, None, Some(&v), &[]);
            acc.append(&tp, fields, r, tx, || t0);
        }
        assert_eq!(pool.available(), 800);
        let mut batch = acc.drain(1, leaders, 1 << 20, t0 + 5 * MS).pop().unwrap();
        assert_eq!(pool.available(), 800, "in flight still counts");
        batch.complete_unacknowledged();
        acc.completed(&batch);
        drop(batch);
        assert_eq!(pool.available(), 1000);
    }
}
