//! The log cleaner: one compaction pass over one partition.
//!
//! A pass, as Kafka's cleaner does it:
//! 1. **Choose.** The *cleanable* log is the sealed segments up to the first one holding
//!    a record younger than `min.compaction.lag.ms` or reaching past the owner's high
//!    watermark (the active segment never; Kafka's `firstUncleanableOffset`). Its
//!    *dirty* part starts at the cleaner checkpoint (`cleaner-offset-checkpoint`, the
//!    first offset not yet compacted). The pass runs when dirty bytes / cleanable bytes
//!    reach `min.cleanable.dirty.ratio`, or when the first dirty segment is older than
//!    `max.compaction.lag.ms`.
//! 2. **Map.** Walk the dirty part and record, per key, the latest offset
//!    ([`OffsetMap`], bounded by the cleaner's memory). When the map is full the pass
//!    ends its map there (`map_end`); the rest waits for the next pass.
//! 3. **Rewrite.** Every cleanable segment that starts below `map_end` is copied,
//!    keeping a record if it is at or past `map_end`, or if it is its key's latest
//!    offset (keys not in the map are older than the map and kept). Tombstones in a
//!    segment the cleaner first wrote more than `delete.retention.ms` ago (its
//!    `.cleanedat` sidecar: Kafka's delete horizon) and records without a key are dropped.
//!    Batches are filtered record by record whatever their codec (`crate::batch_filter`).
//!    A segment in which nothing changes is left alone.
//! 4. **Swap.** The copy is written as `<base>.{log,index,timeindex}.cleaned`, synced,
//!    renamed to `.swap` (log last), and then renamed over the originals (log last).
//!    `crate::segment_swap::recover_swaps`, run when a log opens, deletes `.cleaned` files and completes a
//!    swap whose `.log.swap` exists (all three files were synced before the first
//!    rename to `.swap`), or deletes index `.swap` files whose log never got there.
//!    So a crash at any point leaves either the old segment or the cleaned one.
//! 5. **Checkpoint** `map_end` as the new first dirty offset, and remember the oldest
//!    tombstone kept: once it passes `delete.retention.ms`, a pass runs even without new
//!    dirty data (a log that stopped receiving writes still loses its expired
//!    tombstones). That hint lives in memory; after a restart it is unknown, so each
//!    compacted log gets one such pass.
//!
//! Offsets never change: a cleaned segment keeps its base offset and every kept batch
//! its base offset and last offset delta. Memory is bounded by the key map, one scan
//! chunk, one decompressed batch and one output chunk ([`OUTPUT_CHUNK_BYTES`]), plus the
//! ranges of the log's aborted transactions below the cleanable end.
//!
//! **Transactions** (Kafka's `LogCleaner`, the part replay needs): a reader that rebuilds
//! state from a compacted log — the group coordinator replaying `__consumer_offsets` —
//! takes a transactional record as pending until its producer's marker, and drops it on
//! an abort. So the cleaner must never let an aborted or undecided record stand for its
//! key, or it would remove the committed record it seems to supersede:
//! - the cleanable log also ends at the log's first unstable offset (an open transaction,
//!   or one whose marker is not below the high watermark: Kafka bounds
//!   `firstUncleanableOffset` by the LSO); nothing at or past it is mapped or rewritten;
//! - a batch of an aborted transaction (transactional, of a producer whose aborted
//!   transaction — the log's aborted-transaction entries — spans its offset) maps no key
//!   and is removed wherever the pass rewrites;
//! - a marker (control batch) goes, as Kafka's do, only once no record of its transaction
//!   is left and `delete.retention.ms` has passed since the cleaner first wrote its
//!   segment (the tombstones' horizon: a consumer catching up still meets it). "No
//!   record left" is decided by walking the cleanable log from its start in offset order
//!   ([`MarkerKeeper`]): a transactional batch of a producer with a record kept holds its
//!   producer's next marker. So every kept transactional record still meets its marker
//!   on replay, and a replica or a reopened log never finds a transaction left open.
//!   Only the first round of a pass decides (the merging round does not walk every
//!   segment); the `.txnindex` entries of removed aborts stay (they name no record).

use super::offset_map::OffsetMap;
use crate::batch::BatchHeader;
use crate::batch_filter::{filter_batch, for_each_record, Filtered};
use crate::checkpoint;
use crate::error::StorageError;
use crate::file_cache::{Access, FileCache, SegmentFile};
use crate::file_scan::{self, ScanEnd};
use crate::fs::{Disk, Fs};
use crate::offset_index::{self, IndexEntry, OffsetIndex};
use crate::partition_log::{PartitionLog, SealedSegment};
use crate::segment::{
    self, Segment, CLEANED_AT_SUFFIX, INDEX_SUFFIX, LOG_SUFFIX, TIME_INDEX_SUFFIX, TXN_INDEX_SUFFIX,
};
use crate::segment_swap::{complete_swap, covers_file, suffixed, CLEANED, SWAP};
use crate::time_index::{self, TimeEntry, TimeIndex};
use crate::txn_index::{self, AbortedTxn, AbortedTxns};
use std::collections::HashMap;
use std::io::Write;
use std::path::{Path, PathBuf};
use std::rc::Rc;

