//! One consumer-protocol group (KIP-848): its members, the group epoch, the target
//! assignment an assignor computed at that epoch, and each member's reconciliation
//! toward it. Pure: time comes in as milliseconds, topics through a [`TopicCatalog`],
//! and nothing here waits or writes; the coordinator persists what changed.
//!
//! A heartbeat (`heartbeat`) runs three steps, as Kafka's coordinator does:
//! 1. the member is created or updated; a new member, or a change of its subscription,
//!    rack or assignor, bumps the group epoch, and so does a change of what the
//!    subscribed topics are (created, deleted, grown);
//! 2. when the group epoch is past the target's, the assignor computes a new target;
//! 3. the member takes one reconciliation step toward its target (`reconcile.rs`).
//!
//! Invariants (asserted in debug builds, proven by the tests):
//! - `holders` maps each partition a member holds (assigned or pending revocation) to
//!   that one member: no partition is ever given to a member while another holds it;
//! - `assignment_epoch <= epoch`, and every member's epoch `<= assignment_epoch`;
//! - `target` has an entry for every member after a heartbeat's step 2;
//! - `static_members` maps each instance id to the one member that has it.
//!
//! Patterns (`SubscribedTopicRegex`) are resolved for the whole group when a heartbeat
//! changes the subscriptions or the topics changed, and the topics they match are
//! filtered by the DESCRIBE right of that heartbeat's principal, as Kafka's
//! `TopicRegexResolver` does; a topic a member names is not filtered (the edge checks
//! named topics itself).
//!
//! One difference from Kafka, on purpose: a dynamic member that heartbeats with epoch 0
//! under a member id the group still has (it was fenced, and rejoins having given up
//! every partition, which epoch 0 requires) is taken back as a new member at once. Kafka
//! fences such a heartbeat again until the old member's session expires.

use super::assignment::{Assignment, TopicId};
use super::assignor::{self, AssignorKind, MemberSpec, TopicSpec};
use super::reconcile::{reconcile, MemberAssignment, MemberState};
use super::records::{self, CurrentAssignment, RecordKey, RecordValue, TopicMetadata};
use crate::group::types::GroupError;
use regex::Regex;
use std::collections::{BTreeMap, BTreeSet, HashMap};

/// The member epoch of a heartbeat that leaves the group.
pub const LEAVE_GROUP_MEMBER_EPOCH: i32 = -1;
/// The member epoch of a static member's heartbeat that leaves for now (it will
/// rejoin under its instance id and keep its partitions).
pub const LEAVE_GROUP_STATIC_MEMBER_EPOCH: i32 = -2;

/// The broker's settings for consumer groups (Kafka's `group.consumer.*`).
#[derive(Debug, Clone)]
pub struct ConsumerGroupConfig {
    /// `group.consumer.session.timeout.ms`.
    pub session_timeout_ms: i32,
    /// `group.consumer.heartbeat.interval.ms`.
    pub heartbeat_interval_ms: i32,
    /// `group.consumer.max.size`.
    pub max_size: usize,
    /// `group.consumer.assignors`: the first is the default.
    pub assignors: Vec<AssignorKind>,
    /// `group.consumer.migration.policy`.
    pub migration_policy: MigrationPolicy,
    /// `group.consumer.min.session.timeout.ms` and `…max…`: the bounds of a group's
    /// own session timeout (`overrides.rs`).
    pub min_session_timeout_ms: i32,
    pub max_session_timeout_ms: i32,
    /// `group.consumer.min.heartbeat.interval.ms` and `…max…`.
    pub min_heartbeat_interval_ms: i32,
    pub max_heartbeat_interval_ms: i32,
}

/// Whether a group may change protocols with members in it (Kafka's
/// `group.consumer.migration.policy`): a classic group becomes a consumer group when a
/// consumer-protocol member joins it (upgrade), a consumer group whose last
/// consumer-protocol member left becomes a classic group again (downgrade).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum MigrationPolicy {
    Bidirectional,
    Upgrade,
    Downgrade,
    Disabled,
}

impl MigrationPolicy {
    pub fn from_name(name: &str) -> Option<MigrationPolicy> {
        match name.to_ascii_lowercase().as_str() {
            "bidirectional" => Some(MigrationPolicy::Bidirectional),
            "upgrade" => Some(MigrationPolicy::Upgrade),
            "downgrade" => Some(MigrationPolicy::Downgrade),
            "disabled" => Some(MigrationPolicy::Disabled),
            _ => None,
        }
    }

    pub fn name(self) -> &'static str {
        match self {
            MigrationPolicy::Bidirectional => "bidirectional",
            MigrationPolicy::Upgrade => "upgrade",
            MigrationPolicy::Downgrade => "downgrade",
            MigrationPolicy::Disabled => "disabled",
        }
    }

    pub fn upgrades(self) -> bool {
        matches!(
            self,
            MigrationPolicy::Bidirectional | MigrationPolicy::Upgrade
        )
    }

    pub fn downgrades(self) -> bool {
        matches!(
            self,
            MigrationPolicy::Bidirectional | MigrationPolicy::Downgrade
        )
    }
}

impl Default for ConsumerGroupConfig {
    fn default() -> Self {
        ConsumerGroupConfig {
            session_timeout_ms: 45_000,
            heartbeat_interval_ms: 5_000,
            max_size: i32::MAX as usize,
            assignors: AssignorKind::ALL.to_vec(),
            migration_policy: MigrationPolicy::Bidirectional,
            min_session_timeout_ms: 45_000,
            max_session_timeout_ms: 60_000,
            min_heartbeat_interval_ms: 5_000,
            max_heartbeat_interval_ms: 15_000,
        }
    }
}

/// What a group needs to know of the cluster's metadata: its topics, and a group's own
/// configs.
pub trait TopicCatalog {
    /// Changes whenever a topic is created, deleted or grown.
    fn version(&self) -> u64;
    fn topic(&self, name: &str) -> Option<(TopicId, TopicSpec)>;
    /// Every topic a pattern may match: all of the cluster's, internal ones included
    /// (Kafka's group coordinator matches patterns against every topic of its image).
    fn topic_names(&self) -> Vec<String>;
    /// The group's own configs (GROUP config resource; `overrides.rs`).
    fn group_configs(&self, _group: &str) -> BTreeMap<String, String> {
        BTreeMap::new()
    }
}

