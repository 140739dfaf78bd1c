//! Consumer groups: the I/O shell around `syncline-group`'s coordinator.
//!
//! A group lives on the partition of `__consumer_offsets` its id hashes to, and
//! its coordinator is that partition's leader. For every partition of the topic
//! this broker leads, a shard task owns one [`Coordinator`]: it first loads the
//! partition's log (what the last leader appended), then serves the groups'
//! requests in arrival order, appends the records the coordinator decides with
//! acks=all in its leader epoch (so a deposed coordinator cannot write), and
//! fires the coordinator's deadlines. A LeaderAndIsr that moves the partition's
//! leadership stops the shard: its waiting requests get NOT_COORDINATOR and the
//! clients find the new coordinator, which loads the same log.

use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;

use parking_lot::Mutex;
use syncline_group::{
    AppendId, CommitOffset, CommitRequest, Coordinator, Effects, GroupConfig, HeartbeatRequest,
    JoinRequest, LeaveRequest, Protocol, Record, Reply, RequestId, SyncRequest,
};
use syncline_proto::batch::{self, BatchBuilder};
use syncline_proto::{pb, ErrorCode};
use tokio::sync::{mpsc, oneshot};
use tokio_util::sync::CancellationToken;

use crate::config::GroupsConfig;
use crate::replica::manager::ReplicaManager;
use crate::responder::Responder;

/// The internal topic of the groups' state and committed offsets.
pub(crate) use syncline_replication::produce::OFFSETS_TOPIC;

/// How long a coordinator's append waits for the ISR (Kafka's
/// `offsets.commit.timeout.ms`).
const COMMIT_TIMEOUT_MS: i32 = 5000;

/// Bytes read at a time while loading a partition.
const LOAD_READ_BYTES: usize = 1 << 20;

/// A request for one group, with whom to answer.
#[derive(Debug)]
enum Command {
    Join(JoinRequest, Responder),
    Sync(SyncRequest, Responder),
    Heartbeat(HeartbeatRequest, Responder),
    Leave(LeaveRequest, Responder),
    Commit(CommitRequest, Responder),
    FetchOffsets(pb::OffsetFetchRequest, Responder),
    List(oneshot::Sender<Vec<pb::ListedGroup>>),
    Describe(Vec<String>, oneshot::Sender<Vec<pb::DescribedGroup>>),
}

/// A running shard: the coordinator of one partition this broker leads.
#[derive(Debug)]
struct Shard {
    leader_epoch: i32,
    tx: mpsc::UnboundedSender<Command>,
    stop: CancellationToken,
}

/// The shards of this broker.
#[derive(Debug)]
pub(crate) struct GroupManager {
    config: GroupsConfig,
    rm: Arc<ReplicaManager>,
    /// The listener the shards' own requests name (any: they never leave).
    listener: Arc<str>,
    shards: Mutex<HashMap<i32, Shard>>,
    seeds: AtomicU64,
}

/// The group coordinator's clock: milliseconds since the Unix epoch, read
/// from the wall clock once and advanced from then on by tokio's monotonic
/// clock. Its timers (sessions, rebalances, the initial rebalance delay) so
/// run on `tokio::time` like every other rule: a wall clock stepped back or
/// forth does not expire every session at once or stall a rebalance, and a
/// simulation's clock drives them. Commit timestamps stay wall-clock times.
#[derive(Debug, Clone, Copy)]
struct Clock {
    wall_ms: i64,
    at: tokio::time::Instant,
}

impl Clock {
    fn start() -> Clock {
        Clock {
            wall_ms: syncline_proto::wall_clock_ms(),
            at: tokio::time::Instant::now(),
        }
    }

    fn now_ms(&self) -> i64 {
        let elapsed = i64::try_from(self.at.elapsed().as_millis()).unwrap_or(i64::MAX);
        self.wall_ms.saturating_add(elapsed)
    }
}

impl GroupManager {
    pub(crate) fn new(config: GroupsConfig, rm: Arc<ReplicaManager>, listener: Arc<str>) -> Self {
        GroupManager {
            config,
            rm,
            listener,
            shards: Mutex::new(HashMap::new()),
            seeds: AtomicU64::new(rand::random()),
        }
    }

