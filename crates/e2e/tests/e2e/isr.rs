//! The ISR of the README's "The replication contract", with real processes:
//! acks=all under follower pauses (SIGSTOP), ISR shrink and expand,
//! min.insync.replicas, and identical logs after healing.

use std::time::Duration;

use syncline_e2e::checks::{log_len, log_since};
use syncline_e2e::client::{produce, read_all};
use syncline_e2e::{wait_for, Cluster};
use syncline_proto::ErrorCode;
use tokio::time::Instant;

const LAG_MS: u64 = 2000;
/// How long the test waits for a state it polls for. Generous: on a loaded
/// two-core machine the path from the leader's decision to what the test sees
/// (AlterPartition, the controller's commit, DescribeTopics) can take seconds.
/// When the leader decides is checked on its own clock, in its log.
const WAIT: Duration = Duration::from_secs(30);

/// How long broker 1 had not seen `replica` caught up when it first proposed
/// taking it out of `partition`'s ISR (its log from byte `from` on).
fn shrink_proposed_after_ms(cluster: &Cluster, from: usize, partition: i32, replica: i32) -> u64 {
    let log = log_since(cluster, 1, from);
    let (p, r) = (
        format!("topic=seed partition={partition} "),
        format!("replica={replica} "),
    );
    log.lines()
        .filter(|l| l.contains("isr shrink proposed") && l.contains(&p) && l.contains(&r))
        .find_map(|l| {
            l.split("last_caught_up_ms_ago=")
                .nth(1)?
                .split_whitespace()
                .next()?
                .parse()
                .ok()
        })
        .unwrap_or_else(|| {
            panic!("no shrink of replica {replica} proposed in broker 1's log:\n{log}")
        })
}

/// The leader removes a follower once it has not caught up for the lag time, and
/// checks every lag/2: between 1 and 1.5 × the lag time (a little scheduling slack
/// on a loaded machine).
fn assert_shrunk_on_time(ms: u64, replica: i32) {
    println!("replica {replica} proposed out of the ISR {ms} ms after it last caught up");
    assert!(
        (LAG_MS..=LAG_MS * 3 / 2 + 500).contains(&ms),
        "replica {replica} proposed out of the ISR {ms} ms after it last caught up \
         (replica_lag_time_max_ms {LAG_MS})"
    );
}

