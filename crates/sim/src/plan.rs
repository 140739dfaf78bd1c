//! A run's faults, from its seed alone: what happens, to whom, when and for
//! how long. Pure, so a seed names one schedule on every machine.

use std::fmt;
use std::time::Duration;

use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};

/// The simulated client host's name in faults (brokers are 1..=n).
pub const CLIENT: i32 = 0;

/// One fault of the simulated world.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Fault {
    /// The broker's process dies (its tasks and connections vanish), then
    /// starts again from its files.
    Crash(i32),
    /// Nothing gets through between the two, either way, until the end; then
    /// what was sent arrives (TCP retransmits across a partition that heals).
    Cut(i32, i32),
    /// What the first sends the second is held (either's connections), what
    /// the second sends flows; held messages arrive at the end.
    OneWay(i32, i32),
    /// The broker cut from every other host, clients included.
    Isolate(i32),
    /// The client cut from one broker (it must find the leader elsewhere).
    ClientCut(i32),
    /// Messages between the two take up to [`SLOW_LINK`] (reordered across
    /// connections, in order within one).
    Delay(i32, i32),
    /// The broker loses its power: its process dies and its segment files lose
    /// what was not fsynced; it starts again from what is left.
    PowerLoss(i32),
    /// Every broker loses its power at once (the case `flush.messages=1` is
    /// for).
    Blackout,
    /// The broker's disk is full: its writes fail with ENOSPC until the end.
    DiskFull(i32),
    /// The broker's disk fails every fsync with EIO until the end (writes
    /// still land in the page cache): its log fails and the broker stops; its
    /// supervisor restarts it.
    DiskError(i32),
    /// The broker's process is stopped (SIGSTOP: a long GC pause), its clock
    /// with it; at the end it resumes where it was, every timer due at once,
    /// and acts on what it believed before the pause.
    Pause(i32),
    /// Partition 0's leader, when the fault starts, crashes (when they follow
    /// one another, leadership changes fast).
    LeaderCrash,
    /// The active controller crashes: a controller failover.
    ControllerCrash,
    /// The active controller is paused: another takes office, and at the end
    /// the old one wakes believing it still leads (a zombie controller).
    ControllerPause,
    /// Jepsen's 2013 Kafka partition: partition 0's leader cut from its
    /// followers only (the client and any other broker still reach it).
    Bridge,
}

/// Who leads, as the client last saw it: what a targeted fault (one naming a
/// role rather than a broker) is aimed at when it starts.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Roles {
    /// Partition 0's leader and replicas.
    pub leader: Option<(i32, Vec<i32>)>,
    /// The active controller.
    pub controller: Option<i32>,
}

/// The worst latency of a delayed link.
pub const SLOW_LINK: std::time::Duration = std::time::Duration::from_millis(400);

impl fmt::Display for Fault {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Fault::Crash(b) => write!(f, "crash broker {b}"),
            Fault::Cut(a, b) => write!(f, "cut {a} <-> {b}"),
            Fault::OneWay(a, b) => write!(f, "cut {a} -> {b}"),
            Fault::Isolate(b) => write!(f, "isolate broker {b}"),
            Fault::ClientCut(b) => write!(f, "cut client <-> {b}"),
            Fault::Delay(a, b) => write!(f, "delay {a} <-> {b}"),
            Fault::PowerLoss(b) => write!(f, "power loss of broker {b}"),
            Fault::Blackout => write!(f, "power loss of every broker"),
            Fault::DiskFull(b) => write!(f, "disk of broker {b} full"),
            Fault::DiskError(b) => write!(f, "fsyncs of broker {b} fail (EIO)"),
            Fault::Pause(b) => write!(f, "pause broker {b}"),
            Fault::LeaderCrash => write!(f, "crash partition 0's leader"),
            Fault::ControllerCrash => write!(f, "crash the active controller"),
            Fault::ControllerPause => write!(f, "pause the active controller"),
            Fault::Bridge => write!(f, "cut partition 0's leader from its followers"),
        }
    }
}

/// The kinds of fault, by name.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub enum Kind {
    Crash,
    Cut,
    OneWay,
    Isolate,
    ClientCut,
    Delay,
    PowerLoss,
    Blackout,
    DiskFull,
    DiskError,
    Pause,
    LeaderCrash,
    ControllerCrash,
    ControllerPause,
    Bridge,
}

