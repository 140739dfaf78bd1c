//! Kafka's own clients against the brokers' Kafka listeners (`kafka_listeners`):
//! Debian's kcat (librdkafka) lists the cluster, produces with acks=all (plain
//! and compressed) and consumes what it wrote; syncline's own client reads the
//! same records from the same log. Bytes that are no Kafka request close the
//! connection and harm nothing.

use std::collections::BTreeMap;
use std::time::Duration;

use serde_json::Value;
use syncline_e2e::checks::*;
use syncline_e2e::client::read_all;
use syncline_e2e::kcat::{finish_kcat, kcat, spawn_kcat};
use syncline_e2e::Cluster;
use tokio::io::{AsyncReadExt, AsyncWriteExt};

use tokio::time::Instant;

const TOPIC: &str = "kcat";

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn kcat_lists_produces_and_consumes_through_the_kafka_listeners() {
    let cluster = Cluster::start_quorum(3, 3, FAST_TIMERS).await;
    create_topic(&cluster, TOPIC, 3, 3, 2);
    let before = by_partition(&wait_full_isr(&cluster, 1, TOPIC, WAIT).await);
    let bootstrap = cluster.kafka_bootstrap();

    // -L: the brokers at their Kafka listeners, the topic with its leaders.
    let listing: Value =
        serde_json::from_str(&kcat(&["-b", &bootstrap, "-L", "-J", "-t", TOPIC], None).await)
            .unwrap();
    let mut brokers: Vec<String> = listing["brokers"]
        .as_array()
        .unwrap()
        .iter()
        .map(|b| b["name"].as_str().unwrap().to_string())
        .collect();
    brokers.sort();
    let mut expected: Vec<String> = (1..=3).map(|id| cluster.node(id).kafka_addr()).collect();
    expected.sort();
    assert_eq!(brokers, expected);
    let partitions = listing["topics"][0]["partitions"].as_array().unwrap();
    assert_eq!(partitions.len(), 3);
    for p in partitions {
        let id = p["partition"].as_i64().unwrap() as i32;
        assert_eq!(p["leader"].as_i64().unwrap() as i32, before[&id].leader_id);
        assert_eq!(p["replicas"].as_array().unwrap().len(), 3);
    }

    // -P with acks=all: plain, then zstd- and lz4-compressed batches.
    let mut sent = BTreeMap::new();
    for (codec, n) in [("none", 0), ("zstd", 1), ("lz4", 2)] {
        let lines: String = (0..200)
            .map(|i| {
                let (key, value) = (format!("{codec}-{i}"), format!("value {n}/{i}"));
                let line = format!("{key}:{value}\n");
                sent.insert(key, value);
                line
            })
            .collect();
        kcat(
            &[
                "-b", &bootstrap, "-P", "-t", TOPIC, "-K:", "-z", codec, "-X", "acks=all",
            ],
            Some(lines),
        )
        .await;
    }

    // -C from the beginning to the end: every record once, as sent.
    let consumed = kcat(
        &[
            "-b",
            &bootstrap,
            "-C",
            "-t",
            TOPIC,
            "-o",
            "beginning",
            "-e",
            "-q",
            "-f",
            "%p %o %k:%s\\n",
        ],
        None,
    )
    .await;
    let mut got = BTreeMap::new();
    let mut per_partition: BTreeMap<i32, Vec<i64>> = BTreeMap::new();
    for line in consumed.lines() {
        let (p, rest) = line.split_once(' ').unwrap();
        let (offset, record) = rest.split_once(' ').unwrap();
        let (key, value) = record.split_once(':').unwrap();
        assert!(
            got.insert(key.to_string(), value.to_string()).is_none(),
            "{key} consumed twice"
        );
        per_partition
            .entry(p.parse().unwrap())
            .or_default()
            .push(offset.parse().unwrap());
    }
    assert_eq!(got, sent, "consumed exactly what was produced");
    for (p, offsets) in &per_partition {
        let expected: Vec<i64> = (0..offsets.len() as i64).collect();
        assert_eq!(offsets, &expected, "partition {p}: offsets 0, 1, 2, ...");
    }

    // The same log through syncline's own protocol.
    let mut own = 0;
    for (p, m) in &before {
        let conn = cluster.connect(m.leader_id).await.unwrap();
        own += read_all(&conn, TOPIC, *p, 0).await.unwrap().len();
    }
    assert_eq!(own, sent.len());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn bytes_that_are_no_kafka_request_close_the_connection_and_harm_nothing() {
    let cluster = Cluster::start(1, "").await;
    let addr = cluster.node(1).kafka_addr();
    let frames: [(&str, Vec<u8>); 3] = [
        ("an unknown API key", {
            let mut f = 8u32.to_be_bytes().to_vec();
            f.extend_from_slice(&[0x7f, 0x00, 0, 0, 0, 0, 0, 1]);
            f
        }),
        (
            "a frame above socket_request_max_bytes",
            0x7fff_ffffu32.to_be_bytes().to_vec(),
        ),
        ("a Metadata request cut short", {
            let mut f = 10u32.to_be_bytes().to_vec();
            f.extend_from_slice(&[0, 3, 0, 9, 0, 0, 0, 1, 0xff, 0xff]);
            f
        }),
    ];
    for (what, bytes) in frames {
        let mut conn = tokio::net::TcpStream::connect(&addr).await.unwrap();
        conn.write_all(&bytes).await.unwrap();
        let mut buf = [0u8; 64];
        let read = tokio::time::timeout(Duration::from_secs(10), conn.read(&mut buf))
            .await
            .unwrap_or_else(|_| panic!("{what}: the connection stayed open"));
        assert!(
            matches!(read, Ok(0) | Err(_)),
            "{what}: answered {read:?} instead of closing"
        );
    }
    // The broker serves the next client as before.
    let listing: Value =
        serde_json::from_str(&kcat(&["-b", &addr, "-L", "-J"], None).await).unwrap();
    assert_eq!(listing["brokers"].as_array().unwrap().len(), 1);
}

/// librdkafka's idempotent producer (kcat with `enable.idempotence=true`,
/// acks=all) keeps writing across the SIGKILL of the partition's leader: every
/// line is in the log exactly once, in order, and kcat reports no failed
/// delivery.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn kcat_idempotent_producer_survives_a_leader_kill_with_every_line_once_in_order() {
    const LINES: usize = 400;
    let mut cluster = Cluster::start_quorum(3, 3, FAST_TIMERS).await;
    create_topic(&cluster, TOPIC, 1, 3, 2);
    let before = by_partition(&wait_full_isr(&cluster, 1, TOPIC, WAIT).await);
    let leader = before[&0].leader_id;
    let bootstrap = cluster.kafka_bootstrap();
    let args = [
        "-b",
        &bootstrap,
        "-P",
        "-t",
        TOPIC,
        "-p",
        "0",
        "-X",
        "acks=all",
        "-X",
        "enable.idempotence=true",
        "-X",
        "linger.ms=5",
    ];
    let mut child = spawn_kcat(&args, true);
    let mut stdin = child.stdin.take().expect("piped");
    let mut killed = None;
    for i in 0..LINES {
        stdin
            .write_all(format!("line-{i:04}\n").as_bytes())
            .await
            .unwrap();
        if i == LINES / 2 {
            killed = Some(Instant::now());
            cluster.kill(leader);
        }
        // Paces the input so that writes straddle the failover.
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    drop(stdin);
    finish_kcat(child, &args, false).await;

    let killed = killed.expect("killed half-way");
    let after = wait_failover(&cluster, TOPIC, &before, leader, killed).await;
    assert_ne!(after[&0].leader_id, leader, "leadership moved");
    let consumed = kcat(
        &[
            "-b",
            &bootstrap,
            "-C",
            "-t",
            TOPIC,
            "-p",
            "0",
            "-o",
            "beginning",
            "-e",
            "-q",
        ],
        None,
    )
    .await;
    let lines: Vec<&str> = consumed.lines().collect();
    let expected: Vec<String> = (0..LINES).map(|i| format!("line-{i:04}")).collect();
    assert_eq!(lines, expected, "every line once, in order");
}
