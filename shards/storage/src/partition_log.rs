//! One partition's log: offset assignment, the group-commit flusher, segment rolls, reads
//! and lookups. Owned by exactly one shard; `!Send` by construction (`Rc`, `RefCell`).
//!
//! Flow of an append:
//! 1. [`PartitionLog::append`] validates every batch, copies the request's records once
//!    into a buffer of its own, writes base offsets and the leader epoch (outside the
//!    CRC) and queues it as *pending* — synchronously, so offsets are assigned in the
//!    order produces reach the shard.
//! 2. The flusher task takes what is pending (a bounded round), rolls segments where
//!    needed, appends the bytes to the active segment through the aligned direct-I/O
//!    appender, adds sparse index entries and writes.
//! 3. It then publishes the new `written_offset` (the high watermark of a single-node
//!    broker), moves the batches into the tail cache and wakes every waiter.
//! 4. The syncer task, beside it, issues one `fdatasync` whenever a waiter or the
//!    durability setting asks for one; it covers everything written when it was issued
//!    (group commit), and writes go on while it runs.
//!
//! Invariants (asserted where cheap):
//! `log_start_offset <= synced_offset <= written_offset <= next_offset`; pending entries
//! are contiguous from `written_offset` to `next_offset`; readers never see offsets at or
//! past `written_offset`; no `RefCell` borrow is held across an `.await`.
//!
//! Retention and DeleteRecords move `log_start_offset` (see `retention`); compaction
//! swaps sealed segments for cleaned copies (see `compaction`). Not here: replication
//! (it builds on `leader_epoch` and the high watermark).

use super::aligned_appender::AlignedAppender;
use super::batch::{self, batches, BatchHeader};
use super::compaction::batch_filter;
use super::config::{CompressionType, Durability, LogConfig, TimestampType};
use super::context::{LogContext, Stage};
use super::error::{AppendError, ReadError, RecordRule, RejectedRecords, StorageError};
use super::file_scan;
use super::offset_index::{self, OffsetIndex};
use super::producer_snapshot;
use super::producer_state::{ProducerBatch, ProducerState, SequenceCheck};
use super::segment::{self, Segment, INDEX_SUFFIX, LOG_SUFFIX, TIME_INDEX_SUFFIX};
use super::tail_cache::{trim_to_whole_batches, CachedBatches, TailCache};
use super::time_index::{self, TimeIndex};
use bytes::{Bytes, BytesMut};
use event_listener::Event;
use glommio::io::{DmaFile, OpenOptions};
use std::cell::RefCell;
use std::collections::{BTreeMap, VecDeque};
use std::path::{Path, PathBuf};
use std::rc::Rc;
use std::sync::Arc;
use std::time::{Duration, Instant};

/// Most bytes one flusher round writes; a larger backlog takes several rounds.
const FLUSH_ROUND_BYTES_MAX: usize = 8 << 20;

/// Segment files grow by `fallocate` in steps of this size, so appends are writes inside
/// the file size: on ext4 an O_DIRECT write that extends the file cannot complete without
/// blocking and io_uring hands it to a kernel worker thread (kernel-notes.md,
/// "Preallocation"). Sealing truncates the unused tail. This is the largest step; the
/// shard gives each log a smaller one when it has many (`set_preallocate_step`), so that
/// preallocated but unwritten space stays bounded per shard.
pub const PREALLOCATE_STEP_BYTES: u64 = 64 << 20;
/// The smallest step a shard hands out.
pub const PREALLOCATE_STEP_MIN_BYTES: u64 = 1 << 20;

/// Suffix added to a deleted segment's files until they are unlinked.
const DELETED_SUFFIX: &str = ".deleted";

/// Where an append stands once queued; the caller waits on it per its `acks`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct AppendTicket {
    pub base_offset: i64,
    /// One past the last offset of the appended batches.
    pub next_offset: i64,
}

/// What an acknowledgement waits for.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum AckLevel {
    /// Written to the segment file (acks=1).
    Leader,
    /// Written and, per the durability setting, synced (acks=all).
    All,
}

#[derive(Debug, Clone)]
pub struct ReadOutcome {
    pub high_watermark: i64,
    pub log_start_offset: i64,
    /// Whole batches starting with the one that contains the requested offset; empty
    /// when the offset is the high watermark.
    pub records: Bytes,
}

struct Pending {
    base_offset: i64,
    next_offset: i64,
    bytes: Bytes,
}

struct LogState {
    log_start_offset: i64,
    next_offset: i64,
    written_offset: i64,
    synced_offset: i64,
    /// One past the highest offset a waiter needs synced.
    sync_wanted: i64,
    pending: VecDeque<Pending>,
    segments: BTreeMap<i64, Segment>,
    /// The active segment's file: what the syncer syncs.
    active_file: Rc<DmaFile>,
    tail: TailCache,
    failure: Option<StorageError>,
    closing: bool,
    closed: bool,
}

/// What the cleaner sees of one sealed segment.
pub(crate) struct SealedSegment {
    pub base_offset: i64,
    /// Base of the segment after it: every offset of this one is below.
    pub next_base: i64,
    pub file: Rc<DmaFile>,
    pub size: u64,
    pub max_timestamp_ms: i64,
    pub cleaned_at_ms: Option<i64>,
}

/// The flusher's own state: the active segment's three appenders.
pub(crate) struct ActiveWriter {
    base_offset: i64,
    log: AlignedAppender,
    index: AlignedAppender,
    time_index: AlignedAppender,
    bytes_since_index: u64,
    last_index_offset: i64,
    max_timestamp_ms: i64,
    opened_at: Instant,
    /// Bytes of the active log file already allocated with `fallocate`.
    preallocated: u64,
}

pub struct PartitionLog {
    dir: PathBuf,
    /// Replaced whole when the topic's configuration changes (`set_config`); borrowed
    /// only briefly, never across an `.await`.
    config: RefCell<LogConfig>,
    state: RefCell<LogState>,
    /// Fired whenever written/synced offsets move, on failure and on close.
    progress: Event,
    /// Wakes the flusher.
    work: Event,
    /// Wakes the syncer.
    sync_work: Event,
    /// `fdatasync`s of the active segment issued by the syncer (group-commit metric).
    syncs: std::cell::Cell<u64>,
    /// Holders of [`SegmentHold`]: while non-zero, no segment is deleted.
    held: std::cell::Cell<usize>,
    /// How far ahead of the written end the active segment is preallocated (a multiple of
    /// 4096 in `[PREALLOCATE_STEP_MIN_BYTES, PREALLOCATE_STEP_BYTES]`).
    preallocate_step: std::cell::Cell<u64>,
    /// Serialises moves of the log start offset (DeleteRecords) and their checkpoints.
    start_moves: glommio::sync::Semaphore,
    /// The cleaner's note of the earliest first-cleaned time of a segment where it kept a
    /// tombstone; `i64::MIN` when unknown (since open), `i64::MAX` when there is none.
    oldest_kept_tombstone_ms: std::cell::Cell<i64>,
    /// Idempotent producers' epochs and last batches; changed only by `append`, in offset
    /// order, and never borrowed across an `.await`.
    producers: RefCell<ProducerState>,
    /// The owner's clock and observer.
    context: LogContext,
}

/// Keeps a log's segments from being deleted while it lives (see `hold_segments`).
pub(crate) struct SegmentHold<'a>(&'a std::cell::Cell<usize>);

impl Drop for SegmentHold<'_> {
    fn drop(&mut self) {
        self.0.set(self.0.get() - 1);
    }
}

fn storage_err(path: &Path, e: impl std::fmt::Display) -> StorageError {
    StorageError::new(path.display(), e)
}

