//! The administrative APIs (CreateTopics, DeleteTopics, DescribeConfigs,
//! DescribeCluster) as the syncline requests the broker serves, and back.

use std::collections::BTreeSet;

use kafka_protocol::messages::create_topics_response::{
    CreatableTopicConfigs, CreatableTopicResult,
};
use kafka_protocol::messages::delete_topics_response::DeletableTopicResult;
use kafka_protocol::messages::describe_cluster_response::DescribeClusterBroker;
use kafka_protocol::messages::describe_configs_response::{
    DescribeConfigsResourceResult, DescribeConfigsResult, DescribeConfigsSynonym,
};
use kafka_protocol::messages::{
    ApiKey, BrokerId, CreateTopicsRequest, CreateTopicsResponse, DeleteTopicsRequest,
    DeleteTopicsResponse, DescribeClusterRequest, DescribeClusterResponse, DescribeConfigsRequest,
    DescribeConfigsResponse,
};
use syncline_proto::pb;
use syncline_proto::pb::response::Body as Resp;
use syncline_proto::ErrorCode;

use crate::translate::{encode, text, topic_name, whole_request_error, Reply, Route};

/// Kafka's config source of a topic's own setting (`DYNAMIC_TOPIC_CONFIG`).
const SOURCE_TOPIC: i8 = 1;
/// Kafka's `DEFAULT_CONFIG`.
const SOURCE_DEFAULT: i8 = 5;

/// Kafka's DescribeCluster endpoint types: brokers (1) and controllers (2).
const ENDPOINT_BROKERS: i8 = 1;

/// Kafka's "authorized operations not asked for".
const OPERATIONS_NOT_ASKED: i32 = i32::MIN;

pub(crate) fn create_topics(r: CreateTopicsRequest, version: i16, cid: i32) -> Route {
    // syncline places replicas itself; a manual assignment is refused per
    // topic (reassign moves replicas once the topic exists).
    let (manual, placed): (Vec<_>, Vec<_>) = r
        .topics
        .into_iter()
        .partition(|t| !t.assignments.is_empty());
    let refused: Vec<String> = manual.into_iter().map(|t| t.name.0.to_string()).collect();
    let asked: Vec<(String, BTreeSet<String>)> = placed
        .iter()
        .map(|t| {
            let keys = t
                .configs
                .iter()
                .filter(|c| c.value.is_some())
                .map(|c| c.name.to_string())
                .collect();
            (t.name.0.to_string(), keys)
        })
        .collect();
    let body = pb::request::Body::CreateTopics(pb::CreateTopicsRequest {
        topics: placed
            .into_iter()
            .map(|t| pb::CreatableTopic {
                name: t.name.0.to_string(),
                num_partitions: t.num_partitions,
                replication_factor: i32::from(t.replication_factor),
                configs: t
                    .configs
                    .into_iter()
                    // A null value asks for the default: nothing to set.
                    .filter_map(|c| Some((c.name.to_string(), c.value?.to_string())))
                    .collect(),
            })
            .collect(),
        timeout_ms: r.timeout_ms,
        validate_only: r.validate_only,
        forwarded: false,
        auto_create: false,
    });
    let reply: Reply = Box::new(move |resp| {
        let result = |name: &str, code: i16, message: &str| {
            let mut t = CreatableTopicResult::default();
            t.name = topic_name(name);
            t.error_code = code;
            t.error_message = (!message.is_empty()).then(|| text(message));
            t.num_partitions = -1;
            t.replication_factor = -1;
            t
        };
        let mut out = CreateTopicsResponse::default();
        out.topics = match resp {
            Resp::CreateTopics(c) => c
                .topics
                .iter()
                .map(|t| {
                    let mut out = result(&t.name, t.error_code as i16, &t.error_message);
                    if t.error_code == ErrorCode::None as i32 && version >= 5 {
                        let own = asked.iter().find(|(n, _)| *n == t.name).map(|(_, k)| k);
                        out.num_partitions = t.num_partitions;
                        out.replication_factor = i16::try_from(t.replication_factor).unwrap_or(-1);
                        let mut configs: Vec<_> = t.configs.iter().collect();
                        configs.sort();
                        out.configs = Some(
                            configs
                                .into_iter()
                                .map(|(k, v)| {
                                    let mut c = CreatableTopicConfigs::default();
                                    c.name = text(k);
                                    c.value = Some(text(v));
                                    c.config_source = if own.is_some_and(|o| o.contains(k)) {
                                        SOURCE_TOPIC
                                    } else {
                                        SOURCE_DEFAULT
                                    };
                                    c
                                })
                                .collect(),
                        );
                    }
                    out
                })
                .collect(),
            other => {
                let (code, message) = whole_request_error(&other).unwrap_or((-1, String::new()));
                asked
                    .iter()
                    .map(|(name, _)| result(name, code, &message))
                    .collect()
            }
        };
        out.topics.extend(refused.iter().map(|name| {
            result(
                name,
                ErrorCode::InvalidRequest as i16,
                "a manual replica assignment is not supported: create the topic with a \
                 replication factor, then move replicas with `syncline reassign`",
            )
        }));
        encode(ApiKey::CreateTopics, version, cid, &out)
    });
    Route::Broker { body, reply }
}

