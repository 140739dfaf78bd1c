//! AllocateProducerIds: consecutive blocks, recorded, kept across a replay, and
//! refused to a broker that is not who it says.

use syncline_controller::{MetadataImage, PRODUCER_ID_BLOCK_SIZE};
use syncline_proto::{pb, ErrorCode};

use crate::support::Cluster;

fn allocate(
    cl: &mut Cluster,
    broker_id: i32,
    broker_epoch: i64,
) -> pb::AllocateProducerIdsResponse {
    let r = cl.c.allocate_producer_ids(&pb::AllocateProducerIdsRequest {
        broker_id,
        broker_epoch,
    });
    cl.commit(r)
}

#[test]
fn blocks_never_overlap_and_survive_a_replay() {
    let mut cl = Cluster::with_brokers(&[1, 2]);
    let (e1, e2) = (cl.epoch(1), cl.epoch(2));
    let a = allocate(&mut cl, 1, e1);
    let b = allocate(&mut cl, 2, e2);
    let c = allocate(&mut cl, 1, e1);
    let block = i64::from(PRODUCER_ID_BLOCK_SIZE);
    for (r, start) in [(&a, 0), (&b, block), (&c, 2 * block)] {
        assert_eq!(ErrorCode::from_wire(r.error_code), ErrorCode::None, "{r:?}");
        assert_eq!(
            (r.producer_id_start, r.producer_id_len),
            (start, PRODUCER_ID_BLOCK_SIZE)
        );
    }
    assert_eq!(cl.c.image().next_producer_id(), 3 * block);
    // A snapshot and a replay of the log both know the ids are taken.
    let snapshot = cl.c.image().to_snapshot();
    let restored = MetadataImage::from_snapshot(&snapshot).unwrap();
    assert_eq!(restored.next_producer_id(), 3 * block);
}

#[test]
fn an_unknown_broker_or_a_stale_epoch_gets_no_ids() {
    let cl = Cluster::with_brokers(&[1]);
    let e1 = cl.epoch(1);
    let unknown = cl.c.allocate_producer_ids(&pb::AllocateProducerIdsRequest {
        broker_id: 9,
        broker_epoch: 0,
    });
    assert!(unknown.records.is_empty());
    assert_eq!(
        ErrorCode::from_wire(unknown.response.error_code),
        ErrorCode::BrokerIdNotRegistered
    );
    let stale = cl.c.allocate_producer_ids(&pb::AllocateProducerIdsRequest {
        broker_id: 1,
        broker_epoch: e1 + 1,
    });
    assert!(stale.records.is_empty());
    assert_eq!(
        ErrorCode::from_wire(stale.response.error_code),
        ErrorCode::StaleBrokerEpoch
    );
    assert_eq!(cl.c.image().next_producer_id(), 0);
}
