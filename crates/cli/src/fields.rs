//! `--field`: one or more values of `topic describe --json` or `cluster describe
//! --json`, printed plainly on one line, so that a shell script reads the JSON
//! output without a JSON tool and never parses the tables meant for people.
//!
//! The fields are the keys of the `--json` output (one partition's object, one
//! broker's object, or the top level of `cluster describe`), so the two outputs
//! cannot drift apart.

use anyhow::{bail, Result};
use clap::Args;
use serde_json::Value;

/// `topic describe NAME --partition P --field F...`.
#[derive(Debug, Args)]
pub(crate) struct PartitionFields {
    /// Print only these keys of partition --partition's `--json` object,
    /// space-separated on one line (repeatable), e.g. --field leader --field isr.
    /// Lists print comma-separated; null, "" and empty lists print `none`;
    /// white space inside a string prints as `_` (one word per field).
    #[arg(
        long = "field",
        value_name = "NAME",
        requires = "partition",
        conflicts_with = "json"
    )]
    pub(crate) fields: Vec<String>,
    /// The partition whose --field values to print.
    #[arg(long, value_name = "P", requires = "fields")]
    pub(crate) partition: Option<i32>,
}

/// `cluster describe [--broker ID] --field F...`.
#[derive(Debug, Args)]
pub(crate) struct ClusterFields {
    /// Print only these keys of the `--json` output (of broker --broker's object
    /// when given, e.g. status; else of the top level, e.g. controller_id),
    /// space-separated on one line (repeatable). Null and "" print `none`; white
    /// space inside a string prints as `_`.
    #[arg(long = "field", value_name = "NAME", conflicts_with = "json")]
    pub(crate) fields: Vec<String>,
    /// The broker whose --field values to print.
    #[arg(long, value_name = "ID", requires = "fields")]
    pub(crate) broker: Option<i32>,
}

/// One partition's object in `topic describe --json` output.
pub(crate) fn partition(topic: &Value, partition: i32) -> Result<&Value> {
    let partitions = topic["partitions"].as_array().map(Vec::as_slice);
    let partitions = partitions.unwrap_or_default();
    match partitions
        .iter()
        .find(|p| p["partition"].as_i64() == Some(i64::from(partition)))
    {
        Some(p) => Ok(p),
        None => {
            let has = match partitions.len() {
                0 => "it has none".to_string(),
                1 => "it has partition 0".to_string(),
                n => format!("it has partitions 0 to {}", n - 1),
            };
            bail!(
                "topic {} has no partition {partition} ({has}): pick one with --partition",
                topic["topic"].as_str().unwrap_or("?"),
            )
        }
    }
}

/// One broker's object in `cluster describe --json` output.
pub(crate) fn broker(cluster: &Value, id: i32) -> Result<&Value> {
    let brokers = cluster["brokers"].as_array().map(Vec::as_slice);
    let brokers = brokers.unwrap_or_default();
    match brokers
        .iter()
        .find(|b| b["id"].as_i64() == Some(i64::from(id)))
    {
        Some(b) => Ok(b),
        None => {
            let ids: Vec<String> = brokers.iter().map(|b| b["id"].to_string()).collect();
            bail!(
                "no broker {id} is registered (registered: {}): see `syncline cluster describe`",
                if ids.is_empty() {
                    "none".to_string()
                } else {
                    ids.join(",")
                }
            )
        }
    }
}

/// The values of `names` in the JSON object `object` (called `what` in errors),
/// space-separated.
pub(crate) fn select(object: &Value, what: &str, names: &[String]) -> Result<String> {
    let Some(map) = object.as_object() else {
        bail!("{what} is not a JSON object");
    };
    let mut out = Vec::with_capacity(names.len());
    for name in names {
        // `quorum.leader_id`: a key of a nested object.
        let value = name
            .split('.')
            .try_fold(object, |v, key| v.as_object().and_then(|m| m.get(key)));
        let Some(value) = value else {
            let known: Vec<&str> = map
                .iter()
                .filter(|(_, v)| plain(v).is_some())
                .map(|(k, _)| k.as_str())
                .collect();
            bail!(
                "{what} has no field {name:?}: choose one of {}",
                known.join(", ")
            );
        };
        match plain(value) {
            Some(text) => out.push(text),
            None => bail!(
                "field {name} of {what} holds objects, not a value to print: read it with --json"
            ),
        }
    }
    Ok(out.join(" "))
}

