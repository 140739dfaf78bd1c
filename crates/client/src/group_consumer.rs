//! A consumer that is a member of a consumer group (Kafka's classic protocol,
//! `consumer` protocol type with the `range` assignor): it shares the
//! subscribed topics' partitions with the group's other members, Kafka's
//! consumers included, resumes from the group's committed offsets and
//! commits its positions.
//!
//! One task drives everything from [`GroupConsumer::poll`]: it (re)joins when
//! needed, heartbeats when due, fetches in between and auto-commits. A
//! rebalance (a heartbeat answered REBALANCE_IN_PROGRESS) commits first, then
//! rejoins: the eager protocol Kafka's consumers speak by default.

use std::collections::{BTreeMap, BTreeSet};
use std::time::Duration;

use bytes::{BufMut, Bytes, BytesMut};
use kafka_protocol::messages::consumer_protocol_assignment::TopicPartition as AssignedPartitions;
use kafka_protocol::messages::{
    ConsumerProtocolAssignment, ConsumerProtocolSubscription, TopicName,
};
use kafka_protocol::protocol::{Encodable, StrBytes};
use syncline_proto::{pb, ErrorCode, TopicPartition};
use tokio::time::Instant;

use crate::cluster::expect_body;
use crate::config::ConsumerConfig;
use crate::consumer::Consumer;
use crate::error::ClientError;
use crate::groups::{decode_assignment, decode_versioned, find_coordinator};
use crate::record::ConsumerRecord;

/// Kafka's protocol type of consumer groups.
const PROTOCOL_TYPE: &str = "consumer";
/// The assignor this member offers (Kafka's RangeAssignor).
const RANGE: &str = "range";

/// A group member that consumes the partitions the group assigns it.
///
/// ```no_run
/// # async fn example() -> Result<(), syncline_client::ClientError> {
/// use std::time::Duration;
/// use syncline_client::{ConsumerConfig, GroupConsumer};
///
/// let mut config = ConsumerConfig::new("127.0.0.1:9092");
/// config.group_id = "billing".into();
/// let mut consumer = GroupConsumer::new(config, vec!["orders".into()])?;
/// for record in consumer.poll(Duration::from_secs(1)).await? {
///     println!("{}-{} {:?}", record.partition, record.offset, record.value);
/// }
/// consumer.close().await?; // commits and leaves the group
/// # Ok(()) }
/// ```
#[derive(Debug)]
pub struct GroupConsumer {
    consumer: Consumer,
    topics: Vec<String>,
    coordinator: Option<i32>,
    member_id: String,
    generation: i32,
    /// In the current generation with an assignment.
    joined: bool,
    next_heartbeat: Instant,
    next_commit: Instant,
}

/// Kafka's RangeAssignor: per topic, the members subscribed to it in member
/// id order each take a contiguous range; the first `partitions % members`
/// take one more.
pub(crate) fn range_assign(
    subscriptions: &BTreeMap<String, Vec<String>>,
    partition_counts: &BTreeMap<String, i32>,
) -> BTreeMap<String, Vec<TopicPartition>> {
    let mut out: BTreeMap<String, Vec<TopicPartition>> = subscriptions
        .keys()
        .map(|m| (m.clone(), Vec::new()))
        .collect();
    let topics: BTreeSet<&String> = subscriptions.values().flatten().collect();
    for topic in topics {
        let Some(&count) = partition_counts.get(topic) else {
            continue;
        };
        let members: Vec<&String> = subscriptions
            .iter()
            .filter(|(_, topics)| topics.contains(topic))
            .map(|(m, _)| m)
            .collect();
        let (n, m) = (count.max(0) as usize, members.len());
        let (per, extra) = (n / m, n % m);
        for (i, member) in members.into_iter().enumerate() {
            let start = i * per + i.min(extra);
            let len = per + usize::from(i < extra);
            out.entry(member.clone()).or_default().extend(
                (start..start + len).map(|p| TopicPartition::new(topic.as_str(), p as i32)),
            );
        }
    }
    out
}

