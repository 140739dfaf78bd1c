//! `syncline-hostile`: a running three-broker cluster under hostile clients,
//! one attack at a time, beside a well-behaved `acks=all` producer. Prints,
//! for a first phase without attack and then for each attack: the producer's
//! latency (p50, p99, worst, and p99's ratio to the first phase's), each
//! broker's peak resident memory, and the cluster's health (fenced brokers,
//! controller elections, ISR shrinks). At the end every acknowledged record is
//! read back. Exit status 0 when every phase kept the bounds, 1 when not, 2
//! for bad arguments, 3 when the run itself could not be carried out.
//!
//! scripts/bench-hostile.sh starts the cluster and runs this against it.

mod attacks;
mod steady;
mod watch;

use std::process::ExitCode;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Duration;

use anyhow::Context;
use clap::Parser;
use syncline_client::{Admin, ClientConfig, NewTopic};
use tokio::time::Instant;

use attacks::{Attack, Tally, Target};

#[derive(Debug, Parser)]
#[command(name = "syncline-hostile", version)]
struct Args {
    /// Each broker's own listener, comma-separated.
    #[arg(long)]
    brokers: String,
    /// Each broker's Kafka listener, in the same order.
    #[arg(long)]
    kafka: String,
    /// Each broker's metrics endpoint, in the same order.
    #[arg(long)]
    metrics: String,
    /// Each broker's process id, in the same order (for its memory).
    #[arg(long)]
    pids: String,
    /// Seconds each phase lasts.
    #[arg(long, default_value_t = 20)]
    seconds: u64,
    /// Attacks, comma-separated, or "all".
    #[arg(long, default_value = "all")]
    attacks: String,
    /// Records a second the steady producer sends.
    #[arg(long, default_value_t = 100)]
    rate: u32,
    /// The steady producer's p99 bound under attack, in ms.
    #[arg(long, default_value_t = 50)]
    p99_bound_ms: u64,
    /// Print the p99 bound's verdict without failing on it (a smoke run on a
    /// machine that runs the brokers, the attacker and the producer on few
    /// cores: the other bounds still fail the run).
    #[arg(long)]
    latency_advisory: bool,
    /// Each broker's resident memory bound, in MiB.
    #[arg(long, default_value_t = 512)]
    rss_bound_mib: u64,
    /// Be the attacker of a run (started by the run itself).
    #[arg(long, hide = true)]
    attacker: Option<String>,
}

/// The metrics watched, summed over the brokers.
const HEALTH: [&str; 3] = [
    "syncline_fenced_broker_count",
    "syncline_controller_elections_total",
    "syncline_isr_shrinks_total",
];

/// One phase's figures.
#[derive(Debug)]
struct Phase {
    name: &'static str,
    sent: usize,
    failed: usize,
    p50: Duration,
    p99: Duration,
    worst: Duration,
    /// Each broker's highest resident memory seen, in bytes.
    rss: Vec<u64>,
    fenced_seen: f64,
    elections: f64,
    shrinks: f64,
    attack_sent: u64,
    attack_answered: u64,
}

fn main() -> ExitCode {
    let args = Args::parse();
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .expect("a tokio runtime");
    if let Some(name) = &args.attacker {
        let Some(attack) = Attack::parse(name) else {
            return ExitCode::from(2);
        };
        let target = Target {
            brokers: split(&args.brokers),
            kafka: split(&args.kafka),
        };
        return match runtime.block_on(attack_until_told(attack, target)) {
            Ok(()) => ExitCode::SUCCESS,
            Err(e) => {
                eprintln!("syncline-hostile --attacker {name}: {e:#}");
                ExitCode::from(3)
            }
        };
    }
    let attacks: Vec<Attack> = if args.attacks == "all" {
        Attack::ALL.to_vec()
    } else {
        let mut chosen = Vec::new();
        for name in args.attacks.split(',') {
            match Attack::parse(name.trim()) {
                Some(a) => chosen.push(a),
                None => {
                    let known: Vec<_> = Attack::ALL.iter().map(|a| a.name()).collect();
                    eprintln!(
                        "syncline-hostile: unknown attack {name:?}; known: {}",
                        known.join(", ")
                    );
                    return ExitCode::from(2);
                }
            }
        }
        chosen
    };
    match runtime.block_on(run(&args, &attacks)) {
        Ok(true) => ExitCode::SUCCESS,
        Ok(false) => ExitCode::from(1),
        Err(e) => {
            eprintln!("syncline-hostile: {e:#}");
            ExitCode::from(3)
        }
    }
}

