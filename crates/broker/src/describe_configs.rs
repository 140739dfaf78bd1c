//! DescribeConfigs: a topic's effective configs (its own settings over the
//! broker's defaults) or this broker's, under Kafka's names, each with where it
//! comes from.

use std::collections::HashMap;

use syncline_proto::{pb, ErrorCode};

use crate::config::BrokerConfig;
use crate::topic_config::controller_defaults;

/// Kafka's resource types.
const TOPIC: i32 = 2;
const BROKER: i32 = 4;

/// Kafka's config sources.
const SOURCE_TOPIC: i32 = 1;
const SOURCE_BROKER_FILE: i32 = 4;
const SOURCE_DEFAULT: i32 = 5;

/// Answers every resource of `r`. `topic_configs` gives a topic's own settings,
/// None when the topic does not exist.
pub(crate) fn describe_configs(
    config: &BrokerConfig,
    topic_configs: impl Fn(&str) -> Option<HashMap<String, String>>,
    r: &pb::DescribeConfigsRequest,
) -> pb::DescribeConfigsResponse {
    let results = r
        .resources
        .iter()
        .map(|res| {
            let mut out = pb::DescribeConfigsResult {
                resource_type: res.resource_type,
                resource_name: res.resource_name.clone(),
                ..Default::default()
            };
            let entries = match res.resource_type {
                TOPIC => match topic_configs(&res.resource_name) {
                    Some(own) => Ok(topic_entries(config, &own)),
                    None => Err((
                        ErrorCode::UnknownTopicOrPartition,
                        format!("no topic {:?}", res.resource_name),
                    )),
                },
                BROKER
                    if res.resource_name.is_empty()
                        || res.resource_name == config.node_id.to_string() =>
                {
                    Ok(broker_entries(config))
                }
                BROKER => Err((
                    ErrorCode::InvalidRequest,
                    format!(
                        "broker {} describes its own configs only; ask broker {}",
                        config.node_id, res.resource_name
                    ),
                )),
                other => Err((
                    ErrorCode::InvalidRequest,
                    format!("resource type {other} is not described (2: topic, 4: broker)"),
                )),
            };
            match entries {
                Ok(all) => {
                    out.configs = all
                        .into_iter()
                        .filter(|e| res.keys.is_empty() || res.keys.contains(&e.name))
                        .collect();
                }
                Err((code, message)) => {
                    out.error_code = code as i32;
                    out.error_message = message;
                }
            }
            out
        })
        .collect();
    pb::DescribeConfigsResponse { results }
}

fn topic_entries(config: &BrokerConfig, own: &HashMap<String, String>) -> Vec<pb::ConfigEntry> {
    controller_defaults(config)
        .to_map()
        .into_iter()
        .map(|(name, default)| {
            let (value, source) = match own.get(&name) {
                Some(v) => (v.clone(), SOURCE_TOPIC),
                None => (default, SOURCE_DEFAULT),
            };
            pb::ConfigEntry {
                name,
                value,
                read_only: false,
                source,
                is_sensitive: false,
            }
        })
        .collect()
}

