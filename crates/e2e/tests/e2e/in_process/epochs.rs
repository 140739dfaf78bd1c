//! Leader epochs: the classic scenarios where truncating to the high watermark
//! loses committed records or lets replicas diverge (KIP-101, KIP-279, unclean
//! election), each run twice: with the legacy rule, where the test asserts the
//! damage happens (a checker that can never fail proves nothing), and with
//! leader-epoch truncation, where it asserts there is none. Plus KIP-320 fencing of
//! a zombie leader, and an idempotent producer's state truncated with the log (a
//! retry of a batch the truncation removed is written again; with the state left
//! as it was, the same test sees the retry answered as a duplicate at an offset
//! holding another record).
//!
//! In-process clusters with a fault-injecting network, so every step is an observed
//! state rather than a race. Broker 1 hosts the controller; the partitions under
//! test have their replicas on brokers 2..=4 so that stopping replicas never stops
//! the controller.

use std::path::Path;
use std::sync::Arc;
use std::time::Duration;

use syncline_broker::config::TruncationRule;
use syncline_client::Connection;
use syncline_e2e::client::{produce, read_all};
use syncline_e2e::faults::Faults;
use syncline_e2e::inprocess::{Options, TestCluster};
use syncline_e2e::wait_for;
use syncline_proto::pb::{self, request::Body, response::Body as Resp};
use syncline_proto::ErrorCode;

use syncline_e2e::checks::WAIT;

/// A partition of `topic` (created with `partitions`, RF `rf`) whose replicas
/// exclude broker 1; returns (partition, replicas in assignment order).
async fn partition_without_controller(
    cluster: &TestCluster,
    topic: &str,
    partitions: i32,
) -> (i32, Vec<i32>) {
    for p in 0..partitions {
        let m = cluster.partition_metadata(1, topic, p).await;
        if !m.replicas.contains(&1) {
            return (p, m.replicas);
        }
    }
    panic!("every partition of {topic} has a replica on broker 1");
}

async fn leader(cluster: &TestCluster, topic: &str, p: i32) -> (i32, i32) {
    let m = cluster.partition_metadata(1, topic, p).await;
    (m.leader_id, m.leader_epoch)
}

async fn wait_leader(cluster: &TestCluster, topic: &str, p: i32, want: i32) -> i32 {
    wait_for(
        &format!("broker {want} to lead {topic}-{p}"),
        WAIT,
        || async {
            leader(cluster, topic, p).await.0 == want
                && cluster
                    .try_replica(want, topic, p)
                    .is_some_and(|r| r.is_leader())
        },
    )
    .await;
    cluster.replica(want, topic, p).leader_epoch()
}

async fn send(
    conn: &Connection,
    topic: &str,
    p: i32,
    acks: i32,
    value: &str,
) -> pb::ProducePartitionResponse {
    produce(conn, topic, p, acks, &[value.as_bytes().to_vec()])
        .await
        .unwrap()
}

fn values(records: &[(i64, Vec<u8>)]) -> Vec<String> {
    records
        .iter()
        .map(|(_, v)| String::from_utf8_lossy(v).into_owned())
        .collect()
}

/// Simulates a power loss on a stopped broker: the partition's log keeps only the
/// batches that end below `keep_below`, and the clean-shutdown marker is gone, so the
/// next start recovers as after a crash.
fn lose_unflushed_tail(log_dir: &Path, topic: &str, p: i32, keep_below: i64) {
    let dir = log_dir.join(format!("{topic}-{p}"));
    let mut segments: Vec<_> = std::fs::read_dir(&dir)
        .unwrap()
        .filter_map(|e| e.ok().map(|e| e.path()))
        .filter(|p| p.extension().is_some_and(|x| x == "log"))
        .collect();
    segments.sort();
    let last = segments.last().expect("a segment");
    let bytes = std::fs::read(last).unwrap();
    let mut keep = 0;
    for b in syncline_proto::batch::split(&bytes) {
        let (h, batch) = b.unwrap();
        if h.last_offset() >= keep_below {
            break;
        }
        keep += batch.len();
    }
    let f = std::fs::OpenOptions::new().write(true).open(last).unwrap();
    f.set_len(keep as u64).unwrap();
    // A crash leaves no clean-shutdown marker, and the last recovery point it
    // persisted covered only flushed data: recover the whole log.
    let _ = std::fs::remove_file(dir.join("clean-shutdown"));
    let _ = std::fs::remove_file(dir.join("recovery-point"));
}

