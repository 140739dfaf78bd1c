//! AlterTopic: configs changed live, partitions added, every refusal.

use std::collections::HashMap;

use syncline_controller::changed_topic_configs;
use syncline_proto::{pb, ErrorCode};

use crate::support::Cluster;

fn request(
    name: &str,
    set: &[(&str, &str)],
    delete: &[&str],
    partitions: i32,
) -> pb::AlterTopicRequest {
    pb::AlterTopicRequest {
        name: name.to_owned(),
        set_configs: set
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect::<HashMap<_, _>>(),
        delete_configs: delete.iter().map(|k| k.to_string()).collect(),
        partitions,
        validate_only: false,
        forwarded: false,
    }
}

/// Brokers 1-3; t: 2 partitions, RF 2, retention.ms=1000 set at creation.
fn base() -> Cluster {
    let mut cl = Cluster::with_brokers(&[1, 2, 3]);
    cl.create_with_configs("t", 2, 2, &[("retention.ms", "1000")]);
    cl
}

#[test]
fn configs_are_set_and_deleted_live_as_one_record_that_replays() {
    let mut cl = base();
    let r = cl.c.alter_topic(&request(
        "t",
        &[("min.insync.replicas", "2")],
        &["retention.ms"],
        0,
    ));
    assert_eq!(changed_topic_configs(&r.records), vec!["t".to_string()]);
    assert_eq!(r.records.len(), 1, "{r:?}");
    let resp = cl.commit(r);
    assert_eq!(resp.error_code, 0, "{resp:?}");
    assert_eq!(resp.num_partitions, 2);
    // Effective configs: the new override, and the deleted key at its default.
    assert_eq!(resp.configs["min.insync.replicas"], "2");
    assert_eq!(resp.configs["retention.ms"], "604800000");
    let overrides = &cl.c.image().topic("t").unwrap().configs;
    assert_eq!(overrides.len(), 1, "{overrides:?}");
    assert_eq!(overrides["min.insync.replicas"], "2");
    assert_eq!(&cl.replayed(), cl.c.image());
    // The snapshot carries the new configs too.
    let restored =
        syncline_controller::MetadataImage::from_snapshot(&cl.c.image().to_snapshot()).unwrap();
    assert_eq!(&restored, cl.c.image());

    // The same change again: nothing to record.
    let r =
        cl.c.alter_topic(&request("t", &[("min.insync.replicas", "2")], &[], 0));
    assert!(r.records.is_empty(), "{r:?}");
}

#[test]
fn partitions_grow_placed_like_at_creation_and_keep_the_replication_factor() {
    let mut cl = base();
    let before: Vec<_> = (0..2).map(|p| cl.partition("t", p)).collect();
    let resp = {
        let r = cl.c.alter_topic(&request("t", &[], &[], 5));
        assert_eq!(r.records.len(), 3, "{r:?}");
        cl.commit(r)
    };
    assert_eq!(resp.error_code, 0, "{resp:?}");
    assert_eq!(resp.num_partitions, 5);
    for p in 0..2 {
        assert_eq!(
            cl.partition("t", p),
            before[p as usize],
            "existing partitions are untouched"
        );
    }
    for p in 2..5 {
        let new = cl.partition("t", p);
        assert_eq!(new.replicas.len(), 2, "{new:?}");
        assert_eq!(new.isr, new.replicas);
        assert_eq!(new.leader, new.replicas[0]);
        assert_eq!((new.leader_epoch, new.partition_epoch), (0, 0));
    }
    assert_eq!(&cl.replayed(), cl.c.image());
}

#[test]
fn every_refusal_changes_nothing() {
    #[rustfmt::skip]
    let cases: &[(&str, pb::AlterTopicRequest, ErrorCode)] = &[
        ("unknown topic", request("nope", &[("retention.ms", "1")], &[], 0), ErrorCode::UnknownTopicOrPartition),
        ("min ISR above the replication factor", request("t", &[("min.insync.replicas", "3")], &[], 0), ErrorCode::InvalidConfig),
        ("unknown key set", request("t", &[("no.such.key", "1")], &[], 0), ErrorCode::InvalidConfig),
        ("unknown key deleted", request("t", &[], &["no.such.key"], 0), ErrorCode::InvalidConfig),
        ("bad value", request("t", &[("retention.ms", "soon")], &[], 0), ErrorCode::InvalidConfig),
        ("set and deleted", request("t", &[("retention.ms", "5")], &["retention.ms"], 0), ErrorCode::InvalidRequest),
        ("fewer partitions", request("t", &[], &[], 1), ErrorCode::InvalidPartitions),
        ("negative partitions", request("t", &[], &[], -3), ErrorCode::InvalidPartitions),
        ("too many new partitions", request("t", &[], &[], 20_000), ErrorCode::PolicyViolation),
        // A valid config with a refused partition count: neither is made.
        ("all or nothing", request("t", &[("retention.ms", "5")], &[], 1), ErrorCode::InvalidPartitions),
    ];
    for (what, req, expected) in cases {
        let cl = base();
        let r = cl.c.alter_topic(req);
        assert_eq!(
            ErrorCode::from_wire(r.response.error_code),
            *expected,
            "{what}: {r:?}"
        );
        assert!(!r.response.error_message.is_empty(), "{what}");
        assert!(r.records.is_empty(), "{what}: {r:?}");
    }
}

#[test]
fn new_partitions_need_as_many_usable_brokers_as_the_replication_factor() {
    let mut cl = base();
    cl.fence(2);
    cl.fence(3);
    let r = cl.c.alter_topic(&request("t", &[], &[], 3));
    assert_eq!(
        ErrorCode::from_wire(r.response.error_code),
        ErrorCode::InvalidReplicationFactor,
        "{r:?}"
    );
    assert!(r.records.is_empty());
    // A config change alone needs no broker.
    let r =
        cl.c.alter_topic(&request("t", &[("retention.ms", "5")], &[], 0));
    assert_eq!(r.response.error_code, 0, "{r:?}");
}

#[test]
fn validate_only_answers_as_the_change_would_and_records_nothing() {
    let cl = base();
    let mut req = request("t", &[("min.insync.replicas", "2")], &[], 4);
    req.validate_only = true;
    let r = cl.c.alter_topic(&req);
    assert_eq!(r.response.error_code, 0, "{r:?}");
    assert_eq!(r.response.num_partitions, 4);
    assert_eq!(r.response.configs["min.insync.replicas"], "2");
    assert!(r.records.is_empty(), "{r:?}");
}
