//! A CA and certificates for local clusters and tests: `ca.pem`/`ca.key`, and
//! per name `NAME.pem`/`NAME.key`, usable as a broker's and as a client's
//! certificate. Keys are ECDSA P-256, written readable by their owner only.

use std::io::Write;
use std::path::{Path, PathBuf};

use rcgen::{
    BasicConstraints, CertificateParams, DistinguishedName, DnType, ExtendedKeyUsagePurpose, IsCa,
    Issuer, KeyPair, KeyUsagePurpose,
};
use time::{Duration, OffsetDateTime};

use crate::error::TlsError;

/// How long a generated CA is valid.
const CA_VALIDITY: Duration = Duration::days(3650);
/// How long a generated certificate is valid.
const CERT_VALIDITY: Duration = Duration::days(825);
/// Clock skew tolerated: certificates start being valid this long ago.
const BACKDATE: Duration = Duration::hours(1);

/// The CA certificate file in a CA directory.
pub fn ca_cert_path(dir: &Path) -> PathBuf {
    dir.join("ca.pem")
}

/// The CA key file in a CA directory.
pub fn ca_key_path(dir: &Path) -> PathBuf {
    dir.join("ca.key")
}

/// Creates a CA: `dir/ca.pem` (its certificate, to give as `ssl.ca.location`)
/// and `dir/ca.key` (mode 0600). `dir` is created if missing; an existing CA
/// there is an error, since replacing it would orphan the certificates it
/// signed.
pub fn create_ca(dir: &Path) -> Result<(), TlsError> {
    let (cert_path, key_path) = (ca_cert_path(dir), ca_key_path(dir));
    for path in [&cert_path, &key_path] {
        if path.exists() {
            return Err(TlsError::Generate(format!(
                "{} exists: a CA is already there (remove ca.pem and ca.key to replace it, \
                 which orphans the certificates it signed, or use another directory)",
                path.display()
            )));
        }
    }
    let key = KeyPair::generate().map_err(generate("a CA key"))?;
    let mut params = CertificateParams::default();
    // A name of its own, so that a certificate checked against another
    // syncline CA reads as an unknown issuer.
    let id: String = key.public_key_raw()[1..5]
        .iter()
        .map(|b| format!("{b:02x}"))
        .collect();
    let mut dn = DistinguishedName::new();
    dn.push(DnType::CommonName, format!("syncline CA {id}"));
    params.distinguished_name = dn;
    params.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
    params.key_usages = vec![
        KeyUsagePurpose::KeyCertSign,
        KeyUsagePurpose::CrlSign,
        KeyUsagePurpose::DigitalSignature,
    ];
    let now = OffsetDateTime::now_utc();
    params.not_before = now - BACKDATE;
    params.not_after = now + CA_VALIDITY;
    let cert = params
        .self_signed(&key)
        .map_err(generate("the CA certificate"))?;
    create_dir(dir)?;
    write_file(&key_path, key.serialize_pem().as_bytes(), true)?;
    write_file(&cert_path, cert.pem().as_bytes(), false)
}

/// Creates `out_dir/NAME.pem` and `out_dir/NAME.key` (mode 0600): a certificate
/// with CN=NAME, signed by the CA in `ca_dir`, valid for server and client
/// authentication, naming `hosts` (DNS names and IP addresses) as its subject
/// alternative names. A client's certificate needs no hosts.
pub fn create_cert(
    ca_dir: &Path,
    name: &str,
    hosts: &[String],
    out_dir: &Path,
) -> Result<(), TlsError> {
    let now = OffsetDateTime::now_utc();
    issue(
        ca_dir,
        name,
        hosts,
        out_dir,
        now - BACKDATE,
        now + CERT_VALIDITY,
    )
}

/// [`create_cert`] with explicit validity dates (tests make expired ones).
pub(crate) fn issue(
    ca_dir: &Path,
    name: &str,
    hosts: &[String],
    out_dir: &Path,
    not_before: OffsetDateTime,
    not_after: OffsetDateTime,
) -> Result<(), TlsError> {
    check_name(name)?;
    let issuer = load_ca(ca_dir)?;
    let mut params = CertificateParams::new(hosts.to_vec()).map_err(|e| {
        TlsError::Generate(format!(
            "bad --host in {hosts:?}: {e} (give DNS names or IP addresses)"
        ))
    })?;
    let mut dn = DistinguishedName::new();
    dn.push(DnType::CommonName, name);
    params.distinguished_name = dn;
    params.key_usages = vec![KeyUsagePurpose::DigitalSignature];
    params.extended_key_usages = vec![
        ExtendedKeyUsagePurpose::ServerAuth,
        ExtendedKeyUsagePurpose::ClientAuth,
    ];
    params.use_authority_key_identifier_extension = true;
    params.not_before = not_before;
    params.not_after = not_after;
    let key = KeyPair::generate().map_err(generate("a key"))?;
    let cert = params
        .signed_by(&key, &issuer)
        .map_err(generate("the certificate"))?;
    create_dir(out_dir)?;
    write_file(
        &out_dir.join(format!("{name}.key")),
        key.serialize_pem().as_bytes(),
        true,
    )?;
    write_file(
        &out_dir.join(format!("{name}.pem")),
        cert.pem().as_bytes(),
        false,
    )
}

