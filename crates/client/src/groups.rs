//! Consumer groups as an operator sees them (Kafka's `kafka-consumer-groups
//! --list` and `--describe`): which groups exist, their members and
//! assignments, their committed offsets and the lag behind each partition's
//! high watermark.

use std::collections::BTreeMap;
use std::time::Duration;

use bytes::Bytes;
use kafka_protocol::messages::ConsumerProtocolAssignment;
use kafka_protocol::protocol::Decodable;
use syncline_proto::{pb, ErrorCode, TopicPartition};
use tokio::time::Instant;

use crate::admin::Admin;
use crate::cluster::{expect_body, Cluster};
use crate::error::ClientError;

/// A group, as its coordinator lists it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct GroupListing {
    /// The group id.
    pub group_id: String,
    /// `consumer` for Kafka consumers; empty for a group that only commits.
    pub protocol_type: String,
    /// Kafka's state names: Empty, PreparingRebalance, CompletingRebalance,
    /// Stable, Dead.
    pub state: String,
    /// The broker coordinating it.
    pub coordinator: i32,
}

/// A member of a group.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct GroupMember {
    /// The id the coordinator gave it.
    pub member_id: String,
    /// The `client.id` it connected with.
    pub client_id: String,
    /// The address it connected from.
    pub client_host: String,
    /// The partitions assigned to it (decoded for `consumer` groups).
    pub assignment: Vec<TopicPartition>,
}

/// A partition's committed offset in a group and its lag.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct GroupOffset {
    /// The partition.
    pub partition: TopicPartition,
    /// The group's committed offset: the next record it will read.
    pub committed: i64,
    /// The partition's high watermark; None when its leader could not say.
    pub log_end: Option<i64>,
    /// `log_end - committed`.
    pub lag: Option<i64>,
    /// The member assigned the partition now, if any.
    pub member_id: Option<String>,
}

/// A group with its members and offsets.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct GroupDescription {
    /// The group id.
    pub group_id: String,
    /// Kafka's state names (see [`GroupListing::state`]).
    pub state: String,
    /// `consumer` for Kafka consumers.
    pub protocol_type: String,
    /// The assignor the members agreed on (e.g. `range`).
    pub protocol: String,
    /// The broker coordinating it.
    pub coordinator: i32,
    /// Its members now.
    pub members: Vec<GroupMember>,
    /// Every partition it committed an offset for.
    pub offsets: Vec<GroupOffset>,
}

/// The partitions in a `consumer` group member's assignment (Kafka's
/// ConsumerProtocol Assignment, any version); empty if it does not decode.
pub(crate) fn decode_assignment(bytes: &Bytes) -> Vec<TopicPartition> {
    let Some(a) = decode_versioned::<ConsumerProtocolAssignment>(bytes, 3) else {
        return vec![];
    };
    a.assigned_partitions
        .iter()
        .flat_map(|t| {
            t.partitions
                .iter()
                .map(|&p| TopicPartition::new(t.topic.0.as_str(), p))
        })
        .collect()
}

/// The broker coordinating `group_id`, retrying retriable answers (the
/// coordinator being created, elected or loaded) until `deadline`.
pub(crate) async fn find_coordinator(
    cluster: &Cluster,
    group_id: &str,
    deadline: Instant,
) -> Result<i32, ClientError> {
    let backoff = cluster.config.retry_backoff();
    let mut failures = 0;
    loop {
        let found = cluster
            .send_any(pb::request::Body::FindCoordinator(
                pb::FindCoordinatorRequest {
                    key: group_id.to_string(),
                    key_type: 0,
                },
            ))
            .await
            .and_then(|body| expect_body!(body, FindCoordinator));
        let error = match found {
            Ok(found) => match (ErrorCode::from_wire(found.error_code), found.coordinator) {
                (ErrorCode::None, Some(c)) => return Ok(c.node_id),
                (code, _) => ClientError::Protocol {
                    code,
                    message: found.error_message,
                },
            },
            Err(e) => e,
        };
        if !error.is_retriable() || Instant::now() >= deadline {
            return Err(error);
        }
        tokio::time::sleep(backoff.delay(failures)).await;
        failures += 1;
    }
}

