//! AlterPartition: every rejection, in KRaft's order, and the commits.

use syncline_proto::pb;
use syncline_proto::{ErrorCode, NO_LEADER};

use crate::support::{state, Cluster};

/// An ISR member as the leader reports it.
#[derive(Debug, Clone, Copy)]
enum M {
    /// With its current broker epoch.
    Cur(i32),
    /// With -1: "do not check the epoch".
    Any(i32),
    /// With an epoch that is not its registration's.
    Wrong(i32),
}

fn members(cl: &Cluster, isr: &[M]) -> Vec<pb::BrokerState> {
    isr.iter()
        .map(|m| match *m {
            M::Cur(id) => pb::BrokerState {
                broker_id: id,
                broker_epoch: cl.c.image().broker(id).map_or(0, |b| b.epoch),
            },
            M::Any(id) => pb::BrokerState {
                broker_id: id,
                broker_epoch: -1,
            },
            M::Wrong(id) => pb::BrokerState {
                broker_id: id,
                broker_epoch: cl.epoch(id) + 100,
            },
        })
        .collect()
}

fn entry(
    cl: &Cluster,
    partition: i32,
    leader_epoch: i32,
    partition_epoch: i32,
    isr: &[M],
) -> pb::AlterPartitionPartition {
    pb::AlterPartitionPartition {
        partition,
        leader_epoch,
        new_isr_with_epochs: members(cl, isr),
        partition_epoch,
    }
}

fn request(
    cl: &Cluster,
    requester: i32,
    topic: &str,
    partitions: Vec<pb::AlterPartitionPartition>,
) -> pb::AlterPartitionRequest {
    pb::AlterPartitionRequest {
        broker_id: requester,
        broker_epoch: cl.epoch(requester),
        topics: vec![pb::AlterPartitionTopic {
            name: topic.to_owned(),
            partitions,
        }],
    }
}

/// Brokers 1-3 unfenced; t-0 = replicas [1, 2, 3], ISR [2, 3], leader 2, leader epoch
/// 1, partition epoch 1.
fn base() -> Cluster {
    let mut cl = Cluster::with_brokers(&[1, 2, 3]);
    cl.create("t", 1, 3);
    cl.fence(1);
    cl.heartbeat(1, 0);
    assert_eq!(cl.partition("t", 0), state(&[1, 2, 3], &[2, 3], 2, 1, 1));
    assert!(cl.c.image().live_brokers() == vec![1, 2, 3]);
    cl
}

fn single_answer(resp: &pb::AlterPartitionResponse) -> &pb::AlterPartitionPartitionResponse {
    assert_eq!(ErrorCode::from_wire(resp.error_code), ErrorCode::None);
    &resp.topics[0].partitions[0]
}

/// What, from, topic, partition, leader epoch, partition epoch, ISR, expected.
type Case<'a> = (&'a str, i32, &'a str, i32, i32, i32, &'a [M], ErrorCode);

#[test]
fn every_rejection_in_kraft_order() {
    use ErrorCode::*;
    use M::*;
    #[rustfmt::skip]
    let cases: &[Case<'_>] = &[
        // what,                                        from, topic, part, le, pe, isr, expected
        ("unknown topic",                                 2, "nope", 0, 1, 1, &[Cur(2)], UnknownTopicOrPartition),
        ("unknown partition",                             2, "t",    1, 1, 1, &[Cur(2)], UnknownTopicOrPartition),
        ("negative partition",                            2, "t",   -1, 1, 1, &[Cur(2)], UnknownTopicOrPartition),
        ("leader epoch ahead, even from a non-leader",    3, "t",    0, 2, 1, &[Cur(3)], NotController),
        ("partition epoch ahead",                         2, "t",    0, 1, 2, &[Cur(2)], NotController),
        ("leader epoch behind and not the leader",        3, "t",    0, 0, 1, &[Cur(3)], FencedLeaderEpoch),
        ("leader epoch behind, empty ISR",                2, "t",    0, 0, 0, &[], FencedLeaderEpoch),
        ("not the leader",                                3, "t",    0, 1, 1, &[Cur(3), Cur(2)], InvalidRequest),
        ("not the leader, partition epoch behind",        1, "t",    0, 1, 0, &[Cur(2), Cur(3)], InvalidRequest),
        ("partition epoch behind",                        2, "t",    0, 1, 0, &[Cur(2)], InvalidUpdateVersion),
        ("partition epoch behind, empty ISR",             2, "t",    0, 1, 0, &[], InvalidUpdateVersion),
        ("empty ISR",                                     2, "t",    0, 1, 1, &[], InvalidRequest),
        ("duplicate member",                              2, "t",    0, 1, 1, &[Cur(2), Cur(3), Cur(3)], InvalidRequest),
        ("member outside the replicas",                   2, "t",    0, 1, 1, &[Cur(2), Any(4)], InvalidRequest),
        ("ISR without the leader",                        2, "t",    0, 1, 1, &[Cur(3)], InvalidRequest),
        ("invalid ISR with an ineligible member",         2, "t",    0, 1, 1, &[Cur(2), Wrong(1), Wrong(1)], InvalidRequest),
        ("member with another broker epoch",              2, "t",    0, 1, 1, &[Cur(2), Wrong(1)], IneligibleReplica),
        ("leader itself with another broker epoch",       2, "t",    0, 1, 1, &[Wrong(2), Cur(3)], IneligibleReplica),
    ];
    let mut cl = base();
    let before = cl.partition("t", 0);
    for &(what, from, topic, partition, le, pe, isr, expected) in cases {
        let req = request(&cl, from, topic, vec![entry(&cl, partition, le, pe, isr)]);
        let r = cl.c.alter_partition(&req);
        assert!(r.records.is_empty(), "{what}");
        let answer = single_answer(&r.response);
        assert_eq!(ErrorCode::from_wire(answer.error_code), expected, "{what}");
        assert_eq!(answer.partition, partition, "{what}");
        assert_eq!(answer.leader_id, NO_LEADER, "{what}");
        cl.commit(r);
        assert_eq!(cl.partition("t", 0), before, "{what}");
    }
}

