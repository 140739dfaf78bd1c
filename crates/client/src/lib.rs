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
//! Layout, one concept per module:
//! - `config`: settings; `error`: [`ClientError`], [`ProduceError`].
//! - `connection`: one pipelined socket to one broker.
//! - `cluster`: connection per broker, metadata cache (`metadata`) and refresh.
//! - `admin`: topics and cluster description (merging leaders' views).
//! - `producer`: `send`/`flush`/`close`; `accumulator` (batches per partition),
//!   `buffer` (`buffer_memory`), `partitioner`, `sender` (the background task:
//!   requests, retries, completions).
//! - `consumer`: assign, seek, poll.

#![warn(missing_docs)]

pub mod admin;
pub mod config;
pub mod connection;
pub mod consumer;
pub mod error;
pub mod metadata;
pub mod partitioner;
pub mod producer;
pub mod record;

mod accumulator;
mod buffer;
mod cluster;
mod sender;
#[cfg(test)]
mod testing;

pub use admin::{
    Admin, BrokerDescription, ClusterDescription, CreatedTopic, LeaderView, NewTopic,
    PartitionDescription, ReplicaStatus, TopicDescription,
};
pub use config::{Acks, AutoOffsetReset, ClientConfig, ConsumerConfig, ProducerConfig};
pub use connection::Connection;
pub use consumer::Consumer;
pub use error::{ClientError, ProduceError};
pub use metadata::{BrokerEndpoint, PartitionInfo, TopicPartition};
pub use producer::{DeliveryFuture, Producer};
pub use record::{ConsumerRecord, Header, ProducerRecord, RecordMetadata};
pub use syncline_proto::pb::IsolationLevel;
pub use syncline_proto::ErrorCode;
