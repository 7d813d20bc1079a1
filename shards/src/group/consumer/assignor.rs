//! The server-side assignors of the consumer protocol (KIP-848), by Kafka's names:
//! `uniform` (the default) and `range` (`group.consumer.assignors`). Each is a pure
//! function from the members' subscriptions and previous target partitions, and the
//! subscribed topics' partition counts and replica racks, to the next target assignment.
//!
//! Invariants of every result (asserted in debug builds, proven by the tests):
//! - every member of the input has an entry;
//! - a partition goes to at most one member, and only to one subscribed to its topic;
//! - every partition of a topic someone subscribes to goes to someone.
//!
//! `uniform` also balances: no partition can move to another member subscribed to its
//! topic and leave the two closer in size (for members with the same subscriptions,
//! sizes differ by at most one). Within that it is sticky: a member keeps what it had,
//! and a partition whose replicas are in a member's rack goes to a member of that rack
//! when the balance allows. `range` gives each member contiguous ranges of every topic
//! it subscribes to, members ordered by `group.instance.id` (those with one first) and
//! then by member id, so members with the same subscriptions get the same partition
//! numbers of every topic of equal size (co-partitioning, for joins); like Kafka's, it
//! is neither sticky nor rack-aware.

use super::assignment::{Assignment, TopicId};
use std::cmp::Reverse;
use std::collections::{BTreeMap, BTreeSet, HashMap};

#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum AssignorKind {
    Uniform,
    Range,
}

impl AssignorKind {
    /// Every assignor, the default (`group.consumer.assignors`' first) first.
    pub const ALL: [AssignorKind; 2] = [AssignorKind::Uniform, AssignorKind::Range];

    pub fn name(self) -> &'static str {
        match self {
            AssignorKind::Uniform => "uniform",
            AssignorKind::Range => "range",
        }
    }

    /// The assignor a client names (`group.remote.assignor`), as Kafka spells them.
    pub fn from_name(name: &str) -> Option<AssignorKind> {
        AssignorKind::ALL.into_iter().find(|a| a.name() == name)
    }
}

/// One member as an assignor sees it.
#[derive(Debug, Clone)]
pub struct MemberSpec<'a> {
    pub member_id: &'a str,
    pub instance_id: Option<&'a str>,
    pub rack: Option<&'a str>,
    /// The existing topics it subscribes to.
    pub subscribed: &'a BTreeSet<TopicId>,
    /// Its partitions in the previous target assignment.
    pub current: &'a Assignment,
}

/// A subscribed topic as an assignor sees it.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct TopicSpec {
    pub partitions: i32,
    /// Per partition, the racks of its replicas' brokers (empty where none has a rack).
    pub racks: Vec<BTreeSet<String>>,
}

impl TopicSpec {
    fn has_replica_in(&self, partition: i32, rack: Option<&str>) -> bool {
        let (Some(rack), Ok(p)) = (rack, usize::try_from(partition)) else {
            return false;
        };
        self.racks.get(p).is_some_and(|r| r.contains(rack))
    }
}

