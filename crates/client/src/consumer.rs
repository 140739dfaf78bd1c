//! The consumer: reads assigned partitions from their leaders.
//!
//! Each poll keeps one fetch outstanding per leader broker, covering every
//! assigned partition that broker leads; a fetch still in flight when a poll
//! returns is picked up by the next poll (the broker long-polls up to
//! `fetch_max_wait_ms`). A response's records for a partition are used only if
//! its position has not moved (by a seek) since the fetch was sent.

use std::collections::{BTreeMap, BTreeSet, HashMap, HashSet};
use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use futures::future::BoxFuture;
use futures::stream::FuturesUnordered;
use futures::{FutureExt, StreamExt};
use syncline_proto::batch::{self, BatchError};
use syncline_proto::{pb, ErrorCode, CONSUMER_REPLICA_ID, EARLIEST_TIMESTAMP, LATEST_TIMESTAMP};
use tokio::time::Instant;

use crate::cluster::{expect_body, Cluster};
use crate::config::{AutoOffsetReset, ConsumerConfig};
use crate::error::ClientError;
use crate::record::{ConsumerRecord, Header};
use syncline_proto::TopicPartition;

/// Where a partition will be read from next.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Position {
    /// The next offset to fetch.
    Offset(i64),
    /// To be looked up with ListOffsets (`EARLIEST_TIMESTAMP` or `LATEST_TIMESTAMP`).
    Reset(i64),
    /// Never set: `auto_offset_reset` decides.
    Unset,
}

/// A fetch that came back (or failed).
struct FetchDone {
    broker: i32,
    /// The partitions asked for, with the offset each was fetched from.
    sent: Vec<(TopicPartition, i64)>,
    result: Result<pb::FetchResponse, ClientError>,
}

/// Reads records from assigned partitions.
///
/// ```no_run
/// # async fn example() -> Result<(), syncline_client::ClientError> {
/// use std::time::Duration;
/// use syncline_client::{Consumer, ConsumerConfig, TopicPartition};
///
/// let mut consumer = Consumer::new(ConsumerConfig::new("127.0.0.1:9092"))?;
/// let tp = TopicPartition::new("events", 0);
/// consumer.assign(vec![tp.clone()]);
/// consumer.seek_to_beginning(std::slice::from_ref(&tp))?;
/// for record in consumer.poll(Duration::from_secs(1)).await? {
///     println!("{} {:?}", record.offset, record.value);
/// }
/// # Ok(()) }
/// ```
pub struct Consumer {
    config: ConsumerConfig,
    cluster: Arc<Cluster>,
    assignment: BTreeMap<TopicPartition, Position>,
    in_flight: FuturesUnordered<BoxFuture<'static, FetchDone>>,
    /// Brokers with a fetch outstanding.
    fetching: HashSet<i32>,
    /// Brokers whose last fetch failed, and when to try them again.
    broker_backoff: HashMap<i32, Instant>,
    refresh_wanted: bool,
    last_refresh: Option<Instant>,
    /// Replicas the leaders sent this consumer to (KIP-392), until when.
    preferred: HashMap<TopicPartition, (i32, Instant)>,
}

impl std::fmt::Debug for Consumer {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Consumer")
            .field("assignment", &self.assignment)
            .field("fetching", &self.fetching)
            .finish_non_exhaustive()
    }
}

impl Consumer {
    /// A consumer with no assignment; connects on first use.
    pub fn new(config: ConsumerConfig) -> Result<Consumer, ClientError> {
        config.validate()?;
        let cluster = Cluster::new(config.client.clone())?;
        Ok(Self::with_cluster(config, cluster))
    }

    fn with_cluster(config: ConsumerConfig, cluster: Arc<Cluster>) -> Consumer {
        Consumer {
            config,
            cluster,
            assignment: BTreeMap::new(),
            in_flight: FuturesUnordered::new(),
            fetching: HashSet::new(),
            broker_backoff: HashMap::new(),
            refresh_wanted: false,
            last_refresh: None,
            preferred: HashMap::new(),
        }
    }

    pub(crate) fn cluster(&self) -> &Arc<Cluster> {
        &self.cluster
    }

    pub(crate) fn config(&self) -> &ConsumerConfig {
        &self.config
    }

    /// The assigned partitions whose next offset is known (what a group
    /// member commits).
    pub(crate) fn known_positions(&self) -> Vec<(TopicPartition, i64)> {
        self.assignment
            .iter()
            .filter_map(|(tp, p)| match p {
                Position::Offset(o) => Some((tp.clone(), *o)),
                _ => None,
            })
            .collect()
    }

