//! A broker: its parts, how a request reaches the right one, and start/stop.

use std::collections::HashMap;
use std::net::SocketAddr;
use std::sync::atomic::AtomicI64;
use std::sync::Arc;
use std::time::Duration;

use anyhow::Context;
use syncline_proto::{pb, ErrorCode, API_VERSION};
use tokio::sync::{mpsc, watch};
use tokio::task::JoinHandle;
use tokio_util::sync::CancellationToken;

use crate::auth::BrokerAuth;
use crate::client_quota::QuotaKind;
use crate::config::BrokerConfig;
use crate::control::client::{run_lifecycle, BrokerStatus, ControllerChannel};
use crate::control::host::{self, ControllerHandle};
use crate::control::metadata_cache::{MetadataCache, Topics};
use crate::front::{ConnectionLimits, Dispatch};
use crate::groups::OFFSETS_TOPIC;
use crate::metrics::{BrokerMetrics, PartitionLabel, MAX_PARTITION_SERIES};
use crate::net::Network;
use crate::replica::alter_partition::run_alter_partition;
use crate::replica::fetcher::FetcherManager;
use crate::replica::manager::ReplicaManager;
use crate::responder::Responder;

/// How long a forwarded CreateTopics waits for the new topic's leaders to be known
/// here, so a client can produce right after it returns.
const CREATE_TOPICS_PROPAGATION: Duration = Duration::from_secs(5);

/// The broker's parts.
#[derive(Debug)]
pub struct Broker {
    config: Arc<BrokerConfig>,
    metrics: Arc<BrokerMetrics>,
    metadata: Arc<MetadataCache>,
    rm: Arc<ReplicaManager>,
    fetchers: Arc<FetcherManager>,
    controller: Option<ControllerHandle>,
    channel: Arc<ControllerChannel>,
    status: watch::Receiver<BrokerStatus>,
    auth: Arc<BrokerAuth>,
    user_connections: crate::auth::UserConnections,
    authorizer: Arc<crate::authorizer::Authorizer>,
    connections: Arc<ConnectionLimits>,
    heavy_work: crate::front::HeavyWork,
    producer_ids: crate::producer_ids::ProducerIds,
    groups: crate::groups::GroupManager,
    client_quotas: Arc<crate::client_quota::ClientQuotas>,
}

impl Broker {
    pub(crate) fn config(&self) -> &BrokerConfig {
        &self.config
    }

    /// Open connections against their limits.
    pub(crate) fn connections(&self) -> &Arc<ConnectionLimits> {
        &self.connections
    }

    /// This broker's credential and its peers' verifiers.
    pub(crate) fn auth(&self) -> &BrokerAuth {
        &self.auth
    }

    /// The authenticated users' connections.
    pub(crate) fn user_connections(&self) -> &crate::auth::UserConnections {
        &self.user_connections
    }

    /// The cluster metadata as this broker knows it.
    pub(crate) fn metadata(&self) -> &MetadataCache {
        &self.metadata
    }

    /// This broker's metrics.
    pub fn metrics(&self) -> &BrokerMetrics {
        &self.metrics
    }

    /// The metrics, for a task that must not keep the broker alive.
    pub(crate) fn shared_metrics(&self) -> Arc<BrokerMetrics> {
        self.metrics.clone()
    }

    /// The partitions this broker hosts.
    pub fn replica_manager(&self) -> &ReplicaManager {
        &self.rm
    }

    /// Registration state as the controller last answered.
    pub fn status(&self) -> BrokerStatus {
        *self.status.borrow()
    }

    /// Admits one request (its API and version, who may send it, the ACLs) and
    /// dispatches it. Data-plane requests are handled inline (see `front`); the
    /// few that wait on the controller get a task.
    pub(crate) fn handle(self: &Arc<Self>, request: pb::Request, responder: Responder) {
        let Some(mut body) = request.body else {
            responder.send_error(
                ErrorCode::UnsupportedVersion,
                "unknown API key: upgrade this broker or fix the client",
            );
            return;
        };
        if request.api_version != API_VERSION {
            responder.send_error(
                ErrorCode::UnsupportedVersion,
                format!(
                    "api_version {} is not supported (this broker speaks {API_VERSION})",
                    request.api_version
                ),
            );
            return;
        }
        crate::names::collapse_repeated_names(&mut body);
        let principal = responder.connection().principal();
        if let Err(why) = crate::auth::authorize(&self.config, &body, &principal) {
            self.metrics.authorization_failures.inc();
            tracing::debug!(%why, "refused an internal request");
            responder.send_error(ErrorCode::ClusterAuthorizationFailed, why);
            return;
        }
        let mut responder = responder;
        let checked = !responder.connection().internal && self.authorizer.checks(&principal);
        let host = peer_host(&responder.connection().peer).to_string();
        let body = if checked {
            use crate::authorizer::Verdict;
            match self
                .authorizer
                .check(body, &principal, &host, || self.metadata.acls())
            {
                Verdict::Serve(body) => body,
                Verdict::Partial(body, patch) => {
                    responder.set_patch(patch);
                    body
                }
                Verdict::Answer(answer) => return responder.send(answer),
                Verdict::Refuse(code, message) => return responder.send_error(code, message),
                Verdict::Drop => return responder.no_response(),
            }
        } else {
            body
        };
        let acl_checked = checked.then_some((principal, host));
        self.dispatch(body, &request.client_id, acl_checked, responder);
    }

