//! Debian's kcat (librdkafka's command-line client, installed by
//! scripts/test.sh) as the tests run it: bounded, killed when dropped.

use std::process::Stdio;
use std::time::Duration;

use tokio::io::AsyncWriteExt;
use tokio::process::{Child, Command};

/// Bound on one kcat run (it is a few seconds at most).
pub const KCAT_TIMEOUT: Duration = Duration::from_secs(60);

/// Starts kcat with `args`, its stdin piped when `stdin`; killed when dropped.
pub fn spawn_kcat(args: &[&str], stdin: bool) -> Child {
    Command::new("kcat")
        .args(args)
        .stdin(if stdin { Stdio::piped() } else { Stdio::null() })
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .kill_on_drop(true)
        .spawn()
        .expect("kcat is installed by scripts/test.sh")
}

/// Waits (within the bound) for kcat to exit; checks it succeeded and reported
/// no failed delivery, and when `quiet` no error at all (a run across a broker
/// kill reports the lost connection); its stdout.
pub async fn finish_kcat(child: Child, args: &[&str], quiet: bool) -> String {
    let out = tokio::time::timeout(KCAT_TIMEOUT, child.wait_with_output())
        .await
        .unwrap_or_else(|_| panic!("kcat {args:?} did not finish within {KCAT_TIMEOUT:?}"))
        .unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "kcat {args:?} failed: {stderr}");
    assert!(
        !stderr.contains("Delivery failed"),
        "kcat {args:?}: {stderr}"
    );
    assert!(
        !quiet || !stderr.contains("ERROR"),
        "kcat {args:?}: {stderr}"
    );
    String::from_utf8(out.stdout).unwrap()
}

/// Runs kcat with `args` (and `stdin`, fed while its output is read); its stdout.
pub async fn kcat(args: &[&str], stdin: Option<String>) -> String {
    kcat_reporting(args, stdin, true).await
}

/// As [`kcat`]; errors kcat reports but rides out (a dead broker of the
/// bootstrap list) are allowed unless `quiet`.
pub async fn kcat_reporting(args: &[&str], stdin: Option<String>, quiet: bool) -> String {
    let mut child = spawn_kcat(args, stdin.is_some());
    if let Some(input) = stdin {
        let mut pipe = child.stdin.take().expect("piped");
        tokio::spawn(async move {
            let _ = pipe.write_all(input.as_bytes()).await;
        });
    }
    finish_kcat(child, args, quiet).await
}

/// The Python interpreter of the venv scripts/test.sh makes with Kafka's
/// Python clients (confluent-kafka, kafka-python): `SYNCLINE_KAFKA_PYTHON`, or
/// `target/kafka-clients/bin/python` of the workspace.
pub fn kafka_python() -> String {
    std::env::var("SYNCLINE_KAFKA_PYTHON").unwrap_or_else(|_| {
        concat!(
            env!("CARGO_MANIFEST_DIR"),
            "/../../target/kafka-clients/bin/python"
        )
        .to_string()
    })
}

/// A client process whose stdout lines are collected as they come; killed
/// when dropped.
#[derive(Debug)]
pub struct LineClient {
    child: Child,
    stdin: Option<tokio::process::ChildStdin>,
    lines: std::sync::Arc<parking_lot::Mutex<Vec<String>>>,
    name: String,
}

impl LineClient {
    /// Runs `crates/e2e/python/<script>` with `args` in the Kafka clients' venv.
    pub fn python(name: &str, script: &str, args: &[&str]) -> LineClient {
        let path = format!("{}/python/{script}", env!("CARGO_MANIFEST_DIR"));
        let mut child = Command::new(kafka_python())
            .arg(path)
            .args(args)
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::inherit())
            .kill_on_drop(true)
            .spawn()
            .expect("the Kafka clients' venv is made by scripts/test.sh");
        let stdout = child.stdout.take().expect("piped");
        let lines = std::sync::Arc::new(parking_lot::Mutex::new(Vec::new()));
        let sink = lines.clone();
        tokio::spawn(async move {
            use tokio::io::AsyncBufReadExt;
            let mut reader = tokio::io::BufReader::new(stdout).lines();
            while let Ok(Some(line)) = reader.next_line().await {
                sink.lock().push(line);
            }
        });
        LineClient {
            stdin: child.stdin.take(),
            child,
            lines,
            name: name.to_string(),
        }
    }

    /// Every line so far.
    pub fn lines(&self) -> Vec<String> {
        self.lines.lock().clone()
    }

    /// The words after `tag` of every line starting with it.
    pub fn tagged(&self, tag: &str) -> Vec<Vec<String>> {
        self.lines
            .lock()
            .iter()
            .filter_map(|l| l.strip_prefix(tag).and_then(|r| r.strip_prefix(' ')))
            .map(|r| r.split(' ').map(str::to_string).collect())
            .collect()
    }

    /// The partitions of its latest ASSIGN line (none before the first).
    pub fn assignment(&self) -> Vec<i32> {
        self.tagged("ASSIGN")
            .last()
            .and_then(|words| words.first().cloned())
            .map(|list| list.split(',').filter_map(|p| p.parse().ok()).collect())
            .unwrap_or_default()
    }

    /// Closes its stdin (the scripts' signal to finish cleanly).
    pub fn finish(&mut self) {
        self.stdin = None;
    }

    /// SIGKILL: a crash.
    pub async fn kill(&mut self) {
        let _ = self.child.kill().await;
    }

    /// Waits (within `timeout`) for it to exit successfully.
    pub async fn wait_success(&mut self, timeout: Duration) {
        let status = tokio::time::timeout(timeout, self.child.wait())
            .await
            .unwrap_or_else(|_| panic!("{} did not exit within {timeout:?}", self.name))
            .unwrap();
        assert!(status.success(), "{} failed: {status}", self.name);
    }
}

/// Polls `condition` until it holds or `timeout` passes (then panics naming
/// `what`).
pub async fn wait_until(what: &str, timeout: Duration, mut condition: impl FnMut() -> bool) {
    let deadline = tokio::time::Instant::now() + timeout;
    while !condition() {
        assert!(
            tokio::time::Instant::now() < deadline,
            "timed out after {timeout:?} waiting for {what}"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}
