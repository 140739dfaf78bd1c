//! Client errors: [`ClientError`] for requests, admin and consumer calls,
//! [`ProduceError`] for the outcome of one produced record.

use std::sync::Arc;

use syncline_proto::batch::BatchError;
use syncline_proto::ErrorCode;

/// What went wrong talking to the cluster.
#[derive(Debug, thiserror::Error)]
pub enum ClientError {
    /// The TCP connection could not be made (refused, unreachable, bad address).
    #[error("cannot connect to {0}: {1}")]
    Connect(String, #[source] std::io::Error),
    /// The TCP connection was not made within `connect_timeout_ms`.
    #[error("timed out connecting to {0}")]
    ConnectTimeout(String),
    /// No bootstrap server or known broker answered; `last` is the last failure.
    #[error("cannot reach any of {servers}: {last}")]
    Unreachable {
        /// The addresses tried, comma-separated.
        servers: String,
        /// Why the last one failed.
        #[source]
        last: Box<ClientError>,
    },
    /// The connection closed while a request was outstanding.
    #[error("connection to {0} closed")]
    Disconnected(String),
    /// The broker closed a new connection without answering anything: often a
    /// TLS or SASL listener that a plaintext client spoke to.
    #[error("the broker at {0} closed the connection before answering (if it is up: a TLS or SASL listener? check security.protocol)")]
    ClosedBeforeAnswer(String),
    /// TLS could not be set up (the settings' files) or the handshake with a
    /// broker failed; the [`syncline_tls::TlsError`] says which.
    #[error("{}{source}", if addr.is_empty() { String::new() } else { format!("TLS with {addr}: ") })]
    Tls {
        /// The broker's address (empty for a settings error).
        addr: String,
        /// What went wrong.
        #[source]
        source: syncline_tls::TlsError,
    },
    /// The broker refused the SASL username or password.
    #[error("authentication failed for user {username}: wrong username or password (SASL_AUTHENTICATION_FAILED, {mechanism}){}", if message.is_empty() { String::new() } else { format!("; the broker said: {message}") })]
    AuthenticationFailed {
        /// Who the client claimed to be.
        username: String,
        /// The mechanism used.
        mechanism: &'static str,
        /// The broker's message, possibly empty.
        message: String,
    },
    /// The broker's listener does not offer the configured SASL mechanism.
    #[error(
        "the broker at {addr} does not accept sasl.mechanism {mechanism} (it offers: {offered})"
    )]
    SaslMechanism {
        /// The broker's address.
        addr: String,
        /// The mechanism asked for.
        mechanism: &'static str,
        /// What it offers, comma-separated (empty: none).
        offered: String,
    },
    /// Any other SASL failure (the listener takes no SASL, the broker did not
    /// prove it knows the credential, the exchange broke off).
    #[error("SASL authentication with {addr} failed: {reason}")]
    Sasl {
        /// The broker's address.
        addr: String,
        /// What went wrong.
        reason: String,
    },
    /// Socket error.
    #[error("i/o error: {0}")]
    Io(#[from] std::io::Error),
    /// A frame that does not decode.
    #[error("malformed response: {0}")]
    Frame(#[from] syncline_proto::frame::FrameError),
    /// The broker could not serve the request at all (an `ErrorResponse`), or
    /// answered it with a request-level error code.
    #[error("broker answered {code}{}", if message.is_empty() { String::new() } else { format!(": {message}") })]
    Protocol {
        /// The error code.
        code: ErrorCode,
        /// The broker's message, possibly empty.
        message: String,
    },
    /// The response body is not of the request's type.
    #[error("unexpected response type for {0}")]
    UnexpectedResponse(&'static str),
    /// No response within `request_timeout_ms`.
    #[error("request timed out after {0} ms")]
    Timeout(u64),
    /// A configuration value is out of range.
    #[error("invalid configuration: {0}")]
    Config(String),
    /// The topic does not exist (after the metadata wait, for producers).
    #[error("topic {0} does not exist")]
    UnknownTopic(String),
    /// The partition number is not in the topic.
    #[error("topic {topic} has no partition {partition} ({partitions} partitions)")]
    UnknownPartition {
        /// Topic name.
        topic: String,
        /// The partition asked for.
        partition: i32,
        /// How many partitions the topic has.
        partitions: usize,
    },
    /// A per-topic error code (e.g. from CreateTopics or Metadata).
    #[error("topic {topic}: {code}{}", if message.is_empty() { String::new() } else { format!(": {message}") })]
    Topic {
        /// Topic name.
        topic: String,
        /// The error code.
        code: ErrorCode,
        /// The broker's message, possibly empty.
        message: String,
    },
    /// A per-partition error code that is not retriable.
    #[error("{topic}-{partition}: {code}")]
    Partition {
        /// Topic name.
        topic: String,
        /// Partition number.
        partition: i32,
        /// The error code.
        code: ErrorCode,
    },
    /// A broker id that is not in the cluster metadata.
    #[error("broker {0} is not in the cluster metadata")]
    UnknownBroker(i32),
    /// The fetch position is outside the log and `auto_offset_reset` is `none`.
    #[error("offset {offset} is out of range for {topic}-{partition} (auto_offset_reset is none)")]
    OffsetOutOfRange {
        /// Topic name.
        topic: String,
        /// Partition number.
        partition: i32,
        /// The position that was fetched.
        offset: i64,
    },
    /// A partition has no position, `auto_offset_reset` is `none`, and no seek
    /// gave one.
    #[error("{topic}-{partition} has no position: seek first, or set auto_offset_reset to earliest or latest")]
    NoOffset {
        /// Topic name.
        topic: String,
        /// Partition number.
        partition: i32,
    },
    /// Fetched record bytes that fail validation.
    #[error("corrupt records in {topic}-{partition} at offset {offset}: {source}")]
    CorruptRecords {
        /// Topic name.
        topic: String,
        /// Partition number.
        partition: i32,
        /// The position that was fetched.
        offset: i64,
        /// What is wrong with them.
        #[source]
        source: BatchError,
    },
    /// The consumer is not assigned the partition.
    #[error("{topic}-{partition} is not assigned to this consumer")]
    NotAssigned {
        /// Topic name.
        topic: String,
        /// Partition number.
        partition: i32,
    },
}

impl ClientError {
    /// The protocol error code, when the broker gave one.
    pub fn code(&self) -> Option<ErrorCode> {
        match self {
            ClientError::Protocol { code, .. }
            | ClientError::Topic { code, .. }
            | ClientError::Partition { code, .. } => Some(*code),
            ClientError::Unreachable { last, .. } => last.code(),
            ClientError::AuthenticationFailed { .. } => Some(ErrorCode::SaslAuthenticationFailed),
            ClientError::SaslMechanism { .. } => Some(ErrorCode::UnsupportedSaslMechanism),
            _ => None,
        }
    }

    /// Worth retrying after a metadata refresh.
    pub fn is_retriable(&self) -> bool {
        match self {
            ClientError::Protocol { code, .. }
            | ClientError::Topic { code, .. }
            | ClientError::Partition { code, .. } => code.is_retriable(),
            ClientError::Connect(..)
            | ClientError::ConnectTimeout(_)
            | ClientError::Unreachable { .. }
            | ClientError::Disconnected(_)
            | ClientError::Io(_)
            | ClientError::Timeout(_)
            | ClientError::ClosedBeforeAnswer(_)
            | ClientError::UnknownBroker(_) => true,
            ClientError::Tls { source, .. } => tls_is_transient(source),
            _ => false,
        }
    }

    /// True when the failure is about reaching brokers at all (connection refused,
    /// timeouts, closed sockets) rather than an answer from one.
    pub fn is_connectivity(&self) -> bool {
        matches!(
            self,
            ClientError::Connect(..)
                | ClientError::ConnectTimeout(_)
                | ClientError::Unreachable { .. }
                | ClientError::Disconnected(_)
                | ClientError::ClosedBeforeAnswer(_)
                | ClientError::Io(_)
        ) || matches!(self, ClientError::Tls { source, .. } if tls_is_transient(source))
    }

    /// True when the failure is about TLS or SASL: the certificates, the
    /// credential or `security.protocol` need changing, not the network.
    pub fn is_security(&self) -> bool {
        match self {
            // A hang-up is retried, and may still be security.protocol.
            ClientError::Tls { source, .. } => {
                !tls_is_transient(source) || *source == syncline_tls::TlsError::HungUp
            }
            ClientError::AuthenticationFailed { .. }
            | ClientError::SaslMechanism { .. }
            | ClientError::Sasl { .. } => true,
            ClientError::Unreachable { last, .. } => last.is_security(),
            _ => false,
        }
    }
}

/// A handshake that broke off (a broker going down hangs up mid-handshake) or
/// took too long may work next time; a refused certificate will not.
fn tls_is_transient(e: &syncline_tls::TlsError) -> bool {
    matches!(
        e,
        syncline_tls::TlsError::Io(_)
            | syncline_tls::TlsError::Timeout(_)
            | syncline_tls::TlsError::HungUp
    )
}

/// Why one produced record was not acknowledged. Cloneable: every record of a
/// failed batch gets the same error.
#[derive(Debug, Clone, thiserror::Error)]
pub enum ProduceError {
    /// The broker refused the batch with a non-retriable code, or the last retry
    /// failed with this code.
    #[error("{code}{}", if message.is_empty() { String::new() } else { format!(": {message}") })]
    Broker {
        /// The error code.
        code: ErrorCode,
        /// The broker's message, possibly empty.
        message: String,
    },
    /// The record was not acknowledged within `delivery_timeout_ms`.
    #[error("not acknowledged within delivery_timeout_ms ({timeout_ms} ms){}", match last_error { Some(e) => format!(", last error: {e}"), None => String::new() })]
    DeliveryTimeout {
        /// The configured timeout.
        timeout_ms: u64,
        /// The error of the last attempt, if there was one.
        last_error: Option<Box<ProduceError>>,
    },
    /// `buffer_memory` stayed full for `max_block_ms`.
    #[error(
        "buffer_memory is full: no room for {size} bytes within max_block_ms ({max_block_ms} ms)"
    )]
    BufferFull {
        /// Bytes the record needs.
        size: usize,
        /// The configured wait.
        max_block_ms: u64,
    },
    /// The record can never be sent: it is larger than a configured bound.
    #[error("record of {size} bytes is larger than {setting} ({limit} bytes)")]
    RecordTooLarge {
        /// The record's encoded size.
        size: usize,
        /// The bound.
        limit: usize,
        /// The setting that bounds it (`max_request_size` or `buffer_memory`).
        setting: &'static str,
    },
    /// A client-side failure: metadata or the connection.
    #[error(transparent)]
    Client(Arc<ClientError>),
    /// The producer was closed before the record was accepted.
    #[error("the producer is closed")]
    Closed,
}

impl ProduceError {
    /// The protocol error code behind the failure, if any (looking through a
    /// delivery timeout to its last error).
    pub fn code(&self) -> Option<ErrorCode> {
        match self {
            ProduceError::Broker { code, .. } => Some(*code),
            ProduceError::DeliveryTimeout {
                last_error: Some(e),
                ..
            } => e.code(),
            ProduceError::Client(e) => e.code(),
            _ => None,
        }
    }
}

impl From<ClientError> for ProduceError {
    fn from(e: ClientError) -> Self {
        ProduceError::Client(Arc::new(e))
    }
}
