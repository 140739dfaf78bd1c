//! Kafka requests as syncline requests, and syncline responses as Kafka
//! responses of the version asked. The broker serves both protocols by one
//! path (replica manager, purgatory, controller): this is the only place that
//! knows Kafka's shapes. Record batches pass through untouched (they are
//! RecordBatch v2 on both sides).
//!
//! A Kafka request never reaches the internal APIs: its fetches, offset
//! queries and epoch queries are a consumer's (`replica_id` -1), whatever the
//! client wrote there.

use bytes::Bytes;
use kafka_protocol::messages::fetch_response::{
    AbortedTransaction, EpochEndOffset as DivergingEpoch, FetchableTopicResponse,
    LeaderIdAndEpoch as FetchLeader, PartitionData,
};
use kafka_protocol::messages::list_offsets_response::{
    ListOffsetsPartitionResponse, ListOffsetsTopicResponse,
};
use kafka_protocol::messages::metadata_response::{
    MetadataResponseBroker, MetadataResponsePartition, MetadataResponseTopic,
};
use kafka_protocol::messages::offset_for_leader_epoch_response::{
    EpochEndOffset, OffsetForLeaderTopicResult,
};
use kafka_protocol::messages::produce_response::{PartitionProduceResponse, TopicProduceResponse};
use kafka_protocol::messages::{
    ApiKey, BrokerId, FetchRequest, FetchResponse, InitProducerIdRequest, InitProducerIdResponse,
    ListOffsetsRequest, ListOffsetsResponse, MetadataRequest, MetadataResponse,
    OffsetForLeaderEpochRequest, OffsetForLeaderEpochResponse, ProduceRequest, ProduceResponse,
    ProducerId, TopicName,
};
use kafka_protocol::protocol::{Encodable, StrBytes};
use syncline_proto::pb;
use syncline_proto::pb::response::Body as Resp;

use super::codec::{api_versions, encode_response, Decoded, KafkaRequest};
use super::{admin, groups, quotas, security};

/// Turns the syncline response into the Kafka response frame.
pub type Reply = Box<dyn FnOnce(Resp) -> Bytes + Send>;

/// Where a decoded Kafka request goes.
pub enum Route {
    /// Answered by the listener itself (ApiVersions).
    Answer(Bytes),
    /// Served by the broker as this syncline request; `reply` makes the answer.
    Broker {
        body: pb::request::Body,
        reply: Reply,
    },
}

impl std::fmt::Debug for Route {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Route::Answer(b) => write!(f, "Answer({} bytes)", b.len()),
            Route::Broker { body, .. } => write!(f, "Broker({body:?})"),
        }
    }
}

pub(crate) fn text(s: &str) -> StrBytes {
    StrBytes::from_string(s.to_string())
}

pub(crate) fn topic_name(s: &str) -> TopicName {
    TopicName(text(s))
}

/// Kafka's "no epoch" (-1) as syncline's absent one.
fn epoch(e: i32) -> Option<i32> {
    (e >= 0).then_some(e)
}

/// The error code of a response that answers the whole request with an error
/// (`Resp::Error`: refused, or not understood), else None.
pub(crate) fn whole_request_error(body: &Resp) -> Option<(i16, String)> {
    match body {
        Resp::Error(e) => Some((e.error_code as i16, e.error_message.clone())),
        _ => None,
    }
}

/// The partitions a request asked for, by topic: what a refusal of the whole
/// request answers.
type Asked = Vec<(String, Vec<i32>)>;

/// Every partition of `asked` answered by `partition(index)`, grouped by
/// `topic(name, partitions)`.
fn answer_asked<T, P>(
    asked: &Asked,
    partition: impl Fn(i32) -> P,
    topic: impl Fn(&str, Vec<P>) -> T,
) -> Vec<T> {
    asked
        .iter()
        .map(|(name, partitions)| topic(name, partitions.iter().map(|&i| partition(i)).collect()))
        .collect()
}

/// Encodes `body` as `api`'s response at `version`; an empty frame (the
/// connection is closed) if it cannot be, which is a bug logged here.
pub(crate) fn encode<B: Encodable>(
    api: ApiKey,
    version: i16,
    correlation_id: i32,
    body: &B,
) -> Bytes {
    encode_response(api, version, correlation_id, body).unwrap_or_else(|e| {
        tracing::error!(error = %e, "closing a Kafka connection");
        Bytes::new()
    })
}

