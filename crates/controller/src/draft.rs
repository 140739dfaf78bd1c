//! A change set in progress: the records one operation will propose, and the state
//! they lead to, over an image that stays untouched until the shell applies them.
//!
//! One operation may touch a partition twice (a tick fencing both members of an ISR,
//! an AlterPartition listing a partition twice); each step must see the previous one,
//! or the second record would be computed from stale epochs.

use std::collections::{BTreeMap, BTreeSet};

use syncline_proto::{pb, NO_LEADER};

use crate::config::UNCLEAN_LEADER_ELECTION_ENABLE;
use crate::election;
use crate::image::{MetadataImage, PartitionRegistration};
use syncline_proto::TopicPartition;

use crate::records;

pub(crate) struct Draft<'a> {
    image: &'a MetadataImage,
    shutting_down: &'a BTreeSet<i32>,
    default_unclean: bool,
    fenced: BTreeMap<i32, bool>,
    partitions: BTreeMap<TopicPartition, PartitionRegistration>,
    records: Vec<pb::MetadataRecord>,
}

impl<'a> Draft<'a> {
    pub(crate) fn new(
        image: &'a MetadataImage,
        shutting_down: &'a BTreeSet<i32>,
        default_unclean: bool,
    ) -> Self {
        Draft {
            image,
            shutting_down,
            default_unclean,
            fenced: BTreeMap::new(),
            partitions: BTreeMap::new(),
            records: Vec::new(),
        }
    }

    pub(crate) fn into_records(self) -> Vec<pb::MetadataRecord> {
        self.records
    }

    pub(crate) fn push(&mut self, record: pb::MetadataRecord) {
        self.records.push(record);
    }

    /// The offset the next pushed record will get once appended.
    pub(crate) fn next_offset(&self) -> i64 {
        self.image.next_offset() + i64::try_from(self.records.len()).unwrap_or(i64::MAX)
    }

    /// The partition's state after the changes so far.
    pub(crate) fn partition(&self, topic: &str, partition: i32) -> Option<&PartitionRegistration> {
        self.partitions
            .get(&TopicPartition::new(topic, partition))
            .or_else(|| self.image.partition(topic, partition))
    }

    /// Unregistered brokers count as fenced.
    pub(crate) fn is_fenced(&self, broker_id: i32) -> bool {
        match self.fenced.get(&broker_id) {
            Some(&f) => f,
            None => self.image.broker(broker_id).is_none_or(|b| b.fenced),
        }
    }

    /// The epoch of the broker's current registration.
    pub(crate) fn registered_epoch(&self, broker_id: i32) -> Option<i64> {
        self.image.broker(broker_id).map(|b| b.epoch)
    }

    /// May lead and be elected: unfenced and not in controlled shutdown.
    pub(crate) fn is_usable(&self, broker_id: i32) -> bool {
        !self.is_fenced(broker_id) && !self.shutting_down.contains(&broker_id)
    }

    fn unclean_allowed(&self, topic: &str) -> bool {
        self.image
            .topic(topic)
            .and_then(|t| t.configs.get(UNCLEAN_LEADER_ELECTION_ENABLE))
            .map_or(self.default_unclean, |v| v == "true")
    }

    /// Records `next` as the partition's new state.
    pub(crate) fn set_partition(&mut self, tp: TopicPartition, next: PartitionRegistration) {
        self.records.push(records::partition_record(&tp, &next));
        self.partitions.insert(tp, next);
    }

    /// Records a leader election the controller was asked for (or decided on its
    /// own, as a rebalance), logged with `reason`.
    pub(crate) fn set_preferred(
        &mut self,
        tp: TopicPartition,
        next: PartitionRegistration,
        reason: &str,
    ) {
        if let Some(current) = self.partition(&tp.topic, tp.partition) {
            log_change(&tp, current, &next, reason);
        }
        self.set_partition(tp, next);
    }

    /// `current` with its replicas narrowed to `replicas` (a subset, in the order
    /// wanted) and no reassignment: the ISR narrowed to them, and a leader outside
    /// them handing over to the first of them in the ISR that may lead (a new
    /// leader epoch). `None` when none of them is in the ISR and may lead.
    pub(crate) fn with_replicas(
        &self,
        current: &PartitionRegistration,
        replicas: Vec<i32>,
    ) -> Option<PartitionRegistration> {
        let isr: Vec<i32> = replicas
            .iter()
            .copied()
            .filter(|r| current.isr.contains(r))
            .collect();
        let leader = if isr.contains(&current.leader) {
            current.leader
        } else {
            *isr.iter().find(|&&r| self.is_usable(r))?
        };
        Some(PartitionRegistration {
            leader_epoch: if leader == current.leader {
                current.leader_epoch
            } else {
                current.leader_epoch.saturating_add(1)
            },
            partition_epoch: current.partition_epoch.saturating_add(1),
            leader,
            isr,
            replicas,
            adding_replicas: Vec::new(),
            removing_replicas: Vec::new(),
        })
    }

