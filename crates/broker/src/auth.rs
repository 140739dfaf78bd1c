//! Who is on the other end of a connection, and what that lets it do.
//!
//! Brokers authenticate each other with SASL SCRAM-SHA-256 on every connection
//! they open to one another (fetchers, heartbeats and AlterPartition, the
//! controller's LeaderAndIsr pushes, the quorum's Raft traffic): the username is
//! `broker-N`, the password is broker N's secret in `broker_credentials_dir`, and
//! the server checks it against broker N's verifier there. A connection that
//! authenticated is [`Principal::Broker`]; any other is
//! [`Principal::Anonymous`]. The cluster's internal APIs ([`authorize`]) are
//! served only to the broker whose id the request claims, so no client can pose
//! as a follower, a controller or a registering broker.

use std::io;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use syncline_auth::{credentials, plain, ClientCredential, Mechanism, ScramServer, Verifier};
use syncline_proto::{pb, ErrorCode};

use crate::config::{BrokerConfig, SslClientAuth};
use crate::control::metadata_cache::MetadataCache;
use crate::net::{BoxStream, Listener, Network};

/// The identity a connection authenticated as.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub(crate) enum Principal {
    /// Not authenticated: `User:ANONYMOUS` to the authorizer.
    #[default]
    Anonymous,
    /// Broker `id`, proven by its SCRAM credential.
    Broker(i32),
    /// A user of the metadata log's credentials (SCRAM or PLAIN).
    User(Arc<str>),
}

impl Principal {
    /// The principal as ACLs name it: `User:NAME` (`User:ANONYMOUS` when
    /// unauthenticated).
    pub(crate) fn acl_name(&self) -> String {
        match self {
            Principal::Anonymous => syncline_auth::acl::ANONYMOUS.to_string(),
            Principal::Broker(id) => format!("User:{}", credentials::username(*id)),
            Principal::User(name) => format!("User:{name}"),
        }
    }
}

impl std::fmt::Display for Principal {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Principal::Anonymous => f.write_str("an unauthenticated connection"),
            Principal::Broker(id) => write!(f, "broker {id}"),
            Principal::User(name) => write!(f, "user {name}"),
        }
    }
}

/// The mechanism brokers use with each other.
pub(crate) const BROKER_MECHANISM: Mechanism = Mechanism::ScramSha256;

/// How long a peer has to complete the exchange on a connection we open (and
/// a client the TLS handshake on a connection it opens to us).
pub(crate) const AUTH_TIMEOUT: Duration = Duration::from_secs(10);

/// A TLS listener's configuration.
pub(crate) type TlsServer = Arc<syncline_tls::ServerConfig>;

/// This broker's credential and the directory of its peers' verifiers, and
/// the TLS configurations of its listeners and of its connections to peers.
#[derive(Debug)]
pub(crate) struct BrokerAuth {
    dir: PathBuf,
    credential: Arc<ClientCredential>,
    /// For SSL and SASL_SSL listeners: (client listeners, the inter-broker
    /// listener), which differ in `ssl_client_auth`.
    tls_server: Option<(TlsServer, TlsServer)>,
    /// For connections to other brokers, when the inter-broker listener is
    /// SSL or SASL_SSL: checks their certificates against `ssl_ca_location`
    /// and presents this broker's.
    tls_client: Option<Arc<syncline_tls::ClientConfig>>,
}

impl BrokerAuth {
    /// Loads this broker's credential, creating it on first start, and its TLS
    /// certificate and key when a listener needs them.
    pub(crate) fn load(config: &BrokerConfig) -> anyhow::Result<BrokerAuth> {
        use anyhow::Context as _;
        let dir = config.broker_credentials_dir.clone();
        let password = credentials::ensure(&dir, config.node_id)?;
        let (tls_server, tls_client) = match &config.ssl {
            Some(ssl) => {
                let server = |client_auth| {
                    let client_auth = match client_auth {
                        SslClientAuth::None => syncline_tls::ClientAuth::None,
                        SslClientAuth::Requested => syncline_tls::ClientAuth::Requested,
                        SslClientAuth::Required => syncline_tls::ClientAuth::Required,
                    };
                    syncline_tls::server_config(
                        &ssl.certificate,
                        &ssl.key,
                        ssl.ca.as_deref(),
                        client_auth,
                    )
                    .context("cannot set up TLS (ssl_certificate_location, ssl_key_location, ssl_ca_location)")
                };
                let server = (
                    server(ssl.client_auth)?,
                    server(ssl.inter_broker_client_auth)?,
                );
                let client = if config.inter_broker().security_protocol.is_tls() {
                    Some(
                        syncline_tls::client_config(
                            ssl.ca.as_deref(),
                            Some(&ssl.certificate),
                            Some(&ssl.key),
                        )
                        .context("cannot set up TLS to the other brokers (ssl_ca_location)")?,
                    )
                } else {
                    None
                };
                (Some(server), client)
            }
            None => (None, None),
        };
        Ok(BrokerAuth {
            credential: Arc::new(ClientCredential::new(
                credentials::username(config.node_id),
                password,
            )),
            dir,
            tls_server,
            tls_client,
        })
    }

