//! Tells a service manager where the broker stands, as systemd's `Type=notify` units
//! expect (sd_notify through the `sd-notify` crate): READY=1 once every shard serves,
//! STOPPING=1 when a stop begins (the controlled shutdown runs after it), and, where the
//! unit sets `WatchdogSec`, WATCHDOG=1 at half that interval — only while every shard
//! answers a metrics query, so a hung shard lets the watchdog fire.
//!
//! Invariants: nothing is sent without `NOTIFY_SOCKET` (a broker started by hand is
//! unaffected); READY=1 and STOPPING=1 are sent at most once each, in that order, and
//! no WATCHDOG=1 after STOPPING=1.

use crate::metrics::{self, MetricsQuery};
use crate::server::Lifecycle;
use futures::channel::mpsc;
use sd_notify::NotifyState;
use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::{Duration, Instant};

/// How often the notifier looks at the broker's state.
const POLL: Duration = Duration::from_millis(50);

/// Starts the notifier thread if a service manager is listening.
pub fn spawn(life: Arc<Lifecycle>, shards: usize, queries: mpsc::Sender<MetricsQuery>) {
    if std::env::var_os("NOTIFY_SOCKET").is_none() {
        return;
    }
    let mut usec = 0;
    let watchdog = sd_notify::watchdog_enabled(false, &mut usec)
        .then(|| Duration::from_micros(usec / 2).max(POLL));
    let spawned = std::thread::Builder::new()
        .name("corelog-notify".into())
        .spawn(move || run(&life, shards, &queries, watchdog));
    if let Err(e) = spawned {
        tracing::warn!(error = %e, "the service manager will not be told when the broker is ready");
    }
}

/// Serialises the sends, so that nothing follows STOPPING=1.
static SENT_STOPPING: std::sync::Mutex<bool> = std::sync::Mutex::new(false);

/// Tells the service manager the stop begins: called by the signal handler's thread
/// before the shards are told, so it is sent before the process can exit.
pub fn stopping() {
    if std::env::var_os("NOTIFY_SOCKET").is_none() {
        return;
    }
    let mut sent = SENT_STOPPING.lock().unwrap_or_else(|e| e.into_inner());
    if !*sent {
        *sent = true;
        send_now(&[
            NotifyState::Stopping,
            NotifyState::Status("stopping: moving leadership away, then closing"),
        ]);
    }
}

fn send(state: &[NotifyState<'_>]) {
    let sent = SENT_STOPPING.lock().unwrap_or_else(|e| e.into_inner());
    if !*sent {
        send_now(state);
    }
}

fn send_now(state: &[NotifyState<'_>]) {
    if let Err(e) = sd_notify::notify(false, state) {
        tracing::warn!(error = %e, "telling the service manager failed");
    }
}

fn run(
    life: &Lifecycle,
    shards: usize,
    queries: &mpsc::Sender<MetricsQuery>,
    watchdog: Option<Duration>,
) {
    let mut ready = false;
    let mut fed = Instant::now();
    loop {
        if life.stop.load(Ordering::Acquire) || life.failed.load(Ordering::Acquire) {
            stopping();
            return;
        }
        if !ready && life.ready(shards) {
            ready = true;
            send(&[NotifyState::Ready, NotifyState::Status("serving")]);
        }
        if let Some(every) = watchdog {
            // Before READY the unit's start timeout governs, not the watchdog.
            if ready && fed.elapsed() >= every {
                if metrics::query(queries, every / 2).is_some() {
                    send(&[NotifyState::Watchdog]);
                    fed = Instant::now();
                } else {
                    tracing::warn!(
                        "a shard did not answer: the service manager's watchdog is not fed"
                    );
                }
            }
        }
        std::thread::sleep(POLL);
    }
}
