//! Client byte-rate quotas, the shell: the rules (the windowed rate, the
//! throttle time, which quota applies) are `syncline_replication::client_quota`;
//! here one state per kind of traffic is shared under a lock, on tokio's
//! clock, and a request's [`QuotaCharge`] travels with its responder until
//! its answer goes out (`crate::responder`), which settles it: the answer
//! then says `throttle_time_ms`, and its connection is not read for that long
//! (KIP-219).
//!
//! Charged: a client's produce (the record bytes of the partitions
//! appended, as Kafka records them once the append is accepted) and a
//! consumer's fetch (the record bytes of the answer). Never a follower's
//! fetch, nor the broker's own requests.

use std::sync::Arc;

use parking_lot::Mutex;
use syncline_replication::client_quota::{
    self as rules, MetricTags, QuotaEntity, QuotaEntries, QuotaWindow,
};
use tokio::time::{Duration, Instant};

use crate::auth::Principal;
use crate::config::ClientQuotaConfig;
use crate::metrics::{BrokerMetrics, QuotaLabel};

/// Which quota a request is charged to.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum QuotaKind {
    /// `producer_byte_rate`.
    Produce,
    /// `consumer_byte_rate`.
    Fetch,
}

impl QuotaKind {
    fn label(self) -> &'static str {
        match self {
            QuotaKind::Produce => "produce",
            QuotaKind::Fetch => "fetch",
        }
    }
}

/// The broker's client quotas: one state per kind, `None` when no quota of
/// that kind is configured (nothing is measured then).
#[derive(Debug)]
pub(crate) struct ClientQuotas {
    produce: Option<Mutex<rules::ClientQuotas>>,
    fetch: Option<Mutex<rules::ClientQuotas>>,
    /// What the rules' milliseconds count from.
    started: Instant,
    metrics: Arc<BrokerMetrics>,
}

impl ClientQuotas {
    /// The quotas of `config`.
    pub(crate) fn new(config: &ClientQuotaConfig, metrics: Arc<BrokerMetrics>) -> ClientQuotas {
        let window = QuotaWindow {
            samples: config.window_num,
            sample_ms: u64::from(config.window_size_seconds) * 1000,
        };
        let state = |default: Option<u64>| {
            default.map(|rate| {
                let mut entries = QuotaEntries::default();
                entries.set(QuotaEntity::default_client_id(), Some(rate));
                Mutex::new(rules::ClientQuotas::new(window, entries))
            })
        };
        ClientQuotas {
            produce: state(config.producer_default),
            fetch: state(config.consumer_default),
            started: Instant::now(),
            metrics,
        }
    }

    /// A charge for a request of `principal` with `client_id` to the `kind`
    /// quota, `None` when no quota of that kind is configured.
    pub(crate) fn charge(
        self: &Arc<Self>,
        kind: QuotaKind,
        principal: &Principal,
        client_id: &str,
    ) -> Option<QuotaCharge> {
        self.state(kind)?;
        Some(QuotaCharge {
            quotas: self.clone(),
            kind,
            user: quota_user(principal),
            client_id: client_id.to_string(),
            bytes: 0,
        })
    }

    fn state(&self, kind: QuotaKind) -> Option<&Mutex<rules::ClientQuotas>> {
        match kind {
            QuotaKind::Produce => self.produce.as_ref(),
            QuotaKind::Fetch => self.fetch.as_ref(),
        }
    }
}

/// The user a quota names: the principal's name as Kafka's quotas see it
/// (`ANONYMOUS` unauthenticated).
fn quota_user(principal: &Principal) -> String {
    let name = principal.acl_name();
    name.strip_prefix("User:").unwrap_or(&name).to_string()
}

/// A request's bytes charged to a quota once its answer goes out.
#[derive(Debug)]
pub(crate) struct QuotaCharge {
    quotas: Arc<ClientQuotas>,
    kind: QuotaKind,
    user: String,
    client_id: String,
    bytes: u64,
}

impl QuotaCharge {
    /// Adds `bytes` to what the request is charged.
    pub(crate) fn add(&mut self, bytes: u64) {
        self.bytes += bytes;
    }

    /// Records the bytes now: how long the client is throttled (zero within
    /// its quota), and whether its answer's records are withheld. As Kafka
    /// (KIP-219): a throttled produce has been appended and stays counted; a
    /// throttled consumer's fetch is answered without its records, which are
    /// then not counted against it either.
    pub(crate) fn settle(self) -> Settled {
        let Some(state) = self.quotas.state(self.kind) else {
            return Settled::default();
        };
        let now_ms = Instant::now()
            .saturating_duration_since(self.quotas.started)
            .as_millis() as u64;
        let mut state = state.lock();
        let charge = state.record(&self.user, &self.client_id, self.bytes, now_ms);
        let withhold_records = self.kind == QuotaKind::Fetch && charge.throttle_ms > 0;
        if let (Some(tags), true) = (&charge.tags, withhold_records) {
            state.unrecord(tags, self.bytes, now_ms);
        }
        drop(state);
        let label = |tags: MetricTags| QuotaLabel {
            quota: self.kind.label(),
            user: tags.user,
            client_id: tags.client_id,
        };
        let has_metrics = charge.throttle_ms > 0 || !charge.expired.is_empty();
        if has_metrics {
            let metrics = self.quotas.metrics.client_quotas();
            for tags in charge.expired {
                metrics.forget(&label(tags));
            }
            if let (Some(tags), true) = (charge.tags, charge.throttle_ms > 0) {
                metrics.throttled(&label(tags), charge.throttle_ms);
            }
        }
        Settled {
            throttle: Duration::from_millis(charge.throttle_ms),
            withhold_records,
        }
    }
}

/// What settling a [`QuotaCharge`] decided.
#[derive(Debug, Default, PartialEq, Eq)]
pub(crate) struct Settled {
    /// How long the client is throttled.
    pub(crate) throttle: Duration,
    /// A throttled fetch: answered without its records.
    pub(crate) withhold_records: bool,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_quota_user_is_the_principals_name_anonymous_unauthenticated() {
        assert_eq!(quota_user(&Principal::Anonymous), "ANONYMOUS");
        assert_eq!(quota_user(&Principal::User("alice".into())), "alice");
    }

    #[tokio::test(start_paused = true)]
    async fn a_kind_without_a_quota_charges_nothing() {
        let config = ClientQuotaConfig {
            producer_default: Some(1000),
            consumer_default: None,
            window_num: 11,
            window_size_seconds: 1,
        };
        let quotas = Arc::new(ClientQuotas::new(&config, Arc::new(BrokerMetrics::new())));
        assert!(quotas
            .charge(QuotaKind::Fetch, &Principal::Anonymous, "c")
            .is_none());
        let mut charge = quotas
            .charge(QuotaKind::Produce, &Principal::Anonymous, "c")
            .expect("a produce quota");
        charge.add(20_000);
        // 20,000 bytes over the padded 10 s: 2000 bytes/s, 1000 over: 10 s;
        // a produce's records were appended: nothing to withhold.
        assert_eq!(
            charge.settle(),
            Settled {
                throttle: Duration::from_secs(10),
                withhold_records: false
            }
        );
        let scraped = quotas.metrics.encode();
        assert!(
            scraped.contains(
                "syncline_client_quota_throttle_time_ms_total{quota=\"produce\",user=\"\",client_id=\"c\"} 10000"
            ),
            "{scraped}"
        );
    }
}
