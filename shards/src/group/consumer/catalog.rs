//! A [`TopicCatalog`] with no topics, for group operations that never look at topics
//! (a transactional offset commit). The catalog over the cluster metadata is the shard's
//! (`shard/topic_catalog.rs`): groups do not depend on the metadata module.

use super::assignment::TopicId;
use super::assignor::TopicSpec;
use super::group::TopicCatalog;

/// No topics: for operations that never look at them (a transactional offset commit).
pub struct NoTopics;

impl TopicCatalog for NoTopics {
    fn version(&self) -> u64 {
        0
    }

    fn topic(&self, _: &str) -> Option<(TopicId, TopicSpec)> {
        None
    }

    fn topic_names(&self) -> Vec<String> {
        Vec::new()
    }
}
