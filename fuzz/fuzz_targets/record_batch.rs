//! RecordBatch v2 bytes from the network: `BatchHeader::parse`, `verify_crc`,
//! `validate`, `split`, `records` (with headers), `stamped_prefix`.
//!
//! Input: byte 0 holds flags, the rest is the buffer. Flag 1 writes the buffer's
//! own length into `batch_length`, flag 2 recomputes the CRC (after flag 1), flag
//! 4 sets the magic to 2: without them random bytes rarely get past the header to
//! the record framing. Flag 8 reads the buffer as concatenated batches (a produce
//! request's or a fetch response's records) instead of one batch.
#![no_main]

use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let [flags, rest @ ..] = data else {
        return;
    };
    let mut bytes = rest.to_vec();
    if flags & 4 != 0 && bytes.len() > 16 {
        bytes[16] = 2;
    }
    syncline_fuzz::fix_length_and_crc(&mut bytes, flags & 1 != 0, flags & 2 != 0);
    if flags & 8 != 0 {
        syncline_fuzz::check_batches(&bytes);
    } else {
        syncline_fuzz::check_one_batch(&bytes);
    }
});
