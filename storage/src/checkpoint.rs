//! One-number checkpoint files in a partition directory (`log-start-offset`,
//! `cleaner-offset-checkpoint`): an offset in decimal, replaced atomically.
//!
//! Invariant: a reader sees the old value or the new one, never a torn file — the new
//! value is written to a temporary file, synced, renamed over the old one, and the
//! directory is synced before the write counts as done.

use super::error::StorageError;
use crate::fs::Fs;
use std::path::Path;

/// The log cleaner's checkpoint: the first offset not yet compacted. Named here, not in
/// `compaction`, because the log lowers it when it is truncated (and the log never
/// depends on compaction).
pub const CLEANER_CHECKPOINT: &str = "cleaner-offset-checkpoint";

/// The offset stored in `dir/name`, or `None` if the file does not exist.
pub fn read(fs: &dyn Fs, dir: &Path, name: &str) -> Result<Option<i64>, StorageError> {
    let path = dir.join(name);
    match fs.read_to_string(&path) {
        Ok(text) => decode(&text)
            .map(Some)
            .map_err(|e| StorageError::new(path.display(), format!("bad checkpoint file: {e}"))),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(None),
        Err(e) => Err(StorageError::new(path.display(), e)),
    }
}

/// The offset a checkpoint file's `text` holds.
pub fn decode(text: &str) -> Result<i64, std::num::ParseIntError> {
    text.trim().parse::<i64>()
}

/// Replaces `dir/name` with `offset`. Blocking on the kernel's file system; run it off
/// the reactor (`Disk::run`).
pub fn write(fs: &dyn Fs, dir: &Path, name: &str, offset: i64) -> std::io::Result<()> {
    replace_file(fs, dir, name, format!("{offset}\n").as_bytes())
}

/// Replaces `dir/name` with `bytes` atomically: a temporary `name.tmp` is written and
/// synced, renamed over `name`, and the directory synced, so a crash leaves the old file
/// or the new one, never a torn one. Blocking on the kernel's file system; run it off
/// the reactor (`Disk::run`).
pub fn replace_file(fs: &dyn Fs, dir: &Path, name: &str, bytes: &[u8]) -> std::io::Result<()> {
    let tmp = dir.join(format!("{name}.tmp"));
    let mut f = fs.create(&tmp)?;
    f.write_all_at(bytes, 0)?;
    f.sync_all()?;
    drop(f);
    fs.rename(&tmp, &dir.join(name))?;
    fs.sync_dir(dir)
}

#[cfg(test)]
mod tests {
    #[test]
    fn round_trips_and_rejects_garbage() {
        let dir = tempfile::tempdir().expect("tempdir");
        let fs = &crate::fs::KernelFs;
        assert_eq!(super::read(fs, dir.path(), "x").expect("read"), None);
        super::write(fs, dir.path(), "x", 4711).expect("write");
        assert_eq!(super::read(fs, dir.path(), "x").expect("read"), Some(4711));
        std::fs::write(dir.path().join("y"), "four").expect("write");
        assert!(super::read(fs, dir.path(), "y").is_err());
    }
}
