//! One group: Kafka's `GroupMetadata` and the transitions `GroupCoordinator` makes on
//! it. `membership` holds the requests of the group protocol, `offsets` the commits
//! and their retention; this file the rebalance itself.

mod membership;
mod offsets;

pub(crate) use offsets::refused;

use std::cmp::Reverse;
use std::collections::{BTreeMap, BTreeSet};

use bytes::Bytes;

use crate::api::{
    DescribedGroup, DescribedMember, GroupState, GroupSummary, JoinMember, JoinResponse,
    ListedGroup, Protocol, Reply, RequestId, SyncResponse,
};
use crate::config::GroupConfig;
use crate::error;
use crate::record::{GroupValue, MemberValue, OffsetValue, Record};
use crate::timers::Timers;

/// Kafka's `NewMemberJoinTimeoutMs`: a member joining for the first time is dropped
/// if its join is still held this long after it arrived. Its client cannot heartbeat
/// yet, and a disconnect goes unseen while the join is held, so without this a client
/// that gave up and retried would leave a defunct member blocking every rebalance.
const NEW_MEMBER_JOIN_TIMEOUT_MS: i64 = 300_000;

/// Kafka's default `offsets.retention.check.interval.ms`: Kafka removes an Empty group
/// without offsets at its next periodic check, so it stays describable (with its
/// generation) for up to this long.
const EMPTY_GROUP_LINGER_MS: i64 = 600_000;

/// What an operation produced, before the coordinator numbers the appends.
#[derive(Debug, Default)]
pub(crate) struct Outbox {
    pub(crate) replies: Vec<(RequestId, Reply)>,
    pub(crate) appends: Vec<PendingAppend>,
}

impl Outbox {
    pub(crate) fn reply(&mut self, id: RequestId, reply: Reply) {
        self.replies.push((id, reply));
    }

    fn persist(&mut self, group_id: &str, records: Vec<Record>, waiter: Option<Waiter>) {
        self.appends.push(PendingAppend {
            group_id: group_id.to_owned(),
            records,
            waiter,
        });
    }
}

#[derive(Debug)]
pub(crate) struct PendingAppend {
    pub(crate) group_id: String,
    pub(crate) records: Vec<Record>,
    /// What waits for the append; `None` when nothing does (Kafka ignores the outcome
    /// of those writes too: the state they record is already in force).
    pub(crate) waiter: Option<Waiter>,
}

/// What happens once an append is acknowledged.
#[derive(Debug)]
pub(crate) enum Waiter {
    /// The leader's assignment for `generation`: Stable once durable.
    Assignment {
        generation: i32,
        assignments: BTreeMap<String, Bytes>,
    },
    /// An offset commit: visible once durable. Partitions in request order, with the
    /// error already decided for those not appended.
    Commit {
        request: RequestId,
        partitions: Vec<(String, i32, Option<i16>)>,
        offsets: Vec<(String, i32, OffsetValue)>,
    },
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum State {
    Empty,
    /// `initial`: an Empty group's first rebalance, held back for more members.
    PreparingRebalance {
        initial: Option<InitialDelay>,
    },
    CompletingRebalance,
    Stable,
}

/// Kafka's `InitialDelayedJoin`: the join completes when the delay runs out with no
/// member added during it, or at `limit`; never early, even if everyone has joined.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct InitialDelay {
    limit: i64,
    new_member_added: bool,
}

#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Hash)]
enum Timer {
    /// A member's session.
    Session(String),
    /// A member id handed out with `MEMBER_ID_REQUIRED`.
    Pending(String),
    /// The join phase: rebalance timeout, or the initial delay.
    Join,
    /// Members that joined but never synced (Kafka's `DelayedSync`).
    Sync,
    /// Offset retention, or the removal of an Empty group without offsets.
    Expire,
}

#[derive(Debug)]
struct Member {
    id: String,
    group_instance_id: Option<String>,
    client_id: String,
    client_host: String,
    rebalance_timeout_ms: i32,
    session_timeout_ms: i32,
    /// In the member's order of preference.
    protocols: Vec<Protocol>,
    assignment: Bytes,
    /// Join order: the leader's successor is the earliest remaining member.
    seq: u64,
    awaiting_join: Option<RequestId>,
    awaiting_sync: Option<RequestId>,
    /// Joined for the first time and not answered yet.
    is_new: bool,
}