/// This broker's settings a Kafka tool asks about, under Kafka's names. They
/// come from the config file and change only with a restart: read-only.
fn broker_entries(c: &BrokerConfig) -> Vec<pb::ConfigEntry> {
    let never = |v: u64| {
        if v == u64::MAX {
            "-1".to_string()
        } else {
            v.to_string()
        }
    };
    let g = &c.groups;
    [
        ("node.id", c.node_id.to_string()),
        ("broker.id", c.node_id.to_string()),
        ("broker.rack", c.broker_rack.clone().unwrap_or_default()),
        ("num.partitions", c.num_partitions.to_string()),
        (
            "default.replication.factor",
            c.default_replication_factor.to_string(),
        ),
        ("min.insync.replicas", c.min_insync_replicas.to_string()),
        (
            "auto.create.topics.enable",
            c.auto_create_topics_enable.to_string(),
        ),
        ("message.max.bytes", c.message_max_bytes.to_string()),
        (
            "socket.request.max.bytes",
            c.socket_request_max_bytes.to_string(),
        ),
        ("log.segment.bytes", c.segment_bytes.to_string()),
        ("log.retention.ms", c.retention_ms.to_string()),
        ("log.retention.bytes", c.retention_bytes.to_string()),
        ("log.flush.interval.messages", never(c.flush_messages)),
        ("log.flush.interval.ms", never(c.flush_ms)),
        (
            "replica.lag.time.max.ms",
            c.replica_lag_time_max_ms.to_string(),
        ),
        (
            "unclean.leader.election.enable",
            c.unclean_leader_election_enable.to_string(),
        ),
        (
            "auto.leader.rebalance.enable",
            c.auto_leader_rebalance_enable.to_string(),
        ),
        ("fetch.max.bytes", c.fetch_max_bytes.to_string()),
        (
            "offsets.topic.num.partitions",
            g.offsets_topic_num_partitions.to_string(),
        ),
        (
            "offsets.topic.replication.factor",
            g.offsets_topic_replication_factor.to_string(),
        ),
        (
            "offsets.retention.minutes",
            g.offsets_retention_minutes.to_string(),
        ),
        (
            "group.min.session.timeout.ms",
            g.group_min_session_timeout_ms.to_string(),
        ),
        (
            "group.max.session.timeout.ms",
            g.group_max_session_timeout_ms.to_string(),
        ),
        (
            "group.initial.rebalance.delay.ms",
            g.group_initial_rebalance_delay_ms.to_string(),
        ),
    ]
    .into_iter()
    .map(|(name, value)| pb::ConfigEntry {
        name: name.to_string(),
        value,
        read_only: true,
        source: SOURCE_BROKER_FILE,
        is_sensitive: false,
    })
    .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn config() -> BrokerConfig {
        BrokerConfig::parse(
            "node_id = 2\ncontroller_quorum_voters = \"2@127.0.0.1:9092\"\n\
             process_roles = \"broker,controller\"\nnum_partitions = 6",
        )
        .unwrap()
    }

    fn resource(kind: i32, name: &str, keys: &[&str]) -> pb::ConfigResource {
        pb::ConfigResource {
            resource_type: kind,
            resource_name: name.into(),
            keys: keys.iter().map(|k| k.to_string()).collect(),
        }
    }

    #[test]
    fn topics_show_their_own_settings_over_the_defaults_and_brokers_their_file() {
        let own: HashMap<String, String> =
            [("retention.ms".to_string(), "1000".to_string())].into();
        let lookup = |t: &str| (t == "orders").then(|| own.clone());
        let r = pb::DescribeConfigsRequest {
            resources: vec![
                resource(TOPIC, "orders", &["retention.ms", "min.insync.replicas"]),
                resource(TOPIC, "absent", &[]),
                resource(BROKER, "2", &["num.partitions"]),
                resource(BROKER, "3", &[]),
                resource(8, "2", &[]),
            ],
        };
        let out = describe_configs(&config(), lookup, &r).results;
        let entries = |i: usize| -> Vec<(String, String, i32)> {
            out[i]
                .configs
                .iter()
                .map(|c| (c.name.clone(), c.value.clone(), c.source))
                .collect()
        };
        assert_eq!(
            entries(0),
            [
                ("min.insync.replicas".into(), "1".into(), SOURCE_DEFAULT),
                ("retention.ms".into(), "1000".into(), SOURCE_TOPIC),
            ]
        );
        assert_eq!(out[1].error_code, ErrorCode::UnknownTopicOrPartition as i32);
        assert_eq!(
            entries(2),
            [("num.partitions".into(), "6".into(), SOURCE_BROKER_FILE)]
        );
        assert_eq!(out[3].error_code, ErrorCode::InvalidRequest as i32);
        assert_eq!(out[4].error_code, ErrorCode::InvalidRequest as i32);
    }
}
