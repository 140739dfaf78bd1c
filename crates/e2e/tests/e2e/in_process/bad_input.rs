//! Bad input never panics the broker, never hangs it and never corrupts a log:
//! each case gets an error code or a closed connection, and the broker goes on
//! serving everyone else.

use std::time::Duration;

use bytes::Bytes;
use prost::Message;
use syncline_e2e::inprocess::*;
use syncline_proto::pb::{self, request::Body, response::Body as Resp};
use syncline_proto::{frame, ErrorCode};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;

/// Writes raw bytes; returns true if the broker closed the connection (EOF) within
/// the deadline rather than answering. The deadline tells a hang from an answer, so
/// it allows for a loaded machine stalling the broker for seconds.
async fn closed_after(addr: &str, bytes: &[u8]) -> bool {
    let mut s = TcpStream::connect(addr).await.unwrap();
    s.write_all(bytes).await.unwrap();
    let mut buf = [0u8; 64];
    match tokio::time::timeout(Duration::from_secs(20), s.read(&mut buf)).await {
        Ok(Ok(0)) | Ok(Err(_)) => true,
        Ok(Ok(_)) => false,
        Err(_) => panic!("the broker neither answered nor closed"),
    }
}

fn framed(body: &[u8]) -> Vec<u8> {
    let mut v = (body.len() as u32).to_be_bytes().to_vec();
    v.extend_from_slice(body);
    v
}

/// Sends one raw request frame and decodes the response.
async fn raw_request(addr: &str, request: &pb::Request) -> pb::Response {
    let mut s = TcpStream::connect(addr).await.unwrap();
    s.write_all(&framed(&request.encode_to_vec()))
        .await
        .unwrap();
    let mut len = [0u8; 4];
    s.read_exact(&mut len).await.unwrap();
    let mut body = vec![0u8; u32::from_be_bytes(len) as usize];
    s.read_exact(&mut body).await.unwrap();
    frame::decode_response(Bytes::from(body)).unwrap()
}

