//! The controller's configuration and the topic configs it validates.
//!
//! Names are Kafka's (dots as underscores in fields); defaults are Kafka's.

use std::collections::BTreeMap;

use syncline_proto::compression::{Compression, CODECS};

use crate::internal_topics::OffsetsTopicConfig;

/// `min.insync.replicas`: the ISR size `acks=all` needs.
pub const MIN_INSYNC_REPLICAS: &str = "min.insync.replicas";
/// `unclean.leader.election.enable`: may a replica outside the ISR become leader.
pub const UNCLEAN_LEADER_ELECTION_ENABLE: &str = "unclean.leader.election.enable";
/// `retention.ms`: -1 keeps records forever.
pub const RETENTION_MS: &str = "retention.ms";
/// `retention.bytes`: -1 means no size limit.
pub const RETENTION_BYTES: &str = "retention.bytes";
/// `segment.bytes`: the size at which a segment rolls.
pub const SEGMENT_BYTES: &str = "segment.bytes";
/// `segment.ms`: the age at which a segment rolls; -1 never rolls by time.
pub const SEGMENT_MS: &str = "segment.ms";
/// `replica.lag.time.max.ms`: syncline's per-topic override of the broker setting.
pub const REPLICA_LAG_TIME_MAX_MS: &str = "replica.lag.time.max.ms";
/// `flush.messages`: fsync after this many messages.
pub const FLUSH_MESSAGES: &str = "flush.messages";
/// `flush.ms`: fsync after this long.
pub const FLUSH_MS: &str = "flush.ms";
/// `compression.type`: `producer` keeps each batch as the producer compressed it;
/// a codec (or `uncompressed`) makes the leader recompress batches into it.
pub const COMPRESSION_TYPE: &str = "compression.type";
/// `message.timestamp.type`: `CreateTime` keeps the producer's timestamps;
/// `LogAppendTime` makes the leader stamp each batch with its append time.
pub const MESSAGE_TIMESTAMP_TYPE: &str = "message.timestamp.type";

/// Every topic config key the controller accepts.
pub const TOPIC_CONFIG_KEYS: [&str; 11] = [
    MIN_INSYNC_REPLICAS,
    UNCLEAN_LEADER_ELECTION_ENABLE,
    RETENTION_MS,
    RETENTION_BYTES,
    SEGMENT_BYTES,
    SEGMENT_MS,
    REPLICA_LAG_TIME_MAX_MS,
    FLUSH_MESSAGES,
    FLUSH_MS,
    COMPRESSION_TYPE,
    MESSAGE_TIMESTAMP_TYPE,
];

/// A topic config key or value that is not accepted; the message names the key and
/// the accepted values.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{message}")]
pub struct InvalidConfig {
    /// The offending key.
    pub key: String,
    /// What was wrong and what is accepted.
    pub message: String,
}

/// The effective configs of a topic (its overrides over the defaults), typed.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TopicConfig {
    /// `min.insync.replicas` (1).
    pub min_insync_replicas: i32,
    /// `unclean.leader.election.enable` (false).
    pub unclean_leader_election_enable: bool,
    /// `retention.ms` (7 days).
    pub retention_ms: i64,
    /// `retention.bytes` (-1).
    pub retention_bytes: i64,
    /// `segment.bytes` (1 GiB).
    pub segment_bytes: i32,
    /// `segment.ms` (7 days).
    pub segment_ms: i64,
    /// `replica.lag.time.max.ms` (30 s).
    pub replica_lag_time_max_ms: i64,
    /// `flush.messages` (never: Kafka relies on replication, not fsync).
    pub flush_messages: i64,
    /// `flush.ms` (never).
    pub flush_ms: i64,
    /// `compression.type` (`producer`: `None`; `uncompressed`: `Some(None)`).
    pub compression_type: Option<Compression>,
    /// `message.timestamp.type` (`CreateTime`: false; `LogAppendTime`: true).
    pub log_append_time: bool,
}

/// The text of a `compression.type` value, Kafka's topic-level names.
fn compression_name(c: Option<Compression>) -> &'static str {
    match c {
        None => "producer",
        Some(Compression::None) => "uncompressed",
        Some(codec) => codec.name(),
    }
}

impl Default for TopicConfig {
    fn default() -> Self {
        TopicConfig {
            min_insync_replicas: 1,
            unclean_leader_election_enable: false,
            retention_ms: 7 * 24 * 60 * 60 * 1000,
            retention_bytes: -1,
            segment_bytes: 1 << 30,
            segment_ms: 7 * 24 * 60 * 60 * 1000,
            replica_lag_time_max_ms: 30_000,
            flush_messages: i64::MAX,
            flush_ms: i64::MAX,
            compression_type: None,
            log_append_time: false,
        }
    }
}

/// The text of a `message.timestamp.type` value.
fn timestamp_type_name(log_append_time: bool) -> &'static str {
    if log_append_time {
        "LogAppendTime"
    } else {
        "CreateTime"
    }
}

/// The accepted values of a numeric key.
struct Range {
    min: i64,
    max: i64,
    text: &'static str,
}

