//! CreateTopics: validation, defaults, placement.

use std::collections::{BTreeMap, BTreeSet};

use syncline_controller::{ControllerConfig, MAX_PARTITIONS_PER_REQUEST};
use syncline_proto::pb::{self, metadata_record::Record};
use syncline_proto::ErrorCode;

use crate::support::{state, Cluster, CLUSTER_ID};

fn assignment(cl: &Cluster, topic: &str) -> Vec<Vec<i32>> {
    cl.c.image()
        .topic(topic)
        .unwrap()
        .partitions
        .iter()
        .map(|p| p.replicas.clone())
        .collect()
}

/// (partitions led, replicas hosted) per broker.
fn load(assignment: &[Vec<i32>]) -> BTreeMap<i32, (usize, usize)> {
    let mut load: BTreeMap<i32, (usize, usize)> = BTreeMap::new();
    for replicas in assignment {
        load.entry(replicas[0]).or_default().0 += 1;
        for r in replicas {
            load.entry(*r).or_default().1 += 1;
        }
    }
    load
}

#[test]
fn six_partitions_rf3_on_three_brokers_are_spread_evenly() {
    let mut cl = Cluster::with_brokers(&[1, 2, 3]);
    cl.create("t", 6, 3);
    let a = assignment(&cl, "t");
    for replicas in &a {
        assert_eq!(replicas.iter().collect::<BTreeSet<_>>().len(), 3, "{a:?}");
    }
    assert_eq!(
        load(&a),
        BTreeMap::from([(1, (2, 6)), (2, (2, 6)), (3, (2, 6))])
    );
    // Followers are shifted after each round, so preferred followers differ too.
    assert_eq!(
        a,
        vec![
            vec![1, 2, 3],
            vec![2, 3, 1],
            vec![3, 1, 2],
            vec![1, 3, 2],
            vec![2, 1, 3],
            vec![3, 2, 1]
        ]
    );
}

#[test]
fn placement_is_balanced_for_every_cluster_shape() {
    for brokers in 1..=6 {
        for rf in 1..=brokers {
            for rounds in 1..=3 {
                let ids: Vec<i32> = (1..=brokers).collect();
                let mut cl = Cluster::with_brokers(&ids);
                let partitions = brokers * rounds;
                cl.create("t", partitions, rf);
                let l = load(&assignment(&cl, "t"));
                let expected: BTreeMap<i32, (usize, usize)> = ids
                    .iter()
                    .map(|&id| (id, (rounds as usize, (rounds * rf) as usize)))
                    .collect();
                assert_eq!(
                    l, expected,
                    "{brokers} brokers, RF {rf}, {partitions} partitions"
                );
            }
        }
    }
}

#[test]
fn successive_topics_start_on_different_brokers() {
    let mut cl = Cluster::with_brokers(&[1, 2, 3]);
    for name in ["a", "b", "c"] {
        cl.create(name, 1, 1);
    }
    let leaders: Vec<i32> = ["a", "b", "c"]
        .iter()
        .map(|t| cl.partition(t, 0).leader)
        .collect();
    assert_eq!(leaders, [1, 2, 3]);
}

#[test]
fn placement_is_deterministic() {
    let run = || {
        let mut cl = Cluster::with_brokers(&[1, 2, 3, 4, 5]);
        cl.create("a", 7, 3);
        cl.create("b", 3, 2);
        (assignment(&cl, "a"), assignment(&cl, "b"))
    };
    assert_eq!(run(), run());
}

fn racked_cluster(racks: &[(i32, &str)]) -> Cluster {
    let mut cl = Cluster::new();
    for &(id, rack) in racks {
        cl.register(id, 1, rack);
        assert!(!cl.heartbeat(id, 0).is_fenced);
    }
    cl
}

