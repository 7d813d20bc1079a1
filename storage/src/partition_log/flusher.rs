//! The flusher task: takes what is pending in bounded rounds, rolls segments, writes
//! through the aligned direct-I/O appenders, adds sparse index entries, publishes the
//! written offset and moves the batches into the tail cache.
//!
//! Invariant: it is the only writer of the active segment's files, and the written
//! offset only grows.

use super::files::create_active;
use super::{
    io_err, storage_err, ActiveWriter, PartitionLog, Pending, DESCRIPTOR_RETRY, NO_SPACE_RETRY,
};
use crate::batch::batches;
use crate::context::Stage;
use crate::error::StorageError;
use crate::file_cache::is_out_of_descriptors;
use crate::offset_index::{self};
use crate::producer_snapshot;
use crate::tail_cache::CachedBatches;
use crate::time_index::{self};
use std::rc::Rc;
use std::time::Duration;

/// Most bytes one flusher round writes; a larger backlog takes several rounds.
const FLUSH_ROUND_BYTES_MAX: usize = 8 << 20;

/// The index files are written in rounds of their own, not with every log write: a time
/// index entry is 12 bytes, and writing it with each small batch rewrote a 4 KiB block
/// (and dirtied the inode) per flush — about half the device writes of 1,000 busy
/// partitions. They are written once this much of them is pending, once the log has
/// grown this far past what they cover, this long after they were last written, and
/// always before a sync of the segment's seal. Readers use the in-memory copies, which
/// are current; recovery re-reads the log after the last entry on disk, so what this
/// defers costs at most a longer scan after a crash. An offset-index entry is written
/// only once the log is synced up to it (`ActiveWriter::index_unsynced`): recovery
/// trusts the log before the last entry on disk, so a crash that keeps an entry must
/// keep everything before it.
const INDEX_WRITE_PENDING_BYTES: u64 = 4096;
const INDEX_WRITE_LOG_BYTES: u64 = 16 << 20;
const INDEX_WRITE_INTERVAL: Duration = Duration::from_secs(1);

