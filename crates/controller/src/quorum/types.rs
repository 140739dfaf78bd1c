//! The Raft type configuration and the one application payload: a batch of metadata
//! records.

use std::fmt;

use bytes::Buf;
use prost::Message;
use serde::{de, Deserialize, Deserializer, Serialize, Serializer};
use syncline_proto::pb;

openraft::declare_raft_types!(
    /// The controller quorum's Raft types: node ids are the voters' ids (`i32` in
    /// syncline, `u64` for openraft), a log entry carries one [`MetadataBatch`], and
    /// its response is the metadata offset of the batch's first record.
    pub(crate) TypeConfig:
        D = MetadataBatch,
        R = i64,
);

/// The records of one proposal: replicated as one Raft entry, applied at consecutive
/// metadata offsets.
///
/// Serialized as one byte string of length-delimited protobuf records, so the
/// metadata records keep their one wire format (protobuf, as in `proto/`) inside the
/// postcard encoding of Raft's own structures.
#[derive(Debug, Clone, PartialEq, Default)]
pub(crate) struct MetadataBatch(pub(crate) Vec<pb::MetadataRecord>);

impl fmt::Display for MetadataBatch {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{} metadata records", self.0.len())
    }
}

impl Serialize for MetadataBatch {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        let mut buf = Vec::new();
        for record in &self.0 {
            // Writing to a Vec cannot run out of room.
            record
                .encode_length_delimited(&mut buf)
                .map_err(serde::ser::Error::custom)?;
        }
        serializer.serialize_bytes(&buf)
    }
}

impl<'de> Deserialize<'de> for MetadataBatch {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        deserializer.deserialize_bytes(BatchVisitor)
    }
}

struct BatchVisitor;

impl<'de> de::Visitor<'de> for BatchVisitor {
    type Value = MetadataBatch;

    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("length-delimited protobuf metadata records")
    }

    fn visit_bytes<E: de::Error>(self, mut buf: &[u8]) -> Result<MetadataBatch, E> {
        let mut records = Vec::new();
        while buf.has_remaining() {
            let record = pb::MetadataRecord::decode_length_delimited(&mut buf)
                .map_err(|e| E::custom(format!("undecodable metadata record: {e}")))?;
            records.push(record);
        }
        Ok(MetadataBatch(records))
    }

    fn visit_byte_buf<E: de::Error>(self, buf: Vec<u8>) -> Result<MetadataBatch, E> {
        self.visit_bytes(&buf)
    }
}

/// A voter id as openraft's node id; `None` for a negative id.
pub(crate) fn raft_id(id: i32) -> Option<u64> {
    u64::try_from(id).ok()
}

/// An openraft node id back as a voter id (every one came from [`raft_id`]).
pub(crate) fn voter_id(id: u64) -> Option<i32> {
    i32::try_from(id).ok()
}
