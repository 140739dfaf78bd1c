//! The listeners: accepts connections, within the connection limits, and
//! hands each to its protocol's connection loop.

use std::sync::Arc;

use tokio_util::sync::CancellationToken;

use super::connection::{secure, Accepted};
use super::dispatch::Dispatch;
use crate::config::SecurityProtocol;
use crate::net::Listener;

/// Accepts connections until `shutdown` fires.
/// `kafka`: the listener speaks Kafka's protocol (`kafka_listeners`).
pub(crate) async fn serve(
    mut listener: Box<dyn Listener>,
    name: Arc<str>,
    kafka: bool,
    protocol: SecurityProtocol,
    broker: Arc<dyn Dispatch>,
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
                            secure(stream, &peer, &name, protocol, &*broker).await
                        else {
                            return;
                        };
                        let accepted = Accepted { stream, peer, listener: name, protocol, certificate };
                        if kafka {
                            super::kafka::connection(accepted, broker, shutdown).await;
                        } else {
                            super::syncline::connection(accepted, broker, shutdown).await;
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