/// Makes sure glommio has probed the device under `dir` for polled I/O with a file that
/// holds data, before any empty file is opened there.
///
/// glommio 0.9 decides once per block device, on the first O_DIRECT open, whether reads
/// may use its polled (IOPOLL) ring, by reading one block of *that* file. If the file is
/// empty the kernel answers that read without touching the device, the probe wrongly
/// concludes "polled I/O works", and every later direct read on that device fails with
/// EOPNOTSUPP on devices without poll queues (virtio here). A fresh partition's first open
/// is an empty segment, so we open a one-block file of our own first.
/// See kernel-notes.md "O_DIRECT".
async fn ensure_io_probe(dir: &Path) -> Result<(), StorageError> {
    thread_local! {
        static PROBED: std::cell::RefCell<std::collections::HashSet<u64>> = Default::default();
    }
    use std::os::unix::fs::MetadataExt;
    let dev = std::fs::metadata(dir)
        .map_err(|e| storage_err(dir, e))?
        .dev();
    if PROBED.with(|p| p.borrow().contains(&dev)) {
        return Ok(());
    }
    let probe = dir.join(".io-probe");
    std::fs::write(&probe, [0u8; 4096]).map_err(|e| storage_err(&probe, e))?;
    let file = OpenOptions::new()
        .read(true)
        .dma_open(&probe)
        .await
        .map_err(|e| storage_err(&probe, e))?;
    let _ = file.close().await;
    let _ = std::fs::remove_file(&probe);
    PROBED.with(|p| p.borrow_mut().insert(dev));
    Ok(())
}

/// Opens an existing file for direct-I/O reads (and the truncation of a torn tail).
async fn open_existing(path: &Path) -> Result<DmaFile, StorageError> {
    OpenOptions::new()
        .read(true)
        .write(true)
        .dma_open(path)
        .await
        .map_err(|e| storage_err(path, e))
}

async fn open_rw(path: &Path) -> Result<DmaFile, StorageError> {
    OpenOptions::new()
        .read(true)
        .write(true)
        .create(true)
        .dma_open(path)
        .await
        .map_err(|e| storage_err(path, e))
}

async fn read_whole(file: &DmaFile, path: &Path) -> Result<Vec<u8>, StorageError> {
    let len = file.file_size().await.map_err(|e| storage_err(path, e))?;
    if len == 0 {
        return Ok(Vec::new());
    }
    file_scan::read_exact(file, 0, len as usize)
        .await
        .map_err(|e| storage_err(path, e))
}

impl PartitionLog {
    /// Opens (creating if needed) the log in `dir`, recovering the tail of its active
    /// segment, and starts its flusher.
    pub async fn open(
        dir: PathBuf,
        config: LogConfig,
        context: LogContext,
    ) -> Result<Rc<PartitionLog>, StorageError> {
        // Directory creation is a rare metadata operation; std's call is fine here.
        std::fs::create_dir_all(&dir).map_err(|e| storage_err(&dir, e))?;
        ensure_io_probe(&dir).await?;
        // Finish (or undo) a compaction swap a crash interrupted before listing segments.
        super::compaction::cleaner::recover_swaps(&dir)?;
        let mut bases = Vec::new();
        for entry in std::fs::read_dir(&dir).map_err(|e| storage_err(&dir, e))? {
            let entry = entry.map_err(|e| storage_err(&dir, e))?;
            let name = entry.file_name();
            let name = name.to_str().unwrap_or_default();
            if name.ends_with(DELETED_SUFFIX) {
                // Deleted before a restart but not yet unlinked: nobody reads it now.
                let _ = std::fs::remove_file(entry.path());
                continue;
            }
            if let Some(base) = segment::parse_log_file_name(name) {
                bases.push(base);
            }
        }
        bases.sort_unstable();
        if bases.is_empty() {
            bases.push(0);
        }
        let mut segments = BTreeMap::new();
        let last_base = *bases.last().unwrap_or(&0);
        for (i, &base) in bases.iter().enumerate() {
            if base == last_base {
                break;
            }
            let next_base = bases.get(i + 1).copied().unwrap_or(base);
            segments.insert(base, Self::open_sealed(&dir, base, next_base).await?);
        }
        let (active_segment, writer, next_offset) =
            super::recovery::recover_active(&dir, last_base, &config).await?;
        let active_file = active_segment.file.clone();
        segments.insert(last_base, active_segment);
        // DeleteRecords may have moved the start inside the first segment.
        let checkpoint = super::checkpoint::read(&dir, super::retention::LOG_START_CHECKPOINT)?
            .unwrap_or(i64::MIN);
        if checkpoint > next_offset {
            // The start was moved past what survived a power loss (DeleteRecords of
            // written but unsynced offsets). Offsets from the recovered end will be
            // assigned again to new records: the checkpoint must not hide them later.
            super::checkpoint::write(&dir, super::retention::LOG_START_CHECKPOINT, next_offset)
                .map_err(|e| storage_err(&dir, e))?;
        }
        let log_start_offset = (*bases.first().unwrap_or(&0))
            .max(checkpoint)
            .min(next_offset);
        let producers = rebuild_producers(&dir, &segments, next_offset, context.now_ms()).await?;
        let log = Rc::new(PartitionLog {
            config: RefCell::new(config.clone()),
            state: RefCell::new(LogState {
                log_start_offset,
                next_offset,
                written_offset: next_offset,
                synced_offset: next_offset,
                sync_wanted: next_offset,
                pending: VecDeque::new(),
                segments,
                active_file,
                tail: TailCache::new(config.tail_cache_bytes),
                failure: None,
                closing: false,
                closed: false,
            }),
            progress: Event::new(),
            work: Event::new(),
            sync_work: Event::new(),
            syncs: std::cell::Cell::new(0),
            held: std::cell::Cell::new(0),
            preallocate_step: std::cell::Cell::new(PREALLOCATE_STEP_BYTES),
            oldest_kept_tombstone_ms: std::cell::Cell::new(i64::MIN),
            start_moves: glommio::sync::Semaphore::new(1),
            producers: RefCell::new(producers),
            context,
            dir,
        });
        glommio::spawn_local(Self::flusher(log.clone(), writer)).detach();
        glommio::spawn_local(Self::syncer(log.clone())).detach();
        Ok(log)
    }

    async fn open_sealed(dir: &Path, base: i64, next_base: i64) -> Result<Segment, StorageError> {
        let log_path = segment::file_path(dir, base, LOG_SUFFIX);
        let file = open_existing(&log_path).await?;
        let size = file
            .file_size()
            .await
            .map_err(|e| storage_err(&log_path, e))?;
        let index = Self::load_index(dir, base, size).await?;
        let time_index = Self::load_time_index(dir, base, next_base).await?;
        let max_timestamp_ms = time_index.max_timestamp_ms().unwrap_or(i64::MIN);
        let cleaned_at_path = segment::file_path(dir, base, segment::CLEANED_AT_SUFFIX);
        let cleaned_at_ms = std::fs::read_to_string(&cleaned_at_path)
            .ok()
            .and_then(|t| t.trim().parse::<i64>().ok());
        Ok(Segment {
            base_offset: base,
            file: Rc::new(file),
            size,
            index,
            time_index,
            max_timestamp_ms,
            cleaned_at_ms,
        })
    }

    pub(super) async fn load_index(
        dir: &Path,
        base: i64,
        log_len: u64,
    ) -> Result<OffsetIndex, StorageError> {
        let path = segment::file_path(dir, base, INDEX_SUFFIX);
        if !path.exists() {
            return Ok(OffsetIndex::new(base));
        }
        let file = open_existing(&path).await?;
        let bytes = read_whole(&file, &path).await?;
        let _ = file.close().await;
        Ok(OffsetIndex::decode(base, &bytes, log_len))
    }

    pub(super) async fn load_time_index(
        dir: &Path,
        base: i64,
        next_offset: i64,
    ) -> Result<TimeIndex, StorageError> {
        let path = segment::file_path(dir, base, TIME_INDEX_SUFFIX);
        if !path.exists() {
            return Ok(TimeIndex::new(base));
        }
        let file = open_existing(&path).await?;
        let bytes = read_whole(&file, &path).await?;
        let _ = file.close().await;
        Ok(TimeIndex::decode(base, &bytes, next_offset))
    }

    pub fn dir(&self) -> &Path {
        &self.dir
    }

    /// A copy of the log's current settings.
    pub fn config(&self) -> LogConfig {
        self.config.borrow().clone()
    }

    /// Whether the log is closing or closed (its topic is being deleted, or shutdown):
    /// background work must not touch its files any more.
    pub fn is_closing(&self) -> bool {
        self.state.borrow().closing
    }

