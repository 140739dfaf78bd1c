//! `syncline-chaos`'s arguments: bad ones are refused at once, with exit
//! status 2 and a message naming the problem and the choices, before any
//! cluster starts.

use std::process::Command;

fn chaos(args: &[&str]) -> (i32, String) {
    let out = Command::new(env!("CARGO_BIN_EXE_syncline-chaos"))
        .args(args)
        .output()
        .expect("run syncline-chaos");
    let text = format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    (out.status.code().unwrap_or(-1), text)
}

#[test]
fn bad_arguments_exit_2_naming_the_problem_and_the_choices() {
    let cases: [(&[&str], &[&str]); 6] = [
        (
            &["--faults", "kill,fire"],
            &["\"fire\"", "power-loss", "clock"],
        ),
        (
            &["--scenario", "kip-9000"],
            &["\"kip-9000\"", "jepsen-2013"],
        ),
        (&["--brokers", "4"], &["3 or 5"]),
        (&["--settings", "reckless"], &["reckless", "safe", "unsafe"]),
        (&["--scenario", "kip-101", "--seed", "3"], &["--seed"]),
        (&["--flush", "sometimes"], &["sometimes", "each", "never"]),
    ];
    for (args, words) in cases {
        let (code, text) = chaos(args);
        assert_eq!(code, 2, "{args:?}: {text}");
        for w in words {
            assert!(text.contains(w), "{args:?}: {w:?} not in: {text}");
        }
    }
}

#[test]
fn a_scenario_with_one_variant_names_its_settings() {
    let (code, text) = chaos(&["--scenario", "kip-279", "--settings", "safe"]);
    assert_eq!(code, 2, "{text}");
    assert!(text.contains("--settings unsafe"), "{text}");
}

#[test]
fn help_lists_every_fault_and_scenario() {
    let (code, text) = chaos(&["--help"]);
    assert_eq!(code, 0, "{text}");
    for name in [
        "disk-full",
        "power-loss",
        "bridge",
        "kip-101-power",
        "zombie-controller",
    ] {
        assert!(text.contains(name), "{name} not in --help:\n{text}");
    }
}
