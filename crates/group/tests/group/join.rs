//! JoinGroup: member ids, the initial delay, the join phase, protocol choice, refusals.

use bytes::Bytes;
use syncline_group::error::*;
use syncline_group::*;

use crate::support::*;

fn is_kafka_member_id(id: &str, client_id: &str) -> bool {
    let Some(uuid) = id.strip_prefix(&format!("{client_id}-")) else {
        return false;
    };
    let parts: Vec<&str> = uuid.split('-').collect();
    parts.iter().map(|p| p.len()).eq([8, 4, 4, 4, 12])
        && parts
            .iter()
            .all(|p| p.chars().all(|c| c.is_ascii_hexdigit()))
        && parts[2].starts_with('4')
}

#[test]
fn a_new_member_gets_its_id_with_member_id_required_then_leads_generation_1_at_once_without_initial_delay(
) {
    let mut h = Harness::undelayed();
    let (id, fx) = h.join(join_req(""));
    let first = fx.join(id);
    assert_eq!(first.error, MEMBER_ID_REQUIRED);
    assert_eq!(first.generation_id, -1);
    assert!(
        is_kafka_member_id(&first.member_id, "client"),
        "{}",
        first.member_id
    );
    assert!(fx.appends.is_empty());
    assert_eq!(h.summary().pending_members, vec![first.member_id.clone()]);
    assert_eq!(h.state(), GroupState::Empty);

    let (id, fx) = h.join(join_req(&first.member_id));
    let joined = fx.join(id);
    assert_eq!(joined.error, NONE);
    assert_eq!(joined.generation_id, 1);
    assert_eq!(joined.member_id, first.member_id);
    assert_eq!(joined.leader, first.member_id);
    assert_eq!(joined.protocol_type.as_deref(), Some("consumer"));
    assert_eq!(joined.protocol_name.as_deref(), Some("range"));
    assert_eq!(
        joined.members,
        vec![JoinMember {
            member_id: first.member_id.clone(),
            group_instance_id: None,
            metadata: Bytes::from_static(b"range-meta"),
        }]
    );
    assert!(
        fx.appends.is_empty(),
        "nothing is persisted before the sync"
    );
    let summary = h.summary();
    assert_eq!(summary.state, GroupState::CompletingRebalance);
    assert!(summary.pending_members.is_empty());
}

#[test]
fn with_an_initial_delay_the_first_rebalance_completes_when_the_delay_runs_out() {
    let mut h = Harness::delayed();
    let (a, join, fx) = h.new_member("a");
    assert!(fx.is_empty(), "held for the delay");
    assert_eq!(h.state(), GroupState::PreparingRebalance);
    assert_eq!(h.c.next_deadline(), Some(T0 + i64::from(DELAY)));

    assert!(h.advance(i64::from(DELAY) - 1).is_empty());
    let fx = h.advance(1);
    let joined = fx.join(join);
    assert_eq!((joined.error, joined.generation_id), (NONE, 1));
    assert_eq!(joined.leader, a);
    assert_eq!(h.state(), GroupState::CompletingRebalance);
}

#[test]
fn the_initial_delay_is_extended_while_members_keep_arriving_up_to_the_rebalance_timeout() {
    let mut h = Harness::delayed();
    let join_with_timeout = |h: &mut Harness, client: &str| {
        let member = h.member_id(client);
        let mut req = join_req(&member);
        req.rebalance_timeout_ms = 7_000;
        let (id, fx) = h.join(req);
        assert!(fx.is_empty());
        id
    };
    // The delay runs to T0+3s; the rebalance timeout bounds it at T0+7s.
    let mut held = vec![join_with_timeout(&mut h, "a")];
    assert!(h.advance(2_000).is_empty());
    held.push(join_with_timeout(&mut h, "b"));
    // Someone arrived: another delay, to T0+6s.
    assert!(h.advance(1_000).is_empty());
    assert_eq!(h.c.next_deadline(), Some(T0 + 6_000));
    assert!(h.advance(2_000).is_empty());
    held.push(join_with_timeout(&mut h, "c"));
    // Again, but only up to T0+7s.
    assert!(h.advance(1_000).is_empty());
    assert_eq!(h.c.next_deadline(), Some(T0 + 7_000));
    assert!(h.advance(500).is_empty());
    held.push(join_with_timeout(&mut h, "d"));
    let fx = h.advance(500);
    for id in held {
        assert_eq!(fx.join(id).generation_id, 1);
    }
    assert_eq!(h.summary().members.len(), 4);
}

