//! Leadership: the rules every change of a partition ends in, and `ElectLeaders`, which
//! asks for an election.
//!
//! `settle` completes a reassignment whose whole target is in the ISR, then elects
//! (`elect`: the leadership rules of the parent module's doc). `change_partition`
//! replaces a partition and bumps its epochs: the leader epoch when the leader changes,
//! the partition epoch on every change, neither when nothing changes. `reelect` runs both
//! over the partitions that a change of a broker's liveness, or of an unclean-election
//! setting, may affect. Nothing here uses another family; the families use this.

use crate::command::*;
use crate::image::{
    live_for, unclean_leader_election, MetadataImage, PartitionImage, TopicImage, NO_LEADER,
};

impl MetadataImage {
    /// Runs the election on every partition `picks` (by topic and partition), first
    /// taking `leaving` (a broker just fenced) out of its ISR unless it is the last
    /// member. Partitions whose leader stays valid and whose ISR stays are untouched, so
    /// picking more partitions than are affected changes nothing more.
    pub(super) fn reelect(
        &mut self,
        leaving: Option<i32>,
        picks: impl Fn(&TopicImage, &PartitionImage) -> bool,
    ) {
        let brokers = &self.brokers;
        let cluster_configs = self.broker_configs.get("");
        for t in self.topics.values_mut() {
            let unclean = unclean_leader_election(&t.configs, cluster_configs);
            let picked: Vec<usize> = (0..t.partitions.len())
                .filter(|i| picks(t, &t.partitions[*i]))
                .collect();
            for i in picked {
                let p = &mut t.partitions[i];
                let mut next = p.clone();
                if let Some(id) = leaving {
                    if next.isr.len() > 1 {
                        next.isr.retain(|r| *r != id);
                    }
                }
                let live = live_for(brokers, &next);
                settle(&mut next, &live, unclean);
                change_partition(p, next);
            }
        }
    }

    /// One partition of an `ElectLeaders` (Kafka's checks): preferred moves leadership to
    /// the first replica of the assignment when it is a live ISR member; unclean leads a
    /// partition that has no leader from its ISR if a member is live, else from its live
    /// replicas with an ISR of just the new leader. A partition that already has the
    /// leader asked for is ELECTION_NOT_NEEDED.
    pub(super) fn elect_leader(
        &mut self,
        election: Election,
        topic: &str,
        partition: i32,
    ) -> Result<(), CommandError> {
        let live = self
            .topics
            .get(topic)
            .and_then(|t| t.partition(partition))
            .map(|p| live_for(&self.brokers, p))
            .ok_or(CommandError::UnknownTopicOrPartition)?;
        let p = self
            .partition_mut(topic, partition)
            .ok_or(CommandError::UnknownTopicOrPartition)?;
        let mut next = p.clone();
        match election {
            Election::Preferred => {
                let preferred = p.replicas.first().copied().unwrap_or(NO_LEADER);
                if p.leader == preferred {
                    return Err(CommandError::ElectionNotNeeded);
                }
                if !p.isr.contains(&preferred) || !live.contains(&preferred) {
                    return Err(CommandError::PreferredLeaderNotAvailable(preferred));
                }
                next.leader = preferred;
            }
            Election::Unclean => {
                if p.has_leader() {
                    return Err(CommandError::ElectionNotNeeded);
                }
                elect(&mut next, &live, true);
                if !next.has_leader() {
                    return Err(CommandError::EligibleLeadersNotAvailable);
                }
            }
        }
        settle(&mut next, &live, false);
        change_partition(p, next);
        Ok(())
    }

    /// The partition `partition` of topic `name`, to change.
    pub(super) fn partition_mut(
        &mut self,
        name: &str,
        partition: i32,
    ) -> Option<&mut PartitionImage> {
        let i = usize::try_from(partition).ok()?;
        self.topics.get_mut(name)?.partitions.get_mut(i)
    }

    /// Whether topic `name` may elect uncleanly (off for a topic not found).
    pub(super) fn unclean_leader_election_of(&self, name: &str) -> bool {
        self.topics
            .get(name)
            .is_some_and(|t| unclean_leader_election(&t.configs, self.broker_configs.get("")))
    }
}

/// Elects `p`'s leader among the `live` brokers (the leadership rules of the parent
/// module's doc): the current leader while it is a live ISR member, else the first live
/// ISR member in assignment order, else — only when `unclean` — the first live replica,
/// which then is the whole ISR, else nobody.
fn elect(p: &mut PartitionImage, live: &[i32], unclean: bool) {
    let eligible = |r: &i32| p.isr.contains(r) && live.contains(r);
    if eligible(&p.leader) {
        return;
    }
    p.leader = p
        .replicas
        .iter()
        .copied()
        .find(eligible)
        .unwrap_or(NO_LEADER);
    if p.leader == NO_LEADER && unclean {
        if let Some(r) = p.replicas.iter().copied().find(|r| live.contains(r)) {
            p.leader = r;
            p.isr = vec![r];
        }
    }
    debug_assert!(!p.has_leader() || (p.isr.contains(&p.leader) && live.contains(&p.leader)));
}

