//! Secure clusters for the end-to-end tests: a local CA, one certificate the
//! brokers share (and one for clients, where the listener wants mutual TLS),
//! an `admin` super user bootstrapped into the metadata log, and the client
//! settings that go with them.
//!
//! With `SYNCLINE_E2E_SECURE=1` every cluster the harness starts is a secure
//! one ([`enabled`]) and every client it makes authenticates as `admin`: the
//! replication, failover and chaos tests run on it unchanged
//! (`scripts/test.sh` runs them both ways).

use std::path::{Path, PathBuf};
use std::sync::Arc;

use syncline_auth::{Mechanism, Verifier};
use syncline_client::{ClientConfig, Connection, Connector};

/// The super user every secure cluster has.
pub const ADMIN: &str = "admin";

/// Whether the harness starts secure clusters (`SYNCLINE_E2E_SECURE=1`).
pub fn enabled() -> bool {
    std::env::var("SYNCLINE_E2E_SECURE").is_ok_and(|v| v == "1")
}

/// One cluster's security material, in a directory of its temp dir.
#[derive(Debug, Clone)]
pub struct Security {
    /// Where the files are.
    pub dir: PathBuf,
    /// The admin's password.
    pub admin_password: String,
}

impl Security {
    /// Makes a CA, a broker certificate for 127.0.0.1 and localhost, a client
    /// certificate, the admin's password and the controller's bootstrap file
    /// in `dir`.
    pub fn create(dir: &Path) -> Security {
        std::fs::create_dir_all(dir).expect("security dir");
        syncline_tls::create_ca(dir).expect("CA");
        let hosts = ["127.0.0.1".to_string(), "localhost".to_string()];
        syncline_tls::create_cert(dir, "broker", &hosts, dir).expect("broker certificate");
        syncline_tls::create_cert(dir, "client", &hosts, dir).expect("client certificate");
        let admin_password = format!("{:032x}", rand::random::<u128>());
        let lines: Vec<String> = [Mechanism::ScramSha256, Mechanism::ScramSha512]
            .into_iter()
            .map(|m| {
                syncline_controller::scram_bootstrap_line(
                    ADMIN,
                    &Verifier::generate(m, &admin_password),
                )
            })
            .collect();
        let security = Security {
            dir: dir.to_path_buf(),
            admin_password,
        };
        std::fs::write(security.bootstrap_file(), lines.join("\n") + "\n").expect("bootstrap file");
        std::fs::write(
            security.client_properties(),
            security
                .client_settings(true)
                .iter()
                .map(|(k, v)| format!("{k}={v}\n"))
                .collect::<String>(),
        )
        .expect("client properties");
        security
    }

    /// The CA certificate.
    pub fn ca(&self) -> PathBuf {
        syncline_tls::ca_cert_path(&self.dir)
    }

    /// The controller's `scram_bootstrap_file`.
    pub fn bootstrap_file(&self) -> PathBuf {
        self.dir.join("bootstrap-users")
    }

    /// The admin's `--command-config` file (with the client certificate).
    pub fn client_properties(&self) -> PathBuf {
        self.dir.join("client.properties")
    }

    /// The TLS lines every broker's config gets.
    pub fn broker_tls(&self) -> String {
        format!(
            "ssl_certificate_location = \"{}\"\nssl_key_location = \"{}\"\nssl_ca_location = \"{}\"\n\
             authorizer_enable = true\nsuper_users = \"User:{ADMIN}\"\nscram_bootstrap_file = \"{}\"\n",
            self.dir.join("broker.pem").display(),
            self.dir.join("broker.key").display(),
            self.ca().display(),
            self.bootstrap_file().display(),
        )
    }

    /// The admin's client settings (Kafka's names); `certificate`: with the
    /// client certificate, for listeners that want mutual TLS.
    pub fn client_settings(&self, certificate: bool) -> Vec<(String, String)> {
        self.user_settings(ADMIN, &self.admin_password, certificate)
    }

    /// A user's client settings over SASL_SSL with SCRAM-SHA-512.
    pub fn user_settings(
        &self,
        user: &str,
        password: &str,
        certificate: bool,
    ) -> Vec<(String, String)> {
        let mut settings = vec![
            ("security.protocol".to_string(), "SASL_SSL".to_string()),
            ("sasl.mechanism".to_string(), "SCRAM-SHA-512".to_string()),
            ("sasl.username".to_string(), user.to_string()),
            ("sasl.password".to_string(), password.to_string()),
            (
                "ssl.ca.location".to_string(),
                self.ca().display().to_string(),
            ),
        ];
        if certificate {
            settings.push((
                "ssl.certificate.location".to_string(),
                self.dir.join("client.pem").display().to_string(),
            ));
            settings.push((
                "ssl.key.location".to_string(),
                self.dir.join("client.key").display().to_string(),
            ));
        }
        settings
    }

    /// `config` with the admin's settings.
    pub fn apply(&self, config: &mut ClientConfig) {
        for (k, v) in self.client_settings(true) {
            config.set(&k, &v).expect("a client setting");
        }
    }

    /// A connection to `addr` authenticated as the admin.
    pub async fn connect(&self, addr: &str) -> anyhow::Result<Connection> {
        self.connect_as(addr, "e2e").await
    }

    /// As [`connect`](Self::connect), with `client_id`.
    pub async fn connect_as(&self, addr: &str, client_id: &str) -> anyhow::Result<Connection> {
        let mut config = ClientConfig::new(addr);
        config.client_id = client_id.into();
        self.apply(&mut config);
        Ok(Connector::new(&config)?.connect(addr).await?)
    }

    /// A TLS client configuration trusting the cluster's CA and presenting
    /// the client certificate (for connections made by hand).
    pub fn tls_client(&self) -> Arc<syncline_tls::ClientConfig> {
        syncline_tls::client_config(
            Some(&self.ca()),
            Some(&self.dir.join("client.pem")),
            Some(&self.dir.join("client.key")),
        )
        .expect("TLS client config")
    }
}

/// The security of the secure cluster this test process runs (the harness
/// registers it when it starts one), for the helpers that connect by address.
static ACTIVE: parking_lot::RwLock<Option<Security>> = parking_lot::RwLock::new(None);

/// Makes `security` the one [`connect`] uses.
pub fn register(security: &Security) {
    *ACTIVE.write() = Some(security.clone());
}

/// The registered security, if a secure cluster runs.
pub fn active() -> Option<Security> {
    ACTIVE.read().clone()
}

/// A connection to `addr`: authenticated as the admin when a secure cluster
/// runs, plain TCP otherwise.
pub async fn connect(
    addr: &str,
    client_id: &str,
    timeout: std::time::Duration,
) -> anyhow::Result<Connection> {
    match active() {
        Some(s) => Ok(tokio::time::timeout(timeout, s.connect_as(addr, client_id)).await??),
        None => Ok(Connection::connect(addr, client_id, timeout).await?),
    }
}

/// `config` with the admin's settings when a secure cluster runs.
pub fn secure_client(config: &mut ClientConfig) {
    if let Some(s) = active() {
        s.apply(config);
    }
}
