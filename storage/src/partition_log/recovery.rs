//! Opening the active (last) segment after a clean stop or a crash.
//!
//! Only the tail after the last offset-index entry is re-read and fully validated
//! (CRC-32C, record structure, increasing offsets), so start-up time depends on the index
//! interval, not on the size of the log. The first invalid byte ends the log: a torn
//! write, zero padding of the last direct-I/O block, or garbage. The file is truncated
//! there and both indexes are rewritten to match, so the next append continues from a
//! valid end — except a whole batch of a newer format (magic above 2, its CRC intact),
//! which a newer release wrote: that refuses the open, naming the file and the byte,
//! rather than cutting acknowledged data off. An index entry that points past the valid log, or at something that is not
//! the batch it names, is dropped and the scan restarts from the entry before it (a
//! truncated or stale index costs a longer scan, never wrong data).
//!
//! What was acknowledged at acks=all (synced) is never behind the truncation point: a
//! synced prefix is valid by construction. The log before the last index entry on disk
//! is trusted unread: the flusher writes an entry only once the log is synced past it
//! (`ActiveWriter::index_unsynced`), so that part survived any crash whole.

use super::files;
use super::Writer;
use crate::aligned_appender::{alignment_of, AlignedAppender};
use crate::batch::{BatchError, CURRENT_MAGIC};
use crate::config::LogConfig;
use crate::error::StorageError;
use crate::file_cache::{Access, FileCache, SegmentFile};
use crate::file_scan::{self, ScanEnd};
use crate::offset_index;
use crate::segment::{self, Segment, INDEX_SUFFIX, LOG_SUFFIX, TIME_INDEX_SUFFIX};
use crate::segment_io::OpenFile;
use crate::time_index;
use std::path::Path;
use std::rc::Rc;

fn err(path: &Path, e: impl std::fmt::Display) -> StorageError {
    StorageError::new(path.display(), e)
}

/// Recovers (or creates) the active segment with base offset `base`, returning its
/// reader view, the flusher's writer and the log end offset.
pub(super) async fn recover_active(
    dir: &Path,
    base: i64,
    config: &LogConfig,
    cache: &Rc<FileCache>,
    now: std::time::Instant,
) -> Result<(Segment, Writer, i64), StorageError> {
    let log_path = segment::file_path(dir, base, LOG_SUFFIX);
    if !cache.disk().fs().exists(&log_path) {
        let (seg, writer) = files::create_active(dir, base, cache, now).await?;
        return Ok((seg, writer, base));
    }
    let (handle, file) = SegmentFile::open_now(cache, log_path.clone(), Access::Create)
        .await
        .map_err(|e| err(&log_path, e))?;
    let file_len = file.file_size().await.map_err(|e| err(&log_path, e))?;
    let (mut index, index_on_disk) = super::files::load_index(cache, dir, base, file_len).await?;

    // Scan from the last trustworthy index entry.
    let mut scanned: Vec<(i64, i64, i64, u64, u64)>; // (base, last, max_ts, pos, len)
    let (start_offset, end_pos) = loop {
        let (start_offset, start_pos) = match index.last() {
            Some(e) => (base + i64::from(e.relative_offset), u64::from(e.position)),
            None => (base, 0),
        };
        scanned = Vec::new();
        let mut expected = start_offset;
        let (end, how) = file_scan::scan(&file, start_pos, file_len, true, |h, pos, bytes| {
            // An index entry names the base offset of the batch it points at exactly.
            // After that, offsets only increase, and may skip: a follower's log copies
            // its leader's, where the cleaner may have removed whole batches.
            let from_entry = scanned.is_empty() && start_pos > 0;
            if h.base_offset < expected || (from_entry && h.base_offset != expected) {
                return false; // a stale batch from an older life of this file
            }
            expected = h.last_offset() + 1;
            scanned.push((
                h.base_offset,
                h.last_offset(),
                h.max_timestamp,
                pos,
                bytes.len() as u64,
            ));
            true
        })
        .await
        .map_err(|e| err(&log_path, e))?;
        if scanned.is_empty() && start_pos > 0 {
            // The entry names no valid batch: drop it and scan from the one before.
            index.truncate_from_position(start_pos as u32);
            continue;
        }
        if let ScanEnd::Invalid {
            position,
            reason: BatchError::NewerMagic(magic),
        } = &how
        {
            // A batch a newer release wrote, whole: cutting the log there would drop it
            // and everything after it. The partition is not opened.
            return Err(err(
                &log_path,
                format!(
                    "the record batch at byte {position} is of a newer format (magic {magic}) \
                     than this release reads (magic {CURRENT_MAGIC}); run the release that wrote it"
                ),
            ));
        }
        if let ScanEnd::Invalid { position, reason } = &how {
            if *position < file_len && !is_zero_padding(&file, *position, file_len).await {
                tracing::warn!(file = %log_path.display(), position, %reason, "truncating torn tail of the log");
            }
        }
        break (start_offset, end);
    };
    let next_offset = scanned.last().map(|s| s.1 + 1).unwrap_or(start_offset);
    let logical_end = end_pos;
    // An entry at or past the valid end names a batch that does not exist.
    index.truncate_from_position(u32::try_from(logical_end).unwrap_or(u32::MAX));
    if logical_end < file_len {
        file.truncate(logical_end)
            .await
            .map_err(|e| err(&log_path, e))?;
    }

    // Rebuild sparse index entries for the scanned tail.
    let mut bytes_since_index = 0u64;
    let mut last_index_offset = index
        .last()
        .map(|e| base + i64::from(e.relative_offset))
        .unwrap_or(base);
    for &(b, _, _, pos, len) in &scanned {
        if b - base > i64::from(i32::MAX) || pos > u64::from(u32::MAX) {
            break; // beyond what a 32-bit relative index entry can name (never written so)
        }
        if bytes_since_index >= u64::from(config.index_interval_bytes)
            && b > last_index_offset
            && pos > 0
        {
            index.append(b, pos as u32);
            last_index_offset = b;
            bytes_since_index = 0;
        }
        bytes_since_index += len;
    }
    let (mut time_index, time_on_disk) =
        super::files::load_time_index(cache, dir, base, next_offset).await?;
    let mut max_ts = time_index.max_timestamp_ms().unwrap_or(i64::MIN);
    for &(b, _, ts, _, _) in &scanned {
        if b - base > i64::from(i32::MAX) {
            break;
        }
        if ts > max_ts {
            time_index.append(ts, b);
            max_ts = ts;
        }
    }

    // Rewrite both index files to exactly the recovered entries.
    let index_path = segment::file_path(dir, base, INDEX_SUFFIX);
    let mut index_bytes = Vec::with_capacity(index.len() * offset_index::ENTRY_BYTES);
    for e in index.entries() {
        offset_index::encode_entry(*e, &mut index_bytes);
    }
    let index_appender =
        resume_or_rewrite(cache, &index_path, &index_bytes, &index_on_disk).await?;
    let time_path = segment::file_path(dir, base, TIME_INDEX_SUFFIX);
    let mut time_bytes = Vec::with_capacity(time_index.len() * time_index::ENTRY_BYTES);
    for e in time_index.entries() {
        time_index::encode_entry(*e, &mut time_bytes);
    }
    let time_appender = resume_or_rewrite(cache, &time_path, &time_bytes, &time_on_disk).await?;

    // Resume the log appender with the partial last block in memory.
    let alignment = alignment_of(&file);
    let block_start = logical_end - logical_end % alignment;
    let tail = if logical_end > block_start {
        file_scan::read_exact(&file, block_start, (logical_end - block_start) as usize)
            .await
            .map_err(|e| err(&log_path, e))?
    } else {
        Vec::new()
    };
    let log_appender = AlignedAppender::resume(handle.clone(), alignment, logical_end, tail);
    let seg = Segment {
        base_offset: base,
        file: handle,
        size: logical_end,
        index,
        time_index,
        max_timestamp_ms: max_ts,
        cleaned_at_ms: None, // the active segment is never cleaned
    };
    let mut writer = files::new_writer(base, [log_appender, index_appender, time_appender], now);
    writer.bytes_since_index = bytes_since_index;
    writer.last_index_offset = last_index_offset;
    writer.max_timestamp_ms = max_ts;
    Ok((seg, writer, next_offset))
}

