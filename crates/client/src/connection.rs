//! One connection to one broker, pipelining requests: any number may be in flight,
//! responses are matched to requests by correlation id and may arrive in any order.
//! Dropping a request's future is safe: its response, if one comes, is discarded.

use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, AtomicI32, Ordering};
use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use futures::StreamExt;
use parking_lot::Mutex;
use syncline_proto::{frame, pb, API_VERSION};
use tokio::io::{AsyncRead, AsyncWrite};
use tokio::sync::{mpsc, oneshot};
use tokio_util::codec::FramedRead;
use tokio_util::sync::CancellationToken;

use crate::error::ClientError;

/// Default bound on a frame (Kafka's `socket.request.max.bytes`, 100 MiB).
pub const DEFAULT_MAX_FRAME_BYTES: usize = 100 * 1024 * 1024;

/// Frames queued for the writer before `send` waits (backpressure).
const WRITE_QUEUE_FRAMES: usize = 1024;

/// A request frame body in pieces (a produce request's record batches are
/// pieces of their own, not copied: [`frame::encode_request_pieces`]).
type OutFrame = Vec<Bytes>;

type Pending = Mutex<HashMap<i32, oneshot::Sender<pb::response::Body>>>;

struct Shared {
    pending: Pending,
    closed: AtomicBool,
    /// A response arrived: the peer speaks our protocol.
    answered: AtomicBool,
    /// The peer ended the stream (or it failed), rather than this side.
    peer_closed: AtomicBool,
    /// The TLS reason the stream failed, if it was one (a broker refusing the
    /// client certificate says so at the first read).
    tls_failure: Mutex<Option<syncline_tls::TlsError>>,
    /// Stops both tasks: on [`Connection::close`], on any I/O error, or when the
    /// last handle is dropped (the writer's queue closes).
    stop: CancellationToken,
}

impl Shared {
    fn close(&self) {
        self.closed.store(true, Ordering::Release);
        self.stop.cancel();
        // Dropping the senders wakes every waiter with "disconnected".
        self.pending.lock().clear();
    }
}

/// A pipelined connection. Cheap to clone; all clones share the socket.
#[derive(Clone)]
pub struct Connection {
    shared: Arc<Shared>,
    outgoing: mpsc::Sender<OutFrame>,
    next_correlation_id: Arc<AtomicI32>,
    client_id: Arc<str>,
    peer: Arc<str>,
}

impl std::fmt::Debug for Connection {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Connection")
            .field("peer", &self.peer)
            .field("closed", &self.is_closed())
            .finish()
    }
}

/// Removes a request's pending entry if its future is dropped before the response.
struct PendingGuard<'a> {
    shared: &'a Shared,
    correlation_id: i32,
}

impl Drop for PendingGuard<'_> {
    fn drop(&mut self) {
        self.shared.pending.lock().remove(&self.correlation_id);
    }
}

impl Connection {
    /// Connects over plain TCP to `addr` (`host:port`), failing after
    /// `connect_timeout`: no TLS, no SASL. [`Connector`](crate::Connector)
    /// connects as a [`ClientConfig`](crate::ClientConfig) says.
    pub async fn connect(
        addr: &str,
        client_id: &str,
        connect_timeout: Duration,
    ) -> Result<Connection, ClientError> {
        let stream = tokio::time::timeout(connect_timeout, crate::dial::dial(addr))
            .await
            .map_err(|_| ClientError::ConnectTimeout(addr.to_string()))?
            .map_err(|e| ClientError::Connect(addr.to_string(), e))?;
        Ok(Self::from_stream(
            stream,
            addr,
            client_id,
            DEFAULT_MAX_FRAME_BYTES,
        ))
    }