    /// `min.insync.replicas` of the topic.
    pub fn min_insync_replicas(&self) -> i32 {
        self.config.borrow().min_insync_replicas
    }

    /// Takes new settings (an altered topic config). Appends, rolls, retention and
    /// compaction use them from their next decision on; the tail cache keeps its size.
    pub fn set_config(&self, config: LogConfig) {
        *self.config.borrow_mut() = config;
    }

    /// Sets this partition's share of the shard's tail-cache budget; a smaller share
    /// evicts at once (see `tail_cache.rs` for the invariant).
    pub fn set_tail_cache_budget(&self, bytes: usize) {
        self.state.borrow_mut().tail.set_budget(bytes);
    }

    /// Sets how far ahead the active segment is preallocated (clamped to the allowed
    /// range and rounded down to whole 4 KiB blocks); takes effect at the next extension.
    pub fn set_preallocate_step(&self, bytes: u64) {
        let step = bytes.clamp(PREALLOCATE_STEP_MIN_BYTES, PREALLOCATE_STEP_BYTES) / 4096 * 4096;
        self.preallocate_step.set(step);
    }

    /// Bytes this partition's tail cache holds now.
    pub fn tail_cache_held_bytes(&self) -> usize {
        self.state.borrow().tail.held_bytes()
    }

    pub fn log_start_offset(&self) -> i64 {
        self.state.borrow().log_start_offset
    }

    /// The next offset to be assigned (log end offset).
    pub fn log_end_offset(&self) -> i64 {
        self.state.borrow().next_offset
    }

    /// Offsets below this are written and visible to consumers.
    pub fn high_watermark(&self) -> i64 {
        self.state.borrow().written_offset
    }

    pub fn failure(&self) -> Option<StorageError> {
        self.state.borrow().failure.clone()
    }

    /// How many group-commit `fdatasync`s this log has issued.
    pub fn sync_count(&self) -> u64 {
        self.syncs.get()
    }

    pub fn segment_count(&self) -> usize {
        self.state.borrow().segments.len()
    }

    /// Deletes every sealed segment that lies wholly below `offset` and moves the log
    /// start offset up to the first segment left (it never moves back). The active
    /// segment is never deleted. Returns how many segments went.
    ///
    /// The files are renamed `*.deleted` at once and unlinked `file.delete.delay.ms`
    /// later; a reader that already holds a segment keeps reading it either way (an open
    /// file outlives its name), so a deletion never fails a fetch in flight.
    ///
    /// Crash safety: segments go from the front, so a crash leaves a contiguous log
    /// whose start is the first remaining segment (or the checkpoint, if later);
    /// leftover `*.deleted` files are removed at the next open.
    pub async fn delete_segments_before(&self, offset: i64) -> usize {
        if self.held.get() > 0 || self.state.borrow().closing {
            return 0;
        }
        let doomed: Vec<(i64, Rc<DmaFile>)> = {
            let mut st = self.state.borrow_mut();
            let bases: Vec<i64> = st.segments.keys().copied().collect();
            let mut doomed = Vec::new();
            for pair in bases.windows(2) {
                let (base, next) = (pair[0], pair[1]);
                if next > offset {
                    break;
                }
                if let Some(seg) = st.segments.remove(&base) {
                    doomed.push((base, seg.file));
                }
            }
            if let Some(first) = st.segments.keys().next().copied() {
                st.log_start_offset = st.log_start_offset.max(first);
            }
            assert!(
                st.log_start_offset <= st.next_offset,
                "the log start never passes the log end"
            );
            doomed
        };
        if doomed.is_empty() {
            return 0;
        }
        let mut renamed = Vec::with_capacity(doomed.len() * 3);
        for (base, _file) in &doomed {
            for suffix in [
                LOG_SUFFIX,
                INDEX_SUFFIX,
                TIME_INDEX_SUFFIX,
                segment::CLEANED_AT_SUFFIX,
            ] {
                let path = segment::file_path(&self.dir, *base, suffix);
                let gone = path.with_extension(format!("{suffix}{DELETED_SUFFIX}"));
                match std::fs::rename(&path, &gone) {
                    Ok(()) => renamed.push(gone),
                    Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
                    Err(e) => {
                        tracing::warn!(path = %path.display(), error = %e, "deleting a segment file")
                    }
                }
            }
        }
        let _ = sync_dir(&self.dir).await;
        let delay = self.config.borrow().file_delete_delay_ms.max(0) as u64;
        let unlink = move || {
            for path in renamed {
                match std::fs::remove_file(&path) {
                    // The whole partition was deleted meanwhile.
                    Err(e) if e.kind() != std::io::ErrorKind::NotFound => {
                        tracing::warn!(path = %path.display(), error = %e, "unlinking a deleted segment file")
                    }
                    _ => {}
                }
            }
        };
        if delay == 0 {
            unlink();
        } else {
            glommio::spawn_local(async move {
                glommio::timer::sleep(Duration::from_millis(delay)).await;
                unlink();
            })
            .detach();
        }
        tracing::debug!(dir = %self.dir.display(), segments = doomed.len(), "deleted segments");
        doomed.len()
    }

    /// Sizes and newest timestamps of the segments, oldest first (the last is active).
    pub fn segment_stats(&self) -> Vec<super::retention::SegmentStat> {
        self.state
            .borrow()
            .segments
            .values()
            .map(|s| super::retention::SegmentStat {
                base_offset: s.base_offset,
                size: s.size,
                max_timestamp_ms: s.max_timestamp_ms,
            })
            .collect()
    }

    /// The sealed segments (all but the active one), oldest first, for the cleaner.
    pub(crate) fn sealed_segments(&self) -> Vec<SealedSegment> {
        let st = self.state.borrow();
        let bases: Vec<i64> = st.segments.keys().copied().collect();
        bases
            .windows(2)
            .filter_map(|pair| {
                let seg = st.segments.get(&pair[0])?;
                Some(SealedSegment {
                    base_offset: seg.base_offset,
                    next_base: pair[1],
                    file: seg.file.clone(),
                    size: seg.size,
                    max_timestamp_ms: seg.max_timestamp_ms,
                    cleaned_at_ms: seg.cleaned_at_ms,
                })
            })
            .collect()
    }

    /// Puts the cleaned copy `seg` in place of the sealed segments `replaced` (base
    /// offset and the file the cleaner read, oldest first; `seg` has the first's base),
    /// if they are all still there with those files. Synchronous: a reader sees the old
    /// segments or the new one, never a mix, and readers already holding an old file
    /// keep it.
    pub(crate) fn swap_segments(&self, replaced: &[(i64, Rc<DmaFile>)], seg: Segment) -> bool {
        let mut st = self.state.borrow_mut();
        let active_base = st.segments.keys().next_back().copied();
        let intact = replaced.iter().all(|(base, file)| {
            Some(*base) != active_base
                && st
                    .segments
                    .get(base)
                    .is_some_and(|s| Rc::ptr_eq(&s.file, file))
        });
        if !intact || replaced.first().map(|(b, _)| *b) != Some(seg.base_offset) {
            return false;
        }
        let last = replaced.last().map_or(seg.base_offset, |(b, _)| *b);
        let end = st.segments.range(last + 1..).next().map(|(b, _)| *b);
        for (base, _) in replaced {
            st.segments.remove(base);
        }
        st.segments.insert(seg.base_offset, seg);
        // Cached copies of the replaced batches must not outlive them: a reader would
        // see records compaction removed.
        if let Some(end) = end {
            st.tail.evict_below(end);
        }
        true
    }

    /// Records that the cleaner has read the sealed segment at `base` (its first pass over
    /// it, which left it unchanged) at `at_ms`; the sidecar file is already durable.
    pub(crate) fn mark_cleaned(&self, base: i64, at_ms: i64) {
        if let Some(seg) = self.state.borrow_mut().segments.get_mut(&base) {
            seg.cleaned_at_ms.get_or_insert(at_ms);
        }
    }

    pub(crate) fn oldest_kept_tombstone_ms(&self) -> i64 {
        self.oldest_kept_tombstone_ms.get()
    }

