//! Client configuration. Names and defaults are Kafka's, with dots written as
//! underscores (`linger.ms` → `linger_ms`).

use std::path::{Path, PathBuf};
use std::time::Duration;

use syncline_proto::compression::Compression;
use syncline_proto::pb::IsolationLevel;
use syncline_proto::Backoff;

use crate::error::ClientError;

/// Settings every client (admin, producer, consumer) shares.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ClientConfig {
    /// `host:port` of brokers to ask first; any one reachable is enough.
    pub bootstrap_servers: Vec<String>,
    /// Sent with every request, for the broker's logs and metrics.
    pub client_id: String,
    /// How long to wait for a response before giving up on a request.
    pub request_timeout_ms: u64,
    /// How long a TCP connect may take (`socket.connection.setup.timeout.ms`).
    pub connect_timeout_ms: u64,
    /// Cached metadata older than this is refreshed even without errors.
    pub metadata_max_age_ms: u64,
    /// First wait before retrying a failed request; doubles per attempt.
    pub retry_backoff_ms: u64,
    /// Upper bound of the doubling retry wait.
    pub retry_backoff_max_ms: u64,
    /// Largest frame accepted from a broker.
    pub max_frame_bytes: usize,
    /// TLS and SASL on the connections (`security.protocol`).
    pub security_protocol: SecurityProtocol,
    /// The SASL mechanism of `SASL_PLAINTEXT` and `SASL_SSL` (`sasl.mechanism`).
    pub sasl_mechanism: SaslMechanism,
    /// Who to authenticate as with SASL (`sasl.username`).
    pub sasl_username: Option<String>,
    /// The SASL password (`sasl.password`); its `Debug` does not show it.
    pub sasl_password: Option<Password>,
    /// PEM file of the CA that signs the brokers' certificates
    /// (`ssl.ca.location`); unset: the operating system's trusted CAs.
    pub ssl_ca_location: Option<PathBuf>,
    /// PEM file of this client's certificate, for brokers that ask for one
    /// (`ssl.certificate.location`; with `ssl.key.location`).
    pub ssl_certificate_location: Option<PathBuf>,
    /// PEM file of this client's private key (`ssl.key.location`).
    pub ssl_key_location: Option<PathBuf>,
}

pub use syncline_auth::SecurityProtocol;

/// The SASL mechanism a client authenticates with: Kafka's `sasl.mechanism`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum SaslMechanism {
    /// SCRAM with SHA-256 (RFC 7677): the password never crosses the wire.
    #[default]
    ScramSha256,
    /// SCRAM with SHA-512.
    ScramSha512,
    /// The password itself, sent once (RFC 4616): keep it to `SASL_SSL`.
    Plain,
}

impl SaslMechanism {
    /// The mechanism's name: `SCRAM-SHA-256`, `SCRAM-SHA-512`, `PLAIN`.
    pub fn name(self) -> &'static str {
        match self {
            SaslMechanism::ScramSha256 => "SCRAM-SHA-256",
            SaslMechanism::ScramSha512 => "SCRAM-SHA-512",
            SaslMechanism::Plain => syncline_auth::plain::MECHANISM_NAME,
        }
    }

    /// The SCRAM variant, or `None` for PLAIN.
    pub fn scram(self) -> Option<syncline_auth::Mechanism> {
        match self {
            SaslMechanism::ScramSha256 => Some(syncline_auth::Mechanism::ScramSha256),
            SaslMechanism::ScramSha512 => Some(syncline_auth::Mechanism::ScramSha512),
            SaslMechanism::Plain => None,
        }
    }
}

impl std::str::FromStr for SaslMechanism {
    type Err = String;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        match s.trim().to_ascii_uppercase().replace('_', "-").as_str() {
            "SCRAM-SHA-256" => Ok(SaslMechanism::ScramSha256),
            "SCRAM-SHA-512" => Ok(SaslMechanism::ScramSha512),
            "PLAIN" => Ok(SaslMechanism::Plain),
            "GSSAPI" | "OAUTHBEARER" => Err(format!(
                "sasl.mechanism {s} is not supported: use SCRAM-SHA-256, SCRAM-SHA-512 or PLAIN"
            )),
            _ => Err(format!(
                "sasl.mechanism must be SCRAM-SHA-256, SCRAM-SHA-512 or PLAIN (got {s:?})"
            )),
        }
    }
}

impl std::fmt::Display for SaslMechanism {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.name())
    }
}

/// A password: its `Debug` and `Display` do not show it.
#[derive(Clone, PartialEq, Eq)]
pub struct Password(String);

impl Password {
    /// Wraps a password.
    pub fn new(password: impl Into<String>) -> Password {
        Password(password.into())
    }

    /// The password itself.
    pub fn expose(&self) -> &str {
        &self.0
    }
}

impl std::fmt::Debug for Password {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("Password(<redacted>)")
    }
}

impl Default for ClientConfig {
    fn default() -> Self {
        ClientConfig {
            bootstrap_servers: vec!["127.0.0.1:9092".to_string()],
            client_id: "syncline-client".to_string(),
            request_timeout_ms: 30_000,
            connect_timeout_ms: 10_000,
            metadata_max_age_ms: 300_000,
            retry_backoff_ms: 100,
            retry_backoff_max_ms: 1_000,
            max_frame_bytes: crate::connection::DEFAULT_MAX_FRAME_BYTES,
            security_protocol: SecurityProtocol::Plaintext,
            sasl_mechanism: SaslMechanism::ScramSha256,
            sasl_username: None,
            sasl_password: None,
            ssl_ca_location: None,
            ssl_certificate_location: None,
            ssl_key_location: None,
        }
    }
}

impl ClientConfig {
    /// Defaults with these bootstrap servers (a comma-separated `host:port` list).
    pub fn new(bootstrap_servers: &str) -> Self {
        ClientConfig {
            bootstrap_servers: parse_bootstrap_servers(bootstrap_servers),
            ..Default::default()
        }
    }

