//! One consumer group's state machine (the classic protocol, as Kafka's GroupCoordinator).
//!
//! ```text
//!   Empty ──join──▶ PreparingRebalance ──all joined / timeout──▶ CompletingRebalance
//!     ▲                 ▲        ▲                                   │ leader's SyncGroup
//!     │ last member     │ join,  │ leave, session expiry,            ▼
//!     └── leaves ───────┘ leave  └──────────────────────────────── Stable
//! ```
//!
//! All methods are synchronous: they change the state and complete the waiting JoinGroup
//! / SyncGroup answers through their oneshot channels, so the coordinator never holds a
//! borrow across an `.await`. Time comes in as an argument (deterministic in tests).
//!
//! Invariants: `generation` only grows; every member in `members` has a unique id; in
//! `CompletingRebalance` and `Stable` the group has a leader that is a member and a
//! selected protocol every member supports; a JoinGroup answer is sent exactly once per
//! waiting join (a new join from the same member answers the old one first).
//!
//! Offsets: `offsets` holds what is committed, each with the offset of the record that
//! committed it; of two commits of one partition the later record wins, whatever order
//! they reach the state in ([`Group::put_committed`]). Offsets committed in a producer's
//! transaction (TxnOffsetCommit) wait in `pending_txn` until the transaction's marker:
//! a commit makes those written before the marker committed (unless a later record
//! committed the partition meanwhile), an abort drops them (Kafka's
//! `OffsetMetadataManager`). Pending offsets are never answered by OffsetFetch; with
//! `require_stable` their partitions are UNSTABLE_OFFSET_COMMIT. A tombstone removes the
//! committed offset and the pending ones written before it.
//!
//! Not here: persistence and timers (the coordinator drives both), assignment (the
//! leader computes it on the client, as the protocol intends).

mod migration;

use super::types::*;
use bytes::Bytes;
use futures::channel::oneshot;
use std::collections::{BTreeMap, HashMap};
use std::time::{Duration, Instant};

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum GroupState {
    Empty,
    PreparingRebalance,
    CompletingRebalance,
    Stable,
    Dead,
}

impl GroupState {
    pub fn name(self) -> &'static str {
        match self {
            GroupState::Empty => "Empty",
            GroupState::PreparingRebalance => "PreparingRebalance",
            GroupState::CompletingRebalance => "CompletingRebalance",
            GroupState::Stable => "Stable",
            GroupState::Dead => "Dead",
        }
    }
}

pub struct Member {
    pub id: String,
    pub instance_id: Option<String>,
    pub client_id: String,
    pub client_host: String,
    pub session_timeout: Duration,
    pub rebalance_timeout: Duration,
    pub protocols: Vec<Protocol>,
    pub assignment: Bytes,
    pub last_heartbeat: Instant,
    /// The member epoch it had in the consumer group this group was downgraded from
    /// (`state/migration.rs`), taken as its generation until it rejoins: a member that
    /// had not caught up with the group's last epoch heartbeats and commits on under
    /// its own while the group prepares the rebalance, instead of being fenced.
    pub carried_epoch: Option<i32>,
    join_waiter: Option<oneshot::Sender<JoinAnswer>>,
    sync_waiter: Option<oneshot::Sender<SyncAnswer>>,
}

impl Member {
    fn metadata_for(&self, protocol: &str) -> Bytes {
        self.protocols
            .iter()
            .find(|p| p.name == protocol)
            .map(|p| p.metadata.clone())
            .unwrap_or_default()
    }
}

pub struct Group {
    pub id: String,
    pub state: GroupState,
    pub protocol_type: Option<String>,
    pub protocol: Option<String>,
    pub generation: i32,
    pub leader: Option<String>,
    pub members: BTreeMap<String, Member>,
    /// Member ids handed out with MEMBER_ID_REQUIRED, not yet joined (KIP-394), with when.
    pub pending: HashMap<String, Instant>,
    /// group.instance.id → member id (static membership).
    pub instances: HashMap<String, String>,
    pub offsets: BTreeMap<(String, i32), Committed>,
    /// Offsets committed in transactions not yet ended, by producer id. A producer's
    /// entry stays, even emptied by tombstones, while its transaction is open here
    /// (Kafka's `openTransactionsByGroup`): the group lives on until it ends.
    pub pending_txn: BTreeMap<i64, BTreeMap<(String, i32), Committed>>,
    /// PreparingRebalance: when the join phase ends whoever has rejoined.
    rebalance_deadline: Option<Instant>,
    /// PreparingRebalance from Empty: joins are collected at least until then
    /// (Kafka's group.initial.rebalance.delay.ms).
    join_not_before: Option<Instant>,
    /// Changes since the last persisted snapshot of the group's metadata.
    pub dirty: bool,
    /// When the group last became Empty (offset retention counts from here).
    pub empty_since: Instant,
    /// Set when the group uses the consumer protocol (KIP-848): its membership lives
    /// there, and the classic fields above stay empty. Committed offsets are the
    /// group's either way.
    pub consumer: Option<crate::group::consumer::group::ConsumerGroup>,
}

/// What a member id the coordinator makes adds to the client's id: a dash and a UUID
/// in its 36-character form.
pub const GENERATED_MEMBER_ID_SUFFIX_LEN: usize = 37;

/// Kafka's defaults for what a member may ask for.
pub const SESSION_TIMEOUT_MS_MIN: i32 = 1_000;
pub const SESSION_TIMEOUT_MS_MAX: i32 = 1_800_000;

impl Group {
    pub fn new(id: String) -> Group {
        Group {
            id,
            state: GroupState::Empty,
            protocol_type: None,
            protocol: None,
            generation: 0,
            leader: None,
            members: BTreeMap::new(),
            pending: HashMap::new(),
            instances: HashMap::new(),
            offsets: BTreeMap::new(),
            pending_txn: BTreeMap::new(),
            rebalance_deadline: None,
            join_not_before: None,
            dirty: false,
            empty_since: Instant::now(),
            consumer: None,
        }
    }

    pub fn is_empty(&self) -> bool {
        self.members.is_empty() && self.consumer.as_ref().is_none_or(|c| c.is_empty())
    }

    /// Takes the group's stored record as the group (the replay of its offsets
    /// partition by a new coordinator, Kafka's `GroupMetadataManager.replay`): its
    /// generation, protocol, leader and members with their subscriptions and
    /// assignments, Stable if it has members (Empty if not). Each member's session
    /// starts now: a member alive goes on heartbeating under its generation, one that
    /// died with the old coordinator expires after its session timeout.
    pub fn restore(&mut self, v: super::offsets_record::GroupValue, now: Instant) {
        for m in self.members.values_mut() {
            // Nothing waits on a group being replayed; answered as on unload all the same.
            if let Some(w) = m.join_waiter.take() {
                let _ = w.send(JoinAnswer::error(GroupError::NotCoordinator, m.id.clone()));
            }
            if let Some(w) = m.sync_waiter.take() {
                let _ = w.send(SyncAnswer::error(GroupError::NotCoordinator));
            }
        }
        self.members.clear();
        self.instances.clear();
        self.pending.clear();
        self.rebalance_deadline = None;
        self.join_not_before = None;
        self.generation = v.generation;
        self.protocol_type = Some(v.protocol_type);
        self.protocol = v.protocol;
        self.leader = v.leader;
        for mv in v.members {
            let protocols = self
                .protocol
                .iter()
                .map(|name| Protocol {
                    name: name.clone(),
                    metadata: mv.subscription.clone(),
                })
                .collect();
            if let Some(instance) = &mv.group_instance_id {
                self.instances
                    .insert(instance.clone(), mv.member_id.clone());
            }
            let to_duration = |ms: i32| Duration::from_millis(u64::try_from(ms).unwrap_or(0));
            let member = Member {
                id: mv.member_id.clone(),
                instance_id: mv.group_instance_id,
                client_id: mv.client_id,
                client_host: mv.client_host,
                session_timeout: to_duration(mv.session_timeout_ms),
                rebalance_timeout: to_duration(mv.rebalance_timeout_ms),
                protocols,
                assignment: mv.assignment,
                last_heartbeat: now,
                carried_epoch: None,
                join_waiter: None,
                sync_waiter: None,
            };
            self.members.insert(mv.member_id, member);
        }
        if self.members.is_empty() {
            self.state = GroupState::Empty;
            self.leader = None;
            self.empty_since = now;
        } else {
            self.state = GroupState::Stable;
        }
        self.dirty = false;
    }

