//! The process's own resources, in the Prometheus client libraries' standard names
//! (`process_resident_memory_bytes`, `process_cpu_seconds_total`, ...), read from
//! `/proc/self` and `getrusage`/`getrlimit` on the HTTP thread at each scrape — nothing
//! is recorded in between.

use std::sync::OnceLock;
use std::time::{SystemTime, UNIX_EPOCH};

static STARTED: OnceLock<f64> = OnceLock::new();

/// Notes the broker's start (called once, as the HTTP endpoint starts with the broker).
pub fn mark_start() {
    STARTED.get_or_init(|| {
        SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .map(|d| d.as_secs_f64())
            .unwrap_or(0.0)
    });
}

/// The process's resources now; a value the system does not give is left out.
#[derive(Debug, Clone, Copy, Default, PartialEq)]
pub struct ProcessMetrics {
    pub resident_memory_bytes: Option<u64>,
    pub virtual_memory_bytes: Option<u64>,
    pub cpu_seconds: Option<f64>,
    pub open_fds: Option<u64>,
    pub max_fds: Option<u64>,
    pub start_time_seconds: Option<f64>,
}

pub fn read() -> ProcessMetrics {
    let status = std::fs::read_to_string("/proc/self/status").unwrap_or_default();
    let cpu_seconds = nix::sys::resource::getrusage(nix::sys::resource::UsageWho::RUSAGE_SELF)
        .ok()
        .map(|u| {
            let secs = |t: nix::sys::time::TimeVal| t.tv_sec() as f64 + t.tv_usec() as f64 / 1e6;
            secs(u.user_time()) + secs(u.system_time())
        });
    ProcessMetrics {
        resident_memory_bytes: status_kib(&status, "VmRSS:").map(|k| k * 1024),
        virtual_memory_bytes: status_kib(&status, "VmSize:").map(|k| k * 1024),
        cpu_seconds,
        open_fds: std::fs::read_dir("/proc/self/fd")
            .ok()
            .map(|d| d.count() as u64),
        max_fds: nix::sys::resource::getrlimit(nix::sys::resource::Resource::RLIMIT_NOFILE)
            .ok()
            .map(|(soft, _)| soft),
        start_time_seconds: STARTED.get().copied(),
    }
}

/// A `Name:   1234 kB` line of `/proc/self/status`, in KiB.
fn status_kib(status: &str, name: &str) -> Option<u64> {
    status
        .lines()
        .find_map(|l| l.strip_prefix(name))
        .and_then(|rest| rest.split_whitespace().next())
        .and_then(|n| n.parse().ok())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reads_this_process() {
        mark_start();
        let m = read();
        assert!(m.resident_memory_bytes.is_some_and(|b| b > 0), "{m:?}");
        assert!(m.virtual_memory_bytes >= m.resident_memory_bytes, "{m:?}");
        assert!(m.open_fds.is_some_and(|n| n >= 1), "{m:?}");
        assert!(m.max_fds.is_some_and(|n| n >= 1), "{m:?}");
        assert!(m.cpu_seconds.is_some_and(|s| s >= 0.0), "{m:?}");
        assert!(m.start_time_seconds.is_some_and(|s| s > 1.0e9), "{m:?}");
        assert_eq!(status_kib("VmRSS:\t  2048 kB\n", "VmRSS:"), Some(2048));
    }
}
