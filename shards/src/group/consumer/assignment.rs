//! A set of partitions by topic id: what a member owns, is assigned, or must revoke.
//!
//! Ordered (`BTreeMap`/`BTreeSet`) so that every decision over it — an assignor's, the
//! reconciliation's, the records written — is the same for the same input.
//!
//! Invariant: no topic maps to an empty set (an emptied topic is removed), so two
//! assignments holding the same partitions are equal.

use std::collections::{BTreeMap, BTreeSet};
use uuid::Uuid;

/// Topics are named by id in the consumer protocol (a deleted and re-created topic of
/// the same name is another topic).
pub type TopicId = Uuid;

#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Assignment(BTreeMap<TopicId, BTreeSet<i32>>);

impl Assignment {
    pub fn new() -> Assignment {
        Assignment::default()
    }

    pub fn from_partitions(partitions: impl IntoIterator<Item = (TopicId, i32)>) -> Assignment {
        let mut a = Assignment::new();
        for (t, p) in partitions {
            a.insert(t, p);
        }
        a
    }

    pub fn insert(&mut self, topic: TopicId, partition: i32) -> bool {
        self.0.entry(topic).or_default().insert(partition)
    }

    pub fn remove(&mut self, topic: TopicId, partition: i32) -> bool {
        let Some(set) = self.0.get_mut(&topic) else {
            return false;
        };
        let removed = set.remove(&partition);
        if set.is_empty() {
            self.0.remove(&topic);
        }
        removed
    }

    pub fn contains(&self, topic: TopicId, partition: i32) -> bool {
        self.0.get(&topic).is_some_and(|s| s.contains(&partition))
    }

    /// The number of partitions.
    pub fn len(&self) -> usize {
        self.0.values().map(BTreeSet::len).sum()
    }

    pub fn is_empty(&self) -> bool {
        self.0.is_empty()
    }

    pub fn topics(&self) -> &BTreeMap<TopicId, BTreeSet<i32>> {
        &self.0
    }

    pub fn partitions(&self) -> impl Iterator<Item = (TopicId, i32)> + '_ {
        self.0
            .iter()
            .flat_map(|(t, ps)| ps.iter().map(move |p| (*t, *p)))
    }

    /// The partitions in both.
    pub fn intersection(&self, other: &Assignment) -> Assignment {
        Assignment::from_partitions(self.partitions().filter(|(t, p)| other.contains(*t, *p)))
    }

    /// The partitions of `self` not in `other`.
    pub fn difference(&self, other: &Assignment) -> Assignment {
        Assignment::from_partitions(self.partitions().filter(|(t, p)| !other.contains(*t, *p)))
    }

    pub fn is_subset_of(&self, other: &Assignment) -> bool {
        self.partitions().all(|(t, p)| other.contains(t, p))
    }

    pub fn intersects(&self, other: &Assignment) -> bool {
        self.partitions().any(|(t, p)| other.contains(t, p))
    }

    /// Keeps the partitions `keep` accepts.
    pub fn retain(&mut self, mut keep: impl FnMut(TopicId, i32) -> bool) {
        self.0.retain(|t, ps| {
            ps.retain(|p| keep(*t, *p));
            !ps.is_empty()
        });
    }

    pub fn extend(&mut self, other: &Assignment) {
        for (t, p) in other.partitions() {
            self.insert(t, p);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_emptied_topic_is_gone_so_equal_sets_compare_equal() {
        let t = Uuid::from_u128(1);
        let mut a = Assignment::from_partitions([(t, 0), (t, 1)]);
        assert!(a.remove(t, 0) && a.remove(t, 1));
        assert!(!a.remove(t, 1));
        assert_eq!(a, Assignment::new());
        assert!(a.topics().is_empty());
    }

    #[test]
    fn set_operations() {
        let (t, u) = (Uuid::from_u128(1), Uuid::from_u128(2));
        let a = Assignment::from_partitions([(t, 0), (t, 1), (u, 0)]);
        let b = Assignment::from_partitions([(t, 1), (u, 1)]);
        assert_eq!(a.intersection(&b), Assignment::from_partitions([(t, 1)]));
        assert_eq!(
            a.difference(&b),
            Assignment::from_partitions([(t, 0), (u, 0)])
        );
        assert!(a.intersects(&b));
        assert!(!a.is_subset_of(&b));
        assert!(a.intersection(&b).is_subset_of(&a));
        assert_eq!(a.len(), 3);
        let mut c = a.clone();
        c.retain(|topic, _| topic == u);
        assert_eq!(c, Assignment::from_partitions([(u, 0)]));
    }
}
