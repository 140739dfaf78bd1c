//! One simulated run: a cluster of brokers (the first three also the Raft
//! controller quorum) and a client host in one turmoil simulation, the fault
//! harness' workload on the client, the seed's faults applied by the driver
//! between steps, then healing and the fault harness' checker.

use std::collections::BTreeMap;
use std::fmt;
use std::hash::{Hash, Hasher};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use syncline_broker::config::TruncationRule;
use syncline_broker::planted::{self, Bug};
use syncline_broker::BrokerConfig;
use syncline_chaos::checker::{self, check, Promise, Verdict, Violation};
use syncline_chaos::final_read::{read_final, ClientIds};
use syncline_chaos::history::{Final, History, Outcome as SendOutcome};
use syncline_chaos::workload::{leader_of, led, Brokers, Spec, Workload};
use syncline_client::{Acks, Admin, ClientConfig, Connection, NewTopic};
use syncline_e2e::checks::FAST_TIMERS;
use syncline_e2e::inprocess::config_text;
use syncline_proto::pb::{self, request::Body, response::Body as Resp};
use syncline_proto::ErrorCode;
use tokio::time::Instant;

use crate::disk::SimDisk;
use crate::net::{self, Dialer, SimNet};
use crate::plan::{plan, Fault, Kind, Planned, Roles, CLIENT, SLOW_LINK};

/// The topic the workload writes from its start.
pub const TOPIC: &str = "sim";
/// The topic the client creates while the faults go on, at a time the seed
/// chooses, and writes and reads from then on as it does [`TOPIC`].
pub const LATE_TOPIC: &str = "sim-late";
const LATE_PARTITIONS: i32 = 1;
/// The brokers' port on their simulated hosts.
const PORT: u16 = 9092;
/// The simulation's step: every host runs this much simulated time per step.
const TICK: Duration = Duration::from_millis(1);
/// How long the cluster may take to come up and take the topic.
const SETUP_BOUND: Duration = Duration::from_secs(60);
/// From healing: a full ISR and new acknowledgements (I9).
const HEAL_BOUND: Duration = Duration::from_secs(30);
/// Bounds the end of the run after healing (stop, read, compare).
const TAIL_BOUND: Duration = Duration::from_secs(120);
/// The workload's default pause between two sends of a producer to a
/// partition.
pub const DEFAULT_PACE: Duration = Duration::from_millis(20);
/// A healthy link's default worst latency.
pub const DEFAULT_LATENCY: Duration = Duration::from_millis(5);
/// One request's bound on the client.
const REQUEST_TIMEOUT: Duration = Duration::from_secs(2);
/// The client id of the leader watch and the health checks.
const WATCH: &str = "sim-watch";
/// The client ids of the final reads.
const FINAL_READ: ClientIds = ClientIds {
    describe: WATCH,
    fetch: "sim-final",
};

/// The brokers' settings: the fault harness' safe settings with the tests'
/// fast timers, the controller's LeaderAndIsr bound scaled down with them (to
/// the session timeout), so that a pause of the active controller outlasts a
/// push it had in flight as it would a production timeout; and four
/// partitions of `__consumer_offsets` (not fifty) for the one group.
fn broker_toml(durable_acks: bool) -> String {
    let flush = if durable_acks {
        "flush_messages = 1\n"
    } else {
        ""
    };
    format!(
        "min_insync_replicas = 2\ncontroller_socket_timeout_ms = 3000\n\
         offsets_topic_num_partitions = 4\n{flush}{FAST_TIMERS}"
    )
}

/// What one run does.
#[derive(Debug, Clone)]
pub struct Options {
    pub seed: u64,
    pub brokers: usize,
    pub partitions: i32,
    /// How long the faults go on (simulated time).
    pub duration: Duration,
    /// Apply the seed's faults (false: a fault-free baseline).
    pub faults: bool,
    /// Bugs planted in every broker (to show the checker catches them).
    pub planted: Vec<Plant>,
    /// Pause between two sends of one producer to one partition.
    pub pace: Duration,
    /// Producers with `acks=1` (not idempotent) instead of `acks=all`: each
    /// waits for the leader only, so records arrive whatever the followers do
    /// (what a spurious shrink needs). With faults it may lose acknowledged
    /// records, which the checker reports.
    pub acks_leader: bool,
    /// A healthy link's worst latency (the best is a fiftieth of it).
    pub latency: Duration,
    /// Producers, each sending to every partition.
    pub producers: usize,
    /// The kinds of fault the seed's schedule draws from.
    pub kinds: Vec<Kind>,
    /// Beside the promised producers, one with `acks=1` and one with
    /// `acks=0` (neither idempotent), whose records share the logs.
    pub side_producers: bool,
    /// Create [`LATE_TOPIC`] during the faults, at a time from the seed, and
    /// write and read it from then on.
    pub late_topic: bool,
    /// A consumer group ([`crate::group`]) reads [`TOPIC`] through the faults.
    pub group: bool,
}

/// A bug the simulation can plant in the brokers.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Plant {
    /// Followers truncate to their high watermark, not by leader epoch
    /// (before KIP-101).
    HighWatermarkTruncation,
    /// See [`Bug::NoSecondCaughtUpRule`].
    NoSecondCaughtUpRule,
    /// See [`Bug::LostFsync`].
    LostFsync,
    /// See [`Bug::NoMinIsrCheck`].
    NoMinIsrCheck,
}

impl Plant {
    pub const ALL: [Plant; 4] = [
        Plant::HighWatermarkTruncation,
        Plant::NoSecondCaughtUpRule,
        Plant::LostFsync,
        Plant::NoMinIsrCheck,
    ];

