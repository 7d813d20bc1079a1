//! ISR changes: `AlterPartition`, a partition leader's proposals of a new ISR.
//!
//! A change is applied only if it passes Kafka's checks, in order
//! (`isr_change_refusal`, which the active controller also asks before proposing one):
//! the proposer is an active registration of the epoch it names and leads the partition
//! in the leader and partition epochs the change was computed from, and the ISR is well
//! formed, keeps the leader and adds only active brokers. The ISR is stored in assignment
//! order. The leader stays, unless an expansion completes a reassignment that removes it
//! (`settle`, in `leadership`).

use super::leadership::{change_partition, settle};
use super::names_each_once;
use crate::command::*;
use crate::image::{can_serve, live_for, MetadataImage, PartitionImage};

impl MetadataImage {
    /// One change of an `AlterPartition`: refused as [`Self::isr_change_refusal`] says,
    /// else applied. The leader stays, so only the partition epoch moves.
    pub(super) fn alter_isr(
        &mut self,
        broker: i32,
        broker_epoch: u64,
        c: &IsrChange,
    ) -> Result<(), CommandError> {
        let (name, p) = self.isr_change_refusal(broker, broker_epoch, c)?;
        let isr: Vec<i32> = p
            .replicas
            .iter()
            .copied()
            .filter(|r| c.isr.contains(r))
            .collect();
        if isr == p.isr {
            return Ok(());
        }
        let mut next = p.clone();
        next.isr = isr;
        // An expansion may complete a reassignment (and hand a removed leader's place
        // over); otherwise the leader stays, and only the partition epoch moves.
        let live = live_for(&self.brokers, &next);
        let unclean = self.unclean_leader_election_of(name);
        settle(&mut next, &live, unclean);
        let name = name.clone();
        if let Some(p) = self.partition_mut(&name, c.partition) {
            change_partition(p, next);
            debug_assert!(
                p.leader_epoch > c.leader_epoch
                    || (p.leader == broker && p.leader_epoch == c.leader_epoch)
            );
        }
        Ok(())
    }

    /// Why this image refuses one change of an `AlterPartition`, Kafka's checks in
    /// order: the proposer is an active registration of that epoch, the partition
    /// exists, the proposer leads it in the epochs the change was computed from, the ISR
    /// is well formed and keeps the leader, and every broker it adds is active. A pure
    /// question of the image: the active controller asks it before writing a proposal
    /// (`node_state::write_local`), so a change it would refuse costs no log entry.
    /// Passed, it gives the partition's topic name and its current state.
    pub(crate) fn isr_change_refusal(
        &self,
        broker: i32,
        broker_epoch: u64,
        c: &IsrChange,
    ) -> Result<(&String, &PartitionImage), CommandError> {
        if !self
            .brokers
            .get(&broker)
            .is_some_and(|b| b.epoch == broker_epoch && b.is_active())
        {
            return Err(CommandError::StaleBrokerEpoch(broker));
        }
        let name = self
            .topic_ids
            .get(&c.topic_id)
            .ok_or(CommandError::UnknownTopicId)?;
        let p = self
            .topics
            .get(name)
            .and_then(|t| t.partition(c.partition))
            .ok_or(CommandError::UnknownTopicOrPartition)?;
        if p.leader != broker {
            return Err(CommandError::NotLeaderOrFollower);
        }
        if p.leader_epoch != c.leader_epoch {
            return Err(CommandError::FencedLeaderEpoch);
        }
        if p.partition_epoch != c.partition_epoch {
            return Err(CommandError::InvalidUpdateVersion);
        }
        check_isr(p, &c.isr)?;
        if let Some(r) = c
            .isr
            .iter()
            .find(|r| !p.isr.contains(r) && !can_serve(&self.brokers, p, **r))
        {
            return Err(CommandError::IneligibleReplica(*r));
        }
        Ok((name, p))
    }
}

