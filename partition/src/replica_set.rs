//! A leader's view of its partition's replicas: where each follower's log ends, when it
//! last caught up, the in-sync replica set (ISR) as committed and as proposed, and the
//! high watermark they allow. Pure bookkeeping: the partition feeds it fetches and
//! metadata, and asks it what to propose.
//!
//! Kafka's rules (`Partition`, `ReplicaState`, `PartitionState`):
//! - a follower's log end offset is the offset of its latest fetch: it asks for `X` only
//!   once it holds everything below `X` (on disk, with the default durability);
//! - a follower is caught up when its fetch reached the leader's log end as of that
//!   fetch, or as of its previous fetch (`last_caught_up_ms`, for ISR shrinks);
//! - the *maximal* ISR is the committed ISR plus a proposed expansion: a joining follower
//!   counts for the high watermark at once, a leaving one only once its removal is
//!   committed (so a shrink never lets the high watermark pass what the removed follower
//!   had not acknowledged before the controller agreed);
//! - the high watermark bound is the smallest log end over the maximal ISR (the leader's
//!   own durable end included), and there is none while the committed ISR is smaller
//!   than `min.insync.replicas`.
//!
//! - an expansion adds the follower whose fetch showed it caught up, and only that one
//!   (Kafka's `maybeExpandIsr(followerReplica)`): a replica that stopped fetching — a
//!   fenced or paused broker, still at the log end of an idle partition — is never
//!   proposed on another follower's fetch;
//! - a proposal the controller refused is not made again until the metadata has moved
//!   past the refusal (Kafka's leader waits for new metadata too): a refusal repeated
//!   on every fetch would only load the controller.
//!
//! Invariants: the leader is in the committed ISR; every follower tracked is a replica
//! and not the leader; at most one ISR change is proposed at a time.

/// What the leader knows of one follower.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct FollowerState {
    pub id: i32,
    /// The offset of its latest fetch; -1 until it fetched from this leader.
    pub log_end_offset: i64,
    /// When it was last caught up with this leader's log end (or when this broker became
    /// leader, which gives every follower one lag period to show up).
    pub last_caught_up_ms: i64,
    last_fetch_ms: i64,
    last_fetch_leader_end: i64,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ReplicaSet {
    leader: i32,
    replicas: Vec<i32>,
    isr: Vec<i32>,
    partition_epoch: i32,
    /// The ISR of an AlterPartition in flight.
    proposed: Option<Vec<i32>>,
    /// The metadata version at which the controller last refused a proposal of this
    /// leader; none is made again at that version or below.
    refused_at: Option<u64>,
    followers: Vec<FollowerState>,
}

/// The committed state of a partition as the metadata has it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Assignment {
    pub replicas: Vec<i32>,
    pub isr: Vec<i32>,
    pub partition_epoch: i32,
}

impl Assignment {
    /// A leader alone: no followers, an ISR of itself (a single node's partitions).
    pub fn alone(leader: i32) -> Assignment {
        Assignment {
            replicas: vec![leader],
            isr: vec![leader],
            partition_epoch: 0,
        }
    }
}

impl ReplicaSet {
    /// `leader` takes over the partition at `now_ms`: no follower has fetched yet.
    pub fn new(leader: i32, assignment: Assignment, now_ms: i64) -> ReplicaSet {
        let mut set = ReplicaSet {
            leader,
            replicas: Vec::new(),
            isr: Vec::new(),
            partition_epoch: -1,
            proposed: None,
            refused_at: None,
            followers: Vec::new(),
        };
        set.update(assignment, now_ms);
        set
    }

