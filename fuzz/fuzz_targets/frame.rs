//! A connection's byte stream through the frame codec, then every frame through
//! `decode_request` (and `decode_response`, as a client reads a broker).
//!
//! Input: byte 0 picks the maximum frame size, byte 1 the size of the reads the
//! stream arrives in; the rest is the stream. Checked: the codec agrees with a
//! plain reading of the format (4-byte big-endian length, then that many bytes,
//! refused above the maximum), whatever the read sizes, and never yields a frame
//! above the maximum. (A stream cut after a frame's length prefix ends without an
//! error: `LengthDelimitedCodec` has consumed the prefix and `decode_eof` sees an
//! empty buffer.)
#![no_main]

use bytes::{Bytes, BytesMut};
use libfuzzer_sys::fuzz_target;
use syncline_proto::frame;
use tokio_util::codec::Decoder;

const MAX_FRAME: [usize; 8] = [0, 1, 4, 16, 64, 256, 4096, 1 << 20];

/// What the stream holds by the format: its whole frames, then whether it ends in
/// an oversized length (`Some(true)`), a cut frame (`Some(false)`) or cleanly.
fn by_the_format(mut s: &[u8], max: usize) -> (Vec<&[u8]>, Option<bool>) {
    let mut frames = Vec::new();
    loop {
        if s.is_empty() {
            return (frames, None);
        }
        if s.len() < 4 {
            return (frames, Some(false));
        }
        let len = u32::from_be_bytes([s[0], s[1], s[2], s[3]]) as usize;
        if len > max {
            return (frames, Some(true));
        }
        if s.len() < 4 + len {
            return (frames, Some(false));
        }
        frames.push(&s[4..4 + len]);
        s = &s[4 + len..];
    }
}

/// Runs the codec over `stream` delivered `chunk` bytes at a time, as a connection
/// would: frames until the first error, and whether there was one.
fn through_the_codec(stream: &[u8], max: usize, chunk: usize) -> (Vec<Bytes>, bool) {
    let mut codec = frame::codec(max);
    let mut buf = BytesMut::new();
    let mut frames = Vec::new();
    for part in stream.chunks(chunk) {
        buf.extend_from_slice(part);
        loop {
            match codec.decode(&mut buf) {
                Ok(Some(f)) => {
                    assert!(f.len() <= max, "frame of {} bytes above {max}", f.len());
                    frames.push(f.freeze());
                }
                Ok(None) => break,
                Err(_) => return (frames, true),
            }
        }
    }
    loop {
        match codec.decode_eof(&mut buf) {
            Ok(Some(f)) => frames.push(f.freeze()),
            Ok(None) => return (frames, false),
            Err(_) => return (frames, true),
        }
    }
}

fuzz_target!(|data: &[u8]| {
    let [pick, chunk, stream @ ..] = data else {
        return;
    };
    let max = MAX_FRAME[usize::from(pick & 7)];
    let chunk = usize::from(*chunk).max(1);
    let (frames, failed) = through_the_codec(stream, max, chunk);
    let (expected, ending) = by_the_format(stream, max);
    assert_eq!(frames.len(), expected.len(), "frame count");
    for (got, want) in frames.iter().zip(&expected) {
        assert_eq!(&got[..], *want);
    }
    match ending {
        None => assert!(!failed, "a stream of whole frames failed"),
        Some(true) => assert!(failed, "an oversized frame was not refused"),
        // A stream cut inside a frame fails, or (once the codec has consumed the
        // cut frame's length) just ends: the connection closes either way.
        Some(false) => {}
    }
    // Read sizes do not matter.
    let (whole, whole_failed) = through_the_codec(stream, max, stream.len().max(1));
    assert_eq!((&whole, whole_failed), (&frames, failed));
    for f in frames {
        syncline_fuzz::check_frame(f);
    }
});
