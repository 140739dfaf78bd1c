//! Client quotas, the shell: the rules (the windowed rate, the
//! throttle time, which quota applies) are `syncline_replication::client_quota`;
//! here one state per kind of traffic is shared under a lock, on tokio's
//! clock, and a request's [`QuotaCharge`] travels with its responder until
//! its answer goes out (`crate::responder`), which settles it: the answer
//! then says `throttle_time_ms`, and its connection is not read for that long
//! (KIP-219).
//!
//! Charged: a client's produce (the record bytes of the partitions
//! appended, as Kafka records them once the append is accepted) and a
//! consumer's fetch (the record bytes of the answer); and, to its
//! `request_percentage` quota (KIP-124), every client request's handling time
//! ([`RequestTimeCharge`]). Never a follower's fetch, nor the brokers' own
//! requests ([`is_broker_request`]).
//!
//! Which quotas apply: the cluster's (`syncline quota set`, AlterClientQuotas:
//! the controller's image, announced in LeaderAndIsr and given here by
//! [`ClientQuotas::apply_dynamic`]) over the broker config's static defaults
//! (`quota_producer_default`, `quota_consumer_default`), which count as a
//! `<default>` client-id quota the cluster's own `<default>` client-id quota
//! replaces, as Kafka's `quota.producer.default` did.

use std::sync::Arc;

use parking_lot::Mutex;
use syncline_controller::client_quotas::{ClientQuotaMap, QuotaKey, QuotaName};
use syncline_proto::pb;
use syncline_replication::client_quota::{
    self as rules, EntityName, MetricTags, QuotaEntity, QuotaEntries, QuotaWindow,
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
    /// `request_percentage`: microseconds of request handling time (KIP-124).
    Request,
}

impl QuotaKind {
    fn label(self) -> &'static str {
        match self {
            QuotaKind::Produce => "produce",
            QuotaKind::Fetch => "fetch",
            QuotaKind::Request => "request",
        }
    }
}

/// The broker's client quotas: one state per kind (nothing is measured for
/// a kind while no quota of it is configured).
#[derive(Debug)]
pub(crate) struct ClientQuotas {
    produce: Mutex<rules::ClientQuotas>,
    fetch: Mutex<rules::ClientQuotas>,
    request: Mutex<rules::ClientQuotas>,
    /// The broker config's static defaults, below the cluster's quotas.
    producer_default: Option<u64>,
    consumer_default: Option<u64>,
    /// The cluster's quotas applied last, and the metadata offset they were
    /// announced at (-1: none): an older announcement never replaces them.
    dynamic: Mutex<(i64, Arc<ClientQuotaMap>)>,
    /// What the rules' milliseconds count from.
    started: Instant,
    metrics: Arc<BrokerMetrics>,
}

impl ClientQuotas {
    /// The quotas of `config` (the cluster's come later, with the metadata).
    pub(crate) fn new(config: &ClientQuotaConfig, metrics: Arc<BrokerMetrics>) -> ClientQuotas {
        let window = QuotaWindow {
            samples: config.window_num,
            sample_ms: u64::from(config.window_size_seconds) * 1000,
        };
        let state = |default: Option<u64>| {
            let entries = entries_of(&ClientQuotaMap::new(), QuotaKey::ProducerByteRate, default);
            Mutex::new(rules::ClientQuotas::new(window, entries))
        };
        ClientQuotas {
            produce: state(config.producer_default),
            fetch: state(config.consumer_default),
            request: state(None),
            producer_default: config.producer_default,
            consumer_default: config.consumer_default,
            dynamic: Mutex::new((-1, Arc::new(ClientQuotaMap::new()))),
            started: Instant::now(),
            metrics,
        }
    }

    /// Applies the cluster's quotas as of metadata `offset` (an image older
    /// than the one applied is ignored); the rates measured so far are kept.
    pub(crate) fn apply_dynamic(&self, offset: i64, quotas: Arc<ClientQuotaMap>) {
        let mut applied = self.dynamic.lock();
        if offset < applied.0 {
            return;
        }
        self.produce.lock().set_entries(entries_of(
            &quotas,
            QuotaKey::ProducerByteRate,
            self.producer_default,
        ));
        self.fetch.lock().set_entries(entries_of(
            &quotas,
            QuotaKey::ConsumerByteRate,
            self.consumer_default,
        ));
        self.request
            .lock()
            .set_entries(entries_of(&quotas, QuotaKey::RequestPercentage, None));
        *applied = (offset, quotas);
    }

    /// DescribeClientQuotas, from the quotas in force here (so that a client
    /// that sees a change described sees it enforced too).
    pub(crate) fn describe(
        &self,
        req: &pb::DescribeClientQuotasRequest,
    ) -> pb::DescribeClientQuotasResponse {
        let quotas = self.dynamic.lock().1.clone();
        syncline_controller::client_quotas::describe(&quotas, req)
    }

