//! The newest written batches of one partition, kept in memory as `Bytes` so that
//! consumers at the tail are served without touching the disk.
//!
//! Invariants: entries are contiguous in offset order (`entries[i].next_offset ==
//! entries[i+1].base_offset`); every entry is already written to the segment file, so an
//! evicted entry can always be read back from disk (which is why the cache may drop
//! anything at any time); `bytes <= budget_bytes` at every instant, with no exception
//! for the newest entry: an entry larger than the whole budget is not cached.
//!
//! The budget is a share of the shard's (`shards/src/shard.rs`, `--tail-cache-shard-bytes`):
//! each partition's budget is `min(tail_cache_bytes, shard budget / open partitions)`,
//! recomputed whenever a partition opens or closes on the shard, *before* the new
//! partition can cache anything and synchronously (no `.await` between the change and the
//! resize). Shrinking evicts the oldest entries at once (`set_budget`). So the sum over a
//! shard's partitions never exceeds the shard budget.

use super::batch::batches;
use bytes::{Bytes, BytesMut};
use std::collections::VecDeque;

pub struct CachedBatches {
    pub base_offset: i64,
    pub next_offset: i64,
    /// One or more whole record batches.
    pub bytes: Bytes,
}

pub struct TailCache {
    entries: VecDeque<CachedBatches>,
    bytes: usize,
    budget_bytes: usize,
}

impl TailCache {
    pub fn new(budget_bytes: usize) -> Self {
        TailCache {
            entries: VecDeque::new(),
            bytes: 0,
            budget_bytes,
        }
    }

    pub fn push(&mut self, entry: CachedBatches) {
        if let Some(last) = self.entries.back() {
            if last.next_offset != entry.base_offset {
                // A gap (e.g. after truncation): the cache must stay contiguous.
                self.clear();
            }
        }
        assert!(entry.next_offset > entry.base_offset);
        if entry.bytes.len() > self.budget_bytes {
            // Larger than the whole budget: keeping the older entries would leave a gap
            // after them, so the cache starts afresh after this entry.
            self.clear();
            return;
        }
        self.bytes += entry.bytes.len();
        self.entries.push_back(entry);
        self.evict_to_budget();
    }

    /// Changes the budget; a smaller one evicts the oldest entries at once.
    pub fn set_budget(&mut self, budget_bytes: usize) {
        self.budget_bytes = budget_bytes;
        self.evict_to_budget();
    }

    pub fn budget_bytes(&self) -> usize {
        self.budget_bytes
    }

    /// Bytes of batches held now.
    pub fn held_bytes(&self) -> usize {
        self.bytes
    }

    fn evict_to_budget(&mut self) {
        while self.bytes > self.budget_bytes {
            let Some(old) = self.entries.pop_front() else {
                break;
            };
            self.bytes -= old.bytes.len();
        }
        assert!(self.bytes <= self.budget_bytes);
        debug_assert_eq!(
            self.bytes,
            self.entries.iter().map(|e| e.bytes.len()).sum::<usize>()
        );
    }

    /// Drops every entry holding an offset below `offset` (their batches were replaced
    /// on disk, by compaction). The rest stays contiguous.
    pub fn evict_below(&mut self, offset: i64) {
        while let Some(front) = self.entries.front() {
            if front.base_offset >= offset {
                break;
            }
            self.bytes -= front.bytes.len();
            self.entries.pop_front();
        }
    }

    pub fn clear(&mut self) {
        self.entries.clear();
        self.bytes = 0;
    }

    /// The whole batch containing `offset` and the batches after it, up to `max_bytes`
    /// (at least one whole batch). `None` when the cache does not hold `offset`.
    pub fn read(&self, offset: i64, max_bytes: usize) -> Option<Bytes> {
        let first = self.entries.front()?;
        if offset < first.base_offset {
            return None;
        }
        let start = self.entries.partition_point(|e| e.next_offset <= offset);
        let entry = self.entries.get(start)?;
        // Find the batch inside the entry that contains `offset`.
        let mut from = None;
        for item in batches(&entry.bytes) {
            let (header, range) = item.ok()?;
            if header.last_offset() >= offset {
                from = Some(range.start);
                break;
            }
        }
        let from = from?;
        let head = entry.bytes.slice(from..);
        if head.len() >= max_bytes || start + 1 == self.entries.len() {
            return Some(trim_to_whole_batches(head, max_bytes));
        }
        // Several entries: gather whole entries while they fit (one copy per fetch, not
        // per record; see kernel-notes.md "Reads").
        let mut out = BytesMut::with_capacity(max_bytes.min(self.bytes));
        out.extend_from_slice(&head);
        for next in self.entries.range(start + 1..) {
            if out.len() + next.bytes.len() > max_bytes {
                let room = max_bytes - out.len();
                let part = trim_to_whole_batches(next.bytes.clone(), room);
                if part.len() <= room {
                    out.extend_from_slice(&part);
                }
                break;
            }
            out.extend_from_slice(&next.bytes);
        }
        Some(out.freeze())
    }
}

/// The longest prefix of `bytes` made of whole batches and at most `max_bytes` long, but
/// never less than the first batch (a consumer must always make progress).
pub fn trim_to_whole_batches(bytes: Bytes, max_bytes: usize) -> Bytes {
    let mut end = 0;
    for item in batches(&bytes) {
        let Ok((_, range)) = item else { break };
        if end > 0 && range.end > max_bytes {
            break;
        }
        end = range.end;
    }
    bytes.slice(..end)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// An entry of `len` opaque bytes covering offsets `base..base + 1`. The cache's
    /// bookkeeping never looks inside the bytes (only `read` does).
    fn entry(base: i64, len: usize) -> CachedBatches {
        CachedBatches {
            base_offset: base,
            next_offset: base + 1,
            bytes: Bytes::from(vec![0u8; len]),
        }
    }

    fn offsets(c: &TailCache) -> Vec<i64> {
        c.entries.iter().map(|e| e.base_offset).collect()
    }

    #[test]
    fn push_keeps_within_the_budget_evicting_the_oldest() {
        let mut c = TailCache::new(100);
        for i in 0..10 {
            c.push(entry(i, 30));
            assert!(c.held_bytes() <= 100);
        }
        assert_eq!(offsets(&c), vec![7, 8, 9]);
        assert_eq!(c.held_bytes(), 90);
    }

    #[test]
    fn an_entry_larger_than_the_budget_is_not_cached() {
        let mut c = TailCache::new(100);
        c.push(entry(0, 50));
        c.push(entry(1, 101));
        assert_eq!(c.held_bytes(), 0);
        assert!(offsets(&c).is_empty());
        c.push(entry(2, 10));
        assert_eq!(offsets(&c), vec![2], "contiguous again from the next entry");
    }

    #[test]
    fn shrinking_evicts_at_once_and_zero_holds_nothing() {
        let mut c = TailCache::new(1000);
        for i in 0..10 {
            c.push(entry(i, 100));
        }
        assert_eq!(c.held_bytes(), 1000);
        c.set_budget(250);
        assert_eq!(offsets(&c), vec![8, 9]);
        assert_eq!(c.held_bytes(), 200);
        c.set_budget(0);
        assert_eq!(c.held_bytes(), 0);
        c.push(entry(10, 1));
        assert_eq!(c.held_bytes(), 0);
        c.set_budget(1000);
        c.push(entry(11, 100));
        assert_eq!(c.held_bytes(), 100, "growing again caches again");
    }
}
