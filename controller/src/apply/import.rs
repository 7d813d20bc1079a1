//! Import: `ImportSingleNode`, a single-node broker's topics, producer ids, client quotas
//! and broker configs brought into a new cluster.
//!
//! Only into a cluster without topics, from a live broker, and all or nothing: every
//! topic is checked (its name, its partition count, its epoch, its name and id named once)
//! before any is filed. Each partition then has that broker as its only replica and
//! leader, in a leader epoch one past the topic's.

use crate::command::*;
use crate::image::{validate_topic_name, MetadataImage, PartitionImage, TopicImage};
use std::collections::BTreeMap;

impl MetadataImage {
    pub(super) fn import_single_node(
        &mut self,
        m: &SingleNodeMetadata,
    ) -> Result<(), CommandError> {
        if !self.topics.is_empty() {
            return Err(CommandError::Invalid(
                "the cluster has topics already; a single node's metadata is imported only into a new cluster".into(),
            ));
        }
        if !self.is_live(m.broker) {
            return Err(CommandError::Invalid(format!(
                "broker {} is not live",
                m.broker
            )));
        }
        let mut names = std::collections::BTreeSet::new();
        let mut ids = std::collections::BTreeSet::new();
        for t in &m.topics {
            validate_topic_name(&t.name)
                .map_err(|e| CommandError::InvalidTopicName(e.to_string()))?;
            if !(1..=PARTITIONS_PER_TOPIC_MAX).contains(&t.partitions) || t.leader_epoch < 0 {
                return Err(CommandError::Invalid(format!(
                    "topic {}: {} partitions, epoch {}",
                    t.name, t.partitions, t.leader_epoch
                )));
            }
            if t.id.is_nil() || !names.insert(t.name.as_str()) || !ids.insert(t.id) {
                return Err(CommandError::Invalid(format!(
                    "topic {} or its id named twice",
                    t.name
                )));
            }
        }
        for t in &m.topics {
            let epoch = t.leader_epoch.saturating_add(1);
            let partitions = (0..t.partitions)
                .map(|_| PartitionImage {
                    replicas: vec![m.broker],
                    isr: vec![m.broker],
                    leader: m.broker,
                    leader_epoch: epoch,
                    partition_epoch: 0,
                    adding: Vec::new(),
                    removing: Vec::new(),
                    directories: Default::default(),
                })
                .collect();
            self.add_topic(TopicImage {
                name: t.name.clone(),
                id: t.id,
                configs: t.configs.clone(),
                partitions,
                balancer_moves: BTreeMap::new(),
            });
        }
        self.next_producer_id = self.next_producer_id.max(m.next_producer_id);
        self.client_quotas = m.client_quotas.clone();
        self.broker_configs = m.broker_configs.clone();
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::apply::test_support::*;
    use uuid::Uuid;

    #[test]
    fn a_single_nodes_metadata_is_imported_once() {
        let (mut img, _) = cluster(1);
        let import = Command::ImportSingleNode(SingleNodeMetadata {
            broker: 1,
            topics: vec![SingleNodeTopic {
                name: "old".into(),
                id: Uuid::from_u128(5),
                partitions: 3,
                configs: BTreeMap::from([("retention.ms".into(), "9".into())]),
                leader_epoch: 4,
            }],
            next_producer_id: 3000,
            client_quotas: Default::default(),
            broker_configs: BTreeMap::new(),
        });
        assert_eq!(next(&mut img, import.clone()), Outcome::Done(Ok(())));
        let t = img.topic("old").unwrap();
        assert_eq!(t.partition_count(), 3);
        assert!(t
            .partitions
            .iter()
            .all(|p| p.leader == 1 && p.leader_epoch == 5));
        assert_eq!(img.next_producer_id, 3000);
        assert!(matches!(
            next(&mut img, import),
            Outcome::Done(Err(CommandError::Invalid(_)))
        ));
    }
}
