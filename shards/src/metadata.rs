//! The cluster's topic metadata: names, ids, partition counts and configs.
//!
//! Sharing across cores (decided up front: `RefCell` state shared across `.await` points
//! is how thread-per-core brokers panic): one writer — the controller on shard 0 — and lock-free readers on every core. Readers
//! load an `Arc<ClusterMetadata>` snapshot from an `ArcSwap` and never hold a borrow
//! across an `.await`; the writer builds a new snapshot, persists it, then publishes it.
//!
//! Persistence: `<data-dir>/cluster-metadata.json`, replaced atomically (write a
//! temporary file, fsync, rename, fsync the directory), so a crash leaves either the old
//! or the new metadata, never a mix.

use arc_swap::ArcSwap;
use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;
use std::io::Write;
use std::path::{Path, PathBuf};
use std::sync::Arc;

pub use corelog_controller::image::{validate_topic_name, TopicNameError, TOPIC_NAME_LEN_MAX};

pub const METADATA_FILE: &str = "cluster-metadata.json";

#[derive(Debug, Clone, Serialize, Deserialize, PartialEq, Eq)]
pub struct TopicMeta {
    pub name: String,
    pub id: uuid::Uuid,
    pub partitions: i32,
    #[serde(default)]
    pub configs: BTreeMap<String, String>,
    /// The leader epoch every partition of the topic is led in. This node leads them
    /// all, so they share it; it starts at 0 and grows by one each time the node starts
    /// (`start_new_leader_epochs`). Absent (0) in files written before epochs were kept.
    #[serde(default)]
    pub leader_epoch: i32,
}

#[derive(Debug, Clone, Serialize, Deserialize, Default)]
pub struct ClusterMetadata {
    pub cluster_id: String,
    pub topics: BTreeMap<String, TopicMeta>,
    /// First producer id not yet handed out in a block (see `ControllerRequest::
    /// AllocateProducerIds`): ids below it are never given out again, across restarts.
    #[serde(default)]
    pub next_producer_id: i64,
    /// Client quota overrides (AlterClientQuotas); absent in files written before them.
    #[serde(default)]
    pub client_quotas: crate::client_quota::ClientQuotas,
    /// Dynamic broker configs (AlterConfigs / IncrementalAlterConfigs on BROKER
    /// resources) by resource name: "" the cluster-wide default, "<id>" one node. Keys are
    /// broker names (`log.retention.ms`), validated before they were stored.
    #[serde(default)]
    pub broker_configs: BTreeMap<String, BTreeMap<String, String>>,
    /// Topic names by id (Fetch v13+ and Metadata address topics by id): derived from
    /// `topics` by the store before it publishes a snapshot, never persisted.
    #[serde(skip)]
    topic_ids: std::collections::HashMap<uuid::Uuid, String>,
}

/// A layer with nothing set.
static NO_CONFIGS: BTreeMap<String, String> = BTreeMap::new();

impl ClusterMetadata {
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
}

impl ClusterMetadata {
    pub fn topic(&self, name: &str) -> Option<&TopicMeta> {
        self.topics.get(name)
    }

    pub fn topic_by_id(&self, id: uuid::Uuid) -> Option<&TopicMeta> {
        // A snapshot the store did not index (built by hand) is searched instead.
        if self.topic_ids.len() != self.topics.len() {
            return self.topics.values().find(|t| t.id == id);
        }
        self.topic_ids
            .get(&id)
            .and_then(|name| self.topics.get(name))
            .filter(|t| t.id == id)
    }

    /// Kafka's internal topics (hidden by admin clients' listTopics); a user topic whose
    /// name merely starts with `__` is not one.
    pub fn is_internal(topic: &str) -> bool {
        topic == crate::group::OFFSETS_TOPIC
    }

    /// Rebuilds the id index from `topics`.
    fn index_topic_ids(&mut self) {
        self.topic_ids = self
            .topics
            .values()
            .map(|t| (t.id, t.name.clone()))
            .collect();
        debug_assert_eq!(
            self.topic_ids.len(),
            self.topics.len(),
            "topic ids are unique"
        );
    }

