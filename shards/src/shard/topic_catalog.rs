//! The cluster's topics as consumer-protocol groups see them ([`TopicCatalog`]): by
//! name, with their ids, partition counts and the racks of each partition's replicas.
//!
//! Invariant: the version is the metadata image's, which moves with every change of the
//! cluster metadata, so a group that saw one version has seen every topic change up to
//! it; a pattern matches every topic of the cluster, internal ones included, as Kafka's
//! group coordinator resolves patterns (`TopicRegexResolver`: every topic of the
//! metadata image; only the DESCRIBE right filters).

use crate::group::consumer::assignment::TopicId;
use crate::group::consumer::assignor::TopicSpec;
use crate::group::consumer::group::TopicCatalog;
use crate::metadata::ClusterMetadata;
use std::collections::BTreeSet;
use std::sync::Arc;

/// A catalog over one metadata snapshot.
pub struct MetadataCatalog(Arc<ClusterMetadata>);

impl MetadataCatalog {
    pub fn new(meta: Arc<ClusterMetadata>) -> MetadataCatalog {
        MetadataCatalog(meta)
    }
}

impl TopicCatalog for MetadataCatalog {
    fn version(&self) -> u64 {
        self.0.version()
    }

    fn topic(&self, name: &str) -> Option<(TopicId, TopicSpec)> {
        let t = self.0.topic(name)?;
        let mut racks: Vec<BTreeSet<String>> = t
            .partitions
            .iter()
            .map(|p| {
                p.replicas
                    .iter()
                    .filter_map(|b| self.0.broker(*b).and_then(|b| b.rack.clone()))
                    .collect()
            })
            .collect();
        if racks.iter().all(BTreeSet::is_empty) {
            racks.clear();
        }
        Some((
            t.id,
            TopicSpec {
                partitions: t.partition_count(),
                racks,
            },
        ))
    }

    fn group_configs(&self, group: &str) -> std::collections::BTreeMap<String, String> {
        self.0.group_configs.get(group).cloned().unwrap_or_default()
    }

    fn topic_names(&self) -> Vec<String> {
        self.0.topics.keys().cloned().collect()
    }
}
