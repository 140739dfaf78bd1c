//! OffsetCommit and OffsetFetch, and offset retention.

use syncline_group::error::*;
use syncline_group::*;

use crate::support::*;

const RETENTION: i64 = 7 * 24 * 60 * 60 * 1_000;
const LINGER: i64 = 600_000;

fn fetched(h: &Harness, partitions: &[(&str, i32)]) -> Vec<(i64, String)> {
    let mut by_topic: Vec<(String, Vec<i32>)> = Vec::new();
    for (topic, partition) in partitions {
        by_topic.push(((*topic).to_owned(), vec![*partition]));
    }
    h.c.fetch_offsets(GROUP, Some(by_topic))
        .partitions
        .into_iter()
        .map(|p| {
            assert_eq!(p.error, NONE);
            (p.offset, p.metadata)
        })
        .collect()
}

fn codes(r: &CommitResponse) -> Vec<i16> {
    r.partitions.iter().map(|(_, _, code)| *code).collect()
}

#[test]
fn a_commit_in_a_stable_group_is_visible_only_after_its_append_succeeds() {
    let mut h = Harness::delayed();
    let m = h.stable_group(1);
    let (id, fx) = h.commit(commit_req(
        &m[0],
        1,
        vec![offset("t", 0, 5), offset("t", 1, 7)],
    ));
    assert!(fx.replies.is_empty());
    assert_eq!(
        fx.records(),
        vec![
            Record::Offset {
                group_id: GROUP.into(),
                topic: "t".into(),
                partition: 0,
                value: Some(OffsetValue {
                    offset: 5,
                    leader_epoch: -1,
                    metadata: "m5".into(),
                    commit_timestamp_ms: h.now
                }),
            },
            Record::Offset {
                group_id: GROUP.into(),
                topic: "t".into(),
                partition: 1,
                value: Some(OffsetValue {
                    offset: 7,
                    leader_epoch: -1,
                    metadata: "m7".into(),
                    commit_timestamp_ms: h.now
                }),
            },
        ]
    );
    assert_eq!(
        fetched(&h, &[("t", 0), ("t", 1)]),
        [(-1, String::new()), (-1, String::new())]
    );
    let done = h.ack(&fx);
    assert_eq!(
        done.commit(id).partitions,
        vec![("t".into(), 0, NONE), ("t".into(), 1, NONE)]
    );
    assert_eq!(
        fetched(&h, &[("t", 0), ("t", 1)]),
        [(5, "m5".into()), (7, "m7".into())]
    );
    let all = h.c.fetch_offsets(GROUP, None).partitions;
    assert_eq!(all.len(), 2);
    assert_eq!((all[0].leader_epoch, all[1].partition), (-1, 1));
}

#[test]
fn a_failed_commit_append_is_not_applied_and_answers_the_mapped_error() {
    #[rustfmt::skip]
    let cases: &[(&str, i16, i16)] = &[
        ("not the leader any more", NOT_LEADER_OR_FOLLOWER,           NOT_COORDINATOR),
        ("storage failed",          KAFKA_STORAGE_ERROR,              NOT_COORDINATOR),
        ("the ISR is too small",    NOT_ENOUGH_REPLICAS,              COORDINATOR_NOT_AVAILABLE),
        ("the ISR shrank",          NOT_ENOUGH_REPLICAS_AFTER_APPEND, COORDINATOR_NOT_AVAILABLE),
        ("acks timed out",          REQUEST_TIMED_OUT,                COORDINATOR_NOT_AVAILABLE),
        ("no such partition",       UNKNOWN_TOPIC_OR_PARTITION,       COORDINATOR_NOT_AVAILABLE),
        ("too large",               MESSAGE_TOO_LARGE,                INVALID_COMMIT_OFFSET_SIZE),
        ("batch too large",         RECORD_LIST_TOO_LARGE,            INVALID_COMMIT_OFFSET_SIZE),
        ("invalid fetch size",      INVALID_FETCH_SIZE,               INVALID_COMMIT_OFFSET_SIZE),
        ("anything else",           87,                               UNKNOWN_SERVER_ERROR),
    ];
    for &(what, append_error, expected) in cases {
        let mut h = Harness::delayed();
        let m = h.stable_group(1);
        let (_, fx) = h.commit(commit_req(&m[0], 1, vec![offset("t", 0, 1)]));
        let _ = h.ack(&fx);
        let (id, fx) = h.commit(commit_req(
            &m[0],
            1,
            vec![offset("t", 0, 2), offset("u", 0, 3)],
        ));
        let failed = h.complete(&fx, Err(append_error));
        assert_eq!(codes(&failed.commit(id)), [expected, expected], "{what}");
        assert_eq!(
            fetched(&h, &[("t", 0), ("u", 0)]),
            [(1, "m1".into()), (-1, String::new())],
            "{what}"
        );
        assert_eq!(
            h.state(),
            GroupState::Stable,
            "{what}: the group is not affected"
        );
    }
}

