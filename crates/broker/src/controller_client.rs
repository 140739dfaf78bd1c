//! The broker's side of the controller: registration and heartbeats (the broker's
//! lifecycle), and the AlterPartition sender that carries ISR proposals.

use std::sync::Arc;
use std::time::Duration;

use syncline_client::{ClientError, Connection};
use syncline_proto::{pb, ErrorCode};
use tokio::sync::{mpsc, watch};
use tokio_util::sync::CancellationToken;

use crate::config::BrokerConfig;
use crate::metadata_cache::MetadataCache;
use crate::net::Network;
use crate::partition::TopicPartition;
use crate::replica_manager::{IsrRequest, ReplicaManager};

/// How long one request to the controller may take.
const REQUEST_TIMEOUT: Duration = Duration::from_secs(10);
/// Heartbeat interval while fenced (catching up with metadata).
const FENCED_HEARTBEAT_INTERVAL: Duration = Duration::from_millis(100);
/// Pause after a failed request before the next attempt.
const RETRY_BACKOFF: Duration = Duration::from_millis(200);

/// A connection to the controller, re-established on demand.
#[derive(Debug)]
pub(crate) struct ControllerChannel {
    config: Arc<BrokerConfig>,
    network: Arc<dyn Network>,
    connection: tokio::sync::Mutex<Option<Connection>>,
}

impl ControllerChannel {
    pub(crate) fn new(config: Arc<BrokerConfig>, network: Arc<dyn Network>) -> ControllerChannel {
        ControllerChannel {
            config,
            network,
            connection: tokio::sync::Mutex::new(None),
        }
    }

    /// Sends a request to the controller.
    pub(crate) async fn send(
        &self,
        body: pb::request::Body,
    ) -> Result<pb::response::Body, ClientError> {
        let conn = {
            let mut slot = self.connection.lock().await;
            match slot.as_ref().filter(|c| !c.is_closed()) {
                Some(c) => c.clone(),
                None => {
                    let addr = self.config.controller().address.to_string();
                    let stream = tokio::time::timeout(REQUEST_TIMEOUT, self.network.connect(&addr))
                        .await
                        .map_err(|_| ClientError::ConnectTimeout(addr.clone()))?
                        .map_err(|e| ClientError::Connect(addr.clone(), e))?;
                    let c = Connection::from_stream(
                        stream,
                        &addr,
                        &format!("broker-{}", self.config.node_id),
                        self.config.socket_request_max_bytes,
                    );
                    *slot = Some(c.clone());
                    c
                }
            }
        };
        tokio::time::timeout(REQUEST_TIMEOUT, conn.send(body))
            .await
            .map_err(|_| ClientError::Timeout(REQUEST_TIMEOUT.as_millis() as u64))?
    }
}

/// What the lifecycle task reports about this broker.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct BrokerStatus {
    pub broker_epoch: i64,
    pub fenced: bool,
}

/// Registers this broker and heartbeats until `shutdown`; then, if controlled
/// shutdown is on, asks the controller to move leadership away and waits (bounded)
/// until it has.
pub(crate) async fn run_lifecycle(
    config: Arc<BrokerConfig>,
    channel: Arc<ControllerChannel>,
    rm: Arc<ReplicaManager>,
    metadata: Arc<MetadataCache>,
    status: watch::Sender<BrokerStatus>,
    shutdown: CancellationToken,
) {
    let incarnation: [u8; 16] = rand::random();
    let interval = Duration::from_millis(config.broker_heartbeat_interval_ms);
    'register: loop {
        let epoch = loop {
            if shutdown.is_cancelled() {
                return;
            }
            match register(&config, &channel, &incarnation).await {
                Ok(epoch) => break epoch,
                Err(e) => {
                    tracing::warn!(error = %e, controller = %config.controller().address, "broker registration failed; retrying");
                    tokio::select! {
                        _ = shutdown.cancelled() => return,
                        _ = tokio::time::sleep(interval.min(Duration::from_secs(1))) => {}
                    }
                }
            }
        };
        rm.set_broker_epoch(epoch);
        status.send_replace(BrokerStatus {
            broker_epoch: epoch,
            fenced: true,
        });
        tracing::info!(broker_epoch = epoch, "registered with the controller");
        loop {
            let request = pb::BrokerHeartbeatRequest {
                broker_id: config.node_id,
                broker_epoch: epoch,
                current_metadata_offset: metadata.metadata_offset(),
                want_fence: false,
                want_shutdown: false,
            };
            match channel
                .send(pb::request::Body::BrokerHeartbeat(request))
                .await
            {
                Ok(pb::response::Body::BrokerHeartbeat(r)) => {
                    match ErrorCode::from_wire(r.error_code) {
                        ErrorCode::None => {
                            let was = *status.borrow();
                            if was.fenced != r.is_fenced {
                                tracing::info!(fenced = r.is_fenced, "broker fencing changed");
                            }
                            status.send_replace(BrokerStatus {
                                broker_epoch: epoch,
                                fenced: r.is_fenced,
                            });
                        }
                        ErrorCode::StaleBrokerEpoch | ErrorCode::BrokerIdNotRegistered => {
                            tracing::warn!(error = %ErrorCode::from_wire(r.error_code), "controller no longer knows this registration; registering again");
                            continue 'register;
                        }
                        code => tracing::warn!(error = %code, "heartbeat refused"),
                    }
                }
                Ok(_) => tracing::warn!("unexpected heartbeat response"),
                Err(e) => tracing::debug!(error = %e, "heartbeat failed"),
            }
            // While fenced, check in often: the controller unfences a broker as soon
            // as a heartbeat shows it has caught up with the metadata.
            let wait = if status.borrow().fenced {
                interval.min(FENCED_HEARTBEAT_INTERVAL)
            } else {
                interval
            };
            tokio::select! {
                _ = shutdown.cancelled() => {
                    if config.controlled_shutdown_enable {
                        controlled_shutdown(&config, &channel, &metadata, epoch).await;
                    }
                    return;
                }
                _ = tokio::time::sleep(wait) => {}
            }
        }
    }
}

