//! The compression codecs of a RecordBatch (the low three bits of its attributes),
//! with Kafka's framings, so that batches interoperate with Kafka's clients:
//!
//! | id | codec  | framing                                                        |
//! |----|--------|----------------------------------------------------------------|
//! | 1  | gzip   | a gzip member (RFC 1952)                                       |
//! | 2  | snappy | snappy-java's stream ("xerial": a 16-byte header, then blocks  |
//! |    |        | each prefixed by its big-endian length); plain raw snappy read |
//! | 3  | lz4    | an LZ4 frame (the standard frame format, as for magic 2)        |
//! | 4  | zstd   | a zstd frame                                                   |
//!
//! What is compressed is the records section of a batch (everything after the
//! 61-byte header); the header stays readable. Decompression is bounded
//! ([`decompress`]'s `limit`): a small batch cannot make the broker or a consumer
//! allocate without bound.

use std::io::{Read, Write};

/// A batch's compression codec.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
pub enum Compression {
    #[default]
    None,
    Gzip,
    Snappy,
    Lz4,
    Zstd,
}

/// Every codec, in id order.
pub const CODECS: [Compression; 5] = [
    Compression::None,
    Compression::Gzip,
    Compression::Snappy,
    Compression::Lz4,
    Compression::Zstd,
];

/// Why bytes did not compress or decompress.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum CompressionError {
    #[error("unknown compression codec {0}")]
    UnknownCodec(u8),
    #[error("{codec} data is corrupt: {reason}")]
    Corrupt { codec: &'static str, reason: String },
    #[error("decompressed records exceed {limit} bytes")]
    TooLarge { limit: usize },
    #[error("{codec} compression failed: {reason}")]
    Compress { codec: &'static str, reason: String },
}

impl Compression {
    /// The codec with Kafka's id `id` (attributes & 7).
    pub fn from_id(id: u8) -> Result<Compression, CompressionError> {
        CODECS
            .get(id as usize)
            .copied()
            .ok_or(CompressionError::UnknownCodec(id))
    }

    /// Kafka's id.
    pub fn id(self) -> u8 {
        match self {
            Compression::None => 0,
            Compression::Gzip => 1,
            Compression::Snappy => 2,
            Compression::Lz4 => 3,
            Compression::Zstd => 4,
        }
    }

    /// Kafka's name (`compression.type`).
    pub fn name(self) -> &'static str {
        match self {
            Compression::None => "none",
            Compression::Gzip => "gzip",
            Compression::Snappy => "snappy",
            Compression::Lz4 => "lz4",
            Compression::Zstd => "zstd",
        }
    }

    /// Compresses `data` whole.
    pub fn compress(self, data: &[u8]) -> Result<Vec<u8>, CompressionError> {
        let failed = |e: &dyn std::fmt::Display| CompressionError::Compress {
            codec: self.name(),
            reason: e.to_string(),
        };
        match self {
            Compression::None => Ok(data.to_vec()),
            Compression::Gzip => {
                let mut out = flate2::write::GzEncoder::new(
                    Vec::with_capacity(data.len() / 2),
                    flate2::Compression::default(),
                );
                out.write_all(data).map_err(|e| failed(&e))?;
                out.finish().map_err(|e| failed(&e))
            }
            Compression::Snappy => xerial_compress(data).map_err(|e| failed(&e)),
            Compression::Lz4 => {
                let mut out =
                    lz4_flex::frame::FrameEncoder::new(Vec::with_capacity(data.len() / 2));
                out.write_all(data).map_err(|e| failed(&e))?;
                out.finish().map_err(|e| failed(&e))
            }
            Compression::Zstd => zstd::bulk::compress(data, 3).map_err(|e| failed(&e)),
        }
    }

    /// Decompresses `data`, refusing to produce more than `limit` bytes.
    pub fn decompress(self, data: &[u8], limit: usize) -> Result<Vec<u8>, CompressionError> {
        let corrupt = |e: &dyn std::fmt::Display| CompressionError::Corrupt {
            codec: self.name(),
            reason: e.to_string(),
        };
        match self {
            Compression::None if data.len() > limit => Err(CompressionError::TooLarge { limit }),
            Compression::None => Ok(data.to_vec()),
            Compression::Gzip => {
                read_bounded(flate2::read::GzDecoder::new(data), limit).map_err(|e| e.or(corrupt))
            }
            Compression::Snappy => xerial_decompress(data, limit),
            Compression::Lz4 => read_bounded(lz4_flex::frame::FrameDecoder::new(data), limit)
                .map_err(|e| e.or(corrupt)),
            Compression::Zstd => {
                let decoder = zstd::stream::read::Decoder::new(data).map_err(|e| corrupt(&e))?;
                read_bounded(decoder, limit).map_err(|e| e.or(corrupt))
            }
        }
    }
}