    #[must_use]
    pub fn name(self) -> &'static str {
        match self {
            Plant::HighWatermarkTruncation => "hw-truncation",
            Plant::NoSecondCaughtUpRule => "no-second-caught-up-rule",
            Plant::LostFsync => "lost-fsync",
            Plant::NoMinIsrCheck => "no-min-isr-check",
        }
    }

    fn bug(self) -> Option<Bug> {
        match self {
            Plant::HighWatermarkTruncation => None,
            Plant::NoSecondCaughtUpRule => Some(Bug::NoSecondCaughtUpRule),
            Plant::LostFsync => Some(Bug::LostFsync),
            Plant::NoMinIsrCheck => Some(Bug::NoMinIsrCheck),
        }
    }
}

impl std::str::FromStr for Plant {
    type Err = String;

    fn from_str(s: &str) -> Result<Plant, String> {
        crate::plan::by_name(s, &Plant::ALL, Plant::name, "planted bug")
    }
}

impl Options {
    /// The defaults of `syncline-sim` for `seed`.
    #[must_use]
    pub fn new(seed: u64) -> Options {
        Options {
            seed,
            brokers: 3,
            partitions: 2,
            duration: Duration::from_secs(20),
            faults: true,
            planted: Vec::new(),
            pace: DEFAULT_PACE,
            acks_leader: false,
            latency: DEFAULT_LATENCY,
            producers: 2,
            kinds: Kind::ALL.to_vec(),
            side_producers: true,
            late_topic: true,
            group: true,
        }
    }

    /// When the client creates [`LATE_TOPIC`], from the workload's start.
    #[must_use]
    pub fn late_topic_at(&self) -> Option<Duration> {
        self.late_topic
            .then(|| crate::plan::late_topic_at(self.seed, self.duration))
    }

    /// Whether the brokers fsync every append before it counts
    /// (`flush.messages=1`): what the promise needs to survive a power loss,
    /// so set when the seed's faults may cut the power or fail fsyncs.
    #[must_use]
    pub fn durable_acks(&self) -> bool {
        self.faults && self.kinds.iter().any(|k| k.tests_fsync())
    }

    /// The command that replays this run.
    #[must_use]
    pub fn replay_command(&self) -> String {
        let mut c = format!(
            "scripts/sim.sh --seed {} --duration {}",
            self.seed,
            self.duration.as_secs()
        );
        if self.brokers != 3 {
            c.push_str(&format!(" --brokers {}", self.brokers));
        }
        if self.partitions != 2 {
            c.push_str(&format!(" --partitions {}", self.partitions));
        }
        if !self.faults {
            c.push_str(" --no-faults");
        }
        if self.kinds != Kind::ALL {
            let names: Vec<&str> = self.kinds.iter().map(|k| k.name()).collect();
            c.push_str(&format!(" --faults {}", names.join(",")));
        }
        for p in &self.planted {
            c.push_str(&format!(" --plant {}", p.name()));
        }
        if self.acks_leader {
            c.push_str(" --acks 1");
        }
        if self.latency != DEFAULT_LATENCY {
            c.push_str(&format!(" --latency-ms {}", self.latency.as_millis()));
        }
        if self.producers != 2 {
            c.push_str(&format!(" --producers {}", self.producers));
        }
        if self.pace != DEFAULT_PACE {
            c.push_str(&format!(" --pace-ms {}", self.pace.as_millis()));
        }
        if !self.side_producers {
            c.push_str(" --no-side-producers");
        }
        if !self.late_topic {
            c.push_str(" --no-late-topic");
        }
        if !self.group {
            c.push_str(" --no-group");
        }
        c.push_str(" --trace");
        c
    }
}

/// What a run found.
#[derive(Debug)]
pub struct Report {
    pub options: Options,
    pub verdict: Verdict,
    pub healed: Result<Duration, String>,
    /// The readable event trace: faults and their ends, healing, figures.
    pub trace: Vec<String>,
    /// A hash of the trace and of every operation's outcome (I10: one seed,
    /// one hash).
    pub trace_hash: u64,
    /// Simulated time, setup to the end.
    pub simulated: Duration,
    pub faults: usize,
}

impl Report {
    #[must_use]
    pub fn valid(&self) -> bool {
        self.verdict.valid()
    }
}

impl fmt::Display for Report {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let v = &self.verdict;
        write!(
            f,
            "seed {}: {} faults, {:.0} s simulated, sends {} (acked {}, failed {}, unknown {}), \
             polls {}, trace {:016x}: ",
            self.options.seed,
            self.faults,
            self.simulated.as_secs_f64(),
            v.sends,
            v.acked,
            v.failed,
            v.unknown,
            v.polls,
            self.trace_hash
        )?;
        if v.valid() {
            return write!(f, "VALID");
        }
        let counts: Vec<String> = v.counts().iter().map(|(k, n)| format!("{k} {n}")).collect();
        writeln!(f, "INVALID: {}", counts.join(", "))?;
        for violation in shown_findings(&v.violations) {
            writeln!(f, "  {}: {}", violation.kind, violation.detail)?;
        }
        write!(f, "replay: {}", self.options.replay_command())
    }
}

/// The findings a verdict prints: the first of every kind (one kind's many
/// findings often follow from another's single one, which must not be
/// crowded out), then more in order, up to five in all.
fn shown_findings(all: &[Violation]) -> Vec<&Violation> {
    let mut shown: Vec<usize> = Vec::new();
    for (i, v) in all.iter().enumerate() {
        if !shown.iter().any(|&j| all[j].kind == v.kind) {
            shown.push(i);
        }
    }
    for i in 0..all.len() {
        if shown.len() >= 5 {
            break;
        }
        if !shown.contains(&i) {
            shown.push(i);
        }
    }
    // In the order they were found.
    shown.sort_unstable();
    shown.into_iter().map(|i| &all[i]).collect()
}

