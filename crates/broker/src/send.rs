//! Writing a connection's responses. Most are one frame in memory; a fetch
//! response may instead be chunks: its envelope in memory around regions of the
//! segment files holding its records ([`frame::encode_fetch_response_chunks`]).
//!
//! On a plain TCP socket the regions go from the file to the socket with
//! `sendfile`, never through this process (Kafka's zero-copy transfer). Where
//! the stream is not a socket the kernel can write to from a file (TLS, the
//! simulation's network, fault-injecting streams) they are read into memory
//! and written as any frame: the client receives the same bytes either way.
//!
//! A region is only valid while its log is not truncated ([`FileRegion::check`]).
//! The last byte of a chunked frame is held back until every region of the frame
//! has left its file and checked good; if one did not, the frame is never
//! completed and the connection is closed (the client retries the fetch).

use std::collections::{BTreeMap, VecDeque};
use std::io::{self, IoSlice};

use bytes::{Bytes, BytesMut};
use syncline_log::FileRegion;
use syncline_proto::frame::{self, Chunk};
use tokio::io::AsyncWrite;
use tokio::net::tcp::OwnedWriteHalf;
use tokio::net::TcpStream;

/// One response frame (its body; the length prefix is added when written).
#[derive(Debug)]
pub(crate) enum Outgoing {
    /// In memory.
    Frame(Bytes),
    /// A fetch response's envelope and record regions.
    Chunks(Vec<Chunk<FileRegion>>),
}

impl Outgoing {
    /// The body's length in bytes.
    pub(crate) fn len(&self) -> u64 {
        match self {
            Outgoing::Frame(b) => b.len() as u64,
            Outgoing::Chunks(chunks) => chunks.iter().map(Chunk::len).sum(),
        }
    }

    /// The bytes it holds in memory (a fetch's record regions stay in the
    /// files until written).
    pub(crate) fn in_memory(&self) -> usize {
        match self {
            Outgoing::Frame(b) => b.len(),
            Outgoing::Chunks(chunks) => chunks
                .iter()
                .map(|c| match c {
                    Chunk::Bytes(b) => b.len(),
                    Chunk::Region(_) => 0,
                })
                .sum(),
        }
    }
}

/// Why a connection's responses could not be written.
#[derive(Debug, thiserror::Error)]
pub(crate) enum WriteError {
    /// The connection failed.
    #[error("write failed: {0}")]
    Io(io::Error),
    /// A record region could not be sent as it was read (its log was
    /// truncated, or its file is shorter): the connection must close.
    #[error("records changed under a fetch response: {0}")]
    Region(io::Error),
}

/// The writing half of a connection.
pub(crate) enum Sink {
    /// A plain TCP socket: regions are sent with `sendfile`.
    Tcp(OwnedWriteHalf),
    /// Anything else: regions are copied.
    Copy(Box<dyn AsyncWrite + Send + Unpin>),
}

impl std::fmt::Debug for Sink {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            Sink::Tcp(_) => "Sink::Tcp",
            Sink::Copy(_) => "Sink::Copy",
        })
    }
}

impl Sink {
    /// Writes `batch` in order (each behind its length prefix) and leaves it
    /// empty. Returns the bytes of its regions (read from the segment files).
    pub(crate) async fn write(&mut self, batch: &mut Vec<Outgoing>) -> Result<u64, WriteError> {
        let regions = batch
            .iter()
            .map(|out| match out {
                Outgoing::Frame(_) => 0,
                Outgoing::Chunks(chunks) => chunks
                    .iter()
                    .filter(|c| matches!(c, Chunk::Region(_)))
                    .map(Chunk::len)
                    .sum(),
            })
            .sum();
        let written = match self {
            Sink::Tcp(w) => write_zero_copy(w, batch).await,
            Sink::Copy(w) => write_copying(w, batch).await,
        };
        batch.clear();
        written.map(|()| regions)
    }

    /// Whether regions are sent with `sendfile` (else copied).
    pub(crate) fn sends_files(&self) -> bool {
        matches!(self, Sink::Tcp(_))
    }
}

/// The frame body as one buffer: the regions read into memory (and checked
/// after the read).
fn materialize(chunks: &[Chunk<FileRegion>]) -> io::Result<Bytes> {
    let len = chunks.iter().map(Chunk::len).sum::<u64>();
    let mut buf = BytesMut::with_capacity(usize::try_from(len).map_err(io::Error::other)?);
    for c in chunks {
        match c {
            Chunk::Bytes(b) => buf.extend_from_slice(b),
            Chunk::Region(r) => r.read_into(&mut buf)?,
        }
    }
    Ok(buf.freeze())
}

