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

/// CPU-heavy work a request brings, run on threads of its own instead of the
/// I/O runtime's workers (which also carry the Raft heartbeats, replication
/// and every other connection), at most one per core at a time, and at a
/// lower scheduling priority (nice [`HEAVY_NICE`]): a produce whose batches
/// are compressed or large (each batch is decompressed to be checked, up to
/// 64 MiB, and recompressed for a topic's `compression.type`), a SASL login
/// (SCRAM and PLAIN stretch the password), a client request naming thousands
/// of partitions or names ([`is_heavy`]). When the cores are busy, the
/// runtime's threads run first: a flood of heavy requests slows the heavy
/// requests, not the light ones beside them. The connection waits for its
/// heavy request before reading on, so its requests keep their order.
#[derive(Debug)]
pub(crate) struct HeavyWork {
    permits: Arc<Semaphore>,
    /// Where the work goes: the threads, started at the first heavy request.
    threads: std::sync::OnceLock<std::sync::mpsc::SyncSender<HeavyJob>>,
    cores: usize,
    /// False: run inline (`heavy_work_off_runtime`, the simulation's).
    off_runtime: bool,
}

type HeavyJob = Box<dyn FnOnce() + Send>;

/// The heavy-work threads' niceness (the runtime's threads keep 0): when
/// both want a core, a nice-10 thread gets about a tenth of it.
pub(crate) const HEAVY_NICE: i32 = 10;

impl HeavyWork {
    pub(crate) fn new(config: &crate::config::BrokerConfig) -> HeavyWork {
        let cores = std::thread::available_parallelism().map_or(2, |n| n.get());
        HeavyWork {
            permits: Arc::new(Semaphore::new(cores)),
            threads: std::sync::OnceLock::new(),
            cores,
            off_runtime: config.heavy_work_off_runtime,
        }
    }

    /// Runs `work` on a heavy-work thread once a core is free for it.
    pub(crate) async fn run<T: Send + 'static>(
        &self,
        work: impl FnOnce() -> T + Send + 'static,
    ) -> T {
        if !self.off_runtime {
            return work();
        }
        let _core = self.permits.acquire().await.expect("never closed");
        let (done, result) = tokio::sync::oneshot::channel();
        let job: HeavyJob = Box::new(move || {
            let _ = done.send(std::panic::catch_unwind(std::panic::AssertUnwindSafe(work)));
        });
        self.threads
            .get_or_init(|| self.start_threads())
            .send(job)
            .expect("the heavy-work threads live as long as the broker");
        match result.await.expect("a heavy-work thread answers every job") {
            Ok(done) => done,
            Err(panic) => std::panic::resume_unwind(panic),
        }
    }

    /// After a request served inline, the other tasks' turn: a client that
    /// pipelines requests (or never reads its answers) would otherwise be
    /// served a whole scheduling budget's worth of them (a hundred or more)
    /// before any other connection on this worker. Not in the simulation
    /// (`heavy_work_off_runtime` false), whose schedules stay as they were.
    pub(crate) async fn next_turn(&self) {
        if self.off_runtime {
            tokio::task::yield_now().await;
        }
    }

    /// Starts one thread per core, each at [`HEAVY_NICE`] and inside the
    /// runtime (the work may spawn tasks and set timers); they end when the
    /// broker drops its `HeavyWork`.
    fn start_threads(&self) -> std::sync::mpsc::SyncSender<HeavyJob> {
        let (tx, rx) = std::sync::mpsc::sync_channel::<HeavyJob>(self.cores);
        let rx = Arc::new(Mutex::new(rx));
        let runtime = tokio::runtime::Handle::current();
        for i in 0..self.cores {
            let (rx, runtime) = (rx.clone(), runtime.clone());
            std::thread::Builder::new()
                .name(format!("syncline-heavy-{i}"))
                .spawn(move || {
                    lower_priority();
                    let _runtime = runtime.enter();
                    loop {
                        let job = rx.lock().recv();
                        match job {
                            Ok(job) => job(),
                            Err(_) => return,
                        }
                    }
                })
                .expect("a heavy-work thread starts");
        }
        tx
    }
}

/// Lowers this thread's scheduling priority to niceness [`HEAVY_NICE`] (a
/// thread already nicer keeps its own); where that is refused, the thread
/// runs at the runtime's priority (logged).
fn lower_priority() {
    use thread_priority::{set_current_thread_priority, ThreadPriority, ThreadPriorityValue};
    if thread_niceness().is_some_and(|nice| nice >= HEAVY_NICE) {
        return;
    }
    // The crate maps its values 0..=99 onto niceness 19..=-20.
    let value = ((19 - HEAVY_NICE) * 99 / 39) as u8;
    let priority = ThreadPriorityValue::try_from(value).expect("within 0..=99");
    if let Err(e) = set_current_thread_priority(ThreadPriority::Crossplatform(priority)) {
        tracing::warn!(error = ?e, "heavy work runs at the runtime's priority: lowering it was refused");
    }
}

