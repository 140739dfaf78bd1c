//! `syncline user`: SCRAM users, as Kafka's `kafka-configs --entity-type users
//! --alter --add-config 'SCRAM-SHA-256=[iterations=N,password=...]'` and
//! `--delete-config` and `--describe` manage them, and `user verifier`, which
//! prints a `scram_bootstrap_file` line without a cluster.
//!
//! The verifier is made here: the password never leaves this process. It is read
//! from a file or standard input so that it does not show in the process list
//! (`--password` works too, for scripts that accept that).

use std::io::Read as _;
use std::path::{Path, PathBuf};

use anyhow::{anyhow, bail, Context as _, Result};
use clap::{Args, Subcommand};
use serde_json::{json, Value};
use syncline_auth::{Mechanism, Verifier};
use syncline_client::{
    Admin, ClientConfig, UserAlterationResult, UserScramCredentialAlteration, UserScramCredentials,
};

use crate::errors::{explain, Ctx};
use crate::output::Table;

/// The iterations a new credential gets (Kafka's default, RFC 7677's minimum).
const DEFAULT_ITERATIONS: u32 = 4096;

#[derive(Debug, Subcommand)]
pub(crate) enum UserCommand {
    /// Create a user, or replace its credential for the mechanism.
    Create(CreateArgs),
    /// Delete a user's credentials (every mechanism, or those named); its
    /// connections are closed.
    Delete {
        /// The user.
        name: String,
        /// Only this mechanism's credential (repeatable).
        #[arg(long = "mechanism", value_name = "MECHANISM", value_parser = parse_mechanism)]
        mechanisms: Vec<Mechanism>,
    },
    /// Users and the mechanisms they have credentials for (never their keys).
    List {
        /// Only these users.
        names: Vec<String>,
        /// Print JSON instead of a table.
        #[arg(long)]
        json: bool,
    },
    /// Print the `scram_bootstrap_file` line of a user's credential, without a
    /// cluster: the users a new cluster starts with.
    Verifier(VerifierArgs),
}

#[derive(Debug, Args)]
pub(crate) struct CreateArgs {
    /// The user.
    pub(crate) name: String,
    /// SCRAM-SHA-256 or SCRAM-SHA-512 (repeatable: one credential each).
    #[arg(long = "mechanism", value_name = "MECHANISM", value_parser = parse_mechanism,
          default_value = "SCRAM-SHA-256")]
    pub(crate) mechanisms: Vec<Mechanism>,
    #[command(flatten)]
    pub(crate) password: PasswordArgs,
    /// PBKDF2 iterations, 4096 to 1000000.
    #[arg(long, default_value_t = DEFAULT_ITERATIONS)]
    pub(crate) iterations: u32,
}

#[derive(Debug, Args)]
pub(crate) struct VerifierArgs {
    /// The user.
    pub(crate) name: String,
    /// SCRAM-SHA-256 or SCRAM-SHA-512.
    #[arg(long, value_parser = parse_mechanism, default_value = "SCRAM-SHA-256")]
    pub(crate) mechanism: Mechanism,
    #[command(flatten)]
    pub(crate) password: PasswordArgs,
    /// PBKDF2 iterations, 4096 to 1000000.
    #[arg(long, default_value_t = DEFAULT_ITERATIONS)]
    pub(crate) iterations: u32,
}

/// Where the password comes from: exactly one of these.
#[derive(Debug, Args)]
#[group(required = true, multiple = false)]
pub(crate) struct PasswordArgs {
    /// The password (visible to other users in the process list: prefer
    /// --password-file or --password-stdin).
    #[arg(long, value_name = "PASSWORD")]
    pub(crate) password: Option<String>,
    /// Read the password from the first line of FILE.
    #[arg(long, value_name = "FILE")]
    pub(crate) password_file: Option<PathBuf>,
    /// Read the password from the first line of standard input (no prompt).
    #[arg(long)]
    pub(crate) password_stdin: bool,
}