async fn write_copying<W: AsyncWrite + Unpin + ?Sized>(
    w: &mut W,
    batch: &mut Vec<Outgoing>,
) -> Result<(), WriteError> {
    let mut frames = Vec::with_capacity(batch.len());
    for out in batch.drain(..) {
        frames.push(match out {
            Outgoing::Frame(b) => b,
            Outgoing::Chunks(chunks) => materialize(&chunks).map_err(WriteError::Region)?,
        });
    }
    let mut w = w;
    frame::write_frames(&mut w, &frames)
        .await
        .map_err(WriteError::Io)
}

/// A step of a zero-copy write.
#[derive(Debug)]
enum Step {
    Bytes(Bytes),
    Region(FileRegion),
    /// The regions of the frame being written: all must still be good.
    Check(Vec<FileRegion>),
}

/// The steps that write `batch`.
fn steps(batch: &mut Vec<Outgoing>) -> io::Result<Vec<Step>> {
    let mut steps = Vec::with_capacity(batch.len() * 2);
    for out in batch.drain(..) {
        let len = u32::try_from(out.len())
            .map_err(|_| io::Error::new(io::ErrorKind::InvalidInput, "frame longer than 4 GiB"))?;
        steps.push(Step::Bytes(Bytes::copy_from_slice(&len.to_be_bytes())));
        let mut chunks = match out {
            Outgoing::Frame(b) => {
                steps.push(Step::Bytes(b));
                continue;
            }
            Outgoing::Chunks(chunks) => chunks,
        };
        chunks.retain(|c| !c.is_empty());
        let regions: Vec<FileRegion> = chunks
            .iter()
            .filter_map(|c| match c {
                Chunk::Region(r) => Some(r.clone()),
                Chunk::Bytes(_) => None,
            })
            .collect();
        // The frame's last byte waits for the check.
        let last = match chunks.pop() {
            Some(last) if !regions.is_empty() => last,
            Some(last) => {
                chunks.push(last);
                steps.extend(chunks.into_iter().map(step));
                continue;
            }
            None => continue,
        };
        steps.extend(chunks.into_iter().map(step));
        let (head, tail) = match last {
            Chunk::Bytes(mut b) => {
                let tail = b.split_off(b.len() - 1);
                (Chunk::Bytes(b), Chunk::Bytes(tail))
            }
            Chunk::Region(r) => (
                Chunk::Region(r.slice(0, r.len() - 1)),
                Chunk::Region(r.slice(r.len() - 1, 1)),
            ),
        };
        if !head.is_empty() {
            steps.push(step(head));
        }
        steps.push(Step::Check(regions));
        steps.push(step(tail));
    }
    Ok(steps)
}

fn step(chunk: Chunk<FileRegion>) -> Step {
    match chunk {
        Chunk::Bytes(b) => Step::Bytes(b),
        Chunk::Region(r) => Step::Region(r),
    }
}

async fn write_zero_copy(
    w: &mut OwnedWriteHalf,
    batch: &mut Vec<Outgoing>,
) -> Result<(), WriteError> {
    let steps = steps(batch).map_err(WriteError::Io)?;
    let mut pending: Vec<Bytes> = Vec::new();
    for s in steps {
        match s {
            Step::Bytes(b) => pending.push(b),
            Step::Region(r) => {
                write_all_vectored(w, &pending)
                    .await
                    .map_err(WriteError::Io)?;
                pending.clear();
                send_region(w.as_ref(), &r).await?;
            }
            Step::Check(regions) => {
                for r in &regions {
                    r.check().map_err(WriteError::Region)?;
                }
            }
        }
    }
    write_all_vectored(w, &pending)
        .await
        .map_err(WriteError::Io)
}

/// Writes `bufs` whole, with vectored writes.
async fn write_all_vectored<W: AsyncWrite + Unpin>(w: &mut W, bufs: &[Bytes]) -> io::Result<()> {
    let mut slices: Vec<IoSlice<'_>> = bufs.iter().map(|b| IoSlice::new(b)).collect();
    frame::write_all_slices(w, &mut slices).await
}

/// Most bytes one `sendfile` call is asked for.
const MAX_SENDFILE_BYTES: u64 = 1 << 30;

