//! A group changing protocols with members in it (KIP-848's online migration, Kafka's
//! `group.consumer.migration.policy`):
//!
//! - **Upgrade.** A consumer-protocol member joins a classic group of consumers: the
//!   group becomes a consumer group ([`Group::classic_seeds`] gives its members to
//!   `ConsumerGroup::from_classic`, [`Group::take_upgraded`] swaps it in). Its classic
//!   members stay, each with the partitions it has; waiting JoinGroup and SyncGroup
//!   calls are answered REBALANCE_IN_PROGRESS, so they rejoin the consumer group.
//! - **Downgrade.** The last consumer-protocol member of a consumer group leaves (or is
//!   removed), and classic members remain: the group becomes a classic group, each
//!   member holding its target assignment, and prepares a rebalance
//!   ([`Group::downgrade`]) — the members rejoin, a leader assigns. Its generation is
//!   the highest member epoch: the epoch the group had before the leave, as Kafka
//!   converts the group instead of removing the member. Until it rejoins, each member
//!   is also taken at its own epoch (`Member::carried_epoch`): one that had not caught
//!   up yet heartbeats (told to rejoin) and commits what it consumed, where Kafka
//!   fences it with ILLEGAL_GENERATION and its partitions are lost uncommitted. Its
//!   commits are safe: until the join completes no partition moves, and what it
//!   holds no other member held in the consumer group.
//!
//! The coordinator writes each change as one batch: the old protocol's records deleted,
//! the new one's written, so a replay ends with the group the change left.
//!
//! Invariant: a group is one or the other — after either step the other protocol's
//! side holds no member.

use super::{Group, GroupState, Member};
use crate::group::consumer::embedded;
use crate::group::consumer::group::{ClassicSeed, ConsumerGroup, CONSUMER_PROTOCOL_TYPE};
use crate::group::consumer::records::ClassicProtocol;
use crate::group::types::{GroupError, JoinAnswer, Protocol, SyncAnswer};
use bytes::Bytes;
use std::time::{Duration, Instant};

impl Group {
    /// Whether the classic group's members may be taken into a consumer group: they
    /// speak the consumer's embedded protocol, and there are at most `max_size`.
    pub fn upgradable(&self, max_size: usize) -> bool {
        self.consumer.is_none()
            && self.protocol_type.as_deref() == Some(CONSUMER_PROTOCOL_TYPE)
            && self.members.len() <= max_size
    }

    /// The classic members as a consumer group takes them: each with its metadata
    /// under the selected protocol (its first, before one is selected) and its last
    /// assignment.
    pub fn classic_seeds(&self) -> Vec<ClassicSeed> {
        self.members
            .values()
            .map(|m| {
                let subscription = match &self.protocol {
                    Some(p) => m.metadata_for(p),
                    None => m
                        .protocols
                        .first()
                        .map(|p| p.metadata.clone())
                        .unwrap_or_default(),
                };
                ClassicSeed {
                    member_id: m.id.clone(),
                    instance_id: m.instance_id.clone(),
                    client_id: m.client_id.clone(),
                    client_host: m.client_host.clone(),
                    session_timeout_ms: millis(m.session_timeout),
                    rebalance_timeout_ms: millis(m.rebalance_timeout),
                    protocols: m
                        .protocols
                        .iter()
                        .map(|p| ClassicProtocol {
                            name: p.name.clone(),
                            metadata: p.metadata.to_vec(),
                        })
                        .collect(),
                    subscription: subscription.to_vec(),
                    assignment: m.assignment.to_vec(),
                }
            })
            .collect()
    }

    /// The group is a consumer group from now on: `upgraded` holds its members. Calls
    /// waiting in the classic protocol are told to rejoin.
    pub fn take_upgraded(&mut self, upgraded: ConsumerGroup) {
        self.forget_members(GroupError::RebalanceInProgress);
        self.protocol_type = Some(CONSUMER_PROTOCOL_TYPE.to_string());
        self.consumer = Some(upgraded);
    }

    /// Ends the classic side's membership: waiting calls are answered `answer`, and the
    /// group keeps only its offsets (a tombstone of its record, replayed, does this too).
    pub fn forget_members(&mut self, answer: GroupError) {
        for m in self.members.values_mut() {
            if let Some(w) = m.join_waiter.take() {
                let _ = w.send(JoinAnswer::error(answer.clone(), m.id.clone()));
            }
            if let Some(w) = m.sync_waiter.take() {
                let _ = w.send(SyncAnswer::error(answer.clone()));
            }
        }
        self.members.clear();
        self.instances.clear();
        self.pending.clear();
        self.leader = None;
        self.protocol = None;
        self.rebalance_deadline = None;
        self.join_not_before = None;
        self.state = GroupState::Empty;
    }

