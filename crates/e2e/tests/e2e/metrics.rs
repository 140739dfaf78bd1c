//! Metrics with real processes: every broker's `/metrics` text parsed with a real
//! Prometheus parser; the ISR counters and gauges moving by exactly the expected
//! amounts through a follower's pause (SIGSTOP) and resume (SIGCONT), watched live
//! by `syncline metrics --watch --json`; the one-shot `syncline metrics` (JSON and
//! table) and `--watch` without a terminal; and the Grafana dashboard and
//! docs/metrics.md checked against what brokers actually export.

use std::collections::{BTreeMap, BTreeSet};
use std::io::{BufRead, BufReader};
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use prometheus_parse::{LineInfo, Scrape};
use serde_json::Value;
use syncline_e2e::client::{batch, produce};
use syncline_e2e::{bin, http_get, wait_for, Cluster};
use syncline_proto::pb::response::Body as Resp;
use tokio::time::Instant;

/// A short lag time so shrinks happen in seconds; a long session timeout so the
/// paused follower is never fenced (fencing would move leaderships and change
/// broker 1's ISRs by the controller's hand, not by its own shrinks).
const CONFIG: &str = "replica_lag_time_max_ms = 2000\nbroker_session_timeout_ms = 60000\n";
const TOPIC: &str = "health";
/// Labels Prometheus adds when it scrapes (not exported by the broker).
const TARGET_LABELS: [&str; 2] = ["instance", "job"];

/// A child process killed (and reaped) on every path, a failed assertion included.
struct KillOnDrop(Child);

impl Drop for KillOnDrop {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// `syncline metrics ARGS` running in the background, its stdout lines collected.
struct Watch {
    child: KillOnDrop,
    lines: Arc<Mutex<Vec<String>>>,
}

impl Watch {
    fn start(cluster: &Cluster, args: &[&str]) -> Watch {
        let stderr = std::fs::File::create(cluster.dir.path().join("metrics-watch.stderr"))
            .expect("stderr file");
        let mut child = Command::new(bin("syncline"))
            .arg("--bootstrap-server")
            .arg(cluster.bootstrap())
            .arg("metrics")
            .args(args)
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::from(stderr))
            .spawn()
            .expect("spawn syncline metrics");
        let stdout = child.stdout.take().expect("stdout");
        let child = KillOnDrop(child);
        let lines = Arc::new(Mutex::new(Vec::new()));
        let sink = lines.clone();
        // Ends at EOF, when the child is killed.
        std::thread::spawn(move || {
            for line in BufReader::new(stdout).lines() {
                let Ok(line) = line else { break };
                sink.lock().unwrap().push(line);
            }
        });
        Watch { child, lines }
    }

    fn lines(&self) -> Vec<String> {
        self.lines.lock().unwrap().clone()
    }

    /// Every JSON frame so far (the output is JSON Lines).
    fn frames(&self) -> Vec<Value> {
        self.lines()
            .iter()
            .map(|l| serde_json::from_str(l).unwrap_or_else(|e| panic!("not JSON ({e}): {l}")))
            .collect()
    }

    fn stop(mut self) -> Vec<String> {
        let _ = self.child.0.kill();
        let _ = self.child.0.wait();
        self.lines()
    }
}

/// Broker `id`'s entry of a `syncline metrics --json` frame.
fn broker_entry(frame: &Value, id: i32) -> Option<&Value> {
    frame["brokers"]
        .as_array()?
        .iter()
        .find(|b| b["broker"] == id)
}

fn metric(cluster: &Cluster, id: i32, name: &str) -> f64 {
    cluster
        .metric(id, name)
        .unwrap_or_else(|e| panic!("{name} of broker {id}: {e:#}"))
}

