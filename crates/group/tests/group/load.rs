//! Loading a partition: what the coordinator wrote is what a new one comes back to.

use bytes::Bytes;
use syncline_group::error::*;
use syncline_group::*;

use crate::support::*;

/// A Stable group of two with offsets, a group that only stores offsets, and a group
/// that came and went; `h.log` holds every record written.
fn written() -> (Harness, Vec<String>) {
    let mut h = Harness::delayed();
    let m = h.stable_group(2);
    let (_, fx) = h.commit(commit_req(
        &m[0],
        1,
        vec![offset("t", 0, 10), offset("t", 1, 11)],
    ));
    let _ = h.ack(&fx);
    let (_, fx) = h.commit(commit_req(&m[1], 1, vec![offset("t", 1, 12)]));
    let _ = h.ack(&fx);
    let (_, fx) = h.commit(CommitRequest {
        group_id: "simple".into(),
        ..commit_req("", -1, vec![offset("u", 0, 5)])
    });
    let _ = h.ack(&fx);
    // "gone": joined, left, and removed ten minutes later.
    let member = {
        let id = h.request_id();
        let fx = h.c.join(
            id,
            JoinRequest {
                group_id: "gone".into(),
                ..join_req("")
            },
            h.now,
        );
        fx.join(id).member_id
    };
    let id = h.request_id();
    let fx = h.c.join(
        id,
        JoinRequest {
            group_id: "gone".into(),
            ..join_req(&member)
        },
        h.now,
    );
    h.log.extend(fx.records());
    let _ = h.advance(i64::from(DELAY));
    let id = h.request_id();
    let fx = h.c.leave(
        id,
        LeaveRequest {
            group_id: "gone".into(),
            members: vec![(member, None)],
        },
        h.now,
    );
    h.log.extend(fx.records());
    for _ in 0..67 {
        for member in &m {
            assert_eq!(h.heartbeat(member, 1), NONE);
        }
        let _ = h.advance(9_000);
    }
    assert_eq!(h.c.groups_count(), 2, "gone is gone");
    (h, m)
}

fn reloaded(h: &Harness, now: i64) -> Coordinator {
    let mut c = Coordinator::new(0, config(DELAY), 99);
    c.load(h.log.clone(), now);
    c
}

#[test]
fn loading_what_the_coordinator_wrote_reproduces_groups_offsets_and_assignments() {
    let (h, m) = written();
    let later = h.now + 60_000;
    let mut c = reloaded(&h, later);
    assert_eq!(c.groups_count(), 2);
    assert_eq!(c.list_groups(), h.c.list_groups());
    assert_eq!(c.group_summary(GROUP), h.c.group_summary(GROUP));
    assert_eq!(
        c.group_summary(GROUP).map(|s| (s.state, s.generation_id)),
        Some((GroupState::Stable, 1))
    );
    let ids = [GROUP.to_owned(), "simple".into(), "gone".into()];
    assert_eq!(c.describe_groups(&ids), h.c.describe_groups(&ids));
    assert_eq!(
        c.describe_groups(&ids)[0].members[1].assignment,
        Bytes::from_static(b"a-1")
    );
    for group in ["g", "simple"] {
        assert_eq!(
            c.fetch_offsets(group, None),
            h.c.fetch_offsets(group, None),
            "{group}"
        );
    }
    let offsets: Vec<i64> = c
        .fetch_offsets(GROUP, None)
        .partitions
        .iter()
        .map(|p| p.offset)
        .collect();
    assert_eq!(offsets, [10, 12]);

    // The members carry on where they were.
    let fx = c.heartbeat(RequestId(1), heartbeat_req(&m[0], 1), later);
    assert_eq!(fx.heartbeat(RequestId(1)), NONE);
    let fx = c.sync(RequestId(2), sync_req(&m[1], 1, &[]), later);
    assert_eq!(fx.sync(RequestId(2)).assignment, Bytes::from_static(b"a-1"));
}

#[test]
fn members_that_never_reach_the_new_coordinator_expire_after_their_session_timeout() {
    let (h, m) = written();
    let later = h.now + 60_000;
    let mut c = reloaded(&h, later);
    assert_eq!(c.next_deadline(), Some(later + i64::from(SESSION)));
    let fx = c.heartbeat(RequestId(1), heartbeat_req(&m[0], 1), later + 5_000);
    assert_eq!(fx.heartbeat(RequestId(1)), NONE);
    assert!(c.tick(later + i64::from(SESSION) - 1).is_empty());
    let _ = c.tick(later + i64::from(SESSION));
    let summary = c.group_summary(GROUP).expect("the group");
    assert_eq!(
        (summary.state, summary.members),
        (GroupState::PreparingRebalance, vec![m[0].clone()])
    );
    let fx = c.join(RequestId(2), join_req(&m[0]), later + i64::from(SESSION));
    let r = fx.join(RequestId(2));
    assert_eq!(
        (r.generation_id, r.leader.as_str(), r.members.len()),
        (2, m[0].as_str(), 1)
    );
}

