//! SASL authentication of a fresh stream, before it carries any other request:
//! SaslHandshake naming the mechanism, then SaslAuthenticate with the SCRAM
//! client-first and client-final messages, or with the one PLAIN message
//! (Kafka's exchange). Brokers use [`authenticate`] on every connection to
//! each other, clients [`authenticate_user`] with their [`UserCredential`];
//! the stream is then handed to
//! [`Connection::from_stream`](crate::Connection::from_stream).

use std::sync::Arc;

use bytes::Bytes;
use futures::StreamExt;
use syncline_auth::{ClientCredential, Mechanism, ScramClient};
use syncline_proto::{frame, pb, ErrorCode, API_VERSION};
use tokio::io::{AsyncRead, AsyncWrite, AsyncWriteExt};
use tokio_util::codec::FramedRead;

use crate::config::SaslMechanism;
use crate::ClientError;

/// Who a client authenticates as. Made once per client and shared by its
/// connections (a SCRAM credential caches its salted password, so
/// reconnecting does not pay PBKDF2 again). Its `Debug` shows no password.
#[derive(Clone)]
pub enum UserCredential {
    /// SCRAM-SHA-256 or SCRAM-SHA-512.
    Scram {
        /// Which hash.
        mechanism: Mechanism,
        /// The username and password.
        credential: Arc<ClientCredential>,
    },
    /// PLAIN: the password itself is sent.
    Plain {
        /// The username.
        username: String,
        /// The password.
        password: String,
    },
}

impl UserCredential {
    /// A credential for `mechanism`.
    pub fn new(mechanism: SaslMechanism, username: &str, password: &str) -> UserCredential {
        match mechanism.scram() {
            Some(mechanism) => UserCredential::Scram {
                mechanism,
                credential: Arc::new(ClientCredential::new(username, password)),
            },
            None => UserCredential::Plain {
                username: username.to_string(),
                password: password.to_string(),
            },
        }
    }

    /// The username.
    pub fn username(&self) -> &str {
        match self {
            UserCredential::Scram { credential, .. } => credential.username(),
            UserCredential::Plain { username, .. } => username,
        }
    }

    /// The mechanism's name.
    pub fn mechanism_name(&self) -> &'static str {
        match self {
            UserCredential::Scram { mechanism, .. } => mechanism.name(),
            UserCredential::Plain { .. } => syncline_auth::plain::MECHANISM_NAME,
        }
    }
}

impl std::fmt::Debug for UserCredential {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("UserCredential")
            .field("mechanism", &self.mechanism_name())
            .field("username", &self.username())
            .finish_non_exhaustive()
    }
}

/// Why an authentication failed.
#[derive(Debug, thiserror::Error)]
pub enum AuthError {
    /// The broker does not offer the mechanism.
    #[error("the broker does not accept {mechanism} (it offers: {offered})")]
    Mechanism {
        /// What was asked.
        mechanism: &'static str,
        /// What the broker offers, comma-separated.
        offered: String,
    },
    /// The broker refused the credential (its message says why).
    #[error("the broker refused the credential of {username}: {message}")]
    Refused {
        /// Who we claimed to be.
        username: String,
        /// The broker's reason.
        message: String,
    },
    /// The broker's own proof failed, or its messages do not parse: it does not
    /// hold our verifier (a stale or forged peer).
    #[error("the broker did not prove it knows the credential of {username}: {source}")]
    Server {
        /// Who we claimed to be.
        username: String,
        /// What went wrong.
        #[source]
        source: syncline_auth::ScramError,
    },
    /// The connection failed or answered out of protocol.
    #[error(transparent)]
    Client(#[from] ClientError),
}

impl AuthError {
    /// The client error for a failed exchange with the broker at `addr`, as
    /// `mechanism`.
    pub fn into_client_error(self, addr: &str, mechanism: &'static str) -> ClientError {
        match self {
            AuthError::Mechanism { mechanism, offered } => ClientError::SaslMechanism {
                addr: addr.to_string(),
                mechanism,
                offered,
            },
            AuthError::Refused { username, message } => ClientError::AuthenticationFailed {
                username,
                mechanism,
                message,
            },
            AuthError::Server { .. } => ClientError::Sasl {
                addr: addr.to_string(),
                reason: self.to_string(),
            },
            AuthError::Client(ClientError::Protocol {
                code: ErrorCode::IllegalSaslState,
                ..
            }) => ClientError::Sasl {
                addr: addr.to_string(),
                reason: "the listener takes no SASL (ILLEGAL_SASL_STATE): check security.protocol \
                         (PLAINTEXT or SSL for a listener without SASL)"
                    .into(),
            },
            // The broker's verdict on the TLS handshake (a client certificate
            // it requires) comes with the first answer; otherwise it hung up,
            // or answered with bytes that are no frame (a TLS alert, from a
            // TLS listener).
            AuthError::Client(ClientError::Io(e)) => {
                match syncline_tls::TlsError::from_client_io(&e) {
                    Some(source) => ClientError::Tls {
                        addr: addr.to_string(),
                        source,
                    },
                    None => ClientError::ClosedBeforeAnswer(addr.to_string()),
                }
            }
            AuthError::Client(ClientError::Disconnected(_) | ClientError::Frame(_)) => {
                ClientError::ClosedBeforeAnswer(addr.to_string())
            }
            AuthError::Client(e) => e,
        }
    }
}

/// Authenticates `stream` as `credential` with `mechanism`. On success the
/// stream is positioned after the exchange, ready for requests.
pub async fn authenticate<S>(
    stream: &mut S,
    mechanism: Mechanism,
    credential: Arc<ClientCredential>,
    client_id: &str,
) -> Result<(), AuthError>
where
    S: AsyncRead + AsyncWrite + Unpin,
{
    let username = credential.username().to_string();
    let mut exchange = Exchange {
        stream,
        client_id,
        correlation_id: 0,
    };
    exchange.handshake(mechanism.name()).await?;
    let (mut scram, first) = ScramClient::start(mechanism, credential);
    let server_first = exchange.authenticate(first, &username).await?;
    let last = scram
        .server_first(&server_first)
        .map_err(|source| AuthError::Server {
            username: username.clone(),
            source,
        })?;
    let server_final = exchange.authenticate(last, &username).await?;
    scram
        .server_final(&server_final)
        .map_err(|source| AuthError::Server { username, source })
}

/// Authenticates `stream` as the user `credential` names, with its mechanism.
/// On success the stream is positioned after the exchange, ready for requests.
pub async fn authenticate_user<S>(
    stream: &mut S,
    credential: &UserCredential,
    client_id: &str,
) -> Result<(), AuthError>
where
    S: AsyncRead + AsyncWrite + Unpin,
{
    match credential {
        UserCredential::Scram {
            mechanism,
            credential,
        } => authenticate(stream, *mechanism, credential.clone(), client_id).await,
        UserCredential::Plain { username, password } => {
            authenticate_plain(stream, username, password, client_id).await
        }
    }
}

/// Authenticates `stream` with PLAIN: one message with the username and the
/// password. Keep it to TLS streams: the password crosses the wire.
pub async fn authenticate_plain<S>(
    stream: &mut S,
    username: &str,
    password: &str,
    client_id: &str,
) -> Result<(), AuthError>
where
    S: AsyncRead + AsyncWrite + Unpin,
{
    let mut exchange = Exchange {
        stream,
        client_id,
        correlation_id: 0,
    };
    exchange
        .handshake(syncline_auth::plain::MECHANISM_NAME)
        .await?;
    exchange
        .authenticate(syncline_auth::plain::encode(username, password), username)
        .await
        .map(|_| ())
}

struct Exchange<'a, S> {
    stream: &'a mut S,
    client_id: &'a str,
    correlation_id: i32,
}

