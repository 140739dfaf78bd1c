//! The one rule every leadership and ISR change follows (fencing, unfencing,
//! controlled shutdown, controller start): Kafka's `PartitionChangeBuilder` without
//! reassignment or eligible leader replicas.

use syncline_proto::NO_LEADER;

use crate::image::PartitionRegistration;

/// The state of `current` after its ISR becomes `target_isr` (a subsequence of the
/// current ISR, so in assignment order) and its leader is re-checked against `usable`
/// (a broker that may lead: unfenced and not shutting down, as seen by the change in
/// progress). `None` when nothing changes.
///
/// - An ISR is never emptied: when the target is empty the current ISR stays, so its
///   last member can lead again when it returns.
/// - A usable leader that stays in the ISR keeps leading (no needless epoch bump).
/// - Otherwise the first replica in assignment order that is in the ISR and usable
///   leads; with none, the partition is offline, unless `unclean_allowed`, in which case
///   the first usable replica leads with ISR = [itself] (committed data may be lost).
/// - A leader change bumps the leader epoch and the partition epoch; any other change
///   bumps the partition epoch only.
pub(crate) fn next_state(
    current: &PartitionRegistration,
    target_isr: Vec<i32>,
    usable: impl Fn(i32) -> bool,
    unclean_allowed: bool,
) -> Option<PartitionRegistration> {
    let isr = if target_isr.is_empty() {
        current.isr.clone()
    } else {
        target_isr
    };
    let clean = |r: i32| isr.contains(&r) && usable(r);
    let (leader, isr) = if current.leader != NO_LEADER && clean(current.leader) {
        (current.leader, isr)
    } else if let Some(&r) = current.replicas.iter().find(|&&r| clean(r)) {
        (r, isr)
    } else if let Some(r) = current
        .original_replicas()
        .into_iter()
        .chain(current.adding_replicas.iter().copied())
        .find(|&r| unclean_allowed && usable(r))
    {
        // A joining replica of a reassignment comes last: its log may be far
        // behind the original replicas'.
        // Logged by the caller, which knows the partition (`draft::log_change`).
        (r, vec![r])
    } else {
        (NO_LEADER, isr)
    };
    if leader == current.leader && isr == current.isr {
        return None;
    }
    let leader_epoch = if leader == current.leader {
        current.leader_epoch
    } else {
        current.leader_epoch.saturating_add(1)
    };
    Some(PartitionRegistration {
        replicas: current.replicas.clone(),
        isr,
        leader,
        leader_epoch,
        partition_epoch: current.partition_epoch.saturating_add(1),
        adding_replicas: current.adding_replicas.clone(),
        removing_replicas: current.removing_replicas.clone(),
    })
}
