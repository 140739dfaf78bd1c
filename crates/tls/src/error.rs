//! [`TlsError`]: every way loading TLS settings or a handshake can fail, each
//! worded so that it names the problem and the fix.

use std::fmt;
use std::io;
use std::path::PathBuf;
use std::time::Duration;

use rustls::{AlertDescription, CertificateError, InconsistentKeys, InvalidMessage};

/// Whose certificate an error is about.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Peer {
    /// The server's: the client checked it.
    Broker,
    /// The client's: the broker checked it.
    Client,
}

impl Peer {
    /// "the broker's" or "the client's".
    fn possessive(self) -> &'static str {
        match self {
            Peer::Broker => "the broker's",
            Peer::Client => "the client's",
        }
    }

    /// The setting that names the CA file on the side that checked.
    fn ca_setting(self) -> &'static str {
        match self {
            Peer::Broker => "ssl.ca.location",
            Peer::Client => "the broker's ssl_ca_location",
        }
    }
}

/// Why TLS settings could not be loaded, a handshake failed, or certificates
/// could not be generated. Cloneable, so that a connection can keep the reason
/// it closed for every request that was waiting on it.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum TlsError {
    /// A file is missing or unreadable.
    #[error("cannot read the {what} file {}: {reason}", path.display())]
    File {
        /// Which setting's file (e.g. "ssl.ca.location").
        what: &'static str,
        /// The file.
        path: PathBuf,
        /// The operating system's reason.
        reason: String,
    },
    /// A file that should hold certificates holds none.
    #[error("the {what} file {} holds no certificate: expected PEM with -----BEGIN CERTIFICATE-----{}", path.display(), if *holds_key { " (it holds a private key: the certificate is another file)" } else { "" })]
    NoCertificate {
        /// Which setting's file.
        what: &'static str,
        /// The file.
        path: PathBuf,
        /// The file holds a private key instead.
        holds_key: bool,
    },
    /// A file that should hold a private key holds none.
    #[error("the {what} file {} holds no private key: expected PEM with -----BEGIN PRIVATE KEY----- (or RSA PRIVATE KEY, EC PRIVATE KEY){}", path.display(), if *holds_certificate { " (it holds a certificate: the key is another file)" } else { "" })]
    NoPrivateKey {
        /// Which setting's file.
        what: &'static str,
        /// The file.
        path: PathBuf,
        /// The file holds a certificate instead.
        holds_certificate: bool,
    },
    /// A file is not valid PEM, or a certificate or key in it does not parse.
    #[error("the {what} file {} is not usable: {reason}", path.display())]
    BadFile {
        /// Which setting's file.
        what: &'static str,
        /// The file.
        path: PathBuf,
        /// What is wrong with it.
        reason: String,
    },
    /// The private key is not the certificate's.
    #[error("the private key {} does not match the certificate {}: give the key the certificate was made for", key.display(), cert.display())]
    KeyMismatch {
        /// The certificate file.
        cert: PathBuf,
        /// The key file.
        key: PathBuf,
    },
    /// Settings that do not go together.
    #[error("invalid TLS settings: {0}")]
    Settings(String),
    /// The host to connect to is neither a DNS name nor an IP address.
    #[error("{0:?} is not a DNS name or an IP address, so its certificate cannot be checked")]
    BadHost(String),
    /// The peer's certificate is not signed by a trusted CA.
    #[error("{} certificate is not signed by a CA in {} (unknown issuer)", peer.possessive(), peer.ca_setting())]
    UnknownIssuer {
        /// Whose certificate.
        peer: Peer,
    },
    /// The peer's certificate names a trusted CA as its issuer, but that CA's
    /// key did not sign it: another CA of the same name.
    #[error("{} certificate is not signed by a CA in {} (a CA there has its issuer's name but not its key: a CA of the same name made again?)", peer.possessive(), peer.ca_setting())]
    IssuerKeyMismatch {
        /// Whose certificate.
        peer: Peer,
    },
    /// The broker's certificate does not name the host connected to.
    #[error("the broker's certificate does not name {host} (its SANs: {}): connect by one of those names, or reissue the certificate with `syncline cert create ... --host {host}`", if names.is_empty() { "none".to_string() } else { names.join(", ") })]
    NameMismatch {
        /// The host connected to.
        host: String,
        /// The names the certificate has (possibly unknown: empty).
        names: Vec<String>,
    },
    /// A certificate is past its end date (or before its start date).
    #[error("{} certificate {when}: issue a new one (`syncline cert create`)", peer.possessive())]
    Expired {
        /// Whose certificate.
        peer: Peer,
        /// "expired at ..." or "is not valid yet ...".
        when: String,
    },
    /// A certificate was refused for another reason.
    #[error("{} certificate is refused: {reason}", peer.possessive())]
    BadCertificate {
        /// Whose certificate.
        peer: Peer,
        /// rustls's reason.
        reason: String,
    },
    /// The other end answered with something that is not TLS (or closed the
    /// connection without a TLS answer).
    #[error("{}", match peer { Peer::Broker => "the peer did not speak TLS (a plaintext port? check security.protocol)", Peer::Client => "the client did not speak TLS (a plaintext client on a TLS listener? its security.protocol must be SSL or SASL_SSL)" })]
    NotTls {
        /// Who did not speak TLS.
        peer: Peer,
    },
    /// The broker closed the connection during the handshake without a TLS
    /// answer (client side): what a plaintext port does with a ClientHello, and
    /// also what a broker going down does; a client retries it.
    #[error("the peer closed the connection during the TLS handshake without a TLS answer (a plaintext port? check security.protocol; or the broker is going down)")]
    HungUp,
    /// The broker requires a client certificate and this client has none
    /// (client side).
    #[error("the broker requires a client certificate (set ssl.certificate.location and ssl.key.location)")]
    ClientCertRequired,
    /// The client presented no certificate and one is required (broker side).
    #[error("the client presented no certificate, and ssl_client_auth is required")]
    ClientCertMissing,
    /// The broker refused this client's certificate (client side).
    #[error("the broker refused this client's certificate ({alert}): is it signed by the CA in the broker's ssl_ca_location?")]
    CertificateRefused {
        /// The alert the broker sent.
        alert: String,
    },
    /// Any other handshake failure.
    #[error("TLS handshake failed: {0}")]
    Handshake(String),
    /// The socket failed during the handshake.
    #[error("i/o error during the TLS handshake: {0}")]
    Io(String),
    /// The handshake did not finish in time.
    #[error("the TLS handshake did not finish within {} s", .0.as_secs())]
    Timeout(Duration),
    /// Certificate generation or writing failed.
    #[error("{0}")]
    Generate(String),
}

