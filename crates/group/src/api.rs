//! What goes in and out of the [`Coordinator`](crate::Coordinator): requests as the
//! broker glue translates them from Kafka's wire messages, responses to translate back,
//! and the [`Effects`] every mutating operation returns.

use bytes::Bytes;

use crate::error;
use crate::record::Record;

/// The caller's handle for a request whose reply may come later (a held JoinGroup or
/// SyncGroup, a commit waiting for its append).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct RequestId(pub u64);

/// Names one [`Append`] when the caller reports its outcome with
/// [`Coordinator::appended`](crate::Coordinator::appended).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct AppendId(pub u64);

/// What an operation asks of the caller.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
#[must_use = "replies must be sent, and appends appended and reported with `Coordinator::appended`"]
pub struct Effects {
    /// Replies to send now (possibly to requests received earlier, e.g. the held
    /// JoinGroups when a rebalance completes).
    pub replies: Vec<(RequestId, Reply)>,
    /// Records to append to the partition: with acks=all, in this order, each
    /// [`Append`] as one batch; then the caller MUST call
    /// [`Coordinator::appended`](crate::Coordinator::appended) for each.
    pub appends: Vec<Append>,
}

impl Effects {
    /// Nothing to send, nothing to append.
    pub fn is_empty(&self) -> bool {
        self.replies.is_empty() && self.appends.is_empty()
    }
}

/// Records to append as one batch.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Append {
    /// What to report the outcome under.
    pub id: AppendId,
    /// In order; each becomes one Kafka record ([`Record::key`], [`Record::value`]).
    pub records: Vec<Record>,
}

/// A reply to one request.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Reply {
    /// To a JoinGroup.
    Join(JoinResponse),
    /// To a SyncGroup.
    Sync(SyncResponse),
    /// To a Heartbeat: its error code.
    Heartbeat(i16),
    /// To a LeaveGroup.
    Leave(LeaveResponse),
    /// To an OffsetCommit.
    Commit(CommitResponse),
}

/// A group's state, with Kafka's names ([`GroupState::as_str`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum GroupState {
    /// No members (offsets only, or between generations).
    Empty,
    /// Waiting for the members to (re)join.
    PreparingRebalance,
    /// Joined: waiting for the leader's assignment.
    CompletingRebalance,
    /// Every member has its assignment.
    Stable,
    /// Not here: what describing an unknown group reports.
    Dead,
}

impl GroupState {
    /// Kafka's name for the state, as DescribeGroups and ListGroups carry it.
    pub fn as_str(self) -> &'static str {
        match self {
            GroupState::Empty => "Empty",
            GroupState::PreparingRebalance => "PreparingRebalance",
            GroupState::CompletingRebalance => "CompletingRebalance",
            GroupState::Stable => "Stable",
            GroupState::Dead => "Dead",
        }
    }
}

impl std::fmt::Display for GroupState {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

/// One protocol a member supports (for consumers: an assignor and its subscription).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Protocol {
    /// E.g. "range".
    pub name: String,
    /// Opaque to the coordinator; handed to the leader.
    pub metadata: Bytes,
}

/// JoinGroup.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct JoinRequest {
    pub group_id: String,
    /// Empty for a member joining for the first time.
    pub member_id: String,
    /// Stored and echoed only: static membership is the broker glue's to refuse.
    pub group_instance_id: Option<String>,
    pub client_id: String,
    pub client_host: String,
    pub protocol_type: String,
    /// In the member's order of preference.
    pub protocols: Vec<Protocol>,
    pub session_timeout_ms: i32,
    /// v0 has none: the glue passes the session timeout.
    pub rebalance_timeout_ms: i32,
    /// JoinGroup v4+: a new member first gets its id with `MEMBER_ID_REQUIRED`.
    pub require_known_member_id: bool,
}

/// One member as the leader sees it in its JoinGroup response.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct JoinMember {
    pub member_id: String,
    pub group_instance_id: Option<String>,
    /// Its metadata for the chosen protocol.
    pub metadata: Bytes,
}

/// The answer to a JoinGroup.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct JoinResponse {
    pub error: i16,
    /// -1 with an error.
    pub generation_id: i32,
    pub protocol_type: Option<String>,
    pub protocol_name: Option<String>,
    pub leader: String,
    /// The member's id (the new one, with `MEMBER_ID_REQUIRED`).
    pub member_id: String,
    /// Every member, for the leader only.
    pub members: Vec<JoinMember>,
}

