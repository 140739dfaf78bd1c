//! The SCRAM exchange brokers authenticate with, from both ends, fed hostile
//! messages.
//!
//! Input: byte 0 picks the side and the mechanism; the rest is split at the
//! first 0xff into two messages. Server side: they are the client-first and
//! client-final messages for a server holding broker-1's verifier. Client side:
//! they are the server-first and server-final messages answering a real
//! client-first. Checked: nothing panics, and neither side accepts the other
//! without a proof: the server never authenticates an exchange whose client
//! did not know the password, and the client never accepts a server-final it
//! did not get from a holder of the verifier (random bytes cannot be one).
#![no_main]

use std::sync::Arc;

use libfuzzer_sys::fuzz_target;
use syncline_auth::{ClientCredential, Mechanism, ScramClient, ScramServer, Verifier};

const SALT: &[u8] = b"fuzzing-salt-16b";

/// The iteration count a server-first message asks for, when it says one.
fn iterations(message: &[u8]) -> Option<u64> {
    let text = std::str::from_utf8(message).ok()?;
    let i = text.split(',').find_map(|a| a.strip_prefix("i="))?;
    i.parse().ok()
}

fuzz_target!(|data: &[u8]| {
    let Some((&mode, rest)) = data.split_first() else {
        return;
    };
    let mechanism = Mechanism::ALL[usize::from(mode >> 1) % Mechanism::ALL.len()];
    let (first, last) = match rest.iter().position(|b| *b == 0xff) {
        Some(i) => (&rest[..i], &rest[i + 1..]),
        None => (rest, &[][..]),
    };
    if mode & 1 == 0 {
        let verifier = Verifier::new(mechanism, "secret", SALT, 4096);
        let mut server = ScramServer::new(mechanism);
        if server
            .client_first(first, |u| (u == "broker-1").then(|| verifier.clone()))
            .is_ok()
        {
            // The fuzzer does not know the password or the server's nonce:
            // no client-final of its making may verify.
            assert!(server.client_final(last).is_err(), "a forged proof verified");
            assert!(server.username().is_none());
        }
    } else {
        // PBKDF2 over a hostile count is slow by design (the client allows up
        // to a million): keep the fuzzer to cheap counts.
        if iterations(first).is_some_and(|i| i > 8192) {
            return;
        }
        let credential = Arc::new(ClientCredential::new("broker-1", "secret"));
        let (mut client, _) = ScramClient::start(mechanism, credential);
        if client.server_first(first).is_ok() {
            assert!(client.server_final(last).is_err(), "a forged server signature verified");
        }
    }
});