async fn register(
    config: &BrokerConfig,
    channel: &ControllerChannel,
    incarnation: &[u8; 16],
) -> Result<i64, String> {
    let request = pb::BrokerRegistrationRequest {
        broker_id: config.node_id,
        cluster_id: config.cluster_id.clone(),
        incarnation_id: bytes::Bytes::copy_from_slice(incarnation),
        endpoint: Some(pb::BrokerEndpoint {
            node_id: config.node_id,
            host: config.inter_broker().advertised.host.clone(),
            port: i32::from(config.inter_broker().advertised.port),
            rack: config.broker_rack.clone().unwrap_or_default(),
        }),
        metrics_address: config
            .metrics_listen
            .as_ref()
            .map(|m| m.to_string())
            .unwrap_or_default(),
        listeners: config
            .listeners
            .iter()
            .map(|l| pb::ListenerEndpoint {
                name: l.name.clone(),
                host: l.advertised.host.clone(),
                port: i32::from(l.advertised.port),
            })
            .collect(),
    };
    match channel
        .send(pb::request::Body::BrokerRegistration(request))
        .await
    {
        Ok(pb::response::Body::BrokerRegistration(r)) => match ErrorCode::from_wire(r.error_code) {
            ErrorCode::None => Ok(r.broker_epoch),
            code => Err(format!("{code}: {}", r.error_message)),
        },
        Ok(_) => Err("unexpected response".into()),
        Err(e) => Err(e.to_string()),
    }
}

async fn controlled_shutdown(
    config: &BrokerConfig,
    channel: &ControllerChannel,
    metadata: &MetadataCache,
    epoch: i64,
) {
    let deadline =
        tokio::time::Instant::now() + Duration::from_millis(config.controlled_shutdown_timeout_ms);
    while tokio::time::Instant::now() < deadline {
        let request = pb::BrokerHeartbeatRequest {
            broker_id: config.node_id,
            broker_epoch: epoch,
            current_metadata_offset: metadata.metadata_offset(),
            want_fence: false,
            want_shutdown: true,
        };
        match channel
            .send(pb::request::Body::BrokerHeartbeat(request))
            .await
        {
            Ok(pb::response::Body::BrokerHeartbeat(r)) if r.should_shutdown => {
                tracing::info!("controlled shutdown: leadership moved away");
                return;
            }
            Ok(pb::response::Body::BrokerHeartbeat(r)) if r.error_code != 0 => return,
            Ok(_) => {}
            Err(e) => {
                tracing::warn!(error = %e, "controlled shutdown: controller unreachable");
                return;
            }
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    tracing::warn!("controlled shutdown timed out");
}

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
                    rm.on_isr_result(&r.tp, Err(code));
                }
                tokio::select! {
                    _ = shutdown.cancelled() => return,
                    _ = tokio::time::sleep(RETRY_BACKOFF) => {}
                }
                continue;
            }
        };
        for t in response.topics {
            for p in t.partitions {
                let tp = TopicPartition::new(&t.name, p.partition);
                let result = match ErrorCode::from_wire(p.error_code) {
                    ErrorCode::None => Ok(crate::partition::CommittedIsr {
                        isr: p.isr,
                        leader_epoch: p.leader_epoch,
                        partition_epoch: p.partition_epoch,
                    }),
                    code => Err(code),
                };
                rm.on_isr_result(&tp, result);
            }
        }
    }
}
