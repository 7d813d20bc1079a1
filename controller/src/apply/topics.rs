//! Topics and partitions: `CreateTopics`, `CreatePartitions` and `DeleteTopics`, and the
//! making of new partitions.
//!
//! A topic is filed under its name and its id together (`add_topic`, also used by
//! `import`) and deleted from both together. A topic has between 1 and
//! `PARTITIONS_PER_TOPIC_MAX` partitions, and its partition count only grows. New
//! partitions follow explicit replica lists, checked as Kafka's
//! `validateManualPartitionAssignment` checks them (the ISR: the listed replicas that are
//! active, led by the first), or else are placed over the live brokers not being
//! decommissioned, seeded by the topic's id so every node places them alike (the ISR:
//! every replica, led by the first).

use crate::command::*;
use crate::image::{validate_topic_name, MetadataImage, PartitionImage, TopicImage, NO_LEADER};
use crate::placement::{self, Candidate};
use std::collections::BTreeMap;

impl MetadataImage {
    /// Files a new topic under its name and its id (the one place both maps grow).
    pub(super) fn add_topic(&mut self, topic: TopicImage) {
        debug_assert!(
            !self.topics.contains_key(&topic.name) && !self.topic_ids.contains_key(&topic.id)
        );
        self.topic_ids.insert(topic.id, topic.name.clone());
        self.topics.insert(topic.name.clone(), topic);
    }

    /// The brokers new replicas may go to: live and not being decommissioned.
    fn candidates(&self) -> Vec<Candidate> {
        let draining = self.draining_brokers();
        self.live_brokers()
            .filter(|b| !draining.contains(&b.id))
            .map(|b| Candidate {
                id: b.id,
                rack: b.rack.clone(),
            })
            .collect()
    }

    /// `count` new partitions from `first`: the explicit replica lists checked as
    /// Kafka's `validateManualPartitionAssignment` checks them, or placed over the live
    /// brokers.
    fn new_partitions(
        &self,
        explicit: &Option<Vec<Vec<i32>>>,
        first: i32,
        count: i32,
        replication_factor: i32,
        seed: u64,
    ) -> Result<Vec<PartitionImage>, CommandError> {
        if let Some(lists) = explicit {
            if i32::try_from(lists.len()).ok() != Some(count) {
                return Err(CommandError::InvalidReplicaAssignment(format!(
                    "Attempted to add {count} additional partition(s), but only {} assignment(s) were specified.",
                    lists.len()
                )));
            }
            let mut expected = usize::try_from(replication_factor)
                .ok()
                .filter(|rf| *rf > 0);
            let mut out = Vec::with_capacity(lists.len());
            for (i, replicas) in lists.iter().enumerate() {
                let partition = first.saturating_add(i32::try_from(i).unwrap_or(i32::MAX));
                out.push(self.manual_partition(replicas, expected, partition)?);
                expected.get_or_insert(replicas.len());
            }
            return Ok(out);
        }
        let lists = placement::assign(&self.candidates(), first, count, replication_factor, seed)
            .map_err(|e| CommandError::InvalidReplicationFactor(e.to_string()))?;
        Ok(lists.into_iter().map(new_partition).collect())
    }

    /// One partition of a manual assignment, Kafka's checks in order: a replica list that
    /// is not empty; each broker (in id order) registered and named once; as many
    /// replicas as `expected` (the topic's replication factor, or the first list's
    /// length); and at least one active replica. A fenced replica is allowed and left out
    /// of the ISR until its leader proposes it, as in Kafka; the leader is the first
    /// active one.
    fn manual_partition(
        &self,
        replicas: &[i32],
        expected: Option<usize>,
        partition: i32,
    ) -> Result<PartitionImage, CommandError> {
        let refuse = |m: String| Err(CommandError::InvalidReplicaAssignment(m));
        if replicas.is_empty() {
            return refuse(
                "The manual partition assignment includes an empty replica list.".into(),
            );
        }
        let mut sorted = replicas.to_vec();
        sorted.sort_unstable();
        for (i, b) in sorted.iter().enumerate() {
            if !self.brokers.contains_key(b) {
                return refuse(format!(
                    "The manual partition assignment includes broker {b}, but no such broker is registered."
                ));
            }
            if i > 0 && sorted[i - 1] == *b {
                return refuse(format!(
                    "The manual partition assignment includes the broker {b} more than once."
                ));
            }
        }
        if let Some(rf) = expected.filter(|rf| *rf != replicas.len()) {
            return refuse(format!(
                "The manual partition assignment includes a partition with {} replica(s), but this is not consistent with previous partitions, which have {rf} replica(s).",
                replicas.len()
            ));
        }
        let isr: Vec<i32> = replicas
            .iter()
            .copied()
            .filter(|b| self.is_live(*b))
            .collect();
        let Some(&leader) = isr.first() else {
            return refuse(format!(
                "All brokers specified in the manual partition assignment for partition {partition} are fenced or in controlled shutdown."
            ));
        };
        Ok(PartitionImage {
            leader,
            isr,
            ..new_partition(replicas.to_vec())
        })
    }

