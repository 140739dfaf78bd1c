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

/// Field numbers of the messages [`encode_request_pieces`] writes by hand; the
/// proptest below checks them against prost's own encoding.
const REQUEST_PRODUCE_FIELD: u32 = 10;
const PRODUCE_TOPICS_FIELD: u32 = 3;
const PRODUCE_TOPIC_PARTITIONS_FIELD: u32 = 2;
const PRODUCE_PARTITION_RECORDS_FIELD: u32 = 3;

/// Record batches shorter than this are copied into the envelope: a few
/// hundred bytes are cheaper to copy than to write as a slice of their own.
const PIECE_MIN_BYTES: usize = 512;

/// Encodes a request frame body as pieces whose concatenation is exactly what
/// [`encode`] gives for `request`. A produce request's record batches (all but
/// small ones) are pieces of their own, the caller's `Bytes`, not copies: the
/// envelope is written around them. Each message's field that holds the next
/// level (and the records) is its last, so the envelope is prost's encoding of
/// each message without that field, followed by it; lengths are prost's
/// `encoded_len` of the whole messages. Other requests are one piece.
pub fn encode_request_pieces(mut request: pb::Request) -> Vec<Bytes> {
    use prost::encoding::{encode_key, encode_varint, WireType};

    let mut produce = match request.body.take() {
        Some(pb::request::Body::Produce(p)) => p,
        body => {
            request.body = body;
            return vec![encode(&request)];
        }
    };
    let mut pieces = Vec::new();
    let mut buf = BytesMut::with_capacity(256);
    encode_head(&request, &mut buf);
    encode_key(REQUEST_PRODUCE_FIELD, WireType::LengthDelimited, &mut buf);
    encode_varint(produce.encoded_len() as u64, &mut buf);
    let topics = std::mem::take(&mut produce.topics);
    encode_head(&produce, &mut buf);
    for mut t in topics {
        encode_key(PRODUCE_TOPICS_FIELD, WireType::LengthDelimited, &mut buf);
        encode_varint(t.encoded_len() as u64, &mut buf);
        let partitions = std::mem::take(&mut t.partitions);
        encode_head(&t, &mut buf);
        for mut p in partitions {
            encode_key(
                PRODUCE_TOPIC_PARTITIONS_FIELD,
                WireType::LengthDelimited,
                &mut buf,
            );
            encode_varint(p.encoded_len() as u64, &mut buf);
            let records = std::mem::take(&mut p.records);
            encode_head(&p, &mut buf);
            if records.is_empty() {
                continue;
            }
            encode_key(
                PRODUCE_PARTITION_RECORDS_FIELD,
                WireType::LengthDelimited,
                &mut buf,
            );
            encode_varint(records.len() as u64, &mut buf);
            if records.len() < PIECE_MIN_BYTES {
                buf.extend_from_slice(&records);
            } else {
                pieces.push(buf.split().freeze());
                pieces.push(records);
            }
        }
    }
    if !buf.is_empty() {
        pieces.push(buf.freeze());
    }
    pieces
}

/// Appends `msg`'s encoding to `buf`.
fn encode_head<M: Message>(msg: &M, buf: &mut BytesMut) {
    msg.encode(buf)
        .expect("BytesMut grows, so encoding cannot run out of room");
}

/// Most frames one write carries (a vectored write takes at most 1024 slices).
pub const MAX_FRAMES_PER_WRITE: usize = 256;

/// A frame body to write: one buffer, or pieces whose concatenation is the body
/// (a produce request's record batches, referenced rather than copied: see
/// [`encode_request_pieces`]).
pub trait FrameBody {
    /// The body's pieces, in order.
    fn pieces(&self) -> &[Bytes];
}

impl FrameBody for Bytes {
    fn pieces(&self) -> &[Bytes] {
        std::slice::from_ref(self)
    }
}

impl FrameBody for Vec<Bytes> {
    fn pieces(&self) -> &[Bytes] {
        self
    }
}