    pub(crate) fn set_oldest_kept_tombstone_ms(&self, ms: i64) {
        self.oldest_kept_tombstone_ms.set(ms);
    }

    /// Holds the sealed segments against deletion until the guard drops (the cleaner
    /// holds it while it rewrites them). Deletions asked for meanwhile happen at the
    /// next retention round; the log start offset still moves at once.
    pub(crate) fn hold_segments(&self) -> SegmentHold<'_> {
        self.held.set(self.held.get() + 1);
        SegmentHold(&self.held)
    }

    /// Bytes of all segments.
    pub fn size_bytes(&self) -> u64 {
        self.state.borrow().segments.values().map(|s| s.size).sum()
    }

    /// Applies `retention.ms` and `retention.bytes` (when `cleanup.policy` includes
    /// delete) as of `now_ms`, and deletes segments left below the log start offset.
    /// Returns how many segments went.
    pub async fn enforce_retention(&self, now_ms: i64) -> usize {
        let config = self.config();
        let stats = self.segment_stats();
        // Segments wholly below the log start (DeleteRecords) go whatever the policy.
        let below_start = self.log_start_offset();
        let cut = if config.cleanup.delete {
            super::retention::retention_cut(
                &stats,
                config.retention_ms,
                config.retention_bytes,
                now_ms,
            )
            .unwrap_or(i64::MIN)
        } else {
            i64::MIN
        };
        self.delete_segments_before(cut.max(below_start)).await
    }

    /// DeleteRecords: moves the log start offset to `offset` (-1: the high watermark),
    /// persists it, and deletes the segments wholly below it. Returns the new log start.
    pub async fn delete_records(&self, offset: i64) -> Result<i64, ReadError> {
        // One move of the start at a time: two requests racing could otherwise leave the
        // smaller offset in the checkpoint while memory holds the larger.
        let _one_at_a_time = self.start_moves.acquire_permit(1).await;
        let (lso, hw) = {
            let st = self.state.borrow();
            if let Some(f) = &st.failure {
                return Err(ReadError::Storage(f.clone()));
            }
            if st.closing {
                return Err(ReadError::Storage(storage_err(
                    &self.dir,
                    "the log is closing",
                )));
            }
            (st.log_start_offset, st.written_offset)
        };
        let target = if offset == -1 { hw } else { offset };
        if target < 0 || target > hw {
            return Err(ReadError::OffsetOutOfRange {
                offset,
                log_start_offset: lso,
                high_watermark: hw,
            });
        }
        if target <= lso {
            return Ok(lso);
        }
        let dir = self.dir.clone();
        glommio::executor()
            .spawn_blocking(move || {
                super::checkpoint::write(&dir, super::retention::LOG_START_CHECKPOINT, target)
            })
            .await
            .map_err(|e| ReadError::Storage(storage_err(&self.dir, e)))?;
        {
            let mut st = self.state.borrow_mut();
            st.log_start_offset = st.log_start_offset.max(target);
        }
        self.delete_segments_before(target).await;
        Ok(self.log_start_offset())
    }

    /// Validates and queues `records` (one or more RecordBatch v2), assigning offsets.
    /// Nothing of the request is queued unless every batch is valid.
    pub fn append(&self, records: &[u8], leader_epoch: i32) -> Result<AppendTicket, AppendError> {
        let now_ms = self.context.now_ms();
        let config = self.config.borrow();
        let mut offsets = 0i64;
        let mut count = 0usize;
        let mut reshape = false;
        let mut producer = None;
        for item in batches(records) {
            let (_, range) = item?;
            let bytes = records.get(range).ok_or(AppendError::Empty)?;
            let header = batch::validate(bytes, config.max_batch_bytes)?;
            offsets += i64::from(header.last_offset_delta) + 1;
            count += 1;
            reshape |= check_topic_rules(&config, &header, bytes, now_ms)?;
            producer = producer.or(ProducerBatch::from_header(&header));
        }
        if count == 0 {
            return Err(AppendError::Empty);
        }
        // Sequences are checked per batch and the produce path sends one batch per
        // partition (as Kafka requires of v3+); a producer's batch among others would have
        // no single answer for a retry.
        if producer.is_some() && count > 1 {
            return Err(AppendError::InvalidBatch(batch::BatchError::InvalidRecord(
                "an idempotent producer's batch must be the only one in its request",
            )));
        }
        if let Some(p) = &producer {
            // Kafka's LogValidator: a producer's batch has a sequence.
            if p.first_seq < 0 {
                return Err(AppendError::InvalidBatch(batch::BatchError::InvalidRecord(
                    "an idempotent producer's batch has a negative base sequence",
                )));
            }
            // A retry of a batch already given offsets is answered with them; nothing is
            // written again. Checked before any state changes, so a refused batch leaves
            // none behind.
            if let SequenceCheck::Duplicate(original) = self.producers.borrow().check(p)? {
                self.context.observer.duplicate_batch();
                return Ok(AppendTicket {
                    base_offset: original.first_offset,
                    next_offset: original.next_offset,
                });
            }
        }
        // The topic wants another codec, or the broker's clock: rebuild the request's
        // batches (a cold path; topics with default settings never take it).
        let reshaped;
        let records = if reshape || config.timestamp_type == TimestampType::LogAppendTime {
            reshaped = reshape_batches(&config, records, now_ms)?;
            &reshaped[..]
        } else {
            records
        };
        let flush_messages = config.flush_messages;
        drop(config);
        let mut st = self.state.borrow_mut();
        if let Some(f) = &st.failure {
            return Err(AppendError::Storage(f.clone()));
        }
        if st.closing {
            return Err(AppendError::Closed);
        }
        // The one copy of the records: the request buffer is shared and immutable.
        let mut copy = BytesMut::from(records);
        let base_offset = st.next_offset;
        let mut next = base_offset;
        let mut pos = 0usize;
        while pos < copy.len() {
            let Some(rest) = copy.get_mut(pos..) else {
                break;
            };
            let Ok(header) = BatchHeader::parse(rest) else {
                break;
            };
            batch::set_base_offset(rest, next);
            batch::set_partition_leader_epoch(rest, leader_epoch);
            next += i64::from(header.last_offset_delta) + 1;
            pos += header.total_len();
        }
        assert_eq!(
            next - base_offset,
            offsets,
            "offsets assigned match the validated batches"
        );
        st.next_offset = next;
        if let Some(p) = &producer {
            let written = st.written_offset;
            self.producers
                .borrow_mut()
                .record(p, base_offset, next, now_ms, written);
        }
        st.pending.push_back(Pending {
            base_offset,
            next_offset: next,
            bytes: copy.freeze(),
        });
        // `flush.messages` holds whatever the acks (acks=0 never waits): an append that
        // leaves that many offsets unsynced asks for a sync now, as Kafka's append path
        // flushes.
        let flush_due = next.saturating_sub(st.synced_offset) >= flush_messages;
        if flush_due {
            st.sync_wanted = st.sync_wanted.max(next);
        }
        drop(st);
        self.work.notify(1);
        if flush_due {
            self.sync_work.notify(1);
        }
        Ok(AppendTicket {
            base_offset,
            next_offset: next,
        })
    }

    /// Whether the produce that got `ticket` is acknowledged only once synced: by the
    /// durability mode, or because it leaves `flush.messages` or more offsets unsynced
    /// (offsets are dense, so offsets count messages).
    fn needs_sync(&self, level: AckLevel, ticket: &AppendTicket) -> bool {
        let config = self.config.borrow();
        let by_mode = matches!(
            (config.durability, level),
            (Durability::Always, _) | (Durability::AckAll, AckLevel::All)
        );
        by_mode
            || ticket
                .next_offset
                .saturating_sub(self.state.borrow().synced_offset)
                >= config.flush_messages
    }

    /// Waits until the appended batches are acknowledged at `level`.
    pub async fn wait(&self, ticket: AppendTicket, level: AckLevel) -> Result<(), AppendError> {
        let sync = self.needs_sync(level, &ticket);
        if sync {
            let mut st = self.state.borrow_mut();
            st.sync_wanted = st.sync_wanted.max(ticket.next_offset);
            drop(st);
            self.sync_work.notify(1);
        }
        loop {
            let listener = self.progress.listen();
            {
                let st = self.state.borrow();
                let done = if sync {
                    st.synced_offset >= ticket.next_offset
                } else {
                    st.written_offset >= ticket.next_offset
                };
                if done {
                    return Ok(());
                }
                if let Some(f) = &st.failure {
                    return Err(AppendError::Storage(f.clone()));
                }
                if st.closed {
                    return Err(AppendError::Closed);
                }
            }
            listener.await;
        }
    }

    /// Waits until the high watermark passes `offset`, the log closes, or `deadline`.
    pub async fn wait_beyond(&self, offset: i64, deadline: Instant) {
        loop {
            let listener = self.progress.listen();
            {
                let st = self.state.borrow();
                if st.written_offset > offset || st.closed || st.failure.is_some() {
                    return;
                }
            }
            let now = Instant::now();
            if now >= deadline {
                return;
            }
            let timeout = glommio::timer::sleep(deadline - now);
            futures_lite::future::or(listener, timeout).await;
        }
    }

    /// Reads whole batches starting with the one containing `offset`, up to `max_bytes`
    /// (at least one batch). Data of at most one segment is returned per call.
    pub async fn read(&self, offset: i64, max_bytes: usize) -> Result<ReadOutcome, ReadError> {
        let mut at = offset;
        loop {
            let (hw, lso, target) = {
                let st = self.state.borrow();
                let hw = st.written_offset;
                let lso = st.log_start_offset;
                if let Some(f) = &st.failure {
                    return Err(ReadError::Storage(f.clone()));
                }
                if at < lso || at > hw {
                    return Err(ReadError::OffsetOutOfRange {
                        offset: at,
                        log_start_offset: lso,
                        high_watermark: hw,
                    });
                }
                if at == hw {
                    return Ok(ReadOutcome {
                        high_watermark: hw,
                        log_start_offset: lso,
                        records: Bytes::new(),
                    });
                }
                if let Some(records) = st.tail.read(at, max_bytes) {
                    return Ok(ReadOutcome {
                        high_watermark: hw,
                        log_start_offset: lso,
                        records,
                    });
                }
                let Some((_, seg)) = st.segments.range(..=at).next_back() else {
                    return Err(ReadError::OffsetOutOfRange {
                        offset: at,
                        log_start_offset: lso,
                        high_watermark: hw,
                    });
                };
                let (_, pos) = seg.index.lookup(at);
                let next_base = st
                    .segments
                    .range(seg.base_offset + 1..)
                    .next()
                    .map(|(b, _)| *b);
                (
                    hw,
                    lso,
                    (seg.file.clone(), u64::from(pos), seg.size, next_base),
                )
            };
            let (file, pos, size, next_base) = target;
            let records = self.read_segment(&file, pos, size, at, max_bytes).await?;
            if !records.is_empty() {
                return Ok(ReadOutcome {
                    high_watermark: hw,
                    log_start_offset: lso,
                    records,
                });
            }
            // `at` lies past this segment's last batch: continue in the next one.
            match next_base {
                Some(b) if b > at => at = b,
                Some(_) | None => {
                    return Ok(ReadOutcome {
                        high_watermark: hw,
                        log_start_offset: lso,
                        records: Bytes::new(),
                    })
                }
            }
        }
    }

    async fn read_segment(
        &self,
        file: &DmaFile,
        start: u64,
        size: u64,
        offset: i64,
        max_bytes: usize,
    ) -> Result<Bytes, ReadError> {
        // Find the position of the batch containing `offset` (a short header scan from
        // the index entry: at most `index_interval_bytes` plus one batch).
        let mut found: Option<(u64, usize)> = None;
        let (_, how) = file_scan::scan(file, start, size, false, |h, pos, _| {
            if h.last_offset() >= offset {
                found = Some((pos, h.total_len()));
                return false;
            }
            true
        })
        .await
        .map_err(|e| ReadError::Storage(storage_err(&self.dir, e)))?;
        let Some((pos, first_len)) = found else {
            if let file_scan::ScanEnd::Invalid { reason, .. } = how {
                // Bytes inside the written log that are not a batch: never answer "no
                // data" (the consumer would refetch the same offset forever).
                return Err(ReadError::Corrupt {
                    offset,
                    source: reason,
                });
            }
            return Ok(Bytes::new());
        };
        let want = (max_bytes.max(first_len) as u64).min(size - pos) as usize;
        let bytes = file_scan::read_exact(file, pos, want)
            .await
            .map_err(|e| ReadError::Storage(storage_err(&self.dir, e)))?;
        let records = trim_to_whole_batches(Bytes::from(bytes), max_bytes);
        // Pair assertion with the write path: what we serve starts with a whole batch
        // whose offsets cover the requested one.
        if let Some(Ok((h, _))) = batches(&records).next() {
            if h.last_offset() < offset {
                return Err(ReadError::Corrupt {
                    offset,
                    source: batch::BatchError::InvalidLength,
                });
            }
        }
        Ok(records)
    }

    /// The first offset whose record timestamp is at or after `timestamp_ms`, with that
    /// timestamp; `None` when every record is older.
    pub async fn offset_for_timestamp(
        &self,
        timestamp_ms: i64,
    ) -> Result<Option<(i64, i64)>, ReadError> {
        let candidates: Vec<(Rc<DmaFile>, u64, u64)> = {
            let st = self.state.borrow();
            st.segments
                .values()
                .filter(|s| s.max_timestamp_ms >= timestamp_ms && s.size > 0)
                .map(|s| {
                    let scan_from = s.time_index.scan_start_for(timestamp_ms);
                    let (_, pos) = s.index.lookup(scan_from);
                    (s.file.clone(), u64::from(pos), s.size)
                })
                .collect()
        };
        let hw = self.high_watermark();
        // Records below the log start are gone for consumers (DeleteRecords may stop
        // inside a segment; held segments may outlive their deletion a little).
        let lso = self.log_start_offset();
        for (file, pos, size) in candidates {
            let mut hit = None;
            file_scan::scan(&file, pos, size, false, |h, _, bytes| {
                if h.base_offset >= hw {
                    return false;
                }
                if h.last_offset() < lso {
                    return true;
                }
                if h.max_timestamp >= timestamp_ms {
                    match first_record_at_or_after(bytes, timestamp_ms, lso) {
                        Ok(None) => return true, // only records below the log start
                        Ok(Some(found)) => hit = Some(found),
                        // An unreadable batch: its first visible offset is the best answer.
                        Err(_) => hit = Some((h.base_offset.max(lso), h.max_timestamp)),
                    }
                    return false;
                }
                true
            })
            .await
            .map_err(|e| ReadError::Storage(storage_err(&self.dir, e)))?;
            if let Some(found) = hit {
                return Ok(Some(found));
            }
        }
        Ok(None)
    }

    /// The offset and timestamp of the first record with the largest timestamp among the
    /// records consumers can see (ListOffsets MAX_TIMESTAMP, KIP-734); `None` when there
    /// are none. Segments know their largest timestamp, so this is the by-time lookup of
    /// that timestamp; only when its records are out of sight (below the log start after
    /// DeleteRecords, or not yet committed) are the visible batches scanned.
    pub async fn offset_of_max_timestamp(&self) -> Result<Option<(i64, i64)>, ReadError> {
        let max = {
            let st = self.state.borrow();
            st.segments
                .values()
                .filter(|s| s.size > 0)
                .map(|s| s.max_timestamp_ms)
                .max()
        };
        let Some(max) = max else { return Ok(None) };
        if let Some(hit) = self.offset_for_timestamp(max).await? {
            debug_assert!(hit.1 >= max, "a by-time hit is at or after its target");
            return Ok(Some(hit));
        }
        self.scan_for_max_timestamp().await
    }

    /// [`Self::offset_of_max_timestamp`] by reading every visible batch.
    async fn scan_for_max_timestamp(&self) -> Result<Option<(i64, i64)>, ReadError> {
        let files: Vec<(Rc<DmaFile>, u64)> = {
            let st = self.state.borrow();
            st.segments
                .values()
                .filter(|s| s.size > 0)
                .map(|s| (s.file.clone(), s.size))
                .collect()
        };
        let hw = self.high_watermark();
        let lso = self.log_start_offset();
        let mut best: Option<(i64, i64)> = None;
        for (file, size) in files {
            file_scan::scan(&file, 0, size, false, |h, _, bytes| {
                if h.base_offset >= hw {
                    return false;
                }
                let whole = h.base_offset >= lso;
                if h.last_offset() < lso || (whole && best.is_some_and(|b| h.max_timestamp <= b.1))
                {
                    return true;
                }
                // The batch's largest visible timestamp: its header's when it is all
                // visible, else its visible records'.
                let mut top: Option<(i64, i64)> = None;
                let walked = batch_filter::for_each_record(bytes, |r| {
                    if r.offset >= lso && top.is_none_or(|t| r.timestamp_ms > t.1) {
                        top = Some((r.offset, r.timestamp_ms));
                    }
                });
                let top = match walked {
                    Ok(()) => top,
                    Err(_) => Some((h.base_offset.max(lso), h.max_timestamp)),
                };
                if let Some(t) = top {
                    if best.is_none_or(|b| t.1 > b.1) {
                        best = Some(t);
                    }
                }
                true
            })
            .await
            .map_err(|e| ReadError::Storage(storage_err(&self.dir, e)))?;
        }
        Ok(best)
    }

    /// Stops accepting appends, writes and syncs everything pending, trims the active
    /// segment's padding, and waits for the flusher to finish.
    pub async fn close(&self) {
        self.state.borrow_mut().closing = true;
        self.work.notify(usize::MAX);
        loop {
            let listener = self.progress.listen();
            if self.state.borrow().closed {
                return;
            }
            listener.await;
        }
    }

    // ---- the flusher ------------------------------------------------------------

    /// Writes pending batches, one bounded round at a time, until the log closes.
    async fn flusher(log: Rc<PartitionLog>, mut writer: ActiveWriter) {
        loop {
            loop {
                let listener = log.work.listen();
                {
                    let st = log.state.borrow();
                    if !st.pending.is_empty() || st.closing {
                        break;
                    }
                }
                listener.await;
            }
            if let Err(e) = log.flush_once(&mut writer).await {
                log.fail(e);
                return;
            }
            log.sync_work.notify(1);
            let (closing, empty) = {
                let st = log.state.borrow();
                (st.closing, st.pending.is_empty())
            };
            if closing && empty {
                let seal = async {
                    writer.log.sync().await?;
                    writer.log.truncate_to_logical().await?;
                    writer.index.sync().await?;
                    writer.time_index.sync().await
                };
                if let Err(e) = seal.await {
                    // Nothing unsynced may be acknowledged as synced: fail the log.
                    log.fail(storage_err(&log.dir, e));
                    return;
                }
                // A clean stop leaves nothing to replay at the next open.
                let end = log.state.borrow().written_offset;
                log.snapshot_producers(end).await;
                let mut st = log.state.borrow_mut();
                st.synced_offset = st.written_offset;
                st.closed = true;
                drop(st);
                log.progress.notify(usize::MAX);
                log.sync_work.notify(usize::MAX);
                return;
            }
        }
    }

    /// Group commit: whenever a waiter wants a sync (or the interval has passed with
    /// unsynced data), one `fdatasync` of the active segment covers everything written
    /// when it was issued. It runs beside the flusher, so writes — and acks=1 produces —
    /// never wait behind a sync.
    async fn syncer(log: Rc<PartitionLog>) {
        let mut last_sync = Instant::now();
        loop {
            let (file, target) = loop {
                // Read each round: `flush.ms` may be altered while the log is open.
                let interval = Duration::from_millis(log.config.borrow().sync_period_ms());
                let listener = log.sync_work.listen();
                {
                    let st = log.state.borrow();
                    if st.closed {
                        return;
                    }
                    let dirty = st.written_offset > st.synced_offset;
                    let wanted = st.sync_wanted > st.synced_offset;
                    if dirty && (wanted || last_sync.elapsed() >= interval) {
                        // Read together: every offset below `target` is in this file or
                        // in a sealed (already synced) segment.
                        break (st.active_file.clone(), st.written_offset);
                    }
                    if !dirty {
                        // Nothing to sync: the flusher wakes us after its next write, so
                        // an idle log never wakes on the timer (`flush.ms` may be 1).
                        drop(st);
                        listener.await;
                        continue;
                    }
                }
                let due = interval.saturating_sub(last_sync.elapsed());
                futures_lite::future::or(listener, glommio::timer::sleep(due)).await;
            };
            let started = Instant::now();
            if let Err(e) = file.fdatasync().await {
                log.fail(storage_err(&log.dir, e));
                return;
            }
            last_sync = Instant::now();
            log.context.observer.stage(Stage::Fsync, started.elapsed());
            log.syncs.set(log.syncs.get() + 1);
            let mut st = log.state.borrow_mut();
            if target > st.synced_offset {
                st.synced_offset = target;
            }
            assert!(
                st.synced_offset <= st.written_offset,
                "nothing is synced before it is written"
            );
            drop(st);
            log.progress.notify(usize::MAX);
        }
    }

    fn fail(&self, e: StorageError) {
        tracing::error!(dir = %self.dir.display(), error = %e, "partition log failed; refusing further appends");
        let mut st = self.state.borrow_mut();
        st.failure = Some(e);
        st.closed = true;
        drop(st);
        self.progress.notify(usize::MAX);
        self.work.notify(usize::MAX);
        self.sync_work.notify(usize::MAX);
    }

    async fn flush_once(&self, writer: &mut ActiveWriter) -> Result<(), StorageError> {
        // Take a bounded round (at least one entry) so one burst never needs one huge
        // buffer; the rest goes in the next round.
        let batch_list: Vec<Pending> = {
            let mut st = self.state.borrow_mut();
            let mut bytes = 0usize;
            let mut n = 0usize;
            for p in st.pending.iter() {
                if n > 0 && bytes + p.bytes.len() > FLUSH_ROUND_BYTES_MAX {
                    break;
                }
                bytes += p.bytes.len();
                n += 1;
            }
            st.pending.drain(..n).collect()
        };
        let mut new_index: Vec<(i64, u32)> = Vec::new();
        let mut new_time: Vec<(i64, i64)> = Vec::new();
        let mut pushed_upto = self.state.borrow().written_offset;
        let config = self.config();
        for p in &batch_list {
            let len = writer.log.logical_len();
            let too_big = len > 0 && len + p.bytes.len() as u64 > config.segment_bytes;
            let too_old =
                len > 0 && writer.opened_at.elapsed() >= Duration::from_millis(config.segment_ms);
            // Index entries hold offsets relative to the segment base in 32 bits (Kafka
            // rolls at i32::MAX too): a batch that would leave that range starts a segment.
            let too_far = len > 0 && p.next_offset - 1 - writer.base_offset > i64::from(i32::MAX);
            // Kafka rolls when the offset index is full (`segment.index.bytes`); a batch
            // may add one entry.
            let index_full = len > 0
                && writer.index.logical_len() + offset_index::ENTRY_BYTES as u64
                    > u64::from(config.segment_index_bytes);
            if too_big || too_old || too_far || index_full {
                self.write_out(writer, &mut new_index, &mut new_time, pushed_upto)
                    .await?;
                self.roll(writer, p.base_offset).await?;
            }
            let mut pos = writer.log.logical_len();
            for item in batches(&p.bytes) {
                let Ok((h, range)) = item else { break };
                if writer.bytes_since_index >= u64::from(config.index_interval_bytes)
                    && h.base_offset > writer.last_index_offset
                    && pos > 0
                {
                    let rel = (h.base_offset - writer.base_offset) as u32;
                    let mut buf = Vec::with_capacity(offset_index::ENTRY_BYTES);
                    offset_index::encode_entry(
                        offset_index::IndexEntry {
                            relative_offset: rel,
                            position: pos as u32,
                        },
                        &mut buf,
                    );
                    writer.index.push_slice(&buf);
                    new_index.push((h.base_offset, pos as u32));
                    writer.last_index_offset = h.base_offset;
                    writer.bytes_since_index = 0;
                }
                if h.max_timestamp > writer.max_timestamp_ms {
                    writer.max_timestamp_ms = h.max_timestamp;
                    let rel = (h.base_offset - writer.base_offset) as u32;
                    let mut buf = Vec::with_capacity(time_index::ENTRY_BYTES);
                    time_index::encode_entry(
                        time_index::TimeEntry {
                            timestamp_ms: h.max_timestamp,
                            relative_offset: rel,
                        },
                        &mut buf,
                    );
                    writer.time_index.push_slice(&buf);
                    new_time.push((h.max_timestamp, h.base_offset));
                }
                let batch_len = (range.end - range.start) as u64;
                writer.bytes_since_index += batch_len;
                pos += batch_len;
            }
            assert_eq!(p.base_offset, pushed_upto, "pending batches are contiguous");
            writer.log.push(p.bytes.clone());
            pushed_upto = p.next_offset;
        }
        self.write_out(writer, &mut new_index, &mut new_time, pushed_upto)
            .await?;

        {
            let mut st = self.state.borrow_mut();
            for p in batch_list {
                st.tail.push(CachedBatches {
                    base_offset: p.base_offset,
                    next_offset: p.next_offset,
                    bytes: p.bytes,
                });
            }
        }
        self.progress.notify(usize::MAX);
        Ok(())
    }

    /// Writes what the appenders hold and publishes it to readers: segment size, index
    /// entries, written offset.
    async fn write_out(
        &self,
        writer: &mut ActiveWriter,
        new_index: &mut Vec<(i64, u32)>,
        new_time: &mut Vec<(i64, i64)>,
        upto: i64,
    ) -> Result<(), StorageError> {
        if !writer.log.has_unflushed() {
            return Ok(());
        }
        let needed = writer.log.logical_len().div_ceil(4096) * 4096;
        if needed > writer.preallocated {
            let target = (needed + self.preallocate_step.get())
                .min(self.config.borrow().segment_bytes.div_ceil(4096) * 4096)
                .max(needed);
            // Best effort: a filesystem without fallocate still takes the writes.
            match writer.log.file().pre_allocate(target, false).await {
                Ok(()) => writer.preallocated = target,
                Err(e) => {
                    tracing::debug!(dir = %self.dir.display(), error = %e, "fallocate failed; appending without preallocation");
                    writer.preallocated = u64::MAX;
                }
            }
        }
        // The log first: an index entry must never point at bytes not yet written.
        let started = Instant::now();
        writer
            .log
            .flush()
            .await
            .map_err(|e| storage_err(&self.dir, e))?;
        writer
            .index
            .flush()
            .await
            .map_err(|e| storage_err(&self.dir, e))?;
        writer
            .time_index
            .flush()
            .await
            .map_err(|e| storage_err(&self.dir, e))?;
        self.context
            .observer
            .stage(Stage::Append, started.elapsed());
        let size = writer.log.logical_len();
        let mut st = self.state.borrow_mut();
        assert!(upto >= st.written_offset, "written offset only grows");
        assert!(
            upto <= st.next_offset,
            "nothing is written before it is assigned"
        );
        st.written_offset = upto;
        let seg = st
            .segments
            .get_mut(&writer.base_offset)
            .expect("the active segment is always in the segment map");
        seg.size = size;
        for (offset, pos) in new_index.drain(..) {
            seg.index.append(offset, pos);
        }
        for (ts, offset) in new_time.drain(..) {
            seg.time_index.append(ts, offset);
        }
        seg.max_timestamp_ms = seg.max_timestamp_ms.max(writer.max_timestamp_ms);
        Ok(())
    }

    async fn roll(&self, writer: &mut ActiveWriter, new_base: i64) -> Result<(), StorageError> {
        let dir = &self.dir;
        let seal = async {
            writer.log.sync().await?;
            writer.log.truncate_to_logical().await?;
            writer.index.sync().await?;
            writer.time_index.sync().await
        };
        seal.await.map_err(|e| storage_err(dir, e))?;
        let fresh = create_active(dir, new_base).await?;
        let (seg, w) = fresh;
        {
            let mut st = self.state.borrow_mut();
            st.active_file = seg.file.clone();
            st.segments.insert(new_base, seg);
        }
        *writer = w;
        tracing::debug!(dir = %dir.display(), base = new_base, "rolled segment");
        // Everything below `new_base` is now synced in sealed segments: a crash replays
        // producer state from here at most.
        self.snapshot_producers(new_base).await;
        Ok(())
    }

    /// Writes the producer state as the snapshot at `offset` (see `producer_snapshot`).
    /// A failure is logged, not fatal: the next open replays from an older snapshot.
    async fn snapshot_producers(&self, offset: i64) {
        let bytes = producer_snapshot::encode(&self.producers.borrow());
        let dir = self.dir.clone();
        let written = glommio::executor()
            .spawn_blocking(move || producer_snapshot::write(&dir, offset, &bytes))
            .await;
        if let Err(e) = written {
            tracing::warn!(dir = %self.dir.display(), offset, error = %e, "producer snapshot not written");
        }
    }

    /// Forgets idle producers (`producer.id.expiration.ms`) and those whose batches were all
    /// deleted; returns how many.
    pub fn expire_producers(&self, now_ms: i64, expiration_ms: i64) -> usize {
        let start = self.log_start_offset();
        self.producers
            .borrow_mut()
            .expire(now_ms, expiration_ms, start)
    }

    /// The idempotent producers this partition remembers (DescribeProducers).
    pub fn active_producers(&self) -> Vec<super::producer_state::ActiveProducer> {
        self.producers.borrow().active()
    }

    /// Producers this partition remembers.
    pub fn producer_count(&self) -> usize {
        self.producers.borrow().len()
    }
}

