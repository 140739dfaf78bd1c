//! Leader elections and ISR changes driven by fencing and unfencing.

use syncline_controller::{changed_brokers, changed_partitions, Controller, ControllerConfig};
use syncline_proto::pb::metadata_record::Record;
use syncline_proto::{TopicPartition, NO_LEADER};

use crate::support::{state, Cluster, CLUSTER_ID};

const UNCLEAN: &str = "unclean.leader.election.enable";

#[test]
fn a_new_leader_is_the_first_live_isr_member_in_assignment_order() {
    let mut cl = Cluster::with_brokers(&[1, 2, 3]);
    cl.create("t", 3, 3);
    assert_eq!(cl.partition("t", 1), state(&[2, 3, 1], &[2, 3, 1], 2, 0, 0));
    cl.fence(2);
    // t-1: 3 comes before 1 in the assignment, so 3 leads, not the lower id.
    assert_eq!(cl.partition("t", 1), state(&[2, 3, 1], &[3, 1], 3, 1, 1));
    // Followers leave the ISR without a leader epoch bump.
    assert_eq!(cl.partition("t", 0), state(&[1, 2, 3], &[1, 3], 1, 0, 1));
    assert_eq!(cl.partition("t", 2), state(&[3, 1, 2], &[3, 1], 3, 0, 1));
}

#[test]
fn an_offline_partition_recovers_when_its_last_isr_member_returns() {
    let mut cl = Cluster::with_brokers(&[1, 2, 3]);
    cl.create("t", 1, 3);
    cl.fence(1);
    assert_eq!(cl.partition("t", 0), state(&[1, 2, 3], &[2, 3], 2, 1, 1));
    cl.fence(2);
    assert_eq!(cl.partition("t", 0), state(&[1, 2, 3], &[3], 3, 2, 2));
    cl.fence(3);
    assert_eq!(
        cl.partition("t", 0),
        state(&[1, 2, 3], &[3], NO_LEADER, 3, 3)
    );
    assert_eq!(cl.c.image().offline_partitions_count(), 1);

    // Replicas outside the ISR come back: still offline (they may miss committed data).
    for id in [1, 2] {
        assert!(!cl.heartbeat(id, 100).is_fenced);
    }
    assert_eq!(
        cl.partition("t", 0),
        state(&[1, 2, 3], &[3], NO_LEADER, 3, 3)
    );

    // The last ISR member comes back and leads.
    assert!(!cl.heartbeat(3, 200).is_fenced);
    assert_eq!(cl.partition("t", 0), state(&[1, 2, 3], &[3], 3, 4, 4));
    assert_eq!(cl.c.image().offline_partitions_count(), 0);
    assert_eq!(cl.c.image().unclean_elections_total(), 0);
}

/// Replicas [1, 2], ISR shrunk to [1] while 2 stays live.
fn isr_of_one(cl: &mut Cluster) {
    cl.fence(2);
    cl.heartbeat(2, 0);
    assert!(!cl.c.image().broker(2).unwrap().fenced);
    assert_eq!(cl.partition("t", 0).isr, vec![1]);
}

#[test]
fn without_unclean_election_a_partition_whose_isr_is_gone_stays_offline() {
    let mut cl = Cluster::with_brokers(&[1, 2]);
    cl.create("t", 1, 2);
    isr_of_one(&mut cl);
    cl.fence(1);
    assert_eq!(cl.partition("t", 0), state(&[1, 2], &[1], NO_LEADER, 1, 2));
    assert_eq!(cl.c.image().unclean_elections_total(), 0);
}

#[test]
fn unclean_election_enabled_for_the_topic_elects_a_live_replica_and_is_counted() {
    let mut cl = Cluster::with_brokers(&[1, 2]);
    cl.create_with_configs("t", 1, 2, &[(UNCLEAN, "true")]);
    isr_of_one(&mut cl);
    cl.fence(1);
    assert_eq!(cl.partition("t", 0), state(&[1, 2], &[2], 2, 1, 2));
    assert_eq!(cl.c.image().unclean_elections_total(), 1);
}

#[test]
fn the_topic_setting_overrides_the_controller_default_for_unclean_election() {
    let mut config = ControllerConfig::new(0, CLUSTER_ID);
    config.topic_defaults.unclean_leader_election_enable = true;
    let mut cl = Cluster::with_config(config);
    cl.add_brokers(&[1, 2]);
    cl.create_with_configs("t", 1, 2, &[(UNCLEAN, "false")]);
    cl.create("u", 1, 2);
    // u-0 is [2, 1]; make both ISRs [1] only.
    isr_of_one(&mut cl);
    assert_eq!(cl.partition("u", 0).isr, vec![1]);
    cl.fence(1);
    assert_eq!(cl.partition("t", 0).leader, NO_LEADER, "topic says no");
    assert_eq!(
        cl.partition("u", 0),
        state(&[2, 1], &[2], 2, 2, 2),
        "default says yes"
    );
    assert_eq!(cl.c.image().unclean_elections_total(), 1);
}

