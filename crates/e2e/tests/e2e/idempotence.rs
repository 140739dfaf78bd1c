//! Idempotent producers' batches (a producer id, epoch and sequence numbers) on a
//! three-broker cluster, sent by hand as a client's retries would be: a retry of a
//! batch already written is answered with its offsets and not written again, a gap
//! is `OUT_OF_ORDER_SEQUENCE_NUMBER`, an older epoch `INVALID_PRODUCER_EPOCH`; a
//! new leader, having folded the same batches into its own producer state as a
//! follower, dedupes retries of batches its predecessor wrote. And InitProducerId:
//! producer ids from blocks the controller records, never given twice.

use tokio::time::Instant;

use bytes::Bytes;
use syncline_e2e::checks::*;
use syncline_e2e::client::{produce_records, read_all};
use syncline_e2e::{wait_for, Cluster};
use syncline_proto::batch::BatchBuilder;
use syncline_proto::{pb, ErrorCode};

const TOPIC: &str = "idempotent";
const PRODUCER: i64 = 4242;

/// A batch of producer [`PRODUCER`] in `epoch`: `n` records from sequence `seq`.
fn batch(epoch: i16, seq: i32, n: usize) -> Bytes {
    let mut b = BatchBuilder::new(1_700_000_000_000);
    for i in 0..n {
        let value = format!("e{epoch}-s{}", seq as usize + i);
        b.push(1_700_000_000_000, None, Some(value.as_bytes()), &[]);
    }
    b.set_producer(PRODUCER, epoch, seq);
    b.finish()
}

/// Produces `records` with acks=all to the current leader, as broker `via` knows
/// it: (error, base offset).
async fn send(cluster: &Cluster, via: i32, records: Bytes) -> (ErrorCode, i64) {
    let leader = cluster.partition(via, TOPIC, 0).await.unwrap().leader_id;
    let conn = cluster.connect(leader).await.unwrap();
    let r = produce_records(&conn, TOPIC, 0, -1, records).await.unwrap();
    (ErrorCode::from_wire(r.error_code), r.base_offset)
}

