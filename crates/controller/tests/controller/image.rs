//! MetadataImage::apply refuses every record that would break the image.

use syncline_controller::{ApplyError, MetadataImage};
use syncline_proto::pb::{self, metadata_record::Record};
use syncline_proto::TopicPartition;

fn rec(r: Record) -> pb::MetadataRecord {
    pb::MetadataRecord { record: Some(r) }
}

fn register(broker_id: i32, broker_epoch: i64) -> Record {
    Record::RegisterBroker(pb::RegisterBrokerRecord {
        broker_id,
        broker_epoch,
        incarnation_id: vec![1; 16].into(),
        endpoint: Some(pb::BrokerEndpoint {
            node_id: broker_id,
            host: "h".into(),
            port: 1,
            rack: String::new(),
        }),
        metrics_address: String::new(),
        listeners: vec![],
    })
}

fn partition(
    topic: &str,
    p: i32,
    replicas: &[i32],
    isr: &[i32],
    leader: i32,
    le: i32,
    pe: i32,
) -> Record {
    Record::Partition(pb::PartitionRecord {
        topic: topic.into(),
        partition: p,
        replicas: replicas.to_vec(),
        isr: isr.to_vec(),
        leader,
        leader_epoch: le,
        partition_epoch: pe,
        adding_replicas: Vec::new(),
        removing_replicas: Vec::new(),
    })
}

/// t-0 moving from [1, 2, 3]: replicas, adding, removing; ISR [1, 2], leader 1,
/// epochs 2/6.
fn reassigning(replicas: &[i32], adding: &[i32], removing: &[i32]) -> Record {
    let Record::Partition(mut r) = partition("t", 0, replicas, &[1, 2], 1, 2, 6) else {
        unreachable!()
    };
    r.adding_replicas = adding.to_vec();
    r.removing_replicas = removing.to_vec();
    Record::Partition(r)
}

/// Controller epoch 1; brokers 1-4 registered at offsets 1-4, 1-3 unfenced (offsets
/// 5-7); topic t (8) with t-0 = [1, 2, 3], ISR [1, 2, 3], leader 1, epochs 2/5 (9).
fn base() -> MetadataImage {
    let records = [
        Record::ControllerStart(pb::ControllerStartRecord {
            controller_id: 0,
            controller_epoch: 1,
        }),
        register(1, 1),
        register(2, 2),
        register(3, 3),
        register(4, 4),
        Record::UnfenceBroker(pb::UnfenceBrokerRecord {
            broker_id: 1,
            broker_epoch: 1,
        }),
        Record::UnfenceBroker(pb::UnfenceBrokerRecord {
            broker_id: 2,
            broker_epoch: 2,
        }),
        Record::UnfenceBroker(pb::UnfenceBrokerRecord {
            broker_id: 3,
            broker_epoch: 3,
        }),
        Record::Topic(pb::TopicRecord {
            name: "t".into(),
            configs: Default::default(),
        }),
        partition("t", 0, &[1, 2, 3], &[1, 2, 3], 1, 2, 5),
    ];
    let mut image = MetadataImage::new();
    for (offset, r) in (0..).zip(records) {
        image.apply(offset, &rec(r)).unwrap();
    }
    assert_eq!(image.next_offset(), 10);
    image
}

fn bad_partition(p: i32, reason: &'static str) -> ApplyError {
    ApplyError::InvalidPartition {
        partition: TopicPartition::new("t", p),
        reason,
    }
}

