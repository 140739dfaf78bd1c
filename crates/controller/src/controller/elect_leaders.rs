//! Preferred leader election: `ElectLeaders` (Kafka's election type PREFERRED) and
//! the automatic leader rebalance (`auto.leader.rebalance.enable`).
//!
//! A partition's preferred replica is the first of its assignment. Moving
//! leadership to it is safe only when it is in the ISR (it holds every committed
//! record) and may lead (unfenced, not shutting down); the ISR stays as it is and
//! the leader epoch goes up, so the old leader becomes a follower that truncates by
//! leader epoch like after any other election.

use std::collections::BTreeMap;

use syncline_proto::{pb, ErrorCode, TopicPartition, NO_LEADER, UNDEFINED_EPOCH};

use super::{Controller, ControllerResult};
use crate::draft::Draft;
use crate::image::PartitionRegistration;

impl Controller {
    /// `ElectLeaders`: for every partition asked for (an empty request: all of
    /// them; a topic without partitions: all of its partitions), moves leadership
    /// to the preferred replica. Per partition: NONE when it moved,
    /// ELECTION_NOT_NEEDED when the preferred replica led already,
    /// PREFERRED_LEADER_NOT_AVAILABLE when it is out of the ISR or may not lead,
    /// UNKNOWN_TOPIC_OR_PARTITION for a partition that does not exist.
    pub fn elect_leaders(
        &self,
        req: &pb::ElectLeadersRequest,
    ) -> ControllerResult<pb::ElectLeadersResponse> {
        let mut wanted: BTreeMap<String, Vec<i32>> = BTreeMap::new();
        if req.topics.is_empty() {
            for (tp, _) in self.image.partitions() {
                wanted
                    .entry(tp.topic.to_string())
                    .or_default()
                    .push(tp.partition);
            }
        }
        for t in &req.topics {
            let partitions = wanted.entry(t.name.clone()).or_default();
            if t.partitions.is_empty() {
                let count = self
                    .image
                    .topic(&t.name)
                    .map_or(0, |topic| topic.partitions.len());
                partitions.extend((0..).take(count));
            } else {
                partitions.extend(&t.partitions);
            }
        }
        let mut draft = self.draft();
        let mut topics = Vec::with_capacity(wanted.len());
        for (name, mut partitions) in wanted {
            partitions.sort_unstable();
            partitions.dedup();
            if self.image.topic(&name).is_none() {
                // One result for the topic, whatever partitions were named.
                topics.push(pb::ElectLeadersTopicResult {
                    name: name.clone(),
                    partitions: vec![unknown(&name, -1)],
                });
                continue;
            }
            let results = partitions
                .into_iter()
                .map(|p| elect_one(&mut draft, &name, p))
                .collect();
            topics.push(pb::ElectLeadersTopicResult {
                name,
                partitions: results,
            });
        }
        ControllerResult::new(
            pb::ElectLeadersResponse {
                error_code: ErrorCode::None as i32,
                error_message: String::new(),
                topics,
            },
            draft.into_records(),
        )
    }

    /// The automatic leader rebalance (Kafka's `checkAndTriggerAutoLeaderRebalance`):
    /// for every broker whose share of partitions it prefers but does not lead is
    /// above `imbalance_percentage` (`leader.imbalance.per.broker.percentage`),
    /// elects it leader of those where it is in the ISR and may lead. Returns the
    /// partitions whose leader moves. The shell calls it every
    /// `leader.imbalance.check.interval.seconds`.
    pub fn rebalance_leaders(
        &self,
        imbalance_percentage: u32,
    ) -> ControllerResult<Vec<TopicPartition>> {
        // Per preferred broker: how many partitions it prefers, and which of them
        // it does not lead.
        let mut preferred: BTreeMap<i32, (usize, Vec<TopicPartition>)> = BTreeMap::new();
        for (tp, p) in self.image.partitions() {
            let Some(&first) = p.replicas.first() else {
                continue;
            };
            let entry = preferred.entry(first).or_default();
            entry.0 += 1;
            if p.leader != first {
                entry.1.push(tp);
            }
        }
        let mut draft = self.draft();
        let mut moved = Vec::new();
        for (broker, (total, not_led)) in preferred {
            // Integer form of not_led / total > percentage / 100.
            let imbalanced = not_led.len() * 100 > total * imbalance_percentage as usize;
            if !imbalanced || !draft.is_usable(broker) {
                continue;
            }
            for tp in not_led {
                let Some(current) = draft.partition(&tp.topic, tp.partition) else {
                    continue;
                };
                if let Ok(next) = preferred_state(&draft, &tp, current) {
                    draft.set_preferred(tp.clone(), next, "leader imbalance");
                    moved.push(tp);
                }
            }
        }
        ControllerResult::new(moved, draft.into_records())
    }
}

/// A partition that does not exist; `partition` -1 for a topic that does not.
fn unknown(topic: &str, partition: i32) -> pb::ElectLeadersPartitionResult {
    let error_message = if partition < 0 {
        format!("there is no topic {topic:?}")
    } else {
        format!("topic {topic:?} has no partition {partition}")
    };
    pb::ElectLeadersPartitionResult {
        partition,
        error_code: ErrorCode::UnknownTopicOrPartition as i32,
        error_message,
        leader: NO_LEADER,
        leader_epoch: UNDEFINED_EPOCH,
    }
}

fn elect_one(
    draft: &mut Draft<'_>,
    topic: &str,
    partition: i32,
) -> pb::ElectLeadersPartitionResult {
    let tp = TopicPartition::new(topic, partition);
    let Some(current) = draft.partition(topic, partition).cloned() else {
        return unknown(topic, partition);
    };
    let (code, message, state) = match preferred_state(draft, &tp, &current) {
        Ok(next) => {
            draft.set_preferred(tp, next.clone(), "preferred replica election");
            (ErrorCode::None, String::new(), next)
        }
        Err((code, message)) => (code, message, current),
    };
    pb::ElectLeadersPartitionResult {
        partition,
        error_code: code as i32,
        error_message: message,
        leader: state.leader,
        leader_epoch: state.leader_epoch,
    }
}

/// The partition with its preferred replica leading, or why it cannot be.
fn preferred_state(
    draft: &Draft<'_>,
    tp: &TopicPartition,
    current: &PartitionRegistration,
) -> Result<PartitionRegistration, (ErrorCode, String)> {
    let Some(&preferred) = current.replicas.first() else {
        return Err((
            ErrorCode::PreferredLeaderNotAvailable,
            format!("{tp} has no replicas"),
        ));
    };
    if current.leader == preferred {
        return Err((
            ErrorCode::ElectionNotNeeded,
            format!("the preferred replica {preferred} leads {tp} already"),
        ));
    }
    if !current.isr.contains(&preferred) {
        return Err((
            ErrorCode::PreferredLeaderNotAvailable,
            format!(
                "the preferred replica {preferred} of {tp} is not in its ISR {:?}: it may miss committed records",
                current.isr
            ),
        ));
    }
    if !draft.is_usable(preferred) {
        return Err((
            ErrorCode::PreferredLeaderNotAvailable,
            format!("the preferred replica {preferred} of {tp} is fenced or shutting down"),
        ));
    }
    Ok(PartitionRegistration {
        leader: preferred,
        leader_epoch: current.leader_epoch.saturating_add(1),
        partition_epoch: current.partition_epoch.saturating_add(1),
        ..current.clone()
    })
}