    pub(super) fn create_topic(&mut self, t: &NewTopic) -> Result<(), CommandError> {
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
        if t.assignments.is_none() {
            check_replication_factor(t.replication_factor)?;
        }
        let partitions = self.new_partitions(
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
            partitions,
            balancer_moves: BTreeMap::new(),
        });
        Ok(())
    }

    pub(super) fn create_partitions(&mut self, np: &NewPartitions) -> Result<(), CommandError> {
        let t = self
            .topics
            .get(&np.topic)
            .ok_or(CommandError::UnknownTopic)?;
        let current = t.partition_count();
        if np.count == current {
            return Err(CommandError::InvalidPartitions(format!(
                "Topic already has {current} partition(s)."
            )));
        }
        if np.count < current {
            return Err(CommandError::InvalidPartitions(format!(
                "The topic {} currently has {current} partition(s); {} would not be an increase.",
                np.topic, np.count
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
            // The target's size: a partition being moved also lists the replicas it loses.
            .map(|p| i32::try_from(p.target().len()).unwrap_or(i32::MAX))
            .unwrap_or(1);
        let added = self.new_partitions(
            &np.assignments,
            current,
            np.count - current,
            rf,
            seed_of(t.id),
        )?;
        if let Some(t) = self.topics.get_mut(&np.topic) {
            t.partitions.extend(added);
        }
        Ok(())
    }

    /// Deletes topic `name` from both maps it is filed in.
    pub(super) fn delete_topic(&mut self, name: &str) -> Result<(), CommandError> {
        match self.topics.remove(name) {
            Some(t) => {
                self.topic_ids.remove(&t.id);
                Ok(())
            }
            None => Err(CommandError::UnknownTopic),
        }
    }
}

/// Replication factors this broker accepts (Kafka's "-1, the default" is resolved by the
/// proposer). The upper bound is the live brokers: placement and the explicit
/// assignments' checks refuse more replicas than there are.
fn check_replication_factor(rf: i32) -> Result<(), CommandError> {
    if rf < 1 {
        return Err(CommandError::InvalidReplicationFactor(format!(
            "replication factor must be at least 1, got {rf}"
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

pub(super) fn new_partition(replicas: Vec<i32>) -> PartitionImage {
    debug_assert!(!replicas.is_empty());
    PartitionImage {
        leader: replicas.first().copied().unwrap_or(NO_LEADER),
        isr: replicas.clone(),
        replicas,
        leader_epoch: 0,
        partition_epoch: 0,
        adding: Vec::new(),
        removing: Vec::new(),
        directories: BTreeMap::new(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::apply::test_support::*;

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
        t.replication_factor = 3;
        assert!(matches!(
            create(&mut img, t),
            Err(CommandError::InvalidReplicationFactor(_))
        ));
        let mut t = topic("rf", 1);
        t.replication_factor = 0;
        assert!(matches!(
            create(&mut img, t),
            Err(CommandError::InvalidReplicationFactor(_))
        ));
        let mut t = topic("rf", 1);
        t.replication_factor = 2;
        assert_eq!(create(&mut img, t), Ok(()));
        // Only live brokers count: with one fenced, two replicas no longer fit.
        fence(&mut img, 2, true).unwrap();
        let mut t = topic("rf2", 1);
        t.replication_factor = 2;
        assert!(matches!(
            create(&mut img, t),
            Err(CommandError::InvalidReplicationFactor(_))
        ));
        let mut img = MetadataImage::default();
        assert!(matches!(
            next(&mut img, Command::CreateTopics { topics: vec![topic("none", 1)] }),
            Outcome::Items(v) if matches!(v[0], Err(CommandError::InvalidReplicationFactor(_)))
        ));
        assert!(img.topics.is_empty());
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
    fn replicated_partitions_start_with_every_replica_in_sync() {
        let (mut img, _) = cluster(3);
        let mut t = topic("r", 12);
        t.replication_factor = 3;
        assert_eq!(create(&mut img, t), Ok(()));
        let mut leaders = BTreeMap::new();
        for p in &img.topic("r").unwrap().partitions {
            let mut distinct = p.replicas.clone();
            distinct.sort_unstable();
            assert_eq!(distinct, vec![1, 2, 3]);
            assert_eq!(p.isr, p.replicas);
            assert_eq!(Some(&p.leader), p.replicas.first());
            assert_eq!((p.leader_epoch, p.partition_epoch), (0, 0));
            *leaders.entry(p.leader).or_insert(0) += 1;
        }
        assert_eq!(leaders.values().copied().collect::<Vec<_>>(), vec![4, 4, 4]);
        // Explicit lists of several replicas, and more partitions like them.
        assert_eq!(
            create(&mut img, assigned("a", vec![vec![3, 1], vec![2, 3]])),
            Ok(())
        );
        let p = part(&img, "a", 0);
        assert_eq!((p.leader, p.isr.clone()), (3, vec![3, 1]));
        let grow = |assignments| Command::CreatePartitions {
            topics: vec![NewPartitions {
                topic: "a".into(),
                count: 3,
                assignments: Some(assignments),
            }],
        };
        assert!(matches!(
            next(&mut img, grow(vec![vec![1]])),
            Outcome::Items(v) if matches!(v[0], Err(CommandError::InvalidReplicaAssignment(_)))
        ));
        assert_eq!(
            next(&mut img, grow(vec![vec![1, 2]])),
            Outcome::Items(vec![Ok(())])
        );
        let p = part(&img, "a", 2);
        assert_eq!((p.leader, p.isr.clone()), (1, vec![1, 2]));
    }

    /// Kafka's `validateManualPartitionAssignment`: the first failing check answers, in
    /// its order; a fenced replica is allowed outside the ISR, but not every replica.
    #[test]
    fn manual_assignments_are_checked_as_kafka_checks_them() {
        let (mut img, _) = cluster(3);
        let refusal = |img: &mut MetadataImage, lists: Vec<Vec<i32>>| match create(
            img,
            NewTopic {
                replication_factor: -1,
                ..assigned("m", lists)
            },
        ) {
            Err(CommandError::InvalidReplicaAssignment(m)) => m,
            other => panic!("{other:?}"),
        };
        assert_eq!(
            refusal(&mut img, vec![vec![]]),
            "The manual partition assignment includes an empty replica list."
        );
        // Brokers in id order: 9 is unknown before 2 is repeated.
        assert_eq!(
            refusal(&mut img, vec![vec![9, 2, 2]]),
            "The manual partition assignment includes the broker 2 more than once."
        );
        assert_eq!(
            refusal(&mut img, vec![vec![2, 9]]),
            "The manual partition assignment includes broker 9, but no such broker is registered."
        );
        assert_eq!(
            refusal(&mut img, vec![vec![1, 2], vec![3]]),
            "The manual partition assignment includes a partition with 1 replica(s), but this is not consistent with previous partitions, which have 2 replica(s)."
        );
        fence(&mut img, 1, true).unwrap();
        fence(&mut img, 2, true).unwrap();
        assert_eq!(
            refusal(&mut img, vec![vec![3], vec![2]]),
            "All brokers specified in the manual partition assignment for partition 1 are fenced or in controlled shutdown."
        );
        create(&mut img, assigned("m", vec![vec![1, 3, 2]])).unwrap();
        let p = part(&img, "m", 0);
        assert_eq!(
            (p.leader, p.replicas.clone(), p.isr.clone()),
            (3, vec![1, 3, 2], vec![3])
        );
        let grow = |count, assignments| Command::CreatePartitions {
            topics: vec![NewPartitions {
                topic: "m".into(),
                count,
                assignments,
            }],
        };
        let answer = |o: Outcome| match o {
            Outcome::Items(mut v) => v.remove(0),
            other => panic!("{other:?}"),
        };
        assert_eq!(
            answer(next(&mut img, grow(1, None))),
            Err(CommandError::InvalidPartitions(
                "Topic already has 1 partition(s).".into()
            ))
        );
        assert_eq!(
            answer(next(&mut img, grow(3, Some(vec![vec![3, 2, 1]])))),
            Err(CommandError::InvalidReplicaAssignment(
                "Attempted to add 2 additional partition(s), but only 1 assignment(s) were specified.".into()
            ))
        );
        assert!(answer(next(&mut img, grow(2, Some(vec![vec![3, 2]])))).is_err());
        assert_eq!(
            answer(next(&mut img, grow(2, Some(vec![vec![2, 1, 3]])))),
            Ok(())
        );
        let p = part(&img, "m", 1);
        assert_eq!((p.leader, p.isr.clone()), (3, vec![3]));
    }

    #[test]
    fn new_partitions_of_a_topic_being_moved_get_its_target_replication_factor() {
        let (mut img, _) = cluster(3);
        create(&mut img, assigned("t", vec![vec![1, 2]])).unwrap();
        reassign(&mut img, "t", 0, Some(vec![3])).unwrap();
        assert_eq!(
            part(&img, "t", 0).replicas.len(),
            3,
            "target and removed together"
        );
        let grow = Command::CreatePartitions {
            topics: vec![NewPartitions {
                topic: "t".into(),
                count: 2,
                assignments: None,
            }],
        };
        assert_eq!(next(&mut img, grow), Outcome::Items(vec![Ok(())]));
        assert_eq!(part(&img, "t", 1).replicas.len(), 1);
    }
}
