//! How much one auto-creating request may create.
//!
//! A Kafka client's Metadata request naming unknown topics creates them
//! (`auto_create_topics_enable`), with no more authority than describing topics
//! needs; so what one such request creates is bounded twice, on top of the
//! [`MAX_PARTITIONS_PER_REQUEST`](crate::MAX_PARTITIONS_PER_REQUEST) every
//! CreateTopics has: the partitions it creates
//! (`auto_create_topics_max_partitions_per_request`) and the cluster's partitions
//! it may take the cluster to (`auto_create_topics_max_cluster_partitions`).
//! Topics are charged in the request's order; one past a bound is refused with
//! `POLICY_VIOLATION` (what Kafka answers when its create-topic policy refuses an
//! auto-creation), those before it are created. Not `THROTTLING_QUOTA_EXCEEDED`
//! (KIP-599): that one promises the same request succeeds after a throttle time,
//! and these bounds do not refill with time. Internal topics are not charged: they
//! are created once, with settings of their own.

use syncline_proto::ErrorCode;

use crate::config::ControllerConfig;
use crate::internal_topics::is_internal;

type Refusal = (ErrorCode, String);

/// What an auto-creating request may still create.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct AutoCreateBudget {
    max_per_request: usize,
    max_cluster: usize,
    /// Partitions this request created so far.
    created: usize,
    /// Partitions in the cluster, those this request created included.
    cluster: usize,
}

impl AutoCreateBudget {
    /// The budget of a request against a cluster of `cluster_partitions`.
    pub(crate) fn new(config: &ControllerConfig, cluster_partitions: usize) -> Self {
        AutoCreateBudget {
            max_per_request: config.auto_create_max_partitions_per_request,
            max_cluster: config.auto_create_max_cluster_partitions,
            created: 0,
            cluster: cluster_partitions,
        }
    }

    /// Whether no topic can fit any more (each has a partition at least): then
    /// `topic` is refused before anything else is looked at, so that a request
    /// naming many topics costs the controller little once its budget is spent.
    #[must_use = "a refused topic must not be created"]
    pub(crate) fn spent(&self, topic: &str) -> Result<(), Refusal> {
        self.clone().take(topic, 1)
    }

    /// Charges `topic`'s `partitions`, or says which bound it would pass (and
    /// charges nothing).
    #[must_use = "a refused topic must not be created"]
    pub(crate) fn take(&mut self, topic: &str, partitions: usize) -> Result<(), Refusal> {
        if is_internal(topic) {
            return Ok(());
        }
        let created = self.created.saturating_add(partitions);
        let cluster = self.cluster.saturating_add(partitions);
        let instead = "create it with CreateTopics (syncline topic create, kafka-topics.sh \
                       --create) instead";
        if created > self.max_per_request {
            return Err((
                ErrorCode::PolicyViolation,
                format!(
                    "auto-creating topic {topic:?} ({partitions} partitions) would make this \
                     request create {created} partitions, past \
                     auto_create_topics_max_partitions_per_request = {}; {instead}",
                    self.max_per_request
                ),
            ));
        }
        if cluster > self.max_cluster {
            return Err((
                ErrorCode::PolicyViolation,
                format!(
                    "auto-creating topic {topic:?} ({partitions} partitions) would take the \
                     cluster to {cluster} partitions, past \
                     auto_create_topics_max_cluster_partitions = {}; {instead}",
                    self.max_cluster
                ),
            ));
        }
        self.created = created;
        self.cluster = cluster;
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use syncline_proto::OFFSETS_TOPIC;

    fn budget(per_request: usize, cluster_cap: usize, cluster_now: usize) -> AutoCreateBudget {
        let mut config = ControllerConfig::new(0, "c");
        config.auto_create_max_partitions_per_request = per_request;
        config.auto_create_max_cluster_partitions = cluster_cap;
        AutoCreateBudget::new(&config, cluster_now)
    }

    #[test]
    fn topics_are_charged_in_order_until_a_bound_would_be_passed() {
        // Per request 10, cluster cap 100: (per request, cap, partitions now),
        // then each topic's partitions and whether it is created (else the key the
        // refusal names).
        type Case = (
            (usize, usize, usize),
            Vec<(&'static str, usize, Result<(), &'static str>)>,
        );
        let per_request = "auto_create_topics_max_partitions_per_request";
        let cluster = "auto_create_topics_max_cluster_partitions";
        let cases: Vec<Case> = vec![
            ((10, 100, 0), vec![("a", 4, Ok(())), ("b", 6, Ok(()))]),
            (
                (10, 100, 0),
                vec![
                    ("a", 4, Ok(())),
                    ("b", 7, Err(per_request)),
                    ("c", 6, Ok(())),
                ],
            ),
            ((10, 100, 0), vec![("a", 11, Err(per_request))]),
            (
                (10, 100, 95),
                vec![("a", 5, Ok(())), ("b", 1, Err(cluster))],
            ),
            ((10, 100, 100), vec![("a", 1, Err(cluster))]),
            (
                (10, 100, 0),
                vec![("a", 10, Ok(())), ("b", 1, Err(per_request))],
            ),
            // Internal topics are not charged.
            (
                (10, 100, 95),
                vec![(OFFSETS_TOPIC, 50, Ok(())), ("a", 5, Ok(()))],
            ),
            // Overflow saturates rather than wrapping past a bound.
            ((10, 100, usize::MAX), vec![("a", 1, Err(cluster))]),
            ((10, 100, 0), vec![("a", usize::MAX, Err(per_request))]),
        ];
        for ((r, c, now), topics) in cases {
            let mut b = budget(r, c, now);
            for (topic, partitions, expected) in topics {
                let spent = b.spent(topic);
                let got = b.take(topic, partitions);
                // Only a topic that cannot fit however small is refused unseen.
                if spent.is_err() {
                    assert!(got.is_err(), "{topic}");
                }
                match expected {
                    Ok(()) => assert_eq!(got, Ok(()), "{topic} {partitions}"),
                    Err(key) => {
                        let (code, message) = got.expect_err(topic);
                        assert_eq!(code, ErrorCode::PolicyViolation);
                        assert!(message.contains(key), "{message}");
                        assert!(message.contains(topic), "{message}");
                    }
                }
            }
        }
    }
}
