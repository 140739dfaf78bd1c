//! What one client can cost a broker is bounded: connections beyond
//! `max_connections` are closed on accept without harm to the others, and a
//! client that asks for large fetches and stops reading its socket stops being
//! read, so the broker's memory does not grow with what it asked.

use std::time::Duration;

use syncline_e2e::checks::create_topic;
use syncline_e2e::client::produce;
use syncline_e2e::inprocess::TestCluster;
use syncline_e2e::{wait_for, Cluster};
use syncline_proto::frame;
use syncline_proto::pb::{self, request::Body};
use tokio::io::AsyncWriteExt;

const WAIT: Duration = Duration::from_secs(30);

fn rss_bytes(pid: u32) -> u64 {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap();
    let kb: u64 = status
        .lines()
        .find_map(|l| l.strip_prefix("VmRSS:"))
        .and_then(|v| v.trim().trim_end_matches("kB").trim().parse().ok())
        .expect("VmRSS in /proc/PID/status");
    kb * 1024
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_client_that_stops_reading_large_fetches_cannot_grow_the_broker() {
    const MIB: u64 = 1 << 20;
    const FETCH_MAX: u64 = 8 * MIB;
    const MESSAGE_MAX: u64 = MIB;
    const CONNECTIONS: u64 = 16;
    const FETCHES_EACH: usize = 20;
    let cluster = Cluster::start(
        1,
        &format!("fetch_max_bytes = {FETCH_MAX}\nmessage_max_bytes = {MESSAGE_MAX}\n"),
    )
    .await;
    create_topic(&cluster, "big", 1, 1, 1);
    let conn = cluster.connect(1).await.unwrap();
    // 24 MiB of records: more than one fetch response can hold.
    let value = vec![7u8; 4000];
    for _ in 0..48 {
        let batch: Vec<Vec<u8>> = (0..128).map(|_| value.clone()).collect();
        let r = produce(&conn, "big", 0, 1, &batch).await.unwrap();
        assert_eq!(r.error_code, 0, "{r:?}");
    }
    let pid = cluster.node(1).pid().expect("running");
    let before = rss_bytes(pid);

    // Each client pipelines fetches of everything from offset 0 (asking for
    // far more than the broker's cap) and never reads an answer.
    let fetch = pb::Request {
        correlation_id: 1,
        api_version: 0,
        client_id: "greedy".into(),
        body: Some(Body::Fetch(pb::FetchRequest {
            replica_id: -1,
            replica_epoch: -1,
            max_wait_ms: 0,
            min_bytes: 1,
            max_bytes: i32::MAX,
            session_id: 0,
            session_epoch: -1,
            topics: vec![pb::FetchTopic {
                topic: "big".into(),
                partitions: vec![pb::FetchPartition {
                    partition: 0,
                    fetch_offset: 0,
                    partition_max_bytes: i32::MAX,
                    ..Default::default()
                }],
            }],
            ..Default::default()
        })),
    };
    let mut greedy = Vec::new();
    for _ in 0..CONNECTIONS {
        let mut s = tokio::net::TcpStream::connect(cluster.node(1).addr())
            .await
            .unwrap();
        let frames = vec![frame::encode(&fetch); FETCHES_EACH];
        frame::write_frames(&mut s, &frames).await.unwrap();
        s.flush().await.unwrap();
        greedy.push(s);
    }
    // Wait until the broker has served what it will (its RSS settles), with a
    // deadline; then it must have answered no more than its budget allows.
    let mut peak = before;
    let mut last = 0;
    let deadline = tokio::time::Instant::now() + Duration::from_secs(10);
    while tokio::time::Instant::now() < deadline {
        let now = rss_bytes(pid);
        peak = peak.max(now);
        if now.abs_diff(last) < MIB && now > before {
            break;
        }
        last = now;
        tokio::time::sleep(Duration::from_millis(500)).await;
    }
    let grown = peak.saturating_sub(before);
    // Without the budget each connection would hold FETCHES_EACH answers:
    // 16 x 20 x 8 MiB = 2.5 GiB.
    let bound = CONNECTIONS * (FETCH_MAX + MESSAGE_MAX) + 64 * MIB;
    println!(
        "{CONNECTIONS} clients x {FETCHES_EACH} unread fetches of up to {} MiB: broker RSS {} -> {} MiB (grew {} MiB; bound {} MiB)",
        FETCH_MAX / MIB,
        before / MIB,
        peak / MIB,
        grown / MIB,
        bound / MIB
    );
    assert!(grown <= bound, "broker RSS grew {} MiB", grown / MIB);
    // The broker still serves everyone else.
    let r = produce(&conn, "big", 0, 1, &[b"after".to_vec()])
        .await
        .unwrap();
    assert_eq!(r.error_code, 0);
    drop(greedy);
}

/// On a cluster inside the test process (`TestCluster`): part of the quick
/// tier (`scripts/test.sh --quick`).
mod in_process {
    use super::*;

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn ten_thousand_idle_connections_beyond_max_connections_are_refused_without_harm_to_the_others(
    ) {
        const MAX: usize = 200;
        const FLOOD: usize = 10_000;
        let cluster = TestCluster::start(1, &format!("max_connections = {MAX}\n")).await;
        cluster.create_topic("t", 1, 1, &[]).await;
        let client = cluster.connect(1).await;
        let addr = cluster.addrs[0].clone();
        let mut flood = Vec::with_capacity(FLOOD);
        for _ in 0..FLOOD {
            let s = tokio::time::timeout(
                Duration::from_secs(10),
                tokio::net::TcpStream::connect(&addr),
            )
            .await
            .expect("connect within 10 s")
            .expect("the kernel accepts the connection");
            flood.push(s);
        }
        wait_for(
            "every connection beyond the limit refused",
            WAIT,
            || async {
                cluster.metric(1, "syncline_connections_refused_total") as usize >= FLOOD - MAX
            },
        )
        .await;
        let open = cluster.metric(1, "syncline_connections") as usize;
        println!(
            "{FLOOD} idle connections against max_connections = {MAX}: {open} open, {} refused",
            cluster.metric(1, "syncline_connections_refused_total")
        );
        assert!(open <= MAX, "{open} connections open");
        // The connection made before the flood is served as before.
        let written = produce(&client, "t", 0, 1, &[b"still served".to_vec()])
            .await
            .unwrap();
        assert_eq!(written.error_code, 0, "{written:?}");
        // Once the flood is gone, its places are free again.
        drop(flood);
        wait_for("the flood's places to free", WAIT, || async {
            (cluster.metric(1, "syncline_connections") as usize) < MAX / 2
        })
        .await;
        let late = cluster.connect(1).await;
        assert_eq!(
            produce(&late, "t", 0, 1, &[b"late".to_vec()])
                .await
                .unwrap()
                .error_code,
            0
        );
    }
}
