//! The tail-cache budget of one shard, shared out among its open partitions.
//!
//! Each partition's tail cache may hold `min(partition_max_bytes, shard_bytes / open)`,
//! where `open` counts the shard's open partitions. The owner (`Shard`) calls
//! [`TailCacheBudget::apply`] with every open log whenever a partition opens or closes,
//! synchronously after the change (no `.await` in between), so a newly opened partition
//! has its share before it can cache anything and older ones shrink at once. Hence the
//! sum of the shard's tail caches is at most `shard_bytes` at every instant
//! (`open * (shard_bytes / open) <= shard_bytes`).
//!
//! Cost: `apply` is O(open partitions) per open or close; opening P partitions is
//! O(P²) small steps in all (a borrow and a compare each), fine for thousands per shard.
//! Not here: weighting the share by traffic (an idle partition's share is unused memory;
//! a smarter policy would give hot partitions more).

use super::partition_log::PartitionLog;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct TailCacheBudget {
    /// All tail caches of the shard together (`--tail-cache-shard-bytes`).
    pub shard_bytes: u64,
    /// What one partition may hold at most (`LogConfig::tail_cache_bytes`).
    pub partition_max_bytes: usize,
}

impl TailCacheBudget {
    /// One partition's share when `open` partitions are open.
    pub fn share(&self, open: usize) -> usize {
        let even = self.shard_bytes / u64::try_from(open.max(1)).unwrap_or(u64::MAX);
        let share = usize::try_from(even)
            .unwrap_or(usize::MAX)
            .min(self.partition_max_bytes);
        debug_assert!((share as u64).saturating_mul(open as u64) <= self.shard_bytes);
        share
    }

    /// Gives every log in `logs` (all the shard's open partitions) its share.
    pub fn apply<'a>(&self, logs: impl ExactSizeIterator<Item = &'a PartitionLog>) {
        let share = self.share(logs.len());
        for log in logs {
            log.set_tail_cache_budget(share);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn share_is_the_partition_max_until_the_shard_budget_binds() {
        let b = TailCacheBudget {
            shard_bytes: 512 << 20,
            partition_max_bytes: 2 << 20,
        };
        assert_eq!(b.share(0), 2 << 20);
        assert_eq!(b.share(1), 2 << 20);
        assert_eq!(b.share(256), 2 << 20);
        assert_eq!(b.share(512), 1 << 20);
        for open in [1usize, 7, 300, 1000, 100_000, 10_000_000] {
            assert!(b.share(open) as u64 * open as u64 <= b.shard_bytes);
        }
        let none = TailCacheBudget {
            shard_bytes: 0,
            partition_max_bytes: 2 << 20,
        };
        assert_eq!(none.share(3), 0);
    }
}
