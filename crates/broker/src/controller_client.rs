//! The broker's side of the controller: the I/O shell of the broker's lifecycle
//! ([`crate::lifecycle`]: registration, heartbeats, controlled shutdown), and the
//! AlterPartition sender that carries ISR proposals.

use std::sync::Arc;
use std::time::Duration;

use syncline_client::{ClientError, Connection};
use syncline_proto::{pb, ErrorCode};
use tokio::sync::{mpsc, watch};
use tokio_util::sync::CancellationToken;

use crate::config::BrokerConfig;
pub(crate) use crate::lifecycle::BrokerStatus;
use crate::lifecycle::{
    Action, Event, HeartbeatAnswer, Lifecycle, LifecycleConfig, State, StopReason,
};
use crate::metadata_cache::MetadataCache;
use crate::net::Network;
use crate::partition::TopicPartition;
use crate::replica_manager::{IsrRequest, ReplicaManager};

/// How long one request to the controller may take.
const REQUEST_TIMEOUT: Duration = Duration::from_secs(10);
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

/// Registers this broker and heartbeats until `shutdown`; then, if controlled
/// shutdown is on, asks the controller to move leadership away and waits (bounded)
/// until it has. The I/O shell of [`Lifecycle`]: it sends what the machine asks
/// for, publishes the status it reports, and feeds every outcome back.
pub(crate) async fn run_lifecycle(
    config: Arc<BrokerConfig>,
    channel: Arc<ControllerChannel>,
    rm: Arc<ReplicaManager>,
    metadata: Arc<MetadataCache>,
    status: watch::Sender<BrokerStatus>,
    shutdown: CancellationToken,
) {
    let incarnation: [u8; 16] = rand::random();
    let mut lifecycle = Lifecycle::new(LifecycleConfig {
        heartbeat_interval: Duration::from_millis(config.broker_heartbeat_interval_ms),
        controlled_shutdown_timeout: config
            .controlled_shutdown_enable
            .then(|| Duration::from_millis(config.controlled_shutdown_timeout_ms)),
    });
    let mut action = Action::Register;
    let mut told_shutdown = false;
    loop {
        let event = if shutdown.is_cancelled() && !told_shutdown {
            told_shutdown = true;
            Event::Shutdown
        } else {
            match action {
                Action::Register => match register(&config, &channel, &incarnation).await {
                    Ok(broker_epoch) => Event::Registered { broker_epoch },
                    Err(e) => {
                        tracing::warn!(error = %e, controller = %config.controller().address, "broker registration failed; retrying");
                        Event::RegistrationFailed
                    }
                },
                Action::Heartbeat {
                    broker_epoch,
                    want_shutdown,
                } => Event::Heartbeat(
                    heartbeat(&config, &channel, &metadata, broker_epoch, want_shutdown).await,
                ),
                Action::SleepUntil(until) if told_shutdown => {
                    tokio::time::sleep_until(until).await;
                    Event::Timer
                }
                Action::SleepUntil(until) => tokio::select! {
                    _ = shutdown.cancelled() => continue,
                    _ = tokio::time::sleep_until(until) => Event::Timer,
                },
                Action::Stop(reason) => {
                    match reason {
                        StopReason::Shutdown => {}
                        StopReason::LeadershipMoved => {
                            tracing::info!("controlled shutdown: leadership moved away")
                        }
                        StopReason::Refused(code) => {
                            tracing::warn!(error = %code, "controlled shutdown: heartbeat refused")
                        }
                        StopReason::ControllerUnreachable => {
                            tracing::warn!("controlled shutdown: controller unreachable")
                        }
                        StopReason::TimedOut => tracing::warn!("controlled shutdown timed out"),
                    }
                    return;
                }
            }
        };
        let was = lifecycle.state();
        let step = lifecycle.on_event(event, tokio::time::Instant::now());
        if let Some(s) = step.status {
            match was {
                State::Registering => {
                    tracing::info!(
                        broker_epoch = s.broker_epoch,
                        "registered with the controller"
                    )
                }
                _ if status.borrow().fenced != s.fenced => {
                    tracing::info!(fenced = s.fenced, "broker fencing changed")
                }
                _ => {}
            }
            rm.set_broker_epoch(s.broker_epoch);
            status.send_replace(s);
        }
        if let Event::Heartbeat(HeartbeatAnswer::Error(code)) = event {
            match (was, lifecycle.state()) {
                (State::Fenced { .. } | State::Unfenced { .. }, State::Registering) => {
                    tracing::warn!(error = %code, "controller no longer knows this registration; registering again")
                }
                (State::Fenced { .. } | State::Unfenced { .. }, _) => {
                    tracing::warn!(error = %code, "heartbeat refused")
                }
                _ => {}
            }
        }
        action = step.action;
    }
}

/// Sends one heartbeat and says how it ended.
async fn heartbeat(
    config: &BrokerConfig,
    channel: &ControllerChannel,
    metadata: &MetadataCache,
    broker_epoch: i64,
    want_shutdown: bool,
) -> HeartbeatAnswer {
    let request = pb::BrokerHeartbeatRequest {
        broker_id: config.node_id,
        broker_epoch,
        current_metadata_offset: metadata.metadata_offset(),
        want_fence: false,
        want_shutdown,
    };
    match channel
        .send(pb::request::Body::BrokerHeartbeat(request))
        .await
    {
        Ok(pb::response::Body::BrokerHeartbeat(r)) => match ErrorCode::from_wire(r.error_code) {
            ErrorCode::None => HeartbeatAnswer::Ok {
                is_fenced: r.is_fenced,
                should_shutdown: r.should_shutdown,
            },
            code => HeartbeatAnswer::Error(code),
        },
        Ok(_) => {
            tracing::warn!("unexpected heartbeat response");
            HeartbeatAnswer::Unexpected
        }
        Err(e) => {
            tracing::debug!(error = %e, "heartbeat failed");
            HeartbeatAnswer::Unreachable
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
