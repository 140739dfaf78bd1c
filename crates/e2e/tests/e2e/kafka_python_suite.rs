//! kafka-python's own integration tests against syncline: the producer and
//! consumer test files of the kafka-python 3.0.12 source distribution
//! (unpacked into target/kafka-python-tests/ by
//! `scripts/kafka-python-tests.sh fetch`, with pytest in the Kafka clients'
//! venv), run by pytest against a three-broker cluster through its Kafka
//! listeners.
//!
//! The pytest plugin crates/e2e/kafka-python/syncline_cluster.py puts the
//! cluster in place of the Kafka (and ZooKeeper) the suite's fixtures would
//! start, deselects the transactional tests and writes a JSON report of every
//! test; which tests run and why the others do not: SELECTION.md beside it.
//! pytest runs in a process group of its own, killed on every path, within
//! [`DEADLINE`]; then the outcome must be exactly [`EXPECTED`], and per-test
//! results and times are printed.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::time::Duration;

use serde_json::Value;
use syncline_e2e::checks::FAST_TIMERS;
use syncline_e2e::kcat::kafka_python;
use syncline_e2e::ProcessGroup;
use syncline_e2e::{bin, bin_dir, Cluster};
use tokio::process::Command;
use tokio::time::Instant;

/// The sdist's version (scripts/kafka-python-tests.sh fetches it).
const KAFKA_PYTHON_VERSION: &str = "3.0.12";
/// The test files that run, relative to the sdist's root.
const TEST_FILES: &[&str] = &[
    "test/integration/test_producer_integration.py",
    "test/integration/test_consumer_integration.py",
];
/// `KAFKA_VERSION` of the suite: the broker version kafka-python infers from
/// syncline's ApiVersions answer (test_kafka_version_infer checks it), which
/// its fixtures then give every client as `api_version`.
const KAFKA_VERSION: &str = "3.0";
/// What the run must end with: pytest's own summary counts (SELECTION.md).
const EXPECTED: &[(&str, usize)] = &[("passed", 31), ("skipped", 1), ("deselected", 2)];
/// The tests skipped by the suite itself, and why.
const EXPECTED_SKIPPED: &[(&str, &str)] = &[(
    "test/integration/test_consumer_integration.py::test_kafka_consumer_offsets_for_time_old",
    "Requires KAFKA_VERSION < 0.10.1",
)];
/// The tests the plugin deselects (transactions are not served).
const EXPECTED_DESELECTED: &[&str] = &[
    "test/integration/test_producer_integration.py::test_transactional_producer_messages",
    "test/integration/test_producer_integration.py::test_transactional_producer_offsets",
];
/// Partitions and replication factor of the topics the suite's `topic`
/// fixture creates, and of those created on first use: the suite's 4
/// partitions, on every broker.
const PARTITIONS: usize = 4;
const REPLICAS: usize = 3;
/// The run's bound, from the test's start (cluster start included) to
/// pytest's end: below the 300 s after which nextest ends a test
/// (.config/nextest.toml), so that this test kills what it started itself.
const DEADLINE: Duration = Duration::from_secs(270);
/// pytest-timeout's bound on one test (the suite's pyproject.toml says 300 s,
/// more than the whole run may take), as a failure of that test, the run going
/// on (`signal`; the suite's `thread` method would end the whole run).
const TEST_TIMEOUT_S: u64 = 60;
/// pytest's arguments before the per-test timeout and the files: the
/// plugin, pytest-timeout (the sdist's pyproject.toml addopts need it; plugin
/// autoload is off), no cache in the sdist's directory, each test's result,
/// the reasons of all but passes.
const PYTEST_ARGS: &[&str] = &[
    "-m",
    "pytest",
    "-p",
    "syncline_cluster",
    "-p",
    "pytest_timeout",
    "-p",
    "no:cacheprovider",
    "-v",
    "-ra",
    "--timeout-method=signal",
];
/// Lines of a failed test's report printed.
const FAILURE_LINES: usize = 80;
/// Environment that would change what pytest runs or how: never inherited.
const PYTEST_ENV_REMOVED: &[&str] = &[
    "PYTEST_ADDOPTS",
    "PYTEST_PLUGINS",
    "KAFKA_URI",
    "ZOOKEEPER_URI",
    "KAFKA_ROOT",
    "PROJECT_ROOT",
];
const SELECTION_MD: &str = include_str!("../../kafka-python/SELECTION.md");
const PLUGIN: &str = include_str!("../../kafka-python/syncline_cluster.py");