impl std::fmt::Display for Compression {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.name())
    }
}

impl std::str::FromStr for Compression {
    type Err = String;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        let s = s.trim();
        CODECS
            .into_iter()
            .find(|c| c.name().eq_ignore_ascii_case(s))
            .ok_or_else(|| {
                format!(
                    "unknown compression type {s:?}: expected one of {}",
                    CODECS.map(Compression::name).join(", ")
                )
            })
    }
}

/// A read that failed: over the limit, or the decoder's own error.
enum ReadError {
    TooLarge(usize),
    Io(std::io::Error),
}

impl ReadError {
    fn or(self, corrupt: impl Fn(&dyn std::fmt::Display) -> CompressionError) -> CompressionError {
        match self {
            ReadError::TooLarge(limit) => CompressionError::TooLarge { limit },
            ReadError::Io(e) => corrupt(&e),
        }
    }
}

/// Reads `r` to its end, failing once it yields more than `limit` bytes.
fn read_bounded(r: impl Read, limit: usize) -> Result<Vec<u8>, ReadError> {
    let mut out = Vec::new();
    let cap = u64::try_from(limit).unwrap_or(u64::MAX).saturating_add(1);
    r.take(cap).read_to_end(&mut out).map_err(ReadError::Io)?;
    if out.len() > limit {
        return Err(ReadError::TooLarge(limit));
    }
    Ok(out)
}

/// snappy-java's stream header: magic, then version 1 and compatible version 1.
const XERIAL_MAGIC: [u8; 8] = [0x82, b'S', b'N', b'A', b'P', b'P', b'Y', 0];
const XERIAL_HEADER_LEN: usize = 16;
/// snappy-java's default block size.
const XERIAL_BLOCK: usize = 32 * 1024;

fn xerial_compress(data: &[u8]) -> Result<Vec<u8>, snap::Error> {
    let mut out = Vec::with_capacity(XERIAL_HEADER_LEN + data.len() / 2);
    out.extend_from_slice(&XERIAL_MAGIC);
    out.extend_from_slice(&1i32.to_be_bytes());
    out.extend_from_slice(&1i32.to_be_bytes());
    let mut encoder = snap::raw::Encoder::new();
    let mut block = vec![0u8; snap::raw::max_compress_len(XERIAL_BLOCK)];
    for chunk in data.chunks(XERIAL_BLOCK) {
        let n = encoder.compress(chunk, &mut block)?;
        out.extend_from_slice(&(n as u32).to_be_bytes());
        out.extend_from_slice(&block[..n]);
    }
    Ok(out)
}

