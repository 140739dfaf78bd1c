//! Kafka's RecordBatch v2 layout: the unit that is produced, stored, replicated and
//! fetched. The broker never re-encodes records: the leader only stamps
//! `base_offset` and `partition_leader_epoch`, which sit before the CRC-covered
//! region, so stamping never recomputes the CRC.
//!
//! ```text
//! offset  field                   size
//!      0  base_offset              i64   (stamped by the leader)
//!      8  batch_length             i32   (bytes after this field)
//!     12  partition_leader_epoch   i32   (stamped by the leader)
//!     16  magic                    i8    = 2
//!     17  crc                      u32   CRC-32C of bytes 21..end
//!     21  attributes               i16
//!     23  last_offset_delta        i32
//!     27  base_timestamp           i64
//!     35  max_timestamp            i64
//!     43  producer_id              i64
//!     51  producer_epoch           i16
//!     53  base_sequence            i32
//!     57  records_count            i32
//!     61  records (varint encoded)
//! ```

use bytes::{BufMut, Bytes, BytesMut};

use crate::compression::{Compression, CompressionError};

/// Bytes before the first record.
pub const HEADER_LEN: usize = 61;
/// Bytes of `base_offset` + `batch_length`: a batch's total size is this plus
/// `batch_length`.
pub const LOG_OVERHEAD: usize = 12;
/// The only supported batch format.
pub const MAGIC: i8 = 2;

const BATCH_LENGTH_AT: usize = 8;
const LEADER_EPOCH_AT: usize = 12;
const MAGIC_AT: usize = 16;
const CRC_AT: usize = 17;
const ATTRIBUTES_AT: usize = 21;
const LAST_OFFSET_DELTA_AT: usize = 23;
const BASE_TIMESTAMP_AT: usize = 27;
const MAX_TIMESTAMP_AT: usize = 35;
const PRODUCER_ID_AT: usize = 43;
const PRODUCER_EPOCH_AT: usize = 51;
const BASE_SEQUENCE_AT: usize = 53;
const RECORDS_COUNT_AT: usize = 57;

/// Low three bits of `attributes`: the compression codec.
const COMPRESSION_MASK: i16 = 0x07;
/// Bit 3 of `attributes`: the timestamps are the broker's append time
/// (`max_timestamp`, for every record), not the producer's create time.
pub const LOG_APPEND_TIME_FLAG: i16 = 0x08;

/// Most bytes the records of one compressed batch may decompress to: bounds what a
/// small batch can make the broker (which validates it) or a consumer allocate.
/// Kafka producers' batches are 16 KiB by default; 1 MiB of text rarely
/// compresses beyond 20×.
pub const MAX_DECOMPRESSED_LEN: usize = 64 * 1024 * 1024;

/// Why bytes are not a valid batch. Every variant maps to `CORRUPT_MESSAGE` on the
/// wire except [`BatchError::Compressed`] (`UNSUPPORTED_COMPRESSION_TYPE`) and
/// records decompressing past [`MAX_DECOMPRESSED_LEN`] (`MESSAGE_TOO_LARGE`).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum BatchError {
    #[error("batch truncated: needs {needed} bytes, {available} available")]
    Truncated { needed: usize, available: usize },
    #[error("batch length {0} is out of range")]
    BadLength(i32),
    #[error("unsupported batch magic {0} (only 2 is supported)")]
    BadMagic(i8),
    #[error("batch CRC mismatch: header says {stored:#010x}, bytes give {computed:#010x}")]
    CrcMismatch { stored: u32, computed: u32 },
    #[error("unknown compression codec {0} (known: 0 none, 1 gzip, 2 snappy, 3 lz4, 4 zstd)")]
    Compressed(u8),
    #[error("compressed records: {0}")]
    Decompression(CompressionError),
    #[error("malformed records: {0}")]
    BadRecords(&'static str),
}

/// The fixed-size header of a batch.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct BatchHeader {
    pub base_offset: i64,
    pub batch_length: i32,
    pub partition_leader_epoch: i32,
    pub magic: i8,
    pub crc: u32,
    pub attributes: i16,
    pub last_offset_delta: i32,
    pub base_timestamp: i64,
    pub max_timestamp: i64,
    pub producer_id: i64,
    pub producer_epoch: i16,
    pub base_sequence: i32,
    pub records_count: i32,
}

fn i16_at(b: &[u8], at: usize) -> i16 {
    i16::from_be_bytes([b[at], b[at + 1]])
}
fn i32_at(b: &[u8], at: usize) -> i32 {
    i32::from_be_bytes(b[at..at + 4].try_into().expect("4 bytes"))
}
fn i64_at(b: &[u8], at: usize) -> i64 {
    i64::from_be_bytes(b[at..at + 8].try_into().expect("8 bytes"))
}

impl BatchHeader {
    /// Parses the header at the start of `buf`. Checks sizes and magic only; see
    /// [`validate`] for the full check.
    pub fn parse(buf: &[u8]) -> Result<Self, BatchError> {
        if buf.len() < HEADER_LEN {
            return Err(BatchError::Truncated {
                needed: HEADER_LEN,
                available: buf.len(),
            });
        }
        let batch_length = i32_at(buf, BATCH_LENGTH_AT);
        if batch_length < (HEADER_LEN - LOG_OVERHEAD) as i32 {
            return Err(BatchError::BadLength(batch_length));
        }
        let magic = buf[MAGIC_AT] as i8;
        if magic != MAGIC {
            return Err(BatchError::BadMagic(magic));
        }
        Ok(BatchHeader {
            base_offset: i64_at(buf, 0),
            batch_length,
            partition_leader_epoch: i32_at(buf, LEADER_EPOCH_AT),
            magic,
            crc: u32::from_be_bytes(buf[CRC_AT..CRC_AT + 4].try_into().expect("4 bytes")),
            attributes: i16_at(buf, ATTRIBUTES_AT),
            last_offset_delta: i32_at(buf, LAST_OFFSET_DELTA_AT),
            base_timestamp: i64_at(buf, BASE_TIMESTAMP_AT),
            max_timestamp: i64_at(buf, MAX_TIMESTAMP_AT),
            producer_id: i64_at(buf, PRODUCER_ID_AT),
            producer_epoch: i16_at(buf, PRODUCER_EPOCH_AT),
            base_sequence: i32_at(buf, BASE_SEQUENCE_AT),
            records_count: i32_at(buf, RECORDS_COUNT_AT),
        })
    }

    /// Size of the whole batch in bytes, header included.
    pub fn total_len(&self) -> usize {
        LOG_OVERHEAD + self.batch_length as usize
    }

