//! Serving the shards' metrics to the HTTP endpoint.
//!
//! The HTTP thread sends a query (a oneshot reply channel) to shard 0; shard 0 asks every
//! shard for a snapshot over the mesh — one `ShardMessage::Metrics` each, itself included
//! — and replies with all of them, and with what only the whole broker knows
//! ([`BrokerMetrics`]). Rendering (`prometheus.rs`, `histograms.rs`) happens on the HTTP
//! thread, off the shards. Recording itself lives in `corelog_metrics` (thread-local per
//! shard, lock-free).
//!
//! Consumer lag is computed here, at the scrape, never on a request's path: each
//! coordinator shard lists its groups' committed offsets in its snapshot (bounded by
//! `corelog_metrics::GROUP_LAG_PARTITIONS_MAX`), then shard 0 asks each shard that owns
//! one of those partitions for its high watermark (one `HighWatermarks` message per
//! shard), and the lag is the difference. A partition of which this broker holds no
//! replica has no high watermark here and no lag series.

pub mod histograms;
pub mod process;
pub mod prometheus;

use corelog_metrics::MetricsSnapshot;
use corelog_shards::mesh::{PartitionRequest, ShardMessage, TopicPartition};
use corelog_shards::shard::Shard;
use futures::channel::{mpsc, oneshot};
use futures::StreamExt;
use std::collections::{BTreeMap, HashMap, HashSet};
use std::rc::Rc;
use std::sync::Arc;
use std::time::{Duration, Instant};

/// What a scrape gets: every shard's snapshot and the broker's own gauges.
pub struct Scrape {
    pub shards: Vec<MetricsSnapshot>,
    pub broker: BrokerMetrics,
}

/// Gauges of the whole broker, measured by shard 0 at the scrape.
#[derive(Debug, Clone, Default)]
pub struct BrokerMetrics {
    /// (group, topic, partition) → lag in offsets, for the committed partitions of which
    /// this broker holds a replica.
    pub group_lag: BTreeMap<(String, String, i32), u64>,
    /// Committed partitions of this broker's groups whose high watermark is not known
    /// here (no replica on this broker).
    pub group_lag_unknown: u64,
    /// Groups with committed offsets left out of the lag series by the bound.
    pub group_lag_groups_omitted: u64,
    /// Client connections open now, all listeners and shards together.
    pub connections_open: u64,
    /// Whether this broker's controller node leads the controller quorum.
    pub active_controller: bool,
    /// On the active controller, the partitions without a leader, and the fenced
    /// brokers (0 elsewhere, as Kafka's controller metrics).
    pub offline_partitions: u64,
    pub fenced_brokers: u64,
    /// (size, available to unprivileged users) bytes of the data directory's filesystem.
    pub data_dir_filesystem: Option<(u64, u64)>,
}

pub type MetricsQuery = oneshot::Sender<Scrape>;

/// Queries waiting for shard 0 at most (scrapes are rare; more are refused, not queued).
pub const QUERIES_QUEUED_MAX: usize = 8;

pub fn channel() -> (mpsc::Sender<MetricsQuery>, mpsc::Receiver<MetricsQuery>) {
    mpsc::channel(QUERIES_QUEUED_MAX)
}

/// Runs on shard 0: answers each query with every shard's snapshot and the broker's
/// gauges. `connections` counts the broker's open client connections.
pub async fn serve_queries(
    shard: Rc<Shard>,
    mut queries: mpsc::Receiver<MetricsQuery>,
    connections: Arc<crate::net::connection_limits::ConnectionLimits>,
) {
    while let Some(reply) = queries.next().await {
        let snapshots: Vec<MetricsSnapshot> = shard
            .peers
            .call_each(|reply| ShardMessage::Metrics { reply })
            .await
            .into_iter()
            .flatten()
            .collect();
        let mut broker = BrokerMetrics {
            connections_open: connections.open() as u64,
            data_dir_filesystem: corelog_shards::housekeeping::filesystem_space(
                &shard.config.data_dir,
            ),
            ..BrokerMetrics::default()
        };
        controller_gauges(&shard, &mut broker);
        group_lag(&shard, &snapshots, &mut broker).await;
        let _ = reply.send(Scrape {
            shards: snapshots,
            broker,
        });
    }
}