    /// The TLS configuration of an SSL or SASL_SSL listener (`internal`: the
    /// inter-broker one).
    pub(crate) fn tls_server(&self, internal: bool) -> Option<&TlsServer> {
        self.tls_server
            .as_ref()
            .map(|(clients, brokers)| if internal { brokers } else { clients })
    }

    /// Broker `username`'s verifier, read afresh (a rotated credential takes
    /// effect on the peers' next authentication, with no restart).
    fn verifier(&self, username: &str) -> Option<Verifier> {
        let id = credentials::broker_id_of(username)?;
        match credentials::load_verifier(&self.dir, id) {
            Ok(v) => v,
            Err(e) => {
                tracing::warn!(error = %e, "cannot read a broker verifier");
                None
            }
        }
    }

    /// `network` with every connection it opens authenticated as this broker.
    pub(crate) fn network(self: &Arc<Self>, network: Arc<dyn Network>) -> Arc<dyn Network> {
        Arc::new(AuthenticatingNetwork {
            inner: network,
            auth: self.clone(),
        })
    }
}

/// Opens connections through `inner` and authenticates each before handing it
/// out, so every inter-broker client gets an authenticated stream.
#[derive(Debug)]
struct AuthenticatingNetwork {
    inner: Arc<dyn Network>,
    auth: Arc<BrokerAuth>,
}

type BoxFuture<'a, T> = std::pin::Pin<Box<dyn std::future::Future<Output = T> + Send + 'a>>;

impl Network for AuthenticatingNetwork {
    fn bind<'a>(&'a self, addr: &'a str) -> BoxFuture<'a, io::Result<Box<dyn Listener>>> {
        self.inner.bind(addr)
    }

    fn connect<'a>(&'a self, addr: &'a str) -> BoxFuture<'a, io::Result<BoxStream>> {
        Box::pin(async move {
            let stream = self.inner.connect(addr).await?;
            let credential = self.auth.credential.clone();
            let username = credential.username().to_string();
            let exchange = async {
                let mut stream = match &self.auth.tls_client {
                    Some(tls) => {
                        let host = addr.rsplit_once(':').map_or(addr, |(h, _)| h);
                        let host = host.trim_start_matches('[').trim_end_matches(']');
                        let tls = syncline_tls::connect(tls, host, stream)
                            .await
                            .map_err(|e| {
                                io::Error::new(
                                    io::ErrorKind::PermissionDenied,
                                    format!("TLS to broker {addr} failed: {e}"),
                                )
                            })?;
                        Box::new(tls) as BoxStream
                    }
                    None => stream,
                };
                syncline_client::sasl::authenticate(
                    &mut stream,
                    BROKER_MECHANISM,
                    credential,
                    &username,
                )
                .await
                .map_err(|e| {
                    tracing::warn!(peer = %addr, error = %e, "authentication as {username} failed: check that the peer's {} holds this broker's current verifier", self.auth.dir.display());
                    io::Error::new(
                        io::ErrorKind::PermissionDenied,
                        format!("authentication as {username} to {addr} failed: {e}"),
                    )
                })?;
                Ok::<_, io::Error>(stream)
            };
            match tokio::time::timeout(AUTH_TIMEOUT, exchange).await {
                Ok(result) => result,
                Err(_) => Err(io::Error::new(
                    io::ErrorKind::TimedOut,
                    format!("authentication as {username} to {addr} timed out"),
                )),
            }
        })
    }
}

/// A SASL mechanism a listener may offer.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum SaslMechanism {
    /// SCRAM-SHA-256 or SCRAM-SHA-512.
    Scram(Mechanism),
    /// PLAIN: the password itself (TLS listeners only).
    Plain,
}

impl SaslMechanism {
    fn name(self) -> &'static str {
        match self {
            SaslMechanism::Scram(m) => m.name(),
            SaslMechanism::Plain => plain::MECHANISM_NAME,
        }
    }

    fn from_name(name: &str) -> Option<SaslMechanism> {
        if name == plain::MECHANISM_NAME {
            return Some(SaslMechanism::Plain);
        }
        Mechanism::from_name(name).map(SaslMechanism::Scram)
    }
}

/// What a connection's SASL exchange checks against.
pub(crate) struct SaslContext<'a> {
    /// The brokers' verifiers.
    pub auth: &'a BrokerAuth,
    /// The users' credentials (the metadata log's, as this broker last heard).
    pub users: &'a MetadataCache,
    /// `sasl_enabled_mechanisms`.
    pub enabled: &'a [String],
    /// The connection is TLS (PLAIN is offered only then).
    pub tls: bool,
}

