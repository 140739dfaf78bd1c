//! The fault harness's bounded version, as CI runs it: random schedules of
//! overlapping faults under safe settings (every promise holds), and each named
//! scenario alone with the outcome its settings promise, the unsafe ones
//! included (the checker must find their losses: it can fail). The long runs
//! are `scripts/chaos.sh` (README, "Fault harness").

use std::time::Duration;

use syncline_chaos::checker::Kind;
use syncline_chaos::nemesis::ALL;
use syncline_chaos::run::{available, run, Options, Settings};
use syncline_chaos::scenarios::{run_scenario, Expected};

async fn random_run(seed: u64) {
    let options = Options {
        settings: Settings::Safe,
        seed,
        duration: Duration::from_secs(20),
        faults: ALL.to_vec(),
        brokers: 3,
        partitions: 3,
        verbose: true,
        flush_each: None,
    };
    let report = run(options).await.expect("the run could be carried out");
    print!("{report}");
    assert!(report.valid(), "safe settings broke a promise:\n{report}");
    assert!(
        report.faults_started().len() >= 2,
        "the nemesis did almost nothing:\n{report}"
    );
    assert!(
        report.verdict.acked > 100,
        "the workload did little:\n{report}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn safe_random_faults_seed_1_keep_every_promise() {
    random_run(1).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn safe_random_faults_seed_2_keep_every_promise() {
    random_run(2).await;
}

/// Runs scenario `name` and asserts its expected outcome; skipped (saying why)
/// where it needs faults this machine cannot inject.
async fn scenario(name: &str, settings: Settings, needs_root: bool, expected: Expected) {
    if needs_root {
        let (_, skipped) = available(&ALL);
        if !skipped.is_empty() {
            println!("skipped: {name} needs {}", skipped.join("; "));
            return;
        }
    }
    let report = run_scenario(name, settings)
        .await
        .expect("the scenario could be carried out");
    print!("{report}");
    assert_eq!(report.expected, expected);
    assert!(report.as_expected(), "unexpected outcome:\n{report}");
    if expected == Expected::Loss {
        assert!(
            report.verdict.counts()[&Kind::LostWrite] > 0,
            "the checker did not report the loss as a failure"
        );
        assert!(!report.verdict.valid());
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn jepsen_2013_with_min_isr_2_refuses_what_it_cannot_keep() {
    scenario("jepsen-2013", Settings::Safe, true, Expected::Valid).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn jepsen_2013_with_min_isr_1_and_unclean_election_loses_acknowledged_records() {
    scenario("jepsen-2013", Settings::Unsafe, true, Expected::Loss).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn last_replica_standing_with_min_isr_2_loses_nothing() {
    scenario(
        "last-replica-standing",
        Settings::Safe,
        false,
        Expected::Valid,
    )
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn last_replica_standing_with_min_isr_1_loses_what_it_alone_acknowledged() {
    scenario(
        "last-replica-standing",
        Settings::Unsafe,
        false,
        Expected::Loss,
    )
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn kip_101_a_restarted_follower_and_a_crashed_leader_lose_nothing() {
    scenario("kip-101", Settings::Safe, false, Expected::Valid).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_zombie_controller_changes_nothing_when_it_wakes() {
    scenario("zombie-controller", Settings::Safe, false, Expected::Valid).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn power_loss_of_every_broker_with_flush_messages_1_loses_nothing() {
    scenario("power-loss", Settings::Safe, true, Expected::Valid).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn power_loss_of_every_broker_with_the_default_flush_loses_the_unsynced_tail() {
    scenario("power-loss", Settings::Unsafe, true, Expected::Loss).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn kip_101_power_loss_of_both_replicas_with_flush_messages_1_loses_nothing() {
    scenario("kip-101-power", Settings::Safe, true, Expected::Valid).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn kip_101_power_loss_of_both_replicas_with_the_default_flush_loses_but_converges() {
    scenario("kip-101-power", Settings::Unsafe, true, Expected::Loss).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn kip_279_fast_failovers_with_unfetched_tails_lose_them_but_converge() {
    scenario("kip-279", Settings::Unsafe, true, Expected::Loss).await;
}
