//! Consumer groups through the Kafka listeners: librdkafka's balanced consumer
//! (kcat -G) shares a topic's partitions with the other members of its group,
//! commits what it read, and a later member resumes from the committed
//! offsets, also after the coordinator's broker is killed (the partition of
//! `__consumer_offsets` moves, and its new leader loads the group).

use std::collections::BTreeMap;

use syncline_client::{Admin, ClientConfig};
use syncline_e2e::checks::*;
use syncline_e2e::kcat::{finish_kcat, kcat_reporting, spawn_kcat, wait_until, LineClient};
use syncline_e2e::Cluster;

const TOPIC: &str = "grouped";
const GROUP: &str = "billing";
/// Groups on a three-partition `__consumer_offsets`, replicated three times,
/// rebalancing at once.
const GROUPS: &str = "offsets_topic_num_partitions = 3\n\
                      offsets_topic_replication_factor = 3\n\
                      group_initial_rebalance_delay_ms = 0\n";

/// Produces `keys` with acks=all as `key:value` lines. kcat reports a dead
/// broker of the bootstrap list as an error, and delivers all the same.
async fn produce(bootstrap: &str, keys: impl Iterator<Item = String>, broker_dead: bool) {
    let lines: String = keys.map(|k| format!("{k}:v-{k}\n")).collect();
    let args = ["-b", bootstrap, "-P", "-t", TOPIC, "-K:", "-X", "acks=all"];
    kcat_reporting(&args, Some(lines), !broker_dead).await;
}

/// The kcat arguments of a balanced consumer of the group that exits once
/// its partitions are read to their end, committing on the way out.
fn group_consumer(bootstrap: &str) -> Vec<String> {
    [
        "-b",
        bootstrap,
        "-G",
        GROUP,
        TOPIC,
        // Not -o: kcat would start every assigned partition there instead of
        // at the group's committed offset.
        "-X",
        "auto.offset.reset=earliest",
        "-e",
        "-q",
        "-f",
        "%p %o %k\\n",
        "-X",
        "session.timeout.ms=6000",
        "-X",
        "auto.commit.interval.ms=200",
    ]
    .iter()
    .map(|s| s.to_string())
    .collect()
}

/// `partition offset key` lines as key → (partition, offset).
fn parse(out: &str) -> BTreeMap<String, (i32, i64)> {
    let mut got = BTreeMap::new();
    for line in out.lines() {
        let mut parts = line.split(' ');
        let (p, o, k) = (
            parts.next().unwrap().parse().unwrap(),
            parts.next().unwrap().parse().unwrap(),
            parts.next().unwrap().to_string(),
        );
        assert!(got.insert(k.clone(), (p, o)).is_none(), "{k} read twice");
    }
    got
}

async fn consume_once(bootstrap: &str) -> BTreeMap<String, (i32, i64)> {
    let args = group_consumer(bootstrap);
    let args: Vec<&str> = args.iter().map(String::as_str).collect();
    parse(&finish_kcat(spawn_kcat(&args, false), &args, false).await)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_kcat_group_shares_partitions_commits_and_resumes_across_a_coordinator_kill() {
    let mut cluster = Cluster::start_quorum(3, 3, &format!("{FAST_TIMERS}{GROUPS}")).await;
    create_topic(&cluster, TOPIC, 4, 3, 2);
    wait_full_isr(&cluster, 1, TOPIC, WAIT).await;
    let bootstrap = cluster.kafka_bootstrap();
    produce(&bootstrap, (0..400).map(|i| format!("a{i:03}")), false).await;

    // Two members at once: between them every record once.
    let args = group_consumer(&bootstrap);
    let args: Vec<&str> = args.iter().map(String::as_str).collect();
    let (first, second) = (spawn_kcat(&args, false), spawn_kcat(&args, false));
    let (first, second) = tokio::join!(
        finish_kcat(first, &args, false),
        finish_kcat(second, &args, false)
    );
    let (first, second) = (parse(&first), parse(&second));
    let mut all = first.clone();
    for (k, v) in &second {
        assert!(
            all.insert(k.clone(), *v).is_none(),
            "{k} read by both members"
        );
    }
    assert_eq!(all.len(), 400, "every record read once");

    // The group committed every partition's end.
    let admin = Admin::new(ClientConfig::new(&cluster.bootstrap())).unwrap();
    let described = admin.describe_group(GROUP).await.unwrap();
    assert_eq!(described.state, "Empty", "both members left");
    assert_eq!(described.offsets.len(), 4, "{described:?}");
    let mut committed = 0;
    for o in &described.offsets {
        assert_eq!(o.lag, Some(0), "{o:?}");
        committed += o.committed;
    }
    assert_eq!(committed, 400);

    // A new member resumes where the group left off: only the new records.
    produce(&bootstrap, (0..100).map(|i| format!("b{i:03}")), false).await;
    let resumed = consume_once(&bootstrap).await;
    assert_eq!(resumed.len(), 100, "{resumed:?}");
    assert!(resumed.keys().all(|k| k.starts_with('b')));

    // The coordinator's broker dies: the group's partition of
    // __consumer_offsets gets a new leader, which loads the commits.
    let coordinator = admin.find_coordinator(GROUP).await.unwrap();
    cluster.kill(coordinator);
    produce(&bootstrap, (0..50).map(|i| format!("c{i:03}")), true).await;
    let after = admin.find_coordinator(GROUP).await.unwrap();
    assert_ne!(after, coordinator, "the coordinator moved");
    let resumed = consume_once(&bootstrap).await;
    assert_eq!(
        resumed.keys().cloned().collect::<Vec<_>>(),
        (0..50).map(|i| format!("c{i:03}")).collect::<Vec<_>>(),
        "only the records after the last commit"
    );
}

/// Values of MSG lines.
fn values(c: &LineClient) -> Vec<String> {
    c.tagged("MSG").into_iter().map(|w| w[2].clone()).collect()
}

/// confluent-kafka (librdkafka): an idempotent acks=all producer loses
/// nothing it was told was written across a leader's SIGKILL; then a group of
/// consumers rebalances when a member joins, crashes (SIGKILL: the session
/// expires) and leaves, between them reads every acknowledged record, and a
/// later member resumes from the committed offsets.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn confluent_kafka_group_rebalances_on_join_crash_and_leave_and_loses_nothing_acked() {
    leader_kill_then_group_story("confluent_clients.py").await;
}

