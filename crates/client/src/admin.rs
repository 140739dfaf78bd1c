//! Cluster administration: create, list and describe topics; describe the
//! cluster; users (SCRAM credentials) and ACLs.
//!
//! Describing a topic fully takes more than one broker: any broker knows the
//! assignment, leader and ISR, but only a partition's leader knows its high
//! watermark, log end offset and how far each follower is. [`Admin::describe_topics`]
//! asks any broker first, then every leader for the partitions it leads, and
//! merges the answers.

use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;

use syncline_auth::acl::{AclBinding, AclFilter};
use syncline_auth::{Mechanism, Verifier};
use syncline_proto::{pb, ErrorCode};
use tokio::time::Instant;

use crate::cluster::{expect_body, Cluster};
use crate::config::ClientConfig;
use crate::error::ClientError;
use crate::metadata::BrokerEndpoint;

/// A topic to create.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct NewTopic {
    /// Topic name.
    pub name: String,
    /// Partitions; -1 for the broker's `num_partitions`.
    pub num_partitions: i32,
    /// Replicas per partition; -1 for the broker's `default_replication_factor`.
    pub replication_factor: i32,
    /// Topic configs with Kafka's dotted names (`min.insync.replicas`, ...).
    pub configs: BTreeMap<String, String>,
}

impl NewTopic {
    /// A topic with these partition and replica counts and no configs.
    pub fn new(name: impl Into<String>, num_partitions: i32, replication_factor: i32) -> Self {
        NewTopic {
            name: name.into(),
            num_partitions,
            replication_factor,
            configs: BTreeMap::new(),
        }
    }

    /// Adds a topic config.
    pub fn with_config(mut self, key: impl Into<String>, value: impl Into<String>) -> Self {
        self.configs.insert(key.into(), value.into());
        self
    }
}

/// A topic the controller created.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CreatedTopic {
    /// Topic name.
    pub name: String,
    /// Partitions it got.
    pub num_partitions: i32,
    /// Replicas per partition.
    pub replication_factor: i32,
    /// Its configs.
    pub configs: BTreeMap<String, String>,
}

/// The leader's view of one follower (or of itself).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ReplicaStatus {
    /// The replica's broker.
    pub broker_id: i32,
    /// Its log end offset as the leader last heard; `None` if not heard from since
    /// the leader took over.
    pub log_end_offset: Option<i64>,
    /// Offsets behind the leader's log end.
    pub lag_offsets: i64,
    /// Time since it was last caught up; `None` if never under this leader.
    pub last_caught_up_ms_ago: Option<i64>,
    /// Whether it is in the ISR.
    pub in_isr: bool,
}

/// What only a partition's leader knows.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LeaderView {
    /// High watermark: offsets below it are committed.
    pub high_watermark: i64,
    /// The leader's log end offset.
    pub log_end_offset: i64,
    /// The first offset still in the log.
    pub log_start_offset: i64,
    /// Every replica, as the leader sees it.
    pub replica_statuses: Vec<ReplicaStatus>,
    /// An ISR the leader proposed that the controller has not committed yet.
    pub pending_isr: Vec<i32>,
    /// Idempotent producers with state in the leader's log.
    pub producer_count: i32,
}

/// One partition of a described topic.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PartitionDescription {
    /// Partition number.
    pub partition: i32,
    /// An error for this partition, if any.
    pub error: Option<ErrorCode>,
    /// Leader broker, `None` while offline.
    pub leader: Option<i32>,
    /// Leader epoch.
    pub leader_epoch: i32,
    /// Partition epoch (bumped by every leader or ISR change).
    pub partition_epoch: i32,
    /// Assigned replicas.
    pub replicas: Vec<i32>,
    /// In-sync replicas.
    pub isr: Vec<i32>,
    /// A reassignment in progress: the replicas joining (empty when none).
    pub adding_replicas: Vec<i32>,
    /// A reassignment in progress: the replicas leaving (empty when none).
    pub removing_replicas: Vec<i32>,
    /// The leader's own view; `None` if the leader could not be asked.
    pub leader_view: Option<LeaderView>,
}

/// A described topic.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TopicDescription {
    /// Topic name.
    pub name: String,
    /// A topic-level error (e.g. `UNKNOWN_TOPIC_OR_PARTITION`).
    pub error: Option<ErrorCode>,
    /// Topic configs.
    pub configs: BTreeMap<String, String>,
    /// Partitions, by number.
    pub partitions: Vec<PartitionDescription>,
}

impl TopicDescription {
    /// The replication factor (replicas of the first partition).
    pub fn replication_factor(&self) -> usize {
        self.partitions.first().map_or(0, |p| p.replicas.len())
    }
}

/// A registered broker.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct BrokerDescription {
    /// Id, address and rack.
    pub endpoint: BrokerEndpoint,
    /// Its registration epoch.
    pub broker_epoch: i64,
    /// Fenced brokers are registered but not alive (no heartbeat, or shutting
    /// down); they lead nothing.
    pub fenced: bool,
    /// `host:port` of its Prometheus endpoint, if enabled.
    pub metrics_address: Option<String>,
    /// Partition replicas, leaderships and preferred leaderships it holds, as
    /// the answering broker's metadata shows; `None` from a broker that does not
    /// report them.
    pub load: Option<BrokerLoad>,
}

/// What one broker hosts.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct BrokerLoad {
    /// Partition replicas it holds.
    pub partitions: i32,
    /// Partitions it leads.
    pub leaders: i32,
    /// Partitions whose preferred replica (the first) it is.
    pub preferred_leaders: i32,
}

/// The cluster as the controller knows it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ClusterDescription {
    /// Cluster id.
    pub cluster_id: String,
    /// The active controller, if known.
    pub controller_id: Option<i32>,
    /// Registered brokers, by id.
    pub brokers: Vec<BrokerDescription>,
}

