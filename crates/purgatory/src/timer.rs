//! [`Timer`]: the tokio shell around a [`TimingWheel`].
//!
//! The wheel sits behind a mutex; one reaper task sleeps until the earliest
//! bucket comes due, advances the wheel and runs the expired values through
//! the timer's handler. Nothing else sleeps: a pending timer is a slab entry,
//! not a task. The reaper is woken early (through a [`Notify`]) only when an
//! insert creates a bucket due before the moment it sleeps until.

use std::fmt;
use std::panic::{self, AssertUnwindSafe};
use std::sync::Arc;
use std::time::Duration;

use parking_lot::Mutex;
use tokio::sync::Notify;
use tokio::task::JoinHandle;
use tokio::time::Instant;

use crate::wheel::{TimerKey, TimingWheel};

/// Kafka's tick: 1 ms.
pub const DEFAULT_TICK_MS: u64 = 1;
/// Kafka's wheel size: 20 slots per level.
pub const DEFAULT_WHEEL_SIZE: u32 = 20;
/// Capacity the reaper's batch of expired values keeps between wake-ups: a
/// mass expiry should not pin its peak memory for good.
const EXPIRED_BATCH_KEPT: usize = 1024;

/// A timer service: values scheduled with a deadline are handed to the
/// timer's handler, on its reaper task, once the deadline has passed.
///
/// Expiry is never early and, with the default 1 ms tick, at most a
/// millisecond (plus scheduling) late. The handler runs on the reaper task,
/// one value at a time: it must be short and must not block. A panicking
/// handler is logged and the reaper goes on.
///
/// Dropping the timer stops the reaper; values still pending are dropped
/// without being handled.
pub struct Timer<T> {
    shared: Arc<Shared<T>>,
    reaper: Option<JoinHandle<()>>,
}

type Handler<T> = Box<dyn Fn(T) + Send + Sync>;

struct Shared<T> {
    name: String,
    /// Millisecond 0 of the wheel's clock.
    origin: Instant,
    state: Mutex<State<T>>,
    reaper_wakeup: Notify,
    on_expire: Handler<T>,
}

struct State<T> {
    wheel: TimingWheel<T>,
    /// When the reaper will next look at the wheel, in wheel milliseconds
    /// (`u64::MAX`: only when notified). An insert that creates an earlier
    /// bucket must wake it.
    reaper_wake_ms: u64,
}

impl<T: Send + 'static> Timer<T> {
    /// A timer with Kafka's wheel (1 ms tick, 20 slots) whose reaper hands
    /// expired values to `on_expire`.
    ///
    /// # Panics
    ///
    /// Outside a tokio runtime, which the reaper task is spawned on.
    pub fn new(name: &str, on_expire: impl Fn(T) + Send + Sync + 'static) -> Self {
        Self::with_wheel(name, DEFAULT_TICK_MS, DEFAULT_WHEEL_SIZE, on_expire)
    }

    /// A timer with the given wheel geometry; see [`TimingWheel::new`].
    ///
    /// # Panics
    ///
    /// Outside a tokio runtime, or on a geometry [`TimingWheel::new`]
    /// refuses.
    pub fn with_wheel(
        name: &str,
        tick_ms: u64,
        wheel_size: u32,
        on_expire: impl Fn(T) + Send + Sync + 'static,
    ) -> Self {
        let shared = Arc::new(Shared {
            name: name.to_owned(),
            origin: Instant::now(),
            state: Mutex::new(State {
                wheel: TimingWheel::new(tick_ms, wheel_size, 0),
                reaper_wake_ms: u64::MAX,
            }),
            reaper_wakeup: Notify::new(),
            on_expire: Box::new(on_expire),
        });
        let reaper = tokio::spawn(reap(Arc::clone(&shared)));
        Self {
            shared,
            reaper: Some(reaper),
        }
    }
}

impl<T> Timer<T> {
    /// Schedules `value` to expire `timeout` from now. Returns the value back
    /// if that is not in the future (a zero timeout), or has passed by the time
    /// the wheel takes it (a tiny timeout and a descheduled caller): the caller
    /// handles it itself.
    pub fn schedule(&self, timeout: Duration, value: T) -> Result<TimerKey, T> {
        let now = Instant::now();
        match now.checked_add(timeout) {
            Some(deadline) => self.insert_between(now, deadline, value),
            // Beyond what an Instant can hold: it stays pending until
            // cancelled, which is what such a timeout means.
            None => self.shared.insert(u64::MAX, value),
        }
    }

