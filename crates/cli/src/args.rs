//! Command-line arguments (clap derive) and their value parsers.

use clap::{Args, Parser, Subcommand};
use syncline_client::Acks;
use syncline_proto::compression::Compression;

/// The syncline command-line tool: topics, produce, consume, cluster.
#[derive(Debug, Parser)]
#[command(name = "syncline", version, about)]
pub(crate) struct Cli {
    /// Brokers to bootstrap from, HOST:PORT[,HOST:PORT...].
    #[arg(
        long,
        global = true,
        env = "SYNCLINE_BOOTSTRAP_SERVER",
        default_value = "127.0.0.1:9092",
        value_name = "HOST:PORT[,...]"
    )]
    pub(crate) bootstrap_server: String,

    /// --command-config and the security flags, for every client.
    #[command(flatten)]
    pub(crate) security: crate::security::SecurityArgs,

    #[command(subcommand)]
    pub(crate) command: Command,
}

#[derive(Debug, Subcommand)]
pub(crate) enum Command {
    /// Create, list and describe topics.
    #[command(subcommand)]
    Topic(TopicCommand),
    /// Send one record per line of standard input.
    Produce(ProduceArgs),
    /// Print records to standard output, one value per line.
    Consume(ConsumeArgs),
    /// Describe the cluster, or wait until it is ready.
    #[command(subcommand)]
    Cluster(ClusterCommand),
    /// List consumer groups, or describe one: members, partitions, committed
    /// offsets and lag.
    #[command(subcommand)]
    Group(crate::group::GroupCommand),
    /// Every broker's replication health from its Prometheus endpoint: ISR
    /// shrinks/expands (totals and rates), under-replicated and under-min-ISR
    /// partitions, offline partitions, fetcher lag.
    Metrics(crate::metrics::MetricsArgs),
    /// Load generators with the flags and output of Kafka's perf tools.
    #[command(subcommand)]
    Perf(crate::perf::PerfCommand),
    /// SCRAM users: create, delete, list; `user verifier` prints a
    /// scram_bootstrap_file line, offline.
    #[command(subcommand)]
    User(crate::user::UserCommand),
    /// ACLs, with Kafka's kafka-acls flags: add, remove, list.
    #[command(subcommand)]
    Acl(crate::acl::AclCommand),
    /// Client quotas (byte rates, request percentage) of users and client
    /// ids: set, delete, describe.
    #[command(subcommand)]
    Quota(crate::quota::QuotaCommand),
    /// Create a CA and certificates for a local cluster's TLS (offline).
    #[command(subcommand)]
    Cert(crate::cert::CertCommand),
}

#[derive(Debug, Subcommand)]
pub(crate) enum TopicCommand {
    /// Create a topic.
    Create(CreateArgs),
    /// List topic names.
    List,
    /// Show partitions, leaders, ISR, high watermarks and each leader's view of
    /// its replicas.
    Describe(DescribeArgs),
    /// Change a topic's configs live, or add partitions.
    Alter(AlterArgs),
    /// Delete topics: every broker drops their partitions and deletes its
    /// copies; the name can be used again at once.
    Delete(DeleteArgs),
    /// Move leadership back to each partition's preferred replica (the first of
    /// its replicas) where it is in the ISR (Kafka's kafka-leader-election
    /// --election-type PREFERRED).
    ElectLeaders(ElectLeadersArgs),
    /// Move partitions' replicas to other brokers, or change their replication
    /// factor (Kafka's kafka-reassign-partitions): one partition with --partition
    /// and --replicas, many with --plan FILE (Kafka's JSON format); --cancel
    /// undoes a reassignment in progress; --generate prints a plan that moves
    /// the named topics onto --broker-ids. Progress: `syncline topic describe`.
    Reassign(ReassignArgs),
}

#[derive(Debug, Args)]
pub(crate) struct DeleteArgs {
    /// The topics to delete.
    #[arg(required = true)]
    pub(crate) names: Vec<String>,
    /// Print JSON instead of a line per topic.
    #[arg(long)]
    pub(crate) json: bool,
}

