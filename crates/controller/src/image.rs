//! The metadata image: the cluster state that replaying the metadata log produces.
//!
//! [`MetadataImage::apply`] is the only way it changes, so a controller that restarts
//! and replays its log (or a standby that follows it) ends up with exactly the image
//! the previous controller had. Each record is checked before it is applied; a record
//! that would break an invariant is refused and leaves the image untouched, so
//! [`MetadataImage::check_invariants`] (asserted after every apply in debug builds)
//! holds whatever the log contains.

use std::collections::{BTreeMap, BTreeSet};

use bytes::Bytes;
use syncline_auth::acl::AclBinding;
use syncline_auth::Mechanism;
use syncline_proto::pb::{self, metadata_record::Record};
use syncline_proto::NO_LEADER;

use syncline_proto::TopicPartition;

use crate::client_quotas::{self, ClientQuotaEntity, ClientQuotaMap, QuotaKey, QuotaValues};
use crate::controller::check_credential;

/// A registered broker as the metadata log describes it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct BrokerRegistration {
    /// The broker's node id.
    pub broker_id: i32,
    /// The metadata offset of its `RegisterBrokerRecord` (KRaft's broker epoch).
    pub epoch: i64,
    /// Random per broker process start.
    pub incarnation_id: Bytes,
    /// Where clients and other brokers reach it (`node_id` = `broker_id`).
    pub endpoint: pb::BrokerEndpoint,
    /// host:port of its Prometheus endpoint, empty when disabled.
    pub metrics_address: String,
    /// Every advertised listener (clients get the one they connected through).
    pub listeners: Vec<pb::ListenerEndpoint>,
    /// Fenced brokers lead nothing and may not join an ISR.
    pub fenced: bool,
}

impl BrokerRegistration {
    /// The broker's rack, `None` when it has none.
    pub fn rack(&self) -> Option<&str> {
        Some(self.endpoint.rack.as_str()).filter(|r| !r.is_empty())
    }

    /// The broker as `DescribeCluster` and `LeaderAndIsr` describe it.
    pub fn to_info(&self) -> pb::BrokerInfo {
        pb::BrokerInfo {
            endpoint: Some(self.endpoint.clone()),
            broker_epoch: self.epoch,
            fenced: self.fenced,
            metrics_address: self.metrics_address.clone(),
            listeners: self.listeners.clone(),
        }
    }
}

/// The committed state of one partition.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PartitionRegistration {
    /// The assignment, in preference order (the first replica is the preferred leader).
    pub replicas: Vec<i32>,
    /// The in-sync replicas, kept in assignment order. Never empty.
    pub isr: Vec<i32>,
    /// [`NO_LEADER`] while the partition is offline.
    pub leader: i32,
    /// Bumped by every leader change.
    pub leader_epoch: i32,
    /// Bumped by every change.
    pub partition_epoch: i32,
    /// A reassignment in progress (KIP-455): the replicas joining. `replicas` is then
    /// the target followed by the leaving replicas.
    pub adding_replicas: Vec<i32>,
    /// The replicas leaving once every target replica is in the ISR.
    pub removing_replicas: Vec<i32>,
}

impl PartitionRegistration {
    /// Whether the partition has a leader.
    pub fn is_online(&self) -> bool {
        self.leader != NO_LEADER
    }

    /// A reassignment is in progress.
    pub fn is_reassigning(&self) -> bool {
        !self.adding_replicas.is_empty() || !self.removing_replicas.is_empty()
    }

    /// Where a reassignment in progress goes (the replicas without the leaving
    /// ones), or the replicas when none is.
    pub fn target_replicas(&self) -> Vec<i32> {
        self.replicas
            .iter()
            .copied()
            .filter(|r| !self.removing_replicas.contains(r))
            .collect()
    }

    /// Where cancelling a reassignment in progress goes back to (the replicas
    /// without the joining ones), or the replicas when none is.
    pub fn original_replicas(&self) -> Vec<i32> {
        self.replicas
            .iter()
            .copied()
            .filter(|r| !self.adding_replicas.contains(r))
            .collect()
    }

    /// The partition as `LeaderAndIsr` announces it.
    pub fn to_state(&self, topic: &str, partition: i32, topic_id: i64) -> pb::PartitionState {
        pb::PartitionState {
            topic_id,
            topic: topic.to_owned(),
            partition,
            leader: self.leader,
            leader_epoch: self.leader_epoch,
            isr: self.isr.clone(),
            partition_epoch: self.partition_epoch,
            replicas: self.replicas.clone(),
            adding_replicas: self.adding_replicas.clone(),
            removing_replicas: self.removing_replicas.clone(),
        }
    }

