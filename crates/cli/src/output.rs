//! What `topic describe`, `topic elect-leaders` and `cluster describe` print: aligned tables for
//! people, JSON for scripts. Pure functions of the client's descriptions.

use serde_json::{json, Value};
use syncline_client::{ClusterDescription, ElectionResult, QuorumDescription, TopicDescription};

/// Left-aligned columns separated by two spaces.
#[derive(Debug)]
pub(crate) struct Table {
    rows: Vec<Vec<String>>,
}

impl Table {
    pub(crate) fn new(header: &[&str]) -> Self {
        Table {
            rows: vec![header.iter().map(|h| h.to_string()).collect()],
        }
    }

    pub(crate) fn row(&mut self, cells: Vec<String>) {
        self.rows.push(cells);
    }

    pub(crate) fn render(&self) -> String {
        let columns = self.rows.iter().map(Vec::len).max().unwrap_or(0);
        let widths: Vec<usize> = (0..columns)
            .map(|c| {
                self.rows
                    .iter()
                    .filter_map(|r| r.get(c))
                    .map(|s| s.chars().count())
                    .max()
                    .unwrap_or(0)
            })
            .collect();
        let mut out = String::new();
        for row in &self.rows {
            let mut line = String::new();
            for (c, cell) in row.iter().enumerate() {
                if c + 1 == row.len() {
                    line.push_str(cell);
                } else {
                    line.push_str(&format!("{cell:<width$}  ", width = widths[c]));
                }
            }
            out.push_str(line.trim_end());
            out.push('\n');
        }
        out
    }
}

pub(crate) fn ids(ids: &[i32]) -> String {
    if ids.is_empty() {
        "-".into()
    } else {
        ids.iter().map(i32::to_string).collect::<Vec<_>>().join(",")
    }
}

fn opt<T: ToString>(v: Option<T>) -> String {
    v.map_or_else(|| "-".into(), |v| v.to_string())
}

/// `topic describe` as tables: a header line, one row per partition, then the
/// leaders' view of every replica.
pub(crate) fn topic_table(t: &TopicDescription) -> String {
    let configs = if t.configs.is_empty() {
        "-".to_string()
    } else {
        t.configs
            .iter()
            .map(|(k, v)| format!("{k}={v}"))
            .collect::<Vec<_>>()
            .join(",")
    };
    let mut out = format!(
        "Topic: {}  PartitionCount: {}  ReplicationFactor: {}  Configs: {}\n\n",
        t.name,
        t.partitions.len(),
        t.replication_factor(),
        configs
    );
    let mut partitions = Table::new(&[
        "PARTITION",
        "LEADER",
        "LEADER_EPOCH",
        "REPLICAS",
        "ISR",
        "HIGH_WATERMARK",
        "LOG_END_OFFSET",
        "PRODUCERS",
    ]);
    let mut notes = Vec::new();
    for p in &t.partitions {
        let view = p.leader_view.as_ref();
        partitions.row(vec![
            p.partition.to_string(),
            p.leader.map_or_else(|| "none".into(), |l| l.to_string()),
            p.leader_epoch.to_string(),
            ids(&p.replicas),
            ids(&p.isr),
            opt(view.map(|v| v.high_watermark)),
            opt(view.map(|v| v.log_end_offset)),
            opt(view.map(|v| v.producer_count)),
        ]);
        if let Some(code) = p.error {
            notes.push(format!("partition {}: {code}", p.partition));
        }
        if p.leader.is_none() {
            notes.push(format!("partition {}: offline (no leader)", p.partition));
        } else if view.is_none() {
            notes.push(format!(
                "partition {}: leader {} did not answer; its view is missing",
                p.partition,
                opt(p.leader)
            ));
        }
        if !p.adding_replicas.is_empty() || !p.removing_replicas.is_empty() {
            notes.push(format!(
                "partition {}: reassigning: adding [{}], removing [{}]",
                p.partition,
                ids(&p.adding_replicas),
                ids(&p.removing_replicas)
            ));
        }
        if let Some(v) = view.filter(|v| !v.pending_isr.is_empty()) {
            notes.push(format!(
                "partition {}: ISR change to [{}] pending at the controller",
                p.partition,
                ids(&v.pending_isr)
            ));
        }
    }
    out.push_str(&partitions.render());
    for note in &notes {
        out.push_str(note);
        out.push('\n');
    }

    let mut replicas = Table::new(&[
        "PARTITION",
        "REPLICA",
        "LOG_END_OFFSET",
        "LAG",
        "LAST_CAUGHT_UP_MS_AGO",
        "IN_ISR",
    ]);
    let mut any = false;
    for p in &t.partitions {
        let Some(view) = &p.leader_view else { continue };
        for r in &view.replica_statuses {
            any = true;
            replicas.row(vec![
                p.partition.to_string(),
                r.broker_id.to_string(),
                opt(r.log_end_offset),
                r.lag_offsets.to_string(),
                r.last_caught_up_ms_ago
                    .map_or_else(|| "never".into(), |ms| ms.to_string()),
                if r.in_isr { "yes" } else { "no" }.into(),
            ]);
        }
    }
    if any {
        out.push_str("\nLeader's view of each replica:\n");
        out.push_str(&replicas.render());
    }
    out
}