fn produce_code(resp: Resp) -> ErrorCode {
    match resp {
        Resp::Produce(r) => ErrorCode::from_wire(r.topics[0].partitions[0].error_code),
        other => panic!("unexpected {other:?}"),
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn bad_frames_close_the_connection_and_nothing_else() {
    let cluster = TestCluster::start(
        1,
        "socket_request_max_bytes = 65536\nmessage_max_bytes = 32768\n",
    )
    .await;
    cluster.create_topic("t", 1, 1, &[]).await;
    let addr = &cluster.addrs[0];
    // Garbage that is not protobuf.
    assert!(closed_after(addr, &framed(&[0xff; 40])).await);
    // A frame longer than socket_request_max_bytes, refused before its body.
    assert!(closed_after(addr, &(1u32 << 30).to_be_bytes()).await);
    // A negative-looking length.
    assert!(closed_after(addr, &[0xff, 0xff, 0xff, 0xff, 1, 2, 3]).await);
    // A frame cut short, then the client goes away: nothing to answer.
    {
        let mut s = TcpStream::connect(addr.as_str()).await.unwrap();
        s.write_all(&[0, 0, 0, 100, 1, 2]).await.unwrap();
    }
    // The broker still serves, and the log was not touched.
    let conn = cluster.connect(1).await;
    let r = produce(&conn, "t", 0, 1, batch(&[b"ok"])).await;
    assert_eq!((r.error_code, r.base_offset), (0, 0));
    assert_eq!(
        values(&fetch(&conn, "t", 0, 0).await.records),
        vec![(0, b"ok".to_vec())]
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn unknown_api_and_version_get_an_error_response() {
    let cluster = TestCluster::start(1, "").await;
    let addr = &cluster.addrs[0];
    let no_body = pb::Request {
        correlation_id: 9,
        api_version: 0,
        client_id: "t".into(),
        body: None,
    };
    let resp = raw_request(addr, &no_body).await;
    assert_eq!(resp.correlation_id, 9);
    let Some(Resp::Error(e)) = resp.body else {
        panic!("{resp:?}")
    };
    assert_eq!(
        ErrorCode::from_wire(e.error_code),
        ErrorCode::UnsupportedVersion
    );
    let future = pb::Request {
        correlation_id: 10,
        api_version: 7,
        client_id: "t".into(),
        body: Some(Body::Metadata(pb::MetadataRequest::default())),
    };
    let Some(Resp::Error(e)) = raw_request(addr, &future).await.body else {
        panic!()
    };
    assert_eq!(
        ErrorCode::from_wire(e.error_code),
        ErrorCode::UnsupportedVersion
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn absurd_values_get_error_codes() {
    let cluster = TestCluster::start(1, "message_max_bytes = 1024\n").await;
    cluster.create_topic("t", 1, 1, &[]).await;
    let conn = cluster.connect(1).await;
    // acks outside {0, 1, -1}.
    let resp = conn
        .send(produce_request("t", 0, 5, batch(&[b"x"])))
        .await
        .unwrap();
    assert_eq!(produce_code(resp), ErrorCode::InvalidRequiredAcks);
    // No records; garbage records; a batch over message_max_bytes.
    for (records, want) in [
        (Bytes::new(), ErrorCode::CorruptMessage),
        (
            Bytes::from_static(&[1, 2, 3, 4, 5]),
            ErrorCode::CorruptMessage,
        ),
        (batch(&[&[7u8; 2000]]), ErrorCode::MessageTooLarge),
    ] {
        let resp = conn
            .send(produce_request("t", 0, 1, records))
            .await
            .unwrap();
        assert_eq!(produce_code(resp), want);
    }
    // Unknown partition, negative partition.
    for p in [5, -1] {
        let resp = conn
            .send(produce_request("t", p, 1, batch(&[b"x"])))
            .await
            .unwrap();
        assert_eq!(produce_code(resp), ErrorCode::UnknownTopicOrPartition);
    }
    // Fetch at a negative offset, and with a negative partition size.
    assert_eq!(
        fetch(&conn, "t", 0, -5).await.error_code,
        ErrorCode::OffsetOutOfRange as i32
    );
    let mut req = fetch_request("t", 0, 0, 0, 0);
    if let Body::Fetch(f) = &mut req {
        f.topics[0].partitions[0].partition_max_bytes = -1;
        f.max_bytes = -10;
        f.min_bytes = -3;
        f.max_wait_ms = i32::MIN;
    }
    let Resp::Fetch(f) = conn.send(req).await.unwrap() else {
        panic!()
    };
    assert_eq!(
        f.responses[0].partitions[0].error_code,
        ErrorCode::InvalidFetchSize as i32
    );
    // CreateTopics with an invalid name, absurd partition counts and RF.
    let create = |name: &str, partitions: i32, rf: i32| {
        Body::CreateTopics(pb::CreateTopicsRequest {
            topics: vec![pb::CreatableTopic {
                name: name.into(),
                num_partitions: partitions,
                replication_factor: rf,
                configs: Default::default(),
            }],
            timeout_ms: 1000,
            validate_only: false,
            forwarded: false,
            auto_create: false,
        })
    };
    for (body, want) in [
        (create("bad/name", 1, 1), ErrorCode::InvalidTopicException),
        (create("", 1, 1), ErrorCode::InvalidTopicException),
        (create("ok", -7, 1), ErrorCode::InvalidPartitions),
        (create("ok", 1, 0), ErrorCode::InvalidReplicationFactor),
        (create("ok", 1, 1000), ErrorCode::InvalidReplicationFactor),
        (create("t", 1, 1), ErrorCode::TopicAlreadyExists),
    ] {
        let Resp::CreateTopics(r) = conn.send(body).await.unwrap() else {
            panic!()
        };
        assert_eq!(
            ErrorCode::from_wire(r.topics[0].error_code),
            want,
            "{:?}",
            r.topics[0]
        );
    }
    // Through all of it, the log is intact and the broker serves.
    let r = produce(&conn, "t", 0, 1, batch(&[b"fine"])).await;
    assert_eq!((r.error_code, r.base_offset), (0, 0));
}

/// A name repeated in a request is answered once (Kafka collapses a
/// request's names into a set): repeating a topic's name costs the broker
/// nothing more than its bytes.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_repeated_name_is_answered_once() {
    let cluster = TestCluster::start(1, "").await;
    cluster.create_topic("t", 3, 1, &[]).await;
    let conn = cluster.connect(1).await;
    let many = || vec!["t".to_string(); 1_000];
    let resp = conn
        .send(Body::Metadata(pb::MetadataRequest {
            topics: many(),
            allow_auto_topic_creation: false,
            no_topics: false,
        }))
        .await
        .unwrap();
    let Resp::Metadata(m) = resp else {
        panic!("unexpected {resp:?}")
    };
    assert_eq!(m.topics.len(), 1);
    assert_eq!(m.topics[0].partitions.len(), 3);
    let resp = conn
        .send(Body::DescribeTopics(pb::DescribeTopicsRequest {
            topics: many(),
        }))
        .await
        .unwrap();
    let Resp::DescribeTopics(d) = resp else {
        panic!("unexpected {resp:?}")
    };
    assert_eq!(d.topics.len(), 1);
}

/// A fetch naming topics out of order, one of them twice apart, is answered
/// with each topic once, in the order first named, its partitions in the
/// order asked (each topic's place in the answer found by lookup, not by
/// scanning the answer built so far).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_fetch_answers_each_topic_once_in_the_order_first_named() {
    let cluster = TestCluster::start(1, "").await;
    cluster.create_topic("a", 2, 1, &[]).await;
    cluster.create_topic("b", 1, 1, &[]).await;
    let conn = cluster.connect(1).await;
    let part = |partition| pb::FetchPartition {
        partition,
        fetch_offset: 0,
        partition_max_bytes: 1024,
        ..Default::default()
    };
    let topic = |name: &str, partitions: Vec<pb::FetchPartition>| pb::FetchTopic {
        topic: name.to_string(),
        partitions,
    };
    let resp = conn
        .send(Body::Fetch(pb::FetchRequest {
            replica_id: -1,
            replica_epoch: -1,
            max_wait_ms: 0,
            min_bytes: 0,
            max_bytes: 1 << 20,
            session_id: 0,
            session_epoch: -1,
            topics: vec![
                topic("b", vec![part(0)]),
                topic("a", vec![part(1)]),
                topic("missing", vec![part(0)]),
                topic("b", vec![part(5)]),
                topic("a", vec![part(0)]),
            ],
            ..Default::default()
        }))
        .await
        .unwrap();
    let Resp::Fetch(f) = resp else {
        panic!("unexpected {resp:?}")
    };
    let answered: Vec<(String, Vec<(i32, i32)>)> = f
        .responses
        .iter()
        .map(|t| {
            let parts = t
                .partitions
                .iter()
                .map(|p| (p.partition, p.error_code))
                .collect();
            (t.topic.clone(), parts)
        })
        .collect();
    let unknown = ErrorCode::UnknownTopicOrPartition as i32;
    assert_eq!(
        answered,
        vec![
            ("b".to_string(), vec![(0, 0), (5, unknown)]),
            ("a".to_string(), vec![(1, 0), (0, 0)]),
            ("missing".to_string(), vec![(0, unknown)]),
        ]
    );
}
