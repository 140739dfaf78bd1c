//! Broker configuration (TOML). Names are Kafka's broker config names with dots
//! written as underscores, and the defaults are Kafka's. Unknown keys and invalid
//! values are refused at start-up with a message naming the key.

use std::path::{Path, PathBuf};

use serde::Deserialize;

/// Why a configuration cannot be used.
#[derive(Debug, thiserror::Error)]
pub enum ConfigError {
    /// The file could not be read.
    #[error("cannot read config file {path}: {source}")]
    Read {
        /// The file.
        path: PathBuf,
        /// Why it could not be read.
        source: std::io::Error,
    },
    /// The text is not TOML, has a key this broker does not know, or a value of
    /// the wrong type.
    #[error("invalid config file {path}: {message}")]
    Parse {
        /// The file (empty when [`BrokerConfig::parse`] was given text).
        path: PathBuf,
        /// The TOML parser's message.
        message: String,
    },
    /// A value is out of range or contradicts another key.
    #[error("invalid value for `{key}`: {message}")]
    Invalid {
        /// The key, as written in the file.
        key: &'static str,
        /// What is wrong with its value.
        message: String,
    },
}

fn invalid(key: &'static str, message: impl Into<String>) -> ConfigError {
    ConfigError::Invalid {
        key,
        message: message.into(),
    }
}

/// A `host:port` address.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct HostPort {
    /// Host name or IP address; an IPv6 address without its brackets.
    pub host: String,
    /// TCP port.
    pub port: u16,
}

impl HostPort {
    fn parse(key: &'static str, s: &str) -> Result<HostPort, ConfigError> {
        let (host, port) = s.rsplit_once(':').ok_or_else(|| {
            invalid(
                key,
                format!("`{s}` is not host:port (e.g. \"127.0.0.1:9092\")"),
            )
        })?;
        let host = host.trim_start_matches('[').trim_end_matches(']');
        if host.is_empty() {
            return Err(invalid(key, format!("`{s}` has an empty host")));
        }
        let port = port
            .parse::<u16>()
            .map_err(|_| invalid(key, format!("`{s}` has an invalid port")))?;
        Ok(HostPort {
            host: host.to_string(),
            port,
        })
    }
}

impl std::fmt::Display for HostPort {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        if self.host.contains(':') {
            write!(f, "[{}]:{}", self.host, self.port)
        } else {
            write!(f, "{}:{}", self.host, self.port)
        }
    }
}

/// One named listener: where it binds and the address it advertises.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ListenerConfig {
    /// The listener name (`NAME://` in `listeners`; [`DEFAULT_LISTENER_NAME`] when
    /// none is given).
    pub name: String,
    /// The address it binds (from `listeners`).
    pub bind: HostPort,
    /// The address it gives to clients and other brokers (from
    /// `advertised_listeners`; `bind` when that does not name this listener).
    pub advertised: HostPort,
    /// A Kafka wire-protocol listener (from `kafka_listeners`), for Kafka's
    /// clients and tools; otherwise syncline's own protocol.
    pub kafka: bool,
    /// How its connections are secured (`listener_security_protocol_map`).
    pub security_protocol: SecurityProtocol,
}

pub use syncline_auth::SecurityProtocol;

/// Kafka's `ssl.client.auth`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum SslClientAuth {
    /// No client certificate asked for.
    #[default]
    None,
    /// Asked for and verified when given; a client without one is served.
    Requested,
    /// A client without a certificate signed by `ssl_ca_location` is refused.
    Required,
}

/// The TLS settings of the SSL and SASL_SSL listeners (PEM files; the names
/// are librdkafka's).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SslConfig {
    /// This broker's certificate chain (`ssl_certificate_location`).
    pub certificate: PathBuf,
    /// Its private key (`ssl_key_location`).
    pub key: PathBuf,
    /// The CA certificates peers' certificates are checked against
    /// (`ssl_ca_location`): client certificates on the listeners, the other
    /// brokers' when this broker connects to them over TLS.
    pub ca: Option<PathBuf>,
    /// `ssl_client_auth`: none, requested or required, on the listeners
    /// other than the inter-broker one. Default none.
    pub client_auth: SslClientAuth,
    /// `inter_broker_ssl_client_auth`: the same on the inter-broker listener
    /// (when it is SSL or SASL_SSL). Default required: mutual TLS between
    /// brokers, and nothing without a certificate of the CA on that listener.
    pub inter_broker_client_auth: SslClientAuth,
}

/// Who may do what (`authorizer_enable` and the keys with it).
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct AuthorizerSettings {
    /// ACLs are enforced (`authorizer_enable`). Off: every principal may do
    /// everything on the client APIs, as before ACLs existed.
    pub enabled: bool,
    /// Principals allowed everything (`super_users`, Kafka's
    /// `User:a;User:b`).
    pub super_users: Vec<String>,
    /// A resource without any ACL is open to all
    /// (`allow_everyone_if_no_acl_found`, default false).
    pub allow_everyone_if_no_acl_found: bool,
}

/// The listener name of `listeners = "host:port"` (no name given).
pub const DEFAULT_LISTENER_NAME: &str = "PLAINTEXT";
/// The listener name of `kafka_listeners = "host:port"` (no name given).
pub const DEFAULT_KAFKA_LISTENER_NAME: &str = "KAFKA";

/// `host:port` items without a name get `default`'s.
fn name_listeners(s: &str, default: &str) -> String {
    s.split(',')
        .map(str::trim)
        .filter(|i| !i.is_empty())
        .map(|i| {
            if i.contains("://") {
                i.to_string()
            } else {
                format!("{default}://{i}")
            }
        })
        .collect::<Vec<_>>()
        .join(",")
}

/// Parses `[NAME://]host:port[,...]` into (name, address) pairs.
fn parse_listeners(key: &'static str, s: &str) -> Result<Vec<(String, HostPort)>, ConfigError> {
    let mut out: Vec<(String, HostPort)> = Vec::new();
    for item in s.split(',').map(str::trim).filter(|i| !i.is_empty()) {
        let (name, addr) = match item.split_once("://") {
            Some((name, addr)) => (name.to_string(), addr),
            None => (DEFAULT_LISTENER_NAME.to_string(), item),
        };
        if name.is_empty()
            || !name
                .chars()
                .all(|c| c.is_ascii_alphanumeric() || c == '_' || c == '-')
        {
            return Err(invalid(
                key,
                format!("`{name}` is not a listener name (letters, digits, _ and -)"),
            ));
        }
        if out.iter().any(|(n, _)| *n == name) {
            return Err(invalid(key, format!("listener `{name}` is named twice")));
        }
        out.push((name, HostPort::parse(key, addr)?));
    }
    if out.is_empty() {
        return Err(invalid(key, "names no listener (e.g. \"127.0.0.1:9092\")"));
    }
    Ok(out)
}

/// `listener_security_protocol_map`: `NAME:PROTOCOL,...`.
fn parse_security_protocol_map(
    s: Option<&str>,
) -> Result<Vec<(String, SecurityProtocol)>, ConfigError> {
    const KEY: &str = "listener_security_protocol_map";
    let mut out: Vec<(String, SecurityProtocol)> = Vec::new();
    for item in s
        .unwrap_or("")
        .split(',')
        .map(str::trim)
        .filter(|i| !i.is_empty())
    {
        let Some((name, protocol)) = item.split_once(':') else {
            return Err(invalid(
                KEY,
                format!("`{item}` is not NAME:PROTOCOL (e.g. \"CLIENT:SASL_SSL\")"),
            ));
        };
        let (name, protocol) = (name.trim(), protocol.trim());
        let Ok(p) = protocol.parse::<SecurityProtocol>() else {
            return Err(invalid(
                KEY,
                format!(
                    "`{protocol}` (listener `{name}`) is not a security protocol: use PLAINTEXT, SSL, SASL_PLAINTEXT or SASL_SSL"
                ),
            ));
        };
        if out.iter().any(|(n, _)| n == name) {
            return Err(invalid(KEY, format!("listener `{name}` is mapped twice")));
        }
        out.push((name.to_string(), p));
    }
    Ok(out)
}

/// The TLS settings, required when a listener is SSL or SASL_SSL.
fn ssl_config(
    [certificate, key, ca, client_auth, inter_broker_client_auth]: [&Option<String>; 5],
    listeners: &[ListenerConfig],
    inter_broker: &str,
) -> Result<Option<SslConfig>, ConfigError> {
    let path = |key: &'static str, v: &Option<String>| -> Result<Option<PathBuf>, ConfigError> {
        match v.as_deref().map(str::trim) {
            Some("") => Err(invalid(key, "must name a PEM file")),
            Some(p) => Ok(Some(PathBuf::from(p))),
            None => Ok(None),
        }
    };
    let certificate = path("ssl_certificate_location", certificate)?;
    let key = path("ssl_key_location", key)?;
    let ca = path("ssl_ca_location", ca)?;
    let auth = |key: &'static str, v: &Option<String>, default| match v.as_deref().map(str::trim) {
        None => Ok(default),
        Some("none") => Ok(SslClientAuth::None),
        Some("requested") => Ok(SslClientAuth::Requested),
        Some("required") => Ok(SslClientAuth::Required),
        Some(other) => Err(invalid(
            key,
            format!("`{other}` is not none, requested or required"),
        )),
    };
    let client_auth = auth("ssl_client_auth", client_auth, SslClientAuth::None)?;
    let inter_broker_client_auth = auth(
        "inter_broker_ssl_client_auth",
        inter_broker_client_auth,
        SslClientAuth::Required,
    )?;
    let tls_listener = listeners.iter().find(|l| l.security_protocol.is_tls());
    let internal_tls = listeners
        .iter()
        .any(|l| l.name == inter_broker && l.security_protocol.is_tls());
    match (certificate, key, tls_listener) {
        (Some(certificate), Some(key), _) => {
            if client_auth != SslClientAuth::None && ca.is_none() {
                return Err(invalid(
                    "ssl_client_auth",
                    "checking client certificates needs ssl_ca_location (the CA that signs them)",
                ));
            }
            if internal_tls && ca.is_none() {
                return Err(invalid(
                    "ssl_ca_location",
                    format!("the inter-broker listener `{inter_broker}` is TLS: brokers check each other's certificates against ssl_ca_location, give it"),
                ));
            }
            Ok(Some(SslConfig {
                certificate,
                key,
                ca,
                client_auth,
                inter_broker_client_auth,
            }))
        }
        (None, _, Some(l)) | (_, None, Some(l)) => Err(invalid(
            "ssl_certificate_location",
            format!(
                "listener `{}` is {}: give ssl_certificate_location and ssl_key_location (PEM files)",
                l.name, l.security_protocol
            ),
        )),
        (Some(_), None, None) | (None, Some(_), None) => Err(invalid(
            "ssl_key_location",
            "ssl_certificate_location and ssl_key_location go together",
        )),
        (None, None, None) => Ok(None),
    }
}

/// `sasl_enabled_mechanisms`: a comma-separated list of SCRAM-SHA-256,
/// SCRAM-SHA-512 and PLAIN.
fn sasl_mechanisms(s: Option<&str>) -> Result<Vec<String>, ConfigError> {
    const KEY: &str = "sasl_enabled_mechanisms";
    let list = s.unwrap_or("SCRAM-SHA-256,SCRAM-SHA-512,PLAIN");
    let mut out = Vec::new();
    for m in list.split(',').map(str::trim).filter(|m| !m.is_empty()) {
        if syncline_auth::Mechanism::from_name(m).is_none()
            && m != syncline_auth::plain::MECHANISM_NAME
        {
            return Err(invalid(
                KEY,
                format!(
                    "`{m}` is not a supported mechanism: use SCRAM-SHA-256, SCRAM-SHA-512 or PLAIN"
                ),
            ));
        }
        if !out.iter().any(|o: &String| o == m) {
            out.push(m.to_string());
        }
    }
    Ok(out)
}