impl SaslContext<'_> {
    /// The mechanisms offered: the enabled ones (PLAIN only over TLS), and
    /// always the brokers' own.
    fn offered(&self) -> Vec<SaslMechanism> {
        let mut out = vec![SaslMechanism::Scram(BROKER_MECHANISM)];
        for name in self.enabled {
            match SaslMechanism::from_name(name) {
                Some(SaslMechanism::Plain) if !self.tls => {}
                Some(m) if !out.contains(&m) => out.push(m),
                _ => {}
            }
        }
        out
    }

    /// Whether users (not brokers) may use `m` here.
    fn enabled_for_users(&self, m: SaslMechanism) -> bool {
        self.enabled.iter().any(|e| e == m.name()) && (self.tls || m != SaslMechanism::Plain)
    }

    /// The verifier for `username` with SCRAM `m`: a broker's from the
    /// credentials directory, a user's from the metadata.
    fn scram_verifier(&self, username: &str, m: Mechanism) -> Option<Verifier> {
        if credentials::broker_id_of(username).is_some() {
            return (m == BROKER_MECHANISM)
                .then(|| self.auth.verifier(username))
                .flatten();
        }
        if !self.enabled_for_users(SaslMechanism::Scram(m)) {
            return None;
        }
        self.users.scram_verifier(username, m)
    }

    /// Checks a PLAIN message against the user's SCRAM credentials.
    fn plain(&self, message: &[u8]) -> Result<Principal, String> {
        let m = plain::decode(message).map_err(|e| e.to_string())?;
        if credentials::broker_id_of(&m.username).is_some() {
            return Err(format!(
                "{} is a broker: brokers use SCRAM-SHA-256",
                m.username
            ));
        }
        let ok = [Mechanism::ScramSha256, Mechanism::ScramSha512]
            .into_iter()
            .filter_map(|mech| self.users.scram_verifier(&m.username, mech))
            .any(|v| v.matches(&m.password));
        if ok {
            Ok(Principal::User(m.username.into()))
        } else {
            Err(format!(
                "unknown user or wrong password for {:?}",
                m.username
            ))
        }
    }
}

/// What a client is told when its credential is refused: the same for an
/// unknown user and a wrong password, as Kafka does (the broker's log says
/// which).
fn refusal(mechanism: SaslMechanism) -> String {
    format!(
        "Authentication failed: invalid credentials with SASL mechanism {} (wrong username or password, or the user has no {} credential)",
        mechanism.name(),
        mechanism.name()
    )
}

/// The server side of one connection's SASL exchange.
#[derive(Debug, Default)]
pub(crate) enum SaslState {
    /// Nothing yet.
    #[default]
    Start,
    /// SaslHandshake agreed on a mechanism.
    Handshaken(SaslMechanism),
    /// The client-first message was answered.
    Exchanging(Box<ScramServer>, Mechanism),
    /// Authenticated (or failed): no more exchanges on this connection.
    Done,
}

/// What the connection does after a SASL request.
#[derive(Debug)]
pub(crate) struct SaslStep {
    /// The answer.
    pub response: pb::response::Body,
    /// Set when the exchange succeeded.
    pub authenticated: Option<Principal>,
    /// Close the connection after answering (a failed authentication).
    pub close: bool,
}

impl SaslState {
    /// Whether stepping `body` looks up a user's credential (not a broker's):
    /// a broker that has not heard of its users yet must wait for them first,
    /// or it would refuse a valid user.
    pub(crate) fn needs_users(&self, body: &pb::request::Body) -> bool {
        let pb::request::Body::SaslAuthenticate(r) = body else {
            return false;
        };
        let user = match self {
            SaslState::Handshaken(SaslMechanism::Plain) => {
                plain::decode(&r.auth_bytes).ok().map(|m| m.username)
            }
            // client-first: gs2-header "n=USER,r=..."
            SaslState::Handshaken(SaslMechanism::Scram(_)) => std::str::from_utf8(&r.auth_bytes)
                .ok()
                .and_then(|t| t.splitn(3, ',').nth(2))
                .and_then(|bare| bare.strip_prefix("n="))
                .and_then(|rest| rest.split(',').next())
                .map(str::to_string),
            _ => None,
        };
        user.is_some_and(|u| credentials::broker_id_of(&u).is_none())
    }