    /// Runs an admitted request. `acl_checked`: the principal and host the ACLs
    /// apply to, if they do (a consumer's fetch is then filtered by them).
    fn dispatch(
        self: &Arc<Self>,
        body: pb::request::Body,
        client_id: &str,
        acl_checked: Option<(crate::auth::Principal, String)>,
        responder: Responder,
    ) {
        use pb::request::Body;
        let mut responder = responder;
        // Clients' produces and consumers' fetches are charged to their byte-rate
        // quotas; replication and the broker's own requests never are.
        let quota = match &body {
            Body::Produce(_) => Some(QuotaKind::Produce),
            Body::Fetch(r) if r.replica_id < 0 => Some(QuotaKind::Fetch),
            _ => None,
        };
        if let Some(kind) = quota.filter(|_| !responder.connection().internal) {
            let principal = responder.connection().principal();
            responder.set_quota(self.client_quotas.charge(kind, &principal, client_id));
        }
        // Clients' requests are charged their handling time too (KIP-124):
        // until this returns or the request is answered, whichever is first.
        let principal = responder.connection().principal();
        let handled = (!responder.connection().internal
            && !matches!(principal, crate::auth::Principal::Broker(_))
            && !crate::client_quota::is_broker_request(&body))
        .then(|| {
            self.client_quotas
                .charge(QuotaKind::Request, &principal, client_id)
        })
        .flatten()
        .map(|charge| {
            let handled = Arc::new(std::sync::OnceLock::new());
            responder.set_request_quota(Some(crate::client_quota::RequestTimeCharge::new(
                charge,
                handled.clone(),
            )));
            (handled, tokio::time::Instant::now())
        });
        self.serve(body, client_id, acl_checked, responder);
        if let Some((handled, started)) = handled {
            let _ = handled.set(started.elapsed());
        }
    }

    /// Runs an admitted request whose quotas are set.
    fn serve(
        self: &Arc<Self>,
        body: pb::request::Body,
        client_id: &str,
        acl_checked: Option<(crate::auth::Principal, String)>,
        responder: Responder,
    ) {
        use pb::request::Body;
        use pb::response::Body as Resp;
        match body {
            Body::Produce(r) => self.rm.handle_produce(r, responder),
            Body::Fetch(r) => {
                let filter = acl_checked
                    .filter(|_| r.replica_id < 0)
                    .map(|(principal, host)| {
                        self.authorizer
                            .fetch_filter(&principal, &host, self.metadata.acls())
                    });
                self.rm.handle_fetch(r, responder, filter)
            }
            Body::ListOffsets(r) => responder.send(Resp::ListOffsets(self.rm.list_offsets(&r))),
            Body::Metadata(r) => self.metadata_request(r, responder),
            Body::DescribeConfigs(r) => {
                let metadata = &self.metadata;
                let own = |topic: &str| {
                    metadata
                        .topic_id(topic)
                        .map(|_| metadata.topic_configs(topic))
                };
                responder.send(Resp::DescribeConfigs(
                    crate::describe_configs::describe_configs(&self.config, own, &r),
                ))
            }
            Body::DescribeTopics(r) => {
                responder.send(Resp::DescribeTopics(self.rm.describe_topics(&r.topics)))
            }
            Body::DescribeCluster(_) => {
                let listener = responder.connection().listener.clone();
                responder.send(Resp::DescribeCluster(
                    self.metadata.describe_cluster(&listener),
                ))
            }
            Body::OffsetsForLeaderEpoch(r) => responder.send(Resp::OffsetsForLeaderEpoch(
                self.rm.offsets_for_leader_epoch(&r),
            )),
            Body::LeaderAndIsr(r) => self.leader_and_isr(r, responder),
            Body::OffsetCommit(r) => self.offset_commit(r, client_id, responder),
            body @ (Body::JoinGroup(_)
            | Body::SyncGroup(_)
            | Body::Heartbeat(_)
            | Body::LeaveGroup(_)
            | Body::OffsetFetch(_)) => {
                let partitions = self.metadata.partition_ids(OFFSETS_TOPIC).len();
                self.groups.submit(body, partitions, client_id, responder)
            }
            Body::FindCoordinator(r) => {
                let broker = self.clone();
                tokio::spawn(async move {
                    let listener = responder.connection().listener.clone();
                    let answer = broker.find_coordinator(&r, &listener).await;
                    responder.send(Resp::FindCoordinator(answer));
                });
            }
            Body::ListGroups(_) => {
                let broker = self.clone();
                tokio::spawn(async move {
                    responder.send(Resp::ListGroups(broker.groups.list_groups().await));
                });
            }
            Body::DescribeGroups(r) => {
                let broker = self.clone();
                tokio::spawn(async move {
                    let partitions = broker.metadata.partition_ids(OFFSETS_TOPIC).len();
                    let answer = broker.groups.describe_groups(r.group_ids, partitions).await;
                    responder.send(Resp::DescribeGroups(answer));
                });
            }
            Body::CreateTopics(r) => {
                let broker = self.clone();
                tokio::spawn(async move { broker.create_topics(r, responder).await });
            }
            // Answered by the active controller: here if this broker hosts it, else
            // forwarded to it.
            body @ (Body::DescribeQuorum(_)
            | Body::ElectLeaders(_)
            | Body::AlterTopic(_)
            | Body::DeleteTopics(_)
            | Body::AlterUserScramCredentials(_)
            | Body::AlterClientQuotas(_)
            | Body::CreateAcls(_)
            | Body::DeleteAcls(_)
            | Body::AlterReassignments(_)) => self.forward(body, responder),
            // Users and ACLs: changed by the active controller, described from the cache.
            Body::DescribeUserScramCredentials(r) => {
                responder.send(Resp::DescribeUserScramCredentials(
                    self.metadata.describe_user_scram_credentials(&r),
                ))
            }
            Body::DescribeAcls(r) => {
                responder.send(Resp::DescribeAcls(self.metadata.describe_acls(&r)))
            }
            Body::DescribeClientQuotas(r) => {
                responder.send(Resp::DescribeClientQuotas(self.client_quotas.describe(&r)))
            }
            Body::InitProducerId(r) => {
                let broker = self.clone();
                tokio::spawn(async move {
                    let answer = broker.init_producer_id(&r).await;
                    responder.send(Resp::InitProducerId(answer));
                });
            }
            Body::Raft(r) => {
                let Some(controller) = self.controller.clone() else {
                    responder.send_error(
                        ErrorCode::NotController,
                        format!("broker {} is not a controller voter", self.config.node_id),
                    );
                    return;
                };
                tokio::spawn(async move { responder.send(Resp::Raft(controller.raft(r).await)) });
            }
            // The connection runs these itself, before anything reaches here.
            Body::SaslHandshake(_) | Body::SaslAuthenticate(_) => responder.send_error(
                ErrorCode::IllegalSaslState,
                "SASL requests are answered by the connection",
            ),
            body @ (Body::AlterPartition(_)
            | Body::BrokerRegistration(_)
            | Body::BrokerHeartbeat(_)
            | Body::AllocateProducerIds(_)) => self.to_own_controller(body, responder),
        }
    }

