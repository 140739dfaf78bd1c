//! One frame body on a Kafka listener, as its connection loop hands it over:
//! decoded by `syncline_kafka::codec::decode` (an API and version it speaks, or a
//! refusal), translated to the syncline request, and answered as if the broker
//! refused it whole (every decoded request has an encodable answer at its
//! version). Nothing may panic; an answer is never empty and starts with the
//! request's correlation id.
#![no_main]

use bytes::Bytes;
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    if let Some(answer) = syncline_kafka::answer_refused(Bytes::copy_from_slice(data)) {
        assert!(answer.len() >= 4, "an answer has a response header");
        assert_eq!(&answer[..4], &data[4..8], "the correlation id is the request's");
    }
});
