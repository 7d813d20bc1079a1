//! A segment file held in memory, for the simulator: what reads see, what a crash is
//! bound to keep, and everything between, sector by sector.
//!
//! The model is that of a disk under a page cache (kernel-notes.md, "Fault model"):
//! - a write is visible to every read as soon as it completes, durable only once an
//!   `fdatasync` issued after it completes;
//! - the file's length (grown by a write past the end or by an allocation, cut by a
//!   truncation) is metadata, durable with the next sync too;
//! - a crash keeps the contents as of the last sync, and of every sector written since,
//!   whatever the crash's chooser says: any subset, in any order — a write torn part
//!   way, a later write kept while an earlier one is lost — but never part of a sector
//!   (sectors are written whole) and nothing past the durable length.
//!
//! Invariants: `durable.len()` is the length a crash leaves; every sector in `dirty` is
//! below `live.len()` (rounded up); a sync empties `dirty` and makes `durable` equal to
//! `live`.

use std::collections::BTreeSet;

/// The unit a disk writes whole.
pub const SECTOR: u64 = 512;

#[derive(Debug, Default, Clone)]
pub struct MemFile {
    /// What reads see.
    live: Vec<u8>,
    /// What the last completed sync made durable.
    durable: Vec<u8>,
    /// The sectors written since that sync, by index.
    dirty: BTreeSet<u64>,
    /// The lowest length a truncation cut the file to since that sync: from there on
    /// what reads see may differ from the durable image without a sector written (the
    /// file grown again reads zeros where the image holds the bytes cut).
    cut_at: Option<u64>,
}

impl MemFile {
    pub fn new() -> MemFile {
        MemFile::default()
    }

    /// The length reads see.
    pub fn len(&self) -> u64 {
        self.live.len() as u64
    }

    pub fn is_empty(&self) -> bool {
        self.live.is_empty()
    }

    /// The bytes at `pos`, at most `len` of them: fewer at the end of the file, none
    /// past it.
    pub fn read_at(&self, pos: u64, len: usize) -> &[u8] {
        let start = (pos as usize).min(self.live.len());
        let end = start.saturating_add(len).min(self.live.len());
        &self.live[start..end]
    }

    /// Writes `bytes` at `pos`, growing the file (with zeros before `pos` if it is past
    /// the end).
    pub fn write_at(&mut self, pos: u64, bytes: &[u8]) {
        if bytes.is_empty() {
            return;
        }
        let start = pos as usize;
        let end = start + bytes.len();
        if self.live.len() < end {
            self.live.resize(end, 0);
        }
        self.live[start..end].copy_from_slice(bytes);
        let first = pos / SECTOR;
        let last = (end as u64 - 1) / SECTOR;
        self.dirty.extend(first..=last);
        self.check();
    }

    /// Grows the file to `len` with zeros if it is shorter (`fallocate` without
    /// KEEP_SIZE: the zeros are what an allocated extent reads as, not data written).
    pub fn allocate(&mut self, len: u64) {
        if self.len() < len {
            self.live.resize(len as usize, 0);
        }
    }

    /// Cuts the file to `len` bytes (or grows it with zeros, as `ftruncate` does).
    pub fn truncate(&mut self, len: u64) {
        if len < self.len() {
            self.cut_at = Some(self.cut_at.map_or(len, |c| c.min(len)));
        }
        self.live.resize(len as usize, 0);
        let sectors = len.div_ceil(SECTOR);
        self.dirty.retain(|&s| s < sectors);
        if len % SECTOR != 0 {
            // The cut sector's tail reads as zeros now; a crash may leave either.
            self.dirty.insert(len / SECTOR);
        }
        self.check();
    }

    /// `fdatasync`: everything written so far, and the length, is durable.
    pub fn sync(&mut self) {
        self.durable.resize(self.live.len(), 0);
        for &s in &self.dirty {
            let (a, b) = self.sector(s, self.live.len());
            self.durable[a..b].copy_from_slice(&self.live[a..b]);
        }
        if let Some(cut) = self.cut_at.take() {
            let from = (cut as usize).min(self.live.len());
            self.durable[from..].copy_from_slice(&self.live[from..]);
        }
        self.dirty.clear();
        debug_assert_eq!(self.durable, self.live);
    }