    /// Partition numbers of `topic`, waiting up to `request_timeout_ms` for a
    /// topic created a moment ago.
    pub async fn partitions_for(&self, topic: &str) -> Result<Vec<i32>, ClientError> {
        let deadline = Instant::now() + self.config.client.request_timeout();
        self.cluster.wait_for_topic(topic, deadline).await?;
        Ok(self.cluster.with_metadata(|m| {
            m.topic(topic)
                .map(|t| t.partitions.iter().map(|p| p.partition).collect())
                .unwrap_or_default()
        }))
    }

    /// Reads exactly these partitions from now on. Partitions already assigned keep
    /// their positions; new ones start per `auto_offset_reset` unless sought.
    pub fn assign(&mut self, partitions: Vec<TopicPartition>) {
        let mut next = BTreeMap::new();
        for tp in partitions {
            let position = self.assignment.get(&tp).copied().unwrap_or(Position::Unset);
            next.insert(tp, position);
        }
        self.assignment = next;
        let known = self
            .cluster
            .with_metadata(|m| self.assignment.keys().all(|tp| m.partition(tp).is_some()));
        self.refresh_wanted |= !known;
    }

    /// The assigned partitions.
    pub fn assignment(&self) -> Vec<TopicPartition> {
        self.assignment.keys().cloned().collect()
    }

    fn set_position(&mut self, tp: &TopicPartition, position: Position) -> Result<(), ClientError> {
        match self.assignment.get_mut(tp) {
            Some(p) => {
                *p = position;
                Ok(())
            }
            None => Err(ClientError::NotAssigned {
                topic: tp.topic.to_string(),
                partition: tp.partition,
            }),
        }
    }

    /// Reads `tp` from `offset` next.
    pub fn seek(&mut self, tp: &TopicPartition, offset: i64) -> Result<(), ClientError> {
        self.set_position(tp, Position::Offset(offset))
    }

    /// Reads these partitions from their log start offset next.
    pub fn seek_to_beginning(&mut self, partitions: &[TopicPartition]) -> Result<(), ClientError> {
        partitions
            .iter()
            .try_for_each(|tp| self.set_position(tp, Position::Reset(EARLIEST_TIMESTAMP)))
    }

    /// Reads these partitions from their high watermark next (only new records).
    pub fn seek_to_end(&mut self, partitions: &[TopicPartition]) -> Result<(), ClientError> {
        partitions
            .iter()
            .try_for_each(|tp| self.set_position(tp, Position::Reset(LATEST_TIMESTAMP)))
    }

    /// The offset of the next record `poll` returns for `tp`, looking it up if a
    /// seek to the beginning or end (or `auto_offset_reset`) is pending.
    pub async fn position(&mut self, tp: &TopicPartition) -> Result<i64, ClientError> {
        let deadline = Instant::now() + self.config.client.request_timeout();
        let backoff = self.config.client.retry_backoff();
        let mut failures = 0;
        loop {
            match self.assignment.get(tp) {
                None => {
                    return Err(ClientError::NotAssigned {
                        topic: tp.topic.to_string(),
                        partition: tp.partition,
                    })
                }
                Some(Position::Offset(o)) => return Ok(*o),
                Some(_) => {}
            }
            self.refresh_metadata_if_wanted(true).await?;
            self.resolve_positions().await?;
            let wake = Instant::now() + backoff.delay(failures);
            failures += 1;
            if matches!(self.assignment.get(tp), Some(Position::Offset(_))) {
                continue;
            }
            if wake >= deadline {
                return Err(ClientError::Timeout(self.config.client.request_timeout_ms));
            }
            tokio::time::sleep_until(wake).await;
        }
    }

    /// Waits up to `timeout` for records and returns those that arrived (possibly
    /// none). Records of one partition come in offset order.
    pub async fn poll(&mut self, timeout: Duration) -> Result<Vec<ConsumerRecord>, ClientError> {
        let deadline = Instant::now() + timeout;
        loop {
            self.refresh_metadata_if_wanted(false).await?;
            self.resolve_positions().await?;
            self.send_fetches();

            let mut records = Vec::new();
            if self.in_flight.is_empty() {
                // Nothing to fetch from (no leader known, brokers backing off):
                // wait for the next chance, not past the deadline.
                let wake = self.next_retry(Instant::now()).min(deadline);
                tokio::time::sleep_until(wake).await;
            } else {
                let first = tokio::time::timeout_at(deadline, self.in_flight.next()).await;
                if let Ok(Some(done)) = first {
                    self.handle(done, &mut records)?;
                }
                // Take whatever else has already arrived.
                while let Some(Some(done)) = self.in_flight.next().now_or_never() {
                    self.handle(done, &mut records)?;
                }
            }
            if !records.is_empty() || Instant::now() >= deadline {
                return Ok(records);
            }
        }
    }