/// One voter of the controller quorum (`id@host:port`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Voter {
    /// The voter's node id.
    pub node_id: i32,
    /// Its inter-broker listener's address.
    pub address: HostPort,
}

/// The listeners of one protocol: `bound` (`[NAME://]host:port,...`), with
/// their advertised addresses from `advertised` (by name; the bound address
/// when not named, which must then not be a wildcard). `keys` name the two
/// settings in errors.
fn listener_configs(
    keys: (&'static str, &'static str),
    bound: &str,
    advertised: Option<&str>,
    kafka: bool,
) -> Result<Vec<ListenerConfig>, ConfigError> {
    let (listeners_key, advertised_key) = keys;
    let bound = parse_listeners(listeners_key, bound)?;
    let advertised = match advertised {
        Some(s) => parse_listeners(advertised_key, s)?,
        None => Vec::new(),
    };
    for (name, _) in &advertised {
        if !bound.iter().any(|(n, _)| n == name) {
            return Err(invalid(
                advertised_key,
                format!("`{name}` is not one of `{listeners_key}`"),
            ));
        }
    }
    let mut listeners = Vec::new();
    for (name, bind) in bound {
        let advertised = match advertised.iter().find(|(n, _)| *n == name) {
            Some((_, a)) => a.clone(),
            None if bind.host == "0.0.0.0" || bind.host == "::" => {
                return Err(invalid(
                    advertised_key,
                    format!(
                        "must give an address for listener `{name}`: it binds a wildcard \
                         address, and clients need a host they can reach"
                    ),
                ))
            }
            None => bind.clone(),
        };
        listeners.push(ListenerConfig {
            name,
            bind,
            advertised,
            kafka,
            security_protocol: SecurityProtocol::Plaintext,
        });
    }
    Ok(listeners)
}

/// The file as written: every key optional except `node_id`.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct RawConfig {
    node_id: i32,
    cluster_id: Option<String>,
    listeners: Option<String>,
    advertised_listeners: Option<String>,
    kafka_listeners: Option<String>,
    kafka_advertised_listeners: Option<String>,
    inter_broker_listener_name: Option<String>,
    listener_security_protocol_map: Option<String>,
    ssl_certificate_location: Option<String>,
    ssl_key_location: Option<String>,
    ssl_ca_location: Option<String>,
    ssl_client_auth: Option<String>,
    inter_broker_ssl_client_auth: Option<String>,
    sasl_enabled_mechanisms: Option<String>,
    authorizer_enable: Option<bool>,
    super_users: Option<String>,
    allow_everyone_if_no_acl_found: Option<bool>,
    log_dirs: Option<String>,
    process_roles: Option<String>,
    controller_quorum_voters: Option<String>,
    broker_rack: Option<String>,
    metrics_listen: Option<String>,
    outgoing_bind_address: Option<String>,
    num_partitions: Option<i32>,
    default_replication_factor: Option<i32>,
    min_insync_replicas: Option<i32>,
    message_max_bytes: Option<i64>,
    socket_request_max_bytes: Option<i64>,
    queued_max_requests: Option<i64>,
    connection_max_unwritten_bytes: Option<i64>,
    connections_max_idle_ms: Option<i64>,
    sasl_authentication_timeout_ms: Option<i64>,
    sasl_server_max_receive_size: Option<i64>,
    segment_bytes: Option<i64>,
    segment_ms: Option<i64>,
    retention_ms: Option<i64>,
    retention_bytes: Option<i64>,
    retention_check_interval_ms: Option<i64>,
    producer_id_expiration_ms: Option<i64>,
    flush_messages: Option<i64>,
    flush_ms: Option<i64>,
    replica_lag_time_max_ms: Option<i64>,
    replica_fetch_wait_max_ms: Option<i64>,
    replica_fetch_min_bytes: Option<i64>,
    replica_fetch_max_bytes: Option<i64>,
    replica_fetch_response_max_bytes: Option<i64>,
    replica_fetch_backoff_ms: Option<i64>,
    num_replica_fetchers: Option<i64>,
    leader_replication_throttled_rate: Option<i64>,
    follower_replication_throttled_rate: Option<i64>,
    quota_producer_default: Option<i64>,
    quota_consumer_default: Option<i64>,
    quota_window_num: Option<i64>,
    quota_window_size_seconds: Option<i64>,
    max_incremental_fetch_session_cache_slots: Option<i64>,
    max_incremental_fetch_session_partitions: Option<i64>,
    replica_selector: Option<String>,
    replica_high_watermark_checkpoint_interval_ms: Option<i64>,
    unclean_leader_election_enable: Option<bool>,
    broker_session_timeout_ms: Option<i64>,
    broker_heartbeat_interval_ms: Option<i64>,
    controller_quorum_election_timeout_ms: Option<i64>,
    controller_quorum_request_timeout_ms: Option<i64>,
    controller_quorum_commit_timeout_ms: Option<i64>,
    controller_socket_timeout_ms: Option<i64>,
    metadata_snapshot_max_new_records: Option<i64>,
    controlled_shutdown_enable: Option<bool>,
    controlled_shutdown_timeout_ms: Option<i64>,
    auto_leader_rebalance_enable: Option<bool>,
    leader_imbalance_check_interval_seconds: Option<i64>,
    leader_imbalance_per_broker_percentage: Option<i64>,
    broker_credentials_dir: Option<String>,
    scram_bootstrap_file: Option<String>,
    fetch_max_bytes: Option<i64>,
    max_connections: Option<i64>,
    max_connections_per_ip: Option<i64>,
    auto_create_topics_enable: Option<bool>,
    auto_create_topics_max_partitions_per_request: Option<i64>,
    auto_create_topics_max_cluster_partitions: Option<i64>,
    offsets_topic_num_partitions: Option<i64>,
    offsets_topic_replication_factor: Option<i64>,
    offsets_topic_eager_creation: Option<bool>,
    offsets_retention_minutes: Option<i64>,
    offset_metadata_max_bytes: Option<i64>,
    group_min_session_timeout_ms: Option<i64>,
    group_max_session_timeout_ms: Option<i64>,
    group_initial_rebalance_delay_ms: Option<i64>,
    group_max_size: Option<i64>,
}

