//! Property: any sequence of operations, committed and applied one at a time, keeps
//! the invariants after every record, and replaying the whole log into a fresh image
//! gives the live image.

use std::collections::BTreeMap;

use proptest::prelude::*;
use prost::Message;
use syncline_controller::{Controller, ControllerConfig, ControllerResult, MetadataImage};
use syncline_proto::pb::{self, metadata_record::Record};
use syncline_proto::{ErrorCode, TopicPartition, NO_LEADER};

use crate::support::{Cluster, CLUSTER_ID};

#[derive(Debug, Clone)]
enum Op {
    Register {
        id: i32,
        new_incarnation: bool,
    },
    Heartbeat {
        id: i32,
        lagging: bool,
        want_fence: bool,
        want_shutdown: bool,
    },
    Tick {
        advance_ms: u64,
    },
    Create {
        partitions: i32,
        rf: i32,
        unclean: bool,
    },
    Alter {
        pick: usize,
        keep: u8,
        from_leader: bool,
        stale: bool,
        epochs_ok: bool,
    },
    RestartController {
        unclean_default: bool,
    },
    /// A client quota of user `user` (0: none, 1: the default, else named)
    /// and client id `client` (likewise) set to `value`, or removed (`None`).
    Quota {
        user: u8,
        client: u8,
        key: usize,
        value: Option<u32>,
    },
}

fn op() -> impl Strategy<Value = Op> {
    prop_oneof![
        3 => (1..=5i32, any::<bool>())
            .prop_map(|(id, new_incarnation)| Op::Register { id, new_incarnation }),
        6 => (1..=5i32, prop::bool::weighted(0.2), prop::bool::weighted(0.1), prop::bool::weighted(0.1))
            .prop_map(|(id, lagging, want_fence, want_shutdown)| Op::Heartbeat { id, lagging, want_fence, want_shutdown }),
        3 => (0..6_000u64).prop_map(|advance_ms| Op::Tick { advance_ms }),
        2 => (1..=4i32, 1..=3i32, any::<bool>())
            .prop_map(|(partitions, rf, unclean)| Op::Create { partitions, rf, unclean }),
        5 => (any::<usize>(), any::<u8>(), prop::bool::weighted(0.8), prop::bool::weighted(0.2), prop::bool::weighted(0.9))
            .prop_map(|(pick, keep, from_leader, stale, epochs_ok)| Op::Alter { pick, keep, from_leader, stale, epochs_ok }),
        1 => any::<bool>().prop_map(|unclean_default| Op::RestartController { unclean_default }),
        2 => (0..3u8, 0..3u8, 0..3usize, prop::option::of(0..3u32))
            .prop_map(|(user, client, key, value)| Op::Quota { user, client, key, value }),
    ]
}

/// What the whole history has shown: per partition the last epochs, and the leader of
/// every (partition, leader epoch).
#[derive(Default)]
struct History {
    epochs: BTreeMap<TopicPartition, (i32, i32)>,
    leaders: BTreeMap<(TopicPartition, i32), i32>,
}

impl History {
    fn check(&mut self, records: &[pb::MetadataRecord]) {
        for r in records {
            let Some(Record::Partition(p)) = &r.record else {
                continue;
            };
            let tp = TopicPartition::new(&p.topic, p.partition);
            if let Some(&(le, pe)) = self.epochs.get(&tp) {
                assert!(
                    p.leader_epoch >= le,
                    "{tp}: leader epoch went from {le} to {}",
                    p.leader_epoch
                );
                assert!(
                    p.partition_epoch > pe,
                    "{tp}: partition epoch went from {pe} to {}",
                    p.partition_epoch
                );
            }
            self.epochs
                .insert(tp.clone(), (p.leader_epoch, p.partition_epoch));
            if p.leader != NO_LEADER {
                let first = *self
                    .leaders
                    .entry((tp.clone(), p.leader_epoch))
                    .or_insert(p.leader);
                assert_eq!(
                    first, p.leader,
                    "{tp}: two leaders in epoch {}",
                    p.leader_epoch
                );
            }
        }
    }
}

struct Run {
    cl: Cluster,
    now_ms: u64,
    incarnations: BTreeMap<i32, u8>,
    topics: usize,
    history: History,
}

impl Run {
    fn commit<T>(&mut self, r: ControllerResult<T>) -> T {
        self.history.check(&r.records);
        self.cl.commit(r)
    }

