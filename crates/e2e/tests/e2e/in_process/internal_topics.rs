//! `__consumer_offsets` as Kafka treats an internal topic, whichever request
//! names it: a Metadata request that auto-creates it gets the offsets topic's
//! settings, not the broker defaults; clients cannot delete it, give it more
//! partitions or a retention that would delete groups' commits.

use std::collections::BTreeMap;
use std::time::Duration;

use syncline_client::Connection;
use syncline_e2e::inprocess::*;
use syncline_e2e::wait_for;
use syncline_proto::pb::{self, request::Body, response::Body as Resp};
use syncline_proto::{ErrorCode, OFFSETS_TOPIC};

/// Broker defaults that differ from every offsets topic setting, so that a topic
/// created with the defaults shows it.
const CONFIG: &str = "num_partitions = 1\n\
                      retention_ms = 604800000\n\
                      offsets_topic_num_partitions = 4\n\
                      offsets_topic_replication_factor = 1\n";

async fn metadata(conn: &Connection, topic: &str, create: bool) -> pb::MetadataResponse {
    match conn
        .send(Body::Metadata(pb::MetadataRequest {
            topics: vec![topic.to_string()],
            allow_auto_topic_creation: create,
            ..Default::default()
        }))
        .await
        .unwrap()
    {
        Resp::Metadata(m) => m,
        other => panic!("unexpected {other:?}"),
    }
}

async fn topic_configs(conn: &Connection, topic: &str) -> BTreeMap<String, String> {
    match conn
        .send(Body::DescribeConfigs(pb::DescribeConfigsRequest {
            resources: vec![pb::ConfigResource {
                resource_type: 2,
                resource_name: topic.to_string(),
                keys: vec![],
            }],
        }))
        .await
        .unwrap()
    {
        Resp::DescribeConfigs(r) => r.results[0]
            .configs
            .iter()
            .map(|c| (c.name.clone(), c.value.clone()))
            .collect(),
        other => panic!("unexpected {other:?}"),
    }
}

async fn create(conn: &Connection, topic: pb::CreatableTopic) -> (ErrorCode, String) {
    match conn
        .send(Body::CreateTopics(pb::CreateTopicsRequest {
            topics: vec![topic],
            timeout_ms: 10_000,
            validate_only: false,
            forwarded: false,
            auto_create: false,
        }))
        .await
        .unwrap()
    {
        Resp::CreateTopics(r) => (
            ErrorCode::from_wire(r.topics[0].error_code),
            r.topics[0].error_message.clone(),
        ),
        other => panic!("unexpected {other:?}"),
    }
}

fn creatable(name: &str, partitions: i32, rf: i32) -> pb::CreatableTopic {
    pb::CreatableTopic {
        name: name.to_string(),
        num_partitions: partitions,
        replication_factor: rf,
        configs: Default::default(),
    }
}

async fn alter(conn: &Connection, request: pb::AlterTopicRequest) -> (ErrorCode, String) {
    match conn.send(Body::AlterTopic(request)).await.unwrap() {
        Resp::AlterTopic(r) => (ErrorCode::from_wire(r.error_code), r.error_message),
        other => panic!("unexpected {other:?}"),
    }
}

fn alter_request(set: &[(&str, &str)], delete: &[&str], partitions: i32) -> pb::AlterTopicRequest {
    pb::AlterTopicRequest {
        name: OFFSETS_TOPIC.to_string(),
        set_configs: set
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect(),
        delete_configs: delete.iter().map(|k| k.to_string()).collect(),
        partitions,
        validate_only: false,
        forwarded: false,
    }
}

