//! The group protocol's requests: JoinGroup, SyncGroup, Heartbeat, LeaveGroup, and the
//! outcome of the leader's assignment append.

use std::collections::{BTreeMap, BTreeSet};

use bytes::Bytes;
use rand::rngs::StdRng;
use rand::Rng;

use super::{tally, Group, Member, Outbox, State, Timer, Waiter, NEW_MEMBER_JOIN_TIMEOUT_MS};
use crate::api::{
    HeartbeatRequest, JoinRequest, JoinResponse, Protocol, Reply, RequestId, SyncRequest,
    SyncResponse,
};
use crate::config::GroupConfig;
use crate::error;

impl Group {
    /// JoinGroup, once the coordinator has checked the group id and session timeout
    /// and found (or created) the group.
    pub(crate) fn join(
        &mut self,
        cfg: &GroupConfig,
        rng: &mut StdRng,
        id: RequestId,
        req: JoinRequest,
        now: i64,
        out: &mut Outbox,
    ) {
        if !self.accepts(&req.member_id, cfg.max_group_size) {
            // A known member refused here is dropped, so that a group loaded over
            // capacity shrinks as it rebalances (Kafka does the same).
            self.detach(&req.member_id, out);
            let response = JoinResponse::error(String::new(), error::GROUP_MAX_SIZE_REACHED);
            out.reply(id, Reply::Join(response));
        } else if req.member_id.is_empty() {
            self.join_new(cfg, rng, id, req, now, out);
        } else {
            self.join_known(cfg, id, req, now, out);
        }
        self.try_complete_join(now, out);
    }

    /// Kafka's `acceptJoiningMember`: while rebalancing, room is counted among the
    /// members that rejoined; otherwise among all.
    fn accepts(&self, member_id: &str, max_group_size: usize) -> bool {
        match self.state {
            State::Empty => true,
            State::PreparingRebalance { .. } => {
                let rejoined = self.members.get(member_id);
                rejoined.is_some_and(|m| m.awaiting_join.is_some())
                    || self
                        .members
                        .values()
                        .filter(|m| m.awaiting_join.is_some())
                        .count()
                        < max_group_size
            }
            State::CompletingRebalance | State::Stable => {
                self.members.contains_key(member_id) || self.members.len() < max_group_size
            }
        }
    }

    fn join_new(
        &mut self,
        cfg: &GroupConfig,
        rng: &mut StdRng,
        id: RequestId,
        req: JoinRequest,
        now: i64,
        out: &mut Outbox,
    ) {
        if !self.supports(None, &req.protocol_type, &req.protocols) {
            let response = JoinResponse::error(String::new(), error::INCONSISTENT_GROUP_PROTOCOL);
            out.reply(id, Reply::Join(response));
            return;
        }
        let member_id = loop {
            let candidate = new_member_id(rng, &req.client_id);
            if !self.members.contains_key(&candidate) && !self.pending_members.contains(&candidate)
            {
                break candidate;
            }
        };
        if req.require_known_member_id {
            let at = now.saturating_add(i64::from(req.session_timeout_ms.max(0)));
            self.timers.set(Timer::Pending(member_id.clone()), at);
            self.pending_members.insert(member_id.clone());
            let response = JoinResponse::error(member_id, error::MEMBER_ID_REQUIRED);
            out.reply(id, Reply::Join(response));
        } else {
            self.add_member(cfg, member_id, id, req, now, out);
        }
    }