impl PasswordArgs {
    fn read(&self) -> Result<String> {
        let password = if let Some(p) = &self.password {
            p.clone()
        } else if let Some(path) = &self.password_file {
            read_password_file(path)?
        } else {
            let mut text = String::new();
            std::io::stdin()
                .read_to_string(&mut text)
                .context("cannot read the password from standard input")?;
            first_line(&text).to_string()
        };
        if password.is_empty() {
            bail!("the password is empty: give a non-empty password");
        }
        Ok(password)
    }
}

/// The first line of `text`, without its line ending.
fn first_line(text: &str) -> &str {
    text.lines().next().unwrap_or("")
}

fn read_password_file(path: &Path) -> Result<String> {
    let text = std::fs::read_to_string(path)
        .with_context(|| format!("cannot read the password file {}", path.display()))?;
    Ok(first_line(&text).to_string())
}

fn parse_mechanism(s: &str) -> Result<Mechanism, String> {
    Mechanism::from_name(&s.to_ascii_uppercase()).ok_or_else(|| {
        format!(
            "unknown mechanism {s:?}: use {} or {}",
            Mechanism::ScramSha256.name(),
            Mechanism::ScramSha512.name()
        )
    })
}

fn check_iterations(iterations: u32) -> Result<()> {
    let range = syncline_auth::scram::MIN_ITERATIONS..=syncline_auth::scram::MAX_ITERATIONS;
    if !range.contains(&iterations) {
        bail!(
            "--iterations {iterations} is out of range: use {} to {}",
            range.start(),
            range.end()
        );
    }
    Ok(())
}

/// The bootstrap-file line of `name`'s credential, checked as the controller
/// checks the file (so a name it would refuse is refused here).
fn verifier_line(name: &str, verifier: &Verifier) -> Result<String> {
    let line = syncline_controller::scram_bootstrap_line(name, verifier);
    syncline_controller::parse_scram_bootstrap(&line).map_err(|e| anyhow!("{}", e.reason))?;
    Ok(line)
}

pub(crate) async fn run(command: UserCommand, config: ClientConfig) -> Result<()> {
    if let UserCommand::Verifier(args) = &command {
        check_iterations(args.iterations)?;
        let password = args.password.read()?;
        let salt: [u8; 32] = rand::random();
        let verifier = Verifier::new(args.mechanism, &password, &salt, args.iterations);
        println!("{}", verifier_line(&args.name, &verifier)?);
        return Ok(());
    }
    let bootstrap = config.bootstrap_servers.join(",");
    let ctx = Ctx {
        bootstrap: &bootstrap,
        topic: None,
    };
    let fail = |e: syncline_client::ClientError| anyhow!(explain(&e, ctx));
    let admin = Admin::new(config).map_err(fail)?;
    match command {
        UserCommand::Verifier(_) => unreachable!("answered above"),
        UserCommand::Create(args) => {
            check_iterations(args.iterations)?;
            let password = args.password.read()?;
            let alterations: Vec<UserScramCredentialAlteration> = args
                .mechanisms
                .iter()
                .map(|m| {
                    UserScramCredentialAlteration::upsert(
                        &args.name,
                        *m,
                        &password,
                        args.iterations,
                    )
                })
                .collect();
            let results = admin
                .alter_user_scram_credentials(&alterations)
                .await
                .map_err(fail)?;
            check_results(&results)?;
            let names: Vec<&str> = args.mechanisms.iter().map(|m| m.name()).collect();
            println!(
                "Set {} credentials for user {}",
                names.join(", "),
                args.name
            );
        }
        UserCommand::Delete { name, mechanisms } => {
            let mechanisms = if mechanisms.is_empty() {
                let described = admin
                    .describe_user_scram_credentials(&[&name])
                    .await
                    .map_err(fail)?;
                let user = described
                    .into_iter()
                    .next()
                    .ok_or_else(|| anyhow!("the broker did not describe user {name}"))?;
                if let Some(code) = user.error {
                    bail!("user {name}: {code}: {}", user.message);
                }
                user.credentials.iter().map(|c| c.mechanism).collect()
            } else {
                mechanisms
            };
            let alterations: Vec<UserScramCredentialAlteration> = mechanisms
                .iter()
                .map(|m| UserScramCredentialAlteration::Delete {
                    user: name.clone(),
                    mechanism: *m,
                })
                .collect();
            let results = admin
                .alter_user_scram_credentials(&alterations)
                .await
                .map_err(fail)?;
            check_results(&results)?;
            let names: Vec<&str> = mechanisms.iter().map(|m| m.name()).collect();
            println!("Deleted {} credentials of user {name}", names.join(", "));
        }
        UserCommand::List { names, json } => {
            let names: Vec<&str> = names.iter().map(String::as_str).collect();
            let users = admin
                .describe_user_scram_credentials(&names)
                .await
                .map_err(fail)?;
            if json {
                println!("{}", serde_json::to_string_pretty(&list_json(&users))?);
            } else {
                print!("{}", list_table(&users));
            }
            if let Some(u) = users.iter().find(|u| u.error.is_some()) {
                bail!(
                    "user {}: {}: {}",
                    u.user,
                    u.error.map(|c| c.to_string()).unwrap_or_default(),
                    u.message
                );
            }
        }
    }
    Ok(())
}