    /// Metadata; unknown topics are created first when the request allows it and
    /// `auto_create_topics_enable` is on.
    fn metadata_request(self: &Arc<Self>, r: pb::MetadataRequest, responder: Responder) {
        use pb::response::Body as Resp;
        let listener = responder.connection().listener.clone();
        let unknown = if r.allow_auto_topic_creation && self.config.auto_create_topics_enable {
            self.metadata.unknown_topics(&r.topics)
        } else {
            vec![]
        };
        if unknown.is_empty() {
            responder.send(Resp::Metadata(
                self.metadata.metadata(Topics::of(&r), &listener),
            ));
            return;
        }
        let broker = self.clone();
        tokio::spawn(async move {
            let failed = broker.auto_create_topics(unknown).await;
            let mut answer = broker.metadata.metadata(Topics::of(&r), &listener);
            for t in &mut answer.topics {
                if let Some(&code) = failed.get(&t.name) {
                    t.error_code = code;
                }
            }
            responder.send(Resp::Metadata(answer));
        });
    }

    /// LeaderAndIsr from the active controller: roles applied, connections of
    /// removed users closed, group coordinators following the offsets topic's
    /// leaders.
    fn leader_and_isr(&self, r: pb::LeaderAndIsrRequest, responder: Responder) {
        let answer = off_the_runtime(|| self.rm.apply_leader_and_isr(&r));
        if r.security.is_some() {
            self.user_connections
                .close_removed(|user| self.metadata.user_exists(user));
        }
        if r.client_quotas.is_some() {
            let (offset, quotas) = self.metadata.client_quotas();
            self.client_quotas.apply_dynamic(offset, quotas);
        }
        self.groups
            .sync_leadership(&self.metadata.partition_ids(OFFSETS_TOPIC));
        responder.send(pb::response::Body::LeaderAndIsr(answer))
    }

    /// A controller request only this broker's own voter answers (from the
    /// brokers: registration, heartbeats, AlterPartition, producer id blocks).
    fn to_own_controller(self: &Arc<Self>, body: pb::request::Body, responder: Responder) {
        let Some(controller) = self.controller.clone() else {
            responder.send(not_controller(&body));
            return;
        };
        tokio::spawn(async move {
            match controller.handle(body).await {
                Some(resp) => responder.send(resp),
                None => responder
                    .send_error(ErrorCode::NotController, "the controller is shutting down"),
            }
        });
    }

    /// InitProducerId: a new producer id (epoch 0) from this broker's block.
    async fn init_producer_id(&self, r: &pb::InitProducerIdRequest) -> pb::InitProducerIdResponse {
        if !r.transactional_id.is_empty() {
            return crate::producer_ids::init_response(Err((
                ErrorCode::InvalidRequest,
                format!(
                    "transactional.id {:?}: transactions are not supported; leave transactional.id unset for an idempotent producer",
                    r.transactional_id
                ),
            )));
        }
        let request = pb::request::Body::AllocateProducerIds(pb::AllocateProducerIdsRequest {
            broker_id: self.config.node_id,
            broker_epoch: self.rm.broker_epoch(),
        });
        let id = self
            .producer_ids
            .next(|| self.to_active_controller(request, false))
            .await;
        crate::producer_ids::init_response(id)
    }

    /// Answers with the active controller's answer to `body`, from a task of its
    /// own. `body` is marked forwarded before it goes on, so that it goes on at
    /// most once (see [`forwarded_mark`]).
    fn forward(self: &Arc<Self>, mut body: pb::request::Body, responder: Responder) {
        let forwarded = match forwarded_mark(&mut body) {
            Some(mark) => std::mem::replace(mark, true),
            None => {
                // Not one of forwarded_mark's requests: no broker forwards it, so
                // none may take it for a fresh request.
                debug_assert!(false, "a request without a forwarded mark: {body:?}");
                true
            }
        };
        let broker = self.clone();
        tokio::spawn(async move {
            responder.send(broker.to_active_controller(body, forwarded).await);
        });
    }

