//! The sparse offset index of one segment: maps a record offset to the byte position of a
//! batch boundary at or before it, so a read can start near its target instead of at the
//! start of the segment.
//!
//! Owns: the in-memory entry list, its on-disk encoding (8 bytes per entry, big-endian
//! `relative offset u32` then `position u32`), lookup, truncation, and the tolerant
//! decoding of an index file that may end in a torn write or zero padding.
//!
//! Invariants:
//! - Entries are strictly increasing in both relative offset and position.
//! - No entry has position 0: the segment start is the implicit entry
//!   `(base_offset, 0)`, and on disk a zero position marks the end of the written
//!   entries (the direct-I/O block padding is zeros).
//! - `base_offset + relative_offset` never overflows `i64`.
//!
//! Does not: decide when to add an entry (the appender does, every N bytes), read or
//! write files, or validate that positions point at real batch boundaries — `decode`
//! only drops entries that cannot be right (out of order, or past the end of the log).

/// Size of one encoded entry.
pub const ENTRY_BYTES: usize = 8;

/// One index entry: the batch at byte `position` of the segment file starts at, or holds,
/// offset `base_offset + relative_offset`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct IndexEntry {
    pub relative_offset: u32,
    pub position: u32,
}

/// The offset index of one segment.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct OffsetIndex {
    base_offset: i64,
    entries: Vec<IndexEntry>,
}