/// The checks of a proposed ISR that need nothing but the partition: non-empty, nobody
/// twice, replicas only, the leader kept (an ISR without its leader would leave the
/// partition led from outside its ISR).
fn check_isr(p: &PartitionImage, isr: &[i32]) -> Result<(), CommandError> {
    if !names_each_once(isr) {
        return Err(CommandError::Invalid(format!(
            "ISR {isr:?} is empty or names a broker twice"
        )));
    }
    if let Some(r) = isr.iter().find(|r| !p.replicas.contains(r)) {
        return Err(CommandError::Invalid(format!(
            "ISR member {r} is not a replica of the partition ({:?})",
            p.replicas
        )));
    }
    if !isr.contains(&p.leader) {
        return Err(CommandError::Invalid(format!(
            "ISR {isr:?} leaves out the leader {}",
            p.leader
        )));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::apply::test_support::*;
    use crate::apply::topics::new_partition;
    use uuid::Uuid;

    #[test]
    fn alter_partition_checks_in_order() {
        let (mut img, epochs) = cluster(3);
        create(&mut img, assigned("t", vec![vec![1, 2, 3]])).unwrap();
        let good = isr_change(&img, "t", 0, &[1, 3]);
        let with = |f: &dyn Fn(&mut IsrChange)| {
            let mut c = good.clone();
            f(&mut c);
            c
        };
        let stale = next(
            &mut img,
            Command::AlterPartition {
                broker: 1,
                broker_epoch: epochs[0] + 100,
                changes: vec![good.clone()],
            },
        );
        assert_eq!(
            stale,
            Outcome::Items(vec![Err(CommandError::StaleBrokerEpoch(1))])
        );
        let unknown = next(
            &mut img,
            Command::AlterPartition {
                broker: 9,
                broker_epoch: epochs[0],
                changes: vec![good.clone()],
            },
        );
        assert_eq!(
            unknown,
            Outcome::Items(vec![Err(CommandError::StaleBrokerEpoch(9))])
        );
        let refused = alter(
            &mut img,
            1,
            vec![
                with(&|c| c.topic_id = Uuid::from_u128(77)),
                with(&|c| c.partition = 1),
                with(&|c| c.partition = -1),
                with(&|c| c.leader_epoch = 1),
                with(&|c| c.partition_epoch = 1),
            ],
        );
        assert_eq!(
            refused,
            vec![
                Err(CommandError::UnknownTopicId),
                Err(CommandError::UnknownTopicOrPartition),
                Err(CommandError::UnknownTopicOrPartition),
                Err(CommandError::FencedLeaderEpoch),
                Err(CommandError::InvalidUpdateVersion),
            ]
        );
        assert_eq!(
            alter(&mut img, 2, vec![good.clone()]),
            vec![Err(CommandError::NotLeaderOrFollower)]
        );
        for isr in [vec![], vec![1, 1], vec![1, 4], vec![2, 3]] {
            let r = alter(&mut img, 1, vec![with(&|c| c.isr = isr.clone())]);
            assert!(
                matches!(r[..], [Err(CommandError::Invalid(_))]),
                "{isr:?}: {r:?}"
            );
        }
        // Nothing refused changed anything.
        assert_eq!(part(&img, "t", 0), new_partition(vec![1, 2, 3]));
        // A fenced broker proposes nothing, even in its epoch.
        fence(&mut img, 1, true).unwrap();
        assert_eq!(
            alter(&mut img, 1, vec![good]),
            vec![Err(CommandError::StaleBrokerEpoch(1))]
        );
    }

    #[test]
    fn alter_partition_shrinks_then_expands_the_isr() {
        let (mut img, _) = cluster(3);
        create(&mut img, assigned("t", vec![vec![1, 2, 3]])).unwrap();
        assert_eq!(set_isr(&mut img, 1, "t", 0, &[3, 1]), Ok(()));
        let p = part(&img, "t", 0);
        // Stored in assignment order; the leader and its epoch stay.
        assert_eq!((p.leader, p.isr.clone()), (1, vec![1, 3]));
        assert_eq!((p.leader_epoch, p.partition_epoch), (0, 1));
        // The same ISR again: nothing changes, not even the partition epoch.
        assert_eq!(set_isr(&mut img, 1, "t", 0, &[1, 3]), Ok(()));
        assert_eq!(part(&img, "t", 0), p);
        // A change computed from the state before the shrink is refused.
        let mut old = isr_change(&img, "t", 0, &[1, 2, 3]);
        old.partition_epoch = 0;
        assert_eq!(
            alter(&mut img, 1, vec![old]),
            vec![Err(CommandError::InvalidUpdateVersion)]
        );
        // Only an active broker joins: not a fenced one ...
        fence(&mut img, 2, true).unwrap();
        assert_eq!(part(&img, "t", 0), p);
        assert_eq!(
            set_isr(&mut img, 1, "t", 0, &[1, 2, 3]),
            Err(CommandError::IneligibleReplica(2))
        );
        fence(&mut img, 2, false).unwrap();
        // ... and two changes of one partition in one command: the second is stale.
        let expand = isr_change(&img, "t", 0, &[2, 1, 3]);
        assert_eq!(
            alter(&mut img, 1, vec![expand.clone(), expand]),
            vec![Ok(()), Err(CommandError::InvalidUpdateVersion)]
        );
        let p = part(&img, "t", 0);
        assert_eq!((p.leader, p.isr.clone()), (1, vec![1, 2, 3]));
        assert_eq!((p.leader_epoch, p.partition_epoch), (0, 2));
        // Not one shutting down either.
        assert_eq!(set_isr(&mut img, 1, "t", 0, &[1, 2]), Ok(()));
        assert_eq!(shutdown(&mut img, 3), Outcome::Done(Ok(())));
        assert_eq!(
            set_isr(&mut img, 1, "t", 0, &[1, 2, 3]),
            Err(CommandError::IneligibleReplica(3))
        );
    }
}
