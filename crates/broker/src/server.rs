//! The client-facing server: accepts connections and reads request frames.
//!
//! Each connection has a reader (this task) and a writer task. The reader decodes a
//! request and dispatches it *inline*: appends happen in the order requests arrive
//! on the connection, and nothing waits in the reader. A request that must wait
//! (long-polling fetch, acks=all produce) goes to the purgatory with its
//! [`Responder`]; whoever completes it sends the response through the writer, so
//! responses may leave in any order (clients match them by correlation id). The
//! number of requests in flight per connection is bounded (`queued_max_requests`).
//!
//! So are the bytes of its fetch responses: before a Fetch is read on, the
//! connection reserves what its response may hold (its `max_bytes`, capped by
//! `fetch_max_bytes`, plus one batch) from a budget of `fetch_max_bytes +
//! message_max_bytes`, and the reservation is released only once the response
//! has been written to the socket. A client that stops reading therefore stops
//! being read (TCP pushes back on it) instead of growing the broker's memory.

use std::sync::{Arc, OnceLock};

use bytes::Bytes;
use futures::StreamExt;
use parking_lot::Mutex;
use syncline_proto::{frame, pb};
use tokio::sync::{mpsc, OwnedSemaphorePermit, Semaphore};
use tokio::time::Instant;
use tokio_util::codec::FramedRead;
use tokio_util::sync::CancellationToken;

use crate::auth::{Principal, SaslContext, SaslState};
use crate::broker::Broker;
use crate::config::SecurityProtocol;
use crate::delayed::FetchRegions;
use crate::delayed::PendingOp;
use crate::metrics::ApiMetrics;
use crate::net::{BoxStream, Listener};
use crate::send::{Outgoing, Sink, WriteError};

/// Per-connection state shared with the responders of its requests.
#[derive(Debug)]
pub(crate) struct ConnectionState {
    /// The name of the listener it arrived on (answers carry that listener's
    /// endpoints).
    pub listener: Arc<str>,
    /// The writer of a syncline connection; None on a Kafka listener, whose
    /// responders carry their own slot in the response order.
    tx: Option<mpsc::UnboundedSender<(Outgoing, Option<OwnedSemaphorePermit>)>>,
    /// Operations waiting in a purgatory on behalf of this connection: cancelled
    /// when it closes.
    pending: Mutex<Vec<PendingOp>>,
    /// Who authenticated on it (set once, by the SASL exchange).
    principal: OnceLock<Principal>,
    /// The subject of the client's TLS certificate: the principal
    /// (`User:CN=...`, as Kafka names it) of a connection that does not
    /// authenticate with SASL.
    certificate: Option<Arc<str>>,
    /// The client's address.
    pub peer: Arc<str>,
    /// The broker's own requests (the group coordinators' appends): the only
    /// ones that may write to internal topics.
    pub internal: bool,
    /// Its listener's security protocol.
    pub protocol: SecurityProtocol,
    /// Cancelled to close the connection from elsewhere (its user was deleted).
    pub close: CancellationToken,
}

impl ConnectionState {
    /// The state of a Kafka listener's connection (responses go through each
    /// request's own slot).
    pub(crate) fn kafka(
        listener: Arc<str>,
        peer: &str,
        protocol: SecurityProtocol,
        certificate: Option<Arc<str>>,
        close: CancellationToken,
    ) -> Arc<ConnectionState> {
        Arc::new(ConnectionState {
            listener,
            peer: peer.into(),
            tx: None,
            pending: Mutex::new(Vec::new()),
            principal: OnceLock::new(),
            certificate,
            internal: false,
            protocol,
            close,
        })
    }

    /// Records who authenticated on the connection (once), and registers a
    /// user's connection so that deleting the user closes it.
    pub(crate) fn authenticated(&self, broker: &Broker, principal: Principal) {
        if let Principal::User(name) = &principal {
            broker.user_connections().register(name, &self.close);
        }
        tracing::debug!(peer = %self.peer, %principal, "authenticated");
        let _ = self.principal.set(principal);
    }