fn split(list: &str) -> Vec<String> {
    list.split(',').map(|s| s.trim().to_string()).collect()
}

async fn run(args: &Args, attacks: &[Attack]) -> anyhow::Result<bool> {
    let target = Target {
        brokers: split(&args.brokers),
        kafka: split(&args.kafka),
    };
    let metrics = split(&args.metrics);
    let pids: Vec<u32> = split(&args.pids)
        .iter()
        .map(|p| p.parse().context("--pids: process ids"))
        .collect::<anyhow::Result<_>>()?;
    anyhow::ensure!(
        target.kafka.len() == target.brokers.len()
            && metrics.len() == target.brokers.len()
            && pids.len() == target.brokers.len(),
        "--brokers, --kafka, --metrics and --pids name the same brokers"
    );
    let bootstrap = args.brokers.clone();
    let admin = Admin::new(ClientConfig::new(&bootstrap))?;
    let rf = target.brokers.len().min(3) as i32;
    for topic in [
        NewTopic::new(steady::TOPIC, steady::PARTITIONS, rf)
            .with_config("min.insync.replicas", "2"),
        NewTopic::new(attacks::WIDE, 300, rf),
        NewTopic::new(attacks::PACKED, 3, rf),
    ] {
        admin.create_topic(topic).await?;
    }
    // Every partition led, with its whole ISR, before anything is measured.
    let deadline = Instant::now() + Duration::from_secs(60);
    for topic in [steady::TOPIC, attacks::WIDE, attacks::PACKED] {
        loop {
            let d = admin.describe_topic(topic).await?;
            if d.partitions
                .iter()
                .all(|p| p.leader.is_some() && p.isr.len() == rf as usize)
            {
                break;
            }
            anyhow::ensure!(
                Instant::now() < deadline,
                "{topic}: not fully in sync within 60 s"
            );
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    }
    let steady = steady::Steady::start(bootstrap.clone(), args.rate).await?;

    let mut phases = Vec::new();
    let names: Vec<Option<Attack>> = std::iter::once(None)
        .chain(attacks.iter().copied().map(Some))
        .collect();
    let last = names.len() - 1;
    for (i, attack) in names.into_iter().enumerate() {
        let name = attack.map_or("none", Attack::name);
        println!("==> phase {i}: {name}, {} s", args.seconds);
        let before = health(&metrics).await?;
        let resting = open_connections(&metrics).await?;
        steady.enter(i);
        let mut attacker = match attack {
            Some(a) => Some(attacker(a, args)?),
            None => None,
        };
        let mut rss = vec![0u64; pids.len()];
        let mut fenced_seen: f64 = 0.0;
        let end = Instant::now() + Duration::from_secs(args.seconds);
        while Instant::now() < end {
            for (peak, &pid) in rss.iter_mut().zip(&pids) {
                let now =
                    watch::rss(pid).with_context(|| format!("broker process {pid} is gone"))?;
                *peak = (*peak).max(now);
            }
            if let Ok(h) = health(&metrics).await {
                fenced_seen = fenced_seen.max(h[0]);
            }
            tokio::time::sleep(Duration::from_millis(200)).await;
        }
        let (attack_sent, attack_answered) = match attacker.as_mut() {
            Some(child) => stop_attacker(child, name).await?,
            None => (0, 0),
        };
        // The next phase's records are measured apart from this one's.
        steady.enter(usize::MAX);
        let after = health(&metrics).await?;
        phases.push(Phase {
            name,
            sent: 0,
            failed: 0,
            p50: Duration::ZERO,
            p99: Duration::ZERO,
            worst: Duration::ZERO,
            rss,
            fenced_seen,
            elections: after[1] - before[1],
            shrinks: after[2] - before[2],
            attack_sent,
            attack_answered,
        });
        // The attack's connections go before the next phase starts.
        if i < last {
            await_connections_back(&metrics, resting, name).await?;
        }
    }
    let sent = steady.finish().await?;
    for (i, phase) in phases.iter_mut().enumerate() {
        let mut latencies: Vec<Duration> = sent
            .iter()
            .filter(|s| s.phase == i)
            .map(|s| s.latency)
            .collect();
        latencies.sort();
        phase.sent = latencies.len();
        phase.failed = sent
            .iter()
            .filter(|s| s.phase == i && s.outcome.is_err())
            .count();
        let at = |q: f64| {
            latencies
                .get(((latencies.len() as f64 * q).ceil() as usize).saturating_sub(1))
                .copied()
                .unwrap_or_default()
        };
        (phase.p50, phase.p99, phase.worst) = (at(0.5), at(0.99), at(1.0));
    }
    for s in sent.iter().filter(|s| s.outcome.is_err()).take(5) {
        println!("    a record not written: {:?}", s.outcome);
    }
    let lost = steady::verify(&bootstrap, &sent).await?;
    Ok(report(&phases, lost, args))
}

/// Starts the attacker: this program again, `--attacker NAME`, at a lower
/// priority (nice 10). A process of its own, so that the steady producer's
/// latency is the brokers' and not the attacker's (its encoding and reading
/// take CPU on the same machine; on a small one, no more than they must).
fn attacker(attack: Attack, args: &Args) -> anyhow::Result<tokio::process::Child> {
    let me = std::env::current_exe()?;
    tokio::process::Command::new("nice")
        .args(["-n", "10"])
        .arg(me)
        .args([
            "--attacker",
            attack.name(),
            "--brokers",
            &args.brokers,
            "--kafka",
            &args.kafka,
        ])
        .args(["--metrics", &args.metrics, "--pids", &args.pids])
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::piped())
        .kill_on_drop(true)
        .spawn()
        .context("starting the attacker")
}

