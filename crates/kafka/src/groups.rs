//! The consumer-group APIs (classic protocol: FindCoordinator, JoinGroup,
//! SyncGroup, Heartbeat, LeaveGroup, OffsetCommit, OffsetFetch, ListGroups,
//! DescribeGroups) as the syncline requests the broker serves, and back.
//!
//! Static membership (`group.instance.id`, KIP-345) is not kept: a member that
//! sends one is served as a dynamic member, as brokers before Kafka 2.3 did.

use kafka_protocol::messages::describe_groups_response::{DescribedGroup, DescribedGroupMember};
use kafka_protocol::messages::join_group_response::JoinGroupResponseMember;
use kafka_protocol::messages::leave_group_response::MemberResponse;
use kafka_protocol::messages::list_groups_response::ListedGroup;
use kafka_protocol::messages::offset_commit_response::{
    OffsetCommitResponsePartition, OffsetCommitResponseTopic,
};
use kafka_protocol::messages::offset_fetch_response::{
    OffsetFetchResponsePartition, OffsetFetchResponseTopic,
};
use kafka_protocol::messages::{
    ApiKey, BrokerId, DescribeGroupsRequest, DescribeGroupsResponse, FindCoordinatorRequest,
    FindCoordinatorResponse, GroupId, HeartbeatRequest, HeartbeatResponse, JoinGroupRequest,
    JoinGroupResponse, LeaveGroupRequest, LeaveGroupResponse, ListGroupsRequest,
    ListGroupsResponse, OffsetCommitRequest, OffsetCommitResponse, OffsetFetchRequest,
    OffsetFetchResponse, SyncGroupRequest, SyncGroupResponse,
};
use kafka_protocol::protocol::StrBytes;
use syncline_proto::pb;
use syncline_proto::pb::response::Body as Resp;

use crate::translate::{encode, text, topic_name, whole_request_error, Reply, Route};

/// Kafka's "authorized operations not asked for".
const OPERATIONS_NOT_ASKED: i32 = i32::MIN;

fn group(id: &str) -> GroupId {
    GroupId(text(id))
}

/// The error code of a response that is not `expected`'s.
fn failed(other: &Resp) -> i16 {
    whole_request_error(other).map_or(-1, |(c, _)| c)
}

pub(crate) fn find_coordinator(r: FindCoordinatorRequest, version: i16, cid: i32) -> Route {
    let body = pb::request::Body::FindCoordinator(pb::FindCoordinatorRequest {
        key: r.key.to_string(),
        key_type: i32::from(r.key_type),
    });
    let reply: Reply = Box::new(move |resp| {
        let mut out = FindCoordinatorResponse::default();
        out.node_id = BrokerId(-1);
        out.port = -1;
        let (code, message) = match resp {
            Resp::FindCoordinator(f) => {
                if let Some(c) = &f.coordinator {
                    out.node_id = BrokerId(c.node_id);
                    out.host = text(&c.host);
                    out.port = c.port;
                }
                (f.error_code as i16, f.error_message)
            }
            other => whole_request_error(&other).unwrap_or((-1, String::new())),
        };
        out.error_code = code;
        if version >= 1 && !message.is_empty() {
            out.error_message = Some(text(&message));
        }
        encode(ApiKey::FindCoordinator, version, cid, &out)
    });
    Route::Broker { body, reply }
}

