//! The high watermark and a leader's followers: the durable end this replica counts as
//! its own, the high watermark a leader raises to what its ISR allows and a follower
//! takes from its leader, the last stable offset, and the ISR as the leader keeps it
//! (follower fetches recorded, expansions and shrinks proposed to the controller, their
//! failure or refusal). The order of the offsets and the bound a leader's ISR allows are
//! described in the parent module's (`partition`) documentation.
//!
//! Invariants: the high watermark only grows here, and only to a value at or below this
//! replica's durable end; every change of it is announced on `hw_moved`; the ISR changes
//! only through [`ReplicaSet`], one proposal at a time, and only while this replica
//! leads; no borrow of the role is held across an `.await` (nothing here awaits).

use super::{Partition, Role};
use crate::replica_set::ReplicaSet;
use corelog_storage::Durability;

/// An ISR change a leader wants the controller to commit (AlterPartition), with the
/// epochs it was computed in.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct IsrProposal {
    pub leader_epoch: i32,
    pub partition_epoch: i32,
    pub isr: Vec<i32>,
}

/// A follower's fetch as the leader records it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum FollowerFetch {
    /// Recorded; `Some` when the follower should join the ISR (already marked proposed).
    Recorded(Option<IsrProposal>),
    /// This replica does not lead the partition.
    NotLeader,
    /// The fetching broker holds no replica of the partition.
    UnknownReplica,
}

impl Partition {
    /// The leader's view of its replicas; `None` unless leader.
    pub fn replica_set(&self) -> Option<ReplicaSet> {
        match &*self.role.borrow() {
            Role::Leader(set) => Some(set.clone()),
            _ => None,
        }
    }

    /// The partition epoch of the state this leader took up; `None` unless leader.
    pub fn partition_epoch(&self) -> Option<i32> {
        match &*self.role.borrow() {
            Role::Leader(set) => Some(set.partition_epoch()),
            _ => None,
        }
    }

    /// Whether `replica` is in the committed ISR as the leader knows it (false unless
    /// leader).
    pub fn in_isr(&self, replica: i32) -> bool {
        match &*self.role.borrow() {
            Role::Leader(set) => set.isr().contains(&replica),
            _ => false,
        }
    }

    /// The committed ISR's size as the leader knows it (0 unless leader).
    pub fn isr_len(&self) -> usize {
        match &*self.role.borrow() {
            Role::Leader(set) => set.isr().len(),
            _ => 0,
        }
    }

    /// `min.insync.replicas` of the topic, as a count.
    pub fn min_insync_replicas(&self) -> usize {
        usize::try_from(self.log.min_insync_replicas())
            .unwrap_or(1)
            .max(1)
    }

    /// What this replica acknowledges as its own: see the `partition` module's documentation.
    pub fn durable_end(&self) -> i64 {
        if self.hw_is_synced() {
            self.log.synced_offset()
        } else {
            self.log.written_offset()
        }
    }

    /// What consumers may read up to (exclusive): a leader first raises it to what its
    /// ISR allows now (see the `partition` module's documentation).
    pub fn high_watermark(&self) -> i64 {
        if let Role::Leader(set) = &*self.role.borrow() {
            let bound = set.high_watermark_bound(self.durable_end(), self.min_insync_replicas());
            if let Some(bound) = bound.filter(|b| *b > self.high_watermark.get()) {
                self.high_watermark.set(bound);
                self.log.prune_completed_transactions(bound);
                self.hw_moved.notify(usize::MAX);
            }
        }
        self.high_watermark.get()
    }

    /// A follower takes up its leader's high watermark, capped by what it holds itself.
    pub fn follow_high_watermark(&self, leader_high_watermark: i64) {
        let hw = leader_high_watermark.min(self.durable_end());
        if hw > self.high_watermark.get() {
            self.high_watermark.set(hw);
            self.log.prune_completed_transactions(hw);
            self.hw_moved.notify(usize::MAX);
        }
    }

