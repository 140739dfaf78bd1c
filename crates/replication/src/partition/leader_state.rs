//! The leader's replication bookkeeping for one partition, as a pure state machine:
//! follower log end offsets (reported by their fetches), `last_caught_up` times, the
//! ISR (committed, and the one proposed to the controller), and the high watermark.
//! No I/O and no clock: every method takes `now`. The partition shell executes what
//! these methods decide (send an AlterPartition, wake the purgatories).

use std::time::{Duration, Instant};

use crate::planted::PlantedBugs;

/// One follower as the leader sees it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FollowerState {
    /// The follower's broker id.
    pub broker_id: i32,
    /// Broker epoch the follower last fetched with (None: not told yet).
    pub broker_epoch: Option<i64>,
    /// Its log end offset, from its last fetch (None: not heard from under this
    /// leader).
    pub log_end_offset: Option<i64>,
    /// Last time it was known to be caught up with the leader's LEO.
    pub last_caught_up: Option<Instant>,
    /// Time of its previous fetch and the leader's LEO at that time (the second rule
    /// of the caught-up update).
    last_fetch: Option<(Instant, i64)>,
}

impl FollowerState {
    /// How many offsets it is behind the leader's `leader_leo` (all of them when it
    /// has not fetched under this leader yet). The one lag formula: describe, the
    /// metrics and the ISR change evidence all use it.
    pub fn lag(&self, leader_leo: i64) -> i64 {
        leader_leo - self.log_end_offset.unwrap_or(0)
    }
}

/// A follower's fetch, as the leader records it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct FollowerFetch {
    /// The fetching follower's broker id.
    pub follower_id: i32,
    /// The broker epoch it fetched with (None: it did not say).
    pub broker_epoch: Option<i64>,
    /// Its log end offset: the fetch offset.
    pub fetch_offset: i64,
    /// The leader's log end offset when the fetch was read.
    pub leader_leo: i64,
    /// The leader epoch the fetch was read under.
    pub request_epoch: i32,
    /// The controller would accept the follower into the ISR (unfenced, current
    /// broker epoch).
    pub eligible: bool,
}

/// An ISR change proposed to the controller and not yet decided: until it
/// is (committed, refused as ineligible, or overtaken by an announcement),
/// the high watermark counts its members too (the maximal ISR), since the
/// controller may have committed it already.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PendingIsr {
    /// The proposed ISR.
    pub isr: Vec<i32>,
    /// Why (for the log line and the counters).
    pub change: IsrChangeKind,
    /// The proposal as sent, sent again as is while undecided.
    pub proposal: IsrProposal,
    /// When to send it again: set when an answer left it undecided.
    pub resend_at: Option<Instant>,
}

/// Direction of an ISR change.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum IsrChangeKind {
    /// Followers leave the ISR: they have not caught up within the lag time.
    Shrink,
    /// A follower rejoins the ISR: its log has reached the high watermark.
    Expand,
}

/// An ISR change the shell must send to the controller, with the facts behind it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct IsrProposal {
    /// Shrink or expand.
    pub kind: IsrChangeKind,
    /// The proposed ISR.
    pub new_isr: Vec<i32>,
    /// (broker id, broker epoch) of each proposed member, the leader included.
    pub members: Vec<(i32, i64)>,
    /// The leader epoch the proposal is made under.
    pub leader_epoch: i32,
    /// The partition epoch of the ISR it changes: the controller refuses the
    /// proposal (InvalidUpdateVersion) if the partition has moved on since.
    pub partition_epoch: i32,
    /// The followers leaving or joining, each with the evidence for it.
    pub replicas: Vec<IsrEvidence>,
}

/// Why a follower leaves or joins the ISR, as the leader saw it when it
/// proposed the change.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct IsrEvidence {
    /// The follower's broker id.
    pub broker_id: i32,
    /// How long since it was last caught up with the leader's log end (None:
    /// never, under this leader).
    pub since_caught_up: Option<Duration>,
    /// How many offsets it is behind the leader's log end.
    pub lag: i64,
}

impl IsrEvidence {
    fn of(f: &FollowerState, now: Instant, leader_leo: i64) -> IsrEvidence {
        IsrEvidence {
            broker_id: f.broker_id,
            since_caught_up: f.last_caught_up.map(|t| now.saturating_duration_since(t)),
            lag: f.lag(leader_leo),
        }
    }
}

impl IsrProposal {
    /// Whether `other` proposes the same change: the same ISR with the same
    /// members' epochs, from the same leader and partition epochs (the
    /// evidence may differ).
    #[must_use]
    pub fn same_change(&self, other: &IsrProposal) -> bool {
        self.kind == other.kind
            && self.new_isr == other.new_isr
            && self.members == other.members
            && self.leader_epoch == other.leader_epoch
            && self.partition_epoch == other.partition_epoch
    }
}

/// What a follower fetch changed.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FollowerFetchOutcome {
    /// The high watermark to send back: the one before this fetch's offset was
    /// applied (the one-round delay of the protocol).
    pub high_watermark_to_send: i64,
    /// The high watermark moved: wake acks=all produces and consumer fetches.
    pub high_watermark_advanced: bool,
    /// The follower qualifies to rejoin the ISR.
    pub expand: Option<IsrProposal>,
}

