//! `next_deadline` and `tick`: when the coordinator needs the time, and what it does.

use syncline_group::error::*;
use syncline_group::*;

use crate::support::*;

#[test]
fn next_deadline_is_the_earliest_deadline_and_ticking_before_it_does_nothing() {
    let mut h = Harness::delayed();
    assert_eq!(h.c.next_deadline(), None);
    let a = h.member_id("a");
    assert_eq!(
        h.c.next_deadline(),
        Some(T0 + i64::from(SESSION)),
        "the handed-out id"
    );
    let _ = h.advance(1_000);
    let (_, _) = h.join(join_req(&a));
    assert_eq!(
        h.c.next_deadline(),
        Some(T0 + 1_000 + i64::from(DELAY)),
        "the initial delay"
    );
    assert!(h.c.tick(T0 + 1_000 + i64::from(DELAY) - 1).is_empty());
    let _ = h.advance(i64::from(DELAY));
    let joined = h.now;
    // Completing: the member's session, before the sync phase's end.
    assert_eq!(h.c.next_deadline(), Some(joined + i64::from(SESSION)));
    let _ = h.advance(9_000);
    assert_eq!(h.heartbeat(&a, 1), NONE);
    assert_eq!(
        h.c.next_deadline(),
        Some(h.now + i64::from(SESSION)),
        "moved by the heartbeat"
    );
    for _ in 0..2 {
        let _ = h.advance(9_000);
        assert_eq!(h.heartbeat(&a, 1), NONE);
    }
    // The sync phase (rebalance timeout) now comes first.
    assert_eq!(h.c.next_deadline(), Some(joined + i64::from(REBALANCE)));
    let (_, fx) = h.sync(sync_req(&a, 1, &[(&a, "p")]));
    let _ = h.ack(&fx);
    assert_eq!(
        h.c.next_deadline(),
        Some(h.now + i64::from(SESSION)),
        "synced: only the session is left"
    );
}

#[test]
fn a_late_tick_fires_everything_that_passed_at_once() {
    let mut h = Harness::delayed();
    let m = h.stable_group(2);
    let (_, fx) = h.commit(commit_req(&m[0], 1, vec![offset("t", 0, 1)]));
    let _ = h.ack(&fx);
    // Both sessions ran out long ago: both go, and the group is Empty (generation 2).
    let fx = h.advance(100_000);
    assert_eq!((h.state(), h.generation()), (GroupState::Empty, 2));
    assert!(
        matches!(fx.records().as_slice(), [Record::Group { value: Some(v), .. }] if v.generation_id == 2 && v.members.is_empty())
    );
    assert_eq!(
        h.c.next_deadline(),
        Some(h.now + GroupConfig::default().offsets_retention_ms)
    );
}

#[test]
fn a_new_member_whose_join_is_held_too_long_is_dropped() {
    // Kafka drops a first-time joiner whose join is still held after five minutes.
    let mut h = Harness::delayed();
    let m = h.stable_group(1);
    let slow = h.member_id("slow");
    let mut req = join_req(&slow);
    req.rebalance_timeout_ms = 600_000;
    let (slow_join, _) = h.join(req);
    // The old member neither rejoins nor lets its session lapse.
    for _ in 0..33 {
        let _ = h.advance(9_000);
        assert_eq!(h.heartbeat(&m[0], 1), REBALANCE_IN_PROGRESS);
    }
    let fx = h.advance(3_000);
    assert_eq!(fx.join(slow_join).error, UNKNOWN_MEMBER_ID);
    assert_eq!(h.summary().members, vec![m[0].clone()]);
}
