//! `syncline perf`: load generators with the flags and output of Kafka's tools,
//! so figures compare with Kafka's directly.
//!
//! - `produce` is `kafka-producer-perf-test`: records/s, MB/s, latency from
//!   `send` to acknowledgement (avg, max, p50/p95/p99/p99.9), a line every 5 s.
//! - `consume` is `kafka-consumer-perf-test`: records/s and MB/s.
//! - `e2e` is Kafka's `EndToEndLatency`: send one record, wait until a consumer
//!   has it, repeat; latency percentiles.
//!
//! "MB" is 2^20 bytes in the human-readable lines, as in Kafka's tools; the JSON
//! report (`--json-report`) gives bytes per second to avoid that ambiguity.
//! Progress bars are drawn on standard error, and only when it is a terminal.

mod consume;
mod e2e;
mod produce;
mod report;

use anyhow::{anyhow, Result};
use clap::{Args, Subcommand};
use syncline_client::{Acks, ConsumerConfig, ProducerConfig};

use crate::errors::{explain, Ctx};

#[derive(Debug, Subcommand)]
pub(crate) enum PerfCommand {
    /// Producer throughput and latency (kafka-producer-perf-test).
    Produce(ProduceArgs),
    /// Consumer throughput (kafka-consumer-perf-test).
    Consume(ConsumeArgs),
    /// End-to-end latency: send one record, wait until it is consumed
    /// (Kafka's EndToEndLatency).
    E2e(E2eArgs),
}

#[derive(Debug, Args)]
pub(crate) struct ProduceArgs {
    /// Topic to produce to (it must exist).
    #[arg(long)]
    pub(crate) topic: String,
    /// Number of records to send.
    #[arg(long)]
    pub(crate) num_records: u64,
    /// Size of each record's value in bytes (no key).
    #[arg(long)]
    pub(crate) record_size: usize,
    /// Records per second to aim at; -1 sends as fast as the producer accepts.
    #[arg(long, allow_negative_numbers = true)]
    pub(crate) throughput: f64,
    /// Producer settings with Kafka's names, e.g. acks=all linger.ms=5
    /// batch.size=65536 (bootstrap.servers overrides --bootstrap-server).
    #[arg(long, value_name = "KEY=VALUE", num_args = 1.., value_parser = parse_prop)]
    pub(crate) producer_props: Vec<(String, String)>,
    /// Also write the figures and the latency distribution as JSON to this file.
    #[arg(long, value_name = "FILE")]
    pub(crate) json_report: Option<std::path::PathBuf>,
}

#[derive(Debug, Args)]
pub(crate) struct ConsumeArgs {
    /// Topic to read (every partition).
    #[arg(long)]
    pub(crate) topic: String,
    /// Number of records to read.
    #[arg(long)]
    pub(crate) messages: u64,
    /// Give up when this long passes without a record.
    #[arg(long, default_value_t = 10_000)]
    pub(crate) timeout: u64,
    /// Start at the high watermark instead of the log start.
    #[arg(long)]
    pub(crate) from_latest: bool,
    /// Bytes fetched per partition per request (max.partition.fetch.bytes).
    #[arg(long)]
    pub(crate) fetch_size: Option<i32>,
    /// Print a line per reporting interval, not only the summary.
    #[arg(long)]
    pub(crate) show_detailed_stats: bool,
    /// Milliseconds between detailed lines.
    #[arg(long, default_value_t = 5_000)]
    pub(crate) reporting_interval: u64,
    /// Consumer settings with Kafka's names, e.g. fetch.max.wait.ms=100.
    #[arg(long, value_name = "KEY=VALUE", num_args = 1.., value_parser = parse_prop)]
    pub(crate) consumer_props: Vec<(String, String)>,
    /// Also write the figures as JSON to this file.
    #[arg(long, value_name = "FILE")]
    pub(crate) json_report: Option<std::path::PathBuf>,
}

#[derive(Debug, Args)]
pub(crate) struct E2eArgs {
    /// Topic to use (it must exist); records go to partition 0.
    #[arg(long)]
    pub(crate) topic: String,
    /// Number of round trips measured.
    #[arg(long)]
    pub(crate) num_records: u64,
    /// Size of each record's value in bytes.
    #[arg(long, default_value_t = 100)]
    pub(crate) record_size: usize,
    /// Acknowledgement level of the producer: 0, 1 or all.
    #[arg(long, default_value = "1", allow_negative_numbers = true, value_parser = crate::args::parse_acks)]
    pub(crate) producer_acks: Acks,
    /// Round trips made first and not measured (connections, metadata).
    #[arg(long, default_value_t = 10)]
    pub(crate) warmup_records: u64,
    /// How long one record may take before the run fails.
    #[arg(long, default_value_t = 60_000)]
    pub(crate) timeout: u64,
    /// Producer settings with Kafka's names.
    #[arg(long, value_name = "KEY=VALUE", num_args = 1.., value_parser = parse_prop)]
    pub(crate) producer_props: Vec<(String, String)>,
    /// Consumer settings with Kafka's names.
    #[arg(long, value_name = "KEY=VALUE", num_args = 1.., value_parser = parse_prop)]
    pub(crate) consumer_props: Vec<(String, String)>,
    /// Also write the figures and the latency distribution as JSON to this file.
    #[arg(long, value_name = "FILE")]
    pub(crate) json_report: Option<std::path::PathBuf>,
}