    fn join_known(
        &mut self,
        cfg: &GroupConfig,
        id: RequestId,
        req: JoinRequest,
        now: i64,
        out: &mut Outbox,
    ) {
        let member_id = req.member_id.clone();
        let refuse = |out: &mut Outbox, code: i16| {
            let response = JoinResponse::error(req.member_id.clone(), code);
            out.reply(id, Reply::Join(response));
        };
        if !self.supports(Some(&member_id), &req.protocol_type, &req.protocols) {
            refuse(out, error::INCONSISTENT_GROUP_PROTOCOL);
            return;
        }
        if self.pending_members.contains(&member_id) {
            self.add_member(cfg, member_id, id, req, now, out);
            return;
        }
        let Some(member) = self.members.get(&member_id) else {
            refuse(out, error::UNKNOWN_MEMBER_ID);
            return;
        };
        let unchanged = member.protocols == req.protocols;
        let is_leader = self.leader.as_deref() == Some(member_id.as_str());
        match self.state {
            State::PreparingRebalance { .. } => self.update_member(cfg, id, req, now, out),
            // It missed its JoinGroup response: the same again.
            State::CompletingRebalance if unchanged => {
                self.answer_current(id, &member_id, is_leader, now, out);
            }
            // A leader's rejoin is how it asks for a rebalance (e.g. the topics it
            // subscribes to changed partitions), so only followers are answered.
            State::Stable if unchanged && !is_leader => {
                self.answer_current(id, &member_id, false, now, out);
            }
            State::CompletingRebalance | State::Stable => {
                self.update_member(cfg, id, req, now, out);
            }
            // Members exist only outside Empty; answered as Kafka would anyway.
            State::Empty => refuse(out, error::UNKNOWN_MEMBER_ID),
        }
    }

    /// Kafka's `supportsProtocols`, with the joining member's own current protocols
    /// left out of the count: a member may switch to a protocol everyone else
    /// supports even if its old list lacked it.
    fn supports(
        &self,
        member_id: Option<&str>,
        protocol_type: &str,
        protocols: &[Protocol],
    ) -> bool {
        if protocol_type.is_empty() || protocols.is_empty() {
            return false;
        }
        let own = member_id.and_then(|id| self.members.get(id));
        let others = self.members.len() - usize::from(own.is_some());
        if others == 0 {
            return true;
        }
        let own_names: BTreeSet<&str> = own
            .map(|m| m.protocols.iter().map(|p| p.name.as_str()).collect())
            .unwrap_or_default();
        self.protocol_type.as_deref() == Some(protocol_type)
            && protocols.iter().any(|p| {
                let all = self.support.get(&p.name).copied().unwrap_or(0);
                all.saturating_sub(usize::from(own_names.contains(p.name.as_str()))) == others
            })
    }

    fn answer_current(
        &mut self,
        id: RequestId,
        member_id: &str,
        with_roster: bool,
        now: i64,
        out: &mut Outbox,
    ) {
        let members = if with_roster {
            self.roster()
        } else {
            Vec::new()
        };
        let response = self.join_response(member_id, members);
        out.reply(id, Reply::Join(response));
        self.schedule_session(member_id, now);
    }

    fn add_member(
        &mut self,
        cfg: &GroupConfig,
        member_id: String,
        id: RequestId,
        req: JoinRequest,
        now: i64,
        out: &mut Outbox,
    ) {
        if self.members.is_empty() {
            self.protocol_type = Some(req.protocol_type.clone());
        }
        if let State::PreparingRebalance { initial: Some(d) } = &mut self.state {
            d.new_member_added = true;
        }
        self.pending_members.remove(&member_id);
        self.timers.clear(&Timer::Pending(member_id.clone()));
        let member = Member {
            id: member_id.clone(),
            group_instance_id: req.group_instance_id,
            client_id: req.client_id,
            client_host: req.client_host,
            rebalance_timeout_ms: req.rebalance_timeout_ms,
            session_timeout_ms: req.session_timeout_ms,
            protocols: req.protocols,
            assignment: Bytes::new(),
            seq: self.next_seq,
            awaiting_join: Some(id),
            awaiting_sync: None,
            is_new: true,
        };
        self.next_seq += 1;
        tally(&mut self.support, &member.protocols, true);
        self.members.insert(member_id.clone(), member);
        if self.leader.is_none() {
            self.leader = Some(member_id.clone());
        }
        let at = now.saturating_add(NEW_MEMBER_JOIN_TIMEOUT_MS);
        self.timers.set(Timer::Session(member_id), at);
        self.maybe_prepare_rebalance(cfg, now, out);
    }

