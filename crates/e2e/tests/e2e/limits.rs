//! What one client can cost a broker is bounded: connections beyond
//! `max_connections` are closed on accept without harm to the others, and a
//! client that asks for large fetches and stops reading its socket stops being
//! read, so the broker's memory does not grow with what it asked.

use std::time::Duration;

use syncline_e2e::checks::create_topic;
use syncline_e2e::client::produce;
use syncline_e2e::inprocess::TestCluster;
use syncline_e2e::{wait_for, Cluster};
use syncline_proto::frame;
use syncline_proto::pb::{self, request::Body};
use tokio::io::AsyncWriteExt;

const WAIT: Duration = Duration::from_secs(30);

fn rss_bytes(pid: u32) -> u64 {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap();
    let kb: u64 = status
        .lines()
        .find_map(|l| l.strip_prefix("VmRSS:"))
        .and_then(|v| v.trim().trim_end_matches("kB").trim().parse().ok())
        .expect("VmRSS in /proc/PID/status");
    kb * 1024
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_client_that_stops_reading_large_fetches_cannot_grow_the_broker() {
    const MIB: u64 = 1 << 20;
    const FETCH_MAX: u64 = 8 * MIB;
    const MESSAGE_MAX: u64 = MIB;
    const CONNECTIONS: u64 = 16;
    const FETCHES_EACH: usize = 20;
    let cluster = Cluster::start(
        1,
        &format!("fetch_max_bytes = {FETCH_MAX}\nmessage_max_bytes = {MESSAGE_MAX}\n"),
    )
    .await;
    create_topic(&cluster, "big", 1, 1, 1);
    let conn = cluster.connect(1).await.unwrap();
    // 24 MiB of records: more than one fetch response can hold.
    let value = vec![7u8; 4000];
    for _ in 0..48 {
        let batch: Vec<Vec<u8>> = (0..128).map(|_| value.clone()).collect();
        let r = produce(&conn, "big", 0, 1, &batch).await.unwrap();
        assert_eq!(r.error_code, 0, "{r:?}");
    }
    let pid = cluster.node(1).pid().expect("running");
    let before = rss_bytes(pid);

    // Each client pipelines fetches of everything from offset 0 (asking for
    // far more than the broker's cap) and never reads an answer.
    let fetch = pb::Request {
        correlation_id: 1,
        api_version: 0,
        client_id: "greedy".into(),
        body: Some(Body::Fetch(pb::FetchRequest {
            replica_id: -1,
            replica_epoch: -1,
            max_wait_ms: 0,
            min_bytes: 1,
            max_bytes: i32::MAX,
            session_id: 0,
            session_epoch: -1,
            topics: vec![pb::FetchTopic {
                topic: "big".into(),
                partitions: vec![pb::FetchPartition {
                    partition: 0,
                    fetch_offset: 0,
                    partition_max_bytes: i32::MAX,
                    ..Default::default()
                }],
            }],
            ..Default::default()
        })),
    };
    let mut greedy = Vec::new();
    for _ in 0..CONNECTIONS {
        let mut s = tokio::net::TcpStream::connect(cluster.node(1).addr())
            .await
            .unwrap();
        let frames = vec![frame::encode(&fetch); FETCHES_EACH];
        frame::write_frames(&mut s, &frames).await.unwrap();
        s.flush().await.unwrap();
        greedy.push(s);
    }
    // Wait until the broker has served what it will (its RSS settles), with a
    // deadline; then it must have answered no more than its budget allows.
    let mut peak = before;
    let mut last = 0;
    let deadline = tokio::time::Instant::now() + Duration::from_secs(10);
    while tokio::time::Instant::now() < deadline {
        let now = rss_bytes(pid);
        peak = peak.max(now);
        if now.abs_diff(last) < MIB && now > before {
            break;
        }
        last = now;
        tokio::time::sleep(Duration::from_millis(500)).await;
    }
    let grown = peak.saturating_sub(before);
    // Without the budget each connection would hold FETCHES_EACH answers:
    // 16 x 20 x 8 MiB = 2.5 GiB.
    let bound = CONNECTIONS * (FETCH_MAX + MESSAGE_MAX) + 64 * MIB;
    println!(
        "{CONNECTIONS} clients x {FETCHES_EACH} unread fetches of up to {} MiB: broker RSS {} -> {} MiB (grew {} MiB; bound {} MiB)",
        FETCH_MAX / MIB,
        before / MIB,
        peak / MIB,
        grown / MIB,
        bound / MIB
    );
    assert!(grown <= bound, "broker RSS grew {} MiB", grown / MIB);
    // The broker still serves everyone else.
    let r = produce(&conn, "big", 0, 1, &[b"after".to_vec()])
        .await
        .unwrap();
    assert_eq!(r.error_code, 0);
    drop(greedy);
}

/// On the Kafka listener too, and for the answers the listener makes itself
/// (ApiVersions, answered before any login): a client that floods requests
/// and never reads is muted once its unwritten answers are over
/// `connection_max_unwritten_bytes`, and gets every answer, in order, when
/// it reads.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_kafka_client_that_floods_api_versions_without_reading_stops_being_read() {
    use tokio::io::AsyncReadExt;
    const SENT: i32 = 50_000;
    let cluster = Cluster::start(1, "connection_max_unwritten_bytes = 65536\n").await;
    // ApiVersions v0: api key 18, version 0, the correlation id, no client id.
    let mut flood = Vec::with_capacity(SENT as usize * 14);
    for correlation_id in 0..SENT {
        flood.extend_from_slice(&10u32.to_be_bytes());
        flood.extend_from_slice(&18i16.to_be_bytes());
        flood.extend_from_slice(&0i16.to_be_bytes());
        flood.extend_from_slice(&correlation_id.to_be_bytes());
        flood.extend_from_slice(&(-1i16).to_be_bytes());
    }
    // A small receive buffer: the kernel's buffers hold far less than the
    // answers asked for.
    let socket = tokio::net::TcpSocket::new_v4().unwrap();
    socket.set_recv_buffer_size(4096).unwrap();
    let s = socket
        .connect(cluster.node(1).kafka_addr().parse().unwrap())
        .await
        .unwrap();
    let (mut r, mut w) = s.into_split();
    let writer = tokio::spawn(async move {
        w.write_all(&flood).await.unwrap();
        w
    });
    wait_for("the flooding Kafka client muted", WAIT, || async {
        cluster
            .metric(1, "syncline_connections_muted")
            .unwrap_or(0.0)
            == 1.0
    })
    .await;
    for correlation_id in 0..SENT {
        let mut len = [0u8; 4];
        r.read_exact(&mut len).await.unwrap();
        let mut body = vec![0u8; u32::from_be_bytes(len) as usize];
        r.read_exact(&mut body).await.unwrap();
        assert_eq!(body[..4], correlation_id.to_be_bytes());
    }
    drop(writer.await.unwrap());
}