/// The route of one decoded request.
pub fn route(d: Decoded) -> Route {
    let (version, cid) = (d.version, d.header.correlation_id);
    match d.request {
        KafkaRequest::ApiVersions(_) => {
            Route::Answer(encode(ApiKey::ApiVersions, version, cid, &api_versions(0)))
        }
        KafkaRequest::Metadata(r) => metadata(r, version, cid),
        KafkaRequest::Produce(r) => produce(r, version, cid),
        KafkaRequest::Fetch(r) => fetch(r, version, cid),
        KafkaRequest::ListOffsets(r) => list_offsets(r, version, cid),
        KafkaRequest::OffsetForLeaderEpoch(r) => offset_for_leader_epoch(r, version, cid),
        KafkaRequest::InitProducerId(r) => init_producer_id(r, version, cid),
        KafkaRequest::CreateTopics(r) => admin::create_topics(r, version, cid),
        KafkaRequest::DeleteTopics(r) => admin::delete_topics(r, version, cid),
        KafkaRequest::DescribeConfigs(r) => admin::describe_configs(r, version, cid),
        KafkaRequest::DescribeCluster(r) => admin::describe_cluster(r, version, cid),
        KafkaRequest::FindCoordinator(r) => groups::find_coordinator(r, version, cid),
        KafkaRequest::JoinGroup(r) => groups::join_group(r, version, cid),
        KafkaRequest::SyncGroup(r) => groups::sync_group(r, version, cid),
        KafkaRequest::Heartbeat(r) => groups::heartbeat(r, version, cid),
        KafkaRequest::LeaveGroup(r) => groups::leave_group(r, version, cid),
        KafkaRequest::OffsetCommit(r) => groups::offset_commit(r, version, cid),
        KafkaRequest::OffsetFetch(r) => groups::offset_fetch(r, version, cid),
        KafkaRequest::ListGroups(r) => groups::list_groups(r, version, cid),
        KafkaRequest::DescribeGroups(r) => groups::describe_groups(r, version, cid),
        KafkaRequest::SaslHandshake(r) => sasl_handshake(r, version, cid),
        KafkaRequest::SaslAuthenticate(r) => sasl_authenticate(r, version, cid),
        KafkaRequest::DescribeAcls(r) => security::describe_acls(r, version, cid),
        KafkaRequest::CreateAcls(r) => security::create_acls(r, version, cid),
        KafkaRequest::DeleteAcls(r) => security::delete_acls(r, version, cid),
        KafkaRequest::DescribeUserScramCredentials(r) => {
            security::describe_user_scram_credentials(r, version, cid)
        }
        KafkaRequest::AlterUserScramCredentials(r) => {
            security::alter_user_scram_credentials(r, version, cid)
        }
        KafkaRequest::DescribeClientQuotas(r) => quotas::describe_client_quotas(r, version, cid),
        KafkaRequest::AlterClientQuotas(r) => quotas::alter_client_quotas(r, version, cid),
    }
}

/// SaslHandshake as syncline's: the connection runs the exchange itself
/// (before any other request, on a SASL listener).
fn sasl_handshake(
    r: kafka_protocol::messages::SaslHandshakeRequest,
    version: i16,
    cid: i32,
) -> Route {
    let body = pb::request::Body::SaslHandshake(pb::SaslHandshakeRequest {
        mechanism: r.mechanism.to_string(),
    });
    let reply: Reply = Box::new(move |resp| {
        let mut out = kafka_protocol::messages::SaslHandshakeResponse::default();
        match resp {
            Resp::SaslHandshake(h) => {
                out.error_code = h.error_code as i16;
                out.mechanisms = h.mechanisms.iter().map(|m| text(m)).collect();
            }
            other => out.error_code = whole_request_error(&other).map_or(-1, |(c, _)| c),
        }
        encode(ApiKey::SaslHandshake, version, cid, &out)
    });
    Route::Broker { body, reply }
}

/// SaslAuthenticate as syncline's (see [`sasl_handshake`]).
fn sasl_authenticate(
    r: kafka_protocol::messages::SaslAuthenticateRequest,
    version: i16,
    cid: i32,
) -> Route {
    let body = pb::request::Body::SaslAuthenticate(pb::SaslAuthenticateRequest {
        auth_bytes: r.auth_bytes,
    });
    let reply: Reply = Box::new(move |resp| {
        let mut out = kafka_protocol::messages::SaslAuthenticateResponse::default();
        match resp {
            Resp::SaslAuthenticate(a) => {
                out.error_code = a.error_code as i16;
                out.error_message = (!a.error_message.is_empty()).then(|| text(&a.error_message));
                out.auth_bytes = a.auth_bytes;
            }
            other => {
                let (code, message) = whole_request_error(&other).unwrap_or((-1, String::new()));
                out.error_code = code;
                out.error_message = Some(text(&message));
            }
        }
        encode(ApiKey::SaslAuthenticate, version, cid, &out)
    });
    Route::Broker { body, reply }
}

