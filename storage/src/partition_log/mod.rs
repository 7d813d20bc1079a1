//! One partition's log: offset assignment, the group-commit flusher, segment rolls, reads
//! and lookups. Owned by exactly one shard; `!Send` by construction (`Rc`, `RefCell`).
//!
//! Flow of an append:
//! 1. [`PartitionLog::append`] validates every batch, copies the request's records once
//!    into a buffer of its own, writes base offsets and the leader epoch (outside the
//!    CRC) and queues it as *pending* — synchronously, so offsets are assigned in the
//!    order produces reach the shard. [`PartitionLog::append_unsequenced`] is the same
//!    for a batch the broker writes for a producer (a group coordinator's transactional
//!    offset commit): the producer's epoch is checked, its sequences are not.
//! 2. The flusher task takes what is pending (a bounded round), rolls segments where
//!    needed, appends the bytes to the active segment through the aligned direct-I/O
//!    appender, adds sparse index entries and writes.
//! 3. It then publishes the new `written_offset` (the high watermark of a single-node
//!    broker), moves the batches into the tail cache and wakes every waiter.
//! 4. The syncer task, beside it, issues one `fdatasync` whenever a waiter or the
//!    durability setting asks for one; it covers everything written when it was issued
//!    (group commit), and writes go on while it runs.
//!
//! A follower's append, [`PartitionLog::append_replicated`], differs only in step 1: the
//! batches fetched from the leader keep the base offsets and leader epochs the leader gave
//! them, and must continue the log exactly; nothing of `append`'s topic rules, sequence
//! checks or size limit applies. A follower whose log diverged from its leader's closes
//! the log, cuts its directory back with [`PartitionLog::truncate_closed`] and opens it
//! again.
//!
//! Invariants (asserted where cheap):
//! `log_start_offset <= synced_offset <= written_offset <= next_offset`; pending entries
//! are contiguous from `written_offset` to `next_offset`; readers never see offsets at or
//! past `written_offset`; no `RefCell` borrow is held across an `.await`.
//!
//! One module per job, each an `impl PartitionLog` block over the state defined here:
//! `open` (with `recovery` of the active segment), `append`, `replicated` (a follower's
//! append of its leader's batches: `append_replicated`), `read`, `flusher`, `syncer`,
//! `segment_set` (roll targets, deletion, the cleaner's swap, holds), `txn`
//! (transaction markers, the first unstable offset, aborted transactions), `retention`
//! (retention and DeleteRecords move `log_start_offset`) and `truncate` (a closed log's
//! directory cut back to an offset, for a follower whose log diverged:
//! `truncate_closed`). Compaction itself is `crate::compaction`. Not here: leader epochs
//! and the high watermark of a replicated partition, which the partition layer above
//! keeps.

mod append;
mod files;
mod flusher;
mod open;
mod read;
pub(crate) mod recovery;
mod replicated;
mod retention;
mod segment_set;
mod syncer;
mod truncate;
mod txn;

pub(crate) use segment_set::SealedSegment;
pub use truncate::TruncateOutcome;

use crate::aligned_appender::AlignedAppender;
use crate::config::LogConfig;
use crate::context::LogContext;
use crate::error::StorageError;
use crate::file_cache::SegmentFile;
use crate::producer_state::ProducerState;
use crate::segment::Segment;
use crate::tail_cache::TailCache;
use bytes::Bytes;
use event_listener::Event;
use std::cell::RefCell;
use std::collections::{BTreeMap, VecDeque};
use std::path::{Path, PathBuf};
use std::rc::Rc;
use std::time::Instant;

/// Segment files grow by `fallocate` ahead of the writes, so appends are writes inside
/// the file size: on ext4 an O_DIRECT write that extends the file cannot complete without
/// blocking and io_uring hands it to a kernel worker thread (kernel-notes.md,
/// "Preallocation"). Sealing truncates the unused tail.
///
/// The preallocation follows what the segment has written: a new segment reserves
/// `PREALLOCATE_INITIAL_BYTES`, and each extension doubles the file, but never reserves
/// more than the log's step beyond what is written. So an idle or one-message partition
/// costs 1 MiB of disk and a busy one reaches the full step after a few extensions. This
/// is the largest step; the shard gives each log a smaller one when it has many
/// (`set_preallocate_step`), so that preallocated but unwritten space stays bounded per
/// shard.
pub const PREALLOCATE_STEP_BYTES: u64 = 64 << 20;
/// What a new active segment reserves before it has grown.
pub const PREALLOCATE_INITIAL_BYTES: u64 = 1 << 20;
/// The smallest step a shard hands out.
pub const PREALLOCATE_STEP_MIN_BYTES: u64 = 1 << 20;

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
    /// The exclusive bound the read was held to: the written offset, or the caller's
    /// `end` where that is lower.
    pub end_offset: i64,
    pub log_start_offset: i64,
    /// Whole batches starting with the one that contains the requested offset, every one
    /// of them below `end_offset`; empty when the offset is at or past it.
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
    active_file: SegmentFile,
    tail: TailCache,
    failure: Option<StorageError>,
    /// The flusher's last write found the filesystem full and it is waiting to write
    /// again: new appends are refused with this error meanwhile (what is already queued
    /// stays queued and is written once space returns).
    out_of_space: Option<StorageError>,
    closing: bool,
    closed: bool,
}

