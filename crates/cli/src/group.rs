//! `syncline group list` and `group describe`: consumer groups as Kafka's
//! `kafka-consumer-groups --list` and `--describe` show them (members,
//! assignments, committed offsets, lag).

use anyhow::Result;
use clap::Subcommand;
use serde_json::{json, Value};
use syncline_client::{Admin, GroupDescription, GroupListing};

use crate::errors::{explain, Ctx};
use crate::output::Table;

#[derive(Debug, Subcommand)]
pub(crate) enum GroupCommand {
    /// Every consumer group with its state and coordinator.
    List {
        /// Print JSON instead of a table.
        #[arg(long)]
        json: bool,
    },
    /// A group's state, members and their partitions, and per partition the
    /// committed offset, the log end (high watermark) and the lag.
    Describe {
        /// The group id.
        group: String,
        /// Print JSON instead of tables.
        #[arg(long)]
        json: bool,
    },
}

pub(crate) async fn run(command: GroupCommand, bootstrap: &str) -> Result<()> {
    let ctx = Ctx {
        bootstrap,
        topic: None,
    };
    let fail = |e: syncline_client::ClientError| anyhow::anyhow!(explain(&e, ctx));
    let admin = Admin::new(crate::security::client_config(bootstrap)).map_err(fail)?;
    match command {
        GroupCommand::List { json } => {
            let groups = admin.list_groups().await.map_err(fail)?;
            if json {
                println!("{}", serde_json::to_string_pretty(&list_json(&groups))?);
            } else {
                print!("{}", list_table(&groups));
            }
        }
        GroupCommand::Describe { group, json } => {
            let g = admin.describe_group(&group).await.map_err(fail)?;
            if json {
                println!("{}", serde_json::to_string_pretty(&describe_json(&g))?);
            } else {
                print!("{}", describe_table(&g));
            }
        }
    }
    Ok(())
}

fn list_table(groups: &[GroupListing]) -> String {
    let mut table = Table::new(&["GROUP", "STATE", "PROTOCOL_TYPE", "COORDINATOR"]);
    for g in groups {
        table.row(vec![
            g.group_id.clone(),
            g.state.clone(),
            dash(&g.protocol_type),
            g.coordinator.to_string(),
        ]);
    }
    table.render()
}

fn list_json(groups: &[GroupListing]) -> Value {
    groups
        .iter()
        .map(|g| {
            json!({
                "group": g.group_id,
                "state": g.state,
                "protocol_type": g.protocol_type,
                "coordinator": g.coordinator,
            })
        })
        .collect()
}

fn dash(s: &str) -> String {
    if s.is_empty() {
        "-".into()
    } else {
        s.to_string()
    }
}

fn opt(v: Option<i64>) -> String {
    v.map_or_else(|| "-".into(), |v| v.to_string())
}

fn describe_table(g: &GroupDescription) -> String {
    let mut out = format!(
        "Group: {}  State: {}  Protocol: {}  Coordinator: {}\n\n",
        g.group_id,
        g.state,
        dash(&g.protocol),
        g.coordinator
    );
    let mut members = Table::new(&["MEMBER", "CLIENT_ID", "HOST", "PARTITIONS"]);
    for m in &g.members {
        let partitions: Vec<String> = m.assignment.iter().map(|tp| tp.to_string()).collect();
        members.row(vec![
            m.member_id.clone(),
            dash(&m.client_id),
            dash(&m.client_host),
            if partitions.is_empty() {
                "-".into()
            } else {
                partitions.join(",")
            },
        ]);
    }
    out.push_str(&members.render());
    out.push('\n');
    let mut offsets = Table::new(&[
        "TOPIC",
        "PARTITION",
        "CURRENT-OFFSET",
        "LOG-END-OFFSET",
        "LAG",
        "MEMBER",
    ]);
    for o in &g.offsets {
        offsets.row(vec![
            o.partition.topic.to_string(),
            o.partition.partition.to_string(),
            o.committed.to_string(),
            opt(o.log_end),
            opt(o.lag),
            o.member_id.clone().unwrap_or_else(|| "-".into()),
        ]);
    }
    out.push_str(&offsets.render());
    out
}

fn describe_json(g: &GroupDescription) -> Value {
    json!({
        "group": g.group_id,
        "state": g.state,
        "protocol_type": g.protocol_type,
        "protocol": g.protocol,
        "coordinator": g.coordinator,
        "members": g.members.iter().map(|m| json!({
            "member_id": m.member_id,
            "client_id": m.client_id,
            "client_host": m.client_host,
            "partitions": m.assignment.iter().map(|tp| json!({
                "topic": tp.topic.to_string(),
                "partition": tp.partition,
            })).collect::<Vec<_>>(),
        })).collect::<Vec<_>>(),
        "offsets": g.offsets.iter().map(|o| json!({
            "topic": o.partition.topic.to_string(),
            "partition": o.partition.partition,
            "committed": o.committed,
            "log_end": o.log_end,
            "lag": o.lag,
            "member_id": o.member_id,
        })).collect::<Vec<_>>(),
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use syncline_client::{GroupMember, GroupOffset, TopicPartition};

    #[test]
    fn describe_shows_members_offsets_and_lag() {
        let g = GroupDescription {
            group_id: "billing".into(),
            state: "Stable".into(),
            protocol_type: "consumer".into(),
            protocol: "range".into(),
            coordinator: 2,
            members: vec![GroupMember {
                member_id: "rdkafka-1".into(),
                client_id: "rdkafka".into(),
                client_host: "127.0.0.1:50000".into(),
                assignment: vec![TopicPartition::new("orders", 0)],
            }],
            offsets: vec![
                GroupOffset {
                    partition: TopicPartition::new("orders", 0),
                    committed: 40,
                    log_end: Some(45),
                    lag: Some(5),
                    member_id: Some("rdkafka-1".into()),
                },
                GroupOffset {
                    partition: TopicPartition::new("orders", 1),
                    committed: 7,
                    log_end: None,
                    lag: None,
                    member_id: None,
                },
            ],
        };
        let table = describe_table(&g);
        assert!(table.starts_with("Group: billing  State: Stable  Protocol: range  Coordinator: 2"));
        assert!(
            table.contains("rdkafka-1  rdkafka    127.0.0.1:50000  orders-0"),
            "{table}"
        );
        assert!(
            table.contains("orders  0          40              45              5    rdkafka-1"),
            "{table}"
        );
        assert!(
            table.contains("orders  1          7               -               -    -"),
            "{table}"
        );
        let j = describe_json(&g);
        assert_eq!(j["offsets"][0]["lag"], 5);
        assert_eq!(j["members"][0]["partitions"][0]["topic"], "orders");
        let listed = list_table(&[GroupListing {
            group_id: "billing".into(),
            protocol_type: String::new(),
            state: "Empty".into(),
            coordinator: 3,
        }]);
        assert_eq!(
            listed,
            "GROUP    STATE  PROTOCOL_TYPE  COORDINATOR\nbilling  Empty  -              3\n"
        );
    }
}
