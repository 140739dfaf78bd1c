//! The seed's story with real processes: acks=all under follower pauses (SIGSTOP),
//! ISR shrink and expand, min.insync.replicas, and identical logs after healing.

use std::time::Duration;

use syncline_e2e::client::{produce, read_all};
use syncline_e2e::{wait_for, Cluster};
use syncline_proto::ErrorCode;
use tokio::time::Instant;

const LAG_MS: u64 = 2000;

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
    let deadline = Instant::now() + Duration::from_secs(10);
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
    //    every lag/2; allow a little scheduling slack on a loaded machine), and
    //    acks=all still succeeds with two replicas.
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
            paused_at.elapsed() < Duration::from_millis(LAG_MS * 3 / 2 + 500),
            "ISR did not shrink in time"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
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
    cluster.pause(3);
    let paused_at = Instant::now();
    while isr_of(&cluster, "seed", partition).await != vec![1] {
        let (v, r) = send(1).await;
        assert_eq!(r.error_code, 0, "{r:?}");
        acked.push(v);
        assert!(
            paused_at.elapsed() < Duration::from_millis(LAG_MS * 3),
            "ISR did not shrink to {{1}}"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
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
    wait_for("ISR {1, 2, 3}", Duration::from_secs(30), || async {
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
    wait_for(
        "followers to reach the high watermark",
        Duration::from_secs(10),
        || async {
            let l = cluster.log_bytes(1, "seed", partition, hw);
            l == cluster.log_bytes(2, "seed", partition, hw)
                && l == cluster.log_bytes(3, "seed", partition, hw)
        },
    )
    .await;
}