#[test]
fn a_commit_without_a_generation_is_taken_for_an_unknown_or_empty_group_only() {
    let mut h = Harness::delayed();
    // Unknown: the group is created to hold the offsets.
    let (id, fx) = h.commit(commit_req("", -1, vec![offset("t", 0, 9)]));
    assert_eq!(h.state(), GroupState::Empty);
    let done = h.ack(&fx);
    assert_eq!(codes(&done.commit(id)), [NONE]);
    assert_eq!(fetched(&h, &[("t", 0)]), [(9, "m9".into())]);
    assert_eq!(
        h.c.list_groups(),
        vec![ListedGroup {
            group_id: GROUP.into(),
            protocol_type: String::new(),
            state: GroupState::Empty
        }]
    );

    // Members now: only they commit.
    let m = h.stable_group(1);
    let (id, fx) = h.commit(commit_req("", -1, vec![offset("t", 0, 10)]));
    assert_eq!(codes(&fx.commit(id)), [UNKNOWN_MEMBER_ID]);

    // Empty again (generation 2): simple commits are back.
    let _ = h.leave(&[&m[0]]);
    let (id, fx) = h.commit(commit_req("", -1, vec![offset("t", 0, 11)]));
    let done = h.ack(&fx);
    assert_eq!(codes(&done.commit(id)), [NONE]);
    assert_eq!(fetched(&h, &[("t", 0)]), [(11, "m11".into())]);
}

#[test]
fn refused_commits_change_nothing() {
    let mut h = Harness::delayed();
    let m = h.stable_group(2);
    let a = m[0].as_str();
    let unknown_group = |member: &str, generation: i32| CommitRequest {
        group_id: "other".into(),
        ..commit_req(member, generation, vec![offset("t", 0, 1)])
    };
    #[rustfmt::skip]
    let cases: Vec<(&str, CommitRequest, i16)> = vec![
        ("an unknown group with a generation",  unknown_group("x", 1),                              ILLEGAL_GENERATION),
        ("an unknown group with a member id",   unknown_group("x", -1),                             UNKNOWN_MEMBER_ID),
        ("an unknown member",                   commit_req("x", 1, vec![offset("t", 0, 1)]),        UNKNOWN_MEMBER_ID),
        ("a stale generation",                  commit_req(a, 0, vec![offset("t", 0, 1)]),          ILLEGAL_GENERATION),
        ("a member without its generation",     commit_req(a, -1, vec![offset("t", 0, 1)]),         ILLEGAL_GENERATION),
    ];
    for (what, req, expected) in cases {
        let (id, fx) = h.commit(req);
        assert_eq!(codes(&fx.commit(id)), [expected], "{what}");
        assert!(fx.appends.is_empty(), "{what}");
    }
    assert_eq!(h.c.groups_count(), 1, "no group was created");
    assert_eq!(fetched(&h, &[("t", 0)]), [(-1, String::new())]);
}

#[test]
fn commits_are_refused_while_completing_but_taken_while_preparing_a_rebalance() {
    let mut h = Harness::delayed();
    let m = h.stable_group(2);
    // Preparing: an eager consumer commits what it is about to revoke.
    let (a_join, _) = h.join(join_req(&m[0]));
    let (id, fx) = h.commit(commit_req(&m[1], 1, vec![offset("t", 0, 4)]));
    assert_eq!(codes(&h.ack(&fx).commit(id)), [NONE]);
    // Completing: joined into generation 2, not yet assigned.
    let (_, fx) = h.join(join_req(&m[1]));
    assert_eq!(fx.join(a_join).generation_id, 2);
    let (id, fx) = h.commit(commit_req(&m[1], 2, vec![offset("t", 0, 5)]));
    assert_eq!(codes(&fx.commit(id)), [REBALANCE_IN_PROGRESS]);
    assert_eq!(fetched(&h, &[("t", 0)]), [(4, "m4".into())]);
}