fn metadata(r: MetadataRequest, version: i16, cid: i32) -> Route {
    // None: every topic; an empty list: none (brokers only).
    let names: Option<Vec<String>> = r.topics.map(|topics| {
        topics
            .into_iter()
            .filter_map(|t| t.name.map(|n| n.0.to_string()))
            .collect()
    });
    let body = pb::request::Body::Metadata(pb::MetadataRequest {
        topics: names.clone().unwrap_or_default(),
        // Before v4 a Metadata request could not say; Kafka's brokers create.
        allow_auto_topic_creation: version < 4 || r.allow_auto_topic_creation,
        // Not every topic's metadata built to be dropped.
        no_topics: names.as_ref().is_some_and(Vec::is_empty),
    });
    let reply: Reply = Box::new(move |resp| {
        let mut out = MetadataResponse::default();
        match resp {
            Resp::Metadata(m) => {
                out.brokers = m
                    .brokers
                    .iter()
                    .map(|b| {
                        let mut broker = MetadataResponseBroker::default();
                        broker.node_id = BrokerId(b.node_id);
                        broker.host = text(&b.host);
                        broker.port = b.port;
                        broker.rack = (!b.rack.is_empty()).then(|| text(&b.rack));
                        broker
                    })
                    .collect();
                out.cluster_id = Some(text(&m.cluster_id));
                out.controller_id = BrokerId(m.controller_id);
                if !names.as_ref().is_some_and(Vec::is_empty) {
                    out.topics = m
                        .topics
                        .iter()
                        .map(|t| metadata_topic(t, version))
                        .collect();
                }
            }
            other => {
                let code = whole_request_error(&other).map_or(-1, |(c, _)| c);
                out.controller_id = BrokerId(-1);
                out.topics = names
                    .iter()
                    .flatten()
                    .map(|n| {
                        let mut t = MetadataResponseTopic::default();
                        t.name = Some(topic_name(n));
                        t.error_code = code;
                        t
                    })
                    .collect();
            }
        }
        encode(ApiKey::Metadata, version, cid, &out)
    });
    Route::Broker { body, reply }
}

fn metadata_topic(t: &pb::TopicMetadata, version: i16) -> MetadataResponseTopic {
    let mut topic = MetadataResponseTopic::default();
    topic.name = Some(topic_name(&t.name));
    topic.error_code = t.error_code as i16;
    topic.is_internal = t.name.starts_with("__");
    topic.partitions = t
        .partitions
        .iter()
        .map(|p| {
            let mut part = MetadataResponsePartition::default();
            part.partition_index = p.partition;
            part.error_code = p.error_code as i16;
            part.leader_id = BrokerId(p.leader_id);
            if version >= 7 {
                part.leader_epoch = p.leader_epoch;
            }
            part.replica_nodes = p.replicas.iter().copied().map(BrokerId).collect();
            part.isr_nodes = p.isr.iter().copied().map(BrokerId).collect();
            if version >= 5 {
                part.offline_replicas = p.offline_replicas.iter().copied().map(BrokerId).collect();
            }
            part
        })
        .collect();
    topic
}

fn produce(r: ProduceRequest, version: i16, cid: i32) -> Route {
    let asked: Asked = r
        .topic_data
        .iter()
        .map(|t| {
            (
                t.name.0.to_string(),
                t.partition_data.iter().map(|p| p.index).collect(),
            )
        })
        .collect();
    let body = pb::request::Body::Produce(pb::ProduceRequest {
        acks: i32::from(r.acks),
        timeout_ms: r.timeout_ms,
        topics: r
            .topic_data
            .into_iter()
            .map(|t| pb::ProduceTopic {
                name: t.name.0.to_string(),
                partitions: t
                    .partition_data
                    .into_iter()
                    .map(|p| pb::ProducePartition {
                        partition: p.index,
                        current_leader_epoch: None,
                        records: p.records.unwrap_or_default(),
                    })
                    .collect(),
            })
            .collect(),
    });
    let reply: Reply = Box::new(move |resp| {
        let partition = |index: i32, code: i16, message: &str| {
            let mut p = PartitionProduceResponse::default();
            p.index = index;
            p.error_code = code;
            if version >= 8 && !message.is_empty() {
                p.error_message = Some(text(message));
            }
            p
        };
        let mut out = ProduceResponse::default();
        if let (Resp::Produce(r), 1..) = (&resp, version) {
            // A client over its byte-rate quota (v0 has no field for it).
            out.throttle_time_ms = r.throttle_time_ms;
        }
        out.responses = match resp {
            Resp::Produce(r) => r
                .topics
                .iter()
                .map(|t| {
                    let mut topic = TopicProduceResponse::default();
                    topic.name = topic_name(&t.name);
                    topic.partition_responses = t
                        .partitions
                        .iter()
                        .map(|p| {
                            let mut out =
                                partition(p.partition, p.error_code as i16, &p.error_message);
                            out.base_offset = p.base_offset;
                            out.log_append_time_ms = p.log_append_time_ms;
                            out.log_start_offset = p.log_start_offset;
                            out
                        })
                        .collect();
                    topic
                })
                .collect(),
            other => {
                let (code, message) = whole_request_error(&other).unwrap_or((-1, String::new()));
                answer_asked(
                    &asked,
                    |i| partition(i, code, &message),
                    |name, partitions| {
                        let mut topic = TopicProduceResponse::default();
                        topic.name = topic_name(name);
                        topic.partition_responses = partitions;
                        topic
                    },
                )
            }
        };
        encode(ApiKey::Produce, version, cid, &out)
    });
    Route::Broker { body, reply }
}