#[test]
fn apply_refuses_records_that_would_break_the_image() {
    let registration = |id, reason| ApplyError::InvalidRegistration {
        broker_id: id,
        reason,
    };
    let no_endpoint = match register(5, 10) {
        Record::RegisterBroker(r) => Record::RegisterBroker(pb::RegisterBrokerRecord {
            endpoint: None,
            ..r
        }),
        _ => unreachable!(),
    };
    let cases: Vec<(&str, Option<Record>, ApplyError)> = vec![
        ("empty", None, ApplyError::EmptyRecord(10)),
        (
            "same controller epoch",
            Some(Record::ControllerStart(pb::ControllerStartRecord {
                controller_id: 1,
                controller_epoch: 1,
            })),
            ApplyError::StaleControllerEpoch { current: 1, got: 1 },
        ),
        (
            "epoch is not the offset",
            Some(register(5, 9)),
            registration(5, "broker epoch is not the record's offset"),
        ),
        (
            "negative id",
            Some(register(-1, 10)),
            registration(-1, "negative broker id"),
        ),
        (
            "no endpoint",
            Some(no_endpoint),
            registration(5, "no endpoint"),
        ),
        (
            "re-registering a leader",
            Some(register(1, 10)),
            registration(1, "the previous incarnation still leads partitions"),
        ),
        (
            "fencing a leader",
            Some(Record::FenceBroker(pb::FenceBrokerRecord {
                broker_id: 1,
                broker_epoch: 1,
            })),
            ApplyError::FencingLeader(1),
        ),
        (
            "fencing an unknown broker",
            Some(Record::FenceBroker(pb::FenceBrokerRecord {
                broker_id: 9,
                broker_epoch: 1,
            })),
            ApplyError::UnknownBroker {
                broker_id: 9,
                epoch: 1,
            },
        ),
        (
            "unfencing with another epoch",
            Some(Record::UnfenceBroker(pb::UnfenceBrokerRecord {
                broker_id: 4,
                broker_epoch: 3,
            })),
            ApplyError::UnknownBroker {
                broker_id: 4,
                epoch: 3,
            },
        ),
        (
            "topic exists",
            Some(Record::Topic(pb::TopicRecord {
                name: "t".into(),
                configs: Default::default(),
            })),
            ApplyError::TopicExists("t".into()),
        ),
        (
            "remove another incarnation of a topic",
            // t's TopicRecord is at offset 8: its topic id is 8.
            Some(Record::RemoveTopic(pb::RemoveTopicRecord {
                name: "t".into(),
                topic_id: 7,
            })),
            ApplyError::UnknownTopic("t".into()),
        ),
        (
            "remove an unknown topic",
            Some(Record::RemoveTopic(pb::RemoveTopicRecord {
                name: "u".into(),
                topic_id: 8,
            })),
            ApplyError::UnknownTopic("u".into()),
        ),
        (
            "unknown topic",
            Some(partition("u", 0, &[1], &[1], 1, 0, 0)),
            ApplyError::InvalidPartition {
                partition: TopicPartition::new("u", 0),
                reason: "unknown topic",
            },
        ),
        (
            "partition gap",
            Some(partition("t", 2, &[1], &[1], 1, 0, 0)),
            bad_partition(2, "partitions must be created in order"),
        ),
        (
            "negative partition",
            Some(partition("t", -1, &[1], &[1], 1, 0, 0)),
            bad_partition(-1, "negative partition"),
        ),
        (
            "no replicas",
            Some(partition("t", 1, &[], &[1], 1, 0, 0)),
            bad_partition(1, "no replicas"),
        ),
        (
            "duplicate replicas",
            Some(partition("t", 1, &[1, 1], &[1], 1, 0, 0)),
            bad_partition(1, "duplicate replicas"),
        ),
        (
            "empty ISR",
            Some(partition("t", 1, &[1, 2], &[], -1, 0, 0)),
            bad_partition(1, "empty ISR"),
        ),
        (
            "duplicate ISR",
            Some(partition("t", 1, &[1, 2], &[1, 1], 1, 0, 0)),
            bad_partition(1, "duplicate ISR members"),
        ),
        (
            "ISR outside replicas",
            Some(partition("t", 1, &[1, 2], &[1, 3], 1, 0, 0)),
            bad_partition(1, "ISR is not a subset of the replicas"),
        ),
        (
            "leader outside ISR",
            Some(partition("t", 1, &[1, 2], &[2], 1, 0, 0)),
            bad_partition(1, "leader is not in the ISR"),
        ),
        (
            "negative epoch",
            Some(partition("t", 1, &[1, 2], &[1], 1, -1, 0)),
            bad_partition(1, "negative epoch"),
        ),
        (
            "unregistered replica",
            Some(partition("t", 1, &[1, 9], &[1], 1, 0, 0)),
            bad_partition(1, "replica on an unregistered broker"),
        ),
        (
            "fenced leader",
            Some(partition("t", 1, &[4, 1], &[4, 1], 4, 0, 0)),
            bad_partition(1, "leader is a fenced broker"),
        ),
        (
            "new replica not adding",
            Some(partition("t", 0, &[1, 2, 3, 4], &[1, 2], 1, 2, 6)),
            bad_partition(0, "a new replica that is not adding, or in the ISR"),
        ),
        (
            "replica removed outside a reassignment",
            Some(partition("t", 0, &[1, 2], &[1, 2], 1, 2, 6)),
            bad_partition(0, "a replica removed outside a reassignment"),
        ),
        (
            "existing replica marked adding",
            Some(reassigning(&[1, 2, 3], &[3], &[])),
            bad_partition(0, "an existing replica marked adding"),
        ),
        (
            "adding outside the replicas",
            Some(reassigning(&[1, 2, 3], &[4], &[3])),
            bad_partition(0, "adding or removing replicas are not within the replicas"),
        ),
        (
            "removing outside the replicas",
            Some(reassigning(&[1, 2, 4], &[4], &[3])),
            bad_partition(0, "adding or removing replicas are not within the replicas"),
        ),
        (
            "adding and removing",
            Some(reassigning(&[2, 3, 4, 1], &[4], &[4, 1])),
            bad_partition(0, "a replica is both adding and removing"),
        ),
        (
            "duplicate adding",
            Some(reassigning(&[2, 3, 4, 1], &[4, 4], &[1])),
            bad_partition(0, "duplicate adding or removing replicas"),
        ),
        (
            "nothing left",
            Some(reassigning(&[1, 2], &[], &[1, 2])),
            bad_partition(0, "a reassignment with no target replica"),
        ),
        (
            "partition epoch kept",
            Some(partition("t", 0, &[1, 2, 3], &[1, 2], 1, 2, 5)),
            bad_partition(0, "partition epoch did not increase"),
        ),
        (
            "leader epoch backwards",
            Some(partition("t", 0, &[1, 2, 3], &[1, 2, 3], 1, 1, 6)),
            bad_partition(0, "leader epoch went backwards"),
        ),
        (
            "new leader, same epoch",
            Some(partition("t", 0, &[1, 2, 3], &[1, 2, 3], 2, 2, 6)),
            bad_partition(0, "leader changed without a new leader epoch"),
        ),
    ];
    let image = base();
    for (what, record, expected) in cases {
        let mut candidate = image.clone();
        let r = pb::MetadataRecord { record };
        assert_eq!(candidate.apply(10, &r), Err(expected), "{what}");
        assert_eq!(candidate, image, "{what}: a refused record changes nothing");
    }
}