/// The controller quorum as its leader, the active controller, sees it (Kafka's
/// `kafka-metadata-quorum describe --status --replication`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct QuorumDescription {
    /// The active controller: the quorum's leader.
    pub leader_id: i32,
    /// The leader's term (the quorum's leader epoch).
    pub leader_epoch: i64,
    /// The end of the committed part of the metadata (Raft) log.
    pub high_watermark: i64,
    /// The controller epoch LeaderAndIsr requests carry.
    pub controller_epoch: i32,
    /// Every voter, by id.
    pub voters: Vec<QuorumVoter>,
}

/// One controller voter as the leader sees it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct QuorumVoter {
    /// The voter's node id.
    pub id: i32,
    /// The end of its metadata log, as far as the leader knows.
    pub log_end_offset: i64,
    /// Entries it is behind the leader's log end.
    pub lag: i64,
    /// Milliseconds since the leader last heard from it (0 for the leader itself);
    /// `None` if never.
    pub last_contact_ms: Option<i64>,
}

/// Administrative client.
///
/// ```no_run
/// # async fn example() -> Result<(), syncline_client::ClientError> {
/// use syncline_client::{Admin, ClientConfig, NewTopic};
///
/// let admin = Admin::new(ClientConfig::new("127.0.0.1:9092"))?;
/// admin
///     .create_topic(NewTopic::new("events", 3, 3).with_config("min.insync.replicas", "2"))
///     .await?;
/// for p in admin.describe_topic("events").await?.partitions {
///     println!("{}: leader {:?} isr {:?}", p.partition, p.leader, p.isr);
/// }
/// # Ok(()) }
/// ```
#[derive(Debug, Clone)]
pub struct Admin {
    cluster: Arc<Cluster>,
}

impl Admin {
    /// An admin client; connects on first use.
    pub fn new(config: ClientConfig) -> Result<Admin, ClientError> {
        Ok(Admin {
            cluster: Cluster::new(config)?,
        })
    }

    pub(crate) fn cluster(&self) -> &Arc<Cluster> {
        &self.cluster
    }

    /// Creates topics. Returns one result per topic, in the order given; a topic
    /// error names its code (`TOPIC_ALREADY_EXISTS`, `INVALID_REPLICATION_FACTOR`,
    /// `INVALID_CONFIG`, ...). Retriable per-topic errors (e.g. `NOT_CONTROLLER`
    /// during a controller change) are retried within `request_timeout_ms`.
    pub async fn create_topics(
        &self,
        topics: &[NewTopic],
    ) -> Result<Vec<Result<CreatedTopic, ClientError>>, ClientError> {
        let config = &self.cluster.config;
        let deadline = Instant::now() + config.request_timeout();
        let mut results: Vec<Option<Result<CreatedTopic, ClientError>>> =
            topics.iter().map(|_| None).collect();
        if topics.is_empty() {
            return Ok(Vec::new());
        }
        let backoff = config.retry_backoff();
        let mut failures = 0;
        loop {
            let pending: Vec<&NewTopic> = topics
                .iter()
                .zip(&results)
                .filter(|(_, r)| r.is_none())
                .map(|(t, _)| t)
                .collect();
            let request = pb::CreateTopicsRequest {
                topics: pending
                    .iter()
                    .map(|t| pb::CreatableTopic {
                        name: t.name.clone(),
                        num_partitions: t.num_partitions,
                        replication_factor: t.replication_factor,
                        configs: t.configs.clone().into_iter().collect(),
                    })
                    .collect(),
                timeout_ms: i32::try_from(config.request_timeout_ms).unwrap_or(i32::MAX),
                validate_only: false,
                forwarded: false,
                auto_create: false,
            };
            let body = self
                .cluster
                .send_any(pb::request::Body::CreateTopics(request))
                .await?;
            let response = expect_body!(body, CreateTopics)?;
            let retry_at = Instant::now() + backoff.delay(failures);
            failures += 1;
            let mut retry = false;
            for (i, topic) in topics.iter().enumerate() {
                if results[i].is_some() {
                    continue;
                }
                let Some(answer) = response.topics.iter().find(|r| r.name == topic.name) else {
                    results[i] = Some(Err(ClientError::Topic {
                        topic: topic.name.clone(),
                        code: ErrorCode::UnknownServerError,
                        message: "no result for this topic in the response".into(),
                    }));
                    continue;
                };
                match create_result(answer) {
                    Err(e) if e.is_retriable() && retry_at < deadline => retry = true,
                    other => results[i] = Some(other),
                }
            }
            if !retry {
                break;
            }
            tokio::time::sleep_until(retry_at).await;
        }
        Ok(results
            .into_iter()
            .map(|r| r.expect("every topic got a result"))
            .collect())
    }

    /// Creates one topic.
    pub async fn create_topic(&self, topic: NewTopic) -> Result<CreatedTopic, ClientError> {
        self.create_topics(std::slice::from_ref(&topic))
            .await?
            .pop()
            .expect("one result per topic")
    }

    /// Names of all topics, sorted.
    pub async fn list_topics(&self) -> Result<Vec<String>, ClientError> {
        let response = self.cluster.refresh_metadata(Vec::new()).await?;
        let names: BTreeSet<String> = response.topics.into_iter().map(|t| t.name).collect();
        Ok(names.into_iter().collect())
    }

    /// Describes topics (empty: all), with each partition leader's own view
    /// merged in. Unknown topics come back with an `error`.
    pub async fn describe_topics(
        &self,
        topics: &[&str],
    ) -> Result<Vec<TopicDescription>, ClientError> {
        let names: Vec<String> = topics.iter().map(|t| t.to_string()).collect();
        let request = || {
            pb::request::Body::DescribeTopics(pb::DescribeTopicsRequest {
                topics: names.clone(),
            })
        };
        let base = expect_body!(self.cluster.send_any(request()).await?, DescribeTopics)?;
        // Broker addresses for the leaders.
        self.cluster.refresh_metadata(names.clone()).await?;

        let leaders: BTreeSet<i32> = base
            .topics
            .iter()
            .flat_map(|t| &t.partitions)
            .filter(|p| !p.from_leader && p.leader_id >= 0)
            .map(|p| p.leader_id)
            .collect();
        let asks = leaders.into_iter().map(|leader| {
            let cluster = self.cluster.clone();
            let body = request();
            async move {
                let answer = cluster
                    .send_to(leader, body)
                    .await
                    .and_then(|b| expect_body!(b, DescribeTopics));
                match answer {
                    Ok(r) => Some((leader, r)),
                    Err(e) => {
                        tracing::warn!(broker = leader, error = %e, "cannot ask a partition leader for its view");
                        None
                    }
                }
            }
        });
        let views: Vec<(i32, pb::DescribeTopicsResponse)> = futures::future::join_all(asks)
            .await
            .into_iter()
            .flatten()
            .collect();
        Ok(merge_descriptions(base, &views))
    }

