//! The CLI against a real broker process, the way a user runs it.

use std::time::Duration;

use syncline_e2e::checks::{wait_logs_identical, WAIT};
use syncline_e2e::{wait_for, Cluster};
use syncline_proto::compression::{Compression, CODECS};

fn stdout(out: &std::process::Output) -> String {
    String::from_utf8_lossy(&out.stdout).into_owned()
}

fn stderr(out: &std::process::Output) -> String {
    String::from_utf8_lossy(&out.stderr).into_owned()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn ten_thousand_records_round_trip_and_survive_sigkill() {
    let mut cluster = Cluster::start(1, "").await;
    let out = cluster.cli(
        &[
            "topic",
            "create",
            "lines",
            "--partitions",
            "1",
            "--replication-factor",
            "1",
        ],
        None,
    );
    assert!(out.status.success(), "{}", stderr(&out));
    let input: String = (0..10_000)
        .map(|i| format!("line {i} {}\n", "x".repeat(i % 50)))
        .collect();
    let out = cluster.cli(
        &["produce", "lines", "--acks", "all"],
        Some(input.as_bytes()),
    );
    assert!(out.status.success(), "produce failed: {}", stderr(&out));
    let consume = |cluster: &Cluster| {
        cluster.cli(
            &[
                "consume",
                "lines",
                "--from-beginning",
                "--max-messages",
                "10000",
                "--timeout-ms",
                "20000",
            ],
            None,
        )
    };
    let out = consume(&cluster);
    assert!(out.status.success(), "{}", stderr(&out));
    assert!(
        stdout(&out) == input,
        "consumed values differ from the produced lines"
    );

    // SIGKILL and restart: the same records are read again (they were in the page
    // cache; a process crash loses nothing the kernel has).
    cluster.kill(1);
    cluster.restart(1);
    wait_for(
        "the broker to serve again",
        Duration::from_secs(30),
        || async {
            cluster
                .partition(1, "lines", 0)
                .await
                .is_ok_and(|p| p.leader_id == 1)
        },
    )
    .await;
    let out = consume(&cluster);
    assert!(out.status.success(), "{}", stderr(&out));
    assert!(
        stdout(&out) == input,
        "records differ after SIGKILL and restart"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn cli_names_errors_and_fixes() {
    let cluster = Cluster::start(1, "").await;
    // A replication factor larger than the cluster.
    let out = cluster.cli(
        &[
            "topic",
            "create",
            "t",
            "--partitions",
            "1",
            "--replication-factor",
            "3",
        ],
        None,
    );
    assert!(!out.status.success());
    assert!(
        stderr(&out).contains("INVALID_REPLICATION_FACTOR"),
        "{}",
        stderr(&out)
    );
    // A malformed topic config.
    let out = cluster.cli(
        &[
            "topic",
            "create",
            "t",
            "--partitions",
            "1",
            "--replication-factor",
            "1",
            "--config",
            "min.insync.replicas",
        ],
        None,
    );
    assert!(!out.status.success());
    assert!(
        stderr(&out).contains("expected KEY=VALUE"),
        "{}",
        stderr(&out)
    );
    // An unknown topic.
    let out = cluster.cli(&["topic", "describe", "nope"], None);
    assert!(!out.status.success());
    assert!(stderr(&out).contains("nope"), "{}", stderr(&out));
    // No broker there at all: the message says what to do.
    let out = syncline_e2e::cli_with(
        &format!("127.0.0.1:{}", syncline_e2e::free_port()),
        &["topic", "list"],
        None,
    );
    assert!(!out.status.success());
    assert!(stderr(&out).contains("cluster.sh up"), "{}", stderr(&out));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn produce_warns_when_fewer_replicas_than_the_replication_factor_acknowledged() {
    let mut cluster = Cluster::start(3, "replica_lag_time_max_ms = 1000\n").await;
    let out = cluster.cli(
        &[
            "topic",
            "create",
            "w",
            "--partitions",
            "3",
            "--replication-factor",
            "3",
        ],
        None,
    );
    assert!(out.status.success(), "{}", stderr(&out));
    // A partition broker 1 (the controller) leads; pause one of its followers.
    let mut partition = None;
    for p in 0..3 {
        if cluster.partition(1, "w", p).await.unwrap().leader_id == 1 {
            partition = Some(p);
        }
    }
    let p = partition.expect("broker 1 leads a partition").to_string();
    let out = cluster.cli(
        &["produce", "w", "--partition", &p, "--acks", "all"],
        Some(b"a\nb\n"),
    );
    assert!(out.status.success(), "{}", stderr(&out));
    assert!(!stderr(&out).contains("warning"), "{}", stderr(&out));
    cluster.pause(2);
    let pn: i32 = p.parse().unwrap();
    wait_for("the ISR to shrink", Duration::from_secs(20), || async {
        // Keep writing so the paused follower falls behind.
        let _ = cluster.cli(
            &["produce", "w", "--partition", &p, "--acks", "1"],
            Some(b"filler\n"),
        );
        cluster
            .describe_partition("w", pn)
            .await
            .is_ok_and(|d| d.isr.len() == 2)
    })
    .await;
    let out = cluster.cli(
        &["produce", "w", "--partition", &p, "--acks", "all"],
        Some(b"c\nd\n"),
    );
    assert!(out.status.success(), "{}", stderr(&out));
    let err = stderr(&out);
    assert!(
        err.contains("warning") && err.contains("replication factor 3"),
        "{err}"
    );
    cluster.resume(2);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_compression_codec_is_produced_stored_as_sent_replicated_and_consumed() {
    let cluster = Cluster::start(3, "").await;
    let topic = "packed";
    let out = cluster.cli(
        &[
            "topic",
            "create",
            topic,
            "--partitions",
            "1",
            "--replication-factor",
            "3",
        ],
        None,
    );
    assert!(out.status.success(), "{}", stderr(&out));
    let mut input = String::new();
    for codec in CODECS {
        let lines: String = (0..500)
            .map(|i| format!("{codec} line {i} {}\n", "compressible ".repeat(20)))
            .collect();
        let out = cluster.cli(
            &[
                "produce",
                topic,
                "--acks",
                "all",
                "--linger-ms",
                "20",
                "--batch-size",
                "65536",
                "--compression-type",
                codec.name(),
            ],
            Some(lines.as_bytes()),
        );
        assert!(
            out.status.success(),
            "produce with {codec}: {}",
            stderr(&out)
        );
        input.push_str(&lines);
    }
    let out = cluster.cli(
        &[
            "consume",
            topic,
            "--from-beginning",
            "--max-messages",
            "2500",
            "--timeout-ms",
            "20000",
        ],
        None,
    );
    assert!(out.status.success(), "{}", stderr(&out));
    assert!(
        stdout(&out) == input,
        "consumed values differ from the produced lines"
    );

    // The leader stores each batch as the producer compressed it.
    let leader = cluster.partition(1, topic, 0).await.unwrap().leader_id;
    let conn = cluster.connect(leader).await.unwrap();
    let batches = syncline_e2e::client::read_batches(&conn, topic, 0, 0)
        .await
        .unwrap();
    let mut codecs: Vec<Compression> = batches.iter().map(|(h, _)| h.codec().unwrap()).collect();
    codecs.dedup();
    assert_eq!(codecs, CODECS, "codecs of the stored batches, in order");
    let stored = |codec: Compression| -> usize {
        batches
            .iter()
            .filter(|(h, _)| h.codec().unwrap() == codec)
            .map(|(h, _)| h.total_len())
            .sum()
    };
    for codec in &CODECS[1..] {
        assert!(
            stored(*codec) * 4 < stored(Compression::None),
            "{codec}: {} bytes stored, uncompressed {}",
            stored(*codec),
            stored(Compression::None)
        );
    }
    // And every follower holds the same bytes.
    wait_logs_identical(&cluster, topic, 0, WAIT).await;
}

/// Codecs of the stored batches of `topic`-0 from `from`, as its leader serves them.
async fn stored_codecs(cluster: &Cluster, topic: &str, from: i64) -> Vec<Compression> {
    let leader = cluster.partition(1, topic, 0).await.unwrap().leader_id;
    let conn = cluster.connect(leader).await.unwrap();
    let batches = syncline_e2e::client::read_batches(&conn, topic, 0, from)
        .await
        .unwrap();
    let mut codecs: Vec<Compression> = batches.iter().map(|(h, _)| h.codec().unwrap()).collect();
    codecs.dedup();
    codecs
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_topic_compression_type_makes_the_leader_recompress_and_changes_live() {
    let cluster = Cluster::start(1, "").await;
    let topic = "zstd-topic";
    let cli = |args: &[&str], stdin: Option<&[u8]>| {
        let out = cluster.cli(args, stdin);
        assert!(out.status.success(), "{args:?}: {}", stderr(&out));
        out
    };
    cli(
        &[
            "topic",
            "create",
            topic,
            "--partitions",
            "1",
            "--replication-factor",
            "1",
            "--config",
            "compression.type=zstd",
        ],
        None,
    );
    let lines = |tag: &str| -> String {
        (0..200)
            .map(|i| format!("{tag} {i} {}\n", "zzz ".repeat(30)))
            .collect()
    };
    let mut input = String::new();
    for codec in ["none", "lz4"] {
        let l = lines(codec);
        cli(
            &["produce", topic, "--compression-type", codec],
            Some(l.as_bytes()),
        );
        input.push_str(&l);
    }
    assert_eq!(stored_codecs(&cluster, topic, 0).await, [Compression::Zstd]);
    let out = cli(&["topic", "describe", topic, "--json"], None);
    let described: serde_json::Value = serde_json::from_str(&stdout(&out)).unwrap();
    assert_eq!(
        described["configs"]["compression.type"], "zstd",
        "{described}"
    );

    // Back to Kafka's default: batches are kept as the producer sent them. The
    // leader applies the change a moment later: probe (one line a batch) until a
    // gzip batch is stored as gzip.
    cli(
        &[
            "topic",
            "alter",
            topic,
            "--config",
            "compression.type=producer",
        ],
        None,
    );
    let input = std::cell::RefCell::new(input);
    let probes = std::cell::Cell::new(0);
    wait_for("the new config to reach the leader", WAIT, || async {
        let line = format!("probe {}\n", probes.get());
        let out = cluster.cli(
            &["produce", topic, "--compression-type", "gzip"],
            Some(line.as_bytes()),
        );
        assert!(out.status.success(), "{}", stderr(&out));
        input.borrow_mut().push_str(&line);
        let from = 400 + probes.get();
        probes.set(probes.get() + 1);
        stored_codecs(&cluster, topic, from).await == [Compression::Gzip]
    })
    .await;
    let input = input.into_inner();
    let total = (400 + probes.get()).to_string();
    let out = cli(
        &[
            "consume",
            topic,
            "--from-beginning",
            "--max-messages",
            &total,
            "--timeout-ms",
            "20000",
        ],
        None,
    );
    assert!(
        stdout(&out) == input,
        "consumed values differ from the produced lines"
    );

    let out = cluster.cli(
        &[
            "topic",
            "alter",
            topic,
            "--config",
            "compression.type=brotli",
        ],
        None,
    );
    assert!(!out.status.success());
    assert!(
        format!("{}{}", stdout(&out), stderr(&out))
            .contains("producer, uncompressed, gzip, snappy, lz4 or zstd"),
        "{}{}",
        stdout(&out),
        stderr(&out)
    );
}
