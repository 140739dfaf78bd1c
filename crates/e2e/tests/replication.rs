//! Three brokers in one process: acks=all, ISR, leader change.

use std::time::Duration;

use syncline_e2e::inprocess::*;
use syncline_proto::ErrorCode;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn acks_all_is_acknowledged_by_the_whole_isr() {
    let cluster = TestCluster::start(3, "replica_lag_time_max_ms = 2000\n").await;
    cluster
        .create_topic("r", 1, 3, &[("min.insync.replicas", "2")])
        .await;
    let meta = cluster.partition_metadata(1, "r", 0).await;
    assert_eq!(meta.isr.len(), 3, "{meta:?}");
    let leader = cluster.connect(meta.leader_id).await;
    for i in 0..20u8 {
        let r = produce(&leader, "r", 0, -1, batch(&[&[i; 10], &[i; 20]])).await;
        assert_eq!(r.error_code, 0, "{r:?}");
        assert_eq!(r.base_offset, i64::from(i) * 2);
        let mut isr = r.acked_isr.clone();
        isr.sort();
        assert_eq!(isr, vec![1, 2, 3]);
        assert_eq!(r.replication_factor, 3);
    }
    let data = fetch(&leader, "r", 0, 0).await;
    assert_eq!(data.high_watermark, 40);
    assert_eq!(values(&data.records).len(), 40);
    // Followers caught up too: their logs end at 40.
    for id in 1..=3 {
        if id == meta.leader_id {
            continue;
        }
        let p = cluster
            .broker(id)
            .broker()
            .replica_manager()
            .partition("r", 0)
            .unwrap();
        syncline_e2e::wait_for("follower to catch up", Duration::from_secs(5), || {
            let p = p.clone();
            async move { p.log_end_offset() == 40 && p.high_watermark() == 40 }
        })
        .await;
    }
    let _ = ErrorCode::None;
}
