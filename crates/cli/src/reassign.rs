//! `syncline topic reassign`: move replicas (Kafka's kafka-reassign-partitions).

use std::collections::{BTreeMap, BTreeSet};

use anyhow::{bail, Context, Result};
use serde::{Deserialize, Serialize};
use serde_json::{json, Value};
use syncline_client::{Admin, PartitionDescription, Reassignment, ReassignmentResult};

use crate::args::ReassignArgs;
use crate::errors::{explain, Ctx};
use crate::output::{ids, Table};

/// Kafka's reassignment JSON: what `--plan` reads and `--generate` prints.
#[derive(Debug, Serialize, Deserialize, PartialEq, Eq)]
pub(crate) struct Plan {
    pub(crate) version: i32,
    pub(crate) partitions: Vec<PlanPartition>,
}

#[derive(Debug, Serialize, Deserialize, PartialEq, Eq)]
pub(crate) struct PlanPartition {
    pub(crate) topic: String,
    pub(crate) partition: i32,
    #[serde(default)]
    pub(crate) replicas: Vec<i32>,
    /// Kafka's per-replica log directories; syncline has one log dir per broker,
    /// so only "any" is accepted.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub(crate) log_dirs: Option<Vec<String>>,
}

pub(crate) async fn run(args: ReassignArgs, bootstrap: &str) -> Result<()> {
    let ctx = Ctx {
        bootstrap,
        topic: args.name.as_deref(),
    };
    let admin = Admin::new(crate::security::client_config(bootstrap))
        .map_err(|e| anyhow::anyhow!(explain(&e, ctx)))?;
    if args.generate {
        let mut topics: Vec<String> = args.name.iter().cloned().collect();
        topics.extend(args.topics.iter().cloned());
        if topics.is_empty() {
            bail!("--generate needs the topics to move: TOPIC and/or --topic NAME");
        }
        let plan = generate(&admin, ctx, &topics, &args.broker_ids).await?;
        println!("{}", serde_json::to_string_pretty(&plan)?);
        return Ok(());
    }
    let reassignments = if let Some(path) = &args.plan {
        let text = std::fs::read_to_string(path)
            .with_context(|| format!("cannot read the plan {}", path.display()))?;
        let plan = parse_plan(&text)
            .with_context(|| format!("{} is not a reassignment plan", path.display()))?;
        plan.partitions
            .into_iter()
            .map(|p| Reassignment {
                topic: p.topic,
                partition: p.partition,
                replicas: (!args.cancel).then_some(p.replicas),
            })
            .collect()
    } else {
        one_partition(&args)?
    };
    let results = admin
        .reassign_partitions(&reassignments)
        .await
        .map_err(|e| anyhow::anyhow!(explain(&e, ctx)))?;
    if args.json {
        println!("{}", serde_json::to_string_pretty(&results_json(&results))?);
    } else {
        print!("{}", results_table(&results));
    }
    let failed: Vec<String> = results
        .iter()
        .filter(|r| r.error.is_some())
        .map(|r| format!("{}-{}: {}", r.topic, r.partition, r.message))
        .collect();
    if !failed.is_empty() {
        bail!(
            "{} of {} partitions were refused:\n  {}",
            failed.len(),
            results.len(),
            failed.join("\n  ")
        );
    }
    if !args.json {
        let moving = results
            .iter()
            .any(|r| !r.adding_replicas.is_empty() || !r.removing_replicas.is_empty());
        if moving {
            println!(
                "\nThe new replicas catch up, join the ISR, then the old ones leave; \
                 `syncline topic describe TOPIC` shows ADDING/REMOVING until done."
            );
        }
    }
    Ok(())
}

/// The request of `TOPIC --partition P --replicas ...` or `TOPIC --partition P... --cancel`.
fn one_partition(args: &ReassignArgs) -> Result<Vec<Reassignment>> {
    let Some(topic) = &args.name else {
        bail!(
            "name what to move: TOPIC --partition P --replicas 2,3,4, or --plan FILE \
             (see --generate)"
        );
    };
    if args.partitions.is_empty() {
        bail!("give the partition to move: --partition P");
    }
    if args.cancel {
        return Ok(args
            .partitions
            .iter()
            .map(|&partition| Reassignment {
                topic: topic.clone(),
                partition,
                replicas: None,
            })
            .collect());
    }
    if args.replicas.is_empty() {
        bail!("give the target replicas: --replicas 2,3,4 (or --cancel)");
    }
    if args.partitions.len() > 1 {
        bail!("--replicas applies to one --partition; move several with --plan FILE");
    }
    Ok(vec![Reassignment {
        topic: topic.clone(),
        partition: args.partitions[0],
        replicas: Some(args.replicas.clone()),
    }])
}

