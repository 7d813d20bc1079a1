//! Segment files open only while they are used: every file of every segment (log, offset
//! index, time index; active or sealed) is a [`SegmentFile`], a name that opens its file
//! on demand through the owner's [`FileCache`], which keeps at most `capacity` of them
//! open, closes the least recently used one past that bound, and closes any that stayed
//! unused for [`IDLE_CLOSE_AFTER`] when its owner asks ([`FileCache::close_idle`]).
//!
//! Without it, every segment held three descriptors for the broker's life and a few
//! thousand partitions spent RLIMIT_NOFILE, after which nothing — not even accepting a
//! connection — could open a descriptor. With it, descriptors follow the partitions that
//! are being written or read, not the partitions that exist.
//!
//! Invariants:
//! - the cache holds at most `capacity` files (asserted after each insert);
//! - an operation holds the `Rc<OpenFile>` it got for its whole duration: a file evicted
//!   meanwhile closes when the operation drops it, so eviction never fails an operation
//!   in flight (open descriptors exceed the bound by at most the operations in flight);
//! - a handle names exactly one file: renaming the file goes through
//!   [`SegmentFile::renamed`], a file whose name is about to be reused is pinned
//!   ([`SegmentFile::pin`]), and dropping the last handle forgets its cached descriptor.
//!
//! Running out anyway (other descriptors — connections — took the process's limit): an
//! open that fails with EMFILE/ENFILE closes the older half of the cache and tries once
//! more; if that fails too the operation fails with an error that names what ran out.
//! `fdatasync` through a descriptor opened after the write flushes the same inode (Linux
//! syncs files, not descriptors), and direct-I/O write errors are returned by the write
//! itself, so reopening loses no error a caller acts on (kernel-notes.md, "Descriptors").

use crate::fault::{Op, StorageFaults, Verdict};
use crate::fs::{Disk, MemFs};
pub use crate::segment_io::os_error;
use crate::segment_io::{OpenFile, WriteBuffer};
use std::cell::{Cell, RefCell};
use std::collections::{BTreeMap, HashMap};
use std::path::{Path, PathBuf};
use std::rc::Rc;
use std::sync::Arc;
use std::time::{Duration, Instant};

/// How long a segment file stays open unused before [`FileCache::close_idle`] closes it:
/// a partition being written or read keeps its files, an idle one gives them back.
pub const IDLE_CLOSE_AFTER: Duration = Duration::from_secs(30);

/// What one owner (a shard) keeps open when nobody says otherwise (tools and tests).
pub const DEFAULT_CAPACITY: usize = 1024;
/// The fewest files a cache may be bounded to: an active segment's three, with room for
/// reads of sealed segments beside them.
pub const MIN_CAPACITY: usize = 8;

/// The open descriptors of one owner's segment files, least recently used first out.
pub struct FileCache {
    capacity: Cell<usize>,
    state: RefCell<CacheState>,
    opens: Cell<u64>,
    evictions: Cell<u64>,
    exhausted: Cell<u64>,
    /// Armed storage faults (`fault`), when the broker runs with them.
    faults: Option<Arc<StorageFaults>>,
    /// The file system the owner's logs live in.
    disk: Disk,
}

#[derive(Default)]
struct CacheState {
    next_id: u64,
    tick: u64,
    /// id → (file, tick of its last use).
    open: HashMap<u64, (Rc<OpenFile>, u64)>,
    /// tick of last use → (id, when): the eviction order.
    by_use: BTreeMap<u64, (u64, Instant)>,
}

/// What a cache has done, for metrics and tests.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct FileCacheStats {
    /// Files open in the cache now.
    pub open: usize,
    pub capacity: usize,
    /// Opens since the cache was made (each one a miss).
    pub opens: u64,
    /// Files closed because the cache was full.
    pub evictions: u64,
    /// Opens that failed because the process had no descriptor left.
    pub exhausted: u64,
}

impl FileCache {
    pub fn new(capacity: usize) -> Rc<FileCache> {
        FileCache::with_faults(capacity, None)
    }

    /// A cache whose files' writes and syncs go through `faults` (`fault`).
    pub fn with_faults(capacity: usize, faults: Option<Arc<StorageFaults>>) -> Rc<FileCache> {
        FileCache::build(capacity, faults, Disk::Kernel)
    }

