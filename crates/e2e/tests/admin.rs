//! Operators' tools with real processes: preferred leader election, by command
//! (`syncline topic elect-leaders`) and by the active controller's automatic
//! rebalance, under `acks=all` load with nothing acknowledged lost.

use std::collections::BTreeMap;

use serde_json::Value;
use syncline_e2e::checks::*;
use syncline_e2e::{wait_for, Cluster};
use syncline_proto::pb;
use tokio::time::Instant;

const TOPIC: &str = "admin";
const PARTITIONS: i32 = 3;
const MIN_ISR: i32 = 2;

/// Partitions that prefer `broker` (it is their first replica), as `before` shows.
fn preferred_by(before: &BTreeMap<i32, pb::PartitionMetadata>, broker: i32) -> Vec<i32> {
    before
        .values()
        .filter(|p| p.replicas.first() == Some(&broker))
        .map(|p| p.partition)
        .collect()
}

fn other_than(victim: i32) -> i32 {
    if victim == 1 {
        2
    } else {
        1
    }
}

/// The imbalance the active controller reports.
async fn imbalance(cluster: &Cluster) -> f64 {
    let controller = cluster.wait_active_controller(&[], WAIT).await;
    cluster
        .metric(controller, "syncline_preferred_replica_imbalance_count")
        .unwrap_or(-1.0)
}

async fn leaders(cluster: &Cluster, via: i32) -> BTreeMap<i32, (i32, i32)> {
    topic_metadata(cluster, via, TOPIC)
        .await
        .map(|ps| {
            ps.iter()
                .map(|p| (p.partition, (p.leader_id, p.leader_epoch)))
                .collect()
        })
        .unwrap_or_default()
}

/// Three voters, RF 3 and min ISR 2; the preferred leader of partition 0 is
/// SIGKILLed and restarted under load, and is back in every ISR, leading none of
/// its preferred partitions. Returns the cluster, the load, the leader watch, the
/// victim and the partitions it prefers.
async fn after_failover_and_rejoin(
    extra: &str,
) -> (
    Cluster,
    Load,
    LeaderWatch,
    i32,
    Vec<i32>,
    BTreeMap<i32, pb::PartitionMetadata>,
) {
    let mut cluster = Cluster::start_quorum(3, 3, &format!("{FAST_TIMERS}{extra}")).await;
    create_topic(&cluster, TOPIC, PARTITIONS, 3, MIN_ISR);
    let before = by_partition(&wait_full_isr(&cluster, 1, TOPIC, WAIT).await);
    let watch = LeaderWatch::start(&cluster, TOPIC);
    let load = Load::start(&cluster, TOPIC, PARTITIONS);
    load.wait_progress("warm-up", 5, WAIT).await;
    let victim = before[&0].replicas[0];
    let preferred = preferred_by(&before, victim);
    assert!(preferred.contains(&0));

    let since = Instant::now();
    cluster.kill(victim);
    wait_failover(&cluster, TOPIC, &before, victim, since).await;
    load.wait_progress("with the preferred leader dead", 5, WAIT)
        .await;
    cluster.restart(victim);
    wait_full_isr(&cluster, other_than(victim), TOPIC, WAIT).await;
    (cluster, load, watch, victim, preferred, before)
}

async fn finish(cluster: &Cluster, load: Load, watch: LeaderWatch) {
    load.wait_progress("after the election", 5, WAIT).await;
    let report = load.finish().await;
    let verified = verify_load(cluster, TOPIC, PARTITIONS, MIN_ISR as usize, &report).await;
    assert_eq!(verified.failed, 0, "records failed for good: {verified:?}");
    watch.finish().await;
    assert_no_unclean_or_offline(cluster);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn elect_leaders_puts_preferred_replicas_back_after_a_failover_without_loss() {
    let (cluster, load, watch, victim, preferred, before) =
        after_failover_and_rejoin("auto_leader_rebalance_enable = false\n").await;
    let via = other_than(victim);
    let moved_away = leaders(&cluster, via).await;
    for p in &preferred {
        assert_ne!(
            moved_away[p].0, victim,
            "partition {p} is led by {victim} already"
        );
    }
    wait_for("the imbalance reported", WAIT, || async {
        imbalance(&cluster).await == preferred.len() as f64
    })
    .await;

    let out = cluster.cli(&["topic", "elect-leaders", TOPIC, "--json"], None);
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "elect-leaders failed: {stdout}{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let results: Value = serde_json::from_str(&stdout).expect("JSON");
    let results = results.as_array().expect("an array");
    assert_eq!(results.len(), PARTITIONS as usize, "{stdout}");
    for r in results {
        let p = r["partition"].as_i64().unwrap() as i32;
        if preferred.contains(&p) {
            assert_eq!(r["result"], "elected", "{stdout}");
            assert_eq!(r["leader"], victim, "{stdout}");
            assert!(
                r["leader_epoch"].as_i64().unwrap() > i64::from(moved_away[&p].1),
                "{stdout}"
            );
        } else {
            assert_eq!(r["error"], "ELECTION_NOT_NEEDED", "{stdout}");
            assert_eq!(r["leader"], before[&p].replicas[0], "{stdout}");
        }
    }
    wait_for("the preferred replica leading again", WAIT, || async {
        let now = leaders(&cluster, via).await;
        preferred
            .iter()
            .all(|p| now.get(p).map(|l| l.0) == Some(victim))
    })
    .await;
    wait_for("no imbalance reported", WAIT, || async {
        imbalance(&cluster).await == 0.0
    })
    .await;

    // Again: every partition is led by its preferred replica already, which is
    // no failure.
    let out = cluster.cli(&["topic", "elect-leaders", TOPIC], None);
    let table = String::from_utf8_lossy(&out.stdout);
    assert!(out.status.success(), "{table}");
    assert_eq!(
        table.matches("already preferred").count(),
        PARTITIONS as usize,
        "{table}"
    );
    // A topic that does not exist is a clear failure.
    let out = cluster.cli(&["topic", "elect-leaders", "no-such-topic"], None);
    assert!(!out.status.success());
    let all = format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(
        all.contains("UNKNOWN_TOPIC_OR_PARTITION") && all.contains("no-such-topic"),
        "{all}"
    );

    finish(&cluster, load, watch).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_automatic_rebalance_puts_preferred_replicas_back_on_its_own() {
    let (cluster, load, watch, victim, preferred, _) =
        after_failover_and_rejoin("leader_imbalance_check_interval_seconds = 1\n").await;
    let via = other_than(victim);
    wait_for(
        "the rebalance making the preferred replica lead again",
        WAIT,
        || async {
            let now = leaders(&cluster, via).await;
            preferred
                .iter()
                .all(|p| now.get(p).map(|l| l.0) == Some(victim))
        },
    )
    .await;
    wait_for("no imbalance reported", WAIT, || async {
        imbalance(&cluster).await == 0.0
    })
    .await;
    finish(&cluster, load, watch).await;
}
