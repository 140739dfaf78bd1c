//! Building metadata records, and reading back what a list of records changed.

use std::collections::BTreeSet;

use syncline_proto::pb::{self, metadata_record::Record};
use syncline_proto::TopicPartition;

use crate::image::PartitionRegistration;

/// The partitions a list of records changes (created or altered), sorted and
/// deduplicated: after applying them, send their new state to their replicas (see
/// [`MetadataImage::partition_states_by_broker`](crate::MetadataImage::partition_states_by_broker)).
pub fn changed_partitions(records: &[pb::MetadataRecord]) -> Vec<TopicPartition> {
    let set: BTreeSet<TopicPartition> = records
        .iter()
        .filter_map(|r| match &r.record {
            Some(Record::Partition(p)) => Some(TopicPartition::new(&p.topic, p.partition)),
            _ => None,
        })
        .collect();
    set.into_iter().collect()
}

/// The brokers a list of records registers, fences or unfences, sorted and
/// deduplicated: the cluster's broker list changed for them.
pub fn changed_brokers(records: &[pb::MetadataRecord]) -> Vec<i32> {
    let set: BTreeSet<i32> = records
        .iter()
        .filter_map(|r| match &r.record {
            Some(Record::RegisterBroker(b)) => Some(b.broker_id),
            Some(Record::FenceBroker(b)) => Some(b.broker_id),
            Some(Record::UnfenceBroker(b)) => Some(b.broker_id),
            _ => None,
        })
        .collect();
    set.into_iter().collect()
}

/// The topics whose configs a list of records changes, sorted and deduplicated:
/// announce their new configs to every broker.
pub fn changed_topic_configs(records: &[pb::MetadataRecord]) -> Vec<String> {
    let set: BTreeSet<&str> = records
        .iter()
        .filter_map(|r| match &r.record {
            Some(Record::TopicConfig(t)) => Some(t.name.as_str()),
            _ => None,
        })
        .collect();
    set.into_iter().map(str::to_owned).collect()
}

/// The topics a list of records deletes, with their topic ids, in order: tell
/// every broker to drop them.
pub fn deleted_topics(records: &[pb::MetadataRecord]) -> Vec<pb::DeletedTopic> {
    records
        .iter()
        .filter_map(|r| match &r.record {
            Some(Record::RemoveTopic(t)) => Some(pb::DeletedTopic {
                name: t.name.clone(),
                topic_id: t.topic_id,
            }),
            _ => None,
        })
        .collect()
}

fn record(r: Record) -> pb::MetadataRecord {
    pb::MetadataRecord { record: Some(r) }
}

pub(crate) fn partition_record(
    tp: &TopicPartition,
    p: &PartitionRegistration,
) -> pb::MetadataRecord {
    record(Record::Partition(pb::PartitionRecord {
        topic: tp.topic.to_string(),
        partition: tp.partition,
        replicas: p.replicas.clone(),
        isr: p.isr.clone(),
        leader: p.leader,
        leader_epoch: p.leader_epoch,
        partition_epoch: p.partition_epoch,
        adding_replicas: p.adding_replicas.clone(),
        removing_replicas: p.removing_replicas.clone(),
    }))
}

pub(crate) fn topic_record(
    name: &str,
    configs: &std::collections::BTreeMap<String, String>,
) -> pb::MetadataRecord {
    record(Record::Topic(pb::TopicRecord {
        name: name.to_owned(),
        configs: configs.clone().into_iter().collect(),
    }))
}

pub(crate) fn topic_config_record(
    name: &str,
    configs: &std::collections::BTreeMap<String, String>,
) -> pb::MetadataRecord {
    record(Record::TopicConfig(pb::TopicConfigRecord {
        name: name.to_owned(),
        configs: configs.clone().into_iter().collect(),
    }))
}

pub(crate) fn register_broker_record(r: pb::RegisterBrokerRecord) -> pb::MetadataRecord {
    record(Record::RegisterBroker(r))
}

pub(crate) fn fence_broker_record(broker_id: i32, broker_epoch: i64) -> pb::MetadataRecord {
    record(Record::FenceBroker(pb::FenceBrokerRecord {
        broker_id,
        broker_epoch,
    }))
}

pub(crate) fn unfence_broker_record(broker_id: i32, broker_epoch: i64) -> pb::MetadataRecord {
    record(Record::UnfenceBroker(pb::UnfenceBrokerRecord {
        broker_id,
        broker_epoch,
    }))
}

pub(crate) fn controller_start_record(
    controller_id: i32,
    controller_epoch: i32,
) -> pb::MetadataRecord {
    record(Record::ControllerStart(pb::ControllerStartRecord {
        controller_id,
        controller_epoch,
    }))
}

pub(crate) fn producer_ids_record(
    broker_id: i32,
    broker_epoch: i64,
    next_producer_id: i64,
) -> pb::MetadataRecord {
    record(Record::ProducerIds(pb::ProducerIdsRecord {
        broker_id,
        broker_epoch,
        next_producer_id,
    }))
}

pub(crate) fn remove_topic_record(name: &str, topic_id: i64) -> pb::MetadataRecord {
    record(Record::RemoveTopic(pb::RemoveTopicRecord {
        name: name.to_owned(),
        topic_id,
    }))
}

/// Whether a list of records sets or removes a user credential or an ACL: the
/// brokers need the whole security image again (`LeaderAndIsr.security`).
pub fn security_changed(records: &[pb::MetadataRecord]) -> bool {
    records.iter().any(|r| {
        matches!(
            r.record,
            Some(
                Record::UserScramCredential(_)
                    | Record::RemoveUserScramCredential(_)
                    | Record::Acl(_)
                    | Record::RemoveAcl(_)
            )
        )
    })
}

pub(crate) fn user_scram_credential_record(c: &pb::ScramCredential) -> pb::MetadataRecord {
    record(Record::UserScramCredential(pb::UserScramCredentialRecord {
        credential: Some(c.clone()),
    }))
}

pub(crate) fn remove_user_scram_credential_record(
    name: &str,
    mechanism: &str,
) -> pb::MetadataRecord {
    record(Record::RemoveUserScramCredential(
        pb::RemoveUserScramCredentialRecord {
            name: name.to_owned(),
            mechanism: mechanism.to_owned(),
        },
    ))
}

pub(crate) fn acl_record(acl: &syncline_auth::acl::AclBinding) -> pb::MetadataRecord {
    record(Record::Acl(pb::AclRecord {
        acl: Some(acl.to_pb()),
    }))
}

pub(crate) fn remove_acl_record(acl: &syncline_auth::acl::AclBinding) -> pb::MetadataRecord {
    record(Record::RemoveAcl(pb::RemoveAclRecord {
        acl: Some(acl.to_pb()),
    }))
}

/// Whether a list of records sets or removes a client quota: the brokers need
/// the whole quota image again (`LeaderAndIsr.client_quotas`).
pub fn client_quotas_changed(records: &[pb::MetadataRecord]) -> bool {
    records
        .iter()
        .any(|r| matches!(r.record, Some(Record::ClientQuota(_))))
}

/// `entity`'s `key` set to `value`, or removed (`None`).
pub(crate) fn client_quota_record(
    entity: &crate::client_quotas::ClientQuotaEntity,
    key: crate::client_quotas::QuotaKey,
    value: Option<f64>,
) -> pb::MetadataRecord {
    record(Record::ClientQuota(pb::ClientQuotaRecord {
        entity: entity.to_pb(),
        key: key.name().to_owned(),
        value: value.unwrap_or(0.0),
        remove: value.is_none(),
    }))
}