impl TlsError {
    /// Maps an error from a client-side handshake with `host`.
    pub(crate) fn from_client_handshake(e: io::Error, host: &str) -> TlsError {
        if let Some(tls) = rustls_error(&e) {
            return from_rustls(tls, Peer::Broker, Some(host));
        }
        match e.kind() {
            // A plaintext server reads the ClientHello as a huge frame and hangs
            // up without a word; so does a broker that is going down (killed,
            // or shutting down) while the handshake is under way.
            io::ErrorKind::UnexpectedEof
            | io::ErrorKind::ConnectionReset
            | io::ErrorKind::ConnectionAborted => TlsError::HungUp,
            _ => TlsError::Io(e.to_string()),
        }
    }

    /// Maps an error from a broker-side handshake.
    pub(crate) fn from_server_handshake(e: io::Error) -> TlsError {
        match rustls_error(&e) {
            Some(tls) => from_rustls(tls, Peer::Client, None),
            None => TlsError::Io(e.to_string()),
        }
    }

    /// The TLS reason behind an I/O error on an established client stream (the
    /// broker's verdict on the client certificate comes after the client's side
    /// of a TLS 1.3 handshake is done, so it surfaces at the first read). `None`
    /// when the error is not a TLS one.
    pub fn from_client_io(e: &io::Error) -> Option<TlsError> {
        rustls_error(e).map(|tls| from_rustls(tls, Peer::Broker, None))
    }
}