/// The CA in `dir`, ready to sign.
fn load_ca(dir: &Path) -> Result<Issuer<'static, KeyPair>, TlsError> {
    let (cert_path, key_path) = (ca_cert_path(dir), ca_key_path(dir));
    let text = |what, path: &Path| {
        let bytes = crate::pem::read(what, path)?;
        String::from_utf8(bytes).map_err(|_| TlsError::BadFile {
            what,
            path: path.to_path_buf(),
            reason: "not text (expected PEM)".into(),
        })
    };
    let key_pem = text("CA private key", &key_path)?;
    let cert_pem = text("CA certificate", &cert_path)?;
    let key = KeyPair::from_pem(&key_pem).map_err(|e| TlsError::BadFile {
        what: "CA private key",
        path: key_path.clone(),
        reason: format!("not a PEM private key: {e}"),
    })?;
    Issuer::from_ca_cert_pem(&cert_pem, key).map_err(|e| TlsError::BadFile {
        what: "CA certificate",
        path: cert_path,
        reason: format!("not a PEM CA certificate: {e}"),
    })
}

/// A name is used as a file name and as the CN.
fn check_name(name: &str) -> Result<(), TlsError> {
    let ok = !name.is_empty()
        && name.len() <= 64
        && !name.starts_with('.')
        && name
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || matches!(c, '.' | '_' | '-'));
    if ok {
        Ok(())
    } else {
        Err(TlsError::Generate(format!(
            "certificate name {name:?} must be 1 to 64 letters, digits, '.', '_' or '-', \
             not starting with '.' (it names the files NAME.pem and NAME.key)"
        )))
    }
}

fn generate(what: &'static str) -> impl Fn(rcgen::Error) -> TlsError {
    move |e| TlsError::Generate(format!("cannot generate {what}: {e}"))
}

fn create_dir(dir: &Path) -> Result<(), TlsError> {
    std::fs::create_dir_all(dir).map_err(|e| {
        TlsError::Generate(format!(
            "cannot create the directory {}: {e}",
            dir.display()
        ))
    })
}

/// Writes a file, replacing it; a private one is readable by its owner only.
fn write_file(path: &Path, contents: &[u8], private: bool) -> Result<(), TlsError> {
    let mut options = std::fs::OpenOptions::new();
    options.write(true).create(true).truncate(true);
    #[cfg(unix)]
    {
        use std::os::unix::fs::OpenOptionsExt;
        options.mode(if private { 0o600 } else { 0o644 });
    }
    let written = options.open(path).and_then(|mut f| {
        // The mode applies to a new file only: tighten one that existed.
        #[cfg(unix)]
        if private {
            use std::os::unix::fs::PermissionsExt;
            f.set_permissions(std::fs::Permissions::from_mode(0o600))?;
        }
        f.write_all(contents)?;
        f.sync_all()
    });
    written.map_err(|e| TlsError::Generate(format!("cannot write {}: {e}", path.display())))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_ca_is_not_replaced_and_keys_are_private() {
        let dir = tempfile::tempdir().unwrap();
        create_ca(dir.path()).unwrap();
        let err = create_ca(dir.path()).unwrap_err().to_string();
        assert!(err.contains("a CA is already there"), "{err}");
        create_cert(dir.path(), "broker-1", &["localhost".into()], dir.path()).unwrap();
        #[cfg(unix)]
        {
            use std::os::unix::fs::PermissionsExt;
            for f in ["ca.key", "broker-1.key"] {
                let mode = std::fs::metadata(dir.path().join(f))
                    .unwrap()
                    .permissions()
                    .mode();
                assert_eq!(mode & 0o777, 0o600, "{f}");
            }
        }
    }

    #[test]
    fn names_and_hosts_are_checked() {
        let dir = tempfile::tempdir().unwrap();
        create_ca(dir.path()).unwrap();
        for bad in ["", "../x", ".hidden", "a/b", "a b"] {
            let err = create_cert(dir.path(), bad, &[], dir.path()).unwrap_err();
            assert!(err.to_string().contains("certificate name"), "{bad}: {err}");
        }
        let missing = tempfile::tempdir().unwrap();
        let err = create_cert(missing.path(), "x", &[], missing.path())
            .unwrap_err()
            .to_string();
        assert!(
            err.contains("CA private key file")
                && err.contains("ca.key")
                && err.contains("no such file"),
            "{err}"
        );
    }
}