    /// Wraps an established byte stream (TCP, or a simulated network's stream).
    pub fn from_stream<S>(
        stream: S,
        peer: &str,
        client_id: &str,
        max_frame_bytes: usize,
    ) -> Connection
    where
        S: AsyncRead + AsyncWrite + Send + 'static,
    {
        let (read_half, write_half) = tokio::io::split(stream);
        let shared = Arc::new(Shared {
            pending: Mutex::new(HashMap::new()),
            closed: AtomicBool::new(false),
            answered: AtomicBool::new(false),
            peer_closed: AtomicBool::new(false),
            tls_failure: Mutex::new(None),
            stop: CancellationToken::new(),
        });
        let (outgoing, mut queue) = mpsc::channel::<OutFrame>(WRITE_QUEUE_FRAMES);

        let writer_shared = shared.clone();
        tokio::spawn(async move {
            let mut write_half = write_half;
            let mut frames = Vec::with_capacity(frame::MAX_FRAMES_PER_WRITE);
            loop {
                let first = tokio::select! {
                    _ = writer_shared.stop.cancelled() => break,
                    next = queue.recv() => match next {
                        Some(f) => f,
                        None => break,
                    },
                };
                // Everything already queued goes out in one vectored write.
                let more = || queue.try_recv().ok();
                if frame::write_queued(&mut write_half, &mut frames, first, more)
                    .await
                    .is_err()
                {
                    break;
                }
            }
            // Tell the peer we are done; the reader stops with the token.
            let _ = tokio::io::AsyncWriteExt::shutdown(&mut write_half).await;
            writer_shared.close();
        });

        let reader_shared = shared.clone();
        let peer_name: Arc<str> = Arc::from(peer);
        let reader_peer = peer_name.clone();
        tokio::spawn(async move {
            let mut frames = FramedRead::new(read_half, frame::codec(max_frame_bytes));
            loop {
                let next = tokio::select! {
                    _ = reader_shared.stop.cancelled() => break,
                    next = frames.next() => next,
                };
                let bytes = match next {
                    Some(Ok(bytes)) => bytes,
                    Some(Err(e)) => {
                        *reader_shared.tls_failure.lock() =
                            syncline_tls::TlsError::from_client_io(&e);
                        reader_shared.peer_closed.store(true, Ordering::Release);
                        // The caller gets the reason as its error.
                        tracing::debug!(peer = %reader_peer, error = %e, "closing connection");
                        break;
                    }
                    None => {
                        reader_shared.peer_closed.store(true, Ordering::Release);
                        break;
                    }
                };
                let response = match frame::decode_response(bytes.freeze()) {
                    Ok(r) => r,
                    Err(e) => {
                        reader_shared.peer_closed.store(true, Ordering::Release);
                        // The caller gets the reason as its error.
                        tracing::debug!(peer = %reader_peer, error = %e, "closing connection");
                        break;
                    }
                };
                reader_shared.answered.store(true, Ordering::Release);
                let waiter = reader_shared
                    .pending
                    .lock()
                    .remove(&response.correlation_id);
                if let (Some(waiter), Some(body)) = (waiter, response.body) {
                    let _ = waiter.send(body);
                }
            }
            reader_shared.close();
        });

        Connection {
            shared,
            outgoing,
            next_correlation_id: Arc::new(AtomicI32::new(0)),
            client_id: Arc::from(client_id),
            peer: peer_name,
        }
    }

    /// The address this connection was made to.
    pub fn peer(&self) -> &str {
        &self.peer
    }

    /// Closes the connection now, for every clone: waiting requests fail with
    /// [`ClientError::Disconnected`]. (Dropping the last clone closes it too.)
    pub fn close(&self) {
        self.shared.close();
    }

    /// True once the socket failed or closed; a closed connection stays closed.
    pub fn is_closed(&self) -> bool {
        self.shared.closed.load(Ordering::Acquire)
    }

    /// Why requests on this closed connection fail: the TLS reason if there
    /// was one, [`ClientError::ClosedBeforeAnswer`] if the broker hung up
    /// without ever answering, else [`ClientError::Disconnected`].
    fn disconnected(&self) -> ClientError {
        let peer = self.peer.to_string();
        if let Some(source) = self.shared.tls_failure.lock().clone() {
            return ClientError::Tls { addr: peer, source };
        }
        if self.shared.peer_closed.load(Ordering::Acquire)
            && !self.shared.answered.load(Ordering::Acquire)
        {
            return ClientError::ClosedBeforeAnswer(peer);
        }
        ClientError::Disconnected(peer)
    }

    fn envelope(&self, body: pb::request::Body) -> (i32, OutFrame) {
        let correlation_id = self.next_correlation_id.fetch_add(1, Ordering::Relaxed);
        let request = pb::Request {
            correlation_id,
            api_version: API_VERSION,
            client_id: self.client_id.to_string(),
            body: Some(body),
        };
        (correlation_id, frame::encode_request_pieces(request))
    }

