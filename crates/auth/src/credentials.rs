//! Broker credential files.
//!
//! Brokers authenticate each other with [`MECHANISM`]; broker N's username is
//! `broker-N` ([`username`]). A credentials directory holds, per broker:
//!
//! - `broker-N.secret`: the broker's password, one line (a random 32-byte
//!   value, base64), mode 0600;
//! - `broker-N.verifier`: what peers check that password against (TOML, mode
//!   0644): `mechanism`, `salt`, `iterations`, `stored_key`, `server_key`.
//!
//! Brokers on one host can share a directory. On several hosts, each host's
//! directory holds its own broker's secret and copies of every broker's
//! verifier.
//!
//! Files are written to a temporary file in the same directory, fsynced and
//! renamed, so a crash never leaves half a file and brokers creating their own
//! files at the same time never clash.

use std::fs::{self, DirBuilder};
use std::io;
use std::os::unix::fs::DirBuilderExt as _;
use std::path::{Path, PathBuf};

use base64::engine::general_purpose::STANDARD as BASE64;
use base64::Engine as _;

use crate::scram::{Mechanism, Verifier, MAX_ITERATIONS, MIN_ITERATIONS};

/// The mechanism brokers authenticate each other with.
pub const MECHANISM: Mechanism = Mechanism::ScramSha256;

/// Mode of a `.secret` file: readable by its owner only.
const SECRET_MODE: u32 = 0o600;
/// Mode of a `.verifier` file: readable by all (it reveals no password).
const VERIFIER_MODE: u32 = 0o644;
/// Mode of a credentials directory this module creates.
const DIR_MODE: u32 = 0o700;

/// Broker `broker_id`'s username: `"broker-7"`.
pub fn username(broker_id: i32) -> String {
    format!("broker-{broker_id}")
}

/// The broker id of a broker username (`"broker-7"` -> `Some(7)`); `None` for
/// anything else, including non-canonical numbers (`"broker-07"`,
/// `"broker-+7"`) and negative ids.
pub fn broker_id_of(username: &str) -> Option<i32> {
    let digits = username.strip_prefix("broker-")?;
    let id: i32 = digits.parse().ok()?;
    (id >= 0 && id.to_string() == digits).then_some(id)
}

/// Path of broker `broker_id`'s secret in `dir`: `dir/broker-N.secret`.
pub fn secret_path(dir: &Path, broker_id: i32) -> PathBuf {
    dir.join(secret_name(broker_id))
}

/// Path of broker `broker_id`'s verifier in `dir`: `dir/broker-N.verifier`.
pub fn verifier_path(dir: &Path, broker_id: i32) -> PathBuf {
    dir.join(verifier_name(broker_id))
}

fn secret_name(broker_id: i32) -> String {
    format!("{}.secret", username(broker_id))
}

fn verifier_name(broker_id: i32) -> String {
    format!("{}.verifier", username(broker_id))
}

