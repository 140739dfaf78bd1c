//! What decoding a request may allocate: no more than a small multiple of the
//! frame's own size at once, whatever lengths the frame declares. An array's
//! declared length is bounded by the bytes left (each element takes one at
//! least), but its elements are larger in memory than on the wire: sizing the
//! array's buffer by that length alone asks for length x element size at once
//! (a 16 MiB frame declaring 16 million topics asked for gigabytes).
//!
//! A test binary of its own: its global allocator (the `cap` crate's) refuses
//! to go more than a bound past what was allocated before the decode, and a
//! refused allocation aborts the test.

use bytes::{Bytes, BytesMut};
use cap::Cap;
use kafka_protocol::messages::{ApiKey, FetchRequest, RequestHeader};
use kafka_protocol::protocol::{Encodable, StrBytes};

#[global_allocator]
static ALLOCATOR: Cap<std::alloc::System> = Cap::new(std::alloc::System, usize::MAX);

/// A Fetch v4 frame whose topics array declares `declared` elements, then
/// `filler` bytes that do not decode as a topic.
fn fetch_declaring(declared: i32, filler: usize) -> Bytes {
    let version = 4;
    let mut header = RequestHeader::default();
    header.request_api_key = ApiKey::Fetch as i16;
    header.request_api_version = version;
    header.correlation_id = 1;
    header.client_id = Some(StrBytes::from_static_str("hostile"));
    let mut buf = BytesMut::new();
    header
        .encode(&mut buf, ApiKey::Fetch.request_header_version(version))
        .unwrap();
    FetchRequest::default().encode(&mut buf, version).unwrap();
    // The body ends with the topics count (empty: 0): declare more.
    let at = buf.len() - 4;
    buf[at..].copy_from_slice(&declared.to_be_bytes());
    // A topic name of length -2: no topic decodes from it.
    buf.extend(std::iter::repeat_n(0xfe, filler));
    buf.freeze()
}

#[test]
fn a_frame_declaring_a_long_array_allocates_about_its_own_size() {
    const FILLER: usize = 16 << 20;
    let frame = fetch_declaring(FILLER as i32, FILLER);
    let len = frame.len();
    ALLOCATOR
        .set_limit(ALLOCATOR.allocated() + 4 * len)
        .expect("the limit is above what is allocated");
    let decoded = syncline_kafka::codec::decode(frame);
    ALLOCATOR.set_limit(usize::MAX).unwrap();
    assert!(decoded.is_err());
}
