//! librdkafka's own test suite against syncline: the tests/ directory of
//! librdkafka's source (from the rdkafka-sys crate, built into
//! target/librdkafka-tests/ by `scripts/librdkafka-tests.sh build`), run by
//! its own test runner against three-broker clusters through their Kafka
//! listeners, as librdkafka runs it against an existing cluster: a test.conf
//! with `bootstrap.servers`, `TESTS=`, `TEST_KAFKA_VERSION`, `-L` (no local
//! mock-cluster tests), `-E` (no sockem tests), `-K` (no known-issue tests).
//!
//! What runs is the curated list crates/e2e/librdkafka/tests.list (each
//! exclusion's reason there and in TESTS.md). Each part of it is a test below
//! with a cluster of its own: one runner invocation for its whole tests and one
//! per sub-test filter, all bounded by the part's deadline (the runner's
//! process group is killed on every path), then every listed test must have
//! passed. Per-test results and times are printed.

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::time::Duration;

use serde_json::Value;
use syncline_e2e::checks::FAST_TIMERS;
use syncline_e2e::ProcessGroup;
use syncline_e2e::{bin, bin_dir, Cluster};
use tokio::process::Command;
use tokio::time::Instant;

/// The curated list (format in its header).
const LIST: &str = include_str!("../../librdkafka/tests.list");
/// What each listed test covers and each exclusion's reason.
const TESTS_MD: &str = include_str!("../../librdkafka/TESTS.md");
/// The parts of the list, each a test below.
const PARTS: &[&str] = &[
    "clients",
    "groups",
    "group_extras",
    "subscriptions",
    "max_poll",
    "noautocreate",
];
/// The broker version the runner is told (`TEST_KAFKA_VERSION`): a KRaft-era
/// Kafka, so that the tests use the current APIs (those syncline serves) and
/// `--bootstrap-server` for kafka-topics.sh.
const KAFKA_VERSION: &str = "3.6.0";
/// `test.timeout.multiplier` of test.conf: the runner's own timeouts, doubled
/// for a loaded two-core machine.
const TIMEOUT_MULTIPLIER: &str = "2.0";
/// A part's bound, from its start (cluster start included) to its last
/// runner's end: below the 300 s after which nextest ends a test
/// (.config/nextest.toml), so that this test kills what it started itself.
const PART_DEADLINE: Duration = Duration::from_secs(270);
/// Lines of a failed test's own output printed.
const STORY_LINES: usize = 120;
/// Environment of the runner that would change what it runs or how: never
/// inherited. (`CI` makes it run three tests at once with longer timeouts.)
const RUNNER_ENV_REMOVED: &[&str] = &[
    "CI",
    "TESTS",
    "SUBTESTS",
    "TESTS_SKIP",
    "TESTS_SKIP_BEFORE",
    "TEST_SCENARIO",
    "TEST_MODE",
    "KAFKA_VERSION",
    "RDKAFKA_TEST_CONF",
    "TEST_REPORT",
];

/// One line of the list.
#[derive(Debug, Clone, PartialEq)]
enum Entry {
    Run {
        part: String,
        test: String,
        scenario: String,
        subtest: Option<String>,
        /// `TEST_KAFKA_VERSION` for this test alone (`kafka_version=`).
        kafka_version: Option<String>,
    },
    Skip {
        part: String,
        test: String,
        reason: String,
    },
}

