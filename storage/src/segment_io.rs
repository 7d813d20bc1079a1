//! A segment file opened for I/O: direct I/O through glommio on the kernel's disk, or
//! an inode of the simulator's [`MemFs`]. Everything that reads, writes, syncs, cuts or
//! reserves a segment file's bytes holds an [`OpenFile`] (through `file_cache`), so the
//! same engine runs on either disk.
//!
//! The kernel case is glommio's `DmaFile` and its buffers, with nothing added on the hot
//! path but a match. The memory case completes every operation at once: the simulator
//! decides when time passes, and what a crash keeps is the [`MemFs`]'s to say (its
//! module doc).
//!
//! Errors keep their OS code (`os_error`), except a failed sync's, which carries none on
//! purpose (see `SegmentFile::sync_data`).

use crate::fs::{inode_gone, Disk, MemFs};
use glommio::io::{DmaBuffer, DmaFile, OpenOptions, ReadResult};
use std::io;
use std::ops::Deref;
use std::path::Path;

/// The smallest block direct I/O aligns to (the page size); files in memory use it too,
/// so the appender pads as it does on a disk.
pub const MIN_ALIGNMENT: u64 = 4096;

/// A segment file, open.
pub enum OpenFile {
    Direct(DmaFile),
    Memory(MemHandle),
}

/// An open inode of a [`MemFs`]: it keeps the file's contents while open, whatever
/// becomes of its names.
pub struct MemHandle {
    fs: MemFs,
    inode: u64,
}

impl Drop for MemHandle {
    fn drop(&mut self) {
        self.fs.close(self.inode);
    }
}

/// Bytes read from a segment file.
pub enum ReadBytes {
    Direct(ReadResult),
    Memory(Vec<u8>),
}

impl Deref for ReadBytes {
    type Target = [u8];

    fn deref(&self) -> &[u8] {
        match self {
            ReadBytes::Direct(r) => r,
            ReadBytes::Memory(v) => v,
        }
    }
}

/// A buffer to write to a segment file: aligned memory for direct I/O, a vector in
/// memory.
pub enum WriteBuffer {
    Direct(DmaBuffer),
    Memory(Vec<u8>),
}

impl WriteBuffer {
    pub fn len(&self) -> usize {
        match self {
            WriteBuffer::Direct(b) => b.len(),
            WriteBuffer::Memory(v) => v.len(),
        }
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    pub fn as_bytes(&self) -> &[u8] {
        match self {
            WriteBuffer::Direct(b) => b.as_bytes(),
            WriteBuffer::Memory(v) => v,
        }
    }

    pub fn as_bytes_mut(&mut self) -> &mut [u8] {
        match self {
            WriteBuffer::Direct(b) => b.as_bytes_mut(),
            WriteBuffer::Memory(v) => v,
        }
    }
}

impl OpenFile {
    /// Opens the file at `path` on `disk`, creating it if `create`.
    pub async fn open(disk: &Disk, path: &Path, create: bool) -> io::Result<OpenFile> {
        match disk {
            Disk::Kernel => {
                let mut options = OpenOptions::new();
                options.read(true).write(true);
                if create {
                    options.create(true);
                }
                options
                    .dma_open(path)
                    .await
                    .map(OpenFile::Direct)
                    .map_err(os_error)
            }
            Disk::Memory(fs) => {
                let inode = fs.open_inode(path, create)?;
                Ok(OpenFile::Memory(MemHandle {
                    fs: fs.clone(),
                    inode,
                }))
            }
        }
    }

    /// The block size writes must align to (at least [`MIN_ALIGNMENT`]).
    pub fn alignment(&self) -> u64 {
        match self {
            OpenFile::Direct(f) => f.alignment().max(MIN_ALIGNMENT),
            OpenFile::Memory(_) => MIN_ALIGNMENT,
        }
    }

    /// A zeroed buffer of `len` bytes to write to this file.
    pub fn alloc_buffer(&self, len: usize) -> WriteBuffer {
        match self {
            OpenFile::Direct(f) => WriteBuffer::Direct(f.alloc_dma_buffer(len)),
            OpenFile::Memory(_) => WriteBuffer::Memory(vec![0; len]),
        }
    }

    /// Up to `len` bytes at `pos`: fewer at the end of the file.
    pub async fn read_at(&self, pos: u64, len: usize) -> io::Result<ReadBytes> {
        match self {
            OpenFile::Direct(f) => f
                .read_at(pos, len)
                .await
                .map(ReadBytes::Direct)
                .map_err(io::Error::from),
            OpenFile::Memory(h) => {
                h.fs.with_inode(h.inode, |f| ReadBytes::Memory(f.read_at(pos, len).to_vec()))
                    .ok_or_else(inode_gone)
            }
        }
    }

    pub async fn file_size(&self) -> io::Result<u64> {
        match self {
            OpenFile::Direct(f) => f.file_size().await.map_err(os_error),
            OpenFile::Memory(h) => h.fs.with_inode(h.inode, |f| f.len()).ok_or_else(inode_gone),
        }
    }

    /// Reserves the file's blocks up to `size` (`fallocate`, the size grown with it).
    pub async fn pre_allocate(&self, size: u64) -> io::Result<()> {
        match self {
            OpenFile::Direct(f) => f.pre_allocate(size, false).await.map_err(os_error),
            OpenFile::Memory(h) => h.fs.allocate_inode(h.inode, size),
        }
    }

    /// Writes `buf` at `pos`. Through `SegmentFile::write_at`, which applies the armed
    /// storage faults.
    pub(crate) async fn write_at(&self, buf: WriteBuffer, pos: u64) -> io::Result<usize> {
        match (self, buf) {
            (OpenFile::Direct(f), WriteBuffer::Direct(b)) => {
                f.write_at(b, pos).await.map_err(os_error)
            }
            (OpenFile::Memory(h), b) => h.fs.write_inode(h.inode, pos, b.as_bytes()),
            (OpenFile::Direct(_), WriteBuffer::Memory(_)) => Err(io::Error::new(
                io::ErrorKind::InvalidInput,
                "a direct-I/O write needs an aligned buffer",
            )),
        }
    }

    /// `fdatasync`. Its error carries no OS code (see `SegmentFile::sync_data`).
    pub(crate) async fn sync_data(&self) -> io::Result<()> {
        let synced = match self {
            OpenFile::Direct(f) => f.fdatasync().await.map_err(os_error),
            OpenFile::Memory(h) => h.fs.sync_inode(h.inode),
        };
        synced.map_err(|e| io::Error::other(format!("fdatasync failed: {e}")))
    }

    pub(crate) async fn truncate(&self, len: u64) -> io::Result<()> {
        match self {
            OpenFile::Direct(f) => f.truncate(len).await.map_err(os_error),
            OpenFile::Memory(h) => {
                h.fs.with_inode(h.inode, |f| f.truncate(len))
                    .ok_or_else(inode_gone)
            }
        }
    }

    /// Closes the file (a direct-I/O descriptor is closed through the ring).
    pub async fn close(self) {
        match self {
            OpenFile::Direct(f) => {
                let _ = f.close().await;
            }
            OpenFile::Memory(h) => drop(h),
        }
    }
}

/// The error with its OS code kept (glommio's conversion keeps only the kind, and the
/// kind of EMFILE is not one a caller can name); callers add the path.
pub fn os_error(e: glommio::GlommioError<()>) -> io::Error {
    if let glommio::GlommioError::EnhancedIoError { source, .. } = &e {
        if let Some(code) = source.raw_os_error() {
            return io::Error::from_raw_os_error(code);
        }
    }
    io::Error::from(e)
}