/// Where the first offset not yet compacted is kept (named in `checkpoint`, beside the
/// log start, because truncating a log lowers it too).
pub use crate::checkpoint::CLEANER_CHECKPOINT;

/// Output buffered before it is written to the cleaned file.
pub const OUTPUT_CHUNK_BYTES: usize = 1 << 20;

/// Input one scan step handles before the pass yields, writes out and is throttled: the
/// longest the cleaner keeps the core without a break is the time to filter this much.
const INPUT_STEP_BYTES: u64 = 1 << 20;

thread_local! {
    /// This shard's cleaner I/O budget, shared by every pass on the shard.
    static THROTTLE: std::cell::RefCell<Throttle> = std::cell::RefCell::new(Throttle::default());
}

/// Limits the cleaner's reads plus writes on this shard to `bytes_per_second` (Kafka's
/// `log.cleaner.io.max.bytes.per.second`); `None`: unlimited.
pub fn set_io_limit(bytes_per_second: Option<u64>) {
    THROTTLE.with(|t| t.borrow_mut().rate = bytes_per_second.map(|r| r.max(1) as f64));
}

/// A byte-rate limit over a window that restarts after idle time, so a cleaner that was
/// idle gets at most one second of burst.
#[derive(Debug, Default)]
struct Throttle {
    rate: Option<f64>,
    window: Option<(std::time::Instant, f64)>,
}

/// Accounts `bytes` of cleaner I/O and sleeps as long as the rate requires.
async fn throttle(bytes: u64) {
    let pause = THROTTLE.with(|t| {
        let mut t = t.borrow_mut();
        let rate = t.rate?;
        let now = std::time::Instant::now();
        let (start, done) = match t.window {
            Some((start, done)) if now.duration_since(start).as_secs_f64() < done / rate + 1.0 => {
                (start, done)
            }
            _ => (now, 0.0),
        };
        let done = done + bytes as f64;
        t.window = Some((start, done));
        let due = std::time::Duration::from_secs_f64(done / rate);
        due.checked_sub(now.duration_since(start))
    });
    if let Some(pause) = pause {
        glommio::timer::sleep(pause).await;
    }
}

/// What one pass did.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct CleanStats {
    pub segments_rewritten: usize,
    pub bytes_before: u64,
    pub bytes_after: u64,
    pub records_removed: u64,
    pub first_dirty: i64,
    /// The new first dirty offset (the checkpoint written).
    pub map_end: i64,
}

/// Where a test wants a pass to stop as if the process died there.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum CrashPoint {
    /// After the `.cleaned` files of the first rewritten segment are written and synced.
    AfterCleaned,
    /// After the first segment's files are renamed to `.swap`.
    AfterSwapFiles,
    /// After the first segment's index files are renamed over the originals, before its log.
    MidSwap,
}

fn err(path: &Path, e: impl std::fmt::Display) -> StorageError {
    StorageError::new(path.display(), e)
}

/// Runs a pass if one is due. `Ok(None)` when nothing was due.
///
/// `upper_bound` is the owner's high watermark: only segments that end at or below it
/// are cleaned. A record above it may still be cut by a truncation (a replica whose log
/// diverged from its new leader's), and compacting it first would remove the committed
/// record it supersedes, which nothing would bring back.
pub async fn clean_if_due(
    log: &PartitionLog,
    memory_bytes: usize,
    now_ms: i64,
    upper_bound: i64,
) -> Result<Option<CleanStats>, StorageError> {
    clean(log, memory_bytes, now_ms, upper_bound, false, None).await
}

