//! Records a read hands over without their bytes: a range of a segment file, opened for
//! buffered reads, that the broker's edge sends to the socket with `splice` (the bytes go
//! from the page cache to the socket and never enter user space).
//!
//! Invariants: the range holds whole batches only, every one of them below the bound the
//! read was asked for; the descriptor is its own (not the file cache's), so the range
//! stays readable until the last clone drops, wherever it travels (it is `Send`) — the
//! segment may be deleted meanwhile (an open file outlives its name).
//!
//! The segment files are written with direct I/O and read here through the page cache.
//! That is coherent for everything below the written offset: a direct write invalidates
//! the cached pages it covers, and the only block ever rewritten (the partial last one)
//! is rewritten with the same bytes below the written end.

use std::os::unix::io::{AsRawFd, RawFd};
use std::sync::Arc;

/// The smallest file range a read for sending answers with (smaller reads are cheaper
/// as bytes: a splice costs two ring operations and a descriptor).
pub const FILE_RANGE_MIN_BYTES: usize = 64 << 10;
/// The largest: the edge encodes a range's records field around a placeholder of this
/// size at most.
pub const FILE_RANGE_MAX_BYTES: usize = 128 << 20;

/// `len` bytes of a segment file from `pos`.
#[derive(Debug, Clone)]
pub struct FileRange {
    file: Arc<std::fs::File>,
    pos: u64,
    len: usize,
}

impl FileRange {
    /// `len` bytes of `file` from `pos`, which the caller knows to be whole batches.
    pub fn new(file: std::fs::File, pos: u64, len: usize) -> FileRange {
        FileRange {
            file: Arc::new(file),
            pos,
            len,
        }
    }

    /// The descriptor to read the range from; valid while `self` lives.
    pub fn fd(&self) -> RawFd {
        self.file.as_raw_fd()
    }

    pub fn pos(&self) -> u64 {
        self.pos
    }

    pub fn len(&self) -> usize {
        self.len
    }

    pub fn is_empty(&self) -> bool {
        self.len == 0
    }
}