    /// Offset of the batch's last record.
    pub fn last_offset(&self) -> i64 {
        self.base_offset + i64::from(self.last_offset_delta)
    }

    /// The offset after this batch.
    pub fn next_offset(&self) -> i64 {
        self.last_offset() + 1
    }

    /// Compression codec id (0 = none).
    /// The batch carries the broker's append time (`max_timestamp`) as every
    /// record's timestamp.
    pub fn is_log_append_time(&self) -> bool {
        self.attributes & LOG_APPEND_TIME_FLAG != 0
    }

    pub fn compression(&self) -> u8 {
        (self.attributes & COMPRESSION_MASK) as u8
    }

    /// The compression codec; an unknown id is [`BatchError::Compressed`].
    pub fn codec(&self) -> Result<Compression, BatchError> {
        Compression::from_id(self.compression())
            .map_err(|_| BatchError::Compressed(self.compression()))
    }
}

/// A batch's records section: borrowed from the batch, or decompressed.
#[derive(Debug, Clone)]
enum Section<'a> {
    Borrowed(&'a [u8]),
    Decompressed(Bytes),
}

impl Section<'_> {
    fn bytes(&self) -> &[u8] {
        match self {
            Section::Borrowed(b) => b,
            Section::Decompressed(b) => b,
        }
    }
}

/// The records section of a whole batch, decompressed when the batch is
/// compressed (borrowed when it is not).
fn records_section<'a>(header: &BatchHeader, batch: &'a [u8]) -> Result<Section<'a>, BatchError> {
    let section = &batch[HEADER_LEN..header.total_len()];
    match header.codec()? {
        Compression::None => Ok(Section::Borrowed(section)),
        codec => codec
            .decompress(section, MAX_DECOMPRESSED_LEN)
            .map(|v| Section::Decompressed(Bytes::from(v)))
            .map_err(BatchError::Decompression),
    }
}

/// CRC-32C of the CRC-covered region (`attributes` to the end) of a whole batch.
pub fn compute_crc(batch: &[u8]) -> u32 {
    crc32c::crc32c(&batch[ATTRIBUTES_AT..])
}

/// Checks one whole batch (exactly `batch.len()` bytes): sizes, magic, CRC, and the
/// record framing (count, sequential offset deltas, lengths), without allocating
/// unless the batch is compressed (its records are then decompressed, bounded by
/// [`MAX_DECOMPRESSED_LEN`], and checked the same way).
pub fn validate(batch: &[u8]) -> Result<BatchHeader, BatchError> {
    validated_records(batch).map(|set| set.header)
}

/// As [`validate`], returning the records too (a compressed batch is decompressed
/// once for both).
pub fn validated_records(batch: &[u8]) -> Result<RecordSet<'_>, BatchError> {
    let header = verify_crc(batch)?;
    header.codec()?;
    if header.records_count <= 0 {
        return Err(BatchError::BadRecords(
            "a batch must hold at least one record",
        ));
    }
    if header.last_offset_delta != header.records_count - 1 {
        return Err(BatchError::BadRecords(
            "last_offset_delta does not match the record count",
        ));
    }
    // `next_offset` (what a consumer computes for every batch) must not overflow
    // (found by fuzzing: a batch stamped at i64::MAX passed).
    if header
        .base_offset
        .checked_add(i64::from(header.records_count))
        .is_none()
    {
        return Err(BatchError::BadRecords("offsets overflow"));
    }
    let set = RecordSet {
        header,
        section: records_section(&header, batch)?,
    };
    let mut rest = set.section.bytes();
    for expected_delta in 0..header.records_count {
        let record = RecordView::parse(&mut rest)?;
        if record.offset_delta != expected_delta {
            return Err(BatchError::BadRecords("offset deltas are not 0, 1, 2, ..."));
        }
    }
    if !rest.is_empty() {
        return Err(BatchError::BadRecords("bytes after the last record"));
    }
    Ok(set)
}

/// One whole, validated batch with its records in `codec`: the same header
/// fields (producer id, sequence, timestamps, the other attribute bits), a new
/// length and CRC. `None` when the batch already is in `codec`.
pub fn recompress(batch: &[u8], codec: Compression) -> Result<Option<Vec<u8>>, BatchError> {
    let header = BatchHeader::parse(batch)?;
    if header.compression() == codec.id() {
        return Ok(None);
    }
    let section = records_section(&header, batch)?;
    let packed = codec
        .compress(section.bytes())
        .map_err(BatchError::Decompression)?;
    let mut out = Vec::with_capacity(HEADER_LEN + packed.len());
    out.extend_from_slice(&batch[..HEADER_LEN]);
    out.extend_from_slice(&packed);
    let length = i32::try_from(out.len() - LOG_OVERHEAD)
        .map_err(|_| BatchError::BadRecords("recompressed batch too large"))?;
    out[BATCH_LENGTH_AT..BATCH_LENGTH_AT + 4].copy_from_slice(&length.to_be_bytes());
    let attributes = (header.attributes & !COMPRESSION_MASK) | i16::from(codec.id());
    out[ATTRIBUTES_AT..ATTRIBUTES_AT + 2].copy_from_slice(&attributes.to_be_bytes());
    let crc = compute_crc(&out);
    out[CRC_AT..CRC_AT + 4].copy_from_slice(&crc.to_be_bytes());
    Ok(Some(out))
}

/// Every batch of `buf` (validated) in `codec`: `buf` itself when all already are.
pub fn recompress_all(buf: &Bytes, codec: Compression) -> Result<Bytes, BatchError> {
    let mut out: Option<BytesMut> = None;
    let mut done = 0;
    for b in split(buf) {
        let (header, bytes) = b?;
        if let Some(packed) = recompress(bytes, codec)? {
            let out = out.get_or_insert_with(|| {
                let mut o = BytesMut::with_capacity(buf.len());
                o.extend_from_slice(&buf[..done]);
                o
            });
            out.extend_from_slice(&packed);
        } else if let Some(out) = &mut out {
            out.extend_from_slice(bytes);
        }
        done += header.total_len();
    }
    Ok(out.map_or_else(|| buf.clone(), BytesMut::freeze))
}

