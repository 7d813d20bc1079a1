//! Reads and lookups: whole batches from the tail cache or the segment holding an offset,
//! offsets by timestamp and the offset of the largest timestamp.
//!
//! Invariant: nothing at or past the written offset is ever returned, and a read starts
//! with the whole batch that contains the requested offset. A read for sending may
//! answer with a range of the segment file instead of bytes (`file_range`); the range
//! ends at a batch boundary the index knows, so it holds whole batches without the
//! broker reading them.

use super::{storage_err, PartitionLog, ReadOutcome};
use crate::batch::{self, batches, BatchHeader, BATCH_HEADER_LEN};
use crate::batch_filter;
use crate::error::ReadError;
use crate::file_cache::SegmentFile;
use crate::file_range::{FileRange, FILE_RANGE_MAX_BYTES, FILE_RANGE_MIN_BYTES};
use crate::file_scan;
use crate::records::Records;
use crate::records::{concat_chunks, trim_to_whole_batches};
use bytes::Bytes;

/// What a segment read takes beyond the bytes asked for and the index interval: room for
/// the batch that straddles the index interval, so the walk to the wanted batch rarely
/// needs a second read.
const READ_LOOKAHEAD_BYTES: u64 = 16 << 10;

/// Where the walk to a wanted batch stopped: `buf` was read at `buf_pos`, and the batch
/// starts at `buf[at]` and is `first_len` long.
struct FoundBatch {
    buf: Bytes,
    buf_pos: u64,
    at: usize,
    first_len: usize,
}

impl FoundBatch {
    fn pos(&self) -> u64 {
        self.buf_pos + self.at as u64
    }
}

impl PartitionLog {
    /// Reads whole batches starting with the one containing `offset`, up to `max_bytes`
    /// (at least one batch), all below `end` (the caller's bound: its high watermark, or
    /// `i64::MAX` for everything written). Data of at most one segment is returned per
    /// call. An offset below the log start or past the written offset is out of range;
    /// one at or past `end` but written reads nothing.
    pub async fn read(
        &self,
        offset: i64,
        max_bytes: usize,
        end: i64,
    ) -> Result<ReadOutcome, ReadError> {
        let (end_offset, log_start_offset, records) =
            self.read_records(offset, max_bytes, end, false).await?;
        let Records::Memory(records) = records else {
            unreachable!("read_records returns bytes unless asked for a file range");
        };
        Ok(ReadOutcome {
            end_offset,
            log_start_offset,
            records,
        })
    }

    /// [`Self::read`] for records that go to a socket: what comes from a segment file
    /// (and is at least `FILE_RANGE_MIN_BYTES`) is answered as a range of the file
    /// instead of its bytes ([`FileRange`]), to be sent without entering user space.
    /// Returns (the bound the read was held to, the log start offset, the records).
    pub async fn read_for_send(
        &self,
        offset: i64,
        max_bytes: usize,
        end: i64,
    ) -> Result<(i64, i64, Records), ReadError> {
        self.read_records(offset, max_bytes, end, true).await
    }

