//! The records the coordinator keeps in its `__consumer_offsets` partition, one Kafka
//! record each: a key that names what the record replaces (a group's metadata, or one
//! group/topic/partition's offset) and a value, or none for a tombstone.
//!
//! Keys and values are a big-endian `i16` version followed by a protobuf message. As
//! in Kafka, the key's version tells its kind ([`OFFSET_KEY_VERSION`],
//! [`GROUP_KEY_VERSION`]); a value's version is its schema's, bumped only for a change
//! old readers cannot skip over (new protobuf fields they can).

use bytes::Bytes;
use prost::Message;

/// The key version of an offset commit (Kafka's too).
pub const OFFSET_KEY_VERSION: i16 = 1;
/// The key version of a group's metadata (Kafka's too).
pub const GROUP_KEY_VERSION: i16 = 2;
const OFFSET_VALUE_VERSION: i16 = 0;
const GROUP_VALUE_VERSION: i16 = 0;

/// One record of the partition; `value: None` is a tombstone.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Record {
    /// A committed offset.
    Offset {
        group_id: String,
        topic: String,
        partition: i32,
        value: Option<OffsetValue>,
    },
    /// A group's membership and assignments as of its last persisted state.
    Group {
        group_id: String,
        value: Option<GroupValue>,
    },
}

/// A committed offset.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct OffsetValue {
    pub offset: i64,
    /// -1: none.
    pub leader_epoch: i32,
    pub metadata: String,
    /// When it was committed: the base of its retention.
    pub commit_timestamp_ms: i64,
}

/// A group's persisted state.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct GroupValue {
    pub protocol_type: String,
    pub generation_id: i32,
    pub protocol_name: Option<String>,
    pub leader: Option<String>,
    /// When the group entered its state (-1: unknown); an Empty group's offsets are
    /// retained counting from it.
    pub state_timestamp_ms: i64,
    pub members: Vec<MemberValue>,
}

/// A member as persisted with its group.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct MemberValue {
    pub member_id: String,
    pub group_instance_id: Option<String>,
    pub client_id: String,
    pub client_host: String,
    pub rebalance_timeout_ms: i32,
    pub session_timeout_ms: i32,
    /// Its metadata for the group's protocol.
    pub subscription: Bytes,
    pub assignment: Bytes,
}

