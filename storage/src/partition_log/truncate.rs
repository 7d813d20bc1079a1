//! Truncating a closed log's directory so that the log ends at an offset: what a follower
//! does when it finds that its log diverged from its leader's (Kafka's `Log.truncateTo`),
//! between closing the log and opening it again.
//!
//! What goes: every batch whose last offset is at or past the offset. Batches are whole,
//! so a batch that straddles the offset goes too, and the log then ends at that batch's
//! base offset, below the offset asked for. Segments starting at or past the offset go
//! with all their files; the segment holding the cut is truncated there, with its index
//! entries at or past the cut; producer snapshots past the new end go, so that `open`
//! rebuilds the producer state from what remains (from the newest snapshot left, or by
//! replaying the last segments as after a crash without one); the cleaner checkpoint
//! comes down to the new end, so what is appended next counts as dirty. A log that
//! starts at or past the offset is reset to an empty log starting at it (Kafka's
//! `truncateFullyAndStartAt`): its log-start checkpoint is set to the offset and every
//! producer snapshot goes.
//!
//! Where the log goes on: the log is left ending in an empty active segment named by the
//! new end, except when the cut falls in the active segment, which is then cut in place.
//! A sealed segment that was cut stays sealed — synced, trusted, never re-validated:
//! only an active segment is recovered, and a cut sealed one holds nothing unsynced.
//!
//! Batches are found by their headers (framing, magic, ascending offsets), as reads find
//! them; CRCs are not checked here. Whatever of the active segment's tail is torn,
//! `open`'s recovery still cuts.
//!
//! Order of the changes, each one durable before the next, so that a crash anywhere
//! leaves a log that `open` recovers to a prefix of the log as it was — never data after
//! a hole:
//! 1. the cleaner checkpoint is lowered to the new end (more dirty data only costs a
//!    cleaner pass), and producer snapshots past the new end are deleted (`open` replays
//!    from an older one, or the last segments);
//! 2. the segments past the first one at or after the offset are removed, the last first,
//!    each one's log file after its other files (an index never outlives its log, to be
//!    taken later for a new segment of the same name);
//! 3. that first one is emptied in place (other files removed, log truncated to zero): it
//!    is the active segment from now on, and the segments before it stay sealed;
//! 4. the segment holding the cut is cut — its index files first, so they never name
//!    bytes that are gone — or removed when nothing of it stays. After a crash here the
//!    log has no records between the cut and the empty active segment: a gap, which
//!    reads skip as they skip what compaction removed;
//! 5. the empty active segment is renamed to the new end;
//! 6. the log-start checkpoint is lowered to the new end (set to the offset for a reset).
//!    Last: lowered before the cut, a crash would show again the records DeleteRecords
//!    removed.
//!
//! Invariant: the log start never moves below the first remaining segment's base, and
//! the log end afterwards is at most the offset.

use super::{io_err, storage_err, PartitionLog};
use crate::batch::{BatchHeader, BATCH_HEADER_LEN, CURRENT_MAGIC};
use crate::checkpoint;
use crate::error::StorageError;
use crate::fs::{Fs, FsFile};
use crate::offset_index::{self, OffsetIndex};
use crate::producer_snapshot;
use crate::retention::LOG_START_CHECKPOINT;
use crate::segment::{self, COMPANION_SUFFIXES, INDEX_SUFFIX, LOG_SUFFIX, TIME_INDEX_SUFFIX};
use crate::time_index::{self, TimeIndex};
use crate::txn_index;
use std::path::Path;

/// What [`PartitionLog::truncate_closed`] did, for the caller's log line.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct TruncateOutcome {
    /// Where the log ends now, as `open` finds it: the offset asked for, or the base of
    /// the batch that straddled it. When nothing changed, the end as found (at most the
    /// offset).
    pub log_end_offset: i64,
    /// Whether anything changed: `false` when the log already ended at or before the
    /// offset.
    pub truncated: bool,
    /// Whether the log started at or past the offset and was reset to empty there.
    pub reset: bool,
    /// Segments none of whose records remain (their files removed, or the one left as
    /// the empty active segment emptied).
    pub segments_removed: usize,
}