/// A validated broker configuration.
///
/// Each field is the config-file key of the same name (Kafka's broker config with
/// dots written as underscores, e.g. `replica.lag.time.max.ms` ->
/// `replica_lag_time_max_ms`) unless its doc says otherwise, and defaults to
/// Kafka's default. `config/broker-1.toml` documents every key.
#[derive(Debug, Clone)]
pub struct BrokerConfig {
    /// Unique id of this broker in the cluster (Kafka's `node.id`); required, 0 or
    /// more.
    pub node_id: i32,
    /// Brokers registering with a different cluster id are refused. Kafka keeps it
    /// in `meta.properties`; here it is a key. Default `"syncline"`.
    pub cluster_id: String,
    /// Every listener (Kafka's `listeners` and `advertised.listeners`, then the
    /// Kafka wire-protocol ones of `kafka_listeners` and
    /// `kafka_advertised_listeners`, unnamed ones called `KAFKA`); clients get
    /// the endpoints of the one they connected to. Default: one `PLAINTEXT`
    /// listener on `127.0.0.1:9092`, no Kafka listener.
    pub listeners: Vec<ListenerConfig>,
    /// The listener other brokers and the controller use (Kafka's
    /// `inter.broker.listener.name`). Default: the first of `listeners`.
    pub inter_broker_listener_name: String,
    /// Where partition logs (and, on the controller, the metadata log) live: the
    /// key `log_dirs` (Kafka's `log.dirs`), which may name only one directory here.
    /// Relative to the working directory. Default `data/broker-<node_id>`.
    pub log_dir: PathBuf,
    /// This process hosts the controller: the key `process_roles` (Kafka's
    /// `process.roles`) is `"broker,controller"` rather than the default
    /// `"broker"`.
    pub is_controller: bool,
    /// The controller quorum, `id@host:port` each (Kafka's
    /// `controller.quorum.voters`); required. Every node listed must have the
    /// controller role and every node with that role must be listed. One voter
    /// survives no failure of its node; three survive one; five survive two.
    pub controller_quorum_voters: Vec<Voter>,
    /// Rack of this broker for rack-aware replica placement and rack-aware
    /// consumer fetches (Kafka's `broker.rack`). Default none (an empty value too).
    pub broker_rack: Option<String>,
    /// Where Prometheus metrics are served (`GET /metrics`); not a Kafka config.
    /// Default none: disabled (an empty value too).
    pub metrics_listen: Option<HostPort>,
    /// The source address of every connection this broker opens to other
    /// brokers and controllers (an IP address; the port is chosen by the OS); not
    /// a Kafka config. Default none: the OS picks it. The fault harness gives
    /// each broker a loopback address of its own this way, so that a firewall
    /// rule can cut the link between two brokers.
    pub outgoing_bind_address: Option<std::net::IpAddr>,
    /// Partitions of topics created without a count (Kafka's `num.partitions`).
    /// Default 1.
    pub num_partitions: i32,
    /// Replication factor of topics created without one (Kafka's
    /// `default.replication.factor`). Default 1.
    pub default_replication_factor: i32,
    /// In-sync replicas acks=all produces need (Kafka's `min.insync.replicas`); the
    /// topic config `min.insync.replicas` overrides it. Default 1.
    pub min_insync_replicas: i32,
    /// Largest record batch a producer may send, in bytes (Kafka's
    /// `message.max.bytes`); smaller than `socket_request_max_bytes`. Default
    /// 1048588.
    pub message_max_bytes: usize,
    /// Largest request frame, in bytes (Kafka's `socket.request.max.bytes`).
    /// Default 104857600.
    pub socket_request_max_bytes: usize,
    /// Requests in flight per connection; past it the broker stops reading from
    /// that connection until one is answered (Kafka's `queued.max.requests`, which
    /// Kafka applies broker-wide). Default 500.
    pub queued_max_requests: usize,
    /// What else bounds one connection: its unwritten answers, its idle time,
    /// and before it authenticates, its time and frame size.
    pub connection_bounds: ConnectionBounds,
    /// Client byte-rate quotas (Kafka's static `quota.producer.default` and
    /// `quota.consumer.default`, KIP-13): see [`ClientQuotaConfig`].
    pub client_quotas: ClientQuotaConfig,
    /// A segment rolls at this size, in bytes (Kafka's `log.segment.bytes`); the
    /// default of the topic config `segment.bytes`. Default 1073741824.
    pub segment_bytes: u64,
    /// A segment rolls at this age, in ms; None (-1 in the file): never by age
    /// (Kafka's `log.roll.ms`); the default of the topic config `segment.ms`.
    /// Default 604800000 (7 days).
    pub segment_ms: Option<u64>,
    /// Segments older than this, in ms, are deleted; -1: kept whatever their age
    /// (Kafka's `log.retention.ms`); the default of the topic config
    /// `retention.ms`. Default 604800000 (7 days).
    pub retention_ms: i64,
    /// The oldest segment of a partition is deleted while the log without it is
    /// still at least this large, in bytes; -1: unlimited (Kafka's `log.retention.bytes`); the default of the
    /// topic config `retention.bytes`. Default -1.
    pub retention_bytes: i64,
    /// How often retention is checked, in ms (Kafka's
    /// `log.retention.check.interval.ms`). Default 300000.
    pub retention_check_interval_ms: u64,
    /// An idempotent producer's state in a partition is forgotten this long
    /// after its last batch there, in ms (Kafka's `producer.id.expiration.ms`);
    /// checked with retention. A later retry of that producer is answered
    /// UNKNOWN_PRODUCER_ID and the producer starts a new epoch. Default 86400000.
    pub producer_id_expiration_ms: i64,
    /// The log is fsynced after this many messages; `u64::MAX` (-1 in the file):
    /// never, durability comes from replication (Kafka's
    /// `log.flush.interval.messages`); the default of the topic config
    /// `flush.messages`. Default never.
    pub flush_messages: u64,
    /// The log is fsynced this long, in ms, after its oldest append not yet fsynced;
    /// `u64::MAX` (-1 in the file): never (Kafka's `log.flush.interval.ms`); the
    /// default of the topic config `flush.ms`. Default never.
    pub flush_ms: u64,
    /// A follower that has not caught up with the leader's log end within this
    /// time, in ms, leaves the ISR; the leader checks every half of it (Kafka's
    /// `replica.lag.time.max.ms`). The topic config `replica.lag.time.max.ms` (a
    /// syncline extension) overrides it. Default 30000.
    pub replica_lag_time_max_ms: u64,
    /// How long, in ms, a leader holds a follower fetch waiting for data (Kafka's
    /// `replica.fetch.wait.max.ms`); smaller than `replica_lag_time_max_ms`, or idle
    /// followers would leave the ISR. Default 500. A fetcher whose last fetch
    /// brought nothing new asks for longer: a sixth of the smallest lag time of
    /// its topics, at most 5 s, never less than this (`fetcher::fetch_wait`).
    pub replica_fetch_wait_max_ms: u64,
    /// Bytes that end a follower fetch's wait early (Kafka's
    /// `replica.fetch.min.bytes`). Default 1.
    pub replica_fetch_min_bytes: u32,
    /// Bytes a follower asks for per partition (Kafka's `replica.fetch.max.bytes`).
    /// Default 1048576.
    pub replica_fetch_max_bytes: u32,
    /// Bytes a follower asks for per fetch response (Kafka's
    /// `replica.fetch.response.max.bytes`). Default 10485760.
    pub replica_fetch_response_max_bytes: u32,
    /// Longest pause, in ms, of a partition after failed fetches: the first retry
    /// comes after 10 ms and each further failure in a row doubles the pause up to
    /// this (Kafka's `replica.fetch.backoff.ms`). Default 1000.
    pub replica_fetch_backoff_ms: u64,
    /// Fetcher tasks per source leader broker (Kafka's `num.replica.fetchers`).
    /// Default 1.
    pub num_replica_fetchers: usize,
    /// Bytes a second this broker, as a leader, sends to the replicas reassignments
    /// are adding while they are out of the ISR (Kafka's
    /// `leader.replication.throttled.rate`; see [`crate::replica::quota`]). `None`
    /// (absent, or Kafka's default 9223372036854775807): unthrottled.
    pub leader_replication_throttled_rate: Option<u64>,
    /// Bytes a second this broker, as a replica being added by a reassignment and
    /// out of the ISR, fetches (Kafka's `follower.replication.throttled.rate`).
    /// `None`: unthrottled.
    pub follower_replication_throttled_rate: Option<u64>,
    /// Incremental fetch sessions (KIP-227) the broker keeps for fetchers and
    /// consumers; 0 declines them (Kafka's
    /// `max.incremental.fetch.session.cache.slots`). Default 1000. A full
    /// cache evicts as Kafka's does: a session unused for two minutes first,
    /// else a smaller one (not opened in the last two minutes) for a larger,
    /// a client's for a follower's; a client's never evicts a follower's.
    pub max_incremental_fetch_session_cache_slots: usize,
    /// The partitions one fetch session may hold (syncline's own; Kafka has
    /// no such bound). A request opening a larger session is answered
    /// without one; an incremental fetch growing a session past it closes
    /// the session (FETCH_SESSION_ID_NOT_FOUND: the client goes back to full
    /// fetches). Bounds the memory and the per-fetch work a client can make
    /// one session cost. Default 10000.
    pub max_incremental_fetch_session_partitions: usize,
    /// Which replica consumers read from (Kafka's `replica.selector.class`):
    /// `"leader"` or `"rack_aware"` in the file. Default `"leader"`.
    pub replica_selector: ReplicaSelector,
    /// How often each partition's high watermark is checkpointed to disk, in ms
    /// (Kafka's `replica.high.watermark.checkpoint.interval.ms`). Default 5000.
    pub replica_high_watermark_checkpoint_interval_ms: u64,
    /// Whether a leader may be elected from outside the ISR, trading consistency
    /// for availability (Kafka's `unclean.leader.election.enable`); the topic
    /// config `unclean.leader.election.enable` overrides it. Default false.
    pub unclean_leader_election_enable: bool,
    /// Silence, in ms, after which the controller fences a broker: moves its
    /// leaderships and removes it from every ISR (Kafka's
    /// `broker.session.timeout.ms`). Default 9000.
    pub broker_session_timeout_ms: u64,
    /// Time between heartbeats to the controller, in ms (Kafka's
    /// `broker.heartbeat.interval.ms`); smaller than `broker_session_timeout_ms`.
    /// Default 2000.
    pub broker_heartbeat_interval_ms: u64,
    /// How long a controller voter waits without hearing from the active
    /// controller before it stands for election, in ms (Kafka's
    /// `controller.quorum.election.timeout.ms`); each election waits a random time
    /// between this and twice this. Default 1000. The active controller
    /// heartbeats the voters every quarter of it.
    pub controller_quorum_election_timeout_ms: u64,
    /// Longest wait for one request between controller voters, in ms (Kafka's
    /// `controller.quorum.request.timeout.ms`). Default 2000.
    pub controller_quorum_request_timeout_ms: u64,
    /// Longest wait for a majority of voters to commit a metadata change, in ms;
    /// past it the change fails with an error naming the lost quorum and the
    /// active controller resigns (not a Kafka config). Default 5000.
    pub controller_quorum_commit_timeout_ms: u64,
    /// Longest wait of the active controller for a broker to take one
    /// LeaderAndIsr (connect, then answer), in ms; past it the controller
    /// sends that broker its whole image again (Kafka's
    /// `controller.socket.timeout.ms`). Default 10000.
    pub controller_socket_timeout_ms: u64,
    /// The controller voters snapshot the metadata image and drop the log behind
    /// the snapshot after this many new entries of the quorum's log (each entry
    /// is one batch of records, committed together; Kafka counts bytes:
    /// `metadata.log.max.record.bytes.between.snapshots`). Default 1000.
    pub metadata_snapshot_max_new_records: u64,
    /// On shutdown, first ask the controller to move this broker's leaderships
    /// away (Kafka's `controlled.shutdown.enable`). Default true.
    pub controlled_shutdown_enable: bool,
    /// Longest wait, in ms, for the controlled shutdown before stopping anyway; not
    /// a Kafka config. Default 30000.
    pub controlled_shutdown_timeout_ms: u64,
    /// The active controller moves leadership back to preferred replicas on its
    /// own (Kafka's `auto.leader.rebalance.enable`). Default true.
    pub auto_leader_rebalance_enable: bool,
    /// How often, in seconds, the active controller checks the leader balance.
    /// Default 300.
    pub leader_imbalance_check_interval_seconds: u64,
    /// The share (percent) of the partitions a broker prefers but does not lead
    /// above which the rebalance moves them back. Default 10.
    pub leader_imbalance_per_broker_percentage: u32,
    /// How a replica that becomes follower finds where its log agrees with the
    /// leader's. Not a config-file key, and compiled only with the
    /// `legacy-truncation` feature, which only the end-to-end test crate turns on to
    /// show what the old rule loses (cargo unifies features, so a workspace build's
    /// `synclined` contains it too; nothing outside a test can select it).
    #[cfg(feature = "legacy-truncation")]
    pub truncation_rule: TruncationRule,
    /// Whether requests' CPU-heavy work runs on threads of its own, off the
    /// I/O runtime, and a connection yields after each request served inline
    /// (see the front end's `HeavyWork`). Not a config-file key: the
    /// simulation turns it off, as a thread of its own would run in an order
    /// its seed does not decide. Default true.
    pub heavy_work_off_runtime: bool,
    /// Upper bound on the record bytes of one fetch response, whatever the
    /// request asks (Kafka's `fetch.max.bytes`); a partition's share is capped by
    /// it too. One batch larger than the rest of the budget still goes out, so a
    /// reader never stalls. Default 57671680 (55 MiB).
    pub fetch_max_bytes: usize,
    /// Connections the broker keeps open at once (Kafka's `max.connections`);
    /// one more is closed as soon as it is accepted. When the inter-broker
    /// listener is a listener of its own, its connections do not count against
    /// it. Default 10000.
    pub max_connections: usize,
    /// Connections one client address may keep open at once (Kafka's
    /// `max.connections.per.ip`). Default 2147483647.
    pub max_connections_per_ip: usize,
    /// Where the brokers' credentials are: this broker's secret
    /// (`broker-N.secret`, created on first start) and every broker's verifier
    /// (`broker-N.verifier`). Default: `credentials` beside the log dir.
    pub broker_credentials_dir: PathBuf,
    /// Users a new cluster starts with (`scram_bootstrap_file`): one line per
    /// credential, as `syncline user verifier` prints them. The active controller
    /// reads it as it takes office and adds its users if no user was ever added or
    /// removed (once in the cluster's life). Default: none.
    pub scram_bootstrap_file: Option<PathBuf>,
    /// TLS for the SSL and SASL_SSL listeners and for this broker's
    /// connections to the others when the inter-broker listener is one; set
    /// when any listener needs it.
    pub ssl: Option<SslConfig>,
    /// SASL mechanisms client connections may use (`sasl_enabled_mechanisms`;
    /// default `SCRAM-SHA-256,SCRAM-SHA-512,PLAIN`). PLAIN, which sends the
    /// password itself, is offered on SASL_SSL listeners only.
    pub sasl_enabled_mechanisms: Vec<String>,
    /// ACLs, super users and the no-ACL rule.
    pub authorizer: AuthorizerSettings,
    /// Serve the internal APIs to unauthenticated connections. Not a config-file
    /// key, and compiled only with the `unauthenticated-internal-apis` feature,
    /// which only the end-to-end tests turn on to show what each refused forgery
    /// would do (as with `truncation_rule`, nothing outside a test can select it).
    #[cfg(feature = "unauthenticated-internal-apis")]
    pub unauthenticated_internal_apis: bool,
    /// A Metadata request of a Kafka client naming an unknown topic creates it
    /// with `num_partitions` and `default_replication_factor` (Kafka's
    /// `auto.create.topics.enable`). syncline's own clients never create topics
    /// this way. Default true.
    pub auto_create_topics_enable: bool,
    /// Partitions one Metadata request may auto-create, all its unknown topics
    /// together (syncline's; `__consumer_offsets` is not charged). A topic past
    /// it is refused with `POLICY_VIOLATION`. Decided by the active controller,
    /// with its own value. Default 1000.
    pub auto_create_topics_max_partitions_per_request: usize,
    /// Partitions in the cluster (every topic's) beyond which auto-creation
    /// creates no more (syncline's; `__consumer_offsets` is never refused): a topic
    /// that would pass it is refused with `POLICY_VIOLATION`; CreateTopics is not
    /// bound by it. Decided by the active controller. Default 10000.
    pub auto_create_topics_max_cluster_partitions: usize,
    /// Consumer groups: the group coordinators and the groups' committed
    /// offsets, on the internal topic `__consumer_offsets`.
    pub groups: GroupsConfig,
}

