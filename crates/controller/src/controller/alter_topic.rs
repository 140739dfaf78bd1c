//! `AlterTopic`: a topic's configs changed live, and partitions added.

use std::collections::{BTreeMap, BTreeSet};

use syncline_proto::{pb, ErrorCode};

use super::topics::new_partition_records;
use super::{Controller, ControllerResult, MAX_PARTITIONS_PER_REQUEST};
use crate::config::TOPIC_CONFIG_KEYS;
use crate::internal_topics;
use crate::placement;
use crate::records;

impl Controller {
    /// `AlterTopic`. Config keys are set or deleted (back to the default) and the
    /// result is validated as at creation (`min.insync.replicas` against the
    /// topic's replication factor); the partition count only grows, the new
    /// partitions placed as at creation with the topic's replication factor. Either
    /// both changes are made or, on any refusal, neither. An internal topic's
    /// partitions and retention stay as they are (`internal_topics::alteration`). The response carries the
    /// effective configs and partition count after the change.
    pub fn alter_topic(
        &self,
        req: &pb::AlterTopicRequest,
    ) -> ControllerResult<pb::AlterTopicResponse> {
        let refuse = |code: ErrorCode, message: String| {
            ControllerResult::answer(pb::AlterTopicResponse {
                error_code: code as i32,
                error_message: message,
                name: req.name.clone(),
                num_partitions: -1,
                configs: Default::default(),
            })
        };
        let Some(topic) = self.image.topic(&req.name) else {
            return refuse(
                ErrorCode::UnknownTopicOrPartition,
                format!("there is no topic {:?}", req.name),
            );
        };
        let deleted: BTreeSet<&str> = req.delete_configs.iter().map(String::as_str).collect();
        if let Some(key) = deleted.iter().find(|k| !TOPIC_CONFIG_KEYS.contains(k)) {
            return refuse(
                ErrorCode::InvalidConfig,
                format!(
                    "unknown topic config {key:?}; known: {}",
                    TOPIC_CONFIG_KEYS.join(", ")
                ),
            );
        }
        if let Some(key) = req
            .set_configs
            .keys()
            .find(|k| deleted.contains(k.as_str()))
        {
            return refuse(
                ErrorCode::InvalidRequest,
                format!("config {key:?} is both set and deleted: give one of the two"),
            );
        }
        let replication_factor = topic
            .partitions
            .first()
            .map_or(0, |p| i32::try_from(p.replicas.len()).unwrap_or(i32::MAX));
        // Sorted, so that with several bad keys the error names the same one every time.
        let mut overrides: BTreeMap<&str, &str> = topic
            .configs
            .iter()
            .filter(|(k, _)| !deleted.contains(k.as_str()))
            .map(|(k, v)| (k.as_str(), v.as_str()))
            .collect();
        overrides.extend(
            req.set_configs
                .iter()
                .map(|(k, v)| (k.as_str(), v.as_str())),
        );
        let (config, canonical) = match self
            .config
            .topic_defaults
            .with_overrides(overrides, replication_factor)
        {
            Ok(done) => done,
            Err(e) => return refuse(ErrorCode::InvalidConfig, e.message),
        };

        let current = topic.partitions.len();
        let wanted = match req.partitions {
            0 => current,
            n => match usize::try_from(n) {
                Ok(n) if n >= current => n,
                _ => {
                    return refuse(
                        ErrorCode::InvalidPartitions,
                        format!(
                            "topic {:?} has {current} partitions; the count can only grow (asked for {n})",
                            req.name
                        ),
                    )
                }
            },
        };
        let added = wanted - current;
        // What the topic's configs are now; a topic whose stored configs no longer
        // validate (defaults changed since) counts as having the defaults.
        let before = self
            .config
            .topic_defaults
            .with_overrides(
                topic.configs.iter().map(|(k, v)| (k.as_str(), v.as_str())),
                replication_factor,
            )
            .map_or_else(|_| self.config.topic_defaults.clone(), |(c, _)| c);
        if let Err((code, message)) =
            internal_topics::alteration(&req.name, added, &before, &config)
        {
            return refuse(code, message);
        }
        if added > MAX_PARTITIONS_PER_REQUEST {
            return refuse(
                ErrorCode::PolicyViolation,
                format!(
                    "the request adds {added} partitions; at most {MAX_PARTITIONS_PER_REQUEST} are allowed per request"
                ),
            );
        }
        let usable = self.placement_candidates();
        let rf = usize::try_from(replication_factor).unwrap_or(0);
        if added > 0 && rf > usable.len() {
            return refuse(
                ErrorCode::InvalidReplicationFactor,
                format!(
                    "new partitions need {rf} replicas (the topic's replication factor), but only {} brokers are available",
                    usable.len()
                ),
            );
        }

        let mut new_records = Vec::new();
        if !req.validate_only {
            if canonical != topic.configs {
                tracing::info!(topic = %req.name, configs = ?canonical, "topic configs changed");
                new_records.push(records::topic_config_record(&req.name, &canonical));
            }
            if added > 0 {
                let assignment =
                    placement::assign_replicas(&usable, added, rf, self.image.partition_count());
                let first = i32::try_from(current).unwrap_or(i32::MAX);
                tracing::info!(topic = %req.name, from = current, to = wanted, "adding partitions");
                new_records.extend(new_partition_records(&req.name, first, assignment));
            }
        }
        ControllerResult::new(
            pb::AlterTopicResponse {
                error_code: ErrorCode::None as i32,
                error_message: String::new(),
                name: req.name.clone(),
                num_partitions: i32::try_from(wanted).unwrap_or(i32::MAX),
                configs: config.to_map().into_iter().collect(),
            },
            new_records,
        )
    }
}
