//! Copying a partition's directory into another log directory of the same broker while
//! its log keeps changing: the data path of AlterReplicaLogDirs (`shard::log_dir_moves`).
//! Blocking file I/O, run on the blocking pool, never on a shard's executor.
//!
//! A move copies in passes into `<dest>/<topic>-<partition>.move`. Each pass copies what
//! changed since the one before: a file whose length or modification time moved is
//! compared chunk by chunk and only the chunks that differ are written (logs, indexes
//! and checkpoints only grow at their ends or are replaced whole, so a pass over a
//! growing log writes about what was appended), and files gone from the source go from
//! the copy; zeros the source has not written yet (preallocated space) stay holes in
//! the copy and cost no pacing. The last pass runs with the log closed, so the copy is then exact; it is
//! synced, marked complete (`MOVE_COMPLETE`) and only then renamed into place.
//!
//! Crash safety: the source is renamed away (to a deleted name, which the next start
//! removes) only after the copy is complete and synced, and the copy renamed into place
//! after that; a start that finds a complete copy and no partition directory finishes
//! the move (`finish_moves`), and one that finds an incomplete copy removes it. So the
//! partition is always in exactly one directory, or in a complete copy.
//!
//! Bytes written are paced by `pace`, Kafka's `replica.alter.log.dirs.io.max.bytes.per.second`.

use std::collections::HashMap;
use std::fs::{self, File, OpenOptions};
use std::io::{self, Read, Seek, SeekFrom, Write};
use std::path::{Path, PathBuf};
use std::time::SystemTime;

/// The suffix of a partition directory's copy in progress.
pub const MOVE_SUFFIX: &str = ".move";
/// The file that marks a copy complete and synced.
pub const MOVE_COMPLETE: &str = "move-complete";

const CHUNK: usize = 1 << 20;

/// The copy of one partition directory, and what each file was when last copied.
pub struct DirCopy {
    src: PathBuf,
    dst: PathBuf,
    copied: HashMap<String, Copied>,
}

/// A file as it was when last copied.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Copied {
    len: u64,
    modified: Option<SystemTime>,
    inode: u64,
}

impl DirCopy {
    /// A copy of `src` (`<log dir>/<topic>-<partition>`) into log directory `dest_log_dir`.
    pub fn new(src: &Path, dest_log_dir: &Path) -> DirCopy {
        let name = src
            .file_name()
            .map(|n| n.to_os_string())
            .unwrap_or_default();
        let mut copy = name;
        copy.push(MOVE_SUFFIX);
        DirCopy {
            src: src.to_path_buf(),
            dst: dest_log_dir.join(copy),
            copied: HashMap::new(),
        }
    }

    /// Where the copy is made.
    pub fn copy_dir(&self) -> &Path {
        &self.dst
    }

    /// Where the partition lives once the move completes.
    pub fn final_dir(&self) -> PathBuf {
        let name = self.src.file_name().unwrap_or_default();
        self.dst.with_file_name(name)
    }

    /// Bytes of the copy so far (what DescribeLogDirs reports for the future replica).
    pub fn copied_bytes(&self) -> u64 {
        self.copied.values().map(|c| c.len).sum()
    }

    /// One pass; `pace(bytes)` is called after each chunk written (it may sleep).
    /// Returns the bytes written.
    pub fn pass(&mut self, pace: &mut dyn FnMut(u64)) -> io::Result<u64> {
        fs::create_dir_all(&self.dst)?;
        let mut written = 0;
        let mut present = Vec::new();
        for entry in fs::read_dir(&self.src)? {
            let entry = entry?;
            let meta = match entry.metadata() {
                Ok(m) if m.is_file() => m,
                Ok(_) => continue,
                // Deleted meanwhile (retention, a replaced checkpoint): the next pass sees.
                Err(e) if e.kind() == io::ErrorKind::NotFound => continue,
                Err(e) => return Err(e),
            };
            let Some(name) = entry.file_name().to_str().map(str::to_string) else {
                continue;
            };
            present.push(name.clone());
            let now = Copied {
                len: meta.len(),
                modified: meta.modified().ok(),
                inode: std::os::unix::fs::MetadataExt::ino(&meta),
            };
            let before = self.copied.get(&name).copied();
            if before == Some(now) {
                continue;
            }
            // The same file grown: only its end can differ (appends, and the rewrite of
            // the last partial block an aligned appender makes), so the comparison
            // starts one chunk before where the last copy ended.
            let from = match before {
                Some(b) if b.inode == now.inode && now.len >= b.len => {
                    (b.len / CHUNK as u64).saturating_sub(1) * CHUNK as u64
                }
                _ => 0,
            };
            match copy_changes(&entry.path(), &self.dst.join(&name), from, pace) {
                Ok(n) => written += n,
                Err(e) if e.kind() == io::ErrorKind::NotFound => continue,
                Err(e) => return Err(e),
            }
            self.copied.insert(name, now);
        }
        let gone: Vec<String> = self
            .copied
            .keys()
            .filter(|n| !present.contains(n))
            .cloned()
            .collect();
        for name in gone {
            self.copied.remove(&name);
            match fs::remove_file(self.dst.join(&name)) {
                Err(e) if e.kind() != io::ErrorKind::NotFound => return Err(e),
                _ => {}
            }
        }
        Ok(written)
    }

