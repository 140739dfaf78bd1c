//! The settings every client the CLI builds shares: a `--command-config`
//! properties file (Kafka tools' flag), then the security flags over it.
//! [`client_config`] is the one place a command gets its [`ClientConfig`]
//! from.

use std::path::{Path, PathBuf};
use std::sync::OnceLock;

use anyhow::{anyhow, Result};
use clap::Args;
use syncline_client::config::read_properties;
use syncline_client::{ClientConfig, SaslMechanism, SecurityProtocol};

/// Connection security, for every command that talks to the cluster.
#[derive(Debug, Default, Clone, Args)]
pub(crate) struct SecurityArgs {
    /// A client properties file applied to every client the command builds
    /// (Kafka tools' flag): `key=value` lines with Kafka's names, such as
    /// security.protocol, sasl.mechanism, sasl.username, sasl.password,
    /// ssl.ca.location, ssl.certificate.location, ssl.key.location,
    /// client.id, request.timeout.ms. The flags below override it.
    #[arg(long, global = true, value_name = "FILE", help_heading = "Security")]
    pub(crate) command_config: Option<PathBuf>,
    /// PLAINTEXT, SSL, SASL_PLAINTEXT or SASL_SSL (security.protocol).
    #[arg(long, global = true, value_name = "PROTOCOL", value_parser = parse_protocol, help_heading = "Security")]
    pub(crate) security_protocol: Option<SecurityProtocol>,
    /// SCRAM-SHA-256 (the default), SCRAM-SHA-512 or PLAIN (sasl.mechanism).
    #[arg(long, global = true, value_name = "MECHANISM", value_parser = parse_mechanism, help_heading = "Security")]
    pub(crate) sasl_mechanism: Option<SaslMechanism>,
    /// The user to authenticate as (sasl.username).
    #[arg(long, global = true, value_name = "NAME", help_heading = "Security")]
    pub(crate) sasl_username: Option<String>,
    /// The user's password (sasl.password); the environment variable keeps it
    /// out of the process list.
    #[arg(
        long,
        global = true,
        value_name = "PASSWORD",
        env = "SYNCLINE_SASL_PASSWORD",
        hide_env_values = true,
        help_heading = "Security"
    )]
    pub(crate) sasl_password: Option<String>,
    /// PEM file of the CA that signed the brokers' certificates (ssl.ca.location).
    #[arg(long, global = true, value_name = "FILE", help_heading = "Security")]
    pub(crate) ssl_ca_location: Option<PathBuf>,
    /// PEM file of this client's certificate, for brokers that ask for one
    /// (ssl.certificate.location).
    #[arg(long, global = true, value_name = "FILE", help_heading = "Security")]
    pub(crate) ssl_certificate_location: Option<PathBuf>,
    /// PEM file of this client's private key (ssl.key.location).
    #[arg(long, global = true, value_name = "FILE", help_heading = "Security")]
    pub(crate) ssl_key_location: Option<PathBuf>,
}

fn parse_protocol(s: &str) -> Result<SecurityProtocol, String> {
    s.parse()
}

fn parse_mechanism(s: &str) -> Result<SaslMechanism, String> {
    s.parse()
}

/// The settings in the order they apply, each checked already.
#[derive(Debug, Default, Clone, PartialEq, Eq)]
pub(crate) struct Settings {
    entries: Vec<(String, String)>,
}

