//! Broker lifecycle: registration, heartbeats (unfencing, controlled shutdown) and
//! session expiry.

use std::time::Duration;

use syncline_proto::{pb, ErrorCode};
use tokio::time::Instant;

use super::{Controller, ControllerResult};
use crate::records;

/// Bound on the strings a registration stores (host, rack, metrics address,
/// incarnation id): they go into a metadata record, and a record the log refuses would
/// stop the controller.
const MAX_NAME_BYTES: usize = 255;
/// Most listeners one broker may advertise.
const MAX_LISTENERS: usize = 16;

/// What a heartbeat moves a broker to (Kafka's `BrokerHeartbeatManager` states).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum NextState {
    /// Fenced and staying so (not caught up, or it asked to be).
    Fenced,
    /// Fenced and caught up: unfence it.
    Unfence,
    /// Unfenced, nothing to do.
    Unfenced,
    /// Moving its leaderships away before it stops.
    ControlledShutdown,
    /// Fence it now; `shutdown` tells it to stop.
    Fence { shutdown: bool },
}

impl Controller {
    /// `BrokerRegistration`. The same incarnation again is idempotent (same epoch, no
    /// record). A new incarnation gets a new epoch (the offset of its record), starts
    /// fenced, and its previous incarnation is fenced first: a restarted process may
    /// have lost its unflushed tail, so it must not keep ISR seats or leaderships.
    pub fn register_broker(
        &mut self,
        req: &pb::BrokerRegistrationRequest,
        now: Instant,
    ) -> ControllerResult<pb::BrokerRegistrationResponse> {
        let refuse = |code: ErrorCode, message: String| {
            ControllerResult::answer(pb::BrokerRegistrationResponse {
                error_code: code as i32,
                error_message: message,
                broker_epoch: -1,
            })
        };
        if req.cluster_id != self.config.cluster_id {
            return refuse(
                ErrorCode::InconsistentClusterId,
                format!(
                    "cluster id {:?} does not match this cluster's {:?}",
                    req.cluster_id, self.config.cluster_id
                ),
            );
        }
        if req.broker_id < 0 {
            return refuse(
                ErrorCode::InvalidRequest,
                format!("invalid broker id {}", req.broker_id),
            );
        }
        let endpoint = match &req.endpoint {
            Some(e)
                if (1..=MAX_NAME_BYTES).contains(&e.host.len())
                    && (1..=65_535).contains(&e.port)
                    && e.rack.len() <= MAX_NAME_BYTES =>
            {
                e
            }
            _ => {
                return refuse(
                    ErrorCode::InvalidRequest,
                    format!(
                        "the endpoint needs a host of 1..={MAX_NAME_BYTES} bytes, a port in \
                         1..=65535 and a rack of at most {MAX_NAME_BYTES} bytes"
                    ),
                )
            }
        };
        let listener_ok = |l: &pb::ListenerEndpoint| {
            (1..=MAX_NAME_BYTES).contains(&l.name.len())
                && (1..=MAX_NAME_BYTES).contains(&l.host.len())
                && (1..=65_535).contains(&l.port)
        };
        if req.listeners.len() > MAX_LISTENERS || !req.listeners.iter().all(listener_ok) {
            return refuse(
                ErrorCode::InvalidRequest,
                format!(
                    "at most {MAX_LISTENERS} listeners, each with a name and host of                      1..={MAX_NAME_BYTES} bytes and a port in 1..=65535"
                ),
            );
        }
        if req.metrics_address.len() > MAX_NAME_BYTES || req.incarnation_id.len() > MAX_NAME_BYTES {
            return refuse(
                ErrorCode::InvalidRequest,
                format!("metrics address and incarnation id are limited to {MAX_NAME_BYTES} bytes"),
            );
        }
        let id = req.broker_id;
        let existing = self.image.broker(id);
        if let Some(b) = existing.filter(|b| b.incarnation_id == req.incarnation_id) {
            // A retry by the same process (its response was lost): same epoch.
            let epoch = b.epoch;
            self.last_contact.insert(id, now);
            return ControllerResult::answer(pb::BrokerRegistrationResponse {
                error_code: ErrorCode::None as i32,
                error_message: String::new(),
                broker_epoch: epoch,
            });
        }
        // The previous incarnation's controlled shutdown, if any, died with it.
        self.shutting_down.remove(&id);
        let mut draft = self.draft();
        if let Some(old) = existing.filter(|b| !b.fenced) {
            tracing::info!(
                broker_id = id,
                old_epoch = old.epoch,
                "broker restarted: fencing its previous incarnation"
            );
            draft.fence(id, old.epoch);
        }
        let epoch = draft.next_offset();
        draft.push(records::register_broker_record(pb::RegisterBrokerRecord {
            broker_id: id,
            broker_epoch: epoch,
            incarnation_id: req.incarnation_id.clone(),
            endpoint: Some(pb::BrokerEndpoint {
                node_id: id,
                ..endpoint.clone()
            }),
            metrics_address: req.metrics_address.clone(),
            listeners: req.listeners.clone(),
        }));
        let records = draft.into_records();
        tracing::info!(broker_id = id, epoch, "registering broker");
        self.last_contact.insert(id, now);
        ControllerResult::new(
            pb::BrokerRegistrationResponse {
                error_code: ErrorCode::None as i32,
                error_message: String::new(),
                broker_epoch: epoch,
            },
            records,
        )
    }

