//! Internal topics: what the controller lets any request do to `__consumer_offsets`.
//!
//! The offsets topic holds every group's committed offsets and generations, and a
//! group lives on partition `hash(group id) % partitions`. So, whichever path a
//! request takes (Kafka's CreateTopics, DeleteTopics or a Metadata request that
//! auto-creates; syncline's CreateTopics, DeleteTopics and AlterTopic, hence `syncline
//! topic ...`), the controller decides it here, once:
//!
//! - **creation** uses the offsets topic's own settings ([`OffsetsTopicConfig`],
//!   Kafka's `offsets.topic.num.partitions` and `offsets.topic.replication.factor`),
//!   never the broker defaults: a request leaving partitions, replication factor and
//!   configs unset (-1, none) gets them, as Kafka's `AutoTopicCreationManager` gives
//!   an auto-created `__consumer_offsets` its own settings; a request asking for
//!   others is refused (Kafka would create it as asked);
//! - **deletion** is refused (Kafka refuses it in `kafka-topics.sh` only:
//!   "is a kafka internal topic and is not allowed to be marked for deletion");
//! - **more partitions** are refused (Kafka's `kafka-topics.sh`: "The number of
//!   partitions for the offsets topic cannot be changed"): every group would move
//!   to another partition, away from its commits;
//! - **configs** may change, but not so as to lose commits: `retention.ms` and
//!   `retention.bytes` stay -1 (syncline does not compact, so any retention deletes
//!   a group's last commit in time), and unclean leader election is not turned on;
//! - a topic whose name differs only in `.` for `_` (`__consumer.offsets`) is
//!   refused, so that it can never stand in the way of the real one.
//!
//! Every refusal is `POLICY_VIOLATION` (a well-formed request the cluster's policy
//! forbids, what Kafka answers for its create-topic and alter-config policies), but
//! for the colliding name: `INVALID_TOPIC_EXCEPTION`, as any `.`/`_` collision.

use std::borrow::Cow;
use std::collections::BTreeMap;

use syncline_proto::{pb, ErrorCode, OFFSETS_TOPIC};

use crate::config::{TopicConfig, RETENTION_BYTES, RETENTION_MS, SEGMENT_BYTES};

type Refusal = (ErrorCode, String);

/// The settings `__consumer_offsets` is created with.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct OffsetsTopicConfig {
    /// `offsets.topic.num.partitions` (50).
    pub num_partitions: i32,
    /// `offsets.topic.replication.factor` (3).
    pub replication_factor: i32,
    /// `offsets.topic.segment.bytes` (100 MiB).
    pub segment_bytes: i32,
    /// Create it as soon as `replication_factor` brokers can take replicas,
    /// rather than when the first group asks (syncline's; off by default).
    pub eager_creation: bool,
}

impl Default for OffsetsTopicConfig {
    fn default() -> Self {
        OffsetsTopicConfig {
            num_partitions: 50,
            replication_factor: 3,
            segment_bytes: 100 * 1024 * 1024,
            eager_creation: false,
        }
    }
}

impl OffsetsTopicConfig {
    /// The topic configs it is created with: kept whatever its age or size, since
    /// a group's last commit must outlive any retention.
    pub fn configs(&self) -> BTreeMap<String, String> {
        [
            (RETENTION_MS, "-1".to_owned()),
            (RETENTION_BYTES, "-1".to_owned()),
            (SEGMENT_BYTES, self.segment_bytes.to_string()),
        ]
        .into_iter()
        .map(|(k, v)| (k.to_owned(), v))
        .collect()
    }

    fn describe(&self) -> String {
        format!(
            "{} partitions (offsets_topic_num_partitions), replication factor {} \
             (offsets_topic_replication_factor), configs {}",
            self.num_partitions,
            self.replication_factor,
            self.configs()
                .iter()
                .map(|(k, v)| format!("{k}={v}"))
                .collect::<Vec<_>>()
                .join(",")
        )
    }
}

/// Whether `name` is an internal topic (syncline has one: the offsets topic).
pub fn is_internal(name: &str) -> bool {
    name == OFFSETS_TOPIC
}