/// Rebuilds the idempotent-producer state at open: the newest usable snapshot, then the
/// producer batches written after it. Without a snapshot the last two segments are
/// replayed: enough for a crash before the first roll's snapshot was written, and a log
/// from before snapshots existed has no older history worth a full scan.
async fn rebuild_producers(
    dir: &Path,
    segments: &BTreeMap<i64, Segment>,
    next_offset: i64,
    now: i64,
) -> Result<ProducerState, StorageError> {
    let (mut state, at) = producer_snapshot::load(dir, next_offset, now);
    let from = at.unwrap_or_else(|| {
        segments
            .keys()
            .rev()
            .nth(1)
            .or(segments.keys().next_back())
            .copied()
            .unwrap_or(0)
    });
    if from >= next_offset {
        return Ok(state);
    }
    let bases: Vec<i64> = segments.keys().copied().collect();
    let mut replayed = 0usize;
    for (i, base) in bases.iter().enumerate() {
        let next_base = bases.get(i + 1).copied().unwrap_or(i64::MAX);
        let Some(seg) = segments.get(base) else {
            continue;
        };
        if next_base <= from {
            continue;
        }
        file_scan::scan(&seg.file, 0, seg.size, false, |h, _, _| {
            if h.base_offset >= from {
                if let Some(b) = ProducerBatch::from_header(h) {
                    state.record(&b, h.base_offset, h.last_offset() + 1, now, i64::MAX);
                    replayed += 1;
                }
            }
            true
        })
        .await
        .map_err(|e| storage_err(dir, e))?;
    }
    tracing::debug!(dir = %dir.display(), from, replayed, producers = state.len(), "producer state rebuilt");
    Ok(state)
}

