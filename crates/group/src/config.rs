//! The coordinator's settings, with Kafka's broker defaults.

/// Kafka's `group.*` and `offsets.*` broker settings that shape the coordinator.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct GroupConfig {
    /// `group.min.session.timeout.ms`.
    pub min_session_timeout_ms: i32,
    /// `group.max.session.timeout.ms`.
    pub max_session_timeout_ms: i32,
    /// `group.initial.rebalance.delay.ms`: how long an Empty group's first rebalance
    /// waits for more members, so that a group starting up is not rebalanced once per
    /// arriving consumer.
    pub initial_rebalance_delay_ms: i32,
    /// `group.max.size`.
    pub max_group_size: usize,
    /// `offset.metadata.max.bytes` (counted, as Kafka does, in UTF-16 code units).
    pub offset_metadata_max_bytes: usize,
    /// `offsets.retention.minutes`, in milliseconds.
    pub offsets_retention_ms: i64,
}

impl Default for GroupConfig {
    fn default() -> Self {
        GroupConfig {
            min_session_timeout_ms: 6_000,
            max_session_timeout_ms: 1_800_000,
            initial_rebalance_delay_ms: 3_000,
            max_group_size: i32::MAX as usize,
            offset_metadata_max_bytes: 4_096,
            offsets_retention_ms: 7 * 24 * 60 * 60 * 1_000,
        }
    }
}
