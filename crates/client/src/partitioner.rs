//! Which partition a record goes to: by key hash (Kafka's murmur2, so a key lands
//! on the same partition as with a Kafka client), or, without a key, a "sticky"
//! partition that changes only when a new batch starts (KIP-480): keyless records
//! then fill whole batches instead of one small batch per partition.

use rand::Rng;

use crate::metadata::TopicMap;

/// Kafka's `Utils.murmur2`: 32-bit MurmurHash2 with seed `0x9747b28c`.
pub fn murmur2(data: &[u8]) -> i32 {
    const SEED: u32 = 0x9747_b28c;
    const M: u32 = 0x5bd1_e995;
    const R: u32 = 24;
    let mut h: u32 = SEED ^ (data.len() as u32);
    let mut chunks = data.chunks_exact(4);
    for chunk in &mut chunks {
        let mut k = u32::from_le_bytes([chunk[0], chunk[1], chunk[2], chunk[3]]);
        k = k.wrapping_mul(M);
        k ^= k >> R;
        k = k.wrapping_mul(M);
        h = h.wrapping_mul(M);
        h ^= k;
    }
    let tail = chunks.remainder();
    if !tail.is_empty() {
        if tail.len() == 3 {
            h ^= u32::from(tail[2]) << 16;
        }
        if tail.len() >= 2 {
            h ^= u32::from(tail[1]) << 8;
        }
        h ^= u32::from(tail[0]);
        h = h.wrapping_mul(M);
    }
    h ^= h >> 13;
    h = h.wrapping_mul(M);
    h ^= h >> 15;
    h as i32
}

/// The partition of a keyed record: `toPositive(murmur2(key)) % partitions`, as
/// Kafka's default partitioner. Stable: depends on the key and the partition
/// count only.
pub fn partition_for_key(key: &[u8], partitions: usize) -> i32 {
    debug_assert!(partitions > 0);
    let positive = (murmur2(key) & 0x7fff_ffff) as usize;
    (positive % partitions.max(1)) as i32
}

/// Per-topic sticky partition for keyless records.
#[derive(Debug, Default)]
pub(crate) struct StickyPartitioner {
    current: TopicMap<i32>,
}

impl StickyPartitioner {
    /// The topic's current sticky partition, if it has one below `partitions`.
    pub(crate) fn current(&self, topic: &str, partitions: usize) -> Option<i32> {
        self.current
            .get(topic)
            .copied()
            .filter(|&p| (p as usize) < partitions)
    }

    /// The topic's current sticky partition, choosing one among `available`
    /// (partitions with a leader; all of `0..partitions` if none has one).
    pub(crate) fn partition(&mut self, topic: &str, partitions: usize, available: &[i32]) -> i32 {
        if let Some(&p) = self.current.get(topic) {
            if (p as usize) < partitions {
                return p;
            }
        }
        let p = choose(partitions, available, None);
        self.current.insert(topic.to_string(), p);
        p
    }

    /// A new batch is about to start for `previous` (the last one closed): move on
    /// to another partition, different from `previous` when there is a choice.
    pub(crate) fn on_new_batch(
        &mut self,
        topic: &str,
        previous: i32,
        partitions: usize,
        available: &[i32],
    ) -> i32 {
        match self.current.get(topic) {
            // Someone else already moved it on.
            Some(&p) if p != previous && (p as usize) < partitions => p,
            _ => {
                let p = choose(partitions, available, Some(previous));
                self.current.insert(topic.to_string(), p);
                p
            }
        }
    }
}

fn choose(partitions: usize, available: &[i32], avoid: Option<i32>) -> i32 {
    let mut rng = rand::rng();
    let candidates: Vec<i32> = if available.is_empty() {
        (0..partitions as i32).collect()
    } else {
        available.to_vec()
    };
    let others: Vec<i32> = candidates
        .iter()
        .copied()
        .filter(|p| Some(*p) != avoid)
        .collect();
    let pool = if others.is_empty() {
        &candidates
    } else {
        &others
    };
    if pool.is_empty() {
        return 0;
    }
    pool[rng.random_range(0..pool.len())]
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn murmur2_matches_kafka() {
        // Kafka's UtilsTest.testMurmur2 vectors.
        let cases: [(&[u8], i32); 6] = [
            (b"21", -973_932_308),
            (b"foobar", -790_332_482),
            (b"a-little-bit-long-string", -985_981_536),
            (b"a-little-bit-longer-string", -1_486_304_829),
            (
                b"lkjh234lh9fiuh90y23oiuhsafujhadof229phr9h19h89h8",
                -58_897_971,
            ),
            (b"abc", 479_470_107),
        ];
        for (data, want) in cases {
            assert_eq!(murmur2(data), want, "{}", String::from_utf8_lossy(data));
        }
    }

    #[test]
    fn key_partitioning_is_stable_and_spread() {
        let mut counts = [0usize; 6];
        for i in 0..6000 {
            let key = format!("key-{i}");
            let p = partition_for_key(key.as_bytes(), 6);
            assert_eq!(p, partition_for_key(key.as_bytes(), 6));
            counts[p as usize] += 1;
        }
        // 1000 expected each; a fair hash stays well within ±20%.
        assert!(
            counts.iter().all(|&c| (800..1200).contains(&c)),
            "{counts:?}"
        );
        // Known value: toPositive(murmur2("foobar")) % 3 as Kafka computes it.
        assert_eq!(
            partition_for_key(b"foobar", 3),
            ((-790_332_482i32 & 0x7fff_ffff) % 3)
        );
    }

    #[test]
    fn sticky_partition_holds_until_a_new_batch_then_moves() {
        let mut s = StickyPartitioner::default();
        let first = s.partition("t", 4, &[0, 1, 2, 3]);
        for _ in 0..10 {
            assert_eq!(s.partition("t", 4, &[0, 1, 2, 3]), first);
        }
        let next = s.on_new_batch("t", first, 4, &[0, 1, 2, 3]);
        assert_ne!(next, first);
        assert_eq!(s.partition("t", 4, &[0, 1, 2, 3]), next);
        // A second caller reporting the same closed batch does not move it again.
        assert_eq!(s.on_new_batch("t", first, 4, &[0, 1, 2, 3]), next);
        // Only partitions with a leader are chosen.
        for _ in 0..50 {
            let current = s.partition("u", 4, &[2]);
            let p = s.on_new_batch("u", current, 4, &[2]);
            assert_eq!(p, 2);
        }
    }

    #[test]
    fn sticky_partitions_cover_every_partition_over_many_batches() {
        let mut s = StickyPartitioner::default();
        let mut seen = [false; 5];
        let mut p = s.partition("t", 5, &[]);
        for _ in 0..500 {
            seen[p as usize] = true;
            p = s.on_new_batch("t", p, 5, &[]);
        }
        assert!(seen.iter().all(|&x| x), "{seen:?}");
    }
}