async fn isr_of(cluster: &Cluster, topic: &str, partition: i32) -> Vec<i32> {
    match cluster.describe_partition(topic, partition).await {
        Ok(d) => {
            let mut isr = d.isr;
            isr.sort();
            isr
        }
        Err(_) => vec![],
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn pause_followers_shrink_refuse_expand_and_converge() {
    let mut cluster = Cluster::start(3, &format!("replica_lag_time_max_ms = {LAG_MS}\n")).await;
    syncline_e2e::checks::create_topic(&cluster, "seed", 3, 3, 2);
    // Broker 1 hosts the controller: pause followers of a partition broker 1 leads.
    let mut partition = -1;
    let deadline = Instant::now() + WAIT;
    while partition < 0 {
        for p in 0..3 {
            if cluster
                .partition(1, "seed", p)
                .await
                .is_ok_and(|m| m.leader_id == 1)
            {
                partition = p;
            }
        }
        assert!(Instant::now() < deadline, "no partition led by broker 1");
    }
    let leader = cluster.connect(1).await.unwrap();
    let mut acked: Vec<Vec<u8>> = Vec::new();
    let mut next = 0u32;
    let mut send = |acks: i32| {
        next += 1;
        let value = format!("record-{next}").into_bytes();
        let leader = leader.clone();
        async move {
            (
                value.clone(),
                produce(&leader, "seed", partition, acks, &[value])
                    .await
                    .unwrap(),
            )
        }
    };

    // 1. All in sync: acknowledged with ISR {1, 2, 3}.
    for _ in 0..10 {
        let (v, r) = send(-1).await;
        assert_eq!(r.error_code, 0, "{r:?}");
        let mut isr = r.acked_isr.clone();
        isr.sort();
        assert_eq!(isr, vec![1, 2, 3]);
        acked.push(v);
    }
    assert_eq!(
        cluster.metric(1, "syncline_isr_shrinks_total").unwrap(),
        0.0
    );

    // 2. Pause follower 2: the ISR shrinks within 1.5 × the lag time (the check runs
    //    every lag/2), and acks=all still succeeds with two replicas.
    let from = log_len(&cluster, 1);
    cluster.pause(2);
    let paused_at = Instant::now();
    loop {
        let (v, r) = send(-1).await;
        if r.error_code == 0 {
            acked.push(v);
        }
        if isr_of(&cluster, "seed", partition).await == vec![1, 3] {
            break;
        }
        assert!(
            paused_at.elapsed() < WAIT,
            "ISR did not shrink within {WAIT:?}"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    assert_shrunk_on_time(shrink_proposed_after_ms(&cluster, from, partition, 2), 2);
    assert_eq!(
        cluster.metric(1, "syncline_isr_shrinks_total").unwrap(),
        1.0
    );
    assert_eq!(
        cluster
            .metric(1, "syncline_under_replicated_partitions")
            .unwrap(),
        1.0
    );
    for _ in 0..5 {
        let (v, r) = send(-1).await;
        assert_eq!(r.error_code, 0, "{r:?}");
        let mut isr = r.acked_isr.clone();
        isr.sort();
        assert_eq!(isr, vec![1, 3]);
        acked.push(v);
    }

    // 3. Pause follower 3 as well. A follower that has everything stays in sync
    //    (as in Kafka), so keep writing with acks=1 to make it fall behind. Once the
    //    ISR is {1}, acks=all is refused with NOT_ENOUGH_REPLICAS and nothing is
    //    written.
    let from = log_len(&cluster, 1);
    cluster.pause(3);
    let paused_at = Instant::now();
    while isr_of(&cluster, "seed", partition).await != vec![1] {
        let (v, r) = send(1).await;
        assert_eq!(r.error_code, 0, "{r:?}");
        acked.push(v);
        assert!(
            paused_at.elapsed() < WAIT,
            "ISR did not shrink to {{1}} within {WAIT:?}"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    assert_shrunk_on_time(shrink_proposed_after_ms(&cluster, from, partition, 3), 3);
    assert_eq!(
        cluster.metric(1, "syncline_isr_shrinks_total").unwrap(),
        2.0
    );
    assert_eq!(
        cluster
            .metric(1, "syncline_under_min_isr_partition_count")
            .unwrap(),
        1.0
    );
    let mut refused = Vec::new();
    for _ in 0..5 {
        let (v, r) = send(-1).await;
        assert_eq!(
            ErrorCode::from_wire(r.error_code),
            ErrorCode::NotEnoughReplicas,
            "{r:?}"
        );
        refused.push(v);
    }

    // 4. Resume both: the ISR grows back to three, two expansions committed.
    cluster.resume(2);
    cluster.resume(3);
    wait_for("ISR {1, 2, 3}", WAIT, || async {
        isr_of(&cluster, "seed", partition).await == vec![1, 2, 3]
    })
    .await;
    assert_eq!(
        cluster.metric(1, "syncline_isr_expands_total").unwrap(),
        2.0
    );
    assert_eq!(
        cluster
            .metric(1, "syncline_under_replicated_partitions")
            .unwrap(),
        0.0
    );
    let (v, r) = send(-1).await;
    assert_eq!(r.error_code, 0, "{r:?}");
    acked.push(v);

    // 5. Every acknowledged record is readable; no refused one ever is.
    let records = read_all(&leader, "seed", partition, 0).await.unwrap();
    let values: Vec<Vec<u8>> = records.iter().map(|(_, v)| v.clone()).collect();
    let mut pos = 0;
    for a in &acked {
        let found = values[pos..].iter().position(|v| v == a);
        assert!(
            found.is_some(),
            "acknowledged {} missing",
            String::from_utf8_lossy(a)
        );
        pos += found.unwrap() + 1;
    }
    for r in &refused {
        assert!(
            !values.contains(r),
            "refused {} is readable",
            String::from_utf8_lossy(r)
        );
    }

    // 6. Byte-identical logs on all three brokers up to the high watermark.
    let hw = cluster
        .describe_partition("seed", partition)
        .await
        .unwrap()
        .high_watermark;
    wait_for("followers to reach the high watermark", WAIT, || async {
        let l = cluster.log_bytes(1, "seed", partition, hw);
        l == cluster.log_bytes(2, "seed", partition, hw)
            && l == cluster.log_bytes(3, "seed", partition, hw)
    })
    .await;
}