/// One pass, over segments that end at or below `upper_bound` (see [`clean_if_due`]).
/// `force` skips the dirty-ratio check (tests, and `__consumer_offsets` callers that
/// want it now); `crash` stops early as a crash would.
pub async fn clean(
    log: &PartitionLog,
    memory_bytes: usize,
    now_ms: i64,
    upper_bound: i64,
    force: bool,
    crash: Option<CrashPoint>,
) -> Result<Option<CleanStats>, StorageError> {
    let config = log.config();
    if !config.cleanup.compact || log.is_closing() {
        return Ok(None);
    }
    let dir = log.dir().to_path_buf();
    // An undecided transaction's records must not supersede anything (module doc):
    // the cleanable log ends at the first unstable offset too.
    let upper_bound = log
        .first_unstable_offset(upper_bound)
        .map_or(upper_bound, |f| f.min(upper_bound));
    // From the first look at the segments to the last swap, none of them is deleted:
    // retention runs in this same task, and DeleteRecords defers its deletions to the
    // next retention round while the hold lasts.
    let _hold = log.hold_segments();
    let lag_cut = now_ms.saturating_sub(config.min_compaction_lag_ms);
    let mut cleanable: Vec<SealedSegment> = log
        .sealed_segments()
        .into_iter()
        .take_while(|s| s.max_timestamp_ms <= lag_cut && s.next_base <= upper_bound)
        .collect();
    let Some(last) = cleanable.last() else {
        return Ok(None);
    };
    let cleanable_end = last.next_base;
    assert!(
        cleanable_end <= upper_bound,
        "nothing past the bound is cleanable"
    );
    // Every transaction aborted that began below the cleanable end (its marker is below
    // the first unstable offset, so below the cleanable end too, or past it: either way
    // its records here are never to be read).
    let aborted =
        AbortedRanges::new(&log.aborted_transactions(log.log_start_offset(), cleanable_end));
    let first_dirty = read_checkpoint(log.files().disk().fs(), &dir)?
        .unwrap_or(0)
        .max(log.log_start_offset());
    // Tombstones already in the clean part expire with time alone: a pass is due when
    // the oldest one kept may have passed `delete.retention.ms`, new data or not.
    let delete_horizon = now_ms.saturating_sub(config.delete_retention_ms);
    let tombstones_due = log.oldest_kept_tombstone_ms() < delete_horizon;
    if first_dirty >= cleanable_end && !tombstones_due {
        return Ok(None);
    }
    let dirty_bytes: u64 = cleanable
        .iter()
        .filter(|s| s.next_base > first_dirty)
        .map(|s| s.size)
        .sum();
    let total_bytes: u64 = cleanable.iter().map(|s| s.size).sum();
    let first_dirty_segment = cleanable.iter().find(|s| s.next_base > first_dirty);
    let overdue = first_dirty_segment
        .is_some_and(|s| s.max_timestamp_ms < now_ms.saturating_sub(config.max_compaction_lag_ms));
    let ratio = dirty_bytes as f64 / total_bytes.max(1) as f64;
    if !force
        && !tombstones_due
        && dirty_bytes > 0
        && ratio < config.min_cleanable_dirty_ratio
        && !overdue
    {
        return Ok(None);
    }

    // 2. Map the dirty part.
    let mut map = OffsetMap::with_memory(memory_bytes);
    let mut map_end = cleanable_end;
    'segments: for seg in cleanable.iter().filter(|s| s.next_base > first_dirty) {
        let mut pos = 0u64;
        while pos < seg.size {
            let mut full_at: Option<i64> = None;
            let mut failure = None;
            let mut resume = None;
            let step_end = pos + INPUT_STEP_BYTES;
            let file = seg
                .file
                .open()
                .await
                .map_err(|e| err(&seg.file.path(), e))?;
            let (_, end) = file_scan::scan(&file, pos, seg.size, false, |h, at, bytes| {
                if at >= step_end {
                    resume = Some(at);
                    return false;
                }
                if h.last_offset() < first_dirty || h.is_control() || aborted.holds(h) {
                    // An aborted record supersedes nothing: it maps no key.
                    return true;
                }
                let count = usize::try_from(h.record_count).unwrap_or(0);
                if !map.is_empty() && !map.has_room_for(count) {
                    full_at = Some(h.base_offset);
                    return false;
                }
                // A batch whose records cannot be read (its compressed payload is bad)
                // maps no key; the rewrite keeps it as it is.
                let mut keys = Vec::new();
                match for_each_record(bytes, |r| keys.push((r.key.map(<[u8]>::to_vec), r.offset))) {
                    Ok(()) => {
                        for (key, offset) in keys {
                            if let Some(k) = key {
                                map.put(&k, offset);
                            }
                        }
                    }
                    Err(e) => failure = Some(e),
                }
                true
            })
            .await
            .map_err(|e| err(&dir, e))?;
            if let Some(e) = failure {
                tracing::warn!(dir = %dir.display(), segment = seg.base_offset, error = %e, "a batch with unreadable records is kept as it is");
            }
            if let ScanEnd::Invalid { position, reason } = end {
                return Err(err(
                    &dir,
                    format!("segment {} at {position}: {reason}", seg.base_offset),
                ));
            }
            if let Some(at) = full_at {
                map_end = at;
                break 'segments;
            }
            let next = resume.unwrap_or(seg.size);
            throttle(next - pos).await;
            pos = next;
            glommio::yield_if_needed().await;
        }
    }

    // 3-4. Rewrite and swap every cleanable segment that starts below the map's end.
    let mut stats = CleanStats {
        first_dirty,
        map_end,
        ..Default::default()
    };
    let oldest_tombstone = std::cell::Cell::new(i64::MAX);
    // A tombstone goes once `delete.retention.ms` has passed since the cleaner first
    // wrote (or read) the segment holding it (Kafka's delete horizon), not by its own
    // timestamp: a consumer catching up gets that long to see every delete, whatever
    // clock the producer stamped it with.
    let keep = |h: &BatchHeader,
                offset: i64,
                key: Option<&[u8]>,
                tombstone: bool,
                cleaned_at: Option<i64>| {
        if aborted.holds(h) {
            return false; // never read by anyone: removed wherever it is
        }
        if offset >= map_end {
            return true;
        }
        let Some(key) = key else {
            return false; // a compacted log has no use for records without a key
        };
        let latest = !matches!(map.get(key), Some(m) if offset < m);
        let expired = cleaned_at.is_some_and(|c| c < delete_horizon);
        let kept = latest && !(tombstone && expired);
        if kept && tombstone {
            let since = cleaned_at.unwrap_or(now_ms);
            oldest_tombstone.set(oldest_tombstone.get().min(since));
        }
        kept
    };
    // Groups are sized by the segments as they are before cleaning, so a first round
    // can leave a run of small (even empty) cleaned segments; a second round merges
    // those. Filtering is idempotent: what the first round kept, the second keeps.
    let mut tombstones_seen = i64::MAX;
    for round in 0..2 {
        oldest_tombstone.set(i64::MAX);
        let markers = MarkerKeeper {
            may_remove: round == 0,
            delete_horizon,
            now_ms,
            holding: std::cell::RefCell::new(std::collections::HashSet::new()),
            oldest_kept: &oldest_tombstone,
        };
        let current = if round == 0 {
            std::mem::take(&mut cleanable)
        } else {
            log.sealed_segments()
        };
        let to_clean: Vec<&SealedSegment> =
            current.iter().filter(|s| s.base_offset < map_end).collect();
        for group in group_by_size(&to_clean, config.segment_bytes) {
            if round == 1 && group.len() < 2 {
                continue;
            }
            if log.is_closing() {
                // Deleted (or shutting down) meanwhile: its directory is not ours now.
                return Err(err(&dir, "the log was closed during compaction"));
            }
            let outcome = rewrite_group(
                &dir,
                &log.files(),
                &group,
                config.index_interval_bytes,
                &keep,
                &markers,
                crash,
            )
            .await?;
            if outcome.is_none() {
                // Read, nothing to change: its delete horizon starts now all the same.
                for seg in group.iter().filter(|s| s.cleaned_at_ms.is_none()) {
                    let path = segment::file_path(&dir, seg.base_offset, CLEANED_AT_SUFFIX);
                    let (p, d) = (path.clone(), dir.clone());
                    log.files()
                        .disk()
                        .run(move |fs| write_small_file(fs, &d, &p, now_ms))
                        .await
                        .map_err(|e| err(&path, e))?;
                    log.mark_cleaned(seg.base_offset, now_ms);
                }
            }
            if let Some(out) = outcome {
                stats.segments_rewritten += group.len();
                stats.bytes_before += group.iter().map(|s| s.size).sum::<u64>();
                stats.bytes_after += out.size;
                stats.records_removed += out.removed;
                if crash.is_some() {
                    return Ok(Some(stats));
                }
                let files: Vec<_> = group
                    .iter()
                    .map(|s| (s.base_offset, s.file.clone()))
                    .collect();
                if !log.swap_segments(&files, out.segment) {
                    // Only a closed (deleted) log lets held segments go: stop here.
                    return Err(err(&dir, "the log was closed during compaction"));
                }
            }
            glommio::yield_if_needed().await;
        }
        if round == 0 {
            tombstones_seen = oldest_tombstone.get();
        }
    }
    oldest_tombstone.set(tombstones_seen);
    log.set_oldest_kept_tombstone_ms(oldest_tombstone.get());
    // A tombstone-only pass (nothing dirty) never moves the checkpoint back.
    let checkpoint = map_end.max(first_dirty);
    stats.map_end = checkpoint;
    let d = dir.clone();
    log.files()
        .disk()
        .run(move |fs| write_checkpoint(fs, &d, checkpoint))
        .await
        .map_err(|e| err(&dir, e))?;
    Ok(Some(stats))
}

