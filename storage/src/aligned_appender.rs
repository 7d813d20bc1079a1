//! Sequential direct-I/O appends to one file, for files whose logical length is not a
//! multiple of the block size.
//!
//! O_DIRECT writes must start at, and span, whole blocks of the device's logical block
//! size. The appender keeps the bytes of the last partly filled block in memory (`tail`)
//! and the data appended since the last flush as reference-counted parts (no copy at
//! append time). A flush copies tail + parts once into an aligned DMA buffer, zero padded
//! to whole blocks, writes it at the tail block's aligned position, and keeps the new
//! partial block as the next tail, which the next flush rewrites as it grows
//! (kernel-notes.md, "O_DIRECT alignment").
//!
//! Invariants (asserted):
//! - `block_start` is aligned and `tail` holds exactly the bytes `[block_start,
//!   flushed_len)`, fewer than one block;
//! - `logical_len == flushed_len + parts_len`;
//! - positions only grow.
//!
//! Not safe for concurrent flushes: it is owned by one task (the partition's flusher).
//! The zero padding past the logical end is on disk until the file is truncated at seal
//! time; readers and recovery stop at the logical end (see `recovery.rs`).

use crate::file_cache::SegmentFile;
use crate::segment_io::OpenFile;
use bytes::Bytes;

/// The block size direct I/O to `file` must align to (at least 4 KiB, the page size).
pub fn alignment_of(file: &OpenFile) -> u64 {
    file.alignment()
}

pub struct AlignedAppender {
    /// Opened for each flush, sync or truncation (`file_cache`): an idle appender holds
    /// no descriptor.
    file: SegmentFile,
    alignment: u64,
    block_start: u64,
    flushed_len: u64,
    tail: Vec<u8>,
    /// The previous flush's tail, kept for its capacity: a flush builds the next tail in
    /// it, so flushing allocates nothing but the DMA buffer.
    spare_tail: Vec<u8>,
    parts: Vec<Bytes>,
    parts_len: u64,
}

