//! `syncline-chaos`: runs the fault harness once and prints its report.
//! Exit status 0 when every promise of the chosen settings held, 1 when the
//! checker found a violation, 2 for bad arguments, 3 when the run itself could
//! not be carried out.

use std::process::ExitCode;
use std::time::Duration;

use clap::Parser;
use syncline_chaos::nemesis::{parse_faults, FaultKind};
use syncline_chaos::run::{run, Options, Settings};

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
    /// one-way, isolate, split, bridge, loss, power-loss. Kinds this machine
    /// cannot inject (network and power faults need root) are skipped and named.
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
    let options = Options {
        settings: args.settings,
        seed,
        duration: Duration::from_secs(args.duration),
        faults,
        brokers: args.brokers as usize,
        partitions: args.partitions,
        verbose: args.verbose,
    };
    println!(
        "syncline-chaos: settings {}, seed {seed} (--seed {seed} replays the schedule)",
        options.settings
    );
    let runtime = match tokio::runtime::Runtime::new() {
        Ok(r) => r,
        Err(e) => {
            eprintln!("syncline-chaos: cannot start the runtime: {e}");
            return ExitCode::from(3);
        }
    };
    let outcome = runtime.block_on(async {
        tokio::select! {
            r = run(options) => Some(r),
            _ = shutdown() => None,
        }
    });
    match outcome {
        None => {
            eprintln!("syncline-chaos: interrupted; the cluster, its rules and disks are removed");
            ExitCode::from(3)
        }
        Some(Err(e)) => {
            eprintln!("syncline-chaos: the run could not be carried out: {e:#}");
            ExitCode::from(3)
        }
        Some(Ok(report)) => {
            print!("{report}");
            if report.valid() {
                ExitCode::SUCCESS
            } else {
                ExitCode::from(1)
            }
        }
    }
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
