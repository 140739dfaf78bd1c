//! The batch compression codecs' decoders (gzip, snappy-java's stream and raw
//! snappy, lz4 frames, zstd), fed hostile bytes as a producer's compressed batch
//! would bring them to the broker.
//!
//! Input: byte 0 picks the codec (modulo five); the rest is the compressed data.
//! Checked: nothing panics, nothing decodes past the bound, and what decodes
//! compresses and decodes back to itself.
#![no_main]

use libfuzzer_sys::fuzz_target;
use syncline_proto::compression::Compression;

/// The bound: small, so that expansion is found quickly.
const LIMIT: usize = 1 << 20;

fuzz_target!(|data: &[u8]| {
    let Some((&pick, packed)) = data.split_first() else {
        return;
    };
    let codec = Compression::from_id(pick % 5).expect("a codec");
    if let Ok(plain) = codec.decompress(packed, LIMIT) {
        assert!(plain.len() <= LIMIT, "{codec}: {} bytes past the bound", plain.len());
        let again = codec.compress(&plain).expect("compresses");
        assert_eq!(codec.decompress(&again, LIMIT).expect("round trip"), plain);
    }
});
