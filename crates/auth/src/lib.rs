//! syncline authentication.
//!
//! Brokers authenticate each other on every inter-broker connection with SASL
//! SCRAM (RFC 5802, RFC 7677; the mechanism Kafka uses): [`scram`] holds both
//! sides of the exchange, generic over the hash (SCRAM-SHA-256 and
//! SCRAM-SHA-512), and [`credentials`] the files in which each broker keeps its
//! password and every broker's verifier.

pub mod credentials;
pub mod scram;

pub use scram::{ClientCredential, Mechanism, ScramClient, ScramError, ScramServer, Verifier};