    /// Why this state is not a valid partition state, if it is not: leader ∈ ISR ⊆
    /// replicas (unless offline), ISR non-empty, no duplicates, epochs non-negative.
    fn shape_error(&self) -> Option<&'static str> {
        if self.replicas.is_empty() {
            return Some("no replicas");
        }
        if has_duplicates(&self.replicas) {
            return Some("duplicate replicas");
        }
        if self.isr.is_empty() {
            return Some("empty ISR");
        }
        if has_duplicates(&self.isr) {
            return Some("duplicate ISR members");
        }
        if !self.isr.iter().all(|r| self.replicas.contains(r)) {
            return Some("ISR is not a subset of the replicas");
        }
        if self.leader != NO_LEADER && !self.isr.contains(&self.leader) {
            return Some("leader is not in the ISR");
        }
        if self.leader_epoch < 0 || self.partition_epoch < 0 {
            return Some("negative epoch");
        }
        let within = |ids: &[i32]| ids.iter().all(|r| self.replicas.contains(r));
        if has_duplicates(&self.adding_replicas) || has_duplicates(&self.removing_replicas) {
            return Some("duplicate adding or removing replicas");
        }
        if !within(&self.adding_replicas) || !within(&self.removing_replicas) {
            return Some("adding or removing replicas are not within the replicas");
        }
        if self
            .adding_replicas
            .iter()
            .any(|r| self.removing_replicas.contains(r))
        {
            return Some("a replica is both adding and removing");
        }
        if self.is_reassigning() && self.target_replicas().is_empty() {
            return Some("a reassignment with no target replica");
        }
        None
    }
}

fn invalid_security(why: impl Into<String>) -> ApplyError {
    ApplyError::InvalidSecurityRecord(why.into())
}

/// The ACL of an ACL record, validated.
fn acl_of(acl: Option<&pb::AclBinding>) -> Result<AclBinding, ApplyError> {
    let acl = acl.ok_or_else(|| invalid_security("an ACL record without an ACL"))?;
    AclBinding::from_pb(acl).map_err(|e| invalid_security(format!("invalid ACL: {e}")))
}

fn has_duplicates(ids: &[i32]) -> bool {
    ids.iter().collect::<BTreeSet<_>>().len() != ids.len()
}

/// A topic: its config overrides and its partitions (index = partition id).
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct TopicImage {
    /// The offset of its `TopicRecord`: unique over the log's history, so it tells
    /// this topic from a deleted one of the same name (Kafka's topic id). 0 in a
    /// snapshot written before topic ids existed: unknown.
    pub topic_id: i64,
    /// Explicit overrides only (canonical values); defaults come from configuration.
    pub configs: BTreeMap<String, String>,
    /// Partition `i` is at index `i`.
    pub partitions: Vec<PartitionRegistration>,
}

/// A record the image refused. The shell appended it (or read it from the log), so
/// this is a bug or a damaged log: the controller must stop rather than diverge.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ApplyError {
    /// Records must be applied at consecutive offsets.
    #[error("record at offset {got}, but the next offset is {expected}")]
    OffsetOutOfOrder {
        /// The offset the image expected.
        expected: i64,
        /// The offset it was given.
        got: i64,
    },
    /// Producer id blocks only move forward: none is given out twice.
    #[error("producer ids up to {got} were already given out (next is {current})")]
    StaleProducerIds {
        /// The image's next producer id.
        current: i64,
        /// The record's.
        got: i64,
    },
    /// A `MetadataRecord` with no record set.
    #[error("empty metadata record at offset {0}")]
    EmptyRecord(i64),
    /// Controller epochs only move forward.
    #[error("controller epoch {got} is not above the current {current}")]
    StaleControllerEpoch {
        /// The image's epoch.
        current: i32,
        /// The record's epoch.
        got: i32,
    },
    /// A `RegisterBrokerRecord` whose broker epoch is not its own offset, or with no
    /// endpoint.
    #[error("invalid registration of broker {broker_id}: {reason}")]
    InvalidRegistration {
        /// The broker.
        broker_id: i32,
        /// What is wrong.
        reason: &'static str,
    },
    /// A fence/unfence record for a broker that is not registered with that epoch.
    #[error("broker {broker_id} with epoch {epoch} is not registered")]
    UnknownBroker {
        /// The broker.
        broker_id: i32,
        /// The epoch in the record.
        epoch: i64,
    },
    /// A `FenceBrokerRecord` for a broker that still leads partitions (their records
    /// must come first).
    #[error("broker {0} cannot be fenced while it leads partitions")]
    FencingLeader(i32),
    /// A `TopicRecord` for a topic that exists.
    #[error("topic {0} already exists")]
    TopicExists(String),
    /// A `TopicConfigRecord` for a topic that does not exist.
    #[error("topic {0} does not exist")]
    UnknownTopic(String),
    /// A user or ACL record that cannot be applied: an invalid credential or ACL, a
    /// credential or ACL removed that is not there, an ACL added twice.
    #[error("invalid user or ACL record: {0}")]
    InvalidSecurityRecord(String),
    /// A client quota record that cannot be applied: an invalid entity, key or
    /// value, or a quota removed that is not there.
    #[error("invalid client quota record: {0}")]
    InvalidClientQuota(String),
    /// A `PartitionRecord` that cannot be applied.
    #[error("invalid record for partition {partition}: {reason}")]
    InvalidPartition {
        /// The partition.
        partition: TopicPartition,
        /// What is wrong.
        reason: &'static str,
    },
}

