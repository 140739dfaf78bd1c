//! The simulation's bounded version in the test suite: a fixed set of seeds
//! with every fault kind, and the fault-free baseline. `scripts/test.sh` runs
//! hundreds more in release; `scripts/sim.sh` runs any number.

use std::time::Duration;

use syncline_sim::run::{run, Options};

syncline_sim::replace_os_randomness!();

fn options(seed: u64, seconds: u64) -> Options {
    Options {
        duration: Duration::from_secs(seconds),
        ..Options::new(seed)
    }
}

#[test]
fn fixed_seeds_keep_every_invariant_through_overlapping_faults() {
    let mut faults = 0;
    for seed in [1, 2, 3] {
        let report = run(&options(seed, 10)).expect("the simulation runs");
        assert!(
            report.valid(),
            "{report}\ntrace:\n{}",
            report.trace.join("\n")
        );
        assert!(report.verdict.acked > 100, "{report}");
        assert!(report.verdict.polls > 0, "{report}");
        assert!(report.healed.is_ok(), "{report}");
        faults += report.faults;
    }
    assert!(faults >= 10, "{faults} faults in three seeds");
}

#[test]
fn without_faults_every_send_is_acknowledged_and_read() {
    let report = run(&Options {
        faults: false,
        ..options(7, 5)
    })
    .expect("the simulation runs");
    assert!(report.valid(), "{report}");
    let v = &report.verdict;
    assert_eq!((v.failed, v.unknown), (0, 0), "{report}");
    assert!(v.acked > 100, "{report}");
    assert_eq!(v.records, v.acked, "{report}");
    assert_eq!(report.faults, 0);
}

#[test]
fn a_report_names_the_command_that_replays_its_seed() {
    let o = Options {
        brokers: 5,
        faults: false,
        ..options(99, 30)
    };
    assert_eq!(
        o.replay_command(),
        "scripts/sim.sh --seed 99 --duration 30 --brokers 5 --no-faults --trace"
    );
}
