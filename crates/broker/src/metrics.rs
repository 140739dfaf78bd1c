//! The broker's metrics: one Prometheus registry per broker (several brokers in one
//! process never share metrics), served as text on `metrics_listen`. Names are
//! fixed so dashboards and scripts can rely on them (see docs/metrics.md).
//!
//! Counters are incremented on the hot path (atomics, handles resolved up front);
//! gauges over partitions are computed when scraped.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;

use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::metrics::histogram::{exponential_buckets, Histogram};
use prometheus_client::registry::{Metric, Registry};
use syncline_proto::pb;

/// Most partitions that get per-partition series (bounded cardinality).
pub const MAX_PARTITION_SERIES: usize = 1000;

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct ApiLabel {
    api: &'static str,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct OperationLabel {
    operation: &'static str,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct SideLabel {
    side: &'static str,
}

/// Which end of replication a throttle bounds ([`crate::replica::quota`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum ThrottleSide {
    Leader,
    Follower,
}

impl ThrottleSide {
    fn label(self) -> SideLabel {
        SideLabel {
            side: match self {
                ThrottleSide::Leader => "leader",
                ThrottleSide::Follower => "follower",
            },
        }
    }
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct LeaderLabel {
    leader: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub(crate) struct PartitionLabel {
    pub(crate) topic: String,
    pub(crate) partition: String,
}

/// Request count and latency of one API.
#[derive(Debug)]
pub struct ApiMetrics {
    requests: Counter,
    latency: Histogram,
}

impl ApiMetrics {
    /// A request of this API was answered after `elapsed`.
    pub fn observe(&self, elapsed: Duration, _response_bytes: usize) {
        self.latency.observe(elapsed.as_secs_f64());
    }
}

/// Every metric of one broker.
#[derive(Debug)]
pub struct BrokerMetrics {
    registry: Registry,
    isr_shrinks: Counter,
    isr_expands: Counter,
    failed_isr_updates: Counter,
    pub(crate) under_replicated_partitions: Gauge,
    pub(crate) under_min_isr_partition_count: Gauge,
    pub(crate) at_min_isr_partition_count: Gauge,
    pub(crate) leader_count: Gauge,
    pub(crate) partition_count: Gauge,
    pub(crate) producer_ids: Gauge,
    pub(crate) offline_partitions_count: Gauge,
    pub(crate) preferred_replica_imbalance_count: Gauge,
    pub(crate) reassigning_partitions: Gauge,
    fenced_broker_count: Gauge,
    active_broker_count: Gauge,
    unclean_leader_elections: Counter,
    unclean_seen: AtomicU64,
    pub(crate) active_controller: Gauge,
    pub(crate) metadata_log_end_offset: Gauge,
    pub(crate) controller_elections: Counter,
    pub(crate) replica_fetcher_max_lag: Gauge,
    fetcher_requests: Family<LeaderLabel, Counter>,
    fetcher_failures: Family<LeaderLabel, Counter>,
    purgatory_size: Family<OperationLabel, Gauge>,
    apis: Vec<Arc<ApiMetrics>>,
    bytes_in: Counter,
    bytes_out: Counter,
    produce_duplicates: Counter,
    produce_out_of_order: Counter,
    throttled_replication_bytes: Family<SideLabel, Counter>,
    fetch_sendfile_bytes: Counter,
    fetch_copied_bytes: Counter,
    pub(crate) partition_isr_size: Family<PartitionLabel, Gauge>,
    pub(crate) partition_max_replica_lag: Family<PartitionLabel, Gauge>,
    pub(crate) authentication_failures: Counter,
    pub(crate) authorization_failures: Counter,
    pub(crate) connections_refused: Counter,
    pub(crate) connections: Gauge,
    pub(crate) connections_muted: Gauge,
    pub(crate) connections_expired: Counter,
    /// Client quotas' series: made only when a quota is configured (a family
    /// is a HashMap; see [`TrafficMetrics::register`]).
    client_quotas: std::sync::OnceLock<ClientQuotaMetrics>,
}

impl Default for BrokerMetrics {
    fn default() -> Self {
        Self::new()
    }
}

impl BrokerMetrics {
    /// Every metric registered, at zero, in a registry of its own.
    pub fn new() -> BrokerMetrics {
        let mut registry = Registry::with_prefix("syncline");
        // The order of registration is the order of the text exposition; it is
        // also the order the label families' hash maps are created in, which the
        // simulation's traces depend on (see crates/sim).
        let r = &mut registry;
        let IsrMetrics {
            isr_shrinks,
            isr_expands,
            failed_isr_updates,
        } = IsrMetrics::register(r);
        let ConnectionMetrics {
            authentication_failures,
            authorization_failures,
            connections_refused,
            connections,
            connections_muted,
            connections_expired,
        } = ConnectionMetrics::register(r);
        let PartitionCounts {
            under_replicated_partitions,
            under_min_isr_partition_count,
            at_min_isr_partition_count,
            leader_count,
            producer_ids,
            partition_count,
        } = PartitionCounts::register(r);
        let ControllerMetrics {
            offline_partitions_count,
            preferred_replica_imbalance_count,
            reassigning_partitions,
            fenced_broker_count,
            active_broker_count,
            unclean_leader_elections,
            active_controller,
            metadata_log_end_offset,
            controller_elections,
        } = ControllerMetrics::register(r);
        let FetcherMetrics {
            replica_fetcher_max_lag,
            fetcher_requests,
            fetcher_failures,
        } = FetcherMetrics::register(r);
        let purgatory_size = register_purgatory_size(r);
        let apis = register_apis(r);
        let TrafficMetrics {
            bytes_in,
            bytes_out,
            produce_duplicates,
            produce_out_of_order,
            throttled_replication_bytes,
            fetch_sendfile_bytes,
            fetch_copied_bytes,
        } = TrafficMetrics::register(r);
        let PerPartitionMetrics {
            partition_isr_size,
            partition_max_replica_lag,
        } = PerPartitionMetrics::register(r);
        BrokerMetrics {
            registry,
            isr_shrinks,
            isr_expands,
            failed_isr_updates,
            under_replicated_partitions,
            under_min_isr_partition_count,
            at_min_isr_partition_count,
            leader_count,
            partition_count,
            producer_ids,
            offline_partitions_count,
            preferred_replica_imbalance_count,
            reassigning_partitions,
            fenced_broker_count,
            active_broker_count,
            unclean_leader_elections,
            unclean_seen: AtomicU64::new(0),
            active_controller,
            metadata_log_end_offset,
            controller_elections,
            replica_fetcher_max_lag,
            fetcher_requests,
            fetcher_failures,
            purgatory_size,
            apis,
            bytes_in,
            bytes_out,
            produce_duplicates,
            produce_out_of_order,
            throttled_replication_bytes,
            fetch_sendfile_bytes,
            fetch_copied_bytes,
            partition_isr_size,
            partition_max_replica_lag,
            authentication_failures,
            authorization_failures,
            connections_refused,
            connections,
            connections_muted,
            connections_expired,
            client_quotas: std::sync::OnceLock::new(),
        }
    }

    /// The client quotas' series, registered on first use.
    pub(crate) fn client_quotas(&self) -> &ClientQuotaMetrics {
        self.client_quotas.get_or_init(ClientQuotaMetrics::new)
    }

    /// Counts a request of `body`'s API and returns its metrics handle.
    pub fn api(&self, body: &pb::request::Body, _frame_bytes: usize) -> Arc<ApiMetrics> {
        let name = syncline_proto::api_name(body);
        let idx = syncline_proto::API_NAMES
            .iter()
            .position(|n| *n == name)
            .unwrap_or(0);
        let api = self.apis[idx].clone();
        api.requests.inc();
        api
    }

    pub(crate) fn isr_shrink(&self) {
        self.isr_shrinks.inc();
    }

    pub(crate) fn isr_expand(&self) {
        self.isr_expands.inc();
    }

    pub(crate) fn failed_isr_update(&self) {
        self.failed_isr_updates.inc();
    }

    /// A producer's records of `n` bytes were appended.
    pub fn bytes_in(&self, n: usize) {
        self.bytes_in.inc_by(n as u64);
    }

    pub(crate) fn bytes_out(&self, n: usize) {
        self.bytes_out.inc_by(n as u64);
    }

    /// Counts record bytes a connection's writer took from the segment files:
    /// with `sendfile`, or read into memory.
    pub(crate) fn fetch_file_bytes(&self, sendfile: bool, n: u64) {
        if n > 0 {
            let counter = if sendfile {
                &self.fetch_sendfile_bytes
            } else {
                &self.fetch_copied_bytes
            };
            counter.inc_by(n);
        }
    }

    /// An idempotent producer's duplicate batch was answered without a write.
    pub(crate) fn produce_duplicate(&self) {
        self.produce_duplicates.inc();
    }

    /// An idempotent producer's batch was out of sequence.
    pub(crate) fn produce_out_of_order(&self) {
        self.produce_out_of_order.inc();
    }

    /// `n` bytes of throttled replicas moved on `side`.
    pub(crate) fn throttled_replication_bytes(&self, side: ThrottleSide, n: usize) {
        self.throttled_replication_bytes
            .get_or_create(&side.label())
            .inc_by(n as u64);
    }

    pub(crate) fn fetcher_request(&self, leader: i32) {
        self.fetcher_requests
            .get_or_create(&LeaderLabel {
                leader: leader.to_string(),
            })
            .inc();
    }

    /// A replica fetcher for `leader` started: its series exist from now on, at
    /// zero, so that a rate over them is defined before the first failure.
    pub(crate) fn fetcher_started(&self, leader: i32) {
        let label = LeaderLabel {
            leader: leader.to_string(),
        };
        let _ = self.fetcher_requests.get_or_create(&label);
        let _ = self.fetcher_failures.get_or_create(&label);
    }

    /// A replica fetcher request to `leader` failed: no connection, no
    /// answer, or an error for the whole request.
    pub(crate) fn fetcher_failure(&self, leader: i32) {
        self.fetcher_failures
            .get_or_create(&LeaderLabel {
                leader: leader.to_string(),
            })
            .inc();
    }

    pub(crate) fn set_purgatory_sizes(&self, fetch: usize, produce: usize) {
        self.purgatory_size
            .get_or_create(&OperationLabel { operation: "fetch" })
            .set(fetch as i64);
        self.purgatory_size
            .get_or_create(&OperationLabel {
                operation: "produce",
            })
            .set(produce as i64);
    }

    /// The controller's count of registered brokers, fenced or not.
    pub(crate) fn set_broker_counts(&self, registered: usize, fenced: usize) {
        self.fenced_broker_count.set(fenced as i64);
        self.active_broker_count
            .set(registered.saturating_sub(fenced) as i64);
    }

    /// A new active controller starts counting from the image's running total: the
    /// elections before it were counted by the controller that decided them.
    pub(crate) fn baseline_unclean_elections(&self, total: u64) {
        self.unclean_seen.store(total, Ordering::Release);
    }

    /// Brings the unclean-elections counter up to the controller's running total.
    pub(crate) fn set_unclean_elections_total(&self, total: u64) {
        let seen = self.unclean_seen.swap(total, Ordering::AcqRel);
        if total > seen {
            self.unclean_leader_elections.inc_by(total - seen);
        }
    }

    /// The Prometheus text exposition of every metric.
    pub fn encode(&self) -> String {
        use prometheus_client::encoding::text::{encode_eof, encode_registry};
        let mut out = String::new();
        let encoded = encode_registry(&mut out, &self.registry).and_then(|()| {
            if let Some(quotas) = self.client_quotas.get() {
                encode_registry(&mut out, &quotas.registry)?;
            }
            encode_eof(&mut out)
        });
        if encoded.is_err() {
            out.clear();
        }
        out
    }
}

/// A client quota entity's series: the kind of quota (`produce`, `fetch`,
/// `request`)
/// and the user and client id its rate is kept for (empty when the quota
/// that applies does not name that side).
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub(crate) struct QuotaLabel {
    pub(crate) quota: &'static str,
    pub(crate) user: String,
    pub(crate) client_id: String,
}

/// Client quotas' throttles (Kafka's `throttle-time` of the `Produce` and
/// `Fetch` quota metrics), per entity, in a registry of their own made only
/// when a quota is configured. Bounded: an entity has series only once it
/// was throttled, and loses them when its rate is forgotten (idle for the
/// whole quota window).
#[derive(Debug)]
pub(crate) struct ClientQuotaMetrics {
    registry: Registry,
    throttle_time_ms: Family<QuotaLabel, Counter>,
    throttled_responses: Family<QuotaLabel, Counter>,
    byte_rate: Family<QuotaLabel, Gauge<f64, AtomicU64>>,
    request_time_percent: Family<QuotaLabel, Gauge<f64, AtomicU64>>,
}

impl ClientQuotaMetrics {
    fn new() -> ClientQuotaMetrics {
        let mut registry = Registry::with_prefix("syncline");
        let throttle_time_ms = registered(
            &mut registry,
            "client_quota_throttle_time_ms",
            "Milliseconds clients were throttled for going over their byte-rate quota, per \
             quota (produce, fetch), user and client id; series only for entities throttled, \
             until idle for the whole quota window",
            Family::default(),
        );
        let throttled_responses = registered(
            &mut registry,
            "client_quota_throttled_responses",
            "Responses that throttled their client for going over its byte-rate quota",
            Family::default(),
        );
        let byte_rate = registered(
            &mut registry,
            "client_quota_byte_rate",
            "Bytes a second an entity with a byte-rate quota produced (quota=produce) or \
             fetched as a consumer (quota=fetch), over the quota window, as of its last \
             request; series only for entities measured, until idle for the whole window",
            Family::default(),
        );
        let request_time_percent = registered(
            &mut registry,
            "client_quota_request_time_percent",
            "Percent of one thread an entity with a request quota took handling its requests, \
             over the quota window, as of its last request; series only for entities \
             measured, until idle for the whole window",
            Family::default(),
        );
        ClientQuotaMetrics {
            registry,
            throttle_time_ms,
            throttled_responses,
            byte_rate,
            request_time_percent,
        }
    }

    /// `label`'s client was throttled for `ms`.
    pub(crate) fn throttled(&self, label: &QuotaLabel, ms: u64) {
        self.throttle_time_ms.get_or_create(label).inc_by(ms);
        self.throttled_responses.get_or_create(label).inc();
    }

    /// `label`'s rate is now `bytes_per_second` (produce, fetch) or
    /// `percent` of a thread (request).
    pub(crate) fn rate(&self, label: &QuotaLabel, value: f64) {
        let family = if label.quota == "request" {
            &self.request_time_percent
        } else {
            &self.byte_rate
        };
        family.get_or_create(label).set(value);
    }

    /// `label`'s rate was forgotten: its series go.
    pub(crate) fn forget(&self, label: &QuotaLabel) {
        self.throttle_time_ms.remove(label);
        self.throttled_responses.remove(label);
        self.byte_rate.remove(label);
        self.request_time_percent.remove(label);
    }
}

// The families of metrics `BrokerMetrics::new` registers, in its order.

/// Registers `metric` under `name` and returns it (a handle sharing its value).
fn registered<M: Metric + Clone>(registry: &mut Registry, name: &str, help: &str, metric: M) -> M {
    registry.register(name, help, metric.clone());
    metric
}

/// ISR changes of the partitions this broker leads.
struct IsrMetrics {
    isr_shrinks: Counter,
    isr_expands: Counter,
    failed_isr_updates: Counter,
}

impl IsrMetrics {
    fn register(r: &mut Registry) -> IsrMetrics {
        IsrMetrics {
            isr_shrinks: registered(
                r,
                "isr_shrinks",
                "ISR shrinks committed for partitions this broker leads (Kafka IsrShrinksPerSec)",
                Counter::default(),
            ),
            isr_expands: registered(
                r,
                "isr_expands",
                "ISR expansions committed for partitions this broker leads (Kafka IsrExpandsPerSec)",
                Counter::default(),
            ),
            failed_isr_updates: registered(
                r,
                "failed_isr_updates",
                "AlterPartition proposals the controller refused or that failed",
                Counter::default(),
            ),
        }
    }
}

/// Connections: the refused ones (authentication, authorization, limits) and
/// the open ones.
struct ConnectionMetrics {
    authentication_failures: Counter,
    authorization_failures: Counter,
    connections_refused: Counter,
    connections: Gauge,
    connections_muted: Gauge,
    connections_expired: Counter,
}

impl ConnectionMetrics {
    fn register(r: &mut Registry) -> ConnectionMetrics {
        ConnectionMetrics {
            authentication_failures: registered(
                r,
                "authentication_failures",
                "SASL authentications this broker refused (a peer with a wrong or unknown credential)",
                Counter::default(),
            ),
            authorization_failures: registered(
                r,
                "authorization_failures",
                "Internal-API requests refused with CLUSTER_AUTHORIZATION_FAILED (not from the broker they claim)",
                Counter::default(),
            ),
            connections_refused: registered(
                r,
                "connections_refused",
                "Connections closed on accept: max_connections or max_connections_per_ip reached",
                Counter::default(),
            ),
            connections: registered(
                r,
                "connections",
                "Client and broker connections open on this broker's listeners",
                Gauge::default(),
            ),
            connections_muted: registered(
                r,
                "connections_muted",
                "Connections not read from until their client reads: answers over connection_max_unwritten_bytes, or queued_max_requests unanswered",
                Gauge::default(),
            ),
            connections_expired: registered(
                r,
                "connections_expired",
                "Connections closed for idleness (connections_max_idle_ms) or for not authenticating in time (sasl_authentication_timeout_ms)",
                Counter::default(),
            ),
        }
    }
}

/// Counts over the partitions this broker hosts and leads.
struct PartitionCounts {
    under_replicated_partitions: Gauge,
    under_min_isr_partition_count: Gauge,
    at_min_isr_partition_count: Gauge,
    leader_count: Gauge,
    producer_ids: Gauge,
    partition_count: Gauge,
}

impl PartitionCounts {
    fn register(r: &mut Registry) -> PartitionCounts {
        PartitionCounts {
            under_replicated_partitions: registered(
                r,
                "under_replicated_partitions",
                "Partitions led here whose ISR is smaller than the replica set",
                Gauge::default(),
            ),
            under_min_isr_partition_count: registered(
                r,
                "under_min_isr_partition_count",
                "Partitions led here whose ISR is below min.insync.replicas",
                Gauge::default(),
            ),
            at_min_isr_partition_count: registered(
                r,
                "at_min_isr_partition_count",
                "Partitions led here whose ISR is exactly min.insync.replicas",
                Gauge::default(),
            ),
            leader_count: registered(
                r,
                "leader_count",
                "Partitions this broker leads",
                Gauge::default(),
            ),
            producer_ids: registered(
                r,
                "producer_ids",
                "Idempotent producers with state in the partitions led here (one per producer and partition)",
                Gauge::default(),
            ),
            partition_count: registered(
                r,
                "partition_count",
                "Partition replicas this broker hosts",
                Gauge::default(),
            ),
        }
    }
}

/// What the active controller reports, and the controller quorum as this voter
/// sees it.
struct ControllerMetrics {
    offline_partitions_count: Gauge,
    preferred_replica_imbalance_count: Gauge,
    reassigning_partitions: Gauge,
    fenced_broker_count: Gauge,
    active_broker_count: Gauge,
    unclean_leader_elections: Counter,
    active_controller: Gauge,
    metadata_log_end_offset: Gauge,
    controller_elections: Counter,
}

impl ControllerMetrics {
    fn register(r: &mut Registry) -> ControllerMetrics {
        ControllerMetrics {
            offline_partitions_count: registered(
                r,
                "offline_partitions_count",
                "Partitions without a leader (reported by the active controller)",
                Gauge::default(),
            ),
            preferred_replica_imbalance_count: registered(
                r,
                "preferred_replica_imbalance_count",
                "Partitions not led by their preferred replica (reported by the active controller)",
                Gauge::default(),
            ),
            reassigning_partitions: registered(
                r,
                "reassigning_partitions",
                "Partitions with a replica reassignment in progress (reported by the active controller)",
                Gauge::default(),
            ),
            fenced_broker_count: registered(
                r,
                "fenced_broker_count",
                "Registered brokers that are fenced (reported by the active controller)",
                Gauge::default(),
            ),
            active_broker_count: registered(
                r,
                "active_broker_count",
                "Registered brokers that are not fenced (reported by the active controller)",
                Gauge::default(),
            ),
            unclean_leader_elections: registered(
                r,
                "unclean_leader_elections",
                "Leaders elected from outside the ISR (reported by the active controller)",
                Counter::default(),
            ),
            active_controller: registered(
                r,
                "active_controller",
                "1 on the broker hosting the active controller",
                Gauge::default(),
            ),
            metadata_log_end_offset: registered(
                r,
                "metadata_log_end_offset",
                "End of this controller voter's metadata (Raft) log",
                Gauge::default(),
            ),
            controller_elections: registered(
                r,
                "controller_elections",
                "Active controllers this voter has seen elected (new quorum leaders)",
                Counter::default(),
            ),
        }
    }
}

/// This broker's replica fetchers.
struct FetcherMetrics {
    replica_fetcher_max_lag: Gauge,
    fetcher_requests: Family<LeaderLabel, Counter>,
    fetcher_failures: Family<LeaderLabel, Counter>,
}

impl FetcherMetrics {
    fn register(r: &mut Registry) -> FetcherMetrics {
        FetcherMetrics {
            replica_fetcher_max_lag: registered(
                r,
                "replica_fetcher_max_lag",
                "Max over followed partitions of leader high watermark minus next fetch offset",
                Gauge::default(),
            ),
            fetcher_requests: registered(
                r,
                "replica_fetcher_requests",
                "Fetch requests sent by this broker's replica fetchers, per source leader",
                Family::default(),
            ),
            fetcher_failures: registered(
                r,
                "replica_fetcher_failed_requests",
                "Replica fetcher requests (or connection attempts) to a source leader that failed",
                Family::default(),
            ),
        }
    }
}

/// The purgatories' sizes, both series present from the start.
fn register_purgatory_size(r: &mut Registry) -> Family<OperationLabel, Gauge> {
    let purgatory_size = registered(
        r,
        "purgatory_size",
        "Delayed operations waiting in a purgatory",
        Family::default(),
    );
    for op in ["fetch", "produce"] {
        drop(purgatory_size.get_or_create(&OperationLabel { operation: op }));
    }
    purgatory_size
}

/// Requests and their latency, per API: one handle per API, in
/// `syncline_proto::API_NAMES` order.
fn register_apis(r: &mut Registry) -> Vec<Arc<ApiMetrics>> {
    let requests: Family<ApiLabel, Counter> = registered(
        r,
        "requests",
        "Requests received, per API",
        Family::default(),
    );
    let latency = registered(
        r,
        "request_duration_seconds",
        "Time from a request's arrival to its response, per API",
        Family::<ApiLabel, Histogram>::new_with_constructor(|| {
            Histogram::new(exponential_buckets(0.000_05, 2.0, 20))
        }),
    );
    syncline_proto::API_NAMES
        .iter()
        .map(|api| {
            let label = ApiLabel { api };
            Arc::new(ApiMetrics {
                requests: requests.get_or_create_owned(&label),
                latency: latency.get_or_create_owned(&label),
            })
        })
        .collect()
}

/// Record bytes in and out: produced, fetched (with sendfile or copied),
/// replicated under a throttle; and idempotent producers' refused batches.
struct TrafficMetrics {
    bytes_in: Counter,
    bytes_out: Counter,
    produce_duplicates: Counter,
    produce_out_of_order: Counter,
    throttled_replication_bytes: Family<SideLabel, Counter>,
    fetch_sendfile_bytes: Counter,
    fetch_copied_bytes: Counter,
}

impl TrafficMetrics {
    fn register(r: &mut Registry) -> TrafficMetrics {
        let bytes_in = registered(
            r,
            "bytes_in",
            "Record bytes appended by producers",
            Counter::default(),
        );
        let bytes_out = registered(
            r,
            "bytes_out",
            "Record bytes sent to consumers and followers",
            Counter::default(),
        );
        let produce_duplicates = registered(
            r,
            "produce_duplicates",
            "Idempotent producers' retries of batches already in the log, answered with the original offsets and not written again",
            Counter::default(),
        );
        let produce_out_of_order = registered(
            r,
            "produce_out_of_order_sequences",
            "Idempotent producers' batches refused with OUT_OF_ORDER_SEQUENCE_NUMBER (a gap in the sequence)",
            Counter::default(),
        );
        let throttled_replication_bytes: Family<SideLabel, Counter> = registered(
            r,
            "throttled_replication_bytes",
            "Record bytes of throttled replicas (added by a reassignment, out of the ISR) \
             replicated under leader_/follower_replication_throttled_rate, per side",
            Family::default(),
        );
        for side in [ThrottleSide::Leader, ThrottleSide::Follower] {
            drop(throttled_replication_bytes.get_or_create(&side.label()));
        }
        // Two counters rather than a family with a label: a family is a HashMap,
        // and one more of those changes the simulation's traces (see crates/sim).
        let fetch_sendfile_bytes = registered(
            r,
            "fetch_sendfile_bytes",
            "Record bytes of fetch responses sent from the segment files to plain TCP \
             sockets with sendfile (zero-copy)",
            Counter::default(),
        );
        let fetch_copied_bytes = registered(
            r,
            "fetch_copied_bytes",
            "Record bytes of fetch responses read from the segment files into memory to be \
             written (TLS, or any stream that is not a plain TCP socket)",
            Counter::default(),
        );
        TrafficMetrics {
            bytes_in,
            bytes_out,
            produce_duplicates,
            produce_out_of_order,
            throttled_replication_bytes,
            fetch_sendfile_bytes,
            fetch_copied_bytes,
        }
    }
}

/// Series per partition led here, for the first [`MAX_PARTITION_SERIES`].
struct PerPartitionMetrics {
    partition_isr_size: Family<PartitionLabel, Gauge>,
    partition_max_replica_lag: Family<PartitionLabel, Gauge>,
}

impl PerPartitionMetrics {
    fn register(r: &mut Registry) -> PerPartitionMetrics {
        PerPartitionMetrics {
            partition_isr_size: registered(
                r,
                "partition_isr_size",
                "ISR size of each partition led here (first 1000 partitions)",
                Family::default(),
            ),
            partition_max_replica_lag: registered(
                r,
                "partition_max_replica_lag",
                "Largest follower lag in offsets of each partition led here (first 1000 partitions)",
                Family::default(),
            ),
        }
    }
}
