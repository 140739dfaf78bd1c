//! The coordinator of one `__consumer_offsets` partition: finds the group a request
//! is for and hands the outcome back as [`Effects`].

use std::collections::{BTreeMap, HashMap};

use rand::rngs::StdRng;
use rand::SeedableRng;

use crate::api::{
    Append, AppendId, CommitRequest, CommitResponse, DescribedGroup, Effects, FetchedOffset,
    GroupState, GroupSummary, HeartbeatRequest, JoinRequest, JoinResponse, LeaveRequest,
    LeaveResponse, ListedGroup, OffsetFetchResponse, Reply, RequestId, SyncRequest, SyncResponse,
};
use crate::config::GroupConfig;
use crate::error;
use crate::group::{refused, Group, Outbox, Waiter};
use crate::record::{GroupValue, OffsetValue, Record};
use crate::timers::Timers;

/// The groups of one `__consumer_offsets` partition, as a pure state machine: time
/// comes in as `now_ms` (wall-clock Unix milliseconds), and every change that must be
/// sent or made durable goes out as [`Effects`]. See the crate docs for the contract.
#[derive(Debug)]
pub struct Coordinator {
    partition: u32,
    config: GroupConfig,
    rng: StdRng,
    groups: BTreeMap<String, Group>,
    /// Each group's earliest deadline.
    schedule: Timers<String>,
    last_append: u64,
    waiting: HashMap<AppendId, (String, Waiter)>,
}

impl Coordinator {
    /// A coordinator for `partition` with no groups; `seed` makes member ids
    /// reproducible. Call [`load`](Self::load) with the partition's records next.
    pub fn new(partition: u32, config: GroupConfig, seed: u64) -> Coordinator {
        Coordinator {
            partition,
            config,
            rng: StdRng::seed_from_u64(seed),
            groups: BTreeMap::new(),
            schedule: Timers::default(),
            last_append: 0,
            waiting: HashMap::new(),
        }
    }

    /// The `__consumer_offsets` partition this coordinator serves.
    pub fn partition(&self) -> u32 {
        self.partition
    }

    /// The settings it was created with.
    pub fn config(&self) -> &GroupConfig {
        &self.config
    }

    /// Rebuilds the groups from the partition's records, replayed in log order (the
    /// last record per key wins; tombstones remove). Meant for a new coordinator:
    /// groups loaded replace any of the same id. A group with members comes back
    /// Stable in its generation, each member's session starting at `now_ms`; one
    /// without is Empty.
    pub fn load(&mut self, records: impl IntoIterator<Item = Record>, now_ms: i64) {
        let mut metadata: BTreeMap<String, Option<GroupValue>> = BTreeMap::new();
        let mut offsets: BTreeMap<String, BTreeMap<(String, i32), OffsetValue>> = BTreeMap::new();
        for record in records {
            match record {
                Record::Offset {
                    group_id,
                    topic,
                    partition,
                    value,
                } => {
                    let group = offsets.entry(group_id).or_default();
                    match value {
                        Some(v) => group.insert((topic, partition), v),
                        None => group.remove(&(topic, partition)),
                    };
                }
                Record::Group { group_id, value } => {
                    metadata.insert(group_id, value);
                }
            }
        }
        let mut ids: Vec<String> = metadata
            .iter()
            .filter(|(_, v)| v.is_some())
            .map(|(id, _)| id.clone())
            .chain(
                offsets
                    .iter()
                    .filter(|(_, o)| !o.is_empty())
                    .map(|(id, _)| id.clone()),
            )
            .collect();
        ids.sort();
        ids.dedup();
        for id in ids {
            let value = metadata.remove(&id).flatten();
            let group_offsets = offsets
                .remove(&id)
                .unwrap_or_default()
                .into_iter()
                .collect();
            let group = Group::loaded(id.clone(), value, group_offsets, &self.config, now_ms);
            self.groups.insert(id.clone(), group);
            self.finish(&id, now_ms);
        }
    }

    /// JoinGroup. The reply may be held until the rebalance's join phase completes.
    pub fn join(&mut self, id: RequestId, req: JoinRequest, now_ms: i64) -> Effects {
        let mut out = Outbox::default();
        let refuse = |out: &mut Outbox, code: i16| {
            let response = JoinResponse::error(req.member_id.clone(), code);
            out.reply(id, Reply::Join(response));
        };
        if req.group_id.is_empty() {
            refuse(&mut out, error::INVALID_GROUP_ID);
            return self.seal(out);
        }
        let timeouts = self.config.min_session_timeout_ms..=self.config.max_session_timeout_ms;
        if !timeouts.contains(&req.session_timeout_ms) {
            refuse(&mut out, error::INVALID_SESSION_TIMEOUT);
            return self.seal(out);
        }
        // Only a new member creates a group: a known one of a group that is gone
        // must join afresh.
        if !req.member_id.is_empty() && !self.groups.contains_key(&req.group_id) {
            refuse(&mut out, error::UNKNOWN_MEMBER_ID);
            return self.seal(out);
        }
        let group_id = req.group_id.clone();
        let group = self
            .groups
            .entry(group_id.clone())
            .or_insert_with(|| Group::new(group_id.clone(), now_ms));
        group.join(&self.config, &mut self.rng, id, req, now_ms, &mut out);
        self.finish(&group_id, now_ms);
        self.seal(out)
    }

