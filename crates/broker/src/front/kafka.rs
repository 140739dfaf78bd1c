//! The Kafka wire-protocol listener (`kafka_listeners`): Kafka's clients and
//! tools (librdkafka, kcat, kafka-python, the Java clients) on the same brokers.
//!
//! The protocol itself is `syncline-kafka` (`codec`: the APIs and versions
//! spoken, frames by the `kafka-protocol` crate; `translate`: each Kafka request
//! as the syncline request the broker already serves, and its response back, so
//! no rule of the broker is implemented twice). This module owns connections.
//!
//! A connection reads frames in order and dispatches each as the syncline
//! listener does (inline, so appends keep the arrival order); responses leave in
//! request order, as Kafka's clients require, each waiting for those before it.
//! A Produce with acks=0 gets no response. Fetch responses are held to the same
//! per-connection byte budget, and every answer (the listener's own too:
//! ApiVersions, the SASL exchange) to the cap on unwritten bytes: a client that
//! does not read is not read. Anything the listener does not speak (an unknown
//! API, an unadvertised version, bytes that do not decode, a frame above
//! `socket_request_max_bytes`) closes the connection, as Kafka's brokers do;
//! an ApiVersions of a newer version is answered with the versions spoken.

use std::sync::Arc;

use bytes::Bytes;
use syncline_proto::{frame, pb, API_VERSION};
use tokio::sync::{mpsc, oneshot};
use tokio_util::codec::FramedRead;
use tokio_util::sync::CancellationToken;

use super::connection::{next_frame, sasl_step, Accepted, Reading};
use super::dispatch::Dispatch;
use super::limits::RequestLimits;
use crate::auth::SaslState;
use crate::responder::{Backlog, ConnectionState, Held, KafkaReply, Responder};
use syncline_kafka::codec;
use syncline_kafka::translate::{self, Route};

/// What the writer sends next: a response in request order (empty bytes close
/// the connection), with what it holds until written.
type Slot = oneshot::Receiver<(Bytes, Held)>;

/// Queues a response the listener makes itself, in its place in the order
/// (its bytes count against the connection's unwritten ones); false if the
/// writer is gone.
fn answer_now(tx: &mpsc::UnboundedSender<Slot>, conn: &ConnectionState, answer: Bytes) -> bool {
    let (slot_tx, slot) = oneshot::channel();
    let held = Held::answer(conn, answer.len());
    let _ = slot_tx.send((answer, held));
    tx.send(slot).is_ok()
}

/// Serves one connection of a Kafka listener.
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
    let (read_half, write_half) = tokio::io::split(stream);
    let (tx, mut rx) = mpsc::unbounded_channel::<Slot>();
    let writer = tokio::spawn(async move {
        let mut write_half = write_half;
        let mut frames = Vec::with_capacity(1);
        while let Some(slot) = rx.recv().await {
            // A request answered with nothing (acks=0) has its slot dropped.
            let Ok((bytes, held)) = slot.await else {
                continue;
            };
            if bytes.is_empty() {
                break;
            }
            if frame::write_queued(&mut write_half, &mut frames, bytes, || None)
                .await
                .is_err()
            {
                break;
            }
            drop(held);
        }
    });
    let close = shutdown.child_token();
    let backlog = Backlog::new(config.connection_bounds.max_unwritten_bytes);
    let conn = ConnectionState::kafka(
        listener,
        &peer,
        protocol,
        certificate,
        close.clone(),
        backlog,
    );
    let limits = RequestLimits::new(config);
    let reading = Reading::new(config);
    let mut sasl = SaslState::default();
    let mut frames = FramedRead::new(read_half, frame::codec(config.socket_request_max_bytes));
    loop {
        let Some(bytes) = next_frame(&mut frames, &conn, &reading, &*broker).await else {
            break;
        };
        let frame_len = bytes.len();
        let decoded = match codec::decode(bytes) {
            Ok(d) => d,
            Err(codec::Refused::Answer(answer)) => {
                if !answer_now(&tx, &conn, answer) {
                    break;
                }
                continue;
            }
            Err(codec::Refused::Close(why)) => {
                tracing::warn!(%peer, why, "closing a Kafka connection");
                break;
            }
        };
        let correlation_id = decoded.header.correlation_id;
        let client_id = decoded
            .header
            .client_id
            .as_ref()
            .map(|c| c.to_string())
            .unwrap_or_default();
        let (body, reply) = match translate::route(decoded) {
            Route::Answer(answer) => {
                if !answer_now(&tx, &conn, answer) {
                    break;
                }
                continue;
            }
            Route::Broker { body, reply } => (body, reply),
        };
        if let body @ (pb::request::Body::SaslHandshake(_)
        | pb::request::Body::SaslAuthenticate(_)) = body
        {
            let step = sasl_step(&conn, &broker, &mut sasl, body).await;
            if !answer_now(&tx, &conn, reply(step.response)) || step.close {
                break;
            }
            continue;
        }
        if !conn.admits_unauthenticated(Some(&body)) {
            // Kafka's brokers close such a connection without an answer.
            broker.metrics().authentication_failures.inc();
            tracing::debug!(%peer, "closing an unauthenticated Kafka connection on a SASL listener");
            break;
        }
        let muted = &broker.metrics().connections_muted;
        let Some((permit, reserved)) = limits.admit(config, Some(&body), &shutdown, muted).await
        else {
            break;
        };
        let api = Some(broker.metrics().api(&body, frame_len));
        let (slot_tx, slot) = oneshot::channel();
        if tx.send(slot).is_err() {
            break;
        }
        let responder = Responder::for_kafka(
            conn.clone(),
            api,
            permit,
            reserved,
            KafkaReply {
                translate: reply,
                slot: slot_tx,
            },
        );
        let request = pb::Request {
            correlation_id,
            api_version: API_VERSION,
            client_id,
            body: Some(body),
        };
        super::dispatch::serve(&broker, request, responder).await;
    }
    conn.cancel_pending();
    drop(conn);
    drop(tx);
    if shutdown.is_cancelled() {
        writer.abort();
    }
}
