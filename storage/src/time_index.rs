//! The time index of one segment: answers "from which offset must a forward scan start
//! to find the first batch whose max timestamp is at least T" (ListOffsets by time,
//! time-based retention).
//!
//! Owns: the in-memory entry list, its on-disk encoding (12 bytes per entry, big-endian
//! `timestamp i64` then `relative offset u32`), the scan-start search, truncation, and
//! the tolerant decoding of a file that may end in a torn write or zero padding.
//!
//! Meaning of an entry `(ts, rel)`: the running maximum of batch max timestamps over
//! every batch of the segment up to and including the batch starting at
//! `base_offset + rel` is `ts`. Entries are added only when a batch raises that running
//! maximum, and the appender may skip some raises (the index is sparse).
//!
//! Invariants: timestamps strictly increasing; relative offsets non-decreasing;
//! `base_offset + relative_offset` never overflows `i64`.
//!
//! Does not: decide when to add an entry, read or write files, or look at batches — the
//! caller turns the offset from [`TimeIndex::scan_start_for`] into a file position with
//! the offset index and scans batches itself.

/// Size of one encoded entry.
pub const ENTRY_BYTES: usize = 12;

/// One time index entry; see the module doc for its meaning.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct TimeEntry {
    pub timestamp_ms: i64,
    pub relative_offset: u32,
}

/// The time index of one segment.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TimeIndex {
    base_offset: i64,
    entries: Vec<TimeEntry>,
}

impl TimeIndex {
    /// An empty index for the segment whose first offset is `base_offset`.
    pub fn new(base_offset: i64) -> Self {
        TimeIndex {
            base_offset,
            entries: Vec::new(),
        }
    }

    pub fn base_offset(&self) -> i64 {
        self.base_offset
    }

    pub fn len(&self) -> usize {
        self.entries.len()
    }

    pub fn is_empty(&self) -> bool {
        self.entries.is_empty()
    }

    pub fn entries(&self) -> &[TimeEntry] {
        &self.entries
    }

    pub fn last(&self) -> Option<TimeEntry> {
        self.entries.last().copied()
    }

    /// Largest timestamp recorded in the index (not necessarily in the segment: the tail
    /// after the last entry may not be indexed).
    pub fn max_timestamp_ms(&self) -> Option<i64> {
        self.last().map(|e| e.timestamp_ms)
    }

    /// Records that the batch starting at absolute `offset` has raised the running max
    /// timestamp to `timestamp_ms`. A timestamp not greater than the last entry's is
    /// ignored, so callers may call this for every batch.
    ///
    /// Panics unless `offset` is within `base_offset ..= base_offset + u32::MAX` and not
    /// below the last entry's offset: batches are appended in offset order, so anything
    /// else is a bug in the caller.
    pub fn append(&mut self, timestamp_ms: i64, offset: i64) {
        let relative = offset
            .checked_sub(self.base_offset)
            .and_then(|r| u32::try_from(r).ok());
        let Some(relative_offset) = relative else {
            panic!(
                "offset {offset} outside the u32 range of segment base {}",
                self.base_offset
            );
        };
        if let Some(last) = self.last() {
            assert!(
                relative_offset >= last.relative_offset,
                "time index offset {relative_offset} before last entry {last:?}"
            );
            if timestamp_ms <= last.timestamp_ms {
                return;
            }
        }
        self.entries.push(TimeEntry {
            timestamp_ms,
            relative_offset,
        });
    }

    /// Drops every entry whose absolute offset is `>= offset`: those batches were
    /// truncated away. The remaining entries stay correct, because each only describes
    /// batches at or before its own offset.
    pub fn truncate_from_offset(&mut self, offset: i64) {
        let Some(relative) = offset.checked_sub(self.base_offset) else {
            // offset is far below base: every entry is at or above it.
            self.entries.clear();
            return;
        };
        let keep = self
            .entries
            .partition_point(|e| i64::from(e.relative_offset) < relative);
        self.entries.truncate(keep);
    }

