//! `syncline cluster describe`.

use anyhow::Result;
use syncline_client::{Admin, ClientConfig};

use crate::args::ClusterCommand;
use crate::errors::{explain, Ctx};
use crate::output::{cluster_json, cluster_table};

pub(crate) async fn run(command: ClusterCommand, bootstrap: &str) -> Result<()> {
    let ClusterCommand::Describe { json } = command;
    let ctx = Ctx {
        bootstrap,
        topic: None,
    };
    let fail = |e: syncline_client::ClientError| anyhow::anyhow!(explain(&e, ctx));
    let cluster = Admin::new(ClientConfig::new(bootstrap))
        .map_err(fail)?
        .describe_cluster()
        .await
        .map_err(fail)?;
    if json {
        println!("{}", serde_json::to_string_pretty(&cluster_json(&cluster))?);
    } else {
        print!("{}", cluster_table(&cluster));
    }
    Ok(())
}

/// Fails fast, with the usual hint, when no broker can be reached: the producer
/// and consumer would otherwise keep retrying until their timeouts, which is
/// right for a program riding out a restart but not for a command at a prompt.
pub(crate) async fn ensure_reachable(ctx: Ctx<'_>) -> Result<()> {
    let admin = Admin::new(ClientConfig::new(ctx.bootstrap))
        .map_err(|e| anyhow::anyhow!(explain(&e, ctx)))?;
    match admin.describe_cluster().await {
        Err(e) if e.is_connectivity() => Err(anyhow::anyhow!(explain(&e, ctx))),
        // Reached a broker: anything else is for the command itself to handle.
        _ => Ok(()),
    }
}
