//! DelayedFetch end to end on a real broker: a long poll is answered as soon as
//! data arrives, or at its deadline when none does; a closed connection cancels it.

use std::time::Duration;

use syncline_e2e::inprocess::*;
use syncline_proto::pb::response::Body as Resp;
use tokio::time::Instant;

use syncline_e2e::checks::WAIT;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn long_poll_answers_on_data_not_at_the_deadline() {
    let cluster = TestCluster::start(1, "").await;
    cluster.create_topic("lp", 1, 1, &[]).await;
    let consumer = cluster.connect(1).await;
    let producer = cluster.connect(1).await;

    // A deadline far beyond any scheduling delay: an answer well before it was
    // caused by the data.
    const MAX_WAIT_MS: i32 = 60_000;
    let started = Instant::now();
    let poll = tokio::spawn({
        let consumer = consumer.clone();
        async move {
            let resp = consumer
                .send(fetch_request("lp", 0, 0, MAX_WAIT_MS, 1))
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
    syncline_e2e::wait_for("the fetch to wait in the purgatory", WAIT, || async {
        purgatory() == 1
    })
    .await;
    // Still waiting a moment later: nothing but data will answer it.
    tokio::time::sleep(Duration::from_millis(200)).await;
    assert!(!poll.is_finished(), "the fetch was answered without data");
    let r = produce(&producer, "lp", 0, 1, batch(&[b"wake up"])).await;
    assert_eq!(r.error_code, 0);
    let (resp, answered) = poll.await.unwrap();
    let Resp::Fetch(f) = resp else {
        panic!("unexpected {resp:?}")
    };
    let data = &f.responses[0].partitions[0];
    assert_eq!(values(&data.records), vec![(0, b"wake up".to_vec())]);
    let waited = answered.duration_since(started);
    assert!(
        waited < Duration::from_millis(MAX_WAIT_MS as u64 / 2),
        "answered after {waited:?}: at the deadline, not on data"
    );
    assert_eq!(purgatory(), 0);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn long_poll_with_no_data_answers_empty_at_the_deadline() {
    let cluster = TestCluster::start(1, "").await;
    cluster.create_topic("lp", 1, 1, &[]).await;
    let consumer = cluster.connect(1).await;
    const MAX_WAIT_MS: u64 = 700;
    let started = Instant::now();
    let resp = consumer
        .send(fetch_request("lp", 0, 0, MAX_WAIT_MS as i32, 1))
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
        waited >= Duration::from_millis(MAX_WAIT_MS),
        "answered early: {waited:?}"
    );
    // Answered by its own deadline (how exactly the timer keeps it is tested with
    // paused time in the purgatory crate): the bound only allows for a loaded
    // machine's scheduling, which can stall the broker for a second or more.
    assert!(
        waited < Duration::from_millis(MAX_WAIT_MS) + Duration::from_secs(10),
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
        syncline_e2e::wait_for("three waiting fetches", WAIT, || async {
            rm.purgatory_sizes().0 == 3
        })
        .await;
        consumer.close();
    }
    let rm = cluster.broker(1).broker().replica_manager();
    syncline_e2e::wait_for("the fetches to be cancelled", WAIT, || async {
        rm.purgatory_sizes().0 == 0
    })
    .await;
}
