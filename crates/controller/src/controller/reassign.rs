//! Replica reassignment: Kafka's `AlterPartitionReassignments` (KIP-455).
//!
//! A reassignment from replicas R to a target T runs in three steps, each one
//! metadata record:
//! 1. **start**: `replicas` = T followed by R \ T, `adding` = T \ R, `removing` =
//!    R \ T; the ISR and the leader stay. The joining replicas hear of the
//!    partition, fetch from the leader and catch up as any follower does, and the
//!    leader proposes each into the ISR (AlterPartition) once it has caught up;
//! 2. **complete**, decided as soon as every target replica is in the ISR (at
//!    start already when T ⊆ ISR, else on the AlterPartition that makes it so):
//!    `replicas` = ISR = T (after an AlterPartition, as the next decision:
//!    `complete_reassignments`); a leader outside T hands over to the first target
//!    replica that may lead (a new leader epoch); the leaving replicas hear they
//!    are no longer replicas and delete their copy;
//! 3. or **cancel**: back to R (the replicas without the joining ones), the ISR
//!    narrowed to R, a leader outside R handing over to the first of R in the ISR.
//!
//! What an acks=all write rests on never weakens: the ISR only loses the leaving
//! replicas once every target replica is in it, so at every step each committed
//! record is on every member of an ISR that is at least as large as the target;
//! a cancel that would drop in-sync joining replicas below `min.insync.replicas`
//! is refused.
//! The state is in the metadata log, so a controller failover or a joining replica
//! that dies and comes back resumes it where it was.

use syncline_proto::{pb, ErrorCode, TopicPartition};

use super::{Controller, ControllerResult};
use crate::config::MIN_INSYNC_REPLICAS;
use crate::draft::Draft;
use crate::image::PartitionRegistration;

type Refusal = (ErrorCode, String);

impl Controller {
    /// `AlterReassignments`: starts (or cancels) the reassignment of each named
    /// partition, in request order. Per partition: NONE when it started, completed
    /// at once, was already under way to the same target, or had nothing to move;
    /// otherwise the error of the first rule it breaks:
    /// - UNKNOWN_TOPIC_OR_PARTITION: no such partition;
    /// - NO_REASSIGNMENT_IN_PROGRESS: a cancel with none to cancel;
    /// - INVALID_REPLICA_ASSIGNMENT: no replicas, a duplicate, an unregistered broker,
    ///   fewer replicas than the topic's `min.insync.replicas`, or (to cancel) no
    ///   original replica in the ISR that may lead;
    /// - REASSIGNMENT_IN_PROGRESS: another target is under way (cancel it first).
    pub fn alter_reassignments(
        &self,
        req: &pb::AlterReassignmentsRequest,
    ) -> ControllerResult<pb::AlterReassignmentsResponse> {
        let mut draft = self.draft();
        let topics = req
            .topics
            .iter()
            .map(|t| pb::ReassignTopicResult {
                name: t.name.clone(),
                partitions: t
                    .partitions
                    .iter()
                    .map(|p| {
                        let tp = TopicPartition::new(&t.name, p.partition);
                        let outcome = if p.cancel {
                            cancel(&mut draft, &tp, self.min_insync_replicas(&t.name))
                        } else {
                            self.start_reassignment(&mut draft, &tp, &p.replicas)
                        };
                        result(&draft, &tp, outcome)
                    })
                    .collect(),
            })
            .collect();
        ControllerResult::new(
            pb::AlterReassignmentsResponse {
                error_code: ErrorCode::None as i32,
                error_message: String::new(),
                topics,
            },
            draft.into_records(),
        )
    }

    fn start_reassignment(
        &self,
        draft: &mut Draft<'_>,
        tp: &TopicPartition,
        target: &[i32],
    ) -> Outcome {
        let current = draft
            .partition(&tp.topic, tp.partition)
            .ok_or_else(|| unknown(tp))?
            .clone();
        let invalid = |why: String| Err((ErrorCode::InvalidReplicaAssignment, why));
        if target.is_empty() {
            return invalid(format!("the target replicas of {tp} are empty"));
        }
        if let Some(dup) = target
            .iter()
            .enumerate()
            .find_map(|(i, r)| target[..i].contains(r).then_some(*r))
        {
            return invalid(format!("broker {dup} appears twice in the target of {tp}"));
        }
        if let Some(unknown) = target
            .iter()
            .find(|&&r| draft.registered_epoch(r).is_none())
        {
            return invalid(format!("broker {unknown} is not registered"));
        }
        let min_isr = self.min_insync_replicas(&tp.topic);
        if target.len() < min_isr {
            return invalid(format!(
                "{} target replicas for {tp} are fewer than its min.insync.replicas ({min_isr}): \
                 acks=all writes would all fail; lower min.insync.replicas first",
                target.len()
            ));
        }
        if current.is_reassigning() {
            if current.target_replicas() == target {
                // Resubmitted (a plan run again): complete it if it can be now.
                draft.complete_reassignment(tp);
                return Ok(());
            }
            return Err((
                ErrorCode::ReassignmentInProgress,
                format!(
                    "{tp} is being reassigned to {:?}; cancel that first",
                    current.target_replicas()
                ),
            ));
        }
        if current.replicas == target {
            return Ok(());
        }
        let adding: Vec<i32> = without(target, &current.replicas);
        let removing: Vec<i32> = without(&current.replicas, target);
        let mut replicas = target.to_vec();
        replicas.extend(&removing);
        let next = PartitionRegistration {
            replicas,
            adding_replicas: adding,
            removing_replicas: removing,
            partition_epoch: current.partition_epoch.saturating_add(1),
            ..current.clone()
        };
        tracing::info!(
            topic = %tp.topic, partition = tp.partition, from = ?current.replicas,
            to = ?target, adding = ?next.adding_replicas, removing = ?next.removing_replicas,
            "reassignment started"
        );
        draft.set_partition(tp.clone(), next);
        draft.complete_reassignment(tp);
        Ok(())
    }
}

