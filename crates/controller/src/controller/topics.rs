//! `CreateTopics`: validation in Kafka's order, replica placement, initial state.

use std::borrow::Cow;
use std::collections::{BTreeMap, BTreeSet, HashMap};

use syncline_proto::{pb, ErrorCode, NO_LEADER, OFFSETS_TOPIC};

use super::{Controller, ControllerResult};
use crate::auto_create::AutoCreateBudget;
use crate::config::TopicConfig;
use crate::image::PartitionRegistration;
use crate::internal_topics;
use crate::placement::{self, Candidate};
use syncline_proto::TopicPartition;

use crate::records;

/// Kafka's `MAX_PARTITIONS_PER_BATCH`: one request may not create more partitions, so
/// that a single request cannot make the controller allocate without bound.
pub const MAX_PARTITIONS_PER_REQUEST: usize = 10_000;

/// Kafka's limit on topic name length (so that `<topic>-<partition>` directory names
/// stay within file system limits).
pub use syncline_proto::MAX_TOPIC_NAME_LEN;

/// A topic that passed validation.
struct NewTopic {
    num_partitions: i32,
    replication_factor: i32,
    config: TopicConfig,
    overrides: BTreeMap<String, String>,
}

type Refusal = (ErrorCode, String);

impl Controller {
    /// `CreateTopics`. Each topic is validated on its own (a duplicate name within the
    /// request, the name, existence, a `.`/`_` collision, partitions, replication factor
    /// against the usable brokers, configs; an internal topic's settings; for an
    /// auto-creating request, its budget) and, unless `validate_only`, placed and
    /// created with ISR = replicas, leader = first replica, epochs 0. The response
    /// echoes partitions, RF and the effective configs.
    pub fn create_topics(
        &self,
        req: &pb::CreateTopicsRequest,
    ) -> ControllerResult<pb::CreateTopicsResponse> {
        let usable = self.placement_candidates();
        let mut name_counts: BTreeMap<&str, usize> = BTreeMap::new();
        for t in &req.topics {
            *name_counts.entry(t.name.as_str()).or_default() += 1;
        }
        // Internal topics get their own settings (or are refused) before anything
        // else looks at them; one that exists is TOPIC_ALREADY_EXISTS, as any topic.
        let asked: Vec<Result<Cow<'_, pb::CreatableTopic>, Refusal>> = req
            .topics
            .iter()
            .map(|t| match self.image.topic(&t.name) {
                Some(_) => Ok(Cow::Borrowed(t)),
                None => internal_topics::creation(&self.config.offsets_topic, t),
            })
            .collect();
        let requested_partitions: usize = asked
            .iter()
            .flatten()
            .map(|t| match t.num_partitions {
                -1 => self.config.num_partitions,
                n => n.max(0),
            })
            .map(|n| usize::try_from(n).unwrap_or(0))
            .fold(0, usize::saturating_add);

        let mut created: BTreeSet<&str> = BTreeSet::new();
        let mut metric_names = MetricNames::of(self.image.topics().map(|(name, _)| name));
        let mut cursor = self.image.partition_count();
        let mut auto_create = req
            .auto_create
            .then(|| AutoCreateBudget::new(&self.config, cursor));
        let mut records = Vec::new();
        let mut results = Vec::with_capacity(req.topics.len());
        for (t, asked) in req.topics.iter().zip(&asked) {
            let outcome = if requested_partitions > MAX_PARTITIONS_PER_REQUEST {
                Err((
                    ErrorCode::PolicyViolation,
                    format!(
                        "the request creates {requested_partitions} partitions; at most \
                         {MAX_PARTITIONS_PER_REQUEST} are allowed per request"
                    ),
                ))
            } else if name_counts.get(t.name.as_str()).copied().unwrap_or(0) > 1 {
                Err((
                    ErrorCode::InvalidRequest,
                    format!("topic {:?} appears more than once in the request", t.name),
                ))
            } else if let Some(Err(refusal)) = auto_create.as_ref().map(|b| b.spent(&t.name)) {
                Err(refusal)
            } else {
                match asked {
                    Ok(asked) => self.validate_topic(asked, &created, &metric_names, usable.len()),
                    Err(refusal) => Err(refusal.clone()),
                }
            };
            let outcome = outcome.and_then(|new| match auto_create.as_mut() {
                Some(budget) => budget
                    .take(&t.name, usize::try_from(new.num_partitions).unwrap_or(0))
                    .map(|()| new),
                None => Ok(new),
            });
            let new = match outcome {
                Ok(new) => new,
                Err((code, message)) => {
                    results.push(pb::CreatableTopicResult {
                        name: t.name.clone(),
                        error_code: code as i32,
                        error_message: message,
                        num_partitions: -1,
                        replication_factor: -1,
                        configs: Default::default(),
                    });
                    continue;
                }
            };
            if !req.validate_only {
                let num_partitions = usize::try_from(new.num_partitions).unwrap_or(0);
                let rf = usize::try_from(new.replication_factor).unwrap_or(0);
                let assignment = placement::assign_replicas(&usable, num_partitions, rf, cursor);
                cursor += num_partitions;
                created.insert(&t.name);
                metric_names.insert(&t.name);
                records.push(records::topic_record(&t.name, &new.overrides));
                records.extend(new_partition_records(&t.name, 0, assignment));
                tracing::info!(
                    topic = %t.name,
                    partitions = new.num_partitions,
                    replication_factor = new.replication_factor,
                    "creating topic"
                );
            }
            results.push(pb::CreatableTopicResult {
                name: t.name.clone(),
                error_code: ErrorCode::None as i32,
                error_message: String::new(),
                num_partitions: new.num_partitions,
                replication_factor: new.replication_factor,
                configs: new.config.to_map().into_iter().collect(),
            });
        }
        ControllerResult::new(pb::CreateTopicsResponse { topics: results }, records)
    }