    /// A cache of files that live in `fs`, the simulator's disk (no storage faults: the
    /// simulator plays its own on `fs`).
    pub fn in_memory(capacity: usize, fs: MemFs) -> Rc<FileCache> {
        FileCache::build(capacity, None, Disk::Memory(fs))
    }

    fn build(capacity: usize, faults: Option<Arc<StorageFaults>>, disk: Disk) -> Rc<FileCache> {
        Rc::new(FileCache {
            capacity: Cell::new(capacity.max(MIN_CAPACITY)),
            state: RefCell::default(),
            opens: Cell::new(0),
            evictions: Cell::new(0),
            exhausted: Cell::new(0),
            faults,
            disk,
        })
    }

    pub fn faults(&self) -> Option<&Arc<StorageFaults>> {
        self.faults.as_ref()
    }

    /// The file system the owner's logs live in: what every file operation by name
    /// (checkpoints, snapshots, renames, listings) goes through.
    pub fn disk(&self) -> &Disk {
        &self.disk
    }

    pub fn stats(&self) -> FileCacheStats {
        FileCacheStats {
            open: self.state.borrow().open.len(),
            capacity: self.capacity.get(),
            opens: self.opens.get(),
            evictions: self.evictions.get(),
            exhausted: self.exhausted.get(),
        }
    }

    /// Closes the least recently used half of what is open (the process ran out of
    /// descriptors: give some back to whoever needs them). Returns how many closed.
    pub fn shed(&self) -> usize {
        let mut st = self.state.borrow_mut();
        let n = st.open.len().div_ceil(2);
        for _ in 0..n {
            st.evict_oldest();
        }
        self.evictions.set(self.evictions.get() + n as u64);
        n
    }

    /// Runs `open`, an open of something that is not a segment file (a directory, to
    /// sync it); when the process has no descriptor free, gives half of the cache back
    /// and runs it once more.
    pub async fn open_beside<T, F, Fut>(&self, open: F) -> std::io::Result<T>
    where
        F: Fn() -> Fut,
        Fut: std::future::Future<Output = std::io::Result<T>>,
    {
        match open().await {
            Err(e) if out_of_descriptors(&e) => {
                self.shed_and_settle().await;
                open().await
            }
            other => other,
        }
    }

    /// [`Self::shed`], then lets the reactor run its closes: a descriptor glommio drops is
    /// closed asynchronously, at the ring's next submission.
    async fn shed_and_settle(&self) -> usize {
        let n = self.shed();
        glommio::timer::sleep(std::time::Duration::from_millis(1)).await;
        n
    }

    /// Closes every file unused for `idle` or longer (the owner calls this now and then),
    /// so descriptors follow the partitions in use even below the bound. Returns how many.
    pub fn close_idle(&self, idle: Duration) -> usize {
        let now = Instant::now();
        let mut st = self.state.borrow_mut();
        let mut closed = 0;
        while st
            .by_use
            .first_key_value()
            .is_some_and(|(_, (_, used))| now.duration_since(*used) >= idle)
        {
            st.evict_oldest();
            closed += 1;
        }
        closed
    }

    fn new_id(&self) -> u64 {
        let mut st = self.state.borrow_mut();
        st.next_id += 1;
        st.next_id
    }

    fn hit(&self, id: u64) -> Option<Rc<OpenFile>> {
        let mut st = self.state.borrow_mut();
        st.tick += 1;
        let tick = st.tick;
        let (file, used) = st.open.get_mut(&id)?;
        let file = file.clone();
        let old = std::mem::replace(used, tick);
        st.by_use.remove(&old);
        st.by_use.insert(tick, (id, Instant::now()));
        Some(file)
    }

    /// Keeps `file` as `id`'s descriptor (unless one raced it in), evicting past the bound.
    fn insert(&self, id: u64, file: Rc<OpenFile>) -> Rc<OpenFile> {
        if let Some(existing) = self.hit(id) {
            return existing; // another operation opened it meanwhile; ours closes on drop
        }
        let mut st = self.state.borrow_mut();
        let capacity = self.capacity.get();
        let mut evicted = 0u64;
        while st.open.len() >= capacity {
            st.evict_oldest();
            evicted += 1;
        }
        st.tick += 1;
        let tick = st.tick;
        st.open.insert(id, (file.clone(), tick));
        st.by_use.insert(tick, (id, Instant::now()));
        assert!(
            st.open.len() <= capacity,
            "the cache holds at most its capacity"
        );
        debug_assert_eq!(st.open.len(), st.by_use.len());
        drop(st);
        self.evictions.set(self.evictions.get() + evicted);
        file
    }