    /// FindCoordinator: the leader of the `__consumer_offsets` partition the
    /// group hashes to, as an endpoint of `listener`. The topic is created
    /// when the first group asks (unless the controller created it already,
    /// `offsets_topic_eager_creation`).
    async fn find_coordinator(
        &self,
        r: &pb::FindCoordinatorRequest,
        listener: &str,
    ) -> pb::FindCoordinatorResponse {
        let refuse = |code: ErrorCode, message: String| pb::FindCoordinatorResponse {
            error_code: code as i32,
            error_message: message,
            coordinator: None,
        };
        if r.key_type != 0 {
            return refuse(
                ErrorCode::InvalidRequest,
                format!(
                    "key type {} is not served: syncline has group coordinators (0) only, \
                     no transactions",
                    r.key_type
                ),
            );
        }
        if r.key.is_empty() {
            return refuse(ErrorCode::InvalidRequest, "the group id is empty".into());
        }
        let mut partitions = self.metadata.partition_ids(OFFSETS_TOPIC).len();
        if partitions == 0 {
            self.create_offsets_topic().await;
            partitions = self.metadata.partition_ids(OFFSETS_TOPIC).len();
        }
        if partitions == 0 {
            return refuse(
                ErrorCode::CoordinatorNotAvailable,
                format!("{OFFSETS_TOPIC} is not created yet"),
            );
        }
        let p = syncline_group::partition_for(&r.key, partitions as u32) as i32;
        let m = self
            .metadata
            .metadata(Topics::Named(&[OFFSETS_TOPIC.to_string()]), listener);
        let leader = m
            .topics
            .iter()
            .flat_map(|t| &t.partitions)
            .find(|part| part.partition == p)
            .map_or(-1, |part| part.leader_id);
        match m.brokers.into_iter().find(|b| b.node_id == leader) {
            Some(endpoint) => pb::FindCoordinatorResponse {
                error_code: ErrorCode::None as i32,
                error_message: String::new(),
                coordinator: Some(endpoint),
            },
            None => refuse(
                ErrorCode::CoordinatorNotAvailable,
                format!("{OFFSETS_TOPIC}-{p} has no leader"),
            ),
        }
    }

    /// Creates `__consumer_offsets`. Partitions, replication factor and configs
    /// are left unset: the active controller creates it with the offsets topic's
    /// settings (`offsets_topic_*`; kept whatever its age, since syncline does not
    /// compact and a group's last commit must outlive any retention), whoever asks.
    async fn create_offsets_topic(&self) {
        let request = pb::CreateTopicsRequest {
            topics: vec![pb::CreatableTopic {
                name: OFFSETS_TOPIC.to_string(),
                num_partitions: -1,
                replication_factor: -1,
                configs: Default::default(),
            }],
            timeout_ms: CREATE_TOPICS_PROPAGATION.as_millis() as i32,
            validate_only: false,
            forwarded: false,
            auto_create: false,
        };
        match self.create_topics_answer(request).await {
            pb::response::Body::CreateTopics(r) => {
                for t in r.topics {
                    if t.error_code != ErrorCode::None as i32
                        && t.error_code != ErrorCode::TopicAlreadyExists as i32
                    {
                        tracing::warn!(error = %t.error_message, "cannot create {OFFSETS_TOPIC}");
                    }
                }
            }
            other => tracing::warn!(answer = ?other, "cannot create {OFFSETS_TOPIC}"),
        }
    }

    /// Creates `names` with the defaults, as Kafka's brokers do for a client's
    /// Metadata request (`auto_create_topics_enable`); the error codes of those
    /// that could not be, for the Metadata answer (a topic created meanwhile by
    /// another request is not an error).
    async fn auto_create_topics(&self, names: Vec<String>) -> HashMap<String, i32> {
        let request = pb::CreateTopicsRequest {
            topics: names
                .iter()
                .map(|name| pb::CreatableTopic {
                    name: name.clone(),
                    num_partitions: -1,
                    replication_factor: -1,
                    configs: Default::default(),
                })
                .collect(),
            timeout_ms: CREATE_TOPICS_PROPAGATION.as_millis() as i32,
            validate_only: false,
            forwarded: false,
            auto_create: true,
        };
        match self.create_topics_answer(request).await {
            pb::response::Body::CreateTopics(r) => {
                let refused: Vec<pb::CreatableTopicResult> = r
                    .topics
                    .into_iter()
                    .filter(|t| {
                        t.error_code != ErrorCode::None as i32
                            && t.error_code != ErrorCode::TopicAlreadyExists as i32
                    })
                    .collect();
                // One line per request, however many names it gave.
                if let Some(first) = refused.first() {
                    tracing::info!(
                        refused = refused.len(),
                        topic = %first.name,
                        error = %first.error_message,
                        "auto-creation refused"
                    );
                }
                refused
                    .into_iter()
                    .map(|t| (t.name, t.error_code))
                    .collect()
            }
            // No active controller: retriable, as Kafka answers while it creates.
            _ => names
                .into_iter()
                .map(|n| (n, ErrorCode::LeaderNotAvailable as i32))
                .collect(),
        }
    }

    /// OffsetCommit, as Kafka serves it: a partition the cluster does not have
    /// is answered UNKNOWN_TOPIC_OR_PARTITION here and never reaches the group
    /// coordinator, which commits the others.
    fn offset_commit(&self, mut r: pb::OffsetCommitRequest, client_id: &str, responder: Responder) {
        use pb::response::Body as Resp;
        let mut unknown = Vec::new();
        for t in &mut r.topics {
            let known = self.metadata.partition_ids(&t.name);
            let (ours, theirs): (Vec<_>, Vec<_>) = std::mem::take(&mut t.partitions)
                .into_iter()
                .partition(|p| known.contains(&p.partition));
            t.partitions = ours;
            if !theirs.is_empty() {
                unknown.push(pb::OffsetCommitTopicResult {
                    name: t.name.clone(),
                    partitions: theirs
                        .into_iter()
                        .map(|p| pb::PartitionResult {
                            partition: p.partition,
                            error_code: ErrorCode::UnknownTopicOrPartition as i32,
                        })
                        .collect(),
                });
            }
        }
        r.topics.retain(|t| !t.partitions.is_empty());
        let partitions = self.metadata.partition_ids(OFFSETS_TOPIC).len();
        if unknown.is_empty() {
            self.groups.submit(
                pb::request::Body::OffsetCommit(r),
                partitions,
                client_id,
                responder,
            );
        } else if r.topics.is_empty() {
            responder.send(Resp::OffsetCommit(pb::OffsetCommitResponse {
                topics: unknown,
            }));
        } else {
            let listener = responder.connection().listener.clone();
            let (inner, answer) = Responder::internal(listener);
            self.groups.submit(
                pb::request::Body::OffsetCommit(r),
                partitions,
                client_id,
                inner,
            );
            tokio::spawn(async move {
                match answer.await {
                    Ok(Resp::OffsetCommit(mut committed)) => {
                        committed.topics.extend(unknown);
                        responder.send(Resp::OffsetCommit(committed));
                    }
                    // A whole-request error (NOT_COORDINATOR, ...) stands for all.
                    Ok(other) => responder.send(other),
                    Err(_) => responder.send_error(
                        ErrorCode::CoordinatorNotAvailable,
                        "the group coordinator went away",
                    ),
                }
            });
        }
    }

