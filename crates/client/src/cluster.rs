//! What admin, producer and consumer share: the configuration, one connection per
//! broker (remade when it closes), and the metadata cache with its refresh.

use std::collections::HashMap;
use std::sync::Arc;
use std::time::Duration;

use parking_lot::Mutex;
use syncline_proto::{pb, ErrorCode};
use tokio::time::Instant;

use crate::config::ClientConfig;
use crate::connection::Connection;
use crate::connector::Connector;
use crate::error::ClientError;
use crate::metadata::Metadata;

/// Takes the expected variant out of a response body.
macro_rules! expect_body {
    ($body:expr, $variant:ident) => {
        match $body {
            syncline_proto::pb::response::Body::$variant(r) => Ok(r),
            _ => Err($crate::error::ClientError::UnexpectedResponse(stringify!(
                $variant
            ))),
        }
    };
}
pub(crate) use expect_body;

/// A broker's connection slot. Callers that find it empty connect each on their
/// own (see [`Cluster::broker_connection`]): the producer's sender drains no
/// more for a broker while one of its requests is connecting, so that its
/// requests are written in the order they were drained.
type Slot = Arc<tokio::sync::Mutex<Option<Connection>>>;

/// Connections and metadata for one client.
#[derive(Debug)]
pub(crate) struct Cluster {
    pub(crate) config: ClientConfig,
    /// TCP, TLS and SASL as the configuration says; made once.
    connector: Connector,
    metadata: Mutex<Metadata>,
    brokers: Mutex<HashMap<i32, Slot>>,
    /// Connection to whichever bootstrap server answered last.
    bootstrap: tokio::sync::Mutex<Option<Connection>>,
}

impl Cluster {
    /// A client for this configuration; connects lazily.
    pub(crate) fn new(config: ClientConfig) -> Result<Arc<Cluster>, ClientError> {
        let connector = Connector::new(&config)?;
        Ok(Arc::new(Cluster {
            config,
            connector,
            metadata: Mutex::new(Metadata::default()),
            brokers: Mutex::new(HashMap::new()),
            bootstrap: tokio::sync::Mutex::new(None),
        }))
    }

    /// A new connection to `addr`: TCP, then TLS and SASL as configured.
    async fn open(&self, addr: &str) -> Result<Connection, ClientError> {
        self.connector.connect(addr).await
    }

    /// Reads the metadata cache.
    pub(crate) fn with_metadata<R>(&self, f: impl FnOnce(&Metadata) -> R) -> R {
        f(&self.metadata.lock())
    }

    /// Changes the metadata cache.
    pub(crate) fn with_metadata_mut<R>(&self, f: impl FnOnce(&mut Metadata) -> R) -> R {
        f(&mut self.metadata.lock())
    }

    /// The open connection to a broker, connecting if there is none.
    pub(crate) async fn broker_connection(&self, id: i32) -> Result<Connection, ClientError> {
        let addr = self
            .with_metadata(|m| m.brokers.get(&id).map(|b| b.address()))
            .ok_or(ClientError::UnknownBroker(id))?;
        let slot = self.brokers.lock().entry(id).or_default().clone();
        let usable = |c: &Option<Connection>| {
            c.as_ref()
                .filter(|c| !c.is_closed() && c.peer() == addr)
                .cloned()
        };
        if let Some(conn) = usable(&*slot.lock().await) {
            return Ok(conn);
        }
        // Connect without holding the slot: a caller's future may stop being
        // polled while it connects (a consumer's fetch left in flight when its
        // poll returns), and a slot held by it would block every other request
        // to the broker for good. Two racing connects keep the first stored.
        let conn = self.open(&addr).await?;
        let mut slot = slot.lock().await;
        if let Some(stored) = usable(&slot) {
            conn.close();
            return Ok(stored);
        }
        *slot = Some(conn.clone());
        Ok(conn)
    }

    /// The open connection to broker `id` at `addr`, if there is one; never
    /// waits (the producer's sender asks while it drains).
    pub(crate) fn open_connection(&self, id: i32, addr: &str) -> Option<Connection> {
        let slot = self.brokers.lock().get(&id)?.clone();
        let stored = slot.try_lock().ok()?;
        stored
            .as_ref()
            .filter(|c| !c.is_closed() && c.peer() == addr)
            .cloned()
    }

    /// Uses `conn` for broker `id` (tests: a fake peer over an in-memory stream).
    #[cfg(test)]
    pub(crate) fn set_connection(&self, id: i32, conn: Connection) {
        self.brokers
            .lock()
            .insert(id, Arc::new(tokio::sync::Mutex::new(Some(conn))));
    }

