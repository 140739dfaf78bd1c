//! `syncline consume`: values to standard output, one per line, as they arrive.

use std::io::Write;
use std::time::Duration;

use anyhow::{anyhow, bail, Result};
use syncline_client::{
    AutoOffsetReset, ClientError, Consumer, ConsumerConfig, ConsumerRecord, GroupConsumer,
    TopicPartition,
};
use tokio::time::Instant;

use crate::args::{ConsumeArgs, StartOffset};
use crate::errors::{explain, Ctx};

/// How long one poll waits when no `--timeout-ms` bounds it.
const POLL_MS: u64 = 1_000;

/// What is printed before each value.
#[derive(Debug, Clone, Copy, Default)]
pub(crate) struct Format {
    pub(crate) partition: bool,
    pub(crate) offset: bool,
    pub(crate) key: bool,
}

/// One output line: `[Partition:P\t][Offset:N\t][KEY\t]VALUE\n`, raw bytes, with
/// `null` for a missing key or value (as Kafka's console consumer prints).
pub(crate) fn format_record(r: &ConsumerRecord, format: Format, out: &mut Vec<u8>) {
    if format.partition {
        out.extend_from_slice(format!("Partition:{}\t", r.partition).as_bytes());
    }
    if format.offset {
        out.extend_from_slice(format!("Offset:{}\t", r.offset).as_bytes());
    }
    if format.key {
        out.extend_from_slice(r.key.as_deref().unwrap_or(b"null"));
        out.push(b'\t');
    }
    out.extend_from_slice(r.value.as_deref().unwrap_or(b"null"));
    out.push(b'\n');
}

/// Where records come from: assigned partitions, or a group's share of them.
enum Source {
    Partitions(Consumer),
    Group(GroupConsumer),
}

impl Source {
    async fn poll(&mut self, wait: Duration) -> Result<Vec<ConsumerRecord>, ClientError> {
        match self {
            Source::Partitions(c) => c.poll(wait).await,
            Source::Group(g) => g.poll(wait).await,
        }
    }
}

pub(crate) async fn run(args: ConsumeArgs, bootstrap: &str) -> Result<()> {
    let ctx = Ctx {
        bootstrap,
        topic: Some(&args.topic),
    };
    let fail = |e: syncline_client::ClientError| anyhow!(explain(&e, ctx));
    let from_beginning = args.from_beginning || args.offset == Some(StartOffset::Earliest);
    let mut config = ConsumerConfig {
        client: crate::security::client_config(bootstrap),
        auto_offset_reset: if from_beginning {
            AutoOffsetReset::Earliest
        } else {
            AutoOffsetReset::Latest
        },
        group_id: args.group.clone().unwrap_or_default(),
        ..Default::default()
    };
    for (key, value) in &args.consumer_properties {
        config
            .set(key, value)
            .map_err(|e| anyhow!("--consumer-property {key}={value}: {e}"))?;
    }
    config.validate().map_err(fail)?;
    let mut source = if args.group.is_some() {
        crate::cluster::ensure_reachable(ctx).await?;
        Source::Group(GroupConsumer::new(config, vec![args.topic.clone()]).map_err(fail)?)
    } else {
        Source::Partitions(assigned(&args, config, ctx).await?)
    };
    let format = Format {
        partition: args.print_partition,
        offset: args.print_offset,
        key: args.print_key,
    };
    let idle = args.timeout_ms.map(Duration::from_millis);
    let mut stdout = std::io::stdout();
    let mut buf = Vec::new();
    let mut count = 0u64;
    let mut last_record = Instant::now();
    let ctrl_c = tokio::signal::ctrl_c();
    tokio::pin!(ctrl_c);
    'consume: loop {
        if args.max_messages.is_some_and(|max| count >= max) {
            break;
        }
        let wait = match idle {
            Some(idle) => {
                let left = (last_record + idle).saturating_duration_since(Instant::now());
                if left.is_zero() {
                    break;
                }
                left
            }
            None => Duration::from_millis(POLL_MS),
        };
        let records = tokio::select! {
            records = source.poll(wait) => records.map_err(fail)?,
            _ = &mut ctrl_c => break,
        };
        if records.is_empty() {
            continue;
        }
        last_record = Instant::now();
        buf.clear();
        let printed = match args.max_messages {
            Some(max) => records.len().min((max - count) as usize),
            None => records.len(),
        };
        for record in &records[..printed] {
            format_record(record, format, &mut buf);
            count += 1;
        }
        // A group commits positions: put them back to the first record not
        // printed, so the group's next member starts there.
        if let Source::Group(group) = &mut source {
            let mut rewound = std::collections::BTreeSet::new();
            for r in &records[printed..] {
                if rewound.insert(r.partition) {
                    let tp = TopicPartition::new(&r.topic, r.partition);
                    group.seek(&tp, r.offset).map_err(fail)?;
                }
            }
        }
        // Written and flushed per poll, so a pipe sees records as they arrive.
        if let Err(e) = stdout.write_all(&buf).and_then(|()| stdout.flush()) {
            if e.kind() == std::io::ErrorKind::BrokenPipe {
                break 'consume;
            }
            return Err(anyhow!("cannot write to standard output: {e}"));
        }
    }
    if let Source::Group(group) = source {
        // Commits what was printed and hands the partitions to the others now.
        group.close().await.map_err(fail)?;
    }
    eprintln!("Processed a total of {count} messages");
    Ok(())
}