/// Where a walk over a segment's batch headers stopped.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Walked {
    /// The first batch whose last offset is at or past the target: its file position and
    /// base offset.
    Found { position: u64, base_offset: i64 },
    /// No such batch; the offset after the last batch seen (the walk's start offset when
    /// it saw none).
    End { next_offset: i64 },
}

/// What the truncation will do, decided before anything changes.
#[derive(Debug)]
struct Plan {
    new_end: i64,
    /// The segment the cut falls in (the last one starting below the offset) and the
    /// position of the cut; `None` when no segment starts below the offset (a reset) or
    /// nothing of that segment is at or past the offset.
    cut: Option<(i64, u64)>,
    /// Segments starting at or past the offset, ascending.
    later: Vec<i64>,
    /// No segment starts below the offset: the log is reset to empty at it.
    reset: bool,
}

impl PartitionLog {
    /// Makes the closed log in `dir` end at `offset`, durably: every batch whose last
    /// offset is at or past it goes (see the module doc of `truncate` for what goes, the
    /// order of the changes and why a crash midway is safe). Nothing changes when the log
    /// already ends at or before `offset`. The caller has closed the log and opens it
    /// again afterwards with [`PartitionLog::open`].
    ///
    /// Blocking (`std::fs`, `fsync`s): run it off the reactor, e.g. with glommio's
    /// `spawn_blocking`.
    pub fn truncate_closed(
        fs: &dyn Fs,
        dir: &Path,
        offset: i64,
    ) -> Result<TruncateOutcome, StorageError> {
        if offset < 0 {
            return Err(storage_err(
                dir,
                format!("truncation to negative offset {offset}"),
            ));
        }
        // As `open` does first: finish or undo an interrupted compaction swap, so the
        // segment list is sound.
        crate::segment_swap::recover_swaps(fs, dir)?;
        let bases = list_segments(fs, dir)?;
        let plan = match plan(fs, dir, &bases, offset)? {
            Ok(plan) => plan,
            Err(log_end_offset) => {
                return Ok(TruncateOutcome {
                    log_end_offset,
                    truncated: false,
                    reset: false,
                    segments_removed: 0,
                })
            }
        };
        let steps = plan.steps(offset);
        for step in &steps {
            apply(fs, dir, *step)?;
        }
        let outcome = TruncateOutcome {
            log_end_offset: plan.new_end,
            truncated: true,
            reset: plan.reset,
            segments_removed: steps
                .iter()
                .filter(|s| matches!(s, Step::RemoveSegment(_) | Step::EmptySegment(_)))
                .count(),
        };
        tracing::info!(dir = %dir.display(), offset, new_end = outcome.log_end_offset, removed = outcome.segments_removed, reset = outcome.reset, "truncated the log");
        Ok(outcome)
    }
}

impl PartitionLog {
    /// Empties the closed log in `dir` and starts it at `start`, durably (Kafka's
    /// `truncateFullyAndStartAt`): for a follower whose log ends below its leader's log
    /// start, so that nothing it holds can continue the leader's. Every segment and
    /// producer snapshot goes; one empty segment named `start` is left, and the log-start
    /// checkpoint says `start`. The order of the changes is the truncation's (a crash
    /// midway leaves a prefix of the old log, and a retry finishes).
    ///
    /// Blocking, as [`PartitionLog::truncate_closed`].
    pub fn reset_closed(
        fs: &dyn Fs,
        dir: &Path,
        start: i64,
    ) -> Result<TruncateOutcome, StorageError> {
        if start < 0 {
            return Err(storage_err(
                dir,
                format!("reset to negative offset {start}"),
            ));
        }
        crate::segment_swap::recover_swaps(fs, dir)?;
        let bases = list_segments(fs, dir)?;
        if bases.is_empty() {
            let path = segment::file_path(dir, start, LOG_SUFFIX);
            fs.create(&path).map_err(|e| io_err(&path, &e))?;
            sync_dir(fs, dir)?;
            apply(fs, dir, Step::SetStartCheckpoint(start))?;
        } else {
            let plan = Plan {
                new_end: start,
                cut: None,
                later: bases.clone(),
                reset: true,
            };
            for step in plan.steps(start) {
                apply(fs, dir, step)?;
            }
        }
        tracing::info!(dir = %dir.display(), start, removed = bases.len(), "reset the log to start at its leader's log start");
        Ok(TruncateOutcome {
            log_end_offset: start,
            truncated: true,
            reset: true,
            segments_removed: bases.len(),
        })
    }
}

