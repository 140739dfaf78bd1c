//! The final read of a partition, after healing and once the producers have
//! stopped: from its leader, up to its high watermark, once that is the
//! leader's whole log. The fault harness and the simulation both read their
//! final logs this way.

use std::time::Duration;

use syncline_client::Connection;
use tokio::time::Instant;

use crate::workload::{leader_of, led, read_to_high_watermark, Brokers, REQUEST_TIMEOUT};

/// How long a final read waits before it asks again.
const POLL: Duration = Duration::from_millis(200);

/// The client ids a final read goes by.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ClientIds {
    /// For asking the leader to describe the partitions it leads.
    pub describe: &'static str,
    /// For fetching the records.
    pub fetch: &'static str,
}

/// A partition as its leader serves it at the end of a run.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FinalRead {
    /// (offset, value) from 0 up to the high watermark.
    pub records: Vec<(i64, String)>,
    pub leader: i32,
    pub high_watermark: i64,
    /// The leader's log end when it was asked.
    pub log_end_offset: i64,
    pub replicas: Vec<i32>,
}

impl FinalRead {
    /// Why this read is not yet the partition's final log: records above the
    /// high watermark. Once the producers have stopped, a healed partition
    /// commits its leader's whole log; until then a read stops short of
    /// records that become readable later (a broker that stopped as the
    /// faults ended stays in the ISR until it is fenced or shrunk away, and
    /// holds the high watermark back meanwhile; an `acks=1` producer's last
    /// records wait for the followers' next fetch).
    #[must_use]
    pub fn uncommitted(&self) -> Option<String> {
        (self.high_watermark < self.log_end_offset).then(|| {
            format!(
                "the leader's high watermark {} stayed below its log end {}",
                self.high_watermark, self.log_end_offset
            )
        })
    }

    /// True when this read is the one to keep after waiting `waited` of
    /// `bound`: the leader's whole log is committed, or the bound has run out
    /// (then [`FinalRead::uncommitted`] says the partition is not healed).
    #[must_use]
    fn done(&self, waited: Duration, bound: Duration) -> bool {
        self.uncommitted().is_none() || waited > bound
    }
}

/// Partition `partition` of `topic` up to its high watermark from its leader,
/// once that is the leader's whole log (see [`FinalRead::uncommitted`]), or as
/// it is when `bound` runs out; asking again every 200 ms meanwhile. An error
/// when no leader could be read within `bound`.
pub async fn read_final(
    brokers: &Brokers,
    topic: &str,
    partition: i32,
    ids: ClientIds,
    bound: Duration,
) -> anyhow::Result<FinalRead> {
    let start = Instant::now();
    loop {
        match read_once(brokers, topic, partition, ids).await {
            Ok(read) if read.done(start.elapsed(), bound) => return Ok(read),
            Ok(_) => tokio::time::sleep(POLL).await,
            Err(e) if start.elapsed() > bound => {
                return Err(e.context(format!("reading {topic}-{partition}")))
            }
            Err(_) => tokio::time::sleep(POLL).await,
        }
    }
}

/// One final read: the leader and its epoch as any broker knows them, the
/// leader's own view of the partition in that epoch (its log end), then its
/// records up to the high watermark, fenced by that epoch.
async fn read_once(
    brokers: &Brokers,
    topic: &str,
    partition: i32,
    ids: ClientIds,
) -> anyhow::Result<FinalRead> {
    let (leader, epoch) = leader_of(brokers, topic, partition)
        .await
        .ok_or_else(|| anyhow::anyhow!("no leader"))?;
    let addr = &brokers
        .iter()
        .find(|(id, _)| *id == leader)
        .ok_or_else(|| anyhow::anyhow!("leader {leader} is no broker"))?
        .1;
    let view = led(addr, ids.describe, &[topic])
        .await
        .and_then(|v| {
            v.into_iter()
                .map(|(_, d)| d)
                .find(|d| d.partition == partition && d.leader_epoch == epoch)
        })
        .ok_or_else(|| anyhow::anyhow!("broker {leader} does not lead {topic}-{partition}"))?;
    let conn = Connection::connect(addr, ids.fetch, REQUEST_TIMEOUT).await?;
    let (records, high_watermark) = read_to_high_watermark(&conn, topic, partition, epoch).await?;
    Ok(FinalRead {
        records,
        leader,
        high_watermark,
        log_end_offset: view.log_end_offset,
        replicas: view.replicas,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn read(high_watermark: i64, log_end_offset: i64) -> FinalRead {
        FinalRead {
            records: Vec::new(),
            leader: 1,
            high_watermark,
            log_end_offset,
            replicas: vec![1, 2, 3],
        }
    }

    #[test]
    fn a_final_read_waits_for_the_leaders_whole_log_to_be_committed() {
        // Seed 300494 of the simulation: the log was read at 320 of 325 while
        // a stopped broker held the high watermark back; the group read
        // 320..324 later.
        assert_eq!(
            read(320, 325).uncommitted().as_deref(),
            Some("the leader's high watermark 320 stayed below its log end 325")
        );
        assert_eq!(read(325, 325).uncommitted(), None);
        assert_eq!(read(0, 0).uncommitted(), None);
    }

    #[test]
    fn a_final_read_is_kept_once_committed_or_once_its_bound_has_run_out() {
        let bound = Duration::from_secs(30);
        let after = |r: &FinalRead, waited| match (r.done(waited, bound), r.uncommitted()) {
            (false, _) => "asked again",
            (true, None) => "kept",
            (true, Some(_)) => "kept, not healed",
        };
        let over = bound + Duration::from_millis(1);
        // (high watermark, log end, waited, what becomes of the read)
        let cases = [
            // The whole log committed: kept at once, or whenever it is.
            (325, 325, Duration::ZERO, "kept"),
            (0, 0, Duration::ZERO, "kept"),
            (325, 325, over, "kept"),
            // An acks=1 producer's last record, one follower fetch from
            // committed: asked again until the bound has run out.
            (57, 58, Duration::ZERO, "asked again"),
            (57, 58, bound, "asked again"),
            (57, 58, over, "kept, not healed"),
        ];
        for (hw, leo, waited, expected) in cases {
            assert_eq!(
                after(&read(hw, leo), waited),
                expected,
                "high watermark {hw}, log end {leo}, after {waited:?}"
            );
        }
    }
}
