//! Bytes held per pending delayed operation, through a counting global
//! allocator (in its own binary, since counting slows every allocation).
//!
//! `cargo bench -p syncline-purgatory --bench memory`.

use std::alloc::System;
use std::hint::black_box;
use std::mem::size_of;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;

use stats_alloc::{Region, StatsAlloc, INSTRUMENTED_SYSTEM};
use syncline_purgatory::{Completion, DelayedOperation, Purgatory, Watched};

#[global_allocator]
static GLOBAL: &StatsAlloc<System> = &INSTRUMENTED_SYSTEM;

const OPS: usize = 200_000;

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

fn main() {
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_time()
        .start_paused(true)
        .build()
        .expect("tokio runtime");
    let _entered = runtime.enter();
    println!(
        "memory per pending operation ({OPS} pending, 30 s timeout, the operation itself {} bytes):",
        size_of::<WaitForOffset>()
    );
    for (what, keys) in [("all on one key", 1), ("one key each", OPS as u64)] {
        let purgatory: Purgatory<u64, WaitForOffset> = Purgatory::new("memory");
        let high_watermark = Arc::new(AtomicU64::new(0));
        let region = Region::new(GLOBAL);
        for i in 0..OPS as u64 {
            let op = WaitForOffset {
                high_watermark: Arc::clone(&high_watermark),
                offset: 1,
            };
            let watched =
                purgatory.try_complete_else_watch(op, Duration::from_secs(30), &[i % keys]);
            assert!(matches!(watched, Watched::Waiting(_)));
        }
        let change = region.change();
        let held = change.bytes_allocated - change.bytes_deallocated;
        println!(
            "  {what:<15} {:>6.1} bytes/op (heap, including slab and list slack)",
            held as f64 / OPS as f64
        );
        assert_eq!(purgatory.delayed(), OPS);
    }
}