/// Base offsets of the segments in `dir`, ascending (`*.deleted` leftovers are no
/// segments).
fn list_segments(fs: &dyn Fs, dir: &Path) -> Result<Vec<i64>, StorageError> {
    let mut bases = Vec::new();
    for entry in fs.read_dir(dir).map_err(|e| storage_err(dir, e))? {
        if let Some(base) = entry
            .file_name()
            .and_then(|n| n.to_str())
            .and_then(segment::parse_log_file_name)
        {
            bases.push(base);
        }
    }
    bases.sort_unstable();
    Ok(bases)
}

/// The plan for truncating at `offset`, or `Err(log end)` when the log already ends at
/// or before it.
fn plan(
    fs: &dyn Fs,
    dir: &Path,
    bases: &[i64],
    offset: i64,
) -> Result<Result<Plan, i64>, StorageError> {
    let split = bases.partition_point(|b| *b < offset);
    let (below, later) = bases.split_at(split);
    let holder = below.last().copied();
    let walked = holder
        .map(|base| walk_segment(fs, dir, base, offset))
        .transpose()?;
    // (holder, cut position, base offset of the first batch that goes)
    let cut = match (holder, walked) {
        (
            Some(base),
            Some(Walked::Found {
                position,
                base_offset,
            }),
        ) => Some((base, position, base_offset)),
        _ => None,
    };
    if later.is_empty() {
        // The cut falls in the active segment, or the log ends before `offset`. (No
        // segment at all: an empty log at 0, as `open` makes it.)
        let Some((base, position, first_gone)) = cut else {
            return Ok(Err(match walked {
                Some(Walked::End { next_offset }) => next_offset,
                _ => 0,
            }));
        };
        return Ok(Ok(Plan {
            // Emptied, the active segment ends at its own base.
            new_end: if position == 0 {
                base
            } else {
                first_gone.min(offset)
            },
            cut: Some((base, position)),
            later: Vec::new(),
            reset: false,
        }));
    }
    // An empty active segment at exactly `offset` after everything below it: the log
    // already ends there.
    if cut.is_none() && later == [offset] && !holds_batches(fs, dir, offset)? {
        return Ok(Err(offset));
    }
    Ok(Ok(Plan {
        new_end: cut.map_or(offset, |(_, _, first_gone)| first_gone.min(offset)),
        cut: cut.map(|(base, position, _)| (base, position)),
        later: later.to_vec(),
        reset: holder.is_none(),
    }))
}

/// Walks the segment at `base` from the index entry at or before `offset` to the first
/// batch whose last offset is at or past `offset`. If the entry names no batch (an index
/// written after a crash lost its log), the walk starts over from the segment start.
fn walk_segment(fs: &dyn Fs, dir: &Path, base: i64, offset: i64) -> Result<Walked, StorageError> {
    let path = segment::file_path(dir, base, LOG_SUFFIX);
    let file = fs.open(&path, false).map_err(|e| storage_err(&path, e))?;
    let len = file.size().map_err(|e| storage_err(&path, e))?;
    let index = read_offset_index(fs, dir, base, len)?;
    let (from_offset, from_pos) = index.lookup(offset);
    let walked = walk(&*file, len, u64::from(from_pos), from_offset, offset)
        .map_err(|e| storage_err(&path, e))?;
    let saw_none = matches!(walked, Walked::End { next_offset } if next_offset == from_offset);
    if from_pos > 0 && saw_none {
        return walk(&*file, len, 0, base, offset).map_err(|e| storage_err(&path, e));
    }
    Ok(walked)
}

/// Whether the segment at `base` holds a batch (its file may be preallocated zeros).
fn holds_batches(fs: &dyn Fs, dir: &Path, base: i64) -> Result<bool, StorageError> {
    let path = segment::file_path(dir, base, LOG_SUFFIX);
    let file = fs.open(&path, false).map_err(|e| storage_err(&path, e))?;
    let len = file.size().map_err(|e| storage_err(&path, e))?;
    let walked = walk(&*file, len, 0, base, i64::MIN).map_err(|e| storage_err(&path, e))?;
    Ok(matches!(walked, Walked::Found { .. }))
}