#[test]
fn records_apply_only_at_the_next_offset() {
    let mut image = base();
    let r = rec(register(5, 11));
    assert_eq!(
        image.apply(11, &r),
        Err(ApplyError::OffsetOutOfOrder {
            expected: 10,
            got: 11
        })
    );
    assert_eq!(
        image.apply(9, &r),
        Err(ApplyError::OffsetOutOfOrder {
            expected: 10,
            got: 9
        })
    );
}

#[test]
fn a_leader_from_outside_the_isr_counts_as_an_unclean_election() {
    let mut image = base();
    image
        .apply(10, &rec(partition("t", 0, &[1, 2, 3], &[1], 1, 2, 6)))
        .unwrap();
    assert_eq!(image.unclean_elections_total(), 0);
    image
        .apply(11, &rec(partition("t", 0, &[1, 2, 3], &[2], 2, 3, 7)))
        .unwrap();
    assert_eq!(image.unclean_elections_total(), 1);
    image
        .apply(12, &rec(partition("t", 0, &[1, 2, 3], &[2, 3], 2, 3, 8)))
        .unwrap();
    image
        .apply(13, &rec(partition("t", 0, &[1, 2, 3], &[3], 3, 4, 9)))
        .unwrap();
    assert_eq!(image.unclean_elections_total(), 1, "3 was in the ISR");
}

/// A snapshot of a small live cluster, for the tests that damage one field.
fn snapshot() -> pb::MetadataSnapshot {
    let mut image = MetadataImage::new();
    image.apply(0, &rec(register(1, 0))).unwrap();
    image.apply(1, &rec(register(2, 1))).unwrap();
    image.to_snapshot()
}

#[test]
fn a_snapshot_round_trips() {
    let s = snapshot();
    let image = MetadataImage::from_snapshot(&s).unwrap();
    assert_eq!(image.to_snapshot(), s);
    assert_eq!(image.next_offset(), 2);
    assert_eq!(
        MetadataImage::from_snapshot(&MetadataImage::new().to_snapshot()).unwrap(),
        MetadataImage::new()
    );
}

#[test]
fn from_snapshot_refuses_what_no_log_produces() {
    type Damage = fn(&mut pb::MetadataSnapshot);
    let cases: [(&str, Damage); 8] = [
        ("offset below -1", |s| s.last_applied_offset = -2),
        ("negative controller epoch", |s| s.controller_epoch = -1),
        ("negative broker id", |s| s.brokers[0].broker_id = -3),
        ("broker epoch beyond the offset", |s| s.brokers[1].epoch = 2),
        ("broker without endpoint", |s| s.brokers[0].endpoint = None),
        ("duplicate broker", |s| s.brokers[1].broker_id = 1),
        ("duplicate topic", |s| {
            let t = pb::TopicSnapshot {
                name: "t".into(),
                ..Default::default()
            };
            s.topics = vec![t.clone(), t];
        }),
        ("partition on an unknown broker", |s| {
            s.topics = vec![pb::TopicSnapshot {
                name: "t".into(),
                topic_id: 8,
                configs: Default::default(),
                partitions: vec![pb::PartitionSnapshot {
                    replicas: vec![9],
                    isr: vec![9],
                    leader: -1,
                    leader_epoch: 0,
                    partition_epoch: 0,
                    adding_replicas: vec![],
                    removing_replicas: vec![],
                }],
            }];
        }),
    ];
    for (what, damage) in cases {
        let mut s = snapshot();
        damage(&mut s);
        assert!(
            MetadataImage::from_snapshot(&s).is_err(),
            "{what}: accepted"
        );
    }
}