/// The flusher's own state: the active segment's three appenders.
pub(crate) struct ActiveWriter {
    base_offset: i64,
    log: AlignedAppender,
    index: AlignedAppender,
    /// Offset-index entries (base offset, encoded entry) not yet in `index`: an entry
    /// reaches the file only once the log is synced up to its offset, so every entry on
    /// disk has durable data before it (recovery trusts the log up to its last entry and
    /// re-reads only what follows).
    index_unsynced: std::collections::VecDeque<(i64, Vec<u8>)>,
    time_index: AlignedAppender,
    bytes_since_index: u64,
    last_index_offset: i64,
    max_timestamp_ms: i64,
    opened_at: Instant,
    /// Bytes of the active log file already allocated with `fallocate`.
    preallocated: u64,
    /// When the index files were last written, and the log's length then: index entries
    /// are written in rounds of their own (`flusher::INDEX_WRITE_*`), not with every log
    /// write.
    indexes_written_at: Instant,
    log_len_at_index_write: u64,
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
    /// Holders of [`WriteHold`]: while non-zero, the flusher writes nothing.
    write_holds: std::cell::Cell<usize>,
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
    /// The aborted transactions, in marker order; changed with `producers` (`txn`).
    aborted: RefCell<crate::txn_index::AbortedTxns>,
    /// Aborted-transaction entries whose marker is below this are in the `.txnindex`
    /// files (`txn::persist_txn_indexes`).
    txn_index_persisted: std::cell::Cell<i64>,
    /// The owner's clock and observer.
    context: LogContext,
}

fn storage_err(path: &Path, e: impl std::fmt::Display) -> StorageError {
    StorageError::new(path.display(), e)
}

fn io_err(path: &Path, e: &std::io::Error) -> StorageError {
    StorageError::io(path.display(), e)
}

/// How long a writer waits before it tries again to open a file it had no descriptor
/// for; it logs each time (the operator should raise the limit).
const DESCRIPTOR_RETRY: std::time::Duration = std::time::Duration::from_millis(100);

/// How long the flusher waits before it writes again into a full filesystem.
const NO_SPACE_RETRY: std::time::Duration = std::time::Duration::from_millis(250);

impl PartitionLog {
    pub fn dir(&self) -> &Path {
        &self.dir
    }

    /// The cache of open segment files this log shares with its owner's other logs.
    pub fn files(&self) -> Rc<crate::file_cache::FileCache> {
        self.context.files.clone()
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

    /// When acknowledged produces are on stable storage (the topic's durability).
    pub fn durability(&self) -> crate::config::Durability {
        self.config.borrow().durability
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

    /// Offsets below this are written to the segment files and may be read. What a
    /// consumer may see is the partition layer's decision (its high watermark).
    pub fn written_offset(&self) -> i64 {
        self.state.borrow().written_offset
    }

    /// Offsets below this are on stable storage (`fdatasync`ed).
    pub fn synced_offset(&self) -> i64 {
        self.state.borrow().synced_offset
    }

    pub fn failure(&self) -> Option<StorageError> {
        self.state.borrow().failure.clone()
    }

    /// How many group-commit `fdatasync`s this log has issued.
    pub fn sync_count(&self) -> u64 {
        self.syncs.get()
    }

    /// The log's monotonic clock (its runtime's), for the owner's own stage timings.
    pub fn now(&self) -> std::time::Instant {
        self.context.runtime.now()
    }

    /// Reports `stage` as having taken the time since `started` (on this log's clock)
    /// to the log's observer: the owner's stages of the write path (`Stage`).
    pub fn observe_since(&self, stage: crate::context::Stage, started: std::time::Instant) {
        self.context
            .observer
            .stage(stage, self.context.runtime.since(started));
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

    /// Holds back the writing of appended batches until the guard drops; appends still
    /// queue and take their offsets in order, and acknowledgements wait. For what must be
    /// durable before any batch of the log's new state is (the owner's leader-epoch
    /// checkpoint).
    pub fn hold_writes(self: &Rc<Self>) -> WriteHold {
        self.write_holds.set(self.write_holds.get() + 1);
        WriteHold(self.clone())
    }

    /// Fails the log for a reason of its owner's (what its batches depend on could not be
    /// made durable): as a failed write would, it refuses further appends and answers
    /// waiting ones with the error.
    pub fn fail_with(&self, e: StorageError) {
        self.fail(e);
    }

    fn fail(&self, e: StorageError) {
        let mut st = self.state.borrow_mut();
        // The first failure is the one reported and answered.
        if st.failure.is_none() {
            tracing::error!(dir = %self.dir.display(), error = %e, "partition log failed; refusing further appends");
            self.context.observer.log_failed(&self.dir, &e);
            st.failure = Some(e);
        }
        st.closed = true;
        drop(st);
        self.progress.notify(usize::MAX);
        self.work.notify(usize::MAX);
        self.sync_work.notify(usize::MAX);
    }
}

pub(crate) use ActiveWriter as Writer;

/// Keeps a log's flusher from writing while it lives (see `PartitionLog::hold_writes`).
pub struct WriteHold(Rc<PartitionLog>);

impl Drop for WriteHold {
    fn drop(&mut self) {
        let log = &self.0;
        log.write_holds.set(log.write_holds.get() - 1);
        log.work.notify(usize::MAX);
    }
}