    /// `BrokerHeartbeat`: refreshes the broker's session and moves it through its
    /// states. A fenced broker that has applied the metadata log up to its own
    /// registration is unfenced (and offline partitions it hosts elect again). With
    /// `want_shutdown` an unfenced broker enters controlled shutdown: its leaderships
    /// move to other ISR members and it leaves ISRs where others remain; once it leads
    /// nothing (a later heartbeat) it is fenced and told `should_shutdown`.
    pub fn heartbeat(
        &mut self,
        req: &pb::BrokerHeartbeatRequest,
        now: Instant,
    ) -> ControllerResult<pb::BrokerHeartbeatResponse> {
        let refuse = |code: ErrorCode| {
            ControllerResult::answer(pb::BrokerHeartbeatResponse {
                error_code: code as i32,
                is_caught_up: false,
                is_fenced: true,
                should_shutdown: false,
            })
        };
        let Some(broker) = self.image.broker(req.broker_id) else {
            return refuse(ErrorCode::BrokerIdNotRegistered);
        };
        if broker.epoch != req.broker_epoch {
            return refuse(ErrorCode::StaleBrokerEpoch);
        }
        let (id, epoch, fenced) = (broker.broker_id, broker.epoch, broker.fenced);
        let caught_up = req.current_metadata_offset >= epoch;
        let leads_any = self.image.leads_any(id);
        let next = if fenced {
            if req.want_shutdown {
                NextState::Fence { shutdown: true }
            } else if !req.want_fence && caught_up {
                NextState::Unfence
            } else {
                NextState::Fenced
            }
        } else if self.shutting_down.contains(&id) || (req.want_shutdown && !req.want_fence) {
            if leads_any {
                NextState::ControlledShutdown
            } else {
                NextState::Fence { shutdown: true }
            }
        } else if req.want_fence {
            NextState::Fence {
                shutdown: req.want_shutdown,
            }
        } else {
            NextState::Unfenced
        };

        self.last_contact.insert(id, now);
        match next {
            NextState::ControlledShutdown => {
                if self.shutting_down.insert(id) {
                    tracing::info!(
                        broker_id = id,
                        "controlled shutdown: moving leaderships away"
                    );
                }
            }
            NextState::Fence { .. } => {
                self.shutting_down.remove(&id);
            }
            NextState::Fenced | NextState::Unfence | NextState::Unfenced => {}
        }
        let mut draft = self.draft();
        match next {
            NextState::Unfence => {
                tracing::info!(
                    broker_id = id,
                    epoch,
                    metadata_offset = req.current_metadata_offset,
                    "unfencing caught-up broker"
                );
                draft.unfence(id, epoch);
            }
            NextState::ControlledShutdown => draft.remove_from_isrs(id),
            NextState::Fence { .. } if !fenced => {
                tracing::info!(
                    broker_id = id,
                    epoch,
                    want_shutdown = req.want_shutdown,
                    "fencing broker at its request"
                );
                draft.fence(id, epoch);
            }
            NextState::Fence { .. } | NextState::Fenced | NextState::Unfenced => {}
        }
        let records = draft.into_records();
        ControllerResult::new(
            pb::BrokerHeartbeatResponse {
                error_code: ErrorCode::None as i32,
                is_caught_up: caught_up,
                is_fenced: matches!(next, NextState::Fenced | NextState::Fence { .. }),
                should_shutdown: matches!(next, NextState::Fence { shutdown: true }),
            },
            records,
        )
    }

    /// Fences every unfenced broker silent for longer than
    /// `broker_session_timeout_ms` (exactly the timeout is still alive). Returns the
    /// fenced ids.
    pub fn tick(&mut self, now: Instant) -> ControllerResult<Vec<i32>> {
        let timeout = Duration::from_millis(self.config.broker_session_timeout_ms);
        let mut expired = Vec::new();
        for b in self.image.brokers().filter(|b| !b.fenced) {
            // A broker registered by records this controller did not decide (none in
            // normal operation) gets its session from the first tick that sees it.
            let last = *self.last_contact.entry(b.broker_id).or_insert(now);
            let silent = now.saturating_duration_since(last);
            if silent > timeout {
                tracing::warn!(
                    broker_id = b.broker_id,
                    epoch = b.epoch,
                    silent_ms = silent.as_millis(),
                    session_timeout_ms = self.config.broker_session_timeout_ms,
                    "broker session expired: fencing"
                );
                expired.push((b.broker_id, b.epoch));
            }
        }
        for (id, _) in &expired {
            self.shutting_down.remove(id);
        }
        let mut draft = self.draft();
        for &(id, epoch) in &expired {
            draft.fence(id, epoch);
        }
        let records = draft.into_records();
        ControllerResult::new(expired.into_iter().map(|(id, _)| id).collect(), records)
    }
}