/// synclined raises its soft open-files limit to the hard one as it starts:
/// a broker holds a few descriptors per partition and per connection, and the
/// usual soft default (1,024) runs out at a few hundred partitions.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_broker_raises_its_open_files_limit() {
    use nix::sys::resource::{getrlimit, setrlimit, Resource};
    // The broker inherits a soft limit below the hard one (this process's,
    // for the start; nextest runs each test in a process of its own).
    let (soft, hard) = getrlimit(Resource::RLIMIT_NOFILE).unwrap();
    setrlimit(Resource::RLIMIT_NOFILE, 1024.min(hard - 1), hard).unwrap();
    let cluster = Cluster::start(1, "").await;
    setrlimit(Resource::RLIMIT_NOFILE, soft, hard).unwrap();
    let pid = cluster.node(1).pid().expect("running");
    let limits = std::fs::read_to_string(format!("/proc/{pid}/limits")).unwrap();
    let open_files = limits
        .lines()
        .find(|l| l.starts_with("Max open files"))
        .expect("a line for open files");
    let fields: Vec<&str> = open_files.split_whitespace().collect();
    // "Max open files  SOFT  HARD  files"
    assert_eq!(fields[3], fields[4], "{open_files}");
}

/// On a cluster inside the test process (`TestCluster`): part of the quick
/// tier (`scripts/test.sh --quick`).
mod in_process {
    use super::*;

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn ten_thousand_idle_connections_beyond_max_connections_are_refused_without_harm_to_the_others(
    ) {
        const MAX: usize = 200;
        const FLOOD: usize = 10_000;
        let cluster = TestCluster::start(1, &format!("max_connections = {MAX}\n")).await;
        cluster.create_topic("t", 1, 1, &[]).await;
        let client = cluster.connect(1).await;
        let addr = cluster.addrs[0].clone();
        let mut flood = Vec::with_capacity(FLOOD);
        for _ in 0..FLOOD {
            let s = tokio::time::timeout(
                Duration::from_secs(10),
                tokio::net::TcpStream::connect(&addr),
            )
            .await
            .expect("connect within 10 s")
            .expect("the kernel accepts the connection");
            flood.push(s);
        }
        wait_for(
            "every connection beyond the limit refused",
            WAIT,
            || async {
                cluster.metric(1, "syncline_connections_refused_total") as usize >= FLOOD - MAX
            },
        )
        .await;
        let open = cluster.metric(1, "syncline_connections") as usize;
        println!(
            "{FLOOD} idle connections against max_connections = {MAX}: {open} open, {} refused",
            cluster.metric(1, "syncline_connections_refused_total")
        );
        assert!(open <= MAX, "{open} connections open");
        // The connection made before the flood is served as before.
        let written = produce(&client, "t", 0, 1, &[b"still served".to_vec()])
            .await
            .unwrap();
        assert_eq!(written.error_code, 0, "{written:?}");
        // Once the flood is gone, its places are free again.
        drop(flood);
        wait_for("the flood's places to free", WAIT, || async {
            (cluster.metric(1, "syncline_connections") as usize) < MAX / 2
        })
        .await;
        let late = cluster.connect(1).await;
        assert_eq!(
            produce(&late, "t", 0, 1, &[b"late".to_vec()])
                .await
                .unwrap()
                .error_code,
            0
        );
    }

