//! 10,000 idle consumer long polls held on one real `synclined`: the broker's CPU
//! use over 10 s and its memory, without and with them. Target: CPU near idle (well
//! under 5% of a core) and a few kilobytes per waiting fetch, since a waiting fetch
//! is an entry in the fetch purgatory and on the timing wheel, not a task or a
//! thread (the purgatory's design: crates/purgatory/src/lib.rs).
//!
//! `cargo bench -p syncline-broker --bench idle_long_polls` (about 35 s once built;
//! cargo builds `synclined` with the bench profile, optimized, first).
//!
//! This process is only the client. It opens [`CONNECTIONS`] connections and
//! pipelines [`FETCHES`] / [`CONNECTIONS`] fetches on each (under the broker's bound
//! on requests in flight per connection, `queued_max_requests`, 500 by default),
//! every one at the end of an empty partition with `min_bytes` 1 and a `max_wait_ms`
//! longer than the run, so all of them wait in the broker's purgatory; one that
//! returns anyway is issued again (and counted). The figures are the broker
//! process's alone: CPU is utime + stime from `/proc/<pid>/stat`, memory VmRSS from
//! `/proc/<pid>/status`.

use std::io::{Read, Write};
use std::net::TcpListener;
use std::process::{Child, Command, Stdio};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use syncline_client::{Admin, ClientConfig, Connection, NewTopic};
use syncline_proto::pb::{self, request::Body, response::Body as Resp};
use tokio::task::JoinSet;

const FETCHES: usize = 10_000;
/// 400 fetches per connection: under the default `queued_max_requests` (500).
const CONNECTIONS: usize = 25;
const PARTITIONS: i32 = 10;
const TOPIC: &str = "idle";
/// Longer than the whole run: the fetches wait, they do not time out.
const MAX_WAIT_MS: i32 = 120_000;
const WINDOW: Duration = Duration::from_secs(10);
/// Bound on each wait for the broker (start, topic, all fetches waiting).
const SETUP_TIMEOUT: Duration = Duration::from_secs(60);

/// The broker process, killed (and reaped) on every path.
struct Broker(Child);

impl Drop for Broker {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

fn free_port() -> u16 {
    TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .map(|a| a.port())
        .expect("a free port")
}

/// Clock ticks per second of /proc's CPU times (USER_HZ).
fn clock_ticks() -> f64 {
    Command::new("getconf")
        .arg("CLK_TCK")
        .output()
        .ok()
        .and_then(|o| String::from_utf8(o.stdout).ok())
        .and_then(|s| s.trim().parse().ok())
        .unwrap_or(100.0)
}

/// utime + stime of `pid`, in clock ticks.
fn cpu_ticks(pid: u32) -> u64 {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).expect("/proc/<pid>/stat");
    // The command name may hold spaces: fields are counted after its ')'.
    let after = &stat[stat.rfind(')').expect("comm") + 1..];
    let fields: Vec<&str> = after.split_whitespace().collect();
    // Fields 14 and 15 of proc(5); `after` starts at field 3.
    fields[11].parse::<u64>().expect("utime") + fields[12].parse::<u64>().expect("stime")
}

/// VmRSS of `pid`, in bytes.
fn rss_bytes(pid: u32) -> u64 {
    let status =
        std::fs::read_to_string(format!("/proc/{pid}/status")).expect("/proc/<pid>/status");
    let kib: u64 = status
        .lines()
        .find_map(|l| l.strip_prefix("VmRSS:"))
        .and_then(|v| v.split_whitespace().next())
        .and_then(|v| v.parse().ok())
        .expect("VmRSS");
    kib * 1024
}

/// The broker's fetch purgatory size, from its metrics endpoint.
fn waiting_fetches(metrics_addr: &str) -> Option<u64> {
    let mut s = std::net::TcpStream::connect(metrics_addr).ok()?;
    s.set_read_timeout(Some(Duration::from_secs(5))).ok()?;
    write!(s, "GET /metrics HTTP/1.0\r\nHost: {metrics_addr}\r\n\r\n").ok()?;
    let mut text = String::new();
    s.read_to_string(&mut text).ok()?;
    text.lines()
        .find_map(|l| l.strip_prefix("syncline_purgatory_size{operation=\"fetch\"} "))
        .and_then(|v| v.trim().parse::<f64>().ok())
        .map(|v| v as u64)
}

/// CPU used by `pid` over [`WINDOW`], as a percentage of one core.
async fn cpu_percent(pid: u32, hz: f64) -> f64 {
    let (t0, c0) = (Instant::now(), cpu_ticks(pid));
    tokio::time::sleep(WINDOW).await;
    let (t1, c1) = (Instant::now(), cpu_ticks(pid));
    (c1 - c0) as f64 / hz / (t1 - t0).as_secs_f64() * 100.0
}

fn fetch(partition: i32, max_wait_ms: i32) -> Body {
    Body::Fetch(pb::FetchRequest {
        replica_id: -1,
        replica_epoch: -1,
        max_wait_ms,
        min_bytes: 1,
        max_bytes: 1 << 20,
        session_epoch: -1,
        topics: vec![pb::FetchTopic {
            topic: TOPIC.into(),
            partitions: vec![pb::FetchPartition {
                partition,
                fetch_offset: 0,
                partition_max_bytes: 1 << 20,
                ..Default::default()
            }],
        }],
        ..Default::default()
    })
}

fn mib(bytes: u64) -> f64 {
    bytes as f64 / (1024.0 * 1024.0)
}

