//! SASL PLAIN (RFC 4616): the client sends its user name and password in one
//! message, `[authzid] NUL authcid NUL passwd`, and the server checks them.
//!
//! Only over TLS (`SASL_SSL`) does the password stay secret; syncline's brokers
//! check a PLAIN password against the user's SCRAM verifier.

use std::fmt;

/// The SASL mechanism name.
pub const MECHANISM_NAME: &str = "PLAIN";

/// The longest message [`decode`] accepts, in bytes.
pub const MAX_MESSAGE_LEN: usize = 64 * 1024;

/// The PLAIN message a client sends: `"\0USERNAME\0PASSWORD"` (no
/// authorization identity, as Kafka's clients send it).
///
/// A username or password that contains a NUL cannot be sent: the result
/// does not [`decode`].
#[must_use]
pub fn encode(username: &str, password: &str) -> Vec<u8> {
    encode_fields("", username, password)
}

fn encode_fields(authzid: &str, username: &str, password: &str) -> Vec<u8> {
    let mut out = Vec::with_capacity(authzid.len() + username.len() + password.len() + 2);
    out.extend_from_slice(authzid.as_bytes());
    out.push(0);
    out.extend_from_slice(username.as_bytes());
    out.push(0);
    out.extend_from_slice(password.as_bytes());
    out
}

/// A decoded PLAIN message. Its `Debug` does not show the password.
#[derive(Clone, PartialEq, Eq)]
pub struct PlainMessage {
    /// The authorization identity: empty, or the username (acting as another
    /// user is not supported).
    pub authzid: String,
    /// The authentication identity: who the client says it is.
    pub username: String,
    /// The password.
    pub password: String,
}

impl PlainMessage {
    /// The message on the wire, authorization identity included.
    #[must_use]
    pub fn encode(&self) -> Vec<u8> {
        encode_fields(&self.authzid, &self.username, &self.password)
    }
}

impl fmt::Debug for PlainMessage {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("PlainMessage")
            .field("authzid", &self.authzid)
            .field("username", &self.username)
            .field("password", &"<redacted>")
            .finish()
    }
}

/// Why a PLAIN message was refused.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum PlainError {
    /// Longer than [`MAX_MESSAGE_LEN`].
    #[error("the SASL PLAIN message is {0} bytes, more than the {MAX_MESSAGE_LEN} accepted")]
    TooLong(usize),
    /// Not UTF-8.
    #[error("the SASL PLAIN message is not UTF-8")]
    NotUtf8,
    /// Not three fields separated by NUL.
    #[error("malformed SASL PLAIN message: expected [authzid] NUL username NUL password, found {0} NUL-separated fields")]
    Fields(usize),
    /// An empty username.
    #[error("the SASL PLAIN message has an empty username")]
    EmptyUsername,
    /// An empty password.
    #[error("the SASL PLAIN message has an empty password")]
    EmptyPassword,
    /// An authorization identity other than the username.
    #[error("SASL PLAIN authorization identity {authzid:?} differs from username {username:?}: acting as another user is not supported (send an empty authzid)")]
    Authzid {
        /// The authorization identity sent.
        authzid: String,
        /// The username sent.
        username: String,
    },
}