    /// Reads one answer frame of a syncline connection.
    async fn read_answer(r: &mut tokio::net::tcp::OwnedReadHalf) -> pb::Response {
        use tokio::io::AsyncReadExt;
        let mut len = [0u8; 4];
        r.read_exact(&mut len).await.unwrap();
        let mut body = vec![0u8; u32::from_be_bytes(len) as usize];
        r.read_exact(&mut body).await.unwrap();
        frame::decode_response(body.into()).unwrap()
    }

    /// A client that sends request after request and never reads its answers
    /// stops being read (the broker holds what it answered, not what it might
    /// be asked): once its answers not yet written are over
    /// `connection_max_unwritten_bytes`, and once `queued_max_requests` of
    /// them wait, each answer holding its request's place until written. When
    /// it reads, every answer comes, in order.
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn a_client_that_never_reads_its_answers_stops_being_read() {
        const SENT: i32 = 20_000;
        for (bound, extra) in [
            (
                "unwritten bytes",
                "queued_max_requests = 1000000\nconnection_max_unwritten_bytes = 65536\n",
            ),
            ("requests in flight", "queued_max_requests = 8\n"),
        ] {
            let cluster = TestCluster::start(1, extra).await;
            // Answers of a few KiB each, and a client socket with a small
            // receive buffer: what the kernel's buffers hold is far less than
            // what the client asks for (megabytes would otherwise fit there,
            // and the broker would never need to hold anything back).
            cluster.create_topic("t", 100, 1, &[]).await;
            let frames: Vec<_> = (0..SENT)
                .map(|correlation_id| {
                    frame::encode(&pb::Request {
                        correlation_id,
                        api_version: 0,
                        client_id: "deaf".into(),
                        body: Some(Body::Metadata(pb::MetadataRequest {
                            topics: vec!["t".into()],
                            ..Default::default()
                        })),
                    })
                })
                .collect();
            let socket = tokio::net::TcpSocket::new_v4().unwrap();
            socket.set_recv_buffer_size(4096).unwrap();
            let s = socket
                .connect(cluster.addrs[0].parse().unwrap())
                .await
                .unwrap();
            let (mut r, mut w) = s.into_split();
            let flood = tokio::spawn(async move {
                frame::write_frames(&mut w, &frames).await.unwrap();
                w
            });
            wait_for(
                &format!("the deaf client muted ({bound})"),
                WAIT,
                || async { cluster.metric(1, "syncline_connections_muted") == 1.0 },
            )
            .await;
            let served = cluster.metric(1, "syncline_requests_total{api=\"Metadata\"}");
            println!("{bound}: muted after serving {served} of {SENT} unread requests");
            assert!(served < SENT as f64, "{bound}: served all {served}");
            for correlation_id in 0..SENT {
                let answer = read_answer(&mut r).await;
                assert_eq!(answer.correlation_id, correlation_id, "{bound}");
            }
            drop(flood.await.unwrap());
            wait_for("the client unmuted", WAIT, || async {
                cluster.metric(1, "syncline_connections_muted") == 0.0
            })
            .await;
        }
    }