    fn next_retry(&self, now: Instant) -> Instant {
        let refresh_at = self.last_refresh.map_or(now, |t| {
            t + Duration::from_millis(self.config.client.retry_backoff_ms)
        });
        self.broker_backoff
            .values()
            .copied()
            .chain([refresh_at.max(now + Duration::from_millis(1))])
            .min()
            .unwrap_or(now)
    }

    fn topics(&self) -> Vec<String> {
        let topics: BTreeSet<&str> = self.assignment.keys().map(|tp| &*tp.topic).collect();
        topics.into_iter().map(str::to_owned).collect()
    }

    /// Refreshes metadata when an error asked for it (at most once per
    /// `retry_backoff_ms`, unless `force`) or when it is older than
    /// `metadata_max_age_ms`.
    async fn refresh_metadata_if_wanted(&mut self, force: bool) -> Result<(), ClientError> {
        let now = Instant::now();
        if self.assignment.is_empty() {
            return Ok(());
        }
        let aged = self
            .cluster
            .with_metadata(|m| m.needs_refresh(now, self.config.client.metadata_max_age_ms));
        let allowed = force
            || self.last_refresh.is_none_or(|t| {
                now >= t + Duration::from_millis(self.config.client.retry_backoff_ms)
            });
        if !(aged || self.refresh_wanted) || !allowed {
            return Ok(());
        }
        self.last_refresh = Some(now);
        match self.cluster.refresh_metadata(self.topics()).await {
            Ok(_) => {
                self.refresh_wanted = false;
                Ok(())
            }
            // Brokers may be restarting: keep polling, the next chance retries.
            Err(e)
                if e.is_retriable() && self.cluster.with_metadata(|m| m.updated_at().is_some()) =>
            {
                tracing::debug!(error = %e, "metadata refresh failed");
                Ok(())
            }
            Err(e) => Err(e),
        }
    }

    /// Looks up positions pending a reset, asking each leader with ListOffsets.
    async fn resolve_positions(&mut self) -> Result<(), ClientError> {
        let reset = self.config.auto_offset_reset;
        let mut by_leader: BTreeMap<i32, Vec<(TopicPartition, i64, i32)>> = BTreeMap::new();
        let mut missing_leader = false;
        for (tp, position) in &self.assignment {
            let timestamp = match position {
                Position::Offset(_) => continue,
                Position::Reset(ts) => *ts,
                Position::Unset => match reset {
                    AutoOffsetReset::Earliest => EARLIEST_TIMESTAMP,
                    AutoOffsetReset::Latest => LATEST_TIMESTAMP,
                    AutoOffsetReset::None => {
                        return Err(ClientError::NoOffset {
                            topic: tp.topic.to_string(),
                            partition: tp.partition,
                        })
                    }
                },
            };
            match self.cluster.with_metadata(|m| m.leader(tp)) {
                Some((leader, epoch)) => {
                    by_leader
                        .entry(leader)
                        .or_default()
                        .push((tp.clone(), timestamp, epoch))
                }
                None => missing_leader = true,
            }
        }
        if missing_leader {
            self.refresh_wanted = true;
        }
        let config = &self.config;
        let asks = by_leader.into_iter().map(|(leader, parts)| {
            let cluster = self.cluster.clone();
            let request = list_offsets_request(config.isolation_level, &parts);
            async move {
                let result = cluster
                    .send_to(leader, pb::request::Body::ListOffsets(request))
                    .await
                    .and_then(|b| expect_body!(b, ListOffsets));
                (leader, result)
            }
        });
        for (leader, result) in futures::future::join_all(asks).await {
            let response = match result {
                Ok(r) => r,
                Err(e) if e.is_retriable() => {
                    tracing::debug!(broker = leader, error = %e, "ListOffsets failed");
                    self.refresh_wanted = true;
                    continue;
                }
                Err(e) => return Err(e),
            };
            for topic in &response.topics {
                for p in &topic.partitions {
                    let tp = TopicPartition::new(&topic.name, p.partition);
                    let code = ErrorCode::from_wire(p.error_code);
                    match code {
                        ErrorCode::None => {
                            if let Some(pos) = self.assignment.get_mut(&tp) {
                                if !matches!(pos, Position::Offset(_)) {
                                    *pos = Position::Offset(p.offset);
                                }
                            }
                        }
                        code if code.is_retriable() => {
                            self.note_leadership_error(&tp, p.current_leader.as_ref());
                        }
                        code => {
                            return Err(ClientError::Partition {
                                topic: tp.topic.to_string(),
                                partition: tp.partition,
                                code,
                            })
                        }
                    }
                }
            }
        }
        Ok(())
    }

