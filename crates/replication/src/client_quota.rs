//! Client byte-rate quotas (Kafka's KIP-13, KIP-124 and KIP-219): how many
//! bytes a second a client may produce (`producer_byte_rate`) or consume
//! (`consumer_byte_rate`), and how long it is throttled once it went over.
//!
//! Three rules, each a pure function of what is passed in (time as
//! milliseconds of a monotonic clock the broker keeps):
//!
//! - [`SampledRate`]: the rate of one entity, Kafka's `Rate` over a
//!   `WindowedSum`: `samples` windows of `sample_ms` each (Kafka's
//!   `quota.window.num` = 11 and `quota.window.size.seconds` = 1), the bytes of
//!   the live windows divided by the time they span, padded to `samples - 1`
//!   full windows while younger (so a new client is measured over ten seconds,
//!   not over its first millisecond).
//! - [`throttle_ms`]: the time that brings an observed rate `O` back to the
//!   quota `T` over the window `W` if nothing more came: `O·W / (W + X) = T`,
//!   so `X = (O - T) / T · W`, capped at the whole window.
//! - [`QuotaEntries::resolve`]: which configured quota applies to a user and
//!   client id, in Kafka's order of the eight levels (most specific first),
//!   and which entity's rate it is measured on ([`MetricTags`]).
//!
//! [`ClientQuotas`] puts them together for one kind of traffic (produce or
//! fetch): bytes in, a [`Charge`] out (the throttle time, the entity; the
//! entities whose rates expired, so that their metrics go too). Whose traffic
//! is charged is the broker's to say: clients' produces and consumers'
//! fetches, never a follower's replication (Kafka exempts it too).
//!
//! Why not [`crate::throttle::TokenBucket`], which bounds replication
//! throttles: a bucket says *whether* bytes may move now, not how long a
//! client that went over must wait, and Kafka's clients read that wait in
//! `throttle_time_ms`; the windowed rate and its formula are what Kafka's
//! clients and operators know.

use std::collections::BTreeMap;

/// The window a rate is measured over: `samples` windows of `sample_ms`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct QuotaWindow {
    /// Kafka's `quota.window.num` (11).
    pub samples: u32,
    /// Kafka's `quota.window.size.seconds` (1), in milliseconds.
    pub sample_ms: u64,
}

impl Default for QuotaWindow {
    fn default() -> QuotaWindow {
        QuotaWindow {
            samples: 11,
            sample_ms: 1000,
        }
    }
}

impl QuotaWindow {
    /// The whole window: the longest a throttle lasts, and how long an idle
    /// entity's rate is remembered.
    #[must_use]
    pub fn total_ms(&self) -> u64 {
        u64::from(self.samples.max(1)) * self.sample_ms.max(1)
    }
}

#[derive(Debug, Clone, Copy, PartialEq)]
struct Sample {
    start_ms: u64,
    bytes: f64,
}

/// One entity's byte rate over a [`QuotaWindow`] (Kafka's `Rate` over a
/// `WindowedSum`).
#[derive(Debug, Clone, Default)]
pub struct SampledRate {
    samples: Vec<Sample>,
    current: usize,
}

impl SampledRate {
    /// Counts `bytes` at `now_ms`, in the current sample or a new one once
    /// the current one is `sample_ms` old.
    pub fn record(&mut self, w: &QuotaWindow, bytes: u64, now_ms: u64) {
        self.purge(w, now_ms);
        let fresh = Sample {
            start_ms: now_ms,
            bytes: 0.0,
        };
        if self.samples.is_empty() {
            self.samples.push(fresh);
            self.current = 0;
        } else if now_ms >= self.samples[self.current].start_ms + w.sample_ms.max(1) {
            // The current sample is complete: the next one, reusing the oldest.
            self.current = (self.current + 1) % w.samples.max(1) as usize;
            if self.current >= self.samples.len() {
                self.samples.push(fresh);
            } else {
                self.samples[self.current] = fresh;
            }
        }
        self.samples[self.current].bytes += bytes as f64;
    }