/// The leader's state. Invariants (checked in debug builds): HW ≤ leader LEO, HW never
/// decreases, leader ∈ ISR ⊆ replicas.
#[derive(Debug, Clone)]
pub struct LeaderState {
    local_id: i32,
    local_broker_epoch: i64,
    leader_epoch: i32,
    partition_epoch: i32,
    replicas: Vec<i32>,
    isr: Vec<i32>,
    pending: Option<PendingIsr>,
    high_watermark: i64,
    /// First offset written in `leader_epoch`: a follower below it has not caught up
    /// with this leader's log at all.
    epoch_start_offset: i64,
    followers: Vec<FollowerState>,
    min_insync_replicas: usize,
    lag_time_max: Duration,
    planted: PlantedBugs,
    /// No new proposal before this (after a failed one).
    retry_after: Option<Instant>,
}

/// Pause after a failed ISR change before the next proposal.
pub const ISR_RETRY_BACKOFF: Duration = Duration::from_millis(500);

/// Parameters of [`LeaderState::new`].
#[derive(Debug, Clone)]
pub struct BecomeLeader {
    /// This broker's id: the new leader.
    pub local_id: i32,
    /// This broker's epoch, the leader's entry in ISR proposals' `members`.
    pub local_broker_epoch: i64,
    /// The leader epoch this leadership starts.
    pub leader_epoch: i32,
    /// The partition epoch of the LeaderAndIsr state that made it leader.
    pub partition_epoch: i32,
    /// The replica set, the leader included.
    pub replicas: Vec<i32>,
    /// The committed ISR, the leader included.
    pub isr: Vec<i32>,
    /// The high watermark this replica had as a follower (or from its checkpoint).
    pub high_watermark: i64,
    /// The leader's LEO when it took office: the start of its epoch.
    pub log_end_offset: i64,
    /// The topic's `min.insync.replicas` (at least 1 is used): below it the high
    /// watermark freezes.
    pub min_insync_replicas: usize,
    /// The topic's `replica.lag.time.max.ms`: a follower not caught up within it is
    /// proposed out of the ISR.
    pub lag_time_max: Duration,
    /// Rules a simulation run undoes (none outside it).
    pub planted: PlantedBugs,
}

impl LeaderState {
    /// A replica becomes leader. ISR followers start as caught up *now* and others as
    /// never caught up: otherwise the new leader's first write would make healthy
    /// followers look stale before their first fetch arrives, and evict them.
    pub fn new(p: BecomeLeader, now: Instant) -> LeaderState {
        let followers = p
            .replicas
            .iter()
            .filter(|&&r| r != p.local_id)
            .map(|&r| FollowerState {
                broker_id: r,
                broker_epoch: None,
                log_end_offset: None,
                last_caught_up: p.isr.contains(&r).then_some(now),
                last_fetch: None,
            })
            .collect();
        let mut state = LeaderState {
            local_id: p.local_id,
            local_broker_epoch: p.local_broker_epoch,
            leader_epoch: p.leader_epoch,
            partition_epoch: p.partition_epoch,
            replicas: p.replicas,
            isr: p.isr,
            pending: None,
            high_watermark: p.high_watermark.min(p.log_end_offset).max(0),
            epoch_start_offset: p.log_end_offset,
            followers,
            min_insync_replicas: p.min_insync_replicas.max(1),
            lag_time_max: p.lag_time_max,
            retry_after: None,
            planted: p.planted,
        };
        // An ISR of one (or of followers known to be caught up) commits at once: a
        // new sole leader must not hide its own records behind a stale HW.
        state.maybe_advance_high_watermark(p.log_end_offset);
        state.check_invariants(p.log_end_offset);
        state
    }

    /// The partition epoch of the ISR this leader last had committed.
    pub fn partition_epoch(&self) -> i32 {
        self.partition_epoch
    }

    /// The high watermark.
    pub fn high_watermark(&self) -> i64 {
        self.high_watermark
    }

    /// The committed ISR.
    pub fn isr(&self) -> &[i32] {
        &self.isr
    }

    /// The assigned replicas, the leader included.
    pub fn replicas(&self) -> &[i32] {
        &self.replicas
    }

    /// The ISR change sent to the controller and not answered yet.
    pub fn pending(&self) -> Option<&PendingIsr> {
        self.pending.as_ref()
    }

    /// The followers as this leader sees them.
    pub fn followers(&self) -> &[FollowerState] {
        &self.followers
    }

    /// The `min.insync.replicas` in force (at least 1).
    pub fn min_insync_replicas(&self) -> usize {
        self.min_insync_replicas
    }

    /// Committed ISR ∪ proposed ISR: while a change is in flight, the larger set
    /// decides the high watermark, so that neither outcome of the proposal can leave
    /// the high watermark above what an ISR member has.
    pub fn maximal_isr(&self) -> Vec<i32> {
        let mut m = self.isr.clone();
        if let Some(p) = &self.pending {
            for r in &p.isr {
                if !m.contains(r) {
                    m.push(*r);
                }
            }
        }
        m
    }