    fn note_leadership_error(&mut self, tp: &TopicPartition, hint: Option<&pb::LeaderIdAndEpoch>) {
        let hinted = hint.is_some_and(|l| {
            self.cluster
                .with_metadata_mut(|m| m.apply_leader_hint(tp, l.leader_id, l.leader_epoch))
        });
        if !hinted {
            self.cluster.with_metadata_mut(|m| m.mark_stale());
            self.refresh_wanted = true;
        }
    }

    /// Sends a fetch to every broker that has none outstanding: each partition's
    /// leader, or the replica its leader sent this consumer to.
    fn send_fetches(&mut self) {
        let now = Instant::now();
        self.broker_backoff.retain(|_, until| *until > now);
        self.preferred.retain(|_, (_, until)| *until > now);
        let mut by_leader: BTreeMap<i32, Vec<(TopicPartition, i64, i32)>> = BTreeMap::new();
        for (tp, position) in &self.assignment {
            let Position::Offset(offset) = position else {
                continue;
            };
            match self.cluster.with_metadata(|m| m.leader(tp)) {
                Some((leader, epoch)) => {
                    let target = self.preferred.get(tp).map_or(leader, |(r, _)| *r);
                    if !self.fetching.contains(&target)
                        && !self.broker_backoff.contains_key(&target)
                    {
                        by_leader
                            .entry(target)
                            .or_default()
                            .push((tp.clone(), *offset, epoch));
                    }
                }
                None => self.refresh_wanted = true,
            }
        }
        for (broker, parts) in by_leader {
            let request = fetch_request(&self.config, &parts);
            let sent: Vec<(TopicPartition, i64)> =
                parts.into_iter().map(|(tp, o, _)| (tp, o)).collect();
            let cluster = self.cluster.clone();
            // The broker may hold the fetch for max_wait: allow for it on top of the
            // request timeout.
            let timeout = self.config.client.request_timeout()
                + Duration::from_millis(self.config.fetch_max_wait_ms.max(0) as u64);
            self.fetching.insert(broker);
            self.in_flight.push(
                async move {
                    let result = match tokio::time::timeout(timeout, async {
                        let conn = cluster.broker_connection(broker).await?;
                        conn.send(pb::request::Body::Fetch(request)).await
                    })
                    .await
                    {
                        Ok(r) => r.and_then(|b| expect_body!(b, Fetch)),
                        Err(_) => Err(ClientError::Timeout(timeout.as_millis() as u64)),
                    };
                    FetchDone {
                        broker,
                        sent,
                        result,
                    }
                }
                .boxed(),
            );
        }
    }

    fn handle(
        &mut self,
        done: FetchDone,
        out: &mut Vec<ConsumerRecord>,
    ) -> Result<(), ClientError> {
        self.fetching.remove(&done.broker);
        let response = match done.result {
            Ok(r) => r,
            Err(e) if e.is_retriable() => {
                tracing::debug!(broker = done.broker, error = %e, "fetch failed");
                // Back to the leaders for what that broker served as preferred replica.
                self.preferred.retain(|_, (r, _)| *r != done.broker);
                self.broker_backoff.insert(
                    done.broker,
                    Instant::now() + Duration::from_millis(self.config.client.retry_backoff_ms),
                );
                self.cluster.with_metadata_mut(|m| m.mark_stale());
                self.refresh_wanted = true;
                return Ok(());
            }
            Err(e) => return Err(e),
        };
        let top = ErrorCode::from_wire(response.error_code);
        if top != ErrorCode::None {
            tracing::debug!(broker = done.broker, code = %top, "fetch refused");
            self.broker_backoff.insert(
                done.broker,
                Instant::now() + Duration::from_millis(self.config.client.retry_backoff_ms),
            );
            return Ok(());
        }
        for topic in &response.responses {
            for data in &topic.partitions {
                let tp = TopicPartition::new(&topic.topic, data.partition);
                let Some(&(_, fetched_from)) = done.sent.iter().find(|(t, _)| *t == tp) else {
                    continue;
                };
                // Moved by a seek (or unassigned) since the fetch went out.
                if self.assignment.get(&tp) != Some(&Position::Offset(fetched_from)) {
                    continue;
                }
                match ErrorCode::from_wire(data.error_code) {
                    ErrorCode::None if data.preferred_read_replica.is_some_and(|r| r >= 0) => {
                        // The leader sends us to a replica in our rack (KIP-392),
                        // for as long as metadata stays fresh.
                        let replica = data.preferred_read_replica.unwrap_or(-1);
                        let until = Instant::now()
                            + Duration::from_millis(self.config.client.metadata_max_age_ms);
                        tracing::debug!(%tp, replica, "reading from a preferred replica");
                        self.preferred.insert(tp, (replica, until));
                    }
                    ErrorCode::None => {
                        let (records, next) = decode_records(&tp, &data.records, fetched_from)?;
                        if let Some(next) = next {
                            self.assignment
                                .insert(tp, Position::Offset(next.max(fetched_from)));
                        }
                        out.extend(records);
                    }
                    ErrorCode::OffsetOutOfRange => {
                        let position = match self.config.auto_offset_reset {
                            AutoOffsetReset::Earliest => Position::Reset(EARLIEST_TIMESTAMP),
                            AutoOffsetReset::Latest => Position::Reset(LATEST_TIMESTAMP),
                            AutoOffsetReset::None => {
                                return Err(ClientError::OffsetOutOfRange {
                                    topic: tp.topic.to_string(),
                                    partition: tp.partition,
                                    offset: fetched_from,
                                })
                            }
                        };
                        tracing::info!(%tp, offset = fetched_from, "offset out of range, resetting");
                        self.assignment.insert(tp, position);
                    }
                    code if code.is_retriable() => {
                        // A preferred replica that refuses sends us back to the leader.
                        if self.preferred.remove(&tp).is_none() {
                            self.note_leadership_error(&tp, data.current_leader.as_ref());
                        }
                    }
                    code => {
                        return Err(ClientError::Partition {
                            topic: tp.topic.to_string(),
                            partition: tp.partition,
                            code,
                        })
                    }
                }
            }
        }
        Ok(())
    }
}