#[test]
fn two_members_joining_during_the_delay_both_get_generation_1_and_only_the_leader_the_member_list()
{
    let mut h = Harness::delayed();
    let (a, a_join, _) = h.new_member("a");
    let (b, b_join, _) = h.new_member("b");
    // b arrived during the delay: another one.
    assert!(h.advance(i64::from(DELAY)).is_empty());
    let fx = h.advance(i64::from(DELAY));
    let (ra, rb) = (fx.join(a_join), fx.join(b_join));
    assert_eq!((ra.generation_id, rb.generation_id), (1, 1));
    assert_eq!(
        (ra.leader.as_str(), rb.leader.as_str()),
        (a.as_str(), a.as_str())
    );
    let ids: Vec<&str> = ra.members.iter().map(|m| m.member_id.as_str()).collect();
    assert_eq!(ids, [a.as_str(), b.as_str()]);
    assert!(ra.members.iter().all(|m| m.metadata == "range-meta"));
    assert!(rb.members.is_empty());
    assert_eq!(rb.protocol_name.as_deref(), Some("range"));
}

#[test]
fn a_rebalance_completes_only_when_every_member_has_rejoined() {
    let mut h = Harness::delayed();
    let [a, b] = <[String; 2]>::try_from(h.stable_group(2)).expect("two members");
    // The leader's rejoin is a request to rebalance.
    let (a_join, fx) = h.join(join_req(&a));
    assert!(fx.is_empty());
    assert_eq!(h.state(), GroupState::PreparingRebalance);
    assert_eq!(h.heartbeat(&b, 1), REBALANCE_IN_PROGRESS);
    let (b_join, fx) = h.join(join_req(&b));
    let (ra, rb) = (fx.join(a_join), fx.join(b_join));
    assert_eq!((ra.generation_id, rb.generation_id), (2, 2));
    assert_eq!(ra.leader, a);
    assert_eq!(ra.members.len(), 2);
    assert!(rb.members.is_empty());
}

#[test]
fn a_join_without_require_known_member_id_adds_the_member_directly() {
    let mut h = Harness::undelayed();
    let mut req = join_req("");
    req.require_known_member_id = false;
    req.client_id = "old-client".into();
    let (id, fx) = h.join(req);
    let joined = fx.join(id);
    assert_eq!((joined.error, joined.generation_id), (NONE, 1));
    assert!(is_kafka_member_id(&joined.member_id, "old-client"));
    assert_eq!(joined.leader, joined.member_id);
}

#[test]
fn refused_joins_change_nothing() {
    let mut h = Harness::delayed();
    let members = h.stable_group(2);
    let before = h.summary();
    let with = |f: &dyn Fn(&mut JoinRequest)| {
        let mut req = join_req("");
        f(&mut req);
        req
    };
    #[rustfmt::skip]
    let cases: Vec<(&str, JoinRequest, i16)> = vec![
        ("an empty group id",              with(&|r| r.group_id = String::new()),             INVALID_GROUP_ID),
        ("a session below the minimum",    with(&|r| r.session_timeout_ms = 5_999),           INVALID_SESSION_TIMEOUT),
        ("a session above the maximum",    with(&|r| r.session_timeout_ms = 1_800_001),       INVALID_SESSION_TIMEOUT),
        ("a member id for no group",       with(&|r| { r.group_id = "other".into(); r.member_id = "ghost".into() }), UNKNOWN_MEMBER_ID),
        ("an unknown member id",           with(&|r| r.member_id = "ghost".into()),           UNKNOWN_MEMBER_ID),
        ("another protocol type",          with(&|r| r.protocol_type = "connect".into()),     INCONSISTENT_GROUP_PROTOCOL),
        ("no protocol in common",          with(&|r| r.protocols = protocols(&["roundrobin"])), INCONSISTENT_GROUP_PROTOCOL),
        ("no protocols",                   with(&|r| r.protocols = Vec::new()),               INCONSISTENT_GROUP_PROTOCOL),
        ("a known member, no protocol in common",
                                           with(&|r| { r.member_id = members[1].clone(); r.protocols = protocols(&["roundrobin"]) }),
                                                                                              INCONSISTENT_GROUP_PROTOCOL),
    ];
    for (what, req, expected) in cases {
        let echoed = req.member_id.clone();
        let (id, fx) = h.join(req);
        let r = fx.join(id);
        assert_eq!(r.error, expected, "{what}");
        assert_eq!(r.generation_id, -1, "{what}");
        assert!(
            echoed.is_empty() || r.member_id == echoed,
            "{what}: echoes the member id"
        );
        assert!(fx.appends.is_empty(), "{what}");
        assert_eq!(h.summary(), before, "{what}");
    }
    assert_eq!(h.c.groups_count(), 1, "a refused join creates no group");
}