/// Every batch of `buf` (validated) stamped with the broker's append time, as
/// Kafka's `message.timestamp.type=LogAppendTime` does: the timestamp-type bit
/// set, `max_timestamp` = `now_ms` (every record's timestamp, for readers), and
/// the CRC recomputed. The records themselves are untouched.
pub fn with_log_append_time(buf: &Bytes, now_ms: i64) -> Result<Bytes, BatchError> {
    let mut out = BytesMut::from(&buf[..]);
    let mut at = 0;
    while at < out.len() {
        let header = BatchHeader::parse(&out[at..])?;
        let end = at + header.total_len();
        if end > out.len() {
            return Err(BatchError::Truncated {
                needed: header.total_len(),
                available: out.len() - at,
            });
        }
        let batch = &mut out[at..end];
        let attributes = header.attributes | LOG_APPEND_TIME_FLAG;
        batch[ATTRIBUTES_AT..ATTRIBUTES_AT + 2].copy_from_slice(&attributes.to_be_bytes());
        batch[MAX_TIMESTAMP_AT..MAX_TIMESTAMP_AT + 8].copy_from_slice(&now_ms.to_be_bytes());
        let crc = compute_crc(batch);
        batch[CRC_AT..CRC_AT + 4].copy_from_slice(&crc.to_be_bytes());
        at = end;
    }
    Ok(out.freeze())
}

/// Checks the CRC and sizes of one whole batch (what a follower checks on bytes
/// that the leader validated already).
pub fn verify_crc(batch: &[u8]) -> Result<BatchHeader, BatchError> {
    let header = BatchHeader::parse(batch)?;
    if header.total_len() != batch.len() {
        return Err(BatchError::Truncated {
            needed: header.total_len(),
            available: batch.len(),
        });
    }
    let computed = compute_crc(batch);
    if computed != header.crc {
        return Err(BatchError::CrcMismatch {
            stored: header.crc,
            computed,
        });
    }
    Ok(header)
}

/// Splits a buffer of concatenated batches into whole batches. Stops with an error
/// at the first batch whose header is bad or whose bytes are cut short.
pub fn split(buf: &[u8]) -> Batches<'_> {
    Batches { rest: buf }
}

/// Iterator returned by [`split`].
#[derive(Debug, Clone)]
pub struct Batches<'a> {
    rest: &'a [u8],
}

impl<'a> Iterator for Batches<'a> {
    type Item = Result<(BatchHeader, &'a [u8]), BatchError>;

    fn next(&mut self) -> Option<Self::Item> {
        if self.rest.is_empty() {
            return None;
        }
        let header = match BatchHeader::parse(self.rest) {
            Ok(h) => h,
            Err(e) => {
                self.rest = &[];
                return Some(Err(e));
            }
        };
        let len = header.total_len();
        if len > self.rest.len() {
            let available = self.rest.len();
            self.rest = &[];
            return Some(Err(BatchError::Truncated {
                needed: len,
                available,
            }));
        }
        let (batch, rest) = self.rest.split_at(len);
        self.rest = rest;
        Some(Ok((header, batch)))
    }
}

/// An idempotent producer's sequence number after `s` (they wrap from
/// `i32::MAX` to 0, as Kafka's).
pub fn next_sequence(s: i32) -> i32 {
    if s == i32::MAX {
        0
    } else {
        s + 1
    }
}

/// The last sequence number of a batch of `count` records starting at `first`.
pub fn last_sequence(first: i32, count: i32) -> i32 {
    let last = i64::from(first) + i64::from(count.max(1)) - 1;
    (last % (i64::from(i32::MAX) + 1)) as i32
}

/// Writes the leader's stamp into a batch header: its first offset and the epoch of
/// the leader that appended it. Neither field is covered by the CRC.
pub fn stamp(batch: &mut [u8], base_offset: i64, partition_leader_epoch: i32) {
    batch[..8].copy_from_slice(&base_offset.to_be_bytes());
    batch[LEADER_EPOCH_AT..LEADER_EPOCH_AT + 4]
        .copy_from_slice(&partition_leader_epoch.to_be_bytes());
}

/// Gives an encoded batch another producer id, epoch and base sequence, and its
/// CRC anew (they are covered by it): what an idempotent producer does to a batch
/// it must send again under a new epoch. The batch must be a whole, valid one.
pub fn restamp_producer(
    batch: &mut [u8],
    producer_id: i64,
    producer_epoch: i16,
    base_sequence: i32,
) {
    batch[PRODUCER_ID_AT..PRODUCER_ID_AT + 8].copy_from_slice(&producer_id.to_be_bytes());
    batch[PRODUCER_EPOCH_AT..PRODUCER_EPOCH_AT + 2].copy_from_slice(&producer_epoch.to_be_bytes());
    batch[BASE_SEQUENCE_AT..BASE_SEQUENCE_AT + 4].copy_from_slice(&base_sequence.to_be_bytes());
    let crc = compute_crc(batch);
    batch[CRC_AT..CRC_AT + 4].copy_from_slice(&crc.to_be_bytes());
}

/// The first 17 bytes of a batch (up to and including `magic`) with the leader's
/// stamp applied: lets a writer send the stamp and then the untouched rest of the
/// producer's bytes without copying them.
pub fn stamped_prefix(batch: &[u8], base_offset: i64, partition_leader_epoch: i32) -> [u8; 17] {
    let mut prefix = [0u8; 17];
    prefix.copy_from_slice(&batch[..17]);
    stamp(&mut prefix, base_offset, partition_leader_epoch);
    prefix
}

/// Length of the stamped prefix (see [`stamped_prefix`]).
pub const STAMPED_PREFIX_LEN: usize = 17;

// --- varints (zigzag, as Kafka's records use) ---

fn read_uvarint(buf: &mut &[u8]) -> Result<u64, BatchError> {
    let mut value = 0u64;
    for i in 0..10 {
        let (&byte, rest) = buf
            .split_first()
            .ok_or(BatchError::BadRecords("varint cut short"))?;
        *buf = rest;
        value |= u64::from(byte & 0x7f) << (7 * i);
        if byte & 0x80 == 0 {
            return Ok(value);
        }
    }
    Err(BatchError::BadRecords("varint longer than 10 bytes"))
}

fn read_varlong(buf: &mut &[u8]) -> Result<i64, BatchError> {
    let raw = read_uvarint(buf)?;
    Ok(((raw >> 1) as i64) ^ -((raw & 1) as i64))
}

fn read_varint(buf: &mut &[u8]) -> Result<i32, BatchError> {
    let v = read_varlong(buf)?;
    i32::try_from(v).map_err(|_| BatchError::BadRecords("varint out of i32 range"))
}

fn put_varlong(out: &mut BytesMut, v: i64) {
    let mut raw = ((v << 1) ^ (v >> 63)) as u64;
    while raw >= 0x80 {
        out.put_u8((raw as u8) | 0x80);
        raw >>= 7;
    }
    out.put_u8(raw as u8);
}

fn varlong_len(v: i64) -> usize {
    let raw = ((v << 1) ^ (v >> 63)) as u64;
    let bits = 64 - raw.leading_zeros() as usize;
    bits.max(1).div_ceil(7)
}

fn take<'a>(buf: &mut &'a [u8], len: usize) -> Result<&'a [u8], BatchError> {
    if buf.len() < len {
        return Err(BatchError::BadRecords("field longer than the record"));
    }
    let (head, rest) = buf.split_at(len);
    *buf = rest;
    Ok(head)
}

