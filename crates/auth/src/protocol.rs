//! Kafka's security protocols.

/// How a connection is secured: Kafka's `security.protocol` of a client, and
/// of a listener in a broker's `listener_security_protocol_map`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum SecurityProtocol {
    /// Neither TLS nor SASL (a broker's clients are anonymous unless they
    /// choose to authenticate; brokers always do).
    #[default]
    Plaintext,
    /// TLS.
    Ssl,
    /// SASL authentication without TLS.
    SaslPlaintext,
    /// SASL authentication over TLS.
    SaslSsl,
}

impl SecurityProtocol {
    /// Whether connections use TLS.
    pub fn is_tls(self) -> bool {
        matches!(self, SecurityProtocol::Ssl | SecurityProtocol::SaslSsl)
    }

    /// Whether connections authenticate with SASL (on a broker's listener:
    /// before any other request).
    pub fn is_sasl(self) -> bool {
        matches!(
            self,
            SecurityProtocol::SaslPlaintext | SecurityProtocol::SaslSsl
        )
    }

    /// Kafka's name: `PLAINTEXT`, `SSL`, `SASL_PLAINTEXT`, `SASL_SSL`.
    pub fn name(self) -> &'static str {
        match self {
            SecurityProtocol::Plaintext => "PLAINTEXT",
            SecurityProtocol::Ssl => "SSL",
            SecurityProtocol::SaslPlaintext => "SASL_PLAINTEXT",
            SecurityProtocol::SaslSsl => "SASL_SSL",
        }
    }
}

impl std::str::FromStr for SecurityProtocol {
    type Err = String;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        match s.trim().to_ascii_uppercase().replace('-', "_").as_str() {
            "PLAINTEXT" => Ok(SecurityProtocol::Plaintext),
            "SSL" => Ok(SecurityProtocol::Ssl),
            "SASL_PLAINTEXT" => Ok(SecurityProtocol::SaslPlaintext),
            "SASL_SSL" => Ok(SecurityProtocol::SaslSsl),
            _ => Err(format!(
                "security.protocol must be PLAINTEXT, SSL, SASL_PLAINTEXT or SASL_SSL (got {s:?})"
            )),
        }
    }
}

impl std::fmt::Display for SecurityProtocol {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.name())
    }
}