/// Which markers a pass keeps (module doc), fed every batch of the cleanable log in
/// offset order from its start.
struct MarkerKeeper<'a> {
    /// Whether markers may go in this round at all.
    may_remove: bool,
    delete_horizon: i64,
    /// The pass's clock (also the rewrite's: a new segment's delete horizon starts here).
    now_ms: i64,
    /// Producers with a transactional record kept since their last marker.
    holding: std::cell::RefCell<std::collections::HashSet<i64>>,
    /// The oldest delete horizon start of what is kept only until its horizon passes
    /// (shared with the tombstones: a pass is due when it expires).
    oldest_kept: &'a std::cell::Cell<i64>,
}

impl MarkerKeeper<'_> {
    /// A data batch was filtered: `kept` of its records stay.
    fn data(&self, h: &BatchHeader, kept: bool) {
        if kept && h.is_transactional() {
            self.holding.borrow_mut().insert(h.producer_id);
        }
    }

    /// Whether the marker `h` in a segment first cleaned at `cleaned_at` stays.
    fn keep(&self, h: &BatchHeader, bytes: &[u8], cleaned_at: Option<i64>) -> bool {
        let holds_records = self.holding.borrow_mut().remove(&h.producer_id);
        if !self.may_remove || holds_records || crate::txn_marker::parse(h, bytes).is_none() {
            return true;
        }
        let expired = cleaned_at.is_some_and(|c| c < self.delete_horizon);
        if !expired {
            let since = cleaned_at.unwrap_or(self.now_ms);
            self.oldest_kept.set(self.oldest_kept.get().min(since));
        }
        !expired
    }
}

