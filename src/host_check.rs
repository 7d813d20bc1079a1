//! What this host gives the broker, and what to change: `corelog check`, and the cheap
//! part of it logged at every start.
//!
//! Each finding names what was looked at, what was found and, when it is not what the
//! broker wants, what to do about it. A `Fail` is something the broker cannot run
//! without (io_uring, O_DIRECT on the data directory); a `Warn` something it runs worse
//! without. Nothing here changes the host: the broker's own start-up raises the soft
//! limits it may raise (`kernel.rs`).

use crate::kernel::{nofile_ceiling, MEMLOCK_PER_SHARD_BYTES};
use nix::sys::resource::{getrlimit, Resource};
use std::alloc::Layout;
use std::fmt;
use std::io::{Read, Write};
use std::os::unix::fs::OpenOptionsExt;
use std::path::{Path, PathBuf};
use std::time::Instant;

/// Segment files worth keeping open at once: about the partitions a busy broker writes
/// and reads at the same time (more are opened and closed as they are used).
const SEGMENT_FILES_WANTED: u64 = 1024;

/// Descriptors beside connections and segment files: listeners, io_uring rings and
/// eventfds, directories being synced, checkpoints and snapshots being written.
const DESCRIPTORS_RESERVED: u64 = 256;

/// Block size of the O_DIRECT probe and of the bandwidth measurement.
const BLOCK: usize = 4096;

#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub enum Verdict {
    Ok,
    Warn,
    Fail,
}

#[derive(Debug, Clone)]
pub struct Finding {
    pub what: &'static str,
    pub verdict: Verdict,
    pub found: String,
    /// What to change, when the verdict is not `Ok`.
    pub advice: Option<String>,
}

impl Finding {
    fn ok(what: &'static str, found: impl Into<String>) -> Finding {
        Finding {
            what,
            verdict: Verdict::Ok,
            found: found.into(),
            advice: None,
        }
    }

    fn bad(
        what: &'static str,
        verdict: Verdict,
        found: impl Into<String>,
        advice: impl Into<String>,
    ) -> Finding {
        Finding {
            what,
            verdict,
            found: found.into(),
            advice: Some(advice.into()),
        }
    }
}

impl fmt::Display for Finding {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let tag = match self.verdict {
            Verdict::Ok => "ok  ",
            Verdict::Warn => "warn",
            Verdict::Fail => "FAIL",
        };
        write!(f, "{tag}  {:<22} {}", self.what, self.found)?;
        if let Some(a) = &self.advice {
            write!(f, "\n      {:<22} -> {a}", "")?;
        }
        Ok(())
    }
}

/// The checks that take no noticeable time (the broker runs them at every start).
/// The filesystem checks run for each of `log_dirs`.
pub fn cheap_checks(
    log_dirs: &[PathBuf],
    shards: usize,
    max_connections: usize,
    open_segment_files: usize,
) -> Vec<Finding> {
    let mut found = vec![
        io_uring_sysctl(),
        memlock(shards),
        nofile(max_connections, open_segment_files),
    ];
    for dir in log_dirs {
        found.extend([filesystem(dir), direct_io(dir), free_disk(dir)]);
    }
    found.extend([transparent_huge_pages(), cpu_governor()]);
    found
}

/// Whether an io_uring executor starts here (what every shard needs).
pub fn io_uring_executor() -> Finding {
    let started = glommio::LocalExecutorBuilder::default()
        .spawn(|| async {})
        .map_err(|e| e.to_string())
        .and_then(|h| h.join().map_err(|e| e.to_string()));
    match started {
        Ok(()) => Finding::ok("io_uring", "an io_uring executor starts (glommio)"),
        Err(e) => Finding::bad("io_uring", Verdict::Fail, e, crate::kernel::IO_URING_HINT),
    }
}

fn io_uring_sysctl() -> Finding {
    match std::fs::read_to_string("/proc/sys/kernel/io_uring_disabled") {
        Err(_) => Finding::ok(
            "io_uring sysctl",
            "kernel.io_uring_disabled not present (allowed)",
        ),
        Ok(v) => match v.trim() {
            "0" => Finding::ok("io_uring sysctl", "kernel.io_uring_disabled = 0"),
            other => Finding::bad(
                "io_uring sysctl",
                Verdict::Fail,
                format!("kernel.io_uring_disabled = {other}"),
                "sysctl -w kernel.io_uring_disabled=0 (1 allows only the io_uring_group)",
            ),
        },
    }
}

