//! `syncline produce`: one record per line of standard input.

use std::collections::BTreeMap;

use anyhow::{anyhow, Context as _, Result};
use bytes::Bytes;
use futures::{FutureExt, StreamExt};
use syncline_client::{
    Acks, ProduceError, Producer, ProducerConfig, ProducerRecord, RecordMetadata,
};
use tokio::io::{AsyncBufReadExt, BufReader};

use crate::args::ProduceArgs;
use crate::errors::{explain, explain_produce, Ctx};

/// Outcomes of every record, aggregated for one report at the end.
#[derive(Debug, Default)]
pub(crate) struct Tally {
    acknowledged: u64,
    /// Failure message → records.
    failed: BTreeMap<String, u64>,
    /// (acknowledging ISR, replication factor) → records, for acks=all
    /// acknowledgements by fewer replicas than the replication factor.
    weakened: BTreeMap<(Vec<i32>, i32), u64>,
}

impl Tally {
    pub(crate) fn add(
        &mut self,
        outcome: Result<RecordMetadata, ProduceError>,
        acks: Acks,
        ctx: Ctx<'_>,
    ) {
        match outcome {
            Ok(md) => {
                self.acknowledged += 1;
                if acks == Acks::All && md.is_under_replicated() {
                    let mut isr = md.acked_isr.to_vec();
                    isr.sort_unstable();
                    *self
                        .weakened
                        .entry((isr, md.replication_factor))
                        .or_default() += 1;
                }
            }
            Err(e) => *self.failed.entry(explain_produce(&e, ctx)).or_default() += 1,
        }
    }

    /// A failure that is not about one record (e.g. an unreadable input line).
    pub(crate) fn add_failure(&mut self, message: String) {
        *self.failed.entry(message).or_default() += 1;
    }

    fn failed_count(&self) -> u64 {
        self.failed.values().sum()
    }

    /// Warnings to print, one per distinct acknowledging ISR.
    pub(crate) fn warnings(&self) -> Vec<String> {
        self.weakened
            .iter()
            .map(|((isr, rf), n)| {
                format!(
                    "warning: {n} {} acknowledged by ISR {isr:?} only (replication factor {rf})",
                    plural(*n, "record", "records")
                )
            })
            .collect()
    }

    /// The error to report, if any record failed.
    pub(crate) fn error(&self, acks: Acks) -> Option<String> {
        let failed = self.failed_count();
        if failed == 0 {
            return None;
        }
        let mut out = format!(
            "{failed} {} not acknowledged:",
            plural(failed, "record was", "records were")
        );
        for (message, n) in &self.failed {
            out.push_str(&format!("\n  {n} × {message}"));
        }
        out.push_str(&format!(
            "\n{} of {} records acknowledged (acks={acks})",
            self.acknowledged,
            self.acknowledged + failed
        ));
        Some(out)
    }
}

fn plural<'a>(n: u64, one: &'a str, many: &'a str) -> &'a str {
    if n == 1 {
        one
    } else {
        many
    }
}

/// `produce --print-metadata`'s line for one acknowledged record.
pub(crate) fn metadata_line(md: &RecordMetadata) -> String {
    let mut isr = md.acked_isr.to_vec();
    isr.sort_unstable();
    let acked_by = if isr.is_empty() {
        "-".to_string()
    } else {
        isr.iter().map(i32::to_string).collect::<Vec<_>>().join(",")
    };
    format!(
        "Partition:{}\tOffset:{}\tAckedBy:{acked_by}",
        md.partition, md.offset
    )
}

/// Splits a line into key and value at the first `separator`.
pub(crate) fn split_line<'a>(
    line: &'a [u8],
    separator: Option<&[u8]>,
) -> Option<(Option<&'a [u8]>, &'a [u8])> {
    let Some(sep) = separator.filter(|s| !s.is_empty()) else {
        return Some((None, line));
    };
    let at = line.windows(sep.len()).position(|w| w == sep)?;
    Some((Some(&line[..at]), &line[at + sep.len()..]))
}

fn strip_newline(line: &mut Vec<u8>) {
    if line.last() == Some(&b'\n') {
        line.pop();
        if line.last() == Some(&b'\r') {
            line.pop();
        }
    }
}

fn print_metadata(outcome: &Result<RecordMetadata, ProduceError>, enabled: bool) {
    if let (true, Ok(md)) = (enabled, outcome) {
        println!("{}", metadata_line(md));
    }
}