    /// Takes back `bytes` recorded at the same `now_ms` (the current sample).
    pub fn unrecord(&mut self, w: &QuotaWindow, bytes: u64, now_ms: u64) {
        self.purge(w, now_ms);
        if let Some(s) = self.samples.get_mut(self.current) {
            s.bytes = (s.bytes - bytes as f64).max(0.0);
        }
    }

    /// Forgets samples that started a whole window ago or more (Kafka resets
    /// them to start now, empty).
    fn purge(&mut self, w: &QuotaWindow, now_ms: u64) {
        for s in &mut self.samples {
            if now_ms.saturating_sub(s.start_ms) >= w.total_ms() {
                *s = Sample {
                    start_ms: now_ms,
                    bytes: 0.0,
                };
            }
        }
    }

    /// The time the rate divides by at `now_ms`: since the oldest live
    /// sample started, at least `samples - 1` whole samples.
    #[must_use]
    pub fn window_ms(&mut self, w: &QuotaWindow, now_ms: u64) -> u64 {
        self.purge(w, now_ms);
        let oldest = self
            .samples
            .iter()
            .map(|s| s.start_ms)
            .min()
            .unwrap_or(now_ms);
        let elapsed = now_ms.saturating_sub(oldest);
        let sample_ms = w.sample_ms.max(1);
        let full = elapsed / sample_ms;
        let min_full = u64::from(w.samples.max(1) - 1);
        if full < min_full {
            elapsed + (min_full - full) * sample_ms
        } else {
            elapsed
        }
    }

    /// Bytes a second at `now_ms`.
    #[must_use]
    pub fn measure(&mut self, w: &QuotaWindow, now_ms: u64) -> f64 {
        let window_ms = self.window_ms(w, now_ms);
        let bytes: f64 = self.samples.iter().map(|s| s.bytes).sum();
        if window_ms == 0 {
            return 0.0;
        }
        bytes * 1000.0 / window_ms as f64
    }

    /// Whether nothing was recorded within the whole window before `now_ms`
    /// (the rate is zero: forgetting it changes nothing).
    #[must_use]
    pub fn is_idle(&self, w: &QuotaWindow, now_ms: u64) -> bool {
        self.samples
            .iter()
            .all(|s| s.bytes == 0.0 || now_ms.saturating_sub(s.start_ms) >= w.total_ms())
    }
}

/// How long a client whose rate is `observed_rate` against `quota` (both
/// bytes a second) over `window_ms` is throttled: zero within the quota,
/// else `(observed - quota) / quota · window`, rounded, at most `cap_ms`.
#[must_use]
pub fn throttle_ms(observed_rate: f64, quota: u64, window_ms: u64, cap_ms: u64) -> u64 {
    let quota = quota.max(1) as f64;
    if observed_rate <= quota {
        return 0;
    }
    let ms = ((observed_rate - quota) / quota * window_ms as f64).round();
    (ms as u64).min(cap_ms)
}

/// The bound a `request_percentage` quota (KIP-124) puts on a rate of
/// request handling time, in microseconds of handling a second:
/// `percentage` of one thread is `percentage / 100` seconds a second, so a
/// client may take `percentage / 100 × window` of handling time over the
/// window (10 % over Kafka's 11 s window: 1.1 s). Charging each request's
/// handling time in microseconds to a [`ClientQuotas`] with this bound
/// throttles by the same formula as the byte rates. At least 1.
#[must_use]
pub fn request_time_quota(percentage: f64) -> u64 {
    let micros_per_second = percentage / 100.0 * 1_000_000.0;
    if micros_per_second.is_nan() || micros_per_second < 1.0 {
        return 1;
    }
    micros_per_second.round() as u64
}

/// One side of a quota entity: absent, Kafka's `<default>`, or a name.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum EntityName {
    /// `<default>`: every user (or client id) without a quota of its own.
    Default,
    /// One user or client id.
    Named(String),
}

