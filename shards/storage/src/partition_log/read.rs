//! Reads and lookups: whole batches from the tail cache or the segment holding an offset,
//! offsets by timestamp and the offset of the largest timestamp.
//!
//! Invariant: nothing at or past the written offset is ever returned, and a read starts
//! with the whole batch that contains the requested offset.

use super::{storage_err, PartitionLog, ReadOutcome};
use crate::batch::{self, batches, BatchHeader, BATCH_HEADER_LEN};
use crate::batch_filter;
use crate::error::ReadError;
use crate::file_cache::SegmentFile;
use crate::file_scan;
use crate::tail_cache::trim_to_whole_batches;
use bytes::Bytes;

/// What a segment read takes beyond the bytes asked for and the index interval: room for
/// the batch that straddles the index interval, so the walk to the wanted batch rarely
/// needs a second read.
const READ_LOOKAHEAD_BYTES: u64 = 16 << 10;

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
                    return Ok(ReadOutcome {
                        end_offset: hw,
                        log_start_offset: lso,
                        records: Bytes::new(),
                    });
                }
                if let Some(records) = st.tail.read(at, max_bytes) {
                    return Ok(ReadOutcome {
                        end_offset: hw,
                        log_start_offset: lso,
                        records: keep_below(records, hw),
                    });
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
            let records = match self.read_segment(&file, pos, size, at, max_bytes).await {
                // Deleted (and unlinked) before its file was opened: the offset is gone,
                // which the next turn answers.
                Err(ReadError::Storage(_)) if !self.state.borrow().segments.contains_key(&base) => {
                    continue
                }
                other => other?,
            };
            if !records.is_empty() {
                return Ok(ReadOutcome {
                    end_offset: hw,
                    log_start_offset: lso,
                    records: keep_below(records, hw),
                });
            }
            // `at` lies past this segment's last batch: continue in the next one.
            match next_base {
                Some(b) if b > at => at = b,
                Some(_) | None => {
                    return Ok(ReadOutcome {
                        end_offset: hw,
                        log_start_offset: lso,
                        records: Bytes::new(),
                    })
                }
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
        let io = |e: std::io::Error| ReadError::Storage(super::io_err(&self.dir, &e));
        let opened = file.open().await.map_err(io)?;
        let lookahead = u64::from(self.config.borrow().index_interval_bytes) + READ_LOOKAHEAD_BYTES;
        let span = |from: u64| (max_bytes as u64 + lookahead).min(size - from) as usize;
        let mut buf_pos = start; // the file position of `buf[0]`
        let mut buf = Bytes::from(
            file_scan::read_exact(&opened, start, span(start))
                .await
                .map_err(io)?,
        );
        let mut at = 0usize;
        let first_len = loop {
            let pos = buf_pos + at as u64;
            if pos >= size {
                // `offset` lies past this segment's last batch.
                return Ok(Bytes::new());
            }
            let rest = buf.get(at..).unwrap_or_default();
            if rest.len() < BATCH_HEADER_LEN && buf_pos + (buf.len() as u64) < size {
                // The walk left what was read: read on from here.
                buf_pos = pos;
                buf = Bytes::from(
                    file_scan::read_exact(&opened, pos, span(pos))
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
                break total;
            }
            at += total;
        };
        let pos = buf_pos + at as u64;
        let want = (max_bytes.max(first_len) as u64).min(size - pos) as usize;
        let records = match buf.get(at..at + want) {
            Some(_) => buf.slice(at..at + want),
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
            let file = file
                .open()
                .await
                .map_err(|e| ReadError::Storage(super::io_err(&self.dir, &e)))?;
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
            let file = file
                .open()
                .await
                .map_err(|e| ReadError::Storage(super::io_err(&self.dir, &e)))?;
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