/// Which topics the principal of a request may describe: the topics a pattern matches
/// are filtered by the right of the member whose heartbeat resolves the group's
/// patterns (Kafka's `TopicRegexResolver.filterTopicDescribeAuthorizedTopics`).
#[derive(Clone)]
pub struct DescribeFilter(pub std::sync::Arc<dyn Fn(&str) -> bool + Send + Sync>);

impl std::fmt::Debug for DescribeFilter {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("DescribeFilter")
    }
}

/// A ConsumerGroupHeartbeat, decoded. `None` fields were not sent (unchanged).
#[derive(Debug, Clone, Default)]
pub struct Heartbeat {
    /// The request's version: from 1 the client names its member id.
    pub version: i16,
    pub member_id: String,
    pub member_epoch: i32,
    pub instance_id: Option<String>,
    pub rack_id: Option<String>,
    /// -1: unchanged.
    pub rebalance_timeout_ms: i32,
    pub subscribed_topic_names: Option<Vec<String>>,
    pub subscribed_topic_regex: Option<String>,
    pub server_assignor: Option<String>,
    pub owned: Option<Assignment>,
    pub client_id: String,
    pub client_host: String,
    /// Set when an authorizer runs: the topics the member's principal may describe.
    pub describable: Option<DescribeFilter>,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct HeartbeatAnswer {
    pub member_id: String,
    pub member_epoch: i32,
    pub heartbeat_interval_ms: i32,
    /// Sent when it changed, or the request was a full one.
    pub assignment: Option<Assignment>,
}

/// A group as ConsumerGroupDescribe tells it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ConsumerGroupDescription {
    pub state: ConsumerGroupState,
    pub epoch: i32,
    pub assignment_epoch: i32,
    pub assignor: &'static str,
    pub members: Vec<ConsumerMemberDescription>,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ConsumerMemberDescription {
    pub member_id: String,
    pub member_epoch: i32,
    /// Instance, rack, client, subscription: what its metadata record stores.
    pub metadata: records::MemberMetadata,
    /// What it holds now.
    pub assignment: Assignment,
    /// What the target gives it.
    pub target: Assignment,
}

#[derive(Debug, Clone)]
pub struct ConsumerMember {
    pub member_id: String,
    pub instance_id: Option<String>,
    pub rack_id: Option<String>,
    pub client_id: String,
    pub client_host: String,
    pub subscribed_names: BTreeSet<String>,
    pub subscribed_regex: Option<String>,
    pub server_assignor: Option<AssignorKind>,
    pub rebalance_timeout_ms: i32,
    pub assignment: MemberAssignment,
    pub session_deadline_ms: i64,
    /// Set while the member must revoke partitions: past it, the member is removed.
    pub revocation_deadline_ms: Option<i64>,
    /// Set for a member that uses the classic protocol (`classic.rs`).
    pub classic: Option<records::ClassicMemberMetadata>,
    /// A classic member told to rejoin, or that joined, must rejoin or sync by then
    /// (its rebalance timeout), or it is removed.
    pub classic_deadline_ms: Option<i64>,
}

impl ConsumerMember {
    fn new(member_id: String) -> ConsumerMember {
        ConsumerMember {
            member_id,
            instance_id: None,
            rack_id: None,
            client_id: String::new(),
            client_host: String::new(),
            subscribed_names: BTreeSet::new(),
            subscribed_regex: None,
            server_assignor: None,
            rebalance_timeout_ms: 0,
            assignment: MemberAssignment::joining(),
            session_deadline_ms: 0,
            revocation_deadline_ms: None,
            classic: None,
            classic_deadline_ms: None,
        }
    }

    /// Its session timeout: its own for a classic member, the group's otherwise.
    fn session_timeout_ms(&self, config: &ConsumerGroupConfig) -> i32 {
        self.classic
            .as_ref()
            .map_or(config.session_timeout_ms, |c| c.session_timeout_ms)
    }

    /// The fields of its member-metadata record.
    pub fn metadata(&self) -> records::MemberMetadata {
        records::MemberMetadata {
            instance_id: self.instance_id.clone(),
            rack_id: self.rack_id.clone(),
            client_id: self.client_id.clone(),
            client_host: self.client_host.clone(),
            subscribed_topic_names: self.subscribed_names.iter().cloned().collect(),
            subscribed_topic_regex: self.subscribed_regex.clone(),
            rebalance_timeout_ms: self.rebalance_timeout_ms,
            server_assignor: self.server_assignor.map(|a| a.name().to_string()),
            classic: self.classic.clone(),
        }
    }

    /// Takes the fields of a member-metadata record ([`Self::metadata`]'s inverse).
    fn set_metadata(&mut self, md: records::MemberMetadata) {
        self.instance_id = md.instance_id;
        self.rack_id = md.rack_id;
        self.client_id = md.client_id;
        self.client_host = md.client_host;
        self.subscribed_names = md.subscribed_topic_names.into_iter().collect();
        self.subscribed_regex = md.subscribed_topic_regex;
        self.rebalance_timeout_ms = md.rebalance_timeout_ms;
        self.server_assignor = md
            .server_assignor
            .as_deref()
            .and_then(AssignorKind::from_name);
        self.classic = md.classic;
    }

    /// What decides the target assignment: a change of any bumps the group epoch.
    fn assignment_inputs(&self) -> impl PartialEq + '_ {
        (
            &self.subscribed_names,
            &self.subscribed_regex,
            &self.rack_id,
            self.server_assignor,
        )
    }
}

/// The group's state as `ConsumerGroupDescribe` and `ListGroups` name it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ConsumerGroupState {
    Empty,
    Assigning,
    Reconciling,
    Stable,
}

impl ConsumerGroupState {
    pub fn name(self) -> &'static str {
        match self {
            ConsumerGroupState::Empty => "Empty",
            ConsumerGroupState::Assigning => "Assigning",
            ConsumerGroupState::Reconciling => "Reconciling",
            ConsumerGroupState::Stable => "Stable",
        }
    }
}

