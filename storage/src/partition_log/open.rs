//! Opening a partition log: listing its segments, finishing an interrupted compaction
//! swap, recovering the active segment (see `recovery`), loading indexes, moving the log
//! start to its checkpoint and rebuilding idempotent producers' state, then starting the
//! flusher and syncer. Also the file helpers every part of the log opens files with.
//!
//! Invariant on return: `log_start_offset <= synced_offset == written_offset ==
//! next_offset`, nothing pending, and the active segment ends with a whole valid batch.

use super::segment_set::DELETED_SUFFIX;
use super::{storage_err, LogState, PartitionLog, PREALLOCATE_STEP_BYTES};
use crate::config::LogConfig;
use crate::context::LogContext;
use crate::error::StorageError;
use crate::file_cache::{Access, FileCache, SegmentFile};
use crate::file_scan;
use crate::fs::Disk;
use crate::producer_snapshot;
use crate::producer_state::ProducerState;
use crate::segment::{self, Segment, LOG_SUFFIX};
use crate::tail_cache::TailCache;
use crate::txn_index::AbortedTxn;
use event_listener::Event;
use glommio::io::OpenOptions;
use std::cell::RefCell;
use std::collections::{BTreeMap, VecDeque};
use std::path::{Path, PathBuf};
use std::rc::Rc;

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

impl PartitionLog {
    /// Opens (creating if needed) the log in `dir`, recovering the tail of its active
    /// segment, and starts its flusher.
    pub async fn open(
        dir: PathBuf,
        config: LogConfig,
        context: LogContext,
    ) -> Result<Rc<PartitionLog>, StorageError> {
        let disk = context.files.disk().clone();
        let fs = disk.fs();
        // Directory creation and listing are rare metadata operations, done on the
        // reactor.
        fs.create_dir_all(&dir).map_err(|e| storage_err(&dir, e))?;
        if matches!(disk, Disk::Kernel) {
            ensure_io_probe(&dir).await?;
        }
        // Finish (or undo) a compaction swap a crash interrupted before listing segments.
        crate::segment_swap::recover_swaps(fs, &dir)?;
        let mut bases = Vec::new();
        for entry in fs.read_dir(&dir).map_err(|e| storage_err(&dir, e))? {
            let name = entry
                .file_name()
                .and_then(|n| n.to_str())
                .unwrap_or_default();
            if name.ends_with(DELETED_SUFFIX) {
                // Deleted before a restart but not yet unlinked: nobody reads it now.
                let _ = fs.remove_file(&entry);
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
            segments.insert(
                base,
                Self::open_sealed(&dir, base, next_base, &context.files).await?,
            );
        }
        let (active_segment, writer, next_offset) = super::recovery::recover_active(
            &dir,
            last_base,
            &config,
            &context.files,
            context.runtime.now(),
        )
        .await?;
        let active_file = active_segment.file.clone();
        segments.insert(last_base, active_segment);
        // DeleteRecords may have moved the start inside the first segment.
        let checkpoint = crate::checkpoint::read(fs, &dir, crate::retention::LOG_START_CHECKPOINT)?
            .unwrap_or(i64::MIN);
        if checkpoint > next_offset {
            // The start was moved past what survived a power loss (DeleteRecords of
            // written but unsynced offsets). Offsets from the recovered end will be
            // assigned again to new records: the checkpoint must not hide them later.
            crate::checkpoint::write(
                fs,
                &dir,
                crate::retention::LOG_START_CHECKPOINT,
                next_offset,
            )
            .map_err(|e| storage_err(&dir, e))?;
        }
        let log_start_offset = (*bases.first().unwrap_or(&0))
            .max(checkpoint)
            .min(next_offset);
        let bases: Vec<i64> = segments.keys().copied().collect();
        let mut aborted = super::txn::load_aborted(fs, &dir, &bases, next_offset)?;
        let (producers, replayed_from, rebuilt) =
            rebuild_producers(fs, &dir, &segments, next_offset, context.now_ms()).await?;
        aborted.merge(rebuilt);
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
                out_of_space: None,
                closing: false,
                closed: false,
            }),
            progress: Event::new(),
            work: Event::new(),
            sync_work: Event::new(),
            syncs: std::cell::Cell::new(0),
            held: std::cell::Cell::new(0),
            write_holds: std::cell::Cell::new(0),
            preallocate_step: std::cell::Cell::new(PREALLOCATE_STEP_BYTES),
            oldest_kept_tombstone_ms: std::cell::Cell::new(i64::MIN),
            start_moves: glommio::sync::Semaphore::new(1),
            producers: RefCell::new(producers),
            aborted: RefCell::new(aborted),
            txn_index_persisted: std::cell::Cell::new(replayed_from),
            context,
            dir,
        });
        let runtime = &log.context.runtime;
        runtime.spawn(Self::flusher(log.clone(), writer));
        runtime.spawn(Self::syncer(log.clone()));
        Ok(log)
    }

    /// A sealed segment's view; its log file is not opened (only when it is read).
    async fn open_sealed(
        dir: &Path,
        base: i64,
        next_base: i64,
        files: &Rc<FileCache>,
    ) -> Result<Segment, StorageError> {
        let log_path = segment::file_path(dir, base, LOG_SUFFIX);
        let fs = files.disk().fs();
        // A stat, not an open: sealed segments hold no descriptor until they are read.
        let size = fs.len(&log_path).map_err(|e| storage_err(&log_path, e))?;
        let (index, _) = super::files::load_index(files, dir, base, size).await?;
        let (time_index, _) = super::files::load_time_index(files, dir, base, next_base).await?;
        let max_timestamp_ms = time_index.max_timestamp_ms().unwrap_or(i64::MIN);
        let cleaned_at_path = segment::file_path(dir, base, segment::CLEANED_AT_SUFFIX);
        let cleaned_at_ms = fs
            .read_to_string(&cleaned_at_path)
            .ok()
            .and_then(|t| t.trim().parse::<i64>().ok());
        Ok(Segment {
            base_offset: base,
            file: SegmentFile::new(files, log_path, Access::Existing),
            size,
            index,
            time_index,
            max_timestamp_ms,
            cleaned_at_ms,
        })
    }
}

