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
//!
//! A full cache makes room as Kafka's `FetchSessionCache.tryEvict` does (see
//! [`try_evict`]): a session unused for [`EVICTION_AFTER`] is stale and goes
//! first; otherwise a newcomer evicts the least worth session it outranks, a
//! follower's outranking any client's, a larger one a smaller one that is not
//! new itself. A client's session never evicts a follower's that is in use.
//!
//! A session holds at most `max_partitions` partitions (any partition named,
//! hosted here or not, counts): a request opening a larger one gets no
//! session, an incremental fetch growing one past it closes it and is told
//! FETCH_SESSION_ID_NOT_FOUND, after which the client fetches in full.
//!
//! Each session has a lock of its own: the cache's lock is held to find,
//! insert or evict a session (constant or logarithmic in the number of
//! sessions), a session's for as long as the request's partitions take.

use std::collections::{BTreeSet, HashMap};
use std::sync::Arc;
use std::time::Duration;

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

/// How long a session may go unused before any newcomer may evict it, and
/// how old a session must be before a larger newcomer may (Kafka's
/// `MIN_INCREMENTAL_FETCH_SESSION_EVICTION_MS`). A follower fetches every
/// few seconds even when idle (an idle fetcher waits at most 5 s): its
/// session goes stale only once it has stopped fetching (by default, long
/// after it has left the ISR: `replica_lag_time_max_ms` is 30 s).
pub(crate) const EVICTION_AFTER: Duration = Duration::from_secs(120);

/// What a session is worth keeping, least first (Kafka's `EvictableKey`): a
/// client's below a follower's, then fewer partitions below more; the id
/// tells equals apart.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub(crate) struct Worth {
    /// Whether a follower owns it (Kafka's "privileged").
    pub follower: bool,
    /// Its partitions.
    pub size: usize,
    pub id: i32,
}

impl Worth {
    /// Whether a newcomer worth `self` (its id aside) may evict `other`.
    #[must_use]
    fn outranks(self, other: Worth) -> bool {
        (self.follower, self.size) > (other.follower, other.size)
    }
}

/// Whom a session used at `now` may be evicted by, other than as stale.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Evictable {
    /// By a follower's new session: a client's session at any age, a
    /// follower's once older than [`EVICTION_AFTER`].
    pub by_followers: bool,
    /// By any new session: one older than [`EVICTION_AFTER`].
    pub by_clients: bool,
}

/// Whom a session opened at `created` and used at `now` may be evicted by.
#[must_use]
pub(crate) fn evictable(
    follower: bool,
    created: Instant,
    now: Instant,
    eviction_after: Duration,
) -> Evictable {
    let mature = now.saturating_duration_since(created) > eviction_after;
    Evictable {
        by_followers: !follower || mature,
        by_clients: mature,
    }
}

/// The session a newcomer worth `newcomer` evicts from a full cache, if any
/// (Kafka's `tryEvict`): the least recently used, `(last used, id)`, when it
/// is stale; else the least worth among those the newcomer may evict (see
/// [`Evictable`]) when the newcomer outranks it. None: the newcomer gets no
/// session.
#[must_use]
pub(crate) fn try_evict(
    newcomer: Worth,
    least_recently_used: Option<(Instant, i32)>,
    least_worth: Option<Worth>,
    now: Instant,
    eviction_after: Duration,
) -> Option<i32> {
    let (last_used, lru) = least_recently_used?;
    if now.saturating_duration_since(last_used) > eviction_after {
        return Some(lru);
    }
    least_worth.filter(|w| newcomer.outranks(*w)).map(|w| w.id)
}

#[derive(Debug)]
struct Session {
    /// The epoch the next request must carry.
    next_epoch: i32,
    /// In the order they joined (the order fetches read them in).
    partitions: Vec<(FetchEntry, Option<Sent>)>,
    /// Where each partition is in `partitions`: a fetch looks up every one of
    /// them, under the session's lock.
    index: HashMap<Arc<str>, HashMap<i32, usize>>,
    /// Names and partitions visited by [`Session::forget`] (tests count them).
    #[cfg(test)]
    steps: usize,
}