fn host(n: i32) -> String {
    if n == CLIENT {
        "client".into()
    } else {
        format!("b{n}")
    }
}

/// What the client host hands the driver at its end.
#[derive(Debug, Default)]
struct ClientEnd {
    /// By topic.
    topics: BTreeMap<String, TopicEnd>,
    group: Option<GroupEnd>,
    healed: Option<Result<Duration, String>>,
    leadership: Vec<String>,
    shrinks: Vec<Shrink>,
}

/// What the consumer group did, and its committed offsets at the end.
#[derive(Debug)]
struct GroupEnd {
    members: Vec<crate::group::Member>,
    committed: Result<BTreeMap<i32, i64>, String>,
    /// Whether it read [`TOPIC`] to its end after healing.
    healed: Result<(), String>,
}

/// One topic's history and final state.
#[derive(Debug, Default)]
struct TopicEnd {
    history: History,
    logs: BTreeMap<i32, Vec<(i64, String)>>,
    /// Per partition: the leader, its high watermark and the replicas.
    ends: BTreeMap<i32, (i32, i64, Vec<i32>)>,
    /// Why the topic has no history (it could not be created): a verdict.
    missing: Option<String>,
    /// Partitions whose leader still had records above its high watermark
    /// when they were read (the bound ran out): not healed.
    uncommitted: Vec<String>,
}

/// A leader's ISR losing members, as the leader watch saw it.
#[derive(Debug, Clone)]
struct Shrink {
    /// Simulated time (the driver's clock).
    at: Duration,
    /// topic-partition
    partition: String,
    leader: i32,
    removed: Vec<i32>,
}

/// The driver's view of the faults in force (counts, since faults overlap).
///
/// A cut holds the link's messages and delivers them when it ends, as TCP's
/// retransmissions do across a partition that heals. (turmoil's own partition
/// drops segments inside a live stream, which then hangs for ever: no TCP
/// connection does that.)
#[derive(Debug)]
struct World {
    cut: BTreeMap<(i32, i32), u32>,
    slow: BTreeMap<(i32, i32), u32>,
    /// Brokers down: crashed or without power.
    down: BTreeMap<i32, u32>,
    full: BTreeMap<i32, u32>,
    failing: BTreeMap<i32, u32>,
    paused: BTreeMap<i32, u32>,
    /// Brokers that stopped on their own (a failed log), since when: their
    /// supervisor restarts them after [`RESTART_AFTER`].
    stopped: BTreeMap<i32, Duration>,
    disk: Arc<SimDisk>,
    /// The run's directory (each broker's files under `broker-<id>`).
    dir: PathBuf,
}

impl World {
    fn new(disk: Arc<SimDisk>, dir: &Path) -> World {
        World {
            cut: BTreeMap::new(),
            slow: BTreeMap::new(),
            down: BTreeMap::new(),
            full: BTreeMap::new(),
            failing: BTreeMap::new(),
            paused: BTreeMap::new(),
            stopped: BTreeMap::new(),
            disk,
            dir: dir.to_path_buf(),
        }
    }

    fn broker_dir(&self, b: i32) -> PathBuf {
        self.dir.join(format!("broker-{b}"))
    }

    fn take_down(&mut self, sim: &mut turmoil::Sim<'_>, b: i32) {
        let n = self.down.entry(b).or_default();
        *n += 1;
        if *n == 1 {
            sim.crash(host(b));
        }
    }

    fn bring_up(&mut self, sim: &mut turmoil::Sim<'_>, b: i32) {
        let n = self.down.get_mut(&b).expect("a broker down");
        *n -= 1;
        if *n == 0 {
            self.stopped.remove(&b);
            sim.bounce(host(b));
        }
    }

    /// The brokers' supervisor (systemd's `Restart=on-failure`): a broker
    /// whose process ended on its own while no fault holds it down is
    /// restarted [`RESTART_AFTER`] later. What it did, for the trace.
    fn supervise(
        &mut self,
        sim: &mut turmoil::Sim<'_>,
        brokers: i32,
        now: Duration,
    ) -> Vec<String> {
        let mut done = Vec::new();
        for b in 1..=brokers {
            if self.down.get(&b).is_some_and(|&n| n > 0) {
                continue;
            }
            match self.stopped.get(&b).copied() {
                None if !sim.is_host_running(host(b)) => {
                    self.stopped.insert(b, now);
                    done.push(format!("broker {b} stopped on its own"));
                }
                Some(since) if now >= since + RESTART_AFTER => {
                    self.stopped.remove(&b);
                    sim.bounce(host(b));
                    done.push(format!("broker {b} restarted by its supervisor"));
                }
                _ => {}
            }
        }
        done
    }

    /// The brokers a fault takes down.
    fn downed(fault: Fault, brokers: i32) -> Vec<i32> {
        match fault {
            Fault::Crash(b) | Fault::PowerLoss(b) => vec![b],
            Fault::Blackout => (1..=brokers).collect(),
            _ => Vec::new(),
        }
    }