/// Walks batch headers from `pos` (where offset `from_offset` starts) while they frame
/// inside the file, carry magic 2 and ascend, to the first whose last offset is at or
/// past `offset`. One header read per batch: the walk spans about one index interval
/// (more after a crash, when the index on disk may lag the log).
fn walk(
    file: &dyn FsFile,
    len: u64,
    mut pos: u64,
    from_offset: i64,
    offset: i64,
) -> std::io::Result<Walked> {
    let mut next_offset = from_offset;
    let mut header = [0u8; BATCH_HEADER_LEN];
    while pos + BATCH_HEADER_LEN as u64 <= len {
        if file.read_at(&mut header, pos)? < header.len() {
            break; // shorter than the length said: the segment ends here
        }
        let Ok(h) = BatchHeader::parse(&header) else {
            break;
        };
        let total = h.total_len() as u64;
        if h.magic != CURRENT_MAGIC || pos + total > len || h.base_offset < next_offset {
            break; // a torn tail, zero padding or a stale batch: the segment ends here
        }
        if h.last_offset() >= offset {
            return Ok(Walked::Found {
                position: pos,
                base_offset: h.base_offset,
            });
        }
        next_offset = h.last_offset().saturating_add(1);
        pos += total;
    }
    Ok(Walked::End { next_offset })
}

fn read_offset_index(
    fs: &dyn Fs,
    dir: &Path,
    base: i64,
    log_len: u64,
) -> Result<OffsetIndex, StorageError> {
    let bytes = read_if_exists(fs, &segment::file_path(dir, base, INDEX_SUFFIX))?;
    Ok(OffsetIndex::decode(base, &bytes, log_len))
}

fn read_if_exists(fs: &dyn Fs, path: &Path) -> Result<Vec<u8>, StorageError> {
    match fs.read(path) {
        Ok(bytes) => Ok(bytes),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(Vec::new()),
        Err(e) => Err(storage_err(path, e)),
    }
}

/// One durable change of a truncation.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Step {
    LowerCleanerCheckpoint(i64),
    RemoveSnapshotsAfter(i64),
    RemoveSegment(i64),
    EmptySegment(i64),
    CutSegment {
        base: i64,
        position: u64,
        new_end: i64,
    },
    RenameSegment {
        from: i64,
        to: i64,
    },
    LowerStartCheckpoint(i64),
    SetStartCheckpoint(i64),
}

impl Plan {
    /// The changes, in the order the module doc gives.
    fn steps(&self, offset: i64) -> Vec<Step> {
        let new_end = self.new_end;
        debug_assert!(
            new_end <= offset,
            "a truncation never ends the log past its offset"
        );
        debug_assert!(
            self.cut.is_some() || !self.later.is_empty(),
            "a plan changes something"
        );
        let mut steps = vec![
            Step::LowerCleanerCheckpoint(new_end),
            // A reset forgets every producer, as Kafka's `truncateFullyAndStartAt` does:
            // none of their batches is left.
            Step::RemoveSnapshotsAfter(if self.reset { i64::MIN } else { new_end }),
        ];
        let active = self.later.first().copied();
        if let Some((first, rest)) = self.later.split_first() {
            steps.extend(rest.iter().rev().map(|base| Step::RemoveSegment(*base)));
            steps.push(Step::EmptySegment(*first));
        }
        steps.extend(self.cut.map(|(base, position)| match (position, active) {
            // Nothing of it stays: the empty active segment takes its place.
            (0, Some(_)) => Step::RemoveSegment(base),
            // It is the active segment: emptied, it stays active at its base (the base of
            // the batch that straddled the offset, the new end).
            (0, None) => Step::EmptySegment(base),
            _ => Step::CutSegment {
                base,
                position,
                new_end,
            },
        }));
        if let Some(first) = active.filter(|first| *first != new_end) {
            steps.push(Step::RenameSegment {
                from: first,
                to: new_end,
            });
        }
        steps.push(if self.reset {
            Step::SetStartCheckpoint(offset)
        } else {
            Step::LowerStartCheckpoint(new_end)
        });
        steps
    }
}

