//! TLS for syncline's listeners and clients: rustls configurations built from
//! PEM files ([`server_config`], [`client_config`]), the handshakes
//! ([`accept`], [`connect`]), the client certificate's subject
//! ([`peer_subject`]), and a CA with certificates for local clusters
//! ([`create_ca`], [`create_cert`]).
//!
//! Every configuration uses the ring crypto provider, installed explicitly: no
//! process-wide default is read or set. Failures are [`TlsError`]s whose
//! messages say which file, which certificate and what to change.
//!
//! ```no_run
//! # async fn example() -> Result<(), syncline_tls::TlsError> {
//! use std::path::Path;
//! let config = syncline_tls::client_config(Some(Path::new("certs/ca.pem")), None, None)?;
//! let tcp = tokio::net::TcpStream::connect("127.0.0.1:9093").await.unwrap();
//! let stream = syncline_tls::connect(&config, "127.0.0.1", tcp).await?;
//! # Ok(()) }
//! ```

mod error;
mod generate;
mod pem;
mod subject;

use std::path::Path;
use std::sync::Arc;
use std::time::Duration;

use rustls::crypto::CryptoProvider;
use rustls::server::WebPkiClientVerifier;
use rustls_pki_types::{CertificateDer, ServerName};
use tokio::io::{AsyncRead, AsyncWrite};

pub use error::{Peer, TlsError};
pub use generate::{ca_cert_path, ca_key_path, create_ca, create_cert};
pub use rustls::{ClientConfig, ServerConfig};

/// A TLS stream accepted by a listener.
pub type ServerStream<S> = tokio_rustls::server::TlsStream<S>;
/// A TLS stream a client opened.
pub type ClientStream<S> = tokio_rustls::client::TlsStream<S>;

/// How long [`accept`] and [`connect`] wait for the handshake to finish.
pub const HANDSHAKE_TIMEOUT: Duration = Duration::from_secs(10);

/// Whether a listener asks clients for a certificate (`ssl_client_auth`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum ClientAuth {
    /// No client certificate is asked for.
    #[default]
    None,
    /// A certificate is asked for and checked if given; clients without one
    /// are let in too.
    Requested,
    /// Clients without a certificate signed by the CA are refused.
    Required,
}

impl std::str::FromStr for ClientAuth {
    type Err = String;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        match s.trim().to_ascii_lowercase().as_str() {
            "none" => Ok(ClientAuth::None),
            "requested" => Ok(ClientAuth::Requested),
            "required" => Ok(ClientAuth::Required),
            other => Err(format!(
                "ssl client auth must be none, requested or required (got {other:?})"
            )),
        }
    }
}

impl std::fmt::Display for ClientAuth {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            ClientAuth::None => "none",
            ClientAuth::Requested => "requested",
            ClientAuth::Required => "required",
        })
    }
}

/// The crypto provider of every configuration made here.
fn provider() -> Arc<CryptoProvider> {
    Arc::new(rustls::crypto::ring::default_provider())
}

/// A listener's configuration: its certificate chain (`cert`, PEM, its own
/// certificate first) and private key (`key`), and with `client_auth`
/// requested or required the CA (`ca`) that signs clients' certificates.
pub fn server_config(
    cert: &Path,
    key: &Path,
    ca: Option<&Path>,
    client_auth: ClientAuth,
) -> Result<Arc<ServerConfig>, TlsError> {
    let provider = provider();
    let chain = pem::certificates("certificate", cert)?;
    let private_key = pem::private_key("private key", key)?;
    let builder = ServerConfig::builder_with_provider(provider.clone())
        .with_safe_default_protocol_versions()
        .map_err(|e| TlsError::Settings(e.to_string()))?;
    let builder = match client_auth {
        ClientAuth::None => builder.with_no_client_auth(),
        ClientAuth::Requested | ClientAuth::Required => {
            let ca = ca.ok_or_else(|| {
                TlsError::Settings(format!(
                    "ssl_client_auth = {client_auth} needs ssl_ca_location: the CA that signs \
                     the clients' certificates"
                ))
            })?;
            let roots = Arc::new(pem::roots("CA certificate", ca)?);
            let mut verifier = WebPkiClientVerifier::builder_with_provider(roots, provider);
            if client_auth == ClientAuth::Requested {
                verifier = verifier.allow_unauthenticated();
            }
            let verifier = verifier
                .build()
                .map_err(|e| TlsError::Settings(format!("the CA file {}: {e}", ca.display())))?;
            builder.with_client_cert_verifier(verifier)
        }
    };
    let config = builder
        .with_single_cert(chain, private_key)
        .map_err(|e| key_error(e, cert, key))?;
    Ok(Arc::new(config))
}

