//! An in-process cluster for integration tests: brokers on loopback port 0, data in
//! a temporary directory, all stopped when the cluster is dropped. Faster than
//! processes, and the tests can look inside the brokers.

use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use syncline_broker::config::TruncationRule;
use syncline_broker::net::{Network, Tcp};
use syncline_broker::partition::Partition;
use syncline_broker::{BrokerConfig, BrokerHandle};
use syncline_client::Connection;
use syncline_proto::batch::BatchBuilder;
use syncline_proto::pb::{self, request::Body, response::Body as Resp};
use tokio::time::Instant;

#[derive(Debug)]
pub struct TestCluster {
    pub dir: tempfile::TempDir,
    pub brokers: Vec<Option<BrokerHandle>>,
    pub addrs: Vec<String>,
    extra: String,
    options: Options,
    /// Set for a secure cluster ([`crate::security::enabled`]): one SASL_SSL
    /// listener per broker with mutual TLS, used by brokers and clients alike.
    pub security: Option<crate::security::Security>,
}

/// How to build an in-process cluster beyond its TOML.
#[derive(Debug, Clone, Default)]
pub struct Options {
    /// Route broker-to-broker traffic through a fault-injecting network.
    pub faults: Option<Arc<crate::faults::Faults>>,
    /// The follower truncation rule (tests compare the legacy one).
    pub truncation_rule: TruncationRule,
    /// Put broker N in rack `rN`.
    pub racks: bool,
    /// Brokers `1..=voters` are the controller voters; 0 means broker 1 alone.
    pub voters: usize,
    /// Serve the internal APIs to any connection (the test-only switch that
    /// shows what broker authentication prevents).
    pub unauthenticated_internal_apis: bool,
}

/// Broker `id`'s config: its listener `addr`, the controller quorum of
/// `voters` (brokers 1..=voters.len()), its log dir under `dir`, and `extra`
/// TOML lines.
pub fn config_text(
    id: i32,
    addr: &str,
    voters: &[String],
    dir: &std::path::Path,
    extra: &str,
    security: Option<&crate::security::Security>,
) -> String {
    let roles = if id as usize <= voters.len() {
        "broker,controller"
    } else {
        "broker"
    };
    let quorum: Vec<String> = (1..)
        .zip(voters)
        .map(|(id, addr)| format!("{id}@{addr}"))
        .collect();
    let listeners = match security {
        None => format!("listeners = \"{addr}\"\n"),
        Some(s) => format!(
            "listeners = \"SECURE://{addr}\"\nlistener_security_protocol_map = \"SECURE:SASL_SSL\"\n{}",
            s.broker_tls()
        ),
    };
    format!(
        "node_id = {id}\n{listeners}log_dirs = \"{}\"\nprocess_roles = \"{roles}\"\n\
         controller_quorum_voters = \"{}\"\n{extra}\n",
        dir.join(format!("broker-{id}")).display(),
        quorum.join(",")
    )
}

impl TestCluster {
    /// Starts `n` brokers (broker 1 hosts the controller) with `extra` TOML lines in
    /// every config, and waits until all are registered and unfenced.
    pub async fn start(n: usize, extra: &str) -> TestCluster {
        Self::start_with(n, extra, Options::default()).await
    }

    /// As [`TestCluster::start`], with [`Options`].
    pub async fn start_with(n: usize, extra: &str, options: Options) -> TestCluster {
        init_tracing();
        let dir = tempfile::tempdir().unwrap();
        let security = crate::security::enabled()
            .then(|| crate::security::Security::create(&dir.path().join("secure")));
        if let Some(s) = &security {
            crate::security::register(s);
        }
        let mut listeners = Vec::new();
        let mut addrs = Vec::new();
        for i in 0..n {
            let l = Tcp.bind("127.0.0.1:0").await.unwrap();
            let addr = l.local_addr().unwrap().to_string();
            if let Some(f) = &options.faults {
                f.register(i as i32 + 1, &addr);
            }
            addrs.push(addr);
            listeners.push(l);
        }
        let mut cluster = TestCluster {
            dir,
            brokers: Vec::new(),
            addrs,
            extra: extra.to_string(),
            options,
            security,
        };
        for (i, l) in listeners.into_iter().enumerate() {
            let h = cluster.start_broker_on((i + 1) as i32, l).await;
            cluster.brokers.push(Some(h));
        }
        cluster.wait_unfenced(n).await;
        cluster
    }

    fn config(&self, id: i32) -> BrokerConfig {
        let text = config_text(
            id,
            &self.addrs[id as usize - 1],
            &self.addrs[..self.options.voters.max(1)],
            self.dir.path(),
            &self.extra,
            self.security.as_ref(),
        );
        let text = if self.options.racks {
            format!("{text}broker_rack = \"r{id}\"\n")
        } else {
            text
        };
        let mut config = BrokerConfig::parse(&text).unwrap();
        config.truncation_rule = self.options.truncation_rule;
        config.unauthenticated_internal_apis = self.options.unauthenticated_internal_apis;
        config
    }