/// The rustls error inside an I/O error from tokio-rustls, if there is one.
fn rustls_error(e: &io::Error) -> Option<&rustls::Error> {
    e.get_ref()?.downcast_ref::<rustls::Error>()
}

fn from_rustls(e: &rustls::Error, peer: Peer, host: Option<&str>) -> TlsError {
    use rustls::Error as E;
    match e {
        E::InvalidCertificate(c) => from_certificate_error(c, peer, host),
        E::NoCertificatesPresented if peer == Peer::Client => TlsError::ClientCertMissing,
        E::InvalidMessage(InvalidMessage::InvalidContentType)
        | E::InvalidMessage(InvalidMessage::UnknownProtocolVersion)
        | E::InvalidMessage(InvalidMessage::MessageTooLarge)
        | E::InvalidMessage(InvalidMessage::InvalidEmptyPayload)
        | E::PeerSentOversizedRecord
        // A peer echoing our ClientHello, say.
        | E::InappropriateHandshakeMessage { .. }
        | E::InappropriateMessage { .. } => TlsError::NotTls { peer },
        E::AlertReceived(AlertDescription::CertificateRequired) if peer == Peer::Broker => {
            TlsError::ClientCertRequired
        }
        E::AlertReceived(
            alert @ (AlertDescription::BadCertificate
            | AlertDescription::UnknownCA
            | AlertDescription::CertificateUnknown
            | AlertDescription::CertificateExpired
            | AlertDescription::UnsupportedCertificate
            | AlertDescription::AccessDenied),
        ) if peer == Peer::Broker => TlsError::CertificateRefused {
            alert: format!("TLS alert {alert:?}"),
        },
        E::InconsistentKeys(InconsistentKeys::KeyMismatch) => {
            TlsError::Settings("the private key does not match the certificate".into())
        }
        other => TlsError::Handshake(other.to_string()),
    }
}

fn from_certificate_error(c: &CertificateError, peer: Peer, host: Option<&str>) -> TlsError {
    use CertificateError as C;
    match c {
        C::UnknownIssuer => TlsError::UnknownIssuer { peer },
        C::BadSignature => TlsError::IssuerKeyMismatch { peer },
        C::NotValidForName => TlsError::NameMismatch {
            host: host.unwrap_or("the host").to_string(),
            names: Vec::new(),
        },
        C::NotValidForNameContext { presented, .. } => TlsError::NameMismatch {
            host: host.unwrap_or("the host").to_string(),
            names: presented.clone(),
        },
        C::Expired => TlsError::Expired {
            peer,
            when: "has expired".into(),
        },
        C::ExpiredContext { time, not_after } => TlsError::Expired {
            peer,
            when: format!(
                "expired {} ago (its end date is {}, now is {})",
                Ago(time.as_secs().saturating_sub(not_after.as_secs())),
                unix_date(not_after.as_secs()),
                unix_date(time.as_secs())
            ),
        },
        C::NotValidYet => TlsError::Expired {
            peer,
            when: "is not valid yet (is the clock right?)".into(),
        },
        C::NotValidYetContext { time, not_before } => TlsError::Expired {
            peer,
            when: format!(
                "is not valid yet: its start date is {}, now is {} (is the clock right?)",
                unix_date(not_before.as_secs()),
                unix_date(time.as_secs())
            ),
        },
        other => TlsError::BadCertificate {
            peer,
            reason: format!("{other:?}"),
        },
    }
}

