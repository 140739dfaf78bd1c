//! Operators' tools with real processes: preferred leader election, by command
//! (`syncline topic elect-leaders`) and by the active controller's automatic
//! rebalance, under `acks=all` load with nothing acknowledged lost; topic configs
//! changed live and partitions added (`syncline topic alter`).

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

/// Waits until `victim` leads every partition it prefers again and the active
/// controller reports no imbalance.
async fn wait_preferred_leading(
    cluster: &Cluster,
    via: i32,
    victim: i32,
    preferred: &[i32],
    when: &str,
) {
    wait_for(
        &format!("the preferred replica leading again {when}"),
        WAIT,
        || async {
            let now = leaders(cluster, via).await;
            preferred
                .iter()
                .all(|p| now.get(p).map(|l| l.0) == Some(victim))
        },
    )
    .await;
    wait_for(&format!("no imbalance reported {when}"), WAIT, || async {
        imbalance(cluster).await == 0.0
    })
    .await;
}

async fn finish(cluster: &Cluster, load: Load, watch: LeaderWatch) {
    load.wait_progress("after the election", 5, WAIT).await;
    finish_and_verify(cluster, TOPIC, PARTITIONS, MIN_ISR as usize, load, watch).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn elect_leaders_puts_preferred_replicas_back_after_a_failover_without_loss() {
    let (cluster, load, watch, victim, preferred, before) =
        after_failover_and_rejoin("auto_leader_rebalance_enable = false\n").await;
    let via = other_than(victim);
    let moved_away: BTreeMap<i32, (i32, i32)> = topic_metadata(&cluster, via, TOPIC)
        .await
        .unwrap()
        .iter()
        .map(|p| (p.partition, (p.leader_id, p.leader_epoch)))
        .collect();
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
    wait_preferred_leading(&cluster, via, victim, &preferred, "after elect-leaders").await;

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
    wait_preferred_leading(&cluster, via, victim, &preferred, "after the rebalance").await;
    finish(&cluster, load, watch).await;
}

/// The CLI bootstrapped from broker `via` alone (a paused broker in the bootstrap
/// list would hold a request until it times out).
fn cli_ok(cluster: &Cluster, via: i32, args: &[&str]) -> String {
    let out = cluster.cli_via(via, args, None);
    let stdout = String::from_utf8_lossy(&out.stdout).into_owned();
    assert!(
        out.status.success(),
        "syncline {args:?} failed: {stdout}{}",
        String::from_utf8_lossy(&out.stderr)
    );
    stdout
}

fn cli_fails(cluster: &Cluster, via: i32, args: &[&str]) -> String {
    let out = cluster.cli_via(via, args, None);
    assert!(!out.status.success(), "syncline {args:?} succeeded");
    format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    )
}