impl Kind {
    pub const ALL: [Kind; 15] = [
        Kind::Crash,
        Kind::Cut,
        Kind::OneWay,
        Kind::Isolate,
        Kind::ClientCut,
        Kind::Delay,
        Kind::PowerLoss,
        Kind::Blackout,
        Kind::DiskFull,
        Kind::DiskError,
        Kind::Pause,
        Kind::LeaderCrash,
        Kind::ControllerCrash,
        Kind::ControllerPause,
        Kind::Bridge,
    ];

    #[must_use]
    pub fn name(self) -> &'static str {
        match self {
            Kind::Crash => "crash",
            Kind::Cut => "cut",
            Kind::OneWay => "one-way",
            Kind::Isolate => "isolate",
            Kind::ClientCut => "client-cut",
            Kind::Delay => "delay",
            Kind::PowerLoss => "power-loss",
            Kind::Blackout => "blackout",
            Kind::DiskFull => "disk-full",
            Kind::DiskError => "disk-error",
            Kind::Pause => "pause",
            Kind::LeaderCrash => "leader-crash",
            Kind::ControllerCrash => "controller-crash",
            Kind::ControllerPause => "controller-pause",
            Kind::Bridge => "bridge",
        }
    }

    /// Whether the kind takes away what was not fsynced.
    #[must_use]
    pub fn loses_power(self) -> bool {
        matches!(self, Kind::PowerLoss | Kind::Blackout)
    }

    /// Whether the kind is about fsync (power lost, or fsyncs failing): the
    /// brokers then fsync every append, as the promise asks for against it.
    #[must_use]
    pub fn tests_fsync(self) -> bool {
        self.loses_power() || self == Kind::DiskError
    }
}

impl std::str::FromStr for Kind {
    type Err = String;

    fn from_str(s: &str) -> Result<Kind, String> {
        by_name(s, &Kind::ALL, Kind::name, "fault kind")
    }
}

/// The one of `all` whose `name` is `s`, or an error naming the choices.
pub fn by_name<T: Copy>(
    s: &str,
    all: &[T],
    name: fn(T) -> &'static str,
    what: &str,
) -> Result<T, String> {
    all.iter().copied().find(|&t| name(t) == s).ok_or_else(|| {
        let names: Vec<&str> = all.iter().map(|&t| name(t)).collect();
        format!("no {what} \"{s}\" (choose from {})", names.join(", "))
    })
}

impl Fault {
    /// The fault's kind.
    #[must_use]
    pub fn kind(&self) -> Kind {
        match self {
            Fault::Crash(_) => Kind::Crash,
            Fault::Cut(..) => Kind::Cut,
            Fault::OneWay(..) => Kind::OneWay,
            Fault::Isolate(_) => Kind::Isolate,
            Fault::ClientCut(_) => Kind::ClientCut,
            Fault::Delay(..) => Kind::Delay,
            Fault::PowerLoss(_) => Kind::PowerLoss,
            Fault::Blackout => Kind::Blackout,
            Fault::DiskFull(_) => Kind::DiskFull,
            Fault::DiskError(_) => Kind::DiskError,
            Fault::Pause(_) => Kind::Pause,
            Fault::LeaderCrash => Kind::LeaderCrash,
            Fault::ControllerCrash => Kind::ControllerCrash,
            Fault::ControllerPause => Kind::ControllerPause,
            Fault::Bridge => Kind::Bridge,
        }
    }

    /// The faults on named hosts that this one is when it starts: itself, or,
    /// for a targeted fault, what it does to the target `roles` name (nothing
    /// when the client has not seen the role filled yet).
    #[must_use]
    pub fn resolve(self, roles: &Roles) -> Vec<Fault> {
        let leader = roles.leader.as_ref();
        match self {
            Fault::LeaderCrash => leader.map(|(l, _)| Fault::Crash(*l)).into_iter().collect(),
            Fault::ControllerCrash => roles.controller.map(Fault::Crash).into_iter().collect(),
            Fault::ControllerPause => roles.controller.map(Fault::Pause).into_iter().collect(),
            Fault::Bridge => leader
                .map(|(l, replicas)| {
                    replicas
                        .iter()
                        .filter(|&r| r != l)
                        .map(|&f| Fault::Cut(*l, f))
                        .collect()
                })
                .unwrap_or_default(),
            concrete => vec![concrete],
        }
    }

