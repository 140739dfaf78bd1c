//! `AlterPartition`: a leader's proposed ISR change, validated in the order of KRaft's
//! `ReplicationControlManager.validateAlterPartitionData`.

use std::collections::BTreeSet;

use syncline_proto::{pb, ErrorCode, NO_LEADER, UNDEFINED_EPOCH};

use super::{Controller, ControllerResult};
use crate::draft::Draft;
use crate::image::PartitionRegistration;
use syncline_proto::TopicPartition;

impl Controller {
    /// `AlterPartition`. The requester must be registered with the epoch it sends
    /// (else `STALE_BROKER_EPOCH` for the whole request). Each partition is then
    /// checked in KRaft's order:
    ///
    /// 1. unknown partition → `UNKNOWN_TOPIC_OR_PARTITION`
    /// 2. leader epoch or partition epoch *ahead* of the controller's →
    ///    `NOT_CONTROLLER` (the requester has heard from a newer controller)
    /// 3. leader epoch behind → `FENCED_LEADER_EPOCH`
    /// 4. requester is not the leader → `INVALID_REQUEST`
    /// 5. partition epoch behind → `INVALID_UPDATE_VERSION`
    /// 6. ISR empty, with duplicates, not within the replicas, or without the leader →
    ///    `INVALID_REQUEST`
    /// 7. a member unregistered, fenced, in controlled shutdown, or with a broker epoch
    ///    (other than -1) that is not its registration's → `INELIGIBLE_REPLICA`
    ///
    /// A valid change commits the ISR with partition epoch + 1 (same leader and leader
    /// epoch); proposing the ISR the partition already has commits nothing and
    /// succeeds. Each answer carries the state after the request.
    pub fn alter_partition(
        &self,
        req: &pb::AlterPartitionRequest,
    ) -> ControllerResult<pb::AlterPartitionResponse> {
        let registered = self
            .image
            .broker(req.broker_id)
            .is_some_and(|b| b.epoch == req.broker_epoch);
        if !registered {
            return ControllerResult::answer(pb::AlterPartitionResponse {
                error_code: ErrorCode::StaleBrokerEpoch as i32,
                topics: Vec::new(),
            });
        }
        let mut draft = self.draft();
        let topics = req
            .topics
            .iter()
            .map(|topic| pb::AlterPartitionTopicResponse {
                name: topic.name.clone(),
                partitions: topic
                    .partitions
                    .iter()
                    .map(|p| alter_one(&mut draft, req.broker_id, &topic.name, p))
                    .collect(),
            })
            .collect();
        ControllerResult::new(
            pb::AlterPartitionResponse {
                error_code: ErrorCode::None as i32,
                topics,
            },
            draft.into_records(),
        )
    }
}

fn alter_one(
    draft: &mut Draft<'_>,
    requester: i32,
    topic: &str,
    p: &pb::AlterPartitionPartition,
) -> pb::AlterPartitionPartitionResponse {
    let current = match validate(draft, requester, topic, p) {
        Ok(current) => current,
        Err(code) => {
            tracing::debug!(%topic, partition = p.partition, requester, error = %code, "AlterPartition refused");
            return pb::AlterPartitionPartitionResponse {
                partition: p.partition,
                error_code: code as i32,
                leader_id: NO_LEADER,
                leader_epoch: UNDEFINED_EPOCH,
                isr: Vec::new(),
                partition_epoch: UNDEFINED_EPOCH,
            };
        }
    };
    let proposed: BTreeSet<i32> = p.new_isr_with_epochs.iter().map(|m| m.broker_id).collect();
    let committed = if current.isr.iter().copied().collect::<BTreeSet<_>>() == proposed {
        current
    } else {
        let next = PartitionRegistration {
            // Kept in assignment order, like every ISR the controller writes.
            isr: current
                .replicas
                .iter()
                .copied()
                .filter(|r| proposed.contains(r))
                .collect(),
            partition_epoch: current.partition_epoch.saturating_add(1),
            ..current
        };
        // A reassignment this change allows to complete is the shell's next
        // decision (`complete_reassignments`), so that the leader hears of its own
        // change before the replicas move (it counts the ISR expansion then).
        draft.set_partition(TopicPartition::new(topic, p.partition), next.clone());
        next
    };
    pb::AlterPartitionPartitionResponse {
        partition: p.partition,
        error_code: ErrorCode::None as i32,
        leader_id: committed.leader,
        leader_epoch: committed.leader_epoch,
        isr: committed.isr,
        partition_epoch: committed.partition_epoch,
    }
}

/// The partition's current state (as the draft has it) if the proposal is valid.
fn validate(
    draft: &Draft<'_>,
    requester: i32,
    topic: &str,
    p: &pb::AlterPartitionPartition,
) -> Result<PartitionRegistration, ErrorCode> {
    let current = draft
        .partition(topic, p.partition)
        .ok_or(ErrorCode::UnknownTopicOrPartition)?;
    if p.leader_epoch > current.leader_epoch || p.partition_epoch > current.partition_epoch {
        return Err(ErrorCode::NotController);
    }
    if p.leader_epoch < current.leader_epoch {
        return Err(ErrorCode::FencedLeaderEpoch);
    }
    if requester != current.leader {
        return Err(ErrorCode::InvalidRequest);
    }
    if p.partition_epoch < current.partition_epoch {
        return Err(ErrorCode::InvalidUpdateVersion);
    }
    let members: Vec<i32> = p.new_isr_with_epochs.iter().map(|m| m.broker_id).collect();
    let distinct: BTreeSet<i32> = members.iter().copied().collect();
    if members.is_empty()
        || distinct.len() != members.len()
        || !members.iter().all(|m| current.replicas.contains(m))
        || !distinct.contains(&current.leader)
    {
        return Err(ErrorCode::InvalidRequest);
    }
    let eligible = |m: &pb::BrokerState| {
        draft.is_usable(m.broker_id)
            && (m.broker_epoch == -1 || draft.registered_epoch(m.broker_id) == Some(m.broker_epoch))
    };
    if !p.new_isr_with_epochs.iter().all(eligible) {
        return Err(ErrorCode::IneligibleReplica);
    }
    Ok(current.clone())
}