#[tokio::main(flavor = "current_thread")]
async fn main() {
    // `cargo bench` passes `--bench`; without it (`cargo test --benches`) this
    // 30-second measurement is skipped. A filter that is not ours means another
    // bench was asked for.
    let args: Vec<String> = std::env::args().skip(1).collect();
    if !args.iter().any(|a| a == "--bench") {
        println!("idle_long_polls: a benchmark; run it with `cargo bench`");
        return;
    }
    if args
        .iter()
        .any(|a| !a.starts_with('-') && !"idle_long_polls".contains(a.as_str()))
    {
        return;
    }
    let dir = tempfile::tempdir().expect("temp dir");
    let (port, metrics_port) = (free_port(), free_port());
    let addr = format!("127.0.0.1:{port}");
    let metrics_addr = format!("127.0.0.1:{metrics_port}");
    let config = dir.path().join("broker.toml");
    std::fs::write(
        &config,
        format!(
            "node_id = 1\nlisteners = \"{addr}\"\nlog_dirs = \"{}\"\n\
             process_roles = \"broker,controller\"\ncontroller_quorum_voters = \"1@{addr}\"\n\
             metrics_listen = \"{metrics_addr}\"\n",
            dir.path().join("data").display()
        ),
    )
    .expect("config");
    let log = std::fs::File::create(dir.path().join("broker.log")).expect("log file");
    let broker = Broker(
        Command::new(env!("CARGO_BIN_EXE_synclined"))
            .arg("--config")
            .arg(&config)
            .env("RUST_LOG", "warn")
            .stdout(Stdio::from(log.try_clone().expect("log fd")))
            .stderr(Stdio::from(log))
            .spawn()
            .expect("start synclined"),
    );
    let pid = broker.0.id();

    let admin = Admin::new(ClientConfig::new(&addr)).expect("admin");
    let deadline = Instant::now() + SETUP_TIMEOUT;
    loop {
        if let Ok(c) = admin.describe_cluster().await {
            if c.brokers.iter().any(|b| !b.fenced) {
                break;
            }
        }
        assert!(Instant::now() < deadline, "the broker did not come up");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    admin
        .create_topic(NewTopic::new(TOPIC, PARTITIONS, 1))
        .await
        .expect("create topic");

    let mut connections = Vec::new();
    for _ in 0..CONNECTIONS {
        connections.push(
            Connection::connect(&addr, "idle-long-polls", Duration::from_secs(5))
                .await
                .expect("connect"),
        );
    }
    // Warm-up: a few rounds of fetches answered at once, so the baseline already
    // has what serving any fetch allocates once (buffers, allocator arenas).
    for round in 0..4 {
        let mut answers = JoinSet::new();
        for (i, c) in connections.iter().enumerate() {
            let c = c.clone();
            answers.spawn(async move { c.send(fetch((i as i32 + round) % PARTITIONS, 0)).await });
        }
        while let Some(r) = answers.join_next().await {
            assert!(matches!(r, Ok(Ok(Resp::Fetch(_)))), "warm-up fetch: {r:?}");
        }
    }

    let hz = clock_ticks();
    let rss_baseline = rss_bytes(pid);
    let cpu_idle = cpu_percent(pid, hz).await;

    // The long polls: FETCHES tasks, each keeping one fetch outstanding.
    let returned = Arc::new(AtomicU64::new(0));
    let mut polls = JoinSet::new();
    for i in 0..FETCHES {
        let conn = connections[i % CONNECTIONS].clone();
        let returned = returned.clone();
        let partition = (i / CONNECTIONS) as i32 % PARTITIONS;
        polls.spawn(async move {
            loop {
                match conn.send(fetch(partition, MAX_WAIT_MS)).await {
                    Ok(_) => returned.fetch_add(1, Ordering::Relaxed),
                    Err(e) => panic!("long poll failed: {e}"),
                };
            }
        });
    }
    let deadline = Instant::now() + SETUP_TIMEOUT;
    while waiting_fetches(&metrics_addr) != Some(FETCHES as u64) {
        assert!(
            Instant::now() < deadline,
            "not every fetch is waiting: {:?} of {FETCHES}",
            waiting_fetches(&metrics_addr)
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    let returned_before = returned.load(Ordering::Relaxed);
    let cpu_waiting = cpu_percent(pid, hz).await;
    let rss_waiting = rss_bytes(pid);
    let returned_during = returned.load(Ordering::Relaxed) - returned_before;
    let still_waiting = waiting_fetches(&metrics_addr);
    polls.abort_all();
    drop(connections);

    let per_fetch = rss_waiting.saturating_sub(rss_baseline) as f64 / FETCHES as f64;
    println!(
        "idle long polls: {FETCHES} consumer fetches (min_bytes 1, max_wait_ms {MAX_WAIT_MS}) \
         pipelined on {CONNECTIONS} connections x {}, over {PARTITIONS} empty partitions; \
         one synclined (pid {pid}), release build",
        FETCHES / CONNECTIONS
    );
    println!(
        "  broker CPU over {}s:  no fetch waiting {cpu_idle:.2}% of a core   \
         {FETCHES} fetches waiting {cpu_waiting:.2}% of a core",
        WINDOW.as_secs()
    );
    println!(
        "  broker RSS:  baseline {:.1} MiB   with the fetches {:.1} MiB   \
         difference {:.1} MiB = {:.2} KiB per waiting fetch",
        mib(rss_baseline),
        mib(rss_waiting),
        mib(rss_waiting.saturating_sub(rss_baseline)),
        per_fetch / 1024.0
    );
    println!(
        "  fetches answered during the window (then issued again): {returned_during}; \
         waiting at its end: {}",
        still_waiting.map_or_else(|| "?".to_string(), |n| n.to_string())
    );
    println!("  target: CPU well under 5% of a core, a few KiB per waiting fetch");
    drop(broker);
}