/// `topic describe --json`.
pub(crate) fn topic_json(t: &TopicDescription) -> Value {
    json!({
        "topic": t.name,
        "partition_count": t.partitions.len(),
        "replication_factor": t.replication_factor(),
        "configs": t.configs,
        "partitions": t.partitions.iter().map(|p| {
            let view = p.leader_view.as_ref();
            json!({
                "partition": p.partition,
                "error": p.error.map(|c| c.name()),
                "leader": p.leader,
                "leader_epoch": p.leader_epoch,
                "partition_epoch": p.partition_epoch,
                "replicas": p.replicas,
                "isr": p.isr,
                "adding_replicas": p.adding_replicas,
                "removing_replicas": p.removing_replicas,
                "from_leader": view.is_some(),
                "high_watermark": view.map(|v| v.high_watermark),
                "log_end_offset": view.map(|v| v.log_end_offset),
                "log_start_offset": view.map(|v| v.log_start_offset),
                "pending_isr": view.map(|v| v.pending_isr.clone()),
                "producer_count": view.map(|v| v.producer_count),
                "replica_statuses": view.map(|v| v.replica_statuses.iter().map(|r| json!({
                    "broker_id": r.broker_id,
                    "log_end_offset": r.log_end_offset,
                    "lag_offsets": r.lag_offsets,
                    "last_caught_up_ms_ago": r.last_caught_up_ms_ago,
                    "in_isr": r.in_isr,
                })).collect::<Vec<_>>()).unwrap_or_default(),
            })
        }).collect::<Vec<_>>(),
    })
}

/// `cluster describe` as a table.
pub(crate) fn cluster_table(
    c: &ClusterDescription,
    quorum: &Result<QuorumDescription, String>,
) -> String {
    let mut out = format!(
        "Cluster: {}  Controller: {}\n\n",
        if c.cluster_id.is_empty() {
            "-"
        } else {
            &c.cluster_id
        },
        opt(c.controller_id)
    );
    let mut table = Table::new(&[
        "ID",
        "ENDPOINT",
        "RACK",
        "STATUS",
        "BROKER_EPOCH",
        "PARTITIONS",
        "LEADERS",
        "PREFERRED",
        "METRICS",
    ]);
    for b in &c.brokers {
        let mut status = if b.fenced { "fenced" } else { "alive" }.to_string();
        if c.controller_id == Some(b.endpoint.id) {
            status.push_str(",controller");
        }
        table.row(vec![
            b.endpoint.id.to_string(),
            b.endpoint.address(),
            opt(b.endpoint.rack.as_deref()),
            status,
            b.broker_epoch.to_string(),
            opt(b.load.map(|l| l.partitions)),
            opt(b.load.map(|l| l.leaders)),
            opt(b.load.map(|l| l.preferred_leaders)),
            opt(b.metrics_address.as_deref()),
        ]);
    }
    out.push_str(&table.render());
    out.push('\n');
    out.push_str(&quorum_table(quorum));
    out
}