impl Member {
    fn metadata_for(&self, protocol: Option<&str>) -> Bytes {
        self.protocols
            .iter()
            .find(|p| Some(p.name.as_str()) == protocol)
            .map(|p| p.metadata.clone())
            .unwrap_or_default()
    }
}

#[derive(Debug)]
struct Committed {
    value: OffsetValue,
    /// The append that wrote it (0: loaded): acknowledgements may come out of order,
    /// and the later append is the one a replay of the log ends with.
    written_by: u64,
}

#[derive(Debug)]
pub(crate) struct Group {
    id: String,
    state: State,
    /// When the group entered its state; `None` for a group loaded without metadata.
    state_timestamp_ms: Option<i64>,
    generation: i32,
    protocol_type: Option<String>,
    protocol_name: Option<String>,
    /// A member whenever there are members.
    leader: Option<String>,
    members: BTreeMap<String, Member>,
    next_seq: u64,
    /// Per protocol name, how many members support it.
    support: BTreeMap<String, usize>,
    pending_members: BTreeSet<String>,
    /// Members that have not synced since the join completed.
    pending_sync: BTreeSet<String>,
    offsets: BTreeMap<(String, i32), Committed>,
    /// Partitions with commits in flight, and how many: they neither expire nor let
    /// the group be removed.
    pending_commits: BTreeMap<(String, i32), usize>,
    timers: Timers<Timer>,
}

impl Group {
    pub(crate) fn new(id: String, now: i64) -> Group {
        Group {
            id,
            state: State::Empty,
            state_timestamp_ms: Some(now),
            generation: 0,
            protocol_type: None,
            protocol_name: None,
            leader: None,
            members: BTreeMap::new(),
            next_seq: 0,
            support: BTreeMap::new(),
            pending_members: BTreeSet::new(),
            pending_sync: BTreeSet::new(),
            offsets: BTreeMap::new(),
            pending_commits: BTreeMap::new(),
            timers: Timers::default(),
        }
    }

    /// A group as its last metadata record and its offsets describe it. Members come
    /// back with fresh sessions, so those that never reach this coordinator expire.
    pub(crate) fn loaded(
        id: String,
        metadata: Option<GroupValue>,
        offsets: Vec<((String, i32), OffsetValue)>,
        cfg: &GroupConfig,
        now: i64,
    ) -> Group {
        let mut g = Group::new(id, now);
        g.state_timestamp_ms = None;
        if let Some(v) = metadata {
            g.generation = v.generation_id;
            g.protocol_type = Some(v.protocol_type).filter(|t| !t.is_empty());
            g.protocol_name = v.protocol_name;
            g.state_timestamp_ms = Some(v.state_timestamp_ms).filter(|t| *t >= 0);
            for m in v.members {
                if g.members.contains_key(&m.member_id) {
                    continue;
                }
                let member = Member {
                    id: m.member_id.clone(),
                    group_instance_id: m.group_instance_id,
                    client_id: m.client_id,
                    client_host: m.client_host,
                    rebalance_timeout_ms: m.rebalance_timeout_ms,
                    session_timeout_ms: m.session_timeout_ms,
                    // Only the chosen protocol is persisted, so a member rejoining
                    // with its full list rebalances the group (as in Kafka).
                    protocols: vec![Protocol {
                        name: g.protocol_name.clone().unwrap_or_default(),
                        metadata: m.subscription,
                    }],
                    assignment: m.assignment,
                    seq: g.next_seq,
                    awaiting_join: None,
                    awaiting_sync: None,
                    is_new: false,
                };
                g.next_seq += 1;
                tally(&mut g.support, &member.protocols, true);
                g.members.insert(m.member_id.clone(), member);
                g.schedule_session(&m.member_id, now);
            }
            g.leader = v
                .leader
                .filter(|l| g.members.contains_key(l))
                .or_else(|| g.first_member());
            if !g.members.is_empty() {
                g.state = State::Stable;
            }
            if g.members.len() > cfg.max_group_size {
                // Kafka rebalances a group loaded over capacity: members beyond the
                // limit are refused when they rejoin, the others removed at the
                // rebalance timeout.
                g.transition(State::PreparingRebalance { initial: None }, now);
                g.timers
                    .set(Timer::Join, now.saturating_add(g.rebalance_timeout_ms()));
            }
        }
        g.offsets = offsets
            .into_iter()
            .map(|(key, value)| {
                let committed = Committed {
                    value,
                    written_by: 0,
                };
                (key, committed)
            })
            .collect();
        g
    }