    /// CreateTopics goes to the active controller (here, or forwarded); once
    /// committed, waits (bounded) until this broker knows the new leaders.
    async fn create_topics(&self, request: pb::CreateTopicsRequest, responder: Responder) {
        responder.send(self.create_topics_answer(request).await);
    }

    /// CreateTopics through the active controller; a success is answered once
    /// the new partitions have leaders here.
    async fn create_topics_answer(&self, request: pb::CreateTopicsRequest) -> pb::response::Body {
        let forwarded = request.forwarded;
        let body = pb::request::Body::CreateTopics(pb::CreateTopicsRequest {
            forwarded: true,
            ..request
        });
        match self.to_active_controller(body, forwarded).await {
            pb::response::Body::CreateTopics(r) => {
                let created: Vec<String> = r
                    .topics
                    .iter()
                    .filter(|t| t.error_code == ErrorCode::None as i32)
                    .map(|t| t.name.clone())
                    .collect();
                if !created.is_empty() {
                    self.metadata
                        .wait_for_leaders(&created, CREATE_TOPICS_PROPAGATION)
                        .await;
                }
                pb::response::Body::CreateTopics(r)
            }
            other => other,
        }
    }

    /// A request only the active controller answers: this node's own voter if it is
    /// the active controller, else (unless the request was forwarded here already)
    /// the active controller through the controller channel. `body` is marked
    /// forwarded already.
    async fn to_active_controller(
        &self,
        body: pb::request::Body,
        forwarded: bool,
    ) -> pb::response::Body {
        use pb::response::Body as Resp;
        if let Some(c) = &self.controller {
            match c.handle(body.clone()).await {
                Some(Resp::Error(e))
                    if !forwarded && e.error_code == ErrorCode::NotController as i32 => {}
                Some(answer) => return answer,
                None => {
                    return Resp::Error(pb::ErrorResponse {
                        error_code: ErrorCode::NotController as i32,
                        error_message: "the controller is shutting down".into(),
                        controller_hint: None,
                    })
                }
            }
        }
        if forwarded {
            return Resp::Error(pb::ErrorResponse {
                error_code: ErrorCode::NotController as i32,
                error_message: format!("broker {} is not a controller voter", self.config.node_id),
                controller_hint: None,
            });
        }
        match self.channel.send(body).await {
            Ok(answer) => answer,
            Err(syncline_client::ClientError::Protocol { code, message })
                if code != ErrorCode::NotController =>
            {
                Resp::Error(pb::ErrorResponse {
                    error_code: code as i32,
                    error_message: message,
                    controller_hint: None,
                })
            }
            Err(e) => {
                let voters: Vec<String> = self
                    .config
                    .controller_quorum_voters
                    .iter()
                    .map(|v| v.node_id.to_string())
                    .collect();
                Resp::Error(pb::ErrorResponse {
                    error_code: ErrorCode::NotController as i32,
                    error_message: format!(
                        "no active controller could be reached from broker {}: the controller \
                         quorum (voters {}) needs a majority of its voters up and in touch; last \
                         error: {e}",
                        self.config.node_id,
                        voters.join(", ")
                    ),
                    controller_hint: None,
                })
            }
        }
    }

    /// Refreshes the gauges and returns the Prometheus text exposition.
    pub(crate) fn scrape_metrics(&self) -> String {
        let m = &self.metrics;
        let mut leaders = 0;
        let mut under_replicated = 0;
        let mut under_min = 0;
        let mut at_min = 0;
        let mut producers = 0;
        let partitions = self.rm.all_partitions();
        m.partition_isr_size.clear();
        m.partition_max_replica_lag.clear();
        for p in &partitions {
            let Some(h) = p.leader_health() else {
                continue;
            };
            leaders += 1;
            producers += p.producer_count();
            if h.isr_size < h.replicas {
                under_replicated += 1;
            }
            if h.isr_size < h.min_insync_replicas {
                under_min += 1;
            }
            if h.isr_size == h.min_insync_replicas {
                at_min += 1;
            }
            if leaders <= MAX_PARTITION_SERIES {
                let label = PartitionLabel {
                    topic: p.tp.topic.to_string(),
                    partition: p.tp.partition.to_string(),
                };
                m.partition_isr_size
                    .get_or_create(&label)
                    .set(h.isr_size as i64);
                m.partition_max_replica_lag
                    .get_or_create(&label)
                    .set(h.max_follower_lag);
            }
        }
        m.leader_count.set(leaders as i64);
        m.partition_count.set(partitions.len() as i64);
        m.producer_ids.set(producers as i64);
        m.under_replicated_partitions.set(under_replicated);
        m.under_min_isr_partition_count.set(under_min);
        m.at_min_isr_partition_count.set(at_min);
        m.replica_fetcher_max_lag.set(self.fetchers.max_lag());
        let (fetch, produce) = self.rm.purgatory_sizes();
        m.set_purgatory_sizes(fetch, produce);
        m.encode()
    }
}

