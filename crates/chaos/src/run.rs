//! One run of the harness: a cluster of real `synclined` processes, the
//! workload, the nemesis' schedule, healing, the final reads and the verdict.

use std::collections::{BTreeMap, BTreeSet};
use std::fmt;
use std::time::Duration;

use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};
use syncline_client::Acks;
use syncline_e2e::checks::{full_isr, logs_identical, LeaderWatch, FAST_TIMERS};
use syncline_e2e::{Cluster, Layout};
use tokio::time::Instant;

use crate::checker::{check, Promise, Verdict};
use crate::final_read::{read_final, ClientIds, FinalRead};
use crate::history::{Final, History};
use crate::nemesis::{schedule, FaultKind, Planned, Target};
use crate::net::{Firewall, Link};
use crate::power::Disk;
use crate::workload::{leader_of, Brokers, Spec, Workload};

/// What the run's settings promise.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Settings {
    /// `acks=all`, `min.insync.replicas=2`, no unclean election, and
    /// `flush.messages=1` when power can be lost: nothing acknowledged may be lost.
    Safe,
    /// `acks=1`, `min.insync.replicas=1`, unclean election, no fsync: the
    /// checker is expected to find losses.
    Unsafe,
}

impl std::str::FromStr for Settings {
    type Err = String;

    fn from_str(s: &str) -> Result<Self, String> {
        match s {
            "safe" => Ok(Settings::Safe),
            "unsafe" => Ok(Settings::Unsafe),
            _ => Err(format!("unknown settings {s:?}: choose safe or unsafe")),
        }
    }
}

impl fmt::Display for Settings {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Settings::Safe => "safe",
            Settings::Unsafe => "unsafe",
        })
    }
}

/// How a run is set up.
#[derive(Debug, Clone)]
pub struct Options {
    pub settings: Settings,
    pub seed: u64,
    /// How long the nemesis runs.
    pub duration: Duration,
    pub faults: Vec<FaultKind>,
    /// Brokers (3 or 5); the first three are the controller quorum.
    pub brokers: usize,
    pub partitions: i32,
    /// Print each fault as it starts and ends.
    pub verbose: bool,
    /// `flush.messages=1` on every broker; `None`: when the settings are safe
    /// and power can be lost.
    pub flush_each: Option<bool>,
}

/// How long after healing the cluster has to be whole again (I9).
pub const HEAL_BOUND: Duration = Duration::from_secs(30);
pub const TOPIC: &str = "chaos";

/// What a run did and what the checker found.
#[derive(Debug)]
pub struct Report {
    pub options: Options,
    /// Fault kinds left out, and why.
    pub skipped: Vec<String>,
    /// Each fault applied, with its time and target.
    pub timeline: Vec<String>,
    /// The kind of each fault applied, in order.
    pub started: Vec<FaultKind>,
    /// Faults of the schedule not applied (their target was down already).
    pub not_applied: usize,
    pub verdict: Verdict,
    pub healed: Result<Duration, String>,
}

impl Report {
    /// The kinds of the faults applied, in the order they started.
    pub fn faults_started(&self) -> &[FaultKind] {
        &self.started
    }

    /// True when every promise of the settings held.
    pub fn valid(&self) -> bool {
        self.verdict.valid()
    }
}