#[test]
fn replicas_of_a_partition_go_to_distinct_racks() {
    let mut cl = racked_cluster(&[(1, "a"), (2, "a"), (3, "b"), (4, "b"), (5, "c"), (6, "c")]);
    cl.create("t", 12, 3);
    let rack = |id: i32| cl.c.image().broker(id).unwrap().rack().unwrap().to_owned();
    let a = assignment(&cl, "t");
    for replicas in &a {
        let racks: BTreeSet<String> = replicas.iter().map(|&r| rack(r)).collect();
        assert_eq!(racks.len(), 3, "{replicas:?} in {a:?}");
    }
    let l = load(&a);
    assert!(l.values().all(|&(leads, _)| leads == 2), "{l:?}");
}

#[test]
fn with_fewer_racks_than_replicas_every_rack_is_used() {
    let mut cl = racked_cluster(&[(1, "a"), (2, "a"), (3, "a"), (4, "b")]);
    cl.create("t", 8, 2);
    for replicas in assignment(&cl, "t") {
        assert!(
            replicas.contains(&4) && replicas.len() == 2,
            "{replicas:?}: each partition needs rack b"
        );
    }
}

#[test]
fn a_new_partition_starts_with_every_replica_in_sync_and_its_first_replica_leading() {
    let mut cl = Cluster::with_brokers(&[1, 2, 3]);
    let req = pb::CreateTopicsRequest {
        topics: vec![Cluster::topic("t", 2, 2)],
        timeout_ms: 0,
        validate_only: false,
        forwarded: false,
        auto_create: false,
    };
    let r = cl.c.create_topics(&req);
    assert!(
        matches!(&r.records[0].record, Some(Record::Topic(t)) if t.name == "t" && t.configs.is_empty())
    );
    assert_eq!(r.records.len(), 3);
    cl.commit(r);
    assert_eq!(cl.partition("t", 0), state(&[1, 2], &[1, 2], 1, 0, 0));
    assert_eq!(cl.partition("t", 1), state(&[2, 3], &[2, 3], 2, 0, 0));
}

#[test]
fn defaults_fill_in_and_are_echoed() {
    let mut config = ControllerConfig::new(0, CLUSTER_ID);
    config.num_partitions = 3;
    config.default_replication_factor = 2;
    config.topic_defaults.min_insync_replicas = 2;
    let mut cl = Cluster::with_config(config);
    cl.add_brokers(&[1, 2, 3]);
    let mut t = Cluster::topic("t", -1, -1);
    t.configs.insert("retention.ms".into(), " 1000 ".into());
    t.configs
        .insert("unclean.leader.election.enable".into(), "TRUE".into());
    let result = cl.create_topics(vec![t]).remove(0);
    assert_eq!(ErrorCode::from_wire(result.error_code), ErrorCode::None);
    assert_eq!((result.num_partitions, result.replication_factor), (3, 2));
    let echoed: BTreeMap<String, String> = result.configs.into_iter().collect();
    let expected: BTreeMap<String, String> = [
        ("min.insync.replicas", "2"),
        ("unclean.leader.election.enable", "true"),
        ("retention.ms", "1000"),
        ("retention.bytes", "-1"),
        ("segment.bytes", "1073741824"),
        ("segment.ms", "604800000"),
        ("replica.lag.time.max.ms", "30000"),
        ("flush.messages", "9223372036854775807"),
        ("flush.ms", "9223372036854775807"),
        ("compression.type", "producer"),
        ("message.timestamp.type", "CreateTime"),
    ]
    .into_iter()
    .map(|(k, v)| (k.to_owned(), v.to_owned()))
    .collect();
    assert_eq!(echoed, expected);
    // The topic stores its overrides only, in canonical form.
    let stored = &cl.c.image().topic("t").unwrap().configs;
    assert_eq!(
        stored,
        &BTreeMap::from([
            ("retention.ms".to_owned(), "1000".to_owned()),
            (
                "unclean.leader.election.enable".to_owned(),
                "true".to_owned()
            )
        ])
    );
    assert_eq!(cl.c.image().topic("t").unwrap().partitions.len(), 3);
    assert_eq!(cl.c.topic_configs("t").unwrap(), expected);
}

