//! One frame body, as the broker's connection loop hands it to `decode_request`;
//! a request that decodes goes through the checks the broker applies without
//! state (its API name; a produce request's batches split and validated as
//! `ReplicaManager::append_one` does, and read back when valid). The same bytes
//! go through `decode_response` and a fetch response's records through what the
//! consumer does with them. A decoded message must re-encode to itself.
#![no_main]

use bytes::Bytes;
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    syncline_fuzz::check_frame(Bytes::copy_from_slice(data));
});
