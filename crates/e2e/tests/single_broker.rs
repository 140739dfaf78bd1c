//! One broker (also the controller): create, produce, fetch, list offsets, errors.

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
    // A request with no body (unknown API key) gets an error, not a closed connection.
    let resp = conn
        .send(Body::Metadata(pb::MetadataRequest::default()))
        .await
        .unwrap();
    assert!(matches!(resp, Resp::Metadata(_)));
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
