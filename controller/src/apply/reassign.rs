//! Reassignments: `AlterPartitionReassignments` (KIP-455), moving a partition to new
//! replicas or cancelling the move in progress.
//!
//! While a move is in progress the replicas are the target followed by the replicas being
//! removed (`adding` and `removing` tell which); the move completes as soon as the whole
//! target is in the ISR (`settle`, in `leadership`). A target names registered brokers,
//! each once. Neither a new target nor a cancel leaves the ISR without a member, nor
//! without a live one where it had one (`keeps_isr`).

use super::leadership::{change_partition, settle};
use super::names_each_once;
use crate::command::*;
use crate::image::{live_for, without, MetadataImage, PartitionImage};

impl MetadataImage {
    /// One item of an `AlterPartitionReassignments` (KIP-455, Kafka's checks): `target`
    /// moves the partition to those replicas, `None` cancels the reassignment in
    /// progress. A new target replaces one in progress; the replicas it adds join as
    /// followers, and the reassignment completes once the whole target is in the ISR
    /// (at once when it already is). A cancel restores the original replicas and drops
    /// the added ones from the ISR; it is refused when that would leave no ISR member.
    pub(super) fn reassign(&mut self, item: &ReassignmentItem) -> Result<(), CommandError> {
        let unclean = self.unclean_leader_election_of(&item.topic);
        let p = self
            .topics
            .get(&item.topic)
            .and_then(|t| t.partition(item.partition))
            .ok_or(CommandError::UnknownTopicOrPartition)?;
        let live = live_for(&self.brokers, p);
        let mut next = p.clone();
        match &item.target {
            None if !p.is_reassigning() => return Err(CommandError::NoReassignmentInProgress),
            None => revert_reassignment(&mut next, &live)?,
            Some(target) => {
                check_target(target, |r| self.brokers.contains_key(&r))?;
                let original = p.original();
                if item.keep_replication_factor && target.len() != original.len() {
                    return Err(CommandError::InvalidReplicationFactor(format!(
                        "the target replicas {target:?} change the replication factor {}",
                        original.len()
                    )));
                }
                if p.is_reassigning() && *target == original {
                    revert_reassignment(&mut next, &live)?;
                } else {
                    let removing = without(&original, target);
                    next.adding = without(target, &original);
                    next.replicas = target.iter().chain(&removing).copied().collect();
                    next.removing = removing;
                    // The ISR in the new assignment order. A new target replacing one
                    // in progress may drop added replicas that joined the ISR: refused
                    // if they were all it had (see `keeps_isr`).
                    next.isr = next
                        .replicas
                        .iter()
                        .copied()
                        .filter(|r| p.isr.contains(r))
                        .collect();
                    if !keeps_isr(&p.isr, &next.isr, &live) {
                        return Err(CommandError::InvalidReplicaAssignment(format!(
                            "the target replicas {target:?} would leave no live in-sync replica of the ISR {:?}",
                            p.isr
                        )));
                    }
                }
            }
        }
        settle(&mut next, &live, unclean);
        let partition = self
            .partition_mut(&item.topic, item.partition)
            .ok_or(CommandError::UnknownTopicOrPartition)?;
        change_partition(partition, next);
        Ok(())
    }
}

/// Whether an ISR going from `before` to `after` keeps a member: never none, and a live
/// one if it had one (else the partition goes offline, and the replicas dropped from the
/// assignment delete the only copies that were in sync).
fn keeps_isr(before: &[i32], after: &[i32], live: &[i32]) -> bool {
    let has_live = |isr: &[i32]| isr.iter().any(|r| live.contains(r));
    !after.is_empty() && (has_live(after) || !has_live(before))
}

/// Cancels `p`'s reassignment: the original replicas, the ISR without the added ones.
/// Refused when that would leave no ISR member, or no live one where there was one (see
/// `keeps_isr`).
fn revert_reassignment(p: &mut PartitionImage, live: &[i32]) -> Result<(), CommandError> {
    debug_assert!(p.is_reassigning());
    let isr = without(&p.isr, &p.adding);
    if !keeps_isr(&p.isr, &isr, live) {
        return Err(CommandError::InvalidReplicaAssignment(format!(
            "cancelling the reassignment would leave no live in-sync replica of {:?}",
            p.original()
        )));
    }
    p.replicas = p.original();
    p.isr = isr;
    p.adding.clear();
    p.removing.clear();
    Ok(())
}

