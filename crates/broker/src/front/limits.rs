//! One connection's bounds, whatever its protocol: requests in flight and
//! the bytes of its fetch responses ([`RequestLimits`]); and the broker's
//! open connections, overall and per client address ([`ConnectionLimits`]).

use std::sync::Arc;

use parking_lot::Mutex;
use syncline_proto::pb;
use tokio::sync::{OwnedSemaphorePermit, Semaphore};
use tokio_util::sync::CancellationToken;

/// One connection's bounds, whatever its protocol: requests in flight
/// (`queued_max_requests`, each holding its place until its answer is
/// written) and the bytes its fetch responses may hold.
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
        muted: &prometheus_client::metrics::gauge::Gauge,
    ) -> Option<(OwnedSemaphorePermit, Option<OwnedSemaphorePermit>)> {
        let permit = match self.in_flight.clone().try_acquire_owned() {
            Ok(p) => p,
            Err(_) => {
                // Muted: the client does not read its answers (they hold
                // their places until written).
                let _muted = GaugeGuard::inc(muted);
                tokio::select! {
                    _ = shutdown.cancelled() => return None,
                    p = self.in_flight.clone().acquire_owned() => p.expect("semaphore is never closed"),
                }
            }
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

/// CPU-heavy work a request brings, run on the blocking pool instead of the
/// I/O runtime's workers (which also carry the Raft heartbeats, replication
/// and every other connection), at most one per core at a time: a produce
/// whose batches are compressed or large (each batch is decompressed to be
/// checked, up to 64 MiB, and recompressed for a topic's `compression.type`),
/// a SASL login (SCRAM and PLAIN stretch the password). The connection waits
/// for it before reading on, so its requests keep their order.
#[derive(Debug)]
pub(crate) struct HeavyWork {
    permits: Arc<Semaphore>,
    /// False: run inline (`heavy_work_off_runtime`, the simulation's).
    off_runtime: bool,
}

impl HeavyWork {
    pub(crate) fn new(config: &crate::config::BrokerConfig) -> HeavyWork {
        let cores = std::thread::available_parallelism().map_or(2, |n| n.get());
        HeavyWork {
            permits: Arc::new(Semaphore::new(cores)),
            off_runtime: config.heavy_work_off_runtime,
        }
    }

    /// Runs `work` on the blocking pool once a core is free for it.
    pub(crate) async fn run<T: Send + 'static>(
        &self,
        work: impl FnOnce() -> T + Send + 'static,
    ) -> T {
        if !self.off_runtime {
            return work();
        }
        let _core = self.permits.acquire().await.expect("never closed");
        match tokio::task::spawn_blocking(work).await {
            Ok(done) => done,
            Err(e) => std::panic::resume_unwind(e.into_panic()),
        }
    }
}

/// Whether serving `body` is heavy work ([`HeavyWork`]): a produce with a
/// compressed batch, or with a megabyte of records or more.
pub(crate) fn is_heavy(body: &pb::request::Body) -> bool {
    const LARGE: usize = 1 << 20;
    let pb::request::Body::Produce(produce) = body else {
        return false;
    };
    let mut bytes = 0;
    for p in produce.topics.iter().flat_map(|t| &t.partitions) {
        bytes += p.records.len();
        let compressed = syncline_proto::batch::split(&p.records)
            .any(|b| b.is_ok_and(|(header, _)| header.compression() != 0));
        if compressed || bytes >= LARGE {
            return true;
        }
    }
    false
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

/// Adds one to a gauge for as long as it lives.
pub(crate) struct GaugeGuard<'a>(&'a prometheus_client::metrics::gauge::Gauge);

impl<'a> GaugeGuard<'a> {
    pub(crate) fn inc(gauge: &'a prometheus_client::metrics::gauge::Gauge) -> GaugeGuard<'a> {
        gauge.inc();
        GaugeGuard(gauge)
    }
}

impl Drop for GaugeGuard<'_> {
    fn drop(&mut self) {
        self.0.dec();
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
