//! Paths the user configured, made absolute once at start.
//!
//! Invariant: every path the broker keeps from its configuration is absolute, resolved
//! against the working directory the broker was started in. A relative path (the default
//! `./data` included) then names the same file for the broker's whole life, whoever opens
//! it later: an io_uring `openat`, a blocking-pool thread, a reload timer.

use anyhow::Context;
use std::path::PathBuf;

/// `path` resolved against the working directory; an absolute path is returned as it is.
/// `..` and links are kept (as `open(2)` would follow them), and the file need not exist.
pub fn absolute(path: PathBuf) -> anyhow::Result<PathBuf> {
    let resolved =
        std::path::absolute(&path).with_context(|| format!("resolving {}", path.display()))?;
    debug_assert!(resolved.is_absolute());
    Ok(resolved)
}

/// The log directories a broker was given: `--data-dir` (one) or `log.dirs` (a
/// comma-separated list, Kafka's), `./data` when neither; each made absolute. Two that
/// are the same directory, or one inside another, are refused: a partition found in
/// both could not be told apart.
pub fn log_dirs(data_dir: Option<PathBuf>, log_dirs: Option<&str>) -> anyhow::Result<Vec<PathBuf>> {
    let given: Vec<PathBuf> = match (data_dir, log_dirs) {
        (Some(_), Some(_)) => {
            anyhow::bail!("give data-dir (one directory) or log.dirs (several), not both")
        }
        (Some(d), None) => vec![d],
        (None, Some(list)) => list
            .split(',')
            .map(str::trim)
            .filter(|s| !s.is_empty())
            .map(PathBuf::from)
            .collect(),
        (None, None) => vec![PathBuf::from("./data")],
    };
    anyhow::ensure!(!given.is_empty(), "log.dirs names no directory");
    let dirs = given
        .into_iter()
        .map(absolute)
        .collect::<anyhow::Result<Vec<_>>>()?;
    for (i, a) in dirs.iter().enumerate() {
        for b in &dirs[i + 1..] {
            anyhow::ensure!(
                !a.starts_with(b) && !b.starts_with(a),
                "log.dirs: {} and {} overlap (each log directory must be a directory of its own)",
                a.display(),
                b.display()
            );
        }
    }
    Ok(dirs)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_relative_path_is_resolved_against_the_working_directory() {
        let cwd = std::env::current_dir().unwrap();
        assert_eq!(absolute("./data".into()).unwrap(), cwd.join("data"));
        assert_eq!(
            absolute("/var/lib/corelog".into()).unwrap(),
            PathBuf::from("/var/lib/corelog")
        );
    }

    #[test]
    fn log_dirs_are_one_or_a_list_never_both_never_overlapping() {
        let cwd = std::env::current_dir().unwrap();
        assert_eq!(log_dirs(None, None).unwrap(), vec![cwd.join("data")]);
        assert_eq!(
            log_dirs(Some("d".into()), None).unwrap(),
            vec![cwd.join("d")]
        );
        assert_eq!(
            log_dirs(None, Some(" /disk1/corelog, ./d2 ,")).unwrap(),
            vec![PathBuf::from("/disk1/corelog"), cwd.join("d2")]
        );
        assert!(log_dirs(Some("d".into()), Some("e")).is_err());
        assert!(log_dirs(None, Some(" , ")).is_err());
        assert!(log_dirs(None, Some("/a,/a")).is_err());
        assert!(log_dirs(None, Some("/a,/a/b")).is_err());
        assert!(log_dirs(None, Some("/a/b,/a")).is_err());
        assert!(log_dirs(None, Some("/a,/ab")).is_ok());
    }
}
