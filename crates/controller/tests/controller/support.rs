//! A cluster driven the way the shell drives the controller: decide, "append" (to a
//! Vec standing in for the metadata log), replay, answer; invariants checked after
//! every operation.

use std::collections::HashMap;

use syncline_controller::{
    Controller, ControllerConfig, ControllerResult, MetadataImage, PartitionRegistration,
};
use syncline_proto::pb;
use tokio::time::{Duration, Instant};

pub(crate) const CLUSTER_ID: &str = "test-cluster";

pub(crate) struct Cluster {
    pub(crate) c: Controller,
    pub(crate) log: Vec<pb::MetadataRecord>,
    pub(crate) t0: Instant,
}

impl Cluster {
    pub(crate) fn new() -> Self {
        Self::with_config(ControllerConfig::new(0, CLUSTER_ID))
    }

    pub(crate) fn with_config(config: ControllerConfig) -> Self {
        let t0 = Instant::now();
        let c = Controller::new(config, MetadataImage::new(), t0).expect("valid config");
        let mut cluster = Cluster {
            c,
            log: Vec::new(),
            t0,
        };
        let start = cluster.c.start();
        cluster.commit(start);
        cluster
    }

    /// A cluster with `ids` registered and unfenced at t0.
    pub(crate) fn with_brokers(ids: &[i32]) -> Self {
        let mut cluster = Self::new();
        cluster.add_brokers(ids);
        cluster
    }

    pub(crate) fn add_brokers(&mut self, ids: &[i32]) {
        for &id in ids {
            self.register(id, 1, "");
            let hb = self.heartbeat(id, 0);
            assert!(!hb.is_fenced, "broker {id} not unfenced: {hb:?}");
        }
    }

    pub(crate) fn at(&self, ms: u64) -> Instant {
        self.t0 + Duration::from_millis(ms)
    }

    /// Steps 2-4 of the contract: append, replay, check, answer.
    pub(crate) fn commit<T>(&mut self, r: ControllerResult<T>) -> T {
        let first = self.c.next_offset();
        assert_eq!(first, i64::try_from(self.log.len()).unwrap());
        self.log.extend(r.records.iter().cloned());
        self.c.replay_all(first, &r.records).expect("records apply");
        self.c.image().check_invariants().expect("invariants hold");
        r.response
    }

    pub(crate) fn registration(
        id: i32,
        incarnation: u8,
        rack: &str,
    ) -> pb::BrokerRegistrationRequest {
        pb::BrokerRegistrationRequest {
            broker_id: id,
            cluster_id: CLUSTER_ID.to_owned(),
            incarnation_id: vec![incarnation; 16].into(),
            endpoint: Some(pb::BrokerEndpoint {
                node_id: id,
                host: format!("broker-{id}"),
                port: 9092,
                rack: rack.to_owned(),
            }),
            metrics_address: format!("broker-{id}:9100"),
            listeners: vec![pb::ListenerEndpoint {
                name: "EXTERNAL".to_owned(),
                host: "127.0.0.1".to_owned(),
                port: 19_000 + id,
            }],
        }
    }

    /// Registers at t0; returns the broker epoch.
    pub(crate) fn register(&mut self, id: i32, incarnation: u8, rack: &str) -> i64 {
        self.register_at(id, incarnation, rack, 0)
    }

    pub(crate) fn register_at(&mut self, id: i32, incarnation: u8, rack: &str, ms: u64) -> i64 {
        let r = self
            .c
            .register_broker(&Self::registration(id, incarnation, rack), self.at(ms));
        let resp = self.commit(r);
        assert_eq!(resp.error_code, pb::ErrorCode::None as i32, "{resp:?}");
        resp.broker_epoch
    }

    pub(crate) fn epoch(&self, id: i32) -> i64 {
        self.c.image().broker(id).expect("registered").epoch
    }

    /// A heartbeat from a broker that has applied everything.
    pub(crate) fn heartbeat(&mut self, id: i32, ms: u64) -> pb::BrokerHeartbeatResponse {
        let req = self.heartbeat_req(id);
        self.send_heartbeat(&req, ms)
    }

    pub(crate) fn heartbeat_req(&self, id: i32) -> pb::BrokerHeartbeatRequest {
        pb::BrokerHeartbeatRequest {
            broker_id: id,
            broker_epoch: self.epoch(id),
            current_metadata_offset: self.c.image().last_applied_offset(),
            want_fence: false,
            want_shutdown: false,
        }
    }

    pub(crate) fn send_heartbeat(
        &mut self,
        req: &pb::BrokerHeartbeatRequest,
        ms: u64,
    ) -> pb::BrokerHeartbeatResponse {
        let r = self.c.heartbeat(req, self.at(ms));
        self.commit(r)
    }