    /// A known member (re)joins with possibly new protocols and timeouts: it now
    /// waits for the rebalance this starts or joins.
    fn update_member(
        &mut self,
        cfg: &GroupConfig,
        id: RequestId,
        req: JoinRequest,
        now: i64,
        out: &mut Outbox,
    ) {
        let Some(mut member) = self.members.remove(&req.member_id) else {
            return;
        };
        tally(&mut self.support, &member.protocols, false);
        member.protocols = req.protocols;
        member.rebalance_timeout_ms = req.rebalance_timeout_ms;
        member.session_timeout_ms = req.session_timeout_ms;
        tally(&mut self.support, &member.protocols, true);
        let superseded = member.awaiting_join.replace(id);
        let is_new = member.is_new;
        self.members.insert(req.member_id.clone(), member);
        if let Some(old) = superseded {
            // The client gave up on that one and retried; it must not stay unanswered.
            let response = JoinResponse::error(req.member_id.clone(), error::REBALANCE_IN_PROGRESS);
            out.reply(old, Reply::Join(response));
        }
        if self.members.len() == 1 {
            self.protocol_type = Some(req.protocol_type);
        }
        // A new member keeps the deadline of its first join.
        if !is_new {
            self.schedule_session(&req.member_id, now);
        }
        self.maybe_prepare_rebalance(cfg, now, out);
    }

    /// SyncGroup, for a group that exists.
    pub(crate) fn sync(&mut self, id: RequestId, req: SyncRequest, now: i64, out: &mut Outbox) {
        let refuse = |out: &mut Outbox, code: i16| {
            out.reply(id, Reply::Sync(SyncResponse::error(code)));
        };
        let mismatch = |given: &Option<String>, ours: &Option<String>| {
            given.as_ref().is_some_and(|g| Some(g) != ours.as_ref())
        };
        if !self.members.contains_key(&req.member_id) {
            return refuse(out, error::UNKNOWN_MEMBER_ID);
        }
        if req.generation_id != self.generation {
            return refuse(out, error::ILLEGAL_GENERATION);
        }
        if mismatch(&req.protocol_type, &self.protocol_type)
            || mismatch(&req.protocol_name, &self.protocol_name)
        {
            return refuse(out, error::INCONSISTENT_GROUP_PROTOCOL);
        }
        match self.state {
            // Members exist only outside Empty; answered as Kafka would anyway.
            State::Empty => refuse(out, error::UNKNOWN_MEMBER_ID),
            State::PreparingRebalance { .. } => refuse(out, error::REBALANCE_IN_PROGRESS),
            State::CompletingRebalance => self.hold_sync(id, req, now, out),
            State::Stable => {
                self.synced(&req.member_id);
                let assignment = self
                    .members
                    .get(&req.member_id)
                    .map(|m| m.assignment.clone())
                    .unwrap_or_default();
                let response = SyncResponse {
                    error: error::NONE,
                    protocol_type: self.protocol_type.clone(),
                    protocol_name: self.protocol_name.clone(),
                    assignment,
                };
                out.reply(id, Reply::Sync(response));
                self.schedule_session(&req.member_id, now);
            }
        }
    }

