//! A coordinator with a clock, request ids, and shorthands for requests and replies.

use bytes::Bytes;
use syncline_group::*;

pub(crate) const T0: i64 = 1_700_000_000_000;
pub(crate) const SESSION: i32 = 10_000;
pub(crate) const REBALANCE: i32 = 30_000;
pub(crate) const DELAY: i32 = 3_000;
pub(crate) const GROUP: &str = "g";

pub(crate) fn config(initial_delay_ms: i32) -> GroupConfig {
    GroupConfig {
        initial_rebalance_delay_ms: initial_delay_ms,
        ..GroupConfig::default()
    }
}

pub(crate) fn protocols(names: &[&str]) -> Vec<Protocol> {
    names
        .iter()
        .map(|name| Protocol {
            name: (*name).to_owned(),
            metadata: Bytes::from(format!("{name}-meta")),
        })
        .collect()
}

pub(crate) fn join_req(member_id: &str) -> JoinRequest {
    JoinRequest {
        group_id: GROUP.into(),
        member_id: member_id.into(),
        group_instance_id: None,
        client_id: "client".into(),
        client_host: "/10.0.0.1".into(),
        protocol_type: "consumer".into(),
        protocols: protocols(&["range"]),
        session_timeout_ms: SESSION,
        rebalance_timeout_ms: REBALANCE,
        require_known_member_id: true,
    }
}

pub(crate) fn sync_req(
    member_id: &str,
    generation_id: i32,
    assignments: &[(&str, &str)],
) -> SyncRequest {
    SyncRequest {
        group_id: GROUP.into(),
        member_id: member_id.into(),
        generation_id,
        assignments: assignments
            .iter()
            .map(|(m, a)| ((*m).to_owned(), Bytes::from((*a).to_owned())))
            .collect(),
        ..SyncRequest::default()
    }
}

pub(crate) fn heartbeat_req(member_id: &str, generation_id: i32) -> HeartbeatRequest {
    HeartbeatRequest {
        group_id: GROUP.into(),
        member_id: member_id.into(),
        generation_id,
        group_instance_id: None,
    }
}

pub(crate) fn offset(topic: &str, partition: i32, offset: i64) -> CommitOffset {
    CommitOffset {
        topic: topic.into(),
        partition,
        offset,
        leader_epoch: -1,
        metadata: Some(format!("m{offset}")),
    }
}

pub(crate) fn commit_req(
    member_id: &str,
    generation_id: i32,
    offsets: Vec<CommitOffset>,
) -> CommitRequest {
    CommitRequest {
        group_id: GROUP.into(),
        generation_id,
        member_id: member_id.into(),
        group_instance_id: None,
        offsets,
    }
}

/// Replies picked out of [`Effects`] by request (panicking if absent: a test failure).
pub(crate) trait Replies {
    fn reply(&self, id: RequestId) -> Option<&Reply>;
    fn join(&self, id: RequestId) -> JoinResponse;
    fn sync(&self, id: RequestId) -> SyncResponse;
    fn commit(&self, id: RequestId) -> CommitResponse;
    fn heartbeat(&self, id: RequestId) -> i16;
    fn leave(&self, id: RequestId) -> LeaveResponse;
    fn records(&self) -> Vec<Record>;
}

impl Replies for Effects {
    fn reply(&self, id: RequestId) -> Option<&Reply> {
        let mut found = self.replies.iter().filter(|(r, _)| *r == id);
        let reply = found.next().map(|(_, reply)| reply);
        assert!(found.next().is_none(), "{id:?} answered twice");
        reply
    }

    fn join(&self, id: RequestId) -> JoinResponse {
        match self.reply(id) {
            Some(Reply::Join(r)) => r.clone(),
            other => panic!("no JoinGroup reply to {id:?}: {other:?} in {self:?}"),
        }
    }

    fn sync(&self, id: RequestId) -> SyncResponse {
        match self.reply(id) {
            Some(Reply::Sync(r)) => r.clone(),
            other => panic!("no SyncGroup reply to {id:?}: {other:?} in {self:?}"),
        }
    }

    fn commit(&self, id: RequestId) -> CommitResponse {
        match self.reply(id) {
            Some(Reply::Commit(r)) => r.clone(),
            other => panic!("no OffsetCommit reply to {id:?}: {other:?} in {self:?}"),
        }
    }

    fn heartbeat(&self, id: RequestId) -> i16 {
        match self.reply(id) {
            Some(Reply::Heartbeat(code)) => *code,
            other => panic!("no Heartbeat reply to {id:?}: {other:?} in {self:?}"),
        }
    }

    fn leave(&self, id: RequestId) -> LeaveResponse {
        match self.reply(id) {
            Some(Reply::Leave(r)) => r.clone(),
            other => panic!("no LeaveGroup reply to {id:?}: {other:?} in {self:?}"),
        }
    }

    fn records(&self) -> Vec<Record> {
        self.appends
            .iter()
            .flat_map(|a| a.records.clone())
            .collect()
    }
}

/// A coordinator, the time, and every record it asked to append (the "log").
pub(crate) struct Harness {
    pub(crate) c: Coordinator,
    pub(crate) now: i64,
    pub(crate) log: Vec<Record>,
    next_request: u64,
}

impl Harness {
    pub(crate) fn new(config: GroupConfig) -> Harness {
        let mut c = Coordinator::new(0, config, 7);
        c.load(Vec::new(), T0);
        Harness {
            c,
            now: T0,
            log: Vec::new(),
            next_request: 0,
        }
    }

    /// Kafka's default initial rebalance delay.
    pub(crate) fn delayed() -> Harness {
        Harness::new(config(DELAY))
    }