/// Why a broker credential could not be read or made. Every message names the
/// file and says how to fix it.
#[derive(Debug, thiserror::Error)]
pub enum CredentialError {
    /// Broker ids are never negative.
    #[error("broker id {0} is negative: broker credentials exist only for ids >= 0")]
    InvalidBrokerId(i32),
    /// Reading or writing a file failed.
    #[error("cannot {action} {}: {source} (check that the path exists and that this user may {action} it)", path.display())]
    Io {
        /// What was being done: "read", "write", "create".
        action: &'static str,
        /// The file or directory.
        path: PathBuf,
        /// The error.
        #[source]
        source: io::Error,
    },
    /// The verifier exists but the secret it was made from does not.
    #[error(
        "{verifier} exists in {} but {secret} does not: restore the secret, or delete the verifier \
         to create a new credential (peers then need the new verifier)",
        dir.display()
    )]
    VerifierWithoutSecret {
        /// The credentials directory.
        dir: PathBuf,
        /// The secret's file name.
        secret: String,
        /// The verifier's file name.
        verifier: String,
    },
    /// The secret is not the password the verifier was made from.
    #[error(
        "{} does not match {}: the verifier was made from another password; restore the secret it \
         was made from, or delete the verifier to write a new one from the secret (peers then need \
         the new verifier)",
        secret.display(), verifier.display()
    )]
    Mismatch {
        /// The secret file.
        secret: PathBuf,
        /// The verifier file.
        verifier: PathBuf,
    },
    /// The secret file is empty (or only whitespace), or not text.
    #[error(
        "{} {problem}: restore the password, or delete it and its verifier to create a new \
         credential (peers then need the new verifier)",
        path.display()
    )]
    BadSecret {
        /// The secret file.
        path: PathBuf,
        /// What is wrong: "is empty", "is not UTF-8 text".
        problem: &'static str,
    },
    /// The verifier file does not parse or holds values out of range.
    #[error(
        "{} is not a valid verifier: {reason}; fix it, or delete it (with the secret it belongs to, \
         if that is lost) to create a new credential (peers then need the new verifier)",
        path.display()
    )]
    BadVerifier {
        /// The verifier file.
        path: PathBuf,
        /// What is wrong, naming the field.
        reason: String,
    },
    /// The verifier is of a mechanism brokers do not authenticate with.
    #[error(
        "{} is a {found} verifier, but brokers authenticate with {MECHANISM}: delete it to write a \
         new one from the secret (peers then need the new verifier)",
        path.display()
    )]
    WrongMechanism {
        /// The verifier file.
        path: PathBuf,
        /// Its mechanism.
        found: Mechanism,
    },
}

/// Makes sure broker `broker_id` has a credential in `dir` and returns its
/// password:
///
/// - both files missing: creates both (and `dir`, mode 0700, if missing);
/// - secret present, verifier missing: writes a verifier for it (new salt);
/// - verifier present, secret missing: an error;
/// - both present: the password, only if the verifier matches the secret.
///
/// A secret with surrounding whitespace or a newline is fine (trimmed); an
/// empty one is an error.
pub fn ensure(dir: &Path, broker_id: i32) -> Result<String, CredentialError> {
    check_id(broker_id)?;
    let secret = read_secret(dir, broker_id)?;
    let verifier = load_verifier(dir, broker_id)?;
    match (secret, verifier) {
        (None, None) => create(dir, broker_id),
        (Some(password), None) => {
            let verifier = Verifier::generate(MECHANISM, &password);
            write_verifier(dir, broker_id, &verifier)?;
            Ok(password)
        }
        (None, Some(_)) => Err(CredentialError::VerifierWithoutSecret {
            dir: dir.to_path_buf(),
            secret: secret_name(broker_id),
            verifier: verifier_name(broker_id),
        }),
        (Some(password), Some(verifier)) => {
            if verifier.mechanism != MECHANISM {
                return Err(CredentialError::WrongMechanism {
                    path: verifier_path(dir, broker_id),
                    found: verifier.mechanism,
                });
            }
            if verifier.matches(&password) {
                Ok(password)
            } else {
                Err(CredentialError::Mismatch {
                    secret: secret_path(dir, broker_id),
                    verifier: verifier_path(dir, broker_id),
                })
            }
        }
    }
}

/// Creates a new credential for broker `broker_id` in `dir` (and `dir`, mode
/// 0700, if missing), replacing any (rotation). Returns the new password.
///
/// The secret is written before the verifier: a crash in between leaves a new
/// secret with no verifier or with the old one, which [`ensure`] repairs or
/// reports.
pub fn create(dir: &Path, broker_id: i32) -> Result<String, CredentialError> {
    check_id(broker_id)?;
    DirBuilder::new()
        .recursive(true)
        .mode(DIR_MODE)
        .create(dir)
        .map_err(|source| CredentialError::Io {
            action: "create",
            path: dir.to_path_buf(),
            source,
        })?;
    let secret: [u8; 32] = rand::random();
    let password = BASE64.encode(secret);
    let verifier = Verifier::generate(MECHANISM, &password);
    write_atomically(
        dir,
        &secret_name(broker_id),
        format!("{password}\n").as_bytes(),
        SECRET_MODE,
    )?;
    write_verifier(dir, broker_id, &verifier)?;
    Ok(password)
}