    pub(crate) fn state(&self) -> GroupState {
        match self.state {
            State::Empty => GroupState::Empty,
            State::PreparingRebalance { .. } => GroupState::PreparingRebalance,
            State::CompletingRebalance => GroupState::CompletingRebalance,
            State::Stable => GroupState::Stable,
        }
    }

    pub(crate) fn generation(&self) -> i32 {
        self.generation
    }

    pub(crate) fn next_deadline(&self) -> Option<i64> {
        self.timers.next()
    }

    /// Nothing left worth keeping: no members (joined or pending), no offsets.
    pub(crate) fn is_vacant(&self) -> bool {
        self.state == State::Empty
            && self.members.is_empty()
            && self.pending_members.is_empty()
            && self.offsets.is_empty()
            && self.pending_commits.is_empty()
    }

    pub(crate) fn summary(&self) -> GroupSummary {
        GroupSummary {
            state: self.state(),
            generation_id: self.generation,
            protocol_type: self.protocol_type.clone(),
            protocol_name: self.protocol_name.clone(),
            leader: self.leader.clone(),
            members: self.member_order().iter().map(|m| m.id.clone()).collect(),
            pending_members: self.pending_members.iter().cloned().collect(),
        }
    }

    pub(crate) fn listed(&self) -> ListedGroup {
        ListedGroup {
            group_id: self.id.clone(),
            protocol_type: self.protocol_type.clone().unwrap_or_default(),
            state: self.state(),
        }
    }

    /// As Kafka's `GroupMetadata.summary`: protocol, metadata and assignments only
    /// once Stable, when they are settled.
    pub(crate) fn describe(&self) -> DescribedGroup {
        let stable = self.state == State::Stable;
        let protocol = self.protocol_name.as_deref();
        DescribedGroup {
            error: error::NONE,
            group_id: self.id.clone(),
            state: self.state(),
            protocol_type: self.protocol_type.clone().unwrap_or_default(),
            protocol_name: if stable {
                protocol.unwrap_or_default().to_owned()
            } else {
                String::new()
            },
            members: self
                .member_order()
                .into_iter()
                .map(|m| DescribedMember {
                    member_id: m.id.clone(),
                    group_instance_id: m.group_instance_id.clone(),
                    client_id: m.client_id.clone(),
                    client_host: m.client_host.clone(),
                    metadata: if stable {
                        m.metadata_for(protocol)
                    } else {
                        Bytes::new()
                    },
                    assignment: if stable {
                        m.assignment.clone()
                    } else {
                        Bytes::new()
                    },
                })
                .collect(),
        }
    }

    /// Fires every timer due at `now`. True if the group is gone (its tombstones are
    /// in `out`).
    pub(crate) fn fire_due(&mut self, cfg: &GroupConfig, now: i64, out: &mut Outbox) -> bool {
        while let Some(timer) = self.timers.pop_due(now) {
            match timer {
                Timer::Session(member_id) => self.session_expired(&member_id, cfg, now, out),
                Timer::Pending(member_id) => {
                    self.pending_members.remove(&member_id);
                    self.try_complete_join(now, out);
                }
                Timer::Join => self.join_phase_over(cfg, now, out),
                Timer::Sync => self.sync_phase_over(cfg, now, out),
                Timer::Expire => {
                    if self.expire(cfg, now, out) {
                        return true;
                    }
                }
            }
        }
        false
    }

    fn session_expired(&mut self, member_id: &str, cfg: &GroupConfig, now: i64, out: &mut Outbox) {
        let Some(m) = self.members.get(member_id) else {
            return;
        };
        if !m.is_new && (m.awaiting_join.is_some() || m.awaiting_sync.is_some()) {
            // Kafka keeps a member waiting on the rebalance alive: it cannot
            // heartbeat while its request is held. Look again a session later.
            let again = now.saturating_add(i64::from(m.session_timeout_ms.max(1)));
            self.timers.set(Timer::Session(member_id.to_owned()), again);
        } else {
            self.remove_member(member_id, cfg, now, out);
        }
    }

