//! Registration, heartbeats, session expiry, controlled shutdown, controller restart.

use syncline_controller::{changed_partitions, Controller, ControllerConfig};
use syncline_proto::pb::{self, metadata_record::Record};
use syncline_proto::{ErrorCode, TopicPartition, NO_LEADER};

use crate::support::{state, Cluster, CLUSTER_ID};

fn code(c: i32) -> ErrorCode {
    ErrorCode::from_wire(c)
}

#[test]
fn registration_with_another_cluster_id_is_refused() {
    let mut cl = Cluster::new();
    let mut req = Cluster::registration(1, 1, "");
    req.cluster_id = "other".into();
    let r = cl.c.register_broker(&req, cl.t0);
    assert!(r.records.is_empty());
    assert_eq!(
        code(r.response.error_code),
        ErrorCode::InconsistentClusterId
    );
    assert_eq!(r.response.broker_epoch, -1);
}

#[test]
fn registration_without_a_usable_endpoint_or_id_is_invalid() {
    let limits_ok = {
        let mut req = Cluster::registration(1, 1, &"r".repeat(255));
        req.endpoint.as_mut().unwrap().host = "h".repeat(255);
        req.metrics_address = "m".repeat(255);
        req
    };
    let cl = Cluster::new();
    let mut c = cl.c;
    let bad: [fn(&mut pb::BrokerRegistrationRequest); 9] = [
        |r| r.broker_id = -1,
        |r| r.endpoint = None,
        |r| r.endpoint.as_mut().unwrap().host.clear(),
        |r| r.endpoint.as_mut().unwrap().host = "h".repeat(256),
        |r| r.endpoint.as_mut().unwrap().rack = "r".repeat(256),
        |r| r.endpoint.as_mut().unwrap().port = 0,
        |r| r.endpoint.as_mut().unwrap().port = 65_536,
        |r| r.metrics_address = "m".repeat(256),
        |r| r.incarnation_id = vec![0; 256].into(),
    ];
    for (i, mutate) in bad.iter().enumerate() {
        let mut req = Cluster::registration(1, 1, "");
        mutate(&mut req);
        let r = c.register_broker(&req, cl.t0);
        assert_eq!(
            code(r.response.error_code),
            ErrorCode::InvalidRequest,
            "case {i}"
        );
        assert!(r.records.is_empty(), "case {i}");
    }
    let r = c.register_broker(&limits_ok, cl.t0);
    assert_eq!(code(r.response.error_code), ErrorCode::None, "{r:?}");
}

#[test]
fn broker_epoch_is_the_offset_of_its_registration_and_it_starts_fenced() {
    let mut cl = Cluster::new();
    let expected = cl.c.next_offset();
    let epoch = cl.register(7, 1, "r1");
    assert_eq!(epoch, expected);
    let b = cl.c.image().broker(7).unwrap();
    assert!(b.fenced);
    assert_eq!(b.epoch, epoch);
    assert_eq!(b.rack(), Some("r1"));
    assert_eq!(b.endpoint.node_id, 7);
    assert!(matches!(
        cl.log[epoch as usize].record,
        Some(Record::RegisterBroker(_))
    ));
}

#[test]
fn registering_the_same_incarnation_again_is_idempotent() {
    let mut cl = Cluster::with_brokers(&[1]);
    let epoch = cl.epoch(1);
    let r =
        cl.c.register_broker(&Cluster::registration(1, 1, ""), cl.at(100));
    assert!(r.records.is_empty());
    assert_eq!(code(r.response.error_code), ErrorCode::None);
    assert_eq!(r.response.broker_epoch, epoch);
    assert!(!cl.c.image().broker(1).unwrap().fenced);
}

