//! `syncline`: the command-line tool for a syncline cluster.
//!
//! Every failure ends with a message on stderr that names the problem and the
//! fix, and a non-zero exit status.

mod acl;
mod args;
mod cert;
mod cluster;
mod consume;
mod errors;
mod fields;
mod group;
mod metrics;
mod output;
mod perf;
mod produce;
mod quota;
mod reassign;
mod security;
mod topic;
mod user;
mod wait_ready;

use std::process::ExitCode;

use clap::Parser;
use tracing_subscriber::EnvFilter;

use crate::args::{Cli, Command};

// mimalloc keeps freed memory in its own pages for the next allocation. With
// glibc's malloc a consumer's fetch responses (a MiB or more each, held by the
// records it hands out) were given back to the kernel when dropped and the
// next response was received into fresh, zeroed pages: a page fault per 4 KiB,
// which cost `perf consume` about half of its CPU (docs/benchmarks.md). The
// brokers keep glibc's: they send fetches with sendfile, and mimalloc measured
// no CPU gain there (produce, same run) for twice the RSS.
#[global_allocator]
static ALLOCATOR: mimalloc::MiMalloc = mimalloc::MiMalloc;

fn main() -> ExitCode {
    let cli = Cli::parse();
    tracing_subscriber::fmt()
        .with_writer(std::io::stderr)
        .with_env_filter(
            EnvFilter::try_from_default_env().unwrap_or_else(|_| EnvFilter::new("warn")),
        )
        .init();
    let runtime = match tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
    {
        Ok(rt) => rt,
        Err(e) => {
            eprintln!("error: cannot start the async runtime: {e}");
            return ExitCode::FAILURE;
        }
    };
    match runtime.block_on(run(cli)) {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("error: {e:#}");
            ExitCode::FAILURE
        }
    }
}

async fn run(cli: Cli) -> anyhow::Result<()> {
    // Every client config the commands build starts from these.
    security::init(&cli.security)?;
    let bootstrap = cli.bootstrap_server.as_str();
    match cli.command {
        Command::Topic(command) => topic::run(command, bootstrap).await,
        Command::Produce(args) => produce::run(args, bootstrap).await,
        Command::Consume(args) => consume::run(args, bootstrap).await,
        Command::Cluster(command) => cluster::run(command, bootstrap).await,
        Command::Group(command) => group::run(command, bootstrap).await,
        Command::Metrics(args) => metrics::run(args, bootstrap).await,
        Command::Perf(command) => perf::run(command, bootstrap).await,
        Command::Cert(command) => cert::run(command),
        Command::User(command) => user::run(command, security::client_config(bootstrap)).await,
        Command::Acl(command) => acl::run(command, security::client_config(bootstrap)).await,
        Command::Quota(command) => quota::run(command, security::client_config(bootstrap)).await,
    }
}