    fn forget(&self, id: u64) {
        let mut st = self.state.borrow_mut();
        if let Some((_, used)) = st.open.remove(&id) {
            st.by_use.remove(&used);
        }
    }
}

impl CacheState {
    fn evict_oldest(&mut self) {
        let Some((_, (id, _))) = self.by_use.pop_first() else {
            return;
        };
        // Dropping the cache's reference closes the descriptor once no operation holds it.
        self.open.remove(&id);
    }
}

/// How a segment file is opened.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Access {
    /// An existing file, read and written (recovery truncates a torn tail).
    Existing,
    /// Created when missing.
    Create,
}

/// One segment file, by name; its descriptor is opened when an operation asks for it.
#[derive(Clone)]
pub struct SegmentFile(Rc<Handle>);

struct Handle {
    id: u64,
    path: RefCell<PathBuf>,
    access: Access,
    cache: Rc<FileCache>,
    /// A descriptor kept outside the cache for the handle's remaining life: its name is
    /// about to mean another file (`pin`).
    pinned: RefCell<Option<Rc<OpenFile>>>,
}

impl Drop for Handle {
    fn drop(&mut self) {
        self.cache.forget(self.id);
    }
}

impl SegmentFile {
    /// The file at `path`, not opened yet.
    pub fn new(cache: &Rc<FileCache>, path: PathBuf, access: Access) -> SegmentFile {
        SegmentFile(Rc::new(Handle {
            id: cache.new_id(),
            path: RefCell::new(path),
            access,
            cache: cache.clone(),
            pinned: RefCell::new(None),
        }))
    }

    /// The file at `path`, opened now (creating it when `access` says so).
    pub async fn open_now(
        cache: &Rc<FileCache>,
        path: PathBuf,
        access: Access,
    ) -> std::io::Result<(SegmentFile, Rc<OpenFile>)> {
        let f = SegmentFile::new(cache, path, access);
        let file = f.open().await?;
        Ok((f, file))
    }

    pub fn path(&self) -> PathBuf {
        self.0.path.borrow().clone()
    }

    /// The storage faults its writes and syncs go through, when any are configured.
    pub fn faults(&self) -> Option<&Arc<StorageFaults>> {
        self.0.cache.faults()
    }

    /// Whether both handles name the same file.
    pub fn same(&self, other: &SegmentFile) -> bool {
        Rc::ptr_eq(&self.0, &other.0)
    }

    /// The file was renamed to `to` (deletion renames before it unlinks): later opens
    /// use the new name.
    pub fn renamed(&self, to: PathBuf) {
        *self.0.path.borrow_mut() = to;
    }

    /// Keeps this handle's file open for as long as the handle lives, outside the cache:
    /// its name is about to be given to another file (a compaction swap renames the
    /// cleaned copy over it), and whoever still reads through this handle must read the
    /// file it named. Costs one descriptor per pinned handle until the last clone drops.
    pub async fn pin(&self) -> std::io::Result<()> {
        let file = self.open().await?;
        *self.0.pinned.borrow_mut() = Some(file);
        self.0.cache.forget(self.0.id);
        Ok(())
    }

    /// Writes `buf` at `pos` through `opened` (this file, open), past the armed faults
    /// (`fault`) when there are any. Errors keep their OS code (`os_error`).
    pub async fn write_at(
        &self,
        opened: &OpenFile,
        buf: WriteBuffer,
        pos: u64,
    ) -> std::io::Result<usize> {
        let Some(faults) = self.faults() else {
            return opened.write_at(buf, pos).await;
        };
        let path = self.path();
        let len = buf.len() as u64;
        let ticket = faults.begin(Op::Write, &path).await;
        let result = match &ticket.verdict {
            Verdict::Proceed => opened.write_at(buf, pos).await,
            Verdict::Fail(e) => Err(std::io::Error::from_raw_os_error(
                e.raw_os_error().unwrap_or(libc::EIO),
            )),
            Verdict::Tear(e) => {
                // Half the bytes reach the file (buffered: a torn write need not be
                // aligned), then the write fails.
                let half = &buf.as_bytes()[..buf.len() / 2];
                let torn = std::fs::OpenOptions::new()
                    .write(true)
                    .open(&path)
                    .and_then(|f| {
                        use std::os::unix::fs::FileExt;
                        f.write_all_at(half, pos)?;
                        f.sync_data()
                    });
                torn.and(Err(std::io::Error::from_raw_os_error(
                    e.raw_os_error().unwrap_or(libc::EIO),
                )))
            }
        };
        let end = match (&ticket.verdict, &result) {
            (Verdict::Tear(_), _) => pos + len / 2,
            (_, Ok(n)) => pos + *n as u64,
            _ => pos,
        };
        let ok = result.is_ok();
        faults.wrote(ticket, &path, pos, end, ok).await;
        result
    }