pub(crate) fn join_group(r: JoinGroupRequest, version: i16, cid: i32) -> Route {
    let body = pb::request::Body::JoinGroup(pb::JoinGroupRequest {
        group_id: r.group_id.0.to_string(),
        session_timeout_ms: r.session_timeout_ms,
        // v0 has none: the session timeout bounds the rebalance, as in Kafka.
        rebalance_timeout_ms: if version >= 1 {
            r.rebalance_timeout_ms
        } else {
            r.session_timeout_ms
        },
        member_id: r.member_id.to_string(),
        protocol_type: r.protocol_type.to_string(),
        protocols: r
            .protocols
            .into_iter()
            .map(|p| pb::GroupProtocol {
                name: p.name.to_string(),
                metadata: p.metadata,
            })
            .collect(),
        require_known_member_id: version >= 4,
    });
    let reply: Reply = Box::new(move |resp| {
        let mut out = JoinGroupResponse::default();
        out.generation_id = -1;
        match resp {
            Resp::JoinGroup(j) => {
                out.error_code = j.error_code as i16;
                out.generation_id = j.generation_id;
                out.protocol_name = Some(text(&j.protocol_name));
                out.leader = text(&j.leader);
                out.member_id = text(&j.member_id);
                out.members = j
                    .members
                    .into_iter()
                    .map(|m| {
                        let mut member = JoinGroupResponseMember::default();
                        member.member_id = text(&m.member_id);
                        member.metadata = m.metadata;
                        member
                    })
                    .collect();
            }
            other => {
                out.error_code = failed(&other);
                out.protocol_name = Some(StrBytes::default());
            }
        }
        encode(ApiKey::JoinGroup, version, cid, &out)
    });
    Route::Broker { body, reply }
}

pub(crate) fn sync_group(r: SyncGroupRequest, version: i16, cid: i32) -> Route {
    let body = pb::request::Body::SyncGroup(pb::SyncGroupRequest {
        group_id: r.group_id.0.to_string(),
        generation_id: r.generation_id,
        member_id: r.member_id.to_string(),
        protocol_type: r.protocol_type.map(|p| p.to_string()).unwrap_or_default(),
        protocol_name: r.protocol_name.map(|p| p.to_string()).unwrap_or_default(),
        assignments: r
            .assignments
            .into_iter()
            .map(|a| pb::SyncGroupAssignment {
                member_id: a.member_id.to_string(),
                assignment: a.assignment,
            })
            .collect(),
    });
    let reply: Reply = Box::new(move |resp| {
        let mut out = SyncGroupResponse::default();
        match resp {
            Resp::SyncGroup(s) => {
                out.error_code = s.error_code as i16;
                out.assignment = s.assignment;
            }
            other => out.error_code = failed(&other),
        }
        encode(ApiKey::SyncGroup, version, cid, &out)
    });
    Route::Broker { body, reply }
}

pub(crate) fn heartbeat(r: HeartbeatRequest, version: i16, cid: i32) -> Route {
    let body = pb::request::Body::Heartbeat(pb::HeartbeatRequest {
        group_id: r.group_id.0.to_string(),
        generation_id: r.generation_id,
        member_id: r.member_id.to_string(),
    });
    let reply: Reply = Box::new(move |resp| {
        let mut out = HeartbeatResponse::default();
        out.error_code = match resp {
            Resp::Heartbeat(h) => h.error_code as i16,
            other => failed(&other),
        };
        encode(ApiKey::Heartbeat, version, cid, &out)
    });
    Route::Broker { body, reply }
}

pub(crate) fn leave_group(r: LeaveGroupRequest, version: i16, cid: i32) -> Route {
    // v3 leaves many members at once (each answered); before, one.
    let member_ids: Vec<String> = if version >= 3 {
        r.members.iter().map(|m| m.member_id.to_string()).collect()
    } else {
        vec![r.member_id.to_string()]
    };
    let body = pb::request::Body::LeaveGroup(pb::LeaveGroupRequest {
        group_id: r.group_id.0.to_string(),
        member_ids,
    });
    let reply: Reply = Box::new(move |resp| {
        let mut out = LeaveGroupResponse::default();
        match resp {
            Resp::LeaveGroup(l) => {
                out.error_code = l.error_code as i16;
                if version >= 3 {
                    out.members = l
                        .members
                        .iter()
                        .map(|m| {
                            let mut member = MemberResponse::default();
                            member.member_id = text(&m.member_id);
                            member.error_code = m.error_code as i16;
                            member
                        })
                        .collect();
                } else if let Some(m) = l.members.first() {
                    // One member left: its outcome is the request's.
                    if out.error_code == 0 {
                        out.error_code = m.error_code as i16;
                    }
                }
            }
            other => out.error_code = failed(&other),
        }
        encode(ApiKey::LeaveGroup, version, cid, &out)
    });
    Route::Broker { body, reply }
}