impl Settings {
    /// The file's settings, then the flags'. A file that cannot be read, a
    /// line that does not parse and a value that is not valid are errors
    /// naming the file and the line.
    pub(crate) fn from_args(args: &SecurityArgs) -> Result<Settings> {
        let mut entries = Vec::new();
        if let Some(path) = &args.command_config {
            entries.extend(file_settings(path)?);
        }
        let path = |p: &Option<PathBuf>| p.as_ref().map(|p| p.display().to_string());
        let flags = [
            (
                "security.protocol",
                args.security_protocol.map(|p| p.to_string()),
            ),
            ("sasl.mechanism", args.sasl_mechanism.map(|m| m.to_string())),
            ("sasl.username", args.sasl_username.clone()),
            ("sasl.password", args.sasl_password.clone()),
            ("ssl.ca.location", path(&args.ssl_ca_location)),
            (
                "ssl.certificate.location",
                path(&args.ssl_certificate_location),
            ),
            ("ssl.key.location", path(&args.ssl_key_location)),
        ];
        for (key, value) in flags {
            if let Some(value) = value {
                entries.push((key.to_string(), value));
            }
        }
        Ok(Settings { entries })
    }

    /// Sets them on `config`.
    pub(crate) fn apply(&self, config: &mut ClientConfig) {
        for (key, value) in &self.entries {
            // Each was set on a ClientConfig when it was read: it cannot fail.
            if let Err(e) = config.set(key, value) {
                tracing::error!(%key, error = %e, "a checked setting failed");
            }
        }
    }
}

/// The settings of a `--command-config` file, each set on a scratch client
/// configuration to check it.
fn file_settings(path: &Path) -> Result<Vec<(String, String)>> {
    let properties = read_properties(path).map_err(|e| anyhow!("--command-config: {e}"))?;
    let mut scratch = ClientConfig::default();
    let mut entries = Vec::with_capacity(properties.len());
    for p in properties {
        let at = format!("--command-config {}:{}", path.display(), p.line);
        if syncline_client::config::canonical(&p.key) == "bootstrap.servers" {
            return Err(anyhow!(
                "{at}: give bootstrap.servers as --bootstrap-server (or \
                 SYNCLINE_BOOTSTRAP_SERVER), not in the file"
            ));
        }
        match scratch.set(&p.key, &p.value) {
            Ok(true) => entries.push((p.key, p.value)),
            Ok(false) => {
                return Err(anyhow!(
                    "{at}: {:?} is not a setting every client shares (the file takes \
                     security.protocol, sasl.*, ssl.*, client.id, request.timeout.ms and the \
                     like; give producer and consumer settings with --producer-property or \
                     --consumer-property)",
                    p.key
                ))
            }
            Err(e) => return Err(anyhow!("{at}: {e}")),
        }
    }
    Ok(entries)
}

static SETTINGS: OnceLock<Settings> = OnceLock::new();

/// Reads the flags and the file once, for every [`client_config`] after.
pub(crate) fn init(args: &SecurityArgs) -> Result<()> {
    let settings = Settings::from_args(args)?;
    // Only main calls this, once.
    let _ = SETTINGS.set(settings);
    Ok(())
}

/// The configuration of a client of `bootstrap`: the defaults, then the
/// `--command-config` file, then the security flags. Every client the CLI
/// builds (admin, producer, consumer, perf) starts from this.
pub(crate) fn client_config(bootstrap: &str) -> ClientConfig {
    let mut config = ClientConfig::new(bootstrap);
    if let Some(settings) = SETTINGS.get() {
        settings.apply(&mut config);
    }
    config
}

#[cfg(test)]
mod tests {
    use super::*;

    fn file(text: &str) -> (tempfile::TempDir, PathBuf) {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("client.properties");
        std::fs::write(&path, text).unwrap();
        (dir, path)
    }

