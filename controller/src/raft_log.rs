//! The controller quorum's Raft log, vote and commit point on disk: openraft's
//! `RaftLogStorage`, for any type configuration whose entries serialise.
//!
//! Files, all in the log's directory:
//! - `raft.log`: the entries, appended as frames `[length: u32 BE][crc32c: u32 BE][entry
//!   as JSON]`. openraft is told an append is flushed only after an `fdatasync` that
//!   covers it.
//! - `vote`, `committed`, `purged`: one JSON value each, replaced atomically (written to a
//!   temporary file, synced, renamed over the old one, directory synced), so a crash
//!   leaves the old value or the new one, never a torn one.
//!
//! Opening reads every frame; a torn or corrupt frame can only be the tail of an append
//! that was never acknowledged, so the file is cut there. Entries at or below the purge
//! point (`purged`) are skipped. Every entry not purged stays in memory as well (the
//! metadata log is small and is purged behind snapshots), so reads never touch the file.
//!
//! Invariants (asserted): the entries in memory are in index order (consecutive in
//! openraft's use; its storage suite also writes gaps), each with its frame's position in
//! `raft.log`, all after the purge point; the file holds exactly their frames after the
//! purged ones; the purge point never moves back. An append at an index already held
//! first truncates there. Truncation cuts the file at the first removed frame; purging drops entries
//! from memory and records the point, and the file is rewritten without them (atomically)
//! once they are more than half of it.
//!
//! All I/O is synchronous: this runs on the controller's own thread, never on a shard's.

use openraft::storage::{LogFlushed, RaftLogStorage};
use openraft::{
    LogId, LogState, OptionalSend, RaftLogId, RaftLogReader, RaftTypeConfig, StorageError,
    StorageIOError, Vote,
};
use serde::de::DeserializeOwned;
use serde::Serialize;
use std::collections::BTreeMap;
use std::fmt::Debug;
use std::fs::{self, File, OpenOptions};
use std::io::{self, Read, Write};
use std::ops::{Bound, RangeBounds};
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex, MutexGuard};

const LOG_FILE: &str = "raft.log";
const VOTE_FILE: &str = "vote";
const COMMITTED_FILE: &str = "committed";
const PURGED_FILE: &str = "purged";
const FRAME_HEADER: usize = 8;
/// A frame longer than this is corruption, not an entry (metadata commands are small).
const FRAME_MAX: usize = 64 << 20;

type NodeIdOf<C> = <C as RaftTypeConfig>::NodeId;

/// The log store; clones share it (openraft's log reader is one).
pub struct RaftLog<C: RaftTypeConfig> {
    inner: Arc<Mutex<Inner<C>>>,
}

impl<C: RaftTypeConfig> Clone for RaftLog<C> {
    fn clone(&self) -> Self {
        RaftLog {
            inner: self.inner.clone(),
        }
    }
}

struct Inner<C: RaftTypeConfig> {
    dir: PathBuf,
    file: File,
    /// Bytes of `raft.log`.
    len: u64,
    /// Index → (position of its frame, the entry).
    entries: BTreeMap<u64, (u64, C::Entry)>,
    /// Bytes at the front of `raft.log` that hold purged entries.
    purged_bytes: u64,
    vote: Option<Vote<NodeIdOf<C>>>,
    committed: Option<LogId<NodeIdOf<C>>>,
    purged: Option<LogId<NodeIdOf<C>>>,
    /// A write of the log failed part-way: what is in memory may no longer match the
    /// file, so nothing more is written (openraft stops on the error; a reopen reads the
    /// file as it is).
    failed: bool,
}

