//! Classic-protocol members inside a consumer group: KIP-848's online migration, as
//! Kafka's coordinator serves them. A consumer still on JoinGroup / SyncGroup /
//! Heartbeat joins a consumer group as any member does — the broker computes its
//! partitions — and learns them through the classic protocol:
//!
//! - JoinGroup runs the heartbeat's three steps for it, with the subscription and the
//!   partitions it owns read from its embedded-protocol metadata. It is answered at
//!   once, as a follower (no leader, no member list): its generation is its member
//!   epoch, its protocol the first it named.
//! - SyncGroup answers its assigned partitions, in the embedded-protocol version its
//!   metadata came in (REBALANCE_IN_PROGRESS if the group moved past its epoch since,
//!   unless it still has partitions to give up: it must first give them up).
//! - Heartbeat answers REBALANCE_IN_PROGRESS while it must rejoin to make progress:
//!   the group moved past its epoch, it has partitions to revoke, or partitions it
//!   waited for are free now. A cooperative consumer gives up what its new assignment
//!   lacks and rejoins; an eager one gives up everything and rejoins. Either way no
//!   partition is given to it while another member holds it, nor taken from it before
//!   it says it gave it up — the same reconciliation as for consumer-protocol members.
//! - A classic member learns of topic changes the classic way: its client rejoins when
//!   its subscribed topics' metadata changes, and the join bumps the group epoch.
//! - A member that was told to rejoin, or that joined, and does not rejoin or sync
//!   within its rebalance timeout is removed, as is one whose own session timeout
//!   passes without a heartbeat.
//!
//! [`ConsumerGroup::from_classic`] builds a consumer group from a classic one's members
//! (the upgrade): each keeps its generation as its epoch and its assignment as both
//! what it holds and its target, so nothing moves until the joining member's epoch bump.

use super::super::embedded::{self, NamedPartitions};
use super::*;
use crate::group::consumer::records::{ClassicMemberMetadata, ClassicProtocol};

/// The embedded protocol's type: the only one a consumer group takes.
pub const CONSUMER_PROTOCOL_TYPE: &str = "consumer";

/// A JoinGroup to a consumer group.
#[derive(Debug, Clone)]
pub struct ClassicJoin {
    /// The member id: the request's, or one made for a member that named none.
    pub member_id: String,
    /// The request named no member id.
    pub unknown_member: bool,
    pub instance_id: Option<String>,
    pub protocol_type: String,
    pub protocols: Vec<ClassicProtocol>,
    pub session_timeout_ms: i32,
    pub rebalance_timeout_ms: i32,
    pub client_id: String,
    pub client_host: String,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ClassicJoined {
    pub member_id: String,
    pub generation: i32,
    pub protocol_name: String,
}

/// A classic group's member, as an upgrade takes it in.
#[derive(Debug, Clone)]
pub struct ClassicSeed {
    pub member_id: String,
    pub instance_id: Option<String>,
    pub client_id: String,
    pub client_host: String,
    pub session_timeout_ms: i32,
    pub rebalance_timeout_ms: i32,
    pub protocols: Vec<ClassicProtocol>,
    /// Its metadata under the group's selected protocol.
    pub subscription: Vec<u8>,
    /// Its assignment of the group's last generation.
    pub assignment: Vec<u8>,
}

impl ConsumerGroup {
    /// A consumer group holding a classic group's members as they are, at its
    /// generation. Fails on a member whose embedded protocol does not parse.
    pub fn from_classic(
        id: String,
        generation: i32,
        seeds: Vec<ClassicSeed>,
        catalog: &impl TopicCatalog,
        config: &ConsumerGroupConfig,
        now_ms: i64,
    ) -> Result<ConsumerGroup, embedded::Malformed> {
        let mut g = ConsumerGroup::new(id);
        g.epoch = generation;
        g.assignment_epoch = generation;
        for seed in seeds {
            let subscription = embedded::parse_subscription(&seed.subscription)?;
            let mut assigned =
                named_to_ids(&embedded::parse_assignment(&seed.assignment)?, catalog);
            // A classic leader may have given a partition twice: the first keeps it.
            assigned.retain(|t, p| !g.holders.contains_key(&(t, p)));
            for key in assigned.partitions() {
                g.holders.insert(key, seed.member_id.clone());
            }
            let mut m = ConsumerMember::new(seed.member_id.clone());
            m.instance_id = seed.instance_id;
            m.rack_id = subscription.rack;
            m.client_id = seed.client_id;
            m.client_host = seed.client_host;
            m.subscribed_names = subscription.topics.into_iter().collect();
            m.rebalance_timeout_ms = seed.rebalance_timeout_ms;
            m.classic = Some(ClassicMemberMetadata {
                session_timeout_ms: seed.session_timeout_ms,
                protocols: seed.protocols,
            });
            m.assignment = MemberAssignment {
                state: MemberState::Stable,
                epoch: generation,
                previous_epoch: generation,
                assigned: assigned.clone(),
                pending_revocation: Assignment::new(),
            };
            m.session_deadline_ms = now_ms + i64::from(m.session_timeout_ms(config));
            if let Some(i) = &m.instance_id {
                g.static_members.insert(i.clone(), m.member_id.clone());
            }
            g.target.insert(m.member_id.clone(), assigned);
            g.members.insert(m.member_id.clone(), m);
        }
        g.subscribed = g.compute_subscribed(catalog, None);
        g.catalog_version = Some(catalog.version());
        g.check_invariants();
        Ok(g)
    }