    /// Starts `fault`; returns what it did beyond its name (bytes lost).
    fn start(
        &mut self,
        sim: &mut turmoil::Sim<'_>,
        fault: Fault,
        brokers: i32,
    ) -> anyhow::Result<String> {
        for link in fault.cut_links(brokers) {
            let n = self.cut.entry(link).or_default();
            *n += 1;
            if *n == 1 {
                sim.hold(host(link.0), host(link.1));
            }
        }
        let downed = World::downed(fault, brokers);
        for &b in &downed {
            self.take_down(sim, b);
        }
        if fault.kind().loses_power() {
            let mut lost = Vec::new();
            for &b in &downed {
                let bytes = self.disk.lose_unsynced(&self.broker_dir(b))?;
                lost.push(format!("{b}: {bytes}"));
            }
            return Ok(format!(
                " (unsynced bytes lost, by broker: {})",
                lost.join(", ")
            ));
        }
        match fault {
            Fault::OneWay(a, b) => net::hold_oneway(sim.lookup(host(a)), sim.lookup(host(b))),
            Fault::DiskFull(b) => {
                let n = self.full.entry(b).or_default();
                *n += 1;
                if *n == 1 {
                    self.disk.set_full(&self.broker_dir(b), true);
                }
            }
            Fault::DiskError(b) => {
                let n = self.failing.entry(b).or_default();
                *n += 1;
                if *n == 1 {
                    self.disk.set_failing(&self.broker_dir(b), true);
                }
            }
            Fault::Pause(b) => {
                let n = self.paused.entry(b).or_default();
                *n += 1;
                if *n == 1 {
                    sim.pause(host(b));
                }
            }
            Fault::Delay(a, b) => {
                let n = self.slow.entry((a.min(b), a.max(b))).or_default();
                *n += 1;
                if *n == 1 {
                    sim.set_link_max_message_latency(host(a), host(b), SLOW_LINK);
                }
            }
            _ => {}
        }
        Ok(String::new())
    }

    fn end(&mut self, sim: &mut turmoil::Sim<'_>, fault: Fault, brokers: i32, latency: Duration) {
        for link in fault.cut_links(brokers) {
            let n = self.cut.get_mut(&link).expect("a cut link");
            *n -= 1;
            if *n == 0 {
                sim.release(host(link.0), host(link.1));
            }
        }
        for b in World::downed(fault, brokers) {
            self.bring_up(sim, b);
        }
        match fault {
            Fault::OneWay(a, b) => net::release_oneway(sim.lookup(host(a)), sim.lookup(host(b))),
            Fault::DiskFull(b) => {
                let n = self.full.get_mut(&b).expect("a full disk");
                *n -= 1;
                if *n == 0 {
                    self.disk.set_full(&self.broker_dir(b), false);
                }
            }
            Fault::DiskError(b) => {
                let n = self.failing.get_mut(&b).expect("a failing disk");
                *n -= 1;
                if *n == 0 {
                    self.disk.set_failing(&self.broker_dir(b), false);
                }
            }
            Fault::Pause(b) => {
                let n = self.paused.get_mut(&b).expect("a paused broker");
                *n -= 1;
                if *n == 0 {
                    sim.resume(host(b));
                }
            }
            Fault::Delay(a, b) => {
                let n = self
                    .slow
                    .get_mut(&(a.min(b), a.max(b)))
                    .expect("a slow link");
                *n -= 1;
                if *n == 0 {
                    sim.set_link_max_message_latency(host(a), host(b), latency);
                }
            }
            _ => {}
        }
    }
}

/// How long the brokers' supervisor waits before it restarts one that
/// stopped on its own.
const RESTART_AFTER: Duration = Duration::from_secs(1);

/// Bugs planted for one run, removed when dropped.
struct Planted;

impl Planted {
    fn plant(bugs: &[Bug]) -> Planted {
        planted::plant(bugs);
        Planted
    }
}

impl Drop for Planted {
    fn drop(&mut self) {
        planted::plant(&[]);
    }
}