impl fmt::Display for Report {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let o = &self.options;
        let names: Vec<&str> = o.faults.iter().map(|k| k.name()).collect();
        writeln!(
            f,
            "syncline-chaos: settings {}{}, seed {}, {} s of faults, {} brokers, {} partitions, \
             faults {}",
            o.settings,
            match o.flush_each {
                Some(true) => " with flush.messages=1",
                Some(false) => " with the default flush",
                None => "",
            },
            o.seed,
            o.duration.as_secs(),
            o.brokers,
            o.partitions,
            names.join(",")
        )?;
        for s in &self.skipped {
            writeln!(f, "skipped: {s}")?;
        }
        let mut kinds: BTreeMap<&str, usize> = BTreeMap::new();
        let started = self.faults_started();
        for k in started {
            *kinds.entry(k.name()).or_default() += 1;
        }
        let kinds: Vec<String> = kinds.iter().map(|(k, n)| format!("{k} {n}")).collect();
        writeln!(
            f,
            "faults: {} applied ({}), {} not applied (target already down)",
            started.len(),
            kinds.join(", "),
            self.not_applied
        )?;
        let v = &self.verdict;
        writeln!(
            f,
            "sends: {} (acknowledged {}, failed {}, unknown {}, not acknowledged but written {}); \
             polls {}; records in the log {}",
            v.sends, v.acked, v.failed, v.unknown, v.not_acked_but_written, v.polls, v.records
        )?;
        match &self.healed {
            Ok(d) => writeln!(
                f,
                "healed: full ISR and progress {:.1} s after healing",
                d.as_secs_f64()
            )?,
            Err(e) => writeln!(f, "healed: NO: {e}")?,
        }
        if v.valid() {
            writeln!(f, "verdict: VALID (no violation found)")
        } else {
            let counts: Vec<String> = v.counts().iter().map(|(k, n)| format!("{k} {n}")).collect();
            writeln!(f, "verdict: INVALID: {}", counts.join(", "))?;
            let mut shown: BTreeMap<_, usize> = BTreeMap::new();
            for violation in &v.violations {
                let n = shown.entry(violation.kind).or_default();
                *n += 1;
                if *n <= 5 {
                    writeln!(f, "  {}: {}", violation.kind, violation.detail)?;
                }
            }
            Ok(())
        }
    }
}

/// A cluster and workload's settings.
#[derive(Debug, Clone)]
pub struct Setup {
    pub brokers: usize,
    pub partitions: i32,
    pub replication_factor: usize,
    pub min_isr: i32,
    pub acks: Acks,
    pub idempotent: bool,
    pub unclean: bool,
    /// `flush.messages=1`: every append fsynced before it counts.
    pub flush_each: bool,
    /// Brokers on addresses of their own behind the harness's firewall.
    pub network: bool,
    /// Data directories on disks whose power can be cut.
    pub power: bool,
}

impl Setup {
    /// What `settings` mean for a cluster of `brokers`.
    pub fn new(settings: Settings, brokers: usize, partitions: i32) -> Setup {
        let safe = settings == Settings::Safe;
        Setup {
            brokers,
            partitions,
            replication_factor: brokers.min(3),
            min_isr: if safe { 2 } else { 1 },
            acks: if safe { Acks::All } else { Acks::Leader },
            idempotent: safe,
            unclean: !safe,
            flush_each: false,
            network: false,
            power: false,
        }
    }

    /// The brokers' settings (TOML lines of every config).
    fn broker_toml(&self) -> String {
        let mut extra = FAST_TIMERS.to_string();
        extra.push_str(&format!(
            "min_insync_replicas = {}
",
            self.min_isr
        ));
        if self.unclean {
            extra.push_str(
                "unclean_leader_election_enable = true
",
            );
        }
        if self.flush_each {
            extra.push_str(
                "flush_messages = 1
",
            );
        }
        extra
    }
}

/// The cluster, its disks and its firewall, torn down in that order.
pub struct Rig {
    pub cluster: Cluster,
    pub firewall: Option<Firewall>,
    pub disks: BTreeMap<i32, Disk>,
    /// Where the disks' images live (dropped last).
    _images: Option<tempfile::TempDir>,
    pub brokers: Brokers,
}

impl fmt::Debug for Rig {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Rig")
            .field("brokers", &self.brokers)
            .finish()
    }
}

impl Drop for Rig {
    fn drop(&mut self) {
        // Processes first (they hold the disks), then the disks, then the rules.
        for id in 1..=self.cluster.nodes.len() as i32 {
            self.cluster.kill(id);
        }
        self.disks.clear();
    }
}

