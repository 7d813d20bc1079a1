//! One member's step toward its target assignment (KIP-848's reconciliation, Kafka's
//! `CurrentAssignmentBuilder`): a pure function of the member's current state, the
//! group's target for it, the partitions the member says it owns, and which partitions
//! some member still holds.
//!
//! The protocol's safety rule is that no partition is ever held by two members: a
//! member is given a partition only once no member holds it (assigned or pending
//! revocation), and it gives one up by leaving it out of the partitions it reports.
//!
//! A member is in one of three states:
//! - `Stable`: it holds its target (as far as the rule allows) at the target's epoch;
//! - `UnrevokedPartitions`: it must revoke `pending_revocation` first, and stays at its
//!   epoch until its heartbeat no longer reports any of them;
//! - `UnreleasedPartitions`: it is at the target epoch, and some partitions of its target
//!   are still held by others; they are added as they are released.
//!
//! Invariants: `assigned` and `pending_revocation` never overlap; the epoch never moves
//! back; `previous_epoch` is the epoch the member had before its last step (a heartbeat
//! at it is still accepted, as its answer may have been lost).

use super::assignment::{Assignment, TopicId};

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum MemberState {
    Stable,
    UnrevokedPartitions,
    UnreleasedPartitions,
}

impl MemberState {
    /// The name `ConsumerGroupDescribe` and the group records use (Kafka's
    /// `MemberState` values).
    pub fn name(self) -> &'static str {
        match self {
            MemberState::Stable => "stable",
            MemberState::UnrevokedPartitions => "unrevoked_partitions",
            MemberState::UnreleasedPartitions => "unreleased_partitions",
        }
    }

    /// The numeric value of the current-assignment record (Kafka's `MemberState.value`).
    pub fn value(self) -> i8 {
        match self {
            MemberState::UnrevokedPartitions => 0,
            MemberState::UnreleasedPartitions => 1,
            MemberState::Stable => 2,
        }
    }

    pub fn from_value(v: i8) -> Option<MemberState> {
        [
            MemberState::UnrevokedPartitions,
            MemberState::UnreleasedPartitions,
            MemberState::Stable,
        ]
        .into_iter()
        .find(|s| s.value() == v)
    }
}

/// What a member holds and at which epoch.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct MemberAssignment {
    pub state: MemberState,
    pub epoch: i32,
    pub previous_epoch: i32,
    pub assigned: Assignment,
    pub pending_revocation: Assignment,
}

impl MemberAssignment {
    /// A member that has just joined: nothing held, epoch 0.
    pub fn joining() -> MemberAssignment {
        MemberAssignment {
            state: MemberState::Stable,
            epoch: 0,
            previous_epoch: 0,
            assigned: Assignment::new(),
            pending_revocation: Assignment::new(),
        }
    }

    /// Every partition the member may still hold.
    pub fn held(&self) -> Assignment {
        let mut all = self.assigned.clone();
        all.extend(&self.pending_revocation);
        all
    }
}

/// The member's next state. `owned` is what its heartbeat reported (`None`: not sent,
/// so nothing is known to be revoked); `held_by_any` says whether a partition is held
/// by any member, this one included (its own pending revocations count: it gives them
/// up first).
pub fn reconcile(
    member: &MemberAssignment,
    target_epoch: i32,
    target: &Assignment,
    owned: Option<&Assignment>,
    held_by_any: impl Fn(TopicId, i32) -> bool,
) -> MemberAssignment {
    let next = match member.state {
        MemberState::Stable if member.epoch == target_epoch => member.clone(),
        MemberState::Stable | MemberState::UnreleasedPartitions => step(
            member,
            member.epoch,
            target_epoch,
            target,
            owned,
            &held_by_any,
        ),
        MemberState::UnrevokedPartitions => {
            if still_owns(owned, &member.pending_revocation) {
                member.clone()
            } else {
                // Revoked: it moves past its epoch, toward the target.
                let epoch = (member.epoch + 1).min(target_epoch);
                step(member, epoch, target_epoch, target, owned, &held_by_any)
            }
        }
    };
    debug_assert!(!next.assigned.intersects(&next.pending_revocation));
    debug_assert!(
        next.epoch >= member.epoch,
        "a member's epoch never moves back"
    );
    next
}

/// Whether the reported `owned` partitions include any of `revoking` (unknown when the
/// heartbeat did not report them).
fn still_owns(owned: Option<&Assignment>, revoking: &Assignment) -> bool {
    owned.is_none_or(|o| o.intersects(revoking))
}