/// The appender of an index file that must hold exactly `bytes`: the file as it is when
/// it already does (a clean stop leaves both indexes so: nothing to write or sync), else
/// rewritten.
async fn resume_or_rewrite(
    cache: &Rc<FileCache>,
    path: &Path,
    bytes: &[u8],
    on_disk: &[u8],
) -> Result<AlignedAppender, StorageError> {
    if bytes != on_disk {
        return rewrite(cache, path, bytes).await;
    }
    let (handle, alignment) = files::create_file(cache, path.to_path_buf()).await?;
    let len = bytes.len() as u64;
    let tail = bytes
        .get((len - len % alignment) as usize..)
        .unwrap_or_default()
        .to_vec();
    Ok(AlignedAppender::resume(handle, alignment, len, tail))
}

async fn rewrite(
    cache: &Rc<FileCache>,
    path: &Path,
    bytes: &[u8],
) -> Result<AlignedAppender, StorageError> {
    let (handle, alignment) = files::create_file(cache, path.to_path_buf()).await?;
    let file = handle.open().await.map_err(|e| err(path, e))?;
    file.truncate(0).await.map_err(|e| err(path, e))?;
    drop(file);
    let mut appender = AlignedAppender::resume(handle, alignment, 0, Vec::new());
    appender.push_slice(bytes);
    appender.flush().await.map_err(|e| err(path, e))?;
    appender.sync().await.map_err(|e| err(path, e))?;
    Ok(appender)
}

/// Whether the log ends in zeros at `pos` (the padding of the last direct-I/O block or the
/// preallocated, never written rest of the segment — not worth a warning). Looks at one
/// block.
async fn is_zero_padding(file: &OpenFile, pos: u64, end: u64) -> bool {
    let len = (end - pos).min(4096);
    match file_scan::read_exact(file, pos, len as usize).await {
        Ok(b) => b.iter().all(|x| *x == 0),
        Err(_) => false,
    }
}