fn memlock(shards: usize) -> Finding {
    let need = MEMLOCK_PER_SHARD_BYTES * shards as u64;
    match getrlimit(Resource::RLIMIT_MEMLOCK) {
        Err(e) => Finding::bad(
            "RLIMIT_MEMLOCK",
            Verdict::Warn,
            format!("unreadable: {e}"),
            "check ulimit -l",
        ),
        Ok((_, hard)) if hard >= need => Finding::ok(
            "RLIMIT_MEMLOCK",
            format!(
                "{} (hard), {shards} shards need {}",
                bytes(hard),
                bytes(need)
            ),
        ),
        Ok((_, hard)) => Finding::bad(
            "RLIMIT_MEMLOCK",
            Verdict::Fail,
            format!(
                "{} (hard), {shards} shards need {}",
                bytes(hard),
                bytes(need)
            ),
            "raise it: ulimit -l, or LimitMEMLOCK= in the systemd unit",
        ),
    }
}

fn nofile(max_connections: usize, open_segment_files: usize) -> Finding {
    let Some(ceiling) = nofile_ceiling() else {
        return Finding::bad(
            "RLIMIT_NOFILE",
            Verdict::Warn,
            "unreadable",
            "check ulimit -n",
        );
    };
    // Segment files open on demand (storage `file_cache`): partitions cost descriptors
    // only while they are read or written, up to the cache's bound.
    let files = open_segment_files as u64;
    let found = format!(
        "{ceiling} descriptors: {max_connections} for connections, {files} for open segment files (any number of partitions; idle ones hold none)"
    );
    let needed = max_connections as u64 + files + DESCRIPTORS_RESERVED;
    if needed <= ceiling && files >= SEGMENT_FILES_WANTED {
        Finding::ok("RLIMIT_NOFILE", found)
    } else {
        Finding::bad(
            "RLIMIT_NOFILE",
            Verdict::Warn,
            found,
            format!(
                "raise the hard limit (ulimit -n, LimitNOFILE=) to at least {}, or lower --max-connections",
                (max_connections as u64 + SEGMENT_FILES_WANTED + DESCRIPTORS_RESERVED).max(4 * SEGMENT_FILES_WANTED)
            ),
        )
    }
}

/// The filesystem of the nearest existing ancestor of `dir`.
fn existing(dir: &Path) -> PathBuf {
    let mut p = dir.to_path_buf();
    while !p.exists() {
        match p.parent() {
            Some(parent) if parent != p => p = parent.to_path_buf(),
            _ => break,
        }
    }
    p
}

fn filesystem(dir: &Path) -> Finding {
    let at = existing(dir);
    match nix::sys::statfs::statfs(&at) {
        Err(e) => Finding::bad(
            "filesystem",
            Verdict::Warn,
            format!("statfs {}: {e}", at.display()),
            "check the data directory",
        ),
        Ok(st) => {
            let magic = st.filesystem_type().0 as u64;
            let (name, verdict, advice) = match magic {
                0xEF53 => ("ext4", Verdict::Ok, None),
                0x5846_5342 => ("xfs", Verdict::Ok, None),
                0x9123_683E => (
                    "btrfs",
                    Verdict::Warn,
                    Some("copy-on-write doubles segment writes; ext4 or xfs is what was measured"),
                ),
                0x0102_1994 => (
                    "tmpfs",
                    Verdict::Fail,
                    Some("memory, not a disk: nothing survives a restart of the host"),
                ),
                0x794C_7630 => (
                    "overlayfs",
                    Verdict::Warn,
                    Some("a container's overlay: mount a volume for the data directory"),
                ),
                0x6969 => (
                    "nfs",
                    Verdict::Warn,
                    Some("a network filesystem: a local disk is what was measured"),
                ),
                _ => (
                    "another filesystem",
                    Verdict::Warn,
                    Some("ext4 or xfs is what was measured"),
                ),
            };
            let found = format!("{name} (0x{magic:x}) at {}", at.display());
            match advice {
                None => Finding::ok("filesystem", found),
                Some(a) => Finding::bad("filesystem", verdict, found, a),
            }
        }
    }
}

/// A 4 KiB-aligned buffer for O_DIRECT, freed on drop.
struct Aligned {
    ptr: *mut u8,
    layout: Layout,
}