    /// Runs one SaslHandshake or SaslAuthenticate request (`body` is one of them).
    pub(crate) fn step(
        &mut self,
        ctx: &SaslContext<'_>,
        body: pb::request::Body,
        peer: &str,
    ) -> SaslStep {
        use pb::request::Body;
        use pb::response::Body as Resp;
        let offered = ctx.offered();
        let mechanisms = offered.iter().map(|m| m.name().to_string()).collect();
        match body {
            Body::SaslHandshake(r) => {
                let wanted = SaslMechanism::from_name(&r.mechanism);
                let (code, next) = match (&*self, wanted) {
                    (SaslState::Start, Some(m)) if offered.contains(&m) => {
                        (ErrorCode::None, SaslState::Handshaken(m))
                    }
                    (SaslState::Start, _) => {
                        (ErrorCode::UnsupportedSaslMechanism, SaslState::Start)
                    }
                    _ => (ErrorCode::IllegalSaslState, SaslState::Done),
                };
                let close = matches!(next, SaslState::Done);
                *self = next;
                SaslStep {
                    response: Resp::SaslHandshake(pb::SaslHandshakeResponse {
                        error_code: code as i32,
                        mechanisms,
                    }),
                    authenticated: None,
                    close,
                }
            }
            Body::SaslAuthenticate(r) => {
                let (result, next) = match std::mem::take(self) {
                    SaslState::Handshaken(SaslMechanism::Plain) => match ctx.plain(&r.auth_bytes) {
                        Ok(p) => (Ok((Vec::new(), Some(p))), SaslState::Done),
                        Err(e) => (Err((e, refusal(SaslMechanism::Plain))), SaslState::Done),
                    },
                    SaslState::Handshaken(SaslMechanism::Scram(m)) => {
                        let mut server = Box::new(ScramServer::new(m));
                        match server.client_first(&r.auth_bytes, |u| ctx.scram_verifier(u, m)) {
                            Ok(reply) => (Ok((reply, None)), SaslState::Exchanging(server, m)),
                            Err(e) => (Err(client_message(&e, m)), SaslState::Done),
                        }
                    }
                    SaslState::Exchanging(mut server, m) => {
                        match server.client_final(&r.auth_bytes) {
                            Ok(reply) => {
                                let name = server.username().unwrap_or_default().to_string();
                                let principal = match credentials::broker_id_of(&name) {
                                    Some(id) => Principal::Broker(id),
                                    None => Principal::User(name.into()),
                                };
                                (Ok((reply, Some(principal))), SaslState::Done)
                            }
                            Err(e) => (Err(client_message(&e, m)), SaslState::Done),
                        }
                    }
                    SaslState::Start | SaslState::Done => {
                        *self = SaslState::Done;
                        return SaslStep {
                            response: Resp::SaslAuthenticate(pb::SaslAuthenticateResponse {
                                error_code: ErrorCode::IllegalSaslState as i32,
                                error_message: "SaslAuthenticate needs a SaslHandshake first, and a connection authenticates once".into(),
                                auth_bytes: Bytes::new(),
                            }),
                            authenticated: None,
                            close: true,
                        };
                    }
                };
                *self = next;
                match result {
                    Ok((reply, authenticated)) => SaslStep {
                        response: Resp::SaslAuthenticate(pb::SaslAuthenticateResponse {
                            error_code: ErrorCode::None as i32,
                            error_message: String::new(),
                            auth_bytes: Bytes::from(reply),
                        }),
                        authenticated,
                        close: false,
                    },
                    Err((why, message)) => {
                        tracing::warn!(%peer, error = %why, "refused an authentication (a broker's: its credential does not match its verifier in {}; a user's: see `syncline user list`)", ctx.auth.dir.display());
                        SaslStep {
                            response: Resp::SaslAuthenticate(pb::SaslAuthenticateResponse {
                                error_code: ErrorCode::SaslAuthenticationFailed as i32,
                                error_message: message,
                                auth_bytes: Bytes::new(),
                            }),
                            authenticated: None,
                            close: true,
                        }
                    }
                }
            }
            _ => unreachable!("only SASL requests are stepped"),
        }
    }
}

/// (what the log says, what the client is told) of a failed SCRAM step: the
/// client learns the grammar's problems but not whether the user exists.
fn client_message(e: &syncline_auth::ScramError, m: Mechanism) -> (String, String) {
    use syncline_auth::ScramError;
    let told = match e {
        ScramError::UnknownUser(_) | ScramError::BadProof(_) => refusal(SaslMechanism::Scram(m)),
        ScramError::Unsupported(s) if s.contains("credential, not") => {
            refusal(SaslMechanism::Scram(m))
        }
        other => other.to_string(),
    };
    (e.to_string(), told)
}

/// The open connections of each authenticated user, so that deleting a user
/// (its last credential) closes them.
#[derive(Debug, Default)]
pub(crate) struct UserConnections {
    by_user: parking_lot::Mutex<
        std::collections::HashMap<Arc<str>, Vec<tokio_util::sync::CancellationToken>>,
    >,
}

