//! The HTTP endpoint: `/health`, `/metrics` (Prometheus text), `/histograms` (latency
//! percentile distributions merged across shards; `?format=json`, or
//! `/histograms/<name>.hgrm` for one; `/histograms/plot` draws them on a page), and — only when the broker runs with
//! `--storage-fault-injection`, for tests — `POST /faults` with one fault command as its
//! body (`corelog_storage::fault`).
//!
//! It runs on a small thread of its own with `tiny_http`: it is off the data path, and a
//! blocking server there never stalls a shard's reactor. Metrics come from the shards
//! over the mesh through shard 0 (`metrics::query`); rendering happens here.

use crate::metrics::{self, MetricsQuery};
use crate::server::Lifecycle;
use corelog_storage::StorageFaults;
use futures::channel::mpsc;
use std::io::Read;
use std::net::SocketAddr;
use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::Duration;

/// How long a scrape waits for the shards.
const SCRAPE_TIMEOUT: Duration = Duration::from_secs(5);

pub fn spawn(
    addr: SocketAddr,
    life: Arc<Lifecycle>,
    shards: usize,
    queries: mpsc::Sender<MetricsQuery>,
    faults: Option<Arc<StorageFaults>>,
) -> anyhow::Result<std::thread::JoinHandle<()>> {
    metrics::process::mark_start();
    let server = tiny_http::Server::http(addr)
        .map_err(|e| anyhow::anyhow!("binding the HTTP endpoint {addr}: {e}"))?;
    let handle = std::thread::Builder::new()
        .name("corelog-http".into())
        .spawn(move || loop {
            let mut request = match server.recv_timeout(Duration::from_millis(100)) {
                Ok(Some(r)) => r,
                Ok(None) => {
                    if life.stop.load(Ordering::Acquire) || life.failed.load(Ordering::Acquire) {
                        return;
                    }
                    continue;
                }
                Err(_) => return,
            };
            let (status, content_type, body) = if request.url() == "/faults" {
                faults_command(&mut request, faults.as_deref())
            } else {
                route(request.url(), &life, shards, &queries)
            };
            let header =
                tiny_http::Header::from_bytes(&b"Content-Type"[..], content_type.as_bytes());
            let mut response = tiny_http::Response::from_string(body).with_status_code(status);
            if let Ok(h) = header {
                response = response.with_header(h);
            }
            let _ = request.respond(response);
        })?;
    Ok(handle)
}

/// `POST /faults`: runs the body's fault command. A power loss never answers: the
/// process is gone.
fn faults_command(
    request: &mut tiny_http::Request,
    faults: Option<&StorageFaults>,
) -> (u16, &'static str, String) {
    const TEXT: &str = "text/plain; charset=utf-8";
    let Some(faults) = faults else {
        return (
            404,
            TEXT,
            "storage fault injection is off (--storage-fault-injection true)\n".into(),
        );
    };
    if *request.method() != tiny_http::Method::Post {
        return (405, TEXT, "POST a fault command\n".into());
    }
    let mut body = String::new();
    if std::io::Read::take(request.as_reader(), 4096)
        .read_to_string(&mut body)
        .is_err()
    {
        return (400, TEXT, "the body is not UTF-8 text\n".into());
    }
    match faults.command(body.trim()) {
        Ok(said) => (200, TEXT, said),
        Err(e) => (400, TEXT, format!("{e}\n")),
    }
}

fn route(
    url: &str,
    life: &Lifecycle,
    shards: usize,
    queries: &mpsc::Sender<MetricsQuery>,
) -> (u16, &'static str, String) {
    const TEXT: &str = "text/plain; charset=utf-8";
    let (path, query) = url.split_once('?').unwrap_or((url, ""));
    match path {
        "/health" | "/ready" => {
            if life.ready(shards) {
                (200, TEXT, "ok\n".into())
            } else {
                (503, TEXT, "starting or stopping\n".into())
            }
        }
        "/metrics" => match metrics::query(queries, SCRAPE_TIMEOUT) {
            Some(s) => (
                200,
                metrics::prometheus::CONTENT_TYPE,
                metrics::prometheus::render(s, metrics::process::read()),
            ),
            None => (503, TEXT, "shards unavailable\n".into()),
        },
        "/histograms" => match metrics::query(queries, SCRAPE_TIMEOUT) {
            Some(s) if query.split('&').any(|kv| kv == "format=json") => (
                200,
                "application/json",
                metrics::histograms::json(&s.shards),
            ),
            Some(s) => (200, TEXT, metrics::histograms::text(&s.shards)),
            None => (503, TEXT, "shards unavailable\n".into()),
        },
        "/histograms/plot" => match metrics::query(queries, SCRAPE_TIMEOUT) {
            Some(s) => (
                200,
                "text/html; charset=utf-8",
                metrics::histograms::page(&s.shards),
            ),
            None => (503, TEXT, "shards unavailable\n".into()),
        },
        p if p.starts_with("/histograms/") && p.ends_with(".hgrm") => {
            let name = p
                .trim_start_matches("/histograms/")
                .trim_end_matches(".hgrm");
            match metrics::query(queries, SCRAPE_TIMEOUT) {
                Some(s) => match metrics::histograms::one(&s.shards, name) {
                    Some(body) => (200, TEXT, body),
                    None => (404, TEXT, format!("no histogram named {name}\n")),
                },
                None => (503, TEXT, "shards unavailable\n".into()),
            }
        }
        _ => (
            404,
            TEXT,
            "not found: try /health, /metrics, /histograms, /histograms/plot\n".into(),
        ),
    }
}