/// What changed since the coordinator last took the changes: the records it must write
/// (`records_for`), as Kafka's coordinator writes them with each heartbeat.
#[derive(Debug, Default, Clone, PartialEq, Eq)]
pub struct Changes {
    /// The group epoch moved.
    pub epoch: bool,
    /// The subscribed topics' metadata changed.
    pub subscribed: bool,
    /// Members whose metadata (subscription, rack, ...) changed.
    pub members: BTreeSet<String>,
    /// The target moved to a new epoch; these members' targets changed.
    pub target: Option<BTreeSet<String>>,
    /// Members whose current assignment (epochs, state, partitions) changed.
    pub current: BTreeSet<String>,
    /// Members that left or were removed: their records are deleted.
    pub removed: BTreeSet<String>,
}

impl Changes {
    pub fn is_empty(&self) -> bool {
        *self == Changes::default()
    }
}

#[derive(Debug, Default)]
pub struct ConsumerGroup {
    id: String,
    epoch: i32,
    assignment_epoch: i32,
    members: BTreeMap<String, ConsumerMember>,
    static_members: HashMap<String, String>,
    target: BTreeMap<String, Assignment>,
    holders: HashMap<(TopicId, i32), String>,
    /// The existing topics some member subscribes to, by name.
    subscribed: BTreeMap<String, (TopicId, TopicSpec)>,
    /// The catalog version `subscribed` was computed at.
    catalog_version: Option<u64>,
    /// Topics a pattern matched that the principal of the heartbeat that last resolved
    /// the patterns may not describe: no pattern gives them to anyone (a member may
    /// still name one). Not stored; the first heartbeat after a load resolves again.
    regex_denied: BTreeSet<String>,
    changes: Changes,
}

impl ConsumerGroup {
    pub fn new(id: String) -> ConsumerGroup {
        ConsumerGroup {
            id,
            ..ConsumerGroup::default()
        }
    }

    pub fn id(&self) -> &str {
        &self.id
    }

    pub fn epoch(&self) -> i32 {
        self.epoch
    }

    pub fn assignment_epoch(&self) -> i32 {
        self.assignment_epoch
    }

    pub fn members(&self) -> impl Iterator<Item = &ConsumerMember> {
        self.members.values()
    }

    pub fn member(&self, member_id: &str) -> Option<&ConsumerMember> {
        self.members.get(member_id)
    }

    pub fn target(&self, member_id: &str) -> Option<&Assignment> {
        self.target.get(member_id)
    }

    pub fn is_empty(&self) -> bool {
        self.members.is_empty()
    }

    pub fn state(&self) -> ConsumerGroupState {
        if self.members.is_empty() {
            ConsumerGroupState::Empty
        } else if self.epoch > self.assignment_epoch {
            ConsumerGroupState::Assigning
        } else if self.members.values().any(|m| {
            m.assignment.epoch != self.assignment_epoch || m.assignment.state != MemberState::Stable
        }) {
            ConsumerGroupState::Reconciling
        } else {
            ConsumerGroupState::Stable
        }
    }

    /// The group as ConsumerGroupDescribe tells it (members by id).
    pub fn describe(&self, config: &ConsumerGroupConfig) -> ConsumerGroupDescription {
        ConsumerGroupDescription {
            state: self.state(),
            epoch: self.epoch,
            assignment_epoch: self.assignment_epoch,
            assignor: group_assignor(self.members.values(), config).name(),
            members: self
                .members
                .values()
                .map(|m| ConsumerMemberDescription {
                    member_id: m.member_id.clone(),
                    member_epoch: m.assignment.epoch,
                    metadata: m.metadata(),
                    assignment: m.assignment.assigned.clone(),
                    target: self.target.get(&m.member_id).cloned().unwrap_or_default(),
                })
                .collect(),
        }
    }

    /// Whether `member_id` may commit offsets of `partitions` (topic name, partition) at
    /// `epoch`: at its current epoch always (Kafka's rule); at its previous one when it
    /// still holds every one of them, so no other member can be consuming them — the
    /// heartbeat that moved it on may have crossed the commit on the wire. Otherwise
    /// STALE_MEMBER_EPOCH; UNKNOWN_MEMBER_ID for no such member.
    pub fn check_commit<'a>(
        &self,
        member_id: &str,
        epoch: i32,
        mut partitions: impl Iterator<Item = (&'a str, i32)>,
    ) -> Result<(), GroupError> {
        let m = self
            .members
            .get(member_id)
            .ok_or(GroupError::UnknownMemberId)?;
        let a = &m.assignment;
        if epoch == a.epoch {
            return Ok(());
        }
        if m.classic.is_some() {
            // A classic member commits in its generation, which is its epoch.
            return Err(GroupError::IllegalGeneration);
        }
        let held = |topic: &str, p: i32| {
            self.subscribed
                .get(topic)
                .is_some_and(|(id, _)| self.holders.get(&(*id, p)) == Some(&m.member_id))
        };
        if epoch == a.previous_epoch && partitions.all(|(t, p)| held(t, p)) {
            return Ok(());
        }
        Err(GroupError::StaleMemberEpoch)
    }

    /// Whether a TxnOffsetCommit naming `member_id` at `epoch` may commit offsets of
    /// `partitions` (Kafka's `ConsumerGroup.validateOffsetCommit` for a transactional
    /// commit): from outside the group (epoch -1) only while the group is empty;
    /// otherwise as `check_commit`, except that an epoch that does not match is
    /// ILLEGAL_GENERATION, the error a producer's `sendOffsetsToTransaction` knows
    /// (Kafka turns STALE_MEMBER_EPOCH into it for this request). The group instance id
    /// is not checked: a consumer-protocol member's id already names it.
    pub fn check_txn_commit<'a>(
        &self,
        member_id: &str,
        epoch: i32,
        partitions: impl Iterator<Item = (&'a str, i32)>,
    ) -> Result<(), GroupError> {
        if epoch < 0 && self.is_empty() {
            return Ok(());
        }
        self.check_commit(member_id, epoch, partitions)
            .map_err(|e| match e {
                GroupError::StaleMemberEpoch => GroupError::IllegalGeneration,
                e => e,
            })
    }