/// Why [`MetadataImage::check_invariants`] failed.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("metadata invariant violated: {0}")]
pub struct InvariantViolation(pub String);

/// Why [`MetadataImage::from_snapshot`] refused a snapshot.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("invalid metadata snapshot: {0}")]
pub struct InvalidSnapshot(pub String);

/// Everything the metadata log says about the cluster.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct MetadataImage {
    controller_id: i32,
    controller_epoch: i32,
    brokers: BTreeMap<i32, BrokerRegistration>,
    topics: BTreeMap<String, TopicImage>,
    last_applied_offset: i64,
    unclean_elections_total: u64,
    /// The first producer id not given out yet.
    next_producer_id: i64,
    /// User credentials by (name, mechanism name).
    credentials: BTreeMap<(String, String), pb::ScramCredential>,
    /// Every ACL.
    acls: BTreeSet<AclBinding>,
    /// A user credential was ever set or removed: the bootstrap users are not
    /// added again.
    users_initialized: bool,
    /// Client quotas by entity; an entity without a quota is not kept.
    client_quotas: ClientQuotaMap,
}

impl Default for MetadataImage {
    fn default() -> Self {
        Self::new()
    }
}

impl MetadataImage {
    /// The image of an empty log.
    pub fn new() -> Self {
        MetadataImage {
            controller_id: -1,
            controller_epoch: 0,
            brokers: BTreeMap::new(),
            topics: BTreeMap::new(),
            last_applied_offset: -1,
            unclean_elections_total: 0,
            next_producer_id: 0,
            credentials: BTreeMap::new(),
            acls: BTreeSet::new(),
            users_initialized: false,
            client_quotas: ClientQuotaMap::new(),
        }
    }

    /// Applies the record at `offset`, which must be [`next_offset`](Self::next_offset).
    /// On error nothing changes.
    pub fn apply(&mut self, offset: i64, record: &pb::MetadataRecord) -> Result<(), ApplyError> {
        let expected = self.next_offset();
        if offset != expected {
            return Err(ApplyError::OffsetOutOfOrder {
                expected,
                got: offset,
            });
        }
        match record
            .record
            .as_ref()
            .ok_or(ApplyError::EmptyRecord(offset))?
        {
            Record::ControllerStart(r) => self.apply_controller_start(r)?,
            Record::RegisterBroker(r) => self.apply_register_broker(offset, r)?,
            Record::FenceBroker(r) => self.set_fenced(r.broker_id, r.broker_epoch, true)?,
            Record::UnfenceBroker(r) => self.set_fenced(r.broker_id, r.broker_epoch, false)?,
            Record::Topic(r) => self.apply_topic(offset, r)?,
            Record::RemoveTopic(r) => self.apply_remove_topic(r)?,
            Record::Partition(r) => self.apply_partition(r)?,
            Record::TopicConfig(r) => self.apply_topic_config(r)?,
            Record::ProducerIds(r) => self.apply_producer_ids(r)?,
            Record::UserScramCredential(r) => self.apply_user_scram_credential(r)?,
            Record::RemoveUserScramCredential(r) => self.apply_remove_user_scram_credential(r)?,
            Record::Acl(r) => self.apply_acl(r)?,
            Record::RemoveAcl(r) => self.apply_remove_acl(r)?,
            Record::ClientQuota(r) => self.apply_client_quota(r)?,
        }
        self.last_applied_offset = offset;
        debug_assert_eq!(self.check_invariants(), Ok(()));
        Ok(())
    }

    fn apply_controller_start(&mut self, r: &pb::ControllerStartRecord) -> Result<(), ApplyError> {
        if r.controller_epoch <= self.controller_epoch {
            return Err(ApplyError::StaleControllerEpoch {
                current: self.controller_epoch,
                got: r.controller_epoch,
            });
        }
        self.controller_id = r.controller_id;
        self.controller_epoch = r.controller_epoch;
        Ok(())
    }

    fn apply_register_broker(
        &mut self,
        offset: i64,
        r: &pb::RegisterBrokerRecord,
    ) -> Result<(), ApplyError> {
        let invalid = |reason| ApplyError::InvalidRegistration {
            broker_id: r.broker_id,
            reason,
        };
        if r.broker_epoch != offset {
            return Err(invalid("broker epoch is not the record's offset"));
        }
        if r.broker_id < 0 {
            return Err(invalid("negative broker id"));
        }
        let Some(endpoint) = r.endpoint.clone() else {
            return Err(invalid("no endpoint"));
        };
        // The previous incarnation's leaderships must have moved first: the new one
        // starts fenced, and fenced brokers lead nothing.
        if self.leads_any(r.broker_id) {
            return Err(invalid("the previous incarnation still leads partitions"));
        }
        // A new incarnation replaces the old registration; it starts fenced and is
        // unfenced once it has caught up with the metadata log.
        self.brokers.insert(
            r.broker_id,
            BrokerRegistration {
                broker_id: r.broker_id,
                epoch: r.broker_epoch,
                incarnation_id: r.incarnation_id.clone(),
                endpoint: pb::BrokerEndpoint {
                    node_id: r.broker_id,
                    ..endpoint
                },
                metrics_address: r.metrics_address.clone(),
                listeners: r.listeners.clone(),
                fenced: true,
            },
        );
        Ok(())
    }

