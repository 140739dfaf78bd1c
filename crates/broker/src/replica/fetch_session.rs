//! Incremental fetch sessions (KIP-227).
//!
//! A fetcher that follows many partitions would otherwise send every partition in
//! every request and get every partition back in every response, changed or not.
//! With a session the leader remembers the partitions and their fetch positions:
//! requests carry only what changed (and `forgotten_topics_data` for what left),
//! responses only the partitions with news (records, a moved high watermark or log
//! start, an error). Every fetch still acknowledges *all* session partitions at
//! their remembered offsets, so idle partitions keep their followers in sync.
//!
//! Session ids and epochs, as Kafka's `FetchMetadata`:
//! - `(0, -1)`: a full fetch, no session;
//! - `(0, 0)`: a full fetch that asks for a new session (the answer's `session_id`,
//!   0 when the cache declines);
//! - `(id, e > 0)`: an incremental fetch in session `id`, whose next epoch must be `e`;
//! - `(id, -1)`: closes the session; the request is a full, sessionless fetch.
//!
//! A session belongs to whoever opened it: the connection's principal and the
//! request's `replica_id`. Ids are drawn at random (as Kafka's), so that they
//! cannot be guessed, and a request naming a session of another owner is
//! answered as if the session did not exist (FETCH_SESSION_ID_NOT_FOUND; a
//! close leaves it open).

use std::collections::HashMap;
use std::sync::Arc;

use parking_lot::Mutex;
use syncline_proto::{pb, ErrorCode};
use tokio::time::Instant;

use crate::auth::Principal;
use crate::send::FetchRegions;

/// `session_epoch` of a request that starts a new session.
pub(crate) const INITIAL_EPOCH: i32 = 0;
/// `session_epoch` of a sessionless request (or one closing its session).
pub(crate) const FINAL_EPOCH: i32 = -1;

/// One partition of a fetch, as the request (or the session) gives it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct FetchEntry {
    /// Shared by the topic's entries: a session's fetch hands out every one of
    /// them, twice a second per follower at idle, without copying names.
    pub topic: Arc<str>,
    pub partition: i32,
    pub fetch_offset: i64,
    pub partition_max_bytes: i32,
    pub current_leader_epoch: Option<i32>,
    pub last_fetched_epoch: Option<i32>,
    pub log_start_offset: i64,
}

impl FetchEntry {
    fn from_request(topic: &Arc<str>, p: &pb::FetchPartition) -> FetchEntry {
        FetchEntry {
            topic: topic.clone(),
            partition: p.partition,
            fetch_offset: p.fetch_offset,
            partition_max_bytes: p.partition_max_bytes,
            current_leader_epoch: p.current_leader_epoch,
            last_fetched_epoch: p.last_fetched_epoch,
            log_start_offset: p.log_start_offset,
        }
    }
}

/// What the last response told the client about a partition.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Sent {
    high_watermark: i64,
    log_start_offset: i64,
}

/// Who a session belongs to: only requests of the same owner may use or
/// close it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Owner {
    /// The principal of the connection that opened it.
    pub principal: Principal,
    /// The request's `replica_id`: the follower's broker id, or negative for a
    /// consumer.
    pub replica_id: i32,
}

/// A new session's id: the first draw in `1..=i32::MAX` (Kafka's ids are
/// positive; 0 means "no session") that no open session has. `draw` is
/// random in the broker, so that one client cannot guess another's id.
#[must_use]
pub(crate) fn new_session_id(mut draw: impl FnMut() -> i32, taken: impl Fn(i32) -> bool) -> i32 {
    loop {
        let id = draw();
        if id > 0 && !taken(id) {
            return id;
        }
    }
}

#[derive(Debug)]
struct Session {
    /// The epoch the next request must carry.
    next_epoch: i32,
    owner: Owner,
    /// In the order they joined (the order fetches read them in).
    partitions: Vec<(FetchEntry, Option<Sent>)>,
    /// Where each partition is in `partitions`: a fetch looks up every one of
    /// them, under the cache's lock.
    index: HashMap<Arc<str>, HashMap<i32, usize>>,
    last_used: Instant,
    /// Names and partitions visited by [`Session::forget`] (tests count them).
    #[cfg(test)]
    steps: usize,
}