/// A nullable byte field: length -1 is null.
fn read_nullable<'a>(buf: &mut &'a [u8]) -> Result<Option<&'a [u8]>, BatchError> {
    let len = read_varint(buf)?;
    match len {
        -1 => Ok(None),
        l if l < 0 => Err(BatchError::BadRecords("negative field length")),
        l => take(buf, l as usize).map(Some),
    }
}

/// A record header (key/value pair attached to a record).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct HeaderView<'a> {
    pub key: &'a [u8],
    pub value: Option<&'a [u8]>,
}

/// One record, borrowed from its batch.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RecordView<'a> {
    pub attributes: i8,
    pub timestamp_delta: i64,
    pub offset_delta: i32,
    pub key: Option<&'a [u8]>,
    pub value: Option<&'a [u8]>,
    headers: &'a [u8],
    header_count: i32,
}

impl<'a> RecordView<'a> {
    /// Parses one record from the front of `buf` and advances it.
    fn parse(buf: &mut &'a [u8]) -> Result<Self, BatchError> {
        let len = read_varint(buf)?;
        if len < 0 {
            return Err(BatchError::BadRecords("negative record length"));
        }
        let mut body = take(buf, len as usize)?;
        let (&attributes, rest) = body
            .split_first()
            .ok_or(BatchError::BadRecords("empty record"))?;
        body = rest;
        let timestamp_delta = read_varlong(&mut body)?;
        let offset_delta = read_varint(&mut body)?;
        let key = read_nullable(&mut body)?;
        let value = read_nullable(&mut body)?;
        let header_count = read_varint(&mut body)?;
        if header_count < 0 {
            return Err(BatchError::BadRecords("negative header count"));
        }
        let headers = body;
        let mut check = headers;
        for _ in 0..header_count {
            let key_len = read_varint(&mut check)?;
            if key_len < 0 {
                return Err(BatchError::BadRecords("header key is null"));
            }
            take(&mut check, key_len as usize)?;
            read_nullable(&mut check)?;
        }
        if !check.is_empty() {
            return Err(BatchError::BadRecords("bytes after the record's headers"));
        }
        Ok(RecordView {
            attributes: attributes as i8,
            timestamp_delta,
            offset_delta,
            key,
            value,
            headers,
            header_count,
        })
    }

    /// The record's headers.
    pub fn headers(&self) -> impl Iterator<Item = HeaderView<'a>> + '_ {
        let mut rest = self.headers;
        (0..self.header_count).map(move |_| {
            // Validated when the record was parsed.
            let key_len = read_varint(&mut rest).unwrap_or(0).max(0) as usize;
            let key = take(&mut rest, key_len).unwrap_or_default();
            let value = read_nullable(&mut rest).unwrap_or(None);
            HeaderView { key, value }
        })
    }
}

/// A record with its absolute offset and timestamp.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Record<'a> {
    pub offset: i64,
    pub timestamp: i64,
    pub view: RecordView<'a>,
}

/// The records of one batch (decompressed if it is compressed): iterate with
/// [`RecordSet::iter`].
pub fn records(batch: &[u8]) -> Result<RecordSet<'_>, BatchError> {
    let header = BatchHeader::parse(batch)?;
    if batch.len() < header.total_len() {
        return Err(BatchError::Truncated {
            needed: header.total_len(),
            available: batch.len(),
        });
    }
    let section = records_section(&header, batch)?;
    Ok(RecordSet { header, section })
}

/// One batch's records, as [`records`] returns them.
#[derive(Debug, Clone)]
pub struct RecordSet<'a> {
    header: BatchHeader,
    section: Section<'a>,
}

impl RecordSet<'_> {
    /// The batch's header.
    pub fn header(&self) -> &BatchHeader {
        &self.header
    }

    /// The decompressed records section, when the batch is compressed: the
    /// records' keys and values borrow from it (from the batch otherwise), so a
    /// reader may keep them as slices of it.
    pub fn decompressed(&self) -> Option<&Bytes> {
        match &self.section {
            Section::Borrowed(_) => None,
            Section::Decompressed(b) => Some(b),
        }
    }

    /// Iterates over the records.
    pub fn iter(&self) -> Records<'_> {
        Records {
            header: self.header,
            rest: self.section.bytes(),
            remaining: self.header.records_count.max(0),
        }
    }
}

/// Iterator returned by [`records`].
#[derive(Debug, Clone)]
pub struct Records<'a> {
    header: BatchHeader,
    rest: &'a [u8],
    remaining: i32,
}

impl<'a> Iterator for Records<'a> {
    type Item = Result<Record<'a>, BatchError>;

    fn next(&mut self) -> Option<Self::Item> {
        if self.remaining == 0 {
            return None;
        }
        self.remaining -= 1;
        let parsed = RecordView::parse(&mut self.rest).and_then(|view| {
            // Unvalidated bytes may hold any delta (found by fuzzing).
            self.header
                .base_offset
                .checked_add(i64::from(view.offset_delta))
                .map(|offset| (offset, view))
                .ok_or(BatchError::BadRecords("record offset overflows"))
        });
        match parsed {
            Ok((offset, view)) => Some(Ok(Record {
                offset,
                // LogAppendTime: the broker's time, for every record. Else two's
                // complement, as Kafka reads it (and the builder writes it).
                timestamp: if self.header.is_log_append_time() {
                    self.header.max_timestamp
                } else {
                    self.header
                        .base_timestamp
                        .wrapping_add(view.timestamp_delta)
                },
                view,
            })),
            Err(e) => {
                self.remaining = 0;
                Some(Err(e))
            }
        }
    }
}

/// A record's encoded size less the part that depends on its place in a batch:
/// measured once from its key, value and headers ([`RecordLen::of`]), then
/// priced at any place ([`RecordLen::at`]) and handed to
/// [`BatchBuilder::push_measured`], so that a producer walks the fields once
/// per record however often it asks whether the record fits.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RecordLen {
    /// Key, value and headers with their length prefixes.
    fields: usize,
}