/// The quorum part of `cluster describe`: like `kafka-metadata-quorum describe
/// --status` (first line) and `--replication` (the table).
fn quorum_table(quorum: &Result<QuorumDescription, String>) -> String {
    let q = match quorum {
        Ok(q) => q,
        Err(why) => return format!("Controller quorum: unavailable ({why})\n"),
    };
    let mut out = format!(
        "Controller quorum: leader {}  leader epoch {}  high watermark {}  controller epoch {}\n\n",
        q.leader_id, q.leader_epoch, q.high_watermark, q.controller_epoch
    );
    let mut table = Table::new(&[
        "VOTER",
        "STATUS",
        "LOG_END_OFFSET",
        "LAG",
        "LAST_CONTACT_MS",
    ]);
    for v in &q.voters {
        table.row(vec![
            v.id.to_string(),
            if v.id == q.leader_id {
                "leader"
            } else {
                "follower"
            }
            .to_string(),
            v.log_end_offset.to_string(),
            v.lag.to_string(),
            opt(v.last_contact_ms),
        ]);
    }
    out.push_str(&table.render());
    out
}

/// `cluster describe --json`: `quorum` is null (and `quorum_error` says why) when
/// no active controller answered.
pub(crate) fn cluster_json(
    c: &ClusterDescription,
    quorum: &Result<QuorumDescription, String>,
) -> Value {
    json!({
        "cluster_id": c.cluster_id,
        "controller_id": c.controller_id,
        "quorum": quorum.as_ref().ok().map(|q| json!({
            "leader_id": q.leader_id,
            "leader_epoch": q.leader_epoch,
            "high_watermark": q.high_watermark,
            "controller_epoch": q.controller_epoch,
            "voters": q.voters.iter().map(|v| json!({
                "id": v.id,
                "leader": v.id == q.leader_id,
                "log_end_offset": v.log_end_offset,
                "lag": v.lag,
                "last_contact_ms": v.last_contact_ms,
            })).collect::<Vec<_>>(),
        })),
        "quorum_error": quorum.as_ref().err(),
        "brokers": c.brokers.iter().map(|b| json!({
            "id": b.endpoint.id,
            "host": b.endpoint.host,
            "port": b.endpoint.port,
            "endpoint": b.endpoint.address(),
            "rack": b.endpoint.rack,
            "status": if b.fenced { "fenced" } else { "alive" },
            "fenced": b.fenced,
            "broker_epoch": b.broker_epoch,
            "metrics_address": b.metrics_address,
            "controller": c.controller_id == Some(b.endpoint.id),
            "partitions": b.load.map(|l| l.partitions),
            "leaders": b.load.map(|l| l.leaders),
            "preferred_leaders": b.load.map(|l| l.preferred_leaders),
        })).collect::<Vec<_>>(),
    })
}

/// What an election result says in the RESULT column and the JSON's `result`.
fn election_outcome(r: &ElectionResult) -> String {
    match r.error {
        None => "elected".into(),
        Some(syncline_proto::ErrorCode::ElectionNotNeeded) => "already preferred".into(),
        Some(code) if r.message.is_empty() => code.to_string(),
        Some(code) => format!("{code}: {}", r.message),
    }
}

/// `topic elect-leaders`: one row per partition.
pub(crate) fn election_table(results: &[ElectionResult]) -> String {
    let mut table = Table::new(&["TOPIC", "PARTITION", "LEADER", "LEADER_EPOCH", "RESULT"]);
    for r in results {
        let known = r.leader >= 0;
        table.row(vec![
            r.topic.clone(),
            if r.partition < 0 {
                "-".into()
            } else {
                r.partition.to_string()
            },
            opt(known.then_some(r.leader)),
            opt(known.then_some(r.leader_epoch)),
            election_outcome(r),
        ]);
    }
    table.render()
}