    /// Held until the leader's assignment is durable; the leader's own sync persists
    /// it (members it left out get an empty assignment).
    fn hold_sync(&mut self, id: RequestId, req: SyncRequest, now: i64, out: &mut Outbox) {
        self.synced(&req.member_id);
        if let Some(m) = self.members.get_mut(&req.member_id) {
            if let Some(old) = m.awaiting_sync.replace(id) {
                let response = SyncResponse::error(error::REBALANCE_IN_PROGRESS);
                out.reply(old, Reply::Sync(response));
            }
        }
        self.schedule_session(&req.member_id, now);
        if self.leader.as_deref() != Some(req.member_id.as_str()) {
            return;
        }
        let mut assignments: BTreeMap<String, Bytes> = self
            .members
            .keys()
            .map(|member_id| (member_id.clone(), Bytes::new()))
            .collect();
        for (member_id, assignment) in req.assignments {
            if let Some(slot) = assignments.get_mut(&member_id) {
                *slot = assignment;
            }
        }
        let record = self.record(Some(&assignments));
        let waiter = Waiter::Assignment {
            generation: self.generation,
            assignments,
        };
        out.persist(&self.id, vec![record], Some(waiter));
    }

    /// The member has synced in this generation.
    fn synced(&mut self, member_id: &str) {
        self.pending_sync.remove(member_id);
        if self.pending_sync.is_empty() {
            self.timers.clear(&Timer::Sync);
        }
    }

    /// The leader's assignment append finished. Only the generation it was for, still
    /// completing, is affected: a rebalance since has made it moot.
    pub(crate) fn assignment_appended(
        &mut self,
        generation: i32,
        assignments: BTreeMap<String, Bytes>,
        result: Result<(), i16>,
        cfg: &GroupConfig,
        now: i64,
        out: &mut Outbox,
    ) {
        if self.state != State::CompletingRebalance || generation != self.generation {
            return;
        }
        match result {
            Ok(()) => {
                for m in self.members.values_mut() {
                    m.assignment = assignments.get(&m.id).cloned().unwrap_or_default();
                }
                self.propagate_assignments(now, out);
                self.transition(State::Stable, now);
            }
            Err(code) => {
                self.reset_assignments(error::group_append_error(code), now, out);
                self.prepare_rebalance(cfg, now, out);
            }
        }
    }

    /// Heartbeat, for a group that exists: the error code to answer.
    pub(crate) fn heartbeat(&mut self, req: &HeartbeatRequest, now: i64) -> i16 {
        if !self.members.contains_key(&req.member_id) {
            return error::UNKNOWN_MEMBER_ID;
        }
        if req.generation_id != self.generation {
            return error::ILLEGAL_GENERATION;
        }
        self.schedule_session(&req.member_id, now);
        // With a member the group is not Empty.
        if matches!(self.state, State::PreparingRebalance { .. }) {
            error::REBALANCE_IN_PROGRESS
        } else {
            error::NONE
        }
    }

    /// LeaveGroup, for a group that exists: each member's outcome, in order.
    pub(crate) fn leave(
        &mut self,
        members: Vec<(String, Option<String>)>,
        cfg: &GroupConfig,
        now: i64,
        out: &mut Outbox,
    ) -> Vec<(String, Option<String>, i16)> {
        let mut outcomes = Vec::with_capacity(members.len());
        for (member_id, instance_id) in members {
            let code = if self.pending_members.remove(&member_id) {
                self.timers.clear(&Timer::Pending(member_id.clone()));
                self.try_complete_join(now, out);
                error::NONE
            } else if self.members.contains_key(&member_id) {
                self.remove_member(&member_id, cfg, now, out);
                error::NONE
            } else {
                error::UNKNOWN_MEMBER_ID
            };
            outcomes.push((member_id, instance_id, code));
        }
        outcomes
    }
}

/// Kafka's member ids: the client id, a dash, and a random (version 4) UUID.
fn new_member_id(rng: &mut StdRng, client_id: &str) -> String {
    let raw: u128 = rng.random();
    let uuid = (raw & !(0xf << 76) & !(0x3 << 62)) | (0x4 << 76) | (0x2 << 62);
    format!(
        "{client_id}-{:08x}-{:04x}-{:04x}-{:04x}-{:012x}",
        uuid >> 96,
        (uuid >> 80) & 0xffff,
        (uuid >> 64) & 0xffff,
        (uuid >> 48) & 0xffff,
        uuid & 0xffff_ffff_ffff,
    )
}
