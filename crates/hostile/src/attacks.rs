//! The attacks, each what any client the default config lets in can do, run
//! against every broker at once until told to stop. Each names the bound
//! that holds it (README, "Bounded work").

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use syncline_proto::batch::BatchBuilder;
use syncline_proto::compression::Compression;
use syncline_proto::frame;
use syncline_proto::pb::{self, request::Body};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;

/// A topic of many partitions, whose metadata answers are large.
pub(crate) const WIDE: &str = "wide";
/// Where the heavy produce requests go.
pub(crate) const PACKED: &str = "packed";
const REQUEST_TIMEOUT: Duration = Duration::from_secs(30);

/// One attack.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Attack {
    /// Fetch requests naming 20,000 topics each (was quadratic in the names).
    FetchManyTopics,
    /// Metadata and DescribeTopics naming a 300-partition topic 100,000 times
    /// (answered once per name before).
    RepeatedNames,
    /// Metadata requests sent without end, their answers never read
    /// (`connection_max_unwritten_bytes`, `queued_max_requests`).
    UnreadFlood,
    /// The same on the Kafka listener with ApiVersions.
    ApiVersionsFlood,
    /// Thousands of connections per broker, idle or holding half a frame
    /// header (`max_connections`, `connections_max_idle_ms`).
    ConnectionFlood,
    /// Frames of 64 MiB of garbage, one after the other on several
    /// connections (`socket_request_max_bytes`).
    LargeFrames,
    /// Produce requests whose zstd batches each unpack to 32 MiB (heavy work
    /// off the I/O runtime, one per core).
    HeavyProduce,
    /// A new fetch session with every request (the session cache's eviction
    /// keeps followers' sessions).
    FetchSessions,
    /// Metadata requests auto-creating 1,000 new topics each
    /// (`auto_create_topics_max_partitions_per_request`, `..._max_cluster_partitions`).
    AutoCreate,
}

impl Attack {
    pub(crate) const ALL: [Attack; 9] = [
        Attack::FetchManyTopics,
        Attack::RepeatedNames,
        Attack::UnreadFlood,
        Attack::ApiVersionsFlood,
        Attack::ConnectionFlood,
        Attack::LargeFrames,
        Attack::HeavyProduce,
        Attack::FetchSessions,
        Attack::AutoCreate,
    ];

    pub(crate) fn name(self) -> &'static str {
        match self {
            Attack::FetchManyTopics => "fetch-many-topics",
            Attack::RepeatedNames => "repeated-names",
            Attack::UnreadFlood => "unread-flood",
            Attack::ApiVersionsFlood => "api-versions-flood",
            Attack::ConnectionFlood => "connection-flood",
            Attack::LargeFrames => "large-frames",
            Attack::HeavyProduce => "heavy-produce",
            Attack::FetchSessions => "fetch-sessions",
            Attack::AutoCreate => "auto-create",
        }
    }

    pub(crate) fn parse(name: &str) -> Option<Attack> {
        Attack::ALL.into_iter().find(|a| a.name() == name)
    }

    /// Connections to each broker that send this attack's requests.
    fn senders(self) -> usize {
        match self {
            Attack::FetchManyTopics | Attack::RepeatedNames | Attack::HeavyProduce => 2,
            Attack::UnreadFlood | Attack::ApiVersionsFlood | Attack::LargeFrames => 4,
            Attack::FetchSessions => 4,
            Attack::ConnectionFlood => 1,
            Attack::AutoCreate => 1,
        }
    }
}

/// Where the attacks go.
#[derive(Debug, Clone)]
pub(crate) struct Target {
    /// Each broker's own listener.
    pub(crate) brokers: Vec<String>,
    /// Each broker's Kafka listener.
    pub(crate) kafka: Vec<String>,
}

/// What an attack did: requests (or frames, or connections) sent, and
/// answers it got.
#[derive(Debug, Default)]
pub(crate) struct Tally {
    pub(crate) sent: AtomicU64,
    pub(crate) answered: AtomicU64,
}