/// The `forwarded` mark of a request that only the active controller answers
/// and a broker forwards as it is: set by the broker that forwards it; `None`
/// for every other request.
fn forwarded_mark(body: &mut pb::request::Body) -> Option<&mut bool> {
    use pb::request::Body;
    match body {
        Body::DescribeQuorum(r) => Some(&mut r.forwarded),
        Body::ElectLeaders(r) => Some(&mut r.forwarded),
        Body::AlterTopic(r) => Some(&mut r.forwarded),
        Body::DeleteTopics(r) => Some(&mut r.forwarded),
        Body::AlterUserScramCredentials(r) => Some(&mut r.forwarded),
        Body::AlterClientQuotas(r) => Some(&mut r.forwarded),
        Body::CreateAcls(r) => Some(&mut r.forwarded),
        Body::DeleteAcls(r) => Some(&mut r.forwarded),
        Body::AlterReassignments(r) => Some(&mut r.forwarded),
        _ => None,
    }
}

/// The typed refusal of a controller request sent to a broker that is not one.
fn not_controller(body: &pb::request::Body) -> pb::response::Body {
    use pb::request::Body;
    use pb::response::Body as Resp;
    let code = ErrorCode::NotController as i32;
    match body {
        Body::AlterPartition(_) => Resp::AlterPartition(pb::AlterPartitionResponse {
            error_code: code,
            topics: vec![],
        }),
        Body::BrokerRegistration(_) => Resp::BrokerRegistration(pb::BrokerRegistrationResponse {
            error_code: code,
            error_message: "this broker is not the controller".into(),
            broker_epoch: -1,
        }),
        Body::AllocateProducerIds(_) => {
            Resp::AllocateProducerIds(pb::AllocateProducerIdsResponse {
                error_code: code,
                error_message: "this broker is not the controller".into(),
                producer_id_start: -1,
                producer_id_len: 0,
            })
        }
        _ => Resp::BrokerHeartbeat(pb::BrokerHeartbeatResponse {
            error_code: code,
            ..Default::default()
        }),
    }
}

/// A running broker.
#[derive(Debug)]
pub struct BrokerHandle {
    broker: Arc<Broker>,
    addr: SocketAddr,
    metrics_addr: Option<SocketAddr>,
    shutdown: CancellationToken,
    fatal: CancellationToken,
    lifecycle: JoinHandle<()>,
    tasks: Vec<JoinHandle<()>>,
    _lock: std::fs::File,
}

impl BrokerHandle {
    /// The address the first listener is bound to.
    pub fn addr(&self) -> SocketAddr {
        self.addr
    }

    /// The metrics endpoint's address, if enabled.
    pub fn metrics_addr(&self) -> Option<SocketAddr> {
        self.metrics_addr
    }

    /// The running broker's parts.
    pub fn broker(&self) -> &Arc<Broker> {
        &self.broker
    }

    /// Fires when the broker must stop on its own: the controller's metadata
    /// log, or a partition's log, failed.
    pub fn fatal(&self) -> CancellationToken {
        self.fatal.clone()
    }

    /// Clean shutdown: controlled shutdown (leadership moves away), stop serving,
    /// flush and checkpoint every log. After [`BrokerHandle::fatal`] fired
    /// there is no controlled shutdown: the broker stops at once, as Kafka's
    /// halts when its log directory fails, rather than serve on for up to
    /// `controlled_shutdown_timeout_ms` from logs it cannot trust.
    pub async fn shutdown(self) {
        self.shutdown.cancel();
        if self.fatal.is_cancelled() {
            self.lifecycle.abort();
        }
        // The lifecycle task runs the controlled shutdown before it returns; the
        // server keeps serving meanwhile so this broker hears of its new roles.
        let _ = self.lifecycle.await;
        for t in &self.tasks {
            t.abort();
        }
        for t in self.tasks {
            let _ = t.await;
        }
        // Nothing may touch a log once it is closed: stop the group
        // coordinators, the fetchers and the controller first.
        self.broker.groups.stop_all();
        self.broker.fetchers.stop().await;
        if let Some(c) = &self.broker.controller {
            c.join().await;
        }
        self.broker.rm.close_all();
        tracing::info!("broker stopped");
    }
}

/// Starts a broker: binds its listeners, opens its parts, registers with the
/// controller and starts serving.
pub async fn start(
    config: BrokerConfig,
    network: Arc<dyn Network>,
) -> anyhow::Result<BrokerHandle> {
    let mut bound = Vec::new();
    for l in &config.listeners {
        let listener = network.bind(&l.bind.to_string()).await.with_context(|| {
            format!(
                "cannot listen on {} (`listeners`, listener {})",
                l.bind, l.name
            )
        })?;
        bound.push(listener);
    }
    start_on(config, network, bound).await
}

