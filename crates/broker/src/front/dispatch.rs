//! What the front end asks of the broker behind it: the one seam between
//! the listeners and the rest. The broker (`broker.rs`) implements it; the
//! front end never names the broker's parts beyond these.

use std::sync::Arc;

use syncline_proto::pb;

use super::limits::{ConnectionLimits, HeavyWork};
use crate::auth::{BrokerAuth, UserConnections};
use crate::config::BrokerConfig;
use crate::control::metadata_cache::MetadataCache;
use crate::metrics::BrokerMetrics;
use crate::responder::Responder;

/// The broker as its listeners see it.
pub(crate) trait Dispatch: Send + Sync + 'static {
    /// Serves one request; its answer goes to `responder`.
    fn handle(self: Arc<Self>, request: pb::Request, responder: Responder);
    /// The broker's configuration.
    fn config(&self) -> &BrokerConfig;
    /// Open connections against their limits.
    fn connections(&self) -> &Arc<ConnectionLimits>;
    /// Where requests' CPU-heavy work runs.
    fn heavy_work(&self) -> &HeavyWork;
    /// This broker's TLS and credentials.
    fn auth(&self) -> &BrokerAuth;
    /// The authenticated users' connections (closed when a user is deleted).
    fn user_connections(&self) -> &UserConnections;
    /// The cluster metadata (the users a login checks against).
    fn metadata(&self) -> &MetadataCache;
    /// The broker's metrics.
    fn metrics(&self) -> &BrokerMetrics;
    /// The metrics, for a task that must not keep the broker alive.
    fn shared_metrics(&self) -> Arc<BrokerMetrics>;
    /// The metrics in Prometheus' text format (`GET /metrics`).
    fn scrape_metrics(&self) -> String;
}

/// Serves one request as [`Dispatch::handle`] does, heavy work
/// ([`super::limits::is_heavy`]) off the I/O runtime; returns once it was
/// taken in (an acks=all produce may still wait for its answer).
pub(crate) async fn serve(broker: &Arc<dyn Dispatch>, request: pb::Request, responder: Responder) {
    if request.body.as_ref().is_some_and(super::limits::is_heavy) {
        let serving = broker.clone();
        broker
            .heavy_work()
            .run(move || serving.handle(request, responder))
            .await;
    } else {
        broker.clone().handle(request, responder);
        broker.heavy_work().next_turn().await;
    }
}
