//! The timing wheel as a pure data structure: no tokio, the clock is passed in.

use std::collections::BTreeMap;

use proptest::prelude::*;
use syncline_purgatory::{TimerKey, TimingWheel};

const DEADLINES_MS: [u64; 10] = [1, 19, 20, 21, 399, 400, 401, 8000, 1_000_000, 1_000_000_000];

fn drain(wheel: &mut TimingWheel<u64>, now_ms: u64) -> Vec<u64> {
    let mut fired = Vec::new();
    wheel.advance_and_drain(now_ms, &mut |value| fired.push(value));
    fired.sort_unstable();
    fired
}

/// Drives the wheel the way the reaper does: jump to each bucket expiration.
/// Returns when the entry fired and how many jumps it took.
fn drive_until_fired(wheel: &mut TimingWheel<u64>) -> (u64, usize) {
    let mut jumps = 0;
    loop {
        let next = wheel
            .next_bucket_expiration()
            .expect("a pending entry keeps a bucket queued");
        assert!(
            next > wheel.clock_ms(),
            "a bucket due in the past was left behind"
        );
        jumps += 1;
        if !drain(wheel, next).is_empty() {
            return (next, jumps);
        }
    }
}

#[test]
fn fires_exactly_at_the_deadline_at_every_level() {
    for start in [0, 7, 123_457, 1_000_000_000_000] {
        for delay in DEADLINES_MS {
            let deadline = start + delay;
            let mut wheel = TimingWheel::new(1, 20, start);
            wheel
                .insert(deadline, delay)
                .expect("deadline after the clock");
            assert!(
                drain(&mut wheel, deadline - 1).is_empty(),
                "{delay} ms fired early"
            );
            assert_eq!(
                drain(&mut wheel, deadline),
                vec![delay],
                "{delay} ms not fired on time"
            );
            assert!(wheel.is_empty());

            // The same, reaching the deadline bucket by bucket: the clock
            // jumps over empty time instead of walking it tick by tick.
            let mut wheel = TimingWheel::new(1, 20, start);
            wheel
                .insert(deadline, delay)
                .expect("deadline after the clock");
            let (fired_at, jumps) = drive_until_fired(&mut wheel);
            assert_eq!(fired_at, deadline, "start {start}, delay {delay} ms");
            assert!(jumps <= 8, "{jumps} jumps to reach {delay} ms");
            assert_eq!(wheel.next_bucket_expiration(), None);
        }
    }
}

#[test]
fn cascades_keep_every_entry_on_time() {
    let mut wheel = TimingWheel::new(1, 20, 0);
    for delay in DEADLINES_MS {
        wheel
            .insert(delay, delay)
            .expect("deadline after the clock");
    }
    let mut fired = Vec::new();
    while let Some(next) = wheel.next_bucket_expiration() {
        wheel.advance_and_drain(next, &mut |value| fired.push((value, next)));
    }
    let expected: Vec<(u64, u64)> = DEADLINES_MS.iter().map(|&d| (d, d)).collect();
    assert_eq!(fired, expected);
}

#[test]
fn refuses_deadlines_at_or_before_the_clock() {
    let mut wheel = TimingWheel::new(1, 20, 1000);
    assert_eq!(wheel.insert(999, 1), Err(1));
    assert_eq!(wheel.insert(1000, 2), Err(2));
    assert!(wheel.insert(1001, 3).is_ok());
    assert_eq!(drain(&mut wheel, 1500), vec![3]);
    assert_eq!(wheel.clock_ms(), 1500);
    assert_eq!(wheel.insert(1500, 4), Err(4));
    // A clock moved backwards is ignored.
    assert!(drain(&mut wheel, 10).is_empty());
    assert_eq!(wheel.clock_ms(), 1500);
}

