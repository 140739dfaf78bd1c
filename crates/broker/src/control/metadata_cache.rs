//! This broker's copy of the cluster metadata, as the controller last announced it
//! (LeaderAndIsr carries brokers, topic configs, partition states, and users and
//! ACLs, client quotas). Any broker answers Metadata, DescribeTopics,
//! DescribeCluster, DescribeUserScramCredentials and DescribeAcls from it,
//! authenticates and authorizes clients with it, and enforces its client quotas.

use std::collections::{BTreeMap, HashMap};
use std::sync::Arc;

use parking_lot::RwLock;
use syncline_auth::acl::{AclBinding, AclFilter, Acls};
use syncline_auth::{Mechanism, Verifier};
use syncline_controller::client_quotas::{self, ClientQuotaMap};
use syncline_proto::{pb, ErrorCode, NO_LEADER};
use syncline_replication::announcement::{freshness, Epochs, Freshness};
use syncline_replication::isr::{self, Registration};
use syncline_replication::topic::{adopt, same_topic, Adopt, TopicId};
use tokio::sync::Notify;

#[derive(Debug, Default)]
struct TopicImage {
    /// The controller's topic id (0: not announced yet).
    topic_id: i64,
    configs: HashMap<String, String>,
    partitions: BTreeMap<i32, pb::PartitionState>,
}

#[derive(Debug)]
struct Image {
    cluster_id: String,
    controller_id: i32,
    controller_epoch: i32,
    metadata_offset: i64,
    brokers: BTreeMap<i32, pb::BrokerInfo>,
    topics: BTreeMap<String, TopicImage>,
    security: Security,
    client_quotas: ClientQuotas,
}

/// Client quotas, as the last announcement that carried them had them.
#[derive(Debug)]
struct ClientQuotas {
    /// The metadata offset of that announcement (-1 before any): an older one
    /// never replaces it.
    offset: i64,
    /// Shared: replaced whole, never changed.
    quotas: Arc<ClientQuotaMap>,
}

/// Users and ACLs, as the last announcement that carried them had them.
#[derive(Debug)]
struct Security {
    /// The metadata offset of that announcement (-1 before any): an older one
    /// never replaces it.
    offset: i64,
    /// Every user credential.
    verifiers: HashMap<(String, Mechanism), Verifier>,
    acls: Arc<Acls>,
}

impl Security {
    fn empty() -> Security {
        Security {
            offset: -1,
            verifiers: HashMap::new(),
            acls: Arc::new(Acls::default()),
        }
    }

    /// The announced image; entries that are not valid (no controller announces
    /// one) are skipped with a warning.
    fn from_pb(image: &pb::SecurityImage, offset: i64) -> Security {
        let verifiers = image
            .credentials
            .iter()
            .filter_map(|c| match syncline_controller::verifier_of(c) {
                Some(v) => Some(((c.name.clone(), v.mechanism), v)),
                None => {
                    tracing::warn!(user = %c.name, mechanism = %c.mechanism, "ignoring an invalid user credential in LeaderAndIsr");
                    None
                }
            })
            .collect();
        let acls = image
            .acls
            .iter()
            .filter_map(|a| match AclBinding::from_pb(a) {
                Ok(acl) => Some(acl),
                Err(e) => {
                    tracing::warn!(error = %e, "ignoring an invalid ACL in LeaderAndIsr");
                    None
                }
            })
            .collect();
        Security {
            offset,
            verifiers,
            acls: Arc::new(acls),
        }
    }

    fn same_contents(&self, other: &Security) -> bool {
        self.verifiers == other.verifiers && self.acls == other.acls
    }
}

/// The topics a Metadata request asks for.
#[derive(Debug, Clone, Copy)]
pub(crate) enum Topics<'a> {
    /// Every topic.
    Every,
    /// These.
    Named(&'a [String]),
    /// None: the brokers and the controller only.
    NoTopic,
}

impl Topics<'_> {
    /// What `r` asks for.
    pub(crate) fn of(r: &pb::MetadataRequest) -> Topics<'_> {
        match (r.topics.is_empty(), r.no_topics) {
            (false, _) => Topics::Named(&r.topics),
            (true, false) => Topics::Every,
            (true, true) => Topics::NoTopic,
        }
    }
}

/// The cluster as this broker knows it.
#[derive(Debug)]
pub(crate) struct MetadataCache {
    image: RwLock<Image>,
    changed: Notify,
    /// Held for the whole application of an announcement (cache and roles), so a
    /// reader waiting for a change sees it only once it has fully taken effect.
    update: parking_lot::Mutex<()>,
    /// The controller of the last accepted announcement (-1 before any).
    controller: tokio::sync::watch::Sender<i32>,
    /// Whether users and ACLs were announced yet (a broker that just started
    /// knows none until the controller's first full announcement).
    security_known: tokio::sync::watch::Sender<bool>,
}

/// What an announcement changed.
#[derive(Debug, Default)]
pub(crate) struct AppliedMetadata {
    /// Partition states newer than what the cache had (or that a full sync repeats).
    pub partitions: Vec<pb::PartitionState>,
    /// Topics whose configs changed.
    pub changed_configs: Vec<String>,
    /// Topics gone, with the topic id they had (0 when unknown): deleted, or (in a
    /// full sync) missing from the image or there under another topic id.
    pub deleted: Vec<(String, i64)>,
    /// Users or ACLs changed: re-check who may stay connected and what they may do.
    pub security_changed: bool,
}

