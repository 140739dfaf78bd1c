//! The client's picture of the cluster: brokers and, per topic, who leads each
//! partition at which leader epoch. Pure: updated from Metadata responses and
//! leader hints, read by the producer and consumer to route requests.

use std::collections::{BTreeMap, HashMap};

use syncline_proto::{pb, ErrorCode, TopicPartition};
use tokio::time::Instant;

/// A broker's client endpoint.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct BrokerEndpoint {
    /// Node id.
    pub id: i32,
    /// Host name or address.
    pub host: String,
    /// TCP port.
    pub port: i32,
    /// Rack, if the broker has one.
    pub rack: Option<String>,
}

impl BrokerEndpoint {
    /// `host:port`.
    pub fn address(&self) -> String {
        if self.host.contains(':') {
            format!("[{}]:{}", self.host, self.port)
        } else {
            format!("{}:{}", self.host, self.port)
        }
    }
}

impl From<&pb::BrokerEndpoint> for BrokerEndpoint {
    fn from(b: &pb::BrokerEndpoint) -> Self {
        BrokerEndpoint {
            id: b.node_id,
            host: b.host.clone(),
            port: b.port,
            rack: (!b.rack.is_empty()).then(|| b.rack.clone()),
        }
    }
}

/// One partition as the metadata describes it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PartitionInfo {
    /// Partition number.
    pub partition: i32,
    /// The leader's broker id, `None` while the partition is offline.
    pub leader: Option<i32>,
    /// The leader epoch, sent with requests for fencing (KIP-320).
    pub leader_epoch: i32,
    /// Assigned replicas, preferred leader first.
    pub replicas: Vec<i32>,
    /// In-sync replicas.
    pub isr: Vec<i32>,
    /// Replicas on fenced brokers.
    pub offline_replicas: Vec<i32>,
}

impl From<&pb::PartitionMetadata> for PartitionInfo {
    fn from(p: &pb::PartitionMetadata) -> Self {
        PartitionInfo {
            partition: p.partition,
            leader: (p.leader_id >= 0).then_some(p.leader_id),
            leader_epoch: p.leader_epoch,
            replicas: p.replicas.clone(),
            isr: p.isr.clone(),
            offline_replicas: p.offline_replicas.clone(),
        }
    }
}

/// A topic's metadata: an error (e.g. `LEADER_NOT_AVAILABLE` while it is being
/// created) or its partitions, sorted by number.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct TopicInfo {
    pub(crate) error: Option<ErrorCode>,
    pub(crate) partitions: Vec<PartitionInfo>,
}

/// One topic's newest leader epochs seen, by partition, under its topic id.
#[derive(Debug, Default)]
struct SeenEpochs {
    /// 0 until an answer names it.
    topic_id: i64,
    /// Indexed by partition; -1 where none was seen. No longer than the most
    /// partitions an answer listed: see [`SeenEpochs::record`].
    epochs: Vec<i32>,
}

impl SeenEpochs {
    /// Takes the id of an answer's topic; false (and everything seen
    /// forgotten) when it names another incarnation of the topic, deleted and
    /// created again, whose leader epochs started over. An id of 0 (the
    /// answering broker does not know it) is taken for the same topic.
    fn adopt(&mut self, topic_id: i64) -> bool {
        if topic_id == 0 || self.topic_id == topic_id {
            return true;
        }
        let same = self.topic_id == 0;
        if !same {
            self.epochs.clear();
        }
        self.topic_id = topic_id;
        same
    }

    fn epoch(&self, partition: i32) -> i32 {
        usize::try_from(partition)
            .ok()
            .and_then(|i| self.epochs.get(i))
            .copied()
            .unwrap_or(-1)
    }

