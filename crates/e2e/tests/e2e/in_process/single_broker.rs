//! One broker (also the controller): create, produce, fetch, list offsets, errors.

use syncline_client::Connection;
use syncline_e2e::inprocess::*;
use syncline_proto::pb::{self, request::Body, response::Body as Resp};
use syncline_proto::ErrorCode;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn produce_then_fetch_round_trip() {
    let cluster = TestCluster::start(1, "").await;
    cluster.create_topic("t", 2, 1, &[]).await;
    let conn = cluster.connect(1).await;
    let r = produce(&conn, "t", 0, 1, batch(&[b"a", b"b", b"c"])).await;
    assert_eq!(r.error_code, 0, "{r:?}");
    assert_eq!(r.base_offset, 0);
    assert_eq!(r.acked_isr, vec![1]);
    let r = produce(&conn, "t", 0, -1, batch(&[b"d"])).await;
    assert_eq!((r.error_code, r.base_offset), (0, 3));
    assert_eq!(r.acked_isr, vec![1]);
    let data = fetch(&conn, "t", 0, 1).await;
    assert_eq!(data.error_code, 0);
    assert_eq!(data.high_watermark, 4);
    let got = values(&data.records);
    assert_eq!(
        got.iter()
            .filter(|(o, _)| *o >= 1)
            .map(|(_, v)| v.clone())
            .collect::<Vec<_>>(),
        vec![b"b".to_vec(), b"c".to_vec(), b"d".to_vec()]
    );
    // Out of range, unknown partition.
    assert_eq!(
        fetch(&conn, "t", 0, 99).await.error_code,
        ErrorCode::OffsetOutOfRange as i32
    );
    assert_eq!(
        fetch(&conn, "t", 7, 0).await.error_code,
        ErrorCode::UnknownTopicOrPartition as i32
    );
    assert_eq!(
        produce(&conn, "nope", 0, 1, batch(&[b"x"]))
            .await
            .error_code,
        ErrorCode::UnknownTopicOrPartition as i32
    );
    // A corrupt batch is refused and nothing is written.
    let mut bad = batch(&[b"zzz"]).to_vec();
    let last = bad.len() - 1;
    bad[last] ^= 0xff;
    let r = produce(&conn, "t", 0, 1, bad.into()).await;
    assert_eq!(r.error_code, ErrorCode::CorruptMessage as i32);
    assert_eq!(fetch(&conn, "t", 0, 0).await.high_watermark, 4);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn list_offsets_and_unknown_api() {
    let cluster = TestCluster::start(1, "").await;
    cluster.create_topic("t", 1, 1, &[]).await;
    let conn = cluster.connect(1).await;
    produce(&conn, "t", 0, 1, batch(&[b"a", b"b"])).await;
    for (ts, want) in [(-2, 0), (-1, 2)] {
        let resp = conn
            .send(Body::ListOffsets(pb::ListOffsetsRequest {
                replica_id: -1,
                isolation_level: 0,
                topics: vec![pb::ListOffsetsTopic {
                    name: "t".into(),
                    partitions: vec![pb::ListOffsetsPartition {
                        partition: 0,
                        current_leader_epoch: None,
                        timestamp: ts,
                    }],
                }],
            }))
            .await
            .unwrap();
        let Resp::ListOffsets(r) = resp else { panic!() };
        assert_eq!(r.topics[0].partitions[0].offset, want, "{r:?}");
    }
    // By timestamp: the first record at or after it, in offset order, with its
    // timestamp (batches out of time order, one of two records); -3 the first
    // record with the largest timestamp; nothing that late is offset -1. (The
    // first two records have the batch helper's older time.)
    const T: i64 = 2_000_000_000_000;
    for times in [&[T, T + 3][..], &[T + 10], &[T + 5]] {
        let mut b = syncline_proto::batch::BatchBuilder::new(times[0]);
        for t in times {
            b.push(*t, None, Some(b"v"), &[]);
        }
        let r = produce(&conn, "t", 0, -1, b.finish()).await;
        assert_eq!(r.error_code, 0, "{r:?}");
    }
    for (ts, want) in [
        (T, (2, T)),
        (T + 1, (3, T + 3)),
        (T + 4, (4, T + 10)),
        (T + 10, (4, T + 10)),
        (T + 11, (-1, -1)),
        (syncline_proto::MAX_TIMESTAMP, (4, T + 10)),
    ] {
        let p = list_offset(&conn, "t", ts).await;
        assert_eq!(
            (p.error_code, (p.offset, p.timestamp)),
            (0, want),
            "{ts}: {p:?}"
        );
    }
    assert_eq!(
        list_offset(&conn, "t", -4).await.error_code,
        ErrorCode::InvalidRequest as i32
    );
    // A request with no body (unknown API key) gets an error, not a closed connection.
    let resp = conn
        .send(Body::Metadata(pb::MetadataRequest::default()))
        .await
        .unwrap();
    assert!(matches!(resp, Resp::Metadata(_)));
}

async fn list_offset(
    conn: &Connection,
    topic: &str,
    timestamp: i64,
) -> pb::ListOffsetsPartitionResponse {
    let resp = conn
        .send(Body::ListOffsets(pb::ListOffsetsRequest {
            replica_id: -1,
            isolation_level: 0,
            topics: vec![pb::ListOffsetsTopic {
                name: topic.into(),
                partitions: vec![pb::ListOffsetsPartition {
                    partition: 0,
                    current_leader_epoch: None,
                    timestamp,
                }],
            }],
        }))
        .await
        .unwrap();
    let Resp::ListOffsets(mut r) = resp else {
        panic!("{resp:?}")
    };
    r.topics.remove(0).partitions.remove(0)
}

/// `message.timestamp.type=LogAppendTime`: the leader stamps each batch with its
/// append time (answered in the produce response), the followers store the
/// stamped batch (its CRC holds: acks=all came back), every record reads with
/// that time, and ListOffsets by timestamp finds it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn log_append_time_topics_carry_the_leaders_append_time() {
    let cluster = TestCluster::start(3, "").await;
    cluster
        .create_topic(
            "stamped",
            1,
            3,
            &[("message.timestamp.type", "LogAppendTime")],
        )
        .await;
    cluster.create_topic("plain", 1, 3, &[]).await;
    let leader = cluster.leader_in_role("stamped", 0).await;
    let conn = cluster.connect(leader).await;
    let before = syncline_proto::wall_clock_ms();
    let r = produce(&conn, "stamped", 0, -1, batch(&[b"a", b"b"])).await;
    let after = syncline_proto::wall_clock_ms();
    assert_eq!(r.error_code, 0, "{r:?}");
    let stamp = r.log_append_time_ms;
    assert!(
        (before..=after).contains(&stamp),
        "{before} {stamp} {after}"
    );
    let data = fetch(&conn, "stamped", 0, 0).await;
    let (header, bytes) = syncline_proto::batch::split(&data.records)
        .next()
        .unwrap()
        .unwrap();
    assert!(header.is_log_append_time());
    let times: Vec<i64> = syncline_proto::batch::records(bytes)
        .unwrap()
        .iter()
        .map(|r| r.unwrap().timestamp)
        .collect();
    assert_eq!(times, vec![stamp, stamp]);
    let found = list_offset(&conn, "stamped", stamp).await;
    assert_eq!((found.offset, found.timestamp), (0, stamp));
    // The followers appended the stamped batch (they verify its CRC).
    for id in 1..=3 {
        assert_eq!(
            cluster.replica(id, "stamped", 0).log_end_offset(),
            2,
            "broker {id}"
        );
    }
    // A CreateTime topic keeps the producer's time, and answers -1.
    let plain_leader = cluster.leader_in_role("plain", 0).await;
    let conn = cluster.connect(plain_leader).await;
    let r = produce(&conn, "plain", 0, -1, batch(&[b"a"])).await;
    assert_eq!((r.error_code, r.log_append_time_ms), (0, -1));
}

