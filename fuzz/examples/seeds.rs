//! Writes the seed corpora of the fuzz targets into `fuzz/seeds/<target>/`: a few
//! well-formed inputs of each kind, so that a short run starts past the framing.
//! The output is checked in (a few KiB); rerun after a wire format change:
//!
//!     cargo +nightly run --manifest-path fuzz/Cargo.toml --example seeds
//!
//! (`batch_builder`, `log_recovery` and `acl` take structured input and start from nothing.)
//! `kafka_request`'s are Kafka request frames, encoded with the client half of
//! `kafka-protocol`.

use std::fs;
use std::path::{Path, PathBuf};

use bytes::Bytes;
use syncline_proto::batch::{self, BatchBuilder};
use syncline_proto::frame::encode;
use syncline_proto::pb::{self, request::Body};

fn batch(n: usize, with_headers: bool) -> Bytes {
    let mut b = BatchBuilder::new(1_700_000_000_000);
    for i in 0..n {
        let headers: &[(&[u8], Option<&[u8]>)] = if with_headers {
            &[(b"h", Some(b"v")), (b"null", None)]
        } else {
            &[]
        };
        let key = (i % 2 == 0).then_some(&b"key"[..]);
        b.push(1_700_000_000_000 + i as i64, key, Some(b"value"), headers);
    }
    b.finish()
}

fn stamped(n: usize, base: i64, epoch: i32) -> Vec<u8> {
    let mut b = batch(n, true).to_vec();
    batch::stamp(&mut b, base, epoch);
    b
}

fn request(body: Body) -> pb::Request {
    pb::Request {
        correlation_id: 1,
        api_version: 0,
        client_id: "seed".into(),
        body: Some(body),
    }
}

fn requests() -> Vec<pb::Request> {
    let mut records = batch(2, true).to_vec();
    records.extend_from_slice(&batch(1, false));
    let produce = pb::ProduceRequest {
        acks: -1,
        timeout_ms: 1000,
        topics: vec![pb::ProduceTopic {
            name: "t".into(),
            partitions: vec![pb::ProducePartition {
                partition: 0,
                current_leader_epoch: Some(0),
                records: records.into(),
            }],
        }],
    };
    let fetch = pb::FetchRequest {
        replica_id: -1,
        max_wait_ms: 100,
        topics: vec![pb::FetchTopic {
            topic: "t".into(),
            partitions: vec![pb::FetchPartition {
                partition: 0,
                fetch_offset: 0,
                current_leader_epoch: Some(0),
                ..Default::default()
            }],
        }],
        ..Default::default()
    };
    vec![
        request(Body::Produce(produce)),
        request(Body::Fetch(fetch)),
        request(Body::Metadata(Default::default())),
        request(Body::ListOffsets(Default::default())),
        request(Body::DescribeCluster(Default::default())),
    ]
    .into_iter()
    .chain(controller_requests())
    .collect()
}