/// Reads a plan, refusing what Kafka's tool refuses: another version, no
/// partitions, a partition twice, log dirs other than "any" or not one per replica.
pub(crate) fn parse_plan(text: &str) -> Result<Plan> {
    let plan: Plan = serde_json::from_str(text)?;
    if plan.version != 1 {
        bail!("version {} is not supported (only 1)", plan.version);
    }
    if plan.partitions.is_empty() {
        bail!("it lists no partitions");
    }
    let mut seen = BTreeSet::new();
    for p in &plan.partitions {
        if !seen.insert((&p.topic, p.partition)) {
            bail!("partition {}-{} is listed twice", p.topic, p.partition);
        }
        if let Some(dirs) = &p.log_dirs {
            if dirs.len() != p.replicas.len() || dirs.iter().any(|d| d != "any") {
                bail!(
                    "partition {}-{}: log_dirs must be \"any\" once per replica (syncline has \
                     one log dir per broker)",
                    p.topic,
                    p.partition
                );
            }
        }
    }
    Ok(plan)
}

async fn generate(
    admin: &Admin,
    ctx: Ctx<'_>,
    topics: &[String],
    broker_ids: &[i32],
) -> Result<Plan> {
    let cluster = admin
        .describe_cluster()
        .await
        .map_err(|e| anyhow::anyhow!(explain(&e, ctx)))?;
    let registered: BTreeSet<i32> = cluster.brokers.iter().map(|b| b.endpoint.id).collect();
    let mut described = Vec::new();
    for name in topics {
        let t = admin.describe_topic(name).await.map_err(|e| {
            anyhow::anyhow!(explain(
                &e,
                Ctx {
                    topic: Some(name),
                    ..ctx
                }
            ))
        })?;
        described.push((name.clone(), t.partitions));
    }
    propose(&described, broker_ids, &registered).map_err(|e| anyhow::anyhow!(e))
}

/// The plan `--generate` prints: each partition keeps its replicas that are on
/// `broker_ids` (in their order) and gets the rest from the brokers of
/// `broker_ids` holding the fewest replicas in the plan so far (lowest id first).
pub(crate) fn propose(
    topics: &[(String, Vec<PartitionDescription>)],
    broker_ids: &[i32],
    registered: &BTreeSet<i32>,
) -> Result<Plan, String> {
    let mut targets = BTreeSet::new();
    for &id in broker_ids {
        if !registered.contains(&id) {
            return Err(format!(
                "broker {id} in --broker-ids is not registered (see `syncline cluster describe`)"
            ));
        }
        if !targets.insert(id) {
            return Err(format!("broker {id} is given twice in --broker-ids"));
        }
    }
    let mut load: BTreeMap<i32, usize> = targets.iter().map(|&id| (id, 0)).collect();
    let mut partitions = Vec::new();
    for (topic, parts) in topics {
        for p in parts {
            // Where a reassignment in progress goes, not the replicas leaving.
            let current: Vec<i32> = p
                .replicas
                .iter()
                .copied()
                .filter(|r| !p.removing_replicas.contains(r))
                .collect();
            let rf = current.len();
            if rf > targets.len() {
                return Err(format!(
                    "{topic}-{} has {rf} replicas but --broker-ids names {} brokers",
                    p.partition,
                    targets.len()
                ));
            }
            let mut replicas: Vec<i32> = current
                .iter()
                .copied()
                .filter(|r| targets.contains(r))
                .collect();
            while replicas.len() < rf {
                let next = load
                    .iter()
                    .filter(|(id, _)| !replicas.contains(id))
                    .min_by_key(|&(&id, &n)| (n, id))
                    .map(|(&id, _)| id)
                    .expect("rf <= number of targets");
                replicas.push(next);
            }
            for r in &replicas {
                *load.entry(*r).or_default() += 1;
            }
            partitions.push(PlanPartition {
                topic: topic.clone(),
                partition: p.partition,
                replicas,
                log_dirs: None,
            });
        }
    }
    Ok(Plan {
        version: 1,
        partitions,
    })
}

fn outcome(r: &ReassignmentResult) -> String {
    match r.error {
        Some(code) => code.name().to_string(),
        None if !r.adding_replicas.is_empty() || !r.removing_replicas.is_empty() => {
            "in progress".into()
        }
        None => "done".into(),
    }
}

pub(crate) fn results_table(results: &[ReassignmentResult]) -> String {
    let mut table = Table::new(&[
        "TOPIC",
        "PARTITION",
        "REPLICAS",
        "ADDING",
        "REMOVING",
        "RESULT",
    ]);
    for r in results {
        table.row(vec![
            r.topic.clone(),
            r.partition.to_string(),
            ids(&r.replicas),
            ids(&r.adding_replicas),
            ids(&r.removing_replicas),
            outcome(r),
        ]);
    }
    table.render()
}