impl Session {
    fn new(entries: &[FetchEntry]) -> Session {
        let mut session = Session {
            next_epoch: 1,
            partitions: Vec::with_capacity(entries.len()),
            index: HashMap::new(),
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
/// `max.incremental.fetch.session.cache.slots`); see the module docs for
/// which session a full cache evicts.
#[derive(Debug)]
pub(crate) struct FetchSessionCache {
    max_slots: usize,
    max_partitions: usize,
    eviction_after: Duration,
    inner: Mutex<Inner>,
}

/// A session in the cache: what the cache's lock guards of it.
#[derive(Debug)]
struct Slot {
    owner: Owner,
    created: Instant,
    last_used: Instant,
    /// As of its last use (its key in the sets of [`Inner`]).
    worth: Worth,
    session: Arc<Mutex<Session>>,
}

#[derive(Debug, Default)]
struct Inner {
    sessions: HashMap<i32, Slot>,
    /// `(last used, id)` of every session.
    by_last_used: BTreeSet<(Instant, i32)>,
    /// The sessions a follower's new session may evict, by worth.
    evictable_by_followers: BTreeSet<Worth>,
    /// The sessions any new session may evict, by worth.
    evictable_by_clients: BTreeSet<Worth>,
}

impl Inner {
    fn remove(&mut self, id: i32) {
        if let Some(slot) = self.sessions.remove(&id) {
            self.by_last_used.remove(&(slot.last_used, id));
            self.evictable_by_followers.remove(&slot.worth);
            self.evictable_by_clients.remove(&slot.worth);
        }
    }

    /// Files session `id` (if it is still `session`) as used at `now` with
    /// `size` partitions.
    fn touch(
        &mut self,
        id: i32,
        session: &Arc<Mutex<Session>>,
        size: usize,
        now: Instant,
        eviction_after: Duration,
    ) {
        let Some(slot) = self
            .sessions
            .get_mut(&id)
            .filter(|slot| Arc::ptr_eq(&slot.session, session))
        else {
            return;
        };
        self.by_last_used.remove(&(slot.last_used, id));
        self.evictable_by_followers.remove(&slot.worth);
        self.evictable_by_clients.remove(&slot.worth);
        slot.last_used = slot.last_used.max(now);
        slot.worth.size = size;
        self.by_last_used.insert((slot.last_used, id));
        let may = evictable(slot.worth.follower, slot.created, now, eviction_after);
        if may.by_followers {
            self.evictable_by_followers.insert(slot.worth);
        }
        if may.by_clients {
            self.evictable_by_clients.insert(slot.worth);
        }
    }
}

impl FetchSessionCache {
    pub(crate) fn new(max_slots: usize, max_partitions: usize) -> FetchSessionCache {
        FetchSessionCache::with_eviction_after(max_slots, max_partitions, EVICTION_AFTER)
    }

    fn with_eviction_after(
        max_slots: usize,
        max_partitions: usize,
        eviction_after: Duration,
    ) -> FetchSessionCache {
        FetchSessionCache {
            max_slots,
            max_partitions,
            eviction_after,
            inner: Mutex::new(Inner::default()),
        }
    }

    /// Number of open sessions.
    pub(crate) fn len(&self) -> usize {
        self.inner.lock().sessions.len()
    }

    /// The open sessions' ids, in no order.
    pub(crate) fn ids(&self) -> Vec<i32> {
        self.inner.lock().sessions.keys().copied().collect()
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
        match (req.session_id, req.session_epoch) {
            (0, FINAL_EPOCH) => Ok((SessionContext::Sessionless, requested())),
            (0, INITIAL_EPOCH) => {
                let entries = requested();
                if self.max_slots == 0 {
                    return Ok((SessionContext::Sessionless, entries));
                }
                // Built before the cache's lock is taken: the request's work.
                let session = Session::new(&entries);
                if session.partitions.len() > self.max_partitions {
                    return Ok((SessionContext::Sessionless, entries));
                }
                let newcomer = Worth {
                    follower: owner.replica_id >= 0,
                    size: session.partitions.len(),
                    id: 0,
                };
                let mut inner = self.inner.lock();
                if inner.sessions.len() >= self.max_slots {
                    let evicted = try_evict(
                        newcomer,
                        inner.by_last_used.first().copied(),
                        if newcomer.follower {
                            inner.evictable_by_followers.first().copied()
                        } else {
                            inner.evictable_by_clients.first().copied()
                        },
                        now,
                        self.eviction_after,
                    );
                    match evicted {
                        Some(id) => inner.remove(id),
                        None => return Ok((SessionContext::Sessionless, entries)),
                    }
                }
                let id = new_session_id(
                    || rand::random_range(1..=i32::MAX),
                    |id| inner.sessions.contains_key(&id),
                );
                let session = Arc::new(Mutex::new(session));
                inner.sessions.insert(
                    id,
                    Slot {
                        owner,
                        created: now,
                        last_used: now,
                        worth: Worth { id, ..newcomer },
                        session: session.clone(),
                    },
                );
                inner.touch(id, &session, newcomer.size, now, self.eviction_after);
                Ok((SessionContext::New { id }, entries))
            }
            (0, _) => Err(ErrorCode::InvalidFetchSessionEpoch),
            (id, FINAL_EPOCH) => {
                let mut inner = self.inner.lock();
                if inner.sessions.get(&id).is_some_and(|s| s.owner == owner) {
                    inner.remove(id);
                }
                drop(inner);
                Ok((SessionContext::Sessionless, requested()))
            }
            (id, epoch) => {
                let session = self
                    .inner
                    .lock()
                    .sessions
                    .get(&id)
                    .filter(|slot| slot.owner == owner)
                    .map(|slot| slot.session.clone())
                    .ok_or(ErrorCode::FetchSessionIdNotFound)?;
                let mut s = session.lock();
                if epoch != s.next_epoch {
                    return Err(ErrorCode::InvalidFetchSessionEpoch);
                }
                s.forget(&req.forgotten_topics_data);
                for t in &req.topics {
                    let topic: Arc<str> = Arc::from(t.topic.as_str());
                    for p in &t.partitions {
                        s.upsert(FetchEntry::from_request(&topic, p));
                    }
                }
                if s.partitions.len() > self.max_partitions {
                    drop(s);
                    let mut inner = self.inner.lock();
                    if inner
                        .sessions
                        .get(&id)
                        .is_some_and(|slot| Arc::ptr_eq(&slot.session, &session))
                    {
                        inner.remove(id);
                    }
                    return Err(ErrorCode::FetchSessionIdNotFound);
                }
                s.next_epoch = s.next_epoch.checked_add(1).unwrap_or(1);
                let entries: Vec<FetchEntry> =
                    s.partitions.iter().map(|(e, _)| e.clone()).collect();
                drop(s);
                self.inner
                    .lock()
                    .touch(id, &session, entries.len(), now, self.eviction_after);
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
        let Some(session) = self
            .inner
            .lock()
            .sessions
            .get(&id)
            .map(|slot| slot.session.clone())
        else {
            return;
        };
        let mut session = session.lock();
        let Session {
            index, partitions, ..
        } = &mut *session;
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
        let cache = FetchSessionCache::new(10, 1_000_000);
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
        let cache = FetchSessionCache::new(10, 1_000_000);
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
        let cache = FetchSessionCache::new(2, 1_000_000);
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
        // While both are in use, a session no larger takes neither's place.
        assert_eq!(
            cache
                .begin_anonymous(
                    &req(0, 0, vec![part(0, 0)], vec![]),
                    t0 + std::time::Duration::from_millis(3),
                )
                .unwrap()
                .0,
            SessionContext::Sessionless
        );
        // Once both are stale, the least recently used makes room.
        let c = cache
            .begin_anonymous(
                &req(0, 0, vec![part(0, 0)], vec![]),
                t0 + EVICTION_AFTER + std::time::Duration::from_millis(3),
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
        let none = FetchSessionCache::new(0, 1_000_000);
        assert_eq!(
            none.begin_anonymous(&req(0, 0, vec![part(0, 0)], vec![]), t0)
                .unwrap()
                .0,
            SessionContext::Sessionless
        );
    }

    /// A session of `n` partitions of topic "t", and what its forget cost.
    fn forget_steps(n: i32, forgotten: Vec<pb::ForgottenTopic>) -> (usize, Vec<i32>) {
        let cache = FetchSessionCache::new(1, 1_000_000);
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
        let steps = cache.inner.lock().sessions[&id].session.lock().steps;
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
        let cache = FetchSessionCache::new(1_000, 1_000_000);
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
        let cache = FetchSessionCache::new(10, 1_000_000);
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

    /// Opens and uses sessions at given milliseconds, as given owners: a
    /// `replica_id` ≥ 0 is that broker's follower, -1 an anonymous client.
    struct Harness {
        cache: FetchSessionCache,
        t0: Instant,
        owners: HashMap<i32, i32>,
    }

    impl Harness {
        fn new(slots: usize, eviction_after_ms: u64) -> Harness {
            Harness {
                cache: FetchSessionCache::with_eviction_after(
                    slots,
                    1_000_000,
                    Duration::from_millis(eviction_after_ms),
                ),
                t0: Instant::now(),
                owners: HashMap::new(),
            }
        }

        fn principal(replica_id: i32) -> Principal {
            if replica_id >= 0 {
                Principal::Broker(replica_id)
            } else {
                Principal::Anonymous
            }
        }

        /// A new session of `size` partitions; 0 when declined.
        fn open(&mut self, replica_id: i32, size: i32, ms: u64) -> i32 {
            let mut r = req(0, 0, (0..size).map(|p| part(p, 0)).collect(), vec![]);
            r.replica_id = replica_id;
            let at = self.t0 + Duration::from_millis(ms);
            let id = self
                .cache
                .begin(&r, &Harness::principal(replica_id), at)
                .unwrap()
                .0
                .session_id();
            self.owners.insert(id, replica_id);
            id
        }

        /// An incremental fetch in session `id` that changes nothing.
        fn touch(&self, id: i32, ms: u64) {
            let epoch = self.cache.inner.lock().sessions[&id]
                .session
                .lock()
                .next_epoch;
            let replica_id = self.owners[&id];
            let mut r = req(id, epoch, vec![], vec![]);
            r.replica_id = replica_id;
            let at = self.t0 + Duration::from_millis(ms);
            self.cache
                .begin(&r, &Harness::principal(replica_id), at)
                .unwrap();
        }

        fn open_ids(&self) -> BTreeSet<i32> {
            self.cache.inner.lock().sessions.keys().copied().collect()
        }
    }

    fn ids<const N: usize>(ids: [i32; N]) -> BTreeSet<i32> {
        ids.into_iter().collect()
    }

    /// Kafka's tryEvict, as a table: a stale least recently used session
    /// goes first, whoever comes; else the newcomer must outrank the least
    /// worth session it may evict (a follower any client, a larger session a
    /// smaller one).
    #[test]
    fn try_evict() {
        let t0 = Instant::now();
        let after = Duration::from_millis(100);
        let client = |size, id| Worth {
            follower: false,
            size,
            id,
        };
        let follower = |size, id| Worth {
            follower: true,
            size,
            id,
        };
        let ms = |m| t0 + Duration::from_millis(m);
        #[allow(clippy::type_complexity)]
        let table: &[(
            Worth,
            Option<(Instant, i32)>,
            Option<Worth>,
            u64,
            Option<i32>,
            &str,
        )] = &[
            (client(5, 0), None, None, 0, None, "an empty cache"),
            (
                client(1, 0),
                Some((ms(0), 7)),
                Some(follower(9, 8)),
                101,
                Some(7),
                "stale goes first",
            ),
            (
                client(1, 0),
                Some((ms(0), 7)),
                Some(follower(9, 8)),
                100,
                None,
                "not stale at the bound",
            ),
            (
                client(5, 0),
                Some((ms(50), 7)),
                None,
                60,
                None,
                "nothing evictable",
            ),
            (
                client(5, 0),
                Some((ms(50), 7)),
                Some(client(4, 3)),
                60,
                Some(3),
                "larger client",
            ),
            (
                client(4, 0),
                Some((ms(50), 7)),
                Some(client(4, 3)),
                60,
                None,
                "equal size",
            ),
            (
                client(3, 0),
                Some((ms(50), 7)),
                Some(client(4, 3)),
                60,
                None,
                "smaller client",
            ),
            (
                client(1 << 20, 0),
                Some((ms(50), 7)),
                Some(follower(1, 3)),
                60,
                None,
                "client vs follower",
            ),
            (
                follower(1, 0),
                Some((ms(50), 7)),
                Some(client(1 << 20, 3)),
                60,
                Some(3),
                "follower vs client",
            ),
            (
                follower(5, 0),
                Some((ms(50), 7)),
                Some(follower(4, 3)),
                60,
                Some(3),
                "larger follower",
            ),
            (
                follower(4, 0),
                Some((ms(50), 7)),
                Some(follower(4, 3)),
                60,
                None,
                "equal follower",
            ),
        ];
        for (newcomer, lru, least, now, want, case) in table {
            let got = super::try_evict(*newcomer, *lru, *least, ms(*now), after);
            assert_eq!(got, *want, "{case}");
        }
    }

    /// Whom a session may be evicted by (Kafka's touch): a client's session
    /// by any follower's at once, by a larger client's once mature; a
    /// follower's by a larger follower's once mature, never by a client's.
    #[test]
    fn evictable_by() {
        let t0 = Instant::now();
        let after = Duration::from_millis(100);
        let table = [
            // follower, age in ms, by followers, by clients
            (false, 0, true, false),
            (false, 100, true, false),
            (false, 101, true, true),
            (true, 0, false, false),
            (true, 100, false, false),
            (true, 101, true, true),
        ];
        for (follower, age, by_followers, by_clients) in table {
            let got = super::evictable(follower, t0, t0 + Duration::from_millis(age), after);
            let want = Evictable {
                by_followers,
                by_clients,
            };
            assert_eq!(got, want, "follower {follower}, age {age} ms");
        }
    }

    /// Kafka's testSessionCache, in its numbers (3 slots, sessions evictable
    /// after 100 ms): young sessions are not evicted, a stale one is, then
    /// the smallest mature one for a larger newcomer, and a follower's
    /// session evicts the smallest client's.
    #[test]
    fn session_cache() {
        let mut h = Harness::new(3, 100);
        let id1 = h.open(-1, 10, 0);
        let id2 = h.open(-1, 20, 10);
        let id3 = h.open(-1, 30, 20);
        assert_eq!(h.open(-1, 40, 30), 0);
        assert_eq!(h.open(-1, 5, 40), 0);
        assert_eq!(h.open_ids(), ids([id1, id2, id3]));
        h.touch(id1, 200);
        let id4 = h.open(-1, 11, 210);
        assert_eq!(h.open_ids(), ids([id1, id3, id4]), "id2 was stale");
        h.touch(id1, 400);
        h.touch(id3, 390);
        h.touch(id4, 400);
        let id5 = h.open(-1, 50, 410);
        assert_eq!(h.open_ids(), ids([id3, id4, id5]), "id1 was the smallest");
        assert_eq!(h.open(-1, 5, 410), 0, "smaller than every evictable one");
        let id6 = h.open(1, 5, 410);
        assert_eq!(
            h.open_ids(),
            ids([id3, id5, id6]),
            "a follower's evicts id4"
        );
    }

    /// Kafka's testPrivilegedSessionHandling: a follower's session that is in
    /// use is never evicted by a client's, however large and however old the
    /// follower's session; a follower's new session evicts a client's; a
    /// follower's session that stopped being used goes stale like any.
    #[test]
    fn privileged_session_handling() {
        let mut h = Harness::new(2, 100);
        let f = h.open(2, 2, 0);
        let c = h.open(-1, 1, 0);
        for ms in [90, 190] {
            h.touch(f, ms);
            h.touch(c, ms);
        }
        // Both mature now: the larger client evicts the smaller one only.
        let x = h.open(-1, 1_000, 200);
        assert_eq!(h.open_ids(), ids([f, x]));
        // f, the least recently used, mature, smaller than any newcomer, is
        // in use: no client's session takes its place.
        h.touch(f, 210);
        h.touch(x, 250);
        for ms in [260, 300] {
            assert_eq!(h.open(-1, 10_000, ms), 0, "at {ms} ms");
            assert_eq!(h.open_ids(), ids([f, x]));
        }
        // Another follower's session evicts the client's, large as it is.
        let g = h.open(3, 1, 305);
        assert_eq!(h.open_ids(), ids([f, g]));
        // f stops fetching: once stale, any session may take its place.
        h.touch(g, 306);
        assert_eq!(h.open(-1, 1, 310), 0, "f is not stale yet");
        let y = h.open(-1, 1, 311);
        assert_eq!(h.open_ids(), ids([g, y]));
    }

    /// A session holds at most `max_partitions` partitions, unknown ones
    /// counted like any: a request opening a larger one is answered without
    /// a session; an incremental fetch that grows one past the cap closes it
    /// and is told FETCH_SESSION_ID_NOT_FOUND (the client starts over with a
    /// full fetch, which is then declined a session). Forgetting first makes
    /// room.
    #[test]
    fn a_session_holds_at_most_max_partitions() {
        let cache = FetchSessionCache::new(10, 3);
        let t0 = Instant::now();
        let parts = |range: std::ops::Range<i32>| range.map(|p| part(p, 0)).collect::<Vec<_>>();
        let (ctx, entries) = cache
            .begin_anonymous(&req(0, 0, parts(0..4), vec![]), t0)
            .unwrap();
        assert_eq!(ctx, SessionContext::Sessionless, "4 partitions, cap 3");
        assert_eq!(entries.len(), 4, "answered in full all the same");
        assert_eq!(cache.len(), 0);
        // A partition named twice is one partition.
        let mut twice = parts(0..3);
        twice.push(part(2, 5));
        let id = cache
            .begin_anonymous(&req(0, 0, twice, vec![]), t0)
            .unwrap()
            .0
            .session_id();
        assert_ne!(id, 0);
        // Replacing one (forget 0, add 3) stays within the cap.
        let (_, entries) = cache
            .begin_anonymous(&req(id, 1, parts(3..4), vec![0]), t0)
            .unwrap();
        assert_eq!(
            entries.iter().map(|e| e.partition).collect::<Vec<_>>(),
            vec![1, 2, 3]
        );
        // Growing past it, with partitions no broker hosts: the session is gone.
        let mut grow = req(id, 2, vec![], vec![]);
        grow.topics = vec![pb::FetchTopic {
            topic: "no-such-topic".into(),
            partitions: parts(0..1),
        }];
        assert_eq!(
            cache.begin_anonymous(&grow, t0).unwrap_err(),
            ErrorCode::FetchSessionIdNotFound
        );
        assert_eq!(cache.len(), 0);
        assert_eq!(
            cache
                .begin_anonymous(&req(id, 3, vec![], vec![]), t0)
                .unwrap_err(),
            ErrorCode::FetchSessionIdNotFound
        );
    }
}