impl RecordLen {
    /// Measures a record's fields.
    pub fn of(
        key: Option<&[u8]>,
        value: Option<&[u8]>,
        headers: &[(&[u8], Option<&[u8]>)],
    ) -> Self {
        let nullable = |f: Option<&[u8]>| match f {
            None => varlong_len(-1),
            Some(b) => varlong_len(b.len() as i64) + b.len(),
        };
        RecordLen {
            fields: nullable(key)
                + nullable(value)
                + varlong_len(headers.len() as i64)
                + headers
                    .iter()
                    .map(|(k, v)| varlong_len(k.len() as i64) + k.len() + nullable(*v))
                    .sum::<usize>(),
        }
    }

    /// The record's body (all but its own length prefix) at this place.
    fn body(self, offset_delta: i32, timestamp_delta: i64) -> usize {
        // The attributes byte, then the two deltas.
        1 + varlong_len(timestamp_delta) + varlong_len(i64::from(offset_delta)) + self.fields
    }

    /// The record's whole encoded size at this place in a batch.
    pub fn at(self, offset_delta: i32, timestamp_delta: i64) -> usize {
        let body = self.body(offset_delta, timestamp_delta);
        varlong_len(body as i64) + body
    }
}

/// Builds one uncompressed batch, as a producer does. Offsets are relative (the
/// leader stamps the base offset); the epoch is left at -1.
#[derive(Debug)]
pub struct BatchBuilder {
    buf: BytesMut,
    count: i32,
    base_timestamp: i64,
    max_timestamp: i64,
    /// Producer id, epoch and base sequence (-1, -1, -1: not idempotent).
    producer: (i64, i16, i32),
}

impl BatchBuilder {
    /// A builder for records whose timestamps are relative to `base_timestamp`.
    pub fn new(base_timestamp: i64) -> Self {
        Self::with_capacity(base_timestamp, 1024)
    }

    /// As [`BatchBuilder::new`], reserving room for `capacity` bytes of records.
    pub fn with_capacity(base_timestamp: i64, capacity: usize) -> Self {
        Self::with_buffer(
            base_timestamp,
            BytesMut::with_capacity(HEADER_LEN + capacity),
        )
    }

    /// As [`BatchBuilder::new`], writing into `buf` (emptied first): a finished
    /// batch's buffer, reused once nothing holds its bytes any more.
    pub fn with_buffer(base_timestamp: i64, mut buf: BytesMut) -> Self {
        buf.clear();
        buf.resize(HEADER_LEN, 0);
        BatchBuilder {
            buf,
            count: 0,
            base_timestamp,
            max_timestamp: base_timestamp,
            producer: (-1, -1, -1),
        }
    }

    /// Marks the batch as an idempotent producer's: its producer id and epoch, and
    /// the sequence number of its first record.
    pub fn set_producer(&mut self, producer_id: i64, producer_epoch: i16, base_sequence: i32) {
        self.producer = (producer_id, producer_epoch, base_sequence);
    }

    /// Number of records so far.
    pub fn len(&self) -> usize {
        self.count as usize
    }

    /// True when no record was added.
    pub fn is_empty(&self) -> bool {
        self.count == 0
    }

    /// Size of the batch if finished now.
    pub fn size_bytes(&self) -> usize {
        self.buf.len()
    }

    /// Encoded size of a record with these fields (for batch-size accounting).
    pub fn record_size(
        offset_delta: i32,
        timestamp_delta: i64,
        key: Option<&[u8]>,
        value: Option<&[u8]>,
        headers: &[(&[u8], Option<&[u8]>)],
    ) -> usize {
        RecordLen::of(key, value, headers).at(offset_delta, timestamp_delta)
    }

    /// Appends a record.
    pub fn push(
        &mut self,
        timestamp: i64,
        key: Option<&[u8]>,
        value: Option<&[u8]>,
        headers: &[(&[u8], Option<&[u8]>)],
    ) {
        self.push_measured(
            RecordLen::of(key, value, headers),
            timestamp,
            key,
            value,
            headers,
        );
    }

    /// As [`BatchBuilder::push`], with the record's [`RecordLen`] measured
    /// already (by whoever priced it against the batch's room), so that the
    /// fields are not walked again.
    pub fn push_measured(
        &mut self,
        len: RecordLen,
        timestamp: i64,
        key: Option<&[u8]>,
        value: Option<&[u8]>,
        headers: &[(&[u8], Option<&[u8]>)],
    ) {
        debug_assert_eq!(len, RecordLen::of(key, value, headers));
        // Two's complement, as Kafka's producer computes it: `records` adds it back
        // the same way, so any two timestamps round-trip (found by fuzzing).
        let delta = timestamp.wrapping_sub(self.base_timestamp);
        self.max_timestamp = self.max_timestamp.max(timestamp);
        let body = len.body(self.count, delta);
        let out = &mut self.buf;
        put_varlong(out, body as i64);
        out.put_i8(0);
        put_varlong(out, delta);
        put_varlong(out, i64::from(self.count));
        let put_nullable = |out: &mut BytesMut, f: Option<&[u8]>| match f {
            None => put_varlong(out, -1),
            Some(b) => {
                put_varlong(out, b.len() as i64);
                out.put_slice(b);
            }
        };
        put_nullable(out, key);
        put_nullable(out, value);
        put_varlong(out, headers.len() as i64);
        for (k, v) in headers {
            put_varlong(out, k.len() as i64);
            out.put_slice(k);
            put_nullable(out, *v);
        }
        self.count += 1;
    }

    /// Writes the header and CRC and returns the batch.
    ///
    /// # Panics
    /// If no record was pushed (an empty batch is not valid).
    pub fn finish(self) -> Bytes {
        self.seal(Compression::None)
    }

    /// As [`BatchBuilder::finish`], with the records compressed by `codec`. Should
    /// the codec fail (in memory, none does below snappy's 4 GiB input bound),
    /// the batch is finished uncompressed: valid either way, and its attributes
    /// say which.
    ///
    /// # Panics
    /// If no record was pushed (an empty batch is not valid).
    pub fn finish_with(mut self, codec: Compression) -> Bytes {
        let packed = match codec {
            Compression::None => None,
            codec => codec.compress(&self.buf[HEADER_LEN..]).ok(),
        };
        match packed {
            Some(packed) => {
                self.buf.truncate(HEADER_LEN);
                self.buf.extend_from_slice(&packed);
                self.seal(codec)
            }
            None => self.seal(Compression::None),
        }
    }