    /// `fdatasync` of this file through `opened`, past the armed faults when there are
    /// any. Its errors carry no OS code on purpose: whatever the code (ENOSPC too), a
    /// failed sync leaves the disk's content unknown, so no caller may take it for a
    /// transient error and sync again (`StorageError::is_transient`).
    pub async fn sync_data(&self, opened: &OpenFile) -> std::io::Result<()> {
        let Some(faults) = self.faults() else {
            return opened.sync_data().await;
        };
        let path = self.path();
        let ticket = faults.begin(Op::Sync, &path).await;
        let result = match &ticket.verdict {
            Verdict::Proceed => opened.sync_data().await,
            Verdict::Fail(e) | Verdict::Tear(e) => {
                Err(std::io::Error::other(format!("fdatasync failed: {e}")))
            }
        };
        let ok = result.is_ok();
        faults.synced(ticket, &path, ok).await;
        result
    }

    /// Cuts this file to `len` bytes through `opened`.
    pub async fn truncate(&self, opened: &OpenFile, len: u64) -> std::io::Result<()> {
        opened.truncate(len).await?;
        if let Some(faults) = self.faults() {
            faults.truncated(&self.path(), len);
        }
        Ok(())
    }

    /// Whether [`Self::pin`] was called: the name may already mean another file.
    pub fn is_pinned(&self) -> bool {
        self.0.pinned.borrow().is_some()
    }

    /// The open file, from the cache or opened now. Hold it for the operation only.
    pub async fn open(&self) -> std::io::Result<Rc<OpenFile>> {
        if let Some(f) = self.0.pinned.borrow().as_ref() {
            return Ok(f.clone());
        }
        let cache = &self.0.cache;
        if let Some(f) = cache.hit(self.0.id) {
            return Ok(f);
        }
        let path = self.path();
        let create = self.0.access == Access::Create;
        let file = match OpenFile::open(&cache.disk, &path, create).await {
            Err(e) if out_of_descriptors(&e) => {
                let shed = cache.shed_and_settle().await;
                match OpenFile::open(&cache.disk, &path, create).await {
                    Err(e) if out_of_descriptors(&e) => {
                        cache.exhausted.set(cache.exhausted.get() + 1);
                        return Err(exhausted_error(&path, &e, shed));
                    }
                    other => other?,
                }
            }
            other => other?,
        };
        cache.opens.set(cache.opens.get() + 1);
        Ok(cache.insert(self.0.id, Rc::new(file)))
    }
}

/// EMFILE (this process's RLIMIT_NOFILE) or ENFILE (the system's `fs.file-max`).
fn out_of_descriptors(e: &std::io::Error) -> bool {
    matches!(e.raw_os_error(), Some(libc::EMFILE) | Some(libc::ENFILE))
}

/// Whether `e` is an open that failed for want of a descriptor (here or in the kernel).
pub fn is_out_of_descriptors(e: &std::io::Error) -> bool {
    out_of_descriptors(e)
        || e.get_ref()
            .is_some_and(|inner| inner.is::<DescriptorsExhausted>())
}

/// An open refused for want of descriptors even after the cache gave half of its back.
#[derive(Debug, thiserror::Error)]
#[error("{0}")]
pub struct DescriptorsExhausted(String);

