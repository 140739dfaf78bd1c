//! Topic identity (KIP-516): a topic's id tells it from a deleted topic of
//! the same name. On the wire and on disk an id of 0 means "announced without
//! one"; here that is `None`, and an unknown id matches any.

/// A topic's id, as the controller assigned it (never 0).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct TopicId(i64);

impl TopicId {
    /// The id of the wire's `topic_id`; None for 0 (no id given).
    #[must_use]
    pub fn from_wire(id: i64) -> Option<TopicId> {
        (id != 0).then_some(TopicId(id))
    }

    /// Its value on the wire.
    #[must_use]
    pub fn get(self) -> i64 {
        self.0
    }
}

/// Whether two ids name the same topic: equal, or either unknown.
#[must_use]
pub fn same_topic(a: Option<TopicId>, b: Option<TopicId>) -> bool {
    match (a, b) {
        (Some(a), Some(b)) => a == b,
        _ => true,
    }
}

/// What a broker's cache of a topic does with an announced id.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Adopt {
    /// Nothing to learn: no id announced, or the one cached.
    Keep,
    /// The topic's id is learned (none was cached).
    Learn,
    /// Another id than the cached one: a new topic of the same name (the old
    /// one was deleted). Its partitions start over.
    Replace,
}

/// How a cached topic takes an announced id.
#[must_use]
pub fn adopt(cached: Option<TopicId>, announced: Option<TopicId>) -> Adopt {
    match (cached, announced) {
        (_, None) => Adopt::Keep,
        (Some(c), Some(a)) if c == a => Adopt::Keep,
        (None, Some(_)) => Adopt::Learn,
        (Some(_), Some(_)) => Adopt::Replace,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn id(n: i64) -> Option<TopicId> {
        TopicId::from_wire(n)
    }

    #[test]
    fn zero_is_no_id_and_an_unknown_id_matches_any() {
        assert_eq!(id(0), None);
        assert_eq!(id(7).map(TopicId::get), Some(7));
        for (a, b, same) in [
            (7, 7, true),
            (7, 8, false),
            (0, 8, true),
            (7, 0, true),
            (0, 0, true),
        ] {
            assert_eq!(same_topic(id(a), id(b)), same, "{a} vs {b}");
        }
    }

    /// Kafka's topic-id checks on LeaderAndIsr (KIP-516): a topic
    /// re-created under its name is a new topic.
    #[test]
    fn a_cached_topic_learns_keeps_or_is_replaced_by_an_announced_id() {
        for (cached, announced, want) in [
            (0, 0, Adopt::Keep),
            (7, 0, Adopt::Keep),
            (7, 7, Adopt::Keep),
            (0, 7, Adopt::Learn),
            (7, 8, Adopt::Replace),
        ] {
            assert_eq!(
                adopt(id(cached), id(announced)),
                want,
                "{cached} then {announced}"
            );
        }
    }
}
