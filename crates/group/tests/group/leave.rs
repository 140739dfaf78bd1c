//! LeaveGroup: the others rebalance; the last one out empties the group.

use syncline_group::error::*;
use syncline_group::*;

use crate::support::*;

#[test]
fn a_leaving_member_is_removed_and_the_rest_rebalance_into_a_new_generation() {
    let mut h = Harness::delayed();
    let m = h.stable_group(3);
    let (r, fx) = h.leave(&[&m[1]]);
    assert_eq!(r.members, vec![(m[1].clone(), None, NONE)]);
    assert!(fx.appends.is_empty());
    assert_eq!(h.state(), GroupState::PreparingRebalance);
    assert_eq!(h.heartbeat(&m[0], 1), REBALANCE_IN_PROGRESS);
    let (a_join, _) = h.join(join_req(&m[0]));
    let (c_join, fx) = h.join(join_req(&m[2]));
    let (ra, rc) = (fx.join(a_join), fx.join(c_join));
    assert_eq!((ra.generation_id, rc.generation_id), (2, 2));
    let ids: Vec<&str> = ra.members.iter().map(|j| j.member_id.as_str()).collect();
    assert_eq!(ids, [m[0].as_str(), m[2].as_str()]);
}

#[test]
fn the_leader_leaving_hands_leadership_to_the_earliest_remaining_member() {
    let mut h = Harness::delayed();
    let m = h.stable_group(3);
    let _ = h.leave(&[&m[0]]);
    assert_eq!(h.summary().leader.as_deref(), Some(m[1].as_str()));
    let (c_join, _) = h.join(join_req(&m[2]));
    let (b_join, fx) = h.join(join_req(&m[1]));
    assert_eq!(fx.join(c_join).leader, m[1]);
    assert_eq!(
        fx.join(b_join).members.len(),
        2,
        "the new leader gets the members"
    );
}

#[test]
fn the_last_member_leaving_empties_the_group_with_a_new_generation_persisted() {
    let mut h = Harness::delayed();
    let m = h.stable_group(1);
    let (r, fx) = h.leave(&[&m[0]]);
    assert_eq!(r.error, NONE);
    assert_eq!((h.state(), h.generation()), (GroupState::Empty, 2));
    assert_eq!(
        fx.records(),
        vec![Record::Group {
            group_id: GROUP.into(),
            value: Some(GroupValue {
                protocol_type: "consumer".into(),
                generation_id: 2,
                protocol_name: None,
                leader: None,
                state_timestamp_ms: h.now,
                members: Vec::new(),
            }),
        }]
    );
    assert_eq!(h.heartbeat(&m[0], 2), UNKNOWN_MEMBER_ID);
    let described = &h.c.describe_groups(&[GROUP.into()])[0];
    assert_eq!(
        (described.state, described.protocol_type.as_str()),
        (GroupState::Empty, "consumer")
    );
    // Joining again starts from the persisted generation.
    let (_, id, _) = h.new_member("again");
    let fx = h.advance(i64::from(DELAY));
    assert_eq!(fx.join(id).generation_id, 3);
}

#[test]
fn leave_outcomes_per_member() {
    let mut h = Harness::delayed();
    let m = h.stable_group(2);
    let pending = h.member_id("pending");
    let (r, _) = h.leave(&[&m[1], "ghost", &pending, ""]);
    let codes: Vec<(&str, i16)> = r
        .members
        .iter()
        .map(|(id, _, code)| (id.as_str(), *code))
        .collect();
    assert_eq!(
        codes,
        [
            (m[1].as_str(), NONE),
            ("ghost", UNKNOWN_MEMBER_ID),
            (pending.as_str(), NONE),
            ("", UNKNOWN_MEMBER_ID)
        ]
    );
    assert!(h.summary().pending_members.is_empty());
    assert_eq!(h.summary().members, vec![m[0].clone()]);

    let id = h.request_id();
    let unknown_group = LeaveRequest {
        group_id: "other".into(),
        members: vec![("x".into(), Some("i".into()))],
    };
    let r = h.c.leave(id, unknown_group, h.now).leave(id);
    assert_eq!(
        r,
        LeaveResponse {
            error: NONE,
            members: vec![("x".into(), Some("i".into()), UNKNOWN_MEMBER_ID)]
        }
    );

    let id = h.request_id();
    let no_group = LeaveRequest {
        group_id: String::new(),
        members: vec![("x".into(), None)],
    };
    let r = h.c.leave(id, no_group, h.now).leave(id);
    assert_eq!((r.error, r.members.len()), (INVALID_GROUP_ID, 0));
}

#[test]
fn leaving_while_the_join_is_held_answers_it_and_lets_the_others_complete() {
    let mut h = Harness::delayed();
    let m = h.stable_group(3);
    let (a_join, _) = h.join(join_req(&m[0]));
    let (b_join, _) = h.join(join_req(&m[1]));
    let (_, fx) = h.leave(&[&m[1], &m[2]]);
    assert_eq!(fx.join(b_join).error, UNKNOWN_MEMBER_ID);
    let r = fx.join(a_join);
    assert_eq!((r.error, r.generation_id, r.members.len()), (NONE, 2, 1));
}