/// Creates the files of a new, empty active segment and syncs the directory so the
/// names survive a crash.
pub(super) async fn create_active(
    dir: &Path,
    base: i64,
) -> Result<(Segment, ActiveWriter), StorageError> {
    let log_path = segment::file_path(dir, base, LOG_SUFFIX);
    let log_file = Rc::new(open_rw(&log_path).await?);
    let index_path = segment::file_path(dir, base, INDEX_SUFFIX);
    let index_file = Rc::new(open_rw(&index_path).await?);
    let time_path = segment::file_path(dir, base, TIME_INDEX_SUFFIX);
    let time_file = Rc::new(open_rw(&time_path).await?);
    sync_dir(dir).await?;
    let seg = Segment {
        base_offset: base,
        file: log_file.clone(),
        size: 0,
        index: OffsetIndex::new(base),
        time_index: TimeIndex::new(base),
        max_timestamp_ms: i64::MIN,
        cleaned_at_ms: None,
    };
    let writer = ActiveWriter {
        base_offset: base,
        log: AlignedAppender::resume(log_file, 0, Vec::new()),
        index: AlignedAppender::resume(index_file, 0, Vec::new()),
        time_index: AlignedAppender::resume(time_file, 0, Vec::new()),
        bytes_since_index: 0,
        last_index_offset: base,
        max_timestamp_ms: i64::MIN,
        opened_at: Instant::now(),
        preallocated: 0,
    };
    Ok((seg, writer))
}