    /// Sends a request and waits for its response. A `ErrorResponse` body (unknown
    /// API, unsupported version) comes back as [`ClientError::Protocol`].
    pub async fn send(&self, body: pb::request::Body) -> Result<pb::response::Body, ClientError> {
        match self.send_any(body).await? {
            pb::response::Body::Error(e) => Err(ClientError::Protocol {
                code: syncline_proto::ErrorCode::from_wire(e.error_code),
                message: e.error_message,
            }),
            body => Ok(body),
        }
    }

    /// As [`send`](Self::send), but an `ErrorResponse` body comes back as it is
    /// (for callers that read its other fields, such as a controller hint).
    pub async fn send_any(
        &self,
        body: pb::request::Body,
    ) -> Result<pb::response::Body, ClientError> {
        let (correlation_id, bytes) = self.envelope(body);
        let (tx, rx) = oneshot::channel();
        if self.is_closed() {
            return Err(self.disconnected());
        }
        self.shared.pending.lock().insert(correlation_id, tx);
        let _guard = PendingGuard {
            shared: &self.shared,
            correlation_id,
        };
        // The writer may have closed between the check and the insert.
        if self.is_closed() || self.outgoing.send(bytes).await.is_err() {
            return Err(self.disconnected());
        }
        rx.await.map_err(|_| self.disconnected())
    }