/// As [`start`], on listeners bound already, one per `config.listeners` in order
/// (tests bind port 0 first).
pub async fn start_on(
    config: BrokerConfig,
    network: Arc<dyn Network>,
    listeners: Vec<Box<dyn crate::net::Listener>>,
) -> anyhow::Result<BrokerHandle> {
    anyhow::ensure!(
        listeners.len() == config.listeners.len(),
        "{} listeners bound for {} configured",
        listeners.len(),
        config.listeners.len()
    );
    let config = Arc::new(config);
    syncline_durable::create_dir_all(&config.log_dir)
        .with_context(|| format!("cannot create log dir {}", config.log_dir.display()))?;
    let lock_path = config.log_dir.join(".lock");
    let lock = std::fs::File::create(&lock_path)
        .with_context(|| format!("cannot create {}", lock_path.display()))?;
    lock.try_lock().map_err(|_| {
        anyhow::anyhow!(
            "log dir {} is in use by another synclined process (is the broker already running?)",
            config.log_dir.display()
        )
    })?;

    crate::replica::manager::delete_leftovers(&config.log_dir).with_context(|| {
        format!(
            "cannot delete removed replicas' logs in {}",
            config.log_dir.display()
        )
    })?;

    // Every connection this broker opens to another is authenticated as it.
    let auth = Arc::new(BrokerAuth::load(&config).with_context(|| {
        format!(
            "cannot load broker {}'s credential (`broker_credentials_dir`)",
            config.node_id
        )
    })?);
    let network = auth.network(network);

    let addr = listeners[0].local_addr()?;
    let metrics_listener = match &config.metrics_listen {
        Some(m) => Some(
            tokio::net::TcpListener::bind(m.to_string())
                .await
                .with_context(|| format!("cannot listen on {m} (`metrics_listen`)"))?,
        ),
        None => None,
    };
    let metrics_addr = metrics_listener
        .as_ref()
        .map(|l| l.local_addr())
        .transpose()?;

    let shutdown = CancellationToken::new();
    // Background work stops after the lifecycle's controlled shutdown.
    let background = CancellationToken::new();
    let fatal = CancellationToken::new();
    let metrics = Arc::new(BrokerMetrics::new());
    let metadata = Arc::new(MetadataCache::new(&config.cluster_id));
    let broker_epoch = Arc::new(AtomicI64::new(-1));
    let fetchers = Arc::new(FetcherManager::new(
        config.clone(),
        metadata.clone(),
        network.clone(),
        broker_epoch.clone(),
        metrics.clone(),
        background.clone(),
    ));
    let (isr_tx, isr_rx) = mpsc::unbounded_channel();
    let rm = Arc::new(ReplicaManager::new(
        config.clone(),
        metadata.clone(),
        fetchers.clone(),
        broker_epoch.clone(),
        isr_tx,
        metrics.clone(),
    ));
    let weak = Arc::downgrade(&rm);
    fetchers.set_on_append(crate::replica::fetcher::AppendListener(Box::new(
        move |tp| {
            if let Some(rm) = weak.upgrade() {
                rm.wake(tp, false);
            }
        },
    )));
    let controller = if config.is_controller {
        Some(
            host::start(
                &config.log_dir.join("__cluster_metadata"),
                &config,
                network.clone(),
                metrics.clone(),
                background.clone(),
                fatal.clone(),
            )
            .await?,
        )
    } else {
        None
    };
    let channel = || {
        Arc::new(ControllerChannel::new(
            config.clone(),
            network.clone(),
            metadata.clone(),
        ))
    };
    let (lifecycle_channel, isr_channel, channel) = (channel(), channel(), channel());
    let (status_tx, status_rx) = watch::channel(BrokerStatus {
        broker_epoch: -1,
        fenced: true,
    });
    let broker = Arc::new(Broker {
        config: config.clone(),
        metrics: metrics.clone(),
        metadata: metadata.clone(),
        rm: rm.clone(),
        fetchers,
        controller,
        channel,
        status: status_rx,
        auth,
        user_connections: Default::default(),
        authorizer: Arc::new(crate::authorizer::Authorizer::new(
            config.authorizer.clone(),
            metrics.authorization_failures.clone(),
        )),
        connections: ConnectionLimits::new(
            config.max_connections,
            config.max_connections_per_ip,
            metrics.connections.clone(),
        ),
        heavy_work: crate::front::HeavyWork::new(&config),
        client_quotas: Arc::new(crate::client_quota::ClientQuotas::new(
            &config.client_quotas,
            metrics.clone(),
        )),
        producer_ids: Default::default(),
        groups: crate::groups::GroupManager::new(
            config.groups.clone(),
            rm.clone(),
            config.inter_broker_listener_name.as_str().into(),
        ),
    });

    let mut tasks = Vec::new();
    for (listener, l) in listeners.into_iter().zip(&config.listeners) {
        tasks.push(tokio::spawn(crate::front::serve(
            listener,
            Arc::from(l.name.as_str()),
            l.kafka,
            l.security_protocol,
            broker.clone() as Arc<dyn Dispatch>,
            background.clone(),
        )));
    }
    if let Some(l) = metrics_listener {
        tasks.push(tokio::spawn(crate::front::http::serve(
            l,
            broker.clone() as Arc<dyn Dispatch>,
            background.clone(),
        )));
    }
    tasks.push(tokio::spawn(run_alter_partition(
        config.clone(),
        isr_channel,
        rm.clone(),
        isr_rx,
        background.clone(),
    )));
    tasks.push(tokio::spawn(periodic(
        rm.clone(),
        config.clone(),
        background.clone(),
        fatal.clone(),
    )));
    let lifecycle = {
        let (config, metadata, shutdown, background) = (
            config.clone(),
            metadata.clone(),
            shutdown.clone(),
            background.clone(),
        );
        tokio::spawn(async move {
            run_lifecycle(
                config,
                lifecycle_channel,
                broker_epoch,
                metadata,
                status_tx,
                shutdown,
            )
            .await;
            background.cancel();
        })
    };
    tracing::info!(
        node_id = config.node_id, %addr, metrics = ?metrics_addr, controller = config.is_controller,
        log_dir = %config.log_dir.display(), "broker started"
    );
    Ok(BrokerHandle {
        broker,
        addr,
        metrics_addr,
        shutdown,
        fatal,
        lifecycle,
        tasks,
        _lock: lock,
    })
}

