//! Replication throttles (Kafka's `leader.replication.throttled.rate` and
//! `follower.replication.throttled.rate`): the rule, which replicas are
//! throttled and the token bucket that bounds them, is
//! `syncline_replication::throttle`; here one bucket per broker and side is
//! shared by the fetch paths under a lock, on tokio's clock.

use parking_lot::Mutex;
use syncline_replication::throttle::TokenBucket;
use tokio::time::{Duration, Instant};

/// One side's bound, shared: a token bucket of `rate` bytes a second.
#[derive(Debug)]
pub(crate) struct ReplicationQuota {
    bucket: Mutex<TokenBucket>,
}

impl ReplicationQuota {
    /// A full bucket of `rate` bytes a second (`rate` ≥ 1).
    pub(crate) fn new(rate: u64, now: Instant) -> ReplicationQuota {
        ReplicationQuota {
            bucket: Mutex::new(TokenBucket::new(rate, now.into_std())),
        }
    }

    /// How long throttled replicas must wait before they may move bytes again:
    /// zero when the bucket is positive.
    pub(crate) fn wait(&self, now: Instant) -> Duration {
        self.bucket.lock().wait(now.into_std())
    }

    /// Whether throttled replicas must wait now.
    pub(crate) fn is_exceeded(&self, now: Instant) -> bool {
        self.bucket.lock().is_exceeded(now.into_std())
    }

    /// Counts `bytes` moved for throttled replicas.
    pub(crate) fn record(&self, bytes: usize, now: Instant) {
        self.bucket.lock().record(bytes, now.into_std());
    }
}