    fn apply(&mut self, op: &Op) {
        let now = self.cl.at(self.now_ms);
        match *op {
            Op::Register {
                id,
                new_incarnation,
            } => {
                let incarnation = self.incarnations.entry(id).or_insert(0);
                if new_incarnation || *incarnation == 0 {
                    *incarnation = incarnation.wrapping_add(1).max(1);
                }
                let req = Cluster::registration(id, *incarnation, ["a", "b", ""][id as usize % 3]);
                let r = self.cl.c.register_broker(&req, now);
                let resp = self.commit(r);
                assert_eq!(ErrorCode::from_wire(resp.error_code), ErrorCode::None);
            }
            Op::Heartbeat {
                id,
                lagging,
                want_fence,
                want_shutdown,
            } => {
                if self.cl.c.image().broker(id).is_none() {
                    return;
                }
                let mut req = self.cl.heartbeat_req(id);
                if lagging {
                    req.current_metadata_offset = self.cl.epoch(id) - 1;
                }
                req.want_fence = want_fence;
                req.want_shutdown = want_shutdown;
                let r = self.cl.c.heartbeat(&req, now);
                let resp = self.commit(r);
                assert_eq!(ErrorCode::from_wire(resp.error_code), ErrorCode::None);
                let fenced = self.cl.c.image().broker(id).unwrap().fenced;
                assert_eq!(
                    resp.is_fenced, fenced,
                    "the answer matches the committed state"
                );
            }
            Op::Quota {
                user,
                client,
                key,
                value,
            } => {
                let side = |entity_type: &str, which: u8| {
                    (which > 0).then(|| pb::ClientQuotaEntityComponent {
                        entity_type: entity_type.into(),
                        entity_name: (which > 1).then(|| format!("{entity_type}-{which}")),
                    })
                };
                let entity: Vec<_> = [side("user", user), side("client-id", client)]
                    .into_iter()
                    .flatten()
                    .collect();
                let key = [
                    "producer_byte_rate",
                    "consumer_byte_rate",
                    "request_percentage",
                ][key];
                // Zero is refused (INVALID_REQUEST, no record), as is an empty entity.
                let op = pb::ClientQuotaOp {
                    key: key.into(),
                    value: f64::from(value.unwrap_or(0)) * 1024.0,
                    remove: value.is_none(),
                };
                let r = self
                    .cl
                    .c
                    .alter_client_quotas(&pb::AlterClientQuotasRequest {
                        entries: vec![pb::ClientQuotaAlteration {
                            entity: entity.clone(),
                            ops: vec![op],
                        }],
                        validate_only: false,
                        forwarded: false,
                    });
                let valid = !entity.is_empty() && value != Some(0);
                let resp = self.commit(r);
                assert_eq!(resp.results[0].error_code == 0, valid, "{resp:?}");
            }
            Op::Tick { advance_ms } => {
                self.now_ms += advance_ms;
                let now = self.cl.at(self.now_ms);
                let r = self.cl.c.tick(now);
                let fenced = self.commit(r);
                for id in fenced {
                    assert!(self.cl.c.image().broker(id).unwrap().fenced);
                }
            }
            Op::Create {
                partitions,
                rf,
                unclean,
            } => {
                self.topics += 1;
                let mut t = Cluster::topic(&format!("topic{}", self.topics), partitions, rf);
                t.configs
                    .insert("unclean.leader.election.enable".into(), unclean.to_string());
                self.cl.create_topics(vec![t]);
            }
            Op::Alter {
                pick,
                keep,
                from_leader,
                stale,
                epochs_ok,
            } => {
                let partitions: Vec<_> = self
                    .cl
                    .c
                    .image()
                    .partitions()
                    .map(|(tp, p)| (tp, p.clone()))
                    .collect();
                if partitions.is_empty() {
                    return;
                }
                let (tp, p) = &partitions[pick % partitions.len()];
                let requester = if from_leader && p.leader != NO_LEADER {
                    p.leader
                } else {
                    p.replicas[pick % p.replicas.len()]
                };
                let Some(requester_epoch) = self.cl.c.image().broker(requester).map(|b| b.epoch)
                else {
                    return;
                };
                let isr: Vec<pb::BrokerState> = p
                    .replicas
                    .iter()
                    .enumerate()
                    .filter(|&(i, &r)| keep & (1 << i) != 0 || r == p.leader)
                    .map(|(_, &r)| pb::BrokerState {
                        broker_id: r,
                        broker_epoch: match (epochs_ok, keep & 0x80 != 0) {
                            (true, true) => -1,
                            (true, false) => self.cl.epoch(r),
                            (false, _) => self.cl.epoch(r) + 1,
                        },
                    })
                    .collect();
                let req = pb::AlterPartitionRequest {
                    broker_id: requester,
                    broker_epoch: requester_epoch,
                    topics: vec![pb::AlterPartitionTopic {
                        name: tp.topic.to_string(),
                        partitions: vec![pb::AlterPartitionPartition {
                            partition: tp.partition,
                            leader_epoch: p.leader_epoch - i32::from(stale && keep & 1 == 0),
                            new_isr_with_epochs: isr,
                            partition_epoch: p.partition_epoch - i32::from(stale && keep & 1 != 0),
                        }],
                    }],
                };
                let r = self.cl.c.alter_partition(&req);
                let resp = self.commit(r);
                let answer = &resp.topics[0].partitions[0];
                if ErrorCode::from_wire(answer.error_code) == ErrorCode::None {
                    let now = self.cl.partition(&tp.topic, tp.partition);
                    assert_eq!(answer.isr, now.isr);
                    assert_eq!(answer.partition_epoch, now.partition_epoch);
                    assert_eq!(
                        answer.leader_id, p.leader,
                        "AlterPartition never moves leadership"
                    );
                }
            }
            Op::RestartController { unclean_default } => {
                let replayed = self.cl.replayed();
                assert_eq!(&replayed, self.cl.c.image());
                let mut config = ControllerConfig::new(0, CLUSTER_ID);
                config.topic_defaults.unclean_leader_election_enable = unclean_default;
                self.cl.c = Controller::new(config, replayed, now).unwrap();
                let start = self.cl.c.start();
                self.commit(start);
            }
        }
    }
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(256))]

    #[test]
    fn replaying_the_log_gives_the_live_image(ops in prop::collection::vec(op(), 1..120)) {
        let mut run = Run {
            cl: Cluster::new(),
            now_ms: 0,
            incarnations: BTreeMap::new(),
            topics: 0,
            history: History::default(),
        };
        for op in &ops {
            run.apply(op);
        }
        prop_assert_eq!(&run.cl.replayed(), run.cl.c.image());
    }

    /// What the controller quorum relies on: a snapshot taken anywhere in the log,
    /// through its wire encoding, plus the records after it, is the live image.
    #[test]
    fn snapshot_then_replay_of_the_rest_gives_the_live_image(
        ops in prop::collection::vec(op(), 1..60),
        cut in any::<prop::sample::Index>(),
    ) {
        let mut run = Run {
            cl: Cluster::new(),
            now_ms: 0,
            incarnations: BTreeMap::new(),
            topics: 0,
            history: History::default(),
        };
        for op in &ops {
            run.apply(op);
        }
        let log = &run.cl.log;
        let cut = cut.index(log.len() + 1);
        let mut prefix = MetadataImage::new();
        for (offset, record) in (0..).zip(&log[..cut]) {
            prefix.apply(offset, record).expect("replay applies");
        }
        let wire = prefix.to_snapshot().encode_to_vec();
        let snapshot = pb::MetadataSnapshot::decode(wire.as_slice()).expect("decodes");
        let mut image = MetadataImage::from_snapshot(&snapshot).expect("a valid snapshot");
        prop_assert_eq!(&image, &prefix);
        for (offset, record) in (0..).zip(log).skip(cut) {
            image.apply(offset, record).expect("the rest applies");
        }
        prop_assert_eq!(&image, run.cl.c.image());
    }

    /// Whatever bytes a peer or a damaged file hands over, loading them never panics.
    #[test]
    fn any_snapshot_bytes_load_or_are_refused(bytes in prop::collection::vec(any::<u8>(), 0..200)) {
        if let Ok(snapshot) = pb::MetadataSnapshot::decode(bytes.as_slice()) {
            if let Ok(image) = MetadataImage::from_snapshot(&snapshot) {
                prop_assert_eq!(image.check_invariants(), Ok(()));
            }
        }
    }
}
