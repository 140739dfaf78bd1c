//! Small types and helpers shared by every syncline crate: the name of a
//! partition, where a leader epoch ends, retry pacing and the wall clock.

use std::fmt;
use std::sync::Arc;
use std::time::Duration;

/// The longest topic name (Kafka's: a partition directory `name-N` must fit a
/// file name).
pub const MAX_TOPIC_NAME_LEN: usize = 249;

/// The internal topic of the group coordinators' state (committed offsets and
/// group metadata), Kafka's name. The coordinators alone write it, and the
/// controller keeps clients from creating it otherwise than with the offsets
/// topic's settings, deleting it or changing what its commits rest on.
pub const OFFSETS_TOPIC: &str = "__consumer_offsets";

/// Kafka's topic name rules: 1..=249 characters of `[a-zA-Z0-9._-]`, not `.`
/// or `..`. A name that passes is safe as a directory name; `Err` says why not.
pub fn validate_topic_name(name: &str) -> Result<(), String> {
    if name.is_empty() {
        return Err("topic name is empty".to_owned());
    }
    if name == "." || name == ".." {
        return Err(format!("topic name cannot be {name:?}"));
    }
    if name.len() > MAX_TOPIC_NAME_LEN {
        return Err(format!(
            "topic name is {} characters long; the maximum is {MAX_TOPIC_NAME_LEN}",
            name.len()
        ));
    }
    if !name
        .chars()
        .all(|c| c.is_ascii_alphanumeric() || matches!(c, '.' | '_' | '-'))
    {
        return Err(format!(
            "topic name {name:?} contains characters other than ASCII alphanumerics, '.', '_' and '-'"
        ));
    }
    Ok(())
}

/// A topic partition by name and index; cheap to clone (the topic is shared).
/// Ordered by topic name, then partition.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct TopicPartition {
    /// The topic name.
    pub topic: Arc<str>,
    /// The partition index, from 0.
    pub partition: i32,
}

impl Ord for TopicPartition {
    fn cmp(&self, other: &Self) -> std::cmp::Ordering {
        // Keys cloned from one another share their name: no string compare then
        // (a producer looks its partition up in ordered maps for every record).
        let topic = if Arc::ptr_eq(&self.topic, &other.topic) {
            std::cmp::Ordering::Equal
        } else {
            self.topic.cmp(&other.topic)
        };
        topic.then(self.partition.cmp(&other.partition))
    }
}

impl PartialOrd for TopicPartition {
    fn partial_cmp(&self, other: &Self) -> Option<std::cmp::Ordering> {
        Some(self.cmp(other))
    }
}

impl TopicPartition {
    /// `topic`-`partition`.
    pub fn new(topic: impl AsRef<str>, partition: i32) -> TopicPartition {
        TopicPartition {
            topic: Arc::from(topic.as_ref()),
            partition,
        }
    }

    /// The partition's directory name under a log dir (`topic-N`, as Kafka).
    pub fn dir_name(&self) -> String {
        self.to_string()
    }

    /// The partition a directory name names (the inverse of
    /// [`dir_name`](Self::dir_name)); `None` for any other name.
    pub fn from_dir_name(name: &str) -> Option<TopicPartition> {
        let (topic, partition) = name.rsplit_once('-')?;
        if topic.is_empty() || !partition.bytes().all(|b| b.is_ascii_digit()) {
            return None;
        }
        Some(TopicPartition::new(topic, partition.parse().ok()?))
    }
}

impl fmt::Display for TopicPartition {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}-{}", self.topic, self.partition)
    }
}

/// Where a leader epoch ends in a log (OffsetsForLeaderEpoch's answer): the
/// largest epoch at most the one asked for, and the offset after its last record
/// (the start of the next epoch, or the log end offset for the latest epoch).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct EpochEndOffset {
    /// The epoch found (≤ the one asked for).
    pub epoch: i32,
    /// The first offset after that epoch.
    pub end_offset: i64,
}

impl EpochEndOffset {
    /// The log holds no epoch at or below the one asked for (Kafka's
    /// `UNDEFINED_EPOCH` / `UNDEFINED_EPOCH_OFFSET`).
    pub const UNDEFINED: EpochEndOffset = EpochEndOffset {
        epoch: crate::UNDEFINED_EPOCH,
        end_offset: crate::UNDEFINED_OFFSET,
    };
}

/// Exponential retry pacing: `initial`, doubling with every further retry, never
/// more than `max` (a `max` below `initial` caps the first pause too).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Backoff {
    /// The pause after the first failure.
    pub initial: Duration,
    /// The longest pause.
    pub max: Duration,
}

impl Backoff {
    /// Pauses from `initial` up to `max`.
    pub const fn new(initial: Duration, max: Duration) -> Backoff {
        Backoff { initial, max }
    }

    /// The pause after `failures` failures in a row, counted from 0: `initial`
    /// after the first, twice that after the second, and so on.
    pub fn delay(&self, failures: u32) -> Duration {
        self.initial
            .saturating_mul(1u32 << failures.min(31))
            .min(self.max)
    }
}

