//! SASL authentication of a fresh stream, before it carries any other request:
//! SaslHandshake naming the mechanism, then SaslAuthenticate with the SCRAM
//! client-first and client-final messages (Kafka's exchange). Brokers use it on
//! every connection to each other; the stream is then handed to
//! [`Connection::from_stream`](crate::Connection::from_stream).

use std::sync::Arc;

use bytes::Bytes;
use futures::StreamExt;
use syncline_auth::{ClientCredential, Mechanism, ScramClient};
use syncline_proto::{frame, pb, ErrorCode, API_VERSION};
use tokio::io::{AsyncRead, AsyncWrite, AsyncWriteExt};
use tokio_util::codec::FramedRead;

use crate::ClientError;

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
    // Responses to the exchange are small; a peer sending more is not a broker.
    let mut exchange = Exchange {
        stream,
        client_id,
        correlation_id: 0,
    };
    match exchange
        .call(pb::request::Body::SaslHandshake(pb::SaslHandshakeRequest {
            mechanism: mechanism.name().to_string(),
        }))
        .await?
    {
        pb::response::Body::SaslHandshake(r) => match ErrorCode::from_wire(r.error_code) {
            ErrorCode::None => {}
            ErrorCode::UnsupportedSaslMechanism => {
                return Err(AuthError::Mechanism {
                    mechanism: mechanism.name(),
                    offered: r.mechanisms.join(", "),
                })
            }
            code => return Err(protocol(code, String::new())),
        },
        other => return Err(unexpected(other)),
    }
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

struct Exchange<'a, S> {
    stream: &'a mut S,
    client_id: &'a str,
    correlation_id: i32,
}

/// The largest response the exchange accepts.
const MAX_EXCHANGE_FRAME: usize = 64 * 1024;

impl<S: AsyncRead + AsyncWrite + Unpin> Exchange<'_, S> {
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
