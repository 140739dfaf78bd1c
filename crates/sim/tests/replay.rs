//! I10: one seed, one run. The same arguments in a fresh process give the
//! same trace hash (every operation's outcome and time, every fault), and
//! another seed gives another.

use std::process::Command;

fn trace_hash(seed: u64) -> String {
    let out = Command::new(env!("CARGO_BIN_EXE_syncline-sim"))
        .args(["--seed", &seed.to_string(), "--duration", "8"])
        .output()
        .expect("run syncline-sim");
    let text = String::from_utf8_lossy(&out.stdout).into_owned();
    assert!(
        out.status.success(),
        "{text}{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let line = text
        .lines()
        .find(|l| l.starts_with(&format!("seed {seed}:")))
        .unwrap_or_else(|| panic!("no report line: {text}"));
    let hash = line
        .split("trace ")
        .nth(1)
        .and_then(|r| r.split(':').next())
        .unwrap_or_else(|| panic!("no trace hash: {line}"));
    assert!(
        line.ends_with("VALID") && !line.contains("INVALID"),
        "{line}"
    );
    hash.to_string()
}

#[test]
fn a_seed_replays_to_the_same_trace_and_another_seed_does_not() {
    let first = trace_hash(11);
    assert_eq!(first, trace_hash(11), "seed 11 ran differently twice");
    assert_ne!(first, trace_hash(12));
}

#[test]
fn many_seeds_run_each_in_a_process_of_their_own_and_are_totalled() {
    let out = Command::new(env!("CARGO_BIN_EXE_syncline-sim"))
        .args(["--seed", "11", "--seeds", "2", "--duration", "8"])
        .output()
        .expect("run syncline-sim");
    let text = String::from_utf8_lossy(&out.stdout).into_owned();
    assert!(out.status.success(), "{text}");
    assert!(
        text.contains("seeds 11..13: 2 valid, 0 INVALID, 0 not run"),
        "{text}"
    );
    // The same trace as seed 11 alone: a run of many seeds replays one by one.
    let line = text
        .lines()
        .find(|l| l.starts_with("seed 11:"))
        .expect("seed 11");
    assert!(line.contains(&trace_hash(11)), "{line}");
}

#[test]
fn bad_arguments_name_the_problem_and_the_choices() {
    let cases: [(&[&str], &[&str]); 3] = [
        (&["--plant", "fire"], &["\"fire\"", "hw-truncation"]),
        (&["--faults", "crash,flood"], &["\"flood\"", "client-cut"]),
        (&["--brokers", "9"], &["--brokers", "3..=5"]),
    ];
    for (args, expected) in cases {
        let out = Command::new(env!("CARGO_BIN_EXE_syncline-sim"))
            .args(args)
            .output()
            .expect("run syncline-sim");
        let text = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(2), "{args:?}: {text}");
        for e in expected {
            assert!(text.contains(e), "{args:?}: {text}");
        }
    }
}