/// The brokers' settings: those of the suite's own broker config
/// (servers/resources/*/kafka.properties of kafka-python's repository) that
/// its tests depend on: 4 partitions, group sessions from 1 s (test_group asks
/// for 3 s), no initial rebalance delay; topics and groups replicated on all
/// three brokers.
fn cluster_config() -> String {
    format!(
        "{FAST_TIMERS}num_partitions = {PARTITIONS}\ndefault_replication_factor = {REPLICAS}\n\
         offsets_topic_num_partitions = 3\noffsets_topic_replication_factor = 3\n\
         group_min_session_timeout_ms = 1000\ngroup_initial_rebalance_delay_ms = 0\n"
    )
}

/// The unpacked sdist, and the venv's python with the tests' dependencies.
fn suite_source() -> (PathBuf, String) {
    let dir = std::env::var_os("SYNCLINE_KAFKA_PYTHON_TESTS")
        .map(PathBuf::from)
        .unwrap_or_else(|| {
            bin_dir()
                .parent()
                .expect("target directory")
                .join("kafka-python-tests")
        });
    let source = dir.join(format!("kafka_python-{KAFKA_PYTHON_VERSION}"));
    let conftest = source.join("test/integration/conftest.py");
    assert!(
        conftest.is_file(),
        "kafka-python's tests are not fetched ({} is missing): \
         run `scripts/kafka-python-tests.sh fetch` first",
        conftest.display()
    );
    let python = kafka_python();
    let check = std::process::Command::new(&python)
        .args(["-c", "import pytest, pytest_timeout, kafka"])
        .output();
    match check {
        Ok(out) if out.status.success() => {}
        Ok(out) => panic!(
            "{python} cannot import pytest, pytest_timeout or kafka ({}): \
             run `scripts/kafka-python-tests.sh fetch` first",
            String::from_utf8_lossy(&out.stderr).trim()
        ),
        Err(e) => panic!(
            "no python at {python} ({e}): run scripts/test.sh (it makes the Kafka clients' \
             venv) and `scripts/kafka-python-tests.sh fetch`, or set SYNCLINE_KAFKA_PYTHON"
        ),
    }
    (source, python)
}

/// pytest's closing counts (`== 31 passed, 1 skipped, 2 deselected, 218
/// warnings in 17.41s ==`), warnings left out.
fn summary_counts(output: &str) -> Option<BTreeMap<String, usize>> {
    let line = output
        .lines()
        .rev()
        .find(|l| l.starts_with('=') && l.contains(" in ") && l.trim_end().ends_with('='))?;
    let inner = line.trim_matches(|c| c == '=' || c == ' ');
    let counts = inner.rsplit_once(" in ")?.0;
    let mut map = BTreeMap::new();
    for part in counts.split(", ") {
        let (n, what) = part.trim().split_once(' ')?;
        let n: usize = n.parse().ok()?;
        // pytest says "error" / "errors", "warning" / "warnings".
        let what = match what {
            "error" => "errors",
            other => other,
        };
        if !what.starts_with("warning") {
            map.insert(what.to_string(), n);
        }
    }
    Some(map)
}

/// The last `n` lines of `text`.
fn tail(text: &str, n: usize) -> String {
    let lines: Vec<&str> = text.lines().collect();
    lines[lines.len().saturating_sub(n)..].join("\n")
}

/// One test of the plugin's report.
struct Row {
    nodeid: String,
    /// pytest's categories of its phases (setup, call, teardown) that have
    /// one: "passed", "failed", "error", "skipped", "xfailed", "xpassed".
    outcomes: Vec<String>,
    seconds: f64,
    longrepr: String,
    cluster_state: Option<String>,
}

impl Row {
    fn outcome(&self) -> String {
        if self.outcomes.is_empty() {
            "NO RESULT".to_string()
        } else {
            self.outcomes.join("+")
        }
    }
}

