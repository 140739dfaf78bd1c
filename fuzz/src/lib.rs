//! Checks shared by the fuzz targets: what the broker, the consumer and the log do
//! with bytes that came off the network, written against the crates' public API,
//! with the properties each step must keep. Every check panics on a violated
//! property (that is how libFuzzer sees it); an `Err` from a decoder is fine.

use bytes::Bytes;
use prost::Message;
use syncline_proto::batch::{self, BatchError, BatchHeader, HEADER_LEN, LOG_OVERHEAD};
use syncline_proto::{frame, pb};

/// A decoded message encodes to bytes that decode to the same message (prost drops
/// unknown fields, so the decoded value is what must survive).
pub fn assert_reencodes<M: Message + Default + PartialEq + std::fmt::Debug>(msg: &M) {
    let again = M::decode(frame::encode(msg)).expect("a re-encoded message decodes");
    assert_eq!(&again, msg, "re-encoding changed the message");
}

/// Overwrites `batch_length` with what `bytes` holds and recomputes the CRC, as
/// far as there are bytes for them: lets the fuzzer past the size and CRC checks
/// to the record framing behind them.
pub fn fix_length_and_crc(bytes: &mut [u8], fix_length: bool, fix_crc: bool) {
    if fix_length && bytes.len() >= LOG_OVERHEAD {
        let len = i32::try_from(bytes.len() - LOG_OVERHEAD).unwrap_or(i32::MAX);
        bytes[8..12].copy_from_slice(&len.to_be_bytes());
    }
    if fix_crc && bytes.len() >= 21 {
        let crc = batch::compute_crc(bytes);
        bytes[17..21].copy_from_slice(&crc.to_be_bytes());
    }
}

/// Everything the crate offers on one buffer that may hold one batch: no call may
/// panic, and a batch that `validate` accepts must read back consistently.
pub fn check_one_batch(bytes: &[u8]) {
    let parsed = BatchHeader::parse(bytes);
    let crc = batch::verify_crc(bytes);
    let valid = batch::validate(bytes);
    if let Ok(h) = &crc {
        assert_eq!(Ok(h), parsed.as_ref(), "verify_crc and parse disagree");
        assert_eq!(h.total_len(), bytes.len());
        let _ = h.compression();
    }
    if bytes.len() >= batch::STAMPED_PREFIX_LEN {
        let prefix = batch::stamped_prefix(bytes, 7, 9);
        let mut copy = bytes[..batch::STAMPED_PREFIX_LEN].to_vec();
        batch::stamp(&mut copy, 7, 9);
        assert_eq!(&prefix[..], &copy[..]);
    }
    // Whatever validation says, reading must not panic.
    if let Ok(set) = batch::records(bytes) {
        for r in set.iter().take(1 << 16) {
            match r {
                Ok(r) => {
                    drain_headers(&r.view);
                }
                Err(_) => break,
            }
        }
    }
    match valid {
        Ok(h) => check_valid_batch(bytes, &h, crc.as_ref()),
        Err(e) => {
            // Every refusal maps to a wire error code.
            let _ = pb::ErrorCode::from(&e);
            let _ = e.to_string();
        }
    }
}

fn drain_headers(view: &batch::RecordView<'_>) -> usize {
    // Touches every header's bytes (the slices must lie inside the batch).
    view.headers()
        .map(|h| h.key.iter().chain(h.value.unwrap_or_default()).count())
        .sum()
}

/// The properties of a batch that `validate` accepted.
fn check_valid_batch(bytes: &[u8], h: &BatchHeader, crc: Result<&BatchHeader, &BatchError>) {
    assert_eq!(crc, Ok(h), "validate accepted what verify_crc refuses");
    assert!(h.records_count > 0);
    assert!(h.codec().is_ok(), "validate accepted an unknown codec");
    // What the consumer computes for every batch it accepts.
    let next = h.next_offset();
    assert_eq!(next, h.last_offset() + 1);
    // One batch splits into itself.
    let mut split = batch::split(bytes);
    let (sh, sb) = split.next().expect("one batch").expect("splits");
    assert_eq!((&sh, sb), (h, bytes));
    assert!(split.next().is_none());
    // Its records read back: as many as the header says, at consecutive offsets.
    let mut n = 0i64;
    let set = batch::records(bytes).expect("a valid batch reads");
    for r in set.iter() {
        let r = r.expect("every record of a valid batch reads");
        assert_eq!(r.offset, h.base_offset + n);
        assert_eq!(i64::from(r.view.offset_delta), n);
        drain_headers(&r.view);
        n += 1;
    }
    assert_eq!(n, i64::from(h.records_count));
    assert_eq!(h.last_offset(), h.base_offset + n - 1);
    // Fully inside the buffer.
    assert!(HEADER_LEN <= bytes.len());
}

/// What the broker does with a produce request's records before they reach the log
/// (`ReplicaManager::append_one`): split, then validate each batch; and what the
/// consumer does with a fetch response's (`decode_records`): split, stop at a torn
/// last batch, validate, read every record. Neither may panic.
pub fn check_batches(records: &[u8]) {
    let mut whole = 0usize;
    for item in batch::split(records).take(1 << 16) {
        match item {
            Ok((header, bytes)) => {
                assert_eq!(header.total_len(), bytes.len());
                whole += bytes.len();
                check_one_batch(bytes);
            }
            Err(e) => {
                let _ = pb::ErrorCode::from(&e);
                break;
            }
        }
    }
    assert!(whole <= records.len());
}

/// The pure checks the broker and client run on a decoded request: its API name,
/// and for a produce request every partition's batches.
pub fn check_request(req: &pb::Request) {
    use pb::request::Body;
    let Some(body) = &req.body else { return };
    let name = syncline_proto::api_name(body);
    assert!(syncline_proto::API_NAMES.contains(&name));
    if let Body::Produce(p) = body {
        for t in &p.topics {
            for part in &t.partitions {
                check_batches(&part.records);
            }
        }
    }
}

/// The same for a decoded response: a fetch response's records as a consumer (or a
/// follower, which only checks CRCs) reads them.
pub fn check_response(resp: &pb::Response) {
    use pb::response::Body;
    if let Some(Body::Fetch(f)) = &resp.body {
        for t in &f.responses {
            for part in &t.partitions {
                check_batches(&part.records);
            }
        }
    }
}

/// Decodes one frame body both ways, with the checks above.
pub fn check_frame(body: Bytes) {
    if let Ok(req) = frame::decode_request(body.clone()) {
        assert_reencodes(&req);
        check_request(&req);
    }
    if let Ok(resp) = frame::decode_response(body) {
        assert_reencodes(&resp);
        check_response(&resp);
    }
}