    /// Whether the request `body` may be read before the connection
    /// authenticated: on a SASL listener, only the exchange itself.
    pub(crate) fn admits_unauthenticated(&self, body: Option<&pb::request::Body>) -> bool {
        !self.protocol.is_sasl()
            || self.principal.get().is_some()
            || matches!(
                body,
                Some(pb::request::Body::SaslHandshake(_) | pb::request::Body::SaslAuthenticate(_))
            )
    }

    /// Runs one SaslHandshake or SaslAuthenticate of the connection, inline
    /// so that its next request already sees the principal: waits for the
    /// users when a user logs in to a broker that has not heard of them yet,
    /// counts a failure, records who authenticated.
    pub(crate) async fn sasl_step(
        &self,
        broker: &Broker,
        sasl: &mut SaslState,
        body: pb::request::Body,
    ) -> crate::auth::SaslStep {
        if sasl.needs_users(&body) && !broker.metadata().wait_security_known(USERS_WAIT).await {
            tracing::warn!(peer = %self.peer, "no users announced yet: is the controller quorum reachable?");
        }
        let step = sasl.step(&self.sasl_context(broker), body, &self.peer);
        if step.close {
            broker.metrics().authentication_failures.inc();
        }
        if let Some(principal) = step.authenticated.clone() {
            self.authenticated(broker, principal);
        }
        step
    }

    /// What a connection's SASL exchange checks against.
    pub(crate) fn sasl_context<'a>(&self, broker: &'a Broker) -> SaslContext<'a> {
        SaslContext {
            auth: broker.auth(),
            users: broker.metadata(),
            enabled: &broker.config().sasl_enabled_mechanisms,
            tls: self.protocol.is_tls(),
        }
    }

    /// Cancels what waits on behalf of the connection (it closed).
    pub(crate) fn cancel_pending(&self, broker: &Broker) {
        let pending = std::mem::take(&mut *self.pending.lock());
        for op in pending {
            broker.replica_manager().cancel(op);
        }
    }

    /// Who the connection authenticated as.
    pub(crate) fn principal(&self) -> Principal {
        match (self.principal.get(), &self.certificate) {
            (Some(p), _) => p.clone(),
            (None, Some(subject)) => Principal::User(subject.clone()),
            (None, None) => Principal::Anonymous,
        }
    }

    /// Remembers a waiting operation so that closing the connection cancels it.
    pub(crate) fn track(&self, op: PendingOp) {
        let mut pending = self.pending.lock();
        // Drop completed ones now and then so the list stays as long as what waits.
        if pending.len() >= 64 && pending.len().is_power_of_two() {
            pending.retain(|p| !p.is_completed());
        }
        pending.push(op);
    }
}

/// Sends the response of one request. Dropping it without sending (acks=0) frees
/// the in-flight slot all the same.
#[derive(Debug)]
pub(crate) struct Responder {
    conn: Arc<ConnectionState>,
    correlation_id: i32,
    api: Option<Arc<ApiMetrics>>,
    started: Instant,
    /// Its place among the connection's requests in flight (none for the
    /// broker's own requests).
    _permit: Option<OwnedSemaphorePermit>,
    /// The response bytes reserved for it (fetches): released once written.
    reserved: Option<OwnedSemaphorePermit>,
    /// Where the response goes when the request came on a Kafka listener.
    kafka: Option<KafkaReply>,
    /// Where the response goes when the broker asked itself.
    internal: Option<tokio::sync::oneshot::Sender<pb::response::Body>>,
    /// Adds the parts of the request the authorizer refused.
    patch: Option<PatchSlot>,
}

/// A response's patch (see [`Responder::set_patch`]).
struct PatchSlot(crate::authorizer::Patch);

impl std::fmt::Debug for PatchSlot {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("Patch")
    }
}

/// A Kafka listener's request: how its syncline response becomes the Kafka
/// response (the API and version it was asked in), and the slot the
/// connection's writer waits on, in request order.
pub(crate) struct KafkaReply {
    pub(crate) translate: Box<dyn FnOnce(pb::response::Body) -> Bytes + Send>,
    pub(crate) slot: tokio::sync::oneshot::Sender<(Bytes, Option<OwnedSemaphorePermit>)>,
}

impl std::fmt::Debug for KafkaReply {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("KafkaReply")
    }
}

impl Responder {
    /// The connection the request came on.
    pub(crate) fn connection(&self) -> &Arc<ConnectionState> {
        &self.conn
    }

