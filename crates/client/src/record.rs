//! Records as the application sees them: what it produces, what an
//! acknowledgement tells it, what it consumes.

use std::sync::Arc;

use bytes::Bytes;

/// A record header: a key and an optional value.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Header {
    /// Header name.
    pub key: String,
    /// Header value; `None` is a null value.
    pub value: Option<Bytes>,
}

/// A record to produce.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ProducerRecord {
    /// Destination topic.
    pub topic: String,
    /// A fixed partition, or `None` to let the partitioner choose (by key hash, or
    /// sticky without a key).
    pub partition: Option<i32>,
    /// Key; records with the same key go to the same partition.
    pub key: Option<Bytes>,
    /// Value; `None` is a null value (a tombstone in Kafka terms).
    pub value: Option<Bytes>,
    /// Create time in ms since the Unix epoch; `None` means now.
    pub timestamp: Option<i64>,
    /// Headers.
    pub headers: Vec<Header>,
}

impl ProducerRecord {
    /// A record with a value and nothing else.
    pub fn new(topic: impl Into<String>, value: impl Into<Bytes>) -> Self {
        ProducerRecord {
            topic: topic.into(),
            partition: None,
            key: None,
            value: Some(value.into()),
            timestamp: None,
            headers: Vec::new(),
        }
    }

    /// Sets the key.
    pub fn with_key(mut self, key: impl Into<Bytes>) -> Self {
        self.key = Some(key.into());
        self
    }

    /// Fixes the partition.
    pub fn with_partition(mut self, partition: i32) -> Self {
        self.partition = Some(partition);
        self
    }

    /// Sets the create timestamp (ms since the Unix epoch).
    pub fn with_timestamp(mut self, timestamp_ms: i64) -> Self {
        self.timestamp = Some(timestamp_ms);
        self
    }

    /// Adds a header.
    pub fn with_header(mut self, key: impl Into<String>, value: Option<Bytes>) -> Self {
        self.headers.push(Header {
            key: key.into(),
            value,
        });
        self
    }
}

/// Where an acknowledged record was written, and on what the acknowledgement rests.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RecordMetadata {
    /// Topic (shared by every record of its batch).
    pub topic: Arc<str>,
    /// Partition.
    pub partition: i32,
    /// The record's offset; `-1` with `acks=0` (no response tells it).
    pub offset: i64,
    /// The broker ids whose copies the acknowledgement rests on: with `acks=all`
    /// the ISR at the time, with `acks=1` the leader alone, empty with `acks=0`.
    /// Shared by every record of its batch.
    pub acked_isr: Arc<[i32]>,
    /// The partition's replication factor (0 with `acks=0`). `acked_isr.len() <
    /// replication_factor` means a weaker guarantee than the topic was created for.
    pub replication_factor: i32,
    /// The record's timestamp (the broker's append time if the topic uses
    /// LogAppendTime).
    pub timestamp: i64,
}

impl RecordMetadata {
    /// True when fewer replicas than the replication factor hold the record.
    pub fn is_under_replicated(&self) -> bool {
        self.replication_factor > 0 && (self.acked_isr.len() as i32) < self.replication_factor
    }
}

/// A record read by a consumer.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ConsumerRecord {
    /// Topic (shared by every record read from it).
    pub topic: Arc<str>,
    /// Partition.
    pub partition: i32,
    /// Offset in the partition.
    pub offset: i64,
    /// Timestamp, ms since the Unix epoch.
    pub timestamp: i64,
    /// Key.
    pub key: Option<Bytes>,
    /// Value.
    pub value: Option<Bytes>,
    /// Headers.
    pub headers: Vec<Header>,
}