pub(crate) fn delete_topics(r: DeleteTopicsRequest, version: i16, cid: i32) -> Route {
    let names: Vec<String> = r.topic_names.iter().map(|n| n.0.to_string()).collect();
    let body = pb::request::Body::DeleteTopics(pb::DeleteTopicsRequest {
        topics: names.clone(),
        forwarded: false,
    });
    let reply: Reply = Box::new(move |resp| {
        let result = |name: &str, code: i16| {
            let mut t = DeletableTopicResult::default();
            t.name = Some(topic_name(name));
            t.error_code = code;
            t
        };
        let whole = match &resp {
            Resp::DeleteTopics(d) if d.error_code != ErrorCode::None as i32 => {
                Some(d.error_code as i16)
            }
            Resp::DeleteTopics(_) => None,
            other => Some(whole_request_error(other).map_or(-1, |(c, _)| c)),
        };
        let mut out = DeleteTopicsResponse::default();
        out.responses = match (whole, resp) {
            (None, Resp::DeleteTopics(d)) => d
                .topics
                .iter()
                .map(|t| result(&t.name, t.error_code as i16))
                .collect(),
            (code, _) => names
                .iter()
                .map(|n| result(n, code.unwrap_or(-1)))
                .collect(),
        };
        encode(ApiKey::DeleteTopics, version, cid, &out)
    });
    Route::Broker { body, reply }
}

pub(crate) fn describe_configs(r: DescribeConfigsRequest, version: i16, cid: i32) -> Route {
    let synonyms = r.include_synonyms;
    let asked: Vec<(i8, String)> = r
        .resources
        .iter()
        .map(|res| (res.resource_type, res.resource_name.to_string()))
        .collect();
    let body = pb::request::Body::DescribeConfigs(pb::DescribeConfigsRequest {
        resources: r
            .resources
            .into_iter()
            .map(|res| pb::ConfigResource {
                resource_type: i32::from(res.resource_type),
                resource_name: res.resource_name.to_string(),
                keys: res
                    .configuration_keys
                    .unwrap_or_default()
                    .iter()
                    .map(|k| k.to_string())
                    .collect(),
            })
            .collect(),
    });
    let reply: Reply = Box::new(move |resp| {
        let result = |kind: i8, name: &str, code: i16, message: &str| {
            let mut out = DescribeConfigsResult::default();
            out.resource_type = kind;
            out.resource_name = text(name);
            out.error_code = code;
            out.error_message = (!message.is_empty()).then(|| text(message));
            out
        };
        let mut out = DescribeConfigsResponse::default();
        out.results = match resp {
            Resp::DescribeConfigs(d) => d
                .results
                .iter()
                .map(|res| {
                    let kind = i8::try_from(res.resource_type).unwrap_or(-1);
                    let mut out = result(
                        kind,
                        &res.resource_name,
                        res.error_code as i16,
                        &res.error_message,
                    );
                    out.configs = res
                        .configs
                        .iter()
                        .map(|c| config_entry(c, synonyms && version >= 1))
                        .collect();
                    out
                })
                .collect(),
            other => {
                let (code, message) = whole_request_error(&other).unwrap_or((-1, String::new()));
                asked
                    .iter()
                    .map(|(kind, name)| result(*kind, name, code, &message))
                    .collect()
            }
        };
        encode(ApiKey::DescribeConfigs, version, cid, &out)
    });
    Route::Broker { body, reply }
}

