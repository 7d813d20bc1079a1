//! Serving the shards' metrics to the HTTP endpoint.
//!
//! The HTTP thread sends a query (a oneshot reply channel) to shard 0; shard 0 asks every
//! shard for a snapshot over the mesh — one `ShardMessage::Metrics` each, itself included
//! — and replies with all of them. Rendering (`prometheus.rs`, `histograms.rs`) happens
//! on the HTTP thread, off the shards. Recording itself lives in `corelog_metrics`
//! (thread-local per shard, lock-free).

pub mod histograms;
pub mod prometheus;

use corelog_metrics::MetricsSnapshot;
use corelog_shards::mesh::ShardMessage;
use corelog_shards::shard::Shard;
use futures::channel::{mpsc, oneshot};
use futures::StreamExt;
use std::rc::Rc;
use std::time::{Duration, Instant};

pub type MetricsQuery = oneshot::Sender<Vec<MetricsSnapshot>>;

/// Queries waiting for shard 0 at most (scrapes are rare; more are refused, not queued).
pub const QUERIES_QUEUED_MAX: usize = 8;

pub fn channel() -> (mpsc::Sender<MetricsQuery>, mpsc::Receiver<MetricsQuery>) {
    mpsc::channel(QUERIES_QUEUED_MAX)
}

/// Runs on shard 0: answers each query with every shard's snapshot.
pub async fn serve_queries(shard: Rc<Shard>, mut queries: mpsc::Receiver<MetricsQuery>) {
    while let Some(reply) = queries.next().await {
        let snapshots: Vec<MetricsSnapshot> = shard
            .peers
            .call_each(|reply| ShardMessage::Metrics { reply })
            .await
            .into_iter()
            .flatten()
            .collect();
        let _ = reply.send(snapshots);
    }
}

/// From the HTTP thread: every shard's snapshot, or `None` if the shards do not answer
/// within `timeout` (starting or stopping).
pub fn query(
    queries: &mpsc::Sender<MetricsQuery>,
    timeout: Duration,
) -> Option<Vec<MetricsSnapshot>> {
    let (tx, mut rx) = oneshot::channel();
    queries.clone().try_send(tx).ok()?;
    let deadline = Instant::now() + timeout;
    while Instant::now() < deadline {
        match rx.try_recv() {
            Ok(Some(snapshots)) => return Some(snapshots),
            Ok(None) => std::thread::sleep(Duration::from_millis(1)),
            Err(_) => return None,
        }
    }
    None
}

/// Kafka's name of an API key, for labels.
pub fn api_name(key: i16) -> String {
    match kafka_protocol::messages::ApiKey::try_from(key) {
        Ok(k) => format!("{k:?}"),
        Err(_) => format!("api{key}"),
    }
}

/// Kafka's name of an error code, for labels (`UNKNOWN_TOPIC_OR_PARTITION` style).
pub fn error_name(code: i16) -> String {
    use kafka_protocol::error::ParseResponseErrorCode;
    match code.err() {
        Some(e) => {
            let camel = format!("{e:?}");
            let mut out = String::with_capacity(camel.len() + 8);
            for (i, ch) in camel.chars().enumerate() {
                if ch.is_ascii_uppercase() && i > 0 {
                    out.push('_');
                }
                out.push(ch.to_ascii_uppercase());
            }
            out
        }
        None => "NONE".into(),
    }
}