impl Controller {
    /// Completes every reassignment whose target replicas are all in the ISR now.
    /// The shell decides it after each committed AlterPartition (which is where a
    /// joining replica enters the ISR), as a change of its own.
    pub fn complete_reassignments(&self) -> ControllerResult<()> {
        let mut draft = self.draft();
        let reassigning: Vec<TopicPartition> = self
            .image
            .partitions()
            .filter(|(_, p)| p.is_reassigning())
            .map(|(tp, _)| tp)
            .collect();
        for tp in &reassigning {
            draft.complete_reassignment(tp);
        }
        ControllerResult::new((), draft.into_records())
    }

    /// A topic's effective `min.insync.replicas` (1 for an unknown topic).
    fn min_insync_replicas(&self, topic: &str) -> usize {
        self.topic_configs(topic)
            .and_then(|c| c.get(MIN_INSYNC_REPLICAS)?.parse::<usize>().ok())
            .unwrap_or(1)
    }
}

type Outcome = Result<(), Refusal>;

fn unknown(tp: &TopicPartition) -> Refusal {
    (
        ErrorCode::UnknownTopicOrPartition,
        format!("partition {tp} does not exist"),
    )
}

/// `ids` without those in `other`, in order.
fn without(ids: &[i32], other: &[i32]) -> Vec<i32> {
    ids.iter().copied().filter(|r| !other.contains(r)).collect()
}

fn cancel(draft: &mut Draft<'_>, tp: &TopicPartition, min_isr: usize) -> Outcome {
    let current = draft
        .partition(&tp.topic, tp.partition)
        .ok_or_else(|| unknown(tp))?
        .clone();
    if !current.is_reassigning() {
        return Err((
            ErrorCode::NoReassignmentInProgress,
            format!("{tp} has no reassignment in progress"),
        ));
    }
    let original = current.original_replicas();
    let next = draft
        .with_replicas(&current, original.clone())
        .ok_or_else(|| {
            (
                ErrorCode::InvalidReplicaAssignment,
                format!(
                    "no replica of the original assignment {original:?} of {tp} is in the ISR \
                     {:?} and may lead; let the reassignment finish",
                    current.isr
                ),
            )
        })?;
    // The joining replicas in the ISR hold every committed record: dropping them
    // must not leave fewer in-sync copies than min.insync.replicas promises.
    if next.isr.len() < current.isr.len() && next.isr.len() < min_isr {
        return Err((
            ErrorCode::InvalidReplicaAssignment,
            format!(
                "cancelling would leave {tp} with ISR {:?}, fewer than its min.insync.replicas \
                 ({min_isr}), and committed records on fewer replicas; let the reassignment \
                 finish, or cancel once the original replicas are back in the ISR",
                next.isr
            ),
        ));
    }
    tracing::info!(
        topic = %tp.topic, partition = tp.partition, back_to = ?original,
        leader = next.leader, isr = ?next.isr, "reassignment cancelled"
    );
    draft.set_partition(tp.clone(), next);
    Ok(())
}

fn result(draft: &Draft<'_>, tp: &TopicPartition, outcome: Outcome) -> pb::ReassignPartitionResult {
    let (code, message) = outcome.err().unwrap_or((ErrorCode::None, String::new()));
    let state = draft.partition(&tp.topic, tp.partition);
    pb::ReassignPartitionResult {
        partition: tp.partition,
        error_code: code as i32,
        error_message: message,
        replicas: state.map(|p| p.replicas.clone()).unwrap_or_default(),
        adding_replicas: state.map(|p| p.adding_replicas.clone()).unwrap_or_default(),
        removing_replicas: state
            .map(|p| p.removing_replicas.clone())
            .unwrap_or_default(),
    }
}
