//! Applying a command to the image: the only code that changes cluster metadata.
//!
//! Deterministic: the result depends on the image, the command and the log index alone
//! (no clock, no randomness, only ordered maps iterated), so every node that applies the
//! same log holds the same image. A command that fails a check changes nothing it failed
//! on; a command of several items applies the items that pass.
//!
//! Leadership rules (Kafka's): a partition is led by the first replica, in assignment
//! order, that is in the ISR and not fenced; when there is none the partition is offline
//! (leader -1). Fencing takes the broker out of the ISR unless it is the last member
//! (the ISR then keeps it, and the partition waits for it). Every leader change bumps the
//! leader epoch; every change of a partition bumps the partition epoch.

use crate::command::*;
use crate::image::{
    validate_topic_name, BrokerRegistration, MetadataImage, PartitionImage, TopicImage, NO_LEADER,
};
use crate::placement::{self, Candidate};
impl MetadataImage {
    /// Applies `cmd`, the entry at log index `index` (> every index applied before).
    pub fn apply(&mut self, index: u64, cmd: &Command) -> Outcome {
        debug_assert!(index > self.applied, "log indexes only grow");
        self.applied = index;
        let out = match cmd {
            Command::InitCluster { cluster_id } => {
                if self.cluster_id.is_none() && !cluster_id.is_empty() {
                    self.cluster_id = Some(cluster_id.clone());
                }
                Outcome::Done(Ok(()))
            }
            Command::RegisterBroker {
                id,
                incarnation,
                endpoint,
                controller_addr,
                rack,
            } => Outcome::Done(self.register(
                index,
                *id,
                *incarnation,
                endpoint,
                controller_addr,
                rack,
            )),
            Command::FenceBroker { id, epoch } => Outcome::Done(self.set_fenced(*id, *epoch, true)),
            Command::UnfenceBroker { id, epoch } => {
                Outcome::Done(self.set_fenced(*id, *epoch, false))
            }
            Command::CreateTopics { topics } => {
                Outcome::Items(topics.iter().map(|t| self.create_topic(t)).collect())
            }
            Command::DeleteTopics { names } => Outcome::Items(
                names
                    .iter()
                    .map(|n| match self.topics.remove(n) {
                        Some(t) => {
                            self.topic_ids.remove(&t.id);
                            Ok(())
                        }
                        None => Err(CommandError::UnknownTopic),
                    })
                    .collect(),
            ),
            Command::CreatePartitions { topics } => {
                Outcome::Items(topics.iter().map(|t| self.create_partitions(t)).collect())
            }
            Command::SetTopicConfigs { changes } => Outcome::Items(
                changes
                    .iter()
                    .map(|c| {
                        let t = self
                            .topics
                            .get_mut(&c.name)
                            .ok_or(CommandError::UnknownTopic)?;
                        if t.configs != c.from {
                            return Err(CommandError::Conflict);
                        }
                        t.configs = c.to.clone();
                        Ok(())
                    })
                    .collect(),
            ),
            Command::SetBrokerConfigs { change } => Outcome::Done(self.set_broker_configs(change)),
            Command::AlterClientQuotas { alterations } => {
                Outcome::Done(self.alter_client_quotas(alterations))
            }
            Command::AllocateProducerIds { broker, epoch } => {
                Outcome::ProducerIds(self.allocate_producer_ids(*broker, *epoch))
            }
            Command::ImportSingleNode(m) => Outcome::Done(self.import_single_node(m)),
        };
        debug_assert_eq!(self.check_invariants(), Ok(()), "after {cmd:?}");
        out
    }

    fn register(
        &mut self,
        index: u64,
        id: i32,
        incarnation: uuid::Uuid,
        endpoint: &crate::image::Endpoint,
        controller_addr: &str,
        rack: &Option<String>,
    ) -> Result<(), CommandError> {
        if id < 0 {
            return Err(CommandError::Invalid(format!("broker id {id} is negative")));
        }
        if let Some(b) = self.brokers.get(&id) {
            if b.incarnation == incarnation {
                return Ok(());
            }
            // A restart: what it led moves away until the new incarnation catches up.
            let old_epoch = b.epoch;
            self.set_fenced(id, old_epoch, true)?;
        }
        self.brokers.insert(
            id,
            BrokerRegistration {
                id,
                incarnation,
                epoch: index,
                endpoint: endpoint.clone(),
                controller_addr: controller_addr.to_string(),
                rack: rack.clone(),
                fenced: true,
            },
        );
        Ok(())
    }

