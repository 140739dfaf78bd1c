//! The produce path's cost with and without the metrics work, side by side in one
//! run ("metrics add no measurable cost to the produce path").
//!
//! `cargo bench -p syncline-broker --bench produce_metrics` (about 30 s).
//!
//! The produce path, minus the socket: decode the request frame, validate every
//! batch, append it to the partition as leader, build and encode the response: the
//! calls `server::connection` → `ReplicaManager::handle_produce` → `append_one`
//! make, in their order, on a real [`Partition`] (its log on disk, page cache, no
//! fsync, as Kafka's default). "with metrics" adds exactly the metrics work of that
//! path: [`BrokerMetrics::api`] (per-API counter) and the `Instant` taken when the
//! request is dispatched, [`BrokerMetrics::bytes_in`] after the append, and the
//! latency histogram's observation when the response is sent (`Responder::send`).
//! Both variants call the broker's own functions; only the metrics calls differ, so
//! no seam is needed.
//!
//! Criterion measures each variant and the metrics work alone. The side-by-side
//! summary at the end comes from a paired run instead: rounds that alternate the
//! two variants (A B, B A, ...) so that whatever else loads the machine weighs on
//! both alike, summarised by medians and by the median of the per-round
//! differences. "2 threads" runs two producers at once on two partitions sharing
//! one registry, as two connections do: the only way metrics could contend (the
//! Produce histogram's lock, the counters' cache lines).

use std::cell::RefCell;
use std::collections::HashMap;
use std::hint::black_box;
use std::sync::{Arc, Barrier};
use std::time::Duration;

use bytes::Bytes;
use criterion::Criterion;
use syncline_broker::metrics::BrokerMetrics;
use syncline_broker::partition::leader_state::IsrChangeKind;
use syncline_broker::partition::{Acks, IsrListener, Partition, RoleChange, TopicPartition};
use syncline_broker::topic_config::TopicConfig;
use syncline_broker::BrokerConfig;
use syncline_proto::batch::{self, BatchBuilder};
use syncline_proto::pb::{self, request::Body, response::Body as Resp};
use syncline_proto::{frame, API_VERSION};
use tokio::time::Instant;

const RECORDS_PER_BATCH: usize = 10;
const RECORD_BYTES: usize = 100;
const TS: i64 = 1_700_000_000_000;
/// Appends between two (untimed) retention passes: keeps the bench's disk use to a
/// few segments whatever criterion's iteration count.
const CHUNK: u64 = 4096;

/// A produce request frame (acks=1) for partition `index` of "bench".
fn request_frame(index: i32) -> Bytes {
    let mut b = BatchBuilder::new(TS);
    let value = vec![0xab; RECORD_BYTES];
    for _ in 0..RECORDS_PER_BATCH {
        b.push(TS, None, Some(&value), &[]);
    }
    frame::encode(&pb::Request {
        api_version: API_VERSION,
        correlation_id: 7,
        client_id: "bench".into(),
        body: Some(Body::Produce(pb::ProduceRequest {
            acks: 1,
            timeout_ms: 30_000,
            topics: vec![pb::ProduceTopic {
                name: "bench".into(),
                partitions: vec![pb::ProducePartition {
                    partition: index,
                    current_leader_epoch: None,
                    records: b.finish(),
                }],
            }],
        })),
    })
}

/// A partition led by this broker (RF 1), its log in `dir`, small segments and a
/// small retention so [`CHUNK`]-wise retention keeps the disk use bounded.
fn leader_partition(dir: &std::path::Path, index: i32) -> Partition {
    let broker = BrokerConfig::parse(
        "node_id = 1\nprocess_roles = \"broker,controller\"\n\
         controller_quorum_voters = \"1@127.0.0.1:9092\"\n",
    )
    .expect("broker config");
    let configs: HashMap<String, String> =
        [("segment.bytes", "8388608"), ("retention.bytes", "8388608")]
            .into_iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect();
    let config = TopicConfig::resolve(&broker, "bench", &configs);
    let listener: IsrListener = Arc::new(|_: &TopicPartition, _: IsrChangeKind, _: &[i32]| {});
    let p = Partition::open(
        dir,
        TopicPartition::new("bench", index),
        0,
        1,
        config.clone(),
        listener,
    )
    .expect("open partition");
    let state = pb::PartitionState {
        topic: "bench".into(),
        partition: index,
        leader: 1,
        leader_epoch: 0,
        isr: vec![1],
        partition_epoch: 0,
        replicas: vec![1],
        ..Default::default()
    };
    let effects = p.apply_partition_state(&state, config, 1, Instant::now());
    assert_eq!(effects.role, RoleChange::BecameLeader);
    p
}

