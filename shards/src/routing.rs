//! Partition → shard: a stable, pure function.
//!
//! Invariants: the result depends only on the topic name, the partition index and the
//! shard count, so every core computes the same owner without asking anyone, and a
//! restart with the same `--shards` reopens every partition on the same core. All shards
//! share one data directory, so a different shard count only changes which core opens a
//! partition at start.
//!
//! Partitions of one topic are spread round-robin from a per-topic starting shard, so a
//! topic with at least as many partitions as cores uses every core.

/// A shard (core) index, `0..shard_count`.
pub type ShardId = usize;

/// The shard that validates admin changes and commits them through the controller
/// quorum (`admin_changes`).
pub const ADMIN_SHARD: ShardId = 0;

/// The shard that owns `partition` of `topic` when the broker runs `shard_count` shards.
pub fn shard_of(topic: &str, partition: i32, shard_count: usize) -> ShardId {
    assert!(shard_count > 0, "a broker has at least one shard");
    let start = u64::from(crc32c::crc32c(topic.as_bytes()));
    // Negative partitions never reach here (validated at the edge); `unsigned_abs` keeps
    // the function total anyway.
    let index = u64::from(partition.unsigned_abs());
    (start.wrapping_add(index) % shard_count as u64) as ShardId
}

/// One partition of one topic: what the routing maps to a shard.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct TopicPartition {
    pub topic: std::sync::Arc<str>,
    pub partition: i32,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn stable_and_in_range() {
        for n in 1..9 {
            for p in 0..64 {
                let s = shard_of("orders", p, n);
                assert!(s < n);
                assert_eq!(s, shard_of("orders", p, n));
            }
        }
    }

    #[test]
    fn partitions_of_one_topic_cover_all_shards() {
        let n = 4;
        let mut seen = [false; 4];
        for p in 0..4 {
            seen[shard_of("t", p, n)] = true;
        }
        assert!(seen.iter().all(|s| *s));
    }
}
