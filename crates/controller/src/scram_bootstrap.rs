//! The `scram_bootstrap_file`: users a new cluster starts with.
//!
//! One credential per line, as `syncline user verifier` prints it:
//!
//! ```text
//! # NAME MECHANISM salt=B64 iterations=N stored_key=B64 server_key=B64
//! admin SCRAM-SHA-256 salt=c2FsdA== iterations=4096 stored_key=... server_key=...
//! ```
//!
//! Blank lines and lines starting with `#` are skipped. A verifier, never a
//! password: the file reveals nothing that lets anyone log in. The active controller
//! reads it as it takes office and commits its users once in the cluster's life
//! (see [`Controller::bootstrap_scram_credentials`](crate::Controller::bootstrap_scram_credentials)).

use std::collections::BTreeMap;

use base64::engine::general_purpose::STANDARD as BASE64;
use base64::Engine as _;
use syncline_auth::Verifier;
use syncline_proto::pb;

use crate::controller::check_credential;

/// The fields of a line, for error messages.
const LINE_FORMAT: &str =
    "NAME MECHANISM salt=BASE64 iterations=N stored_key=BASE64 server_key=BASE64";

/// The keyed fields of a line, in the order they are printed.
const KEYS: [&str; 4] = ["salt", "iterations", "stored_key", "server_key"];

/// Why a bootstrap file was refused: its first bad line and what is wrong with it.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("line {line}: {reason}")]
pub struct ScramBootstrapError {
    /// The line, from 1.
    pub line: usize,
    /// What is wrong, and how to fix it.
    pub reason: String,
}

/// `name`'s `verifier` as one line of a bootstrap file (no newline).
pub fn scram_bootstrap_line(name: &str, verifier: &Verifier) -> String {
    format!(
        "{name} {} salt={} iterations={} stored_key={} server_key={}",
        verifier.mechanism.name(),
        BASE64.encode(&verifier.salt),
        verifier.iterations,
        BASE64.encode(&verifier.stored_key),
        BASE64.encode(&verifier.server_key),
    )
}

/// The credentials of a bootstrap file, in file order. Every credential is checked as
/// `AlterUserScramCredentials` checks one (name, mechanism, iterations, key
/// lengths), and a (user, mechanism) may appear once.
pub fn parse_scram_bootstrap(text: &str) -> Result<Vec<pb::ScramCredential>, ScramBootstrapError> {
    let mut credentials = Vec::new();
    let mut seen: BTreeMap<(String, String), usize> = BTreeMap::new();
    for (index, raw) in text.lines().enumerate() {
        let line = index + 1;
        let trimmed = raw.trim();
        if trimmed.is_empty() || trimmed.starts_with('#') {
            continue;
        }
        let bad = |reason: String| ScramBootstrapError { line, reason };
        let c = parse_line(trimmed).map_err(bad)?;
        check_credential(&c).map_err(|(_, why)| bad(why))?;
        let key = (c.name.clone(), c.mechanism.clone());
        if let Some(first) = seen.insert(key, line) {
            return Err(bad(format!(
                "user {:?} has a {} credential on line {first} already: keep one of the two lines",
                c.name, c.mechanism
            )));
        }
        credentials.push(c);
    }
    Ok(credentials)
}

fn parse_line(line: &str) -> Result<pb::ScramCredential, String> {
    let fields: Vec<&str> = line.split_whitespace().collect();
    let [name, mechanism, keyed @ ..] = fields.as_slice() else {
        unreachable!("a non-blank line has a field")
    };
    if fields.len() != 2 + KEYS.len() {
        return Err(format!(
            "expected {} fields `{LINE_FORMAT}` (as `syncline user verifier` prints them), found {}",
            2 + KEYS.len(),
            fields.len()
        ));
    }
    let mut values: BTreeMap<&str, &str> = BTreeMap::new();
    for field in keyed {
        let Some((key, value)) = field.split_once('=') else {
            return Err(format!(
                "field {field:?} is not KEY=VALUE: expected `{LINE_FORMAT}`"
            ));
        };
        if !KEYS.contains(&key) {
            return Err(format!(
                "unknown field {key:?}: expected {}",
                KEYS.map(|k| format!("{k}=")).join(", ")
            ));
        }
        if values.insert(key, value).is_some() {
            return Err(format!("field {key}= appears twice: keep one"));
        }
    }
    let bytes = |key: &str| {
        BASE64
            .decode(values[key])
            .map_err(|e| format!("{key}= is not base64: {e}"))
    };
    let iterations = values["iterations"];
    Ok(pb::ScramCredential {
        name: (*name).to_owned(),
        mechanism: (*mechanism).to_owned(),
        salt: bytes("salt")?.into(),
        iterations: iterations
            .parse()
            .map_err(|_| format!("iterations={iterations} is not a number"))?,
        stored_key: bytes("stored_key")?.into(),
        server_key: bytes("server_key")?.into(),
    })
}