    /// A connection that neither sends a request nor is sent an answer for
    /// `connections_max_idle_ms` is closed; one that keeps asking is not.
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn an_idle_connection_is_closed_after_connections_max_idle_ms() {
        use tokio::io::AsyncReadExt;
        // The busy client asks every 100 ms: only a stall of the whole test
        // process for most of the idle time could make it look idle.
        let cluster = TestCluster::start(1, "connections_max_idle_ms = 2000\n").await;
        cluster.create_topic("t", 1, 1, &[]).await;
        let mut idle = tokio::net::TcpStream::connect(&cluster.addrs[0])
            .await
            .unwrap();
        let busy = cluster.connect(1).await;
        let started = tokio::time::Instant::now();
        // The busy client asks every 100 ms until the idle one is closed.
        let mut buf = [0u8; 1];
        let closed = idle.read(&mut buf);
        tokio::pin!(closed);
        loop {
            tokio::select! {
                read = &mut closed => {
                    assert_eq!(read.unwrap(), 0, "closed without an answer");
                    break;
                }
                _ = tokio::time::sleep(Duration::from_millis(100)) => {
                    let r = produce(&busy, "t", 0, 1, &[b"busy".to_vec()]).await.unwrap();
                    assert_eq!(r.error_code, 0);
                }
            }
            assert!(started.elapsed() < WAIT, "the idle connection stayed open");
        }
        assert!(started.elapsed() >= Duration::from_millis(2000));
        // (The broker's own heartbeats, every 2 s, may have been cut too.)
        assert!(cluster.metric(1, "syncline_connections_expired_total") >= 1.0);
        // The busy one, far older than the idle time by now, is still served.
        let r = produce(&busy, "t", 0, 1, &[b"still".to_vec()])
            .await
            .unwrap();
        assert_eq!(r.error_code, 0);
    }

    /// Whether the broker closes a raw connection that sends `bytes` (and
    /// then nothing), within `within`.
    async fn closed_within(addr: &str, bytes: &[u8], within: Duration) -> bool {
        use tokio::io::AsyncReadExt;
        let mut s = tokio::net::TcpStream::connect(addr).await.unwrap();
        s.write_all(bytes).await.unwrap();
        let mut buf = [0u8; 64];
        match tokio::time::timeout(within, s.read(&mut buf)).await {
            Ok(Ok(0)) | Ok(Err(_)) => true,
            Ok(Ok(n)) => panic!("answered {n} bytes"),
            Err(_) => false,
        }
    }

    /// A broker whose one listener is SASL_PLAINTEXT, with `extra` TOML
    /// lines, started without waiting for it to serve clients (the harness's
    /// clients do not log in); its address and the broker's metric `series`.
    struct SaslBroker {
        handle: syncline_broker::BrokerHandle,
        addr: String,
        _dir: tempfile::TempDir,
    }

    impl SaslBroker {
        async fn start(extra: &str) -> SaslBroker {
            use syncline_broker::net::Network as _;
            let dir = tempfile::tempdir().unwrap();
            let listener = syncline_broker::net::Tcp.bind("127.0.0.1:0").await.unwrap();
            let addr = listener.local_addr().unwrap().to_string();
            let text = syncline_e2e::inprocess::config_text(
                1,
                &addr,
                std::slice::from_ref(&addr),
                dir.path(),
                &format!("listener_security_protocol_map = \"PLAINTEXT:SASL_PLAINTEXT\"\n{extra}"),
                None,
            );
            let config = syncline_broker::BrokerConfig::parse(&text).unwrap();
            let handle = syncline_broker::start_on(
                config,
                std::sync::Arc::new(syncline_broker::net::Tcp),
                vec![listener],
            )
            .await
            .unwrap();
            SaslBroker {
                handle,
                addr,
                _dir: dir,
            }
        }

        fn metric(&self, series: &str) -> f64 {
            syncline_e2e::parse_metrics(&self.handle.broker().metrics().encode())
                .unwrap()
                .into_iter()
                .find(|(n, _)| n == series)
                .map_or(0.0, |(_, v)| v)
        }
    }