fn list_offsets_request(
    isolation_level: pb::IsolationLevel,
    parts: &[(TopicPartition, i64, i32)],
) -> pb::ListOffsetsRequest {
    let mut topics: BTreeMap<&str, Vec<pb::ListOffsetsPartition>> = BTreeMap::new();
    for (tp, timestamp, epoch) in parts {
        topics
            .entry(&tp.topic)
            .or_default()
            .push(pb::ListOffsetsPartition {
                partition: tp.partition,
                current_leader_epoch: Some(*epoch),
                timestamp: *timestamp,
            });
    }
    pb::ListOffsetsRequest {
        replica_id: CONSUMER_REPLICA_ID,
        isolation_level: isolation_level as i32,
        topics: topics
            .into_iter()
            .map(|(name, partitions)| pb::ListOffsetsTopic {
                name: name.to_string(),
                partitions,
            })
            .collect(),
    }
}

/// A consumer fetch for these `(partition, fetch offset, leader epoch)`s.
pub(crate) fn fetch_request(
    config: &ConsumerConfig,
    parts: &[(TopicPartition, i64, i32)],
) -> pb::FetchRequest {
    let mut topics: BTreeMap<&str, Vec<pb::FetchPartition>> = BTreeMap::new();
    for (tp, offset, epoch) in parts {
        topics
            .entry(&tp.topic)
            .or_default()
            .push(pb::FetchPartition {
                partition: tp.partition,
                current_leader_epoch: Some(*epoch),
                fetch_offset: *offset,
                last_fetched_epoch: None,
                log_start_offset: -1,
                partition_max_bytes: config.max_partition_fetch_bytes,
            });
    }
    pb::FetchRequest {
        replica_id: CONSUMER_REPLICA_ID,
        replica_epoch: -1,
        max_wait_ms: config.fetch_max_wait_ms,
        min_bytes: config.fetch_min_bytes,
        max_bytes: config.fetch_max_bytes,
        isolation_level: config.isolation_level as i32,
        session_id: 0,
        session_epoch: -1,
        topics: topics
            .into_iter()
            .map(|(topic, partitions)| pb::FetchTopic {
                topic: topic.to_string(),
                partitions,
            })
            .collect(),
        forgotten_topics_data: Vec::new(),
        rack_id: config.client_rack.clone(),
    }
}