/// Makes one change, durably.
fn apply(fs: &dyn Fs, dir: &Path, step: Step) -> Result<(), StorageError> {
    match step {
        Step::LowerCleanerCheckpoint(to) => {
            lower_checkpoint(fs, dir, checkpoint::CLEANER_CHECKPOINT, to)
        }
        Step::RemoveSnapshotsAfter(end) => remove_snapshots_after(fs, dir, end),
        Step::RemoveSegment(base) => remove_segment(fs, dir, base),
        Step::EmptySegment(base) => empty_segment(fs, dir, base),
        Step::CutSegment {
            base,
            position,
            new_end,
        } => cut_segment(fs, dir, base, position, new_end),
        Step::RenameSegment { from, to } => rename_segment(fs, dir, from, to),
        Step::LowerStartCheckpoint(to) => lower_checkpoint(fs, dir, LOG_START_CHECKPOINT, to),
        Step::SetStartCheckpoint(to) => checkpoint::write(fs, dir, LOG_START_CHECKPOINT, to)
            .map_err(|e| io_err(&dir.join(LOG_START_CHECKPOINT), &e)),
    }
}

/// Lowers the checkpoint `name` to `to` if it is above.
fn lower_checkpoint(fs: &dyn Fs, dir: &Path, name: &str, to: i64) -> Result<(), StorageError> {
    match checkpoint::read(fs, dir, name)? {
        Some(at) if at > to => {
            checkpoint::write(fs, dir, name, to).map_err(|e| io_err(&dir.join(name), &e))
        }
        _ => Ok(()),
    }
}

/// Deletes the producer snapshots past `end`: they remember batches that are gone.
fn remove_snapshots_after(fs: &dyn Fs, dir: &Path, end: i64) -> Result<(), StorageError> {
    let offsets = producer_snapshot::list(fs, dir).map_err(|e| io_err(dir, &e))?;
    let mut any = false;
    for at in offsets.into_iter().filter(|at| *at > end) {
        any |= remove_if_exists(fs, &producer_snapshot::path(dir, at))?;
    }
    if any {
        sync_dir(fs, dir)?;
    }
    Ok(())
}

/// Removes every file of the segment at `base`, the log last.
fn remove_segment(fs: &dyn Fs, dir: &Path, base: i64) -> Result<(), StorageError> {
    remove_companions(fs, dir, base)?;
    remove_if_exists(fs, &segment::file_path(dir, base, LOG_SUFFIX))?;
    sync_dir(fs, dir)
}

/// Leaves of the segment at `base` an empty log file: an active segment's index files
/// are made again when the log opens.
fn empty_segment(fs: &dyn Fs, dir: &Path, base: i64) -> Result<(), StorageError> {
    remove_companions(fs, dir, base)?;
    truncate_file(fs, &segment::file_path(dir, base, LOG_SUFFIX), 0)
}

/// Removes the files of the segment at `base` other than its log, durably.
fn remove_companions(fs: &dyn Fs, dir: &Path, base: i64) -> Result<(), StorageError> {
    let mut any = false;
    for suffix in COMPANION_SUFFIXES {
        any |= remove_if_exists(fs, &segment::file_path(dir, base, suffix))?;
    }
    if any {
        sync_dir(fs, dir)?;
    }
    Ok(())
}

