//! `DeleteTopics`: one `RemoveTopicRecord` per topic.

use std::collections::BTreeMap;

use syncline_proto::{pb, ErrorCode};

use super::{Controller, ControllerResult};
use crate::internal_topics;
use crate::records;

impl Controller {
    /// `DeleteTopics`. Per topic: NONE and a `RemoveTopicRecord` (the brokers drop
    /// its partitions, waiting requests included, and delete their copies; the name
    /// is free at once, and a topic created under it gets another topic id, so no
    /// broker can take a deleted copy for the new topic's);
    /// UNKNOWN_TOPIC_OR_PARTITION when there is no such topic; INVALID_REQUEST
    /// when the request names it twice; POLICY_VIOLATION for an internal topic
    /// (`internal_topics::deletion`). A reassignment in progress goes with the
    /// topic, as in Kafka.
    pub fn delete_topics(
        &self,
        req: &pb::DeleteTopicsRequest,
    ) -> ControllerResult<pb::DeleteTopicsResponse> {
        let mut counts: BTreeMap<&str, usize> = BTreeMap::new();
        for name in &req.topics {
            *counts.entry(name.as_str()).or_default() += 1;
        }
        let mut records = Vec::new();
        let topics = req
            .topics
            .iter()
            .map(|name| {
                let result = |code: ErrorCode, message: String| pb::DeletableTopicResult {
                    name: name.clone(),
                    error_code: code as i32,
                    error_message: message,
                };
                if counts[name.as_str()] > 1 {
                    return result(
                        ErrorCode::InvalidRequest,
                        format!("topic {name:?} appears more than once in the request"),
                    );
                }
                let Some(topic) = self.image.topic(name) else {
                    return result(
                        ErrorCode::UnknownTopicOrPartition,
                        format!("topic {name:?} does not exist"),
                    );
                };
                if let Err((code, message)) = internal_topics::deletion(name) {
                    return result(code, message);
                }
                tracing::info!(topic = %name, topic_id = topic.topic_id, partitions = topic.partitions.len(), "deleting topic");
                records.push(records::remove_topic_record(name, topic.topic_id));
                result(ErrorCode::None, String::new())
            })
            .collect();
        ControllerResult::new(
            pb::DeleteTopicsResponse {
                error_code: ErrorCode::None as i32,
                error_message: String::new(),
                topics,
            },
            records,
        )
    }
}
