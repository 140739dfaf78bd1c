//! Replica reassignment (KIP-455): start, complete once the target is in the ISR,
//! cancel, and every refusal.

use syncline_controller::{MetadataImage, PartitionRegistration};
use syncline_proto::{pb, ErrorCode};

use crate::support::Cluster;

/// Brokers 1-3 hold t-0 (RF 3, `configs`); broker 4 registers afterwards, so it
/// holds nothing yet.
fn four_brokers(configs: &[(&str, &str)]) -> (Cluster, Vec<i32>) {
    let mut cl = Cluster::with_brokers(&[1, 2, 3]);
    cl.create_with_configs("t", 1, 3, configs);
    cl.add_brokers(&[4]);
    let replicas = cl.partition("t", 0).replicas;
    (cl, replicas)
}

fn request(partitions: &[(&str, i32, &[i32], bool)]) -> pb::AlterReassignmentsRequest {
    pb::AlterReassignmentsRequest {
        topics: partitions
            .iter()
            .map(|&(name, partition, replicas, cancel)| pb::ReassignTopic {
                name: name.to_owned(),
                partitions: vec![pb::ReassignPartition {
                    partition,
                    replicas: replicas.to_vec(),
                    cancel,
                }],
            })
            .collect(),
        forwarded: false,
    }
}

/// Reassigns t-0 (or cancels, with `cancel`); its result and the records it took.
fn reassign(
    cl: &mut Cluster,
    partition: i32,
    target: &[i32],
    cancel: bool,
) -> (pb::ReassignPartitionResult, usize) {
    let r =
        cl.c.alter_reassignments(&request(&[("t", partition, target, cancel)]));
    let records = r.records.len();
    let mut resp = cl.commit(r);
    assert_eq!(resp.error_code, 0, "{resp:?}");
    (resp.topics.remove(0).partitions.remove(0), records)
}

fn code(r: &pb::ReassignPartitionResult) -> ErrorCode {
    ErrorCode::from_wire(r.error_code)
}

fn assert_replays(cl: &Cluster) {
    assert_eq!(&cl.replayed(), cl.c.image());
    let snapshot = cl.c.image().to_snapshot();
    assert_eq!(
        &MetadataImage::from_snapshot(&snapshot).expect("snapshot loads"),
        cl.c.image()
    );
}

#[test]
fn moving_off_the_leader_adds_first_then_removes_once_the_target_is_in_sync() {
    let (mut cl, r) = four_brokers(&[]);
    let before = cl.partition("t", 0);
    let target = [r[1], r[2], 4];
    let (result, records) = reassign(&mut cl, 0, &target, false);
    assert_eq!((code(&result), records), (ErrorCode::None, 1), "{result:?}");

    // Started: the target then the leaving replica; ISR, leader and epoch stay.
    let started = cl.partition("t", 0);
    assert_eq!(started.replicas, vec![r[1], r[2], 4, r[0]]);
    assert_eq!(started.adding_replicas, vec![4]);
    assert_eq!(started.removing_replicas, vec![r[0]]);
    assert_eq!(started.isr, before.isr);
    assert_eq!(started.leader, r[0]);
    assert_eq!(started.leader_epoch, before.leader_epoch);
    assert_eq!(started.partition_epoch, before.partition_epoch + 1);
    assert_eq!(result.adding_replicas, vec![4]);
    assert_eq!(result.removing_replicas, vec![r[0]]);

    // The ISR without the new replica does not complete it.
    let shrink = cl.propose_isr("t", 0, &[r[0], r[1], r[2]]);
    assert_eq!(shrink.error_code, 0);
    assert!(cl.partition("t", 0).is_reassigning());

    // The leader takes broker 4 into the ISR: the answer is that change, and the
    // next record completes the reassignment, handing leadership to the target.
    let expand = cl.propose_isr("t", 0, &[r[0], r[1], r[2], 4]);
    assert_eq!(expand.error_code, 0, "{expand:?}");
    assert_eq!(expand.leader_id, r[0]);
    assert_eq!(expand.isr, vec![r[1], r[2], 4, r[0]]);
    let done = cl.partition("t", 0);
    assert_eq!(done.partition_epoch, expand.partition_epoch + 1);
    assert_eq!(done.replicas, target.to_vec());
    assert_eq!(done.isr, target.to_vec());
    assert_eq!(done.leader, r[1]);
    assert_eq!(done.leader_epoch, before.leader_epoch + 1);
    assert!(!done.is_reassigning());
    assert_replays(&cl);
}

