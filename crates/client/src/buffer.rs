//! `buffer_memory` accounting: every record holds a reservation of its encoded
//! size from `send` until its batch completes. A full buffer makes `send` wait (in
//! arrival order: the semaphore is fair) up to `max_block_ms`, then fail; the
//! bound is never exceeded.

use std::sync::Arc;
use std::time::Duration;

use tokio::sync::{OwnedSemaphorePermit, Semaphore};
use tokio::time::Instant;

use crate::error::ProduceError;

/// The producer's byte budget.
#[derive(Debug, Clone)]
pub(crate) struct BufferPool {
    semaphore: Arc<Semaphore>,
    total_bytes: usize,
    /// `max_block_ms`, for the error of a wait that ran out.
    max_block: Duration,
}

/// Bytes held by records; returned to the pool when dropped.
#[derive(Debug)]
pub(crate) struct Reservation {
    permit: Option<OwnedSemaphorePermit>,
}

impl Reservation {
    /// Bytes held.
    #[cfg(test)]
    pub(crate) fn bytes(&self) -> usize {
        self.permit
            .as_ref()
            .map_or(0, OwnedSemaphorePermit::num_permits)
    }

    /// Adds another reservation to this one (a record joining its batch).
    pub(crate) fn merge(&mut self, other: Reservation) {
        match (&mut self.permit, other.permit) {
            (Some(mine), Some(theirs)) => mine.merge(theirs),
            (mine @ None, theirs) => *mine = theirs,
            (_, None) => {}
        }
    }

    /// A reservation of nothing.
    pub(crate) fn empty() -> Reservation {
        Reservation { permit: None }
    }
}

impl BufferPool {
    /// A pool of `total_bytes` whose sends wait up to `max_block` for room.
    pub(crate) fn new(total_bytes: usize, max_block: Duration) -> Self {
        BufferPool {
            semaphore: Arc::new(Semaphore::new(total_bytes.min(Semaphore::MAX_PERMITS))),
            total_bytes,
            max_block,
        }
    }

    /// Bytes not reserved now.
    #[cfg(test)]
    pub(crate) fn available(&self) -> usize {
        self.semaphore.available_permits()
    }

    /// Reserves `bytes` if they are free now (`None`: [`BufferPool::reserve`]
    /// would wait).
    pub(crate) fn try_reserve(&self, bytes: usize) -> Result<Option<Reservation>, ProduceError> {
        let permits = self.permits(bytes)?;
        if permits == 0 {
            return Ok(Some(Reservation::empty()));
        }
        Ok(self
            .semaphore
            .clone()
            .try_acquire_many_owned(permits)
            .ok()
            .map(|permit| Reservation {
                permit: Some(permit),
            }))
    }

    /// Checks `bytes` against the limits, as semaphore permits.
    fn permits(&self, bytes: usize) -> Result<u32, ProduceError> {
        if bytes > self.total_bytes {
            return Err(ProduceError::RecordTooLarge {
                size: bytes,
                limit: self.total_bytes,
                setting: "buffer_memory",
            });
        }
        u32::try_from(bytes).map_err(|_| ProduceError::RecordTooLarge {
            size: bytes,
            limit: u32::MAX as usize,
            setting: "buffer_memory",
        })
    }

    /// Reserves `bytes`, waiting until `deadline` (the send's `max_block_ms`
    /// deadline, which the metadata wait shares) for room.
    pub(crate) async fn reserve(
        &self,
        bytes: usize,
        deadline: Instant,
    ) -> Result<Reservation, ProduceError> {
        let permits = self.permits(bytes)?;
        if permits == 0 {
            return Ok(Reservation::empty());
        }
        // Room now (the common case): no timer, no clock read. Fair all the same:
        // while a send waits, released bytes go to it, not to this fast path.
        if let Ok(permit) = self.semaphore.clone().try_acquire_many_owned(permits) {
            return Ok(Reservation {
                permit: Some(permit),
            });
        }
        match tokio::time::timeout_at(deadline, self.semaphore.clone().acquire_many_owned(permits))
            .await
        {
            Ok(Ok(permit)) => Ok(Reservation {
                permit: Some(permit),
            }),
            Ok(Err(_closed)) => Err(ProduceError::Closed),
            Err(_elapsed) => Err(ProduceError::BufferFull {
                size: bytes,
                max_block_ms: self.max_block.as_millis() as u64,
            }),
        }
    }