    fn new_member_id(client_id: &str) -> String {
        let id = format!("{client_id}-{}", uuid::Uuid::new_v4());
        debug_assert_eq!(id.len(), client_id.len() + GENERATED_MEMBER_ID_SUFFIX_LEN);
        id
    }

    /// Handles a JoinGroup. The answer arrives on `reply`, at once for errors and
    /// KIP-394's MEMBER_ID_REQUIRED, otherwise when the join phase completes.
    pub fn join(
        &mut self,
        req: JoinRequest,
        now: Instant,
        initial_delay: Duration,
        reply: oneshot::Sender<JoinAnswer>,
    ) {
        if req.session_timeout_ms < SESSION_TIMEOUT_MS_MIN
            || req.session_timeout_ms > SESSION_TIMEOUT_MS_MAX
        {
            let _ = reply.send(JoinAnswer::error(
                GroupError::InvalidSessionTimeout,
                req.member_id,
            ));
            return;
        }
        if req.protocols.is_empty() || req.protocol_type.is_empty() {
            let _ = reply.send(JoinAnswer::error(
                GroupError::InconsistentGroupProtocol,
                req.member_id,
            ));
            return;
        }
        if !self.is_empty() {
            let same_type = self.protocol_type.as_deref() == Some(req.protocol_type.as_str());
            let common = self.protocol_in_common_with(&req.protocols, Some(&req.member_id));
            if !same_type || !common {
                let _ = reply.send(JoinAnswer::error(
                    GroupError::InconsistentGroupProtocol,
                    req.member_id,
                ));
                return;
            }
        }
        let mut member_id = req.member_id.clone();
        let mut static_rejoin = false;
        if member_id.is_empty() {
            if let Some(instance) = &req.group_instance_id {
                // Static member: a restart takes over its old identity without waiting for
                // the session to expire.
                member_id = Self::new_member_id(&req.client_id);
                if let Some(old) = self.instances.insert(instance.clone(), member_id.clone()) {
                    if let Some(mut m) = self.members.remove(&old) {
                        m.id = member_id.clone();
                        if let Some(w) = m.join_waiter.take() {
                            let _ = w
                                .send(JoinAnswer::error(GroupError::FencedInstanceId, old.clone()));
                        }
                        if let Some(w) = m.sync_waiter.take() {
                            let _ = w.send(SyncAnswer::error(GroupError::FencedInstanceId));
                        }
                        self.members.insert(member_id.clone(), m);
                        if self.leader.as_deref() == Some(old.as_str()) {
                            self.leader = Some(member_id.clone());
                        }
                        self.dirty = true;
                        static_rejoin = true;
                    }
                }
            } else if req.require_known_member_id {
                let id = Self::new_member_id(&req.client_id);
                self.pending.insert(id.clone(), now);
                let _ = reply.send(JoinAnswer::error(GroupError::MemberIdRequired, id));
                return;
            } else {
                member_id = Self::new_member_id(&req.client_id);
            }
        } else if !self.members.contains_key(&member_id)
            && self.pending.remove(&member_id).is_none()
        {
            let _ = reply.send(JoinAnswer::error(GroupError::UnknownMemberId, member_id));
            return;
        }
        if let Some(instance) = &req.group_instance_id {
            if let Some(owner) = self.instances.get(instance) {
                if owner != &member_id {
                    let _ = reply.send(JoinAnswer::error(GroupError::FencedInstanceId, member_id));
                    return;
                }
            }
            self.instances.insert(instance.clone(), member_id.clone());
        }

        let session_timeout =
            Duration::from_millis(u64::try_from(req.session_timeout_ms).unwrap_or(0));
        let rebalance_timeout = Duration::from_millis(
            u64::try_from(req.rebalance_timeout_ms.max(req.session_timeout_ms)).unwrap_or(0),
        );
        let existing = self.members.remove(&member_id);
        let protocols_changed = existing
            .as_ref()
            .map(|m| m.protocols != req.protocols)
            .unwrap_or(true);
        let mut member = existing.unwrap_or_else(|| Member {
            id: member_id.clone(),
            instance_id: req.group_instance_id.clone(),
            client_id: req.client_id.clone(),
            client_host: req.client_host.clone(),
            session_timeout,
            rebalance_timeout,
            protocols: Vec::new(),
            assignment: Bytes::new(),
            last_heartbeat: now,
            carried_epoch: None,
            join_waiter: None,
            sync_waiter: None,
        });
        if let Some(old) = member.join_waiter.take() {
            // A member that joins again before its previous join was answered: the old
            // request is superseded (the client has given up on it).
            let _ = old.send(JoinAnswer::error(
                GroupError::RebalanceInProgress,
                member_id.clone(),
            ));
        }
        member.protocols = req.protocols;
        member.carried_epoch = None;
        member.session_timeout = session_timeout;
        member.rebalance_timeout = rebalance_timeout;
        member.last_heartbeat = now;
        member.join_waiter = Some(reply);
        self.protocol_type = Some(req.protocol_type);
        self.members.insert(member_id.clone(), member);
        self.dirty = true;

        let is_leader = self.leader.as_deref() == Some(member_id.as_str());
        // A restarted static member's metadata differs from its old instance's (a
        // cooperative assignor's owned partitions and generation start empty); Kafka lets
        // it back without a rebalance as long as the group's protocol stays the one
        // selected, and so do we.
        let static_rejoin_keeps_protocol =
            static_rejoin && self.protocol.is_some() && self.select_protocol() == self.protocol;
        match self.state {
            GroupState::PreparingRebalance => {}
            GroupState::Stable
                if static_rejoin_keeps_protocol
                    || (!protocols_changed && !is_leader && !static_rejoin) =>
            {
                // A follower rejoining with unchanged metadata, or a restarted static
                // member (KIP-345, even the leader): answer with the current generation,
                // no rebalance, as Kafka does. A static leader is told to skip computing
                // an assignment (KIP-814): the group keeps the one it has.
                let mut answer = self.join_answer_for(&member_id);
                answer.skip_assignment = static_rejoin && is_leader;
                if let Some(m) = self.members.get_mut(&member_id) {
                    if let Some(w) = m.join_waiter.take() {
                        let _ = w.send(answer);
                    }
                }
            }
            GroupState::Empty => self.prepare_rebalance(now, Some(now + initial_delay)),
            GroupState::CompletingRebalance | GroupState::Stable | GroupState::Dead => {
                self.prepare_rebalance(now, None)
            }
        }
        self.try_complete_join(now);
    }

