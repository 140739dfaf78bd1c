//! The broker's delayed operations: a fetch waiting for `min_bytes` (DelayedFetch)
//! and an acks=all produce waiting for the high watermark (DelayedProduce). They
//! wait in a purgatory keyed by partition and hold no task: whoever completes them
//! (an append, an HW advance, a role change, the timer, a closed connection) runs
//! `on_complete`, which sends the response.

use std::sync::Arc;

use parking_lot::Mutex;
use syncline_log::Records;
use syncline_proto::{pb, ErrorCode, TopicPartition};
use syncline_purgatory::{Completion, DelayedOperation, OpHandle, Purgatory};
use syncline_replication::fetch::{self, FetchBudget, FetchFrom, WaitingPartition};

use crate::metrics::{BrokerMetrics, ThrottleSide};
use crate::replica::fetch_session::{FetchSessionCache, SessionContext};
use crate::replica::partition::{Partition, ProduceCheck};
use crate::replica::quota::ReplicationQuota;
use crate::responder::{Pending, Responder};
use crate::send::FetchRegions;

/// A delayed operation waiting on behalf of a connection, with the purgatory
/// it waits in: cancelled there when the connection closes.
pub(crate) struct Waiting<O: DelayedOperation> {
    pub purgatory: Arc<Purgatory<TopicPartition, O>>,
    pub handle: OpHandle<O>,
}

impl<O: DelayedOperation> std::fmt::Debug for Waiting<O> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Waiting")
            .field("purgatory", &self.purgatory.name())
            .field("completed", &self.handle.is_completed())
            .finish()
    }
}

impl<O: DelayedOperation> Pending for Waiting<O> {
    fn is_completed(&self) -> bool {
        self.handle.is_completed()
    }

    fn cancel(&self) {
        self.purgatory.cancel(&self.handle);
    }
}

// --- fetch ---

/// The request-wide parameters of a fetch.
#[derive(Debug, Clone, Copy)]
pub(crate) struct FetchParams {
    /// A consumer (and whether a follower may serve it), or a follower.
    pub from: FetchFrom,
    /// A follower fetch that is answered as soon as the high watermark moves, so
    /// that the follower learns it within one round trip: only where followers
    /// serve consumers (`replica_selector = "rack_aware"`), since their high
    /// watermark is then what those consumers can read. Elsewhere the follower
    /// learns it with its next answered fetch, as in Kafka: pushing it would
    /// double the fetches under load (a second answer per appended batch).
    pub push_high_watermark: bool,
    pub min_bytes: u64,
    pub max_bytes: usize,
    /// Records are read as regions of the segment files, sent without being
    /// copied ([`crate::send`]).
    pub zero_copy: bool,
}

impl FetchParams {
    pub(crate) fn is_follower(&self) -> bool {
        self.from.is_follower()
    }
}

/// One partition of a fetch, resolved.
#[derive(Debug, Clone)]
pub(crate) struct FetchPartitionStatus {
    pub topic_index: usize,
    pub partition_index: usize,
    pub partition: Arc<Partition>,
    pub fetch_offset: i64,
    pub current_leader_epoch: Option<i32>,
    pub last_fetched_epoch: Option<i32>,
    pub partition_max_bytes: usize,
    /// The high watermark the first read would have told a follower: with
    /// `push_high_watermark`, a follower fetch waiting in the purgatory is answered
    /// as soon as it moves.
    pub high_watermark_seen: i64,
    /// The leader's replication throttle, when this follower's replication of the
    /// partition is throttled ([`crate::replica::quota`]): while it is exceeded, the
    /// partition is answered without records and its bytes do not end the wait.
    pub throttle: Option<Arc<ReplicationQuota>>,
}

impl FetchPartitionStatus {
    /// Whether the throttle holds this partition's records back at `now`.
    fn held_back(&self, now: tokio::time::Instant) -> bool {
        self.throttle.as_ref().is_some_and(|q| q.is_exceeded(now))
    }
}

/// A partition read without error: under which leader epoch, and the leader's LEO
/// then (what a follower's fetch offset is measured against).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct ReadPoint {
    /// The leader epoch the read was validated under.
    pub leader_epoch: i32,
    /// The log end offset when read.
    pub log_end_offset: i64,
}

/// What [`read_partitions`] read.
#[derive(Debug, Default)]
pub(crate) struct ReadSummary {
    /// Record bytes read.
    pub bytes: usize,
    /// For a follower fetch, per status in order: where it was read (None: refused,
    /// or diverging). Empty for consumers, who record no progress.
    pub points: Vec<Option<ReadPoint>>,
    /// Of `bytes`, those of throttled partitions.
    pub throttled_bytes: usize,
    /// The records read as regions (`zero_copy`), not in the response.
    pub regions: FetchRegions,
}

