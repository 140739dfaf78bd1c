//! InitProducerId: each idempotent producer gets an id of its own, from blocks the
//! active controller hands this broker (AllocateProducerIds, recorded in the
//! metadata log, so no id is ever given twice). Without a transactional id, as in
//! Kafka, every call gets a new id with epoch 0.

use syncline_proto::{pb, ErrorCode};

/// The block of ids this broker gives out: `next..end`.
#[derive(Debug, Default)]
struct Block {
    next: i64,
    end: i64,
}

/// This broker's producer ids.
#[derive(Debug, Default)]
pub(crate) struct ProducerIds {
    block: tokio::sync::Mutex<Block>,
}

impl ProducerIds {
    /// The next id, asking `allocate` (the active controller) for a block when
    /// this one is used up. Calls queue behind a block request in flight.
    pub(crate) async fn next<F, Fut>(&self, allocate: F) -> Result<i64, (ErrorCode, String)>
    where
        F: FnOnce() -> Fut,
        Fut: std::future::Future<Output = pb::response::Body>,
    {
        let mut block = self.block.lock().await;
        if block.next >= block.end {
            match allocate().await {
                pb::response::Body::AllocateProducerIds(r)
                    if r.error_code == ErrorCode::None as i32 && r.producer_id_len > 0 =>
                {
                    tracing::info!(
                        start = r.producer_id_start,
                        len = r.producer_id_len,
                        "new block of producer ids"
                    );
                    block.next = r.producer_id_start;
                    block.end = r.producer_id_start + i64::from(r.producer_id_len);
                }
                pb::response::Body::AllocateProducerIds(r) => {
                    return Err((ErrorCode::from_wire(r.error_code), r.error_message))
                }
                pb::response::Body::Error(e) => {
                    return Err((ErrorCode::from_wire(e.error_code), e.error_message))
                }
                other => {
                    return Err((
                        ErrorCode::UnknownServerError,
                        format!("unexpected answer to AllocateProducerIds: {other:?}"),
                    ))
                }
            }
        }
        let id = block.next;
        block.next += 1;
        Ok(id)
    }
}

/// The answer to an InitProducerId, from the id (or why there is none).
pub(crate) fn init_response(id: Result<i64, (ErrorCode, String)>) -> pb::InitProducerIdResponse {
    match id {
        Ok(producer_id) => pb::InitProducerIdResponse {
            error_code: ErrorCode::None as i32,
            error_message: String::new(),
            producer_id,
            producer_epoch: 0,
        },
        Err((code, message)) => pb::InitProducerIdResponse {
            error_code: code as i32,
            error_message: message,
            producer_id: -1,
            producer_epoch: -1,
        },
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn block(start: i64, len: i32) -> pb::response::Body {
        pb::response::Body::AllocateProducerIds(pb::AllocateProducerIdsResponse {
            error_code: 0,
            error_message: String::new(),
            producer_id_start: start,
            producer_id_len: len,
        })
    }

    #[tokio::test]
    async fn ids_come_from_one_block_until_it_is_used_up_then_from_the_next() {
        let ids = ProducerIds::default();
        let asked = std::cell::Cell::new(0);
        let mut got = Vec::new();
        for _ in 0..5 {
            let id = ids
                .next(|| {
                    asked.set(asked.get() + 1);
                    let start = if asked.get() == 1 { 100 } else { 7000 };
                    async move { block(start, 3) }
                })
                .await
                .unwrap();
            got.push(id);
        }
        assert_eq!(got, [100, 101, 102, 7000, 7001]);
        assert_eq!(asked.get(), 2);
    }

    #[tokio::test]
    async fn a_refused_block_is_the_producers_error_and_the_next_call_asks_again() {
        let ids = ProducerIds::default();
        let refused = ids
            .next(|| async {
                pb::response::Body::Error(pb::ErrorResponse {
                    error_code: ErrorCode::NotController as i32,
                    error_message: "no active controller".into(),
                    controller_hint: None,
                })
            })
            .await;
        let r = init_response(refused);
        assert_eq!(ErrorCode::from_wire(r.error_code), ErrorCode::NotController);
        assert_eq!((r.producer_id, r.producer_epoch), (-1, -1));
        let r = init_response(ids.next(|| async { block(0, 1000) }).await);
        assert_eq!((r.error_code, r.producer_id, r.producer_epoch), (0, 0, 0));
    }
}
