//! The file system a log's small files and directories live in: the kernel's
//! ([`KernelFs`], `std::fs`) or the simulator's memory ([`MemFs`]).
//!
//! Everything the engine does to files by name — checkpoints, producer snapshots,
//! transaction indexes, renames and deletions of segments, directory listings, a closed
//! log's truncation — goes through [`Fs`], so that the simulator can run the same code
//! on a disk it controls and crash. The segment files' direct I/O does not: it goes
//! through `file_cache`, whose handles name the same files.
//!
//! [`MemFs`] plays the fault model of kernel-notes.md ("Fault model"), as a journaling
//! file system (ext4, XFS) gives it:
//! - file contents are [`MemFile`]s: durable with their file's `sync_data`/`sync_all`;
//! - the namespace (creating, renaming, removing files and directories) is a journal:
//!   any sync, of a file or a directory, commits every namespace change made before it,
//!   and a crash keeps the committed changes and any prefix of the rest (the journal is
//!   written in order).
//!
//! A process's crash is a life of the disk: a [`MemFs`] handle belongs to the life it was
//! made in ([`MemFs::next_life`]), and once that life ends ([`MemFs::freeze`]) nothing
//! done through it, or through a file it opened, reaches the disk — a task the dead
//! process left behind can neither read nor write what the next one recovers.
//!
//! Invariants of [`MemFs`]: every file entry of the namespace, committed or not, names a
//! live inode; `committed` is the namespace after the first `committed_ops` changes;
//! listings are sorted, so a run depends on nothing but its inputs.

use crate::mem_file::MemFile;
use std::cell::RefCell;
use std::collections::{BTreeMap, BTreeSet};
use std::io;
use std::path::{Path, PathBuf};
use std::rc::Rc;

/// File operations by name. Blocking for [`KernelFs`]: run them off the reactor.
pub trait Fs {
    /// The whole file.
    fn read(&self, path: &Path) -> io::Result<Vec<u8>>;
    /// Creates the file or cuts it to nothing, and writes `bytes` (not synced).
    fn write(&self, path: &Path, bytes: &[u8]) -> io::Result<()>;
    /// Opens a file for positioned reads and writes, creating it if `create`.
    fn open(&self, path: &Path, create: bool) -> io::Result<Box<dyn FsFile>>;
    /// Creates the file, or cuts it to nothing, and opens it (`File::create`).
    fn create(&self, path: &Path) -> io::Result<Box<dyn FsFile>> {
        let mut f = self.open(path, true)?;
        f.set_len(0)?;
        Ok(f)
    }
    fn rename(&self, from: &Path, to: &Path) -> io::Result<()>;
    fn remove_file(&self, path: &Path) -> io::Result<()>;
    fn create_dir_all(&self, path: &Path) -> io::Result<()>;
    fn remove_dir_all(&self, path: &Path) -> io::Result<()>;
    /// The paths of the entries of `dir`, sorted.
    fn read_dir(&self, dir: &Path) -> io::Result<Vec<PathBuf>>;
    /// The length of the file at `path`.
    fn len(&self, path: &Path) -> io::Result<u64>;
    fn exists(&self, path: &Path) -> bool;
    /// Makes the directory's entries durable (`fsync` of the directory).
    fn sync_dir(&self, dir: &Path) -> io::Result<()>;

    fn read_to_string(&self, path: &Path) -> io::Result<String> {
        String::from_utf8(self.read(path)?)
            .map_err(|e| io::Error::new(io::ErrorKind::InvalidData, e))
    }
}

/// An open file of an [`Fs`].
pub trait FsFile {
    fn read_at(&self, buf: &mut [u8], pos: u64) -> io::Result<usize>;
    fn write_all_at(&mut self, bytes: &[u8], pos: u64) -> io::Result<()>;
    fn set_len(&mut self, len: u64) -> io::Result<()>;
    /// The file's length in bytes.
    fn size(&self) -> io::Result<u64>;
    /// `fdatasync`.
    fn sync_data(&mut self) -> io::Result<()>;
    /// `fsync`: the data and every piece of metadata.
    fn sync_all(&mut self) -> io::Result<()> {
        self.sync_data()
    }
}

/// Where an owner's logs keep their files: the kernel's file system, or a [`MemFs`] the
/// simulator drives.
#[derive(Clone, Default)]
pub enum Disk {
    #[default]
    Kernel,
    Memory(MemFs),
}