impl ReadSummary {
    /// Counts what this read sends.
    pub(crate) fn count(&self, metrics: &BrokerMetrics) {
        metrics.bytes_out(self.bytes);
        if self.throttled_bytes > 0 {
            metrics.throttled_replication_bytes(ThrottleSide::Leader, self.throttled_bytes);
        }
    }
}

/// Reads every resolved partition of a fetch into `response` (whose entries for
/// unresolved partitions are already filled with their errors). At least one batch
/// is returned even past `max_bytes`, so that a large batch cannot stall the reader.
pub(crate) fn read_partitions(
    params: &FetchParams,
    statuses: &[FetchPartitionStatus],
    response: &mut pb::FetchResponse,
) -> ReadSummary {
    let mut budget = FetchBudget::new(params.max_bytes);
    let mut throttled_bytes = 0usize;
    let now = tokio::time::Instant::now();
    let follower = params.is_follower();
    let mut points = Vec::with_capacity(if follower { statuses.len() } else { 0 });
    let mut regions = FetchRegions::default();
    for s in statuses {
        let max = budget.read_limit(s.partition_max_bytes);
        let result = if let FetchFrom::Follower { id, .. } = params.from {
            s.partition.read_for_follower(
                id,
                s.fetch_offset,
                s.last_fetched_epoch,
                s.current_leader_epoch,
                max,
                params.zero_copy,
            )
        } else {
            s.partition.read_for_consumer(
                s.fetch_offset,
                max,
                s.current_leader_epoch,
                params.from.follower_read(),
                params.zero_copy,
            )
        };
        let topic = &mut response.responses[s.topic_index];
        let out = &mut topic.partitions[s.partition_index];
        match result {
            Ok(r) => {
                let records = if budget.admit(r.records.len(), s.held_back(now)) {
                    r.records
                } else {
                    Records::default()
                };
                if let Some(quota) = &s.throttle {
                    quota.record(records.len(), now);
                    throttled_bytes += records.len();
                }
                if follower {
                    points.push(r.diverging_epoch.is_none().then_some(ReadPoint {
                        leader_epoch: r.leader_epoch,
                        log_end_offset: r.log_end_offset,
                    }));
                }
                out.error_code = ErrorCode::None as i32;
                out.high_watermark = r.high_watermark;
                out.last_stable_offset = r.high_watermark;
                out.log_start_offset = r.log_start_offset;
                out.diverging_epoch = r.diverging_epoch.map(|d| pb::EpochEndOffset {
                    epoch: d.epoch,
                    end_offset: d.end_offset,
                });
                out.records = match records {
                    Records::Bytes(bytes) => bytes,
                    Records::Regions(r) => {
                        if !r.is_empty() {
                            regions.push(&topic.topic, out.partition, r);
                        }
                        bytes::Bytes::new()
                    }
                };
                out.current_leader = None;
            }
            Err(code) => {
                if follower {
                    points.push(None);
                }
                out.error_code = code as i32;
                out.high_watermark = -1;
                out.last_stable_offset = -1;
                out.log_start_offset = -1;
                out.records = bytes::Bytes::new();
                if code.is_leadership_error() {
                    out.current_leader = Some(s.partition.current_leader());
                }
            }
        }
    }
    ReadSummary {
        bytes: budget.used(),
        points,
        throttled_bytes,
        regions,
    }
}

/// Whether a waiting fetch may be answered now: a partition changed under it, its
/// high watermark moved (`push_high_watermark`), or `min_bytes` are there to read
/// (bytes a replication throttle holds back do not count: they would be answered as
/// nothing, and the follower would ask again at once).
pub(crate) fn fetch_ready(params: &FetchParams, statuses: &[FetchPartitionStatus]) -> bool {
    let now = tokio::time::Instant::now();
    let partitions = statuses.iter().map(|s| WaitingPartition {
        readiness: s.partition.fetch_readiness(
            s.fetch_offset,
            params.is_follower(),
            s.current_leader_epoch,
            params.from.follower_read(),
        ),
        partition_max_bytes: s.partition_max_bytes,
        held_back: s.held_back(now),
        high_watermark_moved: params.push_high_watermark
            && s.partition.high_watermark() > s.high_watermark_seen,
    });
    fetch::ready(params.min_bytes, partitions)
}

/// A fetch waiting until `min_bytes` are available, `max_wait_ms` passes, or a
/// partition changes under it (not leader any more, new epoch, truncated).
#[derive(Debug)]
pub(crate) struct DelayedFetch {
    params: FetchParams,
    statuses: Vec<FetchPartitionStatus>,
    /// The response with unresolved partitions' errors filled in.
    template: Mutex<Option<pb::FetchResponse>>,
    responder: Mutex<Option<Responder>>,
    /// Counts the bytes the answer carries (`syncline_bytes_out_total`), as the
    /// fetches answered at once are counted.
    metrics: Arc<BrokerMetrics>,
    /// The fetch session the answer belongs to (trims incremental answers).
    session: (Arc<FetchSessionCache>, SessionContext),
}