    fn set_fenced(&mut self, id: i32, epoch: u64, fenced: bool) -> Result<(), CommandError> {
        match self.brokers.get_mut(&id) {
            Some(b) if b.epoch == epoch => {
                if b.fenced == fenced {
                    return Ok(());
                }
                b.fenced = fenced;
            }
            _ => return Err(CommandError::StaleBrokerEpoch(id)),
        }
        let live: Vec<i32> = self.live_brokers().map(|b| b.id).collect();
        for t in self.topics.values_mut() {
            for p in t.partitions.iter_mut().filter(|p| p.replicas.contains(&id)) {
                let mut next = p.clone();
                if fenced && next.isr.len() > 1 {
                    next.isr.retain(|r| *r != id);
                }
                next.leader = elect(&next, &live);
                change_partition(p, next);
            }
        }
        Ok(())
    }

    /// Files a new topic under its name and its id (the one place both maps grow).
    fn add_topic(&mut self, topic: TopicImage) {
        debug_assert!(
            !self.topics.contains_key(&topic.name) && !self.topic_ids.contains_key(&topic.id)
        );
        self.topic_ids.insert(topic.id, topic.name.clone());
        self.topics.insert(topic.name.clone(), topic);
    }

    fn candidates(&self) -> Vec<Candidate> {
        self.live_brokers()
            .map(|b| Candidate {
                id: b.id,
                rack: b.rack.clone(),
            })
            .collect()
    }

    /// Replica lists for `count` partitions from `first`: the explicit ones checked, or
    /// placed over the live brokers.
    fn replica_lists(
        &self,
        explicit: &Option<Vec<Vec<i32>>>,
        first: i32,
        count: i32,
        replication_factor: i32,
        seed: u64,
    ) -> Result<Vec<Vec<i32>>, CommandError> {
        if let Some(lists) = explicit {
            if i32::try_from(lists.len()).ok() != Some(count) {
                return Err(CommandError::InvalidReplicaAssignment(format!(
                    "{} replica lists for {count} partitions",
                    lists.len()
                )));
            }
            for r in lists {
                let mut sorted = r.clone();
                sorted.sort_unstable();
                sorted.dedup();
                if r.is_empty() || sorted.len() != r.len() {
                    return Err(CommandError::InvalidReplicaAssignment(format!(
                        "replica list {r:?} is empty or names a broker twice"
                    )));
                }
                if i32::try_from(r.len()).ok() != Some(replication_factor) {
                    return Err(CommandError::InvalidReplicaAssignment(format!(
                        "replica list {r:?} does not have {replication_factor} replicas"
                    )));
                }
                if let Some(b) = r.iter().find(|b| !self.is_live(**b)) {
                    return Err(CommandError::InvalidReplicaAssignment(format!(
                        "broker {b} is not a live broker of the cluster"
                    )));
                }
            }
            return Ok(lists.clone());
        }
        placement::assign(&self.candidates(), first, count, replication_factor, seed)
            .map_err(|e| CommandError::InvalidReplicationFactor(e.to_string()))
    }

    fn create_topic(&mut self, t: &NewTopic) -> Result<(), CommandError> {
        validate_topic_name(&t.name).map_err(|e| CommandError::InvalidTopicName(e.to_string()))?;
        if self.topics.contains_key(&t.name) {
            return Err(CommandError::TopicAlreadyExists);
        }
        if t.id.is_nil() || self.topic_ids.contains_key(&t.id) {
            return Err(CommandError::Invalid(format!("topic id {} is taken", t.id)));
        }
        if t.partitions < 1 || t.partitions > PARTITIONS_PER_TOPIC_MAX {
            return Err(CommandError::InvalidPartitions(format!(
                "partition count must be between 1 and {PARTITIONS_PER_TOPIC_MAX}, got {}",
                t.partitions
            )));
        }
        check_replication_factor(t.replication_factor)?;
        let lists = self.replica_lists(
            &t.assignments,
            0,
            t.partitions,
            t.replication_factor,
            seed_of(t.id),
        )?;
        self.add_topic(TopicImage {
            name: t.name.clone(),
            id: t.id,
            configs: t.configs.clone(),
            partitions: lists.into_iter().map(new_partition).collect(),
        });
        Ok(())
    }