/// The raw bytes of a replica's log up to `below` (batches that end below it).
fn log_bytes(cluster: &TestCluster, id: i32, topic: &str, p: i32, below: i64) -> Vec<u8> {
    let dir = cluster.log_dir(id).join(format!("{topic}-{p}"));
    let mut segments: Vec<_> = std::fs::read_dir(&dir)
        .unwrap()
        .filter_map(|e| e.ok().map(|e| e.path()))
        .filter(|p| p.extension().is_some_and(|x| x == "log"))
        .collect();
    segments.sort();
    let mut out = Vec::new();
    for s in segments {
        let bytes = std::fs::read(&s).unwrap();
        for b in syncline_proto::batch::split(&bytes) {
            let Ok((h, batch)) = b else { break };
            if h.last_offset() < below {
                out.extend_from_slice(batch);
            }
        }
    }
    out
}

/// Failed requests of broker `id`'s replica fetcher to `leader` so far.
fn fetcher_failures(cluster: &TestCluster, id: i32, leader: i32) -> f64 {
    cluster.metric(
        id,
        &format!("syncline_replica_fetcher_failed_requests_total{{leader=\"{leader}\"}}"),
    )
}

// --- KIP-101 #1 ---

/// A follower whose high watermark is one round stale becomes follower of a new
/// leader, then the new leader goes away at once. Returns whether the last
/// acknowledged (acks=all) record survived.
async fn stale_hw_follower_then_leader_dies(rule: TruncationRule) -> bool {
    let faults = Faults::new();
    let mut cluster = TestCluster::start_with(
        4,
        // A follower that cannot fetch stays in the ISR for the whole test.
        "replica_lag_time_max_ms = 60000\n",
        Options {
            faults: Some(faults.clone()),
            truncation_rule: rule,
            ..Options::default()
        },
    )
    .await;
    cluster.create_topic("k1", 4, 3, &[]).await;
    let (p, replicas) = partition_without_controller(&cluster, "k1", 4).await;
    let (c, a, b) = (replicas[0], replicas[1], replicas[2]);
    wait_leader(&cluster, "k1", p, c).await;
    let producer = cluster.connect(c).await;
    for i in 0..5 {
        let r = send(&producer, "k1", p, -1, &format!("m{i}")).await;
        assert_eq!(r.error_code, 0, "{r:?}");
    }
    // The last record is acknowledged by all three, b included, but b never learns
    // the high watermark that covers it. a is cut off from the leader first, so the
    // record cannot be committed while b is still listening: b fetches it and tells
    // c so with its next fetch, and the high watermark stays below it.
    let leader = cluster.replica(c, "k1", p);
    let last = leader.log_end_offset();
    faults.cut(a, c);
    let pending = {
        let producer = producer.clone();
        tokio::spawn(async move { send(&producer, "k1", p, -1, "committed").await })
    };
    wait_for("the leader to know b has the record", WAIT, || async {
        leader
            .describe(tokio::time::Instant::now())
            .is_some_and(|d| {
                d.replica_statuses
                    .iter()
                    .any(|s| s.broker_id == b && s.log_end_offset > last)
            })
    })
    .await;
    // Now b hears nothing more; a catches up and the record is committed. The
    // fetch response that would carry the new high watermark to b is dropped.
    let failed_before = fetcher_failures(&cluster, b, c);
    faults.cut(b, c);
    faults.cut(b, a);
    faults.heal(a, c);
    let r = pending.await.unwrap();
    assert_eq!((r.error_code, r.base_offset), (0, last), "{r:?}");
    wait_for("b's fetcher to fail to fetch from c", WAIT, || async {
        fetcher_failures(&cluster, b, c) > failed_before
    })
    .await;
    let replica = cluster.replica(b, "k1", p);
    assert!(replica.log_end_offset() > last);
    assert!(replica.high_watermark() <= last);
    // The leader leaves (controlled shutdown): a, first in the ISR, takes over; b
    // becomes its follower in a new epoch but cannot reach it.
    cluster.stop(c).await;
    let epoch_a = wait_leader(&cluster, "k1", p, a).await;
    wait_for("b to follow a in the new epoch", WAIT, || async {
        cluster
            .try_replica(b, "k1", p)
            .is_some_and(|r| r.leader_epoch() == epoch_a)
    })
    .await;
    // ... and a goes away at once: b, the remaining ISR member, leads.
    cluster.stop(a).await;
    wait_leader(&cluster, "k1", p, b).await;
    let reader = cluster.connect(b).await;
    let records = read_all(&reader, "k1", p, 0).await.unwrap();
    records.iter().any(|(o, v)| *o == last && v == b"committed")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn kip101_stale_high_watermark_loses_a_committed_record_with_the_legacy_rule() {
    assert!(
        !stale_hw_follower_then_leader_dies(TruncationRule::HighWatermark).await,
        "the legacy rule should have truncated the committed record away"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn kip101_stale_high_watermark_keeps_the_committed_record_with_epochs() {
    assert!(stale_hw_follower_then_leader_dies(TruncationRule::LeaderEpoch).await);
}

// --- KIP-101 #2 ---

/// Two replicas lose different unflushed tails; the shorter returns first, leads and
/// takes writes; then the other returns. Returns whether their logs are identical.
async fn different_tails_then_shorter_leads(rule: TruncationRule) -> bool {
    let mut cluster = TestCluster::start_with(
        4,
        "",
        Options {
            faults: None,
            truncation_rule: rule,
            ..Options::default()
        },
    )
    .await;
    cluster.create_topic("k2", 6, 2, &[]).await;
    let (p, replicas) = partition_without_controller(&cluster, "k2", 6).await;
    let (a, b) = (replicas[0], replicas[1]);
    wait_leader(&cluster, "k2", p, a).await;
    let producer = cluster.connect(a).await;
    for i in 0..10 {
        let r = send(&producer, "k2", p, -1, &format!("m{i}")).await;
        assert_eq!(r.error_code, 0, "{r:?}");
    }
    wait_for("b to have everything", WAIT, || async {
        cluster
            .try_replica(b, "k2", p)
            .is_some_and(|r| r.log_end_offset() == 10 && r.high_watermark() == 10)
    })
    .await;
    // b stops first (ISR {a}), then a: a stays the last ISR member.
    cluster.stop(b).await;
    cluster.stop(a).await;
    // Power loss: a lost m8 and m9, b lost m9.
    lose_unflushed_tail(&cluster.log_dir(a), "k2", p, 8);
    lose_unflushed_tail(&cluster.log_dir(b), "k2", p, 9);
    // a returns first, leads (new epoch, from offset 8) and takes writes.
    cluster.start_stopped(a).await;
    wait_leader(&cluster, "k2", p, a).await;
    let producer = cluster.connect(a).await;
    for v in ["n8", "n9"] {
        let r = send(&producer, "k2", p, 1, v).await;
        assert_eq!(r.error_code, 0, "{r:?}");
    }
    // Then b returns and follows a.
    cluster.start_stopped(b).await;
    wait_for("b to reach a's log end", WAIT, || async {
        cluster.brokers[b as usize - 1].is_some()
            && cluster
                .try_replica(b, "k2", p)
                .is_some_and(|r| r.log_end_offset() >= 10)
    })
    .await;
    let leader = cluster.connect(a).await;
    let on_a = values(&read_all(&leader, "k2", p, 0).await.unwrap());
    assert_eq!(on_a[8..], ["n8", "n9"]);
    log_bytes(&cluster, a, "k2", p, 10) == log_bytes(&cluster, b, "k2", p, 10)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn kip101_different_lost_tails_diverge_with_the_legacy_rule() {
    assert!(
        !different_tails_then_shorter_leads(TruncationRule::HighWatermark).await,
        "the legacy rule should have left the two logs different at offset 8"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn kip101_different_lost_tails_converge_with_epochs() {
    assert!(different_tails_then_shorter_leads(TruncationRule::LeaderEpoch).await);
}

// --- unclean leader election ---

/// Unclean election on, min.insync.replicas=1, acks=1, replicas stopped and started
/// alternately so that each comes back as the only one alive. Returns (whether the
/// logs converged, acknowledged records lost).
async fn unclean_alternating_restarts(rule: TruncationRule) -> (bool, usize) {
    let mut cluster = TestCluster::start_with(
        4,
        "",
        Options {
            faults: None,
            truncation_rule: rule,
            ..Options::default()
        },
    )
    .await;
    cluster
        .create_topic(
            "uc",
            6,
            2,
            &[
                ("unclean.leader.election.enable", "true"),
                ("min.insync.replicas", "1"),
            ],
        )
        .await;
    let (p, replicas) = partition_without_controller(&cluster, "uc", 6).await;
    let (mut up, mut down) = (replicas[0], replicas[1]);
    let mut acked = Vec::new();
    let mut n = 0;
    for round in 0..3 {
        wait_leader(&cluster, "uc", p, up).await;
        // The other replica is away: writes land on one copy only.
        cluster.stop(down).await;
        let producer = cluster.connect(up).await;
        for _ in 0..3 {
            n += 1;
            let v = format!("r{round}-{n}");
            let r = send(&producer, "uc", p, 1, &v).await;
            assert_eq!(r.error_code, 0, "{r:?}");
            acked.push(v);
        }
        // Now the writer goes away too, and the other comes back alone: an unclean
        // election makes it leader without those writes.
        cluster.stop(up).await;
        cluster.start_stopped(down).await;
        wait_leader(&cluster, "uc", p, down).await;
        let producer = cluster.connect(down).await;
        for _ in 0..3 {
            n += 1;
            let v = format!("r{round}-{n}");
            let r = send(&producer, "uc", p, 1, &v).await;
            assert_eq!(r.error_code, 0, "{r:?}");
            acked.push(v);
        }
        cluster.start_stopped(up).await;
        std::mem::swap(&mut up, &mut down);
    }
    let leader = up;
    wait_leader(&cluster, "uc", p, leader).await;
    let leo = cluster.replica(leader, "uc", p).log_end_offset();
    // Back in the ISR: it has truncated (or not) and caught up with the leader.
    wait_for("the follower to rejoin the ISR", WAIT, || async {
        cluster
            .partition_metadata(1, "uc", p)
            .await
            .isr
            .contains(&down)
            && cluster
                .try_replica(down, "uc", p)
                .is_some_and(|r| r.log_end_offset() == leo)
    })
    .await;
    let reader = cluster.connect(leader).await;
    let present = values(&read_all(&reader, "uc", p, 0).await.unwrap());
    let lost = acked.iter().filter(|v| !present.contains(v)).count();
    println!(
        "unclean election ({rule:?}): {lost} of {} acknowledged acks=1 records lost",
        acked.len()
    );
    (
        log_bytes(&cluster, up, "uc", p, leo) == log_bytes(&cluster, down, "uc", p, leo),
        lost,
    )
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn unclean_elections_leave_diverged_logs_with_the_legacy_rule() {
    let (converged, _) = unclean_alternating_restarts(TruncationRule::HighWatermark).await;
    assert!(
        !converged,
        "the legacy rule should have left the replicas diverged"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn unclean_elections_lose_records_but_logs_converge_with_epochs() {
    let (converged, lost) = unclean_alternating_restarts(TruncationRule::LeaderEpoch).await;
    assert!(converged, "replica logs differ after the unclean elections");
    // The documented price of unclean election: what only the other replica had is gone.
    assert!(
        lost > 0,
        "expected the unclean elections to lose acks=1 records"
    );
}

// --- KIP-279 ---

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn kip279_bouncing_follower_then_leader_under_load_loses_nothing() {
    let mut cluster = TestCluster::start(4, "replica_lag_time_max_ms = 3000\n").await;
    cluster
        .create_topic("k279", 4, 3, &[("min.insync.replicas", "2")])
        .await;
    let (p, replicas) = partition_without_controller(&cluster, "k279", 4).await;
    let stop = Arc::new(std::sync::atomic::AtomicBool::new(false));
    let progress = Arc::new(std::sync::atomic::AtomicUsize::new(0));
    let addrs = cluster.addrs.clone();
    // acks=all load, following the leader; every acknowledged value is recorded.
    let load = tokio::spawn({
        let stop = stop.clone();
        let progress = progress.clone();
        let probe = cluster.connect(1).await;
        async move {
            let mut acked = Vec::new();
            let mut n = 0u64;
            let mut conn: Option<(i32, Connection)> = None;
            while !stop.load(std::sync::atomic::Ordering::Relaxed) {
                let Ok(Resp::Metadata(m)) = probe
                    .send(Body::Metadata(pb::MetadataRequest {
                        topics: vec!["k279".into()],
                        ..Default::default()
                    }))
                    .await
                else {
                    continue;
                };
                let leader = m.topics[0]
                    .partitions
                    .iter()
                    .find(|x| x.partition == p)
                    .map_or(-1, |x| x.leader_id);
                if leader < 0 {
                    tokio::time::sleep(Duration::from_millis(20)).await;
                    continue;
                }
                if conn
                    .as_ref()
                    .is_none_or(|(id, c)| *id != leader || c.is_closed())
                {
                    match Connection::connect(
                        &addrs[leader as usize - 1],
                        "load",
                        Duration::from_secs(2),
                    )
                    .await
                    {
                        Ok(c) => conn = Some((leader, c)),
                        Err(_) => {
                            tokio::time::sleep(Duration::from_millis(20)).await;
                            continue;
                        }
                    }
                }
                let c = &conn.as_ref().unwrap().1;
                n += 1;
                let v = format!("v{n}");
                if let Ok(r) = produce(c, "k279", p, -1, &[v.clone().into_bytes()]).await {
                    if r.error_code == 0 {
                        acked.push(v);
                        progress.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
                    }
                }
            }
            acked
        }
    });
    for round in 0..5 {
        let (leader, _) = leader(&cluster, "k279", p).await;
        let follower = *replicas.iter().find(|r| **r != leader).unwrap();
        // Bounce a follower, then at once the leader: the follower comes back into
        // an epoch history it partly missed.
        cluster.restart(follower).await;
        cluster.restart(leader).await;
        wait_for(
            &format!("round {round}: a leader in the ISR"),
            WAIT,
            || async { leader_in_isr(&cluster, "k279", p).await },
        )
        .await;
    }
    // Let the ISR heal fully, then stop the load.
    wait_for(
        "all three replicas back in the ISR",
        Duration::from_secs(30),
        || async { cluster.partition_metadata(1, "k279", p).await.isr.len() == 3 },
    )
    .await;
    // The load goes on after the healing too, so the check covers writes made
    // across the whole history.
    let before = progress.load(std::sync::atomic::Ordering::Relaxed);
    wait_for(
        "the load to make progress after healing",
        Duration::from_secs(30),
        || async { progress.load(std::sync::atomic::Ordering::Relaxed) >= before + 20 },
    )
    .await;
    stop.store(true, std::sync::atomic::Ordering::Relaxed);
    let acked = load.await.unwrap();
    assert!(
        acked.len() > 10,
        "the load made too little progress: {}",
        acked.len()
    );
    let (leader, _) = leader(&cluster, "k279", p).await;
    let hw = cluster.replica(leader, "k279", p).high_watermark();
    wait_for("every replica at the same log end", WAIT, || async {
        replicas.iter().all(|r| {
            cluster
                .try_replica(*r, "k279", p)
                .is_some_and(|x| x.log_end_offset() == hw)
        })
    })
    .await;
    let reference = log_bytes(&cluster, leader, "k279", p, hw);
    for r in &replicas {
        assert_eq!(
            log_bytes(&cluster, *r, "k279", p, hw),
            reference,
            "replica {r} differs"
        );
    }
    let reader = cluster.connect(leader).await;
    let present = values(&read_all(&reader, "k279", p, 0).await.unwrap());
    for v in &acked {
        assert!(present.contains(v), "acknowledged {v} lost");
    }
}

async fn leader_in_isr(cluster: &TestCluster, topic: &str, p: i32) -> bool {
    let m = cluster.partition_metadata(1, topic, p).await;
    m.leader_id > 0
        && m.isr.contains(&m.leader_id)
        && cluster.brokers[m.leader_id as usize - 1].is_some()
}

// --- KIP-320: a zombie leader ---

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn zombie_leader_cannot_acknowledge_or_serve_the_new_epoch() {
    let faults = Faults::new();
    let cluster = TestCluster::start_with(
        4,
        "broker_session_timeout_ms = 2000\nbroker_heartbeat_interval_ms = 300\n",
        Options {
            faults: Some(faults.clone()),
            truncation_rule: TruncationRule::LeaderEpoch,
            ..Options::default()
        },
    )
    .await;
    cluster
        .create_topic("z", 4, 3, &[("min.insync.replicas", "2")])
        .await;
    let (p, replicas) = partition_without_controller(&cluster, "z", 4).await;
    let zombie = replicas[0];
    let old_epoch = wait_leader(&cluster, "z", p, zombie).await;
    let client = cluster.connect(zombie).await;
    assert_eq!(send(&client, "z", p, -1, "before").await.error_code, 0);
    // The leader is cut off from the controller and its followers (not from this
    // client): it is fenced and a new leader is elected, but it still believes.
    faults.isolate(zombie);
    wait_for("a new leader", WAIT, || async {
        let (l, e) = leader(&cluster, "z", p).await;
        l != zombie && l > 0 && e > old_epoch
    })
    .await;
    let (new_leader, new_epoch) = leader(&cluster, "z", p).await;
    assert!(
        cluster.replica(zombie, "z", p).is_leader(),
        "the zombie should still think it leads"
    );

    // A client with the new epoch is refused by the zombie, for produce and fetch.
    let with_epoch = |epoch: i32, value: &str| {
        Body::Produce(pb::ProduceRequest {
            acks: -1,
            timeout_ms: 1_500,
            topics: vec![pb::ProduceTopic {
                name: "z".into(),
                partitions: vec![pb::ProducePartition {
                    partition: p,
                    current_leader_epoch: Some(epoch),
                    records: syncline_e2e::client::batch(&[value.as_bytes().to_vec()]),
                }],
            }],
        })
    };
    let code = |resp: Resp| match resp {
        Resp::Produce(r) => ErrorCode::from_wire(r.topics[0].partitions[0].error_code),
        Resp::Fetch(r) => ErrorCode::from_wire(r.responses[0].partitions[0].error_code),
        other => panic!("unexpected {other:?}"),
    };
    assert_eq!(
        code(client.send(with_epoch(new_epoch, "new")).await.unwrap()),
        ErrorCode::UnknownLeaderEpoch
    );
    let fetch = |epoch: i32| {
        Body::Fetch(pb::FetchRequest {
            replica_id: -1,
            replica_epoch: -1,
            max_wait_ms: 0,
            max_bytes: 1 << 20,
            session_epoch: -1,
            topics: vec![pb::FetchTopic {
                topic: "z".into(),
                partitions: vec![pb::FetchPartition {
                    partition: p,
                    current_leader_epoch: Some(epoch),
                    fetch_offset: 0,
                    partition_max_bytes: 1 << 20,
                    ..Default::default()
                }],
            }],
            ..Default::default()
        })
    };
    assert_eq!(
        code(client.send(fetch(new_epoch)).await.unwrap()),
        ErrorCode::UnknownLeaderEpoch
    );
    // A stale client's acks=all write is never acknowledged: no follower fetches
    // from the zombie any more, so its high watermark cannot pass the write.
    let stale = code(
        client
            .send(with_epoch(old_epoch, "zombie-write"))
            .await
            .unwrap(),
    );
    assert_ne!(
        stale,
        ErrorCode::None,
        "the zombie acknowledged an acks=all write"
    );

    // Healed, the zombie learns the new epoch, becomes follower and drops its
    // unacknowledged write; stale requests are fenced.
    faults.heal_all();
    wait_for("the zombie to step down", WAIT, || async {
        !cluster.replica(zombie, "z", p).is_leader()
            && cluster.replica(zombie, "z", p).leader_epoch() >= new_epoch
    })
    .await;
    assert_eq!(
        code(client.send(with_epoch(old_epoch, "late")).await.unwrap()),
        ErrorCode::FencedLeaderEpoch
    );
    assert_eq!(
        code(client.send(fetch(old_epoch)).await.unwrap()),
        ErrorCode::FencedLeaderEpoch
    );
    let leader = cluster.connect(new_leader).await;
    let hw = cluster.replica(new_leader, "z", p).high_watermark();
    wait_for("the old leader to converge", WAIT, || async {
        cluster
            .try_replica(zombie, "z", p)
            .is_some_and(|r| r.log_end_offset() == hw)
    })
    .await;
    assert_eq!(
        log_bytes(&cluster, zombie, "z", p, hw),
        log_bytes(&cluster, new_leader, "z", p, hw)
    );
    let present = values(&read_all(&leader, "z", p, 0).await.unwrap());
    assert!(present.contains(&"before".to_string()));
    assert!(
        !present.contains(&"zombie-write".to_string()),
        "an unacknowledged zombie write survived"
    );
}

// --- producer state across a truncation ---

/// An idempotent producer's batch of `n` records from `seq` (producer 77).
fn idempotent_batch(seq: i32, n: usize) -> bytes::Bytes {
    let mut b = syncline_proto::batch::BatchBuilder::new(1_700_000_000_000);
    for i in 0..n {
        let value = format!("s{}", seq as usize + i);
        b.push(1_700_000_000_000, None, Some(value.as_bytes()), &[]);
    }
    b.set_producer(77, 0, seq);
    b.finish()
}

/// A replica whose tail an unclean election discarded truncates its producer
/// state with its log (KIP-101 for sequence numbers): the producer's batch it
/// had alone is gone, so when it leads again a retry of that batch is written
/// anew after what the other leader wrote — not answered as a duplicate at an
/// offset that now holds another record.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_truncated_tail_leaves_the_producer_state_and_a_retry_is_written_again() {
    use syncline_e2e::client::produce_records;
    let mut cluster = TestCluster::start_with(4, "", Options::default()).await;
    cluster
        .create_topic(
            "pt",
            6,
            2,
            &[
                ("unclean.leader.election.enable", "true"),
                ("min.insync.replicas", "1"),
            ],
        )
        .await;
    let (p, replicas) = partition_without_controller(&cluster, "pt", 6).await;
    let (up, down) = (replicas[0], replicas[1]);
    wait_leader(&cluster, "pt", p, up).await;
    wait_for("both replicas in the ISR", WAIT, || async {
        cluster.partition_metadata(1, "pt", p).await.isr.len() == 2
    })
    .await;
    let code = |r: &pb::ProducePartitionResponse| ErrorCode::from_wire(r.error_code);
    let conn = cluster.connect(up).await;
    let r = produce_records(&conn, "pt", p, -1, idempotent_batch(0, 1))
        .await
        .unwrap();
    assert_eq!((code(&r), r.base_offset), (ErrorCode::None, 0));
    // Only `up` gets sequences 1-2.
    cluster.stop(down).await;
    let r = produce_records(&conn, "pt", p, 1, idempotent_batch(1, 2))
        .await
        .unwrap();
    assert_eq!((code(&r), r.base_offset), (ErrorCode::None, 1));
    // `down` leads alone (unclean) and takes another record at offset 1.
    cluster.stop(up).await;
    cluster.start_stopped(down).await;
    wait_leader(&cluster, "pt", p, down).await;
    let other = cluster.connect(down).await;
    assert_eq!(send(&other, "pt", p, 1, "x").await.error_code, 0);
    // `up` comes back, truncates its tail and follows.
    cluster.start_stopped(up).await;
    wait_for("up to catch up with down", WAIT, || async {
        cluster
            .try_replica(up, "pt", p)
            .is_some_and(|r| !r.is_leader() && r.log_end_offset() == 2)
    })
    .await;
    // `up` leads again (unclean once more) and gets the producer's retry.
    cluster.stop(down).await;
    wait_leader(&cluster, "pt", p, up).await;
    let conn = cluster.connect(up).await;
    let r = produce_records(&conn, "pt", p, 1, idempotent_batch(1, 2))
        .await
        .unwrap();
    assert_eq!(
        (code(&r), r.base_offset),
        (ErrorCode::None, 2),
        "written after x, not a duplicate at offset 1"
    );
    let log = values(&read_all(&conn, "pt", p, 0).await.unwrap());
    assert_eq!(log, ["s0", "x", "s1", "s2"]);
}