/// A duration in the largest whole unit that fits.
struct Ago(u64);

impl fmt::Display for Ago {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let s = self.0;
        match s {
            0..=119 => write!(f, "{s} s"),
            120..=7_199 => write!(f, "{} min", s / 60),
            7_200..=172_799 => write!(f, "{} h", s / 3_600),
            _ => write!(f, "{} days", s / 86_400),
        }
    }
}

/// Seconds since the epoch as an RFC 3339 UTC time.
fn unix_date(secs: u64) -> String {
    time::OffsetDateTime::from_unix_timestamp(secs as i64)
        .ok()
        .and_then(|t| {
            t.format(&time::format_description::well_known::Rfc3339)
                .ok()
        })
        .unwrap_or_else(|| format!("{secs} s after 1970"))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn messages_name_the_problem_and_the_fix() {
        let unknown = TlsError::UnknownIssuer { peer: Peer::Broker }.to_string();
        assert_eq!(
            unknown,
            "the broker's certificate is not signed by a CA in ssl.ca.location (unknown issuer)"
        );
        let name = TlsError::NameMismatch {
            host: "kafka-1".into(),
            names: vec!["localhost".into(), "127.0.0.1".into()],
        }
        .to_string();
        assert!(
            name.contains("does not name kafka-1 (its SANs: localhost, 127.0.0.1)"),
            "{name}"
        );
        assert!(TlsError::NotTls { peer: Peer::Broker }
            .to_string()
            .contains("check security.protocol"));
        assert!(TlsError::ClientCertRequired
            .to_string()
            .contains("ssl.certificate.location and ssl.key.location"));
    }

    #[test]
    fn expiry_says_when() {
        let e = from_certificate_error(
            &CertificateError::ExpiredContext {
                time: rustls_pki_types::UnixTime::since_unix_epoch(Duration::from_secs(
                    1_700_000_000 + 3 * 86_400,
                )),
                not_after: rustls_pki_types::UnixTime::since_unix_epoch(Duration::from_secs(
                    1_700_000_000,
                )),
            },
            Peer::Broker,
            None,
        )
        .to_string();
        assert!(
            e.starts_with(
                "the broker's certificate expired 3 days ago (its end date is 2023-11-14T22:13:20Z"
            ),
            "{e}"
        );
    }

    #[test]
    fn eof_in_a_client_handshake_is_a_hang_up() {
        // A plaintext port, or a broker going down: one error, retried.
        for kind in [
            io::ErrorKind::UnexpectedEof,
            io::ErrorKind::ConnectionReset,
            io::ErrorKind::ConnectionAborted,
        ] {
            let e = TlsError::from_client_handshake(io::Error::new(kind, "tls handshake eof"), "h");
            assert_eq!(e, TlsError::HungUp, "{kind:?}");
        }
        let e = TlsError::from_client_handshake(
            io::Error::new(
                io::ErrorKind::InvalidData,
                rustls::Error::InvalidCertificate(CertificateError::UnknownIssuer),
            ),
            "h",
        );
        assert_eq!(e, TlsError::UnknownIssuer { peer: Peer::Broker });
        let e = TlsError::from_server_handshake(io::Error::new(
            io::ErrorKind::InvalidData,
            rustls::Error::InvalidCertificate(CertificateError::BadSignature),
        ));
        assert_eq!(e, TlsError::IssuerKeyMismatch { peer: Peer::Client });
        assert!(
            e.to_string().contains("the broker's ssl_ca_location"),
            "{e}"
        );
        assert_eq!(
            TlsError::from_client_io(&io::Error::new(
                io::ErrorKind::InvalidData,
                rustls::Error::AlertReceived(AlertDescription::CertificateRequired)
            )),
            Some(TlsError::ClientCertRequired)
        );
        assert_eq!(
            TlsError::from_client_io(&io::Error::from(io::ErrorKind::BrokenPipe)),
            None
        );
    }
}
