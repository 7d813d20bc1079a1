//! The files of a partition log: opening them for direct I/O, creating an active
//! segment (and making its names durable), loading a segment's indexes, and the
//! flusher's writer over them. Shared by opening, recovery, rolls and deletion.

use super::{storage_err, ActiveWriter};
use crate::aligned_appender::{alignment_of, AlignedAppender};
use crate::error::StorageError;
use crate::file_cache::{Access, FileCache, SegmentFile};
use crate::file_scan;
use crate::fs::Fs;
use crate::offset_index::OffsetIndex;
use crate::segment::{self, Segment, INDEX_SUFFIX, LOG_SUFFIX, TIME_INDEX_SUFFIX};
use crate::segment_io::OpenFile;
use crate::time_index::TimeIndex;
use std::path::Path;
use std::rc::Rc;
use std::time::Instant;

/// Opens an existing file for reads (and the truncation of a torn tail).
pub(super) async fn open_existing(
    files: &FileCache,
    path: &Path,
) -> Result<OpenFile, StorageError> {
    OpenFile::open(files.disk(), path, false)
        .await
        .map_err(|e| storage_err(path, e))
}

pub(super) async fn read_whole(file: &OpenFile, path: &Path) -> Result<Vec<u8>, StorageError> {
    let len = file.file_size().await.map_err(|e| storage_err(path, e))?;
    if len == 0 {
        return Ok(Vec::new());
    }
    file_scan::read_exact(file, 0, len as usize)
        .await
        .map_err(|e| storage_err(path, e))
}

/// A segment's offset index, with the file's bytes (empty when there is no file).
pub(super) async fn load_index(
    files: &FileCache,
    dir: &Path,
    base: i64,
    log_len: u64,
) -> Result<(OffsetIndex, Vec<u8>), StorageError> {
    let path = segment::file_path(dir, base, INDEX_SUFFIX);
    if !files.disk().fs().exists(&path) {
        return Ok((OffsetIndex::new(base), Vec::new()));
    }
    let file = open_existing(files, &path).await?;
    let bytes = read_whole(&file, &path).await?;
    file.close().await;
    Ok((OffsetIndex::decode(base, &bytes, log_len), bytes))
}

/// A segment's time index, with the file's bytes (empty when there is no file).
pub(super) async fn load_time_index(
    files: &FileCache,
    dir: &Path,
    base: i64,
    next_offset: i64,
) -> Result<(TimeIndex, Vec<u8>), StorageError> {
    let path = segment::file_path(dir, base, TIME_INDEX_SUFFIX);
    if !files.disk().fs().exists(&path) {
        return Ok((TimeIndex::new(base), Vec::new()));
    }
    let file = open_existing(files, &path).await?;
    let bytes = read_whole(&file, &path).await?;
    file.close().await;
    Ok((TimeIndex::decode(base, &bytes, next_offset), bytes))
}

/// Creates (or opens) a segment file through the cache, returning its handle and the
/// block size its direct I/O aligns to.
pub(super) async fn create_file(
    files: &Rc<FileCache>,
    path: std::path::PathBuf,
) -> Result<(SegmentFile, u64), StorageError> {
    let fresh = !files.disk().fs().exists(&path);
    let (file, open) = SegmentFile::open_now(files, path.clone(), Access::Create)
        .await
        .map_err(|e| StorageError::io(path.display(), &e))?;
    if let (true, Some(faults)) = (fresh, file.faults()) {
        faults.created(&path);
    }
    Ok((file, alignment_of(&open)))
}

/// Creates the files of a new, empty active segment and syncs the directory so the
/// names survive a crash.
pub(super) async fn create_active(
    dir: &Path,
    base: i64,
    files: &Rc<FileCache>,
    now: Instant,
) -> Result<(Segment, ActiveWriter), StorageError> {
    let (log_file, log_align) =
        create_file(files, segment::file_path(dir, base, LOG_SUFFIX)).await?;
    let (index_file, index_align) =
        create_file(files, segment::file_path(dir, base, INDEX_SUFFIX)).await?;
    let (time_file, time_align) =
        create_file(files, segment::file_path(dir, base, TIME_INDEX_SUFFIX)).await?;
    sync_dir(dir, files).await?;
    let seg = Segment {
        base_offset: base,
        file: log_file.clone(),
        size: 0,
        index: OffsetIndex::new(base),
        time_index: TimeIndex::new(base),
        max_timestamp_ms: i64::MIN,
        cleaned_at_ms: None,
    };
    let writer = new_writer(
        base,
        [
            AlignedAppender::resume(log_file, log_align, 0, Vec::new()),
            AlignedAppender::resume(index_file, index_align, 0, Vec::new()),
            AlignedAppender::resume(time_file, time_align, 0, Vec::new()),
        ],
        now,
    );
    Ok((seg, writer))
}

pub(super) async fn sync_dir(dir: &Path, files: &FileCache) -> Result<(), StorageError> {
    if let Some(mem) = files.disk().memory() {
        return mem.sync_dir(dir).map_err(|e| storage_err(dir, e));
    }
    let d = files
        .open_beside(|| async {
            glommio::io::Directory::open(dir)
                .await
                .map_err(crate::file_cache::os_error)
        })
        .await
        .map_err(|e| StorageError::io(dir.display(), &e))?;
    d.sync().await.map_err(|e| storage_err(dir, e))?;
    let _ = d.close().await;
    Ok(())
}

/// The flusher's writer over a segment's three appenders, as of `now`: nothing indexed
/// since the segment's base, no timestamp yet (recovery sets what it found).
pub(super) fn new_writer(
    base_offset: i64,
    [log, index, time_index]: [AlignedAppender; 3],
    now: Instant,
) -> ActiveWriter {
    let log_len = log.logical_len();
    ActiveWriter {
        base_offset,
        log,
        index,
        index_unsynced: Default::default(),
        time_index,
        bytes_since_index: 0,
        last_index_offset: base_offset,
        max_timestamp_ms: i64::MIN,
        opened_at: now,
        preallocated: 0,
        indexes_written_at: now,
        log_len_at_index_write: log_len,
    }
}
