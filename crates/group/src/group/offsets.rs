//! Offset commits, fetches and retention.

use super::{Committed, Group, Outbox, State, Timer, Waiter, EMPTY_GROUP_LINGER_MS};
use crate::api::{CommitOffset, CommitRequest, CommitResponse, FetchedOffset, Reply, RequestId};
use crate::config::GroupConfig;
use crate::error;
use crate::record::{OffsetValue, Record};

impl Group {
    /// OffsetCommit, for a group that exists (a simple commit to an unknown group has
    /// just created it).
    pub(crate) fn commit(
        &mut self,
        cfg: &GroupConfig,
        id: RequestId,
        req: CommitRequest,
        now: i64,
        out: &mut Outbox,
    ) {
        let refusal = if req.generation_id >= 0 || !req.member_id.is_empty() {
            if !self.members.contains_key(&req.member_id) {
                Some(error::UNKNOWN_MEMBER_ID)
            } else if req.generation_id != self.generation {
                Some(error::ILLEGAL_GENERATION)
            } else {
                None
            }
        } else if self.state != State::Empty {
            // Only members commit for a group that has some.
            Some(error::UNKNOWN_MEMBER_ID)
        } else {
            None
        };
        // Joined but not yet assigned: the member cannot own what it commits. During
        // PreparingRebalance commits are still taken (as Kafka does since 2.x), so that
        // an eager consumer can commit what it is about to give up.
        let refusal = refusal
            .or((self.state == State::CompletingRebalance).then_some(error::REBALANCE_IN_PROGRESS));
        if let Some(code) = refusal {
            out.reply(id, Reply::Commit(refused(&req.offsets, code)));
            return;
        }
        self.schedule_session(&req.member_id, now);
        self.store(cfg, id, req.offsets, now, out);
    }

    fn store(
        &mut self,
        cfg: &GroupConfig,
        id: RequestId,
        offsets: Vec<CommitOffset>,
        now: i64,
        out: &mut Outbox,
    ) {
        let mut partitions = Vec::with_capacity(offsets.len());
        let mut records = Vec::new();
        let mut values = Vec::new();
        for o in offsets {
            let metadata = o.metadata.unwrap_or_default();
            // Kafka measures the metadata as a Java string: in UTF-16 code units.
            if metadata.encode_utf16().count() > cfg.offset_metadata_max_bytes {
                partitions.push((o.topic, o.partition, Some(error::OFFSET_METADATA_TOO_LARGE)));
                continue;
            }
            let value = OffsetValue {
                offset: o.offset,
                leader_epoch: o.leader_epoch,
                metadata,
                commit_timestamp_ms: now,
            };
            *self
                .pending_commits
                .entry((o.topic.clone(), o.partition))
                .or_default() += 1;
            records.push(Record::Offset {
                group_id: self.id.clone(),
                topic: o.topic.clone(),
                partition: o.partition,
                value: Some(value.clone()),
            });
            values.push((o.topic.clone(), o.partition, value));
            partitions.push((o.topic, o.partition, None));
        }
        if records.is_empty() {
            let partitions = partitions
                .into_iter()
                .map(|(topic, partition, code)| (topic, partition, code.unwrap_or(error::NONE)))
                .collect();
            out.reply(id, Reply::Commit(CommitResponse { partitions }));
            return;
        }
        let waiter = Waiter::Commit {
            request: id,
            partitions,
            offsets: values,
        };
        out.persist(&self.id, records, Some(waiter));
    }

    /// A commit's append finished: its offsets count once durable, unless a later
    /// append already wrote the partition (within one append, the later record wins,
    /// as in a replay).
    pub(crate) fn commit_appended(
        &mut self,
        offsets: Vec<(String, i32, OffsetValue)>,
        append: u64,
        durable: bool,
    ) {
        for (topic, partition, value) in offsets {
            let key = (topic, partition);
            if let Some(n) = self.pending_commits.get_mut(&key) {
                *n = n.saturating_sub(1);
                if *n == 0 {
                    self.pending_commits.remove(&key);
                }
            }
            if durable
                && self
                    .offsets
                    .get(&key)
                    .is_none_or(|c| c.written_by <= append)
            {
                let committed = Committed {
                    value,
                    written_by: append,
                };
                self.offsets.insert(key, committed);
            }
        }
    }

