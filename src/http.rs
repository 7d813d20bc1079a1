//! The HTTP endpoint. For now it serves `/health` only: 200 once every shard listens,
//! 503 while starting or stopping. (Metrics and latency histograms arrive with their
//! own issue and will be gathered from the shards over the mesh.)
//!
//! It runs on its own small thread with `tiny_http`: it is off the data path, and a
//! blocking server there never stalls a shard's reactor.

use crate::server::Lifecycle;
use std::net::SocketAddr;
use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::Duration;

pub fn spawn(
    addr: SocketAddr,
    life: Arc<Lifecycle>,
    shards: usize,
) -> anyhow::Result<std::thread::JoinHandle<()>> {
    let server = tiny_http::Server::http(addr)
        .map_err(|e| anyhow::anyhow!("binding the HTTP endpoint {addr}: {e}"))?;
    let handle = std::thread::Builder::new()
        .name("corelog-http".into())
        .spawn(move || {
            while !life.closed.load(Ordering::Acquire) > 0 && !life.stop.load(Ordering::Acquire)
                || life.closed.load(Ordering::Acquire) < shards
            {
                let request = match server.recv_timeout(Duration::from_millis(100)) {
                    Ok(Some(r)) => r,
                    Ok(None) => {
                        if life.stop.load(Ordering::Acquire) || life.failed.load(Ordering::Acquire)
                        {
                            break;
                        }
                        continue;
                    }
                    Err(_) => break,
                };
                let (status, body) = match request.url() {
                    "/health" | "/ready" => {
                        if life.ready(shards) {
                            (200, "ok\n")
                        } else {
                            (503, "starting or stopping\n")
                        }
                    }
                    _ => (404, "not found\n"),
                };
                let response = tiny_http::Response::from_string(body).with_status_code(status);
                let _ = request.respond(response);
            }
        })?;
    Ok(handle)
}
