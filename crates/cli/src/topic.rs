//! `syncline topic create | list | describe | alter | delete | elect-leaders | reassign`.

use std::collections::BTreeMap;

use anyhow::{bail, Result};
use syncline_client::{Admin, NewTopic, TopicAlteration};
use syncline_proto::ErrorCode;

use crate::args::{
    AlterArgs, CreateArgs, DeleteArgs, DescribeArgs, ElectLeadersArgs, TopicCommand,
};
use crate::errors::{explain, Ctx};
use crate::fields;
use crate::output::{election_json, election_table, topic_json, topic_table};

pub(crate) async fn run(command: TopicCommand, bootstrap: &str) -> Result<()> {
    match command {
        TopicCommand::Create(args) => create(args, bootstrap).await,
        TopicCommand::List => list(bootstrap).await,
        TopicCommand::Describe(args) => describe(args, bootstrap).await,
        TopicCommand::Alter(args) => alter(args, bootstrap).await,
        TopicCommand::Delete(args) => delete(args, bootstrap).await,
        TopicCommand::ElectLeaders(args) => elect_leaders(args, bootstrap).await,
        TopicCommand::Reassign(args) => crate::reassign::run(args, bootstrap).await,
    }
}

fn admin(ctx: Ctx<'_>) -> Result<Admin> {
    Admin::new(crate::security::client_config(ctx.bootstrap))
        .map_err(|e| anyhow::anyhow!(explain(&e, ctx)))
}

async fn create(args: CreateArgs, bootstrap: &str) -> Result<()> {
    let ctx = Ctx {
        bootstrap,
        topic: Some(&args.name),
    };
    if args.partitions < 1 {
        bail!("--partitions must be at least 1 (got {})", args.partitions);
    }
    if args.replication_factor < 1 {
        bail!(
            "--replication-factor must be at least 1 (got {})",
            args.replication_factor
        );
    }
    let configs = config_map(args.configs)?;
    let topic = NewTopic {
        name: args.name.clone(),
        num_partitions: args.partitions,
        replication_factor: args.replication_factor,
        configs,
    };
    let created = admin(ctx)?
        .create_topic(topic)
        .await
        .map_err(|e| anyhow::anyhow!(explain(&e, ctx)))?;
    println!(
        "Created topic {} ({} partitions, replication factor {}).",
        created.name, created.num_partitions, created.replication_factor
    );
    Ok(())
}

async fn list(bootstrap: &str) -> Result<()> {
    let ctx = Ctx {
        bootstrap,
        topic: None,
    };
    let names = admin(ctx)?
        .list_topics()
        .await
        .map_err(|e| anyhow::anyhow!(explain(&e, ctx)))?;
    for name in names {
        println!("{name}");
    }
    Ok(())
}

async fn describe(args: DescribeArgs, bootstrap: &str) -> Result<()> {
    let ctx = Ctx {
        bootstrap,
        topic: Some(&args.name),
    };
    let topic = admin(ctx)?
        .describe_topic(&args.name)
        .await
        .map_err(|e| anyhow::anyhow!(explain(&e, ctx)))?;
    if let Some(partition) = args.fields.partition {
        let all = topic_json(&topic);
        let object = fields::partition(&all, partition)?;
        let what = format!("partition {}-{partition}", args.name);
        println!("{}", fields::select(object, &what, &args.fields.fields)?);
    } else if args.json {
        println!("{}", serde_json::to_string_pretty(&topic_json(&topic))?);
    } else {
        print!("{}", topic_table(&topic));
    }
    Ok(())
}

