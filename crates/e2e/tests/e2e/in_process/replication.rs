//! Three brokers in one process: acks=all, ISR, leader change.

use std::time::Duration;

use syncline_e2e::inprocess::*;
use syncline_proto::ErrorCode;

use syncline_e2e::checks::WAIT;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
pub(crate) async fn acks_all_is_acknowledged_by_the_whole_isr() {
    let cluster = TestCluster::start(3, "replica_lag_time_max_ms = 2000\n").await;
    cluster
        .create_topic("r", 1, 3, &[("min.insync.replicas", "2")])
        .await;
    let meta = cluster.partition_metadata(1, "r", 0).await;
    assert_eq!(meta.isr.len(), 3, "{meta:?}");
    let leader = cluster.connect(meta.leader_id).await;
    for i in 0..20u8 {
        let r = produce(&leader, "r", 0, -1, batch(&[&[i; 10], &[i; 20]])).await;
        assert_eq!(r.error_code, 0, "{r:?}");
        assert_eq!(r.base_offset, i64::from(i) * 2);
        let mut isr = r.acked_isr.clone();
        isr.sort();
        assert_eq!(isr, vec![1, 2, 3]);
        assert_eq!(r.replication_factor, 3);
    }
    let data = fetch(&leader, "r", 0, 0).await;
    assert_eq!(data.high_watermark, 40);
    assert_eq!(values(&data.records).len(), 40);
    // Followers caught up too: their logs end at 40.
    for id in 1..=3 {
        if id == meta.leader_id {
            continue;
        }
        let p = cluster
            .broker(id)
            .broker()
            .replica_manager()
            .partition("r", 0)
            .unwrap();
        syncline_e2e::wait_for("follower to catch up", WAIT, || {
            let p = p.clone();
            async move { p.log_end_offset() == 40 && p.high_watermark() == 40 }
        })
        .await;
    }
    // The followers replicate through incremental fetch sessions on the leader.
    let leader_rm = cluster.broker(meta.leader_id).broker().replica_manager();
    assert_eq!(leader_rm.fetch_session_count(), 2);
}

