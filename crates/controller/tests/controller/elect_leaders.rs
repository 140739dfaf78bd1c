//! Preferred leader election: ElectLeaders and the automatic rebalance.

use syncline_proto::{pb, ErrorCode, TopicPartition, NO_LEADER};

use crate::support::{state, Cluster};

/// The leader of `topic-partition` puts every replica back into its ISR (an
/// AlterPartition it sends once they caught up).
fn expand_isr(cl: &mut Cluster, topic: &str, partition: i32) {
    let replicas = cl.partition(topic, partition).replicas;
    let resp = cl.propose_isr(topic, partition, &replicas);
    assert_eq!(resp.error_code, 0, "{resp:?}");
}

/// Brokers 1-3; t has 3 partitions (t-0 prefers 1). Broker 1 was fenced and came
/// back: t-0 is led by 2 with ISR [1, 2, 3] again if `rejoined`, ISR [2, 3] if not.
fn after_failover(rejoined: bool) -> Cluster {
    let mut cl = Cluster::with_brokers(&[1, 2, 3]);
    cl.create("t", 3, 3);
    cl.fence(1);
    assert!(!cl.heartbeat(1, 0).is_fenced);
    if rejoined {
        for p in 0..3 {
            expand_isr(&mut cl, "t", p);
        }
    }
    cl
}

fn elect(cl: &mut Cluster, topics: &[(&str, &[i32])]) -> pb::ElectLeadersResponse {
    let req = pb::ElectLeadersRequest {
        topics: topics
            .iter()
            .map(|(name, partitions)| pb::ElectLeadersTopic {
                name: name.to_string(),
                partitions: partitions.to_vec(),
            })
            .collect(),
        forwarded: false,
    };
    let r = cl.c.elect_leaders(&req);
    cl.commit(r)
}

/// (partition, error, leader) of one topic's results.
fn outcomes(resp: &pb::ElectLeadersResponse, topic: &str) -> Vec<(i32, ErrorCode, i32)> {
    resp.topics
        .iter()
        .find(|t| t.name == topic)
        .unwrap_or_else(|| panic!("no result for {topic}: {resp:?}"))
        .partitions
        .iter()
        .map(|p| (p.partition, ErrorCode::from_wire(p.error_code), p.leader))
        .collect()
}

#[test]
fn the_preferred_replica_leads_again_with_a_higher_leader_epoch_and_the_same_isr() {
    let mut cl = after_failover(true);
    let before = cl.partition("t", 0);
    assert_eq!(before, state(&[1, 2, 3], &[1, 2, 3], 2, 1, 2));
    assert_eq!(cl.c.image().preferred_replica_imbalance_count(), 1);

    let resp = elect(&mut cl, &[("t", &[0])]);
    assert_eq!(outcomes(&resp, "t"), vec![(0, ErrorCode::None, 1)]);
    assert_eq!(resp.topics[0].partitions[0].leader_epoch, 2);
    assert_eq!(cl.partition("t", 0), state(&[1, 2, 3], &[1, 2, 3], 1, 2, 3));
    assert_eq!(cl.c.image().preferred_replica_imbalance_count(), 0);
    // The log replays to the same image.
    assert_eq!(&cl.replayed(), cl.c.image());
}

/// What, whether the preferred replica rejoined the ISR, the request (topic,
/// partitions), the results (topic, partition, error, leader after).
type Case<'a> = (
    &'a str,
    bool,
    &'a [(&'a str, &'a [i32])],
    &'a [(&'a str, i32, ErrorCode, i32)],
);

