//! What a run did and saw: every operation of the workload with its outcome, in
//! the manner of Jepsen's histories, and the state read after healing. The
//! checker ([`crate::checker`]) judges it; nothing here judges anything.

use std::collections::BTreeMap;
use std::time::Duration;

/// The outcome of one send.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Outcome {
    /// Acknowledged at `offset`, by the ISR the acknowledgement named.
    Ok { offset: i64, acked_isr: Vec<i32> },
    /// Refused: the broker said it was not written (it may be anyway when an
    /// earlier attempt of the same send timed out).
    Failed(String),
    /// Nobody knows: a timeout or a lost connection.
    Unknown(String),
}

/// One record a producer sent.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Send {
    pub producer: usize,
    pub partition: i32,
    /// Unique in the whole run.
    pub value: String,
    /// Since the start of the run.
    pub at: Duration,
    pub outcome: Outcome,
    /// Sent by a producer whose settings carry the run's promise (false: a
    /// producer beside them, with `acks=1` or `acks=0` and no idempotence,
    /// whose records may be lost or written twice).
    pub promised: bool,
}

/// One record a consumer read during the run, in the order it read them.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Poll {
    pub consumer: usize,
    pub partition: i32,
    pub offset: i64,
    pub value: String,
}

/// A consumer moved its position on purpose (the broker said its offset was
/// out of range): the next poll may go back without being a fault of the log's.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Reset {
    pub consumer: usize,
    pub partition: i32,
    /// How many polls of this consumer came before it.
    pub after_polls: usize,
    pub to: i64,
}

/// The high watermark a leader gave a consumer in a fetch response (each
/// consumer's in the order it received them).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct HighWatermark {
    pub consumer: usize,
    pub partition: i32,
    pub broker: i32,
    pub leader_epoch: i32,
    pub value: i64,
}

/// Everything the workload recorded.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct History {
    pub sends: Vec<Send>,
    pub polls: Vec<Poll>,
    pub resets: Vec<Reset>,
    pub high_watermarks: Vec<HighWatermark>,
}

/// What was read after healing.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Final {
    /// Each partition's log as its leader serves it, offset by offset from 0 up
    /// to its high watermark.
    pub logs: BTreeMap<i32, Vec<(i64, String)>>,
    /// Per partition: `Err` says how the replicas differ below the high watermark.
    pub replicas: BTreeMap<i32, Result<(), String>>,
    /// How long after healing every partition had its full ISR again and every
    /// acknowledged record could be read (`Err`: what was still missing).
    pub healed: Result<Duration, String>,
    /// Violations of one leader per partition and epoch, leader in its ISR and
    /// epochs never going back, seen by the leader watch during the run.
    pub leadership: Vec<String>,
}
