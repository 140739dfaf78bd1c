//! The workload, in the manner of Jepsen's Kafka queue workload: several
//! producers per partition sending unique values, and consumers reading every
//! partition *during* the faults, each operation recorded with its outcome.

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use syncline_client::{Acks, Connection, ProduceError, Producer, ProducerConfig, ProducerRecord};
use syncline_proto::pb::{self, request::Body, response::Body as Resp};
use syncline_proto::ErrorCode;
use tokio::task::JoinHandle;
use tokio::time::Instant;

use crate::history::{HighWatermark, History, Outcome, Poll, Reset, Send};

/// One request's bound: a paused broker accepts connections and never answers.
pub(crate) const REQUEST_TIMEOUT: Duration = Duration::from_secs(2);

/// What the workload does.
#[derive(Debug, Clone)]
pub struct Spec {
    pub topic: String,
    pub partitions: i32,
    /// Producers, each sending to every partition.
    pub producers: usize,
    /// Consumers, each reading every partition from offset 0.
    pub consumers: usize,
    pub acks: Acks,
    /// The idempotent producer (needs `acks=all`).
    pub idempotent: bool,
    /// Pause between two sends of one producer to one partition.
    pub pace: Duration,
    /// How long a producer retries one record before giving up.
    pub delivery_timeout: Duration,
    /// Producers beside the promised ones, one per entry with those acks (1
    /// or 0), not idempotent, each sending to every partition: their records
    /// share the logs with the promised ones, and the checker holds them only
    /// to what holds for every record (one value per offset, read below the
    /// high watermark, sent before read).
    pub unpromised: Vec<Acks>,
}

/// The running workload.
#[derive(Debug)]
pub struct Workload {
    producers: Vec<Producer>,
    stop_sending: Arc<AtomicBool>,
    senders: Vec<JoinHandle<Vec<Send>>>,
    readers: Vec<JoinHandle<Reader>>,
    /// Where every consumer should read up to before it stops (set at the end).
    read_until: Arc<Mutex<Option<BTreeMap<i32, i64>>>>,
    stop_reading: Arc<AtomicBool>,
    acked: Arc<AtomicU64>,
}

/// What one consumer saw of one partition.
#[derive(Debug, Default)]
struct Reader {
    consumer: usize,
    partition: i32,
    polls: Vec<Poll>,
    /// (polls before it, new position).
    resets: Vec<(usize, i64)>,
    high_watermarks: Vec<HighWatermark>,
}

/// Every broker's client address, by id.
pub type Brokers = Vec<(i32, String)>;

fn classify(e: &ProduceError) -> Outcome {
    let text = e.to_string();
    match e {
        // Refused before any append: nothing written by this attempt.
        ProduceError::Broker { code, .. }
            if !matches!(
                code,
                ErrorCode::RequestTimedOut | ErrorCode::NotEnoughReplicasAfterAppend
            ) =>
        {
            Outcome::Failed(text)
        }
        ProduceError::RecordTooLarge { .. } | ProduceError::BufferFull { .. } => {
            Outcome::Failed(text)
        }
        _ => Outcome::Unknown(text),
    }
}

impl Workload {
    /// Starts the producers and consumers against `brokers`.
    pub fn start(brokers: &Brokers, spec: &Spec, epoch: Instant) -> anyhow::Result<Workload> {
        let bootstrap = brokers
            .iter()
            .map(|(_, a)| a.clone())
            .collect::<Vec<_>>()
            .join(",");
        let stop_sending = Arc::new(AtomicBool::new(false));
        let acked = Arc::new(AtomicU64::new(0));
        let mut producers = Vec::new();
        let mut senders = Vec::new();
        let kinds = (0..spec.producers)
            .map(|_| (spec.acks, spec.idempotent, true))
            .chain(spec.unpromised.iter().map(|&acks| (acks, false, false)));
        for (producer_no, (acks, idempotent, promised)) in kinds.enumerate() {
            let mut config = ProducerConfig::new(&bootstrap);
            config.acks = acks;
            config.linger_ms = 0;
            config.client.client_id = format!("chaos-producer-{producer_no}");
            config.client.request_timeout_ms = 5_000;
            config.client.retry_backoff_max_ms = 500;
            config.delivery_timeout_ms = spec.delivery_timeout.as_millis() as u64;
            config.enable_idempotence = Some(idempotent);
            let producer = Producer::new(config)?;
            for p in 0..spec.partitions {
                let (producer, stop, acked, topic, pace) = (
                    producer.clone(),
                    stop_sending.clone(),
                    acked.clone(),
                    spec.topic.clone(),
                    spec.pace,
                );
                let send = Sender {
                    producer_no,
                    partition: p,
                    promised,
                };
                senders.push(tokio::spawn(async move {
                    send_loop(producer, send, topic, pace, stop, acked, epoch).await
                }));
            }
            producers.push(producer);
        }
        let read_until = Arc::new(Mutex::new(None));
        let stop_reading = Arc::new(AtomicBool::new(false));
        let mut readers = Vec::new();
        for consumer in 0..spec.consumers {
            for p in 0..spec.partitions {
                let (brokers, topic, until, stop) = (
                    brokers.clone(),
                    spec.topic.clone(),
                    read_until.clone(),
                    stop_reading.clone(),
                );
                readers.push(tokio::spawn(async move {
                    read_loop(brokers, topic, p, consumer, until, stop).await
                }));
            }
        }
        Ok(Workload {
            producers,
            stop_sending,
            senders,
            readers,
            read_until,
            stop_reading,
            acked,
        })
    }