async fn delete(args: DeleteArgs, bootstrap: &str) -> Result<()> {
    let ctx = Ctx {
        bootstrap,
        topic: args.names.first().map(String::as_str),
    };
    let names: Vec<&str> = args.names.iter().map(String::as_str).collect();
    let results = admin(ctx)?
        .delete_topics(&names)
        .await
        .map_err(|e| anyhow::anyhow!(explain(&e, ctx)))?;
    if args.json {
        let json: Vec<serde_json::Value> = results
            .iter()
            .map(|r| {
                serde_json::json!({
                    "topic": r.name,
                    "error": r.error.map(|e| e.name()),
                    "message": (!r.message.is_empty()).then_some(&r.message),
                })
            })
            .collect();
        println!("{}", serde_json::to_string_pretty(&json)?);
    } else {
        for r in results.iter().filter(|r| r.error.is_none()) {
            println!("Deleted topic {}.", r.name);
        }
    }
    let failed: Vec<String> = results
        .iter()
        .filter_map(|r| Some(format!("{} ({}: {})", r.name, r.error?, r.message)))
        .collect();
    if !failed.is_empty() {
        bail!(
            "not deleted: {} (see `syncline topic list`)",
            failed.join(", ")
        );
    }
    Ok(())
}

async fn elect_leaders(args: ElectLeadersArgs, bootstrap: &str) -> Result<()> {
    let ctx = Ctx {
        bootstrap,
        topic: args.name.as_deref(),
    };
    let topics: Vec<(&str, &[i32])> = args
        .name
        .as_deref()
        .map(|name| (name, args.partitions.as_slice()))
        .into_iter()
        .collect();
    let results = admin(ctx)?
        .elect_preferred_leaders(&topics)
        .await
        .map_err(|e| anyhow::anyhow!(explain(&e, ctx)))?;
    if args.json {
        println!(
            "{}",
            serde_json::to_string_pretty(&election_json(&results))?
        );
    } else {
        print!("{}", election_table(&results));
    }
    // Already led by the preferred replica is success, as in Kafka's tool.
    let failed: Vec<String> = results
        .iter()
        .filter(|r| r.error.is_some_and(|e| e != ErrorCode::ElectionNotNeeded))
        .map(|r| match r.partition {
            p if p < 0 => r.topic.clone(),
            p => format!("{}-{p}", r.topic),
        })
        .collect();
    if !failed.is_empty() {
        let hint = if results
            .iter()
            .any(|r| r.error == Some(ErrorCode::PreferredLeaderNotAvailable))
        {
            " (a preferred replica out of the ISR must catch up first; `syncline topic describe` shows the ISR)"
        } else {
            ""
        };
        bail!(
            "the preferred replica could not be elected for {}: see RESULT above{hint}",
            failed.join(", ")
        );
    }
    Ok(())
}

/// `--config` pairs as a map; a key given twice is an error.
fn config_map(pairs: Vec<(String, String)>) -> Result<BTreeMap<String, String>> {
    let mut configs = BTreeMap::new();
    for (key, value) in pairs {
        if let Some(previous) = configs.insert(key.clone(), value) {
            bail!("--config {key} is given twice (first {key}={previous}): give it once");
        }
    }
    Ok(configs)
}

async fn alter(args: AlterArgs, bootstrap: &str) -> Result<()> {
    let ctx = Ctx {
        bootstrap,
        topic: Some(&args.name),
    };
    if args.configs.is_empty() && args.delete_configs.is_empty() && args.partitions.is_none() {
        bail!("nothing to change: give --config KEY=VALUE, --delete-config KEY or --partitions N");
    }
    if let Some(n) = args.partitions.filter(|n| *n < 1) {
        bail!("--partitions must be at least 1 (got {n})");
    }
    let change = TopicAlteration {
        name: args.name.clone(),
        set_configs: config_map(args.configs)?,
        delete_configs: args.delete_configs,
        partitions: args.partitions,
    };
    // The keys this change names, with the values in force after it.
    let named: Vec<&String> = change
        .set_configs
        .keys()
        .chain(&change.delete_configs)
        .collect();
    let altered = admin(ctx)?
        .alter_topic(&change)
        .await
        .map_err(|e| anyhow::anyhow!(explain(&e, ctx)))?;
    let configs: Vec<String> = altered
        .configs
        .iter()
        .filter(|(k, _)| named.contains(k))
        .map(|(k, v)| format!("{k}={v}"))
        .collect();
    let configs = if configs.is_empty() {
        String::new()
    } else {
        format!("; {}", configs.join(", "))
    };
    println!(
        "Altered topic {}: {} partitions{configs}.",
        altered.name, altered.num_partitions
    );
    Ok(())
}