pub(crate) fn offset_commit(r: OffsetCommitRequest, version: i16, cid: i32) -> Route {
    let asked: Vec<(String, Vec<i32>)> = r
        .topics
        .iter()
        .map(|t| {
            let partitions = t.partitions.iter().map(|p| p.partition_index).collect();
            (t.name.0.to_string(), partitions)
        })
        .collect();
    let body = pb::request::Body::OffsetCommit(pb::OffsetCommitRequest {
        group_id: r.group_id.0.to_string(),
        generation_id: r.generation_id_or_member_epoch,
        member_id: r.member_id.to_string(),
        topics: r
            .topics
            .into_iter()
            .map(|t| pb::OffsetCommitTopic {
                name: t.name.0.to_string(),
                partitions: t
                    .partitions
                    .into_iter()
                    .map(|p| pb::OffsetCommitPartition {
                        partition: p.partition_index,
                        offset: p.committed_offset,
                        leader_epoch: if version >= 6 {
                            p.committed_leader_epoch
                        } else {
                            -1
                        },
                        metadata: p.committed_metadata.map(|m| m.to_string()),
                    })
                    .collect(),
            })
            .collect(),
    });
    let reply: Reply = Box::new(move |resp| {
        let topic = |name: &str, partitions: Vec<(i32, i16)>| {
            let mut t = OffsetCommitResponseTopic::default();
            t.name = topic_name(name);
            t.partitions = partitions
                .into_iter()
                .map(|(index, code)| {
                    let mut p = OffsetCommitResponsePartition::default();
                    p.partition_index = index;
                    p.error_code = code;
                    p
                })
                .collect();
            t
        };
        let mut out = OffsetCommitResponse::default();
        out.topics = match resp {
            Resp::OffsetCommit(c) => c
                .topics
                .iter()
                .map(|t| {
                    let partitions = t
                        .partitions
                        .iter()
                        .map(|p| (p.partition, p.error_code as i16))
                        .collect();
                    topic(&t.name, partitions)
                })
                .collect(),
            other => {
                let code = failed(&other);
                asked
                    .iter()
                    .map(|(name, ps)| topic(name, ps.iter().map(|&p| (p, code)).collect()))
                    .collect()
            }
        };
        encode(ApiKey::OffsetCommit, version, cid, &out)
    });
    Route::Broker { body, reply }
}

pub(crate) fn offset_fetch(r: OffsetFetchRequest, version: i16, cid: i32) -> Route {
    let all = r.topics.is_none();
    let asked: Vec<(String, Vec<i32>)> = r
        .topics
        .iter()
        .flatten()
        .map(|t| (t.name.0.to_string(), t.partition_indexes.clone()))
        .collect();
    let body = pb::request::Body::OffsetFetch(pb::OffsetFetchRequest {
        group_id: r.group_id.0.to_string(),
        topics: asked
            .iter()
            .map(|(name, partitions)| pb::OffsetFetchTopic {
                name: name.clone(),
                partitions: partitions.clone(),
            })
            .collect(),
        all,
    });
    let reply: Reply = Box::new(move |resp| {
        let partition = |index: i32, offset: i64, epoch: i32, metadata: &str, code: i16| {
            let mut p = OffsetFetchResponsePartition::default();
            p.partition_index = index;
            p.committed_offset = offset;
            p.committed_leader_epoch = epoch;
            p.metadata = Some(text(metadata));
            p.error_code = code;
            p
        };
        let mut out = OffsetFetchResponse::default();
        match resp {
            Resp::OffsetFetch(f) => {
                out.error_code = f.error_code as i16;
                out.topics = f
                    .topics
                    .iter()
                    .map(|t| {
                        let mut topic = OffsetFetchResponseTopic::default();
                        topic.name = topic_name(&t.name);
                        topic.partitions = t
                            .partitions
                            .iter()
                            .map(|p| {
                                partition(
                                    p.partition,
                                    p.offset,
                                    p.leader_epoch,
                                    &p.metadata,
                                    p.error_code as i16,
                                )
                            })
                            .collect();
                        topic
                    })
                    .collect();
            }
            other => {
                let code = failed(&other);
                out.error_code = code;
                out.topics = asked
                    .iter()
                    .map(|(name, ps)| {
                        let mut topic = OffsetFetchResponseTopic::default();
                        topic.name = topic_name(name);
                        topic.partitions =
                            ps.iter().map(|&p| partition(p, -1, -1, "", code)).collect();
                        topic
                    })
                    .collect();
            }
        }
        // v1 has no request-wide error: each partition carries it.
        if version < 2 && out.error_code != 0 {
            let code = out.error_code;
            for p in out.topics.iter_mut().flat_map(|t| t.partitions.iter_mut()) {
                p.error_code = code;
            }
            out.error_code = 0;
        }
        encode(ApiKey::OffsetFetch, version, cid, &out)
    });
    Route::Broker { body, reply }
}

