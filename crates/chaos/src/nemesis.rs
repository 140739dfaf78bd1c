//! The nemesis' schedule: which fault starts when, for how long, against whom.
//! Drawn from a seed alone, so `--seed` replays it; the targets named by role
//! (the leader of a partition, the active controller) are resolved against the
//! cluster when each fault starts. Faults overlap: a new one may start while
//! others hold, and quiet periods let the cluster heal in between.

use std::fmt;
use std::str::FromStr;
use std::time::Duration;

use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};

/// One kind of fault.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum FaultKind {
    /// SIGKILL, then a restart when the fault ends.
    Kill,
    /// SIGSTOP, then SIGCONT (a long GC pause).
    Pause,
    /// SIGTERM (a clean shutdown), then a restart.
    Restart,
    /// Both directions between the target and one other broker cut.
    Cut,
    /// Packets from the target to one other broker dropped, the other way whole.
    OneWay,
    /// The target cut from every other broker.
    Isolate,
    /// The brokers split in two groups, a majority and a minority.
    Split,
    /// The Jepsen 2013 shape: a partition's leader cut from its followers but
    /// not from the active controller.
    Bridge,
    /// A fifth of the packets between the target and one other broker lost.
    Loss,
    /// SIGKILL and the data directory's unsynced writes lost, then a restart.
    PowerLoss,
    /// The data directory's filesystem full (ENOSPC); when it ends, the space
    /// is freed and the broker restarted, as an operator would.
    DiskFull,
    /// The broker restarted with its wall clock skewed (up to ten minutes
    /// either way), restarted with the right one when the fault ends.
    Clock,
}

/// Every kind, in the order `--faults` lists them.
pub const ALL: [FaultKind; 12] = [
    FaultKind::Kill,
    FaultKind::Pause,
    FaultKind::Restart,
    FaultKind::Cut,
    FaultKind::OneWay,
    FaultKind::Isolate,
    FaultKind::Split,
    FaultKind::Bridge,
    FaultKind::Loss,
    FaultKind::PowerLoss,
    FaultKind::DiskFull,
    FaultKind::Clock,
];

impl FaultKind {
    /// Its name on the command line.
    pub fn name(self) -> &'static str {
        match self {
            FaultKind::Kill => "kill",
            FaultKind::Pause => "pause",
            FaultKind::Restart => "restart",
            FaultKind::Cut => "cut",
            FaultKind::OneWay => "one-way",
            FaultKind::Isolate => "isolate",
            FaultKind::Split => "split",
            FaultKind::Bridge => "bridge",
            FaultKind::Loss => "loss",
            FaultKind::PowerLoss => "power-loss",
            FaultKind::DiskFull => "disk-full",
            FaultKind::Clock => "clock",
        }
    }

    /// True for faults of the network (they need nftables).
    pub fn is_network(self) -> bool {
        matches!(
            self,
            FaultKind::Cut
                | FaultKind::OneWay
                | FaultKind::Isolate
                | FaultKind::Split
                | FaultKind::Bridge
                | FaultKind::Loss
        )
    }

    /// True for faults that stop or kill a process.
    pub fn is_process(self) -> bool {
        matches!(
            self,
            FaultKind::Kill
                | FaultKind::Pause
                | FaultKind::Restart
                | FaultKind::PowerLoss
                | FaultKind::DiskFull
                | FaultKind::Clock
        )
    }

    /// True for faults of the data directory's disk (they need loop devices).
    pub fn is_disk(self) -> bool {
        matches!(self, FaultKind::PowerLoss | FaultKind::DiskFull)
    }
}

impl fmt::Display for FaultKind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

impl FromStr for FaultKind {
    type Err = String;

    fn from_str(s: &str) -> Result<Self, String> {
        ALL.into_iter().find(|k| k.name() == s).ok_or_else(|| {
            let names: Vec<&str> = ALL.iter().map(|k| k.name()).collect();
            format!("unknown fault {s:?}: choose from {}", names.join(", "))
        })
    }
}

/// Parses `--faults`: `all`, or kinds separated by commas.
pub fn parse_faults(s: &str) -> Result<Vec<FaultKind>, String> {
    if s == "all" {
        return Ok(ALL.to_vec());
    }
    let mut kinds = Vec::new();
    for name in s.split(',').map(str::trim).filter(|n| !n.is_empty()) {
        let k: FaultKind = name.parse()?;
        if !kinds.contains(&k) {
            kinds.push(k);
        }
    }
    if kinds.is_empty() {
        return Err("--faults names no fault".into());
    }
    Ok(kinds)
}