fn step(
    member: &MemberAssignment,
    epoch: i32,
    target_epoch: i32,
    target: &Assignment,
    owned: Option<&Assignment>,
    held_by_any: &impl Fn(TopicId, i32) -> bool,
) -> MemberAssignment {
    let kept = member.assigned.intersection(target);
    let revoking = member.assigned.difference(&kept);
    let mut adding = target.difference(&kept);
    let before = adding.len();
    adding.retain(|t, p| !held_by_any(t, p));
    let unreleased = adding.len() < before;
    // As Kafka's member builder: every step records the epoch it leaves as the previous.
    let bumped = |state, assigned| MemberAssignment {
        state,
        epoch: target_epoch,
        previous_epoch: member.epoch,
        assigned,
        pending_revocation: Assignment::new(),
    };
    if !revoking.is_empty() && still_owns(owned, &revoking) {
        // First the revocation, at the epoch it has; nothing new meanwhile.
        MemberAssignment {
            state: MemberState::UnrevokedPartitions,
            epoch,
            previous_epoch: member.epoch,
            assigned: kept,
            pending_revocation: revoking,
        }
    } else {
        let mut assigned = kept;
        assigned.extend(&adding);
        let state = if unreleased {
            MemberState::UnreleasedPartitions
        } else {
            MemberState::Stable
        };
        bumped(state, assigned)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use uuid::Uuid;

    fn t() -> TopicId {
        Uuid::from_u128(7)
    }

    fn parts(ps: &[i32]) -> Assignment {
        Assignment::from_partitions(ps.iter().map(|p| (t(), *p)))
    }

    fn stable(epoch: i32, ps: &[i32]) -> MemberAssignment {
        MemberAssignment {
            state: MemberState::Stable,
            epoch,
            previous_epoch: epoch - 1,
            assigned: parts(ps),
            pending_revocation: Assignment::new(),
        }
    }

    #[test]
    fn a_joining_member_takes_free_partitions_and_the_target_epoch() {
        let next = reconcile(
            &MemberAssignment::joining(),
            3,
            &parts(&[0, 1]),
            Some(&Assignment::new()),
            |_, _| false,
        );
        assert_eq!(
            next,
            MemberAssignment {
                previous_epoch: 0,
                ..stable(3, &[0, 1])
            }
        );
    }

    #[test]
    fn a_partition_held_elsewhere_waits_until_released() {
        let held = |_, p| p == 1;
        let next = reconcile(&stable(2, &[0]), 3, &parts(&[0, 1]), None, held);
        assert_eq!(next.state, MemberState::UnreleasedPartitions);
        assert_eq!((next.epoch, next.assigned.clone()), (3, parts(&[0])));
        // Released: the next heartbeat gets it.
        let after = reconcile(&next, 3, &parts(&[0, 1]), None, |_, _| false);
        assert_eq!(
            (after.state, after.assigned),
            (MemberState::Stable, parts(&[0, 1]))
        );
    }

    #[test]
    fn revocation_comes_first_and_keeps_the_epoch_until_acknowledged() {
        let member = stable(2, &[0, 1]);
        let target = parts(&[1, 2]);
        let next = reconcile(&member, 3, &target, Some(&parts(&[0, 1])), |_, _| false);
        assert_eq!(next.state, MemberState::UnrevokedPartitions);
        assert_eq!(next.epoch, 2);
        assert_eq!(
            (next.assigned.clone(), next.pending_revocation.clone()),
            (parts(&[1]), parts(&[0]))
        );
        // A heartbeat that does not report what it owns proves nothing.
        assert_eq!(reconcile(&next, 3, &target, None, |_, _| false), next);
        // Still owning 0: no progress.
        assert_eq!(
            reconcile(&next, 3, &target, Some(&parts(&[0, 1])), |_, _| false),
            next
        );
        // Revoked: the epoch moves on and partition 2 comes.
        let done = reconcile(&next, 3, &target, Some(&parts(&[1])), |_, _| false);
        assert_eq!(
            done,
            MemberAssignment {
                previous_epoch: 2,
                ..stable(3, &[1, 2])
            }
        );
    }

    #[test]
    fn a_member_that_already_dropped_the_revoked_partitions_skips_the_revocation() {
        let next = reconcile(
            &stable(2, &[0, 1]),
            3,
            &parts(&[1]),
            Some(&parts(&[1])),
            |_, _| false,
        );
        assert_eq!(
            next,
            MemberAssignment {
                previous_epoch: 2,
                ..stable(3, &[1])
            }
        );
    }

    #[test]
    fn a_stable_member_at_the_target_epoch_is_unchanged() {
        let m = stable(4, &[0]);
        assert_eq!(reconcile(&m, 4, &parts(&[0, 1]), None, |_, _| false), m);
    }

    #[test]
    fn member_state_values_round_trip() {
        for s in [
            MemberState::Stable,
            MemberState::UnrevokedPartitions,
            MemberState::UnreleasedPartitions,
        ] {
            assert_eq!(MemberState::from_value(s.value()), Some(s));
        }
        assert_eq!(MemberState::from_value(9), None);
    }
}
