//! `syncline perf produce`: kafka-producer-perf-test.
//!
//! Sends `--num-records` records of `--record-size` bytes (one random payload of
//! upper-case letters, reused, as Kafka does), paced at `--throughput` records/s.
//! A record's latency runs from the call to `send` (so time blocked on a full
//! buffer counts) to its acknowledgement, taken in the send callback on the
//! producer's sender task. Every 5 s a line with the window's figures; at the end
//! one line with the totals and percentiles.

use std::sync::{Arc, Mutex};
use std::time::Duration;

use anyhow::{anyhow, bail, Result};
use bytes::Bytes;
use hdrhistogram::Histogram;
use indicatif::ProgressBar;
use rand::Rng;
use serde_json::json;
use syncline_client::{ProduceError, Producer, ProducerRecord, RecordMetadata};
use tokio::time::Instant;

use super::report::{self, Throttle, KAFKA_MB};
use super::ProduceArgs;
use crate::errors::{explain, explain_produce, Ctx};

/// Kafka prints a window line every 5 s.
const REPORT_INTERVAL: Duration = Duration::from_secs(5);

/// The progress bar moves every this many records (`ProgressBar::inc` reads
/// the clock at each call, even when the bar is hidden).
const BAR_STEP: u64 = 256;

/// Figures of the run and of the current 5 s window.
#[derive(Debug)]
struct Stats {
    start: Instant,
    record_size: usize,
    acked: u64,
    failed: u64,
    first_error: Option<String>,
    latency: Histogram<u64>,
    /// When the last acknowledgement came: the end of the run for the rate.
    last_ack: Instant,
    window_start: Instant,
    window_count: u64,
    window_total_latency: Duration,
    window_max_latency: Duration,
    bar: ProgressBar,
    /// For the wording of failures.
    bootstrap: String,
    topic: String,
}

impl Stats {
    fn new(start: Instant, args: &ProduceArgs, bootstrap: &str, bar: ProgressBar) -> Self {
        Stats {
            start,
            bootstrap: bootstrap.to_string(),
            topic: args.topic.clone(),
            record_size: args.record_size,
            acked: 0,
            failed: 0,
            first_error: None,
            latency: report::latency_histogram(),
            last_ack: start,
            window_start: start,
            window_count: 0,
            window_total_latency: Duration::ZERO,
            window_max_latency: Duration::ZERO,
            bar,
        }
    }

    fn record(&mut self, sent: Instant, outcome: Result<RecordMetadata, ProduceError>) {
        let now = Instant::now();
        match outcome {
            Ok(_) => {
                let latency = now - sent;
                report::record_latency(&mut self.latency, latency);
                self.acked += 1;
                self.last_ack = now;
                self.window_count += 1;
                self.window_total_latency += latency;
                self.window_max_latency = self.window_max_latency.max(latency);
            }
            Err(e) => {
                self.failed += 1;
                if self.first_error.is_none() {
                    let ctx = Ctx {
                        bootstrap: &self.bootstrap,
                        topic: Some(&self.topic),
                    };
                    self.first_error = Some(explain_produce(&e, ctx));
                }
            }
        }
        let done = self.acked + self.failed;
        if done.is_multiple_of(BAR_STEP) {
            self.bar.set_position(done);
        }
        if now - self.window_start >= REPORT_INTERVAL {
            let line = self.window_line(now);
            report::print_line(&self.bar, &line);
            self.window_start = now;
            self.window_count = 0;
            self.window_total_latency = Duration::ZERO;
            self.window_max_latency = Duration::ZERO;
        }
    }

    /// Kafka's window line.
    fn window_line(&self, now: Instant) -> String {
        let secs = (now - self.window_start).as_secs_f64();
        let rate = self.window_count as f64 / secs;
        let avg = if self.window_count == 0 {
            0.0
        } else {
            self.window_total_latency.as_secs_f64() * 1000.0 / self.window_count as f64
        };
        format!(
            "{} records sent, {:.1} records/sec ({:.2} MB/sec), {:.1} ms avg latency, {:.1} ms max latency.",
            self.window_count,
            rate,
            rate * self.record_size as f64 / KAFKA_MB,
            avg,
            self.window_max_latency.as_secs_f64() * 1000.0
        )
    }

