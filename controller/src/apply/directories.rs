//! Log directories (KIP-858): `AssignReplicasToDirs`, a broker saying which of its
//! directories each of its replicas lives in, and `LogDirsOffline`, a broker saying that
//! directories of its failed.
//!
//! A replica is served from its directory only while that directory is online on its
//! broker: one the broker registered (a restart with a disk replaced registers the new
//! disk's id, not the old one's) and has not reported failed since
//! (`BrokerRegistration::has_online`). A replica on a directory that is not is an
//! offline replica: it neither leads nor joins the ISR (`image::can_serve`, which every
//! election uses), and failing a directory takes the broker out of the ISRs of the
//! partitions it holds there unless it is the last member, as fencing does. An
//! assignment names one of the broker's online directories, of the broker's current
//! registration, for a partition it is a replica of; an assignment that brings a replica
//! back online re-elects its partition (it may have been waiting for it).

use super::leadership::{change_partition, settle};
use crate::command::*;
use crate::image::{live_for, MetadataImage};
use uuid::Uuid;

impl MetadataImage {
    /// One assignment of an `AssignReplicasToDirs`.
    pub(super) fn assign_dir(
        &mut self,
        broker: i32,
        broker_epoch: u64,
        a: &DirAssignment,
    ) -> Result<(), CommandError> {
        let b = self
            .brokers
            .get(&broker)
            .filter(|b| b.epoch == broker_epoch)
            .ok_or(CommandError::StaleBrokerEpoch(broker))?;
        if !b.log_dirs.contains(&a.dir) || b.offline_dirs.contains(&a.dir) {
            return Err(CommandError::LogDirNotFound(a.dir));
        }
        let name = self
            .topic_ids
            .get(&a.topic_id)
            .ok_or(CommandError::UnknownTopicId)?
            .clone();
        let p = self
            .topics
            .get(&name)
            .and_then(|t| t.partition(a.partition))
            .ok_or(CommandError::UnknownTopicOrPartition)?;
        if !p.replicas.contains(&broker) {
            return Err(CommandError::NotLeaderOrFollower);
        }
        if p.directories.get(&broker) == Some(&a.dir) {
            return Ok(());
        }
        let mut next = p.clone();
        next.directories.insert(broker, a.dir);
        let live = live_for(&self.brokers, &next);
        settle(&mut next, &live, self.unclean_leader_election_of(&name));
        if let Some(p) = self.partition_mut(&name, a.partition) {
            change_partition(p, next);
        }
        Ok(())
    }