const INT: i64 = i32::MAX as i64;
const RETENTION: Range = Range {
    min: -1,
    max: i64::MAX,
    text: "-1 (unlimited) or an integer >= 0",
};
const SEGMENT: Range = Range {
    min: 1024,
    max: INT,
    text: "an integer from 1024 to 2147483647",
};
const POSITIVE_LONG: Range = Range {
    min: 1,
    max: i64::MAX,
    text: "an integer >= 1",
};
const OFF_OR_POSITIVE_LONG: Range = Range {
    min: -1,
    max: i64::MAX,
    text: "-1 (never) or an integer >= 1",
};
const NON_NEGATIVE_LONG: Range = Range {
    min: 0,
    max: i64::MAX,
    text: "an integer >= 0",
};

impl TopicConfig {
    /// These configs with `overrides` applied. `replication_factor` bounds
    /// `min.insync.replicas`. Returns the typed result and the overrides with canonical
    /// values (what a `TopicRecord` stores).
    pub fn with_overrides<'a>(
        &self,
        overrides: impl IntoIterator<Item = (&'a str, &'a str)>,
        replication_factor: i32,
    ) -> Result<(TopicConfig, BTreeMap<String, String>), InvalidConfig> {
        let mut config = self.clone();
        let mut canonical = BTreeMap::new();
        for (key, raw) in overrides {
            let value = config.set(key, raw, replication_factor)?;
            canonical.insert(key.to_owned(), value);
        }
        Ok((config, canonical))
    }

    /// Checks that these configs are acceptable as cluster defaults.
    pub fn validate(&self) -> Result<(), InvalidConfig> {
        let rendered = self.to_map();
        let mut scratch = TopicConfig::default();
        for (key, value) in &rendered {
            // A default only needs the ISR to fit some replication factor; the topic's
            // own RF is checked when the topic is created.
            scratch.set(key, value, i32::MAX)?;
        }
        Ok(())
    }

    /// Every config as `key → value`, as `CreateTopics` echoes them.
    pub fn to_map(&self) -> BTreeMap<String, String> {
        [
            (MIN_INSYNC_REPLICAS, self.min_insync_replicas.to_string()),
            (
                UNCLEAN_LEADER_ELECTION_ENABLE,
                self.unclean_leader_election_enable.to_string(),
            ),
            (RETENTION_MS, self.retention_ms.to_string()),
            (RETENTION_BYTES, self.retention_bytes.to_string()),
            (SEGMENT_BYTES, self.segment_bytes.to_string()),
            (SEGMENT_MS, self.segment_ms.to_string()),
            (
                REPLICA_LAG_TIME_MAX_MS,
                self.replica_lag_time_max_ms.to_string(),
            ),
            (FLUSH_MESSAGES, self.flush_messages.to_string()),
            (FLUSH_MS, self.flush_ms.to_string()),
            (
                COMPRESSION_TYPE,
                compression_name(self.compression_type).to_string(),
            ),
            (
                MESSAGE_TIMESTAMP_TYPE,
                timestamp_type_name(self.log_append_time).to_string(),
            ),
        ]
        .into_iter()
        .map(|(k, v)| (k.to_owned(), v))
        .collect()
    }

    /// Sets one key from its string form; returns the canonical value.
    fn set(
        &mut self,
        key: &str,
        raw: &str,
        replication_factor: i32,
    ) -> Result<String, InvalidConfig> {
        let invalid = |accepted: &str| InvalidConfig {
            key: key.to_owned(),
            message: format!("invalid value {raw:?} for topic config '{key}': expected {accepted}"),
        };
        let int = |range: &Range| {
            raw.trim()
                .parse::<i64>()
                .ok()
                .filter(|v| (range.min..=range.max).contains(v))
                .ok_or_else(|| invalid(range.text))
        };
        match key {
            MIN_INSYNC_REPLICAS => {
                let max = i64::from(replication_factor.max(1));
                let text = format!("an integer from 1 to {max} (the replication factor)");
                let v = raw
                    .trim()
                    .parse::<i64>()
                    .ok()
                    .filter(|v| (1..=max).contains(v))
                    .and_then(|v| i32::try_from(v).ok())
                    .ok_or_else(|| invalid(&text))?;
                self.min_insync_replicas = v;
                Ok(v.to_string())
            }
            UNCLEAN_LEADER_ELECTION_ENABLE => {
                let v = match raw.trim() {
                    t if t.eq_ignore_ascii_case("true") => true,
                    t if t.eq_ignore_ascii_case("false") => false,
                    _ => return Err(invalid("true or false")),
                };
                self.unclean_leader_election_enable = v;
                Ok(v.to_string())
            }
            RETENTION_MS => {
                self.retention_ms = int(&RETENTION)?;
                Ok(self.retention_ms.to_string())
            }
            RETENTION_BYTES => {
                self.retention_bytes = int(&RETENTION)?;
                Ok(self.retention_bytes.to_string())
            }
            SEGMENT_BYTES => {
                let v = int(&SEGMENT)?;
                self.segment_bytes = i32::try_from(v).map_err(|_| invalid(SEGMENT.text))?;
                Ok(v.to_string())
            }
            SEGMENT_MS => {
                let v = int(&OFF_OR_POSITIVE_LONG)?;
                if v == 0 {
                    return Err(invalid(OFF_OR_POSITIVE_LONG.text));
                }
                self.segment_ms = v;
                Ok(v.to_string())
            }
            REPLICA_LAG_TIME_MAX_MS => {
                self.replica_lag_time_max_ms = int(&POSITIVE_LONG)?;
                Ok(self.replica_lag_time_max_ms.to_string())
            }
            FLUSH_MESSAGES => {
                self.flush_messages = int(&POSITIVE_LONG)?;
                Ok(self.flush_messages.to_string())
            }
            FLUSH_MS => {
                self.flush_ms = int(&NON_NEGATIVE_LONG)?;
                Ok(self.flush_ms.to_string())
            }
            COMPRESSION_TYPE => {
                let accepted = std::iter::once(None)
                    .chain(CODECS.map(Some))
                    .find(|c| compression_name(*c).eq_ignore_ascii_case(raw.trim()))
                    .ok_or_else(|| invalid("producer, uncompressed, gzip, snappy, lz4 or zstd"))?;
                self.compression_type = accepted;
                Ok(compression_name(accepted).to_string())
            }
            MESSAGE_TIMESTAMP_TYPE => {
                let accepted = [false, true]
                    .into_iter()
                    .find(|&l| timestamp_type_name(l).eq_ignore_ascii_case(raw.trim()))
                    .ok_or_else(|| invalid("CreateTime or LogAppendTime"))?;
                self.log_append_time = accepted;
                Ok(timestamp_type_name(accepted).to_string())
            }
            _ => Err(InvalidConfig {
                key: key.to_owned(),
                message: format!(
                    "unknown topic config '{key}'; accepted keys: {}",
                    TOPIC_CONFIG_KEYS.join(", ")
                ),
            }),
        }
    }
}