/// The consumer groups' settings (Kafka's `offsets.*` and `group.*` broker
/// configs, each the key of the same name with underscores).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct GroupsConfig {
    /// Partitions of `__consumer_offsets` when it is created; a group lives on
    /// the partition its id hashes to (Kafka's `offsets.topic.num.partitions`).
    /// The active controller's value is the one used, whichever broker asks,
    /// and the count never changes afterwards. Default 50.
    pub offsets_topic_num_partitions: i32,
    /// Its replication factor (Kafka's `offsets.topic.replication.factor`); the
    /// topic is created when the first group needs it, once that many brokers
    /// are registered. Default 3.
    pub offsets_topic_replication_factor: i32,
    /// The active controller creates `__consumer_offsets` as soon as
    /// `offsets_topic_replication_factor` brokers are up, rather than when the
    /// first group asks (syncline's): a cluster that loses a broker before its
    /// first group still serves groups. Its partitions are then placed on the
    /// brokers up at that moment. Default false.
    pub offsets_topic_eager_creation: bool,
    /// Committed offsets of an empty group are deleted this long after their
    /// commit, in minutes (Kafka's `offsets.retention.minutes`). Default 10080.
    pub offsets_retention_minutes: i64,
    /// Longest metadata string of a committed offset, in bytes (Kafka's
    /// `offset.metadata.max.bytes`). Default 4096.
    pub offset_metadata_max_bytes: usize,
    /// The shortest session timeout a member may ask for, in ms (Kafka's
    /// `group.min.session.timeout.ms`; `group_max_session_timeout_ms` bounds
    /// it from above). Default 6000.
    pub group_min_session_timeout_ms: i32,
    /// Default 1800000.
    pub group_max_session_timeout_ms: i32,
    /// An empty group's first rebalance waits this long, in ms, for more
    /// members (Kafka's `group.initial.rebalance.delay.ms`). Default 3000.
    pub group_initial_rebalance_delay_ms: i32,
    /// Members a group may have (Kafka's `group.max.size`). Default 2147483647.
    pub group_max_size: usize,
}

/// Which replica serves a consumer (KIP-392).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum ReplicaSelector {
    /// Always the leader (Kafka's default).
    #[default]
    Leader,
    /// An in-sync replica in the consumer's rack (`client.rack`), when there is one
    /// (Kafka's `RackAwareReplicaSelector`).
    RackAware,
}

/// The follower truncation rule (feature `legacy-truncation`).
#[cfg(feature = "legacy-truncation")]
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum TruncationRule {
    /// Ask the leader where our epochs end (KIP-101/279) and truncate there; fetch
    /// with `last_fetched_epoch` so divergence is caught on fetch (KIP-595).
    #[default]
    LeaderEpoch,
    /// The pre-KIP-101 rule: truncate to our own high watermark on becoming
    /// follower. It loses committed records and lets replicas diverge (KIP-101's
    /// scenarios); kept only so tests can show that it does.
    HighWatermark,
}

fn in_range(
    key: &'static str,
    value: Option<i64>,
    default: i64,
    min: i64,
    max: i64,
) -> Result<i64, ConfigError> {
    let v = value.unwrap_or(default);
    if v < min || v > max {
        return Err(invalid(
            key,
            format!("{v} is out of range (must be between {min} and {max})"),
        ));
    }
    Ok(v)
}

/// A replication throttle: absent or `i64::MAX` (Kafka's default) is none.
/// Client byte-rate quotas, configured statically per client id (Kafka's
/// defaults before quotas moved to dynamic configs; the broker's
/// `client_quota` enforces them). A client whose produces or consumer
/// fetches go over its quota is answered at once with `throttle_time_ms`,
/// and its connection is not read for that long (KIP-219). Replication is
/// never charged.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ClientQuotaConfig {
    /// Record bytes a second each client id may produce
    /// (`quota_producer_default`, Kafka's `quota.producer.default`); `None`
    /// (absent, or Kafka's default 9223372036854775807): unlimited.
    pub producer_default: Option<u64>,
    /// Record bytes a second each client id may fetch as a consumer
    /// (`quota_consumer_default`, Kafka's `quota.consumer.default`); `None`:
    /// unlimited.
    pub consumer_default: Option<u64>,
    /// Samples a client's rate is measured over (`quota_window_num`, Kafka's
    /// `quota.window.num`). Default 11.
    pub window_num: u32,
    /// Each sample's span, in seconds (`quota_window_size_seconds`, Kafka's
    /// `quota.window.size.seconds`). Default 1.
    pub window_size_seconds: u32,
}

impl ClientQuotaConfig {
    fn from_raw(raw: &RawConfig) -> Result<ClientQuotaConfig, ConfigError> {
        Ok(ClientQuotaConfig {
            producer_default: throttled_rate("quota_producer_default", raw.quota_producer_default)?,
            consumer_default: throttled_rate("quota_consumer_default", raw.quota_consumer_default)?,
            window_num: in_range("quota_window_num", raw.quota_window_num, 11, 2, 1000)? as u32,
            window_size_seconds: in_range(
                "quota_window_size_seconds",
                raw.quota_window_size_seconds,
                1,
                1,
                3600,
            )? as u32,
        })
    }
}

fn throttled_rate(key: &'static str, value: Option<i64>) -> Result<Option<u64>, ConfigError> {
    match value {
        None | Some(i64::MAX) => Ok(None),
        Some(v) if v >= 1 => Ok(Some(v as u64)),
        Some(v) => Err(invalid(
            key,
            format!("{v} must be a rate in bytes a second of at least 1 (absent: unthrottled)"),
        )),
    }
}

/// -1 (or absent) means "never": u64::MAX.
fn never_or_positive(key: &'static str, value: Option<i64>) -> Result<u64, ConfigError> {
    match value {
        None | Some(-1) => Ok(u64::MAX),
        Some(v) if v >= 1 => Ok(v as u64),
        Some(v) => Err(invalid(
            key,
            format!("{v} must be -1 (never) or at least 1"),
        )),
    }
}

impl BrokerConfig {
    /// Reads and validates a config file. Relative paths in it are relative to the
    /// working directory.
    pub fn load(path: &Path) -> Result<BrokerConfig, ConfigError> {
        let text = std::fs::read_to_string(path).map_err(|source| ConfigError::Read {
            path: path.to_path_buf(),
            source,
        })?;
        Self::parse(&text).map_err(|e| match e {
            ConfigError::Parse { message, .. } => ConfigError::Parse {
                path: path.to_path_buf(),
                message,
            },
            other => other,
        })
    }

    /// Parses and validates TOML text.
    pub fn parse(text: &str) -> Result<BrokerConfig, ConfigError> {
        let raw: RawConfig = toml::from_str(text).map_err(|e| ConfigError::Parse {
            path: PathBuf::new(),
            message: e.to_string(),
        })?;
        Self::from_raw(raw)
    }

    /// Validates `raw` one section at a time, in this order: of several invalid
    /// values, the error names the first one found (keep the order when moving a
    /// step).
    fn from_raw(raw: RawConfig) -> Result<BrokerConfig, ConfigError> {
        if raw.node_id < 0 {
            return Err(invalid("node_id", "must be 0 or more"));
        }
        let (listeners, inter_broker_listener_name) = listeners(&raw)?;
        let (ssl, sasl_enabled_mechanisms, authorizer) =
            security(&raw, &listeners, &inter_broker_listener_name)?;
        let log_dir = log_dir(&raw)?;
        let (is_controller, controller_quorum_voters) = controller_role(&raw)?;
        let addresses = Addresses::from_raw(&raw)?;
        let group_session_timeouts_ms = group_session_timeouts_ms(&raw)?;
        let (num_partitions, default_replication_factor, min_insync_replicas) =
            topic_defaults(&raw)?;
        let (socket_request_max_bytes, message_max_bytes) = request_sizes(&raw)?;
        let (replica_lag_time_max_ms, replica_fetch_wait_max_ms) = replica_lag(&raw)?;
        let (broker_session_timeout_ms, broker_heartbeat_interval_ms) = broker_session(&raw)?;
        let quorum = QuorumTimings::from_raw(&raw)?;
        let broker_credentials_dir = broker_credentials_dir(&raw, &log_dir)?;
        let connection_bounds = ConnectionBounds::from_raw(&raw, socket_request_max_bytes)?;
        let queued_max_requests = in_range(
            "queued_max_requests",
            raw.queued_max_requests,
            500,
            1,
            1_000_000,
        )? as usize;
        let log = LogSettings::from_raw(&raw)?;
        let fetching = ReplicaFetching::from_raw(&raw)?;
        let client_quotas = ClientQuotaConfig::from_raw(&raw)?;
        let leadership = Leadership::from_raw(&raw)?;
        let scram_bootstrap_file = scram_bootstrap_file(&raw)?;
        let (max_connections, max_connections_per_ip) = connection_limits(&raw)?;
        let groups = groups(&raw, group_session_timeouts_ms)?;
        let fetch_max_bytes = in_range(
            "fetch_max_bytes",
            raw.fetch_max_bytes,
            57_671_680,
            1024,
            i32::MAX as i64,
        )? as usize;
        Ok(BrokerConfig {
            node_id: raw.node_id,
            cluster_id: raw.cluster_id.unwrap_or_else(|| "syncline".to_string()),
            listeners,
            inter_broker_listener_name,
            log_dir,
            is_controller,
            controller_quorum_voters,
            controller_quorum_election_timeout_ms: quorum.election_timeout_ms,
            controller_quorum_request_timeout_ms: quorum.request_timeout_ms,
            controller_quorum_commit_timeout_ms: quorum.commit_timeout_ms,
            controller_socket_timeout_ms: quorum.socket_timeout_ms,
            metadata_snapshot_max_new_records: quorum.snapshot_max_new_records,
            broker_rack: addresses.broker_rack,
            metrics_listen: addresses.metrics_listen,
            outgoing_bind_address: addresses.outgoing_bind_address,
            num_partitions,
            default_replication_factor,
            min_insync_replicas,
            message_max_bytes,
            socket_request_max_bytes,
            queued_max_requests,
            connection_bounds,
            segment_bytes: log.segment_bytes,
            segment_ms: log.segment_ms,
            retention_ms: log.retention_ms,
            retention_bytes: log.retention_bytes,
            retention_check_interval_ms: log.retention_check_interval_ms,
            producer_id_expiration_ms: log.producer_id_expiration_ms,
            flush_messages: log.flush_messages,
            flush_ms: log.flush_ms,
            replica_lag_time_max_ms,
            replica_fetch_wait_max_ms,
            replica_fetch_min_bytes: fetching.min_bytes,
            replica_fetch_max_bytes: fetching.max_bytes,
            replica_fetch_response_max_bytes: fetching.response_max_bytes,
            replica_fetch_backoff_ms: fetching.backoff_ms,
            replica_selector: fetching.selector,
            max_incremental_fetch_session_cache_slots: fetching.session_cache_slots,
            max_incremental_fetch_session_partitions: fetching.session_partitions,
            num_replica_fetchers: fetching.num_fetchers,
            client_quotas,
            leader_replication_throttled_rate: fetching.leader_throttled_rate,
            follower_replication_throttled_rate: fetching.follower_throttled_rate,
            replica_high_watermark_checkpoint_interval_ms: fetching
                .high_watermark_checkpoint_interval_ms,
            unclean_leader_election_enable: raw.unclean_leader_election_enable.unwrap_or(false),
            broker_session_timeout_ms,
            broker_heartbeat_interval_ms,
            controlled_shutdown_enable: raw.controlled_shutdown_enable.unwrap_or(true),
            controlled_shutdown_timeout_ms: leadership.controlled_shutdown_timeout_ms,
            auto_leader_rebalance_enable: raw.auto_leader_rebalance_enable.unwrap_or(true),
            leader_imbalance_check_interval_seconds: leadership.imbalance_check_interval_seconds,
            leader_imbalance_per_broker_percentage: leadership.imbalance_per_broker_percentage,
            #[cfg(feature = "legacy-truncation")]
            truncation_rule: TruncationRule::LeaderEpoch,
            heavy_work_off_runtime: true,
            broker_credentials_dir,
            scram_bootstrap_file,
            ssl,
            sasl_enabled_mechanisms,
            authorizer,
            max_connections,
            max_connections_per_ip,
            auto_create_topics_enable: raw.auto_create_topics_enable.unwrap_or(true),
            auto_create_topics_max_partitions_per_request: in_range(
                "auto_create_topics_max_partitions_per_request",
                raw.auto_create_topics_max_partitions_per_request,
                1_000,
                1,
                i32::MAX as i64,
            )? as usize,
            auto_create_topics_max_cluster_partitions: in_range(
                "auto_create_topics_max_cluster_partitions",
                raw.auto_create_topics_max_cluster_partitions,
                10_000,
                1,
                i32::MAX as i64,
            )? as usize,
            groups,
            fetch_max_bytes,
            #[cfg(feature = "unauthenticated-internal-apis")]
            unauthenticated_internal_apis: false,
        })
    }