/// Decodes the batches of one partition's fetch response into records at or after
/// `fetch_offset` (the first batch may start before it), and returns the next
/// position (after the last whole batch), if any batch was whole.
///
/// A batch cut short at the end of the response is ignored (the next fetch gets it
/// whole); a batch that fails its CRC or framing is an error.
pub(crate) fn decode_records(
    tp: &TopicPartition,
    records: &Bytes,
    fetch_offset: i64,
) -> Result<(Vec<ConsumerRecord>, Option<i64>), ClientError> {
    let corrupt = |source: BatchError| ClientError::CorruptRecords {
        topic: tp.topic.to_string(),
        partition: tp.partition,
        offset: fetch_offset,
        source,
    };
    let mut out = Vec::new();
    let mut next = None;
    for item in batch::split(records) {
        let (header, bytes) = match item {
            Ok(b) => b,
            Err(BatchError::Truncated { .. }) if next.is_some() => break,
            Err(e) => return Err(corrupt(e)),
        };
        let set = batch::validated_records(bytes).map_err(corrupt)?;
        next = Some(header.next_offset());
        if header.last_offset() < fetch_offset {
            continue;
        }
        // Keys and values are slices of the response, or of the decompressed
        // records of a compressed batch.
        let backing = set.decompressed().unwrap_or(records);
        for record in set.iter() {
            let record = record.map_err(corrupt)?;
            if record.offset < fetch_offset {
                continue;
            }
            let slice = |s: &[u8]| backing.slice_ref(s);
            out.push(ConsumerRecord {
                topic: tp.topic.clone(),
                partition: tp.partition,
                offset: record.offset,
                timestamp: record.timestamp,
                key: record.view.key.map(slice),
                value: record.view.value.map(slice),
                headers: record
                    .view
                    .headers()
                    .map(|h| Header {
                        key: String::from_utf8_lossy(h.key).into_owned(),
                        value: h.value.map(slice),
                    })
                    .collect(),
            });
        }
    }
    Ok((out, next))
}

#[cfg(test)]
mod tests {
    use super::*;
    use bytes::BytesMut;
    use syncline_proto::batch::BatchBuilder;
    use syncline_proto::compression::Compression;

    /// A stored batch: `values` at offsets `base..`.
    fn stored_batch(base: i64, values: &[&str]) -> Vec<u8> {
        stored_batch_with(base, values, Compression::None)
    }

    /// As [`stored_batch`], compressed with `codec`.
    fn stored_batch_with(base: i64, values: &[&str], codec: Compression) -> Vec<u8> {
        let mut b = BatchBuilder::new(1_000);
        for (i, v) in values.iter().enumerate() {
            let key = format!("k{i}");
            b.push(
                1_000 + i as i64,
                Some(key.as_bytes()),
                Some(v.as_bytes()),
                &[(b"h", Some(b"v"))],
            );
        }
        let mut bytes = b.finish_with(codec).to_vec();
        batch::stamp(&mut bytes, base, 3);
        bytes
    }

    #[test]
    fn compressed_batches_of_every_codec_decode_like_plain_ones() {
        let tp = TopicPartition::new("t", 0);
        let mut all = BytesMut::new();
        let mut want = Vec::new();
        for (i, codec) in syncline_proto::compression::CODECS.into_iter().enumerate() {
            let base = 3 * i as i64;
            let values = [
                format!("{codec}-a"),
                format!("{codec}-b"),
                format!("{codec}-c"),
            ];
            let refs: Vec<&str> = values.iter().map(String::as_str).collect();
            let stored = stored_batch_with(base, &refs, codec);
            assert_eq!(batch::validate(&stored).unwrap().codec().unwrap(), codec);
            all.extend_from_slice(&stored);
            for (j, v) in values.iter().enumerate() {
                want.push((
                    base + j as i64,
                    v.clone().into_bytes(),
                    format!("k{j}").into_bytes(),
                ));
            }
        }
        // From the middle of the first compressed batch on.
        let (records, next) = decode_records(&tp, &all.freeze(), 4).unwrap();
        let got: Vec<(i64, Vec<u8>, Vec<u8>)> = records
            .iter()
            .map(|r| {
                let value = r.value.as_deref().unwrap().to_vec();
                (r.offset, value, r.key.as_deref().unwrap().to_vec())
            })
            .collect();
        assert_eq!(got, want[4..]);
        assert_eq!(next, Some(15));
        assert!(records.iter().all(|r| r.headers.len() == 1));
    }

    #[test]
    fn records_below_the_fetch_offset_are_skipped() {
        let tp = TopicPartition::new("t", 2);
        let mut all = BytesMut::new();
        all.extend_from_slice(&stored_batch(10, &["a", "b", "c"]));
        all.extend_from_slice(&stored_batch(13, &["d", "e"]));
        let all = all.freeze();
        let (records, next) = decode_records(&tp, &all, 12).unwrap();
        let got: Vec<(i64, &[u8])> = records
            .iter()
            .map(|r| (r.offset, r.value.as_deref().unwrap()))
            .collect();
        assert_eq!(got, [(12, &b"c"[..]), (13, b"d"), (14, b"e")]);
        assert_eq!(next, Some(15));
        let r = &records[0];
        assert_eq!((&*r.topic, r.partition, r.timestamp), ("t", 2, 1_002));
        assert_eq!(r.key.as_deref(), Some(&b"k2"[..]));
        assert_eq!(
            r.headers,
            [Header {
                key: "h".into(),
                value: Some(Bytes::from_static(b"v"))
            }]
        );

        // A batch entirely below the fetch offset still moves the position.
        let (records, next) = decode_records(&tp, &all, 15).unwrap();
        assert!(records.is_empty());
        assert_eq!(next, Some(15));
    }