/// Kafka's AutoTopicCreationManager: a Metadata request that auto-creates
/// `__consumer_offsets` creates it with `offsets.topic.num.partitions`,
/// `offsets.topic.replication.factor` and the offsets topic's configs.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn metadata_auto_creates_the_offsets_topic_with_its_own_settings() {
    let cluster = TestCluster::start(1, CONFIG).await;
    let conn = cluster.connect(1).await;
    let m = metadata(&conn, OFFSETS_TOPIC, true).await;
    assert_eq!(m.topics.len(), 1, "{m:?}");
    let m = metadata(&conn, OFFSETS_TOPIC, false).await;
    assert_eq!(
        ErrorCode::from_wire(m.topics[0].error_code),
        ErrorCode::None,
        "{m:?}"
    );
    assert_eq!(m.topics[0].partitions.len(), 4, "{m:?}");
    let configs = topic_configs(&conn, OFFSETS_TOPIC).await;
    assert_eq!(configs["retention.ms"], "-1", "{configs:?}");
    assert_eq!(configs["retention.bytes"], "-1", "{configs:?}");
    // An ordinary topic still gets the broker defaults.
    metadata(&conn, "plain", true).await;
    assert_eq!(
        metadata(&conn, "plain", false).await.topics[0]
            .partitions
            .len(),
        1
    );
    assert_eq!(
        topic_configs(&conn, "plain").await["retention.ms"],
        "604800000"
    );
}

/// A client's CreateTopics of `__consumer_offsets` gets the same settings when it
/// leaves them unset, and is refused when it asks for others: the topic a group
/// hashes onto has the partition count the cluster is configured for.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn create_topics_makes_the_offsets_topic_only_with_its_own_settings() {
    let cluster = TestCluster::start(1, CONFIG).await;
    let conn = cluster.connect(1).await;
    let (code, message) = create(&conn, creatable(OFFSETS_TOPIC, 2, 1)).await;
    assert_eq!(code, ErrorCode::PolicyViolation, "{message}");
    assert!(
        message.contains("offsets_topic_num_partitions"),
        "{message}"
    );
    assert!(metadata(&conn, OFFSETS_TOPIC, false).await.topics[0]
        .partitions
        .is_empty());
    // A name that would collide with it is refused before it exists.
    let (code, message) = create(&conn, creatable("__consumer.offsets", 1, 1)).await;
    assert_eq!(code, ErrorCode::InvalidTopicException, "{message}");

    let (code, message) = create(&conn, creatable(OFFSETS_TOPIC, -1, -1)).await;
    assert_eq!(code, ErrorCode::None, "{message}");
    assert_eq!(
        metadata(&conn, OFFSETS_TOPIC, false).await.topics[0]
            .partitions
            .len(),
        4
    );
    let (code, message) = create(&conn, creatable(OFFSETS_TOPIC, -1, -1)).await;
    assert_eq!(code, ErrorCode::TopicAlreadyExists, "{message}");
}

/// Nothing a client asks of `__consumer_offsets` loses committed offsets: not
/// deleting it (Kafka's tool: "is a kafka internal topic and is not allowed to be
/// marked for deletion"), not more partitions (Kafka's tool: "The number of
/// partitions for the offsets topic cannot be changed"), not a retention; other
/// configs still change.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn clients_cannot_delete_or_reshape_the_offsets_topic() {
    let cluster = TestCluster::start(1, CONFIG).await;
    let conn = cluster.connect(1).await;
    // Created as the first group asks.
    match conn
        .send(Body::FindCoordinator(pb::FindCoordinatorRequest {
            key: "g".into(),
            key_type: 0,
        }))
        .await
        .unwrap()
    {
        Resp::FindCoordinator(r) => assert_eq!(r.error_code, 0, "{r:?}"),
        other => panic!("unexpected {other:?}"),
    }
    let before = metadata(&conn, OFFSETS_TOPIC, false).await.topics[0].clone();
    assert_eq!(before.partitions.len(), 4);

    match conn
        .send(Body::DeleteTopics(pb::DeleteTopicsRequest {
            topics: vec![OFFSETS_TOPIC.to_string()],
            ..Default::default()
        }))
        .await
        .unwrap()
    {
        Resp::DeleteTopics(r) => {
            let t = &r.topics[0];
            assert_eq!(
                ErrorCode::from_wire(t.error_code),
                ErrorCode::PolicyViolation,
                "{t:?}"
            );
            assert!(t.error_message.contains("cannot be deleted"), "{t:?}");
        }
        other => panic!("unexpected {other:?}"),
    }
    for (request, word) in [
        (alter_request(&[], &[], 5), "partitions"),
        (
            alter_request(&[("retention.ms", "60000")], &[], 0),
            "retention",
        ),
        (
            alter_request(&[("retention.bytes", "1048576")], &[], 0),
            "retention",
        ),
        (alter_request(&[], &["retention.ms"], 0), "retention"),
        (
            alter_request(&[("unclean.leader.election.enable", "true")], &[], 0),
            "unclean",
        ),
    ] {
        let asked = format!("{request:?}");
        let (code, message) = alter(&conn, request).await;
        assert_eq!(code, ErrorCode::PolicyViolation, "{asked}: {message}");
        assert!(message.contains(word), "{asked}: {message}");
    }
    let after = metadata(&conn, OFFSETS_TOPIC, false).await.topics[0].clone();
    assert_eq!(after, before);
    assert_eq!(
        topic_configs(&conn, OFFSETS_TOPIC).await["retention.ms"],
        "-1"
    );

    let (code, message) = alter(&conn, alter_request(&[("segment.ms", "3600000")], &[], 0)).await;
    assert_eq!(code, ErrorCode::None, "{message}");
    // The broker's metadata cache takes the committed change a moment later.
    wait_for("segment.ms to change", Duration::from_secs(10), || async {
        topic_configs(&conn, OFFSETS_TOPIC).await["segment.ms"] == "3600000"
    })
    .await;
}

