//! The follower's truncation decision (KIP-101, KIP-279), pure: given where the
//! leader says an epoch ends, how far must this replica truncate, and is it done?
//!
//! Truncating to the high watermark is the old, wrong rule: a follower restarting
//! with a stale HW would drop committed records (KIP-101 #1), and two replicas that
//! lost different unflushed tails could end up with different records at the same
//! offset (KIP-101 #2). Epochs tell exactly where the logs agree.

use syncline_proto::EpochEndOffset;

/// What the decision needs to know about this replica's own log.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct LocalLog {
    /// This replica's log end offset.
    pub log_end_offset: i64,
    /// This replica's high watermark.
    pub high_watermark: i64,
    /// This replica's own answer for the leader's epoch (`end_offset_for_epoch` of
    /// the epoch the leader answered with): the largest local epoch at most that
    /// one and where it ends, or `None` if the log has no such epoch.
    pub epoch_end: Option<EpochEndOffset>,
}

/// Where to truncate, and whether another round is needed.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Truncation {
    /// Truncate the log to this offset (never above the local log end).
    pub offset: i64,
    /// False: truncate to `offset`, then ask the leader again about the (older) epoch
    /// that is now this replica's latest (KIP-279).
    pub complete: bool,
}

/// Decides the truncation, given where the leader says an epoch ends (its
/// OffsetsForLeaderEpoch answer or a fetch's `diverging_epoch`).
pub fn decide(leader: EpochEndOffset, local: LocalLog) -> Truncation {
    let leo = local.log_end_offset;
    if leader.end_offset < 0 {
        // The leader cannot say where any of our epochs ends (it has no epoch
        // information at all). As Kafka, fall back to the high watermark: the only
        // point both sides are known to agree on.
        return Truncation {
            offset: local.high_watermark.min(leo),
            complete: true,
        };
    }
    if leader.epoch < 0 {
        // The leader has no epoch ≤ ours but reports where its log starts.
        return Truncation {
            offset: leader.end_offset.min(leo),
            complete: true,
        };
    }
    match local.epoch_end {
        Some(mine) if mine.epoch == leader.epoch => Truncation {
            offset: leader.end_offset.min(mine.end_offset).min(leo),
            complete: true,
        },
        // We never saw the leader's epoch: drop everything after our largest epoch
        // below it, then ask again about that one.
        Some(mine) => Truncation {
            offset: mine.end_offset.min(leo),
            complete: false,
        },
        // No local epoch at or below the leader's: keep what the leader has.
        None => Truncation {
            offset: leader.end_offset.min(leo),
            complete: true,
        },
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// This replica's log as its epoch cache, (epoch, start offset) entries, plus its
    /// LEO, looked up for the epoch the leader answered with.
    fn local(entries: &[(i32, i64)], leo: i64, hw: i64, leader: EpochEndOffset) -> LocalLog {
        let epoch_end = entries
            .iter()
            .rposition(|(e, _)| *e <= leader.epoch)
            .map(|idx| EpochEndOffset {
                epoch: entries[idx].0,
                end_offset: entries.get(idx + 1).map_or(leo, |(_, start)| *start),
            });
        LocalLog {
            log_end_offset: leo,
            high_watermark: hw,
            epoch_end,
        }
    }

    fn leader(epoch: i32, end_offset: i64) -> EpochEndOffset {
        EpochEndOffset { epoch, end_offset }
    }

    /// Decides for a leader answer against a local log.
    fn run(l: EpochEndOffset, entries: &[(i32, i64)], leo: i64, hw: i64) -> Truncation {
        decide(l, local(entries, leo, hw, l))
    }

    #[test]
    fn same_epoch_truncates_to_the_smaller_end() {
        // Both have epoch 2; the leader's ends at 120, ours at our LEO 150.
        let d = run(leader(2, 120), &[(0, 0), (2, 100)], 150, 0);
        assert_eq!(
            d,
            Truncation {
                offset: 120,
                complete: true
            }
        );
        // The leader has more than us: nothing to drop.
        let d = run(leader(2, 200), &[(0, 0), (2, 100)], 150, 0);
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
        let d = run(leader(2, 110), &[(0, 0), (2, 100), (3, 130)], 160, 0);
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
        let d = run(leader(2, 90), &[(0, 0), (1, 50), (3, 100)], 200, 0);
        assert_eq!(
            d,
            Truncation {
                offset: 100,
                complete: false
            }
        );
        // Next round: our latest epoch is 1 now (LEO 100); the leader says 1 ends at 80.
        let d = run(leader(1, 80), &[(0, 0), (1, 50)], 100, 0);
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
        let d = run(leader(-1, -1), &[(4, 0)], 70, 55);
        assert_eq!(
            d,
            Truncation {
                offset: 55,
                complete: true
            }
        );
        // The leader knows no epoch ≤ ours but its log starts at 30.
        let d = run(leader(-1, 30), &[(0, 0)], 70, 0);
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
        let d = run(leader(1, 40), &[(5, 0)], 70, 0);
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
        let d = run(leader(7, 1_000), &[(7, 0)], 10, 0);
        assert_eq!(d.offset, 10);
    }
}