    /// Sets one setting by Kafka's name, dotted (`request.timeout.ms`) or with
    /// underscores (`request_timeout_ms`), from its text form. `Ok(false)` means
    /// the name is not a shared client setting (a producer or consumer one may
    /// still take it).
    pub fn set(&mut self, key: &str, value: &str) -> Result<bool, ClientError> {
        match canonical(key).as_str() {
            "bootstrap.servers" => self.bootstrap_servers = parse_bootstrap_servers(value),
            "client.id" => self.client_id = value.trim().to_string(),
            "request.timeout.ms" => self.request_timeout_ms = number(key, value)?,
            "socket.connection.setup.timeout.ms" | "connect.timeout.ms" => {
                self.connect_timeout_ms = number(key, value)?
            }
            "metadata.max.age.ms" => self.metadata_max_age_ms = number(key, value)?,
            "retry.backoff.ms" => self.retry_backoff_ms = number(key, value)?,
            "retry.backoff.max.ms" => self.retry_backoff_max_ms = number(key, value)?,
            "max.frame.bytes" => self.max_frame_bytes = number(key, value)?,
            "security.protocol" => {
                self.security_protocol = value.parse().map_err(ClientError::Config)?
            }
            "sasl.mechanism" | "sasl.mechanisms" => {
                self.sasl_mechanism = value.parse().map_err(ClientError::Config)?
            }
            "sasl.username" => self.sasl_username = non_empty(value).map(str::to_string),
            // Kept as given: a password may start or end with a space.
            "sasl.password" => {
                self.sasl_password = (!value.is_empty()).then(|| Password::new(value))
            }
            "ssl.ca.location" => self.ssl_ca_location = non_empty(value).map(PathBuf::from),
            "ssl.certificate.location" => {
                self.ssl_certificate_location = non_empty(value).map(PathBuf::from)
            }
            "ssl.key.location" => self.ssl_key_location = non_empty(value).map(PathBuf::from),
            "sasl.jaas.config" => {
                return Err(ClientError::Config(
                    "sasl.jaas.config is not read: set sasl.username and sasl.password".into(),
                ))
            }
            "ssl.truststore.location" | "ssl.truststore.password" | "ssl.truststore.type" => {
                return Err(ClientError::Config(format!(
                    "{key}: syncline reads PEM files, not trust stores: set ssl.ca.location to \
                     the CA certificate (PEM)"
                )))
            }
            "ssl.keystore.location"
            | "ssl.keystore.password"
            | "ssl.keystore.type"
            | "ssl.key.password" => {
                return Err(ClientError::Config(format!(
                    "{key}: syncline reads PEM files, not key stores: set \
                     ssl.certificate.location and ssl.key.location (an unencrypted PEM key)"
                )))
            }
            _ => return Ok(false),
        }
        Ok(true)
    }

    /// `request_timeout_ms` as a duration.
    pub fn request_timeout(&self) -> Duration {
        Duration::from_millis(self.request_timeout_ms)
    }

    /// The wait before each retry of a failed request: `retry_backoff_ms` (at
    /// least 1 ms, so that a retry loop never spins) doubling per retry, at most
    /// `retry_backoff_max_ms` but never less than `retry_backoff_ms`.
    pub(crate) fn retry_backoff(&self) -> Backoff {
        let initial_ms = self.retry_backoff_ms.max(1);
        Backoff::new(
            Duration::from_millis(initial_ms),
            Duration::from_millis(self.retry_backoff_max_ms.max(initial_ms)),
        )
    }

    /// Checks ranges.
    pub fn validate(&self) -> Result<(), ClientError> {
        if self.bootstrap_servers.is_empty() {
            return Err(ClientError::Config(
                "bootstrap_servers is empty: give at least one host:port".into(),
            ));
        }
        if let Some(bad) = self.bootstrap_servers.iter().find(|s| {
            !s.rsplit_once(':')
                .is_some_and(|(h, p)| !h.is_empty() && p.parse::<u16>().is_ok())
        }) {
            return Err(ClientError::Config(format!(
                "bootstrap server {bad:?} is not host:port"
            )));
        }
        if self.request_timeout_ms == 0 || self.connect_timeout_ms == 0 {
            return Err(ClientError::Config(
                "request_timeout_ms and connect_timeout_ms must be positive".into(),
            ));
        }
        self.validate_security()
    }

    /// SASL needs a username and password; SASL and TLS settings need a
    /// protocol that uses them (a forgotten `security.protocol` would
    /// otherwise connect in plaintext).
    fn validate_security(&self) -> Result<(), ClientError> {
        let protocol = self.security_protocol;
        if protocol.is_sasl() {
            if self.sasl_username.is_none() || self.sasl_password.is_none() {
                return Err(ClientError::Config(format!(
                    "security.protocol={protocol} needs sasl.username and sasl.password"
                )));
            }
        } else if let Some(set) = [
            ("sasl.username", self.sasl_username.is_some()),
            ("sasl.password", self.sasl_password.is_some()),
        ]
        .iter()
        .find_map(|(name, set)| set.then_some(name))
        {
            return Err(ClientError::Config(format!(
                "{set} is set but security.protocol is {protocol}: set security.protocol to \
                 SASL_PLAINTEXT or SASL_SSL"
            )));
        }
        if !protocol.is_tls() {
            if let Some(set) = [
                ("ssl.ca.location", self.ssl_ca_location.is_some()),
                (
                    "ssl.certificate.location",
                    self.ssl_certificate_location.is_some(),
                ),
                ("ssl.key.location", self.ssl_key_location.is_some()),
            ]
            .iter()
            .find_map(|(name, set)| set.then_some(name))
            {
                return Err(ClientError::Config(format!(
                    "{set} is set but security.protocol is {protocol}: set security.protocol \
                     to SSL or SASL_SSL"
                )));
            }
        }
        if self.ssl_certificate_location.is_some() != self.ssl_key_location.is_some() {
            return Err(ClientError::Config(
                "ssl.certificate.location and ssl.key.location go together: set both (a client \
                 certificate) or neither"
                    .into(),
            ));
        }
        Ok(())
    }
}

