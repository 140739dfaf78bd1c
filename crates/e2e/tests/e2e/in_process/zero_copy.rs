//! Zero-copy fetch: a syncline listener's fetch responses carry their records
//! from the segment files to a plain TCP socket with `sendfile`, and copy them
//! on a TLS listener. Either way consumers and followers get exactly the
//! records produced.

use syncline_e2e::checks::WAIT;
use syncline_e2e::inprocess::*;
use syncline_proto::pb::{self, request::Body, response::Body as Resp};

const TOPIC: &str = "zc";
const PARTITIONS: i32 = 4;
/// Small segments: fetches span several files.
const EXTRA: &str = "segment_bytes = 4096\n";

const SENDFILE: &str = "syncline_fetch_sendfile_bytes_total";
const COPIED: &str = "syncline_fetch_copied_bytes_total";

/// Batch `i`'s values: sizes and bytes vary with `i`.
fn values(i: usize) -> Vec<Vec<u8>> {
    (0..1 + i % 4)
        .map(|j| vec![(i * 7 + j) as u8; 100 + (i * 131 + j * 17) % 900])
        .collect()
}

/// Produces `count` batches to `partition` (acks=all) and returns every
/// (offset, value) produced.
async fn produce_batches(
    cluster: &TestCluster,
    leader: i32,
    partition: i32,
    count: usize,
) -> Vec<(i64, Vec<u8>)> {
    let conn = cluster.connect(leader).await;
    let mut produced = Vec::new();
    for i in 0..count {
        let vals = values(i + partition as usize * 1000);
        let refs: Vec<&[u8]> = vals.iter().map(Vec::as_slice).collect();
        let r = produce(&conn, TOPIC, partition, -1, batch(&refs)).await;
        assert_eq!(r.error_code, 0, "{r:?}");
        for (k, v) in vals.into_iter().enumerate() {
            produced.push((r.base_offset + k as i64, v));
        }
    }
    produced
}

/// The bytes of a replica's log: its segment files in order.
fn log_bytes(cluster: &TestCluster, id: i32, partition: i32) -> Vec<u8> {
    let dir = cluster.log_dir(id).join(format!("{TOPIC}-{partition}"));
    let mut files: Vec<_> = std::fs::read_dir(&dir)
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| p.extension().is_some_and(|e| e == "log"))
        .collect();
    files.sort();
    files
        .iter()
        .flat_map(|f| std::fs::read(f).unwrap())
        .collect()
}