/// What the controller needs to know to decide.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ControllerConfig {
    /// This controller's node id.
    pub node_id: i32,
    /// Brokers registering with another cluster id are refused.
    pub cluster_id: String,
    /// `broker.session.timeout.ms`: an unfenced broker silent for longer is fenced.
    pub broker_session_timeout_ms: u64,
    /// `num.partitions`: partitions of a topic created with -1.
    pub num_partitions: i32,
    /// `default.replication.factor`: RF of a topic created with -1.
    pub default_replication_factor: i32,
    /// Topic config defaults (`min.insync.replicas`, `unclean.leader.election.enable`,
    /// `log.retention.ms`, ...).
    pub topic_defaults: TopicConfig,
    /// What `__consumer_offsets` is created with, whoever asks (`offsets.topic.*`).
    pub offsets_topic: OffsetsTopicConfig,
    /// Partitions one auto-creating request (a Metadata request's unknown topics)
    /// may create; internal topics are not charged (syncline's).
    pub auto_create_max_partitions_per_request: usize,
    /// Partitions in the cluster beyond which auto-creation creates no more;
    /// internal topics are never refused (syncline's).
    pub auto_create_max_cluster_partitions: usize,
}

impl ControllerConfig {
    /// Kafka's defaults for everything but the identity.
    pub fn new(node_id: i32, cluster_id: impl Into<String>) -> Self {
        ControllerConfig {
            node_id,
            cluster_id: cluster_id.into(),
            broker_session_timeout_ms: 9_000,
            num_partitions: 1,
            default_replication_factor: 1,
            topic_defaults: TopicConfig::default(),
            offsets_topic: OffsetsTopicConfig::default(),
            auto_create_max_partitions_per_request: 1_000,
            auto_create_max_cluster_partitions: 10_000,
        }
    }

    /// Checks every value; the controller refuses to start with a bad one.
    pub fn validate(&self) -> Result<(), InvalidConfig> {
        let positive = |key: &str, ok: bool| {
            if ok {
                Ok(())
            } else {
                Err(InvalidConfig {
                    key: key.to_owned(),
                    message: format!("{key} must be >= 1"),
                })
            }
        };
        positive(
            "broker_session_timeout_ms",
            self.broker_session_timeout_ms >= 1,
        )?;
        positive("num_partitions", self.num_partitions >= 1)?;
        positive(
            "default_replication_factor",
            self.default_replication_factor >= 1,
        )?;
        positive(
            "auto_create_topics_max_partitions_per_request",
            self.auto_create_max_partitions_per_request >= 1,
        )?;
        positive(
            "auto_create_topics_max_cluster_partitions",
            self.auto_create_max_cluster_partitions >= 1,
        )?;
        positive(
            "offsets_topic_num_partitions",
            self.offsets_topic.num_partitions >= 1,
        )?;
        positive(
            "offsets_topic_replication_factor",
            self.offsets_topic.replication_factor >= 1,
        )?;
        positive(
            "offsets_topic_segment_bytes",
            self.offsets_topic.segment_bytes >= 1,
        )?;
        self.topic_defaults.validate()
    }
}