/// The trimmed value, `None` when empty.
fn non_empty(value: &str) -> Option<&str> {
    Some(value.trim()).filter(|v| !v.is_empty())
}

/// One `key=value` of a properties file, with the line it came from.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Property {
    /// The key, trimmed.
    pub key: String,
    /// The value, trimmed.
    pub value: String,
    /// Its line number, from 1.
    pub line: usize,
}

/// Reads a properties file (`--command-config`): the subset of Java's format
/// that Kafka's client files use. One `key=value` or `key: value` a line (the
/// first `=` or `:` separates; both sides are trimmed), blank lines and
/// lines starting with `#` or `!` ignored. Errors name the file and the line.
pub fn read_properties(path: &Path) -> Result<Vec<Property>, ClientError> {
    let text = std::fs::read_to_string(path).map_err(|e| {
        ClientError::Config(format!(
            "cannot read the properties file {}: {}",
            path.display(),
            match e.kind() {
                std::io::ErrorKind::NotFound => "no such file".to_string(),
                std::io::ErrorKind::InvalidData => "not UTF-8 text".to_string(),
                _ => e.to_string(),
            }
        ))
    })?;
    parse_properties(&text)
        .map_err(|(line, why)| ClientError::Config(format!("{}:{line}: {why}", path.display())))
}

/// [`read_properties`] as `(key, value)` pairs.
pub fn load_properties(path: &Path) -> Result<Vec<(String, String)>, ClientError> {
    Ok(read_properties(path)?
        .into_iter()
        .map(|p| (p.key, p.value))
        .collect())
}

/// The properties in `text`, or the first bad line's number and what is wrong.
fn parse_properties(text: &str) -> Result<Vec<Property>, (usize, String)> {
    let mut out = Vec::new();
    for (i, raw) in text.lines().enumerate() {
        let line = i + 1;
        let trimmed = raw.trim();
        if trimmed.is_empty() || trimmed.starts_with('#') || trimmed.starts_with('!') {
            continue;
        }
        if trimmed.ends_with('\\') {
            return Err((
                line,
                "a line continued with '\\' is not supported: put the value on one line".into(),
            ));
        }
        let Some(at) = trimmed.find(['=', ':']) else {
            return Err((line, format!("expected key=value (got {trimmed:?})")));
        };
        let key = trimmed[..at].trim();
        if key.is_empty() {
            return Err((line, format!("the key before '=' is empty in {trimmed:?}")));
        }
        out.push(Property {
            key: key.to_string(),
            value: trimmed[at + 1..].trim().to_string(),
            line,
        });
    }
    Ok(out)
}

/// A setting name in Kafka's dotted form (`linger_ms` → `linger.ms`), as `set`
/// reads it.
pub fn canonical(key: &str) -> String {
    key.trim().to_ascii_lowercase().replace('_', ".")
}

/// A setting's numeric value, or an error naming the setting.
fn number<T: std::str::FromStr>(key: &str, value: &str) -> Result<T, ClientError> {
    value.trim().parse().map_err(|_| {
        ClientError::Config(format!(
            "{key} must be a non-negative whole number (got {value:?})"
        ))
    })
}

/// The error for a setting no client type knows.
fn unknown_setting(key: &str, kind: &str, known: &[&str]) -> ClientError {
    let hint = match canonical(key).as_str() {
        "transactional.id" => " (transactions are not supported)".to_string(),
        _ => format!("; {kind} settings are: {}", known.join(", ")),
    };
    ClientError::Config(format!("unknown {kind} setting {key:?}{hint}"))
}

const CLIENT_SETTINGS: &[&str] = &[
    "bootstrap.servers",
    "client.id",
    "request.timeout.ms",
    "socket.connection.setup.timeout.ms",
    "metadata.max.age.ms",
    "retry.backoff.ms",
    "retry.backoff.max.ms",
    "max.frame.bytes",
    "security.protocol",
    "sasl.mechanism",
    "sasl.username",
    "sasl.password",
    "ssl.ca.location",
    "ssl.certificate.location",
    "ssl.key.location",
];

/// Splits `a:1,b:2` into addresses, ignoring blanks.
pub fn parse_bootstrap_servers(list: &str) -> Vec<String> {
    list.split(',')
        .map(str::trim)
        .filter(|s| !s.is_empty())
        .map(str::to_string)
        .collect()
}

/// How many replicas must have a record before the leader acknowledges it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Acks {
    /// No acknowledgement at all: the broker sends no response.
    None,
    /// The leader appended it.
    Leader,
    /// Every member of the current ISR has it (`acks=all`, `-1`).
    #[default]
    All,
}

impl Acks {
    /// The value of `ProduceRequest.acks`.
    pub fn wire(self) -> i32 {
        match self {
            Acks::None => 0,
            Acks::Leader => 1,
            Acks::All => syncline_proto::ACKS_ALL,
        }
    }
}

impl std::str::FromStr for Acks {
    type Err = String;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        match s.trim().to_ascii_lowercase().as_str() {
            "0" => Ok(Acks::None),
            "1" => Ok(Acks::Leader),
            "all" | "-1" => Ok(Acks::All),
            other => Err(format!("acks must be 0, 1 or all (got {other:?})")),
        }
    }
}

impl std::fmt::Display for Acks {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            Acks::None => "0",
            Acks::Leader => "1",
            Acks::All => "all",
        })
    }
}

