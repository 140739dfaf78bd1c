//! Heartbeats and sessions: what each state answers, who expires and when.

use syncline_group::error::*;
use syncline_group::*;

use crate::support::*;

#[test]
fn heartbeat_codes_in_each_state() {
    // Each case: how to get there, then whom to ask about with which generation.
    type Setup = fn(&mut Harness, &[String]) -> ();
    let stable: Setup = |_, _| {};
    let preparing: Setup = |h, m| {
        let _ = h.join(join_req(&m[0]));
    };
    let completing: Setup = |h, m| {
        let (a, _) = h.join(join_req(&m[0]));
        let (b, fx) = h.join(join_req(&m[1]));
        assert_eq!((fx.join(a).generation_id, fx.join(b).generation_id), (2, 2));
    };
    let empty: Setup = |h, m| {
        let (r, _) = h.leave(&[&m[0], &m[1]]);
        assert_eq!(r.error, NONE);
    };
    #[rustfmt::skip]
    let cases: &[(&str, Setup, &str, i32, i16)] = &[
        // what,                         setup,      member, generation, expected
        ("Stable",                       stable,     "a",    1, NONE),
        ("Stable, a stale generation",   stable,     "a",    0, ILLEGAL_GENERATION),
        ("Stable, a future generation",  stable,     "a",    2, ILLEGAL_GENERATION),
        ("Stable, an unknown member",    stable,     "x",    1, UNKNOWN_MEMBER_ID),
        ("PreparingRebalance",           preparing,  "b",    1, REBALANCE_IN_PROGRESS),
        ("PreparingRebalance, rejoined", preparing,  "a",    1, REBALANCE_IN_PROGRESS),
        ("PreparingRebalance, stale",    preparing,  "b",    0, ILLEGAL_GENERATION),
        ("CompletingRebalance",          completing, "b",    2, NONE),
        ("CompletingRebalance, stale",   completing, "b",    1, ILLEGAL_GENERATION),
        ("Empty",                        empty,      "a",    2, UNKNOWN_MEMBER_ID),
    ];
    for &(what, setup, who, generation, expected) in cases {
        let mut h = Harness::delayed();
        let members = h.stable_group(2);
        setup(&mut h, &members);
        let member = match who {
            "a" => members[0].clone(),
            "b" => members[1].clone(),
            other => other.to_owned(),
        };
        assert_eq!(h.heartbeat(&member, generation), expected, "{what}");
    }

    let mut h = Harness::delayed();
    let id = h.request_id();
    let mut req = heartbeat_req("a", 1);
    req.group_id = String::new();
    assert_eq!(
        h.c.heartbeat(id, req, h.now).heartbeat(id),
        INVALID_GROUP_ID
    );
    assert_eq!(h.heartbeat("a", 1), UNKNOWN_MEMBER_ID, "an unknown group");
}

#[test]
fn a_member_that_misses_its_session_timeout_is_removed_and_the_group_rebalances() {
    let mut h = Harness::delayed();
    let members = h.stable_group(2);
    let (a, b) = (&members[0], &members[1]);
    assert!(h.advance(5_000).is_empty());
    assert_eq!(h.heartbeat(a, 1), NONE);
    assert!(h.advance(i64::from(SESSION) - 5_001).is_empty());
    let fx = h.advance(1);
    assert!(fx.is_empty(), "nothing to answer yet: {fx:?}");
    assert_eq!(h.state(), GroupState::PreparingRebalance);
    assert_eq!(h.summary().members, vec![a.clone()]);
    assert_eq!(h.heartbeat(b, 1), UNKNOWN_MEMBER_ID);
    assert_eq!(h.heartbeat(a, 1), REBALANCE_IN_PROGRESS);
    let (id, fx) = h.join(join_req(a));
    let r = fx.join(id);
    assert_eq!((r.generation_id, r.members.len()), (2, 1));
}

#[test]
fn heartbeats_keep_a_member_alive_past_its_session_timeout() {
    let mut h = Harness::delayed();
    let members = h.stable_group(1);
    for _ in 0..5 {
        assert!(h.advance(i64::from(SESSION) - 1).is_empty());
        assert_eq!(h.heartbeat(&members[0], 1), NONE);
    }
    assert_eq!((h.state(), h.generation()), (GroupState::Stable, 1));
}

#[test]
fn a_heartbeat_while_rebalancing_refreshes_the_session_too() {
    let mut h = Harness::delayed();
    let members = h.stable_group(2);
    let (a_join, _) = h.join(join_req(&members[0]));
    for _ in 0..3 {
        assert!(h.advance(i64::from(SESSION) - 1).is_empty());
        assert_eq!(h.heartbeat(&members[1], 1), REBALANCE_IN_PROGRESS);
    }
    let (_, fx) = h.join(join_req(&members[1]));
    assert_eq!(fx.join(a_join).generation_id, 2);
}

#[test]
fn a_silent_member_that_does_not_rejoin_expires_and_the_join_completes_without_it() {
    let mut h = Harness::delayed();
    let members = h.stable_group(2);
    let (a_join, _) = h.join(join_req(&members[0]));
    assert!(h.advance(i64::from(SESSION) - 1).is_empty());
    let fx = h.advance(1);
    let r = fx.join(a_join);
    assert_eq!((r.generation_id, r.members.len()), (2, 1));
    assert_eq!(h.summary().members, vec![members[0].clone()]);
}

#[test]
fn the_rebalance_timeout_removes_a_member_that_heartbeats_but_never_rejoins() {
    let mut h = Harness::delayed();
    let members = h.stable_group(2);
    let (a, b) = (&members[0], &members[1]);
    let (a_join, _) = h.join(join_req(a));
    // a waits 30 s without a heartbeat: a held join keeps its session.
    for _ in 0..5 {
        assert!(h.advance(5_000).is_empty());
        assert_eq!(h.heartbeat(b, 1), REBALANCE_IN_PROGRESS);
    }
    assert!(h.advance(i64::from(REBALANCE) - 25_001).is_empty());
    let fx = h.advance(1);
    let r = fx.join(a_join);
    assert_eq!(
        (r.generation_id, r.leader.as_str(), r.members.len()),
        (2, a.as_str(), 1)
    );
    assert_eq!(h.heartbeat(b, 1), UNKNOWN_MEMBER_ID);
    assert_eq!(h.heartbeat(a, 2), NONE);
}

#[test]
fn a_member_waiting_for_its_assignment_does_not_expire() {
    let mut h = Harness::delayed();
    let (a, _, _) = h.new_member("a");
    let (b, _, _) = h.new_member("b");
    let _ = h.after_initial_delay();
    let (b_sync, _) = h.sync(sync_req(&b, 1, &[]));
    // The leader keeps heartbeating but takes its time to assign.
    for _ in 0..5 {
        assert!(h.advance(5_000).is_empty());
        assert_eq!(h.heartbeat(&a, 1), NONE);
    }
    let (_, fx) = h.sync(sync_req(&a, 1, &[(&b, "y")]));
    let done = h.ack(&fx);
    assert_eq!(done.sync(b_sync).assignment, "y");
    assert_eq!(h.summary().members.len(), 2);
}
