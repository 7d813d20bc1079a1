//! The share-group assignor (Kafka's `simple`): partitions of the subscribed topics to
//! the members of a share group, where — unlike a consumer group — several members may
//! read one partition, since records, not partitions, are what a member holds.
//!
//! Per topic, over the members subscribed to it (M members, P partitions that may be
//! assigned): each partition goes to `ceil(M / P)` members (one when M <= P), and each
//! member gets a share of those `ceil(M / P) * P` slots, the shares differing by at most
//! one (members in id order, the larger shares first). Balance first, then stickiness:
//! a member keeps what it had while its share and the partition's sharing allow, and the
//! rest is filled in, no member twice on one partition.
//!
//! Invariants (proven by the tests): every assignable partition of a subscribed topic has
//! exactly `ceil(M / P)` members; a member has partitions only of topics it subscribes
//! to, each at most once; shares differ by at most one per topic; assigning again from
//! the result changes nothing.

use crate::group::consumer::assignment::{Assignment, TopicId};
use std::collections::{BTreeMap, BTreeSet};

/// The assignor's name, as Kafka's (ShareGroupDescribe's `AssignorName`).
pub const NAME: &str = "simple";

/// One member as the assignor sees it.
#[derive(Debug, Clone)]
pub struct ShareMemberSpec<'a> {
    pub member_id: &'a str,
    pub subscribed: &'a BTreeSet<TopicId>,
    /// Its assignment before (stickiness).
    pub current: &'a Assignment,
}

