//! What the failure tests check, shared (the invariants: docs/INVARIANTS.md): a
//! watch over every broker's view of who leads (one leader per partition and
//! leader epoch, leader in ISR within replicas, epochs never going back: I7/I8),
//! an `acks=all` load with exact accounting, and the verification after healing
//! (every acknowledged record readable, I1, at the offset it was acknowledged
//! with, I2; acknowledged offsets growing in sending order, I4; replica logs
//! byte-identical below the high watermark, I2).
//!
//! Every wait here is a poll with a deadline that names what it waited for and
//! the last state it saw.

use std::collections::{BTreeMap, BTreeSet};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use syncline_client::RecordMetadata;
use syncline_client::{Acks, Connection, ProduceError, Producer, ProducerConfig, ProducerRecord};
use syncline_proto::pb::{self, request::Body, response::Body as Resp};
use tokio::sync::watch;
use tokio::task::JoinHandle;
use tokio::time::Instant;

use crate::client::read_all;
use crate::Cluster;

/// Short timers, so that failures are detected in seconds.
pub const FAST_TIMERS: &str = "replica_lag_time_max_ms = 2000\n\
                               broker_session_timeout_ms = 3000\n\
                               broker_heartbeat_interval_ms = 500\n";
/// How long a test waits for a state it polls for: a generous bound, since a
/// loaded two-core machine can stall the brokers' tasks for seconds. Never the
/// behaviour under test (that has bounds of its own).
pub const WAIT: Duration = Duration::from_secs(20);
/// `broker_session_timeout_ms` of [`FAST_TIMERS`].
pub const SESSION_TIMEOUT: Duration = Duration::from_millis(3000);

/// Bound on one poll: a paused (SIGSTOP) broker accepts connections but never
/// answers, and must not stall the checks of the others.
const POLL_TIMEOUT: Duration = Duration::from_secs(2);
/// How often the leader watch asks each broker.
const WATCH_EVERY: Duration = Duration::from_millis(50);
/// Pause between two sends of one load worker (keeps the 2-core machine usable).
const LOAD_PACE: Duration = Duration::from_millis(20);
/// Sends of one partition the load keeps outstanding: while acknowledgements
/// stall (a failover), up to this many batches of a partition are in flight at
/// once, as many as an idempotent producer allows.
const LOAD_WINDOW: usize = 5;
/// The load's producer gives up on a record after this long (retrying meanwhile);
/// longer than any outage the tests cause.
const DELIVERY_TIMEOUT_MS: u64 = 90_000;

async fn ask(addr: &str, body: Body) -> anyhow::Result<Resp> {
    let conn = crate::security::connect(addr, "e2e-checks", POLL_TIMEOUT).await?;
    Ok(tokio::time::timeout(POLL_TIMEOUT, conn.send(body)).await??)
}