/// One produce request through the broker's produce path; with `metrics`, plus its
/// metrics work.
fn produce(partition: &Partition, request: &Bytes, metrics: Option<&BrokerMetrics>) {
    let frame_len = request.len();
    let request = frame::decode_request(request.clone()).expect("decodes");
    let Some(body) = request.body else {
        unreachable!("a produce request")
    };
    // server::connection: the API's counter and the start of its latency.
    let api = metrics.map(|m| (m.api(&body, frame_len), Instant::now()));
    let Body::Produce(req) = body else {
        unreachable!("a produce request")
    };
    let now_ms = TS;
    let mut response = pb::ProduceResponse {
        topics: Vec::with_capacity(req.topics.len()),
        throttle_time_ms: 0,
    };
    for topic in &req.topics {
        let mut out_topic = pb::ProduceTopicResponse {
            name: topic.name.clone(),
            partitions: Vec::with_capacity(topic.partitions.len()),
        };
        for p in &topic.partitions {
            for b in batch::split(&p.records) {
                let (_, bytes) = b.expect("whole batches");
                batch::validate(bytes).expect("valid batch");
            }
            // Nothing waits on the partition: its effects (a wake-up) have no one to
            // reach.
            let (append, _effects) = partition
                .append_as_leader(
                    &p.records,
                    Acks::from_wire(req.acks).expect("valid acks"),
                    p.current_leader_epoch,
                    now_ms,
                )
                .expect("append");
            if let Some(m) = metrics {
                m.bytes_in(p.records.len());
            }
            out_topic.partitions.push(pb::ProducePartitionResponse {
                partition: p.partition,
                base_offset: append.base_offset,
                log_append_time_ms: -1,
                log_start_offset: append.log_start_offset,
                replication_factor: 1,
                acked_isr: vec![1],
                ..Default::default()
            });
        }
        response.topics.push(out_topic);
    }
    let bytes = frame::encode(&pb::Response {
        correlation_id: request.correlation_id,
        body: Some(Resp::Produce(response)),
    });
    // Responder::send: the latency histogram.
    if let Some((api, started)) = api {
        api.observe(started.elapsed(), bytes.len());
    }
    black_box(bytes);
}

/// Time and iterations measured by one benchmark, over all its samples.
#[derive(Default)]
struct Totals {
    iters: u64,
    time: Duration,
}

impl Totals {
    fn ns_per_iter(&self) -> f64 {
        if self.iters == 0 {
            return 0.0;
        }
        self.time.as_nanos() as f64 / self.iters as f64
    }
}

/// Runs `iters` produces on a fresh partition; returns the time they took,
/// retention passes excluded.
fn run(iters: u64, metrics: Option<&BrokerMetrics>) -> Duration {
    let dir = tempfile::tempdir().expect("temp dir");
    let partition = leader_partition(dir.path(), 0);
    let request = request_frame(0);
    // The first append of an epoch checkpoints the epoch cache (fsyncs): a
    // once-per-leadership cost, kept out of the steady state.
    produce(&partition, &request, metrics);
    let mut timed = Duration::ZERO;
    let mut done = 0;
    while done < iters {
        let n = CHUNK.min(iters - done);
        let start = std::time::Instant::now();
        for _ in 0..n {
            produce(&partition, &request, metrics);
        }
        timed += start.elapsed();
        done += n;
        partition.apply_retention(TS, 86_400_000);
    }
    timed
}

/// Rounds of the paired comparison, and produces per variant and round.
const ROUNDS: usize = 300;
const PER_ROUND: u64 = 1000;

/// The paired comparison's result, in ns per produce (per round of simultaneous
/// produces with several threads).
struct Paired {
    without_ns: f64,
    with_ns: f64,
    /// Median over rounds of (with − without).
    cost_ns: f64,
}

fn median(mut v: Vec<f64>) -> f64 {
    v.sort_by(f64::total_cmp);
    v[v.len() / 2]
}