#[test]
fn a_new_incarnation_fences_the_previous_one_like_a_session_timeout() {
    let mut cl = Cluster::with_brokers(&[1, 2, 3]);
    cl.create("t", 3, 3);
    let old_epoch = cl.epoch(1);
    // Broker 1 leads t-0 ([1, 2, 3]) and follows t-1 ([2, 3, 1]) and t-2 ([3, 1, 2]).
    assert_eq!(cl.partition("t", 0), state(&[1, 2, 3], &[1, 2, 3], 1, 0, 0));

    let r =
        cl.c.register_broker(&Cluster::registration(1, 2, ""), cl.at(10));
    let kinds: Vec<&str> = r
        .records
        .iter()
        .map(|r| match &r.record {
            Some(Record::Partition(_)) => "partition",
            Some(Record::FenceBroker(f)) if f.broker_epoch == old_epoch => "fence-old",
            Some(Record::RegisterBroker(_)) => "register",
            other => panic!("unexpected record {other:?}"),
        })
        .collect();
    assert_eq!(
        kinds,
        [
            "partition",
            "partition",
            "partition",
            "fence-old",
            "register"
        ]
    );
    let new_epoch = cl.c.next_offset() + 4;
    let resp = cl.commit(r);
    assert_eq!(resp.broker_epoch, new_epoch);
    assert!(new_epoch > old_epoch);

    assert_eq!(cl.partition("t", 0), state(&[1, 2, 3], &[2, 3], 2, 1, 1));
    assert_eq!(cl.partition("t", 1), state(&[2, 3, 1], &[2, 3], 2, 0, 1));
    assert_eq!(cl.partition("t", 2), state(&[3, 1, 2], &[3, 2], 3, 0, 1));
    let b = cl.c.image().broker(1).unwrap();
    assert!(b.fenced);
    assert_eq!(b.epoch, new_epoch);

    // The old incarnation is gone for good.
    let mut stale = cl.heartbeat_req(1);
    stale.broker_epoch = old_epoch;
    assert_eq!(
        code(cl.send_heartbeat(&stale, 20).error_code),
        ErrorCode::StaleBrokerEpoch
    );
}

#[test]
fn a_restarted_sole_isr_member_keeps_its_seat_and_leads_again_once_caught_up() {
    let mut cl = Cluster::with_brokers(&[1]);
    cl.create("t", 1, 1);
    cl.register(1, 2, "");
    // Offline, but the ISR is never emptied.
    assert_eq!(cl.partition("t", 0), state(&[1], &[1], NO_LEADER, 1, 1));
    assert_eq!(cl.c.image().offline_partitions_count(), 1);

    let hb = cl.heartbeat(1, 10);
    assert!(!hb.is_fenced);
    assert_eq!(cl.partition("t", 0), state(&[1], &[1], 1, 2, 2));
    assert_eq!(cl.c.image().offline_partitions_count(), 0);
}

#[test]
fn heartbeats_from_unknown_or_stale_brokers_are_refused() {
    let mut cl = Cluster::with_brokers(&[1]);
    let mut req = cl.heartbeat_req(1);
    req.broker_id = 9;
    let r = cl.c.heartbeat(&req, cl.t0);
    assert_eq!(
        code(r.response.error_code),
        ErrorCode::BrokerIdNotRegistered
    );
    assert!(r.records.is_empty());

    let mut req = cl.heartbeat_req(1);
    req.broker_epoch += 1;
    let r = cl.c.heartbeat(&req, cl.t0);
    assert_eq!(code(r.response.error_code), ErrorCode::StaleBrokerEpoch);
    assert!(r.records.is_empty());
    assert!(r.response.is_fenced);
}

#[test]
fn a_broker_is_unfenced_only_once_it_has_caught_up_to_its_registration() {
    let mut cl = Cluster::new();
    let epoch = cl.register(1, 1, "");
    let mut req = cl.heartbeat_req(1);
    req.current_metadata_offset = epoch - 1;
    let r = cl.c.heartbeat(&req, cl.t0);
    assert!(r.records.is_empty());
    assert!(r.response.is_fenced);
    assert!(!r.response.is_caught_up);

    req.current_metadata_offset = epoch;
    let r = cl.c.heartbeat(&req, cl.t0);
    assert_eq!(
        r.records,
        vec![pb::MetadataRecord {
            record: Some(Record::UnfenceBroker(pb::UnfenceBrokerRecord {
                broker_id: 1,
                broker_epoch: epoch
            }))
        }]
    );
    assert!(!r.response.is_fenced);
    assert!(r.response.is_caught_up);
    cl.commit(r);
    assert_eq!(cl.c.live_brokers(), vec![1]);
}

#[test]
fn want_fence_fences_an_unfenced_broker_and_keeps_a_fenced_one_fenced() {
    let mut cl = Cluster::with_brokers(&[1, 2]);
    cl.create("t", 1, 2);
    cl.fence(1);
    assert!(cl.c.image().broker(1).unwrap().fenced);
    assert_eq!(cl.partition("t", 0), state(&[1, 2], &[2], 2, 1, 1));

    let req = pb::BrokerHeartbeatRequest {
        want_fence: true,
        ..cl.heartbeat_req(1)
    };
    let r = cl.c.heartbeat(&req, cl.t0);
    assert!(
        r.records.is_empty(),
        "caught up, but it asked to stay fenced"
    );
    assert!(r.response.is_fenced);
    assert!(!r.response.should_shutdown);
}

