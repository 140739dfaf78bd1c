//! Broker-wide rules of ISR changes, around the per-partition ones of
//! [`LeaderState`](crate::partition::leader_state::LeaderState):
//! - [`eligible`]: whether the controller would take a follower into an ISR
//!   (KIP-841), which the leader checks before it proposes one;
//! - [`match_answers`]: the controller's AlterPartition answer, one result
//!   for each partition sent.

use syncline_proto::{ErrorCode, TopicPartition};

use crate::partition::AlterPartitionResult;

/// A broker as the metadata shows it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Registration {
    /// Fenced: not heartbeating, or not caught up with the metadata.
    pub fenced: bool,
    /// The epoch of its current registration.
    pub broker_epoch: i64,
}

/// Whether the controller would take `broker` into an ISR (KIP-841):
/// registered, unfenced, and, when its fetch named the broker epoch it runs
/// in (`fetched_in`), that epoch is its current registration's (a broker
/// that restarted fetches in a new one; an old fetch must not bring it back).
/// A fetch that named none (an older follower) is judged on the rest.
#[must_use]
pub fn eligible(registration: Option<Registration>, fetched_in: Option<i64>) -> bool {
    registration
        .is_some_and(|r| !r.fenced && fetched_in.is_none_or(|epoch| epoch == r.broker_epoch))
}

/// A fetch's `replica_epoch` from the wire: -1 (or any negative) when the
/// follower named none.
#[must_use]
pub fn named_broker_epoch(replica_epoch: i64) -> Option<i64> {
    (replica_epoch >= 0).then_some(replica_epoch)
}

/// One result for each partition of an AlterPartition request, in the order
/// sent: its answer, or `UNKNOWN_SERVER_ERROR` when the controller left it
/// out (the leader then retries after its backoff rather than wait for the
/// next LeaderAndIsr, as a fetch left out of an answer is retried). Answers
/// for partitions not sent are dropped; of two for one partition the first
/// counts.
#[must_use]
pub fn match_answers(
    sent: &[TopicPartition],
    answers: Vec<(TopicPartition, AlterPartitionResult)>,
) -> Vec<(TopicPartition, AlterPartitionResult)> {
    let mut answers: Vec<Option<(TopicPartition, AlterPartitionResult)>> =
        answers.into_iter().map(Some).collect();
    sent.iter()
        .map(|tp| {
            let found = answers
                .iter_mut()
                .find(|a| a.as_ref().is_some_and(|(t, _)| t == tp))
                .and_then(Option::take);
            match found {
                Some(answer) => answer,
                None => (tp.clone(), Err(ErrorCode::UnknownServerError)),
            }
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::partition::CommittedIsr;

    /// Kafka's PartitionTest "testIsrNotExpandedIfReplicaIsFencedOrShutdown"
    /// and the KIP-841 broker epoch check.
    #[test]
    fn only_a_registered_unfenced_broker_in_its_current_epoch_is_eligible() {
        let live = Some(Registration {
            fenced: false,
            broker_epoch: 7,
        });
        let fenced = Some(Registration {
            fenced: true,
            broker_epoch: 7,
        });
        for (name, registration, fetched_in, want) in [
            ("live, current epoch", live, Some(7), true),
            ("live, no epoch named", live, None, true),
            ("live, an old epoch", live, Some(6), false),
            ("live, a newer epoch than known", live, Some(8), false),
            ("fenced", fenced, Some(7), false),
            ("fenced, no epoch named", fenced, None, false),
            ("not registered", None, None, false),
        ] {
            assert_eq!(eligible(registration, fetched_in), want, "{name}");
        }
        assert_eq!(named_broker_epoch(-1), None);
        assert_eq!(named_broker_epoch(0), Some(0));
        assert_eq!(named_broker_epoch(7), Some(7));
    }

    #[test]
    fn every_partition_sent_gets_one_result_and_a_left_out_one_fails() {
        let tp = |p| TopicPartition::new("t", p);
        let ok = |epoch| {
            Ok(CommittedIsr {
                isr: vec![1, 2],
                leader_epoch: 3,
                partition_epoch: epoch,
            })
        };
        let got = match_answers(
            &[tp(0), tp(1), tp(2)],
            vec![
                (tp(2), Err(ErrorCode::FencedLeaderEpoch)),
                (tp(9), ok(1)),
                (tp(0), ok(5)),
                (tp(0), ok(6)),
            ],
        );
        assert_eq!(
            got,
            vec![
                (tp(0), ok(5)),
                (tp(1), Err(ErrorCode::UnknownServerError)),
                (tp(2), Err(ErrorCode::FencedLeaderEpoch)),
            ]
        );
    }
}
