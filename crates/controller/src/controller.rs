//! The controller: decides, over the current image, what every request or tick
//! changes, and returns the decision as records for the shell to commit.

mod alter_partition;
mod alter_topic;
mod brokers;
mod client_quotas;
mod delete_topics;
mod elect_leaders;
mod producer_ids;
mod reassign;
mod security;
mod topics;

pub use producer_ids::PRODUCER_ID_BLOCK_SIZE;
pub(crate) use security::check_credential;
pub use security::{credential_of, verifier_of, MAX_USER_NAME_LEN};
pub use topics::{MAX_PARTITIONS_PER_REQUEST, MAX_TOPIC_NAME_LEN};

use std::collections::{BTreeMap, BTreeSet};

use syncline_proto::{pb, ErrorCode};
use tokio::time::Instant;

use crate::config::{ControllerConfig, InvalidConfig};
use crate::draft::Draft;
use crate::image::{ApplyError, MetadataImage};
use crate::records;

/// A decision: the response to send and the records that make it true.
///
/// The contract with the shell, for every operation:
/// 1. the records were computed against the current image and are **not applied**;
/// 2. the shell appends them durably to the metadata log (they must land at
///    [`Controller::next_offset`], in order: a broker's epoch is its registration's
///    offset);
/// 3. it applies each with [`Controller::replay`];
/// 4. only then does it send `response` (and announce changed partitions).
///
/// One operation at a time: the next operation is computed only after the previous
/// one's records are applied. If appending fails, the controller must stop: its
/// run-time state may already reflect the decision.
#[derive(Debug, Clone, PartialEq)]
#[must_use = "the records must be committed and replayed before the response is sent"]
pub struct ControllerResult<T> {
    /// What to answer once the records are applied.
    pub response: T,
    /// What to append to the metadata log, in order.
    pub records: Vec<pb::MetadataRecord>,
}

impl<T> ControllerResult<T> {
    fn new(response: T, records: Vec<pb::MetadataRecord>) -> Self {
        ControllerResult { response, records }
    }

    /// A response that changes nothing.
    fn answer(response: T) -> Self {
        Self::new(response, Vec::new())
    }
}

/// The controller's decision maker: the metadata image plus run-time broker liveness.
///
/// Liveness (last contact per broker, who is in controlled shutdown) is not in the
/// log: after a restart every registered broker gets a fresh session from `now`.
#[derive(Debug)]
pub struct Controller {
    config: ControllerConfig,
    image: MetadataImage,
    /// Last heartbeat or registration per broker.
    last_contact: BTreeMap<i32, Instant>,
    /// Unfenced brokers moving their leaderships away before they stop.
    shutting_down: BTreeSet<i32>,
}

impl Controller {
    /// A controller over `image` (the replay of the metadata log). Every registered
    /// broker's session starts at `now`. Call [`start`](Self::start) next.
    pub fn new(
        config: ControllerConfig,
        image: MetadataImage,
        now: Instant,
    ) -> Result<Self, InvalidConfig> {
        config.validate()?;
        let mut controller = Controller {
            config,
            image,
            last_contact: Default::default(),
            shutting_down: BTreeSet::new(),
        };
        controller.restart_sessions(now);
        Ok(controller)
    }

    /// Takes office: a `ControllerStartRecord` with the next controller epoch, then
    /// leaders for offline partitions that can elect one now (after a torn write of an
    /// unfence, or with unclean election newly enabled by default).
    pub fn start(&self) -> ControllerResult<()> {
        let mut draft = self.draft();
        draft.push(records::controller_start_record(
            self.config.node_id,
            self.image.controller_epoch().saturating_add(1),
        ));
        draft.elect_offline(|_| true);
        ControllerResult::new((), draft.into_records())
    }

    /// Applies one committed record (step 3 of the [`ControllerResult`] contract).
    pub fn replay(&mut self, offset: i64, record: &pb::MetadataRecord) -> Result<(), ApplyError> {
        self.image.apply(offset, record)
    }

    /// Applies committed records that start at `first_offset`.
    pub fn replay_all(
        &mut self,
        first_offset: i64,
        records: &[pb::MetadataRecord],
    ) -> Result<(), ApplyError> {
        for (offset, record) in (first_offset..).zip(records) {
            self.replay(offset, record)?;
        }
        Ok(())
    }

    /// The committed image.
    pub fn image(&self) -> &MetadataImage {
        &self.image
    }

    /// The configuration.
    pub fn config(&self) -> &ControllerConfig {
        &self.config
    }

    /// The offset the next record will get.
    pub fn next_offset(&self) -> i64 {
        self.image.next_offset()
    }

    /// The epoch `LeaderAndIsr` requests carry.
    pub fn controller_epoch(&self) -> i32 {
        self.image.controller_epoch()
    }

    /// Ids of the unfenced brokers.
    pub fn live_brokers(&self) -> Vec<i32> {
        self.image.live_brokers()
    }

    /// Whether a broker is moving its leaderships away to stop.
    pub fn is_shutting_down(&self, broker_id: i32) -> bool {
        self.shutting_down.contains(&broker_id)
    }

    /// Gives every registered broker a session starting at `now`, as [`new`](Self::new)
    /// does. For a shell that knows it did not run for a while (its process was
    /// paused): the silence it would measure is its own, and fencing the brokers for
    /// it would move every leadership and shrink every ISR at once.
    pub fn restart_sessions(&mut self, now: Instant) {
        self.last_contact = self.image.brokers().map(|b| (b.broker_id, now)).collect();
    }

    /// A topic's effective configs (overrides over the defaults).
    pub fn topic_configs(&self, topic: &str) -> Option<BTreeMap<String, String>> {
        let overrides = &self.image.topic(topic)?.configs;
        let mut configs = self.config.topic_defaults.to_map();
        configs.extend(overrides.clone());
        Some(configs)
    }

    /// The answer to `DescribeCluster`.
    pub fn describe_cluster(&self) -> pb::DescribeClusterResponse {
        pb::DescribeClusterResponse {
            error_code: ErrorCode::None as i32,
            cluster_id: self.config.cluster_id.clone(),
            controller_id: self.config.node_id,
            brokers: self.image.broker_infos(),
            // What each broker hosts is the brokers' metadata caches' to report.
            loads: Vec::new(),
        }
    }

    fn draft(&self) -> Draft<'_> {
        Draft::new(
            &self.image,
            &self.shutting_down,
            self.config.topic_defaults.unclean_leader_election_enable,
        )
    }
}