    /// Internal topics the controller creates unasked: `__consumer_offsets` once
    /// enough brokers can take its replicas, when `offsets_topic.eager_creation`
    /// is on (`internal_topics::create_unasked`). For the shell to run after
    /// each tick; the names created.
    pub fn create_internal_topics(&self) -> ControllerResult<Vec<String>> {
        let exists = self.image.topic(OFFSETS_TOPIC).is_some();
        if !internal_topics::create_unasked(
            &self.config.offsets_topic,
            exists,
            self.placement_candidates().len(),
        ) {
            return ControllerResult::answer(Vec::new());
        }
        let r = self.create_topics(&pb::CreateTopicsRequest {
            topics: vec![pb::CreatableTopic {
                name: OFFSETS_TOPIC.to_owned(),
                num_partitions: -1,
                replication_factor: -1,
                configs: Default::default(),
            }],
            timeout_ms: 0,
            validate_only: false,
            forwarded: false,
            auto_create: false,
        });
        let created = r
            .response
            .topics
            .into_iter()
            .filter(|t| t.error_code == ErrorCode::None as i32)
            .map(|t| t.name)
            .collect();
        ControllerResult::new(created, r.records)
    }

    /// The brokers new replicas may go to: unfenced and not shutting down.
    pub(super) fn placement_candidates(&self) -> Vec<Candidate<'_>> {
        self.image
            .brokers()
            .filter(|b| !b.fenced && !self.shutting_down.contains(&b.broker_id))
            .map(|b| Candidate {
                id: b.broker_id,
                rack: b.rack(),
            })
            .collect()
    }

    fn validate_topic(
        &self,
        t: &pb::CreatableTopic,
        created: &BTreeSet<&str>,
        metric_names: &MetricNames<'_>,
        usable_brokers: usize,
    ) -> Result<NewTopic, Refusal> {
        validate_topic_name(&t.name)?;
        if self.image.topic(&t.name).is_some() || created.contains(t.name.as_str()) {
            return Err((
                ErrorCode::TopicAlreadyExists,
                format!("topic {:?} already exists", t.name),
            ));
        }
        // `.` and `_` map to the same metric name, so Kafka refuses topics that differ
        // only there.
        if t.name.contains(['.', '_']) {
            if let Some(other) = metric_names.colliding(&t.name) {
                return Err((
                    ErrorCode::InvalidTopicException,
                    format!(
                        "topic {:?} collides with existing topic {other:?} ('.' and '_' are \
                         the same in metric names)",
                        t.name
                    ),
                ));
            }
        }
        let num_partitions = match t.num_partitions {
            -1 => self.config.num_partitions,
            n if n > 0 => n,
            n => {
                return Err((
                    ErrorCode::InvalidPartitions,
                    format!("number of partitions must be >= 1, or -1 for the default; got {n}"),
                ))
            }
        };
        let replication_factor = match t.replication_factor {
            -1 => self.config.default_replication_factor,
            n if n > 0 => n,
            n => {
                return Err((
                    ErrorCode::InvalidReplicationFactor,
                    format!("replication factor must be >= 1, or -1 for the default; got {n}"),
                ))
            }
        };
        if usize::try_from(replication_factor).map_or(true, |rf| rf > usable_brokers) {
            return Err((
                ErrorCode::InvalidReplicationFactor,
                format!(
                    "replication factor {replication_factor} is larger than the number of \
                     available brokers ({usable_brokers})"
                ),
            ));
        }
        // Sorted, so that with several bad keys the error names the same one every time.
        let overrides: BTreeMap<&str, &str> = t
            .configs
            .iter()
            .map(|(k, v)| (k.as_str(), v.as_str()))
            .collect();
        let (config, overrides) = self
            .config
            .topic_defaults
            .with_overrides(overrides, replication_factor)
            .map_err(|e| (ErrorCode::InvalidConfig, e.message))?;
        Ok(NewTopic {
            num_partitions,
            replication_factor,
            config,
            overrides,
        })
    }
}

