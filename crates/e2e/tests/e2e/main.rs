//! syncline's end-to-end tests, as one test binary: each module below is one
//! story told against real clusters (its own docs say which), and linking the
//! workspace once serves them all.
//!
//! Two kinds of cluster:
//! - real `synclined` processes on loopback, started from TOML files the way a
//!   user starts them, with the `syncline` CLI beside them
//!   ([`syncline_e2e::Cluster`]);
//! - brokers inside the test process ([`syncline_e2e::inprocess::TestCluster`]),
//!   where a test needs what no config file reaches (the legacy truncation rule,
//!   internal APIs served without authentication, faults injected into one
//!   broker's network). Those tests live in modules named `in_process`, which is
//!   how the quick tier (`scripts/test.sh --quick`, the `quick` profile of
//!   .config/nextest.toml) selects them.
//!
//! Which tests may run beside another one is decided in .config/nextest.toml:
//! most of these start clusters with second-scale timers and run one at a time.

mod admin;
mod broker_auth;
mod chaos;
mod cli;
mod cli_scripting;
mod client;
mod controller;
mod failures;
mod idempotence;
mod isr;
mod kafka_clients;
mod kafka_groups;
mod kafka_python_suite;
mod kafka_security_admin;
mod librdkafka_suite;
mod limits;
mod metrics;
mod quorum;
mod quotas;
mod reassign;
mod security;
mod suite_scripts;

/// Stories told on brokers inside the test process.
mod in_process {
    mod auto_create;
    mod bad_input;
    mod epochs;
    mod follower_fetch;
    mod forgery;
    mod internal_topics;
    mod long_poll;
    mod quotas;
    pub(crate) mod replication;
    mod single_broker;
    mod zero_copy;
}

/// The replication, failover and chaos stories again on secure clusters
/// (SASL_SSL clients, mutual TLS and SCRAM logins between brokers, ACLs): what
/// security adds to every hop must change none of their outcomes. Each test
/// runs in a process of its own (nextest; `scripts/test.sh`'s `cargo test`
/// fallback runs this module in a process of its own), so the switch below
/// reaches that test's clusters alone.
mod secure {
    /// Runs `story` with every cluster the harness starts made secure
    /// (`SYNCLINE_E2E_SECURE=1`, read by `syncline_e2e::security::enabled`).
    fn on_secure_clusters(story: fn()) {
        std::env::set_var("SYNCLINE_E2E_SECURE", "1");
        story();
        assert!(
            syncline_e2e::security::active().is_some(),
            "the story started no secure cluster"
        );
    }

    /// `twins!(name = path: story, ...)`: a module `name` with one test per
    /// story of module `crate::path`, of the same name, on secure clusters.
    macro_rules! twins {
        ($name:ident = $($path:ident)::+ : $($story:ident),+ $(,)?) => {
            mod $name {
                use crate::$($path)::+ as stories;
                $(
                    #[test]
                    fn $story() {
                        super::on_secure_clusters(stories::$story);
                    }
                )+
            }
        };
    }

    twins!(replication = in_process::replication:
        acks_all_is_acknowledged_by_the_whole_isr,
        followers_of_a_new_topic_retry_a_refused_first_fetch_at_once,
        followers_learn_the_high_watermark_with_their_next_answered_fetch,
        followers_serving_consumers_learn_the_high_watermark_at_once,
        incremental_fetch_session_answers_only_partitions_with_news,
    );
    twins!(failures = failures:
        sigkill_leader_under_acks_all_load,
        sigkill_follower_under_acks_all_load,
        sigstop_leader_is_replaced_and_rejoins_as_follower_after_sigcont,
        clean_restart_moves_leadership_before_stopping,
        rolling_restart_under_acks_all_load_loses_nothing,
    );
    twins!(chaos = chaos: random_faults_under_acks_all_load_keep_every_invariant);
}