    /// A responder for a request of a Kafka listener's connection.
    pub(crate) fn for_kafka(
        conn: Arc<ConnectionState>,
        api: Option<Arc<ApiMetrics>>,
        permit: OwnedSemaphorePermit,
        reserved: Option<OwnedSemaphorePermit>,
        reply: KafkaReply,
    ) -> Responder {
        Responder {
            conn,
            correlation_id: 0,
            api,
            started: Instant::now(),
            _permit: Some(permit),
            reserved,
            kafka: Some(reply),
            internal: None,
            patch: None,
        }
    }

    /// A responder for a request the broker makes of itself: the answer comes
    /// back on the receiver. Its connection is `internal`.
    pub(crate) fn internal(
        listener: Arc<str>,
    ) -> (
        Responder,
        tokio::sync::oneshot::Receiver<pb::response::Body>,
    ) {
        let (tx, rx) = tokio::sync::oneshot::channel();
        let conn = Arc::new(ConnectionState {
            listener,
            peer: "this broker".into(),
            tx: None,
            pending: Mutex::new(Vec::new()),
            principal: OnceLock::new(),
            certificate: None,
            internal: true,
            protocol: SecurityProtocol::Plaintext,
            close: CancellationToken::new(),
        });
        let responder = Responder {
            conn,
            correlation_id: 0,
            api: None,
            started: Instant::now(),
            _permit: None,
            reserved: None,
            kafka: None,
            internal: Some(tx),
            patch: None,
        };
        (responder, rx)
    }

    /// Has `patch` applied to the response before it is sent.
    pub(crate) fn set_patch(&mut self, patch: crate::authorizer::Patch) {
        self.patch = Some(PatchSlot(patch));
    }

    /// Sends the response.
    pub(crate) fn send(mut self, mut body: pb::response::Body) {
        if let Some(PatchSlot(patch)) = self.patch.take() {
            patch(&mut body);
        }
        if let Some(tx) = self.internal.take() {
            let _ = tx.send(body);
            return;
        }
        if let Some(reply) = self.kafka.take() {
            let bytes = (reply.translate)(body);
            if let Some(api) = &self.api {
                api.observe(self.started.elapsed(), bytes.len());
            }
            let _ = reply.slot.send((bytes, self.reserved.take()));
            return;
        }
        let response = pb::Response {
            correlation_id: self.correlation_id,
            body: Some(body),
        };
        self.queue(Outgoing::Frame(frame::encode(&response)));
    }

    /// Whether a fetch response may leave its records in the segment files
    /// ([`Responder::send_fetch`]): only on a syncline connection, whose writer
    /// sends them itself (the Kafka listener's responses and the broker's own
    /// requests need them in memory).
    pub(crate) fn zero_copy(&self) -> bool {
        self.conn.tx.is_some() && self.kafka.is_none() && self.internal.is_none()
    }

    /// Sends a fetch response whose records are `response`'s and, for the
    /// partitions in `regions`, those regions of the segment files: written
    /// around the envelope without being copied here ([`crate::send`]).
    pub(crate) fn send_fetch(mut self, response: pb::FetchResponse, mut regions: FetchRegions) {
        if regions.is_empty() {
            self.send(pb::response::Body::Fetch(response));
            return;
        }
        let mut body = pb::response::Body::Fetch(response);
        if let Some(PatchSlot(patch)) = self.patch.take() {
            patch(&mut body);
        }
        let pb::response::Body::Fetch(response) = body else {
            unreachable!("a fetch response's patch keeps it a fetch response")
        };
        if !self.zero_copy() {
            // Not read for zero-copy: nothing here reads regions, but should
            // one come, its records are read into the message.
            let mut response = response;
            for t in &mut response.responses {
                for p in &mut t.partitions {
                    let taken = regions.take(&t.topic, p.partition);
                    if taken.is_empty() {
                        continue;
                    }
                    match syncline_log::Records::Regions(taken).read() {
                        Ok(bytes) => p.records = bytes,
                        Err(e) => {
                            tracing::warn!(peer = %self.conn.peer, error = %e, "closing connection: fetch records changed under the response");
                            self.conn.close.cancel();
                            return;
                        }
                    }
                }
            }
            self.send(pb::response::Body::Fetch(response));
            return;
        }
        let chunks = frame::encode_fetch_response_chunks(self.correlation_id, response, |t, p| {
            regions.take(t, p)
        });
        self.queue(Outgoing::Chunks(chunks));
    }