    /// What `read_committed` consumers may read up to (exclusive): the high watermark,
    /// held back to the start of the earliest transaction that is open or whose marker
    /// is not yet below the high watermark (so its outcome is known to every consumer
    /// that reads its records).
    pub fn last_stable_offset(&self) -> i64 {
        let hw = self.high_watermark();
        // A transaction whose start retention or DeleteRecords removed holds the stable
        // offset at the log start, not below it (Kafka's maybeIncrementFirstUnstableOffset).
        let lso = self
            .log
            .first_unstable_offset(hw)
            .map_or(hw, |f| f.max(self.log_start_offset()).min(hw));
        debug_assert!(lso <= hw);
        lso
    }

    pub(super) fn hw_is_synced(&self) -> bool {
        self.log.durability() != Durability::Interval
    }

    /// Records a fetch by follower `replica` at `fetch_offset` (a read that did not
    /// diverge: a diverging follower's offset says nothing of what it shares with this
    /// log), raises the high watermark, and proposes the follower's return to the ISR
    /// once it holds everything committed and the current epoch's start. `eligible` is
    /// asked only then: the metadata version if the broker may join an ISR (registered
    /// and active), `None` if not.
    pub fn record_follower_fetch(
        &self,
        replica: i32,
        fetch_offset: i64,
        eligible: impl FnOnce() -> Option<u64>,
    ) -> FollowerFetch {
        let now = self.context.now_ms();
        let leader_end = self.log.log_end_offset();
        {
            let mut role = self.role.borrow_mut();
            let Role::Leader(set) = &mut *role else {
                return FollowerFetch::NotLeader;
            };
            if !set.record_fetch(replica, fetch_offset, leader_end, now) {
                return FollowerFetch::UnknownReplica;
            }
        }
        let hw = self.high_watermark();
        let epoch = self.leader_epoch.get();
        let epoch_start = self
            .epochs
            .borrow()
            .entries()
            .iter()
            .rev()
            .find(|e| e.epoch == epoch)
            .map_or(i64::MAX, |e| e.start_offset);
        let mut role = self.role.borrow_mut();
        let Role::Leader(set) = &mut *role else {
            return FollowerFetch::NotLeader;
        };
        let Some(isr) = set.expansion(replica, hw, epoch_start) else {
            return FollowerFetch::Recorded(None);
        };
        match eligible() {
            Some(version) if set.may_propose(version) => {
                set.propose(isr.clone());
                FollowerFetch::Recorded(Some(IsrProposal {
                    leader_epoch: epoch,
                    partition_epoch: set.partition_epoch(),
                    isr,
                }))
            }
            _ => FollowerFetch::Recorded(None),
        }
    }

    /// The ISR without the followers that have not caught up for `lag_ms`, marked
    /// proposed; `None` when nobody lags, a change is in flight, this is no leader, or
    /// the controller refused a proposal at `metadata_version` already.
    pub fn isr_shrink(&self, lag_ms: i64, metadata_version: u64) -> Option<IsrProposal> {
        let now = self.context.now_ms();
        let epoch = self.leader_epoch.get();
        let mut role = self.role.borrow_mut();
        let Role::Leader(set) = &mut *role else {
            return None;
        };
        if !set.may_propose(metadata_version) {
            return None;
        }
        let isr = set.shrink(now, lag_ms)?;
        set.propose(isr.clone());
        Some(IsrProposal {
            leader_epoch: epoch,
            partition_epoch: set.partition_epoch(),
            isr,
        })
    }

    /// The proposed ISR change was lost (not answered); the committed ISR stands.
    pub fn isr_proposal_failed(&self) {
        if let Role::Leader(set) = &mut *self.role.borrow_mut() {
            set.proposal_failed();
        }
    }

    /// The controller refused the proposed ISR change, computed in partition epoch
    /// `epoch`, at metadata `version`; the committed ISR stands and nothing is proposed
    /// again until newer metadata (`ReplicaSet::proposal_refused`).
    pub fn isr_proposal_refused(&self, version: u64, epoch: i32) {
        if let Role::Leader(set) = &mut *self.role.borrow_mut() {
            set.proposal_refused(version, epoch);
        }
    }
}