    fn coordinator_config(&self) -> GroupConfig {
        let c = &self.config;
        GroupConfig {
            min_session_timeout_ms: c.group_min_session_timeout_ms,
            max_session_timeout_ms: c.group_max_session_timeout_ms,
            initial_rebalance_delay_ms: c.group_initial_rebalance_delay_ms,
            max_group_size: c.group_max_size,
            offset_metadata_max_bytes: c.offset_metadata_max_bytes,
            offsets_retention_ms: c.offsets_retention_minutes.saturating_mul(60_000),
        }
    }

    /// Starts and stops shards to match the partitions of `__consumer_offsets`
    /// this broker leads now (after every LeaderAndIsr). `partitions`: the
    /// topic's partitions as the metadata knows them.
    pub(crate) fn sync_leadership(&self, partitions: &[i32]) {
        let mut shards = self.shards.lock();
        let leading: HashMap<i32, i32> = partitions
            .iter()
            .filter_map(|&p| {
                let part = self.rm.partition(OFFSETS_TOPIC, p)?;
                part.is_leader().then(|| (p, part.leader_epoch()))
            })
            .collect();
        shards.retain(|p, shard| {
            let keep = leading.get(p) == Some(&shard.leader_epoch);
            if !keep {
                tracing::info!(
                    partition = p,
                    epoch = shard.leader_epoch,
                    "group coordinator stops"
                );
                shard.stop.cancel();
            }
            keep
        });
        for (p, epoch) in leading {
            if shards.contains_key(&p) {
                continue;
            }
            tracing::info!(partition = p, epoch, "group coordinator starts");
            let (tx, rx) = mpsc::unbounded_channel();
            let stop = CancellationToken::new();
            let task = ShardTask {
                partition: p,
                leader_epoch: epoch,
                rm: self.rm.clone(),
                listener: self.listener.clone(),
                coordinator: Coordinator::new(
                    p as u32,
                    self.coordinator_config(),
                    self.seeds.fetch_add(1, Ordering::Relaxed),
                ),
                waiting: HashMap::new(),
                next_request: 0,
                clock: Clock::start(),
            };
            tokio::spawn(task.run(rx, stop.clone()));
            shards.insert(
                p,
                Shard {
                    leader_epoch: epoch,
                    tx,
                    stop,
                },
            );
        }
    }

    /// Stops every shard (shutdown).
    pub(crate) fn stop_all(&self) {
        for (_, shard) in self.shards.lock().drain() {
            shard.stop.cancel();
        }
    }

    /// The shard of `group_id` when `partitions` is the topic's partition
    /// count; None when this broker does not coordinate it.
    fn shard_of(
        &self,
        group_id: &str,
        partitions: usize,
    ) -> Option<mpsc::UnboundedSender<Command>> {
        if partitions == 0 {
            return None;
        }
        let p = syncline_group::partition_for(group_id, partitions as u32) as i32;
        self.shards.lock().get(&p).map(|s| s.tx.clone())
    }

    /// Hands a group request to its shard, or answers NOT_COORDINATOR.
    pub(crate) fn submit(
        &self,
        body: pb::request::Body,
        partitions: usize,
        client_id: &str,
        responder: Responder,
    ) {
        use pb::request::Body;
        let (group_id, command) = match body {
            Body::JoinGroup(r) => (
                r.group_id.clone(),
                Command::Join(join_request(r, client_id, &responder), responder),
            ),
            Body::SyncGroup(r) => (
                r.group_id.clone(),
                Command::Sync(sync_request(r), responder),
            ),
            Body::Heartbeat(r) => (
                r.group_id.clone(),
                Command::Heartbeat(
                    HeartbeatRequest {
                        group_id: r.group_id,
                        member_id: r.member_id,
                        generation_id: r.generation_id,
                        group_instance_id: None,
                    },
                    responder,
                ),
            ),
            Body::LeaveGroup(r) => (
                r.group_id.clone(),
                Command::Leave(
                    LeaveRequest {
                        group_id: r.group_id,
                        members: r.member_ids.into_iter().map(|m| (m, None)).collect(),
                    },
                    responder,
                ),
            ),
            Body::OffsetCommit(r) => (
                r.group_id.clone(),
                Command::Commit(commit_request(r), responder),
            ),
            Body::OffsetFetch(r) => (r.group_id.clone(), Command::FetchOffsets(r, responder)),
            _ => {
                responder.send_error(ErrorCode::InvalidRequest, "not a group request");
                return;
            }
        };
        match self.shard_of(&group_id, partitions) {
            Some(tx) => {
                if let Err(mpsc::error::SendError(command)) = tx.send(command) {
                    not_coordinator(command, &group_id);
                }
            }
            None => not_coordinator(command, &group_id),
        }
    }