/// Requests the controller decides, against the fuzz target's cluster (brokers 1
/// to 3 of "fuzz-cluster", epochs 2, 4 and 6 after the start record at 0).
fn controller_requests() -> Vec<pb::Request> {
    let create = pb::CreateTopicsRequest {
        topics: vec![
            pb::CreatableTopic {
                name: "a".into(),
                num_partitions: 3,
                replication_factor: 3,
                configs: [("min.insync.replicas".to_string(), "2".to_string())].into(),
            },
            pb::CreatableTopic {
                name: "b".into(),
                num_partitions: -1,
                replication_factor: -1,
                configs: Default::default(),
            },
        ],
        timeout_ms: 1000,
        validate_only: false,
        forwarded: false,
    };
    let alter_partition = pb::AlterPartitionRequest {
        broker_id: 1,
        broker_epoch: 2,
        topics: vec![pb::AlterPartitionTopic {
            name: "a".into(),
            partitions: vec![pb::AlterPartitionPartition {
                partition: 0,
                leader_epoch: 0,
                new_isr_with_epochs: vec![pb::BrokerState {
                    broker_id: 1,
                    broker_epoch: 2,
                }],
                partition_epoch: 0,
            }],
        }],
    };
    let alter_topic = pb::AlterTopicRequest {
        name: "a".into(),
        set_configs: [("retention.ms".to_string(), "1000".to_string())].into(),
        delete_configs: vec!["min.insync.replicas".into()],
        partitions: 5,
        validate_only: false,
        forwarded: false,
    };
    let heartbeat = pb::BrokerHeartbeatRequest {
        broker_id: 2,
        broker_epoch: 4,
        current_metadata_offset: 100,
        want_fence: false,
        want_shutdown: true,
    };
    let register = pb::BrokerRegistrationRequest {
        broker_id: 4,
        cluster_id: "fuzz-cluster".into(),
        incarnation_id: vec![4; 16].into(),
        endpoint: Some(pb::BrokerEndpoint {
            node_id: 4,
            host: "localhost".into(),
            port: 9094,
            rack: "r0".into(),
        }),
        metrics_address: String::new(),
        listeners: vec![],
    };
    vec![
        request(Body::CreateTopics(create)),
        request(Body::AlterPartition(alter_partition)),
        request(Body::AlterTopic(alter_topic)),
        request(Body::ElectLeaders(Default::default())),
        request(Body::BrokerHeartbeat(heartbeat)),
        request(Body::BrokerRegistration(register)),
    ]
}

fn fetch_response() -> pb::Response {
    let mut records = stamped(2, 5, 1);
    records.extend_from_slice(&stamped(1, 7, 1));
    records.extend_from_slice(&stamped(3, 8, 2)[..40]); // torn last batch
    pb::Response {
        correlation_id: 1,
        body: Some(pb::response::Body::Fetch(pb::FetchResponse {
            responses: vec![pb::FetchableTopicResponse {
                topic: "t".into(),
                partitions: vec![pb::PartitionData {
                    partition: 0,
                    high_watermark: 8,
                    records: records.into(),
                    ..Default::default()
                }],
            }],
            ..Default::default()
        })),
    }
}

fn framed(bodies: &[Bytes]) -> Vec<u8> {
    let mut out = Vec::new();
    for b in bodies {
        out.extend_from_slice(&(b.len() as u32).to_be_bytes());
        out.extend_from_slice(b);
    }
    out
}

fn write(dir: &Path, name: &str, bytes: &[u8]) {
    fs::create_dir_all(dir).unwrap();
    fs::write(dir.join(name), bytes).unwrap();
}

fn main() {
    let root = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("seeds");
    let reqs: Vec<Bytes> = requests().iter().map(encode).collect();
    let resp = encode(&fetch_response());

    let dir = root.join("request");
    for (i, r) in reqs.iter().enumerate() {
        write(&dir, &format!("request-{i:02}"), r);
    }
    write(&dir, "fetch-response", &resp);

    let dir = root.join("frame");
    // [max frame size pick][read size][stream]
    let mut stream = vec![7u8, 5];
    stream.extend(framed(&reqs[..3]));
    write(&dir, "three-requests", &stream);
    let mut oversized = vec![4u8, 64];
    oversized.extend(framed(&[reqs[2].clone(), reqs[0].clone()]));
    write(&dir, "oversized-second", &oversized);

    let dir = root.join("record_batch");
    let mut one = vec![0u8];
    one.extend(stamped(3, 0, 0));
    write(&dir, "one-batch", &one);
    let mut many = vec![8u8];
    many.extend(stamped(1, 0, 0));
    many.extend(stamped(2, 1, 0));
    many.extend(&stamped(2, 3, 0)[..70]);
    write(&dir, "batches-torn-tail", &many);

    // A compressed batch of each codec.
    for codec in syncline_proto::compression::CODECS.into_iter().skip(1) {
        let mut b = BatchBuilder::new(1_700_000_000_000);
        for i in 0..4 {
            b.push(1_700_000_000_000 + i, Some(b"key"), Some(b"value value value"), &[(b"h", None)]);
        }
        let mut one = vec![0u8];
        one.extend_from_slice(&b.finish_with(codec));
        write(&dir, &format!("one-batch-{codec}"), &one);
    }

    let dir = root.join("decompress");
    for codec in syncline_proto::compression::CODECS {
        let mut input = vec![codec.id()];
        input.extend(codec.compress(&b"records records records".repeat(20)).expect("compresses"));
        write(&dir, &format!("{codec}"), &input);
    }

    let dir = root.join("controller");
    let mut steps = Vec::new();
    for (i, r) in reqs[5..].iter().enumerate() {
        steps.push(if i == 4 { 50 } else { 1 });
        steps.extend_from_slice(&(r.len() as u16).to_be_bytes());
        steps.extend_from_slice(r);
    }
    write(&dir, "decisions", &steps);
    let dir = root.join("kafka_request");
    for (name, frame) in kafka_requests() {
        write(&dir, name, &frame);
    }
    println!("seeds written under {}", root.display());
}