fn parse_list(text: &str) -> Vec<Entry> {
    let mut entries = Vec::new();
    for (n, line) in text.lines().enumerate() {
        let line = line.trim();
        if line.is_empty() || line.starts_with('#') {
            continue;
        }
        let at = format!("tests.list line {}", n + 1);
        let mut words = line.split_whitespace();
        let kind = words.next().unwrap();
        let part = words
            .next()
            .unwrap_or_else(|| panic!("{at}: no part"))
            .to_string();
        let test = words
            .next()
            .unwrap_or_else(|| panic!("{at}: no test"))
            .to_string();
        match kind {
            "run" => {
                let (mut scenario, mut subtest, mut kafka_version) =
                    ("default".to_string(), None, None);
                for option in words {
                    match option.split_once('=') {
                        Some(("scenario", s)) => scenario = s.to_string(),
                        Some(("subtest", f)) => subtest = Some(f.to_string()),
                        Some(("kafka_version", v)) => kafka_version = Some(v.to_string()),
                        _ => panic!("{at}: unknown option {option}"),
                    }
                }
                entries.push(Entry::Run {
                    part,
                    test,
                    scenario,
                    subtest,
                    kafka_version,
                });
            }
            "skip" => {
                let reason = words.collect::<Vec<_>>().join(" ");
                assert!(!reason.is_empty(), "{at}: an exclusion needs its reason");
                entries.push(Entry::Skip { part, test, reason });
            }
            other => panic!("{at}: `{other}` is neither run nor skip"),
        }
    }
    entries
}

/// The runner's number of a test name (`0045_subscribe_update` → `0045`).
fn number(test: &str) -> &str {
    let n = &test[..4];
    assert!(
        n.bytes().all(|b| b.is_ascii_digit()) && test[4..].starts_with('_'),
        "{test} is no librdkafka test name"
    );
    n
}

/// One run of the test runner.
#[derive(Debug)]
struct Invocation {
    /// The test names that must pass.
    tests: Vec<String>,
    /// `SUBTESTS`, when only matching sub-tests run.
    subtest: Option<String>,
    /// `TEST_KAFKA_VERSION`, when not [`KAFKA_VERSION`].
    kafka_version: Option<String>,
}

impl Invocation {
    fn numbers(&self) -> BTreeSet<&str> {
        self.tests.iter().map(|t| number(t)).collect()
    }

    fn label(&self) -> String {
        match (&self.subtest, &self.kafka_version) {
            (Some(f), _) => format!("{} (sub-tests {f})", self.tests.join(",")),
            (None, Some(v)) => format!("{} (as Kafka {v})", self.tests.join(",")),
            (None, None) => format!("{} tests", self.tests.len()),
        }
    }
}

/// A part's scenario and its invocations: its whole tests in one, then one per
/// sub-test filter or Kafka version of its own.
fn plan(entries: &[Entry], part: &str) -> (String, Vec<Invocation>) {
    let mut scenarios = BTreeSet::new();
    let mut whole = Vec::new();
    let mut filtered = Vec::new();
    for e in entries {
        if let Entry::Run {
            part: p,
            test,
            scenario,
            subtest,
            kafka_version,
        } = e
        {
            if p != part {
                continue;
            }
            scenarios.insert(scenario.clone());
            if subtest.is_none() && kafka_version.is_none() {
                whole.push(test.clone());
            } else {
                filtered.push(Invocation {
                    tests: vec![test.clone()],
                    subtest: subtest.clone(),
                    kafka_version: kafka_version.clone(),
                });
            }
        }
    }
    assert_eq!(
        scenarios.len(),
        1,
        "part {part}: one scenario, not {scenarios:?}"
    );
    let mut invocations = Vec::new();
    if !whole.is_empty() {
        invocations.push(Invocation {
            tests: whole,
            subtest: None,
            kafka_version: None,
        });
    }
    invocations.extend(filtered);
    (scenarios.into_iter().next().unwrap(), invocations)
}

/// The brokers' settings of a scenario: librdkafka's test clusters (trivup's
/// defaults, tests/scenarios/*.json) have topics of 4 partitions of 3 replicas,
/// auto-created unless `noautocreate`; groups on a replicated
/// `__consumer_offsets`. Kafka's default initial rebalance delay (3 s), which
/// those clusters have: tests such as 0089 and 0118 start two consumers and
/// expect one generation with both, not a first one with whichever joined
/// first and then a rebalance.
fn cluster_config(scenario: &str) -> String {
    let mut config = format!(
        "{FAST_TIMERS}num_partitions = 4\ndefault_replication_factor = 3\n\
         offsets_topic_num_partitions = 3\noffsets_topic_replication_factor = 3\n\
         group_initial_rebalance_delay_ms = 3000\n"
    );
    match scenario {
        "default" => {}
        "noautocreate" => config.push_str("auto_create_topics_enable = false\n"),
        other => panic!("unknown scenario {other}"),
    }
    config
}