impl Disk {
    /// Runs `f` on this disk's file system: on a thread of its own for the kernel's
    /// (its calls block), at once for memory (nothing blocks, and the simulator's run
    /// must not depend on another thread's timing).
    pub async fn run<T, F>(&self, f: F) -> T
    where
        T: Send + 'static,
        F: FnOnce(&dyn Fs) -> T + Send + 'static,
    {
        match self {
            Disk::Kernel => {
                glommio::executor()
                    .spawn_blocking(move || f(&KernelFs))
                    .await
            }
            Disk::Memory(m) => f(m),
        }
    }

    /// The file system, for a call made where blocking briefly is fine (opening a log,
    /// tools, tests).
    pub fn fs(&self) -> &dyn Fs {
        match self {
            Disk::Kernel => &KernelFs,
            Disk::Memory(m) => m,
        }
    }

    pub fn memory(&self) -> Option<&MemFs> {
        match self {
            Disk::Kernel => None,
            Disk::Memory(m) => Some(m),
        }
    }
}

/// The kernel's file system, through `std::fs`.
#[derive(Debug, Default, Clone, Copy)]
pub struct KernelFs;

impl Fs for KernelFs {
    fn read(&self, path: &Path) -> io::Result<Vec<u8>> {
        std::fs::read(path)
    }

    fn write(&self, path: &Path, bytes: &[u8]) -> io::Result<()> {
        std::fs::write(path, bytes)
    }

    fn open(&self, path: &Path, create: bool) -> io::Result<Box<dyn FsFile>> {
        let file = std::fs::OpenOptions::new()
            .read(true)
            .write(true)
            .create(create)
            .open(path)?;
        Ok(Box::new(file))
    }

    fn rename(&self, from: &Path, to: &Path) -> io::Result<()> {
        std::fs::rename(from, to)
    }

    fn remove_file(&self, path: &Path) -> io::Result<()> {
        std::fs::remove_file(path)
    }

    fn create_dir_all(&self, path: &Path) -> io::Result<()> {
        std::fs::create_dir_all(path)
    }

    fn remove_dir_all(&self, path: &Path) -> io::Result<()> {
        std::fs::remove_dir_all(path)
    }

    fn read_dir(&self, dir: &Path) -> io::Result<Vec<PathBuf>> {
        let mut out = Vec::new();
        for entry in std::fs::read_dir(dir)? {
            out.push(entry?.path());
        }
        out.sort();
        Ok(out)
    }

    fn len(&self, path: &Path) -> io::Result<u64> {
        Ok(std::fs::metadata(path)?.len())
    }

    fn exists(&self, path: &Path) -> bool {
        path.exists()
    }

    fn sync_dir(&self, dir: &Path) -> io::Result<()> {
        std::fs::File::open(dir)?.sync_all()
    }
}

impl FsFile for std::fs::File {
    fn read_at(&self, buf: &mut [u8], pos: u64) -> io::Result<usize> {
        std::os::unix::fs::FileExt::read_at(self, buf, pos)
    }

    fn write_all_at(&mut self, bytes: &[u8], pos: u64) -> io::Result<()> {
        std::os::unix::fs::FileExt::write_all_at(self, bytes, pos)
    }

    fn set_len(&mut self, len: u64) -> io::Result<()> {
        std::fs::File::set_len(self, len)
    }

    fn size(&self) -> io::Result<u64> {
        Ok(self.metadata()?.len())
    }

    fn sync_data(&mut self) -> io::Result<()> {
        std::fs::File::sync_data(self)
    }

    fn sync_all(&mut self) -> io::Result<()> {
        std::fs::File::sync_all(self)
    }
}

// ---------------------------------------------------------------------------------------
// In memory

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Entry {
    Dir,
    File(u64),
}

#[derive(Debug, Clone)]
enum NsOp {
    MkDir(PathBuf),
    Create(PathBuf, u64),
    Rename(PathBuf, PathBuf),
    Remove(PathBuf),
    RemoveTree(PathBuf),
}

type Namespace = BTreeMap<PathBuf, Entry>;

/// A file's contents and how many open handles hold it.
#[derive(Default)]
struct Inode {
    file: MemFile,
    opens: usize,
}