/// Runs one simulation to its verdict. An error means the run could not be
/// carried out (a host failed, or the simulation ran past its bound).
pub fn run(options: &Options) -> anyhow::Result<Report> {
    crate::entropy::reseed(options.seed);
    let dir = tempfile::tempdir()?;
    let brokers = options.brokers as i32;
    let mut sim = turmoil::Builder::new()
        .rng_seed(options.seed)
        .simulation_duration(SETUP_BOUND + options.duration + TAIL_BOUND)
        .tick_duration(TICK)
        .min_message_latency(options.latency / 50)
        .max_message_latency(options.latency)
        // Connections and segments a cut holds arrive together at its end.
        .tcp_capacity(1 << 16)
        .build();
    let _dialer = Dialer::install();
    net::open_all_gates();
    let disk = Arc::new(SimDisk::default());
    let _disk = disk.install();
    let bugs: Vec<Bug> = options.planted.iter().filter_map(|p| p.bug()).collect();
    let _planted = Planted::plant(&bugs);
    let addrs: Vec<String> = (1..=brokers)
        .map(|b| format!("{}:{PORT}", sim.lookup(host(b))))
        .collect();
    for b in 1..=brokers {
        let voters = &addrs[..addrs.len().min(3)];
        let text = config_text(
            b,
            &addrs[b as usize - 1],
            voters,
            dir.path(),
            &broker_toml(options.durable_acks()),
            None,
        );
        let truncation = if options.planted.contains(&Plant::HighWatermarkTruncation) {
            TruncationRule::HighWatermark
        } else {
            TruncationRule::LeaderEpoch
        };
        sim.host(host(b), move || {
            let text = text.clone();
            async move {
                let mut config = BrokerConfig::parse(&text).map_err(|e| format!("{e:#}"))?;
                config.truncation_rule = truncation;
                // The blocking pool's threads would run in an order the seed
                // does not decide.
                config.heavy_work_off_runtime = false;
                // As synclined's main: a broker that cannot start, or must stop
                // (a failed log), ends its process; the supervisor restarts it.
                let Ok(broker) = syncline_broker::start(config, Arc::new(SimNet)).await else {
                    return Ok(());
                };
                broker.fatal().cancelled().await;
                broker.shutdown().await;
                Ok(())
            }
        });
    }
    let started = Arc::new(AtomicBool::new(false));
    let end: Arc<Mutex<Option<anyhow::Result<ClientEnd>>>> = Arc::new(Mutex::new(None));
    let roles = Arc::new(Mutex::new(Roles::default()));
    let client_brokers: Brokers = (1..=brokers).zip(addrs.iter().cloned()).collect();
    {
        let (started, end, options) = (started.clone(), end.clone(), options.clone());
        let roles = roles.clone();
        sim.client(host(CLIENT), async move {
            let result = client(client_brokers, options, started, roles).await;
            *end.lock().expect("client end") = Some(result);
            Ok(())
        });
    }

    let planned: Vec<Planned> = if options.faults {
        plan(options.seed, brokers, options.duration, &options.kinds)
    } else {
        Vec::new()
    };
    // (offset from the workload's start, planned index, start or end)
    let mut events: Vec<(Duration, usize, bool)> = planned
        .iter()
        .enumerate()
        .flat_map(|(i, p)| [(p.at, i, true), (p.at + p.hold, i, false)])
        .collect();
    events.sort_by_key(|&(at, i, start)| (at, !start, i));
    let mut events = events.into_iter().peekable();
    let mut world = World::new(disk.clone(), dir.path());
    let mut trace = Vec::new();
    // Simulated time each fault started and ended (healing ends the rest).
    let mut windows: Vec<(Duration, Option<Duration>)> =
        vec![(Duration::ZERO, None); planned.len()];
    // What each fault did to named hosts (a targeted one resolved at its start).
    let mut resolved: Vec<Vec<Fault>> = vec![Vec::new(); planned.len()];
    let mut workload_start = None;
    if options.durable_acks() {
        trace.push("brokers fsync every append (flush.messages=1)".to_string());
    }
    loop {
        let finished = sim
            .step()
            .map_err(|e| anyhow::anyhow!("seed {}: the simulation: {e}", options.seed))?;
        if finished {
            break;
        }
        let now = sim.elapsed();
        for done in world.supervise(&mut sim, brokers, now) {
            trace.push(format!("{:>9.3} {done}", now.as_secs_f64()));
        }
        let Some(start) = workload_start else {
            if started.load(Ordering::Acquire) {
                workload_start = Some(now);
                trace.push(format!("{:>9.3} workload started", now.as_secs_f64()));
            }
            continue;
        };
        while let Some(&(at, i, begins)) = events.peek() {
            if start + at > now {
                break;
            }
            events.next();
            let fault = planned[i].fault;
            if begins {
                windows[i].0 = now;
                let concrete = fault.resolve(&roles.lock().expect("roles"));
                let mut detail = String::new();
                for &f in &concrete {
                    detail.push_str(&world.start(&mut sim, f, brokers)?);
                }
                if concrete != [fault] {
                    let names: Vec<String> = concrete.iter().map(Fault::to_string).collect();
                    let did = if names.is_empty() {
                        "no such broker seen yet: nothing".to_string()
                    } else {
                        names.join(", ")
                    };
                    detail = format!(": {did}{detail}");
                }
                trace.push(format!("{:>9.3} {fault}{detail}", now.as_secs_f64()));
                resolved[i] = concrete;
            } else {
                windows[i].1 = Some(now);
                for &f in &resolved[i] {
                    world.end(&mut sim, f, brokers, options.latency);
                }
                trace.push(format!("{:>9.3} end: {fault}", now.as_secs_f64()));
            }
        }
    }
    let end = end
        .lock()
        .expect("client end")
        .take()
        .ok_or_else(|| anyhow::anyhow!("the client host ended without a result"))??;

    let healed = end
        .healed
        .clone()
        .unwrap_or_else(|| Err("the client never healed".into()));
    match &healed {
        Ok(d) => trace.push(format!("healed in {:.3} s", d.as_secs_f64())),
        Err(e) => trace.push(format!("not healed: {e}")),
    }
    // acks=1 promises only what the leader has.
    let min_isr = if options.acks_leader { 1 } else { 2 };
    let mut verdict = Verdict::default();
    let mut histories = Vec::new();
    if let (Some(g), Some(t)) = (&end.group, end.topics.get(TOPIC)) {
        let (committed, healed) = match &g.committed {
            Ok(c) => (c.clone(), g.healed.clone()),
            Err(e) => (BTreeMap::new(), Err(format!("no committed offsets: {e}"))),
        };
        let reads: usize = g.members.iter().map(|m| m.reads.len()).sum();
        let commits: usize = g.members.iter().map(|m| m.commits.len()).sum();
        trace.push(format!(
            "group {}: {} members, {reads} reads, {commits} commits, committed {committed:?}",
            crate::group::GROUP,
            g.members.len()
        ));
        verdict.violations.extend(
            crate::group::check(&g.members, &committed, &t.logs, &healed)
                .into_iter()
                .map(|v| Violation {
                    kind: v.kind,
                    detail: format!("group {}: {}", crate::group::GROUP, v.detail),
                }),
        );
    }
    for (topic, t) in end.topics {
        let replicas = compare_replicas(&mut sim, dir.path(), &topic, &t.ends)?;
        let after = Final {
            logs: t.logs,
            replicas,
            healed: match &t.missing {
                Some(why) => Err(why.clone()),
                None if !t.uncommitted.is_empty() => Err(t.uncommitted.join(", ")),
                None => healed.clone(),
            },
            leadership: if topic == TOPIC {
                end.leadership.clone()
            } else {
                Vec::new()
            },
        };
        let v = check(&t.history, &after, Promise { min_isr });
        let promised = t.history.sends.iter().filter(|s| s.promised).count();
        trace.push(match &t.missing {
            Some(why) => format!("topic {topic}: none ({why})"),
            None => format!(
                "topic {topic}: {} sends ({promised} promised, {} beside), {} acknowledged, {} records, {} polls",
                v.sends,
                v.sends - promised,
                v.acked,
                v.records,
                v.polls
            ),
        });
        verdict.absorb(v, &format!("topic {topic}: "));
        histories.push(t.history);
    }
    let unexplained = spurious(&end.shrinks, &windows, workload_start);
    trace.push(format!(
        "ISR shrinks seen: {}, none of a fault: {}",
        end.shrinks.len(),
        unexplained.len()
    ));
    for s in unexplained {
        verdict.violations.push(Violation {
            kind: checker::Kind::SpuriousShrink,
            detail: format!(
                "at {:.3} s leader {} of partition {} removed {:?} from the ISR, no fault in the {} s before",
                s.at.as_secs_f64(),
                s.leader,
                s.partition,
                s.removed,
                JUSTIFIES.as_secs()
            ),
        });
    }
    let trace_hash = hash_run(&trace, &histories);
    Ok(Report {
        options: options.clone(),
        verdict,
        healed,
        trace,
        trace_hash,
        simulated: sim.elapsed(),
        faults: planned.len(),
    })
}

