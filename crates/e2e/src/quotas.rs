//! Measuring client quotas: a greedy producer's achieved byte rate over a
//! span that starts after its first windows' burst, and a polite one beside
//! it. Shared by the in-process quota tests and the CLI's end-to-end test.
//!
//! The brokers measured run with a quota window of two samples of a second
//! (`quota_window_num = 2`): Kafka's eleven let a greedy client through in
//! bursts about ten seconds apart as whole samples expire, which only a run
//! of minutes averages out; two make the rate measurable over seconds.

use std::time::Duration;

use bytes::Bytes;
use syncline_client::Connection;
use syncline_proto::batch::BatchBuilder;
use syncline_proto::pb::response::Body as Resp;
use tokio::time::Instant;

use crate::inprocess::produce_request;

/// The quota the tests hold clients to: 1 MiB a second.
pub const QUOTA: u64 = 1 << 20;

/// Traffic before this is the first windows' burst, not measured. A greedy
/// client gets through in a burst each time a sample leaves the window
/// (every 2 s from its first request) and then trickles: the measured span
/// starts and ends mid-way between bursts, so that it holds four whole
/// periods however the instants fall (cut through a burst, 8 s would count
/// one burst too few or too many: 12 % of it).
pub const WARM_UP: Duration = Duration::from_millis(5500);
/// The span measured.
pub const MEASURED: Duration = Duration::from_secs(8);

/// One batch of one record of `len` bytes.
pub fn record_batch(len: usize) -> Bytes {
    let value = vec![b'q'; len];
    let mut b = BatchBuilder::new(1_700_000_000_000);
    b.push(1_700_000_000_000, None, Some(&value), &[]);
    b.finish()
}

/// Bytes a second over the measured span of `acked` (when each answer came,
/// its record bytes).
pub fn measured_rate(acked: &[(Duration, u64)]) -> f64 {
    let bytes: u64 = acked
        .iter()
        .filter(|(at, _)| *at >= WARM_UP && *at < WARM_UP + MEASURED)
        .map(|(_, b)| b)
        .sum();
    bytes as f64 / MEASURED.as_secs_f64()
}

/// What a producer saw.
#[derive(Debug, Default)]
pub struct Produced {
    /// When each produce was answered (since the start), and its record bytes.
    pub acked: Vec<(Duration, u64)>,
    /// The longest `throttle_time_ms` it was told.
    pub most_throttled: i32,
    /// Answers with a throttle time.
    pub throttled: usize,
    /// The longest a produce took to be answered.
    pub slowest: Duration,
}

/// Produces `batch` (acks=1) to `topic`-`partition` until `end`, each as soon
/// as the previous one is answered, or on every tick of `every` when given;
/// panics on an error answer.
pub async fn produce_until(
    conn: &Connection,
    topic: &str,
    partition: i32,
    batch: &Bytes,
    every: Option<Duration>,
    started: Instant,
    end: Instant,
) -> Produced {
    let mut tick = every.map(tokio::time::interval);
    let mut seen = Produced::default();
    while Instant::now() < end {
        if let Some(t) = &mut tick {
            t.tick().await;
        }
        seen.produce(conn, topic, partition, batch, started).await;
    }
    seen
}

/// Produces `batch` (acks=1) to `topic`-`partition` `count` times, each as
/// soon as the previous one is answered; panics on an error answer.
pub async fn produce_count(
    conn: &Connection,
    topic: &str,
    partition: i32,
    batch: &Bytes,
    count: usize,
) -> Produced {
    let started = Instant::now();
    let mut seen = Produced::default();
    for _ in 0..count {
        seen.produce(conn, topic, partition, batch, started).await;
    }
    seen
}

impl Produced {
    async fn produce(
        &mut self,
        conn: &Connection,
        topic: &str,
        partition: i32,
        batch: &Bytes,
        started: Instant,
    ) {
        let sent = Instant::now();
        let resp = conn
            .send(produce_request(topic, partition, 1, batch.clone()))
            .await
            .expect("a produce answer");
        let Resp::Produce(r) = resp else {
            panic!("unexpected {resp:?}")
        };
        assert_eq!(r.topics[0].partitions[0].error_code, 0, "{r:?}");
        self.most_throttled = self.most_throttled.max(r.throttle_time_ms);
        self.throttled += usize::from(r.throttle_time_ms > 0);
        self.slowest = self.slowest.max(sent.elapsed());
        self.acked.push((started.elapsed(), batch.len() as u64));
    }
}