impl<C> RaftLog<C>
where
    C: RaftTypeConfig,
    C::Entry: Serialize + DeserializeOwned,
{
    /// Opens (or creates) the log in `dir`, cutting a torn tail.
    pub fn open(dir: &Path) -> io::Result<RaftLog<C>> {
        if !dir.exists() {
            fs::create_dir_all(dir)?;
            if let Some(parent) = dir.parent() {
                File::open(parent)?.sync_all()?;
            }
        }
        let vote = read_value(&dir.join(VOTE_FILE))?;
        let committed = read_value(&dir.join(COMMITTED_FILE))?;
        let purged: Option<LogId<NodeIdOf<C>>> = read_value(&dir.join(PURGED_FILE))?;
        let path = dir.join(LOG_FILE);
        let mut file = OpenOptions::new()
            .read(true)
            .append(true)
            .create(true)
            .open(&path)?;
        // The file's name is durable before anything in it is acknowledged.
        File::open(dir)?.sync_all()?;
        let mut bytes = Vec::new();
        file.read_to_end(&mut bytes)?;
        let LogFile {
            entries,
            purged_bytes,
            len,
        } = decode_log::<C>(&bytes, purged.as_ref().map(|p| p.index)).map_err(|why| {
            io::Error::new(
                io::ErrorKind::InvalidData,
                format!("{}: {why}", path.display()),
            )
        })?;
        let at = len as usize;
        if at < bytes.len() {
            tracing::warn!(
                file = %path.display(),
                kept = at,
                cut = bytes.len() - at,
                "cutting a torn tail off the controller log"
            );
            file.set_len(at as u64)?;
            file.sync_data()?;
        }
        Ok(RaftLog {
            inner: Arc::new(Mutex::new(Inner {
                dir: dir.to_path_buf(),
                file,
                len: at as u64,
                entries,
                purged_bytes,
                vote,
                committed,
                purged,
                failed: false,
            })),
        })
    }

    fn lock(&self) -> MutexGuard<'_, Inner<C>> {
        // A panic while holding the lock leaves nothing half-done that a reader could see
        // (every change is made after its I/O succeeded), so a poisoned lock is usable.
        self.inner.lock().unwrap_or_else(|e| e.into_inner())
    }
}