    /// Fails every waiting and future `reserve` with [`ProduceError::Closed`].
    pub(crate) fn close(&self) {
        self.semaphore.close();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test(start_paused = true)]
    async fn full_buffer_blocks_then_fails_at_the_deadline() {
        let pool = BufferPool::new(100, Duration::from_millis(500));
        let start = Instant::now();
        let held = pool.reserve(80, start).await.unwrap();
        assert_eq!((held.bytes(), pool.available()), (80, 20));
        let err = pool
            .reserve(30, start + Duration::from_millis(500))
            .await
            .unwrap_err();
        assert!(
            matches!(
                err,
                ProduceError::BufferFull {
                    size: 30,
                    max_block_ms: 500
                }
            ),
            "{err:?}"
        );
        assert_eq!(start.elapsed(), Duration::from_millis(500));
        // Nothing leaked from the failed attempt.
        assert_eq!(pool.available(), 20);
    }

    #[test]
    fn try_reserve_takes_free_room_and_never_waits() {
        let pool = BufferPool::new(100, Duration::from_secs(60));
        let held = pool.try_reserve(80).unwrap().expect("room");
        assert_eq!((held.bytes(), pool.available()), (80, 20));
        assert!(pool.try_reserve(30).unwrap().is_none(), "no room: no wait");
        assert_eq!(pool.available(), 20);
        assert_eq!(pool.try_reserve(0).unwrap().unwrap().bytes(), 0);
        assert!(matches!(
            pool.try_reserve(101),
            Err(ProduceError::RecordTooLarge {
                setting: "buffer_memory",
                ..
            })
        ));
        drop(held);
        assert_eq!(pool.try_reserve(100).unwrap().unwrap().bytes(), 100);
    }

    #[tokio::test(start_paused = true)]
    async fn completion_releases_room_to_a_waiter() {
        let pool = BufferPool::new(100, Duration::from_secs(60));
        let now = Instant::now();
        let mut batch = pool.reserve(60, now).await.unwrap();
        batch.merge(pool.reserve(30, now).await.unwrap());
        assert_eq!(batch.bytes(), 90);
        let waiter = tokio::spawn({
            let pool = pool.clone();
            async move { pool.reserve(50, now + Duration::from_secs(60)).await }
        });
        tokio::time::advance(Duration::from_secs(10)).await;
        assert!(!waiter.is_finished());
        drop(batch); // the batch completed
        let got = waiter.await.unwrap().unwrap();
        assert_eq!((got.bytes(), pool.available()), (50, 50));
    }

    #[tokio::test(start_paused = true)]
    async fn larger_than_the_whole_buffer_fails_at_once_and_close_wakes_waiters() {
        let pool = BufferPool::new(100, Duration::from_secs(60));
        let deadline = Instant::now() + Duration::from_secs(60);
        assert!(matches!(
            pool.reserve(101, deadline).await,
            Err(ProduceError::RecordTooLarge {
                setting: "buffer_memory",
                ..
            })
        ));
        let _all = pool.reserve(100, Instant::now()).await.unwrap();
        let waiter = tokio::spawn({
            let pool = pool.clone();
            async move { pool.reserve(1, deadline).await }
        });
        tokio::task::yield_now().await;
        pool.close();
        assert!(matches!(waiter.await.unwrap(), Err(ProduceError::Closed)));
    }
}