    /// A charge for a request of `principal` with `client_id` to the `kind`
    /// quota, `None` when no quota of that kind is configured.
    pub(crate) fn charge(
        self: &Arc<Self>,
        kind: QuotaKind,
        principal: &Principal,
        client_id: &str,
    ) -> Option<QuotaCharge> {
        if !self.state(kind).lock().enabled() {
            return None;
        }
        Some(QuotaCharge {
            quotas: self.clone(),
            kind,
            user: quota_user(principal),
            client_id: client_id.to_string(),
            bytes: 0,
        })
    }

    fn state(&self, kind: QuotaKind) -> &Mutex<rules::ClientQuotas> {
        match kind {
            QuotaKind::Produce => &self.produce,
            QuotaKind::Fetch => &self.fetch,
            QuotaKind::Request => &self.request,
        }
    }
}

/// The quotas of `key` in the cluster's `quotas` (bytes a second; for
/// `request_percentage`, microseconds of handling time a second), over the
/// static `default` for each client id.
fn entries_of(quotas: &ClientQuotaMap, key: QuotaKey, default: Option<u64>) -> QuotaEntries {
    let mut entries = QuotaEntries::default();
    if let Some(rate) = default {
        entries.set(QuotaEntity::default_client_id(), Some(rate));
    }
    let side = |name: &Option<QuotaName>| {
        name.as_ref().map(|n| match n {
            QuotaName::Default => EntityName::Default,
            QuotaName::Named(n) => EntityName::Named(n.clone()),
        })
    };
    for (entity, values) in quotas {
        if let Some(value) = values.get(key) {
            let entity = QuotaEntity {
                user: side(&entity.user),
                client_id: side(&entity.client_id),
            };
            let bound = match key {
                QuotaKey::RequestPercentage => rules::request_time_quota(value),
                // The controller keeps byte rates whole and above zero.
                QuotaKey::ProducerByteRate | QuotaKey::ConsumerByteRate => value as u64,
            };
            entries.set(entity, Some(bound));
        }
    }
    entries
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
        let state = self.quotas.state(self.kind);
        let now_ms = Instant::now()
            .saturating_duration_since(self.quotas.started)
            .as_millis() as u64;
        let mut state = state.lock();
        let charge = state.record(&self.user, &self.client_id, self.bytes, now_ms);
        let withhold_records = self.kind == QuotaKind::Fetch && charge.throttle_ms > 0;
        if let (Some(tags), true) = (&charge.tags, withhold_records) {
            state.unrecord(tags, self.bytes, now_ms);
        }
        let rate = charge.tags.as_ref().map(|tags| state.rate(tags, now_ms));
        drop(state);
        let label = |tags: MetricTags| QuotaLabel {
            quota: self.kind.label(),
            user: tags.user,
            client_id: tags.client_id,
        };
        let has_metrics = charge.tags.is_some() || !charge.expired.is_empty();
        if has_metrics {
            let metrics = self.quotas.metrics.client_quotas();
            for tags in charge.expired {
                metrics.forget(&label(tags));
            }
            if let (Some(tags), Some(rate)) = (charge.tags, rate) {
                let label = label(tags);
                // Kafka's byte-rate, and its request-time as percent of a
                // thread (microseconds a second / 10,000).
                let value = match self.kind {
                    QuotaKind::Request => rate / 10_000.0,
                    QuotaKind::Produce | QuotaKind::Fetch => rate,
                };
                metrics.rate(&label, value);
                if charge.throttle_ms > 0 {
                    metrics.throttled(&label, charge.throttle_ms);
                }
            }
        }
        Settled {
            throttle: Duration::from_millis(charge.throttle_ms),
            withhold_records,
        }
    }
}

/// A request's handling time charged to its `request_percentage` quota
/// (KIP-124): from when the broker started handling it until its handler
/// returned (`handled`, set by the dispatcher), or until it was answered, if
/// that came first. Time the request then waits (in a purgatory, for the
/// controller, throttled) is not handling time.
#[derive(Debug)]
pub(crate) struct RequestTimeCharge {
    charge: QuotaCharge,
    started: Instant,
    handled: Arc<std::sync::OnceLock<Duration>>,
}

impl RequestTimeCharge {
    /// A charge for a request whose handling starts now; the dispatcher sets
    /// `handled` once its handler returns.
    pub(crate) fn new(charge: QuotaCharge, handled: Arc<std::sync::OnceLock<Duration>>) -> Self {
        RequestTimeCharge {
            charge,
            started: Instant::now(),
            handled,
        }
    }