/// A quota entity, as Kafka names them: a user, a client id, or both, each
/// a name or the default. Both absent names nothing.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct QuotaEntity {
    /// The user side (`/config/users/...`), if any.
    pub user: Option<EntityName>,
    /// The client-id side (`.../clients/...`), if any.
    pub client_id: Option<EntityName>,
}

impl QuotaEntity {
    /// `/config/clients/<default>`: what the broker config's static defaults
    /// (`quota_producer_default`, `quota_consumer_default`) set.
    #[must_use]
    pub fn default_client_id() -> QuotaEntity {
        QuotaEntity {
            user: None,
            client_id: Some(EntityName::Default),
        }
    }
}

/// The entity a rate is kept for (Kafka's quota metric tags): the user and
/// client id of the requests charged to it, each empty when the quota that
/// applies does not name that side. Clients sharing tags share a budget.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Hash, Default)]
pub struct MetricTags {
    /// The user, or empty.
    pub user: String,
    /// The client id, or empty.
    pub client_id: String,
}

/// A quota that applies: bytes a second, and whose rate it bounds.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Resolved {
    /// Bytes a second.
    pub quota: u64,
    /// The entity the rate is kept for.
    pub tags: MetricTags,
}

/// The configured quotas of one kind (bytes a second per entity).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct QuotaEntries {
    entries: BTreeMap<QuotaEntity, u64>,
}

impl QuotaEntries {
    /// Sets `entity`'s quota (`None`: removes it).
    pub fn set(&mut self, entity: QuotaEntity, bytes_per_second: Option<u64>) {
        match bytes_per_second {
            Some(rate) => {
                self.entries.insert(entity, rate.max(1));
            }
            None => {
                self.entries.remove(&entity);
            }
        }
    }

    /// Whether no quota is configured (then nothing is measured).
    #[must_use]
    pub fn is_empty(&self) -> bool {
        self.entries.is_empty()
    }

    /// The quota for requests of `user` with `client_id`, first found in
    /// Kafka's order (most specific first):
    ///
    /// 1. `/config/users/<user>/clients/<client-id>`
    /// 2. `/config/users/<user>/clients/<default>`
    /// 3. `/config/users/<user>`
    /// 4. `/config/users/<default>/clients/<client-id>`
    /// 5. `/config/users/<default>/clients/<default>`
    /// 6. `/config/users/<default>`
    /// 7. `/config/clients/<client-id>`
    /// 8. `/config/clients/<default>`
    ///
    /// The rate is kept per actual user and client id on the sides the
    /// level names (a default client-id quota gives each client id a budget
    /// of its own); `None`: unlimited.
    #[must_use]
    pub fn resolve(&self, user: &str, client_id: &str) -> Option<Resolved> {
        use EntityName::{Default, Named};
        let (u, c) = (Named(user.to_string()), Named(client_id.to_string()));
        let levels = [
            (Some(u.clone()), Some(c.clone())),
            (Some(u.clone()), Some(Default)),
            (Some(u), None),
            (Some(Default), Some(c.clone())),
            (Some(Default), Some(Default)),
            (Some(Default), None),
            (None, Some(c)),
            (None, Some(Default)),
        ];
        levels.into_iter().find_map(|(user_side, client_side)| {
            let tags = MetricTags {
                user: user_side.as_ref().map_or("", |_| user).to_string(),
                client_id: client_side.as_ref().map_or("", |_| client_id).to_string(),
            };
            let entity = QuotaEntity {
                user: user_side,
                client_id: client_side,
            };
            self.entries
                .get(&entity)
                .map(|&quota| Resolved { quota, tags })
        })
    }
}