#[derive(Default)]
struct MemState {
    next_inode: u64,
    /// By number, so that a crash visits them in one order.
    inodes: BTreeMap<u64, Inode>,
    live: Namespace,
    committed: Namespace,
    /// The namespace changes made since the last commit, in order.
    pending: Vec<NsOp>,
    /// The life of the process using the disk: handles of an older one are refused.
    life: u64,
    /// Armed faults, first match first.
    faults: Vec<DiskFault>,
    /// The bytes all files may hold together (a full disk past it), if bounded.
    capacity: Option<u64>,
}

/// An operation a [`DiskFault`] can fail.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum DiskOp {
    /// A write to a file (of a segment, or of a small file).
    Write,
    /// An `fdatasync`/`fsync` of a file.
    Sync,
}

/// A fault armed on a [`MemFs`]: the next `count` operations `op` on a file with a
/// name under `under` fail with OS error `errno` (EIO, ENOSPC) and change nothing.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DiskFault {
    pub op: DiskOp,
    pub under: PathBuf,
    pub errno: i32,
    pub count: usize,
}

/// A file system in memory that can crash (see the module doc). Cheap to clone: clones
/// share the file system, and the life of the process they serve.
#[derive(Clone, Default)]
pub struct MemFs {
    state: Rc<RefCell<MemState>>,
    /// The process life this handle serves; when it is not the disk's, every operation
    /// through it fails (disk administration — faults, capacity, crashes — excepted).
    life: u64,
}

fn not_found(path: &Path) -> io::Error {
    io::Error::new(
        io::ErrorKind::NotFound,
        format!("{}: no such file", path.display()),
    )
}

fn parent_of(path: &Path) -> &Path {
    path.parent().unwrap_or(Path::new("/"))
}

fn apply(ns: &mut Namespace, op: &NsOp) {
    match op {
        NsOp::MkDir(p) => {
            ns.insert(p.clone(), Entry::Dir);
        }
        NsOp::Create(p, inode) => {
            ns.insert(p.clone(), Entry::File(*inode));
        }
        NsOp::Rename(from, to) => {
            if let Some(e) = ns.remove(from) {
                ns.insert(to.clone(), e);
            }
        }
        NsOp::Remove(p) => {
            ns.remove(p);
        }
        NsOp::RemoveTree(p) => ns.retain(|k, _| !k.starts_with(p)),
    }
}

impl MemState {
    /// Fails unless `life` is the disk's current one.
    fn alive(&self, life: u64) -> io::Result<()> {
        if life != self.life {
            return Err(io::Error::other("the disk's process has crashed"));
        }
        Ok(())
    }

    /// Fails `op` on `inode` if an armed fault says so (and uses it up).
    fn check(&mut self, life: u64, op: DiskOp, inode: u64) -> io::Result<()> {
        self.alive(life)?;
        if self.faults.is_empty() {
            return Ok(());
        }
        let names: Vec<&PathBuf> = self
            .live
            .iter()
            .filter(|(_, e)| **e == Entry::File(inode))
            .map(|(p, _)| p)
            .collect();
        let hit = self
            .faults
            .iter()
            .position(|f| f.op == op && names.iter().any(|n| n.starts_with(&f.under)));
        let Some(i) = hit else {
            return Ok(());
        };
        let errno = self.faults[i].errno;
        self.faults[i].count -= 1;
        if self.faults[i].count == 0 {
            self.faults.remove(i);
        }
        Err(io::Error::from_raw_os_error(errno))
    }

    /// ENOSPC if growing `inode` to `len` bytes passes the capacity.
    fn room(&self, inode: u64, len: u64) -> io::Result<()> {
        let Some(capacity) = self.capacity else {
            return Ok(());
        };
        let current = self.inodes.get(&inode).map_or(0, |n| n.file.len());
        let used: u64 = self.inodes.values().map(|n| n.file.len()).sum();
        if len > current && used + (len - current) > capacity {
            return Err(io::Error::from_raw_os_error(libc::ENOSPC));
        }
        Ok(())
    }

    /// A write of `len` bytes at `pos` of `inode`, checked against faults and room.
    fn may_write(&mut self, life: u64, inode: u64, pos: u64, len: usize) -> io::Result<()> {
        self.check(life, DiskOp::Write, inode)?;
        let current = self.inodes.get(&inode).map_or(0, |n| n.file.len());
        self.room(inode, current.max(pos + len as u64))
    }