/// Checks `text` line by line as Prometheus/OpenMetrics text with the parser's own
/// line classifier (the parser itself skips lines it does not understand), parses
/// it whole, and returns each series name with its label names, plus each metric
/// family's declared type.
fn check_exposition(text: &str) -> (BTreeMap<String, BTreeSet<String>>, BTreeMap<String, String>) {
    assert_eq!(
        text.lines().last(),
        Some("# EOF"),
        "OpenMetrics text ends with # EOF"
    );
    let mut series: BTreeMap<String, BTreeSet<String>> = BTreeMap::new();
    let mut types = BTreeMap::new();
    for line in text.lines() {
        if let Some(rest) = line.strip_prefix("# TYPE ") {
            let (name, ty) = rest.split_once(' ').expect("# TYPE name type");
            types.insert(name.to_string(), ty.to_string());
        }
        match LineInfo::parse(line) {
            LineInfo::Sample {
                metric_name,
                labels,
                value,
                timestamp,
            } => {
                assert!(
                    value.parse::<f64>().is_ok() || ["NaN", "+Inf", "-Inf"].contains(&value),
                    "bad value in {line:?}"
                );
                assert!(timestamp.is_none(), "unexpected timestamp in {line:?}");
                let names = series.entry(metric_name.to_string()).or_default();
                for pair in labels
                    .unwrap_or_default()
                    .split(',')
                    .filter(|p| !p.is_empty())
                {
                    let (name, value) = pair.split_once('=').expect("label=value");
                    assert!(
                        value.starts_with('"') && value.ends_with('"'),
                        "unquoted label value in {line:?}"
                    );
                    names.insert(name.to_string());
                }
            }
            LineInfo::Doc { .. } | LineInfo::Type { .. } | LineInfo::Empty => {}
            LineInfo::Ignored => assert!(
                line == "# EOF" || line.starts_with("# UNIT "),
                "not exposition format: {line:?}"
            ),
        }
    }
    let scrape = Scrape::parse(text.lines().map(|l| Ok(l.to_string()))).expect("parses");
    assert!(!scrape.samples.is_empty());
    (series, types)
}

/// Every series name (with its label names) over every broker, and every family's
/// type.
fn exported(cluster: &Cluster) -> (BTreeMap<String, BTreeSet<String>>, BTreeMap<String, String>) {
    let mut series: BTreeMap<String, BTreeSet<String>> = BTreeMap::new();
    let mut types = BTreeMap::new();
    for node in &cluster.nodes {
        let text = http_get(&node.metrics_addr(), "/metrics").expect("GET /metrics");
        let (s, t) = check_exposition(&text);
        for (name, labels) in s {
            series.entry(name).or_default().extend(labels);
        }
        types.extend(t);
    }
    (series, types)
}

fn create_topic(cluster: &Cluster, partitions: i32, rf: i32) {
    syncline_e2e::checks::create_topic(cluster, TOPIC, partitions, rf, 1);
}