/// Kafka's rule: an offset commit for a topic or partition the cluster does not
/// have is answered UNKNOWN_TOPIC_OR_PARTITION, and the rest are committed.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn offset_commit_refuses_unknown_partitions_and_commits_the_rest() {
    let cluster = TestCluster::start(
        1,
        "offsets_topic_num_partitions = 1\noffsets_topic_replication_factor = 1\n\
         group_initial_rebalance_delay_ms = 0\n",
    )
    .await;
    cluster.create_topic("t", 2, 1, &[]).await;
    let conn = cluster.connect(1).await;
    let deadline = tokio::time::Instant::now() + std::time::Duration::from_secs(30);
    loop {
        let resp = conn
            .send(Body::FindCoordinator(pb::FindCoordinatorRequest {
                key: "g".into(),
                key_type: 0,
            }))
            .await
            .unwrap();
        let Resp::FindCoordinator(f) = resp else {
            panic!("{resp:?}")
        };
        if f.error_code == 0 {
            break;
        }
        assert!(
            tokio::time::Instant::now() < deadline,
            "no coordinator: {f:?}"
        );
        tokio::time::sleep(std::time::Duration::from_millis(50)).await;
    }
    // FindCoordinator names this broker once the metadata says it leads the
    // group's partition; its coordinator starts a moment later (as Kafka's
    // does), answering NOT_COORDINATOR meanwhile. Ready: it answers the group.
    loop {
        let fetch = Body::OffsetFetch(pb::OffsetFetchRequest {
            group_id: "g".into(),
            topics: vec![],
            all: true,
        });
        let code = match conn.send(fetch).await {
            Ok(Resp::OffsetFetch(f)) => ErrorCode::from_wire(f.error_code),
            Ok(resp) => panic!("{resp:?}"),
            Err(e) => e.code().unwrap_or_else(|| panic!("{e}")),
        };
        match code {
            ErrorCode::None => break,
            ErrorCode::NotCoordinator | ErrorCode::CoordinatorLoadInProgress => assert!(
                tokio::time::Instant::now() < deadline,
                "the group's coordinator never answered: {code}"
            ),
            code => panic!("OffsetFetch: {code}"),
        }
        tokio::time::sleep(std::time::Duration::from_millis(50)).await;
    }
    let commit = |topics: Vec<(&str, Vec<i32>)>| {
        Body::OffsetCommit(pb::OffsetCommitRequest {
            group_id: "g".into(),
            generation_id: -1,
            member_id: String::new(),
            topics: topics
                .into_iter()
                .map(|(name, partitions)| pb::OffsetCommitTopic {
                    name: name.into(),
                    partitions: partitions
                        .into_iter()
                        .map(|partition| pb::OffsetCommitPartition {
                            partition,
                            offset: 7,
                            leader_epoch: -1,
                            metadata: None,
                        })
                        .collect(),
                })
                .collect(),
        })
    };
    let results = |resp: Resp| {
        let Resp::OffsetCommit(c) = resp else {
            panic!("{resp:?}")
        };
        let mut out: Vec<(String, i32, i32)> = c
            .topics
            .into_iter()
            .flat_map(|t| {
                let name = t.name;
                t.partitions
                    .into_iter()
                    .map(move |p| (name.clone(), p.partition, p.error_code))
            })
            .collect();
        out.sort();
        out
    };
    let unknown = ErrorCode::UnknownTopicOrPartition as i32;
    // Mixed: the known partition is committed, the others refused.
    let resp = conn
        .send(commit(vec![("t", vec![1, 9]), ("nope", vec![0])]))
        .await
        .unwrap();
    assert_eq!(
        results(resp),
        vec![
            ("nope".into(), 0, unknown),
            ("t".into(), 1, 0),
            ("t".into(), 9, unknown)
        ]
    );
    // Only unknown ones: refused without reaching the coordinator.
    let resp = conn.send(commit(vec![("nope", vec![0, 1])])).await.unwrap();
    assert_eq!(
        results(resp),
        vec![("nope".into(), 0, unknown), ("nope".into(), 1, unknown)]
    );
    let resp = conn
        .send(Body::OffsetFetch(pb::OffsetFetchRequest {
            group_id: "g".into(),
            topics: vec![],
            all: true,
        }))
        .await
        .unwrap();
    let Resp::OffsetFetch(f) = resp else {
        panic!("{resp:?}")
    };
    let committed: Vec<(String, i32, i64)> = f
        .topics
        .iter()
        .flat_map(|t| {
            t.partitions
                .iter()
                .map(|p| (t.name.clone(), p.partition, p.offset))
        })
        .collect();
    assert_eq!(committed, vec![("t".into(), 1, 7)]);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn clients_get_the_endpoints_of_the_listener_they_connected_to() {
    use std::sync::Arc;
    use syncline_broker::net::{Network, Tcp};
    init_tracing();
    let dir = tempfile::tempdir().unwrap();
    let internal = Tcp.bind("127.0.0.1:0").await.unwrap();
    let external = Tcp.bind("127.0.0.1:0").await.unwrap();
    let (i, e) = (
        internal.local_addr().unwrap(),
        external.local_addr().unwrap(),
    );
    let text = format!(
        "node_id = 1\nprocess_roles = \"broker,controller\"\ncontroller_quorum_voters = \"1@{i}\"\n\
         listeners = \"INTERNAL://{i},EXTERNAL://{e}\"\n\
         advertised_listeners = \"INTERNAL://{i},EXTERNAL://outside.example:{port}\"\n\
         inter_broker_listener_name = \"INTERNAL\"\nlog_dirs = \"{}\"\n",
        dir.path().display(),
        port = e.port()
    );
    let config = syncline_broker::BrokerConfig::parse(&text).unwrap();
    let broker = syncline_broker::start_on(config, Arc::new(Tcp), vec![internal, external])
        .await
        .unwrap();
    let metadata = |addr: std::net::SocketAddr| async move {
        let conn = syncline_client::Connection::connect(
            &addr.to_string(),
            "t",
            std::time::Duration::from_secs(5),
        )
        .await
        .unwrap();
        syncline_e2e::wait_for(
            "the broker to register",
            std::time::Duration::from_secs(10),
            || {
                let conn = conn.clone();
                async move {
                    matches!(conn.send(Body::Metadata(pb::MetadataRequest::default())).await,
                    Ok(Resp::Metadata(m)) if !m.brokers.is_empty())
                }
            },
        )
        .await;
        let Ok(Resp::Metadata(m)) = conn
            .send(Body::Metadata(pb::MetadataRequest::default()))
            .await
        else {
            panic!("no metadata")
        };
        (m.brokers[0].host.clone(), m.brokers[0].port)
    };
    assert_eq!(
        metadata(i).await,
        ("127.0.0.1".to_string(), i32::from(i.port()))
    );
    assert_eq!(
        metadata(e).await,
        ("outside.example".to_string(), i32::from(e.port()))
    );
    broker.shutdown().await;
}