impl Rig {
    /// Starts `brokers` brokers on their own loopback addresses, each data
    /// directory on a disk of its own when `power` (root), and creates the
    /// topic.
    pub async fn start(setup: &Setup) -> anyhow::Result<Rig> {
        let (brokers, network, power) = (setup.brokers, setup.network, setup.power);
        crate::net::remove_stale();
        crate::power::remove_stale(is_stale_image);
        let voters = brokers.min(3);
        let layout = Layout {
            secure: false,
            own_hosts: true,
        };
        let mut cluster = Cluster::configure(brokers, voters, &setup.broker_toml(), layout);
        let firewall = if network {
            let hosts = cluster
                .nodes
                .iter()
                .map(|n| (n.id, n.host.clone()))
                .collect();
            Some(Firewall::create(hosts)?)
        } else {
            None
        };
        let mut disks = BTreeMap::new();
        let images = if power {
            let dir = tempfile::Builder::new().prefix(IMAGE_PREFIX).tempdir()?;
            for id in 1..=brokers as i32 {
                let image = dir.path().join(format!("broker-{id}.img"));
                disks.insert(id, Disk::create(&image, &cluster.data_dir(id), 256)?);
            }
            Some(dir)
        } else {
            None
        };
        cluster.launch().await;
        let brokers_list = cluster.nodes.iter().map(|n| (n.id, n.addr())).collect();
        let rig = Rig {
            cluster,
            firewall,
            disks,
            _images: images,
            brokers: brokers_list,
        };
        let rf = setup.replication_factor.to_string();
        let out = rig.cluster.cli(
            &[
                "topic",
                "create",
                TOPIC,
                "--partitions",
                &setup.partitions.to_string(),
                "--replication-factor",
                &rf,
                "--config",
                &format!("min.insync.replicas={}", setup.min_isr),
            ],
            None,
        );
        anyhow::ensure!(
            out.status.success(),
            "topic create failed: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        rig.wait_whole(Duration::from_secs(60)).await?;
        Ok(rig)
    }

    /// Waits until every partition has a leader and its full ISR, as the
    /// leaders see it.
    pub async fn wait_whole(&self, timeout: Duration) -> anyhow::Result<Duration> {
        let start = Instant::now();
        loop {
            let mut last = None;
            for node in &self.cluster.nodes {
                match full_isr(&self.cluster, node.id, TOPIC).await {
                    Ok(_) => return Ok(start.elapsed()),
                    Err(e) => last = Some(e),
                }
            }
            if start.elapsed() > timeout {
                anyhow::bail!(
                    "no full ISR within {timeout:?}: {:#}",
                    last.unwrap_or_else(|| anyhow::anyhow!("no brokers"))
                );
            }
            tokio::time::sleep(Duration::from_millis(200)).await;
        }
    }

    /// Partition `partition` up to its high watermark from its leader, once
    /// that is the leader's whole log, or as it is when `timeout` runs out
    /// (see [`FinalRead::uncommitted`]).
    pub async fn read_partition(
        &self,
        partition: i32,
        timeout: Duration,
    ) -> anyhow::Result<FinalRead> {
        read_final(&self.brokers, TOPIC, partition, FINAL_READ, timeout).await
    }
}

/// The client ids of the final reads.
const FINAL_READ: ClientIds = ClientIds {
    describe: "chaos-final",
    fetch: "chaos-final",
};

/// The disks' images are in `<temp>/syncline-chaos-disks-<pid>-<random>/`.
const IMAGE_PREFIX: &str = "syncline-chaos-disks-";

/// An image of a harness process that is gone (a run that was killed): never
/// one of a run still going, this process's or another's.
fn is_stale_image(image: &std::path::Path) -> bool {
    let Some(dir) = image.parent().and_then(|d| d.file_name()) else {
        return false;
    };
    let Some(pid) = dir
        .to_str()
        .and_then(|d| d.strip_prefix(IMAGE_PREFIX))
        .and_then(|rest| rest.split('-').next())
        .and_then(|pid| pid.parse::<i32>().ok())
    else {
        return false;
    };
    nix::sys::signal::kill(nix::unistd::Pid::from_raw(pid), None).is_err()
}

/// Which broker a target names now.
async fn resolve(rig: &Rig, target: Target, partitions: i32) -> (i32, String) {
    let n = rig.cluster.nodes.len() as u32;
    match target {
        Target::Leader(p) => {
            let p = (p % partitions as u32) as i32;
            match leader_of(&rig.brokers, TOPIC, p).await {
                Some((leader, _)) => (leader, format!(" (leader of partition {p})")),
                None => (
                    (p as u32 % n) as i32 + 1,
                    format!(" (partition {p} had no leader)"),
                ),
            }
        }
        Target::Controller => match rig.cluster.active_controller() {
            Some(c) => (c, " (active controller)".into()),
            None => (1, " (no active controller seen)".into()),
        },
        Target::Broker(b) => ((b % n) as i32 + 1, String::new()),
    }
}

/// The replicas of a partition and who leads it, as a broker knows it.
pub async fn replicas_of(rig: &Rig, partition: i32) -> Option<(i32, Vec<i32>)> {
    for node in &rig.cluster.nodes {
        if let Ok(meta) = syncline_e2e::checks::topic_metadata(&rig.cluster, node.id, TOPIC).await {
            if let Some(p) = meta.iter().find(|p| p.partition == partition) {
                return Some((p.leader_id, p.replicas.clone()));
            }
        }
    }
    None
}

/// Skews broker `id`'s wall clock from its next start (`None`: the right one).
fn set_clock(rig: &mut Rig, id: i32, skew_ms: Option<i64>) {
    let env = &mut rig.cluster.nodes[id as usize - 1].env;
    env.retain(|(k, _)| k != CLOCK_OFFSET);
    if let Some(skew) = skew_ms {
        env.push((CLOCK_OFFSET.into(), skew.to_string()));
    }
}

/// The environment variable that skews a broker's wall clock
/// (`syncline_proto::wall_clock_ms`).
const CLOCK_OFFSET: &str = "SYNCLINE_WALL_CLOCK_OFFSET_MS";

/// An applied fault, to be undone when it ends.
#[derive(Debug)]
enum Applied {
    Process { kind: FaultKind, broker: i32 },
    Network,
    Nothing,
}

fn both_ways(links: &mut BTreeMap<(i32, i32), Link>, a: i32, b: i32, link: Link) {
    links.insert((a, b), link);
    links.insert((b, a), link);
}

/// The nemesis at work: applies and undoes faults on their schedule.
struct Nemesis<'a> {
    rig: &'a mut Rig,
    partitions: i32,
    down: BTreeSet<i32>,
    network: BTreeMap<usize, BTreeMap<(i32, i32), Link>>,
    timeline: Vec<String>,
    started: Vec<FaultKind>,
    not_applied: usize,
    verbose: bool,
    epoch: Instant,
}