    /// Describes one topic; an unknown topic is [`ClientError::UnknownTopic`].
    pub async fn describe_topic(&self, topic: &str) -> Result<TopicDescription, ClientError> {
        let described = self.describe_topics(&[topic]).await?;
        let found = described
            .into_iter()
            .find(|t| t.name == topic)
            .ok_or_else(|| ClientError::UnknownTopic(topic.to_string()))?;
        match found.error {
            Some(ErrorCode::UnknownTopicOrPartition) => {
                Err(ClientError::UnknownTopic(topic.to_string()))
            }
            Some(code) => Err(ClientError::Topic {
                topic: topic.to_string(),
                code,
                message: String::new(),
            }),
            None => Ok(found),
        }
    }

    /// Every registered broker, fenced or not, and the controller.
    pub async fn describe_cluster(&self) -> Result<ClusterDescription, ClientError> {
        let body = self
            .cluster
            .send_any(pb::request::Body::DescribeCluster(
                pb::DescribeClusterRequest {},
            ))
            .await?;
        let response = expect_body!(body, DescribeCluster)?;
        let code = ErrorCode::from_wire(response.error_code);
        if code != ErrorCode::None {
            return Err(ClientError::Protocol {
                code,
                message: String::new(),
            });
        }
        Ok(cluster_description(response))
    }
}

impl Admin {
    /// The controller quorum: its leader, term and each voter's replication. Any
    /// broker answers (it asks the active controller).
    pub async fn describe_quorum(&self) -> Result<QuorumDescription, ClientError> {
        let body = self
            .cluster
            .send_any(pb::request::Body::DescribeQuorum(
                pb::DescribeQuorumRequest { forwarded: false },
            ))
            .await?;
        let r = expect_body!(body, DescribeQuorum)?;
        request_result(r.error_code, &r.error_message)?;
        let mut voters: Vec<QuorumVoter> = r
            .voters
            .iter()
            .map(|v| QuorumVoter {
                id: v.id,
                log_end_offset: v.log_end_offset,
                lag: v.lag,
                last_contact_ms: (v.last_contact_ms >= 0).then_some(v.last_contact_ms),
            })
            .collect();
        voters.sort_by_key(|v| v.id);
        Ok(QuorumDescription {
            leader_id: r.leader_id,
            leader_epoch: r.leader_epoch,
            high_watermark: r.high_watermark,
            controller_epoch: r.controller_epoch,
            voters,
        })
    }
}

/// A change to a topic: configs set or deleted (back to their defaults), and
/// partitions added.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct TopicAlteration {
    /// Topic name.
    pub name: String,
    /// Configs to set, by Kafka's dotted names.
    pub set_configs: BTreeMap<String, String>,
    /// Configs back to their defaults.
    pub delete_configs: Vec<String>,
    /// The new partition count (it only grows); `None` leaves it.
    pub partitions: Option<i32>,
}

/// A topic after an [`Admin::alter_topic`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct AlteredTopic {
    /// Topic name.
    pub name: String,
    /// Its partition count.
    pub num_partitions: i32,
    /// Its effective configs, defaults included.
    pub configs: BTreeMap<String, String>,
}

impl Admin {
    /// Changes a topic's configs live and grows its partition count (Kafka's
    /// IncrementalAlterConfigs and CreatePartitions in one request): validated
    /// as at creation, all or nothing. Any broker answers (it asks the active
    /// controller).
    pub async fn alter_topic(&self, change: &TopicAlteration) -> Result<AlteredTopic, ClientError> {
        let request = pb::AlterTopicRequest {
            name: change.name.clone(),
            set_configs: change.set_configs.clone().into_iter().collect(),
            delete_configs: change.delete_configs.clone(),
            partitions: change.partitions.unwrap_or(0),
            validate_only: false,
            forwarded: false,
        };
        let body = self
            .cluster
            .send_any(pb::request::Body::AlterTopic(request))
            .await?;
        let r = expect_body!(body, AlterTopic)?;
        let code = ErrorCode::from_wire(r.error_code);
        if code != ErrorCode::None {
            return Err(ClientError::Topic {
                topic: change.name.clone(),
                code,
                message: r.error_message,
            });
        }
        Ok(AlteredTopic {
            name: r.name,
            num_partitions: r.num_partitions,
            configs: r.configs.into_iter().collect(),
        })
    }
}

/// The outcome of a preferred leader election for one partition.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ElectionResult {
    /// The topic.
    pub topic: String,
    /// The partition; -1 for a topic that does not exist.
    pub partition: i32,
    /// `None`: the preferred replica leads now. `ElectionNotNeeded`: it led
    /// already. `PreferredLeaderNotAvailable`: it is out of the ISR, fenced or
    /// shutting down. `UnknownTopicOrPartition`: no such partition.
    pub error: Option<ErrorCode>,
    /// Why, for an error.
    pub message: String,
    /// The leader after the election (-1 when unknown).
    pub leader: i32,
    /// Its leader epoch.
    pub leader_epoch: i32,
}