#[test]
fn the_last_record_per_key_wins_and_tombstones_remove() {
    let value = |offset: i64| OffsetValue {
        offset,
        leader_epoch: 2,
        metadata: format!("v{offset}"),
        commit_timestamp_ms: T0,
    };
    let offset_record = |group: &str, partition: i32, v: Option<OffsetValue>| Record::Offset {
        group_id: group.into(),
        topic: "t".into(),
        partition,
        value: v,
    };
    let member = MemberValue {
        member_id: "m1".into(),
        group_instance_id: Some("i1".into()),
        client_id: "c".into(),
        client_host: "h".into(),
        rebalance_timeout_ms: REBALANCE,
        session_timeout_ms: SESSION,
        subscription: Bytes::from_static(b"sub"),
        assignment: Bytes::from_static(b"asg"),
    };
    let metadata = |generation_id: i32, members: Vec<MemberValue>| GroupValue {
        protocol_type: "consumer".into(),
        generation_id,
        protocol_name: Some("range".into()),
        leader: Some("m1".into()),
        state_timestamp_ms: T0,
        members,
    };
    let records = vec![
        offset_record("a", 0, Some(value(1))),
        offset_record("a", 0, Some(value(2))),
        offset_record("a", 1, Some(value(3))),
        offset_record("a", 1, None),
        Record::Group {
            group_id: "a".into(),
            value: Some(metadata(3, vec![member.clone()])),
        },
        Record::Group {
            group_id: "a".into(),
            value: Some(metadata(4, vec![member])),
        },
        Record::Group {
            group_id: "b".into(),
            value: Some(metadata(1, Vec::new())),
        },
        Record::Group {
            group_id: "b".into(),
            value: None,
        },
        offset_record("c", 0, Some(value(7))),
        offset_record("c", 0, None),
        Record::Group {
            group_id: "d".into(),
            value: Some(metadata(5, Vec::new())),
        },
        offset_record("d", 0, Some(value(9))),
    ];
    let mut c = Coordinator::new(0, GroupConfig::default(), 1);
    c.load(records, T0);
    let listed: Vec<(String, GroupState)> = c
        .list_groups()
        .into_iter()
        .map(|g| (g.group_id, g.state))
        .collect();
    assert_eq!(
        listed,
        [
            ("a".into(), GroupState::Stable),
            ("d".into(), GroupState::Empty)
        ]
    );
    let a = c.group_summary("a").expect("a");
    assert_eq!(
        (a.generation_id, a.leader.as_deref(), a.members),
        (4, Some("m1"), vec!["m1".to_owned()])
    );
    let fetched = c.fetch_offsets("a", None).partitions;
    assert_eq!(fetched.len(), 1);
    assert_eq!(
        (
            fetched[0].offset,
            fetched[0].leader_epoch,
            fetched[0].metadata.as_str()
        ),
        (2, 2, "v2")
    );
    let described = &c.describe_groups(&["a".into()])[0];
    assert_eq!(
        described.members[0].group_instance_id.as_deref(),
        Some("i1")
    );
    assert_eq!(
        (
            &described.members[0].metadata[..],
            &described.members[0].assignment[..]
        ),
        (&b"sub"[..], &b"asg"[..])
    );
    assert_eq!(c.group_summary("d").map(|d| d.generation_id), Some(5));
}

#[test]
fn a_loaded_empty_group_without_offsets_is_removed_at_the_first_tick() {
    let mut c = Coordinator::new(0, GroupConfig::default(), 1);
    let stale = GroupValue {
        protocol_type: "consumer".into(),
        generation_id: 3,
        state_timestamp_ms: T0,
        ..GroupValue::default()
    };
    c.load(
        vec![Record::Group {
            group_id: "old".into(),
            value: Some(stale),
        }],
        T0 + 3_600_000,
    );
    assert_eq!(
        c.group_summary("old").map(|s| s.state),
        Some(GroupState::Empty)
    );
    assert_eq!(
        c.next_deadline(),
        Some(T0 + 600_000),
        "its linger ended long ago"
    );
    let fx = c.tick(T0 + 3_600_000);
    assert_eq!(
        fx.records(),
        vec![Record::Group {
            group_id: "old".into(),
            value: None
        }]
    );
    assert_eq!(c.groups_count(), 0);
}

#[test]
fn a_group_loaded_over_the_size_limit_rebalances_and_refuses_the_members_beyond_it() {
    let member = |id: &str| MemberValue {
        member_id: id.into(),
        client_id: "c".into(),
        rebalance_timeout_ms: REBALANCE,
        session_timeout_ms: SESSION,
        subscription: Bytes::from_static(b"range-meta"),
        ..MemberValue::default()
    };
    let value = GroupValue {
        protocol_type: "consumer".into(),
        generation_id: 7,
        protocol_name: Some("range".into()),
        leader: Some("m1".into()),
        state_timestamp_ms: T0,
        members: vec![member("m1"), member("m2"), member("m3")],
    };
    let mut c = Coordinator::new(
        0,
        GroupConfig {
            max_group_size: 2,
            ..config(DELAY)
        },
        1,
    );
    c.load(
        vec![Record::Group {
            group_id: GROUP.into(),
            value: Some(value),
        }],
        T0,
    );
    assert_eq!(
        c.group_summary(GROUP).map(|s| s.state),
        Some(GroupState::PreparingRebalance)
    );
    let mut rejoin = |id: u64, member: &str| {
        let mut req = join_req(member);
        req.protocols = vec![Protocol {
            name: "range".into(),
            metadata: Bytes::from_static(b"range-meta"),
        }];
        c.join(RequestId(id), req, T0 + 1_000)
    };
    let _ = rejoin(1, "m1");
    let _ = rejoin(2, "m2");
    let fx = rejoin(3, "m3");
    assert_eq!(fx.join(RequestId(3)).error, GROUP_MAX_SIZE_REACHED);
    assert_eq!(
        fx.join(RequestId(1)).generation_id,
        8,
        "m3's refusal completes the join"
    );
    let summary = c.group_summary(GROUP).expect("the group");
    assert_eq!(summary.members, ["m1", "m2"]);
}