    fn set_fenced(&mut self, broker_id: i32, epoch: i64, fenced: bool) -> Result<(), ApplyError> {
        if fenced && self.leads_any(broker_id) {
            return Err(ApplyError::FencingLeader(broker_id));
        }
        match self.brokers.get_mut(&broker_id) {
            Some(b) if b.epoch == epoch => {
                b.fenced = fenced;
                Ok(())
            }
            _ => Err(ApplyError::UnknownBroker { broker_id, epoch }),
        }
    }

    fn apply_remove_topic(&mut self, r: &pb::RemoveTopicRecord) -> Result<(), ApplyError> {
        match self.topics.get(&r.name) {
            Some(t) if t.topic_id == r.topic_id => {
                self.topics.remove(&r.name);
                Ok(())
            }
            _ => Err(ApplyError::UnknownTopic(r.name.clone())),
        }
    }

    fn apply_topic(&mut self, offset: i64, r: &pb::TopicRecord) -> Result<(), ApplyError> {
        if self.topics.contains_key(&r.name) {
            return Err(ApplyError::TopicExists(r.name.clone()));
        }
        let configs = r
            .configs
            .iter()
            .map(|(k, v)| (k.clone(), v.clone()))
            .collect();
        self.topics.insert(
            r.name.clone(),
            TopicImage {
                topic_id: offset,
                configs,
                partitions: Vec::new(),
            },
        );
        Ok(())
    }

    fn apply_producer_ids(&mut self, r: &pb::ProducerIdsRecord) -> Result<(), ApplyError> {
        if r.next_producer_id <= self.next_producer_id {
            return Err(ApplyError::StaleProducerIds {
                current: self.next_producer_id,
                got: r.next_producer_id,
            });
        }
        self.next_producer_id = r.next_producer_id;
        Ok(())
    }

    /// The first producer id not given out yet.
    pub fn next_producer_id(&self) -> i64 {
        self.next_producer_id
    }

    fn apply_user_scram_credential(
        &mut self,
        r: &pb::UserScramCredentialRecord,
    ) -> Result<(), ApplyError> {
        let Some(c) = &r.credential else {
            return Err(invalid_security("a user record without a credential"));
        };
        check_credential(c).map_err(|(_, why)| invalid_security(why))?;
        self.credentials
            .insert((c.name.clone(), c.mechanism.clone()), c.clone());
        self.users_initialized = true;
        Ok(())
    }

    fn apply_remove_user_scram_credential(
        &mut self,
        r: &pb::RemoveUserScramCredentialRecord,
    ) -> Result<(), ApplyError> {
        if self
            .credentials
            .remove(&(r.name.clone(), r.mechanism.clone()))
            .is_none()
        {
            return Err(invalid_security(format!(
                "user {:?} has no {} credential to remove",
                r.name, r.mechanism
            )));
        }
        self.users_initialized = true;
        Ok(())
    }

    fn apply_acl(&mut self, r: &pb::AclRecord) -> Result<(), ApplyError> {
        let acl = acl_of(r.acl.as_ref())?;
        if self.acls.contains(&acl) {
            return Err(invalid_security(format!("ACL exists already: {acl}")));
        }
        self.acls.insert(acl);
        Ok(())
    }

    fn apply_remove_acl(&mut self, r: &pb::RemoveAclRecord) -> Result<(), ApplyError> {
        let acl = acl_of(r.acl.as_ref())?;
        if !self.acls.remove(&acl) {
            return Err(invalid_security(format!("no such ACL to remove: {acl}")));
        }
        Ok(())
    }

    fn apply_client_quota(&mut self, r: &pb::ClientQuotaRecord) -> Result<(), ApplyError> {
        let invalid = ApplyError::InvalidClientQuota;
        let entity = ClientQuotaEntity::from_pb(&r.entity).map_err(invalid)?;
        if r.remove {
            let key = QuotaKey::from_name(&r.key).map_err(invalid)?;
            let values = self.client_quotas.get_mut(&entity);
            if values.and_then(|v| v.set(key, None)).is_none() {
                return Err(invalid(format!("{entity} has no {} to remove", r.key)));
            }
            if self
                .client_quotas
                .get(&entity)
                .is_some_and(QuotaValues::is_empty)
            {
                self.client_quotas.remove(&entity);
            }
        } else {
            let key = QuotaKey::check(&r.key, r.value).map_err(invalid)?;
            self.client_quotas
                .entry(entity)
                .or_default()
                .set(key, Some(r.value));
        }
        Ok(())
    }

