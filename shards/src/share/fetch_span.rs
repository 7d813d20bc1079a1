//! What a share fetch reads of one partition's log before it acquires anything: whole
//! batches from the share partition's first acquirable offset, within the partition's
//! byte budget, as Kafka's share fetch reads (`ReplicaManager.readFromLog`, then
//! `SharePartition.acquire` over what was read). The bytes bound the acquisition — no
//! record is acquired that the answer does not carry — and the answer is sliced from
//! them, never read twice.
//!
//! Invariants:
//! - the batches kept are consecutive whole batches of the log, in offset order, their
//!   bytes at most the budget — except the first, kept whatever its size when the fetch
//!   has returned nothing yet (`min_one_batch`: MaxBytes is soft, KIP-74);
//! - reading stops once the batches hold as many acquirable records as the fetch may
//!   take, so a small `max_records` never reads a large budget.

use super::partition::{Acquirable, Acquired, FetchedSpan};
use bytes::Bytes;
use corelog_partition::{Isolation, Partition};
use std::ops::Range;

/// The first read of a fetch, doubled for each further one up to the budget.
const FIRST_READ_BYTES: usize = 64 << 10;

/// One partition's byte budget in a share fetch.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ByteBudget {
    /// The most bytes this partition's batches may take.
    pub max_bytes: usize,
    /// Keep the first batch even beyond `max_bytes`: nothing was returned before it.
    pub min_one_batch: bool,
    /// Kafka's batch_optimized acquire mode (whole log batches), else record_limit.
    pub batch_optimized: bool,
}

/// One whole batch read: where its bytes are and the offsets it holds.
#[derive(Debug, Clone, PartialEq, Eq)]
struct ReadBatch {
    chunk: usize,
    range: Range<usize>,
    base: i64,
    last: i64,
}

/// The batches a share fetch read of one partition.
#[derive(Debug, Default)]
pub struct Fetched {
    chunks: Vec<Bytes>,
    batches: Vec<ReadBatch>,
    batch_optimized: bool,
}

/// How many of the batches (their sizes, in order) fit `budget` with `used` bytes
/// already kept: whole batches only, the first one kept whatever its size when
/// `min_one_batch` and nothing is kept yet.
pub fn batches_within(sizes: &[usize], used: usize, budget: &ByteBudget) -> usize {
    let mut total = used;
    let mut kept = 0;
    for &size in sizes {
        let first_of_all = total == 0 && kept == 0 && budget.min_one_batch;
        if !first_of_all && total.saturating_add(size) > budget.max_bytes {
            break;
        }
        total += size;
        kept += 1;
    }
    kept
}

impl Fetched {
    /// Reads `log` from `first` (the share partition's first acquirable offset) within
    /// `budget`, until the batches hold `max_records` of what `acquirable` can hand out
    /// below `log_end`. A failed read ends the reading: what was read stands.
    pub async fn read(
        log: &Partition,
        first: i64,
        acquirable: &Acquirable,
        log_end: i64,
        max_records: usize,
        budget: ByteBudget,
    ) -> Fetched {
        let mut out = Fetched {
            batch_optimized: budget.batch_optimized,
            ..Fetched::default()
        };
        let mut offset = first;
        let mut used = 0usize;
        let mut ask = FIRST_READ_BYTES;
        while offset < log_end && acquirable.below(offset, log_end, max_records) < max_records {
            let room = budget.max_bytes.saturating_sub(used);
            if room == 0 && !(used == 0 && budget.min_one_batch) {
                break;
            }
            let want = room.min(ask).max(1);
            let Ok(read) = log.read(offset, -1, want, Isolation::ReadUncommitted).await else {
                break;
            };
            let mut found = Vec::new();
            for item in corelog_storage::batch::batches(&read.records) {
                let Ok((h, range)) = item else { break };
                if h.last_offset() >= offset {
                    found.push((h.base_offset, h.last_offset(), range));
                }
            }
            let sizes: Vec<usize> = found.iter().map(|(_, _, r)| r.len()).collect();
            let kept = batches_within(&sizes, used, &budget);
            if kept == 0 {
                break;
            }
            let chunk = out.chunks.len();
            out.chunks.push(read.records);
            for (base, last, range) in found.into_iter().take(kept) {
                used += range.len();
                offset = last + 1;
                out.batches.push(ReadBatch {
                    chunk,
                    range,
                    base,
                    last,
                });
            }
            if kept < sizes.len() {
                break; // the next batch is beyond the budget
            }
            ask = ask.saturating_mul(2);
        }
        debug_assert!(
            out.batches.windows(2).all(|w| w[0].last < w[1].base),
            "batches in order"
        );
        out
    }

    /// What the acquisition may take: nothing past the last batch read, and in
    /// batch_optimized mode whole batches.
    pub fn span(&self, first: i64) -> FetchedSpan {
        FetchedSpan {
            up_to: self.batches.last().map_or(first, |b| b.last + 1),
            batch_ends: self
                .batch_optimized
                .then(|| self.batches.iter().map(|b| b.last).collect()),
        }
    }

    /// The bytes of the batches holding a record of `acquired` (in offset order): a
    /// slice of what was read when they follow one another in one read, else copied.
    /// A batch with nothing acquired (a read_committed group's aborted records, records
    /// another member holds) is left out.
    pub fn records(&self, acquired: &[Acquired]) -> Option<Bytes> {
        let holds = |b: &ReadBatch| {
            acquired
                .iter()
                .any(|a| a.first <= b.last && b.base <= a.last)
        };
        let kept: Vec<usize> = (0..self.batches.len())
            .filter(|i| holds(&self.batches[*i]))
            .collect();
        let (&from, &to) = (kept.first()?, kept.last()?);
        let (a, b) = (&self.batches[from], &self.batches[to]);
        if a.chunk == b.chunk && to - from + 1 == kept.len() {
            return Some(self.chunks[a.chunk].slice(a.range.start..b.range.end));
        }
        let mut out = bytes::BytesMut::new();
        for &i in &kept {
            let batch = &self.batches[i];
            out.extend_from_slice(&self.chunks[batch.chunk][batch.range.clone()]);
        }
        Some(out.freeze())
    }

    /// The bytes taken from the budget: those of every batch read.
    pub fn bytes(&self) -> usize {
        self.batches.iter().map(|b| b.range.len()).sum()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn budget(max_bytes: usize, min_one_batch: bool) -> ByteBudget {
        ByteBudget {
            max_bytes,
            min_one_batch,
            batch_optimized: true,
        }
    }

    #[test]
    fn max_bytes_is_soft_for_the_first_batch_only() {
        // fetch.max.bytes=1: one whole batch, however large.
        assert_eq!(batches_within(&[1070, 1070], 0, &budget(1, true)), 1);
        // 1500 bytes and 1,000-byte records one per batch: one record, as Kafka gives.
        assert_eq!(batches_within(&[1070, 1070], 0, &budget(1500, true)), 1);
        assert_eq!(batches_within(&[1070, 1070], 0, &budget(2140, true)), 2);
        // A later partition (something already returned) gets only what fits.
        assert_eq!(batches_within(&[1070], 0, &budget(1000, false)), 0);
        assert_eq!(batches_within(&[400, 400], 1070, &budget(1500, false)), 1);
        assert_eq!(batches_within(&[], 0, &budget(1500, true)), 0);
    }
}