#[test]
fn raising_the_replication_factor_and_lowering_it_back_keeps_the_leader() {
    let (mut cl, r) = four_brokers(&[]);
    let mut four = r.clone();
    four.push(4);
    let (result, _) = reassign(&mut cl, 0, &four, false);
    assert_eq!(code(&result), ErrorCode::None);
    let started = cl.partition("t", 0);
    assert_eq!(
        (started.replicas.clone(), started.adding_replicas.clone()),
        (four.clone(), vec![4])
    );
    assert!(started.removing_replicas.is_empty());
    cl.propose_isr("t", 0, &four);
    let grown = cl.partition("t", 0);
    assert_eq!(
        (grown.replicas.clone(), grown.isr.clone()),
        (four.clone(), four.clone())
    );
    assert!(!grown.is_reassigning());
    assert_eq!(grown.leader_epoch, started.leader_epoch);

    // Back to RF 3: the target is in the ISR already, so it completes at once.
    let (result, records) = reassign(&mut cl, 0, &r, false);
    assert_eq!((code(&result), records), (ErrorCode::None, 2));
    assert_eq!(result.replicas, r);
    assert!(result.removing_replicas.is_empty(), "{result:?}");
    let shrunk = cl.partition("t", 0);
    assert_eq!(
        (shrunk.replicas.clone(), shrunk.isr.clone()),
        (r.clone(), r.clone())
    );
    assert_eq!(shrunk.leader, r[0]);
    assert_eq!(shrunk.leader_epoch, grown.leader_epoch);
    assert_replays(&cl);
}

#[test]
fn cancelling_goes_back_to_the_original_replicas() {
    let (mut cl, r) = four_brokers(&[]);
    let before = cl.partition("t", 0);
    reassign(&mut cl, 0, &[r[1], r[2], 4], false);
    let (result, records) = reassign(&mut cl, 0, &[], true);
    assert_eq!((code(&result), records), (ErrorCode::None, 1), "{result:?}");
    let cancelled = cl.partition("t", 0);
    // Kafka's order: the original replicas as they stand in the merged list.
    assert_eq!(cancelled.replicas, vec![r[1], r[2], r[0]]);
    assert_eq!(cancelled.isr, vec![r[1], r[2], r[0]]);
    assert_eq!(cancelled.leader, before.leader);
    assert_eq!(cancelled.leader_epoch, before.leader_epoch);
    assert!(!cancelled.is_reassigning());

    // Nothing left to cancel.
    let (again, records) = reassign(&mut cl, 0, &[], true);
    assert_eq!(
        (code(&again), records),
        (ErrorCode::NoReassignmentInProgress, 0)
    );
    assert_replays(&cl);
}

#[test]
fn a_leader_in_the_target_keeps_leading_and_a_completed_one_cannot_be_cancelled() {
    let (mut cl, r) = four_brokers(&[]);
    let target = [4, r[0], r[1]];
    reassign(&mut cl, 0, &target, false);
    // Broker 4 joins the ISR: the target is in it, so this completes, and cancel
    // then has nothing to undo.
    cl.propose_isr("t", 0, &[r[0], r[1], r[2], 4]);
    let done = cl.partition("t", 0);
    assert_eq!(done.replicas, target.to_vec());
    assert_eq!(done.leader, r[0], "a leader in the target keeps leading");
    let (result, _) = reassign(&mut cl, 0, &[], true);
    assert_eq!(code(&result), ErrorCode::NoReassignmentInProgress);
}

#[test]
fn a_joining_replica_that_dies_and_comes_back_completes_the_reassignment() {
    let (mut cl, r) = four_brokers(&[]);
    reassign(&mut cl, 0, &[r[1], r[2], 4], false);
    cl.fence(4);
    let fenced = cl.partition("t", 0);
    assert!(fenced.is_reassigning(), "still under way: {fenced:?}");
    assert_eq!(fenced.adding_replicas, vec![4]);
    // While fenced it may not join the ISR.
    let refused = cl.propose_isr("t", 0, &[r[0], r[1], r[2], 4]);
    assert_eq!(
        ErrorCode::from_wire(refused.error_code),
        ErrorCode::IneligibleReplica
    );
    // Back (a new incarnation registers and catches up): it joins and completes.
    cl.register(4, 2, "");
    assert!(!cl.heartbeat(4, 0).is_fenced);
    cl.propose_isr("t", 0, &[r[0], r[1], r[2], 4]);
    let done = cl.partition("t", 0);
    assert_eq!(done.replicas, vec![r[1], r[2], 4]);
    assert_eq!(done.leader, r[1]);
    assert_replays(&cl);
}

#[test]
fn the_leader_fenced_mid_reassignment_hands_over_within_the_isr() {
    let (mut cl, r) = four_brokers(&[]);
    reassign(&mut cl, 0, &[r[1], r[2], 4], false);
    cl.fence(r[0]);
    let p = cl.partition("t", 0);
    assert_eq!(
        p.leader, r[1],
        "the first ISR member of the merged replicas"
    );
    assert_eq!(p.isr, vec![r[1], r[2]]);
    assert!(p.is_reassigning());
    // The new leader takes 4 in: complete, and the fenced r[0] is gone.
    cl.propose_isr("t", 0, &[r[1], r[2], 4]);
    let done = cl.partition("t", 0);
    assert_eq!(
        (done.replicas.clone(), done.isr.clone(), done.leader),
        (vec![r[1], r[2], 4], vec![r[1], r[2], 4], r[1])
    );
}