/// librdkafka's source tree with the built test runner.
fn suite_source() -> PathBuf {
    let dir = std::env::var_os("SYNCLINE_LIBRDKAFKA_TESTS")
        .map(PathBuf::from)
        .unwrap_or_else(|| {
            bin_dir()
                .parent()
                .expect("target directory")
                .join("librdkafka-tests")
        });
    let source = dir.join("librdkafka");
    let runner = source.join("tests").join("test-runner");
    assert!(
        runner.is_file(),
        "librdkafka's test runner is not built ({} is missing): \
         run `scripts/librdkafka-tests.sh build` first",
        runner.display()
    );
    source
}

/// Removes terminal colour sequences (`ESC [ ... letter`).
fn plain(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    let mut chars = text.chars();
    while let Some(c) = chars.next() {
        if c == '\u{1b}' {
            if chars.next() == Some('[') {
                for c in chars.by_ref() {
                    if c.is_ascii_alphabetic() {
                        break;
                    }
                }
            }
            continue;
        }
        out.push(c);
    }
    out
}

/// What a part's runs share.
struct Part<'a> {
    name: &'a str,
    source: &'a Path,
    /// Where a failed runner's whole output is kept.
    logs: &'a Path,
    work: &'a Path,
    conf: &'a Path,
    scenario: &'a str,
    syncline_bootstrap: String,
}

/// Result of one listed test: (name, state, seconds).
type Row = (String, String, f64);