impl<C> Inner<C>
where
    C: RaftTypeConfig,
    C::Entry: Serialize + DeserializeOwned,
{
    /// Runs a write of the log; after one fails, refuses every later one.
    fn guarded(&mut self, write: impl FnOnce(&mut Self) -> io::Result<()>) -> io::Result<()> {
        if self.failed {
            return Err(io::Error::other(
                "an earlier write of the controller log failed",
            ));
        }
        let result = write(self);
        if result.is_err() {
            self.failed = true;
        }
        result
    }

    fn last_log_id(&self) -> Option<LogId<NodeIdOf<C>>> {
        self.entries
            .last_key_value()
            .map(|(_, (_, e))| e.get_log_id().clone())
            .or_else(|| self.purged.clone())
    }

    fn append(&mut self, entries: Vec<C::Entry>) -> io::Result<()> {
        // An entry at an index the log already holds replaces it and everything after it
        // (openraft truncates first; this keeps the file in index order regardless).
        if let Some(first) = entries.first() {
            let index = first.get_log_id().index;
            if self.entries.range(index..).next().is_some() {
                self.truncate(index)?;
            }
        }
        let mut buf = Vec::new();
        let mut placed: Vec<(u64, u64, C::Entry)> = Vec::with_capacity(entries.len());
        for entry in entries {
            let index = entry.get_log_id().index;
            let after = placed
                .last()
                .map(|(i, _, _)| *i)
                .or_else(|| self.entries.last_key_value().map(|(i, _)| *i));
            assert!(
                after.is_none_or(|a| index > a),
                "entries are appended in index order"
            );
            // At or below the purge point the entry is in the state machine already:
            // openraft purges a log that is behind its state machine at start, and its
            // storage suite then appends there. Such an entry is not kept.
            if self.purged.as_ref().is_some_and(|p| index <= p.index) {
                continue;
            }
            let at = self.len + buf.len() as u64;
            encode_frame(&entry, &mut buf)?;
            placed.push((index, at, entry));
        }
        let written = self
            .file
            .write_all(&buf)
            .and_then(|()| self.file.sync_data());
        if let Err(e) = written {
            // Cut what part of it reached the file: nothing after it may be appended to a
            // torn frame. openraft stops on the error anyway; the next open cuts it too.
            let _ = self.file.set_len(self.len);
            return Err(e);
        }
        self.len += buf.len() as u64;
        for (index, at, entry) in placed {
            self.entries.insert(index, (at, entry));
        }
        Ok(())
    }

    /// Removes the entries from `index` on.
    fn truncate(&mut self, index: u64) -> io::Result<()> {
        let Some((_, &(at, _))) = self.entries.range(index..).next() else {
            return Ok(()); // nothing there
        };
        self.file.set_len(at)?;
        self.file.sync_data()?;
        self.len = at;
        self.entries.split_off(&index);
        Ok(())
    }

    /// Drops the entries up to `log_id` and records the purge point.
    fn purge(&mut self, log_id: LogId<NodeIdOf<C>>) -> io::Result<()> {
        if let Some(p) = &self.purged {
            assert!(log_id.index >= p.index, "the purge point never moves back");
        }
        let index = log_id.index;
        write_value(&self.dir, PURGED_FILE, &Some(log_id.clone()))?;
        self.purged = Some(log_id);
        let kept = self.entries.split_off(&(index + 1));
        let dropped = std::mem::replace(&mut self.entries, kept);
        if dropped.is_empty() {
            return Ok(());
        }
        self.purged_bytes = self.entries.values().next().map_or(self.len, |(at, _)| *at);
        if self.purged_bytes * 2 > self.len {
            self.rewrite()?;
        }
        Ok(())
    }

    /// Writes the kept entries to a new file and renames it over the old one.
    fn rewrite(&mut self) -> io::Result<()> {
        let mut buf = Vec::new();
        let mut positions = Vec::with_capacity(self.entries.len());
        for (index, (_, entry)) in &self.entries {
            positions.push((*index, buf.len() as u64));
            encode_frame(entry, &mut buf)?;
        }
        let tmp = self.dir.join(format!("{LOG_FILE}.tmp"));
        // A temporary file left by a crash in an earlier rewrite is stale.
        match fs::remove_file(&tmp) {
            Err(e) if e.kind() != io::ErrorKind::NotFound => return Err(e),
            _ => {}
        }
        let mut f = OpenOptions::new()
            .read(true)
            .append(true)
            .create_new(true)
            .open(&tmp)?;
        f.write_all(&buf)?;
        f.sync_all()?;
        fs::rename(&tmp, self.dir.join(LOG_FILE))?;
        File::open(&self.dir)?.sync_all()?;
        // The handle follows the rename: it is the new `raft.log`.
        self.file = f;
        for (index, at) in positions {
            if let Some(slot) = self.entries.get_mut(&index) {
                slot.0 = at;
            }
        }
        self.len = buf.len() as u64;
        self.purged_bytes = 0;
        Ok(())
    }
}

/// `raft.log`'s bytes as [`RaftLog::open`] reads them (it calls this; so do the fuzz
/// targets, `tools/fuzz-targets`).
pub struct LogFile<E> {
    /// Index → (position of its frame, the entry): the entries after the purge point, in
    /// index order.
    pub entries: BTreeMap<u64, (u64, E)>,
    /// Bytes at the front that hold purged entries.
    pub purged_bytes: u64,
    /// Bytes of the whole frames read; what follows them is a torn tail, cut at open.
    pub len: u64,
}

/// Decodes the frames of a `raft.log`, from the first until the end of `bytes` or a torn
/// frame (incomplete, over `FRAME_MAX`, or failing its CRC: the tail of an append never
/// acknowledged); entries at or below `purged` (the purge point's index) are skipped. An
/// error for a frame whose CRC holds but whose entry does not decode, and for entries
/// out of index order: neither is a torn write.
pub fn decode_log<C>(bytes: &[u8], purged: Option<u64>) -> Result<LogFile<C::Entry>, String>
where
    C: RaftTypeConfig,
    C::Entry: DeserializeOwned,
{
    let mut entries = BTreeMap::new();
    let mut at = 0usize;
    let mut purged_bytes = 0u64;
    loop {
        let (entry, next) = match decode_frame::<C::Entry>(bytes, at) {
            Frame::Entry(entry, next) => (entry, next),
            Frame::Torn => break,
            Frame::Corrupt(why) => return Err(why),
        };
        let index = entry.get_log_id().index;
        if purged.is_some_and(|p| index <= p) {
            purged_bytes = next as u64;
        } else {
            if let Some((&last, _)) = entries.last_key_value() {
                if index <= last {
                    return Err(format!("entry {index} after entry {last}"));
                }
            }
            entries.insert(index, (at as u64, entry));
        }
        at = next;
    }
    Ok(LogFile {
        entries,
        purged_bytes,
        len: at as u64,
    })
}