impl Nemesis<'_> {
    fn log(&mut self, line: String) {
        let line = format!("{:6.1}s {line}", self.epoch.elapsed().as_secs_f64());
        if self.verbose {
            println!("{line}");
        }
        self.timeline.push(line);
    }

    fn apply_network(&self) -> anyhow::Result<()> {
        let mut all = BTreeMap::new();
        for links in self.network.values() {
            for (k, v) in links {
                // A cut wins over a lossy link.
                let e = all.entry(*k).or_insert(*v);
                if *v == Link::Cut {
                    *e = Link::Cut;
                }
            }
        }
        if let Some(fw) = &self.rig.firewall {
            fw.set(&all)?;
        }
        Ok(())
    }

    async fn start(&mut self, i: usize, p: &Planned) -> anyhow::Result<Applied> {
        let (broker, mut why) = resolve(self.rig, p.target, self.partitions).await;
        let n = self.rig.cluster.nodes.len() as i32;
        let others: Vec<i32> = (1..=n).filter(|b| *b != broker).collect();
        let other = others[(p.pick % others.len() as u64) as usize];
        let hold = format!("for {:.1} s", p.hold.as_secs_f64());
        if p.kind.is_process() {
            if self.down.contains(&broker) {
                self.not_applied += 1;
                return Ok(Applied::Nothing);
            }
            match p.kind {
                FaultKind::Kill => self.rig.cluster.kill(broker),
                FaultKind::Pause => self.rig.cluster.pause(broker),
                // SIGTERM now; the process shuts down meanwhile (or is killed
                // when the fault ends), the nemesis goes on.
                FaultKind::Restart => self.rig.cluster.terminate(broker),
                FaultKind::DiskFull => {
                    if let Some(disk) = self.rig.disks.get(&broker) {
                        disk.fill(0)?;
                    }
                }
                FaultKind::Clock => {
                    let mut rng = StdRng::seed_from_u64(p.pick);
                    let skew: i64 = rng.random_range(-600_000..=600_000);
                    set_clock(self.rig, broker, Some(skew));
                    self.rig.cluster.kill(broker);
                    self.rig.cluster.restart(broker);
                    why = format!("{why}, wall clock {skew:+} ms");
                }
                _ => {
                    self.rig.cluster.kill(broker);
                    if let Some(disk) = self.rig.disks.get_mut(&broker) {
                        disk.cut_power()?;
                    }
                }
            }
            self.down.insert(broker);
            self.started.push(p.kind);
            self.log(format!("+{} broker {broker}{why} {hold}", p.kind));
            return Ok(Applied::Process {
                kind: p.kind,
                broker,
            });
        }
        let mut links = BTreeMap::new();
        let what = match p.kind {
            FaultKind::Cut => {
                both_ways(&mut links, broker, other, Link::Cut);
                format!("broker {broker}{why} <-> broker {other}")
            }
            FaultKind::OneWay => {
                links.insert((broker, other), Link::Cut);
                format!("broker {broker}{why} -> broker {other}")
            }
            FaultKind::Loss => {
                both_ways(&mut links, broker, other, Link::Lossy(20));
                format!("20% between broker {broker}{why} and broker {other}")
            }
            FaultKind::Isolate => {
                for o in &others {
                    both_ways(&mut links, broker, *o, Link::Cut);
                }
                format!("broker {broker}{why} from every other broker")
            }
            FaultKind::Split => {
                let mut rng = StdRng::seed_from_u64(p.pick);
                let mut minority = vec![broker];
                let mut rest = others.clone();
                while minority.len() < (n as usize - 1) / 2 {
                    minority.push(rest.remove(rng.random_range(0..rest.len())));
                }
                for a in &minority {
                    for b in &rest {
                        both_ways(&mut links, *a, *b, Link::Cut);
                    }
                }
                format!("{minority:?}{why} | {rest:?}")
            }
            _ => {
                // Bridge: a partition's leader cut from its followers, not from
                // the active controller.
                let partition = match p.target {
                    Target::Leader(x) => (x % self.partitions as u32) as i32,
                    _ => (p.pick % self.partitions as u64) as i32,
                };
                let controller = self.rig.cluster.active_controller();
                let Some((leader, replicas)) = replicas_of(self.rig, partition)
                    .await
                    .filter(|(leader, _)| *leader > 0)
                else {
                    // No leader to cut off (the partition is offline).
                    self.not_applied += 1;
                    return Ok(Applied::Nothing);
                };
                let cut: Vec<i32> = replicas
                    .iter()
                    .copied()
                    .filter(|r| *r != leader && Some(*r) != controller)
                    .collect();
                for f in &cut {
                    both_ways(&mut links, leader, *f, Link::Cut);
                }
                format!(
                    "leader {leader} of partition {partition} from followers {cut:?}, \
                     controller {controller:?} reachable"
                )
            }
        };
        self.network.insert(i, links);
        self.apply_network()?;
        self.started.push(p.kind);
        self.log(format!("+{} {what} {hold}", p.kind));
        Ok(Applied::Network)
    }

    async fn end(&mut self, i: usize, applied: Applied) -> anyhow::Result<()> {
        match applied {
            Applied::Process { kind, broker } => {
                match kind {
                    FaultKind::Pause => self.rig.cluster.resume(broker),
                    FaultKind::PowerLoss => {
                        if let Some(disk) = self.rig.disks.get_mut(&broker) {
                            disk.power_on()?;
                        }
                        self.rig.cluster.restart(broker);
                    }
                    FaultKind::Clock => {
                        set_clock(self.rig, broker, None);
                        self.rig.cluster.kill(broker);
                        self.rig.cluster.restart(broker);
                    }
                    FaultKind::DiskFull => {
                        if let Some(disk) = self.rig.disks.get(&broker) {
                            disk.drain()?;
                        }
                        // A log that failed to write stays failed until its
                        // broker restarts (Kafka's offline log directory).
                        self.rig.cluster.kill(broker);
                        self.rig.cluster.restart(broker);
                    }
                    FaultKind::Restart => {
                        self.rig.cluster.stop(broker, Duration::from_secs(2)).await;
                        self.rig.cluster.restart(broker);
                    }
                    _ => self.rig.cluster.restart(broker),
                }
                self.down.remove(&broker);
                self.log(format!("-{kind} broker {broker}"));
            }
            Applied::Network => {
                self.network.remove(&i);
                self.apply_network()?;
                self.log(format!("-network fault #{i}"));
            }
            Applied::Nothing => {}
        }
        Ok(())
    }
}