/// The error code of one acks=all produce to `partition` through its leader, found
/// through broker `via` (one that is not paused: a paused broker answers nothing).
async fn produce_code(cluster: &Cluster, via: i32, topic: &str, partition: i32) -> pb::ErrorCode {
    let Ok(ps) = topic_metadata(cluster, via, topic).await else {
        return pb::ErrorCode::UnknownServerError;
    };
    let Some(leader) = ps
        .iter()
        .find(|p| p.partition == partition)
        .map(|p| p.leader_id)
    else {
        return pb::ErrorCode::UnknownTopicOrPartition;
    };
    let Ok(conn) = cluster.connect(leader).await else {
        return pb::ErrorCode::NetworkException;
    };
    match syncline_e2e::client::produce(&conn, topic, partition, -1, &[b"v".to_vec()]).await {
        Ok(r) => pb::ErrorCode::from_wire(r.error_code),
        Err(_) => pb::ErrorCode::NetworkException,
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn topic_configs_change_live_and_partitions_only_grow() {
    let topic = "altered";
    let mut cluster = Cluster::start_quorum(3, 3, FAST_TIMERS).await;
    create_topic(&cluster, topic, 1, 3, 2);
    let full = by_partition(&wait_full_isr(&cluster, 1, topic, WAIT).await);
    // Every metadata read goes to the partition's leader, which is never paused.
    let via = full[&0].leader_id;
    assert_eq!(
        produce_code(&cluster, via, topic, 0).await,
        pb::ErrorCode::None
    );

    // One follower paused: the ISR shrinks to 2, which min.insync.replicas=2 allows.
    // Not the active controller either: pausing it would move control too, which
    // the quorum tests cover, and slow every step here by an election.
    let controller = cluster.wait_active_controller(&[], WAIT).await;
    let follower = *full[&0]
        .replicas
        .iter()
        .find(|r| **r != via && **r != controller)
        .unwrap();
    cluster.pause(follower);
    wait_for("the ISR without the paused follower", WAIT, || async {
        topic_metadata(&cluster, via, topic)
            .await
            .is_ok_and(|ps| ps[0].isr.len() == 2)
    })
    .await;
    assert_eq!(
        produce_code(&cluster, via, topic, 0).await,
        pb::ErrorCode::None
    );

    // Raised live to 3: the same ISR now refuses acks=all, and describe shows it.
    let out = cli_ok(
        &cluster,
        via,
        &["topic", "alter", topic, "--config", "min.insync.replicas=3"],
    );
    assert!(out.contains("min.insync.replicas=3"), "{out}");
    wait_for(
        "acks=all refused below the new min.insync.replicas",
        WAIT,
        || async {
            produce_code(&cluster, via, topic, 0).await == pb::ErrorCode::NotEnoughReplicas
        },
    )
    .await;
    let described = cli_ok(&cluster, via, &["topic", "describe", topic, "--json"]);
    let described: Value = serde_json::from_str(&described).unwrap();
    assert_eq!(
        described["configs"]["min.insync.replicas"], "3",
        "{described}"
    );

    // Deleted, it is back at the broker's default (Kafka's 1): acks=all is
    // accepted again.
    cli_ok(
        &cluster,
        via,
        &[
            "topic",
            "alter",
            topic,
            "--delete-config",
            "min.insync.replicas",
        ],
    );
    wait_for(
        "acks=all accepted with the config deleted",
        WAIT,
        || async { produce_code(&cluster, via, topic, 0).await == pb::ErrorCode::None },
    )
    .await;
    cluster.resume(follower);
    wait_full_isr(&cluster, 1, topic, WAIT).await;

    // Partitions grow: the new ones get leaders and take writes; they never shrink.
    let out = cli_ok(
        &cluster,
        via,
        &["topic", "alter", topic, "--partitions", "3"],
    );
    assert!(out.contains("3 partitions"), "{out}");
    wait_for("acks=all accepted by the new partition 2", WAIT, || async {
        produce_code(&cluster, via, topic, 2).await == pb::ErrorCode::None
    })
    .await;
    assert_eq!(wait_full_isr(&cluster, 1, topic, WAIT).await.len(), 3);
    let refused = cli_fails(
        &cluster,
        via,
        &["topic", "alter", topic, "--partitions", "2"],
    );
    assert!(
        refused.contains("INVALID_PARTITIONS") && refused.contains("only grow"),
        "{refused}"
    );
    let refused = cli_fails(
        &cluster,
        via,
        &["topic", "alter", topic, "--config", "min.insync.replicas=4"],
    );
    assert!(refused.contains("INVALID_CONFIG"), "{refused}");
    let refused = cli_fails(
        &cluster,
        via,
        &[
            "topic",
            "alter",
            "no-such-topic",
            "--config",
            "retention.ms=1",
        ],
    );
    assert!(refused.contains("no-such-topic"), "{refused}");
    let refused = cli_fails(&cluster, via, &["topic", "alter", topic]);
    assert!(refused.contains("nothing to change"), "{refused}");
}

/// Whether broker `id` holds any copy of `topic`-0, one being deleted included.
fn has_copy(cluster: &Cluster, id: i32, topic: &str) -> bool {
    let name = format!("{topic}-0");
    std::fs::read_dir(cluster.data_dir(id)).is_ok_and(|entries| {
        entries
            .flatten()
            .any(|e| e.file_name().to_string_lossy().starts_with(&name))
    })
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_deleted_topic_is_gone_everywhere_and_its_name_starts_empty_again() {
    let topic = "gone";
    let mut cluster = Cluster::start_quorum(3, 3, FAST_TIMERS).await;
    create_topic(&cluster, topic, 1, 3, 2);
    let full = by_partition(&wait_full_isr(&cluster, 1, topic, WAIT).await);
    let leader = full[&0].leader_id;
    for _ in 0..3 {
        assert_eq!(
            produce_code(&cluster, leader, topic, 0).await,
            pb::ErrorCode::None
        );
    }
    // A follower that is down misses the deletion and the new topic's creation.
    let away = *full[&0].replicas.iter().find(|&&r| r != leader).unwrap();
    let via = (1..=3).find(|&id| id != away && id != leader).unwrap();
    cluster.kill(away);

    let out = cli_ok(&cluster, via, &["topic", "delete", topic, "--json"]);
    let results: Value = serde_json::from_str(&out).expect("JSON");
    assert_eq!(results[0]["topic"], topic, "{out}");
    assert_eq!(results[0]["error"], Value::Null, "{out}");
    // The old leader answers UNKNOWN_TOPIC_OR_PARTITION once it has heard, and
    // the live replicas delete their copies.
    let conn = cluster.connect(leader).await.unwrap();
    wait_for("the old leader refuses the deleted topic", WAIT, || async {
        syncline_e2e::client::produce(&conn, topic, 0, -1, &[b"late".to_vec()])
            .await
            .is_ok_and(|r| {
                pb::ErrorCode::from_wire(r.error_code) == pb::ErrorCode::UnknownTopicOrPartition
            })
    })
    .await;
    for id in [leader, via] {
        wait_for(&format!("broker {id} deleted its copy"), WAIT, || async {
            !has_copy(&cluster, id, topic)
        })
        .await;
    }
    let out = cli_fails(&cluster, via, &["topic", "delete", topic]);
    assert!(out.contains("UNKNOWN_TOPIC_OR_PARTITION"), "{out}");

    // The name again, at once: an empty topic, on the broker that was away too
    // (its old copy is another topic id's, so it starts over).
    assert!(has_copy(&cluster, away, topic));
    create_topic(&cluster, topic, 1, 3, 2);
    cluster.restart(away);
    let again = by_partition(&wait_full_isr(&cluster, via, topic, WAIT).await);
    assert_eq!(sorted(&again[&0].isr), vec![1, 2, 3]);
    let new_leader = again[&0].leader_id;
    let view = leader_view(&cluster, new_leader, topic, 0).await.unwrap();
    assert_eq!(
        view.log_end_offset, 0,
        "the new topic starts empty: {view:?}"
    );
    wait_for(
        "the returning broker's copy is the new topic's",
        WAIT,
        || async {
            cluster.log_bytes(away, topic, 0, i64::MAX).is_empty()
                && std::fs::read_to_string(
                    cluster
                        .data_dir(away)
                        .join(format!("{topic}-0"))
                        .join("partition.metadata"),
                )
                .is_ok_and(|m| m.contains("topic_id:"))
        },
    )
    .await;
    assert!(
        log_since(&cluster, away, 0).contains("a deleted topic's copy under the same name"),
        "broker {away} did not set its stale copy aside"
    );
    assert_eq!(
        produce_code(&cluster, new_leader, topic, 0).await,
        pb::ErrorCode::None
    );
}
