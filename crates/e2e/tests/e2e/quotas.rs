//! Client quotas set while the cluster runs (KIP-13 with KIP-257's dynamic
//! entities), through the CLI: `syncline quota set --client-id slow
//! --producer-byte-rate 1048576` commits the quota through the controller, the
//! broker applies it, and a greedy producer with that client id is held to it
//! (±10 %) and told `throttle_time_ms`, while another client id producing at
//! twice the rate beside it is never throttled; `syncline quota delete` lifts
//! it, and the same client id then produces well past the rate unthrottled.
//!
//! The broker runs with a quota window of two samples of a second (see
//! `syncline_e2e::quotas`).
//!
//! librdkafka is held to producer and consumer quotas the CLI set for its
//! client id (±10 %), and its own statistics report the throttle times the
//! broker told it (crates/e2e/python/librdkafka_throttle.py).
//!
//! A Kafka client manages the same quotas through the Kafka listener:
//! kafka-python sends AlterClientQuotas and DescribeClientQuotas
//! (crates/e2e/python/kafka_client_quotas.py), and what it sets the CLI
//! describes and the other way round; an invalid value is refused with
//! INVALID_REQUEST.

use std::time::Duration;

use serde_json::Value;
use syncline_e2e::checks::create_topic;
use syncline_e2e::kcat::kafka_python;
use syncline_e2e::quotas::{
    measured_rate, produce_count, produce_until, record_batch, MEASURED, QUOTA, WARM_UP,
};
use syncline_e2e::{wait_for, Cluster};
use tokio::process::Command;
use tokio::time::Instant;

/// Bound on a quota change reaching the broker.
const PROPAGATION: Duration = Duration::from_secs(20);