#[test]
fn the_same_target_again_changes_nothing_and_another_one_is_refused() {
    let (mut cl, r) = four_brokers(&[]);
    let target = [r[1], r[2], 4];
    reassign(&mut cl, 0, &target, false);
    let (same, records) = reassign(&mut cl, 0, &target, false);
    assert_eq!((code(&same), records), (ErrorCode::None, 0));
    let (other, records) = reassign(&mut cl, 0, &[r[0], r[1], 4], false);
    assert_eq!(
        (code(&other), records),
        (ErrorCode::ReassignmentInProgress, 0)
    );
    assert!(other.error_message.contains("cancel"), "{other:?}");
    // The current replicas as a target: nothing to move.
    let (mut cl, r) = four_brokers(&[]);
    let (noop, records) = reassign(&mut cl, 0, &r, false);
    assert_eq!((code(&noop), records), (ErrorCode::None, 0));
}

#[test]
fn a_new_order_of_the_same_replicas_is_one_record_and_no_reassignment() {
    let (mut cl, r) = four_brokers(&[]);
    let reversed = [r[2], r[1], r[0]];
    let (result, records) = reassign(&mut cl, 0, &reversed, false);
    assert_eq!((code(&result), records), (ErrorCode::None, 1));
    assert!(!cl.partition("t", 0).is_reassigning());
    let p = cl.partition("t", 0);
    assert_eq!(p.replicas, reversed.to_vec());
    assert_eq!(
        p.leader, r[0],
        "the leader stays; a preferred election moves it"
    );
}

#[test]
fn bad_targets_are_refused_with_the_rule_they_break() {
    type Case<'a> = (&'a str, i32, &'a [i32], bool, ErrorCode, &'a str);
    let cases: [Case<'_>; 7] = [
        (
            "t",
            0,
            &[],
            false,
            ErrorCode::InvalidReplicaAssignment,
            "empty",
        ),
        (
            "t",
            0,
            &[1, 2, 2],
            false,
            ErrorCode::InvalidReplicaAssignment,
            "twice",
        ),
        (
            "t",
            0,
            &[1, 2, 9],
            false,
            ErrorCode::InvalidReplicaAssignment,
            "broker 9 is not registered",
        ),
        (
            "t",
            0,
            &[4],
            false,
            ErrorCode::InvalidReplicaAssignment,
            "min.insync.replicas",
        ),
        (
            "t",
            1,
            &[1, 2, 3],
            false,
            ErrorCode::UnknownTopicOrPartition,
            "t-1",
        ),
        (
            "nope",
            0,
            &[1, 2, 3],
            false,
            ErrorCode::UnknownTopicOrPartition,
            "nope-0",
        ),
        (
            "t",
            0,
            &[],
            true,
            ErrorCode::NoReassignmentInProgress,
            "no reassignment",
        ),
    ];
    for (topic, partition, target, cancel, want, message) in cases {
        let (mut cl, _) = four_brokers(&[("min.insync.replicas", "2")]);
        let before: PartitionRegistration = cl.partition("t", 0);
        let r =
            cl.c.alter_reassignments(&request(&[(topic, partition, target, cancel)]));
        assert!(r.records.is_empty(), "{topic}-{partition} {target:?}");
        let resp = cl.commit(r);
        let result = &resp.topics[0].partitions[0];
        assert_eq!(
            code(result),
            want,
            "{topic}-{partition} {target:?}: {result:?}"
        );
        assert!(
            result.error_message.contains(message),
            "{topic}-{partition} {target:?}: {result:?}"
        );
        assert_eq!(cl.partition("t", 0), before);
    }
}

#[test]
fn a_cancel_that_would_drop_in_sync_copies_below_min_isr_is_refused() {
    let mut cl = Cluster::with_brokers(&[1, 2, 3]);
    cl.create_with_configs("t", 1, 3, &[("min.insync.replicas", "2")]);
    cl.add_brokers(&[4, 5]);
    let r = cl.partition("t", 0).replicas;
    reassign(&mut cl, 0, &[r[0], 4, 5], false);
    // The originals but the leader fall behind; broker 4 catches up.
    cl.propose_isr("t", 0, &[r[0], 4]);
    let before = cl.partition("t", 0);
    assert!(before.is_reassigning());
    let (result, records) = reassign(&mut cl, 0, &[], true);
    assert_eq!(
        (code(&result), records),
        (ErrorCode::InvalidReplicaAssignment, 0),
        "{result:?}"
    );
    assert!(
        result.error_message.contains("min.insync.replicas"),
        "{result:?}"
    );
    assert_eq!(cl.partition("t", 0), before);
}

#[test]
fn an_unclean_election_mid_reassignment_prefers_an_original_replica() {
    let mut cl = Cluster::with_brokers(&[1, 2, 3]);
    cl.create_with_configs("t", 1, 3, &[("unclean.leader.election.enable", "true")]);
    cl.add_brokers(&[4, 5, 6]);
    let r = cl.partition("t", 0).replicas;
    reassign(&mut cl, 0, &[4, 5, 6], false);
    cl.propose_isr("t", 0, &[r[0]]);
    cl.fence(r[0]);
    let p = cl.partition("t", 0);
    assert_eq!(
        p.leader, r[1],
        "an original replica, not an empty new one: {p:?}"
    );
    assert_eq!(p.isr, vec![r[1]]);
}
