//! Where a topic's replicas go: Kafka's replica assignment (`AdminUtils.
//! assignReplicasToBrokers`), rack-unaware and rack-aware, made deterministic.
//!
//! Kafka picks the start broker and the shift of the second replica at random; here both
//! come from a `seed` the command carries (the topic id), so every node that applies the
//! command places the replicas identically.
//!
//! The rules, as Kafka's:
//! - leaders go round-robin over the brokers from the start index, so partitions' leaders
//!   spread evenly;
//! - follower j of a partition sits `1 + (shift + j) % (n - 1)` brokers after the leader,
//!   with the shift growing once per full round of partitions, so followers spread too;
//! - rack-aware (every broker has a rack): brokers are first interleaved by rack (one of
//!   each rack in turn), and a follower skips a broker whose rack already holds a replica
//!   of the partition until every rack holds one, and a broker that already holds one
//!   until every broker does.
//!
//! Invariants (asserted): every partition gets `replication_factor` distinct brokers,
//! all from the candidates; with racks, they span `min(rf, racks)` racks.

use std::collections::BTreeMap;

/// A broker that can take replicas: its id and rack.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Candidate {
    pub id: i32,
    pub rack: Option<String>,
}

#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum PlacementError {
    #[error("replication factor must be at least 1, got {0}")]
    ReplicationFactorTooSmall(i32),
    #[error("replication factor {wanted} is larger than the {available} available brokers")]
    NotEnoughBrokers { wanted: i32, available: usize },
}

/// Replica lists for partitions `first_partition .. first_partition + count` of a topic.
/// `candidates` need not be sorted; the result does not depend on their order.
pub fn assign(
    candidates: &[Candidate],
    first_partition: i32,
    count: i32,
    replication_factor: i32,
    seed: u64,
) -> Result<Vec<Vec<i32>>, PlacementError> {
    if replication_factor < 1 {
        return Err(PlacementError::ReplicationFactorTooSmall(
            replication_factor,
        ));
    }
    let rf = replication_factor as usize;
    if rf > candidates.len() {
        return Err(PlacementError::NotEnoughBrokers {
            wanted: replication_factor,
            available: candidates.len(),
        });
    }
    let mut sorted = candidates.to_vec();
    sorted.sort_by_key(|c| c.id);
    let rack_aware = sorted.iter().all(|c| c.rack.is_some());
    let out = if rack_aware {
        assign_rack_aware(&sorted, first_partition, count, rf, seed)
    } else {
        let ids: Vec<i32> = sorted.iter().map(|c| c.id).collect();
        assign_unaware(&ids, first_partition, count, rf, seed)
    };
    debug_assert!(out.iter().all(|r| {
        let mut s = r.clone();
        s.sort_unstable();
        s.dedup();
        s.len() == rf
    }));
    Ok(out)
}

fn start_and_shift(n: usize, seed: u64) -> (usize, usize) {
    let n = n as u64;
    ((seed % n) as usize, ((seed / n) % n) as usize)
}

/// The index of follower `j` of a partition led from `first`, Kafka's `replicaIndex`.
fn replica_index(first: usize, shift: usize, j: usize, n: usize) -> usize {
    debug_assert!(n > 1);
    let step = 1 + (shift + j) % (n - 1);
    (first + step) % n
}

fn assign_unaware(
    brokers: &[i32],
    first_partition: i32,
    count: i32,
    rf: usize,
    seed: u64,
) -> Vec<Vec<i32>> {
    let n = brokers.len();
    let (start, shift0) = start_and_shift(n, seed);
    (first_partition..first_partition.saturating_add(count))
        .map(|p| {
            let p = p.max(0) as usize;
            let shift = shift0 + p / n;
            let first = (p + start) % n;
            let mut replicas = Vec::with_capacity(rf);
            replicas.push(brokers[first]);
            for j in 0..rf - 1 {
                replicas.push(brokers[replica_index(first, shift, j, n)]);
            }
            replicas
        })
        .collect()
}

/// Brokers interleaved by rack: the first broker of each rack (racks in name order),
/// then the second of each, and so on.
fn interleave_by_rack(brokers: &[Candidate]) -> Vec<&Candidate> {
    let mut by_rack: BTreeMap<&str, Vec<&Candidate>> = BTreeMap::new();
    for b in brokers {
        by_rack
            .entry(b.rack.as_deref().unwrap_or_default())
            .or_default()
            .push(b);
    }
    let longest = by_rack.values().map(Vec::len).max().unwrap_or(0);
    let mut out = Vec::with_capacity(brokers.len());
    for i in 0..longest {
        for members in by_rack.values() {
            if let Some(b) = members.get(i) {
                out.push(*b);
            }
        }
    }
    out
}