fn config_entry(c: &pb::ConfigEntry, synonyms: bool) -> DescribeConfigsResourceResult {
    let source = i8::try_from(c.source).unwrap_or(-1);
    let mut out = DescribeConfigsResourceResult::default();
    out.name = text(&c.name);
    out.value = (!c.is_sensitive).then(|| text(&c.value));
    out.read_only = c.read_only;
    out.config_source = source;
    out.is_sensitive = c.is_sensitive;
    if synonyms {
        // The value's own origin; syncline has no chain of overrides beyond it.
        let mut s = DescribeConfigsSynonym::default();
        s.name = out.name.clone();
        s.value = out.value.clone();
        s.source = source;
        out.synonyms = vec![s];
    }
    out
}

pub(crate) fn describe_cluster(r: DescribeClusterRequest, version: i16, cid: i32) -> Route {
    let endpoint_type = if version >= 1 {
        r.endpoint_type
    } else {
        ENDPOINT_BROKERS
    };
    let body = pb::request::Body::DescribeCluster(pb::DescribeClusterRequest {});
    let reply: Reply = Box::new(move |resp| {
        let mut out = DescribeClusterResponse::default();
        out.endpoint_type = endpoint_type;
        out.cluster_authorized_operations = OPERATIONS_NOT_ASKED;
        out.controller_id = BrokerId(-1);
        if endpoint_type != ENDPOINT_BROKERS {
            out.error_code = ErrorCode::UnsupportedEndpointType as i16;
            out.error_message = Some(text(
                "this listener describes brokers only: the controller voters are reached \
                 through the brokers",
            ));
            return encode(ApiKey::DescribeCluster, version, cid, &out);
        }
        match resp {
            Resp::DescribeCluster(d) => {
                out.error_code = d.error_code as i16;
                out.cluster_id = text(&d.cluster_id);
                out.controller_id = BrokerId(d.controller_id);
                out.brokers = d
                    .brokers
                    .iter()
                    .filter(|b| !b.fenced)
                    .filter_map(|b| b.endpoint.as_ref())
                    .map(|e| {
                        let mut b = DescribeClusterBroker::default();
                        b.broker_id = BrokerId(e.node_id);
                        b.host = text(&e.host);
                        b.port = e.port;
                        b.rack = (!e.rack.is_empty()).then(|| text(&e.rack));
                        b
                    })
                    .collect();
            }
            other => {
                let (code, message) = whole_request_error(&other).unwrap_or((-1, String::new()));
                out.error_code = code;
                out.error_message = Some(text(&message));
            }
        }
        encode(ApiKey::DescribeCluster, version, cid, &out)
    });
    Route::Broker { body, reply }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::translate::tests::{refused, response, through, versions};
    use kafka_protocol::messages::create_topics_request::{
        CreatableReplicaAssignment, CreatableTopic, CreatableTopicConfig,
    };
    use kafka_protocol::messages::describe_configs_request::DescribeConfigsResource;
    use kafka_protocol::protocol::StrBytes;

    fn creatable(name: &str) -> CreatableTopic {
        let mut t = CreatableTopic::default();
        t.name = topic_name(name);
        t.num_partitions = -1;
        t.replication_factor = 3;
        t
    }

    #[test]
    fn create_topics_asks_the_controller_path_and_echoes_every_version() {
        let mut orders = creatable("orders");
        let mut c = CreatableTopicConfig::default();
        c.name = StrBytes::from_static_str("min.insync.replicas");
        c.value = Some(StrBytes::from_static_str("2"));
        let mut unset = CreatableTopicConfig::default();
        unset.name = StrBytes::from_static_str("retention.ms");
        unset.value = None;
        orders.configs = vec![c, unset];
        let mut manual = creatable("placed-by-hand");
        let mut a = CreatableReplicaAssignment::default();
        a.broker_ids = vec![BrokerId(1)];
        manual.assignments = vec![a];
        let mut request = CreateTopicsRequest::default();
        request.topics = vec![orders, manual];
        request.timeout_ms = 5000;
        for version in versions(ApiKey::CreateTopics) {
            let (body, reply) = through(ApiKey::CreateTopics, version, &request);
            let pb::request::Body::CreateTopics(c) = body else {
                panic!()
            };
            assert_eq!(c.topics.len(), 1, "the manual assignment is not forwarded");
            let t = &c.topics[0];
            assert_eq!(
                (t.name.as_str(), t.num_partitions, t.replication_factor),
                ("orders", -1, 3)
            );
            assert_eq!(t.configs.len(), 1, "a null value is not set");
            let answer = Resp::CreateTopics(pb::CreateTopicsResponse {
                topics: vec![pb::CreatableTopicResult {
                    name: "orders".into(),
                    num_partitions: 1,
                    replication_factor: 3,
                    configs: [("min.insync.replicas", "2"), ("retention.ms", "604800000")]
                        .into_iter()
                        .map(|(k, v)| (k.to_string(), v.to_string()))
                        .collect(),
                    ..Default::default()
                }],
            });
            let r: CreateTopicsResponse = response(ApiKey::CreateTopics, version, reply(answer));
            assert_eq!(r.topics.len(), 2);
            assert_eq!(
                (r.topics[0].name.0.as_str(), r.topics[0].error_code),
                ("orders", 0)
            );
            assert_eq!(
                (r.topics[1].name.0.as_str(), r.topics[1].error_code),
                ("placed-by-hand", ErrorCode::InvalidRequest as i16)
            );
            if version >= 5 {
                assert_eq!(
                    (r.topics[0].num_partitions, r.topics[0].replication_factor),
                    (1, 3)
                );
                let sources: Vec<(String, i8)> = r.topics[0]
                    .configs
                    .iter()
                    .flatten()
                    .map(|c| (c.name.to_string(), c.config_source))
                    .collect();
                assert_eq!(
                    sources,
                    [
                        ("min.insync.replicas".to_string(), SOURCE_TOPIC),
                        ("retention.ms".to_string(), SOURCE_DEFAULT)
                    ]
                );
            }
            let (_, reply) = through(ApiKey::CreateTopics, version, &request);
            let r: CreateTopicsResponse = response(ApiKey::CreateTopics, version, reply(refused()));
            assert_eq!(r.topics[0].error_code, 31, "v{version}");
        }
    }

    #[test]
    fn delete_topics_answers_each_name_with_its_result_or_the_whole_error() {
        let mut request = DeleteTopicsRequest::default();
        request.topic_names = vec![topic_name("a"), topic_name("b")];
        for version in versions(ApiKey::DeleteTopics) {
            let (body, reply) = through(ApiKey::DeleteTopics, version, &request);
            assert_eq!(
                body,
                pb::request::Body::DeleteTopics(pb::DeleteTopicsRequest {
                    topics: vec!["a".into(), "b".into()],
                    forwarded: false,
                })
            );
            let answer = Resp::DeleteTopics(pb::DeleteTopicsResponse {
                topics: vec![
                    pb::DeletableTopicResult {
                        name: "a".into(),
                        ..Default::default()
                    },
                    pb::DeletableTopicResult {
                        name: "b".into(),
                        error_code: ErrorCode::UnknownTopicOrPartition as i32,
                        ..Default::default()
                    },
                ],
                ..Default::default()
            });
            let r: DeleteTopicsResponse = response(ApiKey::DeleteTopics, version, reply(answer));
            let codes: Vec<i16> = r.responses.iter().map(|t| t.error_code).collect();
            assert_eq!(codes, [0, 3], "v{version}");
            let (_, reply) = through(ApiKey::DeleteTopics, version, &request);
            let no_controller = Resp::DeleteTopics(pb::DeleteTopicsResponse {
                error_code: ErrorCode::NotController as i32,
                ..Default::default()
            });
            let r: DeleteTopicsResponse =
                response(ApiKey::DeleteTopics, version, reply(no_controller));
            let codes: Vec<i16> = r.responses.iter().map(|t| t.error_code).collect();
            assert_eq!(codes, [41, 41], "v{version}");
        }
    }

    #[test]
    fn describe_configs_carries_sources_and_synonyms() {
        let mut res = DescribeConfigsResource::default();
        res.resource_type = 2;
        res.resource_name = StrBytes::from_static_str("orders");
        res.configuration_keys = Some(vec![StrBytes::from_static_str("retention.ms")]);
        let mut request = DescribeConfigsRequest::default();
        request.resources = vec![res];
        request.include_synonyms = true;
        for version in versions(ApiKey::DescribeConfigs) {
            let (body, reply) = through(ApiKey::DescribeConfigs, version, &request);
            let pb::request::Body::DescribeConfigs(d) = body else {
                panic!()
            };
            assert_eq!(
                (d.resources[0].resource_type, d.resources[0].keys.clone()),
                (2, vec!["retention.ms".to_string()])
            );
            let answer = Resp::DescribeConfigs(pb::DescribeConfigsResponse {
                results: vec![pb::DescribeConfigsResult {
                    resource_type: 2,
                    resource_name: "orders".into(),
                    configs: vec![pb::ConfigEntry {
                        name: "retention.ms".into(),
                        value: "1000".into(),
                        source: 1,
                        ..Default::default()
                    }],
                    ..Default::default()
                }],
            });
            let r: DescribeConfigsResponse =
                response(ApiKey::DescribeConfigs, version, reply(answer));
            let c = &r.results[0].configs[0];
            assert_eq!(
                (c.name.as_str(), c.value.as_deref(), c.config_source),
                ("retention.ms", Some("1000"), 1),
                "v{version}"
            );
            assert_eq!(c.synonyms.len(), 1, "v{version}");
        }
    }

    #[test]
    fn describe_cluster_lists_unfenced_brokers_and_refuses_controllers() {
        let answer = || {
            let broker = |id: i32, fenced: bool| pb::BrokerInfo {
                endpoint: Some(pb::BrokerEndpoint {
                    node_id: id,
                    host: "127.0.0.1".into(),
                    port: 29091 + id,
                    rack: String::new(),
                }),
                fenced,
                ..Default::default()
            };
            Resp::DescribeCluster(pb::DescribeClusterResponse {
                cluster_id: "syncline".into(),
                controller_id: 2,
                brokers: vec![broker(1, false), broker(2, false), broker(3, true)],
                ..Default::default()
            })
        };
        for version in versions(ApiKey::DescribeCluster) {
            let (_, reply) = through(
                ApiKey::DescribeCluster,
                version,
                &DescribeClusterRequest::default(),
            );
            let r: DescribeClusterResponse =
                response(ApiKey::DescribeCluster, version, reply(answer()));
            let ids: Vec<i32> = r.brokers.iter().map(|b| b.broker_id.0).collect();
            assert_eq!((ids, r.controller_id.0, r.error_code), (vec![1, 2], 2, 0));
            assert_eq!(r.cluster_id.as_str(), "syncline");
        }
        let mut controllers = DescribeClusterRequest::default();
        controllers.endpoint_type = 2;
        let (_, reply) = through(ApiKey::DescribeCluster, 1, &controllers);
        let r: DescribeClusterResponse = response(ApiKey::DescribeCluster, 1, reply(answer()));
        assert_eq!(r.error_code, ErrorCode::UnsupportedEndpointType as i16);
    }
}