impl DelayedFetch {
    pub(crate) fn new(
        params: FetchParams,
        statuses: Vec<FetchPartitionStatus>,
        template: pb::FetchResponse,
        responder: Responder,
        metrics: Arc<BrokerMetrics>,
        session: (Arc<FetchSessionCache>, SessionContext),
    ) -> DelayedFetch {
        DelayedFetch {
            params,
            statuses,
            template: Mutex::new(Some(template)),
            responder: Mutex::new(Some(responder)),
            metrics,
            session,
        }
    }
}

impl DelayedOperation for DelayedFetch {
    fn try_complete(&self) -> bool {
        fetch_ready(&self.params, &self.statuses)
    }

    fn on_complete(&self, how: Completion) {
        let responder = self.responder.lock().take();
        let template = self.template.lock().take();
        let (Some(mut responder), Some(mut response)) = (responder, template) else {
            return;
        };
        if how == Completion::Cancelled {
            return;
        }
        let mut read = read_partitions(&self.params, &self.statuses, &mut response);
        // Counted out only if sent (a throttled consumer's are withheld).
        if responder.charge_fetch(&mut response, &mut read.regions) {
            read.count(&self.metrics);
        }
        self.session
            .0
            .finish(self.session.1, &mut response, &read.regions);
        responder.send_fetch(response, read.regions);
    }
}

// --- produce ---

/// One partition of an acks=all produce that has been appended and waits for the
/// high watermark.
#[derive(Debug)]
pub(crate) struct ProducePartitionStatus {
    pub topic_index: usize,
    pub partition_index: usize,
    pub partition: Arc<Partition>,
    /// Last offset + 1.
    pub required_offset: i64,
    pub append_epoch: i32,
    pub replication_factor: i32,
}

/// An acks=all produce waiting until every pending partition's HW passes its
/// records, the leader loses leadership, or the timeout passes.
#[derive(Debug)]
pub(crate) struct DelayedProduce {
    pending: Vec<ProducePartitionStatus>,
    state: Mutex<ProduceState>,
}

#[derive(Debug)]
struct ProduceState {
    /// Per pending partition: its outcome once known.
    outcomes: Vec<Option<ProduceCheck>>,
    response: Option<pb::ProduceResponse>,
    responder: Option<Responder>,
}

impl DelayedProduce {
    pub(crate) fn new(
        pending: Vec<ProducePartitionStatus>,
        response: pb::ProduceResponse,
        responder: Responder,
    ) -> DelayedProduce {
        let outcomes = vec![None; pending.len()];
        DelayedProduce {
            pending,
            state: Mutex::new(ProduceState {
                outcomes,
                response: Some(response),
                responder: Some(responder),
            }),
        }
    }
}

impl DelayedOperation for DelayedProduce {
    fn try_complete(&self) -> bool {
        let mut st = self.state.lock();
        let mut done = true;
        for (i, p) in self.pending.iter().enumerate() {
            if st.outcomes[i].is_some() {
                continue;
            }
            match p.partition.check_produce(p.required_offset, p.append_epoch) {
                ProduceCheck::Pending => done = false,
                outcome => st.outcomes[i] = Some(outcome),
            }
        }
        done
    }

    fn on_complete(&self, how: Completion) {
        let mut st = self.state.lock();
        let (Some(mut response), Some(responder)) = (st.response.take(), st.responder.take())
        else {
            return;
        };
        if how == Completion::Cancelled {
            return;
        }
        for (i, p) in self.pending.iter().enumerate() {
            // Not resolved by an event (expired): one last look.
            let outcome = match st.outcomes[i].take() {
                Some(o) => o,
                None => p.partition.check_produce(p.required_offset, p.append_epoch),
            };
            let out = &mut response.topics[p.topic_index].partitions[p.partition_index];
            out.replication_factor = p.replication_factor;
            let failed = match outcome {
                ProduceCheck::Acked { isr, replicas } => {
                    out.error_code = ErrorCode::None as i32;
                    out.acked_isr = isr;
                    // The replica set the acknowledgement is measured against.
                    out.replication_factor = replicas;
                    None
                }
                ProduceCheck::Pending => Some(p.partition.expired_produce_error()),
                ProduceCheck::Failed(code) => Some(code),
            };
            if let Some(code) = failed {
                out.error_code = code as i32;
                out.acked_isr.clear();
                if code.is_leadership_error() {
                    out.current_leader = Some(p.partition.current_leader());
                }
            }
        }
        drop(st);
        responder.send(pb::response::Body::Produce(response));
    }
}