    /// After the last pass (made with the log closed): syncs every file and the copy's
    /// directory, then marks the copy complete.
    pub fn seal(&self) -> io::Result<()> {
        for entry in fs::read_dir(&self.dst)? {
            File::open(entry?.path())?.sync_all()?;
        }
        let mut marker = File::create(self.dst.join(MOVE_COMPLETE))?;
        marker.write_all(b"1\n")?;
        marker.sync_all()?;
        sync_dir(&self.dst)?;
        Ok(())
    }

    /// Puts the sealed copy in place of `src`, which goes to `doomed` (a deleted name the
    /// caller removes, or the next start does).
    pub fn swap_in(&self, doomed: &Path) -> io::Result<PathBuf> {
        fs::rename(&self.src, doomed)?;
        if let Some(parent) = self.src.parent() {
            sync_dir(parent)?;
        }
        let at = self.final_dir();
        fs::rename(&self.dst, &at)?;
        fs::remove_file(at.join(MOVE_COMPLETE))?;
        if let Some(parent) = at.parent() {
            sync_dir(parent)?;
        }
        Ok(at)
    }

    /// Removes the copy (a move given up).
    pub fn discard(&self) {
        let _ = fs::remove_dir_all(&self.dst);
    }
}

/// Makes `dst` hold `src`'s bytes, given that they agree before `start` (a multiple of
/// `CHUNK`), writing only the chunks that differ; returns the bytes written.
fn copy_changes(src: &Path, dst: &Path, start: u64, pace: &mut dyn FnMut(u64)) -> io::Result<u64> {
    debug_assert_eq!(start % CHUNK as u64, 0);
    let mut from = File::open(src)?;
    let mut to = OpenOptions::new()
        .read(true)
        .write(true)
        .create(true)
        .truncate(false)
        .open(dst)?;
    let len = from.metadata()?.len();
    let mut a = vec![0u8; CHUNK];
    let mut b = vec![0u8; CHUNK];
    let mut pos = start.min(len - len % CHUNK as u64);
    from.seek(SeekFrom::Start(pos))?;
    let mut written = 0u64;
    while pos < len {
        let n = read_full(&mut from, &mut a)?;
        if n == 0 {
            break;
        }
        to.seek(SeekFrom::Start(pos))?;
        let m = read_full(&mut to, &mut b[..n])?;
        // Zeros where the copy reads zeros (or ends): a preallocated region not written
        // yet, left a hole in the copy (`set_len` below extends it sparse).
        let zeros = is_zero(&a[..n]) && is_zero(&b[..m]);
        if !zeros && (m != n || a[..n] != b[..n]) {
            to.seek(SeekFrom::Start(pos))?;
            to.write_all(&a[..n])?;
            written += n as u64;
            pace(n as u64);
        }
        pos += n as u64;
    }
    to.set_len(pos)?;
    Ok(written)
}

fn is_zero(bytes: &[u8]) -> bool {
    bytes.iter().all(|b| *b == 0)
}

fn read_full(f: &mut File, buf: &mut [u8]) -> io::Result<usize> {
    let mut n = 0;
    while n < buf.len() {
        match f.read(&mut buf[n..])? {
            0 => break,
            k => n += k,
        }
    }
    Ok(n)
}

fn sync_dir(dir: &Path) -> io::Result<()> {
    File::open(dir)?.sync_all()
}