impl Session {
    fn new(owner: Owner, entries: &[FetchEntry], now: Instant) -> Session {
        let mut session = Session {
            next_epoch: 1,
            owner,
            partitions: Vec::with_capacity(entries.len()),
            index: HashMap::new(),
            last_used: now,
            #[cfg(test)]
            steps: 0,
        };
        for e in entries {
            session.upsert(e.clone());
        }
        session
    }

    fn position(&self, topic: &str, partition: i32) -> Option<usize> {
        self.index.get(topic)?.get(&partition).copied()
    }

    /// Adds a partition, or updates its position when the session has it.
    fn upsert(&mut self, entry: FetchEntry) {
        match self.position(&entry.topic, entry.partition) {
            Some(i) => self.partitions[i].0 = entry,
            None => {
                self.index
                    .entry(entry.topic.clone())
                    .or_default()
                    .insert(entry.partition, self.partitions.len());
                self.partitions.push((entry, None));
            }
        }
    }

    /// Drops the partitions `forgotten` names: each name is looked up (names
    /// the session does not have cost one lookup), then one pass closes the
    /// gaps. Linear in the request plus the session, however the two are
    /// shaped (a hostile request may name 10^5 partitions against a session
    /// of 10^4: a scan of the session per name would be 10^9 steps).
    fn forget(&mut self, forgotten: &[pb::ForgottenTopic]) {
        let mut gone: Vec<bool> = Vec::new();
        for f in forgotten {
            let Some(topic) = self.index.get_mut(f.topic.as_str()) else {
                #[cfg(test)]
                {
                    self.steps += 1;
                }
                continue;
            };
            for p in &f.partitions {
                #[cfg(test)]
                {
                    self.steps += 1;
                }
                if let Some(i) = topic.remove(p) {
                    if gone.is_empty() {
                        gone = vec![false; self.partitions.len()];
                    }
                    gone[i] = true;
                }
            }
        }
        if gone.is_empty() {
            return;
        }
        #[cfg(test)]
        {
            self.steps += self.partitions.len();
        }
        let mut at = 0;
        self.partitions.retain(|_| {
            at += 1;
            !gone[at - 1]
        });
        self.index.retain(|_, partitions| !partitions.is_empty());
        for (i, (e, _)) in self.partitions.iter().enumerate() {
            if let Some(at) = self
                .index
                .get_mut(&*e.topic)
                .and_then(|m| m.get_mut(&e.partition))
            {
                *at = i;
            }
        }
    }
}

/// How a fetch relates to a session.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum SessionContext {
    /// No session: the response holds every partition and `session_id` 0.
    Sessionless,
    /// A new session: the response holds every partition and the new id.
    New { id: i32 },
    /// An incremental fetch: the response holds only partitions with news.
    Incremental { id: i32 },
}

impl SessionContext {
    pub(crate) fn session_id(&self) -> i32 {
        match self {
            SessionContext::Sessionless => 0,
            SessionContext::New { id } | SessionContext::Incremental { id } => *id,
        }
    }
}

/// The broker's fetch sessions, bounded (Kafka's
/// `max.incremental.fetch.session.cache.slots`), least recently used evicted first.
#[derive(Debug)]
pub(crate) struct FetchSessionCache {
    max_slots: usize,
    inner: Mutex<Inner>,
}

#[derive(Debug)]
struct Inner {
    sessions: HashMap<i32, Session>,
}

impl FetchSessionCache {
    pub(crate) fn new(max_slots: usize) -> FetchSessionCache {
        FetchSessionCache {
            max_slots,
            inner: Mutex::new(Inner {
                sessions: HashMap::new(),
            }),
        }
    }

    /// Number of open sessions.
    pub(crate) fn len(&self) -> usize {
        self.inner.lock().sessions.len()
    }