    /// No initial rebalance delay: a first join completes at once.
    pub(crate) fn undelayed() -> Harness {
        Harness::new(config(0))
    }

    pub(crate) fn request_id(&mut self) -> RequestId {
        self.next_request += 1;
        RequestId(self.next_request)
    }

    fn logged(&mut self, fx: Effects) -> Effects {
        self.log.extend(fx.records());
        fx
    }

    pub(crate) fn advance(&mut self, ms: i64) -> Effects {
        self.now += ms;
        let fx = self.c.tick(self.now);
        self.logged(fx)
    }

    pub(crate) fn join(&mut self, req: JoinRequest) -> (RequestId, Effects) {
        let id = self.request_id();
        let fx = self.c.join(id, req, self.now);
        (id, self.logged(fx))
    }

    pub(crate) fn sync(&mut self, req: SyncRequest) -> (RequestId, Effects) {
        let id = self.request_id();
        let fx = self.c.sync(id, req, self.now);
        (id, self.logged(fx))
    }

    pub(crate) fn heartbeat(&mut self, member_id: &str, generation_id: i32) -> i16 {
        let id = self.request_id();
        let fx = self
            .c
            .heartbeat(id, heartbeat_req(member_id, generation_id), self.now);
        assert!(fx.appends.is_empty());
        fx.heartbeat(id)
    }

    pub(crate) fn leave(&mut self, member_ids: &[&str]) -> (LeaveResponse, Effects) {
        let id = self.request_id();
        let req = LeaveRequest {
            group_id: GROUP.into(),
            members: member_ids.iter().map(|m| ((*m).to_owned(), None)).collect(),
        };
        let fx = self.c.leave(id, req, self.now);
        let fx = self.logged(fx);
        (fx.leave(id), fx)
    }

    pub(crate) fn commit(&mut self, req: CommitRequest) -> (RequestId, Effects) {
        let id = self.request_id();
        let fx = self.c.commit(id, req, self.now);
        (id, self.logged(fx))
    }

    /// Reports every append of `fx` with `result`; the effects of all, merged.
    pub(crate) fn complete(&mut self, fx: &Effects, result: Result<(), i16>) -> Effects {
        let mut merged = Effects::default();
        for append in &fx.appends {
            let more = self.c.appended(append.id, result, self.now);
            let more = self.logged(more);
            merged.replies.extend(more.replies);
            merged.appends.extend(more.appends);
        }
        merged
    }

    pub(crate) fn ack(&mut self, fx: &Effects) -> Effects {
        self.complete(fx, Ok(()))
    }

    /// A new member's first join (`MEMBER_ID_REQUIRED`): its member id.
    pub(crate) fn member_id(&mut self, client_id: &str) -> String {
        let mut req = join_req("");
        req.client_id = client_id.into();
        let (id, fx) = self.join(req);
        let r = fx.join(id);
        assert_eq!(r.error, error::MEMBER_ID_REQUIRED);
        r.member_id
    }

    /// A new member gets its id and joins with it: its id and the held join.
    pub(crate) fn new_member(&mut self, client_id: &str) -> (String, RequestId, Effects) {
        let member_id = self.member_id(client_id);
        let mut req = join_req(&member_id);
        req.client_id = client_id.into();
        let (id, fx) = self.join(req);
        (member_id, id, fx)
    }

    /// With an initial delay: `n` members join, the delay passes, the leader (the
    /// first) assigns `a-<i>` to member i, everyone syncs, and the assignment is
    /// durable. The group is Stable in generation 1; the member ids, leader first.
    pub(crate) fn stable_group(&mut self, n: usize) -> Vec<String> {
        let joined: Vec<(String, RequestId)> = (0..n)
            .map(|i| {
                let (member, id, fx) = self.new_member(&format!("client-{i}"));
                assert!(fx.reply(id).is_none(), "held during the initial delay");
                (member, id)
            })
            .collect();
        let fx = self.after_initial_delay();
        for (_, id) in &joined {
            assert_eq!(fx.join(*id).generation_id, 1);
        }
        let members: Vec<String> = joined.into_iter().map(|(m, _)| m).collect();
        let assignments: Vec<(String, String)> = members
            .iter()
            .enumerate()
            .map(|(i, m)| (m.clone(), format!("a-{i}")))
            .collect();
        let borrowed: Vec<(&str, &str)> = assignments
            .iter()
            .map(|(m, a)| (m.as_str(), a.as_str()))
            .collect();
        let mut held = Vec::new();
        for m in members.iter().skip(1) {
            let (id, fx) = self.sync(sync_req(m, 1, &[]));
            assert!(fx.is_empty());
            held.push(id);
        }
        let (leader_sync, fx) = self.sync(sync_req(&members[0], 1, &borrowed));
        let done = self.ack(&fx);
        held.push(leader_sync);
        for id in held {
            assert_eq!(done.sync(id).error, error::NONE);
        }
        assert_eq!(self.state(), GroupState::Stable);
        members
    }

    /// Ticks at each deadline until the group's first rebalance has its join phase
    /// done (members that arrive during the delay extend it): the merged effects.
    pub(crate) fn after_initial_delay(&mut self) -> Effects {
        let mut merged = Effects::default();
        while self.state() == GroupState::PreparingRebalance {
            let next = self.c.next_deadline().expect("the delay is a deadline");
            let fx = self.advance(next - self.now);
            merged.replies.extend(fx.replies);
            merged.appends.extend(fx.appends);
        }
        merged
    }

    pub(crate) fn summary(&self) -> GroupSummary {
        self.c.group_summary(GROUP).expect("the group exists")
    }

    pub(crate) fn state(&self) -> GroupState {
        self.summary().state
    }

    pub(crate) fn generation(&self) -> i32 {
        self.summary().generation_id
    }
}