/// The aborted transactions of the cleanable log, by producer: each one's
/// `[first_offset, marker offset)` ranges in offset order. They never overlap: a
/// producer has at most one transaction open in a partition at a time.
struct AbortedRanges {
    by_producer: HashMap<i64, Vec<(i64, i64)>>,
}

impl AbortedRanges {
    /// From entries in marker order (as the log keeps them).
    fn new(entries: &[AbortedTxn]) -> AbortedRanges {
        let mut by_producer: HashMap<i64, Vec<(i64, i64)>> = HashMap::new();
        for e in entries {
            by_producer
                .entry(e.producer_id)
                .or_default()
                .push((e.first_offset, e.last_offset));
        }
        // Marker order is already first-offset order for one producer (one transaction
        // open at a time); sorted all the same, since the entries were read from disk.
        for ranges in by_producer.values_mut() {
            ranges.sort_unstable();
        }
        AbortedRanges { by_producer }
    }

    /// Whether `h` is a data batch of an aborted transaction.
    fn holds(&self, h: &BatchHeader) -> bool {
        if !h.is_transactional() || h.is_control() {
            return false;
        }
        let Some(ranges) = self.by_producer.get(&h.producer_id) else {
            return false;
        };
        let after = ranges.partition_point(|(first, _)| *first <= h.base_offset);
        after
            .checked_sub(1)
            .and_then(|i| ranges.get(i))
            .is_some_and(|(_, marker)| h.base_offset < *marker)
    }
}

struct Rewritten {
    segment: Segment,
    size: u64,
    removed: u64,
}

/// A file written in chunks from the blocking pool (the cleaned copies are written with
/// ordinary buffered I/O and synced once: they are not on any latency path), or at once
/// on the simulator's disk.
struct BlockingWriter {
    file: Option<WriterFile>,
    path: PathBuf,
    /// Bytes written so far (the offset of the next chunk).
    written: u64,
}

/// A [`BlockingWriter`]'s file: moved to the blocking pool for each call on the kernel's
/// disk, used in place in memory.
enum WriterFile {
    Kernel(std::fs::File),
    Memory(Box<dyn crate::fs::FsFile>),
}

/// Starts writeback of a chunk just written (`sync_file_range(SYNC_FILE_RANGE_WRITE)`),
/// without waiting for it: the cleaned file goes to the disk as it is produced instead of
/// in one burst at the final `fsync`, a burst that would queue ahead of the produce
/// path's `fdatasync`s (kernel-notes.md, "Retention and compaction"). Best effort.
fn start_writeback(file: &std::fs::File, offset: u64, len: u64) {
    use std::os::fd::AsRawFd;
    let (Ok(offset), Ok(len)) = (i64::try_from(offset), i64::try_from(len)) else {
        return;
    };
    // SAFETY: a plain syscall on an open descriptor we own; no memory is passed.
    let _ = unsafe {
        libc::sync_file_range(file.as_raw_fd(), offset, len, libc::SYNC_FILE_RANGE_WRITE)
    };
}

impl BlockingWriter {
    async fn create(disk: &Disk, path: PathBuf) -> Result<BlockingWriter, StorageError> {
        let file = match disk {
            Disk::Kernel => {
                let p = path.clone();
                glommio::executor()
                    .spawn_blocking(move || std::fs::File::create(&p))
                    .await
                    .map(WriterFile::Kernel)
            }
            Disk::Memory(fs) => fs.create(&path).map(WriterFile::Memory),
        }
        .map_err(|e| err(&path, e))?;
        Ok(BlockingWriter {
            file: Some(file),
            path,
            written: 0,
        })
    }

    async fn write(&mut self, chunk: Vec<u8>) -> Result<(), StorageError> {
        let Some(file) = self.file.take() else {
            return Err(err(&self.path, "writer already failed"));
        };
        let offset = self.written;
        let len = chunk.len();
        let file = match file {
            WriterFile::Kernel(mut file) => glommio::executor()
                .spawn_blocking(move || {
                    file.write_all(&chunk)?;
                    start_writeback(&file, offset, len as u64);
                    Ok::<_, std::io::Error>(file)
                })
                .await
                .map(WriterFile::Kernel),
            WriterFile::Memory(mut file) => file
                .write_all_at(&chunk, offset)
                .map(|()| WriterFile::Memory(file)),
        }
        .map_err(|e| err(&self.path, e))?;
        self.written += len as u64;
        self.file = Some(file);
        Ok(())
    }