/// Produces one record with acks=all to a new partition's leader. The leader
/// may not yet have applied the LeaderAndIsr that makes it leader (CreateTopics
/// waits only until the broker that took it knows the leaders): that refusal is
/// retried, every other answer returned.
async fn produce_once_leading(
    leader: &syncline_client::Connection,
    topic: &str,
    partition: i32,
) -> syncline_proto::pb::ProducePartitionResponse {
    let deadline = std::time::Instant::now() + WAIT;
    loop {
        let r = produce(leader, topic, partition, -1, batch(&[b"v"])).await;
        let not_yet = matches!(
            ErrorCode::from_wire(r.error_code),
            ErrorCode::NotLeaderOrFollower | ErrorCode::UnknownTopicOrPartition
        );
        if !not_yet || std::time::Instant::now() > deadline {
            return r;
        }
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
}

/// Followers start fetching the moment they learn of a new partition, often
/// before its leader has applied the LeaderAndIsr that makes it leader; the
/// leader refuses those first fetches. The follower must retry within
/// milliseconds, not after `replica_fetch_backoff_ms`, or every `acks=all`
/// produce to a new topic waits that long. The backoff here is a minute, so a
/// follower that paused for it would time the produce out.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
pub(crate) async fn followers_of_a_new_topic_retry_a_refused_first_fetch_at_once() {
    let cluster = TestCluster::start(3, "replica_fetch_backoff_ms = 60000\n").await;
    for round in 0..5 {
        let topic = format!("new-{round}");
        cluster
            .create_topic(&topic, 3, 3, &[("min.insync.replicas", "2")])
            .await;
        for partition in 0..3 {
            let meta = cluster.partition_metadata(1, &topic, partition).await;
            let leader = cluster.connect(meta.leader_id).await;
            let r = produce_once_leading(&leader, &topic, partition).await;
            assert_eq!(r.error_code, 0, "{topic}-{partition}: {r:?}");
            let mut isr = r.acked_isr.clone();
            isr.sort();
            assert_eq!(isr, vec![1, 2, 3], "{topic}-{partition}");
        }
    }
}

/// Where a follower learns the high watermark. Long polls last a minute here, so
/// a follower fetch answered within the test was answered by the push.
async fn followers_after_a_commit(selector: &str) -> (TestCluster, i32, [i32; 2]) {
    let extra = format!(
        "replica_selector = \"{selector}\"\nreplica_fetch_wait_max_ms = 60000\nreplica_lag_time_max_ms = 120000\n"
    );
    let cluster = TestCluster::start(3, &extra).await;
    cluster.create_topic("hw", 1, 3, &[]).await;
    let meta = cluster.partition_metadata(1, "hw", 0).await;
    let leader = meta.leader_id;
    let followers: Vec<i32> = (1..=3).filter(|id| *id != leader).collect();
    let conn = cluster.connect(leader).await;
    let r = produce_once_leading(&conn, "hw", 0).await;
    assert_eq!((r.error_code, r.base_offset), (0, 0), "{r:?}");
    assert_eq!(cluster.replica(leader, "hw", 0).high_watermark(), 1);
    (cluster, leader, [followers[0], followers[1]])
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
pub(crate) async fn followers_learn_the_high_watermark_with_their_next_answered_fetch() {
    let (cluster, leader, followers) = followers_after_a_commit("leader").await;
    // Both followers' next fetches wait on the leader (nothing new to send):
    // the high watermark's move does not answer them.
    let leader_rm = cluster.broker(leader).broker().replica_manager();
    syncline_e2e::wait_for(
        "both follower fetches to wait on the leader",
        WAIT,
        || async { leader_rm.purgatory_sizes().0 == 2 },
    )
    .await;
    for f in followers {
        let p = cluster.replica(f, "hw", 0);
        assert_eq!(
            (p.log_end_offset(), p.high_watermark()),
            (1, 0),
            "follower {f}"
        );
    }
    // The next append answers them, and carries the high watermark.
    let conn = cluster.connect(leader).await;
    assert_eq!(
        produce(&conn, "hw", 0, 1, batch(&[b"w"])).await.error_code,
        0
    );
    for f in followers {
        let p = cluster.replica(f, "hw", 0);
        syncline_e2e::wait_for("the follower to learn HW 1", WAIT, || {
            let p = p.clone();
            async move { p.high_watermark() >= 1 }
        })
        .await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
pub(crate) async fn followers_serving_consumers_learn_the_high_watermark_at_once() {
    let (cluster, _, followers) = followers_after_a_commit("rack_aware").await;
    for f in followers {
        let p = cluster.replica(f, "hw", 0);
        syncline_e2e::wait_for("the follower to learn HW 1", WAIT, || {
            let p = p.clone();
            async move { p.high_watermark() == 1 }
        })
        .await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
pub(crate) async fn incremental_fetch_session_answers_only_partitions_with_news() {
    use syncline_proto::pb::{self, request::Body, response::Body as Resp};
    let cluster = TestCluster::start(1, "").await;
    cluster.create_topic("s", 2, 1, &[]).await;
    let conn = cluster.connect(1).await;
    produce(&conn, "s", 0, 1, batch(&[b"a"])).await;
    produce(&conn, "s", 1, 1, batch(&[b"b"])).await;
    let fetch = |id: i32, epoch: i32, parts: Vec<(i32, i64)>| {
        Body::Fetch(pb::FetchRequest {
            replica_id: -1,
            replica_epoch: -1,
            max_bytes: 1 << 20,
            session_id: id,
            session_epoch: epoch,
            topics: if parts.is_empty() {
                vec![]
            } else {
                vec![pb::FetchTopic {
                    topic: "s".into(),
                    partitions: parts
                        .into_iter()
                        .map(|(partition, fetch_offset)| pb::FetchPartition {
                            partition,
                            fetch_offset,
                            partition_max_bytes: 1 << 20,
                            ..Default::default()
                        })
                        .collect(),
                }]
            },
            ..Default::default()
        })
    };
    let partitions = |r: &pb::FetchResponse| -> Vec<(i32, usize)> {
        r.responses
            .iter()
            .flat_map(|t| {
                t.partitions
                    .iter()
                    .map(|p| (p.partition, values(&p.records).len()))
            })
            .collect()
    };
    // A new session: everything.
    let Resp::Fetch(r) = conn.send(fetch(0, 0, vec![(0, 0), (1, 0)])).await.unwrap() else {
        panic!()
    };
    assert_ne!(r.session_id, 0);
    assert_eq!(partitions(&r), vec![(0, 1), (1, 1)]);
    let id = r.session_id;
    // The client moved both positions; only partition 0 gets a new record.
    produce(&conn, "s", 0, 1, batch(&[b"c"])).await;
    let Resp::Fetch(r) = conn.send(fetch(id, 1, vec![(0, 1), (1, 1)])).await.unwrap() else {
        panic!()
    };
    assert_eq!(partitions(&r), vec![(0, 1)], "only partition 0 has news");
    // Nothing new: an empty incremental answer; a wrong epoch is refused.
    let Resp::Fetch(r) = conn.send(fetch(id, 2, vec![(0, 2)])).await.unwrap() else {
        panic!()
    };
    assert!(partitions(&r).is_empty());
    let Resp::Fetch(r) = conn.send(fetch(id, 9, vec![])).await.unwrap() else {
        panic!()
    };
    assert_eq!(
        r.error_code,
        syncline_proto::ErrorCode::InvalidFetchSessionEpoch as i32
    );
}