fn versioned(version: i16, body: &impl Encodable) -> Bytes {
    let mut buf = BytesMut::new();
    buf.put_i16(version);
    // These messages hold only strings and arrays: encoding cannot fail.
    let _ = body.encode(&mut buf, version);
    buf.freeze()
}

fn subscription(topics: &[String]) -> Bytes {
    let mut s = ConsumerProtocolSubscription::default();
    s.topics = topics
        .iter()
        .map(|t| StrBytes::from_string(t.clone()))
        .collect();
    versioned(0, &s)
}

fn assignment(partitions: &[TopicPartition]) -> Bytes {
    let mut by_topic: BTreeMap<&str, Vec<i32>> = BTreeMap::new();
    for tp in partitions {
        by_topic.entry(&tp.topic).or_default().push(tp.partition);
    }
    let mut a = ConsumerProtocolAssignment::default();
    a.assigned_partitions = by_topic
        .into_iter()
        .map(|(topic, partitions)| {
            let mut t = AssignedPartitions::default();
            t.topic = TopicName(StrBytes::from_string(topic.to_string()));
            t.partitions = partitions;
            t
        })
        .collect();
    versioned(0, &a)
}

/// Whether a failed request to the coordinator means the group must find its
/// coordinator again: the broker cannot be reached, or it answered (for the
/// whole request) that it does not coordinate the group (any more, or yet:
/// the group's offsets partition moved, or its new leader is still loading).
fn moves_the_coordinator(e: &ClientError) -> bool {
    e.is_connectivity()
        || matches!(
            e.code(),
            Some(ErrorCode::NotCoordinator | ErrorCode::CoordinatorNotAvailable)
        )
}

fn protocol_error(code: ErrorCode, what: &str) -> ClientError {
    ClientError::Protocol {
        code,
        message: what.to_string(),
    }
}

impl GroupConsumer {
    /// A member of `config.group_id` subscribed to `topics`; joins on the
    /// first poll.
    pub fn new(config: ConsumerConfig, topics: Vec<String>) -> Result<GroupConsumer, ClientError> {
        if config.group_id.is_empty() {
            return Err(ClientError::Config(
                "a group consumer needs group.id (--group)".into(),
            ));
        }
        if topics.is_empty() {
            return Err(ClientError::Config(
                "subscribe to at least one topic".into(),
            ));
        }
        let now = Instant::now();
        Ok(GroupConsumer {
            consumer: Consumer::new(config)?,
            topics,
            coordinator: None,
            member_id: String::new(),
            generation: -1,
            joined: false,
            next_heartbeat: now,
            next_commit: now,
        })
    }

    fn config(&self) -> &ConsumerConfig {
        self.consumer.config()
    }

    /// The partitions assigned to this member now.
    pub fn assignment(&self) -> Vec<TopicPartition> {
        self.consumer.assignment()
    }

    /// Reads `tp` (assigned to this member) from `offset` on; the next commit
    /// commits it.
    pub fn seek(&mut self, tp: &TopicPartition, offset: i64) -> Result<(), ClientError> {
        self.consumer.seek(tp, offset)
    }

    /// This member's id and generation (empty and -1 before it joined).
    pub fn membership(&self) -> (&str, i32) {
        (&self.member_id, self.generation)
    }

    /// Waits up to `timeout` for records of the assigned partitions, joining
    /// the group first if needed, heartbeating and auto-committing on the way.
    pub async fn poll(&mut self, timeout: Duration) -> Result<Vec<ConsumerRecord>, ClientError> {
        let deadline = Instant::now() + timeout;
        if !self.joined {
            self.join().await?;
        }
        let mut records = Vec::new();
        while records.is_empty() && self.joined {
            let now = Instant::now();
            if now >= self.next_heartbeat {
                self.heartbeat().await?;
                continue;
            }
            if self.config().enable_auto_commit && now >= self.next_commit {
                self.commit_or_log().await;
            }
            if now >= deadline {
                break;
            }
            let wait = deadline.min(self.next_heartbeat) - now;
            records = self.consumer.poll(wait).await?;
        }
        Ok(records)
    }