#[test]
fn metadata_longer_than_the_limit_fails_only_its_partition() {
    let mut h = Harness::new(GroupConfig {
        offset_metadata_max_bytes: 4,
        ..config(DELAY)
    });
    let m = h.stable_group(1);
    let with_metadata = |partition: i32, metadata: &str| CommitOffset {
        metadata: Some(metadata.into()),
        ..offset("t", partition, 1)
    };
    let req = commit_req(
        &m[0],
        1,
        vec![
            with_metadata(0, "1234"),
            with_metadata(1, "12345"),
            // Four UTF-16 code units (eight bytes): Kafka counts the former.
            with_metadata(2, "éééé"),
            CommitOffset {
                metadata: None,
                ..offset("t", 3, 1)
            },
        ],
    );
    let (id, fx) = h.commit(req);
    let stored: Vec<i32> = fx
        .records()
        .iter()
        .map(|r| match r {
            Record::Offset { partition, .. } => *partition,
            other => panic!("{other:?}"),
        })
        .collect();
    assert_eq!(stored, [0, 2, 3]);
    let done = h.ack(&fx);
    assert_eq!(
        codes(&done.commit(id)),
        [NONE, OFFSET_METADATA_TOO_LARGE, NONE, NONE]
    );
    assert_eq!(fetched(&h, &[("t", 3)]), [(1, String::new())]);

    // Nothing valid: answered at once, nothing appended.
    let (id, fx) = h.commit(commit_req(&m[0], 1, vec![with_metadata(0, "too long")]));
    assert!(fx.appends.is_empty());
    assert_eq!(codes(&fx.commit(id)), [OFFSET_METADATA_TOO_LARGE]);
}

#[test]
fn fetching_an_unknown_group_or_partition_answers_minus_one() {
    let mut h = Harness::delayed();
    let unknown =
        h.c.fetch_offsets("nobody", Some(vec![("t".into(), vec![0, 1])]));
    assert_eq!(unknown.error, NONE);
    assert_eq!(
        unknown.partitions,
        vec![
            FetchedOffset {
                topic: "t".into(),
                partition: 0,
                offset: -1,
                leader_epoch: -1,
                metadata: String::new(),
                error: NONE
            },
            FetchedOffset {
                topic: "t".into(),
                partition: 1,
                offset: -1,
                leader_epoch: -1,
                metadata: String::new(),
                error: NONE
            },
        ]
    );
    assert!(h.c.fetch_offsets("nobody", None).partitions.is_empty());

    let (_, fx) = h.commit(CommitRequest {
        offsets: vec![CommitOffset {
            leader_epoch: 3,
            ..offset("t", 0, 8)
        }],
        ..commit_req("", -1, Vec::new())
    });
    let _ = h.ack(&fx);
    let r = h.c.fetch_offsets(
        GROUP,
        Some(vec![("t".into(), vec![0, 1]), ("u".into(), vec![0])]),
    );
    let got: Vec<(&str, i32, i64, i32)> = r
        .partitions
        .iter()
        .map(|p| (p.topic.as_str(), p.partition, p.offset, p.leader_epoch))
        .collect();
    assert_eq!(got, [("t", 0, 8, 3), ("t", 1, -1, -1), ("u", 0, -1, -1)]);
}

#[test]
fn a_later_commit_wins_even_if_its_append_is_acknowledged_first() {
    let mut h = Harness::delayed();
    let m = h.stable_group(1);
    let (_, first) = h.commit(commit_req(&m[0], 1, vec![offset("t", 0, 1)]));
    let (_, second) = h.commit(commit_req(&m[0], 1, vec![offset("t", 0, 2)]));
    let _ = h.ack(&second);
    let _ = h.ack(&first);
    assert_eq!(fetched(&h, &[("t", 0)]), [(2, "m2".into())]);
}

#[test]
fn a_partition_committed_twice_in_one_request_keeps_the_later_offset_as_a_replay_would() {
    let mut h = Harness::delayed();
    let m = h.stable_group(1);
    let (id, fx) = h.commit(commit_req(
        &m[0],
        1,
        vec![offset("t", 0, 1), offset("t", 0, 2)],
    ));
    let done = h.ack(&fx);
    assert_eq!(codes(&done.commit(id)), [NONE, NONE]);
    assert_eq!(fetched(&h, &[("t", 0)]), [(2, "m2".into())]);
    let mut reloaded = Coordinator::new(0, config(DELAY), 1);
    reloaded.load(h.log.clone(), h.now);
    assert_eq!(
        reloaded.fetch_offsets(GROUP, None),
        h.c.fetch_offsets(GROUP, None)
    );
}

#[test]
fn offsets_of_a_group_that_only_stores_offsets_expire_retention_after_their_commit() {
    let mut h = Harness::delayed();
    let (_, fx) = h.commit(commit_req("", -1, vec![offset("t", 0, 1)]));
    let _ = h.ack(&fx);
    assert!(h.advance(24 * 60 * 60 * 1_000).is_empty());
    let (_, fx) = h.commit(commit_req("", -1, vec![offset("t", 1, 1)]));
    let _ = h.ack(&fx);
    assert_eq!(h.c.next_deadline(), Some(T0 + RETENTION));

    let fx = h.advance(RETENTION - 24 * 60 * 60 * 1_000);
    assert_eq!(
        fx.records(),
        vec![Record::Offset {
            group_id: GROUP.into(),
            topic: "t".into(),
            partition: 0,
            value: None
        }]
    );
    assert_eq!(
        fetched(&h, &[("t", 0), ("t", 1)]),
        [(-1, String::new()), (1, "m1".into())]
    );
    assert_eq!(h.c.next_deadline(), Some(h.now + 24 * 60 * 60 * 1_000));

    // The last offset goes, and the group with it: it never had metadata to remove.
    let fx = h.advance(24 * 60 * 60 * 1_000);
    assert_eq!(
        fx.records(),
        vec![Record::Offset {
            group_id: GROUP.into(),
            topic: "t".into(),
            partition: 1,
            value: None
        }]
    );
    assert_eq!(h.c.groups_count(), 0);
    assert_eq!(h.c.next_deadline(), None);
}