/// One step past Kafka (`offsets_topic_eager_creation`): the controller creates
/// `__consumer_offsets` as soon as enough brokers are up for its replication
/// factor, so a cluster that loses a broker before its first group still serves
/// groups (created on the first group's FindCoordinator, the topic would need 3
/// brokers and get 2: COORDINATOR_NOT_AVAILABLE for good).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_eagerly_created_offsets_topic_serves_groups_after_a_broker_is_lost() {
    let mut cluster = TestCluster::start(
        3,
        "offsets_topic_eager_creation = true\n\
         offsets_topic_num_partitions = 3\n\
         offsets_topic_replication_factor = 3\n",
    )
    .await;
    cluster.create_topic("t", 1, 2, &[]).await;
    let conn = cluster.connect(1).await;
    // Nobody asked for it: the controller created it once the three were up.
    wait_for(
        "the controller to create the offsets topic",
        Duration::from_secs(10),
        || async {
            metadata(&conn, OFFSETS_TOPIC, false).await.topics[0]
                .partitions
                .len()
                == 3
        },
    )
    .await;
    cluster.stop(3).await;

    // The first group finds a coordinator among the brokers left, and commits.
    let coordinator = std::cell::Cell::new(None);
    let (found, conn) = (&coordinator, &conn);
    wait_for(
        "a coordinator on broker 1 or 2",
        Duration::from_secs(20),
        || async move {
            let asked = conn
                .send(Body::FindCoordinator(pb::FindCoordinatorRequest {
                    key: "g".into(),
                    key_type: 0,
                }))
                .await;
            if let Ok(Resp::FindCoordinator(r)) = asked {
                found.set(r.coordinator.map(|c| c.node_id).filter(|&id| id != 3));
            }
            found.get().is_some()
        },
    )
    .await;
    let at = cluster.connect(coordinator.get().unwrap()).await;
    let commit = pb::OffsetCommitRequest {
        group_id: "g".into(),
        generation_id: -1,
        member_id: String::new(),
        topics: vec![pb::OffsetCommitTopic {
            name: "t".into(),
            partitions: vec![pb::OffsetCommitPartition {
                partition: 0,
                offset: 42,
                leader_epoch: -1,
                metadata: None,
            }],
        }],
    };
    match at.send(Body::OffsetCommit(commit)).await.unwrap() {
        Resp::OffsetCommit(r) => assert_eq!(r.topics[0].partitions[0].error_code, 0, "{r:?}"),
        other => panic!("unexpected {other:?}"),
    }
    match at
        .send(Body::OffsetFetch(pb::OffsetFetchRequest {
            group_id: "g".into(),
            topics: vec![],
            all: true,
        }))
        .await
        .unwrap()
    {
        Resp::OffsetFetch(r) => assert_eq!(r.topics[0].partitions[0].offset, 42, "{r:?}"),
        other => panic!("unexpected {other:?}"),
    }
}