/// Reads broker `broker_id`'s verifier from `dir`; `Ok(None)` if the file does
/// not exist (yet).
pub fn load_verifier(dir: &Path, broker_id: i32) -> Result<Option<Verifier>, CredentialError> {
    check_id(broker_id)?;
    let path = verifier_path(dir, broker_id);
    let Some(bytes) = read_if_exists(&path)? else {
        return Ok(None);
    };
    let bad = |reason: String| CredentialError::BadVerifier {
        path: path.clone(),
        reason,
    };
    let text = String::from_utf8(bytes).map_err(|_| bad("it is not UTF-8 text".to_string()))?;
    let file: VerifierFile = toml::from_str(&text).map_err(|e| bad(toml_reason(&text, &e)))?;
    let mechanism = Mechanism::from_name(&file.mechanism).ok_or_else(|| {
        bad(format!(
            "field `mechanism` is {:?}; it must be {:?} or {:?}",
            file.mechanism,
            Mechanism::ScramSha256.name(),
            Mechanism::ScramSha512.name()
        ))
    })?;
    let decode = |field: &str, value: &str| {
        BASE64
            .decode(value)
            .map_err(|e| bad(format!("field `{field}` is not base64: {e}")))
    };
    let salt = decode("salt", &file.salt)?;
    let stored_key = decode("stored_key", &file.stored_key)?;
    let server_key = decode("server_key", &file.server_key)?;
    if salt.is_empty() {
        return Err(bad("field `salt` is empty".to_string()));
    }
    let key_len = mechanism.output_len();
    for (field, key) in [("stored_key", &stored_key), ("server_key", &server_key)] {
        if key.len() != key_len {
            return Err(bad(format!(
                "field `{field}` has {} bytes; {mechanism} needs {key_len}",
                key.len()
            )));
        }
    }
    if !(MIN_ITERATIONS..=MAX_ITERATIONS).contains(&file.iterations) {
        return Err(bad(format!(
            "field `iterations` is {}; it must be from {MIN_ITERATIONS} to {MAX_ITERATIONS}",
            file.iterations
        )));
    }
    Ok(Some(Verifier {
        mechanism,
        salt,
        iterations: file.iterations,
        stored_key,
        server_key,
    }))
}

/// A one-line description of a TOML error, with the line it is on (which names
/// the field) when it has one.
fn toml_reason(text: &str, error: &toml::de::Error) -> String {
    let message = error.message().trim_end();
    match error.span() {
        Some(span) if !text.is_empty() => {
            let start = span.start.min(text.len());
            let number = text.as_bytes()[..start]
                .iter()
                .filter(|&&b| b == b'\n')
                .count()
                + 1;
            let line = text.lines().nth(number - 1).unwrap_or_default().trim();
            format!("{message} (line {number}: `{}`)", truncated(line))
        }
        _ => message.to_string(),
    }
}

/// At most 60 characters of `s`, for error messages.
fn truncated(s: &str) -> &str {
    match s.char_indices().nth(60) {
        Some((at, _)) => &s[..at],
        None => s,
    }
}

/// The fields of a `.verifier` file.
#[derive(serde::Deserialize)]
struct VerifierFile {
    mechanism: String,
    salt: String,
    iterations: u32,
    stored_key: String,
    server_key: String,
}

fn check_id(broker_id: i32) -> Result<(), CredentialError> {
    if broker_id < 0 {
        return Err(CredentialError::InvalidBrokerId(broker_id));
    }
    Ok(())
}