/// Which of `faults` this machine can inject, and why the others cannot.
pub fn available(faults: &[FaultKind]) -> (Vec<FaultKind>, Vec<String>) {
    let net = crate::net::unavailable();
    let power = crate::power::unavailable();
    let mut skipped = Vec::new();
    let mut kept = Vec::new();
    for k in faults {
        let why = if k.is_network() {
            net.as_ref()
        } else if k.is_disk() {
            power.as_ref()
        } else {
            None
        };
        match why {
            Some(w) => skipped.push(format!("{k}: {w}")),
            None => kept.push(*k),
        }
    }
    (kept, skipped)
}

/// A running cluster, its workload and its leader watch, from the start of
/// the workload to the verdict.
pub struct Session {
    pub rig: Rig,
    pub workload: Workload,
    watch: LeaderWatch,
    spec: Spec,
    pub setup: Setup,
    pub epoch: Instant,
}

impl fmt::Debug for Session {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Session")
            .field("setup", &self.setup)
            .finish()
    }
}

impl Session {
    /// Starts the cluster and the workload, and waits for the first
    /// acknowledgements.
    pub async fn start(setup: Setup) -> anyhow::Result<Session> {
        let rig = Rig::start(&setup).await?;
        Session::on(rig, setup).await
    }

    /// Starts the workload on a rig started already.
    pub async fn on(rig: Rig, setup: Setup) -> anyhow::Result<Session> {
        let watch = LeaderWatch::start(&rig.cluster, TOPIC);
        let epoch = Instant::now();
        let spec = Spec {
            topic: TOPIC.into(),
            partitions: setup.partitions,
            producers: 2,
            consumers: 2,
            acks: setup.acks,
            idempotent: setup.idempotent,
            pace: Duration::from_millis(20),
            delivery_timeout: Duration::from_secs(60),
            unpromised: Vec::new(),
        };
        let workload = Workload::start(&rig.brokers, &spec, epoch)?;
        workload
            .wait_acked(20, Duration::from_secs(30))
            .await
            .map_err(|e| anyhow::anyhow!("the workload did not start: {e}"))?;
        Ok(Session {
            rig,
            workload,
            watch,
            spec,
            setup,
            epoch,
        })
    }