    /// The records that delete every key of the group: its members' (those that just
    /// left included) and its own. For a group that becomes classic.
    pub fn all_tombstones(mut self) -> Vec<(RecordKey, Option<RecordValue>)> {
        let mut changes = self.take_changes();
        changes.removed.extend(self.members.keys().cloned());
        let members_gone = Changes {
            removed: changes.removed,
            ..Changes::default()
        };
        let mut out = self.records_for(&members_gone);
        out.extend(self.tombstones());
        out
    }

    /// Whether every member uses the classic protocol (a group with none does not).
    pub fn all_classic(&self) -> bool {
        !self.members.is_empty() && self.members.values().all(|m| m.classic.is_some())
    }

    /// A member's target assignment by topic name (for a classic group's assignment).
    pub fn target_named(&self, member_id: &str) -> NamedPartitions {
        self.target
            .get(member_id)
            .map(|a| self.ids_to_named(a))
            .unwrap_or_default()
    }

    /// Kafka's `supportsClassicProtocols`: the embedded protocol's type, and a
    /// protocol every classic member supports (any, in a group without one).
    fn supports_classic(&self, protocol_type: &str, protocols: &[ClassicProtocol]) -> bool {
        protocol_type == CONSUMER_PROTOCOL_TYPE
            && protocols.iter().any(|p| {
                self.members
                    .values()
                    .filter_map(|m| m.classic.as_ref())
                    .all(|c| c.protocols.iter().any(|q| q.name == p.name))
            })
    }

    /// A JoinGroup from a classic member (see the module doc).
    pub fn classic_join(
        &mut self,
        req: ClassicJoin,
        catalog: &impl TopicCatalog,
        config: &ConsumerGroupConfig,
        now_ms: i64,
    ) -> Result<ClassicJoined, GroupError> {
        if !self.supports_classic(&req.protocol_type, &req.protocols) {
            return Err(GroupError::InconsistentGroupProtocol);
        }
        let first = &req.protocols[0];
        let subscription = embedded::parse_subscription(&first.metadata)
            .map_err(|_| GroupError::InconsistentGroupProtocol)?;
        let protocol_name = first.name.clone();
        let member_id = req.member_id.clone();
        let existing = self.find_classic_joiner(&req)?;
        let is_new = existing.is_none();
        if is_new && self.members.len() >= config.max_size {
            return Err(GroupError::GroupMaxSizeReached);
        }
        let mut member = existing.unwrap_or_else(|| ConsumerMember::new(member_id.clone()));
        let before = member.clone();
        if let Some(i) = &req.instance_id {
            member.instance_id = Some(i.clone());
        }
        if let Some(r) = subscription.rack {
            member.rack_id = Some(r);
        }
        member.rebalance_timeout_ms = req.rebalance_timeout_ms;
        member.server_assignor = None;
        member.subscribed_names = subscription.topics.into_iter().collect();
        member.client_id = req.client_id;
        member.client_host = req.client_host;
        member.classic = Some(ClassicMemberMetadata {
            session_timeout_ms: req.session_timeout_ms,
            protocols: req.protocols,
        });
        let owned = named_to_ids(&subscription.owned, catalog);
        self.admit(
            member,
            &before,
            is_new,
            Some(&owned),
            None,
            catalog,
            config,
            now_ms,
        );
        let m = self.members.get_mut(&member_id).expect("admitted");
        // It must sync within its rebalance timeout.
        m.classic_deadline_ms = Some(now_ms + i64::from(m.rebalance_timeout_ms.max(0)));
        let joined = ClassicJoined {
            member_id,
            generation: m.assignment.epoch,
            protocol_name,
        };
        self.check_invariants();
        Ok(joined)
    }

