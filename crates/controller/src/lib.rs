//! The syncline controller: the cluster's metadata as a log of records that a Raft
//! quorum of controller voters replicates, and the pure state machine that decides
//! what goes into it.
//!
//! - [`MetadataImage`] (`image`): brokers, topics, partitions, controller epoch, user
//!   credentials, ACLs and client quotas, as replaying the log produces them. [`MetadataImage::apply`] is the only mutation.
//! - [`Controller`] (`controller/`): decides. Each operation (registration,
//!   heartbeat, tick, CreateTopics, AlterPartition) looks at the image and returns a
//!   [`ControllerResult`]: a response plus the records that make it true, *not yet
//!   applied*. Liveness (heartbeat times, controlled shutdowns) is run-time state.
//! - `election`: the one leadership/ISR rule every change follows; `draft`: a change
//!   set in progress; `placement`: replica assignment for new topics;
//!   `scram_bootstrap`: the `scram_bootstrap_file` format ([`parse_scram_bootstrap`],
//!   [`scram_bootstrap_line`]); [`client_quotas`]: which client quota entities, keys
//!   and values are valid, and which entities a DescribeClientQuotas filter selects.
//! - [`Quorum`] (`quorum/`): the metadata log itself, a Raft log (openraft) replicated
//!   among the voters; the only I/O here. Sockets, the event loop and `LeaderAndIsr`
//!   pushes live in the broker crate, which carries the voters' messages through a
//!   [`QuorumTransport`].
//!
//! # The metadata log
//!
//! Every voter runs a [`Quorum`]. The voter Raft elects leader is the active
//! controller, and only it proposes; every voter applies the committed entries, in
//! order, to its own [`MetadataImage`].
//!
//! - **Committing.** [`Quorum::propose`] replicates the records of one decision as one
//!   Raft entry. It returns once a majority of voters has the entry on disk (a voter
//!   fsyncs its log before it acknowledges) and this voter has applied it, with the
//!   metadata offset of the first record: offsets count records, not Raft entries.
//!   A `Timeout` or a lost leadership leaves the outcome unknown (the entry may still
//!   commit), so the caller must stop deciding: it resigns.
//! - **Taking office.** A new leader first calls [`Quorum::barrier`], which commits an
//!   empty entry: once it returns, everything any earlier leader committed is in
//!   [`Quorum::image`], and only then may a [`Controller`] be built over that image.
//! - **Snapshots.** Every [`QuorumConfig::snapshot_every_entries`] applied entries, a
//!   voter stores its image as a protobuf `MetadataSnapshot` and purges the log behind
//!   it. A voter further behind than the leader's log is sent the snapshot whole, and a
//!   restarted voter starts from its snapshot and replays the log after it.
//! - **On disk**, in [`QuorumConfig::dir`] (the broker passes
//!   `<log_dir>/__cluster_metadata`): `quorum.log`, the Raft log, CRC-32C frames
//!   appended and fsynced, a torn tail cut off at open; `quorum.state`, the vote and
//!   the committed index; `quorum.snapshot`, the last snapshot. The last two are
//!   replaced whole, atomically. They hold the users' SCRAM verifiers: each file is
//!   mode 0600 and the directory 0700, whatever the umask.
//!
//! # Driving it
//!
//! Every operation follows the same four steps (the [`ControllerResult`] contract):
//! decide, commit through the quorum, apply, answer (and announce the changed
//! partitions to their replicas). Here one voter is a whole quorum: its majority is
//! itself, so it never calls its transport.
//!
//! ```
//! use std::collections::BTreeMap;
//! use std::sync::Arc;
//! use std::time::Duration;
//!
//! use bytes::Bytes;
//! use futures::future::BoxFuture;
//! use syncline_controller::{changed_partitions, Controller, ControllerConfig, ControllerResult,
//!     Quorum, QuorumConfig, QuorumTransport};
//! use syncline_proto::pb;
//! use tokio::time::Instant;
//!
//! type Error = Box<dyn std::error::Error>;
//!
//! /// The voters' messages; the broker sends them over its connections.
//! #[derive(Debug)]
//! struct NoPeers;
//!
//! impl QuorumTransport for NoPeers {
//!     fn call(&self, target: i32, _: &str, _: Bytes) -> BoxFuture<'static, Result<Bytes, String>> {
//!         Box::pin(async move { Err(format!("voter {target} is not reachable")) })
//!     }
//! }
//!
//! const COMMIT: Duration = Duration::from_secs(30);
//!
//! async fn commit<T>(q: &Quorum, c: &mut Controller, r: ControllerResult<T>) -> Result<T, Error> {
//!     if r.records.is_empty() {
//!         return Ok(r.response);
//!     }
//!     let first = q.propose(r.records.clone(), COMMIT).await?; // a majority has them
//!     assert_eq!(first, c.next_offset()); // (the broker resigns instead)
//!     c.replay_all(first, &r.records)?; // then applied
//!     for (_broker, _states) in c.image().partition_states_by_broker(&changed_partitions(&r.records)) {
//!         // the shell sends LeaderAndIsr { partition_states: _states, .. } to _broker
//!     }
//!     Ok(r.response) // and only then answered
//! }
//!
//! /// Starts voter 1 of a quorum of one, and waits until it leads.
//! async fn start(dir: &std::path::Path) -> Result<Quorum, Error> {
//!     let voters = BTreeMap::from([(1, "localhost:9093".to_owned())]);
//!     let config = QuorumConfig {
//!         heartbeat_interval_ms: 50,
//!         election_timeout_min_ms: 150,
//!         election_timeout_max_ms: 300,
//!         snapshot_every_entries: 4,
//!         ..QuorumConfig::new(1, voters, dir)
//!     };
//!     let quorum = Quorum::start(config, Arc::new(NoPeers)).await?;
//!     let mut status = quorum.subscribe();
//!     tokio::time::timeout(COMMIT, status.wait_for(|s| s.is_leader)).await??;
//!     Ok(quorum)
//! }
//!
//! # #[tokio::main(flavor = "current_thread")]
//! # async fn main() -> Result<(), Error> {
//! # let dir = tempfile::tempdir()?;
//! # let dir = dir.path().join("__cluster_metadata");
//! // Take office: everything committed before is applied, then a new controller epoch.
//! let quorum = start(&dir).await?;
//! quorum.barrier(COMMIT).await?;
//! let t0 = Instant::now();
//! let mut c = Controller::new(ControllerConfig::new(1, "cluster-a"), quorum.image(), t0)?;
//! let start_office = c.start();
//! commit(&quorum, &mut c, start_office).await?;
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
//!     let epoch = commit(&quorum, &mut c, r).await?.broker_epoch;
//!     let hb = pb::BrokerHeartbeatRequest {
//!         broker_id: id,
//!         broker_epoch: epoch,
//!         current_metadata_offset: c.image().last_applied_offset(),
//!         want_fence: false,
//!         want_shutdown: false,
//!     };
//!     let r = c.heartbeat(&hb, t0);
//!     assert!(!commit(&quorum, &mut c, r).await?.is_fenced);
//! }
//!
//! // A topic with one partition on both brokers.
//! let create = pb::CreateTopicsRequest {
//!     topics: vec![pb::CreatableTopic { name: "events".into(), num_partitions: 1, replication_factor: 2, configs: Default::default() }],
//!     timeout_ms: 30_000,
//!     validate_only: false,
//!     forwarded: false,
//!     auto_create: false,
//! };
//! let r = c.create_topics(&create);
//! commit(&quorum, &mut c, r).await?;
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
//! commit(&quorum, &mut c, r).await?;
//! assert_eq!(c.image().partition("events", 0).unwrap().isr, vec![p.leader]);
//!
//! // Nobody heartbeats for longer than the session timeout: both are fenced and the
//! // partition goes offline, its last ISR member kept so it can lead again.
//! let r = c.tick(t0 + Duration::from_millis(9_001));
//! assert_eq!(commit(&quorum, &mut c, r).await?, vec![1, 2]);
//! assert_eq!(c.image().offline_partitions_count(), 1);
//!
//! // The voter applied every commit to its own image; restarted, it rebuilds that
//! // image from its files (the last snapshot, then the log after it).
//! assert_eq!(&quorum.image(), c.image());
//! quorum.shutdown().await;
//! let quorum = start(&dir).await?;
//! quorum.barrier(COMMIT).await?;
//! assert_eq!(&quorum.image(), c.image());
//! assert!(dir.join("quorum.log").exists());
//! quorum.shutdown().await;
//! # Ok(())
//! # }
//! ```

#![warn(missing_docs)]

mod auto_create;
pub mod client_quotas;
mod config;
mod controller;
mod draft;
mod election;
mod image;
mod internal_topics;
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
pub use internal_topics::{is_internal, OffsetsTopicConfig};
pub use quorum::{
    heartbeat_request as raft_heartbeat_request, request_sender as raft_request_sender,
    ProposeError, Quorum, QuorumConfig, QuorumError, QuorumStatus, QuorumTransport, VoterStatus,
};
pub use records::{
    changed_brokers, changed_partitions, changed_topic_configs, client_quotas_changed,
    deleted_topics, security_changed,
};
pub use scram_bootstrap::{parse_scram_bootstrap, scram_bootstrap_line, ScramBootstrapError};
