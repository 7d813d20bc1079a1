//! What corelog asks of the kernel at start-up, checked early so that a missing
//! capability is a clear message and not an obscure failure (kernel-notes.md).

use nix::sys::resource::{getrlimit, setrlimit, Resource};

/// glommio locks memory for io_uring rings and registered buffers.
pub const MEMLOCK_PER_SHARD_BYTES: u64 = 512 * 1024;

pub const IO_URING_HINT: &str = "could not start the io_uring executors. corelog needs Linux >= 5.8 with io_uring \
enabled (sysctl kernel.io_uring_disabled=0; container seccomp profiles often block io_uring_setup) and \
RLIMIT_MEMLOCK of at least 512 KiB per shard (ulimit -l, or LimitMEMLOCK= in a systemd unit). See kernel-notes.md";

/// Raises the soft RLIMIT_MEMLOCK to the hard limit and warns when that is still less
/// than the shards need.
pub fn check_and_raise_memlock(shards: usize) {
    let need = MEMLOCK_PER_SHARD_BYTES * shards as u64;
    match getrlimit(Resource::RLIMIT_MEMLOCK) {
        Ok((soft, hard)) => {
            if soft < hard {
                if let Err(e) = setrlimit(Resource::RLIMIT_MEMLOCK, hard, hard) {
                    tracing::warn!(error = %e, "could not raise RLIMIT_MEMLOCK");
                }
            }
            if hard < need {
                tracing::warn!(
                    memlock_bytes = hard,
                    needed_bytes = need,
                    "RLIMIT_MEMLOCK is below what {shards} shards need; raise it (ulimit -l) if start-up fails"
                );
            }
        }
        Err(e) => tracing::warn!(error = %e, "could not read RLIMIT_MEMLOCK"),
    }
}

/// Raises the soft RLIMIT_NOFILE to the hard limit: every connection and every open
/// segment file is a descriptor, and the default total connection limit is half of it
/// (`net/connection_limits.rs`). Warns when the connection limit does not fit.
pub fn raise_nofile(max_connections: usize) {
    match (getrlimit(Resource::RLIMIT_NOFILE), nofile_ceiling()) {
        (Ok((soft, hard)), Some(target)) => {
            if soft < target {
                if let Err(e) = setrlimit(Resource::RLIMIT_NOFILE, target, hard) {
                    tracing::warn!(error = %e, "could not raise RLIMIT_NOFILE");
                }
            }
            let now = getrlimit(Resource::RLIMIT_NOFILE).map_or(soft, |(s, _)| s);
            if (max_connections as u64).saturating_add(1024) > now {
                tracing::warn!(
                    nofile = now,
                    max_connections,
                    "max-connections leaves fewer than 1024 file descriptors for logs; raise RLIMIT_NOFILE (ulimit -n) or lower max-connections"
                );
            }
        }
        (Err(e), _) => tracing::warn!(error = %e, "could not read RLIMIT_NOFILE"),
        (Ok(_), None) => {}
    }
}

/// The most descriptors this process can have: the hard RLIMIT_NOFILE, but no more than
/// `fs.nr_open` (an unlimited hard limit cannot be set as the soft one beyond it).
pub fn nofile_ceiling() -> Option<u64> {
    let (_, hard) = getrlimit(Resource::RLIMIT_NOFILE).ok()?;
    let nr_open = std::fs::read_to_string("/proc/sys/fs/nr_open")
        .ok()
        .and_then(|s| s.trim().parse::<u64>().ok())
        .unwrap_or(1 << 20);
    Some(hard.min(nr_open))
}
