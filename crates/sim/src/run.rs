//! One simulated run: a cluster of brokers (the first three also the Raft
//! controller quorum) and a client host in one turmoil simulation, the fault
//! harness' workload on the client, the seed's faults applied by the driver
//! between steps, then healing and the fault harness' checker.

use std::collections::BTreeMap;
use std::fmt;
use std::hash::{Hash, Hasher};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use syncline_broker::config::TruncationRule;
use syncline_broker::planted::{self, Bug};
use syncline_broker::BrokerConfig;
use syncline_chaos::checker::{self, check, Promise, Verdict, Violation};
use syncline_chaos::history::{Final, History, Outcome as SendOutcome};
use syncline_chaos::workload::{leader_of, read_to_high_watermark, Brokers, Spec, Workload};
use syncline_client::{Acks, Admin, ClientConfig, Connection, NewTopic};
use syncline_e2e::checks::FAST_TIMERS;
use syncline_e2e::inprocess::config_text;
use syncline_proto::pb::{self, request::Body, response::Body as Resp};
use syncline_proto::ErrorCode;
use tokio::time::Instant;

use crate::net::{Dialer, SimNet};
use crate::plan::{plan, Fault, Kind, Planned, CLIENT, SLOW_LINK};

/// The topic the workload writes.
pub const TOPIC: &str = "sim";
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

/// The brokers' settings: the fault harness' safe settings with the tests'
/// fast timers.
fn broker_toml() -> String {
    format!("min_insync_replicas = 2\n{FAST_TIMERS}")
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
}

/// A bug the simulation can plant in the brokers.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Plant {
    /// Followers truncate to their high watermark, not by leader epoch
    /// (before KIP-101).
    HighWatermarkTruncation,
    /// See [`Bug::NoSecondCaughtUpRule`].
    NoSecondCaughtUpRule,
}

impl Plant {
    pub const ALL: [Plant; 2] = [Plant::HighWatermarkTruncation, Plant::NoSecondCaughtUpRule];

    #[must_use]
    pub fn name(self) -> &'static str {
        match self {
            Plant::HighWatermarkTruncation => "hw-truncation",
            Plant::NoSecondCaughtUpRule => "no-second-caught-up-rule",
        }
    }

    fn bug(self) -> Option<Bug> {
        match self {
            Plant::HighWatermarkTruncation => None,
            Plant::NoSecondCaughtUpRule => Some(Bug::NoSecondCaughtUpRule),
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
        }
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
        for violation in v.violations.iter().take(5) {
            writeln!(f, "  {}: {}", violation.kind, violation.detail)?;
        }
        write!(f, "replay: {}", self.options.replay_command())
    }
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
    history: History,
    logs: BTreeMap<i32, Vec<(i64, String)>>,
    /// Per partition: the leader, its high watermark and the replicas.
    ends: BTreeMap<i32, (i32, i64, Vec<i32>)>,
    healed: Option<Result<Duration, String>>,
    leadership: Vec<String>,
    shrinks: Vec<Shrink>,
}

/// A leader's ISR losing members, as the leader watch saw it.
#[derive(Debug, Clone)]
struct Shrink {
    /// Simulated time (the driver's clock).
    at: Duration,
    partition: i32,
    leader: i32,
    removed: Vec<i32>,
}

/// The driver's view of the faults in force (counts, since faults overlap).
///
/// A cut holds the link's messages and delivers them when it ends, as TCP's
/// retransmissions do across a partition that heals. (turmoil's own partition
/// drops segments inside a live stream, which then hangs for ever: no TCP
/// connection does that.)
#[derive(Debug, Default)]
struct World {
    cut: BTreeMap<(i32, i32), u32>,
    slow: BTreeMap<(i32, i32), u32>,
    crashed: BTreeMap<i32, u32>,
}

