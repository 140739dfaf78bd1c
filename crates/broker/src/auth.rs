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
use syncline_auth::{credentials, ClientCredential, Mechanism, ScramServer, Verifier};
use syncline_proto::{pb, ErrorCode};

use crate::config::BrokerConfig;
use crate::net::{BoxStream, Listener, Network};

/// The identity a connection authenticated as.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub(crate) enum Principal {
    /// Not authenticated: a client.
    #[default]
    Anonymous,
    /// Broker `id`, proven by its SCRAM credential.
    Broker(i32),
}

impl std::fmt::Display for Principal {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Principal::Anonymous => f.write_str("an unauthenticated connection"),
            Principal::Broker(id) => write!(f, "broker {id}"),
        }
    }
}

/// The mechanism brokers use with each other.
pub(crate) const BROKER_MECHANISM: Mechanism = Mechanism::ScramSha256;

/// How long a peer has to complete the exchange on a connection we open.
const AUTH_TIMEOUT: Duration = Duration::from_secs(10);

/// This broker's credential and the directory of its peers' verifiers.
#[derive(Debug)]
pub(crate) struct BrokerAuth {
    dir: PathBuf,
    credential: Arc<ClientCredential>,
}

impl BrokerAuth {
    /// Loads this broker's credential, creating it on first start.
    pub(crate) fn load(config: &BrokerConfig) -> anyhow::Result<BrokerAuth> {
        let dir = config.broker_credentials_dir.clone();
        let password = credentials::ensure(&dir, config.node_id)?;
        Ok(BrokerAuth {
            credential: Arc::new(ClientCredential::new(
                credentials::username(config.node_id),
                password,
            )),
            dir,
        })
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
            let mut stream = self.inner.connect(addr).await?;
            let credential = self.auth.credential.clone();
            let username = credential.username().to_string();
            let exchange = syncline_client::sasl::authenticate(
                &mut stream,
                BROKER_MECHANISM,
                credential,
                &username,
            );
            match tokio::time::timeout(AUTH_TIMEOUT, exchange).await {
                Ok(Ok(())) => Ok(stream),
                Ok(Err(e)) => {
                    tracing::warn!(peer = %addr, error = %e, "authentication as {username} failed: check that the peer's {} holds this broker's current verifier", self.auth.dir.display());
                    Err(io::Error::new(
                        io::ErrorKind::PermissionDenied,
                        format!("authentication as {username} to {addr} failed: {e}"),
                    ))
                }
                Err(_) => Err(io::Error::new(
                    io::ErrorKind::TimedOut,
                    format!("authentication as {username} to {addr} timed out"),
                )),
            }
        })
    }
}