    async fn start_broker_on(
        &self,
        id: i32,
        l: Box<dyn syncline_broker::net::Listener>,
    ) -> BrokerHandle {
        let network: Arc<dyn Network> = match &self.options.faults {
            Some(f) => f.network(id),
            None => Arc::new(Tcp),
        };
        syncline_broker::start_on(self.config(id), network, vec![l])
            .await
            .unwrap()
    }

    /// Stops broker `id` cleanly.
    pub async fn stop(&mut self, id: i32) {
        if let Some(h) = self.brokers[id as usize - 1].take() {
            h.shutdown().await;
        }
    }

    /// Restarts broker `id` on its old address.
    pub async fn restart(&mut self, id: i32) {
        self.stop(id).await;
        self.start_stopped(id).await;
    }

    /// Starts broker `id` again after [`TestCluster::stop`].
    pub async fn start_stopped(&mut self, id: i32) {
        assert!(
            self.brokers[id as usize - 1].is_none(),
            "broker {id} is running"
        );
        let addr = self.addrs[id as usize - 1].clone();
        let deadline = Instant::now() + Duration::from_secs(10);
        let l = loop {
            match Tcp.bind(&addr).await {
                Ok(l) => break l,
                Err(e) if Instant::now() < deadline => {
                    let _ = e;
                    tokio::time::sleep(Duration::from_millis(50)).await;
                }
                Err(e) => panic!("cannot rebind {addr}: {e}"),
            }
        };
        let h = self.start_broker_on(id, l).await;
        self.brokers[id as usize - 1] = Some(h);
    }

    /// Broker `id`'s log directory.
    pub fn log_dir(&self, id: i32) -> std::path::PathBuf {
        self.dir.path().join(format!("broker-{id}"))
    }

    /// Broker `id`'s replica of a partition, if the broker runs and has it yet.
    pub fn try_replica(&self, id: i32, topic: &str, partition: i32) -> Option<Arc<Partition>> {
        self.brokers[id as usize - 1]
            .as_ref()?
            .broker()
            .replica_manager()
            .partition(topic, partition)
    }

    /// Broker `id`'s replica of a partition.
    pub fn replica(&self, id: i32, topic: &str, partition: i32) -> Arc<Partition> {
        self.broker(id)
            .broker()
            .replica_manager()
            .partition(topic, partition)
            .unwrap_or_else(|| panic!("broker {id} hosts no replica of {topic}-{partition}"))
    }

    /// One series of broker `id`'s metrics, by its exact name with labels (as
    /// `parse_metrics` gives it); 0 while the broker has not exported it.
    pub fn metric(&self, id: i32, series: &str) -> f64 {
        let text = self.broker(id).broker().metrics().encode();
        crate::parse_metrics(&text)
            .expect("a broker's metrics parse")
            .into_iter()
            .find(|(n, _)| n == series)
            .map_or(0.0, |(_, v)| v)
    }

    pub fn broker(&self, id: i32) -> &BrokerHandle {
        self.brokers[id as usize - 1]
            .as_ref()
            .expect("broker running")
    }

    /// The brokers' credentials directory (the default: beside their log dirs).
    pub fn credentials_dir(&self) -> std::path::PathBuf {
        self.dir.path().join("credentials")
    }

    pub async fn connect(&self, id: i32) -> Connection {
        crate::security::connect(&self.addrs[id as usize - 1], "test", Duration::from_secs(5))
            .await
            .unwrap()
    }

    async fn wait_unfenced(&self, n: usize) {
        let addr = self.addrs[0].clone();
        crate::wait_for("brokers to register", Duration::from_secs(20), || {
            let addr = addr.clone();
            async move {
                let Ok(conn) =
                    crate::security::connect(&addr, "test", Duration::from_secs(5)).await
                else {
                    return false;
                };
                match conn
                    .send(Body::DescribeCluster(pb::DescribeClusterRequest {}))
                    .await
                {
                    Ok(Resp::DescribeCluster(r)) => {
                        r.brokers.iter().filter(|b| !b.fenced).count() == n
                    }
                    _ => false,
                }
            }
        })
        .await;
    }

    pub async fn create_topic(
        &self,
        name: &str,
        partitions: i32,
        rf: i32,
        configs: &[(&str, &str)],
    ) {
        let conn = self.connect(1).await;
        let resp = conn
            .send(Body::CreateTopics(pb::CreateTopicsRequest {
                topics: vec![pb::CreatableTopic {
                    name: name.into(),
                    num_partitions: partitions,
                    replication_factor: rf,
                    configs: configs
                        .iter()
                        .map(|(k, v)| (k.to_string(), v.to_string()))
                        .collect(),
                }],
                timeout_ms: 10_000,
                validate_only: false,
                forwarded: false,
                auto_create: false,
            }))
            .await
            .unwrap();
        let Resp::CreateTopics(r) = resp else {
            panic!("unexpected {resp:?}")
        };
        assert_eq!(r.topics[0].error_code, 0, "{:?}", r.topics[0]);
    }