#[cfg(test)]
mod tests {
    use syncline_auth::Mechanism;

    use super::*;
    use crate::controller::verifier_of;

    fn verifier(mechanism: Mechanism) -> Verifier {
        Verifier::new(mechanism, "secret", b"salty", 4096)
    }

    #[test]
    fn a_printed_line_parses_back_to_the_same_verifier() {
        let a = verifier(Mechanism::ScramSha256);
        let b = verifier(Mechanism::ScramSha512);
        let text = format!(
            "# users\n\n{}\n   {}  \n",
            scram_bootstrap_line("alice", &a),
            scram_bootstrap_line("bob", &b)
        );
        let parsed = parse_scram_bootstrap(&text).unwrap();
        assert_eq!(parsed.len(), 2);
        assert_eq!(parsed[0].name, "alice");
        assert_eq!(verifier_of(&parsed[0]), Some(a));
        assert_eq!(parsed[1].name, "bob");
        let b2 = verifier_of(&parsed[1]).unwrap();
        assert!(b2.matches("secret") && !b2.matches("other"));
        assert_eq!(parse_scram_bootstrap("# nothing\n\n"), Ok(vec![]));
    }

    #[test]
    fn every_bad_line_is_refused_with_its_number_and_what_is_wrong() {
        let good = scram_bootstrap_line("alice", &verifier(Mechanism::ScramSha256));
        let swap = |from: &str, to: &str| good.replacen(from, to, 1);
        let keys = good.split_once(" salt=").unwrap().1.to_string();
        let cases: Vec<(&str, String, &str)> = vec![
            (
                "too few fields",
                "alice SCRAM-SHA-256 salt=AAAA".into(),
                "expected 6 fields",
            ),
            (
                "not key=value",
                swap("iterations=", "iterations:"),
                "is not KEY=VALUE",
            ),
            (
                "unknown key",
                swap("salt=", "pepper="),
                "unknown field \"pepper\"",
            ),
            (
                "repeated key",
                swap("iterations=4096", "salt=AAAA"),
                "salt= appears twice",
            ),
            (
                "bad base64",
                swap("salt=", "salt=!!"),
                "salt= is not base64",
            ),
            (
                "bad number",
                swap("iterations=4096", "iterations=many"),
                "not a number",
            ),
            (
                "few iterations",
                swap("iterations=4096", "iterations=10"),
                "out of range",
            ),
            (
                "unknown mechanism",
                swap("SCRAM-SHA-256", "SCRAM-MD5"),
                "unknown SCRAM mechanism",
            ),
            (
                "broker name",
                swap("alice", "broker-1"),
                "reserved for broker 1",
            ),
            (
                "short key",
                format!("alice SCRAM-SHA-512 salt={keys}"),
                "SCRAM-SHA-512 keys have 64",
            ),
            (
                "repeated user",
                format!("{good}\n{good}"),
                "on line 3 already",
            ),
        ];
        for (what, line, expected) in cases {
            let text = format!("# header\n\n{line}\n");
            let e = parse_scram_bootstrap(&text).expect_err(what);
            let expected_line = if what == "repeated user" { 4 } else { 3 };
            assert_eq!(e.line, expected_line, "{what}: {e}");
            assert!(e.reason.contains(expected), "{what}: {e}");
        }
    }
}