impl MetadataCache {
    pub(crate) fn new(cluster_id: &str) -> MetadataCache {
        MetadataCache {
            image: RwLock::new(Image {
                cluster_id: cluster_id.to_string(),
                controller_id: -1,
                controller_epoch: -1,
                metadata_offset: -1,
                brokers: BTreeMap::new(),
                topics: BTreeMap::new(),
                security: Security::empty(),
                client_quotas: ClientQuotas {
                    offset: -1,
                    quotas: Arc::new(ClientQuotaMap::new()),
                },
            }),
            changed: Notify::new(),
            update: parking_lot::Mutex::new(()),
            controller: tokio::sync::watch::Sender::new(-1),
            security_known: tokio::sync::watch::Sender::new(false),
        }
    }

    /// Waits until users and ACLs were announced, at most `timeout`; whether
    /// they were.
    pub(crate) async fn wait_security_known(&self, timeout: std::time::Duration) -> bool {
        let mut known = self.security_known.subscribe();
        tokio::time::timeout(timeout, known.wait_for(|k| *k))
            .await
            .is_ok_and(|r| r.is_ok())
    }

    /// Follows the controller of the accepted announcements: a new active
    /// controller announces itself to every broker as it takes office.
    pub(crate) fn subscribe_controller(&self) -> tokio::sync::watch::Receiver<i32> {
        self.controller.subscribe()
    }