/// What charging a request's bytes decided.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
#[must_use]
pub struct Charge {
    /// How long the client is throttled: its answer says so
    /// (`throttle_time_ms`) and its connection is not read meanwhile.
    pub throttle_ms: u64,
    /// The entity charged, if a quota applies.
    pub tags: Option<MetricTags>,
    /// Entities whose rates were forgotten (idle for the whole window): their
    /// metrics may go.
    pub expired: Vec<MetricTags>,
}

/// One kind of traffic's quotas (produce or fetch): the configured entries
/// and each charged entity's rate. Rates idle for a whole window are
/// forgotten, so the state is bounded by the entities active in the last
/// window.
#[derive(Debug, Clone)]
pub struct ClientQuotas {
    window: QuotaWindow,
    entries: QuotaEntries,
    /// A BTreeMap, not a HashMap: each HashMap draws hash keys from the
    /// thread's sequence, and one more at a broker's start changes the
    /// iteration order of every HashMap made after it, so the simulation's
    /// seeds would run other schedules.
    rates: BTreeMap<MetricTags, SampledRate>,
    swept_at_ms: u64,
}

impl ClientQuotas {
    /// Quotas `entries` measured over `window`.
    #[must_use]
    pub fn new(window: QuotaWindow, entries: QuotaEntries) -> ClientQuotas {
        ClientQuotas {
            window,
            entries,
            rates: BTreeMap::new(),
            swept_at_ms: 0,
        }
    }

    /// Replaces the configured quotas (the cluster's changed); the rates
    /// measured so far are kept, and those no quota applies to any more are
    /// forgotten once idle, as any other.
    pub fn set_entries(&mut self, entries: QuotaEntries) {
        self.entries = entries;
    }

    /// Whether any quota is configured (else nothing need be charged).
    #[must_use]
    pub fn enabled(&self) -> bool {
        !self.entries.is_empty()
    }

    /// Charges `bytes` of `user` with `client_id` at `now_ms`, recorded
    /// first (as Kafka records, then checks): the throttle time if the rate
    /// is then over the quota.
    pub fn record(&mut self, user: &str, client_id: &str, bytes: u64, now_ms: u64) -> Charge {
        let expired = self.sweep(now_ms);
        let Some(Resolved { quota, tags }) = self.entries.resolve(user, client_id) else {
            return Charge {
                expired,
                ..Charge::default()
            };
        };
        let w = self.window;
        let rate = self.rates.entry(tags.clone()).or_default();
        rate.record(&w, bytes, now_ms);
        let observed = rate.measure(&w, now_ms);
        let window_ms = rate.window_ms(&w, now_ms);
        Charge {
            throttle_ms: throttle_ms(observed, quota, window_ms, w.total_ms()),
            tags: Some(tags),
            expired,
        }
    }

    /// The rate of `tags` at `now_ms` (units a second; zero for an entity
    /// not measured): what the per-entity metrics show.
    pub fn rate(&mut self, tags: &MetricTags, now_ms: u64) -> f64 {
        let w = self.window;
        self.rates
            .get_mut(tags)
            .map_or(0.0, |rate| rate.measure(&w, now_ms))
    }

    /// Takes back `bytes` just charged to `tags` at `now_ms`: a consumer's
    /// throttled fetch is answered without its records (Kafka's KIP-219), so
    /// they do not count against it.
    pub fn unrecord(&mut self, tags: &MetricTags, bytes: u64, now_ms: u64) {
        let w = self.window;
        if let Some(rate) = self.rates.get_mut(tags) {
            rate.unrecord(&w, bytes, now_ms);
        }
    }

    /// Forgets the rates idle for a whole window, at most once a window.
    fn sweep(&mut self, now_ms: u64) -> Vec<MetricTags> {
        if now_ms.saturating_sub(self.swept_at_ms) < self.window.total_ms() {
            return Vec::new();
        }
        self.swept_at_ms = now_ms;
        let w = self.window;
        let mut expired = Vec::new();
        self.rates.retain(|tags, rate| {
            let idle = rate.is_idle(&w, now_ms);
            if idle {
                expired.push(tags.clone());
            }
            !idle
        });
        expired
    }