    /// The committed ISR is smaller than `min.insync.replicas`: acks=all is refused
    /// and the high watermark is frozen.
    pub fn is_under_min_isr(&self) -> bool {
        self.isr.len() < self.min_insync_replicas
    }

    /// Checked before an acks=all append: Err(isr size) when it must be refused.
    pub fn check_enough_replicas(&self) -> Result<(), usize> {
        if self.is_under_min_isr() {
            Err(self.isr.len())
        } else {
            Ok(())
        }
    }

    /// The replicas an acknowledgement up to `required_offset` rests on: the leader
    /// and every ISR member known to have reached it. Below the high watermark
    /// that is every member: each was in the ISR when the high watermark passed
    /// the records, or joined having reached it. (The last fetch offset a
    /// follower sent is no proof the other way: a fetch held up in the network
    /// can arrive after later ones, with an older offset.)
    pub fn acked_isr(&self, required_offset: i64) -> Vec<i32> {
        if required_offset <= self.high_watermark {
            return self.maximal_isr();
        }
        self.maximal_isr()
            .into_iter()
            .filter(|&r| {
                r == self.local_id
                    || self
                        .follower(r)
                        .and_then(|f| f.log_end_offset)
                        .is_some_and(|leo| leo >= required_offset)
            })
            .collect()
    }

    fn follower(&self, id: i32) -> Option<&FollowerState> {
        self.followers.iter().find(|f| f.broker_id == id)
    }

    /// A follower's fetch `f` arrived: `f.fetch_offset` is its LEO, `f.leader_leo`
    /// the leader's LEO when the fetch was read, and `f.eligible` says whether the
    /// metadata shows the follower's broker unfenced in the epoch it fetched with
    /// (the controller would refuse it in the ISR otherwise). Returns `None` if the
    /// fetcher is not a replica.
    pub fn on_follower_fetch(
        &mut self,
        now: Instant,
        fetch: &FollowerFetch,
    ) -> Option<FollowerFetchOutcome> {
        let FollowerFetch {
            follower_id,
            broker_epoch,
            fetch_offset,
            leader_leo,
            eligible,
            ..
        } = *fetch;
        let high_watermark_to_send = self.high_watermark;
        let f = self
            .followers
            .iter_mut()
            .find(|f| f.broker_id == follower_id)?;
        if broker_epoch.is_some() {
            f.broker_epoch = broker_epoch;
        }
        f.log_end_offset = Some(fetch_offset);
        // In sync = caught up with the leader's LEO at some point within the lag time.
        // Rule 1: caught up right now. Rule 2: it has everything the leader had at its
        // previous fetch, so it was caught up as of then (under a steady stream of
        // small produces it can never equal the LEO at the instant of a fetch).
        if fetch_offset >= leader_leo {
            f.last_caught_up = f.last_caught_up.max(Some(now));
        } else if let Some((prev_time, prev_leo)) = f.last_fetch {
            if fetch_offset >= prev_leo && !self.planted.no_second_caught_up_rule {
                f.last_caught_up = f.last_caught_up.max(Some(prev_time));
            }
        }
        f.last_fetch = Some((now, leader_leo));

        let expand = if eligible {
            self.maybe_expand(now, follower_id, leader_leo)
        } else {
            None
        };
        let high_watermark_advanced = self.maybe_advance_high_watermark(leader_leo);
        self.check_invariants(leader_leo);
        Some(FollowerFetchOutcome {
            high_watermark_to_send,
            high_watermark_advanced,
            expand,
        })
    }

    /// The leader appended: with an ISR of one the high watermark follows at once.
    pub fn on_leader_append(&mut self, leader_leo: i64) -> bool {
        let advanced = self.maybe_advance_high_watermark(leader_leo);
        self.check_invariants(leader_leo);
        advanced
    }

    fn maybe_expand(&mut self, now: Instant, id: i32, leader_leo: i64) -> Option<IsrProposal> {
        if self.pending.is_some() || self.isr.contains(&id) || self.backing_off(now) {
            return None;
        }
        let f = self.follower(id)?;
        let caught_up_to_hw = f
            .log_end_offset
            .is_some_and(|leo| leo >= self.high_watermark && leo >= self.epoch_start_offset);
        if !caught_up_to_hw {
            return None;
        }
        // Under min ISR the high watermark is frozen, so "LEO ≥ HW" is too weak: the
        // follower would enter and leave the ISR over and over. Require it to be in
        // sync by the time rule as well.
        if self.is_under_min_isr() && !self.caught_up_within_lag(f, now) {
            return None;
        }
        let mut new_isr = self.isr.clone();
        new_isr.push(id);
        let evidence = IsrEvidence::of(f, now, leader_leo);
        Some(self.propose(IsrChangeKind::Expand, new_isr, vec![evidence]))
    }

    fn caught_up_within_lag(&self, f: &FollowerState, now: Instant) -> bool {
        f.last_caught_up
            .is_some_and(|t| now.saturating_duration_since(t) <= self.lag_time_max)
    }

