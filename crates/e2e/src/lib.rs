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
pub mod kcat;
pub mod quotas;
pub mod security;

use std::net::TcpListener;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Output, Stdio};
use std::time::Duration;

use nix::errno::Errno;
use nix::sys::signal::{kill, Signal};
use nix::sys::wait::{waitid, Id, WaitPidFlag};
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
    assert!(
        std::env::var_os("SYNCLINE_E2E_IN_PROCESS_ONLY").is_none(),
        "{name}: this is the quick tier (scripts/test.sh --quick), which starts no \
         process; a test that runs {name} belongs outside the `in_process` modules"
    );
    let path = bin_dir().join(name);
    assert!(
        path.exists(),
        "{} is missing: build the binaries first (`cargo build -p syncline-broker -p syncline-cli`; scripts/test.sh does it)",
        path.display()
    );
    path
}

/// Kills a process group (a test runner and whatever it started) when
/// dropped, on every path; start the leader with `process_group(0)`.
#[derive(Debug)]
pub struct ProcessGroup(pub Option<i32>);

impl ProcessGroup {
    /// Kills the group now (once).
    pub fn kill(&mut self) {
        if let Some(pgid) = self.0.take() {
            let _ = nix::sys::signal::killpg(Pid::from_raw(pgid), Signal::SIGKILL);
        }
    }
}

impl Drop for ProcessGroup {
    fn drop(&mut self) {
        self.kill();
    }
}

/// Where [`free_port`] looks: below the kernel's ephemeral range
/// (net.ipv4.ip_local_port_range, 32768-60999 by default).
const FREE_PORTS: std::ops::Range<u16> = 20_000..32_000;

/// A free loopback port for a broker to bind soon after (bound then released).
/// Chosen at random below the ephemeral range, as scripts/lib.sh's
/// `free_ports` does: a port the kernel hands out as an outgoing connection's
/// source port (brokers connecting to each other while a third starts) could
/// otherwise be taken before the broker meant to listen on it binds it. Never
/// the same port twice in one test process.
pub fn free_port() -> u16 {
    use rand::Rng;
    static HANDED_OUT: parking_lot::Mutex<Vec<u16>> = parking_lot::Mutex::new(Vec::new());
    let mut handed_out = HANDED_OUT.lock();
    let mut rng = rand::rng();
    for _ in 0..1_000 {
        let port = rng.random_range(FREE_PORTS);
        if !handed_out.contains(&port) && TcpListener::bind(("127.0.0.1", port)).is_ok() {
            handed_out.push(port);
            return port;
        }
    }
    panic!(
        "no free port between {} and {}",
        FREE_PORTS.start,
        FREE_PORTS.end - 1
    )
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
    /// The address it listens on (`127.0.0.1`, or one of its own: [`Layout`]).
    pub host: String,
    pub port: u16,
    pub metrics_port: u16,
    /// Its Kafka wire-protocol listener.
    pub kafka_port: u16,
    /// Its inter-broker listener (`port` unless the cluster is secure).
    pub internal_port: u16,
    pub config: PathBuf,
    pub log: PathBuf,
    /// Environment variables of its next start (the harness's clock skew).
    pub env: Vec<(String, String)>,
    child: Option<Child>,
    paused: bool,
}

impl Node {
    pub fn addr(&self) -> String {
        format!("{}:{}", self.host, self.port)
    }

    pub fn metrics_addr(&self) -> String {
        format!("{}:{}", self.host, self.metrics_port)
    }