/// A Kafka request frame body (header and request) as a client sends it.
fn kafka_frame<R: kafka_protocol::protocol::Encodable>(
    api: kafka_protocol::messages::ApiKey,
    version: i16,
    body: &R,
) -> Vec<u8> {
    use kafka_protocol::messages::RequestHeader;
    use kafka_protocol::protocol::{Encodable, StrBytes};
    let mut header = RequestHeader::default();
    header.request_api_key = api as i16;
    header.request_api_version = version;
    header.correlation_id = 7;
    header.client_id = Some(StrBytes::from_static_str("seed"));
    let mut buf = bytes::BytesMut::new();
    header.encode(&mut buf, api.request_header_version(version)).expect("header");
    body.encode(&mut buf, version).expect("body");
    buf.to_vec()
}

/// One request of each API the Kafka listener serves, at its oldest and newest
/// versions.
fn kafka_requests() -> Vec<(&'static str, Vec<u8>)> {
    use kafka_protocol::messages::fetch_request::{FetchPartition, FetchTopic};
    use kafka_protocol::messages::produce_request::{PartitionProduceData, TopicProduceData};
    use kafka_protocol::messages::*;
    use kafka_protocol::protocol::StrBytes;
    let name = || TopicName(StrBytes::from_static_str("orders"));
    let mut produce = ProduceRequest::default();
    produce.acks = -1;
    produce.timeout_ms = 1000;
    let mut partition = PartitionProduceData::default();
    partition.records = Some(batch(2, true));
    let mut topic = TopicProduceData::default();
    topic.name = name();
    topic.partition_data = vec![partition];
    produce.topic_data = vec![topic];
    let mut fetch = FetchRequest::default();
    fetch.max_wait_ms = 500;
    let mut fp = FetchPartition::default();
    fp.fetch_offset = 3;
    let mut ft = FetchTopic::default();
    ft.topic = name();
    ft.partitions = vec![fp];
    fetch.topics = vec![ft];
    let mut all = MetadataRequest::default();
    all.topics = None;
    let group = || GroupId(StrBytes::from_static_str("billing"));
    let mut creatable = create_topics_request::CreatableTopic::default();
    creatable.name = name();
    creatable.num_partitions = 3;
    creatable.replication_factor = 3;
    let mut create = CreateTopicsRequest::default();
    create.topics = vec![creatable];
    let mut delete = DeleteTopicsRequest::default();
    delete.topic_names = vec![name()];
    let mut resource = describe_configs_request::DescribeConfigsResource::default();
    resource.resource_type = 2;
    resource.resource_name = StrBytes::from_static_str("orders");
    let mut configs = DescribeConfigsRequest::default();
    configs.resources = vec![resource];
    let mut find = FindCoordinatorRequest::default();
    find.key = StrBytes::from_static_str("billing");
    let mut protocol = join_group_request::JoinGroupRequestProtocol::default();
    protocol.name = StrBytes::from_static_str("range");
    protocol.metadata = Bytes::from_static(b"\x00\x00\x00\x00\x00\x01\x00\x06orders\xff\xff\xff\xff");
    let mut join = JoinGroupRequest::default();
    join.group_id = group();
    join.session_timeout_ms = 10_000;
    join.protocol_type = StrBytes::from_static_str("consumer");
    join.protocols = vec![protocol];
    let mut sync = SyncGroupRequest::default();
    sync.group_id = group();
    sync.generation_id = 1;
    let mut heartbeat = HeartbeatRequest::default();
    heartbeat.group_id = group();
    let mut cp = offset_commit_request::OffsetCommitRequestPartition::default();
    cp.committed_offset = 42;
    let mut ct = offset_commit_request::OffsetCommitRequestTopic::default();
    ct.name = name();
    ct.partitions = vec![cp];
    let mut commit = OffsetCommitRequest::default();
    commit.group_id = group();
    commit.generation_id_or_member_epoch = -1;
    commit.topics = vec![ct];
    let mut describe = DescribeGroupsRequest::default();
    describe.groups = vec![group()];
    vec![
        ("api-versions-v0", kafka_frame(ApiKey::ApiVersions, 0, &ApiVersionsRequest::default())),
        ("api-versions-v3", kafka_frame(ApiKey::ApiVersions, 3, &ApiVersionsRequest::default())),
        ("metadata-v1", kafka_frame(ApiKey::Metadata, 1, &all)),
        ("metadata-v9", kafka_frame(ApiKey::Metadata, 9, &all)),
        ("produce-v3", kafka_frame(ApiKey::Produce, 3, &produce)),
        ("produce-v9", kafka_frame(ApiKey::Produce, 9, &produce)),
        ("fetch-v4", kafka_frame(ApiKey::Fetch, 4, &fetch)),
        ("fetch-v12", kafka_frame(ApiKey::Fetch, 12, &fetch)),
        ("list-offsets-v7", kafka_frame(ApiKey::ListOffsets, 7, &ListOffsetsRequest::default())),
        (
            "offset-for-leader-epoch-v4",
            kafka_frame(ApiKey::OffsetForLeaderEpoch, 4, &OffsetForLeaderEpochRequest::default()),
        ),
        ("init-producer-id-v4", kafka_frame(ApiKey::InitProducerId, 4, &InitProducerIdRequest::default())),
        ("create-topics-v2", kafka_frame(ApiKey::CreateTopics, 2, &create)),
        ("create-topics-v5", kafka_frame(ApiKey::CreateTopics, 5, &create)),
        ("delete-topics-v4", kafka_frame(ApiKey::DeleteTopics, 4, &delete)),
        ("describe-configs-v4", kafka_frame(ApiKey::DescribeConfigs, 4, &configs)),
        ("describe-cluster-v1", kafka_frame(ApiKey::DescribeCluster, 1, &DescribeClusterRequest::default())),
        ("find-coordinator-v3", kafka_frame(ApiKey::FindCoordinator, 3, &find)),
        ("join-group-v0", kafka_frame(ApiKey::JoinGroup, 0, &join)),
        ("join-group-v5", kafka_frame(ApiKey::JoinGroup, 5, &join)),
        ("sync-group-v3", kafka_frame(ApiKey::SyncGroup, 3, &sync)),
        ("heartbeat-v3", kafka_frame(ApiKey::Heartbeat, 3, &heartbeat)),
        ("leave-group-v3", kafka_frame(ApiKey::LeaveGroup, 3, &LeaveGroupRequest::default())),
        ("offset-commit-v2", kafka_frame(ApiKey::OffsetCommit, 2, &commit)),
        ("offset-commit-v8", kafka_frame(ApiKey::OffsetCommit, 8, &commit)),
        ("offset-fetch-v7", kafka_frame(ApiKey::OffsetFetch, 7, &OffsetFetchRequest::default())),
        ("list-groups-v4", kafka_frame(ApiKey::ListGroups, 4, &ListGroupsRequest::default())),
        ("describe-groups-v5", kafka_frame(ApiKey::DescribeGroups, 5, &describe)),
    ]
}