    /// After every fault has ended: waits for healing (bounded), stops the
    /// workload, reads the final state and judges the history.
    pub async fn finish(mut self) -> anyhow::Result<(Verdict, Result<Duration, String>)> {
        let healing = Instant::now();
        let healed = match self.rig.wait_whole(HEAL_BOUND).await {
            Ok(_) => self
                .workload
                .wait_acked(20, HEAL_BOUND.saturating_sub(healing.elapsed()))
                .await
                .map(|_| healing.elapsed()),
            Err(e) => Err(format!("{e:#}")),
        };
        let sends = self
            .workload
            .stop_producers(self.spec.delivery_timeout + Duration::from_secs(10))
            .await;
        let rig = &self.rig;
        let _ = rig.wait_whole(Duration::from_secs(60)).await;
        let mut logs = BTreeMap::new();
        let mut ends = BTreeMap::new();
        let mut uncommitted = Vec::new();
        let bound = Duration::from_secs(30);
        for p in 0..self.setup.partitions {
            let read = rig.read_partition(p, bound).await?;
            if let Some(why) = read.uncommitted() {
                uncommitted.push(format!("partition {p}: {why} for {bound:?}"));
            }
            ends.insert(p, read.records.last().map_or(0, |(o, _)| o + 1));
            logs.insert(p, read.records);
        }
        let healed = not_healed_if_uncommitted(healed, &uncommitted);
        let history: History = self
            .workload
            .finish_consumers(ends, Duration::from_secs(30), sends)
            .await;
        let mut replicas = BTreeMap::new();
        for p in 0..self.setup.partitions {
            let start = Instant::now();
            let r = loop {
                match logs_identical(&rig.cluster, TOPIC, p).await {
                    Ok(_) => break Ok(()),
                    Err(e) if start.elapsed() > HEAL_BOUND => break Err(format!("{e:#}")),
                    Err(_) => tokio::time::sleep(Duration::from_millis(200)).await,
                }
            };
            replicas.insert(p, r);
        }
        let leadership = self.watch.finish().await.violations;
        let after = Final {
            logs,
            replicas,
            healed: healed.clone(),
            leadership,
        };
        let promise = Promise {
            min_isr: self.setup.min_isr as usize,
        };
        let verdict = check(&history, &after, promise);
        if !verdict.valid() {
            self.rig.keep_logs();
        }
        Ok((verdict, healed))
    }
}