fn scram(name: &str) -> pb::ScramCredential {
    pb::ScramCredential {
        name: name.into(),
        mechanism: "SCRAM-SHA-256".into(),
        salt: vec![1; 8].into(),
        iterations: 4096,
        stored_key: vec![2; 32].into(),
        server_key: vec![3; 32].into(),
    }
}

fn topic_acl(principal: &str) -> pb::AclBinding {
    pb::AclBinding {
        resource_type: 2,
        resource_name: "t".into(),
        pattern_type: 3,
        principal: principal.into(),
        host: "*".into(),
        operation: 3,
        permission_type: 3,
    }
}

/// `base()` with user alice and an ACL for her (offsets 10 and 11).
fn with_security() -> MetadataImage {
    let mut image = base();
    image
        .apply(
            10,
            &rec(Record::UserScramCredential(pb::UserScramCredentialRecord {
                credential: Some(scram("alice")),
            })),
        )
        .unwrap();
    image
        .apply(
            11,
            &rec(Record::Acl(pb::AclRecord {
                acl: Some(topic_acl("User:alice")),
            })),
        )
        .unwrap();
    image
}

#[test]
fn apply_refuses_user_and_acl_records_that_no_decision_produces() {
    let bad_mechanism = pb::ScramCredential {
        mechanism: "MD5".into(),
        ..scram("bob")
    };
    let cases: Vec<(&str, Record, &str)> = vec![
        (
            "no credential",
            Record::UserScramCredential(pb::UserScramCredentialRecord { credential: None }),
            "without a credential",
        ),
        (
            "a broker's name",
            Record::UserScramCredential(pb::UserScramCredentialRecord {
                credential: Some(scram("broker-2")),
            }),
            "reserved for broker 2",
        ),
        (
            "unknown mechanism",
            Record::UserScramCredential(pb::UserScramCredentialRecord {
                credential: Some(bad_mechanism),
            }),
            "unknown SCRAM mechanism",
        ),
        (
            "missing credential removed",
            Record::RemoveUserScramCredential(pb::RemoveUserScramCredentialRecord {
                name: "alice".into(),
                mechanism: "SCRAM-SHA-512".into(),
            }),
            "no SCRAM-SHA-512 credential",
        ),
        (
            "ACL twice",
            Record::Acl(pb::AclRecord {
                acl: Some(topic_acl("User:alice")),
            }),
            "exists already",
        ),
        (
            "invalid ACL",
            Record::Acl(pb::AclRecord {
                acl: Some(topic_acl("alice")),
            }),
            "invalid ACL",
        ),
        (
            "no ACL",
            Record::RemoveAcl(pb::RemoveAclRecord { acl: None }),
            "without an ACL",
        ),
        (
            "missing ACL removed",
            Record::RemoveAcl(pb::RemoveAclRecord {
                acl: Some(topic_acl("User:bob")),
            }),
            "no such ACL",
        ),
    ];
    let image = with_security();
    for (what, record, words) in cases {
        let mut candidate = image.clone();
        match candidate.apply(12, &rec(record)) {
            Err(ApplyError::InvalidSecurityRecord(why)) => {
                assert!(why.contains(words), "{what}: {why}")
            }
            other => panic!("{what}: {other:?}"),
        }
        assert_eq!(candidate, image, "{what}: a refused record changes nothing");
    }
}

#[test]
fn from_snapshot_refuses_damaged_users_and_acls() {
    type Damage = fn(&mut pb::MetadataSnapshot);
    let cases: [(&str, Damage); 6] = [
        ("invalid credential", |s| {
            s.security.as_mut().unwrap().credentials[0].iterations = 1
        }),
        ("a broker's credential", |s| {
            s.security.as_mut().unwrap().credentials[0].name = "broker-1".into()
        }),
        ("credential twice", |s| {
            let sec = s.security.as_mut().unwrap();
            sec.credentials.push(sec.credentials[0].clone());
        }),
        ("invalid ACL", |s| {
            s.security.as_mut().unwrap().acls[0].host = "a host".into()
        }),
        ("ACL twice", |s| {
            let sec = s.security.as_mut().unwrap();
            sec.acls.push(sec.acls[0].clone());
        }),
        ("credentials but users not initialized", |s| {
            s.users_initialized = false
        }),
    ];
    let snapshot = with_security().to_snapshot();
    assert_eq!(
        MetadataImage::from_snapshot(&snapshot).unwrap(),
        with_security()
    );
    for (what, damage) in cases {
        let mut s = snapshot.clone();
        damage(&mut s);
        assert!(
            MetadataImage::from_snapshot(&s).is_err(),
            "{what}: accepted"
        );
    }
}