    /// The periodic check (every lag time / 2): proposes removing each ISR follower
    /// that has not caught up within the lag time and is behind the leader's LEO.
    pub fn maybe_shrink(&mut self, now: Instant, leader_leo: i64) -> Option<IsrProposal> {
        if self.pending.is_some() || self.backing_off(now) {
            return None;
        }
        let out: Vec<IsrEvidence> = self
            .followers
            .iter()
            .filter(|f| self.isr.contains(&f.broker_id))
            .filter(|f| f.log_end_offset != Some(leader_leo) && !self.caught_up_within_lag(f, now))
            .map(|f| IsrEvidence::of(f, now, leader_leo))
            .collect();
        if out.is_empty() {
            return None;
        }
        let new_isr: Vec<i32> = self
            .isr
            .iter()
            .copied()
            .filter(|r| !out.iter().any(|o| o.broker_id == *r))
            .collect();
        Some(self.propose(IsrChangeKind::Shrink, new_isr, out))
    }

    fn propose(
        &mut self,
        kind: IsrChangeKind,
        new_isr: Vec<i32>,
        replicas: Vec<IsrEvidence>,
    ) -> IsrProposal {
        let members = new_isr
            .iter()
            .map(|&r| {
                if r == self.local_id {
                    (r, self.local_broker_epoch)
                } else {
                    let epoch = self.follower(r).and_then(|f| f.broker_epoch);
                    (r, epoch.unwrap_or(-1))
                }
            })
            .collect();
        let proposal = IsrProposal {
            kind,
            new_isr: new_isr.clone(),
            members,
            leader_epoch: self.leader_epoch,
            partition_epoch: self.partition_epoch,
            replicas,
        };
        self.pending = Some(PendingIsr {
            isr: new_isr,
            change: kind,
            proposal: proposal.clone(),
            resend_at: None,
        });
        proposal
    }

    /// The controller committed an ISR (from an AlterPartition answer or a
    /// LeaderAndIsr that keeps this replica leader in the same leader epoch). Returns
    /// whether the high watermark advanced. Stale or already-applied states (partition
    /// epoch not newer than ours) are ignored.
    pub fn on_isr_committed(
        &mut self,
        isr: Vec<i32>,
        partition_epoch: i32,
        leader_leo: i64,
    ) -> bool {
        if partition_epoch <= self.partition_epoch {
            return false;
        }
        self.isr = isr;
        self.partition_epoch = partition_epoch;
        self.pending = None;
        let advanced = self.maybe_advance_high_watermark(leader_leo);
        self.check_invariants(leader_leo);
        advanced
    }

    /// The controller committed a new replica set in this leader epoch (a
    /// reassignment, KIP-455) with `isr`: joining replicas become followers not
    /// heard from and never caught up (so each joins the ISR only once it has
    /// caught up); leaving ones are forgotten. An older partition epoch changes
    /// nothing. Returns whether the high watermark advanced.
    pub fn on_replicas_committed(
        &mut self,
        replicas: Vec<i32>,
        isr: Vec<i32>,
        partition_epoch: i32,
        leader_leo: i64,
    ) -> bool {
        if partition_epoch <= self.partition_epoch {
            return false;
        }
        self.followers.retain(|f| replicas.contains(&f.broker_id));
        for &r in &replicas {
            if r != self.local_id && self.follower(r).is_none() {
                self.followers.push(FollowerState {
                    broker_id: r,
                    broker_epoch: None,
                    log_end_offset: None,
                    last_caught_up: None,
                    last_fetch: None,
                });
            }
        }
        self.replicas = replicas;
        self.on_isr_committed(isr, partition_epoch, leader_leo)
    }

    /// The proposal was refused and not applied (INELIGIBLE_REPLICA: the
    /// controller says so, in the partition epoch the proposal names, and no
    /// controller can apply it later): the ISR is the committed one again, and
    /// the leader proposes again after a pause, so that a refused change is
    /// not re-sent on every fetch. Returns whether the high watermark advanced.
    pub fn on_isr_change_failed(&mut self, leader_leo: i64, now: Instant) -> bool {
        self.pending = None;
        self.retry_after = Some(now + ISR_RETRY_BACKOFF);
        self.maybe_advance_high_watermark(leader_leo)
    }

    /// Whether `sent` is the proposal pending (an answer to an older one, which
    /// an announcement overtook, decides nothing about this one).
    #[must_use]
    pub fn is_pending(&self, sent: &IsrProposal) -> bool {
        self.pending
            .as_ref()
            .is_some_and(|p| p.proposal.same_change(sent))
    }

    /// The answer left the pending proposal undecided (a lost request, a
    /// controller that moved, an epoch it knows newer than ours): it may have
    /// been applied, so it stays pending, and is sent again after a pause
    /// until an answer or an announcement decides it (Kafka's
    /// `handleAlterPartitionError` resets only on INELIGIBLE_REPLICA).
    pub fn resend_later(&mut self, now: Instant) {
        if let Some(p) = &mut self.pending {
            p.resend_at = Some(now + ISR_RETRY_BACKOFF);
        }
    }

