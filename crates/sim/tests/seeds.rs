//! The simulation's bounded version in the test suite: a fixed set of seeds
//! with every fault kind, and the fault-free baseline. `scripts/test.sh` runs
//! hundreds more in release; `scripts/sim.sh` runs any number.

use std::time::Duration;

use syncline_sim::plan::Kind;
use syncline_sim::run::{run, Options, Report};

syncline_sim::replace_os_randomness!();

fn options(seed: u64, seconds: u64) -> Options {
    Options {
        duration: Duration::from_secs(seconds),
        ..Options::new(seed)
    }
}

/// The run kept every invariant; else its verdict and whole trace.
fn assert_valid(report: &Report) {
    assert!(
        report.valid(),
        "{report}\ntrace:\n{}",
        report.trace.join("\n")
    );
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
        // Both topics written and read, by producers inside and beside the
        // promise.
        for topic in ["sim", "sim-late"] {
            let line = topic_line(&report.trace, topic);
            assert!(
                !line.contains(" 0 acknowledged") && !line.contains(" 0 polls"),
                "{line}"
            );
            assert!(!line.contains(" 0 beside"), "{line}");
        }
        faults += report.faults;
    }
    assert!(faults >= 10, "{faults} faults in three seeds");
}

/// The trace's summary line of `topic`.
fn topic_line<'a>(trace: &'a [String], topic: &str) -> &'a str {
    let prefix = format!("topic {topic}: ");
    trace
        .iter()
        .find(|l| l.starts_with(&prefix))
        .unwrap_or_else(|| panic!("no line for {topic}: {trace:?}"))
}

/// Faults aimed at a role (partition 0's leader, the active controller) hit
/// the broker that holds it, and the cluster keeps every promise through them.
#[test]
fn targeted_faults_find_their_targets() {
    let report = run(&Options {
        kinds: vec![Kind::LeaderCrash, Kind::ControllerPause, Kind::Bridge],
        ..options(11, 10)
    })
    .expect("the simulation runs");
    assert_valid(&report);
    let resolved = |prefix: &str, then: &str| {
        report
            .trace
            .iter()
            .any(|l| l.contains(prefix) && l.contains(then))
    };
    assert!(
        resolved("crash partition 0's leader: ", "crash broker "),
        "{:?}",
        report.trace
    );
    assert!(
        resolved("pause the active controller: ", "pause broker "),
        "{:?}",
        report.trace
    );
    assert!(
        resolved("from its followers: ", " <-> "),
        "{:?}",
        report.trace
    );
}

/// A disk that fails fsyncs fails the broker's log; the broker stops (as
/// Kafka's does when its log directory fails), its supervisor restarts it,
/// and once the disk works again it catches up: every promise kept.
#[test]
fn a_failing_disk_stops_the_broker_and_a_restart_recovers_it() {
    let report = run(&Options {
        kinds: vec![Kind::DiskError],
        ..options(5, 10)
    })
    .expect("the simulation runs");
    assert_valid(&report);
    let saw = |what: &str| report.trace.iter().any(|l| l.contains(what));
    assert!(saw("fail (EIO)"), "{:?}", report.trace);
    assert!(saw("stopped on its own"), "{:?}", report.trace);
    assert!(saw("restarted by its supervisor"), "{:?}", report.trace);
}

/// Seed 300494: a broker whose fsync failed as the faults ended was still in
/// the ISR, holding the high watermark back, when the run read the final log;
/// the group then read the records committed after it. The final log is read
/// once the leader's high watermark reaches its log end.
#[test]
fn the_final_log_is_read_once_the_leader_has_committed_all_of_it() {
    let report = run(&options(300494, 10)).expect("the simulation runs");
    assert_valid(&report);
    let saw = |what: &str| report.trace.iter().any(|l| l.contains(what));
    assert!(saw("broker 2 stopped on its own"), "{:?}", report.trace);
}

/// Seed 307851: partition 0's leader at epoch 1 wrote an idempotent batch and
/// crashed before answering; a broker still loading its metadata then answered
/// the topic unknown, and the deposed leader of epoch 0, cut off from the
/// controller, answered as leader. The producer, its leader epochs forgotten
/// with the topic, sent the batch there; the refusal (out of order) read as a
/// gap, and the batch was written twice under a new producer epoch. The
/// client now keeps the newest leader epoch seen through such answers.
#[test]
fn a_deposed_leader_is_not_asked_again_after_the_topic_read_unknown() {
    let report = run(&options(307851, 10)).expect("the simulation runs");
    assert_valid(&report);
    let saw = |what: &str| report.trace.iter().any(|l| l.contains(what));
    assert!(
        saw("crash the active controller: crash broker 2"),
        "{:?}",
        report.trace
    );
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
