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
use prometheus_client::registry::Registry;
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
        let isr_shrinks = Counter::default();
        let isr_expands = Counter::default();
        let failed_isr_updates = Counter::default();
        registry.register(
            "isr_shrinks",
            "ISR shrinks committed for partitions this broker leads (Kafka IsrShrinksPerSec)",
            isr_shrinks.clone(),
        );
        registry.register(
            "isr_expands",
            "ISR expansions committed for partitions this broker leads (Kafka IsrExpandsPerSec)",
            isr_expands.clone(),
        );
        registry.register(
            "failed_isr_updates",
            "AlterPartition proposals the controller refused or that failed",
            failed_isr_updates.clone(),
        );
        let authentication_failures = Counter::default();
        registry.register(
            "authentication_failures",
            "SASL authentications this broker refused (a peer with a wrong or unknown credential)",
            authentication_failures.clone(),
        );
        let authorization_failures = Counter::default();
        registry.register(
            "authorization_failures",
            "Internal-API requests refused with CLUSTER_AUTHORIZATION_FAILED (not from the broker they claim)",
            authorization_failures.clone(),
        );
        let connections_refused = Counter::default();
        registry.register(
            "connections_refused",
            "Connections closed on accept: max_connections or max_connections_per_ip reached",
            connections_refused.clone(),
        );
        let gauge = |registry: &mut Registry, name: &str, help: &str| {
            let g = Gauge::default();
            registry.register(name, help, g.clone());
            g
        };
        let connections = gauge(
            &mut registry,
            "connections",
            "Client and broker connections open on this broker's listeners",
        );
        let under_replicated_partitions = gauge(
            &mut registry,
            "under_replicated_partitions",
            "Partitions led here whose ISR is smaller than the replica set",
        );
        let under_min_isr_partition_count = gauge(
            &mut registry,
            "under_min_isr_partition_count",
            "Partitions led here whose ISR is below min.insync.replicas",
        );
        let at_min_isr_partition_count = gauge(
            &mut registry,
            "at_min_isr_partition_count",
            "Partitions led here whose ISR is exactly min.insync.replicas",
        );
        let leader_count = gauge(
            &mut registry,
            "leader_count",
            "Partitions this broker leads",
        );
        let producer_ids = gauge(
            &mut registry,
            "producer_ids",
            "Idempotent producers with state in the partitions led here (one per producer and partition)",
        );
        let partition_count = gauge(
            &mut registry,
            "partition_count",
            "Partition replicas this broker hosts",
        );
        let offline_partitions_count = gauge(
            &mut registry,
            "offline_partitions_count",
            "Partitions without a leader (reported by the active controller)",
        );
        let preferred_replica_imbalance_count = gauge(
            &mut registry,
            "preferred_replica_imbalance_count",
            "Partitions not led by their preferred replica (reported by the active controller)",
        );
        let reassigning_partitions = gauge(
            &mut registry,
            "reassigning_partitions",
            "Partitions with a replica reassignment in progress (reported by the active controller)",
        );
        let fenced_broker_count = gauge(
            &mut registry,
            "fenced_broker_count",
            "Registered brokers that are fenced (reported by the active controller)",
        );
        let active_broker_count = gauge(
            &mut registry,
            "active_broker_count",
            "Registered brokers that are not fenced (reported by the active controller)",
        );
        let unclean_leader_elections = Counter::default();
        registry.register(
            "unclean_leader_elections",
            "Leaders elected from outside the ISR (reported by the active controller)",
            unclean_leader_elections.clone(),
        );
        let active_controller = gauge(
            &mut registry,
            "active_controller",
            "1 on the broker hosting the active controller",
        );
        let metadata_log_end_offset = gauge(
            &mut registry,
            "metadata_log_end_offset",
            "End of this controller voter's metadata (Raft) log",
        );
        let controller_elections = Counter::default();
        registry.register(
            "controller_elections",
            "Active controllers this voter has seen elected (new quorum leaders)",
            controller_elections.clone(),
        );
        let replica_fetcher_max_lag = gauge(
            &mut registry,
            "replica_fetcher_max_lag",
            "Max over followed partitions of leader high watermark minus next fetch offset",
        );
        let fetcher_requests = Family::<LeaderLabel, Counter>::default();
        registry.register(
            "replica_fetcher_requests",
            "Fetch requests sent by this broker's replica fetchers, per source leader",
            fetcher_requests.clone(),
        );
        let fetcher_failures = Family::<LeaderLabel, Counter>::default();
        registry.register(
            "replica_fetcher_failed_requests",
            "Replica fetcher requests (or connection attempts) to a source leader that failed",
            fetcher_failures.clone(),
        );
        let purgatory_size = Family::<OperationLabel, Gauge>::default();
        registry.register(
            "purgatory_size",
            "Delayed operations waiting in a purgatory",
            purgatory_size.clone(),
        );
        let requests = Family::<ApiLabel, Counter>::default();
        registry.register("requests", "Requests received, per API", requests.clone());
        let latency = Family::<ApiLabel, Histogram>::new_with_constructor(|| {
            Histogram::new(exponential_buckets(0.000_05, 2.0, 20))
        });
        registry.register(
            "request_duration_seconds",
            "Time from a request's arrival to its response, per API",
            latency.clone(),
        );
        let apis = syncline_proto::API_NAMES
            .iter()
            .map(|api| {
                let label = ApiLabel { api };
                Arc::new(ApiMetrics {
                    requests: requests.get_or_create_owned(&label),
                    latency: latency.get_or_create_owned(&label),
                })
            })
            .collect();
        let bytes_in = Counter::default();
        registry.register(
            "bytes_in",
            "Record bytes appended by producers",
            bytes_in.clone(),
        );
        let bytes_out = Counter::default();
        registry.register(
            "bytes_out",
            "Record bytes sent to consumers and followers",
            bytes_out.clone(),
        );
        let produce_duplicates = Counter::default();
        registry.register(
            "produce_duplicates",
            "Idempotent producers' retries of batches already in the log, answered with the original offsets and not written again",
            produce_duplicates.clone(),
        );
        let produce_out_of_order = Counter::default();
        registry.register(
            "produce_out_of_order_sequences",
            "Idempotent producers' batches refused with OUT_OF_ORDER_SEQUENCE_NUMBER (a gap in the sequence)",
            produce_out_of_order.clone(),
        );
        let throttled_replication_bytes = Family::<SideLabel, Counter>::default();
        registry.register(
            "throttled_replication_bytes",
            "Record bytes of throttled replicas (added by a reassignment, out of the ISR) \
             replicated under leader_/follower_replication_throttled_rate, per side",
            throttled_replication_bytes.clone(),
        );
        for side in [ThrottleSide::Leader, ThrottleSide::Follower] {
            drop(throttled_replication_bytes.get_or_create(&side.label()));
        }
        // Two counters rather than a family with a label: a family is a HashMap,
        // and one more of those changes the simulation's traces (see crates/sim).
        let fetch_sendfile_bytes = Counter::default();
        registry.register(
            "fetch_sendfile_bytes",
            "Record bytes of fetch responses sent from the segment files to plain TCP \
             sockets with sendfile (zero-copy)",
            fetch_sendfile_bytes.clone(),
        );
        let fetch_copied_bytes = Counter::default();
        registry.register(
            "fetch_copied_bytes",
            "Record bytes of fetch responses read from the segment files into memory to be \
             written (TLS, or any stream that is not a plain TCP socket)",
            fetch_copied_bytes.clone(),
        );
        let partition_isr_size = Family::<PartitionLabel, Gauge>::default();
        registry.register(
            "partition_isr_size",
            "ISR size of each partition led here (first 1000 partitions)",
            partition_isr_size.clone(),
        );
        let partition_max_replica_lag = Family::<PartitionLabel, Gauge>::default();
        registry.register(
            "partition_max_replica_lag",
            "Largest follower lag in offsets of each partition led here (first 1000 partitions)",
            partition_max_replica_lag.clone(),
        );
        for op in ["fetch", "produce"] {
            drop(purgatory_size.get_or_create(&OperationLabel { operation: op }));
        }
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
        }
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

    /// An idempotent producer's duplicate batch was answered without a write.
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
        let mut out = String::new();
        if prometheus_client::encoding::text::encode(&mut out, &self.registry).is_err() {
            out.clear();
        }
        out
    }
}
