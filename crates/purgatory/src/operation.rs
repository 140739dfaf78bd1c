//! What a delayed operation is ([`DelayedOperation`]), how it ended
//! ([`Completion`]), and the purgatory's per-operation state behind an
//! [`OpHandle`].

use std::fmt;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;

use parking_lot::Mutex;

use crate::wheel::TimerKey;

/// An operation that waits, without a task or a thread, until it can
/// complete or its timeout passes: a fetch waiting for `min_bytes`, an
/// `acks=all` produce waiting for the high watermark.
///
/// The purgatory guarantees:
/// - `try_complete` runs under the operation's own lock: never concurrently
///   for one operation, and never once it has completed. It may record
///   partial progress in the operation.
/// - `on_complete` runs exactly once, whatever races between events,
///   expiry and cancellation, after the last `try_complete` and without the
///   purgatory holding any lock.
///
/// Both must be short and must not block. `on_complete` with
/// [`Completion::Expired`] runs on the purgatory's reaper task, which expires
/// every other operation of that purgatory. Neither may be called while the
/// caller holds a lock that `try_complete` takes (call
/// [`Purgatory::check_and_complete`](crate::Purgatory::check_and_complete)
/// after releasing the partition's lock, not under it).
pub trait DelayedOperation: Send + Sync + 'static {
    /// Can the operation complete now? If it returns true, the purgatory
    /// calls `on_complete(Completion::Satisfied)`.
    fn try_complete(&self) -> bool;

    /// Called exactly once, with how the operation ended: build and send the
    /// response here.
    fn on_complete(&self, how: Completion);
}

/// How a delayed operation ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Completion {
    /// `try_complete` returned true.
    Satisfied,
    /// The timeout passed first.
    Expired,
    /// Cancelled through the purgatory (its connection closed, its partition
    /// was removed).
    Cancelled,
}

impl<D: DelayedOperation + ?Sized> DelayedOperation for Box<D> {
    fn try_complete(&self) -> bool {
        (**self).try_complete()
    }

    fn on_complete(&self, how: Completion) {
        (**self).on_complete(how);
    }
}

impl<D: DelayedOperation + ?Sized> DelayedOperation for Arc<D> {
    fn try_complete(&self) -> bool {
        (**self).try_complete()
    }

    fn on_complete(&self, how: Completion) {
        (**self).on_complete(how);
    }
}

/// One operation in a purgatory: the watcher lists and the timer hold it by
/// `Arc`.
pub(crate) struct OpState<O> {
    pub(crate) op: O,
    /// The purgatory that owns it, so a handle from another one cancels
    /// nothing there.
    pub(crate) owner: u64,
    /// Set once, under `slot`; read without the lock to skip completed
    /// operations in watcher lists.
    completed: AtomicBool,
    /// The operation's lock: serialises `try_complete` and completion.
    pub(crate) slot: Mutex<Slot>,
}

/// The part of an operation's state that only its lock holder touches.
#[derive(Default)]
pub(crate) struct Slot {
    /// Set when the operation went pending (watched and in the timer); taken
    /// at completion. The key is stale once the timer expired the entry.
    pub(crate) timer_key: Option<TimerKey>,
    /// How many watcher entries the operation added.
    pub(crate) watches: usize,
}

impl<O> OpState<O> {
    pub(crate) fn new(op: O, owner: u64) -> Self {
        Self {
            op,
            owner,
            completed: AtomicBool::new(false),
            slot: Mutex::new(Slot::default()),
        }
    }

    pub(crate) fn is_completed(&self) -> bool {
        self.completed.load(Ordering::Acquire)
    }

    /// Marks the operation completed; returns false if it already was. This
    /// swap is what makes completion exactly-once. Callers also check under
    /// `slot` first, so that `try_complete` never runs after completion.
    pub(crate) fn mark_completed(&self) -> bool {
        !self.completed.swap(true, Ordering::AcqRel)
    }
}

/// A pending operation in a purgatory, to cancel it later (for example when
/// its connection closes) with [`Purgatory::cancel`](crate::Purgatory::cancel).
///
/// Holding a handle keeps the operation's memory alive; drop it once the
/// operation has completed.
pub struct OpHandle<O>(pub(crate) Arc<OpState<O>>);

impl<O> OpHandle<O> {
    /// Whether the operation has completed, in any way.
    pub fn is_completed(&self) -> bool {
        self.0.is_completed()
    }

    /// The operation itself.
    pub fn operation(&self) -> &O {
        &self.0.op
    }
}

impl<O> Clone for OpHandle<O> {
    fn clone(&self) -> Self {
        Self(Arc::clone(&self.0))
    }
}

impl<O> fmt::Debug for OpHandle<O> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("OpHandle")
            .field("completed", &self.is_completed())
            .finish_non_exhaustive()
    }
}

/// What [`Purgatory::try_complete_else_watch`](crate::Purgatory::try_complete_else_watch)
/// did with an operation.
pub enum Watched<O> {
    /// It completed at once (`on_complete` has run, with this reason: a zero
    /// timeout expires at once).
    Completed(Completion),
    /// It is waiting, watched on its keys and in the timer.
    Waiting(OpHandle<O>),
}

impl<O> fmt::Debug for Watched<O> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::Completed(how) => f.debug_tuple("Completed").field(how).finish(),
            Self::Waiting(handle) => f.debug_tuple("Waiting").field(handle).finish(),
        }
    }
}