    fn change(&mut self, op: NsOp) {
        apply(&mut self.live, &op);
        self.pending.push(op);
    }

    /// A sync: every namespace change so far is committed.
    fn commit(&mut self) {
        for op in self.pending.drain(..) {
            apply(&mut self.committed, &op);
        }
        self.collect();
    }

    /// Drops the files nothing can reach any more: no name now, none a crash could bring
    /// back, no open handle (an unlinked file stays readable while it is open).
    fn collect(&mut self) {
        let mut named = files_of(&self.live);
        named.extend(files_of(&self.committed));
        named.extend(self.pending.iter().filter_map(|op| match op {
            NsOp::Create(_, i) => Some(*i),
            _ => None,
        }));
        self.inodes
            .retain(|i, node| node.opens > 0 || named.contains(i));
    }

    fn file(&self, path: &Path) -> io::Result<u64> {
        match self.live.get(path) {
            Some(Entry::File(inode)) => Ok(*inode),
            Some(Entry::Dir) => Err(io::Error::new(
                io::ErrorKind::InvalidInput,
                format!("{}: a directory", path.display()),
            )),
            None => Err(not_found(path)),
        }
    }

    fn dir_exists(&self, dir: &Path) -> bool {
        dir.parent().is_none() || self.live.get(dir) == Some(&Entry::Dir)
    }

    fn create(&mut self, path: &Path) -> io::Result<u64> {
        if !self.dir_exists(parent_of(path)) {
            return Err(not_found(parent_of(path)));
        }
        self.next_inode += 1;
        let inode = self.next_inode;
        self.inodes.insert(inode, Inode::default());
        self.change(NsOp::Create(path.to_path_buf(), inode));
        Ok(inode)
    }

    fn inode_mut(&mut self, inode: u64) -> &mut MemFile {
        &mut self
            .inodes
            .get_mut(&inode)
            .expect("a live entry names a live inode")
            .file
    }
}

fn files_of(ns: &Namespace) -> BTreeSet<u64> {
    ns.values()
        .filter_map(|e| match e {
            Entry::File(i) => Some(*i),
            Entry::Dir => None,
        })
        .collect()
}

impl MemFs {
    pub fn new() -> MemFs {
        MemFs::default()
    }

    /// The inode `path` names now, if a file.
    pub fn inode(&self, path: &Path) -> Option<u64> {
        self.state.borrow().file(path).ok()
    }

    /// Runs `f` on the contents of inode `inode` (a file renamed or removed since it was
    /// opened keeps its inode, as an open descriptor does).
    pub fn with_inode<T>(&self, inode: u64, f: impl FnOnce(&mut MemFile) -> T) -> Option<T> {
        let mut s = self.state.borrow_mut();
        if s.life != self.life {
            return None;
        }
        s.inodes.get_mut(&inode).map(|node| f(&mut node.file))
    }

    /// An open handle holds inode `inode` (it outlives its names until `close`).
    pub fn hold(&self, inode: u64) {
        let mut s = self.state.borrow_mut();
        if s.life != self.life {
            return; // a dead process's handles hold nothing (its crash dropped them)
        }
        if let Some(node) = s.inodes.get_mut(&inode) {
            node.opens += 1;
        }
    }

    /// The handle `hold` counted is closed.
    pub fn close(&self, inode: u64) {
        let mut s = self.state.borrow_mut();
        if s.life != self.life {
            return;
        }
        if let Some(node) = s.inodes.get_mut(&inode) {
            node.opens = node.opens.saturating_sub(1);
        }
        s.collect();
    }

    /// `fdatasync` of an inode: its contents, and every namespace change so far.
    pub fn sync_inode(&self, inode: u64) -> io::Result<()> {
        let mut s = self.state.borrow_mut();
        s.check(self.life, DiskOp::Sync, inode)?;
        s.inodes.get_mut(&inode).ok_or_else(inode_gone)?.file.sync();
        s.commit();
        Ok(())
    }