/// Whom a fault hits, resolved when it starts.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Target {
    /// The leader of partition `n` (modulo the partition count).
    Leader(u32),
    /// The active controller.
    Controller,
    /// Broker `n` (modulo the broker count, from 1).
    Broker(u32),
}

impl fmt::Display for Target {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Target::Leader(p) => write!(f, "the leader of partition #{p}"),
            Target::Controller => f.write_str("the active controller"),
            Target::Broker(b) => write!(f, "broker #{b}"),
        }
    }
}

/// One fault of the schedule.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Planned {
    /// When it starts, from the start of the faults.
    pub at: Duration,
    /// How long it holds.
    pub hold: Duration,
    pub kind: FaultKind,
    pub target: Target,
    /// A draw for the rest of the choice (the other broker of a cut, the split).
    pub pick: u64,
}

/// The schedule of faults for `duration`, from `seed`, of the given kinds.
/// Faults start 0.3 to 3 s apart, hold 0.5 to 8 s (so they often overlap),
/// and after about one in four a quiet period lets every fault end and the
/// cluster heal for 2 to 6 s.
#[must_use]
pub fn schedule(seed: u64, duration: Duration, kinds: &[FaultKind]) -> Vec<Planned> {
    let mut rng = StdRng::seed_from_u64(seed);
    let mut plan: Vec<Planned> = Vec::new();
    let mut t = Duration::ZERO;
    if kinds.is_empty() {
        return plan;
    }
    while t < duration {
        let kind = kinds[rng.random_range(0..kinds.len())];
        let target = match rng.random_range(0..10) {
            0..=4 => Target::Leader(rng.random_range(0..64)),
            5..=6 => Target::Controller,
            _ => Target::Broker(rng.random_range(0..64)),
        };
        let hold = Duration::from_millis(rng.random_range(500..=8_000));
        let hold = hold.min(duration - t);
        plan.push(Planned {
            at: t,
            hold,
            kind,
            target,
            pick: rng.random(),
        });
        if rng.random_range(0..4) == 0 {
            let end = plan.iter().map(|p| p.at + p.hold).max().unwrap_or(t);
            t = end + Duration::from_millis(rng.random_range(2_000..=6_000));
        } else {
            t += Duration::from_millis(rng.random_range(300..=3_000));
        }
    }
    plan
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_seed_replays_its_schedule_and_another_seed_differs() {
        let d = Duration::from_secs(120);
        assert_eq!(schedule(7, d, &ALL), schedule(7, d, &ALL));
        assert_ne!(schedule(7, d, &ALL), schedule(8, d, &ALL));
    }

    #[test]
    fn faults_overlap_stay_within_the_run_and_use_only_the_chosen_kinds() {
        let d = Duration::from_secs(120);
        let kinds = [FaultKind::Kill, FaultKind::Cut];
        let plan = schedule(42, d, &kinds);
        assert!(plan.len() > 20, "{} faults", plan.len());
        assert!(plan.iter().all(|p| kinds.contains(&p.kind)));
        assert!(plan.iter().all(|p| p.at + p.hold <= d));
        let overlapping = plan
            .windows(2)
            .filter(|w| w[1].at < w[0].at + w[0].hold)
            .count();
        assert!(overlapping > 5, "{overlapping} overlaps");
        // Quiet periods: some gap with nothing holding.
        let quiet = plan.windows(2).any(|w| {
            let end = plan
                .iter()
                .filter(|p| p.at <= w[0].at)
                .map(|p| p.at + p.hold)
                .max()
                .unwrap_or_default();
            w[1].at >= end + Duration::from_secs(2)
        });
        assert!(quiet, "no quiet period");
    }

    #[test]
    fn faults_parse_by_name_and_a_bad_name_says_the_choices() {
        assert_eq!(parse_faults("all").unwrap(), ALL.to_vec());
        assert_eq!(
            parse_faults("kill, cut,kill").unwrap(),
            vec![FaultKind::Kill, FaultKind::Cut]
        );
        let e = parse_faults("kill,fire").unwrap_err();
        assert!(e.contains("\"fire\"") && e.contains("power-loss"), "{e}");
        assert!(parse_faults(",").is_err());
    }
}