#[test]
fn every_outcome_of_elect_leaders() {
    #[rustfmt::skip]
    let cases: &[Case<'_>] = &[
        // what, ISR rejoined, request, expected (topic, partition, error, leader after)
        ("moved",                       true,  &[("t", &[0])], &[("t", 0, ErrorCode::None, 1)]),
        ("led by its preferred already", true, &[("t", &[1])], &[("t", 1, ErrorCode::ElectionNotNeeded, 2)]),
        ("preferred not in the ISR",    false, &[("t", &[0])], &[("t", 0, ErrorCode::PreferredLeaderNotAvailable, 2)]),
        ("unknown partition",           true,  &[("t", &[7])], &[("t", 7, ErrorCode::UnknownTopicOrPartition, NO_LEADER)]),
        ("unknown topic",               true,  &[("nope", &[])], &[("nope", -1, ErrorCode::UnknownTopicOrPartition, NO_LEADER)]),
        ("unknown topic, partitions named", true, &[("nope", &[0, 1])], &[("nope", -1, ErrorCode::UnknownTopicOrPartition, NO_LEADER)]),
        ("a topic: all its partitions", true,  &[("t", &[])], &[
            ("t", 0, ErrorCode::None, 1),
            ("t", 1, ErrorCode::ElectionNotNeeded, 2),
            ("t", 2, ErrorCode::ElectionNotNeeded, 3),
        ]),
        ("empty: every partition",      true,  &[], &[
            ("t", 0, ErrorCode::None, 1),
            ("t", 1, ErrorCode::ElectionNotNeeded, 2),
            ("t", 2, ErrorCode::ElectionNotNeeded, 3),
        ]),
        ("a partition named twice",     true,  &[("t", &[0, 0])], &[("t", 0, ErrorCode::None, 1)]),
    ];
    for (what, rejoined, request, expected) in cases {
        let mut cl = after_failover(*rejoined);
        let before = cl.log.len();
        let resp = elect(&mut cl, request);
        assert_eq!(resp.error_code, 0, "{what}");
        let got: Vec<(String, i32, ErrorCode, i32)> = resp
            .topics
            .iter()
            .flat_map(|t| {
                outcomes(&resp, &t.name)
                    .into_iter()
                    .map(|(p, e, l)| (t.name.clone(), p, e, l))
            })
            .collect();
        let want: Vec<(String, i32, ErrorCode, i32)> = expected
            .iter()
            .map(|(t, p, e, l)| (t.to_string(), *p, *e, *l))
            .collect();
        assert_eq!(got, want, "{what}");
        let moved = expected.iter().filter(|e| e.2 == ErrorCode::None).count();
        assert_eq!(
            cl.log.len() - before,
            moved,
            "{what}: one record per moved partition"
        );
    }
}

#[test]
fn a_fenced_preferred_replica_is_not_elected_even_as_the_last_isr_member() {
    // t-0 = replicas [1, 2]: 2 leaves the ISR, then 1 is fenced as its last member,
    // so the partition is offline with ISR [1].
    let mut cl = Cluster::with_brokers(&[1, 2]);
    cl.create("t", 1, 2);
    cl.fence(2);
    cl.heartbeat(2, 0);
    cl.fence(1);
    assert_eq!(cl.partition("t", 0), state(&[1, 2], &[1], NO_LEADER, 1, 2));
    let before = cl.log.len();
    let resp = elect(&mut cl, &[("t", &[0])]);
    assert_eq!(
        outcomes(&resp, "t"),
        vec![(0, ErrorCode::PreferredLeaderNotAvailable, NO_LEADER)]
    );
    assert_eq!(cl.log.len(), before);
}

#[test]
fn the_rebalance_moves_leaders_of_a_broker_above_the_imbalance_threshold_only() {
    // Broker 1 prefers t-0 of t's three partitions (and u-0 of u's three): it
    // leads neither after its failover, so 2 of 2 = 100 % are imbalanced.
    let mut cl = Cluster::with_brokers(&[1, 2, 3]);
    cl.create("t", 3, 3);
    cl.create("u", 3, 3);
    cl.fence(1);
    cl.heartbeat(1, 0);
    for topic in ["t", "u"] {
        for p in 0..3 {
            expand_isr(&mut cl, topic, p);
        }
    }
    let preferred_by_1: Vec<TopicPartition> =
        cl.c.image()
            .partitions()
            .filter(|(_, p)| p.replicas[0] == 1)
            .map(|(tp, _)| tp)
            .collect();
    assert_eq!(preferred_by_1.len(), 2);
    assert_eq!(cl.c.image().preferred_replica_imbalance_count(), 2);

    // A threshold of 100 % is never exceeded: nothing moves.
    let r = cl.c.rebalance_leaders(100);
    assert!(r.records.is_empty() && r.response.is_empty(), "{r:?}");

    // Kafka's default of 10 %: both move to 1.
    let r = cl.c.rebalance_leaders(10);
    let moved = cl.commit(r);
    assert_eq!(moved, preferred_by_1);
    for tp in &moved {
        assert_eq!(cl.partition(&tp.topic, tp.partition).leader, 1, "{tp}");
    }
    assert_eq!(cl.c.image().preferred_replica_imbalance_count(), 0);
    // Balanced: a second pass changes nothing.
    let r = cl.c.rebalance_leaders(10);
    assert!(r.records.is_empty(), "{r:?}");
}

#[test]
fn the_rebalance_skips_partitions_whose_preferred_replica_is_out_of_the_isr() {
    let mut cl = after_failover(false);
    let r = cl.c.rebalance_leaders(10);
    assert!(r.records.is_empty() && r.response.is_empty(), "{r:?}");
    // Once t-0's ISR has it back, the rebalance moves that partition alone.
    expand_isr(&mut cl, "t", 0);
    let r = cl.c.rebalance_leaders(10);
    assert_eq!(cl.commit(r), vec![TopicPartition::new("t", 0)]);
}
