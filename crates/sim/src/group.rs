//! A consumer group in the workload: members of one group share a topic's
//! partitions through the group coordinator (its offsets in the replicated
//! `__consumer_offsets`), read through the faults, and commit what they read
//! after every poll. After healing the group must read every partition to its
//! end, and [`check`] holds it to what a group promises:
//! - an acknowledged commit is never lost (the group's committed offset never
//!   ends below it): I1 for offsets;
//! - every offset below the final committed one was delivered to some member
//!   (at least once: a member that takes a partition over re-reads what was
//!   read and not committed, never skips);
//! - every record read is the log's record at that offset, below its end (I2,
//!   I5);
//! - the group reads every partition to its end once the faults heal (I9).

use std::collections::{BTreeMap, BTreeSet};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use syncline_chaos::checker::{Kind, Violation};
use syncline_chaos::workload::Brokers;
use syncline_client::{Admin, AutoOffsetReset, ClientConfig, ConsumerConfig, GroupConsumer};
use tokio::task::JoinHandle;
use tokio::time::Instant;

/// The group's id.
pub const GROUP: &str = "sim-group";
/// Its members.
const MEMBERS: usize = 2;
/// One poll's bound.
const POLL: Duration = Duration::from_millis(200);

/// What one member read and committed.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Member {
    pub member: usize,
    /// (partition, offset, value), in the order read.
    pub reads: Vec<(i32, i64, String)>,
    /// Every acknowledged commit: per partition it held then, the offset the
    /// commit carried at least (one past what the member had read of it).
    pub commits: Vec<BTreeMap<i32, i64>>,
}

/// The running group. Each member writes its history as it goes, so that a
/// member stuck at the end (a join that waits out its timeout) loses none of
/// what it read.
#[derive(Debug)]
pub struct Group {
    members: Vec<(JoinHandle<()>, Arc<Mutex<Member>>)>,
    stop: Arc<AtomicBool>,
}

fn bootstrap(brokers: &Brokers) -> String {
    let addrs: Vec<&str> = brokers.iter().map(|(_, a)| a.as_str()).collect();
    addrs.join(",")
}

impl Group {
    /// Starts the members on `topic`.
    pub fn start(brokers: &Brokers, topic: &str) -> Group {
        let stop = Arc::new(AtomicBool::new(false));
        let members = (0..MEMBERS)
            .map(|member| {
                let mut config = ConsumerConfig::new(&bootstrap(brokers));
                config.group_id = GROUP.into();
                config.client.client_id = format!("sim-group-{member}");
                config.client.request_timeout_ms = 5_000;
                config.auto_offset_reset = AutoOffsetReset::Earliest;
                config.enable_auto_commit = false;
                config.session_timeout_ms = 6_000;
                config.heartbeat_interval_ms = 1_000;
                config.max_poll_interval_ms = 10_000;
                let history = Arc::new(Mutex::new(Member {
                    member,
                    ..Member::default()
                }));
                let (topic, stop, h) = (topic.to_string(), stop.clone(), history.clone());
                (tokio::spawn(run_member(config, topic, stop, h)), history)
            })
            .collect();
        Group { members, stop }
    }

    /// Stops the members (each leaves the group; one still busy after
    /// `bound` is stopped where it is) and returns what they did.
    pub async fn stop(self, bound: Duration) -> Vec<Member> {
        self.stop.store(true, Ordering::Release);
        let deadline = Instant::now() + bound;
        let mut out = Vec::new();
        for (task, history) in self.members {
            let abort = task.abort_handle();
            if tokio::time::timeout_at(deadline, task).await.is_err() {
                abort.abort();
            }
            out.push(lock(&history).clone());
        }
        out
    }
}

fn lock(m: &Mutex<Member>) -> std::sync::MutexGuard<'_, Member> {
    m.lock().unwrap_or_else(|e| e.into_inner())
}

