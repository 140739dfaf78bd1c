//! Timer throughput: this crate's `TimingWheel` beside tokio-util's
//! `DelayQueue`, for a million timers with random deadlines.
//!
//! `cargo bench -p syncline-purgatory --bench timer`. A plain binary rather
//! than criterion: the point is the two figures side by side and their ratio
//! in one run, in a few seconds.

use std::future::poll_fn;
use std::hint::black_box;
use std::time::{Duration, Instant};

use rand::rngs::SmallRng;
use rand::{Rng, SeedableRng};
use syncline_purgatory::{Timer, TimerKey, TimingWheel};
use tokio_util::time::DelayQueue;

const TIMERS: usize = 1_000_000;
/// Deadlines are drawn from `1..MAX_DEADLINE_MS`: a deadline of 0 would be
/// due at insert, which the two structures treat differently.
const MAX_DEADLINE_MS: u64 = 30_000;
const ROUNDS: usize = 3;

fn main() {
    let mut rng = SmallRng::seed_from_u64(0x5eed);
    let deadlines: Vec<u64> = (0..TIMERS)
        .map(|_| rng.random_range(1..MAX_DEADLINE_MS))
        .collect();
    // DelayQueue reads tokio's clock; paused time makes its expiry run as
    // fast as it can, like the wheel driven by hand.
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_time()
        .start_paused(true)
        .build()
        .expect("tokio runtime");

    println!(
        "{TIMERS} timers, deadlines uniform in 1..{MAX_DEADLINE_MS} ms, best of {ROUNDS} rounds"
    );

    let wheel = best(|| wheel_insert_cancel(&deadlines));
    let queue = best(|| runtime.block_on(delay_queue_insert_remove(&deadlines)));
    let timer = best(|| runtime.block_on(timer_insert_cancel(&deadlines)));
    println!("insert + cancel (all inserted, then all cancelled):");
    report("TimingWheel", wheel);
    report("DelayQueue", queue);
    report("Timer (mutex + clock)", timer);
    ratio(wheel, queue);

    let wheel = best(|| wheel_insert_expire(&deadlines, false));
    let stepped = best(|| wheel_insert_expire(&deadlines, true));
    let queue = best(|| runtime.block_on(delay_queue_insert_expire(&deadlines)));
    println!("insert + expire (all inserted, clock moved past the last deadline, all drained):");
    report("TimingWheel, one advance", wheel);
    report("TimingWheel, bucket by bucket", stepped);
    report("DelayQueue", queue);
    ratio(wheel, queue);
}

fn best(mut run: impl FnMut() -> Duration) -> Duration {
    (0..ROUNDS).map(|_| run()).min().expect("ROUNDS > 0")
}

fn report(what: &str, took: Duration) {
    let ops_per_s = TIMERS as f64 / took.as_secs_f64();
    let ns_per_op = took.as_nanos() as f64 / TIMERS as f64;
    println!(
        "  {what:<30} {:>7.2} M ops/s  {ns_per_op:>6.1} ns/op",
        ops_per_s / 1e6
    );
}

fn ratio(wheel: Duration, queue: Duration) {
    println!(
        "  ratio TimingWheel / DelayQueue: {:.2}x the throughput",
        queue.as_secs_f64() / wheel.as_secs_f64()
    );
}

fn wheel_insert_cancel(deadlines: &[u64]) -> Duration {
    let mut wheel = TimingWheel::new(1, 20, 0);
    let mut keys: Vec<TimerKey> = Vec::with_capacity(deadlines.len());
    let start = Instant::now();
    for (i, &deadline) in deadlines.iter().enumerate() {
        keys.push(wheel.insert(deadline, i).expect("deadline in the future"));
    }
    for key in keys.drain(..) {
        black_box(wheel.cancel(key));
    }
    let took = start.elapsed();
    assert!(wheel.is_empty());
    took
}

fn wheel_insert_expire(deadlines: &[u64], bucket_by_bucket: bool) -> Duration {
    let mut wheel = TimingWheel::new(1, 20, 0);
    let mut expired = 0usize;
    let start = Instant::now();
    for (i, &deadline) in deadlines.iter().enumerate() {
        black_box(wheel.insert(deadline, i).expect("deadline in the future"));
    }
    if bucket_by_bucket {
        // What the reaper does: wake at each bucket's expiration.
        while let Some(next_ms) = wheel.next_bucket_expiration() {
            wheel.advance_and_drain(next_ms, &mut |i| {
                black_box(i);
                expired += 1;
            });
        }
    } else {
        wheel.advance_and_drain(MAX_DEADLINE_MS, &mut |i| {
            black_box(i);
            expired += 1;
        });
    }
    let took = start.elapsed();
    assert_eq!(expired, deadlines.len());
    assert!(wheel.is_empty());
    took
}

async fn delay_queue_insert_remove(deadlines: &[u64]) -> Duration {
    let mut queue = DelayQueue::new();
    let mut keys = Vec::with_capacity(deadlines.len());
    let start = Instant::now();
    for (i, &deadline) in deadlines.iter().enumerate() {
        keys.push(queue.insert(i, Duration::from_millis(deadline)));
    }
    for key in keys.drain(..) {
        black_box(queue.remove(&key));
    }
    let took = start.elapsed();
    assert!(queue.is_empty());
    took
}

async fn delay_queue_insert_expire(deadlines: &[u64]) -> Duration {
    let mut queue = DelayQueue::new();
    let mut expired = 0usize;
    let start = Instant::now();
    for (i, &deadline) in deadlines.iter().enumerate() {
        black_box(queue.insert(i, Duration::from_millis(deadline)));
    }
    tokio::time::advance(Duration::from_millis(MAX_DEADLINE_MS)).await;
    while let Some(entry) = poll_fn(|cx| queue.poll_expired(cx)).await {
        black_box(entry.into_inner());
        expired += 1;
    }
    let took = start.elapsed();
    assert_eq!(expired, deadlines.len());
    took
}

async fn timer_insert_cancel(deadlines: &[u64]) -> Duration {
    let timer = Timer::new("bench", |_: usize| {});
    let mut keys = Vec::with_capacity(deadlines.len());
    let start = Instant::now();
    for (i, &deadline) in deadlines.iter().enumerate() {
        keys.push(
            timer
                .schedule(Duration::from_millis(deadline), i)
                .expect("deadline in the future"),
        );
    }
    for key in keys.drain(..) {
        black_box(timer.cancel(key));
    }
    let took = start.elapsed();
    assert!(timer.is_empty());
    timer.shutdown().await;
    took
}
