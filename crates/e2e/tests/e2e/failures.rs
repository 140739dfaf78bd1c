//! Process failures of the three-node local cluster under an `acks=all` load:
//! SIGKILL of a leader and of a follower, SIGSTOP/SIGCONT of a leader (a long GC
//! pause), a clean restart (SIGTERM: controlled shutdown first), and a rolling
//! restart of all three brokers. (SIGKILL and SIGTERM of the controller's process
//! are in `controller.rs`.)
//!
//! Every test ends the same way: every acknowledged record is read back at the
//! offset its acknowledgement gave, replica logs are byte-identical below the high
//! watermark, no record failed for good, no record is in the log twice (the load
//! is an idempotent producer with up to five sends of a partition outstanding,
//! acknowledged in sending order), and no broker ever named two leaders for one
//! partition and leader epoch.

use std::time::Duration;

use syncline_e2e::checks::*;
use syncline_e2e::Cluster;
use tokio::time::Instant;

const TOPIC: &str = "events";
const PARTITIONS: i32 = 6;
const MIN_ISR: i32 = 2;
/// Acknowledged records every partition must gain in each phase of a test.
const PROGRESS: u64 = 20;
const PROGRESS_TIMEOUT: Duration = Duration::from_secs(45);
const HEAL_TIMEOUT: Duration = Duration::from_secs(60);

async fn cluster_with_topic(partitions: i32) -> Cluster {
    let cluster = Cluster::start(3, FAST_TIMERS).await;
    create_topic(&cluster, TOPIC, partitions, 3, MIN_ISR);
    cluster
}

/// SIGTERM; asserts the broker moved its leaderships away first and then stopped
/// cleanly (not killed at the end of the grace period).
async fn clean_stop(cluster: &mut Cluster, id: i32) {
    let from = log_len(cluster, id);
    cluster.stop(id, Duration::from_secs(30)).await;
    let log = log_since(cluster, id, from);
    assert!(
        log.contains("controlled shutdown: leadership moved away")
            && log.contains("broker stopped"),
        "broker {id} did not shut down cleanly:\n{log}"
    );
}

