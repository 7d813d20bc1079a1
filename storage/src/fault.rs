//! Storage faults on purpose: a layer between the logs' direct-I/O writes and syncs and
//! the kernel that tests arm to make the disk fail — a write or an `fdatasync` failing
//! with EIO or ENOSPC, a write torn part way, or a power loss that drops everything the
//! logs wrote but had not synced.
//!
//! It exists only when the broker is started with `--storage-fault-injection` (its
//! `FileCache` then holds one); otherwise every write and sync goes straight to the
//! kernel and the only cost is the `None` test. Tests drive it over the HTTP endpoint
//! (`POST /faults`, one command per request, see [`StorageFaults::command`]).
//!
//! What it covers: every write and sync of segment files (log, offset index, time index)
//! — everything the flusher and syncer do, which is everything a produce waits for —
//! and the leader-epoch checkpoint a log's writes wait on (`replacing`: failed as a
//! write rule says). The small files written with write + fsync + rename + directory
//! fsync (checkpoints, producer snapshots, the cleaner's swaps) are durable when their
//! call returns and are not tracked: a power loss leaves them as they are.
//!
//! The power-loss model: per file, the end of what completed writes covered
//! (`written_end`) and the part a completed `fdatasync` covered (`synced_end`: what was
//! written when that sync was issued). The loss comes right after a write completes.
//! From then on writes and syncs never complete for their callers (they park for good,
//! so nothing is acknowledged after it); once the kernel has finished those in flight
//! (their writes count as unsynced), every file's bytes from
//! `synced_end` to `written_end` are overwritten with zeros — what a preallocated extent
//! reads as when its data never reached the disk — or, for a torn loss, the first half of
//! them (in whole 512-byte sectors) is kept and the rest zeroed; then the process kills
//! itself with SIGKILL. A block that the appender rewrote over synced bytes keeps them:
//! its old and new contents agree on every synced byte, so either version is what a disk
//! could hold.
//!
//! Invariants: `synced_end <= written_end` for every tracked file (a truncation lowers
//! both); after `frozen` is set no operation starts and none that completes reports
//! success; the zeroing starts only once `in_flight` is zero.

use std::collections::HashMap;
use std::io;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::Mutex;
use std::time::{Duration, Instant};

/// How long a power loss waits for the kernel to finish the operations in flight.
const IN_FLIGHT_WAIT: Duration = Duration::from_secs(5);

/// How long a power loss waits for a write to fail after.
pub const LOSS_WAIT_FOR_WRITE: Duration = Duration::from_secs(2);

/// The sector a torn power loss keeps whole.
const SECTOR: u64 = 512;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Op {
    Write,
    Sync,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Effect {
    /// The operation fails with EIO.
    Eio,
    /// The operation fails with ENOSPC.
    Enospc,
    /// A write puts the first half of its bytes on disk, then fails with EIO.
    Torn,
}

/// One armed fault: the next `remaining` operations of kind `op` on a file whose path
/// contains `path_contains` (every one while `remaining` is `None`) get `effect`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Rule {
    pub op: Op,
    pub effect: Effect,
    pub path_contains: String,
    pub remaining: Option<u64>,
}

/// What an armed rule decided for one operation.
#[derive(Debug)]
pub enum Verdict {
    Proceed,
    Fail(io::Error),
    /// Write a prefix of the bytes (half), then fail with the error.
    Tear(io::Error),
}

#[derive(Debug, Default, Clone, Copy)]
struct Extent {
    written_end: u64,
    synced_end: u64,
}

/// The faults of one broker process, shared by all its shards.
#[derive(Debug, Default)]
pub struct StorageFaults {
    rules: Mutex<Vec<Rule>>,
    files: Mutex<HashMap<PathBuf, Extent>>,
    frozen: AtomicBool,
    /// A power loss waits for the next completed write (`wrote`).
    loss_pending: AtomicBool,
    in_flight: AtomicUsize,
    injected: AtomicUsize,
}

/// An operation let through: counted in flight until dropped.
pub struct Ticket<'a> {
    faults: &'a StorageFaults,
    pub verdict: Verdict,
    /// For a sync: the written end of its file when it was issued.
    covers: u64,
}

impl Drop for Ticket<'_> {
    fn drop(&mut self) {
        self.faults.in_flight.fetch_sub(1, Ordering::SeqCst);
    }
}

impl StorageFaults {
    pub fn new() -> StorageFaults {
        StorageFaults::default()
    }