/// The trimmed secret of broker `broker_id`, `None` if the file does not exist.
fn read_secret(dir: &Path, broker_id: i32) -> Result<Option<String>, CredentialError> {
    let path = secret_path(dir, broker_id);
    let Some(bytes) = read_if_exists(&path)? else {
        return Ok(None);
    };
    let text = String::from_utf8(bytes).map_err(|_| CredentialError::BadSecret {
        path: path.clone(),
        problem: "is not UTF-8 text",
    })?;
    let password = text.trim();
    if password.is_empty() {
        return Err(CredentialError::BadSecret {
            path,
            problem: "is empty",
        });
    }
    Ok(Some(password.to_string()))
}

fn read_if_exists(path: &Path) -> Result<Option<Vec<u8>>, CredentialError> {
    match fs::read(path) {
        Ok(bytes) => Ok(Some(bytes)),
        Err(e) if e.kind() == io::ErrorKind::NotFound => Ok(None),
        Err(source) => Err(CredentialError::Io {
            action: "read",
            path: path.to_path_buf(),
            source,
        }),
    }
}

fn write_verifier(dir: &Path, broker_id: i32, verifier: &Verifier) -> Result<(), CredentialError> {
    let contents = format!(
        "# syncline {} verifier of {}: what brokers check its password against (it does not \
         reveal the password). Copy it to every broker's credentials directory.\n\
         mechanism = \"{}\"\n\
         salt = \"{}\"\n\
         iterations = {}\n\
         stored_key = \"{}\"\n\
         server_key = \"{}\"\n",
        verifier.mechanism,
        username(broker_id),
        verifier.mechanism,
        BASE64.encode(&verifier.salt),
        verifier.iterations,
        BASE64.encode(&verifier.stored_key),
        BASE64.encode(&verifier.server_key),
    );
    write_atomically(
        dir,
        &verifier_name(broker_id),
        contents.as_bytes(),
        VERIFIER_MODE,
    )
}

/// Writes `dir/name` with `contents` and exactly `mode`
/// ([`syncline_durable::write_atomic_with_mode`]: a temporary file in `dir`,
/// created with `mode` so never more readable, fsynced, renamed over `name`, then
/// the directory fsynced).
fn write_atomically(
    dir: &Path,
    name: &str,
    contents: &[u8],
    mode: u32,
) -> Result<(), CredentialError> {
    let path = dir.join(name);
    syncline_durable::write_atomic_with_mode(&path, contents, mode).map_err(|source| {
        CredentialError::Io {
            action: "write",
            path,
            source,
        }
    })
}

#[cfg(test)]
mod tests {
    use std::fs::Permissions;
    use std::os::unix::fs::PermissionsExt as _;

    use super::*;

    fn mode(path: &Path) -> u32 {
        fs::metadata(path).unwrap().permissions().mode() & 0o777
    }

    fn files(dir: &Path) -> Vec<String> {
        let mut names: Vec<String> = fs::read_dir(dir)
            .unwrap()
            .map(|e| e.unwrap().file_name().into_string().unwrap())
            .collect();
        names.sort();
        names
    }

    #[test]
    fn usernames() {
        assert_eq!(username(7), "broker-7");
        assert_eq!(username(0), "broker-0");
        assert_eq!(broker_id_of("broker-7"), Some(7));
        assert_eq!(broker_id_of("broker-0"), Some(0));
        assert_eq!(broker_id_of("broker-2147483647"), Some(i32::MAX));
        for bad in [
            "",
            "broker",
            "broker-",
            "broker--1",
            "broker-1x",
            "broker-x1",
            "broker-07",
            "broker-00",
            "broker-+1",
            "broker- 1",
            "broker-1 ",
            "Broker-1",
            "BROKER-1",
            "broker_1",
            "xbroker-1",
            "broker-2147483648",
            "broker-99999999999",
        ] {
            assert_eq!(broker_id_of(bad), None, "{bad:?}");
        }
        for id in [0, 1, 42, i32::MAX] {
            assert_eq!(broker_id_of(&username(id)), Some(id));
        }
    }

    #[test]
    fn paths() {
        let dir = Path::new("/etc/syncline/credentials");
        assert_eq!(
            secret_path(dir, 3),
            Path::new("/etc/syncline/credentials/broker-3.secret")
        );
        assert_eq!(
            verifier_path(dir, 3),
            Path::new("/etc/syncline/credentials/broker-3.verifier")
        );
    }