/// Per partition of `topic`: whether its replicas hold the same bytes below
/// its final high watermark, read from their files while the brokers go on (a
/// follower may still be fetching; it has [`HEAL_BOUND`] to catch up).
fn compare_replicas(
    sim: &mut turmoil::Sim<'_>,
    dir: &Path,
    topic: &str,
    ends: &BTreeMap<i32, (i32, i64, Vec<i32>)>,
) -> anyhow::Result<BTreeMap<i32, Result<(), String>>> {
    let mut replicas = BTreeMap::new();
    for (&p, (leader, hw, members)) in ends {
        let deadline = sim.elapsed() + HEAL_BOUND;
        let partition_dir = |b: i32| dir.join(format!("broker-{b}")).join(format!("{topic}-{p}"));
        let verdict = loop {
            let reference = syncline_e2e::segment_bytes(&partition_dir(*leader), *hw);
            let differing: Vec<i32> = members
                .iter()
                .copied()
                .filter(|&b| syncline_e2e::segment_bytes(&partition_dir(b), *hw) != reference)
                .collect();
            if differing.is_empty() {
                break Ok(());
            }
            if sim.elapsed() > deadline {
                break Err(format!(
                    "replicas {differing:?} differ from leader {leader} below HW {hw}"
                ));
            }
            for _ in 0..100 {
                sim.step()
                    .map_err(|e| anyhow::anyhow!("the simulation: {e}"))?;
            }
        };
        replicas.insert(p, verdict);
    }
    Ok(replicas)
}

/// How long after a fault an ISR shrink is put down to it: the lag time, the
/// session timeout and two seconds.
const JUSTIFIES: Duration = Duration::from_secs(7);

/// The shrinks no fault explains: none was in force within [`JUSTIFIES`]
/// before them (faults in force at the end count as in force for ever).
fn spurious(
    shrinks: &[Shrink],
    windows: &[(Duration, Option<Duration>)],
    workload_start: Option<Duration>,
) -> Vec<Shrink> {
    shrinks
        .iter()
        .filter(|s| workload_start.is_some_and(|w| s.at > w))
        .filter(|s| {
            let since = s.at.saturating_sub(JUSTIFIES);
            !windows
                .iter()
                .any(|&(start, end)| start <= s.at && end.is_none_or(|e| e >= since))
        })
        .cloned()
        .collect()
}

/// The trace and every operation's outcome, in order, hashed.
fn hash_run(trace: &[String], histories: &[History]) -> u64 {
    let mut h = std::hash::DefaultHasher::new();
    trace.hash(&mut h);
    for history in histories {
        hash_history(history, &mut h);
    }
    h.finish()
}

fn hash_history(history: &History, h: &mut std::hash::DefaultHasher) {
    for s in &history.sends {
        (s.producer, s.partition, &s.value, s.at).hash(h);
        match &s.outcome {
            SendOutcome::Ok { offset, acked_isr } => (0u8, offset, acked_isr).hash(h),
            SendOutcome::Failed(e) => (1u8, e).hash(h),
            SendOutcome::Unknown(e) => (2u8, e).hash(h),
        }
    }
    for p in &history.polls {
        (p.consumer, p.partition, p.offset, &p.value).hash(h);
    }
}