    /// A crash: the namespace keeps its committed changes and the first `keep_ops` of
    /// the others; every file keeps its synced contents and the written sectors
    /// `keep_sector(inode, sector)` chooses. Files no name leads to are gone.
    pub fn crash(&self, keep_ops: usize, mut keep_sector: impl FnMut(u64, u64) -> bool) {
        let mut s = self.state.borrow_mut();
        let mut ns = s.committed.clone();
        let keep_ops = keep_ops.min(s.pending.len());
        for op in &s.pending[..keep_ops] {
            apply(&mut ns, op);
        }
        // Every process's handles are gone with it.
        let reachable = files_of(&ns);
        s.inodes.retain(|i, _| reachable.contains(i));
        for (&inode, node) in s.inodes.iter_mut() {
            node.opens = 0;
            node.file.crash(|sector| keep_sector(inode, sector));
        }
        s.pending.clear();
        s.committed = ns.clone();
        s.live = ns;
    }

    /// The process using the disk dies: from now on every operation through a handle
    /// of its life fails, so nothing it still tries reaches the disk. The next process
    /// uses [`Self::next_life`]'s handle.
    pub fn freeze(&self) {
        self.state.borrow_mut().life += 1;
    }

    /// A handle for the process that uses the disk now (after [`Self::freeze`] and
    /// [`Self::crash`], the one that restarts).
    pub fn next_life(&self) -> MemFs {
        MemFs {
            state: self.state.clone(),
            life: self.state.borrow().life,
        }
    }

    /// How many namespace changes a crash now may keep or lose.
    pub fn pending_ops(&self) -> usize {
        self.state.borrow().pending.len()
    }

    /// Arms `fault`.
    pub fn arm(&self, fault: DiskFault) {
        if fault.count > 0 {
            self.state.borrow_mut().faults.push(fault);
        }
    }

    /// The bytes all files hold together (what a capacity bounds).
    pub fn used(&self) -> u64 {
        self.state
            .borrow()
            .inodes
            .values()
            .map(|n| n.file.len())
            .sum()
    }

    /// Disarms every armed fault and lifts the capacity: the disk is sound again.
    pub fn mend(&self) {
        let mut s = self.state.borrow_mut();
        s.faults.clear();
        s.capacity = None;
    }

    /// Bounds what all files may hold together (`None`: unbounded). Writes and
    /// allocations that would pass it fail with ENOSPC; what is already allocated stays
    /// writable, as on a full file system.
    pub fn set_capacity(&self, bytes: Option<u64>) {
        self.state.borrow_mut().capacity = bytes;
    }

    /// Opens the file at `path` (creating it if `create`) for a segment's I/O: its
    /// inode, held until [`Self::close`].
    pub fn open_inode(&self, path: &Path, create: bool) -> io::Result<u64> {
        let mut s = self.state.borrow_mut();
        s.alive(self.life)?;
        let inode = match s.file(path) {
            Ok(i) => i,
            Err(e) if create && e.kind() == io::ErrorKind::NotFound => s.create(path)?,
            Err(e) => return Err(e),
        };
        drop(s);
        self.hold(inode);
        Ok(inode)
    }

    /// Writes `bytes` at `pos` of inode `inode`.
    pub fn write_inode(&self, inode: u64, pos: u64, bytes: &[u8]) -> io::Result<usize> {
        self.state
            .borrow_mut()
            .may_write(self.life, inode, pos, bytes.len())?;
        self.with_inode(inode, |f| f.write_at(pos, bytes))
            .map(|()| bytes.len())
            .ok_or_else(inode_gone)
    }

    /// Grows inode `inode` to `len` (`fallocate`).
    pub fn allocate_inode(&self, inode: u64, len: u64) -> io::Result<()> {
        {
            let s = self.state.borrow();
            s.alive(self.life)?;
            s.room(inode, len)?;
        }
        self.with_inode(inode, |f| f.allocate(len))
            .ok_or_else(inode_gone)
    }
}

/// An operation on an inode no name or handle holds any more.
pub(crate) fn inode_gone() -> io::Error {
    io::Error::new(io::ErrorKind::NotFound, "the file's inode is gone")
}

impl Fs for MemFs {
    fn read(&self, path: &Path) -> io::Result<Vec<u8>> {
        let s = self.state.borrow();
        s.alive(self.life)?;
        let inode = s.file(path)?;
        let f = &s.inodes[&inode].file;
        Ok(f.read_at(0, f.len() as usize).to_vec())
    }