    #[test]
    fn ensure_creates_both_files_and_the_directory() {
        let root = tempfile::tempdir().unwrap();
        let dir = root.path().join("a/credentials");
        let password = ensure(&dir, 3).unwrap();
        assert_eq!(mode(&dir), 0o700);
        assert_eq!(files(&dir), ["broker-3.secret", "broker-3.verifier"]);
        assert_eq!(mode(&secret_path(&dir, 3)), 0o600);
        assert_eq!(mode(&verifier_path(&dir, 3)), 0o644);
        assert_eq!(
            fs::read_to_string(secret_path(&dir, 3)).unwrap(),
            format!("{password}\n")
        );
        assert_eq!(BASE64.decode(&password).unwrap().len(), 32);
        let verifier = load_verifier(&dir, 3).unwrap().unwrap();
        assert_eq!(verifier.mechanism, Mechanism::ScramSha256);
        assert_eq!(verifier.iterations, Verifier::DEFAULT_ITERATIONS);
        assert_eq!(verifier.salt.len(), 32);
        assert!(verifier.matches(&password));
        let text = fs::read_to_string(verifier_path(&dir, 3)).unwrap();
        assert!(
            text.starts_with("# syncline SCRAM-SHA-256 verifier of broker-3"),
            "{text}"
        );
        assert!(text.contains("mechanism = \"SCRAM-SHA-256\"\n"), "{text}");
        assert!(text.contains("iterations = 4096\n"), "{text}");
        assert!(!text.contains(&password));

        // Both present and matching: the same password, files untouched.
        assert_eq!(ensure(&dir, 3).unwrap(), password);
        assert_eq!(fs::read_to_string(verifier_path(&dir, 3)).unwrap(), text);
        // Another broker in the same directory gets its own credential.
        let other = ensure(&dir, 4).unwrap();
        assert_ne!(other, password);
        assert_eq!(files(&dir).len(), 4);
    }

    #[test]
    fn ensure_in_an_existing_directory_keeps_its_mode() {
        let dir = tempfile::tempdir().unwrap();
        fs::set_permissions(dir.path(), Permissions::from_mode(0o755)).unwrap();
        ensure(dir.path(), 1).unwrap();
        assert_eq!(mode(dir.path()), 0o755);
    }

    #[test]
    fn ensure_writes_a_missing_verifier() {
        let dir = tempfile::tempdir().unwrap();
        fs::write(secret_path(dir.path(), 2), "  my-password \n\n").unwrap();
        assert_eq!(ensure(dir.path(), 2).unwrap(), "my-password");
        let verifier = load_verifier(dir.path(), 2).unwrap().unwrap();
        assert!(verifier.matches("my-password"));
        assert_eq!(mode(&verifier_path(dir.path(), 2)), 0o644);
        assert_eq!(ensure(dir.path(), 2).unwrap(), "my-password");
        // Only the two files: no temporary file left over.
        assert_eq!(files(dir.path()), ["broker-2.secret", "broker-2.verifier"]);
    }

    #[test]
    fn ensure_refuses_a_verifier_without_secret() {
        let dir = tempfile::tempdir().unwrap();
        ensure(dir.path(), 3).unwrap();
        fs::remove_file(secret_path(dir.path(), 3)).unwrap();
        let error = ensure(dir.path(), 3).unwrap_err();
        assert!(matches!(
            error,
            CredentialError::VerifierWithoutSecret { .. }
        ));
        let message = error.to_string();
        assert!(
            message.starts_with(&format!(
                "broker-3.verifier exists in {} but broker-3.secret does not: restore the secret, \
                 or delete the verifier",
                dir.path().display()
            )),
            "{message}"
        );
        // Nothing was written.
        assert_eq!(files(dir.path()), ["broker-3.verifier"]);
    }