/// The client host: creates the topic, runs the workload through the faults
/// (creating [`LATE_TOPIC`] among them when the seed says so), then heals
/// and reads.
async fn client(
    brokers: Brokers,
    options: Options,
    started: Arc<AtomicBool>,
    roles: Arc<Mutex<Roles>>,
) -> anyhow::Result<ClientEnd> {
    create_topic(&brokers, TOPIC, options.partitions, &options, SETUP_BOUND)
        .await
        .map_err(|e| anyhow::anyhow!(e))?;
    let spec = Spec {
        topic: TOPIC.into(),
        partitions: options.partitions,
        producers: options.producers,
        consumers: 2,
        acks: if options.acks_leader {
            Acks::Leader
        } else {
            Acks::All
        },
        idempotent: !options.acks_leader,
        pace: options.pace,
        delivery_timeout: Duration::from_secs(60),
        unpromised: if options.side_producers {
            vec![Acks::Leader, Acks::None]
        } else {
            Vec::new()
        },
    };
    let watching = Arc::new(AtomicBool::new(true));
    let watch = tokio::spawn(watch_leaders(brokers.clone(), watching.clone(), roles));
    let epoch = Instant::now();
    let mut workloads = vec![(spec.clone(), Workload::start(&brokers, &spec, epoch)?)];
    let group = options
        .group
        .then(|| crate::group::Group::start(&brokers, TOPIC));
    started.store(true, Ordering::Release);
    let late = options.late_topic_at().map(|at| {
        let (brokers, options, spec) = (brokers.clone(), options.clone(), spec.clone());
        tokio::spawn(async move {
            tokio::time::sleep(at).await;
            // While the faults go on it may take long; healing bounds it.
            create_topic(
                &brokers,
                LATE_TOPIC,
                LATE_PARTITIONS,
                &options,
                Duration::MAX,
            )
            .await?;
            let spec = Spec {
                topic: LATE_TOPIC.into(),
                partitions: LATE_PARTITIONS,
                producers: 1,
                consumers: 1,
                ..spec
            };
            let w = Workload::start(&brokers, &spec, epoch).map_err(|e| format!("{e:#}"))?;
            Ok::<_, String>((spec, w))
        })
    });
    tokio::time::sleep(options.duration).await;

    // The driver heals every fault by now.
    let healing = Instant::now();
    let mut missing = None;
    if let Some(task) = late {
        match tokio::time::timeout(HEAL_BOUND, task).await {
            Ok(Ok(Ok(w))) => workloads.push(w),
            Ok(Ok(Err(e))) => missing = Some(e),
            Ok(Err(e)) => missing = Some(format!("creating it failed: {e}")),
            Err(_) => {
                missing = Some(format!(
                    "{LATE_TOPIC} could not be created within {HEAL_BOUND:?} of healing"
                ))
            }
        }
    }
    let topics: Vec<(&str, i32)> = workloads
        .iter()
        .map(|(s, _)| (s.topic.as_str(), s.partitions))
        .collect();
    let healed = match wait_whole(&brokers, &topics, HEAL_BOUND).await {
        Ok(()) => {
            let mut result = Ok(());
            for (_, w) in &workloads {
                let left = HEAL_BOUND.saturating_sub(healing.elapsed());
                if let Err(e) = w.wait_acked(10, left).await {
                    result = Err(e);
                    break;
                }
            }
            result.map(|()| healing.elapsed())
        }
        Err(e) => Err(e),
    };
    let _ = wait_whole(&brokers, &topics, HEAL_BOUND).await;
    let mut end = ClientEnd::default();
    for (spec, mut workload) in workloads {
        let sends = workload.stop_producers(spec.delivery_timeout).await;
        let mut topic = TopicEnd::default();
        let mut read_to = BTreeMap::new();
        for p in 0..spec.partitions {
            let read = read_final(&brokers, &spec.topic, p, FINAL_READ, HEAL_BOUND).await?;
            if let Some(why) = read.uncommitted() {
                topic.uncommitted.push(format!(
                    "{}-{p}: {why} {HEAL_BOUND:?} after healing",
                    spec.topic
                ));
            }
            read_to.insert(p, read.records.last().map_or(0, |(o, _)| o + 1));
            topic.logs.insert(p, read.records);
            topic
                .ends
                .insert(p, (read.leader, read.high_watermark, read.replicas));
        }
        topic.history = workload
            .finish_consumers(read_to, Duration::from_secs(30), sends)
            .await;
        end.topics.insert(spec.topic, topic);
    }
    if let Some(group) = group {
        let ends: BTreeMap<i32, i64> = end.topics[TOPIC]
            .logs
            .iter()
            .map(|(&p, log)| (p, log.last().map_or(0, |(o, _)| o + 1)))
            .collect();
        let healed = crate::group::wait_read_to_end(&brokers, TOPIC, &ends, HEAL_BOUND).await;
        let members = group.stop(Duration::from_secs(10)).await;
        let committed = crate::group::committed(&brokers, TOPIC).await;
        end.group = Some(GroupEnd {
            members,
            committed,
            healed,
        });
    }
    if let Some(why) = missing {
        let topic = TopicEnd {
            missing: Some(why),
            ..TopicEnd::default()
        };
        end.topics.insert(LATE_TOPIC.into(), topic);
    }
    watching.store(false, Ordering::Release);
    let watched = watch.await.unwrap_or_default();
    end.leadership = watched.violations;
    end.shrinks = watched.shrinks;
    end.healed = Some(healed);
    Ok(end)
}