/// Consumers and followers of a 3-broker cluster get the records produced, and
/// the leader's metrics say which way they left the files.
async fn fetches_carry_the_records_produced(cluster: TestCluster) {
    let secure = cluster.security.is_some();
    cluster.create_topic(TOPIC, PARTITIONS, 3, &[]).await;
    let mut produced = Vec::new();
    let mut leaders = Vec::new();
    for partition in 0..PARTITIONS {
        let meta = cluster.partition_metadata(1, TOPIC, partition).await;
        leaders.push(meta.leader_id);
        produced.push(produce_batches(&cluster, meta.leader_id, partition, 25).await);
    }
    for partition in 0..PARTITIONS {
        let leader = leaders[partition as usize];
        let conn = cluster.connect(leader).await;
        // Whole log, in fetches of up to 8 MiB.
        let got = syncline_e2e::client::read_all(&conn, TOPIC, partition, 0)
            .await
            .unwrap();
        assert_eq!(got, produced[partition as usize], "partition {partition}");
        // A fetch smaller than a batch still gets one whole batch; every
        // offset within a batch gets its batch from the start.
        for offset in [0, 1, 5, 17] {
            let Body::Fetch(mut req) = fetch_request(TOPIC, partition, offset, 0, 0) else {
                unreachable!()
            };
            req.topics[0].partitions[0].partition_max_bytes = 1;
            let Resp::Fetch(r) = conn.send(Body::Fetch(req)).await.unwrap() else {
                panic!("not a fetch response")
            };
            let p = &r.responses[0].partitions[0];
            let batches = syncline_e2e::client::decode_batches(&p.records, 0).unwrap();
            assert_eq!(batches.len(), 1, "offset {offset}");
            let (header, records) = &batches[0];
            assert!(header.base_offset <= offset && offset < header.next_offset());
            let expected: Vec<_> = produced[partition as usize]
                .iter()
                .filter(|(o, _)| *o >= header.base_offset && *o < header.next_offset())
                .cloned()
                .collect();
            assert_eq!(records, &expected, "offset {offset}");
        }
        // Followers hold the leader's log byte for byte.
        let leader_log = log_bytes(&cluster, leader, partition);
        for id in (1..=3).filter(|&id| id != leader) {
            let replica = cluster.replica(id, TOPIC, partition);
            let end = cluster.replica(leader, TOPIC, partition).log_end_offset();
            syncline_e2e::wait_for("followers to catch up", WAIT, || {
                let replica = replica.clone();
                async move { replica.log_end_offset() == end }
            })
            .await;
            assert_eq!(
                log_bytes(&cluster, id, partition),
                leader_log,
                "broker {id}'s replica of partition {partition}"
            );
        }
    }

    // Two partitions of one leader in one fetch: one response holding both
    // partitions' regions (four partitions on three brokers: some broker leads two).
    let (a, b) = (0..PARTITIONS)
        .flat_map(|a| (a + 1..PARTITIONS).map(move |b| (a, b)))
        .find(|&(a, b)| leaders[a as usize] == leaders[b as usize])
        .expect("four partitions on three brokers: one leads two");
    let conn = cluster.connect(leaders[a as usize]).await;
    let Body::Fetch(mut req) = fetch_request(TOPIC, a, 0, 0, 0) else {
        unreachable!()
    };
    req.topics[0].partitions.push(pb::FetchPartition {
        partition: b,
        fetch_offset: 0,
        partition_max_bytes: 1 << 20,
        ..Default::default()
    });
    let Resp::Fetch(r) = conn.send(Body::Fetch(req)).await.unwrap() else {
        panic!("not a fetch response")
    };
    let parts = &r.responses[0].partitions;
    assert_eq!(parts.len(), 2);
    for p in parts {
        let got: Vec<_> = syncline_e2e::client::decode_batches(&p.records, 0)
            .unwrap()
            .into_iter()
            .flat_map(|(_, records)| records)
            .collect();
        assert_eq!(
            got, produced[p.partition as usize],
            "partition {}",
            p.partition
        );
    }

    // Which way the records left the leaders' files.
    let (mut sent, mut copied) = (0.0, 0.0);
    for id in 1..=3 {
        sent += cluster.metric(id, SENDFILE);
        copied += cluster.metric(id, COPIED);
    }
    let logs: usize = (0..PARTITIONS)
        .map(|p| log_bytes(&cluster, leaders[p as usize], p).len())
        .sum();
    // Two followers and a consumer read each log whole at least.
    let at_least = 3.0 * logs as f64 * 0.9;
    if secure {
        assert_eq!(sent, 0.0, "TLS cannot sendfile");
        assert!(copied >= at_least, "copied {copied} of {logs}");
    } else {
        assert_eq!(copied, 0.0, "plain TCP copies nothing");
        assert!(sent >= at_least, "sent {sent} of {logs}");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn plain_listener_sends_records_from_the_files() {
    // (A run with SYNCLINE_E2E_SECURE=1 makes this cluster secure too: then the
    // records are copied, and checked as such.)
    fetches_carry_the_records_produced(TestCluster::start(3, EXTRA).await).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn tls_listener_copies_the_same_records() {
    // Each test runs in a process of its own (nextest): this one's clusters are
    // secure, whatever the run's setting.
    std::env::set_var("SYNCLINE_E2E_SECURE", "1");
    let cluster = TestCluster::start(3, EXTRA).await;
    assert!(cluster.security.is_some());
    fetches_carry_the_records_produced(cluster).await;
}