#[derive(Debug, Args)]
pub(crate) struct ReassignArgs {
    /// Topic name (with --partition, or the topics to move with --generate).
    pub(crate) name: Option<String>,
    /// The partition to move (repeatable with --cancel).
    #[arg(long = "partition", requires = "name")]
    pub(crate) partitions: Vec<i32>,
    /// The target replicas, e.g. 2,3,4 (the first is the preferred leader).
    #[arg(long, value_delimiter = ',', num_args = 1.., conflicts_with_all = ["cancel", "generate", "plan"])]
    pub(crate) replicas: Vec<i32>,
    /// A reassignment plan: {"version":1,"partitions":[{"topic":"t","partition":0,
    /// "replicas":[2,3,4]},...]} (the output of --generate, or Kafka's).
    #[arg(long, value_name = "FILE", conflicts_with_all = ["name", "generate"])]
    pub(crate) plan: Option<std::path::PathBuf>,
    /// Cancel the reassignment in progress of the named partitions (or of the
    /// plan's) and go back to the original replicas.
    #[arg(long)]
    pub(crate) cancel: bool,
    /// Print a plan moving every partition of the named topics (TOPIC and
    /// --topic) onto --broker-ids, keeping the replicas already there; changes
    /// nothing. Save it and run it with --plan.
    #[arg(long, requires = "broker_ids", conflicts_with_all = ["cancel", "partitions"])]
    pub(crate) generate: bool,
    /// More topics for --generate (repeatable).
    #[arg(long = "topic", requires = "generate")]
    pub(crate) topics: Vec<String>,
    /// The brokers --generate may place replicas on, e.g. 2,3,4.
    #[arg(long, value_delimiter = ',', num_args = 1.., requires = "generate")]
    pub(crate) broker_ids: Vec<i32>,
    /// Print JSON instead of a table.
    #[arg(long)]
    pub(crate) json: bool,
}

#[derive(Debug, Args)]
pub(crate) struct AlterArgs {
    /// Topic name.
    pub(crate) name: String,
    /// Set a topic config, with Kafka's dotted name, e.g. min.insync.replicas=2
    /// (repeatable).
    #[arg(long = "config", value_name = "KEY=VALUE", value_parser = parse_config)]
    pub(crate) configs: Vec<(String, String)>,
    /// Put a topic config back to its default (repeatable).
    #[arg(long = "delete-config", value_name = "KEY")]
    pub(crate) delete_configs: Vec<String>,
    /// The new number of partitions (it can only grow; keyed records of existing
    /// keys may then go to other partitions).
    #[arg(long)]
    pub(crate) partitions: Option<i32>,
}

#[derive(Debug, Args)]
pub(crate) struct ElectLeadersArgs {
    /// Topic name (default: every partition of every topic).
    pub(crate) name: Option<String>,
    /// Only this partition of the topic (repeatable; needs the topic).
    #[arg(long = "partition", requires = "name")]
    pub(crate) partitions: Vec<i32>,
    /// Print JSON instead of a table.
    #[arg(long)]
    pub(crate) json: bool,
}

#[derive(Debug, Args)]
pub(crate) struct CreateArgs {
    /// Topic name.
    pub(crate) name: String,
    /// Number of partitions.
    #[arg(long)]
    pub(crate) partitions: i32,
    /// Replicas per partition (at most the number of live brokers).
    #[arg(long)]
    pub(crate) replication_factor: i32,
    /// A topic config with Kafka's dotted name, e.g. min.insync.replicas=2
    /// (repeatable).
    #[arg(long = "config", value_name = "KEY=VALUE", value_parser = parse_config)]
    pub(crate) configs: Vec<(String, String)>,
}

#[derive(Debug, Args)]
pub(crate) struct DescribeArgs {
    /// Topic name.
    pub(crate) name: String,
    /// Print JSON instead of tables.
    #[arg(long)]
    pub(crate) json: bool,
    #[command(flatten)]
    pub(crate) fields: crate::fields::PartitionFields,
}