    /// Commits the positions of the assigned partitions (the next offset to
    /// read of each), in the current generation.
    pub async fn commit(&mut self) -> Result<(), ClientError> {
        let positions = self.consumer.known_positions();
        if positions.is_empty() || !self.joined {
            return Ok(());
        }
        let mut topics: BTreeMap<String, Vec<pb::OffsetCommitPartition>> = BTreeMap::new();
        for (tp, offset) in positions {
            topics
                .entry(tp.topic.to_string())
                .or_default()
                .push(pb::OffsetCommitPartition {
                    partition: tp.partition,
                    offset,
                    leader_epoch: -1,
                    metadata: None,
                });
        }
        let body = pb::request::Body::OffsetCommit(pb::OffsetCommitRequest {
            group_id: self.config().group_id.clone(),
            generation_id: self.generation,
            member_id: self.member_id.clone(),
            topics: topics
                .into_iter()
                .map(|(name, partitions)| pb::OffsetCommitTopic { name, partitions })
                .collect(),
        });
        let answer = self.ask_coordinator(body).await?;
        let committed = expect_body!(answer, OffsetCommit)?;
        let failed = committed
            .topics
            .iter()
            .flat_map(|t| &t.partitions)
            .map(|p| ErrorCode::from_wire(p.error_code))
            .find(|c| *c != ErrorCode::None);
        self.next_commit =
            Instant::now() + Duration::from_millis(self.config().auto_commit_interval_ms);
        match failed {
            None => Ok(()),
            Some(code) => {
                self.on_group_error(code);
                Err(protocol_error(code, "OffsetCommit"))
            }
        }
    }

    /// Commits (with auto-commit on) and leaves the group, so that the others
    /// get its partitions at once rather than after its session times out.
    pub async fn close(mut self) -> Result<(), ClientError> {
        if self.config().enable_auto_commit {
            self.commit_or_log().await;
        }
        if self.member_id.is_empty() {
            return Ok(());
        }
        let body = pb::request::Body::LeaveGroup(pb::LeaveGroupRequest {
            group_id: self.config().group_id.clone(),
            member_ids: vec![self.member_id.clone()],
        });
        let answer = self.ask_coordinator(body).await?;
        let left = expect_body!(answer, LeaveGroup)?;
        match ErrorCode::from_wire(left.error_code) {
            ErrorCode::None => Ok(()),
            code => Err(protocol_error(code, "LeaveGroup")),
        }
    }

    async fn commit_or_log(&mut self) {
        if let Err(e) = self.commit().await {
            tracing::debug!(error = %e, "auto-commit failed");
        }
    }

    /// What an error of the group's answers means for this member.
    fn on_group_error(&mut self, code: ErrorCode) {
        match code {
            ErrorCode::NotCoordinator | ErrorCode::CoordinatorNotAvailable => {
                self.coordinator = None
            }
            ErrorCode::UnknownMemberId => {
                self.member_id.clear();
                self.generation = -1;
                self.joined = false;
            }
            ErrorCode::IllegalGeneration | ErrorCode::RebalanceInProgress => self.joined = false,
            _ => {}
        }
    }

    async fn coordinator(&mut self) -> Result<i32, ClientError> {
        if let Some(c) = self.coordinator {
            return Ok(c);
        }
        let deadline = Instant::now() + self.config().client.request_timeout();
        let group = self.config().group_id.clone();
        let c = find_coordinator(self.consumer.cluster(), &group, deadline).await?;
        self.coordinator = Some(c);
        Ok(c)
    }

    async fn ask_coordinator(
        &mut self,
        body: pb::request::Body,
    ) -> Result<pb::response::Body, ClientError> {
        let timeout = self.config().client.request_timeout();
        self.ask_coordinator_within(body, timeout).await
    }

