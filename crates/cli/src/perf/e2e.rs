//! `syncline perf e2e`: Kafka's EndToEndLatency.
//!
//! One record at a time: send it to partition 0 (waiting for its
//! acknowledgement as `--producer-acks` asks), then poll a consumer of that
//! partition until the record arrives, and check it is the one sent. The latency
//! is from the send to the record in the consumer's hands, so it includes the
//! replication needed for the high watermark to pass it (consumers only read
//! below it).

use std::time::Duration;

use anyhow::{anyhow, bail, Result};
use bytes::{BufMut, Bytes, BytesMut};
use rand::Rng;
use serde_json::json;
use syncline_client::{Consumer, Producer, ProducerRecord, TopicPartition};
use tokio::time::Instant;

use super::report;
use super::E2eArgs;
use crate::errors::{explain, explain_produce, Ctx};

/// Kafka prints the latency of every 1000th record.
const PRINT_EVERY: u64 = 1000;

/// A value of `size` bytes (at least 8) that starts with `seq`, so that the
/// consumer can tell it is the record just sent.
fn value(seq: u64, size: usize, rng: &mut impl Rng) -> Bytes {
    let mut v = BytesMut::with_capacity(size.max(8));
    v.put_u64(seq);
    while v.len() < size {
        v.put_u8(rng.random_range(b'A'..=b'Z'));
    }
    v.freeze()
}

pub(crate) async fn run(args: E2eArgs, bootstrap: &str) -> Result<()> {
    let bootstrap = super::effective_bootstrap(bootstrap, &args.producer_props);
    let ctx = Ctx {
        bootstrap,
        topic: Some(&args.topic),
    };
    let fail = |e: syncline_client::ClientError| anyhow!(explain(&e, ctx));
    let mut producer_props = vec![("acks".to_string(), args.producer_acks.to_string())];
    // One record at a time: it must leave at once rather than linger.
    producer_props.push(("linger.ms".to_string(), "0".to_string()));
    producer_props.extend(args.producer_props.iter().cloned());
    let producer_config = super::producer_config(bootstrap, &producer_props, ctx)?;
    let consumer_config = super::consumer_config(bootstrap, &args.consumer_props, ctx)?;
    crate::cluster::ensure_reachable(ctx).await?;

    let producer = Producer::new(producer_config).map_err(|e| anyhow!(explain(&e, ctx)))?;
    producer.partition_count(&args.topic).await.map_err(fail)?;
    let mut consumer = Consumer::new(consumer_config).map_err(fail)?;
    let tp = TopicPartition::new(&args.topic, 0);
    consumer.assign(vec![tp.clone()]);
    consumer
        .seek_to_end(std::slice::from_ref(&tp))
        .map_err(fail)?;
    consumer.position(&tp).await.map_err(fail)?;

    let timeout = Duration::from_millis(args.timeout);
    let total = args.warmup_records + args.num_records;
    let bar = report::progress_bar(total, "round trips");
    let mut latency = report::latency_histogram();
    let mut rng = rand::rng();
    for seq in 0..total {
        let value = value(seq, args.record_size, &mut rng);
        let sent = Instant::now();
        producer
            .send(ProducerRecord::new(args.topic.clone(), value.clone()).with_partition(0))
            .await
            .map_err(|e| anyhow!("record {seq} was not written: {}", explain_produce(&e, ctx)))?;
        let deadline = sent + timeout;
        let received = loop {
            let left = deadline.saturating_duration_since(Instant::now());
            if left.is_zero() {
                bar.finish_and_clear();
                bail!(
                    "record {seq} was acknowledged but not consumed within --timeout {} ms \
                     (is the high watermark advancing? check `syncline topic describe {}`)",
                    args.timeout,
                    args.topic
                );
            }
            let mut records = consumer.poll(left).await.map_err(fail)?;
            if records.is_empty() {
                continue;
            }
            if records.len() > 1 {
                bail!(
                    "{} records arrived for one sent: another producer is writing to {}-0; \
                     use a topic of its own",
                    records.len(),
                    args.topic
                );
            }
            break records.pop().expect("one record");
        };
        let elapsed = sent.elapsed();
        if received.value.as_ref() != Some(&value) {
            bail!(
                "the record consumed at offset {} is not the one sent (sequence {seq}): another \
                 producer is writing to {}-0; use a topic of its own",
                received.offset,
                args.topic
            );
        }
        bar.inc(1);
        if seq < args.warmup_records {
            continue;
        }
        report::record_latency(&mut latency, elapsed);
        let measured = seq - args.warmup_records;
        if measured.is_multiple_of(PRINT_EVERY) {
            report::print_line(
                &bar,
                &format!("{measured}\t{:.3}", elapsed.as_secs_f64() * 1000.0),
            );
        }
    }
    producer.close().await;
    bar.finish_and_clear();

    println!("Avg latency: {:.4} ms", latency.mean() / 1000.0);
    println!(
        "Percentiles: 50th = {:.2}, 95th = {:.2}, 99th = {:.2}, 99.9th = {:.2} (ms), max = {:.2} ms",
        report::ms_at(&latency, 0.50),
        report::ms_at(&latency, 0.95),
        report::ms_at(&latency, 0.99),
        report::ms_at(&latency, 0.999),
        latency.max() as f64 / 1000.0,
    );
    if let Some(path) = &args.json_report {
        report::write_json(
            path,
            &json!({
                "tool": "perf e2e",
                "topic": args.topic,
                "acks": args.producer_acks.to_string(),
                "record_size": args.record_size,
                "records": latency.len(),
                "latency_ms": report::latency_json(&latency),
                "latency_cdf": report::cdf_json(&latency),
            }),
        )?;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn values_carry_their_sequence_and_size() {
        let mut rng = rand::rng();
        let v = value(7, 100, &mut rng);
        assert_eq!(v.len(), 100);
        assert_eq!(&v[..8], &7u64.to_be_bytes());
        assert_eq!(value(1, 0, &mut rng).len(), 8);
    }
}