    /// Its Kafka listener's address.
    pub fn kafka_addr(&self) -> String {
        format!("{}:{}", self.host, self.kafka_port)
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

/// Sends SIGSTOP to `child` and returns once every one of its threads has stopped
/// (or it has exited).
///
/// `kill` only queues the signal: each thread stops when it next runs, so on a
/// busy machine a broker's other threads go on serving requests for milliseconds
/// after `kill` returns. The kernel reports the stop to the parent (`waitid`
/// with `WSTOPPED`) when the last thread has stopped. `WNOWAIT` leaves the
/// report, and an exit, to be collected by [`Child::wait`] as before.
fn stop_process(child: &Child) {
    let pid = Pid::from_raw(child.id() as i32);
    if kill(pid, Signal::SIGSTOP).is_err() {
        return;
    }
    let flags = WaitPidFlag::WSTOPPED | WaitPidFlag::WEXITED | WaitPidFlag::WNOWAIT;
    while let Err(Errno::EINTR) = waitid(Id::Pid(pid), flags) {}
}

/// How [`Cluster::configure`] lays a cluster out.
#[derive(Debug, Clone, Copy, Default)]
pub struct Layout {
    /// A secure cluster ([`security::enabled`]).
    pub secure: bool,
    /// Each broker on a loopback address of its own (`127.a.b.<id>`, a and b
    /// drawn for this cluster from the process id, so that clusters of
    /// concurrent tests never share one), its connections to other brokers
    /// leaving from it (`outgoing_bind_address`), so that a firewall rule can
    /// cut the link between two brokers.
    pub own_hosts: bool,
}

/// The network of a [`Layout::own_hosts`] cluster: `127.a.b.0/24`, a different
/// one for each cluster of this process and, but for pids 2^20 apart, of any
/// other process.
fn own_network() -> String {
    static CLUSTERS: std::sync::atomic::AtomicU32 = std::sync::atomic::AtomicU32::new(0);
    let n = CLUSTERS.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
    let k = (std::process::id().wrapping_mul(16).wrapping_add(n)) % (200 * 256);
    format!("127.{}.{}", 20 + k / 256, k % 256)
}

/// A cluster of broker processes. Brokers `1..=voters` are the controller voters
/// (`process_roles = "broker,controller"`); [`Cluster::start`] has one, broker 1.
#[derive(Debug)]
pub struct Cluster {
    pub dir: tempfile::TempDir,
    pub nodes: Vec<Node>,
    /// How many of the brokers (the first ones) are controller voters.
    pub voters: usize,
    /// Set when the cluster is a secure one ([`security::enabled`]): SASL_SSL
    /// client and Kafka listeners, an SSL inter-broker listener with mutual
    /// TLS, ACLs, and the `admin` super user every harness client uses.
    pub security: Option<security::Security>,
}

impl Cluster {
    /// Starts `n` brokers with `extra` TOML lines in every config, broker 1 the
    /// single controller voter, and waits until every one is registered and
    /// unfenced.
    pub async fn start(n: usize, extra: &str) -> Cluster {
        Cluster::start_quorum(n, 1, extra).await
    }

    /// As [`start`](Self::start), with brokers `1..=voters` the controller
    /// quorum (a secure cluster with `SYNCLINE_E2E_SECURE=1`).
    pub async fn start_quorum(n: usize, voters: usize, extra: &str) -> Cluster {
        Cluster::start_with(n, voters, extra, security::enabled()).await
    }

    /// As [`start_quorum`](Self::start_quorum), a secure cluster whatever the
    /// environment says.
    pub async fn start_secure(n: usize, voters: usize, extra: &str) -> Cluster {
        Cluster::start_with(n, voters, extra, true).await
    }

    async fn start_with(n: usize, voters: usize, extra: &str, secure: bool) -> Cluster {
        let layout = Layout {
            secure,
            own_hosts: false,
        };
        let mut cluster = Cluster::configure(n, voters, extra, layout);
        cluster.launch().await;
        cluster
    }

    /// Starts every broker of a [`configure`](Self::configure)d cluster and waits
    /// until every one is registered and unfenced.
    pub async fn launch(&mut self) {
        for id in 1..=self.nodes.len() as i32 {
            self.spawn(id);
        }
        self.wait_registered(self.nodes.len(), Duration::from_secs(30))
            .await;
    }

    /// Writes the configs of `n` brokers (brokers `1..=voters` the controller
    /// quorum, `extra` TOML lines in every config) and starts none:
    /// [`launch`](Self::launch) does.
    pub fn configure(n: usize, voters: usize, extra: &str, layout: Layout) -> Cluster {
        let secure = layout.secure;
        let network = own_network();
        let host = |id: i32| {
            if layout.own_hosts {
                format!("{network}.{id}")
            } else {
                "127.0.0.1".to_string()
            }
        };
        assert!((1..=n).contains(&voters), "1 to {n} voters");
        assert!(
            !(secure && layout.own_hosts),
            "a secure cluster's certificates name 127.0.0.1 only, not the brokers' own hosts"
        );
        let dir = tempfile::tempdir().expect("temp dir");
        let security = secure.then(|| security::Security::create(&dir.path().join("secure")));
        let ports: Vec<(u16, u16, u16)> = (0..n)
            .map(|_| (free_port(), free_port(), free_port()))
            .collect();
        // A secure cluster's brokers talk on listeners of their own.
        let internal: Vec<u16> = ports
            .iter()
            .map(|&(port, _, _)| {
                if security.is_some() {
                    free_port()
                } else {
                    port
                }
            })
            .collect();
        let quorum: Vec<String> = internal[..voters]
            .iter()
            .enumerate()
            .map(|(i, port)| format!("{}@{}:{port}", i + 1, host(i as i32 + 1)))
            .collect();
        let quorum = quorum.join(",");
        let mut nodes = Vec::new();
        for (i, (port, metrics_port, kafka_port)) in ports.into_iter().enumerate() {
            let id = i as i32 + 1;
            let roles = if i < voters {
                "broker,controller"
            } else {
                "broker"
            };
            let config = dir.path().join(format!("broker-{id}.toml"));
            let h = host(id);
            let bind = if layout.own_hosts {
                format!("outgoing_bind_address = \"{h}\"\n")
            } else {
                String::new()
            };
            let listeners = match &security {
                None => format!(
                    "listeners = \"{h}:{port}\"\nkafka_listeners = \"{h}:{kafka_port}\"\n"
                ),
                Some(s) => format!(
                    "listeners = \"CLIENT://{h}:{port},INTERNAL://{h}:{}\"\n\
                     inter_broker_listener_name = \"INTERNAL\"\n\
                     kafka_listeners = \"KAFKA://{h}:{kafka_port}\"\n\
                     listener_security_protocol_map = \"CLIENT:SASL_SSL,INTERNAL:SSL,KAFKA:SASL_SSL\"\n{}",
                    internal[i],
                    s.broker_tls()
                ),
            };
            let text = format!(
                "node_id = {id}\n{listeners}log_dirs = \"{}\"\n\
                 process_roles = \"{roles}\"\ncontroller_quorum_voters = \"{quorum}\"\n\
                 metrics_listen = \"{h}:{metrics_port}\"\n{bind}{extra}\n",
                dir.path().join(format!("data-{id}")).display()
            );
            std::fs::write(&config, text).expect("write config");
            nodes.push(Node {
                id,
                host: h,
                port,
                metrics_port,
                kafka_port,
                internal_port: internal[i],
                log: dir.path().join(format!("broker-{id}.log")),
                config,
                env: Vec::new(),
                child: None,
                paused: false,
            });
        }
        if let Some(s) = &security {
            security::register(s);
        }
        Cluster {
            dir,
            nodes,
            voters,
            security,
        }
    }

    /// The broker whose `syncline_active_controller` metric is 1, if exactly one
    /// running, unpaused broker says so.
    pub fn active_controller(&self) -> Option<i32> {
        let active: Vec<i32> = self
            .nodes
            .iter()
            .filter(|n| n.child.is_some() && !n.paused)
            .filter(|n| self.metric(n.id, "syncline_active_controller").ok() == Some(1.0))
            .map(|n| n.id)
            .collect();
        match active[..] {
            [id] => Some(id),
            _ => None,
        }
    }

    /// Waits until one broker other than those in `not` is the active controller.
    pub async fn wait_active_controller(&self, not: &[i32], timeout: Duration) -> i32 {
        let deadline = Instant::now() + timeout;
        loop {
            if let Some(id) = self.active_controller().filter(|id| !not.contains(id)) {
                return id;
            }
            assert!(
                Instant::now() < deadline,
                "no active controller (other than {not:?}) within {timeout:?}"
            );
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
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
            .envs(node.env.iter().map(|(k, v)| (k, v)))
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

    /// SIGTERM, without waiting: the broker shuts down cleanly meanwhile;
    /// [`stop`](Self::stop) or [`restart`](Self::restart) collects it.
    pub fn terminate(&mut self, id: i32) {
        let node = &mut self.nodes[id as usize - 1];
        if node.paused {
            node.signal(Signal::SIGCONT);
            node.paused = false;
        }
        node.signal(Signal::SIGTERM);
    }

    /// SIGSTOP: the process freezes (a long GC pause). Returns once it is frozen:
    /// a request sent from then on is not read, let alone answered.
    pub fn pause(&mut self, id: i32) {
        let node = &mut self.nodes[id as usize - 1];
        if let Some(child) = &node.child {
            stop_process(child);
        }
        node.paused = true;
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

    /// Every broker's Kafka listener, as Kafka clients' `bootstrap.servers`.
    pub fn kafka_bootstrap(&self) -> String {
        self.nodes
            .iter()
            .map(Node::kafka_addr)
            .collect::<Vec<_>>()
            .join(",")
    }

    /// Connects to broker `id`.
    pub async fn connect(&self, id: i32) -> anyhow::Result<Connection> {
        security::connect(&self.node(id).addr(), "e2e", Duration::from_secs(5)).await
    }

    /// Broker `id`'s inter-broker listener.
    pub fn internal_addr(&self, id: i32) -> String {
        format!("{}:{}", self.node(id).host, self.node(id).internal_port)
    }

    /// Sends a request to broker `id`, with a timeout.
    pub async fn request(&self, id: i32, body: Body) -> anyhow::Result<Resp> {
        let conn = self.connect(id).await?;
        Ok(tokio::time::timeout(Duration::from_secs(10), conn.send(body)).await??)
    }

    /// The directory of the brokers' credentials (the default: beside the data
    /// directories).
    pub fn credentials_dir(&self) -> PathBuf {
        self.dir.path().join("credentials")
    }

    /// Sends a request to broker `id` on a connection authenticated as broker
    /// `as_broker` (with its real credential), with a timeout.
    pub async fn request_as(&self, id: i32, as_broker: i32, body: Body) -> anyhow::Result<Resp> {
        let conn =
            connect_as_broker(&self.node(id).addr(), &self.credentials_dir(), as_broker).await?;
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

    /// Waits until `n` brokers are registered and unfenced, as any running broker
    /// reports it.
    pub async fn wait_registered(&self, n: usize, timeout: Duration) {
        let deadline = Instant::now() + timeout;
        loop {
            for node in self.nodes.iter().filter(|n| n.child.is_some() && !n.paused) {
                if let Ok(r) = self.describe_cluster(node.id).await {
                    if r.brokers.iter().filter(|b| !b.fenced).count() == n {
                        return;
                    }
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
                    ..Default::default()
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
        self.cli_secure(&self.bootstrap(), args, stdin)
    }

    /// Runs the CLI with broker `id` alone as its bootstrap server.
    pub fn cli_via(&self, id: i32, args: &[&str], stdin: Option<&[u8]>) -> Output {
        self.cli_secure(&self.node(id).addr(), args, stdin)
    }

    /// Broker `id`'s data directory.
    pub fn data_dir(&self, id: i32) -> PathBuf {
        self.dir.path().join(format!("data-{id}"))
    }

    /// The raw bytes of whole batches of a partition's log on broker `id`, from the
    /// segment files, for every batch that ends below `below_offset`.
    pub fn log_bytes(&self, id: i32, topic: &str, partition: i32, below_offset: i64) -> Vec<u8> {
        segment_bytes(
            &self.data_dir(id).join(format!("{topic}-{partition}")),
            below_offset,
        )
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

impl Cluster {
    /// The CLI against `bootstrap`, as the admin on a secure cluster.
    fn cli_secure(&self, bootstrap: &str, args: &[&str], stdin: Option<&[u8]>) -> Output {
        match &self.security {
            Some(s) => {
                let file = s.client_properties().display().to_string();
                let mut all = vec!["--command-config", file.as_str()];
                all.extend_from_slice(args);
                cli_with(bootstrap, &all, stdin)
            }
            None => cli_with(bootstrap, args, stdin),
        }
    }
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

/// A connection to `addr` authenticated as broker `broker` with its secret in
/// `credentials_dir`, as that broker's own connections are.
pub async fn connect_as_broker(
    addr: &str,
    credentials_dir: &std::path::Path,
    broker: i32,
) -> anyhow::Result<Connection> {
    let password = std::fs::read_to_string(syncline_auth::credentials::secret_path(
        credentials_dir,
        broker,
    ))?;
    let credential = std::sync::Arc::new(syncline_auth::ClientCredential::new(
        syncline_auth::credentials::username(broker),
        password.trim(),
    ));
    let mut stream =
        tokio::time::timeout(Duration::from_secs(5), tokio::net::TcpStream::connect(addr))
            .await??;
    tokio::time::timeout(
        Duration::from_secs(10),
        syncline_client::sasl::authenticate(
            &mut stream,
            syncline_auth::Mechanism::ScramSha256,
            credential,
            "e2e",
        ),
    )
    .await??;
    Ok(Connection::from_stream(stream, addr, "e2e", 100 << 20))
}

/// The batches below `below_offset` in a partition directory's segment files,
/// in order (the bytes replicas must agree on).
pub fn segment_bytes(dir: &Path, below_offset: i64) -> Vec<u8> {
    let mut segments: Vec<PathBuf> = std::fs::read_dir(dir)
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

#[cfg(test)]
mod tests {
    use super::*;

    /// The scheduler state letter of each thread of `pid` ('T': stopped).
    fn thread_states(pid: u32) -> Vec<char> {
        let tasks = std::fs::read_dir(format!("/proc/{pid}/task")).expect("/proc task dir");
        tasks
            .map(|task| {
                let stat = std::fs::read_to_string(task.expect("task entry").path().join("stat"))
                    .expect("task stat");
                // "<tid> (<comm>) <state> ...": comm may hold spaces and parentheses.
                let after_comm = &stat[stat.rfind(')').expect("comm") + 1..];
                after_comm.trim_start().chars().next().expect("state")
            })
            .collect()
    }

    /// A child process killed when the test ends, passing or not.
    struct Reaped(Child);

    impl Drop for Reaped {
        fn drop(&mut self) {
            let _ = self.0.kill();
            let _ = self.0.wait();
        }
    }

    #[test]
    fn a_paused_process_is_stopped_when_pause_returns() {
        let child = Command::new("sleep")
            .arg("600")
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .expect("spawn sleep");
        let child = Reaped(child);
        let pid = child.0.id();
        // Rounds, because a bare `kill` loses the race to the process stopping only
        // most of the time; waiting for the stop wins it every time.
        for round in 0..100 {
            stop_process(&child.0);
            assert_eq!(thread_states(pid), ['T'], "round {round}");
            kill(Pid::from_raw(pid as i32), Signal::SIGCONT).expect("SIGCONT");
        }
    }

    #[test]
    fn pausing_a_process_that_exited_returns_at_once() {
        let mut child = Command::new("true").spawn().expect("spawn true");
        // Not reaped yet: a zombie, which never stops.
        waitid(
            Id::Pid(Pid::from_raw(child.id() as i32)),
            WaitPidFlag::WEXITED | WaitPidFlag::WNOWAIT,
        )
        .expect("wait for the exit");
        stop_process(&child);
        // The exit is still there for `Child::wait` to collect.
        assert!(child.wait().expect("reap").success());
    }
}