    /// Takes up a newer committed state (or the same again), keeping what is known of
    /// the followers that remain replicas. A newer partition epoch settles the proposal
    /// in flight, whether it was this one or another change overtook it.
    pub fn update(&mut self, assignment: Assignment, now_ms: i64) {
        if assignment.partition_epoch < self.partition_epoch {
            return;
        }
        if assignment.partition_epoch > self.partition_epoch {
            self.proposed = None;
            self.refused_at = None;
        }
        let leader = self.leader;
        let mut isr = assignment.isr;
        if !isr.contains(&leader) {
            // The metadata always keeps its leader in the ISR; should an older image say
            // otherwise, this leader still counts itself.
            isr.push(leader);
        }
        self.followers
            .retain(|f| assignment.replicas.contains(&f.id));
        for &r in assignment.replicas.iter().filter(|r| **r != leader) {
            if !self.followers.iter().any(|f| f.id == r) {
                self.followers.push(FollowerState {
                    id: r,
                    log_end_offset: -1,
                    last_caught_up_ms: now_ms,
                    last_fetch_ms: now_ms,
                    last_fetch_leader_end: -1,
                });
            }
        }
        self.replicas = assignment.replicas;
        self.isr = isr;
        self.partition_epoch = assignment.partition_epoch;
        debug_assert!(self.isr.contains(&self.leader));
        debug_assert!(self.followers.iter().all(|f| f.id != self.leader));
    }

    pub fn leader(&self) -> i32 {
        self.leader
    }

    pub fn replicas(&self) -> &[i32] {
        &self.replicas
    }

    /// The committed ISR.
    pub fn isr(&self) -> &[i32] {
        &self.isr
    }

    pub fn partition_epoch(&self) -> i32 {
        self.partition_epoch
    }

    pub fn followers(&self) -> &[FollowerState] {
        &self.followers
    }

    pub fn proposal(&self) -> Option<&[i32]> {
        self.proposed.as_deref()
    }

    fn in_maximal_isr(&self, id: i32) -> bool {
        self.isr.contains(&id) || self.proposed.as_ref().is_some_and(|p| p.contains(&id))
    }

    /// Records a fetch by follower `id` at `fetch_offset` while this leader's log ended
    /// at `leader_end`. Returns false for a broker that is not a follower here.
    pub fn record_fetch(
        &mut self,
        id: i32,
        fetch_offset: i64,
        leader_end: i64,
        now_ms: i64,
    ) -> bool {
        let Some(f) = self.followers.iter_mut().find(|f| f.id == id) else {
            return false;
        };
        if fetch_offset >= leader_end {
            f.last_caught_up_ms = now_ms;
        } else if f.last_fetch_leader_end >= 0 && fetch_offset >= f.last_fetch_leader_end {
            f.last_caught_up_ms = f.last_caught_up_ms.max(f.last_fetch_ms);
        }
        f.log_end_offset = fetch_offset;
        f.last_fetch_leader_end = leader_end;
        f.last_fetch_ms = now_ms;
        true
    }

    /// The highest the high watermark may be, given the leader's own durable end; `None`
    /// while the committed ISR is smaller than `min_insync`.
    pub fn high_watermark_bound(&self, leader_end: i64, min_insync: usize) -> Option<i64> {
        if self.isr.len() < min_insync {
            return None;
        }
        let followers = self
            .followers
            .iter()
            .filter(|f| self.in_maximal_isr(f.id))
            .map(|f| f.log_end_offset);
        Some(followers.fold(leader_end, i64::min))
    }

    /// The ISR to propose with follower `id` added, if its log (as of the fetch just
    /// recorded) reaches the high watermark and the start of the current leader epoch
    /// (Kafka's `isFollowerInSync`: it holds everything this leader committed).
    pub fn expansion(&self, id: i32, high_watermark: i64, epoch_start: i64) -> Option<Vec<i32>> {
        if self.proposed.is_some() || self.in_maximal_isr(id) {
            return None;
        }
        let f = self.followers.iter().find(|f| f.id == id)?;
        if f.log_end_offset < high_watermark || f.log_end_offset < epoch_start {
            return None;
        }
        Some(self.in_assignment_order(|r| self.isr.contains(&r) || r == id))
    }