fn fetch(r: FetchRequest, version: i16, cid: i32) -> Route {
    let asked: Asked = r
        .topics
        .iter()
        .map(|t| {
            (
                t.topic.0.to_string(),
                t.partitions.iter().map(|p| p.partition).collect(),
            )
        })
        .collect();
    let body = pb::request::Body::Fetch(pb::FetchRequest {
        replica_id: -1,
        replica_epoch: -1,
        max_wait_ms: r.max_wait_ms,
        min_bytes: r.min_bytes,
        max_bytes: r.max_bytes,
        isolation_level: i32::from(r.isolation_level),
        session_id: r.session_id,
        session_epoch: r.session_epoch,
        topics: r
            .topics
            .into_iter()
            .map(|t| pb::FetchTopic {
                topic: t.topic.0.to_string(),
                partitions: t
                    .partitions
                    .into_iter()
                    .map(|p| pb::FetchPartition {
                        partition: p.partition,
                        current_leader_epoch: epoch(p.current_leader_epoch),
                        fetch_offset: p.fetch_offset,
                        last_fetched_epoch: epoch(p.last_fetched_epoch),
                        log_start_offset: p.log_start_offset,
                        partition_max_bytes: p.partition_max_bytes,
                    })
                    .collect(),
            })
            .collect(),
        forgotten_topics_data: r
            .forgotten_topics_data
            .into_iter()
            .map(|f| pb::ForgottenTopic {
                topic: f.topic.0.to_string(),
                partitions: f.partitions,
            })
            .collect(),
        rack_id: r.rack_id.to_string(),
    });
    let reply: Reply = Box::new(move |resp| {
        let mut out = FetchResponse::default();
        match resp {
            Resp::Fetch(f) => {
                out.throttle_time_ms = f.throttle_time_ms;
                out.error_code = f.error_code as i16;
                out.session_id = f.session_id;
                out.responses = f
                    .responses
                    .into_iter()
                    .map(|t| {
                        let mut topic = FetchableTopicResponse::default();
                        topic.topic = topic_name(&t.topic);
                        topic.partitions = t
                            .partitions
                            .into_iter()
                            .map(|p| fetched(p, version))
                            .collect();
                        topic
                    })
                    .collect();
            }
            other => {
                let code = whole_request_error(&other).map_or(-1, |(c, _)| c);
                out.error_code = code;
                out.responses = answer_asked(
                    &asked,
                    |i| {
                        let mut p = PartitionData::default();
                        p.partition_index = i;
                        p.error_code = code;
                        p.aborted_transactions = None;
                        p
                    },
                    |name, partitions| {
                        let mut topic = FetchableTopicResponse::default();
                        topic.topic = topic_name(name);
                        topic.partitions = partitions;
                        topic
                    },
                );
            }
        }
        encode(ApiKey::Fetch, version, cid, &out)
    });
    Route::Broker { body, reply }
}

fn fetched(p: pb::PartitionData, version: i16) -> PartitionData {
    let mut out = PartitionData::default();
    out.partition_index = p.partition;
    out.error_code = p.error_code as i16;
    out.high_watermark = p.high_watermark;
    out.last_stable_offset = p.last_stable_offset;
    out.log_start_offset = p.log_start_offset;
    out.aborted_transactions = (!p.aborted_transactions.is_empty()).then(|| {
        p.aborted_transactions
            .iter()
            .map(|a| {
                let mut t = AbortedTransaction::default();
                t.producer_id = ProducerId(a.producer_id);
                t.first_offset = a.first_offset;
                t
            })
            .collect()
    });
    if version >= 11 {
        if let Some(replica) = p.preferred_read_replica {
            out.preferred_read_replica = BrokerId(replica);
        }
    }
    if version >= 12 {
        if let Some(d) = &p.diverging_epoch {
            let mut diverging = DivergingEpoch::default();
            diverging.epoch = d.epoch;
            diverging.end_offset = d.end_offset;
            out.diverging_epoch = diverging;
        }
        if let Some(l) = &p.current_leader {
            let mut leader = FetchLeader::default();
            leader.leader_id = BrokerId(l.leader_id);
            leader.leader_epoch = l.leader_epoch;
            out.current_leader = leader;
        }
    }
    // Never null: an empty fetch has empty records.
    out.records = Some(p.records);
    out
}