/// Decodes a client's PLAIN message: UTF-8, at most [`MAX_MESSAGE_LEN`] bytes,
/// exactly three NUL-separated fields (so none contains a NUL), a non-empty
/// username and password, and an authorization identity that is empty or the
/// username.
pub fn decode(bytes: &[u8]) -> Result<PlainMessage, PlainError> {
    if bytes.len() > MAX_MESSAGE_LEN {
        return Err(PlainError::TooLong(bytes.len()));
    }
    let text = std::str::from_utf8(bytes).map_err(|_| PlainError::NotUtf8)?;
    let fields: Vec<&str> = text.split('\0').collect();
    let [authzid, username, password] = fields[..] else {
        return Err(PlainError::Fields(fields.len()));
    };
    if username.is_empty() {
        return Err(PlainError::EmptyUsername);
    }
    if password.is_empty() {
        return Err(PlainError::EmptyPassword);
    }
    if !authzid.is_empty() && authzid != username {
        return Err(PlainError::Authzid {
            authzid: authzid.to_owned(),
            username: username.to_owned(),
        });
    }
    Ok(PlainMessage {
        authzid: authzid.to_owned(),
        username: username.to_owned(),
        password: password.to_owned(),
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn message(authzid: &str, username: &str, password: &str) -> PlainMessage {
        PlainMessage {
            authzid: authzid.to_owned(),
            username: username.to_owned(),
            password: password.to_owned(),
        }
    }

    #[test]
    fn encode_has_no_authzid() {
        assert_eq!(encode("alice", "s3cret"), b"\0alice\0s3cret");
        assert_eq!(
            decode(&encode("alice", "s3cret")),
            Ok(message("", "alice", "s3cret"))
        );
        assert_eq!(MECHANISM_NAME, "PLAIN");
    }

    #[test]
    fn decode_accepts() {
        let cases: &[(&[u8], PlainMessage)] = &[
            (b"\0alice\0pw", message("", "alice", "pw")),
            (b"alice\0alice\0pw", message("alice", "alice", "pw")),
            (b"\0User:x\0p w,=", message("", "User:x", "p w,=")),
            ("\0zoë\0pässwörd".as_bytes(), message("", "zoë", "pässwörd")),
        ];
        for (bytes, want) in cases {
            let got = decode(bytes).unwrap_or_else(|e| panic!("{bytes:?}: {e}"));
            assert_eq!(&got, want);
            assert_eq!(got.encode(), *bytes);
        }
        let longest = [&b"\0alice\0"[..], &vec![b'p'; MAX_MESSAGE_LEN - 7]].concat();
        assert_eq!(
            decode(&longest).unwrap().password.len(),
            MAX_MESSAGE_LEN - 7
        );
    }

    #[test]
    fn decode_refuses() {
        let too_long = [&b"\0alice\0"[..], &vec![b'p'; MAX_MESSAGE_LEN - 6]].concat();
        let cases: &[(&str, &[u8], PlainError)] = &[
            ("empty", b"", PlainError::Fields(1)),
            ("no NUL", b"alice", PlainError::Fields(1)),
            ("one NUL", b"\0alice", PlainError::Fields(2)),
            (
                "NUL in the password",
                b"\0alice\0p\0w",
                PlainError::Fields(4),
            ),
            ("trailing NUL", b"\0alice\0pw\0", PlainError::Fields(4)),
            ("empty username", b"\0\0pw", PlainError::EmptyUsername),
            ("empty password", b"\0alice\0", PlainError::EmptyPassword),
            ("only NULs", b"\0\0", PlainError::EmptyUsername),
            ("not UTF-8", b"\0al\xffice\0pw", PlainError::NotUtf8),
            (
                "another authzid",
                b"admin\0alice\0pw",
                PlainError::Authzid {
                    authzid: "admin".into(),
                    username: "alice".into(),
                },
            ),
            (
                "too long",
                &too_long,
                PlainError::TooLong(MAX_MESSAGE_LEN + 1),
            ),
        ];
        for (what, bytes, want) in cases {
            assert_eq!(decode(bytes).as_ref(), Err(want), "{what}");
        }
    }

    #[test]
    fn errors_say_what_is_wrong() {
        let e = decode(b"admin\0alice\0pw").unwrap_err().to_string();
        assert!(
            e.contains("\"admin\"") && e.contains("\"alice\"") && e.contains("empty authzid"),
            "{e}"
        );
        let e = decode(b"alice").unwrap_err().to_string();
        assert!(
            e.contains("username NUL password") && e.contains("found 1"),
            "{e}"
        );
    }

    #[test]
    fn debug_hides_the_password() {
        let shown = format!("{:?}", message("", "alice", "s3cret"));
        assert!(
            shown.contains("alice") && !shown.contains("s3cret"),
            "{shown}"
        );
    }

    proptest! {
        #[test]
        fn encode_decode_round_trip(username in "[^\0]{1,20}", password in "[^\0]{1,20}") {
            let m = decode(&encode(&username, &password)).unwrap();
            prop_assert_eq!(m, message("", &username, &password));
        }

        #[test]
        fn hostile_bytes_decode_or_round_trip(bytes in prop::collection::vec(any::<u8>(), 0..64)) {
            if let Ok(m) = decode(&bytes) {
                prop_assert_eq!(m.encode(), bytes);
                prop_assert!(!m.username.is_empty() && !m.password.is_empty());
            }
        }
    }
}