#[test]
fn missed_heartbeats_fence_exactly_after_the_session_timeout() {
    let mut cl = Cluster::with_brokers(&[1, 2]);
    // Broker 2 heartbeats at 5000; broker 1 stays silent after t0.
    cl.heartbeat(2, 5_000);
    assert_eq!(
        cl.tick(9_000),
        Vec::<i32>::new(),
        "exactly the timeout is still alive"
    );
    assert_eq!(cl.tick(9_001), vec![1]);
    assert!(cl.c.image().broker(1).unwrap().fenced);
    assert_eq!(cl.tick(14_000), Vec::<i32>::new());
    assert_eq!(cl.tick(14_001), vec![2]);
    assert_eq!(cl.c.image().fenced_brokers_count(), 2);
    // Fenced brokers are not fenced again.
    assert!(cl.c.tick(cl.at(60_000)).records.is_empty());
}

#[test]
fn the_session_timeout_is_configurable() {
    let mut config = ControllerConfig::new(0, CLUSTER_ID);
    config.broker_session_timeout_ms = 1_000;
    let mut cl = Cluster::with_config(config);
    cl.add_brokers(&[1]);
    assert!(cl.tick(1_000).is_empty());
    assert_eq!(cl.tick(1_001), vec![1]);
}

#[test]
fn controlled_shutdown_moves_leadership_then_lets_the_broker_stop() {
    let mut cl = Cluster::with_brokers(&[1, 2, 3]);
    cl.create("t", 3, 3);
    let req = pb::BrokerHeartbeatRequest {
        want_shutdown: true,
        ..cl.heartbeat_req(1)
    };

    let r = cl.c.heartbeat(&req, cl.at(10));
    assert!(
        !r.response.should_shutdown,
        "it still leads t-0 in the committed image"
    );
    assert!(!r.response.is_fenced);
    assert_eq!(
        changed_partitions(&r.records),
        vec![
            TopicPartition::new("t", 0),
            TopicPartition::new("t", 1),
            TopicPartition::new("t", 2)
        ]
    );
    cl.commit(r);
    assert!(cl.c.is_shutting_down(1));
    assert_eq!(cl.partition("t", 0), state(&[1, 2, 3], &[2, 3], 2, 1, 1));
    assert_eq!(cl.partition("t", 1), state(&[2, 3, 1], &[2, 3], 2, 0, 1));
    assert_eq!(cl.partition("t", 2), state(&[3, 1, 2], &[3, 2], 3, 0, 1));
    assert!(!cl.c.image().broker(1).unwrap().fenced);

    // Next heartbeat: it leads nothing, so it is fenced and may stop.
    let req = pb::BrokerHeartbeatRequest {
        want_shutdown: true,
        ..cl.heartbeat_req(1)
    };
    let resp = cl.send_heartbeat(&req, 20);
    assert!(resp.should_shutdown);
    assert!(resp.is_fenced);
    assert!(cl.c.image().broker(1).unwrap().fenced);
    assert!(!cl.c.is_shutting_down(1));
}

#[test]
fn a_broker_in_controlled_shutdown_is_never_elected() {
    let mut cl = Cluster::with_brokers(&[1, 2, 3]);
    cl.create_with_configs("t", 3, 3, &[("unclean.leader.election.enable", "true")]);
    let req = pb::BrokerHeartbeatRequest {
        want_shutdown: true,
        ..cl.heartbeat_req(3)
    };
    let resp = cl.send_heartbeat(&req, 0);
    assert!(!resp.should_shutdown, "it led t-2");
    assert!(cl.c.is_shutting_down(3));
    assert_eq!(cl.partition("t", 2), state(&[3, 1, 2], &[1, 2], 1, 1, 1));
    cl.fence(1);
    cl.fence(2);
    // Unclean election is on and 3 is an unfenced replica, but it is on its way out.
    for p in 0..3 {
        let s = cl.partition("t", p);
        assert_eq!((s.leader, s.isr), (NO_LEADER, vec![2]), "t-{p}");
    }
    assert_eq!(cl.c.image().unclean_elections_total(), 0);
}