    /// Every group this broker coordinates.
    pub(crate) async fn list_groups(&self) -> pb::ListGroupsResponse {
        let senders: Vec<_> = self.shards.lock().values().map(|s| s.tx.clone()).collect();
        let mut groups = Vec::new();
        for tx in senders {
            let (reply, rx) = oneshot::channel();
            if tx.send(Command::List(reply)).is_ok() {
                groups.extend(rx.await.unwrap_or_default());
            }
        }
        groups.sort_by(|a, b| a.group_id.cmp(&b.group_id));
        pb::ListGroupsResponse {
            error_code: ErrorCode::None as i32,
            groups,
        }
    }

    /// The groups asked, in the order asked; NOT_COORDINATOR for those another
    /// broker coordinates.
    pub(crate) async fn describe_groups(
        &self,
        ids: Vec<String>,
        partitions: usize,
    ) -> pb::DescribeGroupsResponse {
        let mut groups = Vec::with_capacity(ids.len());
        for id in ids {
            let described = match self.shard_of(&id, partitions) {
                Some(tx) => {
                    let (reply, rx) = oneshot::channel();
                    match tx.send(Command::Describe(vec![id.clone()], reply)) {
                        Ok(()) => rx.await.ok().and_then(|mut d| d.pop()),
                        Err(_) => None,
                    }
                }
                None => None,
            };
            groups.push(described.unwrap_or_else(|| pb::DescribedGroup {
                error_code: ErrorCode::NotCoordinator as i32,
                group_id: id,
                ..Default::default()
            }));
        }
        pb::DescribeGroupsResponse { groups }
    }
}

/// One shard's task state.
struct ShardTask {
    partition: i32,
    leader_epoch: i32,
    rm: Arc<ReplicaManager>,
    listener: Arc<str>,
    coordinator: Coordinator,
    /// Requests whose answer the coordinator holds, by the id it was given.
    waiting: HashMap<RequestId, Responder>,
    next_request: u64,
    clock: Clock,
}

impl ShardTask {
    async fn run(mut self, mut rx: mpsc::UnboundedReceiver<Command>, stop: CancellationToken) {
        match self.load() {
            Ok(records) => {
                let count = records.len();
                self.coordinator.load(records, self.clock.now_ms());
                tracing::info!(
                    partition = self.partition,
                    records = count,
                    groups = self.coordinator.groups_count(),
                    "group coordinator loaded"
                );
            }
            Err(code) => {
                tracing::warn!(
                    partition = self.partition,
                    ?code,
                    "group coordinator cannot load"
                );
                stop.cancel();
            }
        }
        let (done_tx, mut done_rx) = mpsc::unbounded_channel::<(AppendId, Result<(), i16>)>();
        while !stop.is_cancelled() {
            let sleep = match self.coordinator.next_deadline() {
                Some(at) => Duration::from_millis((at - self.clock.now_ms()).max(0) as u64),
                // Nothing due: wake for a command.
                None => Duration::from_secs(3600),
            };
            let effects = tokio::select! {
                biased;
                _ = stop.cancelled() => break,
                Some((id, result)) = done_rx.recv() => self.coordinator.appended(id, result, self.clock.now_ms()),
                command = rx.recv() => match command {
                    Some(command) => self.handle(command),
                    None => break,
                },
                _ = tokio::time::sleep(sleep) => self.coordinator.tick(self.clock.now_ms()),
            };
            self.execute(effects, &done_tx);
        }
        rx.close();
        while let Ok(command) = rx.try_recv() {
            not_coordinator(command, "");
        }
        for (_, responder) in self.waiting.drain() {
            responder.send_error(ErrorCode::NotCoordinator, "the coordinator moved");
        }
    }