    /// Every client quota, by entity.
    pub fn client_quotas(&self) -> &ClientQuotaMap {
        &self.client_quotas
    }

    /// Every client quota, as `LeaderAndIsr` announces them.
    pub fn client_quota_image(&self) -> pb::ClientQuotaImage {
        client_quotas::image_to_pb(&self.client_quotas)
    }

    /// A user's credential for one mechanism.
    pub fn scram_credential(
        &self,
        name: &str,
        mechanism: Mechanism,
    ) -> Option<&pb::ScramCredential> {
        self.credentials
            .get(&(name.to_owned(), mechanism.name().to_owned()))
    }

    /// Every user credential, by user name then mechanism.
    pub fn scram_credentials(&self) -> impl Iterator<Item = &pb::ScramCredential> {
        self.credentials.values()
    }

    /// Every ACL, in [`AclBinding`]'s order.
    pub fn acls(&self) -> impl Iterator<Item = &AclBinding> {
        self.acls.iter()
    }

    /// Whether the image has this ACL.
    pub fn has_acl(&self, acl: &AclBinding) -> bool {
        self.acls.contains(acl)
    }

    /// Whether a user credential was ever set or removed (then the controller's
    /// bootstrap users are never added again).
    pub fn users_initialized(&self) -> bool {
        self.users_initialized
    }

    /// Every user credential and ACL, as `LeaderAndIsr` announces them.
    pub fn security_image(&self) -> pb::SecurityImage {
        pb::SecurityImage {
            credentials: self.credentials.values().cloned().collect(),
            acls: self.acls.iter().map(AclBinding::to_pb).collect(),
        }
    }

    fn apply_topic_config(&mut self, r: &pb::TopicConfigRecord) -> Result<(), ApplyError> {
        let topic = self
            .topics
            .get_mut(&r.name)
            .ok_or_else(|| ApplyError::UnknownTopic(r.name.clone()))?;
        topic.configs = r
            .configs
            .iter()
            .map(|(k, v)| (k.clone(), v.clone()))
            .collect();
        Ok(())
    }

    fn apply_partition(&mut self, r: &pb::PartitionRecord) -> Result<(), ApplyError> {
        let invalid = |reason| ApplyError::InvalidPartition {
            partition: TopicPartition::new(&r.topic, r.partition),
            reason,
        };
        let next = PartitionRegistration {
            replicas: r.replicas.clone(),
            isr: r.isr.clone(),
            leader: r.leader,
            leader_epoch: r.leader_epoch,
            partition_epoch: r.partition_epoch,
            adding_replicas: r.adding_replicas.clone(),
            removing_replicas: r.removing_replicas.clone(),
        };
        if let Some(reason) = next.shape_error() {
            return Err(invalid(reason));
        }
        if !next.replicas.iter().all(|r| self.brokers.contains_key(r)) {
            return Err(invalid("replica on an unregistered broker"));
        }
        if next.is_online() && self.broker(next.leader).is_none_or(|b| b.fenced) {
            return Err(invalid("leader is a fenced broker"));
        }
        let topic = self
            .topics
            .get_mut(&r.topic)
            .ok_or_else(|| invalid("unknown topic"))?;
        let index = usize::try_from(r.partition).map_err(|_| invalid("negative partition"))?;
        let Some(current) = topic.partitions.get_mut(index) else {
            if index != topic.partitions.len() {
                return Err(invalid("partitions must be created in order"));
            }
            topic.partitions.push(next);
            return Ok(());
        };
        if next.partition_epoch <= current.partition_epoch {
            return Err(invalid("partition epoch did not increase"));
        }
        // Replicas change only as a reassignment does: a new one joins as adding and
        // out of the ISR; one leaves only as the removing (completion) or adding
        // (cancel) replica it was; a replica is marked adding only as it joins.
        let added: Vec<i32> = next
            .replicas
            .iter()
            .copied()
            .filter(|r| !current.replicas.contains(r))
            .collect();
        if added
            .iter()
            .any(|r| !next.adding_replicas.contains(r) || next.isr.contains(r))
        {
            return Err(invalid("a new replica that is not adding, or in the ISR"));
        }
        if current.replicas.iter().any(|r| {
            !next.replicas.contains(r)
                && !current.removing_replicas.contains(r)
                && !current.adding_replicas.contains(r)
        }) {
            return Err(invalid("a replica removed outside a reassignment"));
        }
        if next
            .adding_replicas
            .iter()
            .any(|r| !added.contains(r) && !current.adding_replicas.contains(r))
        {
            return Err(invalid("an existing replica marked adding"));
        }
        if next.leader_epoch < current.leader_epoch {
            return Err(invalid("leader epoch went backwards"));
        }
        // Two leaders must never share a leader epoch: followers and clients fence
        // on it (KIP-320), and the epoch cache would attribute one's records to the other.
        if next.leader != current.leader && next.leader_epoch == current.leader_epoch {
            return Err(invalid("leader changed without a new leader epoch"));
        }
        if next.leader != NO_LEADER && !current.isr.contains(&next.leader) {
            self.unclean_elections_total += 1;
        }
        *current = next;
        Ok(())
    }

