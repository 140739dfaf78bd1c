//! The controller with real processes: a killed broker's leaderships move to its
//! ISR peers within the session timeout and it rejoins as a follower; the
//! controller's own process (broker 1, the single voter) restarts, after SIGKILL
//! and after SIGTERM, with topics and assignments intact and the cluster carrying
//! on. Throughout, every broker's view of who leads is watched: never two leaders
//! for one partition and leader epoch.

use std::collections::BTreeMap;
use std::time::Duration;

use syncline_e2e::checks::*;
use syncline_e2e::client::{produce, read_all};
use syncline_e2e::{wait_for, Cluster};
use tokio::time::Instant;

const TOPIC: &str = "orders";
const PARTITIONS: i32 = 6;
const MIN_ISR: i32 = 2;

async fn cluster_with_topic() -> Cluster {
    let cluster = Cluster::start(3, FAST_TIMERS).await;
    create_topic(&cluster, TOPIC, PARTITIONS, 3, MIN_ISR);
    cluster
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn killed_broker_loses_its_leaderships_to_the_isr_and_rejoins_as_follower() {
    let mut cluster = cluster_with_topic().await;
    let watch = LeaderWatch::start(&cluster, TOPIC);
    let before = by_partition(&wait_full_isr(&cluster, 1, TOPIC, Duration::from_secs(30)).await);
    // Broker 1 hosts the controller: the victim is whichever of 2 and 3 leads more.
    let victim = busier_leader(&before);
    let led: Vec<i32> = before
        .values()
        .filter(|p| p.leader_id == victim)
        .map(|p| p.partition)
        .collect();
    let (old_epoch, _) = registration(&cluster, victim).await.unwrap();

    // Records acknowledged by all three replicas before the failure.
    let mut acked: BTreeMap<i32, Vec<Vec<u8>>> = BTreeMap::new();
    for p in before.values() {
        let conn = cluster.connect(p.leader_id).await.unwrap();
        let values: Vec<Vec<u8>> = (0..5)
            .map(|i| format!("before-{}-{i}", p.partition).into_bytes())
            .collect();
        let r = produce(&conn, TOPIC, p.partition, -1, &values)
            .await
            .unwrap();
        assert_eq!(r.error_code, 0, "{r:?}");
        assert_eq!(sorted(&r.acked_isr), vec![1, 2, 3]);
        acked.insert(p.partition, values);
    }

    cluster.kill(victim);
    // Every partition the victim led gets a new leader from its ISR, in a higher
    // leader epoch, that leads in its own view too; the victim leaves every ISR;
    // the other partitions keep their leader and epoch (no needless bump).
    let after = wait_failover(&cluster, TOPIC, &before, victim, Instant::now()).await;

    // The cluster carries on with two replicas, and nothing acknowledged is lost.
    for p in after.values() {
        let conn = cluster.connect(p.leader_id).await.unwrap();
        let value = format!("after-{}", p.partition).into_bytes();
        let r = produce(&conn, TOPIC, p.partition, -1, std::slice::from_ref(&value))
            .await
            .unwrap();
        assert_eq!(r.error_code, 0, "{r:?}");
        let mut expected_isr: Vec<i32> = vec![1, 2, 3];
        expected_isr.retain(|&r| r != victim);
        assert_eq!(sorted(&r.acked_isr), expected_isr);
        let records = read_all(&conn, TOPIC, p.partition, 0).await.unwrap();
        let values: Vec<Vec<u8>> = records.into_iter().map(|(_, v)| v).collect();
        let mut expected = acked[&p.partition].clone();
        expected.push(value);
        assert_eq!(values, expected, "partition {}", p.partition);
    }

    // Restarted: a new incarnation (new broker epoch), unfenced once caught up, and
    // a follower everywhere, back in every ISR.
    cluster.restart(victim);
    wait_for(
        "the restarted broker to be unfenced",
        Duration::from_secs(30),
        || async {
            registration(&cluster, victim)
                .await
                .is_ok_and(|(epoch, fenced)| epoch > old_epoch && !fenced)
        },
    )
    .await;
    let healed = by_partition(&wait_full_isr(&cluster, 1, TOPIC, Duration::from_secs(30)).await);
    for (p, now) in &healed {
        assert_eq!(
            (now.leader_id, now.leader_epoch),
            (after[p].leader_id, after[p].leader_epoch),
            "partition {p}: rejoining moved leadership"
        );
    }
    assert_eq!(
        led_by(&cluster, victim, TOPIC).await.unwrap(),
        Vec::<i32>::new()
    );
    assert_eq!(
        cluster.metric(victim, "syncline_leader_count").unwrap(),
        0.0
    );
    for p in 0..PARTITIONS {
        wait_logs_identical(&cluster, TOPIC, p, Duration::from_secs(30)).await;
    }
    assert_no_unclean_or_offline(&cluster);

    let history = watch.finish().await;
    for p in &led {
        let new = &after[p];
        assert_eq!(
            history.claims.get(&(*p, new.leader_epoch)),
            Some(&new.leader_id),
            "the watch did not see partition {p}'s new leader: {:?}",
            history.epochs(*p)
        );
    }
}

/// Topic configs and assignment (replicas per partition), as broker 1 describes them.
async fn topic_shape(cluster: &Cluster) -> (BTreeMap<String, String>, BTreeMap<i32, Vec<i32>>) {
    let d = describe_topic(cluster, 1, TOPIC).await.unwrap();
    let configs = d.configs.into_iter().collect();
    let replicas = d
        .partitions
        .into_iter()
        .map(|p| (p.partition, p.replicas))
        .collect();
    (configs, replicas)
}

/// Restarts the controller's process (SIGKILL or SIGTERM) under an acks=all load
/// and checks what survives and that the cluster carries on.
async fn controller_restart(clean: bool) {
    let mut cluster = cluster_with_topic().await;
    let watch = LeaderWatch::start(&cluster, TOPIC);
    let before = by_partition(&wait_full_isr(&cluster, 1, TOPIC, Duration::from_secs(30)).await);
    let shape = topic_shape(&cluster).await;
    assert_eq!(
        shape.0.get("min.insync.replicas").map(String::as_str),
        Some("2")
    );
    assert_eq!(shape.1.len(), PARTITIONS as usize);
    let load = Load::start(&cluster, TOPIC, PARTITIONS);
    load.wait_progress("before the restart", 20, Duration::from_secs(30))
        .await;

    if clean {
        cluster.stop(1, Duration::from_secs(30)).await;
        let log = log_since(&cluster, 1, 0);
        assert!(
            log.contains("controlled shutdown: leadership moved away")
                && log.contains("broker stopped"),
            "broker 1 did not move its leaderships before stopping cleanly:\n{}",
            cluster.log_tail(1, 30)
        );
        // Broker 1 left every ISR before stopping: with ISR {2, 3} ≥
        // min.insync.replicas, acks=all goes on while the controller is away.
        load.wait_progress("controller stopped", 20, Duration::from_secs(30))
            .await;
    } else {
        cluster.kill(1);
        // The data plane does not need the controller: consumers still read the
        // partitions brokers 2 and 3 lead. (acks=all waits: broker 1 is still in
        // every ISR, and no ISR change can commit without the controller.)
        for p in before.values().filter(|p| p.leader_id != 1) {
            // Counted before reading: all of these are committed, hence readable.
            let acked = load.acked()[p.partition as usize];
            let conn = cluster.connect(p.leader_id).await.unwrap();
            let records = read_all(&conn, TOPIC, p.partition, 0).await.unwrap();
            assert!(
                records.len() as u64 >= acked,
                "partition {}: {} records readable, {acked} acknowledged",
                p.partition,
                records.len()
            );
        }
        // Stay down longer than a session: brokers 2 and 3 miss heartbeats, and the
        // returning controller must give them a new session rather than fence them.
        tokio::time::sleep(SESSION_TIMEOUT + Duration::from_secs(1)).await;
    }

    cluster.restart(1);
    let healed = by_partition(&wait_full_isr(&cluster, 1, TOPIC, Duration::from_secs(60)).await);
    assert_eq!(
        topic_shape(&cluster).await,
        shape,
        "topic changed across the restart"
    );
    for (p, old) in &before {
        if old.leader_id == 1 {
            // Broker 1 gave up (clean) or lost (killed: its restart fences the old
            // incarnation) its leaderships, to ISR peers in a new epoch.
            assert_ne!(healed[p].leader_id, 1, "partition {p}");
            assert!(healed[p].leader_epoch > old.leader_epoch, "partition {p}");
        }
    }
    let c = cluster.describe_cluster(2).await.unwrap();
    assert_eq!(c.controller_id, 1);
    assert_eq!(c.brokers.iter().filter(|b| !b.fenced).count(), 3, "{c:?}");
    load.wait_progress("after the restart", 20, Duration::from_secs(60))
        .await;

    let report = load.finish().await;
    let v = verify_load(&cluster, TOPIC, PARTITIONS, MIN_ISR as usize, &report).await;
    println!("controller restart (clean: {clean}): {v:?}");
    assert_eq!(v.failed, 0, "records failed for good");
    assert_no_unclean_or_offline(&cluster);
    watch.finish().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn controller_sigkill_and_restart_keeps_topics_and_the_cluster_carries_on() {
    controller_restart(false).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn controller_clean_restart_keeps_topics_and_the_cluster_carries_on() {
    controller_restart(true).await;
}

/// A long pause (SIGSTOP) of the controller's process is not the brokers' silence:
/// when it resumes it must not fence the brokers whose heartbeats it could not read
/// (which would move every leadership and shrink every ISR to one replica).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn paused_controller_does_not_fence_live_brokers_when_it_resumes() {
    let mut cluster = cluster_with_topic().await;
    let watch = LeaderWatch::start(&cluster, TOPIC);
    let before = by_partition(&wait_full_isr(&cluster, 1, TOPIC, Duration::from_secs(30)).await);
    let load = Load::start(&cluster, TOPIC, PARTITIONS);
    load.wait_progress("before the pause", 20, Duration::from_secs(30))
        .await;

    let from = log_len(&cluster, 1);
    cluster.pause(1);
    // Frozen for longer than a session: every heartbeat sent meanwhile waits unread.
    tokio::time::sleep(SESSION_TIMEOUT + Duration::from_secs(2)).await;
    cluster.resume(1);

    let healed = by_partition(&wait_full_isr(&cluster, 1, TOPIC, Duration::from_secs(60)).await);
    load.wait_progress("after the pause", 20, Duration::from_secs(60))
        .await;
    let log = log_since(&cluster, 1, from);
    let fenced: Vec<&str> = log
        .lines()
        .filter(|l| {
            l.contains("session expired")
                || l.contains("fencing broker")
                || l.contains("partition offline")
        })
        .collect();
    assert!(
        fenced.is_empty(),
        "live brokers fenced after the controller's pause:\n{}",
        fenced.join("\n")
    );
    // Every broker lived through it: no leadership moved (ISRs may have shrunk
    // and grown back: broker 1's replicas did not fetch while it was frozen).
    for (p, b) in &before {
        assert_eq!(
            (healed[p].leader_id, healed[p].leader_epoch),
            (b.leader_id, b.leader_epoch),
            "partition {p}"
        );
    }
    let report = load.finish().await;
    let v = verify_load(&cluster, TOPIC, PARTITIONS, MIN_ISR as usize, &report).await;
    println!("controller paused: {v:?}");
    assert_eq!(v.failed, 0, "records failed for good");
    assert_no_unclean_or_offline(&cluster);
    let history = watch.finish().await;
    for p in 0..PARTITIONS {
        assert_eq!(
            history.epochs(p),
            vec![(before[&p].leader_epoch, before[&p].leader_id)],
            "partition {p}"
        );
    }
}