    fn protocol_in_common_with(&self, protocols: &[Protocol], except: Option<&str>) -> bool {
        protocols.iter().any(|p| {
            self.members
                .values()
                .filter(|m| Some(m.id.as_str()) != except)
                .all(|m| m.protocols.iter().any(|q| q.name == p.name))
        })
    }

    fn prepare_rebalance(&mut self, now: Instant, not_before: Option<Instant>) {
        if self.state == GroupState::CompletingRebalance {
            // Members waiting for an assignment of the old generation must rejoin.
            for m in self.members.values_mut() {
                if let Some(w) = m.sync_waiter.take() {
                    let _ = w.send(SyncAnswer::error(GroupError::RebalanceInProgress));
                }
            }
        }
        let timeout = self
            .members
            .values()
            .map(|m| m.rebalance_timeout)
            .max()
            .unwrap_or(Duration::from_secs(5));
        self.state = GroupState::PreparingRebalance;
        self.rebalance_deadline = Some(now + timeout);
        self.join_not_before = not_before;
    }

    /// Ends the join phase if every member has rejoined (and the initial delay passed), or
    /// the rebalance timeout expired; members that did not rejoin are removed.
    pub fn try_complete_join(&mut self, now: Instant) {
        if self.state != GroupState::PreparingRebalance {
            return;
        }
        let all_joined = self.members.values().all(|m| m.join_waiter.is_some());
        let delay_over = self.join_not_before.map(|t| now >= t).unwrap_or(true);
        let timed_out = self.rebalance_deadline.map(|t| now >= t).unwrap_or(false);
        if !(timed_out || (all_joined && delay_over)) {
            return;
        }
        let missing: Vec<String> = self
            .members
            .values()
            .filter(|m| m.join_waiter.is_none())
            .map(|m| m.id.clone())
            .collect();
        for id in missing {
            self.remove_member(&id);
        }
        self.generation += 1;
        self.rebalance_deadline = None;
        self.join_not_before = None;
        self.dirty = true;
        if self.members.is_empty() {
            self.state = GroupState::Empty;
            self.empty_since = Instant::now();
            self.protocol = None;
            self.leader = None;
            return;
        }
        self.protocol = self.select_protocol();
        if self
            .leader
            .as_ref()
            .map(|l| !self.members.contains_key(l))
            .unwrap_or(true)
        {
            self.leader = self.members.keys().next().cloned();
        }
        self.state = GroupState::CompletingRebalance;
        let ids: Vec<String> = self.members.keys().cloned().collect();
        for id in ids {
            let answer = self.join_answer_for(&id);
            if let Some(w) = self.members.get_mut(&id).and_then(|m| m.join_waiter.take()) {
                let _ = w.send(answer);
            }
        }
    }

    /// The protocol all members support with the most first-choice votes (Kafka's rule).
    fn select_protocol(&self) -> Option<String> {
        let candidates: Vec<&String> = self
            .members
            .values()
            .next()?
            .protocols
            .iter()
            .map(|p| &p.name)
            .filter(|name| {
                self.members
                    .values()
                    .all(|m| m.protocols.iter().any(|p| &&p.name == name))
            })
            .collect();
        let mut votes: BTreeMap<&String, usize> = BTreeMap::new();
        for m in self.members.values() {
            if let Some(choice) = m
                .protocols
                .iter()
                .map(|p| &p.name)
                .find(|n| candidates.contains(n))
            {
                *votes.entry(choice).or_insert(0) += 1;
            }
        }
        candidates
            .iter()
            .max_by_key(|c| votes.get(*c).copied().unwrap_or(0))
            .map(|c| (*c).clone())
    }

    fn join_answer_for(&self, member_id: &str) -> JoinAnswer {
        let protocol = self.protocol.clone().unwrap_or_default();
        let is_leader = self.leader.as_deref() == Some(member_id);
        JoinAnswer {
            error: None,
            skip_assignment: false,
            generation: self.generation,
            protocol_type: self.protocol_type.clone(),
            protocol_name: self.protocol.clone(),
            leader: self.leader.clone().unwrap_or_default(),
            member_id: member_id.to_string(),
            members: if is_leader {
                self.members
                    .values()
                    .map(|m| JoinMember {
                        member_id: m.id.clone(),
                        group_instance_id: m.instance_id.clone(),
                        metadata: m.metadata_for(&protocol),
                    })
                    .collect()
            } else {
                Vec::new()
            },
        }
    }

    fn check_member(
        &self,
        member_id: &str,
        instance: Option<&String>,
        generation: i32,
    ) -> Result<(), GroupError> {
        if let Some(instance) = instance {
            if let Some(owner) = self.instances.get(instance) {
                if owner != member_id {
                    return Err(GroupError::FencedInstanceId);
                }
            }
        }
        let Some(m) = self.members.get(member_id) else {
            return Err(GroupError::UnknownMemberId);
        };
        let carried =
            self.state == GroupState::PreparingRebalance && m.carried_epoch == Some(generation);
        if generation != self.generation && !carried {
            return Err(GroupError::IllegalGeneration);
        }
        Ok(())
    }

    /// Handles a SyncGroup. Returns true when the group became Stable (its metadata and
    /// assignments should be persisted).
    pub fn sync(
        &mut self,
        req: SyncRequest,
        now: Instant,
        reply: oneshot::Sender<SyncAnswer>,
    ) -> bool {
        if let Err(e) = self.check_member(
            &req.member_id,
            req.group_instance_id.as_ref(),
            req.generation,
        ) {
            let _ = reply.send(SyncAnswer::error(e));
            return false;
        }
        let type_ok = req
            .protocol_type
            .as_ref()
            .map(|t| Some(t) == self.protocol_type.as_ref())
            .unwrap_or(true);
        let name_ok = req
            .protocol_name
            .as_ref()
            .map(|n| Some(n) == self.protocol.as_ref())
            .unwrap_or(true);
        if !type_ok || !name_ok {
            let _ = reply.send(SyncAnswer::error(GroupError::InconsistentGroupProtocol));
            return false;
        }
        if let Some(m) = self.members.get_mut(&req.member_id) {
            m.last_heartbeat = now;
        }
        match self.state {
            GroupState::PreparingRebalance => {
                let _ = reply.send(SyncAnswer::error(GroupError::RebalanceInProgress));
                false
            }
            GroupState::Stable => {
                let _ = reply.send(self.sync_answer_for(&req.member_id));
                false
            }
            GroupState::Empty | GroupState::Dead => {
                let _ = reply.send(SyncAnswer::error(GroupError::UnknownMemberId));
                false
            }
            GroupState::CompletingRebalance => {
                if let Some(m) = self.members.get_mut(&req.member_id) {
                    m.sync_waiter = Some(reply);
                }
                if self.leader.as_deref() != Some(req.member_id.as_str()) {
                    return false;
                }
                // The leader's assignment completes the rebalance for everyone.
                for m in self.members.values_mut() {
                    m.assignment = Bytes::new();
                }
                for (id, assignment) in req.assignments {
                    if let Some(m) = self.members.get_mut(&id) {
                        m.assignment = assignment;
                    }
                }
                self.state = GroupState::Stable;
                self.dirty = true;
                let ids: Vec<String> = self.members.keys().cloned().collect();
                for id in ids {
                    let answer = self.sync_answer_for(&id);
                    if let Some(w) = self.members.get_mut(&id).and_then(|m| m.sync_waiter.take()) {
                        let _ = w.send(answer);
                    }
                }
                true
            }
        }
    }