/// A record found by its timestamp (ListOffsets by timestamp): what the log
/// finds and the replication rules answer with.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct TimestampOffset {
    /// The record's offset.
    pub offset: i64,
    /// Its timestamp.
    pub timestamp: i64,
    /// The leader epoch its batch was written in.
    pub leader_epoch: i32,
}

/// Milliseconds since the Unix epoch from the wall clock. Record timestamps,
/// time-based retention and group offsets' commit times are its only uses
/// (the group coordinator reads it once and advances it on tokio's clock):
/// every rule runs on `tokio::time`.
///
/// The fault harness skews one process's wall clock with the environment
/// variable `SYNCLINE_WALL_CLOCK_OFFSET_MS` (milliseconds, may be negative),
/// read once; the monotonic clock cannot be skewed.
pub fn wall_clock_ms() -> i64 {
    static OFFSET: std::sync::OnceLock<i64> = std::sync::OnceLock::new();
    let offset =
        *OFFSET.get_or_init(|| clock_offset(std::env::var("SYNCLINE_WALL_CLOCK_OFFSET_MS").ok()));
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_millis() as i64)
        .saturating_add(offset)
}

/// The wall clock's offset from `SYNCLINE_WALL_CLOCK_OFFSET_MS`'s value: 0
/// when unset or not a whole number of milliseconds.
fn clock_offset(value: Option<String>) -> i64 {
    value.and_then(|v| v.trim().parse().ok()).unwrap_or(0)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn partitions_order_by_name_then_index_whether_or_not_the_name_is_shared() {
        let shared: Arc<str> = Arc::from("b");
        let tp = |topic: &Arc<str>, partition| TopicPartition {
            topic: topic.clone(),
            partition,
        };
        use std::cmp::Ordering::*;
        for (x, y, want) in [
            (tp(&shared, 1), tp(&shared, 1), Equal),
            (tp(&shared, 0), tp(&shared, 1), Less),
            (tp(&shared, 2), tp(&shared, 1), Greater),
            (tp(&shared, 1), TopicPartition::new("b", 1), Equal),
            (tp(&shared, 9), TopicPartition::new("c", 0), Less),
            (tp(&shared, 0), TopicPartition::new("a", 9), Greater),
            (
                TopicPartition::new("b", 0),
                TopicPartition::new("b", 3),
                Less,
            ),
        ] {
            assert_eq!(x.cmp(&y), want, "{x} vs {y}");
            assert_eq!(y.cmp(&x), want.reverse(), "{y} vs {x}");
            assert_eq!(x.partial_cmp(&y), Some(want));
            assert_eq!(x == y, want == Equal);
        }
    }

    #[test]
    fn directory_names_read_back_as_their_partition_and_nothing_else_does() {
        for (topic, p) in [("t", 0), ("my-topic", 12), ("a.b_c-d", 7), ("t-", 1)] {
            let tp = TopicPartition::new(topic, p);
            assert_eq!(TopicPartition::from_dir_name(&tp.dir_name()), Some(tp));
        }
        for name in [
            "t",
            "-1",
            "t-",
            "t-x",
            "t-+1",
            "t-1.abc-delete",
            "__cluster_metadata",
            "t-99999999999",
        ] {
            assert_eq!(TopicPartition::from_dir_name(name), None, "{name}");
        }
    }

    #[test]
    fn backoff_starts_at_initial_and_doubles_up_to_max() {
        let b = Backoff::new(Duration::from_millis(10), Duration::from_millis(1000));
        let ms: Vec<u128> = (0..9).map(|f| b.delay(f).as_millis()).collect();
        assert_eq!(ms, vec![10, 20, 40, 80, 160, 320, 640, 1000, 1000]);
        // No overflow however long the failures last.
        assert_eq!(b.delay(31).as_millis(), 1000);
        assert_eq!(b.delay(u32::MAX).as_millis(), 1000);
        // A max below the first pause caps it.
        let tight = Backoff::new(Duration::from_millis(10), Duration::from_millis(5));
        assert_eq!(tight.delay(0), Duration::from_millis(5));
        assert_eq!(
            Backoff::new(Duration::from_millis(10), Duration::ZERO).delay(3),
            Duration::ZERO
        );
    }

    #[test]
    fn topic_partition_prints_and_names_its_directory_as_kafka() {
        let tp = TopicPartition::new("orders", 3);
        assert_eq!(tp.to_string(), "orders-3");
        assert_eq!(tp.dir_name(), "orders-3");
        assert_eq!(tp, TopicPartition::new(String::from("orders"), 3));
        assert!(TopicPartition::new("a", 9) < TopicPartition::new("b", 0));
    }

    #[test]
    fn wall_clock_is_after_2020() {
        assert!(wall_clock_ms() > 1_577_836_800_000);
        assert_eq!(clock_offset(None), 0);
        assert_eq!(clock_offset(Some("-60000".into())), -60_000);
        assert_eq!(clock_offset(Some(" 250 ".into())), 250);
        assert_eq!(clock_offset(Some("soon".into())), 0);
    }
}