/// This thread's niceness (field 19 of `/proc/thread-self/stat`).
fn thread_niceness() -> Option<i32> {
    let stat = std::fs::read_to_string("/proc/thread-self/stat").ok()?;
    // Fields from the third on follow the name's closing parenthesis.
    let after_name = stat.get(stat.rfind(')')? + 2..)?;
    after_name.split(' ').nth(16)?.parse().ok()
}

/// Whether serving `body` is heavy work ([`HeavyWork`]): a produce with a
/// compressed batch, or with a megabyte of records or more; a client's
/// request that names so much (topics, partitions, groups) that it encodes to
/// [`LARGE_CLIENT_REQUEST`] bytes or more (a fetch naming thousands of
/// partitions, a Metadata request repeating a name a hundred thousand
/// times): serving one costs milliseconds to tens of milliseconds of CPU,
/// which on the runtime's workers would hold back every other connection.
/// The brokers' own requests (replication, the controller quorum, its
/// announcements) are never heavy: they stay on the runtime.
pub(crate) fn is_heavy(body: &pb::request::Body) -> bool {
    use pb::request::Body;
    use prost::Message;
    const LARGE: usize = 1 << 20;
    match body {
        Body::Produce(produce) => {
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
        Body::Fetch(f) if f.replica_id < 0 => f.encoded_len() >= LARGE_CLIENT_REQUEST,
        Body::Metadata(m) => m.encoded_len() >= LARGE_CLIENT_REQUEST,
        Body::DescribeTopics(d) => d.encoded_len() >= LARGE_CLIENT_REQUEST,
        Body::DescribeConfigs(d) => d.encoded_len() >= LARGE_CLIENT_REQUEST,
        Body::DescribeGroups(d) => d.encoded_len() >= LARGE_CLIENT_REQUEST,
        Body::ListOffsets(l) => l.encoded_len() >= LARGE_CLIENT_REQUEST,
        Body::OffsetFetch(o) => o.encoded_len() >= LARGE_CLIENT_REQUEST,
        Body::OffsetCommit(o) => o.encoded_len() >= LARGE_CLIENT_REQUEST,
        _ => false,
    }
}

/// A client request that encodes to this many bytes or more is heavy work
/// ([`is_heavy`]): 64 KiB names about 2,000 partitions of a fetch, where an
/// ordinary consumer names tens to hundreds.
pub(crate) const LARGE_CLIENT_REQUEST: usize = 64 << 10;

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

    fn config(extra: &str) -> crate::config::BrokerConfig {
        crate::config::BrokerConfig::parse(&format!(
            "node_id = 1\nprocess_roles = \"broker,controller\"\nlog_dirs = \"/tmp/x/b\"\ncontroller_quorum_voters = \"1@127.0.0.1:9092\"\n{extra}"
        ))
        .unwrap()
    }

    fn niceness() -> i32 {
        thread_niceness().expect("/proc/thread-self/stat")
    }

    /// Heavy work runs on threads of its own at niceness HEAVY_NICE, inside
    /// the runtime (it may spawn), and a panic in it reaches the caller.
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn heavy_work_runs_at_a_lower_priority_on_threads_of_its_own() {
        let heavy = HeavyWork::new(&config(""));
        assert!(heavy.off_runtime);
        let runtime_nice = niceness();
        let (name, nice, spawned) = heavy
            .run(|| {
                let spawned = tokio::spawn(async { 7 });
                (
                    std::thread::current().name().map(str::to_string),
                    niceness(),
                    spawned,
                )
            })
            .await;
        assert_eq!(spawned.await.unwrap(), 7);
        assert!(name.unwrap().starts_with("syncline-heavy-"));
        assert_eq!(nice, runtime_nice.max(HEAVY_NICE));
        assert_eq!(
            niceness(),
            runtime_nice,
            "the runtime's threads keep theirs"
        );
        let panicked = tokio::spawn(async move { heavy.run(|| panic!("planted")).await });
        assert!(panicked.await.unwrap_err().is_panic());
    }

    #[test]
    fn large_client_requests_are_heavy_and_the_brokers_own_are_not() {
        use pb::request::Body;
        let names = |n: usize| (0..n).map(|i| format!("topic-{i:05}")).collect::<Vec<_>>();
        let metadata = |n| {
            Body::Metadata(pb::MetadataRequest {
                topics: names(n),
                ..Default::default()
            })
        };
        assert!(!is_heavy(&metadata(10)));
        assert!(is_heavy(&metadata(10_000)));
        let fetch = |replica_id, n: usize| {
            Body::Fetch(pb::FetchRequest {
                replica_id,
                topics: names(n)
                    .into_iter()
                    .map(|topic| pb::FetchTopic {
                        topic,
                        partitions: vec![pb::FetchPartition::default()],
                    })
                    .collect(),
                ..Default::default()
            })
        };
        assert!(!is_heavy(&fetch(-1, 100)));
        assert!(is_heavy(&fetch(-1, 10_000)));
        // A follower's fetch stays on the runtime, however many partitions.
        assert!(!is_heavy(&fetch(2, 10_000)));
    }
}