    fn join_phase_over(&mut self, cfg: &GroupConfig, now: i64, out: &mut Outbox) {
        if let State::PreparingRebalance { initial: Some(d) } = &mut self.state {
            if d.new_member_added && now < d.limit {
                d.new_member_added = false;
                let delay = i64::from(cfg.initial_rebalance_delay_ms.max(0));
                let next = now.saturating_add(delay).min(d.limit);
                self.timers.set(Timer::Join, next);
                return;
            }
        }
        if matches!(self.state, State::PreparingRebalance { .. }) {
            self.complete_join(now, out);
        }
    }

    /// Kafka's `onExpirePendingSync`: members that joined but did not sync within the
    /// rebalance timeout are removed, and the others rebalance without them.
    fn sync_phase_over(&mut self, cfg: &GroupConfig, now: i64, out: &mut Outbox) {
        if matches!(self.state, State::CompletingRebalance | State::Stable)
            && !self.pending_sync.is_empty()
        {
            for member_id in std::mem::take(&mut self.pending_sync) {
                self.detach(&member_id, out);
            }
            self.prepare_rebalance(cfg, now, out);
        }
    }

    fn transition(&mut self, state: State, now: i64) {
        self.state = state;
        self.state_timestamp_ms = Some(now);
    }

    fn maybe_prepare_rebalance(&mut self, cfg: &GroupConfig, now: i64, out: &mut Outbox) {
        if matches!(
            self.state,
            State::Empty | State::Stable | State::CompletingRebalance
        ) {
            self.prepare_rebalance(cfg, now, out);
        }
    }

    fn prepare_rebalance(&mut self, cfg: &GroupConfig, now: i64, out: &mut Outbox) {
        if self.state == State::CompletingRebalance {
            self.reset_assignments(error::REBALANCE_IN_PROGRESS, now, out);
        }
        self.pending_sync.clear();
        self.timers.clear(&Timer::Sync);
        let from_empty = self.state == State::Empty;
        let delay = i64::from(cfg.initial_rebalance_delay_ms.max(0));
        let rebalance_timeout = self.rebalance_timeout_ms();
        if from_empty && delay > 0 {
            let initial = InitialDelay {
                limit: now.saturating_add(rebalance_timeout.max(delay)),
                new_member_added: false,
            };
            self.transition(
                State::PreparingRebalance {
                    initial: Some(initial),
                },
                now,
            );
            self.timers.set(Timer::Join, now.saturating_add(delay));
        } else {
            self.transition(State::PreparingRebalance { initial: None }, now);
            self.timers
                .set(Timer::Join, now.saturating_add(rebalance_timeout));
            if from_empty {
                // An initial delay of 0 expires at once, whoever is still pending.
                self.complete_join(now, out);
            } else {
                self.try_complete_join(now, out);
            }
        }
    }

    /// Kafka's `DelayedJoin.tryComplete`: done when every member has rejoined and no
    /// handed-out member id is still to join.
    fn try_complete_join(&mut self, now: i64, out: &mut Outbox) {
        if self.state == (State::PreparingRebalance { initial: None })
            && self.pending_members.is_empty()
            && self.members.values().all(|m| m.awaiting_join.is_some())
        {
            self.complete_join(now, out);
        }
    }