/// [`ROUNDS`] rounds on `threads` threads, each round timing [`PER_ROUND`] produces
/// without metrics and [`PER_ROUND`] with, in alternating order. Each thread has a
/// partition per variant (both logs grow alike); all threads share `metrics`.
fn paired(threads: usize, metrics: &BrokerMetrics) -> Paired {
    let dir = tempfile::tempdir().expect("temp dir");
    let barrier = Barrier::new(threads);
    // times[thread][variant][round]
    let times: Vec<[Vec<Duration>; 2]> = std::thread::scope(|s| {
        let handles: Vec<_> = (0..threads as i32)
            .map(|t| {
                let (barrier, dir) = (&barrier, dir.path());
                s.spawn(move || {
                    let parts = [
                        leader_partition(dir, 2 * t),
                        leader_partition(dir, 2 * t + 1),
                    ];
                    let requests = [request_frame(2 * t), request_frame(2 * t + 1)];
                    let variant = |v: usize| (v == 1).then_some(metrics);
                    for v in 0..2 {
                        produce(&parts[v], &requests[v], variant(v));
                    }
                    let mut times: [Vec<Duration>; 2] = Default::default();
                    for round in 0..ROUNDS {
                        let order = if round % 2 == 0 { [0, 1] } else { [1, 0] };
                        for v in order {
                            barrier.wait();
                            let start = std::time::Instant::now();
                            for _ in 0..PER_ROUND {
                                produce(&parts[v], &requests[v], variant(v));
                            }
                            times[v].push(start.elapsed());
                            // Retention while no thread is timing.
                            barrier.wait();
                            parts[v].apply_retention(TS, 86_400_000);
                        }
                    }
                    times
                })
            })
            .collect();
        handles
            .into_iter()
            .map(|h| h.join().expect("producer thread"))
            .collect()
    });
    // A round of simultaneous produces lasts as long as its slowest thread.
    let per_round = |v: usize| -> Vec<f64> {
        (0..ROUNDS)
            .map(|r| {
                let wall = times.iter().map(|t| t[v][r]).max().unwrap_or_default();
                wall.as_nanos() as f64 / PER_ROUND as f64
            })
            .collect()
    };
    let (without, with) = (per_round(0), per_round(1));
    let cost = without.iter().zip(&with).map(|(a, b)| b - a).collect();
    Paired {
        without_ns: median(without),
        with_ns: median(with),
        cost_ns: median(cost),
    }
}

fn main() {
    let mut criterion = Criterion::default()
        .warm_up_time(Duration::from_millis(500))
        .measurement_time(Duration::from_secs(3))
        .sample_size(20)
        .configure_from_args();
    let metrics = BrokerMetrics::new();
    let totals: [RefCell<Totals>; 3] = Default::default();
    let [without, with, alone] = &totals;
    let record = |t: &RefCell<Totals>, iters: u64, time: Duration| {
        let mut t = t.borrow_mut();
        t.iters += iters;
        t.time += time;
        time
    };

    let mut group = criterion.benchmark_group("produce_path");
    group.bench_function("without_metrics", |b| {
        b.iter_custom(|iters| record(without, iters, run(iters, None)))
    });
    group.bench_function("with_metrics", |b| {
        b.iter_custom(|iters| record(with, iters, run(iters, Some(&metrics))))
    });
    group.finish();

    // The metrics work of one produce request on its own, with nothing around it.
    let body = frame::decode_request(request_frame(0))
        .expect("decodes")
        .body
        .expect("body");
    criterion.bench_function("metrics_work_alone", |b| {
        b.iter_custom(|iters| {
            let start = std::time::Instant::now();
            for _ in 0..iters {
                let api = metrics.api(black_box(&body), 1200);
                let started = Instant::now();
                metrics.bytes_in(black_box(1100));
                api.observe(started.elapsed(), 100);
            }
            record(alone, iters, start.elapsed())
        })
    });
    criterion.final_summary();
    // `cargo test --benches` runs each benchmark once as a test (criterion's test
    // mode, without `--bench`): no summary to print then.
    if !std::env::args().any(|a| a == "--bench") {
        return;
    }

    let batch_bytes = request_frame(0).len();
    println!(
        "\nproduce path: 1 request = 1 batch of {RECORDS_PER_BATCH} x {RECORD_BYTES} B records \
         ({batch_bytes} B frame), acks=1, appended to the partition log (page cache, no fsync)"
    );
    println!(
        "  criterion, each variant on its own:  without metrics {:.0} ns   with metrics {:.0} ns   \
         the metrics work alone {:.0} ns",
        without.borrow().ns_per_iter(),
        with.borrow().ns_per_iter(),
        alone.borrow().ns_per_iter()
    );
    println!(
        "  paired, {ROUNDS} rounds x {PER_ROUND} produces per variant, alternating \
         (medians; per produce, or per pair of simultaneous produces with 2 threads):"
    );
    println!(
        "  {:<24} {:>16} {:>14} {:>26}",
        "", "without metrics", "with metrics", "metrics cost (paired)"
    );
    for threads in [1, 2] {
        let p = paired(threads, &metrics);
        println!(
            "  {:<24} {:>13.0} ns {:>11.0} ns {:>+15.0} ns ({:+.1}%)",
            if threads == 1 {
                "1 thread".to_string()
            } else {
                format!("{threads} threads, 1 registry")
            },
            p.without_ns,
            p.with_ns,
            p.cost_ns,
            p.cost_ns / p.without_ns * 100.0
        );
    }
}