/// Topic names by their metric name (`.` written `_`), for the names with a `.`
/// or `_` (only those can collide): one lookup per new name, not a scan of
/// every topic, so that a request naming thousands of topics in a cluster of
/// thousands does not hold the controller for seconds.
struct MetricNames<'a>(HashMap<String, &'a str>);

impl<'a> MetricNames<'a> {
    fn of(names: impl Iterator<Item = &'a str>) -> Self {
        let mut index = MetricNames(HashMap::new());
        for name in names {
            index.insert(name);
        }
        index
    }

    fn insert(&mut self, name: &'a str) {
        if name.contains(['.', '_']) {
            self.0.entry(name.replace('.', "_")).or_insert(name);
        }
    }

    /// Another topic whose metric name is `name`'s.
    fn colliding(&self, name: &str) -> Option<&'a str> {
        self.0
            .get(&name.replace('.', "_"))
            .copied()
            .filter(|other| *other != name)
    }
}

/// The records of new partitions `first..` of `topic` with these replicas: ISR =
/// replicas, the first leads, epochs 0.
pub(super) fn new_partition_records(
    topic: &str,
    first: i32,
    assignment: Vec<Vec<i32>>,
) -> impl Iterator<Item = pb::MetadataRecord> + '_ {
    (first..).zip(assignment).map(move |(index, replicas)| {
        let initial = PartitionRegistration {
            isr: replicas.clone(),
            leader: replicas.first().copied().unwrap_or(NO_LEADER),
            replicas,
            leader_epoch: 0,
            partition_epoch: 0,
            adding_replicas: Vec::new(),
            removing_replicas: Vec::new(),
        };
        records::partition_record(&TopicPartition::new(topic, index), &initial)
    })
}

/// Kafka's topic name rules (see [`syncline_proto::validate_topic_name`]).
fn validate_topic_name(name: &str) -> Result<(), Refusal> {
    syncline_proto::validate_topic_name(name).map_err(|why| (ErrorCode::InvalidTopicException, why))
}