#[test]
fn validate_only_answers_without_records() {
    let cl = Cluster::with_brokers(&[1, 2]);
    let req = pb::CreateTopicsRequest {
        topics: vec![Cluster::topic("t", 4, 2), Cluster::topic("bad name", 1, 1)],
        timeout_ms: 0,
        validate_only: true,
        forwarded: false,
        auto_create: false,
    };
    let r = cl.c.create_topics(&req);
    assert!(r.records.is_empty());
    let codes: Vec<ErrorCode> = r
        .response
        .topics
        .iter()
        .map(|t| ErrorCode::from_wire(t.error_code))
        .collect();
    assert_eq!(codes, [ErrorCode::None, ErrorCode::InvalidTopicException]);
    assert_eq!(r.response.topics[0].num_partitions, 4);
}

/// Name, partitions, RF, configs, expected, a word the message must contain.
type Case<'a> = (
    &'a str,
    i32,
    i32,
    Vec<(&'a str, &'a str)>,
    ErrorCode,
    &'a str,
);

#[test]
fn invalid_topics_are_refused_one_by_one() {
    use ErrorCode::*;
    let mut cl = Cluster::with_brokers(&[1, 2, 3, 4]);
    cl.create("existing", 1, 1);
    cl.create("has_underscore", 1, 1);
    cl.fence(4); // 3 usable brokers
    let long = "x".repeat(250);
    let max = "y".repeat(249);
    #[rustfmt::skip]
    let cases: Vec<Case<'_>> = vec![
        ("", 1, 1, vec![], InvalidTopicException, "empty"),
        (".", 1, 1, vec![], InvalidTopicException, "\".\""),
        ("..", 1, 1, vec![], InvalidTopicException, "\"..\""),
        ("a b", 1, 1, vec![], InvalidTopicException, "characters"),
        ("ümlaut", 1, 1, vec![], InvalidTopicException, "characters"),
        (long.as_str(), 1, 1, vec![], InvalidTopicException, "249"),
        (max.as_str(), 1, 1, vec![], None, ""),
        ("existing", 1, 1, vec![], TopicAlreadyExists, "existing"),
        ("has.underscore", 1, 1, vec![], InvalidTopicException, "collides"),
        ("p0", 0, 1, vec![], InvalidPartitions, "partitions"),
        ("p-2", -2, 1, vec![], InvalidPartitions, "partitions"),
        ("rf0", 1, 0, vec![], InvalidReplicationFactor, ">= 1"),
        ("rf-2", 1, -2, vec![], InvalidReplicationFactor, ">= 1"),
        ("rf4", 1, 4, vec![], InvalidReplicationFactor, "available brokers (3)"),
        ("rf3", 1, 3, vec![], None, ""),
        ("unknown-key", 1, 3, vec![("foo.bar", "1")], InvalidConfig, "foo.bar"),
        ("min-isr-0", 1, 3, vec![("min.insync.replicas", "0")], InvalidConfig, "from 1 to 3"),
        ("min-isr-4", 1, 3, vec![("min.insync.replicas", "4")], InvalidConfig, "min.insync.replicas"),
        ("min-isr-3", 1, 3, vec![("min.insync.replicas", "3")], None, ""),
        ("min-isr-x", 1, 3, vec![("min.insync.replicas", "x")], InvalidConfig, "\"x\""),
        ("unclean-yes", 1, 3, vec![("unclean.leader.election.enable", "yes")], InvalidConfig, "true or false"),
        ("ret-ms", 1, 1, vec![("retention.ms", "-2")], InvalidConfig, "retention.ms"),
        ("ret-ms-ok", 1, 1, vec![("retention.ms", "-1")], None, ""),
        ("ret-bytes", 1, 1, vec![("retention.bytes", "-2")], InvalidConfig, "retention.bytes"),
        ("seg-bytes", 1, 1, vec![("segment.bytes", "1023")], InvalidConfig, "1024"),
        ("seg-bytes-big", 1, 1, vec![("segment.bytes", "2147483648")], InvalidConfig, "2147483647"),
        ("seg-bytes-ok", 1, 1, vec![("segment.bytes", "1024")], None, ""),
        ("seg-ms", 1, 1, vec![("segment.ms", "0")], InvalidConfig, "segment.ms"),
        ("lag", 1, 1, vec![("replica.lag.time.max.ms", "0")], InvalidConfig, "replica.lag.time.max.ms"),
        ("flush-msgs", 1, 1, vec![("flush.messages", "0")], InvalidConfig, "flush.messages"),
        ("flush-ms", 1, 1, vec![("flush.ms", "-1")], InvalidConfig, "flush.ms"),
        ("flush-ms-ok", 1, 1, vec![("flush.ms", "0")], None, ""),
        ("ts-type", 1, 1, vec![("message.timestamp.type", "BrokerTime")], InvalidConfig, "CreateTime or LogAppendTime"),
        ("ts-type-ok", 1, 1, vec![("message.timestamp.type", "logappendtime")], None, ""),
    ];
    let topics: Vec<pb::CreatableTopic> = cases
        .iter()
        .map(|(name, p, rf, configs, _, _)| {
            let mut t = Cluster::topic(name, *p, *rf);
            t.configs = configs
                .iter()
                .map(|(k, v)| (k.to_string(), v.to_string()))
                .collect();
            t
        })
        .collect();
    let results = cl.create_topics(topics);
    assert_eq!(results.len(), cases.len());
    for ((name, _, _, _, expected, word), result) in cases.iter().zip(&results) {
        assert_eq!(&result.name, name);
        assert_eq!(
            ErrorCode::from_wire(result.error_code),
            *expected,
            "{name}: {}",
            result.error_message
        );
        assert!(
            result.error_message.contains(word),
            "{name}: {:?} lacks {word:?}",
            result.error_message
        );
        let exists = cl.c.image().topic(name).is_some();
        assert_eq!(
            exists,
            *expected == None || *expected == TopicAlreadyExists,
            "{name}"
        );
        if *expected != None {
            assert_eq!(
                (result.num_partitions, result.replication_factor),
                (-1, -1),
                "{name}"
            );
        }
    }
}

