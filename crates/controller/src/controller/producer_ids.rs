//! `AllocateProducerIds` (KIP-730): blocks of producer ids for the brokers, one
//! `ProducerIdsRecord` each, so that no id is given out twice, whichever controller
//! gives it.

use syncline_proto::{pb, ErrorCode};

use super::{Controller, ControllerResult};
use crate::records;

/// Producer ids per block (Kafka's `ProducerIdsBlock` size).
pub const PRODUCER_ID_BLOCK_SIZE: i32 = 1000;

impl Controller {
    /// `AllocateProducerIds` from broker `req.broker_id` in `req.broker_epoch`: the
    /// next [`PRODUCER_ID_BLOCK_SIZE`] ids, recorded as taken.
    /// BROKER_ID_NOT_REGISTERED for an unknown broker, STALE_BROKER_EPOCH for
    /// another epoch of it; UNKNOWN_SERVER_ERROR when the ids would run past
    /// `i64::MAX`.
    pub fn allocate_producer_ids(
        &self,
        req: &pb::AllocateProducerIdsRequest,
    ) -> ControllerResult<pb::AllocateProducerIdsResponse> {
        let refuse = |code: ErrorCode, message: String| {
            ControllerResult::answer(pb::AllocateProducerIdsResponse {
                error_code: code as i32,
                error_message: message,
                producer_id_start: -1,
                producer_id_len: 0,
            })
        };
        let Some(broker) = self.image.broker(req.broker_id) else {
            return refuse(
                ErrorCode::BrokerIdNotRegistered,
                format!("broker {} is not registered", req.broker_id),
            );
        };
        if broker.epoch != req.broker_epoch {
            return refuse(
                ErrorCode::StaleBrokerEpoch,
                format!(
                    "broker {} is registered with epoch {}, not {}",
                    req.broker_id, broker.epoch, req.broker_epoch
                ),
            );
        }
        let start = self.image.next_producer_id();
        let Some(next) = start.checked_add(i64::from(PRODUCER_ID_BLOCK_SIZE)) else {
            return refuse(
                ErrorCode::UnknownServerError,
                "every producer id has been given out".into(),
            );
        };
        tracing::debug!(broker = req.broker_id, start, "allocating producer ids");
        ControllerResult::new(
            pb::AllocateProducerIdsResponse {
                error_code: ErrorCode::None as i32,
                error_message: String::new(),
                producer_id_start: start,
                producer_id_len: PRODUCER_ID_BLOCK_SIZE,
            },
            vec![records::producer_ids_record(
                req.broker_id,
                req.broker_epoch,
                next,
            )],
        )
    }
}
