//! The well-behaved client: one idempotent `acks=all` producer sending 1 KiB
//! records at a fixed rate, open loop (a record's latency counts from the
//! moment it was due, so a stalled broker cannot hide behind a producer
//! that stopped sending), each record's outcome kept, and at the end every
//! acknowledged record read back.

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use anyhow::{bail, Context};
use bytes::Bytes;
use syncline_client::{
    Acks, Consumer, ConsumerConfig, Producer, ProducerConfig, ProducerRecord, TopicPartition,
};
use tokio::time::{Instant, MissedTickBehavior};

pub(crate) const TOPIC: &str = "steady";
pub(crate) const PARTITIONS: i32 = 3;
const RECORD_SIZE: usize = 1024;

/// One record's outcome.
#[derive(Debug, Clone)]
pub(crate) struct Sent {
    /// The phase it was due in.
    pub(crate) phase: usize,
    /// From when it was due until its acknowledgement (or failure).
    pub(crate) latency: Duration,
    /// Where it was written, or why not.
    pub(crate) outcome: Result<(i32, i64), String>,
    /// Its value's number.
    pub(crate) seq: u64,
}

/// The running producer.
pub(crate) struct Steady {
    phase: Arc<AtomicUsize>,
    stop: Arc<AtomicBool>,
    sent: Arc<Mutex<Vec<Sent>>>,
    task: tokio::task::JoinHandle<anyhow::Result<()>>,
}

fn value(seq: u64) -> Bytes {
    let mut v = format!("{seq:020}").into_bytes();
    v.resize(RECORD_SIZE, b'.');
    Bytes::from(v)
}

impl Steady {
    /// Starts sending `rate` records a second through `bootstrap`.
    pub(crate) async fn start(bootstrap: String, rate: u32) -> anyhow::Result<Steady> {
        let mut config = ProducerConfig::new(&bootstrap);
        config.acks = Acks::All;
        config.linger_ms = 0;
        config.client.client_id = "steady".into();
        let producer = Producer::new(config)?;
        // Connections and metadata first, not measured.
        for seq in 0..PARTITIONS as u64 {
            let record = ProducerRecord::new(TOPIC, value(seq)).with_partition(seq as i32);
            producer
                .send(record)
                .await
                .context("the steady producer's first records")?;
        }
        let phase = Arc::new(AtomicUsize::new(0));
        let stop = Arc::new(AtomicBool::new(false));
        let sent = Arc::new(Mutex::new(Vec::new()));
        let task = tokio::spawn(run(
            producer,
            rate,
            phase.clone(),
            stop.clone(),
            sent.clone(),
        ));
        Ok(Steady {
            phase,
            stop,
            sent,
            task,
        })
    }

    /// Records due from now on count in `phase`.
    pub(crate) fn enter(&self, phase: usize) {
        self.phase.store(phase, Ordering::SeqCst);
    }

    /// Stops sending, waits for every outcome, and returns them.
    pub(crate) async fn finish(self) -> anyhow::Result<Vec<Sent>> {
        self.stop.store(true, Ordering::SeqCst);
        self.task.await??;
        Ok(std::mem::take(
            &mut *self.sent.lock().expect("not poisoned"),
        ))
    }
}

async fn run(
    producer: Producer,
    rate: u32,
    phase: Arc<AtomicUsize>,
    stop: Arc<AtomicBool>,
    sent: Arc<Mutex<Vec<Sent>>>,
) -> anyhow::Result<()> {
    let mut tick = tokio::time::interval(Duration::from_secs(1) / rate.max(1));
    // Open loop: a late tick is sent at once, still timed from when it was due.
    tick.set_missed_tick_behavior(MissedTickBehavior::Burst);
    let mut waiting = Vec::new();
    let mut seq = PARTITIONS as u64;
    while !stop.load(Ordering::SeqCst) {
        let due: Instant = tick.tick().await;
        let in_phase = phase.load(Ordering::SeqCst);
        let partition = (seq % PARTITIONS as u64) as i32;
        let record = ProducerRecord::new(TOPIC, value(seq)).with_partition(partition);
        let this = seq;
        seq += 1;
        let sent = sent.clone();
        match producer.enqueue(record).await {
            Ok(delivery) => waiting.push(tokio::spawn(async move {
                let outcome = delivery
                    .await
                    .map(|m| (m.partition, m.offset))
                    .map_err(|e| e.to_string());
                sent.lock().expect("not poisoned").push(Sent {
                    phase: in_phase,
                    latency: due.elapsed(),
                    outcome,
                    seq: this,
                });
            })),
            Err(e) => sent.lock().expect("not poisoned").push(Sent {
                phase: in_phase,
                latency: due.elapsed(),
                outcome: Err(e.to_string()),
                seq: this,
            }),
        }
        waiting.retain(|t| !t.is_finished());
    }
    for t in waiting {
        t.await?;
    }
    producer.close().await;
    Ok(())
}

/// Reads every partition of the topic from its start and checks that each
/// acknowledged record is there, at its offset, with its value: how many
/// acknowledged records are missing or wrong.
pub(crate) async fn verify(bootstrap: &str, sent: &[Sent]) -> anyhow::Result<usize> {
    let mut want: BTreeMap<(i32, i64), u64> = BTreeMap::new();
    for s in sent {
        if let Ok(at) = s.outcome {
            want.insert(at, s.seq);
        }
    }
    let mut config = ConsumerConfig::new(bootstrap);
    config.client.client_id = "steady-check".into();
    let mut consumer = Consumer::new(config)?;
    let parts: Vec<TopicPartition> = (0..PARTITIONS)
        .map(|p| TopicPartition::new(TOPIC, p))
        .collect();
    consumer.assign(parts.clone());
    consumer.seek_to_beginning(&parts)?;
    let last: BTreeMap<i32, i64> = want.keys().fold(BTreeMap::new(), |mut m, &(p, o)| {
        let e = m.entry(p).or_insert(o);
        *e = (*e).max(o);
        m
    });
    let mut read: BTreeMap<(i32, i64), Bytes> = BTreeMap::new();
    let deadline = Instant::now() + Duration::from_secs(60);
    while last
        .iter()
        .any(|(&p, &o)| !read.range((p, o)..=(p, i64::MAX)).any(|_| true))
    {
        if Instant::now() > deadline {
            bail!("the acknowledged records were not all readable within 60 s");
        }
        for r in consumer.poll(Duration::from_secs(1)).await? {
            read.insert((r.partition, r.offset), r.value.unwrap_or_default());
        }
    }
    Ok(want
        .iter()
        .filter(|(at, &seq)| read.get(at) != Some(&value(seq)))
        .count())
}