impl PartitionLog {
    /// Writes pending batches, one bounded round at a time, until the log closes.
    pub(super) async fn flusher(log: Rc<PartitionLog>, mut writer: ActiveWriter) {
        loop {
            loop {
                let listener = log.work.listen();
                {
                    let st = log.state.borrow();
                    if st.failure.is_some() {
                        return; // a failed log writes nothing more
                    }
                    if (!st.pending.is_empty() || st.closing) && log.write_holds.get() == 0 {
                        break;
                    }
                }
                let synced = log.state.borrow().synced_offset;
                if !writer.index.has_unflushed()
                    && !writer.time_index.has_unflushed()
                    && !writer
                        .index_unsynced
                        .front()
                        .is_some_and(|(offset, _)| *offset <= synced)
                {
                    listener.await;
                    continue;
                }
                // Idle with index entries not yet on disk: write them when they are due.
                let due = INDEX_WRITE_INTERVAL
                    .saturating_sub(log.context.runtime.since(writer.indexes_written_at))
                    .max(DESCRIPTOR_RETRY);
                let woken = futures_lite::future::or(
                    async {
                        listener.await;
                        true
                    },
                    async {
                        log.context.runtime.sleep(due).await;
                        false
                    },
                )
                .await;
                if !woken {
                    let synced = log.state.borrow().synced_offset;
                    match log.write_indexes(&mut writer, synced).await {
                        // No descriptor or no space: tried again after the next wait,
                        // appends first.
                        Err(e) if e.is_transient() => {}
                        Err(e) => {
                            log.fail(e);
                            return;
                        }
                        Ok(()) => {}
                    }
                }
            }
            if let Err(e) = log.flush_once(&mut writer).await {
                log.fail(e);
                return;
            }
            log.space_again();
            log.sync_work.notify(1);
            let (closing, empty) = {
                let st = log.state.borrow();
                (st.closing, st.pending.is_empty())
            };
            if closing && empty {
                if let Err(e) = writer.log.sync().await {
                    // Nothing unsynced may be acknowledged as synced: fail the log.
                    log.fail(storage_err(&log.dir, e));
                    return;
                }
                // Synced: every index entry may go to its file now.
                while let Err(e) = log.write_indexes(&mut writer, i64::MAX).await {
                    if let Err(e) = log.retry_or_fail(e).await {
                        log.fail(e);
                        return;
                    }
                }
                let seal = async {
                    writer.log.truncate_to_logical().await?;
                    // Exactly their entries, so the next open finds nothing to rewrite.
                    writer.index.truncate_to_logical().await?;
                    writer.index.sync().await?;
                    writer.time_index.truncate_to_logical().await?;
                    writer.time_index.sync().await
                };
                if let Err(e) = seal.await {
                    // Nothing unsynced may be acknowledged as synced: fail the log.
                    log.fail(storage_err(&log.dir, e));
                    return;
                }
                // A clean stop leaves nothing to replay at the next open.
                log.snapshot_producers().await;
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
            let too_old = len > 0
                && self.context.runtime.since(writer.opened_at)
                    >= Duration::from_millis(config.segment_ms);
            // Index entries hold offsets relative to the segment base in 32 bits (Kafka
            // rolls at i32::MAX too): a batch that would leave that range starts a segment.
            let too_far = len > 0 && p.next_offset - 1 - writer.base_offset > i64::from(i32::MAX);
            // Kafka rolls when the offset index is full (`segment.index.bytes`); a batch
            // may add one entry.
            let index_full = len > 0
                && writer.index.logical_len() + offset_index::ENTRY_BYTES as u64
                    > u64::from(config.segment_index_bytes);
            if too_big || too_old || too_far || index_full {
                while let Err(e) = self
                    .write_out(writer, &mut new_index, &mut new_time, pushed_upto)
                    .await
                {
                    self.retry_or_fail(e).await?;
                }
                while let Err(e) = self.roll(writer, p.base_offset).await {
                    self.retry_or_fail(e).await?;
                }
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
                    writer.index_unsynced.push_back((h.base_offset, buf));
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
        while let Err(e) = self
            .write_out(writer, &mut new_index, &mut new_time, pushed_upto)
            .await
        {
            self.retry_or_fail(e).await?;
        }

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

    /// An error that only says no descriptor was free, or that the filesystem is full,
    /// is waited out (nothing of the step took effect, so it can run again), closing or
    /// not; any other is returned, to fail the log with. While the filesystem is full the
    /// log refuses new appends, so what waits in memory is bounded by what was queued
    /// before; `space_again` lifts that once a step succeeds. The owner uses it too, for
    /// a step of its own that the log's writes wait on (its leader-epoch checkpoint).
    /// A log that has failed meanwhile (a sync's EIO) stops waiting: its files are
    /// someone else's now — the next open's, which recovered them and appends to them —
    /// and a step run again later would write over that (a roll cutting the segment to
    /// what this log knew of it).
    pub async fn retry_or_fail(&self, e: StorageError) -> Result<(), StorageError> {
        self.fail_if_failed()?;
        // A log closing (the broker stopping) does not wait for space: what is still
        // queued was never acknowledged.
        if e.no_space && !self.state.borrow().closing {
            {
                let mut st = self.state.borrow_mut();
                if st.out_of_space.is_none() {
                    tracing::warn!(dir = %self.dir.display(), error = %e, "filesystem full: appends refused until a write succeeds");
                }
                st.out_of_space = Some(e);
            }
            self.context.runtime.sleep(NO_SPACE_RETRY).await;
            return self.fail_if_failed();
        }
        if !e.out_of_descriptors {
            return Err(e);
        }
        self.context.runtime.sleep(DESCRIPTOR_RETRY).await;
        self.fail_if_failed()
    }

    /// The log's failure, if it has failed.
    fn fail_if_failed(&self) -> Result<(), StorageError> {
        match &self.state.borrow().failure {
            Some(failure) => Err(failure.clone()),
            None => Ok(()),
        }
    }

    /// A write succeeded after the filesystem was found full: appends are accepted again.
    pub fn space_again(&self) {
        if self.state.borrow_mut().out_of_space.take().is_some() {
            tracing::info!(dir = %self.dir.display(), "space again: appends accepted");
        }
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
            // Double what is written (at least the initial reservation), at most one step
            // beyond it, never past the segment size.
            let target = needed
                .saturating_mul(2)
                .max(super::PREALLOCATE_INITIAL_BYTES)
                .min(needed.saturating_add(self.preallocate_step.get()))
                .min(self.config.borrow().segment_bytes.div_ceil(4096) * 4096)
                .max(needed);
            debug_assert_eq!(target % 4096, 0, "whole blocks are reserved");
            // Best effort: a filesystem without fallocate still takes the writes.
            let reserved = match writer.log.file().open().await {
                Ok(file) => file.pre_allocate(target).await,
                Err(e) => Err(e),
            };
            match reserved {
                Ok(()) => writer.preallocated = target,
                // No descriptor or no space now: the write below waits for one or writes
                // into what is left; reserve next round.
                Err(e) if is_out_of_descriptors(&e) || e.raw_os_error() == Some(libc::ENOSPC) => {}
                Err(e) => {
                    tracing::debug!(dir = %self.dir.display(), error = %e, "fallocate failed; appending without preallocation");
                    writer.preallocated = u64::MAX;
                }
            }
        }
        // The log first: an index entry must never point at bytes not yet written.
        let started = self.context.runtime.now();
        writer
            .log
            .flush()
            .await
            .map_err(|e| io_err(&self.dir, &e))?;
        // Published at once, before anything else can fail: what the log file holds is
        // written, whatever happens to the index files next.
        let size = writer.log.logical_len();
        {
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
        }
        let pending = writer.index.unflushed_len() + writer.time_index.unflushed_len();
        if pending >= INDEX_WRITE_PENDING_BYTES
            || writer.log.logical_len() - writer.log_len_at_index_write >= INDEX_WRITE_LOG_BYTES
            || self.context.runtime.since(writer.indexes_written_at) >= INDEX_WRITE_INTERVAL
        {
            let synced = self.state.borrow().synced_offset;
            match self.write_indexes(writer, synced).await {
                // No descriptor or no space for an index file now: its entries wait in
                // the appender for the next round (or the idle timer); recovery covers
                // them meanwhile.
                Err(e) if e.is_transient() => {}
                other => other?,
            }
        }
        self.context
            .observer
            .stage(Stage::Append, self.context.runtime.since(started));
        Ok(())
    }

    /// Writes the index entries pending for the active segment (see
    /// `INDEX_WRITE_PENDING_BYTES`), the offset index's up to `synced` (the log is
    /// durable below it). The log must already hold what they point at.
    async fn write_indexes(
        &self,
        writer: &mut ActiveWriter,
        synced: i64,
    ) -> Result<(), StorageError> {
        assert!(
            !writer.log.has_unflushed(),
            "an index entry never points at data not yet written"
        );
        debug_assert!(
            synced == i64::MAX || synced <= self.state.borrow().synced_offset,
            "only what the log synced"
        );
        while let Some((offset, _)) = writer.index_unsynced.front() {
            if *offset > synced {
                break;
            }
            let (_, entry) = writer.index_unsynced.pop_front().expect("a front entry");
            writer.index.push_slice(&entry);
        }
        writer
            .index
            .flush()
            .await
            .map_err(|e| io_err(&self.dir, &e))?;
        writer
            .time_index
            .flush()
            .await
            .map_err(|e| io_err(&self.dir, &e))?;
        writer.indexes_written_at = self.context.runtime.now();
        writer.log_len_at_index_write = writer.log.logical_len();
        Ok(())
    }

    async fn roll(&self, writer: &mut ActiveWriter, new_base: i64) -> Result<(), StorageError> {
        let dir = &self.dir;
        writer.log.sync().await.map_err(|e| io_err(dir, &e))?;
        // Synced: every index entry may go to its file now.
        self.write_indexes(writer, i64::MAX).await?;
        let seal = async {
            writer.log.truncate_to_logical().await?;
            writer.index.truncate_to_logical().await?;
            writer.index.sync().await?;
            writer.time_index.truncate_to_logical().await?;
            writer.time_index.sync().await
        };
        seal.await.map_err(|e| io_err(dir, &e))?;
        let fresh = create_active(
            dir,
            new_base,
            &self.context.files,
            self.context.runtime.now(),
        )
        .await?;
        let (seg, w) = fresh;
        {
            let mut st = self.state.borrow_mut();
            st.active_file = seg.file.clone();
            st.segments.insert(new_base, seg);
        }
        *writer = w;
        tracing::debug!(dir = %dir.display(), base = new_base, "rolled segment");
        // Everything below `new_base` is now synced in sealed segments: a crash replays
        // producer state from about here at most.
        self.snapshot_producers().await;
        Ok(())
    }

    /// Writes the producer state as the snapshot at the log end (see `producer_snapshot`):
    /// the state there is exact, since it covers every batch queued so far. Batches still
    /// waiting to be written are in it; if a crash loses them the snapshot lies past the
    /// recovered end and the next open uses an older one. The aborted transactions known
    /// in the same instant go to their `.txnindex` files first, and without them no
    /// snapshot is written (`txn`).
    /// A failure is logged, not fatal: the next open replays from an older snapshot.
    async fn snapshot_producers(&self) {
        let (writes, bytes, offset, log_start) = {
            let producers = self.producers.borrow();
            let st = self.state.borrow();
            (
                self.txn_index_writes(),
                producer_snapshot::encode(&producers),
                st.next_offset,
                st.log_start_offset,
            )
        };
        if let Some(writes) = writes {
            if let Err(e) = self.persist_txn_indexes(writes).await {
                tracing::warn!(dir = %self.dir.display(), error = %e, "transaction index not written; producer snapshot skipped");
                return;
            }
        }
        let dir = self.dir.clone();
        let written = self
            .files()
            .disk()
            .run(move |fs| producer_snapshot::write(fs, &dir, offset, &bytes, log_start))
            .await;
        if let Err(e) = written {
            tracing::warn!(dir = %self.dir.display(), offset, error = %e, "producer snapshot not written");
        }
    }
}