#[test]
fn an_unclean_election_happens_when_a_replica_returns_to_an_offline_partition() {
    let mut cl = Cluster::with_brokers(&[1, 2]);
    cl.create_with_configs("t", 1, 2, &[(UNCLEAN, "true")]);
    cl.fence(2);
    cl.fence(1);
    assert_eq!(cl.partition("t", 0), state(&[1, 2], &[1], NO_LEADER, 1, 2));
    assert_eq!(
        cl.c.image().unclean_elections_total(),
        0,
        "no live replica to elect"
    );
    cl.heartbeat(2, 0);
    assert_eq!(cl.partition("t", 0), state(&[1, 2], &[2], 2, 2, 3));
    assert_eq!(cl.c.image().unclean_elections_total(), 1);
}

#[test]
fn taking_office_elects_offline_partitions_that_can_have_a_leader_now() {
    let mut cl = Cluster::with_brokers(&[1, 2]);
    cl.create("t", 1, 2);
    isr_of_one(&mut cl);
    cl.fence(1);
    assert_eq!(cl.partition("t", 0).leader, NO_LEADER);

    // The next controller runs with unclean election on by default.
    let mut config = ControllerConfig::new(0, CLUSTER_ID);
    config.topic_defaults.unclean_leader_election_enable = true;
    cl.c = Controller::new(config, cl.replayed(), cl.t0).unwrap();
    let start = cl.c.start();
    assert!(matches!(
        start.records[0].record,
        Some(Record::ControllerStart(_))
    ));
    assert_eq!(
        changed_partitions(&start.records),
        vec![TopicPartition::new("t", 0)]
    );
    cl.commit(start);
    assert_eq!(cl.partition("t", 0), state(&[1, 2], &[2], 2, 2, 3));
    assert_eq!(cl.c.image().unclean_elections_total(), 1);
}

#[test]
fn one_tick_fencing_a_whole_isr_computes_each_change_from_the_previous_one() {
    let mut cl = Cluster::with_brokers(&[1, 2]);
    cl.create("t", 1, 2);
    let r = cl.c.tick(cl.at(10_000));
    assert_eq!(r.response, vec![1, 2]);
    let partition_records: Vec<(i32, Vec<i32>, i32, i32)> = r
        .records
        .iter()
        .filter_map(|r| match &r.record {
            Some(Record::Partition(p)) => {
                Some((p.leader, p.isr.clone(), p.leader_epoch, p.partition_epoch))
            }
            _ => None,
        })
        .collect();
    assert_eq!(
        partition_records,
        vec![(2, vec![2], 1, 1), (NO_LEADER, vec![2], 2, 2)]
    );
    assert_eq!(changed_brokers(&r.records), vec![1, 2]);
    cl.commit(r);
    assert_eq!(cl.partition("t", 0), state(&[1, 2], &[2], NO_LEADER, 2, 2));
}

#[test]
fn the_shell_learns_whom_to_tell_about_a_change() {
    let mut cl = Cluster::with_brokers(&[1, 2, 3, 4]);
    cl.create("t", 4, 2);
    let hosted: Vec<TopicPartition> = cl.c.image().partitions_hosted_by(1);
    let r = cl.c.tick(cl.at(1)); // nothing expires
    assert!(r.records.is_empty());
    cl.commit(r);
    let req = syncline_proto::pb::BrokerHeartbeatRequest {
        want_fence: true,
        ..cl.heartbeat_req(1)
    };
    let r = cl.c.heartbeat(&req, cl.t0);
    let changed = changed_partitions(&r.records);
    assert_eq!(
        changed, hosted,
        "every partition with a replica on 1 lost it from its ISR"
    );
    cl.commit(r);
    let by_broker = cl.c.image().partition_states_by_broker(&changed);
    for (broker, states) in &by_broker {
        for s in states {
            assert!(s.replicas.contains(broker));
            assert!(!s.isr.contains(&1));
        }
    }
    let total: usize = by_broker.values().map(Vec::len).sum();
    assert_eq!(
        total,
        changed.len() * 2,
        "each change goes to both replicas"
    );
}