/// The largest response the exchange accepts.
const MAX_EXCHANGE_FRAME: usize = 64 * 1024;

impl<S: AsyncRead + AsyncWrite + Unpin> Exchange<'_, S> {
    /// SaslHandshake: the broker must offer `mechanism`.
    async fn handshake(&mut self, mechanism: &'static str) -> Result<(), AuthError> {
        match self
            .call(pb::request::Body::SaslHandshake(pb::SaslHandshakeRequest {
                mechanism: mechanism.to_string(),
            }))
            .await?
        {
            pb::response::Body::SaslHandshake(r) => match ErrorCode::from_wire(r.error_code) {
                ErrorCode::None => Ok(()),
                ErrorCode::UnsupportedSaslMechanism => Err(AuthError::Mechanism {
                    mechanism,
                    offered: r.mechanisms.join(", "),
                }),
                code => Err(protocol(code, String::new())),
            },
            other => Err(unexpected(other)),
        }
    }

    async fn call(&mut self, body: pb::request::Body) -> Result<pb::response::Body, ClientError> {
        self.correlation_id += 1;
        let request = pb::Request {
            correlation_id: self.correlation_id,
            api_version: API_VERSION,
            client_id: self.client_id.to_string(),
            body: Some(body),
        };
        frame::write_frames(&mut *self.stream, &[frame::encode(&request)]).await?;
        self.stream.flush().await?;
        // The broker sends nothing unasked during the exchange, so this reader
        // cannot have read ahead of the response when it is dropped.
        let mut frames = FramedRead::new(&mut *self.stream, frame::codec(MAX_EXCHANGE_FRAME));
        let bytes = match frames.next().await {
            Some(Ok(b)) => b.freeze(),
            Some(Err(e)) => return Err(ClientError::Io(e)),
            None => return Err(ClientError::Disconnected("the authenticating peer".into())),
        };
        let response = frame::decode_response(bytes)?;
        if response.correlation_id != self.correlation_id {
            return Err(ClientError::UnexpectedResponse("SaslAuthenticate"));
        }
        match response.body {
            Some(pb::response::Body::Error(e)) => Err(ClientError::Protocol {
                code: ErrorCode::from_wire(e.error_code),
                message: e.error_message,
            }),
            Some(body) => Ok(body),
            None => Err(ClientError::UnexpectedResponse("SaslAuthenticate")),
        }
    }

    async fn authenticate(&mut self, message: Vec<u8>, username: &str) -> Result<Bytes, AuthError> {
        match self
            .call(pb::request::Body::SaslAuthenticate(
                pb::SaslAuthenticateRequest {
                    auth_bytes: Bytes::from(message),
                },
            ))
            .await?
        {
            pb::response::Body::SaslAuthenticate(r) => match ErrorCode::from_wire(r.error_code) {
                ErrorCode::None => Ok(r.auth_bytes),
                ErrorCode::SaslAuthenticationFailed => Err(AuthError::Refused {
                    username: username.to_string(),
                    message: r.error_message,
                }),
                code => Err(protocol(code, r.error_message)),
            },
            other => Err(unexpected(other)),
        }
    }
}

fn protocol(code: ErrorCode, message: String) -> AuthError {
    AuthError::Client(ClientError::Protocol { code, message })
}

fn unexpected(_: pb::response::Body) -> AuthError {
    AuthError::Client(ClientError::UnexpectedResponse("SaslHandshake"))
}