fn list_offsets(r: ListOffsetsRequest, version: i16, cid: i32) -> Route {
    let asked: Asked = r
        .topics
        .iter()
        .map(|t| {
            (
                t.name.0.to_string(),
                t.partitions.iter().map(|p| p.partition_index).collect(),
            )
        })
        .collect();
    let body = pb::request::Body::ListOffsets(pb::ListOffsetsRequest {
        replica_id: -1,
        isolation_level: i32::from(r.isolation_level),
        topics: r
            .topics
            .into_iter()
            .map(|t| pb::ListOffsetsTopic {
                name: t.name.0.to_string(),
                partitions: t
                    .partitions
                    .into_iter()
                    .map(|p| pb::ListOffsetsPartition {
                        partition: p.partition_index,
                        current_leader_epoch: epoch(p.current_leader_epoch),
                        timestamp: p.timestamp,
                    })
                    .collect(),
            })
            .collect(),
    });
    let reply: Reply = Box::new(move |resp| {
        let partition = |index: i32, code: i16| {
            let mut p = ListOffsetsPartitionResponse::default();
            p.partition_index = index;
            p.error_code = code;
            p
        };
        let mut out = ListOffsetsResponse::default();
        out.topics = match resp {
            Resp::ListOffsets(l) => l
                .topics
                .iter()
                .map(|t| {
                    let mut topic = ListOffsetsTopicResponse::default();
                    topic.name = topic_name(&t.name);
                    topic.partitions = t
                        .partitions
                        .iter()
                        .map(|p| {
                            let mut out = partition(p.partition, p.error_code as i16);
                            out.timestamp = p.timestamp;
                            out.offset = p.offset;
                            if version >= 4 {
                                out.leader_epoch = p.leader_epoch;
                            }
                            out
                        })
                        .collect();
                    topic
                })
                .collect(),
            other => {
                let code = whole_request_error(&other).map_or(-1, |(c, _)| c);
                answer_asked(
                    &asked,
                    |i| partition(i, code),
                    |name, partitions| {
                        let mut topic = ListOffsetsTopicResponse::default();
                        topic.name = topic_name(name);
                        topic.partitions = partitions;
                        topic
                    },
                )
            }
        };
        encode(ApiKey::ListOffsets, version, cid, &out)
    });
    Route::Broker { body, reply }
}

fn offset_for_leader_epoch(r: OffsetForLeaderEpochRequest, version: i16, cid: i32) -> Route {
    let asked: Asked = r
        .topics
        .iter()
        .map(|t| {
            (
                t.topic.0.to_string(),
                t.partitions.iter().map(|p| p.partition).collect(),
            )
        })
        .collect();
    let body = pb::request::Body::OffsetsForLeaderEpoch(pb::OffsetsForLeaderEpochRequest {
        replica_id: -1,
        topics: r
            .topics
            .into_iter()
            .map(|t| pb::OffsetForLeaderTopic {
                topic: t.topic.0.to_string(),
                partitions: t
                    .partitions
                    .into_iter()
                    .map(|p| pb::OffsetForLeaderPartition {
                        partition: p.partition,
                        current_leader_epoch: epoch(p.current_leader_epoch),
                        leader_epoch: p.leader_epoch,
                    })
                    .collect(),
            })
            .collect(),
    });
    let reply: Reply = Box::new(move |resp| {
        let partition = |index: i32, code: i16| {
            let mut p = EpochEndOffset::default();
            p.partition = index;
            p.error_code = code;
            p
        };
        let mut out = OffsetForLeaderEpochResponse::default();
        out.topics = match resp {
            Resp::OffsetsForLeaderEpoch(o) => o
                .topics
                .iter()
                .map(|t| {
                    let mut topic = OffsetForLeaderTopicResult::default();
                    topic.topic = topic_name(&t.topic);
                    topic.partitions = t
                        .partitions
                        .iter()
                        .map(|p| {
                            let mut out = partition(p.partition, p.error_code as i16);
                            out.leader_epoch = p.leader_epoch;
                            out.end_offset = p.end_offset;
                            out
                        })
                        .collect();
                    topic
                })
                .collect(),
            other => {
                let code = whole_request_error(&other).map_or(-1, |(c, _)| c);
                answer_asked(
                    &asked,
                    |i| partition(i, code),
                    |name, partitions| {
                        let mut topic = OffsetForLeaderTopicResult::default();
                        topic.topic = topic_name(name);
                        topic.partitions = partitions;
                        topic
                    },
                )
            }
        };
        encode(ApiKey::OffsetForLeaderEpoch, version, cid, &out)
    });
    Route::Broker { body, reply }
}