fn assign_rack_aware(
    brokers: &[Candidate],
    first_partition: i32,
    count: i32,
    rf: usize,
    seed: u64,
) -> Vec<Vec<i32>> {
    let arranged = interleave_by_rack(brokers);
    let n = arranged.len();
    let racks = {
        let mut r: Vec<&str> = arranged.iter().filter_map(|b| b.rack.as_deref()).collect();
        r.sort_unstable();
        r.dedup();
        r.len()
    };
    let (start, shift0) = start_and_shift(n, seed);
    (first_partition..first_partition.saturating_add(count))
        .map(|p| {
            let p = p.max(0) as usize;
            let shift = shift0 + p / n;
            let first = (p + start) % n;
            let leader = arranged[first];
            let mut replicas = vec![leader.id];
            let mut racks_used = vec![leader.rack.as_deref()];
            let mut k = 0;
            while replicas.len() < rf {
                // At most n * rf probes: each full sweep of n brokers adds one.
                debug_assert!(k < n * rf * 2, "rack-aware placement does not progress");
                let b = arranged[replica_index(first, shift * racks, k, n)];
                k += 1;
                let rack_ok = !racks_used.contains(&b.rack.as_deref()) || racks_used.len() == racks;
                let broker_ok = !replicas.contains(&b.id);
                if rack_ok && broker_ok {
                    replicas.push(b.id);
                    racks_used.push(b.rack.as_deref());
                    racks_used.sort_unstable();
                    racks_used.dedup();
                }
            }
            replicas
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::{BTreeSet, HashMap};

    fn brokers(n: i32) -> Vec<Candidate> {
        (1..=n).map(|id| Candidate { id, rack: None }).collect()
    }

    fn racked(spec: &[(i32, &str)]) -> Vec<Candidate> {
        spec.iter()
            .map(|(id, r)| Candidate {
                id: *id,
                rack: Some(r.to_string()),
            })
            .collect()
    }

    fn counts(a: &[Vec<i32>], pos: Option<usize>) -> HashMap<i32, usize> {
        let mut m = HashMap::new();
        for r in a {
            match pos {
                Some(i) => *m.entry(r[i]).or_default() += 1,
                None => r.iter().for_each(|b| *m.entry(*b).or_default() += 1),
            }
        }
        m
    }

    #[test]
    fn leaders_and_replicas_spread_evenly() {
        let a = assign(&brokers(3), 0, 30, 1, 7).unwrap();
        assert_eq!(a.len(), 30);
        assert!(counts(&a, Some(0)).values().all(|c| *c == 10));
        let a = assign(&brokers(5), 0, 50, 3, 12345).unwrap();
        assert!(counts(&a, Some(0)).values().all(|c| *c == 10));
        assert!(counts(&a, None).values().all(|c| *c == 30));
        assert!(a
            .iter()
            .all(|r| r.iter().collect::<BTreeSet<_>>().len() == 3));
    }

    #[test]
    fn deterministic_and_independent_of_candidate_order() {
        let mut c = brokers(4);
        let a = assign(&c, 0, 12, 2, 99).unwrap();
        c.reverse();
        assert_eq!(assign(&c, 0, 12, 2, 99).unwrap(), a);
        // Added partitions continue the same pattern.
        assert_eq!(assign(&c, 5, 7, 2, 99).unwrap(), a[5..].to_vec());
    }

    #[test]
    fn rack_aware_spans_racks() {
        let c = racked(&[(1, "a"), (2, "a"), (3, "b"), (4, "b"), (5, "c"), (6, "c")]);
        let rack: HashMap<i32, &str> = c
            .iter()
            .map(|b| (b.id, b.rack.as_deref().unwrap()))
            .collect();
        for seed in 0..20 {
            let a = assign(&c, 0, 24, 3, seed).unwrap();
            for r in &a {
                let racks: BTreeSet<_> = r.iter().map(|b| rack[b]).collect();
                assert_eq!(racks.len(), 3, "{r:?}");
            }
            assert!(counts(&a, Some(0)).values().all(|n| *n == 4));
        }
        // Fewer racks than replicas: every rack used, no broker twice.
        let c = racked(&[(1, "a"), (2, "a"), (3, "b"), (4, "b")]);
        for r in assign(&c, 0, 8, 3, 3).unwrap() {
            assert_eq!(r.iter().collect::<BTreeSet<_>>().len(), 3);
            let racks: BTreeSet<_> = r.iter().map(|b| if *b <= 2 { "a" } else { "b" }).collect();
            assert_eq!(racks.len(), 2);
        }
    }

    #[test]
    fn too_few_brokers() {
        assert_eq!(
            assign(&brokers(2), 0, 1, 3, 0),
            Err(PlacementError::NotEnoughBrokers {
                wanted: 3,
                available: 2
            })
        );
        assert_eq!(
            assign(&brokers(2), 0, 1, 0, 0),
            Err(PlacementError::ReplicationFactorTooSmall(0))
        );
        assert_eq!(assign(&brokers(1), 0, 3, 1, 5).unwrap(), vec![vec![1]; 3]);
    }
}