    pub fn has_partition(&self, topic: &str, partition: i32) -> bool {
        self.topic(topic)
            .map(|t| partition >= 0 && partition < t.partitions)
            .unwrap_or(false)
    }
}

pub struct MetadataStore {
    data_dir: PathBuf,
    current: ArcSwap<ClusterMetadata>,
}

impl MetadataStore {
    /// Loads the persisted metadata, or starts empty with a new cluster id.
    pub fn load(data_dir: &Path) -> std::io::Result<MetadataStore> {
        std::fs::create_dir_all(data_dir)?;
        remove_deleted_leftovers(data_dir);
        let path = data_dir.join(METADATA_FILE);
        let meta = match std::fs::read(&path) {
            Ok(bytes) => serde_json::from_slice(&bytes).map_err(|e| {
                std::io::Error::new(
                    std::io::ErrorKind::InvalidData,
                    format!("{}: {e}", path.display()),
                )
            })?,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
                let meta = ClusterMetadata {
                    cluster_id: uuid::Uuid::new_v4().simple().to_string(),
                    topics: BTreeMap::new(),
                    next_producer_id: 0,
                    client_quotas: Default::default(),
                    broker_configs: BTreeMap::new(),
                    topic_ids: Default::default(),
                };
                persist(data_dir, &meta)?;
                meta
            }
            Err(e) => return Err(e),
        };
        let mut meta = meta;
        meta.index_topic_ids();
        Ok(MetadataStore {
            data_dir: data_dir.to_path_buf(),
            current: ArcSwap::from_pointee(meta),
        })
    }

    /// Starts a new leader epoch for every topic, persisted before any partition opens:
    /// the node is the leader again after an absence, as a controller makes a replica
    /// that comes back leader of its partitions in a new epoch. Batches written from now
    /// on carry it, so a consumer that read past what a crash lost can tell (KIP-320).
    pub fn start_new_leader_epochs(&self) -> std::io::Result<()> {
        let mut next = (*self.snapshot()).clone();
        if next.topics.is_empty() {
            return Ok(());
        }
        for t in next.topics.values_mut() {
            t.leader_epoch = t.leader_epoch.checked_add(1).ok_or_else(|| {
                std::io::Error::new(
                    std::io::ErrorKind::InvalidData,
                    format!("topic {}: leader epoch overflows", t.name),
                )
            })?;
        }
        self.replace(next)
    }

    pub fn snapshot(&self) -> Arc<ClusterMetadata> {
        self.current.load_full()
    }

    pub fn data_dir(&self) -> &Path {
        &self.data_dir
    }

    /// Persists `next` and publishes it. Only the controller (shard 0) calls this, one
    /// change at a time.
    pub fn replace(&self, mut next: ClusterMetadata) -> std::io::Result<()> {
        persist(&self.data_dir, &next)?;
        next.index_topic_ids();
        self.current.store(Arc::new(next));
        Ok(())
    }
}

fn persist(data_dir: &Path, meta: &ClusterMetadata) -> std::io::Result<()> {
    let tmp = data_dir.join(format!("{METADATA_FILE}.tmp"));
    let bytes = serde_json::to_vec_pretty(meta)
        .map_err(|e| std::io::Error::new(std::io::ErrorKind::InvalidData, e))?;
    let mut f = std::fs::File::create(&tmp)?;
    f.write_all(&bytes)?;
    f.sync_all()?;
    drop(f);
    std::fs::rename(&tmp, data_dir.join(METADATA_FILE))?;
    std::fs::File::open(data_dir)?.sync_all()
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

    #[test]
    fn persists_and_reloads() {
        let dir = tempfile::tempdir().expect("tempdir");
        let store = MetadataStore::load(dir.path()).expect("load");
        let mut next = (*store.snapshot()).clone();
        next.topics.insert(
            "t".into(),
            TopicMeta {
                name: "t".into(),
                id: uuid::Uuid::new_v4(),
                partitions: 3,
                configs: BTreeMap::new(),
                leader_epoch: 0,
            },
        );
        store.replace(next.clone()).expect("replace");
        let again = MetadataStore::load(dir.path()).expect("reload");
        assert_eq!(again.snapshot().topics, next.topics);
        assert_eq!(again.snapshot().cluster_id, store.snapshot().cluster_id);
    }
}