#[test]
fn a_name_twice_in_one_request_is_refused_both_times() {
    let mut cl = Cluster::with_brokers(&[1]);
    let results = cl.create_topics(vec![
        Cluster::topic("t", 1, 1),
        Cluster::topic("t", 1, 1),
        Cluster::topic("u", 1, 1),
    ]);
    let codes: Vec<ErrorCode> = results
        .iter()
        .map(|t| ErrorCode::from_wire(t.error_code))
        .collect();
    assert_eq!(
        codes,
        [
            ErrorCode::InvalidRequest,
            ErrorCode::InvalidRequest,
            ErrorCode::None
        ]
    );
    assert!(cl.c.image().topic("t").is_none());
}

#[test]
fn names_colliding_within_one_request_are_refused() {
    let mut cl = Cluster::with_brokers(&[1]);
    let results = cl.create_topics(vec![
        Cluster::topic("a.b", 1, 1),
        Cluster::topic("a_b", 1, 1),
    ]);
    let codes: Vec<ErrorCode> = results
        .iter()
        .map(|t| ErrorCode::from_wire(t.error_code))
        .collect();
    assert_eq!(codes, [ErrorCode::None, ErrorCode::InvalidTopicException]);
}

#[test]
fn too_many_partitions_in_one_request_are_a_policy_violation() {
    let cl = Cluster::with_brokers(&[1]);
    let half = i32::try_from(MAX_PARTITIONS_PER_REQUEST / 2).unwrap();
    let req = pb::CreateTopicsRequest {
        topics: vec![
            Cluster::topic("a", half, 1),
            Cluster::topic("b", half + 1, 1),
        ],
        timeout_ms: 0,
        validate_only: false,
        forwarded: false,
        auto_create: false,
    };
    let r = cl.c.create_topics(&req);
    assert!(r.records.is_empty());
    assert!(r
        .response
        .topics
        .iter()
        .all(|t| ErrorCode::from_wire(t.error_code) == ErrorCode::PolicyViolation));
    // A huge count on its own is refused without allocating for it.
    let req = pb::CreateTopicsRequest {
        topics: vec![Cluster::topic("c", i32::MAX, 1)],
        timeout_ms: 0,
        validate_only: false,
        forwarded: false,
        auto_create: false,
    };
    assert_eq!(
        ErrorCode::from_wire(cl.c.create_topics(&req).response.topics[0].error_code),
        ErrorCode::PolicyViolation
    );
}