/// `bytes` (Kafka's ConsumerProtocol messages start with their version) as
/// `T`; None if it does not decode.
pub(crate) fn decode_versioned<T: Decodable>(bytes: &Bytes, max_version: i16) -> Option<T> {
    if bytes.len() < 2 {
        return None;
    }
    let version = i16::from_be_bytes([bytes[0], bytes[1]]);
    let mut buf = bytes.slice(2..);
    T::decode(&mut buf, version.clamp(0, max_version)).ok()
}

impl Admin {
    /// Every group of the cluster: each broker lists the groups it coordinates.
    pub async fn list_groups(&self) -> Result<Vec<GroupListing>, ClientError> {
        let cluster = self.describe_cluster().await?;
        let mut groups = Vec::new();
        for b in cluster.brokers.iter().filter(|b| !b.fenced) {
            let id = b.endpoint.id;
            let body = self
                .cluster()
                .send_to(id, pb::request::Body::ListGroups(pb::ListGroupsRequest {}))
                .await?;
            let listed = expect_body!(body, ListGroups)?;
            groups.extend(listed.groups.into_iter().map(|g| GroupListing {
                group_id: g.group_id,
                protocol_type: g.protocol_type,
                state: g.state,
                coordinator: id,
            }));
        }
        groups.sort_by(|a, b| a.group_id.cmp(&b.group_id));
        Ok(groups)
    }

    /// The broker coordinating `group_id`, retrying while its coordinator is
    /// being created, elected or loaded (within `request_timeout_ms`).
    pub async fn find_coordinator(&self, group_id: &str) -> Result<i32, ClientError> {
        let deadline = Instant::now() + self.cluster().config.request_timeout();
        find_coordinator(self.cluster(), group_id, deadline).await
    }

    /// A group's state, members, assignments, committed offsets and lag.
    pub async fn describe_group(&self, group_id: &str) -> Result<GroupDescription, ClientError> {
        let deadline = Instant::now() + self.cluster().config.request_timeout();
        let (coordinator, described, fetched) = loop {
            let coordinator = self.find_coordinator(group_id).await?;
            let described = self
                .cluster()
                .send_to(
                    coordinator,
                    pb::request::Body::DescribeGroups(pb::DescribeGroupsRequest {
                        group_ids: vec![group_id.to_string()],
                    }),
                )
                .await
                .and_then(|b| expect_body!(b, DescribeGroups))?
                .groups
                .into_iter()
                .next()
                .ok_or(ClientError::UnexpectedResponse("DescribeGroups"))?;
            let fetched = self
                .cluster()
                .send_to(
                    coordinator,
                    pb::request::Body::OffsetFetch(pb::OffsetFetchRequest {
                        group_id: group_id.to_string(),
                        topics: vec![],
                        all: true,
                    }),
                )
                .await
                .and_then(|b| expect_body!(b, OffsetFetch))?;
            let code = match ErrorCode::from_wire(described.error_code) {
                ErrorCode::None => ErrorCode::from_wire(fetched.error_code),
                code => code,
            };
            match code {
                ErrorCode::None => break (coordinator, described, fetched),
                // The coordinator moved or is loading: find it again.
                code if code.is_retriable() && Instant::now() < deadline => {
                    tokio::time::sleep(Duration::from_millis(
                        self.cluster().config.retry_backoff_ms,
                    ))
                    .await;
                }
                code => {
                    return Err(ClientError::Protocol {
                        code,
                        message: format!("group {group_id}"),
                    })
                }
            }
        };
        let members: Vec<GroupMember> = described
            .members
            .into_iter()
            .map(|m| GroupMember {
                assignment: if described.protocol_type == "consumer" {
                    decode_assignment(&m.assignment)
                } else {
                    vec![]
                },
                member_id: m.member_id,
                client_id: m.client_id,
                client_host: m.client_host,
            })
            .collect();
        let owner: BTreeMap<&TopicPartition, &str> = members
            .iter()
            .flat_map(|m| m.assignment.iter().map(|tp| (tp, m.member_id.as_str())))
            .collect();
        let committed: Vec<(TopicPartition, i64)> = fetched
            .topics
            .iter()
            .flat_map(|t| {
                t.partitions
                    .iter()
                    .filter(|p| p.offset >= 0)
                    .map(|p| (TopicPartition::new(&t.name, p.partition), p.offset))
            })
            .collect();
        let ends = self
            .high_watermarks(committed.iter().map(|(tp, _)| tp))
            .await;
        let offsets = committed
            .into_iter()
            .map(|(tp, committed)| {
                let log_end = ends.get(&tp).copied();
                GroupOffset {
                    member_id: owner.get(&tp).map(|m| m.to_string()),
                    lag: log_end.map(|end| (end - committed).max(0)),
                    log_end,
                    committed,
                    partition: tp,
                }
            })
            .collect();
        Ok(GroupDescription {
            group_id: described.group_id,
            state: described.state,
            protocol_type: described.protocol_type,
            protocol: described.protocol_name,
            coordinator,
            members,
            offsets,
        })
    }