/// Runs `attack` on every broker until `stop`.
pub(crate) async fn run(attack: Attack, target: Target, stop: Arc<AtomicBool>, tally: Arc<Tally>) {
    let mut tasks = Vec::new();
    for (b, addr) in target.brokers.iter().enumerate() {
        for n in 0..attack.senders() {
            let (addr, kafka) = (addr.clone(), target.kafka[b].clone());
            let (stop, tally) = (stop.clone(), tally.clone());
            let tag = format!("{}-{b}-{n}", attack.name());
            tasks.push(tokio::spawn(async move {
                // A refused or closed connection is what an attack expects
                // now and then: open another while the phase lasts.
                while !stop.load(Ordering::SeqCst) {
                    let done = match attack {
                        Attack::ApiVersionsFlood => {
                            flood(&kafka, api_versions_frames(), &stop, &tally).await
                        }
                        Attack::UnreadFlood => flood(&addr, metadata_frames(), &stop, &tally).await,
                        Attack::ConnectionFlood => {
                            hold_connections(&addr, 3_000, &stop, &tally).await
                        }
                        Attack::LargeFrames => large_frames(&addr, &stop, &tally).await,
                        _ => ask(attack, &addr, &tag, &stop, &tally).await,
                    };
                    if done.is_err() {
                        tokio::time::sleep(Duration::from_millis(50)).await;
                    }
                }
            }));
        }
    }
    for t in tasks {
        let _ = t.await;
    }
}

/// Sends the attack's requests one after the other on one connection,
/// reading each answer (its bytes only: the attacker spends no time decoding).
async fn ask(
    attack: Attack,
    addr: &str,
    tag: &str,
    stop: &AtomicBool,
    tally: &Tally,
) -> anyhow::Result<()> {
    let s = TcpStream::connect(addr).await?;
    let (mut r, mut w) = s.into_split();
    let mut n = 0u64;
    // The same bytes every time (every other time for the repeated names):
    // encoded once.
    let mut fixed: [Option<Bytes>; 2] = [None, None];
    while !stop.load(Ordering::SeqCst) {
        let frame = match attack {
            // New names every time.
            Attack::AutoCreate => encode(request(attack, tag, n)),
            _ => fixed[(n % 2) as usize]
                .get_or_insert_with(|| encode(request(attack, tag, n)))
                .clone(),
        };
        n += 1;
        tally.sent.fetch_add(1, Ordering::Relaxed);
        tokio::time::timeout(REQUEST_TIMEOUT, async {
            w.write_all(&frame).await?;
            let len = r.read_u32().await?;
            tokio::io::copy(&mut (&mut r).take(u64::from(len)), &mut tokio::io::sink()).await?;
            anyhow::Ok(())
        })
        .await??;
        tally.answered.fetch_add(1, Ordering::Relaxed);
    }
    Ok(())
}

/// A request frame: its length, then the request.
fn encode(body: Body) -> Bytes {
    framed(&pb::Request {
        correlation_id: 0,
        api_version: 0,
        client_id: "hostile".into(),
        body: Some(body),
    })
}

fn framed(request: &pb::Request) -> Bytes {
    let body = frame::encode(request);
    let mut out = Vec::with_capacity(4 + body.len());
    out.extend_from_slice(&(body.len() as u32).to_be_bytes());
    out.extend_from_slice(&body);
    out.into()
}

fn request(attack: Attack, tag: &str, n: u64) -> Body {
    match attack {
        Attack::FetchManyTopics => fetch((0..20_000).map(|i| format!("t{i:05}")).collect(), -1),
        Attack::RepeatedNames if n.is_multiple_of(2) => Body::Metadata(pb::MetadataRequest {
            topics: vec![WIDE.to_string(); 100_000],
            allow_auto_topic_creation: false,
            no_topics: false,
        }),
        Attack::RepeatedNames => Body::DescribeTopics(pb::DescribeTopicsRequest {
            topics: vec![WIDE.to_string(); 100_000],
        }),
        Attack::HeavyProduce => Body::Produce(pb::ProduceRequest {
            acks: 1,
            timeout_ms: 10_000,
            topics: vec![pb::ProduceTopic {
                name: PACKED.into(),
                partitions: (0..3)
                    .map(|partition| pb::ProducePartition {
                        partition,
                        current_leader_epoch: None,
                        records: packed_batches(4),
                    })
                    .collect(),
            }],
        }),
        Attack::FetchSessions => fetch(vec![crate::steady::TOPIC.to_string()], 0),
        Attack::AutoCreate => Body::Metadata(pb::MetadataRequest {
            topics: (0..1_000).map(|i| format!("auto-{tag}-{n}-{i}")).collect(),
            allow_auto_topic_creation: true,
            no_topics: false,
        }),
        _ => unreachable!("{attack:?} sends no request and reads no answer"),
    }
}

