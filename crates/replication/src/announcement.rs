//! Announcements from the controller (LeaderAndIsr): which requests a broker
//! takes at all, and which partition states in them are newer than what it
//! knows. One rule for both readers of an announcement: the partition core
//! (`PartitionCore::on_leader_and_isr`) and the broker's metadata cache.

use syncline_proto::ErrorCode;

/// A LeaderAndIsr request is taken only from the current controller (a
/// controller epoch at least the newest seen: `STALE_CONTROLLER_EPOCH`) and
/// only for this broker's current registration (its broker epoch, known and
/// equal: `STALE_BROKER_EPOCH`, also before this broker has registered).
pub fn check_request(
    controller_epoch: i32,
    newest_controller_epoch: i32,
    broker_epoch: i64,
    local_broker_epoch: i64,
) -> Result<(), ErrorCode> {
    if controller_epoch < newest_controller_epoch {
        return Err(ErrorCode::StaleControllerEpoch);
    }
    if local_broker_epoch < 0 || broker_epoch != local_broker_epoch {
        return Err(ErrorCode::StaleBrokerEpoch);
    }
    Ok(())
}

/// A partition state's epochs, as announced or as known.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Epochs {
    /// The leader epoch (bumped by every change of leader).
    pub leader_epoch: i32,
    /// The partition epoch (bumped by every change of leader, ISR or replicas).
    pub partition_epoch: i32,
}

/// How an announced partition state compares with the one known.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Freshness {
    /// Newer: take it.
    Newer,
    /// The same epochs: the state is already known.
    Same,
    /// Older in either epoch: a reordered or replayed announcement, ignored.
    Stale,
}

/// Compares an announced partition state with the known one (None: the
/// partition is new here). Older in either epoch is stale, whatever the
/// other says (a correct controller bumps both together).
#[must_use]
pub fn freshness(announced: Epochs, known: Option<Epochs>) -> Freshness {
    let Some(known) = known else {
        return Freshness::Newer;
    };
    if announced.leader_epoch < known.leader_epoch
        || announced.partition_epoch < known.partition_epoch
    {
        Freshness::Stale
    } else if announced == known {
        Freshness::Same
    } else {
        Freshness::Newer
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn requests_from_an_old_controller_or_for_another_registration_are_refused() {
        for (name, controller_epoch, broker_epoch, local, want) in [
            ("current", 5, 10, 10, Ok(())),
            ("a newer controller", 6, 10, 10, Ok(())),
            (
                "an old controller",
                4,
                10,
                10,
                Err(ErrorCode::StaleControllerEpoch),
            ),
            (
                "an old registration",
                5,
                9,
                10,
                Err(ErrorCode::StaleBrokerEpoch),
            ),
            (
                "a newer registration",
                5,
                11,
                10,
                Err(ErrorCode::StaleBrokerEpoch),
            ),
            (
                "not registered yet",
                5,
                -1,
                -1,
                Err(ErrorCode::StaleBrokerEpoch),
            ),
            // Both stale: the controller's is reported first.
            ("both", 4, 9, 10, Err(ErrorCode::StaleControllerEpoch)),
        ] {
            assert_eq!(
                check_request(controller_epoch, 5, broker_epoch, local),
                want,
                "{name}"
            );
        }
    }

    #[test]
    fn an_announcement_older_in_either_epoch_is_stale() {
        let e = |leader_epoch, partition_epoch| Epochs {
            leader_epoch,
            partition_epoch,
        };
        let known = Some(e(5, 10));
        for (name, announced, known, want) in [
            ("a new partition", e(0, 0), None, Freshness::Newer),
            ("a new leader", e(6, 11), known, Freshness::Newer),
            ("an ISR change", e(5, 11), known, Freshness::Newer),
            ("the same", e(5, 10), known, Freshness::Same),
            ("an older leader epoch", e(4, 11), known, Freshness::Stale),
            ("an older partition epoch", e(6, 9), known, Freshness::Stale),
            ("older in both", e(4, 9), known, Freshness::Stale),
            (
                "an older leader epoch, same partition epoch",
                e(4, 10),
                known,
                Freshness::Stale,
            ),
        ] {
            assert_eq!(freshness(announced, known), want, "{name}");
        }
    }
}
