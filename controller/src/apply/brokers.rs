//! Brokers: `RegisterBroker`, `FenceBroker` and `UnfenceBroker`, `ControlledShutdown`, and
//! `AllocateProducerIds` (a block of producer ids for a registered broker).
//!
//! Each but a registration names the registration it acts for by broker id and epoch,
//! and is refused (`StaleBrokerEpoch`) unless that is the broker's current registration.
//! A registration's epoch is its log index. A new incarnation of a registered broker (a
//! restart) first fences the old registration, then registers fenced; the same
//! incarnation again (a retry) changes nothing. Every change of a broker's liveness
//! re-elects the partitions it is a replica of (`reelect`, in `leadership`); a broker in
//! controlled shutdown stays fenced until it registers again. A registration whose
//! release cannot serve the cluster's finalized feature levels is refused
//! (`features::check_registration`).

use crate::command::*;
use crate::image::{BrokerRegistration, MetadataImage};

impl MetadataImage {
    /// Registers `reg`, a registration as it starts: fenced, its epoch the log index.
    pub(super) fn register(&mut self, reg: BrokerRegistration) -> Result<(), CommandError> {
        debug_assert!(reg.fenced && !reg.shutting_down && reg.offline_dirs.is_empty());
        let id = reg.id;
        if id < 0 {
            return Err(CommandError::Invalid(format!("broker id {id} is negative")));
        }
        crate::features::check_registration(id, &self.features, reg.supported_features.as_ref())
            .map_err(CommandError::UnsupportedFeatures)?;
        if let Some(b) = self.brokers.get_mut(&id) {
            if b.incarnation == reg.incarnation {
                // A retry changes nothing, but may record the feature ranges a relay by
                // a release before feature levels dropped.
                if b.supported_features.is_none() && reg.supported_features.is_some() {
                    b.supported_features = reg.supported_features;
                }
                return Ok(());
            }
            // A restart: what it led moves away until the new incarnation catches up.
            let old_epoch = b.epoch;
            self.set_fenced(id, old_epoch, true)?;
        }
        self.brokers.insert(id, reg);
        Ok(())
    }

    /// Fences or unfences registration `id` of `epoch` and re-elects its partitions.
    /// Unfencing a registration in controlled shutdown is refused: it would let a broker
    /// that is stopping lead again (an `UnfenceBroker` decided before the shutdown can
    /// commit after it).
    pub(super) fn set_fenced(
        &mut self,
        id: i32,
        epoch: u64,
        fenced: bool,
    ) -> Result<(), CommandError> {
        match self.brokers.get_mut(&id) {
            Some(b) if b.epoch == epoch => {
                if !fenced && b.shutting_down {
                    return Err(CommandError::Invalid(format!(
                        "broker {id} is shutting down; it is unfenced only once it registers again"
                    )));
                }
                if b.fenced == fenced {
                    return Ok(());
                }
                b.fenced = fenced;
            }
            _ => return Err(CommandError::StaleBrokerEpoch(id)),
        }
        self.reelect(fenced.then_some(id), |_, p| p.replicas.contains(&id));
        Ok(())
    }

    /// Kafka's controlled shutdown: the registration is marked shutting down, then fenced
    /// (if it is not already: a fenced broker has had the fencing's effect). From here on
    /// nothing makes it active again but a new registration.
    pub(super) fn controlled_shutdown(&mut self, id: i32, epoch: u64) -> Result<(), CommandError> {
        match self.brokers.get_mut(&id) {
            Some(b) if b.epoch == epoch => b.shutting_down = true,
            _ => return Err(CommandError::StaleBrokerEpoch(id)),
        }
        self.set_fenced(id, epoch, true)?;
        debug_assert!(self
            .brokers
            .get(&id)
            .is_some_and(|b| b.fenced && !b.is_active()));
        Ok(())
    }