    /// Records `partition`'s epoch, of a topic of `partitions` partitions.
    /// A topic's partitions are numbered from 0: a number past its count
    /// (an answer from a broken or hostile broker) is not recorded, so that
    /// it cannot make the client allocate gigabytes (4 bytes a partition up
    /// to it).
    fn record(&mut self, partition: i32, epoch: i32, partitions: usize) {
        let Some(i) = usize::try_from(partition).ok().filter(|&i| i < partitions) else {
            return;
        };
        if self.epochs.len() <= i {
            self.epochs.resize(i + 1, -1);
        }
        self.epochs[i] = self.epochs[i].max(epoch);
    }
}

/// A map by topic name that a producer looks up for every record it sends:
/// hashed with foldhash rather than SipHash (with SipHash, the two lookups per
/// record were a tenth of a producer's instructions). The seed is fixed, so
/// that the simulation stays deterministic; the names come from the
/// application and its own cluster.
pub(crate) type TopicMap<V> = HashMap<String, V, foldhash::fast::FixedState>;

/// The cached cluster metadata.
#[derive(Debug, Default)]
pub(crate) struct Metadata {
    pub(crate) cluster_id: String,
    pub(crate) controller_id: Option<i32>,
    pub(crate) brokers: BTreeMap<i32, BrokerEndpoint>,
    topics: TopicMap<TopicInfo>,
    /// The newest leader epoch seen per partition, kept when a topic drops out
    /// of `topics` (an answer of UNKNOWN_TOPIC_OR_PARTITION, perhaps from a
    /// broker still loading its metadata): no later answer may take the
    /// client back to an older leader (KIP-320's last seen epochs).
    seen: BTreeMap<String, SeenEpochs>,
    /// When the last Metadata response was applied.
    updated_at: Option<Instant>,
    /// Set by routing errors: the next chance to refresh should take it.
    stale: bool,
}

impl Metadata {
    /// Applies a Metadata response received at `now`.
    ///
    /// A partition whose cached leader epoch is newer than the response's keeps the
    /// cached entry: the answering broker has not caught up with the controller yet.
    /// One the client has forgotten since (its topic answered unknown in between)
    /// but whose newer epoch it has seen gets no leader until an answer as new:
    /// going back to an older leader is not only a fencing error waiting to
    /// happen; a deposed leader cut off from the controller still takes writes,
    /// and its refusal of an idempotent producer's batch that its successor wrote
    /// would read as a sequence gap.
    pub(crate) fn update(&mut self, response: &pb::MetadataResponse, now: Instant) {
        self.cluster_id.clone_from(&response.cluster_id);
        self.controller_id = (response.controller_id >= 0).then_some(response.controller_id);
        if !response.brokers.is_empty() {
            self.brokers = response
                .brokers
                .iter()
                .map(|b| (b.node_id, BrokerEndpoint::from(b)))
                .collect();
        }
        for topic in &response.topics {
            let code = ErrorCode::from_wire(topic.error_code);
            // Gone, or not ours to see: nothing to cache (the caller reports
            // the code).
            if matches!(
                code,
                ErrorCode::UnknownTopicOrPartition | ErrorCode::TopicAuthorizationFailed
            ) {
                self.topics.remove(&topic.name);
                continue;
            }
            let mut partitions: Vec<PartitionInfo> =
                topic.partitions.iter().map(PartitionInfo::from).collect();
            partitions.sort_by_key(|p| p.partition);
            partitions.dedup_by_key(|p| p.partition);
            let count = partitions.len();
            let seen = self.seen.entry(topic.name.clone()).or_default();
            let same_topic = seen.adopt(topic.topic_id);
            let old = self.topics.get(&topic.name).filter(|_| same_topic);
            for p in &mut partitions {
                let newest = seen.epoch(p.partition);
                if p.leader_epoch < newest {
                    match old
                        .and_then(|o| o.partitions.iter().find(|c| c.partition == p.partition))
                        .filter(|c| c.leader_epoch > p.leader_epoch)
                    {
                        Some(cached) => *p = cached.clone(),
                        // Forgotten since: no leader until an answer as new
                        // as what was seen.
                        None => {
                            p.leader = None;
                            p.leader_epoch = newest;
                        }
                    }
                }
                seen.record(p.partition, p.leader_epoch, count);
            }
            self.topics.insert(
                topic.name.clone(),
                TopicInfo {
                    error: (code != ErrorCode::None).then_some(code),
                    partitions,
                },
            );
        }
        self.updated_at = Some(now);
        self.stale = false;
    }