    pub(crate) fn tick(&mut self, ms: u64) -> Vec<i32> {
        let r = self.c.tick(self.at(ms));
        self.commit(r)
    }

    pub(crate) fn fence(&mut self, id: i32) {
        let req = pb::BrokerHeartbeatRequest {
            want_fence: true,
            ..self.heartbeat_req(id)
        };
        let resp = self.send_heartbeat(&req, 0);
        assert!(resp.is_fenced);
    }

    pub(crate) fn topic(name: &str, partitions: i32, rf: i32) -> pb::CreatableTopic {
        pb::CreatableTopic {
            name: name.to_owned(),
            num_partitions: partitions,
            replication_factor: rf,
            configs: HashMap::new(),
        }
    }

    pub(crate) fn create_topics(
        &mut self,
        topics: Vec<pb::CreatableTopic>,
    ) -> Vec<pb::CreatableTopicResult> {
        let req = pb::CreateTopicsRequest {
            topics,
            timeout_ms: 30_000,
            validate_only: false,
            forwarded: false,
            auto_create: false,
        };
        let r = self.c.create_topics(&req);
        self.commit(r).topics
    }

    /// Creates a topic that must succeed.
    pub(crate) fn create(&mut self, name: &str, partitions: i32, rf: i32) {
        let result = self.create_topics(vec![Self::topic(name, partitions, rf)]);
        assert_eq!(
            result[0].error_code,
            pb::ErrorCode::None as i32,
            "{result:?}"
        );
    }

    pub(crate) fn create_with_configs(
        &mut self,
        name: &str,
        partitions: i32,
        rf: i32,
        configs: &[(&str, &str)],
    ) {
        let mut t = Self::topic(name, partitions, rf);
        t.configs = configs
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect();
        let result = self.create_topics(vec![t]);
        assert_eq!(
            result[0].error_code,
            pb::ErrorCode::None as i32,
            "{result:?}"
        );
    }

    pub(crate) fn partition(&self, topic: &str, partition: i32) -> PartitionRegistration {
        self.c
            .image()
            .partition(topic, partition)
            .expect("partition exists")
            .clone()
    }

    /// The leader of `topic-partition` proposes the ISR `members` (AlterPartition,
    /// with the epochs it has), committed; the partition's answer.
    pub(crate) fn propose_isr(
        &mut self,
        topic: &str,
        partition: i32,
        members: &[i32],
    ) -> pb::AlterPartitionPartitionResponse {
        let p = self.partition(topic, partition);
        let req = pb::AlterPartitionRequest {
            broker_id: p.leader,
            broker_epoch: self.epoch(p.leader),
            topics: vec![pb::AlterPartitionTopic {
                name: topic.to_owned(),
                partitions: vec![pb::AlterPartitionPartition {
                    partition,
                    leader_epoch: p.leader_epoch,
                    new_isr_with_epochs: members
                        .iter()
                        .map(|&id| pb::BrokerState {
                            broker_id: id,
                            broker_epoch: self.epoch(id),
                        })
                        .collect(),
                    partition_epoch: p.partition_epoch,
                }],
            }],
        };
        let r = self.c.alter_partition(&req);
        let mut resp = self.commit(r);
        // The shell's next decision after every AlterPartition.
        let completed = self.c.complete_reassignments();
        self.commit(completed);
        resp.topics.remove(0).partitions.remove(0)
    }

    /// Replays the whole log into a fresh image.
    pub(crate) fn replayed(&self) -> MetadataImage {
        let mut image = MetadataImage::new();
        for (offset, record) in (0..).zip(&self.log) {
            image.apply(offset, record).expect("replay applies");
        }
        image
    }

    /// The whole log replays to the live image, and the image goes through
    /// its snapshot unchanged.
    pub(crate) fn assert_replays_and_snapshots(&self) {
        assert_eq!(&self.replayed(), self.c.image());
        let snapshot = self.c.image().to_snapshot();
        let restored = MetadataImage::from_snapshot(&snapshot).unwrap();
        assert_eq!(&restored, self.c.image());
        assert_eq!(restored.to_snapshot(), snapshot);
    }
}

/// A partition state literal: replicas, ISR, leader, leader epoch, partition epoch.
pub(crate) fn state(
    replicas: &[i32],
    isr: &[i32],
    leader: i32,
    leader_epoch: i32,
    partition_epoch: i32,
) -> PartitionRegistration {
    PartitionRegistration {
        replicas: replicas.to_vec(),
        isr: isr.to_vec(),
        leader,
        leader_epoch,
        partition_epoch,
        adding_replicas: Vec::new(),
        removing_replicas: Vec::new(),
    }
}
