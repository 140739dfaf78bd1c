//! A topic's effective configuration on a broker: the topic's own settings (Kafka's
//! dotted names, as committed by the controller) over the broker's defaults. Parsing
//! and validation are the controller's ([`syncline_controller::TopicConfig`]): one
//! definition of every key.

use std::collections::HashMap;
use std::time::Duration;

use syncline_controller::TopicConfig as TypedTopicConfig;
use syncline_log::LogConfig;
use syncline_proto::compression::Compression;

use crate::config::BrokerConfig;

/// Settings the broker acts on for one topic.
#[derive(Debug, Clone, PartialEq)]
pub struct TopicConfig {
    pub(crate) min_insync_replicas: usize,
    pub(crate) replica_lag_time_max: Duration,
    /// `compression.type`: `None` keeps the producer's codec; a codec makes the
    /// leader recompress batches into it.
    pub(crate) compression: Option<Compression>,
    /// `message.timestamp.type=LogAppendTime`: the leader stamps each batch
    /// with its append time.
    pub(crate) log_append_time: bool,
    pub(crate) log: LogConfig,
}

/// The topic-config defaults a broker's settings imply (for the controller).
pub fn controller_defaults(b: &BrokerConfig) -> TypedTopicConfig {
    let long = |v: u64| i64::try_from(v).unwrap_or(i64::MAX);
    TypedTopicConfig {
        min_insync_replicas: b.min_insync_replicas,
        unclean_leader_election_enable: b.unclean_leader_election_enable,
        retention_ms: b.retention_ms,
        retention_bytes: b.retention_bytes,
        segment_bytes: i32::try_from(b.segment_bytes).unwrap_or(i32::MAX),
        segment_ms: b.segment_ms.map_or(-1, long),
        replica_lag_time_max_ms: long(b.replica_lag_time_max_ms),
        flush_messages: long(b.flush_messages),
        flush_ms: long(b.flush_ms),
        compression_type: None,
        log_append_time: false,
    }
}

impl TopicConfig {
    /// The topic's settings over the broker defaults. The controller validated them
    /// at creation; should one not parse here, the defaults stay (and it is logged).
    pub fn resolve(
        broker: &BrokerConfig,
        topic: &str,
        configs: &HashMap<String, String>,
    ) -> TopicConfig {
        let defaults = controller_defaults(broker);
        let overrides = configs.iter().map(|(k, v)| (k.as_str(), v.as_str()));
        let typed = match defaults.with_overrides(overrides, i32::MAX) {
            Ok((typed, _)) => typed,
            Err(e) => {
                tracing::warn!(topic, error = %e, "ignoring topic configs the broker cannot use");
                defaults
            }
        };
        let never_if_max = |v: i64| {
            if v == i64::MAX {
                u64::MAX
            } else {
                v.max(1) as u64
            }
        };
        TopicConfig {
            min_insync_replicas: typed.min_insync_replicas.max(1) as usize,
            replica_lag_time_max: Duration::from_millis(typed.replica_lag_time_max_ms.max(1) as u64),
            compression: typed.compression_type,
            log_append_time: typed.log_append_time,
            log: LogConfig {
                segment_bytes: typed.segment_bytes.max(1024) as u64,
                segment_ms: (typed.segment_ms > 0).then_some(typed.segment_ms as u64),
                retention_ms: typed.retention_ms,
                retention_bytes: typed.retention_bytes,
                flush_messages: never_if_max(typed.flush_messages),
                flush_ms: never_if_max(typed.flush_ms),
                ..LogConfig::default()
            },
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn broker() -> BrokerConfig {
        BrokerConfig::parse(
            "node_id = 1\nprocess_roles = \"broker,controller\"\ncontroller_quorum_voters = \"1@127.0.0.1:9092\"\nreplica_lag_time_max_ms = 5000\n",
        )
        .unwrap()
    }

    #[test]
    fn topic_settings_override_broker_defaults() {
        let b = broker();
        let plain = TopicConfig::resolve(&b, "t", &HashMap::new());
        assert_eq!(plain.min_insync_replicas, 1);
        assert_eq!(plain.replica_lag_time_max, Duration::from_millis(5000));
        assert_eq!(plain.log.flush_messages, u64::MAX);
        let configs: HashMap<String, String> = [
            ("min.insync.replicas", "2"),
            ("replica.lag.time.max.ms", "2000"),
            ("flush.messages", "1"),
            ("segment.bytes", "4096"),
            ("compression.type", "zstd"),
        ]
        .into_iter()
        .map(|(k, v)| (k.to_string(), v.to_string()))
        .collect();
        let c = TopicConfig::resolve(&b, "t", &configs);
        assert_eq!(c.min_insync_replicas, 2);
        assert_eq!(c.replica_lag_time_max, Duration::from_millis(2000));
        assert_eq!(c.log.flush_messages, 1);
        assert_eq!(c.log.segment_bytes, 4096);
        assert_eq!(c.compression, Some(Compression::Zstd));
        assert_eq!(plain.compression, None, "producer: batches kept as sent");
    }
}