    /// Whether `member_id` at `epoch` may fetch the group's offsets (OffsetFetch v9,
    /// Kafka's `validateOffsetFetch`): its current epoch only — STALE_MEMBER_EPOCH, or
    /// ILLEGAL_GENERATION for a classic member; UNKNOWN_MEMBER_ID for no such member.
    pub fn check_fetch(&self, member_id: &str, epoch: i32) -> Result<(), GroupError> {
        let m = self
            .members
            .get(member_id)
            .ok_or(GroupError::UnknownMemberId)?;
        match (m.assignment.epoch == epoch, m.classic.is_some()) {
            (true, _) => Ok(()),
            (false, true) => Err(GroupError::IllegalGeneration),
            (false, false) => Err(GroupError::StaleMemberEpoch),
        }
    }

    /// The existing topics some member subscribes to, by name or pattern (OffsetDelete
    /// refuses their offsets: GROUP_SUBSCRIBED_TO_TOPIC).
    pub fn subscribed_topic_names(&self) -> Vec<String> {
        self.subscribed.keys().cloned().collect()
    }

    /// The member holding a partition, if any.
    pub fn holder(&self, topic: TopicId, partition: i32) -> Option<&str> {
        self.holders.get(&(topic, partition)).map(String::as_str)
    }

    /// Serves one heartbeat at `now_ms`. `new_member_id` names a member that joins
    /// without one (version 0).
    pub fn heartbeat(
        &mut self,
        hb: Heartbeat,
        catalog: &impl TopicCatalog,
        config: &ConsumerGroupConfig,
        now_ms: i64,
        new_member_id: impl FnOnce() -> String,
    ) -> Result<HeartbeatAnswer, GroupError> {
        validate(&hb, config)?;
        match hb.member_epoch {
            LEAVE_GROUP_MEMBER_EPOCH => return self.leave(&hb),
            LEAVE_GROUP_STATIC_MEMBER_EPOCH => return self.leave_for_now(&hb),
            _ => {}
        }
        let joining = hb.member_epoch == 0;
        let member_id = if hb.member_id.is_empty() {
            new_member_id()
        } else {
            hb.member_id.clone()
        };
        let is_new = !self.members.contains_key(&member_id)
            && hb
                .instance_id
                .as_ref()
                .is_none_or(|i| !self.static_members.contains_key(i));
        if is_new && self.members.len() >= config.max_size {
            return Err(GroupError::GroupMaxSizeReached);
        }

        // 1. The member, created, replaced or checked.
        let existing = self.find_member(&hb, &member_id, joining)?;
        let mut member = match existing {
            Some(m) => m,
            None => ConsumerMember::new(member_id.clone()),
        };
        let before = member.clone();
        if let Some(i) = &hb.instance_id {
            member.instance_id = Some(i.clone());
        }
        if let Some(r) = &hb.rack_id {
            member.rack_id = Some(r.clone());
        }
        if hb.rebalance_timeout_ms != -1 {
            member.rebalance_timeout_ms = hb.rebalance_timeout_ms;
        }
        if let Some(a) = &hb.server_assignor {
            member.server_assignor = AssignorKind::from_name(a);
        }
        if let Some(names) = &hb.subscribed_topic_names {
            member.subscribed_names = names.iter().cloned().collect();
        }
        if let Some(re) = &hb.subscribed_topic_regex {
            member.subscribed_regex = (!re.is_empty()).then(|| re.clone());
        }
        member.client_id = hb.client_id.clone();
        member.client_host = hb.client_host.clone();
        // It speaks the consumer protocol now (a static member may come back to it
        // from the classic one).
        member.classic = None;
        self.admit(
            member,
            &before,
            is_new,
            hb.owned.as_ref(),
            hb.describable.as_ref(),
            catalog,
            config,
            now_ms,
        );
        let m = self.members.get(&member_id).expect("admitted");
        let assignment_changed = m.assignment.assigned != before.assignment.assigned || joining;
        let full = hb.rebalance_timeout_ms != -1
            && hb.subscribed_topic_names.is_some()
            && hb.owned.is_some();
        let answer = HeartbeatAnswer {
            member_id: member_id.clone(),
            member_epoch: m.assignment.epoch,
            heartbeat_interval_ms: config.heartbeat_interval_ms,
            assignment: (assignment_changed || full).then(|| m.assignment.assigned.clone()),
        };
        self.check_invariants();
        Ok(answer)
    }

    /// A member as a request left it (`before`: as it was) goes through the three
    /// steps of the module doc: its record and the group epoch, the target, its
    /// reconciliation given what it says it owns (`None`: not told). Its session
    /// starts again.
    #[allow(clippy::too_many_arguments)]
    fn admit(
        &mut self,
        member: ConsumerMember,
        before: &ConsumerMember,
        is_new: bool,
        owned: Option<&Assignment>,
        describable: Option<&DescribeFilter>,
        catalog: &impl TopicCatalog,
        config: &ConsumerGroupConfig,
        now_ms: i64,
    ) {
        let member_id = member.member_id.clone();
        let mut bump = is_new || before.assignment_inputs() != member.assignment_inputs();
        if is_new || before.metadata() != member.metadata() || before.member_id != member_id {
            self.changes.members.insert(member_id.clone());
        }
        if let Some(i) = &member.instance_id {
            self.static_members.insert(i.clone(), member_id.clone());
        }
        self.members.insert(member_id.clone(), member);

        if bump || self.catalog_version != Some(catalog.version()) {
            let subscribed = self.compute_subscribed(catalog, describable);
            if subscribed != self.subscribed {
                bump = true;
                self.changes.subscribed = true;
            }
            self.subscribed = subscribed;
            self.catalog_version = Some(catalog.version());
        }
        if bump {
            self.epoch += 1;
            self.changes.epoch = true;
        }

        // 2. The target, when the group moved past it.
        if self.epoch > self.assignment_epoch {
            self.compute_target(config);
        }

        // 3. The member's step toward its target.
        let current = self.members[&member_id].assignment.clone();
        let target = self.target.get(&member_id).cloned().unwrap_or_default();
        let next = reconcile(&current, self.assignment_epoch, &target, owned, |t, p| {
            self.holders.contains_key(&(t, p))
        });
        if next != before.assignment || before.member_id != member_id {
            self.changes.current.insert(member_id.clone());
        }
        self.set_assignment(&member_id, next, now_ms);
        let m = self.members.get_mut(&member_id).expect("present");
        m.session_deadline_ms = now_ms + i64::from(m.session_timeout_ms(config));
    }

