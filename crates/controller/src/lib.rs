//! The syncline controller: the cluster's metadata as a replayable log of records,
//! and the pure state machine that decides what goes into it.
//!
//! - [`MetadataImage`] (`image`): brokers, topics, partitions, controller epoch, user
//!   credentials and ACLs, as replaying the log produces them. [`MetadataImage::apply`] is the only mutation.
//! - [`Controller`] (`controller/`): decides. Each operation (registration,
//!   heartbeat, tick, CreateTopics, AlterPartition) looks at the image and returns a
//!   [`ControllerResult`]: a response plus the records that make it true, *not yet
//!   applied*. Liveness (heartbeat times, controlled shutdowns) is run-time state.
//! - `election`: the one leadership/ISR rule every change follows; `draft`: a change
//!   set in progress; `placement`: replica assignment for new topics;
//!   `scram_bootstrap`: the `scram_bootstrap_file` format ([`parse_scram_bootstrap`],
//!   [`scram_bootstrap_line`]).
//! - [`MetadataLog`] (`metadata_log`): the append-only, fsynced file of records; the
//!   only I/O here. Sockets, the event loop and `LeaderAndIsr` pushes live in the
//!   broker crate.
//!
//! # Driving it
//!
//! Every operation follows the same four steps: decide, append durably, apply,
//! answer (and announce the changed partitions to their replicas).
//!
//! ```
//! use syncline_controller::{changed_partitions, Controller, ControllerConfig, ControllerResult,
//!     MetadataImage, MetadataLog};
//! use syncline_proto::pb;
//! use tokio::time::{Duration, Instant};
//!
//! type Error = Box<dyn std::error::Error>;
//!
//! fn commit<T>(log: &mut MetadataLog, c: &mut Controller, r: ControllerResult<T>) -> Result<T, Error> {
//!     let first = log.append(&r.records)?; // durable first
//!     c.replay_all(first, &r.records)?; // then applied
//!     for (_broker, _states) in c.image().partition_states_by_broker(&changed_partitions(&r.records)) {
//!         // the shell sends LeaderAndIsr { partition_states: _states, .. } to _broker
//!     }
//!     Ok(r.response) // and only then answered
//! }
//!
//! # fn main() -> Result<(), Error> {
//! # let dir = tempfile::tempdir()?;
//! // Start: replay the log, take office with a new controller epoch.
//! let (mut log, replayed) = MetadataLog::open(dir.path())?;
//! let mut image = MetadataImage::new();
//! for (offset, record) in &replayed {
//!     image.apply(*offset, record)?;
//! }
//! let t0 = Instant::now();
//! let mut c = Controller::new(ControllerConfig::new(0, "cluster-a"), image, t0)?;
//! let start = c.start();
//! commit(&mut log, &mut c, start)?;
//!
//! // Two brokers register (fenced), catch up with the log and get unfenced.
//! for id in [1, 2] {
//!     let reg = pb::BrokerRegistrationRequest {
//!         broker_id: id,
//!         cluster_id: "cluster-a".into(),
//!         incarnation_id: vec![id as u8; 16].into(),
//!         endpoint: Some(pb::BrokerEndpoint { node_id: id, host: "localhost".into(), port: 9090 + id, rack: String::new() }),
//!         metrics_address: String::new(),
//!         listeners: vec![],
//!     };
//!     let r = c.register_broker(&reg, t0);
//!     let epoch = commit(&mut log, &mut c, r)?.broker_epoch;
//!     let hb = pb::BrokerHeartbeatRequest {
//!         broker_id: id,
//!         broker_epoch: epoch,
//!         current_metadata_offset: c.image().last_applied_offset(),
//!         want_fence: false,
//!         want_shutdown: false,
//!     };
//!     let r = c.heartbeat(&hb, t0);
//!     assert!(!commit(&mut log, &mut c, r)?.is_fenced);
//! }
//!
//! // A topic with one partition on both brokers.
//! let create = pb::CreateTopicsRequest {
//!     topics: vec![pb::CreatableTopic { name: "events".into(), num_partitions: 1, replication_factor: 2, configs: Default::default() }],
//!     timeout_ms: 30_000,
//!     validate_only: false,
//!     forwarded: false,
//! };
//! let r = c.create_topics(&create);
//! commit(&mut log, &mut c, r)?;
//! let p = c.image().partition("events", 0).unwrap().clone();
//!
//! // Its leader shrinks the ISR to itself.
//! let leader_epoch = c.image().broker(p.leader).unwrap().epoch;
//! let alter = pb::AlterPartitionRequest {
//!     broker_id: p.leader,
//!     broker_epoch: leader_epoch,
//!     topics: vec![pb::AlterPartitionTopic {
//!         name: "events".into(),
//!         partitions: vec![pb::AlterPartitionPartition {
//!             partition: 0,
//!             leader_epoch: p.leader_epoch,
//!             new_isr_with_epochs: vec![pb::BrokerState { broker_id: p.leader, broker_epoch: leader_epoch }],
//!             partition_epoch: p.partition_epoch,
//!         }],
//!     }],
//! };
//! let r = c.alter_partition(&alter);
//! commit(&mut log, &mut c, r)?;
//! assert_eq!(c.image().partition("events", 0).unwrap().isr, vec![p.leader]);
//!
//! // Nobody heartbeats for longer than the session timeout: both are fenced and the
//! // partition goes offline, its last ISR member kept so it can lead again.
//! let r = c.tick(t0 + Duration::from_millis(9_001));
//! assert_eq!(commit(&mut log, &mut c, r)?, vec![1, 2]);
//! assert_eq!(c.image().offline_partitions_count(), 1);
//! # Ok(())
//! # }
//! ```

#![warn(missing_docs)]

mod config;
mod controller;
mod draft;
mod election;
mod image;
mod metadata_log;
mod placement;
mod quorum;
mod records;
mod scram_bootstrap;

pub use config::{
    ControllerConfig, InvalidConfig, TopicConfig, COMPRESSION_TYPE, FLUSH_MESSAGES, FLUSH_MS,
    MESSAGE_TIMESTAMP_TYPE, MIN_INSYNC_REPLICAS, REPLICA_LAG_TIME_MAX_MS, RETENTION_BYTES,
    RETENTION_MS, SEGMENT_BYTES, SEGMENT_MS, TOPIC_CONFIG_KEYS, UNCLEAN_LEADER_ELECTION_ENABLE,
};
pub use controller::{
    credential_of, verifier_of, Controller, ControllerResult, MAX_PARTITIONS_PER_REQUEST,
    MAX_TOPIC_NAME_LEN, MAX_USER_NAME_LEN, PRODUCER_ID_BLOCK_SIZE,
};
pub use image::{
    ApplyError, BrokerRegistration, InvalidSnapshot, InvariantViolation, MetadataImage,
    PartitionRegistration, TopicImage,
};
pub use metadata_log::{MetadataLog, MetadataLogError, MAX_RECORD_BYTES, METADATA_LOG_FILE};
pub use quorum::{
    heartbeat_request as raft_heartbeat_request, request_sender as raft_request_sender,
    ProposeError, Quorum, QuorumConfig, QuorumError, QuorumStatus, QuorumTransport, VoterStatus,
};
pub use records::{
    changed_brokers, changed_partitions, changed_topic_configs, deleted_topics, security_changed,
};
pub use scram_bootstrap::{parse_scram_bootstrap, scram_bootstrap_line, ScramBootstrapError};
