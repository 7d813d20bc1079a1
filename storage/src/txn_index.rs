//! The aborted transactions of a partition: what a `read_committed` fetch must be told so
//! that the consumer drops the records of transactions that aborted.
//!
//! One entry per aborted transaction of one producer in this partition: the producer, the
//! offset of its first record here, the offset of its abort marker, and the last stable
//! offset right after the marker (the first offset some other transaction still held
//! open, or the marker's next offset). Entries are appended in marker order, so they are
//! sorted by `last_offset`.
//!
//! On disk each segment has a `<base>.txnindex` file with the entries whose marker lies in
//! that segment, in Kafka's layout (`TransactionIndex`): 34 bytes per entry, big-endian
//! `version i16 = 0, producer_id i64, first_offset i64, last_offset i64,
//! last_stable_offset i64`. The log writes a segment's file whole when the segment is
//! sealed and at a clean close; at open the entries the producer-state replay covers are
//! dropped and rebuilt from the markers in the log, so a crash loses none.
//!
//! Invariants: entries are sorted by `last_offset`, strictly increasing (one marker per
//! offset); every entry has `first_offset < last_offset` (the marker follows the
//! transaction's records) and `last_stable_offset <= last_offset + 1`;
//! decoding untrusted bytes never panics and stops at the first entry it cannot read.

use crate::fs::Fs;
use crate::segment::{self, TXN_INDEX_SUFFIX};
use std::path::Path;

/// Bytes of one entry on disk.
pub const ENTRY_LEN: usize = 2 + 8 + 8 + 8 + 8;
/// The entry version Kafka writes.
const VERSION: i16 = 0;

/// One aborted transaction (Kafka's `AbortedTxn`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct AbortedTxn {
    pub producer_id: i64,
    pub first_offset: i64,
    pub last_offset: i64,
    pub last_stable_offset: i64,
}

impl AbortedTxn {
    /// The last stable offset is at most the marker's next offset: below it when another
    /// transaction was still open.
    fn is_well_formed(&self) -> bool {
        self.first_offset >= 0
            && self.first_offset < self.last_offset
            && self.last_stable_offset >= 0
            && self.last_stable_offset <= self.last_offset + 1
    }
}

/// Entries laid out as a `.txnindex` file holds them.
pub fn encode(entries: &[AbortedTxn]) -> Vec<u8> {
    let mut out = Vec::with_capacity(entries.len() * ENTRY_LEN);
    for e in entries {
        out.extend_from_slice(&VERSION.to_be_bytes());
        out.extend_from_slice(&e.producer_id.to_be_bytes());
        out.extend_from_slice(&e.first_offset.to_be_bytes());
        out.extend_from_slice(&e.last_offset.to_be_bytes());
        out.extend_from_slice(&e.last_stable_offset.to_be_bytes());
    }
    out
}

/// The entries of a `.txnindex` file's bytes, up to the first that is partial, of another
/// version, malformed or out of order (what follows such an entry cannot be trusted).
pub fn decode(bytes: &[u8]) -> Vec<AbortedTxn> {
    let mut out: Vec<AbortedTxn> = Vec::with_capacity(bytes.len() / ENTRY_LEN);
    for chunk in bytes.chunks_exact(ENTRY_LEN) {
        let i64_at = |at: usize| -> i64 {
            let mut b = [0u8; 8];
            b.copy_from_slice(&chunk[at..at + 8]);
            i64::from_be_bytes(b)
        };
        if i16::from_be_bytes([chunk[0], chunk[1]]) != VERSION {
            break;
        }
        let entry = AbortedTxn {
            producer_id: i64_at(2),
            first_offset: i64_at(10),
            last_offset: i64_at(18),
            last_stable_offset: i64_at(26),
        };
        let in_order = out.last().is_none_or(|p| p.last_offset < entry.last_offset);
        if !entry.is_well_formed() || !in_order {
            break;
        }
        out.push(entry);
    }
    out
}