    /// The member a heartbeat speaks for: `Some` an existing one (checked, or replaced
    /// for a rejoining static member), `None` a new one.
    fn find_member(
        &mut self,
        hb: &Heartbeat,
        member_id: &str,
        joining: bool,
    ) -> Result<Option<ConsumerMember>, GroupError> {
        if let Some(instance) = &hb.instance_id {
            let Some(old_id) = self.static_members.get(instance).cloned() else {
                return if joining {
                    Ok(None)
                } else {
                    Err(GroupError::UnknownMemberId)
                };
            };
            let old = self
                .members
                .get(&old_id)
                .expect("static members are members");
            if joining {
                if old.assignment.epoch != LEAVE_GROUP_STATIC_MEMBER_EPOCH && old_id != member_id {
                    return Err(GroupError::UnreleasedInstanceId);
                }
                // The new instance takes the old one's place and partitions: it will
                // be given them back at once, without a rebalance.
                let mut m = self.take_member(&old_id);
                if old_id != member_id {
                    self.changes.removed.insert(old_id.clone());
                    let target = self.changes.target.get_or_insert_with(BTreeSet::new);
                    target.insert(member_id.to_string());
                }
                m.member_id = member_id.to_string();
                m.assignment.epoch = 0;
                m.assignment.previous_epoch = 0;
                for key in m.assignment.held().partitions() {
                    self.holders.insert(key, member_id.to_string());
                }
                if let Some(t) = self.target.remove(&old_id) {
                    self.target.insert(member_id.to_string(), t);
                }
                return Ok(Some(m));
            }
            if old_id != member_id {
                return Err(GroupError::FencedInstanceId);
            }
            check_epoch(old, hb)?;
            return Ok(Some(old.clone()));
        }
        match self.members.get(member_id) {
            None if joining => Ok(None),
            None => Err(GroupError::UnknownMemberId),
            Some(_) if joining => {
                // Rejoining after a fence, holding nothing (see the module doc).
                let old = self.take_member(member_id);
                let mut m = ConsumerMember::new(member_id.to_string());
                m.subscribed_names = old.subscribed_names;
                m.subscribed_regex = old.subscribed_regex;
                m.rack_id = old.rack_id;
                m.server_assignor = old.server_assignor;
                Ok(Some(m))
            }
            // A classic member speaks JoinGroup and Heartbeat, not this.
            Some(m) if m.classic.is_some() => Err(GroupError::UnknownMemberId),
            Some(m) => {
                check_epoch(m, hb)?;
                Ok(Some(m.clone()))
            }
        }
    }

    /// Takes a member out with everything it held. Its target entry stays: a member
    /// put back under this id (or moved to another) is given it again.
    fn take_member(&mut self, member_id: &str) -> ConsumerMember {
        let m = self.members.remove(member_id).expect("a member to take");
        for key in m.assignment.held().partitions() {
            if self.holders.get(&key).is_some_and(|h| h == member_id) {
                self.holders.remove(&key);
            }
        }
        if let Some(i) = &m.instance_id {
            if self.static_members.get(i).is_some_and(|id| id == member_id) {
                self.static_members.remove(i);
            }
        }
        m
    }

    /// A member leaves (epoch -1): its partitions are free, and the group moves on.
    fn leave(&mut self, hb: &Heartbeat) -> Result<HeartbeatAnswer, GroupError> {
        let member_id = match &hb.instance_id {
            Some(instance) => {
                let id = self
                    .static_members
                    .get(instance)
                    .cloned()
                    .ok_or(GroupError::UnknownMemberId)?;
                if id != hb.member_id {
                    return Err(GroupError::FencedInstanceId);
                }
                id
            }
            None if self.members.contains_key(&hb.member_id) => hb.member_id.clone(),
            None => return Err(GroupError::UnknownMemberId),
        };
        self.remove_member(&member_id);
        Ok(HeartbeatAnswer {
            member_id,
            member_epoch: LEAVE_GROUP_MEMBER_EPOCH,
            heartbeat_interval_ms: 0,
            assignment: None,
        })
    }

    /// A static member leaves for now (epoch -2): it keeps its partitions and its place
    /// until its session expires or its instance rejoins.
    fn leave_for_now(&mut self, hb: &Heartbeat) -> Result<HeartbeatAnswer, GroupError> {
        let instance = hb
            .instance_id
            .as_ref()
            .expect("validated: -2 names an instance");
        let id = self
            .static_members
            .get(instance)
            .cloned()
            .ok_or(GroupError::UnknownMemberId)?;
        if id != hb.member_id {
            return Err(GroupError::FencedInstanceId);
        }
        let m = self
            .members
            .get_mut(&id)
            .expect("static members are members");
        m.assignment.epoch = LEAVE_GROUP_STATIC_MEMBER_EPOCH;
        self.changes.current.insert(id.clone());
        Ok(HeartbeatAnswer {
            member_id: id,
            member_epoch: LEAVE_GROUP_STATIC_MEMBER_EPOCH,
            heartbeat_interval_ms: 0,
            assignment: None,
        })
    }

    /// Removes a member (it left, or its session or revocation timed out) and bumps the
    /// group epoch so the others share its partitions.
    pub fn remove_member(&mut self, member_id: &str) {
        if self.members.contains_key(member_id) {
            self.take_member(member_id);
            self.target.remove(member_id);
            self.epoch += 1;
            self.changes.epoch = true;
            self.changes.removed.insert(member_id.to_string());
            self.changes.members.remove(member_id);
            self.changes.current.remove(member_id);
            if let Some(t) = self.changes.target.as_mut() {
                t.remove(member_id);
            }
        }
    }