impl Admin {
    /// Moves leadership to the preferred replica (the first of the assignment) of
    /// each partition asked for, where it is in the ISR and may lead (Kafka's
    /// `kafka-leader-election --election-type PREFERRED`). `topics` empty: every
    /// partition; a topic with no partitions listed: all of its partitions. Any
    /// broker answers (it asks the active controller); one result per partition.
    pub async fn elect_preferred_leaders(
        &self,
        topics: &[(&str, &[i32])],
    ) -> Result<Vec<ElectionResult>, ClientError> {
        let request = pb::ElectLeadersRequest {
            topics: topics
                .iter()
                .map(|(name, partitions)| pb::ElectLeadersTopic {
                    name: name.to_string(),
                    partitions: partitions.to_vec(),
                })
                .collect(),
            forwarded: false,
        };
        let body = self
            .cluster
            .send_any(pb::request::Body::ElectLeaders(request))
            .await?;
        let r = expect_body!(body, ElectLeaders)?;
        request_result(r.error_code, &r.error_message)?;
        let mut results: Vec<ElectionResult> = r
            .topics
            .into_iter()
            .flat_map(|t| {
                let topic = t.name;
                t.partitions.into_iter().map(move |p| ElectionResult {
                    topic: topic.clone(),
                    partition: p.partition,
                    error: error_of(p.error_code),
                    message: p.error_message,
                    leader: p.leader,
                    leader_epoch: p.leader_epoch,
                })
            })
            .collect();
        results.sort_by(|a, b| (&a.topic, a.partition).cmp(&(&b.topic, b.partition)));
        Ok(results)
    }
}

/// The outcome of deleting one topic.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DeletedTopic {
    /// The topic.
    pub name: String,
    /// `None`: deleted. `UnknownTopicOrPartition`: no such topic.
    /// `InvalidRequest`: named twice.
    pub error: Option<ErrorCode>,
    /// Why, for an error.
    pub message: String,
}

impl Admin {
    /// Deletes topics (Kafka's DeleteTopics): every broker stops serving their
    /// partitions and deletes its copies; the names can be used again at once.
    /// Any broker answers (it asks the active controller); one result per name,
    /// in request order.
    pub async fn delete_topics(&self, names: &[&str]) -> Result<Vec<DeletedTopic>, ClientError> {
        let request = pb::DeleteTopicsRequest {
            topics: names.iter().map(|n| n.to_string()).collect(),
            forwarded: false,
        };
        let body = self
            .cluster
            .send_any(pb::request::Body::DeleteTopics(request))
            .await?;
        let r = expect_body!(body, DeleteTopics)?;
        request_result(r.error_code, &r.error_message)?;
        Ok(r.topics
            .into_iter()
            .map(|t| DeletedTopic {
                name: t.name,
                error: error_of(t.error_code),
                message: t.error_message,
            })
            .collect())
    }
}

/// One partition to move: to `replicas`, or (`None`) back from the reassignment
/// in progress.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Reassignment {
    /// The topic.
    pub topic: String,
    /// The partition.
    pub partition: i32,
    /// The target replicas, the first the preferred leader; `None` cancels.
    pub replicas: Option<Vec<i32>>,
}

/// The outcome of a reassignment request for one partition.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ReassignmentResult {
    /// The topic.
    pub topic: String,
    /// The partition.
    pub partition: i32,
    /// `None`: started (or done, or nothing to move). Otherwise Kafka's error:
    /// `InvalidReplicaAssignment`, `ReassignmentInProgress`,
    /// `NoReassignmentInProgress` or `UnknownTopicOrPartition`.
    pub error: Option<ErrorCode>,
    /// Why, for an error.
    pub message: String,
    /// The partition's replicas after the request.
    pub replicas: Vec<i32>,
    /// Joining replicas of the reassignment in progress after the request.
    pub adding_replicas: Vec<i32>,
    /// Leaving replicas of the reassignment in progress after the request.
    pub removing_replicas: Vec<i32>,
}

impl Admin {
    /// Starts or cancels replica reassignments (Kafka's
    /// AlterPartitionReassignments, KIP-455): the new replicas join and catch up,
    /// and once every target replica is in the ISR the leaving ones go (a leader
    /// among them hands over first). Any broker answers (it asks the active
    /// controller); one result per partition, in topic and partition order.
    /// Progress shows in [`describe_topic`](Self::describe_topic)
    /// (`adding_replicas`, `removing_replicas`).
    pub async fn reassign_partitions(
        &self,
        reassignments: &[Reassignment],
    ) -> Result<Vec<ReassignmentResult>, ClientError> {
        let mut topics: BTreeMap<&str, Vec<pb::ReassignPartition>> = BTreeMap::new();
        for r in reassignments {
            topics
                .entry(&r.topic)
                .or_default()
                .push(pb::ReassignPartition {
                    partition: r.partition,
                    replicas: r.replicas.clone().unwrap_or_default(),
                    cancel: r.replicas.is_none(),
                });
        }
        let request = pb::AlterReassignmentsRequest {
            topics: topics
                .into_iter()
                .map(|(name, partitions)| pb::ReassignTopic {
                    name: name.to_owned(),
                    partitions,
                })
                .collect(),
            forwarded: false,
        };
        let body = self
            .cluster
            .send_any(pb::request::Body::AlterReassignments(request))
            .await?;
        let r = expect_body!(body, AlterReassignments)?;
        request_result(r.error_code, &r.error_message)?;
        let mut results: Vec<ReassignmentResult> = r
            .topics
            .into_iter()
            .flat_map(|t| {
                let topic = t.name;
                t.partitions.into_iter().map(move |p| ReassignmentResult {
                    topic: topic.clone(),
                    partition: p.partition,
                    error: error_of(p.error_code),
                    message: p.error_message,
                    replicas: p.replicas,
                    adding_replicas: p.adding_replicas,
                    removing_replicas: p.removing_replicas,
                })
            })
            .collect();
        results.sort_by(|a, b| (&a.topic, a.partition).cmp(&(&b.topic, b.partition)));
        Ok(results)
    }
}

/// One change to a user's SCRAM credentials (Kafka's
/// `UserScramCredentialAlteration`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum UserScramCredentialAlteration {
    /// Sets (creates or replaces) the user's credential for the verifier's
    /// mechanism. The verifier is made here, from the password: the password
    /// never leaves the client.
    Upsert {
        /// The user name.
        user: String,
        /// The credential.
        verifier: Verifier,
    },
    /// Deletes the user's credential for one mechanism (the user is gone once
    /// it has none).
    Delete {
        /// The user name.
        user: String,
        /// The mechanism whose credential goes.
        mechanism: Mechanism,
    },
}