/// A consumer's fetch of partition 0 of each of `topics`, opening a new
/// session (`session_epoch` 0) or none (-1).
fn fetch(topics: Vec<String>, session_epoch: i32) -> Body {
    Body::Fetch(pb::FetchRequest {
        replica_id: -1,
        replica_epoch: -1,
        max_wait_ms: 0,
        min_bytes: 0,
        max_bytes: 1 << 20,
        session_id: 0,
        session_epoch,
        topics: topics
            .into_iter()
            .map(|topic| pb::FetchTopic {
                topic,
                partitions: vec![pb::FetchPartition {
                    partition: 0,
                    fetch_offset: 0,
                    partition_max_bytes: 1024,
                    ..Default::default()
                }],
            })
            .collect(),
        ..Default::default()
    })
}

/// `count` batches, each one record of 32 MiB of zeros packed by zstd into a
/// few KiB.
fn packed_batches(count: usize) -> Bytes {
    static PACKED_BATCH: std::sync::OnceLock<Bytes> = std::sync::OnceLock::new();
    let one = PACKED_BATCH.get_or_init(|| {
        let mut b = BatchBuilder::new(0);
        b.push(0, None, Some(&vec![0u8; 32 << 20]), &[]);
        b.finish_with(Compression::Zstd)
    });
    Bytes::from(one.repeat(count))
}

/// Metadata requests for the wide topic: answers of tens of KiB.
fn metadata_frames() -> Bytes {
    let frames: Vec<u8> = (0..64)
        .flat_map(|correlation_id| {
            framed(&pb::Request {
                correlation_id,
                api_version: 0,
                client_id: "deaf".into(),
                body: Some(Body::Metadata(pb::MetadataRequest {
                    topics: vec![WIDE.into()],
                    ..Default::default()
                })),
            })
            .to_vec()
        })
        .collect();
    frames.into()
}

/// Kafka ApiVersions v0 requests (api key 18, version 0, no client id).
fn api_versions_frames() -> Bytes {
    let mut frames = Vec::new();
    for correlation_id in 0..1024i32 {
        frames.extend_from_slice(&10u32.to_be_bytes());
        frames.extend_from_slice(&18i16.to_be_bytes());
        frames.extend_from_slice(&0i16.to_be_bytes());
        frames.extend_from_slice(&correlation_id.to_be_bytes());
        frames.extend_from_slice(&(-1i16).to_be_bytes());
    }
    frames.into()
}

/// Writes `frames` again and again on one connection with a small receive
/// buffer and never reads.
async fn flood(addr: &str, frames: Bytes, stop: &AtomicBool, tally: &Tally) -> anyhow::Result<()> {
    let socket = tokio::net::TcpSocket::new_v4()?;
    socket.set_recv_buffer_size(4096)?;
    let mut s = socket.connect(addr.parse()?).await?;
    while !stop.load(Ordering::SeqCst) {
        // A muted connection takes no more: the stop flag is looked at while
        // a write waits (a write cut short then leaves half a frame, which
        // only the phase's end does).
        tokio::select! {
            written = s.write_all(&frames) => {
                written?;
                tally.sent.fetch_add(1, Ordering::Relaxed);
            }
            _ = stopped(stop) => {}
        }
    }
    Ok(())
}

/// Returns once `stop` is set.
async fn stopped(stop: &AtomicBool) {
    while !stop.load(Ordering::SeqCst) {
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

/// Opens `count` connections and holds them, every other one with half a
/// frame header written.
async fn hold_connections(
    addr: &str,
    count: usize,
    stop: &AtomicBool,
    tally: &Tally,
) -> anyhow::Result<()> {
    let mut held = Vec::with_capacity(count);
    for i in 0..count {
        if stop.load(Ordering::SeqCst) {
            break;
        }
        let Ok(Ok(mut s)) =
            tokio::time::timeout(Duration::from_secs(2), TcpStream::connect(addr)).await
        else {
            continue;
        };
        if i % 2 == 1 {
            let _ = s.write_all(&[0, 0]).await;
        }
        tally.sent.fetch_add(1, Ordering::Relaxed);
        held.push(s);
    }
    stopped(stop).await;
    Ok(())
}

/// Sends frames announcing 64 MiB followed by that many bytes of garbage,
/// as fast as the broker takes them, on one connection after another.
async fn large_frames(addr: &str, stop: &AtomicBool, tally: &Tally) -> anyhow::Result<()> {
    const LEN: usize = 64 << 20;
    let chunk = vec![0xffu8; 1 << 20];
    let mut s = TcpStream::connect(addr).await?;
    s.write_all(&(LEN as u32).to_be_bytes()).await?;
    tally.sent.fetch_add(1, Ordering::Relaxed);
    for _ in 0..LEN / chunk.len() {
        if stop.load(Ordering::SeqCst) {
            break;
        }
        tokio::select! {
            written = s.write_all(&chunk) => written?,
            _ = stopped(stop) => {}
        }
    }
    Ok(())
}
