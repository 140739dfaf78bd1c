//! Where a request's answer goes: the [`Responder`] every request is served
//! with, and the [`ConnectionState`] it shares with the other requests of its
//! connection. A leaf: the front end makes responders, the replica layer,
//! the group coordinators and the broker's dispatch answer through them, and
//! nothing here knows who serves the request.

use std::sync::{Arc, OnceLock};

use bytes::Bytes;
use parking_lot::Mutex;
use syncline_proto::{frame, pb};
use tokio::sync::{mpsc, Notify, OwnedSemaphorePermit};
use tokio::time::Instant;
use tokio_util::sync::CancellationToken;

use crate::auth::Principal;
use crate::client_quota::{QuotaCharge, RequestTimeCharge};
use crate::config::SecurityProtocol;
use crate::metrics::ApiMetrics;
use crate::send::{FetchRegions, Outgoing};

/// What a syncline connection's writer is given: an answer, and what it
/// holds until written.
pub(crate) type Queued = (Outgoing, Held);

/// What an answer keeps until its bytes have been written (or dropped, the
/// connection gone): its request's place among those in flight
/// (`queued_max_requests`), the fetch budget it reserved, and its bytes'
/// share of the connection's [`Backlog`]. So a client that stops reading
/// stops being read: nothing it asked for is forgotten before it has left.
#[derive(Debug, Default)]
pub(crate) struct Held {
    _in_flight: Option<OwnedSemaphorePermit>,
    _reserved: Option<OwnedSemaphorePermit>,
    _backlog: Option<BacklogShare>,
}

impl Held {
    /// What an answer the listener makes itself holds (no request permit).
    pub(crate) fn answer(conn: &ConnectionState, bytes: usize) -> Held {
        Held {
            _backlog: Some(conn.backlog.share(bytes)),
            ..Held::default()
        }
    }
}

/// The bytes of a connection's answers queued in memory and not yet
/// written, against `connection_max_unwritten_bytes`: before reading a request,
/// the connection waits until they are at most that (Kafka mutes a channel
/// while its answer is being sent). A fetch answer's record regions are sent
/// from the files, not held: they count against the fetch budget instead.
#[derive(Debug)]
pub(crate) struct Backlog {
    bytes: std::sync::atomic::AtomicUsize,
    written: Notify,
    cap: usize,
    /// When a frame was last read or an answer last left: see
    /// [`Backlog::last_progress`].
    progress: Mutex<Instant>,
}

/// One answer's bytes in a [`Backlog`]: given back when dropped.
#[derive(Debug)]
pub(crate) struct BacklogShare {
    backlog: Arc<Backlog>,
    bytes: usize,
}

impl Backlog {
    pub(crate) fn new(cap: usize) -> Arc<Backlog> {
        Arc::new(Backlog {
            bytes: Default::default(),
            written: Notify::new(),
            cap,
            progress: Mutex::new(Instant::now()),
        })
    }

    fn share(self: &Arc<Self>, bytes: usize) -> BacklogShare {
        self.bytes
            .fetch_add(bytes, std::sync::atomic::Ordering::AcqRel);
        BacklogShare {
            backlog: self.clone(),
            bytes,
        }
    }

    /// The bytes queued and not yet written.
    pub(crate) fn unwritten(&self) -> usize {
        self.bytes.load(std::sync::atomic::Ordering::Acquire)
    }

    /// Whether a request may be read now; else [`Backlog::room`] waits.
    pub(crate) fn has_room(&self) -> bool {
        self.unwritten() <= self.cap
    }

    /// Waits until the unwritten bytes are within the cap.
    pub(crate) async fn room(&self) {
        loop {
            let written = self.written.notified();
            tokio::pin!(written);
            written.as_mut().enable();
            if self.has_room() {
                return;
            }
            written.await;
        }
    }

    /// Records that the connection moved: a frame was read.
    pub(crate) fn progressed(&self) {
        *self.progress.lock() = Instant::now();
    }

    /// When a frame was last read or an answer's bytes last left (what
    /// `connections_max_idle_ms` counts from).
    pub(crate) fn last_progress(&self) -> Instant {
        *self.progress.lock()
    }
}

impl Drop for BacklogShare {
    fn drop(&mut self) {
        self.backlog
            .bytes
            .fetch_sub(self.bytes, std::sync::atomic::Ordering::AcqRel);
        self.backlog.progressed();
        self.backlog.written.notify_waiters();
    }
}