    /// Queues a syncline response frame for the connection's writer.
    fn queue(&mut self, out: Outgoing) {
        if let Some(api) = &self.api {
            api.observe(self.started.elapsed(), out.len() as usize);
        }
        // The connection may have closed meanwhile: then nobody wants the answer.
        if let Some(tx) = &self.conn.tx {
            let _ = tx.send((out, self.reserved.take()));
        }
    }

    /// Sends an error for a request that could not be served at all.
    pub(crate) fn send_error(self, code: syncline_proto::ErrorCode, message: impl Into<String>) {
        self.send(pb::response::Body::Error(pb::ErrorResponse {
            error_code: code as i32,
            error_message: message.into(),
            controller_hint: None,
        }));
    }

    /// Completes a request that gets no response (acks=0).
    pub(crate) fn no_response(self) {
        if let Some(api) = &self.api {
            api.observe(self.started.elapsed(), 0);
        }
    }
}

/// Accepts connections until `shutdown` fires.
/// `kafka`: the listener speaks Kafka's protocol (`kafka_listeners`).
pub(crate) async fn serve(
    mut listener: Box<dyn Listener>,
    name: Arc<str>,
    kafka: bool,
    protocol: SecurityProtocol,
    broker: Arc<Broker>,
    shutdown: CancellationToken,
) {
    let config = broker.config();
    // Kafka's rule: with a listener of its own, inter-broker connections are
    // not held to the broker-wide limit (clients cannot crowd the brokers out).
    let exempt = config.listeners.len() > 1 && *name == *config.inter_broker_listener_name;
    loop {
        tokio::select! {
            _ = shutdown.cancelled() => break,
            accepted = listener.accept() => match accepted {
                Ok((stream, peer)) => {
                    let slot = match broker.connections().admit(&peer, exempt) {
                        Ok(slot) => slot,
                        Err(why) => {
                            broker.metrics().connections_refused.inc();
                            tracing::debug!(%peer, why, "connection refused");
                            drop(stream);
                            continue;
                        }
                    };
                    let broker = broker.clone();
                    let shutdown = shutdown.clone();
                    let name = name.clone();
                    tokio::spawn(async move {
                        let Some((stream, certificate)) =
                            secure(stream, &peer, &name, protocol, &broker).await
                        else {
                            return;
                        };
                        let accepted = Accepted { stream, peer, listener: name, protocol, certificate };
                        if kafka {
                            crate::kafka::connection(accepted, broker, shutdown).await;
                        } else {
                            connection(accepted, broker, shutdown).await;
                        }
                        drop(slot);
                    });
                }
                Err(e) => {
                    // E.g. out of file descriptors: back off instead of spinning.
                    tracing::warn!(error = %e, "accept failed");
                    tokio::time::sleep(std::time::Duration::from_millis(50)).await;
                }
            },
        }
    }
}

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
async fn secure(
    stream: BoxStream,
    peer: &str,
    listener: &str,
    protocol: SecurityProtocol,
    broker: &Broker,
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

async fn connection(accepted: Accepted, broker: Arc<Broker>, shutdown: CancellationToken) {
    let Accepted {
        stream,
        peer,
        listener,
        protocol,
        certificate,
    } = accepted;
    let max_frame = broker.config().socket_request_max_bytes;
    let (read_half, sink) = split(stream);
    let (tx, mut rx) = mpsc::unbounded_channel::<(Outgoing, Option<OwnedSemaphorePermit>)>();
    let close = shutdown.child_token();
    let conn = Arc::new(ConnectionState {
        listener,
        peer: peer.as_str().into(),
        tx: Some(tx),
        pending: Mutex::new(Vec::new()),
        principal: OnceLock::new(),
        certificate,
        internal: false,
        protocol,
        close: close.clone(),
    });
    let writer_close = close.clone();
    let writer_peer = peer.clone();
    let metrics = broker.shared_metrics();
    let writer = tokio::spawn(async move {
        let mut sink = sink;
        let mut batch = Vec::with_capacity(frame::MAX_FRAMES_PER_WRITE);
        let mut written = Vec::with_capacity(frame::MAX_FRAMES_PER_WRITE);
        while let Some((first, reserved)) = rx.recv().await {
            written.push(reserved);
            batch.push(first);
            // Everything already queued goes out together.
            while batch.len() < frame::MAX_FRAMES_PER_WRITE {
                match rx.try_recv() {
                    Ok((out, reserved)) => {
                        written.push(reserved);
                        batch.push(out);
                    }
                    Err(_) => break,
                }
            }
            match sink.write(&mut batch).await {
                Ok(file_bytes) => metrics.fetch_file_bytes(sink.sends_files(), file_bytes),
                Err(WriteError::Io(_)) => break,
                Err(e @ WriteError::Region(_)) => {
                    // Better no answer than a wrong one: the client retries.
                    tracing::info!(peer = %writer_peer, error = %e, "closing connection");
                    writer_close.cancel();
                    break;
                }
            }
            // Their bytes left this process: the reader may take more fetches.
            written.clear();
        }
    });

    let limits = RequestLimits::new(broker.config());
    let mut sasl = SaslState::default();
    let mut frames = FramedRead::new(read_half, frame::codec(max_frame));
    loop {
        let Some(bytes) = next_frame(&mut frames, &close, &peer).await else {
            break;
        };
        let frame_len = bytes.len();
        let request = match frame::decode_request(bytes) {
            Ok(r) => r,
            Err(e) => {
                tracing::warn!(%peer, error = %e, "closing connection: request does not decode");
                break;
            }
        };
        let Some((permit, reserved)) = limits
            .admit(broker.config(), request.body.as_ref(), &shutdown)
            .await
        else {
            break;
        };
        let api = request
            .body
            .as_ref()
            .map(|b| broker.metrics().api(b, frame_len));
        let responder = Responder {
            conn: conn.clone(),
            correlation_id: request.correlation_id,
            api,
            started: Instant::now(),
            _permit: Some(permit),
            reserved,
            kafka: None,
            internal: None,
            patch: None,
        };
        if let Some(
            body @ (pb::request::Body::SaslHandshake(_) | pb::request::Body::SaslAuthenticate(_)),
        ) = request.body
        {
            // Inline, so that the next request on the connection already sees
            // the principal.
            let step = conn.sasl_step(&broker, &mut sasl, body).await;
            responder.send(step.response);
            if step.close {
                break;
            }
            continue;
        }
        if !conn.admits_unauthenticated(request.body.as_ref()) {
            broker.metrics().authentication_failures.inc();
            tracing::debug!(%peer, "closing an unauthenticated connection on a SASL listener");
            responder.send_error(
                syncline_proto::ErrorCode::SaslAuthenticationFailed,
                SASL_REQUIRED,
            );
            break;
        }
        broker.handle(request, responder);
    }
    conn.cancel_pending(&broker);
    drop(conn);
    // The writer ends by itself once the last responder is gone (it drains what
    // completed requests queued); on shutdown nobody waits for it.
    if shutdown.is_cancelled() {
        writer.abort();
    }
}

/// A connection's reading half and the sink its responses are written to: a
/// plain TCP socket's own halves (its fetch responses' records are sent with
/// `sendfile`), or any other stream's.
fn split(stream: BoxStream) -> (Box<dyn tokio::io::AsyncRead + Send + Unpin>, Sink) {
    match crate::net::into_tcp(stream) {
        Ok(tcp) => {
            let (r, w) = tcp.into_split();
            (Box::new(r), Sink::Tcp(w))
        }
        Err(stream) => {
            let (r, w) = tokio::io::split(stream);
            (Box::new(r), Sink::Copy(Box::new(w)))
        }
    }
}

/// The next frame of a connection; `None` once it closed, the broker shuts
/// down, or it sent a frame the codec refuses (too large: logged).
pub(crate) async fn next_frame<R: tokio::io::AsyncRead + Unpin>(
    frames: &mut FramedRead<R, tokio_util::codec::LengthDelimitedCodec>,
    shutdown: &CancellationToken,
    peer: &str,
) -> Option<Bytes> {
    let next = tokio::select! {
        _ = shutdown.cancelled() => return None,
        next = frames.next() => next,
    };
    match next? {
        Ok(b) => Some(b.freeze()),
        // A TLS client that hung up without close_notify (most do): a close.
        Err(e) if e.kind() == std::io::ErrorKind::UnexpectedEof => {
            tracing::debug!(%peer, error = %e, "connection closed");
            None
        }
        Err(e) => {
            tracing::warn!(%peer, error = %e, "closing connection: bad frame");
            None
        }
    }
}

/// One connection's bounds, whatever its protocol: requests in flight
/// (`queued_max_requests`) and the bytes its fetch responses may hold.
pub(crate) struct RequestLimits {
    in_flight: Arc<Semaphore>,
    response_bytes: Arc<Semaphore>,
    budget: u32,
}

impl RequestLimits {
    pub(crate) fn new(config: &crate::config::BrokerConfig) -> RequestLimits {
        let budget = response_budget(config);
        RequestLimits {
            in_flight: Arc::new(Semaphore::new(config.queued_max_requests)),
            response_bytes: Arc::new(Semaphore::new(budget as usize)),
            budget,
        }
    }

    /// Waits for room for the request `body` (and, for a fetch, for the bytes
    /// its response may hold); `None` if the broker shuts down meanwhile.
    pub(crate) async fn admit(
        &self,
        config: &crate::config::BrokerConfig,
        body: Option<&pb::request::Body>,
        shutdown: &CancellationToken,
    ) -> Option<(OwnedSemaphorePermit, Option<OwnedSemaphorePermit>)> {
        let permit = tokio::select! {
            _ = shutdown.cancelled() => return None,
            p = self.in_flight.clone().acquire_owned() => p.expect("semaphore is never closed"),
        };
        let reserved = match body {
            Some(pb::request::Body::Fetch(f)) => {
                let want = fetch_reservation(config, f.max_bytes).min(self.budget);
                tokio::select! {
                    _ = shutdown.cancelled() => return None,
                    p = self.response_bytes.clone().acquire_many_owned(want) => {
                        Some(p.expect("semaphore is never closed"))
                    }
                }
            }
            _ => None,
        };
        Some((permit, reserved))
    }
}

/// The bytes of fetch responses one connection may have reserved or queued.
fn response_budget(config: &crate::config::BrokerConfig) -> u32 {
    (config.fetch_max_bytes + config.message_max_bytes).min(u32::MAX as usize) as u32
}

/// What a fetch asking for `max_bytes` may put in its response: the capped
/// request plus one batch past it.
fn fetch_reservation(config: &crate::config::BrokerConfig, max_bytes: i32) -> u32 {
    (config.fetch_bytes_cap(max_bytes) + config.message_max_bytes).min(u32::MAX as usize) as u32
}

/// Open connections, broker-wide and per client address, against
/// `max_connections` and `max_connections_per_ip`.
#[derive(Debug)]
pub(crate) struct ConnectionLimits {
    max: usize,
    max_per_ip: usize,
    open: Mutex<(usize, std::collections::HashMap<String, usize>)>,
    /// `syncline_connections`, kept equal to the count.
    gauge: prometheus_client::metrics::gauge::Gauge,
}

/// One admitted connection: gives its place back when dropped.
#[derive(Debug)]
pub(crate) struct ConnectionSlot {
    limits: Arc<ConnectionLimits>,
    ip: String,
}

impl ConnectionLimits {
    pub(crate) fn new(
        max: usize,
        max_per_ip: usize,
        gauge: prometheus_client::metrics::gauge::Gauge,
    ) -> Arc<ConnectionLimits> {
        Arc::new(ConnectionLimits {
            max,
            max_per_ip,
            open: Mutex::new((0, std::collections::HashMap::new())),
            gauge,
        })
    }

    /// Admits a connection from `peer` ("ip:port"), unless a limit is reached
    /// (`exempt`: only the per-address one applies).
    pub(crate) fn admit(
        self: &Arc<Self>,
        peer: &str,
        exempt: bool,
    ) -> Result<ConnectionSlot, &'static str> {
        let ip = match peer.parse::<std::net::SocketAddr>() {
            Ok(a) => a.ip().to_string(),
            Err(_) => peer.to_string(),
        };
        let mut open = self.open.lock();
        if !exempt && open.0 >= self.max {
            return Err("max_connections reached");
        }
        let from_ip = open.1.get(&ip).copied().unwrap_or(0);
        if from_ip >= self.max_per_ip {
            return Err("max_connections_per_ip reached");
        }
        open.0 += 1;
        open.1.insert(ip.clone(), from_ip + 1);
        self.gauge.set(open.0 as i64);
        Ok(ConnectionSlot {
            limits: self.clone(),
            ip,
        })
    }
}