/// The same story with kafka-python, a Kafka client implementation of its
/// own (its producer's idempotence and retries, its group coordinator
/// client).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn kafka_python_group_rebalances_on_join_crash_and_leave_and_loses_nothing_acked() {
    leader_kill_then_group_story("kafka_python_clients.py").await;
}

/// A producer across a leader kill, then a group's join, crash, leave and
/// resume, with the Python client `script` (crates/e2e/python/).
async fn leader_kill_then_group_story(script: &str) {
    const COUNT: usize = 600;
    const PARTITIONS: usize = 6;
    let mut cluster = Cluster::start_quorum(3, 3, &format!("{FAST_TIMERS}{GROUPS}")).await;
    create_topic(&cluster, TOPIC, PARTITIONS as i32, 3, 2);
    let before = by_partition(&wait_full_isr(&cluster, 1, TOPIC, WAIT).await);
    let bootstrap = cluster.kafka_bootstrap();

    let count = COUNT.to_string();
    let mut producer =
        LineClient::python("producer", script, &["produce", &bootstrap, TOPIC, &count]);
    wait_until("a third acknowledged", WAIT, || {
        producer.tagged("ACK").len() >= COUNT / 3
    })
    .await;
    let leader = before[&0].leader_id;
    cluster.kill(leader);
    producer.wait_success(WAIT).await;
    assert!(
        producer.tagged("FAIL").is_empty(),
        "{:?}",
        producer.tagged("FAIL")
    );
    let acked: std::collections::BTreeSet<String> = producer
        .tagged("ACK")
        .into_iter()
        .map(|w| w[2].clone())
        .collect();
    assert_eq!(acked.len(), COUNT, "every record acknowledged once");
    assert_eq!(producer.tagged("DONE"), [["0"]]);
    // Back to three brokers: the groups' topic needs its replication factor.
    cluster.restart(leader);
    wait_full_isr(&cluster, 1, TOPIC, WAIT).await;

    let consume = ["consume", bootstrap.as_str(), TOPIC, GROUP];
    let full: Vec<i32> = (0..PARTITIONS as i32).collect();
    let mut a = LineClient::python("member a", script, &consume);
    wait_until("a owns every partition", WAIT, || a.assignment() == full).await;
    // A second member joins: the partitions are split between them.
    let mut b = LineClient::python("member b", script, &consume);
    wait_until("a and b split the partitions", WAIT, || {
        let (pa, pb) = (a.assignment(), b.assignment());
        let mut both: Vec<i32> = pa.iter().chain(&pb).copied().collect();
        both.sort();
        !pa.is_empty() && !pb.is_empty() && both == full
    })
    .await;
    // It crashes: once its session expires, a takes everything back.
    b.kill().await;
    wait_until("a owns every partition after b's crash", WAIT, || {
        a.tagged("ASSIGN").len() >= 3 && a.assignment() == full
    })
    .await;
    // A third joins and leaves cleanly.
    let mut c = LineClient::python("member c", script, &consume);
    wait_until("c gets partitions", WAIT, || !c.assignment().is_empty()).await;
    c.finish();
    c.wait_success(WAIT).await;
    wait_until("a owns every partition after c left", WAIT, || {
        a.tagged("ASSIGN").len() >= 5 && a.assignment() == full
    })
    .await;
    wait_until("every acknowledged record read", WAIT, || {
        let mut read: std::collections::BTreeSet<String> = values(&a).into_iter().collect();
        read.extend(values(&b));
        read.extend(values(&c));
        acked.is_subset(&read)
    })
    .await;
    a.finish();
    a.wait_success(WAIT).await;

    // Everything was committed: a later member reads only what comes after.
    produce(&bootstrap, (0..30).map(|i| format!("late{i:02}")), false).await;
    let mut d = LineClient::python("member d", script, &consume);
    wait_until("d reads the new records", WAIT, || values(&d).len() >= 30).await;
    d.finish();
    d.wait_success(WAIT).await;
    let mut read = values(&d);
    read.sort();
    let expected: Vec<String> = (0..30).map(|i| format!("v-late{i:02}")).collect();
    assert_eq!(read, expected, "only the records after the group's commits");
}