    fn sync_answer_for(&self, member_id: &str) -> SyncAnswer {
        SyncAnswer {
            error: None,
            protocol_type: self.protocol_type.clone(),
            protocol_name: self.protocol.clone(),
            assignment: self
                .members
                .get(member_id)
                .map(|m| m.assignment.clone())
                .unwrap_or_default(),
        }
    }

    pub fn heartbeat(&mut self, req: &HeartbeatRequest, now: Instant) -> Result<(), GroupError> {
        if self.state == GroupState::Empty || self.state == GroupState::Dead {
            return Err(GroupError::UnknownMemberId);
        }
        self.check_member(
            &req.member_id,
            req.group_instance_id.as_ref(),
            req.generation,
        )?;
        if let Some(m) = self.members.get_mut(&req.member_id) {
            m.last_heartbeat = now;
        }
        match self.state {
            GroupState::PreparingRebalance => Err(GroupError::RebalanceInProgress),
            _ => Ok(()),
        }
    }

    /// Checks that a commit may be made by this member in this generation.
    pub fn check_commit(&self, req: &CommitRequest) -> Result<(), GroupError> {
        if let Some(c) = &self.consumer {
            // Kafka's `ConsumerGroup.validateOffsetCommit`: outside the group protocol
            // only while the group is empty; a member at its epoch (see `check_commit`).
            if req.generation < 0 && c.is_empty() {
                return Ok(());
            }
            return c.check_commit(
                &req.member_id,
                req.generation,
                req.offsets.iter().map(|(t, p, ..)| (t.as_str(), *p)),
            );
        }
        if req.generation < 0 && req.member_id.is_empty() {
            // A commit from outside the group protocol: allowed while nobody is a member.
            return if self.is_empty() {
                Ok(())
            } else {
                Err(GroupError::UnknownMemberId)
            };
        }
        self.check_member(
            &req.member_id,
            req.group_instance_id.as_ref(),
            req.generation,
        )?;
        match self.state {
            // As Kafka: a member may still commit what it processed while the group
            // prepares a rebalance (clients commit in onJoinPrepare); only between the
            // join phase and the new assignment is its generation not settled.
            GroupState::CompletingRebalance => Err(GroupError::RebalanceInProgress),
            _ => Ok(()),
        }
    }

    /// Checks that a TxnOffsetCommit may be made (Kafka's
    /// `ClassicGroup.validateOffsetCommit` for a transactional commit): a request without
    /// member fields (v0–v2, or a producer outside the group protocol) is accepted in any
    /// state; one that names a member must be that member in this generation. Unlike a
    /// regular commit it is accepted during CompletingRebalance: the group's state is not
    /// enforced for transactional commits.
    pub fn check_txn_commit(&self, req: &TxnCommitRequest) -> Result<(), GroupError> {
        if self.state == GroupState::Dead {
            return Err(GroupError::CoordinatorNotAvailable);
        }
        if let Some(c) = &self.consumer {
            // A consumer-protocol group: its members are the consumer group's, whatever
            // protocol each speaks; the classic state below is not theirs.
            return c.check_txn_commit(
                &req.member_id,
                req.generation,
                req.offsets.iter().map(|(t, p, ..)| (t.as_str(), *p)),
            );
        }
        if req.generation < 0 && self.state == GroupState::Empty {
            return Ok(());
        }
        if req.generation >= 0 || !req.member_id.is_empty() || req.group_instance_id.is_some() {
            return self.check_member(
                &req.member_id,
                req.group_instance_id.as_ref(),
                req.generation,
            );
        }
        Ok(())
    }

    /// Takes `c` as the committed offset of `key` unless the one held was committed by a
    /// later record; returns whether it was taken.
    pub fn put_committed(&mut self, key: (String, i32), c: Committed) -> bool {
        match self.offsets.get(&key) {
            Some(held) if held.record_offset > c.record_offset => false,
            _ => {
                self.offsets.insert(key, c);
                true
            }
        }
    }

    /// An offset committed in `producer_id`'s transaction: pending until its marker. A
    /// later record of the same transaction replaces an earlier one.
    pub fn put_pending(&mut self, producer_id: i64, key: (String, i32), c: Committed) {
        let pending = self.pending_txn.entry(producer_id).or_default();
        if pending
            .get(&key)
            .is_none_or(|held| held.record_offset < c.record_offset)
        {
            pending.insert(key, c);
        }
    }

    /// `producer_id`'s transaction ended with the marker at `marker_offset`: its pending
    /// offsets written before the marker become committed (`commit`) or are dropped.
    /// Those written after it belong to a later transaction and stay pending. Returns
    /// whether the producer still has a transaction open in this group.
    pub fn complete_txn(&mut self, producer_id: i64, commit: bool, marker_offset: i64) -> bool {
        let Some(pending) = self.pending_txn.get_mut(&producer_id) else {
            return false;
        };
        let ended: Vec<(String, i32)> = pending
            .iter()
            .filter(|(_, c)| c.record_offset < marker_offset)
            .map(|(k, _)| k.clone())
            .collect();
        let still_open = ended.len() < pending.len();
        let mut done = Vec::with_capacity(ended.len());
        for key in ended {
            if let Some(c) = pending.remove(&key) {
                done.push((key, c));
            }
        }
        if !still_open {
            self.pending_txn.remove(&producer_id);
        }
        if commit {
            for (key, c) in done {
                self.put_committed(key, c);
            }
        }
        still_open
    }

    /// Whether the group holds any offset, committed or pending.
    pub fn has_offsets(&self) -> bool {
        !self.offsets.is_empty() || self.pending_txn.values().any(|p| !p.is_empty())
    }

    /// Whether a transaction that has not ended committed an offset of `key`.
    pub fn has_pending(&self, key: &(String, i32)) -> bool {
        self.pending_txn.values().any(|p| p.contains_key(key))
    }

    /// A tombstone of `key` at `record_offset`: the committed offset and every pending
    /// one written before it go (a commit written after it stays, as a replay of the
    /// log would have it).
    pub fn apply_tombstone(&mut self, key: &(String, i32), record_offset: i64) {
        if self
            .offsets
            .get(key)
            .is_some_and(|c| c.record_offset < record_offset)
        {
            self.offsets.remove(key);
        }
        for pending in self.pending_txn.values_mut() {
            if pending
                .get(key)
                .is_some_and(|c| c.record_offset < record_offset)
            {
                pending.remove(key);
            }
        }
    }

    /// OffsetFetch's rows: the named partitions (`None`: every committed one), each its
    /// committed offset or none — or UNSTABLE_OFFSET_COMMIT with `require_stable` where a
    /// transactional commit is pending (Kafka answers so per partition, offset -1).
    pub fn fetch_offsets(
        &self,
        topics: Option<Vec<(String, Vec<i32>)>>,
        require_stable: bool,
    ) -> Vec<OffsetRow> {
        let row = |key: (String, i32), c: Option<&Committed>| {
            let told = if require_stable && self.has_pending(&key) {
                Err(GroupError::UnstableOffsetCommit)
            } else {
                Ok(c.cloned())
            };
            (key.0, key.1, told)
        };
        match topics {
            // Every committed offset; a partition that only has a pending one is not
            // listed (as Kafka's fetchAllOffsets).
            None => self
                .offsets
                .iter()
                .map(|(k, c)| row(k.clone(), Some(c)))
                .collect(),
            Some(list) => list
                .into_iter()
                .flat_map(|(t, ps)| ps.into_iter().map(move |p| (t.clone(), p)))
                .map(|k| {
                    let c = self.offsets.get(&k);
                    row(k, c)
                })
                .collect(),
        }
    }