async fn run_member(
    config: ConsumerConfig,
    topic: String,
    stop: Arc<AtomicBool>,
    history: Arc<Mutex<Member>>,
) {
    let Ok(mut consumer) = GroupConsumer::new(config, vec![topic]) else {
        return;
    };
    // One past the last record read, per partition, since the last commit.
    let mut read: BTreeMap<i32, i64> = BTreeMap::new();
    while !stop.load(Ordering::Acquire) {
        match consumer.poll(POLL).await {
            Ok(records) => {
                for r in records {
                    let value = r
                        .value
                        .as_ref()
                        .map(|v| String::from_utf8_lossy(v).into_owned())
                        .unwrap_or_default();
                    read.insert(r.partition, r.offset + 1);
                    lock(&history).reads.push((r.partition, r.offset, value));
                }
            }
            // The coordinator moved, a rebalance, a broker down: poll again.
            Err(_) => {
                tokio::time::sleep(Duration::from_millis(100)).await;
                continue;
            }
        }
        if read.is_empty() {
            continue;
        }
        // What the commit carries for the partitions held now (it commits
        // their positions, at least one past what was read).
        let held: BTreeSet<i32> = consumer
            .assignment()
            .iter()
            .map(|tp| tp.partition)
            .collect();
        let carried: BTreeMap<i32, i64> = read
            .iter()
            .filter(|(p, _)| held.contains(p))
            .map(|(&p, &o)| (p, o))
            .collect();
        if consumer.commit().await.is_ok() {
            if !carried.is_empty() {
                lock(&history).commits.push(carried);
            }
            read.clear();
        }
    }
    let _ = tokio::time::timeout(Duration::from_secs(10), consumer.close()).await;
}

/// The group's committed offsets, per partition of `topic`, as its
/// coordinator reports them.
pub async fn committed(brokers: &Brokers, topic: &str) -> Result<BTreeMap<i32, i64>, String> {
    let admin = Admin::new(ClientConfig::new(&bootstrap(brokers))).map_err(|e| e.to_string())?;
    let d = admin
        .describe_group(GROUP)
        .await
        .map_err(|e| e.to_string())?;
    Ok(d.offsets
        .iter()
        .filter(|o| &*o.partition.topic == topic)
        .map(|o| (o.partition.partition, o.committed))
        .collect())
}