    /// On a SASL listener, what a connection that has not authenticated may
    /// cost: a frame of at most `sasl_server_max_receive_size` (Kafka's 512 KiB
    /// by default; a larger one is refused from its length, before its body is
    /// read), and `sasl_authentication_timeout_ms` of the broker's time.
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn an_unauthenticated_connection_gets_a_small_frame_and_a_deadline() {
        let broker = SaslBroker::start("").await;
        // 600 KiB announced, nothing sent after it: refused at once (it would
        // otherwise wait for the body until the 30 s deadline).
        let too_large = (600u32 << 10).to_be_bytes();
        assert!(closed_within(&broker.addr, &too_large, Duration::from_secs(10)).await);
        drop(broker);

        let broker = SaslBroker::start("sasl_authentication_timeout_ms = 300\n").await;
        let started = tokio::time::Instant::now();
        assert!(closed_within(&broker.addr, &[], WAIT).await);
        assert!(started.elapsed() >= Duration::from_millis(300));
        assert!(broker.metric("syncline_connections_expired_total") >= 1.0);
    }

    /// Sends `request` on a fresh connection and waits for its answer; how
    /// long that took.
    async fn timed_request(addr: &str, request: &pb::Request) -> Duration {
        let started = tokio::time::Instant::now();
        let s = tokio::net::TcpStream::connect(addr).await.unwrap();
        let (mut r, mut w) = s.into_split();
        frame::write_frames(&mut w, &[frame::encode(request)])
            .await
            .unwrap();
        let answer = read_answer(&mut r).await;
        assert!(
            matches!(answer.body, Some(pb::response::Body::Produce(_))),
            "{answer:?}"
        );
        started.elapsed()
    }

    /// Produce requests whose batches take long to decompress (each holds
    /// 32 MiB of records packed into a few KiB) are served off the I/O
    /// runtime: while clients send them, another client's small produce is
    /// answered in a fraction of the time one of them takes (measured alone
    /// in the same run), where on the runtime's workers it would wait behind
    /// them.
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn heavy_produce_requests_do_not_stall_other_clients() {
        const HOSTILE: usize = 4;
        let cluster = TestCluster::start(1, "").await;
        cluster.create_topic("t", 1, 1, &[]).await;
        cluster.create_topic("packed", 1, 1, &[]).await;
        let mut packed = syncline_proto::batch::BatchBuilder::new(0);
        packed.push(0, None, Some(&vec![0u8; 32 << 20]), &[]);
        let packed = packed.finish_with(syncline_proto::compression::Compression::Zstd);
        let request = |batches: usize| pb::Request {
            correlation_id: 1,
            api_version: 0,
            client_id: "heavy".into(),
            body: Some(syncline_e2e::inprocess::produce_request(
                "packed",
                0,
                1,
                packed.repeat(batches).into(),
            )),
        };
        // Enough batches that one request takes a second or more here.
        let addr = cluster.addrs[0].clone();
        let mut batches = 2;
        let alone = loop {
            let took = timed_request(&addr, &request(batches)).await;
            if took >= Duration::from_secs(1) || batches >= 1024 {
                break took;
            }
            batches *= 2;
        };
        println!("one request of {batches} packed batches alone: {alone:?}");
        assert!(alone >= Duration::from_secs(1), "{alone:?}");

        let heavy: Vec<_> = (0..HOSTILE)
            .map(|_| {
                let (addr, request) = (addr.clone(), request(batches));
                tokio::spawn(async move { timed_request(&addr, &request).await })
            })
            .collect();
        let client = cluster.connect(1).await;
        let mut slowest = Duration::ZERO;
        while !heavy.iter().all(|h| h.is_finished()) {
            let started = tokio::time::Instant::now();
            let r = produce(&client, "t", 0, 1, &[b"light".to_vec()])
                .await
                .unwrap();
            assert_eq!(r.error_code, 0);
            slowest = slowest.max(started.elapsed());
        }
        for h in heavy {
            h.await.unwrap();
        }
        println!(
            "{HOSTILE} such requests at once: the slowest small produce beside them took {slowest:?}"
        );
        assert!(slowest < alone / 4, "{slowest:?} against {alone:?} alone");
    }
}