    #[test]
    fn ensure_refuses_a_mismatch() {
        let dir = tempfile::tempdir().unwrap();
        ensure(dir.path(), 3).unwrap();
        fs::write(secret_path(dir.path(), 3), "another-password\n").unwrap();
        let error = ensure(dir.path(), 3).unwrap_err();
        assert!(matches!(error, CredentialError::Mismatch { .. }));
        let message = error.to_string();
        assert!(
            message.starts_with(&format!(
                "{} does not match {}:",
                secret_path(dir.path(), 3).display(),
                verifier_path(dir.path(), 3).display()
            )),
            "{message}"
        );
    }

    #[test]
    fn ensure_refuses_an_empty_secret() {
        let dir = tempfile::tempdir().unwrap();
        for contents in ["", " \n\t\n"] {
            fs::write(secret_path(dir.path(), 5), contents).unwrap();
            let error = ensure(dir.path(), 5).unwrap_err();
            assert!(
                matches!(
                    error,
                    CredentialError::BadSecret {
                        problem: "is empty",
                        ..
                    }
                ),
                "{error}"
            );
            assert!(
                error.to_string().contains("broker-5.secret is empty"),
                "{error}"
            );
        }
        fs::write(secret_path(dir.path(), 5), b"\xff\xfe").unwrap();
        assert!(matches!(
            ensure(dir.path(), 5),
            Err(CredentialError::BadSecret {
                problem: "is not UTF-8 text",
                ..
            })
        ));
        // No verifier was written for the bad secret.
        assert_eq!(files(dir.path()), ["broker-5.secret"]);
    }

    #[test]
    fn ensure_refuses_a_garbled_verifier() {
        let dir = tempfile::tempdir().unwrap();
        ensure(dir.path(), 1).unwrap();
        fs::write(verifier_path(dir.path(), 1), "not toml at all").unwrap();
        assert!(matches!(
            ensure(dir.path(), 1),
            Err(CredentialError::BadVerifier { .. })
        ));
    }

    #[test]
    fn ensure_refuses_a_verifier_of_another_mechanism() {
        let dir = tempfile::tempdir().unwrap();
        let password = ensure(dir.path(), 1).unwrap();
        let verifier = Verifier::generate(Mechanism::ScramSha512, &password);
        write_verifier(dir.path(), 1, &verifier).unwrap();
        assert_eq!(load_verifier(dir.path(), 1).unwrap(), Some(verifier));
        let error = ensure(dir.path(), 1).unwrap_err();
        assert!(
            matches!(error, CredentialError::WrongMechanism { .. }),
            "{error}"
        );
    }

    #[test]
    fn create_replaces_the_credential() {
        let dir = tempfile::tempdir().unwrap();
        let old = ensure(dir.path(), 6).unwrap();
        let old_verifier = load_verifier(dir.path(), 6).unwrap().unwrap();
        let new = create(dir.path(), 6).unwrap();
        assert_ne!(old, new);
        let new_verifier = load_verifier(dir.path(), 6).unwrap().unwrap();
        assert_ne!(old_verifier, new_verifier);
        assert!(new_verifier.matches(&new));
        assert!(!new_verifier.matches(&old));
        assert_eq!(ensure(dir.path(), 6).unwrap(), new);
        assert_eq!(mode(&secret_path(dir.path(), 6)), 0o600);
        assert_eq!(mode(&verifier_path(dir.path(), 6)), 0o644);
        assert_eq!(files(dir.path()), ["broker-6.secret", "broker-6.verifier"]);
    }

    #[test]
    fn create_fixes_modes_of_replaced_files() {
        let dir = tempfile::tempdir().unwrap();
        fs::write(secret_path(dir.path(), 1), "x").unwrap();
        fs::set_permissions(secret_path(dir.path(), 1), Permissions::from_mode(0o666)).unwrap();
        create(dir.path(), 1).unwrap();
        assert_eq!(mode(&secret_path(dir.path(), 1)), 0o600);
    }