    /// When the undecided pending proposal is to be sent again.
    #[must_use]
    pub fn resend_at(&self) -> Option<Instant> {
        self.pending.as_ref().and_then(|p| p.resend_at)
    }

    /// The pending proposal, when it is due to be sent again at `now`.
    pub fn due_resend(&mut self, now: Instant) -> Option<IsrProposal> {
        let p = self
            .pending
            .as_mut()
            .filter(|p| p.resend_at.is_some_and(|t| now >= t))?;
        p.resend_at = None;
        Some(p.proposal.clone())
    }

    fn backing_off(&self, now: Instant) -> bool {
        self.retry_after.is_some_and(|t| now < t)
    }

    /// Adopts the minimum ISR size of a changed topic config.
    pub fn set_min_insync_replicas(&mut self, min_insync_replicas: usize, leader_leo: i64) -> bool {
        self.min_insync_replicas = min_insync_replicas.max(1);
        self.maybe_advance_high_watermark(leader_leo)
    }

    /// Adopts the lag time of a changed topic config.
    pub fn set_lag_time_max(&mut self, lag_time_max: Duration) {
        self.lag_time_max = lag_time_max;
    }

    /// The rules a simulation run undoes, from a changed config.
    pub fn set_planted(&mut self, planted: PlantedBugs) {
        self.planted = planted;
    }

    /// The `replica.lag.time.max.ms` in force.
    pub fn lag_time_max(&self) -> Duration {
        self.lag_time_max
    }

    /// HW = min LEO over the maximal ISR; frozen while the committed ISR is below
    /// `min.insync.replicas`; never moves backwards.
    fn maybe_advance_high_watermark(&mut self, leader_leo: i64) -> bool {
        if self.is_under_min_isr() && !self.planted.no_min_isr_check {
            return false;
        }
        let mut candidate = leader_leo;
        for r in self.maximal_isr() {
            if r == self.local_id {
                continue;
            }
            match self.follower(r).and_then(|f| f.log_end_offset) {
                Some(leo) => candidate = candidate.min(leo),
                // Not heard from yet under this leader: its LEO is unknown.
                _ => return false,
            }
        }
        if candidate > self.high_watermark {
            self.high_watermark = candidate;
            true
        } else {
            false
        }
    }

