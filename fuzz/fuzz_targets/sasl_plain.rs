//! SASL PLAIN (RFC 4616) as a broker reads a client's message, fed hostile
//! bytes.
//!
//! Input: the whole message. Checked: `plain::decode` never panics; what it
//! accepts is three NUL-free fields with a username and a password, an
//! authorization identity empty or the username, and it re-encodes to the very
//! bytes it came from, which decode to the same message; the client's
//! `plain::encode` of that username and password decodes to them.
#![no_main]

use libfuzzer_sys::fuzz_target;
use syncline_auth::plain;

fuzz_target!(|data: &[u8]| {
    let message = match plain::decode(data) {
        Ok(message) => message,
        Err(e) => {
            let _ = e.to_string();
            return;
        }
    };
    assert!(data.len() <= plain::MAX_MESSAGE_LEN);
    assert!(!message.username.is_empty() && !message.password.is_empty());
    assert!(message.authzid.is_empty() || message.authzid == message.username);
    for field in [&message.authzid, &message.username, &message.password] {
        assert!(!field.contains('\0'), "a field holds a NUL");
    }
    let bytes = message.encode();
    assert_eq!(bytes, data, "decoding lost or changed bytes");
    assert_eq!(
        plain::decode(&bytes).as_ref(),
        Ok(&message),
        "the re-encoded message differs"
    );
    let sent = plain::decode(&plain::encode(&message.username, &message.password))
        .expect("what a client encodes decodes");
    assert_eq!(
        (sent.authzid.as_str(), sent.username, sent.password),
        ("", message.username, message.password)
    );
});