/// An operation waiting in a purgatory on behalf of a connection (a delayed
/// fetch or produce): cancelled when the connection closes.
pub(crate) trait Pending: Send + Sync + std::fmt::Debug {
    /// Whether it completed already.
    fn is_completed(&self) -> bool;
    /// Completes it as cancelled (nobody wants the answer any more).
    fn cancel(&self);
}

/// Per-connection state shared with the responders of its requests.
#[derive(Debug)]
pub(crate) struct ConnectionState {
    /// The name of the listener it arrived on (answers carry that listener's
    /// endpoints).
    pub listener: Arc<str>,
    /// The writer of a syncline connection; None on a Kafka listener, whose
    /// responders carry their own slot in the response order.
    tx: Option<mpsc::UnboundedSender<Queued>>,
    /// Its answers' bytes not yet written.
    pub backlog: Arc<Backlog>,
    /// Operations waiting in a purgatory on behalf of this connection: cancelled
    /// when it closes.
    pending: Mutex<Vec<Box<dyn Pending>>>,
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
    /// Until when no request is read: its client went over its byte-rate
    /// quota (KIP-219: the answer leaves at once, then the channel is muted).
    throttled_until: Mutex<Option<Instant>>,
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
        backlog: Arc<Backlog>,
    ) -> Arc<ConnectionState> {
        Arc::new(ConnectionState {
            listener,
            peer: peer.into(),
            tx: None,
            backlog,
            pending: Mutex::new(Vec::new()),
            principal: OnceLock::new(),
            certificate,
            internal: false,
            protocol,
            close,
            throttled_until: Mutex::new(None),
        })
    }

    /// The state of a syncline connection whose responses `tx`'s writer sends.
    pub(crate) fn syncline(
        listener: Arc<str>,
        peer: &str,
        tx: mpsc::UnboundedSender<Queued>,
        protocol: SecurityProtocol,
        certificate: Option<Arc<str>>,
        close: CancellationToken,
        backlog: Arc<Backlog>,
    ) -> Arc<ConnectionState> {
        Arc::new(ConnectionState {
            listener,
            peer: peer.into(),
            tx: Some(tx),
            backlog,
            pending: Mutex::new(Vec::new()),
            principal: OnceLock::new(),
            certificate,
            internal: false,
            protocol,
            close,
            throttled_until: Mutex::new(None),
        })
    }

    /// Records who authenticated on the connection; false if it already had.
    pub(crate) fn set_principal(&self, principal: Principal) -> bool {
        self.principal.set(principal).is_ok()
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

    /// Cancels what waits on behalf of the connection (it closed).
    pub(crate) fn cancel_pending(&self) {
        let pending = std::mem::take(&mut *self.pending.lock());
        for op in pending {
            op.cancel();
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

    /// Reads no request for `throttle` from now (a quota's throttle; the
    /// later of two throttles holds).
    pub(crate) fn throttle(&self, throttle: std::time::Duration) {
        let until = Instant::now() + throttle;
        let mut throttled = self.throttled_until.lock();
        if throttled.is_none_or(|t| t < until) {
            *throttled = Some(until);
        }
    }

    /// Until when the connection is throttled, if it still is at `now`.
    pub(crate) fn throttled_until(&self, now: Instant) -> Option<Instant> {
        self.throttled_until.lock().filter(|&until| until > now)
    }

    /// Remembers a waiting operation so that closing the connection cancels it.
    pub(crate) fn track(&self, op: Box<dyn Pending>) {
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
    /// Where the answer goes.
    to: ReplyTo,
    api: Option<Arc<ApiMetrics>>,
    started: Instant,
    /// Its place among the connection's requests in flight (none for the
    /// broker's own requests): held until its answer is written.
    permit: Option<OwnedSemaphorePermit>,
    /// The response bytes reserved for it (fetches): released once written.
    reserved: Option<OwnedSemaphorePermit>,
    /// Adds the parts of the request the authorizer refused.
    patch: Option<PatchSlot>,
    /// The client quota its bytes are charged to, settled as it is answered.
    quota: Option<QuotaCharge>,
    /// The client quota its handling time is charged to, settled as it is
    /// answered.
    request_quota: Option<RequestTimeCharge>,
}

/// Where a response goes.
#[derive(Debug)]
enum ReplyTo {
    /// A syncline connection's writer, as the answer to `correlation_id`.
    Syncline {
        /// The request's id, which the client matches answers by.
        correlation_id: i32,
    },
    /// A Kafka listener's connection: translated back to Kafka's response,
    /// into its slot in request order.
    Kafka(KafkaReply),
    /// The broker itself, which asked (its group coordinators' appends).
    Internal(tokio::sync::oneshot::Sender<pb::response::Body>),
    /// Nowhere: the answer has gone.
    Sent,
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
    pub(crate) slot: tokio::sync::oneshot::Sender<(Bytes, Held)>,
}

impl std::fmt::Debug for KafkaReply {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("KafkaReply")
    }
}

impl Responder {
    /// A responder for a request of a syncline connection, `correlation_id`
    /// its id.
    pub(crate) fn for_syncline(
        conn: Arc<ConnectionState>,
        correlation_id: i32,
        api: Option<Arc<ApiMetrics>>,
        permit: OwnedSemaphorePermit,
        reserved: Option<OwnedSemaphorePermit>,
    ) -> Responder {
        Responder {
            conn,
            to: ReplyTo::Syncline { correlation_id },
            api,
            started: Instant::now(),
            permit: Some(permit),
            reserved,
            patch: None,
            quota: None,
            request_quota: None,
        }
    }

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
            to: ReplyTo::Kafka(reply),
            api,
            started: Instant::now(),
            permit: Some(permit),
            reserved,
            patch: None,
            quota: None,
            request_quota: None,
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
            backlog: Backlog::new(usize::MAX),
            pending: Mutex::new(Vec::new()),
            principal: OnceLock::new(),
            certificate: None,
            internal: true,
            protocol: SecurityProtocol::Plaintext,
            close: CancellationToken::new(),
            throttled_until: Mutex::new(None),
        });
        let responder = Responder {
            conn,
            to: ReplyTo::Internal(tx),
            api: None,
            started: Instant::now(),
            permit: None,
            reserved: None,
            patch: None,
            quota: None,
            request_quota: None,
        };
        (responder, rx)
    }

    /// Has `patch` applied to the response before it is sent.
    pub(crate) fn set_patch(&mut self, patch: crate::authorizer::Patch) {
        self.patch = Some(PatchSlot(patch));
    }

    /// Charges the request's bytes to `quota` (`None`: to no quota).
    pub(crate) fn set_quota(&mut self, quota: Option<QuotaCharge>) {
        self.quota = quota;
    }

    /// Charges the request's handling time to `quota` (`None`: to no quota).
    pub(crate) fn set_request_quota(&mut self, quota: Option<RequestTimeCharge>) {
        self.request_quota = quota;
    }

    /// Whether the answer settles a quota charge.
    fn charged(&self) -> bool {
        self.quota.is_some() || self.request_quota.is_some()
    }

    /// Adds `bytes` to what the request is charged, if it is charged.
    pub(crate) fn charge_quota(&mut self, bytes: usize) {
        if let Some(q) = &mut self.quota {
            q.add(bytes as u64);
        }
    }

    /// Settles the request's quota charge with `bytes` more (its answer's
    /// records): the answer's `throttle_time_ms`, and the connection muted
    /// that long, if its client went over; and whether a fetch answer's
    /// records are withheld.
    ///
    /// A request over both its byte-rate and its request quota is throttled
    /// for the longer of the two (as Kafka's answers carry the larger).
    fn settle_quota(&mut self, bytes: u64) -> (i32, bool) {
        let settled = match self.quota.take() {
            Some(mut charge) => {
                charge.add(bytes);
                charge.settle()
            }
            None => Default::default(),
        };
        let request_throttle = self
            .request_quota
            .take()
            .map_or(std::time::Duration::ZERO, RequestTimeCharge::settle);
        let throttle = settled.throttle.max(request_throttle);
        if !throttle.is_zero() {
            self.conn.throttle(throttle);
        }
        let ms = throttle.as_millis().min(i32::MAX as u128) as i32;
        (ms, settled.withhold_records)
    }

    /// Sends the response.
    pub(crate) fn send(mut self, mut body: pb::response::Body) {
        if let Some(PatchSlot(patch)) = self.patch.take() {
            patch(&mut body);
        }
        if self.charged() {
            let bytes = match &body {
                pb::response::Body::Fetch(f) => record_bytes(f),
                _ => 0,
            };
            let (throttle_time_ms, withhold_records) = self.settle_quota(bytes);
            match &mut body {
                pb::response::Body::Produce(p) => p.throttle_time_ms = throttle_time_ms,
                pb::response::Body::Fetch(f) => {
                    f.throttle_time_ms = throttle_time_ms;
                    if withhold_records {
                        withhold(f);
                    }
                }
                _ => {}
            }
        }
        match std::mem::replace(&mut self.to, ReplyTo::Sent) {
            ReplyTo::Internal(tx) => {
                let _ = tx.send(body);
            }
            ReplyTo::Kafka(reply) => {
                let bytes = (reply.translate)(body);
                if let Some(api) = &self.api {
                    api.observe(self.started.elapsed(), bytes.len());
                }
                let held = self.held(bytes.len());
                let _ = reply.slot.send((bytes, held));
            }
            ReplyTo::Syncline { correlation_id } => {
                let response = pb::Response {
                    correlation_id,
                    body: Some(body),
                };
                self.queue(Outgoing::Frame(frame::encode(&response)));
            }
            ReplyTo::Sent => {}
        }
    }

    /// Whether a fetch response may leave its records in the segment files
    /// ([`Responder::send_fetch`]): only on a syncline connection, whose writer
    /// sends them itself (the Kafka listener's responses and the broker's own
    /// requests need them in memory).
    pub(crate) fn zero_copy(&self) -> bool {
        matches!(self.to, ReplyTo::Syncline { .. }) && self.conn.tx.is_some()
    }

    /// Sends a fetch response whose records are `response`'s and, for the
    /// partitions in `regions`, those regions of the segment files: written
    /// around the envelope without being copied here ([`crate::send`]).
    pub(crate) fn send_fetch(mut self, mut response: pb::FetchResponse, mut regions: FetchRegions) {
        self.charge_fetch(&mut response, &mut regions);
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
        let (ReplyTo::Syncline { correlation_id }, true) = (&self.to, self.zero_copy()) else {
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
        };
        let chunks = frame::encode_fetch_response_chunks(*correlation_id, response, |t, p| {
            regions.take(t, p)
        });
        self.to = ReplyTo::Sent;
        self.queue(Outgoing::Chunks(chunks));
    }

    /// Settles a fetch answer's quota charge (its records in `response` and
    /// `regions`) before it is sent: sets its `throttle_time_ms`, and empties
    /// it of its records if its client is throttled (a consumer over its
    /// quota). Returns whether the records stay. Once settled, nothing more
    /// is charged.
    pub(crate) fn charge_fetch(
        &mut self,
        response: &mut pb::FetchResponse,
        regions: &mut FetchRegions,
    ) -> bool {
        if !self.charged() {
            return true;
        }
        let bytes = record_bytes(response) + regions.bytes();
        let (throttle_time_ms, withhold_records) = self.settle_quota(bytes);
        response.throttle_time_ms = throttle_time_ms;
        if withhold_records {
            withhold(response);
            *regions = FetchRegions::default();
        }
        !withhold_records
    }

    /// Queues a syncline response frame for the connection's writer.
    fn queue(&mut self, out: Outgoing) {
        if let Some(api) = &self.api {
            api.observe(self.started.elapsed(), out.len() as usize);
        }
        // The connection may have closed meanwhile: then nobody wants the answer.
        let held = self.held(out.in_memory());
        if let Some(tx) = &self.conn.tx {
            let _ = tx.send((out, held));
        }
    }

    /// What its answer of `bytes` bytes (in memory) holds until written.
    fn held(&mut self, bytes: usize) -> Held {
        Held {
            _in_flight: self.permit.take(),
            _reserved: self.reserved.take(),
            _backlog: Some(self.conn.backlog.share(bytes)),
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

    /// Completes a request that gets no response (acks=0): its bytes are
    /// charged all the same, and a throttle mutes the connection.
    pub(crate) fn no_response(mut self) {
        self.settle_quota(0);
        if let Some(api) = &self.api {
            api.observe(self.started.elapsed(), 0);
        }
    }
}

/// Empties a throttled consumer's fetch answer of its records (Kafka's
/// throttled response): it fetches the same offsets again once unthrottled.
fn withhold(response: &mut pb::FetchResponse) {
    for p in response
        .responses
        .iter_mut()
        .flat_map(|t| &mut t.partitions)
    {
        p.records = Bytes::new();
    }
}

/// The record bytes a fetch response carries in memory.
fn record_bytes(response: &pb::FetchResponse) -> u64 {
    response
        .responses
        .iter()
        .flat_map(|t| &t.partitions)
        .map(|p| p.records.len() as u64)
        .sum()
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Each responder answers where its request came from: the broker's own
    /// receiver, a Kafka connection's slot (translated), or a syncline
    /// connection's writer under the request's correlation id; only the last
    /// may leave fetched records in the segment files.
    #[tokio::test]
    async fn each_responder_answers_where_its_request_came_from_holding_its_place_until_written() {
        use tokio::sync::{oneshot, Semaphore};
        let error = || {
            pb::response::Body::Error(pb::ErrorResponse {
                error_code: 1,
                error_message: String::new(),
                controller_hint: None,
            })
        };
        let permits = Arc::new(Semaphore::new(2));
        let permit = || permits.clone().try_acquire_owned().unwrap();

        let (internal, answer) = Responder::internal("L".into());
        assert!(!internal.zero_copy());
        assert!(internal.connection().internal);
        internal.send(error());
        assert_eq!(answer.await.unwrap(), error());

        let (slot, kafka_answer) = oneshot::channel();
        let conn = ConnectionState::kafka(
            "K".into(),
            "10.0.0.1:1",
            SecurityProtocol::Plaintext,
            None,
            CancellationToken::new(),
            Backlog::new(1 << 20),
        );
        let reply = KafkaReply {
            translate: Box::new(|_| Bytes::from_static(b"in Kafka's words")),
            slot,
        };
        let backlog = conn.backlog.clone();
        let kafka = Responder::for_kafka(conn, None, permit(), None, reply);
        assert!(!kafka.zero_copy());
        kafka.send(error());
        let (bytes, held) = kafka_answer.await.unwrap();
        assert_eq!(bytes, "in Kafka's words");
        // Until the writer has written it, the answer keeps its request's
        // place in flight and its bytes count as unwritten.
        assert_eq!(permits.available_permits(), 1);
        assert_eq!(backlog.unwritten(), bytes.len());
        drop(held);
        assert_eq!(permits.available_permits(), 2);
        assert_eq!(backlog.unwritten(), 0);

        let (tx, mut writer) = mpsc::unbounded_channel();
        let conn = ConnectionState::syncline(
            "S".into(),
            "10.0.0.1:2",
            tx,
            SecurityProtocol::Plaintext,
            None,
            CancellationToken::new(),
            Backlog::new(1 << 20),
        );
        let backlog = conn.backlog.clone();
        let syncline = Responder::for_syncline(conn, 42, None, permit(), None);
        assert!(syncline.zero_copy());
        syncline.send(error());
        let Ok((Outgoing::Frame(bytes), held)) = writer.try_recv() else {
            panic!("no frame queued for the writer");
        };
        assert_eq!(permits.available_permits(), 1);
        assert_eq!(backlog.unwritten(), bytes.len());
        drop(held);
        assert_eq!(permits.available_permits(), 2);
        assert_eq!(backlog.unwritten(), 0);
        let response = frame::decode_response(bytes).unwrap();
        assert_eq!(response.correlation_id, 42);
        assert_eq!(response.body, Some(error()));
    }

    #[test]
    fn a_client_certificate_is_the_principal_until_sasl_names_another() {
        let conn = ConnectionState::kafka(
            "SSL".into(),
            "10.0.0.1:5000",
            SecurityProtocol::Ssl,
            Some("CN=alice,O=example".into()),
            CancellationToken::new(),
            Backlog::new(1 << 20),
        );
        assert_eq!(
            conn.principal(),
            Principal::User("CN=alice,O=example".into())
        );
        assert_eq!(conn.principal().acl_name(), "User:CN=alice,O=example");
        // SSL is not a SASL listener: anything may come before a login.
        assert!(conn.admits_unauthenticated(None));
        assert!(conn.set_principal(Principal::Broker(2)));
        assert_eq!(conn.principal(), Principal::Broker(2));

        let sasl = ConnectionState::kafka(
            "CLIENT".into(),
            "10.0.0.1:5001",
            SecurityProtocol::SaslSsl,
            None,
            CancellationToken::new(),
            Backlog::new(1 << 20),
        );
        assert_eq!(sasl.principal(), Principal::Anonymous);
        let metadata = pb::request::Body::Metadata(pb::MetadataRequest::default());
        let handshake = pb::request::Body::SaslHandshake(pb::SaslHandshakeRequest::default());
        assert!(!sasl.admits_unauthenticated(Some(&metadata)));
        assert!(sasl.admits_unauthenticated(Some(&handshake)));
        assert!(sasl.set_principal(Principal::User("bob".into())));
        assert!(sasl.admits_unauthenticated(Some(&metadata)));
    }
}