    /// `LogDirsOffline`: `dirs` of registration `broker`/`broker_epoch` failed.
    pub(super) fn dirs_offline(
        &mut self,
        broker: i32,
        broker_epoch: u64,
        dirs: &[Uuid],
    ) -> Result<(), CommandError> {
        let b = self
            .brokers
            .get_mut(&broker)
            .filter(|b| b.epoch == broker_epoch)
            .ok_or(CommandError::StaleBrokerEpoch(broker))?;
        if let Some(d) = dirs.iter().find(|d| !b.log_dirs.contains(d)) {
            return Err(CommandError::LogDirNotFound(*d));
        }
        let failed: Vec<Uuid> = dirs
            .iter()
            .copied()
            .filter(|d| b.offline_dirs.insert(*d))
            .collect();
        if failed.is_empty() {
            return Ok(());
        }
        self.reelect(Some(broker), |_, p| {
            p.directories
                .get(&broker)
                .is_some_and(|d| failed.contains(d))
        });
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::apply::test_support::*;
    use crate::image::{is_offline_replica, NO_LEADER};

    /// Registers broker `id` again (a restart) with directories `dirs`, unfenced;
    /// returns the new epoch.
    fn restart_with(img: &mut MetadataImage, id: i32, dirs: &[Uuid]) -> u64 {
        let epoch = register_with_dirs(img, id, None, dirs);
        assert_eq!(img.check_invariants(), Ok(()));
        epoch
    }

    fn assign(
        img: &mut MetadataImage,
        broker: i32,
        epoch: u64,
        name: &str,
        p: i32,
        dir: Uuid,
    ) -> Result<(), CommandError> {
        let topic_id = img.topic(name).unwrap().id;
        match next(
            img,
            Command::AssignReplicasToDirs {
                broker,
                broker_epoch: epoch,
                assignments: vec![DirAssignment {
                    topic_id,
                    partition: p,
                    dir,
                }],
            },
        ) {
            Outcome::Items(mut v) if v.len() == 1 => v.remove(0),
            other => panic!("{other:?}"),
        }
    }

    fn offline(img: &mut MetadataImage, broker: i32, epoch: u64, dirs: &[Uuid]) -> Outcome {
        next(
            img,
            Command::LogDirsOffline {
                broker,
                broker_epoch: epoch,
                dirs: dirs.to_vec(),
            },
        )
    }

    #[test]
    fn a_failed_directory_takes_only_its_own_partitions() {
        let (mut img, _) = cluster(3);
        let (a, b) = (Uuid::from_u128(0xa), Uuid::from_u128(0xb));
        let epoch = restart_with(&mut img, 1, &[a, b]);
        create(&mut img, assigned("t", vec![vec![1, 2, 3], vec![1, 2, 3]])).unwrap();
        assert_eq!(assign(&mut img, 1, epoch, "t", 0, a), Ok(()));
        assert_eq!(assign(&mut img, 1, epoch, "t", 1, b), Ok(()));
        assert_eq!(part(&img, "t", 0).directories.get(&1), Some(&a));
        assert_eq!(
            (part(&img, "t", 0).leader, part(&img, "t", 1).leader),
            (1, 1)
        );

        let before = part(&img, "t", 1).clone();
        assert_eq!(offline(&mut img, 1, epoch, &[a]), Outcome::Done(Ok(())));
        let p0 = part(&img, "t", 0);
        assert_eq!(
            (p0.leader, p0.isr.clone()),
            (2, vec![2, 3]),
            "led elsewhere, out of the ISR"
        );
        assert!(is_offline_replica(&img.brokers, &p0, 1));
        assert_eq!(
            part(&img, "t", 1),
            before,
            "the other disk's partition is untouched"
        );
        // Again: nothing more changes; an unknown directory is refused.
        let applied = img.clone();
        assert_eq!(offline(&mut img, 1, epoch, &[a]), Outcome::Done(Ok(())));
        assert_eq!(img.topics, applied.topics);
        assert_eq!(
            offline(&mut img, 1, epoch, &[Uuid::from_u128(0xc)]),
            Outcome::Done(Err(CommandError::LogDirNotFound(Uuid::from_u128(0xc))))
        );
        assert_eq!(
            offline(&mut img, 1, epoch - 1, &[a]),
            Outcome::Done(Err(CommandError::StaleBrokerEpoch(1)))
        );
        // The ISR refuses it back while its directory is offline, and it cannot be
        // assigned to the failed directory again.
        assert_eq!(
            set_isr(&mut img, 2, "t", 0, &[1, 2, 3]),
            Err(CommandError::IneligibleReplica(1))
        );
        assert_eq!(
            assign(&mut img, 1, epoch, "t", 0, a),
            Err(CommandError::LogDirNotFound(a))
        );
    }

    #[test]
    fn a_replaced_disk_keeps_its_replicas_out_until_they_are_made_again() {
        let (mut img, _) = cluster(2);
        let (a, b, c) = (
            Uuid::from_u128(0xa),
            Uuid::from_u128(0xb),
            Uuid::from_u128(0xc),
        );
        let epoch = restart_with(&mut img, 1, &[a, b]);
        create(&mut img, assigned("t", vec![vec![1, 2]])).unwrap();
        assign(&mut img, 1, epoch, "t", 0, b).unwrap();
        // Broker 1 comes back with disk b replaced by c: its replica on b is offline,
        // so 2 leads and 1 stays out of the ISR.
        let epoch = restart_with(&mut img, 1, &[a, c]);
        let p = part(&img, "t", 0);
        assert_eq!((p.leader, p.isr.clone()), (2, vec![2]));
        assert!(is_offline_replica(&img.brokers, &p, 1));
        assert_eq!(
            set_isr(&mut img, 2, "t", 0, &[1, 2]),
            Err(CommandError::IneligibleReplica(1))
        );
        // It makes the replica again on c: a follower that may rejoin the ISR.
        assign(&mut img, 1, epoch, "t", 0, c).unwrap();
        assert!(!is_offline_replica(&img.brokers, &part(&img, "t", 0), 1));
        assert_eq!(set_isr(&mut img, 2, "t", 0, &[1, 2]), Ok(()));
        assert_eq!(part(&img, "t", 0).leader, 2, "an expansion moves no leader");
    }

    #[test]
    fn a_partition_waiting_for_its_only_replica_is_led_once_it_is_placed_again() {
        let (mut img, _) = cluster(1);
        let (a, b) = (Uuid::from_u128(0xa), Uuid::from_u128(0xb));
        let epoch = restart_with(&mut img, 1, &[a]);
        create(&mut img, assigned("t", vec![vec![1]])).unwrap();
        assign(&mut img, 1, epoch, "t", 0, a).unwrap();
        assert_eq!(offline(&mut img, 1, epoch, &[a]), Outcome::Done(Ok(())));
        assert_eq!(part(&img, "t", 0).leader, NO_LEADER);
        assert_eq!(part(&img, "t", 0).isr, vec![1], "the last member stays");
        let epoch = restart_with(&mut img, 1, &[b]);
        assert_eq!(part(&img, "t", 0).leader, NO_LEADER);
        assign(&mut img, 1, epoch, "t", 0, b).unwrap();
        assert_eq!(part(&img, "t", 0).leader, 1);
    }

    #[test]
    fn assignments_are_checked_and_leave_with_the_replica() {
        let (mut img, epochs) = cluster(3);
        let a = Uuid::from_u128(0xa);
        assert_eq!(
            {
                create(&mut img, assigned("t", vec![vec![1, 2]])).unwrap();
                assign(&mut img, 1, epochs[0], "t", 0, a)
            },
            Err(CommandError::LogDirNotFound(a)),
            "broker 1 registered no directories"
        );
        let epoch = restart_with(&mut img, 3, &[a]);
        assert_eq!(
            assign(&mut img, 3, epoch, "t", 0, a),
            Err(CommandError::NotLeaderOrFollower)
        );
        assert_eq!(
            assign(&mut img, 3, epoch, "t", 9, a),
            Err(CommandError::UnknownTopicOrPartition)
        );
        reassign(&mut img, "t", 0, Some(vec![2, 3])).unwrap();
        assert_eq!(assign(&mut img, 3, epoch, "t", 0, a), Ok(()));
        assert_eq!(part(&img, "t", 0).directories.get(&3), Some(&a));
        // The move is cancelled: 3 is no replica, and its directory goes with it.
        reassign(&mut img, "t", 0, None).unwrap();
        assert!(part(&img, "t", 0).directories.is_empty());
    }
}