/// Cuts the segment at `base` at `position`, where the first batch that goes starts
/// (`new_end` is at most its base offset): its index entries for what goes first, then
/// the log. An index file is a prefix of entries in order, so the entries kept are a
/// prefix of the file too.
fn cut_segment(
    fs: &dyn Fs,
    dir: &Path,
    base: i64,
    position: u64,
    new_end: i64,
) -> Result<(), StorageError> {
    debug_assert!(
        position > 0,
        "a segment cut to nothing is emptied or removed"
    );
    let index_path = segment::file_path(dir, base, INDEX_SUFFIX);
    let bytes = read_if_exists(fs, &index_path)?;
    let kept = OffsetIndex::decode(base, &bytes, position).len() * offset_index::ENTRY_BYTES;
    if kept < bytes.len() {
        truncate_file(fs, &index_path, kept as u64)?;
    }
    let time_path = segment::file_path(dir, base, TIME_INDEX_SUFFIX);
    let bytes = read_if_exists(fs, &time_path)?;
    // Entries at or past the new end name batches that go: their timestamps must not
    // stay the segment's largest.
    let kept = TimeIndex::decode(base, &bytes, new_end).len() * time_index::ENTRY_BYTES;
    if kept < bytes.len() {
        truncate_file(fs, &time_path, kept as u64)?;
    }
    // Aborted transactions whose marker goes with the cut are forgotten with it.
    let aborted = txn_index::read(fs, dir, base).map_err(|e| io_err(dir, &e))?;
    let kept = aborted.partition_point(|e| e.last_offset < new_end);
    if kept < aborted.len() {
        txn_index::write(fs, dir, base, &aborted[..kept]).map_err(|e| io_err(dir, &e))?;
    }
    truncate_file(fs, &segment::file_path(dir, base, LOG_SUFFIX), position)
}

/// Renames the (empty) log of the segment at `from` to the segment at `to`, whose name
/// no segment holds; stray files of that name from an older life go first.
fn rename_segment(fs: &dyn Fs, dir: &Path, from: i64, to: i64) -> Result<(), StorageError> {
    remove_companions(fs, dir, to)?;
    let target = segment::file_path(dir, to, LOG_SUFFIX);
    debug_assert!(!fs.exists(&target), "no segment is named by the new end");
    let source = segment::file_path(dir, from, LOG_SUFFIX);
    fs.rename(&source, &target)
        .map_err(|e| io_err(&source, &e))?;
    sync_dir(fs, dir)
}

fn truncate_file(fs: &dyn Fs, path: &Path, len: u64) -> Result<(), StorageError> {
    let cut = || -> std::io::Result<()> {
        let mut file = fs.open(path, false)?;
        file.set_len(len)?;
        file.sync_all()
    };
    cut().map_err(|e| io_err(path, &e))
}

/// Whether there was a file to remove.
fn remove_if_exists(fs: &dyn Fs, path: &Path) -> Result<bool, StorageError> {
    match fs.remove_file(path) {
        Ok(()) => Ok(true),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(false),
        Err(e) => Err(io_err(path, &e)),
    }
}