    /// The partition's leader once it has taken its role (CreateTopics
    /// answers when broker 1 knows the leaders; the leader itself may apply
    /// the announcement a little later). Panics after 10 s.
    pub async fn leader_in_role(&self, topic: &str, partition: i32) -> i32 {
        let deadline = Instant::now() + Duration::from_secs(10);
        loop {
            let leader = self.partition_metadata(1, topic, partition).await.leader_id;
            if leader > 0
                && self
                    .try_replica(leader, topic, partition)
                    .is_some_and(|p| p.is_leader())
            {
                return leader;
            }
            assert!(
                Instant::now() < deadline,
                "{topic}-{partition} has no leader in its role after 10 s"
            );
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    }

    /// The partition's state as broker `via` knows it.
    pub async fn partition_metadata(
        &self,
        via: i32,
        topic: &str,
        partition: i32,
    ) -> pb::PartitionMetadata {
        let conn = self.connect(via).await;
        let Resp::Metadata(m) = conn
            .send(Body::Metadata(pb::MetadataRequest {
                topics: vec![topic.into()],
                ..Default::default()
            }))
            .await
            .unwrap()
        else {
            panic!("unexpected response")
        };
        m.topics[0]
            .partitions
            .iter()
            .find(|p| p.partition == partition)
            .cloned()
            .expect("partition")
    }
}

/// One batch of `values`.
pub fn batch(values: &[&[u8]]) -> Bytes {
    let mut b = BatchBuilder::new(1_700_000_000_000);
    for v in values {
        b.push(1_700_000_000_000, None, Some(v), &[]);
    }
    b.finish()
}

pub fn produce_request(topic: &str, partition: i32, acks: i32, records: Bytes) -> Body {
    Body::Produce(pb::ProduceRequest {
        acks,
        timeout_ms: 10_000,
        topics: vec![pb::ProduceTopic {
            name: topic.into(),
            partitions: vec![pb::ProducePartition {
                partition,
                current_leader_epoch: None,
                records,
            }],
        }],
    })
}

pub async fn produce(
    conn: &Connection,
    topic: &str,
    partition: i32,
    acks: i32,
    records: Bytes,
) -> pb::ProducePartitionResponse {
    let resp = conn
        .send(produce_request(topic, partition, acks, records))
        .await
        .unwrap();
    let Resp::Produce(r) = resp else {
        panic!("unexpected {resp:?}")
    };
    r.topics[0].partitions[0].clone()
}

pub fn fetch_request(
    topic: &str,
    partition: i32,
    offset: i64,
    max_wait_ms: i32,
    min_bytes: i32,
) -> Body {
    Body::Fetch(pb::FetchRequest {
        replica_id: -1,
        replica_epoch: -1,
        max_wait_ms,
        min_bytes,
        max_bytes: 10 << 20,
        session_epoch: -1,
        topics: vec![pb::FetchTopic {
            topic: topic.into(),
            partitions: vec![pb::FetchPartition {
                partition,
                fetch_offset: offset,
                partition_max_bytes: 1 << 20,
                ..Default::default()
            }],
        }],
        ..Default::default()
    })
}

pub async fn fetch(
    conn: &Connection,
    topic: &str,
    partition: i32,
    offset: i64,
) -> pb::PartitionData {
    let resp = conn
        .send(fetch_request(topic, partition, offset, 0, 0))
        .await
        .unwrap();
    let Resp::Fetch(r) = resp else {
        panic!("unexpected {resp:?}")
    };
    r.responses[0].partitions[0].clone()
}

/// Every record value in `records` with its offset.
pub fn values(records: &[u8]) -> Vec<(i64, Vec<u8>)> {
    syncline_proto::batch::split(records)
        .flat_map(|b| {
            let (_, bytes) = b.unwrap();
            syncline_proto::batch::records(bytes)
                .unwrap()
                .iter()
                .map(|r| {
                    let r = r.unwrap();
                    (r.offset, r.view.value.unwrap_or_default().to_vec())
                })
                .collect::<Vec<_>>()
        })
        .collect()
}

/// Logs to the test's output (shown for failing tests); `RUST_LOG` filters.
pub fn init_tracing() {
    static ONCE: std::sync::Once = std::sync::Once::new();
    ONCE.call_once(|| {
        // As synclined: the Raft library's chatter off unless RUST_LOG names it.
        let directives = std::env::var("RUST_LOG").unwrap_or_else(|_| "info".into());
        let directives = if directives.contains("openraft") {
            directives
        } else {
            format!("{directives},openraft=error")
        };
        let filter = tracing_subscriber::EnvFilter::new(directives);
        let _ = tracing_subscriber::fmt()
            .with_env_filter(filter)
            .with_test_writer()
            .try_init();
    });
}