/// A value as one shell word: numbers and booleans as JSON writes them, strings
/// unquoted, lists of those comma-separated; null, "" and [] as `none` (a word
/// the shell's `read` does not lose). None for objects.
fn plain(value: &Value) -> Option<String> {
    match value {
        Value::Null => Some("none".into()),
        Value::Bool(b) => Some(b.to_string()),
        Value::Number(n) => Some(n.to_string()),
        Value::String(s) if s.is_empty() => Some("none".into()),
        Value::String(s) => Some(s.replace(char::is_whitespace, "_")),
        Value::Array(items) if items.is_empty() => Some("none".into()),
        Value::Array(items) => items
            .iter()
            .map(|v| match v {
                Value::Array(_) | Value::Object(_) | Value::Null => None,
                other => plain(other),
            })
            .collect::<Option<Vec<_>>>()
            .map(|v| v.join(",")),
        Value::Object(_) => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn names(n: &[&str]) -> Vec<String> {
        n.iter().map(|s| s.to_string()).collect()
    }

    fn topic() -> Value {
        json!({
            "topic": "orders",
            "partitions": [
                {"partition": 0, "leader": 1, "leader_epoch": 3, "isr": [1, 2, 3],
                 "high_watermark": 120, "from_leader": true, "error": null,
                 "replica_statuses": [{"broker_id": 1}]},
                {"partition": 1, "leader": null, "leader_epoch": 4, "isr": [],
                 "high_watermark": null, "from_leader": false, "error": "LEADER_NOT_AVAILABLE",
                 "replica_statuses": []},
            ],
        })
    }

    #[test]
    fn values_print_as_one_word_each() {
        let t = topic();
        let p0 = partition(&t, 0).unwrap();
        assert_eq!(
            select(
                p0,
                "orders-0",
                &names(&[
                    "leader",
                    "leader_epoch",
                    "isr",
                    "high_watermark",
                    "from_leader"
                ])
            )
            .unwrap(),
            "1 3 1,2,3 120 true"
        );
        let p1 = partition(&t, 1).unwrap();
        assert_eq!(
            select(
                p1,
                "orders-1",
                &names(&["leader", "isr", "high_watermark", "error"])
            )
            .unwrap(),
            "none none none LEADER_NOT_AVAILABLE"
        );
        // An empty list of objects is a value too (there is nothing to print).
        assert_eq!(
            select(p1, "orders-1", &names(&["replica_statuses"])).unwrap(),
            "none"
        );
    }

    #[test]
    fn unknown_fields_and_objects_are_refused_with_the_choices() {
        let t = topic();
        let p0 = partition(&t, 0).unwrap();
        let err = select(p0, "orders-0", &names(&["leeder"]))
            .unwrap_err()
            .to_string();
        assert!(
            err.starts_with("orders-0 has no field \"leeder\": choose one of "),
            "{err}"
        );
        assert!(err.contains("leader_epoch") && err.contains("isr"), "{err}");
        // Fields holding objects are not offered: --field cannot print them.
        assert!(!err.contains("replica_statuses"), "{err}");
        let err = select(p0, "orders-0", &names(&["replica_statuses"]))
            .unwrap_err()
            .to_string();
        assert!(err.contains("read it with --json"), "{err}");
    }

    #[test]
    fn missing_partition_or_broker_names_what_exists() {
        let err = partition(&topic(), 5).unwrap_err().to_string();
        assert_eq!(
            err,
            "topic orders has no partition 5 (it has partitions 0 to 1): pick one with --partition"
        );
        let cluster = json!({"controller_id": 1, "cluster_id": "",
            "brokers": [{"id": 1, "status": "alive"}, {"id": 2, "status": "fenced"}]});
        assert_eq!(
            select(
                broker(&cluster, 2).unwrap(),
                "broker 2",
                &names(&["status"])
            )
            .unwrap(),
            "fenced"
        );
        assert_eq!(
            select(
                &cluster,
                "the cluster",
                &names(&["controller_id", "cluster_id"])
            )
            .unwrap(),
            "1 none"
        );
        let err = broker(&cluster, 7).unwrap_err().to_string();
        assert_eq!(
            err,
            "no broker 7 is registered (registered: 1,2): see `syncline cluster describe`"
        );
    }

    #[test]
    fn field_flags_need_their_subject_and_exclude_json() {
        use crate::args::{Cli, ClusterCommand, Command, TopicCommand};
        use clap::Parser;
        let parse = |args: &[&str]| {
            Cli::try_parse_from(std::iter::once("syncline").chain(args.iter().copied()))
        };
        let cli = parse(&[
            "topic",
            "describe",
            "t",
            "--partition",
            "2",
            "--field",
            "leader",
            "--field",
            "isr",
        ])
        .unwrap();
        let Command::Topic(TopicCommand::Describe(d)) = cli.command else {
            panic!()
        };
        assert_eq!(
            (d.fields.partition, d.fields.fields),
            (Some(2), names(&["leader", "isr"]))
        );
        assert!(parse(&["topic", "describe", "t", "--field", "leader"]).is_err());
        assert!(parse(&["topic", "describe", "t", "--partition", "0"]).is_err());
        assert!(parse(&[
            "topic",
            "describe",
            "t",
            "--partition",
            "0",
            "--field",
            "leader",
            "--json"
        ])
        .is_err());
        let cli = parse(&["cluster", "describe", "--broker", "2", "--field", "status"]).unwrap();
        let Command::Cluster(ClusterCommand::Describe { fields, .. }) = cli.command else {
            panic!()
        };
        assert_eq!(
            (fields.broker, fields.fields),
            (Some(2), names(&["status"]))
        );
        assert!(parse(&["cluster", "describe", "--field", "controller_id"]).is_ok());
        assert!(parse(&["cluster", "describe", "--broker", "2"]).is_err());
        assert!(parse(&["cluster", "describe", "--field", "controller_id", "--json"]).is_err());
    }
}
