//! `syncline-chaos`: runs the fault harness and prints its report. Exit status
//! 0 when every promise of the chosen settings held in every run (with
//! `--scenario`: when the scenario's outcome is the expected one), 1 when not,
//! 2 for bad arguments, 3 when a run itself could not be carried out.

use std::process::ExitCode;
use std::time::Duration;

use clap::Parser;
use syncline_chaos::nemesis::{parse_faults, FaultKind};
use syncline_chaos::run::Settings;
use syncline_chaos::run::{run, Options};
use syncline_chaos::scenarios::{refused, run_scenario};

/// Runs a cluster of real synclined processes under a workload and a nemesis
/// of overlapping faults, heals it, and checks every operation's history.
#[derive(Debug, Parser)]
#[command(name = "syncline-chaos", version)]
struct Args {
    /// safe: acks=all, min.insync.replicas=2, no unclean election (nothing
    /// acknowledged may be lost); unsafe: acks=1, min.insync.replicas=1,
    /// unclean election, no fsync (losses expected).
    #[arg(long, default_value = "safe")]
    settings: Settings,
    /// Seed of the fault schedule (printed; the same seed replays it). Default:
    /// from the clock.
    #[arg(long)]
    seed: Option<u64>,
    /// Seconds of faults.
    #[arg(long, default_value_t = 60)]
    duration: u64,
    /// Fault kinds, comma-separated, or "all": kill, pause, restart, cut,
    /// one-way, isolate, split, bridge, loss, power-loss, disk-full, clock. Kinds this
    /// machine cannot inject (network and disk faults need root) are skipped and
    /// named.
    #[arg(long, default_value = "all")]
    faults: String,
    /// Brokers: 3 or 5 (the first three are the controller quorum).
    #[arg(long, default_value_t = 3, value_parser = clap::value_parser!(u8).range(3..=5))]
    brokers: u8,
    /// Partitions of the workload's topic.
    #[arg(long, default_value_t = 3, value_parser = clap::value_parser!(i32).range(1..=64))]
    partitions: i32,
    /// Print each fault as it starts and ends.
    #[arg(long, short)]
    verbose: bool,
    /// Fsync every append (flush.messages=1): each, never (the default flush
    /// policy), or auto (each with safe settings when power loss is among the
    /// faults).
    #[arg(long, default_value = "auto", value_parser = ["auto", "each", "never"])]
    flush: String,
    /// Runs, each with the next seed; a summary of all of them at the end.
    #[arg(long, default_value_t = 1, value_parser = clap::value_parser!(u32).range(1..))]
    runs: u32,
    /// Run a named scenario instead of a random schedule: jepsen-2013,
    /// last-replica-standing, kip-101, kip-101-power, kip-279,
    /// zombie-controller, power-loss. Its
    /// outcome under --settings is asserted (unsafe: the loss is expected).
    #[arg(long, conflicts_with_all = ["seed", "duration", "faults", "runs", "flush"])]
    scenario: Option<String>,
}