/// Appends `value`'s frame to `out`, as appends write it to `raft.log`.
pub fn encode_frame<T: Serialize>(value: &T, out: &mut Vec<u8>) -> io::Result<()> {
    let body = serde_json::to_vec(value).map_err(io::Error::other)?;
    if body.len() > FRAME_MAX {
        return Err(io::Error::new(
            io::ErrorKind::InvalidInput,
            format!(
                "a controller log entry of {} bytes (at most {FRAME_MAX})",
                body.len()
            ),
        ));
    }
    out.extend_from_slice(&(body.len() as u32).to_be_bytes());
    out.extend_from_slice(&crc32c::crc32c(&body).to_be_bytes());
    out.extend_from_slice(&body);
    Ok(())
}

/// What `decode_frame` found at a position.
enum Frame<T> {
    /// An entry, and where the next frame starts.
    Entry(T, usize),
    /// The end of the file, or a frame that is incomplete or fails its CRC: the tail of an
    /// append that was never acknowledged.
    Torn,
    /// A frame whose CRC holds but whose entry does not decode: not a torn write, and
    /// cutting the log there would drop acknowledged entries.
    Corrupt(String),
}

fn decode_frame<T: DeserializeOwned>(bytes: &[u8], at: usize) -> Frame<T> {
    let Some(header) = bytes.get(at..at + FRAME_HEADER) else {
        return Frame::Torn;
    };
    let len = u32::from_be_bytes([header[0], header[1], header[2], header[3]]) as usize;
    let crc = u32::from_be_bytes([header[4], header[5], header[6], header[7]]);
    if len > FRAME_MAX {
        return Frame::Torn;
    }
    let Some(body) = bytes.get(at + FRAME_HEADER..at + FRAME_HEADER + len) else {
        return Frame::Torn;
    };
    if crc32c::crc32c(body) != crc {
        return Frame::Torn;
    }
    match serde_json::from_slice(body) {
        Ok(value) => Frame::Entry(value, at + FRAME_HEADER + len),
        // An unknown command or field value a newer release wrote (its CRC holds).
        Err(e) if e.to_string().contains("unknown variant") => Frame::Corrupt(format!(
            "the entry at byte {at} is of a newer format than this release reads ({e}): run \
             the release that wrote it"
        )),
        Err(e) => Frame::Corrupt(format!("the entry at byte {at} does not decode: {e}")),
    }
}

/// The value a `vote`, `committed` or `purged` file holds, as opening reads it (`None`:
/// none yet).
pub fn decode_value<T: DeserializeOwned>(bytes: &[u8]) -> serde_json::Result<Option<T>> {
    serde_json::from_slice::<Option<T>>(bytes)
}

/// A `vote`, `committed` or `purged` file's bytes, as they are written (atomically).
pub fn encode_value<T: Serialize>(value: &Option<T>) -> serde_json::Result<Vec<u8>> {
    serde_json::to_vec(value)
}

/// The value in `path`, `None` when there is no file yet.
fn read_value<T: DeserializeOwned>(path: &Path) -> io::Result<Option<T>> {
    match fs::read(path) {
        Ok(bytes) => decode_value::<T>(&bytes).map_err(|e| {
            io::Error::new(
                io::ErrorKind::InvalidData,
                format!("{}: {e}", path.display()),
            )
        }),
        Err(e) if e.kind() == io::ErrorKind::NotFound => Ok(None),
        Err(e) => Err(e),
    }
}