    /// Kafka's `onCompleteJoin`: members that did not rejoin are removed, and the
    /// others get the new generation (or the group is Empty, with a new generation
    /// persisted).
    fn complete_join(&mut self, now: i64, out: &mut Outbox) {
        self.timers.clear(&Timer::Join);
        let absent: Vec<String> = self
            .members
            .values()
            .filter(|m| m.awaiting_join.is_none())
            .map(|m| m.id.clone())
            .collect();
        for member_id in &absent {
            self.detach(member_id, out);
        }
        // Generations only grow; one that overflows starts again rather than turning
        // into the "no generation" of negative ids.
        self.generation = self.generation.checked_add(1).unwrap_or(1);
        if self.members.is_empty() {
            self.protocol_name = None;
            self.leader = None;
            self.transition(State::Empty, now);
            let record = self.record(None);
            out.persist(&self.id, vec![record], None);
            return;
        }
        self.protocol_name = self.select_protocol();
        self.transition(State::CompletingRebalance, now);
        let roster = self.roster();
        let order: Vec<String> = self.member_order().iter().map(|m| m.id.clone()).collect();
        for member_id in order {
            let is_leader = self.leader.as_deref() == Some(member_id.as_str());
            let members = if is_leader {
                roster.clone()
            } else {
                Vec::new()
            };
            let response = self.join_response(&member_id, members);
            if let Some(m) = self.members.get_mut(&member_id) {
                m.is_new = false;
                if let Some(request) = m.awaiting_join.take() {
                    out.reply(request, Reply::Join(response));
                }
            }
            self.schedule_session(&member_id, now);
            self.pending_sync.insert(member_id);
        }
        self.timers
            .set(Timer::Sync, now.saturating_add(self.rebalance_timeout_ms()));
    }

    /// Kafka's vote: each member votes for the first protocol of its own list that
    /// every member supports; most votes wins, a tie goes to the leader's preference.
    fn select_protocol(&self) -> Option<String> {
        let everyone = self.members.len();
        let candidates: BTreeSet<&str> = self
            .support
            .iter()
            .filter(|(_, n)| **n == everyone)
            .map(|(name, _)| name.as_str())
            .collect();
        let mut votes: BTreeMap<&str, usize> = BTreeMap::new();
        for m in self.members.values() {
            if let Some(p) = m
                .protocols
                .iter()
                .find(|p| candidates.contains(p.name.as_str()))
            {
                *votes.entry(p.name.as_str()).or_default() += 1;
            }
        }
        let leader = self.leader.as_ref().and_then(|l| self.members.get(l));
        let leader_rank = |name: &str| {
            leader
                .and_then(|m| m.protocols.iter().position(|p| p.name == name))
                .unwrap_or(usize::MAX)
        };
        votes
            .into_iter()
            .max_by_key(|(name, n)| (*n, Reverse(leader_rank(name))))
            .map(|(name, _)| name.to_owned())
    }

    /// Every member with its metadata for the chosen protocol: the leader's input.
    fn roster(&self) -> Vec<JoinMember> {
        let protocol = self.protocol_name.as_deref();
        self.member_order()
            .into_iter()
            .map(|m| JoinMember {
                member_id: m.id.clone(),
                group_instance_id: m.group_instance_id.clone(),
                metadata: m.metadata_for(protocol),
            })
            .collect()
    }

    fn join_response(&self, member_id: &str, members: Vec<JoinMember>) -> JoinResponse {
        JoinResponse {
            error: error::NONE,
            generation_id: self.generation,
            protocol_type: self.protocol_type.clone(),
            protocol_name: self.protocol_name.clone(),
            leader: self.leader.clone().unwrap_or_default(),
            member_id: member_id.to_owned(),
            members,
        }
    }

    fn member_order(&self) -> Vec<&Member> {
        let mut members: Vec<&Member> = self.members.values().collect();
        members.sort_by_key(|m| m.seq);
        members
    }

    fn first_member(&self) -> Option<String> {
        self.members
            .values()
            .min_by_key(|m| m.seq)
            .map(|m| m.id.clone())
    }

    /// The longest rebalance timeout among the members: how long a rebalance waits.
    fn rebalance_timeout_ms(&self) -> i64 {
        self.members
            .values()
            .map(|m| i64::from(m.rebalance_timeout_ms.max(0)))
            .max()
            .unwrap_or(0)
    }

    fn schedule_session(&mut self, member_id: &str, now: i64) {
        if let Some(m) = self.members.get(member_id) {
            let at = now.saturating_add(i64::from(m.session_timeout_ms.max(0)));
            self.timers.set(Timer::Session(member_id.to_owned()), at);
        }
    }