    /// Followers truncate by leader epoch (KIP-101/279/595): always, except under
    /// the test-only legacy rule.
    pub fn truncates_by_leader_epoch(&self) -> bool {
        #[cfg(feature = "legacy-truncation")]
        return self.truncation_rule == TruncationRule::LeaderEpoch;
        #[cfg(not(feature = "legacy-truncation"))]
        true
    }

    /// The record bytes a fetch asking for `max_bytes` gets at most: its ask
    /// (<= 0: no limit of its own), capped by `fetch_max_bytes`.
    pub fn fetch_bytes_cap(&self, max_bytes: i32) -> usize {
        match usize::try_from(max_bytes) {
            Ok(asked) if asked > 0 => asked.min(self.fetch_max_bytes),
            _ => self.fetch_max_bytes,
        }
    }

    /// Internal APIs need an authenticated broker: always, except in the tests
    /// that show what a forgery would do without it.
    pub fn authenticates_internal_apis(&self) -> bool {
        #[cfg(feature = "unauthenticated-internal-apis")]
        return !self.unauthenticated_internal_apis;
        #[cfg(not(feature = "unauthenticated-internal-apis"))]
        true
    }

    /// The listener other brokers and the controller reach this broker on.
    pub fn inter_broker(&self) -> &ListenerConfig {
        self.listeners
            .iter()
            .find(|l| l.name == self.inter_broker_listener_name)
            .unwrap_or(&self.listeners[0])
    }

    /// The controller voter with this id, if it is one.
    pub fn voter(&self, node_id: i32) -> Option<&Voter> {
        self.controller_quorum_voters
            .iter()
            .find(|v| v.node_id == node_id)
    }
}

// The steps of `BrokerConfig::from_raw`, in the order it runs them.

/// `listeners`, `kafka_listeners` (with their advertised addresses), each one's
/// security protocol, and the inter-broker listener's name.
fn listeners(raw: &RawConfig) -> Result<(Vec<ListenerConfig>, String), ConfigError> {
    let mut listeners = listener_configs(
        ("listeners", "advertised_listeners"),
        raw.listeners.as_deref().unwrap_or("127.0.0.1:9092"),
        raw.advertised_listeners.as_deref(),
        false,
    )?;
    if let Some(kafka) = raw.kafka_listeners.as_deref() {
        let kafka = listener_configs(
            ("kafka_listeners", "kafka_advertised_listeners"),
            &name_listeners(kafka, DEFAULT_KAFKA_LISTENER_NAME),
            raw.kafka_advertised_listeners
                .as_deref()
                .map(|a| name_listeners(a, DEFAULT_KAFKA_LISTENER_NAME))
                .as_deref(),
            true,
        )?;
        for l in kafka {
            if listeners.iter().any(|o| o.name == l.name) {
                return Err(invalid(
                    "kafka_listeners",
                    format!("listener name `{}` is taken by `listeners`", l.name),
                ));
            }
            listeners.push(l);
        }
    } else if raw.kafka_advertised_listeners.is_some() {
        return Err(invalid(
            "kafka_advertised_listeners",
            "needs kafka_listeners (it names their advertised addresses)",
        ));
    }
    let inter_broker_listener_name = match &raw.inter_broker_listener_name {
        Some(name) if listeners.iter().any(|l| l.name == *name && !l.kafka) => name.clone(),
        Some(name) => {
            return Err(invalid(
                "inter_broker_listener_name",
                format!("`{name}` is not one of `listeners`"),
            ))
        }
        None => listeners[0].name.clone(),
    };
    let map = parse_security_protocol_map(raw.listener_security_protocol_map.as_deref())?;
    for l in &mut listeners {
        l.security_protocol = map
            .iter()
            .find(|(n, _)| *n == l.name)
            .map(|(_, p)| *p)
            .or_else(|| l.name.parse().ok())
            .unwrap_or_default();
    }
    Ok((listeners, inter_broker_listener_name))
}

/// TLS, the SASL mechanisms and the authorizer.
fn security(
    raw: &RawConfig,
    listeners: &[ListenerConfig],
    inter_broker_listener_name: &str,
) -> Result<(Option<SslConfig>, Vec<String>, AuthorizerSettings), ConfigError> {
    let ssl = ssl_config(
        [
            &raw.ssl_certificate_location,
            &raw.ssl_key_location,
            &raw.ssl_ca_location,
            &raw.ssl_client_auth,
            &raw.inter_broker_ssl_client_auth,
        ],
        listeners,
        inter_broker_listener_name,
    )?;
    let sasl_enabled_mechanisms = sasl_mechanisms(raw.sasl_enabled_mechanisms.as_deref())?;
    let authorizer = AuthorizerSettings {
        enabled: raw.authorizer_enable.unwrap_or(false),
        super_users: match raw.super_users.as_deref() {
            Some(s) => syncline_auth::acl::parse_super_users(s)
                .map_err(|e| invalid("super_users", e.to_string()))?,
            None => Vec::new(),
        },
        allow_everyone_if_no_acl_found: raw.allow_everyone_if_no_acl_found.unwrap_or(false),
    };
    Ok((ssl, sasl_enabled_mechanisms, authorizer))
}

/// `log_dirs`: one directory.
fn log_dir(raw: &RawConfig) -> Result<PathBuf, ConfigError> {
    let log_dirs = raw
        .log_dirs
        .clone()
        .unwrap_or_else(|| format!("data/broker-{}", raw.node_id));
    if log_dirs.trim().is_empty() {
        return Err(invalid("log_dirs", "must name a directory"));
    }
    if log_dirs.contains(',') {
        return Err(invalid(
            "log_dirs",
            "only one log directory per broker is supported",
        ));
    }
    Ok(PathBuf::from(log_dirs.trim()))
}

/// `process_roles` and `controller_quorum_voters`: whether this node is a
/// controller voter (it must be one of the voters exactly then), and the voters.
fn controller_role(raw: &RawConfig) -> Result<(bool, Vec<Voter>), ConfigError> {
    let roles: Vec<&str> = raw
        .process_roles
        .as_deref()
        .unwrap_or("broker")
        .split(',')
        .map(str::trim)
        .filter(|r| !r.is_empty())
        .collect();
    for r in &roles {
        if *r != "broker" && *r != "controller" {
            return Err(invalid(
                "process_roles",
                format!("unknown role `{r}` (use \"broker\" or \"broker,controller\")"),
            ));
        }
    }
    if !roles.contains(&"broker") {
        return Err(invalid(
            "process_roles",
            "must include \"broker\" (a controller-only process is not supported yet)",
        ));
    }
    let is_controller = roles.contains(&"controller");
    let voters = parse_voters(raw.controller_quorum_voters.as_deref().unwrap_or(""))?;
    if voters.is_empty() {
        return Err(invalid(
            "controller_quorum_voters",
            "must name the controller voters, e.g. \"1@127.0.0.1:9092,2@127.0.0.1:9093,3@127.0.0.1:9094\"",
        ));
    }
    let listed = voters.iter().any(|v| v.node_id == raw.node_id);
    if is_controller && !listed {
        let ids: Vec<String> = voters.iter().map(|v| v.node_id.to_string()).collect();
        return Err(invalid(
            "controller_quorum_voters",
            format!(
                "this node ({}) has the controller role but is not a voter ({})",
                raw.node_id,
                ids.join(", ")
            ),
        ));
    }
    if !is_controller && listed {
        return Err(invalid(
            "process_roles",
            "this node is a controller voter but lacks the \"controller\" role",
        ));
    }
    Ok((is_controller, voters))
}

/// Where this broker is, for others: `metrics_listen`, `broker_rack`,
/// `outgoing_bind_address`.
struct Addresses {
    metrics_listen: Option<HostPort>,
    broker_rack: Option<String>,
    outgoing_bind_address: Option<std::net::IpAddr>,
}

impl Addresses {
    fn from_raw(raw: &RawConfig) -> Result<Addresses, ConfigError> {
        let metrics_listen = match raw.metrics_listen.as_deref() {
            None | Some("") => None,
            Some(s) => Some(HostPort::parse("metrics_listen", s)?),
        };
        let broker_rack = raw.broker_rack.clone().filter(|r| !r.is_empty());
        let outgoing_bind_address = match raw.outgoing_bind_address.as_deref() {
            None | Some("") => None,
            Some(s) => Some(s.parse().map_err(|_| {
                invalid(
                    "outgoing_bind_address",
                    format!("{s:?} is not an IP address (e.g. \"127.0.0.11\")"),
                )
            })?),
        };
        Ok(Addresses {
            metrics_listen,
            broker_rack,
            outgoing_bind_address,
        })
    }
}

/// `group_min_session_timeout_ms` and `group_max_session_timeout_ms`, in order.
fn group_session_timeouts_ms(raw: &RawConfig) -> Result<(i64, i64), ConfigError> {
    let group_min_session_timeout_ms = in_range(
        "group_min_session_timeout_ms",
        raw.group_min_session_timeout_ms,
        6000,
        1,
        i32::MAX as i64,
    )?;
    let group_max_session_timeout_ms = in_range(
        "group_max_session_timeout_ms",
        raw.group_max_session_timeout_ms,
        1_800_000,
        1,
        i32::MAX as i64,
    )?;
    if group_max_session_timeout_ms < group_min_session_timeout_ms {
        return Err(invalid(
            "group_max_session_timeout_ms",
            format!(
                "{group_max_session_timeout_ms} is below group_min_session_timeout_ms \
                 ({group_min_session_timeout_ms})"
            ),
        ));
    }
    Ok((group_min_session_timeout_ms, group_max_session_timeout_ms))
}

/// `num_partitions`, `default_replication_factor` and `min_insync_replicas`.
fn topic_defaults(raw: &RawConfig) -> Result<(i32, i32, i32), ConfigError> {
    let num_partitions = in_range(
        "num_partitions",
        raw.num_partitions.map(i64::from),
        1,
        1,
        100_000,
    )? as i32;
    let default_replication_factor = in_range(
        "default_replication_factor",
        raw.default_replication_factor.map(i64::from),
        1,
        1,
        i16::MAX as i64,
    )? as i32;
    let min_insync_replicas = in_range(
        "min_insync_replicas",
        raw.min_insync_replicas.map(i64::from),
        1,
        1,
        i16::MAX as i64,
    )? as i32;
    Ok((
        num_partitions,
        default_replication_factor,
        min_insync_replicas,
    ))
}