    /// A topic's metadata, if known.
    pub(crate) fn topic(&self, topic: &str) -> Option<&TopicInfo> {
        self.topics.get(topic)
    }

    /// The number of partitions of a topic whose metadata is usable.
    pub(crate) fn partition_count(&self, topic: &str) -> Option<usize> {
        self.topics
            .get(topic)
            .filter(|t| !t.partitions.is_empty())
            .map(|t| t.partitions.len())
    }

    /// A partition's metadata.
    pub(crate) fn partition(&self, tp: &TopicPartition) -> Option<&PartitionInfo> {
        self.topics
            .get(&*tp.topic)?
            .partitions
            .iter()
            .find(|p| p.partition == tp.partition)
    }

    /// The partition's leader and leader epoch, when it has a leader whose address
    /// is known.
    pub(crate) fn leader(&self, tp: &TopicPartition) -> Option<(i32, i32)> {
        let p = self.partition(tp)?;
        let leader = p.leader?;
        self.brokers
            .contains_key(&leader)
            .then_some((leader, p.leader_epoch))
    }

    /// Applies a leader hint from a response (`current_leader`), if it is newer
    /// than what the cache holds. Returns whether the cache changed.
    pub(crate) fn apply_leader_hint(
        &mut self,
        tp: &TopicPartition,
        leader: i32,
        epoch: i32,
    ) -> bool {
        if leader < 0 || !self.brokers.contains_key(&leader) {
            return false;
        }
        let Some(t) = self.topics.get_mut(&*tp.topic) else {
            return false;
        };
        let count = t.partitions.len();
        let Some(p) = t
            .partitions
            .iter_mut()
            .find(|p| p.partition == tp.partition)
        else {
            return false;
        };
        if epoch > p.leader_epoch {
            p.leader = Some(leader);
            p.leader_epoch = epoch;
            if let Some(seen) = self.seen.get_mut(&*tp.topic) {
                seen.record(tp.partition, epoch, count);
            }
            true
        } else {
            false
        }
    }

    /// Marks the cache as needing a refresh (after a routing error).
    pub(crate) fn mark_stale(&mut self) {
        self.stale = true;
    }

    /// Whether a refresh is due: marked stale, never loaded, or older than
    /// `max_age_ms`.
    pub(crate) fn needs_refresh(&self, now: Instant, max_age_ms: u64) -> bool {
        self.stale
            || self.updated_at.is_none_or(|at| {
                now.saturating_duration_since(at).as_millis() >= u128::from(max_age_ms)
            })
    }

    /// When the last refresh was applied.
    pub(crate) fn updated_at(&self) -> Option<Instant> {
        self.updated_at
    }
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;

    pub(crate) fn partition(
        p: i32,
        leader: i32,
        epoch: i32,
        replicas: &[i32],
    ) -> pb::PartitionMetadata {
        pb::PartitionMetadata {
            partition: p,
            leader_id: leader,
            leader_epoch: epoch,
            replicas: replicas.to_vec(),
            isr: replicas.to_vec(),
            ..Default::default()
        }
    }

    pub(crate) fn response(topics: Vec<pb::TopicMetadata>) -> pb::MetadataResponse {
        pb::MetadataResponse {
            cluster_id: "c".into(),
            controller_id: 1,
            brokers: (1..=3)
                .map(|id| pb::BrokerEndpoint {
                    node_id: id,
                    host: "127.0.0.1".into(),
                    port: 9090 + id,
                    rack: String::new(),
                })
                .collect(),
            topics,
        }
    }