    /// OffsetFetch: the listed partitions (`None`: every committed one).
    pub(crate) fn fetch(&self, partitions: Option<Vec<(String, Vec<i32>)>>) -> Vec<FetchedOffset> {
        let fetched = |(topic, partition): (&String, i32), c: &Committed| FetchedOffset {
            topic: topic.clone(),
            partition,
            offset: c.value.offset,
            leader_epoch: c.value.leader_epoch,
            metadata: c.value.metadata.clone(),
            error: error::NONE,
        };
        match partitions {
            None => self
                .offsets
                .iter()
                .map(|((topic, partition), c)| fetched((topic, *partition), c))
                .collect(),
            Some(topics) => topics
                .into_iter()
                .flat_map(|(topic, partitions)| {
                    partitions.into_iter().map(move |p| (topic.clone(), p))
                })
                .map(|key| match self.offsets.get(&key) {
                    Some(c) => fetched((&key.0, key.1), c),
                    None => FetchedOffset::none(key.0, key.1),
                })
                .collect(),
        }
    }

    /// When an offset of an Empty group expires. As Kafka (KIP-211), retention counts
    /// from when the group became Empty: its consumers may have committed a partition
    /// long ago and never since, and the offset stays valid while they run. A commit
    /// made while Empty (a simple consumer, an admin reset) counts from itself.
    fn expires_at(&self, c: &Committed, cfg: &GroupConfig) -> i64 {
        let committed = c.value.commit_timestamp_ms;
        let base = self
            .state_timestamp_ms
            .map_or(committed, |became| became.max(committed));
        base.saturating_add(cfg.offsets_retention_ms)
    }

    /// Sets the Expire timer: the first offset to expire, or, for a vacant group, its
    /// removal. Only Empty groups expire (Kafka also expires a Stable consumer group's
    /// offsets of topics it no longer subscribes to; that needs the consumer protocol,
    /// which the coordinator does not parse).
    pub(crate) fn refresh_expiry(&mut self, cfg: &GroupConfig, now: i64) {
        let at = if self.state == State::Empty {
            self.offsets
                .iter()
                .filter(|(key, _)| !self.pending_commits.contains_key(*key))
                .map(|(_, c)| self.expires_at(c, cfg))
                .min()
                .or_else(|| {
                    self.is_vacant().then(|| {
                        self.state_timestamp_ms
                            .unwrap_or(now)
                            .saturating_add(EMPTY_GROUP_LINGER_MS)
                    })
                })
        } else {
            None
        };
        match at {
            Some(at) => self.timers.set(Timer::Expire, at),
            None => self.timers.clear(&Timer::Expire),
        }
    }

    /// Removes the expired offsets with tombstones, and the group itself if nothing is
    /// left (as Kafka, in the same pass). True if the group is gone.
    pub(super) fn expire(&mut self, cfg: &GroupConfig, now: i64, out: &mut Outbox) -> bool {
        if self.state != State::Empty {
            return false;
        }
        let expired: Vec<(String, i32)> = self
            .offsets
            .iter()
            .filter(|(key, c)| {
                !self.pending_commits.contains_key(*key) && self.expires_at(c, cfg) <= now
            })
            .map(|(key, _)| key.clone())
            .collect();
        let mut records = Vec::with_capacity(expired.len() + 1);
        for key in expired {
            self.offsets.remove(&key);
            records.push(Record::Offset {
                group_id: self.id.clone(),
                topic: key.0,
                partition: key.1,
                value: None,
            });
        }
        let gone = self.is_vacant();
        // Generation 0 never had its metadata written.
        if gone && self.generation > 0 {
            records.push(Record::Group {
                group_id: self.id.clone(),
                value: None,
            });
        }
        if !records.is_empty() {
            out.persist(&self.id, records, None);
        }
        if !gone {
            self.refresh_expiry(cfg, now);
        }
        gone
    }
}

/// The same error for every partition of a commit.
pub(crate) fn refused(offsets: &[CommitOffset], code: i16) -> CommitResponse {
    CommitResponse {
        partitions: offsets
            .iter()
            .map(|o| (o.topic.clone(), o.partition, code))
            .collect(),
    }
}
