//! The syncline consumer-group coordinator: Kafka's classic group protocol
//! (`GroupCoordinator` / `GroupMetadata` of Kafka 2.x–3.x) and offset storage, as a
//! pure state machine. No I/O, no clock, no tasks: the broker glue translates Kafka's
//! wire requests, persists records to the internal `__consumer_offsets` partition and
//! keeps time.
//!
//! - [`Coordinator`]: the groups of one `__consumer_offsets` partition (one per
//!   partition the broker leads; [`partition_for`] maps a group id to its partition
//!   as Kafka does). Every mutating operation returns [`Effects`].
//! - [`Record`]: what is persisted (offsets, group metadata, tombstones) and its
//!   key/value encoding.
//! - [`error`]: Kafka's error codes, and how append failures are reported.
//!
//! # Driving it
//!
//! 1. On becoming the partition's leader: [`Coordinator::new`], then
//!    [`Coordinator::load`] with the partition's records in log order (answer
//!    requests with `COORDINATOR_LOAD_IN_PROGRESS` until then).
//! 2. Each request gets a caller-chosen [`RequestId`] and the current wall-clock time.
//!    Send every reply in [`Effects::replies`] (they may answer requests received
//!    earlier: a held JoinGroup or SyncGroup, a commit).
//! 3. Append each [`Append`] of [`Effects::appends`] as one batch with acks=all, in
//!    order, and report each outcome with [`Coordinator::appended`] (whose effects are
//!    handled the same way). Commits become visible, and held SyncGroups are
//!    answered, only then.
//! 4. Call [`Coordinator::tick`] when [`Coordinator::next_deadline`] passes (check it
//!    after every operation): sessions expire, rebalances time out, offsets expire.
//!
//! OffsetFetch, ListGroups and DescribeGroups never wait and return their answer.
//!
//! ```
//! use bytes::Bytes;
//! use syncline_group::*;
//!
//! let config = GroupConfig { initial_rebalance_delay_ms: 0, ..GroupConfig::default() };
//! let mut c = Coordinator::new(0, config, 42);
//! c.load(Vec::new(), 0);
//!
//! // A v4+ consumer first gets its member id, then joins and leads generation 1.
//! let mut join = JoinRequest {
//!     group_id: "payments".into(),
//!     client_id: "consumer-1".into(),
//!     protocol_type: "consumer".into(),
//!     protocols: vec![Protocol { name: "range".into(), metadata: Bytes::from_static(b"sub") }],
//!     session_timeout_ms: 10_000,
//!     rebalance_timeout_ms: 30_000,
//!     require_known_member_id: true,
//!     ..JoinRequest::default()
//! };
//! let fx = c.join(RequestId(1), join.clone(), 1_000);
//! let Reply::Join(first) = &fx.replies[0].1 else { unreachable!() };
//! assert_eq!(first.error, error::MEMBER_ID_REQUIRED);
//! join.member_id = first.member_id.clone();
//! let fx = c.join(RequestId(2), join, 1_010);
//! let Reply::Join(joined) = &fx.replies[0].1 else { unreachable!() };
//! assert_eq!((joined.error, joined.generation_id), (error::NONE, 1));
//! assert_eq!(joined.leader, joined.member_id);
//!
//! // The leader's assignment is answered once its record is durable.
//! let me = joined.member_id.clone();
//! let sync = SyncRequest {
//!     group_id: "payments".into(),
//!     member_id: me.clone(),
//!     generation_id: 1,
//!     assignments: vec![(me.clone(), Bytes::from_static(b"p0"))],
//!     ..SyncRequest::default()
//! };
//! let fx = c.sync(RequestId(3), sync, 1_020);
//! assert!(fx.replies.is_empty());
//! let fx = c.appended(fx.appends[0].id, Ok(()), 1_030);
//! let Reply::Sync(synced) = &fx.replies[0].1 else { unreachable!() };
//! assert_eq!(synced.assignment, Bytes::from_static(b"p0"));
//!
//! // Offsets are visible once their append succeeded.
//! let commit = CommitRequest {
//!     group_id: "payments".into(),
//!     generation_id: 1,
//!     member_id: me,
//!     offsets: vec![CommitOffset { topic: "t".into(), partition: 0, offset: 42, leader_epoch: -1, metadata: None }],
//!     ..CommitRequest::default()
//! };
//! let fx = c.commit(RequestId(4), commit, 1_040);
//! for append in &fx.appends {
//!     for record in &append.records {
//!         let (_key, _value) = (record.key(), record.value()); // what the partition stores
//!     }
//! }
//! let _ = c.appended(fx.appends[0].id, Ok(()), 1_050);
//! assert_eq!(c.fetch_offsets("payments", None).partitions[0].offset, 42);
//! assert_eq!(c.next_deadline(), Some(1_040 + 10_000)); // the member's session
//! ```
//!
//! Static membership (`group.instance.id`, KIP-345) is not implemented: the glue
//! answers requests that carry an instance id itself; the field is only stored and
//! echoed here.

