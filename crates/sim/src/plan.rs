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
    /// The broker cut from every other host, clients included.
    Isolate(i32),
    /// The client cut from one broker (it must find the leader elsewhere).
    ClientCut(i32),
    /// Messages between the two take up to [`SLOW_LINK`] (reordered across
    /// connections, in order within one).
    Delay(i32, i32),
}

/// The worst latency of a delayed link.
pub const SLOW_LINK: std::time::Duration = std::time::Duration::from_millis(400);

impl fmt::Display for Fault {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Fault::Crash(b) => write!(f, "crash broker {b}"),
            Fault::Cut(a, b) => write!(f, "cut {a} <-> {b}"),
            Fault::Isolate(b) => write!(f, "isolate broker {b}"),
            Fault::ClientCut(b) => write!(f, "cut client <-> {b}"),
            Fault::Delay(a, b) => write!(f, "delay {a} <-> {b}"),
        }
    }
}

/// The kinds of fault, by name.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub enum Kind {
    Crash,
    Cut,
    Isolate,
    ClientCut,
    Delay,
}

impl Kind {
    pub const ALL: [Kind; 5] = [
        Kind::Crash,
        Kind::Cut,
        Kind::Isolate,
        Kind::ClientCut,
        Kind::Delay,
    ];

    #[must_use]
    pub fn name(self) -> &'static str {
        match self {
            Kind::Crash => "crash",
            Kind::Cut => "cut",
            Kind::Isolate => "isolate",
            Kind::ClientCut => "client-cut",
            Kind::Delay => "delay",
        }
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
            Fault::Isolate(_) => Kind::Isolate,
            Fault::ClientCut(_) => Kind::ClientCut,
            Fault::Delay(..) => Kind::Delay,
        }
    }

    /// The links this fault cuts, as (lower, higher) host numbers.
    #[must_use]
    pub fn cut_links(&self, brokers: i32) -> Vec<(i32, i32)> {
        match *self {
            Fault::Crash(_) | Fault::Delay(..) => Vec::new(),
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
            Kind::Isolate => Fault::Isolate(a),
            Kind::Delay => Fault::Delay(a, b),
            Kind::ClientCut => Fault::ClientCut(a),
        };
        out.push(Planned { at, hold, fault });
        at += Duration::from_millis(rng.random_range(200..3_000));
    }
    out
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
                    Fault::Crash(a) | Fault::Isolate(a) | Fault::ClientCut(a) => vec![a],
                    Fault::Cut(a, b) | Fault::Delay(a, b) => {
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
        assert_eq!(kinds.len(), 5);
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
            (Fault::Cut(2, 1), vec![(1, 2)]),
            (Fault::ClientCut(2), vec![(0, 2)]),
            (Fault::Isolate(2), vec![(0, 2), (1, 2), (2, 3)]),
        ];
        for (fault, links) in cases {
            assert_eq!(fault.cut_links(3), links, "{fault}");
        }
    }
}