/// Creates a topic with the CLI and checks it succeeded.
pub fn create_topic(cluster: &Cluster, topic: &str, partitions: i32, rf: i32, min_isr: i32) {
    let (partitions, rf) = (partitions.to_string(), rf.to_string());
    let min_isr = format!("min.insync.replicas={min_isr}");
    let out = cluster.cli(
        &[
            "topic",
            "create",
            topic,
            "--partitions",
            &partitions,
            "--replication-factor",
            &rf,
            "--config",
            &min_isr,
        ],
        None,
    );
    assert!(
        out.status.success(),
        "topic create failed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
}

/// Every partition of `topic` as broker `via` knows it (the controller's last
/// announcements), sorted by partition.
pub async fn topic_metadata(
    cluster: &Cluster,
    via: i32,
    topic: &str,
) -> anyhow::Result<Vec<pb::PartitionMetadata>> {
    let Resp::Metadata(m) = ask(
        &cluster.node(via).addr(),
        Body::Metadata(pb::MetadataRequest {
            topics: vec![topic.into()],
            ..Default::default()
        }),
    )
    .await?
    else {
        anyhow::bail!("unexpected response to Metadata");
    };
    let t = m
        .topics
        .into_iter()
        .find(|t| t.name == topic)
        .ok_or_else(|| anyhow::anyhow!("broker {via} does not know {topic}"))?;
    anyhow::ensure!(t.error_code == 0, "broker {via}: {topic}: {}", t.error_code);
    let mut partitions = t.partitions;
    anyhow::ensure!(
        !partitions.is_empty(),
        "broker {via}: {topic} has no partitions"
    );
    partitions.sort_by_key(|p| p.partition);
    Ok(partitions)
}

/// DescribeTopics of `topic` answered by broker `via`.
pub async fn describe_topic(
    cluster: &Cluster,
    via: i32,
    topic: &str,
) -> anyhow::Result<pb::TopicDescription> {
    let Resp::DescribeTopics(d) = ask(
        &cluster.node(via).addr(),
        Body::DescribeTopics(pb::DescribeTopicsRequest {
            topics: vec![topic.into()],
        }),
    )
    .await?
    else {
        anyhow::bail!("unexpected response to DescribeTopics");
    };
    d.topics
        .into_iter()
        .find(|t| t.name == topic)
        .ok_or_else(|| anyhow::anyhow!("broker {via} does not describe {topic}"))
}

/// Broker `leader`'s own view of a partition it leads (an error if it does not).
pub async fn leader_view(
    cluster: &Cluster,
    leader: i32,
    topic: &str,
    partition: i32,
) -> anyhow::Result<pb::PartitionDescription> {
    describe_topic(cluster, leader, topic)
        .await?
        .partitions
        .into_iter()
        .find(|p| p.partition == partition && p.from_leader)
        .ok_or_else(|| anyhow::anyhow!("broker {leader} does not lead {topic}-{partition}"))
}

/// The partitions broker `id` itself says it leads.
pub async fn led_by(cluster: &Cluster, id: i32, topic: &str) -> anyhow::Result<Vec<i32>> {
    Ok(describe_topic(cluster, id, topic)
        .await?
        .partitions
        .into_iter()
        .filter(|p| p.from_leader)
        .map(|p| p.partition)
        .collect())
}

/// `v`, sorted (ISRs keep assignment order; comparisons want sets).
pub fn sorted(v: &[i32]) -> Vec<i32> {
    let mut v = v.to_vec();
    v.sort_unstable();
    v
}

/// Partitions keyed by index.
pub fn by_partition(partitions: &[pb::PartitionMetadata]) -> BTreeMap<i32, pb::PartitionMetadata> {
    partitions
        .iter()
        .map(|p| (p.partition, p.clone()))
        .collect()
}

/// Of brokers 2 and 3 (broker 1 hosts the controller), the one leading more of
/// `partitions`; panics if neither leads any.
pub fn busier_leader(partitions: &BTreeMap<i32, pb::PartitionMetadata>) -> i32 {
    let leads = |id: i32| partitions.values().filter(|p| p.leader_id == id).count();
    let victim = if leads(3) > leads(2) { 3 } else { 2 };
    assert!(leads(victim) > 0, "neither 2 nor 3 leads: {partitions:?}");
    victim
}

/// Broker `id`'s registration as the controller reports it: (broker epoch,
/// fenced).
pub async fn registration(cluster: &Cluster, id: i32) -> anyhow::Result<(i64, bool)> {
    cluster
        .describe_cluster(1)
        .await?
        .brokers
        .iter()
        .find(|b| b.endpoint.as_ref().is_some_and(|e| e.node_id == id))
        .map(|b| (b.broker_epoch, b.fenced))
        .ok_or_else(|| anyhow::anyhow!("broker {id} is not registered"))
}

/// Waits until, as broker `via` knows it and in each leader's own view, every
/// partition of `topic` has a leader, every replica in its ISR and no ISR change
/// pending. Returns the partitions as `via` knows them.
pub async fn wait_full_isr(
    cluster: &Cluster,
    via: i32,
    topic: &str,
    timeout: Duration,
) -> Vec<pb::PartitionMetadata> {
    let deadline = Instant::now() + timeout;
    loop {
        let last = match full_isr(cluster, via, topic).await {
            Ok(partitions) => return partitions,
            Err(e) => e,
        };
        assert!(
            Instant::now() < deadline,
            "timed out after {timeout:?} waiting for every replica of {topic} in its ISR: {last:#}"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

pub async fn full_isr(
    cluster: &Cluster,
    via: i32,
    topic: &str,
) -> anyhow::Result<Vec<pb::PartitionMetadata>> {
    let partitions = topic_metadata(cluster, via, topic).await?;
    for p in &partitions {
        anyhow::ensure!(p.leader_id > 0, "partition {} has no leader", p.partition);
        anyhow::ensure!(
            sorted(&p.isr) == sorted(&p.replicas),
            "partition {}: ISR {:?} of replicas {:?} (broker {via}'s view)",
            p.partition,
            p.isr,
            p.replicas
        );
        let view = leader_view(cluster, p.leader_id, topic, p.partition).await?;
        anyhow::ensure!(
            view.leader_epoch == p.leader_epoch
                && sorted(&view.isr) == sorted(&p.replicas)
                && view.pending_isr.is_empty(),
            "partition {}: leader {} sees epoch {} ISR {:?} pending {:?}",
            p.partition,
            p.leader_id,
            view.leader_epoch,
            view.isr,
            view.pending_isr
        );
    }
    Ok(partitions)
}

/// "Within `broker_session_timeout_ms` + a few seconds": how long a failed broker's
/// leaderships may take to move.
pub const FAILOVER_DEADLINE: Duration = SESSION_TIMEOUT.saturating_add(Duration::from_secs(5));

/// Waits, from `since` and at most [`FAILOVER_DEADLINE`], until `victim`'s failure
/// is handled as the controller announces it (the metadata of the lowest-numbered
/// other broker): `victim` is in
/// no ISR, every partition it led has a new leader in a higher leader epoch that
/// leads in its own view too. Panics at once on a new leader from outside the old
/// ISR, and on any leadership change of a partition `victim` did not lead (its
/// failure is no reason to bump those). Returns the partitions then.
pub async fn wait_failover(
    cluster: &Cluster,
    topic: &str,
    before: &BTreeMap<i32, pb::PartitionMetadata>,
    victim: i32,
    since: Instant,
) -> BTreeMap<i32, pb::PartitionMetadata> {
    loop {
        let last = match failed_over(cluster, topic, before, victim).await {
            Ok(now) => {
                println!(
                    "broker {victim}'s failure handled within {:?}",
                    since.elapsed()
                );
                return now;
            }
            Err(e) => e,
        };
        assert!(
            since.elapsed() < FAILOVER_DEADLINE,
            "broker {victim}'s failure not handled within {FAILOVER_DEADLINE:?}: {last:#}"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

async fn failed_over(
    cluster: &Cluster,
    topic: &str,
    before: &BTreeMap<i32, pb::PartitionMetadata>,
    victim: i32,
) -> anyhow::Result<BTreeMap<i32, pb::PartitionMetadata>> {
    // As the lowest-numbered broker other than the victim knows it.
    let via = cluster
        .nodes
        .iter()
        .map(|n| n.id)
        .find(|id| *id != victim)
        .expect("a broker besides the victim");
    let now = by_partition(&topic_metadata(cluster, via, topic).await?);
    for (p, old) in before {
        let new = &now[p];
        if old.leader_id != victim {
            assert_eq!(
                (new.leader_id, new.leader_epoch),
                (old.leader_id, old.leader_epoch),
                "partition {p}: broker {victim}'s failure moved a leadership it did not hold"
            );
        } else if new.leader_epoch > old.leader_epoch {
            assert!(
                new.leader_id != victim && old.isr.contains(&new.leader_id),
                "partition {p}: new leader {} in epoch {} is not from the ISR {:?} without {victim}",
                new.leader_id,
                new.leader_epoch,
                old.isr
            );
        } else {
            anyhow::bail!(
                "partition {p}: still led by {victim} in epoch {}",
                new.leader_epoch
            );
        }
        anyhow::ensure!(
            !new.isr.contains(&victim),
            "partition {p}: ISR still {:?}",
            new.isr
        );
    }
    for (p, new) in &now {
        if before[p].leader_id == victim {
            let view = leader_view(cluster, new.leader_id, topic, *p).await?;
            anyhow::ensure!(
                view.leader_epoch == new.leader_epoch,
                "partition {p}: broker {} leads in epoch {}, announced {}",
                new.leader_id,
                view.leader_epoch,
                new.leader_epoch
            );
        }
    }
    Ok(now)
}

/// Waits until every replica of the partition holds byte-identical batches below
/// its leader's high watermark, and those batches end exactly at it. Call once
/// writes have stopped. Returns the high watermark.
pub async fn wait_logs_identical(
    cluster: &Cluster,
    topic: &str,
    partition: i32,
    timeout: Duration,
) -> i64 {
    let deadline = Instant::now() + timeout;
    loop {
        let last = match logs_identical(cluster, topic, partition).await {
            Ok(hw) => return hw,
            Err(e) => e,
        };
        assert!(
            Instant::now() < deadline,
            "timed out after {timeout:?} waiting for identical logs of {topic}-{partition}: {last:#}"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

pub async fn logs_identical(cluster: &Cluster, topic: &str, partition: i32) -> anyhow::Result<i64> {
    let meta = any_metadata(cluster, topic).await?;
    let p = meta
        .iter()
        .find(|p| p.partition == partition)
        .ok_or_else(|| anyhow::anyhow!("no partition {partition}"))?;
    let view = leader_view(cluster, p.leader_id, topic, partition).await?;
    let hw = view.high_watermark;
    let reference = cluster.log_bytes(p.leader_id, topic, partition, hw);
    let end = syncline_proto::batch::split(&reference)
        .filter_map(Result::ok)
        .last()
        .map_or(0, |(h, _)| h.last_offset() + 1);
    anyhow::ensure!(
        end == hw,
        "leader {}'s batches end at {end}, its high watermark is {hw}",
        p.leader_id
    );
    for &r in &p.replicas {
        let bytes = cluster.log_bytes(r, topic, partition, hw);
        anyhow::ensure!(
            bytes == reference,
            "replica {r} differs from leader {} below HW {hw} ({} vs {} bytes)",
            p.leader_id,
            bytes.len(),
            reference.len()
        );
    }
    Ok(hw)
}

/// The topic's metadata from the first broker that answers.
pub async fn any_metadata(
    cluster: &Cluster,
    topic: &str,
) -> anyhow::Result<Vec<pb::PartitionMetadata>> {
    let mut last = None;
    for node in &cluster.nodes {
        match topic_metadata(cluster, node.id, topic).await {
            Ok(m) => return Ok(m),
            Err(e) => last = Some(e),
        }
    }
    Err(last.unwrap_or_else(|| anyhow::anyhow!("no brokers")))
}

/// After every fault healed: no unclean election happened (as no controller voter
/// counted one) and no partition is offline (as the active controller reports).
pub fn assert_no_unclean_or_offline(cluster: &Cluster) {
    for id in 1..=cluster.voters as i32 {
        let unclean = cluster
            .metric(id, "syncline_unclean_leader_elections_total")
            .unwrap_or_else(|e| panic!("broker {id}'s metrics: {e}"));
        assert_eq!(unclean, 0.0, "broker {id} counted unclean elections");
    }
    let active = cluster
        .active_controller()
        .expect("one active controller after healing");
    assert_eq!(
        cluster
            .metric(active, "syncline_offline_partitions_count")
            .unwrap(),
        0.0
    );
}

/// Length in bytes of broker `id`'s log file (to read only what follows).
pub fn log_len(cluster: &Cluster, id: i32) -> usize {
    std::fs::metadata(&cluster.node(id).log).map_or(0, |m| m.len() as usize)
}

/// Broker `id`'s log from byte `from` on, without terminal colour codes (the
/// brokers' tracing output colours field names: `broker_id=2` is not contiguous).
pub fn log_since(cluster: &Cluster, id: i32, from: usize) -> String {
    let bytes = std::fs::read(&cluster.node(id).log).unwrap_or_default();
    let text = String::from_utf8_lossy(bytes.get(from..).unwrap_or_default());
    let mut plain = String::with_capacity(text.len());
    let mut chars = text.chars();
    while let Some(c) = chars.next() {
        if c == '\u{1b}' {
            // CSI: ESC [ parameters, ended by a letter.
            for c in chars.by_ref() {
                if c.is_ascii_alphabetic() {
                    break;
                }
            }
        } else {
            plain.push(c);
        }
    }
    plain
}

// --- the leader watch ---

/// Everything the leader watch saw.
#[derive(Debug, Default, Clone)]
pub struct LeaderHistory {
    /// (partition, leader epoch) → the leader named for it, by every view (the
    /// metadata a broker was told and the leader's own claim).
    pub leaders: BTreeMap<(i32, i32), i32>,
    /// (partition, leader epoch) → the broker that answered as its leader.
    pub claims: BTreeMap<(i32, i32), i32>,
    /// Answers received, per broker.
    pub answers: BTreeMap<i32, u64>,
    /// Every broken rule, in the order seen.
    pub violations: Vec<String>,
}

impl LeaderHistory {
    fn record(&mut self, broker: i32, topic: &pb::TopicDescription, last: &mut BTreeMap<i32, i32>) {
        *self.answers.entry(broker).or_default() += 1;
        for p in &topic.partitions {
            if p.error_code != 0 {
                continue;
            }
            let key = (p.partition, p.leader_epoch);
            let who = if p.from_leader {
                format!("broker {broker} (as leader)")
            } else {
                format!("broker {broker}'s metadata")
            };
            match self.leaders.get(&key) {
                Some(&l) if l != p.leader_id => self.violations.push(format!(
                    "two leaders for {}-{} in leader epoch {}: {l} and {} ({who})",
                    topic.name, p.partition, p.leader_epoch, p.leader_id
                )),
                Some(_) => {}
                None => {
                    self.leaders.insert(key, p.leader_id);
                }
            }
            if p.from_leader {
                if p.leader_id != broker {
                    self.violations.push(format!(
                        "broker {broker} answers as leader of {}-{} naming leader {}",
                        topic.name, p.partition, p.leader_id
                    ));
                }
                self.claims.entry(key).or_insert(broker);
            }
            let isr_ok = p.isr.iter().all(|r| p.replicas.contains(r));
            let leader_ok = p.leader_id < 0 || p.isr.contains(&p.leader_id);
            if !isr_ok || !leader_ok {
                self.violations.push(format!(
                    "{}-{} epoch {}: leader {} ISR {:?} replicas {:?} ({who}): not leader ∈ ISR ⊆ replicas",
                    topic.name, p.partition, p.leader_epoch, p.leader_id, p.isr, p.replicas
                ));
            }
            if let Some(prev) = last.insert(p.partition, p.leader_epoch) {
                if p.leader_epoch < prev {
                    self.violations.push(format!(
                        "{}-{}: leader epoch went back from {prev} to {} ({who})",
                        topic.name, p.partition, p.leader_epoch
                    ));
                }
            }
        }
    }

    /// The epochs seen for a partition, with their leaders, in order.
    pub fn epochs(&self, partition: i32) -> Vec<(i32, i32)> {
        self.leaders
            .iter()
            .filter(|((p, _), _)| *p == partition)
            .map(|((_, e), l)| (*e, *l))
            .collect()
    }
}

/// Asks every broker, every 50 ms, who leads each partition of a topic
/// (DescribeTopics: the metadata it was told, or its own view where it leads),
/// and records any two leaders named for the same partition and leader epoch,
/// any leader outside its ISR, and any epoch going back in one broker's answers.
#[derive(Debug)]
pub struct LeaderWatch {
    brokers: Vec<i32>,
    history: Arc<Mutex<LeaderHistory>>,
    stop: watch::Sender<bool>,
    tasks: Vec<JoinHandle<()>>,
}

impl LeaderWatch {
    /// Starts watching `topic` on every broker of the cluster (brokers keep their
    /// ports across restarts; one that is down or paused is simply not answering).
    pub fn start(cluster: &Cluster, topic: &str) -> LeaderWatch {
        let history = Arc::new(Mutex::new(LeaderHistory::default()));
        let (stop, _) = watch::channel(false);
        let tasks = cluster
            .nodes
            .iter()
            .map(|n| {
                tokio::spawn(watch_broker(
                    n.id,
                    n.addr(),
                    topic.to_string(),
                    history.clone(),
                    stop.subscribe(),
                ))
            })
            .collect();
        LeaderWatch {
            brokers: cluster.nodes.iter().map(|n| n.id).collect(),
            history,
            stop,
            tasks,
        }
    }

    /// Stops watching and asserts no rule was broken and every broker answered.
    pub async fn finish(self) -> LeaderHistory {
        let _ = self.stop.send(true);
        for t in self.tasks {
            t.await.expect("leader watch task");
        }
        let history = self.history.lock().unwrap().clone();
        assert!(
            history.violations.is_empty(),
            "leadership rules broken:\n{}",
            history.violations.join("\n")
        );
        for id in &self.brokers {
            assert!(
                history.answers.get(id).is_some_and(|n| *n > 0),
                "broker {id} never answered the leader watch"
            );
        }
        history
    }
}

async fn watch_broker(
    id: i32,
    addr: String,
    topic: String,
    history: Arc<Mutex<LeaderHistory>>,
    mut stop: watch::Receiver<bool>,
) {
    let mut conn: Option<Connection> = None;
    // Last epoch per partition in this connection's answers: a new connection may
    // reach a new incarnation, which starts from an empty cache.
    let mut last = BTreeMap::new();
    loop {
        if *stop.borrow() {
            return;
        }
        if conn.as_ref().is_none_or(Connection::is_closed) {
            last.clear();
            conn = crate::security::connect(&addr, "e2e-leader-watch", POLL_TIMEOUT)
                .await
                .ok();
        }
        if let Some(c) = &conn {
            let body = Body::DescribeTopics(pb::DescribeTopicsRequest {
                topics: vec![topic.clone()],
            });
            match tokio::time::timeout(POLL_TIMEOUT, c.send(body)).await {
                Ok(Ok(Resp::DescribeTopics(d))) => {
                    let mut h = history.lock().unwrap();
                    for t in d.topics.iter().filter(|t| t.name == topic) {
                        h.record(id, t, &mut last);
                    }
                }
                _ => conn = None,
            }
        }
        tokio::select! {
            _ = stop.changed() => return,
            _ = tokio::time::sleep(WATCH_EVERY) => {}
        }
    }
}

// --- the load ---

/// One record the load sent, and what became of it.
#[derive(Debug)]
pub struct Sent {
    pub partition: i32,
    pub value: String,
    pub result: Result<RecordMetadata, ProduceError>,
}

/// An `acks=all` load on every partition of a topic: one worker per partition
/// sends a record every 20 ms, up to five outstanding, through the client
/// library's `Producer` (idempotent, its default), which retries across leader
/// changes. Every send and its outcome is kept, in sending order.
#[derive(Debug)]
pub struct Load {
    producer: Producer,
    stop: Arc<AtomicBool>,
    workers: Vec<JoinHandle<Vec<Sent>>>,
    acked: Arc<Vec<AtomicU64>>,
}

/// Waits for one send of the load's partition `p` and counts it if acknowledged.
async fn settle(
    p: i32,
    value: String,
    queued: Result<syncline_client::DeliveryFuture, ProduceError>,
    acked: &[AtomicU64],
) -> Sent {
    let result = match queued {
        Ok(delivery) => delivery.await,
        Err(e) => Err(e),
    };
    if result.is_ok() {
        acked[p as usize].fetch_add(1, Ordering::AcqRel);
    }
    Sent {
        partition: p,
        value,
        result,
    }
}

impl Load {
    pub fn start(cluster: &Cluster, topic: &str, partitions: i32) -> Load {
        let mut config = ProducerConfig::new(&cluster.bootstrap());
        crate::security::secure_client(&mut config.client);
        config.acks = Acks::All;
        config.linger_ms = 0;
        config.client.client_id = "e2e-load".into();
        // A request to a paused broker is abandoned after this and retried.
        config.client.request_timeout_ms = 5_000;
        config.client.retry_backoff_max_ms = 500;
        config.delivery_timeout_ms = DELIVERY_TIMEOUT_MS;
        config.enable_idempotence = Some(true);
        let producer = Producer::new(config).expect("producer");
        let stop = Arc::new(AtomicBool::new(false));
        let acked: Arc<Vec<AtomicU64>> =
            Arc::new((0..partitions).map(|_| AtomicU64::new(0)).collect());
        let workers = (0..partitions)
            .map(|p| {
                let (producer, stop, acked, topic) = (
                    producer.clone(),
                    stop.clone(),
                    acked.clone(),
                    topic.to_string(),
                );
                tokio::spawn(async move {
                    let mut sent = Vec::new();
                    let mut window = std::collections::VecDeque::new();
                    let mut seq = 0u64;
                    while !stop.load(Ordering::Acquire) {
                        let value = format!("{topic}-{p}-{seq:07}");
                        seq += 1;
                        let record =
                            ProducerRecord::new(topic.clone(), value.clone()).with_partition(p);
                        window.push_back((value, producer.enqueue(record).await));
                        if window.len() >= LOAD_WINDOW {
                            let (value, queued) = window.pop_front().expect("full");
                            sent.push(settle(p, value, queued, &acked).await);
                        }
                        tokio::time::sleep(LOAD_PACE).await;
                    }
                    for (value, queued) in window {
                        sent.push(settle(p, value, queued, &acked).await);
                    }
                    sent
                })
            })
            .collect();
        Load {
            producer,
            stop,
            workers,
            acked,
        }
    }

    /// Acknowledged records so far, per partition.
    pub fn acked(&self) -> Vec<u64> {
        self.acked
            .iter()
            .map(|a| a.load(Ordering::Acquire))
            .collect()
    }

    /// Waits until every partition has had `n` more records acknowledged than when
    /// called: the cluster carries on, on every partition.
    pub async fn wait_progress(&self, what: &str, n: u64, timeout: Duration) {
        let start = self.acked();
        let deadline = Instant::now() + timeout;
        loop {
            let now = self.acked();
            if now.iter().zip(&start).all(|(a, b)| a - b >= n) {
                return;
            }
            let progress: Vec<u64> = now.iter().zip(&start).map(|(a, b)| a - b).collect();
            assert!(
                Instant::now() < deadline,
                "timed out after {timeout:?} waiting for {n} acknowledged records per partition \
                 ({what}); got {progress:?}"
            );
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    }

    /// Stops sending, waits for the records in flight (bounded by the delivery
    /// timeout) and returns every send.
    pub async fn finish(self) -> LoadReport {
        self.stop.store(true, Ordering::Release);
        let mut sent = Vec::new();
        let bound = Duration::from_millis(DELIVERY_TIMEOUT_MS) + Duration::from_secs(10);
        for w in self.workers {
            let mut s = tokio::time::timeout(bound, w)
                .await
                .expect("a load worker did not finish within the delivery timeout")
                .expect("load worker");
            sent.append(&mut s);
        }
        self.producer.close().await;
        LoadReport { sent }
    }
}

/// Every record a [`Load`] sent, per partition in sending order.
#[derive(Debug)]
pub struct LoadReport {
    pub sent: Vec<Sent>,
}

/// What [`verify_load`] found.
#[derive(Debug, Default, Clone, Copy)]
pub struct Verified {
    /// Records read back (all partitions).
    pub records: usize,
    /// Acknowledged sends, each found at its acknowledged offset.
    pub acked: usize,
    /// Sends that failed for good.
    pub failed: usize,
    /// Extra copies of a value (a retry of a send whose first attempt was written
    /// but not acknowledged).
    pub duplicates: usize,
    /// Failed sends whose record is in the log anyway.
    pub failed_but_written: usize,
}

/// The end of a test under load: stops the load and the leader watch, and checks
/// what every fault test checks: nothing acknowledged failed for good or went
/// missing ([`verify_load`]), one leader per partition and epoch (the watch), and no
/// unclean election or offline partition.
pub async fn finish_and_verify(
    cluster: &Cluster,
    topic: &str,
    partitions: i32,
    min_isr: usize,
    load: Load,
    watch: LeaderWatch,
) -> (Verified, LeaderHistory) {
    let report = load.finish().await;
    let verified = verify_load(cluster, topic, partitions, min_isr, &report).await;
    assert_eq!(verified.failed, 0, "records failed for good: {verified:?}");
    let history = watch.finish().await;
    assert_no_unclean_or_offline(cluster);
    (verified, history)
}

/// After healing: reads every partition from its leader as a consumer and checks
/// that offsets run 0, 1, 2, ... up to the high watermark; that every
/// acknowledged record is at the offset its acknowledgement gave; that a partition's
/// acknowledged offsets grow in sending order (I4); that every acknowledgement rests
/// on at least `min_isr` replicas; that nothing unknown is in the log; and that
/// replica logs are identical below the high watermark. Counts duplicates.
pub async fn verify_load(
    cluster: &Cluster,
    topic: &str,
    partitions: i32,
    min_isr: usize,
    report: &LoadReport,
) -> Verified {
    let mut v = Verified::default();
    let mut violations = Vec::new();
    for p in 0..partitions {
        let records = read_partition(cluster, topic, p).await;
        v.records += records.len();
        for (i, (offset, _)) in records.iter().enumerate() {
            if *offset != i as i64 {
                violations.push(format!("{topic}-{p}: offset {offset} at position {i}"));
                break;
            }
        }
        let mut copies: BTreeMap<&[u8], usize> = BTreeMap::new();
        for (_, value) in &records {
            *copies.entry(value.as_slice()).or_default() += 1;
        }
        let sent: Vec<&Sent> = report.sent.iter().filter(|s| s.partition == p).collect();
        let known: BTreeSet<&[u8]> = sent.iter().map(|s| s.value.as_bytes()).collect();
        for value in copies.keys() {
            if !known.contains(value) {
                violations.push(format!(
                    "{topic}-{p}: {} was never sent",
                    String::from_utf8_lossy(value)
                ));
            }
        }
        v.duplicates += copies.values().map(|c| c - 1).sum::<usize>();
        let mut last_acked: Option<i64> = None;
        for s in sent {
            match &s.result {
                Ok(meta) => {
                    v.acked += 1;
                    let at = usize::try_from(meta.offset)
                        .ok()
                        .and_then(|o| records.get(o))
                        .map(|(_, value)| value.as_slice());
                    if meta.partition != p || at != Some(s.value.as_bytes()) {
                        violations.push(format!(
                            "acknowledged {} at {}-{} offset {} is not there (found {:?})",
                            s.value,
                            topic,
                            meta.partition,
                            meta.offset,
                            at.map(String::from_utf8_lossy)
                        ));
                    }
                    if last_acked.is_some_and(|l| meta.offset <= l) {
                        violations.push(format!(
                            "{}: acknowledged at offset {} after an earlier send was acknowledged \
                             at {}",
                            s.value,
                            meta.offset,
                            last_acked.unwrap_or_default()
                        ));
                    }
                    last_acked = Some(meta.offset);
                    if meta.acked_isr.len() < min_isr
                        || meta.acked_isr.len() > meta.replication_factor as usize
                    {
                        violations.push(format!(
                            "{} acknowledged with ISR {:?} (min.insync.replicas {min_isr}, RF {})",
                            s.value, meta.acked_isr, meta.replication_factor
                        ));
                    }
                }
                Err(_) => {
                    v.failed += 1;
                    if copies.contains_key(s.value.as_bytes()) {
                        v.failed_but_written += 1;
                    }
                }
            }
        }
    }
    assert!(
        violations.is_empty(),
        "{} violation(s), first ones:\n{}",
        violations.len(),
        violations
            .iter()
            .take(20)
            .cloned()
            .collect::<Vec<_>>()
            .join("\n")
    );
    for p in 0..partitions {
        wait_logs_identical(cluster, topic, p, Duration::from_secs(30)).await;
    }
    v
}

/// Every record of a partition, read from its current leader as a consumer
/// (retrying while leadership settles).
async fn read_partition(cluster: &Cluster, topic: &str, partition: i32) -> Vec<(i64, Vec<u8>)> {
    let timeout = Duration::from_secs(30);
    let deadline = Instant::now() + timeout;
    loop {
        let attempt = async {
            let meta = any_metadata(cluster, topic).await?;
            let leader = meta
                .iter()
                .find(|p| p.partition == partition)
                .map(|p| p.leader_id)
                .filter(|l| *l > 0)
                .ok_or_else(|| anyhow::anyhow!("no leader"))?;
            let conn =
                crate::security::connect(&cluster.node(leader).addr(), "e2e-read", POLL_TIMEOUT)
                    .await?;
            read_all(&conn, topic, partition, 0).await
        };
        match tokio::time::timeout(timeout, attempt).await {
            Ok(Ok(records)) => return records,
            other => assert!(
                Instant::now() < deadline,
                "cannot read {topic}-{partition} within {timeout:?}: {other:?}"
            ),
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn view(
        partition: i32,
        leader: i32,
        epoch: i32,
        isr: &[i32],
        from_leader: bool,
    ) -> pb::PartitionDescription {
        pb::PartitionDescription {
            partition,
            leader_id: leader,
            leader_epoch: epoch,
            replicas: vec![1, 2, 3],
            isr: isr.to_vec(),
            from_leader,
            ..Default::default()
        }
    }

    fn topic(partitions: Vec<pb::PartitionDescription>) -> pb::TopicDescription {
        pb::TopicDescription {
            name: "t".into(),
            partitions,
            ..Default::default()
        }
    }

    #[test]
    fn a_leader_change_in_a_new_epoch_is_fine() {
        let mut h = LeaderHistory::default();
        let (mut last2, mut last3) = (BTreeMap::new(), BTreeMap::new());
        h.record(2, &topic(vec![view(0, 2, 0, &[2, 3, 1], true)]), &mut last2);
        h.record(
            3,
            &topic(vec![view(0, 2, 0, &[2, 3, 1], false)]),
            &mut last3,
        );
        // Broker 2 frozen, still claiming epoch 0; broker 3 leads in epoch 1.
        h.record(3, &topic(vec![view(0, 3, 1, &[3, 1], true)]), &mut last3);
        h.record(2, &topic(vec![view(0, 2, 0, &[2, 3, 1], true)]), &mut last2);
        assert!(h.violations.is_empty(), "{:?}", h.violations);
        assert_eq!(h.epochs(0), vec![(0, 2), (1, 3)]);
        assert_eq!(h.claims.get(&(0, 1)), Some(&3));
        assert_eq!(h.answers, BTreeMap::from([(2, 2), (3, 2)]));
    }

    #[test]
    fn two_leaders_in_one_epoch_are_caught() {
        let mut h = LeaderHistory::default();
        h.record(
            2,
            &topic(vec![view(0, 2, 4, &[2, 3], true)]),
            &mut BTreeMap::new(),
        );
        h.record(
            3,
            &topic(vec![view(0, 3, 4, &[3, 2], true)]),
            &mut BTreeMap::new(),
        );
        assert_eq!(h.violations.len(), 1, "{:?}", h.violations);
        assert!(
            h.violations[0].contains("two leaders"),
            "{:?}",
            h.violations
        );
    }

    #[test]
    fn a_metadata_view_disagreeing_with_a_claim_is_caught() {
        let mut h = LeaderHistory::default();
        h.record(
            1,
            &topic(vec![view(5, 1, 2, &[1, 2], false)]),
            &mut BTreeMap::new(),
        );
        h.record(
            2,
            &topic(vec![view(5, 2, 2, &[1, 2], true)]),
            &mut BTreeMap::new(),
        );
        assert_eq!(h.violations.len(), 1, "{:?}", h.violations);
    }

    #[test]
    fn a_leader_outside_its_isr_and_an_epoch_going_back_are_caught() {
        let mut h = LeaderHistory::default();
        let mut last = BTreeMap::new();
        h.record(1, &topic(vec![view(0, 2, 3, &[1, 3], false)]), &mut last);
        assert_eq!(h.violations.len(), 1, "{:?}", h.violations);
        h.record(1, &topic(vec![view(1, 3, 7, &[3], false)]), &mut last);
        h.record(1, &topic(vec![view(1, 3, 6, &[3], false)]), &mut last);
        assert_eq!(h.violations.len(), 2, "{:?}", h.violations);
        assert!(h.violations[1].contains("went back"), "{:?}", h.violations);
        // An offline partition (no leader) is not a leader outside its ISR.
        h.record(1, &topic(vec![view(2, -1, 1, &[3], false)]), &mut last);
        assert_eq!(h.violations.len(), 2, "{:?}", h.violations);
    }
}