    /// Whether the consumer group is due to become classic: every member left speaks
    /// the classic protocol.
    pub fn downgradable(&self) -> bool {
        self.consumer.as_ref().is_some_and(|c| c.all_classic())
    }

    /// The consumer group becomes a classic group (see the module doc) and prepares a
    /// rebalance. Returns the consumer group it was, for its records' deletion.
    pub fn downgrade(&mut self, now: Instant) -> ConsumerGroup {
        let c = self.consumer.take().expect("a consumer group to downgrade");
        debug_assert!(c.all_classic());
        debug_assert!(self.members.is_empty());
        for m in c.members() {
            let classic = m.classic.as_ref().expect("every member is classic");
            let version = classic
                .protocols
                .first()
                .and_then(|p| embedded::version(&p.metadata).ok())
                .unwrap_or(0);
            let member = Member {
                id: m.member_id.clone(),
                instance_id: m.instance_id.clone(),
                client_id: m.client_id.clone(),
                client_host: m.client_host.clone(),
                session_timeout: duration(classic.session_timeout_ms),
                rebalance_timeout: duration(m.rebalance_timeout_ms),
                protocols: classic
                    .protocols
                    .iter()
                    .map(|p| Protocol {
                        name: p.name.clone(),
                        metadata: Bytes::from(p.metadata.clone()),
                    })
                    .collect(),
                assignment: Bytes::from(embedded::assignment_bytes(
                    version,
                    &c.target_named(&m.member_id),
                )),
                last_heartbeat: now,
                carried_epoch: Some(m.assignment.epoch),
                join_waiter: None,
                sync_waiter: None,
            };
            if let Some(i) = &m.instance_id {
                self.instances.insert(i.clone(), m.member_id.clone());
            }
            self.members.insert(m.member_id.clone(), member);
        }
        self.generation = c
            .members()
            .map(|m| m.assignment.epoch)
            .max()
            .unwrap_or(c.epoch());
        self.protocol_type = Some(CONSUMER_PROTOCOL_TYPE.to_string());
        self.protocol = self.select_protocol();
        self.leader = self.members.keys().next().cloned();
        self.state = GroupState::Stable;
        self.dirty = true;
        self.prepare_rebalance(now, None);
        c
    }
}

fn millis(d: Duration) -> i32 {
    i32::try_from(d.as_millis()).unwrap_or(i32::MAX)
}