    /// The member a classic join speaks for: `Some` an existing one (a static one
    /// restarted under a new id takes the old one's place), `None` a new one. Kafka's
    /// rules: a static member joining without a member id replaces the one of its
    /// instance; with one, it must be that member's (FENCED_INSTANCE_ID).
    fn find_classic_joiner(
        &mut self,
        req: &ClassicJoin,
    ) -> Result<Option<ConsumerMember>, GroupError> {
        let member_id = req.member_id.as_str();
        let Some(instance) = &req.instance_id else {
            return Ok(self.members.get(member_id).cloned());
        };
        let Some(old_id) = self.static_members.get(instance).cloned() else {
            return Ok(None);
        };
        if old_id == member_id {
            return Ok(self.members.get(member_id).cloned());
        }
        if !req.unknown_member {
            return Err(GroupError::FencedInstanceId);
        }
        let mut m = self.take_member(&old_id);
        self.changes.removed.insert(old_id.clone());
        self.changes
            .target
            .get_or_insert_with(BTreeSet::new)
            .insert(member_id.to_string());
        m.member_id = member_id.to_string();
        m.classic_deadline_ms = None;
        for key in m.assignment.held().partitions() {
            self.holders.insert(key, member_id.to_string());
        }
        if let Some(t) = self.target.remove(&old_id) {
            self.target.insert(member_id.to_string(), t);
        }
        Ok(Some(m))
    }

    /// Kafka's `validateConsumerGroupMember` for SyncGroup, Heartbeat and commits of
    /// classic members: the member (by instance id for a static one), which must use
    /// the classic protocol, at `generation`.
    fn classic_member(
        &self,
        member_id: &str,
        instance_id: Option<&str>,
        generation: i32,
    ) -> Result<&ConsumerMember, GroupError> {
        let m = match instance_id {
            None => self.members.get(member_id),
            Some(i) => match self.static_members.get(i) {
                Some(id) if id != member_id => return Err(GroupError::FencedInstanceId),
                Some(id) => self.members.get(id),
                None => None,
            },
        };
        let m = m
            .filter(|m| m.classic.is_some())
            .ok_or(GroupError::UnknownMemberId)?;
        if m.assignment.epoch != generation {
            return Err(GroupError::IllegalGeneration);
        }
        Ok(m)
    }

    /// A SyncGroup from a classic member: its assigned partitions, as its embedded
    /// protocol's assignment.
    pub fn classic_sync(
        &mut self,
        member_id: &str,
        instance_id: Option<&str>,
        generation: i32,
        protocol: (Option<&str>, Option<&str>),
        now_ms: i64,
    ) -> Result<(String, Vec<u8>), GroupError> {
        let m = self.classic_member(member_id, instance_id, generation)?;
        let classic = m.classic.as_ref().expect("a classic member");
        let first = &classic.protocols[0];
        let (protocol_type, protocol_name) = protocol;
        if protocol_type.is_some_and(|t| t != CONSUMER_PROTOCOL_TYPE)
            || protocol_name.is_some_and(|n| n != first.name)
        {
            return Err(GroupError::InconsistentGroupProtocol);
        }
        let name = first.name.clone();
        let version = embedded::version(&first.metadata).unwrap_or(0);
        let behind = self.epoch > m.assignment.epoch
            && m.assignment.state != MemberState::UnrevokedPartitions;
        let assignment =
            embedded::assignment_bytes(version, &self.ids_to_named(&m.assignment.assigned));
        let session = i64::from(classic.session_timeout_ms);
        let id = m.member_id.clone();
        let m = self.members.get_mut(&id).expect("found above");
        if behind {
            // A new rebalance began: it must rejoin first.
            m.classic_deadline_ms
                .get_or_insert(now_ms + i64::from(m.rebalance_timeout_ms.max(0)));
            return Err(GroupError::RebalanceInProgress);
        }
        m.classic_deadline_ms = None;
        m.session_deadline_ms = now_ms + session;
        Ok((name, assignment))
    }

