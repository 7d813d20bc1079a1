//! The newest written batches of one partition, kept in memory as `Bytes` so that
//! consumers at the tail are served without touching the disk.
//!
//! Invariants: entries are contiguous in offset order (`entries[i].next_offset ==
//! entries[i+1].base_offset`); every entry is already written to the segment file, so an
//! evicted entry can always be read back from disk (which is why the cache may drop
//! anything at any time); `bytes <= budget_bytes` at every instant, with no exception
//! for the newest entry: an entry larger than the whole budget is not cached.
//!
//! The budget is a share of the shard's (`shards/src/shard/partition_table.rs`, `--tail-cache-shard-bytes`):
//! each partition's budget is `min(tail_cache_bytes, shard budget / open partitions)`,
//! recomputed whenever a partition opens or closes on the shard, *before* the new
//! partition can cache anything and synchronously (no `.await` between the change and the
//! resize). Shrinking evicts the oldest entries at once (`set_budget`). So the sum over a
//! shard's partitions never exceeds the shard budget.

use crate::batch::batches;
use crate::records::{concat_chunks, trim_to_whole_batches};
use bytes::Bytes;
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
    /// (at least one whole batch), in one buffer: a read that spans several entries
    /// copies them once. `None` when the cache does not hold `offset`.
    pub fn read(&self, offset: i64, max_bytes: usize) -> Option<Bytes> {
        self.read_chunks(offset, max_bytes).map(concat_chunks)
    }

    /// What [`Self::read`] returns, as the cache holds it: slices of its entries, in
    /// order, without a copy (for records sent to a socket by reference). Never empty.
    pub fn read_chunks(&self, offset: i64, max_bytes: usize) -> Option<Vec<Bytes>> {
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
        let head = entry.bytes.slice(from?..);
        if head.len() >= max_bytes || start + 1 == self.entries.len() {
            return Some(vec![trim_to_whole_batches(head, max_bytes)]);
        }
        // Whole entries while they fit, then the whole batches of the next that do.
        let mut used = head.len();
        let mut out = vec![head];
        for next in self.entries.range(start + 1..) {
            if used + next.bytes.len() > max_bytes {
                let room = max_bytes - used;
                let part = trim_to_whole_batches(next.bytes.clone(), room);
                if !part.is_empty() && part.len() <= room {
                    out.push(part);
                }
                break;
            }
            used += next.bytes.len();
            out.push(next.bytes.clone());
        }
        Some(out)
    }
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

    /// Entries of real batches: entry `i` holds `per_entry` one-record batches of
    /// `value_len`-byte values, from offset `i * per_entry`.
    fn batch_entries(entries: usize, per_entry: usize, value_len: usize) -> Vec<CachedBatches> {
        crate::records::tests::batch_chunks(entries, per_entry, value_len)
            .into_iter()
            .zip(0..)
            .map(|(bytes, e)| {
                let base = (e * per_entry) as i64;
                CachedBatches {
                    base_offset: base,
                    next_offset: base + per_entry as i64,
                    bytes,
                }
            })
            .collect()
    }

    /// A read across entries returns slices of the entries themselves (no copy), whole
    /// batches only, within the limit but at least one batch; `read` is the same bytes
    /// in one buffer.
    #[test]
    fn reads_across_entries_are_slices_of_the_entries() {
        let mut c = TailCache::new(1 << 20);
        let entries = batch_entries(4, 3, 100);
        let batch_len = entries[0].bytes.len() / 3;
        let pointers: Vec<*const u8> = entries.iter().map(|e| e.bytes.as_ptr()).collect();
        for e in entries {
            c.push(e);
        }
        // From offset 1 (inside entry 0) to well past the end: the rest of entry 0, then
        // entries 1..3 whole, each by reference.
        let chunks = c.read_chunks(1, usize::MAX).expect("cached");
        assert_eq!(chunks.len(), 4);
        assert_eq!(chunks[0].len(), 2 * batch_len);
        for (chunk, ptr) in chunks.iter().zip(&pointers).skip(1) {
            assert_eq!(chunk.as_ptr(), *ptr, "a whole entry is the entry itself");
        }
        assert_eq!(
            c.read(1, usize::MAX).expect("cached"),
            concat_chunks(chunks)
        );
        // A limit inside entry 2: whole batches only.
        let chunks = c
            .read_chunks(0, 7 * batch_len + batch_len / 2)
            .expect("cached");
        assert_eq!(chunks.iter().map(Bytes::len).sum::<usize>(), 7 * batch_len);
        assert_eq!(chunks.len(), 3);
        // A limit below one batch still returns the first batch.
        let chunks = c.read_chunks(5, 1).expect("cached");
        assert_eq!(
            chunks.iter().map(Bytes::len).collect::<Vec<_>>(),
            vec![batch_len]
        );
        assert!(c.read_chunks(12, usize::MAX).is_none(), "past the cache");
    }
}