impl Rig {
    /// Copies the brokers' logs and configs to `$SYNCLINE_CHAOS_KEEP/<dir>/`
    /// when that variable names a directory (after a violation: the cluster's
    /// own directory goes with it).
    fn keep_logs(&self) {
        let Some(keep) = std::env::var_os(KEEP_VAR) else {
            return;
        };
        let from = self.cluster.dir.path();
        let Some(name) = from.file_name() else {
            return;
        };
        let to = std::path::Path::new(&keep).join(name);
        if std::fs::create_dir_all(&to).is_err() {
            return;
        }
        for node in &self.cluster.nodes {
            for file in [&node.log, &node.config] {
                if let Some(n) = file.file_name() {
                    let _ = std::fs::copy(file, to.join(n));
                }
            }
        }
        println!("broker logs kept in {}", to.display());
    }
}

/// `healed`, unless a partition's final read still had records above its
/// high watermark when its bound ran out (`uncommitted`, one line each): then
/// the cluster is not healed, and that is why (after what else was missing).
fn not_healed_if_uncommitted(
    healed: Result<Duration, String>,
    uncommitted: &[String],
) -> Result<Duration, String> {
    if uncommitted.is_empty() {
        return healed;
    }
    let why = uncommitted.join(", ");
    match healed {
        Ok(_) => Err(why),
        Err(e) => Err(format!("{e}; {why}")),
    }
}

/// Names a directory where the brokers' logs of a run with a violation are
/// kept.
pub const KEEP_VAR: &str = "SYNCLINE_CHAOS_KEEP";

