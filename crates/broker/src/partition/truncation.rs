//! The follower's truncation decision (KIP-101, KIP-279), pure: given where the
//! leader says an epoch ends, how far must this replica truncate, and is it done?
//!
//! Truncating to the high watermark is the old, wrong rule: a follower restarting
//! with a stale HW would drop committed records (KIP-101 #1), and two replicas that
//! lost different unflushed tails could end up with different records at the same
//! offset (KIP-101 #2). Epochs tell exactly where the logs agree.

/// What the leader answered for the epoch we asked about (or sent back as a fetch's
/// `diverging_epoch`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct LeaderEpochEnd {
    /// The largest epoch ≤ the asked one the leader knows, or -1.
    pub epoch: i32,
    /// Where that epoch ends on the leader, or -1.
    pub end_offset: i64,
}

/// Where to truncate, and whether another round is needed.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Truncation {
    pub offset: i64,
    /// False: truncate to `offset`, then ask the leader again about the (older) epoch
    /// that is now this replica's latest (KIP-279).
    pub complete: bool,
}

/// Decides the truncation. `local_end_for` gives this replica's own
/// `end_offset_for_epoch` (largest local epoch ≤ the argument and where it ends).
pub fn decide(
    leader: LeaderEpochEnd,
    local_log_end_offset: i64,
    local_high_watermark: i64,
    local_end_for: impl Fn(i32) -> Option<(i32, i64)>,
) -> Truncation {
    if leader.end_offset < 0 {
        // The leader cannot say where any of our epochs ends (it has no epoch
        // information at all). As Kafka, fall back to the high watermark: the only
        // point both sides are known to agree on.
        return Truncation {
            offset: local_high_watermark.min(local_log_end_offset),
            complete: true,
        };
    }
    if leader.epoch < 0 {
        // The leader has no epoch ≤ ours but reports where its log starts.
        return Truncation {
            offset: leader.end_offset.min(local_log_end_offset),
            complete: true,
        };
    }
    match local_end_for(leader.epoch) {
        Some((local_epoch, local_end)) if local_epoch == leader.epoch => Truncation {
            offset: leader.end_offset.min(local_end).min(local_log_end_offset),
            complete: true,
        },
        // We never saw the leader's epoch: drop everything after our largest epoch
        // below it, then ask again about that one.
        Some((_, local_end)) => Truncation {
            offset: local_end.min(local_log_end_offset),
            complete: false,
        },
        // No local epoch at or below the leader's: keep what the leader has.
        None => Truncation {
            offset: leader.end_offset.min(local_log_end_offset),
            complete: true,
        },
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A local epoch cache as (epoch, start offset) entries plus the LEO.
    fn local(entries: &'static [(i32, i64)], leo: i64) -> impl Fn(i32) -> Option<(i32, i64)> {
        move |asked| {
            let idx = entries.iter().rposition(|(e, _)| *e <= asked)?;
            let end = entries.get(idx + 1).map_or(leo, |(_, start)| *start);
            Some((entries[idx].0, end))
        }
    }

    fn leader(epoch: i32, end_offset: i64) -> LeaderEpochEnd {
        LeaderEpochEnd { epoch, end_offset }
    }

    #[test]
    fn same_epoch_truncates_to_the_smaller_end() {
        // Both have epoch 2; the leader's ends at 120, ours at our LEO 150.
        let d = decide(leader(2, 120), 150, 0, local(&[(0, 0), (2, 100)], 150));
        assert_eq!(
            d,
            Truncation {
                offset: 120,
                complete: true
            }
        );
        // The leader has more than us: nothing to drop.
        let d = decide(leader(2, 200), 150, 0, local(&[(0, 0), (2, 100)], 150));
        assert_eq!(
            d,
            Truncation {
                offset: 150,
                complete: true
            }
        );
    }

    #[test]
    fn follower_has_an_epoch_the_leader_lacks() {
        // We wrote epoch 3 (as a leader that then lost its office); the leader answers
        // for our epoch 3 with its epoch 2 ending at 110, and our epoch 2 ends at 130.
        let d = decide(
            leader(2, 110),
            160,
            0,
            local(&[(0, 0), (2, 100), (3, 130)], 160),
        );
        assert_eq!(
            d,
            Truncation {
                offset: 110,
                complete: true
            }
        );
    }

    #[test]
    fn follower_never_saw_the_leaders_epoch_takes_another_round() {
        // KIP-279: the leader answers with epoch 2, which we never had: we have 1 then 3.
        let d = decide(
            leader(2, 90),
            200,
            0,
            local(&[(0, 0), (1, 50), (3, 100)], 200),
        );
        assert_eq!(
            d,
            Truncation {
                offset: 100,
                complete: false
            }
        );
        // Next round: our latest epoch is 1 now (LEO 100); the leader says 1 ends at 80.
        let d = decide(leader(1, 80), 100, 0, local(&[(0, 0), (1, 50)], 100));
        assert_eq!(
            d,
            Truncation {
                offset: 80,
                complete: true
            }
        );
    }

    #[test]
    fn leader_returns_undefined() {
        let d = decide(leader(-1, -1), 70, 55, local(&[(4, 0)], 70));
        assert_eq!(
            d,
            Truncation {
                offset: 55,
                complete: true
            }
        );
        // The leader knows no epoch ≤ ours but its log starts at 30.
        let d = decide(leader(-1, 30), 70, 0, local(&[(0, 0)], 70));
        assert_eq!(
            d,
            Truncation {
                offset: 30,
                complete: true
            }
        );
    }

    #[test]
    fn no_local_epoch_at_or_below_the_leaders() {
        let d = decide(leader(1, 40), 70, 0, local(&[(5, 0)], 70));
        assert_eq!(
            d,
            Truncation {
                offset: 40,
                complete: true
            }
        );
    }

    #[test]
    fn never_truncates_past_the_local_end() {
        let d = decide(leader(7, 1_000), 10, 0, local(&[(7, 0)], 10));
        assert_eq!(d.offset, 10);
    }
}