/// Runs one invocation until it ends or `deadline`; its rows and its failures.
async fn run(
    part: &Part<'_>,
    n: usize,
    inv: &Invocation,
    deadline: Instant,
) -> (Vec<Row>, Vec<String>) {
    let numbers: Vec<&str> = inv.numbers().into_iter().collect();
    let report = part.work.join(format!("report-{n}.json"));
    let log = part.work.join(format!("runner-{n}.log"));
    let out = std::fs::File::create(&log).expect("runner log");
    let mut cmd = Command::new(part.source.join("tests").join("test-runner"));
    cmd.args(["-L", "-E", "-K", "-p1"]);
    if part.scenario != "default" {
        cmd.args(["-s", part.scenario]);
    }
    for var in RUNNER_ENV_REMOVED {
        cmd.env_remove(var);
    }
    let libs = format!(
        "{}:{}",
        part.source.join("src").display(),
        part.source.join("src-cpp").display()
    );
    cmd.current_dir(part.work)
        .env("RDKAFKA_TEST_CONF", part.conf)
        .env(
            "TEST_KAFKA_VERSION",
            inv.kafka_version.as_deref().unwrap_or(KAFKA_VERSION),
        )
        .env("TESTS", numbers.join(","))
        .env("TEST_REPORT", &report)
        .env("LD_LIBRARY_PATH", libs)
        // kafka-topics.sh is syncline's CLI on its own listeners.
        .env(
            "KAFKA_PATH",
            Path::new(env!("CARGO_MANIFEST_DIR")).join("librdkafka"),
        )
        .env("BROKERS", &part.syncline_bootstrap)
        .env("SYNCLINE_BIN", bin("syncline"))
        .stdin(Stdio::null())
        .stdout(Stdio::from(out.try_clone().expect("log fd")))
        .stderr(Stdio::from(out))
        .process_group(0)
        .kill_on_drop(true);
    if let Some(filter) = &inv.subtest {
        cmd.env("SUBTESTS", filter);
    }
    let started = Instant::now();
    let mut child = cmd.spawn().expect("start librdkafka's test runner");
    let mut group = ProcessGroup(child.id().map(|id| id as i32));
    let status = tokio::time::timeout_at(deadline, child.wait()).await;
    // Whatever it left running goes with it.
    group.kill();
    let _ = child.wait().await;
    let elapsed = started.elapsed();

    let output = plain(&std::fs::read_to_string(&log).unwrap_or_default());
    let mut failures = Vec::new();
    match &status {
        Ok(Ok(s)) if s.success() => {}
        Ok(Ok(s)) => failures.push(format!("the runner exited with {s}")),
        Ok(Err(e)) => failures.push(format!("waiting for the runner: {e}")),
        Err(_) => failures.push(format!(
            "the runner was killed after {elapsed:.0?}: the part's deadline ({PART_DEADLINE:?})"
        )),
    }
    let states: BTreeMap<String, (String, f64)> = match std::fs::read_to_string(&report)
        .ok()
        .and_then(|text| serde_json::from_str::<Value>(&text).ok())
    {
        Some(r) => r["tests"]
            .as_object()
            .map(|tests| {
                tests
                    .values()
                    .map(|t| {
                        (
                            t["name"].as_str().unwrap_or_default().to_string(),
                            (
                                t["state"].as_str().unwrap_or_default().to_string(),
                                t["duration"].as_f64().unwrap_or(0.0),
                            ),
                        )
                    })
                    .collect()
            })
            .unwrap_or_default(),
        None => {
            failures.push("no readable test report".to_string());
            BTreeMap::new()
        }
    };
    let mut rows = Vec::new();
    for test in &inv.tests {
        let (state, secs) = states
            .get(test)
            .cloned()
            .unwrap_or_else(|| ("NO RESULT".to_string(), 0.0));
        let name = match &inv.subtest {
            Some(f) => format!("{test} [{f}]"),
            None => test.clone(),
        };
        if state != "PASSED" {
            failures.push(format!("{name}: {state}"));
        }
        rows.push((name, state, secs));
    }
    // The other tests of these numbers (local, other scenario) must not fail.
    for (name, (state, _)) in &states {
        let ours = name.len() > 4 && numbers.contains(&&name[..4]);
        if ours && !inv.tests.contains(name) && (state == "FAILED" || state == "RUNNING") {
            failures.push(format!("{name} (not listed, same number): {state}"));
        }
    }
    if let Some(filter) = &inv.subtest {
        let passed = output
            .lines()
            .filter(|l| l.contains(&format!("[ {filter}")) && l.contains(": PASS ("))
            .count();
        if passed == 0 {
            failures.push(format!("no sub-test starting with {filter} passed"));
        }
    }
    if !failures.is_empty() {
        let lines: Vec<&str> = output.lines().collect();
        let mut why = Vec::new();
        for (i, l) in lines.iter().enumerate() {
            if l.starts_with("### Test") {
                why.push(format!("{l}\n{}", lines.get(i + 1).unwrap_or(&"")));
            }
        }
        // The runner's own lines of each test that did not pass ("[NAME  / 1.234s] ..."),
        // else the end of the output.
        let mut story = Vec::new();
        for (name, state, _) in rows.iter().filter(|(_, state, _)| state != "PASSED") {
            let test = name.split(' ').next().unwrap_or(name);
            let own: Vec<&str> = lines
                .iter()
                .copied()
                .filter(|l| {
                    l.strip_prefix('[')
                        .and_then(|l| l.strip_prefix(test))
                        .is_some_and(|rest| rest.starts_with([' ', '/']))
                })
                .collect();
            story.push(format!(
                "--- the last {} lines of {name} ({state}):\n{}",
                own.len().min(STORY_LINES),
                own[own.len().saturating_sub(STORY_LINES)..].join("\n")
            ));
        }
        if story.is_empty() {
            story.push(format!(
                "--- the last {STORY_LINES} lines of the output:\n{}",
                lines[lines.len().saturating_sub(STORY_LINES)..].join("\n")
            ));
        }
        // The whole output outlives the temporary directory.
        let kept = part.logs.join(format!("{}-runner-{n}.log", part.name));
        let kept =
            match std::fs::create_dir_all(part.logs).and_then(|()| std::fs::copy(&log, &kept)) {
                Ok(_) => kept.display().to_string(),
                Err(e) => format!("not kept: {e}"),
            };
        eprintln!(
            "--- runner {n} ({}) failed:\n{}\n--- its failure messages:\n{}\n{}\n--- its whole output: {kept}",
            inv.label(),
            failures.join("\n"),
            why.join("\n"),
            story.join("\n")
        );
    }
    eprintln!(
        "runner {n}: {} in {:.1} s",
        inv.label(),
        elapsed.as_secs_f64()
    );
    (rows, failures)
}

