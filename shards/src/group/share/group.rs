//! One share group (KIP-932): its members, the group epoch, and the target assignment
//! the `simple` assignor computed at that epoch (`assignor.rs`). Pure: time comes in as
//! milliseconds, topics through a [`TopicCatalog`], and nothing here waits or writes.
//!
//! A ShareGroupHeartbeat runs Kafka's steps: the member is created (epoch 0) or checked,
//! and updated; a new member or a change of its subscription bumps the group epoch, and
//! so does a change of the subscribed topics (created, deleted, grown); when the group
//! epoch is past the target's, the assignor computes a new target; the member then takes
//! its target at once. Unlike a consumer group there is no revocation step: several
//! members may read a partition, and what one member holds is records, locked on the
//! partition's leader, not partitions.
//!
//! Invariants (asserted in debug builds, proven by the tests):
//! - `assignment_epoch <= epoch`, and every member's epoch `<= assignment_epoch`;
//! - a member's assignment is its target of the epoch it is at, within the topics it
//!   subscribes to;
//! - `target` has an entry for every member once a target has been computed since it
//!   joined.
//!
//! - `changes` names every member and group field that moved since the coordinator last
//!   took them: writing `records_for(changes)` after each step keeps the log equal to
//!   the group (`stored.rs`; a replay of every record written gives the same group).
//!
//! Not here yet: the share state's initialization before partitions are assigned
//! (Kafka assigns only partitions whose state the share coordinator has initialized).

use super::assignor::{self, ShareMemberSpec};
use crate::group::consumer::assignment::{Assignment, TopicId};
use crate::group::consumer::group::TopicCatalog;
use crate::group::types::GroupError;
use std::collections::{BTreeMap, BTreeSet};

mod stored;
pub use stored::ShareChanges;

/// The member epoch of a heartbeat that leaves the group.
pub const LEAVE_GROUP_MEMBER_EPOCH: i32 = -1;

/// The broker's settings for share groups (Kafka's `group.share.*`).
#[derive(Debug, Clone)]
pub struct ShareGroupConfig {
    /// `group.share.session.timeout.ms`.
    pub session_timeout_ms: i32,
    /// `group.share.heartbeat.interval.ms`.
    pub heartbeat_interval_ms: i32,
    /// `group.share.max.size`.
    pub max_size: usize,
    /// The bounds of a share group's own configs (`group::share::overrides`).
    pub bounds: ShareBounds,
}

impl Default for ShareGroupConfig {
    fn default() -> Self {
        ShareGroupConfig {
            session_timeout_ms: 45_000,
            heartbeat_interval_ms: 5_000,
            max_size: 200,
            bounds: ShareBounds::default(),
        }
    }
}

/// The bounds, inclusive, of a share group's numeric configs (Kafka's
/// `group.share.min.*` and `group.share.max.*`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ShareBounds {
    pub session_timeout_ms: (i64, i64),
    pub heartbeat_interval_ms: (i64, i64),
    pub record_lock_duration_ms: (i64, i64),
    pub delivery_count_limit: (i64, i64),
    pub partition_max_record_locks: (i64, i64),
}

impl Default for ShareBounds {
    /// Kafka's defaults.
    fn default() -> Self {
        ShareBounds {
            session_timeout_ms: (45_000, 60_000),
            heartbeat_interval_ms: (5_000, 15_000),
            record_lock_duration_ms: (15_000, 60_000),
            delivery_count_limit: (2, 10),
            partition_max_record_locks: (100, 10_000),
        }
    }
}