#[test]
fn a_group_with_no_protocol_type_is_not_created_by_a_refused_join() {
    let mut h = Harness::delayed();
    let mut req = join_req("");
    req.protocol_type = String::new();
    let (id, fx) = h.join(req);
    assert_eq!(fx.join(id).error, INCONSISTENT_GROUP_PROTOCOL);
    assert_eq!(h.c.groups_count(), 0);
    assert_eq!(h.c.next_deadline(), None);
}

#[test]
fn a_full_group_refuses_new_members_with_group_max_size_reached() {
    let mut h = Harness::new(GroupConfig {
        max_group_size: 2,
        ..config(DELAY)
    });
    let members = h.stable_group(2);
    for require_known_member_id in [true, false] {
        let mut req = join_req("");
        req.require_known_member_id = require_known_member_id;
        let (id, fx) = h.join(req);
        let r = fx.join(id);
        assert_eq!(
            (r.error, r.member_id.as_str()),
            (GROUP_MAX_SIZE_REACHED, "")
        );
    }
    assert_eq!(h.state(), GroupState::Stable);
    assert_eq!(h.summary().members, members);
    // Members already in are still welcome.
    let (id, fx) = h.join(join_req(&members[1]));
    assert_eq!(fx.join(id).generation_id, 1);
}

#[test]
fn a_handed_out_member_id_holds_the_rebalance_until_its_session_timeout_expires_it() {
    let mut h = Harness::delayed();
    let [a] = <[String; 1]>::try_from(h.stable_group(1)).expect("one member");
    let pending = h.member_id("late");
    assert_eq!(
        h.state(),
        GroupState::Stable,
        "a handed-out id does not rebalance"
    );
    let (a_join, fx) = h.join(join_req(&a));
    assert!(fx.is_empty(), "waits for the member that got an id");
    assert!(h.advance(i64::from(SESSION) - 1).is_empty());
    let fx = h.advance(1);
    assert_eq!(fx.join(a_join).generation_id, 2);
    let summary = h.summary();
    assert_eq!(summary.members, vec![a]);
    assert!(summary.pending_members.is_empty());
    // Too late now: its id is unknown.
    let (id, fx) = h.join(join_req(&pending));
    assert_eq!(fx.join(id).error, UNKNOWN_MEMBER_ID);
}

#[test]
fn a_handed_out_member_id_that_joins_completes_the_rebalance() {
    let mut h = Harness::delayed();
    let [a] = <[String; 1]>::try_from(h.stable_group(1)).expect("one member");
    let late = h.member_id("late");
    let (a_join, _) = h.join(join_req(&a));
    let (late_join, fx) = h.join(join_req(&late));
    assert_eq!(fx.join(a_join).generation_id, 2);
    assert_eq!(fx.join(late_join).leader, a);
    assert_eq!(h.summary().members, vec![a, late]);
}