    async fn sync(mut self) -> Result<(), StorageError> {
        let Some(file) = self.file.take() else {
            return Err(err(&self.path, "writer already failed"));
        };
        match file {
            WriterFile::Kernel(file) => {
                glommio::executor()
                    .spawn_blocking(move || file.sync_all())
                    .await
            }
            WriterFile::Memory(mut file) => file.sync_all(),
        }
        .map_err(|e| err(&self.path, e))
    }
}

/// Consecutive segments whose sizes add up to at most `segment_bytes` (and whose
/// offsets fit the 32-bit relative offsets of one index) form one group: the cleaner
/// writes each group as one segment, so compaction also merges small segments.
fn group_by_size<'a>(
    segments: &[&'a SealedSegment],
    segment_bytes: u64,
) -> Vec<Vec<&'a SealedSegment>> {
    let mut groups: Vec<Vec<&SealedSegment>> = Vec::new();
    let mut size = 0u64;
    for seg in segments {
        let fits = groups.last().and_then(|g| g.first()).is_some_and(|first| {
            size + seg.size <= segment_bytes
                && seg.next_base - 1 - first.base_offset <= i64::from(i32::MAX)
        });
        match groups.last_mut() {
            Some(g) if fits => {
                g.push(seg);
                size += seg.size;
            }
            _ => {
                groups.push(vec![seg]);
                size = seg.size;
            }
        }
    }
    groups
}