/// A topic of a CreateTopics request as the controller creates it: the offsets
/// topic with its own settings (refused if the request asks for others), a name
/// colliding with it refused, any other topic as asked.
#[must_use = "the topic to create, or why not"]
pub(crate) fn creation<'a>(
    offsets: &OffsetsTopicConfig,
    t: &'a pb::CreatableTopic,
) -> Result<Cow<'a, pb::CreatableTopic>, Refusal> {
    if !is_internal(&t.name) {
        if t.name.replace('.', "_") == OFFSETS_TOPIC {
            return Err((
                ErrorCode::InvalidTopicException,
                format!(
                    "topic {:?} collides with the internal topic {OFFSETS_TOPIC} ('.' and '_' \
                     are the same in metric names)",
                    t.name
                ),
            ));
        }
        return Ok(Cow::Borrowed(t));
    }
    let configs = offsets.configs();
    let differs = |asked: i32, own: i32| asked != -1 && asked != own;
    let other_config = t
        .configs
        .iter()
        .find(|(k, v)| configs.get(k.as_str()).map(|own| own.as_str()) != Some(v.trim()));
    if differs(t.num_partitions, offsets.num_partitions)
        || differs(t.replication_factor, offsets.replication_factor)
        || other_config.is_some()
    {
        return Err((
            ErrorCode::PolicyViolation,
            format!(
                "{OFFSETS_TOPIC} is an internal topic, created with the offsets topic's settings \
                 only: {}; leave partitions, replication factor and configs unset (or let the \
                 first consumer group create it)",
                offsets.describe()
            ),
        ));
    }
    Ok(Cow::Owned(pb::CreatableTopic {
        name: t.name.clone(),
        num_partitions: offsets.num_partitions,
        replication_factor: offsets.replication_factor,
        configs: configs.into_iter().collect(),
    }))
}

/// Whether the controller creates the offsets topic now, unasked: with
/// `eager_creation`, once it does not exist and `usable_brokers` (unfenced, not
/// shutting down) can hold its replication factor. Kafka creates it when the
/// first group asks; a cluster that lost a broker before then cannot (too few
/// brokers for the replication factor), and serves no group.
#[must_use]
pub(crate) fn create_unasked(
    offsets: &OffsetsTopicConfig,
    exists: bool,
    usable_brokers: usize,
) -> bool {
    offsets.eager_creation
        && !exists
        && usize::try_from(offsets.replication_factor).is_ok_and(|rf| usable_brokers >= rf)
}

/// Whether a DeleteTopics may delete `name`.
#[must_use = "a refusal must be answered"]
pub(crate) fn deletion(name: &str) -> Result<(), Refusal> {
    if is_internal(name) {
        return Err((
            ErrorCode::PolicyViolation,
            format!(
                "{name} is an internal topic and cannot be deleted: it holds every consumer \
                 group's committed offsets"
            ),
        ));
    }
    Ok(())
}