/// Replaces `dir/name` with `value` atomically.
fn write_value<T: Serialize>(dir: &Path, name: &str, value: &Option<T>) -> io::Result<()> {
    let tmp = dir.join(format!("{name}.tmp"));
    {
        let mut f = File::create(&tmp)?;
        f.write_all(&encode_value(value).map_err(io::Error::other)?)?;
        f.sync_all()?;
    }
    fs::rename(&tmp, dir.join(name))?;
    File::open(dir)?.sync_all()
}

fn range_of<RB: RangeBounds<u64>>(range: &RB) -> (Bound<u64>, Bound<u64>) {
    (range.start_bound().cloned(), range.end_bound().cloned())
}

impl<C> RaftLogReader<C> for RaftLog<C>
where
    C: RaftTypeConfig,
    C::Entry: Serialize + DeserializeOwned + Clone,
{
    async fn try_get_log_entries<RB: RangeBounds<u64> + Clone + Debug + OptionalSend>(
        &mut self,
        range: RB,
    ) -> Result<Vec<C::Entry>, StorageError<NodeIdOf<C>>> {
        let inner = self.lock();
        Ok(inner
            .entries
            .range(range_of(&range))
            .map(|(_, (_, e))| e.clone())
            .collect())
    }
}

impl<C> RaftLogStorage<C> for RaftLog<C>
where
    C: RaftTypeConfig,
    C::Entry: Serialize + DeserializeOwned + Clone,
{
    type LogReader = RaftLog<C>;

    async fn get_log_state(&mut self) -> Result<LogState<C>, StorageError<NodeIdOf<C>>> {
        let inner = self.lock();
        Ok(LogState {
            last_purged_log_id: inner.purged.clone(),
            last_log_id: inner.last_log_id(),
        })
    }

    async fn get_log_reader(&mut self) -> Self::LogReader {
        self.clone()
    }

    async fn save_vote(
        &mut self,
        vote: &Vote<NodeIdOf<C>>,
    ) -> Result<(), StorageError<NodeIdOf<C>>> {
        let mut inner = self.lock();
        write_value(&inner.dir, VOTE_FILE, &Some(vote.clone()))
            .map_err(|e| StorageIOError::write_vote(&e))?;
        inner.vote = Some(vote.clone());
        Ok(())
    }

    async fn read_vote(&mut self) -> Result<Option<Vote<NodeIdOf<C>>>, StorageError<NodeIdOf<C>>> {
        Ok(self.lock().vote.clone())
    }

    async fn save_committed(
        &mut self,
        committed: Option<LogId<NodeIdOf<C>>>,
    ) -> Result<(), StorageError<NodeIdOf<C>>> {
        let mut inner = self.lock();
        write_value(&inner.dir, COMMITTED_FILE, &committed)
            .map_err(|e| StorageIOError::write(&e))?;
        inner.committed = committed;
        Ok(())
    }

    async fn read_committed(
        &mut self,
    ) -> Result<Option<LogId<NodeIdOf<C>>>, StorageError<NodeIdOf<C>>> {
        Ok(self.lock().committed.clone())
    }

    async fn append<I>(
        &mut self,
        entries: I,
        callback: LogFlushed<C>,
    ) -> Result<(), StorageError<NodeIdOf<C>>>
    where
        I: IntoIterator<Item = C::Entry> + OptionalSend,
        I::IntoIter: OptionalSend,
    {
        let result = self
            .lock()
            .guarded(|log| log.append(entries.into_iter().collect()));
        match result {
            Ok(()) => {
                callback.log_io_completed(Ok(()));
                Ok(())
            }
            Err(e) => {
                let error = StorageIOError::write_logs(&e);
                callback.log_io_completed(Err(e));
                Err(error.into())
            }
        }
    }

    async fn truncate(
        &mut self,
        log_id: LogId<NodeIdOf<C>>,
    ) -> Result<(), StorageError<NodeIdOf<C>>> {
        self.lock()
            .guarded(|log| log.truncate(log_id.index))
            .map_err(|e| StorageIOError::write_logs(&e).into())
    }

    async fn purge(&mut self, log_id: LogId<NodeIdOf<C>>) -> Result<(), StorageError<NodeIdOf<C>>> {
        self.lock()
            .guarded(|log| log.purge(log_id))
            .map_err(|e| StorageIOError::write_logs(&e).into())
    }
}