/// The version of the first entry of a newer format than this release writes, if any: a
/// newer release's index, which dropping would show aborted records to `read_committed`
/// readers.
pub fn newer_version(bytes: &[u8]) -> Option<(usize, i16)> {
    bytes
        .chunks_exact(ENTRY_LEN)
        .enumerate()
        .map(|(i, chunk)| (i, i16::from_be_bytes([chunk[0], chunk[1]])))
        .find(|(_, v)| *v != VERSION)
        .filter(|(_, v)| *v > VERSION)
}

/// Reads the `.txnindex` of the segment at `base`; no file is no entries. An entry of a
/// newer version is an error naming the file, the entry and its version.
pub fn read(fs: &dyn Fs, dir: &Path, base: i64) -> std::io::Result<Vec<AbortedTxn>> {
    let path = segment::file_path(dir, base, TXN_INDEX_SUFFIX);
    match fs.read(&path) {
        Ok(bytes) => match newer_version(&bytes) {
            Some((entry, version)) => Err(std::io::Error::new(
                std::io::ErrorKind::InvalidData,
                format!(
                    "{}: entry {entry} is of version {version}, newer than this release reads \
                     (version {VERSION}); run the release that wrote it",
                    path.display()
                ),
            )),
            None => Ok(decode(&bytes)),
        },
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(Vec::new()),
        Err(e) => Err(e),
    }
}

/// Writes the `.txnindex` of the segment at `base` whole and durably, or removes it when
/// there are no entries.
pub fn write(fs: &dyn Fs, dir: &Path, base: i64, entries: &[AbortedTxn]) -> std::io::Result<()> {
    let path = segment::file_path(dir, base, TXN_INDEX_SUFFIX);
    let name = path
        .file_name()
        .and_then(|n| n.to_str())
        .map(str::to_owned)
        .unwrap_or_default();
    if entries.is_empty() {
        return match fs.remove_file(&path) {
            Err(e) if e.kind() != std::io::ErrorKind::NotFound => Err(e),
            _ => Ok(()),
        };
    }
    crate::checkpoint::replace_file(fs, dir, &name, &encode(entries))
}

/// A partition's aborted transactions, sorted by marker offset.
#[derive(Debug, Default, Clone, PartialEq, Eq)]
pub struct AbortedTxns {
    entries: Vec<AbortedTxn>,
}

impl AbortedTxns {
    pub fn new() -> AbortedTxns {
        AbortedTxns::default()
    }

    pub fn len(&self) -> usize {
        self.entries.len()
    }

    pub fn is_empty(&self) -> bool {
        self.entries.is_empty()
    }

    /// Adds the entry of a marker past every one held.
    pub fn push(&mut self, entry: AbortedTxn) {
        debug_assert!(entry.is_well_formed(), "{entry:?}");
        assert!(
            self.entries
                .last()
                .is_none_or(|p| p.last_offset < entry.last_offset),
            "aborted transactions are added in marker order"
        );
        self.entries.push(entry);
    }

    /// Adds the entries of a segment's file, which all lie past every entry held; any
    /// that does not is dropped (a stale file).
    pub fn extend(&mut self, entries: impl IntoIterator<Item = AbortedTxn>) {
        for e in entries {
            if e.is_well_formed()
                && self
                    .entries
                    .last()
                    .is_none_or(|p| p.last_offset < e.last_offset)
            {
                self.entries.push(e);
            }
        }
    }

    /// Adds the entries a replay of the log rebuilt (in marker order), each replacing
    /// one read from a file for the same marker.
    pub fn merge(&mut self, rebuilt: Vec<AbortedTxn>) {
        if rebuilt.is_empty() {
            return;
        }
        let mut merged = Vec::with_capacity(self.entries.len() + rebuilt.len());
        let mut old = std::mem::take(&mut self.entries).into_iter().peekable();
        for e in rebuilt {
            while let Some(o) = old.next_if(|o| o.last_offset < e.last_offset) {
                merged.push(o);
            }
            old.next_if(|o| o.last_offset == e.last_offset);
            merged.push(e);
        }
        merged.extend(old);
        self.entries = merged;
        debug_assert!(self
            .entries
            .windows(2)
            .all(|w| w[0].last_offset < w[1].last_offset));
    }