    pub(crate) fn topic(name: &str, partitions: Vec<pb::PartitionMetadata>) -> pb::TopicMetadata {
        pb::TopicMetadata {
            name: name.into(),
            error_code: 0,
            partitions,
            topic_id: 0,
        }
    }

    #[test]
    fn a_huge_partition_number_in_an_answer_allocates_nothing_for_it() {
        let now = Instant::now();
        let mut md = Metadata::default();
        let answer = |p: i32, epoch: i32| {
            response(vec![topic(
                "t",
                vec![partition(0, 1, epoch, &[1]), partition(p, 1, epoch, &[1])],
            )])
        };
        // A broker, hostile or broken, names partition P of a topic it
        // answers two partitions of: what is remembered of it must not grow
        // with P (4 bytes a partition up to P: 8 GB for two billion). The
        // first P is one a regression survives (40 MB), to fail on.
        for p in [10_000_000, 2_000_000_000, i32::MAX] {
            md.update(&answer(p, 3), now);
            let room = md.seen["t"].epochs.capacity();
            assert!(room <= 16, "partition {p}: room for {room} epochs");
        }
        // The leader epochs of the partitions the answer could hold are kept.
        md.update(&answer(5, 2), now);
        assert_eq!(md.leader(&TopicPartition::new("t", 0)), Some((1, 3)));
    }

    #[test]
    fn update_routes_to_leaders_and_keeps_newer_epochs() {
        let now = Instant::now();
        let mut md = Metadata::default();
        md.update(
            &response(vec![topic(
                "t",
                vec![partition(1, 2, 5, &[2, 3]), partition(0, 1, 3, &[1, 2])],
            )]),
            now,
        );
        let tp0 = TopicPartition::new("t", 0);
        assert_eq!(md.partition_count("t"), Some(2));
        assert_eq!(md.leader(&tp0), Some((1, 3)));
        assert_eq!(md.brokers[&2].address(), "127.0.0.1:9092");

        // A lagging broker answers with an older epoch for partition 1: ignored.
        md.update(
            &response(vec![topic(
                "t",
                vec![partition(0, 3, 4, &[1, 3]), partition(1, 1, 4, &[1])],
            )]),
            now,
        );
        assert_eq!(md.leader(&tp0), Some((3, 4)));
        assert_eq!(md.leader(&TopicPartition::new("t", 1)), Some((2, 5)));

        // Offline partition: no leader to route to.
        md.update(
            &response(vec![topic(
                "t",
                vec![partition(0, -1, 6, &[1]), partition(1, 2, 5, &[2])],
            )]),
            now,
        );
        assert_eq!(md.leader(&tp0), None);
    }

    /// Applies an answer about topic "t": under `id`, one partition.
    fn answer_t(md: &mut Metadata, id: i64, p: pb::PartitionMetadata) {
        let t = pb::TopicMetadata {
            topic_id: id,
            ..topic("t", vec![p])
        };
        md.update(&response(vec![t]), Instant::now());
    }

    /// Applies an answer that topic "t" is unknown.
    fn forget_t(md: &mut Metadata) {
        let mut gone = topic("t", vec![]);
        gone.error_code = ErrorCode::UnknownTopicOrPartition as i32;
        md.update(&response(vec![gone]), Instant::now());
        assert!(md.topic("t").is_none());
    }