/// A ShareGroupHeartbeat, decoded. `None` fields were not sent (unchanged).
#[derive(Debug, Clone, Default)]
pub struct ShareHeartbeat {
    pub member_id: String,
    pub member_epoch: i32,
    pub rack_id: Option<String>,
    pub subscribed_topic_names: Option<Vec<String>>,
    pub client_id: String,
    pub client_host: String,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ShareHeartbeatAnswer {
    pub member_id: String,
    pub member_epoch: i32,
    pub heartbeat_interval_ms: i32,
    /// Sent when the member joins, sends its subscription, or its assignment changed.
    pub assignment: Option<Assignment>,
}

#[derive(Debug, Clone)]
pub struct ShareMember {
    pub member_id: String,
    pub rack_id: Option<String>,
    pub client_id: String,
    pub client_host: String,
    pub subscribed: BTreeSet<String>,
    pub epoch: i32,
    pub previous_epoch: i32,
    pub assigned: Assignment,
    pub session_deadline_ms: i64,
}

impl ShareMember {
    fn new(member_id: String) -> ShareMember {
        ShareMember {
            member_id,
            rack_id: None,
            client_id: String::new(),
            client_host: String::new(),
            subscribed: BTreeSet::new(),
            epoch: 0,
            previous_epoch: 0,
            assigned: Assignment::new(),
            session_deadline_ms: 0,
        }
    }
}

/// ShareGroupDescribe's view of a group.
#[derive(Debug, Clone)]
pub struct ShareGroupDescription {
    pub state: &'static str,
    pub epoch: i32,
    pub assignment_epoch: i32,
    pub assignor: &'static str,
    pub members: Vec<ShareMember>,
}

#[derive(Debug, Default)]
pub struct ShareGroup {
    id: String,
    epoch: i32,
    assignment_epoch: i32,
    members: BTreeMap<String, ShareMember>,
    target: BTreeMap<String, Assignment>,
    /// The existing topics some member subscribes to: name -> (id, partitions).
    subscribed: BTreeMap<String, (TopicId, i32)>,
    /// `metadata_hash(subscribed)`, stored with the epoch: after a replay (`subscribed`
    /// empty until the next heartbeat looks at the topics) it tells whether the topics
    /// changed while the group was not loaded.
    metadata_hash: i64,
    /// The share partitions the group has been assigned, by topic: those whose state
    /// the share coordinator may hold (Kafka's "initialized" partitions, record 15).
    state_partitions: BTreeMap<TopicId, (String, BTreeSet<i32>)>,
    catalog_version: Option<u64>,
    changes: ShareChanges,
}

impl ShareGroup {
    pub fn new(id: String) -> ShareGroup {
        ShareGroup {
            id,
            ..ShareGroup::default()
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

    pub fn members(&self) -> impl Iterator<Item = &ShareMember> {
        self.members.values()
    }

    pub fn member(&self, id: &str) -> Option<&ShareMember> {
        self.members.get(id)
    }

    pub fn is_empty(&self) -> bool {
        self.members.is_empty()
    }

    /// Kafka's share group states: Empty without members, Stable with.
    pub fn state(&self) -> &'static str {
        if self.members.is_empty() {
            "Empty"
        } else {
            "Stable"
        }
    }

    /// The share partitions whose state the share coordinator may hold for the group:
    /// (topic id, name, partitions).
    pub fn state_partitions(&self) -> Vec<crate::group::share::records::TopicPartitions> {
        self.state_partitions
            .iter()
            .map(|(id, (name, ps))| (*id, name.clone(), ps.iter().copied().collect()))
            .collect()
    }

    /// Records that these share partitions may have state (an assignment, an offsets
    /// reset).
    pub fn add_state_partitions(
        &mut self,
        id: TopicId,
        name: &str,
        partitions: impl IntoIterator<Item = i32>,
    ) {
        let entry = self
            .state_partitions
            .entry(id)
            .or_insert_with(|| (name.to_string(), BTreeSet::new()));
        let before = entry.1.len();
        entry.1.extend(partitions);
        if entry.1.len() != before || entry.0 != name {
            entry.0 = name.to_string();
            self.changes.state_partitions = true;
        }
    }

    /// Forgets the state partitions of these topics (their state was deleted).
    pub fn forget_state_topics(&mut self, topics: &[TopicId]) {
        for t in topics {
            if self.state_partitions.remove(t).is_some() {
                self.changes.state_partitions = true;
            }
        }
    }

    pub fn describe(&self) -> ShareGroupDescription {
        ShareGroupDescription {
            state: self.state(),
            epoch: self.epoch,
            assignment_epoch: self.assignment_epoch,
            assignor: assignor::NAME,
            members: self.members.values().cloned().collect(),
        }
    }

    /// Serves one heartbeat at `now_ms`.
    pub fn heartbeat(
        &mut self,
        hb: ShareHeartbeat,
        catalog: &impl TopicCatalog,
        config: &ShareGroupConfig,
        now_ms: i64,
    ) -> Result<ShareHeartbeatAnswer, GroupError> {
        validate(&hb)?;
        if hb.member_epoch == LEAVE_GROUP_MEMBER_EPOCH {
            if !self.members.contains_key(&hb.member_id) {
                return Err(GroupError::UnknownMemberId);
            }
            self.remove_member(&hb.member_id);
            return Ok(ShareHeartbeatAnswer {
                member_id: hb.member_id,
                member_epoch: LEAVE_GROUP_MEMBER_EPOCH,
                heartbeat_interval_ms: 0,
                assignment: None,
            });
        }
        let joining = hb.member_epoch == 0;
        let existing = match self.members.get(&hb.member_id) {
            None if joining => None,
            None => return Err(GroupError::UnknownMemberId),
            Some(m) => {
                // The previous epoch is taken: the answer that moved the member on may
                // have been lost.
                if hb.member_epoch != m.epoch && hb.member_epoch != m.previous_epoch {
                    return Err(GroupError::FencedMemberEpoch);
                }
                Some(m.clone())
            }
        };
        let is_new = existing.is_none();
        if is_new && self.members.len() >= config.max_size {
            return Err(GroupError::GroupMaxSizeReached);
        }
        let mut member = existing.unwrap_or_else(|| ShareMember::new(hb.member_id.clone()));
        let before_subscription = member.subscribed.clone();
        let before_metadata = stored::metadata_of(&member);
        if let Some(r) = hb.rack_id {
            member.rack_id = Some(r);
        }
        if let Some(names) = &hb.subscribed_topic_names {
            member.subscribed = names.iter().cloned().collect();
        }
        member.client_id = hb.client_id.clone();
        member.client_host = hb.client_host.clone();
        member.session_deadline_ms = now_ms + i64::from(config.session_timeout_ms);
        let mut bump = is_new || member.subscribed != before_subscription;
        if is_new || stored::metadata_of(&member) != before_metadata {
            self.changes.members.insert(member.member_id.clone());
        }
        let before_assigned = member.assigned.clone();
        let before_epochs = (member.epoch, member.previous_epoch);
        let member_id = member.member_id.clone();
        self.members.insert(member_id.clone(), member);

        if bump || self.catalog_version != Some(catalog.version()) {
            self.subscribed = self.compute_subscribed(catalog);
            let hash = stored::metadata_hash(&self.subscribed);
            bump |= hash != self.metadata_hash;
            self.metadata_hash = hash;
            self.catalog_version = Some(catalog.version());
        }
        if bump {
            self.epoch += 1;
            self.changes.epoch = true;
        }
        if self.epoch > self.assignment_epoch {
            self.compute_target();
        }
        // The member takes its target at once.
        let assignment_epoch = self.assignment_epoch;
        let assigned = self.assigned_of(&member_id);
        let m = self.members.get_mut(&member_id).expect("inserted above");
        if m.epoch != assignment_epoch {
            m.previous_epoch = m.epoch;
            m.epoch = assignment_epoch;
        }
        m.assigned = assigned;
        if is_new || (m.epoch, m.previous_epoch) != before_epochs || m.assigned != before_assigned {
            self.changes.current.insert(member_id.clone());
        }
        let send = joining || hb.subscribed_topic_names.is_some() || m.assigned != before_assigned;
        let answer = ShareHeartbeatAnswer {
            member_id,
            member_epoch: m.epoch,
            heartbeat_interval_ms: config.heartbeat_interval_ms,
            assignment: send.then(|| m.assigned.clone()),
        };
        self.check();
        Ok(answer)
    }

    /// Removes a member (it left, or its session expired); the others are reassigned
    /// from their next heartbeat.
    pub fn remove_member(&mut self, member_id: &str) {
        if self.members.remove(member_id).is_some() {
            self.target.remove(member_id);
            self.epoch += 1;
            self.changes.epoch = true;
            self.changes.members.remove(member_id);
            self.changes.current.remove(member_id);
            if let Some(t) = self.changes.target.as_mut() {
                t.remove(member_id);
            }
            self.changes.removed.insert(member_id.to_string());
        }
    }

    /// The members whose session ran out by `now_ms`.
    pub fn expired(&self, now_ms: i64) -> Vec<String> {
        self.members
            .values()
            .filter(|m| m.session_deadline_ms <= now_ms)
            .map(|m| m.member_id.clone())
            .collect()
    }

    /// A member's target, within the topics it subscribes to now.
    fn assigned_of(&self, member_id: &str) -> Assignment {
        let Some(m) = self.members.get(member_id) else {
            return Assignment::new();
        };
        let ids: BTreeSet<TopicId> = self.subscribed_ids(m);
        let mut a = self.target.get(member_id).cloned().unwrap_or_default();
        a.retain(|t, _| ids.contains(&t));
        a
    }

    fn subscribed_ids(&self, m: &ShareMember) -> BTreeSet<TopicId> {
        m.subscribed
            .iter()
            .filter_map(|n| self.subscribed.get(n).map(|(id, _)| *id))
            .collect()
    }

    fn compute_subscribed(&self, catalog: &impl TopicCatalog) -> BTreeMap<String, (TopicId, i32)> {
        let names: BTreeSet<&String> = self.members.values().flat_map(|m| &m.subscribed).collect();
        names
            .into_iter()
            .filter_map(|n| {
                catalog
                    .topic(n)
                    .map(|(id, spec)| (n.clone(), (id, spec.partitions)))
            })
            .collect()
    }

    fn compute_target(&mut self) {
        let subscriptions: Vec<BTreeSet<TopicId>> = self
            .members
            .values()
            .map(|m| self.subscribed_ids(m))
            .collect();
        let specs: Vec<ShareMemberSpec<'_>> = self
            .members
            .values()
            .zip(&subscriptions)
            .map(|(m, subscribed)| ShareMemberSpec {
                member_id: &m.member_id,
                subscribed,
                current: &m.assigned,
            })
            .collect();
        let partitions: BTreeMap<TopicId, i32> = self.subscribed.values().copied().collect();
        let target = assignor::assign(&specs, &partitions);
        let changed = self.changes.target.get_or_insert_with(BTreeSet::new);
        for (id, t) in &target {
            if self.target.get(id) != Some(t) {
                changed.insert(id.clone());
            }
        }
        self.target = target;
        self.assignment_epoch = self.epoch;
        let subscribed: Vec<(String, TopicId, i32)> = self
            .subscribed
            .iter()
            .map(|(name, (id, n))| (name.clone(), *id, *n))
            .collect();
        for (name, id, n) in subscribed {
            self.add_state_partitions(id, &name, 0..n);
        }
    }

    fn check(&self) {
        if !cfg!(debug_assertions) {
            return;
        }
        assert!(self.assignment_epoch <= self.epoch);
        for m in self.members.values() {
            assert!(
                m.epoch <= self.assignment_epoch,
                "a member is never ahead of the target"
            );
        }
    }
}

/// Kafka's request checks (INVALID_REQUEST).
fn validate(hb: &ShareHeartbeat) -> Result<(), GroupError> {
    let invalid = |m: &str| Err(GroupError::InvalidRequest(m.to_string()));
    if hb.member_id.is_empty() {
        return invalid("MemberId can't be empty.");
    }
    if hb.rack_id.as_deref() == Some("") {
        return invalid("RackId can't be empty.");
    }
    if hb.member_epoch < LEAVE_GROUP_MEMBER_EPOCH {
        return invalid("MemberEpoch is invalid.");
    }
    if hb.member_epoch == 0
        && hb
            .subscribed_topic_names
            .as_ref()
            .is_none_or(|n| n.is_empty())
    {
        return invalid("SubscribedTopicNames must be set in first request.");
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::group::consumer::assignor::TopicSpec;
    use crate::group::share::records;
    use proptest::prelude::*;
    use uuid::Uuid;

    #[derive(Default)]
    struct Topics {
        version: u64,
        by_name: BTreeMap<String, (TopicId, i32)>,
    }

    impl Topics {
        fn put(&mut self, name: &str, partitions: i32) {
            let next = Uuid::from_u128(self.by_name.len() as u128 + 1);
            let id = self.by_name.get(name).map_or(next, |(id, _)| *id);
            self.by_name.insert(name.to_string(), (id, partitions));
            self.version += 1;
        }
    }

    impl TopicCatalog for Topics {
        fn version(&self) -> u64 {
            self.version
        }
        fn topic(&self, name: &str) -> Option<(TopicId, TopicSpec)> {
            self.by_name.get(name).map(|(id, n)| {
                (
                    *id,
                    TopicSpec {
                        partitions: *n,
                        racks: Vec::new(),
                    },
                )
            })
        }
        fn topic_names(&self) -> Vec<String> {
            self.by_name.keys().cloned().collect()
        }
    }

    fn beat(id: &str, epoch: i32, topics: Option<&[&str]>) -> ShareHeartbeat {
        ShareHeartbeat {
            member_id: id.into(),
            member_epoch: epoch,
            subscribed_topic_names: topics.map(|t| t.iter().map(|s| s.to_string()).collect()),
            ..ShareHeartbeat::default()
        }
    }

    #[test]
    fn members_share_one_partition_and_take_their_target_at_once() {
        let mut topics = Topics::default();
        topics.put("q", 1);
        let mut g = ShareGroup::new("g".into());
        let c = ShareGroupConfig::default();
        let a = g
            .heartbeat(beat("a", 0, Some(&["q"])), &topics, &c, 0)
            .expect("a");
        assert_eq!(
            (a.member_epoch, a.assignment.as_ref().map(|x| x.len())),
            (1, Some(1))
        );
        let b = g
            .heartbeat(beat("b", 0, Some(&["q"])), &topics, &c, 0)
            .expect("b");
        // No revocation step: b reads the partition with a at once.
        assert_eq!(
            (b.member_epoch, b.assignment.as_ref().map(|x| x.len())),
            (2, Some(1))
        );
        let a2 = g
            .heartbeat(beat("a", 1, None), &topics, &c, 0)
            .expect("a again");
        assert_eq!((a2.member_epoch, a2.assignment), (2, None));
        assert_eq!(g.state(), "Stable");
    }

    #[test]
    fn bad_heartbeats_get_kafkas_errors() {
        let mut topics = Topics::default();
        topics.put("q", 2);
        let mut g = ShareGroup::new("g".into());
        let c = ShareGroupConfig {
            max_size: 1,
            ..ShareGroupConfig::default()
        };
        let err = |g: &mut ShareGroup, hb| g.heartbeat(hb, &topics, &c, 0).unwrap_err();
        assert!(matches!(
            err(&mut g, beat("", 0, Some(&["q"]))),
            GroupError::InvalidRequest(_)
        ));
        assert!(matches!(
            err(&mut g, beat("a", 0, None)),
            GroupError::InvalidRequest(_)
        ));
        assert!(matches!(
            err(&mut g, beat("a", -2, None)),
            GroupError::InvalidRequest(_)
        ));
        assert_eq!(err(&mut g, beat("a", 3, None)), GroupError::UnknownMemberId);
        g.heartbeat(beat("a", 0, Some(&["q"])), &topics, &c, 0)
            .expect("a");
        assert_eq!(
            err(&mut g, beat("b", 0, Some(&["q"]))),
            GroupError::GroupMaxSizeReached
        );
        assert_eq!(
            err(&mut g, beat("a", 7, None)),
            GroupError::FencedMemberEpoch
        );
        // A retried join (its answer lost) is taken.
        g.heartbeat(beat("a", 0, Some(&["q"])), &topics, &c, 0)
            .expect("retried join");
        assert_eq!(
            err(&mut g, beat("z", -1, None)),
            GroupError::UnknownMemberId
        );
        let left = g
            .heartbeat(beat("a", -1, None), &topics, &c, 0)
            .expect("leaves");
        assert_eq!(left.member_epoch, -1);
        assert!(g.is_empty() && g.state() == "Empty");
    }

    #[derive(Debug, Clone)]
    enum Op {
        Join(u8),
        Beat(u8),
        Leave(u8),
        Grow(i32),
        Expire,
    }

    fn op() -> impl Strategy<Value = Op> {
        prop_oneof![
            2 => (0u8..8).prop_map(Op::Join),
            4 => (0u8..8).prop_map(Op::Beat),
            1 => (0u8..8).prop_map(Op::Leave),
            1 => (1i32..3).prop_map(Op::Grow),
            1 => Just(Op::Expire),
        ]
    }

    /// Members driven by ops, with the epochs they were last given, and the clock.
    struct Clients {
        topics: Topics,
        epochs: BTreeMap<u8, i32>,
        now: i64,
    }

    impl Clients {
        fn new(partitions: i32) -> Clients {
            let mut topics = Topics::default();
            topics.put("q", partitions);
            Clients {
                topics,
                epochs: BTreeMap::new(),
                now: 0,
            }
        }

        fn apply(&mut self, op: Op, g: &mut ShareGroup, c: &ShareGroupConfig) {
            let (topics, now) = (&self.topics, self.now);
            match op {
                Op::Join(i) if !self.epochs.contains_key(&i) => {
                    let a = g
                        .heartbeat(beat(&format!("m{i}"), 0, Some(&["q"])), topics, c, now)
                        .expect("joins");
                    self.epochs.insert(i, a.member_epoch);
                }
                Op::Join(_) => {}
                Op::Beat(i) => {
                    if let Some(e) = self.epochs.get(&i).copied() {
                        match g.heartbeat(beat(&format!("m{i}"), e, None), topics, c, now) {
                            Ok(a) => self.epochs.insert(i, a.member_epoch),
                            Err(_) => self.epochs.remove(&i),
                        };
                    }
                }
                Op::Leave(i) => {
                    if self.epochs.remove(&i).is_some() {
                        g.heartbeat(beat(&format!("m{i}"), -1, None), topics, c, now)
                            .expect("leaves");
                    }
                }
                Op::Grow(n) => {
                    let cur = self.topics.by_name["q"].1;
                    self.topics.put("q", cur + n);
                }
                Op::Expire => {
                    self.now += 50_000;
                    for id in g.expired(self.now) {
                        g.remove_member(&id);
                    }
                    self.epochs
                        .retain(|i, _| g.member(&format!("m{i}")).is_some());
                }
            }
        }
    }

    proptest! {
        /// Under any joins, heartbeats, leaves, expiries and topic growth, once every
        /// member has heartbeated again each holds its target: every partition of the
        /// topic is read by ceil(M / P) members.
        #[test]
        fn once_every_member_heartbeats_the_partitions_are_shared_evenly(ops in proptest::collection::vec(op(), 1..60)) {
            let mut clients = Clients::new(3);
            let c = ShareGroupConfig::default();
            let mut g = ShareGroup::new("g".into());
            let mut last_epoch = 0;
            for op in ops {
                clients.apply(op, &mut g, &c);
                prop_assert!(g.epoch() >= last_epoch, "the group epoch only grows");
                last_epoch = g.epoch();
            }
            if clients.epochs.is_empty() {
                return Ok(());
            }
            for _ in 0..2 {
                for i in clients.epochs.keys().copied().collect::<Vec<_>>() {
                    clients.apply(Op::Beat(i), &mut g, &c);
                }
            }
            let p = clients.topics.by_name["q"].1;
            let sharing = clients.epochs.len().div_ceil(p as usize);
            let id = clients.topics.by_name["q"].0;
            for part in 0..p {
                let readers = g.members().filter(|m| m.assigned.contains(id, part)).count();
                prop_assert_eq!(readers, sharing, "partition {}", part);
            }
            for m in g.members() {
                prop_assert_eq!(m.epoch, g.epoch());
            }
        }

        /// The records written after every step, encoded, decoded and replayed in
        /// order, give back the group: members, epochs, assignments and targets.
        #[test]
        fn a_replay_of_the_written_records_gives_back_the_group(ops in proptest::collection::vec(op(), 1..50)) {
            let mut clients = Clients::new(3);
            let c = ShareGroupConfig::default();
            let mut g = ShareGroup::new("g".into());
            let mut log: Vec<(Vec<u8>, Option<Vec<u8>>)> = Vec::new();
            for op in ops {
                clients.apply(op, &mut g, &c);
                let changes = g.take_changes();
                for (k, v) in g.records_for(&changes) {
                    log.push((records::encode_key(&k).expect("short ids"), v.as_ref().map(records::encode_value)));
                }
                let replayed = replay(&log, &c);
                prop_assert_eq!(stored_form(&replayed), stored_form(&g));
            }
            // A replay ends with a group that answers its members as the live one did.
            let mut replayed = replay(&log, &c);
            let (topics, now) = (&clients.topics, clients.now);
            for (i, e) in &clients.epochs {
                let id = format!("m{i}");
                let live = g.heartbeat(beat(&id, *e, None), topics, &c, now).expect("live");
                let back = replayed.heartbeat(beat(&id, *e, None), topics, &c, now).expect("replayed");
                prop_assert_eq!(live, back);
            }
        }
    }

    fn replay(log: &[(Vec<u8>, Option<Vec<u8>>)], c: &ShareGroupConfig) -> ShareGroup {
        let mut g = ShareGroup::new("g".into());
        for (k, v) in log {
            let key = records::decode_key(k).expect("key");
            let value = v
                .as_ref()
                .map(|v| records::decode_value(&key, v).expect("value"));
            if !g.restore(&key, value) {
                g = ShareGroup::new("g".into());
            }
        }
        g.finish_restore(0, c);
        g
    }

    /// Everything a share group stores, comparable.
    fn stored_form(g: &ShareGroup) -> impl PartialEq + std::fmt::Debug {
        let members: Vec<_> = g
            .members()
            .map(|m| {
                (
                    m.member_id.clone(),
                    m.rack_id.clone(),
                    m.client_id.clone(),
                    m.subscribed.clone(),
                    m.epoch,
                    m.previous_epoch,
                    m.assigned.clone(),
                )
            })
            .collect();
        (
            g.epoch,
            g.assignment_epoch,
            g.metadata_hash,
            g.target.clone(),
            members,
        )
    }

    #[test]
    fn tombstones_delete_the_group_metadata_last() {
        let mut topics = Topics::default();
        topics.put("q", 1);
        let mut g = ShareGroup::new("g".into());
        let c = ShareGroupConfig::default();
        g.heartbeat(beat("a", 0, Some(&["q"])), &topics, &c, 0)
            .expect("a");
        let t = g.tombstones();
        assert!(t.iter().all(|(_, v)| v.is_none()));
        assert_eq!(
            t.last().map(|(k, _)| k),
            Some(&records::ShareRecordKey::GroupMetadata { group: "g".into() })
        );
        assert_eq!(t.len(), 6);
    }
}