    /// SyncGroup. A follower's reply (and the leader's) may be held until the leader's
    /// assignment is durable.
    pub fn sync(&mut self, id: RequestId, req: SyncRequest, now_ms: i64) -> Effects {
        let mut out = Outbox::default();
        if req.group_id.is_empty() {
            let response = SyncResponse::error(error::INVALID_GROUP_ID);
            out.reply(id, Reply::Sync(response));
            return self.seal(out);
        }
        let group_id = req.group_id.clone();
        match self.groups.get_mut(&group_id) {
            Some(group) => group.sync(id, req, now_ms, &mut out),
            None => {
                let response = SyncResponse::error(error::UNKNOWN_MEMBER_ID);
                out.reply(id, Reply::Sync(response));
            }
        }
        self.finish(&group_id, now_ms);
        self.seal(out)
    }

    /// Heartbeat: answered at once.
    pub fn heartbeat(&mut self, id: RequestId, req: HeartbeatRequest, now_ms: i64) -> Effects {
        let mut out = Outbox::default();
        let code = if req.group_id.is_empty() {
            error::INVALID_GROUP_ID
        } else {
            match self.groups.get_mut(&req.group_id) {
                Some(group) => group.heartbeat(&req, now_ms),
                None => error::UNKNOWN_MEMBER_ID,
            }
        };
        out.reply(id, Reply::Heartbeat(code));
        self.finish(&req.group_id, now_ms);
        self.seal(out)
    }

    /// LeaveGroup: answered at once; the group rebalances without the members.
    pub fn leave(&mut self, id: RequestId, req: LeaveRequest, now_ms: i64) -> Effects {
        let mut out = Outbox::default();
        let response = if req.group_id.is_empty() {
            LeaveResponse {
                error: error::INVALID_GROUP_ID,
                members: Vec::new(),
            }
        } else {
            let members = match self.groups.get_mut(&req.group_id) {
                Some(group) => group.leave(req.members, &self.config, now_ms, &mut out),
                None => req
                    .members
                    .into_iter()
                    .map(|(member, instance)| (member, instance, error::UNKNOWN_MEMBER_ID))
                    .collect(),
            };
            LeaveResponse {
                error: error::NONE,
                members,
            }
        };
        out.reply(id, Reply::Leave(response));
        self.finish(&req.group_id, now_ms);
        self.seal(out)
    }

    /// OffsetCommit. The reply waits for the append unless nothing is to be written.
    /// The empty group id is allowed, as Kafka allows it for commits.
    pub fn commit(&mut self, id: RequestId, req: CommitRequest, now_ms: i64) -> Effects {
        let mut out = Outbox::default();
        let group_id = req.group_id.clone();
        let simple = req.generation_id < 0 && req.member_id.is_empty();
        match self.groups.get_mut(&group_id) {
            Some(group) => group.commit(&self.config, id, req, now_ms, &mut out),
            // A group that only stores offsets (a simple consumer, an admin).
            None if simple => self
                .groups
                .entry(group_id.clone())
                .or_insert_with(|| Group::new(group_id.clone(), now_ms))
                .commit(&self.config, id, req, now_ms, &mut out),
            None => {
                // With a generation, a commit for a group that is gone comes from a
                // generation that is over.
                let code = if req.generation_id < 0 {
                    error::UNKNOWN_MEMBER_ID
                } else {
                    error::ILLEGAL_GENERATION
                };
                out.reply(id, Reply::Commit(refused(&req.offsets, code)));
            }
        }
        self.finish(&group_id, now_ms);
        self.seal(out)
    }

    /// OffsetFetch of `partitions` per topic (`None`: all the group has). Unknown
    /// groups and partitions answer offset -1 without an error, as Kafka.
    pub fn fetch_offsets(
        &self,
        group_id: &str,
        partitions: Option<Vec<(String, Vec<i32>)>>,
    ) -> OffsetFetchResponse {
        let partitions = match (self.groups.get(group_id), partitions) {
            (Some(group), partitions) => group.fetch(partitions),
            (None, Some(topics)) => topics
                .into_iter()
                .flat_map(|(topic, partitions)| {
                    partitions
                        .into_iter()
                        .map(move |p| FetchedOffset::none(topic.clone(), p))
                })
                .collect(),
            (None, None) => Vec::new(),
        };
        OffsetFetchResponse {
            error: error::NONE,
            partitions,
        }
    }

