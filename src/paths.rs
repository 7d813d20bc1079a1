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
}