    /// The high watermarks of `partitions`, asked of their leaders; those whose
    /// leader could not answer are left out.
    async fn high_watermarks<'a>(
        &self,
        partitions: impl Iterator<Item = &'a TopicPartition>,
    ) -> BTreeMap<TopicPartition, i64> {
        let partitions: Vec<&TopicPartition> = partitions.collect();
        let topics: Vec<String> = {
            let mut t: Vec<String> = partitions.iter().map(|tp| tp.topic.to_string()).collect();
            t.dedup();
            t
        };
        let mut ends = BTreeMap::new();
        if topics.is_empty() || self.cluster().refresh_metadata(topics).await.is_err() {
            return ends;
        }
        let mut by_leader: BTreeMap<i32, BTreeMap<String, Vec<pb::ListOffsetsPartition>>> =
            BTreeMap::new();
        for tp in partitions {
            if let Some((leader, epoch)) = self.cluster().with_metadata(|m| m.leader(tp)) {
                by_leader
                    .entry(leader)
                    .or_default()
                    .entry(tp.topic.to_string())
                    .or_default()
                    .push(pb::ListOffsetsPartition {
                        partition: tp.partition,
                        current_leader_epoch: Some(epoch),
                        timestamp: syncline_proto::LATEST_TIMESTAMP,
                    });
            }
        }
        for (leader, topics) in by_leader {
            let request = pb::ListOffsetsRequest {
                replica_id: syncline_proto::CONSUMER_REPLICA_ID,
                isolation_level: pb::IsolationLevel::ReadUncommitted as i32,
                topics: topics
                    .into_iter()
                    .map(|(name, partitions)| pb::ListOffsetsTopic { name, partitions })
                    .collect(),
            };
            let answer = tokio::time::timeout(
                Duration::from_millis(self.cluster().config.request_timeout_ms),
                self.cluster()
                    .send_to(leader, pb::request::Body::ListOffsets(request)),
            )
            .await;
            let Ok(Ok(pb::response::Body::ListOffsets(r))) = answer else {
                continue;
            };
            for t in r.topics {
                for p in t.partitions.iter().filter(|p| p.error_code == 0) {
                    ends.insert(TopicPartition::new(&t.name, p.partition), p.offset);
                }
            }
        }
        ends
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use kafka_protocol::messages::consumer_protocol_assignment::TopicPartition as Assigned;
    use kafka_protocol::messages::TopicName;
    use kafka_protocol::protocol::{Encodable, StrBytes};

    #[test]
    fn a_consumer_assignment_decodes_in_every_version_and_garbage_to_nothing() {
        for version in 0..=3i16 {
            let mut t = Assigned::default();
            t.topic = TopicName(StrBytes::from_static_str("orders"));
            t.partitions = vec![0, 2];
            let mut a = ConsumerProtocolAssignment::default();
            a.assigned_partitions = vec![t];
            let mut buf = bytes::BytesMut::new();
            bytes::BufMut::put_i16(&mut buf, version);
            a.encode(&mut buf, version).unwrap();
            assert_eq!(
                decode_assignment(&buf.freeze()),
                [
                    TopicPartition::new("orders", 0),
                    TopicPartition::new("orders", 2)
                ],
                "v{version}"
            );
        }
        assert!(decode_assignment(&Bytes::from_static(b"\x00\x00\x7f\xff\xff\xff")).is_empty());
        assert!(decode_assignment(&Bytes::new()).is_empty());
    }
}