    /// A connection to any broker: an open one if there is one, else the known
    /// brokers, else the bootstrap servers, in order.
    pub(crate) async fn any_connection(&self) -> Result<Connection, ClientError> {
        let open = {
            let brokers = self.brokers.lock();
            brokers.values().find_map(|slot| {
                slot.try_lock()
                    .ok()
                    .and_then(|c| c.as_ref().filter(|c| !c.is_closed()).cloned())
            })
        };
        if let Some(conn) = open {
            return Ok(conn);
        }
        let mut bootstrap = self.bootstrap.lock().await;
        if let Some(conn) = bootstrap.as_ref().filter(|c| !c.is_closed()) {
            return Ok(conn.clone());
        }
        let known: Vec<i32> = self.with_metadata(|m| m.brokers.keys().copied().collect());
        let mut tried = Vec::new();
        let mut last = None;
        for id in known {
            match self.broker_connection(id).await {
                Ok(conn) => return Ok(conn),
                Err(e) => {
                    tracing::debug!(broker = id, error = %e, "broker unreachable");
                    tried.push(format!("broker {id}"));
                    last = Some(e);
                }
            }
        }
        for addr in &self.config.bootstrap_servers {
            match self.open(addr).await {
                Ok(conn) => {
                    *bootstrap = Some(conn.clone());
                    return Ok(conn);
                }
                Err(e) => {
                    tracing::debug!(server = %addr, error = %e, "bootstrap server unreachable");
                    tried.push(addr.clone());
                    last = Some(e);
                }
            }
        }
        let last = last.unwrap_or_else(|| ClientError::Config("no bootstrap servers".into()));
        if tried.len() == 1 {
            return Err(last);
        }
        Err(ClientError::Unreachable {
            servers: tried.join(", "),
            last: Box::new(last),
        })
    }

    /// Sends on `conn`, giving up after `request_timeout_ms`. A broker that does not
    /// answer in time may be frozen (a long pause, a black-holed network) with its
    /// socket still open: the connection is closed, as Kafka's client does, so the
    /// next request (a metadata refresh above all) goes to another broker or to a
    /// fresh connection instead of waiting behind it again.
    pub(crate) async fn send_on(
        &self,
        conn: &Connection,
        body: pb::request::Body,
    ) -> Result<pb::response::Body, ClientError> {
        let timeout_ms = self.config.request_timeout_ms;
        tokio::time::timeout(Duration::from_millis(timeout_ms), conn.send(body))
            .await
            .map_err(|_| {
                conn.close();
                ClientError::Timeout(timeout_ms)
            })?
    }

    /// As [`Cluster::send_to`], waiting up to `timeout` for the answer (a
    /// JoinGroup is held by the coordinator for as long as a rebalance takes).
    pub(crate) async fn send_to_within(
        &self,
        broker: i32,
        body: pb::request::Body,
        timeout: Duration,
    ) -> Result<pb::response::Body, ClientError> {
        let conn = self.known_broker_connection(broker).await?;
        tokio::time::timeout(timeout, conn.send(body))
            .await
            .map_err(|_| {
                conn.close();
                ClientError::Timeout(timeout.as_millis() as u64)
            })?
    }

    /// A connection to broker `id`, refreshing the metadata first if it does
    /// not know the broker yet.
    pub(crate) async fn known_broker_connection(&self, id: i32) -> Result<Connection, ClientError> {
        match self.broker_connection(id).await {
            Err(ClientError::UnknownBroker(_)) => {
                self.refresh_metadata(vec![]).await?;
                self.broker_connection(id).await
            }
            other => other,
        }
    }

    /// Sends to a broker by id (the metadata is refreshed first if it does not
    /// know the broker yet: a coordinator another broker named, say).
    pub(crate) async fn send_to(
        &self,
        broker: i32,
        body: pb::request::Body,
    ) -> Result<pb::response::Body, ClientError> {
        let conn = self.known_broker_connection(broker).await?;
        self.send_on(&conn, body).await
    }

    /// Sends to any broker, trying a second one if the first cannot be reached.
    pub(crate) async fn send_any(
        &self,
        body: pb::request::Body,
    ) -> Result<pb::response::Body, ClientError> {
        let conn = self.any_connection().await?;
        match self.send_on(&conn, body.clone()).await {
            Err(e) if e.is_connectivity() => {
                let conn = self.any_connection().await?;
                self.send_on(&conn, body).await
            }
            other => other,
        }
    }

    /// Asks any broker for metadata of `topics` (empty: every topic) and applies it.
    pub(crate) async fn refresh_metadata(
        &self,
        topics: Vec<String>,
    ) -> Result<pb::MetadataResponse, ClientError> {
        let body = self
            .send_any(pb::request::Body::Metadata(pb::MetadataRequest {
                topics,
                ..Default::default()
            }))
            .await?;
        let response = expect_body!(body, Metadata)?;
        self.with_metadata_mut(|m| m.update(&response, Instant::now()));
        Ok(response)
    }

