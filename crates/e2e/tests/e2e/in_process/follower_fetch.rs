//! Fetch from follower (KIP-392): with the rack-aware selector, a leader sends a
//! consumer to an in-sync replica in the consumer's rack, which serves it up to its
//! own high watermark and long-polls like a leader.

use std::time::Duration;

use syncline_e2e::inprocess::*;
use syncline_proto::pb::{self, request::Body, response::Body as Resp};
use syncline_proto::ErrorCode;
use tokio::time::Instant;

use syncline_e2e::checks::WAIT;
/// The follower's long poll: far beyond any scheduling delay, so an answer well
/// before it was caused by the high watermark's move.
const LONG_POLL_MS: i32 = 60_000;

fn fetch_with_rack(offset: i64, rack: &str, max_wait_ms: i32) -> Body {
    let Body::Fetch(mut f) = fetch_request("ff", 0, offset, max_wait_ms, 1) else {
        unreachable!()
    };
    f.rack_id = rack.to_string();
    Body::Fetch(f)
}

async fn partition_data(conn: &syncline_client::Connection, body: Body) -> pb::PartitionData {
    let Resp::Fetch(r) = conn.send(body).await.unwrap() else {
        panic!("not a fetch response")
    };
    r.responses[0].partitions[0].clone()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn consumer_is_sent_to_and_served_by_a_replica_in_its_rack() {
    let cluster = TestCluster::start_with(
        3,
        "replica_selector = \"rack_aware\"\n",
        Options {
            racks: true,
            ..Options::default()
        },
    )
    .await;
    cluster.create_topic("ff", 1, 3, &[]).await;
    let meta = cluster.partition_metadata(1, "ff", 0).await;
    let leader = meta.leader_id;
    let follower = *meta.replicas.iter().find(|r| **r != leader).unwrap();
    let rack = format!("r{follower}");
    let to_leader = cluster.connect(leader).await;
    for v in [b"a".as_slice(), b"b"] {
        assert_eq!(
            produce(&to_leader, "ff", 0, -1, batch(&[v]))
                .await
                .error_code,
            0
        );
    }
    // The leader redirects a consumer in the follower's rack, and serves one in its own.
    let redirected = partition_data(&to_leader, fetch_with_rack(0, &rack, 0)).await;
    assert_eq!(redirected.preferred_read_replica, Some(follower));
    assert!(redirected.records.is_empty());
    let own = partition_data(&to_leader, fetch_with_rack(0, &format!("r{leader}"), 0)).await;
    assert_eq!(own.preferred_read_replica, None);
    assert_eq!(values(&own.records).len(), 2);

    // The follower serves the consumer up to its own high watermark.
    let to_follower = cluster.connect(follower).await;
    syncline_e2e::wait_for("the follower's HW to cover both records", WAIT, || async {
        cluster.replica(follower, "ff", 0).high_watermark() == 2
    })
    .await;
    let served = partition_data(&to_follower, fetch_with_rack(0, &rack, 0)).await;
    assert_eq!(served.error_code, 0);
    assert_eq!(
        values(&served.records),
        vec![(0, b"a".to_vec()), (1, b"b".to_vec())]
    );
    // A consumer that did not give its rack is still refused by a follower.
    let plain = partition_data(&to_follower, fetch_request("ff", 0, 0, 0, 1)).await;
    assert_eq!(plain.error_code, ErrorCode::NotLeaderOrFollower as i32);

    // A long poll on the follower is answered when its high watermark moves.
    let poll = tokio::spawn({
        let to_follower = to_follower.clone();
        let rack = rack.clone();
        async move {
            let data = partition_data(&to_follower, fetch_with_rack(2, &rack, LONG_POLL_MS)).await;
            (data, Instant::now())
        }
    });
    syncline_e2e::wait_for("the poll to wait on the follower", WAIT, || async {
        cluster
            .broker(follower)
            .broker()
            .replica_manager()
            .purgatory_sizes()
            .0
            == 1
    })
    .await;
    let appended = Instant::now();
    assert_eq!(
        produce(&to_leader, "ff", 0, -1, batch(&[b"c"]))
            .await
            .error_code,
        0
    );
    let (data, answered) = poll.await.unwrap();
    assert_eq!(values(&data.records), vec![(2, b"c".to_vec())]);
    assert!(
        answered.duration_since(appended) < Duration::from_millis(LONG_POLL_MS as u64 / 2),
        "the follower answered at the deadline, not when its HW moved"
    );

    // The client library follows the leader's redirection: a consumer giving its
    // rack reads every record, served by the follower (which serves no replica).
    let bytes_out = |id: i32| cluster.metric(id, "syncline_bytes_out_total");
    let served_before = bytes_out(follower);
    let mut config = syncline_client::ConsumerConfig::new(&cluster.addrs.join(","));
    config.client_rack = rack.clone();
    let mut consumer = syncline_client::Consumer::new(config).unwrap();
    let tp = syncline_client::TopicPartition::new("ff", 0);
    consumer.assign(vec![tp.clone()]);
    consumer.seek(&tp, 0).unwrap();
    let mut got = Vec::new();
    let deadline = Instant::now() + WAIT;
    while got.len() < 3 && Instant::now() < deadline {
        for r in consumer.poll(Duration::from_millis(500)).await.unwrap() {
            got.push(r.value.map(|v| v.to_vec()).unwrap_or_default());
        }
    }
    assert_eq!(got, vec![b"a".to_vec(), b"b".to_vec(), b"c".to_vec()]);
    assert!(
        bytes_out(follower) > served_before,
        "the follower served nothing"
    );
}
