//! The Kafka listener of one shard. Every shard binds the same address with
//! SO_REUSEPORT (glommio sets it), so the kernel spreads new connections across cores
//! and each connection lives on the shard that accepted it.

use crate::kafka::api::Ctx;
use crate::server::ShutdownSignal;
use glommio::net::TcpListener;
use std::rc::Rc;

pub async fn accept_loop(ctx: Rc<Ctx>, listener: TcpListener, shutdown: Rc<ShutdownSignal>) {
    let live = Rc::new(std::cell::Cell::new(0usize));
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
                // Out of file descriptors and the like: back off instead of spinning.
                tracing::warn!(error = %e, "accept failed");
                glommio::timer::sleep(std::time::Duration::from_millis(50)).await;
                continue;
            }
        };
        let peer = match stream.peer_addr() {
            Ok(p) => p,
            Err(_) => continue,
        };
        shards::metrics::record_connection_accepted();
        let (ctx, shutdown, live) = (ctx.clone(), shutdown.clone(), live.clone());
        live.set(live.get() + 1);
        glommio::spawn_local(async move {
            crate::net::connection::serve(ctx, stream, peer, shutdown).await;
            live.set(live.get() - 1);
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
