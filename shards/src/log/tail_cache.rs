//! The newest written batches of one partition, kept in memory as `Bytes` so that
//! consumers at the tail are served without touching the disk.
//!
//! Invariants: entries are contiguous in offset order (`entries[i].next_offset ==
//! entries[i+1].base_offset`); every entry is already written to the segment file, so an
//! evicted entry can always be read back from disk; the total stays within the budget
//! except for the single newest entry, which is kept even when larger.

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
        self.bytes += entry.bytes.len();
        self.entries.push_back(entry);
        while self.bytes > self.budget_bytes && self.entries.len() > 1 {
            if let Some(old) = self.entries.pop_front() {
                self.bytes -= old.bytes.len();
            }
        }
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
