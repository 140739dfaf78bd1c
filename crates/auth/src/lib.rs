//! syncline authentication and authorization.
//!
//! Brokers authenticate each other on every inter-broker connection with SASL
//! SCRAM (RFC 5802, RFC 7677; the mechanism Kafka uses): [`scram`] holds both
//! sides of the exchange, generic over the hash (SCRAM-SHA-256 and
//! SCRAM-SHA-512), and [`credentials`] the files in which each broker keeps its
//! password and every broker's verifier. Clients authenticate with SCRAM too,
//! or with SASL PLAIN over TLS ([`plain`], RFC 4616), against the user
//! credentials the controller keeps.
//!
//! [`acl`] is the authorizer: ACLs with Kafka's vocabulary and codes, their
//! validation and filters, and the rules by which a principal may or may not
//! perform an operation on a topic, a group or the cluster.

pub mod acl;
pub mod credentials;
pub mod plain;
pub mod protocol;
pub mod scram;

pub use protocol::SecurityProtocol;
pub use scram::{ClientCredential, Mechanism, ScramClient, ScramError, ScramServer, Verifier};