    #[test]
    fn truncated_tail_is_left_for_the_next_fetch_but_corruption_is_an_error() {
        let tp = TopicPartition::new("t", 0);
        let mut buf = stored_batch(0, &["a"]);
        let second = stored_batch(1, &["b"]);
        buf.extend_from_slice(&second[..second.len() - 3]);
        let (records, next) = decode_records(&tp, &Bytes::from(buf), 0).unwrap();
        assert_eq!((records.len(), next), (1, Some(1)));

        let mut bad = stored_batch(0, &["a"]);
        let last = bad.len() - 1;
        bad[last] ^= 0xff;
        let err = decode_records(&tp, &Bytes::from(bad), 0).unwrap_err();
        assert!(matches!(err, ClientError::CorruptRecords { .. }), "{err:?}");
        assert_eq!(
            decode_records(&tp, &Bytes::new(), 7).unwrap(),
            (vec![], None)
        );
    }

    #[test]
    fn fetch_request_is_a_consumer_fetch_grouped_by_topic() {
        let config = ConsumerConfig::default();
        let req = fetch_request(
            &config,
            &[
                (TopicPartition::new("b", 0), 5, 2),
                (TopicPartition::new("a", 1), 7, 3),
                (TopicPartition::new("a", 0), 9, 3),
            ],
        );
        assert_eq!((req.replica_id, req.replica_epoch), (-1, -1));
        assert_eq!((req.session_id, req.session_epoch), (0, -1));
        assert_eq!((req.max_wait_ms, req.min_bytes), (500, 1));
        assert_eq!(req.topics[0].topic, "a");
        let a: Vec<(i32, i64, Option<i32>, i32)> = req.topics[0]
            .partitions
            .iter()
            .map(|p| {
                (
                    p.partition,
                    p.fetch_offset,
                    p.current_leader_epoch,
                    p.partition_max_bytes,
                )
            })
            .collect();
        assert_eq!(a, [(1, 7, Some(3), 1 << 20), (0, 9, Some(3), 1 << 20)]);
        assert!(req.topics[0]
            .partitions
            .iter()
            .all(|p| p.last_fetched_epoch.is_none()));
    }

    #[tokio::test]
    async fn seeks_need_an_assignment_and_set_positions() {
        let mut c = Consumer::new(ConsumerConfig::default()).unwrap();
        let tp = TopicPartition::new("t", 0);
        assert!(matches!(
            c.seek(&tp, 3),
            Err(ClientError::NotAssigned { .. })
        ));
        c.assign(vec![tp.clone()]);
        c.seek(&tp, 3).unwrap();
        assert_eq!(c.position(&tp).await.unwrap(), 3);
        c.seek_to_end(std::slice::from_ref(&tp)).unwrap();
        assert_eq!(c.assignment[&tp], Position::Reset(LATEST_TIMESTAMP));
        // Re-assigning keeps the position of a partition that stays.
        c.seek(&tp, 8).unwrap();
        c.assign(vec![tp.clone(), TopicPartition::new("t", 1)]);
        assert_eq!(c.assignment[&tp], Position::Offset(8));
        assert_eq!(c.assignment[&TopicPartition::new("t", 1)], Position::Unset);
    }
}

#[cfg(test)]
mod protocol_tests {
    use super::*;
    use crate::testing::cluster_with_peer;

    fn fetch_offsets(req: &pb::Request) -> Vec<(i32, i64)> {
        match &req.body {
            Some(pb::request::Body::Fetch(f)) => f.topics[0]
                .partitions
                .iter()
                .map(|p| (p.partition, p.fetch_offset))
                .collect(),
            other => panic!("expected a fetch, got {other:?}"),
        }
    }

    fn fetched(partition: i32, code: ErrorCode, records: Vec<u8>) -> pb::response::Body {
        pb::response::Body::Fetch(pb::FetchResponse {
            responses: vec![pb::FetchableTopicResponse {
                topic: "t".into(),
                partitions: vec![pb::PartitionData {
                    partition,
                    error_code: code as i32,
                    high_watermark: 100,
                    records: records.into(),
                    ..Default::default()
                }],
            }],
            ..Default::default()
        })
    }

