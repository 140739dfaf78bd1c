//! Kafka's error codes, as the coordinator answers them, and how a failed append to
//! the `__consumer_offsets` partition is reported to the client that waited for it.

/// The server experienced an unexpected error.
pub const UNKNOWN_SERVER_ERROR: i16 = -1;
/// Success.
pub const NONE: i16 = 0;
/// The partition the coordinator appends to does not exist (append errors only).
pub const UNKNOWN_TOPIC_OR_PARTITION: i16 = 3;
/// An append error: the fetch size is invalid.
pub const INVALID_FETCH_SIZE: i16 = 4;
/// An append error: this broker no longer leads the partition.
pub const NOT_LEADER_OR_FOLLOWER: i16 = 6;
/// An append error: acks=all was not reached in time.
pub const REQUEST_TIMED_OUT: i16 = 7;
/// An append error: a record is larger than the partition accepts.
pub const MESSAGE_TOO_LARGE: i16 = 10;
/// An offset commit's metadata is longer than `offset_metadata_max_bytes`.
pub const OFFSET_METADATA_TOO_LARGE: i16 = 12;
/// The coordinator is still loading its partition.
pub const COORDINATOR_LOAD_IN_PROGRESS: i16 = 14;
/// The coordinator cannot serve the group right now; the client retries.
pub const COORDINATOR_NOT_AVAILABLE: i16 = 15;
/// This broker is not the group's coordinator; the client looks it up again.
pub const NOT_COORDINATOR: i16 = 16;
/// An append error: the batch is larger than the partition accepts.
pub const RECORD_LIST_TOO_LARGE: i16 = 18;
/// An append error: the ISR is smaller than `min.insync.replicas`.
pub const NOT_ENOUGH_REPLICAS: i16 = 19;
/// An append error: the ISR shrank below `min.insync.replicas` after the append.
pub const NOT_ENOUGH_REPLICAS_AFTER_APPEND: i16 = 20;
/// The request's generation is not the group's.
pub const ILLEGAL_GENERATION: i16 = 22;
/// The protocol type or protocols do not fit the group's.
pub const INCONSISTENT_GROUP_PROTOCOL: i16 = 23;
/// The group id is empty.
pub const INVALID_GROUP_ID: i16 = 24;
/// The member id is not in the group.
pub const UNKNOWN_MEMBER_ID: i16 = 25;
/// The session timeout is outside the configured bounds.
pub const INVALID_SESSION_TIMEOUT: i16 = 26;
/// The group is rebalancing: rejoin.
pub const REBALANCE_IN_PROGRESS: i16 = 27;
/// An offset commit's records were too large to append.
pub const INVALID_COMMIT_OFFSET_SIZE: i16 = 28;
/// The request version is not supported (for the broker glue).
pub const UNSUPPORTED_VERSION: i16 = 35;
/// An append error: the log directory failed.
pub const KAFKA_STORAGE_ERROR: i16 = 56;
/// JoinGroup v4+: rejoin with the member id this response carries.
pub const MEMBER_ID_REQUIRED: i16 = 79;
/// The group has `max_group_size` members already.
pub const GROUP_MAX_SIZE_REACHED: i16 = 81;
/// A static member was replaced by a newer instance (for the broker glue).
pub const FENCED_INSTANCE_ID: i16 = 82;

/// What the members waiting for a group-metadata append (the leader's SyncGroup) are
/// told when it fails, as Kafka's `GroupMetadataManager.storeGroup` maps it.
pub fn group_append_error(append_error: i16) -> i16 {
    match append_error {
        UNKNOWN_TOPIC_OR_PARTITION | NOT_ENOUGH_REPLICAS | NOT_ENOUGH_REPLICAS_AFTER_APPEND => {
            COORDINATOR_NOT_AVAILABLE
        }
        NOT_LEADER_OR_FOLLOWER | KAFKA_STORAGE_ERROR => NOT_COORDINATOR,
        // The group rebalances after the failure anyway: rejoining is what the members
        // must do next.
        REQUEST_TIMED_OUT => REBALANCE_IN_PROGRESS,
        // Kafka passes other partition errors through; a SyncGroup client knows none of
        // them.
        _ => UNKNOWN_SERVER_ERROR,
    }
}

/// What an offset commit whose append failed answers for each partition, as Kafka's
/// `GroupMetadataManager.storeOffsets` maps it.
pub fn commit_append_error(append_error: i16) -> i16 {
    match append_error {
        // Timed out like an unreachable ISR: the commit is retriable.
        UNKNOWN_TOPIC_OR_PARTITION
        | NOT_ENOUGH_REPLICAS
        | NOT_ENOUGH_REPLICAS_AFTER_APPEND
        | REQUEST_TIMED_OUT => COORDINATOR_NOT_AVAILABLE,
        NOT_LEADER_OR_FOLLOWER | KAFKA_STORAGE_ERROR => NOT_COORDINATOR,
        MESSAGE_TOO_LARGE | RECORD_LIST_TOO_LARGE | INVALID_FETCH_SIZE => {
            INVALID_COMMIT_OFFSET_SIZE
        }
        _ => UNKNOWN_SERVER_ERROR,
    }
}