impl Aligned {
    fn new(len: usize) -> Option<Aligned> {
        let layout = Layout::from_size_align(len, BLOCK).ok()?;
        // SAFETY: `layout` has a non-zero size (callers ask for whole blocks).
        let ptr = unsafe { std::alloc::alloc_zeroed(layout) };
        (!ptr.is_null()).then_some(Aligned { ptr, layout })
    }

    fn bytes(&mut self) -> &mut [u8] {
        // SAFETY: `ptr` points at `layout.size()` initialised bytes this value owns.
        unsafe { std::slice::from_raw_parts_mut(self.ptr, self.layout.size()) }
    }
}

impl Drop for Aligned {
    fn drop(&mut self) {
        // SAFETY: allocated in `new` with this layout.
        unsafe { std::alloc::dealloc(self.ptr, self.layout) }
    }
}

/// Opens `path` for O_DIRECT reads, or creates it empty for O_DIRECT writes too.
fn open_direct(path: &Path, write: bool) -> std::io::Result<std::fs::File> {
    std::fs::OpenOptions::new()
        .read(true)
        .write(write)
        .create(write)
        .truncate(write)
        .custom_flags(nix::fcntl::OFlag::O_DIRECT.bits())
        .open(path)
}

/// Writes and reads back one block with O_DIRECT in the data directory (created if
/// missing, as the broker would).
fn direct_io(dir: &Path) -> Finding {
    let probe = dir.join(".corelog-check-direct-io");
    let result = (|| -> std::io::Result<()> {
        std::fs::create_dir_all(dir)?;
        let mut buf = Aligned::new(BLOCK).ok_or_else(|| std::io::Error::other("allocation"))?;
        buf.bytes().fill(0x5a);
        let mut f = open_direct(&probe, true)?;
        f.write_all(buf.bytes())?;
        f.sync_data()?;
        drop(f);
        let mut f = open_direct(&probe, false)?;
        buf.bytes().fill(0);
        f.read_exact(buf.bytes())?;
        if buf.bytes().iter().any(|b| *b != 0x5a) {
            return Err(std::io::Error::other("read back other bytes than written"));
        }
        Ok(())
    })();
    let _ = std::fs::remove_file(&probe);
    match result {
        Ok(()) => Finding::ok(
            "O_DIRECT",
            format!(
                "a {BLOCK}-byte block written and read back in {}",
                dir.display()
            ),
        ),
        Err(e) => Finding::bad(
            "O_DIRECT",
            Verdict::Fail,
            format!("{}: {e}", dir.display()),
            "put the data directory on a local ext4 or xfs filesystem",
        ),
    }
}

fn free_disk(dir: &Path) -> Finding {
    let at = existing(dir);
    match corelog_shards::housekeeping::filesystem_space(&at) {
        None => Finding::bad(
            "free disk",
            Verdict::Warn,
            "statvfs failed",
            "check the data directory",
        ),
        Some((total, free)) => {
            let found = format!("{} free of {}", bytes(free), bytes(total));
            let fill = corelog_shards::housekeeping::filesystem_fill(&at).unwrap_or(0.0);
            if fill > 0.8 || free < (10 << 30) {
                Finding::bad(
                    "free disk",
                    Verdict::Warn,
                    found,
                    "produces are refused at 95 % full (--disk-fill-max-percent): give the data directory more room",
                )
            } else {
                Finding::ok("free disk", found)
            }
        }
    }
}

fn transparent_huge_pages() -> Finding {
    match std::fs::read_to_string("/sys/kernel/mm/transparent_hugepage/enabled") {
        Err(_) => Finding::ok("transparent hugepages", "not available"),
        Ok(text) => {
            let mode = text
                .split_whitespace()
                .find(|w| w.starts_with('['))
                .map(|w| w.trim_matches(|c| c == '[' || c == ']').to_string())
                .unwrap_or_else(|| text.trim().to_string());
            if mode == "always" {
                Finding::bad(
                    "transparent hugepages",
                    Verdict::Warn,
                    "always",
                    "echo madvise > /sys/kernel/mm/transparent_hugepage/enabled (khugepaged compaction stalls show up as tail latency)",
                )
            } else {
                Finding::ok("transparent hugepages", mode)
            }
        }
    }
}