    /// Absolute offset from which a forward scan finds the first batch whose max
    /// timestamp is `>= target_ts`: the offset of the last entry with timestamp
    /// `< target_ts`, or `base_offset` if there is none.
    ///
    /// Why this is safe (never starts after the wanted batch): let `(ts, rel)` be the
    /// last entry with `ts < target_ts`. By the entry's meaning, every batch starting at
    /// or before `base_offset + rel` has max timestamp `<= ts < target_ts`, so none of
    /// them is the wanted batch; it lies after the returned offset (or nowhere). When no
    /// entry is below the target, nothing is known to exclude, so the scan starts at the
    /// segment start.
    ///
    /// Why not start at the next entry, the first with `ts >= target_ts`: the index is
    /// sparse, so a batch between the two entries may have raised the max to something
    /// in `[target_ts, next ts)` without getting an entry; starting at the next entry
    /// would skip it. Likewise the tail after the last entry is not indexed at all.
    pub fn scan_start_for(&self, target_ts: i64) -> i64 {
        // Timestamps are strictly increasing, so "ts < target" is a prefix.
        let below = self.entries.partition_point(|e| e.timestamp_ms < target_ts);
        match below.checked_sub(1).and_then(|i| self.entries.get(i)) {
            Some(e) => self.absolute(e.relative_offset),
            None => self.base_offset,
        }
    }

    /// Loads an index file tolerantly: reads whole entries from the start and stops at
    /// the first one that cannot belong to a clean index — an all-zero entry (zero
    /// padding or an unwritten block), a timestamp not strictly greater or an offset
    /// smaller than the previous entry's (garbage from a torn write), an absolute offset
    /// `>= next_offset_hint` (past the end of the recovered log) or one that would
    /// overflow. A partial trailing entry is ignored.
    ///
    /// An entry genuinely written as `(0 ms, relative 0)` is read as the end; the index
    /// then merely lacks entries, which only makes `scan_start_for` start earlier.
    pub fn decode(base_offset: i64, bytes: &[u8], next_offset_hint: i64) -> TimeIndex {
        let mut index = TimeIndex {
            base_offset,
            // Bounded by the bytes actually present.
            entries: Vec::with_capacity(bytes.len() / ENTRY_BYTES),
        };
        for chunk in bytes.chunks_exact(ENTRY_BYTES) {
            let Some(entry) = decode_entry(chunk) else {
                break;
            };
            if entry.timestamp_ms == 0 && entry.relative_offset == 0 {
                break;
            }
            if let Some(last) = index.last() {
                if entry.timestamp_ms <= last.timestamp_ms
                    || entry.relative_offset < last.relative_offset
                {
                    break;
                }
            }
            match base_offset.checked_add(i64::from(entry.relative_offset)) {
                Some(absolute) if absolute < next_offset_hint => index.entries.push(entry),
                _ => break,
            }
        }
        index
    }

    /// Encodes every entry, in order, as it would be on disk.
    pub fn encode(&self) -> Vec<u8> {
        let mut out = Vec::with_capacity(self.entries.len() * ENTRY_BYTES);
        for entry in &self.entries {
            encode_entry(*entry, &mut out);
        }
        out
    }

    fn absolute(&self, relative_offset: u32) -> i64 {
        // append and decode guarantee this does not overflow; saturate rather than panic.
        self.base_offset.saturating_add(i64::from(relative_offset))
    }
}

/// Appends the 12-byte on-disk form of `entry` to `out`.
pub fn encode_entry(entry: TimeEntry, out: &mut Vec<u8>) {
    out.extend_from_slice(&entry.timestamp_ms.to_be_bytes());
    out.extend_from_slice(&entry.relative_offset.to_be_bytes());
}