impl World {
    fn start(&mut self, sim: &mut turmoil::Sim<'_>, fault: Fault, brokers: i32) {
        for link in fault.cut_links(brokers) {
            let n = self.cut.entry(link).or_default();
            *n += 1;
            if *n == 1 {
                sim.hold(host(link.0), host(link.1));
            }
        }
        match fault {
            Fault::Crash(b) => {
                let n = self.crashed.entry(b).or_default();
                *n += 1;
                if *n == 1 {
                    sim.crash(host(b));
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
    }

    fn end(&mut self, sim: &mut turmoil::Sim<'_>, fault: Fault, brokers: i32, latency: Duration) {
        for link in fault.cut_links(brokers) {
            let n = self.cut.get_mut(&link).expect("a cut link");
            *n -= 1;
            if *n == 0 {
                sim.release(host(link.0), host(link.1));
            }
        }
        match fault {
            Fault::Crash(b) => {
                let n = self.crashed.get_mut(&b).expect("a crashed broker");
                *n -= 1;
                if *n == 0 {
                    sim.bounce(host(b));
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
            &broker_toml(),
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
                let _broker = syncline_broker::start(config, Arc::new(SimNet))
                    .await
                    .map_err(|e| format!("{e:#}"))?;
                std::future::pending::<()>().await;
                Ok(())
            }
        });
    }
    let started = Arc::new(AtomicBool::new(false));
    let end: Arc<Mutex<Option<anyhow::Result<ClientEnd>>>> = Arc::new(Mutex::new(None));
    let client_brokers: Brokers = (1..=brokers).zip(addrs.iter().cloned()).collect();
    {
        let (started, end, options) = (started.clone(), end.clone(), options.clone());
        sim.client(host(CLIENT), async move {
            let result = client(client_brokers, options, started).await;
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
    let mut world = World::default();
    let mut trace = Vec::new();
    // Simulated time each fault started and ended (healing ends the rest).
    let mut windows: Vec<(Duration, Option<Duration>)> =
        vec![(Duration::ZERO, None); planned.len()];
    let mut workload_start = None;
    loop {
        let finished = sim
            .step()
            .map_err(|e| anyhow::anyhow!("seed {}: the simulation: {e}", options.seed))?;
        if finished {
            break;
        }
        let now = sim.elapsed();
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
                world.start(&mut sim, fault, brokers);
                trace.push(format!("{:>9.3} {fault}", now.as_secs_f64()));
            } else {
                windows[i].1 = Some(now);
                world.end(&mut sim, fault, brokers, options.latency);
                trace.push(format!("{:>9.3} end: {fault}", now.as_secs_f64()));
            }
        }
    }
    let end = end
        .lock()
        .expect("client end")
        .take()
        .ok_or_else(|| anyhow::anyhow!("the client host ended without a result"))??;

    // The replicas below each partition's final high watermark, read from
    // their files while the brokers go on (a follower may still be fetching).
    let mut replicas = BTreeMap::new();
    for (&p, (leader, hw, members)) in &end.ends {
        let deadline = sim.elapsed() + HEAL_BOUND;
        let partition_dir = |b: i32| {
            dir.path()
                .join(format!("broker-{b}"))
                .join(format!("{TOPIC}-{p}"))
        };
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
    let healed = end
        .healed
        .clone()
        .unwrap_or_else(|| Err("the client never healed".into()));
    match &healed {
        Ok(d) => trace.push(format!("healed in {:.3} s", d.as_secs_f64())),
        Err(e) => trace.push(format!("not healed: {e}")),
    }
    let after = Final {
        logs: end.logs,
        replicas,
        healed: healed.clone(),
        leadership: end.leadership,
    };
    // acks=1 promises only what the leader has.
    let min_isr = if options.acks_leader { 1 } else { 2 };
    let mut verdict = check(&end.history, &after, Promise { min_isr });
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
    let trace_hash = hash_run(&trace, &end.history);
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
fn hash_run(trace: &[String], history: &History) -> u64 {
    let mut h = std::hash::DefaultHasher::new();
    trace.hash(&mut h);
    for s in &history.sends {
        (s.producer, s.partition, &s.value, s.at).hash(&mut h);
        match &s.outcome {
            SendOutcome::Ok { offset, acked_isr } => (0u8, offset, acked_isr).hash(&mut h),
            SendOutcome::Failed(e) => (1u8, e).hash(&mut h),
            SendOutcome::Unknown(e) => (2u8, e).hash(&mut h),
        }
    }
    for p in &history.polls {
        (p.consumer, p.partition, p.offset, &p.value).hash(&mut h);
    }
    h.finish()
}

/// The client host: creates the topic, runs the workload through the faults,
/// then heals and reads.
async fn client(
    brokers: Brokers,
    options: Options,
    started: Arc<AtomicBool>,
) -> anyhow::Result<ClientEnd> {
    let bootstrap: Vec<String> = brokers.iter().map(|(_, a)| a.clone()).collect();
    let admin = Admin::new(ClientConfig::new(&bootstrap.join(",")))?;
    let rf = options.brokers.min(3) as i32;
    let setup = Instant::now();
    loop {
        let topic =
            NewTopic::new(TOPIC, options.partitions, rf).with_config("min.insync.replicas", "2");
        match admin.create_topic(topic).await {
            Ok(_) => break,
            Err(e) if e.code() == Some(ErrorCode::TopicAlreadyExists) => break,
            Err(e) if setup.elapsed() > SETUP_BOUND => {
                anyhow::bail!("cannot create the topic: {e}")
            }
            Err(_) => tokio::time::sleep(Duration::from_millis(200)).await,
        }
    }
    for p in 0..options.partitions {
        while leader_of(&brokers, TOPIC, p).await.is_none() {
            anyhow::ensure!(setup.elapsed() < SETUP_BOUND, "partition {p} has no leader");
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    }
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
    };
    let watching = Arc::new(AtomicBool::new(true));
    let watch = tokio::spawn(watch_leaders(brokers.clone(), watching.clone()));
    let mut workload = Workload::start(&brokers, &spec, Instant::now())?;
    started.store(true, Ordering::Release);
    tokio::time::sleep(options.duration).await;

    // The driver heals every fault by now.
    let healing = Instant::now();
    let healed = match wait_whole(&brokers, options.partitions, HEAL_BOUND).await {
        Ok(()) => {
            let left = HEAL_BOUND.saturating_sub(healing.elapsed());
            workload
                .wait_acked(20, left)
                .await
                .map(|_| healing.elapsed())
        }
        Err(e) => Err(e),
    };
    let sends = workload.stop_producers(spec.delivery_timeout).await;
    let _ = wait_whole(&brokers, options.partitions, HEAL_BOUND).await;
    let mut end = ClientEnd::default();
    let mut read_to = BTreeMap::new();
    for p in 0..options.partitions {
        let (log, leader, hw, replicas) = read_partition(&brokers, p).await?;
        read_to.insert(p, log.last().map_or(0, |(o, _)| o + 1));
        end.logs.insert(p, log);
        end.ends.insert(p, (leader, hw, replicas));
    }
    end.history = workload
        .finish_consumers(read_to, Duration::from_secs(30), sends)
        .await;
    watching.store(false, Ordering::Release);
    let watched = watch.await.unwrap_or_default();
    end.leadership = watched.violations;
    end.shrinks = watched.shrinks;
    end.healed = Some(healed);
    Ok(end)
}

/// Each broker's own account of the partitions it leads.
async fn led(addr: &str) -> Option<Vec<pb::PartitionDescription>> {
    let conn = Connection::connect(addr, "sim-watch", REQUEST_TIMEOUT)
        .await
        .ok()?;
    let body = Body::DescribeTopics(pb::DescribeTopicsRequest {
        topics: vec![TOPIC.into()],
    });
    let Ok(Ok(Resp::DescribeTopics(d))) =
        tokio::time::timeout(REQUEST_TIMEOUT, conn.send(body)).await
    else {
        return None;
    };
    Some(
        d.topics
            .into_iter()
            .filter(|t| t.name == TOPIC)
            .flat_map(|t| t.partitions)
            .filter(|p| p.from_leader)
            .collect(),
    )
}

/// What the leader watch saw.
#[derive(Debug, Default)]
struct Watched {
    violations: Vec<String>,
    shrinks: Vec<Shrink>,
}

/// Until `watching` goes false: two brokers leading one partition in one
/// epoch, or a broker's epoch going back (I7, I8); and every ISR shrink, with
/// its simulated time, for the driver to judge (I11).
async fn watch_leaders(brokers: Brokers, watching: Arc<AtomicBool>) -> Watched {
    let mut leaders: BTreeMap<(i32, i32), i32> = BTreeMap::new();
    let mut last: BTreeMap<(i32, i32), i32> = BTreeMap::new();
    let mut isrs: BTreeMap<i32, (i32, i32, Vec<i32>)> = BTreeMap::new();
    let mut watched = Watched::default();
    while watching.load(Ordering::Acquire) {
        for (id, addr) in &brokers {
            for p in led(addr).await.unwrap_or_default() {
                let leader = *leaders.entry((p.partition, p.leader_epoch)).or_insert(*id);
                if leader != *id {
                    watched.violations.push(format!(
                        "partition {} epoch {}: led by {leader} and by {id}",
                        p.partition, p.leader_epoch
                    ));
                }
                let seen = last.entry((*id, p.partition)).or_insert(p.leader_epoch);
                if p.leader_epoch < *seen {
                    watched.violations.push(format!(
                        "broker {id} led partition {} in epoch {} after {}",
                        p.partition, p.leader_epoch, seen
                    ));
                }
                *seen = (*seen).max(p.leader_epoch);
                let now = (*id, p.leader_epoch, p.isr.clone());
                if let Some((was_leader, was_epoch, was_isr)) = isrs.insert(p.partition, now) {
                    let removed: Vec<i32> = was_isr
                        .iter()
                        .copied()
                        .filter(|r| !p.isr.contains(r))
                        .collect();
                    if (was_leader, was_epoch) == (*id, p.leader_epoch) && !removed.is_empty() {
                        watched.shrinks.push(Shrink {
                            at: turmoil::sim_elapsed().unwrap_or_default(),
                            partition: p.partition,
                            leader: *id,
                            removed,
                        });
                    }
                }
            }
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    watched.violations.sort();
    watched.violations.dedup();
    watched
}

/// Every partition led, by a leader whose own ISR is every replica.
async fn whole(brokers: &Brokers, partitions: i32) -> Result<(), String> {
    let mut views = BTreeMap::new();
    for (_, addr) in brokers {
        for p in led(addr).await.unwrap_or_default() {
            views.insert(p.partition, p);
        }
    }
    for p in 0..partitions {
        let view = views
            .get(&p)
            .ok_or_else(|| format!("partition {p}: no leader"))?;
        let (mut isr, mut replicas) = (view.isr.clone(), view.replicas.clone());
        isr.sort_unstable();
        replicas.sort_unstable();
        if isr != replicas || !view.pending_isr.is_empty() {
            return Err(format!(
                "partition {p}: leader {} ISR {:?} of replicas {:?}",
                view.leader_id, view.isr, view.replicas
            ));
        }
    }
    Ok(())
}

async fn wait_whole(brokers: &Brokers, partitions: i32, bound: Duration) -> Result<(), String> {
    let start = Instant::now();
    loop {
        match whole(brokers, partitions).await {
            Ok(()) => return Ok(()),
            Err(e) if start.elapsed() > bound => return Err(format!("within {bound:?}: {e}")),
            Err(_) => tokio::time::sleep(Duration::from_millis(100)).await,
        }
    }
}

/// Partition `p` up to its high watermark from its leader: (records, leader,
/// high watermark, replicas).
async fn read_partition(
    brokers: &Brokers,
    p: i32,
) -> anyhow::Result<(Vec<(i64, String)>, i32, i64, Vec<i32>)> {
    let start = Instant::now();
    loop {
        match read_once(brokers, p).await {
            Ok(read) => return Ok(read),
            Err(e) if start.elapsed() > HEAL_BOUND => {
                return Err(e.context(format!("reading partition {p}")))
            }
            Err(_) => tokio::time::sleep(Duration::from_millis(200)).await,
        }
    }
}

async fn read_once(
    brokers: &Brokers,
    p: i32,
) -> anyhow::Result<(Vec<(i64, String)>, i32, i64, Vec<i32>)> {
    let (leader, epoch) = leader_of(brokers, TOPIC, p)
        .await
        .ok_or_else(|| anyhow::anyhow!("no leader"))?;
    let addr = &brokers
        .iter()
        .find(|(id, _)| *id == leader)
        .ok_or_else(|| anyhow::anyhow!("leader {leader} is no broker"))?
        .1;
    let view = led(addr)
        .await
        .and_then(|v| {
            v.into_iter()
                .find(|d| d.partition == p && d.leader_epoch == epoch)
        })
        .ok_or_else(|| anyhow::anyhow!("broker {leader} does not lead partition {p}"))?;
    let conn = Connection::connect(addr, "sim-final", REQUEST_TIMEOUT).await?;
    let (records, hw) = read_to_high_watermark(&conn, TOPIC, p, epoch).await?;
    Ok((records, leader, hw, view.replicas))
}