    pub fn arm(&self, rule: Rule) {
        self.lock_rules().push(rule);
    }

    pub fn clear(&self) {
        self.lock_rules().clear();
    }

    /// Operations failed or torn so far.
    pub fn injected(&self) -> usize {
        self.injected.load(Ordering::Relaxed)
    }

    fn lock_rules(&self) -> std::sync::MutexGuard<'_, Vec<Rule>> {
        self.rules.lock().unwrap_or_else(|p| p.into_inner())
    }

    fn lock_files(&self) -> std::sync::MutexGuard<'_, HashMap<PathBuf, Extent>> {
        self.files.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Lets an operation start, with what an armed rule makes of it. After a power loss
    /// it never returns: the operation never happened.
    pub async fn begin(&self, op: Op, path: &Path) -> Ticket<'_> {
        // Counted before the frozen flag is read, so a power loss that finds nothing in
        // flight also finds every later operation parked.
        self.in_flight.fetch_add(1, Ordering::SeqCst);
        if self.frozen.load(Ordering::SeqCst) {
            self.in_flight.fetch_sub(1, Ordering::SeqCst);
            std::future::pending::<()>().await;
        }
        let verdict = self.decide(op, path);
        let covers = match op {
            Op::Sync => self.lock_files().get(path).map_or(0, |e| e.written_end),
            Op::Write => 0,
        };
        Ticket {
            faults: self,
            verdict,
            covers,
        }
    }

    fn decide(&self, op: Op, path: &Path) -> Verdict {
        let mut rules = self.lock_rules();
        let text = path.to_string_lossy();
        let Some(i) = rules
            .iter()
            .position(|r| r.op == op && text.contains(r.path_contains.as_str()))
        else {
            return Verdict::Proceed;
        };
        let effect = rules[i].effect;
        if let Some(n) = rules[i].remaining.as_mut() {
            *n -= 1;
            if *n == 0 {
                rules.remove(i);
            }
        }
        drop(rules);
        self.injected.fetch_add(1, Ordering::Relaxed);
        tracing::warn!(path = %path.display(), ?op, ?effect, "storage fault injected");
        match effect {
            Effect::Eio => Verdict::Fail(io::Error::from_raw_os_error(libc::EIO)),
            Effect::Enospc => Verdict::Fail(io::Error::from_raw_os_error(libc::ENOSPC)),
            Effect::Torn => Verdict::Tear(io::Error::from_raw_os_error(libc::EIO)),
        }
    }

    /// A write of `[at, end)` completed (`ok`) or failed. Recorded even when the power
    /// failed while it was in flight (its bytes are on the file, unsynced, and the loss
    /// drops them), then parks for good after a loss: the write's caller must not go on
    /// to acknowledge anything. A power loss waiting for a write (`power_loss`) happens
    /// right after this one, so it has unsynced bytes to drop.
    pub async fn wrote(&self, ticket: Ticket<'_>, path: &Path, at: u64, end: u64, ok: bool) {
        debug_assert!(at <= end);
        if ok {
            let mut files = self.lock_files();
            let e = files.entry(path.to_path_buf()).or_default();
            e.written_end = e.written_end.max(end);
            drop(files);
            if self.loss_pending.load(Ordering::SeqCst) {
                self.frozen.store(true, Ordering::SeqCst);
            }
        }
        drop(ticket);
        self.park_if_lost().await;
    }

    /// A sync completed (`ok`) or failed. A sync that completes after the power failed
    /// is not recorded and never reported done: the loss overtook it.
    pub async fn synced(&self, ticket: Ticket<'_>, path: &Path, ok: bool) {
        if self.frozen.load(Ordering::SeqCst) {
            drop(ticket);
            let never: std::convert::Infallible = std::future::pending().await;
            match never {}
        }
        if ok {
            let mut files = self.lock_files();
            let e = files.entry(path.to_path_buf()).or_default();
            e.synced_end = e.synced_end.max(ticket.covers.min(e.written_end));
        }
        // Dropped after the record: a loss waits for it, so it finds the record.
        drop(ticket);
    }

    /// The file was cut to `len` bytes.
    pub fn truncated(&self, path: &Path, len: u64) {
        if let Some(e) = self.lock_files().get_mut(path) {
            e.written_end = e.written_end.min(len);
            e.synced_end = e.synced_end.min(len);
        }
    }

    /// Lets a whole-file replacement of `path` (write, sync, rename: see
    /// `checkpoint::replace_file`) start, or fails it as an armed write rule says; a torn
    /// one fails before anything is written, as the rename would never happen. Blocking
    /// callers use it: the leader-epoch checkpoint, which a log's writes wait on.
    pub fn replacing(&self, path: &Path) -> io::Result<()> {
        match self.decide(Op::Write, path) {
            Verdict::Proceed => Ok(()),
            Verdict::Fail(e) | Verdict::Tear(e) => Err(e),
        }
    }

    /// The file at `path` was created (or its name reused): nothing of it is tracked yet.
    pub fn created(&self, path: &Path) {
        self.lock_files().remove(path);
    }

    async fn park_if_lost(&self) {
        if self.frozen.load(Ordering::SeqCst) {
            std::future::pending::<()>().await;
        }
    }

    /// The power fails right after the next write completes (or after
    /// [`LOSS_WAIT_FOR_WRITE`] of none: an idle broker): no write or sync starts or
    /// completes from then on; once the kernel has finished those in flight, what was not
    /// synced is dropped (all of it, or for `torn` the second half of each file's
    /// unsynced bytes) and the process is SIGKILLed. Failing just after a write makes
    /// sure a loss under load has something unsynced to drop. Blocks its (non-shard)
    /// thread until then; returns only if the kill failed.
    pub fn power_loss(&self, torn: bool) -> io::Result<()> {
        self.loss_pending.store(true, Ordering::SeqCst);
        let asked = Instant::now();
        while !self.frozen.load(Ordering::SeqCst) && asked.elapsed() < LOSS_WAIT_FOR_WRITE {
            std::thread::sleep(Duration::from_millis(1));
        }
        self.frozen.store(true, Ordering::SeqCst);
        let started = Instant::now();
        while self.in_flight.load(Ordering::SeqCst) > 0 {
            if started.elapsed() > IN_FLIGHT_WAIT {
                tracing::warn!("power loss: operations still in flight; dropping anyway");
                break;
            }
            std::thread::sleep(Duration::from_millis(1));
        }
        let files: Vec<(PathBuf, Extent)> = self
            .lock_files()
            .iter()
            .filter(|(_, e)| e.written_end > e.synced_end)
            .map(|(p, e)| (p.clone(), *e))
            .collect();
        for (path, e) in files {
            let from = if torn {
                let half = (e.written_end - e.synced_end) / 2;
                e.synced_end + half - half % SECTOR
            } else {
                e.synced_end
            };
            tracing::warn!(path = %path.display(), synced = e.synced_end, written = e.written_end, dropped_from = from, "power loss: unsynced bytes dropped");
            if let Err(err) = zero_range(&path, from, e.written_end) {
                // A file deleted meanwhile has nothing left to drop.
                if err.kind() != io::ErrorKind::NotFound {
                    return Err(err);
                }
            }
        }
        nix::sys::signal::raise(nix::sys::signal::Signal::SIGKILL).map_err(io::Error::from)
    }

    /// Runs one command of the fault endpoint and says what it did:
    /// - `fail write|sync eio|enospc [path=SUBSTRING] [count=N]`
    /// - `tear write [path=SUBSTRING] [count=N]`
    /// - `clear` (disarms every rule; a failed log stays failed)
    /// - `power-loss [torn]` (never answers: the process dies)
    pub fn command(&self, line: &str) -> Result<String, String> {
        let words: Vec<&str> = line.split_whitespace().collect();
        match words.as_slice() {
            ["clear"] => {
                self.clear();
                Ok("cleared\n".into())
            }
            ["power-loss"] => self
                .power_loss(false)
                .map(|()| String::new())
                .map_err(|e| e.to_string()),
            ["power-loss", "torn"] => self
                .power_loss(true)
                .map(|()| String::new())
                .map_err(|e| e.to_string()),
            ["fail", op, effect, options @ ..] => {
                let op = match *op {
                    "write" => Op::Write,
                    "sync" => Op::Sync,
                    other => return Err(format!("unknown operation {other:?}")),
                };
                let effect = match *effect {
                    "eio" => Effect::Eio,
                    "enospc" => Effect::Enospc,
                    other => return Err(format!("unknown error {other:?}")),
                };
                self.arm_with(op, effect, options)
            }
            ["tear", "write", options @ ..] => self.arm_with(Op::Write, Effect::Torn, options),
            _ => Err(format!("unknown fault command {line:?}")),
        }
    }

    fn arm_with(&self, op: Op, effect: Effect, options: &[&str]) -> Result<String, String> {
        let mut rule = Rule {
            op,
            effect,
            path_contains: String::new(),
            remaining: None,
        };
        for option in options {
            match option.split_once('=') {
                Some(("path", p)) => rule.path_contains = p.to_string(),
                Some(("count", n)) => {
                    let n: u64 = n.parse().map_err(|_| format!("bad count {n:?}"))?;
                    if n == 0 {
                        return Err("count must be at least 1".into());
                    }
                    rule.remaining = Some(n);
                }
                _ => return Err(format!("unknown option {option:?}")),
            }
        }
        let said = format!("armed {rule:?}\n");
        self.arm(rule);
        Ok(said)
    }
}

