//! Purgatory throughput for each way an operation enters and leaves it.
//!
//! `cargo bench -p syncline-purgatory --bench purgatory`.

use std::hint::black_box;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use syncline_purgatory::{Completion, DelayedOperation, OpHandle, Purgatory, Watched};

const OPS: usize = 200_000;
const KEYS: u64 = 1_000;
const TIMEOUT: Duration = Duration::from_secs(30);
const ROUNDS: usize = 3;

/// A minimal operation: waits for a shared high watermark, like `acks=all`.
struct WaitForOffset {
    high_watermark: Arc<AtomicU64>,
    offset: u64,
}

impl DelayedOperation for WaitForOffset {
    fn try_complete(&self) -> bool {
        self.high_watermark.load(Ordering::Acquire) >= self.offset
    }

    fn on_complete(&self, how: Completion) {
        black_box(how);
    }
}

/// Best time of each phase over the rounds.
#[derive(Default)]
struct Phases {
    watch: Option<Duration>,
    complete_by_event: Option<Duration>,
    cancel: Option<Duration>,
    expire: Option<Duration>,
}

fn keep_best(best: &mut Option<Duration>, took: Duration) {
    *best = Some(best.map_or(took, |best| best.min(took)));
}

fn main() {
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_time()
        .start_paused(true)
        .build()
        .expect("tokio runtime");
    let mut phases = Phases::default();
    for _ in 0..ROUNDS {
        runtime.block_on(round(&mut phases));
    }
    println!("purgatory, {OPS} operations over {KEYS} keys, best of {ROUNDS} rounds:");
    report("try_complete_else_watch", phases.watch);
    report("check_and_complete (by event)", phases.complete_by_event);
    report("cancel", phases.cancel);
    report("expiry on the reaper", phases.expire);
}

async fn round(phases: &mut Phases) {
    let purgatory: Purgatory<u64, WaitForOffset> = Purgatory::new("throughput");
    let high_watermark = Arc::new(AtomicU64::new(0));
    let watch_all = |offset: u64| -> (Duration, Vec<OpHandle<WaitForOffset>>) {
        let start = Instant::now();
        let handles = (0..OPS as u64)
            .map(|i| {
                let op = WaitForOffset {
                    high_watermark: Arc::clone(&high_watermark),
                    offset,
                };
                match purgatory.try_complete_else_watch(op, TIMEOUT, &[i % KEYS]) {
                    Watched::Waiting(handle) => handle,
                    Watched::Completed(how) => panic!("completed at once: {how:?}"),
                }
            })
            .collect();
        (start.elapsed(), handles)
    };

    let (took, handles) = watch_all(1);
    keep_best(&mut phases.watch, took);
    drop(handles);
    high_watermark.store(1, Ordering::Release);
    let start = Instant::now();
    let completed: usize = (0..KEYS)
        .map(|key| purgatory.check_and_complete(&key))
        .sum();
    keep_best(&mut phases.complete_by_event, start.elapsed());
    assert_eq!(completed, OPS);
    assert_eq!(purgatory.delayed(), 0);

    let (_, handles) = watch_all(2);
    let start = Instant::now();
    for handle in &handles {
        assert!(purgatory.cancel(handle));
    }
    keep_best(&mut phases.cancel, start.elapsed());
    drop(handles);

    let (_, handles) = watch_all(3);
    drop(handles);
    let start = Instant::now();
    // Paused time: the runtime jumps to the reaper's deadline, where every
    // operation expires at once.
    tokio::time::sleep(TIMEOUT + Duration::from_millis(1)).await;
    keep_best(&mut phases.expire, start.elapsed());
    assert_eq!(purgatory.delayed(), 0);
    assert!(
        purgatory.watched() <= 1000,
        "the purge keeps completed entries bounded"
    );
}

fn report(what: &str, took: Option<Duration>) {
    let took = took.expect("ROUNDS > 0");
    println!(
        "  {what:<30} {:>6.2} M ops/s  {:>6.1} ns/op",
        OPS as f64 / took.as_secs_f64() / 1e6,
        took.as_nanos() as f64 / OPS as f64
    );
}