    /// The ISR to propose without the followers that have not caught up for `lag_ms`.
    pub fn shrink(&self, now_ms: i64, lag_ms: i64) -> Option<Vec<i32>> {
        if self.proposed.is_some() {
            return None;
        }
        let lagging: Vec<i32> = self
            .followers
            .iter()
            .filter(|f| self.isr.contains(&f.id) && now_ms - f.last_caught_up_ms > lag_ms)
            .map(|f| f.id)
            .collect();
        if lagging.is_empty() {
            return None;
        }
        Some(self.in_assignment_order(|r| self.isr.contains(&r) && !lagging.contains(&r)))
    }

    /// An AlterPartition for `isr` is in flight.
    pub fn propose(&mut self, isr: Vec<i32>) {
        debug_assert!(self.proposed.is_none(), "one ISR change at a time");
        debug_assert!(isr.contains(&self.leader));
        self.proposed = Some(isr);
    }

    /// The proposal in flight was lost (not answered): the committed ISR stands, and
    /// the next occasion may propose again.
    pub fn proposal_failed(&mut self) {
        self.proposed = None;
    }

    /// The controller refused the proposal in flight, computed in partition epoch
    /// `epoch`, when its metadata was at `version`: the committed ISR stands, and
    /// nothing is proposed again until this leader's metadata is newer than that —
    /// unless this leader already took up a newer partition epoch (the change that
    /// overtook the proposal, such as a replica's directory, reached it first), which
    /// the next proposal is computed from.
    pub fn proposal_refused(&mut self, version: u64, epoch: i32) {
        self.proposed = None;
        if self.partition_epoch > epoch {
            return;
        }
        self.refused_at = Some(self.refused_at.map_or(version, |v| v.max(version)));
    }

    /// Whether a proposal may be made while this leader's metadata is at `version`.
    pub fn may_propose(&self, version: u64) -> bool {
        self.refused_at.is_none_or(|r| version > r)
    }