/// A consumer of the partitions asked for, at the offsets asked for.
async fn assigned(args: &ConsumeArgs, config: ConsumerConfig, ctx: Ctx<'_>) -> Result<Consumer> {
    let fail = |e: syncline_client::ClientError| anyhow!(explain(&e, ctx));
    let from_beginning = args.from_beginning || args.offset == Some(StartOffset::Earliest);
    let mut consumer = Consumer::new(config).map_err(fail)?;
    crate::cluster::ensure_reachable(ctx).await?;
    let wait = Duration::from_millis(args.max_block_ms);
    let all = match tokio::time::timeout(wait, consumer.partitions_for(&args.topic)).await {
        Ok(found) => found.map_err(fail)?,
        Err(_) => {
            return Err(fail(syncline_client::ClientError::UnknownTopic(
                args.topic.clone(),
            )))
        }
    };
    let partitions = match args.partition {
        Some(p) if all.contains(&p) => vec![p],
        Some(p) => bail!(
            "topic {} has no partition {p} (it has {}): see `syncline topic describe {0}`",
            args.topic,
            all.len()
        ),
        None => all,
    };
    let tps: Vec<TopicPartition> = partitions
        .into_iter()
        .map(|p| TopicPartition::new(&args.topic, p))
        .collect();
    consumer.assign(tps.clone());
    match args.offset {
        Some(StartOffset::At(offset)) => {
            for tp in &tps {
                consumer.seek(tp, offset).map_err(fail)?;
            }
        }
        _ if from_beginning => consumer.seek_to_beginning(&tps).map_err(fail)?,
        _ => consumer.seek_to_end(&tps).map_err(fail)?,
    }
    Ok(consumer)
}

#[cfg(test)]
mod tests {
    use super::*;
    use bytes::Bytes;

    fn record(key: Option<&'static str>, value: Option<&'static str>) -> ConsumerRecord {
        ConsumerRecord {
            topic: "t".into(),
            partition: 2,
            offset: 41,
            timestamp: 0,
            key: key.map(|k| Bytes::from_static(k.as_bytes())),
            value: value.map(|v| Bytes::from_static(v.as_bytes())),
            headers: vec![],
        }
    }

    fn line(r: &ConsumerRecord, f: Format) -> String {
        let mut out = Vec::new();
        format_record(r, f, &mut out);
        String::from_utf8(out).unwrap()
    }

    #[test]
    fn values_one_per_line_with_optional_prefixes() {
        let r = record(Some("k"), Some("hello"));
        assert_eq!(line(&r, Format::default()), "hello\n");
        let all = Format {
            partition: true,
            offset: true,
            key: true,
        };
        assert_eq!(line(&r, all), "Partition:2\tOffset:41\tk\thello\n");
        let bare = record(None, None);
        assert_eq!(
            line(
                &bare,
                Format {
                    key: true,
                    ..Format::default()
                }
            ),
            "null\tnull\n"
        );
    }
}