/// Writes the cleaned copy of `group` as one segment named by its first base offset and
/// swaps it in on disk (see the module doc). `None` when the group is one segment in
/// which every batch is kept as it is (nothing written).
async fn rewrite_group(
    dir: &Path,
    files: &Rc<FileCache>,
    group: &[&SealedSegment],
    index_interval_bytes: u32,
    keep: &impl Fn(&BatchHeader, i64, Option<&[u8]>, bool, Option<i64>) -> bool,
    markers: &MarkerKeeper<'_>,
    crash: Option<CrashPoint>,
) -> Result<Option<Rewritten>, StorageError> {
    let now_ms = markers.now_ms;
    let (Some(first), Some(last)) = (group.first(), group.last()) else {
        return Ok(None);
    };
    let base = first.base_offset;
    let log_path = segment::file_path(dir, base, LOG_SUFFIX);
    let index_path = segment::file_path(dir, base, INDEX_SUFFIX);
    let time_path = segment::file_path(dir, base, TIME_INDEX_SUFFIX);
    let covers_path = covers_file(dir, base);
    let cleaned_at_path = segment::file_path(dir, base, CLEANED_AT_SUFFIX);
    // The merged segment's delete horizon starts at the latest first-cleaning of its
    // members (now, if any is new): tombstones may wait longer, never less.
    let cleaned_at = group
        .iter()
        .map(|s| s.cleaned_at_ms)
        .collect::<Option<Vec<i64>>>()
        .and_then(|v| v.into_iter().max())
        .unwrap_or(now_ms);
    let mut writer: Option<BlockingWriter> = None;
    let mut out: Vec<u8> = Vec::new();
    let mut written: u64 = 0; // bytes of the cleaned log so far (flushed + buffered)
    let mut index = OffsetIndex::new(base);
    let mut time = TimeIndex::new(base);
    let mut bytes_since_index: u64 = 0;
    let mut max_ts = i64::MIN;
    let mut last_kept_base = base;
    let mut removed: u64 = 0;
    let mut changed = group.len() > 1;
    for seg in group {
        let mut pos: u64 = 0;
        while pos < seg.size {
            let mut resume = None;
            let mut failure = None;
            let step_end = pos + INPUT_STEP_BYTES;
            let file = seg
                .file
                .open()
                .await
                .map_err(|e| err(&seg.file.path(), e))?;
            let (_, end) = file_scan::scan(&file, pos, seg.size, false, |h, at, bytes| {
                if at >= step_end {
                    resume = Some(at);
                    return false;
                }
                let mut dropped = 0u64;
                let filtered = if h.is_control() {
                    if markers.keep(h, bytes, seg.cleaned_at_ms) {
                        Ok(Filtered::Unchanged)
                    } else {
                        dropped += 1;
                        Ok(Filtered::Empty)
                    }
                } else {
                    let f = filter_batch(bytes, |r| {
                        let k = keep(h, r.offset, r.key, r.is_tombstone, seg.cleaned_at_ms);
                        dropped += u64::from(!k);
                        k
                    });
                    // Unreadable records are kept as they are (below).
                    markers.data(h, !matches!(f, Ok(Filtered::Empty)));
                    f
                };
                let kept: Option<&[u8]> = match &filtered {
                    Ok(Filtered::Unchanged) => Some(bytes),
                    Ok(Filtered::Empty) => None,
                    Ok(Filtered::Rewritten(v)) => Some(v.as_slice()),
                    Err(e) => {
                        // Unreadable records (a bad compressed payload that passed the
                        // produce-time CRC check): keep the batch rather than fail every
                        // pass of this log from now on.
                        failure = Some(format!("segment {} batch at {at}: {e}", seg.base_offset));
                        Some(bytes)
                    }
                };
                removed += dropped;
                changed |= matches!(filtered, Ok(Filtered::Empty | Filtered::Rewritten(_)));
                if let Some(b) = kept {
                    last_kept_base = h.base_offset;
                    if bytes_since_index >= u64::from(index_interval_bytes) && written > 0 {
                        index.append(h.base_offset, written as u32);
                        bytes_since_index = 0;
                    }
                    // The kept batch's own max timestamp (a rewrite may lower it).
                    let ts = BatchHeader::parse(b).map_or(h.max_timestamp, |k| k.max_timestamp);
                    if ts > max_ts {
                        max_ts = ts;
                        time.append(ts, h.base_offset);
                    }
                    out.extend_from_slice(b);
                    written += b.len() as u64;
                    bytes_since_index += b.len() as u64;
                }
                true
            })
            .await
            .map_err(|e| err(dir, e))?;
            if let Some(f) = failure {
                tracing::warn!(dir = %dir.display(), error = %f, "a batch with unreadable records is kept as it is");
            }
            if let ScanEnd::Invalid { position, reason } = end {
                return Err(err(
                    &log_path,
                    format!("segment {} at {position}: {reason}", seg.base_offset),
                ));
            }
            let flushed = if resume.is_some() && out.len() >= OUTPUT_CHUNK_BYTES {
                let w = match &mut writer {
                    Some(w) => w,
                    None => writer.insert(
                        BlockingWriter::create(files.disk(), suffixed(&log_path, CLEANED)).await?,
                    ),
                };
                let n = out.len() as u64;
                w.write(std::mem::take(&mut out)).await?;
                n
            } else {
                0
            };
            let next = resume.unwrap_or(seg.size);
            throttle(next - pos + flushed).await;
            pos = next;
            if resume.is_none() {
                break;
            }
            glommio::yield_if_needed().await;
        }
    }
    if !changed {
        if writer.is_some() {
            let _ = files.disk().fs().remove_file(&suffixed(&log_path, CLEANED));
        }
        return Ok(None);
    }
    // The group's newest timestamp goes into the time index even if its record was
    // removed: retention ages the cleaned segment as it aged the originals, before and
    // after a restart (the in-memory value below is the same).
    let group_max = group
        .iter()
        .map(|s| s.max_timestamp_ms)
        .max()
        .unwrap_or(i64::MIN);
    if group_max > max_ts {
        time.append(group_max, last_kept_base);
    }
    let mut log_writer = match writer {
        Some(w) => w,
        None => BlockingWriter::create(files.disk(), suffixed(&log_path, CLEANED)).await?,
    };
    if !out.is_empty() {
        log_writer.write(std::mem::take(&mut out)).await?;
    }
    log_writer.sync().await?;
    for (path, bytes) in [
        (&index_path, encode_index(&index)),
        (&time_path, encode_time_index(&time)),
        (&covers_path, format!("{}\n", last.next_base).into_bytes()),
        (&cleaned_at_path, format!("{cleaned_at}\n").into_bytes()),
    ] {
        let mut w = BlockingWriter::create(files.disk(), suffixed(path, CLEANED)).await?;
        w.write(bytes).await?;
        w.sync().await?;
    }
    // The group's aborted transactions stay with the merged segment: a marker the
    // cleaner keeps still needs its entry, and one it removed is harmless to keep.
    let txn_path = segment::file_path(dir, base, TXN_INDEX_SUFFIX);
    let mut aborted = AbortedTxns::new();
    for seg in group {
        aborted.extend(
            txn_index::read(files.disk().fs(), dir, seg.base_offset).map_err(|e| err(dir, e))?,
        );
    }
    let aborted = aborted.in_range(base, last.next_base).to_vec();
    if !aborted.is_empty() {
        let mut w = BlockingWriter::create(files.disk(), suffixed(&txn_path, CLEANED)).await?;
        w.write(txn_index::encode(&aborted)).await?;
        w.sync().await?;
    }
    let result = Rewritten {
        segment: Segment {
            base_offset: base,
            file: first.file.clone(),
            size: written,
            index,
            time_index: time,
            // The group's newest timestamp: retention ages the segment as before, even
            // if the newest records were the ones removed.
            max_timestamp_ms: group
                .iter()
                .map(|s| s.max_timestamp_ms)
                .max()
                .unwrap_or(i64::MIN),
            cleaned_at_ms: Some(cleaned_at),
        },
        size: written,
        removed,
    };
    if crash == Some(CrashPoint::AfterCleaned) {
        return Ok(Some(result));
    }
    // `.cleaned` → `.swap`, the log last: a `.log.swap` means the swap is committed.
    // Then the other members go, and the swap files replace the first member's.
    let d = dir.to_path_buf();
    let swap_set = [
        covers_path.clone(),
        cleaned_at_path.clone(),
        index_path.clone(),
        time_path.clone(),
        log_path.clone(),
    ];
    let txn_swap = (!aborted.is_empty()).then(|| txn_path.clone());
    let others: Vec<i64> = group.iter().skip(1).map(|s| s.base_offset).collect();
    // The names are about to mean the cleaned copy (or nothing): whoever still reads the
    // old segments through their handles keeps reading the old files.
    for seg in group {
        seg.file.pin().await.map_err(|e| err(&seg.file.path(), e))?;
    }
    let stop = crash;
    files
        .disk()
        .run(move |fs| -> std::io::Result<()> {
            // Everything but the log first, made durable, then the log (the commit
            // point): a durable `.log.swap` implies durable companions.
            let [covers, cleaned_at, index, time, log_file] = &swap_set;
            for p in [covers, cleaned_at, index, time]
                .into_iter()
                .chain(txn_swap.as_ref())
            {
                fs.rename(&suffixed(p, CLEANED), &suffixed(p, SWAP))?;
            }
            fs.sync_dir(&d)?;
            fs.rename(&suffixed(log_file, CLEANED), &suffixed(log_file, SWAP))?;
            fs.sync_dir(&d)?;
            if stop == Some(CrashPoint::AfterSwapFiles) {
                return Ok(());
            }
            complete_swap(fs, &d, base, &others, stop == Some(CrashPoint::MidSwap))
        })
        .await
        .map_err(|e| err(dir, e))?;
    if crash.is_some() {
        return Ok(Some(result));
    }
    let mut result = result;
    result.segment.file = SegmentFile::new(files, log_path, Access::Existing);
    Ok(Some(result))
}

