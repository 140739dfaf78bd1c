//! Framing: a 4-byte big-endian length, then one protobuf message. Frames larger
//! than the configured maximum are refused before their body is read.

use bytes::{Bytes, BytesMut};
use prost::Message;
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
