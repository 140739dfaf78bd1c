//! Replica placement for new partitions: Kafka's `AdminUtils.assignReplicasToBrokers`
//! (rack-aware variant), made deterministic.
//!
//! Leaders go round-robin over the brokers; followers follow at a shift that grows by
//! one every full round, so that replica load stays even too. Brokers are interleaved
//! by rack (r1-b1, r2-b1, r3-b1, r1-b2, ...), and a follower is skipped while its rack
//! already holds a replica and another rack holds none, so a partition spans
//! min(RF, racks) racks. Brokers without a rack form one group of their own (as KRaft's
//! `StripedReplicaPlacer`); with no racks at all this is exactly the rack-unaware
//! algorithm. Kafka draws the start index and the shift at random; here both come
//! from a cursor (the number of partitions that exist), so placement is reproducible
//! and successive topics still start on different brokers.

use std::collections::{BTreeMap, BTreeSet};

/// A broker that can take replicas.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Candidate<'a> {
    pub(crate) id: i32,
    pub(crate) rack: Option<&'a str>,
}

/// Replica lists for `num_partitions` new partitions of `replication_factor` replicas
/// each. The caller guarantees 1 <= `replication_factor` <= `brokers.len()`; outside
/// that it returns no assignment rather than a wrong one.
pub(crate) fn assign_replicas(
    brokers: &[Candidate<'_>],
    num_partitions: usize,
    replication_factor: usize,
    cursor: usize,
) -> Vec<Vec<i32>> {
    let n = brokers.len();
    if replication_factor == 0 || replication_factor > n {
        return Vec::new();
    }
    let arranged = rack_alternated(brokers);
    let rack_of: BTreeMap<i32, Option<&str>> = brokers.iter().map(|b| (b.id, b.rack)).collect();
    let rack = |id: &i32| rack_of.get(id).copied().flatten();
    let num_racks = rack_of.values().collect::<BTreeSet<_>>().len();
    let start_index = cursor % n;
    let mut next_replica_shift = (cursor / n) % n;

    (0..num_partitions)
        .map(|partition| {
            if partition > 0 && partition % n == 0 {
                next_replica_shift += 1;
            }
            let first = (partition + start_index) % n;
            let leader = arranged[first];
            let mut replicas = vec![leader];
            let mut racks = BTreeSet::from([rack(&leader)]);
            let mut k = 0;
            while replicas.len() < replication_factor {
                // The n - 1 candidates from k on are every other broker once, so one
                // of them is free and, when a rack holds no replica yet, one is there.
                let candidates: Vec<i32> = (k..k + n - 1)
                    .map(|i| arranged[replica_index(first, next_replica_shift * num_racks, i, n)])
                    .collect();
                let pick = candidates
                    .iter()
                    .position(|b| {
                        !replicas.contains(b)
                            && (!racks.contains(&rack(b)) || racks.len() == num_racks)
                    })
                    .unwrap_or(0);
                let chosen = candidates[pick];
                k += pick + 1;
                racks.insert(rack(&chosen));
                replicas.push(chosen);
            }
            replicas
        })
        .collect()
}

/// Kafka's `replicaIndex`: the broker at `shift + 1 + index` (mod the others) after
/// the first replica, never the first replica itself.
fn replica_index(first: usize, shift: usize, index: usize, n: usize) -> usize {
    let others = (n - 1).max(1);
    let step = 1 + (shift + index) % others;
    (first + step) % n
}

/// Brokers interleaved by rack: racks in name order (no rack first), brokers by id
/// within a rack.
fn rack_alternated(brokers: &[Candidate<'_>]) -> Vec<i32> {
    let mut by_rack: BTreeMap<Option<&str>, Vec<i32>> = BTreeMap::new();
    for b in brokers {
        by_rack.entry(b.rack).or_default().push(b.id);
    }
    for ids in by_rack.values_mut() {
        ids.sort_unstable();
        ids.reverse(); // popped from the back, lowest id first
    }
    let mut arranged = Vec::with_capacity(brokers.len());
    while arranged.len() < brokers.len() {
        for ids in by_rack.values_mut() {
            if let Some(id) = ids.pop() {
                arranged.push(id);
            }
        }
    }
    arranged
}
