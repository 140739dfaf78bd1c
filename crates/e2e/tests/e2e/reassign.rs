//! Replica reassignment with real processes (`syncline topic reassign`), on four
//! brokers under `acks=all` load with nothing acknowledged lost: the leader moved
//! off, the replication factor raised and lowered, a reassignment cancelled
//! halfway, one whose new replica is down until it restarts, and one held to the
//! replication throttles.

use serde_json::Value;
use syncline_e2e::checks::*;
use syncline_e2e::{wait_for, Cluster};
use syncline_proto::pb;

const PARTITIONS: i32 = 1;
const MIN_ISR: i32 = 2;

/// Four brokers (three controller voters), `topic` with one partition on three of
/// them (RF 3, min ISR 2) under load; returns its replicas and the fourth broker.
async fn four_brokers(topic: &str) -> (Cluster, Load, LeaderWatch, Vec<i32>, i32) {
    four_brokers_with(topic, "").await
}

/// As [`four_brokers`], with `extra` lines in every broker's config.
async fn four_brokers_with(
    topic: &str,
    extra: &str,
) -> (Cluster, Load, LeaderWatch, Vec<i32>, i32) {
    let cluster = Cluster::start_quorum(4, 3, &format!("{FAST_TIMERS}{extra}")).await;
    create_topic(&cluster, topic, PARTITIONS, 3, MIN_ISR);
    let full = wait_full_isr(&cluster, 1, topic, WAIT).await;
    let replicas = full[0].replicas.clone();
    let spare = (1..=4).find(|id| !replicas.contains(id)).unwrap();
    let watch = LeaderWatch::start(&cluster, topic);
    let load = Load::start(&cluster, topic, PARTITIONS);
    load.wait_progress("warm-up", 5, WAIT).await;
    (cluster, load, watch, replicas, spare)
}

/// `syncline topic reassign ARGS --json` through broker `via`: its results.
fn reassign(cluster: &Cluster, via: i32, args: &[&str]) -> Vec<Value> {
    let mut all = vec!["topic", "reassign"];
    all.extend_from_slice(args);
    all.push("--json");
    let out = cluster.cli_via(via, &all, None);
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "syncline {all:?} failed: {stdout}{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let v: Value = serde_json::from_str(&stdout).expect("JSON");
    v.as_array().expect("an array").clone()
}

/// `syncline topic reassign ARGS` must fail; its whole output.
fn reassign_fails(cluster: &Cluster, via: i32, args: &[&str]) -> String {
    let mut all = vec!["topic", "reassign"];
    all.extend_from_slice(args);
    let out = cluster.cli_via(via, &all, None);
    assert!(!out.status.success(), "syncline {all:?} succeeded");
    format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    )
}

fn csv(ids: &[i32]) -> String {
    ids.iter().map(i32::to_string).collect::<Vec<_>>().join(",")
}

/// Partition 0 as broker `via` describes it.
async fn partition(cluster: &Cluster, via: i32, topic: &str) -> Option<pb::PartitionDescription> {
    describe_topic(cluster, via, topic)
        .await
        .ok()?
        .partitions
        .into_iter()
        .find(|p| p.partition == 0)
}

/// Waits until partition 0 has exactly `replicas` (in order), all in the ISR, no
/// reassignment in progress and a leader among them, as `via` sees it.
async fn wait_reassigned(cluster: &Cluster, via: i32, topic: &str, replicas: &[i32]) {
    wait_for(
        &format!("{topic}-0 reassigned to {replicas:?}"),
        WAIT,
        || async {
            partition(cluster, via, topic).await.is_some_and(|p| {
                p.replicas == replicas
                    && sorted(&p.isr) == sorted(replicas)
                    && p.adding_replicas.is_empty()
                    && p.removing_replicas.is_empty()
                    && replicas.contains(&p.leader_id)
            })
        },
    )
    .await;
}

/// Waits until broker `id` holds no copy of `topic`-0, not even one being deleted.
async fn wait_copy_deleted(cluster: &Cluster, id: i32, topic: &str) {
    let dir = cluster.data_dir(id);
    let name = format!("{topic}-0");
    wait_for(&format!("broker {id} deleted {name}"), WAIT, || async {
        std::fs::read_dir(&dir).is_ok_and(|entries| {
            !entries
                .flatten()
                .any(|e| e.file_name().to_string_lossy().starts_with(&name))
        })
    })
    .await;
}