    async fn ask_coordinator_within(
        &mut self,
        body: pb::request::Body,
        timeout: Duration,
    ) -> Result<pb::response::Body, ClientError> {
        let coordinator = self.coordinator().await?;
        let answer = self
            .consumer
            .cluster()
            .send_to_within(coordinator, body, timeout)
            .await;
        if answer.as_ref().is_err_and(moves_the_coordinator) {
            self.coordinator = None;
        }
        answer
    }

    async fn heartbeat(&mut self) -> Result<(), ClientError> {
        self.next_heartbeat =
            Instant::now() + Duration::from_millis(self.config().heartbeat_interval_ms as u64);
        let body = pb::request::Body::Heartbeat(pb::HeartbeatRequest {
            group_id: self.config().group_id.clone(),
            generation_id: self.generation,
            member_id: self.member_id.clone(),
        });
        let code = match self.ask_coordinator(body).await {
            Ok(answer) => ErrorCode::from_wire(expect_body!(answer, Heartbeat)?.error_code),
            Err(e) if e.is_retriable() => {
                tracing::debug!(error = %e, "heartbeat failed; trying again");
                return Ok(());
            }
            Err(e) => return Err(e),
        };
        match code {
            ErrorCode::None => Ok(()),
            // The group rebalances: what was read is committed before the
            // partitions may move.
            ErrorCode::RebalanceInProgress => {
                if self.config().enable_auto_commit {
                    self.commit_or_log().await;
                }
                self.joined = false;
                Ok(())
            }
            code if code.is_retriable()
                || matches!(
                    code,
                    ErrorCode::UnknownMemberId | ErrorCode::IllegalGeneration
                ) =>
            {
                self.on_group_error(code);
                Ok(())
            }
            code => Err(protocol_error(code, "Heartbeat")),
        }
    }

    /// Joins (or rejoins) the group: JoinGroup until a generation completes,
    /// the leader assigns, SyncGroup delivers this member's partitions, and
    /// the positions start at the group's committed offsets.
    async fn join(&mut self) -> Result<(), ClientError> {
        let config = self.config().clone();
        let deadline = Instant::now()
            + config.client.request_timeout()
            + Duration::from_millis(config.max_poll_interval_ms as u64);
        let backoff = config.client.retry_backoff();
        let mut failures = 0;
        loop {
            match self.join_once(&config).await {
                Ok(true) => break,
                Ok(false) => {}
                Err(e) if e.is_retriable() && Instant::now() < deadline => {
                    tracing::debug!(error = %e, "joining the group; trying again");
                    tokio::time::sleep(backoff.delay(failures)).await;
                    failures += 1;
                }
                Err(e) => return Err(e),
            }
        }
        let now = Instant::now();
        self.joined = true;
        self.next_heartbeat = now + Duration::from_millis(config.heartbeat_interval_ms as u64);
        self.next_commit = now + Duration::from_millis(config.auto_commit_interval_ms);
        Ok(())
    }