    #[test]
    fn flags_override_the_file() {
        let (_dir, path) = file(
            "# admin client\n\
             security.protocol=SASL_SSL\n\
             sasl.mechanism=SCRAM-SHA-512\n\
             sasl.username=alice\n\
             sasl.password=from-file\n\
             ssl.ca.location=/etc/syncline/ca.pem\n\
             request.timeout.ms=5000\n",
        );
        let args = SecurityArgs {
            command_config: Some(path),
            sasl_password: Some("from-flag".into()),
            sasl_mechanism: Some(SaslMechanism::Plain),
            ..Default::default()
        };
        let settings = Settings::from_args(&args).unwrap();
        let mut config = ClientConfig::new("h:9093");
        settings.apply(&mut config);
        assert_eq!(config.security_protocol, SecurityProtocol::SaslSsl);
        assert_eq!(config.sasl_mechanism, SaslMechanism::Plain);
        assert_eq!(config.sasl_username.as_deref(), Some("alice"));
        assert_eq!(
            config.sasl_password.as_ref().map(|p| p.expose()),
            Some("from-flag")
        );
        assert_eq!(
            config.ssl_ca_location.as_deref(),
            Some(Path::new("/etc/syncline/ca.pem"))
        );
        assert_eq!(config.request_timeout_ms, 5_000);
        assert_eq!(config.bootstrap_servers, ["h:9093"]);
        config.validate().unwrap();
    }

    #[test]
    fn a_bad_file_names_the_file_and_line() {
        for (text, expected) in [
            (
                "security.protocol=SSL\nnot a setting\n",
                ":2: expected key=value",
            ),
            (
                "\n\nsecurity.protocol=TLS\n",
                ":3: invalid configuration: security.protocol must be PLAINTEXT, SSL",
            ),
            (
                "linger.ms=5\n",
                ":1: \"linger.ms\" is not a setting every client shares",
            ),
            (
                "bootstrap.servers=h:1\n",
                ":1: give bootstrap.servers as --bootstrap-server",
            ),
            (
                "sasl.jaas.config=x\n",
                ":1: invalid configuration: sasl.jaas.config is not read",
            ),
        ] {
            let (_dir, path) = file(text);
            let args = SecurityArgs {
                command_config: Some(path.clone()),
                ..Default::default()
            };
            let err = Settings::from_args(&args).unwrap_err().to_string();
            assert!(
                err.contains(&format!("{}{expected}", path.display())),
                "{text:?}: {err}"
            );
        }
        let args = SecurityArgs {
            command_config: Some("/nonexistent/client.properties".into()),
            ..Default::default()
        };
        let err = Settings::from_args(&args).unwrap_err().to_string();
        assert!(
            err.contains("/nonexistent/client.properties: no such file"),
            "{err}"
        );
    }

    #[test]
    fn the_flags_are_global() {
        use clap::Parser;
        let cli = crate::args::Cli::try_parse_from([
            "syncline",
            "topic",
            "list",
            "--security-protocol",
            "sasl_ssl",
            "--sasl-mechanism",
            "SCRAM-SHA-512",
            "--sasl-username",
            "alice",
            "--ssl-ca-location",
            "certs/ca.pem",
            "--command-config",
            "admin.properties",
        ])
        .unwrap();
        let s = &cli.security;
        assert_eq!(s.security_protocol, Some(SecurityProtocol::SaslSsl));
        assert_eq!(s.sasl_mechanism, Some(SaslMechanism::ScramSha512));
        assert_eq!(s.sasl_username.as_deref(), Some("alice"));
        assert_eq!(
            s.ssl_ca_location.as_deref(),
            Some(Path::new("certs/ca.pem"))
        );
        assert_eq!(
            s.command_config.as_deref(),
            Some(Path::new("admin.properties"))
        );
        let err = crate::args::Cli::try_parse_from([
            "syncline",
            "--security-protocol",
            "TLS",
            "topic",
            "list",
        ])
        .unwrap_err()
        .to_string();
        assert!(
            err.contains("PLAINTEXT, SSL, SASL_PLAINTEXT or SASL_SSL"),
            "{err}"
        );
    }

    #[test]
    fn no_flags_and_no_file_change_nothing() {
        let settings = Settings::from_args(&SecurityArgs::default()).unwrap();
        let mut config = ClientConfig::new("h:1");
        settings.apply(&mut config);
        assert_eq!(config, ClientConfig::new("h:1"));
    }
}