    /// Checks the whole image: every partition has leader ∈ ISR ⊆ replicas (or no
    /// leader), a non-empty ISR without duplicates, replicas on registered brokers and a
    /// leader that is an unfenced broker; every user credential is valid (no
    /// `broker-N` name, a known mechanism, keys of its hash's length) and marks the
    /// users initialized. `apply` asserts it in debug builds.
    pub fn check_invariants(&self) -> Result<(), InvariantViolation> {
        let violation = |tp: TopicPartition, what: &str| {
            Err(InvariantViolation(format!("partition {tp}: {what}")))
        };
        for (name, topic) in &self.topics {
            for (index, p) in (0..).zip(&topic.partitions) {
                let tp = || TopicPartition::new(name, index);
                if let Some(reason) = p.shape_error() {
                    return violation(tp(), reason);
                }
                if !p.replicas.iter().all(|r| self.brokers.contains_key(r)) {
                    return violation(tp(), "replica on an unregistered broker");
                }
                if p.leader != NO_LEADER && self.broker(p.leader).is_none_or(|b| b.fenced) {
                    return violation(tp(), "led by a fenced broker");
                }
            }
        }
        for ((name, mechanism), c) in &self.credentials {
            if (&c.name, &c.mechanism) != (name, mechanism) {
                return Err(InvariantViolation(format!(
                    "the credential kept as user {name:?}'s {mechanism} is {:?}'s {}",
                    c.name, c.mechanism
                )));
            }
            if let Err((_, why)) = check_credential(c) {
                return Err(InvariantViolation(why));
            }
        }
        if !self.credentials.is_empty() && !self.users_initialized {
            return Err(InvariantViolation(
                "user credentials exist, but users are not marked initialized".to_string(),
            ));
        }
        for (entity, values) in &self.client_quotas {
            if values.is_empty() {
                return Err(InvariantViolation(format!(
                    "{entity} is kept without a quota"
                )));
            }
            for (key, value) in values.iter() {
                if let Err(why) = QuotaKey::check(key.name(), value) {
                    return Err(InvariantViolation(format!("{entity}: {why}")));
                }
            }
        }
        for b in self.brokers.values() {
            if b.epoch > self.last_applied_offset {
                return Err(InvariantViolation(format!(
                    "broker {} has epoch {} beyond the last applied offset {}",
                    b.broker_id, b.epoch, self.last_applied_offset
                )));
            }
        }
        Ok(())
    }

    /// The whole image as a snapshot: [`from_snapshot`](Self::from_snapshot) of it gives
    /// this image back.
    pub fn to_snapshot(&self) -> pb::MetadataSnapshot {
        pb::MetadataSnapshot {
            controller_id: self.controller_id,
            controller_epoch: self.controller_epoch,
            last_applied_offset: self.last_applied_offset,
            unclean_elections_total: self.unclean_elections_total,
            next_producer_id: self.next_producer_id,
            security: Some(self.security_image()),
            users_initialized: self.users_initialized,
            client_quotas: Some(self.client_quota_image()),
            brokers: self
                .brokers
                .values()
                .map(|b| pb::BrokerSnapshot {
                    broker_id: b.broker_id,
                    epoch: b.epoch,
                    incarnation_id: b.incarnation_id.clone(),
                    endpoint: Some(b.endpoint.clone()),
                    metrics_address: b.metrics_address.clone(),
                    listeners: b.listeners.clone(),
                    fenced: b.fenced,
                })
                .collect(),
            topics: self
                .topics
                .iter()
                .map(|(name, t)| pb::TopicSnapshot {
                    name: name.clone(),
                    topic_id: t.topic_id,
                    configs: t.configs.clone().into_iter().collect(),
                    partitions: t
                        .partitions
                        .iter()
                        .map(|p| pb::PartitionSnapshot {
                            replicas: p.replicas.clone(),
                            isr: p.isr.clone(),
                            leader: p.leader,
                            leader_epoch: p.leader_epoch,
                            partition_epoch: p.partition_epoch,
                            adding_replicas: p.adding_replicas.clone(),
                            removing_replicas: p.removing_replicas.clone(),
                        })
                        .collect(),
                })
                .collect(),
        }
    }