fn duration(ms: i32) -> Duration {
    Duration::from_millis(u64::try_from(ms).unwrap_or(0))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::group::consumer::assignment::{Assignment, TopicId};
    use crate::group::consumer::assignor::TopicSpec;
    use crate::group::consumer::embedded::{parse_assignment, subscription_bytes, Subscription};
    use crate::group::consumer::group::{
        ConsumerGroupConfig, Heartbeat, TopicCatalog, LEAVE_GROUP_MEMBER_EPOCH,
    };
    use crate::group::offsets_record::{GroupValue, MemberValue};
    use uuid::Uuid;

    struct OneTopic;
    const T: TopicId = Uuid::from_u128(7);

    impl TopicCatalog for OneTopic {
        fn version(&self) -> u64 {
            1
        }
        fn topic(&self, name: &str) -> Option<(TopicId, TopicSpec)> {
            (name == "t").then(|| {
                (
                    T,
                    TopicSpec {
                        partitions: 4,
                        racks: Vec::new(),
                    },
                )
            })
        }
        fn topic_names(&self) -> Vec<String> {
            vec!["t".into()]
        }
    }

    /// A stable classic group of `a` (t-0, t-1) and `b` (t-2, t-3) at generation 5.
    fn classic_group() -> Group {
        let member = |id: &str, partitions: Vec<i32>| MemberValue {
            member_id: id.into(),
            group_instance_id: None,
            client_id: "c".into(),
            client_host: "h".into(),
            rebalance_timeout_ms: 30_000,
            session_timeout_ms: 10_000,
            subscription: Bytes::from(subscription_bytes(
                3,
                &Subscription {
                    topics: vec!["t".into()],
                    ..Subscription::default()
                },
            )),
            assignment: Bytes::from(embedded::assignment_bytes(
                3,
                &vec![("t".into(), partitions)],
            )),
        };
        let mut g = Group::new("g".into());
        g.restore(
            GroupValue {
                protocol_type: CONSUMER_PROTOCOL_TYPE.into(),
                generation: 5,
                protocol: Some("range".into()),
                leader: Some("a".into()),
                current_state_timestamp_ms: -1,
                members: vec![member("a", vec![0, 1]), member("b", vec![2, 3])],
            },
            Instant::now(),
        );
        g
    }

    fn joiner(member_epoch: i32) -> Heartbeat {
        Heartbeat {
            version: 1,
            member_id: "c".into(),
            member_epoch,
            rebalance_timeout_ms: if member_epoch == 0 { 30_000 } else { -1 },
            subscribed_topic_names: (member_epoch == 0).then(|| vec!["t".into()]),
            owned: Some(Assignment::new()),
            ..Heartbeat::default()
        }
    }

    #[test]
    fn an_upgrade_keeps_every_partition_where_it_is_and_a_downgrade_takes_the_targets() {
        let config = ConsumerGroupConfig::default();
        let mut g = classic_group();
        assert!(g.upgradable(config.max_size));
        let mut c = ConsumerGroup::from_classic(
            "g".into(),
            g.generation,
            g.classic_seeds(),
            &OneTopic,
            &config,
            0,
        )
        .expect("the members' embedded protocol parses");
        // Each classic member holds what it had, at its generation.
        assert_eq!((c.epoch(), c.assignment_epoch()), (5, 5));
        assert_eq!(c.holder(T, 1), Some("a"));
        assert_eq!(c.holder(T, 3), Some("b"));
        // A consumer-protocol member joins: it waits for partitions a and b give up.
        let answer = c
            .heartbeat(joiner(0), &OneTopic, &config, 0, || unreachable!())
            .expect("joins");
        assert_eq!(answer.assignment, Some(Assignment::new()));
        g.take_upgraded(c);
        assert!(g.members.is_empty() && g.consumer.is_some());
        let c = g.consumer.as_mut().expect("upgraded");
        // The classic members are told to rejoin.
        assert_eq!(
            c.classic_heartbeat("a", None, 5, 1),
            Err(GroupError::RebalanceInProgress)
        );

        // The consumer-protocol member leaves: only classic members remain.
        c.heartbeat(
            Heartbeat {
                member_epoch: LEAVE_GROUP_MEMBER_EPOCH,
                ..joiner(answer.member_epoch)
            },
            &OneTopic,
            &config,
            2,
            || unreachable!(),
        )
        .expect("leaves");
        assert!(g.downgradable());
        let old = g.downgrade(Instant::now());
        assert!(g.consumer.is_none());
        // The classic members are at generation 5 still (they have not rejoined): the
        // group's generation, so their heartbeats are told to rejoin, not fenced.
        assert_eq!(g.generation, 5);
        assert_eq!(g.state, GroupState::PreparingRebalance);
        assert_eq!(g.protocol.as_deref(), Some("range"));
        for id in ["a", "b"] {
            let stored = parse_assignment(&g.members[id].assignment).expect("parses");
            assert_eq!(stored, old.target_named(id));
        }
        // A member is also taken at the epoch it had, until it rejoins: one that had
        // not caught up is told to rejoin, not fenced; any other generation is.
        g.members.get_mut("a").expect("a").carried_epoch = Some(4);
        let beat = |generation| crate::group::types::HeartbeatRequest {
            group: "g".into(),
            generation,
            member_id: "a".into(),
            group_instance_id: None,
        };
        assert_eq!(
            g.heartbeat(&beat(4), Instant::now()),
            Err(GroupError::RebalanceInProgress)
        );
        assert_eq!(
            g.heartbeat(&beat(3), Instant::now()),
            Err(GroupError::IllegalGeneration)
        );
        // Its records are deleted: the members', the one that left included.
        let gone = old.all_tombstones();
        assert!(gone.iter().all(|(_, v)| v.is_none()));
        assert_eq!(gone.len(), 3 * 3 + 3);
    }

    #[test]
    fn a_group_of_another_protocol_type_or_too_big_is_not_upgraded() {
        let mut g = classic_group();
        assert!(!g.upgradable(1));
        g.protocol_type = Some("connect".into());
        assert!(!g.upgradable(10));
    }
}