#[derive(Debug, Args)]
pub(crate) struct ProduceArgs {
    /// Topic to write to.
    pub(crate) topic: String,
    /// Write every record to this partition (default: by key, or sticky without
    /// a key).
    #[arg(long)]
    pub(crate) partition: Option<i32>,
    /// Acknowledgement level: 0 (none), 1 (leader), all (every ISR member).
    #[arg(long, default_value = "all", value_parser = parse_acks, allow_negative_numbers = true)]
    pub(crate) acks: Acks,
    /// Split each line at the first SEP into key and value.
    #[arg(long, value_name = "SEP")]
    pub(crate) key_separator: Option<String>,
    /// How long a batch waits for more records.
    #[arg(long, default_value_t = 5)]
    pub(crate) linger_ms: u64,
    /// Bytes that make a batch full.
    #[arg(long, default_value_t = 16_384)]
    pub(crate) batch_size: usize,
    /// Retries of a batch after a retriable error (Kafka's console producer
    /// default); raise it to ride out a leader election.
    #[arg(long, default_value_t = 3)]
    pub(crate) retries: u32,
    /// Bound on the time from reading a line to its acknowledgement.
    #[arg(long, default_value_t = 120_000)]
    pub(crate) delivery_timeout_ms: u64,
    /// How long to wait for the topic's metadata (a topic created a moment ago)
    /// or for room in the send buffer.
    #[arg(long, default_value_t = 10_000)]
    pub(crate) max_block_ms: u64,
    /// Produce requests outstanding per broker; 1 keeps the lines' order within a
    /// partition across retries.
    #[arg(long, default_value_t = 1)]
    pub(crate) max_in_flight: usize,
    /// How batches are compressed: none, gzip, snappy, lz4 or zstd (Kafka's
    /// `compression.type`); consumers read any.
    #[arg(long, default_value = "none", value_parser = parse_compression)]
    pub(crate) compression_type: Compression,
    /// true: an idempotent producer (a retried batch is written once); false:
    /// not. Unset: on unless --acks is not all or --retries is 0 (Kafka 3.x's
    /// default).
    #[arg(long, value_name = "true|false")]
    pub(crate) enable_idempotence: Option<bool>,
    /// Print a line per acknowledged record, `Partition:P<TAB>Offset:N<TAB>AckedBy:1,2,3`:
    /// where it went and the replicas its acknowledgement rests on (with acks=all,
    /// the ISR at the time).
    #[arg(long)]
    pub(crate) print_metadata: bool,
    /// Any producer setting by Kafka's name, e.g. `linger.ms=20` (Kafka's
    /// console producer flag); repeatable, applied after the flags above.
    #[arg(long = "producer-property", value_name = "KEY=VALUE", value_parser = parse_property)]
    pub(crate) producer_properties: Vec<(String, String)>,
}

#[derive(Debug, Args)]
pub(crate) struct ConsumeArgs {
    /// Topic to read.
    pub(crate) topic: String,
    /// Read only this partition (default: all).
    #[arg(long, conflicts_with = "group")]
    pub(crate) partition: Option<i32>,
    /// Start at the first offset still in the log (with --group: where the
    /// group has committed nothing).
    #[arg(long, conflicts_with = "offset")]
    pub(crate) from_beginning: bool,
    /// Start at this offset (or `earliest` / `latest`) in every partition read.
    #[arg(long, value_parser = parse_start_offset, conflicts_with = "group")]
    pub(crate) offset: Option<StartOffset>,
    /// Consume as a member of this consumer group: the group's members share
    /// the topic's partitions, and each resumes from the group's committed
    /// offsets (committed every auto.commit.interval.ms and on exit).
    #[arg(long, value_name = "GROUP")]
    pub(crate) group: Option<String>,
    /// Any consumer setting by Kafka's name, e.g. `client.rack=r1` or
    /// `session.timeout.ms=10000` (Kafka's console consumer flag); repeatable.
    #[arg(long = "consumer-property", value_name = "KEY=VALUE", value_parser = parse_property)]
    pub(crate) consumer_properties: Vec<(String, String)>,
    /// How long to wait for the topic's metadata (a topic created a moment ago).
    #[arg(long, default_value_t = 10_000)]
    pub(crate) max_block_ms: u64,
    /// Exit after this many records.
    #[arg(long)]
    pub(crate) max_messages: Option<u64>,
    /// Exit when this long passes without a record (default: run until Ctrl-C).
    #[arg(long)]
    pub(crate) timeout_ms: Option<u64>,
    /// Print `Partition:P` before each value.
    #[arg(long)]
    pub(crate) print_partition: bool,
    /// Print `Offset:N` before each value.
    #[arg(long)]
    pub(crate) print_offset: bool,
    /// Print the key and a tab before each value (`null` for no key).
    #[arg(long)]
    pub(crate) print_key: bool,
}

/// Where `consume --offset` starts.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum StartOffset {
    Earliest,
    Latest,
    At(i64),
}