pub(super) async fn sync_dir(dir: &Path) -> Result<(), StorageError> {
    let d = glommio::io::Directory::open(dir)
        .await
        .map_err(|e| storage_err(dir, e))?;
    d.sync().await.map_err(|e| storage_err(dir, e))?;
    let _ = d.close().await;
    Ok(())
}

pub(super) fn open_rw_path(
    path: &Path,
) -> impl std::future::Future<Output = Result<DmaFile, StorageError>> + '_ {
    open_rw(path)
}

pub(super) fn new_writer(
    base_offset: i64,
    log: AlignedAppender,
    index: AlignedAppender,
    time_index: AlignedAppender,
    bytes_since_index: u64,
    last_index_offset: i64,
    max_timestamp_ms: i64,
) -> ActiveWriter {
    ActiveWriter {
        base_offset,
        log,
        index,
        time_index,
        bytes_since_index,
        last_index_offset,
        max_timestamp_ms,
        opened_at: Instant::now(),
        preallocated: 0,
    }
}

/// The codec `compression.type` asks for, if it is not "whatever the producer sent".
fn target_codec(config: &LogConfig) -> Option<batch::Compression> {
    match config.compression {
        CompressionType::Producer => None,
        CompressionType::Uncompressed => Some(batch::Compression::None),
        CompressionType::Gzip => Some(batch::Compression::Gzip),
        CompressionType::Snappy => Some(batch::Compression::Snappy),
        CompressionType::Lz4 => Some(batch::Compression::Lz4),
        CompressionType::Zstd => Some(batch::Compression::Zstd),
    }
}