fn stdout(out: &std::process::Output) -> String {
    assert!(
        out.status.success(),
        "the CLI failed: {}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout).into_owned()
}

/// The producer byte rate `syncline quota describe --client-id ID --json`
/// shows for `client_id` alone, if any.
fn described_rate(cluster: &Cluster, client_id: &str) -> Option<u64> {
    let out = stdout(&cluster.cli(
        &[
            "quota",
            "describe",
            "--client-id",
            client_id,
            "--strict",
            "--json",
        ],
        None,
    ));
    let entries: Value = serde_json::from_str(&out).expect("JSON");
    entries.as_array()?.iter().find_map(|e| {
        (e["entity"]["client-id"] == client_id)
            .then(|| e["quotas"]["producer_byte_rate"].as_u64())
            .flatten()
    })
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_quota_set_through_the_cli_slows_its_client_id_alone_until_deleted() {
    let cluster = Cluster::start(1, "quota_window_num = 2").await;
    create_topic(&cluster, "q", 2, 1, 1);
    let quota = QUOTA.to_string();
    let set = stdout(&cluster.cli(
        &[
            "quota",
            "set",
            "--client-id",
            "slow",
            "--producer-byte-rate",
            &quota,
        ],
        None,
    ));
    assert!(
        set.contains("Set producer_byte_rate of client-id slow"),
        "{set}"
    );
    // The broker describes the quotas it enforces.
    wait_for("the quota to reach the broker", PROPAGATION, || async {
        described_rate(&cluster, "slow") == Some(QUOTA)
    })
    .await;

    let connect = |client_id: &'static str| {
        let addr = cluster.node(1).addr();
        async move {
            syncline_e2e::security::connect(&addr, client_id, Duration::from_secs(5))
                .await
                .unwrap()
        }
    };
    let (slow, other) = (connect("slow").await, connect("other").await);
    let batch = record_batch(64 << 10);
    let started = Instant::now();
    let end = started + WARM_UP + MEASURED;
    // 64 KiB every 31 ms: about twice the quota, on another client id.
    let other_task = tokio::spawn({
        let batch = batch.clone();
        async move {
            let every = Some(Duration::from_millis(31));
            let seen = produce_until(&other, "q", 1, &batch, every, started, end).await;
            (other, seen)
        }
    });
    let greedy = produce_until(&slow, "q", 0, &batch, None, started, end).await;
    let (other, beside) = other_task.await.unwrap();
    let rate = measured_rate(&greedy.acked);
    let other_rate = measured_rate(&beside.acked);
    println!(
        "quota set by the CLI, {QUOTA} B/s for client id slow: it achieved {rate:.0} B/s \
         ({:.3} of it) over {MEASURED:?} after {WARM_UP:?}, told throttle_time_ms up to {}; \
         client id other beside it: {other_rate:.0} B/s, {} of {} produces throttled",
        rate / QUOTA as f64,
        greedy.most_throttled,
        beside.throttled,
        beside.acked.len()
    );
    let ratio = rate / QUOTA as f64;
    assert!(
        (0.9..=1.1).contains(&ratio),
        "client id slow at {rate:.0} B/s against a quota of {QUOTA}"
    );
    assert!(greedy.most_throttled > 0, "client id slow was never told");
    assert_eq!(beside.throttled, 0, "client id other was throttled");
    assert!(
        other_rate > 1.5 * QUOTA as f64,
        "client id other at {other_rate:.0} B/s: slowed towards slow's quota"
    );

    let deleted = stdout(&cluster.cli(
        &[
            "quota",
            "delete",
            "--client-id",
            "slow",
            "--producer-byte-rate",
        ],
        None,
    ));
    assert!(deleted.contains("Deleted producer_byte_rate"), "{deleted}");
    wait_for(
        "the quota's removal to reach the broker",
        PROPAGATION,
        || async { described_rate(&cluster, "slow").is_none() },
    )
    .await;
    // 8 MiB as fast as it goes: eight seconds' worth of the old quota, which
    // would have throttled it after the first (the rate it built up above is
    // still in the window).
    let started = Instant::now();
    let after = produce_count(&slow, "q", 0, &batch, 128).await;
    let took = started.elapsed();
    println!(
        "after quota delete: client id slow produced {} batches in {took:?}, {} throttled",
        after.acked.len(),
        after.throttled
    );
    assert_eq!(after.throttled, 0, "still throttled after the quota went");
    drop(other);
}

/// Bound on one run of the script.
const SCRIPT_TIMEOUT: Duration = Duration::from_secs(60);

/// Runs `kafka_client_quotas.py COMMAND BOOTSTRAP ARGS...`; its stdout
/// lines, after checking it succeeded.
async fn script(cluster: &Cluster, command: &str, args: &[&str]) -> Vec<String> {
    python(cluster, "kafka_client_quotas.py", command, args).await
}

/// Runs `crates/e2e/python/SCRIPT COMMAND BOOTSTRAP ARGS...` with the Kafka
/// clients' Python; its stdout lines, after checking it succeeded.
async fn python(cluster: &Cluster, script: &str, command: &str, args: &[&str]) -> Vec<String> {
    let path = format!("{}/python/{script}", env!("CARGO_MANIFEST_DIR"));
    let child = Command::new(kafka_python())
        .arg(path)
        .args([command, &cluster.kafka_bootstrap()])
        .args(args)
        .stdin(std::process::Stdio::null())
        .kill_on_drop(true)
        .output();
    let out = tokio::time::timeout(SCRIPT_TIMEOUT, child)
        .await
        .unwrap_or_else(|_| panic!("{command} did not finish within {SCRIPT_TIMEOUT:?}"))
        .expect("kafka-python runs (SYNCLINE_KAFKA_PYTHON, or target/kafka-clients)");
    assert!(
        out.status.success(),
        "{command} failed: {}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout)
        .lines()
        .map(str::to_string)
        .collect()
}

/// librdkafka held to quotas the CLI set for its client id, producing and
/// consuming: held to the rate (±10 %), and its own statistics report the
/// throttle times the broker told it (the "throttle" window of each broker,
/// which librdkafka fills from `throttle_time_ms`).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn librdkafka_is_held_to_the_quotas_the_cli_set_and_reports_the_throttle_time() {
    let cluster = Cluster::start(1, "quota_window_num = 2").await;
    create_topic(&cluster, "lp", 1, 1, 1);
    create_topic(&cluster, "lc", 1, 1, 1);
    // What the consumer reads: 32 MiB, twice what it may read in the run,
    // written by another client id.
    let filler =
        syncline_e2e::security::connect(&cluster.node(1).addr(), "filler", Duration::from_secs(5))
            .await
            .unwrap();
    let filled = produce_count(&filler, "lc", 0, &record_batch(64 << 10), 512).await;
    assert_eq!((filled.acked.len(), filled.throttled), (512, 0));
    let quota = QUOTA.to_string();
    stdout(&cluster.cli(
        &[
            "quota",
            "set",
            "--client-id",
            "rdk",
            "--producer-byte-rate",
            &quota,
            "--consumer-byte-rate",
            &quota,
        ],
        None,
    ));
    wait_for("the quotas to reach the broker", PROPAGATION, || async {
        described_rate(&cluster, "rdk") == Some(QUOTA)
            && stdout(&cluster.cli(&["quota", "describe", "--client-id", "rdk", "--json"], None))
                .contains("consumer_byte_rate")
    })
    .await;
    let (warm_up, measured) = (
        format!("{}", WARM_UP.as_secs_f64()),
        format!("{}", MEASURED.as_secs_f64()),
    );
    for (command, topic) in [("produce", "lp"), ("consume", "lc")] {
        let lines = python(
            &cluster,
            "librdkafka_throttle.py",
            command,
            &[topic, "rdk", &warm_up, &measured],
        )
        .await;
        let field = |name: &str| -> Vec<f64> {
            let line = lines
                .iter()
                .find_map(|l| l.strip_prefix(&format!("{name} ")))
                .unwrap_or_else(|| panic!("no {name} line in {lines:?}"));
            line.split(' ').map(|v| v.parse().unwrap()).collect()
        };
        let rate = field("RATE")[0];
        let throttle = field("THROTTLE");
        println!(
            "librdkafka {command}, client id rdk with a quota of {QUOTA} B/s: {rate:.0} B/s \
             ({:.3} of it) over {MEASURED:?} after {WARM_UP:?}; its statistics: throttle \
             up to {} ms, {} answers throttled",
            rate / QUOTA as f64,
            throttle[0],
            throttle[1]
        );
        let ratio = rate / QUOTA as f64;
        assert!(
            (0.9..=1.1).contains(&ratio),
            "librdkafka {command} at {rate:.0} B/s against a quota of {QUOTA}"
        );
        assert!(
            throttle[0] > 0.0 && throttle[1] > 0.0,
            "librdkafka's statistics report no throttle time: {throttle:?}"
        );
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn kafka_python_sets_and_describes_the_quotas_the_cli_does() {
    let cluster = Cluster::start(1, "").await;
    // Set by a Kafka client, described by the CLI.
    let altered = script(&cluster, "alter", &["kp", "producer_byte_rate", "2048"]).await;
    assert_eq!(altered, vec!["ALTERED 0 "]);
    wait_for("the quota to reach the broker", PROPAGATION, || async {
        described_rate(&cluster, "kp") == Some(2048)
    })
    .await;
    // Set by the CLI, described by the Kafka client (with the first).
    stdout(&cluster.cli(
        &[
            "quota",
            "set",
            "--client-id",
            "kp",
            "--consumer-byte-rate",
            "4096",
        ],
        None,
    ));
    wait_for(
        "the CLI's quota to reach the broker",
        PROPAGATION,
        || async {
            described_rate(&cluster, "kp").is_some()
                && stdout(&cluster.cli(&["quota", "describe", "--json"], None)).contains("4096")
        },
    )
    .await;
    assert_eq!(
        script(&cluster, "describe", &["kp"]).await,
        vec![
            "QUOTA kp producer_byte_rate 2048.0",
            "QUOTA kp consumer_byte_rate 4096.0",
            "ENTRIES 1"
        ]
    );
    // Kafka's validation, as Kafka's clients see it: INVALID_REQUEST (42).
    let refused = script(&cluster, "alter", &["kp", "producer_byte_rate", "-1"]).await;
    assert!(
        refused[0].starts_with("ALTERED 42 quota producer_byte_rate must be greater than 0"),
        "{refused:?}"
    );
    let refused = script(&cluster, "alter", &["kp", "no.such.quota", "1"]).await;
    assert!(
        refused[0].starts_with("ALTERED 42 invalid quota key"),
        "{refused:?}"
    );
    // Removed by the Kafka client.
    for key in ["producer_byte_rate", "consumer_byte_rate"] {
        let removed = script(&cluster, "alter", &["kp", key, "remove"]).await;
        assert_eq!(removed, vec!["ALTERED 0 "]);
    }
    wait_for("the removal to reach the broker", PROPAGATION, || async {
        script(&cluster, "describe", &["kp"]).await == vec!["ENTRIES 0"]
    })
    .await;
}
