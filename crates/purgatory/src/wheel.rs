//! A hashed hierarchical timing wheel (Varghese & Lauck), in the manner of
//! Kafka's `TimingWheel` / `TimerTaskList` / `SystemTimer`.
//!
//! The wheel is a pure data structure: it never reads a clock. The caller
//! passes `now` to [`TimingWheel::advance_and_drain`] and asks
//! [`TimingWheel::next_bucket_expiration`] when it should come back.
//!
//! # Layout
//!
//! Time is counted in ticks of `tick_ms`. Level `L` has `wheel_size` slots of
//! `wheel_size^L` ticks each, so level 0 covers the next `wheel_size` ticks,
//! level 1 the next `wheel_size^2`, and so on; levels are added on demand when
//! a deadline does not fit the highest one. An entry lives in the bucket of
//! the lowest level whose window holds its deadline.
//!
//! Only *buckets* go into the delay queue (a binary heap keyed by the bucket's
//! expiration), never entries: the queue holds at most `wheel_size` items per
//! level, whatever the number of timers. When a bucket of level `L > 0` comes
//! due, its entries are re-placed relative to the new clock, which puts them
//! in a finer level (the cascade), or fired if their own deadline has passed.
//!
//! Entries sit in a slab and are linked into their bucket by index (an
//! intrusive doubly-linked list), so cancel is O(1), insert O(levels) (one
//! comparison per level below the entry's), and an entry keeps its slab
//! index, hence its [`TimerKey`], across cascades.

use std::cmp::Reverse;
use std::collections::BinaryHeap;
use std::fmt;

use slab::Slab;

/// End of an intrusive list.
const NIL: u32 = u32::MAX;
/// Bounds on `wheel_size`: at least two slots for the hierarchy to make
/// progress, and few enough that every bucket index fits a `u32`.
const WHEEL_SIZE_RANGE: std::ops::RangeInclusive<u32> = 2..=65_536;

/// Names one entry of a [`TimingWheel`], for [`TimingWheel::cancel`].
///
/// The generation makes a key stale once its entry has fired or been
/// cancelled, even after the slab reuses the entry's slot: a stale key cancels
/// nothing.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct TimerKey {
    index: u32,
    generation: u64,
}

/// A hashed hierarchical timing wheel holding values of type `T`.
///
/// Expiry is exact to the tick: an entry inserted with `expiration_ms` is
/// never handed out by [`advance_and_drain`](Self::advance_and_drain) before
/// `now_ms >= expiration_ms`, and always by the first call with
/// `now_ms >= expiration_ms` rounded up to a multiple of `tick_ms` (with the
/// default 1 ms tick: exactly at the deadline).
pub struct TimingWheel<T> {
    tick_ms: u64,
    wheel_size: u32,
    /// The wheel's clock in ticks: every entry due at or before it has fired.
    now_tick: u64,
    levels: Vec<Level>,
    /// `wheel_size` buckets per level, level after level.
    buckets: Vec<Bucket>,
    /// Non-empty buckets (and buckets emptied by cancels, dropped lazily) by
    /// expiration in ticks.
    queue: BinaryHeap<Reverse<(u64, u32)>>,
    entries: Slab<Entry<T>>,
    next_generation: u64,
}

struct Level {
    /// Ticks covered by one slot: `wheel_size^level`.
    slot_ticks: u64,
    /// Ticks covered by the whole level, `None` when that does not fit a
    /// `u64`: such a level holds every deadline that reaches it.
    span_ticks: Option<u64>,
    /// The clock rounded down to `slot_ticks`: the slot containing it is the
    /// one passing now, and the window is `[start_tick, start_tick + span)`.
    start_tick: u64,
    /// `start_tick + span_ticks`, `None` when unbounded.
    window_end: Option<u64>,
}

struct Bucket {
    /// Start of the window position this bucket holds now, in ticks, while
    /// it is in the delay queue. A slot holds one position of its level at a
    /// time, which is what makes one queue item per bucket enough. (Every
    /// `u64` is a valid expiration, hence the `Option`.)
    expiration: Option<u64>,
    head: u32,
}

struct Entry<T> {
    value: T,
    due_tick: u64,
    generation: u64,
    bucket: u32,
    prev: u32,
    next: u32,
}

