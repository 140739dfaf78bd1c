//! Batches built with `BatchBuilder` from arbitrary records, as a producer builds
//! them: the size the builder predicts is the size it writes, the batch validates
//! (stamped or not, compressed with any codec or not) and reads back to the same
//! records and headers. Then the
//! batch is damaged: one flipped byte in what the CRC or size checks cover must be
//! refused; any number of mutations, a cut or extra bytes must never panic.
#![no_main]

use arbitrary::Arbitrary;
use libfuzzer_sys::fuzz_target;
use syncline_proto::batch::{self, BatchBuilder, BatchError};
use syncline_proto::compression::Compression;

type Header = (Vec<u8>, Option<Vec<u8>>);

#[derive(Debug, Arbitrary)]
struct Rec {
    timestamp: i64,
    key: Option<Vec<u8>>,
    value: Option<Vec<u8>>,
    headers: Vec<Header>,
}

#[derive(Debug, Arbitrary)]
enum Damage {
    /// XOR one byte (a non-zero mask) at an index taken modulo the length.
    Flip(usize, u8),
    /// Overwrite one byte.
    Set(usize, u8),
    /// Cut the batch to this length (modulo the length).
    Cut(usize),
    /// Append bytes.
    Extend(Vec<u8>),
}

#[derive(Debug, Arbitrary)]
struct Input {
    base_timestamp: i64,
    records: Vec<Rec>,
    stamp: Option<(i64, i32)>,
    damage: Vec<Damage>,
    /// Fix the length and CRC after the damage (to reach the record framing).
    refix: bool,
    /// Compression codec id, modulo the five there are.
    codec: u8,
}

fuzz_target!(|input: Input| {
    if input.records.is_empty() {
        return;
    }
    let base = input.base_timestamp;
    let mut builder = BatchBuilder::with_capacity(base, 0);
    for r in &input.records {
        let headers: Vec<(&[u8], Option<&[u8]>)> = r
            .headers
            .iter()
            .map(|(k, v)| (k.as_slice(), v.as_deref()))
            .collect();
        let before = builder.size_bytes();
        let delta = r.timestamp.wrapping_sub(base);
        let predicted = BatchBuilder::record_size(
            builder.len() as i32,
            delta,
            r.key.as_deref(),
            r.value.as_deref(),
            &headers,
        );
        builder.push(r.timestamp, r.key.as_deref(), r.value.as_deref(), &headers);
        assert_eq!(builder.size_bytes() - before, predicted, "record_size");
    }
    assert_eq!(builder.len(), input.records.len());
    let codec = Compression::from_id(input.codec % 5).expect("a codec");
    let mut bytes = builder.finish_with(codec).to_vec();
    let (base_offset, epoch) = input.stamp.unwrap_or((0, -1));
    batch::stamp(&mut bytes, base_offset, epoch);
    let overflows = base_offset
        .checked_add(input.records.len() as i64)
        .is_none();
    let header = match batch::validate(&bytes) {
        Ok(h) => h,
        // A stamp so high that the offsets overflow may be refused; nothing else.
        Err(BatchError::BadRecords(_)) if overflows => return,
        Err(e) => panic!("a built batch does not validate: {e}"),
    };
    assert_eq!(header.base_offset, base_offset);
    assert_eq!(header.partition_leader_epoch, epoch);
    assert_eq!(header.records_count as usize, input.records.len());
    assert_eq!(header.base_timestamp, base);
    let max_ts = input
        .records
        .iter()
        .map(|r| r.timestamp)
        .max()
        .unwrap()
        .max(base);
    assert_eq!(header.max_timestamp, max_ts);
    assert_eq!(header.codec(), Ok(codec));
    let read = batch::records(&bytes).expect("reads");
    let mut n = 0;
    for (got, want) in read.iter().zip(&input.records) {
        let got = got.expect("a built record reads");
        assert_eq!(got.offset, base_offset + n as i64);
        assert_eq!(got.timestamp, want.timestamp);
        assert_eq!(got.view.key, want.key.as_deref());
        assert_eq!(got.view.value, want.value.as_deref());
        let headers: Vec<Header> = got
            .view
            .headers()
            .map(|h| (h.key.to_vec(), h.value.map(<[u8]>::to_vec)))
            .collect();
        assert_eq!(headers, want.headers);
        n += 1;
    }
    assert_eq!(n, input.records.len());
    syncline_fuzz::check_one_batch(&bytes);

    // One flipped byte past the stamp (bytes 0..8 and 12..16 are not checked).
    if let Some(Damage::Flip(at, mask)) = input.damage.first() {
        let at = at % bytes.len();
        if *mask != 0 && !(0..8).contains(&at) && !(12..16).contains(&at) {
            let mut one = bytes.clone();
            one[at] ^= mask;
            assert!(
                batch::validate(&one).is_err(),
                "byte {at} flipped by {mask:#04x} passes validation"
            );
        }
    }
    for d in &input.damage {
        match d {
            Damage::Flip(at, mask) => {
                let len = bytes.len();
                if len > 0 {
                    bytes[at % len] ^= mask;
                }
            }
            Damage::Set(at, v) => {
                let len = bytes.len();
                if len > 0 {
                    bytes[at % len] = *v;
                }
            }
            Damage::Cut(at) => {
                let len = bytes.len();
                if len > 0 {
                    bytes.truncate(at % len);
                }
            }
            Damage::Extend(more) => bytes.extend_from_slice(more),
        }
    }
    if input.refix {
        syncline_fuzz::fix_length_and_crc(&mut bytes, true, true);
    }
    syncline_fuzz::check_one_batch(&bytes);
    syncline_fuzz::check_batches(&bytes);
});