    #[test]
    fn negative_broker_ids_are_refused() {
        let dir = tempfile::tempdir().unwrap();
        assert!(matches!(
            ensure(dir.path(), -1),
            Err(CredentialError::InvalidBrokerId(-1))
        ));
        assert!(matches!(
            create(dir.path(), -1),
            Err(CredentialError::InvalidBrokerId(-1))
        ));
        assert!(matches!(
            load_verifier(dir.path(), -1),
            Err(CredentialError::InvalidBrokerId(-1))
        ));
        assert!(files(dir.path()).is_empty());
    }

    #[test]
    fn load_verifier_of_a_missing_file() {
        let dir = tempfile::tempdir().unwrap();
        assert_eq!(load_verifier(dir.path(), 1).unwrap(), None);
        assert_eq!(load_verifier(&dir.path().join("nowhere"), 1).unwrap(), None);
    }

    #[test]
    fn load_verifier_of_a_directory_is_an_io_error() {
        let dir = tempfile::tempdir().unwrap();
        fs::create_dir(verifier_path(dir.path(), 1)).unwrap();
        let error = load_verifier(dir.path(), 1).unwrap_err();
        assert!(
            matches!(error, CredentialError::Io { action: "read", .. }),
            "{error}"
        );
        assert!(error.to_string().contains("broker-1.verifier"), "{error}");
    }

    #[test]
    fn load_verifier_reports_the_bad_field() {
        let dir = tempfile::tempdir().unwrap();
        ensure(dir.path(), 1).unwrap();
        let good = fs::read_to_string(verifier_path(dir.path(), 1)).unwrap();
        let replace_line = |field: &str, line: &str| {
            good.lines()
                .map(|l| {
                    if l.starts_with(&format!("{field} =")) {
                        line
                    } else {
                        l
                    }
                })
                .collect::<Vec<_>>()
                .join("\n")
        };
        let remove_line = |field: &str| {
            good.lines()
                .filter(|l| !l.starts_with(&format!("{field} =")))
                .collect::<Vec<_>>()
                .join("\n")
        };
        let cases = [
            (remove_line("salt"), "salt"),
            (remove_line("server_key"), "server_key"),
            (
                replace_line("mechanism", "mechanism = \"scram-sha-256\""),
                "mechanism",
            ),
            (replace_line("mechanism", "mechanism = 256"), "mechanism"),
            (replace_line("salt", "salt = \"!!!\""), "salt"),
            (replace_line("salt", "salt = \"\""), "salt"),
            (
                replace_line("iterations", "iterations = \"4096\""),
                "iterations",
            ),
            (replace_line("iterations", "iterations = -1"), "iterations"),
            (
                replace_line("iterations", "iterations = 4095"),
                "iterations",
            ),
            (
                replace_line("iterations", "iterations = 1000001"),
                "iterations",
            ),
            (
                replace_line("stored_key", "stored_key = \"AAAA\""),
                "stored_key",
            ),
            (
                replace_line("server_key", "server_key = \"not base64\""),
                "server_key",
            ),
            ("garbage = [".to_string(), ""),
            (String::new(), "mechanism"),
        ];
        for (contents, field) in cases {
            fs::write(verifier_path(dir.path(), 1), &contents).unwrap();
            let error = load_verifier(dir.path(), 1).unwrap_err();
            let message = error.to_string();
            assert!(
                matches!(error, CredentialError::BadVerifier { .. }),
                "{message}"
            );
            assert!(message.contains("broker-1.verifier"), "{message}");
            assert!(message.contains(field), "{field}: {message}");
        }
        fs::write(verifier_path(dir.path(), 1), b"\xff\xfe").unwrap();
        assert!(matches!(
            load_verifier(dir.path(), 1),
            Err(CredentialError::BadVerifier { .. })
        ));
        // Unknown fields and comments are tolerated.
        fs::write(
            verifier_path(dir.path(), 1),
            format!("{good}\n# note\nextra = 1\n"),
        )
        .unwrap();
        assert!(load_verifier(dir.path(), 1).unwrap().is_some());
    }
}