    fn stored_batch(base: i64, count: usize) -> Vec<u8> {
        let mut b = batch::BatchBuilder::new(0);
        for i in 0..count {
            b.push(
                0,
                None,
                Some(format!("v{}", base + i as i64).as_bytes()),
                &[],
            );
        }
        let mut bytes = b.finish().to_vec();
        batch::stamp(&mut bytes, base, 5);
        bytes
    }

    #[tokio::test(start_paused = true)]
    async fn poll_reads_from_the_position_and_resets_when_out_of_range() {
        let config = ConsumerConfig {
            auto_offset_reset: AutoOffsetReset::Earliest,
            ..Default::default()
        };
        let (cluster, mut peer) = cluster_with_peer(config.client.clone(), 2);
        let mut consumer = Consumer::with_cluster(config, cluster);
        let tp = TopicPartition::new("t", 1);
        consumer.assign(vec![tp.clone()]);
        consumer.seek(&tp, 5).unwrap();

        let broker = async {
            let req = peer.recv().await;
            assert_eq!(fetch_offsets(&req), [(1, 5)]);
            // The batch starts before the fetch offset.
            peer.reply(&req, fetched(1, ErrorCode::None, stored_batch(3, 5)))
                .await;
        };
        let (records, ()) = tokio::join!(consumer.poll(Duration::from_secs(1)), broker);
        let offsets: Vec<i64> = records.unwrap().iter().map(|r| r.offset).collect();
        assert_eq!(offsets, [5, 6, 7]);
        assert_eq!(consumer.position(&tp).await.unwrap(), 8);

        let broker = async {
            let req = peer.recv().await;
            assert_eq!(fetch_offsets(&req), [(1, 8)]);
            peer.reply(&req, fetched(1, ErrorCode::OffsetOutOfRange, vec![]))
                .await;
            let req = peer.recv().await;
            let Some(pb::request::Body::ListOffsets(l)) = &req.body else {
                panic!("expected ListOffsets, got {req:?}")
            };
            let p = &l.topics[0].partitions[0];
            assert_eq!(
                (p.partition, p.timestamp, p.current_leader_epoch),
                (1, EARLIEST_TIMESTAMP, Some(5))
            );
            peer.reply(
                &req,
                pb::response::Body::ListOffsets(pb::ListOffsetsResponse {
                    topics: vec![pb::ListOffsetsTopicResponse {
                        name: "t".into(),
                        partitions: vec![pb::ListOffsetsPartitionResponse {
                            partition: 1,
                            offset: 2,
                            ..Default::default()
                        }],
                    }],
                }),
            )
            .await;
            let req = peer.recv().await;
            assert_eq!(fetch_offsets(&req), [(1, 2)]);
            peer.reply(&req, fetched(1, ErrorCode::None, stored_batch(2, 1)))
                .await;
        };
        let (records, ()) = tokio::join!(consumer.poll(Duration::from_secs(1)), broker);
        let values: Vec<Bytes> = records
            .unwrap()
            .into_iter()
            .filter_map(|r| r.value)
            .collect();
        assert_eq!(values, [Bytes::from("v2")]);
    }

    #[tokio::test(start_paused = true)]
    async fn poll_returns_empty_after_the_timeout_and_keeps_the_fetch_in_flight() {
        let (cluster, mut peer) = cluster_with_peer(ConsumerConfig::default().client, 1);
        let mut consumer = Consumer::with_cluster(ConsumerConfig::default(), cluster);
        let tp = TopicPartition::new("t", 0);
        consumer.assign(vec![tp.clone()]);
        consumer.seek(&tp, 0).unwrap();
        let start = Instant::now();
        assert!(consumer
            .poll(Duration::from_millis(200))
            .await
            .unwrap()
            .is_empty());
        assert_eq!(start.elapsed(), Duration::from_millis(200));
        // The fetch sent by the first poll is answered during the second, which
        // sends no other.
        let req = peer.recv().await;
        peer.reply(&req, fetched(0, ErrorCode::None, stored_batch(0, 2)))
            .await;
        let records = consumer.poll(Duration::from_millis(200)).await.unwrap();
        assert_eq!(records.len(), 2);

        // With auto_offset_reset=none, an out-of-range position is an error.
        consumer.config.auto_offset_reset = AutoOffsetReset::None;
        let broker = async {
            let req = peer.recv().await;
            peer.reply(&req, fetched(0, ErrorCode::OffsetOutOfRange, vec![]))
                .await;
        };
        let (result, ()) = tokio::join!(consumer.poll(Duration::from_secs(1)), broker);
        assert!(
            matches!(result, Err(ClientError::OffsetOutOfRange { offset: 2, .. })),
            "{result:?}"
        );
    }
}
