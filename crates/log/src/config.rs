//! Per-partition log settings, with Kafka's names and defaults.

use crate::LogError;

const DAY_MS: u64 = 24 * 60 * 60 * 1000;

/// Settings of one partition log. Names are Kafka's topic configs with dots written
/// as underscores; [`LogConfig::default`] gives Kafka's defaults.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LogConfig {
    /// `segment.bytes`: a new segment is rolled when a batch would push the active
    /// one past this size. At most `u32::MAX`, as index positions are 32-bit.
    pub segment_bytes: u64,
    /// `segment.ms`: a new segment is rolled when the active one spans more than this
    /// (measured on record timestamps, as Kafka does, so replicas roll alike).
    pub segment_ms: Option<u64>,
    /// `retention.ms`: segments whose newest record is older are deleted; -1 keeps
    /// them forever.
    pub retention_ms: i64,
    /// `retention.bytes`: oldest segments are deleted while the log stays at least
    /// this large without them; -1 means no size limit.
    pub retention_bytes: i64,
    /// `index.interval.bytes`: one sparse index entry per this many bytes of batches.
    pub index_interval_bytes: u32,
    /// `flush.messages`: fsync once this many offsets are unflushed (`u64::MAX`:
    /// never by count; durability comes from replication, as in Kafka).
    pub flush_messages: u64,
    /// `flush.ms`: fsync once the oldest unflushed append is this old (`u64::MAX`:
    /// never by time).
    pub flush_ms: u64,
}

impl Default for LogConfig {
    fn default() -> Self {
        LogConfig {
            segment_bytes: 1 << 30,
            segment_ms: Some(7 * DAY_MS),
            retention_ms: (7 * DAY_MS) as i64,
            retention_bytes: -1,
            index_interval_bytes: 4096,
            flush_messages: u64::MAX,
            flush_ms: u64::MAX,
        }
    }
}

impl LogConfig {
    /// Whether this policy ever fsyncs by time or count (the default never
    /// does): a log with it needs the periodic flush check.
    pub fn flushes(&self) -> bool {
        self.flush_ms != u64::MAX || self.flush_messages != u64::MAX
    }

    pub(crate) fn validate(&self) -> Result<(), LogError> {
        let bad = |what: String| Err(LogError::InvalidConfig(what));
        // A segment must hold at least one batch header.
        let min_segment_bytes = syncline_proto::batch::HEADER_LEN as u64;
        if !(min_segment_bytes..=u64::from(u32::MAX)).contains(&self.segment_bytes) {
            return bad(format!(
                "segment_bytes {} is outside [{min_segment_bytes}, {}]",
                self.segment_bytes,
                u32::MAX
            ));
        }
        if self.retention_ms < -1 {
            return bad(format!("retention_ms {} is below -1", self.retention_ms));
        }
        if self.retention_bytes < -1 {
            return bad(format!(
                "retention_bytes {} is below -1",
                self.retention_bytes
            ));
        }
        if self.flush_messages == 0 {
            return bad("flush_messages must be at least 1".to_string());
        }
        Ok(())
    }
}