    /// The links this fault cuts, as (lower, higher) host numbers.
    #[must_use]
    pub fn cut_links(&self, brokers: i32) -> Vec<(i32, i32)> {
        match *self {
            Fault::Crash(_)
            | Fault::OneWay(..)
            | Fault::Delay(..)
            | Fault::PowerLoss(_)
            | Fault::Blackout
            | Fault::DiskFull(_)
            | Fault::DiskError(_)
            | Fault::Pause(_)
            | Fault::LeaderCrash
            | Fault::ControllerCrash
            | Fault::ControllerPause
            | Fault::Bridge => Vec::new(),
            Fault::Cut(a, b) => vec![(a.min(b), a.max(b))],
            Fault::ClientCut(b) => vec![(CLIENT, b)],
            Fault::Isolate(b) => (0..=brokers)
                .filter(|&o| o != b)
                .map(|o| (o.min(b), o.max(b)))
                .collect(),
        }
    }
}

/// A fault and when it starts and ends, from the start of the workload.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Planned {
    pub at: Duration,
    pub hold: Duration,
    pub fault: Fault,
}

/// The schedule of `seed` for `brokers` over `duration`, of faults of
/// `kinds` (each as likely): faults at random gaps (0.2 to 3 s), each held
/// 0.5 to 8 s, so they overlap; every fault ends by `duration`.
#[must_use]
pub fn plan(seed: u64, brokers: i32, duration: Duration, kinds: &[Kind]) -> Vec<Planned> {
    if kinds.is_empty() {
        return Vec::new();
    }
    let mut rng = StdRng::seed_from_u64(seed);
    let mut out = Vec::new();
    let mut at = Duration::from_millis(rng.random_range(500..2_000));
    while at < duration {
        let hold = Duration::from_millis(rng.random_range(500..8_000)).min(duration - at);
        let a = rng.random_range(1..=brokers);
        let b = loop {
            let b = rng.random_range(1..=brokers);
            if b != a {
                break b;
            }
        };
        let fault = match kinds[rng.random_range(0..kinds.len())] {
            Kind::Crash => Fault::Crash(a),
            Kind::Cut => Fault::Cut(a, b),
            Kind::OneWay => Fault::OneWay(a, b),
            Kind::Isolate => Fault::Isolate(a),
            Kind::Delay => Fault::Delay(a, b),
            Kind::ClientCut => Fault::ClientCut(a),
            Kind::PowerLoss => Fault::PowerLoss(a),
            Kind::Blackout => Fault::Blackout,
            Kind::DiskFull => Fault::DiskFull(a),
            Kind::DiskError => Fault::DiskError(a),
            Kind::Pause => Fault::Pause(a),
            Kind::LeaderCrash => Fault::LeaderCrash,
            Kind::ControllerCrash => Fault::ControllerCrash,
            Kind::ControllerPause => Fault::ControllerPause,
            Kind::Bridge => Fault::Bridge,
        };
        out.push(Planned { at, hold, fault });
        at += Duration::from_millis(rng.random_range(200..3_000));
    }
    out
}