#[test]
fn an_emptied_groups_offsets_are_kept_for_the_retention_counted_from_when_it_emptied() {
    const DAY: i64 = 24 * 60 * 60 * 1_000;
    let mut h = Harness::new(GroupConfig {
        max_session_timeout_ms: i32::MAX,
        ..config(0)
    });
    let a = h.member_id("a");
    let mut req = join_req(&a);
    req.session_timeout_ms = i32::MAX;
    let (id, fx) = h.join(req);
    assert_eq!(fx.join(id).generation_id, 1);
    let (_, fx) = h.sync(sync_req(&a, 1, &[(&a, "p")]));
    let _ = h.ack(&fx);
    let (_, fx) = h.commit(commit_req(&a, 1, vec![offset("t", 0, 1)]));
    let _ = h.ack(&fx);
    // The consumer runs for 8 days without committing again, then stops.
    for _ in 0..2 {
        assert!(h.advance(4 * DAY).is_empty());
        assert_eq!(h.heartbeat(&a, 1), NONE);
    }
    assert_eq!(
        fetched(&h, &[("t", 0)]),
        [(1, "m1".into())],
        "a Stable group's offsets stay"
    );
    let _ = h.leave(&[&a]);
    let emptied = h.now;
    assert_eq!(h.c.next_deadline(), Some(emptied + RETENTION));
    assert!(h.advance(RETENTION - 1).is_empty());
    let fx = h.advance(1);
    assert_eq!(
        fx.records(),
        vec![
            Record::Offset {
                group_id: GROUP.into(),
                topic: "t".into(),
                partition: 0,
                value: None
            },
            Record::Group {
                group_id: GROUP.into(),
                value: None
            },
        ]
    );
    assert_eq!(fx.appends.len(), 1, "removed in one batch");
    assert_eq!(
        h.c.describe_groups(&[GROUP.into()])[0].state,
        GroupState::Dead
    );
}

#[test]
fn an_empty_group_without_offsets_is_removed_ten_minutes_after_it_emptied() {
    let mut h = Harness::delayed();
    let m = h.stable_group(1);
    let _ = h.leave(&[&m[0]]);
    assert_eq!(h.c.next_deadline(), Some(h.now + LINGER));
    assert!(h.advance(LINGER - 1).is_empty());
    assert_eq!(h.state(), GroupState::Empty);
    let fx = h.advance(1);
    assert_eq!(
        fx.records(),
        vec![Record::Group {
            group_id: GROUP.into(),
            value: None
        }]
    );
    assert_eq!(h.c.groups_count(), 0);
}

#[test]
fn a_commit_in_flight_keeps_its_offset_and_group_from_expiring() {
    let mut h = Harness::delayed();
    let (_, fx) = h.commit(commit_req("", -1, vec![offset("t", 0, 1)]));
    let _ = h.ack(&fx);
    let (id, in_flight) = h.commit(commit_req("", -1, vec![offset("t", 0, 2)]));
    assert_eq!(
        h.c.next_deadline(),
        None,
        "nothing to expire while the commit is pending"
    );
    assert!(h.advance(RETENTION + LINGER).is_empty());
    let done = h.ack(&in_flight);
    assert_eq!(codes(&done.commit(id)), [NONE]);
    assert_eq!(fetched(&h, &[("t", 0)]), [(2, "m2".into())]);
    // Committed at T0: its retention ran out while it was in flight.
    assert_eq!(h.c.next_deadline(), Some(T0 + RETENTION));
    let fx = h.advance(0);
    assert_eq!(fx.records().len(), 1, "the offset's tombstone");
    assert_eq!(h.c.groups_count(), 0);
}

#[test]
fn a_failed_commit_that_created_a_group_leaves_no_group_behind() {
    let mut h = Harness::delayed();
    let (id, fx) = h.commit(commit_req("", -1, vec![offset("t", 0, 1)]));
    assert_eq!(h.c.groups_count(), 1);
    let failed = h.complete(&fx, Err(NOT_LEADER_OR_FOLLOWER));
    assert_eq!(codes(&failed.commit(id)), [NOT_COORDINATOR]);
    assert_eq!(h.c.groups_count(), 0);
}