fn zero_range(path: &Path, from: u64, to: u64) -> io::Result<()> {
    use std::os::unix::fs::FileExt;
    let file = std::fs::OpenOptions::new().write(true).open(path)?;
    let zeros = vec![0u8; 1 << 16];
    let mut at = from;
    while at < to {
        let n = (to - at).min(zeros.len() as u64) as usize;
        file.write_all_at(&zeros[..n], at)?;
        at += n as u64;
    }
    file.sync_all()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn block_on<F: std::future::Future>(f: F) -> F::Output {
        futures_lite::future::block_on(f)
    }

    #[test]
    fn commands_arm_rules_that_match_by_path_and_run_out() {
        let f = StorageFaults::new();
        f.command("fail sync eio path=topic-0 count=2")
            .expect("armed");
        let other = Path::new("/d/other-0/0.log");
        let hit = Path::new("/d/topic-0/0.log");
        block_on(async {
            assert!(matches!(
                f.begin(Op::Sync, other).await.verdict,
                Verdict::Proceed
            ));
            assert!(matches!(
                f.begin(Op::Write, hit).await.verdict,
                Verdict::Proceed
            ));
            for _ in 0..2 {
                match &f.begin(Op::Sync, hit).await.verdict {
                    Verdict::Fail(e) => assert_eq!(e.raw_os_error(), Some(libc::EIO)),
                    v => panic!("expected a failure, got {v:?}"),
                }
            }
            assert!(matches!(
                f.begin(Op::Sync, hit).await.verdict,
                Verdict::Proceed
            ));
        });
        assert_eq!(f.injected(), 2);
        assert_eq!(f.in_flight.load(Ordering::SeqCst), 0, "tickets count out");
        for bad in [
            "fail write eperm",
            "fail read eio",
            "tear sync",
            "fail write eio count=0",
            "fail write eio size=3",
            "power-loss later",
        ] {
            assert!(f.command(bad).is_err(), "{bad} is refused");
        }
        f.command("tear write").expect("armed");
        f.command("clear").expect("cleared");
        block_on(async {
            assert!(matches!(
                f.begin(Op::Write, hit).await.verdict,
                Verdict::Proceed
            ));
        });
    }

    #[test]
    fn a_sync_covers_what_was_written_when_it_was_issued() {
        let f = StorageFaults::new();
        let p = Path::new("/d/t-0/0.log");
        block_on(async {
            let w = f.begin(Op::Write, p).await;
            f.wrote(w, p, 0, 4096, true).await;
            let s = f.begin(Op::Sync, p).await;
            // Written while the sync runs: not covered by it.
            let w = f.begin(Op::Write, p).await;
            f.wrote(w, p, 0, 8192, true).await;
            f.synced(s, p, true).await;
        });
        let e = f.lock_files()[p];
        assert_eq!((e.synced_end, e.written_end), (4096, 8192));
        f.truncated(p, 1000);
        let e = f.lock_files()[p];
        assert_eq!((e.synced_end, e.written_end), (1000, 1000));
        f.created(p);
        assert!(!f.lock_files().contains_key(p));
    }

    #[test]
    fn zeroing_drops_exactly_the_range() {
        let dir = tempfile::tempdir().expect("tempdir");
        let path = dir.path().join("x");
        std::fs::write(&path, vec![7u8; 3000]).expect("write");
        zero_range(&path, 1024, 2048).expect("zero");
        let bytes = std::fs::read(&path).expect("read");
        assert!(bytes[..1024].iter().all(|&b| b == 7));
        assert!(bytes[1024..2048].iter().all(|&b| b == 0));
        assert!(bytes[2048..].iter().all(|&b| b == 7));
    }
}