fn isr_expands(cluster: &Cluster) -> f64 {
    (1..=4)
        .map(|id| {
            cluster
                .metric(id, "syncline_isr_expands_total")
                .unwrap_or(0.0)
        })
        .sum()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn moving_a_partition_off_its_leader_keeps_every_acknowledged_record() {
    let topic = "moved";
    let (cluster, load, watch, r, spare) = four_brokers(topic).await;
    let target = [r[1], r[2], spare];
    let expands_before = isr_expands(&cluster);
    // Through a broker that stays a replica throughout.
    let via = r[1];
    let results = reassign(
        &cluster,
        via,
        &[topic, "--partition", "0", "--replicas", &csv(&target)],
    );
    assert_eq!(results.len(), 1, "{results:?}");
    assert_eq!(results[0]["error"], Value::Null, "{results:?}");
    // Started: the leaving leader is still a replica until the target is in sync.
    let started: Vec<i64> = results[0]["replicas"]
        .as_array()
        .unwrap()
        .iter()
        .map(|v| v.as_i64().unwrap())
        .collect();
    // The new replica is not in the ISR yet: the answer is the started state.
    assert_eq!(
        started,
        [r[1], r[2], spare, r[0]].map(i64::from),
        "{results:?}"
    );
    assert_eq!(results[0]["result"], "in progress", "{results:?}");

    wait_reassigned(&cluster, via, topic, &target).await;
    wait_copy_deleted(&cluster, r[0], topic).await;
    assert!(
        isr_expands(&cluster) > expands_before,
        "the new replica joined the ISR through an expansion"
    );
    load.wait_progress("after the move", 5, WAIT).await;
    finish_and_verify(&cluster, topic, PARTITIONS, MIN_ISR as usize, load, watch).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn replication_factor_up_and_down_cancel_and_a_new_replica_down_until_it_restarts() {
    let topic = "resized";
    let (mut cluster, load, watch, r, spare) = four_brokers(topic).await;
    let via = r[0];

    // RF 3 -> 4 and back.
    let four = [r[0], r[1], r[2], spare];
    reassign(
        &cluster,
        via,
        &[topic, "--partition", "0", "--replicas", &csv(&four)],
    );
    wait_reassigned(&cluster, via, topic, &four).await;
    let back = reassign(
        &cluster,
        via,
        &[topic, "--partition", "0", "--replicas", &csv(&r)],
    );
    assert_eq!(
        back[0]["result"], "done",
        "the target was in sync: {back:?}"
    );
    wait_reassigned(&cluster, via, topic, &r).await;
    wait_copy_deleted(&cluster, spare, topic).await;

    // The new replica is down: the reassignment waits for it, and can be cancelled.
    cluster.kill(spare);
    let target = [r[0], r[1], spare];
    let started = reassign(
        &cluster,
        via,
        &[topic, "--partition", "0", "--replicas", &csv(&target)],
    );
    assert_eq!(started[0]["result"], "in progress", "{started:?}");
    assert_eq!(started[0]["adding_replicas"], serde_json::json!([spare]));
    assert_eq!(started[0]["removing_replicas"], serde_json::json!([r[2]]));
    // The controller answered once it committed the reassignment; `via` learns
    // it from the metadata log a moment later.
    wait_for(
        "the reassignment in progress, as via describes it",
        WAIT,
        || async {
            partition(&cluster, via, topic)
                .await
                .is_some_and(|p| p.adding_replicas == [spare] && p.removing_replicas == [r[2]])
        },
    )
    .await;
    let controller = cluster.wait_active_controller(&[spare], WAIT).await;
    wait_for("the controller counts one reassignment", WAIT, || async {
        cluster
            .metric(controller, "syncline_reassigning_partitions")
            .is_ok_and(|v| v == 1.0)
    })
    .await;
    // Clear refusals meanwhile.
    let out = reassign_fails(
        &cluster,
        via,
        &[
            topic,
            "--partition",
            "0",
            "--replicas",
            &csv(&[r[0], r[2], spare]),
        ],
    );
    assert!(
        out.contains("REASSIGNMENT_IN_PROGRESS") && out.contains("cancel"),
        "{out}"
    );
    let out = reassign_fails(
        &cluster,
        via,
        &[topic, "--partition", "0", "--replicas", "1,2,9"],
    );
    assert!(out.contains("broker 9 is not registered"), "{out}");
    let out = reassign_fails(
        &cluster,
        via,
        &[topic, "--partition", "0", "--replicas", "1,1,2"],
    );
    assert!(out.contains("appears twice"), "{out}");

    let cancelled = reassign(&cluster, via, &[topic, "--partition", "0", "--cancel"]);
    assert_eq!(cancelled[0]["result"], "done", "{cancelled:?}");
    wait_reassigned(&cluster, via, topic, &r).await;
    let out = reassign_fails(&cluster, via, &[topic, "--partition", "0", "--cancel"]);
    assert!(out.contains("NO_REASSIGNMENT_IN_PROGRESS"), "{out}");

    // Again, and this time the new replica comes back: it catches up and the
    // reassignment completes on its own.
    reassign(
        &cluster,
        via,
        &[topic, "--partition", "0", "--replicas", &csv(&target)],
    );
    load.wait_progress("while the new replica is down", 5, WAIT)
        .await;
    cluster.restart(spare);
    wait_reassigned(&cluster, via, topic, &target).await;
    wait_copy_deleted(&cluster, r[2], topic).await;
    let controller = cluster.wait_active_controller(&[], WAIT).await;
    assert_eq!(
        cluster
            .metric(controller, "syncline_reassigning_partitions")
            .ok(),
        Some(0.0)
    );
    load.wait_progress("after the reassignment", 5, WAIT).await;
    finish_and_verify(&cluster, topic, PARTITIONS, MIN_ISR as usize, load, watch).await;
}

/// `leader_replication_throttled_rate` and `follower_replication_throttled_rate` of
/// the throttled test, in bytes a second.
const THROTTLE: u64 = 1_000_000;

fn throttled_bytes(cluster: &Cluster, id: i32, side: &str) -> f64 {
    cluster
        .metric(
            id,
            &format!("syncline_throttled_replication_bytes_total{{side=\"{side}\"}}"),
        )
        .unwrap_or(0.0)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_new_replica_catches_up_within_the_replication_throttles_and_the_isr_is_not_held_back() {
    let extra = format!(
        "leader_replication_throttled_rate = {THROTTLE}\n\
         follower_replication_throttled_rate = {THROTTLE}\n"
    );
    // acks=all load on one topic, while a partition of another is moved.
    let (cluster, load, watch, _, _) = four_brokers_with("loaded", &extra).await;
    let topic = "bulk";
    create_topic(&cluster, topic, 1, 3, MIN_ISR);
    let r = wait_full_isr(&cluster, 1, topic, WAIT).await[0]
        .replicas
        .clone();
    let spare = (1..=4).find(|id| !r.contains(id)).unwrap();
    let via = r[0];
    // 8 MB in the partition: what the new replica has to copy.
    let data: u64 = 8_000_000;
    let out = cluster.cli_via(
        via,
        &[
            "perf",
            "produce",
            "--topic",
            topic,
            "--num-records",
            "8000",
            "--record-size",
            "1000",
            "--throughput",
            "-1",
            "--producer-props",
            "acks=all",
        ],
        None,
    );
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    // The in-sync followers kept up unthrottled.
    for id in 1..=4 {
        assert_eq!(
            throttled_bytes(&cluster, id, "follower"),
            0.0,
            "broker {id}"
        );
        assert_eq!(throttled_bytes(&cluster, id, "leader"), 0.0, "broker {id}");
    }

    let four = [r[0], r[1], r[2], spare];
    let started = std::time::Instant::now();
    reassign(
        &cluster,
        via,
        &[topic, "--partition", "0", "--replicas", &csv(&four)],
    );
    // acks=all writes go on at their pace while the new replica copies.
    load.wait_progress("during the throttled catch-up", 5, WAIT)
        .await;
    wait_reassigned(&cluster, via, topic, &four).await;
    let took = started.elapsed();
    // Within the throttles, the copy takes at least (data - one second of burst -
    // one fetch of overdraft) / rate: about 6 s. Unthrottled it takes well under
    // a second here.
    let fastest = (data - THROTTLE - 1_048_576) as f64 / THROTTLE as f64;
    println!(
        "{data} bytes copied in {:.1} s under a {THROTTLE} B/s throttle (at least {fastest:.1} s)",
        took.as_secs_f64()
    );
    assert!(
        took.as_secs_f64() >= fastest,
        "copied {data} bytes in {took:?}: faster than {THROTTLE} B/s allows"
    );
    // Both ends counted the new replica's copy, and only that.
    let leader = partition(&cluster, via, topic)
        .await
        .expect("described")
        .leader_id;
    let copied = throttled_bytes(&cluster, spare, "follower");
    assert!(copied >= data as f64, "new replica: {copied}");
    let sent = throttled_bytes(&cluster, leader, "leader");
    assert!(sent >= data as f64, "leader {leader}: {sent}");
    for id in (1..=4).filter(|id| *id != spare) {
        assert_eq!(
            throttled_bytes(&cluster, id, "follower"),
            0.0,
            "broker {id}"
        );
    }
    // The copy is the leader's, byte for byte.
    wait_logs_identical(&cluster, topic, 0, WAIT).await;
    load.wait_progress("after the reassignment", 5, WAIT).await;
    finish_and_verify(
        &cluster,
        "loaded",
        PARTITIONS,
        MIN_ISR as usize,
        load,
        watch,
    )
    .await;
}