    pub fn leave(
        &mut self,
        members: &[LeavingMember],
        now: Instant,
    ) -> Vec<Result<(), GroupError>> {
        let mut results = Vec::with_capacity(members.len());
        let mut left = false;
        for l in members {
            let id = if l.member_id.is_empty() {
                l.group_instance_id
                    .as_ref()
                    .and_then(|i| self.instances.get(i).cloned())
            } else {
                Some(l.member_id.clone())
            };
            match id {
                Some(id) if self.members.contains_key(&id) => {
                    let fenced = l
                        .group_instance_id
                        .as_ref()
                        .and_then(|i| self.instances.get(i))
                        .is_some_and(|owner| owner != &id);
                    if fenced {
                        results.push(Err(GroupError::FencedInstanceId));
                        continue;
                    }
                    self.remove_member(&id);
                    left = true;
                    results.push(Ok(()));
                }
                _ => results.push(Err(GroupError::UnknownMemberId)),
            }
        }
        if left {
            self.after_membership_change(now);
        }
        results
    }

    fn remove_member(&mut self, id: &str) {
        if let Some(mut m) = self.members.remove(id) {
            if let Some(w) = m.join_waiter.take() {
                let _ = w.send(JoinAnswer::error(
                    GroupError::UnknownMemberId,
                    id.to_string(),
                ));
            }
            if let Some(w) = m.sync_waiter.take() {
                let _ = w.send(SyncAnswer::error(GroupError::UnknownMemberId));
            }
            if let Some(instance) = &m.instance_id {
                if self
                    .instances
                    .get(instance)
                    .map(|o| o == id)
                    .unwrap_or(false)
                {
                    self.instances.remove(instance);
                }
            }
            if self.leader.as_deref() == Some(id) {
                self.leader = None;
            }
            self.dirty = true;
        }
    }

    fn after_membership_change(&mut self, now: Instant) {
        match self.state {
            GroupState::Stable | GroupState::CompletingRebalance => {
                if self.members.is_empty() {
                    self.state = GroupState::Empty;
                    self.empty_since = Instant::now();
                    self.generation += 1;
                    self.protocol = None;
                    self.leader = None;
                } else {
                    self.prepare_rebalance(now, None);
                }
            }
            GroupState::PreparingRebalance => self.try_complete_join(now),
            GroupState::Empty | GroupState::Dead => {}
        }
    }

    /// This coordinator stops serving the group (its `__consumer_offsets` partition moved
    /// away): it goes Dead, and every waiting JoinGroup and SyncGroup is answered
    /// NOT_COORDINATOR, which clients take as "find the coordinator again and rejoin
    /// there" — as Kafka's coordinator answers them when it unloads a group.
    pub fn unload(&mut self) {
        self.state = GroupState::Dead;
        for m in self.members.values_mut() {
            if let Some(w) = m.join_waiter.take() {
                let _ = w.send(JoinAnswer::error(GroupError::NotCoordinator, m.id.clone()));
            }
            if let Some(w) = m.sync_waiter.take() {
                let _ = w.send(SyncAnswer::error(GroupError::NotCoordinator));
            }
        }
    }

    /// Timers: expire members whose session ran out, end join phases that timed out,
    /// forget unclaimed KIP-394 member ids. Returns true if anything changed.
    pub fn tick(&mut self, now: Instant) -> bool {
        let before = (self.state, self.generation, self.members.len());
        let expired: Vec<String> = self
            .members
            .values()
            // A member waiting in a join is alive until the join phase ends.
            .filter(|m| {
                m.join_waiter.is_none() && now.duration_since(m.last_heartbeat) > m.session_timeout
            })
            .map(|m| m.id.clone())
            .collect();
        for id in &expired {
            tracing::info!(group = %self.id, member = %id, "session expired; removing member");
            self.remove_member(id);
        }
        if !expired.is_empty() {
            self.after_membership_change(now);
        }
        self.try_complete_join(now);
        self.pending.retain(|_, at| {
            now.duration_since(*at)
                < Duration::from_millis(SESSION_TIMEOUT_MS_MAX as u64).min(Duration::from_secs(300))
        });
        before != (self.state, self.generation, self.members.len())
    }

    pub fn describe(&self) -> GroupDescription {
        let protocol = self.protocol.clone().unwrap_or_default();
        let stable = matches!(self.state, GroupState::Stable);
        GroupDescription {
            group: self.id.clone(),
            state: self.state.name(),
            protocol_type: self.protocol_type.clone().unwrap_or_default(),
            protocol: protocol.clone(),
            members: self
                .members
                .values()
                .map(|m| DescribedMember {
                    member_id: m.id.clone(),
                    group_instance_id: m.instance_id.clone(),
                    client_id: m.client_id.clone(),
                    client_host: m.client_host.clone(),
                    metadata: m.metadata_for(&protocol),
                    assignment: if stable {
                        m.assignment.clone()
                    } else {
                        Bytes::new()
                    },
                })
                .collect(),
        }
    }

    /// Topics a member's consumer-protocol subscription names (for OffsetDelete).
    pub fn subscribed_topics(&self) -> Vec<String> {
        if let Some(c) = &self.consumer {
            return c.subscribed_topic_names();
        }
        let protocol = self.protocol.clone().unwrap_or_default();
        let mut out = Vec::new();
        if self.protocol_type.as_deref() != Some("consumer") {
            return out;
        }
        for m in self.members.values() {
            out.extend(consumer_subscription_topics(&m.metadata_for(&protocol)));
        }
        out
    }
}