/// Rebuilds the producer state at open: the newest usable snapshot, then the producer
/// batches and transaction markers written after it. Without a snapshot the whole log is
/// replayed, as Kafka does: a transaction may have opened in any segment, and a replay
/// that started later would not know it is open. That costs a full scan only where no
/// snapshot is left — a log that never rolled, or a snapshot write that failed — since
/// one is kept per roll (`producer_snapshot`). Returns the state, the offset the replay
/// started at, and the aborted transactions whose markers it replayed.
async fn rebuild_producers(
    fs: &dyn crate::fs::Fs,
    dir: &Path,
    segments: &BTreeMap<i64, Segment>,
    next_offset: i64,
    now: i64,
) -> Result<(ProducerState, i64, Vec<AbortedTxn>), StorageError> {
    let (mut state, at) = producer_snapshot::load(fs, dir, next_offset, now);
    let from = at.unwrap_or_else(|| segments.keys().next().copied().unwrap_or(0));
    if from >= next_offset {
        return Ok((state, from, Vec::new()));
    }
    let mut aborted = Vec::new();
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
        let file = seg.file.open().await.map_err(|e| storage_err(dir, e))?;
        file_scan::scan(&file, 0, seg.size, false, |h, _, bytes| {
            if h.base_offset >= from && h.producer_id >= 0 {
                aborted.extend(super::txn::take_stored_batch(
                    &mut state,
                    h,
                    bytes,
                    now,
                    i64::MAX,
                ));
                replayed += 1;
            }
            true
        })
        .await
        .map_err(|e| storage_err(dir, e))?;
    }
    tracing::debug!(dir = %dir.display(), from, replayed, producers = state.len(), "producer state rebuilt");
    Ok((state, from, aborted))
}
