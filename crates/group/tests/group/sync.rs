//! SyncGroup: the leader's assignment, made durable before anyone gets theirs.

use bytes::Bytes;
use syncline_group::error::*;
use syncline_group::*;

use crate::support::*;

/// `a` and `b` joined; generation 1 is completing.
fn completing() -> (Harness, String, String) {
    let mut h = Harness::delayed();
    let (a, _, _) = h.new_member("a");
    let (b, _, _) = h.new_member("b");
    let _ = h.after_initial_delay();
    assert_eq!(h.state(), GroupState::CompletingRebalance);
    (h, a, b)
}

#[test]
fn the_leaders_assignment_reaches_every_member_only_once_it_is_durable() {
    let (mut h, a, b) = completing();
    let (b_sync, fx) = h.sync(sync_req(&b, 1, &[]));
    assert!(fx.is_empty(), "a follower waits for the leader");
    let (a_sync, fx) = h.sync(sync_req(&a, 1, &[(&a, "for-a"), (&b, "for-b")]));
    assert!(
        fx.replies.is_empty(),
        "nobody is answered before the append"
    );
    let records = fx.records();
    let [Record::Group {
        group_id,
        value: Some(value),
    }] = records.as_slice()
    else {
        panic!("one group record: {fx:?}");
    };
    assert_eq!(group_id, GROUP);
    assert_eq!(
        (
            value.generation_id,
            value.leader.as_deref(),
            value.protocol_name.as_deref()
        ),
        (1, Some(a.as_str()), Some("range"))
    );
    assert_eq!(value.protocol_type, "consumer");
    let stored: Vec<(&str, &[u8], &[u8])> = value
        .members
        .iter()
        .map(|m| (m.member_id.as_str(), &m.subscription[..], &m.assignment[..]))
        .collect();
    assert_eq!(
        stored,
        [
            (a.as_str(), &b"range-meta"[..], &b"for-a"[..]),
            (b.as_str(), &b"range-meta"[..], &b"for-b"[..])
        ]
    );
    assert_eq!(h.state(), GroupState::CompletingRebalance);

    let done = h.ack(&fx);
    let (ra, rb) = (done.sync(a_sync), done.sync(b_sync));
    assert_eq!((ra.error, rb.error), (NONE, NONE));
    assert_eq!(
        (ra.assignment, rb.assignment),
        ("for-a".into(), "for-b".into())
    );
    assert_eq!(rb.protocol_type.as_deref(), Some("consumer"));
    assert_eq!(rb.protocol_name.as_deref(), Some("range"));
    assert_eq!(h.state(), GroupState::Stable);
}

#[test]
fn members_the_leader_leaves_out_get_an_empty_assignment_and_strangers_are_ignored() {
    let (mut h, a, b) = completing();
    let (b_sync, _) = h.sync(sync_req(&b, 1, &[]));
    let (_, fx) = h.sync(sync_req(&a, 1, &[(&a, "all"), ("stranger", "x")]));
    let records = fx.records();
    let [Record::Group {
        value: Some(value), ..
    }] = records.as_slice()
    else {
        panic!("one group record: {fx:?}");
    };
    let ids: Vec<&str> = value.members.iter().map(|m| m.member_id.as_str()).collect();
    assert_eq!(ids, [a.as_str(), b.as_str()]);
    let done = h.ack(&fx);
    assert_eq!(done.sync(b_sync).assignment, Bytes::new());
    assert_eq!(done.sync(b_sync).error, NONE);
}

#[test]
fn a_failed_assignment_append_answers_the_held_syncs_with_the_mapped_error_and_rebalances() {
    #[rustfmt::skip]
    let cases: &[(&str, i16, i16)] = &[
        ("not the leader any more",     NOT_LEADER_OR_FOLLOWER,           NOT_COORDINATOR),
        ("storage failed",              KAFKA_STORAGE_ERROR,              NOT_COORDINATOR),
        ("the ISR is too small",        NOT_ENOUGH_REPLICAS,              COORDINATOR_NOT_AVAILABLE),
        ("the ISR shrank",              NOT_ENOUGH_REPLICAS_AFTER_APPEND, COORDINATOR_NOT_AVAILABLE),
        ("no such partition",           UNKNOWN_TOPIC_OR_PARTITION,       COORDINATOR_NOT_AVAILABLE),
        ("acks timed out",              REQUEST_TIMED_OUT,                REBALANCE_IN_PROGRESS),
        ("too large",                   MESSAGE_TOO_LARGE,                UNKNOWN_SERVER_ERROR),
        ("batch too large",             RECORD_LIST_TOO_LARGE,            UNKNOWN_SERVER_ERROR),
        ("invalid fetch size",          INVALID_FETCH_SIZE,               UNKNOWN_SERVER_ERROR),
        ("anything else",               2,                                UNKNOWN_SERVER_ERROR),
    ];
    for &(what, append_error, expected) in cases {
        let (mut h, a, b) = completing();
        let (b_sync, _) = h.sync(sync_req(&b, 1, &[]));
        let (a_sync, fx) = h.sync(sync_req(&a, 1, &[(&a, "x"), (&b, "y")]));
        let failed = h.complete(&fx, Err(append_error));
        for id in [a_sync, b_sync] {
            let r = failed.sync(id);
            assert_eq!(r, refusal(expected), "{what}");
        }
        assert_eq!(h.state(), GroupState::PreparingRebalance, "{what}");
        assert_eq!(h.generation(), 1, "{what}");
        // Both rejoin into generation 2.
        let (a_join, _) = h.join(join_req(&a));
        let (_, fx) = h.join(join_req(&b));
        assert_eq!(fx.join(a_join).generation_id, 2, "{what}");
    }
}