/// Producer settings.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ProducerConfig {
    /// Connection and metadata settings.
    pub client: ClientConfig,
    /// Acknowledgement level.
    pub acks: Acks,
    /// How long a batch waits for more records before it is sent.
    pub linger_ms: u64,
    /// Bytes of records that make a batch full (a larger record gets its own batch).
    pub batch_size: usize,
    /// Produce requests a connection may have outstanding. With 1, a partition's
    /// records keep their order across retries.
    pub max_in_flight_requests_per_connection: usize,
    /// How many times a batch is retried after a retriable error (bounded in time
    /// by `delivery_timeout_ms` as well).
    pub retries: u32,
    /// Bound on the time from `send` to success or failure.
    pub delivery_timeout_ms: u64,
    /// Bytes of records buffered (waiting or in flight) at most.
    pub buffer_memory: usize,
    /// How long `send` waits for buffer room or for the topic's metadata.
    pub max_block_ms: u64,
    /// Largest produce request (and so largest record) sent.
    pub max_request_size: usize,
    /// How batches are compressed (Kafka's `compression.type`: none, gzip,
    /// snappy, lz4, zstd). Batch sizes (`batch.size`) count uncompressed bytes.
    pub compression_type: Compression,
    /// Kafka's `enable.idempotence`: the producer gets a producer id
    /// (InitProducerId) and numbers each partition's batches, so the leader writes
    /// a retried batch once, and up to `max.in.flight.requests.per.connection`
    /// of a partition's batches may be in flight with their order kept. Needs
    /// `acks=all`, `retries > 0` and at most 5 requests in flight. `None` (the
    /// default) is Kafka 3.x's: on, unless another setting conflicts with it;
    /// `Some(true)` with a conflicting setting is a configuration error.
    pub enable_idempotence: Option<bool>,
}

impl Default for ProducerConfig {
    fn default() -> Self {
        ProducerConfig {
            client: ClientConfig::default(),
            acks: Acks::All,
            linger_ms: 5,
            batch_size: 16_384,
            max_in_flight_requests_per_connection: 5,
            retries: u32::MAX,
            delivery_timeout_ms: 120_000,
            buffer_memory: 32 * 1024 * 1024,
            max_block_ms: 60_000,
            max_request_size: 1024 * 1024,
            compression_type: Compression::None,
            enable_idempotence: None,
        }
    }
}

impl ProducerConfig {
    /// Whether the producer is idempotent: `enable.idempotence` if set, else
    /// (Kafka 3.x's default) unless another setting conflicts with it.
    pub fn idempotent(&self) -> bool {
        self.enable_idempotence
            .unwrap_or_else(|| self.idempotence_conflict().is_none())
    }

    /// The setting an idempotent producer needs and this configuration lacks.
    fn idempotence_conflict(&self) -> Option<String> {
        if self.acks != Acks::All {
            return Some(format!("acks=all (got acks={})", self.acks));
        }
        if self.retries == 0 {
            return Some("retries > 0 (got 0)".into());
        }
        if self.max_in_flight_requests_per_connection > 5 {
            return Some(format!(
                "max.in.flight.requests.per.connection <= 5 (got {})",
                self.max_in_flight_requests_per_connection
            ));
        }
        None
    }

    /// Defaults with these bootstrap servers.
    pub fn new(bootstrap_servers: &str) -> Self {
        ProducerConfig {
            client: ClientConfig::new(bootstrap_servers),
            ..Default::default()
        }
    }

    /// Sets one setting by Kafka's name (`linger.ms` or `linger_ms`), shared
    /// client settings included. Unknown names are an error that lists the known
    /// ones.
    pub fn set(&mut self, key: &str, value: &str) -> Result<(), ClientError> {
        if self.client.set(key, value)? {
            return Ok(());
        }
        match canonical(key).as_str() {
            "acks" => self.acks = value.parse().map_err(ClientError::Config)?,
            "linger.ms" => self.linger_ms = number(key, value)?,
            "batch.size" => self.batch_size = number(key, value)?,
            "max.in.flight.requests.per.connection" => {
                self.max_in_flight_requests_per_connection = number(key, value)?
            }
            "retries" => self.retries = number(key, value)?,
            "delivery.timeout.ms" => self.delivery_timeout_ms = number(key, value)?,
            "buffer.memory" => self.buffer_memory = number(key, value)?,
            "max.block.ms" => self.max_block_ms = number(key, value)?,
            "max.request.size" => self.max_request_size = number(key, value)?,
            "enable.idempotence" => {
                self.enable_idempotence = match value.trim() {
                    v if v.eq_ignore_ascii_case("true") => Some(true),
                    v if v.eq_ignore_ascii_case("false") => Some(false),
                    _ => {
                        return Err(ClientError::Config(format!(
                            "{key} must be true or false (got {value:?})"
                        )))
                    }
                }
            }
            "compression.type" => {
                self.compression_type = value
                    .parse()
                    .map_err(|e| ClientError::Config(format!("{key}: {e}")))?
            }
            _ => {
                let mut known = CLIENT_SETTINGS.to_vec();
                known.extend([
                    "acks",
                    "linger.ms",
                    "batch.size",
                    "max.in.flight.requests.per.connection",
                    "retries",
                    "delivery.timeout.ms",
                    "buffer.memory",
                    "max.block.ms",
                    "max.request.size",
                    "compression.type",
                    "enable.idempotence",
                ]);
                return Err(unknown_setting(key, "producer", &known));
            }
        }
        Ok(())
    }