    /// Sends a request that gets no response (a produce with acks=0).
    pub async fn send_no_response(&self, body: pb::request::Body) -> Result<(), ClientError> {
        let (_, bytes) = self.envelope(body);
        if self.is_closed() || self.outgoing.send(bytes).await.is_err() {
            return Err(self.disconnected());
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use futures::SinkExt;
    use pb::{request, response};
    use tokio_util::codec::{FramedWrite, LengthDelimitedCodec};

    /// A fake peer that answers Metadata requests in reverse order of arrival, two at
    /// a time, echoing the correlation id in `cluster_id`.
    async fn reversing_peer(stream: tokio::io::DuplexStream) {
        let (r, w) = tokio::io::split(stream);
        let mut frames = FramedRead::new(r, frame::codec(1 << 20));
        let mut sink = FramedWrite::new(w, frame::codec(1 << 20));
        let mut held = Vec::new();
        while let Some(Ok(f)) = frames.next().await {
            let req = frame::decode_request(f.freeze()).unwrap();
            held.push(req.correlation_id);
            if held.len() == 2 {
                for id in held.drain(..).rev() {
                    let resp = pb::Response {
                        correlation_id: id,
                        body: Some(response::Body::Metadata(pb::MetadataResponse {
                            cluster_id: id.to_string(),
                            ..Default::default()
                        })),
                    };
                    sink.send(frame::encode(&resp)).await.unwrap();
                }
            }
        }
    }

    type PeerRead = FramedRead<tokio::io::ReadHalf<tokio::io::DuplexStream>, LengthDelimitedCodec>;
    type PeerWrite =
        FramedWrite<tokio::io::WriteHalf<tokio::io::DuplexStream>, LengthDelimitedCodec>;

    /// A fake peer's two framed halves.
    fn peer_frames(
        r: tokio::io::ReadHalf<tokio::io::DuplexStream>,
        w: tokio::io::WriteHalf<tokio::io::DuplexStream>,
    ) -> (PeerRead, PeerWrite) {
        (
            FramedRead::new(r, frame::codec(1 << 20)),
            FramedWrite::new(w, frame::codec(1 << 20)),
        )
    }

    /// Reads the next request and answers it with `body`; returns the request.
    async fn answer_next(
        frames: &mut PeerRead,
        sink: &mut PeerWrite,
        body: response::Body,
    ) -> pb::Request {
        let req = frame::decode_request(frames.next().await.unwrap().unwrap().freeze()).unwrap();
        let resp = pb::Response {
            correlation_id: req.correlation_id,
            body: Some(body),
        };
        sink.send(frame::encode(&resp)).await.unwrap();
        req
    }

    fn metadata() -> request::Body {
        request::Body::Metadata(pb::MetadataRequest::default())
    }

    #[tokio::test]
    async fn out_of_order_responses_reach_their_requests() {
        let (a, b) = tokio::io::duplex(1 << 16);
        tokio::spawn(reversing_peer(b));
        let conn = Connection::from_stream(a, "peer", "test", 1 << 20);
        let (r0, r1) = tokio::join!(conn.send(metadata()), conn.send(metadata()));
        let id = |r: Result<response::Body, ClientError>| match r.unwrap() {
            response::Body::Metadata(m) => m.cluster_id,
            other => panic!("unexpected {other:?}"),
        };
        assert_eq!(id(r0), "0");
        assert_eq!(id(r1), "1");
    }

    #[tokio::test]
    async fn a_produce_request_in_pieces_arrives_as_sent() {
        let (a, b) = tokio::io::duplex(1 << 10);
        let (r, w) = tokio::io::split(b);
        let conn = Connection::from_stream(a, "peer", "test", 1 << 20);
        let produce = pb::ProduceRequest {
            acks: -1,
            timeout_ms: 30_000,
            topics: vec![pb::ProduceTopic {
                name: "t".into(),
                partitions: (0..3)
                    .map(|p| pb::ProducePartition {
                        partition: p,
                        current_leader_epoch: Some(p + 1),
                        records: Bytes::from(vec![p as u8; 4000 * p as usize]),
                    })
                    .collect(),
            }],
        };
        let peer = tokio::spawn(async move {
            let (mut frames, mut sink) = peer_frames(r, w);
            let body = response::Body::Produce(pb::ProduceResponse::default());
            answer_next(&mut frames, &mut sink, body).await
        });
        conn.send(request::Body::Produce(produce.clone()))
            .await
            .unwrap();
        let req = peer.await.unwrap();
        assert_eq!(req.client_id, "test");
        assert_eq!(req.body, Some(request::Body::Produce(produce)));
    }

    #[tokio::test]
    async fn dropped_request_leaves_no_pending_entry_and_peer_close_fails_waiters() {
        let (a, b) = tokio::io::duplex(1 << 16);
        let conn = Connection::from_stream(a, "peer", "test", 1 << 20);
        {
            let fut = conn.send(metadata());
            // Poll once so the request registers, then drop it.
            let _ = tokio::time::timeout(Duration::from_millis(1), fut).await;
        }
        assert!(conn.shared.pending.lock().is_empty());
        let waiting = tokio::spawn({
            let conn = conn.clone();
            async move { conn.send(metadata()).await }
        });
        drop(b);
        let err = waiting.await.unwrap().unwrap_err();
        // A peer that never answered: maybe not a plaintext listener.
        assert!(matches!(err, ClientError::ClosedBeforeAnswer(_)), "{err:?}");
        assert!(err.to_string().contains("check security.protocol"), "{err}");
        assert!(conn.is_closed());
    }

    #[tokio::test]
    async fn a_peer_that_answered_and_then_closed_is_a_lost_connection() {
        let (a, b) = tokio::io::duplex(1 << 16);
        let (r, w) = tokio::io::split(b);
        let conn = Connection::from_stream(a, "peer", "test", 1 << 20);
        let peer = tokio::spawn(async move {
            let (mut frames, mut sink) = peer_frames(r, w);
            let body = response::Body::Metadata(pb::MetadataResponse::default());
            answer_next(&mut frames, &mut sink, body).await;
            // Takes the next request and hangs up.
            let _ = frames.next().await;
        });
        conn.send(metadata()).await.unwrap();
        let err = conn.send(metadata()).await.unwrap_err();
        peer.await.unwrap();
        assert!(matches!(err, ClientError::Disconnected(_)), "{err:?}");
    }

    #[tokio::test]
    async fn dropping_every_handle_or_closing_ends_the_socket() {
        use tokio::io::AsyncReadExt;
        for explicit in [false, true] {
            let (a, mut b) = tokio::io::duplex(1 << 16);
            let conn = Connection::from_stream(a, "peer", "test", 1 << 20);
            let clone = conn.clone();
            if explicit {
                conn.close();
                assert!(clone.is_closed());
            } else {
                drop(conn);
                drop(clone);
            }
            // The peer sees end-of-stream.
            let mut buf = [0u8; 16];
            let n = tokio::time::timeout(Duration::from_secs(5), b.read(&mut buf))
                .await
                .expect("the connection must close")
                .unwrap();
            assert_eq!(n, 0);
        }
    }
}