    /// Every record of the partition, from its log start to its log end.
    fn load(&self) -> Result<Vec<Record>, ErrorCode> {
        let partition = self
            .rm
            .partition(OFFSETS_TOPIC, self.partition)
            .ok_or(ErrorCode::NotLeaderOrFollower)?;
        let mut offset = partition.log_start_offset();
        let mut records = Vec::new();
        loop {
            let bytes = partition.read_as_leader(offset, LOAD_READ_BYTES, self.leader_epoch)?;
            let before = offset;
            for b in batch::split(&bytes) {
                // A batch cut by the read's byte bound is read again next time.
                let Ok((header, raw)) = b else { break };
                let set = batch::records(raw).map_err(|_| ErrorCode::CorruptMessage)?;
                for r in set.iter() {
                    let r = r.map_err(|_| ErrorCode::CorruptMessage)?;
                    let Some(key) = r.view.key else { continue };
                    match Record::decode(key, r.view.value) {
                        Ok(record) => records.push(record),
                        Err(e) => tracing::warn!(
                            partition = self.partition,
                            offset = r.offset,
                            error = %e,
                            "skipping a record the coordinator cannot read"
                        ),
                    }
                }
                offset = header.next_offset();
            }
            if offset == before {
                return Ok(records);
            }
        }
    }

    fn request_id(&mut self) -> RequestId {
        self.next_request += 1;
        RequestId(self.next_request)
    }

    fn hold(&mut self, responder: Responder) -> RequestId {
        let id = self.request_id();
        self.waiting.insert(id, responder);
        id
    }

    fn handle(&mut self, command: Command) -> Effects {
        let now = self.clock.now_ms();
        tracing::debug!(partition = self.partition, ?command, "group request");
        match command {
            Command::Join(r, responder) => {
                let id = self.hold(responder);
                self.coordinator.join(id, r, now)
            }
            Command::Sync(r, responder) => {
                let id = self.hold(responder);
                self.coordinator.sync(id, r, now)
            }
            Command::Heartbeat(r, responder) => {
                let id = self.hold(responder);
                self.coordinator.heartbeat(id, r, now)
            }
            Command::Leave(r, responder) => {
                let id = self.hold(responder);
                self.coordinator.leave(id, r, now)
            }
            Command::Commit(r, responder) => {
                let id = self.hold(responder);
                self.coordinator.commit(id, r, now)
            }
            Command::FetchOffsets(r, responder) => {
                let asked = (!r.all || !r.topics.is_empty()).then(|| {
                    r.topics
                        .iter()
                        .map(|t| (t.name.clone(), t.partitions.clone()))
                        .collect()
                });
                let fetched = self.coordinator.fetch_offsets(&r.group_id, asked);
                responder.send(pb::response::Body::OffsetFetch(offset_fetch_response(
                    fetched,
                )));
                Effects::default()
            }
            Command::List(reply) => {
                let groups = self
                    .coordinator
                    .list_groups()
                    .into_iter()
                    .map(|g| pb::ListedGroup {
                        group_id: g.group_id,
                        protocol_type: g.protocol_type,
                        state: g.state.as_str().to_string(),
                    })
                    .collect();
                let _ = reply.send(groups);
                Effects::default()
            }
            Command::Describe(ids, reply) => {
                let groups = self
                    .coordinator
                    .describe_groups(&ids)
                    .into_iter()
                    .map(|g| pb::DescribedGroup {
                        error_code: i32::from(g.error),
                        group_id: g.group_id,
                        state: g.state.as_str().to_string(),
                        protocol_type: g.protocol_type,
                        protocol_name: g.protocol_name,
                        members: g
                            .members
                            .into_iter()
                            .map(|m| pb::DescribedMember {
                                member_id: m.member_id,
                                client_id: m.client_id,
                                client_host: m.client_host,
                                metadata: m.metadata,
                                assignment: m.assignment,
                            })
                            .collect(),
                    })
                    .collect();
                let _ = reply.send(groups);
                Effects::default()
            }
        }
    }