impl UserScramCredentialAlteration {
    /// An upsertion of `user`'s `mechanism` credential from `password`, with a
    /// fresh random salt and `iterations` PBKDF2 iterations (4096 to 1000000; the
    /// controller refuses others).
    pub fn upsert(user: &str, mechanism: Mechanism, password: &str, iterations: u32) -> Self {
        let salt: [u8; 32] = rand::random();
        UserScramCredentialAlteration::Upsert {
            user: user.to_owned(),
            verifier: Verifier::new(mechanism, password, &salt, iterations),
        }
    }

    /// The user it alters.
    pub fn user(&self) -> &str {
        match self {
            UserScramCredentialAlteration::Upsert { user, .. }
            | UserScramCredentialAlteration::Delete { user, .. } => user,
        }
    }
}

/// The outcome of one entry of [`Admin::alter_client_quotas`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ClientQuotaAlterationResult {
    /// `None`: every change to the entity was made (or, validating only,
    /// would be). Otherwise none was: `InvalidRequest`, with why.
    pub error: Option<ErrorCode>,
    /// Why, for an error.
    pub message: String,
}

/// The outcome of altering one user's credentials.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct UserAlterationResult {
    /// The user.
    pub user: String,
    /// `None`: every change to the user was made. Otherwise none was:
    /// `UnacceptableCredential` (a bad name or credential),
    /// `UnsupportedSaslMechanism`, `ResourceNotFound` (deleting a credential the
    /// user does not have) or `DuplicateResource` (one mechanism changed twice).
    pub error: Option<ErrorCode>,
    /// Why, for an error.
    pub message: String,
}

/// One mechanism a user has a credential for.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ScramCredentialInfo {
    /// The mechanism.
    pub mechanism: Mechanism,
    /// Its PBKDF2 iterations.
    pub iterations: i32,
}

/// A user's credentials, by mechanism (never their keys).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct UserScramCredentials {
    /// The user.
    pub user: String,
    /// `None`, or `ResourceNotFound` for a user named that has no credential
    /// (`DuplicateResource` when named twice).
    pub error: Option<ErrorCode>,
    /// Why, for an error.
    pub message: String,
    /// The mechanisms it has credentials for.
    pub credentials: Vec<ScramCredentialInfo>,
}

/// The outcome of creating one ACL.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct AclCreationResult {
    /// `None`: the ACL exists now (it may have already). `InvalidRequest`: it is
    /// not valid, see `message`.
    pub error: Option<ErrorCode>,
    /// Why, for an error.
    pub message: String,
}

/// The outcome of one ACL filter of a deletion.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct AclDeletionResult {
    /// `None`, or `InvalidRequest` for an invalid filter.
    pub error: Option<ErrorCode>,
    /// Why, for an error.
    pub message: String,
    /// The ACLs the filter matched, now deleted.
    pub deleted: Vec<AclBinding>,
}

/// A credential as the protocol carries it.
fn credential_pb(user: &str, v: &Verifier) -> pb::ScramCredential {
    pb::ScramCredential {
        name: user.to_owned(),
        mechanism: v.mechanism.name().to_owned(),
        salt: v.salt.clone().into(),
        iterations: i32::try_from(v.iterations).unwrap_or(i32::MAX),
        stored_key: v.stored_key.clone().into(),
        server_key: v.server_key.clone().into(),
    }
}

/// The AlterUserScramCredentials request of `alterations`.
fn alter_users_request(
    alterations: &[UserScramCredentialAlteration],
) -> pb::AlterUserScramCredentialsRequest {
    let mut request = pb::AlterUserScramCredentialsRequest::default();
    for a in alterations {
        match a {
            UserScramCredentialAlteration::Upsert { user, verifier } => {
                request.upsertions.push(credential_pb(user, verifier))
            }
            UserScramCredentialAlteration::Delete { user, mechanism } => {
                request.deletions.push(pb::ScramCredentialDeletion {
                    name: user.clone(),
                    mechanism: mechanism.name().to_owned(),
                })
            }
        }
    }
    request
}

fn user_credentials(d: pb::UserScramCredentialsDescription) -> UserScramCredentials {
    UserScramCredentials {
        user: d.user,
        error: error_of(d.error_code),
        message: d.error_message,
        credentials: d
            .credentials
            .iter()
            .filter_map(|c| {
                Some(ScramCredentialInfo {
                    mechanism: Mechanism::from_name(&c.mechanism)?,
                    iterations: c.iterations,
                })
            })
            .collect(),
    }
}

/// ACLs off the wire (the broker sends only valid ones; any other is skipped).
fn acls_of(acls: &[pb::AclBinding]) -> Vec<AclBinding> {
    acls.iter()
        .filter_map(|a| AclBinding::from_pb(a).ok())
        .collect()
}

impl Admin {
    /// Creates, replaces and deletes users' SCRAM credentials (Kafka's
    /// AlterUserScramCredentials). Any broker answers (it asks the active
    /// controller); one result per user, in the order users first appear.
    /// A deleted user's connections are closed.
    pub async fn alter_user_scram_credentials(
        &self,
        alterations: &[UserScramCredentialAlteration],
    ) -> Result<Vec<UserAlterationResult>, ClientError> {
        let body = self
            .cluster
            .send_any(pb::request::Body::AlterUserScramCredentials(
                alter_users_request(alterations),
            ))
            .await?;
        let r = expect_body!(body, AlterUserScramCredentials)?;
        request_result(r.error_code, &r.error_message)?;
        Ok(r.results
            .into_iter()
            .map(|u| UserAlterationResult {
                user: u.user,
                error: error_of(u.error_code),
                message: u.error_message,
            })
            .collect())
    }

