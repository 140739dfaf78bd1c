//! Auto-creation is bounded: one Metadata request creates at most
//! `auto_create_topics_max_partitions_per_request` partitions, and none once the
//! cluster would pass `auto_create_topics_max_cluster_partitions`; what is refused
//! is answered `POLICY_VIOLATION` per topic, and CreateTopics is not bound.

use std::collections::BTreeMap;

use syncline_client::Connection;
use syncline_e2e::inprocess::*;
use syncline_proto::pb::{self, request::Body, response::Body as Resp};
use syncline_proto::{ErrorCode, OFFSETS_TOPIC};

const CONFIG: &str = "num_partitions = 2\n\
                      auto_create_topics_max_partitions_per_request = 5\n\
                      auto_create_topics_max_cluster_partitions = 9\n\
                      offsets_topic_num_partitions = 3\n\
                      offsets_topic_replication_factor = 1\n";

/// Each topic named: its error code and partition count.
async fn metadata(
    conn: &Connection,
    topics: Vec<String>,
    create: bool,
) -> BTreeMap<String, (ErrorCode, usize)> {
    match conn
        .send(Body::Metadata(pb::MetadataRequest {
            topics,
            allow_auto_topic_creation: create,
            ..Default::default()
        }))
        .await
        .unwrap()
    {
        Resp::Metadata(m) => m
            .topics
            .into_iter()
            .map(|t| {
                (
                    t.name,
                    (ErrorCode::from_wire(t.error_code), t.partitions.len()),
                )
            })
            .collect(),
        other => panic!("unexpected {other:?}"),
    }
}

/// The cluster's partitions, every topic's.
async fn cluster_partitions(conn: &Connection) -> usize {
    metadata(conn, vec![], false)
        .await
        .values()
        .map(|(_, n)| n)
        .sum()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_metadata_request_auto_creates_within_the_bounds_and_no_further() {
    let cluster = TestCluster::start(1, CONFIG).await;
    let conn = cluster.connect(1).await;

    // A thousand unknown names: the first two topics (2 partitions each) fit the
    // request's 5 partitions, the rest are refused, each with the reason.
    let names: Vec<String> = (0..1000).map(|i| format!("t{i:04}")).collect();
    let answer = metadata(&conn, names.clone(), true).await;
    let created: Vec<&String> = answer
        .iter()
        .filter(|(_, (code, _))| *code == ErrorCode::None)
        .map(|(name, _)| name)
        .collect();
    assert_eq!(created.len(), 2, "{} of 1000 created", created.len());
    assert_eq!(created, ["t0000", "t0001"]);
    assert!(answer
        .iter()
        .skip(2)
        .all(|(_, answer)| *answer == (ErrorCode::PolicyViolation, 0)));
    assert_eq!(cluster_partitions(&conn).await, 4);

    // Two more topics take the cluster to 8; then a topic of 2 partitions, within
    // the request's bound, would take it past 9.
    let answer = metadata(&conn, vec!["u1".into(), "u2".into()], true).await;
    assert_eq!(answer["u1"], (ErrorCode::None, 2), "{answer:?}");
    assert_eq!(answer["u2"], (ErrorCode::None, 2), "{answer:?}");
    let answer = metadata(&conn, vec!["u3".into()], true).await;
    assert_eq!(answer["u3"], (ErrorCode::PolicyViolation, 0), "{answer:?}");
    assert_eq!(cluster_partitions(&conn).await, 8);

    // The internal topic is not bound by it, nor is CreateTopics.
    let answer = metadata(&conn, vec![OFFSETS_TOPIC.into()], true).await;
    assert_eq!(answer[OFFSETS_TOPIC], (ErrorCode::None, 3), "{answer:?}");
    cluster.create_topic("explicit", 4, 1, &[]).await;
    assert_eq!(cluster_partitions(&conn).await, 15);
}
