//! The producer's side of the replication contract (Kafka's `acks` and
//! `min.insync.replicas`), request-wide: which `acks` values exist, what each
//! promises and when it is answered, how long an `acks=all` produce may wait,
//! and which topics a client may not write. Per partition, the core decides
//! the rest (`PartitionCore::check_leader_append` refuses `acks=all` under
//! `min.insync.replicas` before the append, `check_produce` completes it).

use std::time::Duration;

use syncline_proto::{ErrorCode, ACKS_ALL};

/// The internal topic of the group coordinators' state (committed offsets and
/// group metadata): only the coordinators write it.
pub use syncline_proto::OFFSETS_TOPIC;

/// Longest an `acks=all` produce may wait, whatever it asks for.
pub const MAX_PRODUCE_TIMEOUT: Duration = Duration::from_secs(300);

/// Longest a fetch may be held, whatever it asks for.
pub const MAX_FETCH_WAIT: Duration = Duration::from_secs(300);

/// A produce request's `acks`, validated.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Acks {
    /// `acks=0`: the producer wants no answer at all, not even an error.
    None,
    /// `acks=1`: answered once the leader appended; the record rests on the
    /// leader alone.
    Leader,
    /// `acks=all` (-1): answered once the high watermark passed the records,
    /// with the ISR (at least `min.insync.replicas`) that has them.
    All,
}

/// When an appended partition of a produce is answered.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum AckWhen {
    /// At once, naming only the leader as the replicas the record rests on.
    Appended,
    /// When the high watermark passes the last record (the purgatory waits).
    Replicated,
}

impl Acks {
    /// `acks` from the wire: 0, 1 or -1; anything else is
    /// `INVALID_REQUIRED_ACKS` for every partition of the request.
    pub fn from_wire(acks: i32) -> Result<Acks, ErrorCode> {
        match acks {
            0 => Ok(Acks::None),
            1 => Ok(Acks::Leader),
            ACKS_ALL => Ok(Acks::All),
            _ => Err(ErrorCode::InvalidRequiredAcks),
        }
    }

    /// When a partition this produce appended to is answered.
    #[must_use]
    pub fn ack_when(self) -> AckWhen {
        match self {
            Acks::None | Acks::Leader => AckWhen::Appended,
            Acks::All => AckWhen::Replicated,
        }
    }

    /// Whether the producer gets a response at all (`acks=0` gets none, even
    /// for errors; an invalid `acks` is answered with its error).
    #[must_use]
    pub fn answered(acks: Result<Acks, ErrorCode>) -> bool {
        acks != Ok(Acks::None)
    }
}

/// How long an `acks=all` produce may wait for replication: the request's
/// `timeout_ms`, negative read as 0, capped at [`MAX_PRODUCE_TIMEOUT`].
#[must_use]
pub fn produce_timeout(timeout_ms: i32) -> Duration {
    Duration::from_millis(timeout_ms.max(0) as u64).min(MAX_PRODUCE_TIMEOUT)
}

/// How long a fetch may wait for `min_bytes`: the request's `max_wait_ms`,
/// negative read as 0, capped at [`MAX_FETCH_WAIT`].
#[must_use]
pub fn fetch_wait(max_wait_ms: i32) -> Duration {
    Duration::from_millis(max_wait_ms.max(0) as u64).min(MAX_FETCH_WAIT)
}

/// Whether a client may produce to `topic`: the group coordinators' topic is
/// written only by them (`internal`: the broker's own connection), so a
/// client's write is `INVALID_TOPIC_EXCEPTION`, as Kafka answers.
pub fn check_writable(topic: &str, internal: bool) -> Result<(), ErrorCode> {
    if topic == OFFSETS_TOPIC && !internal {
        Err(ErrorCode::InvalidTopicException)
    } else {
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Kafka's ProduceRequestTest / KafkaApisTest "invalid required acks".
    #[test]
    fn acks_values_and_when_each_is_answered() {
        for (wire, acks, answered, when) in [
            (0, Ok(Acks::None), false, Some(AckWhen::Appended)),
            (1, Ok(Acks::Leader), true, Some(AckWhen::Appended)),
            (-1, Ok(Acks::All), true, Some(AckWhen::Replicated)),
            (2, Err(ErrorCode::InvalidRequiredAcks), true, None),
            (-2, Err(ErrorCode::InvalidRequiredAcks), true, None),
            (i32::MAX, Err(ErrorCode::InvalidRequiredAcks), true, None),
        ] {
            let got = Acks::from_wire(wire);
            assert_eq!(got, acks, "acks={wire}");
            assert_eq!(Acks::answered(got), answered, "acks={wire} answered");
            assert_eq!(got.ok().map(Acks::ack_when), when, "acks={wire}");
        }
    }

    #[test]
    fn waits_are_capped_and_never_negative() {
        for (ms, want) in [
            (-5, Duration::ZERO),
            (0, Duration::ZERO),
            (1_500, Duration::from_millis(1_500)),
            (300_000, MAX_PRODUCE_TIMEOUT),
            (i32::MAX, MAX_PRODUCE_TIMEOUT),
        ] {
            assert_eq!(produce_timeout(ms), want, "timeout_ms={ms}");
            assert_eq!(fetch_wait(ms), want.min(MAX_FETCH_WAIT), "max_wait_ms={ms}");
        }
    }

    #[test]
    fn only_the_coordinators_write_the_offsets_topic() {
        assert_eq!(
            check_writable(OFFSETS_TOPIC, false),
            Err(ErrorCode::InvalidTopicException)
        );
        assert_eq!(check_writable(OFFSETS_TOPIC, true), Ok(()));
        assert_eq!(check_writable("orders", false), Ok(()));
        assert_eq!(check_writable("__consumer_offsets2", false), Ok(()));
    }
}
