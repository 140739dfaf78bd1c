//! End-to-end harness: real `synclined` processes on loopback ports, started the
//! way a user starts them (a TOML config file), and the `syncline` CLI.
//!
//! Every process is killed when the [`Cluster`] is dropped, on every path
//! (including a failing assertion). Binaries are looked up next to the test
//! executable (`target/<profile>/`): `scripts/test.sh` builds them first.

pub mod checks;
pub mod client;
pub mod faults;
pub mod inprocess;

use std::net::TcpListener;
use std::path::PathBuf;
use std::process::{Child, Command, Output, Stdio};
use std::time::Duration;

use nix::sys::signal::{kill, Signal};
use nix::unistd::Pid;
use syncline_client::Connection;
use syncline_proto::pb::{self, request::Body, response::Body as Resp};
use tokio::time::Instant;

/// The directory holding the workspace's binaries for this test build.
pub fn bin_dir() -> PathBuf {
    let exe = std::env::current_exe().expect("test executable path");
    // target/<profile>/deps/<test> -> target/<profile>
    let mut dir = exe.parent().expect("deps dir").to_path_buf();
    if dir.ends_with("deps") {
        dir.pop();
    }
    dir
}

/// Path of a workspace binary, which must have been built.
pub fn bin(name: &str) -> PathBuf {
    let path = bin_dir().join(name);
    assert!(
        path.exists(),
        "{} is missing: build the binaries first (`cargo build --bins`; scripts/test.sh does it)",
        path.display()
    );
    path
}

/// A free loopback port (bound then released; the caller binds it soon after).
pub fn free_port() -> u16 {
    TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .map(|a| a.port())
        .expect("a free port")
}