/// `--json`: `error` is Kafka's error name or null; `result` is "in progress",
/// "done" or the error.
pub(crate) fn results_json(results: &[ReassignmentResult]) -> Value {
    Value::Array(
        results
            .iter()
            .map(|r| {
                json!({
                    "topic": r.topic,
                    "partition": r.partition,
                    "replicas": r.replicas,
                    "adding_replicas": r.adding_replicas,
                    "removing_replicas": r.removing_replicas,
                    "error": r.error.map(|e| e.name()),
                    "message": (!r.message.is_empty()).then_some(&r.message),
                    "result": outcome(r),
                })
            })
            .collect(),
    )
}

#[cfg(test)]
mod tests {
    use super::*;
    use syncline_client::ErrorCode;

    fn part(partition: i32, replicas: &[i32]) -> PartitionDescription {
        PartitionDescription {
            partition,
            error: None,
            leader: replicas.first().copied(),
            leader_epoch: 0,
            partition_epoch: 0,
            replicas: replicas.to_vec(),
            isr: replicas.to_vec(),
            adding_replicas: vec![],
            removing_replicas: vec![],
            leader_view: None,
        }
    }

    #[test]
    fn generate_moves_only_the_replicas_off_the_retired_broker_and_spreads_them() {
        let topics = vec![(
            "t".to_string(),
            vec![
                part(0, &[1, 2, 3]),
                part(1, &[2, 3, 1]),
                part(2, &[3, 1, 2]),
            ],
        )];
        let registered = BTreeSet::from([1, 2, 3, 4]);
        let plan = propose(&topics, &[2, 3, 4], &registered).unwrap();
        let replicas: Vec<Vec<i32>> = plan.partitions.iter().map(|p| p.replicas.clone()).collect();
        assert_eq!(replicas, vec![vec![2, 3, 4], vec![2, 3, 4], vec![3, 2, 4]]);
        // Round trip through the file format.
        let text = serde_json::to_string(&plan).unwrap();
        assert_eq!(parse_plan(&text).unwrap(), plan);
    }

    #[test]
    fn generate_refuses_unknown_duplicate_or_too_few_brokers() {
        let topics = vec![("t".to_string(), vec![part(0, &[1, 2, 3])])];
        let registered = BTreeSet::from([1, 2, 3]);
        for (ids, want) in [
            (&[1, 2, 9][..], "broker 9 in --broker-ids is not registered"),
            (&[1, 2, 2][..], "broker 2 is given twice"),
            (
                &[1, 2][..],
                "t-0 has 3 replicas but --broker-ids names 2 brokers",
            ),
        ] {
            let err = propose(&topics, ids, &registered).unwrap_err();
            assert!(err.contains(want), "{ids:?}: {err}");
        }
    }

    #[test]
    fn plans_are_read_as_kafka_writes_them_and_bad_ones_are_named() {
        let kafka = r#"{"version":1,"partitions":[{"topic":"t","partition":0,"replicas":[2,3,4],"log_dirs":["any","any","any"]}]}"#;
        let plan = parse_plan(kafka).unwrap();
        assert_eq!(plan.partitions[0].replicas, vec![2, 3, 4]);
        for (text, want) in [
            (r#"{"version":2,"partitions":[]}"#, "version 2"),
            (r#"{"version":1,"partitions":[]}"#, "no partitions"),
            (
                r#"{"version":1,"partitions":[{"topic":"t","partition":0,"replicas":[1]},{"topic":"t","partition":0,"replicas":[2]}]}"#,
                "listed twice",
            ),
            (
                r#"{"version":1,"partitions":[{"topic":"t","partition":0,"replicas":[1],"log_dirs":["/data"]}]}"#,
                "log_dirs",
            ),
        ] {
            let err = parse_plan(text).unwrap_err().to_string();
            assert!(err.contains(want), "{text}: {err}");
        }
        assert!(parse_plan("not json").is_err());
    }

    #[test]
    fn results_show_progress_and_errors() {
        let results = vec![
            ReassignmentResult {
                topic: "t".into(),
                partition: 0,
                error: None,
                message: String::new(),
                replicas: vec![2, 3, 4, 1],
                adding_replicas: vec![4],
                removing_replicas: vec![1],
            },
            ReassignmentResult {
                topic: "t".into(),
                partition: 1,
                error: Some(ErrorCode::ReassignmentInProgress),
                message: "t-1 is being reassigned".into(),
                replicas: vec![1, 2, 3],
                adding_replicas: vec![],
                removing_replicas: vec![],
            },
        ];
        let table = results_table(&results);
        assert!(table.contains("2,3,4,1"), "{table}");
        assert!(table.contains("in progress"), "{table}");
        assert!(table.contains("REASSIGNMENT_IN_PROGRESS"), "{table}");
        let json = results_json(&results);
        assert_eq!(json[0]["result"], "in progress");
        assert_eq!(json[0]["adding_replicas"], json!([4]));
        assert_eq!(json[1]["error"], "REASSIGNMENT_IN_PROGRESS");
    }
}