    /// Records the handling time: how long the client is throttled.
    pub(crate) fn settle(self) -> Duration {
        let handled = self
            .handled
            .get()
            .copied()
            .unwrap_or_else(|| self.started.elapsed());
        let mut charge = self.charge;
        charge.add(u64::try_from(handled.as_micros()).unwrap_or(u64::MAX));
        charge.settle().throttle
    }
}

/// Whether `body` is a broker's own request (replication, the controller's
/// and the brokers' internal APIs, a request forwarded to the controller):
/// never charged to a client's request quota, as Kafka exempts them.
pub(crate) fn is_broker_request(body: &pb::request::Body) -> bool {
    use pb::request::Body;
    match body {
        Body::Fetch(r) => r.replica_id >= 0,
        Body::ListOffsets(r) => r.replica_id >= 0,
        Body::OffsetsForLeaderEpoch(r) => r.replica_id >= 0,
        Body::LeaderAndIsr(_)
        | Body::AlterPartition(_)
        | Body::BrokerRegistration(_)
        | Body::BrokerHeartbeat(_)
        | Body::AllocateProducerIds(_)
        | Body::Raft(_) => true,
        Body::CreateTopics(r) => r.forwarded,
        Body::DescribeQuorum(r) => r.forwarded,
        Body::ElectLeaders(r) => r.forwarded,
        Body::AlterTopic(r) => r.forwarded,
        Body::DeleteTopics(r) => r.forwarded,
        Body::AlterUserScramCredentials(r) => r.forwarded,
        Body::AlterClientQuotas(r) => r.forwarded,
        Body::CreateAcls(r) => r.forwarded,
        Body::DeleteAcls(r) => r.forwarded,
        Body::AlterReassignments(r) => r.forwarded,
        _ => false,
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

    /// Quotas with these static defaults over Kafka's window.
    fn quotas_with(
        producer_default: Option<u64>,
        consumer_default: Option<u64>,
    ) -> Arc<ClientQuotas> {
        let config = ClientQuotaConfig {
            producer_default,
            consumer_default,
            window_num: 11,
            window_size_seconds: 1,
        };
        Arc::new(ClientQuotas::new(&config, Arc::new(BrokerMetrics::new())))
    }

    #[test]
    fn the_quota_user_is_the_principals_name_anonymous_unauthenticated() {
        assert_eq!(quota_user(&Principal::Anonymous), "ANONYMOUS");
        assert_eq!(quota_user(&Principal::User("alice".into())), "alice");
    }

    #[tokio::test(start_paused = true)]
    async fn a_kind_without_a_quota_charges_nothing() {
        let quotas = quotas_with(Some(1000), None);
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
        // Kafka's byte-rate: 20,000 bytes over the padded 10 s.
        assert!(
            scraped.contains(
                "syncline_client_quota_byte_rate{quota=\"produce\",user=\"\",client_id=\"c\"} 2000.0"
            ),
            "{scraped}"
        );
    }

    /// The cluster's quotas as the controller announces them: `image` of
    /// `(client id or None for <default>, producer_byte_rate)`.
    fn cluster_quotas(image: &[(Option<&str>, f64)]) -> Arc<ClientQuotaMap> {
        let image = pb::ClientQuotaImage {
            entries: image
                .iter()
                .map(|(client_id, rate)| pb::ClientQuotaEntry {
                    entity: vec![pb::ClientQuotaEntityComponent {
                        entity_type: "client-id".into(),
                        entity_name: client_id.map(str::to_string),
                    }],
                    values: vec![pb::ClientQuotaValue {
                        key: "producer_byte_rate".into(),
                        value: *rate,
                    }],
                })
                .collect(),
        };
        Arc::new(syncline_controller::client_quotas::image_from_pb(&image).unwrap())
    }

    /// The throttle a 20,000-byte produce of `client_id` gets, alone in a
    /// fresh window (20,000 bytes over the padded 10 s: 2000 bytes/s).
    fn throttle_of(quotas: &Arc<ClientQuotas>, client_id: &str) -> Option<Duration> {
        let mut charge = quotas.charge(QuotaKind::Produce, &Principal::Anonymous, client_id)?;
        charge.add(20_000);
        Some(charge.settle().throttle)
    }

    #[tokio::test(start_paused = true)]
    async fn the_clusters_quotas_apply_over_the_static_default_and_only_newer_ones_replace_them() {
        let quotas = quotas_with(Some(1000), None);
        // The static default: 1000 bytes/s for each client id.
        assert_eq!(throttle_of(&quotas, "a"), Some(Duration::from_secs(10)));
        // The cluster gives client id "b" 4000 bytes/s: within it; "c" is
        // still under the static default.
        quotas.apply_dynamic(5, cluster_quotas(&[(Some("b"), 4000.0)]));
        assert_eq!(throttle_of(&quotas, "b"), Some(Duration::ZERO));
        assert_eq!(throttle_of(&quotas, "c"), Some(Duration::from_secs(10)));
        // The cluster's own <default> client-id quota replaces the static one.
        quotas.apply_dynamic(6, cluster_quotas(&[(None, 4000.0)]));
        assert_eq!(throttle_of(&quotas, "d"), Some(Duration::ZERO));
        // An older image changes nothing; describe shows what is in force.
        quotas.apply_dynamic(5, cluster_quotas(&[(Some("b"), 4000.0)]));
        let described = quotas.describe(&pb::DescribeClientQuotasRequest::default());
        assert_eq!(described.entries.len(), 1);
        assert_eq!(described.entries[0].entity[0].entity_name, None);
        // A kind with no quota at all charges nothing.
        assert!(quotas
            .charge(QuotaKind::Fetch, &Principal::Anonymous, "e")
            .is_none());
        quotas.apply_dynamic(7, cluster_quotas(&[]));
        assert_eq!(
            throttle_of(&quotas, "f"),
            Some(Duration::from_secs(10)),
            "back to the static default once the cluster's quota is removed"
        );
    }

    #[test]
    fn brokers_requests_are_never_charged_handling_time() {
        use pb::request::Body;
        let follower = Body::Fetch(pb::FetchRequest {
            replica_id: 2,
            ..Default::default()
        });
        let consumer = Body::Fetch(pb::FetchRequest {
            replica_id: -1,
            ..Default::default()
        });
        let forwarded = Body::CreateTopics(pb::CreateTopicsRequest {
            forwarded: true,
            ..Default::default()
        });
        for body in [
            follower,
            forwarded,
            Body::LeaderAndIsr(Default::default()),
            Body::AlterPartition(Default::default()),
            Body::BrokerHeartbeat(Default::default()),
            Body::Raft(Default::default()),
        ] {
            assert!(is_broker_request(&body), "{body:?}");
        }
        for body in [
            consumer,
            Body::Produce(Default::default()),
            Body::Metadata(Default::default()),
            Body::CreateTopics(Default::default()),
            Body::AlterClientQuotas(Default::default()),
        ] {
            assert!(!is_broker_request(&body), "{body:?}");
        }
    }

    /// Each measured entity has a rate series (Kafka's `byte-rate`, and the
    /// request time as percent of a thread) while its rate is remembered:
    /// idle for the whole window, its series go with it.
    #[tokio::test(start_paused = true)]
    async fn an_entitys_rate_series_lives_while_its_rate_is_remembered() {
        let quotas = quotas_with(Some(1 << 20), None);
        let mut request = ClientQuotaMap::new();
        request.insert(
            syncline_controller::client_quotas::ClientQuotaEntity {
                user: None,
                client_id: Some(QuotaName::Default),
            },
            syncline_controller::client_quotas::image_from_pb(&pb::ClientQuotaImage {
                entries: vec![pb::ClientQuotaEntry {
                    entity: vec![pb::ClientQuotaEntityComponent {
                        entity_type: "client-id".into(),
                        entity_name: None,
                    }],
                    values: vec![pb::ClientQuotaValue {
                        key: "request_percentage".into(),
                        value: 50.0,
                    }],
                }],
            })
            .unwrap()
            .into_values()
            .next()
            .unwrap(),
        );
        quotas.apply_dynamic(1, Arc::new(request));
        let charge = |client_id: &str, bytes: u64| {
            let mut c = quotas
                .charge(QuotaKind::Produce, &Principal::Anonymous, client_id)
                .unwrap();
            c.add(bytes);
            let _ = c.settle();
        };
        let handle = |client_id: &str, took: Duration| {
            let handled = Arc::new(std::sync::OnceLock::new());
            handled.set(took).unwrap();
            let request = quotas
                .charge(QuotaKind::Request, &Principal::Anonymous, client_id)
                .unwrap();
            let _ = RequestTimeCharge::new(request, handled).settle();
        };
        charge("old", 10_000);
        handle("old", Duration::from_millis(500));
        let scraped = quotas.metrics.encode();
        for series in [
            "syncline_client_quota_byte_rate{quota=\"produce\",user=\"\",client_id=\"old\"} 1000.0",
            // Half a second of handling over the padded 10 s: 5 % of a thread.
            "syncline_client_quota_request_time_percent{quota=\"request\",user=\"\",client_id=\"old\"} 5.0",
        ] {
            assert!(scraped.contains(series), "no {series} in {scraped}");
        }
        // A whole window later another client's requests sweep "old" away
        // (each kind's series with that kind's rates).
        tokio::time::advance(Duration::from_secs(11)).await;
        charge("new", 10_000);
        handle("new", Duration::from_millis(1));
        let scraped = quotas.metrics.encode();
        assert!(!scraped.contains("client_id=\"old\""), "{scraped}");
        assert!(scraped.contains("client_id=\"new\""), "{scraped}");
    }
}