/// A client's configuration: the CA that signs the brokers' certificates
/// (`ca`; `None`: the operating system's trusted CAs), and optionally this
/// client's own certificate chain and key, for brokers that ask for one.
pub fn client_config(
    ca: Option<&Path>,
    cert: Option<&Path>,
    key: Option<&Path>,
) -> Result<Arc<ClientConfig>, TlsError> {
    let roots = match ca {
        Some(ca) => pem::roots("CA certificate", ca)?,
        None => pem::system_roots()?,
    };
    let builder = ClientConfig::builder_with_provider(provider())
        .with_safe_default_protocol_versions()
        .map_err(|e| TlsError::Settings(e.to_string()))?
        .with_root_certificates(roots);
    let config =
        match (cert, key) {
            (None, None) => builder.with_no_client_auth(),
            (Some(cert), Some(key)) => {
                let chain = pem::certificates("certificate", cert)?;
                let private_key = pem::private_key("private key", key)?;
                builder
                    .with_client_auth_cert(chain, private_key)
                    .map_err(|e| key_error(e, cert, key))?
            }
            _ => return Err(TlsError::Settings(
                "ssl.certificate.location and ssl.key.location go together: set both (a client \
                 certificate) or neither"
                    .into(),
            )),
        };
    Ok(Arc::new(config))
}

/// Why rustls refused a certificate chain with its key.
fn key_error(e: rustls::Error, cert: &Path, key: &Path) -> TlsError {
    match e {
        rustls::Error::InconsistentKeys(_) => TlsError::KeyMismatch {
            cert: cert.to_path_buf(),
            key: key.to_path_buf(),
        },
        other => TlsError::BadFile {
            what: "private key",
            path: key.to_path_buf(),
            reason: other.to_string(),
        },
    }
}

/// The server side of a handshake on `stream`, within [`HANDSHAKE_TIMEOUT`].
pub async fn accept<S>(config: &Arc<ServerConfig>, stream: S) -> Result<ServerStream<S>, TlsError>
where
    S: AsyncRead + AsyncWrite + Unpin,
{
    let acceptor = tokio_rustls::TlsAcceptor::from(config.clone());
    match tokio::time::timeout(HANDSHAKE_TIMEOUT, acceptor.accept(stream)).await {
        Ok(result) => result.map_err(TlsError::from_server_handshake),
        Err(_) => Err(TlsError::Timeout(HANDSHAKE_TIMEOUT)),
    }
}

/// The client side of a handshake on `stream` with the broker `host` (a DNS
/// name or an IP address, `[::1]` or `::1`; its certificate must name it),
/// within [`HANDSHAKE_TIMEOUT`].
///
/// In TLS 1.3 the broker judges the client's certificate after this returns:
/// a broker that requires one and got none closes the stream with an alert,
/// which the first read reports (see [`TlsError::from_client_io`]).
pub async fn connect<S>(
    config: &Arc<ClientConfig>,
    host: &str,
    stream: S,
) -> Result<ClientStream<S>, TlsError>
where
    S: AsyncRead + AsyncWrite + Unpin,
{
    let bare = host
        .strip_prefix('[')
        .and_then(|h| h.strip_suffix(']'))
        .unwrap_or(host);
    let name =
        ServerName::try_from(bare.to_string()).map_err(|_| TlsError::BadHost(host.to_string()))?;
    let connector = tokio_rustls::TlsConnector::from(config.clone());
    match tokio::time::timeout(HANDSHAKE_TIMEOUT, connector.connect(name, stream)).await {
        Ok(result) => result.map_err(|e| TlsError::from_client_handshake(e, bare)),
        Err(_) => Err(TlsError::Timeout(HANDSHAKE_TIMEOUT)),
    }
}

/// The subject of the certificate the client presented, as RFC 2253 writes
/// it (`CN=alice,O=example`), or `None` when it presented none.
pub fn peer_subject<S>(stream: &ServerStream<S>) -> Option<String> {
    let certs: &[CertificateDer<'static>] = stream.get_ref().1.peer_certificates()?;
    subject::subject(certs.first()?)
}

/// The subject of a PEM certificate file's first certificate (RFC 2253).
pub fn certificate_subject(path: &Path) -> Result<String, TlsError> {
    let chain = pem::certificates("certificate", path)?;
    subject::subject(&chain[0]).ok_or_else(|| TlsError::BadFile {
        what: "certificate",
        path: path.to_path_buf(),
        reason: "its certificate does not parse as X.509".into(),
    })
}

#[cfg(test)]
mod tests;
