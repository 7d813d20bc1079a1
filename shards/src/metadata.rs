//! The cluster metadata as the shards see it: the controller's latest applied image
//! (`corelog_controller::MetadataImage`), with the helpers a broker needs around it.
//!
//! Sharing across cores (decided up front: `RefCell` state shared across `.await` points
//! is how thread-per-core brokers panic): one writer — the controller node's publisher, on
//! the controller thread — and lock-free readers on every core. Readers load an
//! `Arc<ClusterMetadata>` from an `ArcSwap` and never hold a borrow across an `.await`.
//! Every view carries the log index it reflects (`version`); a newer one replaces an
//! older one, never the reverse, and each replacement wakes whoever waits for a change.
//!
//! Persistence is the controller's (its Raft log and snapshots); nothing here is written.

use arc_swap::ArcSwap;
use corelog_controller::image::{PartitionImage, TopicImage};
use corelog_controller::MetadataImage;
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

pub use corelog_controller::image::{validate_topic_name, TopicNameError, TOPIC_NAME_LEN_MAX};

/// Where a single node kept its metadata before the controller quorum (read once, to
/// carry its cluster id over).
pub const LEGACY_METADATA_FILE: &str = "cluster-metadata.json";

/// One applied image of the cluster metadata.
#[derive(Debug, Clone, Default)]
pub struct ClusterMetadata {
    image: Arc<MetadataImage>,
}

impl std::ops::Deref for ClusterMetadata {
    type Target = MetadataImage;

    fn deref(&self) -> &MetadataImage {
        &self.image
    }
}

/// A layer with nothing set.
static NO_CONFIGS: BTreeMap<String, String> = BTreeMap::new();

impl ClusterMetadata {
    pub fn new(image: Arc<MetadataImage>) -> ClusterMetadata {
        ClusterMetadata { image }
    }

    pub fn image(&self) -> &Arc<MetadataImage> {
        &self.image
    }

    /// The metadata log index this view reflects.
    pub fn version(&self) -> u64 {
        self.image.applied
    }

    pub fn cluster_id(&self) -> &str {
        self.image.cluster_id.as_deref().unwrap_or_default()
    }

    /// The broker-wide defaults every topic of node `node_id` inherits, in layers.
    pub fn broker_defaults<'a>(
        &'a self,
        static_config: &'a corelog_storage::LogConfig,
        node_id: i32,
    ) -> crate::topic_config::BrokerDefaults<'a> {
        crate::topic_config::BrokerDefaults {
            static_config,
            cluster_default: self.broker_configs.get("").unwrap_or(&NO_CONFIGS),
            node: self
                .broker_configs
                .get(&node_id.to_string())
                .unwrap_or(&NO_CONFIGS),
        }
    }

    /// Kafka's internal topics (hidden by admin clients' listTopics); a user topic whose
    /// name merely starts with `__` is not one.
    pub fn is_internal(topic: &str) -> bool {
        topic == crate::group::OFFSETS_TOPIC
            || topic == crate::share::coordinator::SHARE_STATE_TOPIC
    }

    pub fn has_partition(&self, topic: &str, partition: i32) -> bool {
        self.partition(topic, partition).is_some()
    }

    pub fn partition(&self, topic: &str, partition: i32) -> Option<&PartitionImage> {
        self.topic(topic).and_then(|t| t.partition(partition))
    }

    /// Whether broker `node_id` serves clients' requests for the partition: it must lead
    /// it. Kafka's answers otherwise: an unknown partition, or "not the leader" with the
    /// leader clients should go to (-1 when the partition is offline).
    pub fn check_leader(&self, node_id: i32, topic: &str, partition: i32) -> Result<(), NotServed> {
        match self.partition(topic, partition) {
            None => Err(NotServed::UnknownTopicOrPartition),
            Some(p) if p.leader == node_id => Ok(()),
            Some(p) => Err(NotServed::NotLeader {
                leader: p.leader,
                leader_epoch: p.leader_epoch,
            }),
        }
    }

    /// Whether `node_id` holds a replica of the partition.
    pub fn hosts(&self, node_id: i32, topic: &str, partition: i32) -> bool {
        self.partition(topic, partition)
            .is_some_and(|p| p.replicas.contains(&node_id))
    }

    /// The topics with a replica on `node_id`, each with the partitions it holds.
    pub fn hosted_by(&self, node_id: i32) -> impl Iterator<Item = (&TopicImage, Vec<i32>)> {
        self.topics.values().filter_map(move |t| {
            let mine: Vec<i32> = (0..t.partition_count())
                .filter(|p| {
                    t.partition(*p)
                        .is_some_and(|part| part.replicas.contains(&node_id))
                })
                .collect();
            (!mine.is_empty()).then_some((t, mine))
        })
    }
}

/// Why a broker does not serve a partition's request (`ClusterMetadata::check_leader`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum NotServed {
    UnknownTopicOrPartition,
    /// Another broker leads it (`leader` -1: none does, the partition is offline).
    NotLeader {
        leader: i32,
        leader_epoch: i32,
    },
}

