//! `syncline cluster describe` and `cluster wait-ready`.

use anyhow::Result;
use syncline_client::Admin;

use crate::args::ClusterCommand;
use crate::errors::{explain, Ctx};
use crate::output::{cluster_json, cluster_table};
use crate::{fields, wait_ready};

pub(crate) async fn run(command: ClusterCommand, bootstrap: &str) -> Result<()> {
    let (json, fields) = match command {
        ClusterCommand::Describe { json, fields } => (json, fields),
        ClusterCommand::WaitReady(args) => return wait_ready::run(args, bootstrap).await,
    };
    let ctx = Ctx {
        bootstrap,
        topic: None,
    };
    let fail = |e: syncline_client::ClientError| anyhow::anyhow!(explain(&e, ctx));
    let admin = Admin::new(crate::security::client_config(bootstrap)).map_err(fail)?;
    let cluster = admin.describe_cluster().await.map_err(fail)?;
    // The quorum is the active controller's to describe; without one the rest of the
    // description still prints, with the reason.
    let quorum = admin.describe_quorum().await.map_err(|e| e.to_string());
    if !fields.fields.is_empty() {
        let all = cluster_json(&cluster, &quorum);
        let line = match fields.broker {
            Some(id) => fields::select(
                fields::broker(&all, id)?,
                &format!("broker {id}"),
                &fields.fields,
            )?,
            None => fields::select(&all, "the cluster", &fields.fields)?,
        };
        println!("{line}");
    } else if json {
        println!(
            "{}",
            serde_json::to_string_pretty(&cluster_json(&cluster, &quorum))?
        );
    } else {
        print!("{}", cluster_table(&cluster, &quorum));
    }
    Ok(())
}

/// Fails fast, with the usual hint, when no broker can be reached: the producer
/// and consumer would otherwise keep retrying until their timeouts, which is
/// right for a program riding out a restart but not for a command at a prompt.
pub(crate) async fn ensure_reachable(ctx: Ctx<'_>) -> Result<()> {
    let admin = Admin::new(crate::security::client_config(ctx.bootstrap))
        .map_err(|e| anyhow::anyhow!(explain(&e, ctx)))?;
    match admin.describe_cluster().await {
        Err(e) if e.is_connectivity() => Err(anyhow::anyhow!(explain(&e, ctx))),
        // Reached a broker: anything else is for the command itself to handle.
        _ => Ok(()),
    }
}
