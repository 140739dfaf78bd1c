//! Async client for syncline: [`Admin`], [`Producer`], [`Consumer`].
//!
//! All three take a configuration with Kafka's names and defaults
//! ([`ClientConfig`], [`ProducerConfig`], [`ConsumerConfig`]), connect lazily to
//! the bootstrap servers, keep one pipelined [`Connection`] per broker, and route
//! requests with a metadata cache that is refreshed when a broker says the leader
//! moved.
//!
//! ```no_run
//! use std::time::Duration;
//! use syncline_client::*;
//!
//! # async fn example() -> Result<(), Box<dyn std::error::Error>> {
//! let bootstrap = "127.0.0.1:9092";
//! Admin::new(ClientConfig::new(bootstrap))?
//!     .create_topic(NewTopic::new("events", 3, 3).with_config("min.insync.replicas", "2"))
//!     .await?;
//!
//! let producer = Producer::new(ProducerConfig::new(bootstrap))?;
//! let ack = producer.send(ProducerRecord::new("events", "hello").with_key("user-1")).await?;
//! if ack.is_under_replicated() {
//!     eprintln!("only {:?} of {} replicas have it", ack.acked_isr, ack.replication_factor);
//! }
//! producer.close().await;
//!
//! let mut consumer = Consumer::new(ConsumerConfig::new(bootstrap))?;
//! let tp = TopicPartition::new("events", ack.partition);
//! consumer.assign(vec![tp.clone()]);
//! consumer.seek(&tp, ack.offset)?;
//! let records = consumer.poll(Duration::from_secs(1)).await?;
//! # Ok(()) }
//! ```
//!
//! Two ways to learn a record's outcome: the future [`Producer::send`] returns
//! (or [`Producer::enqueue`], which keeps the order of records enqueued one after
//! the other), or Kafka's callback style, [`Producer::send_with_callback`], called
//! on the sender task the moment the response is handled (what `syncline perf
//! produce` uses to time acknowledgements). Settings can also be set by Kafka's
//! names, as from a properties file:
//!
//! ```
//! # fn example() -> Result<(), syncline_client::ClientError> {
//! let mut config = syncline_client::ProducerConfig::new("127.0.0.1:9092");
//! config.set("linger.ms", "10")?;
//! config.set("max.in.flight.requests.per.connection", "1")?; // order across retries
//! assert_eq!(config.linger_ms, 10);
//! # Ok(()) }
//! ```
//!
//! What an acknowledgement promises: with `acks=all` the record is at the offset
//! it reported on every member of [`RecordMetadata::acked_isr`], and stays
//! readable there across leader changes while one of them survives. There is no
//! idempotent producer yet: a retry after a lost response (a timeout, a dropped
//! connection) can write a record twice.
//!
//! Layout, one concept per module:
//! - `config`: settings; `error`: [`ClientError`], [`ProduceError`].
//! - `connection`: one pipelined socket to one broker; `connector`: opening
//!   one as the configuration's `security.protocol` says (TCP, TLS, SASL).
//! - `cluster`: connection per broker, metadata cache (`metadata`) and refresh.
//! - `admin`: topics and cluster description (merging leaders' views).
//! - `producer`: `send`/`flush`/`close`; `accumulator` (batches per partition),
//!   `buffer` (`buffer_memory`), `partitioner`, `sender` (the background task:
//!   requests, retries, completions).
//! - `consumer`: assign, seek, poll.
//! - `sasl`: authenticating a fresh stream (SaslHandshake, SaslAuthenticate)
//!   with SCRAM or PLAIN.
//!
//! Security settings are Kafka's (librdkafka's names for the PEM files):
//!
//! ```
//! # fn example() -> Result<(), syncline_client::ClientError> {
//! let mut config = syncline_client::ClientConfig::new("broker-1:9093");
//! config.set("security.protocol", "SASL_SSL")?;
//! config.set("sasl.mechanism", "SCRAM-SHA-512")?;
//! config.set("sasl.username", "alice")?;
//! config.set("sasl.password", "alice-secret")?;
//! config.set("ssl.ca.location", "certs/ca.pem")?;
//! config.validate()?;
//! # Ok(()) }
//! ```

#![warn(missing_docs)]

pub mod admin;
pub mod config;
pub mod connection;
pub mod connector;
pub mod consumer;
pub mod dial;
pub mod error;
pub mod group_consumer;
pub mod groups;
pub mod metadata;
pub mod partitioner;
pub mod producer;
pub mod record;
pub mod sasl;

mod accumulator;
mod buffer;
mod cluster;
mod sender;
#[cfg(test)]
mod testing;

pub use admin::{
    AclCreationResult, AclDeletionResult, Admin, AlteredTopic, BrokerDescription, BrokerLoad,
    ClientQuotaAlterationResult, ClusterDescription, CreatedTopic, DeletedTopic, ElectionResult,
    LeaderView, NewTopic, PartitionDescription, QuorumDescription, QuorumVoter, Reassignment,
    ReassignmentResult, ReplicaStatus, ScramCredentialInfo, TopicAlteration, TopicDescription,
    UserAlterationResult, UserScramCredentialAlteration, UserScramCredentials,
};
pub use config::{
    Acks, AutoOffsetReset, ClientConfig, ConsumerConfig, Password, ProducerConfig, SaslMechanism,
    SecurityProtocol,
};
pub use connection::Connection;
pub use connector::Connector;
pub use consumer::Consumer;
pub use error::{ClientError, ProduceError};
pub use group_consumer::GroupConsumer;
pub use groups::{GroupDescription, GroupListing, GroupMember, GroupOffset};
pub use metadata::{BrokerEndpoint, PartitionInfo};
pub use producer::{DeliveryFuture, Producer};
pub use record::{ConsumerRecord, Header, ProducerRecord, RecordMetadata};
pub use syncline_proto::pb::IsolationLevel;
pub use syncline_proto::{ErrorCode, TopicPartition};