#[test]
fn refused_syncs() {
    let (mut h, a, _b) = completing();
    let with = |f: &dyn Fn(&mut SyncRequest)| {
        let mut req = sync_req(&a, 1, &[]);
        f(&mut req);
        req
    };
    #[rustfmt::skip]
    let cases: Vec<(&str, SyncRequest, i16)> = vec![
        ("an empty group id",       with(&|r| r.group_id = String::new()),                 INVALID_GROUP_ID),
        ("an unknown group",        with(&|r| r.group_id = "other".into()),                UNKNOWN_MEMBER_ID),
        ("an unknown member",       with(&|r| r.member_id = "ghost".into()),               UNKNOWN_MEMBER_ID),
        ("a stale generation",      with(&|r| r.generation_id = 0),                        ILLEGAL_GENERATION),
        ("a future generation",     with(&|r| r.generation_id = 2),                        ILLEGAL_GENERATION),
        ("another protocol type",   with(&|r| r.protocol_type = Some("connect".into())),   INCONSISTENT_GROUP_PROTOCOL),
        ("another protocol",        with(&|r| r.protocol_name = Some("roundrobin".into())), INCONSISTENT_GROUP_PROTOCOL),
    ];
    for (what, req, expected) in cases {
        let (id, fx) = h.sync(req);
        assert_eq!(fx.sync(id), refusal(expected), "{what}");
        assert!(fx.appends.is_empty(), "{what}");
    }
    // Matching protocol type and name (SyncGroup v5) are fine.
    let (_, fx) = h.sync(with(&|r| {
        r.protocol_type = Some("consumer".into());
        r.protocol_name = Some("range".into());
    }));
    assert_eq!(fx.appends.len(), 1, "the leader's sync is taken");

    // While the members rejoin, there is nothing to sync.
    let _ = h.new_member("c");
    assert_eq!(h.state(), GroupState::PreparingRebalance);
    let (id, fx) = h.sync(sync_req(&a, 1, &[]));
    assert_eq!(fx.sync(id).error, REBALANCE_IN_PROGRESS);
}

fn refusal(error: i16) -> SyncResponse {
    SyncResponse {
        error,
        protocol_type: None,
        protocol_name: None,
        assignment: Bytes::new(),
    }
}

#[test]
fn a_sync_in_stable_is_answered_at_once_with_the_members_assignment() {
    let mut h = Harness::delayed();
    let members = h.stable_group(2);
    let (id, fx) = h.sync(sync_req(&members[1], 1, &[]));
    let r = fx.sync(id);
    assert_eq!((r.error, r.assignment), (NONE, Bytes::from_static(b"a-1")));
    assert!(fx.appends.is_empty());
}

#[test]
fn a_member_that_joined_but_never_syncs_is_removed_after_the_rebalance_timeout() {
    let (mut h, a, b) = completing();
    let (_, fx) = h.sync(sync_req(&a, 1, &[(&a, "x"), (&b, "y")]));
    let _ = h.ack(&fx);
    assert_eq!(h.state(), GroupState::Stable);
    // b heartbeats (so its session holds) but never syncs.
    for _ in 0..5 {
        assert!(h.advance(5_000).is_empty());
        assert_eq!(h.heartbeat(&b, 1), NONE);
        assert_eq!(h.heartbeat(&a, 1), NONE);
    }
    assert!(h.advance(4_999).is_empty());
    let _ = h.advance(1);
    assert_eq!(h.state(), GroupState::PreparingRebalance);
    assert_eq!(h.summary().members, vec![a.clone()]);
    assert_eq!(h.heartbeat(&b, 1), UNKNOWN_MEMBER_ID);
    assert_eq!(h.heartbeat(&a, 1), REBALANCE_IN_PROGRESS);
}

#[test]
fn a_rebalance_answers_held_syncs_and_makes_a_late_assignment_moot() {
    let (mut h, a, b) = completing();
    let (b_sync, _) = h.sync(sync_req(&b, 1, &[]));
    let (a_sync, assignment) = h.sync(sync_req(&a, 1, &[(&a, "x"), (&b, "y")]));
    // A newcomer restarts the rebalance before the assignment is durable.
    let (_, _, fx) = h.new_member("c");
    assert_eq!(fx.sync(a_sync).error, REBALANCE_IN_PROGRESS);
    assert_eq!(fx.sync(b_sync).error, REBALANCE_IN_PROGRESS);
    let late = h.ack(&assignment);
    assert!(late.is_empty(), "{late:?}");
    assert_eq!(h.state(), GroupState::PreparingRebalance);
}