pub(crate) fn list_groups(r: ListGroupsRequest, version: i16, cid: i32) -> Route {
    let states: Vec<String> = r.states_filter.iter().map(|s| s.to_string()).collect();
    let body = pb::request::Body::ListGroups(pb::ListGroupsRequest {});
    let reply: Reply = Box::new(move |resp| {
        let mut out = ListGroupsResponse::default();
        match resp {
            Resp::ListGroups(l) => {
                out.error_code = l.error_code as i16;
                out.groups = l
                    .groups
                    .iter()
                    // Kafka matches the state filter case-insensitively.
                    .filter(|g| {
                        states.is_empty() || states.iter().any(|s| s.eq_ignore_ascii_case(&g.state))
                    })
                    .map(|g| {
                        let mut listed = ListedGroup::default();
                        listed.group_id = group(&g.group_id);
                        listed.protocol_type = text(&g.protocol_type);
                        if version >= 4 {
                            listed.group_state = text(&g.state);
                        }
                        listed
                    })
                    .collect();
            }
            other => out.error_code = failed(&other),
        }
        encode(ApiKey::ListGroups, version, cid, &out)
    });
    Route::Broker { body, reply }
}

pub(crate) fn describe_groups(r: DescribeGroupsRequest, version: i16, cid: i32) -> Route {
    let ids: Vec<String> = r.groups.iter().map(|g| g.0.to_string()).collect();
    let body = pb::request::Body::DescribeGroups(pb::DescribeGroupsRequest {
        group_ids: ids.clone(),
    });
    let reply: Reply = Box::new(move |resp| {
        let mut out = DescribeGroupsResponse::default();
        out.groups = match resp {
            Resp::DescribeGroups(d) => d
                .groups
                .into_iter()
                .map(|g| {
                    let mut described = DescribedGroup::default();
                    described.error_code = g.error_code as i16;
                    described.group_id = group(&g.group_id);
                    described.group_state = text(&g.state);
                    described.protocol_type = text(&g.protocol_type);
                    described.protocol_data = text(&g.protocol_name);
                    described.authorized_operations = OPERATIONS_NOT_ASKED;
                    described.members = g
                        .members
                        .into_iter()
                        .map(|m| {
                            let mut member = DescribedGroupMember::default();
                            member.member_id = text(&m.member_id);
                            member.client_id = text(&m.client_id);
                            member.client_host = text(&m.client_host);
                            member.member_metadata = m.metadata;
                            member.member_assignment = m.assignment;
                            member
                        })
                        .collect();
                    described
                })
                .collect(),
            other => {
                let code = failed(&other);
                ids.iter()
                    .map(|id| {
                        let mut described = DescribedGroup::default();
                        described.error_code = code;
                        described.group_id = group(id);
                        described.authorized_operations = OPERATIONS_NOT_ASKED;
                        described
                    })
                    .collect()
            }
        };
        encode(ApiKey::DescribeGroups, version, cid, &out)
    });
    Route::Broker { body, reply }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::translate::tests::{refused, response, through, versions};
    use bytes::Bytes;
    use kafka_protocol::messages::join_group_request::JoinGroupRequestProtocol;
    use kafka_protocol::messages::leave_group_request::MemberIdentity;
    use kafka_protocol::messages::offset_commit_request::{
        OffsetCommitRequestPartition, OffsetCommitRequestTopic,
    };
    use kafka_protocol::messages::offset_fetch_request::OffsetFetchRequestTopic;
    use kafka_protocol::messages::sync_group_request::SyncGroupRequestAssignment;

    #[test]
    fn find_coordinator_answers_the_endpoint_or_the_error() {
        let mut request = FindCoordinatorRequest::default();
        request.key = StrBytes::from_static_str("g");
        for version in versions(ApiKey::FindCoordinator) {
            let (body, reply) = through(ApiKey::FindCoordinator, version, &request);
            assert_eq!(
                body,
                pb::request::Body::FindCoordinator(pb::FindCoordinatorRequest {
                    key: "g".into(),
                    key_type: 0
                })
            );
            let answer = Resp::FindCoordinator(pb::FindCoordinatorResponse {
                coordinator: Some(pb::BrokerEndpoint {
                    node_id: 3,
                    host: "127.0.0.1".into(),
                    port: 29094,
                    rack: String::new(),
                }),
                ..Default::default()
            });
            let r: FindCoordinatorResponse =
                response(ApiKey::FindCoordinator, version, reply(answer));
            assert_eq!(
                (r.error_code, r.node_id.0, r.port),
                (0, 3, 29094),
                "v{version}"
            );
            let (_, reply) = through(ApiKey::FindCoordinator, version, &request);
            let answer = Resp::FindCoordinator(pb::FindCoordinatorResponse {
                error_code: 15,
                error_message: "creating".into(),
                coordinator: None,
            });
            let r: FindCoordinatorResponse =
                response(ApiKey::FindCoordinator, version, reply(answer));
            assert_eq!((r.error_code, r.node_id.0), (15, -1), "v{version}");
        }
    }

    #[test]
    fn join_and_sync_carry_members_protocols_and_assignments() {
        let mut protocol = JoinGroupRequestProtocol::default();
        protocol.name = StrBytes::from_static_str("range");
        protocol.metadata = Bytes::from_static(b"subscription");
        let mut join = JoinGroupRequest::default();
        join.group_id = group("g");
        join.session_timeout_ms = 10_000;
        join.rebalance_timeout_ms = 30_000;
        join.protocol_type = StrBytes::from_static_str("consumer");
        join.protocols = vec![protocol];
        for version in versions(ApiKey::JoinGroup) {
            let (body, reply) = through(ApiKey::JoinGroup, version, &join);
            let pb::request::Body::JoinGroup(j) = body else {
                panic!()
            };
            assert_eq!(j.require_known_member_id, version >= 4, "v{version}");
            let rebalance = if version >= 1 { 30_000 } else { 10_000 };
            assert_eq!(j.rebalance_timeout_ms, rebalance, "v{version}");
            assert_eq!(j.protocols[0].metadata, Bytes::from_static(b"subscription"));
            let answer = Resp::JoinGroup(pb::JoinGroupResponse {
                generation_id: 4,
                protocol_name: "range".into(),
                leader: "m-1".into(),
                member_id: "m-1".into(),
                members: vec![pb::JoinGroupMember {
                    member_id: "m-1".into(),
                    metadata: Bytes::from_static(b"subscription"),
                }],
                ..Default::default()
            });
            let r: JoinGroupResponse = response(ApiKey::JoinGroup, version, reply(answer));
            assert_eq!(
                (r.generation_id, r.leader.as_str(), r.members.len()),
                (4, "m-1", 1),
                "v{version}"
            );
            let (_, reply) = through(ApiKey::JoinGroup, version, &join);
            let r: JoinGroupResponse = response(ApiKey::JoinGroup, version, reply(refused()));
            assert_eq!((r.error_code, r.generation_id), (31, -1));
        }
        let mut assignment = SyncGroupRequestAssignment::default();
        assignment.member_id = StrBytes::from_static_str("m-1");
        assignment.assignment = Bytes::from_static(b"partitions");
        let mut sync = SyncGroupRequest::default();
        sync.group_id = group("g");
        sync.generation_id = 4;
        sync.member_id = StrBytes::from_static_str("m-1");
        sync.assignments = vec![assignment];
        for version in versions(ApiKey::SyncGroup) {
            let (body, reply) = through(ApiKey::SyncGroup, version, &sync);
            let pb::request::Body::SyncGroup(s) = body else {
                panic!()
            };
            assert_eq!((s.generation_id, s.assignments.len()), (4, 1));
            let answer = Resp::SyncGroup(pb::SyncGroupResponse {
                assignment: Bytes::from_static(b"partitions"),
                ..Default::default()
            });
            let r: SyncGroupResponse = response(ApiKey::SyncGroup, version, reply(answer));
            assert_eq!(
                r.assignment,
                Bytes::from_static(b"partitions"),
                "v{version}"
            );
        }
    }

    #[test]
    fn heartbeat_and_leave_answer_every_version() {
        let mut hb = HeartbeatRequest::default();
        hb.group_id = group("g");
        hb.generation_id = 2;
        hb.member_id = StrBytes::from_static_str("m-1");
        for version in versions(ApiKey::Heartbeat) {
            let (_, reply) = through(ApiKey::Heartbeat, version, &hb);
            let answer = Resp::Heartbeat(pb::HeartbeatResponse { error_code: 27 });
            let r: HeartbeatResponse = response(ApiKey::Heartbeat, version, reply(answer));
            assert_eq!(r.error_code, 27, "v{version}");
        }
        let mut one = MemberIdentity::default();
        one.member_id = StrBytes::from_static_str("m-2");
        for version in versions(ApiKey::LeaveGroup) {
            let mut leave = LeaveGroupRequest::default();
            leave.group_id = group("g");
            if version >= 3 {
                leave.members = vec![one.clone()];
            } else {
                leave.member_id = StrBytes::from_static_str("m-2");
            }
            let (body, reply) = through(ApiKey::LeaveGroup, version, &leave);
            let pb::request::Body::LeaveGroup(l) = body else {
                panic!()
            };
            assert_eq!(l.member_ids, ["m-2"], "v{version}");
            let answer = Resp::LeaveGroup(pb::LeaveGroupResponse {
                error_code: 0,
                members: vec![pb::LeftMember {
                    member_id: "m-2".into(),
                    error_code: 25,
                }],
            });
            let r: LeaveGroupResponse = response(ApiKey::LeaveGroup, version, reply(answer));
            if version >= 3 {
                assert_eq!((r.error_code, r.members[0].error_code), (0, 25));
            } else {
                assert_eq!(r.error_code, 25, "v{version}: the one member's outcome");
            }
        }
    }

    #[test]
    fn commits_and_fetches_carry_offsets_epochs_and_metadata() {
        let mut p = OffsetCommitRequestPartition::default();
        p.partition_index = 1;
        p.committed_offset = 42;
        p.committed_leader_epoch = 3;
        p.committed_metadata = Some(StrBytes::from_static_str("meta"));
        let mut t = OffsetCommitRequestTopic::default();
        t.name = topic_name("orders");
        t.partitions = vec![p];
        let mut commit = OffsetCommitRequest::default();
        commit.group_id = group("g");
        commit.generation_id_or_member_epoch = 5;
        commit.member_id = StrBytes::from_static_str("m-1");
        commit.topics = vec![t];
        for version in versions(ApiKey::OffsetCommit) {
            let (body, reply) = through(ApiKey::OffsetCommit, version, &commit);
            let pb::request::Body::OffsetCommit(c) = body else {
                panic!()
            };
            let part = &c.topics[0].partitions[0];
            let epoch = if version >= 6 { 3 } else { -1 };
            assert_eq!(
                (
                    c.generation_id,
                    part.offset,
                    part.leader_epoch,
                    part.metadata.as_deref()
                ),
                (5, 42, epoch, Some("meta")),
                "v{version}"
            );
            let r: OffsetCommitResponse = response(ApiKey::OffsetCommit, version, reply(refused()));
            assert_eq!(r.topics[0].partitions[0].error_code, 31, "v{version}");
        }
        for version in versions(ApiKey::OffsetFetch) {
            let mut fetch = OffsetFetchRequest::default();
            fetch.group_id = group("g");
            let mut ft = OffsetFetchRequestTopic::default();
            ft.name = topic_name("orders");
            ft.partition_indexes = vec![1];
            fetch.topics = Some(vec![ft]);
            let (body, reply) = through(ApiKey::OffsetFetch, version, &fetch);
            let pb::request::Body::OffsetFetch(f) = body else {
                panic!()
            };
            assert!(!f.all && f.topics[0].partitions == [1]);
            let answer = Resp::OffsetFetch(pb::OffsetFetchResponse {
                error_code: 0,
                topics: vec![pb::OffsetFetchTopicResult {
                    name: "orders".into(),
                    partitions: vec![pb::FetchedOffset {
                        partition: 1,
                        offset: 42,
                        leader_epoch: 3,
                        metadata: "meta".into(),
                        error_code: 0,
                    }],
                }],
            });
            let r: OffsetFetchResponse = response(ApiKey::OffsetFetch, version, reply(answer));
            assert_eq!(r.topics[0].partitions[0].committed_offset, 42, "v{version}");
            // A request-wide error: on every partition before v2.
            let (_, reply) = through(ApiKey::OffsetFetch, version, &fetch);
            let loading = Resp::OffsetFetch(pb::OffsetFetchResponse {
                error_code: 14,
                topics: vec![],
            });
            let r: OffsetFetchResponse = response(ApiKey::OffsetFetch, version, reply(loading));
            if version >= 2 {
                assert_eq!(r.error_code, 14);
                // All of the group: a null topic list (v2+).
                fetch.topics = None;
                let (body, _) = through(ApiKey::OffsetFetch, version, &fetch);
                let pb::request::Body::OffsetFetch(f) = body else {
                    panic!()
                };
                assert!(f.all);
            }
        }
    }

    #[test]
    fn list_filters_states_and_describe_carries_members() {
        let answer = || {
            Resp::ListGroups(pb::ListGroupsResponse {
                error_code: 0,
                groups: vec![
                    pb::ListedGroup {
                        group_id: "a".into(),
                        protocol_type: "consumer".into(),
                        state: "Stable".into(),
                    },
                    pb::ListedGroup {
                        group_id: "b".into(),
                        protocol_type: "consumer".into(),
                        state: "Empty".into(),
                    },
                ],
            })
        };
        for version in versions(ApiKey::ListGroups) {
            let mut list = ListGroupsRequest::default();
            if version >= 4 {
                list.states_filter = vec![StrBytes::from_static_str("stable")];
            }
            let (_, reply) = through(ApiKey::ListGroups, version, &list);
            let r: ListGroupsResponse = response(ApiKey::ListGroups, version, reply(answer()));
            let ids: Vec<&str> = r.groups.iter().map(|g| g.group_id.0.as_str()).collect();
            let expected: &[&str] = if version >= 4 { &["a"] } else { &["a", "b"] };
            assert_eq!(ids, expected, "v{version}");
        }
        let mut describe = DescribeGroupsRequest::default();
        describe.groups = vec![group("a")];
        for version in versions(ApiKey::DescribeGroups) {
            let (_, reply) = through(ApiKey::DescribeGroups, version, &describe);
            let answer = Resp::DescribeGroups(pb::DescribeGroupsResponse {
                groups: vec![pb::DescribedGroup {
                    group_id: "a".into(),
                    state: "Stable".into(),
                    protocol_type: "consumer".into(),
                    protocol_name: "range".into(),
                    members: vec![pb::DescribedMember {
                        member_id: "m-1".into(),
                        client_id: "rdkafka".into(),
                        client_host: "127.0.0.1:5555".into(),
                        metadata: Bytes::from_static(b"s"),
                        assignment: Bytes::from_static(b"a"),
                    }],
                    ..Default::default()
                }],
            });
            let r: DescribeGroupsResponse =
                response(ApiKey::DescribeGroups, version, reply(answer));
            let g = &r.groups[0];
            assert_eq!(
                (
                    g.group_state.as_str(),
                    g.protocol_data.as_str(),
                    g.members.len()
                ),
                ("Stable", "range", 1),
                "v{version}"
            );
            assert_eq!(g.members[0].member_assignment, Bytes::from_static(b"a"));
        }
    }
}