/// `socket_request_max_bytes` and `message_max_bytes`, the second below the first.
fn request_sizes(raw: &RawConfig) -> Result<(usize, usize), ConfigError> {
    let socket_request_max_bytes = in_range(
        "socket_request_max_bytes",
        raw.socket_request_max_bytes,
        104_857_600,
        1024,
        i32::MAX as i64,
    )? as usize;
    let message_max_bytes = in_range(
        "message_max_bytes",
        raw.message_max_bytes,
        1_048_588,
        64,
        i32::MAX as i64,
    )? as usize;
    if message_max_bytes >= socket_request_max_bytes {
        return Err(invalid(
            "message_max_bytes",
            "must be smaller than socket_request_max_bytes",
        ));
    }
    Ok((socket_request_max_bytes, message_max_bytes))
}

/// `replica_lag_time_max_ms` and `replica_fetch_wait_max_ms`, the second below
/// the first.
fn replica_lag(raw: &RawConfig) -> Result<(u64, u64), ConfigError> {
    let replica_lag_time_max_ms = in_range(
        "replica_lag_time_max_ms",
        raw.replica_lag_time_max_ms,
        30_000,
        1,
        i32::MAX as i64,
    )? as u64;
    let replica_fetch_wait_max_ms = in_range(
        "replica_fetch_wait_max_ms",
        raw.replica_fetch_wait_max_ms,
        500,
        0,
        i32::MAX as i64,
    )? as u64;
    if replica_fetch_wait_max_ms >= replica_lag_time_max_ms {
        // As Kafka: otherwise an idle follower looks out of sync.
        return Err(invalid(
            "replica_fetch_wait_max_ms",
            format!(
                "{replica_fetch_wait_max_ms} must be smaller than replica_lag_time_max_ms \
                 ({replica_lag_time_max_ms}), or idle followers leave the ISR"
            ),
        ));
    }
    Ok((replica_lag_time_max_ms, replica_fetch_wait_max_ms))
}

/// `broker_session_timeout_ms` and `broker_heartbeat_interval_ms`, the second
/// below the first.
fn broker_session(raw: &RawConfig) -> Result<(u64, u64), ConfigError> {
    let broker_session_timeout_ms = in_range(
        "broker_session_timeout_ms",
        raw.broker_session_timeout_ms,
        9_000,
        1,
        i32::MAX as i64,
    )? as u64;
    let broker_heartbeat_interval_ms = in_range(
        "broker_heartbeat_interval_ms",
        raw.broker_heartbeat_interval_ms,
        2_000,
        1,
        i32::MAX as i64,
    )? as u64;
    if broker_heartbeat_interval_ms >= broker_session_timeout_ms {
        return Err(invalid(
            "broker_heartbeat_interval_ms",
            "must be smaller than broker_session_timeout_ms",
        ));
    }
    Ok((broker_session_timeout_ms, broker_heartbeat_interval_ms))
}

/// The controller quorum's timings: `controller_quorum_*_ms`,
/// `controller_socket_timeout_ms`, `metadata_snapshot_max_new_records`.
struct QuorumTimings {
    election_timeout_ms: u64,
    request_timeout_ms: u64,
    commit_timeout_ms: u64,
    socket_timeout_ms: u64,
    snapshot_max_new_records: u64,
}

impl QuorumTimings {
    fn from_raw(raw: &RawConfig) -> Result<QuorumTimings, ConfigError> {
        Ok(QuorumTimings {
            election_timeout_ms: in_range(
                "controller_quorum_election_timeout_ms",
                raw.controller_quorum_election_timeout_ms,
                1_000,
                50,
                600_000,
            )? as u64,
            request_timeout_ms: in_range(
                "controller_quorum_request_timeout_ms",
                raw.controller_quorum_request_timeout_ms,
                2_000,
                10,
                600_000,
            )? as u64,
            commit_timeout_ms: in_range(
                "controller_quorum_commit_timeout_ms",
                raw.controller_quorum_commit_timeout_ms,
                5_000,
                10,
                600_000,
            )? as u64,
            socket_timeout_ms: in_range(
                "controller_socket_timeout_ms",
                raw.controller_socket_timeout_ms,
                10_000,
                10,
                600_000,
            )? as u64,
            snapshot_max_new_records: in_range(
                "metadata_snapshot_max_new_records",
                raw.metadata_snapshot_max_new_records,
                1_000,
                1,
                i32::MAX as i64,
            )? as u64,
        })
    }
}

/// `broker_credentials_dir`: by default `credentials` beside the log directory.
fn broker_credentials_dir(raw: &RawConfig, log_dir: &Path) -> Result<PathBuf, ConfigError> {
    Ok(match raw.broker_credentials_dir.as_deref().map(str::trim) {
        Some("") => return Err(invalid("broker_credentials_dir", "must not be empty")),
        Some(dir) => PathBuf::from(dir),
        None => log_dir
            .parent()
            .filter(|p| !p.as_os_str().is_empty())
            .unwrap_or(Path::new("."))
            .join("credentials"),
    })
}

/// The partition logs' defaults: segments, retention, producer ids, flushes.
struct LogSettings {
    segment_bytes: u64,
    segment_ms: Option<u64>,
    retention_ms: i64,
    retention_bytes: i64,
    retention_check_interval_ms: u64,
    producer_id_expiration_ms: i64,
    flush_messages: u64,
    flush_ms: u64,
}

impl LogSettings {
    fn from_raw(raw: &RawConfig) -> Result<LogSettings, ConfigError> {
        Ok(LogSettings {
            segment_bytes: in_range(
                "segment_bytes",
                raw.segment_bytes,
                1_073_741_824,
                1024,
                i32::MAX as i64,
            )? as u64,
            segment_ms: match raw.segment_ms {
                None => Some(604_800_000),
                Some(-1) => None,
                Some(v) if v >= 1 => Some(v as u64),
                Some(v) => {
                    return Err(invalid(
                        "segment_ms",
                        format!("{v} must be -1 or at least 1"),
                    ))
                }
            },
            retention_ms: in_range("retention_ms", raw.retention_ms, 604_800_000, -1, i64::MAX)?,
            retention_bytes: in_range("retention_bytes", raw.retention_bytes, -1, -1, i64::MAX)?,
            retention_check_interval_ms: in_range(
                "retention_check_interval_ms",
                raw.retention_check_interval_ms,
                300_000,
                1,
                i64::MAX,
            )? as u64,
            producer_id_expiration_ms: in_range(
                "producer_id_expiration_ms",
                raw.producer_id_expiration_ms,
                86_400_000,
                1,
                i64::MAX,
            )?,
            flush_messages: never_or_positive("flush_messages", raw.flush_messages)?,
            flush_ms: never_or_positive("flush_ms", raw.flush_ms)?,
        })
    }
}

/// What bounds one connection besides its requests in flight and its fetch
/// budget.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ConnectionBounds {
    /// Bytes of answers a connection may have queued and not yet written
    /// (`connection_max_unwritten_bytes`): past it the broker reads no request
    /// of that connection until the client reads. Fetch records sent from the
    /// files do not count (the fetch budget holds them). Default 1048576.
    pub max_unwritten_bytes: usize,
    /// A connection that neither sent a request nor was sent an answer for
    /// this long is closed (Kafka's `connections.max.idle.ms`). Default
    /// 600000 (10 minutes).
    pub max_idle: std::time::Duration,
    /// On a SASL listener, a connection that has not authenticated this long
    /// after it was accepted is closed (`sasl_authentication_timeout_ms`).
    /// More than the 10 s a login may wait for a broker that just started to
    /// hear of its users. Default 30000.
    pub sasl_authentication_timeout: std::time::Duration,
    /// On a SASL listener, the largest frame read before the connection
    /// authenticated (Kafka's `sasl.server.max.receive.size`); at most
    /// `socket_request_max_bytes`. Default 524288.
    pub sasl_max_receive_bytes: usize,
}

impl ConnectionBounds {
    fn from_raw(raw: &RawConfig, max_frame: usize) -> Result<ConnectionBounds, ConfigError> {
        let ms = |key, value, default, min| {
            in_range(key, value, default, min, i32::MAX as i64)
                .map(|v| std::time::Duration::from_millis(v as u64))
        };
        let sasl_max_receive_bytes = in_range(
            "sasl_server_max_receive_size",
            raw.sasl_server_max_receive_size,
            524_288.min(max_frame as i64),
            1024,
            max_frame as i64,
        )? as usize;
        Ok(ConnectionBounds {
            max_unwritten_bytes: in_range(
                "connection_max_unwritten_bytes",
                raw.connection_max_unwritten_bytes,
                1_048_576,
                1024,
                i32::MAX as i64,
            )? as usize,
            max_idle: ms(
                "connections_max_idle_ms",
                raw.connections_max_idle_ms,
                600_000,
                100,
            )?,
            sasl_authentication_timeout: ms(
                "sasl_authentication_timeout_ms",
                raw.sasl_authentication_timeout_ms,
                30_000,
                100,
            )?,
            sasl_max_receive_bytes,
        })
    }
}

/// How followers fetch (`replica_fetch_*`, the fetchers, the throttles) and
/// which replica serves consumers.
struct ReplicaFetching {
    min_bytes: u32,
    max_bytes: u32,
    response_max_bytes: u32,
    backoff_ms: u64,
    selector: ReplicaSelector,
    session_cache_slots: usize,
    session_partitions: usize,
    num_fetchers: usize,
    leader_throttled_rate: Option<u64>,
    follower_throttled_rate: Option<u64>,
    high_watermark_checkpoint_interval_ms: u64,
}

impl ReplicaFetching {
    fn from_raw(raw: &RawConfig) -> Result<ReplicaFetching, ConfigError> {
        Ok(ReplicaFetching {
            min_bytes: in_range(
                "replica_fetch_min_bytes",
                raw.replica_fetch_min_bytes,
                1,
                1,
                i32::MAX as i64,
            )? as u32,
            max_bytes: in_range(
                "replica_fetch_max_bytes",
                raw.replica_fetch_max_bytes,
                1_048_576,
                1024,
                i32::MAX as i64,
            )? as u32,
            response_max_bytes: in_range(
                "replica_fetch_response_max_bytes",
                raw.replica_fetch_response_max_bytes,
                10_485_760,
                1024,
                i32::MAX as i64,
            )? as u32,
            backoff_ms: in_range(
                "replica_fetch_backoff_ms",
                raw.replica_fetch_backoff_ms,
                1_000,
                0,
                i32::MAX as i64,
            )? as u64,
            selector: match raw.replica_selector.as_deref() {
                None | Some("leader") => ReplicaSelector::Leader,
                Some("rack_aware") => ReplicaSelector::RackAware,
                Some(other) => {
                    return Err(invalid(
                        "replica_selector",
                        format!("`{other}` is not \"leader\" or \"rack_aware\""),
                    ))
                }
            },
            session_cache_slots: in_range(
                "max_incremental_fetch_session_cache_slots",
                raw.max_incremental_fetch_session_cache_slots,
                1000,
                0,
                1_000_000,
            )? as usize,
            session_partitions: in_range(
                "max_incremental_fetch_session_partitions",
                raw.max_incremental_fetch_session_partitions,
                10_000,
                1,
                10_000_000,
            )? as usize,
            num_fetchers: in_range("num_replica_fetchers", raw.num_replica_fetchers, 1, 1, 64)?
                as usize,
            leader_throttled_rate: throttled_rate(
                "leader_replication_throttled_rate",
                raw.leader_replication_throttled_rate,
            )?,
            follower_throttled_rate: throttled_rate(
                "follower_replication_throttled_rate",
                raw.follower_replication_throttled_rate,
            )?,
            high_watermark_checkpoint_interval_ms: in_range(
                "replica_high_watermark_checkpoint_interval_ms",
                raw.replica_high_watermark_checkpoint_interval_ms,
                5_000,
                1,
                i32::MAX as i64,
            )? as u64,
        })
    }
}