    /// The image a snapshot describes. The snapshot comes from disk or from another
    /// voter, so it is checked as a replayed log would be: every broker once with an
    /// endpoint and an epoch at or before the snapshot's offset, every topic once, and
    /// [`check_invariants`](Self::check_invariants) on the result.
    pub fn from_snapshot(
        snapshot: &pb::MetadataSnapshot,
    ) -> Result<MetadataImage, InvalidSnapshot> {
        let invalid = |what: String| Err(InvalidSnapshot(what));
        if snapshot.last_applied_offset < -1 {
            return invalid(format!(
                "last applied offset {} is below -1",
                snapshot.last_applied_offset
            ));
        }
        if snapshot.controller_epoch < 0 {
            return invalid(format!(
                "negative controller epoch {}",
                snapshot.controller_epoch
            ));
        }
        let mut brokers = BTreeMap::new();
        for b in &snapshot.brokers {
            if b.broker_id < 0 {
                return invalid(format!("negative broker id {}", b.broker_id));
            }
            if b.epoch < 0 || b.epoch > snapshot.last_applied_offset {
                return invalid(format!(
                    "broker {} has epoch {} outside [0, {}]",
                    b.broker_id, b.epoch, snapshot.last_applied_offset
                ));
            }
            let Some(endpoint) = b.endpoint.clone() else {
                return invalid(format!("broker {} has no endpoint", b.broker_id));
            };
            let registration = BrokerRegistration {
                broker_id: b.broker_id,
                epoch: b.epoch,
                incarnation_id: b.incarnation_id.clone(),
                endpoint: pb::BrokerEndpoint {
                    node_id: b.broker_id,
                    ..endpoint
                },
                metrics_address: b.metrics_address.clone(),
                listeners: b.listeners.clone(),
                fenced: b.fenced,
            };
            if brokers.insert(b.broker_id, registration).is_some() {
                return invalid(format!("broker {} appears twice", b.broker_id));
            }
        }
        let mut topics = BTreeMap::new();
        for t in &snapshot.topics {
            if i32::try_from(t.partitions.len()).is_err() {
                return invalid(format!("topic {} has too many partitions", t.name));
            }
            let topic = TopicImage {
                topic_id: t.topic_id,
                configs: t.configs.clone().into_iter().collect(),
                partitions: t
                    .partitions
                    .iter()
                    .map(|p| PartitionRegistration {
                        replicas: p.replicas.clone(),
                        isr: p.isr.clone(),
                        leader: p.leader,
                        leader_epoch: p.leader_epoch,
                        partition_epoch: p.partition_epoch,
                        adding_replicas: p.adding_replicas.clone(),
                        removing_replicas: p.removing_replicas.clone(),
                    })
                    .collect(),
            };
            if topics.insert(t.name.clone(), topic).is_some() {
                return invalid(format!("topic {} appears twice", t.name));
            }
        }
        let mut credentials = BTreeMap::new();
        let mut acls = BTreeSet::new();
        if let Some(security) = &snapshot.security {
            for c in &security.credentials {
                if let Err((_, why)) = check_credential(c) {
                    return invalid(why);
                }
                let key = (c.name.clone(), c.mechanism.clone());
                if credentials.insert(key, c.clone()).is_some() {
                    return invalid(format!(
                        "user {:?}'s {} credential appears twice",
                        c.name, c.mechanism
                    ));
                }
            }
            for a in &security.acls {
                let acl = match AclBinding::from_pb(a) {
                    Ok(acl) => acl,
                    Err(e) => return invalid(format!("invalid ACL: {e}")),
                };
                if !acls.insert(acl.clone()) {
                    return invalid(format!("ACL appears twice: {acl}"));
                }
            }
        }
        let client_quotas = match &snapshot.client_quotas {
            Some(q) => client_quotas::image_from_pb(q)
                .map_err(|why| InvalidSnapshot(format!("client quotas: {why}")))?,
            None => ClientQuotaMap::new(),
        };
        let image = MetadataImage {
            controller_id: snapshot.controller_id,
            controller_epoch: snapshot.controller_epoch,
            brokers,
            topics,
            last_applied_offset: snapshot.last_applied_offset,
            unclean_elections_total: snapshot.unclean_elections_total,
            next_producer_id: snapshot.next_producer_id.max(0),
            credentials,
            acls,
            users_initialized: snapshot.users_initialized,
            client_quotas,
        };
        image.check_invariants().map_err(|v| InvalidSnapshot(v.0))?;
        Ok(image)
    }

    /// The offset the next record will have (0 for an empty log).
    pub fn next_offset(&self) -> i64 {
        self.last_applied_offset + 1
    }

    /// The offset of the last applied record, -1 when none.
    pub fn last_applied_offset(&self) -> i64 {
        self.last_applied_offset
    }

    /// The epoch of the controller in office, 0 before the first one.
    pub fn controller_epoch(&self) -> i32 {
        self.controller_epoch
    }

    /// The node id of the controller in office, -1 before the first one.
    pub fn controller_id(&self) -> i32 {
        self.controller_id
    }

    /// A registered broker.
    pub fn broker(&self, broker_id: i32) -> Option<&BrokerRegistration> {
        self.brokers.get(&broker_id)
    }