    fn execute(
        &mut self,
        effects: Effects,
        done: &mpsc::UnboundedSender<(AppendId, Result<(), i16>)>,
    ) {
        for (id, reply) in effects.replies {
            tracing::debug!(partition = self.partition, ?reply, "group reply");
            if let Some(responder) = self.waiting.remove(&id) {
                responder.send(reply_body(reply));
            }
        }
        for append in effects.appends {
            let done = done.clone();
            if append.records.is_empty() {
                let _ = done.send((append.id, Ok(())));
                continue;
            }
            let now = self.clock.now_ms();
            let mut builder = BatchBuilder::new(now);
            for record in &append.records {
                let value = record.value();
                builder.push(now, Some(&record.key()), value.as_deref(), &[]);
            }
            let request = pb::ProduceRequest {
                acks: -1,
                timeout_ms: COMMIT_TIMEOUT_MS,
                topics: vec![pb::ProduceTopic {
                    name: OFFSETS_TOPIC.to_string(),
                    partitions: vec![pb::ProducePartition {
                        partition: self.partition,
                        current_leader_epoch: Some(self.leader_epoch),
                        records: builder.finish(),
                    }],
                }],
            };
            let (responder, answer) = Responder::internal(self.listener.clone());
            // Inline: the partition's log takes the coordinator's appends in
            // the order it decided them.
            self.rm.handle_produce(request, responder);
            let id = append.id;
            tokio::spawn(async move {
                let result = match answer.await {
                    Ok(pb::response::Body::Produce(p)) => {
                        let code = p
                            .topics
                            .first()
                            .and_then(|t| t.partitions.first())
                            .map_or(ErrorCode::UnknownServerError as i32, |p| p.error_code);
                        match code {
                            0 => Ok(()),
                            // A deposed coordinator: its clients look again.
                            c if c == ErrorCode::FencedLeaderEpoch as i32 => {
                                Err(ErrorCode::NotLeaderOrFollower as i16)
                            }
                            c => Err(c as i16),
                        }
                    }
                    Ok(pb::response::Body::Error(e)) => Err(e.error_code as i16),
                    _ => Err(ErrorCode::NotLeaderOrFollower as i16),
                };
                let _ = done.send((id, result));
            });
        }
    }
}

/// Answers a request no shard of this broker takes.
fn not_coordinator(command: Command, group_id: &str) {
    let why = format!("this broker does not coordinate group {group_id:?}");
    match command {
        Command::Join(_, r)
        | Command::Sync(_, r)
        | Command::Heartbeat(_, r)
        | Command::Leave(_, r)
        | Command::Commit(_, r)
        | Command::FetchOffsets(_, r) => r.send_error(ErrorCode::NotCoordinator, why),
        Command::List(reply) => {
            let _ = reply.send(vec![]);
        }
        Command::Describe(ids, reply) => {
            let _ = reply.send(
                ids.into_iter()
                    .map(|group_id| pb::DescribedGroup {
                        error_code: ErrorCode::NotCoordinator as i32,
                        group_id,
                        ..Default::default()
                    })
                    .collect(),
            );
        }
    }
}

fn code(e: i16) -> i32 {
    i32::from(e)
}

fn join_request(r: pb::JoinGroupRequest, client_id: &str, responder: &Responder) -> JoinRequest {
    JoinRequest {
        group_id: r.group_id,
        member_id: r.member_id,
        group_instance_id: None,
        client_id: client_id.to_string(),
        client_host: responder.connection().peer.to_string(),
        protocol_type: r.protocol_type,
        protocols: r
            .protocols
            .into_iter()
            .map(|p| Protocol {
                name: p.name,
                metadata: p.metadata,
            })
            .collect(),
        session_timeout_ms: r.session_timeout_ms,
        rebalance_timeout_ms: r.rebalance_timeout_ms,
        require_known_member_id: r.require_known_member_id,
    }
}