fn decode_entry(chunk: &[u8]) -> Option<TimeEntry> {
    let (timestamp, rest) = chunk.split_first_chunk::<8>()?;
    let (offset, _) = rest.split_first_chunk::<4>()?;
    Some(TimeEntry {
        timestamp_ms: i64::from_be_bytes(*timestamp),
        relative_offset: u32::from_be_bytes(*offset),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    const BASE: i64 = 500;

    fn entry(timestamp_ms: i64, relative_offset: u32) -> TimeEntry {
        TimeEntry {
            timestamp_ms,
            relative_offset,
        }
    }

    /// Entries (100 @ 500), (200 @ 510), (300 @ 520).
    fn sample() -> TimeIndex {
        let mut index = TimeIndex::new(BASE);
        index.append(100, BASE);
        index.append(200, BASE + 10);
        index.append(300, BASE + 20);
        index
    }

    #[test]
    fn accessors() {
        let index = sample();
        assert_eq!(index.base_offset(), BASE);
        assert_eq!(index.len(), 3);
        assert!(!index.is_empty());
        assert_eq!(index.last(), Some(entry(300, 20)));
        assert_eq!(index.max_timestamp_ms(), Some(300));
        let empty = TimeIndex::new(BASE);
        assert!(empty.is_empty());
        assert_eq!(empty.max_timestamp_ms(), None);
        assert_eq!(empty.last(), None);
    }

    #[test]
    fn append_ignores_non_increasing_timestamps() {
        let mut index = sample();
        index.append(300, BASE + 30);
        index.append(50, BASE + 31);
        assert_eq!(index.len(), 3);
        // Same offset, higher timestamp: allowed (offsets are non-decreasing).
        index.append(301, BASE + 20);
        assert_eq!(index.last(), Some(entry(301, 20)));
        index.append(400, BASE + 40);
        assert_eq!(index.last(), Some(entry(400, 40)));
    }

    #[test]
    #[should_panic]
    fn append_rejects_offset_going_backwards() {
        let mut index = sample();
        index.append(1_000, BASE + 19);
    }

    #[test]
    #[should_panic]
    fn append_rejects_offset_below_base() {
        TimeIndex::new(BASE).append(1, BASE - 1);
    }

    #[test]
    #[should_panic]
    fn append_rejects_offset_beyond_u32() {
        TimeIndex::new(BASE).append(1, BASE + (1 << 32));
    }

    #[test]
    fn scan_start_on_empty_index_is_segment_start() {
        let index = TimeIndex::new(BASE);
        assert_eq!(index.scan_start_for(i64::MIN), BASE);
        assert_eq!(index.scan_start_for(0), BASE);
        assert_eq!(index.scan_start_for(i64::MAX), BASE);
    }

    #[test]
    fn scan_start_before_exact_between_after() {
        let index = sample();
        // Before every entry.
        assert_eq!(index.scan_start_for(i64::MIN), BASE);
        assert_eq!(index.scan_start_for(100), BASE);
        // Between: the last entry strictly below the target.
        assert_eq!(index.scan_start_for(101), BASE);
        assert_eq!(index.scan_start_for(150), BASE);
        // Exact: the matching entry's batch may itself hold the target, so start before it.
        assert_eq!(index.scan_start_for(200), BASE);
        assert_eq!(index.scan_start_for(201), BASE + 10);
        assert_eq!(index.scan_start_for(300), BASE + 10);
        // After every entry: the unindexed tail must be scanned.
        assert_eq!(index.scan_start_for(301), BASE + 20);
        assert_eq!(index.scan_start_for(i64::MAX), BASE + 20);
    }

    #[test]
    fn scan_start_never_skips_the_wanted_batch() {
        // Simulated segment: batch i starts at offset BASE + 2i with these max
        // timestamps; the index records only every other raise of the running max.
        let batch_max = [5i64, 3, 9, 9, 12, 4, 20, 18, 25, 30, 27, 31];
        let mut index = TimeIndex::new(BASE);
        let mut running = i64::MIN;
        let mut raises = 0;
        for (i, ts) in batch_max.iter().enumerate() {
            if *ts > running {
                running = *ts;
                raises += 1;
                if raises % 2 == 0 {
                    index.append(running, BASE + 2 * i as i64);
                }
            }
        }
        for target in 0..40 {
            let wanted = batch_max.iter().position(|ts| *ts >= target);
            let start = index.scan_start_for(target);
            assert_eq!((start - BASE) % 2, 0, "start must be a batch boundary");
            if let Some(w) = wanted {
                assert!(
                    start <= BASE + 2 * w as i64,
                    "target {target} skipped batch {w}"
                );
            }
        }
    }

    #[test]
    fn truncate_from_offset() {
        let mut index = sample();
        index.truncate_from_offset(BASE + 21);
        assert_eq!(index.len(), 3);
        index.truncate_from_offset(BASE + 20);
        assert_eq!(index.entries(), &[entry(100, 0), entry(200, 10)]);
        index.truncate_from_offset(BASE + 1);
        assert_eq!(index.entries(), &[entry(100, 0)]);
        index.truncate_from_offset(BASE);
        assert!(index.is_empty());
        let mut index = sample();
        index.truncate_from_offset(i64::MIN);
        assert!(index.is_empty());
        let mut index = sample();
        index.truncate_from_offset(i64::MAX);
        assert_eq!(index, sample());
    }

    #[test]
    fn encode_entry_is_big_endian() {
        let mut out = Vec::new();
        encode_entry(entry(0x0102_0304_0506_0708, 0x0a0b_0c0d), &mut out);
        assert_eq!(out, [1, 2, 3, 4, 5, 6, 7, 8, 0x0a, 0x0b, 0x0c, 0x0d]);
        let mut out = Vec::new();
        encode_entry(entry(-1, 0), &mut out);
        assert_eq!(
            out,
            [0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0, 0, 0, 0]
        );
    }

    #[test]
    fn decode_round_trips_with_zero_padding() {
        let index = sample();
        let mut bytes = index.encode();
        assert_eq!(bytes.len(), 3 * ENTRY_BYTES);
        assert_eq!(TimeIndex::decode(BASE, &bytes, i64::MAX), index);
        bytes.resize(4096, 0);
        assert_eq!(TimeIndex::decode(BASE, &bytes, i64::MAX), index);
        assert!(TimeIndex::decode(BASE, &[0u8; 4096], i64::MAX).is_empty());
        assert!(TimeIndex::decode(BASE, &[], i64::MAX).is_empty());
    }

    #[test]
    fn decode_ignores_partial_trailing_entry() {
        let index = sample();
        let mut bytes = index.encode();
        bytes.extend_from_slice(&[0x7f, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10]);
        assert_eq!(TimeIndex::decode(BASE, &bytes, i64::MAX), index);
        let bytes = index.encode();
        let cut = TimeIndex::decode(BASE, &bytes[..bytes.len() - 1], i64::MAX);
        assert_eq!(cut.entries(), &index.entries()[..2]);
    }

    #[test]
    fn decode_stops_at_offsets_beyond_hint() {
        let bytes = sample().encode();
        let index = TimeIndex::decode(BASE, &bytes, BASE + 20);
        assert_eq!(index.entries(), &[entry(100, 0), entry(200, 10)]);
        assert_eq!(TimeIndex::decode(BASE, &bytes, BASE + 21).len(), 3);
        assert!(TimeIndex::decode(BASE, &bytes, BASE).is_empty());
    }

    #[test]
    fn decode_stops_at_out_of_order_entries() {
        let mut bytes = sample().encode();
        encode_entry(entry(300, 30), &mut bytes); // timestamp not increasing
        encode_entry(entry(400, 40), &mut bytes); // after garbage: not trusted
        assert_eq!(TimeIndex::decode(BASE, &bytes, i64::MAX), sample());
        let mut bytes = sample().encode();
        encode_entry(entry(400, 19), &mut bytes); // offset going backwards
        assert_eq!(TimeIndex::decode(BASE, &bytes, i64::MAX), sample());
    }

    #[test]
    fn decode_keeps_negative_and_zero_timestamps_that_are_not_padding() {
        let mut bytes = Vec::new();
        encode_entry(entry(-5, 0), &mut bytes);
        encode_entry(entry(0, 1), &mut bytes);
        encode_entry(entry(0, 0), &mut bytes); // padding after a valid entry
        let index = TimeIndex::decode(BASE, &bytes, i64::MAX);
        assert_eq!(index.entries(), &[entry(-5, 0), entry(0, 1)]);
    }

    #[test]
    fn decode_stops_at_offset_overflow() {
        let mut bytes = Vec::new();
        encode_entry(entry(1, 1), &mut bytes);
        encode_entry(entry(2, u32::MAX), &mut bytes);
        let index = TimeIndex::decode(i64::MAX - 5, &bytes, i64::MAX);
        assert_eq!(index.entries(), &[entry(1, 1)]);
    }
}