fn rows(report: &Value) -> Vec<Row> {
    report["tests"]
        .as_array()
        .map(|tests| {
            tests
                .iter()
                .map(|t| Row {
                    nodeid: t["nodeid"].as_str().unwrap_or_default().to_string(),
                    outcomes: t["outcomes"]
                        .as_array()
                        .map(|o| {
                            o.iter()
                                .filter_map(|v| v.as_str().map(str::to_string))
                                .collect()
                        })
                        .unwrap_or_default(),
                    seconds: t["seconds"].as_f64().unwrap_or(0.0),
                    longrepr: t["longrepr"].as_str().unwrap_or_default().to_string(),
                    cluster_state: t["cluster_state"].as_str().map(str::to_string),
                })
                .collect()
        })
        .unwrap_or_default()
}

/// Copies pytest's whole output and the brokers' logs next to the sdist;
/// where they went.
fn keep_logs(source: &Path, log: &Path, cluster: &Cluster) -> String {
    let stamp = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_secs())
        .unwrap_or_default();
    let dir = source
        .parent()
        .expect("suite directory")
        .join("logs")
        .join(format!("run-{stamp}"));
    let kept = std::fs::create_dir_all(&dir)
        .and_then(|()| std::fs::copy(log, dir.join("pytest.log")))
        .and_then(|_| {
            for node in &cluster.nodes {
                std::fs::copy(&node.log, dir.join(format!("broker-{}.log", node.id)))?;
            }
            Ok(())
        });
    match kept {
        Ok(()) => format!("{} (pytest.log, broker-N.log)", dir.display()),
        Err(e) => format!("not kept: {e}"),
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn kafka_python_integration_tests() {
    let started = Instant::now();
    let deadline = started + DEADLINE;
    // What is expected is what SELECTION.md explains and the plugin does.
    for (nodeid, _) in EXPECTED_SKIPPED {
        let name = nodeid.rsplit("::").next().unwrap();
        assert!(
            SELECTION_MD.contains(name),
            "SELECTION.md does not name {name}"
        );
    }
    for nodeid in EXPECTED_DESELECTED {
        let name = nodeid.rsplit("::").next().unwrap();
        assert!(
            SELECTION_MD.contains(name),
            "SELECTION.md does not name {name}"
        );
        assert!(
            PLUGIN.contains(&format!("\"{nodeid}\"")),
            "syncline_cluster.py does not deselect {nodeid}"
        );
    }
    let (source, python) = suite_source();

    let cluster = Cluster::start_quorum(3, 3, &cluster_config()).await;
    let cluster_start = started.elapsed();
    let work = tempfile::tempdir().expect("temp dir");
    let report_path = work.path().join("report.json");
    let log = work.path().join("pytest.log");
    let out = std::fs::File::create(&log).expect("pytest log");

    let mut cmd = Command::new(&python);
    cmd.args(PYTEST_ARGS)
        .arg(format!("--timeout={TEST_TIMEOUT_S}"))
        .args(TEST_FILES);
    for var in PYTEST_ENV_REMOVED {
        cmd.env_remove(var);
    }
    cmd.current_dir(&source)
        // Only the plugins named above (and pytest's own).
        .env("PYTEST_DISABLE_PLUGIN_AUTOLOAD", "1")
        .env("PYTHONDONTWRITEBYTECODE", "1")
        .env(
            "PYTHONPATH",
            Path::new(env!("CARGO_MANIFEST_DIR")).join("kafka-python"),
        )
        .env("KAFKA_VERSION", KAFKA_VERSION)
        .env("SYNCLINE_KAFKA_BOOTSTRAP", cluster.kafka_bootstrap())
        .env("SYNCLINE_BOOTSTRAP", cluster.bootstrap())
        .env("SYNCLINE_CLI", bin("syncline"))
        .env("SYNCLINE_TOPIC_PARTITIONS", PARTITIONS.to_string())
        .env("SYNCLINE_TOPIC_REPLICAS", REPLICAS.to_string())
        .env("SYNCLINE_KAFKA_PYTHON_REPORT", &report_path)
        .stdin(Stdio::null())
        .stdout(Stdio::from(out.try_clone().expect("log fd")))
        .stderr(Stdio::from(out))
        .process_group(0)
        .kill_on_drop(true);
    let pytest_started = Instant::now();
    let mut child = cmd.spawn().expect("start pytest");
    let mut group = ProcessGroup(child.id().map(|id| id as i32));
    let status = tokio::time::timeout_at(deadline, child.wait()).await;
    // Whatever it left running goes with it.
    group.kill();
    let _ = child.wait().await;
    let pytest_time = pytest_started.elapsed();

    let output = std::fs::read_to_string(&log).unwrap_or_default();
    let mut failures = Vec::new();
    match &status {
        Ok(Ok(s)) if s.success() => {}
        Ok(Ok(s)) => failures.push(format!("pytest exited with {s}")),
        Ok(Err(e)) => failures.push(format!("waiting for pytest: {e}")),
        Err(_) => failures.push(format!(
            "pytest was killed after {pytest_time:.0?}: the run's deadline ({DEADLINE:?} \
             from the test's start)"
        )),
    }
    let report = std::fs::read_to_string(&report_path)
        .ok()
        .and_then(|text| serde_json::from_str::<Value>(&text).ok());
    let rows = report.as_ref().map(rows).unwrap_or_default();
    if report.is_none() {
        failures.push("the plugin wrote no report".to_string());
    }

    // The outcome: pytest's own summary, and the report's tests agreeing.
    let expected: BTreeMap<String, usize> =
        EXPECTED.iter().map(|(k, n)| (k.to_string(), *n)).collect();
    let summary = summary_counts(&output);
    match &summary {
        Some(counts) if *counts == expected => {}
        Some(counts) => failures.push(format!("pytest's summary {counts:?}, not {expected:?}")),
        None => failures.push("no summary line in pytest's output".to_string()),
    }
    let mut reported: BTreeMap<String, usize> = BTreeMap::new();
    for row in &rows {
        *reported.entry(row.outcome()).or_default() += 1;
    }
    if let Some(r) = &report {
        let deselected: Vec<&str> = r["deselected"]
            .as_array()
            .map(|d| d.iter().filter_map(Value::as_str).collect())
            .unwrap_or_default();
        if !deselected.is_empty() {
            reported.insert("deselected".to_string(), deselected.len());
        }
        let mut want: Vec<&str> = EXPECTED_DESELECTED.to_vec();
        let mut got = deselected.clone();
        want.sort_unstable();
        got.sort_unstable();
        if got != want {
            failures.push(format!("deselected {got:?}, not {want:?}"));
        }
    }
    if report.is_some() && reported != expected {
        failures.push(format!("the report's tests {reported:?}, not {expected:?}"));
    }
    for (nodeid, reason) in EXPECTED_SKIPPED {
        match rows.iter().find(|r| r.nodeid == *nodeid) {
            Some(r) if r.outcome() == "skipped" && r.longrepr.is_empty() => {
                if !output.contains(reason) {
                    failures.push(format!("{nodeid} was skipped, but not for {reason:?}"));
                }
            }
            Some(r) => failures.push(format!("{nodeid}: {}, not skipped", r.outcome())),
            None => failures.push(format!("{nodeid}: no result")),
        }
    }

    eprintln!(
        "kafka-python {KAFKA_PYTHON_VERSION} integration tests (KAFKA_VERSION {KAFKA_VERSION}):"
    );
    for row in &rows {
        let name = row
            .nodeid
            .strip_prefix("test/integration/")
            .unwrap_or(&row.nodeid);
        eprintln!("  {:<16} {:>7.2} s  {name}", row.outcome(), row.seconds);
    }
    for row in rows.iter().filter(|r| !r.longrepr.is_empty()) {
        eprintln!(
            "--- {} ({}), the last {FAILURE_LINES} lines of its report:\n{}",
            row.nodeid,
            row.outcome(),
            tail(&row.longrepr, FAILURE_LINES)
        );
        if let Some(state) = &row.cluster_state {
            eprintln!("--- the cluster when it failed:\n{state}");
        }
    }
    eprintln!(
        "{}; pytest {:.1} s, {:.1} s in all (cluster start {:.1} s)",
        summary
            .as_ref()
            .map(|c| format!("{c:?}"))
            .unwrap_or_else(|| "no summary".to_string()),
        pytest_time.as_secs_f64(),
        started.elapsed().as_secs_f64(),
        cluster_start.as_secs_f64()
    );
    if !failures.is_empty() {
        let kept = keep_logs(&source, &log, &cluster);
        eprintln!(
            "--- the last 40 lines of pytest's output:\n{}\n--- pytest's whole output and the brokers' logs: {kept}",
            tail(&output, 40)
        );
    }
    drop(cluster);
    assert!(
        failures.is_empty(),
        "kafka-python's integration tests: {} failure(s):\n{}",
        failures.len(),
        failures.join("\n")
    );
}