fn main() -> ExitCode {
    let args = Args::parse();
    if args.brokers == 4 {
        eprintln!("syncline-chaos: --brokers must be 3 or 5");
        return ExitCode::from(2);
    }
    let faults: Vec<FaultKind> = match parse_faults(&args.faults) {
        Ok(f) => f,
        Err(e) => {
            eprintln!("syncline-chaos: --faults: {e}");
            return ExitCode::from(2);
        }
    };
    let seed = args.seed.unwrap_or_else(|| {
        std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0, |d| d.as_nanos() as u64)
    });
    let runtime = match tokio::runtime::Runtime::new() {
        Ok(r) => r,
        Err(e) => {
            eprintln!("syncline-chaos: cannot start the runtime: {e}");
            return ExitCode::from(3);
        }
    };
    if let Some(name) = args.scenario {
        if let Some(e) = refused(&name, args.settings) {
            eprintln!("syncline-chaos: --scenario: {e}");
            return ExitCode::from(2);
        }
        let outcome = runtime.block_on(interruptible(run_scenario(&name, args.settings)));
        return match outcome {
            None => interrupted(),
            Some(Err(e)) => cannot(&e),
            Some(Ok(report)) => {
                print!("{report}");
                if report.as_expected() {
                    ExitCode::SUCCESS
                } else {
                    ExitCode::from(1)
                }
            }
        };
    }
    let mut totals = Totals::default();
    for n in 0..u64::from(args.runs) {
        let seed = seed.wrapping_add(n);
        let options = Options {
            settings: args.settings,
            seed,
            duration: Duration::from_secs(args.duration),
            faults: faults.clone(),
            brokers: args.brokers as usize,
            partitions: args.partitions,
            verbose: args.verbose,
            flush_each: match args.flush.as_str() {
                "each" => Some(true),
                "never" => Some(false),
                _ => None,
            },
        };
        println!(
            "syncline-chaos: run {} of {}: settings {}, seed {seed} (--seed {seed} replays the \
             schedule)",
            n + 1,
            args.runs,
            options.settings
        );
        match runtime.block_on(interruptible(run(options))) {
            None => return interrupted(),
            // The next runs may still be carried out: go on, and say so.
            Some(Err(e)) => {
                let _ = cannot(&e);
                totals.not_run += 1;
            }
            Some(Ok(report)) => {
                print!("{report}");
                totals.add(&report);
            }
        }
    }
    if args.runs > 1 {
        print!("{totals}");
    }
    if totals.not_run > 0 {
        ExitCode::from(3)
    } else if totals.invalid == 0 {
        ExitCode::SUCCESS
    } else {
        ExitCode::from(1)
    }
}

/// Figures summed over runs.
#[derive(Debug, Default)]
struct Totals {
    runs: usize,
    /// Runs that could not be carried out.
    not_run: usize,
    invalid: usize,
    faults: usize,
    sends: usize,
    acked: usize,
    violations: std::collections::BTreeMap<String, usize>,
    runs_with: std::collections::BTreeMap<String, usize>,
    slowest_heal: Duration,
    unhealed: usize,
}

impl Totals {
    fn add(&mut self, r: &syncline_chaos::run::Report) {
        self.runs += 1;
        self.invalid += usize::from(!r.valid());
        self.faults += r.faults_started().len();
        self.sends += r.verdict.sends;
        self.acked += r.verdict.acked;
        for (k, n) in r.verdict.counts() {
            *self.violations.entry(k.to_string()).or_default() += n;
            *self.runs_with.entry(k.to_string()).or_default() += 1;
        }
        match r.healed {
            Ok(d) => self.slowest_heal = self.slowest_heal.max(d),
            Err(_) => self.unhealed += 1,
        }
    }
}

impl std::fmt::Display for Totals {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        writeln!(
            f,
            "totals: {} runs, {} valid, {} invalid, {} not carried out; {} faults; {} sends, \
             {} acknowledged; slowest heal {:.1} s, {} not healed within 30 s",
            self.runs + self.not_run,
            self.runs - self.invalid,
            self.invalid,
            self.not_run,
            self.faults,
            self.sends,
            self.acked,
            self.slowest_heal.as_secs_f64(),
            self.unhealed
        )?;
        for (k, n) in &self.violations {
            writeln!(f, "totals: {k}: {n} in {} runs", self.runs_with[k])?;
        }
        Ok(())
    }
}

async fn interruptible<T>(f: impl std::future::Future<Output = T>) -> Option<T> {
    tokio::select! {
        r = f => Some(r),
        _ = shutdown() => None,
    }
}

fn interrupted() -> ExitCode {
    eprintln!("syncline-chaos: interrupted; the cluster, its rules and disks are removed");
    ExitCode::from(3)
}

fn cannot(e: &anyhow::Error) -> ExitCode {
    eprintln!("syncline-chaos: the run could not be carried out: {e:#}");
    ExitCode::from(3)
}

async fn shutdown() {
    use tokio::signal::unix::{signal, SignalKind};
    match (
        signal(SignalKind::interrupt()),
        signal(SignalKind::terminate()),
    ) {
        (Ok(mut i), Ok(mut t)) => {
            tokio::select! {
                _ = i.recv() => {}
                _ = t.recv() => {}
            }
        }
        _ => std::future::pending().await,
    }
}