fn sync_request(r: pb::SyncGroupRequest) -> SyncRequest {
    SyncRequest {
        group_id: r.group_id,
        member_id: r.member_id,
        generation_id: r.generation_id,
        group_instance_id: None,
        protocol_type: (!r.protocol_type.is_empty()).then_some(r.protocol_type),
        protocol_name: (!r.protocol_name.is_empty()).then_some(r.protocol_name),
        assignments: r
            .assignments
            .into_iter()
            .map(|a| (a.member_id, a.assignment))
            .collect(),
    }
}

fn commit_request(r: pb::OffsetCommitRequest) -> CommitRequest {
    CommitRequest {
        group_id: r.group_id,
        generation_id: r.generation_id,
        member_id: r.member_id,
        group_instance_id: None,
        offsets: r
            .topics
            .into_iter()
            .flat_map(|t| {
                let topic = t.name;
                t.partitions.into_iter().map(move |p| CommitOffset {
                    topic: topic.clone(),
                    partition: p.partition,
                    offset: p.offset,
                    leader_epoch: p.leader_epoch,
                    metadata: p.metadata,
                })
            })
            .collect(),
    }
}

fn offset_fetch_response(f: syncline_group::OffsetFetchResponse) -> pb::OffsetFetchResponse {
    let mut topics: Vec<pb::OffsetFetchTopicResult> = Vec::new();
    for p in f.partitions {
        let fetched = pb::FetchedOffset {
            partition: p.partition,
            offset: p.offset,
            leader_epoch: p.leader_epoch,
            metadata: p.metadata,
            error_code: code(p.error),
        };
        match topics.iter_mut().find(|t| t.name == p.topic) {
            Some(t) => t.partitions.push(fetched),
            None => topics.push(pb::OffsetFetchTopicResult {
                name: p.topic,
                partitions: vec![fetched],
            }),
        }
    }
    pb::OffsetFetchResponse {
        error_code: code(f.error),
        topics,
    }
}

fn reply_body(reply: Reply) -> pb::response::Body {
    use pb::response::Body;
    match reply {
        Reply::Join(j) => Body::JoinGroup(pb::JoinGroupResponse {
            error_code: code(j.error),
            generation_id: j.generation_id,
            protocol_type: j.protocol_type.unwrap_or_default(),
            protocol_name: j.protocol_name.unwrap_or_default(),
            leader: j.leader,
            member_id: j.member_id,
            members: j
                .members
                .into_iter()
                .map(|m| pb::JoinGroupMember {
                    member_id: m.member_id,
                    metadata: m.metadata,
                })
                .collect(),
        }),
        Reply::Sync(s) => Body::SyncGroup(pb::SyncGroupResponse {
            error_code: code(s.error),
            protocol_type: s.protocol_type.unwrap_or_default(),
            protocol_name: s.protocol_name.unwrap_or_default(),
            assignment: s.assignment,
        }),
        Reply::Heartbeat(e) => Body::Heartbeat(pb::HeartbeatResponse {
            error_code: code(e),
        }),
        Reply::Leave(l) => Body::LeaveGroup(pb::LeaveGroupResponse {
            error_code: code(l.error),
            members: l
                .members
                .into_iter()
                .map(|(member_id, _, e)| pb::LeftMember {
                    member_id,
                    error_code: code(e),
                })
                .collect(),
        }),
        Reply::Commit(c) => {
            let mut topics: Vec<pb::OffsetCommitTopicResult> = Vec::new();
            for (topic, partition, e) in c.partitions {
                let result = pb::PartitionResult {
                    partition,
                    error_code: code(e),
                };
                match topics.iter_mut().find(|t| t.name == topic) {
                    Some(t) => t.partitions.push(result),
                    None => topics.push(pb::OffsetCommitTopicResult {
                        name: topic,
                        partitions: vec![result],
                    }),
                }
            }
            Body::OffsetCommit(pb::OffsetCommitResponse { topics })
        }
    }
}
