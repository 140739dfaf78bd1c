//! Planted bugs are caught: the checker can fail. A bug is planted in every
//! broker of the run (`syncline_broker::planted`, or a test-only config), the
//! same run without it is the control. `scripts/test.sh` plants the
//! pre-KIP-101 truncation rule over hundreds of seeds in release.

use std::time::Duration;

use syncline_chaos::checker::Kind;
use syncline_sim::run::{run, Options, Plant};

syncline_sim::replace_os_randomness!();

/// A steady stream of small produces that never waits for the followers
/// (acks=1, four producers a millisecond apart), and no fault at all.
fn steady(planted: Vec<Plant>) -> Options {
    Options {
        faults: false,
        duration: Duration::from_secs(6),
        partitions: 1,
        acks_leader: true,
        producers: 4,
        pace: Duration::from_millis(1),
        planted,
        ..Options::new(1)
    }
}

#[test]
fn without_the_second_caught_up_rule_a_steady_load_shrinks_the_isr() {
    let report = run(&steady(vec![Plant::NoSecondCaughtUpRule])).expect("the simulation runs");
    let counts = report.verdict.counts();
    assert!(
        counts.get(&Kind::SpuriousShrink).is_some_and(|&n| n > 0),
        "the planted bug went unseen: {report}"
    );
    assert!(report
        .options
        .replay_command()
        .contains("--plant no-second-caught-up-rule"));
}

#[test]
fn with_both_caught_up_rules_the_same_load_keeps_the_isr_whole() {
    let report = run(&steady(Vec::new())).expect("the simulation runs");
    assert!(report.valid(), "{report}");
    assert!(
        report
            .trace
            .iter()
            .any(|l| l == "ISR shrinks seen: 0, none of a fault: 0"),
        "{:?}",
        report.trace
    );
    assert!(report.verdict.acked > 5_000, "{report}");
}