/// The published metadata: one writer, readers on every core.
pub struct MetadataStore {
    data_dir: PathBuf,
    current: ArcSwap<ClusterMetadata>,
    changed: event_listener::Event,
    /// The version each shard has reconciled its partitions with.
    reconciled: Vec<AtomicU64>,
    reconciled_changed: event_listener::Event,
}

impl MetadataStore {
    /// An empty view (nothing applied yet) for the broker with its data in `data_dir`;
    /// removes what deleted partitions left behind there.
    pub fn new(data_dir: &Path, shard_count: usize) -> std::io::Result<MetadataStore> {
        std::fs::create_dir_all(data_dir)?;
        remove_deleted_leftovers(data_dir);
        Ok(MetadataStore {
            data_dir: data_dir.to_path_buf(),
            current: ArcSwap::from_pointee(ClusterMetadata::default()),
            changed: event_listener::Event::new(),
            reconciled: (0..shard_count).map(|_| AtomicU64::new(0)).collect(),
            reconciled_changed: event_listener::Event::new(),
        })
    }

    /// Shard `shard` has made its partitions what version `version` says.
    pub fn mark_reconciled(&self, shard: usize, version: u64) {
        if let Some(v) = self.reconciled.get(shard) {
            v.fetch_max(version, Ordering::AcqRel);
            self.reconciled_changed.notify(usize::MAX);
        }
    }

    /// Resolves once every shard has reconciled version `version` or a later one.
    pub async fn wait_reconciled(&self, version: u64) {
        loop {
            let listener = self.reconciled_changed.listen();
            if self
                .reconciled
                .iter()
                .all(|v| v.load(Ordering::Acquire) >= version)
            {
                return;
            }
            listener.await;
        }
    }

    pub fn snapshot(&self) -> Arc<ClusterMetadata> {
        self.current.load_full()
    }

    pub fn data_dir(&self) -> &Path {
        &self.data_dir
    }

    /// Publishes `image` if it is newer than the current view. The controller node's
    /// publisher is the only caller.
    pub fn publish(&self, image: Arc<MetadataImage>) {
        let current = self.current.load();
        if image.applied <= current.version() && current.version() != 0 {
            return;
        }
        self.current.store(Arc::new(ClusterMetadata::new(image)));
        self.changed.notify(usize::MAX);
    }

    /// Resolves once a view with a version of at least `version` is published.
    pub async fn wait_for(&self, version: u64) {
        loop {
            let listener = self.changed.listen();
            if self.snapshot().version() >= version {
                return;
            }
            listener.await;
        }
    }

    /// Resolves at the next publication after the view of `version`.
    pub async fn wait_past(&self, version: u64) {
        self.wait_for(version.saturating_add(1)).await
    }
}

/// Suffix of a deleted partition's directory until it is removed.
pub const DELETED_DIR_SUFFIX: &str = "-delete";

/// The name a deleted partition's directory is renamed to before it is removed:
/// `<topic>-<partition>.<uuid>-delete`, unique so that a topic created again under the
/// same name never meets it. ('.' then 32 hex digits cannot end a valid partition
/// directory name.)
pub fn deleted_dir_name(dir: &Path) -> PathBuf {
    let mut name = dir.as_os_str().to_os_string();
    name.push(format!(
        ".{}{DELETED_DIR_SUFFIX}",
        uuid::Uuid::new_v4().simple()
    ));
    PathBuf::from(name)
}

/// Removes directories of deleted partitions that a crash left behind. Start-up only.
pub fn remove_deleted_leftovers(data_dir: &Path) {
    let Ok(entries) = std::fs::read_dir(data_dir) else {
        return;
    };
    for entry in entries.flatten() {
        let name = entry.file_name();
        if name
            .to_str()
            .is_some_and(|n| n.ends_with(DELETED_DIR_SUFFIX) && n.contains('.'))
        {
            if let Err(e) = std::fs::remove_dir_all(entry.path()) {
                tracing::warn!(path = %entry.path().display(), error = %e, "removing a deleted partition's directory");
            }
        }
    }
}

/// The directory of one partition: `<data-dir>/<topic>-<partition>`.
pub fn partition_dir(data_dir: &Path, topic: &str, partition: i32) -> PathBuf {
    data_dir.join(format!("{topic}-{partition}"))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn image(applied: u64) -> Arc<MetadataImage> {
        let mut image = MetadataImage::default();
        image.applied = applied;
        Arc::new(image)
    }

    #[test]
    fn only_newer_views_replace_older_ones() {
        let dir = tempfile::tempdir().expect("tempdir");
        let store = MetadataStore::new(dir.path(), 2).expect("store");
        assert_eq!(store.snapshot().version(), 0);
        store.publish(image(5));
        store.publish(image(3));
        assert_eq!(store.snapshot().version(), 5);
        store.publish(image(6));
        assert_eq!(store.snapshot().version(), 6);
        futures_lite::future::block_on(store.wait_for(6));
        store.mark_reconciled(0, 6);
        store.mark_reconciled(1, 7);
        futures_lite::future::block_on(store.wait_reconciled(6));
    }
}