    /// How many entities' rates are kept.
    #[must_use]
    pub fn tracked(&self) -> usize {
        self.rates.len()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const W: QuotaWindow = QuotaWindow {
        samples: 11,
        sample_ms: 1000,
    };

    fn client_default(rate: u64) -> ClientQuotas {
        let mut entries = QuotaEntries::default();
        entries.set(QuotaEntity::default_client_id(), Some(rate));
        ClientQuotas::new(W, entries)
    }

    /// Kafka's ClientQuotaManagerTest.testQuotaViolation (its produce case):
    /// 400 bytes/s against a 500 bytes/s quota is never throttled; one
    /// burst over is throttled by the formula, and once the window slid past
    /// it the client is unthrottled again.
    #[test]
    fn test_quota_violation() {
        let mut q = client_default(500);
        let mut t = 0;
        // Ten seconds at 400 bytes a second: within the quota.
        for _ in 0..10 {
            assert_eq!(q.record("", "c", 400, t).throttle_ms, 0, "at {t}");
            t += 1000;
        }
        // 2300 bytes more at t = 10.5 s, half into the eleventh sample:
        // 6300 bytes over the 10.5 s since the first sample is 600 bytes/s.
        t += 500;
        let c = q.record("", "c", 2300, t);
        // (600 - 500) / 500 · 10,500 ms = 2100 ms, as Kafka's test finds.
        assert_eq!(c.throttle_ms, 2100);
        // Back under the quota once the window has slid: the 10 s at 400
        // bytes/s drop out one by one.
        t += 11_000;
        assert_eq!(q.record("", "c", 0, t).throttle_ms, 0);
    }

    /// A new client is measured over at least `samples - 1` windows (Kafka's
    /// Rate pads a young rate): a first burst of up to ten seconds' worth is
    /// not throttled, one byte more is.
    #[test]
    fn a_young_rate_is_padded_to_ten_windows() {
        let mut q = client_default(1000);
        assert_eq!(q.record("", "c", 10_000, 0).throttle_ms, 0);
        // 10,001 bytes over the padded 10 s: 1000.1 bytes/s, 0.1 over:
        // 1 ms.
        assert_eq!(q.record("", "c", 1, 0).throttle_ms, 1);
        // Another ten seconds' worth: 2000 bytes/s, throttled a whole
        // padded window.
        assert_eq!(q.record("", "c", 9_999, 0).throttle_ms, 10_000);
    }

    #[test]
    fn the_throttle_is_capped_at_the_whole_window() {
        let mut q = client_default(1);
        assert_eq!(q.record("", "c", 1 << 30, 0).throttle_ms, W.total_ms());
        assert_eq!(throttle_ms(1e12, 1, 10_000, 11_000), 11_000);
    }

    /// The formula, `(observed - quota) / quota · window`: zero at or
    /// under the quota, rounded to the millisecond, capped.
    #[test]
    fn throttle_time_table() {
        for (observed, quota, window_ms, expected) in [
            (1000.0, 1000, 10_000, 0),
            (999.0, 1000, 10_000, 0),
            (1500.0, 1000, 10_000, 5000),
            (1500.0, 1000, 11_000, 5500),
            (1000.4, 1000, 1000, 0),
            (1000.6, 1000, 1000, 1),
            (3000.0, 1000, 10_000, 11_000),
        ] {
            assert_eq!(
                throttle_ms(observed, quota, window_ms, 11_000),
                expected,
                "{observed} against {quota} over {window_ms} ms"
            );
        }
    }

    #[test]
    fn samples_older_than_the_window_are_forgotten() {
        let mut r = SampledRate::default();
        r.record(&W, 11_000, 0);
        assert!((r.measure(&W, 0) - 1100.0).abs() < 1e-9);
        // At 11 s the first sample is a whole window old.
        assert!(!r.is_idle(&W, 10_999));
        assert!(r.is_idle(&W, 11_000));
        assert_eq!(r.measure(&W, 11_000), 0.0);
    }

    #[test]
    fn a_full_window_divides_by_the_time_since_the_oldest_sample() {
        let mut r = SampledRate::default();
        for s in 0..=10u64 {
            r.record(&W, 1000, s * 1000);
        }
        // Eleven samples at 0..=10 s; at 10.5 s they span 10.5 s.
        assert_eq!(r.window_ms(&W, 10_500), 10_500);
        assert!((r.measure(&W, 10_500) - 11_000.0 / 10.5).abs() < 1e-6);
        // At 11 s the first is gone: 10,000 bytes over the 10 s since 1 s.
        assert_eq!(r.window_ms(&W, 11_000), 10_000);
        assert!((r.measure(&W, 11_000) - 1000.0).abs() < 1e-9);
    }

    /// A client that sends as fast as it is let through, waiting out each
    /// throttle as KIP-219 asks, is held to the quota once its first window
    /// has passed: within 5 % over three minutes (Kafka's windowed rate lets
    /// a greedy client through in bursts as whole samples expire, so
    /// shorter spans swing more).
    #[test]
    fn a_client_that_waits_out_its_throttles_is_held_to_the_quota() {
        let quota = 1 << 20;
        let mut q = client_default(quota);
        let (mut t, mut steady) = (0u64, 0u64);
        let request = 64 << 10;
        while t < 200_000 {
            let c = q.record("", "c", request, t);
            if t >= 20_000 {
                steady += request;
            }
            // 1 ms a request, plus the throttle.
            t += 1 + c.throttle_ms;
        }
        let ratio = steady as f64 / (quota as f64 * (t - 20_000) as f64 / 1000.0);
        assert!(
            (0.95..=1.05).contains(&ratio),
            "{steady} bytes: {ratio} of the quota"
        );
    }

    /// As Kafka's ClientQuotaManagerTest.testUserClientIdQuotaParsing: each
    /// of the eight levels wins over the ones after it, and the rate is kept
    /// per the sides the winning level names.
    #[test]
    fn test_user_client_id_quota_parsing() {
        use EntityName::{Default as D, Named as N};
        let n = |s: &str| N(s.to_string());
        let levels = [
            (Some(n("u1")), Some(n("c1")), 1, "u1", "c1"),
            (Some(n("u1")), Some(D), 2, "u1", "c1"),
            (Some(n("u1")), None, 3, "u1", ""),
            (Some(D), Some(n("c1")), 4, "u1", "c1"),
            (Some(D), Some(D), 5, "u1", "c1"),
            (Some(D), None, 6, "u1", ""),
            (None, Some(n("c1")), 7, "", "c1"),
            (None, Some(D), 8, "", "c1"),
        ];
        let mut entries = QuotaEntries::default();
        for (user, client_id, rate, ..) in levels.iter().cloned() {
            entries.set(QuotaEntity { user, client_id }, Some(rate));
        }
        // Remove the most specific level one at a time: the next one wins.
        for (user, client_id, rate, tag_user, tag_client) in levels {
            let resolved = entries.resolve("u1", "c1").expect("a quota applies");
            assert_eq!(resolved.quota, rate);
            assert_eq!(
                resolved.tags,
                MetricTags {
                    user: tag_user.into(),
                    client_id: tag_client.into()
                },
                "level {rate}"
            );
            entries.set(QuotaEntity { user, client_id }, None);
        }
        assert_eq!(entries.resolve("u1", "c1"), None, "unlimited");
    }

    #[test]
    fn other_users_and_client_ids_fall_through_to_the_defaults() {
        let mut entries = QuotaEntries::default();
        entries.set(
            QuotaEntity {
                user: Some(EntityName::Named("u1".into())),
                client_id: None,
            },
            Some(10),
        );
        entries.set(QuotaEntity::default_client_id(), Some(20));
        assert_eq!(entries.resolve("u1", "any").map(|r| r.quota), Some(10));
        assert_eq!(entries.resolve("u2", "any").map(|r| r.quota), Some(20));
    }

    /// With a default client-id quota each client id has a budget of its own
    /// (Kafka's testQuotaParsing: a default quota applies to each client id
    /// separately).
    #[test]
    fn each_client_id_has_its_own_budget_under_a_default_quota() {
        let mut q = client_default(1000);
        assert!(q.record("", "greedy", 50_000, 0).throttle_ms > 0);
        assert_eq!(q.record("", "polite", 500, 0).throttle_ms, 0);
        assert_eq!(q.tracked(), 2);
    }

    /// A throttled fetch's bytes taken back (as Kafka's fetch handling
    /// unrecords them) leave the rate as it was, so the next fetch is judged
    /// without them.
    #[test]
    fn unrecorded_bytes_do_not_count() {
        let mut q = client_default(1000);
        let first = q.record("", "c", 9_000, 0);
        assert_eq!(first.throttle_ms, 0);
        let over = q.record("", "c", 5_000, 0);
        assert_eq!(over.throttle_ms, 4000, "14,000 bytes over 10 s");
        let tags = over.tags.unwrap();
        assert!((q.rate(&tags, 0) - 1400.0).abs() < 1e-9);
        q.unrecord(&tags, 5_000, 0);
        assert!(
            (q.rate(&tags, 0) - 900.0).abs() < 1e-9,
            "the rate without them"
        );
        // As if the 5,000 bytes never went: 9,500 bytes, within the quota.
        assert_eq!(q.record("", "c", 500, 0).throttle_ms, 0);
    }

    #[test]
    fn no_quota_charges_nothing_and_keeps_nothing() {
        let mut q = ClientQuotas::new(W, QuotaEntries::default());
        assert!(!q.enabled());
        let c = q.record("", "c", u64::MAX / 2, 0);
        assert_eq!((c.throttle_ms, c.tags), (0, None));
        assert_eq!(q.tracked(), 0);
    }

    /// Kafka's ClientRequestQuotaManagerTest semantics: a 10 % request quota
    /// over the (padded) ten seconds lets a client take one second of handling
    /// time; past it, the throttle is the byte rates' formula on time.
    #[test]
    fn a_request_percentage_bounds_handling_time_over_the_window() {
        assert_eq!(request_time_quota(10.0), 100_000);
        assert_eq!(
            request_time_quota(0.0001),
            1,
            "at least a microsecond a second"
        );
        assert_eq!(request_time_quota(200.0), 2_000_000, "two threads' worth");
        let mut entries = QuotaEntries::default();
        entries.set(
            QuotaEntity::default_client_id(),
            Some(request_time_quota(10.0)),
        );
        let mut q = ClientQuotas::new(W, entries);
        // One second of handling in the first ten: exactly the quota.
        assert_eq!(q.record("", "c", 1_000_000, 0).throttle_ms, 0);
        // 100 ms more: 1.1 s over 10 s is 11 %, one tenth over: 1 s.
        assert_eq!(q.record("", "c", 100_000, 0).throttle_ms, 1000);
    }

    /// As Kafka's testExpireQuotaSensors (Kafka expires sensors idle for an
    /// hour): a rate idle for a whole window (zero, so forgetting it changes
    /// nothing) is dropped and reported.
    #[test]
    fn rates_idle_for_a_whole_window_are_forgotten_and_reported() {
        let mut q = client_default(1000);
        let _ = q.record("", "old", 10, 0);
        let _ = q.record("", "busy", 10, 0);
        let _ = q.record("", "busy", 10, 6_000);
        let c = q.record("", "busy", 10, 11_000);
        assert_eq!(
            c.expired,
            vec![MetricTags {
                user: String::new(),
                client_id: "old".into()
            }]
        );
        assert_eq!(q.tracked(), 1);
    }
}