    /// Refreshes the metadata of `topic` until it has partitions, waiting
    /// `retry_backoff_ms` (doubling) between tries, until `deadline`. Covers a
    /// topic created a moment ago that not every broker knows yet.
    pub(crate) async fn wait_for_topic(
        &self,
        topic: &str,
        deadline: Instant,
    ) -> Result<usize, ClientError> {
        if let Some(n) = self.with_metadata(|m| m.partition_count(topic)) {
            return Ok(n);
        }
        let backoff = self.config.retry_backoff();
        let mut failures = 0;
        loop {
            let outcome = self.refresh_metadata(vec![topic.to_string()]).await;
            let err = match outcome {
                Ok(response) => {
                    if let Some(n) = self.with_metadata(|m| m.partition_count(topic)) {
                        return Ok(n);
                    }
                    let code = response
                        .topics
                        .iter()
                        .find(|t| t.name == topic)
                        .map(|t| ErrorCode::from_wire(t.error_code))
                        .unwrap_or(ErrorCode::UnknownTopicOrPartition);
                    match code {
                        ErrorCode::UnknownTopicOrPartition => {
                            ClientError::UnknownTopic(topic.into())
                        }
                        code if code.is_retriable() || code == ErrorCode::None => {
                            ClientError::Topic {
                                topic: topic.into(),
                                code: if code == ErrorCode::None {
                                    ErrorCode::LeaderNotAvailable
                                } else {
                                    code
                                },
                                message: String::new(),
                            }
                        }
                        code => {
                            return Err(ClientError::Topic {
                                topic: topic.into(),
                                code,
                                message: String::new(),
                            })
                        }
                    }
                }
                Err(e) if e.is_retriable() => e,
                Err(e) => return Err(e),
            };
            let wake = Instant::now() + backoff.delay(failures);
            failures += 1;
            if wake >= deadline {
                return Err(err);
            }
            tracing::debug!(topic, error = %err, "waiting for topic metadata");
            tokio::time::sleep_until(wake).await;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A connect left unfinished by a future nobody polls any more (a
    /// consumer's fetch in flight when its poll returned) does not block the
    /// next request to that broker: it connects on its own.
    #[tokio::test(start_paused = true)]
    async fn a_connect_nobody_polls_blocks_no_other_request_to_the_broker() {
        let (cluster, _peer) = crate::testing::cluster_with_peer(ClientConfig::new("b1:9092"), 1);
        cluster.brokers.lock().clear();
        let dials = Arc::new(std::sync::atomic::AtomicUsize::new(0));
        let counted = dials.clone();
        let dialer: crate::dial::Dialer = Arc::new(move |_addr| {
            let first = counted.fetch_add(1, std::sync::atomic::Ordering::SeqCst) == 0;
            Box::pin(async move {
                if first {
                    // Never answers (a SYN into a black hole).
                    std::future::pending::<()>().await;
                }
                let (stream, _far) = tokio::io::duplex(64);
                std::mem::forget(_far);
                Ok(Box::new(stream) as crate::dial::BoxStream)
            })
        });
        crate::dial::set_thread_dialer(Some(dialer));
        let mut stuck = Box::pin(cluster.broker_connection(1));
        assert!(
            futures::poll!(stuck.as_mut()).is_pending(),
            "the first connect hangs"
        );
        let next = tokio::time::timeout(Duration::from_secs(1), cluster.broker_connection(1)).await;
        crate::dial::set_thread_dialer(None);
        assert!(
            matches!(next, Ok(Ok(_))),
            "the second request waited behind the first connect: {next:?}"
        );
        assert_eq!(dials.load(std::sync::atomic::Ordering::SeqCst), 2);
    }

    #[tokio::test(start_paused = true)]
    async fn a_request_timeout_closes_the_connection() {
        let mut config = ClientConfig::new("127.0.0.1:1");
        config.request_timeout_ms = 1_000;
        let (cluster, mut peer) = crate::testing::cluster_with_peer(config, 1);
        let conn = cluster.broker_connection(1).await.unwrap();
        let body = pb::request::Body::Metadata(pb::MetadataRequest::default());
        // The peer takes the request and never answers: a frozen broker.
        let (result, _request) = tokio::join!(cluster.send_on(&conn, body), peer.recv());
        assert!(
            matches!(result, Err(ClientError::Timeout(1_000))),
            "{result:?}"
        );
        assert!(conn.is_closed());
    }

    #[tokio::test]
    async fn unreachable_bootstrap_names_the_address() {
        // Port 1 on loopback: nothing listens there.
        let mut config = ClientConfig::new("127.0.0.1:1");
        config.connect_timeout_ms = 2_000;
        let cluster = Cluster::new(config).unwrap();
        let err = cluster.any_connection().await.unwrap_err();
        assert!(err.is_connectivity(), "{err:?}");
        assert!(err.to_string().contains("127.0.0.1:1"), "{err}");
    }
}