    /// Which users have credentials for which mechanisms (Kafka's
    /// DescribeUserScramCredentials): every user (by name) when `users` is
    /// empty, else each one named, in order.
    pub async fn describe_user_scram_credentials(
        &self,
        users: &[&str],
    ) -> Result<Vec<UserScramCredentials>, ClientError> {
        let request = pb::DescribeUserScramCredentialsRequest {
            users: users.iter().map(|u| u.to_string()).collect(),
        };
        let body = self
            .cluster
            .send_any(pb::request::Body::DescribeUserScramCredentials(request))
            .await?;
        let r = expect_body!(body, DescribeUserScramCredentials)?;
        request_result(r.error_code, &r.error_message)?;
        Ok(r.results.into_iter().map(user_credentials).collect())
    }

    /// Creates ACLs (Kafka's CreateAcls). Any broker answers (it asks the active
    /// controller); one result per ACL, in order.
    pub async fn create_acls(
        &self,
        acls: &[AclBinding],
    ) -> Result<Vec<AclCreationResult>, ClientError> {
        let request = pb::CreateAclsRequest {
            creations: acls.iter().map(AclBinding::to_pb).collect(),
            forwarded: false,
        };
        let body = self
            .cluster
            .send_any(pb::request::Body::CreateAcls(request))
            .await?;
        let r = expect_body!(body, CreateAcls)?;
        request_result(r.error_code, &r.error_message)?;
        Ok(r.results
            .into_iter()
            .map(|a| AclCreationResult {
                error: error_of(a.error_code),
                message: a.error_message,
            })
            .collect())
    }

    /// Deletes every ACL each filter matches (Kafka's DeleteAcls). Any broker
    /// answers (it asks the active controller); one result per filter, in order,
    /// with the ACLs it deleted.
    pub async fn delete_acls(
        &self,
        filters: &[AclFilter],
    ) -> Result<Vec<AclDeletionResult>, ClientError> {
        let request = pb::DeleteAclsRequest {
            filters: filters.iter().map(AclFilter::to_pb).collect(),
            forwarded: false,
        };
        let body = self
            .cluster
            .send_any(pb::request::Body::DeleteAcls(request))
            .await?;
        let r = expect_body!(body, DeleteAcls)?;
        request_result(r.error_code, &r.error_message)?;
        Ok(r.results
            .into_iter()
            .map(|f| AclDeletionResult {
                error: error_of(f.error_code),
                message: f.error_message,
                deleted: acls_of(&f.deleted),
            })
            .collect())
    }

    /// Sets and removes client quotas (Kafka's AlterClientQuotas). Any broker
    /// answers (it asks the active controller); one result per entry, in
    /// order. `validate_only`: checked, not made.
    pub async fn alter_client_quotas(
        &self,
        entries: Vec<pb::ClientQuotaAlteration>,
        validate_only: bool,
    ) -> Result<Vec<ClientQuotaAlterationResult>, ClientError> {
        let request = pb::AlterClientQuotasRequest {
            entries,
            validate_only,
            forwarded: false,
        };
        let body = self
            .cluster
            .send_any(pb::request::Body::AlterClientQuotas(request))
            .await?;
        let r = expect_body!(body, AlterClientQuotas)?;
        request_result(r.error_code, &r.error_message)?;
        Ok(r.results
            .into_iter()
            .map(|e| ClientQuotaAlterationResult {
                error: error_of(e.error_code),
                message: e.error_message,
            })
            .collect())
    }

    /// The client quotas of the entities `components` match (Kafka's
    /// DescribeClientQuotas; `strict`: only entities with no other entity
    /// type), as the answering broker knows them; no component and not
    /// strict lists them all.
    pub async fn describe_client_quotas(
        &self,
        components: Vec<pb::ClientQuotaFilterComponent>,
        strict: bool,
    ) -> Result<Vec<pb::ClientQuotaEntry>, ClientError> {
        let body = self
            .cluster
            .send_any(pb::request::Body::DescribeClientQuotas(
                pb::DescribeClientQuotasRequest { components, strict },
            ))
            .await?;
        let r = expect_body!(body, DescribeClientQuotas)?;
        request_result(r.error_code, &r.error_message)?;
        Ok(r.entries)
    }

    /// The ACLs `filter` matches (Kafka's DescribeAcls), as the answering
    /// broker knows them; [`AclFilter::any`] lists them all.
    pub async fn describe_acls(&self, filter: &AclFilter) -> Result<Vec<AclBinding>, ClientError> {
        let request = pb::DescribeAclsRequest {
            filter: Some(filter.to_pb()),
        };
        let body = self
            .cluster
            .send_any(pb::request::Body::DescribeAcls(request))
            .await?;
        let r = expect_body!(body, DescribeAcls)?;
        request_result(r.error_code, &r.error_message)?;
        Ok(acls_of(&r.acls))
    }
}

/// A whole request's error code (no active controller, ...) as an error.
fn request_result(error_code: i32, message: &str) -> Result<(), ClientError> {
    match ErrorCode::from_wire(error_code) {
        ErrorCode::None => Ok(()),
        code => Err(ClientError::Protocol {
            code,
            message: message.to_owned(),
        }),
    }
}

/// A per-partition error code: `None` for NONE.
fn error_of(error_code: i32) -> Option<ErrorCode> {
    match ErrorCode::from_wire(error_code) {
        ErrorCode::None => None,
        code => Some(code),
    }
}

fn create_result(answer: &pb::CreatableTopicResult) -> Result<CreatedTopic, ClientError> {
    let code = ErrorCode::from_wire(answer.error_code);
    if code != ErrorCode::None {
        return Err(ClientError::Topic {
            topic: answer.name.clone(),
            code,
            message: answer.error_message.clone(),
        });
    }
    Ok(CreatedTopic {
        name: answer.name.clone(),
        num_partitions: answer.num_partitions,
        replication_factor: answer.replication_factor,
        configs: answer.configs.clone().into_iter().collect(),
    })
}