    /// The entries whose marker lies in `[from, to)`.
    pub fn in_range(&self, from: i64, to: i64) -> &[AbortedTxn] {
        let start = self.entries.partition_point(|e| e.last_offset < from);
        let end = self.entries.partition_point(|e| e.last_offset < to);
        self.entries.get(start..end.max(start)).unwrap_or_default()
    }

    /// What a `read_committed` fetch from `fetch_offset` of records below `upper_bound`
    /// must be told (Kafka's `collectAbortedTxns`): every transaction aborted at or past
    /// `fetch_offset` that began below `upper_bound`. The scan stops at the first entry
    /// whose last stable offset reaches `upper_bound`: every transaction aborted after
    /// it was either still open then (so began at or past that offset) or began later.
    pub fn collect(&self, fetch_offset: i64, upper_bound: i64) -> Vec<AbortedTxn> {
        let start = self
            .entries
            .partition_point(|e| e.last_offset < fetch_offset);
        let mut out = Vec::new();
        for e in self.entries.get(start..).unwrap_or_default() {
            if e.first_offset < upper_bound {
                out.push(*e);
            }
            if e.last_stable_offset >= upper_bound {
                break;
            }
        }
        out
    }

    /// Forgets the entries whose marker is at or past `offset` (a truncated log, or the
    /// part a replay rebuilds).
    pub fn truncate_from(&mut self, offset: i64) {
        let keep = self.entries.partition_point(|e| e.last_offset < offset);
        self.entries.truncate(keep);
    }

