//! DelayedFetch end to end on a real broker: a long poll is answered as soon as
//! data arrives, or at its deadline when none does; a closed connection cancels it.

use std::time::Duration;

use syncline_e2e::inprocess::*;
use syncline_proto::pb::response::Body as Resp;
use tokio::time::Instant;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn long_poll_answers_on_data_not_at_the_deadline() {
    let cluster = TestCluster::start(1, "").await;
    cluster.create_topic("lp", 1, 1, &[]).await;
    let consumer = cluster.connect(1).await;
    let producer = cluster.connect(1).await;

    let started = Instant::now();
    let poll = tokio::spawn({
        let consumer = consumer.clone();
        async move {
            let resp = consumer
                .send(fetch_request("lp", 0, 0, 5_000, 1))
                .await
                .unwrap();
            (resp, Instant::now())
        }
    });
    // The fetch is parked in the purgatory, holding no task on the broker.
    let purgatory = || {
        cluster
            .broker(1)
            .broker()
            .replica_manager()
            .purgatory_sizes()
            .0
    };
    syncline_e2e::wait_for(
        "the fetch to wait in the purgatory",
        Duration::from_secs(2),
        || async { purgatory() == 1 },
    )
    .await;
    tokio::time::sleep(Duration::from_millis(200)).await;
    let appended = Instant::now();
    let r = produce(&producer, "lp", 0, 1, batch(&[b"wake up"])).await;
    assert_eq!(r.error_code, 0);
    let (resp, answered) = poll.await.unwrap();
    let Resp::Fetch(f) = resp else {
        panic!("unexpected {resp:?}")
    };
    let data = &f.responses[0].partitions[0];
    assert_eq!(values(&data.records), vec![(0, b"wake up".to_vec())]);
    let after_append = answered.duration_since(appended);
    assert!(
        after_append < Duration::from_millis(500),
        "answered {after_append:?} after the append"
    );
    assert!(
        answered.duration_since(started) < Duration::from_secs(4),
        "answered at the deadline, not on data"
    );
    assert_eq!(purgatory(), 0);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn long_poll_with_no_data_answers_empty_at_the_deadline() {
    let cluster = TestCluster::start(1, "").await;
    cluster.create_topic("lp", 1, 1, &[]).await;
    let consumer = cluster.connect(1).await;
    let started = Instant::now();
    let resp = consumer
        .send(fetch_request("lp", 0, 0, 700, 1))
        .await
        .unwrap();
    let waited = started.elapsed();
    let Resp::Fetch(f) = resp else {
        panic!("unexpected {resp:?}")
    };
    let data = &f.responses[0].partitions[0];
    assert_eq!(data.error_code, 0);
    assert!(data.records.is_empty());
    assert!(
        waited >= Duration::from_millis(700),
        "answered early: {waited:?}"
    );
    assert!(
        waited < Duration::from_millis(1_500),
        "answered late: {waited:?}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn closing_the_connection_cancels_its_waiting_fetches() {
    let cluster = TestCluster::start(1, "").await;
    cluster.create_topic("lp", 1, 1, &[]).await;
    {
        let consumer = cluster.connect(1).await;
        for _ in 0..3 {
            let c = consumer.clone();
            tokio::spawn(async move {
                let _ = c.send(fetch_request("lp", 0, 0, 60_000, 1)).await;
            });
        }
        let rm = cluster.broker(1).broker().replica_manager();
        syncline_e2e::wait_for("three waiting fetches", Duration::from_secs(2), || async {
            rm.purgatory_sizes().0 == 3
        })
        .await;
        consumer.close();
    }
    let rm = cluster.broker(1).broker().replica_manager();
    syncline_e2e::wait_for(
        "the fetches to be cancelled",
        Duration::from_secs(2),
        || async { rm.purgatory_sizes().0 == 0 },
    )
    .await;
}