#[derive(Debug, Subcommand)]
pub(crate) enum ClusterCommand {
    /// Brokers (alive or fenced, epochs, metrics addresses) and the controller.
    Describe {
        /// Print JSON instead of a table.
        #[arg(long)]
        json: bool,
        #[command(flatten)]
        fields: crate::fields::ClusterFields,
    },
    /// Wait until N brokers are registered, unfenced and answer Metadata;
    /// otherwise exit non-zero naming the broker that is not ready.
    WaitReady(crate::wait_ready::WaitReadyArgs),
}

/// `KEY=VALUE` with a dotted, lower-case Kafka config name.
pub(crate) fn parse_config(s: &str) -> Result<(String, String), String> {
    let (key, value) = parse_key_value(s, "min.insync.replicas=2")?;
    if key.contains('_') {
        return Err(format!(
            "topic configs use Kafka's dotted names: did you mean {}?",
            key.replace('_', ".")
        ));
    }
    if !key
        .chars()
        .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '.' || c == '-')
    {
        return Err(format!(
            "{key:?} is not a config name (lower-case words separated by dots, e.g. retention.ms)"
        ));
    }
    Ok((key, value))
}

/// `KEY=VALUE`, both trimmed, the key not empty; `example` shows the form when
/// there is no '='.
pub(crate) fn parse_key_value(s: &str, example: &str) -> Result<(String, String), String> {
    let Some((key, value)) = s.split_once('=') else {
        return Err(format!("expected KEY=VALUE, e.g. {example} (got {s:?})"));
    };
    let key = key.trim();
    if key.is_empty() {
        return Err(format!("the name before '=' is empty in {s:?}"));
    }
    Ok((key.to_string(), value.trim().to_string()))
}

/// `KEY=VALUE` of a client setting.
pub(crate) fn parse_property(s: &str) -> Result<(String, String), String> {
    parse_key_value(s, "linger.ms=20")
}

pub(crate) fn parse_compression(s: &str) -> Result<Compression, String> {
    s.parse()
}

pub(crate) fn parse_acks(s: &str) -> Result<Acks, String> {
    s.parse()
}

fn parse_start_offset(s: &str) -> Result<StartOffset, String> {
    match s {
        "earliest" => Ok(StartOffset::Earliest),
        "latest" => Ok(StartOffset::Latest),
        n => match n.parse::<i64>() {
            Ok(o) if o >= 0 => Ok(StartOffset::At(o)),
            _ => Err(format!(
                "expected an offset >= 0, `earliest` or `latest` (got {n:?})"
            )),
        },
    }
}

/// Parses `args` as the subcommands of `syncline NAME` alone (`C`: the
/// command's subcommand enum), for the commands' own tests.
#[cfg(test)]
pub(crate) fn parse_subcommand<C: clap::Subcommand>(
    name: &'static str,
    args: &[&str],
) -> Result<C, clap::Error> {
    let command = C::augment_subcommands(clap::Command::new(name)).subcommand_required(true);
    let matches =
        command.try_get_matches_from(std::iter::once(name).chain(args.iter().copied()))?;
    C::from_arg_matches(&matches)
}

#[cfg(test)]
mod tests {
    use super::*;
    use clap::CommandFactory;

    fn parse(args: &[&str]) -> Result<Cli, clap::Error> {
        Cli::try_parse_from(std::iter::once("syncline").chain(args.iter().copied()))
    }

    #[test]
    fn clap_definition_is_consistent() {
        Cli::command().debug_assert();
    }

    #[test]
    fn topic_create_takes_repeated_configs() {
        let cli = parse(&[
            "topic",
            "create",
            "events",
            "--partitions",
            "3",
            "--replication-factor",
            "3",
            "--config",
            "min.insync.replicas=2",
            "--config",
            "retention.ms=60000",
        ])
        .unwrap();
        let Command::Topic(TopicCommand::Create(c)) = cli.command else {
            panic!("{cli:?}")
        };
        assert_eq!(
            (c.name.as_str(), c.partitions, c.replication_factor),
            ("events", 3, 3)
        );
        assert_eq!(
            c.configs,
            [
                ("min.insync.replicas".to_string(), "2".to_string()),
                ("retention.ms".to_string(), "60000".to_string())
            ]
        );
    }