    /// One JoinGroup and SyncGroup; Ok(false) when the group asks again
    /// (a member id handed out, a rebalance that moved on).
    async fn join_once(&mut self, config: &ConsumerConfig) -> Result<bool, ClientError> {
        let body = pb::request::Body::JoinGroup(pb::JoinGroupRequest {
            group_id: config.group_id.clone(),
            session_timeout_ms: config.session_timeout_ms,
            rebalance_timeout_ms: config.max_poll_interval_ms,
            member_id: self.member_id.clone(),
            protocol_type: PROTOCOL_TYPE.to_string(),
            protocols: vec![pb::GroupProtocol {
                name: RANGE.to_string(),
                metadata: subscription(&self.topics),
            }],
            require_known_member_id: true,
        });
        // The coordinator holds the answer until every member rejoined.
        let within = config.client.request_timeout()
            + Duration::from_millis(config.max_poll_interval_ms as u64);
        let joined = self.ask_coordinator_within(body, within).await?;
        let joined = expect_body!(joined, JoinGroup)?;
        match ErrorCode::from_wire(joined.error_code) {
            ErrorCode::None => {}
            ErrorCode::MemberIdRequired => {
                self.member_id = joined.member_id;
                return Ok(false);
            }
            code @ (ErrorCode::UnknownMemberId | ErrorCode::RebalanceInProgress) => {
                self.on_group_error(code);
                return Ok(false);
            }
            code => {
                self.on_group_error(code);
                return Err(protocol_error(code, "JoinGroup"));
            }
        }
        self.member_id = joined.member_id.clone();
        self.generation = joined.generation_id;
        let assignments = if joined.leader == joined.member_id {
            self.assign(&joined.members).await?
        } else {
            vec![]
        };
        let body = pb::request::Body::SyncGroup(pb::SyncGroupRequest {
            group_id: config.group_id.clone(),
            generation_id: self.generation,
            member_id: self.member_id.clone(),
            protocol_type: PROTOCOL_TYPE.to_string(),
            protocol_name: joined.protocol_name.clone(),
            assignments,
        });
        let synced = self.ask_coordinator_within(body, within).await?;
        let synced = expect_body!(synced, SyncGroup)?;
        match ErrorCode::from_wire(synced.error_code) {
            ErrorCode::None => {}
            code @ (ErrorCode::RebalanceInProgress
            | ErrorCode::UnknownMemberId
            | ErrorCode::IllegalGeneration) => {
                self.on_group_error(code);
                return Ok(false);
            }
            code => {
                self.on_group_error(code);
                return Err(protocol_error(code, "SyncGroup"));
            }
        }
        let partitions = decode_assignment(&synced.assignment);
        tracing::debug!(generation = self.generation, ?partitions, "assigned");
        self.consumer.assign(partitions.clone());
        self.resume_from_committed(&partitions).await?;
        Ok(true)
    }

    /// The leader's part: every member's partitions, by the range assignor.
    async fn assign(
        &mut self,
        members: &[pb::JoinGroupMember],
    ) -> Result<Vec<pb::SyncGroupAssignment>, ClientError> {
        let mut subscriptions = BTreeMap::new();
        for m in members {
            let topics = decode_versioned::<ConsumerProtocolSubscription>(&m.metadata, 3)
                .map(|s| s.topics.iter().map(|t| t.to_string()).collect())
                .unwrap_or_default();
            subscriptions.insert(m.member_id.clone(), topics);
        }
        let topics: BTreeSet<String> = subscriptions.values().flatten().cloned().collect();
        let mut counts = BTreeMap::new();
        let deadline = Instant::now() + self.config().client.request_timeout();
        for topic in topics {
            match self
                .consumer
                .cluster()
                .wait_for_topic(&topic, deadline)
                .await
            {
                Ok(n) => {
                    counts.insert(topic, n as i32);
                }
                // A member subscribed to a topic that does not exist gets
                // nothing of it, as in Kafka.
                Err(ClientError::UnknownTopic(_)) => {}
                Err(e) => return Err(e),
            }
        }
        Ok(range_assign(&subscriptions, &counts)
            .into_iter()
            .map(|(member_id, partitions)| pb::SyncGroupAssignment {
                member_id,
                assignment: assignment(&partitions),
            })
            .collect())
    }

