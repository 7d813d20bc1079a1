//! The crash-safe replacement of sealed segments by one rewritten segment (the log
//! cleaner's swap), and its recovery when a log opens.
//!
//! The rewritten segment's files are written as `<base>.{log,index,timeindex,...}.cleaned`
//! and synced; then renamed to `.swap`, the log last (a durable `.log.swap` is the commit
//! point: every companion was durable before it); then the replaced segments after the
//! first are deleted and the `.swap` files renamed over the first's, the log last.
//! `recover_swaps` finishes a committed swap a crash interrupted, and undoes one that
//! never reached its commit point, so a crash at any step leaves either the old segments
//! or the new one, never a mix.

use crate::error::StorageError;
use crate::fs::Fs;
use crate::segment::{self, COMPANION_SUFFIXES, LOG_SUFFIX};
use std::path::{Path, PathBuf};

/// Suffix of a rewritten segment's files while they are written.
pub(crate) const CLEANED: &str = ".cleaned";
/// Suffix of a rewritten segment's files once the swap is committed.
pub(crate) const SWAP: &str = ".swap";

fn err(path: &Path, e: impl std::fmt::Display) -> StorageError {
    StorageError::new(path.display(), e)
}

pub(crate) fn suffixed(path: &Path, suffix: &str) -> PathBuf {
    let mut s = path.as_os_str().to_os_string();
    s.push(suffix);
    PathBuf::from(s)
}

/// The file naming the end (exclusive next base offset) of the segments a swap at
/// `base` replaces.
pub(crate) fn covers_file(dir: &Path, base: i64) -> PathBuf {
    dir.join(format!("{base:020}.covers"))
}

/// The committed part of a swap at `base`: delete the replaced segments after the first,
/// rename the swap files over the first's (log last), drop the covers file. With
/// `stop_before_log` (tests), stops as a crash would just before the log's rename.
pub(crate) fn complete_swap(
    fs: &dyn Fs,
    dir: &Path,
    base: i64,
    others: &[i64],
    stop_before_log: bool,
) -> std::io::Result<()> {
    for other in others {
        for suffix in COMPANION_SUFFIXES.into_iter().chain([LOG_SUFFIX]) {
            match fs.remove_file(&segment::file_path(dir, *other, suffix)) {
                Err(e) if e.kind() != std::io::ErrorKind::NotFound => return Err(e),
                _ => {}
            }
        }
    }
    for suffix in COMPANION_SUFFIXES {
        let target = segment::file_path(dir, base, suffix);
        let from = suffixed(&target, SWAP);
        if fs.exists(&from) {
            fs.rename(&from, &target)?;
        }
    }
    if stop_before_log {
        return Ok(());
    }
    let target = segment::file_path(dir, base, LOG_SUFFIX);
    fs.rename(&suffixed(&target, SWAP), &target)?;
    let covers = suffixed(&covers_file(dir, base), SWAP);
    match fs.remove_file(&covers) {
        Err(e) if e.kind() != std::io::ErrorKind::NotFound => return Err(e),
        _ => {}
    }
    fs.sync_dir(dir)
}

/// Completes or undoes a swap interrupted by a crash (see the module doc). Runs before a
/// partition's segments are listed.
pub fn recover_swaps(fs: &dyn Fs, dir: &Path) -> Result<(), StorageError> {
    let entries = match fs.read_dir(dir) {
        Ok(e) => e,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(()),
        Err(e) => return Err(err(dir, e)),
    };
    let names: Vec<String> = entries
        .iter()
        .filter_map(|p| p.file_name().and_then(|n| n.to_str()).map(str::to_owned))
        .collect();
    let mut touched = false;
    for name in names.iter().filter(|n| n.ends_with(CLEANED)) {
        let _ = fs.remove_file(&dir.join(name));
        touched = true;
    }
    // Complete every swap whose log reached `.swap`: the segments it covers are
    // deleted and its files renamed into place (either may have partly happened).
    for name in names.iter().filter(|n| n.ends_with(SWAP)) {
        let Some(stem) = name.strip_suffix(SWAP) else {
            continue;
        };
        let Some(base) = stem
            .strip_suffix(&format!(".{LOG_SUFFIX}"))
            .and_then(|b| b.parse::<i64>().ok())
        else {
            continue;
        };
        let covers = suffixed(&covers_file(dir, base), SWAP);
        let end = match fs.read_to_string(&covers) {
            Ok(text) => text.trim().parse::<i64>().map_err(|e| err(&covers, e))?,
            Err(_) => base + 1, // no covers file: the swap replaces only its own segment
        };
        let others: Vec<i64> = names
            .iter()
            .filter_map(|n| segment::parse_log_file_name(n))
            .filter(|b| *b > base && *b < end)
            .collect();
        complete_swap(fs, dir, base, &others, false).map_err(|e| err(dir, e))?;
        tracing::info!(dir = %dir.display(), segment = base, replaced = others.len() + 1, "completed a compaction swap interrupted by a crash");
        touched = true;
    }
    // Index `.swap` files without a log `.swap`: the swap never began; the originals stand.
    for name in names.iter().filter(|n| n.ends_with(SWAP)) {
        let path = dir.join(name);
        if fs.exists(&path) {
            let _ = fs.remove_file(&path);
            touched = true;
        }
    }
    if touched {
        fs.sync_dir(dir).map_err(|e| err(dir, e))?;
    }
    Ok(())
}
