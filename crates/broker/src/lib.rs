//! The syncline broker (`synclined`).
//!
//! A broker stores partition replicas, serves producers and consumers for the
//! partitions it leads, replicates the ones it follows by fetching from their
//! leaders, and tracks each led partition's in-sync replicas. One broker also hosts
//! the controller, which decides leadership and commits ISR changes.
//!
//! # Layout
//!
//! Every replication rule is a pure machine in `syncline-replication` (events
//! and `now` in, decisions out, table-tested, no I/O); the modules here are the
//! I/O shells that execute them.
//!
//! - [`partition`]: one replica. [`partition::Partition`] is the shell around
//!   the log that runs the replica's `PartitionCore` (re-exported here as
//!   [`partition::core`]) under one lock and executes its effects on the log.
//! - `replica_manager`: the hosted partitions and the data-plane requests; it
//!   executes the rest of a partition's effects (purgatory wake-ups,
//!   AlterPartition, fetchers) and holds the answer-now-or-park rule of fetches.
//! - `delayed`: DelayedFetch and DelayedProduce, waiting in purgatories.
//! - `fetcher`: the replica fetcher tasks that execute each followed
//!   partition's `syncline_replication::follower` machine.
//! - `controller_client`: the shell of the broker's lifecycle machine
//!   (`syncline_replication::lifecycle`), with heartbeats and the
//!   AlterPartition sender.
//! - `controller_host`: the controller role's I/O shell (the rules are in
//!   `syncline-controller`).
//! - [`config`]: the TOML configuration (Kafka's names and defaults);
//!   [`topic_config`]: a topic's effective settings.
//! - `broker`: the composition root (nothing imports it): the parts of a
//!   broker, request dispatch, start and shutdown.
//! - `front`: both listeners' connections (syncline's protocol and Kafka's),
//!   their limits, SASL, and the metrics endpoint; it reaches the broker only
//!   through its `Dispatch` trait.
//! - `responder`: where a request's answer goes (a leaf every layer answers
//!   through); `send`: writing responses, fetched records with `sendfile`
//!   (zero-copy); [`net`]: the network seam.
//! - `metadata_cache`: the cluster as this broker knows it.
//! - `auth`: broker authentication (SCRAM between brokers) and who may use the
//!   internal APIs.
//! - [`metrics`]: Prometheus metrics (served by `front::http`).
//! - `client_quota`: client quotas, byte rates and request time (the rules are
//!   `syncline_replication::client_quota`), charged as requests are answered.
//! - `names`: a request's repeated names collapsed, before anything else
//!   reads them.
//!
//! The modules import each other one way only (`tests/layers.rs` fails on a
//! circle).

#![warn(missing_docs)]

mod auth;
mod authorizer;
mod broker;
mod client_quota;
pub mod config;
mod control;
mod describe_configs;
mod front;
mod groups;
pub mod metrics;
mod names;
pub mod net;
pub use syncline_log::planted;
mod producer_ids;
mod replica;
mod responder;
mod send;
pub mod topic_config;

/// The test-only cargo features compiled into this build: `legacy-truncation`,
/// `unauthenticated-internal-apis` and `planted-bugs` (Cargo.toml says what
/// each does). Only the test crates turn them on, and cargo compiles a package
/// once per build with the features of every package in it: a build of the
/// whole workspace gives `synclined` all three. The binaries the scripts ship
/// and benchmark are built on their own (`build_shipped` in scripts/lib.sh) and
/// must list none; `synclined --version` prints this list so that they can be
/// checked.
#[must_use]
pub fn test_only_features() -> Vec<&'static str> {
    let mut features = Vec::new();
    if cfg!(feature = "legacy-truncation") {
        features.push("legacy-truncation");
    }
    if cfg!(feature = "unauthenticated-internal-apis") {
        features.push("unauthenticated-internal-apis");
    }
    if cfg!(feature = "planted-bugs") {
        features.push("planted-bugs");
    }
    features
}

/// `synclined --version`: the package version and [`test_only_features`],
/// `none` in a shipped build.
#[must_use]
pub fn version() -> String {
    let features = test_only_features();
    let features = if features.is_empty() {
        "none".to_string()
    } else {
        features.join(", ")
    };
    format!(
        "{} (test-only features: {features})",
        env!("CARGO_PKG_VERSION")
    )
}

pub use broker::{start, start_on, Broker, BrokerHandle};
pub use config::BrokerConfig;
pub use replica::manager::ReplicaManager;
pub use replica::partition;
pub use syncline_replication::lifecycle::BrokerStatus;

#[cfg(test)]
mod tests {
    use super::*;

    /// The workspace's test build has every test-only feature on (the e2e and
    /// sim crates ask for them), a shipped build none: either way the version
    /// names exactly the ones compiled in.
    #[test]
    fn the_version_names_each_test_only_feature_compiled_in_or_none() {
        let v = version();
        let compiled = [
            ("legacy-truncation", cfg!(feature = "legacy-truncation")),
            (
                "unauthenticated-internal-apis",
                cfg!(feature = "unauthenticated-internal-apis"),
            ),
            ("planted-bugs", cfg!(feature = "planted-bugs")),
        ];
        for (feature, on) in compiled {
            assert_eq!(v.contains(feature), on, "{feature} in {v}");
        }
        let none = compiled.iter().all(|(_, on)| !on);
        assert_eq!(v.ends_with("(test-only features: none)"), none, "{v}");
    }
}
