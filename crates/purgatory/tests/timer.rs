//! The tokio shell: one reaper task, paused time.

use std::sync::Arc;
use std::time::Duration;

use rand::rngs::SmallRng;
use rand::{Rng, SeedableRng};
use syncline_purgatory::Timer;
use tokio::sync::mpsc;
use tokio::time::Instant;

/// A timer whose handler reports each value with the moment it expired.
fn recording_timer() -> (Timer<u64>, mpsc::UnboundedReceiver<(u64, Instant)>) {
    let (fired, expirations) = mpsc::unbounded_channel();
    let timer = Timer::new("test", move |value| {
        fired
            .send((value, Instant::now()))
            .expect("the test holds the receiver");
    });
    (timer, expirations)
}

fn ms(ms: u64) -> Duration {
    Duration::from_millis(ms)
}

#[tokio::test(start_paused = true)]
async fn expires_at_the_deadline() {
    let (timer, mut expirations) = recording_timer();
    let start = Instant::now();
    let delays = [1, 19, 20, 21, 399, 400, 401, 8000, 1_000_000];
    for delay in delays {
        timer.schedule(ms(delay), delay).expect("future deadline");
    }
    assert_eq!(timer.len(), delays.len());
    for delay in delays {
        let (value, at) = expirations.recv().await.expect("timer alive");
        assert_eq!(value, delay);
        // Paused time jumps straight to the reaper's deadline: exact.
        assert_eq!(at - start, ms(delay), "{delay} ms");
    }
    assert!(timer.is_empty());
}

#[tokio::test(start_paused = true)]
async fn sub_millisecond_deadlines_are_never_early() {
    let (timer, mut expirations) = recording_timer();
    tokio::time::advance(Duration::from_micros(300)).await;
    let scheduled = Instant::now();
    timer
        .schedule(Duration::from_micros(1500), 1)
        .expect("future deadline");
    let (_, at) = expirations.recv().await.expect("timer alive");
    let late = (at - scheduled)
        .checked_sub(Duration::from_micros(1500))
        .expect("expired before its deadline");
    assert!(late <= ms(1), "{late:?} late");
}

#[tokio::test(start_paused = true)]
async fn many_random_timers_each_expire_on_time() {
    let (timer, mut expirations) = recording_timer();
    let mut rng = SmallRng::seed_from_u64(7);
    let start = Instant::now();
    let count = 10_000;
    for _ in 0..count {
        let delay = rng.random_range(1..30_000);
        timer.schedule(ms(delay), delay).expect("future deadline");
    }
    let mut last = Duration::ZERO;
    for _ in 0..count {
        let (delay, at) = expirations.recv().await.expect("timer alive");
        assert_eq!(at - start, ms(delay));
        assert!(at - start >= last, "expired out of order");
        last = at - start;
    }
    assert!(timer.is_empty());
}

#[tokio::test(start_paused = true)]
async fn an_earlier_timer_wakes_the_sleeping_reaper() {
    let (timer, mut expirations) = recording_timer();
    let start = Instant::now();
    timer.schedule(ms(10_000), 10).expect("future deadline");
    // Let the reaper go to sleep until the 10 s bucket.
    for _ in 0..3 {
        tokio::task::yield_now().await;
    }
    timer.schedule(ms(1000), 1).expect("future deadline");
    let (value, at) = expirations.recv().await.expect("timer alive");
    assert_eq!((value, at - start), (1, ms(1000)));
    let (value, at) = expirations.recv().await.expect("timer alive");
    assert_eq!((value, at - start), (10, ms(10_000)));
}

#[tokio::test(start_paused = true)]
async fn a_cancelled_timer_never_expires() {
    let (timer, mut expirations) = recording_timer();
    let cancelled = timer.schedule(ms(100), 1).expect("future deadline");
    timer.schedule(ms(200), 2).expect("future deadline");
    assert_eq!(timer.cancel(cancelled), Some(1));
    assert_eq!(timer.cancel(cancelled), None);
    assert_eq!(timer.len(), 1);
    let (value, _) = expirations.recv().await.expect("timer alive");
    assert_eq!(value, 2);
    assert!(expirations.try_recv().is_err());
}

#[tokio::test(start_paused = true)]
async fn deadlines_not_in_the_future_are_handed_back() {
    let (timer, _expirations) = recording_timer();
    assert_eq!(timer.schedule(Duration::ZERO, 1), Err(1));
    assert_eq!(timer.schedule_at(Instant::now(), 2), Err(2));
    tokio::time::advance(ms(5)).await;
    assert_eq!(timer.schedule_at(Instant::now() - ms(1), 3), Err(3));
    // A timeout past what an Instant holds stays pending.
    assert!(timer.schedule(Duration::MAX, 4).is_ok());
    assert_eq!(timer.len(), 1);
}

#[tokio::test(start_paused = true)]
async fn a_panicking_handler_does_not_stop_the_reaper() {
    let (fired, mut expirations) = mpsc::unbounded_channel();
    let timer = Timer::new("panics", move |value: u64| {
        assert_ne!(value, 1, "handler panics on 1, on purpose");
        fired.send(value).expect("the test holds the receiver");
    });
    timer.schedule(ms(1), 1).expect("future deadline");
    timer.schedule(ms(2), 2).expect("future deadline");
    assert_eq!(expirations.recv().await, Some(2));
}

#[tokio::test(start_paused = true)]
async fn shutdown_stops_the_reaper_and_drops_what_is_pending() {
    let pending = Arc::new(());
    let handler_state = Arc::new(());
    let in_handler = Arc::clone(&handler_state);
    let timer = Timer::new("shutdown", move |_: Arc<()>| {
        let _ = &in_handler;
    });
    timer
        .schedule(ms(100), Arc::clone(&pending))
        .expect("future deadline");
    timer.shutdown().await;
    assert_eq!(Arc::strong_count(&pending), 1, "pending value not dropped");
    assert_eq!(
        Arc::strong_count(&handler_state),
        1,
        "reaper still holds its handler"
    );
}