    /// Acknowledged sends of the promised producers so far.
    pub fn acked(&self) -> u64 {
        self.acked.load(Ordering::Acquire)
    }

    /// Waits until `n` more sends than now are acknowledged.
    pub async fn wait_acked(&self, n: u64, timeout: Duration) -> Result<Duration, String> {
        let (from, start) = (self.acked(), Instant::now());
        while self.acked() < from + n {
            if start.elapsed() > timeout {
                return Err(format!(
                    "{} of {n} more acknowledgements within {timeout:?}",
                    self.acked() - from
                ));
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
        Ok(start.elapsed())
    }

    /// Stops sending and waits for every send in flight (bounded by the
    /// delivery timeout): every send with its outcome.
    pub async fn stop_producers(&mut self, bound: Duration) -> Vec<Send> {
        self.stop_sending.store(true, Ordering::Release);
        let mut sends = Vec::new();
        for s in self.senders.drain(..) {
            // A sender stuck past its delivery timeout: its sends are lost to
            // the history (the verdict counts fewer sends).
            if let Ok(Ok(mut v)) = tokio::time::timeout(bound, s).await {
                sends.append(&mut v);
            }
        }
        for p in self.producers.drain(..) {
            let _ = tokio::time::timeout(bound, p.close()).await;
        }
        sends.sort_by_key(|s| s.at);
        sends
    }

    /// Lets the consumers read up to `ends` (each partition's final high
    /// watermark), for at most `bound`, and returns what they read.
    pub async fn finish_consumers(
        self,
        ends: BTreeMap<i32, i64>,
        bound: Duration,
        sends: Vec<Send>,
    ) -> History {
        *self.read_until.lock().expect("read_until") = Some(ends);
        let deadline = Instant::now() + bound;
        let mut history = History {
            sends,
            ..History::default()
        };
        let mut readers = Vec::new();
        for r in self.readers {
            let left = deadline.saturating_duration_since(Instant::now());
            let reader = match tokio::time::timeout(left, r).await {
                Ok(Ok(reader)) => reader,
                Ok(Err(e)) => panic!("a consumer task failed: {e}"),
                Err(_) => {
                    // Past the bound: ask the rest to stop where they are.
                    self.stop_reading.store(true, Ordering::Release);
                    continue;
                }
            };
            readers.push(reader);
        }
        // Per consumer, polls in its order (partitions apart: the checker
        // judges each consumer's partitions separately).
        readers.sort_by_key(|r| r.consumer);
        for r in readers {
            let base = history
                .polls
                .iter()
                .filter(|p| p.consumer == r.consumer)
                .count();
            for (after, to) in r.resets {
                history.resets.push(Reset {
                    consumer: r.consumer,
                    partition: r.partition,
                    after_polls: base + after,
                    to,
                });
            }
            history.polls.extend(r.polls);
            history.high_watermarks.extend(r.high_watermarks);
        }
        history
    }
}

/// Who sends in one send loop.
#[derive(Debug, Clone, Copy)]
struct Sender {
    producer_no: usize,
    partition: i32,
    promised: bool,
}

async fn send_loop(
    producer: Producer,
    sender: Sender,
    topic: String,
    pace: Duration,
    stop: Arc<AtomicBool>,
    acked: Arc<AtomicU64>,
    epoch: Instant,
) -> Vec<Send> {
    let mut sends = Vec::new();
    let mut window = std::collections::VecDeque::new();
    let mut seq = 0u64;
    let Sender {
        producer_no,
        partition,
        promised,
    } = sender;
    let settle = |value: String,
                  at: Duration,
                  queued: Result<syncline_client::DeliveryFuture, ProduceError>| {
        let acked = acked.clone();
        async move {
            let result = match queued {
                Ok(delivery) => delivery.await,
                Err(e) => Err(e),
            };
            let outcome = match result {
                Ok(meta) => {
                    if promised {
                        acked.fetch_add(1, Ordering::AcqRel);
                    }
                    Outcome::Ok {
                        offset: meta.offset,
                        acked_isr: meta.acked_isr.to_vec(),
                    }
                }
                Err(e) => classify(&e),
            };
            Send {
                producer: producer_no,
                partition,
                value,
                at,
                outcome,
                promised,
            }
        }
    };
    while !stop.load(Ordering::Acquire) {
        let value = format!("{producer_no}-{partition}-{seq}");
        seq += 1;
        let at = epoch.elapsed();
        let record = ProducerRecord::new(topic.clone(), value.clone()).with_partition(partition);
        window.push_back((value, at, producer.enqueue(record).await));
        if window.len() >= 5 {
            let (value, at, queued) = window.pop_front().expect("full window");
            sends.push(settle(value, at, queued).await);
        }
        tokio::time::sleep(pace).await;
    }
    for (value, at, queued) in window {
        sends.push(settle(value, at, queued).await);
    }
    sends
}

/// The leader of `topic`-`partition` and its epoch, as any broker knows it.
pub async fn leader_of(brokers: &Brokers, topic: &str, partition: i32) -> Option<(i32, i32)> {
    for (_, addr) in brokers {
        let Ok(conn) = Connection::connect(addr, "chaos-metadata", REQUEST_TIMEOUT).await else {
            continue;
        };
        let body = Body::Metadata(pb::MetadataRequest {
            topics: vec![topic.into()],
            ..Default::default()
        });
        let Ok(Ok(Resp::Metadata(m))) =
            tokio::time::timeout(REQUEST_TIMEOUT, conn.send(body)).await
        else {
            continue;
        };
        let found = m
            .topics
            .iter()
            .filter(|t| t.name == topic)
            .flat_map(|t| &t.partitions)
            .find(|p| p.partition == partition && p.leader_id > 0)
            .map(|p| (p.leader_id, p.leader_epoch));
        if found.is_some() {
            return found;
        }
    }
    None
}

/// The partitions of `topics` that the broker at `addr` leads, as it describes
/// them itself (DescribeTopics, its `from_leader` descriptions: with its ISR
/// and its log end offset), asked as `client_id`; `None` when it does not
/// answer.
pub async fn led(
    addr: &str,
    client_id: &str,
    topics: &[&str],
) -> Option<Vec<(String, pb::PartitionDescription)>> {
    let conn = Connection::connect(addr, client_id, REQUEST_TIMEOUT)
        .await
        .ok()?;
    let body = Body::DescribeTopics(pb::DescribeTopicsRequest {
        topics: topics.iter().map(|t| t.to_string()).collect(),
    });
    let Ok(Ok(Resp::DescribeTopics(d))) =
        tokio::time::timeout(REQUEST_TIMEOUT, conn.send(body)).await
    else {
        return None;
    };
    Some(
        d.topics
            .into_iter()
            .filter(|t| topics.contains(&t.name.as_str()))
            .flat_map(|t| {
                let name = t.name;
                t.partitions.into_iter().map(move |p| (name.clone(), p))
            })
            .filter(|(_, p)| p.from_leader)
            .collect(),
    )
}

/// One fetch as a consumer at `offset`, fenced by `epoch`: (records, high
/// watermark), or the error code.
pub async fn fetch(
    conn: &Connection,
    topic: &str,
    partition: i32,
    epoch: i32,
    offset: i64,
    max_wait_ms: i32,
) -> anyhow::Result<Result<(Vec<(i64, String)>, i64), ErrorCode>> {
    let body = Body::Fetch(pb::FetchRequest {
        replica_id: -1,
        replica_epoch: -1,
        max_wait_ms,
        min_bytes: 1,
        max_bytes: 1 << 20,
        session_epoch: -1,
        topics: vec![pb::FetchTopic {
            topic: topic.into(),
            partitions: vec![pb::FetchPartition {
                partition,
                current_leader_epoch: Some(epoch),
                fetch_offset: offset,
                partition_max_bytes: 1 << 20,
                ..Default::default()
            }],
        }],
        ..Default::default()
    });
    let wait = REQUEST_TIMEOUT + Duration::from_millis(max_wait_ms.max(0) as u64);
    let Resp::Fetch(r) = tokio::time::timeout(wait, conn.send(body)).await?? else {
        anyhow::bail!("unexpected fetch response");
    };
    let p = r
        .responses
        .into_iter()
        .flat_map(|t| t.partitions)
        .next()
        .ok_or_else(|| anyhow::anyhow!("empty fetch response"))?;
    let code = ErrorCode::from_wire(p.error_code);
    if code != ErrorCode::None {
        return Ok(Err(code));
    }
    let records = syncline_e2e::client::decode_batches(&p.records, offset)?
        .into_iter()
        .flat_map(|(_, records)| records)
        .map(|(o, value)| (o, String::from_utf8_lossy(&value).into_owned()))
        .collect();
    Ok(Ok((records, p.high_watermark)))
}

/// Every record of `partition` up to its high watermark, read
/// as a consumer fenced by `epoch`: (records, high watermark).
pub async fn read_to_high_watermark(
    conn: &Connection,
    topic: &str,
    partition: i32,
    epoch: i32,
) -> anyhow::Result<(Vec<(i64, String)>, i64)> {
    let mut out: Vec<(i64, String)> = Vec::new();
    loop {
        let from = out.last().map_or(0, |(o, _)| o + 1);
        let (records, hw) = fetch(conn, topic, partition, epoch, from, 0)
            .await?
            .map_err(|code| anyhow::anyhow!("fetch at {from}: {code}"))?;
        let got = records.len();
        out.extend(records);
        let end = out.last().map_or(0, |(o, _)| o + 1);
        if end >= hw {
            return Ok((out, hw));
        }
        anyhow::ensure!(
            got > 0,
            "the log ends at {end} below the high watermark {hw}"
        );
    }
}

async fn read_loop(
    brokers: Brokers,
    topic: String,
    partition: i32,
    consumer: usize,
    until: Arc<Mutex<Option<BTreeMap<i32, i64>>>>,
    stop: Arc<AtomicBool>,
) -> Reader {
    let mut reader = Reader {
        consumer,
        partition,
        ..Reader::default()
    };
    let mut position = 0i64;
    let mut conn: Option<(Connection, i32, i32)> = None;
    loop {
        let target = until
            .lock()
            .expect("read_until")
            .as_ref()
            .map(|m| m.get(&partition).copied().unwrap_or(0));
        if target.is_some_and(|t| position >= t) || stop.load(Ordering::Acquire) {
            return reader;
        }
        if conn.as_ref().is_none_or(|(c, _, _)| c.is_closed()) {
            conn = None;
            if let Some((leader, epoch)) = leader_of(&brokers, &topic, partition).await {
                if let Some((_, addr)) = brokers.iter().find(|(id, _)| *id == leader) {
                    if let Ok(c) =
                        Connection::connect(addr, "chaos-consumer", REQUEST_TIMEOUT).await
                    {
                        conn = Some((c, leader, epoch));
                    }
                }
            }
            if conn.is_none() {
                tokio::time::sleep(Duration::from_millis(200)).await;
                continue;
            }
        }
        let Some((c, leader, epoch)) = conn.as_ref() else {
            continue;
        };
        match fetch(c, &topic, partition, *epoch, position, 200).await {
            Ok(Ok((records, hw))) => {
                reader.high_watermarks.push(HighWatermark {
                    consumer,
                    partition,
                    broker: *leader,
                    leader_epoch: *epoch,
                    value: hw,
                });
                for (offset, value) in records {
                    reader.polls.push(Poll {
                        consumer,
                        partition,
                        offset,
                        value,
                    });
                    position = offset + 1;
                }
            }
            Ok(Err(ErrorCode::OffsetOutOfRange)) => {
                // The log is shorter than the position (a truncation below what
                // this consumer read): start again from its end, as a consumer
                // with auto.offset.reset=earliest would from the start; the
                // checker sees the reset and judges the re-read records.
                reader.resets.push((reader.polls.len(), 0));
                position = 0;
                conn = None;
            }
            // A leader change or a lost connection: ask for the leader again.
            _ => {
                conn = None;
                tokio::time::sleep(Duration::from_millis(100)).await;
            }
        }
    }
}
