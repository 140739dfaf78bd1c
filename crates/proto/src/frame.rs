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
    let mut rest: &mut [IoSlice<'_>] = &mut slices;
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