/// Stops the attacker (closes its input) and reads what it sent and got
/// answered.
async fn stop_attacker(
    child: &mut tokio::process::Child,
    name: &str,
) -> anyhow::Result<(u64, u64)> {
    drop(child.stdin.take());
    let mut out = String::new();
    let mut stdout = child.stdout.take().context("the attacker's output")?;
    tokio::time::timeout(Duration::from_secs(30), async {
        use tokio::io::AsyncReadExt;
        stdout.read_to_string(&mut out).await?;
        child.wait().await
    })
    .await
    .with_context(|| format!("the {name} attacker did not stop within 30 s"))??;
    let mut figures = out.split_whitespace().map(str::parse::<u64>);
    match (figures.next(), figures.next()) {
        (Some(Ok(sent)), Some(Ok(answered))) => Ok((sent, answered)),
        _ => anyhow::bail!("the {name} attacker ended without its tally: {out:?}"),
    }
}

/// The attacker's life: `attack` until its input closes, then its tally on
/// standard output.
async fn attack_until_told(attack: Attack, target: Target) -> anyhow::Result<()> {
    let (_, hard) = nix::sys::resource::getrlimit(nix::sys::resource::Resource::RLIMIT_NOFILE)?;
    nix::sys::resource::setrlimit(nix::sys::resource::Resource::RLIMIT_NOFILE, hard, hard)?;
    let stop = Arc::new(AtomicBool::new(false));
    let tally = Arc::new(Tally::default());
    let running = tokio::spawn(attacks::run(attack, target, stop.clone(), tally.clone()));
    let mut input = Vec::new();
    use tokio::io::AsyncReadExt;
    tokio::io::stdin().read_to_end(&mut input).await?;
    stop.store(true, Ordering::SeqCst);
    running.await?;
    println!(
        "{} {}",
        tally.sent.load(Ordering::Relaxed),
        tally.answered.load(Ordering::Relaxed)
    );
    Ok(())
}