/// The end of every test: load stopped and verified, leadership rules held.
async fn finish(
    cluster: &Cluster,
    load: Load,
    watch: LeaderWatch,
    partitions: i32,
    what: &str,
) -> LeaderHistory {
    let report = load.finish().await;
    let v = verify_load(cluster, TOPIC, partitions, MIN_ISR as usize, &report).await;
    println!("{what}: {v:?}");
    let failed: Vec<String> = report
        .sent
        .iter()
        .filter_map(|s| s.result.as_ref().err().map(|e| format!("{}: {e}", s.value)))
        .take(10)
        .collect();
    assert_eq!(v.failed, 0, "records failed for good: {failed:?}");
    // The load's producer is idempotent: a retry of a batch the leader wrote
    // (its answer lost to the fault) is answered with the first copy's offsets.
    assert_eq!(v.duplicates, 0, "copies written twice: {v:?}");
    assert_no_unclean_or_offline(cluster);
    watch.finish().await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
pub(crate) async fn sigkill_leader_under_acks_all_load() {
    let mut cluster = cluster_with_topic(PARTITIONS).await;
    let watch = LeaderWatch::start(&cluster, TOPIC);
    let before = by_partition(&wait_full_isr(&cluster, 1, TOPIC, HEAL_TIMEOUT).await);
    let victim = busier_leader(&before);
    let load = Load::start(&cluster, TOPIC, PARTITIONS);
    load.wait_progress("warm-up", PROGRESS, PROGRESS_TIMEOUT)
        .await;

    cluster.kill(victim);
    let after = wait_failover(&cluster, TOPIC, &before, victim, Instant::now()).await;
    // Two replicas ≥ min.insync.replicas: acks=all goes on on every partition.
    load.wait_progress("leader killed", PROGRESS, PROGRESS_TIMEOUT)
        .await;

    cluster.restart(victim);
    let healed = by_partition(&wait_full_isr(&cluster, 1, TOPIC, HEAL_TIMEOUT).await);
    for (p, h) in &healed {
        assert_eq!(h.leader_epoch, after[p].leader_epoch, "partition {p}");
    }
    assert_eq!(
        led_by(&cluster, victim, TOPIC).await.unwrap(),
        Vec::<i32>::new()
    );
    load.wait_progress("leader restarted", PROGRESS, PROGRESS_TIMEOUT)
        .await;
    finish(&cluster, load, watch, PARTITIONS, "SIGKILL leader").await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
pub(crate) async fn sigkill_follower_under_acks_all_load() {
    // One partition: the victim is only a follower (and not the controller).
    let mut cluster = cluster_with_topic(1).await;
    let watch = LeaderWatch::start(&cluster, TOPIC);
    let before = wait_full_isr(&cluster, 1, TOPIC, HEAL_TIMEOUT).await[0].clone();
    let leader = before.leader_id;
    let victim = if leader == 2 { 3 } else { 2 };
    let load = Load::start(&cluster, TOPIC, 1);
    load.wait_progress("warm-up", PROGRESS, PROGRESS_TIMEOUT)
        .await;

    cluster.kill(victim);
    let killed_at = Instant::now();
    // The follower leaves the ISR (the leader's lag check or its fencing, whichever
    // commits first); the leader and its epoch stay.
    let mut survivors = vec![1, 2, 3];
    survivors.retain(|&r| r != victim);
    loop {
        let now = topic_metadata(&cluster, 1, TOPIC).await.unwrap()[0].clone();
        assert_eq!(
            (now.leader_id, now.leader_epoch),
            (leader, before.leader_epoch),
            "a follower's failure moved leadership"
        );
        let isr = sorted(&now.isr);
        if isr == survivors {
            println!(
                "follower {victim} left the ISR within {:?}",
                killed_at.elapsed()
            );
            break;
        }
        assert!(
            killed_at.elapsed() < FAILOVER_DEADLINE,
            "follower {victim} still in the ISR {isr:?} after {FAILOVER_DEADLINE:?}"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    load.wait_progress("follower killed", PROGRESS, PROGRESS_TIMEOUT)
        .await;

    cluster.restart(victim);
    let healed = wait_full_isr(&cluster, 1, TOPIC, HEAL_TIMEOUT).await[0].clone();
    assert_eq!(
        (healed.leader_id, healed.leader_epoch),
        (leader, before.leader_epoch)
    );
    load.wait_progress("follower restarted", PROGRESS, PROGRESS_TIMEOUT)
        .await;
    let history = finish(&cluster, load, watch, 1, "SIGKILL follower").await;
    assert_eq!(
        history.epochs(0),
        vec![(before.leader_epoch, leader)],
        "leadership changed"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
pub(crate) async fn sigstop_leader_is_replaced_and_rejoins_as_follower_after_sigcont() {
    let mut cluster = cluster_with_topic(PARTITIONS).await;
    let watch = LeaderWatch::start(&cluster, TOPIC);
    let before = by_partition(&wait_full_isr(&cluster, 1, TOPIC, HEAL_TIMEOUT).await);
    let victim = busier_leader(&before);
    let (epoch, _) = registration(&cluster, victim).await.unwrap();
    let load = Load::start(&cluster, TOPIC, PARTITIONS);
    load.wait_progress("warm-up", PROGRESS, PROGRESS_TIMEOUT)
        .await;

    // Frozen past the session timeout: fenced, its leaderships move; it cannot know.
    cluster.pause(victim);
    wait_failover(&cluster, TOPIC, &before, victim, Instant::now()).await;
    load.wait_progress("leader paused", PROGRESS, PROGRESS_TIMEOUT)
        .await;

    // It wakes up believing it still leads in the old epochs: it must step down,
    // be unfenced (same incarnation, same broker epoch) and rejoin every ISR.
    cluster.resume(victim);
    syncline_e2e::wait_for("the paused broker to be unfenced", HEAL_TIMEOUT, || async {
        registration(&cluster, victim).await.ok() == Some((epoch, false))
    })
    .await;
    wait_full_isr(&cluster, 1, TOPIC, HEAL_TIMEOUT).await;
    assert_eq!(
        led_by(&cluster, victim, TOPIC).await.unwrap(),
        Vec::<i32>::new()
    );
    load.wait_progress("leader resumed", PROGRESS, PROGRESS_TIMEOUT)
        .await;
    finish(&cluster, load, watch, PARTITIONS, "SIGSTOP/SIGCONT leader").await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
pub(crate) async fn clean_restart_moves_leadership_before_stopping() {
    let mut cluster = cluster_with_topic(PARTITIONS).await;
    let watch = LeaderWatch::start(&cluster, TOPIC);
    let before = by_partition(&wait_full_isr(&cluster, 1, TOPIC, HEAL_TIMEOUT).await);
    let victim = busier_leader(&before);
    let load = Load::start(&cluster, TOPIC, PARTITIONS);
    load.wait_progress("warm-up", PROGRESS, PROGRESS_TIMEOUT)
        .await;

    let controller_log = log_len(&cluster, 1);
    let stopping = Instant::now();
    clean_stop(&mut cluster, victim).await;
    // The controller moved the leaderships because the broker asked, not because
    // its session expired.
    let log = log_since(&cluster, 1, controller_log);
    let id = format!("broker_id={victim}");
    assert!(
        log.lines()
            .any(|l| l.contains("controlled shutdown: moving leaderships away") && l.contains(&id)),
        "no controlled shutdown of broker {victim} in the controller's log:\n{log}"
    );
    assert!(
        log.lines()
            .any(|l| l.contains("fencing broker at its request") && l.contains(&id)),
        "broker {victim} was not fenced at its request:\n{log}"
    );
    assert!(
        !log.lines()
            .any(|l| l.contains("broker session expired") && l.contains(&id)),
        "broker {victim} was fenced by its session expiring:\n{log}"
    );
    wait_failover(&cluster, TOPIC, &before, victim, stopping).await;
    load.wait_progress("broker stopped", PROGRESS, PROGRESS_TIMEOUT)
        .await;

    cluster.restart(victim);
    wait_full_isr(&cluster, 1, TOPIC, HEAL_TIMEOUT).await;
    assert_eq!(
        led_by(&cluster, victim, TOPIC).await.unwrap(),
        Vec::<i32>::new()
    );
    load.wait_progress("broker restarted", PROGRESS, PROGRESS_TIMEOUT)
        .await;
    finish(&cluster, load, watch, PARTITIONS, "clean restart").await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
pub(crate) async fn rolling_restart_under_acks_all_load_loses_nothing() {
    let mut cluster = cluster_with_topic(PARTITIONS).await;
    let watch = LeaderWatch::start(&cluster, TOPIC);
    wait_full_isr(&cluster, 1, TOPIC, HEAL_TIMEOUT).await;
    let load = Load::start(&cluster, TOPIC, PARTITIONS);
    load.wait_progress("warm-up", PROGRESS, PROGRESS_TIMEOUT)
        .await;
    // The controller's broker last, as operators do.
    for id in [2, 3, 1] {
        clean_stop(&mut cluster, id).await;
        // Its leaderships moved and it left every ISR before it stopped: acks=all
        // goes on with the other two (even while the controller is away).
        load.wait_progress(&format!("broker {id} stopped"), PROGRESS, PROGRESS_TIMEOUT)
            .await;
        cluster.restart(id);
        wait_full_isr(&cluster, 1, TOPIC, HEAL_TIMEOUT).await;
        load.wait_progress(
            &format!("broker {id} restarted"),
            PROGRESS,
            PROGRESS_TIMEOUT,
        )
        .await;
    }
    finish(&cluster, load, watch, PARTITIONS, "rolling restart").await;
}