mod api;
mod config;
mod coordinator;
pub mod error;
mod group;
mod record;
mod timers;

pub use api::{
    Append, AppendId, CommitOffset, CommitRequest, CommitResponse, DescribedGroup, DescribedMember,
    Effects, FetchedOffset, GroupState, GroupSummary, HeartbeatRequest, JoinMember, JoinRequest,
    JoinResponse, LeaveRequest, LeaveResponse, ListedGroup, OffsetFetchResponse, Protocol, Reply,
    RequestId, SyncRequest, SyncResponse,
};
pub use config::GroupConfig;
pub use coordinator::Coordinator;
pub use record::{
    DecodeError, GroupValue, MemberValue, OffsetValue, Record, GROUP_KEY_VERSION,
    OFFSET_KEY_VERSION,
};

/// The `__consumer_offsets` partition of a group, as Kafka computes it: Java's
/// `String.hashCode` (over UTF-16 code units), made non-negative with Kafka's
/// `Utils.abs` (`Math.abs`, except that `i32::MIN` becomes 0), modulo the partition
/// count (0 partitions: 0).
pub fn partition_for(group_id: &str, partitions: u32) -> u32 {
    let hash = group_id.encode_utf16().fold(0i32, |h, unit| {
        h.wrapping_mul(31).wrapping_add(i32::from(unit))
    });
    let positive = if hash == i32::MIN {
        0
    } else {
        hash.unsigned_abs()
    };
    positive.checked_rem(partitions).unwrap_or(0)
}

#[cfg(test)]
mod tests {
    use super::partition_for;

    #[test]
    fn groups_land_on_the_partition_kafka_puts_them_on() {
        // (group id, Java hashCode, partition of 50)
        #[rustfmt::skip]
        let cases: &[(&str, i32, u32)] = &[
            ("",                       0,              0),
            ("a",                      97,             47),
            ("group",                  98_629_247,     47),
            // A known placement: Kafka puts this console consumer on partition 8.
            ("console-consumer-46999", 161_351_158,    8),
            // Negative hash: Math.abs (12), not a sign-bit mask (which gives 36).
            ("my-group",               -1_906_497_762, 12),
            // hashCode is i32::MIN, which Utils.abs maps to 0.
            ("polygenelubricants",     i32::MIN,       0),
            // Outside ASCII: UTF-16 code units, a surrogate pair for the emoji.
            ("été",                    227_742,        42),
            ("😀",                     1_772_899,      49),
        ];
        for &(id, hash, partition) in cases {
            let java = id
                .encode_utf16()
                .fold(0i32, |h, u| h.wrapping_mul(31).wrapping_add(i32::from(u)));
            assert_eq!(java, hash, "{id:?} hashCode");
            assert_eq!(partition_for(id, 50), partition, "{id:?}");
        }
        assert_eq!(partition_for("group", 1), 0);
        assert_eq!(partition_for("group", 0), 0);
    }
}