/// Whether an AlterTopic may add `partitions_added` partitions to `name` and take
/// its effective configs from `before` to `after`.
#[must_use = "a refusal must be answered"]
pub(crate) fn alteration(
    name: &str,
    partitions_added: usize,
    before: &TopicConfig,
    after: &TopicConfig,
) -> Result<(), Refusal> {
    if !is_internal(name) {
        return Ok(());
    }
    let refuse = |why: String| Err((ErrorCode::PolicyViolation, why));
    if partitions_added > 0 {
        return refuse(format!(
            "the number of partitions of the internal topic {name} cannot be changed: a group \
             lives on partition hash(group id) % partitions, so groups would move away from \
             their committed offsets"
        ));
    }
    if after.retention_ms != -1 || after.retention_bytes != -1 {
        return refuse(format!(
            "the internal topic {name} keeps its records forever ({RETENTION_MS}=-1, \
             {RETENTION_BYTES}=-1; asked for {RETENTION_MS}={}, {RETENTION_BYTES}={}): syncline \
             does not compact, so any retention would delete groups' committed offsets",
            after.retention_ms, after.retention_bytes
        ));
    }
    if after.unclean_leader_election_enable && !before.unclean_leader_election_enable {
        return refuse(format!(
            "unclean leader election cannot be turned on for the internal topic {name}: an \
             unclean leader loses committed offsets"
        ));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn topic(name: &str, partitions: i32, rf: i32, configs: &[(&str, &str)]) -> pb::CreatableTopic {
        pb::CreatableTopic {
            name: name.to_owned(),
            num_partitions: partitions,
            replication_factor: rf,
            configs: configs
                .iter()
                .map(|(k, v)| (k.to_string(), v.to_string()))
                .collect(),
        }
    }

    #[test]
    fn the_offsets_topic_is_created_unasked_once_enough_brokers_are_usable() {
        let eager = OffsetsTopicConfig {
            replication_factor: 3,
            eager_creation: true,
            ..OffsetsTopicConfig::default()
        };
        let lazy = OffsetsTopicConfig {
            eager_creation: false,
            ..eager.clone()
        };
        // Config, exists, usable brokers, created now.
        let cases = [
            (&eager, false, 0, false),
            (&eager, false, 2, false),
            (&eager, false, 3, true),
            (&eager, false, 5, true),
            (&eager, true, 3, false),
            (&lazy, false, 3, false),
        ];
        for (config, exists, usable, expected) in cases {
            assert_eq!(
                create_unasked(config, exists, usable),
                expected,
                "{config:?} {exists} {usable}"
            );
        }
    }

    /// Kafka's `AutoTopicCreationManager.creatableTopic`: `__consumer_offsets` gets
    /// the offsets topic's partitions, RF and configs, not the broker defaults.
    #[test]
    fn creatable_topic_gets_the_offsets_topic_settings() {
        let offsets = OffsetsTopicConfig {
            num_partitions: 7,
            replication_factor: 2,
            segment_bytes: 1000,
            eager_creation: false,
        };
        let own = topic(
            OFFSETS_TOPIC,
            7,
            2,
            &[
                ("retention.ms", "-1"),
                ("retention.bytes", "-1"),
                ("segment.bytes", "1000"),
            ],
        );
        // Name, partitions, RF, configs: created as `own`, or refused with.
        let cases: Vec<(pb::CreatableTopic, Result<pb::CreatableTopic, ErrorCode>)> = vec![
            (topic(OFFSETS_TOPIC, -1, -1, &[]), Ok(own.clone())),
            (topic(OFFSETS_TOPIC, 7, 2, &[]), Ok(own.clone())),
            (
                topic(OFFSETS_TOPIC, -1, -1, &[("retention.ms", " -1 ")]),
                Ok(own.clone()),
            ),
            (
                topic(OFFSETS_TOPIC, 1, -1, &[]),
                Err(ErrorCode::PolicyViolation),
            ),
            (
                topic(OFFSETS_TOPIC, -1, 1, &[]),
                Err(ErrorCode::PolicyViolation),
            ),
            (
                topic(OFFSETS_TOPIC, -1, -1, &[("retention.ms", "1000")]),
                Err(ErrorCode::PolicyViolation),
            ),
            (
                topic(OFFSETS_TOPIC, -1, -1, &[("min.insync.replicas", "2")]),
                Err(ErrorCode::PolicyViolation),
            ),
            (
                topic("__consumer.offsets", 1, 1, &[]),
                Err(ErrorCode::InvalidTopicException),
            ),
            (
                topic("orders", 3, 1, &[("retention.ms", "1")]),
                Ok(topic("orders", 3, 1, &[("retention.ms", "1")])),
            ),
            (
                topic("__consumer_offsets2", 1, 1, &[]),
                Ok(topic("__consumer_offsets2", 1, 1, &[])),
            ),
        ];
        for (asked, expected) in cases {
            let got = creation(&offsets, &asked)
                .map(Cow::into_owned)
                .map_err(|(code, message)| {
                    assert!(message.contains(OFFSETS_TOPIC), "{message}");
                    code
                });
            assert_eq!(got, expected, "{asked:?}");
        }
    }

    /// Kafka's `TopicCommand.deleteTopic`: "is a kafka internal topic and is not
    /// allowed to be marked for deletion" (here for every client, not only the tool).
    #[test]
    fn internal_topic_is_not_allowed_to_be_marked_for_deletion() {
        assert_eq!(
            deletion(OFFSETS_TOPIC).map_err(|(code, _)| code),
            Err(ErrorCode::PolicyViolation)
        );
        assert_eq!(deletion("orders"), Ok(()));
        assert_eq!(deletion("__consumer_offsets_old"), Ok(()));
    }

    /// Kafka's `TopicCommand.alterTopic`: "The number of partitions for the offsets
    /// topic cannot be changed"; and (syncline's) no config change that loses commits.
    #[test]
    fn offsets_topic_partitions_cannot_be_changed_nor_its_commits_expire() {
        let kept = TopicConfig {
            retention_ms: -1,
            retention_bytes: -1,
            ..TopicConfig::default()
        };
        let with = |f: &dyn Fn(&mut TopicConfig)| {
            let mut c = kept.clone();
            f(&mut c);
            c
        };
        // Partitions added, configs after, expected.
        let cases: Vec<(usize, TopicConfig, Result<(), ErrorCode>)> = vec![
            (0, kept.clone(), Ok(())),
            (0, with(&|c| c.min_insync_replicas = 2), Ok(())),
            (0, with(&|c| c.segment_bytes = 1 << 20), Ok(())),
            (1, kept.clone(), Err(ErrorCode::PolicyViolation)),
            (
                0,
                with(&|c| c.retention_ms = 604_800_000),
                Err(ErrorCode::PolicyViolation),
            ),
            (
                0,
                with(&|c| c.retention_bytes = 1 << 30),
                Err(ErrorCode::PolicyViolation),
            ),
            (
                0,
                with(&|c| c.unclean_leader_election_enable = true),
                Err(ErrorCode::PolicyViolation),
            ),
        ];
        for (added, after, expected) in cases {
            let got = alteration(OFFSETS_TOPIC, added, &kept, &after).map_err(|(code, _)| code);
            assert_eq!(got, expected, "{added} {after:?}");
            assert_eq!(alteration("orders", added, &kept, &after), Ok(()));
        }
        // Unclean election already on (the cluster's default) is no reason to
        // refuse another change.
        let unclean = with(&|c| c.unclean_leader_election_enable = true);
        assert_eq!(alteration(OFFSETS_TOPIC, 0, &unclean, &unclean), Ok(()));
    }
}