    async fn read_records(
        &self,
        offset: i64,
        max_bytes: usize,
        end: i64,
        allow_file: bool,
    ) -> Result<(i64, i64, Records), ReadError> {
        let mut at = offset;
        loop {
            let (hw, lso, target) = {
                let st = self.state.borrow();
                let written = st.written_offset;
                let hw = written.min(end);
                let lso = st.log_start_offset;
                if let Some(f) = &st.failure {
                    return Err(ReadError::Storage(f.clone()));
                }
                if at < lso || at > written {
                    return Err(ReadError::OffsetOutOfRange {
                        offset: at,
                        log_start_offset: lso,
                        end_offset: written,
                    });
                }
                if at >= hw {
                    return Ok((hw, lso, Records::default()));
                }
                if let Some(chunks) = st.tail.read_chunks(at, max_bytes) {
                    let chunks = keep_chunks_below(chunks, hw);
                    // Sent by reference, entry by entry; anyone else gets one buffer.
                    let records = if allow_file {
                        Records::from_chunks(chunks)
                    } else {
                        Records::Memory(concat_chunks(chunks))
                    };
                    return Ok((hw, lso, records));
                }
                let Some((_, seg)) = st.segments.range(..=at).next_back() else {
                    return Err(ReadError::OffsetOutOfRange {
                        offset: at,
                        log_start_offset: lso,
                        end_offset: hw,
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
                    (
                        seg.base_offset,
                        seg.file.clone(),
                        u64::from(pos),
                        seg.size,
                        next_base,
                    ),
                )
            };
            let (base, file, pos, size, next_base) = target;
            if allow_file && max_bytes >= FILE_RANGE_MIN_BYTES {
                match self
                    .segment_range(&file, base, pos, size, at, max_bytes, hw)
                    .await
                {
                    Ok(Some(range)) => return Ok((hw, lso, Records::File(range))),
                    // Too little for a range, or the segment changed: read it below.
                    Ok(None) => {}
                    Err(ReadError::Storage(_))
                        if !self.state.borrow().segments.contains_key(&base) =>
                    {
                        continue
                    }
                    Err(e) => return Err(e),
                }
            }
            let records = match self.read_segment(&file, pos, size, at, max_bytes).await {
                // Deleted (and unlinked) before its file was opened: the offset is gone,
                // which the next turn answers.
                Err(ReadError::Storage(_)) if !self.state.borrow().segments.contains_key(&base) => {
                    continue
                }
                other => other?,
            };
            if !records.is_empty() {
                return Ok((hw, lso, Records::Memory(keep_below(records, hw))));
            }
            // `at` lies past this segment's last batch: continue in the next one.
            match next_base {
                Some(b) if b > at => at = b,
                Some(_) | None => return Ok((hw, lso, Records::default())),
            }
        }
    }

    /// The batches of one segment from the one containing `offset`, found from the index
    /// entry at `start`. One read covers the walk from the entry to that batch (at most
    /// about one index interval and one batch) and the range returned, so a fetch costs
    /// one disk read; only a walk or a first batch longer than that read reads again.
    async fn read_segment(
        &self,
        file: &SegmentFile,
        start: u64,
        size: u64,
        offset: i64,
        max_bytes: usize,
    ) -> Result<Bytes, ReadError> {
        let io = |e: std::io::Error| self.read_io_err(e);
        let opened = file.open().await.map_err(io)?;
        let span = max_bytes as u64 + self.lookahead();
        let Some(found) = self.find_batch(&opened, start, size, offset, span).await? else {
            return Ok(Bytes::new());
        };
        let pos = found.pos();
        let want = (max_bytes.max(found.first_len) as u64).min(size - pos) as usize;
        let records = match found.buf.get(found.at..found.at + want) {
            Some(_) => found.buf.slice(found.at..found.at + want),
            None => Bytes::from(
                file_scan::read_exact(&opened, pos, want)
                    .await
                    .map_err(io)?,
            ),
        };
        drop(opened);
        let records = trim_to_whole_batches(records, max_bytes);
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

    /// An I/O error of a read, as the read answers it.
    fn read_io_err(&self, e: std::io::Error) -> ReadError {
        ReadError::Storage(super::io_err(&self.dir, &e))
    }

    /// How far past the bytes asked for a segment read reaches: the walk from an index
    /// entry to the wanted batch.
    fn lookahead(&self) -> u64 {
        u64::from(self.config.borrow().index_interval_bytes) + READ_LOOKAHEAD_BYTES
    }

    /// Walks the batch headers of `opened` from `start` (an index entry's position) to
    /// the batch holding `offset`, reading `span` bytes at a time; `None` when `offset`
    /// lies past the segment's last batch.
    async fn find_batch(
        &self,
        opened: &crate::segment_io::OpenFile,
        start: u64,
        size: u64,
        offset: i64,
        span: u64,
    ) -> Result<Option<FoundBatch>, ReadError> {
        let io = |e: std::io::Error| self.read_io_err(e);
        let read_from = |from: u64| span.min(size - from) as usize;
        let mut buf_pos = start; // the file position of `buf[0]`
        let mut buf = Bytes::from(
            file_scan::read_exact(opened, start, read_from(start))
                .await
                .map_err(io)?,
        );
        let mut at = 0usize;
        loop {
            let pos = buf_pos + at as u64;
            if pos >= size {
                return Ok(None);
            }
            let rest = buf.get(at..).unwrap_or_default();
            if rest.len() < BATCH_HEADER_LEN && buf_pos + (buf.len() as u64) < size {
                // The walk left what was read: read on from here.
                buf_pos = pos;
                buf = Bytes::from(
                    file_scan::read_exact(opened, pos, read_from(pos))
                        .await
                        .map_err(io)?,
                );
                at = 0;
                continue;
            }
            // Bytes inside the written log that are not a batch: never answer "no data"
            // (the consumer would refetch the same offset forever).
            let corrupt = |source| ReadError::Corrupt { offset, source };
            let h = BatchHeader::parse(rest).map_err(corrupt)?;
            let total = h.total_len();
            if pos + total as u64 > size {
                return Err(corrupt(batch::BatchError::Truncated));
            }
            if h.last_offset() >= offset {
                return Ok(Some(FoundBatch {
                    buf,
                    buf_pos,
                    at,
                    first_len: total,
                }));
            }
            at += total;
        }
    }

    /// The batches from the one holding `offset` as a range of the segment file, ending
    /// at a batch boundary the segment's index knows (or its end), at most `max_bytes`
    /// past the start (or the first batch), all below `hw`. Only the walk to the first
    /// batch is read here (about one index interval); the range itself is read by the
    /// kernel when it is sent. `None` when no known boundary gives a range of at least
    /// `FILE_RANGE_MIN_BYTES`, or the segment changed meanwhile: the caller reads bytes.
    #[allow(clippy::too_many_arguments)]
    async fn segment_range(
        &self,
        file: &SegmentFile,
        base: i64,
        start: u64,
        size: u64,
        offset: i64,
        max_bytes: usize,
        hw: i64,
    ) -> Result<Option<FileRange>, ReadError> {
        let io = |e: std::io::Error| self.read_io_err(e);
        let opened = file.open().await.map_err(io)?;
        let found = self
            .find_batch(&opened, start, size, offset, self.lookahead())
            .await?;
        drop(opened);
        let Some(found) = found else {
            return Ok(None);
        };
        let pos = found.pos();
        let limit = pos + max_bytes.max(found.first_len) as u64;
        let end = {
            let st = self.state.borrow();
            let Some(seg) = st.segments.get(&base).filter(|s| s.file.same(file)) else {
                return Ok(None);
            };
            let next_base = st.segments.range(base + 1..).next().map(|(b, _)| *b);
            // The segment's end is a boundary; it is below `hw` when every offset of the
            // segment is (sealed: below the next base; active: the written end).
            let whole_below_hw = match next_base {
                Some(next) => next <= hw,
                None => st.written_offset <= hw,
            };
            if seg.size <= limit && whole_below_hw {
                Some(seg.size)
            } else {
                // The last index entry at or before `limit` whose batch starts at or below
                // `hw`: every batch before it is whole and below `hw`.
                let entries = seg.index.entries();
                let upto = entries.partition_point(|e| u64::from(e.position) <= limit);
                entries[..upto]
                    .iter()
                    .rev()
                    .find(|e| seg.base_offset + i64::from(e.relative_offset) <= hw)
                    .map(|e| u64::from(e.position))
            }
        };
        let Some(end) = end.filter(|e| *e >= pos + found.first_len as u64) else {
            return Ok(None);
        };
        let len = (end - pos) as usize;
        if !(FILE_RANGE_MIN_BYTES..=FILE_RANGE_MAX_BYTES).contains(&len) {
            return Ok(None);
        }
        debug_assert!(
            end <= size,
            "a range never passes the segment's written end"
        );
        if file.is_pinned() {
            // A compaction swap is giving the name to the cleaned copy: opened by name,
            // the range could be cut from the new file. Read the bytes (through the
            // pinned descriptor) instead. Checked right before the open, with no await
            // between: the pin comes before the rename.
            return Ok(None);
        }
        if self.files().disk().memory().is_some() {
            // No descriptor to send from: the caller reads the bytes.
            return Ok(None);
        }
        match std::fs::File::open(file.path()) {
            Ok(f) => Ok(Some(FileRange::new(f, pos, len))),
            // Out of descriptors or deleted meanwhile: the caller reads the bytes.
            Err(_) => Ok(None),
        }
    }

    /// The first offset whose record timestamp is at or after `timestamp_ms`, with that
    /// timestamp; `None` when every record is older.
    pub async fn offset_for_timestamp(
        &self,
        timestamp_ms: i64,
    ) -> Result<Option<(i64, i64)>, ReadError> {
        let candidates: Vec<(SegmentFile, u64, u64)> = {
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
        let hw = self.written_offset();
        // Records below the log start are gone for consumers (DeleteRecords may stop
        // inside a segment; held segments may outlive their deletion a little).
        let lso = self.log_start_offset();
        for (file, pos, size) in candidates {
            let file = file.open().await.map_err(|e| self.read_io_err(e))?;
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
        let files: Vec<(SegmentFile, u64)> = {
            let st = self.state.borrow();
            st.segments
                .values()
                .filter(|s| s.size > 0)
                .map(|s| (s.file.clone(), s.size))
                .collect()
        };
        let hw = self.written_offset();
        let lso = self.log_start_offset();
        let mut best: Option<(i64, i64)> = None;
        for (file, size) in files {
            let file = file.open().await.map_err(|e| self.read_io_err(e))?;
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

/// The leading batches of `records` that lie wholly below `end`. Bounds fall on batch
/// boundaries (written, synced and replicated offsets all do), so only a read bounded
/// below the written offset drops anything.
/// [`keep_below`] over the tail cache's chunks, in order.
fn keep_chunks_below(chunks: Vec<Bytes>, end: i64) -> Vec<Bytes> {
    let mut out = Vec::with_capacity(chunks.len());
    for c in chunks {
        let whole_len = c.len();
        let kept = keep_below(c, end);
        let whole = kept.len() == whole_len;
        if !kept.is_empty() {
            out.push(kept);
        }
        if !whole {
            break;
        }
    }
    out
}

fn keep_below(records: Bytes, end: i64) -> Bytes {
    let mut len = 0;
    for item in batches(&records) {
        match item {
            Ok((h, range)) if h.last_offset() < end => len = range.end,
            _ => break,
        }
    }
    if len == records.len() {
        records
    } else {
        records.slice(..len)
    }
}
