//! The controller quorum with real processes: three brokers that are also the
//! controller voters. The loss of any one node, the active controller's included,
//! stops nothing: a new active controller is elected, the dead node's leaderships
//! move within the session timeout, `acks=all` carries on and nothing acknowledged
//! is lost. A paused controller comes back deposed and its stale decisions are
//! refused. Without a majority of voters, metadata changes fail with an error that
//! names the lost quorum, and the cluster heals once the voters return. A full
//! restart brings everything back from the voters' logs and snapshots.

use std::collections::BTreeMap;
use std::time::Duration;

use syncline_e2e::checks::*;
use syncline_e2e::client::{produce, read_all};
use syncline_e2e::faults::Faults;
use syncline_e2e::inprocess::{self, Options, TestCluster};
use syncline_e2e::{wait_for, Cluster};
use syncline_proto::pb::{self, request::Body, response::Body as Resp};
use syncline_proto::ErrorCode;
use tokio::time::Instant;

const TOPIC: &str = "quorum";
const PARTITIONS: i32 = 3;
const MIN_ISR: i32 = 2;

/// Three voters, RF 3 with min ISR 2, every replica in sync.
async fn quorum_with_topic(extra: &str) -> (Cluster, BTreeMap<i32, pb::PartitionMetadata>) {
    let cluster = Cluster::start_quorum(3, 3, &format!("{FAST_TIMERS}{extra}")).await;
    create_topic(&cluster, TOPIC, PARTITIONS, 3, MIN_ISR);
    let before = by_partition(&wait_full_isr(&cluster, 1, TOPIC, WAIT).await);
    (cluster, before)
}

/// The quorum as broker `via` reports it (it asks the active controller).
async fn describe_quorum(
    cluster: &Cluster,
    via: i32,
) -> anyhow::Result<pb::DescribeQuorumResponse> {
    match cluster
        .request(
            via,
            Body::DescribeQuorum(pb::DescribeQuorumRequest { forwarded: false }),
        )
        .await?
    {
        Resp::DescribeQuorum(r) if r.error_code == 0 => Ok(r),
        other => anyhow::bail!("DescribeQuorum answered {other:?}"),
    }
}

/// Waits until the quorum's leader sees every voter caught up (lag 0, heard from
/// within a second).
async fn wait_voters_caught_up(cluster: &Cluster, via: i32) {
    wait_for(
        "every voter caught up with the quorum leader",
        WAIT,
        || async {
            describe_quorum(cluster, via).await.is_ok_and(|q| {
                q.voters.len() == 3
                    && q.voters
                        .iter()
                        .all(|v| v.lag == 0 && (0..1_000).contains(&v.last_contact_ms))
            })
        },
    )
    .await;
}