/// The metadata log and its snapshots hold the users' SCRAM verifiers: a
/// broker's `__cluster_metadata` and everything in it are its user's only.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_metadata_log_and_snapshots_are_the_brokers_user_s_only() {
    use std::os::unix::fs::PermissionsExt as _;
    let cluster = TestCluster::start(1, "metadata_snapshot_max_new_records = 2\n").await;
    let dir = cluster.log_dir(1).join("__cluster_metadata");
    for i in 0..4 {
        cluster.create_topic(&format!("t{i}"), 1, 1, &[]).await;
    }
    syncline_e2e::wait_for(
        "a metadata snapshot",
        std::time::Duration::from_secs(30),
        || async { dir.join("quorum.snapshot").exists() },
    )
    .await;
    let mode = |p: &std::path::Path| std::fs::metadata(p).unwrap().permissions().mode() & 0o777;
    assert_eq!(format!("{:o}", mode(&dir)), "700", "{}", dir.display());
    let mut files: Vec<(String, String)> = std::fs::read_dir(&dir)
        .unwrap()
        .map(|e| e.unwrap())
        // A snapshot being written meanwhile may be gone by now.
        .filter_map(|e| {
            let m = e.metadata().ok()?.permissions().mode() & 0o777;
            Some((
                e.file_name().to_string_lossy().into_owned(),
                format!("{m:o}"),
            ))
        })
        .collect();
    files.sort();
    assert!(files.len() >= 3, "{files:?}");
    for (name, m) in &files {
        assert_eq!(m, "600", "{name} in {}: {files:?}", dir.display());
    }
}