    /// Completes the reassignment of `tp` if every target replica is in the ISR
    /// (see `controller::reassign`): the leaving replicas go, and a leader among
    /// them hands over to a target replica. Nothing changes while one is missing,
    /// or when no target replica may lead.
    pub(crate) fn complete_reassignment(&mut self, tp: &TopicPartition) {
        let Some(current) = self.partition(&tp.topic, tp.partition) else {
            return;
        };
        let target = current.target_replicas();
        if !current.is_reassigning() || !target.iter().all(|r| current.isr.contains(r)) {
            return;
        }
        let Some(next) = self.with_replicas(current, target) else {
            return;
        };
        tracing::info!(
            topic = %tp.topic, partition = tp.partition, removed = ?current.removing_replicas,
            replicas = ?next.replicas, old_leader = current.leader, leader = next.leader,
            leader_epoch = next.leader_epoch, "reassignment completed"
        );
        self.set_partition(tp.clone(), next);
    }

    /// The partitions (in the state so far) that satisfy `pred`.
    fn partitions_where(
        &self,
        pred: impl Fn(&PartitionRegistration) -> bool,
    ) -> Vec<TopicPartition> {
        self.image
            .partitions()
            .map(|(tp, _)| tp)
            .filter(|tp| self.partition(&tp.topic, tp.partition).is_some_and(&pred))
            .collect()
    }

    /// Re-runs the election of `tp` with its ISR narrowed to `target_isr`, treating
    /// `excluded` as unusable.
    fn change(
        &mut self,
        tp: TopicPartition,
        target_isr: impl Fn(&[i32]) -> Vec<i32>,
        excluded: i32,
    ) {
        let Some(current) = self.partition(&tp.topic, tp.partition) else {
            return;
        };
        let next = election::next_state(
            current,
            target_isr(&current.isr),
            |r| r != excluded && self.is_usable(r),
            self.unclean_allowed(&tp.topic),
        );
        if let Some(next) = next {
            log_change(&tp, current, &next, self.change_reason(excluded));
            self.set_partition(tp, next);
        }
    }

    /// Why [`Draft::change`] runs, for its event: `excluded` is the broker leaving
    /// (fenced or shutting down), or `NO_LEADER` when offline partitions elect again.
    fn change_reason(&self, excluded: i32) -> &'static str {
        if excluded == NO_LEADER {
            "offline partition has an eligible replica again"
        } else if self.shutting_down.contains(&excluded) {
            "controlled shutdown"
        } else {
            "broker fenced"
        }
    }

    /// Takes `broker_id` out of every ISR (except where it is the last member) and moves
    /// its leaderships: what fencing and controlled shutdown share.
    pub(crate) fn remove_from_isrs(&mut self, broker_id: i32) {
        for tp in self.partitions_where(|p| p.isr.contains(&broker_id)) {
            self.change(
                tp,
                |isr| isr.iter().copied().filter(|&r| r != broker_id).collect(),
                broker_id,
            );
        }
    }

    /// Fences a broker: its ISR memberships and leaderships go first, then the record.
    pub(crate) fn fence(&mut self, broker_id: i32, broker_epoch: i64) {
        self.remove_from_isrs(broker_id);
        self.fenced.insert(broker_id, true);
        self.records
            .push(records::fence_broker_record(broker_id, broker_epoch));
    }

    /// Unfences a broker, then lets offline partitions it hosts elect again.
    pub(crate) fn unfence(&mut self, broker_id: i32, broker_epoch: i64) {
        self.fenced.insert(broker_id, false);
        self.records
            .push(records::unfence_broker_record(broker_id, broker_epoch));
        self.elect_offline(|p| p.replicas.contains(&broker_id));
    }

    /// Elects a leader for every offline partition matching `pred` that can have one now.
    pub(crate) fn elect_offline(&mut self, pred: impl Fn(&PartitionRegistration) -> bool) {
        for tp in self.partitions_where(|p| p.leader == NO_LEADER && pred(p)) {
            self.change(tp, <[i32]>::to_vec, NO_LEADER);
        }
    }
}

/// One event per partition change the controller makes on its own: a leader
/// election (unclean ones as warnings: committed records may be lost), a partition
/// going offline, or an ISR shrink, with the reason and the before/after state.
fn log_change(
    tp: &TopicPartition,
    current: &PartitionRegistration,
    next: &PartitionRegistration,
    reason: &str,
) {
    if next.leader == current.leader {
        tracing::info!(
            topic = %tp.topic, partition = tp.partition, reason, leader = next.leader,
            old_isr = ?current.isr, new_isr = ?next.isr, partition_epoch = next.partition_epoch,
            "isr shrink by the controller"
        );
    } else if next.leader == NO_LEADER {
        tracing::warn!(
            topic = %tp.topic, partition = tp.partition, reason, old_leader = current.leader,
            isr = ?next.isr, leader_epoch = next.leader_epoch,
            "partition offline: no eligible replica to lead"
        );
    } else if !current.isr.contains(&next.leader) {
        tracing::warn!(
            topic = %tp.topic, partition = tp.partition, reason, old_leader = current.leader,
            new_leader = next.leader, old_isr = ?current.isr, new_isr = ?next.isr,
            leader_epoch = next.leader_epoch, unclean = true,
            "unclean leader election: no ISR member is available, electing a replica that may miss committed records"
        );
    } else {
        tracing::info!(
            topic = %tp.topic, partition = tp.partition, reason, old_leader = current.leader,
            new_leader = next.leader, old_isr = ?current.isr, new_isr = ?next.isr,
            leader_epoch = next.leader_epoch, unclean = false,
            "leader election"
        );
    }
}
