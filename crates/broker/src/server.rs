//! The client-facing server: accepts connections and reads request frames.
//!
//! Each connection has a reader (this task) and a writer task. The reader decodes a
//! request and dispatches it *inline*: appends happen in the order requests arrive
//! on the connection, and nothing waits in the reader. A request that must wait
//! (long-polling fetch, acks=all produce) goes to the purgatory with its
//! [`Responder`]; whoever completes it sends the response through the writer, so
//! responses may leave in any order (clients match them by correlation id). The
//! number of requests in flight per connection is bounded (`queued_max_requests`).

use std::sync::Arc;

use bytes::Bytes;
use futures::StreamExt;
use parking_lot::Mutex;
use syncline_proto::{frame, pb};
use tokio::sync::{mpsc, OwnedSemaphorePermit, Semaphore};
use tokio::time::Instant;
use tokio_util::codec::FramedRead;
use tokio_util::sync::CancellationToken;

use crate::broker::Broker;
use crate::delayed::PendingOp;
use crate::metrics::ApiMetrics;
use crate::net::{BoxStream, Listener};

/// Per-connection state shared with the responders of its requests.
#[derive(Debug)]
pub(crate) struct ConnectionState {
    /// The name of the listener it arrived on (answers carry that listener's
    /// endpoints).
    pub listener: Arc<str>,
    tx: mpsc::UnboundedSender<Bytes>,
    /// Operations waiting in a purgatory on behalf of this connection: cancelled
    /// when it closes.
    pending: Mutex<Vec<PendingOp>>,
}

impl ConnectionState {
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
    _permit: OwnedSemaphorePermit,
}

impl Responder {
    /// The connection the request came on.
    pub(crate) fn connection(&self) -> &Arc<ConnectionState> {
        &self.conn
    }

    /// Sends the response.
    pub(crate) fn send(self, body: pb::response::Body) {
        let response = pb::Response {
            correlation_id: self.correlation_id,
            body: Some(body),
        };
        let bytes = frame::encode(&response);
        if let Some(api) = &self.api {
            api.observe(self.started.elapsed(), bytes.len());
        }
        // The connection may have closed meanwhile: then nobody wants the answer.
        let _ = self.conn.tx.send(bytes);
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
pub(crate) async fn serve(
    mut listener: Box<dyn Listener>,
    name: Arc<str>,
    broker: Arc<Broker>,
    shutdown: CancellationToken,
) {
    loop {
        tokio::select! {
            _ = shutdown.cancelled() => break,
            accepted = listener.accept() => match accepted {
                Ok((stream, peer)) => {
                    let broker = broker.clone();
                    let shutdown = shutdown.clone();
                    let name = name.clone();
                    tokio::spawn(async move { connection(stream, peer, name, broker, shutdown).await });
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

async fn connection(
    stream: BoxStream,
    peer: String,
    listener: Arc<str>,
    broker: Arc<Broker>,
    shutdown: CancellationToken,
) {
    let max_frame = broker.config().socket_request_max_bytes;
    let (read_half, write_half) = tokio::io::split(stream);
    let (tx, mut rx) = mpsc::unbounded_channel::<Bytes>();
    let conn = Arc::new(ConnectionState {
        listener,
        tx,
        pending: Mutex::new(Vec::new()),
    });
    let writer = tokio::spawn(async move {
        let mut write_half = write_half;
        let mut frames = Vec::with_capacity(frame::MAX_FRAMES_PER_WRITE);
        while let Some(first) = rx.recv().await {
            // Everything already queued goes out in one vectored write.
            let more = || rx.try_recv().ok();
            if frame::write_queued(&mut write_half, &mut frames, first, more)
                .await
                .is_err()
            {
                break;
            }
        }
    });

    let in_flight = Arc::new(Semaphore::new(broker.config().queued_max_requests));
    let mut frames = FramedRead::new(read_half, frame::codec(max_frame));
    loop {
        let next = tokio::select! {
            _ = shutdown.cancelled() => break,
            next = frames.next() => next,
        };
        let bytes = match next {
            None => break,
            Some(Ok(b)) => b.freeze(),
            Some(Err(e)) => {
                tracing::warn!(%peer, error = %e, "closing connection: bad frame");
                break;
            }
        };
        let frame_len = bytes.len();
        let request = match frame::decode_request(bytes) {
            Ok(r) => r,
            Err(e) => {
                tracing::warn!(%peer, error = %e, "closing connection: request does not decode");
                break;
            }
        };
        let permit = tokio::select! {
            _ = shutdown.cancelled() => break,
            p = in_flight.clone().acquire_owned() => p.expect("semaphore is never closed"),
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
            _permit: permit,
        };
        broker.handle(request, responder);
    }
    let pending = std::mem::take(&mut *conn.pending.lock());
    for op in pending {
        broker.replica_manager().cancel(op);
    }
    drop(conn);
    // The writer ends by itself once the last responder is gone (it drains what
    // completed requests queued); on shutdown nobody waits for it.
    if shutdown.is_cancelled() {
        writer.abort();
    }
}