/// The next target assignment, by member id.
pub fn assign(
    kind: AssignorKind,
    members: &[MemberSpec<'_>],
    topics: &BTreeMap<TopicId, TopicSpec>,
) -> BTreeMap<String, Assignment> {
    let result = match kind {
        AssignorKind::Uniform => uniform(members, topics),
        AssignorKind::Range => range(members, topics),
    };
    debug_assert!(is_valid(members, topics, &result));
    members
        .iter()
        .zip(result)
        .map(|(m, a)| (m.member_id.to_string(), a))
        .collect()
}

/// The members subscribed to each topic, in input order.
fn subscribers(
    members: &[MemberSpec<'_>],
    topics: &BTreeMap<TopicId, TopicSpec>,
) -> BTreeMap<TopicId, Vec<usize>> {
    let mut by_topic: BTreeMap<TopicId, Vec<usize>> = BTreeMap::new();
    for (i, m) in members.iter().enumerate() {
        for t in m.subscribed.iter().filter(|t| topics.contains_key(*t)) {
            by_topic.entry(*t).or_default().push(i);
        }
    }
    by_topic
}

fn uniform(members: &[MemberSpec<'_>], topics: &BTreeMap<TopicId, TopicSpec>) -> Vec<Assignment> {
    let subscribers = subscribers(members, topics);
    let mut out = vec![Assignment::new(); members.len()];
    let mut counts = vec![0usize; members.len()];
    let mut owned: HashMap<(TopicId, i32), usize> = HashMap::new();

    // 1. Each member keeps what it had and still subscribes to.
    for (i, m) in members.iter().enumerate() {
        for (t, p) in m.current.partitions() {
            let exists = topics
                .get(&t)
                .is_some_and(|s| (0..s.partitions).contains(&p));
            if exists && m.subscribed.contains(&t) && !owned.contains_key(&(t, p)) {
                owned.insert((t, p), i);
                out[i].insert(t, p);
                counts[i] += 1;
            }
        }
    }

    // 2. The rest, the partitions with the fewest possible owners first, each to one of
    // the smallest members that may take it, in the partition's rack if one is.
    let mut unassigned: Vec<(usize, TopicId, i32)> = subscribers
        .iter()
        .flat_map(|(t, subs)| {
            let n = topics[t].partitions;
            (0..n).map(move |p| (subs.len(), *t, p))
        })
        .filter(|(_, t, p)| !owned.contains_key(&(*t, *p)))
        .collect();
    unassigned.sort_unstable();
    for (_, t, p) in unassigned {
        let spec = &topics[&t];
        let to = subscribers[&t]
            .iter()
            .copied()
            .min_by_key(|&i| (counts[i], !spec.has_replica_in(p, members[i].rack), i))
            .expect("a topic in `subscribers` has a subscriber");
        out[to].insert(t, p);
        counts[to] += 1;
    }

    // 3. Balance: move a partition from a member to a smaller one that may take it while
    // that brings them closer. Each move lowers the sum of squared sizes, so this ends.
    loop {
        let mut moved = false;
        let mut order: Vec<usize> = (0..members.len()).collect();
        order.sort_by_key(|&i| (Reverse(counts[i]), i));
        for from in order {
            // Partitions outside the member's rack leave first.
            let mut candidates: Vec<(bool, TopicId, i32)> = out[from]
                .partitions()
                .map(|(t, p)| (topics[&t].has_replica_in(p, members[from].rack), t, p))
                .collect();
            candidates.sort_unstable();
            for (_, t, p) in candidates {
                let spec = &topics[&t];
                let best = subscribers[&t]
                    .iter()
                    .copied()
                    .filter(|&i| i != from)
                    .min_by_key(|&i| (counts[i], !spec.has_replica_in(p, members[i].rack), i));
                if let Some(to) = best.filter(|&to| counts[to] + 1 < counts[from]) {
                    out[from].remove(t, p);
                    out[to].insert(t, p);
                    counts[from] -= 1;
                    counts[to] += 1;
                    moved = true;
                }
            }
        }
        if !moved {
            return out;
        }
    }
}

fn range(members: &[MemberSpec<'_>], topics: &BTreeMap<TopicId, TopicSpec>) -> Vec<Assignment> {
    let mut order: Vec<usize> = (0..members.len()).collect();
    order.sort_by(|&a, &b| {
        let (ma, mb) = (&members[a], &members[b]);
        match (ma.instance_id, mb.instance_id) {
            (Some(x), Some(y)) => x.cmp(y),
            (Some(_), None) => std::cmp::Ordering::Less,
            (None, Some(_)) => std::cmp::Ordering::Greater,
            (None, None) => ma.member_id.cmp(mb.member_id),
        }
    });
    let mut out = vec![Assignment::new(); members.len()];
    for (t, spec) in topics {
        let subs: Vec<usize> = order
            .iter()
            .copied()
            .filter(|&i| members[i].subscribed.contains(t))
            .collect();
        if subs.is_empty() {
            continue;
        }
        let n = i32::try_from(subs.len()).unwrap_or(i32::MAX);
        let (quota, extra) = (spec.partitions / n, spec.partitions % n);
        let mut start = 0;
        for (k, i) in subs.into_iter().enumerate() {
            let size = quota + i32::from((k as i32) < extra);
            let end = (start + size).min(spec.partitions);
            for p in start..end {
                out[i].insert(*t, p);
            }
            start = end;
        }
        debug_assert_eq!(start, spec.partitions, "the ranges cover the topic");
    }
    out
}

/// The invariants of the module doc (all but balance).
fn is_valid(
    members: &[MemberSpec<'_>],
    topics: &BTreeMap<TopicId, TopicSpec>,
    result: &[Assignment],
) -> bool {
    let mut seen: HashMap<(TopicId, i32), usize> = HashMap::new();
    for (i, a) in result.iter().enumerate() {
        for (t, p) in a.partitions() {
            if !members[i].subscribed.contains(&t) || seen.insert((t, p), i).is_some() {
                return false;
            }
        }
    }
    subscribers(members, topics)
        .keys()
        .all(|t| (0..topics[t].partitions).all(|p| seen.contains_key(&(*t, p))))
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;
    use uuid::Uuid;

    struct Member {
        id: String,
        instance: Option<String>,
        rack: Option<String>,
        subscribed: BTreeSet<TopicId>,
        current: Assignment,
    }

    fn member(id: &str, topics: &[TopicId]) -> Member {
        Member {
            id: id.to_string(),
            instance: None,
            rack: None,
            subscribed: topics.iter().copied().collect(),
            current: Assignment::new(),
        }
    }

    fn specs(members: &[Member]) -> Vec<MemberSpec<'_>> {
        members
            .iter()
            .map(|m| MemberSpec {
                member_id: &m.id,
                instance_id: m.instance.as_deref(),
                rack: m.rack.as_deref(),
                subscribed: &m.subscribed,
                current: &m.current,
            })
            .collect()
    }

    fn topic(partitions: i32) -> TopicSpec {
        TopicSpec {
            partitions,
            racks: Vec::new(),
        }
    }

    fn t(n: u128) -> TopicId {
        Uuid::from_u128(n)
    }

    fn sizes(r: &BTreeMap<String, Assignment>) -> Vec<usize> {
        r.values().map(Assignment::len).collect()
    }

    #[test]
    fn names_are_kafkas() {
        assert_eq!(
            AssignorKind::from_name("uniform"),
            Some(AssignorKind::Uniform)
        );
        assert_eq!(AssignorKind::from_name("range"), Some(AssignorKind::Range));
        assert_eq!(AssignorKind::from_name("sticky"), None);
    }

    #[test]
    fn range_gives_contiguous_co_partitioned_ranges() {
        // Kafka's example: M0 [T1P0, T1P1, T2P0, T2P1], M1 [T1P2, T2P2].
        let topics = BTreeMap::from([(t(1), topic(3)), (t(2), topic(3))]);
        let members = vec![member("m1", &[t(1), t(2)]), member("m0", &[t(1), t(2)])];
        let r = assign(AssignorKind::Range, &specs(&members), &topics);
        assert_eq!(
            r["m0"],
            Assignment::from_partitions([(t(1), 0), (t(1), 1), (t(2), 0), (t(2), 1)])
        );
        assert_eq!(r["m1"], Assignment::from_partitions([(t(1), 2), (t(2), 2)]));
    }

    #[test]
    fn range_orders_static_members_by_instance_id_first() {
        let topics = BTreeMap::from([(t(1), topic(2))]);
        let mut members = vec![member("a", &[t(1)]), member("z", &[t(1)])];
        members[1].instance = Some("i0".into());
        let r = assign(AssignorKind::Range, &specs(&members), &topics);
        assert_eq!(r["z"], Assignment::from_partitions([(t(1), 0)]));
        assert_eq!(r["a"], Assignment::from_partitions([(t(1), 1)]));
    }

    #[test]
    fn uniform_keeps_what_it_can_and_moves_only_the_excess() {
        let topics = BTreeMap::from([(t(1), topic(6))]);
        let mut members = vec![member("a", &[t(1)]), member("b", &[t(1)])];
        members[0].current = Assignment::from_partitions((0..6).map(|p| (t(1), p)));
        let first = assign(AssignorKind::Uniform, &specs(&members), &topics);
        assert_eq!(sizes(&first), vec![3, 3]);
        assert!(first["a"].is_subset_of(&members[0].current));
        // A third member joins: a and b each give one.
        members[0].current = first["a"].clone();
        members[1].current = first["b"].clone();
        members.push(member("c", &[t(1)]));
        let second = assign(AssignorKind::Uniform, &specs(&members), &topics);
        assert_eq!(sizes(&second), vec![2, 2, 2]);
        assert!(second["a"].is_subset_of(&first["a"]));
        assert!(second["b"].is_subset_of(&first["b"]));
    }

    #[test]
    fn uniform_prefers_a_member_in_the_partitions_rack() {
        let mut spec = topic(4);
        spec.racks = (0..4)
            .map(|p| BTreeSet::from([if p % 2 == 0 { "east" } else { "west" }.to_string()]))
            .collect();
        let topics = BTreeMap::from([(t(1), spec)]);
        let mut members = vec![member("a", &[t(1)]), member("b", &[t(1)])];
        members[0].rack = Some("west".into());
        members[1].rack = Some("east".into());
        let r = assign(AssignorKind::Uniform, &specs(&members), &topics);
        assert_eq!(r["a"], Assignment::from_partitions([(t(1), 1), (t(1), 3)]));
        assert_eq!(r["b"], Assignment::from_partitions([(t(1), 0), (t(1), 2)]));
    }

    #[test]
    fn uniform_balances_heterogeneous_subscriptions() {
        // b alone may take topic 2; a and b share topic 1.
        let topics = BTreeMap::from([(t(1), topic(4)), (t(2), topic(2))]);
        let members = vec![member("a", &[t(1)]), member("b", &[t(1), t(2)])];
        let r = assign(AssignorKind::Uniform, &specs(&members), &topics);
        assert_eq!(r["b"].topics()[&t(2)].len(), 2);
        assert_eq!(sizes(&r), vec![3, 3]);
    }

    #[test]
    fn a_member_of_no_existing_topic_gets_nothing() {
        let topics = BTreeMap::from([(t(1), topic(2))]);
        let members = vec![member("a", &[t(9)]), member("b", &[t(1)])];
        for kind in AssignorKind::ALL {
            let r = assign(kind, &specs(&members), &topics);
            assert!(r["a"].is_empty());
            assert_eq!(r["b"].len(), 2);
        }
    }

    proptest! {
        /// Every result is valid (asserted inside `assign`), and uniform's is balanced:
        /// no partition could move to a smaller subscribed member and close the gap.
        #[test]
        fn results_are_valid_and_uniform_is_balanced(
            partitions in proptest::collection::vec(1i32..12, 1..4),
            subs in proptest::collection::vec(proptest::collection::vec(any::<bool>(), 4), 1..8),
            keep in proptest::collection::vec(any::<bool>(), 64),
        ) {
            let topics: BTreeMap<TopicId, TopicSpec> =
                partitions.iter().enumerate().map(|(i, n)| (t(i as u128), topic(*n))).collect();
            let mut members: Vec<Member> = subs.iter().enumerate().map(|(i, s)| {
                let ts: Vec<TopicId> = (0..topics.len()).filter(|k| s[*k]).map(|k| t(k as u128)).collect();
                member(&format!("m{i}"), &ts)
            }).collect();
            for kind in AssignorKind::ALL {
                let r = assign(kind, &specs(&members), &topics);
                prop_assert!(is_valid(&specs(&members), &topics, &members.iter().map(|m| r[&m.id].clone()).collect::<Vec<_>>()));
            }
            // A second round from a perturbed previous target stays valid and balanced.
            let first = assign(AssignorKind::Uniform, &specs(&members), &topics);
            for (i, m) in members.iter_mut().enumerate() {
                m.current = first[&m.id].clone();
                if keep[i % keep.len()] { m.current.retain(|_, p| p % 2 == 0); }
            }
            let r = assign(AssignorKind::Uniform, &specs(&members), &topics);
            for m in &members {
                for (topic_id, _) in r[&m.id].partitions() {
                    for other in members.iter().filter(|o| o.subscribed.contains(&topic_id)) {
                        prop_assert!(r[&other.id].len() + 1 >= r[&m.id].len());
                    }
                }
            }
        }
    }
}