/// When the workload's second topic is created, from the workload's start:
/// within the first half of the faults, so that faults and healing meet it.
#[must_use]
pub fn late_topic_at(seed: u64, duration: Duration) -> Duration {
    // A stream of its own, so that the fault schedule stays what it was.
    let mut rng = StdRng::seed_from_u64(seed ^ 0x6c61_7465_746f_7069);
    let half = (duration.as_millis() as u64 / 2).max(1);
    Duration::from_millis(rng.random_range(0..half))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_seed_names_one_schedule() {
        let d = Duration::from_secs(30);
        assert_eq!(plan(7, 3, d, &Kind::ALL), plan(7, 3, d, &Kind::ALL));
        assert_ne!(plan(7, 3, d, &Kind::ALL), plan(8, 3, d, &Kind::ALL));
    }

    #[test]
    fn every_fault_ends_by_the_duration_and_names_real_brokers() {
        let d = Duration::from_secs(20);
        for seed in 0..200 {
            for p in plan(seed, 3, d, &Kind::ALL) {
                assert!(p.at + p.hold <= d, "seed {seed}: {p:?}");
                let ids = match p.fault {
                    Fault::Crash(a)
                    | Fault::Isolate(a)
                    | Fault::ClientCut(a)
                    | Fault::PowerLoss(a)
                    | Fault::DiskFull(a)
                    | Fault::DiskError(a)
                    | Fault::Pause(a) => vec![a],
                    Fault::Blackout
                    | Fault::LeaderCrash
                    | Fault::ControllerCrash
                    | Fault::ControllerPause
                    | Fault::Bridge => vec![],
                    Fault::Cut(a, b) | Fault::OneWay(a, b) | Fault::Delay(a, b) => {
                        assert_ne!(a, b, "seed {seed}");
                        vec![a, b]
                    }
                };
                assert!(
                    ids.iter().all(|i| (1..=3).contains(i)),
                    "seed {seed}: {p:?}"
                );
            }
        }
    }

    #[test]
    fn faults_overlap_and_every_kind_is_drawn() {
        let d = Duration::from_secs(60);
        let mut overlapping = 0;
        let mut kinds = std::collections::BTreeSet::new();
        for seed in 0..50 {
            let p = plan(seed, 3, d, &Kind::ALL);
            overlapping += p
                .windows(2)
                .filter(|w| w[1].at < w[0].at + w[0].hold)
                .count();
            kinds.extend(p.iter().map(|p| p.fault.kind()));
        }
        assert!(overlapping > 100, "{overlapping} overlaps");
        assert_eq!(kinds.len(), Kind::ALL.len());
    }

    #[test]
    fn only_the_chosen_kinds_are_drawn() {
        let d = Duration::from_secs(60);
        for seed in 0..20 {
            let p = plan(seed, 3, d, &[Kind::Crash, Kind::Delay]);
            assert!(!p.is_empty());
            assert!(p
                .iter()
                .all(|p| matches!(p.fault.kind(), Kind::Crash | Kind::Delay)));
        }
        assert!(plan(1, 3, d, &[]).is_empty());
        assert_eq!("client-cut".parse::<Kind>(), Ok(Kind::ClientCut));
        let e = "fire".parse::<Kind>().unwrap_err();
        assert!(e.contains("\"fire\"") && e.contains("crash, cut"), "{e}");
    }

    #[test]
    fn cut_links_table() {
        let cases: Vec<(Fault, Vec<(i32, i32)>)> = vec![
            (Fault::Crash(1), vec![]),
            (Fault::Delay(1, 2), vec![]),
            (Fault::OneWay(1, 2), vec![]),
            (Fault::PowerLoss(1), vec![]),
            (Fault::Blackout, vec![]),
            (Fault::DiskFull(3), vec![]),
            (Fault::DiskError(3), vec![]),
            (Fault::Pause(3), vec![]),
            (Fault::Bridge, vec![]),
            (Fault::Cut(2, 1), vec![(1, 2)]),
            (Fault::ClientCut(2), vec![(0, 2)]),
            (Fault::Isolate(2), vec![(0, 2), (1, 2), (2, 3)]),
        ];
        for (fault, links) in cases {
            assert_eq!(fault.cut_links(3), links, "{fault}");
        }
    }

    #[test]
    fn targeted_faults_resolve_against_the_roles_seen() {
        let roles = Roles {
            leader: Some((2, vec![2, 3, 1])),
            controller: Some(3),
        };
        let unknown = Roles::default();
        let cases: Vec<(Fault, &Roles, Vec<Fault>)> = vec![
            (Fault::LeaderCrash, &roles, vec![Fault::Crash(2)]),
            (Fault::ControllerCrash, &roles, vec![Fault::Crash(3)]),
            (Fault::ControllerPause, &roles, vec![Fault::Pause(3)]),
            (
                Fault::Bridge,
                &roles,
                vec![Fault::Cut(2, 3), Fault::Cut(2, 1)],
            ),
            (Fault::LeaderCrash, &unknown, vec![]),
            (Fault::ControllerPause, &unknown, vec![]),
            (Fault::Bridge, &unknown, vec![]),
            (Fault::Pause(1), &unknown, vec![Fault::Pause(1)]),
            (Fault::Cut(1, 2), &roles, vec![Fault::Cut(1, 2)]),
        ];
        for (fault, roles, resolved) in cases {
            assert_eq!(fault.resolve(roles), resolved, "{fault} with {roles:?}");
        }
    }

    #[test]
    fn the_late_topic_comes_in_the_first_half_of_the_faults() {
        let d = Duration::from_secs(10);
        let times: Vec<Duration> = (0..100).map(|s| late_topic_at(s, d)).collect();
        assert!(times.iter().all(|&t| t < d / 2), "{times:?}");
        assert_eq!(late_topic_at(3, d), late_topic_at(3, d));
        assert!(times.iter().any(|&t| t != times[0]));
    }
}