/// Sends `region` from its file to `tcp` with `sendfile`.
async fn send_region(tcp: &TcpStream, region: &FileRegion) -> Result<(), WriteError> {
    let start =
        i64::try_from(region.position()).map_err(|e| WriteError::Region(io::Error::other(e)))?;
    let end = start + region.len() as i64;
    let mut offset: nix::libc::off_t = start;
    while offset < end {
        let count = ((end - offset) as u64).min(MAX_SENDFILE_BYTES) as usize;
        tcp.writable().await.map_err(WriteError::Io)?;
        let sent = tcp.try_io(tokio::io::Interest::WRITABLE, || {
            nix::sys::sendfile::sendfile(tcp, region.file(), Some(&mut offset), count)
                .map_err(io::Error::from)
        });
        match sent {
            Ok(0) => {
                return Err(WriteError::Region(io::Error::new(
                    io::ErrorKind::UnexpectedEof,
                    "the segment file is shorter than the region read from it",
                )))
            }
            Ok(_) => {}
            Err(e)
                if matches!(
                    e.kind(),
                    io::ErrorKind::WouldBlock | io::ErrorKind::Interrupted
                ) => {}
            Err(e) => return Err(WriteError::Io(e)),
        }
    }
    Ok(())
}

/// The records of a fetch response left in the segment files (zero-copy), by
/// topic and partition; a partition named twice has its reads in response order.
#[derive(Debug, Default)]
pub(crate) struct FetchRegions(BTreeMap<(String, i32), VecDeque<Vec<FileRegion>>>);

impl FetchRegions {
    pub(crate) fn push(&mut self, topic: &str, partition: i32, regions: Vec<FileRegion>) {
        self.0
            .entry((topic.to_owned(), partition))
            .or_default()
            .push_back(regions);
    }

    /// Whether none are left.
    pub(crate) fn is_empty(&self) -> bool {
        self.0.is_empty()
    }

    /// The record bytes they hold.
    pub(crate) fn bytes(&self) -> u64 {
        self.0
            .values()
            .flatten()
            .flatten()
            .map(FileRegion::len)
            .sum()
    }

    /// Whether the partition has records here.
    pub(crate) fn has(&self, topic: &str, partition: i32) -> bool {
        self.0.contains_key(&(topic.to_owned(), partition))
    }

