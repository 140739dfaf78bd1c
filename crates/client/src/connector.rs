//! Opening a connection as a [`ClientConfig`] says: TCP, then TLS
//! (`SSL`, `SASL_SSL`), then SASL (`SASL_PLAINTEXT`, `SASL_SSL`), then a
//! pipelined [`Connection`]. The TLS configuration and the SASL credential are
//! made once, when the [`Connector`] is, and shared by every connection.

use std::sync::Arc;
use std::time::Duration;

use tokio::io::{AsyncRead, AsyncWrite};

use crate::config::ClientConfig;
use crate::connection::Connection;
use crate::error::ClientError;
use crate::sasl::{self, UserCredential};

/// Opens connections to brokers with a client configuration's security
/// settings. Cheap to clone.
#[derive(Debug, Clone)]
pub struct Connector {
    client_id: Arc<str>,
    connect_timeout: Duration,
    /// Bounds the SASL exchange.
    request_timeout: Duration,
    max_frame_bytes: usize,
    tls: Option<Arc<syncline_tls::ClientConfig>>,
    sasl: Option<UserCredential>,
}

impl Connector {
    /// Reads the TLS files (`ssl.*`) and prepares the SASL credential; a file
    /// that is missing or wrong is an error now rather than at the first
    /// connection.
    pub fn new(config: &ClientConfig) -> Result<Connector, ClientError> {
        config.validate()?;
        let protocol = config.security_protocol;
        let tls = if protocol.is_tls() {
            Some(
                syncline_tls::client_config(
                    config.ssl_ca_location.as_deref(),
                    config.ssl_certificate_location.as_deref(),
                    config.ssl_key_location.as_deref(),
                )
                .map_err(|source| ClientError::Tls {
                    addr: String::new(),
                    source,
                })?,
            )
        } else {
            None
        };
        let sasl = match (
            protocol.is_sasl(),
            &config.sasl_username,
            &config.sasl_password,
        ) {
            (true, Some(username), Some(password)) => Some(UserCredential::new(
                config.sasl_mechanism,
                username,
                password.expose(),
            )),
            // validate() refuses SASL without both.
            _ => None,
        };
        Ok(Connector {
            client_id: Arc::from(config.client_id.as_str()),
            connect_timeout: Duration::from_millis(config.connect_timeout_ms),
            request_timeout: config.request_timeout(),
            max_frame_bytes: config.max_frame_bytes,
            tls,
            sasl,
        })
    }

    /// Connects to `addr` (`host:port`; the certificate must name `host`).
    pub async fn connect(&self, addr: &str) -> Result<Connection, ClientError> {
        let tcp = tokio::time::timeout(self.connect_timeout, crate::dial::dial(addr))
            .await
            .map_err(|_| ClientError::ConnectTimeout(addr.to_string()))?
            .map_err(|e| ClientError::Connect(addr.to_string(), e))?;
        match &self.tls {
            None => self.finish(tcp, addr).await,
            Some(tls) => {
                let stream = syncline_tls::connect(tls, host_of(addr), tcp)
                    .await
                    .map_err(|source| ClientError::Tls {
                        addr: addr.to_string(),
                        source,
                    })?;
                self.finish(stream, addr).await
            }
        }
    }

    /// Authenticates `stream` if SASL is configured and wraps it.
    async fn finish<S>(&self, mut stream: S, addr: &str) -> Result<Connection, ClientError>
    where
        S: AsyncRead + AsyncWrite + Unpin + Send + 'static,
    {
        if let Some(credential) = &self.sasl {
            let exchange = sasl::authenticate_user(&mut stream, credential, &self.client_id);
            tokio::time::timeout(self.request_timeout, exchange)
                .await
                .map_err(|_| ClientError::Sasl {
                    addr: addr.to_string(),
                    reason: format!("no answer within {} ms", self.request_timeout.as_millis()),
                })?
                .map_err(|e| e.into_client_error(addr, credential.mechanism_name()))?;
        }
        Ok(Connection::from_stream(
            stream,
            addr,
            &self.client_id,
            self.max_frame_bytes,
        ))
    }
}

/// The host of `host:port` (`[::1]:9092` -> `[::1]`).
fn host_of(addr: &str) -> &str {
    addr.rsplit_once(':').map_or(addr, |(host, _)| host)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn host_of_an_address() {
        assert_eq!(host_of("broker-1:9093"), "broker-1");
        assert_eq!(host_of("[::1]:9093"), "[::1]");
        assert_eq!(host_of("127.0.0.1:9093"), "127.0.0.1");
    }

    #[test]
    fn tls_files_are_read_when_the_connector_is_made() {
        let mut config = ClientConfig::new("127.0.0.1:9093");
        config.set("security.protocol", "SSL").unwrap();
        config
            .set("ssl.ca.location", "/nonexistent/ca.pem")
            .unwrap();
        let err = Connector::new(&config).unwrap_err().to_string();
        assert!(
            err.contains("/nonexistent/ca.pem") && err.contains("no such file"),
            "{err}"
        );
    }
}