/// A reassignment's target: some replicas, none twice, each a registered broker.
fn check_target(target: &[i32], registered: impl Fn(i32) -> bool) -> Result<(), CommandError> {
    if !names_each_once(target) {
        return Err(CommandError::InvalidReplicaAssignment(format!(
            "the target replicas {target:?} are empty or name a broker twice"
        )));
    }
    if let Some(r) = target.iter().find(|r| !registered(**r)) {
        return Err(CommandError::InvalidReplicaAssignment(format!(
            "broker {r} of the target replicas {target:?} is not registered"
        )));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::apply::test_support::*;

    #[test]
    fn a_reassignment_completes_once_the_target_is_in_sync_and_the_removed_leader_hands_over() {
        let (mut img, _) = cluster(3);
        create(&mut img, assigned("t", vec![vec![1, 2]])).unwrap();
        reassign(&mut img, "t", 0, Some(vec![2, 3])).unwrap();
        // Target first, then the replica being removed; the leader stays meanwhile.
        let p = part(&img, "t", 0);
        assert_eq!(moving(&p), (vec![2, 3, 1], vec![3], vec![1], vec![2, 1], 1));
        assert_eq!((p.leader_epoch, p.partition_epoch), (0, 1));
        assert_eq!((p.target(), p.original()), (vec![2, 3], vec![2, 1]));
        // Broker 3 caught up: its leader adds it to the ISR, which completes the move and
        // hands leadership from 1 (removed) to 2 in the same change.
        set_isr(&mut img, 1, "t", 0, &[1, 2, 3]).unwrap();
        let p = part(&img, "t", 0);
        assert_eq!(moving(&p), (vec![2, 3], vec![], vec![], vec![2, 3], 2));
        assert_eq!((p.leader_epoch, p.partition_epoch), (1, 2));
        assert!(!p.is_reassigning());
        // Nothing to cancel now.
        assert_eq!(
            reassign(&mut img, "t", 0, None),
            Err(CommandError::NoReassignmentInProgress)
        );
        // A new order of the same replicas is complete at once; the leader stays.
        reassign(&mut img, "t", 0, Some(vec![3, 2])).unwrap();
        let p = part(&img, "t", 0);
        assert_eq!(moving(&p), (vec![3, 2], vec![], vec![], vec![3, 2], 2));
    }

    #[test]
    fn a_cancelled_reassignment_restores_the_original_replicas() {
        let (mut img, _) = cluster(4);
        create(&mut img, assigned("t", vec![vec![1, 2]])).unwrap();
        reassign(&mut img, "t", 0, Some(vec![3, 4])).unwrap();
        assert_eq!(
            moving(&part(&img, "t", 0)),
            (vec![3, 4, 1, 2], vec![3, 4], vec![1, 2], vec![1, 2], 1)
        );
        // One added replica in sync: not complete while the other is not.
        set_isr(&mut img, 1, "t", 0, &[1, 2, 3]).unwrap();
        assert_eq!(part(&img, "t", 0).isr, vec![3, 1, 2]);
        // A new target replaces the one in progress, measured from the original replicas:
        // [2, 3] is in sync already, so it is complete at once, 1 handing over to 2.
        reassign(&mut img, "t", 0, Some(vec![2, 3])).unwrap();
        assert_eq!(
            moving(&part(&img, "t", 0)),
            (vec![2, 3], vec![], vec![], vec![2, 3], 2)
        );
        // Cancelled instead: back to 1, 2.
        let (mut img, _) = cluster(4);
        create(&mut img, assigned("t", vec![vec![1, 2]])).unwrap();
        reassign(&mut img, "t", 0, Some(vec![3, 4])).unwrap();
        set_isr(&mut img, 1, "t", 0, &[1, 2, 3]).unwrap();
        reassign(&mut img, "t", 0, None).unwrap();
        let p = part(&img, "t", 0);
        assert_eq!(moving(&p), (vec![1, 2], vec![], vec![], vec![1, 2], 1));
        // A target equal to the original replicas cancels too.
        reassign(&mut img, "t", 0, Some(vec![1, 3])).unwrap();
        reassign(&mut img, "t", 0, Some(vec![1, 2])).unwrap();
        assert_eq!(moving(&part(&img, "t", 0)).0, vec![1, 2]);
        assert!(!part(&img, "t", 0).is_reassigning());
    }

    #[test]
    fn reassignments_are_checked() {
        let (mut img, _) = cluster(3);
        create(&mut img, assigned("t", vec![vec![1]])).unwrap();
        for bad in [vec![], vec![2, 2], vec![2, 9]] {
            assert!(
                matches!(
                    reassign(&mut img, "t", 0, Some(bad.clone())),
                    Err(CommandError::InvalidReplicaAssignment(_))
                ),
                "{bad:?}"
            );
        }
        assert_eq!(
            reassign(&mut img, "t", 1, Some(vec![2])),
            Err(CommandError::UnknownTopicOrPartition)
        );
        assert_eq!(
            reassign(&mut img, "nope", 0, Some(vec![2])),
            Err(CommandError::UnknownTopicOrPartition)
        );
        assert_eq!(part(&img, "t", 0).partition_epoch, 0, "nothing changed");

        // Cancelling must leave an ISR member: here only an added replica is in sync.
        reassign(&mut img, "t", 0, Some(vec![2, 3])).unwrap();
        set_isr(&mut img, 1, "t", 0, &[1, 2]).unwrap();
        fence(&mut img, 1, true).unwrap();
        let p = part(&img, "t", 0);
        assert_eq!(moving(&p), (vec![2, 3, 1], vec![2, 3], vec![1], vec![2], 2));
        assert!(matches!(
            reassign(&mut img, "t", 0, None),
            Err(CommandError::InvalidReplicaAssignment(_))
        ));
    }

    #[test]
    fn a_reassignment_may_be_held_to_the_replication_factor() {
        let (mut img, _) = cluster(3);
        create(&mut img, assigned("t", vec![vec![1, 2]])).unwrap();
        let item = |target: Vec<i32>| ReassignmentItem {
            topic: "t".into(),
            partition: 0,
            target: Some(target),
            keep_replication_factor: true,
        };
        let out = next(
            &mut img,
            Command::AlterPartitionReassignments {
                items: vec![item(vec![1, 2, 3]), item(vec![3, 2])],
            },
        );
        assert!(matches!(
            out,
            Outcome::Items(v) if matches!(v[0], Err(CommandError::InvalidReplicationFactor(_)))
                && v[1] == Ok(())
        ));
        assert_eq!(part(&img, "t", 0).target(), vec![3, 2]);
    }

    #[test]
    fn a_new_target_or_a_cancel_keeps_a_live_in_sync_replica() {
        let (mut img, _) = cluster(3);
        create(&mut img, assigned("t", vec![vec![1]])).unwrap();
        reassign(&mut img, "t", 0, Some(vec![2, 3])).unwrap();
        set_isr(&mut img, 1, "t", 0, &[1, 2]).unwrap();
        fence(&mut img, 1, true).unwrap();
        let before = part(&img, "t", 0);
        assert_eq!(
            moving(&before),
            (vec![2, 3, 1], vec![2, 3], vec![1], vec![2], 2)
        );
        // Dropping 2, the only live in-sync replica, is refused either way.
        assert!(matches!(
            reassign(&mut img, "t", 0, Some(vec![3])),
            Err(CommandError::InvalidReplicaAssignment(_))
        ));
        assert!(matches!(
            reassign(&mut img, "t", 0, None),
            Err(CommandError::InvalidReplicaAssignment(_))
        ));
        assert_eq!(part(&img, "t", 0), before, "nothing changed");
    }

    #[test]
    fn a_reassignment_goes_on_through_a_failover() {
        let (mut img, _) = cluster(3);
        create(&mut img, assigned("t", vec![vec![1, 2]])).unwrap();
        reassign(&mut img, "t", 0, Some(vec![2, 3])).unwrap();
        // The leader, being removed, dies: the target's in-sync replica leads.
        fence(&mut img, 1, true).unwrap();
        assert_eq!(
            moving(&part(&img, "t", 0)),
            (vec![2, 3, 1], vec![3], vec![1], vec![2], 2)
        );
        // The new leader adds the caught-up replica: complete, though 1 is gone.
        set_isr(&mut img, 2, "t", 0, &[2, 3]).unwrap();
        assert_eq!(
            moving(&part(&img, "t", 0)),
            (vec![2, 3], vec![], vec![], vec![2, 3], 2)
        );
    }

    #[test]
    fn partitions_of_earlier_releases_load_without_a_reassignment() {
        let old =
            r#"{"replicas":[1,2],"isr":[1,2],"leader":1,"leader_epoch":3,"partition_epoch":4}"#;
        let p: PartitionImage = serde_json::from_str(old).expect("loads");
        assert!(!p.is_reassigning());
        assert_eq!(
            serde_json::to_string(&p).expect("saves"),
            old,
            "and saves the same"
        );
    }
}