async fn values(cluster: &Cluster, via: i32) -> Vec<String> {
    let leader = cluster.partition(via, TOPIC, 0).await.unwrap().leader_id;
    let conn = cluster.connect(leader).await.unwrap();
    read_all(&conn, TOPIC, 0, 0)
        .await
        .unwrap()
        .into_iter()
        .map(|(_, v)| String::from_utf8(v).unwrap())
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_idempotent_producers_retries_are_written_once_across_a_leader_change() {
    let mut cluster = Cluster::start_quorum(3, 3, FAST_TIMERS).await;
    create_topic(&cluster, TOPIC, 1, 3, 2);
    let before = by_partition(&wait_full_isr(&cluster, 1, TOPIC, WAIT).await);
    let leader = before[&0].leader_id;

    assert_eq!(
        send(&cluster, leader, batch(0, 0, 3)).await,
        (ErrorCode::None, 0)
    );
    // The response was lost, the client retries: the original offsets, no write.
    assert_eq!(
        send(&cluster, leader, batch(0, 0, 3)).await,
        (ErrorCode::None, 0)
    );
    assert_eq!(
        send(&cluster, leader, batch(0, 3, 2)).await,
        (ErrorCode::None, 3)
    );
    // A gap: sequence 5 is next, not 6.
    assert_eq!(
        send(&cluster, leader, batch(0, 6, 1)).await.0,
        ErrorCode::OutOfOrderSequenceNumber
    );
    // Several batches of an idempotent producer in one partition's records.
    let mut two = batch(0, 5, 1).to_vec();
    two.extend_from_slice(&batch(0, 6, 1));
    assert_eq!(
        send(&cluster, leader, Bytes::from(two)).await.0,
        ErrorCode::InvalidRecord
    );
    assert_eq!(
        values(&cluster, leader).await,
        ["e0-s0", "e0-s1", "e0-s2", "e0-s3", "e0-s4"]
    );
    assert_eq!(
        cluster
            .metric(leader, "syncline_produce_duplicates_total")
            .unwrap(),
        1.0
    );
    assert_eq!(
        cluster
            .metric(leader, "syncline_produce_out_of_order_sequences_total")
            .unwrap(),
        1.0
    );

    // The leader dies; the new one, a follower until now, knows the producer.
    let killed = Instant::now();
    cluster.kill(leader);
    let via = (1..=3).find(|id| *id != leader).unwrap();
    wait_failover(&cluster, TOPIC, &before, leader, killed).await;
    assert_eq!(
        send(&cluster, via, batch(0, 3, 2)).await,
        (ErrorCode::None, 3)
    );
    assert_eq!(
        send(&cluster, via, batch(0, 5, 1)).await,
        (ErrorCode::None, 5)
    );
    // A new epoch (a restarted producer) starts at 0 and fences the old one.
    assert_eq!(
        send(&cluster, via, batch(1, 0, 1)).await,
        (ErrorCode::None, 6)
    );
    assert_eq!(
        send(&cluster, via, batch(0, 6, 1)).await.0,
        ErrorCode::InvalidProducerEpoch
    );
    // The old leader comes back and catches up as a follower: its rebuilt
    // state and the log agree with the others.
    cluster.restart(leader);
    wait_full_isr(&cluster, 1, TOPIC, WAIT).await;
    assert_eq!(
        values(&cluster, via).await,
        ["e0-s0", "e0-s1", "e0-s2", "e0-s3", "e0-s4", "e0-s5", "e1-s0"]
    );
    wait_logs_identical(&cluster, TOPIC, 0, WAIT).await;
}

/// InitProducerId through broker `id`: (error, producer id, epoch).
async fn init_producer_id(
    cluster: &Cluster,
    id: i32,
    transactional_id: &str,
) -> (ErrorCode, i64, i32) {
    let body = pb::request::Body::InitProducerId(pb::InitProducerIdRequest {
        transactional_id: transactional_id.into(),
        transaction_timeout_ms: 60_000,
        producer_id: -1,
        producer_epoch: -1,
    });
    match cluster.request(id, body).await {
        Err(_) => (ErrorCode::NetworkException, -1, -1),
        Ok(pb::response::Body::InitProducerId(r)) => (
            ErrorCode::from_wire(r.error_code),
            r.producer_id,
            r.producer_epoch,
        ),
        Ok(other) => panic!("unexpected answer {other:?}"),
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn producer_ids_are_never_given_twice_across_brokers_and_a_controller_failover() {
    let mut cluster = Cluster::start_quorum(3, 3, FAST_TIMERS).await;
    let mut seen = std::collections::BTreeSet::new();
    for round in 0..3 {
        for id in 1..=3 {
            let (code, pid, epoch) = init_producer_id(&cluster, id, "").await;
            assert_eq!(
                (code, epoch),
                (ErrorCode::None, 0),
                "broker {id}, round {round}"
            );
            assert!(seen.insert(pid), "producer id {pid} given twice");
        }
    }
    // A new controller continues after every block the old one gave out.
    let controller = cluster.wait_active_controller(&[], WAIT).await;
    cluster.kill(controller);
    cluster.wait_active_controller(&[controller], WAIT).await;
    let alive: Vec<i32> = (1..=3).filter(|id| *id != controller).collect();
    for id in &alive {
        // The killed broker's block is lost, not reused: a new broker asks anew.
        let (code, pid, _) = init_producer_id(&cluster, *id, "").await;
        assert_eq!(code, ErrorCode::None);
        assert!(
            seen.insert(pid),
            "producer id {pid} given twice after the failover"
        );
    }
    cluster.restart(controller);
    let seen = std::cell::RefCell::new(seen);
    wait_for("the restarted broker to give ids", WAIT, || async {
        match init_producer_id(&cluster, controller, "").await {
            (ErrorCode::None, pid, 0) => {
                assert!(
                    seen.borrow_mut().insert(pid),
                    "producer id {pid} given twice"
                );
                true
            }
            _ => false,
        }
    })
    .await;
    // Transactions are not supported: a clear refusal.
    let (code, pid, _) = init_producer_id(&cluster, alive[0], "orders-tx").await;
    assert_eq!((code, pid), (ErrorCode::InvalidRequest, -1));
    // Blocks go to brokers only: a client asking is refused.
    let forged = pb::request::Body::AllocateProducerIds(pb::AllocateProducerIdsRequest {
        broker_id: alive[0],
        broker_epoch: 0,
    });
    let err = cluster
        .request(alive[0], forged)
        .await
        .expect_err("a client got producer ids");
    assert!(
        err.to_string().contains("CLUSTER_AUTHORIZATION_FAILED"),
        "{err:#}"
    );
}

/// `producer_id_expiration_ms`: a producer silent for longer is forgotten (the
/// leader's describe counts it, then not), its next batch past sequence 0 is
/// `UNKNOWN_PRODUCER_ID`, and a new epoch from sequence 0 is written (KIP-360).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_expired_producer_is_unknown_and_starts_a_new_epoch() {
    let extra = format!(
        "{FAST_TIMERS}producer_id_expiration_ms = 3000\nretention_check_interval_ms = 100\n"
    );
    let cluster = Cluster::start_quorum(3, 3, &extra).await;
    create_topic(&cluster, TOPIC, 1, 3, 2);
    let leader = by_partition(&wait_full_isr(&cluster, 1, TOPIC, WAIT).await)[&0].leader_id;
    let now = || {
        std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .unwrap()
            .as_millis() as i64
    };
    let stamped = |epoch: i16, seq: i32, n: usize| {
        let mut b = BatchBuilder::new(now());
        for i in 0..n {
            let value = format!("e{epoch}-s{}", seq as usize + i);
            b.push(now(), None, Some(value.as_bytes()), &[]);
        }
        b.set_producer(PRODUCER, epoch, seq);
        b.finish()
    };
    assert_eq!(
        send(&cluster, leader, stamped(0, 0, 2)).await,
        (ErrorCode::None, 0)
    );
    let producers = || async {
        leader_view(&cluster, leader, TOPIC, 0)
            .await
            .unwrap()
            .producer_count
    };
    assert_eq!(producers().await, 1, "the leader has the producer's state");
    let started = Instant::now();
    let mut left = 1;
    while left != 0 {
        assert!(started.elapsed() < WAIT, "the producer never expired");
        tokio::time::sleep(std::time::Duration::from_millis(100)).await;
        left = producers().await;
    }
    assert_eq!(
        send(&cluster, leader, stamped(0, 2, 1)).await.0,
        ErrorCode::UnknownProducerId
    );
    assert_eq!(
        send(&cluster, leader, stamped(1, 0, 1)).await,
        (ErrorCode::None, 2)
    );
    assert_eq!(values(&cluster, leader).await, ["e0-s0", "e0-s1", "e1-s0"]);
}

/// A restarted broker knows its producers again — from the producer-state
/// snapshot a clean shutdown writes, and after a crash from the snapshots of
/// its rolled segments and the batches after them — so a retry that arrives
/// after the restart is answered with its first offsets, not written twice.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn retries_after_a_clean_restart_and_after_a_crash_are_still_written_once() {
    // Small segments: the log rolls, and so snapshots are taken, as it fills.
    let mut cluster = Cluster::start(1, "segment_bytes = 1024\n").await;
    create_topic(&cluster, TOPIC, 1, 1, 1);
    wait_full_isr(&cluster, 1, TOPIC, WAIT).await;
    let mut offset = 0;
    for seq in 0..20 {
        assert_eq!(
            send(&cluster, 1, batch(0, seq * 3, 3)).await,
            (ErrorCode::None, offset)
        );
        offset += 3;
    }
    for crash in [false, true] {
        if !crash {
            // SIGTERM: a controlled shutdown that closes the log.
            cluster.stop(1, std::time::Duration::from_secs(20)).await;
        }
        // (After a stop it starts the broker again; else it SIGKILLs it first.)
        cluster.restart(1);
        wait_full_isr(&cluster, 1, TOPIC, WAIT).await;
        // The last batch, and the one four batches back (the fifth kept).
        let next = offset / 3;
        for seq in [next - 1, next - 5] {
            assert_eq!(
                send(&cluster, 1, batch(0, seq as i32 * 3, 3)).await,
                (ErrorCode::None, seq * 3),
                "crash {crash}: batch {seq} again"
            );
        }
        // The producer goes on where it was.
        assert_eq!(
            send(&cluster, 1, batch(0, next as i32 * 3, 3)).await,
            (ErrorCode::None, offset),
            "crash {crash}"
        );
        offset += 3;
    }
    assert_eq!(values(&cluster, 1).await.len(), offset as usize);
}