#[test]
fn cancel_removes_once_and_stale_keys_cancel_nothing() {
    let mut wheel = TimingWheel::new(1, 20, 0);
    let first = wheel.insert(5, 1).expect("future");
    let second = wheel.insert(5, 2).expect("future");
    assert_eq!(wheel.cancel(first), Some(1));
    assert_eq!(wheel.cancel(first), None);
    // The slab reuses the first entry's slot: the old key must not reach it.
    let third = wheel.insert(5, 3).expect("future");
    assert_eq!(wheel.cancel(first), None);
    assert_eq!(wheel.len(), 2);
    assert_eq!(drain(&mut wheel, 5), vec![2, 3]);
    assert_eq!(wheel.cancel(second), None);
    assert_eq!(wheel.cancel(third), None);
    assert!(wheel.is_empty());
}

#[test]
fn keys_survive_cascades() {
    let mut wheel = TimingWheel::new(1, 20, 0);
    let key = wheel.insert(8000, 8000).expect("future");
    let neighbour = wheel.insert(8001, 8001).expect("future");
    // Moves both down from the level of 400 ms slots to finer ones.
    assert!(drain(&mut wheel, 7999).is_empty());
    assert_eq!(wheel.cancel(key), Some(8000));
    assert_eq!(drain(&mut wheel, 8001), vec![8001]);
    assert_eq!(wheel.cancel(neighbour), None);
}

#[test]
fn buckets_emptied_by_cancels_do_not_wake_the_caller() {
    let mut wheel = TimingWheel::new(1, 20, 0);
    let early = wheel.insert(10, 10).expect("future");
    wheel.insert(5000, 5000).expect("future");
    assert_eq!(wheel.next_bucket_expiration(), Some(10));
    wheel.cancel(early);
    let next = wheel.next_bucket_expiration().expect("5000 pending");
    assert!(next > 10 && next <= 5000, "{next}");
    // And the emptied slot takes new entries again.
    wheel.insert(10, 11).expect("future");
    assert_eq!(wheel.next_bucket_expiration(), Some(10));
    assert_eq!(drain(&mut wheel, 10), vec![11]);
}

#[test]
fn clock_far_in_the_future() {
    for start in [1_000_000_000_000, u64::MAX - 1_000_000, u64::MAX - 2] {
        let mut wheel = TimingWheel::new(1, 20, start);
        wheel.insert(start + 1, 1).expect("future");
        wheel.insert(u64::MAX - 1, 2).expect("future");
        wheel.insert(u64::MAX, 3).expect("future");
        let mut fired = Vec::new();
        while let Some(next) = wheel.next_bucket_expiration() {
            wheel.advance_and_drain(next, &mut |value| fired.push((value, next)));
        }
        fired.sort_unstable();
        assert_eq!(
            fired,
            vec![(1, start + 1), (2, u64::MAX - 1), (3, u64::MAX)]
        );
    }
    // From zero to the end of time: the levels whose span overflows a u64.
    let mut wheel = TimingWheel::new(1, 20, 0);
    wheel.insert(u64::MAX, 1).expect("future");
    wheel.insert(u64::MAX / 3, 2).expect("future");
    assert!(drain(&mut wheel, u64::MAX / 3 - 1).is_empty());
    assert_eq!(drain(&mut wheel, u64::MAX / 3), vec![2]);
    assert!(drain(&mut wheel, u64::MAX - 1).is_empty());
    assert_eq!(drain(&mut wheel, u64::MAX), vec![1]);
    // A coarse tick and the largest deadline it can express.
    let last = u64::MAX / 7 * 7;
    let mut wheel = TimingWheel::new(7, 2, 0);
    wheel.insert(last, 1).expect("future");
    assert!(drain(&mut wheel, last - 1).is_empty());
    assert_eq!(drain(&mut wheel, u64::MAX), vec![1]);
}

#[derive(Debug, Clone)]
enum Op {
    /// Insert with a deadline this far after the current time.
    Insert(u64),
    /// Cancel the n-th key handed out so far (modulo), stale or not.
    Cancel(usize),
    /// Move the clock forward by this much.
    Advance(u64),
    /// Move the clock to the next bucket expiration, as the reaper does.
    AdvanceToNextBucket,
}

fn op() -> impl Strategy<Value = Op> {
    prop_oneof![
        4 => prop_oneof![0..50u64, 0..1_000u64, 0..50_000u64, 0..10_000_000u64].prop_map(Op::Insert),
        2 => any::<usize>().prop_map(Op::Cancel),
        2 => prop_oneof![0..30u64, 0..3_000u64, 0..100_000u64].prop_map(Op::Advance),
        1 => Just(Op::AdvanceToNextBucket),
    ]
}