    /// Forgets the entries whose marker lies below `offset` (their segments were deleted).
    pub fn remove_below(&mut self, offset: i64) {
        let gone = self.entries.partition_point(|e| e.last_offset < offset);
        self.entries.drain(..gone);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn txn(pid: i64, first: i64, last: i64, lso: i64) -> AbortedTxn {
        AbortedTxn {
            producer_id: pid,
            first_offset: first,
            last_offset: last,
            last_stable_offset: lso,
        }
    }

    #[test]
    fn entries_are_laid_out_as_kafka_lays_them_out() {
        let bytes = encode(&[txn(0x0102, 3, 9, 10)]);
        assert!(txn(0x0102, 3, 9, 10).is_well_formed());
        assert_eq!(bytes.len(), ENTRY_LEN);
        assert_eq!(&bytes[0..2], &[0, 0], "version 0");
        assert_eq!(&bytes[2..10], &0x0102i64.to_be_bytes());
        assert_eq!(&bytes[10..18], &3i64.to_be_bytes());
        assert_eq!(&bytes[18..26], &9i64.to_be_bytes());
        assert_eq!(&bytes[26..34], &10i64.to_be_bytes());
        assert_eq!(decode(&bytes), vec![txn(0x0102, 3, 9, 10)]);
    }

    #[test]
    fn decoding_stops_at_the_first_untrustworthy_entry() {
        let good = [txn(1, 0, 5, 6), txn(2, 1, 8, 9)];
        let bytes = encode(&good);
        for len in 0..bytes.len() {
            assert_eq!(decode(&bytes[..len]), good[..len / ENTRY_LEN].to_vec());
        }
        let mut other_version = bytes.clone();
        other_version[ENTRY_LEN + 1] = 1;
        assert_eq!(decode(&other_version), good[..1].to_vec());
        let backwards = encode(&[txn(2, 1, 8, 9), txn(1, 0, 5, 6)]);
        assert_eq!(decode(&backwards), vec![txn(2, 1, 8, 9)]);
        for malformed in [txn(1, 7, 5, 6), txn(1, 0, 5, 7), txn(1, -1, 5, 6)] {
            assert!(decode(&encode(&[malformed])).is_empty(), "{malformed:?}");
        }
    }

    /// Two producers: A's transaction spans 0..=9 and aborts at 9 while B's, from 4, is
    /// still open (LSO 4); B aborts at 12; C's aborts alone at 20.
    fn sample() -> AbortedTxns {
        let mut a = AbortedTxns::new();
        a.push(txn(1, 0, 9, 4));
        a.push(txn(2, 4, 12, 13));
        a.push(txn(3, 15, 20, 21));
        a
    }

    #[test]
    fn collect_returns_the_aborts_a_fetch_overlaps() {
        let a = sample();
        let pids = |v: Vec<AbortedTxn>| v.iter().map(|e| e.producer_id).collect::<Vec<_>>();
        assert_eq!(
            pids(a.collect(0, 3)),
            vec![1],
            "B's began past the fetched data"
        );
        assert_eq!(pids(a.collect(0, 13)), vec![1, 2]);
        assert_eq!(
            pids(a.collect(10, 13)),
            vec![2],
            "A's marker is behind the fetch"
        );
        assert_eq!(pids(a.collect(13, 30)), vec![3]);
        assert_eq!(pids(a.collect(21, 30)), Vec::<i64>::new());
        // The scan stops once a last stable offset reaches the bound.
        assert_eq!(
            pids(a.collect(0, 4)),
            vec![1],
            "stops at B's entry (LSO 13 ≥ 4)"
        );
    }

    #[test]
    fn truncation_and_deletion_drop_by_marker_offset() {
        let mut a = sample();
        a.truncate_from(12);
        assert_eq!(a.len(), 1);
        let mut b = sample();
        b.remove_below(10);
        assert_eq!(b.in_range(0, 100).len(), 2);
        assert_eq!(sample().in_range(9, 20).len(), 2);
        assert_eq!(sample().in_range(13, 9).len(), 0);
    }

    #[test]
    fn extend_skips_stale_entries() {
        let mut a = sample();
        a.extend([txn(9, 0, 5, 6), txn(4, 22, 25, 26)]);
        assert_eq!(a.len(), 4);
    }

    #[test]
    fn merge_replaces_and_interleaves_by_marker() {
        let mut a = sample();
        a.merge(vec![
            txn(5, 10, 11, 12),
            txn(2, 4, 12, 14),
            txn(6, 22, 30, 31),
        ]);
        let lasts: Vec<i64> = a.in_range(0, 100).iter().map(|e| e.last_offset).collect();
        assert_eq!(lasts, vec![9, 11, 12, 20, 30]);
        assert_eq!(
            a.in_range(12, 13)[0].last_stable_offset,
            14,
            "the rebuilt one wins"
        );
    }

    #[test]
    fn files_round_trip_and_vanish_when_empty() {
        // The same on the kernel's file system and in memory.
        let tmp = tempfile::tempdir().expect("tempdir");
        let mem = crate::fs::MemFs::new();
        mem.create_dir_all(Path::new("/p")).expect("dir");
        for (fs, dir) in [
            (&crate::fs::KernelFs as &dyn Fs, tmp.path()),
            (&mem, Path::new("/p")),
        ] {
            let entries = [txn(1, 0, 9, 10)];
            write(fs, dir, 0, &entries).expect("write");
            assert_eq!(read(fs, dir, 0).expect("read"), entries.to_vec());
            write(fs, dir, 0, &[]).expect("write empty");
            assert!(!fs.exists(&segment::file_path(dir, 0, TXN_INDEX_SUFFIX)));
            assert!(read(fs, dir, 0).expect("read").is_empty());
        }
    }

    #[test]
    fn an_entry_of_a_newer_version_is_named_not_dropped() {
        let mut bytes = encode(&[txn(7, 1, 4, 1), txn(7, 5, 9, 5)]);
        assert_eq!(newer_version(&bytes), None);
        bytes[ENTRY_LEN..ENTRY_LEN + 2].copy_from_slice(&1i16.to_be_bytes());
        assert_eq!(newer_version(&bytes), Some((1, 1)));
        assert_eq!(
            decode(&bytes).len(),
            1,
            "the tolerant decode still stops there"
        );
    }
}
