//! Client byte-rate quotas (KIP-13, KIP-219) on a real broker: a client
//! producing or consuming as fast as it can is held to its client id's
//! quota and told `throttle_time_ms` (a throttled consumer's answer without
//! its records, as Kafka's); another client id keeps its own budget; a
//! follower's replication is never charged.
//!
//! The quota window is two samples of a second (`quota_window_num = 2`):
//! Kafka's eleven let a greedy client through in bursts about ten seconds
//! apart as whole samples expire (the rule's unit tests show it), which only
//! a run of minutes averages out; two make the rate measurable over seconds.

use std::time::Duration;

use syncline_client::Connection;
use syncline_e2e::inprocess::*;
use syncline_e2e::quotas::{measured_rate, produce_until, record_batch, MEASURED, QUOTA, WARM_UP};
use syncline_proto::pb::response::Body as Resp;
use tokio::time::Instant;

async fn connect(cluster: &TestCluster, id: i32, client_id: &str) -> Connection {
    Connection::connect(
        &cluster.addrs[id as usize - 1],
        client_id,
        Duration::from_secs(5),
    )
    .await
    .unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_greedy_producer_is_held_to_its_client_ids_quota_and_another_is_not_slowed() {
    let cluster = TestCluster::start(
        1,
        &format!("quota_producer_default = {QUOTA}\nquota_window_num = 2"),
    )
    .await;
    cluster.create_topic("q", 2, 1, &[]).await;
    let greedy = connect(&cluster, 1, "greedy").await;
    let polite = connect(&cluster, 1, "polite").await;
    let batch = record_batch(64 << 10);
    let started = Instant::now();
    let end = started + WARM_UP + MEASURED;

    // 64 KiB every 250 ms: a quarter of its own quota, beside the greedy one.
    let polite_task = tokio::spawn({
        let batch = batch.clone();
        async move {
            let every = Some(Duration::from_millis(250));
            produce_until(&polite, "q", 1, &batch, every, started, end).await
        }
    });

    let greedy = produce_until(&greedy, "q", 0, &batch, None, started, end).await;
    let (rate, most_throttled) = (measured_rate(&greedy.acked), greedy.most_throttled);
    let polite = polite_task.await.unwrap();
    let (answered, throttled, slowest) = (polite.acked.len(), polite.throttled, polite.slowest);
    println!(
        "produce quota {QUOTA} B/s: greedy client achieved {rate:.0} B/s ({:.3} of it) over \
         {MEASURED:?} after {WARM_UP:?}, told throttle_time_ms up to {most_throttled}; \
         polite client: {answered} produces, {throttled} throttled, slowest {slowest:?}",
        rate / QUOTA as f64
    );
    let ratio = rate / QUOTA as f64;
    assert!(
        (0.9..=1.1).contains(&ratio),
        "greedy producer at {rate:.0} B/s against a quota of {QUOTA}"
    );
    assert!(most_throttled > 0, "the greedy client was never told");
    assert_eq!(throttled, 0, "the polite client id was throttled");
    // It produced on its schedule: one answer per tick (the first at once).
    let ticks = ((WARM_UP + MEASURED).as_millis() / 250) as usize;
    assert!(
        answered >= ticks - 1,
        "{answered} of {ticks} ticks answered"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_greedy_consumer_is_held_to_its_client_ids_quota() {
    let cluster = TestCluster::start(
        1,
        &format!("quota_consumer_default = {QUOTA}\nquota_window_num = 2"),
    )
    .await;
    cluster.create_topic("q", 1, 1, &[]).await;
    // More than the consumer may read in the run: it never catches up.
    let producer = connect(&cluster, 1, "loader").await;
    let batch = record_batch(64 << 10);
    let total = 2 * QUOTA * (WARM_UP + MEASURED).as_secs();
    for _ in 0..total / batch.len() as u64 {
        let r = produce(&producer, "q", 0, 1, batch.clone()).await;
        assert_eq!(r.error_code, 0);
    }

    let consumer = connect(&cluster, 1, "greedy").await;
    let started = Instant::now();
    let end = started + WARM_UP + MEASURED;
    let (mut acked, mut offset, mut most_throttled) = (Vec::new(), 0, 0);
    while Instant::now() < end {
        let mut request = fetch_request("q", 0, offset, 0, 1);
        if let syncline_proto::pb::request::Body::Fetch(f) = &mut request {
            f.topics[0].partitions[0].partition_max_bytes = 128 << 10;
        }
        let resp = consumer.send(request).await.unwrap();
        let Resp::Fetch(f) = resp else {
            panic!("unexpected {resp:?}")
        };
        let p = &f.responses[0].partitions[0];
        assert_eq!(p.error_code, 0);
        let read = values(&p.records);
        // Kafka's throttled fetch answer: told, and given nothing (the records
        // it would have carried are not counted against the client either).
        assert!(
            f.throttle_time_ms == 0 || read.is_empty(),
            "throttled for {} ms and given {} records",
            f.throttle_time_ms,
            read.len()
        );
        offset = read.last().map_or(offset, |(o, _)| o + 1);
        most_throttled = most_throttled.max(f.throttle_time_ms);
        acked.push((started.elapsed(), p.records.len() as u64));
    }
    assert!(
        (offset as u64) < total / batch.len() as u64,
        "the consumer read everything: the test measured nothing"
    );
    let rate = measured_rate(&acked);
    println!(
        "consumer quota {QUOTA} B/s: greedy consumer achieved {rate:.0} B/s ({:.3} of it) \
         over {MEASURED:?} after {WARM_UP:?}, told throttle_time_ms up to {most_throttled}",
        rate / QUOTA as f64
    );
    let ratio = rate / QUOTA as f64;
    assert!(
        (0.9..=1.1).contains(&ratio),
        "greedy consumer at {rate:.0} B/s against a quota of {QUOTA}"
    );
    assert!(most_throttled > 0, "the greedy consumer was never told");
}

/// A consumer quota far below the produce rate: the follower's fetches are
/// replication, never charged, so it keeps up and the ISR stays whole.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_followers_replication_is_never_throttled_by_client_quotas() {
    let cluster = TestCluster::start(
        2,
        "quota_consumer_default = 65536\nreplica_lag_time_max_ms = 2000",
    )
    .await;
    cluster.create_topic("q", 1, 2, &[]).await;
    let leader = cluster.leader_in_role("q", 0).await;
    let producer = connect(&cluster, leader, "producer").await;
    let batch = record_batch(64 << 10);
    // 16 MiB acks=all: 256 times the consumer quota's second.
    let started = Instant::now();
    for _ in 0..256 {
        let r = produce(&producer, "q", 0, -1, batch.clone()).await;
        assert_eq!(r.error_code, 0, "{r:?}");
        assert_eq!(r.acked_isr.len(), 2, "acknowledged by {:?}", r.acked_isr);
    }
    let took = started.elapsed();
    let isr = cluster.partition_metadata(leader, "q", 0).await.isr;
    println!(
        "16 MiB acks=all beside a consumer quota of 64 KiB/s: {took:?}, ISR {isr:?}, \
         {} ISR shrinks",
        cluster.metric(leader, "syncline_isr_shrinks_total")
    );
    assert_eq!(isr.len(), 2, "ISR {isr:?}");
    assert_eq!(cluster.metric(leader, "syncline_isr_shrinks_total"), 0.0);
}

/// acks=0 gets no answer to carry `throttle_time_ms`: its bytes are charged
/// all the same and its connection muted, so the broker appends no faster
/// than the quota whatever the client sends.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_acks_0_producer_is_held_to_its_quota_by_its_muted_connection() {
    let cluster = TestCluster::start(
        1,
        &format!("quota_producer_default = {QUOTA}\nquota_window_num = 2"),
    )
    .await;
    cluster.create_topic("q", 1, 1, &[]).await;
    let greedy = connect(&cluster, 1, "fire-and-forget").await;
    let batch = record_batch(64 << 10);
    let batch_bytes = batch.len() as u64;
    let started = Instant::now();
    let sender = tokio::spawn(async move {
        // Sends as fast as the socket takes them: one record a batch.
        while greedy
            .send_no_response(produce_request("q", 0, 0, batch.clone()))
            .await
            .is_ok()
        {}
    });
    let partition = cluster.replica(1, "q", 0);
    // The appends are measured between two instants, as they fall.
    tokio::time::sleep_until(started + WARM_UP).await;
    let (first, first_at) = (partition.log_end_offset(), Instant::now());
    tokio::time::sleep_until(started + WARM_UP + MEASURED).await;
    let (last, last_at) = (partition.log_end_offset(), Instant::now());
    sender.abort();
    let rate = ((last - first) as u64 * batch_bytes) as f64
        / last_at.duration_since(first_at).as_secs_f64();
    println!(
        "acks=0 produce quota {QUOTA} B/s: appended {rate:.0} B/s ({:.3} of it) over \
         {MEASURED:?} after {WARM_UP:?}",
        rate / QUOTA as f64
    );
    let ratio = rate / QUOTA as f64;
    assert!(
        (0.9..=1.1).contains(&ratio),
        "acks=0 producer appended at {rate:.0} B/s against a quota of {QUOTA}"
    );
}

/// KIP-124: a client id whose `request_percentage` quota the cluster sets is
/// charged the time the broker spends handling its requests; once over it,
/// its answer says `throttle_time_ms` and its connection is not read for
/// that long. Another client id sending the same requests is never
/// throttled.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_client_over_its_request_quota_is_throttled_and_muted_and_another_is_not() {
    use syncline_proto::pb;
    let cluster = TestCluster::start(1, "quota_window_num = 2").await;
    cluster.create_topic("q", 1, 1, &[]).await;
    let admin = connect(&cluster, 1, "admin").await;
    // 0.001 % of a thread: ten microseconds of handling a second, which the
    // first produce or two go far past, so that the throttle is long (up to
    // the whole window) against the time an answer takes to reach the client.
    let set = pb::request::Body::AlterClientQuotas(pb::AlterClientQuotasRequest {
        entries: vec![pb::ClientQuotaAlteration {
            entity: vec![pb::ClientQuotaEntityComponent {
                entity_type: "client-id".into(),
                entity_name: Some("busy".into()),
            }],
            ops: vec![pb::ClientQuotaOp {
                key: "request_percentage".into(),
                value: 0.001,
                remove: false,
            }],
        }],
        validate_only: false,
        forwarded: false,
    });
    let Resp::AlterClientQuotas(r) = admin.send(set).await.unwrap() else {
        panic!("not an AlterClientQuotas answer")
    };
    assert_eq!(r.results[0].error_code, 0, "{r:?}");
    syncline_e2e::wait_for("the quota to reach the broker", Duration::from_secs(10), || {
        let admin = &admin;
        async move {
            let describe = pb::request::Body::DescribeClientQuotas(Default::default());
            matches!(admin.send(describe).await, Ok(Resp::DescribeClientQuotas(d)) if d.entries.len() == 1)
        }
    })
    .await;

    let batch = record_batch(1024);
    let produce_once = |conn: &Connection| {
        let request = produce_request("q", 0, 1, batch.clone());
        let conn = conn.clone();
        async move {
            let Resp::Produce(r) = conn.send(request).await.unwrap() else {
                panic!("not a Produce answer")
            };
            assert_eq!(r.topics[0].partitions[0].error_code, 0, "{r:?}");
            r.throttle_time_ms
        }
    };
    let other = connect(&cluster, 1, "other").await;
    for _ in 0..500 {
        assert_eq!(
            produce_once(&other).await,
            0,
            "client id other was throttled"
        );
    }
    let busy = connect(&cluster, 1, "busy").await;
    let mut sent = 0;
    let throttle = loop {
        sent += 1;
        let throttle = produce_once(&busy).await;
        if throttle >= 100 {
            break throttle;
        }
        assert!(sent < 5000, "5000 produces and never throttled 100 ms");
    };
    // Muted: the next request is read only once the throttle has passed.
    let asked = Instant::now();
    let _ = produce_once(&busy).await;
    let waited = asked.elapsed();
    println!(
        "request quota 0.001 %: client id busy throttled {throttle} ms after {sent} produces \
         (client id other: 500 produces, none throttled); its next produce took {waited:?}"
    );
    assert!(
        waited >= Duration::from_millis(throttle as u64 * 9 / 10),
        "answered after {waited:?} while throttled for {throttle} ms"
    );
    let scraped = cluster.broker(1).broker().metrics().encode();
    let series = "syncline_client_quota_throttle_time_ms_total{quota=\"request\",user=\"\",client_id=\"busy\"}";
    let counted: f64 = scraped
        .lines()
        .find_map(|l| l.strip_prefix(series)?.trim().parse().ok())
        .unwrap_or_else(|| panic!("no {series} in {scraped}"));
    assert!(counted >= f64::from(throttle), "{series} {counted}");
}