/// Keys of `key\tvalue` lines (`syncline consume --print-key`).
fn keys_of(out: &[u8]) -> Vec<String> {
    String::from_utf8_lossy(out)
        .lines()
        .map(|l| l.split('\t').next().unwrap().to_string())
        .collect()
}

/// syncline's own group consumer and librdkafka's in one group: what one
/// commits the other resumes from (syncline commits exactly what it printed,
/// even when --max-messages stops inside a fetched batch), and both members
/// at once split the new records between them, each read once.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn syncline_and_kcat_members_share_one_group_and_its_commits() {
    let cluster = Cluster::start_quorum(3, 3, &format!("{FAST_TIMERS}{GROUPS}")).await;
    create_topic(&cluster, TOPIC, 4, 3, 2);
    wait_full_isr(&cluster, 1, TOPIC, WAIT).await;
    let bootstrap = cluster.kafka_bootstrap();
    produce(&bootstrap, (0..200).map(|i| format!("s{i:03}")), false).await;

    let out = cluster.cli(
        &[
            "consume",
            TOPIC,
            "--group",
            GROUP,
            "--from-beginning",
            "--max-messages",
            "120",
            "--print-key",
        ],
        None,
    );
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let printed = keys_of(&out.stdout);
    assert_eq!(printed.len(), 120);

    let described = cluster.cli(&["group", "describe", GROUP, "--json"], None);
    assert!(
        described.status.success(),
        "{}",
        String::from_utf8_lossy(&described.stderr)
    );
    let d: serde_json::Value = serde_json::from_slice(&described.stdout).unwrap();
    assert_eq!(d["state"], "Empty", "{d}");
    for o in d["offsets"].as_array().unwrap() {
        let (committed, end) = (
            o["committed"].as_i64().unwrap(),
            o["log_end"].as_i64().unwrap(),
        );
        assert_eq!(o["lag"].as_i64().unwrap(), end - committed, "{o}");
    }
    let listed = cluster.cli(&["group", "list", "--json"], None);
    let l: serde_json::Value = serde_json::from_slice(&listed.stdout).unwrap();
    assert_eq!(l[0]["group"], GROUP, "{l}");

    // kcat in the same group reads exactly what syncline did not print.
    let rest = consume_once(&bootstrap).await;
    let mut all: Vec<String> = printed
        .iter()
        .cloned()
        .chain(rest.keys().cloned())
        .collect();
    all.sort();
    let expected: Vec<String> = (0..200).map(|i| format!("s{i:03}")).collect();
    assert_eq!(all, expected, "every record once between the two");

    // Both kinds of member at once share the new records.
    produce(&bootstrap, (0..100).map(|i| format!("t{i:03}")), false).await;
    let own = tokio::process::Command::new(syncline_e2e::bin("syncline"))
        .args(["--bootstrap-server", &cluster.bootstrap()])
        .args([
            "consume",
            TOPIC,
            "--group",
            GROUP,
            "--print-key",
            "--timeout-ms",
            "8000",
        ])
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .kill_on_drop(true)
        .spawn()
        .unwrap();
    let kcat_args = group_consumer(&bootstrap);
    let kcat_args: Vec<&str> = kcat_args.iter().map(String::as_str).collect();
    let kcat_member = spawn_kcat(&kcat_args, false);
    let (own, theirs) = tokio::join!(
        tokio::time::timeout(WAIT * 3, own.wait_with_output()),
        finish_kcat(kcat_member, &kcat_args, false)
    );
    let own = own
        .expect("syncline consume exits after 8 s without records")
        .unwrap();
    assert!(
        own.status.success(),
        "{}",
        String::from_utf8_lossy(&own.stderr)
    );
    let mut both: Vec<String> = keys_of(&own.stdout);
    both.extend(parse(&theirs).into_keys());
    both.sort();
    let expected: Vec<String> = (0..100).map(|i| format!("t{i:03}")).collect();
    assert_eq!(both, expected, "every new record once between the members");
}