    /// ListGroups: every group, by id.
    pub fn list_groups(&self) -> Vec<ListedGroup> {
        self.groups.values().map(Group::listed).collect()
    }

    /// DescribeGroups; an unknown group is Dead, without an error, as Kafka.
    pub fn describe_groups(&self, ids: &[String]) -> Vec<DescribedGroup> {
        ids.iter()
            .map(|id| match self.groups.get(id) {
                Some(group) => group.describe(),
                None => DescribedGroup {
                    error: error::NONE,
                    group_id: id.clone(),
                    state: GroupState::Dead,
                    protocol_type: String::new(),
                    protocol_name: String::new(),
                    members: Vec::new(),
                },
            })
            .collect()
    }

    /// Fires every deadline at or before `now_ms`: sessions, handed-out member ids,
    /// join and sync phases, the initial rebalance delay, offset retention.
    pub fn tick(&mut self, now_ms: i64) -> Effects {
        let mut out = Outbox::default();
        while let Some(group_id) = self.schedule.pop_due(now_ms) {
            let Some(group) = self.groups.get_mut(&group_id) else {
                continue;
            };
            if group.fire_due(&self.config, now_ms, &mut out) {
                self.groups.remove(&group_id);
            } else {
                self.finish(&group_id, now_ms);
            }
        }
        self.seal(out)
    }

    /// When [`tick`](Self::tick) has something to do next.
    pub fn next_deadline(&self) -> Option<i64> {
        self.schedule.next()
    }

    /// An append from [`Effects::appends`] finished; `Err` carries the partition's
    /// error code. Commits become visible (or fail) and held SyncGroups are answered.
    pub fn appended(&mut self, id: AppendId, result: Result<(), i16>, now_ms: i64) -> Effects {
        let mut out = Outbox::default();
        let Some((group_id, waiter)) = self.waiting.remove(&id) else {
            return self.seal(out);
        };
        let group = self.groups.get_mut(&group_id);
        match waiter {
            Waiter::Commit {
                request,
                partitions,
                offsets,
            } => {
                let code = match result {
                    Ok(()) => error::NONE,
                    Err(e) => error::commit_append_error(e),
                };
                if let Some(group) = group {
                    group.commit_appended(offsets, id.0, result.is_ok());
                }
                let partitions = partitions
                    .into_iter()
                    .map(|(topic, partition, refused)| (topic, partition, refused.unwrap_or(code)))
                    .collect();
                out.reply(request, Reply::Commit(CommitResponse { partitions }));
            }
            Waiter::Assignment {
                generation,
                assignments,
            } => {
                if let Some(group) = group {
                    group.assignment_appended(
                        generation,
                        assignments,
                        result,
                        &self.config,
                        now_ms,
                        &mut out,
                    );
                }
            }
        }
        self.finish(&group_id, now_ms);
        self.seal(out)
    }

    /// How many groups this coordinator holds (any state).
    pub fn groups_count(&self) -> usize {
        self.groups.len()
    }

    /// A group's state, generation, leader and members (`None`: no such group).
    pub fn group_summary(&self, group_id: &str) -> Option<GroupSummary> {
        self.groups.get(group_id).map(Group::summary)
    }

    /// After an operation on a group: drops it if it never persisted anything and has
    /// nothing left, and reschedules it.
    fn finish(&mut self, group_id: &str, now: i64) {
        let Some(group) = self.groups.get_mut(group_id) else {
            self.schedule.clear(&group_id.to_owned());
            return;
        };
        if group.is_vacant() && group.generation() == 0 {
            self.groups.remove(group_id);
            self.schedule.clear(&group_id.to_owned());
            return;
        }
        group.refresh_expiry(&self.config, now);
        match group.next_deadline() {
            Some(at) => self.schedule.set(group_id.to_owned(), at),
            None => self.schedule.clear(&group_id.to_owned()),
        }
    }

    /// Numbers the appends and remembers what waits for them.
    fn seal(&mut self, out: Outbox) -> Effects {
        let appends = out
            .appends
            .into_iter()
            .map(|pending| {
                self.last_append += 1;
                let id = AppendId(self.last_append);
                if let Some(waiter) = pending.waiter {
                    self.waiting.insert(id, (pending.group_id, waiter));
                }
                Append {
                    id,
                    records: pending.records,
                }
            })
            .collect();
        Effects {
            replies: out.replies,
            appends,
        }
    }
}