    /// Serialises announcements: hold the guard while applying one (see `update`).
    pub(crate) fn lock_for_update(&self) -> parking_lot::MutexGuard<'_, ()> {
        self.update.lock()
    }

    /// Wakes [`MetadataCache::wait_for_leaders`] callers: call once an announcement is
    /// fully applied (partitions created, roles taken), not just cached.
    pub(crate) fn notify_applied(&self) {
        self.changed.notify_waiters();
    }

    /// Waits until every topic in `topics` has all its partitions with a leader, or
    /// `timeout` passes. Returns whether they are all there.
    pub(crate) async fn wait_for_leaders(
        &self,
        topics: &[String],
        timeout: std::time::Duration,
    ) -> bool {
        let deadline = tokio::time::Instant::now() + timeout;
        loop {
            let changed = self.changed.notified();
            if self.have_leaders(topics) {
                return true;
            }
            if tokio::time::timeout_at(deadline, changed).await.is_err() {
                return self.have_leaders(topics);
            }
        }
    }

    fn have_leaders(&self, topics: &[String]) -> bool {
        // An announcement being applied (cached, its logs not all created yet)
        // counts as "not yet", and its end wakes the waiters to look again
        // (`notify_applied`). Never wait for the lock: this runs on a runtime
        // worker, and applying an announcement that creates thousands of logs
        // holds it for seconds. Waiting here blocked a worker for all that time,
        // the co-located controller and its quorum stalled behind it, and the
        // quorum moved to another voter: a 3,000-partition CreateTopics ended in
        // NOT_CONTROLLER, and its retry in TOPIC_ALREADY_EXISTS.
        let Some(_applied) = self.update.try_lock() else {
            return false;
        };
        let image = self.image.read();
        topics.iter().all(|t| {
            image.topics.get(t).is_some_and(|t| {
                !t.partitions.is_empty() && t.partitions.values().all(|p| p.leader != NO_LEADER)
            })
        })
    }

    /// The controller that sent the last applied announcement; -1 before any.
    pub(crate) fn controller_id(&self) -> i32 {
        self.image.read().controller_id
    }

    /// The controller epoch of the last applied announcement.
    pub(crate) fn controller_epoch(&self) -> i32 {
        self.image.read().controller_epoch
    }

    /// The metadata log offset the cache is up to.
    pub(crate) fn metadata_offset(&self) -> i64 {
        self.image.read().metadata_offset
    }

    /// Applies a LeaderAndIsr request. Partition states older than the cached ones are
    /// skipped; on a full sync every state is returned so the caller re-checks roles.
    pub(crate) fn apply(&self, req: &pb::LeaderAndIsrRequest) -> AppliedMetadata {
        let mut image = self.image.write();
        let mut applied = AppliedMetadata::default();
        image.controller_epoch = image.controller_epoch.max(req.controller_epoch);
        image.controller_id = req.controller_id;
        self.controller.send_if_modified(|c| {
            let changed = *c != req.controller_id;
            *c = req.controller_id;
            changed
        });
        image.metadata_offset = image.metadata_offset.max(req.metadata_offset);
        // The whole set, when it comes: it replaces what the cache has.
        if let Some(security) = &req.security {
            if req.metadata_offset >= image.security.offset {
                let next = Security::from_pb(security, req.metadata_offset);
                applied.security_changed = !next.same_contents(&image.security);
                image.security = next;
                self.security_known.send_replace(true);
            }
        }
        if let Some(quotas) = &req.client_quotas {
            if req.metadata_offset >= image.client_quotas.offset {
                match client_quotas::image_from_pb(quotas) {
                    Ok(quotas) => {
                        image.client_quotas = ClientQuotas {
                            offset: req.metadata_offset,
                            quotas: Arc::new(quotas),
                        }
                    }
                    // No controller announces one: the quotas in force stay.
                    Err(why) => {
                        tracing::warn!(%why, "ignored an invalid client quota image")
                    }
                }
            }
        }
        if req.full || !req.brokers.is_empty() {
            if req.full {
                image.brokers.clear();
            }
            for b in &req.brokers {
                if let Some(e) = &b.endpoint {
                    image.brokers.insert(e.node_id, b.clone());
                }
            }
        }
        for d in &req.deleted_topics {
            let same = image.topics.get(&d.name).is_some_and(|t| {
                same_topic(
                    TopicId::from_wire(t.topic_id),
                    TopicId::from_wire(d.topic_id),
                )
            });
            if same {
                image.topics.remove(&d.name);
            }
            applied.deleted.push((d.name.clone(), d.topic_id));
        }
        if req.full {
            let announced: HashMap<&str, i64> = req
                .topics
                .iter()
                .map(|t| (t.name.as_str(), t.topic_id))
                .collect();
            image.topics.retain(|name, t| {
                let keep = announced.get(name.as_str()).is_some_and(|&id| {
                    same_topic(TopicId::from_wire(id), TopicId::from_wire(t.topic_id))
                });
                if !keep {
                    applied.deleted.push((name.clone(), t.topic_id));
                }
                keep
            });
        }
        for t in &req.topics {
            let topic = image.topics.entry(t.name.clone()).or_default();
            Self::adopt_topic_id(topic, t.topic_id);
            if topic.configs != t.configs {
                topic.configs = t.configs.clone();
                applied.changed_configs.push(t.name.clone());
            }
        }
        for ps in &req.partition_states {
            let topic = image.topics.entry(ps.topic.clone()).or_default();
            Self::adopt_topic_id(topic, ps.topic_id);
            let epochs = |p: &pb::PartitionState| Epochs {
                leader_epoch: p.leader_epoch,
                partition_epoch: p.partition_epoch,
            };
            let known = topic.partitions.get(&ps.partition).map(epochs);
            // A full announcement restates every partition: a state with the
            // same epochs is taken again.
            let take = match freshness(epochs(ps), known) {
                Freshness::Newer => true,
                Freshness::Same => req.full,
                Freshness::Stale => false,
            };
            if take {
                topic.partitions.insert(ps.partition, ps.clone());
                applied.partitions.push(ps.clone());
            }
        }
        applied
    }

    /// A topic announced under another id than the cached one is a new topic of
    /// the same name (the old one was deleted): its partitions start over.
    fn adopt_topic_id(topic: &mut TopicImage, topic_id: i64) {
        match adopt(
            TopicId::from_wire(topic.topic_id),
            TopicId::from_wire(topic_id),
        ) {
            Adopt::Keep => {}
            Adopt::Learn => topic.topic_id = topic_id,
            Adopt::Replace => {
                topic.partitions.clear();
                topic.topic_id = topic_id;
            }
        }
    }

    /// `user`'s credential for `mechanism`, as announced (brokers' own `broker-N`
    /// credentials are not here: they come from the credentials directory).
    pub(crate) fn scram_verifier(&self, user: &str, mechanism: Mechanism) -> Option<Verifier> {
        self.image
            .read()
            .security
            .verifiers
            .get(&(user.to_owned(), mechanism))
            .cloned()
    }

    /// Whether `user` has a credential for any mechanism.
    pub(crate) fn user_exists(&self, user: &str) -> bool {
        self.image
            .read()
            .security
            .verifiers
            .keys()
            .any(|(name, _)| name == user)
    }

    /// Every ACL, as announced (shared: the set is replaced whole, never changed).
    pub(crate) fn acls(&self) -> Arc<Acls> {
        self.image.read().security.acls.clone()
    }

    /// DescribeUserScramCredentials: every user (sorted) when none is named, else
    /// each named user in order; RESOURCE_NOT_FOUND for one without credentials,
    /// DUPLICATE_RESOURCE for one named twice.
    pub(crate) fn describe_user_scram_credentials(
        &self,
        req: &pb::DescribeUserScramCredentialsRequest,
    ) -> pb::DescribeUserScramCredentialsResponse {
        let image = self.image.read();
        let mut users: BTreeMap<&str, Vec<pb::ScramCredentialInfo>> = BTreeMap::new();
        for ((name, mechanism), v) in &image.security.verifiers {
            users
                .entry(name.as_str())
                .or_default()
                .push(pb::ScramCredentialInfo {
                    mechanism: mechanism.name().to_owned(),
                    iterations: i32::try_from(v.iterations).unwrap_or(i32::MAX),
                });
        }
        for infos in users.values_mut() {
            infos.sort_by(|a, b| a.mechanism.cmp(&b.mechanism));
        }
        let describe =
            |user: &str, code: ErrorCode, message: String| pb::UserScramCredentialsDescription {
                user: user.to_owned(),
                error_code: code as i32,
                error_message: message,
                credentials: users.get(user).cloned().unwrap_or_default(),
            };
        let results = if req.users.is_empty() {
            users
                .keys()
                .map(|u| describe(u, ErrorCode::None, String::new()))
                .collect()
        } else {
            let mut counts: HashMap<&str, usize> = HashMap::new();
            for u in &req.users {
                *counts.entry(u.as_str()).or_default() += 1;
            }
            req.users
                .iter()
                .map(|u| {
                    if counts[u.as_str()] > 1 {
                        let mut d = describe(
                            u,
                            ErrorCode::DuplicateResource,
                            format!("user {u:?} is named more than once in the request: name it once"),
                        );
                        d.credentials.clear();
                        d
                    } else if users.contains_key(u.as_str()) {
                        describe(u, ErrorCode::None, String::new())
                    } else {
                        describe(
                            u,
                            ErrorCode::ResourceNotFound,
                            format!("user {u:?} has no SCRAM credentials (`syncline user create {u}` makes one)"),
                        )
                    }
                })
                .collect()
        };
        pb::DescribeUserScramCredentialsResponse {
            error_code: ErrorCode::None as i32,
            error_message: String::new(),
            results,
        }
    }

    /// The cluster's client quotas, with the metadata offset they were
    /// announced at (-1: none yet).
    pub(crate) fn client_quotas(&self) -> (i64, Arc<ClientQuotaMap>) {
        let image = self.image.read();
        (
            image.client_quotas.offset,
            image.client_quotas.quotas.clone(),
        )
    }

    /// DescribeAcls: the ACLs the filter selects (every ACL without a filter);
    /// INVALID_REQUEST, saying why, for an invalid filter.
    pub(crate) fn describe_acls(&self, req: &pb::DescribeAclsRequest) -> pb::DescribeAclsResponse {
        let filter = match req.filter.as_ref().map(AclFilter::from_pb) {
            None => AclFilter::any(),
            Some(Ok(f)) => f,
            Some(Err(e)) => {
                return pb::DescribeAclsResponse {
                    error_code: ErrorCode::InvalidRequest as i32,
                    error_message: format!("invalid ACL filter: {e}"),
                    acls: Vec::new(),
                }
            }
        };
        let acls = self.acls();
        pb::DescribeAclsResponse {
            error_code: ErrorCode::None as i32,
            error_message: String::new(),
            acls: acls.matching(&filter).map(AclBinding::to_pb).collect(),
        }
    }

    /// A topic's id, if the topic is known (0: announced without one).
    pub(crate) fn topic_id(&self, topic: &str) -> Option<i64> {
        self.image.read().topics.get(topic).map(|t| t.topic_id)
    }

    /// host:port of a broker.
    pub(crate) fn broker_address(&self, id: i32) -> Option<String> {
        let image = self.image.read();
        let e = image.brokers.get(&id)?.endpoint.as_ref()?;
        Some(format!("{}:{}", e.host, e.port))
    }

    /// Whether the controller would take `broker`, fetching in `broker_epoch`
    /// (when it named one), into an ISR (`syncline_replication::isr::eligible`).
    pub(crate) fn is_eligible(&self, broker: i32, broker_epoch: Option<i64>) -> bool {
        let image = self.image.read();
        let registration = image.brokers.get(&broker).map(|b| Registration {
            fenced: b.fenced,
            broker_epoch: b.broker_epoch,
        });
        isr::eligible(registration, broker_epoch)
    }

    /// A broker's rack, if it has one.
    pub(crate) fn broker_rack(&self, id: i32) -> Option<String> {
        let image = self.image.read();
        let rack = &image.brokers.get(&id)?.endpoint.as_ref()?.rack;
        (!rack.is_empty()).then(|| rack.clone())
    }

    /// The partitions of a topic (none when unknown or being deleted).
    pub(crate) fn partition_ids(&self, topic: &str) -> Vec<i32> {
        self.image
            .read()
            .topics
            .get(topic)
            .map(|t| t.partitions.keys().copied().collect())
            .unwrap_or_default()
    }

    /// The topics of `topics` that do not exist (or are being deleted), with
    /// valid names: what auto-creation would create.
    pub(crate) fn unknown_topics(&self, topics: &[String]) -> Vec<String> {
        let image = self.image.read();
        // Nothing announced yet: nothing is known to be missing either.
        if image.metadata_offset < 0 {
            return Vec::new();
        }
        let mut unknown: Vec<String> = topics
            .iter()
            .filter(|t| image.topics.get(*t).is_none_or(|t| t.partitions.is_empty()))
            .filter(|t| syncline_proto::validate_topic_name(t).is_ok())
            .cloned()
            .collect();
        unknown.sort();
        unknown.dedup();
        unknown
    }

    /// A topic's configs (empty when unknown).
    pub(crate) fn topic_configs(&self, topic: &str) -> HashMap<String, String> {
        self.image
            .read()
            .topics
            .get(topic)
            .map(|t| t.configs.clone())
            .unwrap_or_default()
    }

    /// A topic's `replica.lag.time.max.ms` override, if it has one (the
    /// controller validated it: a positive count of ms).
    pub(crate) fn replica_lag_time_override_ms(&self, topic: &str) -> Option<u64> {
        self.image
            .read()
            .topics
            .get(topic)?
            .configs
            .get(syncline_controller::REPLICA_LAG_TIME_MAX_MS)?
            .parse()
            .ok()
    }

    /// Whether `replica`'s replication of the partition is throttled
    /// (`syncline_replication::throttle::is_throttled`), as announced.
    pub(crate) fn is_throttled_replica(&self, topic: &str, partition: i32, replica: i32) -> bool {
        self.image
            .read()
            .topics
            .get(topic)
            .and_then(|t| t.partitions.get(&partition))
            .is_some_and(|p| {
                syncline_replication::throttle::is_throttled(replica, &p.adding_replicas, &p.isr)
            })
    }

    /// The partition's announced state.
    pub(crate) fn partition_state(
        &self,
        topic: &str,
        partition: i32,
    ) -> Option<pb::PartitionState> {
        self.image
            .read()
            .topics
            .get(topic)?
            .partitions
            .get(&partition)
            .cloned()
    }

    /// A broker's endpoint on `listener` (its inter-broker endpoint when it has no
    /// listener of that name).
    fn endpoint_on(b: &pb::BrokerInfo, listener: &str) -> Option<pb::BrokerEndpoint> {
        let base = b.endpoint.clone()?;
        Some(match b.listeners.iter().find(|l| l.name == listener) {
            Some(l) => pb::BrokerEndpoint {
                host: l.host.clone(),
                port: l.port,
                ..base
            },
            None => base,
        })
    }

    fn is_live(image: &Image, id: i32) -> bool {
        image.brokers.get(&id).is_some_and(|b| !b.fenced)
    }

    /// The Metadata response for a client on `listener`: unfenced brokers (their
    /// endpoints on that listener) and the requested topics (all when `topics` is
    /// empty). A broker that has had no announcement from the controller yet
    /// (just started) knows no topic: it answers LEADER_NOT_AVAILABLE, which a
    /// client retries, rather than UNKNOWN_TOPIC_OR_PARTITION, which would
    /// tell it a topic it uses is gone.
    pub(crate) fn metadata(&self, topics: Topics<'_>, listener: &str) -> pb::MetadataResponse {
        let image = self.image.read();
        let unknown = if image.metadata_offset < 0 {
            ErrorCode::LeaderNotAvailable
        } else {
            ErrorCode::UnknownTopicOrPartition
        };
        let brokers = image
            .brokers
            .values()
            .filter(|b| !b.fenced)
            .filter_map(|b| Self::endpoint_on(b, listener))
            .collect();
        let names: Vec<String> = match topics {
            Topics::Every => image.topics.keys().cloned().collect(),
            Topics::Named(names) => names.to_vec(),
            // Not one of the image's topics is looked at.
            Topics::NoTopic => Vec::new(),
        };
        let topics = names
            .into_iter()
            .map(|name| {
                #[cfg(test)]
                tests::TOPICS_DESCRIBED.with(|n| n.set(n.get() + 1));
                match image.topics.get(&name).filter(|t| !t.partitions.is_empty()) {
                    None => pb::TopicMetadata {
                        name,
                        error_code: unknown as i32,
                        partitions: vec![],
                        topic_id: 0,
                    },
                    Some(t) => pb::TopicMetadata {
                        name,
                        error_code: ErrorCode::None as i32,
                        topic_id: t.topic_id,
                        partitions: t
                            .partitions
                            .values()
                            .map(|ps| pb::PartitionMetadata {
                                partition: ps.partition,
                                error_code: if ps.leader == NO_LEADER {
                                    ErrorCode::LeaderNotAvailable as i32
                                } else {
                                    ErrorCode::None as i32
                                },
                                leader_id: ps.leader,
                                leader_epoch: ps.leader_epoch,
                                replicas: ps.replicas.clone(),
                                isr: ps.isr.clone(),
                                offline_replicas: ps
                                    .replicas
                                    .iter()
                                    .copied()
                                    .filter(|r| !Self::is_live(&image, *r))
                                    .collect(),
                            })
                            .collect(),
                    },
                }
            })
            .collect();
        pb::MetadataResponse {
            cluster_id: image.cluster_id.clone(),
            controller_id: image.controller_id,
            brokers,
            topics,
        }
    }

    /// DescribeTopics from the cluster's point of view (leader-only fields unset).
    pub(crate) fn describe_topics(&self, topics: &[String]) -> pb::DescribeTopicsResponse {
        let image = self.image.read();
        let names: Vec<String> = if topics.is_empty() {
            image.topics.keys().cloned().collect()
        } else {
            topics.to_vec()
        };
        pb::DescribeTopicsResponse {
            topics: names
                .into_iter()
                .map(
                    |name| match image.topics.get(&name).filter(|t| !t.partitions.is_empty()) {
                        None => pb::TopicDescription {
                            name,
                            error_code: ErrorCode::UnknownTopicOrPartition as i32,
                            ..Default::default()
                        },
                        Some(t) => pb::TopicDescription {
                            name,
                            error_code: ErrorCode::None as i32,
                            configs: t.configs.clone(),
                            partitions: t
                                .partitions
                                .values()
                                .map(|ps| pb::PartitionDescription {
                                    partition: ps.partition,
                                    error_code: ErrorCode::None as i32,
                                    leader_id: ps.leader,
                                    leader_epoch: ps.leader_epoch,
                                    partition_epoch: ps.partition_epoch,
                                    replicas: ps.replicas.clone(),
                                    isr: ps.isr.clone(),
                                    adding_replicas: ps.adding_replicas.clone(),
                                    removing_replicas: ps.removing_replicas.clone(),
                                    ..Default::default()
                                })
                                .collect(),
                        },
                    },
                )
                .collect(),
        }
    }

    /// DescribeCluster for a client on `listener`: every registered broker.
    pub(crate) fn describe_cluster(&self, listener: &str) -> pb::DescribeClusterResponse {
        let image = self.image.read();
        let mut loads: BTreeMap<i32, pb::BrokerLoad> = image
            .brokers
            .keys()
            .map(|&id| {
                let load = pb::BrokerLoad {
                    broker_id: id,
                    ..Default::default()
                };
                (id, load)
            })
            .collect();
        for ps in image.topics.values().flat_map(|t| t.partitions.values()) {
            for r in &ps.replicas {
                if let Some(l) = loads.get_mut(r) {
                    l.partitions += 1;
                }
            }
            if let Some(l) = loads.get_mut(&ps.leader) {
                l.leaders += 1;
            }
            if let Some(l) = ps.replicas.first().and_then(|r| loads.get_mut(r)) {
                l.preferred_leaders += 1;
            }
        }
        pb::DescribeClusterResponse {
            loads: loads.into_values().collect(),
            error_code: ErrorCode::None as i32,
            cluster_id: image.cluster_id.clone(),
            controller_id: image.controller_id,
            brokers: image
                .brokers
                .values()
                .map(|b| pb::BrokerInfo {
                    endpoint: Self::endpoint_on(b, listener),
                    ..b.clone()
                })
                .collect(),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    thread_local! {
        /// The topics [`MetadataCache::metadata`] described on this thread.
        pub(super) static TOPICS_DESCRIBED: std::cell::Cell<usize> = const { std::cell::Cell::new(0) };
    }

    fn ps(
        partition: i32,
        leader: i32,
        leader_epoch: i32,
        partition_epoch: i32,
    ) -> pb::PartitionState {
        pb::PartitionState {
            topic: "t".into(),
            partition,
            leader,
            leader_epoch,
            isr: vec![leader],
            partition_epoch,
            replicas: vec![1, 2, 3],
            ..Default::default()
        }
    }

    fn req(states: Vec<pb::PartitionState>, full: bool) -> pb::LeaderAndIsrRequest {
        pb::LeaderAndIsrRequest {
            controller_id: 1,
            controller_epoch: 1,
            metadata_offset: 10,
            full,
            partition_states: states,
            brokers: (1..=3)
                .map(|id| pb::BrokerInfo {
                    endpoint: Some(pb::BrokerEndpoint {
                        node_id: id,
                        host: "127.0.0.1".into(),
                        port: 9090 + id,
                        rack: String::new(),
                    }),
                    broker_epoch: id as i64,
                    fenced: id == 3,
                    metrics_address: String::new(),
                    listeners: vec![pb::ListenerEndpoint {
                        name: "EXTERNAL".into(),
                        host: "public".into(),
                        port: 19_090 + id,
                    }],
                })
                .collect(),
            ..Default::default()
        }
    }

    // The guard held across the waits stands for an apply in progress.
    #[allow(clippy::await_holding_lock)]
    #[tokio::test(start_paused = true)]
    async fn waiting_for_leaders_never_blocks_behind_an_announcement_being_applied() {
        let c = MetadataCache::new("c");
        c.apply(&req(vec![ps(0, 1, 1, 1)], false));
        let topics = ["t".to_string()];
        // Applying: the wait counts the topic as not led yet, and returns at its
        // deadline (it used to wait for the lock, here for ever).
        let applying = c.lock_for_update();
        let wait = Duration::from_millis(100);
        assert!(!c.wait_for_leaders(&topics, wait).await);
        drop(applying);
        assert!(c.wait_for_leaders(&topics, wait).await);
        // A wait that began during an apply sees its end: the join polls the
        // wait first (it finds the apply in progress and waits for news), then
        // ends the apply.
        let applying = c.lock_for_update();
        let (waited, ()) = tokio::join!(
            c.wait_for_leaders(&topics, Duration::from_secs(60)),
            async {
                drop(applying);
                c.notify_applied();
            }
        );
        assert!(waited);
    }

    #[test]
    fn stale_states_are_skipped_and_newer_ones_applied() {
        let c = MetadataCache::new("c");
        assert_eq!(
            c.apply(&req(vec![ps(0, 1, 2, 5)], false)).partitions.len(),
            1
        );
        assert!(c
            .apply(&req(vec![ps(0, 2, 1, 4)], false))
            .partitions
            .is_empty());
        assert_eq!(c.partition_state("t", 0).unwrap().leader, 1);
        assert_eq!(
            c.apply(&req(vec![ps(0, 2, 3, 6)], false)).partitions.len(),
            1
        );
        assert_eq!(c.partition_state("t", 0).unwrap().leader, 2);
        // A full sync repeats current states so roles are re-checked.
        assert_eq!(
            c.apply(&req(vec![ps(0, 2, 3, 6)], true)).partitions.len(),
            1
        );
    }

    fn with_id(mut p: pb::PartitionState, topic_id: i64) -> pb::PartitionState {
        p.topic_id = topic_id;
        p
    }

    #[test]
    fn a_deleted_topic_goes_and_a_new_one_of_the_same_name_starts_over() {
        let c = MetadataCache::new("c");
        c.apply(&req(vec![with_id(ps(0, 1, 4, 6), 5)], false));
        let mut delete = req(vec![], false);
        delete.deleted_topics = vec![pb::DeletedTopic {
            name: "t".into(),
            topic_id: 5,
        }];
        let applied = c.apply(&delete);
        assert_eq!(applied.deleted, vec![("t".to_string(), 5)]);
        assert!(c.partition_state("t", 0).is_none());
        assert_eq!(c.topic_id("t"), None);
        // Created again: epochs start at 0 and are taken.
        let applied = c.apply(&req(vec![with_id(ps(0, 2, 0, 0), 9)], false));
        assert_eq!(applied.partitions.len(), 1);
        assert_eq!(c.partition_state("t", 0).unwrap().leader, 2);
        // Clients learn the new id with the topic: their leader epochs of the
        // old one do not apply.
        assert_eq!(c.metadata(Topics::Every, "PLAINTEXT").topics[0].topic_id, 9);
        // A broker that missed the deletion: another topic id is a new topic too.
        let applied = c.apply(&req(vec![with_id(ps(0, 3, 0, 0), 12)], false));
        assert_eq!(applied.partitions.len(), 1);
        assert_eq!(
            (c.partition_state("t", 0).unwrap().leader, c.topic_id("t")),
            (3, Some(12))
        );
        // A full sync without the topic drops it.
        let mut full = req(vec![], true);
        full.topics = vec![];
        let applied = c.apply(&full);
        assert_eq!(applied.deleted, vec![("t".to_string(), 12)]);
        assert!(c.partition_state("t", 0).is_none());
    }

    fn credential(name: &str, mechanism: Mechanism) -> pb::ScramCredential {
        syncline_controller::credential_of(
            name,
            &Verifier {
                mechanism,
                salt: vec![1; 8],
                iterations: 4096,
                stored_key: vec![
                    2;
                    if mechanism == Mechanism::ScramSha256 {
                        32
                    } else {
                        64
                    }
                ],
                server_key: vec![
                    3;
                    if mechanism == Mechanism::ScramSha256 {
                        32
                    } else {
                        64
                    }
                ],
            },
        )
    }

    fn read_acl(principal: &str) -> pb::AclBinding {
        pb::AclBinding {
            resource_type: 2,
            resource_name: "orders".into(),
            pattern_type: 3,
            principal: principal.into(),
            host: "*".into(),
            operation: 3,
            permission_type: 3,
        }
    }

    fn with_security(offset: i64, security: Option<pb::SecurityImage>) -> pb::LeaderAndIsrRequest {
        pb::LeaderAndIsrRequest {
            metadata_offset: offset,
            security,
            ..req(vec![], false)
        }
    }

    #[test]
    fn the_client_quota_image_is_replaced_whole_by_newer_announcements_only() {
        let image = |client_id: &str, value: f64| pb::ClientQuotaImage {
            entries: vec![pb::ClientQuotaEntry {
                entity: vec![pb::ClientQuotaEntityComponent {
                    entity_type: "client-id".into(),
                    entity_name: Some(client_id.into()),
                }],
                values: vec![pb::ClientQuotaValue {
                    key: "producer_byte_rate".into(),
                    value,
                }],
            }],
        };
        let with = |offset: i64, quotas: Option<pb::ClientQuotaImage>| pb::LeaderAndIsrRequest {
            metadata_offset: offset,
            client_quotas: quotas,
            ..req(vec![], false)
        };
        let c = MetadataCache::new("c");
        assert_eq!(c.client_quotas().0, -1);
        c.apply(&with(10, Some(image("a", 1024.0))));
        let names = |c: &MetadataCache| -> Vec<String> {
            c.client_quotas().1.keys().map(|e| e.to_string()).collect()
        };
        assert_eq!(names(&c), vec!["client-id \"a\""]);
        // Absent: kept; older: ignored; invalid (no controller sends one): ignored.
        c.apply(&with(11, None));
        c.apply(&with(9, Some(image("b", 1024.0))));
        c.apply(&with(12, Some(image("b", -1.0))));
        assert_eq!(names(&c), vec!["client-id \"a\""]);
        assert_eq!(c.client_quotas().0, 10);
        // Newer: replaces the whole set.
        c.apply(&with(13, Some(image("b", 2048.0))));
        assert_eq!(names(&c), vec!["client-id \"b\""]);
    }

    #[test]
    fn the_security_image_is_replaced_whole_when_announced_and_kept_otherwise() {
        let c = MetadataCache::new("c");
        assert!(!c.user_exists("alice") && c.acls().is_empty());
        let image = pb::SecurityImage {
            credentials: vec![
                credential("alice", Mechanism::ScramSha256),
                credential("alice", Mechanism::ScramSha512),
                credential("bob", Mechanism::ScramSha256),
            ],
            acls: vec![read_acl("User:alice")],
        };
        assert!(
            c.apply(&with_security(10, Some(image.clone())))
                .security_changed
        );
        assert!(c.user_exists("alice") && c.user_exists("bob") && !c.user_exists("carol"));
        let v = c.scram_verifier("alice", Mechanism::ScramSha512).unwrap();
        assert_eq!((v.mechanism, v.iterations), (Mechanism::ScramSha512, 4096));
        assert!(c.scram_verifier("bob", Mechanism::ScramSha512).is_none());
        assert_eq!(c.acls().len(), 1);

        // Absent: kept. The same again: nothing changed.
        assert!(!c.apply(&with_security(11, None)).security_changed);
        assert!(c.user_exists("bob"));
        assert!(
            !c.apply(&with_security(11, Some(image.clone())))
                .security_changed
        );

        // Replaced: bob is gone, the ACLs too.
        let smaller = pb::SecurityImage {
            credentials: vec![credential("alice", Mechanism::ScramSha256)],
            acls: vec![],
        };
        assert!(c.apply(&with_security(12, Some(smaller))).security_changed);
        assert!(!c.user_exists("bob") && c.acls().is_empty());
        assert!(c.scram_verifier("alice", Mechanism::ScramSha512).is_none());

        // An older announcement (sent before the last one) does not bring bob back.
        assert!(!c.apply(&with_security(11, Some(image))).security_changed);
        assert!(!c.user_exists("bob"));
    }

    #[test]
    fn users_and_acls_are_described_from_the_cache() {
        let c = MetadataCache::new("c");
        c.apply(&with_security(
            3,
            Some(pb::SecurityImage {
                credentials: vec![
                    credential("bob", Mechanism::ScramSha512),
                    credential("alice", Mechanism::ScramSha256),
                ],
                acls: vec![read_acl("User:alice"), read_acl("User:bob")],
            }),
        ));
        let all = c.describe_user_scram_credentials(&Default::default());
        let users: Vec<(&str, Vec<&str>)> = all
            .results
            .iter()
            .map(|r| {
                (
                    r.user.as_str(),
                    r.credentials.iter().map(|i| i.mechanism.as_str()).collect(),
                )
            })
            .collect();
        assert_eq!(
            users,
            vec![
                ("alice", vec!["SCRAM-SHA-256"]),
                ("bob", vec!["SCRAM-SHA-512"])
            ]
        );
        let named = c.describe_user_scram_credentials(&pb::DescribeUserScramCredentialsRequest {
            users: vec![
                "bob".into(),
                "nobody".into(),
                "alice".into(),
                "alice".into(),
            ],
        });
        let codes: Vec<ErrorCode> = named
            .results
            .iter()
            .map(|r| ErrorCode::from_wire(r.error_code))
            .collect();
        assert_eq!(
            codes,
            vec![
                ErrorCode::None,
                ErrorCode::ResourceNotFound,
                ErrorCode::DuplicateResource,
                ErrorCode::DuplicateResource
            ]
        );
        assert!(named.results[1]
            .error_message
            .contains("syncline user create nobody"));

        assert_eq!(c.describe_acls(&Default::default()).acls.len(), 2);
        let bob = c.describe_acls(&pb::DescribeAclsRequest {
            filter: Some(pb::AclBindingFilter {
                resource_type: 1,
                pattern_type: 1,
                principal: "User:bob".into(),
                operation: 1,
                permission_type: 1,
                ..Default::default()
            }),
        });
        assert_eq!(bob.acls, vec![read_acl("User:bob")]);
        let bad = c.describe_acls(&pb::DescribeAclsRequest {
            filter: Some(pb::AclBindingFilter::default()),
        });
        assert_eq!(
            ErrorCode::from_wire(bad.error_code),
            ErrorCode::InvalidRequest
        );
    }

    #[test]
    fn describe_cluster_counts_each_brokers_replicas_leaderships_and_preferred_ones() {
        let c = MetadataCache::new("c");
        // Replicas [1, 2, 3] everywhere (1 preferred); 1 leads partition 0, 2 leads
        // 1 and 2, partition 3 is offline.
        c.apply(&req(
            vec![
                ps(0, 1, 0, 0),
                ps(1, 2, 1, 1),
                ps(2, 2, 1, 1),
                ps(3, -1, 1, 1),
            ],
            true,
        ));
        let loads: Vec<(i32, i32, i32, i32)> = c
            .describe_cluster("EXTERNAL")
            .loads
            .iter()
            .map(|l| (l.broker_id, l.partitions, l.leaders, l.preferred_leaders))
            .collect();
        assert_eq!(loads, vec![(1, 4, 1, 4), (2, 4, 2, 0), (3, 4, 0, 0)]);
    }

    #[test]
    fn a_broker_with_no_announcement_yet_does_not_call_topics_unknown() {
        let c = MetadataCache::new("c");
        let before = c.metadata(Topics::Named(&["t".into()]), "PLAINTEXT");
        assert_eq!(
            before.topics[0].error_code,
            ErrorCode::LeaderNotAvailable as i32
        );
        assert!(
            c.unknown_topics(&["t".into()]).is_empty(),
            "not auto-created"
        );
        c.apply(&req(vec![ps(0, 1, 0, 0)], true));
        let after = c.metadata(Topics::Named(&["t".into(), "nope".into()]), "PLAINTEXT");
        assert_eq!(after.topics[0].error_code, ErrorCode::None as i32);
        assert_eq!(
            after.topics[1].error_code,
            ErrorCode::UnknownTopicOrPartition as i32
        );
    }

    #[test]
    fn a_metadata_request_for_no_topic_looks_at_none_of_ten_thousand() {
        let c = MetadataCache::new("c");
        let states: Vec<pb::PartitionState> = (0..10_000)
            .map(|i| pb::PartitionState {
                topic: format!("t{i}"),
                ..ps(0, 1, 0, 0)
            })
            .collect();
        c.apply(&req(states, true));
        let described = |r: pb::MetadataRequest| {
            TOPICS_DESCRIBED.with(|n| n.set(0));
            let m = c.metadata(Topics::of(&r), "PLAINTEXT");
            (m.topics.len(), TOPICS_DESCRIBED.with(|n| n.get()), m)
        };
        let (answered, looked_at, m) = described(pb::MetadataRequest {
            no_topics: true,
            ..Default::default()
        });
        assert_eq!((answered, looked_at), (0, 0));
        assert_eq!(m.brokers.len(), 2);
        assert_eq!(m.controller_id, 1);
        // Every topic, and one, for comparison.
        let (answered, looked_at, _) = described(pb::MetadataRequest::default());
        assert_eq!((answered, looked_at), (10_000, 10_000));
        let (answered, looked_at, _) = described(pb::MetadataRequest {
            topics: vec!["t7".into()],
            no_topics: true,
            ..Default::default()
        });
        assert_eq!((answered, looked_at), (1, 1));
    }

    #[test]
    fn metadata_lists_unfenced_brokers_and_offline_replicas() {
        let c = MetadataCache::new("c");
        c.apply(&req(vec![ps(0, 1, 0, 0), ps(1, -1, 0, 0)], true));
        let m = c.metadata(Topics::Every, "PLAINTEXT");
        assert_eq!(
            m.brokers.iter().map(|b| b.node_id).collect::<Vec<_>>(),
            vec![1, 2]
        );
        let t = &m.topics[0];
        assert_eq!(t.partitions[0].offline_replicas, vec![3]);
        assert_eq!(
            t.partitions[1].error_code,
            ErrorCode::LeaderNotAvailable as i32
        );
        let unknown = c.metadata(Topics::Named(&["nope".into()]), "PLAINTEXT");
        assert_eq!(
            unknown.topics[0].error_code,
            ErrorCode::UnknownTopicOrPartition as i32
        );
        assert_eq!(c.broker_address(2).as_deref(), Some("127.0.0.1:9092"));
        // Clients on the EXTERNAL listener get the EXTERNAL endpoints.
        let ext = c.metadata(Topics::Every, "EXTERNAL");
        assert_eq!(
            (ext.brokers[1].host.as_str(), ext.brokers[1].port),
            ("public", 19_092)
        );
        let cluster = c.describe_cluster("EXTERNAL");
        assert_eq!(cluster.brokers[2].endpoint.as_ref().unwrap().port, 19_093);
    }
}
