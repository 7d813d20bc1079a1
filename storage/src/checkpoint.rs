//! One-number checkpoint files in a partition directory (`log-start-offset`,
//! `cleaner-offset-checkpoint`): an offset in decimal, replaced atomically.
//!
//! Invariant: a reader sees the old value or the new one, never a torn file — the new
//! value is written to a temporary file, synced, renamed over the old one, and the
//! directory is synced before the write counts as done.

use super::error::StorageError;
use std::io::Write;
use std::path::Path;

/// The log cleaner's checkpoint: the first offset not yet compacted. Named here, not in
/// `compaction`, because the log lowers it when it is truncated (and the log never
/// depends on compaction).
pub const CLEANER_CHECKPOINT: &str = "cleaner-offset-checkpoint";

/// The offset stored in `dir/name`, or `None` if the file does not exist.
pub fn read(dir: &Path, name: &str) -> Result<Option<i64>, StorageError> {
    let path = dir.join(name);
    match std::fs::read_to_string(&path) {
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

/// Replaces `dir/name` with `offset`. Blocking; run it off the reactor.
pub fn write(dir: &Path, name: &str, offset: i64) -> std::io::Result<()> {
    replace_file(dir, name, format!("{offset}\n").as_bytes())
}

/// Replaces `dir/name` with `bytes` atomically: a temporary `name.tmp` is written and
/// synced, renamed over `name`, and the directory synced, so a crash leaves the old file
/// or the new one, never a torn one. Blocking; run it off the reactor.
pub fn replace_file(dir: &Path, name: &str, bytes: &[u8]) -> std::io::Result<()> {
    let tmp = dir.join(format!("{name}.tmp"));
    let mut f = std::fs::File::create(&tmp)?;
    f.write_all(bytes)?;
    f.sync_all()?;
    drop(f);
    std::fs::rename(&tmp, dir.join(name))?;
    std::fs::File::open(dir)?.sync_all()
}

#[cfg(test)]
mod tests {
    #[test]
    fn round_trips_and_rejects_garbage() {
        let dir = tempfile::tempdir().expect("tempdir");
        assert_eq!(super::read(dir.path(), "x").expect("read"), None);
        super::write(dir.path(), "x", 4711).expect("write");
        assert_eq!(super::read(dir.path(), "x").expect("read"), Some(4711));
        std::fs::write(dir.path().join("y"), "four").expect("write");
        assert!(super::read(dir.path(), "y").is_err());
    }
}