impl JoinResponse {
    pub(crate) fn error(member_id: String, error: i16) -> Self {
        JoinResponse {
            error,
            generation_id: -1,
            protocol_type: None,
            protocol_name: None,
            leader: String::new(),
            member_id,
            members: Vec::new(),
        }
    }
}

/// SyncGroup.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct SyncRequest {
    pub group_id: String,
    pub member_id: String,
    pub generation_id: i32,
    pub group_instance_id: Option<String>,
    /// SyncGroup v5+: must match the group's when given.
    pub protocol_type: Option<String>,
    /// SyncGroup v5+: must match the group's when given.
    pub protocol_name: Option<String>,
    /// The leader's assignment per member id; empty from followers.
    pub assignments: Vec<(String, Bytes)>,
}

/// The answer to a SyncGroup.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SyncResponse {
    pub error: i16,
    pub protocol_type: Option<String>,
    pub protocol_name: Option<String>,
    /// This member's assignment.
    pub assignment: Bytes,
}

impl SyncResponse {
    pub(crate) fn error(error: i16) -> Self {
        SyncResponse {
            error,
            protocol_type: None,
            protocol_name: None,
            assignment: Bytes::new(),
        }
    }
}

/// Heartbeat.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct HeartbeatRequest {
    pub group_id: String,
    pub member_id: String,
    pub generation_id: i32,
    pub group_instance_id: Option<String>,
}

/// LeaveGroup (v0–v2 carry one member: the glue passes it as a list of one).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct LeaveRequest {
    pub group_id: String,
    /// Member id and group instance id of each member leaving.
    pub members: Vec<(String, Option<String>)>,
}

/// The answer to a LeaveGroup.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LeaveResponse {
    /// Request-level error; the per-member ones are in `members`.
    pub error: i16,
    /// Member id, group instance id, error, in request order.
    pub members: Vec<(String, Option<String>, i16)>,
}

/// OffsetCommit.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct CommitRequest {
    pub group_id: String,
    /// -1: a commit outside any generation (a simple consumer or an admin), allowed
    /// for an unknown or Empty group only.
    pub generation_id: i32,
    pub member_id: String,
    pub group_instance_id: Option<String>,
    pub offsets: Vec<CommitOffset>,
}

/// One partition's committed position.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct CommitOffset {
    pub topic: String,
    pub partition: i32,
    pub offset: i64,
    /// -1: none.
    pub leader_epoch: i32,
    pub metadata: Option<String>,
}

/// The answer to an OffsetCommit: topic, partition, error, in request order.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CommitResponse {
    pub partitions: Vec<(String, i32, i16)>,
}

/// The answer to an OffsetFetch.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct OffsetFetchResponse {
    pub error: i16,
    pub partitions: Vec<FetchedOffset>,
}

/// One partition's committed offset, or -1.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FetchedOffset {
    pub topic: String,
    pub partition: i32,
    /// -1: nothing committed.
    pub offset: i64,
    /// -1: none.
    pub leader_epoch: i32,
    pub metadata: String,
    pub error: i16,
}

impl FetchedOffset {
    pub(crate) fn none(topic: String, partition: i32) -> Self {
        FetchedOffset {
            topic,
            partition,
            offset: -1,
            leader_epoch: -1,
            metadata: String::new(),
            error: error::NONE,
        }
    }
}

/// One group as ListGroups reports it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ListedGroup {
    pub group_id: String,
    /// Empty for a group that only stores offsets.
    pub protocol_type: String,
    pub state: GroupState,
}

/// One group as DescribeGroups reports it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DescribedGroup {
    pub error: i16,
    pub group_id: String,
    pub state: GroupState,
    pub protocol_type: String,
    /// Empty unless Stable (as Kafka).
    pub protocol_name: String,
    /// In join order.
    pub members: Vec<DescribedMember>,
}

/// One member as DescribeGroups reports it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DescribedMember {
    pub member_id: String,
    pub group_instance_id: Option<String>,
    pub client_id: String,
    pub client_host: String,
    /// Its metadata for the chosen protocol; empty unless Stable (as Kafka).
    pub metadata: Bytes,
    /// Empty unless Stable (as Kafka).
    pub assignment: Bytes,
}

/// A group's membership at a glance (for operators and tests; not a Kafka message).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct GroupSummary {
    pub state: GroupState,
    pub generation_id: i32,
    pub protocol_type: Option<String>,
    pub protocol_name: Option<String>,
    pub leader: Option<String>,
    /// Member ids in join order.
    pub members: Vec<String>,
    /// Ids handed out with `MEMBER_ID_REQUIRED` whose owners have not joined yet.
    pub pending_members: Vec<String>,
}
