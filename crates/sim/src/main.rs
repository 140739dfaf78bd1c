//! `syncline-sim`: runs seeds of the simulation and prints one line per seed;
//! a failing seed prints the command that replays it. Each seed runs in a
//! process of its own, so that its replay (the same arguments in a fresh
//! process) is exact.

use std::process::{Command, ExitCode};
use std::time::Duration;

use clap::Parser;
use syncline_sim::plan::Kind;
use syncline_sim::run::{run, Options, Plant};

syncline_sim::replace_os_randomness!();

/// Set in the process that runs one seed for a parent running many.
const CHILD_VAR: &str = "SYNCLINE_SIM_CHILD";

/// Runs whole syncline clusters under a simulated network and clock.
#[derive(Debug, Parser)]
#[command(name = "syncline-sim")]
struct Args {
    /// The first seed (random when not given; it is printed).
    #[arg(long)]
    seed: Option<u64>,
    /// How many seeds: SEED, SEED+1, ...
    #[arg(long, default_value_t = 1)]
    seeds: u64,
    /// Simulated seconds of faults per seed.
    #[arg(long, default_value_t = 20)]
    duration: u64,
    /// Brokers (the first three are the controller quorum).
    #[arg(long, default_value_t = 3, value_parser = clap::value_parser!(u16).range(3..=5))]
    brokers: u16,
    /// Partitions of the workload's topic.
    #[arg(long, default_value_t = 2, value_parser = clap::value_parser!(i32).range(1..=16))]
    partitions: i32,
    /// The kinds of fault to draw from (comma-separated): crash, cut,
    /// one-way, isolate, client-cut, delay, power-loss, blackout, disk-full,
    /// disk-error, pause, leader-crash, controller-crash, controller-pause, bridge (the
    /// last four aimed at partition 0's leader or the active controller as
    /// the client last saw them). With power-loss or blackout among them the
    /// brokers fsync every append (flush.messages=1), as the promise requires.
    #[arg(
        long,
        value_delimiter = ',',
        default_value = "crash,cut,one-way,isolate,client-cut,delay,power-loss,blackout,disk-full,disk-error,pause,leader-crash,controller-crash,controller-pause,bridge"
    )]
    faults: Vec<Kind>,
    /// No faults: the baseline.
    #[arg(long)]
    no_faults: bool,
    /// Print each seed's event trace.
    #[arg(long)]
    trace: bool,
    /// Plant a bug in every broker, to see the checker catch it:
    /// hw-truncation (followers truncate to their high watermark, before
    /// KIP-101), no-second-caught-up-rule (spurious ISR shrinks under a
    /// steady load), lost-fsync (appends never fsynced yet acknowledged as
    /// durable) or no-min-isr-check (acks=all acknowledged with an ISR below
    /// min.insync.replicas); repeatable.
    #[arg(long, value_name = "BUG")]
    plant: Vec<Plant>,
    /// The producers' acks: all (idempotent), or 1 (the leader alone: records
    /// arrive whatever the followers do; faults may then lose acknowledged
    /// records).
    #[arg(long, default_value = "all", value_parser = ["all", "1"])]
    acks: String,
    /// A healthy link's worst latency in milliseconds (the best is a fiftieth).
    #[arg(long, default_value_t = 5, value_parser = clap::value_parser!(u64).range(1..=1_000))]
    latency_ms: u64,
    /// Producers, each sending to every partition.
    #[arg(long, default_value_t = 2, value_parser = clap::value_parser!(u16).range(1..=64))]
    producers: u16,
    /// No producers beside the promised ones (by default one with acks=1 and
    /// one with acks=0 share the logs; the checker holds their records only
    /// to what holds for every record).
    #[arg(long)]
    no_side_producers: bool,
    /// Do not create the second topic during the faults.
    #[arg(long)]
    no_late_topic: bool,
    /// No consumer group reading the first topic.
    #[arg(long)]
    no_group: bool,
    /// Milliseconds between two sends of a producer to a partition.
    #[arg(long, default_value_t = 20, value_parser = clap::value_parser!(u64).range(1..=10_000))]
    pace_ms: u64,
}

impl Args {
    fn options(&self, seed: u64) -> Options {
        Options {
            seed,
            brokers: self.brokers.into(),
            partitions: self.partitions,
            duration: Duration::from_secs(self.duration),
            faults: !self.no_faults,
            planted: self.plant.clone(),
            pace: Duration::from_millis(self.pace_ms),
            acks_leader: self.acks == "1",
            latency: Duration::from_millis(self.latency_ms),
            producers: self.producers.into(),
            kinds: self.faults.clone(),
            side_producers: !self.no_side_producers,
            late_topic: !self.no_late_topic,
            group: !self.no_group,
        }
    }

    /// The arguments that run `seed` alone with these options.
    fn child_args(&self, seed: u64) -> Vec<String> {
        let mut a = vec![
            format!("--seed={seed}"),
            format!("--duration={}", self.duration),
            format!("--brokers={}", self.brokers),
            format!("--partitions={}", self.partitions),
            format!("--acks={}", self.acks),
            format!("--latency-ms={}", self.latency_ms),
            format!("--producers={}", self.producers),
            format!("--pace-ms={}", self.pace_ms),
        ];
        a.extend(self.plant.iter().map(|p| format!("--plant={}", p.name())));
        let kinds: Vec<&str> = self.faults.iter().map(|k| k.name()).collect();
        a.push(format!("--faults={}", kinds.join(",")));
        if self.no_faults {
            a.push("--no-faults".into());
        }
        if self.no_side_producers {
            a.push("--no-side-producers".into());
        }
        if self.no_late_topic {
            a.push("--no-late-topic".into());
        }
        if self.no_group {
            a.push("--no-group".into());
        }
        if self.trace {
            a.push("--trace".into());
        }
        a
    }
}