#[test]
fn a_fenced_member_is_ineligible_even_without_an_epoch() {
    let mut cl = base();
    cl.fence(1);
    for isr in [
        [M::Cur(2), M::Cur(3), M::Cur(1)],
        [M::Cur(2), M::Cur(3), M::Any(1)],
    ] {
        let req = request(&cl, 2, "t", vec![entry(&cl, 0, 1, 1, &isr)]);
        let r = cl.c.alter_partition(&req);
        assert_eq!(
            ErrorCode::from_wire(single_answer(&r.response).error_code),
            ErrorCode::IneligibleReplica
        );
        assert!(r.records.is_empty());
    }
}

#[test]
fn a_member_in_controlled_shutdown_is_ineligible() {
    let mut cl = base();
    cl.create("u", 3, 1); // one partition of u is led by 1
    let req = pb::BrokerHeartbeatRequest {
        want_shutdown: true,
        ..cl.heartbeat_req(1)
    };
    assert!(!cl.send_heartbeat(&req, 0).should_shutdown);
    assert!(cl.c.is_shutting_down(1));
    let req = request(
        &cl,
        2,
        "t",
        vec![entry(&cl, 0, 1, 1, &[M::Cur(2), M::Cur(3), M::Cur(1)])],
    );
    let r = cl.c.alter_partition(&req);
    assert_eq!(
        ErrorCode::from_wire(single_answer(&r.response).error_code),
        ErrorCode::IneligibleReplica
    );
}

#[test]
fn a_requester_that_is_not_registered_with_that_epoch_is_stale() {
    let cl = base();
    let mut unknown = request(&cl, 2, "t", vec![entry(&cl, 0, 1, 1, &[M::Cur(2)])]);
    unknown.broker_id = 9;
    let mut stale = request(&cl, 2, "t", vec![entry(&cl, 0, 1, 1, &[M::Cur(2)])]);
    stale.broker_epoch -= 1;
    for req in [unknown, stale] {
        let r = cl.c.alter_partition(&req);
        assert_eq!(
            ErrorCode::from_wire(r.response.error_code),
            ErrorCode::StaleBrokerEpoch
        );
        assert!(r.response.topics.is_empty());
        assert!(r.records.is_empty());
    }
}

#[test]
fn an_expansion_commits_with_a_new_partition_epoch_and_the_same_leader_epoch() {
    let mut cl = base();
    // Order of the proposal does not matter; the ISR is kept in assignment order.
    let req = request(
        &cl,
        2,
        "t",
        vec![entry(&cl, 0, 1, 1, &[M::Cur(3), M::Cur(2), M::Any(1)])],
    );
    let r = cl.c.alter_partition(&req);
    assert_eq!(r.records.len(), 1);
    let resp = cl.commit(r);
    let answer = single_answer(&resp);
    assert_eq!(ErrorCode::from_wire(answer.error_code), ErrorCode::None);
    assert_eq!(
        (
            answer.leader_id,
            answer.leader_epoch,
            answer.isr.clone(),
            answer.partition_epoch
        ),
        (2, 1, vec![1, 2, 3], 2)
    );
    assert_eq!(cl.partition("t", 0), state(&[1, 2, 3], &[1, 2, 3], 2, 1, 2));
}

#[test]
fn a_shrink_to_the_leader_alone_commits() {
    let mut cl = base();
    let req = request(&cl, 2, "t", vec![entry(&cl, 0, 1, 1, &[M::Cur(2)])]);
    let r = cl.c.alter_partition(&req);
    let resp = cl.commit(r);
    assert_eq!(single_answer(&resp).isr, vec![2]);
    assert_eq!(cl.partition("t", 0), state(&[1, 2, 3], &[2], 2, 1, 2));
}

#[test]
fn proposing_the_current_isr_is_idempotent() {
    let cl = base();
    let req = request(
        &cl,
        2,
        "t",
        vec![entry(&cl, 0, 1, 1, &[M::Cur(3), M::Cur(2)])],
    );
    let r = cl.c.alter_partition(&req);
    assert!(r.records.is_empty());
    let answer = single_answer(&r.response);
    assert_eq!(ErrorCode::from_wire(answer.error_code), ErrorCode::None);
    assert_eq!(
        (
            answer.leader_id,
            answer.leader_epoch,
            answer.isr.clone(),
            answer.partition_epoch
        ),
        (2, 1, vec![2, 3], 1)
    );
}

#[test]
fn a_partition_listed_twice_sees_the_first_change() {
    let mut cl = base();
    let req = request(
        &cl,
        2,
        "t",
        vec![
            entry(&cl, 0, 1, 1, &[M::Cur(2)]),
            entry(&cl, 0, 1, 1, &[M::Cur(2), M::Cur(3), M::Cur(1)]),
        ],
    );
    let r = cl.c.alter_partition(&req);
    assert_eq!(r.records.len(), 1);
    let codes: Vec<ErrorCode> = r.response.topics[0]
        .partitions
        .iter()
        .map(|p| ErrorCode::from_wire(p.error_code))
        .collect();
    assert_eq!(codes, [ErrorCode::None, ErrorCode::InvalidUpdateVersion]);
    cl.commit(r);
    assert_eq!(cl.partition("t", 0), state(&[1, 2, 3], &[2], 2, 1, 2));
}
