//! The broker's side of the controller: the channel to the active controller
//! (which the AlterPartition sender, `replica::alter_partition`, also uses),
//! and the I/O shell of the broker's lifecycle
//! ([`syncline_replication::lifecycle`]: registration, heartbeats, controlled
//! shutdown), which publishes the broker epoch the replica layer reads.

use std::sync::atomic::{AtomicI64, Ordering};
use std::sync::Arc;
use std::time::Duration;

use syncline_client::{ClientError, Connection};
use syncline_proto::{pb, ErrorCode};
use tokio::sync::watch;
use tokio_util::sync::CancellationToken;

use crate::config::BrokerConfig;
use crate::control::metadata_cache::MetadataCache;
use crate::net::Network;
pub(crate) use syncline_replication::lifecycle::BrokerStatus;
use syncline_replication::lifecycle::{
    Action, Event, HeartbeatAnswer, Lifecycle, LifecycleConfig, State, StopReason,
};

/// How long one request to the controller may take, following NOT_CONTROLLER hints
/// and trying other voters included.
const REQUEST_TIMEOUT: Duration = Duration::from_secs(10);
/// How long one attempt at one voter may take: enough for the active controller
/// to commit (or give up committing) a change; an attempt at a voter that stopped
/// answering ends sooner, as soon as another controller announces itself.
fn attempt_timeout(config: &BrokerConfig) -> Duration {
    Duration::from_millis(
        config.controller_quorum_commit_timeout_ms + config.controller_quorum_request_timeout_ms,
    )
}
/// Pause after a failed request before the next attempt.
pub(crate) const RETRY_BACKOFF: Duration = Duration::from_millis(200);

/// The way to the active controller: one connection to the voter believed active,
/// moved on a NOT_CONTROLLER answer (to the voter it names, else the next one), on
/// a failure to reach it, and when another controller announces itself. Requests
/// on one channel go one at a time: the lifecycle, the ISR proposals and forwarded
/// client requests each have their own, so none waits behind another's.
#[derive(Debug)]
pub(crate) struct ControllerChannel {
    config: Arc<BrokerConfig>,
    network: Arc<dyn Network>,
    metadata: Arc<MetadataCache>,
    target: tokio::sync::Mutex<Target>,
}

#[derive(Debug, Default)]
struct Target {
    /// Index into the voters; `None` until a first choice.
    voter: Option<usize>,
    connection: Option<Connection>,
}

/// Why one attempt did not reach the active controller.
enum Miss {
    /// A voter answered that it is not the active controller.
    NotController { hint: Option<i32> },
    /// The voter could not be reached or did not answer.
    Failed(ClientError),
}

impl ControllerChannel {
    pub(crate) fn new(
        config: Arc<BrokerConfig>,
        network: Arc<dyn Network>,
        metadata: Arc<MetadataCache>,
    ) -> ControllerChannel {
        ControllerChannel {
            config,
            network,
            metadata,
            target: tokio::sync::Mutex::new(Target::default()),
        }
    }

    /// Sends a request to the active controller, wherever it is: any voter leads
    /// to it. Bounded by [`REQUEST_TIMEOUT`] as a whole.
    pub(crate) async fn send(
        &self,
        body: pb::request::Body,
    ) -> Result<pb::response::Body, ClientError> {
        let deadline = tokio::time::Instant::now() + REQUEST_TIMEOUT;
        let backoff = syncline_proto::Backoff::new(Duration::from_millis(20), RETRY_BACKOFF);
        let mut target = self.target.lock().await;
        let voters = &self.config.controller_quorum_voters;
        let mut last;
        // One pass over every voter without a pause; after that, pause between tries
        // (an election is under way).
        let mut tries = 0usize;
        loop {
            let index = *target.voter.get_or_insert_with(|| {
                let known = self.metadata.controller_id();
                voters.iter().position(|v| v.node_id == known).unwrap_or(0)
            });
            let voter = &voters[index];
            let until = deadline.min(tokio::time::Instant::now() + attempt_timeout(&self.config));
            let mut announced = self.metadata.subscribe_controller();
            announced.borrow_and_update();
            let moved = async {
                loop {
                    if announced.changed().await.is_err() {
                        std::future::pending::<()>().await;
                    }
                    let c = *announced.borrow_and_update();
                    if c != voter.node_id && voters.iter().any(|v| v.node_id == c) {
                        return c;
                    }
                }
            };
            let address = voter.address.to_string();
            let attempt = tokio::select! {
                r = tokio::time::timeout_at(
                    until,
                    self.attempt(&mut target.connection, &address, body.clone()),
                ) => r.unwrap_or(Err(Miss::Failed(ClientError::Timeout(
                    attempt_timeout(&self.config).as_millis() as u64,
                )))),
                c = moved => Err(Miss::NotController { hint: Some(c) }),
            };
            let next = match attempt {
                Ok(response) => return Ok(response),
                Err(Miss::NotController { hint }) => {
                    last = ClientError::Protocol {
                        code: ErrorCode::NotController,
                        message: format!("voter {} is not the active controller", voter.node_id),
                    };
                    hint.and_then(|h| voters.iter().position(|v| v.node_id == h))
                        .filter(|&h| h != index)
                        .unwrap_or((index + 1) % voters.len())
                }
                Err(Miss::Failed(e)) => {
                    tracing::debug!(voter = voter.node_id, error = %e, "controller voter not reached");
                    target.connection = None;
                    last = e;
                    (index + 1) % voters.len()
                }
            };
            if next != index {
                target.connection = None;
            }
            target.voter = Some(next);
            tries += 1;
            if tries >= voters.len() {
                let pause = backoff.delay((tries - voters.len()) as u32);
                if tokio::time::Instant::now() + pause >= deadline {
                    return Err(last);
                }
                tokio::time::sleep(pause).await;
            }
        }
    }

