//! Requests bound for the controller, decoded from frames as the broker's
//! connection loop decodes them, run through the controller's decisions (its
//! validation of every field) over a three-broker cluster, as the broker's
//! controller host does: decide, then replay the records the decision returns.
//!
//! Input: a sequence of steps, each `[advance_ms: u8][len: u16 BE][len bytes]`,
//! the bytes being one request frame body; time moves by `advance_ms * 100` ms
//! before each step and a tick runs after it. Checked: the controller's own records
//! always replay (through a protobuf round trip, as the quorum carries them), the
//! image's invariants hold after every step, and replaying the whole log from
//! nothing gives the same image.
#![no_main]

use libfuzzer_sys::fuzz_target;
use prost::Message;
use syncline_controller::{Controller, ControllerConfig, ControllerResult, MetadataImage};
use syncline_proto::{frame, pb};
use tokio::time::{Duration, Instant};

const CLUSTER: &str = "fuzz-cluster";

struct Cluster {
    c: Controller,
    log: Vec<pb::MetadataRecord>,
}

impl Cluster {
    fn commit<T>(&mut self, r: ControllerResult<T>) -> T {
        let first = self.c.next_offset();
        for (offset, record) in (first..).zip(&r.records) {
            let carried = pb::MetadataRecord::decode(frame::encode(record)).expect("decodes");
            assert_eq!(&carried, record);
            if let Err(e) = self.c.replay(offset, &carried) {
                panic!("the controller's own record {record:?} does not replay: {e}");
            }
            self.log.push(carried);
        }
        if let Err(e) = self.c.image().check_invariants() {
            panic!("invariant broken: {e}");
        }
        r.response
    }
}

fn start(t0: Instant) -> Cluster {
    let c = Controller::new(ControllerConfig::new(0, CLUSTER), MetadataImage::new(), t0)
        .expect("the default config is valid");
    let mut cluster = Cluster { c, log: Vec::new() };
    let r = cluster.c.start();
    cluster.commit(r);
    for id in 1..=3 {
        let reg = pb::BrokerRegistrationRequest {
            broker_id: id,
            cluster_id: CLUSTER.into(),
            incarnation_id: vec![id as u8; 16].into(),
            endpoint: Some(pb::BrokerEndpoint {
                node_id: id,
                host: "localhost".into(),
                port: 9090 + id,
                rack: format!("r{}", id % 2),
            }),
            metrics_address: String::new(),
            listeners: vec![],
        };
        let r = cluster.c.register_broker(&reg, t0);
        let epoch = cluster.commit(r).broker_epoch;
        let hb = pb::BrokerHeartbeatRequest {
            broker_id: id,
            broker_epoch: epoch,
            current_metadata_offset: cluster.c.image().last_applied_offset(),
            want_fence: false,
            want_shutdown: false,
        };
        let r = cluster.c.heartbeat(&hb, t0);
        cluster.commit(r);
    }
    cluster
}

fuzz_target!(|data: &[u8]| {
    let t0 = Instant::now();
    let mut now = t0;
    let mut cluster = start(t0);
    let mut rest = data;
    while let [advance, hi, lo, more @ ..] = rest {
        let len = usize::from(u16::from_be_bytes([*hi, *lo])).min(more.len());
        let (body, after) = more.split_at(len);
        rest = after;
        now += Duration::from_millis(u64::from(*advance) * 100);
        let Ok(req) = frame::decode_request(bytes::Bytes::copy_from_slice(body)) else {
            continue;
        };
        use pb::request::Body;
        match req.body {
            Some(Body::BrokerRegistration(r)) => {
                let d = cluster.c.register_broker(&r, now);
                cluster.commit(d);
            }
            Some(Body::BrokerHeartbeat(r)) => {
                let d = cluster.c.heartbeat(&r, now);
                cluster.commit(d);
            }
            Some(Body::CreateTopics(r)) => {
                let d = cluster.c.create_topics(&r);
                cluster.commit(d);
            }
            Some(Body::AlterPartition(r)) => {
                let d = cluster.c.alter_partition(&r);
                cluster.commit(d);
                let d = cluster.c.complete_reassignments();
                cluster.commit(d);
            }
            Some(Body::AlterTopic(r)) => {
                let d = cluster.c.alter_topic(&r);
                cluster.commit(d);
            }
            Some(Body::ElectLeaders(r)) => {
                let d = cluster.c.elect_leaders(&r);
                cluster.commit(d);
            }
            Some(Body::AlterReassignments(r)) => {
                let d = cluster.c.alter_reassignments(&r);
                cluster.commit(d);
            }
            Some(Body::DeleteTopics(r)) => {
                let d = cluster.c.delete_topics(&r);
                cluster.commit(d);
            }
            Some(Body::AlterClientQuotas(r)) => {
                let d = cluster.c.alter_client_quotas(&r);
                cluster.commit(d);
            }
            _ => {}
        }
        let d = cluster.c.tick(now);
        cluster.commit(d);
    }
    let d = cluster.c.rebalance_leaders(10);
    cluster.commit(d);
    let mut image = MetadataImage::new();
    for (offset, record) in (0..).zip(&cluster.log) {
        image
            .apply(offset, record)
            .expect("the log replays from nothing");
    }
    assert_eq!(&image, cluster.c.image(), "a replay gives another image");
});