    fn create_partitions(&mut self, np: &NewPartitions) -> Result<(), CommandError> {
        let t = self
            .topics
            .get(&np.topic)
            .ok_or(CommandError::UnknownTopic)?;
        let current = t.partition_count();
        if np.count <= current {
            return Err(CommandError::InvalidPartitions(format!(
                "topic currently has {current} partitions, which is higher than or equal to the requested {}",
                np.count
            )));
        }
        if np.count > PARTITIONS_PER_TOPIC_MAX {
            return Err(CommandError::InvalidPartitions(format!(
                "at most {PARTITIONS_PER_TOPIC_MAX} partitions per topic"
            )));
        }
        let rf = t
            .partitions
            .first()
            .map(|p| i32::try_from(p.replicas.len()).unwrap_or(i32::MAX))
            .unwrap_or(1);
        let lists = self.replica_lists(
            &np.assignments,
            current,
            np.count - current,
            rf,
            seed_of(t.id),
        )?;
        if let Some(t) = self.topics.get_mut(&np.topic) {
            t.partitions.extend(lists.into_iter().map(new_partition));
        }
        Ok(())
    }

    fn set_broker_configs(&mut self, c: &ConfigChange) -> Result<(), CommandError> {
        if !(c.name.is_empty() || c.name.parse::<i32>().is_ok_and(|id| id >= 0)) {
            return Err(CommandError::Invalid(format!(
                "broker config resource {:?} is neither \"\" nor a broker id",
                c.name
            )));
        }
        let current = self
            .broker_configs
            .get(&c.name)
            .cloned()
            .unwrap_or_default();
        if current != c.from {
            return Err(CommandError::Conflict);
        }
        if c.to.is_empty() {
            self.broker_configs.remove(&c.name);
        } else {
            self.broker_configs.insert(c.name.clone(), c.to.clone());
        }
        Ok(())
    }

    fn alter_client_quotas(
        &mut self,
        alterations: &[crate::client_quotas::QuotaAlteration],
    ) -> Result<(), CommandError> {
        if alterations.iter().any(|a| a.entity.is_empty()) {
            return Err(CommandError::Invalid(
                "a quota entity names no component".into(),
            ));
        }
        let mut next = self.client_quotas.clone();
        for a in alterations {
            next.apply(a);
        }
        // Every snapshot carries them all: bounded.
        if next.entries.len() > crate::client_quotas::QUOTA_ENTITIES_MAX {
            return Err(CommandError::PolicyViolation(format!(
                "more than {} quota entities",
                crate::client_quotas::QUOTA_ENTITIES_MAX
            )));
        }
        self.client_quotas = next;
        Ok(())
    }

    fn import_single_node(&mut self, m: &SingleNodeMetadata) -> Result<(), CommandError> {
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
                })
                .collect();
            self.add_topic(TopicImage {
                name: t.name.clone(),
                id: t.id,
                configs: t.configs.clone(),
                partitions,
            });
        }
        self.next_producer_id = self.next_producer_id.max(m.next_producer_id);
        self.client_quotas = m.client_quotas.clone();
        self.broker_configs = m.broker_configs.clone();
        Ok(())
    }

    fn allocate_producer_ids(&mut self, broker: i32, epoch: u64) -> Result<i64, CommandError> {
        if self.brokers.get(&broker).map(|b| b.epoch) != Some(epoch) {
            return Err(CommandError::StaleBrokerEpoch(broker));
        }
        let start = self.next_producer_id;
        self.next_producer_id = start
            .checked_add(PRODUCER_ID_BLOCK)
            .ok_or_else(|| CommandError::PolicyViolation("producer ids exhausted".into()))?;
        Ok(start)
    }
}

/// Replication factors this broker accepts (Kafka's "-1, the default" is resolved by the
/// proposer).
fn check_replication_factor(rf: i32) -> Result<(), CommandError> {
    if rf < 1 {
        return Err(CommandError::InvalidReplicationFactor(format!(
            "replication factor must be at least 1, got {rf}"
        )));
    }
    if rf > REPLICATION_FACTOR_MAX {
        return Err(CommandError::InvalidReplicationFactor(format!(
            "replication factor {rf} is not supported: partitions are not replicated yet (at most {REPLICATION_FACTOR_MAX})"
        )));
    }
    Ok(())
}