    /// The members whose session or revocation deadline passed by `now_ms`: the
    /// coordinator removes them ([`Self::remove_member`]).
    pub fn expired(&self, now_ms: i64) -> Vec<String> {
        self.members
            .values()
            .filter(|m| {
                m.session_deadline_ms <= now_ms
                    || m.revocation_deadline_ms.is_some_and(|d| d <= now_ms)
                    || m.classic_deadline_ms.is_some_and(|d| d <= now_ms)
            })
            .map(|m| m.member_id.clone())
            .collect()
    }

    fn set_assignment(&mut self, member_id: &str, next: MemberAssignment, now_ms: i64) {
        let m = self.members.get_mut(member_id).expect("present");
        for key in m.assignment.held().partitions() {
            if self.holders.get(&key).is_some_and(|h| h == member_id) {
                self.holders.remove(&key);
            }
        }
        for key in next.held().partitions() {
            let previous = self.holders.insert(key, member_id.to_string());
            debug_assert!(
                previous.is_none_or(|p| p == member_id),
                "a partition is given only once no other member holds it"
            );
        }
        m.revocation_deadline_ms = match (next.state, m.revocation_deadline_ms) {
            (MemberState::UnrevokedPartitions, Some(d)) => Some(d),
            (MemberState::UnrevokedPartitions, None) => {
                Some(now_ms + i64::from(m.rebalance_timeout_ms.max(0)))
            }
            _ => None,
        };
        m.assignment = next;
    }

    /// The existing topics the members subscribe to: by name, and by pattern less the
    /// ones `describable` refuses (without one, those refused last time stay out).
    fn compute_subscribed(
        &mut self,
        catalog: &impl TopicCatalog,
        describable: Option<&DescribeFilter>,
    ) -> BTreeMap<String, (TopicId, TopicSpec)> {
        let mut names: BTreeSet<String> = BTreeSet::new();
        let mut patterns: BTreeSet<&str> = BTreeSet::new();
        for m in self.members.values() {
            names.extend(m.subscribed_names.iter().cloned());
            if let Some(re) = &m.subscribed_regex {
                patterns.insert(re);
            }
        }
        if !patterns.is_empty() {
            let compiled: Vec<Regex> = patterns.iter().filter_map(|p| full_match(p).ok()).collect();
            let matched: Vec<String> = catalog
                .topic_names()
                .into_iter()
                .filter(|name| compiled.iter().any(|re| re.is_match(name)))
                .collect();
            if let Some(DescribeFilter(allows)) = describable {
                self.regex_denied = matched.iter().filter(|n| !allows(n)).cloned().collect();
            }
            names.extend(
                matched
                    .into_iter()
                    .filter(|n| !self.regex_denied.contains(n)),
            );
        }
        names
            .into_iter()
            .filter_map(|n| catalog.topic(&n).map(|t| (n, t)))
            .collect()
    }

    /// The topics a member subscribes to, by id, among those that exist.
    fn subscribed_ids(&self, m: &ConsumerMember) -> BTreeSet<TopicId> {
        let re = m
            .subscribed_regex
            .as_deref()
            .and_then(|p| full_match(p).ok());
        self.subscribed
            .iter()
            .filter(|(name, _)| {
                m.subscribed_names.contains(*name)
                    || (re.as_ref().is_some_and(|r| r.is_match(name))
                        && !self.regex_denied.contains(*name))
            })
            .map(|(_, (id, _))| *id)
            .collect()
    }

    fn compute_target(&mut self, config: &ConsumerGroupConfig) {
        let kind = group_assignor(self.members.values(), config);
        let subscriptions: Vec<BTreeSet<TopicId>> = self
            .members
            .values()
            .map(|m| self.subscribed_ids(m))
            .collect();
        let empty = Assignment::new();
        let specs: Vec<MemberSpec<'_>> = self
            .members
            .values()
            .zip(&subscriptions)
            .map(|(m, subscribed)| MemberSpec {
                member_id: &m.member_id,
                instance_id: m.instance_id.as_deref(),
                rack: m.rack_id.as_deref(),
                subscribed,
                current: self.target.get(&m.member_id).unwrap_or(&empty),
            })
            .collect();
        let topics: BTreeMap<TopicId, TopicSpec> = self
            .subscribed
            .values()
            .map(|(id, spec)| (*id, spec.clone()))
            .collect();
        let target = assignor::assign(kind, &specs, &topics);
        let changed = self.changes.target.get_or_insert_with(BTreeSet::new);
        for (id, a) in &target {
            if self.target.get(id) != Some(a) {
                changed.insert(id.clone());
            }
        }
        self.target = target;
        self.assignment_epoch = self.epoch;
    }

    /// The changes since the last call: what the coordinator must write.
    pub fn take_changes(&mut self) -> Changes {
        std::mem::take(&mut self.changes)
    }

    /// Puts back changes whose records were not written (a failed append), so the next
    /// write of the group carries them: records are the state as it is, so writing them
    /// late is writing them right.
    pub fn keep_changes(&mut self, unwritten: Changes) {
        let c = &mut self.changes;
        c.epoch |= unwritten.epoch;
        c.subscribed |= unwritten.subscribed;
        c.members.extend(unwritten.members);
        c.current.extend(unwritten.current);
        c.removed.extend(unwritten.removed);
        if let Some(t) = unwritten.target {
            c.target.get_or_insert_with(BTreeSet::new).extend(t);
        }
        // A member removed and then back (a static member replaced, a rejoin) is written
        // as it is now.
        let present: Vec<String> = c
            .removed
            .iter()
            .filter(|id| self.members.contains_key(*id))
            .cloned()
            .collect();
        for id in present {
            c.removed.remove(&id);
            c.members.insert(id.clone());
            c.current.insert(id);
        }
    }