pub(crate) async fn run(args: ProduceArgs, bootstrap: &str) -> Result<()> {
    let ctx = Ctx {
        bootstrap,
        topic: Some(&args.topic),
    };
    let mut client = crate::security::client_config(bootstrap);
    // Kafka requires delivery_timeout_ms >= linger_ms + request_timeout_ms; a
    // short delivery timeout shortens the request timeout rather than fail.
    client.request_timeout_ms = client.request_timeout_ms.min(
        args.delivery_timeout_ms
            .saturating_sub(args.linger_ms)
            .max(1),
    );
    let mut config = ProducerConfig {
        client,
        acks: args.acks,
        linger_ms: args.linger_ms,
        batch_size: args.batch_size,
        retries: args.retries,
        delivery_timeout_ms: args.delivery_timeout_ms,
        max_in_flight_requests_per_connection: args.max_in_flight,
        max_block_ms: args.max_block_ms,
        compression_type: args.compression_type,
        enable_idempotence: args.enable_idempotence,
        ..Default::default()
    };
    for (key, value) in &args.producer_properties {
        config
            .set(key, value)
            .map_err(|e| anyhow!("--producer-property {key}={value}: {e}"))?;
    }
    crate::cluster::ensure_reachable(ctx).await?;
    let producer = Producer::new(config).map_err(|e| anyhow!(explain(&e, ctx)))?;

    let separator = args.key_separator.as_deref().map(str::as_bytes);
    let mut stdin = BufReader::new(tokio::io::stdin());
    let mut line = Vec::new();
    let mut line_number = 0u64;
    let mut pending = futures::stream::FuturesUnordered::new();
    let mut tally = Tally::default();
    loop {
        line.clear();
        let read = stdin
            .read_until(b'\n', &mut line)
            .await
            .context("cannot read standard input")?;
        if read == 0 {
            break;
        }
        line_number += 1;
        strip_newline(&mut line);
        let Some((key, value)) = split_line(&line, separator) else {
            tally.add_failure(format!(
                "line {line_number} has no key separator {:?}: write KEY{0}VALUE, or drop --key-separator",
                args.key_separator.as_deref().unwrap_or_default()
            ));
            break;
        };
        let mut record = ProducerRecord::new(args.topic.clone(), Bytes::copy_from_slice(value));
        record.key = key.map(Bytes::copy_from_slice);
        record.partition = args.partition;
        match producer.enqueue(record).await {
            Ok(delivery) => pending.push(delivery),
            Err(e) => {
                // The next records would fail the same way (no topic, no room).
                tally.add(Err(e), args.acks, ctx);
                break;
            }
        }
        while let Some(Some(outcome)) = pending.next().now_or_never() {
            print_metadata(&outcome, args.print_metadata);
            tally.add(outcome, args.acks, ctx);
        }
    }
    producer.flush().await;
    while let Some(outcome) = pending.next().await {
        print_metadata(&outcome, args.print_metadata);
        tally.add(outcome, args.acks, ctx);
    }
    producer.close().await;

    for warning in tally.warnings() {
        eprintln!("{warning}");
    }
    match tally.error(args.acks) {
        Some(error) => Err(anyhow!(error)),
        None => Ok(()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use syncline_client::ErrorCode;

    const CTX: Ctx<'static> = Ctx {
        bootstrap: "127.0.0.1:9092",
        topic: Some("t"),
    };

    fn acked(isr: &[i32], rf: i32) -> Result<RecordMetadata, ProduceError> {
        Ok(RecordMetadata {
            topic: "t".into(),
            partition: 0,
            offset: 0,
            acked_isr: isr.into(),
            replication_factor: rf,
            timestamp: 0,
        })
    }

    #[test]
    fn weakened_acknowledgements_are_aggregated() {
        let mut t = Tally::default();
        for _ in 0..120 {
            t.add(acked(&[2, 1], 3), Acks::All, CTX);
        }
        t.add(acked(&[1, 2, 3], 3), Acks::All, CTX);
        t.add(acked(&[3], 3), Acks::All, CTX);
        assert_eq!(
            t.warnings(),
            [
                "warning: 120 records acknowledged by ISR [1, 2] only (replication factor 3)",
                "warning: 1 record acknowledged by ISR [3] only (replication factor 3)",
            ]
        );
        assert_eq!(t.error(Acks::All), None);
        // acks=1 asks for the leader alone: nothing to warn about.
        let mut t = Tally::default();
        t.add(acked(&[1], 3), Acks::Leader, CTX);
        assert!(t.warnings().is_empty());
    }

    #[test]
    fn failures_name_the_error_and_count_acknowledged_records() {
        let mut t = Tally::default();
        for _ in 0..7 {
            t.add(acked(&[1, 2, 3], 3), Acks::All, CTX);
        }
        for _ in 0..3 {
            t.add(
                Err(ProduceError::Broker {
                    code: ErrorCode::NotEnoughReplicas,
                    message: String::new(),
                }),
                Acks::All,
                CTX,
            );
        }
        let error = t.error(Acks::All).unwrap();
        assert!(
            error.starts_with("3 records were not acknowledged:\n  3 × NOT_ENOUGH_REPLICAS: "),
            "{error}"
        );
        assert!(
            error.ends_with("\n7 of 10 records acknowledged (acks=all)"),
            "{error}"
        );
    }

    #[test]
    fn metadata_lines_name_partition_offset_and_acknowledging_replicas() {
        let mut md = acked(&[3, 1], 3).unwrap();
        md.partition = 2;
        md.offset = 41;
        assert_eq!(metadata_line(&md), "Partition:2\tOffset:41\tAckedBy:1,3");
        md.acked_isr = [].into();
        assert_eq!(metadata_line(&md), "Partition:2\tOffset:41\tAckedBy:-");
    }

    #[test]
    fn lines_split_at_the_first_separator() {
        assert_eq!(
            split_line(b"k:v:w", Some(b":")),
            Some((Some(&b"k"[..]), &b"v:w"[..]))
        );
        assert_eq!(
            split_line(b"k::v", Some(b"::")),
            Some((Some(&b"k"[..]), &b"v"[..]))
        );
        assert_eq!(
            split_line(b":v", Some(b":")),
            Some((Some(&b""[..]), &b"v"[..]))
        );
        assert_eq!(split_line(b"novalue", Some(b":")), None);
        assert_eq!(split_line(b"a:b", None), Some((None, &b"a:b"[..])));
        let mut l = b"line\r\n".to_vec();
        strip_newline(&mut l);
        assert_eq!(l, b"line");
    }
}
