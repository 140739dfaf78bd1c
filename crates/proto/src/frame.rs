//! Framing: a 4-byte big-endian length, then one protobuf message. Frames larger
//! than the configured maximum are refused before their body is read.

use std::io::{self, IoSlice};

use bytes::{Bytes, BytesMut};
use prost::Message;
use tokio::io::{AsyncWrite, AsyncWriteExt};
use tokio_util::codec::LengthDelimitedCodec;

use crate::pb;

/// Bytes of the length prefix.
pub const LENGTH_PREFIX_LEN: usize = 4;

/// A frame codec (Kafka's `socket.request.max.bytes` is the usual bound).
pub fn codec(max_frame_bytes: usize) -> LengthDelimitedCodec {
    LengthDelimitedCodec::builder()
        .length_field_length(LENGTH_PREFIX_LEN)
        .big_endian()
        .max_frame_length(max_frame_bytes)
        .new_codec()
}

/// Why a frame body is not a message.
#[derive(Debug, thiserror::Error)]
pub enum FrameError {
    #[error("frame does not decode as protobuf: {0}")]
    Decode(#[from] prost::DecodeError),
}

/// Encodes a message body (without the length prefix; the codec adds it).
pub fn encode<M: Message>(msg: &M) -> Bytes {
    let mut buf = BytesMut::with_capacity(msg.encoded_len());
    msg.encode(&mut buf)
        .expect("BytesMut grows, so encoding cannot run out of room");
    buf.freeze()
}

/// Most frames one write carries (a vectored write takes at most 1024 slices).
pub const MAX_FRAMES_PER_WRITE: usize = 256;

/// Writes `frames`, each behind its 4-byte big-endian length, with vectored writes:
/// a frame is never copied on its way to the socket (fetch responses carry up to
/// megabytes of records, which a framing codec would copy into its buffer).
pub async fn write_frames<W: AsyncWrite + Unpin>(w: &mut W, frames: &[Bytes]) -> io::Result<()> {
    let prefixes: Vec<[u8; LENGTH_PREFIX_LEN]> = frames
        .iter()
        .map(|f| {
            u32::try_from(f.len())
                .map(u32::to_be_bytes)
                .map_err(|_| io::Error::new(io::ErrorKind::InvalidInput, "frame longer than 4 GiB"))
        })
        .collect::<io::Result<_>>()?;
    let mut slices: Vec<IoSlice<'_>> = prefixes
        .iter()
        .zip(frames)
        .flat_map(|(p, f)| [IoSlice::new(p), IoSlice::new(f)])
        .collect();
    write_all_slices(w, &mut slices).await
}

/// Writes every slice whole, with vectored writes (`slices` is consumed).
pub async fn write_all_slices<W: AsyncWrite + Unpin>(
    w: &mut W,
    slices: &mut [IoSlice<'_>],
) -> io::Result<()> {
    let mut rest: &mut [IoSlice<'_>] = slices;
    while !rest.is_empty() {
        let n = w.write_vectored(rest).await?;
        if n == 0 {
            return Err(io::ErrorKind::WriteZero.into());
        }
        IoSlice::advance_slices(&mut rest, n);
    }
    Ok(())
}

/// Writes `first` and whatever else is already queued (`more` gives it, without
/// waiting), up to [`MAX_FRAMES_PER_WRITE`] frames, in one vectored write.
/// `frames` is scratch space, left empty.
pub async fn write_queued<W: AsyncWrite + Unpin>(
    w: &mut W,
    frames: &mut Vec<Bytes>,
    first: Bytes,
    mut more: impl FnMut() -> Option<Bytes>,
) -> io::Result<()> {
    frames.push(first);
    while frames.len() < MAX_FRAMES_PER_WRITE {
        match more() {
            Some(next) => frames.push(next),
            None => break,
        }
    }
    let written = write_frames(w, frames).await;
    frames.clear();
    written
}

/// A piece of a response frame: bytes in memory, or a region of records the
/// caller sends by other means (a segment file's bytes, sent with `sendfile`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Chunk<R> {
    Bytes(Bytes),
    Region(R),
}

/// What a [`Chunk::Region`] must tell the encoder: its length in bytes.
pub trait RegionLen {
    fn region_len(&self) -> u64;
}

impl<R: RegionLen> Chunk<R> {
    /// Its length in bytes.
    pub fn len(&self) -> u64 {
        match self {
            Chunk::Bytes(b) => b.len() as u64,
            Chunk::Region(r) => r.region_len(),
        }
    }

    /// Whether it is empty.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

/// Field numbers of the messages [`encode_fetch_response_chunks`] writes by
/// hand; the proptest below checks them against prost's own encoding.
const RESPONSE_FETCH_FIELD: u32 = 11;
const FETCH_RESPONSES_FIELD: u32 = 4;
const TOPIC_PARTITIONS_FIELD: u32 = 2;
const PARTITION_RECORDS_FIELD: u32 = 10;

/// Encodes the frame body of a fetch response (a [`pb::Response`] holding
/// `fetch`) as chunks whose concatenation is exactly what [`encode`] gives for
/// the same message with each partition's records followed by `regions(topic,
/// partition)` (read). The envelope, written around the records, is in memory;
/// the regions are left for the caller to send. Each message's repeated field
/// that holds the next level (and the records) is its last field, so the
/// envelope is prost's encoding of each message without it, followed by it.
pub fn encode_fetch_response_chunks<R: RegionLen>(
    correlation_id: i32,
    mut fetch: pb::FetchResponse,
    mut regions: impl FnMut(&str, i32) -> Vec<R>,
) -> Vec<Chunk<R>> {
    use prost::encoding::{encode_key, encode_varint, encoded_len_varint, key_len, WireType};

    /// A length-delimited field's bytes beyond its body.
    fn field_overhead(tag: u32, body: u64) -> u64 {
        (key_len(tag) + encoded_len_varint(body)) as u64
    }

    struct Part<R> {
        head: pb::PartitionData,
        records: Bytes,
        regions: Vec<R>,
        records_len: u64,
        len: u64,
    }
    struct Topic<R> {
        head: pb::FetchableTopicResponse,
        parts: Vec<Part<R>>,
        len: u64,
    }

    let mut topics = Vec::with_capacity(fetch.responses.len());
    for mut t in std::mem::take(&mut fetch.responses) {
        let mut parts = Vec::with_capacity(t.partitions.len());
        for mut p in std::mem::take(&mut t.partitions) {
            let records = std::mem::take(&mut p.records);
            let regions = regions(&t.topic, p.partition);
            let records_len =
                records.len() as u64 + regions.iter().map(|r| r.region_len()).sum::<u64>();
            let mut len = p.encoded_len() as u64;
            if records_len > 0 {
                len += field_overhead(PARTITION_RECORDS_FIELD, records_len) + records_len;
            }
            parts.push(Part {
                head: p,
                records,
                regions,
                records_len,
                len,
            });
        }
        let len = t.encoded_len() as u64
            + parts
                .iter()
                .map(|p| field_overhead(TOPIC_PARTITIONS_FIELD, p.len) + p.len)
                .sum::<u64>();
        topics.push(Topic {
            head: t,
            parts,
            len,
        });
    }
    let fetch_len = fetch.encoded_len() as u64
        + topics
            .iter()
            .map(|t| field_overhead(FETCH_RESPONSES_FIELD, t.len) + t.len)
            .sum::<u64>();

    let mut chunks = Vec::new();
    let mut buf = BytesMut::with_capacity(256);
    let envelope = pb::Response {
        correlation_id,
        body: None,
    };
    envelope
        .encode(&mut buf)
        .expect("BytesMut grows, so encoding cannot run out of room");
    encode_key(RESPONSE_FETCH_FIELD, WireType::LengthDelimited, &mut buf);
    encode_varint(fetch_len, &mut buf);
    fetch
        .encode(&mut buf)
        .expect("BytesMut grows, so encoding cannot run out of room");
    for t in topics {
        encode_key(FETCH_RESPONSES_FIELD, WireType::LengthDelimited, &mut buf);
        encode_varint(t.len, &mut buf);
        t.head
            .encode(&mut buf)
            .expect("BytesMut grows, so encoding cannot run out of room");
        for p in t.parts {
            encode_key(TOPIC_PARTITIONS_FIELD, WireType::LengthDelimited, &mut buf);
            encode_varint(p.len, &mut buf);
            p.head
                .encode(&mut buf)
                .expect("BytesMut grows, so encoding cannot run out of room");
            if p.records_len == 0 {
                continue;
            }
            encode_key(PARTITION_RECORDS_FIELD, WireType::LengthDelimited, &mut buf);
            encode_varint(p.records_len, &mut buf);
            if !p.records.is_empty() {
                chunks.push(Chunk::Bytes(buf.split().freeze()));
                chunks.push(Chunk::Bytes(p.records));
            }
            for r in p.regions.into_iter().filter(|r| r.region_len() > 0) {
                if !buf.is_empty() {
                    chunks.push(Chunk::Bytes(buf.split().freeze()));
                }
                chunks.push(Chunk::Region(r));
            }
        }
    }
    if !buf.is_empty() {
        chunks.push(Chunk::Bytes(buf.freeze()));
    }
    chunks
}

/// Decodes a request frame body. `bytes` fields are slices of `frame`, not copies.
pub fn decode_request(frame: Bytes) -> Result<pb::Request, FrameError> {
    Ok(pb::Request::decode(frame)?)
}

/// Decodes a response frame body. `bytes` fields are slices of `frame`, not copies.
pub fn decode_response(frame: Bytes) -> Result<pb::Response, FrameError> {
    Ok(pb::Response::decode(frame)?)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::pb::{request::Body, FetchPartition, FetchRequest, FetchTopic, Request};
    use futures::{SinkExt, StreamExt};
    use proptest::prelude::*;
    use tokio_util::codec::Framed;

    fn fetch(offset: i64) -> Request {
        Request {
            correlation_id: 7,
            api_version: 0,
            client_id: "t".into(),
            body: Some(Body::Fetch(FetchRequest {
                replica_id: -1,
                max_wait_ms: 500,
                topics: vec![FetchTopic {
                    topic: "a".into(),
                    partitions: vec![FetchPartition {
                        partition: 3,
                        fetch_offset: offset,
                        current_leader_epoch: Some(0),
                        ..Default::default()
                    }],
                }],
                ..Default::default()
            })),
        }
    }

    proptest! {
        #[test]
        fn request_round_trip(offset in any::<i64>()) {
            let r = fetch(offset);
            prop_assert_eq!(decode_request(encode(&r)).unwrap(), r);
        }

        #[test]
        fn decoders_never_panic(bytes in proptest::collection::vec(any::<u8>(), 0..512)) {
            let _ = decode_request(Bytes::from(bytes.clone()));
            let _ = decode_response(Bytes::from(bytes));
        }
    }

    /// A region for the tests: bytes the encoder only measures.
    #[derive(Debug, Clone, PartialEq, Eq)]
    struct Held(Bytes);

    impl RegionLen for Held {
        fn region_len(&self) -> u64 {
            self.0.len() as u64
        }
    }

    fn arb_partition() -> impl Strategy<Value = (pb::PartitionData, Vec<usize>)> {
        (
            any::<i32>(),
            0i32..100,
            any::<i64>(),
            proptest::option::of((any::<i32>(), any::<i64>())),
            proptest::option::of(any::<i32>()),
            proptest::collection::vec(any::<u8>(), 0..400),
            proptest::collection::vec(0usize..200, 0..4),
        )
            .prop_map(
                |(partition, error, hw, diverging, preferred, records, cuts)| {
                    let data = pb::PartitionData {
                        partition,
                        error_code: error,
                        high_watermark: hw,
                        last_stable_offset: hw,
                        log_start_offset: hw / 2,
                        diverging_epoch: diverging
                            .map(|(epoch, end_offset)| pb::EpochEndOffset { epoch, end_offset }),
                        preferred_read_replica: preferred,
                        aborted_transactions: vec![pb::AbortedTransaction {
                            producer_id: hw,
                            first_offset: 3,
                        }],
                        records: Bytes::from(records),
                        ..Default::default()
                    };
                    (data, cuts)
                },
            )
    }

    fn arb_fetch() -> impl Strategy<Value = (pb::FetchResponse, Vec<Vec<Vec<usize>>>)> {
        let topic = (
            "[a-z]{0,12}",
            proptest::collection::vec(arb_partition(), 0..4),
        );
        (
            any::<i32>(),
            0i32..100,
            any::<i32>(),
            proptest::collection::vec(topic, 0..4),
        )
            .prop_map(|(throttle, error, session, topics)| {
                let mut cuts = Vec::new();
                let responses = topics
                    .into_iter()
                    .map(|(topic, parts)| {
                        let (partitions, c): (Vec<_>, Vec<_>) = parts.into_iter().unzip();
                        cuts.push(c);
                        pb::FetchableTopicResponse { topic, partitions }
                    })
                    .collect();
                let fetch = pb::FetchResponse {
                    throttle_time_ms: throttle,
                    error_code: error,
                    session_id: session,
                    responses,
                };
                (fetch, cuts)
            })
    }

    proptest! {
        /// The chunks, regions read, are prost's encoding of the same message.
        #[test]
        fn fetch_response_chunks_concatenate_to_prosts_encoding(
            correlation_id in any::<i32>(),
            (fetch, cuts) in arb_fetch(),
            keep_in_memory in any::<bool>(),
        ) {
            let expected = encode(&pb::Response {
                correlation_id,
                body: Some(pb::response::Body::Fetch(fetch.clone())),
            });
            // Each partition's records leave the message as regions (cut into
            // pieces at `cuts`), or some stay as in-memory records before them.
            let mut regions_of = std::collections::BTreeMap::new();
            let mut stripped = fetch.clone();
            for (ti, t) in stripped.responses.iter_mut().enumerate() {
                for (pi, p) in t.partitions.iter_mut().enumerate() {
                    let mut rest = std::mem::take(&mut p.records);
                    if keep_in_memory && rest.len() > 3 {
                        p.records = rest.split_to(3);
                    }
                    let mut pieces = Vec::new();
                    for &cut in &cuts[ti][pi] {
                        let at = cut.min(rest.len());
                        pieces.push(Held(rest.split_to(at)));
                    }
                    pieces.push(Held(rest));
                    regions_of.insert((t.topic.clone(), p.partition, ti, pi), pieces);
                }
            }
            // Topics and partitions may repeat: hand out each one's pieces in order.
            let mut order: Vec<_> = regions_of.into_iter().collect();
            order.sort_by_key(|((_, _, ti, pi), _)| (*ti, *pi));
            let mut order = order.into_iter();
            let chunks = encode_fetch_response_chunks(correlation_id, stripped, |topic, partition| {
                let ((t, p, _, _), pieces) = order.next().unwrap();
                assert_eq!((t.as_str(), p), (topic, partition));
                pieces
            });
            prop_assert!(order.next().is_none());
            let mut joined = Vec::new();
            for c in &chunks {
                prop_assert!(!c.is_empty());
                match c {
                    Chunk::Bytes(b) => joined.extend_from_slice(b),
                    Chunk::Region(Held(b)) => joined.extend_from_slice(b),
                }
            }
            prop_assert_eq!(joined.len() as u64, chunks.iter().map(Chunk::len).sum::<u64>());
            prop_assert_eq!(&joined[..], &expected[..]);
        }
    }

    #[tokio::test]
    async fn vectored_frames_read_back_with_the_codec() {
        // A small duplex buffer forces partial writes, exercising the advance.
        let (mut a, b) = tokio::io::duplex(7);
        let frames: Vec<Bytes> = (0..50u8)
            .map(|i| Bytes::from(vec![i; usize::from(i) * 3]))
            .collect();
        let sent = frames.clone();
        let writer = tokio::spawn(async move { write_frames(&mut a, &sent).await });
        let mut rx = Framed::new(b, codec(1 << 20));
        for f in &frames {
            assert_eq!(&rx.next().await.unwrap().unwrap().freeze(), f);
        }
        writer.await.unwrap().unwrap();
    }

    #[tokio::test]
    async fn write_queued_takes_what_is_queued_up_to_the_limit() {
        let (mut a, b) = tokio::io::duplex(1 << 20);
        let mut queue: std::collections::VecDeque<Bytes> = (0..MAX_FRAMES_PER_WRITE + 10)
            .map(|i| Bytes::from(i.to_string()))
            .collect();
        let mut scratch = Vec::new();
        let first = Bytes::from_static(b"first");
        write_queued(&mut a, &mut scratch, first, || queue.pop_front())
            .await
            .unwrap();
        assert!(scratch.is_empty());
        // The first frame and MAX - 1 queued ones went out; the rest wait.
        assert_eq!(queue.len(), 11);
        drop(a);
        let mut rx = Framed::new(b, codec(1 << 20));
        assert_eq!(&rx.next().await.unwrap().unwrap()[..], b"first");
        let mut n = 1;
        while let Some(f) = rx.next().await {
            assert_eq!(f.unwrap().freeze(), Bytes::from((n - 1).to_string()));
            n += 1;
        }
        assert_eq!(n, MAX_FRAMES_PER_WRITE);
    }

    #[tokio::test]
    async fn frames_round_trip_and_oversized_frames_are_refused() {
        let (a, b) = tokio::io::duplex(1 << 16);
        let mut tx = Framed::new(a, codec(1 << 20));
        let mut rx = Framed::new(b, codec(64));
        let small = encode(&fetch(1));
        assert!(small.len() <= 64);
        tx.send(small.clone()).await.unwrap();
        assert_eq!(rx.next().await.unwrap().unwrap().freeze(), small);
        tx.send(Bytes::from(vec![0u8; 65])).await.unwrap();
        let err = rx.next().await.unwrap().unwrap_err();
        assert_eq!(err.kind(), std::io::ErrorKind::InvalidData);
    }
}
