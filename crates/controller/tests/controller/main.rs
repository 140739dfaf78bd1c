//! The controller driven through its public API, as the shell drives it.

mod alter_partition;
mod alter_topic;
mod brokers;
mod client_quotas;
mod create_topics;
mod delete_topics;
mod elect_leaders;
mod elections;
mod image;
mod producer_ids;
mod reassign;
mod replay;
mod security;
mod support;