/// Why a key or value could not be read.
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum DecodeError {
    #[error("a record key or value shorter than its version")]
    Truncated,
    /// A newer writer's kind of record (or not a key of ours).
    #[error("unknown record key version {0}")]
    UnknownKeyVersion(i16),
    /// A newer writer's schema.
    #[error("unknown {kind} value version {version}")]
    UnknownValueVersion { kind: &'static str, version: i16 },
    #[error("malformed record: {0}")]
    Malformed(#[from] prost::DecodeError),
}

impl Record {
    /// The group this record belongs to.
    pub fn group_id(&self) -> &str {
        match self {
            Record::Offset { group_id, .. } | Record::Group { group_id, .. } => group_id,
        }
    }

    /// The Kafka record key: equal for every record that replaces this one.
    pub fn key(&self) -> Bytes {
        match self {
            Record::Offset {
                group_id,
                topic,
                partition,
                ..
            } => framed(
                OFFSET_KEY_VERSION,
                &wire::OffsetKey {
                    group: group_id.clone(),
                    topic: topic.clone(),
                    partition: *partition,
                },
            ),
            Record::Group { group_id, .. } => framed(
                GROUP_KEY_VERSION,
                &wire::GroupKey {
                    group: group_id.clone(),
                },
            ),
        }
    }

    /// The Kafka record value; `None` for a tombstone.
    pub fn value(&self) -> Option<Bytes> {
        match self {
            Record::Offset { value, .. } => value
                .as_ref()
                .map(|v| framed(OFFSET_VALUE_VERSION, &wire::OffsetValue::from(v))),
            Record::Group { value, .. } => value
                .as_ref()
                .map(|v| framed(GROUP_VALUE_VERSION, &wire::GroupValue::from(v))),
        }
    }

    /// Reads a record back from its Kafka key and value (`None`: a tombstone).
    pub fn decode(key: &[u8], value: Option<&[u8]>) -> Result<Record, DecodeError> {
        let (version, body) = unframe(key)?;
        match version {
            OFFSET_KEY_VERSION => {
                let key = wire::OffsetKey::decode(body)?;
                let value = value
                    .map(|v| decode_value(v, OFFSET_VALUE_VERSION, "offset"))
                    .transpose()?
                    .map(|v: wire::OffsetValue| v.into());
                Ok(Record::Offset {
                    group_id: key.group,
                    topic: key.topic,
                    partition: key.partition,
                    value,
                })
            }
            GROUP_KEY_VERSION => {
                let key = wire::GroupKey::decode(body)?;
                let value = value
                    .map(|v| decode_value(v, GROUP_VALUE_VERSION, "group"))
                    .transpose()?
                    .map(|v: wire::GroupValue| v.into());
                Ok(Record::Group {
                    group_id: key.group,
                    value,
                })
            }
            other => Err(DecodeError::UnknownKeyVersion(other)),
        }
    }
}

fn framed(version: i16, message: &impl Message) -> Bytes {
    let body = message.encode_to_vec();
    let mut out = Vec::with_capacity(2 + body.len());
    out.extend_from_slice(&version.to_be_bytes());
    out.extend_from_slice(&body);
    out.into()
}

fn unframe(bytes: &[u8]) -> Result<(i16, &[u8]), DecodeError> {
    match bytes {
        [hi, lo, body @ ..] => Ok((i16::from_be_bytes([*hi, *lo]), body)),
        _ => Err(DecodeError::Truncated),
    }
}

fn decode_value<M: Message + Default>(
    bytes: &[u8],
    known: i16,
    kind: &'static str,
) -> Result<M, DecodeError> {
    let (version, body) = unframe(bytes)?;
    if version != known {
        return Err(DecodeError::UnknownValueVersion { kind, version });
    }
    Ok(M::decode(body)?)
}

/// The protobuf messages behind the versions, kept apart from the public types so the
/// encoding can evolve without changing the API.
mod wire {
    use bytes::Bytes;

    #[derive(Clone, PartialEq, prost::Message)]
    pub(super) struct OffsetKey {
        #[prost(string, tag = "1")]
        pub(super) group: String,
        #[prost(string, tag = "2")]
        pub(super) topic: String,
        #[prost(int32, tag = "3")]
        pub(super) partition: i32,
    }

    #[derive(Clone, PartialEq, prost::Message)]
    pub(super) struct GroupKey {
        #[prost(string, tag = "1")]
        pub(super) group: String,
    }

    #[derive(Clone, PartialEq, prost::Message)]
    pub(super) struct OffsetValue {
        #[prost(int64, tag = "1")]
        pub(super) offset: i64,
        #[prost(int32, tag = "2")]
        pub(super) leader_epoch: i32,
        #[prost(string, tag = "3")]
        pub(super) metadata: String,
        #[prost(int64, tag = "4")]
        pub(super) commit_timestamp_ms: i64,
    }

    #[derive(Clone, PartialEq, prost::Message)]
    pub(super) struct GroupValue {
        #[prost(string, tag = "1")]
        pub(super) protocol_type: String,
        #[prost(int32, tag = "2")]
        pub(super) generation_id: i32,
        #[prost(string, optional, tag = "3")]
        pub(super) protocol_name: Option<String>,
        #[prost(string, optional, tag = "4")]
        pub(super) leader: Option<String>,
        #[prost(int64, tag = "5")]
        pub(super) state_timestamp_ms: i64,
        #[prost(message, repeated, tag = "6")]
        pub(super) members: Vec<MemberValue>,
    }

    #[derive(Clone, PartialEq, prost::Message)]
    pub(super) struct MemberValue {
        #[prost(string, tag = "1")]
        pub(super) member_id: String,
        #[prost(string, optional, tag = "2")]
        pub(super) group_instance_id: Option<String>,
        #[prost(string, tag = "3")]
        pub(super) client_id: String,
        #[prost(string, tag = "4")]
        pub(super) client_host: String,
        #[prost(int32, tag = "5")]
        pub(super) rebalance_timeout_ms: i32,
        #[prost(int32, tag = "6")]
        pub(super) session_timeout_ms: i32,
        #[prost(bytes = "bytes", tag = "7")]
        pub(super) subscription: Bytes,
        #[prost(bytes = "bytes", tag = "8")]
        pub(super) assignment: Bytes,
    }

    impl From<&super::OffsetValue> for OffsetValue {
        fn from(v: &super::OffsetValue) -> Self {
            OffsetValue {
                offset: v.offset,
                leader_epoch: v.leader_epoch,
                metadata: v.metadata.clone(),
                commit_timestamp_ms: v.commit_timestamp_ms,
            }
        }
    }

    impl From<OffsetValue> for super::OffsetValue {
        fn from(v: OffsetValue) -> Self {
            super::OffsetValue {
                offset: v.offset,
                leader_epoch: v.leader_epoch,
                metadata: v.metadata,
                commit_timestamp_ms: v.commit_timestamp_ms,
            }
        }
    }

    impl From<&super::GroupValue> for GroupValue {
        fn from(v: &super::GroupValue) -> Self {
            GroupValue {
                protocol_type: v.protocol_type.clone(),
                generation_id: v.generation_id,
                protocol_name: v.protocol_name.clone(),
                leader: v.leader.clone(),
                state_timestamp_ms: v.state_timestamp_ms,
                members: v.members.iter().map(MemberValue::from).collect(),
            }
        }
    }

    impl From<GroupValue> for super::GroupValue {
        fn from(v: GroupValue) -> Self {
            super::GroupValue {
                protocol_type: v.protocol_type,
                generation_id: v.generation_id,
                protocol_name: v.protocol_name,
                leader: v.leader,
                state_timestamp_ms: v.state_timestamp_ms,
                members: v.members.into_iter().map(Into::into).collect(),
            }
        }
    }

    impl From<&super::MemberValue> for MemberValue {
        fn from(m: &super::MemberValue) -> Self {
            MemberValue {
                member_id: m.member_id.clone(),
                group_instance_id: m.group_instance_id.clone(),
                client_id: m.client_id.clone(),
                client_host: m.client_host.clone(),
                rebalance_timeout_ms: m.rebalance_timeout_ms,
                session_timeout_ms: m.session_timeout_ms,
                subscription: m.subscription.clone(),
                assignment: m.assignment.clone(),
            }
        }
    }

    impl From<MemberValue> for super::MemberValue {
        fn from(m: MemberValue) -> Self {
            super::MemberValue {
                member_id: m.member_id,
                group_instance_id: m.group_instance_id,
                client_id: m.client_id,
                client_host: m.client_host,
                rebalance_timeout_ms: m.rebalance_timeout_ms,
                session_timeout_ms: m.session_timeout_ms,
                subscription: m.subscription,
                assignment: m.assignment,
            }
        }
    }
}
