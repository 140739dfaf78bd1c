//! A syncline listener's connection: reads request frames, dispatches them,
//! writes the answers.
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
//! has been written to the socket. A request's place in flight is given back
//! then too, and no request is read while the answers not yet written hold
//! more than `connection_max_unwritten_bytes`. A client that stops reading
//! therefore stops being read (TCP pushes back on it) instead of growing the
//! broker's memory.

use std::sync::Arc;

use syncline_proto::{frame, pb};
use tokio::sync::mpsc;
use tokio_util::codec::FramedRead;
use tokio_util::sync::CancellationToken;

use super::connection::{next_frame, sasl_step, Accepted, Reading, SASL_REQUIRED};
use super::dispatch::Dispatch;
use super::limits::RequestLimits;
use crate::auth::SaslState;
use crate::net::BoxStream;
use crate::responder::{Backlog, ConnectionState, Queued, Responder};
use crate::send::{Sink, WriteError};

pub(crate) async fn connection(
    accepted: Accepted,
    broker: Arc<dyn Dispatch>,
    shutdown: CancellationToken,
) {
    let Accepted {
        stream,
        peer,
        listener,
        protocol,
        certificate,
    } = accepted;
    let config = broker.config();
    let (read_half, sink) = split(stream);
    let (tx, mut rx) = mpsc::unbounded_channel::<Queued>();
    let close = shutdown.child_token();
    let backlog = Backlog::new(config.connection_bounds.max_unwritten_bytes);
    let conn = ConnectionState::syncline(
        listener,
        &peer,
        tx,
        protocol,
        certificate,
        close.clone(),
        backlog,
    );
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

    let limits = RequestLimits::new(config);
    let reading = Reading::new(config);
    let mut sasl = SaslState::default();
    let mut frames = FramedRead::new(read_half, frame::codec(config.socket_request_max_bytes));
    loop {
        let Some(bytes) = next_frame(&mut frames, &conn, &reading, &*broker).await else {
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
            .admit(
                config,
                request.body.as_ref(),
                &shutdown,
                &broker.metrics().connections_muted,
            )
            .await
        else {
            break;
        };
        let api = request
            .body
            .as_ref()
            .map(|b| broker.metrics().api(b, frame_len));
        let responder =
            Responder::for_syncline(conn.clone(), request.correlation_id, api, permit, reserved);
        if let Some(
            body @ (pb::request::Body::SaslHandshake(_) | pb::request::Body::SaslAuthenticate(_)),
        ) = request.body
        {
            // Inline, so that the next request on the connection already sees
            // the principal.
            let step = sasl_step(&conn, &broker, &mut sasl, body).await;
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
        super::dispatch::serve(&broker, request, responder).await;
    }
    conn.cancel_pending();
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