/// The server side of one connection's SASL exchange.
#[derive(Debug, Default)]
pub(crate) enum SaslState {
    /// Nothing yet.
    #[default]
    Start,
    /// SaslHandshake agreed on a mechanism.
    Handshaken(Mechanism),
    /// The client-first message was answered.
    Exchanging(Box<ScramServer>),
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
    /// Runs one SaslHandshake or SaslAuthenticate request (`body` is one of them).
    pub(crate) fn step(
        &mut self,
        auth: &BrokerAuth,
        body: pb::request::Body,
        peer: &str,
    ) -> SaslStep {
        use pb::request::Body;
        use pb::response::Body as Resp;
        let mechanisms = vec![BROKER_MECHANISM.name().to_string()];
        match body {
            Body::SaslHandshake(r) => {
                let (code, next) = match (&*self, Mechanism::from_name(&r.mechanism)) {
                    (SaslState::Start, Some(m)) if m == BROKER_MECHANISM => {
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
                    SaslState::Handshaken(m) => {
                        let mut server = Box::new(ScramServer::new(m));
                        match server.client_first(&r.auth_bytes, |u| auth.verifier(u)) {
                            Ok(reply) => (Ok((reply, None)), SaslState::Exchanging(server)),
                            Err(e) => (Err(e.to_string()), SaslState::Done),
                        }
                    }
                    SaslState::Exchanging(mut server) => match server.client_final(&r.auth_bytes) {
                        Ok(reply) => {
                            let id = server.username().and_then(credentials::broker_id_of);
                            match id {
                                Some(id) => {
                                    (Ok((reply, Some(Principal::Broker(id)))), SaslState::Done)
                                }
                                None => (Err("not a broker".to_string()), SaslState::Done),
                            }
                        }
                        Err(e) => (Err(e.to_string()), SaslState::Done),
                    },
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
                    Err(message) => {
                        tracing::warn!(%peer, error = %message, "refused an authentication: if this is a broker, its credential does not match its verifier in {}", auth.dir.display());
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

/// Whether `principal` may make the request `body`: the internal APIs need the
/// broker whose id the request claims; everything else is open (client
/// authorization is a layer of its own). `Err` says why not.
pub(crate) fn authorize(
    config: &BrokerConfig,
    body: &pb::request::Body,
    principal: Principal,
) -> Result<(), String> {
    use pb::request::Body;
    if !config.authenticates_internal_apis() {
        return Ok(());
    }
    let (api, claimed) = match body {
        Body::Fetch(r) if r.replica_id >= 0 => ("a follower Fetch", r.replica_id),
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
                if config.controller_quorum_voters.iter().any(|v| v.node_id == id));
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
        Principal::Broker(id) if id == claimed => Ok(()),
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
                authorize(&c, &body, principal).is_ok(),
                allowed,
                "{name}: {:?}",
                authorize(&c, &body, principal)
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

    /// Runs a whole exchange as `username` with `password`: the last step.
    fn exchange(auth: &BrokerAuth, username: &str, password: &str) -> (SaslStep, SaslState) {
        let mut state = SaslState::default();
        let step = state.step(auth, handshake("SCRAM-SHA-256"), "peer");
        assert_eq!(code(&step), ErrorCode::None);
        let credential = Arc::new(ClientCredential::new(username, password));
        let (mut client, first) = syncline_auth::ScramClient::start(BROKER_MECHANISM, credential);
        let step = state.step(auth, authenticate(first), "peer");
        if code(&step) != ErrorCode::None {
            return (step, state);
        }
        let last = client.server_first(&reply(&step)).unwrap();
        let step = state.step(auth, authenticate(last), "peer");
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

        let (step, mut state) = exchange(&auth, "broker-2", &two);
        assert_eq!(step.authenticated, Some(Principal::Broker(2)));
        assert!(!step.close);
        // Once only: a second handshake ends the connection.
        let again = state.step(&auth, handshake("SCRAM-SHA-256"), "peer");
        assert_eq!(code(&again), ErrorCode::IllegalSaslState);
        assert!(again.close);

        // A wrong password, a broker without a verifier, a user that is no broker.
        for (user, password) in [("broker-2", "wrong"), ("broker-9", "x"), ("admin", "x")] {
            let (step, _) = exchange(&auth, user, password);
            assert_eq!(code(&step), ErrorCode::SaslAuthenticationFailed, "{user}");
            assert!(step.close && step.authenticated.is_none(), "{user}");
        }

        // An unknown mechanism may be retried; SaslAuthenticate first may not.
        let mut state = SaslState::default();
        let step = state.step(&auth, handshake("PLAIN"), "peer");
        assert_eq!(code(&step), ErrorCode::UnsupportedSaslMechanism);
        assert!(!step.close);
        let step = state.step(&auth, authenticate(b"n,,n=broker-2,r=abc".to_vec()), "peer");
        assert_eq!(code(&step), ErrorCode::IllegalSaslState);
        assert!(step.close);
        // Garbage in place of client-first.
        let mut state = SaslState::default();
        let _ = state.step(&auth, handshake("SCRAM-SHA-256"), "peer");
        let step = state.step(&auth, authenticate(vec![0xff, 0, 1]), "peer");
        assert_eq!(code(&step), ErrorCode::SaslAuthenticationFailed);
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