impl Drop for ConnectionSlot {
    fn drop(&mut self) {
        let mut open = self.limits.open.lock();
        open.0 -= 1;
        self.limits.gauge.set(open.0 as i64);
        if let Some(n) = open.1.get_mut(&self.ip) {
            *n -= 1;
            if *n == 0 {
                open.1.remove(&self.ip);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn limits_count_per_broker_and_per_address_and_free_on_drop() {
        let gauge = prometheus_client::metrics::gauge::Gauge::default();
        let limits = ConnectionLimits::new(3, 2, gauge.clone());
        let a1 = limits.admit("10.0.0.1:1000", false).unwrap();
        let _a2 = limits.admit("10.0.0.1:1001", false).unwrap();
        assert_eq!(
            limits.admit("10.0.0.1:1002", false).unwrap_err(),
            "max_connections_per_ip reached"
        );
        let _b1 = limits.admit("10.0.0.2:1000", false).unwrap();
        assert_eq!(
            limits.admit("10.0.0.3:1000", false).unwrap_err(),
            "max_connections reached"
        );
        // The inter-broker listener of its own is held to the per-address limit only.
        let _c1 = limits.admit("10.0.0.3:1000", true).unwrap();
        assert_eq!(gauge.get(), 4);
        drop(a1);
        assert_eq!(gauge.get(), 3);
        let _a3 = limits.admit("10.0.0.1:1003", true).unwrap();
        assert!(limits.admit("10.0.0.1:1004", true).is_err());
    }

    #[test]
    fn a_client_certificate_is_the_principal_until_sasl_names_another() {
        let conn = ConnectionState::kafka(
            "SSL".into(),
            "10.0.0.1:5000",
            SecurityProtocol::Ssl,
            Some("CN=alice,O=example".into()),
            CancellationToken::new(),
        );
        assert_eq!(
            conn.principal(),
            Principal::User("CN=alice,O=example".into())
        );
        assert_eq!(conn.principal().acl_name(), "User:CN=alice,O=example");
        // SSL is not a SASL listener: anything may come before a login.
        assert!(conn.admits_unauthenticated(None));
        let _ = conn.principal.set(Principal::Broker(2));
        assert_eq!(conn.principal(), Principal::Broker(2));

        let sasl = ConnectionState::kafka(
            "CLIENT".into(),
            "10.0.0.1:5001",
            SecurityProtocol::SaslSsl,
            None,
            CancellationToken::new(),
        );
        assert_eq!(sasl.principal(), Principal::Anonymous);
        let metadata = pb::request::Body::Metadata(pb::MetadataRequest::default());
        let handshake = pb::request::Body::SaslHandshake(pb::SaslHandshakeRequest::default());
        assert!(!sasl.admits_unauthenticated(Some(&metadata)));
        assert!(sasl.admits_unauthenticated(Some(&handshake)));
        let _ = sasl.principal.set(Principal::User("bob".into()));
        assert!(sasl.admits_unauthenticated(Some(&metadata)));
    }

    #[test]
    fn a_fetch_reserves_its_capped_size_plus_one_batch() {
        let config = crate::config::BrokerConfig::parse(
            "node_id = 1\nprocess_roles = \"broker,controller\"\nlog_dirs = \"/tmp/x/b\"\ncontroller_quorum_voters = \"1@127.0.0.1:9092\"\nfetch_max_bytes = 10000\nmessage_max_bytes = 1000",
        )
        .unwrap();
        assert_eq!(response_budget(&config), 11_000);
        assert_eq!(fetch_reservation(&config, 500), 1_500);
        assert_eq!(fetch_reservation(&config, 0), 11_000);
        assert_eq!(fetch_reservation(&config, i32::MAX), 11_000);
    }
}