/// At start, before partitions open: finishes the moves a crash interrupted after
/// their copy was complete (renamed into place when the partition is in no other
/// directory), and removes the copies that were not. Returns what it finished.
pub fn finish_moves(log_dirs: &[PathBuf]) -> Vec<PathBuf> {
    let mut finished = Vec::new();
    for dir in log_dirs {
        let Ok(entries) = fs::read_dir(dir) else {
            continue;
        };
        for entry in entries.flatten() {
            let path = entry.path();
            let Some(name) = path.file_name().and_then(|n| n.to_str()) else {
                continue;
            };
            let Some(partition) = name.strip_suffix(MOVE_SUFFIX) else {
                continue;
            };
            let elsewhere = log_dirs.iter().any(|d| d.join(partition).is_dir());
            if path.join(MOVE_COMPLETE).is_file() && !elsewhere {
                let at = dir.join(partition);
                match fs::rename(&path, &at).and_then(|()| fs::remove_file(at.join(MOVE_COMPLETE)))
                {
                    Ok(()) => finished.push(at),
                    Err(e) => {
                        tracing::warn!(path = %path.display(), error = %e, "finishing a partition's move")
                    }
                }
            } else if let Err(e) = fs::remove_dir_all(&path) {
                tracing::warn!(path = %path.display(), error = %e, "removing an unfinished partition move");
            }
        }
    }
    finished
}

#[cfg(test)]
mod tests {
    use super::*;

    fn write(p: &Path, bytes: &[u8]) {
        fs::write(p, bytes).unwrap();
    }

    #[test]
    fn passes_copy_what_changed_and_the_copy_ends_exact() {
        let root = tempfile::tempdir().unwrap();
        let (a, b) = (root.path().join("a"), root.path().join("b"));
        let src = a.join("t-0");
        fs::create_dir_all(&src).unwrap();
        fs::create_dir_all(&b).unwrap();
        write(&src.join("0.log"), &vec![7u8; 3 * CHUNK + 10]);
        write(&src.join("0.index"), b"idx");
        let mut copy = DirCopy::new(&src, &b);
        let mut paced = 0;
        assert_eq!(
            copy.pass(&mut |n| paced += n).unwrap(),
            3 * CHUNK as u64 + 13
        );
        assert_eq!(paced, 3 * CHUNK as u64 + 13);
        // The log grows and one file goes: only the new bytes' chunk is written again.
        let mut grown = vec![7u8; 3 * CHUNK + 10];
        grown.extend_from_slice(&[9u8; 100]);
        write(&src.join("0.log"), &grown);
        fs::remove_file(src.join("0.index")).unwrap();
        assert_eq!(copy.pass(&mut |_| {}).unwrap(), 110);
        assert!(!copy.copy_dir().join("0.index").exists());
        assert_eq!(fs::read(copy.copy_dir().join("0.log")).unwrap(), grown);

        copy.seal().unwrap();
        let at = copy.swap_in(&root.path().join("doomed")).unwrap();
        assert_eq!(at, b.join("t-0"));
        assert!(!src.exists() && !at.join(MOVE_COMPLETE).exists());
        assert_eq!(fs::read(at.join("0.log")).unwrap(), grown);
    }

    #[test]
    fn preallocated_zeros_are_holes_not_writes() {
        let root = tempfile::tempdir().unwrap();
        let src = root.path().join("a/t-0");
        fs::create_dir_all(&src).unwrap();
        let mut bytes = vec![5u8; 100];
        bytes.resize(4 * CHUNK, 0);
        write(&src.join("0.log"), &bytes);
        let mut copy = DirCopy::new(&src, root.path());
        assert_eq!(
            copy.pass(&mut |_| {}).unwrap(),
            CHUNK as u64,
            "only the chunk with data"
        );
        assert_eq!(fs::read(copy.copy_dir().join("0.log")).unwrap(), bytes);
    }

    #[test]
    fn a_start_finishes_a_complete_copy_and_removes_an_incomplete_one() {
        let root = tempfile::tempdir().unwrap();
        let (a, b) = (root.path().join("a"), root.path().join("b"));
        for d in [&a, &b] {
            fs::create_dir_all(d).unwrap();
        }
        // A complete copy whose source was already renamed away: finished.
        fs::create_dir(b.join("t-0.move")).unwrap();
        write(&b.join("t-0.move/0.log"), b"x");
        write(&b.join("t-0.move").join(MOVE_COMPLETE), b"1\n");
        // An incomplete one, its source still in place: removed.
        fs::create_dir(a.join("t-1")).unwrap();
        fs::create_dir(b.join("t-1.move")).unwrap();
        let dirs = [a.clone(), b.clone()];
        assert_eq!(finish_moves(&dirs), vec![b.join("t-0")]);
        assert!(b.join("t-0/0.log").exists() && !b.join("t-0").join(MOVE_COMPLETE).exists());
        assert!(!b.join("t-1.move").exists() && a.join("t-1").exists());
    }
}