/// Writes `frames`, each behind its 4-byte big-endian length, with vectored writes:
/// a frame is never copied on its way to the socket (fetch responses carry up to
/// megabytes of records, which a framing codec would copy into its buffer).
pub async fn write_frames<W: AsyncWrite + Unpin, F: FrameBody>(
    w: &mut W,
    frames: &[F],
) -> io::Result<()> {
    let prefixes: Vec<[u8; LENGTH_PREFIX_LEN]> = frames
        .iter()
        .map(|f| {
            let len: usize = f.pieces().iter().map(Bytes::len).sum();
            u32::try_from(len)
                .map(u32::to_be_bytes)
                .map_err(|_| io::Error::new(io::ErrorKind::InvalidInput, "frame longer than 4 GiB"))
        })
        .collect::<io::Result<_>>()?;
    let mut slices: Vec<IoSlice<'_>> =
        Vec::with_capacity(prefixes.len() + frames.iter().map(|f| f.pieces().len()).sum::<usize>());
    for (p, f) in prefixes.iter().zip(frames) {
        slices.push(IoSlice::new(p));
        slices.extend(f.pieces().iter().map(|b| IoSlice::new(b)));
    }
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
pub async fn write_queued<W: AsyncWrite + Unpin, F: FrameBody>(
    w: &mut W,
    frames: &mut Vec<F>,
    first: F,
    mut more: impl FnMut() -> Option<F>,
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

    fn arb_produce_request() -> impl Strategy<Value = Request> {
        let partition = (
            any::<i32>(),
            proptest::option::of(any::<i32>()),
            prop_oneof![
                proptest::collection::vec(any::<u8>(), 0..PIECE_MIN_BYTES),
                proptest::collection::vec(any::<u8>(), PIECE_MIN_BYTES..3 * PIECE_MIN_BYTES),
            ],
        )
            .prop_map(
                |(partition, current_leader_epoch, records)| pb::ProducePartition {
                    partition,
                    current_leader_epoch,
                    records: Bytes::from(records),
                },
            );
        let topic = ("[a-z]{0,12}", proptest::collection::vec(partition, 0..4))
            .prop_map(|(name, partitions)| pb::ProduceTopic { name, partitions });
        (
            any::<i32>(),
            any::<i32>(),
            "[a-z]{0,8}",
            any::<i32>(),
            any::<i32>(),
            proptest::collection::vec(topic, 0..4),
        )
            .prop_map(
                |(correlation_id, api_version, client_id, acks, timeout_ms, topics)| Request {
                    correlation_id,
                    api_version,
                    client_id,
                    body: Some(Body::Produce(pb::ProduceRequest {
                        acks,
                        timeout_ms,
                        topics,
                    })),
                },
            )
    }

    proptest! {
        /// The pieces are prost's encoding of the same request, and the record
        /// batches that are pieces of their own are the caller's bytes, not copies.
        #[test]
        fn produce_request_pieces_concatenate_to_prosts_encoding(request in arb_produce_request()) {
            let expected = encode(&request);
            let Some(Body::Produce(produce)) = &request.body else { unreachable!() };
            let large: Vec<Bytes> = produce
                .topics
                .iter()
                .flat_map(|t| &t.partitions)
                .map(|p| p.records.clone())
                .filter(|r| r.len() >= PIECE_MIN_BYTES)
                .collect();
            let pieces = encode_request_pieces(request.clone());
            prop_assert!(pieces.iter().all(|p| !p.is_empty()));
            prop_assert_eq!(&pieces.concat()[..], &expected[..]);
            // Every large batch is a piece at the same address: referenced.
            for r in &large {
                prop_assert!(pieces.iter().any(|p| p.as_ptr() == r.as_ptr() && p.len() == r.len()));
            }
            // At most an envelope piece before each and one after the last.
            prop_assert!(pieces.len() <= 2 * large.len() + 1);
        }

        #[test]
        fn other_requests_are_one_piece(offset in any::<i64>()) {
            let r = fetch(offset);
            prop_assert_eq!(encode_request_pieces(r.clone()), vec![encode(&r)]);
        }
    }

    #[tokio::test]
    async fn frames_in_pieces_read_back_with_the_codec() {
        let (mut a, b) = tokio::io::duplex(7);
        let frames: Vec<Vec<Bytes>> = (0..20u8)
            .map(|i| {
                (0..i % 4)
                    .map(|j| Bytes::from(vec![i; usize::from(i + j)]))
                    .collect()
            })
            .collect();
        let sent = frames.clone();
        let writer = tokio::spawn(async move { write_frames(&mut a, &sent).await });
        let mut rx = Framed::new(b, codec(1 << 20));
        for f in &frames {
            assert_eq!(&rx.next().await.unwrap().unwrap()[..], &f.concat()[..]);
        }
        writer.await.unwrap().unwrap();
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