    /// Checks ranges and Kafka's rule `delivery_timeout_ms >= linger_ms +
    /// request_timeout_ms`.
    pub fn validate(&self) -> Result<(), ClientError> {
        self.client.validate()?;
        if self.batch_size == 0 || self.max_request_size == 0 || self.buffer_memory == 0 {
            return Err(ClientError::Config(
                "batch_size, max_request_size and buffer_memory must be positive".into(),
            ));
        }
        if self.max_in_flight_requests_per_connection == 0 {
            return Err(ClientError::Config(
                "max_in_flight_requests_per_connection must be at least 1".into(),
            ));
        }
        if self.enable_idempotence == Some(true) {
            if let Some(what) = self.idempotence_conflict() {
                return Err(ClientError::Config(format!(
                    "enable.idempotence=true needs {what}; set it, or set enable.idempotence=false"
                )));
            }
        }
        if self.delivery_timeout_ms < self.linger_ms + self.client.request_timeout_ms {
            return Err(ClientError::Config(format!(
                "delivery_timeout_ms ({}) must be at least linger_ms + request_timeout_ms ({})",
                self.delivery_timeout_ms,
                self.linger_ms + self.client.request_timeout_ms
            )));
        }
        Ok(())
    }
}

/// Where a consumer starts when it has no valid position.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum AutoOffsetReset {
    /// The log start offset.
    Earliest,
    /// The high watermark (only records produced from now on).
    #[default]
    Latest,
    /// Fail the poll with [`ClientError::OffsetOutOfRange`].
    None,
}

impl std::str::FromStr for AutoOffsetReset {
    type Err = String;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        match s {
            "earliest" => Ok(AutoOffsetReset::Earliest),
            "latest" => Ok(AutoOffsetReset::Latest),
            "none" => Ok(AutoOffsetReset::None),
            other => Err(format!(
                "auto_offset_reset must be earliest, latest or none (got {other:?})"
            )),
        }
    }
}

/// Consumer settings.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ConsumerConfig {
    /// Connection and metadata settings.
    pub client: ClientConfig,
    /// Bytes a fetch waits for before the broker answers.
    pub fetch_min_bytes: i32,
    /// Longest the broker holds a fetch waiting for `fetch_min_bytes`.
    pub fetch_max_wait_ms: i32,
    /// Bound on the record bytes of one fetch response (at least one batch is
    /// always returned).
    pub fetch_max_bytes: i32,
    /// Bound on the record bytes per partition in one fetch response.
    pub max_partition_fetch_bytes: i32,
    /// `ReadUncommitted` or `ReadCommitted` (the same while there are no
    /// transactions: both read up to the high watermark).
    pub isolation_level: IsolationLevel,
    /// What to do without a valid position.
    pub auto_offset_reset: AutoOffsetReset,
    /// The consumer's rack (Kafka's `client.rack`): with a broker-side rack-aware
    /// replica selector, the leader sends the consumer to an in-sync replica in
    /// this rack (fetch from follower, KIP-392). Empty: always the leader.
    pub client_rack: String,
    /// The consumer group a [`crate::GroupConsumer`] joins (Kafka's `group.id`).
    pub group_id: String,
    /// A group member the coordinator does not hear from for this long is
    /// removed and its partitions go to the others (`session.timeout.ms`).
    pub session_timeout_ms: i32,
    /// How often a member heartbeats (`heartbeat.interval.ms`).
    pub heartbeat_interval_ms: i32,
    /// How long a rebalance waits for members to rejoin
    /// (`max.poll.interval.ms`, which bounds it in Kafka's consumer too).
    pub max_poll_interval_ms: i32,
    /// Commit the positions every `auto_commit_interval_ms`, before a
    /// rebalance and on close (`enable.auto.commit`).
    pub enable_auto_commit: bool,
    /// See `enable_auto_commit` (`auto.commit.interval.ms`).
    pub auto_commit_interval_ms: u64,
}

impl Default for ConsumerConfig {
    fn default() -> Self {
        ConsumerConfig {
            client: ClientConfig::default(),
            fetch_min_bytes: 1,
            fetch_max_wait_ms: 500,
            fetch_max_bytes: 50 * 1024 * 1024,
            max_partition_fetch_bytes: 1024 * 1024,
            isolation_level: IsolationLevel::ReadUncommitted,
            auto_offset_reset: AutoOffsetReset::Latest,
            client_rack: String::new(),
            group_id: String::new(),
            session_timeout_ms: 45_000,
            heartbeat_interval_ms: 3_000,
            max_poll_interval_ms: 300_000,
            enable_auto_commit: true,
            auto_commit_interval_ms: 5_000,
        }
    }
}

impl ConsumerConfig {
    /// Defaults with these bootstrap servers.
    pub fn new(bootstrap_servers: &str) -> Self {
        ConsumerConfig {
            client: ClientConfig::new(bootstrap_servers),
            ..Default::default()
        }
    }