    /// Resolves a request of `principal`: the partitions to fetch (for an
    /// incremental fetch, every partition of the session, updated by the
    /// request) and the session context.
    pub(crate) fn begin(
        &self,
        req: &pb::FetchRequest,
        principal: &Principal,
        now: Instant,
    ) -> Result<(SessionContext, Vec<FetchEntry>), ErrorCode> {
        let owner = Owner {
            principal: principal.clone(),
            replica_id: req.replica_id,
        };
        let requested = || {
            req.topics
                .iter()
                .flat_map(|t| {
                    let topic: Arc<str> = Arc::from(t.topic.as_str());
                    t.partitions
                        .iter()
                        .map(move |p| FetchEntry::from_request(&topic, p))
                })
                .collect::<Vec<_>>()
        };
        let mut inner = self.inner.lock();
        match (req.session_id, req.session_epoch) {
            (0, FINAL_EPOCH) => Ok((SessionContext::Sessionless, requested())),
            (0, INITIAL_EPOCH) => {
                let entries = requested();
                if self.max_slots == 0 {
                    return Ok((SessionContext::Sessionless, entries));
                }
                if inner.sessions.len() >= self.max_slots {
                    let oldest = inner
                        .sessions
                        .iter()
                        .min_by_key(|(_, s)| s.last_used)
                        .map(|(id, _)| *id);
                    if let Some(id) = oldest {
                        inner.sessions.remove(&id);
                    }
                }
                let id = new_session_id(
                    || rand::random_range(1..=i32::MAX),
                    |id| inner.sessions.contains_key(&id),
                );
                inner
                    .sessions
                    .insert(id, Session::new(owner, &entries, now));
                Ok((SessionContext::New { id }, entries))
            }
            (0, _) => Err(ErrorCode::InvalidFetchSessionEpoch),
            (id, FINAL_EPOCH) => {
                if inner.sessions.get(&id).is_some_and(|s| s.owner == owner) {
                    inner.sessions.remove(&id);
                }
                Ok((SessionContext::Sessionless, requested()))
            }
            (id, epoch) => {
                let session = inner
                    .sessions
                    .get_mut(&id)
                    .ok_or(ErrorCode::FetchSessionIdNotFound)?;
                if session.owner != owner {
                    return Err(ErrorCode::FetchSessionIdNotFound);
                }
                if epoch != session.next_epoch {
                    return Err(ErrorCode::InvalidFetchSessionEpoch);
                }
                session.forget(&req.forgotten_topics_data);
                for t in &req.topics {
                    let topic: Arc<str> = Arc::from(t.topic.as_str());
                    for p in &t.partitions {
                        session.upsert(FetchEntry::from_request(&topic, p));
                    }
                }
                session.last_used = now;
                session.next_epoch = session.next_epoch.checked_add(1).unwrap_or(1);
                let entries = session.partitions.iter().map(|(e, _)| e.clone()).collect();
                Ok((SessionContext::Incremental { id }, entries))
            }
        }
    }