    /// Removes a member without moving the group to another state. Its held requests
    /// are answered `UNKNOWN_MEMBER_ID`, as Kafka answers a member it drops, so that
    /// a client still there joins afresh.
    fn detach(&mut self, member_id: &str, out: &mut Outbox) {
        let Some(m) = self.members.remove(member_id) else {
            return;
        };
        if let Some(request) = m.awaiting_join {
            let response = JoinResponse::error(String::new(), error::UNKNOWN_MEMBER_ID);
            out.reply(request, Reply::Join(response));
        }
        if let Some(request) = m.awaiting_sync {
            let response = SyncResponse::error(error::UNKNOWN_MEMBER_ID);
            out.reply(request, Reply::Sync(response));
        }
        tally(&mut self.support, &m.protocols, false);
        self.timers.clear(&Timer::Session(m.id));
        self.pending_sync.remove(member_id);
        if self.pending_sync.is_empty() {
            self.timers.clear(&Timer::Sync);
        }
        if self.leader.as_deref() == Some(member_id) {
            self.leader = self.first_member();
        }
    }

    /// Removes a member, and rebalances the others (or completes the rebalance that
    /// waited for it).
    fn remove_member(&mut self, member_id: &str, cfg: &GroupConfig, now: i64, out: &mut Outbox) {
        self.detach(member_id, out);
        match self.state {
            State::Stable | State::CompletingRebalance => self.prepare_rebalance(cfg, now, out),
            State::PreparingRebalance { .. } => self.try_complete_join(now, out),
            State::Empty => {}
        }
    }

    /// Kafka's `resetAndPropagateAssignmentError`: assignments are dropped and every
    /// held SyncGroup answered with `error`.
    fn reset_assignments(&mut self, error: i16, now: i64, out: &mut Outbox) {
        for m in self.members.values_mut() {
            m.assignment = Bytes::new();
            if let Some(request) = m.awaiting_sync.take() {
                out.reply(request, Reply::Sync(SyncResponse::error(error)));
                // Its session stood still while it waited.
                let at = now.saturating_add(i64::from(m.session_timeout_ms.max(0)));
                self.timers.set(Timer::Session(m.id.clone()), at);
            }
        }
    }

    /// Every held SyncGroup gets its member's assignment.
    fn propagate_assignments(&mut self, now: i64, out: &mut Outbox) {
        for m in self.members.values_mut() {
            if let Some(request) = m.awaiting_sync.take() {
                let response = SyncResponse {
                    error: error::NONE,
                    protocol_type: self.protocol_type.clone(),
                    protocol_name: self.protocol_name.clone(),
                    assignment: m.assignment.clone(),
                };
                out.reply(request, Reply::Sync(response));
                let at = now.saturating_add(i64::from(m.session_timeout_ms.max(0)));
                self.timers.set(Timer::Session(m.id.clone()), at);
            }
        }
    }

    /// The group's metadata record, with `assignments` instead of the members' own.
    fn record(&self, assignments: Option<&BTreeMap<String, Bytes>>) -> Record {
        let protocol = self.protocol_name.as_deref();
        let members = self
            .member_order()
            .into_iter()
            .map(|m| MemberValue {
                member_id: m.id.clone(),
                group_instance_id: m.group_instance_id.clone(),
                client_id: m.client_id.clone(),
                client_host: m.client_host.clone(),
                rebalance_timeout_ms: m.rebalance_timeout_ms,
                session_timeout_ms: m.session_timeout_ms,
                subscription: m.metadata_for(protocol),
                assignment: match assignments {
                    Some(a) => a.get(&m.id).cloned().unwrap_or_default(),
                    None => m.assignment.clone(),
                },
            })
            .collect();
        Record::Group {
            group_id: self.id.clone(),
            value: Some(GroupValue {
                protocol_type: self.protocol_type.clone().unwrap_or_default(),
                generation_id: self.generation,
                protocol_name: self.protocol_name.clone(),
                leader: self.leader.clone(),
                state_timestamp_ms: self.state_timestamp_ms.unwrap_or(-1),
                members,
            }),
        }
    }
}

/// Counts (`add`) or uncounts a member's protocols, each name once however often the
/// member lists it.
fn tally(support: &mut BTreeMap<String, usize>, protocols: &[Protocol], add: bool) {
    let names: BTreeSet<&str> = protocols.iter().map(|p| p.name.as_str()).collect();
    for name in names {
        if add {
            *support.entry(name.to_owned()).or_default() += 1;
        } else if let Some(n) = support.get_mut(name) {
            *n = n.saturating_sub(1);
            if *n == 0 {
                support.remove(name);
            }
        }
    }
}