impl UserConnections {
    /// Remembers `close` as a connection of `user` (forgotten once cancelled).
    pub(crate) fn register(&self, user: &Arc<str>, close: &tokio_util::sync::CancellationToken) {
        let mut by_user = self.by_user.lock();
        let list = by_user.entry(user.clone()).or_default();
        list.retain(|c| !c.is_cancelled());
        list.push(close.clone());
    }

    /// Closes the connections of every user `exists` no longer knows; the
    /// number closed.
    pub(crate) fn close_removed(&self, exists: impl Fn(&str) -> bool) -> usize {
        let mut by_user = self.by_user.lock();
        let mut closed = 0;
        by_user.retain(|user, list| {
            list.retain(|c| !c.is_cancelled());
            if exists(user) {
                return !list.is_empty();
            }
            for c in list.drain(..) {
                c.cancel();
                closed += 1;
            }
            tracing::info!(%user, "closed the connections of a deleted user");
            false
        });
        closed
    }
}

/// Whether `principal` may make the request `body`: the internal APIs need the
/// broker whose id the request claims; everything else is open (client
/// authorization is a layer of its own). `Err` says why not.
pub(crate) fn authorize(
    config: &BrokerConfig,
    body: &pb::request::Body,
    principal: &Principal,
) -> Result<(), String> {
    use pb::request::Body;
    if !config.authenticates_internal_apis() {
        return Ok(());
    }
    let (api, claimed) = match body {
        Body::Fetch(r) if r.replica_id >= 0 => ("a follower Fetch", r.replica_id),
        // A follower's view reaches past the high watermark: only the
        // follower itself may ask for it.
        Body::ListOffsets(r) if r.replica_id >= 0 => ("a follower ListOffsets", r.replica_id),
        Body::OffsetsForLeaderEpoch(r) if r.replica_id >= 0 => {
            ("a follower OffsetsForLeaderEpoch", r.replica_id)
        }
        Body::LeaderAndIsr(r) => {
            if !config
                .controller_quorum_voters
                .iter()
                .any(|v| v.node_id == r.controller_id)
            {
                return Err(format!(
                    "LeaderAndIsr from controller {}, which is not a controller voter",
                    r.controller_id
                ));
            }
            ("LeaderAndIsr", r.controller_id)
        }
        Body::AlterPartition(r) => ("AlterPartition", r.broker_id),
        Body::BrokerRegistration(r) => ("BrokerRegistration", r.broker_id),
        Body::BrokerHeartbeat(r) => ("BrokerHeartbeat", r.broker_id),
        Body::AllocateProducerIds(r) => ("AllocateProducerIds", r.broker_id),
        Body::Raft(r) => {
            let voter = matches!(principal, Principal::Broker(id)
                if config.controller_quorum_voters.iter().any(|v| v.node_id == *id));
            if !voter {
                return Err(format!(
                    "controller quorum traffic is only for controller voters, not {principal}"
                ));
            }
            (
                "controller quorum traffic",
                syncline_controller::raft_request_sender(&r.payload)?,
            )
        }
        _ => return Ok(()),
    };
    match principal {
        Principal::Broker(id) if *id == claimed => Ok(()),
        _ => Err(format!(
            "{api} as broker {claimed} needs a connection authenticated as broker {claimed}, not {principal}"
        )),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn config(extra: &str) -> BrokerConfig {
        BrokerConfig::parse(&format!(
            "node_id = 1\nprocess_roles = \"broker,controller\"\nlog_dirs = \"/tmp/x/broker-1\"\ncontroller_quorum_voters = \"1@127.0.0.1:9092,2@127.0.0.1:9093\"\n{extra}"
        ))
        .unwrap()
    }

    #[test]
    fn internal_apis_need_the_broker_they_claim() {
        use pb::request::Body;
        let c = config("");
        let fetch = |replica_id| {
            Body::Fetch(pb::FetchRequest {
                replica_id,
                ..Default::default()
            })
        };
        let list_offsets = |replica_id| {
            Body::ListOffsets(pb::ListOffsetsRequest {
                replica_id,
                ..Default::default()
            })
        };
        let heartbeat = Body::BrokerHeartbeat(pb::BrokerHeartbeatRequest {
            broker_id: 3,
            ..Default::default()
        });
        let lai = |controller_id| {
            Body::LeaderAndIsr(pb::LeaderAndIsrRequest {
                controller_id,
                ..Default::default()
            })
        };
        let raft = |sender| {
            Body::Raft(pb::RaftRequest {
                payload: syncline_controller::raft_heartbeat_request(sender, 3).unwrap(),
            })
        };
        let cases: Vec<(&str, Body, Principal, bool)> = vec![
            (
                "consumer fetch, anonymous",
                fetch(-1),
                Principal::Anonymous,
                true,
            ),
            (
                "follower fetch, anonymous",
                fetch(2),
                Principal::Anonymous,
                false,
            ),
            (
                "follower fetch, other broker",
                fetch(2),
                Principal::Broker(3),
                false,
            ),
            (
                "follower fetch, itself",
                fetch(2),
                Principal::Broker(2),
                true,
            ),
            (
                "consumer ListOffsets, anonymous",
                list_offsets(-1),
                Principal::Anonymous,
                true,
            ),
            (
                "follower ListOffsets, a user",
                list_offsets(2),
                Principal::User("alice".into()),
                false,
            ),
            (
                "follower ListOffsets, itself",
                list_offsets(2),
                Principal::Broker(2),
                true,
            ),
            (
                "heartbeat, anonymous",
                heartbeat.clone(),
                Principal::Anonymous,
                false,
            ),
            (
                "heartbeat, other broker",
                heartbeat.clone(),
                Principal::Broker(2),
                false,
            ),
            ("heartbeat, itself", heartbeat, Principal::Broker(3), true),
            (
                "LeaderAndIsr, the voter",
                lai(2),
                Principal::Broker(2),
                true,
            ),
            (
                "LeaderAndIsr, a non-voter for itself",
                lai(3),
                Principal::Broker(3),
                false,
            ),
            (
                "LeaderAndIsr, anonymous",
                lai(1),
                Principal::Anonymous,
                false,
            ),
            ("raft, voter", raft(2), Principal::Broker(2), true),
            (
                "raft, a voter for another",
                raft(1),
                Principal::Broker(2),
                false,
            ),
            ("raft, non-voter", raft(3), Principal::Broker(3), false),
            ("raft, anonymous", raft(1), Principal::Anonymous, false),
            (
                "raft, undecodable",
                Body::Raft(pb::RaftRequest {
                    payload: vec![9, 9].into(),
                }),
                Principal::Broker(2),
                false,
            ),
            (
                "metadata, anonymous",
                Body::Metadata(pb::MetadataRequest::default()),
                Principal::Anonymous,
                true,
            ),
        ];
        for (name, body, principal, allowed) in cases {
            assert_eq!(
                authorize(&c, &body, &principal).is_ok(),
                allowed,
                "{name}: {:?}",
                authorize(&c, &body, &principal)
            );
        }
    }

    fn handshake(mechanism: &str) -> pb::request::Body {
        pb::request::Body::SaslHandshake(pb::SaslHandshakeRequest {
            mechanism: mechanism.into(),
        })
    }

    fn authenticate(bytes: Vec<u8>) -> pb::request::Body {
        pb::request::Body::SaslAuthenticate(pb::SaslAuthenticateRequest {
            auth_bytes: Bytes::from(bytes),
        })
    }

    fn code(step: &SaslStep) -> ErrorCode {
        match &step.response {
            pb::response::Body::SaslHandshake(r) => ErrorCode::from_wire(r.error_code),
            pb::response::Body::SaslAuthenticate(r) => ErrorCode::from_wire(r.error_code),
            other => panic!("unexpected {other:?}"),
        }
    }

    fn reply(step: &SaslStep) -> Vec<u8> {
        match &step.response {
            pb::response::Body::SaslAuthenticate(r) => r.auth_bytes.to_vec(),
            other => panic!("unexpected {other:?}"),
        }
    }

    fn context<'a>(
        auth: &'a BrokerAuth,
        users: &'a MetadataCache,
        enabled: &'a [String],
    ) -> SaslContext<'a> {
        SaslContext {
            auth,
            users,
            enabled,
            tls: false,
        }
    }

    /// Runs a whole exchange as `username` with `password`: the last step.
    fn exchange(ctx: &SaslContext<'_>, username: &str, password: &str) -> (SaslStep, SaslState) {
        let mut state = SaslState::default();
        let step = state.step(ctx, handshake("SCRAM-SHA-256"), "peer");
        assert_eq!(code(&step), ErrorCode::None);
        let credential = Arc::new(ClientCredential::new(username, password));
        let (mut client, first) = syncline_auth::ScramClient::start(BROKER_MECHANISM, credential);
        let step = state.step(ctx, authenticate(first), "peer");
        if code(&step) != ErrorCode::None {
            return (step, state);
        }
        let last = client.server_first(&reply(&step)).unwrap();
        let step = state.step(ctx, authenticate(last), "peer");
        if step.authenticated.is_some() {
            client
                .server_final(&reply(&step))
                .expect("the server proves itself");
        }
        (step, state)
    }

    #[test]
    fn the_sasl_exchange_authenticates_a_broker_and_nothing_else() {
        let dir = tempfile::tempdir().unwrap();
        let creds = dir.path().join("credentials");
        let auth = BrokerAuth::load(&config(&format!(
            "broker_credentials_dir = \"{}\"",
            creds.display()
        )))
        .unwrap();
        let two = credentials::ensure(&creds, 2).unwrap();
        let users = MetadataCache::new("c");
        let enabled = vec!["SCRAM-SHA-256".to_string()];
        let ctx = context(&auth, &users, &enabled);
        let auth = &ctx;

        let (step, mut state) = exchange(auth, "broker-2", &two);
        assert_eq!(step.authenticated, Some(Principal::Broker(2)));
        assert!(!step.close);
        // Once only: a second handshake ends the connection.
        let again = state.step(auth, handshake("SCRAM-SHA-256"), "peer");
        assert_eq!(code(&again), ErrorCode::IllegalSaslState);
        assert!(again.close);

        // A wrong password, a broker without a verifier, a user that is no broker.
        for (user, password) in [("broker-2", "wrong"), ("broker-9", "x"), ("admin", "x")] {
            let (step, _) = exchange(auth, user, password);
            assert_eq!(code(&step), ErrorCode::SaslAuthenticationFailed, "{user}");
            assert!(step.close && step.authenticated.is_none(), "{user}");
        }

        // An unknown mechanism may be retried; SaslAuthenticate first may not.
        let mut state = SaslState::default();
        let step = state.step(auth, handshake("PLAIN"), "peer");
        assert_eq!(code(&step), ErrorCode::UnsupportedSaslMechanism);
        assert!(!step.close);
        let step = state.step(auth, authenticate(b"n,,n=broker-2,r=abc".to_vec()), "peer");
        assert_eq!(code(&step), ErrorCode::IllegalSaslState);
        assert!(step.close);
        // Garbage in place of client-first.
        let mut state = SaslState::default();
        let _ = state.step(auth, handshake("SCRAM-SHA-256"), "peer");
        let step = state.step(auth, authenticate(vec![0xff, 0, 1]), "peer");
        assert_eq!(code(&step), ErrorCode::SaslAuthenticationFailed);
    }

    /// A cache announcing `alice`'s credentials (both SCRAM mechanisms) made
    /// from `password`.
    fn users_with_alice(password: &str) -> MetadataCache {
        let users = MetadataCache::new("c");
        let credentials = [Mechanism::ScramSha256, Mechanism::ScramSha512]
            .into_iter()
            .map(|m| syncline_controller::credential_of("alice", &Verifier::generate(m, password)))
            .collect();
        let _ = users.apply(&pb::LeaderAndIsrRequest {
            controller_id: 1,
            controller_epoch: 1,
            metadata_offset: 3,
            security: Some(pb::SecurityImage {
                credentials,
                acls: Vec::new(),
            }),
            ..Default::default()
        });
        assert!(users.user_exists("alice"));
        users
    }

    #[test]
    fn users_authenticate_with_scram_of_either_hash_and_with_plain_over_tls_only() {
        let dir = tempfile::tempdir().unwrap();
        let auth = BrokerAuth::load(&config(&format!(
            "broker_credentials_dir = \"{}\"",
            dir.path().join("credentials").display()
        )))
        .unwrap();
        let users = users_with_alice("s3cret");
        let all: Vec<String> = ["SCRAM-SHA-256", "SCRAM-SHA-512", "PLAIN"]
            .map(String::from)
            .to_vec();
        let plaintext = context(&auth, &users, &all);
        let tls = SaslContext {
            tls: true,
            ..context(&auth, &users, &all)
        };

        // SCRAM-SHA-512 (and 256, in `exchange`) as alice.
        let scram = |ctx: &SaslContext<'_>, m: Mechanism, password: &str| {
            let mut state = SaslState::default();
            let step = state.step(ctx, handshake(m.name()), "peer");
            assert_eq!(code(&step), ErrorCode::None, "{m}");
            let credential = Arc::new(ClientCredential::new("alice", password));
            let (mut client, first) = syncline_auth::ScramClient::start(m, credential);
            let step = state.step(ctx, authenticate(first), "peer");
            assert_eq!(code(&step), ErrorCode::None);
            let last = client.server_first(&reply(&step)).unwrap();
            state.step(ctx, authenticate(last), "peer")
        };
        let ok = scram(&plaintext, Mechanism::ScramSha512, "s3cret");
        assert_eq!(ok.authenticated, Some(Principal::User("alice".into())));
        let (ok, _) = exchange(&plaintext, "alice", "s3cret");
        assert_eq!(ok.authenticated, Some(Principal::User("alice".into())));
        // A wrong password and an unknown user read the same to the client.
        let wrong = scram(&plaintext, Mechanism::ScramSha512, "guess");
        let (unknown, _) = exchange(&plaintext, "mallory", "x");
        for step in [&wrong, &unknown] {
            assert_eq!(code(step), ErrorCode::SaslAuthenticationFailed);
            assert!(step.close && step.authenticated.is_none());
            let pb::response::Body::SaslAuthenticate(r) = &step.response else {
                unreachable!()
            };
            assert!(
                r.error_message.contains("invalid credentials"),
                "{}",
                r.error_message
            );
            assert!(!r.error_message.contains("mallory"), "{}", r.error_message);
        }

        // PLAIN: not offered without TLS; over TLS, checked against the SCRAM
        // credential; never for a broker.
        let mut state = SaslState::default();
        let step = state.step(&plaintext, handshake("PLAIN"), "peer");
        assert_eq!(code(&step), ErrorCode::UnsupportedSaslMechanism);
        let pb::response::Body::SaslHandshake(h) = &step.response else {
            unreachable!()
        };
        assert_eq!(h.mechanisms, ["SCRAM-SHA-256", "SCRAM-SHA-512"]);
        let plain = |user: &str, password: &str| {
            let mut state = SaslState::default();
            let step = state.step(&tls, handshake("PLAIN"), "peer");
            assert_eq!(code(&step), ErrorCode::None);
            state.step(&tls, authenticate(plain::encode(user, password)), "peer")
        };
        assert_eq!(
            plain("alice", "s3cret").authenticated,
            Some(Principal::User("alice".into()))
        );
        for (user, password) in [("alice", "nope"), ("bob", "s3cret"), ("broker-1", "x")] {
            let step = plain(user, password);
            assert_eq!(code(&step), ErrorCode::SaslAuthenticationFailed, "{user}");
            assert!(step.close, "{user}");
        }

        // Mechanisms switched off for users stay on for brokers (SCRAM-SHA-256).
        let only_512 = vec!["SCRAM-SHA-512".to_string()];
        let ctx = context(&auth, &users, &only_512);
        let (refused, _) = exchange(&ctx, "alice", "s3cret");
        assert_eq!(code(&refused), ErrorCode::SaslAuthenticationFailed);
        let one = credentials::ensure(&dir.path().join("credentials"), 1).unwrap();
        let (broker, _) = exchange(&ctx, "broker-1", &one);
        assert_eq!(broker.authenticated, Some(Principal::Broker(1)));
    }

    #[test]
    fn only_a_users_authentication_waits_for_the_users() {
        let scram = SaslState::Handshaken(SaslMechanism::Scram(Mechanism::ScramSha512));
        let plain_state = SaslState::Handshaken(SaslMechanism::Plain);
        let cases: Vec<(&str, &SaslState, Vec<u8>, bool)> = vec![
            (
                "a user's client-first",
                &scram,
                b"n,,n=alice,r=abc".to_vec(),
                true,
            ),
            (
                "a broker's client-first",
                &scram,
                b"n,,n=broker-2,r=abc".to_vec(),
                false,
            ),
            (
                "a user's PLAIN",
                &plain_state,
                plain::encode("alice", "pw"),
                true,
            ),
            (
                "a broker's PLAIN",
                &plain_state,
                plain::encode("broker-1", "pw"),
                false,
            ),
            ("garbage", &scram, vec![0xff, 1], false),
            (
                "client-final",
                &SaslState::Start,
                b"c=biws,r=x,p=y".to_vec(),
                false,
            ),
        ];
        for (name, state, bytes, waits) in cases {
            assert_eq!(state.needs_users(&authenticate(bytes)), waits, "{name}");
        }
        assert!(!scram.needs_users(&handshake("PLAIN")));
    }

    #[test]
    fn deleting_a_user_closes_its_connections_only() {
        let connections = UserConnections::default();
        let (alice, bob) = (
            tokio_util::sync::CancellationToken::new(),
            tokio_util::sync::CancellationToken::new(),
        );
        connections.register(&Arc::from("alice"), &alice);
        connections.register(&Arc::from("bob"), &bob);
        assert_eq!(connections.close_removed(|u| u == "alice" || u == "bob"), 0);
        assert_eq!(connections.close_removed(|u| u == "bob"), 1);
        assert!(alice.is_cancelled() && !bob.is_cancelled());
        assert_eq!(Principal::Anonymous.acl_name(), "User:ANONYMOUS");
        assert_eq!(Principal::User("bob".into()).acl_name(), "User:bob");
    }

    #[test]
    fn credentials_dir_defaults_beside_the_log_dir() {
        assert_eq!(
            config("").broker_credentials_dir,
            PathBuf::from("/tmp/x/credentials")
        );
        assert_eq!(
            config("broker_credentials_dir = \"/etc/creds\"").broker_credentials_dir,
            PathBuf::from("/etc/creds")
        );
        assert!(BrokerConfig::parse(
            "node_id = 1\nlog_dirs = \"/tmp/x\"\nbroker_credentials_dir = \" \""
        )
        .is_err());
    }
}
