//! The purgatory: requests that wait (long-polling fetches, `acks=all`
//! produces) without holding a task or a thread, completed by events on the
//! partitions they watch or expired by a hashed hierarchical timing wheel.
//!
//! # Layout
//!
//! - [`wheel`]: [`TimingWheel`], the pure data structure (Varghese & Lauck,
//!   Kafka's `TimingWheel`): 1 ms ticks, 20 slots, overflow levels on
//!   demand, buckets (not entries) in a delay queue; insert costs a step per
//!   level (at most 15 for any `u64` deadline), cancel is O(1). No clock
//!   inside: the caller passes `now`.
//! - [`timer`]: [`Timer`], the tokio shell: the wheel behind a mutex and one
//!   reaper task that sleeps until the earliest bucket is due.
//! - `operation`: the [`DelayedOperation`] trait, [`Completion`], and the
//!   per-operation state behind an [`OpHandle`].
//! - `watchers`: the sharded map from key to the operations watching it.
//! - `purgatory`: [`Purgatory`], which ties them together as Kafka's
//!   `DelayedOperationPurgatory` does.
//!
//! # Example
//!
//! ```
//! use std::sync::atomic::{AtomicU64, Ordering};
//! use std::sync::Arc;
//! use std::time::Duration;
//! use syncline_purgatory::{Completion, DelayedOperation, Purgatory, Watched};
//!
//! /// An `acks=all` produce waiting for the high watermark to pass its last offset.
//! struct DelayedProduce { high_watermark: Arc<AtomicU64>, required_offset: u64 }
//!
//! impl DelayedOperation for DelayedProduce {
//!     fn try_complete(&self) -> bool {
//!         self.high_watermark.load(Ordering::Acquire) >= self.required_offset
//!     }
//!     fn on_complete(&self, how: Completion) {
//!         println!("produce answered: {how:?}"); // send the response here
//!     }
//! }
//!
//! # #[tokio::main(flavor = "current_thread")]
//! # async fn main() {
//! let purgatory: Purgatory<(String, u32), DelayedProduce> = Purgatory::new("Produce");
//! let hw = Arc::new(AtomicU64::new(0));
//! let partition = ("orders".to_owned(), 0);
//! let op = DelayedProduce { high_watermark: hw.clone(), required_offset: 10 };
//! let Watched::Waiting(handle) =
//!     purgatory.try_complete_else_watch(op, Duration::from_secs(30), &[partition.clone()])
//! else { unreachable!("HW is 0") };
//! hw.store(10, Ordering::Release); // a follower fetch advanced the HW
//! assert_eq!(purgatory.check_and_complete(&partition), 1); // on_complete(Satisfied)
//! assert!(handle.is_completed() && purgatory.delayed() == 0);
//! # }
//! ```

#![warn(missing_docs)]

mod operation;
mod purgatory;
pub mod timer;
mod watchers;
pub mod wheel;

pub use operation::{Completion, DelayedOperation, OpHandle, Watched};
pub use purgatory::{Purgatory, PurgatoryConfig};
pub use timer::Timer;
pub use wheel::{TimerKey, TimingWheel};
