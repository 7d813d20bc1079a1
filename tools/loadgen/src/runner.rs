//! Runs a load test: topic setup, one glommio executor per `--threads`, producers and
//! consumers spread over them, a progress line per second, and the merged result.
//!
//! Threads and ownership:
//! - Each executor owns its `Cluster` (its own connections), its `Recorder`, and the
//!   producers/consumers assigned to it (producer i and consumer j run on executors
//!   `i % threads` and `j % threads`). Nothing on the hot path is shared between cores.
//! - Cross-thread state is only `Shared` (atomics: stop flags and run-wide message counts
//!   that decide when consumers are done) and a std channel on which executors send a
//!   `Snapshot` once a second and a last one when they finish.
//! - The main thread is a plain thread: it merges snapshots, prints progress, and
//!   returns the total when every executor has finished.
//!
//! Invariants:
//! - Every executor's final snapshot is merged before the result is returned, so the
//!   summary accounts for every acknowledged message (also after Ctrl-C).
//! - The first fatal executor error stops every other executor (`Shared::stop`).

use crate::cli::{Config, Mode, Stop};
use crate::exec_ctx::{ExecCtx, Shared};
use crate::report::Progress;
use crate::stats::{Clock, Recorder, Snapshot};
use crate::topic_offsets::list_offsets;
use crate::{consumer, producer};
use anyhow::{anyhow, Result};
use corelog_kafka_client::cluster::{ClientOptions, Cluster};
use corelog_kafka_client::protocol;
use glommio::{LocalExecutorBuilder, Placement};
use std::cell::RefCell;
use std::rc::Rc;
use std::sync::atomic::{AtomicBool, AtomicU32, AtomicU64, AtomicUsize, Ordering};
use std::sync::{mpsc, Arc};
use std::time::{Duration, Instant};

pub struct Outcome {
    pub total: Snapshot,
    pub measure_from_us: u64,
    pub interrupted: bool,
    pub error: Option<anyhow::Error>,
    pub partitions: usize,
}

enum Msg {
    Snapshot(Box<Snapshot>),
    Done(Option<anyhow::Error>),
}

fn client_options(cfg: &Config) -> ClientOptions {
    ClientOptions {
        bootstrap: cfg.bootstrap.clone(),
        client_id: cfg.flags.client_id.clone(),
        max_in_flight: cfg.flags.max_in_flight,
        connect_timeout: cfg.flags.connect_timeout,
        security: cfg.security.clone(),
    }
}

/// Topic creation and start offsets, once, before any load: on a short-lived executor
/// of its own so that every worker executor starts with the same view.
fn setup(cfg: &Config) -> Result<(usize, Vec<i64>)> {
    let cfg = cfg.clone();
    LocalExecutorBuilder::new(Placement::Unbound)
        .name("corelog-load-setup")
        .spawn(move || async move {
            let f = &cfg.flags;
            let create = f.partitions.map(|p| (p, f.replication_factor));
            // Producers may let the broker auto-create, as Kafka clients do; a consumer
            // of a missing topic has nothing to read.
            let cluster =
                Cluster::connect(client_options(&cfg), &f.topic, create, cfg.mode.produces())
                    .await?;
            let which = if cfg.mode == Mode::E2e {
                protocol::OFFSET_LATEST
            } else {
                protocol::OFFSET_EARLIEST
            };
            let offsets = if cfg.mode.consumes() {
                list_offsets(&cluster, which).await?
            } else {
                Vec::new()
            };
            Ok::<_, anyhow::Error>((cluster.partitions(), offsets))
        })
        .map_err(|e| anyhow!("cannot start an executor: {e}"))?
        .join()
        .map_err(|e| anyhow!("setup executor failed: {e}"))?
}

/// Splits `total` into `parts` shares that differ by at most one.
pub fn share(total: u64, parts: usize, i: usize) -> u64 {
    let parts = parts as u64;
    total / parts + u64::from((i as u64) < total % parts)
}