fn other_than(victim: i32) -> i32 {
    if victim == 1 {
        2
    } else {
        1
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn killing_the_active_controller_moves_control_and_its_leaderships_without_loss() {
    let (mut cluster, before) = quorum_with_topic("").await;
    let watch = LeaderWatch::start(&cluster, TOPIC);
    let load = Load::start(&cluster, TOPIC, PARTITIONS);
    load.wait_progress("warm-up", 5, WAIT).await;
    let victim = cluster.wait_active_controller(&[], WAIT).await;
    let elections_before = cluster
        .metric(other_than(victim), "syncline_controller_elections_total")
        .unwrap();

    let since = Instant::now();
    cluster.kill(victim);
    // A new active controller, and new leaders from the ISR for what the victim led,
    // within broker_session_timeout_ms + 5 s.
    wait_failover(&cluster, TOPIC, &before, victim, since).await;
    let successor = cluster
        .wait_active_controller(&[victim], FAILOVER_DEADLINE.saturating_sub(since.elapsed()))
        .await;
    println!(
        "broker {successor} took over from controller {victim} within {:?}",
        since.elapsed()
    );
    wait_for("the survivor counting the election", WAIT, || async {
        cluster
            .metric(other_than(victim), "syncline_controller_elections_total")
            .is_ok_and(|n| n > elections_before)
    })
    .await;
    // acks=all goes on, on every partition, with the controller's node gone.
    load.wait_progress("with the controller's node dead", 10, WAIT)
        .await;

    // It rejoins as a voter and its replicas rejoin every ISR.
    cluster.restart(victim);
    wait_full_isr(&cluster, successor, TOPIC, WAIT).await;
    wait_voters_caught_up(&cluster, successor).await;
    load.wait_progress("after the rejoin", 5, WAIT).await;

    finish_and_verify(&cluster, TOPIC, PARTITIONS, MIN_ISR as usize, load, watch).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_paused_controller_is_deposed_and_its_stale_epoch_is_refused() {
    let (mut cluster, before) = quorum_with_topic("").await;
    let watch = LeaderWatch::start(&cluster, TOPIC);
    let load = Load::start(&cluster, TOPIC, PARTITIONS);
    load.wait_progress("warm-up", 5, WAIT).await;
    let zombie = cluster.wait_active_controller(&[], WAIT).await;
    let old_epoch = describe_quorum(&cluster, zombie)
        .await
        .unwrap()
        .controller_epoch;

    let since = Instant::now();
    cluster.pause(zombie);
    wait_failover(&cluster, TOPIC, &before, zombie, since).await;
    let successor = cluster.wait_active_controller(&[zombie], WAIT).await;
    let new_epoch = describe_quorum(&cluster, successor)
        .await
        .unwrap()
        .controller_epoch;
    assert!(
        new_epoch > old_epoch,
        "controller epoch {new_epoch} after {old_epoch}"
    );
    load.wait_progress("with the controller paused", 10, WAIT)
        .await;

    // Back from its pause it still believes it leads, until the quorum tells it
    // otherwise: it resigns, and nothing it decided in its old epoch is applied.
    cluster.resume(zombie);
    wait_for("the zombie to resign", WAIT, || async {
        cluster.active_controller() == Some(successor)
            && describe_quorum(&cluster, zombie)
                .await
                .is_ok_and(|q| q.leader_id == successor)
    })
    .await;
    // Every broker follows the new epoch (an announcement of the old one would be
    // refused: brokers keep the highest controller epoch they have seen).
    for id in 1..=3 {
        wait_for(
            &format!("broker {id} to follow controller {successor}"),
            WAIT,
            || async {
                cluster
                    .describe_cluster(id)
                    .await
                    .is_ok_and(|d| d.controller_id == successor)
            },
        )
        .await;
    }
    wait_full_isr(&cluster, successor, TOPIC, WAIT).await;
    // Nothing acknowledged lost (I1, I2, I4), and I7/I8 as every broker saw it:
    // one leader per partition and epoch, in its ISR, no unclean election.
    finish_and_verify(&cluster, TOPIC, PARTITIONS, MIN_ISR as usize, load, watch).await;
    // What the zombie could still send is refused: an announcement of its old
    // epoch, on a connection authenticated as the zombie, changes nothing on any
    // broker.
    for id in 1..=3 {
        let stale = Body::LeaderAndIsr(pb::LeaderAndIsrRequest {
            controller_id: zombie,
            controller_epoch: old_epoch,
            broker_epoch: registration(&cluster, id).await.unwrap().0,
            full: true,
            ..Default::default()
        });
        match cluster.request_as(id, zombie, stale).await.unwrap() {
            Resp::LeaderAndIsr(r) => assert_eq!(
                ErrorCode::from_wire(r.error_code),
                ErrorCode::StaleControllerEpoch,
                "broker {id} took an announcement of the deposed epoch {old_epoch}"
            ),
            other => panic!("broker {id} answered {other:?}"),
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn without_a_majority_of_voters_metadata_changes_fail_clearly_and_the_cluster_heals() {
    let mut cluster = Cluster::start_quorum(3, 3, FAST_TIMERS).await;
    // One single-replica partition per broker: the survivor's keeps serving.
    create_topic(&cluster, "solo", 3, 1, 1);
    let solo = by_partition(&wait_full_isr(&cluster, 1, "solo", WAIT).await);
    let survivor = 1;
    let p = solo
        .values()
        .find(|p| p.leader_id == survivor)
        .expect("broker 1 leads a partition of solo")
        .partition;

    cluster.kill(2);
    cluster.kill(3);
    // A metadata change fails within its timeout, naming the lost quorum.
    let started = Instant::now();
    let out = cluster.cli_via(
        survivor,
        &[
            "topic",
            "create",
            "fresh",
            "--partitions",
            "1",
            "--replication-factor",
            "1",
        ],
        None,
    );
    let took = started.elapsed();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        !out.status.success(),
        "topic create succeeded without a quorum"
    );
    assert!(
        stderr.contains("quorum") && stderr.contains("majority"),
        "the error does not name the lost quorum: {stderr}"
    );
    // The broker's controller request bound is 10 s (README, "Failure model");
    // 5 s more for process start and a loaded machine.
    assert!(took < Duration::from_secs(15), "topic create took {took:?}");
    println!(
        "without a quorum, topic create failed in {took:?}: {}",
        stderr.trim()
    );

    // A partition with a leader and enough ISR keeps serving.
    let conn = cluster.connect(survivor).await.unwrap();
    let r = produce(&conn, "solo", p, -1, &[b"no quorum needed".to_vec()])
        .await
        .unwrap();
    assert_eq!(r.error_code, 0, "{r:?}");

    // The voters return: the cluster heals on its own.
    cluster.restart(2);
    cluster.restart(3);
    cluster.wait_active_controller(&[], WAIT).await;
    wait_for("topic create to work again", WAIT, || async {
        cluster
            .cli(
                &[
                    "topic",
                    "create",
                    "fresh",
                    "--partitions",
                    "1",
                    "--replication-factor",
                    "3",
                ],
                None,
            )
            .status
            .success()
    })
    .await;
    wait_full_isr(&cluster, 1, "fresh", WAIT).await;
    let values: Vec<Vec<u8>> = read_all(&conn, "solo", p, 0)
        .await
        .unwrap()
        .into_iter()
        .map(|(_, v)| v)
        .collect();
    assert_eq!(values, vec![b"no quorum needed".to_vec()]);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_full_cluster_restart_comes_back_from_the_logs_and_snapshots() {
    // Snapshots every few records, so the restart reads a snapshot and a log tail.
    let (mut cluster, _) = quorum_with_topic("metadata_snapshot_max_new_records = 5\n").await;
    let mut acked = BTreeMap::new();
    for p in 0..PARTITIONS {
        let meta = cluster.partition(1, TOPIC, p).await.unwrap();
        let conn = cluster.connect(meta.leader_id).await.unwrap();
        let values: Vec<Vec<u8>> = (0..5).map(|i| format!("{p}-{i}").into_bytes()).collect();
        let r = produce(&conn, TOPIC, p, -1, &values).await.unwrap();
        assert_eq!(r.error_code, 0, "{r:?}");
        acked.insert(p, values);
    }
    let before = by_partition(&wait_full_isr(&cluster, 1, TOPIC, WAIT).await);
    let active = cluster.wait_active_controller(&[], WAIT).await;
    let quorum_before = describe_quorum(&cluster, active).await.unwrap();
    let mut epochs_before = BTreeMap::new();
    for id in 1..=3 {
        epochs_before.insert(id, registration(&cluster, id).await.unwrap().0);
    }
    // Snapshots are built in the background.
    wait_for("a metadata snapshot written", WAIT, || async {
        std::fs::read_dir(cluster.data_dir(active).join("__cluster_metadata"))
            .unwrap()
            .filter_map(|e| e.ok())
            .any(|e| e.file_name().to_string_lossy().contains("snapshot"))
    })
    .await;

    for id in 1..=3 {
        cluster.kill(id);
    }
    for id in 1..=3 {
        cluster.restart(id);
    }
    cluster.wait_registered(3, WAIT).await;
    let after = by_partition(&wait_full_isr(&cluster, 1, TOPIC, WAIT).await);
    for (p, old) in &before {
        let new = &after[p];
        assert_eq!(new.replicas, old.replicas, "partition {p}");
        assert!(
            new.leader_epoch >= old.leader_epoch,
            "partition {p}: {old:?} -> {new:?}"
        );
        let conn = cluster.connect(new.leader_id).await.unwrap();
        let values: Vec<Vec<u8>> = read_all(&conn, TOPIC, *p, 0)
            .await
            .unwrap()
            .into_iter()
            .map(|(_, v)| v)
            .collect();
        assert_eq!(values, acked[p], "partition {p}");
    }
    // Fencing state: every broker is a new incarnation with a higher epoch.
    for id in 1..=3 {
        let (epoch, fenced) = registration(&cluster, id).await.unwrap();
        assert!(
            !fenced && epoch > epochs_before[&id],
            "broker {id}: epoch {epoch}"
        );
    }
    let active = cluster.wait_active_controller(&[], WAIT).await;
    let quorum_after = describe_quorum(&cluster, active).await.unwrap();
    assert!(quorum_after.controller_epoch > quorum_before.controller_epoch);
    assert!(quorum_after.high_watermark > quorum_before.high_watermark);
}

/// On a cluster inside the test process (`TestCluster`): part of the quick
/// tier (`scripts/test.sh --quick`).
mod in_process {
    use super::*;

    /// The ISR a leader was told is committed survives a change of controller: the
    /// next controller elects from it and nothing else, even a replica that is alive
    /// and registered but was removed from the ISR before the change. (A new
    /// controller that decided on its log before applying what earlier controllers
    /// committed would pick the removed replica here.)
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn an_isr_shrink_committed_before_a_controller_change_binds_the_next_controller() {
        // Brokers 1-3 are the voters; 4 and 5 only store replicas, so stopping the
        // partition's leader never costs the quorum its majority.
        let faults = Faults::new();
        let mut cluster = TestCluster::start_with(
            5,
            "replica_lag_time_max_ms = 1000\nbroker_session_timeout_ms = 3000\nbroker_heartbeat_interval_ms = 300\n",
            Options {
                faults: Some(faults.clone()),
                voters: 3,
                ..Options::default()
            },
        )
        .await;
        cluster
            .create_topic(TOPIC, 5, 3, &[("min.insync.replicas", "1")])
            .await;
        // A partition led by one of 4 and 5 and followed by the other.
        let mut target = None;
        for p in 0..5 {
            let m = cluster.partition_metadata(1, TOPIC, p).await;
            if [4, 5].contains(&m.leader_id) && m.replicas.contains(&(9 - m.leader_id)) {
                target = Some(m);
                break;
            }
        }
        let target = target.expect("a partition on both 4 and 5, led by one of them");
        let (leader, lagging) = (target.leader_id, 9 - target.leader_id);
        let third = *target
            .replicas
            .iter()
            .find(|r| ![leader, lagging].contains(r))
            .unwrap();

        // The follower can no longer fetch, but still heartbeats; a record it cannot
        // fetch puts it behind, and the leader removes it from the ISR (the active
        // controller commits that).
        assert_eq!(
            cluster.leader_in_role(TOPIC, target.partition).await,
            leader
        );
        faults.cut(leader, lagging);
        let conn = cluster.connect(leader).await;
        let r =
            inprocess::produce(&conn, TOPIC, target.partition, 1, inprocess::batch(&[b"x"])).await;
        assert_eq!(r.error_code, 0, "{r:?}");
        wait_for(
            "the lagging follower out of the committed ISR",
            WAIT,
            || async {
                let m = cluster
                    .partition_metadata(leader, TOPIC, target.partition)
                    .await;
                sorted(&m.isr) == sorted(&[leader, third])
            },
        )
        .await;

        // The active controller goes; another voter takes office.
        let is_active = |cluster: &TestCluster, id: i32| {
            cluster.brokers[id as usize - 1].is_some()
                && cluster.metric(id, "syncline_active_controller") == 1.0
        };
        let controller = (1..=3)
            .find(|id| is_active(&cluster, *id))
            .expect("an active controller");
        cluster.stop(controller).await;
        wait_for("a new active controller", WAIT, || async {
            (1..=3).any(|id| is_active(&cluster, id))
        })
        .await;
        // The leader stops: its controlled shutdown asks the new controller for a
        // leader from the ISR.
        cluster.stop(leader).await;
        let via = third;
        wait_for("a new leader for the partition", WAIT, || async {
            let m = cluster
                .partition_metadata(via, TOPIC, target.partition)
                .await;
            m.leader_id > 0 && m.leader_id != leader
        })
        .await;
        let m = cluster
            .partition_metadata(via, TOPIC, target.partition)
            .await;
        assert_eq!(
            m.leader_id, third,
            "partition {}: the new leader is not the one ISR member left ({third}): {m:?}",
            target.partition
        );
    }
}