/// Polls `cond` every 20 ms until it holds or `timeout` passes; panics naming
/// `what` on timeout.
pub async fn wait_for<F, Fut>(what: &str, timeout: Duration, mut cond: F)
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = bool>,
{
    let deadline = Instant::now() + timeout;
    while !cond().await {
        assert!(
            Instant::now() < deadline,
            "timed out after {timeout:?} waiting for {what}"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

/// One broker process.
#[derive(Debug)]
pub struct Node {
    pub id: i32,
    pub port: u16,
    pub metrics_port: u16,
    pub config: PathBuf,
    pub log: PathBuf,
    child: Option<Child>,
    paused: bool,
}

impl Node {
    pub fn addr(&self) -> String {
        format!("127.0.0.1:{}", self.port)
    }

    pub fn metrics_addr(&self) -> String {
        format!("127.0.0.1:{}", self.metrics_port)
    }

    pub fn pid(&self) -> Option<u32> {
        self.child.as_ref().map(Child::id)
    }

    fn signal(&self, sig: Signal) {
        if let Some(pid) = self.pid() {
            let _ = kill(Pid::from_raw(pid as i32), sig);
        }
    }
}

/// A cluster of broker processes (broker 1 hosts the controller).
#[derive(Debug)]
pub struct Cluster {
    pub dir: tempfile::TempDir,
    pub nodes: Vec<Node>,
}

impl Cluster {
    /// Starts `n` brokers with `extra` TOML lines in every config and waits until
    /// every one is registered and unfenced.
    pub async fn start(n: usize, extra: &str) -> Cluster {
        let dir = tempfile::tempdir().expect("temp dir");
        let ports: Vec<(u16, u16)> = (0..n).map(|_| (free_port(), free_port())).collect();
        let controller = format!("1@127.0.0.1:{}", ports[0].0);
        let mut nodes = Vec::new();
        for (i, (port, metrics_port)) in ports.into_iter().enumerate() {
            let id = i as i32 + 1;
            let roles = if id == 1 {
                "broker,controller"
            } else {
                "broker"
            };
            let config = dir.path().join(format!("broker-{id}.toml"));
            let text = format!(
                "node_id = {id}\nlisteners = \"127.0.0.1:{port}\"\nlog_dirs = \"{}\"\n\
                 process_roles = \"{roles}\"\ncontroller_quorum_voters = \"{controller}\"\n\
                 metrics_listen = \"127.0.0.1:{metrics_port}\"\n{extra}\n",
                dir.path().join(format!("data-{id}")).display()
            );
            std::fs::write(&config, text).expect("write config");
            nodes.push(Node {
                id,
                port,
                metrics_port,
                log: dir.path().join(format!("broker-{id}.log")),
                config,
                child: None,
                paused: false,
            });
        }
        let mut cluster = Cluster { dir, nodes };
        for id in 1..=n as i32 {
            cluster.spawn(id);
        }
        cluster.wait_registered(n, Duration::from_secs(30)).await;
        cluster
    }

    pub fn node(&self, id: i32) -> &Node {
        &self.nodes[id as usize - 1]
    }

    fn spawn(&mut self, id: i32) {
        let node = &mut self.nodes[id as usize - 1];
        let log = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(&node.log)
            .expect("broker log file");
        let child = Command::new(bin("synclined"))
            .arg("--config")
            .arg(&node.config)
            .env(
                "RUST_LOG",
                std::env::var("SYNCLINE_E2E_LOG").unwrap_or_else(|_| "info".into()),
            )
            .stdout(Stdio::from(log.try_clone().expect("log fd")))
            .stderr(Stdio::from(log))
            .spawn()
            .expect("spawn synclined");
        node.child = Some(child);
        node.paused = false;
    }

    /// The last lines of broker `id`'s log (for failure messages).
    pub fn log_tail(&self, id: i32, lines: usize) -> String {
        let text = std::fs::read_to_string(&self.node(id).log).unwrap_or_default();
        let all: Vec<&str> = text.lines().collect();
        all[all.len().saturating_sub(lines)..].join("\n")
    }

    /// SIGKILL.
    pub fn kill(&mut self, id: i32) {
        let node = &mut self.nodes[id as usize - 1];
        if let Some(mut child) = node.child.take() {
            let _ = child.kill();
            let _ = child.wait();
        }
        node.paused = false;
    }

    /// SIGTERM, then wait (SIGKILL after `grace`).
    pub async fn stop(&mut self, id: i32, grace: Duration) {
        let node = &mut self.nodes[id as usize - 1];
        let Some(mut child) = node.child.take() else {
            return;
        };
        if node.paused {
            let _ = kill(Pid::from_raw(child.id() as i32), Signal::SIGCONT);
            node.paused = false;
        }
        let _ = kill(Pid::from_raw(child.id() as i32), Signal::SIGTERM);
        let deadline = Instant::now() + grace;
        loop {
            if let Ok(Some(_)) = child.try_wait() {
                return;
            }
            if Instant::now() >= deadline {
                let _ = child.kill();
                let _ = child.wait();
                return;
            }
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    }

    /// SIGSTOP: the process freezes (a long GC pause). Returns once every thread
    /// of it has stopped.
    pub fn pause(&mut self, id: i32) {
        let node = &mut self.nodes[id as usize - 1];
        node.signal(Signal::SIGSTOP);
        node.paused = true;
        if let Some(pid) = node.pid() {
            wait_all_threads_stopped(id, pid);
        }
    }

    /// SIGCONT.
    pub fn resume(&mut self, id: i32) {
        self.nodes[id as usize - 1].signal(Signal::SIGCONT);
        self.nodes[id as usize - 1].paused = false;
    }

    /// Starts broker `id` again (after kill or stop).
    pub fn restart(&mut self, id: i32) {
        if self.nodes[id as usize - 1].child.is_some() {
            self.kill(id);
        }
        self.spawn(id);
    }

    pub fn is_running(&mut self, id: i32) -> bool {
        match self.nodes[id as usize - 1].child.as_mut() {
            Some(c) => matches!(c.try_wait(), Ok(None)),
            None => false,
        }
    }

    /// Every broker's address, comma-separated (for `--bootstrap-server`).
    pub fn bootstrap(&self) -> String {
        self.nodes
            .iter()
            .map(Node::addr)
            .collect::<Vec<_>>()
            .join(",")
    }

    /// Connects to broker `id`.
    pub async fn connect(&self, id: i32) -> anyhow::Result<Connection> {
        Ok(Connection::connect(&self.node(id).addr(), "e2e", Duration::from_secs(5)).await?)
    }

    /// Sends a request to broker `id`, with a timeout.
    pub async fn request(&self, id: i32, body: Body) -> anyhow::Result<Resp> {
        let conn = self.connect(id).await?;
        Ok(tokio::time::timeout(Duration::from_secs(10), conn.send(body)).await??)
    }

    /// DescribeCluster from any running broker.
    pub async fn describe_cluster(&self, via: i32) -> anyhow::Result<pb::DescribeClusterResponse> {
        match self
            .request(via, Body::DescribeCluster(pb::DescribeClusterRequest {}))
            .await?
        {
            Resp::DescribeCluster(r) => Ok(r),
            other => anyhow::bail!("unexpected {other:?}"),
        }
    }

    async fn wait_registered(&self, n: usize, timeout: Duration) {
        let deadline = Instant::now() + timeout;
        loop {
            if let Ok(r) = self.describe_cluster(1).await {
                if r.brokers.iter().filter(|b| !b.fenced).count() == n {
                    return;
                }
            }
            if Instant::now() >= deadline {
                let tails: Vec<String> = (1..=n as i32)
                    .map(|id| format!("--- broker {id}:\n{}", self.log_tail(id, 20)))
                    .collect();
                panic!(
                    "cluster did not come up within {timeout:?}\n{}",
                    tails.join("\n")
                );
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    }

    /// The partition as broker `via` reports it (metadata).
    pub async fn partition(
        &self,
        via: i32,
        topic: &str,
        partition: i32,
    ) -> anyhow::Result<pb::PartitionMetadata> {
        let Resp::Metadata(m) = self
            .request(
                via,
                Body::Metadata(pb::MetadataRequest {
                    topics: vec![topic.into()],
                }),
            )
            .await?
        else {
            anyhow::bail!("unexpected response");
        };
        m.topics
            .into_iter()
            .flat_map(|t| t.partitions)
            .find(|p| p.partition == partition)
            .ok_or_else(|| anyhow::anyhow!("no partition {topic}-{partition}"))
    }

    /// The leader's own view of a partition (DescribeTopics sent to the leader).
    pub async fn describe_partition(
        &self,
        topic: &str,
        partition: i32,
    ) -> anyhow::Result<pb::PartitionDescription> {
        let meta = self.partition(1, topic, partition).await?;
        anyhow::ensure!(meta.leader_id > 0, "no leader");
        let Resp::DescribeTopics(d) = self
            .request(
                meta.leader_id,
                Body::DescribeTopics(pb::DescribeTopicsRequest {
                    topics: vec![topic.into()],
                }),
            )
            .await?
        else {
            anyhow::bail!("unexpected response");
        };
        d.topics
            .into_iter()
            .flat_map(|t| t.partitions)
            .find(|p| p.partition == partition && p.from_leader)
            .ok_or_else(|| anyhow::anyhow!("leader view of {topic}-{partition} not available"))
    }

    /// Runs the CLI against this cluster with `stdin` fed in.
    pub fn cli(&self, args: &[&str], stdin: Option<&[u8]>) -> Output {
        cli_with(&self.bootstrap(), args, stdin)
    }

    /// Broker `id`'s data directory.
    pub fn data_dir(&self, id: i32) -> PathBuf {
        self.dir.path().join(format!("data-{id}"))
    }

    /// The raw bytes of whole batches of a partition's log on broker `id`, from the
    /// segment files, for every batch that ends below `below_offset`.
    pub fn log_bytes(&self, id: i32, topic: &str, partition: i32, below_offset: i64) -> Vec<u8> {
        let dir = self.data_dir(id).join(format!("{topic}-{partition}"));
        let mut segments: Vec<PathBuf> = std::fs::read_dir(&dir)
            .map(|rd| rd.filter_map(|e| e.ok().map(|e| e.path())).collect())
            .unwrap_or_default();
        segments.retain(|p| p.extension().is_some_and(|x| x == "log"));
        segments.sort();
        let mut out = Vec::new();
        for seg in segments {
            let bytes = std::fs::read(&seg).unwrap_or_default();
            for b in syncline_proto::batch::split(&bytes) {
                let Ok((h, batch)) = b else { break };
                if h.last_offset() < below_offset {
                    out.extend_from_slice(batch);
                }
            }
        }
        out
    }

    /// GET /metrics of broker `id`, parsed: metric name (with labels) → value.
    pub fn metrics(&self, id: i32) -> anyhow::Result<Vec<(String, f64)>> {
        let text = http_get(&self.node(id).metrics_addr(), "/metrics")?;
        parse_metrics(&text)
    }

    /// One metric's value on broker `id` (the sum over its label sets).
    pub fn metric(&self, id: i32, name: &str) -> anyhow::Result<f64> {
        let all = self.metrics(id)?;
        let found: Vec<f64> = all
            .iter()
            .filter(|(n, _)| n == name || n.starts_with(&format!("{name}{{")))
            .map(|(_, v)| *v)
            .collect();
        anyhow::ensure!(
            !found.is_empty(),
            "metric {name} not exported by broker {id}"
        );
        Ok(found.iter().sum())
    }
}

/// Waits until every thread of process `pid` (broker `id`) is stopped.
///
/// `kill(SIGSTOP)` returns as soon as the signal is queued. The kernel stops a
/// multi-threaded process when the one thread it picked gets the CPU and starts
/// the group stop; until then the other threads run on. On a loaded machine that
/// is long enough for a "paused" follower to fetch a record produced after
/// `pause` returned, and acknowledge it. Blocking (a few milliseconds at most
/// when the machine is idle), so that `pause` stays a plain call.
fn wait_all_threads_stopped(id: i32, pid: u32) {
    let tasks = PathBuf::from(format!("/proc/{pid}/task"));
    // Not Linux (no /proc): nothing to wait on.
    if !tasks.exists() {
        return;
    }
    let deadline = std::time::Instant::now() + Duration::from_secs(20);
    loop {
        let states: Vec<char> = std::fs::read_dir(&tasks)
            .map(|dir| {
                dir.filter_map(|t| {
                    let stat = std::fs::read_to_string(t.ok()?.path().join("stat")).ok()?;
                    // "tid (comm) S ...": comm may hold spaces and parentheses.
                    stat.rsplit_once(") ")?.1.chars().next()
                })
                .collect()
            })
            .unwrap_or_default();
        // Stopped (T), traced (t), or gone (Z, X, or no threads left).
        if states.iter().all(|s| matches!(s, 'T' | 't' | 'Z' | 'X')) {
            return;
        }
        assert!(
            std::time::Instant::now() < deadline,
            "broker {id} (pid {pid}) not stopped 20 s after SIGSTOP: thread states {states:?}"
        );
        std::thread::sleep(Duration::from_millis(1));
    }
}

/// A minimal HTTP/1.0 GET (test helper), returning the body.
pub fn http_get(addr: &str, path: &str) -> anyhow::Result<String> {
    use std::io::{Read, Write};
    let mut s = std::net::TcpStream::connect(addr)?;
    s.set_read_timeout(Some(Duration::from_secs(10)))?;
    write!(s, "GET {path} HTTP/1.0\r\nHost: {addr}\r\n\r\n")?;
    let mut text = String::new();
    s.read_to_string(&mut text)?;
    let (head, body) = text
        .split_once("\r\n\r\n")
        .ok_or_else(|| anyhow::anyhow!("malformed HTTP response"))?;
    anyhow::ensure!(
        head.starts_with("HTTP/1.") && head.contains(" 200 "),
        "GET {path}: {head}"
    );
    Ok(body.to_string())
}

/// Parses Prometheus text with a real parser; returns `name{labels}` → value.
pub fn parse_metrics(text: &str) -> anyhow::Result<Vec<(String, f64)>> {
    let lines = text.lines().map(|l| Ok(l.to_string()));
    let scrape = prometheus_parse::Scrape::parse(lines)?;
    Ok(scrape
        .samples
        .into_iter()
        .filter_map(|s| {
            let v = match s.value {
                prometheus_parse::Value::Counter(v)
                | prometheus_parse::Value::Gauge(v)
                | prometheus_parse::Value::Untyped(v) => v,
                _ => return None,
            };
            let labels = s.labels.to_string();
            let name = if labels.is_empty() {
                s.metric
            } else {
                format!("{}{{{labels}}}", s.metric)
            };
            Some((name, v))
        })
        .collect())
}

/// Runs the CLI with an explicit bootstrap list.
pub fn cli_with(bootstrap: &str, args: &[&str], stdin: Option<&[u8]>) -> Output {
    use std::io::Write;
    let mut child = Command::new(bin("syncline"))
        .arg("--bootstrap-server")
        .arg(bootstrap)
        .args(args)
        .stdin(if stdin.is_some() {
            Stdio::piped()
        } else {
            Stdio::null()
        })
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("spawn syncline");
    if let Some(input) = stdin {
        let mut pipe = child.stdin.take().expect("stdin");
        let input = input.to_vec();
        // Feed from a thread so a large input cannot deadlock against stdout.
        std::thread::spawn(move || {
            let _ = pipe.write_all(&input);
        });
    }
    child.wait_with_output().expect("syncline output")
}

impl Drop for Cluster {
    fn drop(&mut self) {
        if std::thread::panicking() {
            let lines = std::env::var("SYNCLINE_E2E_LOG_LINES")
                .ok()
                .and_then(|v| v.parse().ok())
                .unwrap_or(40);
            for node in &self.nodes {
                eprintln!(
                    "--- last {lines} lines of broker {} ({}):\n{}",
                    node.id,
                    node.log.display(),
                    self.log_tail(node.id, lines)
                );
            }
        }
        for node in &mut self.nodes {
            if let Some(mut child) = node.child.take() {
                if node.paused {
                    let _ = kill(Pid::from_raw(child.id() as i32), Signal::SIGCONT);
                }
                let _ = child.kill();
                let _ = child.wait();
            }
        }
    }
}
