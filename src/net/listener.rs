//! The Kafka listener of one shard. Every shard binds the same address with
//! SO_REUSEPORT (glommio sets it), so the kernel spreads new connections across cores
//! and each connection lives on the shard that accepted it.
//!
//! Every accepted connection passes the broker-wide limits first
//! (`connection_limits.rs`): an IP over `max.connections.per.ip` is closed at once;
//! when `max.connections` are open, this acceptor holds the connection it has and stops
//! accepting until a slot frees, so later clients wait in the kernel's listen backlog.
//! A connection keeps its permits until it ends.
//!
//! An accept that finds no file descriptor free (EMFILE/ENFILE) closes half of this
//! shard's idle segment files, logs what ran out (at most once per interval) and tries
//! again after a short pause: the broker never stops accepting for good.

use crate::kafka::api::Ctx;
use crate::net::connection_limits::{ConnectionLimits, RateLimitedLog};
use crate::net::request_memory::RequestMemory;
use crate::net::shutdown::ShutdownSignal;
use glommio::net::TcpListener;
use std::rc::Rc;
use std::sync::Arc;
use std::time::{Duration, Instant};

/// At most one "connection refused" line per this interval per shard.
const REFUSAL_LOG_INTERVAL: Duration = Duration::from_secs(5);

pub async fn accept_loop(
    ctx: Rc<Ctx>,
    listener: TcpListener,
    shutdown: Rc<ShutdownSignal>,
    limits: Arc<ConnectionLimits>,
) {
    let live = Rc::new(std::cell::Cell::new(0usize));
    let memory = Rc::new(RequestMemory::new(
        ctx.config.limits.queued_max_request_bytes,
    ));
    let refusals = RateLimitedLog::new(REFUSAL_LOG_INTERVAL);
    let descriptor_errors = RateLimitedLog::new(REFUSAL_LOG_INTERVAL);
    loop {
        let accepted = futures_lite::future::or(async { Some(listener.accept().await) }, async {
            shutdown.wait().await;
            None
        })
        .await;
        let stream = match accepted {
            None => break,
            Some(Ok(s)) => s,
            Some(Err(e)) => {
                let e = corelog_storage::file_cache::os_error(e);
                if corelog_storage::file_cache::is_out_of_descriptors(&e) {
                    // Give back what this shard can (idle segment files reopen when next
                    // used), say what ran out, and try again: the connection waits in the
                    // listen backlog meanwhile.
                    let shed = ctx.shard.open_files().shed();
                    corelog_metrics::record_limit(|c| c.accept_out_of_descriptors += 1);
                    if let Some(suppressed) = descriptor_errors.allow(Instant::now()) {
                        tracing::warn!(
                            error = %e,
                            connections = limits.open(),
                            nofile = crate::kernel::nofile_ceiling().unwrap_or(0),
                            closed_segment_files = shed,
                            suppressed,
                            "out of file descriptors: cannot accept a connection; raise RLIMIT_NOFILE (ulimit -n, LimitNOFILE=) or lower --max-connections / --max-open-segment-files"
                        );
                    }
                } else {
                    tracing::warn!(error = %e, "accept failed");
                }
                // Back off instead of spinning.
                glommio::timer::sleep(std::time::Duration::from_millis(50)).await;
                continue;
            }
        };
        let peer = match stream.peer_addr() {
            Ok(p) => p,
            Err(_) => continue,
        };
        // Per IP first, so a refused IP never holds the one connection this acceptor
        // may be waiting with.
        let ip_permit = match limits.admit_ip(peer.ip().to_canonical()) {
            Ok(p) => p,
            Err(refused) => {
                corelog_metrics::record_limit(|c| c.connections_refused_per_ip += 1);
                if let Some(suppressed) = refusals.allow(Instant::now()) {
                    tracing::warn!(%peer, reason = %refused, suppressed, "closing new connection");
                }
                drop(stream);
                continue;
            }
        };
        let slot = match limits.try_acquire() {
            Some(slot) => slot,
            None => {
                corelog_metrics::record_limit(|c| c.accept_waits += 1);
                tracing::debug!(%peer, max_connections = limits.total_max(), "max-connections reached: not accepting until a connection closes");
                let waited =
                    futures_lite::future::or(async { Some(limits.acquire().await) }, async {
                        shutdown.wait().await;
                        None
                    })
                    .await;
                match waited {
                    Some(slot) => slot,
                    None => break,
                }
            }
        };
        corelog_metrics::record_connection_accepted();
        let (ctx, shutdown, live) = (ctx.clone(), shutdown.clone(), live.clone());
        let memory = memory.clone();
        live.set(live.get() + 1);
        glommio::spawn_local(async move {
            crate::net::connection::serve(ctx, stream, peer, shutdown, memory).await;
            live.set(live.get() - 1);
            drop((ip_permit, slot));
        })
        .detach();
    }
    // Let connections answer what they already read, up to the drain limit.
    let started = std::time::Instant::now();
    while live.get() > 0
        && started.elapsed().as_millis() < u128::from(crate::limits::SHUTDOWN_DRAIN_MS)
    {
        glommio::timer::sleep(std::time::Duration::from_millis(10)).await;
    }
}
