//! Sequential direct-I/O appends to one file, for files whose logical length is not a
//! multiple of the block size.
//!
//! O_DIRECT writes must start at, and span, whole blocks of the device's logical block
//! size. The appender keeps every byte from the start of the last partly filled block to
//! the logical end in memory; a flush writes that range (rounded up with zeros to whole
//! blocks) at the block's aligned position, then drops the blocks that are now full and
//! keeps the partial one, which the next flush rewrites as it grows (kernel-notes.md,
//! "O_DIRECT alignment").
//!
//! Invariants (asserted):
//! - `block_start` is aligned, `block_start <= flushed_len <= logical_len`;
//! - `buf` holds exactly the bytes `[block_start, logical_len)`;
//! - positions only grow.
//!
//! Not safe for concurrent flushes: it is owned by one task (the partition's flusher).
//! The zero padding past the logical end is on disk until the file is truncated at seal
//! time; readers and recovery stop at the logical end (see `recovery.rs`).

use glommio::io::DmaFile;
use std::rc::Rc;

pub struct AlignedAppender {
    file: Rc<DmaFile>,
    alignment: u64,
    block_start: u64,
    flushed_len: u64,
    buf: Vec<u8>,
}

impl AlignedAppender {
    /// An appender continuing a file whose valid content is `logical_len` bytes long.
    /// `tail` must be the file's bytes from the aligned start of the last partial block
    /// to `logical_len` (empty when `logical_len` is aligned).
    pub fn resume(file: Rc<DmaFile>, logical_len: u64, tail: Vec<u8>) -> Self {
        let alignment = file.alignment().max(4096);
        let block_start = logical_len - logical_len % alignment;
        assert_eq!(
            tail.len() as u64,
            logical_len - block_start,
            "tail must be the partial block"
        );
        AlignedAppender {
            file,
            alignment,
            block_start,
            flushed_len: logical_len,
            buf: tail,
        }
    }

    pub fn file(&self) -> &Rc<DmaFile> {
        &self.file
    }

    pub fn logical_len(&self) -> u64 {
        self.block_start + self.buf.len() as u64
    }

    pub fn flushed_len(&self) -> u64 {
        self.flushed_len
    }

    pub fn has_unflushed(&self) -> bool {
        self.logical_len() > self.flushed_len
    }

    pub fn push(&mut self, bytes: &[u8]) {
        self.buf.extend_from_slice(bytes);
    }

    /// Writes everything pushed so far. On return `flushed_len() == logical_len()`.
    pub async fn flush(&mut self) -> std::io::Result<()> {
        if !self.has_unflushed() {
            return Ok(());
        }
        let len = self.buf.len();
        let padded = (len as u64).div_ceil(self.alignment) * self.alignment;
        let mut dma = self.file.alloc_dma_buffer(padded as usize);
        let out = dma.as_bytes_mut();
        out[..len].copy_from_slice(&self.buf);
        out[len..].fill(0);
        let written = self
            .file
            .write_at(dma, self.block_start)
            .await
            .map_err(std::io::Error::from)?;
        if (written as u64) < padded {
            return Err(std::io::Error::new(
                std::io::ErrorKind::WriteZero,
                format!("short direct write: {written} of {padded} bytes"),
            ));
        }
        let logical = self.logical_len();
        assert!(logical >= self.flushed_len, "flushed position only grows");
        self.flushed_len = logical;
        // Keep only the partial last block; the full ones are final.
        let keep_from = logical - logical % self.alignment;
        let full = (keep_from - self.block_start) as usize;
        self.buf.drain(..full);
        self.block_start = keep_from;
        assert_eq!(self.block_start % self.alignment, 0);
        Ok(())
    }

    pub async fn sync(&self) -> std::io::Result<()> {
        self.file.fdatasync().await.map_err(std::io::Error::from)
    }

    /// Cuts the zero padding of the last block off the file, so a sealed file is exactly
    /// its logical length. Call after `flush`.
    pub async fn truncate_to_logical(&self) -> std::io::Result<()> {
        assert!(!self.has_unflushed(), "truncate only after a flush");
        self.file
            .truncate(self.logical_len())
            .await
            .map_err(std::io::Error::from)
    }
}