pub(crate) fn cluster_description(response: pb::DescribeClusterResponse) -> ClusterDescription {
    let mut brokers: Vec<BrokerDescription> = response
        .brokers
        .iter()
        .map(|b| BrokerDescription {
            endpoint: b
                .endpoint
                .as_ref()
                .map(BrokerEndpoint::from)
                .unwrap_or(BrokerEndpoint {
                    id: -1,
                    host: String::new(),
                    port: 0,
                    rack: None,
                }),
            broker_epoch: b.broker_epoch,
            fenced: b.fenced,
            metrics_address: (!b.metrics_address.is_empty()).then(|| b.metrics_address.clone()),
            load: response
                .loads
                .iter()
                .find(|l| {
                    b.endpoint
                        .as_ref()
                        .is_some_and(|e| e.node_id == l.broker_id)
                })
                .map(|l| BrokerLoad {
                    partitions: l.partitions,
                    leaders: l.leaders,
                    preferred_leaders: l.preferred_leaders,
                }),
        })
        .collect();
    brokers.sort_by_key(|b| b.endpoint.id);
    ClusterDescription {
        cluster_id: response.cluster_id,
        controller_id: (response.controller_id >= 0).then_some(response.controller_id),
        brokers,
    }
}

fn leader_view(p: &pb::PartitionDescription) -> Option<LeaderView> {
    p.from_leader.then(|| LeaderView {
        high_watermark: p.high_watermark,
        log_end_offset: p.log_end_offset,
        log_start_offset: p.log_start_offset,
        replica_statuses: p
            .replica_statuses
            .iter()
            .map(|r| ReplicaStatus {
                broker_id: r.broker_id,
                log_end_offset: (r.log_end_offset >= 0).then_some(r.log_end_offset),
                lag_offsets: r.lag_offsets,
                last_caught_up_ms_ago: (r.last_caught_up_ms_ago >= 0)
                    .then_some(r.last_caught_up_ms_ago),
                in_isr: r.in_isr,
            })
            .collect(),
        pending_isr: p.pending_isr.clone(),
        producer_count: p.producer_count,
    })
}

fn partition_description(p: &pb::PartitionDescription) -> PartitionDescription {
    let code = ErrorCode::from_wire(p.error_code);
    PartitionDescription {
        partition: p.partition,
        error: (code != ErrorCode::None).then_some(code),
        leader: (p.leader_id >= 0).then_some(p.leader_id),
        leader_epoch: p.leader_epoch,
        partition_epoch: p.partition_epoch,
        replicas: p.replicas.clone(),
        isr: p.isr.clone(),
        adding_replicas: p.adding_replicas.clone(),
        removing_replicas: p.removing_replicas.clone(),
        leader_view: leader_view(p),
    }
}

/// Merges any broker's description (`base`) with the leaders' own answers
/// (`views`, by the broker that answered). A partition takes its leader view
/// from the broker the base names as leader, if that broker answered as leader;
/// when the leader's answer carries a newer leader epoch, the whole partition
/// comes from it (the base broker had not heard of the change yet).
pub(crate) fn merge_descriptions(
    base: pb::DescribeTopicsResponse,
    views: &[(i32, pb::DescribeTopicsResponse)],
) -> Vec<TopicDescription> {
    let find = |broker: i32, topic: &str, partition: i32| {
        views
            .iter()
            .filter(|(b, _)| *b == broker)
            .flat_map(|(_, r)| &r.topics)
            .filter(|t| t.name == topic)
            .flat_map(|t| &t.partitions)
            .find(|p| p.partition == partition && p.from_leader)
    };
    let mut topics: Vec<TopicDescription> = base
        .topics
        .iter()
        .map(|t| {
            let code = ErrorCode::from_wire(t.error_code);
            let mut partitions: Vec<PartitionDescription> = t
                .partitions
                .iter()
                .map(|p| {
                    if p.from_leader || p.leader_id < 0 {
                        return partition_description(p);
                    }
                    match find(p.leader_id, &t.name, p.partition) {
                        Some(l) if l.leader_epoch > p.leader_epoch => partition_description(l),
                        Some(l) if l.leader_epoch == p.leader_epoch => PartitionDescription {
                            leader_view: leader_view(l),
                            ..partition_description(p)
                        },
                        _ => partition_description(p),
                    }
                })
                .collect();
            partitions.sort_by_key(|p| p.partition);
            TopicDescription {
                name: t.name.clone(),
                error: (code != ErrorCode::None).then_some(code),
                configs: t.configs.clone().into_iter().collect(),
                partitions,
            }
        })
        .collect();
    topics.sort_by(|a, b| a.name.cmp(&b.name));
    topics
}

#[cfg(test)]
mod tests {
    use super::*;

    fn part(partition: i32, leader: i32, epoch: i32) -> pb::PartitionDescription {
        pb::PartitionDescription {
            partition,
            leader_id: leader,
            leader_epoch: epoch,
            replicas: vec![1, 2, 3],
            isr: vec![1, 2, 3],
            ..Default::default()
        }
    }

    fn leading(mut p: pb::PartitionDescription, hw: i64) -> pb::PartitionDescription {
        p.from_leader = true;
        p.high_watermark = hw;
        p.log_end_offset = hw + 5;
        p.replica_statuses = vec![pb::ReplicaStatus {
            broker_id: 3,
            log_end_offset: -1,
            lag_offsets: hw + 5,
            last_caught_up_ms_ago: -1,
            in_isr: false,
        }];
        p
    }

    fn response(partitions: Vec<pb::PartitionDescription>) -> pb::DescribeTopicsResponse {
        pb::DescribeTopicsResponse {
            topics: vec![pb::TopicDescription {
                name: "t".into(),
                error_code: 0,
                configs: [("min.insync.replicas".to_string(), "2".to_string())].into(),
                partitions,
            }],
        }
    }