#[test]
fn controlled_shutdown_of_the_sole_isr_member_takes_its_partition_offline() {
    let mut cl = Cluster::with_brokers(&[1]);
    cl.create("t", 1, 1);
    let req = pb::BrokerHeartbeatRequest {
        want_shutdown: true,
        ..cl.heartbeat_req(1)
    };
    let resp = cl.send_heartbeat(&req, 0);
    assert!(!resp.should_shutdown);
    assert_eq!(cl.partition("t", 0), state(&[1], &[1], NO_LEADER, 1, 1));
    let resp = cl.send_heartbeat(&req, 10);
    assert!(resp.should_shutdown);
}

#[test]
fn a_broker_leading_nothing_may_shut_down_at_once() {
    let mut cl = Cluster::with_brokers(&[1, 2]);
    cl.create("t", 1, 2); // [1, 2]: 2 only follows
    let req = pb::BrokerHeartbeatRequest {
        want_shutdown: true,
        ..cl.heartbeat_req(2)
    };
    let resp = cl.send_heartbeat(&req, 0);
    assert!(resp.should_shutdown);
    assert!(resp.is_fenced);
    assert_eq!(cl.partition("t", 0), state(&[1, 2], &[1], 1, 0, 1));
}

#[test]
fn a_fenced_broker_asking_to_shut_down_may_stop_at_once() {
    let mut cl = Cluster::new();
    cl.register(1, 1, "");
    let req = pb::BrokerHeartbeatRequest {
        want_shutdown: true,
        ..cl.heartbeat_req(1)
    };
    let r = cl.c.heartbeat(&req, cl.t0);
    assert!(
        r.records.is_empty(),
        "it must not be unfenced on its way out"
    );
    assert!(r.response.should_shutdown);
    assert!(r.response.is_fenced);
}

#[test]
fn a_restarted_controller_gives_every_broker_a_fresh_session() {
    let mut cl = Cluster::with_brokers(&[1, 2]);
    cl.create("t", 1, 2);
    let epoch_before = cl.c.controller_epoch();
    // The old controller last heard from both at t0; the new one starts at 8000.
    let c = Controller::new(
        ControllerConfig::new(5, CLUSTER_ID),
        cl.replayed(),
        cl.at(8_000),
    )
    .unwrap();
    let start = c.start();
    assert_eq!(
        start.records,
        vec![pb::MetadataRecord {
            record: Some(Record::ControllerStart(pb::ControllerStartRecord {
                controller_id: 5,
                controller_epoch: epoch_before + 1
            }))
        }]
    );
    cl.c = c;
    cl.commit(start);
    assert_eq!(cl.c.controller_epoch(), epoch_before + 1);
    assert_eq!(cl.c.image().controller_id(), 5);
    assert!(cl.tick(17_000).is_empty(), "sessions restarted at 8000");
    assert_eq!(cl.tick(17_001), vec![1, 2]);
}

#[test]
fn describe_cluster_lists_every_registered_broker() {
    let mut cl = Cluster::with_brokers(&[1]);
    cl.register(2, 1, "rack-b");
    let d = cl.c.describe_cluster();
    assert_eq!(d.cluster_id, CLUSTER_ID);
    assert_eq!(d.controller_id, 0);
    let summary: Vec<(i32, bool, String, String)> = d
        .brokers
        .iter()
        .map(|b| {
            let e = b.endpoint.clone().unwrap();
            (e.node_id, b.fenced, e.rack, b.metrics_address.clone())
        })
        .collect();
    assert_eq!(
        summary,
        vec![
            (1, false, String::new(), "broker-1:9100".to_owned()),
            (2, true, "rack-b".to_owned(), "broker-2:9100".to_owned())
        ]
    );
    assert_eq!(d.brokers[1].broker_epoch, cl.epoch(2));
}

#[test]
fn a_controlled_shutdown_cannot_be_taken_back() {
    let mut cl = Cluster::with_brokers(&[1, 2]);
    cl.create("t", 1, 2);
    let req = pb::BrokerHeartbeatRequest {
        want_shutdown: true,
        ..cl.heartbeat_req(1)
    };
    assert!(!cl.send_heartbeat(&req, 0).should_shutdown);
    // A plain heartbeat does not make it electable again: it leads nothing now, so it
    // is fenced and told to stop.
    let resp = cl.heartbeat(1, 10);
    assert!(resp.should_shutdown);
    assert!(resp.is_fenced);
    assert_eq!(cl.partition("t", 0), state(&[1, 2], &[2], 2, 1, 1));
}