/// Waits until the brokers are back to the `resting` connections open when
/// the `name` phase began (their own may change meanwhile, a new leader's
/// fetcher: after 30 s that is said, not failed).
async fn await_connections_back(
    metrics: &[String],
    resting: f64,
    name: &str,
) -> anyhow::Result<()> {
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        let open = open_connections(metrics).await?;
        if open <= resting {
            return Ok(());
        }
        if Instant::now() >= deadline {
            println!(
                "    30 s after the {name} attacker ended the brokers hold {} connections \
                 more than when it began",
                open - resting
            );
            return Ok(());
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

/// Connections open on the brokers, all together.
async fn open_connections(metrics: &[String]) -> anyhow::Result<f64> {
    let mut open = 0.0;
    for addr in metrics {
        open += watch::metrics(addr, &["syncline_connections"]).await?[0];
    }
    Ok(open)
}

async fn health(metrics: &[String]) -> anyhow::Result<Vec<f64>> {
    let mut sums = vec![0.0; HEALTH.len()];
    for addr in metrics {
        for (sum, v) in sums.iter_mut().zip(watch::metrics(addr, &HEALTH).await?) {
            *sum += v;
        }
    }
    Ok(sums)
}

/// Prints the table and the verdict: whether every bound held.
fn report(phases: &[Phase], lost: usize, args: &Args) -> bool {
    let ms = |d: Duration| format!("{:.1}", d.as_secs_f64() * 1000.0);
    let base = phases[0].p99.as_secs_f64().max(1e-6);
    println!();
    println!(
        "{:<19} {:>6} {:>6} {:>8} {:>8} {:>8} {:>8}  {:<17} {:>6} {:>9} {:>7} {:>15}",
        "attack",
        "sent",
        "failed",
        "p50 ms",
        "p99 ms",
        "worst ms",
        "p99 x",
        "RSS peak MiB",
        "fenced",
        "elections",
        "shrinks",
        "attack sent/ans"
    );
    let mut ok = true;
    for p in phases {
        let rss: Vec<String> = p.rss.iter().map(|b| (b >> 20).to_string()).collect();
        println!(
            "{:<19} {:>6} {:>6} {:>8} {:>8} {:>8} {:>8.2}  {:<17} {:>6} {:>9} {:>7} {:>15}",
            p.name,
            p.sent,
            p.failed,
            ms(p.p50),
            ms(p.p99),
            ms(p.worst),
            p.p99.as_secs_f64() / base,
            rss.join(" / "),
            p.fenced_seen,
            p.elections,
            p.shrinks,
            format!("{}/{}", p.attack_sent, p.attack_answered),
        );
        let mut broken = Vec::new();
        if p.p99 > Duration::from_millis(args.p99_bound_ms) {
            if args.latency_advisory {
                println!(
                    "    over the latency target under {}: p99 over {} ms",
                    p.name, args.p99_bound_ms
                );
            } else {
                broken.push(format!("p99 over {} ms", args.p99_bound_ms));
            }
        }
        if p.rss.iter().any(|&b| b > args.rss_bound_mib << 20) {
            broken.push(format!("RSS over {} MiB", args.rss_bound_mib));
        }
        if p.failed > 0 || p.sent == 0 {
            broken.push("records not written".into());
        }
        if p.fenced_seen > 0.0 || p.elections > 0.0 || p.shrinks > 0.0 {
            broken.push("the cluster's health suffered".into());
        }
        if !broken.is_empty() {
            println!("    BOUND BROKEN under {}: {}", p.name, broken.join("; "));
            ok = false;
        }
    }
    println!("acknowledged records missing or wrong when read back: {lost}");
    ok && lost == 0
}