    fn write(&self, path: &Path, bytes: &[u8]) -> io::Result<()> {
        let mut s = self.state.borrow_mut();
        s.alive(self.life)?;
        let inode = match s.file(path) {
            Ok(i) => i,
            Err(e) if e.kind() == io::ErrorKind::NotFound => s.create(path)?,
            Err(e) => return Err(e),
        };
        s.check(self.life, DiskOp::Write, inode)?;
        s.room(inode, bytes.len() as u64)?;
        let f = s.inode_mut(inode);
        f.truncate(0);
        f.write_at(0, bytes);
        Ok(())
    }

    fn open(&self, path: &Path, create: bool) -> io::Result<Box<dyn FsFile>> {
        let inode = self.open_inode(path, create)?;
        Ok(Box::new(MemFsFile {
            fs: self.clone(),
            inode,
        }))
    }

    fn rename(&self, from: &Path, to: &Path) -> io::Result<()> {
        let mut s = self.state.borrow_mut();
        s.alive(self.life)?;
        s.file(from)?;
        if !s.dir_exists(parent_of(to)) {
            return Err(not_found(parent_of(to)));
        }
        s.change(NsOp::Rename(from.to_path_buf(), to.to_path_buf()));
        s.collect();
        Ok(())
    }

    fn remove_file(&self, path: &Path) -> io::Result<()> {
        let mut s = self.state.borrow_mut();
        s.alive(self.life)?;
        s.file(path)?;
        s.change(NsOp::Remove(path.to_path_buf()));
        s.collect();
        Ok(())
    }

    fn create_dir_all(&self, path: &Path) -> io::Result<()> {
        let mut s = self.state.borrow_mut();
        s.alive(self.life)?;
        let mut missing: Vec<&Path> = path
            .ancestors()
            .take_while(|p| p.parent().is_some() && !s.dir_exists(p))
            .collect();
        missing.reverse();
        for p in missing {
            if s.live.contains_key(p) {
                return Err(io::Error::new(
                    io::ErrorKind::AlreadyExists,
                    format!("{}: a file", p.display()),
                ));
            }
            s.change(NsOp::MkDir(p.to_path_buf()));
        }
        Ok(())
    }

    fn remove_dir_all(&self, path: &Path) -> io::Result<()> {
        let mut s = self.state.borrow_mut();
        s.alive(self.life)?;
        if !s.dir_exists(path) {
            return Err(not_found(path));
        }
        s.change(NsOp::RemoveTree(path.to_path_buf()));
        s.collect();
        Ok(())
    }

    fn read_dir(&self, dir: &Path) -> io::Result<Vec<PathBuf>> {
        let s = self.state.borrow();
        s.alive(self.life)?;
        if !s.dir_exists(dir) {
            return Err(not_found(dir));
        }
        Ok(s.live
            .range(dir.to_path_buf()..)
            .map(|(p, _)| p)
            .take_while(|p| p.starts_with(dir))
            .filter(|p| p.parent() == Some(dir))
            .cloned()
            .collect())
    }

    fn len(&self, path: &Path) -> io::Result<u64> {
        let s = self.state.borrow();
        s.alive(self.life)?;
        let inode = s.file(path)?;
        Ok(s.inodes[&inode].file.len())
    }

    fn exists(&self, path: &Path) -> bool {
        let s = self.state.borrow();
        s.life == self.life && s.live.contains_key(path)
    }

    fn sync_dir(&self, dir: &Path) -> io::Result<()> {
        let mut s = self.state.borrow_mut();
        s.alive(self.life)?;
        if !s.dir_exists(dir) {
            return Err(not_found(dir));
        }
        s.commit();
        Ok(())
    }
}

/// An open file of a [`MemFs`]: its inode, whatever its name becomes.
struct MemFsFile {
    fs: MemFs,
    inode: u64,
}

impl MemFsFile {
    fn with<T>(&self, f: impl FnOnce(&mut MemFile) -> T) -> io::Result<T> {
        self.fs
            .with_inode(self.inode, f)
            .ok_or_else(|| io::Error::new(io::ErrorKind::NotFound, "the file is gone"))
    }
}

impl Drop for MemFsFile {
    fn drop(&mut self) {
        self.fs.close(self.inode);
    }
}