/// Checks one validated batch against the topic's rules (Kafka's own checks): a
/// compacted topic takes only keyed records; create-time timestamps must lie within
/// `message.timestamp.difference.max.ms` of the broker clock (every record's, as Kafka's
/// `LogValidator`; the walk happens only when that rule is configured). A batch that
/// breaks a rule is refused whole, naming its first [`RECORD_ERRORS_MAX`] offending
/// records (Kafka's `record_errors`). Returns whether the batch must be re-encoded for
/// `compression.type`.
fn check_topic_rules(
    config: &LogConfig,
    header: &BatchHeader,
    bytes: &[u8],
    now: i64,
) -> Result<bool, AppendError> {
    if config.timestamp_type == TimestampType::CreateTime
        && config.timestamp_difference_max_ms < i64::MAX
    {
        let max_diff = config.timestamp_difference_max_ms.unsigned_abs();
        let mut bad = RecordErrors::default();
        batch_filter::for_each_record(bytes, |r| {
            if r.timestamp_ms.abs_diff(now) > max_diff {
                bad.push(|| {
                    format!(
                        "Timestamp {} of message with offset {} is out of range. The \
                         timestamp should be within [{}, {}]",
                        r.timestamp_ms,
                        r.offset,
                        now.saturating_sub(config.timestamp_difference_max_ms),
                        now.saturating_add(config.timestamp_difference_max_ms)
                    )
                    .into()
                });
            }
            bad.next();
        })?;
        bad.reject(RecordRule::TimestampOutOfRange)?;
    }
    if config.cleanup.compact && !header.is_control() {
        let message: Arc<str> = "Compacted topic cannot accept message without key".into();
        let mut bad = RecordErrors::default();
        batch_filter::for_each_record(bytes, |r| {
            if r.key.is_none() {
                bad.push(|| message.clone());
            }
            bad.next();
        })?;
        bad.reject(RecordRule::KeyRequired)?;
    }
    Ok(target_codec(config).is_some_and(|c| header.compression() != Ok(c)))
}

/// Most record errors one batch's refusal lists: a small compressed batch can hold
/// millions of records, and listing each would cost memory far beyond the request (the
/// client fails the whole batch either way; the count is in the message).
pub const RECORD_ERRORS_MAX: usize = 1000;

/// The offending records of one batch as they are found, in record order.
#[derive(Default)]
struct RecordErrors {
    index: i32,
    total: usize,
    listed: Vec<(i32, Arc<str>)>,
}

impl RecordErrors {
    /// The record at the current index breaks the rule; `message` is built only while
    /// there is room to list it.
    fn push(&mut self, message: impl FnOnce() -> Arc<str>) {
        self.total += 1;
        if self.listed.len() < RECORD_ERRORS_MAX {
            self.listed.push((self.index, message()));
        }
    }

    /// Moves to the next record.
    fn next(&mut self) {
        self.index = self.index.saturating_add(1);
    }

    /// `Err` naming the listed records when there are any (the summary is Kafka's
    /// wording, with the true total).
    fn reject(self, rule: RecordRule) -> Result<(), AppendError> {
        if self.total == 0 {
            return Ok(());
        }
        debug_assert!(!self.listed.is_empty() && self.listed.len() <= RECORD_ERRORS_MAX);
        let shown: Vec<String> = self
            .listed
            .iter()
            .take(3)
            .map(|(i, m)| format!("(batchIndex={i}, message={m})"))
            .collect();
        let message = format!(
            "One or more records have been rejected due to {} record errors in total, and \
             only showing the first three errors at most: [{}]",
            self.total,
            shown.join(", ")
        );
        Err(AppendError::RecordsRejected(RejectedRecords {
            rule,
            message: message.into(),
            records: self.listed.into(),
        }))
    }
}

/// The first record of `batch` whose timestamp is at or after `target_ms` and whose
/// offset is at least `from` (ListOffsets by time). Compressed batches are decompressed,
/// so the answer is exact, as Kafka's; `Ok(None)` when no record qualifies.
fn first_record_at_or_after(
    batch: &[u8],
    target_ms: i64,
    from: i64,
) -> Result<Option<(i64, i64)>, batch::BatchError> {
    let mut hit = None;
    batch_filter::for_each_record(batch, |r| {
        if hit.is_none() && r.offset >= from && r.timestamp_ms >= target_ms {
            hit = Some((r.offset, r.timestamp_ms));
        }
    })?;
    Ok(hit)
}

/// The request's batches re-encoded per the topic: in the `compression.type` codec,
/// stamped with log-append time.
fn reshape_batches(config: &LogConfig, records: &[u8], now: i64) -> Result<Vec<u8>, AppendError> {
    let mut out = Vec::with_capacity(records.len());
    for item in batches(records) {
        let (header, range) = item?;
        let bytes = records.get(range).ok_or(AppendError::Empty)?;
        let start = out.len();
        match target_codec(config) {
            Some(c) if header.compression() != Ok(c) => {
                let recoded = batch_filter::recompress(bytes, c)?;
                // Kafka checks the batch as stored: a batch that only fits compressed
                // is too large for a topic that stores it uncompressed.
                if recoded.len() > config.max_batch_bytes {
                    return Err(AppendError::InvalidBatch(batch::BatchError::TooLarge {
                        size: recoded.len(),
                        max: config.max_batch_bytes,
                    }));
                }
                out.extend_from_slice(&recoded)
            }
            _ => out.extend_from_slice(bytes),
        }
        if config.timestamp_type == TimestampType::LogAppendTime {
            if let Some(b) = out.get_mut(start..) {
                batch_filter::stamp_log_append_time(b, now);
            }
        }
    }
    Ok(out)
}

pub(crate) use ActiveWriter as Writer;