/// snappy-java's stream, or (as snappy-java also reads) one raw snappy block.
fn xerial_decompress(data: &[u8], limit: usize) -> Result<Vec<u8>, CompressionError> {
    let corrupt = |reason: String| CompressionError::Corrupt {
        codec: "snappy",
        reason,
    };
    let mut decoder = snap::raw::Decoder::new();
    let mut raw_block = |block: &[u8], out: &mut Vec<u8>| {
        let len = snap::raw::decompress_len(block).map_err(|e| corrupt(e.to_string()))?;
        if out.len() + len > limit {
            return Err(CompressionError::TooLarge { limit });
        }
        let at = out.len();
        out.resize(at + len, 0);
        decoder
            .decompress(block, &mut out[at..])
            .map_err(|e| corrupt(e.to_string()))?;
        Ok(())
    };
    let mut out = Vec::new();
    if !data.starts_with(&XERIAL_MAGIC) {
        raw_block(data, &mut out)?;
        return Ok(out);
    }
    let mut rest = data
        .get(XERIAL_HEADER_LEN..)
        .ok_or_else(|| corrupt("stream header cut short".into()))?;
    while !rest.is_empty() {
        let (len, tail) = rest
            .split_first_chunk::<4>()
            .ok_or_else(|| corrupt("block length cut short".into()))?;
        let len = u32::from_be_bytes(*len) as usize;
        let block = tail
            .get(..len)
            .ok_or_else(|| corrupt("block cut short".into()))?;
        raw_block(block, &mut out)?;
        rest = &tail[len..];
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn sample() -> Vec<u8> {
        // Records-like bytes: repetitive, as 1 KiB benchmark records are.
        (0..100_000u32).map(|i| (i % 251) as u8 ^ b'a').collect()
    }

    #[test]
    fn every_codec_round_trips_and_compresses_repetitive_records() {
        let data = sample();
        for codec in CODECS {
            let packed = codec.compress(&data).unwrap();
            if codec != Compression::None {
                assert!(
                    packed.len() < data.len() / 4,
                    "{codec}: {} of {}",
                    packed.len(),
                    data.len()
                );
            }
            assert_eq!(
                codec.decompress(&packed, data.len()).unwrap(),
                data,
                "{codec}"
            );
            assert_eq!(Compression::from_id(codec.id()).unwrap(), codec);
            assert_eq!(codec.name().parse::<Compression>().unwrap(), codec);
        }
        assert_eq!(
            Compression::from_id(5),
            Err(CompressionError::UnknownCodec(5))
        );
        let err = "brotli".parse::<Compression>().unwrap_err();
        assert!(err.contains("gzip, snappy, lz4, zstd"), "{err}");
    }

    #[test]
    fn decompression_stops_at_the_limit() {
        // A small input that expands a thousandfold.
        let data = vec![0u8; 1_000_000];
        for codec in CODECS {
            let packed = codec.compress(&data).unwrap();
            assert_eq!(
                codec.decompress(&packed, 999_999),
                Err(CompressionError::TooLarge { limit: 999_999 }),
                "{codec}"
            );
            assert!(codec.decompress(&packed, 1_000_000).is_ok(), "{codec}");
        }
    }

    #[test]
    fn snappy_uses_snappy_javas_stream_and_reads_a_raw_block_too() {
        let data = sample();
        let packed = Compression::Snappy.compress(&data).unwrap();
        assert_eq!(&packed[..8], &XERIAL_MAGIC);
        assert_eq!(&packed[8..16], &[0, 0, 0, 1, 0, 0, 0, 1]);
        let raw = snap::raw::Encoder::new().compress_vec(&data).unwrap();
        assert_eq!(
            Compression::Snappy.decompress(&raw, data.len()).unwrap(),
            data
        );
    }

    #[test]
    fn corrupt_input_is_an_error_for_every_codec() {
        let data = sample();
        for codec in CODECS.into_iter().skip(1) {
            let mut packed = codec.compress(&data).unwrap();
            let mid = packed.len() / 2;
            packed.truncate(mid);
            assert!(
                matches!(
                    codec.decompress(&packed, data.len()),
                    Err(CompressionError::Corrupt { .. })
                ),
                "{codec}: a cut stream decoded"
            );
        }
    }

    proptest! {
        #[test]
        fn any_bytes_round_trip(data in proptest::collection::vec(any::<u8>(), 0..4096), id in 0u8..5) {
            let codec = Compression::from_id(id).unwrap();
            let packed = codec.compress(&data).unwrap();
            prop_assert_eq!(codec.decompress(&packed, data.len()).unwrap(), data);
        }

        #[test]
        fn garbage_never_panics(data in proptest::collection::vec(any::<u8>(), 0..512), id in 1u8..5) {
            let codec = Compression::from_id(id).unwrap();
            let _ = codec.decompress(&data, 1 << 16);
        }
    }
}