/// Moving leaderships: the controlled shutdown's bound and the automatic
/// rebalance's schedule and threshold.
struct Leadership {
    controlled_shutdown_timeout_ms: u64,
    imbalance_check_interval_seconds: u64,
    imbalance_per_broker_percentage: u32,
}

impl Leadership {
    fn from_raw(raw: &RawConfig) -> Result<Leadership, ConfigError> {
        Ok(Leadership {
            controlled_shutdown_timeout_ms: in_range(
                "controlled_shutdown_timeout_ms",
                raw.controlled_shutdown_timeout_ms,
                30_000,
                0,
                i32::MAX as i64,
            )? as u64,
            imbalance_check_interval_seconds: in_range(
                "leader_imbalance_check_interval_seconds",
                raw.leader_imbalance_check_interval_seconds,
                300,
                1,
                i32::MAX as i64,
            )? as u64,
            imbalance_per_broker_percentage: in_range(
                "leader_imbalance_per_broker_percentage",
                raw.leader_imbalance_per_broker_percentage,
                10,
                0,
                100,
            )? as u32,
        })
    }
}

/// `scram_bootstrap_file`, if given.
fn scram_bootstrap_file(raw: &RawConfig) -> Result<Option<PathBuf>, ConfigError> {
    match raw.scram_bootstrap_file.as_deref().map(str::trim) {
        Some("") => Err(invalid("scram_bootstrap_file", "must not be empty")),
        path => Ok(path.map(PathBuf::from)),
    }
}

/// `max_connections` and `max_connections_per_ip`.
fn connection_limits(raw: &RawConfig) -> Result<(usize, usize), ConfigError> {
    let max_connections = in_range(
        "max_connections",
        raw.max_connections,
        10_000,
        1,
        i32::MAX as i64,
    )? as usize;
    let max_connections_per_ip = in_range(
        "max_connections_per_ip",
        raw.max_connections_per_ip,
        i32::MAX as i64,
        1,
        i32::MAX as i64,
    )? as usize;
    Ok((max_connections, max_connections_per_ip))
}

/// The consumer groups' settings; `session_timeouts_ms` from
/// [`group_session_timeouts_ms`].
fn groups(raw: &RawConfig, session_timeouts_ms: (i64, i64)) -> Result<GroupsConfig, ConfigError> {
    let (group_min_session_timeout_ms, group_max_session_timeout_ms) = session_timeouts_ms;
    Ok(GroupsConfig {
        offsets_topic_num_partitions: in_range(
            "offsets_topic_num_partitions",
            raw.offsets_topic_num_partitions,
            50,
            1,
            10_000,
        )? as i32,
        offsets_topic_replication_factor: in_range(
            "offsets_topic_replication_factor",
            raw.offsets_topic_replication_factor,
            3,
            1,
            i16::MAX as i64,
        )? as i32,
        offsets_topic_eager_creation: raw.offsets_topic_eager_creation.unwrap_or(false),
        offsets_retention_minutes: in_range(
            "offsets_retention_minutes",
            raw.offsets_retention_minutes,
            10_080,
            1,
            i32::MAX as i64,
        )?,
        offset_metadata_max_bytes: in_range(
            "offset_metadata_max_bytes",
            raw.offset_metadata_max_bytes,
            4096,
            0,
            i32::MAX as i64,
        )? as usize,
        group_min_session_timeout_ms: group_min_session_timeout_ms as i32,
        group_max_session_timeout_ms: group_max_session_timeout_ms as i32,
        group_initial_rebalance_delay_ms: in_range(
            "group_initial_rebalance_delay_ms",
            raw.group_initial_rebalance_delay_ms,
            3000,
            0,
            i32::MAX as i64,
        )? as i32,
        group_max_size: in_range(
            "group_max_size",
            raw.group_max_size,
            i32::MAX as i64,
            1,
            i32::MAX as i64,
        )? as usize,
    })
}

fn parse_voters(s: &str) -> Result<Vec<Voter>, ConfigError> {
    const KEY: &str = "controller_quorum_voters";
    s.split(',')
        .map(str::trim)
        .filter(|v| !v.is_empty())
        .map(|v| {
            let (id, addr) = v.split_once('@').ok_or_else(|| {
                invalid(
                    KEY,
                    format!("`{v}` is not id@host:port (e.g. \"1@127.0.0.1:9092\")"),
                )
            })?;
            let node_id = id
                .parse::<i32>()
                .ok()
                .filter(|n| *n >= 0)
                .ok_or_else(|| invalid(KEY, format!("`{id}` is not a node id")))?;
            Ok(Voter {
                node_id,
                address: HostPort::parse(KEY, addr)?,
            })
        })
        .try_fold(Vec::new(), |mut voters: Vec<Voter>, v| {
            let v = v?;
            if voters.iter().any(|w| w.node_id == v.node_id) {
                return Err(invalid(KEY, format!("voter {} is listed twice", v.node_id)));
            }
            voters.push(v);
            Ok(voters)
        })
}

#[cfg(test)]
mod tests {
    use super::*;

    const MINIMAL: &str = r#"
        node_id = 1
        process_roles = "broker,controller"
        controller_quorum_voters = "1@127.0.0.1:9092"
    "#;

    #[test]
    fn defaults_are_kafkas() {
        let c = BrokerConfig::parse(MINIMAL).unwrap();
        assert_eq!(c.listeners.len(), 1);
        assert_eq!(c.inter_broker().name, DEFAULT_LISTENER_NAME);
        assert_eq!(c.inter_broker().bind.to_string(), "127.0.0.1:9092");
        assert_eq!(c.inter_broker().advertised, c.inter_broker().bind);
        assert!(c.is_controller);
        assert_eq!(c.replica_lag_time_max_ms, 30_000);
        assert_eq!(c.replica_fetch_wait_max_ms, 500);
        assert_eq!(c.replica_fetch_max_bytes, 1_048_576);
        assert_eq!(c.min_insync_replicas, 1);
        assert_eq!(c.broker_session_timeout_ms, 9_000);
        assert_eq!(c.broker_heartbeat_interval_ms, 2_000);
        assert_eq!(c.flush_messages, u64::MAX);
        assert_eq!(c.outgoing_bind_address, None);
        assert!(!c.unclean_leader_election_enable);
        assert_eq!(c.log_dir, PathBuf::from("data/broker-1"));
        assert_eq!(c.leader_replication_throttled_rate, None);
        assert_eq!(c.follower_replication_throttled_rate, None);
        assert_eq!(c.max_incremental_fetch_session_cache_slots, 1_000);
        assert_eq!(c.max_incremental_fetch_session_partitions, 10_000);
    }

    #[test]
    fn connection_bounds_default_to_kafkas_and_the_pre_login_frame_fits_in_a_frame() {
        let parse = |extra: &str| BrokerConfig::parse(&format!("{MINIMAL}\n{extra}"));
        let c = parse("").unwrap().connection_bounds;
        assert_eq!(c.max_unwritten_bytes, 1_048_576);
        assert_eq!(c.max_idle, std::time::Duration::from_secs(600));
        assert_eq!(
            c.sasl_authentication_timeout,
            std::time::Duration::from_secs(30)
        );
        assert_eq!(c.sasl_max_receive_bytes, 524_288);
        // A smaller frame cap lowers the pre-login one's default with it.
        let c = parse("socket_request_max_bytes = 100000\nmessage_max_bytes = 50000").unwrap();
        assert_eq!(c.connection_bounds.sasl_max_receive_bytes, 100_000);
        for bad in [
            "socket_request_max_bytes = 100000\nmessage_max_bytes = 50000\nsasl_server_max_receive_size = 100001",
            "connection_max_unwritten_bytes = 0",
            "connections_max_idle_ms = 0",
            "sasl_authentication_timeout_ms = -1",
        ] {
            let key = bad.lines().last().unwrap().split(' ').next().unwrap();
            let err = parse(bad).unwrap_err().to_string();
            assert!(err.contains(key), "{bad}: {err}");
        }
    }

    #[test]
    fn client_quotas_are_rates_per_client_id_or_unlimited() {
        let parse = |extra: &str| BrokerConfig::parse(&format!("{MINIMAL}\n{extra}"));
        let c = parse("").unwrap().client_quotas;
        assert_eq!(
            c,
            ClientQuotaConfig {
                producer_default: None,
                consumer_default: None,
                window_num: 11,
                window_size_seconds: 1,
            }
        );
        let c = parse("quota_producer_default = 1048576\nquota_consumer_default = 9223372036854775807\nquota_window_num = 2")
            .unwrap()
            .client_quotas;
        assert_eq!(
            (c.producer_default, c.consumer_default, c.window_num),
            (Some(1_048_576), None, 2)
        );
        for bad in [
            "quota_producer_default = 0",
            "quota_consumer_default = -1",
            "quota_window_num = 1",
            "quota_window_size_seconds = 0",
        ] {
            let err = parse(bad).unwrap_err().to_string();
            let key = bad.split(' ').next().unwrap();
            assert!(err.contains(key), "{bad}: {err}");
        }
    }

    #[test]
    fn replication_throttles_are_rates_or_kafkas_unthrottled_maximum() {
        let parse = |extra: &str| BrokerConfig::parse(&format!("{MINIMAL}\n{extra}"));
        let c = parse("leader_replication_throttled_rate = 1048576").unwrap();
        assert_eq!(c.leader_replication_throttled_rate, Some(1_048_576));
        let c = parse("follower_replication_throttled_rate = 9223372036854775807").unwrap();
        assert_eq!(c.follower_replication_throttled_rate, None);
        for bad in ["0", "-1"] {
            let err = parse(&format!("follower_replication_throttled_rate = {bad}"))
                .unwrap_err()
                .to_string();
            assert!(err.contains("follower_replication_throttled_rate"), "{err}");
        }
    }

    #[test]
    fn unknown_key_is_named() {
        let err = BrokerConfig::parse(&format!("{MINIMAL}\nreplica_lag_time_max = 5")).unwrap_err();
        assert!(err.to_string().contains("replica_lag_time_max"), "{err}");
    }

    #[test]
    fn invalid_values_name_the_key() {
        for (extra, key) in [
            ("min_insync_replicas = 0", "min_insync_replicas"),
            ("listeners = \"nohost\"", "listeners"),
            (
                "replica_fetch_wait_max_ms = 40000",
                "replica_fetch_wait_max_ms",
            ),
            ("segment_bytes = 10", "segment_bytes"),
            ("flush_messages = 0", "flush_messages"),
            (
                "outgoing_bind_address = \"127.0.0.1:9\"",
                "outgoing_bind_address",
            ),
            ("process_roles = \"broker,toaster\"", "process_roles"),
            ("node_id_x = 3", "node_id_x"),
            ("num_partitions = \"three\"", "num_partitions"),
            (
                "max_incremental_fetch_session_partitions = 0",
                "max_incremental_fetch_session_partitions",
            ),
            (
                "auto_create_topics_max_partitions_per_request = 0",
                "auto_create_topics_max_partitions_per_request",
            ),
            (
                "auto_create_topics_max_cluster_partitions = -1",
                "auto_create_topics_max_cluster_partitions",
            ),
        ] {
            let text = format!("{MINIMAL}\n{extra}");
            let err = BrokerConfig::parse(&text).unwrap_err().to_string();
            assert!(err.contains(key), "{extra}: {err}");
        }
    }

