//! One segment of a partition log: its file names, its log file and the in-memory
//! copies of its two indexes.
//!
//! A segment is named by its base offset, the offset of its first record, as 20 decimal
//! digits so that names sort as numbers do. `size` is the segment's logical length: the
//! bytes of complete, written batches. Readers never look past it; the file itself may be
//! longer by the zero padding of the last direct-I/O block until the segment is sealed.

use super::file_cache::SegmentFile;
use super::offset_index::OffsetIndex;
use super::time_index::TimeIndex;
use std::path::{Path, PathBuf};

pub const LOG_SUFFIX: &str = "log";
pub const INDEX_SUFFIX: &str = "index";
pub const TIME_INDEX_SUFFIX: &str = "timeindex";
/// The aborted transactions whose marker lies in the segment (`txn_index`).
pub const TXN_INDEX_SUFFIX: &str = "txnindex";
/// When the cleaner first wrote the segment (ms since the epoch, decimal): tombstones in it
/// may go `delete.retention.ms` after that (Kafka's delete horizon, KIP-534).
pub const CLEANED_AT_SUFFIX: &str = "cleanedat";
/// Every file of a segment but its log: what goes and moves with it.
pub const COMPANION_SUFFIXES: [&str; 4] = [
    INDEX_SUFFIX,
    TIME_INDEX_SUFFIX,
    TXN_INDEX_SUFFIX,
    CLEANED_AT_SUFFIX,
];

pub fn file_path(dir: &Path, base_offset: i64, suffix: &str) -> PathBuf {
    assert!(base_offset >= 0, "segment base offsets are never negative");
    dir.join(format!("{base_offset:020}.{suffix}"))
}

/// The base offset named by a `.log` file name, if it is one.
pub fn parse_log_file_name(name: &str) -> Option<i64> {
    let stem = name.strip_suffix(".log")?;
    if stem.len() != 20 || !stem.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    stem.parse().ok()
}

pub struct Segment {
    pub base_offset: i64,
    /// The `.log` file, opened on demand (`file_cache`).
    pub file: SegmentFile,
    /// Logical length: bytes of complete batches that are written.
    pub size: u64,
    pub index: OffsetIndex,
    pub time_index: TimeIndex,
    /// Largest batch max-timestamp in the segment (`i64::MIN` when empty).
    pub max_timestamp_ms: i64,
    /// When the cleaner first wrote this segment; `None` if it never has.
    pub cleaned_at_ms: Option<i64>,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_round_trip_and_sort() {
        let p = file_path(Path::new("/d"), 4711, LOG_SUFFIX);
        let name = p.file_name().and_then(|n| n.to_str()).unwrap_or_default();
        assert_eq!(name, "00000000000000004711.log");
        assert_eq!(parse_log_file_name(name), Some(4711));
        assert_eq!(parse_log_file_name("00000000000000004711.index"), None);
        assert_eq!(parse_log_file_name("4711.log"), None);
        assert_eq!(parse_log_file_name("0000000000000000471x.log"), None);
        assert!(
            file_path(Path::new("/d"), 9, LOG_SUFFIX) < file_path(Path::new("/d"), 10, LOG_SUFFIX)
        );
    }
}