impl AlignedAppender {
    /// An appender continuing a file whose valid content is `logical_len` bytes long.
    /// `tail` must be the file's bytes from the aligned start of the last partial block
    /// to `logical_len` (empty when `logical_len` is aligned); `alignment` is the file's
    /// ([`alignment_of`]).
    pub fn resume(file: SegmentFile, alignment: u64, logical_len: u64, tail: Vec<u8>) -> Self {
        assert!(alignment.is_power_of_two() && alignment >= 4096);
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
            tail,
            spare_tail: Vec::new(),
            parts: Vec::new(),
            parts_len: 0,
        }
    }

    pub fn file(&self) -> &SegmentFile {
        &self.file
    }

    pub fn logical_len(&self) -> u64 {
        self.flushed_len + self.parts_len
    }

    pub fn flushed_len(&self) -> u64 {
        self.flushed_len
    }

    pub fn has_unflushed(&self) -> bool {
        self.parts_len > 0
    }

    /// Bytes pushed since the last flush.
    pub fn unflushed_len(&self) -> u64 {
        self.parts_len
    }

    /// Appends `bytes` without copying them (they are copied once, at flush).
    pub fn push(&mut self, bytes: Bytes) {
        self.parts_len += bytes.len() as u64;
        self.parts.push(bytes);
    }

    pub fn push_slice(&mut self, bytes: &[u8]) {
        self.push(Bytes::copy_from_slice(bytes));
    }

    /// Writes everything pushed so far. On return `flushed_len() == logical_len()`.
    pub async fn flush(&mut self) -> std::io::Result<()> {
        if !self.has_unflushed() {
            return Ok(());
        }
        let len = self.tail.len() + self.parts_len as usize;
        let padded = (len as u64).div_ceil(self.alignment) * self.alignment;
        let file = self.file.open().await?;
        let mut dma = file.alloc_buffer(padded as usize);
        let out = dma.as_bytes_mut();
        let mut at = self.tail.len();
        out[..at].copy_from_slice(&self.tail);
        for part in &self.parts {
            out[at..at + part.len()].copy_from_slice(part);
            at += part.len();
        }
        debug_assert_eq!(at, len);
        out[len..].fill(0);
        let logical = self.logical_len();
        let keep_from = logical - logical % self.alignment;
        let mut new_tail = std::mem::take(&mut self.spare_tail);
        new_tail.clear();
        new_tail.extend_from_slice(&out[(keep_from - self.block_start) as usize..len]);
        let written = self.file.write_at(&file, dma, self.block_start).await?;
        if (written as u64) < padded {
            return Err(std::io::Error::new(
                std::io::ErrorKind::WriteZero,
                format!("short direct write: {written} of {padded} bytes"),
            ));
        }
        assert!(logical >= self.flushed_len, "flushed position only grows");
        self.flushed_len = logical;
        self.parts.clear();
        self.parts_len = 0;
        self.spare_tail = std::mem::replace(&mut self.tail, new_tail);
        self.block_start = keep_from;
        assert_eq!(self.block_start % self.alignment, 0);
        assert!((self.tail.len() as u64) < self.alignment);
        Ok(())
    }

    pub async fn sync(&self) -> std::io::Result<()> {
        let file = self.file.open().await?;
        self.file.sync_data(&file).await
    }

    /// Cuts the zero padding of the last block off the file, so a sealed file is exactly
    /// its logical length. Call after `flush`.
    pub async fn truncate_to_logical(&self) -> std::io::Result<()> {
        assert!(!self.has_unflushed(), "truncate only after a flush");
        let file = self.file.open().await?;
        self.file.truncate(&file, self.logical_len()).await
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::file_cache::{Access, FileCache};

    use crate::test_executor::run;

    fn pattern(from: usize, len: usize) -> Vec<u8> {
        (from..from + len).map(|i| (i % 251) as u8).collect()
    }

    /// Flushes of every shape — within the tail block, from a partial tail into fresh
    /// blocks, from a block boundary, many blocks at once — into a
    /// preallocated file leave exactly the appended bytes, and a resumed appender
    /// continues them.
    #[test]
    fn flushes_of_every_shape_leave_exactly_the_appended_bytes() {
        run(|| async {
            let dir = tempfile::tempdir().expect("tempdir");
            let cache = FileCache::new(16);
            let path = dir.path().join("0.log");
            let file = SegmentFile::new(&cache, path.clone(), Access::Create);
            let f = file.open().await.expect("open");
            f.pre_allocate(1 << 20).await.expect("fallocate");
            let alignment = alignment_of(&f);
            drop(f);
            let mut a = AlignedAppender::resume(file.clone(), alignment, 0, Vec::new());
            let a_ = alignment as usize;
            // Each inner list is one flush's pushes.
            let rounds: &[&[usize]] = &[
                &[100],         // within the first block
                &[200, 50],     // still within it
                &[a_],          // partial tail into the next block
                &[a_ - 350],    // ends exactly on a block boundary
                &[3 * a_ + 7],  // from a boundary: one write
                &[1, 2, 3],     // tiny, inside the tail block
                &[5 * a_, 900], // partial tail into many fresh blocks
                &[a_ - 1],      // from a partial tail, ends just short of a boundary
            ];
            let mut expect = Vec::new();
            for round in rounds {
                for &n in *round {
                    let bytes = pattern(expect.len(), n);
                    expect.extend_from_slice(&bytes);
                    a.push(Bytes::from(bytes));
                }
                a.flush().await.expect("flush");
                assert_eq!(a.flushed_len(), expect.len() as u64);
                let on_disk = std::fs::read(&path).expect("read");
                assert_eq!(
                    &on_disk[..expect.len()],
                    &expect[..],
                    "after round {round:?}"
                );
                assert!(
                    on_disk[expect.len()..expect.len().div_ceil(a_) * a_]
                        .iter()
                        .all(|&b| b == 0),
                    "the last block is zero padded"
                );
            }
            // Resume from what is on disk, as recovery does, and go on.
            let len = expect.len() as u64;
            let block_start = (len - len % alignment) as usize;
            let tail = expect[block_start..].to_vec();
            let mut b = AlignedAppender::resume(file, alignment, len, tail);
            let more = pattern(expect.len(), 2 * a_ + 11);
            expect.extend_from_slice(&more);
            b.push(Bytes::from(more));
            b.flush().await.expect("flush");
            b.truncate_to_logical().await.expect("truncate");
            assert_eq!(std::fs::read(&path).expect("read"), expect);
        });
    }
}