/// The figures of a set of seeds.
#[derive(Debug, Default)]
struct Tally {
    valid: u64,
    invalid: u64,
    failed: u64,
    faults: u64,
    simulated_ms: u64,
}

impl Tally {
    fn line(&self) -> String {
        format!(
            "#tally {} {} {} {} {}",
            self.valid, self.invalid, self.failed, self.faults, self.simulated_ms
        )
    }

    fn add_line(&mut self, line: &str) -> bool {
        let Some(rest) = line.strip_prefix("#tally ") else {
            return false;
        };
        let n: Vec<u64> = rest.split(' ').filter_map(|x| x.parse().ok()).collect();
        if let [v, i, f, faults, ms] = n[..] {
            self.valid += v;
            self.invalid += i;
            self.failed += f;
            self.faults += faults;
            self.simulated_ms += ms;
        }
        true
    }
}

/// Runs one seed here and now.
fn run_one(args: &Args, seed: u64) -> Tally {
    let options = args.options(seed);
    let mut tally = Tally::default();
    match run(&options) {
        Ok(report) => {
            if args.trace {
                for line in &report.trace {
                    println!("  {line}");
                }
            }
            println!("{report}");
            tally.faults = report.faults as u64;
            tally.simulated_ms = report.simulated.as_millis() as u64;
            if report.valid() {
                tally.valid = 1;
            } else {
                tally.invalid = 1;
            }
        }
        Err(e) => {
            tally.failed = 1;
            println!("seed {seed}: could not be run: {e:#}");
            println!("replay: {}", options.replay_command());
        }
    }
    tally
}

/// Runs one seed in a process of its own and passes its output on.
fn run_child(args: &Args, seed: u64) -> Tally {
    let mut tally = Tally::default();
    let out = std::env::current_exe().and_then(|exe| {
        Command::new(exe)
            .args(args.child_args(seed))
            .env(CHILD_VAR, "1")
            .output()
    });
    match out {
        Ok(out) => {
            let text = String::from_utf8_lossy(&out.stdout);
            let mut tallied = false;
            for line in text.lines() {
                if !tally.add_line(line) {
                    println!("{line}");
                } else {
                    tallied = true;
                }
            }
            if !tallied {
                tally.failed = 1;
                println!(
                    "seed {seed}: its process ended without a result ({}): {}",
                    out.status,
                    String::from_utf8_lossy(&out.stderr).trim()
                );
                println!("replay: {}", args.options(seed).replay_command());
            }
        }
        Err(e) => {
            tally.failed = 1;
            println!("seed {seed}: cannot start its process: {e}");
        }
    }
    tally
}

fn main() -> ExitCode {
    let args = Args::parse();
    // RUST_LOG=syncline_broker=debug: every host's log, interleaved, on stderr.
    // Built on a thread of its own: std keys each thread's `HashMap`s from a
    // counter bumped by every map made, and the filter makes maps. Made on
    // this thread, they would shift the keys of the simulation's maps, so
    // that a seed with the log on would not replay the seed without it.
    if std::env::var_os("RUST_LOG").is_some() {
        let subscriber = std::thread::spawn(|| {
            tracing_subscriber::fmt()
                .with_writer(std::io::stderr)
                .with_env_filter(tracing_subscriber::EnvFilter::from_default_env())
                .finish()
        })
        .join()
        .expect("building the log subscriber");
        if let Err(e) = tracing_subscriber::util::SubscriberInitExt::try_init(subscriber) {
            eprintln!("syncline-sim: RUST_LOG ignored: {e}");
        }
    }
    if std::env::var_os(CHILD_VAR).is_some() {
        let seed = args.seed.unwrap_or_default();
        println!("{}", run_one(&args, seed).line());
        return ExitCode::SUCCESS;
    }
    let first = args
        .seed
        .unwrap_or_else(|| u64::from(std::process::id()) << 16 ^ wall_entropy());
    let wall = std::time::Instant::now();
    let mut total = Tally::default();
    for seed in first..first.saturating_add(args.seeds) {
        let t = if args.seeds == 1 {
            run_one(&args, seed)
        } else {
            run_child(&args, seed)
        };
        total.add_line(&t.line());
    }
    println!(
        "seeds {first}..{}: {} valid, {} INVALID, {} not run; {} faults, {:.2} simulated hours in {:.0} s",
        first.saturating_add(args.seeds),
        total.valid,
        total.invalid,
        total.failed,
        total.faults,
        total.simulated_ms as f64 / 3_600_000.0,
        wall.elapsed().as_secs_f64()
    );
    if total.invalid > 0 {
        ExitCode::from(1)
    } else if total.failed > 0 {
        ExitCode::from(3)
    } else {
        ExitCode::SUCCESS
    }
}

/// A fresh seed when none is given: the OS's randomness is the simulation's
/// here, so take the wall clock.
fn wall_entropy() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_nanos() as u64)
        & 0xffff_ffff
}