    /// The records that store `changes` (a `None` value deletes its key), in the order
    /// Kafka writes them: members, topics, epoch, target, current assignments.
    pub fn records_for(&self, changes: &Changes) -> Vec<(RecordKey, Option<RecordValue>)> {
        let group = || self.id.clone();
        let mut out = Vec::new();
        for id in &changes.removed {
            let member = || id.clone();
            out.push((
                RecordKey::CurrentMemberAssignment {
                    group: group(),
                    member: member(),
                },
                None,
            ));
            out.push((
                RecordKey::TargetAssignmentMember {
                    group: group(),
                    member: member(),
                },
                None,
            ));
            out.push((
                RecordKey::MemberMetadata {
                    group: group(),
                    member: member(),
                },
                None,
            ));
        }
        for id in &changes.members {
            if let Some(m) = self.members.get(id) {
                out.push((
                    RecordKey::MemberMetadata {
                        group: group(),
                        member: id.clone(),
                    },
                    Some(RecordValue::MemberMetadata(m.metadata())),
                ));
            }
        }
        if changes.subscribed {
            out.push((
                RecordKey::PartitionMetadata { group: group() },
                Some(RecordValue::PartitionMetadata {
                    topics: self.topic_metadata(),
                }),
            ));
        }
        if changes.epoch {
            out.push((
                RecordKey::GroupMetadata { group: group() },
                Some(RecordValue::GroupMetadata { epoch: self.epoch }),
            ));
        }
        if let Some(members) = &changes.target {
            for id in members {
                if let Some(t) = self.target.get(id) {
                    out.push((
                        RecordKey::TargetAssignmentMember {
                            group: group(),
                            member: id.clone(),
                        },
                        Some(RecordValue::TargetAssignmentMember(t.clone())),
                    ));
                }
            }
            out.push((
                RecordKey::TargetAssignmentMetadata { group: group() },
                Some(RecordValue::TargetAssignmentMetadata {
                    assignment_epoch: self.assignment_epoch,
                }),
            ));
        }
        for id in &changes.current {
            if let Some(m) = self.members.get(id) {
                let a = &m.assignment;
                out.push((
                    RecordKey::CurrentMemberAssignment {
                        group: group(),
                        member: id.clone(),
                    },
                    Some(RecordValue::CurrentMemberAssignment(CurrentAssignment {
                        member_epoch: a.epoch,
                        previous_member_epoch: a.previous_epoch,
                        state: a.state.value(),
                        assigned: a.assigned.clone(),
                        pending_revocation: a.pending_revocation.clone(),
                    })),
                ));
            }
        }
        out
    }

    /// Every record of the group as it is: what a replay needs to rebuild it.
    pub fn all_records(&self) -> Vec<(RecordKey, Option<RecordValue>)> {
        let ids: BTreeSet<String> = self.members.keys().cloned().collect();
        self.records_for(&Changes {
            epoch: true,
            subscribed: true,
            members: ids.clone(),
            target: Some(self.target.keys().cloned().collect()),
            current: ids,
            removed: BTreeSet::new(),
        })
    }

    /// The records that delete the group's own keys (its members' go as they leave):
    /// for DeleteGroups of an empty group.
    pub fn tombstones(&self) -> Vec<(RecordKey, Option<RecordValue>)> {
        let group = || self.id.clone();
        vec![
            (RecordKey::TargetAssignmentMetadata { group: group() }, None),
            (RecordKey::PartitionMetadata { group: group() }, None),
            (RecordKey::GroupMetadata { group: group() }, None),
        ]
    }

    fn topic_metadata(&self) -> Vec<TopicMetadata> {
        self.subscribed
            .iter()
            .map(|(name, (id, spec))| TopicMetadata {
                id: *id,
                name: name.clone(),
                partitions: spec.partitions,
                racks: spec
                    .racks
                    .iter()
                    .enumerate()
                    .filter(|(_, r)| !r.is_empty())
                    .map(|(p, r)| (p as i32, r.iter().cloned().collect()))
                    .collect(),
            })
            .collect()
    }

    /// Replays one record (a load of the offsets partition); `None` deletes. The group
    /// is whole only once [`Self::finish_restore`] has run.
    pub fn restore(&mut self, key: &RecordKey, value: Option<RecordValue>) {
        let member_id = match key {
            RecordKey::MemberMetadata { member, .. }
            | RecordKey::TargetAssignmentMember { member, .. }
            | RecordKey::CurrentMemberAssignment { member, .. } => Some(member.clone()),
            _ => None,
        };
        match (value, member_id) {
            (Some(RecordValue::GroupMetadata { epoch }), _) => self.epoch = epoch,
            (Some(RecordValue::PartitionMetadata { topics }), _) => {
                self.subscribed = topics.into_iter().map(restored_topic).collect();
            }
            (Some(RecordValue::TargetAssignmentMetadata { assignment_epoch }), _) => {
                self.assignment_epoch = assignment_epoch
            }
            (Some(RecordValue::MemberMetadata(md)), Some(id)) => {
                self.members
                    .entry(id.clone())
                    .or_insert_with(|| ConsumerMember::new(id))
                    .set_metadata(md);
            }
            (Some(RecordValue::TargetAssignmentMember(a)), Some(id)) => {
                self.target.insert(id, a);
            }
            (Some(RecordValue::CurrentMemberAssignment(c)), Some(id)) => {
                let m = self
                    .members
                    .entry(id.clone())
                    .or_insert_with(|| ConsumerMember::new(id));
                m.assignment = MemberAssignment {
                    state: MemberState::from_value(c.state).unwrap_or(MemberState::Stable),
                    epoch: c.member_epoch,
                    previous_epoch: c.previous_member_epoch,
                    assigned: c.assigned,
                    pending_revocation: c.pending_revocation,
                };
            }
            (None, Some(id)) => match key {
                RecordKey::MemberMetadata { .. } => {
                    self.members.remove(&id);
                }
                RecordKey::TargetAssignmentMember { .. } => {
                    self.target.remove(&id);
                }
                _ => {
                    if let Some(m) = self.members.get_mut(&id) {
                        m.assignment = MemberAssignment::joining();
                    }
                }
            },
            _ => {}
        }
    }