pub(crate) async fn run(command: PerfCommand, bootstrap: &str) -> Result<()> {
    match command {
        PerfCommand::Produce(args) => produce::run(args, bootstrap).await,
        PerfCommand::Consume(args) => consume::run(args, bootstrap).await,
        PerfCommand::E2e(args) => e2e::run(args, bootstrap).await,
    }
}

/// `KEY=VALUE` of a client setting (the name is checked when the config is built).
fn parse_prop(s: &str) -> Result<(String, String), String> {
    crate::args::parse_key_value(s, "linger.ms=5")
}

/// A producer configuration: defaults, the bootstrap list, then `props`.
fn producer_config(
    bootstrap: &str,
    props: &[(String, String)],
    ctx: Ctx<'_>,
) -> Result<ProducerConfig> {
    let mut config = ProducerConfig {
        client: crate::security::client_config(bootstrap),
        ..Default::default()
    };
    for (k, v) in props {
        config.set(k, v).map_err(|e| anyhow!(explain(&e, ctx)))?;
    }
    config.validate().map_err(|e| anyhow!(explain(&e, ctx)))?;
    Ok(config)
}

/// A consumer configuration: defaults, the bootstrap list, then `props`.
fn consumer_config(
    bootstrap: &str,
    props: &[(String, String)],
    ctx: Ctx<'_>,
) -> Result<ConsumerConfig> {
    let mut config = ConsumerConfig {
        client: crate::security::client_config(bootstrap),
        ..Default::default()
    };
    for (k, v) in props {
        config.set(k, v).map_err(|e| anyhow!(explain(&e, ctx)))?;
    }
    config.validate().map_err(|e| anyhow!(explain(&e, ctx)))?;
    Ok(config)
}

/// The bootstrap list a command really uses: `bootstrap.servers` in the props
/// wins over `--bootstrap-server`.
fn effective_bootstrap<'a>(bootstrap: &'a str, props: &'a [(String, String)]) -> &'a str {
    props
        .iter()
        .rev()
        .find(|(k, _)| syncline_client::config::canonical(k) == "bootstrap.servers")
        .map_or(bootstrap, |(_, v)| v.as_str())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::args::{Cli, Command};
    use clap::Parser;

    fn parse(args: &[&str]) -> Cli {
        Cli::try_parse_from(std::iter::once("syncline").chain(args.iter().copied())).unwrap()
    }

    #[test]
    fn produce_takes_kafkas_flags() {
        let cli = parse(&[
            "perf",
            "produce",
            "--topic",
            "t",
            "--num-records",
            "1000",
            "--record-size",
            "1024",
            "--throughput",
            "-1",
            "--producer-props",
            "acks=all",
            "linger.ms=5",
        ]);
        let Command::Perf(PerfCommand::Produce(p)) = cli.command else {
            panic!("{cli:?}")
        };
        assert_eq!(
            (p.num_records, p.record_size, p.throughput),
            (1000, 1024, -1.0)
        );
        assert_eq!(
            p.producer_props,
            [
                ("acks".to_string(), "all".to_string()),
                ("linger.ms".to_string(), "5".to_string())
            ]
        );
        assert!(parse_prop("acks")
            .unwrap_err()
            .contains("KEY=VALUE, e.g. linger.ms=5"));
        assert!(parse_prop(" = 5").unwrap_err().contains("empty"));
    }

    #[test]
    fn bootstrap_servers_prop_overrides_the_flag() {
        let props = vec![("bootstrap.servers".to_string(), "h:9".to_string())];
        assert_eq!(effective_bootstrap("a:1", &props), "h:9");
        assert_eq!(effective_bootstrap("a:1", &[]), "a:1");
        // Any spelling the client accepts for the setting.
        let props = vec![("BOOTSTRAP_SERVERS".to_string(), "k:7".to_string())];
        assert_eq!(effective_bootstrap("a:1", &props), "k:7");
    }
}