fn exhausted_error(path: &Path, e: &std::io::Error, shed: usize) -> std::io::Error {
    let msg = format!(
        "out of file descriptors opening {} ({e}; closed {shed} cached segment files and \
         tried again): raise RLIMIT_NOFILE (ulimit -n, LimitNOFILE=) or lower \
         --max-connections / --max-open-segment-files",
        path.display()
    );
    tracing::warn!("{msg}");
    std::io::Error::other(DescriptorsExhausted(msg))
}

#[cfg(test)]
mod tests {
    use super::*;

    use crate::test_executor::run;

    #[test]
    fn keeps_at_most_capacity_and_evicts_least_recently_used() {
        run(|| async {
            let dir = tempfile::tempdir().expect("tempdir");
            let cache = FileCache::new(MIN_CAPACITY);
            let files: Vec<SegmentFile> = (0..MIN_CAPACITY + 3)
                .map(|i| {
                    SegmentFile::new(&cache, dir.path().join(format!("{i}.log")), Access::Create)
                })
                .collect();
            for f in &files {
                let _ = f.open().await.expect("open");
            }
            let s = cache.stats();
            assert_eq!(s.open, MIN_CAPACITY);
            assert_eq!(s.opens, (MIN_CAPACITY + 3) as u64);
            assert_eq!(s.evictions, 3);
            // The most recent ones are still open: no new opens.
            for f in files.iter().skip(3) {
                let _ = f.open().await.expect("hit");
            }
            assert_eq!(cache.stats().opens, (MIN_CAPACITY + 3) as u64);
            // The first was evicted: opening it again is a miss, and evicts the oldest.
            let _ = files[0].open().await.expect("reopen");
            assert_eq!(cache.stats().opens, (MIN_CAPACITY + 4) as u64);
            assert_eq!(cache.stats().open, MIN_CAPACITY);
            drop(files);
            assert_eq!(
                cache.stats().open,
                0,
                "dropped handles forget their descriptors"
            );
        });
    }

    #[test]
    fn idle_files_close() {
        run(|| async {
            let dir = tempfile::tempdir().expect("tempdir");
            let cache = FileCache::new(MIN_CAPACITY);
            let old = SegmentFile::new(&cache, dir.path().join("old"), Access::Create);
            let _ = old.open().await.expect("open");
            glommio::timer::sleep(Duration::from_millis(30)).await;
            let new = SegmentFile::new(&cache, dir.path().join("new"), Access::Create);
            let _ = new.open().await.expect("open");
            assert_eq!(cache.close_idle(Duration::from_millis(20)), 1);
            assert_eq!(cache.stats().open, 1, "the recently used one stays");
            let _ = old.open().await.expect("reopens on use");
            assert_eq!(cache.stats().opens, 3);
        });
    }

    #[test]
    fn an_evicted_file_stays_usable_by_its_holder() {
        run(|| async {
            let dir = tempfile::tempdir().expect("tempdir");
            let cache = FileCache::new(MIN_CAPACITY);
            // Data first: glommio probes a device's polled-read support on the first
            // direct open, which an empty file answers wrongly (`partition_log::open`).
            let path = dir.path().join("held.log");
            std::fs::write(&path, [7u8; 4096]).expect("write");
            let first = SegmentFile::new(&cache, path, Access::Existing);
            let held = first.open().await.expect("open");
            let others: Vec<SegmentFile> = (0..MIN_CAPACITY * 2)
                .map(|i| SegmentFile::new(&cache, dir.path().join(format!("{i}")), Access::Create))
                .collect();
            for f in &others {
                let _ = f.open().await.expect("open");
            }
            let read = held.read_at(0, 4096).await.expect("read after eviction");
            assert!(read.iter().all(|b| *b == 7));
        });
    }

    #[test]
    fn renamed_files_open_under_their_new_name() {
        run(|| async {
            let dir = tempfile::tempdir().expect("tempdir");
            let cache = FileCache::new(MIN_CAPACITY);
            let path = dir.path().join("a.log");
            let f = SegmentFile::new(&cache, path.clone(), Access::Create);
            let _ = f.open().await.expect("create");
            cache.shed();
            let to = dir.path().join("a.log.deleted");
            std::fs::rename(&path, &to).expect("rename");
            f.renamed(to.clone());
            assert_eq!(f.path(), to);
            let _ = f.open().await.expect("open renamed");
            let missing = SegmentFile::new(&cache, path, Access::Existing);
            assert!(missing.open().await.is_err());
        });
    }
}
