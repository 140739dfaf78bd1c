//! What both listeners' connections share: the accepted stream (TLS set up),
//! reading frames, and the SASL exchange run inline.

use std::sync::Arc;

use bytes::Bytes;
use futures::StreamExt;
use syncline_proto::pb;
use tokio_util::codec::FramedRead;

use super::dispatch::Dispatch;
use crate::auth::{Principal, SaslContext, SaslState};
use crate::config::SecurityProtocol;
use crate::net::BoxStream;
use crate::responder::ConnectionState;

/// An accepted connection, TLS already set up on a TLS listener.
pub(crate) struct Accepted {
    pub stream: BoxStream,
    pub peer: String,
    pub listener: Arc<str>,
    pub protocol: SecurityProtocol,
    /// The subject of the client's TLS certificate (`CN=...`), if it gave one.
    pub certificate: Option<Arc<str>>,
}

/// The stream of an accepted connection: TLS on an SSL or SASL_SSL listener
/// (`None` if the handshake fails: logged, counted, the connection dropped),
/// with the subject of the client's certificate when it presented one.
pub(crate) async fn secure(
    stream: BoxStream,
    peer: &str,
    listener: &str,
    protocol: SecurityProtocol,
    broker: &dyn Dispatch,
) -> Option<(BoxStream, Option<Arc<str>>)> {
    if !protocol.is_tls() {
        return Some((stream, None));
    }
    let internal = *listener == *broker.config().inter_broker_listener_name;
    let tls = broker.auth().tls_server(internal)?;
    match syncline_tls::accept(tls, stream).await {
        Ok(tls) => {
            let subject = syncline_tls::peer_subject(&tls).map(Arc::from);
            Some((Box::new(tls) as BoxStream, subject))
        }
        Err(e) => {
            broker.metrics().authentication_failures.inc();
            tracing::info!(%peer, %listener, error = %e, "TLS handshake failed");
            None
        }
    }
}

/// How long a user's authentication waits for a broker that just started to
/// hear of its users from the controller (less than clients' request timeout).
pub(crate) const USERS_WAIT: std::time::Duration = std::time::Duration::from_secs(10);

/// Why an unauthenticated connection's request on a SASL listener is refused.
pub(crate) const SASL_REQUIRED: &str = "this listener requires SASL authentication first: set security.protocol (SASL_SSL or SASL_PLAINTEXT), sasl.mechanism, sasl.username and sasl.password";

/// Records who authenticated on `conn` (once), and registers a user's
/// connection so that deleting the user closes it.
pub(crate) fn authenticated(conn: &ConnectionState, broker: &dyn Dispatch, principal: Principal) {
    if let Principal::User(name) = &principal {
        broker.user_connections().register(name, &conn.close);
    }
    tracing::debug!(peer = %conn.peer, %principal, "authenticated");
    conn.set_principal(principal);
}

/// Runs one SaslHandshake or SaslAuthenticate of the connection, inline
/// so that its next request already sees the principal: waits for the
/// users when a user logs in to a broker that has not heard of them yet,
/// counts a failure, records who authenticated. The step itself (a PLAIN
/// login stretches the password it is given) is heavy work, off the I/O
/// runtime.
pub(crate) async fn sasl_step(
    conn: &ConnectionState,
    broker: &Arc<dyn Dispatch>,
    sasl: &mut SaslState,
    body: pb::request::Body,
) -> crate::auth::SaslStep {
    if sasl.needs_users(&body) && !broker.metadata().wait_security_known(USERS_WAIT).await {
        tracing::warn!(peer = %conn.peer, "no users announced yet: is the controller quorum reachable?");
    }
    let mut state = std::mem::take(sasl);
    let (serving, peer, tls) = (broker.clone(), conn.peer.clone(), conn.protocol.is_tls());
    let (state, step) = broker
        .heavy_work()
        .run(move || {
            let step = state.step(&sasl_context(tls, &*serving), body, &peer);
            (state, step)
        })
        .await;
    *sasl = state;
    if step.close {
        broker.metrics().authentication_failures.inc();
    }
    if let Some(principal) = step.authenticated.clone() {
        authenticated(conn, &**broker, principal);
    }
    step
}