fn encode_index(index: &OffsetIndex) -> Vec<u8> {
    let mut out = Vec::with_capacity(index.len() * offset_index::ENTRY_BYTES);
    for e in index.entries() {
        offset_index::encode_entry(
            IndexEntry {
                relative_offset: e.relative_offset,
                position: e.position,
            },
            &mut out,
        );
    }
    out
}

fn encode_time_index(index: &TimeIndex) -> Vec<u8> {
    let mut out = Vec::with_capacity(index.len() * time_index::ENTRY_BYTES);
    for e in index.entries() {
        time_index::encode_entry(
            TimeEntry {
                timestamp_ms: e.timestamp_ms,
                relative_offset: e.relative_offset,
            },
            &mut out,
        );
    }
    out
}

/// Writes `value` to `path` in `dir` atomically (`checkpoint::replace_file`).
fn write_small_file(fs: &dyn Fs, dir: &Path, path: &Path, value: i64) -> std::io::Result<()> {
    let name = path
        .file_name()
        .and_then(|n| n.to_str())
        .ok_or_else(|| std::io::Error::other("a small file's name"))?;
    checkpoint::replace_file(fs, dir, name, format!("{value}\n").as_bytes())
}

/// The first offset not yet compacted, if a pass has run.
pub fn read_checkpoint(fs: &dyn Fs, dir: &Path) -> Result<Option<i64>, StorageError> {
    checkpoint::read(fs, dir, CLEANER_CHECKPOINT)
}

fn write_checkpoint(fs: &dyn Fs, dir: &Path, offset: i64) -> std::io::Result<()> {
    checkpoint::write(fs, dir, CLEANER_CHECKPOINT, offset)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::batch_builder::{BatchBuilder, Record};

    fn header(pid: i64, base: i64, transactional: bool, control: bool) -> BatchHeader {
        let mut b = BatchBuilder::new(0).producer(pid, 0, 0);
        if transactional {
            b = b.transactional();
        }
        if control {
            b = b.control();
        }
        b.push(&Record {
            key: Some(b"k"),
            value: None,
            headers: &[],
            timestamp_delta: 0,
        });
        let mut bytes = b.build();
        crate::batch::set_base_offset(&mut bytes, base);
        BatchHeader::parse(&bytes).expect("a built batch parses")
    }

    #[test]
    fn aborted_ranges_hold_the_data_batches_of_aborted_transactions_only() {
        let entry = |pid, first, last| AbortedTxn {
            producer_id: pid,
            first_offset: first,
            last_offset: last,
            last_stable_offset: first,
        };
        let r = AbortedRanges::new(&[entry(1, 10, 20), entry(2, 12, 25), entry(1, 30, 31)]);
        assert!(r.holds(&header(1, 10, true, false)));
        assert!(r.holds(&header(1, 19, true, false)));
        assert!(!r.holds(&header(1, 20, true, true)), "the marker stays");
        assert!(!r.holds(&header(1, 21, true, false)), "between its aborts");
        assert!(r.holds(&header(1, 30, true, false)));
        assert!(
            !r.holds(&header(1, 9, true, false)),
            "before its first abort"
        );
        assert!(r.holds(&header(2, 24, true, false)));
        assert!(!r.holds(&header(3, 15, true, false)), "another producer");
        assert!(!r.holds(&header(1, 15, false, false)), "not transactional");
    }
}