#[test]
fn fenced_and_shutting_down_brokers_get_no_new_replicas() {
    let mut cl = Cluster::with_brokers(&[1, 2, 3, 4]);
    cl.create("led-by-1", 1, 1);
    cl.fence(4);
    let req = pb::BrokerHeartbeatRequest {
        want_shutdown: true,
        ..cl.heartbeat_req(1)
    };
    cl.send_heartbeat(&req, 0);
    assert!(cl.c.is_shutting_down(1));
    cl.create("t", 6, 2);
    let hosts: BTreeSet<i32> = assignment(&cl, "t").into_iter().flatten().collect();
    assert_eq!(hosts, BTreeSet::from([2, 3]));
}

type ConfigChange = fn(&mut ControllerConfig);

#[test]
fn a_controller_with_an_invalid_configuration_does_not_start() {
    let cases: Vec<(ConfigChange, &str)> = vec![
        (|c| c.num_partitions = 0, "num_partitions"),
        (
            |c| c.default_replication_factor = 0,
            "default_replication_factor",
        ),
        (
            |c| c.broker_session_timeout_ms = 0,
            "broker_session_timeout_ms",
        ),
        (|c| c.topic_defaults.segment_bytes = 10, "segment.bytes"),
        (
            |c| c.topic_defaults.min_insync_replicas = 0,
            "min.insync.replicas",
        ),
        (|c| c.topic_defaults.flush_ms = -1, "flush.ms"),
    ];
    for (mutate, key) in cases {
        let mut config = ControllerConfig::new(0, CLUSTER_ID);
        mutate(&mut config);
        let err = syncline_controller::Controller::new(
            config,
            Default::default(),
            tokio::time::Instant::now(),
        )
        .unwrap_err();
        assert_eq!(err.key, key);
    }
}

/// An auto-creating request (a Metadata request's unknown topics) creates
/// topics in order until its budget is spent; the rest are refused without
/// being looked at (a bad name among them is not even validated), so naming
/// many topics costs the controller little.
#[test]
fn an_auto_creating_request_stops_looking_once_its_budget_is_spent() {
    let mut config = ControllerConfig::new(0, CLUSTER_ID);
    config.auto_create_max_partitions_per_request = 2;
    let mut cl = Cluster::with_config(config);
    cl.add_brokers(&[1]);
    let request = |auto_create| pb::CreateTopicsRequest {
        topics: vec![
            Cluster::topic("a", -1, -1),
            Cluster::topic("b", -1, -1),
            Cluster::topic("c", -1, -1),
            Cluster::topic("bad name", -1, -1),
        ],
        timeout_ms: 0,
        validate_only: false,
        forwarded: false,
        auto_create,
    };
    let codes = |r: &pb::CreateTopicsResponse| -> Vec<ErrorCode> {
        r.topics
            .iter()
            .map(|t| ErrorCode::from_wire(t.error_code))
            .collect()
    };
    let r = cl.c.create_topics(&request(false));
    assert_eq!(
        codes(&r.response),
        [
            ErrorCode::None,
            ErrorCode::None,
            ErrorCode::None,
            ErrorCode::InvalidTopicException
        ]
    );
    let r = cl.c.create_topics(&request(true));
    assert_eq!(
        codes(&r.response),
        [
            ErrorCode::None,
            ErrorCode::None,
            ErrorCode::PolicyViolation,
            ErrorCode::PolicyViolation
        ]
    );
    let response = cl.commit(r);
    assert!(response.topics[2]
        .error_message
        .contains("auto_create_topics_max_partitions_per_request"));
    assert_eq!(cl.c.image().partition_count(), 2);
}