impl FsFile for MemFsFile {
    fn read_at(&self, buf: &mut [u8], pos: u64) -> io::Result<usize> {
        self.with(|f| {
            let got = f.read_at(pos, buf.len());
            buf[..got.len()].copy_from_slice(got);
            got.len()
        })
    }

    fn write_all_at(&mut self, bytes: &[u8], pos: u64) -> io::Result<()> {
        self.fs.write_inode(self.inode, pos, bytes).map(|_| ())
    }

    fn set_len(&mut self, len: u64) -> io::Result<()> {
        self.fs.state.borrow().room(self.inode, len)?;
        self.with(|f| f.truncate(len))
    }

    fn size(&self) -> io::Result<u64> {
        self.with(|f| f.len())
    }

    fn sync_data(&mut self) -> io::Result<()> {
        self.fs.sync_inode(self.inode)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn p(s: &str) -> PathBuf {
        PathBuf::from(s)
    }

    /// Writes `name` in `dir` as the engine replaces a small file: temporary, synced,
    /// renamed, directory synced.
    fn replace(fs: &dyn Fs, dir: &Path, name: &str, bytes: &[u8]) {
        let tmp = dir.join(format!("{name}.tmp"));
        let mut f = fs.open(&tmp, true).expect("open");
        f.set_len(0).expect("cut");
        f.write_all_at(bytes, 0).expect("write");
        f.sync_data().expect("sync");
        fs.rename(&tmp, &dir.join(name)).expect("rename");
        fs.sync_dir(dir).expect("sync dir");
    }

    #[test]
    fn both_file_systems_agree_on_the_basics() {
        let tmp = tempfile::tempdir().expect("tempdir");
        let mem = MemFs::new();
        for (fs, root) in [
            (&KernelFs as &dyn Fs, tmp.path().to_path_buf()),
            (&mem, p("/d")),
        ] {
            let dir = root.join("a/b");
            fs.create_dir_all(&dir).expect("mkdir");
            fs.write(&dir.join("x"), b"hello").expect("write");
            replace(fs, &dir, "y", b"world");
            assert_eq!(fs.read(&dir.join("x")).expect("read"), b"hello");
            assert_eq!(fs.read_to_string(&dir.join("y")).expect("read"), "world");
            assert_eq!(fs.len(&dir.join("y")).expect("len"), 5);
            assert_eq!(
                fs.read_dir(&dir).expect("list"),
                vec![dir.join("x"), dir.join("y")]
            );
            fs.rename(&dir.join("x"), &dir.join("z")).expect("rename");
            assert!(!fs.exists(&dir.join("x")) && fs.exists(&dir.join("z")));
            fs.remove_file(&dir.join("z")).expect("remove");
            assert_eq!(
                fs.read(&dir.join("z")).expect_err("gone").kind(),
                io::ErrorKind::NotFound
            );
            let mut f = fs.open(&dir.join("y"), false).expect("open");
            f.write_all_at(b"W", 0).expect("write");
            let mut buf = [0u8; 8];
            assert_eq!(f.read_at(&mut buf, 0).expect("read"), 5);
            assert_eq!(&buf[..5], b"World");
            f.set_len(2).expect("cut");
            assert_eq!(f.size().expect("size"), 2);
            fs.remove_dir_all(&root.join("a")).expect("rmdir");
            assert!(!fs.exists(&dir));
        }
    }

    #[test]
    fn a_crash_keeps_what_was_committed_and_a_prefix_of_the_rest() {
        let fs = MemFs::new();
        let d = p("/d");
        fs.create_dir_all(&d).expect("mkdir");
        replace(&fs, &d, "cp", b"1");
        // Unsynced: a new file, then a replacement of the checkpoint without its syncs.
        fs.write(&d.join("new"), b"data").expect("write");
        fs.write(&d.join("cp.tmp"), b"2").expect("write");
        fs.rename(&d.join("cp.tmp"), &d.join("cp")).expect("rename");
        assert_eq!(fs.pending_ops(), 3);

        fs.crash(0, |_, _| true);
        assert_eq!(fs.read(&d.join("cp")).expect("read"), b"1");
        assert!(
            !fs.exists(&d.join("new")),
            "its creation was never committed"
        );

        fs.write(&d.join("new"), b"data").expect("write");
        fs.write(&d.join("cp.tmp"), b"2").expect("write");
        fs.rename(&d.join("cp.tmp"), &d.join("cp")).expect("rename");
        // The creations survive, the rename does not; the contents were never synced.
        fs.crash(2, |_, _| false);
        assert_eq!(fs.read(&d.join("cp")).expect("read"), b"1");
        assert_eq!(
            fs.read(&d.join("new")).expect("read"),
            b"",
            "named, never synced"
        );
        assert_eq!(fs.read(&d.join("cp.tmp")).expect("read"), b"");
    }

    #[test]
    fn a_file_sync_commits_the_namespace_too() {
        let fs = MemFs::new();
        let d = p("/d");
        fs.create_dir_all(&d).expect("mkdir");
        let mut f = fs.open(&d.join("seg"), true).expect("create");
        f.write_all_at(b"batch", 0).expect("write");
        f.sync_data().expect("sync");
        fs.crash(0, |_, _| false);
        assert_eq!(fs.read(&d.join("seg")).expect("read"), b"batch");
    }

    /// What a dead process left running reaches nothing: neither through the file
    /// system nor through a file it had open, before the crash or after it.
    #[test]
    fn a_dead_process_reaches_nothing_of_the_next_life() {
        let fs = MemFs::new();
        let d = p("/d");
        fs.create_dir_all(&d).expect("mkdir");
        let mut old_file = fs.open(&d.join("seg"), true).expect("create");
        old_file.write_all_at(b"batch", 0).expect("write");
        old_file.sync_data().expect("sync");
        fs.freeze();
        assert!(old_file.write_all_at(b"late", 0).is_err(), "dying");
        fs.crash(0, |_, _| false);
        let next = fs.next_life();
        let mut new_file = next.open(&d.join("seg"), false).expect("open");
        new_file.write_all_at(b"BATCH", 0).expect("write");
        assert!(
            old_file.write_all_at(b"stale", 0).is_err(),
            "after the crash"
        );
        assert!(old_file.set_len(1).is_err(), "no truncation either");
        assert!(old_file.sync_data().is_err());
        assert!(fs.write(&d.join("snapshot"), b"x").is_err());
        assert!(!fs.exists(&d.join("seg")), "the old handle sees nothing");
        drop(old_file); // closing it releases nothing of the new life's
        assert_eq!(next.read(&d.join("seg")).expect("read"), b"BATCH");
    }

    #[test]
    fn armed_faults_and_a_full_disk_fail_operations_and_change_nothing() {
        let fs = MemFs::new();
        let d = p("/d");
        fs.create_dir_all(&d).expect("mkdir");
        let mut f = fs.open(&d.join("seg"), true).expect("create");
        f.write_all_at(b"ab", 0).expect("write");
        fs.arm(DiskFault {
            op: DiskOp::Write,
            under: d.clone(),
            errno: libc::EIO,
            count: 1,
        });
        fs.arm(DiskFault {
            op: DiskOp::Sync,
            under: p("/elsewhere"),
            errno: libc::EIO,
            count: 1,
        });
        let e = f.write_all_at(b"cd", 2).expect_err("armed");
        assert_eq!(e.raw_os_error(), Some(libc::EIO));
        assert_eq!(
            fs.read(&d.join("seg")).expect("read"),
            b"ab",
            "nothing written"
        );
        f.write_all_at(b"cd", 2).expect("used up");
        f.sync_data().expect("a fault under another directory");
        fs.set_capacity(Some(6));
        let e = f.write_all_at(b"efg", 4).expect_err("full");
        assert_eq!(e.raw_os_error(), Some(libc::ENOSPC));
        f.write_all_at(b"ef", 4).expect("fits exactly");
        f.write_all_at(b"AB", 0)
            .expect("rewriting what is there needs no room");
        assert_eq!(fs.read(&d.join("seg")).expect("read"), b"ABcdef");
    }

    #[test]
    fn an_open_file_follows_its_inode_across_a_rename() {
        let fs = MemFs::new();
        let d = p("/d");
        fs.create_dir_all(&d).expect("mkdir");
        let mut f = fs.open(&d.join("a"), true).expect("create");
        fs.rename(&d.join("a"), &d.join("b")).expect("rename");
        f.write_all_at(b"x", 0).expect("write");
        assert_eq!(fs.read(&d.join("b")).expect("read"), b"x");
        assert!(fs.open(&d.join("a"), false).is_err());
    }
}