/// The controller's gauges: whether this node is the active controller, and there the
/// partitions without a leader and the fenced brokers of the metadata image.
fn controller_gauges(shard: &Shard, broker: &mut BrokerMetrics) {
    let node = &shard.node;
    broker.active_controller = node.leader() == Some(node.node_id());
    if !broker.active_controller {
        return;
    }
    let image = node.image();
    broker.offline_partitions = image
        .topics
        .values()
        .flat_map(|t| t.partitions.iter())
        .filter(|p| !p.has_leader())
        .count() as u64;
    broker.fenced_brokers = image.brokers.values().filter(|b| b.fenced).count() as u64;
}

/// Joins the coordinators' committed offsets with the high watermarks of the shards that
/// hold the partitions: one message per shard that owns any.
async fn group_lag(shard: &Shard, snapshots: &[MetricsSnapshot], broker: &mut BrokerMetrics) {
    let shard_count = shard.config.shard_count;
    let mut wanted: Vec<Vec<TopicPartition>> = vec![Vec::new(); shard_count];
    let mut seen: HashSet<(&str, i32)> = HashSet::new();
    for s in snapshots {
        broker.group_lag_groups_omitted += s.group_offsets.groups_omitted;
        for o in &s.group_offsets.offsets {
            if seen.insert((o.topic.as_str(), o.partition)) {
                let owner = corelog_shards::routing::shard_of(&o.topic, o.partition, shard_count);
                if let Some(list) = wanted.get_mut(owner) {
                    list.push(TopicPartition {
                        topic: Arc::from(o.topic.as_str()),
                        partition: o.partition,
                    });
                }
            }
        }
    }
    let asks = wanted
        .into_iter()
        .enumerate()
        .filter(|(_, partitions)| !partitions.is_empty())
        .map(|(target, partitions)| async move {
            let (tx, rx) = oneshot::channel();
            let msg = PartitionRequest::HighWatermarks {
                partitions: partitions.clone(),
                reply: tx,
            };
            let answers = shard.peers.call(target, msg, rx).await.unwrap_or_default();
            partitions.into_iter().zip(answers)
        });
    let mut marks: HashMap<Arc<str>, HashMap<i32, i64>> = HashMap::new();
    for answered in futures::future::join_all(asks).await {
        for (tp, hw) in answered {
            if let Some(hw) = hw {
                marks.entry(tp.topic).or_default().insert(tp.partition, hw);
            }
        }
    }
    for s in snapshots {
        for o in &s.group_offsets.offsets {
            let mark = marks
                .get(o.topic.as_str())
                .and_then(|m| m.get(&o.partition));
            match mark {
                Some(hw) => {
                    // A commit past the high watermark (a follower's mark a fetch behind,
                    // a log truncated under the commit) is no lag, not a negative one.
                    let lag = u64::try_from(hw - o.committed).unwrap_or(0);
                    broker
                        .group_lag
                        .insert((o.group.clone(), o.topic.clone(), o.partition), lag);
                }
                None => broker.group_lag_unknown += 1,
            }
        }
    }
}

/// From the HTTP thread: every shard's snapshot and the broker's gauges, or `None` if the
/// shards do not answer within `timeout` (starting or stopping).
pub fn query(queries: &mpsc::Sender<MetricsQuery>, timeout: Duration) -> Option<Scrape> {
    let (tx, mut rx) = oneshot::channel();
    queries.clone().try_send(tx).ok()?;
    let deadline = Instant::now() + timeout;
    while Instant::now() < deadline {
        match rx.try_recv() {
            Ok(Some(scrape)) => return Some(scrape),
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