fn cpu_governor() -> Finding {
    let mut governors = std::collections::BTreeMap::<String, usize>::new();
    if let Ok(cpus) = std::fs::read_dir("/sys/devices/system/cpu") {
        for cpu in cpus.flatten() {
            let g = cpu.path().join("cpufreq/scaling_governor");
            if let Ok(text) = std::fs::read_to_string(g) {
                *governors.entry(text.trim().to_string()).or_default() += 1;
            }
        }
    }
    if governors.is_empty() {
        return Finding::ok(
            "cpu governor",
            "not exposed (a virtual machine, or no cpufreq)",
        );
    }
    let found = governors
        .iter()
        .map(|(g, n)| format!("{g} on {n} cpus"))
        .collect::<Vec<_>>()
        .join(", ");
    if governors.keys().all(|g| g == "performance") {
        Finding::ok("cpu governor", found)
    } else {
        Finding::bad(
            "cpu governor",
            Verdict::Warn,
            found,
            "cpupower frequency-set -g performance (a shard's core should not slow down between requests)",
        )
    }
}

/// Direct sequential write then read of `mib` MiB in 1 MiB blocks in the data
/// directory, synced: what the disk gives the log (a short measurement, on request).
pub fn disk_bandwidth(dir: &Path, mib: usize) -> Finding {
    const CHUNK: usize = 1 << 20;
    let file = dir.join(".corelog-check-bandwidth");
    let result = (|| -> std::io::Result<(f64, f64)> {
        std::fs::create_dir_all(dir)?;
        let mut buf = Aligned::new(CHUNK).ok_or_else(|| std::io::Error::other("allocation"))?;
        buf.bytes().fill(0xa5);
        let mut f = open_direct(&file, true)?;
        let started = Instant::now();
        for _ in 0..mib {
            f.write_all(buf.bytes())?;
        }
        f.sync_data()?;
        let write_s = started.elapsed().as_secs_f64();
        drop(f);
        let mut f = open_direct(&file, false)?;
        let started = Instant::now();
        for _ in 0..mib {
            f.read_exact(buf.bytes())?;
        }
        let read_s = started.elapsed().as_secs_f64();
        Ok((mib as f64 / write_s, mib as f64 / read_s))
    })();
    let _ = std::fs::remove_file(&file);
    match result {
        Ok((w, r)) => Finding::ok(
            "disk bandwidth",
            format!("direct sequential write {w:.0} MiB/s, read {r:.0} MiB/s ({mib} MiB, one request at a time)"),
        ),
        Err(e) => Finding::bad("disk bandwidth", Verdict::Fail, e.to_string(), "the data directory must take O_DIRECT writes"),
    }
}

fn bytes(n: u64) -> String {
    const UNITS: [&str; 5] = ["B", "KiB", "MiB", "GiB", "TiB"];
    let mut v = n as f64;
    let mut unit = 0;
    while v >= 1024.0 && unit + 1 < UNITS.len() {
        v /= 1024.0;
        unit += 1;
    }
    if unit == 0 {
        format!("{n} B")
    } else {
        format!("{v:.1} {}", UNITS[unit])
    }
}

/// Logs what the cheap checks found at start-up: one line each, with the advice where
/// there is some. Only a `Fail` is a warning; a `Warn` is advice at `info` (the broker
/// runs well enough without it, and `corelog check` says the same at any time).
pub fn log_at_startup(
    log_dirs: &[PathBuf],
    shards: usize,
    max_connections: usize,
    open_segment_files: usize,
) {
    for f in cheap_checks(log_dirs, shards, max_connections, open_segment_files) {
        let advice = f.advice.as_deref().unwrap_or("");
        match f.verdict {
            Verdict::Ok => tracing::info!(check = f.what, found = %f.found, "host"),
            Verdict::Warn => {
                tracing::info!(check = f.what, found = %f.found, advice, "host: could be better")
            }
            Verdict::Fail => {
                tracing::warn!(check = f.what, found = %f.found, advice, "host: not what the broker needs")
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sizes_read_like_a_person_writes_them() {
        assert_eq!(bytes(512), "512 B");
        assert_eq!(bytes(512 * 1024), "512.0 KiB");
        assert_eq!(bytes(3 << 30), "3.0 GiB");
    }

    #[test]
    fn direct_io_in_a_real_directory() {
        let dir = tempfile::tempdir().expect("tempdir");
        let f = direct_io(&dir.path().join("data"));
        // tmpfs refuses O_DIRECT; every other local filesystem here takes it.
        let tmpfs = filesystem(dir.path()).found.starts_with("tmpfs");
        assert_eq!(f.verdict == Verdict::Ok, !tmpfs, "{f}");
        assert!(
            !dir.path().join("data/.corelog-check-direct-io").exists(),
            "the probe is removed"
        );
    }
}