/// The topics of a consumer-protocol subscription (`ConsumerProtocolSubscription`: int16
/// version, then an array of int16-length strings). Malformed input yields what parsed.
pub fn consumer_subscription_topics(bytes: &[u8]) -> Vec<String> {
    fn take<'a>(b: &mut &'a [u8], n: usize) -> Option<&'a [u8]> {
        let (head, tail) = (b.get(..n)?, b.get(n..)?);
        *b = tail;
        Some(head)
    }
    let mut b = bytes;
    let mut out = Vec::new();
    let _version = take(&mut b, 2);
    let Some(count) = take(&mut b, 4).map(|c| i32::from_be_bytes([c[0], c[1], c[2], c[3]])) else {
        return out;
    };
    for _ in 0..count.max(0) {
        let Some(len) = take(&mut b, 2).map(|l| i16::from_be_bytes([l[0], l[1]])) else {
            break;
        };
        let Some(name) = take(&mut b, usize::try_from(len).unwrap_or(0)) else {
            break;
        };
        out.push(String::from_utf8_lossy(name).into_owned());
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_stored_group_comes_back_stable_and_its_dead_members_expire() {
        use crate::group::offsets_record::{GroupValue, MemberValue};
        let member = |id: &str, instance: Option<&str>, session_ms: i32| MemberValue {
            member_id: id.into(),
            group_instance_id: instance.map(Into::into),
            client_id: "c".into(),
            client_host: "/127.0.0.1".into(),
            rebalance_timeout_ms: 60_000,
            session_timeout_ms: session_ms,
            subscription: Bytes::from_static(b"sub"),
            assignment: Bytes::from_static(b"assigned"),
        };
        let mut g = Group::new("g".into());
        let t0 = Instant::now();
        g.restore(
            GroupValue {
                protocol_type: "consumer".into(),
                generation: 7,
                protocol: Some("range".into()),
                leader: Some("a".into()),
                current_state_timestamp_ms: -1,
                members: vec![member("a", None, 45_000), member("b", Some("i-b"), 30_000)],
            },
            t0,
        );
        assert_eq!(g.state, GroupState::Stable);
        assert_eq!((g.generation, g.leader.as_deref()), (7, Some("a")));
        assert_eq!(g.instances.get("i-b").map(String::as_str), Some("b"));
        assert_eq!(g.members["a"].assignment, Bytes::from_static(b"assigned"));
        assert_eq!(
            g.members["a"].metadata_for("range"),
            Bytes::from_static(b"sub")
        );
        // A live member goes on under its generation, without a rebalance.
        let beat = |member: &str| HeartbeatRequest {
            group: "g".into(),
            generation: 7,
            member_id: member.into(),
            group_instance_id: None,
        };
        assert_eq!(g.heartbeat(&beat("a"), t0 + Duration::from_secs(8)), Ok(()));
        // b never comes back: its session runs out and the group rebalances without it.
        g.tick(t0 + Duration::from_secs(31));
        assert!(g.members.contains_key("a") && !g.members.contains_key("b"));
        assert_eq!(g.state, GroupState::PreparingRebalance);
        // A stored Empty group comes back Empty.
        g.restore(
            GroupValue {
                protocol_type: "consumer".into(),
                generation: 9,
                protocol: None,
                leader: None,
                current_state_timestamp_ms: -1,
                members: vec![],
            },
            t0,
        );
        assert_eq!(g.state, GroupState::Empty);
        assert!(g.members.is_empty() && g.instances.is_empty());
    }

    fn join_req(member: &str, protocols: &[&str]) -> JoinRequest {
        JoinRequest {
            group: "g".into(),
            member_id: member.into(),
            group_instance_id: None,
            client_id: "c".into(),
            client_host: "/127.0.0.1".into(),
            session_timeout_ms: 10_000,
            rebalance_timeout_ms: 10_000,
            protocol_type: "consumer".into(),
            protocols: protocols
                .iter()
                .map(|p| Protocol {
                    name: (*p).into(),
                    metadata: Bytes::from_static(b"meta"),
                })
                .collect(),
            require_known_member_id: true,
        }
    }

    fn join(g: &mut Group, req: JoinRequest, now: Instant) -> oneshot::Receiver<JoinAnswer> {
        let (tx, rx) = oneshot::channel();
        g.join(req, now, Duration::ZERO, tx);
        rx
    }

    /// The leader `member`'s SyncGroup of `generation`, assigning itself `assignment`.
    fn sync_req(member: &str, generation: i32, assignment: &'static [u8]) -> SyncRequest {
        SyncRequest {
            group: "g".into(),
            generation,
            member_id: member.into(),
            group_instance_id: None,
            protocol_type: Some("consumer".into()),
            protocol_name: Some("range".into()),
            assignments: vec![(member.into(), Bytes::from_static(assignment))],
        }
    }

    fn answer<T>(rx: &mut oneshot::Receiver<T>) -> Option<T> {
        rx.try_recv().ok().flatten()
    }

    #[test]
    fn two_step_join_then_rebalance_then_stable() {
        let now = Instant::now();
        let mut g = Group::new("g".into());
        let mut rx = join(&mut g, join_req("", &["range"]), now);
        let a = answer(&mut rx).expect("answered at once");
        assert_eq!(a.error, Some(GroupError::MemberIdRequired));
        let id = a.member_id;
        let mut rx = join(&mut g, join_req(&id, &["range"]), now);
        let a = answer(&mut rx).expect("single member completes the join");
        assert_eq!(a.error, None);
        assert_eq!(a.generation, 1);
        assert_eq!(a.leader, id);
        assert_eq!(a.members.len(), 1);
        assert_eq!(g.state, GroupState::CompletingRebalance);
        let (tx, mut srx) = oneshot::channel();
        let became_stable = g.sync(sync_req(&id, 1, b"assign"), now, tx);
        assert!(became_stable);
        assert_eq!(
            answer(&mut srx).expect("sync").assignment,
            Bytes::from_static(b"assign")
        );
        assert_eq!(g.state, GroupState::Stable);
        let hb = HeartbeatRequest {
            group: "g".into(),
            generation: 1,
            member_id: id.clone(),
            group_instance_id: None,
        };
        assert_eq!(g.heartbeat(&hb, now), Ok(()));
        let stale = HeartbeatRequest {
            generation: 0,
            ..hb.clone()
        };
        assert_eq!(g.heartbeat(&stale, now), Err(GroupError::IllegalGeneration));
        let unknown = HeartbeatRequest {
            member_id: "nobody".into(),
            ..hb
        };
        assert_eq!(g.heartbeat(&unknown, now), Err(GroupError::UnknownMemberId));
    }

    #[test]
    fn second_member_triggers_rebalance_and_waits_for_the_first() {
        let now = Instant::now();
        let mut g = Group::new("g".into());
        let mut r1 = join(&mut g, join_req("", &["range"]), now);
        let m1 = answer(&mut r1).expect("id").member_id;
        let mut r1 = join(&mut g, join_req(&m1, &["range"]), now);
        assert_eq!(answer(&mut r1).expect("gen 1").generation, 1);
        // m2 joins: PreparingRebalance until m1 rejoins.
        let mut r2 = join(&mut g, join_req("", &["range"]), now);
        let m2 = answer(&mut r2).expect("id").member_id;
        let mut r2 = join(&mut g, join_req(&m2, &["range"]), now);
        assert!(answer(&mut r2).is_none(), "waits for the other member");
        assert_eq!(g.state, GroupState::PreparingRebalance);
        let hb = HeartbeatRequest {
            group: "g".into(),
            generation: 1,
            member_id: m1.clone(),
            group_instance_id: None,
        };
        assert_eq!(g.heartbeat(&hb, now), Err(GroupError::RebalanceInProgress));
        let mut r1 = join(&mut g, join_req(&m1, &["range"]), now);
        let a1 = answer(&mut r1).expect("join completes");
        let a2 = answer(&mut r2).expect("join completes");
        assert_eq!(a1.generation, 2);
        assert_eq!(a2.generation, 2);
        assert_eq!(a1.leader, m1, "the leader stays the leader");
        assert_eq!(a1.members.len(), 2);
        assert!(a2.members.is_empty(), "followers get no member list");
    }

    #[test]
    fn unloading_answers_waiting_joins_and_syncs_not_coordinator() {
        let now = Instant::now();
        let mut g = Group::new("g".into());
        let mut r1 = join(&mut g, join_req("", &["range"]), now);
        let m1 = answer(&mut r1).expect("id").member_id;
        let mut r1 = join(&mut g, join_req(&m1, &["range"]), now);
        assert_eq!(answer(&mut r1).expect("gen 1").generation, 1);
        let (tx, mut s1) = oneshot::channel();
        g.sync(sync_req(&m1, 1, b"a"), now, tx);
        assert!(answer(&mut s1).is_some());
        // m2 waits in a join for m1 to rejoin when the partition moves away.
        let mut r2 = join(&mut g, join_req("", &["range"]), now);
        let m2 = answer(&mut r2).expect("id").member_id;
        let mut r2 = join(&mut g, join_req(&m2, &["range"]), now);
        assert!(answer(&mut r2).is_none(), "waits for the other member");
        g.unload();
        let a2 = answer(&mut r2).expect("answered on unload");
        assert_eq!(a2.error, Some(GroupError::NotCoordinator));
        assert_eq!(a2.member_id, m2);
        assert_eq!(g.state, GroupState::Dead);
    }

    #[test]
    fn a_member_that_does_not_rejoin_is_dropped_at_the_rebalance_timeout() {
        let now = Instant::now();
        let mut g = Group::new("g".into());
        let mut r1 = join(&mut g, join_req("", &["range"]), now);
        let m1 = answer(&mut r1).expect("id").member_id;
        let _r1 = join(&mut g, join_req(&m1, &["range"]), now);
        let mut r2 = join(&mut g, join_req("", &["range"]), now);
        let m2 = answer(&mut r2).expect("id").member_id;
        let mut r2 = join(&mut g, join_req(&m2, &["range"]), now);
        assert!(answer(&mut r2).is_none());
        g.tick(now + Duration::from_secs(11));
        let a2 = answer(&mut r2).expect("timed out join completes");
        assert_eq!(a2.generation, 2);
        assert_eq!(a2.leader, m2);
        assert!(!g.members.contains_key(&m1));
    }

    #[test]
    fn session_expiry_removes_a_silent_member() {
        let now = Instant::now();
        let mut g = Group::new("g".into());
        let mut r1 = join(&mut g, join_req("", &["range"]), now);
        let m1 = answer(&mut r1).expect("id").member_id;
        let _ = join(&mut g, join_req(&m1, &["range"]), now);
        assert_eq!(g.members.len(), 1);
        g.tick(now + Duration::from_secs(5));
        assert_eq!(g.members.len(), 1, "within the session timeout");
        g.tick(now + Duration::from_secs(11));
        assert!(g.members.is_empty());
        assert_eq!(g.state, GroupState::Empty);
    }

    #[test]
    fn inconsistent_protocols_are_refused() {
        let now = Instant::now();
        let mut g = Group::new("g".into());
        let mut r1 = join(&mut g, join_req("", &["range"]), now);
        let m1 = answer(&mut r1).expect("id").member_id;
        let _ = join(&mut g, join_req(&m1, &["range"]), now);
        let mut other = join_req("", &["roundrobin"]);
        other.require_known_member_id = false;
        let mut r = join(&mut g, other, now);
        assert_eq!(
            answer(&mut r).expect("refused").error,
            Some(GroupError::InconsistentGroupProtocol)
        );
        let mut wrong_type = join_req("", &["range"]);
        wrong_type.protocol_type = "connect".into();
        let mut r = join(&mut g, wrong_type, now);
        assert_eq!(
            answer(&mut r).expect("refused").error,
            Some(GroupError::InconsistentGroupProtocol)
        );
    }

    #[test]
    fn protocol_with_most_votes_among_common_ones() {
        let now = Instant::now();
        let mut g = Group::new("g".into());
        let mut ids = Vec::new();
        for prefs in [
            &["cooperative-sticky", "range"][..],
            &["range", "cooperative-sticky"],
            &["range", "cooperative-sticky"],
        ] {
            let mut req = join_req("", prefs);
            req.require_known_member_id = false;
            let _ = join(&mut g, req.clone(), now);
            ids.push(g.members.keys().cloned().collect::<Vec<_>>());
        }
        g.tick(now + Duration::from_secs(11));
        assert_eq!(g.protocol.as_deref(), Some("range"));
    }

    #[test]
    fn a_restarted_static_member_takes_its_place_without_a_rebalance() {
        let now = Instant::now();
        let mut g = Group::new("g".into());
        let mut ids = Vec::new();
        for instance in ["a", "b"] {
            let mut req = join_req("", &["range"]);
            req.group_instance_id = Some(instance.into());
            let (tx, rx) = oneshot::channel();
            // An initial delay lets both join the first generation.
            g.join(req, now, Duration::from_secs(1), tx);
            ids.push((instance, rx));
        }
        g.tick(now + Duration::from_secs(1));
        assert_eq!(g.members.len(), 2);
        let leader = g.leader.clone().expect("leader");
        let (tx, _srx) = oneshot::channel();
        let assignments = g
            .members
            .keys()
            .map(|id| (id.clone(), Bytes::from(id.clone())))
            .collect();
        g.sync(
            SyncRequest {
                group: "g".into(),
                generation: g.generation,
                member_id: leader.clone(),
                group_instance_id: None,
                protocol_type: None,
                protocol_name: None,
                assignments,
            },
            now,
            tx,
        );
        assert_eq!(g.state, GroupState::Stable);
        let generation = g.generation;
        let follower_instance = if g
            .members
            .get(&leader)
            .and_then(|m| m.instance_id.clone())
            .as_deref()
            == Some("a")
        {
            "b"
        } else {
            "a"
        };
        let old_id = g
            .instances
            .get(follower_instance)
            .cloned()
            .expect("static member");
        // The follower restarts: same group.instance.id, no member id, and metadata of
        // its own (a cooperative assignor's new instance owns nothing yet).
        let mut req = join_req("", &["range"]);
        req.group_instance_id = Some(follower_instance.into());
        req.protocols[0].metadata = Bytes::from_static(b"owns nothing yet");
        let mut rx = join(&mut g, req, now);
        let a = rx.try_recv().ok().flatten().expect("answered at once");
        assert_eq!(a.error, None);
        assert_eq!(a.generation, generation, "no rebalance");
        assert_ne!(a.member_id, old_id, "a new member id replaces the old one");
        assert_eq!(g.state, GroupState::Stable);
        assert!(!g.members.contains_key(&old_id));
        // The old incarnation is fenced.
        let hb = HeartbeatRequest {
            group: "g".into(),
            generation,
            member_id: old_id,
            group_instance_id: Some(follower_instance.into()),
        };
        assert_eq!(g.heartbeat(&hb, now), Err(GroupError::FencedInstanceId));
        for (_, mut rx) in ids {
            assert!(
                rx.try_recv().ok().flatten().is_some(),
                "every first join was answered"
            );
        }
    }

    fn committed(offset: i64, record_offset: i64) -> Committed {
        Committed {
            offset,
            leader_epoch: -1,
            metadata: String::new(),
            commit_timestamp_ms: 0,
            record_offset,
        }
    }

    fn key(p: i32) -> (String, i32) {
        ("t".into(), p)
    }

    /// What OffsetFetch tells of partition `p` (`None`: no offset).
    fn told(g: &Group, p: i32, require_stable: bool) -> Result<Option<i64>, GroupError> {
        let rows = g.fetch_offsets(Some(vec![("t".into(), vec![p])]), require_stable);
        assert_eq!(rows.len(), 1);
        rows.into_iter()
            .next()
            .map(|(_, _, c)| c.map(|c| c.map(|c| c.offset)))
            .unwrap_or(Ok(None))
    }

    #[test]
    fn pending_offsets_are_invisible_until_their_transaction_commits() {
        let mut g = Group::new("g".into());
        g.put_committed(key(0), committed(5, 1));
        g.put_pending(7, key(0), committed(50, 2));
        g.put_pending(7, key(1), committed(60, 3));
        assert_eq!(
            told(&g, 0, false),
            Ok(Some(5)),
            "the committed one, not the pending"
        );
        assert_eq!(told(&g, 1, false), Ok(None));
        assert_eq!(told(&g, 0, true), Err(GroupError::UnstableOffsetCommit));
        assert_eq!(told(&g, 1, true), Err(GroupError::UnstableOffsetCommit));
        assert_eq!(told(&g, 2, true), Ok(None), "nothing pending there");
        assert!(g.has_offsets());
        assert!(!g.complete_txn(7, true, 4), "nothing left open");
        assert_eq!(told(&g, 0, true), Ok(Some(50)));
        assert_eq!(told(&g, 1, true), Ok(Some(60)));
        assert!(g.pending_txn.is_empty());
    }

    #[test]
    fn an_abort_drops_the_pending_offsets_and_keeps_the_committed_ones() {
        let mut g = Group::new("g".into());
        g.put_committed(key(0), committed(5, 1));
        g.put_pending(7, key(0), committed(50, 2));
        g.put_pending(8, key(0), committed(80, 3));
        assert!(!g.complete_txn(7, false, 4));
        assert_eq!(told(&g, 0, false), Ok(Some(5)));
        assert_eq!(
            told(&g, 0, true),
            Err(GroupError::UnstableOffsetCommit),
            "producer 8's transaction is still open"
        );
        assert!(!g.complete_txn(8, false, 5));
        assert_eq!(told(&g, 0, true), Ok(Some(5)));
        // A marker for a producer with nothing pending changes nothing.
        assert!(!g.complete_txn(8, true, 6));
        assert_eq!(told(&g, 0, true), Ok(Some(5)));
    }

    #[test]
    fn the_later_record_wins_between_regular_and_transactional_commits() {
        // A regular commit written after the transactional one: it stays (Kafka keeps
        // the most recent by record offset).
        let mut g = Group::new("g".into());
        g.put_pending(7, key(0), committed(50, 10));
        g.put_committed(key(0), committed(5, 11));
        g.complete_txn(7, true, 12);
        assert_eq!(told(&g, 0, false), Ok(Some(5)));
        // A transactional commit written after the regular one replaces it.
        let mut g = Group::new("g".into());
        g.put_committed(key(0), committed(5, 10));
        g.put_pending(7, key(0), committed(50, 11));
        g.complete_txn(7, true, 12);
        assert_eq!(told(&g, 0, false), Ok(Some(50)));
        // Applied out of log order, the later record still wins.
        assert!(!g.put_committed(key(0), committed(4, 9)));
        assert_eq!(told(&g, 0, false), Ok(Some(50)));
    }

    #[test]
    fn a_marker_ends_only_what_was_written_before_it() {
        let mut g = Group::new("g".into());
        g.put_pending(7, key(0), committed(50, 10));
        g.put_pending(7, key(1), committed(60, 20)); // the producer's next transaction
        assert!(g.complete_txn(7, true, 15), "the next one is still open");
        assert_eq!(told(&g, 0, true), Ok(Some(50)));
        assert_eq!(told(&g, 1, true), Err(GroupError::UnstableOffsetCommit));
        assert!(!g.complete_txn(7, false, 25));
        assert_eq!(told(&g, 1, true), Ok(None));
    }

    #[test]
    fn a_tombstone_removes_what_was_written_before_it() {
        let mut g = Group::new("g".into());
        g.put_committed(key(0), committed(5, 1));
        g.put_pending(7, key(0), committed(50, 2));
        g.put_pending(8, key(0), committed(80, 4));
        g.apply_tombstone(&key(0), 3);
        assert_eq!(told(&g, 0, false), Ok(None));
        assert!(
            g.pending_txn.get(&7).is_some_and(|p| p.is_empty()),
            "emptied, the transaction still open"
        );
        assert!(!g.complete_txn(7, true, 5));
        assert_eq!(
            told(&g, 0, false),
            Ok(None),
            "producer 7's offset went with it"
        );
        g.complete_txn(8, true, 6);
        assert_eq!(
            told(&g, 0, false),
            Ok(Some(80)),
            "written after the tombstone"
        );
        // An older tombstone applied late removes nothing newer.
        g.apply_tombstone(&key(0), 3);
        assert_eq!(told(&g, 0, false), Ok(Some(80)));
    }

    #[test]
    fn fetching_every_offset_lists_the_committed_and_flags_the_pending() {
        let mut g = Group::new("g".into());
        g.put_committed(key(0), committed(5, 1));
        g.put_committed(key(1), committed(6, 2));
        g.put_pending(7, key(1), committed(60, 3));
        g.put_pending(7, key(2), committed(70, 4));
        let rows = |stable| {
            g.fetch_offsets(None, stable)
                .into_iter()
                .map(|(_, p, c)| (p, c.map(|c| c.map(|c| c.offset))))
                .collect::<Vec<_>>()
        };
        assert_eq!(rows(false), vec![(0, Ok(Some(5))), (1, Ok(Some(6)))]);
        assert_eq!(
            rows(true),
            vec![(0, Ok(Some(5))), (1, Err(GroupError::UnstableOffsetCommit))],
            "a partition with only a pending offset is not listed"
        );
    }

    fn txn_req(generation: i32, member: &str, instance: Option<&str>) -> TxnCommitRequest {
        TxnCommitRequest {
            group: "g".into(),
            transactional_id: "tx".into(),
            producer_id: 7,
            producer_epoch: 0,
            generation,
            member_id: member.into(),
            group_instance_id: instance.map(Into::into),
            offsets: Vec::new(),
            version: 3,
        }
    }

    #[test]
    fn transactional_commits_check_the_member_only_when_named() {
        let now = Instant::now();
        let mut g = Group::new("g".into());
        assert_eq!(
            g.check_txn_commit(&txn_req(-1, "", None)),
            Ok(()),
            "empty group"
        );
        assert_eq!(
            g.check_txn_commit(&txn_req(-1, "someone", None)),
            Ok(()),
            "generation -1 in an empty group, as Kafka"
        );
        let mut r = join(&mut g, join_req("", &["range"]), now);
        let id = answer(&mut r).expect("id").member_id;
        let mut r = join(&mut g, join_req(&id, &["range"]), now);
        assert_eq!(answer(&mut r).expect("gen 1").generation, 1);
        assert_eq!(g.state, GroupState::CompletingRebalance);
        // Unlike a regular commit, accepted while the rebalance completes.
        assert_eq!(g.check_txn_commit(&txn_req(1, &id, None)), Ok(()));
        // v0–v2 name no member: accepted whatever the group's state.
        assert_eq!(g.check_txn_commit(&txn_req(-1, "", None)), Ok(()));
        assert_eq!(
            g.check_txn_commit(&txn_req(0, &id, None)),
            Err(GroupError::IllegalGeneration)
        );
        assert_eq!(
            g.check_txn_commit(&txn_req(1, "nobody", None)),
            Err(GroupError::UnknownMemberId)
        );
        assert_eq!(
            g.check_txn_commit(&txn_req(-1, "nobody", None)),
            Err(GroupError::UnknownMemberId),
            "a member named in a non-empty group must be one"
        );
        g.instances.insert("inst".into(), id.clone());
        assert_eq!(
            g.check_txn_commit(&txn_req(1, "other", Some("inst"))),
            Err(GroupError::FencedInstanceId)
        );
        g.unload();
        assert_eq!(
            g.check_txn_commit(&txn_req(-1, "", None)),
            Err(GroupError::CoordinatorNotAvailable)
        );
    }

    #[test]
    fn subscription_topics_parse_and_tolerate_garbage() {
        let mut b = vec![0u8, 1, 0, 0, 0, 2];
        for t in ["a", "bc"] {
            b.extend_from_slice(&(t.len() as i16).to_be_bytes());
            b.extend_from_slice(t.as_bytes());
        }
        assert_eq!(consumer_subscription_topics(&b), vec!["a", "bc"]);
        for cut in 0..b.len() {
            let _ = consumer_subscription_topics(&b[..cut]);
        }
        assert!(consumer_subscription_topics(&[0, 1, 0x7f, 0xff, 0xff, 0xff]).is_empty());
    }
}