    /// Ends a replay: holders and static members are rebuilt from the members, every
    /// session starts at `now_ms` (as Kafka's coordinator restores them), and the topics
    /// are looked at again at the next heartbeat.
    pub fn finish_restore(&mut self, now_ms: i64, config: &ConsumerGroupConfig) {
        self.holders.clear();
        self.static_members.clear();
        let members = &self.members;
        self.target.retain(|id, _| members.contains_key(id));
        for m in self.members.values_mut() {
            m.session_deadline_ms = now_ms + i64::from(m.session_timeout_ms(config));
            m.revocation_deadline_ms = (m.assignment.state == MemberState::UnrevokedPartitions)
                .then(|| now_ms + i64::from(m.rebalance_timeout_ms.max(0)));
            for key in m.assignment.held().partitions() {
                self.holders.insert(key, m.member_id.clone());
            }
            if let Some(i) = &m.instance_id {
                self.static_members.insert(i.clone(), m.member_id.clone());
            }
        }
        self.catalog_version = None;
        self.changes = Changes::default();
    }

    fn check_invariants(&self) {
        debug_assert!(self.assignment_epoch <= self.epoch);
        debug_assert!(self
            .members
            .values()
            .all(|m| m.assignment.epoch <= self.assignment_epoch));
        debug_assert!(self.members.keys().all(|id| self.target.contains_key(id)));
        debug_assert!(self.members.values().all(|m| m
            .assignment
            .held()
            .partitions()
            .all(|k| self.holders.get(&k) == Some(&m.member_id))));
        debug_assert!(self
            .holders
            .values()
            .all(|id| self.members.contains_key(id)));
    }
}

/// The assignor of the group: the one most members name (ties to the configured
/// order), else the broker's default.
fn group_assignor<'a>(
    members: impl Iterator<Item = &'a ConsumerMember>,
    config: &ConsumerGroupConfig,
) -> AssignorKind {
    let mut votes: HashMap<AssignorKind, usize> = HashMap::new();
    for a in members.filter_map(|m| m.server_assignor) {
        *votes.entry(a).or_default() += 1;
    }
    let best = votes.values().copied().max().unwrap_or(0);
    config
        .assignors
        .iter()
        .copied()
        .find(|a| best > 0 && votes.get(a) == Some(&best))
        .or_else(|| config.assignors.first().copied())
        .unwrap_or(AssignorKind::Uniform)
}

/// A subscribed topic as its partition-metadata record stored it.
fn restored_topic(t: TopicMetadata) -> (String, (TopicId, TopicSpec)) {
    let mut racks = vec![BTreeSet::new(); usize::try_from(t.partitions).unwrap_or(0)];
    for (p, rs) in t.racks {
        if let Some(slot) = usize::try_from(p).ok().and_then(|p| racks.get_mut(p)) {
            slot.extend(rs);
        }
    }
    if racks.iter().all(BTreeSet::is_empty) {
        racks.clear();
    }
    (
        t.name,
        (
            t.id,
            TopicSpec {
                partitions: t.partitions,
                racks,
            },
        ),
    )
}

/// Kafka matches a pattern against the whole topic name.
fn full_match(pattern: &str) -> Result<Regex, regex::Error> {
    Regex::new(&format!("^(?:{pattern})$"))
}

/// Kafka's checks of a heartbeat's fields before anything changes.
fn validate(hb: &Heartbeat, config: &ConsumerGroupConfig) -> Result<(), GroupError> {
    let invalid = |m: &str| Err(GroupError::InvalidRequest(m.to_string()));
    if hb.instance_id.as_deref() == Some("") {
        return invalid("InstanceId can't be empty.");
    }
    if hb.rack_id.as_deref() == Some("") {
        return invalid("RackId can't be empty.");
    }
    if hb.version >= 1 && hb.member_id.is_empty() {
        return invalid("MemberId can't be empty.");
    }
    match hb.member_epoch {
        e if e > 0 || e == LEAVE_GROUP_MEMBER_EPOCH => {
            if hb.member_id.is_empty() {
                return invalid("MemberId can't be empty.");
            }
        }
        0 => {
            if hb.rebalance_timeout_ms == -1 {
                return invalid("RebalanceTimeoutMs must be provided in first request.");
            }
            if hb.owned.as_ref().is_none_or(|o| !o.is_empty()) {
                return invalid("TopicPartitions must be empty when (re-)joining.");
            }
            let names = hb
                .subscribed_topic_names
                .as_ref()
                .is_some_and(|n| !n.is_empty());
            let regex = hb
                .subscribed_topic_regex
                .as_ref()
                .is_some_and(|r| !r.is_empty());
            if !names && !regex {
                return invalid(
                    "SubscribedTopicNames or SubscribedTopicRegex must be set in first request.",
                );
            }
        }
        LEAVE_GROUP_STATIC_MEMBER_EPOCH => {
            if hb.member_id.is_empty() {
                return invalid("MemberId can't be empty.");
            }
            if hb.instance_id.is_none() {
                return invalid("InstanceId can't be null.");
            }
        }
        _ => return invalid("MemberEpoch is invalid."),
    }
    if let Some(a) = &hb.server_assignor {
        let known = AssignorKind::from_name(a).is_some_and(|k| config.assignors.contains(&k));
        if !known {
            return Err(GroupError::UnsupportedAssignor(a.clone()));
        }
    }
    if let Some(re) = hb
        .subscribed_topic_regex
        .as_deref()
        .filter(|r| !r.is_empty())
    {
        if let Err(e) = full_match(re) {
            return Err(GroupError::InvalidRegularExpression(e.to_string()));
        }
    }
    Ok(())
}

/// A heartbeat at an epoch other than the member's is fenced, except at its previous
/// epoch with no partition beyond its assigned ones: the answer that moved it on may
/// have been lost.
fn check_epoch(m: &ConsumerMember, hb: &Heartbeat) -> Result<(), GroupError> {
    let (current, previous) = (m.assignment.epoch, m.assignment.previous_epoch);
    let ok = hb.member_epoch == current
        || (hb.member_epoch == previous
            && hb
                .owned
                .as_ref()
                .is_some_and(|o| o.is_subset_of(&m.assignment.assigned)));
    if ok {
        Ok(())
    } else {
        Err(GroupError::FencedMemberEpoch)
    }
}

mod classic;
pub use classic::{ClassicJoin, ClassicJoined, ClassicSeed, CONSUMER_PROTOCOL_TYPE};

#[cfg(test)]
mod tests;