/// What a connection's SASL exchange checks against (`tls`: whether the
/// connection is encrypted).
pub(crate) fn sasl_context(tls: bool, broker: &dyn Dispatch) -> SaslContext<'_> {
    SaslContext {
        auth: broker.auth(),
        users: broker.metadata(),
        enabled: &broker.config().sasl_enabled_mechanisms,
        tls,
    }
}

/// How a connection reads its next request (see [`next_frame`]).
pub(crate) struct Reading {
    /// Frames larger than this are refused (`socket_request_max_bytes`).
    max_frame: usize,
    bounds: crate::config::ConnectionBounds,
    /// When a SASL listener's connection must have authenticated by.
    authenticate_by: tokio::time::Instant,
}

impl Reading {
    pub(crate) fn new(config: &crate::config::BrokerConfig) -> Reading {
        let bounds = config.connection_bounds.clone();
        Reading {
            max_frame: config.socket_request_max_bytes,
            authenticate_by: tokio::time::Instant::now() + bounds.sasl_authentication_timeout,
            bounds,
        }
    }
}

/// The next frame of a connection; `None` once it closed, the broker shuts
/// down, or the connection must close: it sent a frame the codec refuses (too
/// large), it was idle for `connections_max_idle_ms` (no frame read, no
/// answer written), or on a SASL listener it did not authenticate within
/// `sasl_authentication_timeout_ms` (logged, counted). Nothing is read while
/// the connection's unwritten answers are over their cap, and until it
/// authenticates a SASL listener's connection's frames are held to
/// `sasl_server_max_receive_size`.
pub(crate) async fn next_frame<R: tokio::io::AsyncRead + Unpin>(
    frames: &mut FramedRead<R, tokio_util::codec::LengthDelimitedCodec>,
    conn: &ConnectionState,
    reading: &Reading,
    broker: &dyn Dispatch,
) -> Option<Bytes> {
    let authenticating = !conn.admits_unauthenticated(None);
    frames
        .decoder_mut()
        .set_max_frame_length(if authenticating {
            reading.bounds.sasl_max_receive_bytes
        } else {
            reading.max_frame
        });
    let metrics = broker.metrics();
    loop {
        let idle_by = conn.backlog.last_progress() + reading.bounds.max_idle;
        let deadline = if authenticating {
            idle_by.min(reading.authenticate_by)
        } else {
            idle_by
        };
        if let Some(until) = conn.throttled_until(tokio::time::Instant::now()) {
            // Throttled: its client went over its byte-rate quota (KIP-219).
            tokio::select! {
                _ = conn.close.cancelled() => return None,
                _ = tokio::time::sleep_until(until) => {}
            }
            // The throttle is no idleness of the client's.
            conn.backlog.progressed();
            continue;
        }
        let read = if conn.backlog.has_room() {
            tokio::select! {
                _ = conn.close.cancelled() => return None,
                next = frames.next() => Some(next),
                _ = tokio::time::sleep_until(deadline) => None,
            }
        } else {
            // Muted: the client does not read its answers.
            let _muted = super::limits::GaugeGuard::inc(&metrics.connections_muted);
            tokio::select! {
                _ = conn.close.cancelled() => return None,
                _ = conn.backlog.room() => continue,
                _ = tokio::time::sleep_until(deadline) => None,
            }
        };
        let Some(next) = read else {
            let now = tokio::time::Instant::now();
            let why = if authenticating && now >= reading.authenticate_by {
                metrics.authentication_failures.inc();
                "did not authenticate within sasl_authentication_timeout_ms"
            } else if now >= conn.backlog.last_progress() + reading.bounds.max_idle {
                "idle for connections_max_idle_ms"
            } else {
                // An answer left meanwhile: the idle time starts again.
                continue;
            };
            metrics.connections_expired.inc();
            tracing::info!(peer = %conn.peer, why, "closing connection");
            return None;
        };
        conn.backlog.progressed();
        return match next? {
            Ok(b) => Some(b.freeze()),
            // A TLS client that hung up without close_notify (most do): a close.
            Err(e) if e.kind() == std::io::ErrorKind::UnexpectedEof => {
                tracing::debug!(peer = %conn.peer, error = %e, "connection closed");
                None
            }
            Err(e) => {
                tracing::warn!(peer = %conn.peer, error = %e, "closing connection: bad frame");
                None
            }
        };
    }
}