/// Runs the harness once.
pub async fn run(options: Options) -> anyhow::Result<Report> {
    anyhow::ensure!(
        options.brokers == 3 || options.brokers == 5,
        "--brokers must be 3 or 5"
    );
    let (faults, skipped) = available(&options.faults);
    let mut setup = Setup::new(options.settings, options.brokers, options.partitions);
    setup.network = faults.iter().any(|k| k.is_network());
    setup.power = faults.iter().any(|k| k.is_disk());
    // Safe settings survive power loss of every replica only with every
    // append fsynced.
    setup.flush_each = options
        .flush_each
        .unwrap_or(faults.contains(&FaultKind::PowerLoss) && options.settings == Settings::Safe);
    let mut session = Session::start(setup).await?;

    let plan = schedule(options.seed, options.duration, &faults);
    let mut events: Vec<(Duration, bool, usize)> = Vec::new();
    for (i, p) in plan.iter().enumerate() {
        events.push((p.at, true, i));
        events.push((p.at + p.hold, false, i));
    }
    // Ends before starts at one instant.
    events.sort_by_key(|(t, start, i)| (*t, *start, *i));
    let faults_start = Instant::now();
    let mut nemesis = Nemesis {
        rig: &mut session.rig,
        partitions: options.partitions,
        down: BTreeSet::new(),
        network: BTreeMap::new(),
        timeline: Vec::new(),
        started: Vec::new(),
        not_applied: 0,
        verbose: options.verbose,
        epoch: session.epoch,
    };
    let mut applied: BTreeMap<usize, Applied> = BTreeMap::new();
    for (at, start, i) in events {
        tokio::time::sleep_until(faults_start + at).await;
        if start {
            let a = nemesis.start(i, &plan[i]).await?;
            applied.insert(i, a);
        } else if let Some(a) = applied.remove(&i) {
            nemesis.end(i, a).await?;
        }
    }
    for (i, a) in std::mem::take(&mut applied) {
        nemesis.end(i, a).await?;
    }
    let (timeline, started, not_applied) = (
        std::mem::take(&mut nemesis.timeline),
        std::mem::take(&mut nemesis.started),
        nemesis.not_applied,
    );
    let (verdict, healed) = session.finish().await?;
    Ok(Report {
        options: Options { faults, ..options },
        skipped,
        timeline,
        started,
        not_applied,
        verdict,
        healed,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::path::Path;

    #[test]
    fn a_partition_whose_final_read_stayed_uncommitted_is_not_healed() {
        let behind =
            "partition 1: the leader's high watermark 57 stayed below its log end 58 for 30s";
        let healed = Ok(Duration::from_secs(3));
        let missing = Err("no full ISR within 30s".to_string());
        // (healed before the final reads, uncommitted partitions, healed after)
        type Healed = Result<Duration, String>;
        let cases: Vec<(Healed, Vec<&str>, Healed)> = vec![
            (healed.clone(), vec![], healed.clone()),
            (missing.clone(), vec![], missing.clone()),
            (healed.clone(), vec![behind], Err(behind.into())),
            (
                healed.clone(),
                vec![behind, "partition 2: behind too"],
                Err(format!("{behind}, partition 2: behind too")),
            ),
            (
                missing.clone(),
                vec![behind],
                Err(format!("no full ISR within 30s; {behind}")),
            ),
        ];
        for (before, uncommitted, after) in cases {
            let uncommitted: Vec<String> = uncommitted.into_iter().map(String::from).collect();
            assert_eq!(
                not_healed_if_uncommitted(before.clone(), &uncommitted),
                after,
                "{before:?} with {uncommitted:?}"
            );
        }
    }

    #[test]
    fn only_images_of_gone_processes_are_stale() {
        let mine = format!("/tmp/{IMAGE_PREFIX}{}-abc/broker-1.img", std::process::id());
        assert!(!is_stale_image(Path::new(&mine)));
        let mut child = std::process::Command::new("true").spawn().unwrap();
        let gone = child.id();
        child.wait().unwrap();
        let theirs = format!("/tmp/{IMAGE_PREFIX}{gone}-xyz/broker-1.img");
        assert!(is_stale_image(Path::new(&theirs)));
        assert!(!is_stale_image(Path::new("/tmp/other-123-x/broker-1.img")));
        assert!(!is_stale_image(Path::new(&format!(
            "/tmp/{IMAGE_PREFIX}x-y/b.img"
        ))));
    }
}