pub fn run(cfg: Config, interrupted: Arc<AtomicBool>) -> Result<Outcome> {
    let (partitions, start_offsets) = setup(&cfg)?;
    let cfg = Arc::new(cfg);
    let f = &cfg.flags;
    let shared = Arc::new(Shared {
        interrupted,
        stop: AtomicBool::new(false),
        acked: AtomicU64::new(0),
        consumed: AtomicU64::new(0),
        producers_running: AtomicUsize::new(if cfg.mode.produces() { f.producers } else { 0 }),
        producers_done_at_us: AtomicU64::new(0),
        errors_printed: AtomicU32::new(0),
    });
    let clock = Clock::new();
    let start = Instant::now();
    let measure_from_us = clock.us(start + f.warmup);
    let deadline = match cfg.stop {
        Stop::Duration(d) => Some(start + f.warmup + d),
        Stop::Messages(_) => None,
    };
    let start_offsets = Arc::new(start_offsets);
    let (tx, rx) = mpsc::channel::<Msg>();
    let threads = f.threads;
    let mut handles = Vec::with_capacity(threads);
    for idx in 0..threads {
        let (cfg, shared, tx, start_offsets) = (
            cfg.clone(),
            shared.clone(),
            tx.clone(),
            start_offsets.clone(),
        );
        let placement = if cfg.flags.pin {
            Placement::Fixed(idx)
        } else {
            Placement::Unbound
        };
        let h = LocalExecutorBuilder::new(placement)
            .name(&format!("corelog-load-{idx}"))
            .spawn(move || async move {
                let done_tx = tx.clone();
                let res = executor_main(
                    idx,
                    cfg,
                    shared.clone(),
                    tx,
                    clock,
                    start,
                    deadline,
                    measure_from_us,
                    start_offsets,
                )
                .await;
                if res.is_err() {
                    shared.stop.store(true, Ordering::Relaxed);
                }
                let _ = done_tx.send(Msg::Done(res.err()));
            })
            .map_err(|e| anyhow!("cannot start executor {idx}: {e}"))?;
        handles.push(h);
    }
    drop(tx);

    let mut total = Snapshot::default();
    let mut progress = Progress::new(cfg.mode, start + f.warmup);
    let mut running = threads;
    let mut error = None;
    // Executors ship snapshots on their own 1 s timers; tick a little after them so each
    // line includes the second that just ended rather than lagging one behind.
    let mut next_tick = Instant::now() + Duration::from_millis(1100);
    while running > 0 {
        let wait = next_tick.saturating_duration_since(Instant::now());
        match rx.recv_timeout(wait) {
            Ok(Msg::Snapshot(s)) => {
                progress.add(&s);
                total.merge(&s);
            }
            Ok(Msg::Done(err)) => {
                running -= 1;
                if error.is_none() {
                    error = err;
                }
            }
            Err(mpsc::RecvTimeoutError::Timeout) => {}
            Err(mpsc::RecvTimeoutError::Disconnected) => break,
        }
        if Instant::now() >= next_tick {
            progress.tick(&total);
            next_tick += Duration::from_secs(1);
        }
    }
    progress.finish();
    for h in handles {
        let _ = h.join();
    }
    Ok(Outcome {
        total,
        measure_from_us,
        interrupted: shared.interrupted.load(Ordering::Relaxed),
        error,
        partitions,
    })
}

#[allow(clippy::too_many_arguments)]
async fn executor_main(
    idx: usize,
    cfg: Arc<Config>,
    shared: Arc<Shared>,
    tx: mpsc::Sender<Msg>,
    clock: Clock,
    start: Instant,
    deadline: Option<Instant>,
    measure_from_us: u64,
    start_offsets: Arc<Vec<i64>>,
) -> Result<()> {
    let f = &cfg.flags;
    let cluster = Cluster::connect(client_options(&cfg), &f.topic, None, false).await?;
    let ctx = Rc::new(ExecCtx {
        cfg: cfg.clone(),
        shared: shared.clone(),
        cluster,
        rec: RefCell::new(Recorder::new(measure_from_us)),
        clock,
        start,
        deadline,
        start_offsets,
    });
    // Ships this executor's numbers once a second; the last ones go out below.
    let reporter = {
        let (ctx, tx) = (ctx.clone(), tx.clone());
        glommio::spawn_local(async move {
            loop {
                glommio::timer::sleep(Duration::from_secs(1)).await;
                let s = ctx.rec.borrow_mut().now.take();
                if tx.send(Msg::Snapshot(Box::new(s))).is_err() {
                    break;
                }
            }
        })
    };
    let mut tasks = Vec::new();
    if cfg.mode.produces() {
        for id in (0..f.producers).filter(|i| i % f.threads == idx) {
            let quota = match cfg.stop {
                Stop::Messages(n) => Some(share(n, f.producers, id)),
                Stop::Duration(_) => None,
            };
            let ctx = ctx.clone();
            tasks.push(glommio::spawn_local(async move {
                let r = producer::run(ctx.clone(), id, quota).await;
                let s = &ctx.shared;
                s.producers_done_at_us
                    .fetch_max(ctx.clock.now_us(), Ordering::Relaxed);
                s.producers_running.fetch_sub(1, Ordering::Relaxed);
                r
            }));
        }
    }
    if cfg.mode.consumes() {
        for id in (0..f.consumers).filter(|i| i % f.threads == idx) {
            tasks.push(glommio::spawn_local(consumer::run(ctx.clone(), id)));
        }
    }
    let mut result = Ok(());
    for t in tasks {
        if let Err(e) = t.await {
            shared.stop.store(true, Ordering::Relaxed);
            if result.is_ok() {
                result = Err(e);
            }
        }
    }
    drop(reporter);
    let s = ctx.rec.borrow_mut().now.take();
    let _ = tx.send(Msg::Snapshot(Box::new(s)));
    result
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn shares_add_up() {
        for (total, parts) in [(10u64, 3usize), (20_000, 7), (1, 4), (0, 2)] {
            let sum: u64 = (0..parts).map(|i| share(total, parts, i)).sum();
            assert_eq!(sum, total);
            let max = (0..parts).map(|i| share(total, parts, i)).max().unwrap();
            let min = (0..parts).map(|i| share(total, parts, i)).min().unwrap();
            assert!(max - min <= 1);
        }
    }
}
