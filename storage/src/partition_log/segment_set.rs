//! The set of segments: counts and sizes, what the cleaner sees of sealed segments and
//! the swap for their cleaned copies, holds that keep segments from being deleted, and
//! deletion below an offset (renamed first, unlinked in the background).
//!
//! Invariant: the active segment is never deleted or swapped; no segment is deleted
//! while a hold is alive.

use super::files::sync_dir;
use super::PartitionLog;
use crate::file_cache::SegmentFile;
use crate::segment::{self, Segment, LOG_SUFFIX};
use std::time::Duration;

/// Suffix added to a deleted segment's files until they are unlinked.
pub(super) const DELETED_SUFFIX: &str = ".deleted";

/// What the cleaner sees of one sealed segment.
pub(crate) struct SealedSegment {
    pub base_offset: i64,
    /// Base of the segment after it: every offset of this one is below.
    pub next_base: i64,
    pub file: SegmentFile,
    pub size: u64,
    pub max_timestamp_ms: i64,
    pub cleaned_at_ms: Option<i64>,
}

/// Keeps a log's segments from being deleted while it lives (see `hold_segments`).
pub(crate) struct SegmentHold<'a>(&'a std::cell::Cell<usize>);

impl Drop for SegmentHold<'_> {
    fn drop(&mut self) {
        self.0.set(self.0.get() - 1);
    }
}

impl PartitionLog {
    pub fn segment_count(&self) -> usize {
        self.state.borrow().segments.len()
    }

    /// Deletes every sealed segment that lies wholly below `offset` and moves the log
    /// start offset up to the first segment left (it never moves back). The active
    /// segment is never deleted. Returns how many segments went.
    ///
    /// The files are renamed `*.deleted` at once and unlinked `file.delete.delay.ms`
    /// later; a reader that already took the segment opens it under the new name, or
    /// keeps reading the descriptor it has (an open file outlives its name), and one that
    /// finds it unlinked answers as if the offset were gone (`read`), so a deletion never
    /// fails a fetch in flight.
    ///
    /// Crash safety: segments go from the front, so a crash leaves a contiguous log
    /// whose start is the first remaining segment (or the checkpoint, if later);
    /// leftover `*.deleted` files are removed at the next open.
    pub async fn delete_segments_before(&self, offset: i64) -> usize {
        if self.held.get() > 0 || self.state.borrow().closing {
            return 0;
        }
        let doomed: Vec<(i64, SegmentFile)> = {
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
                // Their aborted transactions go with the segments that held the markers.
                self.aborted.borrow_mut().remove_below(first);
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
        let disk = self.context.files.disk().clone();
        let mut renamed = Vec::with_capacity(doomed.len() * 3);
        for (base, file) in &doomed {
            for suffix in [LOG_SUFFIX].into_iter().chain(segment::COMPANION_SUFFIXES) {
                let path = segment::file_path(&self.dir, *base, suffix);
                let gone = path.with_extension(format!("{suffix}{DELETED_SUFFIX}"));
                match disk.fs().rename(&path, &gone) {
                    Ok(()) => {
                        if suffix == LOG_SUFFIX {
                            // A reader that took the segment before it went opens it
                            // under its new name.
                            file.renamed(gone.clone());
                        }
                        renamed.push(gone)
                    }
                    Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
                    Err(e) => {
                        tracing::warn!(path = %path.display(), error = %e, "deleting a segment file")
                    }
                }
            }
        }
        let _ = sync_dir(&self.dir, &self.context.files).await;
        let delay = self.config.borrow().file_delete_delay_ms.max(0) as u64;
        let unlink = move || {
            for path in renamed {
                match disk.fs().remove_file(&path) {
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
            let runtime = self.context.runtime.clone();
            self.context.runtime.spawn(async move {
                runtime.sleep(Duration::from_millis(delay)).await;
                unlink();
            });
        }
        tracing::debug!(dir = %self.dir.display(), segments = doomed.len(), "deleted segments");
        doomed.len()
    }

    /// Sizes and newest timestamps of the segments, oldest first (the last is active).
    pub fn segment_stats(&self) -> Vec<crate::retention::SegmentStat> {
        self.state
            .borrow()
            .segments
            .values()
            .map(|s| crate::retention::SegmentStat {
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
    pub(crate) fn swap_segments(&self, replaced: &[(i64, SegmentFile)], seg: Segment) -> bool {
        let mut st = self.state.borrow_mut();
        let active_base = st.segments.keys().next_back().copied();
        let intact = replaced.iter().all(|(base, file)| {
            Some(*base) != active_base && st.segments.get(base).is_some_and(|s| s.file.same(file))
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
}