    /// Trims an incremental response to the partitions with news and remembers what
    /// was sent; sets the response's session id. `regions`: the records read
    /// outside the response (zero-copy).
    pub(crate) fn finish(
        &self,
        ctx: SessionContext,
        response: &mut pb::FetchResponse,
        regions: &FetchRegions,
    ) {
        response.session_id = ctx.session_id();
        let (id, incremental) = match ctx {
            SessionContext::Sessionless => return,
            SessionContext::New { id } => (id, false),
            SessionContext::Incremental { id } => (id, true),
        };
        let mut inner = self.inner.lock();
        let Some(session) = inner.sessions.get_mut(&id) else {
            return;
        };
        let Session {
            index, partitions, ..
        } = session;
        for t in &mut response.responses {
            let topic_index = index.get(t.topic.as_str());
            t.partitions.retain(|p| {
                let Some(&i) = topic_index.and_then(|m| m.get(&p.partition)) else {
                    return true;
                };
                let now_sent = Sent {
                    high_watermark: p.high_watermark,
                    log_start_offset: p.log_start_offset,
                };
                let news = !p.records.is_empty()
                    || regions.has(&t.topic, p.partition)
                    || p.error_code != ErrorCode::None as i32
                    || p.diverging_epoch.is_some()
                    || partitions[i].1 != Some(now_sent);
                partitions[i].1 = Some(now_sent);
                !incremental || news
            });
        }
        response.responses.retain(|t| !t.partitions.is_empty());
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    impl FetchSessionCache {
        /// [`FetchSessionCache::begin`] for an unauthenticated connection.
        fn begin_anonymous(
            &self,
            req: &pb::FetchRequest,
            now: Instant,
        ) -> Result<(SessionContext, Vec<FetchEntry>), ErrorCode> {
            self.begin(req, &Principal::Anonymous, now)
        }
    }

    fn part(partition: i32, fetch_offset: i64) -> pb::FetchPartition {
        pb::FetchPartition {
            partition,
            fetch_offset,
            partition_max_bytes: 1024,
            ..Default::default()
        }
    }

    fn req(
        id: i32,
        epoch: i32,
        parts: Vec<pb::FetchPartition>,
        forgotten: Vec<i32>,
    ) -> pb::FetchRequest {
        pb::FetchRequest {
            replica_id: 2,
            session_id: id,
            session_epoch: epoch,
            topics: if parts.is_empty() {
                vec![]
            } else {
                vec![pb::FetchTopic {
                    topic: "t".into(),
                    partitions: parts,
                }]
            },
            forgotten_topics_data: if forgotten.is_empty() {
                vec![]
            } else {
                vec![pb::ForgottenTopic {
                    topic: "t".into(),
                    partitions: forgotten,
                }]
            },
            ..Default::default()
        }
    }

    fn response(parts: &[(i32, i64, usize)]) -> pb::FetchResponse {
        pb::FetchResponse {
            responses: vec![pb::FetchableTopicResponse {
                topic: "t".into(),
                partitions: parts
                    .iter()
                    .map(|(p, hw, n)| pb::PartitionData {
                        partition: *p,
                        high_watermark: *hw,
                        records: vec![0u8; *n].into(),
                        ..Default::default()
                    })
                    .collect(),
            }],
            ..Default::default()
        }
    }

    fn partitions_in(r: &pb::FetchResponse) -> Vec<i32> {
        r.responses
            .iter()
            .flat_map(|t| t.partitions.iter().map(|p| p.partition))
            .collect()
    }

    #[test]
    fn a_session_remembers_partitions_and_answers_only_news() {
        let cache = FetchSessionCache::new(10);
        let t0 = Instant::now();
        let (ctx, entries) = cache
            .begin_anonymous(&req(0, 0, vec![part(0, 5), part(1, 7)], vec![]), t0)
            .unwrap();
        let SessionContext::New { id } = ctx else {
            panic!("{ctx:?}")
        };
        assert_eq!(entries.len(), 2);
        let mut r = response(&[(0, 5, 0), (1, 7, 0)]);
        cache.finish(ctx, &mut r, &FetchRegions::default());
        assert_eq!(r.session_id, id);
        assert_eq!(
            partitions_in(&r),
            vec![0, 1],
            "a new session answers in full"
        );

        // Incremental: partition 0 moved on; partition 1 is not mentioned but is still
        // fetched at its remembered offset.
        let (ctx, entries) = cache
            .begin_anonymous(&req(id, 1, vec![part(0, 9)], vec![]), t0)
            .unwrap();
        assert_eq!(ctx, SessionContext::Incremental { id });
        let offsets: Vec<(i32, i64)> = entries
            .iter()
            .map(|e| (e.partition, e.fetch_offset))
            .collect();
        assert_eq!(offsets, vec![(0, 9), (1, 7)]);
        // Only partition 1 has news (records); partition 0's HW did not move.
        let mut r = response(&[(0, 5, 0), (1, 7, 100)]);
        cache.finish(ctx, &mut r, &FetchRegions::default());
        assert_eq!(partitions_in(&r), vec![1]);
        // An HW change is news even without records.
        let (ctx, _) = cache
            .begin_anonymous(&req(id, 2, vec![], vec![]), t0)
            .unwrap();
        let mut r = response(&[(0, 9, 0), (1, 7, 0)]);
        cache.finish(ctx, &mut r, &FetchRegions::default());
        assert_eq!(partitions_in(&r), vec![0]);
        // Forgetting a partition.
        let (_, entries) = cache
            .begin_anonymous(&req(id, 3, vec![], vec![1]), t0)
            .unwrap();
        assert_eq!(
            entries.iter().map(|e| e.partition).collect::<Vec<_>>(),
            vec![0]
        );
    }

    #[test]
    fn wrong_epochs_and_unknown_sessions_are_refused() {
        let cache = FetchSessionCache::new(10);
        let t0 = Instant::now();
        let (ctx, _) = cache
            .begin_anonymous(&req(0, 0, vec![part(0, 0)], vec![]), t0)
            .unwrap();
        let id = ctx.session_id();
        assert_eq!(
            cache
                .begin_anonymous(&req(id, 5, vec![], vec![]), t0)
                .unwrap_err(),
            ErrorCode::InvalidFetchSessionEpoch
        );
        assert_eq!(
            cache
                .begin_anonymous(&req(id + 1, 1, vec![], vec![]), t0)
                .unwrap_err(),
            ErrorCode::FetchSessionIdNotFound
        );
        assert_eq!(
            cache
                .begin_anonymous(&req(0, 3, vec![], vec![]), t0)
                .unwrap_err(),
            ErrorCode::InvalidFetchSessionEpoch
        );
        // Another replica cannot use the session.
        let mut other = req(id, 1, vec![], vec![]);
        other.replica_id = 3;
        assert_eq!(
            cache.begin_anonymous(&other, t0).unwrap_err(),
            ErrorCode::FetchSessionIdNotFound
        );
        // Closing it.
        let (ctx, _) = cache
            .begin_anonymous(&req(id, FINAL_EPOCH, vec![part(0, 0)], vec![]), t0)
            .unwrap();
        assert_eq!(ctx, SessionContext::Sessionless);
        assert_eq!(cache.len(), 0);
    }

    #[test]
    fn the_cache_is_bounded_and_evicts_the_least_recently_used() {
        let cache = FetchSessionCache::new(2);
        let t0 = Instant::now();
        let a = cache
            .begin_anonymous(&req(0, 0, vec![part(0, 0)], vec![]), t0)
            .unwrap()
            .0
            .session_id();
        let b = cache
            .begin_anonymous(
                &req(0, 0, vec![part(0, 0)], vec![]),
                t0 + std::time::Duration::from_millis(1),
            )
            .unwrap()
            .0
            .session_id();
        // a is used again, so b is the least recently used.
        cache
            .begin_anonymous(
                &req(a, 1, vec![], vec![]),
                t0 + std::time::Duration::from_millis(2),
            )
            .unwrap();
        let c = cache
            .begin_anonymous(
                &req(0, 0, vec![part(0, 0)], vec![]),
                t0 + std::time::Duration::from_millis(3),
            )
            .unwrap()
            .0
            .session_id();
        assert_eq!(cache.len(), 2);
        assert_ne!(c, 0, "a new session, not a declined one");
        assert!(cache
            .begin_anonymous(&req(b, 1, vec![], vec![]), t0)
            .is_err());
        assert!(cache
            .begin_anonymous(&req(a, 2, vec![], vec![]), t0)
            .is_ok());
        // No slots at all: sessions are declined, fetches still work.
        let none = FetchSessionCache::new(0);
        assert_eq!(
            none.begin_anonymous(&req(0, 0, vec![part(0, 0)], vec![]), t0)
                .unwrap()
                .0,
            SessionContext::Sessionless
        );
    }

    /// A session of `n` partitions of topic "t", and what its forget cost.
    fn forget_steps(n: i32, forgotten: Vec<pb::ForgottenTopic>) -> (usize, Vec<i32>) {
        let cache = FetchSessionCache::new(1);
        let t0 = Instant::now();
        let parts = (0..n).map(|p| part(p, 0)).collect();
        let id = cache
            .begin_anonymous(&req(0, 0, parts, vec![]), t0)
            .unwrap()
            .0
            .session_id();
        let mut r = req(id, 1, vec![], vec![]);
        r.forgotten_topics_data = forgotten;
        let (_, entries) = cache.begin_anonymous(&r, t0).unwrap();
        let steps = cache.inner.lock().sessions[&id].steps;
        (steps, entries.iter().map(|e| e.partition).collect())
    }

    /// Forgetting is linear in the request plus the session, whether the
    /// request names many topics of one partition or one topic of many
    /// partitions (each was a scan of the session per name).
    #[test]
    fn forgetting_is_linear_in_the_request_and_the_session() {
        let n = 10_000;
        let one_each: Vec<pb::ForgottenTopic> = (0..1_000)
            .map(|i| pb::ForgottenTopic {
                topic: "t".into(),
                partitions: vec![i * 7],
            })
            .collect();
        let (steps, left) = forget_steps(n, one_each);
        assert!(steps <= 1_000 + n as usize, "{steps} steps");
        assert_eq!(left.len(), n as usize - 1_000);
        assert!(left.iter().all(|p| p % 7 != 0 || *p >= 7_000));
        assert!(left.windows(2).all(|w| w[0] < w[1]), "order is kept");

        // One name of 10^5 partitions, most of them not in the session, and
        // names of topics the session does not have.
        let mut many = vec![pb::ForgottenTopic {
            topic: "t".into(),
            partitions: (0..100_000).map(|p| p * 2).collect(),
        }];
        many.extend((0..1_000).map(|i| pb::ForgottenTopic {
            topic: format!("x{i}"),
            partitions: vec![0],
        }));
        let (steps, left) = forget_steps(n, many);
        assert!(steps <= 101_000 + n as usize, "{steps} steps");
        assert_eq!(left, (0..n).filter(|p| p % 2 == 1).collect::<Vec<_>>());
    }

    /// Kafka's testNewSessionId: ids are positive, never 0, never one in use;
    /// the draw is retried until it gives such an id.
    #[test]
    fn new_session_id() {
        let table: &[(&[i32], &[i32], i32)] = &[
            // draws, ids in use, the id chosen
            (&[7], &[], 7),
            (&[0, 7], &[], 7),
            (&[-5, i32::MIN, 9], &[], 9),
            (&[3, 3, 4], &[3], 4),
            (&[i32::MAX], &[1], i32::MAX),
        ];
        for (draws, taken, want) in table {
            let mut draws = draws.iter().copied();
            let got = super::new_session_id(|| draws.next().unwrap(), |id| taken.contains(&id));
            assert_eq!(got, *want, "draws {draws:?}, taken {taken:?}");
        }
    }

    /// A client cannot guess another's session from its own: the ids of
    /// sessions opened one after another are not consecutive (the chance of
    /// 100 random ids in a row each one above the last is nil).
    #[test]
    fn session_ids_cannot_be_guessed_from_one_another() {
        let cache = FetchSessionCache::new(1_000);
        let t0 = Instant::now();
        let ids: Vec<i32> = (0..100)
            .map(|_| {
                cache
                    .begin_anonymous(&req(0, 0, vec![part(0, 0)], vec![]), t0)
                    .unwrap()
                    .0
                    .session_id()
            })
            .collect();
        assert!(ids.iter().all(|id| *id > 0), "{ids:?}");
        let steps = ids.windows(2).filter(|w| w[1] == w[0] + 1).count();
        assert!(
            steps < 10,
            "{steps} of 99 ids follow the one before: {ids:?}"
        );
    }

    /// A session belongs to the principal (and replica id) that opened it:
    /// another principal's request naming it is told it does not exist, and
    /// another's close leaves it open. Its owner may still use and close it.
    #[test]
    fn a_session_is_used_and_closed_by_its_owner_only() {
        let cache = FetchSessionCache::new(10);
        let t0 = Instant::now();
        let alice = Principal::User("alice".into());
        let mallory = Principal::User("mallory".into());
        let mut open = req(0, 0, vec![part(0, 0)], vec![]);
        open.replica_id = -1;
        let id = cache.begin(&open, &alice, t0).unwrap().0.session_id();
        let mut next = req(id, 1, vec![part(1, 0)], vec![]);
        next.replica_id = -1;
        assert_eq!(
            cache.begin(&next, &mallory, t0).unwrap_err(),
            ErrorCode::FetchSessionIdNotFound
        );
        assert_eq!(
            cache.begin(&next, &Principal::Anonymous, t0).unwrap_err(),
            ErrorCode::FetchSessionIdNotFound
        );
        // A close by another is a sessionless fetch that closes nothing.
        let mut close = req(id, FINAL_EPOCH, vec![part(0, 0)], vec![]);
        close.replica_id = -1;
        let (ctx, _) = cache.begin(&close, &mallory, t0).unwrap();
        assert_eq!(ctx, SessionContext::Sessionless);
        assert_eq!(cache.len(), 1);
        // A broker's principal with the follower's replica id is no owner either.
        let mut as_follower = next.clone();
        as_follower.replica_id = 2;
        assert_eq!(
            cache
                .begin(&as_follower, &Principal::Broker(2), t0)
                .unwrap_err(),
            ErrorCode::FetchSessionIdNotFound
        );
        // The owner's requests were not disturbed: its epoch is still 1.
        let (ctx, entries) = cache.begin(&next, &alice, t0).unwrap();
        assert_eq!(ctx, SessionContext::Incremental { id });
        assert_eq!(entries.len(), 2);
        cache.begin(&close, &alice, t0).unwrap();
        assert_eq!(cache.len(), 0);
    }
}
