//! Replication throttles (Kafka's `leader.replication.throttled.rate` and
//! `follower.replication.throttled.rate`): a byte-rate bound on the catch-up traffic
//! of replicas a reassignment is adding, so that moving a large partition does not
//! take the leader's disk and network from the producers and the in-sync followers.
//!
//! Which replicas are throttled is decided by [`is_throttled`]: a replica the
//! partition is *adding* that is not in its ISR. An in-sync replica is never held
//! back: it is what an `acks=all` write waits for, so throttling it would throttle
//! the producers (Kafka makes the same exception).
//!
//! The bound is a [`TokenBucket`] per broker and side (the broker's `quota`
//! module shares one under a lock): `rate` bytes a second, with
//! bursts up to one second's worth. Bytes are recorded after they moved (one fetch
//! may overdraw the bucket), and a throttled replica gets nothing more until the
//! bucket is positive again, so over any long run the throttled traffic stays within
//! `rate` plus one fetch.

use std::time::{Duration, Instant};

/// Whether `replica`'s replication of a partition is throttled, given the
/// partition's adding replicas and ISR as last committed.
#[must_use]
pub fn is_throttled(replica: i32, adding: &[i32], isr: &[i32]) -> bool {
    adding.contains(&replica) && !isr.contains(&replica)
}

/// One side's bound: `rate` bytes a second, bursts up to one second's worth.
#[derive(Debug, Clone)]
pub struct TokenBucket {
    rate: u64,
    /// Bytes that may move now; negative after a fetch overdrew it.
    tokens: f64,
    refilled_at: Instant,
}

impl TokenBucket {
    /// A full bucket of `rate` bytes a second (`rate` ≥ 1).
    #[must_use]
    pub fn new(rate: u64, now: Instant) -> TokenBucket {
        let rate = rate.max(1);
        TokenBucket {
            rate,
            tokens: rate as f64,
            refilled_at: now,
        }
    }

    fn refill(&mut self, now: Instant) {
        let elapsed = now
            .saturating_duration_since(self.refilled_at)
            .as_secs_f64();
        self.tokens = (self.tokens + elapsed * self.rate as f64).min(self.rate as f64);
        self.refilled_at = now;
    }

    /// How long throttled replicas must wait before they may move bytes again:
    /// zero when the bucket is positive.
    pub fn wait(&mut self, now: Instant) -> Duration {
        self.refill(now);
        if self.tokens > 0.0 {
            Duration::ZERO
        } else {
            // Strictly past the point where the bucket is back at zero.
            Duration::from_secs_f64(-self.tokens / self.rate as f64) + Duration::from_millis(1)
        }
    }

    /// Whether throttled replicas must wait now.
    pub fn is_exceeded(&mut self, now: Instant) -> bool {
        !self.wait(now).is_zero()
    }

    /// Counts `bytes` moved for throttled replicas.
    pub fn record(&mut self, bytes: usize, now: Instant) {
        self.refill(now);
        self.tokens -= bytes as f64;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_an_adding_replica_out_of_the_isr_is_throttled() {
        assert!(is_throttled(4, &[4], &[1, 2, 3]));
        // Caught up: in the ISR, an acks=all write waits for it.
        assert!(!is_throttled(4, &[4], &[1, 2, 3, 4]));
        // An existing replica out of the ISR is not part of a move.
        assert!(!is_throttled(3, &[4], &[1, 2]));
        assert!(!is_throttled(3, &[], &[1, 2]));
    }

    #[test]
    fn a_full_bucket_allows_one_second_of_bytes_then_refills_at_the_rate() {
        let t0 = Instant::now();
        let mut q = TokenBucket::new(1000, t0);
        assert!(!q.is_exceeded(t0));
        q.record(600, t0);
        assert!(!q.is_exceeded(t0), "400 bytes are left");
        q.record(600, t0);
        // 200 bytes overdrawn: 200 ms at 1000 B/s (plus the 1 ms margin).
        assert!(q.is_exceeded(t0));
        assert_eq!(q.wait(t0), Duration::from_millis(201));
        let later = t0 + Duration::from_millis(100);
        assert!(q.is_exceeded(later));
        assert_eq!(q.wait(later), Duration::from_millis(101));
        assert!(!q.is_exceeded(t0 + Duration::from_millis(201)));
    }

    #[test]
    fn an_idle_bucket_holds_at_most_one_second_of_bytes() {
        let t0 = Instant::now();
        let mut q = TokenBucket::new(1000, t0);
        let much_later = t0 + Duration::from_secs(3600);
        q.record(1000, much_later);
        // An hour idle saved nothing beyond the one-second burst.
        assert!(q.is_exceeded(much_later));
        q.record(1, much_later + Duration::from_secs(1));
        assert!(!q.is_exceeded(much_later + Duration::from_secs(1)));
    }

    #[test]
    fn over_a_long_run_the_bytes_stay_within_the_rate_plus_one_burst() {
        // A fetcher that takes 64 KiB whenever it may, every 10 ms, for 10 s.
        let t0 = Instant::now();
        let rate = 100_000u64;
        let mut q = TokenBucket::new(rate, t0);
        let mut moved = 0u64;
        for step in 0..1000u64 {
            let now = t0 + Duration::from_millis(10 * step);
            if !q.is_exceeded(now) {
                q.record(65_536, now);
                moved += 65_536;
            }
        }
        // 10 s at the rate, one second of burst, one fetch of overdraft.
        let bound = rate * 10 + rate + 65_536;
        assert!(moved <= bound, "moved {moved} > {bound}");
        assert!(
            moved >= rate * 9,
            "moved {moved}: the bound starved the replica"
        );
    }
}
