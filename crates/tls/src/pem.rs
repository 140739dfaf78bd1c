//! Reading certificates and keys from PEM files, with errors that name the
//! file and what it holds instead.

use std::path::Path;

use rustls::RootCertStore;
use rustls_pki_types::pem::{PemObject, SectionKind};
use rustls_pki_types::{CertificateDer, PrivateKeyDer};

use crate::error::TlsError;

/// The file's bytes, or an error naming it.
pub(crate) fn read(what: &'static str, path: &Path) -> Result<Vec<u8>, TlsError> {
    std::fs::read(path).map_err(|e| TlsError::File {
        what,
        path: path.to_path_buf(),
        reason: match e.kind() {
            std::io::ErrorKind::NotFound => "no such file".into(),
            std::io::ErrorKind::PermissionDenied => "permission denied".into(),
            _ => e.to_string(),
        },
    })
}

/// The kinds of the PEM sections in `pem` (unparsable sections are skipped).
fn kinds(pem: &[u8]) -> Vec<SectionKind> {
    <(SectionKind, Vec<u8>)>::pem_slice_iter(pem)
        .filter_map(Result::ok)
        .map(|(kind, _)| kind)
        .collect()
}

fn is_key(kind: &SectionKind) -> bool {
    matches!(
        kind,
        SectionKind::PrivateKey | SectionKind::RsaPrivateKey | SectionKind::EcPrivateKey
    )
}

/// Every certificate in the file, in order (a chain: the end entity first).
pub(crate) fn certificates(
    what: &'static str,
    path: &Path,
) -> Result<Vec<CertificateDer<'static>>, TlsError> {
    let pem = read(what, path)?;
    let certs = CertificateDer::pem_slice_iter(&pem)
        .collect::<Result<Vec<_>, _>>()
        .map_err(|e| TlsError::BadFile {
            what,
            path: path.to_path_buf(),
            reason: format!("bad PEM: {e}"),
        })?;
    if certs.is_empty() {
        return Err(TlsError::NoCertificate {
            what,
            path: path.to_path_buf(),
            holds_key: kinds(&pem).iter().any(is_key),
        });
    }
    Ok(certs)
}

/// The first private key in the file (PKCS#8, PKCS#1 or SEC1).
pub(crate) fn private_key(
    what: &'static str,
    path: &Path,
) -> Result<PrivateKeyDer<'static>, TlsError> {
    let pem = read(what, path)?;
    match PrivateKeyDer::from_pem_slice(&pem) {
        Ok(key) => Ok(key),
        Err(rustls_pki_types::pem::Error::NoItemsFound) => Err(TlsError::NoPrivateKey {
            what,
            path: path.to_path_buf(),
            holds_certificate: kinds(&pem).contains(&SectionKind::Certificate),
        }),
        Err(e) => Err(TlsError::BadFile {
            what,
            path: path.to_path_buf(),
            reason: format!("bad PEM: {e}"),
        }),
    }
}

/// The CA certificates in the file as a root store.
pub(crate) fn roots(what: &'static str, path: &Path) -> Result<RootCertStore, TlsError> {
    let mut roots = RootCertStore::empty();
    for cert in certificates(what, path)? {
        roots.add(cert).map_err(|e| TlsError::BadFile {
            what,
            path: path.to_path_buf(),
            reason: format!("a certificate in it is not a usable CA: {e}"),
        })?;
    }
    Ok(roots)
}

/// The operating system's trusted CAs.
pub(crate) fn system_roots() -> Result<RootCertStore, TlsError> {
    let found = rustls_native_certs::load_native_certs();
    let mut roots = RootCertStore::empty();
    let (added, _ignored) = roots.add_parsable_certificates(found.certs);
    if added == 0 {
        let why = found
            .errors
            .first()
            .map(|e| format!(" ({e})"))
            .unwrap_or_default();
        return Err(TlsError::Settings(format!(
            "ssl.ca.location is not set and the system has no trusted CA certificates{why}: \
             set ssl.ca.location to the CA that signed the brokers' certificates"
        )));
    }
    Ok(roots)
}