/// Replays `ops` on a wheel and on a `BTreeMap` model; with a tick of
/// `tick_ms`, an entry is due once the clock reaches its deadline rounded up
/// to the tick.
fn check_against_model(tick_ms: u64, wheel_size: u32, start_ms: u64, ops: Vec<Op>) {
    let mut wheel = TimingWheel::new(tick_ms, wheel_size, start_ms);
    let mut model: BTreeMap<u64, u64> = BTreeMap::new(); // id -> deadline
    let mut keys: Vec<(u64, TimerKey)> = Vec::new();
    let mut now = start_ms;
    let mut next_id = 0;
    let due = |deadline: u64| deadline.div_ceil(tick_ms) * tick_ms;
    for op in ops {
        match op {
            Op::Insert(delay) => {
                let deadline = now + delay;
                let id = next_id;
                next_id += 1;
                match wheel.insert(deadline, id) {
                    Ok(key) => {
                        assert!(due(deadline) > wheel.clock_ms(), "accepted a due deadline");
                        model.insert(id, deadline);
                        keys.push((id, key));
                    }
                    Err(back) => {
                        assert_eq!(back, id);
                        assert!(
                            due(deadline) <= wheel.clock_ms(),
                            "refused a future deadline"
                        );
                    }
                }
            }
            Op::Cancel(n) => {
                if keys.is_empty() {
                    continue;
                }
                let (id, key) = keys[n % keys.len()];
                assert_eq!(wheel.cancel(key), model.remove(&id).map(|_| id));
            }
            Op::Advance(by) => {
                now += by;
                let fired = drain(&mut wheel, now);
                check_fired(&mut model, fired, now, due);
            }
            Op::AdvanceToNextBucket => {
                if let Some(next) = wheel.next_bucket_expiration() {
                    let earliest = model.values().map(|&d| due(d)).min();
                    assert!(
                        earliest.is_some_and(|e| next <= e),
                        "bucket {next} after earliest {earliest:?}"
                    );
                    now = now.max(next);
                    let fired = drain(&mut wheel, now);
                    check_fired(&mut model, fired, now, due);
                } else {
                    assert!(model.is_empty(), "pending entries but no bucket queued");
                }
            }
        }
        assert_eq!(wheel.len(), model.len());
    }
    // Everything left fires, each at its time.
    while let Some(next) = wheel.next_bucket_expiration() {
        now = now.max(next);
        let fired = drain(&mut wheel, now);
        check_fired(&mut model, fired, now, due);
    }
    assert!(model.is_empty());
}

fn check_fired(
    model: &mut BTreeMap<u64, u64>,
    fired: Vec<u64>,
    now: u64,
    due: impl Fn(u64) -> u64,
) {
    let expected: Vec<u64> = model
        .iter()
        .filter(|&(_, &deadline)| due(deadline) <= now)
        .map(|(&id, _)| id)
        .collect();
    assert_eq!(fired, expected, "at {now}");
    for id in &fired {
        let deadline = model.remove(id).expect("fired entry is in the model");
        assert!(
            deadline <= now,
            "fired {id} early: deadline {deadline}, now {now}"
        );
    }
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(256))]

    #[test]
    fn matches_a_btreemap_model(
        start in prop_oneof![
            Just(0u64),
            0..1_000_000u64,
            Just(1_000_000_000_000u64),
            // Room for the ops' at most 400 * 10^7 ms, and the top levels'
            // overflowing spans.
            Just(u64::MAX - (1 << 40)),
        ],
        ops in prop::collection::vec(op(), 1..400),
    ) {
        check_against_model(1, 20, start, ops);
    }

    #[test]
    fn coarse_ticks_are_never_early_and_at_most_a_tick_late(
        tick_ms in 2..10u64,
        wheel_size in 2..30u32,
        start in 0..100_000u64,
        ops in prop::collection::vec(op(), 1..300),
    ) {
        check_against_model(tick_ms, wheel_size, start, ops);
    }
}