    pub(super) fn allocate_producer_ids(
        &mut self,
        broker: i32,
        epoch: u64,
    ) -> Result<i64, CommandError> {
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

#[cfg(test)]
mod tests {
    use super::*;
    use crate::apply::test_support::*;
    use crate::image::{Endpoint, NO_LEADER};
    use uuid::Uuid;

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
            listeners: Vec::new(),
            controller_addr: "h:2".into(),
            rack: None,
            supported_features: None,
            log_dirs: Vec::new(),
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
        // ... but records the feature ranges a relay of an older release dropped.
        let Command::RegisterBroker {
            id,
            incarnation,
            endpoint,
            listeners,
            controller_addr,
            rack,
            ..
        } = reg.clone()
        else {
            unreachable!()
        };
        let with_features = Command::RegisterBroker {
            id,
            incarnation,
            endpoint,
            listeners,
            controller_addr,
            rack,
            supported_features: Some(crate::features::supported()),
            log_dirs: Vec::new(),
        };
        let third = img.applied + 1;
        img.apply(third, &with_features);
        let b = img.broker(1).unwrap();
        assert_eq!(b.epoch, index);
        assert_eq!(b.supported_features, Some(crate::features::supported()));
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
    fn fencing_shrinks_isrs_and_moves_leaders_within_them() {
        let (mut img, _) = cluster(3);
        create(&mut img, assigned("t", vec![vec![1, 2, 3], vec![2, 1, 3]])).unwrap();
        fence(&mut img, 1, true).unwrap();
        let p = part(&img, "t", 0);
        assert_eq!((p.leader, p.isr.clone()), (2, vec![2, 3]));
        assert_eq!((p.leader_epoch, p.partition_epoch), (1, 1));
        // A follower fenced: the ISR shrinks, the leader (and its epoch) stays.
        let q = part(&img, "t", 1);
        assert_eq!((q.leader, q.isr.clone()), (2, vec![2, 3]));
        assert_eq!((q.leader_epoch, q.partition_epoch), (0, 1));
        // Unfenced, it leads nothing: it rejoins ISRs only by their leaders' AlterPartition.
        fence(&mut img, 1, false).unwrap();
        assert_eq!(part(&img, "t", 0), p);
        assert_eq!(part(&img, "t", 1), q);
        // Its leader keeps a partition even once the first replica is back in sync.
        assert_eq!(set_isr(&mut img, 2, "t", 0, &[1, 2, 3]), Ok(()));
        fence(&mut img, 3, true).unwrap();
        let p = part(&img, "t", 0);
        assert_eq!((p.leader, p.isr.clone()), (2, vec![1, 2]));
        assert_eq!((p.leader_epoch, p.partition_epoch), (1, 3));
    }

    #[test]
    fn controlled_shutdown_fences_for_good_until_the_broker_registers_again() {
        let (mut img, epochs) = cluster(3);
        create(&mut img, assigned("t", vec![vec![1, 2, 3]])).unwrap();
        create(&mut img, assigned("s", vec![vec![1]])).unwrap();
        assert_eq!(
            next(
                &mut img,
                Command::ControlledShutdown {
                    id: 1,
                    epoch: epochs[0] + 100
                }
            ),
            Outcome::Done(Err(CommandError::StaleBrokerEpoch(1)))
        );
        assert!(img.broker(1).unwrap().is_active());
        assert_eq!(shutdown(&mut img, 1), Outcome::Done(Ok(())));
        let b = img.broker(1).unwrap();
        assert!(b.fenced && b.shutting_down && !img.is_live(1));
        // Exactly fencing's effect: leadership moves, the ISR shrinks but keeps its last.
        let p = part(&img, "t", 0);
        assert_eq!(
            (p.leader, p.isr.clone(), p.leader_epoch),
            (2, vec![2, 3], 1)
        );
        let q = part(&img, "s", 0);
        assert_eq!(
            (q.leader, q.isr.clone(), q.leader_epoch),
            (NO_LEADER, vec![1], 1)
        );
        // A retry changes nothing; unfencing is refused; new replicas go elsewhere.
        let before = serde_json::to_string(&img.topics).unwrap();
        assert_eq!(shutdown(&mut img, 1), Outcome::Done(Ok(())));
        assert!(matches!(
            fence(&mut img, 1, false),
            Err(CommandError::Invalid(_))
        ));
        assert!(img.broker(1).unwrap().fenced);
        assert_eq!(serde_json::to_string(&img.topics).unwrap(), before);
        let mut t = topic("u", 1);
        t.replication_factor = 3;
        assert!(matches!(
            create(&mut img, t),
            Err(CommandError::InvalidReplicationFactor(_))
        ));
        // Named explicitly, it is a replica outside the ISR (Kafka's manual assignment);
        // alone, it cannot lead.
        assert!(matches!(
            create(&mut img, assigned("u", vec![vec![1]])),
            Err(CommandError::InvalidReplicaAssignment(_))
        ));
        create(&mut img, assigned("u", vec![vec![1, 2]])).unwrap();
        let u = part(&img, "u", 0);
        assert_eq!(
            (u.leader, u.replicas.clone(), u.isr.clone()),
            (2, vec![1, 2], vec![2])
        );
        // Not even an unclean election picks it.
        enable_unclean_cluster_wide(&mut img);
        assert_eq!(part(&img, "s", 0).leader, NO_LEADER);
        fence(&mut img, 3, true).unwrap();
        fence(&mut img, 2, true).unwrap();
        let p = part(&img, "t", 0);
        assert_eq!((p.leader, p.isr.clone()), (NO_LEADER, vec![2]));
        // A restart is a new registration: fenced until caught up, then active again.
        let epoch = register(&mut img, 1, None);
        let b = img.broker(1).unwrap();
        assert!(b.epoch == epoch && !b.shutting_down && b.is_active());
        let q = part(&img, "s", 0);
        assert_eq!((q.leader, q.isr.clone(), q.leader_epoch), (1, vec![1], 2));
        let p = part(&img, "t", 0);
        assert_eq!((p.leader, p.isr.clone()), (1, vec![1]));
    }
}