    #[test]
    fn merge_takes_each_partitions_view_from_its_leader() {
        // The answering broker (1) leads partition 0; 2 leads 1; 3 leads 2 but did
        // not answer; partition 3 is offline.
        let base = response(vec![
            part(3, -1, 4),
            leading(part(0, 1, 1), 10),
            part(1, 2, 1),
            part(2, 3, 1),
        ]);
        // Broker 2 also answers for partition 0 (not as leader): ignored.
        let from2 = response(vec![part(0, 1, 1), leading(part(1, 2, 1), 20)]);
        let merged = merge_descriptions(base, &[(2, from2)]);
        assert_eq!(merged.len(), 1);
        let t = &merged[0];
        assert_eq!(t.configs["min.insync.replicas"], "2");
        assert_eq!(t.replication_factor(), 3);
        let hw: Vec<Option<i64>> = t
            .partitions
            .iter()
            .map(|p| p.leader_view.as_ref().map(|v| v.high_watermark))
            .collect();
        assert_eq!(hw, [Some(10), Some(20), None, None]);
        let view = t.partitions[1].leader_view.as_ref().unwrap();
        assert_eq!(view.log_end_offset, 25);
        assert_eq!(view.replica_statuses[0].log_end_offset, None);
        assert_eq!(view.replica_statuses[0].last_caught_up_ms_ago, None);
        assert_eq!(t.partitions[3].leader, None);
    }

    #[test]
    fn merge_prefers_a_leader_with_a_newer_epoch_and_ignores_stale_ones() {
        let base = response(vec![part(0, 2, 3), part(1, 2, 3)]);
        let mut newer = leading(part(0, 2, 4), 7);
        newer.isr = vec![2, 3];
        // Partition 1: broker 2 answers as leader of an older epoch.
        let stale = leading(part(1, 2, 2), 99);
        let merged = merge_descriptions(base, &[(2, response(vec![newer, stale]))]);
        let p = &merged[0].partitions;
        assert_eq!((p[0].leader_epoch, p[0].isr.clone()), (4, vec![2, 3]));
        assert_eq!(p[0].leader_view.as_ref().unwrap().high_watermark, 7);
        assert_eq!(p[1].leader_view, None);
    }

    #[test]
    fn cluster_description_sorts_brokers_and_maps_empty_fields() {
        let b = |id: i32, fenced: bool, metrics: &str| pb::BrokerInfo {
            endpoint: Some(pb::BrokerEndpoint {
                node_id: id,
                host: "h".into(),
                port: 9090 + id,
                rack: if id == 1 { "r1".into() } else { String::new() },
            }),
            broker_epoch: 10 + i64::from(id),
            fenced,
            metrics_address: metrics.into(),
            listeners: vec![],
        };
        let d = cluster_description(pb::DescribeClusterResponse {
            error_code: 0,
            cluster_id: "c".into(),
            controller_id: -1,
            brokers: vec![b(2, true, ""), b(1, false, "h:9101")],
            loads: vec![pb::BrokerLoad {
                broker_id: 1,
                partitions: 3,
                leaders: 1,
                preferred_leaders: 2,
            }],
        });
        assert_eq!(
            d.brokers[0].load,
            Some(BrokerLoad {
                partitions: 3,
                leaders: 1,
                preferred_leaders: 2
            })
        );
        assert_eq!(d.brokers[1].load, None);
        assert_eq!(d.controller_id, None);
        assert_eq!(d.brokers[0].endpoint.rack.as_deref(), Some("r1"));
        assert_eq!(d.brokers[0].metrics_address.as_deref(), Some("h:9101"));
        assert!(d.brokers[1].fenced && d.brokers[1].metrics_address.is_none());
    }

    #[test]
    fn user_alterations_carry_verifiers_never_passwords() {
        let upsert =
            UserScramCredentialAlteration::upsert("alice", Mechanism::ScramSha512, "pw", 4096);
        let UserScramCredentialAlteration::Upsert { verifier, .. } = &upsert else {
            unreachable!()
        };
        assert!(verifier.matches("pw") && verifier.salt.len() == 32);
        let delete = UserScramCredentialAlteration::Delete {
            user: "bob".into(),
            mechanism: Mechanism::ScramSha256,
        };
        assert_eq!((upsert.user(), delete.user()), ("alice", "bob"));
        let request = alter_users_request(&[upsert.clone(), delete]);
        let c = &request.upsertions[0];
        assert_eq!(
            (c.name.as_str(), c.mechanism.as_str(), c.iterations),
            ("alice", "SCRAM-SHA-512", 4096)
        );
        assert_eq!(c.stored_key.as_ref(), verifier.stored_key.as_slice());
        assert!(!format!("{request:?}").contains("pw\""));
        assert_eq!(request.deletions[0].name, "bob");
        assert_eq!(request.deletions[0].mechanism, "SCRAM-SHA-256");
    }

    #[test]
    fn user_descriptions_map_codes_and_mechanisms() {
        let d = user_credentials(pb::UserScramCredentialsDescription {
            user: "alice".into(),
            error_code: 0,
            error_message: String::new(),
            credentials: vec![
                pb::ScramCredentialInfo {
                    mechanism: "SCRAM-SHA-256".into(),
                    iterations: 8192,
                },
                pb::ScramCredentialInfo {
                    mechanism: "bogus".into(),
                    iterations: 1,
                },
            ],
        });
        assert_eq!(d.error, None);
        assert_eq!(
            d.credentials,
            vec![ScramCredentialInfo {
                mechanism: Mechanism::ScramSha256,
                iterations: 8192
            }]
        );
        let missing = user_credentials(pb::UserScramCredentialsDescription {
            user: "nobody".into(),
            error_code: ErrorCode::ResourceNotFound as i32,
            error_message: "no credentials".into(),
            credentials: vec![],
        });
        assert_eq!(missing.error, Some(ErrorCode::ResourceNotFound));
    }

    #[test]
    fn create_result_names_the_error() {
        let answer = pb::CreatableTopicResult {
            name: "t".into(),
            error_code: ErrorCode::InvalidReplicationFactor as i32,
            error_message: "3 > 2 brokers".into(),
            ..Default::default()
        };
        let err = create_result(&answer).unwrap_err();
        assert_eq!(err.code(), Some(ErrorCode::InvalidReplicationFactor));
        assert_eq!(
            err.to_string(),
            "topic t: INVALID_REPLICATION_FACTOR: 3 > 2 brokers"
        );
    }
}