/// (partition, leader, replicas) of every partition, once all have a leader.
async fn placement(cluster: &Cluster, partitions: i32) -> Vec<(i32, i32, Vec<i32>)> {
    let deadline = Instant::now() + Duration::from_secs(15);
    loop {
        let mut all = Vec::new();
        for p in 0..partitions {
            if let Ok(m) = cluster.partition(1, TOPIC, p).await {
                if m.leader_id > 0 {
                    all.push((p, m.leader_id, m.replicas));
                }
            }
        }
        if all.len() == partitions as usize {
            return all;
        }
        assert!(Instant::now() < deadline, "partitions without a leader");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn isr_metrics_move_exactly_through_a_follower_pause() {
    const PARTITIONS: i32 = 6;
    let mut cluster = Cluster::start(3, CONFIG).await;
    create_topic(&cluster, PARTITIONS, 2);
    let placed = placement(&cluster, PARTITIONS).await;

    // Broker 1 hosts the controller (the single voter): pause a follower of the
    // partitions it leads, the one in most of them. With RF 2 some of broker 1's
    // partitions may have the other follower: they must not shrink.
    let led: Vec<&(i32, i32, Vec<i32>)> = placed.iter().filter(|(_, l, _)| *l == 1).collect();
    assert!(!led.is_empty(), "broker 1 leads nothing: {placed:?}");
    let in_led = |f: i32| led.iter().filter(|(_, _, r)| r.contains(&f)).count();
    let follower = if in_led(2) >= in_led(3) { 2 } else { 3 };
    let n = in_led(follower) as f64;
    let affected: BTreeSet<i32> = led
        .iter()
        .filter(|(_, _, r)| r.contains(&follower))
        .map(|(p, _, _)| *p)
        .collect();

    // The text of all three brokers is valid exposition format and declares the
    // documented families with their types.
    let (_, types) = exported(&cluster);
    for (family, ty) in [
        ("syncline_isr_shrinks", "counter"),
        ("syncline_isr_expands", "counter"),
        ("syncline_failed_isr_updates", "counter"),
        ("syncline_unclean_leader_elections", "counter"),
        ("syncline_under_replicated_partitions", "gauge"),
        ("syncline_under_min_isr_partition_count", "gauge"),
        ("syncline_at_min_isr_partition_count", "gauge"),
        ("syncline_offline_partitions_count", "gauge"),
        ("syncline_request_duration_seconds", "histogram"),
    ] {
        assert_eq!(types.get(family).map(String::as_str), Some(ty), "{family}");
    }

    // A steady start: every follower of broker 1's partitions caught up recently
    // and no ISR change in flight, so nothing moves the counters but the pause.
    wait_for(
        "broker 1's followers in sync",
        Duration::from_secs(15),
        || async {
            let mut steady = cluster
                .metric(1, "syncline_under_replicated_partitions")
                .is_ok_and(|v| v == 0.0);
            for (p, _, _) in &led {
                steady &= cluster.describe_partition(TOPIC, *p).await.is_ok_and(|d| {
                    d.pending_isr.is_empty()
                        && d.replica_statuses
                            .iter()
                            .all(|r| (0..1000).contains(&r.last_caught_up_ms_ago))
                });
            }
            steady
        },
    )
    .await;
    let shrinks = metric(&cluster, 1, "syncline_isr_shrinks_total");
    let expands = metric(&cluster, 1, "syncline_isr_expands_total");

    // The live view, from before the pause to after the resume.
    let watch = Watch::start(&cluster, &["--watch", "0.5", "--json"]);
    wait_for("a first --watch frame", Duration::from_secs(20), || async {
        !watch.lines().is_empty()
    })
    .await;

    // Pause the follower. A follower with nothing to fetch stays in sync (Kafka's
    // rule), so keep writing to every partition broker 1 leads until the shrinks
    // are committed.
    cluster.pause(follower);
    let leader = cluster.connect(1).await.unwrap();
    let deadline = Instant::now() + Duration::from_secs(30);
    while metric(&cluster, 1, "syncline_under_replicated_partitions") < n {
        for (p, _, _) in &led {
            let r = produce(&leader, TOPIC, *p, 1, &[b"tick".to_vec()])
                .await
                .unwrap();
            assert_eq!(r.error_code, 0, "{r:?}");
        }
        assert!(Instant::now() < deadline, "ISR did not shrink");
        // Paces the load (a record per partition every 100 ms); the loop's
        // condition is the metric.
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    assert_eq!(
        metric(&cluster, 1, "syncline_under_replicated_partitions"),
        n
    );
    assert_eq!(
        metric(&cluster, 1, "syncline_isr_shrinks_total"),
        shrinks + n
    );
    assert_eq!(metric(&cluster, 1, "syncline_isr_expands_total"), expands);
    // min.insync.replicas is 1: the shrunk partitions are exactly at it, none below.
    assert_eq!(
        metric(&cluster, 1, "syncline_at_min_isr_partition_count"),
        n
    );
    assert_eq!(
        metric(&cluster, 1, "syncline_under_min_isr_partition_count"),
        0.0
    );
    for (p, _, _) in &led {
        // Labels come back sorted by name.
        let isr = metric(
            &cluster,
            1,
            &format!("syncline_partition_isr_size{{partition=\"{p}\",topic=\"{TOPIC}\"}}"),
        );
        let want = if affected.contains(p) { 1.0 } else { 2.0 };
        assert_eq!(isr, want, "ISR size of {TOPIC}-{p}");
    }
    // The paused broker cannot answer: the watch says so instead of stalling.
    wait_for(
        "the watch to report the paused broker",
        Duration::from_secs(20),
        || async {
            watch
                .frames()
                .iter()
                .any(|f| broker_entry(f, follower).is_some_and(|b| b["error"].is_string()))
        },
    )
    .await;

    // Resume: the follower catches up and rejoins every ISR it left.
    cluster.resume(follower);
    wait_for(
        "no under-replicated partition after the resume",
        Duration::from_secs(30),
        || async {
            cluster
                .metric(1, "syncline_under_replicated_partitions")
                .is_ok_and(|v| v == 0.0)
        },
    )
    .await;
    assert_eq!(
        metric(&cluster, 1, "syncline_isr_expands_total"),
        expands + n
    );
    assert_eq!(
        metric(&cluster, 1, "syncline_isr_shrinks_total"),
        shrinks + n
    );
    assert_eq!(
        metric(&cluster, 1, "syncline_at_min_isr_partition_count"),
        0.0
    );
    assert_eq!(
        metric(&cluster, 1, "syncline_failed_isr_updates_total"),
        0.0
    );

    // Each change is one structured event on the leader, with its numbers.
    let log = std::fs::read_to_string(&cluster.node(1).log).unwrap();
    for p in &affected {
        let fields = [
            format!("partition={p} "),
            format!("replica={follower} "),
            "last_caught_up_ms_ago=".to_string(),
            "lag_offsets=".to_string(),
            "replica_lag_time_max_ms=2000".to_string(),
        ];
        assert!(
            log.lines()
                .any(|l| l.contains("isr shrink proposed") && fields.iter().all(|f| l.contains(f))),
            "no shrink event for {TOPIC}-{p} with {fields:?}:\n{log}"
        );
        assert!(
            log.lines().any(|l| l.contains("isr expand committed")
                && l.contains(&format!("topic={TOPIC} partition={p} "))),
            "no expand event for {TOPIC}-{p}:\n{log}"
        );
    }

    // The watch saw both happen live, as totals and as non-zero rates.
    wait_for(
        "the watch to show the expansions",
        Duration::from_secs(20),
        || async {
            watch
                .frames()
                .iter()
                .any(|f| broker_entry(f, 1).is_some_and(|b| b["isr_expands_total"] == expands + n))
        },
    )
    .await;
    let lines = watch.stop();
    let frames: Vec<Value> = lines
        .iter()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    let b1: Vec<&Value> = frames.iter().filter_map(|f| broker_entry(f, 1)).collect();
    let first_with = |key: &str, total: f64| {
        b1.iter()
            .find(|b| b[key].as_f64() == Some(total))
            .unwrap_or_else(|| panic!("no frame with {key} = {total}:\n{}", lines.join("\n")))
    };
    let shrunk = first_with("isr_shrinks_total", shrinks + n);
    assert!(
        shrunk["isr_shrinks_per_sec"].as_f64().unwrap() > 0.0,
        "{shrunk}"
    );
    let expanded = first_with("isr_expands_total", expands + n);
    assert!(
        expanded["isr_expands_per_sec"].as_f64().unwrap() > 0.0,
        "{expanded}"
    );
    // Totals only go up, and never past the expected amounts.
    for w in b1.windows(2) {
        for key in ["isr_shrinks_total", "isr_expands_total"] {
            assert!(w[0][key].as_f64() <= w[1][key].as_f64(), "{key} went down");
        }
    }
    assert!(b1
        .iter()
        .all(|b| b["isr_shrinks_total"].as_f64().unwrap() <= shrinks + n));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn metrics_command_json_table_and_plain_watch() {
    const PARTITIONS: i32 = 3;
    let cluster = Cluster::start(3, CONFIG).await;
    create_topic(&cluster, PARTITIONS, 3);
    placement(&cluster, PARTITIONS).await;
    wait_for(
        "every replica in place, none under-replicated",
        Duration::from_secs(15),
        || async {
            (1..=3).all(|id| {
                cluster
                    .metric(id, "syncline_under_replicated_partitions")
                    .is_ok_and(|v| v == 0.0)
                    && cluster
                        .metric(id, "syncline_partition_count")
                        .is_ok_and(|v| v == f64::from(PARTITIONS))
            })
        },
    )
    .await;

    // One shot, JSON: every broker, read through the cluster's own metadata.
    let started = Instant::now();
    let out = cluster.cli(&["metrics", "--json"], None);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    // A one-shot run samples twice, a second apart, for its rates.
    assert!(started.elapsed() >= Duration::from_secs(1));
    let v: Value = serde_json::from_slice(&out.stdout).expect("JSON");
    let brokers = v["brokers"].as_array().unwrap();
    assert_eq!(brokers.len(), 3, "{v}");
    let mut leaders = 0;
    for (i, b) in brokers.iter().enumerate() {
        let id = i as i64 + 1;
        assert_eq!(b["broker"], id, "sorted by id: {v}");
        assert_eq!(b["error"], Value::Null, "{b}");
        assert_eq!(
            b["metrics_address"],
            cluster.node(id as i32).metrics_addr().as_str()
        );
        assert_eq!(b["active_controller"], id == 1, "{b}");
        assert_eq!(b["partition_count"], PARTITIONS, "{b}");
        assert_eq!(b["under_replicated_partitions"], 0, "{b}");
        assert_eq!(b["offline_partitions_count"], 0, "{b}");
        assert_eq!(b["isr_shrinks_total"], 0, "{b}");
        assert_eq!(b["isr_shrinks_per_sec"], 0.0, "{b}");
        assert_eq!(b["isr_expands_per_sec"], 0.0, "{b}");
        assert!(
            b["rate_window_seconds"].as_f64().unwrap() >= 0.9,
            "rates over the one-shot interval: {b}"
        );
        leaders += b["leader_count"].as_i64().unwrap();
    }
    assert_eq!(leaders, i64::from(PARTITIONS));

    // One broker only; an unknown broker is refused with a hint.
    let out = cluster.cli(&["metrics", "--json", "--broker", "2"], None);
    assert!(out.status.success());
    let v: Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(v["brokers"].as_array().unwrap().len(), 1);
    assert_eq!(v["brokers"][0]["broker"], 2);
    let out = cluster.cli(&["metrics", "--broker", "9"], None);
    assert!(!out.status.success());
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("broker 9 is not registered"), "{err}");

    // The table.
    let out = cluster.cli(&["metrics"], None);
    assert!(out.status.success());
    let text = String::from_utf8(out.stdout).unwrap();
    assert!(text.starts_with("Brokers: 3  At: "), "{text}");
    assert!(
        text.contains("ISR rates: per second over the last 1."),
        "{text}"
    );
    let rows: Vec<Vec<&str>> = text
        .lines()
        .skip_while(|l| !l.starts_with("BROKER"))
        .skip(1)
        .take(3)
        .map(|l| l.split_whitespace().collect())
        .collect();
    assert_eq!(rows[0][0], "1*", "{text}");
    assert_eq!((rows[1][0], rows[2][0]), ("2", "3"), "{text}");
    for r in &rows {
        assert_eq!(r.len(), 14, "{text}");
        assert_eq!(r[2], PARTITIONS.to_string(), "{text}");
    }

    // --watch without a terminal: plain lines (a header once, then a line per
    // broker and refresh), no escape codes.
    let watch = Watch::start(&cluster, &["--watch", "0.2"]);
    wait_for(
        "three --watch refreshes",
        Duration::from_secs(20),
        || async { watch.lines().len() > 3 * 3 },
    )
    .await;
    let lines = watch.stop();
    let text = lines.join("\n");
    assert!(!text.contains('\x1b'), "escape codes in a pipe:\n{text}");
    assert!(lines[0].starts_with("TIME(UTC)"), "{text}");
    assert_eq!(
        lines.iter().filter(|l| l.starts_with("TIME(UTC)")).count(),
        1,
        "one header:\n{text}"
    );
    for (i, l) in lines[1..].iter().enumerate() {
        let cells: Vec<&str> = l.split_whitespace().collect();
        assert_eq!(cells.len(), 15, "{l}");
        let id = (i % 3 + 1).to_string();
        assert_eq!(
            cells[1].trim_end_matches('*'),
            id,
            "brokers in order:\n{text}"
        );
        if i >= 3 {
            // From the second refresh on, rates (two scrapes).
            assert_eq!(cells[9], "0.000", "{l}");
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn bytes_counters_include_fetches_answered_from_the_purgatory() {
    let cluster = Cluster::start(3, CONFIG).await;
    create_topic(&cluster, 1, 3);
    let leader = placement(&cluster, 1).await[0].1;
    wait_for("a full ISR", Duration::from_secs(15), || async {
        cluster
            .metric(leader, "syncline_under_replicated_partitions")
            .is_ok_and(|v| v == 0.0)
            && cluster
                .metric(leader, "syncline_leader_count")
                .is_ok_and(|v| v == 1.0)
    })
    .await;

    // A consumer long poll at the end of the log: it waits in the purgatory with
    // the two followers' fetches.
    let consumer = cluster.connect(leader).await.unwrap();
    let poll = {
        let consumer = consumer.clone();
        tokio::spawn(async move {
            consumer
                .send(syncline_e2e::inprocess::fetch_request(
                    TOPIC, 0, 0, 20_000, 1,
                ))
                .await
        })
    };
    wait_for(
        "the consumer's fetch to wait with the followers'",
        Duration::from_secs(15),
        || async {
            cluster
                .metric(leader, "syncline_purgatory_size{operation=\"fetch\"}")
                .is_ok_and(|v| v >= 3.0)
        },
    )
    .await;
    let bytes_in = metric(&cluster, leader, "syncline_bytes_in_total");
    let bytes_out = metric(&cluster, leader, "syncline_bytes_out_total");

    // acks=all: answered once both followers' next fetches confirm they have the
    // batch, so by then the leader has sent it to each of them; the consumer gets
    // it when the high watermark passes it.
    let values = vec![vec![7u8; 1000]; 4];
    let batch_len = batch(&values).len() as f64;
    let conn = cluster.connect(leader).await.unwrap();
    let r = produce(&conn, TOPIC, 0, -1, &values).await.unwrap();
    assert_eq!(r.error_code, 0, "{r:?}");
    let Ok(Ok(Resp::Fetch(f))) = poll.await else {
        panic!("the long poll was not answered");
    };
    assert_eq!(f.responses[0].partitions[0].records.len() as f64, batch_len);

    assert_eq!(
        metric(&cluster, leader, "syncline_bytes_in_total"),
        bytes_in + batch_len
    );
    // Two followers and one consumer, every one of them answered from the
    // purgatory.
    assert_eq!(
        metric(&cluster, leader, "syncline_bytes_out_total"),
        bytes_out + 3.0 * batch_len
    );
}

/// The repository's root.
fn repo_root() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../..")
}

/// Every `syncline_*` selector of a PromQL expression: (metric, label names used
/// in its matchers).
fn selectors(expr: &str) -> Vec<(String, Vec<String>)> {
    let mut out = Vec::new();
    let mut rest = expr;
    while let Some(i) = rest.find("syncline_") {
        let tail = &rest[i..];
        let end = tail
            .find(|c: char| !(c.is_ascii_alphanumeric() || c == '_'))
            .unwrap_or(tail.len());
        let name = tail[..end].to_string();
        let mut labels = Vec::new();
        if let Some(matchers) = tail[end..].strip_prefix('{') {
            let close = matchers.find('}').expect("closing brace");
            for m in matchers[..close]
                .split(',')
                .filter(|m| !m.trim().is_empty())
            {
                let label = m.split(['=', '!', '~']).next().unwrap().trim().to_string();
                labels.push(label);
            }
        }
        out.push((name, labels));
        rest = &tail[end..];
    }
    out
}

/// Every PromQL expression of a Grafana dashboard (panels, nested rows, and
/// template variable queries).
fn expressions(dashboard: &Value) -> Vec<String> {
    fn walk(v: &Value, out: &mut Vec<String>) {
        match v {
            Value::Object(m) => {
                for (k, v) in m {
                    match (k.as_str(), v) {
                        ("expr", Value::String(s)) => out.push(s.clone()),
                        ("query", Value::String(s)) if s.contains("syncline_") => {
                            out.push(s.clone())
                        }
                        ("query", Value::Object(q)) => {
                            if let Some(Value::String(s)) = q.get("query") {
                                out.push(s.clone());
                            }
                        }
                        _ => walk(v, out),
                    }
                }
            }
            Value::Array(a) => a.iter().for_each(|v| walk(v, out)),
            _ => {}
        }
    }
    let mut out = Vec::new();
    walk(dashboard, &mut out);
    out
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn dashboard_and_docs_name_only_exported_metrics() {
    // RF 3 on three brokers: every broker leads and follows, so every family has
    // series (per-partition gauges on leaders, fetcher requests on followers).
    // A producer quota of a byte a second, so that one produce is throttled and
    // the client quota families (exported only with a quota) have series; and
    // a request quota set while the cluster runs, for the request-time family.
    let cluster = Cluster::start(3, &format!("{CONFIG}quota_producer_default = 1\n")).await;
    create_topic(&cluster, 3, 3);
    let leader = placement(&cluster, 3).await[0].1;
    let set = cluster.cli(
        &[
            "quota",
            "set",
            "--default-client-id",
            "--request-percentage",
            "100",
        ],
        None,
    );
    assert!(set.status.success(), "{set:?}");
    wait_for(
        "the leader to enforce the request quota",
        Duration::from_secs(15),
        || async {
            let out = cluster.cli_via(leader, &["quota", "describe", "--json"], None);
            String::from_utf8_lossy(&out.stdout).contains("request_percentage")
        },
    )
    .await;
    let conn = cluster.connect(leader).await.unwrap();
    let r = produce(&conn, TOPIC, 0, 1, &[b"over quota".to_vec()])
        .await
        .unwrap();
    assert_eq!(r.error_code, 0, "{r:?}");
    wait_for(
        "every broker's fetchers to have sent requests",
        Duration::from_secs(15),
        || async {
            (1..=3).all(|id| {
                cluster
                    .metric(id, "syncline_replica_fetcher_requests_total")
                    .is_ok_and(|v| v > 0.0)
            })
        },
    )
    .await;
    let (series, types) = exported(&cluster);

    let path = repo_root().join("docs/grafana/syncline.json");
    let text = std::fs::read_to_string(&path).expect("docs/grafana/syncline.json");
    let dashboard: Value = serde_json::from_str(&text).expect("dashboard is JSON");
    assert!(dashboard["title"].is_string() && dashboard["panels"].is_array());
    let exprs = expressions(&dashboard);
    assert!(exprs.len() >= 10, "{exprs:?}");
    let mut used = BTreeSet::new();
    for expr in &exprs {
        let found = selectors(expr);
        assert!(!found.is_empty(), "names no syncline metric: {expr}");
        for (name, labels) in found {
            let Some(exported_labels) = series.get(&name) else {
                panic!(
                    "{expr}: {name} is not exported (exported: {:?})",
                    series.keys()
                );
            };
            for l in labels {
                assert!(
                    exported_labels.contains(&l) || TARGET_LABELS.contains(&l.as_str()),
                    "{expr}: {name} has no label {l}"
                );
            }
            used.insert(name);
        }
    }
    // Every family has a panel.
    for (family, ty) in &types {
        let names = match ty.as_str() {
            "counter" => vec![format!("{family}_total")],
            "histogram" => ["_bucket", "_sum", "_count"]
                .iter()
                .map(|s| format!("{family}{s}"))
                .collect(),
            _ => vec![family.clone()],
        };
        assert!(
            names.iter().any(|n| used.contains(n)),
            "no dashboard panel shows {family}"
        );
    }

    // docs/metrics.md documents every exported family, by the name scrapes show,
    // and documents nothing that is not exported.
    let doc = std::fs::read_to_string(repo_root().join("docs/metrics.md")).expect("docs");
    for (family, ty) in &types {
        let name = if ty == "counter" {
            format!("{family}_total")
        } else {
            family.clone()
        };
        assert!(
            doc.contains(&format!("`{name}")),
            "docs/metrics.md misses {name}"
        );
    }
    for (name, _) in selectors(&doc) {
        let known = series.contains_key(&name) || types.contains_key(&name);
        assert!(known, "docs/metrics.md names {name}, which is not exported");
    }
}