    /// Positions at the group's committed offsets; partitions without one
    /// follow `auto_offset_reset`.
    async fn resume_from_committed(
        &mut self,
        partitions: &[TopicPartition],
    ) -> Result<(), ClientError> {
        if partitions.is_empty() {
            return Ok(());
        }
        let mut topics: BTreeMap<String, Vec<i32>> = BTreeMap::new();
        for tp in partitions {
            topics
                .entry(tp.topic.to_string())
                .or_default()
                .push(tp.partition);
        }
        let body = pb::request::Body::OffsetFetch(pb::OffsetFetchRequest {
            group_id: self.config().group_id.clone(),
            topics: topics
                .into_iter()
                .map(|(name, partitions)| pb::OffsetFetchTopic { name, partitions })
                .collect(),
            all: false,
        });
        let answer = self.ask_coordinator(body).await?;
        let fetched = expect_body!(answer, OffsetFetch)?;
        let code = ErrorCode::from_wire(fetched.error_code);
        if code != ErrorCode::None {
            self.on_group_error(code);
            return Err(protocol_error(code, "OffsetFetch"));
        }
        for t in &fetched.topics {
            for p in t.partitions.iter().filter(|p| p.offset >= 0) {
                self.consumer
                    .seek(&TopicPartition::new(&t.name, p.partition), p.offset)?;
            }
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A whole-request NOT_COORDINATOR (the group's offsets partition moved)
    /// sends the member looking for its coordinator again, as a lost
    /// connection does; other refusals keep it.
    #[test]
    fn not_coordinator_for_the_whole_request_forgets_the_coordinator() {
        let protocol = |code| ClientError::Protocol {
            code,
            message: String::new(),
        };
        let cases = [
            (protocol(ErrorCode::NotCoordinator), true),
            (protocol(ErrorCode::CoordinatorNotAvailable), true),
            (ClientError::Disconnected("b1:9092".into()), true),
            (protocol(ErrorCode::UnknownMemberId), false),
            (protocol(ErrorCode::RebalanceInProgress), false),
        ];
        for (e, moves) in cases {
            assert_eq!(moves_the_coordinator(&e), moves, "{e}");
        }
    }

    fn subs(members: &[(&str, &[&str])]) -> BTreeMap<String, Vec<String>> {
        members
            .iter()
            .map(|(m, ts)| (m.to_string(), ts.iter().map(|t| t.to_string()).collect()))
            .collect()
    }

    fn names(v: &[TopicPartition]) -> Vec<String> {
        v.iter().map(|tp| tp.to_string()).collect()
    }

    #[test]
    fn range_gives_contiguous_ranges_with_the_remainder_to_the_first_members() {
        let counts: BTreeMap<String, i32> = [("a".to_string(), 7), ("b".to_string(), 2)].into();
        let out = range_assign(
            &subs(&[("m1", &["a", "b"]), ("m2", &["a"]), ("m3", &["a", "b"])]),
            &counts,
        );
        assert_eq!(names(&out["m1"]), ["a-0", "a-1", "a-2", "b-0"]);
        assert_eq!(names(&out["m2"]), ["a-3", "a-4"]);
        assert_eq!(names(&out["m3"]), ["a-5", "a-6", "b-1"]);
        // More members than partitions: the last get nothing; an unknown
        // topic is assigned to nobody.
        let counts: BTreeMap<String, i32> = [("a".to_string(), 1)].into();
        let out = range_assign(&subs(&[("m1", &["a", "gone"]), ("m2", &["a"])]), &counts);
        assert_eq!(names(&out["m1"]), ["a-0"]);
        assert!(out["m2"].is_empty());
    }

    #[test]
    fn subscriptions_and_assignments_round_trip_through_kafkas_encoding() {
        let s = subscription(&["orders".into(), "refunds".into()]);
        let decoded: ConsumerProtocolSubscription = decode_versioned(&s, 3).unwrap();
        let topics: Vec<String> = decoded.topics.iter().map(|t| t.to_string()).collect();
        assert_eq!(topics, ["orders", "refunds"]);
        let partitions = vec![
            TopicPartition::new("orders", 0),
            TopicPartition::new("orders", 3),
            TopicPartition::new("refunds", 1),
        ];
        assert_eq!(decode_assignment(&assignment(&partitions)), partitions);
    }

    #[test]
    fn a_group_consumer_needs_a_group_and_a_topic() {
        let config = ConsumerConfig::new("127.0.0.1:9092");
        assert!(GroupConsumer::new(config.clone(), vec!["t".into()]).is_err());
        let mut with_group = config;
        with_group.group_id = "g".into();
        assert!(GroupConsumer::new(with_group.clone(), vec![]).is_err());
        assert!(GroupConsumer::new(with_group, vec!["t".into()]).is_ok());
    }
}