    /// Seed 307851 of the simulation: the leader at epoch 1 crashed, a broker
    /// still loading its metadata answered the topic unknown, and a deposed
    /// leader cut off from the controller answered epoch 0. The client must not
    /// route to it: the partition has no leader until an answer of epoch >= 1.
    #[test]
    fn a_forgotten_topic_does_not_take_the_client_back_to_an_older_leader() {
        let tp0 = TopicPartition::new("t", 0);
        let mut md = Metadata::default();
        answer_t(&mut md, 7, partition(0, 1, 0, &[1, 2]));
        answer_t(&mut md, 7, partition(0, 2, 1, &[1, 2]));
        assert_eq!(md.leader(&tp0), Some((2, 1)));
        forget_t(&mut md);

        // The deposed leader's answer, with and without the topic's id.
        for id in [7, 0] {
            answer_t(&mut md, id, partition(0, 1, 0, &[1, 2]));
            assert_eq!(md.leader(&tp0), None, "topic id {id}");
            assert_eq!(md.partition(&tp0).map(|p| p.leader_epoch), Some(1));
        }
        // Its successor's hint and answers move it on.
        assert!(md.apply_leader_hint(&tp0, 3, 2));
        assert_eq!(md.leader(&tp0), Some((3, 2)));
        answer_t(&mut md, 7, partition(0, 2, 1, &[1, 2]));
        assert_eq!(md.leader(&tp0), Some((3, 2)));
        answer_t(&mut md, 7, partition(0, 1, 3, &[1, 2]));
        assert_eq!(md.leader(&tp0), Some((1, 3)));
    }

    /// A topic deleted and created again under its name has a new id and
    /// starts its leader epochs over: the old incarnation's epochs do not hold
    /// its partitions back.
    #[test]
    fn a_topic_created_again_starts_its_epochs_over() {
        let tp0 = TopicPartition::new("t", 0);
        let mut md = Metadata::default();
        answer_t(&mut md, 7, partition(0, 1, 5, &[1]));
        answer_t(&mut md, 40, partition(0, 2, 0, &[2]));
        assert_eq!(md.leader(&tp0), Some((2, 0)));
        forget_t(&mut md);
        answer_t(&mut md, 90, partition(0, 3, 0, &[3]));
        assert_eq!(md.leader(&tp0), Some((3, 0)));
    }

    #[test]
    fn unknown_topic_is_forgotten_and_errors_are_kept() {
        let now = Instant::now();
        let mut md = Metadata::default();
        md.update(
            &response(vec![topic("t", vec![partition(0, 1, 0, &[1])])]),
            now,
        );
        let mut gone = topic("t", vec![]);
        gone.error_code = ErrorCode::UnknownTopicOrPartition as i32;
        let mut creating = topic("u", vec![]);
        creating.error_code = ErrorCode::LeaderNotAvailable as i32;
        md.update(&response(vec![gone, creating]), now);
        assert!(md.topic("t").is_none());
        assert_eq!(
            md.topic("u").unwrap().error,
            Some(ErrorCode::LeaderNotAvailable)
        );
        assert_eq!(md.partition_count("u"), None);
    }

    #[test]
    fn leader_hints_only_move_forward() {
        let now = Instant::now();
        let mut md = Metadata::default();
        md.update(
            &response(vec![topic("t", vec![partition(0, 1, 3, &[1, 2])])]),
            now,
        );
        let tp = TopicPartition::new("t", 0);
        assert!(!md.apply_leader_hint(&tp, 2, 3));
        assert!(!md.apply_leader_hint(&tp, 9, 4), "unknown broker");
        assert!(md.apply_leader_hint(&tp, 2, 4));
        assert_eq!(md.leader(&tp), Some((2, 4)));
    }

    #[tokio::test(start_paused = true)]
    async fn refresh_is_due_when_stale_or_old() {
        let mut md = Metadata::default();
        assert!(md.needs_refresh(Instant::now(), 1000));
        md.update(&response(vec![]), Instant::now());
        assert!(!md.needs_refresh(Instant::now(), 1000));
        tokio::time::advance(std::time::Duration::from_millis(1000)).await;
        assert!(md.needs_refresh(Instant::now(), 1000));
        md.update(&response(vec![]), Instant::now());
        md.mark_stale();
        assert!(md.needs_refresh(Instant::now(), 1000));
    }
}