    /// A Heartbeat from a classic member: its session goes on; REBALANCE_IN_PROGRESS
    /// while it must rejoin to make progress (see the module doc).
    pub fn classic_heartbeat(
        &mut self,
        member_id: &str,
        instance_id: Option<&str>,
        generation: i32,
        now_ms: i64,
    ) -> Result<(), GroupError> {
        let m = self.classic_member(member_id, instance_id, generation)?;
        let a = &m.assignment;
        let rejoin = a.epoch < self.epoch
            || a.state == MemberState::UnrevokedPartitions
            || (a.state == MemberState::UnreleasedPartitions && !self.waiting_on_unreleased(m));
        let id = m.member_id.clone();
        let m = self.members.get_mut(&id).expect("found above");
        m.session_deadline_ms =
            now_ms + i64::from(m.classic.as_ref().map_or(0, |c| c.session_timeout_ms));
        if rejoin {
            m.classic_deadline_ms
                .get_or_insert(now_ms + i64::from(m.rebalance_timeout_ms.max(0)));
            return Err(GroupError::RebalanceInProgress);
        }
        Ok(())
    }

    /// A LeaveGroup's members, each removed if it is a classic member of this group
    /// (by instance id for a static one, whose member id may then be left empty, as
    /// an administrator's removal sends it). Answers each with its member id.
    pub fn classic_leave(
        &mut self,
        leaving: &[(String, Option<String>)],
    ) -> Vec<Result<String, GroupError>> {
        leaving
            .iter()
            .map(|(member_id, instance_id)| {
                let id = match instance_id {
                    None => member_id.clone(),
                    Some(i) => {
                        let id = self
                            .static_members
                            .get(i)
                            .cloned()
                            .ok_or(GroupError::UnknownMemberId)?;
                        if !member_id.is_empty() && &id != member_id {
                            return Err(GroupError::FencedInstanceId);
                        }
                        id
                    }
                };
                if self.members.get(&id).is_none_or(|m| m.classic.is_none()) {
                    return Err(GroupError::UnknownMemberId);
                }
                self.remove_member(&id);
                Ok(id)
            })
            .collect()
    }

    /// Whether a member waiting for partitions still waits on one another member holds.
    fn waiting_on_unreleased(&self, m: &ConsumerMember) -> bool {
        self.target.get(&m.member_id).is_some_and(|t| {
            t.partitions().any(|(topic, p)| {
                !m.assignment.assigned.contains(topic, p) && self.holders.contains_key(&(topic, p))
            })
        })
    }

    /// Partitions by topic name, for the topics the group knows.
    fn ids_to_named(&self, a: &Assignment) -> NamedPartitions {
        self.subscribed
            .iter()
            .filter_map(|(name, (id, _))| {
                a.topics()
                    .get(id)
                    .map(|ps| (name.clone(), ps.iter().copied().collect()))
            })
            .collect()
    }
}

/// Partitions by topic id, for the topics that exist.
fn named_to_ids(named: &NamedPartitions, catalog: &impl TopicCatalog) -> Assignment {
    let mut a = Assignment::new();
    for (name, ps) in named {
        if let Some((id, spec)) = catalog.topic(name) {
            for p in ps.iter().filter(|p| (0..spec.partitions).contains(*p)) {
                a.insert(id, *p);
            }
        }
    }
    a
}
