//! `synclined`: the syncline broker daemon.

use std::io::IsTerminal;
use std::path::PathBuf;
use std::process::ExitCode;
use std::sync::Arc;

use clap::{CommandFactory, FromArgMatches};
use syncline_broker::net::{BoundTcp, Network, Tcp};
use syncline_broker::BrokerConfig;
use tracing_subscriber::EnvFilter;

/// The syncline broker.
#[derive(Debug, clap::Parser)]
#[command(
    name = "synclined",
    about,
    args_conflicts_with_subcommands = true,
    subcommand_negates_reqs = true
)]
struct Args {
    /// The broker's TOML config file (see config/broker-1.toml).
    #[arg(long, short, required = true)]
    config: Option<PathBuf>,
    #[command(subcommand)]
    command: Option<Command>,
}

#[derive(Debug, clap::Subcommand)]
enum Command {
    /// Broker credentials (brokers create their own on first start; this makes
    /// them ahead of time, or replaces one to rotate it).
    Credentials {
        #[command(subcommand)]
        action: Credentials,
    },
}

#[derive(Debug, clap::Subcommand)]
enum Credentials {
    /// Creates a new secret and verifier for each broker given, replacing any:
    /// restart that broker to use it (its peers read verifiers afresh on each
    /// authentication).
    Create {
        /// The credentials directory (the brokers' `broker_credentials_dir`).
        #[arg(long)]
        dir: PathBuf,
        /// Broker ids, comma-separated.
        #[arg(long, value_delimiter = ',', required = true)]
        brokers: Vec<i32>,
    },
}

fn main() -> ExitCode {
    // The version names the test-only features compiled in (none in a shipped
    // build): scripts/lib.sh's check_shipped reads it.
    let command = Args::command().version(syncline_broker::version().leak() as &str);
    let args = match Args::from_arg_matches(&command.get_matches()) {
        Ok(args) => args,
        Err(e) => e.exit(),
    };
    if let Some(Command::Credentials {
        action: Credentials::Create { dir, brokers },
    }) = args.command
    {
        for id in brokers {
            match syncline_auth::credentials::create(&dir, id) {
                Ok(_) => println!(
                    "created {} and {}",
                    syncline_auth::credentials::secret_path(&dir, id).display(),
                    syncline_auth::credentials::verifier_path(&dir, id).display()
                ),
                Err(e) => {
                    eprintln!("synclined: {e}");
                    return ExitCode::FAILURE;
                }
            }
        }
        return ExitCode::SUCCESS;
    }
    let Some(config_path) = args.config else {
        eprintln!("synclined: --config FILE is required");
        return ExitCode::from(2);
    };
    // The Raft library warns on every heartbeat a down voter misses; the controller
    // host reports the quorum's state itself. RUST_LOG naming openraft overrides.
    let directives = std::env::var("RUST_LOG").unwrap_or_else(|_| "info".into());
    let directives = if directives.contains("openraft") {
        directives
    } else {
        format!("{directives},openraft=error")
    };
    tracing_subscriber::fmt()
        .with_env_filter(EnvFilter::new(directives))
        .with_target(false)
        // Colours only for a person at a terminal: in a log file, escape codes
        // would split `key=value` fields and defeat grep.
        .with_ansi(std::io::stdout().is_terminal())
        .init();
    let config = match BrokerConfig::load(&config_path) {
        Ok(c) => c,
        Err(e) => {
            eprintln!("synclined: {e}");
            return ExitCode::from(2);
        }
    };
    raise_open_files_limit();
    let runtime = match tokio::runtime::Runtime::new() {
        Ok(r) => r,
        Err(e) => {
            eprintln!("synclined: cannot start the runtime: {e}");
            return ExitCode::FAILURE;
        }
    };
    runtime.block_on(run(config))
}

async fn run(config: BrokerConfig) -> ExitCode {
    let node_id = config.node_id;
    let network: Arc<dyn Network> = match config.outgoing_bind_address {
        Some(source) => Arc::new(BoundTcp(source)),
        None => Arc::new(Tcp),
    };
    let handle = match syncline_broker::start(config, network).await {
        Ok(h) => h,
        Err(e) => {
            eprintln!("synclined: broker {node_id} cannot start: {e:#}");
            return ExitCode::FAILURE;
        }
    };
    let fatal = handle.fatal();
    let failed = tokio::select! {
        _ = shutdown_signal() => false,
        _ = fatal.cancelled() => true,
    };
    tracing::info!("shutting down");
    handle.shutdown().await;
    if failed {
        ExitCode::FAILURE
    } else {
        ExitCode::SUCCESS
    }
}

async fn shutdown_signal() {
    use tokio::signal::unix::{signal, SignalKind};
    let mut term = match signal(SignalKind::terminate()) {
        Ok(s) => s,
        Err(_) => {
            let _ = tokio::signal::ctrl_c().await;
            return;
        }
    };
    tokio::select! {
        _ = term.recv() => {}
        _ = tokio::signal::ctrl_c() => {}
    }
}

/// Raises the soft limit on open files to the hard one, as a broker needs a
/// few descriptors per partition (a segment, its indexes) and per connection:
/// the soft default (often 1,024) runs out at a few hundred partitions.
fn raise_open_files_limit() {
    use nix::sys::resource::{getrlimit, setrlimit, Resource};
    match getrlimit(Resource::RLIMIT_NOFILE) {
        Ok((soft, hard)) if soft < hard => match setrlimit(Resource::RLIMIT_NOFILE, hard, hard) {
            Ok(()) => tracing::info!(from = soft, to = hard, "raised the open-files limit"),
            Err(e) => tracing::warn!(limit = soft, error = %e, "cannot raise the open-files limit"),
        },
        Ok((soft, _)) => tracing::info!(limit = soft, "open-files limit"),
        Err(e) => tracing::warn!(error = %e, "cannot read the open-files limit"),
    }
}