/// Waits until the group has committed every partition of `topic` to its
/// end (`ends`), for at most `bound`.
pub async fn wait_read_to_end(
    brokers: &Brokers,
    topic: &str,
    ends: &BTreeMap<i32, i64>,
    bound: Duration,
) -> Result<(), String> {
    let start = Instant::now();
    loop {
        let now = committed(brokers, topic).await;
        let behind: Vec<String> = ends
            .iter()
            .filter(|(p, end)| now.as_ref().map_or(true, |c| c.get(p) != Some(end)))
            .map(|(p, end)| {
                let at = now.as_ref().ok().and_then(|c| c.get(p).copied());
                format!("partition {p} committed {at:?} of {end}")
            })
            .collect();
        if behind.is_empty() {
            return Ok(());
        }
        if start.elapsed() > bound {
            let why = match now {
                Ok(_) => behind.join(", "),
                Err(e) => format!("its offsets cannot be read: {e}"),
            };
            return Err(format!(
                "the group did not read to the end within {bound:?}: {why}"
            ));
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
}

/// Judges the group: its members' reads and acknowledged commits, its final
/// committed offsets and the final logs (each partition's records from offset
/// 0), and whether it read to the end after healing.
#[must_use]
pub fn check(
    members: &[Member],
    committed: &BTreeMap<i32, i64>,
    logs: &BTreeMap<i32, Vec<(i64, String)>>,
    healed: &Result<(), String>,
) -> Vec<Violation> {
    let mut v = Vec::new();
    let mut violate = |kind, detail: String| v.push(Violation { kind, detail });
    let empty = Vec::new();
    let mut delivered: BTreeMap<i32, BTreeSet<i64>> = BTreeMap::new();
    for m in members {
        for (p, offset, value) in &m.reads {
            let log = logs.get(p).unwrap_or(&empty);
            match log.get(*offset as usize) {
                Some((o, found)) if *o == *offset && found == value => {}
                Some((o, found)) if *o == *offset => violate(
                    Kind::InconsistentOffset,
                    format!(
                        "group member {} read {value} at {p}:{offset}, where the log has {found}",
                        m.member
                    ),
                ),
                _ => violate(
                    Kind::ReadAboveHighWatermark,
                    format!(
                        "group member {} read {value} at {p}:{offset}, which the log does not have",
                        m.member
                    ),
                ),
            }
            delivered.entry(*p).or_default().insert(*offset);
        }
        for commit in &m.commits {
            for (p, at_least) in commit {
                let now = committed.get(p).copied();
                if now.is_none_or(|c| c < *at_least) {
                    violate(
                        Kind::LostCommit,
                        format!(
                            "group member {} committed {p} at {at_least} or more; the group's offset ends at {now:?}",
                            m.member
                        ),
                    );
                }
            }
        }
    }
    for (p, &end) in committed {
        let got = delivered.get(p);
        if let Some(missing) = (0..end).find(|o| got.is_none_or(|d| !d.contains(o))) {
            violate(
                Kind::PollSkip,
                format!("the group committed {p} at {end} but no member read offset {missing}"),
            );
        }
    }
    if let Err(e) = healed {
        violate(Kind::NotHealed, e.clone());
    }
    v
}

#[cfg(test)]
mod tests {
    use super::*;

    fn log(values: &[&str]) -> BTreeMap<i32, Vec<(i64, String)>> {
        let records = values
            .iter()
            .enumerate()
            .map(|(i, v)| (i as i64, v.to_string()))
            .collect();
        BTreeMap::from([(0, records)])
    }

    fn member(reads: &[(i64, &str)], commits: &[i64]) -> Member {
        Member {
            member: 0,
            reads: reads.iter().map(|(o, v)| (0, *o, v.to_string())).collect(),
            commits: commits.iter().map(|&c| BTreeMap::from([(0, c)])).collect(),
        }
    }

    fn kinds(members: &[Member], committed: i64, values: &[&str]) -> Vec<Kind> {
        check(
            members,
            &BTreeMap::from([(0, committed)]),
            &log(values),
            &Ok(()),
        )
        .into_iter()
        .map(|v| v.kind)
        .collect()
    }

    #[test]
    fn each_broken_group_promise_is_its_verdict() {
        let abc = ["a", "b", "c"];
        let cases: Vec<(&str, Vec<Member>, i64, Vec<Kind>)> = vec![
            (
                "read and committed, two members, one re-reading",
                vec![
                    member(&[(0, "a"), (1, "b")], &[2]),
                    member(&[(1, "b"), (2, "c")], &[3]),
                ],
                3,
                vec![],
            ),
            (
                "an acknowledged commit lost",
                vec![member(&[(0, "a"), (1, "b"), (2, "c")], &[3])],
                2,
                vec![Kind::LostCommit],
            ),
            (
                "committed past a record nobody read",
                vec![member(&[(0, "a"), (2, "c")], &[3])],
                3,
                vec![Kind::PollSkip],
            ),
            (
                "read a value the log does not have there",
                vec![member(&[(0, "a"), (1, "x"), (2, "c")], &[3])],
                3,
                vec![Kind::InconsistentOffset],
            ),
            (
                "read past the log's end",
                vec![member(&[(0, "a"), (1, "b"), (2, "c"), (3, "d")], &[3])],
                3,
                vec![Kind::ReadAboveHighWatermark],
            ),
        ];
        for (name, members, committed, expected) in cases {
            assert_eq!(kinds(&members, committed, &abc), expected, "{name}");
        }
        let not_healed = check(
            &[],
            &BTreeMap::new(),
            &log(&abc),
            &Err("the group did not read to the end".into()),
        );
        assert_eq!(not_healed.len(), 1);
        assert_eq!(not_healed[0].kind, Kind::NotHealed);
    }
}