/// Creates `topic` (replication factor 3, or the cluster's size when
/// smaller, `min.insync.replicas=2`) and waits until each partition has a
/// leader, retrying for `bound`.
async fn create_topic(
    brokers: &Brokers,
    topic: &str,
    partitions: i32,
    options: &Options,
    bound: Duration,
) -> Result<(), String> {
    let bootstrap: Vec<String> = brokers.iter().map(|(_, a)| a.clone()).collect();
    let admin = Admin::new(ClientConfig::new(&bootstrap.join(","))).map_err(|e| e.to_string())?;
    let rf = options.brokers.min(3) as i32;
    let start = Instant::now();
    loop {
        let new = NewTopic::new(topic, partitions, rf).with_config("min.insync.replicas", "2");
        match admin.create_topic(new).await {
            Ok(_) => break,
            Err(e) if e.code() == Some(ErrorCode::TopicAlreadyExists) => break,
            Err(e) if start.elapsed() > bound => return Err(format!("cannot create {topic}: {e}")),
            Err(_) => tokio::time::sleep(Duration::from_millis(200)).await,
        }
    }
    for p in 0..partitions {
        while leader_of(brokers, topic, p).await.is_none() {
            if start.elapsed() > bound {
                return Err(format!("{topic}-{p} has no leader"));
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    }
    Ok(())
}

/// The active controller, as a broker's metadata names it.
async fn controller_of(addr: &str) -> Option<i32> {
    let conn = Connection::connect(addr, WATCH, REQUEST_TIMEOUT)
        .await
        .ok()?;
    let body = Body::DescribeCluster(pb::DescribeClusterRequest {});
    match tokio::time::timeout(REQUEST_TIMEOUT, conn.send(body)).await {
        Ok(Ok(Resp::DescribeCluster(d))) if d.controller_id > 0 => Some(d.controller_id),
        _ => None,
    }
}

/// What the leader watch saw.
#[derive(Debug, Default)]
struct Watched {
    violations: Vec<String>,
    shrinks: Vec<Shrink>,
}

/// Until `watching` goes false, for both topics: two brokers leading one
/// partition in one epoch, or a broker's epoch going back (I7); and
/// every ISR shrink, with its simulated time, for the driver to judge (I11).
/// It also keeps `roles` up to date for the targeted faults.
async fn watch_leaders(
    brokers: Brokers,
    watching: Arc<AtomicBool>,
    roles: Arc<Mutex<Roles>>,
) -> Watched {
    type Key = (String, i32);
    let mut leaders: BTreeMap<(Key, i32), i32> = BTreeMap::new();
    let mut last: BTreeMap<(i32, Key), i32> = BTreeMap::new();
    let mut isrs: BTreeMap<Key, (i32, i32, Vec<i32>)> = BTreeMap::new();
    let mut watched = Watched::default();
    while watching.load(Ordering::Acquire) {
        // Partition 0's leader in the highest epoch seen this round.
        let mut leader0: Option<(i32, i32, Vec<i32>)> = None;
        let mut controller = None;
        for (id, addr) in &brokers {
            if controller.is_none() {
                controller = controller_of(addr).await;
            }
            for (topic, p) in led(addr, WATCH, &[TOPIC, LATE_TOPIC])
                .await
                .unwrap_or_default()
            {
                let first = topic == TOPIC && p.partition == 0;
                if first && leader0.as_ref().is_none_or(|l| l.1 < p.leader_epoch) {
                    leader0 = Some((*id, p.leader_epoch, p.replicas.clone()));
                }
                let key: Key = (topic, p.partition);
                let leader = *leaders.entry((key.clone(), p.leader_epoch)).or_insert(*id);
                if leader != *id {
                    watched.violations.push(format!(
                        "{}-{} epoch {}: led by {leader} and by {id}",
                        key.0, key.1, p.leader_epoch
                    ));
                }
                let seen = last.entry((*id, key.clone())).or_insert(p.leader_epoch);
                if p.leader_epoch < *seen {
                    watched.violations.push(format!(
                        "broker {id} led {}-{} in epoch {} after {}",
                        key.0, key.1, p.leader_epoch, seen
                    ));
                }
                *seen = (*seen).max(p.leader_epoch);
                let now = (*id, p.leader_epoch, p.isr.clone());
                if let Some((was_leader, was_epoch, was_isr)) = isrs.insert(key.clone(), now) {
                    let removed: Vec<i32> = was_isr
                        .iter()
                        .copied()
                        .filter(|r| !p.isr.contains(r))
                        .collect();
                    if (was_leader, was_epoch) == (*id, p.leader_epoch) && !removed.is_empty() {
                        watched.shrinks.push(Shrink {
                            at: turmoil::sim_elapsed().unwrap_or_default(),
                            partition: format!("{}-{}", key.0, key.1),
                            leader: *id,
                            removed,
                        });
                    }
                }
            }
        }
        {
            let mut roles = roles.lock().expect("roles");
            if let Some((id, _, replicas)) = leader0 {
                roles.leader = Some((id, replicas));
            }
            if controller.is_some() {
                roles.controller = controller;
            }
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    watched.violations.sort();
    watched.violations.dedup();
    watched
}

/// Every partition of `topics` led, by a leader whose own ISR is every
/// replica.
async fn whole(brokers: &Brokers, topics: &[(&str, i32)]) -> Result<(), String> {
    let names: Vec<&str> = topics.iter().map(|(t, _)| *t).collect();
    let mut views = BTreeMap::new();
    for (_, addr) in brokers {
        for (topic, p) in led(addr, WATCH, &names).await.unwrap_or_default() {
            views.insert((topic, p.partition), p);
        }
    }
    for &(topic, partitions) in topics {
        for p in 0..partitions {
            let view = views
                .get(&(topic.to_string(), p))
                .ok_or_else(|| format!("{topic}-{p}: no leader"))?;
            let (mut isr, mut replicas) = (view.isr.clone(), view.replicas.clone());
            isr.sort_unstable();
            replicas.sort_unstable();
            if isr != replicas || !view.pending_isr.is_empty() {
                return Err(format!(
                    "{topic}-{p}: leader {} ISR {:?} of replicas {:?}",
                    view.leader_id, view.isr, view.replicas
                ));
            }
        }
    }
    Ok(())
}

async fn wait_whole(
    brokers: &Brokers,
    topics: &[(&str, i32)],
    bound: Duration,
) -> Result<(), String> {
    let start = Instant::now();
    loop {
        match whole(brokers, topics).await {
            Ok(()) => return Ok(()),
            Err(e) if start.elapsed() > bound => return Err(format!("within {bound:?}: {e}")),
            Err(_) => tokio::time::sleep(Duration::from_millis(100)).await,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use syncline_chaos::checker::Kind;

    #[test]
    fn a_verdict_shows_the_first_finding_of_every_kind_in_order() {
        let found = |kind, n: usize| Violation {
            kind,
            detail: n.to_string(),
        };
        let mut all: Vec<Violation> = (0..7).map(|n| found(Kind::Duplicate, n)).collect();
        all.push(found(Kind::NotHealed, 7));
        all.push(found(Kind::LostWrite, 8));
        let shown: Vec<&str> = shown_findings(&all)
            .iter()
            .map(|v| v.detail.as_str())
            .collect();
        // The two lone kinds are not crowded out by the seven duplicates.
        assert_eq!(shown, ["0", "1", "2", "7", "8"]);
        let few = &all[..2];
        assert_eq!(shown_findings(few).len(), 2);
    }
}