    /// A crash: the file becomes its durable contents, with each sector written since the
    /// last sync (and within the durable length) taken from what reads saw if `keep`
    /// says so. Returns how many written sectors were lost.
    pub fn crash(&mut self, mut keep: impl FnMut(u64) -> bool) -> usize {
        let mut image = std::mem::take(&mut self.durable);
        let mut lost = 0;
        for &s in &self.dirty {
            let (a, b) = self.sector(s, image.len());
            if a >= b {
                lost += 1;
                continue;
            }
            if keep(s) && b <= self.live.len() {
                image[a..b].copy_from_slice(&self.live[a..b]);
            } else {
                lost += 1;
            }
        }
        self.dirty.clear();
        self.cut_at = None;
        self.durable = image.clone();
        self.live = image;
        lost
    }

    /// The byte range of sector `s` within a file of `len` bytes.
    fn sector(&self, s: u64, len: usize) -> (usize, usize) {
        let a = ((s * SECTOR) as usize).min(len);
        let b = (((s + 1) * SECTOR) as usize).min(len);
        (a, b)
    }

    fn check(&self) {
        debug_assert!(self
            .dirty
            .last()
            .is_none_or(|&s| s < self.len().div_ceil(SECTOR)));
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reads_see_writes_and_a_crash_keeps_only_what_was_synced() {
        let mut f = MemFile::new();
        f.write_at(0, &[1; 1000]);
        f.sync();
        f.write_at(1000, &[2; 100]);
        assert_eq!(f.len(), 1100);
        assert_eq!(f.read_at(990, 20), [&[1; 10][..], &[2; 10][..]].concat());
        assert_eq!(f.crash(|_| true), 1, "past the durable length: lost");
        assert_eq!(f.len(), 1000);
        assert_eq!(f.read_at(0, 2000), &[1; 1000][..]);
    }

    #[test]
    fn a_crash_keeps_any_subset_of_the_written_sectors_whole() {
        let mut f = MemFile::new();
        f.allocate(4 * SECTOR);
        f.sync();
        f.write_at(0, &[7; 4 * SECTOR as usize]);
        // Sectors 1 and 3 reach the disk, 0 and 2 do not: a write torn, out of order.
        assert_eq!(f.crash(|s| s % 2 == 1), 2);
        let s = SECTOR as usize;
        assert_eq!(f.read_at(0, s), &[0; 512][..]);
        assert_eq!(f.read_at(SECTOR, s), &[7; 512][..]);
        assert_eq!(f.read_at(2 * SECTOR, s), &[0; 512][..]);
        assert_eq!(f.read_at(3 * SECTOR, s), &[7; 512][..]);
    }

    #[test]
    fn an_unsynced_truncation_can_come_back() {
        let mut f = MemFile::new();
        f.write_at(0, &[3; 1024]);
        f.sync();
        f.truncate(100);
        assert_eq!(f.read_at(0, 1024).len(), 100);
        f.crash(|_| false);
        assert_eq!(
            f.read_at(0, 2048),
            &[3; 1024][..],
            "the old length and bytes"
        );
        f.truncate(100);
        f.sync();
        f.crash(|_| true);
        assert_eq!(f.read_at(0, 2048), &[3; 100][..]);
    }

    #[test]
    fn a_file_cut_and_grown_again_syncs_what_reads_see() {
        let mut f = MemFile::new();
        f.write_at(0, &[5; 2048]);
        f.sync();
        f.truncate(100);
        f.allocate(2048);
        assert_eq!(f.read_at(100, 10), &[0; 10][..]);
        f.sync();
        f.crash(|_| false);
        assert_eq!(f.read_at(0, 2048), [&[5; 100][..], &[0; 1948][..]].concat());
    }

    #[test]
    fn a_rewritten_sector_keeps_its_synced_bytes_or_takes_the_new_ones_whole() {
        let mut f = MemFile::new();
        f.write_at(0, &[1; 512]);
        f.sync();
        f.write_at(256, &[2; 256]);
        let mut g = f.clone();
        f.crash(|_| false);
        assert_eq!(f.read_at(0, 512), &[1; 512][..]);
        g.crash(|_| true);
        assert_eq!(g.read_at(0, 512), [&[1; 256][..], &[2; 256][..]].concat());
    }
}