    fn check_invariants(&self, leader_leo: i64) {
        debug_assert!(
            self.high_watermark <= leader_leo,
            "HW {} above LEO {}",
            self.high_watermark,
            leader_leo
        );
        debug_assert!(
            self.isr.contains(&self.local_id),
            "leader not in ISR {:?}",
            self.isr
        );
        debug_assert!(
            self.isr.iter().all(|r| self.replicas.contains(r)),
            "ISR {:?} not within replicas {:?}",
            self.isr,
            self.replicas
        );
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const LAG: Duration = Duration::from_millis(10_000);

    fn leader(isr: &[i32], leo: i64, hw: i64, min_isr: usize, now: Instant) -> LeaderState {
        LeaderState::new(
            BecomeLeader {
                local_id: 1,
                local_broker_epoch: 10,
                leader_epoch: 5,
                partition_epoch: 7,
                replicas: vec![1, 2, 3],
                isr: isr.to_vec(),
                high_watermark: hw,
                log_end_offset: leo,
                min_insync_replicas: min_isr,
                lag_time_max: LAG,
                planted: PlantedBugs::default(),
            },
            now,
        )
    }

    /// Follower `id`'s fetch at `offset` with broker epoch `epoch`, the leader's LEO
    /// being `leo` (leader epoch 5, as [`leader`]).
    fn fetch(id: i32, epoch: i64, offset: i64, leo: i64, eligible: bool) -> FollowerFetch {
        FollowerFetch {
            follower_id: id,
            broker_epoch: (epoch >= 0).then_some(epoch),
            fetch_offset: offset,
            leader_leo: leo,
            request_epoch: 5,
            eligible,
        }
    }

    fn ms(n: u64) -> Duration {
        Duration::from_millis(n)
    }

    #[test]
    fn isr_followers_start_caught_up_and_others_never() {
        let t0 = Instant::now();
        let s = leader(&[1, 2], 10, 10, 1, t0);
        assert_eq!(s.follower(2).unwrap().last_caught_up, Some(t0));
        assert_eq!(s.follower(3).unwrap().last_caught_up, None);
        // A write right after becoming leader does not make follower 2 stale.
        let mut s = s;
        assert_eq!(s.maybe_shrink(t0 + ms(1), 20), None);
    }

    #[test]
    fn high_watermark_is_min_leo_of_the_isr_and_sent_one_round_late() {
        let t0 = Instant::now();
        let mut s = leader(&[1, 2, 3], 100, 100, 1, t0);
        // Leader appended up to 110; followers fetch at 100 (they have nothing new).
        assert!(!s.on_leader_append(110));
        let o = s
            .on_follower_fetch(t0, &fetch(2, 20, 100, 110, true))
            .unwrap();
        assert_eq!(o.high_watermark_to_send, 100);
        assert!(!o.high_watermark_advanced);
        s.on_follower_fetch(t0, &fetch(3, 30, 100, 110, true))
            .unwrap();
        // Follower 2's next fetch at 110 says it has the records: HW still waits for 3.
        let o = s
            .on_follower_fetch(t0 + ms(1), &fetch(2, 20, 110, 110, true))
            .unwrap();
        assert!(!o.high_watermark_advanced);
        assert_eq!(s.high_watermark(), 100);
        // acks=all completes only when the followers' *next* fetch arrives.
        let o = s
            .on_follower_fetch(t0 + ms(2), &fetch(3, 30, 110, 110, true))
            .unwrap();
        assert!(o.high_watermark_advanced);
        assert_eq!(
            o.high_watermark_to_send, 100,
            "the response carries the old HW"
        );
        assert_eq!(s.high_watermark(), 110);
        assert_eq!(s.acked_isr(110), vec![1, 2, 3]);
    }

    #[test]
    fn high_watermark_never_moves_backwards() {
        let t0 = Instant::now();
        let mut s = leader(&[1, 2], 50, 50, 1, t0);
        s.on_follower_fetch(t0, &fetch(2, 20, 50, 60, true))
            .unwrap();
        // A restarted follower reports a smaller LEO.
        s.on_follower_fetch(t0, &fetch(2, 21, 30, 60, true))
            .unwrap();
        assert_eq!(s.high_watermark(), 50);
    }

    #[test]
    fn high_watermark_waits_for_followers_not_heard_from() {
        let t0 = Instant::now();
        let mut s = leader(&[1, 2], 50, 40, 1, t0);
        assert!(!s.on_leader_append(60));
        assert_eq!(s.high_watermark(), 40);
    }

    #[test]
    fn sole_leader_commits_its_log_when_it_takes_office() {
        let t0 = Instant::now();
        let s = leader(&[1], 10, 4, 1, t0);
        assert_eq!(s.high_watermark(), 10);
        // With followers in the ISR, their LEOs are unknown: HW waits for them.
        let s = leader(&[1, 2], 10, 4, 1, t0);
        assert_eq!(s.high_watermark(), 4);
    }

    #[test]
    fn isr_of_one_advances_on_append() {
        let t0 = Instant::now();
        let mut s = leader(&[1], 0, 0, 1, t0);
        assert!(s.on_leader_append(5));
        assert_eq!(s.high_watermark(), 5);
        assert_eq!(s.acked_isr(5), vec![1]);
    }

    #[test]
    fn high_watermark_frozen_under_min_isr() {
        let t0 = Instant::now();
        let mut s = leader(&[1], 0, 0, 2, t0);
        assert!(!s.on_leader_append(5));
        assert_eq!(s.high_watermark(), 0);
        assert_eq!(s.check_enough_replicas(), Err(1));
        // Back to two in sync: it advances again.
        s.on_follower_fetch(t0, &fetch(2, 20, 5, 5, true)).unwrap();
        let proposal = s.pending().cloned().unwrap();
        assert_eq!(proposal.isr, vec![1, 2]);
        assert!(s.on_isr_committed(vec![1, 2], 8, 5));
        assert_eq!(s.high_watermark(), 5);
    }

    #[test]
    fn no_shrink_when_previous_fetch_had_caught_up() {
        // Kafka's PartitionTest: "shrink not done if previous fetch caught up".
        let t0 = Instant::now();
        let mut s = leader(&[1, 2, 3], 0, 0, 1, t0);
        s.on_follower_fetch(t0, &fetch(3, 30, 0, 0, true)).unwrap();
        // Steady small produces: at every fetch the leader is one batch ahead.
        let mut leo = 0;
        let mut t = t0;
        for _ in 0..50 {
            let prev = leo;
            leo += 10;
            t += ms(1_000);
            // Follower 2 always has what the leader had at its previous fetch.
            s.on_follower_fetch(t, &fetch(2, 20, prev, leo, true))
                .unwrap();
            s.on_follower_fetch(t, &fetch(3, 30, prev, leo, true))
                .unwrap();
        }
        assert_eq!(
            s.maybe_shrink(t, leo),
            None,
            "a follower keeping up must stay"
        );
    }

    /// Each field of [`PlantedBugs`] removes exactly its rule: the scenarios
    /// above hold with none planted and break with it (what the simulation's
    /// planted runs rely on).
    #[test]
    fn each_planted_bug_undoes_its_rule() {
        let t0 = Instant::now();
        let under_min_isr_hw = |planted| {
            let mut s = leader(&[1], 0, 0, 2, t0);
            s.set_planted(planted);
            s.on_leader_append(5);
            s.high_watermark()
        };
        let no_min_isr_check = PlantedBugs {
            no_min_isr_check: true,
            ..PlantedBugs::default()
        };
        assert_eq!(under_min_isr_hw(PlantedBugs::default()), 0);
        assert_eq!(under_min_isr_hw(no_min_isr_check), 5);

        let steady_follower_shrunk = |planted| {
            let mut s = leader(&[1, 2], 0, 0, 1, t0);
            s.set_planted(planted);
            let (mut leo, mut t) = (0, t0);
            for _ in 0..50 {
                let prev = leo;
                leo += 10;
                t += ms(1_000);
                s.on_follower_fetch(t, &fetch(2, 20, prev, leo, true))
                    .unwrap();
            }
            s.maybe_shrink(t, leo).is_some()
        };
        let no_second_rule = PlantedBugs {
            no_second_caught_up_rule: true,
            ..PlantedBugs::default()
        };
        assert!(!steady_follower_shrunk(PlantedBugs::default()));
        assert!(steady_follower_shrunk(no_second_rule));
    }

    #[test]
    fn shrink_after_the_lag_time_only() {
        let t0 = Instant::now();
        let mut s = leader(&[1, 2, 3], 0, 0, 1, t0);
        s.on_follower_fetch(t0, &fetch(2, 20, 0, 0, true)).unwrap();
        s.on_follower_fetch(t0, &fetch(3, 30, 0, 0, true)).unwrap();
        s.on_leader_append(100);
        // Follower 3 keeps fetching; follower 2 went silent.
        for i in 1..=10 {
            s.on_follower_fetch(t0 + ms(i * 1_000), &fetch(3, 30, 100, 100, true))
                .unwrap();
        }
        assert_eq!(
            s.maybe_shrink(t0 + LAG, 100),
            None,
            "exactly the lag time is still in sync"
        );
        let p = s.maybe_shrink(t0 + LAG + ms(1), 100).unwrap();
        assert_eq!(p.kind, IsrChangeKind::Shrink);
        assert_eq!(p.new_isr, vec![1, 3]);
        assert_eq!(p.members, vec![(1, 10), (3, 30)]);
        assert_eq!(
            p.replicas,
            vec![IsrEvidence {
                broker_id: 2,
                since_caught_up: Some(ms(10_001)),
                lag: 100
            }]
        );
        assert_eq!((p.leader_epoch, p.partition_epoch), (5, 7));
    }

    #[test]
    fn idle_partition_with_caught_up_follower_does_not_shrink() {
        let t0 = Instant::now();
        let mut s = leader(&[1, 2], 100, 100, 1, t0);
        s.on_follower_fetch(t0, &fetch(2, 20, 100, 100, true))
            .unwrap();
        // No fetch for a long time, but it has everything the leader has.
        assert_eq!(s.maybe_shrink(t0 + LAG * 3, 100), None);
    }

    #[test]
    fn no_expand_or_second_proposal_while_a_change_is_in_flight() {
        let t0 = Instant::now();
        let mut s = leader(&[1, 2], 100, 100, 1, t0);
        s.on_follower_fetch(t0, &fetch(2, 20, 100, 100, true))
            .unwrap();
        let p = s.maybe_shrink(t0 + LAG * 2, 200);
        assert!(p.is_some());
        // Follower 3 catches up while the shrink is pending: no expand yet.
        let o = s
            .on_follower_fetch(t0 + LAG * 2, &fetch(3, 30, 200, 200, true))
            .unwrap();
        assert_eq!(o.expand, None);
        assert_eq!(s.maybe_shrink(t0 + LAG * 3, 200), None);
        // Committed: now it may expand.
        s.on_isr_committed(vec![1], 8, 200);
        let o = s
            .on_follower_fetch(t0 + LAG * 3, &fetch(3, 30, 200, 200, true))
            .unwrap();
        assert_eq!(o.expand.unwrap().new_isr, vec![1, 3]);
    }

    #[test]
    fn expand_needs_leo_at_hw_and_at_the_epoch_start() {
        let t0 = Instant::now();
        // Became leader at LEO 100 with HW 80.
        let mut s = leader(&[1, 2], 100, 80, 1, t0);
        // Follower 3 has 90: ≥ HW but below the start of the leader's epoch.
        let o = s
            .on_follower_fetch(t0, &fetch(3, 30, 90, 100, true))
            .unwrap();
        assert_eq!(o.expand, None);
        // Below HW: no.
        let o = s
            .on_follower_fetch(t0, &fetch(3, 30, 70, 100, true))
            .unwrap();
        assert_eq!(o.expand, None);
        // At the epoch start and ≥ HW: yes.
        let o = s
            .on_follower_fetch(t0, &fetch(3, 30, 100, 100, true))
            .unwrap();
        let p = o.expand.unwrap();
        assert_eq!(p.kind, IsrChangeKind::Expand);
        assert_eq!(p.new_isr, vec![1, 2, 3]);
        assert_eq!(p.members, vec![(1, 10), (2, -1), (3, 30)]);
    }

    #[test]
    fn under_min_isr_expand_also_needs_the_time_rule() {
        let t0 = Instant::now();
        let mut s = leader(&[1], 100, 100, 2, t0);
        s.on_leader_append(200);
        // Follower 2 is at HW (100) but far behind the LEO and never caught up.
        let o = s
            .on_follower_fetch(t0, &fetch(2, 20, 100, 200, true))
            .unwrap();
        assert_eq!(o.expand, None);
        // Once caught up with the LEO it may rejoin.
        let o = s
            .on_follower_fetch(t0 + ms(5), &fetch(2, 20, 200, 200, true))
            .unwrap();
        assert!(o.expand.is_some());
    }

    #[test]
    fn maximal_isr_holds_the_high_watermark_during_an_expand() {
        let t0 = Instant::now();
        let mut s = leader(&[1, 2], 100, 100, 1, t0);
        s.on_follower_fetch(t0, &fetch(2, 20, 100, 100, true))
            .unwrap();
        let o = s
            .on_follower_fetch(t0, &fetch(3, 30, 100, 100, true))
            .unwrap();
        assert!(o.expand.is_some());
        s.on_leader_append(150);
        s.on_follower_fetch(t0, &fetch(2, 20, 150, 150, true))
            .unwrap();
        // 3 is in the proposed ISR but still at 100: HW must not pass it.
        assert_eq!(s.high_watermark(), 100);
        s.on_follower_fetch(t0, &fetch(3, 30, 150, 150, true))
            .unwrap();
        assert_eq!(s.high_watermark(), 150);
    }

    #[test]
    fn stale_commit_is_ignored_and_failure_clears_pending() {
        let t0 = Instant::now();
        let mut s = leader(&[1, 2, 3], 0, 0, 1, t0);
        assert!(s.maybe_shrink(t0 + LAG * 2, 10).is_some());
        assert!(!s.on_isr_committed(vec![1], 6, 10));
        assert_eq!(s.isr(), &[1, 2, 3]);
        assert!(s.pending().is_some());
        s.on_isr_change_failed(10, t0);
        assert!(s.pending().is_none());
    }

    #[test]
    fn ineligible_followers_are_not_proposed_and_refusals_back_off() {
        let t0 = Instant::now();
        let mut s = leader(&[1, 2], 100, 100, 1, t0);
        // Caught up, but fenced (or fetching with a stale broker epoch).
        let o = s
            .on_follower_fetch(t0, &fetch(3, 30, 100, 100, false))
            .unwrap();
        assert_eq!(o.expand, None);
        // Eligible: proposed; the controller refuses; no new proposal on every fetch.
        assert!(s
            .on_follower_fetch(t0, &fetch(3, 30, 100, 100, true))
            .unwrap()
            .expand
            .is_some());
        s.on_isr_change_failed(100, t0);
        let soon = t0 + ISR_RETRY_BACKOFF / 2;
        assert_eq!(
            s.on_follower_fetch(soon, &fetch(3, 30, 100, 100, true))
                .unwrap()
                .expand,
            None
        );
        let later = t0 + ISR_RETRY_BACKOFF;
        assert!(s
            .on_follower_fetch(later, &fetch(3, 30, 100, 100, true))
            .unwrap()
            .expand
            .is_some());
    }

    #[test]
    fn a_refused_shrink_is_proposed_again_after_the_backoff() {
        let t0 = Instant::now();
        let mut s = leader(&[1, 2], 100, 100, 1, t0);
        let t1 = t0 + LAG * 2;
        assert!(s.maybe_shrink(t1, 300).is_some());
        s.on_isr_change_failed(300, t1);
        assert_eq!(s.maybe_shrink(t1 + ISR_RETRY_BACKOFF / 2, 300), None);
        assert!(s.maybe_shrink(t1 + ISR_RETRY_BACKOFF, 300).is_some());
    }

    #[test]
    fn unknown_replica_fetch_is_refused() {
        let t0 = Instant::now();
        let mut s = leader(&[1, 2, 3], 0, 0, 1, t0);
        assert_eq!(s.on_follower_fetch(t0, &fetch(9, 1, 0, 0, true)), None);
    }

    #[test]
    fn acked_isr_names_only_members_with_the_records() {
        let t0 = Instant::now();
        let mut s = leader(&[1, 2, 3], 10, 10, 1, t0);
        s.on_follower_fetch(t0, &fetch(2, 20, 20, 20, true))
            .unwrap();
        s.on_follower_fetch(t0, &fetch(3, 30, 15, 20, true))
            .unwrap();
        assert_eq!(s.acked_isr(20), vec![1, 2]);
        assert_eq!(s.acked_isr(15), vec![1, 2, 3]);
    }

    #[test]
    fn a_late_fetch_with_an_older_offset_does_not_shrink_the_acked_isr() {
        // Found by the simulation (seed 105061): a fetch held up by a cut
        // arrived after the follower's later fetches had moved the high
        // watermark, and the acknowledgement then named the leader alone.
        let t0 = Instant::now();
        let mut s = leader(&[1, 2], 30, 10, 2, t0);
        s.on_follower_fetch(t0, &fetch(2, 20, 30, 30, true))
            .unwrap();
        assert_eq!(s.high_watermark(), 30);
        s.on_follower_fetch(t0, &fetch(2, 20, 12, 30, true))
            .unwrap();
        assert_eq!(s.acked_isr(30), vec![1, 2]);
        assert_eq!(s.high_watermark(), 30, "the high watermark never goes back");
    }
}
