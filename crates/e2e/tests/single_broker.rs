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