    async fn attempt(
        &self,
        slot: &mut Option<Connection>,
        address: &str,
        body: pb::request::Body,
    ) -> Result<pb::response::Body, Miss> {
        let conn = match slot.as_ref().filter(|c| !c.is_closed()) {
            Some(c) => c.clone(),
            None => {
                let stream = self
                    .network
                    .connect(address)
                    .await
                    .map_err(|e| Miss::Failed(ClientError::Connect(address.to_string(), e)))?;
                let c = Connection::from_stream(
                    stream,
                    address,
                    &format!("broker-{}", self.config.node_id),
                    self.config.socket_request_max_bytes,
                );
                *slot = Some(c.clone());
                c
            }
        };
        match conn.send_any(body).await.map_err(Miss::Failed)? {
            pb::response::Body::Error(e)
                if ErrorCode::from_wire(e.error_code) == ErrorCode::NotController =>
            {
                Err(Miss::NotController {
                    hint: e.controller_hint,
                })
            }
            pb::response::Body::Error(e) => Err(Miss::Failed(ClientError::Protocol {
                code: ErrorCode::from_wire(e.error_code),
                message: e.error_message,
            })),
            response if refused_as_not_controller(&response) => {
                Err(Miss::NotController { hint: None })
            }
            response => Ok(response),
        }
    }
}

/// A typed answer with NOT_CONTROLLER: the voter's broker side refusing a
/// controller request (it runs no controller).
fn refused_as_not_controller(response: &pb::response::Body) -> bool {
    use pb::response::Body as Resp;
    let code = match response {
        Resp::BrokerRegistration(r) => r.error_code,
        Resp::BrokerHeartbeat(r) => r.error_code,
        Resp::AlterPartition(r) => r.error_code,
        Resp::DescribeQuorum(r) => r.error_code,
        Resp::ElectLeaders(r) => r.error_code,
        Resp::AlterTopic(r) => r.error_code,
        Resp::AlterReassignments(r) => r.error_code,
        Resp::DeleteTopics(r) => r.error_code,
        Resp::AlterUserScramCredentials(r) => r.error_code,
        Resp::AlterClientQuotas(r) => r.error_code,
        Resp::CreateAcls(r) => r.error_code,
        Resp::DeleteAcls(r) => r.error_code,
        Resp::AllocateProducerIds(r) => r.error_code,
        _ => return false,
    };
    ErrorCode::from_wire(code) == ErrorCode::NotController
}

/// Registers this broker and heartbeats until `shutdown`; then, if controlled
/// shutdown is on, asks the controller to move leadership away and waits (bounded)
/// until it has. The I/O shell of [`Lifecycle`]: it sends what the machine asks
/// for, publishes the status it reports, and feeds every outcome back.
pub(crate) async fn run_lifecycle(
    config: Arc<BrokerConfig>,
    channel: Arc<ControllerChannel>,
    broker_epoch: Arc<AtomicI64>,
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
                        tracing::warn!(error = %e, "broker registration failed; retrying");
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
                    tokio::time::sleep_until(until.into()).await;
                    Event::Timer
                }
                Action::SleepUntil(until) => tokio::select! {
                    _ = shutdown.cancelled() => continue,
                    _ = tokio::time::sleep_until(until.into()) => Event::Timer,
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
        let step = lifecycle.on_event(event, tokio::time::Instant::now().into_std());
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
            broker_epoch.store(s.broker_epoch, Ordering::Release);
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