    fn in_assignment_order(&self, keep: impl Fn(i32) -> bool) -> Vec<i32> {
        self.replicas.iter().copied().filter(|r| keep(*r)).collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn three() -> ReplicaSet {
        ReplicaSet::new(
            1,
            Assignment {
                replicas: vec![1, 2, 3],
                isr: vec![1, 2, 3],
                partition_epoch: 0,
            },
            1_000,
        )
    }

    #[test]
    fn the_high_watermark_waits_for_every_isr_member() {
        let mut s = three();
        // Nobody fetched yet: nothing is committed beyond what followers confirmed.
        assert_eq!(s.high_watermark_bound(10, 1), Some(-1));
        assert!(s.record_fetch(2, 10, 10, 1_100));
        assert_eq!(s.high_watermark_bound(10, 1), Some(-1));
        assert!(s.record_fetch(3, 7, 10, 1_100));
        assert_eq!(s.high_watermark_bound(10, 1), Some(7));
        // The leader's own durable end bounds it too.
        assert_eq!(s.high_watermark_bound(5, 1), Some(5));
        assert!(!s.record_fetch(9, 10, 10, 1_100), "not a replica");
    }

    #[test]
    fn a_shrink_counts_only_once_committed_and_min_insync_holds_it() {
        let mut s = three();
        s.record_fetch(2, 10, 10, 1_000);
        s.record_fetch(3, 4, 10, 1_000);
        assert_eq!(s.shrink(20_000, 30_000), None, "within the lag time");
        // Follower 2 keeps up; 3 stays behind past the lag time.
        s.record_fetch(2, 20, 20, 40_000);
        assert_eq!(s.shrink(40_000, 30_000), Some(vec![1, 2]));
        s.propose(vec![1, 2]);
        assert_eq!(s.high_watermark_bound(20, 2), Some(4), "3 still counts");
        assert_eq!(s.shrink(40_000, 30_000), None, "one proposal at a time");
        s.update(
            Assignment {
                replicas: vec![1, 2, 3],
                isr: vec![1, 2],
                partition_epoch: 1,
            },
            40_001,
        );
        assert_eq!(s.proposal(), None);
        assert_eq!(s.high_watermark_bound(20, 2), Some(20));
        assert_eq!(
            s.high_watermark_bound(20, 3),
            None,
            "ISR below min.insync.replicas"
        );
    }

    #[test]
    fn a_follower_rejoins_once_it_reaches_the_high_watermark() {
        let mut s = ReplicaSet::new(
            1,
            Assignment {
                replicas: vec![1, 2, 3],
                isr: vec![1, 2],
                partition_epoch: 4,
            },
            0,
        );
        s.record_fetch(2, 50, 50, 10);
        s.record_fetch(3, 30, 50, 10);
        assert_eq!(
            s.expansion(3, 50, 0),
            None,
            "3 is behind the high watermark"
        );
        s.record_fetch(3, 50, 50, 20);
        assert_eq!(
            s.expansion(3, 50, 60),
            None,
            "3 lacks the current epoch's start"
        );
        assert_eq!(s.expansion(2, 50, 40), None, "2 is in the ISR already");
        let isr = s.expansion(3, 50, 40).expect("3 rejoins");
        assert_eq!(isr, vec![1, 2, 3]);
        s.propose(isr);
        // A joining follower counts at once.
        s.record_fetch(3, 45, 60, 30);
        assert_eq!(s.high_watermark_bound(60, 1), Some(45));
        s.proposal_failed();
        assert_eq!(s.high_watermark_bound(60, 1), Some(50));
    }

    /// Broker 3 stopped fetching at the log end of an idle partition (fenced, paused):
    /// 2's fetches never propose it, and a refused proposal waits for newer metadata.
    #[test]
    fn only_the_fetching_follower_joins_and_a_refusal_is_not_repeated() {
        let mut s = ReplicaSet::new(
            1,
            Assignment {
                replicas: vec![1, 2, 3],
                isr: vec![1],
                partition_epoch: 4,
            },
            0,
        );
        s.record_fetch(3, 50, 50, 10);
        s.record_fetch(2, 50, 50, 10);
        assert_eq!(s.expansion(2, 50, 0), Some(vec![1, 2]));
        assert_eq!(s.expansion(3, 50, 0), Some(vec![1, 3]));
        s.propose(vec![1, 3]);
        assert_eq!(s.expansion(2, 50, 0), None, "one change at a time");
        s.proposal_refused(70, 4);
        assert!(!s.may_propose(70) && !s.may_propose(69));
        assert!(s.may_propose(71), "the metadata moved past the refusal");
        s.proposal_refused(60, 4);
        assert!(
            !s.may_propose(70),
            "an older refusal does not lift a newer one"
        );
        // A refusal of a proposal older than the partition epoch this leader already
        // took up does not hold back the next.
        s.proposal_refused(80, 3);
        assert!(s.may_propose(71));
        // A lost proposal (no answer) may be made again at once.
        s.propose(vec![1, 2]);
        s.proposal_failed();
        assert!(!s.may_propose(70));
        // A new partition epoch is a new state: the refusal no longer holds.
        s.update(
            Assignment {
                replicas: vec![1, 2, 3],
                isr: vec![1],
                partition_epoch: 5,
            },
            20,
        );
        assert!(s.may_propose(0));
    }

    #[test]
    fn caught_up_as_of_the_previous_fetch() {
        let mut s = three();
        s.record_fetch(2, 10, 10, 1_000);
        // The leader grew meanwhile; the follower reached what the leader had at its last fetch.
        s.record_fetch(2, 10, 15, 5_000);
        assert_eq!(s.followers()[0].last_caught_up_ms, 1_000);
        s.record_fetch(2, 15, 25, 9_000);
        assert_eq!(s.followers()[0].last_caught_up_ms, 5_000);
    }

    #[test]
    fn stale_metadata_is_ignored_and_replicas_follow_the_assignment() {
        let mut s = three();
        s.update(
            Assignment {
                replicas: vec![1, 2],
                isr: vec![1, 2],
                partition_epoch: 3,
            },
            0,
        );
        assert_eq!(s.followers().len(), 1);
        s.update(
            Assignment {
                replicas: vec![1, 2, 3],
                isr: vec![1, 2, 3],
                partition_epoch: 2,
            },
            0,
        );
        assert_eq!(s.isr(), &[1, 2]);
    }
}