    /// Sets one setting by Kafka's name (`fetch.max.wait.ms` or
    /// `fetch_max_wait_ms`), shared client settings included. Unknown names are an
    /// error that lists the known ones.
    pub fn set(&mut self, key: &str, value: &str) -> Result<(), ClientError> {
        if self.client.set(key, value)? {
            return Ok(());
        }
        match canonical(key).as_str() {
            "fetch.min.bytes" => self.fetch_min_bytes = number(key, value)?,
            "fetch.max.wait.ms" => self.fetch_max_wait_ms = number(key, value)?,
            "fetch.max.bytes" => self.fetch_max_bytes = number(key, value)?,
            "max.partition.fetch.bytes" => self.max_partition_fetch_bytes = number(key, value)?,
            "client.rack" => self.client_rack = value.trim().to_string(),
            "group.id" => self.group_id = value.trim().to_string(),
            "session.timeout.ms" => self.session_timeout_ms = number(key, value)?,
            "heartbeat.interval.ms" => self.heartbeat_interval_ms = number(key, value)?,
            "max.poll.interval.ms" => self.max_poll_interval_ms = number(key, value)?,
            "enable.auto.commit" => {
                self.enable_auto_commit = match value.trim() {
                    "true" => true,
                    "false" => false,
                    other => {
                        return Err(ClientError::Config(format!(
                            "enable.auto.commit must be true or false (got {other:?})"
                        )))
                    }
                }
            }
            "auto.commit.interval.ms" => self.auto_commit_interval_ms = number(key, value)?,
            "auto.offset.reset" => {
                self.auto_offset_reset = value.trim().parse().map_err(ClientError::Config)?
            }
            "isolation.level" => {
                self.isolation_level = match value.trim() {
                    "read_uncommitted" => IsolationLevel::ReadUncommitted,
                    "read_committed" => IsolationLevel::ReadCommitted,
                    other => {
                        return Err(ClientError::Config(format!(
                            "isolation.level must be read_uncommitted or read_committed \
                             (got {other:?})"
                        )))
                    }
                }
            }
            _ => {
                let mut known = CLIENT_SETTINGS.to_vec();
                known.extend([
                    "fetch.min.bytes",
                    "fetch.max.wait.ms",
                    "fetch.max.bytes",
                    "max.partition.fetch.bytes",
                    "client.rack",
                    "auto.offset.reset",
                    "isolation.level",
                    "group.id",
                    "session.timeout.ms",
                    "heartbeat.interval.ms",
                    "max.poll.interval.ms",
                    "enable.auto.commit",
                    "auto.commit.interval.ms",
                ]);
                return Err(unknown_setting(key, "consumer", &known));
            }
        }
        Ok(())
    }