/// The placement seed of a topic: its id, so a topic's partitions (and those added
/// later) are placed the same way everywhere.
fn seed_of(id: uuid::Uuid) -> u64 {
    let (hi, lo) = id.as_u64_pair();
    hi ^ lo
}

fn new_partition(replicas: Vec<i32>) -> PartitionImage {
    debug_assert!(!replicas.is_empty());
    PartitionImage {
        leader: replicas.first().copied().unwrap_or(NO_LEADER),
        isr: replicas.clone(),
        replicas,
        leader_epoch: 0,
        partition_epoch: 0,
    }
}

/// The first replica, in assignment order, that is in the ISR and live.
fn elect(p: &PartitionImage, live: &[i32]) -> i32 {
    p.replicas
        .iter()
        .copied()
        .find(|r| p.isr.contains(r) && live.contains(r))
        .unwrap_or(NO_LEADER)
}

/// Replaces `p` by `next`, bumping the epochs if anything changed.
fn change_partition(p: &mut PartitionImage, mut next: PartitionImage) {
    if next == *p {
        return;
    }
    if next.leader != p.leader {
        next.leader_epoch = p.leader_epoch.saturating_add(1);
    }
    next.partition_epoch = p.partition_epoch.saturating_add(1);
    debug_assert!(next.leader_epoch >= p.leader_epoch && next.partition_epoch > p.partition_epoch);
    *p = next;
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::image::Endpoint;
    use std::collections::BTreeMap;
    use uuid::Uuid;

    fn register(img: &mut MetadataImage, id: i32, rack: Option<&str>) -> u64 {
        let index = img.applied + 1;
        let out = img.apply(
            index,
            &Command::RegisterBroker {
                id,
                incarnation: Uuid::new_v4(),
                endpoint: Endpoint {
                    host: "127.0.0.1".into(),
                    port: 9000 + id as u16,
                },
                controller_addr: format!("127.0.0.1:{}", 9100 + id),
                rack: rack.map(str::to_string),
            },
        );
        assert_eq!(out, Outcome::Done(Ok(())));
        let next = img.applied + 1;
        assert_eq!(
            img.apply(next, &Command::UnfenceBroker { id, epoch: index }),
            Outcome::Done(Ok(()))
        );
        index
    }

    fn next(img: &mut MetadataImage, cmd: Command) -> Outcome {
        let i = img.applied + 1;
        img.apply(i, &cmd)
    }

    fn topic(name: &str, partitions: i32) -> NewTopic {
        NewTopic {
            name: name.into(),
            id: Uuid::new_v4(),
            partitions,
            replication_factor: 1,
            assignments: None,
            configs: BTreeMap::new(),
        }
    }

    fn cluster(n: i32) -> (MetadataImage, Vec<u64>) {
        let mut img = MetadataImage::default();
        let epochs = (1..=n).map(|id| register(&mut img, id, None)).collect();
        (img, epochs)
    }

    #[test]
    fn topics_spread_over_live_brokers() {
        let (mut img, _) = cluster(3);
        let out = next(
            &mut img,
            Command::CreateTopics {
                topics: vec![topic("t", 30), topic("t", 1)],
            },
        );
        assert_eq!(
            out,
            Outcome::Items(vec![Ok(()), Err(CommandError::TopicAlreadyExists)])
        );
        let t = img.topic("t").unwrap();
        let mut per = BTreeMap::new();
        for p in &t.partitions {
            assert_eq!(p.replicas, p.isr);
            assert_eq!(Some(&p.leader), p.replicas.first());
            *per.entry(p.leader).or_insert(0) += 1;
        }
        assert_eq!(per.values().copied().collect::<Vec<_>>(), vec![10, 10, 10]);
        assert_eq!(img.topic_by_id(t.id).map(|t| t.name.as_str()), Some("t"));
    }

    #[test]
    fn replication_factor_checked() {
        let (mut img, _) = cluster(2);
        let mut t = topic("rf", 1);
        t.replication_factor = 2;
        assert!(matches!(
            next(&mut img, Command::CreateTopics { topics: vec![t] }),
            Outcome::Items(v) if matches!(v[0], Err(CommandError::InvalidReplicationFactor(_)))
        ));
        let mut img = MetadataImage::default();
        assert!(matches!(
            next(&mut img, Command::CreateTopics { topics: vec![topic("none", 1)] }),
            Outcome::Items(v) if matches!(v[0], Err(CommandError::InvalidReplicationFactor(_)))
        ));
        assert!(img.topics.is_empty());
    }

    #[test]
    fn fencing_moves_leaders_and_unfencing_restores_them() {
        let (mut img, epochs) = cluster(3);
        next(
            &mut img,
            Command::CreateTopics {
                topics: vec![topic("t", 6)],
            },
        );
        let led_by_2: Vec<usize> = img
            .topic("t")
            .unwrap()
            .partitions
            .iter()
            .enumerate()
            .filter(|(_, p)| p.leader == 2)
            .map(|(i, _)| i)
            .collect();
        assert_eq!(led_by_2.len(), 2);
        assert_eq!(
            next(
                &mut img,
                Command::FenceBroker {
                    id: 2,
                    epoch: epochs[1]
                }
            ),
            Outcome::Done(Ok(()))
        );
        for i in &led_by_2 {
            let p = &img.topic("t").unwrap().partitions[*i];
            // One replica: nobody else can lead; the ISR keeps its last member.
            assert_eq!(
                (p.leader, p.leader_epoch, p.partition_epoch),
                (NO_LEADER, 1, 1)
            );
            assert_eq!(p.isr, vec![2]);
        }
        // Fencing twice changes nothing; a stale epoch is refused.
        next(
            &mut img,
            Command::FenceBroker {
                id: 2,
                epoch: epochs[1],
            },
        );
        assert_eq!(
            img.topic("t").unwrap().partitions[led_by_2[0]].leader_epoch,
            1
        );
        assert_eq!(
            next(
                &mut img,
                Command::UnfenceBroker {
                    id: 2,
                    epoch: epochs[1] + 100
                }
            ),
            Outcome::Done(Err(CommandError::StaleBrokerEpoch(2)))
        );
        next(
            &mut img,
            Command::UnfenceBroker {
                id: 2,
                epoch: epochs[1],
            },
        );
        for i in &led_by_2 {
            let p = &img.topic("t").unwrap().partitions[*i];
            assert_eq!((p.leader, p.leader_epoch, p.partition_epoch), (2, 2, 2));
        }
        // New topics avoid a fenced broker.
        next(
            &mut img,
            Command::FenceBroker {
                id: 2,
                epoch: epochs[1],
            },
        );
        next(
            &mut img,
            Command::CreateTopics {
                topics: vec![topic("u", 10)],
            },
        );
        assert!(img
            .topic("u")
            .unwrap()
            .partitions
            .iter()
            .all(|p| p.leader != 2));
    }

    #[test]
    fn a_restart_is_a_new_registration() {
        let (mut img, epochs) = cluster(2);
        next(
            &mut img,
            Command::CreateTopics {
                topics: vec![topic("t", 2)],
            },
        );
        let index = img.applied + 1;
        let reg = Command::RegisterBroker {
            id: 1,
            incarnation: Uuid::new_v4(),
            endpoint: Endpoint {
                host: "h".into(),
                port: 1,
            },
            controller_addr: "h:2".into(),
            rack: None,
        };
        img.apply(index, &reg);
        let b = img.broker(1).unwrap();
        assert!(b.fenced && b.epoch == index && b.epoch != epochs[0]);
        assert!(img
            .topic("t")
            .unwrap()
            .partitions
            .iter()
            .all(|p| p.leader != 1));
        // The same incarnation again (a retry) is no new registration.
        let again = img.applied + 1;
        img.apply(again, &reg);
        assert_eq!(img.broker(1).unwrap().epoch, index);
        assert_eq!(
            next(
                &mut img,
                Command::AllocateProducerIds {
                    broker: 1,
                    epoch: epochs[0]
                }
            ),
            Outcome::ProducerIds(Err(CommandError::StaleBrokerEpoch(1)))
        );
        assert_eq!(
            next(
                &mut img,
                Command::AllocateProducerIds {
                    broker: 1,
                    epoch: index
                }
            ),
            Outcome::ProducerIds(Ok(0))
        );
        assert_eq!(
            next(
                &mut img,
                Command::AllocateProducerIds {
                    broker: 2,
                    epoch: epochs[1]
                }
            ),
            Outcome::ProducerIds(Ok(PRODUCER_ID_BLOCK))
        );
    }

    #[test]
    fn partitions_grow_configs_compare_and_set_topics_delete() {
        let (mut img, _) = cluster(3);
        next(
            &mut img,
            Command::CreateTopics {
                topics: vec![topic("t", 2)],
            },
        );
        let grow = |count| Command::CreatePartitions {
            topics: vec![NewPartitions {
                topic: "t".into(),
                count,
                assignments: None,
            }],
        };
        assert!(
            matches!(next(&mut img, grow(2)), Outcome::Items(v) if matches!(v[0], Err(CommandError::InvalidPartitions(_))))
        );
        assert_eq!(next(&mut img, grow(9)), Outcome::Items(vec![Ok(())]));
        assert_eq!(img.topic("t").unwrap().partition_count(), 9);
        let set = |from: &[(&str, &str)], to: &[(&str, &str)]| Command::SetTopicConfigs {
            changes: vec![ConfigChange {
                name: "t".into(),
                from: from
                    .iter()
                    .map(|(k, v)| (k.to_string(), v.to_string()))
                    .collect(),
                to: to
                    .iter()
                    .map(|(k, v)| (k.to_string(), v.to_string()))
                    .collect(),
            }],
        };
        assert_eq!(
            next(&mut img, set(&[], &[("retention.ms", "1")])),
            Outcome::Items(vec![Ok(())])
        );
        // Computed from what is no longer there: refused, so nothing is lost.
        assert_eq!(
            next(&mut img, set(&[], &[("segment.ms", "5")])),
            Outcome::Items(vec![Err(CommandError::Conflict)])
        );
        assert_eq!(
            img.topic("t")
                .unwrap()
                .configs
                .get("retention.ms")
                .map(String::as_str),
            Some("1")
        );
        assert_eq!(
            next(
                &mut img,
                Command::DeleteTopics {
                    names: vec!["t".into(), "t".into()]
                }
            ),
            Outcome::Items(vec![Ok(()), Err(CommandError::UnknownTopic)])
        );
        assert!(img.topics.is_empty() && img.topic_ids.is_empty());
    }

    #[test]
    fn explicit_assignments_are_checked() {
        let (mut img, _) = cluster(2);
        let mut t = topic("a", 2);
        t.assignments = Some(vec![vec![2], vec![1]]);
        assert_eq!(
            next(&mut img, Command::CreateTopics { topics: vec![t] }),
            Outcome::Items(vec![Ok(())])
        );
        assert_eq!(img.topic("a").unwrap().partitions[0].leader, 2);
        for bad in [vec![vec![7], vec![1]], vec![vec![1]], vec![vec![], vec![1]]] {
            let mut t = topic("b", 2);
            t.assignments = Some(bad);
            assert!(matches!(
                next(&mut img, Command::CreateTopics { topics: vec![t] }),
                Outcome::Items(v) if matches!(v[0], Err(CommandError::InvalidReplicaAssignment(_)))
            ));
        }
    }

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

    #[test]
    fn same_log_same_image() {
        let log: Vec<Command> = {
            let mut v = Vec::new();
            for id in 1..=3 {
                v.push(Command::RegisterBroker {
                    id,
                    incarnation: Uuid::from_u128(id as u128),
                    endpoint: Endpoint {
                        host: "h".into(),
                        port: id as u16,
                    },
                    controller_addr: String::new(),
                    rack: Some(format!("r{}", id % 2)),
                });
            }
            for (i, id) in (1..=3).enumerate() {
                v.push(Command::UnfenceBroker {
                    id,
                    epoch: i as u64 + 1,
                });
            }
            for k in 0..5 {
                let mut t = topic(&format!("t{k}"), 7);
                t.id = Uuid::from_u128(1000 + k);
                v.push(Command::CreateTopics { topics: vec![t] });
            }
            v.push(Command::FenceBroker { id: 3, epoch: 3 });
            v
        };
        let run = || {
            let mut img = MetadataImage::default();
            for (i, c) in log.iter().enumerate() {
                img.apply(i as u64 + 1, c);
            }
            serde_json::to_string(&img).unwrap()
        };
        assert_eq!(run(), run());
    }
}
