//! The AlterPartition sender: carries the ISR proposals of the partitions
//! this broker leads to the controller, in batches, and applies the answers
//! (each partition's, matched to what was sent by
//! `syncline_replication::isr::match_answers`).

use std::sync::Arc;

use syncline_proto::{pb, ErrorCode};
use syncline_replication::isr;
use tokio::sync::mpsc;
use tokio_util::sync::CancellationToken;

use crate::config::BrokerConfig;
use crate::control::client::{self, ControllerChannel};
use crate::replica::manager::{IsrRequest, ReplicaManager};
use crate::replica::partition::{CommittedIsr, TopicPartition};

/// Sends ISR proposals to the controller, batching whatever is queued into one
/// AlterPartition request, and applies the answers. A partition has at most one
/// proposal in flight (its leader state refuses a second).
pub(crate) async fn run_alter_partition(
    config: Arc<BrokerConfig>,
    channel: Arc<ControllerChannel>,
    rm: Arc<ReplicaManager>,
    mut requests: mpsc::UnboundedReceiver<IsrRequest>,
    shutdown: CancellationToken,
) {
    loop {
        let first = tokio::select! {
            _ = shutdown.cancelled() => return,
            r = requests.recv() => match r { Some(r) => r, None => return },
        };
        let mut batch = vec![first];
        while let Ok(more) = requests.try_recv() {
            batch.push(more);
        }
        let mut topics: Vec<pb::AlterPartitionTopic> = Vec::new();
        for r in &batch {
            let p = pb::AlterPartitionPartition {
                partition: r.tp.partition,
                leader_epoch: r.proposal.leader_epoch,
                new_isr_with_epochs: r
                    .proposal
                    .members
                    .iter()
                    .map(|(broker_id, broker_epoch)| pb::BrokerState {
                        broker_id: *broker_id,
                        broker_epoch: *broker_epoch,
                    })
                    .collect(),
                partition_epoch: r.proposal.partition_epoch,
            };
            match topics.iter_mut().find(|t| *t.name == *r.tp.topic) {
                Some(t) => t.partitions.push(p),
                None => topics.push(pb::AlterPartitionTopic {
                    name: r.tp.topic.to_string(),
                    partitions: vec![p],
                }),
            }
        }
        let request = pb::AlterPartitionRequest {
            broker_id: config.node_id,
            broker_epoch: rm.broker_epoch(),
            topics,
        };
        let answer = channel
            .send(pb::request::Body::AlterPartition(request))
            .await;
        let response = match answer {
            Ok(pb::response::Body::AlterPartition(r)) if r.error_code == 0 => r,
            other => {
                let code = match other {
                    Ok(pb::response::Body::AlterPartition(r)) => ErrorCode::from_wire(r.error_code),
                    _ => ErrorCode::NetworkException,
                };
                for r in &batch {
                    rm.on_isr_result(&r.tp, &r.proposal, Err(code));
                }
                tokio::select! {
                    _ = shutdown.cancelled() => return,
                    _ = tokio::time::sleep(client::RETRY_BACKOFF) => {}
                }
                continue;
            }
        };
        let mut answers = Vec::new();
        for t in response.topics {
            for p in t.partitions {
                let tp = TopicPartition::new(&t.name, p.partition);
                let result = match ErrorCode::from_wire(p.error_code) {
                    ErrorCode::None => Ok(CommittedIsr {
                        isr: p.isr,
                        leader_epoch: p.leader_epoch,
                        partition_epoch: p.partition_epoch,
                    }),
                    code => Err(code),
                };
                answers.push((tp, result));
            }
        }
        let sent: Vec<TopicPartition> = batch.iter().map(|r| r.tp.clone()).collect();
        // One result per request, in the order sent.
        for (r, (tp, result)) in batch.iter().zip(isr::match_answers(&sent, answers)) {
            rm.on_isr_result(&tp, &r.proposal, result);
        }
    }
}