/// `topic elect-leaders --json`: `error` is Kafka's error name or null.
pub(crate) fn election_json(results: &[ElectionResult]) -> Value {
    Value::Array(
        results
            .iter()
            .map(|r| {
                json!({
                    "topic": r.topic,
                    "partition": (r.partition >= 0).then_some(r.partition),
                    "leader": (r.leader >= 0).then_some(r.leader),
                    "leader_epoch": (r.leader >= 0).then_some(r.leader_epoch),
                    "error": r.error.map(|e| e.name()),
                    "result": election_outcome(r),
                })
            })
            .collect(),
    )
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::BTreeMap;
    use syncline_client::{
        BrokerDescription, BrokerEndpoint, BrokerLoad, LeaderView, PartitionDescription,
        QuorumVoter, ReplicaStatus,
    };

    fn topic() -> TopicDescription {
        let status =
            |id: i32, leo: Option<i64>, lag: i64, ago: Option<i64>, in_isr: bool| ReplicaStatus {
                broker_id: id,
                log_end_offset: leo,
                lag_offsets: lag,
                last_caught_up_ms_ago: ago,
                in_isr,
            };
        TopicDescription {
            name: "events".into(),
            error: None,
            configs: BTreeMap::from([("min.insync.replicas".to_string(), "2".to_string())]),
            partitions: vec![
                PartitionDescription {
                    partition: 0,
                    error: None,
                    leader: Some(1),
                    leader_epoch: 3,
                    partition_epoch: 7,
                    replicas: vec![1, 2, 3],
                    isr: vec![1, 2],
                    adding_replicas: vec![],
                    removing_replicas: vec![],
                    leader_view: Some(LeaderView {
                        high_watermark: 120,
                        log_end_offset: 125,
                        log_start_offset: 0,
                        replica_statuses: vec![
                            status(1, Some(125), 0, Some(0), true),
                            status(2, Some(120), 5, Some(12), true),
                            status(3, None, 125, None, false),
                        ],
                        pending_isr: vec![],
                        producer_count: 2,
                    }),
                },
                PartitionDescription {
                    partition: 1,
                    error: None,
                    leader: None,
                    leader_epoch: 4,
                    partition_epoch: 9,
                    replicas: vec![2, 3, 4, 1],
                    isr: vec![2],
                    adding_replicas: vec![4],
                    removing_replicas: vec![1],
                    leader_view: None,
                },
            ],
        }
    }

    #[test]
    fn topic_table_shows_partitions_then_replicas() {
        let text = topic_table(&topic());
        let expected = "\
Topic: events  PartitionCount: 2  ReplicationFactor: 3  Configs: min.insync.replicas=2

PARTITION  LEADER  LEADER_EPOCH  REPLICAS  ISR  HIGH_WATERMARK  LOG_END_OFFSET  PRODUCERS
0          1       3             1,2,3     1,2  120             125             2
1          none    4             2,3,4,1   2    -               -               -
partition 1: offline (no leader)
partition 1: reassigning: adding [4], removing [1]

Leader's view of each replica:
PARTITION  REPLICA  LOG_END_OFFSET  LAG  LAST_CAUGHT_UP_MS_AGO  IN_ISR
0          1        125             0    0                      yes
0          2        120             5    12                     yes
0          3        -               125  never                  no
";
        assert_eq!(text, expected, "\n{text}");
    }

    #[test]
    fn topic_json_has_the_documented_keys() {
        let v = topic_json(&topic());
        assert_eq!(v["topic"], "events");
        let p0 = &v["partitions"][0];
        assert_eq!(p0["partition"], 0);
        assert_eq!(p0["leader"], 1);
        assert_eq!(p0["leader_epoch"], 3);
        assert_eq!(p0["replicas"], json!([1, 2, 3]));
        assert_eq!(p0["isr"], json!([1, 2]));
        assert_eq!(p0["adding_replicas"], json!([]));
        assert_eq!(v["partitions"][1]["adding_replicas"], json!([4]));
        assert_eq!(v["partitions"][1]["removing_replicas"], json!([1]));
        assert_eq!(p0["high_watermark"], 120);
        assert_eq!(p0["log_end_offset"], 125);
        assert_eq!(p0["producer_count"], 2);
        assert_eq!(
            p0["replica_statuses"][2],
            json!({
                "broker_id": 3, "log_end_offset": null, "lag_offsets": 125,
                "last_caught_up_ms_ago": null, "in_isr": false,
            })
        );
        let p1 = &v["partitions"][1];
        assert!(p1["leader"].is_null() && p1["high_watermark"].is_null());
        assert_eq!(p1["replica_statuses"], json!([]));
    }

    #[test]
    fn cluster_table_and_json() {
        let broker = |id: i32, fenced: bool| BrokerDescription {
            endpoint: BrokerEndpoint {
                id,
                host: "127.0.0.1".into(),
                port: 9090 + id,
                rack: (id == 1).then(|| "r1".to_string()),
            },
            broker_epoch: 100 + i64::from(id),
            fenced,
            metrics_address: (!fenced).then(|| format!("127.0.0.1:{}", 9100 + id)),
            load: (!fenced).then_some(BrokerLoad {
                partitions: 3,
                leaders: 1,
                preferred_leaders: 2,
            }),
        };
        let c = ClusterDescription {
            cluster_id: "abc".into(),
            controller_id: Some(1),
            brokers: vec![broker(1, false), broker(2, true)],
        };
        let voter = |id: i32, log_end_offset: i64, last_contact_ms: Option<i64>| QuorumVoter {
            id,
            log_end_offset,
            lag: 40 - log_end_offset,
            last_contact_ms,
        };
        let quorum = Ok(QuorumDescription {
            leader_id: 1,
            leader_epoch: 4,
            high_watermark: 40,
            controller_epoch: 6,
            voters: vec![voter(1, 40, Some(0)), voter(2, 38, None)],
        });
        let expected = "\
Cluster: abc  Controller: 1

ID  ENDPOINT        RACK  STATUS            BROKER_EPOCH  PARTITIONS  LEADERS  PREFERRED  METRICS
1   127.0.0.1:9091  r1    alive,controller  101           3           1        2          127.0.0.1:9101
2   127.0.0.1:9092  -     fenced            102           -           -        -          -

Controller quorum: leader 1  leader epoch 4  high watermark 40  controller epoch 6

VOTER  STATUS    LOG_END_OFFSET  LAG  LAST_CONTACT_MS
1      leader    40              0    0
2      follower  38              2    -
";
        assert_eq!(cluster_table(&c, &quorum), expected);
        let v = cluster_json(&c, &quorum);
        assert_eq!(v["controller_id"], 1);
        assert_eq!(v["brokers"][1]["status"], "fenced");
        assert_eq!(v["brokers"][0]["endpoint"], "127.0.0.1:9091");
        assert!(v["brokers"][1]["metrics_address"].is_null());
        assert_eq!(v["brokers"][0]["leaders"], 1);
        assert_eq!(v["brokers"][0]["preferred_leaders"], 2);
        assert!(v["brokers"][1]["partitions"].is_null());
        assert_eq!(v["quorum"]["leader_id"], 1);
        assert_eq!(v["quorum"]["voters"][1]["id"], 2);
        assert_eq!(v["quorum"]["voters"][1]["log_end_offset"], 38);
        assert_eq!(v["quorum"]["voters"][1]["lag"], 2);
        assert!(v["quorum"]["voters"][1]["last_contact_ms"].is_null());
        assert!(v["quorum_error"].is_null());

        let lost = Err("no active controller".to_string());
        assert!(cluster_table(&c, &lost)
            .ends_with("Controller quorum: unavailable (no active controller)\n"));
        let v = cluster_json(&c, &lost);
        assert!(v["quorum"].is_null());
        assert_eq!(v["quorum_error"], "no active controller");
        assert_eq!(
            crate::fields::select(&v, "the cluster", &["quorum_error".into()]).unwrap(),
            "no_active_controller"
        );
        let v = cluster_json(&c, &quorum);
        assert_eq!(
            crate::fields::select(&v, "the cluster", &["quorum.leader_id".into()]).unwrap(),
            "1"
        );
    }
}