    #[test]
    fn controller_role_must_match_voters() {
        let text = r#"
            node_id = 2
            process_roles = "broker,controller"
            controller_quorum_voters = "1@127.0.0.1:9092"
        "#;
        let err = BrokerConfig::parse(text).unwrap_err().to_string();
        assert!(err.contains("controller_quorum_voters"), "{err}");
        // A voter without the role.
        let text = r#"
            node_id = 2
            controller_quorum_voters = "1@127.0.0.1:9092,2@127.0.0.1:9093,3@127.0.0.1:9094"
        "#;
        let err = BrokerConfig::parse(text).unwrap_err().to_string();
        assert!(
            err.contains("process_roles") && err.contains("voter"),
            "{err}"
        );
    }

    #[test]
    fn a_quorum_of_three_voters_and_its_timers() {
        let text = r#"
            node_id = 2
            process_roles = "broker,controller"
            controller_quorum_voters = "1@127.0.0.1:9092, 2@127.0.0.1:9093 ,3@h3:9094"
            controller_quorum_election_timeout_ms = 500
            metadata_snapshot_max_new_records = 10
        "#;
        let c = BrokerConfig::parse(text).unwrap();
        assert!(c.is_controller);
        let ids: Vec<i32> = c
            .controller_quorum_voters
            .iter()
            .map(|v| v.node_id)
            .collect();
        assert_eq!(ids, vec![1, 2, 3]);
        assert_eq!(c.voter(3).unwrap().address.to_string(), "h3:9094");
        assert!(c.voter(4).is_none());
        assert_eq!(c.controller_quorum_election_timeout_ms, 500);
        assert_eq!(c.controller_quorum_request_timeout_ms, 2_000);
        assert_eq!(c.controller_quorum_commit_timeout_ms, 5_000);
        assert_eq!(c.controller_socket_timeout_ms, 10_000);
        assert_eq!(c.metadata_snapshot_max_new_records, 10);
        // A broker that is not a voter follows the quorum all the same.
        let plain = BrokerConfig::parse(
            "node_id = 4\ncontroller_quorum_voters = \"1@127.0.0.1:9092,2@127.0.0.1:9093\"\n",
        )
        .unwrap();
        assert!(!plain.is_controller);
        for (voters, expect) in [
            ("1@a:1,1@b:2", "listed twice"),
            ("1@a:1,x@b:2", "not a node id"),
            ("1@a:1,2", "not id@host:port"),
        ] {
            let err = BrokerConfig::parse(&format!(
                "node_id = 1\nprocess_roles = \"broker,controller\"\ncontroller_quorum_voters = \"{voters}\"\n"
            ))
            .unwrap_err()
            .to_string();
            assert!(err.contains(expect), "{voters}: {err}");
        }
    }

    #[test]
    fn named_listeners() {
        let text = format!(
            "{MINIMAL}\nlisteners = \"INTERNAL://0.0.0.0:19092,EXTERNAL://0.0.0.0:9092\"\n\
             advertised_listeners = \"INTERNAL://broker-1:19092,EXTERNAL://127.0.0.1:9092\"\n\
             inter_broker_listener_name = \"INTERNAL\"\n"
        );
        let c = BrokerConfig::parse(&text).unwrap();
        assert_eq!(c.listeners.len(), 2);
        assert_eq!(c.inter_broker().advertised.to_string(), "broker-1:19092");
        assert_eq!(c.listeners[1].advertised.to_string(), "127.0.0.1:9092");
        for (extra, key) in [
            ("listeners = \"A://h:1,A://h:2\"", "listeners"),
            (
                "listeners = \"A://h:1\"\nadvertised_listeners = \"B://h:1\"",
                "advertised_listeners",
            ),
            (
                "listeners = \"A://h:1\"\ninter_broker_listener_name = \"B\"",
                "inter_broker_listener_name",
            ),
        ] {
            let err = BrokerConfig::parse(&format!("{MINIMAL}\n{extra}"))
                .unwrap_err()
                .to_string();
            assert!(err.contains(key), "{extra}: {err}");
        }
    }

    #[test]
    fn kafka_listeners_are_listeners_of_kafkas_protocol() {
        let c = BrokerConfig::parse(&format!(
            "{MINIMAL}\nlisteners = \"127.0.0.1:9092\"\n\
             kafka_listeners = \"127.0.0.1:29092,OUTSIDE://0.0.0.0:29192\"\n\
             kafka_advertised_listeners = \"OUTSIDE://kafka.example:29192\"\n"
        ))
        .unwrap();
        let summary: Vec<(&str, String, bool)> = c
            .listeners
            .iter()
            .map(|l| (l.name.as_str(), l.advertised.to_string(), l.kafka))
            .collect();
        assert_eq!(
            summary,
            [
                ("PLAINTEXT", "127.0.0.1:9092".to_string(), false),
                ("KAFKA", "127.0.0.1:29092".to_string(), true),
                ("OUTSIDE", "kafka.example:29192".to_string(), true),
            ]
        );
        assert_eq!(c.inter_broker().name, "PLAINTEXT");
        for (extra, key, why) in [
            (
                "kafka_listeners = \"PLAINTEXT://h:1\"",
                "kafka_listeners",
                "taken",
            ),
            (
                "kafka_advertised_listeners = \"h:1\"",
                "kafka_advertised_listeners",
                "needs kafka_listeners",
            ),
            (
                "kafka_listeners = \"0.0.0.0:29092\"",
                "kafka_advertised_listeners",
                "wildcard",
            ),
            (
                "kafka_listeners = \"h:1\"\ninter_broker_listener_name = \"KAFKA\"",
                "inter_broker_listener_name",
                "",
            ),
        ] {
            let err = BrokerConfig::parse(&format!("{MINIMAL}\n{extra}"))
                .unwrap_err()
                .to_string();
            assert!(err.contains(key) && err.contains(why), "{extra}: {err}");
        }
    }

    #[test]
    fn scram_bootstrap_file_is_a_path_or_unset() {
        assert_eq!(
            BrokerConfig::parse(MINIMAL).unwrap().scram_bootstrap_file,
            None
        );
        let c = BrokerConfig::parse(&format!(
            "{MINIMAL}\nscram_bootstrap_file = \"/etc/users\"\n"
        ))
        .unwrap();
        assert_eq!(c.scram_bootstrap_file, Some(PathBuf::from("/etc/users")));
        let e = BrokerConfig::parse(&format!("{MINIMAL}\nscram_bootstrap_file = \" \"\n"))
            .unwrap_err()
            .to_string();
        assert!(e.contains("scram_bootstrap_file"), "{e}");
    }

    #[test]
    fn listeners_get_their_security_protocols() {
        let tls = "ssl_certificate_location = \"/t/b.pem\"\nssl_key_location = \"/t/b.key\"\nssl_ca_location = \"/t/ca.pem\"\n";
        let c = BrokerConfig::parse(&format!(
            "{MINIMAL}\nlisteners = \"CLIENT://127.0.0.1:9092,INTERNAL://127.0.0.1:19092,SSL://127.0.0.1:9192\"\n\
             inter_broker_listener_name = \"INTERNAL\"\nkafka_listeners = \"127.0.0.1:29092\"\n\
             listener_security_protocol_map = \"CLIENT:SASL_SSL, INTERNAL:SSL,KAFKA:SASL_PLAINTEXT\"\n{tls}\
             authorizer_enable = true\nsuper_users = \"User:admin;User:ops\"\n"
        ))
        .unwrap();
        let protocols: Vec<(&str, SecurityProtocol)> = c
            .listeners
            .iter()
            .map(|l| (l.name.as_str(), l.security_protocol))
            .collect();
        assert_eq!(
            protocols,
            [
                ("CLIENT", SecurityProtocol::SaslSsl),
                ("INTERNAL", SecurityProtocol::Ssl),
                // Not in the map: the protocol of its name.
                ("SSL", SecurityProtocol::Ssl),
                ("KAFKA", SecurityProtocol::SaslPlaintext),
            ]
        );
        let ssl = c.ssl.as_ref().expect("TLS settings");
        assert_eq!(ssl.client_auth, SslClientAuth::None);
        assert_eq!(ssl.inter_broker_client_auth, SslClientAuth::Required);
        assert_eq!(c.authorizer.super_users, ["User:admin", "User:ops"]);
        assert!(c.authorizer.enabled && !c.authorizer.allow_everyone_if_no_acl_found);
        assert_eq!(
            c.sasl_enabled_mechanisms,
            ["SCRAM-SHA-256", "SCRAM-SHA-512", "PLAIN"]
        );
        // The defaults: plaintext, no TLS, no authorizer.
        let plain = BrokerConfig::parse(MINIMAL).unwrap();
        assert_eq!(
            plain.listeners[0].security_protocol,
            SecurityProtocol::Plaintext
        );
        assert!(plain.ssl.is_none() && !plain.authorizer.enabled);

        for (extra, key, why) in [
            (
                "listener_security_protocol_map = \"PLAINTEXT:TLS\"".to_string(),
                "listener_security_protocol_map",
                "not a security protocol",
            ),
            (
                "listener_security_protocol_map = \"PLAINTEXT\"".to_string(),
                "listener_security_protocol_map",
                "NAME:PROTOCOL",
            ),
            (
                "listener_security_protocol_map = \"PLAINTEXT:SSL\"".to_string(),
                "ssl_certificate_location",
                "listener `PLAINTEXT` is SSL",
            ),
            (
                "ssl_certificate_location = \"/t/b.pem\"".to_string(),
                "ssl_key_location",
                "go together",
            ),
            (
                format!("{tls}ssl_client_auth = \"maybe\""),
                "ssl_client_auth",
                "none, requested or required",
            ),
            (
                "listener_security_protocol_map = \"PLAINTEXT:SSL\"\nssl_certificate_location = \"/t/b.pem\"\nssl_key_location = \"/t/b.key\"".to_string(),
                "ssl_ca_location",
                "inter-broker listener",
            ),
            (
                "sasl_enabled_mechanisms = \"GSSAPI\"".to_string(),
                "sasl_enabled_mechanisms",
                "not a supported mechanism",
            ),
            (
                "super_users = \"admin\"".to_string(),
                "super_users",
                "",
            ),
        ] {
            let err = BrokerConfig::parse(&format!("{MINIMAL}\n{extra}"))
                .unwrap_err()
                .to_string();
            assert!(err.contains(key) && err.contains(why), "{extra}: {err}");
        }
    }

    #[test]
    fn wildcard_listener_needs_advertised_address() {
        let text = format!("{MINIMAL}\nlisteners = \"0.0.0.0:9092\"");
        let err = BrokerConfig::parse(&text).unwrap_err().to_string();
        assert!(err.contains("advertised_listeners"), "{err}");
    }

    #[test]
    fn shipped_configs_are_valid() {
        for (name, text) in [
            (
                "config/broker-1.toml",
                include_str!("../../../config/broker-1.toml"),
            ),
            (
                "config/broker-2.toml",
                include_str!("../../../config/broker-2.toml"),
            ),
            (
                "config/broker-3.toml",
                include_str!("../../../config/broker-3.toml"),
            ),
            (
                "docker/broker-1.toml",
                include_str!("../../../docker/broker-1.toml"),
            ),
            (
                "docker/broker-2.toml",
                include_str!("../../../docker/broker-2.toml"),
            ),
            (
                "docker/broker-3.toml",
                include_str!("../../../docker/broker-3.toml"),
            ),
        ] {
            let c = BrokerConfig::parse(text).unwrap_or_else(|e| panic!("{name}: {e}"));
            // Combined mode: every shipped node is a broker and one of the same
            // three controller voters.
            assert!(c.is_controller, "{name}");
            let voters: Vec<i32> = c
                .controller_quorum_voters
                .iter()
                .map(|v| v.node_id)
                .collect();
            assert_eq!(voters, [1, 2, 3], "{name}");
        }
    }
}