    /// Every registered broker, by id.
    pub fn brokers(&self) -> impl Iterator<Item = &BrokerRegistration> {
        self.brokers.values()
    }

    /// Ids of the unfenced brokers.
    pub fn live_brokers(&self) -> Vec<i32> {
        self.brokers
            .values()
            .filter(|b| !b.fenced)
            .map(|b| b.broker_id)
            .collect()
    }

    /// A topic.
    pub fn topic(&self, name: &str) -> Option<&TopicImage> {
        self.topics.get(name)
    }

    /// Every topic, by name.
    pub fn topics(&self) -> impl Iterator<Item = (&str, &TopicImage)> {
        self.topics.iter().map(|(n, t)| (n.as_str(), t))
    }

    /// A partition's committed state.
    pub fn partition(&self, topic: &str, partition: i32) -> Option<&PartitionRegistration> {
        let index = usize::try_from(partition).ok()?;
        self.topics.get(topic)?.partitions.get(index)
    }

    /// Every partition, by topic then index.
    pub fn partitions(&self) -> impl Iterator<Item = (TopicPartition, &PartitionRegistration)> {
        self.topics.iter().flat_map(|(name, t)| {
            (0..)
                .zip(&t.partitions)
                .map(move |(i, p)| (TopicPartition::new(name, i), p))
        })
    }

    /// The number of partitions in the cluster.
    pub fn partition_count(&self) -> usize {
        self.topics.values().map(|t| t.partitions.len()).sum()
    }

    /// The partitions that have a replica on `broker_id`.
    pub fn partitions_hosted_by(&self, broker_id: i32) -> Vec<TopicPartition> {
        self.partitions()
            .filter(|(_, p)| p.replicas.contains(&broker_id))
            .map(|(tp, _)| tp)
            .collect()
    }

    /// Whether `broker_id` leads any partition.
    pub fn leads_any(&self, broker_id: i32) -> bool {
        self.partitions().any(|(_, p)| p.leader == broker_id)
    }

    /// Partitions without a leader (the controller's OfflinePartitionsCount).
    pub fn offline_partitions_count(&self) -> usize {
        self.partitions().filter(|(_, p)| !p.is_online()).count()
    }

    /// Partitions whose leader is not their preferred replica (the first of the
    /// assignment), offline ones included: Kafka's PreferredReplicaImbalanceCount.
    pub fn preferred_replica_imbalance_count(&self) -> usize {
        self.partitions()
            .filter(|(_, p)| p.replicas.first().is_some_and(|&r| r != p.leader))
            .count()
    }

    /// Partitions with a reassignment in progress (Kafka's ReassigningPartitions).
    pub fn reassigning_partitions_count(&self) -> usize {
        self.partitions()
            .filter(|(_, p)| p.is_reassigning())
            .count()
    }

    /// Registered brokers that are fenced.
    pub fn fenced_brokers_count(&self) -> usize {
        self.brokers.values().filter(|b| b.fenced).count()
    }

    /// Elections of a leader from outside the ISR, over the whole log's history.
    pub fn unclean_elections_total(&self) -> u64 {
        self.unclean_elections_total
    }

    /// A partition as `LeaderAndIsr` announces it.
    pub fn partition_state(&self, tp: &TopicPartition) -> Option<pb::PartitionState> {
        let topic_id = self.topics.get(&*tp.topic)?.topic_id;
        self.partition(&tp.topic, tp.partition)
            .map(|p| p.to_state(&tp.topic, tp.partition, topic_id))
    }

    /// Every partition as `LeaderAndIsr` announces it.
    pub fn partition_states(&self) -> Vec<pb::PartitionState> {
        self.partitions()
            .filter_map(|(tp, _)| self.partition_state(&tp))
            .collect()
    }

    /// The states of `partitions`, grouped by each broker that hosts a replica: who must
    /// hear about a change, and what. Unknown partitions are skipped.
    pub fn partition_states_by_broker(
        &self,
        partitions: &[TopicPartition],
    ) -> BTreeMap<i32, Vec<pb::PartitionState>> {
        let mut by_broker: BTreeMap<i32, Vec<pb::PartitionState>> = BTreeMap::new();
        for tp in partitions {
            let Some(state) = self.partition_state(tp) else {
                continue;
            };
            for &replica in &state.replicas {
                by_broker.entry(replica).or_default().push(state.clone());
            }
        }
        by_broker
    }

    /// Every topic with its config overrides.
    pub fn topic_states(&self) -> Vec<pb::TopicState> {
        self.topics
            .iter()
            .map(|(name, t)| pb::TopicState {
                name: name.clone(),
                configs: t.configs.clone().into_iter().collect(),
                topic_id: t.topic_id,
            })
            .collect()
    }

    /// Every registered broker.
    pub fn broker_infos(&self) -> Vec<pb::BrokerInfo> {
        self.brokers
            .values()
            .map(BrokerRegistration::to_info)
            .collect()
    }
}