    /// Checks ranges.
    pub fn validate(&self) -> Result<(), ClientError> {
        self.client.validate()?;
        if self.fetch_min_bytes < 0
            || self.fetch_max_wait_ms < 0
            || self.fetch_max_bytes <= 0
            || self.max_partition_fetch_bytes <= 0
        {
            return Err(ClientError::Config(
                "fetch sizes and waits must not be negative (max bytes must be positive)".into(),
            ));
        }
        if self.heartbeat_interval_ms <= 0 || self.heartbeat_interval_ms >= self.session_timeout_ms
        {
            return Err(ClientError::Config(format!(
                "heartbeat.interval.ms ({}) must be positive and below session.timeout.ms ({})",
                self.heartbeat_interval_ms, self.session_timeout_ms
            )));
        }
        if self.max_poll_interval_ms <= 0 || self.auto_commit_interval_ms == 0 {
            return Err(ClientError::Config(
                "max.poll.interval.ms and auto.commit.interval.ms must be positive".into(),
            ));
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn retry_backoff_doubles_from_retry_backoff_ms_up_to_the_max() {
        let ms = |c: &ClientConfig| -> Vec<u128> {
            let b = c.retry_backoff();
            [0, 1, 2, 3, 4, 5, 999]
                .map(|f| b.delay(f).as_millis())
                .to_vec()
        };
        let mut c = ClientConfig::default();
        assert_eq!(ms(&c), [100, 200, 400, 800, 1000, 1000, 1000]);
        // A max below retry_backoff_ms does not shorten the first wait.
        (c.retry_backoff_ms, c.retry_backoff_max_ms) = (500, 100);
        assert_eq!(ms(&c), [500; 7]);
        // No backoff at all would make retry loops spin.
        (c.retry_backoff_ms, c.retry_backoff_max_ms) = (0, 0);
        assert_eq!(ms(&c), [1; 7]);
    }

    #[test]
    fn defaults_are_kafkas() {
        let p = ProducerConfig::default();
        assert_eq!(p.acks, Acks::All);
        assert_eq!((p.linger_ms, p.batch_size), (5, 16_384));
        assert_eq!(p.max_in_flight_requests_per_connection, 5);
        assert_eq!(p.delivery_timeout_ms, 120_000);
        assert_eq!(p.buffer_memory, 32 << 20);
        assert_eq!(p.max_block_ms, 60_000);
        assert_eq!(p.client.request_timeout_ms, 30_000);
        assert_eq!(p.client.retry_backoff_ms, 100);
        p.validate().unwrap();
        let c = ConsumerConfig::default();
        assert_eq!((c.fetch_min_bytes, c.fetch_max_wait_ms), (1, 500));
        assert_eq!(c.max_partition_fetch_bytes, 1 << 20);
        c.validate().unwrap();
    }

    #[test]
    fn acks_parse_and_wire_values() {
        assert_eq!("0".parse::<Acks>().unwrap().wire(), 0);
        assert_eq!("1".parse::<Acks>().unwrap().wire(), 1);
        assert_eq!("all".parse::<Acks>().unwrap().wire(), -1);
        assert_eq!("-1".parse::<Acks>().unwrap(), Acks::All);
        assert!("2".parse::<Acks>().is_err());
    }

    #[test]
    fn bootstrap_list_is_split_and_checked() {
        let c = ClientConfig::new(" a:1, b:2 ,,");
        assert_eq!(c.bootstrap_servers, ["a:1", "b:2"]);
        c.validate().unwrap();
        assert!(ClientConfig::new("nohost").validate().is_err());
        assert!(ClientConfig::new("h:notaport").validate().is_err());
        assert!(ClientConfig::new("").validate().is_err());
    }

    #[test]
    fn idempotence_needs_acks_all_retries_and_at_most_five_in_flight() {
        let mut p = ProducerConfig::new("h:1");
        assert!(p.idempotent(), "on by default, as in Kafka 3.x");
        p.set("enable.idempotence", "true").unwrap();
        assert_eq!(p.enable_idempotence, Some(true));
        p.validate().unwrap();
        // Unset, a conflicting setting turns it off rather than failing.
        for (key, value) in [
            ("acks", "1"),
            ("retries", "0"),
            ("max.in.flight.requests.per.connection", "6"),
        ] {
            let mut quiet = ProducerConfig::new("h:1");
            quiet.set(key, value).unwrap();
            quiet.validate().unwrap();
            assert!(!quiet.idempotent(), "{key}={value}");
        }
        for (key, value, named) in [
            ("acks", "1", "acks=all"),
            ("retries", "0", "retries > 0"),
            ("max.in.flight.requests.per.connection", "6", "<= 5"),
        ] {
            let mut bad = p.clone();
            bad.set(key, value).unwrap();
            let err = bad.validate().unwrap_err().to_string();
            assert!(
                err.contains(named) && err.contains("enable.idempotence=false"),
                "{key}={value}: {err}"
            );
        }
        p.set("enable.idempotence", "false").unwrap();
        p.set("acks", "1").unwrap();
        p.validate().unwrap();
        assert!(!p.idempotent());
    }

    #[test]
    fn settings_by_kafka_name_dotted_or_underscored() {
        let mut p = ProducerConfig::default();
        p.set("acks", "1").unwrap();
        p.set("linger.ms", "20").unwrap();
        p.set("batch_size", "65536").unwrap();
        p.set("max.in.flight.requests.per.connection", "1").unwrap();
        p.set("bootstrap.servers", "h:1,h:2").unwrap();
        p.set("request.timeout.ms", "5000").unwrap();
        p.set("compression.type", "none").unwrap();
        assert_eq!(p.acks, Acks::Leader);
        assert_eq!((p.linger_ms, p.batch_size), (20, 65_536));
        assert_eq!(p.max_in_flight_requests_per_connection, 1);
        assert_eq!(p.client.bootstrap_servers, ["h:1", "h:2"]);
        assert_eq!(p.client.request_timeout_ms, 5_000);

        let err = p.set("linger.ms", "soon").unwrap_err().to_string();
        assert!(err.contains("linger.ms") && err.contains("soon"), "{err}");
        let err = p.set("lingerms", "1").unwrap_err().to_string();
        assert!(
            err.contains("\"lingerms\"") && err.contains("linger.ms"),
            "{err}"
        );
        let err = p.set("transactional.id", "tx").unwrap_err().to_string();
        assert!(err.contains("transactions are not supported"), "{err}");
        assert!(p.set("enable.idempotence", "maybe").is_err());
        for (name, codec) in [
            ("lz4", Compression::Lz4),
            ("zstd", Compression::Zstd),
            ("GZIP", Compression::Gzip),
            ("snappy", Compression::Snappy),
        ] {
            p.set("compression.type", name).unwrap();
            assert_eq!(p.compression_type, codec);
        }
        let err = p.set("compression.type", "brotli").unwrap_err().to_string();
        assert!(
            err.contains("compression.type") && err.contains("none, gzip, snappy, lz4, zstd"),
            "{err}"
        );

        let mut c = ConsumerConfig::default();
        c.set("fetch.max.wait.ms", "100").unwrap();
        c.set("auto.offset.reset", "earliest").unwrap();
        c.set("isolation.level", "read_committed").unwrap();
        c.set("client.rack", "eu-west-1a").unwrap();
        assert_eq!(c.client_rack, "eu-west-1a");
        assert_eq!(c.fetch_max_wait_ms, 100);
        assert_eq!(c.auto_offset_reset, AutoOffsetReset::Earliest);
        assert_eq!(c.isolation_level, IsolationLevel::ReadCommitted);
        c.set("group.id", "g").unwrap();
        c.set("enable.auto.commit", "false").unwrap();
        c.set("session.timeout.ms", "10000").unwrap();
        assert_eq!(
            (
                c.group_id.as_str(),
                c.enable_auto_commit,
                c.session_timeout_ms
            ),
            ("g", false, 10_000)
        );
        c.validate().unwrap();
        c.set("heartbeat.interval.ms", "10000").unwrap();
        let err = c.validate().unwrap_err().to_string();
        assert!(err.contains("below session.timeout.ms"), "{err}");
        assert!(c.set("linger.ms", "1").is_err(), "a producer setting");
    }

    #[test]
    fn delivery_timeout_must_cover_linger_and_request_timeout() {
        let mut p = ProducerConfig {
            delivery_timeout_ms: 1_000,
            ..Default::default()
        };
        assert!(matches!(p.validate(), Err(ClientError::Config(_))));
        p.delivery_timeout_ms = 30_005;
        p.validate().unwrap();
    }

    #[test]
    fn security_settings_by_kafka_name() {
        let mut c = ClientConfig::new("h:9093");
        assert_eq!(c.security_protocol, SecurityProtocol::Plaintext);
        assert_eq!(c.sasl_mechanism, SaslMechanism::ScramSha256);
        c.set("security.protocol", "sasl_ssl").unwrap();
        c.set("sasl.mechanism", "SCRAM-SHA-512").unwrap();
        c.set("sasl.username", " alice ").unwrap();
        c.set("sasl.password", "s3cret").unwrap();
        c.set("ssl.ca.location", "certs/ca.pem").unwrap();
        c.set("ssl_certificate_location", "certs/alice.pem")
            .unwrap();
        c.set("ssl.key.location", "certs/alice.key").unwrap();
        assert_eq!(c.security_protocol, SecurityProtocol::SaslSsl);
        assert_eq!(c.sasl_mechanism, SaslMechanism::ScramSha512);
        assert_eq!(c.sasl_username.as_deref(), Some("alice"));
        assert_eq!(
            c.sasl_password.as_ref().map(Password::expose),
            Some("s3cret")
        );
        assert_eq!(
            c.ssl_ca_location.as_deref(),
            Some(Path::new("certs/ca.pem"))
        );
        c.validate().unwrap();
        // The password stays out of logs.
        let debug = format!("{c:?}");
        assert!(
            !debug.contains("s3cret") && debug.contains("<redacted>"),
            "{debug}"
        );

        for (protocol, name) in [
            (SecurityProtocol::Plaintext, "PLAINTEXT"),
            (SecurityProtocol::Ssl, "SSL"),
            (SecurityProtocol::SaslPlaintext, "SASL_PLAINTEXT"),
            (SecurityProtocol::SaslSsl, "SASL_SSL"),
        ] {
            assert_eq!(protocol.to_string(), name);
            assert_eq!(name.parse::<SecurityProtocol>(), Ok(protocol));
        }
        for m in [
            SaslMechanism::ScramSha256,
            SaslMechanism::ScramSha512,
            SaslMechanism::Plain,
        ] {
            assert_eq!(m.to_string().parse::<SaslMechanism>(), Ok(m));
        }
        let err = c.set("security.protocol", "TLS").unwrap_err().to_string();
        assert!(
            err.contains("PLAINTEXT, SSL, SASL_PLAINTEXT or SASL_SSL"),
            "{err}"
        );
        let err = c.set("sasl.mechanism", "GSSAPI").unwrap_err().to_string();
        assert!(err.contains("not supported"), "{err}");
        let err = c.set("sasl.jaas.config", "x").unwrap_err().to_string();
        assert!(err.contains("set sasl.username and sasl.password"), "{err}");
        let err = c
            .set("ssl.truststore.location", "t.jks")
            .unwrap_err()
            .to_string();
        assert!(err.contains("ssl.ca.location"), "{err}");
        // Producers and consumers take them too.
        let mut p = ProducerConfig::new("h:1");
        p.set("security.protocol", "SSL").unwrap();
        assert!(p.client.security_protocol.is_tls());
    }

    #[test]
    fn security_settings_must_fit_the_protocol() {
        let invalid = |settings: &[(&str, &str)]| {
            let mut c = ClientConfig::new("h:1");
            for (k, v) in settings {
                c.set(k, v).unwrap();
            }
            c.validate().err().map(|e| e.to_string())
        };
        let err = invalid(&[
            ("security.protocol", "SASL_PLAINTEXT"),
            ("sasl.username", "a"),
        ]);
        assert!(
            err.as_deref()
                .is_some_and(|e| e.contains("needs sasl.username and sasl.password")),
            "{err:?}"
        );
        let err = invalid(&[("sasl.username", "a"), ("sasl.password", "p")]);
        assert!(
            err.as_deref().is_some_and(
                |e| e.contains("sasl.username is set but security.protocol is PLAINTEXT")
            ),
            "{err:?}"
        );
        let err = invalid(&[
            ("security.protocol", "SASL_PLAINTEXT"),
            ("sasl.username", "a"),
            ("sasl.password", "p"),
            ("ssl.ca.location", "ca.pem"),
        ]);
        assert!(
            err.as_deref()
                .is_some_and(|e| e.contains("set security.protocol to SSL or SASL_SSL")),
            "{err:?}"
        );
        let err = invalid(&[
            ("security.protocol", "SSL"),
            ("ssl.certificate.location", "a.pem"),
        ]);
        assert!(
            err.as_deref().is_some_and(|e| e.contains("go together")),
            "{err:?}"
        );
        // PLAIN without TLS is allowed (as in Kafka), if unwise.
        assert_eq!(
            invalid(&[
                ("security.protocol", "SASL_PLAINTEXT"),
                ("sasl.mechanism", "PLAIN"),
                ("sasl.username", "a"),
                ("sasl.password", "p"),
            ]),
            None
        );
        assert_eq!(invalid(&[("security.protocol", "SSL")]), None);
        // An empty value unsets.
        assert_eq!(
            invalid(&[("ssl.ca.location", "ca.pem"), ("ssl.ca.location", "")]),
            None
        );
    }

    #[test]
    fn properties_files_parse_with_lines_and_comments() {
        let text = "# client.properties\n\
                    ! another comment\n\
                    \n\
                    security.protocol=SASL_SSL\n\
                    sasl.mechanism : SCRAM-SHA-256\n\
                    \tsasl.username = alice \n\
                    sasl.password=pa=ss:word\n\
                    ssl.ca.location: C:/certs/ca.pem\n";
        let props = parse_properties(text).unwrap();
        let pairs: Vec<(&str, &str, usize)> = props
            .iter()
            .map(|p| (p.key.as_str(), p.value.as_str(), p.line))
            .collect();
        assert_eq!(
            pairs,
            [
                ("security.protocol", "SASL_SSL", 4),
                ("sasl.mechanism", "SCRAM-SHA-256", 5),
                ("sasl.username", "alice", 6),
                ("sasl.password", "pa=ss:word", 7),
                ("ssl.ca.location", "C:/certs/ca.pem", 8),
            ]
        );
        assert_eq!(
            parse_properties("a=1\njust words\n"),
            Err((2, "expected key=value (got \"just words\")".to_string()))
        );
        assert!(parse_properties("=1")
            .unwrap_err()
            .1
            .contains("key before '=' is empty"));
        assert_eq!(parse_properties("k=a \\\n  b").unwrap_err().0, 1);
        assert_eq!(parse_properties("empty=").unwrap()[0].value, "");
    }

    #[test]
    fn properties_file_errors_name_the_file_and_line() {
        let dir = std::env::temp_dir().join(format!("syncline-props-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let path = dir.join("client.properties");
        std::fs::write(&path, "security.protocol=SSL\nbroken line\n").unwrap();
        let err = load_properties(&path).unwrap_err().to_string();
        assert!(
            err.contains(&format!("{}:2: expected key=value", path.display())),
            "{err}"
        );
        std::fs::write(&path, "security.protocol=SSL\n").unwrap();
        assert_eq!(
            load_properties(&path).unwrap(),
            [("security.protocol".to_string(), "SSL".to_string())]
        );
        let missing = dir.join("nope.properties");
        let err = load_properties(&missing).unwrap_err().to_string();
        assert!(
            err.contains(&missing.display().to_string()) && err.contains("no such file"),
            "{err}"
        );
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