    fn elapsed_secs(&self) -> f64 {
        (self.last_ack - self.start).as_secs_f64().max(1e-9)
    }

    /// Kafka's final line (percentiles with two decimals: loopback latencies are
    /// below Kafka's whole milliseconds).
    fn summary_line(&self) -> String {
        let rate = self.acked as f64 / self.elapsed_secs();
        let h = &self.latency;
        format!(
            "{} records sent, {:.1} records/sec ({:.2} MB/sec), {:.2} ms avg latency, {:.2} ms max latency, \
             {:.2} ms 50th, {:.2} ms 95th, {:.2} ms 99th, {:.2} ms 99.9th.",
            self.acked,
            rate,
            rate * self.record_size as f64 / KAFKA_MB,
            h.mean() / 1000.0,
            h.max() as f64 / 1000.0,
            report::ms_at(h, 0.50),
            report::ms_at(h, 0.95),
            report::ms_at(h, 0.99),
            report::ms_at(h, 0.999),
        )
    }

    fn json(&self, args: &ProduceArgs, acks: &str) -> serde_json::Value {
        let secs = self.elapsed_secs();
        let rate = self.acked as f64 / secs;
        json!({
            "tool": "perf produce",
            "topic": args.topic,
            "acks": acks,
            "record_size": args.record_size,
            "target_throughput": args.throughput,
            "records": self.acked,
            "failed": self.failed,
            "elapsed_s": secs,
            "records_per_sec": rate,
            "bytes_per_sec": rate * self.record_size as f64,
            "latency_ms": report::latency_json(&self.latency),
            "latency_cdf": report::cdf_json(&self.latency),
        })
    }
}

/// One payload of `size` random upper-case letters.
fn payload(size: usize) -> Bytes {
    let mut rng = rand::rng();
    (0..size).map(|_| rng.random_range(b'A'..=b'Z')).collect()
}

pub(crate) async fn run(args: ProduceArgs, bootstrap: &str) -> Result<()> {
    let bootstrap = super::effective_bootstrap(bootstrap, &args.producer_props);
    let ctx = Ctx {
        bootstrap,
        topic: Some(&args.topic),
    };
    if args.num_records == 0 {
        bail!("--num-records must be at least 1");
    }
    let config = super::producer_config(bootstrap, &args.producer_props, ctx)?;
    let acks = config.acks.to_string();
    crate::cluster::ensure_reachable(ctx).await?;
    let producer = Producer::new(config).map_err(|e| anyhow!(explain(&e, ctx)))?;
    // Metadata first, so that the wait for it is not the first record's latency.
    producer
        .partition_count(&args.topic)
        .await
        .map_err(|e| anyhow!(explain(&e, ctx)))?;

    let value = payload(args.record_size);
    let bar = report::progress_bar(args.num_records, "records");
    let start = Instant::now();
    let stats = Arc::new(Mutex::new(Stats::new(start, &args, bootstrap, bar.clone())));
    let throttle = Throttle::new(args.throughput, start);
    for i in 0..args.num_records {
        throttle.wait(i).await;
        let sent = Instant::now();
        let record = ProducerRecord::new(args.topic.clone(), value.clone());
        let stats = stats.clone();
        let accepted = producer
            .send_with_callback(record, move |outcome| {
                stats
                    .lock()
                    .expect("stats lock is never poisoned")
                    .record(sent, outcome);
            })
            .await;
        if let Err(e) = accepted {
            // Not accepted (no topic, buffer full past max.block.ms): the next
            // records would fail the same way.
            producer.close().await;
            bar.finish_and_clear();
            bail!("record {i} was not accepted: {}", explain_produce(&e, ctx));
        }
    }
    producer.flush().await;
    producer.close().await;
    bar.finish_and_clear();

    let stats = stats.lock().expect("stats lock is never poisoned");
    println!("{}", stats.summary_line());
    if let Some(path) = &args.json_report {
        report::write_json(path, &stats.json(&args, &acks))?;
    }
    if stats.failed > 0 {
        bail!(
            "{} of {} records were not acknowledged; the first failure: {}",
            stats.failed,
            args.num_records,
            stats.first_error.as_deref().unwrap_or("unknown")
        );
    }
    Ok(())
}