/// The target assignment: every member, with what it gets.
pub fn assign(
    members: &[ShareMemberSpec<'_>],
    partitions: &BTreeMap<TopicId, i32>,
) -> BTreeMap<String, Assignment> {
    let mut out: BTreeMap<String, Assignment> = members
        .iter()
        .map(|m| (m.member_id.to_string(), Assignment::new()))
        .collect();
    for (&topic, &count) in partitions {
        let mut subscribers: Vec<&ShareMemberSpec<'_>> = members
            .iter()
            .filter(|m| m.subscribed.contains(&topic))
            .collect();
        subscribers.sort_by_key(|m| m.member_id);
        if subscribers.is_empty() || count <= 0 {
            continue;
        }
        let current: Vec<BTreeSet<i32>> = subscribers
            .iter()
            .map(|m| {
                m.current
                    .topics()
                    .get(&topic)
                    .map(|ps| {
                        ps.iter()
                            .copied()
                            .filter(|p| (0..count).contains(p))
                            .collect()
                    })
                    .unwrap_or_default()
            })
            .collect();
        for (i, ps) in assign_topic(&current, count).into_iter().enumerate() {
            let a = out
                .get_mut(subscribers[i].member_id)
                .expect("every member has an entry");
            for p in ps {
                a.insert(topic, p);
            }
        }
    }
    out
}

/// One topic's partitions `0..count` to members (in order), each member's current
/// partitions given; returns each member's partitions.
fn assign_topic(current: &[BTreeSet<i32>], count: i32) -> Vec<BTreeSet<i32>> {
    let m = current.len();
    let p = usize::try_from(count).expect("a positive partition count");
    let sharing = m.div_ceil(p);
    let slots = sharing * p;
    let quota: Vec<usize> = (0..m)
        .map(|i| slots / m + usize::from(i < slots % m))
        .collect();
    let mut sharers = vec![0usize; p];
    let mut out: Vec<BTreeSet<i32>> = vec![BTreeSet::new(); m];
    // Stickiness: what a member had, within its share and the partition's sharing.
    for (i, had) in current.iter().enumerate() {
        for &q in had {
            let qi = q as usize;
            if out[i].len() < quota[i] && sharers[qi] < sharing {
                out[i].insert(q);
                sharers[qi] += 1;
            }
        }
    }
    // The rest: each partition short of sharers to the member with the most room that
    // does not have it yet.
    while let Some(q) = (0..p)
        .filter(|&q| sharers[q] < sharing)
        .min_by_key(|&q| sharers[q])
    {
        let taker = (0..m)
            .filter(|&i| out[i].len() < quota[i] && !out[i].contains(&(q as i32)))
            .max_by_key(|&i| (quota[i] - out[i].len(), std::cmp::Reverse(i)));
        match taker {
            Some(i) => {
                out[i].insert(q as i32);
                sharers[q] += 1;
            }
            None => {
                // Every member with room already reads `q` (stickiness left them so):
                // a member without it swaps one of its partitions for it.
                if !swap_in(&mut out, &quota, q as i32) {
                    debug_assert!(false, "the slots always fit");
                    break;
                }
                sharers[q] += 1;
            }
        }
    }
    out
}

/// Makes room for partition `q` when every member with room already reads it: a member
/// `j` that does not read `q` gives one of its partitions `r` to a member `i` with room
/// that does not read `r`, and reads `q` instead. `j` keeps its share, `i` gains one.
fn swap_in(out: &mut [BTreeSet<i32>], quota: &[usize], q: i32) -> bool {
    let with_room: Vec<usize> = (0..out.len())
        .filter(|&i| out[i].len() < quota[i])
        .collect();
    for &i in &with_room {
        for j in 0..out.len() {
            if j == i || out[j].contains(&q) {
                continue;
            }
            if let Some(&r) = out[j].iter().find(|r| !out[i].contains(r)) {
                out[j].remove(&r);
                out[j].insert(q);
                out[i].insert(r);
                return true;
            }
        }
    }
    false
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;
    use uuid::Uuid;

    fn t(n: u128) -> TopicId {
        Uuid::from_u128(n)
    }

    fn run(
        subs: &[(&str, Vec<u128>)],
        current: &BTreeMap<String, Assignment>,
        partitions: &BTreeMap<TopicId, i32>,
    ) -> BTreeMap<String, Assignment> {
        let sets: Vec<BTreeSet<TopicId>> = subs
            .iter()
            .map(|(_, ts)| ts.iter().map(|n| t(*n)).collect())
            .collect();
        let empty = Assignment::new();
        let specs: Vec<ShareMemberSpec<'_>> = subs
            .iter()
            .zip(&sets)
            .map(|((id, _), s)| ShareMemberSpec {
                member_id: id,
                subscribed: s,
                current: current.get(*id).unwrap_or(&empty),
            })
            .collect();
        assign(&specs, partitions)
    }

    fn count(a: &BTreeMap<String, Assignment>, id: &str) -> usize {
        a[id].len()
    }

    #[test]
    fn fewer_members_than_partitions_split_them_more_share_them() {
        let parts = BTreeMap::from([(t(1), 10)]);
        let two = run(&[("a", vec![1]), ("b", vec![1])], &BTreeMap::new(), &parts);
        assert_eq!((count(&two, "a"), count(&two, "b")), (5, 5));
        assert!(!two["a"].intersects(&two["b"]));
        // Three members, one partition: all three read it.
        let one = BTreeMap::from([(t(1), 1)]);
        let three = run(
            &[("a", vec![1]), ("b", vec![1]), ("c", vec![1])],
            &BTreeMap::new(),
            &one,
        );
        assert!(three.values().all(|a| a.contains(t(1), 0)));
        // Three members, two partitions: each partition twice, shares 2, 1, 1.
        let two_parts = BTreeMap::from([(t(1), 2)]);
        let r = run(
            &[("a", vec![1]), ("b", vec![1]), ("c", vec![1])],
            &BTreeMap::new(),
            &two_parts,
        );
        assert_eq!((count(&r, "a"), count(&r, "b"), count(&r, "c")), (2, 1, 1));
    }

    #[test]
    fn a_member_with_room_that_already_reads_the_short_partition_gets_another_by_a_swap() {
        // b and c read partition 0 (the topic had one partition); a joins as the topic
        // grows to two. Sharing is 2, shares 2, 1, 1: a takes partition 1, and then only
        // a has room but already reads 1 — b gives a partition 0 and reads 1 instead.
        let current = vec![BTreeSet::new(), BTreeSet::from([0]), BTreeSet::from([0])];
        let out = assign_topic(&current, 2);
        assert_eq!(
            out,
            vec![
                BTreeSet::from([0, 1]),
                BTreeSet::from([1]),
                BTreeSet::from([0])
            ]
        );
    }

    fn members() -> impl Strategy<Value = Vec<(String, Vec<u128>)>> {
        proptest::collection::vec(proptest::collection::vec(1u128..4, 0..3), 1..9).prop_map(
            |subs| {
                subs.into_iter()
                    .enumerate()
                    .map(|(i, ts)| (format!("m{i}"), ts))
                    .collect()
            },
        )
    }

    proptest! {
        /// Any members, subscriptions and partition counts, from any previous assignment:
        /// each partition of a subscribed topic is read by ceil(M/P) of its M
        /// subscribers, shares differ by at most one, no member reads a topic it does not
        /// subscribe to or a partition twice; assigning again changes nothing.
        #[test]
        fn every_partition_is_shared_as_evenly_as_the_members_allow(
            subs in members(),
            counts in proptest::collection::vec(1i32..7, 3),
            previous_counts in proptest::collection::vec(1i32..7, 3),
        ) {
            let subs: Vec<(&str, Vec<u128>)> = subs.iter().map(|(id, ts)| (id.as_str(), ts.clone())).collect();
            let before: BTreeMap<TopicId, i32> =
                previous_counts.iter().enumerate().map(|(i, n)| (t(i as u128 + 1), *n)).collect();
            // The previous assignment was made for the members but the last (it joins
            // now), at other partition counts.
            let previous = run(&subs[..subs.len() - 1], &BTreeMap::new(), &before);
            let parts: BTreeMap<TopicId, i32> =
                counts.iter().enumerate().map(|(i, n)| (t(i as u128 + 1), *n)).collect();
            let a = run(&subs, &previous, &parts);
            for (topic, &n) in &parts {
                let readers: Vec<&str> = subs.iter().filter(|(_, ts)| ts.iter().any(|x| t(*x) == *topic)).map(|(id, _)| *id).collect();
                if readers.is_empty() {
                    prop_assert!(a.values().all(|x| !x.topics().contains_key(topic)));
                    continue;
                }
                let sharing = readers.len().div_ceil(n as usize);
                for p in 0..n {
                    let k = readers.iter().filter(|id| a[**id].contains(*topic, p)).count();
                    prop_assert_eq!(k, sharing, "partition {} of {:?}", p, topic);
                }
                let shares: Vec<usize> = readers.iter().map(|id| a[*id].topics().get(topic).map_or(0, |s| s.len())).collect();
                prop_assert!(shares.iter().max().unwrap() - shares.iter().min().unwrap() <= 1, "{:?}", shares);
            }
            for (id, ts) in &subs {
                for topic in a[*id].topics().keys() {
                    prop_assert!(ts.iter().any(|x| t(*x) == *topic));
                }
            }
            prop_assert_eq!(run(&subs, &a, &parts), a.clone(), "assigning again keeps everything");
        }
    }
}
