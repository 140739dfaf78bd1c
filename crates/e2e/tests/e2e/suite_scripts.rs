//! The shell that runs the suite (scripts/phases.sh, sourced by
//! scripts/test.sh): what it reports must be what happened.

use std::path::Path;
use std::process::Command;

/// Runs `body` in bash from the repository's root with scripts/lib.sh and
/// scripts/phases.sh sourced, in a pid namespace of its own (where this test
/// may choose the next pid: /proc/sys/kernel/ns_last_pid). Its stdout, or a
/// panic with both streams when it fails.
fn in_pid_namespace(body: &str) -> String {
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("../..");
    let script = format!(
        "set -euo pipefail\n. scripts/lib.sh\n. scripts/phases.sh\nphases_begin\n{body}\nrm -f \"$SYNCLINE_PHASES\"\n"
    );
    let out = Command::new("unshare")
        .args([
            "--user",
            "--map-root-user",
            "--pid",
            "--fork",
            "--mount-proc",
            "bash",
            "-c",
            &script,
        ])
        .current_dir(root)
        .env_remove("SYNCLINE_PHASES")
        .output()
        .expect("unshare (util-linux) runs");
    let stdout = String::from_utf8_lossy(&out.stdout).into_owned();
    assert!(
        out.status.success(),
        "{}\nstdout:\n{stdout}\nstderr:\n{}",
        out.status,
        String::from_utf8_lossy(&out.stderr)
    );
    stdout
}

/// A background job's status survives its pid going to a later child of the
/// same shell. A full run starts more processes than pid_max (32,768 on the
/// CI machine), so a job that ended early (the release build) may have its
/// pid given to, say, a `grep` that found nothing; `wait` then answers with
/// that child's status, and a run whose every phase passed once failed as
/// "release build".
#[test]
fn await_reports_a_jobs_own_status_after_its_pid_is_reused() {
    let out = in_pid_namespace(
        r#"
passes() { true; }
fails() { return 3; }
background passing passes
background failing fails
pid=${BG_PID[passing]}
# Give the passing job's pid, once it is free, to a child that fails.
tries=0
until
    echo $((pid - 1)) >/proc/sys/kernel/ns_last_pid
    /bin/false &
    [ "$!" = "$pid" ]
do
    tries=$((tries + 1))
    [ "$tries" -lt 100000 ] || die "pid $pid never came free"
done
await passing || die "the passing job was reported failed"
if await failing; then die "the failing job was reported passed"; fi
"#,
    );
    assert!(
        out.contains("==> [passing] background job ended (exit 0)"),
        "{out}"
    );
    assert!(
        out.contains("==> [failing] background job ended (exit 3)"),
        "{out}"
    );
}