impl OffsetIndex {
    /// An empty index for the segment whose first offset is `base_offset`.
    pub fn new(base_offset: i64) -> Self {
        OffsetIndex {
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

    pub fn entries(&self) -> &[IndexEntry] {
        &self.entries
    }

    pub fn last(&self) -> Option<IndexEntry> {
        self.entries.last().copied()
    }

    /// Adds an entry for absolute `offset` at byte `position`.
    ///
    /// Panics unless `offset` is within `base_offset ..= base_offset + u32::MAX`,
    /// `position > 0`, and both are strictly greater than the last entry's: the appender
    /// only ever moves forward, so anything else is a bug, and an out-of-order entry
    /// would silently break the binary search.
    pub fn append(&mut self, offset: i64, position: u32) {
        let relative = offset
            .checked_sub(self.base_offset)
            .and_then(|r| u32::try_from(r).ok());
        let Some(relative_offset) = relative else {
            panic!(
                "offset {offset} outside the u32 range of segment base {}",
                self.base_offset
            );
        };
        // Position 0 is the implicit segment start, and `decode` reads it as the end of
        // the file's entries; writing one would lose everything after it on reload.
        assert!(position > 0, "offset index entry at position 0");
        if let Some(last) = self.last() {
            assert!(
                relative_offset > last.relative_offset && position > last.position,
                "offset index entry ({relative_offset}, {position}) not after {last:?}"
            );
        }
        self.entries.push(IndexEntry {
            relative_offset,
            position,
        });
    }

    /// Returns the absolute offset and position of the last entry whose offset is
    /// `<= offset`, or `(base_offset, 0)` if there is none. A forward scan from that
    /// position reaches the batch holding `offset`, if the segment has it.
    pub fn lookup(&self, offset: i64) -> (i64, u32) {
        let Some(relative) = offset.checked_sub(self.base_offset) else {
            return (self.base_offset, 0);
        };
        if relative < 0 {
            return (self.base_offset, 0);
        }
        // Beyond the u32 range every entry qualifies, so clamping is exact.
        let relative = u32::try_from(relative).unwrap_or(u32::MAX);
        let after = self
            .entries
            .partition_point(|e| e.relative_offset <= relative);
        match after.checked_sub(1).and_then(|i| self.entries.get(i)) {
            Some(e) => (self.absolute(e.relative_offset), e.position),
            None => (self.base_offset, 0),
        }
    }

    /// Drops every entry with `position >= position`: recovery truncated the log there,
    /// so those entries point at bytes that no longer exist.
    pub fn truncate_from_position(&mut self, position: u32) {
        let keep = self.entries.partition_point(|e| e.position < position);
        self.entries.truncate(keep);
    }

    /// Loads an index file tolerantly: reads whole entries from the start and stops at
    /// the first one that cannot belong to a clean index — position 0 (zero padding or
    /// an unwritten block), position `>= log_len` (the log was truncated or its tail was
    /// torn), an offset or position not strictly greater than the previous entry's
    /// (garbage from a torn write), or an absolute offset that would overflow. A partial
    /// trailing entry is ignored. Nothing after the first bad entry is trusted, because
    /// the index is written strictly in order.
    pub fn decode(base_offset: i64, bytes: &[u8], log_len: u64) -> OffsetIndex {
        let mut index = OffsetIndex {
            base_offset,
            // Bounded by the bytes actually present.
            entries: Vec::with_capacity(bytes.len() / ENTRY_BYTES),
        };
        for chunk in bytes.chunks_exact(ENTRY_BYTES) {
            let Some(entry) = decode_entry(chunk) else {
                break;
            };
            if entry.position == 0 || u64::from(entry.position) >= log_len {
                break;
            }
            if let Some(last) = index.last() {
                if entry.relative_offset <= last.relative_offset || entry.position <= last.position
                {
                    break;
                }
            }
            if base_offset
                .checked_add(i64::from(entry.relative_offset))
                .is_none()
            {
                break;
            }
            index.entries.push(entry);
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

/// Appends the 8-byte on-disk form of `entry` to `out`.
pub fn encode_entry(entry: IndexEntry, out: &mut Vec<u8>) {
    out.extend_from_slice(&entry.relative_offset.to_be_bytes());
    out.extend_from_slice(&entry.position.to_be_bytes());
}

fn decode_entry(chunk: &[u8]) -> Option<IndexEntry> {
    let (offset, rest) = chunk.split_first_chunk::<4>()?;
    let (position, _) = rest.split_first_chunk::<4>()?;
    Some(IndexEntry {
        relative_offset: u32::from_be_bytes(*offset),
        position: u32::from_be_bytes(*position),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    const BASE: i64 = 1_000;

    /// Entries at offsets 1010, 1020, 1030 and positions 100, 200, 300.
    fn sample() -> OffsetIndex {
        let mut index = OffsetIndex::new(BASE);
        index.append(BASE + 10, 100);
        index.append(BASE + 20, 200);
        index.append(BASE + 30, 300);
        index
    }

    fn entry(relative_offset: u32, position: u32) -> IndexEntry {
        IndexEntry {
            relative_offset,
            position,
        }
    }

    #[test]
    fn accessors() {
        let index = sample();
        assert_eq!(index.base_offset(), BASE);
        assert_eq!(index.len(), 3);
        assert!(!index.is_empty());
        assert_eq!(index.last(), Some(entry(30, 300)));
        assert_eq!(index.entries()[0], entry(10, 100));
        let empty = OffsetIndex::new(5);
        assert!(empty.is_empty());
        assert_eq!(empty.last(), None);
    }

    #[test]
    fn lookup_on_empty_index_is_segment_start() {
        let index = OffsetIndex::new(BASE);
        assert_eq!(index.lookup(BASE), (BASE, 0));
        assert_eq!(index.lookup(BASE + 500), (BASE, 0));
        assert_eq!(index.lookup(i64::MIN), (BASE, 0));
    }

    #[test]
    fn lookup_before_exact_between_after() {
        let index = sample();
        assert_eq!(index.lookup(BASE - 1), (BASE, 0));
        assert_eq!(index.lookup(i64::MIN), (BASE, 0));
        assert_eq!(index.lookup(BASE), (BASE, 0));
        assert_eq!(index.lookup(BASE + 9), (BASE, 0));
        assert_eq!(index.lookup(BASE + 10), (BASE + 10, 100));
        assert_eq!(index.lookup(BASE + 15), (BASE + 10, 100));
        assert_eq!(index.lookup(BASE + 20), (BASE + 20, 200));
        assert_eq!(index.lookup(BASE + 29), (BASE + 20, 200));
        assert_eq!(index.lookup(BASE + 30), (BASE + 30, 300));
        assert_eq!(index.lookup(BASE + 1_000_000), (BASE + 30, 300));
        assert_eq!(index.lookup(i64::MAX), (BASE + 30, 300));
    }

    #[test]
    fn lookup_matches_linear_scan() {
        let mut index = OffsetIndex::new(0);
        for i in 1..200u32 {
            index.append(i64::from(i * 3), i * 7);
        }
        for target in -2..700i64 {
            let expected = index
                .entries()
                .iter()
                .rev()
                .find(|e| i64::from(e.relative_offset) <= target)
                .map_or((0, 0), |e| (i64::from(e.relative_offset), e.position));
            assert_eq!(index.lookup(target), expected, "target {target}");
        }
    }

    #[test]
    #[should_panic]
    fn append_rejects_non_increasing_offset() {
        let mut index = sample();
        index.append(BASE + 30, 400);
    }

    #[test]
    #[should_panic]
    fn append_rejects_non_increasing_position() {
        let mut index = sample();
        index.append(BASE + 40, 300);
    }

    #[test]
    #[should_panic]
    fn append_rejects_offset_below_base() {
        OffsetIndex::new(BASE).append(BASE - 1, 10);
    }

    #[test]
    #[should_panic]
    fn append_rejects_offset_beyond_u32() {
        OffsetIndex::new(BASE).append(BASE + (1 << 32), 10);
    }

    #[test]
    #[should_panic]
    fn append_rejects_position_zero() {
        OffsetIndex::new(BASE).append(BASE, 0);
    }

    #[test]
    fn append_accepts_u32_extremes() {
        let mut index = OffsetIndex::new(BASE);
        index.append(BASE, 1);
        index.append(BASE + i64::from(u32::MAX), u32::MAX);
        assert_eq!(
            index.lookup(i64::MAX),
            (BASE + i64::from(u32::MAX), u32::MAX)
        );
    }

    #[test]
    fn encode_entry_is_big_endian() {
        let mut out = Vec::new();
        encode_entry(entry(0x0102_0304, 0x0a0b_0c0d), &mut out);
        assert_eq!(out, [1, 2, 3, 4, 0x0a, 0x0b, 0x0c, 0x0d]);
    }

    #[test]
    fn decode_round_trips_with_zero_padding() {
        let index = sample();
        let mut bytes = index.encode();
        assert_eq!(bytes.len(), 3 * ENTRY_BYTES);
        assert_eq!(OffsetIndex::decode(BASE, &bytes, 10_000), index);
        bytes.resize(4096, 0);
        assert_eq!(OffsetIndex::decode(BASE, &bytes, 10_000), index);
        assert!(OffsetIndex::decode(BASE, &[0u8; 4096], 10_000).is_empty());
        assert!(OffsetIndex::decode(BASE, &[], 10_000).is_empty());
    }

    #[test]
    fn decode_ignores_partial_trailing_entry() {
        let index = sample();
        let mut bytes = index.encode();
        let mut extra = Vec::new();
        encode_entry(entry(40, 400), &mut extra);
        bytes.extend_from_slice(&extra[..5]);
        assert_eq!(OffsetIndex::decode(BASE, &bytes, 10_000), index);
        // Cutting into the last entry loses only that entry.
        let bytes = index.encode();
        let cut = OffsetIndex::decode(BASE, &bytes[..bytes.len() - 1], 10_000);
        assert_eq!(cut.entries(), &index.entries()[..2]);
    }

    #[test]
    fn decode_stops_at_positions_beyond_log_len() {
        let bytes = sample().encode();
        let index = OffsetIndex::decode(BASE, &bytes, 300);
        assert_eq!(index.entries(), &[entry(10, 100), entry(20, 200)]);
        let index = OffsetIndex::decode(BASE, &bytes, 301);
        assert_eq!(index.len(), 3);
        assert!(OffsetIndex::decode(BASE, &bytes, 100).is_empty());
        assert!(OffsetIndex::decode(BASE, &bytes, 0).is_empty());
    }

    #[test]
    fn decode_stops_at_out_of_order_entries() {
        let mut bytes = sample().encode();
        // Garbage after the valid prefix, then a seemingly valid entry: not trusted.
        encode_entry(entry(25, 400), &mut bytes);
        encode_entry(entry(50, 500), &mut bytes);
        assert_eq!(OffsetIndex::decode(BASE, &bytes, 10_000), sample());
        let mut bytes = sample().encode();
        encode_entry(entry(40, 300), &mut bytes);
        assert_eq!(OffsetIndex::decode(BASE, &bytes, 10_000), sample());
    }

    #[test]
    fn decode_stops_at_offset_overflow() {
        let mut bytes = Vec::new();
        encode_entry(entry(1, 10), &mut bytes);
        encode_entry(entry(u32::MAX, 20), &mut bytes);
        let index = OffsetIndex::decode(i64::MAX - 5, &bytes, 10_000);
        assert_eq!(index.entries(), &[entry(1, 10)]);
    }

    #[test]
    fn truncate_from_position() {
        let mut index = sample();
        index.truncate_from_position(301);
        assert_eq!(index.len(), 3);
        index.truncate_from_position(300);
        assert_eq!(index.entries(), &[entry(10, 100), entry(20, 200)]);
        index.truncate_from_position(150);
        assert_eq!(index.entries(), &[entry(10, 100)]);
        index.truncate_from_position(0);
        assert!(index.is_empty());
        // Appending resumes after a truncation.
        index.append(BASE + 5, 50);
        assert_eq!(index.lookup(BASE + 7), (BASE + 5, 50));
    }
}
