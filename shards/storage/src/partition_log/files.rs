//! The files of a partition log: opening them for direct I/O, creating an active
//! segment (and making its names durable), loading a segment's indexes, and the
//! flusher's writer over them. Shared by opening, recovery, rolls and deletion.

use super::{storage_err, ActiveWriter};
use crate::aligned_appender::AlignedAppender;
use crate::error::StorageError;
use crate::file_scan;
use crate::offset_index::OffsetIndex;
use crate::segment::{self, Segment, INDEX_SUFFIX, LOG_SUFFIX, TIME_INDEX_SUFFIX};
use crate::time_index::TimeIndex;
use glommio::io::{DmaFile, OpenOptions};
use std::path::Path;
use std::rc::Rc;
use std::time::Instant;

/// Opens an existing file for direct-I/O reads (and the truncation of a torn tail).
pub(super) async fn open_existing(path: &Path) -> Result<DmaFile, StorageError> {
    OpenOptions::new()
        .read(true)
        .write(true)
        .dma_open(path)
        .await
        .map_err(|e| storage_err(path, e))
}

pub(super) async fn open_rw(path: &Path) -> Result<DmaFile, StorageError> {
    OpenOptions::new()
        .read(true)
        .write(true)
        .create(true)
        .dma_open(path)
        .await
        .map_err(|e| storage_err(path, e))
}

pub(super) async fn read_whole(file: &DmaFile, path: &Path) -> Result<Vec<u8>, StorageError> {
    let len = file.file_size().await.map_err(|e| storage_err(path, e))?;
    if len == 0 {
        return Ok(Vec::new());
    }
    file_scan::read_exact(file, 0, len as usize)
        .await
        .map_err(|e| storage_err(path, e))
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