/// The broker's timers: ISR shrink checks, HW checkpoints, flush policy,
/// retention; and, with the flush policy's, the watch for a failed log: then
/// `fatal` fires and the broker stops, as Kafka's does when its only log
/// directory fails (the files may not hold what the broker believes, e.g.
/// after a failed fsync; the restart's recovery checks them).
async fn periodic(
    rm: Arc<ReplicaManager>,
    config: Arc<BrokerConfig>,
    shutdown: CancellationToken,
    fatal: CancellationToken,
) {
    use tokio::time::{sleep_until, Instant};
    let checkpoint_every =
        Duration::from_millis(config.replica_high_watermark_checkpoint_interval_ms);
    let retention_every = Duration::from_millis(config.retention_check_interval_ms);
    let flush_every = Duration::from_millis(config.flush_ms.clamp(10, 1000));
    // A day stands for "not until told": no leader has a shrink check queued.
    let idle = Duration::from_secs(86_400);
    let now = Instant::now();
    let mut last_shrink_poll = now;
    let mut next_shrink = rm.next_shrink_poll(now).unwrap_or(now + idle);
    let mut next_checkpoint = now + checkpoint_every;
    let mut next_retention = now + retention_every;
    let mut next_flush = now + flush_every;
    loop {
        let next = next_shrink
            .min(next_checkpoint)
            .min(next_retention)
            .min(next_flush);
        tokio::select! {
            _ = shutdown.cancelled() => return,
            _ = sleep_until(next) => {}
            _ = rm.shrink_check_queued_earlier() => {}
        }
        let now = Instant::now();
        if now >= next_shrink {
            rm.maybe_shrink_isrs();
            last_shrink_poll = now;
        }
        next_shrink = rm.next_shrink_poll(last_shrink_poll).unwrap_or(now + idle);
        if now >= next_checkpoint {
            off_the_runtime(|| rm.checkpoint_high_watermarks());
            next_checkpoint = now + checkpoint_every;
        }
        if now >= next_flush {
            let failed = off_the_runtime(|| rm.flush_due());
            next_flush = now + flush_every;
            if let Some((tp, why)) = failed {
                tracing::error!(partition = %tp, error = %why, "a log failed: the broker stops; restart it to recover its logs");
                fatal.cancel();
                return;
            }
        }
        if now >= next_retention {
            off_the_runtime(|| rm.apply_retention());
            next_retention = now + retention_every;
        }
    }
}

/// The address part of a peer's `ip:port`.
fn peer_host(peer: &str) -> &str {
    match peer.rsplit_once(':') {
        Some((host, port)) if port.parse::<u16>().is_ok() => {
            host.trim_start_matches('[').trim_end_matches(']')
        }
        _ => peer,
    }
}

/// Runs `work`, which blocks on the disk (creating or opening logs, fsyncs,
/// checkpoints of every partition) or on the metadata update lock, without
/// starving the runtime: on a
/// multi-threaded runtime the worker hands its other tasks to another thread
/// first (`block_in_place`). Applying a LeaderAndIsr that creates thousands of
/// partitions takes seconds; done on a worker as it is, it held both workers of
/// a two-core machine (the second waiting for the update lock) and the
/// controller quorum, in the same process, missed its heartbeats and lost its
/// leader. On a current-thread runtime (the simulation) it runs inline, as
/// nothing else could run meanwhile anyway.
fn off_the_runtime<T>(work: impl FnOnce() -> T) -> T {
    match tokio::runtime::Handle::try_current().map(|h| h.runtime_flavor()) {
        Ok(tokio::runtime::RuntimeFlavor::MultiThread) => tokio::task::block_in_place(work),
        _ => work(),
    }
}

impl Dispatch for Broker {
    fn handle(self: Arc<Self>, request: pb::Request, responder: Responder) {
        Broker::handle(&self, request, responder);
    }

    fn config(&self) -> &BrokerConfig {
        Broker::config(self)
    }

    fn connections(&self) -> &Arc<ConnectionLimits> {
        Broker::connections(self)
    }

    fn heavy_work(&self) -> &crate::front::HeavyWork {
        &self.heavy_work
    }

    fn auth(&self) -> &BrokerAuth {
        Broker::auth(self)
    }

    fn user_connections(&self) -> &crate::auth::UserConnections {
        Broker::user_connections(self)
    }

    fn metadata(&self) -> &MetadataCache {
        Broker::metadata(self)
    }

    fn metrics(&self) -> &BrokerMetrics {
        Broker::metrics(self)
    }

    fn shared_metrics(&self) -> Arc<BrokerMetrics> {
        Broker::shared_metrics(self)
    }

    fn scrape_metrics(&self) -> String {
        Broker::scrape_metrics(self)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn forwarded_marks_are_set_once() {
        use pb::request::Body;
        let mut forwarded = [
            Body::DescribeQuorum(Default::default()),
            Body::ElectLeaders(Default::default()),
            Body::AlterTopic(Default::default()),
            Body::DeleteTopics(Default::default()),
            Body::AlterUserScramCredentials(Default::default()),
            Body::AlterClientQuotas(Default::default()),
            Body::CreateAcls(Default::default()),
            Body::DeleteAcls(Default::default()),
            Body::AlterReassignments(Default::default()),
        ];
        for body in &mut forwarded {
            let mark = forwarded_mark(body).expect("a forwarded request has a mark");
            assert!(!std::mem::replace(mark, true));
            assert_eq!(forwarded_mark(body).copied(), Some(true));
        }
        // CreateTopics has a mark too, but is forwarded by create_topics, which
        // waits for the new leaders.
        for mut body in [
            Body::Produce(Default::default()),
            Body::CreateTopics(Default::default()),
            Body::AlterPartition(Default::default()),
        ] {
            assert_eq!(forwarded_mark(&mut body), None);
        }
    }
}