/// Runs one part of the list on a cluster of its own and asserts that every
/// listed test passed.
async fn run_part(part: &str) {
    let started = Instant::now();
    let deadline = started + PART_DEADLINE;
    let entries = parse_list(LIST);
    let source = suite_source();
    let (scenario, invocations) = plan(&entries, part);
    for e in &entries {
        if let Entry::Skip {
            part: p,
            test,
            reason,
        } = e
        {
            if p == part {
                eprintln!("excluded {test}: {reason}");
            }
        }
    }

    let cluster = Cluster::start_quorum(3, 3, &cluster_config(&scenario)).await;
    let cluster_start = started.elapsed();
    let work = tempfile::tempdir().expect("temp dir");
    let conf = work.path().join("test.conf");
    std::fs::write(
        &conf,
        format!(
            "bootstrap.servers={}\ntest.timeout.multiplier={TIMEOUT_MULTIPLIER}\n",
            cluster.kafka_bootstrap()
        ),
    )
    .expect("write test.conf");
    let logs = source.parent().expect("suite directory").join("logs");
    let ctx = Part {
        name: part,
        source: &source,
        logs: &logs,
        work: work.path(),
        conf: &conf,
        scenario: &scenario,
        syncline_bootstrap: cluster.bootstrap(),
    };

    let mut rows = Vec::new();
    let mut failures = Vec::new();
    for (n, inv) in invocations.iter().enumerate() {
        if Instant::now() >= deadline {
            failures.push(format!(
                "{} not run: the part's deadline passed",
                inv.label()
            ));
            continue;
        }
        let (r, f) = run(&ctx, n + 1, inv, deadline).await;
        rows.extend(r);
        failures.extend(f);
    }
    drop(cluster);

    let passed = rows
        .iter()
        .filter(|(_, state, _)| state == "PASSED")
        .count();
    eprintln!("librdkafka {KAFKA_VERSION}-era suite, part {part} (scenario {scenario}):");
    for (name, state, secs) in &rows {
        eprintln!("  {state:<9} {secs:>8.3} s  {name}");
    }
    eprintln!(
        "part {part}: {passed} of {} listed tests passed; {:.1} s in all (cluster start {:.1} s)",
        rows.len(),
        started.elapsed().as_secs_f64(),
        cluster_start.as_secs_f64()
    );
    assert!(
        failures.is_empty(),
        "librdkafka suite, part {part}: {} failure(s):\n{}",
        failures.len(),
        failures.join("\n")
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn librdkafka_clients() {
    run_part("clients").await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn librdkafka_groups() {
    run_part("groups").await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn librdkafka_group_extras() {
    run_part("group_extras").await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn librdkafka_subscriptions() {
    run_part("subscriptions").await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn librdkafka_max_poll() {
    run_part("max_poll").await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn librdkafka_noautocreate() {
    run_part("noautocreate").await;
}

/// The list is well formed, every part has its test above, and TESTS.md names
/// every test listed.
#[test]
fn the_list_is_consistent() {
    let entries = parse_list(LIST);
    let mut seen = BTreeSet::new();
    for e in &entries {
        let (part, test, key) = match e {
            Entry::Run {
                part,
                test,
                subtest,
                ..
            } => (part, test, format!("{test} {subtest:?}")),
            Entry::Skip { part, test, .. } => (part, test, format!("skip {test}")),
        };
        assert!(PARTS.contains(&part.as_str()), "unknown part {part}");
        let name = test.split(':').next().unwrap();
        number(name);
        assert!(TESTS_MD.contains(name), "TESTS.md does not name {name}");
        assert!(seen.insert(key.clone()), "listed twice: {key}");
    }
    for part in PARTS {
        let (_, invocations) = plan(&entries, part);
        assert!(!invocations.is_empty(), "part {part} runs nothing");
    }
}