impl<T> TimingWheel<T> {
    /// Creates an empty wheel of `wheel_size` slots of `tick_ms` each at
    /// level 0, whose clock reads `start_ms`.
    ///
    /// # Panics
    ///
    /// If `tick_ms` is 0 or `wheel_size` is outside `2..=65536`: both are
    /// compile-time constants in practice (Kafka's are 1 ms and 20).
    pub fn new(tick_ms: u64, wheel_size: u32, start_ms: u64) -> Self {
        assert!(tick_ms > 0, "tick_ms must be positive");
        assert!(
            WHEEL_SIZE_RANGE.contains(&wheel_size),
            "wheel_size must be in {WHEEL_SIZE_RANGE:?}, got {wheel_size}"
        );
        let mut wheel = Self {
            tick_ms,
            wheel_size,
            now_tick: start_ms / tick_ms,
            levels: Vec::new(),
            buckets: Vec::new(),
            queue: BinaryHeap::new(),
            entries: Slab::new(),
            next_generation: 0,
        };
        wheel.add_level();
        wheel
    }

    /// The tick, in milliseconds.
    pub fn tick_ms(&self) -> u64 {
        self.tick_ms
    }

    /// The number of slots of each level.
    pub fn wheel_size(&self) -> u32 {
        self.wheel_size
    }

    /// The wheel's clock, in milliseconds rounded down to the tick: entries
    /// whose expiration is at or before it have fired, and inserting one is
    /// refused.
    pub fn clock_ms(&self) -> u64 {
        self.now_tick.saturating_mul(self.tick_ms)
    }

    /// Number of pending entries.
    pub fn len(&self) -> usize {
        self.entries.len()
    }

    /// Whether no entry is pending.
    pub fn is_empty(&self) -> bool {
        self.entries.is_empty()
    }

    /// Adds `value`, to fire once the clock reaches `expiration_ms`.
    ///
    /// Returns the value back if that moment has already passed (the wheel's
    /// clock is at or beyond it): the caller fires it itself.
    ///
    /// # Panics
    ///
    /// With `u32::MAX - 1` entries pending (far more than fits in memory).
    pub fn insert(&mut self, expiration_ms: u64, value: T) -> Result<TimerKey, T> {
        // Rounding up keeps expiry from ever being early when the tick is
        // coarser than a millisecond.
        let due_tick = expiration_ms.div_ceil(self.tick_ms);
        if due_tick <= self.now_tick {
            return Err(value);
        }
        let generation = self.next_generation;
        self.next_generation += 1;
        let vacant = self.entries.vacant_entry();
        let index = u32::try_from(vacant.key())
            .ok()
            .filter(|&index| index != NIL)
            .expect("timing wheel holds at most u32::MAX - 1 entries");
        vacant.insert(Entry {
            value,
            due_tick,
            generation,
            bucket: NIL,
            prev: NIL,
            next: NIL,
        });
        self.place(index);
        Ok(TimerKey { index, generation })
    }

    /// Removes the entry named by `key` and returns its value, or `None` if
    /// it has already fired or been cancelled. O(1).
    pub fn cancel(&mut self, key: TimerKey) -> Option<T> {
        let index = key.index as usize;
        match self.entries.get(index) {
            Some(entry) if entry.generation == key.generation => {}
            _ => return None,
        }
        self.unlink(key.index);
        Some(self.entries.remove(index).value)
    }

    /// When the earliest non-empty bucket comes due, in milliseconds: the
    /// moment to call [`advance_and_drain`](Self::advance_and_drain) next.
    ///
    /// It may be earlier than any entry's own expiration (a bucket of a
    /// higher level comes due at the start of its range, to cascade), never
    /// later. Buckets emptied by cancels are dropped from the queue here, so a
    /// caller sleeping until this moment does not wake for nothing.
    pub fn next_bucket_expiration(&mut self) -> Option<u64> {
        while let Some(&Reverse((expiration, bucket))) = self.queue.peek() {
            let bucket = &mut self.buckets[bucket as usize];
            if bucket.head != NIL {
                return Some(expiration.saturating_mul(self.tick_ms));
            }
            bucket.expiration = None;
            self.queue.pop();
        }
        None
    }