    fn seal(mut self, codec: Compression) -> Bytes {
        assert!(self.count > 0, "a batch needs at least one record");
        let len = self.buf.len();
        let h = &mut self.buf[..];
        h[0..8].copy_from_slice(&0i64.to_be_bytes());
        h[BATCH_LENGTH_AT..BATCH_LENGTH_AT + 4]
            .copy_from_slice(&((len - LOG_OVERHEAD) as i32).to_be_bytes());
        h[LEADER_EPOCH_AT..LEADER_EPOCH_AT + 4].copy_from_slice(&(-1i32).to_be_bytes());
        h[MAGIC_AT] = MAGIC as u8;
        h[ATTRIBUTES_AT..ATTRIBUTES_AT + 2].copy_from_slice(&i16::from(codec.id()).to_be_bytes());
        h[LAST_OFFSET_DELTA_AT..LAST_OFFSET_DELTA_AT + 4]
            .copy_from_slice(&(self.count - 1).to_be_bytes());
        h[BASE_TIMESTAMP_AT..BASE_TIMESTAMP_AT + 8]
            .copy_from_slice(&self.base_timestamp.to_be_bytes());
        h[MAX_TIMESTAMP_AT..MAX_TIMESTAMP_AT + 8]
            .copy_from_slice(&self.max_timestamp.to_be_bytes());
        let (producer_id, producer_epoch, base_sequence) = self.producer;
        h[PRODUCER_ID_AT..PRODUCER_ID_AT + 8].copy_from_slice(&producer_id.to_be_bytes());
        h[PRODUCER_EPOCH_AT..PRODUCER_EPOCH_AT + 2].copy_from_slice(&producer_epoch.to_be_bytes());
        h[BASE_SEQUENCE_AT..BASE_SEQUENCE_AT + 4].copy_from_slice(&base_sequence.to_be_bytes());
        h[RECORDS_COUNT_AT..RECORDS_COUNT_AT + 4].copy_from_slice(&self.count.to_be_bytes());
        let crc = compute_crc(h);
        h[CRC_AT..CRC_AT + 4].copy_from_slice(&crc.to_be_bytes());
        self.buf.freeze()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::ErrorCode;
    use proptest::prelude::*;

    type Rec = (
        Option<Vec<u8>>,
        Option<Vec<u8>>,
        Vec<(Vec<u8>, Option<Vec<u8>>)>,
        i64,
    );

    fn build(records: &[Rec], base_ts: i64) -> Bytes {
        let mut b = BatchBuilder::new(base_ts);
        for (k, v, hs, ts) in records {
            let hs: Vec<(&[u8], Option<&[u8]>)> = hs
                .iter()
                .map(|(k, v)| (k.as_slice(), v.as_deref()))
                .collect();
            let before = b.size_bytes();
            b.push(*ts, k.as_deref(), v.as_deref(), &hs);
            let predicted = BatchBuilder::record_size(
                b.len() as i32 - 1,
                ts - base_ts,
                k.as_deref(),
                v.as_deref(),
                &hs,
            );
            assert_eq!(b.size_bytes() - before, predicted);
        }
        b.finish()
    }

    #[test]
    fn restamping_a_producer_batch_equals_building_it_so() {
        let build_as = |pid, epoch, seq| {
            let mut b = BatchBuilder::new(10);
            b.set_producer(pid, epoch, seq);
            b.push(11, Some(b"k"), Some(b"v"), &[]);
            b.push(12, None, Some(b"w"), &[]);
            b.finish_with(Compression::Lz4).to_vec()
        };
        let mut batch = build_as(7, 0, 40);
        restamp_producer(&mut batch, 7, 1, 0);
        assert_eq!(batch, build_as(7, 1, 0));
        let h = verify_crc(&batch).unwrap();
        assert_eq!(
            (h.producer_id, h.producer_epoch, h.base_sequence),
            (7, 1, 0)
        );
    }

    fn arb_record() -> impl Strategy<Value = Rec> {
        (
            proptest::option::of(proptest::collection::vec(any::<u8>(), 0..40)),
            proptest::option::of(proptest::collection::vec(any::<u8>(), 0..300)),
            proptest::collection::vec(
                (
                    proptest::collection::vec(any::<u8>(), 0..10),
                    proptest::option::of(proptest::collection::vec(any::<u8>(), 0..10)),
                ),
                0..3,
            ),
            -1_000_000i64..1_000_000,
        )
    }

    /// A batch of `n` records of `value`, compressed with `codec`.
    fn compressed(codec: Compression, n: usize, value: &[u8]) -> Bytes {
        let mut b = BatchBuilder::new(1_000);
        for i in 0..n {
            b.push(
                1_000 + i as i64,
                Some(b"k"),
                Some(value),
                &[(b"h", Some(b"v"))],
            );
        }
        b.finish_with(codec)
    }

    #[test]
    fn compressed_batches_validate_and_read_back_for_every_codec() {
        let value = b"a 1 KiB benchmark record compresses well ".repeat(25);
        let plain = compressed(Compression::None, 50, &value);
        for codec in crate::compression::CODECS {
            let batch = compressed(codec, 50, &value);
            let header = validate(&batch).unwrap();
            assert_eq!(header.codec().unwrap(), codec);
            assert_eq!(header.records_count, 50);
            if codec != Compression::None {
                assert!(
                    batch.len() < plain.len() / 5,
                    "{codec}: {} bytes",
                    batch.len()
                );
            }
            let set = validated_records(&batch).unwrap();
            assert_eq!(set.decompressed().is_some(), codec != Compression::None);
            let read: Vec<Record<'_>> = set.iter().collect::<Result<_, _>>().unwrap();
            assert_eq!(read.len(), 50);
            for (i, r) in read.iter().enumerate() {
                assert_eq!((r.offset, r.timestamp), (i as i64, 1_000 + i as i64));
                assert_eq!(r.view.value, Some(&value[..]));
                assert_eq!(r.view.key, Some(&b"k"[..]));
                let h = r.view.headers().next().unwrap();
                assert_eq!((h.key, h.value), (&b"h"[..], Some(&b"v"[..])));
            }
        }
    }

    #[test]
    fn recompression_keeps_every_record_and_header_field() {
        let value = b"recompress me ".repeat(30);
        let mut buf = BytesMut::new();
        buf.extend_from_slice(&compressed(Compression::Gzip, 5, &value));
        buf.extend_from_slice(&compressed(Compression::Zstd, 3, &value));
        let buf = buf.freeze();
        // Already all zstd? No: the gzip batch is rewritten, the zstd one kept.
        let out = recompress_all(&buf, Compression::Zstd).unwrap();
        let batches: Vec<_> = split(&out).map(Result::unwrap).collect();
        assert_eq!(batches.len(), 2);
        assert_eq!(batches[1].1, split(&buf).nth(1).unwrap().unwrap().1);
        let before = records(split(&buf).next().unwrap().unwrap().1).unwrap();
        let after = validated_records(batches[0].1).unwrap();
        assert_eq!(after.header().codec().unwrap(), Compression::Zstd);
        let (mut old, mut new) = (*before.header(), *after.header());
        assert_ne!((old.crc, old.batch_length), (new.crc, new.batch_length));
        (old.crc, old.batch_length, old.attributes) = (0, 0, 0);
        (new.crc, new.batch_length, new.attributes) = (0, 0, 0);
        assert_eq!(old, new, "the other header fields are kept");
        let a: Vec<_> = before.iter().collect();
        let b: Vec<_> = after.iter().collect();
        assert_eq!(a, b);
        // To uncompressed, and a buffer already in the codec is returned as is.
        let plain = recompress_all(&buf, Compression::None).unwrap();
        assert!(split(&plain).all(|b| b.unwrap().0.compression() == 0));
        assert_eq!(
            recompress_all(&plain, Compression::None).unwrap().as_ptr(),
            plain.as_ptr()
        );
    }

    /// A batch rewritten with `attributes` and a correct CRC.
    fn with_attributes(batch: &[u8], attributes: i16) -> Vec<u8> {
        let mut b = batch.to_vec();
        b[ATTRIBUTES_AT..ATTRIBUTES_AT + 2].copy_from_slice(&attributes.to_be_bytes());
        let crc = compute_crc(&b);
        b[CRC_AT..CRC_AT + 4].copy_from_slice(&crc.to_be_bytes());
        b
    }

    #[test]
    fn bad_compressed_batches_are_refused_with_the_right_error() {
        let value = vec![b'x'; 1000];
        // An unknown codec.
        let unknown = with_attributes(&compressed(Compression::None, 3, &value), 5);
        let err = validate(&unknown).unwrap_err();
        assert_eq!(err, BatchError::Compressed(5));
        assert_eq!(ErrorCode::from(&err), ErrorCode::UnsupportedCompressionType);
        // Records that do not decompress: plain records labelled lz4.
        let mislabelled = with_attributes(&compressed(Compression::None, 3, &value), 3);
        let err = validate(&mislabelled).unwrap_err();
        assert!(matches!(err, BatchError::Decompression(_)), "{err}");
        assert_eq!(ErrorCode::from(&err), ErrorCode::CorruptMessage);
        // A count that the decompressed records do not hold.
        let mut short = compressed(Compression::Zstd, 3, &value).to_vec();
        short[RECORDS_COUNT_AT..RECORDS_COUNT_AT + 4].copy_from_slice(&4i32.to_be_bytes());
        short[LAST_OFFSET_DELTA_AT..LAST_OFFSET_DELTA_AT + 4].copy_from_slice(&3i32.to_be_bytes());
        let short = with_attributes(&short, 4);
        assert!(matches!(validate(&short), Err(BatchError::BadRecords(_))));
        // A small batch whose records would decompress past the bound.
        let bomb_records = vec![0u8; MAX_DECOMPRESSED_LEN + 1];
        let packed = Compression::Zstd.compress(&bomb_records).unwrap();
        let mut bomb = compressed(Compression::None, 1, b"v")[..HEADER_LEN].to_vec();
        bomb.extend_from_slice(&packed);
        let len = (bomb.len() - LOG_OVERHEAD) as i32;
        bomb[BATCH_LENGTH_AT..BATCH_LENGTH_AT + 4].copy_from_slice(&len.to_be_bytes());
        let bomb = with_attributes(&bomb, 4);
        assert!(bomb.len() < 64 * 1024, "{} bytes", bomb.len());
        let err = validate(&bomb).unwrap_err();
        assert_eq!(ErrorCode::from(&err), ErrorCode::MessageTooLarge, "{err}");
    }

    proptest! {
        #[test]
        fn build_validate_read_round_trip(
            recs in proptest::collection::vec(arb_record(), 1..20),
            base_offset in 0i64..1 << 40,
            epoch in 0i32..1000,
        ) {
            let base_ts = 1_700_000_000_000;
            let recs: Vec<Rec> = recs.into_iter().map(|(k, v, h, d)| (k, v, h, base_ts + d)).collect();
            let batch = build(&recs, base_ts);
            let mut stamped = batch.to_vec();
            stamp(&mut stamped, base_offset, epoch);
            let header = validate(&stamped).unwrap();
            prop_assert_eq!(header.base_offset, base_offset);
            prop_assert_eq!(header.partition_leader_epoch, epoch);
            prop_assert_eq!(header.records_count as usize, recs.len());
            prop_assert_eq!(header.max_timestamp, recs.iter().map(|r| r.3).max().unwrap().max(base_ts));
            let set = records(&stamped).unwrap();
            let read: Vec<Record<'_>> = set.iter().collect::<Result<_, _>>().unwrap();
            for (i, (r, want)) in read.iter().zip(&recs).enumerate() {
                prop_assert_eq!(r.offset, base_offset + i as i64);
                prop_assert_eq!(r.timestamp, want.3);
                prop_assert_eq!(r.view.key, want.0.as_deref());
                prop_assert_eq!(r.view.value, want.1.as_deref());
                let hs: Vec<(Vec<u8>, Option<Vec<u8>>)> = r.view.headers()
                    .map(|h| (h.key.to_vec(), h.value.map(<[u8]>::to_vec))).collect();
                prop_assert_eq!(&hs, &want.2);
            }
        }

        #[test]
        fn compressed_batches_round_trip(
            recs in proptest::collection::vec(arb_record(), 1..20),
            id in 1u8..5,
        ) {
            let codec = Compression::from_id(id).unwrap();
            let plain = build(&recs, 0);
            let mut b = BatchBuilder::new(0);
            for (k, v, hs, ts) in &recs {
                let hs: Vec<(&[u8], Option<&[u8]>)> = hs.iter().map(|(k, v)| (k.as_slice(), v.as_deref())).collect();
                b.push(*ts, k.as_deref(), v.as_deref(), &hs);
            }
            let packed = b.finish_with(codec);
            prop_assert_eq!(validate(&packed).unwrap().records_count as usize, recs.len());
            let (a, b) = (records(&plain).unwrap(), records(&packed).unwrap());
            let a: Vec<_> = a.iter().collect();
            let b: Vec<_> = b.iter().collect();
            prop_assert_eq!(a, b);
        }

        #[test]
        fn validate_never_panics_on_garbage(bytes in proptest::collection::vec(any::<u8>(), 0..400)) {
            let _ = validate(&bytes);
            let _ = verify_crc(&bytes);
            for b in split(&bytes).flatten() {
                let _ = records(b.1).map(|r| r.iter().count());
            }
        }

        #[test]
        fn any_flipped_byte_after_the_stamp_is_caught(
            recs in proptest::collection::vec(arb_record(), 1..5),
            pos in any::<prop::sample::Index>(),
            flip in 1u8..=255,
        ) {
            let batch = build(&recs.iter().map(|(k, v, h, _)| (k.clone(), v.clone(), h.clone(), 0)).collect::<Vec<_>>(), 0);
            let mut bytes = batch.to_vec();
            // Bytes 0..12 and 12..16 are the stamp and length: the length is checked by
            // size, the rest by the CRC.
            let at = 8 + pos.index(bytes.len() - 8);
            if (12..16).contains(&at) { return Ok(()); }
            bytes[at] ^= flip;
            prop_assert!(validate(&bytes).is_err());
        }

        #[test]
        fn split_yields_each_batch(counts in proptest::collection::vec(1usize..5, 1..6)) {
            let mut all = Vec::new();
            let mut lens = Vec::new();
            for c in &counts {
                let recs: Vec<Rec> = (0..*c).map(|i| (None, Some(vec![i as u8; 7]), vec![], 0)).collect();
                let b = build(&recs, 0);
                lens.push(b.len());
                all.extend_from_slice(&b);
            }
            let got: Vec<usize> = split(&all).map(|r| r.unwrap().1.len()).collect();
            prop_assert_eq!(got, lens);
        }
    }

    #[test]
    fn torn_batch_is_reported_as_truncated() {
        let b = build(&[(None, Some(b"hello".to_vec()), vec![], 0)], 0);
        let cut = &b[..b.len() - 1];
        assert!(matches!(
            split(cut).next(),
            Some(Err(BatchError::Truncated { .. }))
        ));
        assert!(matches!(validate(cut), Err(BatchError::Truncated { .. })));
    }

    fn unhex(s: &str) -> Vec<u8> {
        (0..s.len())
            .step_by(2)
            .map(|i| u8::from_str_radix(&s[i..i + 2], 16).unwrap())
            .collect()
    }

    /// Found by fuzzing (fuzz target batch_builder): a batch stamped at
    /// `i64::MAX` passed validation, and the consumer's `next_offset()` on it
    /// overflowed.
    #[test]
    fn fuzz_regression_offsets_overflowing_i64_are_refused() {
        let bytes = unhex(
            "7fffffffffffffff0000003fffff7f2b02d21105a8000000000000ffff2bff00\
             00003a004fffffff00004fffffffffffffffffffffffffffff000000011a00aa\
             8080f09f80ea5000010000",
        );
        assert!(verify_crc(&bytes).is_ok());
        assert_eq!(
            validate(&bytes),
            Err(BatchError::BadRecords("offsets overflow"))
        );
        // One offset lower, the last offset is i64::MAX and the batch is fine.
        let mut lower = bytes.clone();
        stamp(&mut lower, i64::MAX - 1, 0);
        assert_eq!(validate(&lower).unwrap().next_offset(), i64::MAX);
    }

    /// Found by fuzzing (fuzz target record_batch): `records` on unvalidated
    /// bytes (base offset `i64::MIN`, an offset delta of -32) overflowed
    /// computing the record's offset.
    #[test]
    fn fuzz_regression_record_offset_overflow_is_an_error() {
        let bytes = unhex(
            "80000000000000000000004a0000000002d1f1cab80000000000000000018bcf\
             e568000000018bcfe56800ffffffffffffffffffffffffffff00000001300000\
             3f066b65790a76616c75650402680276086e02000001",
        );
        assert!(validate(&bytes).is_err());
        let set = records(&bytes).unwrap();
        let got: Vec<_> = set.iter().collect();
        assert_eq!(
            got,
            vec![Err(BatchError::BadRecords("record offset overflows"))]
        );
    }

    /// Found by fuzzing (fuzz target batch_builder): timestamps whose difference
    /// does not fit in an i64 overflowed computing the delta (builder) and adding
    /// it back (`records`); both wrap, as in Kafka, so every timestamp round-trips.
    #[test]
    fn fuzz_regression_timestamps_far_from_the_base_round_trip() {
        for (base, ts) in [
            (-7566047635990044222, 3026136667162411007),
            (i64::MIN, i64::MAX),
            (i64::MAX, i64::MIN),
        ] {
            let mut b = BatchBuilder::new(base);
            b.push(ts, None, None, &[]);
            let batch = b.finish();
            assert_eq!(validate(&batch).unwrap().max_timestamp, base.max(ts));
            let set = records(&batch).unwrap();
            let r = set.iter().next().unwrap().unwrap();
            assert_eq!(r.timestamp, ts);
        }
    }

    #[test]
    fn varint_lengths_match_encoding() {
        for v in [
            0i64,
            1,
            -1,
            63,
            64,
            -64,
            -65,
            8191,
            8192,
            i64::MAX,
            i64::MIN,
            1 << 40,
        ] {
            let mut out = BytesMut::new();
            put_varlong(&mut out, v);
            assert_eq!(out.len(), varlong_len(v), "{v}");
            let mut s = &out[..];
            assert_eq!(read_varlong(&mut s).unwrap(), v);
        }
    }

    #[test]
    fn log_append_time_stamps_every_batch_and_keeps_it_valid() {
        let mut two = BytesMut::new();
        two.extend_from_slice(&compressed(Compression::None, 3, b"v"));
        two.extend_from_slice(&compressed(Compression::Lz4, 2, b"w"));
        let two = two.freeze();
        let stamped = with_log_append_time(&two, 9_999).unwrap();
        assert_eq!(stamped.len(), two.len());
        let mut seen = 0;
        for b in split(&stamped) {
            let (_, bytes) = b.unwrap();
            // The CRC was recomputed: the batch validates.
            let header = validate(bytes).unwrap();
            assert!(header.is_log_append_time());
            assert_eq!(header.max_timestamp, 9_999);
            assert_eq!(header.base_timestamp, 1_000, "records untouched");
            for r in records(bytes).unwrap().iter() {
                assert_eq!(r.unwrap().timestamp, 9_999);
                seen += 1;
            }
        }
        assert_eq!(seen, 5);
        // CreateTime batches read their own times.
        let plain: Vec<i64> = records(&compressed(Compression::None, 3, b"v"))
            .unwrap()
            .iter()
            .map(|r| r.unwrap().timestamp)
            .collect();
        assert_eq!(plain, vec![1_000, 1_001, 1_002]);
        let mut cut = two.to_vec();
        cut.truncate(two.len() - 1);
        assert!(with_log_append_time(&Bytes::from(cut), 1).is_err());
    }
}