    /// Takes the partition's (next) records; none when it has none here.
    pub(crate) fn take(&mut self, topic: &str, partition: i32) -> Vec<FileRegion> {
        let key = (topic.to_owned(), partition);
        let Some(queue) = self.0.get_mut(&key) else {
            return Vec::new();
        };
        let regions = queue.pop_front().unwrap_or_default();
        if queue.is_empty() {
            self.0.remove(&key);
        }
        regions
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use futures::StreamExt;
    use syncline_log::{Log, LogConfig};
    use syncline_proto::batch::BatchBuilder;
    use syncline_proto::pb;
    use tokio_util::codec::FramedRead;

    const TS: i64 = 1_700_000_000_000;

    fn fill(log: &mut Log, batches: usize, epoch: i32) {
        for i in 0..batches {
            let mut b = BatchBuilder::new(TS);
            for _ in 0..5 {
                b.push(TS, None, Some(&[i as u8; 300]), &[]);
            }
            log.append_as_leader(&b.finish(), epoch, TS).unwrap();
        }
    }

    fn fetch(records: Bytes) -> pb::FetchResponse {
        pb::FetchResponse {
            session_id: 9,
            responses: vec![pb::FetchableTopicResponse {
                topic: "t".into(),
                partitions: vec![pb::PartitionData {
                    partition: 0,
                    high_watermark: 40,
                    records,
                    ..Default::default()
                }],
            }],
            ..Default::default()
        }
    }

    /// A chunked fetch response of `regions` and the frame body it must equal.
    fn response(regions: Vec<FileRegion>) -> (Outgoing, Bytes) {
        let records = syncline_log::Records::Regions(regions.clone())
            .read()
            .unwrap();
        let expected = frame::encode(&pb::Response {
            correlation_id: 5,
            body: Some(pb::response::Body::Fetch(fetch(records))),
        });
        let mut regions = Some(regions);
        let chunks = frame::encode_fetch_response_chunks(5, fetch(Bytes::new()), |_, _| {
            regions.take().unwrap_or_default()
        });
        (Outgoing::Chunks(chunks), expected)
    }

    /// A plain TCP pair: the sink and the peer's reading side.
    async fn tcp_pair() -> (Sink, Box<dyn tokio::io::AsyncRead + Send + Unpin>) {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        let (accepted, connected) =
            tokio::join!(listener.accept(), tokio::net::TcpStream::connect(addr));
        let (_r, w) = accepted.unwrap().0.into_split();
        (Sink::Tcp(w), Box::new(connected.unwrap()))
    }

    fn copy_pair() -> (Sink, Box<dyn tokio::io::AsyncRead + Send + Unpin>) {
        let (a, b) = tokio::io::duplex(1000);
        (Sink::Copy(Box::new(a)), Box::new(b))
    }

    /// Writes `batch` on `sink` while the peer reads frames until the sink is
    /// dropped: the write's result and the frames the peer got whole.
    async fn exchange(
        mut sink: Sink,
        peer: Box<dyn tokio::io::AsyncRead + Send + Unpin>,
        mut batch: Vec<Outgoing>,
    ) -> (Result<u64, WriteError>, Vec<Bytes>) {
        let reader = tokio::spawn(async move {
            let mut frames = FramedRead::new(peer, frame::codec(1 << 24));
            let mut got = Vec::new();
            while let Some(Ok(f)) = frames.next().await {
                got.push(f.freeze());
            }
            got
        });
        let written = sink.write(&mut batch).await;
        assert!(batch.is_empty());
        drop(sink);
        (written, reader.await.unwrap())
    }

    #[tokio::test]
    async fn chunked_frames_arrive_as_prost_encodes_them_sent_or_copied() {
        let dir = tempfile::tempdir().unwrap();
        let config = LogConfig {
            segment_bytes: 4000,
            ..LogConfig::default()
        };
        let mut log = Log::open(dir.path(), config).unwrap();
        fill(&mut log, 8, 0);
        let read = log.read_regions(0, usize::MAX, 40, true).unwrap();
        assert!(read.regions.len() > 1, "several segments");
        for tcp in [true, false] {
            let (sink, peer) = if tcp { tcp_pair().await } else { copy_pair() };
            assert_eq!(matches!(sink, Sink::Tcp(_)), tcp);
            let (chunked, expected) = response(read.regions.clone());
            let (written, got) = exchange(
                sink,
                peer,
                vec![
                    Outgoing::Frame(Bytes::from_static(b"before")),
                    chunked,
                    Outgoing::Frame(Bytes::from_static(b"after")),
                ],
            )
            .await;
            let records = syncline_log::Records::Regions(read.regions.clone()).len();
            assert_eq!(written.unwrap(), records as u64);
            assert_eq!(got.len(), 3, "tcp {tcp}");
            assert_eq!(&got[0][..], b"before");
            assert_eq!(got[1], expected, "tcp {tcp}");
            assert_eq!(&got[2][..], b"after");
        }
    }

    #[tokio::test]
    async fn a_truncation_under_a_response_stops_it_unfinished() {
        for tcp in [true, false] {
            let dir = tempfile::tempdir().unwrap();
            let mut log = Log::open(dir.path(), LogConfig::default()).unwrap();
            fill(&mut log, 4, 0);
            let read = log.read_regions(0, usize::MAX, 20, true).unwrap();
            let (chunked, _) = response(read.regions);
            // A new leader's log wins: other batches where these were.
            log.truncate_to(5).unwrap();
            fill(&mut log, 4, 1);
            let (sink, peer) = if tcp { tcp_pair().await } else { copy_pair() };
            let (written, got) = exchange(
                sink,
                peer,
                vec![Outgoing::Frame(Bytes::from_static(b"before")), chunked],
            )
            .await;
            assert!(
                matches!(written, Err(WriteError::Region(_))),
                "tcp {tcp}: {written:?}"
            );
            // The response never completed (on TCP all but its last byte left;
            // copying, nothing of the batch was written).
            let before = [Bytes::from_static(b"before")];
            assert_eq!(got, if tcp { &before[..] } else { &[] }, "tcp {tcp}");
        }
    }

    #[tokio::test]
    async fn a_file_shorter_than_its_region_stops_the_response() {
        for tcp in [true, false] {
            let dir = tempfile::tempdir().unwrap();
            let mut log = Log::open(dir.path(), LogConfig::default()).unwrap();
            fill(&mut log, 4, 0);
            let read = log.read_regions(0, usize::MAX, 20, true).unwrap();
            assert_eq!(read.regions.len(), 1);
            let (chunked, _) = response(read.regions.clone());
            // Cut behind the log's back.
            read.regions[0]
                .file()
                .set_len(read.regions[0].len() / 2)
                .unwrap();
            let (sink, peer) = if tcp { tcp_pair().await } else { copy_pair() };
            let (written, got) = exchange(sink, peer, vec![chunked]).await;
            assert!(
                matches!(written, Err(WriteError::Region(_))),
                "tcp {tcp}: {written:?}"
            );
            assert!(got.is_empty(), "tcp {tcp}");
        }
    }
}