fn sync_dir(fs: &dyn Fs, dir: &Path) -> Result<(), StorageError> {
    fs.sync_dir(dir).map_err(|e| io_err(dir, &e))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::batch::batches;
    use crate::batch_builder::{BatchBuilder, Record};
    use crate::config::{Durability, LogConfig};
    use crate::fs::KernelFs;
    use crate::test_executor::run;
    use crate::{AckLevel, LogContext};
    use std::path::PathBuf;

    fn config() -> LogConfig {
        LogConfig {
            segment_bytes: 1024,
            index_interval_bytes: 256,
            durability: Durability::AckAll,
            ..LogConfig::default()
        }
    }

    /// A batch of `count` keyed records, timestamps growing with `i`.
    fn batch(i: u32, count: usize) -> Vec<u8> {
        let mut b = BatchBuilder::new(1_000_000 + i64::from(i) * 100);
        for r in 0..count {
            let key = format!("k{i}-{r}");
            b.push(&Record {
                key: Some(key.as_bytes()),
                value: Some(&[7u8; 40]),
                headers: &[],
                timestamp_delta: r as i64,
            });
        }
        b.build()
    }

    async fn read_all(log: &PartitionLog) -> Vec<u8> {
        let mut out = Vec::new();
        let mut at = log.log_start_offset();
        while at < log.written_offset() {
            let r = log.read(at, 1 << 20, i64::MAX).await.expect("read");
            let Some(Ok((last, _))) = batches(&r.records).last() else {
                break;
            };
            out.extend_from_slice(&r.records);
            at = last.last_offset() + 1;
        }
        out
    }

    /// What `open` finds in `dir`: (log start, log end, every readable batch). An append
    /// after them must take the log end.
    fn reopen(dir: &Path) -> (i64, i64, Vec<u8>) {
        let dir = dir.to_path_buf();
        run(move || async move {
            let log = PartitionLog::open(dir, config(), LogContext::system())
                .await
                .expect("open");
            let found = (
                log.log_start_offset(),
                log.log_end_offset(),
                read_all(&log).await,
            );
            let t = log.append(&batch(999, 1), 0).expect("append");
            log.wait(t, AckLevel::All).await.expect("ack");
            assert_eq!(t.base_offset, found.1, "appends go on from the log end");
            log.close().await;
            found
        })
    }

    fn copy_dir(from: &Path, to: &Path) {
        std::fs::create_dir_all(to).expect("mkdir");
        for e in std::fs::read_dir(from).expect("dir") {
            let p = e.expect("entry").path();
            std::fs::copy(&p, to.join(p.file_name().expect("name"))).expect("copy");
        }
    }

    /// A log over several segments whose first segment DeleteRecords removed, closed.
    fn write(dir: &Path) {
        let dir = dir.to_path_buf();
        run(move || async move {
            let log = PartitionLog::open(dir, config(), LogContext::system())
                .await
                .expect("open");
            for i in 0..40u32 {
                let t = log
                    .append(&batch(i, 1 + i as usize % 3), 0)
                    .expect("append");
                log.wait(t, AckLevel::All).await.expect("ack");
            }
            let second = log.segment_stats()[1].base_offset;
            log.delete_records(second, i64::MAX).await.expect("delete");
            log.close().await;
        })
    }

    /// The whole batches at the front of `bytes` that end at or before `end`.
    fn batches_below(bytes: &[u8], end: i64) -> &[u8] {
        let mut len = 0;
        for (h, range) in batches(bytes).flatten() {
            if h.last_offset() >= end {
                break;
            }
            len = range.end;
        }
        &bytes[..len]
    }

    #[test]
    fn a_crash_after_any_step_leaves_a_prefix_of_the_log_and_a_retry_finishes() {
        let root = tempfile::tempdir().expect("tempdir");
        let original = root.path().join("original");
        write(&original);
        let bases = list_segments(&KernelFs, &original).expect("segments");
        assert!(bases.len() >= 5 && bases[0] > 0);
        let (start, end, all) = {
            let probe = root.path().join("probe");
            copy_dir(&original, &probe);
            reopen(&probe)
        };
        assert_eq!(start, bases[0]);
        // Inside a middle segment's second batch (which then straddles the offset), at a
        // segment boundary, inside the active segment, and below the log start (a reset).
        let inside = batches(&all)
            .flatten()
            .map(|(h, _)| h)
            .filter(|h| h.base_offset > bases[2] && h.base_offset < bases[3])
            .find(|h| h.last_offset_delta > 0)
            .expect("a batch of several records in the third segment");
        let last = bases[bases.len() - 1];
        let targets = [inside.base_offset + 1, bases[3], last + 1, bases[0] - 1];
        for offset in targets {
            let plan = match plan(&KernelFs, &original, &bases, offset).expect("plan") {
                Ok(plan) => plan,
                Err(end) => panic!("{offset} is below the log end {end}"),
            };
            let steps = plan.steps(offset);
            for done in 0..=steps.len() {
                let crashed: PathBuf = root.path().join(format!("crash-{offset}-{done}"));
                copy_dir(&original, &crashed);
                for step in &steps[..done] {
                    apply(&KernelFs, &crashed, *step).expect("step");
                }
                let retried = root.path().join(format!("retry-{offset}-{done}"));
                copy_dir(&crashed, &retried);
                let (s, e, bytes) = reopen(&crashed);
                assert!(s <= e, "{offset} after {done} steps");
                assert!(
                    plan.new_end <= e && e <= end,
                    "{offset} after {done}: end {e}"
                );
                assert!(all.starts_with(&bytes), "a prefix of the log");
                if done == steps.len() {
                    assert_eq!(e, plan.new_end);
                }
                // The follower tries again after its restart, and ends where it meant to.
                let outcome =
                    PartitionLog::truncate_closed(&KernelFs, &retried, offset).expect("retry");
                assert!(outcome.log_end_offset <= offset);
                let (s, e, bytes) = reopen(&retried);
                assert!(
                    s <= e && e <= offset,
                    "{offset} retried after {done}: end {e}"
                );
                assert_eq!(bytes, batches_below(&all, e), "what stays reads as before");
            }
        }
    }
}