/// The first refused user, as an error.
fn check_results(results: &[UserAlterationResult]) -> Result<()> {
    match results.iter().find(|r| r.error.is_some()) {
        Some(r) => Err(anyhow!(
            "user {}: {}: {}",
            r.user,
            r.error.map(|c| c.to_string()).unwrap_or_default(),
            r.message
        )),
        None => Ok(()),
    }
}

fn list_table(users: &[UserScramCredentials]) -> String {
    let mut table = Table::new(&["USER", "MECHANISM", "ITERATIONS"]);
    for u in users.iter().filter(|u| u.error.is_none()) {
        for c in &u.credentials {
            table.row(vec![
                u.user.clone(),
                c.mechanism.name().to_string(),
                c.iterations.to_string(),
            ]);
        }
    }
    table.render()
}

fn list_json(users: &[UserScramCredentials]) -> Value {
    users
        .iter()
        .map(|u| {
            json!({
                "user": u.user,
                "error": u.error.map(|c| c.to_string()),
                "message": u.message,
                "credentials": u.credentials.iter().map(|c| json!({
                    "mechanism": c.mechanism.name(),
                    "iterations": c.iterations,
                })).collect::<Vec<_>>(),
            })
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use syncline_client::ScramCredentialInfo;

    use super::*;

    fn parse(args: &[&str]) -> Result<UserCommand, clap::Error> {
        crate::args::parse_subcommand("user", args)
    }

    #[test]
    fn create_takes_exactly_one_password_source_and_repeatable_mechanisms() {
        let UserCommand::Create(c) = parse(&["create", "alice", "--password-stdin"]).unwrap()
        else {
            panic!()
        };
        assert_eq!(c.mechanisms, vec![Mechanism::ScramSha256]);
        assert_eq!(c.iterations, 4096);
        assert!(c.password.password_stdin);
        let UserCommand::Create(c) = parse(&[
            "create",
            "alice",
            "--mechanism",
            "SCRAM-SHA-256",
            "--mechanism",
            "scram-sha-512",
            "--password-file",
            "/p",
            "--iterations",
            "8192",
        ])
        .unwrap() else {
            panic!()
        };
        assert_eq!(
            c.mechanisms,
            vec![Mechanism::ScramSha256, Mechanism::ScramSha512]
        );
        assert_eq!(c.password.password_file, Some(PathBuf::from("/p")));
        assert_eq!(c.iterations, 8192);
        // No password, two passwords, an unknown mechanism.
        assert!(parse(&["create", "alice"]).is_err());
        assert!(parse(&["create", "alice", "--password", "x", "--password-stdin"]).is_err());
        let e = parse(&["create", "a", "--mechanism", "PLAIN", "--password", "x"])
            .unwrap_err()
            .to_string();
        assert!(e.contains("SCRAM-SHA-256 or SCRAM-SHA-512"), "{e}");
    }

    #[test]
    fn delete_list_and_verifier_arguments() {
        let UserCommand::Delete { name, mechanisms } = parse(&["delete", "bob"]).unwrap() else {
            panic!()
        };
        assert_eq!((name.as_str(), mechanisms.len()), ("bob", 0));
        let UserCommand::Delete { mechanisms, .. } =
            parse(&["delete", "bob", "--mechanism", "SCRAM-SHA-512"]).unwrap()
        else {
            panic!()
        };
        assert_eq!(mechanisms, vec![Mechanism::ScramSha512]);
        let UserCommand::List { names, json } = parse(&["list", "a", "b", "--json"]).unwrap()
        else {
            panic!()
        };
        assert_eq!((names.len(), json), (2, true));
        let UserCommand::Verifier(v) = parse(&[
            "verifier",
            "admin",
            "--mechanism",
            "SCRAM-SHA-512",
            "--password-file",
            "/secret",
        ])
        .unwrap() else {
            panic!()
        };
        assert_eq!(
            (v.name.as_str(), v.mechanism),
            ("admin", Mechanism::ScramSha512)
        );
        assert!(
            parse(&["verifier", "admin"]).is_err(),
            "a password is needed"
        );
    }

    #[test]
    fn passwords_come_from_the_first_line_of_a_file() {
        let dir = std::env::temp_dir().join(format!("syncline-user-test-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let path = dir.join("pw");
        std::fs::write(&path, "s3cret\r\nignored\n").unwrap();
        let args = PasswordArgs {
            password: None,
            password_file: Some(path.clone()),
            password_stdin: false,
        };
        assert_eq!(args.read().unwrap(), "s3cret");
        std::fs::write(&path, "\n").unwrap();
        assert!(args.read().unwrap_err().to_string().contains("empty"));
        let missing = PasswordArgs {
            password_file: Some(dir.join("missing")),
            ..args
        };
        let e = missing.read().unwrap_err().to_string();
        assert!(
            e.contains("cannot read the password file") && e.contains("missing"),
            "{e}"
        );
        std::fs::remove_dir_all(&dir).unwrap();
    }

    #[test]
    fn the_verifier_line_is_what_the_controller_reads_back() {
        let v = Verifier::new(Mechanism::ScramSha256, "pw", b"salt", 4096);
        let line = verifier_line("admin", &v).unwrap();
        assert!(line.starts_with("admin SCRAM-SHA-256 salt=c2FsdA== iterations=4096 stored_key="));
        let parsed = syncline_controller::parse_scram_bootstrap(&line).unwrap();
        assert_eq!(
            syncline_controller::verifier_of(&parsed[0]),
            Some(v.clone())
        );
        let e = verifier_line("broker-1", &v).unwrap_err().to_string();
        assert!(e.contains("reserved for broker 1"), "{e}");
        assert!(check_iterations(100)
            .unwrap_err()
            .to_string()
            .contains("4096 to 1000000"));
    }

    #[test]
    fn list_shows_each_users_mechanisms() {
        let users = vec![UserScramCredentials {
            user: "alice".into(),
            error: None,
            message: String::new(),
            credentials: vec![
                ScramCredentialInfo {
                    mechanism: Mechanism::ScramSha256,
                    iterations: 4096,
                },
                ScramCredentialInfo {
                    mechanism: Mechanism::ScramSha512,
                    iterations: 8192,
                },
            ],
        }];
        assert_eq!(
            list_table(&users),
            "USER   MECHANISM      ITERATIONS\nalice  SCRAM-SHA-256  4096\nalice  SCRAM-SHA-512  8192\n"
        );
        assert_eq!(list_json(&users)[0]["credentials"][1]["iterations"], 8192);
    }
}