    #[test]
    fn malformed_configs_are_refused_with_a_reason() {
        assert!(parse_config("min.insync.replicas")
            .unwrap_err()
            .contains("KEY=VALUE"));
        assert!(parse_config("=2").unwrap_err().contains("empty"));
        assert!(parse_config("min_insync_replicas=2")
            .unwrap_err()
            .contains("did you mean min.insync.replicas"));
        assert!(parse_config("Min.ISR=2").is_err());
        assert_eq!(
            parse_config("cleanup.policy=compact,delete").unwrap(),
            ("cleanup.policy".into(), "compact,delete".into())
        );
        let err = parse(&[
            "topic",
            "create",
            "t",
            "--partitions",
            "1",
            "--replication-factor",
            "1",
            "--config",
            "x",
        ])
        .unwrap_err();
        assert_eq!(err.kind(), clap::error::ErrorKind::ValueValidation);
    }

    #[test]
    fn acks_values() {
        for (arg, want) in [
            ("0", Acks::None),
            ("1", Acks::Leader),
            ("all", Acks::All),
            ("-1", Acks::All),
        ] {
            let cli = parse(&["produce", "t", "--acks", arg]).unwrap();
            let Command::Produce(p) = cli.command else {
                panic!()
            };
            assert_eq!(p.acks, want, "{arg}");
        }
        let Command::Produce(p) = parse(&["produce", "t"]).unwrap().command else {
            panic!()
        };
        assert_eq!(
            (p.acks, p.linger_ms, p.batch_size, p.retries),
            (Acks::All, 5, 16_384, 3)
        );
        assert!(parse(&["produce", "t", "--acks", "2"]).is_err());
        assert_eq!(p.compression_type, Compression::None);
        let Command::Produce(p) = parse(&["produce", "t", "--compression-type", "zstd"])
            .unwrap()
            .command
        else {
            panic!()
        };
        assert_eq!(p.compression_type, Compression::Zstd);
        let err = parse(&["produce", "t", "--compression-type", "lzma"])
            .unwrap_err()
            .to_string();
        assert!(err.contains("none, gzip, snappy, lz4, zstd"), "{err}");
        assert_eq!(p.enable_idempotence, None);
        let Command::Produce(p) = parse(&["produce", "t", "--enable-idempotence", "false"])
            .unwrap()
            .command
        else {
            panic!()
        };
        assert_eq!(p.enable_idempotence, Some(false));
        assert!(parse(&["produce", "t", "--enable-idempotence", "maybe"]).is_err());
    }

    #[test]
    fn consume_start_options() {
        let Command::Consume(c) =
            parse(&["consume", "t", "--from-beginning", "--max-messages", "5"])
                .unwrap()
                .command
        else {
            panic!()
        };
        assert!(c.from_beginning);
        assert_eq!(c.max_messages, Some(5));
        let Command::Consume(c) = parse(&[
            "consume",
            "t",
            "--partition",
            "2",
            "--offset",
            "7",
            "--print-offset",
        ])
        .unwrap()
        .command
        else {
            panic!()
        };
        assert_eq!(
            (c.partition, c.offset, c.print_offset),
            (Some(2), Some(StartOffset::At(7)), true)
        );
        assert!(parse(&["consume", "t", "--from-beginning", "--offset", "3"]).is_err());
        assert!(parse(&["consume", "t", "--offset", "-3"]).is_err());
        let Command::Consume(c) = parse(&["consume", "t", "--offset", "earliest"])
            .unwrap()
            .command
        else {
            panic!()
        };
        assert_eq!(c.offset, Some(StartOffset::Earliest));
    }

    #[test]
    fn bootstrap_server_flag_env_and_default() {
        // The only test touching this variable, so it cannot race with another.
        std::env::remove_var("SYNCLINE_BOOTSTRAP_SERVER");
        assert_eq!(
            parse(&["topic", "list"]).unwrap().bootstrap_server,
            "127.0.0.1:9092"
        );
        std::env::set_var("SYNCLINE_BOOTSTRAP_SERVER", "10.0.0.5:19092,10.0.0.6:19092");
        assert_eq!(
            parse(&["topic", "list"]).unwrap().bootstrap_server,
            "10.0.0.5:19092,10.0.0.6:19092"
        );
        // The flag wins over the environment, and works after the subcommand.
        assert_eq!(
            parse(&["topic", "list", "--bootstrap-server", "h:1"])
                .unwrap()
                .bootstrap_server,
            "h:1"
        );
        std::env::remove_var("SYNCLINE_BOOTSTRAP_SERVER");
    }
}