    /// Schedules `value` to expire at `deadline`. Returns the value back if
    /// the deadline is not in the future.
    pub fn schedule_at(&self, deadline: Instant, value: T) -> Result<TimerKey, T> {
        self.insert_between(Instant::now(), deadline, value)
    }

    fn insert_between(&self, now: Instant, deadline: Instant, value: T) -> Result<TimerKey, T> {
        if deadline <= now {
            return Err(value);
        }
        let since_origin = deadline.saturating_duration_since(self.shared.origin);
        // Rounded up: the wheel fires at whole milliseconds, and rounding
        // down would fire before the deadline. The reaper may have read the
        // clock after `now` (this thread can be descheduled in between), so
        // the wheel can refuse the deadline: only once the reaper's clock has
        // passed it, when handing it back as expired is right.
        let ms = since_origin.as_nanos().div_ceil(1_000_000);
        self.shared
            .insert(u64::try_from(ms).unwrap_or(u64::MAX), value)
    }

    /// Cancels a pending value and returns it; `None` if it has expired (or
    /// is being handled) or was cancelled already. O(1).
    pub fn cancel(&self, key: TimerKey) -> Option<T> {
        self.shared.state.lock().wheel.cancel(key)
    }

    /// Number of values pending.
    pub fn len(&self) -> usize {
        self.shared.state.lock().wheel.len()
    }

    /// Whether no value is pending.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Stops the reaper and waits until it has stopped. Pending values are
    /// dropped without being handled.
    pub async fn shutdown(mut self) {
        if let Some(reaper) = self.reaper.take() {
            reaper.abort();
            // The reaper only stops at an await point, never inside a
            // handler, and the abort is the only way it ends.
            let _aborted = reaper.await;
        }
    }
}

impl<T> Shared<T> {
    fn insert(&self, expiration_ms: u64, value: T) -> Result<TimerKey, T> {
        let mut state = self.state.lock();
        let key = state.wheel.insert(expiration_ms, value)?;
        let mut wake = false;
        if let Some(next_ms) = state.wheel.next_bucket_expiration() {
            if next_ms < state.reaper_wake_ms {
                state.reaper_wake_ms = next_ms;
                wake = true;
            }
        }
        drop(state);
        if wake {
            // notify_one keeps a permit if the reaper is not waiting yet, so
            // a wake-up between its unlock and its select is not lost.
            self.reaper_wakeup.notify_one();
        }
        Ok(key)
    }

    fn now_ms(&self) -> u64 {
        let elapsed = Instant::now().saturating_duration_since(self.origin);
        u64::try_from(elapsed.as_millis()).unwrap_or(u64::MAX)
    }
}

async fn reap<T>(shared: Arc<Shared<T>>) {
    let mut expired = Vec::new();
    loop {
        let next_ms = {
            let mut state = shared.state.lock();
            state
                .wheel
                .advance_and_drain(shared.now_ms(), &mut |value| expired.push(value));
            let next_ms = state.wheel.next_bucket_expiration();
            state.reaper_wake_ms = next_ms.unwrap_or(u64::MAX);
            next_ms
        };
        // Handlers run without the lock: they may schedule or cancel timers.
        for value in expired.drain(..) {
            let handled = panic::catch_unwind(AssertUnwindSafe(|| (shared.on_expire)(value)));
            if handled.is_err() {
                tracing::error!(timer = %shared.name, "timer expiry handler panicked");
            }
        }
        expired.shrink_to(EXPIRED_BATCH_KEPT);
        let wake_at = next_ms.and_then(|ms| shared.origin.checked_add(Duration::from_millis(ms)));
        match wake_at {
            Some(at) => tokio::select! {
                () = tokio::time::sleep_until(at) => {}
                () = shared.reaper_wakeup.notified() => {}
            },
            None => shared.reaper_wakeup.notified().await,
        }
    }
}

impl<T> Drop for Timer<T> {
    fn drop(&mut self) {
        if let Some(reaper) = &self.reaper {
            reaper.abort();
        }
    }
}

impl<T> fmt::Debug for Timer<T> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let state = self.shared.state.lock();
        f.debug_struct("Timer")
            .field("name", &self.shared.name)
            .field("wheel", &state.wheel)
            .field("reaper_wake_ms", &state.reaper_wake_ms)
            .finish()
    }
}