fn init_producer_id(r: InitProducerIdRequest, version: i16, cid: i32) -> Route {
    let body = pb::request::Body::InitProducerId(pb::InitProducerIdRequest {
        transactional_id: r
            .transactional_id
            .map(|t| t.0.to_string())
            .unwrap_or_default(),
        transaction_timeout_ms: r.transaction_timeout_ms,
        producer_id: r.producer_id.0,
        producer_epoch: i32::from(r.producer_epoch),
    });
    let reply: Reply = Box::new(move |resp| {
        let mut out = InitProducerIdResponse::default();
        match resp {
            Resp::InitProducerId(i) => {
                out.error_code = i.error_code as i16;
                out.producer_id = ProducerId(i.producer_id);
                out.producer_epoch = i16::try_from(i.producer_epoch).unwrap_or(-1);
            }
            other => {
                out.error_code = whole_request_error(&other).map_or(-1, |(c, _)| c);
                out.producer_id = ProducerId(-1);
                out.producer_epoch = -1;
            }
        }
        encode(ApiKey::InitProducerId, version, cid, &out)
    });
    Route::Broker { body, reply }
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;
    use crate::codec::{decode, tests::frame, SUPPORTED};
    use kafka_protocol::messages::produce_request::{PartitionProduceData, TopicProduceData};
    use kafka_protocol::messages::ResponseHeader;
    use kafka_protocol::protocol::Decodable;

    pub(crate) fn versions(api: ApiKey) -> std::ops::RangeInclusive<i16> {
        let &(_, min, max) = SUPPORTED.iter().find(|(a, _, _)| *a == api).unwrap();
        // Produce below 3 is advertised, not decoded.
        (if api == ApiKey::Produce { 3 } else { min })..=max
    }

    /// Routes a request through the codec; the syncline body and the reply.
    pub(crate) fn through<R: Encodable>(
        api: ApiKey,
        version: i16,
        request: &R,
    ) -> (pb::request::Body, Reply) {
        match route(decode(frame(api, version, 77, request)).unwrap()) {
            Route::Broker { body, reply } => (body, reply),
            Route::Answer(_) => panic!("{api:?} is served by the broker"),
        }
    }

    pub(crate) fn response<R: Decodable>(api: ApiKey, version: i16, bytes: Bytes) -> R {
        assert!(!bytes.is_empty(), "{api:?} v{version} did not encode");
        let mut buf = bytes;
        let header =
            ResponseHeader::decode(&mut buf, api.response_header_version(version)).unwrap();
        assert_eq!(header.correlation_id, 77);
        R::decode(&mut buf, version).unwrap()
    }

    pub(crate) fn refused() -> Resp {
        Resp::Error(pb::ErrorResponse {
            error_code: 31,
            error_message: "cluster authorization failed".into(),
            controller_hint: None,
        })
    }

    #[test]
    fn produce_passes_the_records_through_and_answers_every_version() {
        let records = Bytes::from_static(b"a record batch, as sent");
        let mut partition = PartitionProduceData::default();
        partition.index = 2;
        partition.records = Some(records.clone());
        let mut topic = TopicProduceData::default();
        topic.name = topic_name("orders");
        topic.partition_data = vec![partition];
        let mut request = ProduceRequest::default();
        request.acks = -1;
        request.timeout_ms = 1500;
        request.topic_data = vec![topic];
        for version in versions(ApiKey::Produce) {
            let (body, reply) = through(ApiKey::Produce, version, &request);
            let pb::request::Body::Produce(p) = body else {
                panic!()
            };
            assert_eq!((p.acks, p.timeout_ms), (-1, 1500));
            assert_eq!(p.topics[0].name, "orders");
            assert_eq!(p.topics[0].partitions[0].partition, 2);
            assert_eq!(p.topics[0].partitions[0].records, records);
            let answer = Resp::Produce(pb::ProduceResponse {
                topics: vec![pb::ProduceTopicResponse {
                    name: "orders".into(),
                    partitions: vec![pb::ProducePartitionResponse {
                        partition: 2,
                        base_offset: 40,
                        log_append_time_ms: -1,
                        log_start_offset: 3,
                        error_message: "kept".into(),
                        ..Default::default()
                    }],
                }],
                throttle_time_ms: 250,
            });
            let r: ProduceResponse = response(ApiKey::Produce, version, reply(answer));
            // A throttled client is told so from v1, where the field is.
            assert_eq!(
                r.throttle_time_ms,
                if version >= 1 { 250 } else { 0 },
                "v{version}"
            );
            let p = &r.responses[0].partition_responses[0];
            assert_eq!(
                (p.index, p.error_code, p.base_offset),
                (2, 0, 40),
                "v{version}"
            );
            if version >= 5 {
                assert_eq!(p.log_start_offset, 3);
            }
            // A refusal of the whole request answers every partition with it.
            let (_, reply) = through(ApiKey::Produce, version, &request);
            let r: ProduceResponse = response(ApiKey::Produce, version, reply(refused()));
            assert_eq!(r.responses[0].partition_responses[0].error_code, 31);
        }
    }

    #[test]
    fn fetch_is_a_consumers_and_empty_records_are_not_null() {
        use kafka_protocol::messages::fetch_request::{FetchPartition, FetchTopic};
        let mut partition = FetchPartition::default();
        partition.partition = 1;
        partition.fetch_offset = 9;
        partition.partition_max_bytes = 1 << 20;
        let mut topic = FetchTopic::default();
        topic.topic = topic_name("orders");
        topic.partitions = vec![partition];
        let mut request = FetchRequest::default();
        // A client posing as a follower is still a consumer here.
        request.replica_id = BrokerId(2);
        request.max_wait_ms = 500;
        request.min_bytes = 1;
        request.max_bytes = 1 << 24;
        request.session_epoch = -1;
        request.topics = vec![topic];
        for version in versions(ApiKey::Fetch) {
            let (body, reply) = through(ApiKey::Fetch, version, &request);
            let pb::request::Body::Fetch(f) = body else {
                panic!()
            };
            assert_eq!(
                (f.replica_id, f.max_wait_ms, f.session_epoch),
                (-1, 500, -1)
            );
            let p = &f.topics[0].partitions[0];
            assert_eq!(
                (p.partition, p.fetch_offset, p.current_leader_epoch),
                (1, 9, None)
            );
            let answer = Resp::Fetch(pb::FetchResponse {
                responses: vec![pb::FetchableTopicResponse {
                    topic: "orders".into(),
                    partitions: vec![pb::PartitionData {
                        partition: 1,
                        high_watermark: 12,
                        last_stable_offset: 12,
                        log_start_offset: 0,
                        preferred_read_replica: Some(3),
                        records: Bytes::new(),
                        ..Default::default()
                    }],
                }],
                throttle_time_ms: 300,
                ..Default::default()
            });
            let r: FetchResponse = response(ApiKey::Fetch, version, reply(answer));
            assert_eq!(
                r.throttle_time_ms, 300,
                "v{version}: a throttled consumer is told"
            );
            let p = &r.responses[0].partitions[0];
            assert_eq!((p.partition_index, p.high_watermark), (1, 12), "v{version}");
            assert_eq!(p.records, Some(Bytes::new()), "v{version}: empty, not null");
            let expected = if version >= 11 { 3 } else { -1 };
            assert_eq!(p.preferred_read_replica.0, expected);
        }
    }

    #[test]
    fn metadata_answers_brokers_and_topics_and_an_empty_list_with_no_topics() {
        use kafka_protocol::messages::metadata_request::MetadataRequestTopic;
        let answer = || {
            Resp::Metadata(pb::MetadataResponse {
                cluster_id: "c".into(),
                controller_id: 2,
                brokers: vec![pb::BrokerEndpoint {
                    node_id: 2,
                    host: "127.0.0.1".into(),
                    port: 29093,
                    rack: String::new(),
                }],
                topics: vec![pb::TopicMetadata {
                    name: "orders".into(),
                    error_code: 0,
                    partitions: vec![pb::PartitionMetadata {
                        partition: 0,
                        leader_id: 2,
                        leader_epoch: 4,
                        replicas: vec![2, 1, 3],
                        isr: vec![2, 1],
                        ..Default::default()
                    }],
                    topic_id: 0,
                }],
            })
        };
        for version in versions(ApiKey::Metadata) {
            let mut all = MetadataRequest::default();
            all.topics = None;
            let (body, reply) = through(ApiKey::Metadata, version, &all);
            assert_eq!(
                body,
                pb::request::Body::Metadata(pb::MetadataRequest {
                    topics: vec![],
                    allow_auto_topic_creation: true,
                    no_topics: false,
                })
            );
            let r: MetadataResponse = response(ApiKey::Metadata, version, reply(answer()));
            assert_eq!((r.brokers[0].node_id.0, r.brokers[0].port), (2, 29093));
            assert_eq!(r.controller_id.0, 2);
            let p = &r.topics[0].partitions[0];
            assert_eq!(p.leader_id.0, 2);
            assert_eq!(p.isr_nodes.len(), 2);
            if version >= 7 {
                assert_eq!(p.leader_epoch, 4);
            }
            let mut none = MetadataRequest::default();
            none.topics = Some(vec![]);
            let (body, reply) = through(ApiKey::Metadata, version, &none);
            assert_eq!(
                body,
                pb::request::Body::Metadata(pb::MetadataRequest {
                    topics: vec![],
                    allow_auto_topic_creation: true,
                    no_topics: true,
                }),
                "v{version}: no topic is not every topic"
            );
            let r: MetadataResponse = response(ApiKey::Metadata, version, reply(answer()));
            assert!(r.topics.is_empty() && !r.brokers.is_empty(), "v{version}");
            let mut one = MetadataRequest::default();
            let mut t = MetadataRequestTopic::default();
            t.name = Some(topic_name("orders"));
            one.topics = Some(vec![t]);
            let (body, _) = through(ApiKey::Metadata, version, &one);
            assert_eq!(
                body,
                pb::request::Body::Metadata(pb::MetadataRequest {
                    topics: vec!["orders".into()],
                    allow_auto_topic_creation: true,
                    no_topics: false,
                })
            );
            // Before v4 the field is not on the wire (Kafka's brokers create).
            if version >= 4 {
                one.allow_auto_topic_creation = false;
                let (body, _) = through(ApiKey::Metadata, version, &one);
                let pb::request::Body::Metadata(m) = body else {
                    panic!()
                };
                assert!(!m.allow_auto_topic_creation, "v{version}");
            }
        }
    }

    #[test]
    fn offsets_epochs_and_producer_ids_answer_every_version() {
        use kafka_protocol::messages::list_offsets_request::{
            ListOffsetsPartition, ListOffsetsTopic,
        };
        use kafka_protocol::messages::offset_for_leader_epoch_request::{
            OffsetForLeaderPartition, OffsetForLeaderTopic,
        };
        let mut lp = ListOffsetsPartition::default();
        lp.partition_index = 0;
        lp.timestamp = -2;
        let mut lt = ListOffsetsTopic::default();
        lt.name = topic_name("orders");
        lt.partitions = vec![lp];
        let mut list = ListOffsetsRequest::default();
        list.topics = vec![lt];
        for version in versions(ApiKey::ListOffsets) {
            let (body, reply) = through(ApiKey::ListOffsets, version, &list);
            let pb::request::Body::ListOffsets(l) = body else {
                panic!()
            };
            assert_eq!(
                (l.replica_id, l.topics[0].partitions[0].timestamp),
                (-1, -2)
            );
            let answer = Resp::ListOffsets(pb::ListOffsetsResponse {
                topics: vec![pb::ListOffsetsTopicResponse {
                    name: "orders".into(),
                    partitions: vec![pb::ListOffsetsPartitionResponse {
                        partition: 0,
                        offset: 5,
                        timestamp: -1,
                        leader_epoch: 2,
                        ..Default::default()
                    }],
                }],
            });
            let r: ListOffsetsResponse = response(ApiKey::ListOffsets, version, reply(answer));
            assert_eq!(r.topics[0].partitions[0].offset, 5, "v{version}");
        }
        let mut ep = OffsetForLeaderPartition::default();
        ep.partition = 0;
        ep.current_leader_epoch = 3;
        ep.leader_epoch = 2;
        let mut et = OffsetForLeaderTopic::default();
        et.topic = topic_name("orders");
        et.partitions = vec![ep];
        let mut epochs = OffsetForLeaderEpochRequest::default();
        epochs.topics = vec![et];
        for version in versions(ApiKey::OffsetForLeaderEpoch) {
            let (body, reply) = through(ApiKey::OffsetForLeaderEpoch, version, &epochs);
            let pb::request::Body::OffsetsForLeaderEpoch(o) = body else {
                panic!()
            };
            let p = &o.topics[0].partitions[0];
            assert_eq!((p.current_leader_epoch, p.leader_epoch), (Some(3), 2));
            let r: OffsetForLeaderEpochResponse =
                response(ApiKey::OffsetForLeaderEpoch, version, reply(refused()));
            assert_eq!(r.topics[0].partitions[0].error_code, 31, "v{version}");
        }
        for version in versions(ApiKey::InitProducerId) {
            let (body, reply) = through(
                ApiKey::InitProducerId,
                version,
                &InitProducerIdRequest::default(),
            );
            assert!(matches!(body, pb::request::Body::InitProducerId(_)));
            let answer = Resp::InitProducerId(pb::InitProducerIdResponse {
                producer_id: 1000,
                producer_epoch: 0,
                ..Default::default()
            });
            let r: InitProducerIdResponse =
                response(ApiKey::InitProducerId, version, reply(answer));
            assert_eq!((r.producer_id.0, r.producer_epoch), (1000, 0), "v{version}");
        }
    }
}
