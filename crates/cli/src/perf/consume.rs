//! `syncline perf consume`: kafka-consumer-perf-test.
//!
//! Reads `--messages` records from every partition of the topic (from the log
//! start, or the high watermark with `--from-latest`) and prints Kafka's summary:
//! MB and records consumed and their rates. Bytes are keys plus values, as Kafka
//! counts them. There are no consumer groups, so the rebalance time is 0 and the
//! fetch figures equal the totals.

use std::time::{Duration, SystemTime};

use anyhow::{anyhow, bail, Result};
use serde_json::json;
use syncline_client::{Consumer, TopicPartition};
use tokio::time::Instant;

use super::report::{self, KAFKA_MB};
use super::ConsumeArgs;
use crate::errors::{explain, Ctx};

const HEADER: &str = "start.time, end.time, data.consumed.in.MB, MB.sec, data.consumed.in.nMsg, \
                      nMsg.sec, rebalance.time.ms, fetch.time.ms, fetch.MB.sec, fetch.nMsg.sec";
const DETAILED_HEADER: &str = "time, threadId, data.consumed.in.MB, MB.sec, data.consumed.in.nMsg, \
                               nMsg.sec, rebalance.time.ms, fetch.time.ms, fetch.MB.sec, fetch.nMsg.sec";

/// Kafka's columns after the times: MB, MB/s, records, records/s, rebalance ms
/// (always 0: no groups), fetch ms, and the fetch rates (the same as the totals).
fn rates(bytes: u64, records: u64, secs: f64) -> String {
    let mb = bytes as f64 / KAFKA_MB;
    let secs = secs.max(1e-9);
    format!(
        "{mb:.4}, {:.4}, {records}, {:.4}, 0, {:.0}, {:.4}, {:.4}",
        mb / secs,
        records as f64 / secs,
        secs * 1000.0,
        mb / secs,
        records as f64 / secs,
    )
}

/// The summary line from `start` to `end`.
fn figures(start: SystemTime, end: SystemTime, bytes: u64, records: u64, secs: f64) -> String {
    format!(
        "{}, {}, {}",
        report::format_wall_clock(start),
        report::format_wall_clock(end),
        rates(bytes, records, secs)
    )
}

/// A `--show-detailed-stats` line (thread id 0: there is one consumer).
fn detailed(at: SystemTime, bytes: u64, records: u64, secs: f64) -> String {
    format!(
        "{}, 0, {}",
        report::format_wall_clock(at),
        rates(bytes, records, secs)
    )
}

pub(crate) async fn run(args: ConsumeArgs, bootstrap: &str) -> Result<()> {
    let bootstrap = super::effective_bootstrap(bootstrap, &args.consumer_props);
    let ctx = Ctx {
        bootstrap,
        topic: Some(&args.topic),
    };
    let fail = |e: syncline_client::ClientError| anyhow!(explain(&e, ctx));
    let mut config = super::consumer_config(bootstrap, &args.consumer_props, ctx)?;
    if let Some(size) = args.fetch_size {
        config.max_partition_fetch_bytes = size;
    }
    crate::cluster::ensure_reachable(ctx).await?;
    let mut consumer = Consumer::new(config).map_err(fail)?;
    let tps: Vec<TopicPartition> = consumer
        .partitions_for(&args.topic)
        .await
        .map_err(fail)?
        .into_iter()
        .map(|p| TopicPartition::new(&args.topic, p))
        .collect();
    consumer.assign(tps.clone());
    if args.from_latest {
        consumer.seek_to_end(&tps).map_err(fail)?;
    } else {
        consumer.seek_to_beginning(&tps).map_err(fail)?;
    }
    // Positions first, so the ListOffsets round trips are not in the rate.
    for tp in &tps {
        consumer.position(tp).await.map_err(fail)?;
    }

    let bar = report::progress_bar(args.messages, "records");
    let idle = Duration::from_millis(args.timeout);
    let interval = Duration::from_millis(args.reporting_interval.max(1));
    let start_wall = SystemTime::now();
    let start = Instant::now();
    let (mut records, mut bytes) = (0u64, 0u64);
    let mut last_record = start;
    let (mut window_start, mut window_records, mut window_bytes) = (start, 0u64, 0u64);
    if args.show_detailed_stats {
        report::print_line(&bar, DETAILED_HEADER);
    }
    while records < args.messages {
        let left = (last_record + idle).saturating_duration_since(Instant::now());
        if left.is_zero() {
            bar.finish_and_clear();
            bail!(
                "exiting before consuming the expected number of messages: no record for \
                 --timeout {} ms after {records} of {} (is the topic that full? produce first, \
                 or lower --messages)",
                args.timeout,
                args.messages
            );
        }
        let batch = consumer.poll(left).await.map_err(fail)?;
        if batch.is_empty() {
            continue;
        }
        last_record = Instant::now();
        let take = batch.len().min((args.messages - records) as usize);
        let batch_bytes: u64 = batch[..take]
            .iter()
            .map(|r| {
                (r.key.as_ref().map_or(0, |k| k.len()) + r.value.as_ref().map_or(0, |v| v.len()))
                    as u64
            })
            .sum();
        records += take as u64;
        bytes += batch_bytes;
        bar.inc(take as u64);
        if args.show_detailed_stats {
            window_records += take as u64;
            window_bytes += batch_bytes;
            let now = Instant::now();
            if now - window_start >= interval {
                let secs = (now - window_start).as_secs_f64();
                let line = detailed(SystemTime::now(), window_bytes, window_records, secs);
                report::print_line(&bar, &line);
                (window_start, window_records, window_bytes) = (now, 0, 0);
            }
        }
    }
    let secs = (last_record - start).as_secs_f64().max(1e-9);
    let end_wall = start_wall + (last_record - start);
    bar.finish_and_clear();
    if !args.show_detailed_stats {
        println!("{HEADER}");
        println!("{}", figures(start_wall, end_wall, bytes, records, secs));
    }
    if let Some(path) = &args.json_report {
        report::write_json(
            path,
            &json!({
                "tool": "perf consume",
                "topic": args.topic,
                "records": records,
                "bytes": bytes,
                "elapsed_s": secs,
                "records_per_sec": records as f64 / secs,
                "bytes_per_sec": bytes as f64 / secs,
            }),
        )?;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn figures_line_has_kafkas_columns() {
        let t0 = std::time::UNIX_EPOCH + Duration::from_millis(1_700_000_000_000);
        let line = figures(t0, t0 + Duration::from_secs(2), 4 << 20, 4096, 2.0);
        assert_eq!(
            line,
            "2023-11-14 22:13:20:000, 2023-11-14 22:13:22:000, 4.0000, 2.0000, 4096, 2048.0000, 0, 2000, 2.0000, 2048.0000"
        );
        assert_eq!(line.split(", ").count(), HEADER.split(", ").count());
        let line = detailed(t0, 1 << 20, 10, 1.0);
        assert!(line.starts_with("2023-11-14 22:13:20:000, 0, 1.0000, 1.0000, 10,"));
        assert_eq!(
            line.split(", ").count(),
            DETAILED_HEADER.split(", ").count()
        );
    }
}