/// Completes `p`'s reassignment, then elects (every change of a partition ends here, so
/// a reassignment is never left in progress once it could complete).
pub(super) fn settle(p: &mut PartitionImage, live: &[i32], unclean: bool) {
    complete_reassignment(p, live);
    elect(p, live, unclean);
    // An unclean election makes the ISR its new leader alone, which may be the whole
    // target; the new leader stays (it is an ISR member).
    complete_reassignment(p, live);
    elect(p, live, false);
}

/// Completes `p`'s reassignment once its whole target is in the ISR (Kafka's
/// `completeReassignmentIfNeeded`): the replicas and the ISR become the target; a leader
/// being removed gives way to the first live ISR member of the target (the election
/// after this). Left in progress while the leader is being removed and no target replica
/// is live to take over.
fn complete_reassignment(p: &mut PartitionImage, live: &[i32]) {
    if !p.is_reassigning() {
        return;
    }
    let target = p.target();
    if !target.iter().all(|r| p.isr.contains(r)) {
        return;
    }
    if p.has_leader() && !target.contains(&p.leader) && !target.iter().any(|r| live.contains(r)) {
        return;
    }
    p.isr = target.clone();
    p.replicas = target;
    p.adding.clear();
    p.removing.clear();
}

/// Replaces `p` by `next`, bumping the epochs if anything changed. A replica that
/// leaves takes its directory with it.
pub(super) fn change_partition(p: &mut PartitionImage, mut next: PartitionImage) {
    let replicas = &next.replicas;
    next.directories.retain(|b, _| replicas.contains(b));
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
    use crate::apply::test_support::*;

    /// Elects partition `i` of `name`; its one result.
    fn elect_one(
        img: &mut MetadataImage,
        election: Election,
        name: &str,
        i: i32,
    ) -> Result<(), CommandError> {
        let cmd = Command::ElectLeaders {
            election,
            partitions: vec![(name.into(), i)],
        };
        match next(img, cmd) {
            Outcome::Items(mut v) if v.len() == 1 => v.remove(0),
            other => panic!("{other:?}"),
        }
    }

    #[test]
    fn preferred_and_unclean_elections_on_request() {
        let (mut img, _) = cluster(3);
        create(&mut img, assigned("t", vec![vec![1, 2, 3]])).unwrap();
        use Election::*;
        assert_eq!(
            elect_one(&mut img, Preferred, "t", 0),
            Err(CommandError::ElectionNotNeeded)
        );
        // 1 goes and comes back: 2 leads, 1 is back in the ISR but does not lead.
        fence(&mut img, 1, true).unwrap();
        fence(&mut img, 1, false).unwrap();
        assert_eq!(part(&img, "t", 0).leader, 2);
        assert_eq!(
            elect_one(&mut img, Preferred, "t", 0),
            Err(CommandError::PreferredLeaderNotAvailable(1)),
            "not in the ISR yet"
        );
        set_isr(&mut img, 2, "t", 0, &[1, 2, 3]).unwrap();
        let before = part(&img, "t", 0).leader_epoch;
        assert_eq!(elect_one(&mut img, Preferred, "t", 0), Ok(()));
        let p = part(&img, "t", 0);
        assert_eq!((p.leader, p.leader_epoch), (1, before + 1));
        assert_eq!(
            elect_one(&mut img, Preferred, "t", 7),
            Err(CommandError::UnknownTopicOrPartition)
        );
        // Unclean: only for a partition without a leader; from a live replica outside
        // the ISR when no ISR member is live, the topic's setting notwithstanding.
        assert_eq!(
            elect_one(&mut img, Unclean, "t", 0),
            Err(CommandError::ElectionNotNeeded)
        );
        create(&mut img, assigned("u", vec![vec![1, 2]])).unwrap();
        fence(&mut img, 2, true).unwrap();
        fence(&mut img, 1, true).unwrap();
        assert_eq!(part(&img, "u", 0).isr, vec![1]);
        assert_eq!(
            elect_one(&mut img, Unclean, "u", 0),
            Err(CommandError::EligibleLeadersNotAvailable)
        );
        fence(&mut img, 2, false).unwrap();
        assert_eq!(
            part(&img, "u", 0).leader,
            NO_LEADER,
            "unclean is off for the topic"
        );
        assert_eq!(elect_one(&mut img, Unclean, "u", 0), Ok(()));
        let p = part(&img, "u", 0);
        assert_eq!((p.leader, p.isr.clone()), (2, vec![2]));
    }

    #[test]
    fn an_unclean_election_that_makes_the_target_the_isr_completes_the_move() {
        let (mut img, _) = cluster(2);
        let mut t = assigned("t", vec![vec![1]]);
        t.configs = unclean("true");
        create(&mut img, t).unwrap();
        reassign(&mut img, "t", 0, Some(vec![2])).unwrap();
        // 1 dies before 2 caught up: 2 leads uncleanly, alone in the ISR, so the move
        // is complete in the same change.
        fence(&mut img, 1, true).unwrap();
        assert_eq!(
            moving(&part(&img, "t", 0)),
            (vec![2], vec![], vec![], vec![2], 2)
        );
    }
}