#[test]
fn a_stable_follower_rejoining_unchanged_gets_the_current_generation_and_changed_metadata_rebalances(
) {
    let mut h = Harness::delayed();
    let members = h.stable_group(2);
    let (id, fx) = h.join(join_req(&members[1]));
    let r = fx.join(id);
    assert_eq!((r.error, r.generation_id), (NONE, 1));
    assert_eq!(r.leader, members[0]);
    assert!(r.members.is_empty());
    assert_eq!(h.state(), GroupState::Stable);

    let mut changed = join_req(&members[1]);
    changed.protocols[0].metadata = Bytes::from_static(b"new subscription");
    let (id, fx) = h.join(changed);
    assert!(fx.reply(id).is_none());
    assert_eq!(h.state(), GroupState::PreparingRebalance);
}

#[test]
fn a_rejoin_while_completing_unchanged_gets_the_same_answer_and_changed_restarts_the_rebalance() {
    let mut h = Harness::delayed();
    let (a, _, _) = h.new_member("a");
    let (b, _, _) = h.new_member("b");
    let _ = h.after_initial_delay();
    let (id, fx) = h.join(join_req(&a));
    let again = fx.join(id);
    assert_eq!(
        (again.generation_id, again.members.len()),
        (1, 2),
        "the leader's answer"
    );
    assert_eq!(h.state(), GroupState::CompletingRebalance);

    let (b_sync, _) = h.sync(sync_req(&b, 1, &[]));
    let mut changed = join_req(&a);
    changed.protocols = protocols(&["range", "roundrobin"]);
    let (a_join, fx) = h.join(changed);
    assert_eq!(h.state(), GroupState::PreparingRebalance);
    assert_eq!(fx.sync(b_sync).error, REBALANCE_IN_PROGRESS);
    let (b_join, fx) = h.join(join_req(&b));
    assert_eq!(fx.join(a_join).generation_id, 2);
    assert_eq!(fx.join(b_join).generation_id, 2);
}

#[test]
fn the_protocol_is_chosen_by_vote_among_those_every_member_supports() {
    #[rustfmt::skip]
    let cases: &[(&str, &[&[&str]], &str)] = &[
        // what,                                          members' protocols (the first leads), chosen
        ("one member",                                    &[&["roundrobin", "range"]],                       "roundrobin"),
        ("only what everyone supports is a candidate",    &[&["range", "roundrobin"], &["roundrobin", "range"], &["roundrobin"]], "roundrobin"),
        ("most votes win",                                &[&["sticky", "range"], &["range", "sticky"], &["range", "sticky"]], "range"),
        ("a tie goes to the leader's preference",         &[&["range", "roundrobin"], &["roundrobin", "range"]], "range"),
        ("the leader's preference in the other order",    &[&["roundrobin", "range"], &["range", "roundrobin"]], "roundrobin"),
    ];
    for &(what, lists, expected) in cases {
        let mut h = Harness::delayed();
        let mut held = Vec::new();
        for (i, list) in lists.iter().enumerate() {
            let member = h.member_id(&format!("c{i}"));
            let mut req = join_req(&member);
            req.protocols = protocols(list);
            held.push(h.join(req).0);
        }
        let fx = h.after_initial_delay();
        let leader = fx.join(held[0]);
        assert_eq!(leader.protocol_name.as_deref(), Some(expected), "{what}");
        let meta = format!("{expected}-meta");
        assert!(leader.members.iter().all(|m| m.metadata == meta), "{what}");
    }
}

#[test]
fn a_member_may_switch_to_a_protocol_every_other_member_supports() {
    let mut h = Harness::delayed();
    let (a, _, _) = h.new_member("a");
    let b = h.member_id("b");
    let mut req = join_req(&b);
    req.protocols = protocols(&["range", "roundrobin"]);
    let _ = h.join(req);
    let _ = h.after_initial_delay();
    // a's current list lacks roundrobin, but b, the only other member, has it.
    let mut switch = join_req(&a);
    switch.protocols = protocols(&["roundrobin"]);
    let (a_join, fx) = h.join(switch);
    assert!(fx.reply(a_join).is_none());
    let mut again = join_req(&b);
    again.protocols = protocols(&["range", "roundrobin"]);
    let (_, fx) = h.join(again);
    assert_eq!(fx.join(a_join).protocol_name.as_deref(), Some("roundrobin"));
}