    /// Moves the clock to `now_ms` and hands every entry whose expiration is
    /// at or before it (rounded up to the tick) to `on_expired`, bucket by
    /// bucket; entries of a due bucket that are not due themselves cascade
    /// into a finer level.
    ///
    /// A `now_ms` behind the clock does nothing. `on_expired` cannot reach
    /// the wheel; it should not panic, since entries of the bucket being
    /// drained would then be lost.
    pub fn advance_and_drain(&mut self, now_ms: u64, on_expired: &mut impl FnMut(T)) {
        let target_tick = now_ms / self.tick_ms;
        if target_tick <= self.now_tick {
            return;
        }
        while let Some(&Reverse((expiration, bucket))) = self.queue.peek() {
            if expiration > target_tick {
                break;
            }
            self.queue.pop();
            let drained = &mut self.buckets[bucket as usize];
            debug_assert_eq!(
                drained.expiration,
                Some(expiration),
                "queue and bucket disagree"
            );
            drained.expiration = None;
            let mut index = std::mem::replace(&mut drained.head, NIL);
            // Buckets pop in expiration order, so the clock only moves forward
            // here; re-placing relative to it sends cascaded entries to a
            // finer level, never back to this bucket.
            self.set_clock(expiration);
            while index != NIL {
                let entry = &self.entries[index as usize];
                let next = entry.next;
                if entry.due_tick <= target_tick {
                    on_expired(self.entries.remove(index as usize).value);
                } else {
                    self.place(index);
                }
                index = next;
            }
        }
        // Every bucket at or before the target has been drained, so no slot
        // of any level still holds a position that the new windows reuse.
        self.set_clock(target_tick);
    }

    fn set_clock(&mut self, tick: u64) {
        self.now_tick = tick;
        for level in &mut self.levels {
            level.start_tick = tick - tick % level.slot_ticks;
            level.window_end = level
                .span_ticks
                .and_then(|span| level.start_tick.checked_add(span));
        }
    }

    fn add_level(&mut self) {
        let slot_ticks = match self.levels.last() {
            None => 1,
            Some(top) => top
                .span_ticks
                .expect("an unbounded level holds every deadline"),
        };
        let span_ticks = slot_ticks.checked_mul(u64::from(self.wheel_size));
        let start_tick = self.now_tick - self.now_tick % slot_ticks;
        self.levels.push(Level {
            slot_ticks,
            span_ticks,
            start_tick,
            window_end: span_ticks.and_then(|span| start_tick.checked_add(span)),
        });
        self.buckets.extend((0..self.wheel_size).map(|_| Bucket {
            expiration: None,
            head: NIL,
        }));
    }

    /// Links the (unlinked) entry into the bucket of the lowest level whose
    /// window holds its deadline, queueing the bucket if it was not.
    fn place(&mut self, index: u32) {
        let due_tick = self.entries[index as usize].due_tick;
        debug_assert!(due_tick > self.now_tick, "placing an entry that is due");
        let mut level = 0;
        loop {
            if level == self.levels.len() {
                self.add_level();
            }
            let Level {
                slot_ticks,
                window_end,
                ..
            } = self.levels[level];
            if window_end.is_none_or(|end| due_tick < end) {
                let position = due_tick / slot_ticks;
                let expiration = position * slot_ticks;
                let slot = (position % u64::from(self.wheel_size)) as usize;
                let bucket = u32::try_from(level * self.wheel_size as usize + slot)
                    .expect("WHEEL_SIZE_RANGE keeps bucket indices within u32");
                self.push_front(bucket, index);
                let queued = &mut self.buckets[bucket as usize];
                if queued.expiration != Some(expiration) {
                    debug_assert_eq!(
                        queued.expiration, None,
                        "a slot holds one window position at a time"
                    );
                    queued.expiration = Some(expiration);
                    self.queue.push(Reverse((expiration, bucket)));
                }
                return;
            }
            level += 1;
        }
    }

    fn push_front(&mut self, bucket: u32, index: u32) {
        let head = self.buckets[bucket as usize].head;
        let entry = &mut self.entries[index as usize];
        entry.bucket = bucket;
        entry.prev = NIL;
        entry.next = head;
        if head != NIL {
            self.entries[head as usize].prev = index;
        }
        self.buckets[bucket as usize].head = index;
    }

    fn unlink(&mut self, index: u32) {
        let Entry {
            bucket, prev, next, ..
        } = self.entries[index as usize];
        if prev == NIL {
            self.buckets[bucket as usize].head = next;
        } else {
            self.entries[prev as usize].next = next;
        }
        if next != NIL {
            self.entries[next as usize].prev = prev;
        }
    }
}

impl<T> fmt::Debug for TimingWheel<T> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("TimingWheel")
            .field("tick_ms", &self.tick_ms)
            .field("wheel_size", &self.wheel_size)
            .field("clock_ms", &self.clock_ms())
            .field("levels", &self.levels.len())
            .field("len", &self.len())
            .field("queued_buckets", &self.queue.len())
            .finish()
    }
}
