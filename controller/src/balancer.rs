//! The active controller's partition balancer and broker decommissioning.
//!
//! Every `interval`, on the image of that moment, [`plan`] decides a wave of moves, each
//! an ordinary reassignment (KIP-455: added replicas fetch and join the ISR before the
//! new set is committed, a removed leader hands over in that change), so a move the
//! controller starts is as safe as one an operator starts, survives a controller
//! failover, and is listed by ListPartitionReassignments:
//!
//! 1. **Drain** (always, balancer on or off): every replica on a broker being
//!    decommissioned (its dynamic broker config `corelog.decommission=true`) moves to the
//!    live broker that holds the fewest replicas and not this partition, keeping its
//!    place in the preference order. Nothing is lost if the draining broker dies half
//!    way: its partitions are still replicated, their moves complete from the new
//!    leaders, and a partition whose only copy it held waits for it to come back.
//! 2. **Replicas** (balancer on, every registered broker up or leaving): first within
//!    each topic, then over the whole cluster, while some broker holds more replicas than
//!    the upper bound or fewer than the lower bound — the mean ± `max_deviation_percent`,
//!    widened to the nearest whole counts around the mean — one replica moves from the
//!    fullest broker to the emptiest that does not hold that partition, a follower rather
//!    than a leader where there is a choice. Per topic first, so a joining broker takes
//!    its share of every topic (of its traffic), not only of the largest one; the
//!    cluster-wide moves keep every topic within its bounds.
//! 3. **Leaders** (balancer on, only once no move is in progress or planned): the same
//!    bounds, per topic and then overall, on preferred leaderships (the first replica of
//!    each assignment); a partition moves its preference to one of its in-sync replicas
//!    by reordering its replicas (a reassignment with no data to copy), and a preferred
//!    election follows.
//!
//! Disk use is considered through the brokers' heartbeats: a broker whose data
//! filesystem is fuller than `max_disk_usage_percent` takes no replica, and among brokers with equal
//! counts the emptier disk takes and the fuller gives first.
//!
//! A wave is at most `max_moves` partitions moving at once, those in progress (anyone's)
//! included; the next wave waits for them. The balancer's own moves are marked on their
//! topics' throttled-replica lists (as `kafka-reassign-partitions --throttle` marks its
//! moves) and unmarked when they complete, so the brokers' replication throttle rates
//! hold them and leave producers and in-sync replicas alone. Which marks are the
//! balancer's is kept in the image with them (`TopicImage::balancer_moves`), so the
//! controller leading when a move completes unmarks it, whichever one started it, and
//! marks an operator set are never taken off.
//!
//! Invariants: a plan moves a partition at most once, never one that is being moved,
//! keeps every replica list free of duplicates and of its length, and only ever names
//! live brokers not being decommissioned as new replicas.

use crate::command::{BalancerMarks, Command, ConfigChange, Election, Outcome, ReassignmentItem};
use crate::image::{MetadataImage, MovedReplicas};
pub use crate::node_config::Balancer;
use crate::node_state::{self as node, Shared};
pub use crate::rpc::DiskUse;
use crate::state_machine::Proposal;
use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;
use std::time::Duration;
use uuid::Uuid;

pub use crate::image::DECOMMISSION_KEY;

/// The throttled-replica lists the balancer marks its moves on (topic configs).
const LEADER_THROTTLED: &str = "leader.replication.throttled.replicas";
const FOLLOWER_THROTTLED: &str = "follower.replication.throttled.replicas";

/// One wave: the reassignments to start, and the partitions among them that only
/// reorder their replicas (a preferred election follows those).
#[derive(Debug, Default, PartialEq)]
pub struct Plan {
    pub moves: Vec<ReassignmentItem>,
    pub reordered: Vec<(String, i32)>,
    /// Partitions with a replica on a draining broker that no broker may take: fewer
    /// other brokers than replicas, or every other one's disk over the limit.
    pub stranded: Vec<(String, i32)>,
}

/// Bounds on a per-broker count whose mean is `total / brokers`: within
/// `max_deviation_percent` of the mean, widened to the whole numbers around it.
pub fn bounds(total: usize, brokers: usize, max_deviation_percent: u32) -> (usize, usize) {
    if brokers == 0 {
        return (0, usize::MAX);
    }
    let mean = total as f64 / brokers as f64;
    let dev = f64::from(max_deviation_percent) / 100.0;
    let lower = ((mean * (1.0 - dev)).ceil()).min(mean.floor()) as usize;
    let upper = ((mean * (1.0 + dev)).floor()).max(mean.ceil()) as usize;
    (lower, upper)
}

/// Per-broker counts of one thing (replicas, or preferred leaderships): over the whole
/// cluster and within each topic, for the brokers that may take more.
#[derive(Default)]
struct Tally {
    all: BTreeMap<i32, usize>,
    by_topic: BTreeMap<String, BTreeMap<i32, usize>>,
    /// Each topic's total (replicas on brokers that take none included).
    topic_total: BTreeMap<String, usize>,
    total: usize,
}

impl Tally {
    fn new(brokers: impl Iterator<Item = i32>) -> Tally {
        Tally {
            all: brokers.map(|b| (b, 0)).collect(),
            ..Tally::default()
        }
    }

    fn add(&mut self, topic: &str, b: i32) {
        self.total += 1;
        *self.topic_total.entry(topic.to_string()).or_default() += 1;
        let Some(n) = self.all.get_mut(&b) else {
            return;
        };
        *n += 1;
        let brokers = self.all.keys().copied();
        let t = self
            .by_topic
            .entry(topic.to_string())
            .or_insert_with(|| brokers.map(|b| (b, 0)).collect());
        *t.get_mut(&b).expect("every counted broker") += 1;
    }

    /// One of `topic`'s counts goes from `from` to `to`.
    fn shift(&mut self, topic: &str, from: i32, to: i32) {
        for counts in [
            &mut self.all,
            self.by_topic
                .get_mut(topic)
                .expect("a topic moved from is counted"),
        ] {
            *counts.get_mut(&from).expect("counted") -= 1;
            *counts.get_mut(&to).expect("counted") += 1;
        }
    }

    fn topic_bounds(&self, topic: &str, dev: u32) -> (usize, usize) {
        bounds(self.topic_total[topic], self.all.len(), dev)
    }

    /// The counts per broker within `topic` (or the cluster: `None`) and the bounds they
    /// should keep within.
    fn scope(&self, topic: Option<&str>, dev: u32) -> (&BTreeMap<i32, usize>, (usize, usize)) {
        match topic {
            Some(t) => (&self.by_topic[t], self.topic_bounds(t, dev)),
            None => (&self.all, bounds(self.total, self.all.len(), dev)),
        }
    }

    /// Whether moving one of `topic`'s counts from `from` to `to` keeps the topic within
    /// its bounds (or brings it closer to them).
    fn keeps_topic_even(&self, topic: &str, from: i32, to: i32, dev: u32) -> bool {
        let (lower, upper) = self.topic_bounds(topic, dev);
        let t = &self.by_topic[topic];
        // Either the move evens the topic out, or both stay within the bounds.
        t[&from] > t[&to] + 1 || (t[&from] > lower && t[&to] < upper)
    }
}

/// Whether a count of `cf` on a giver and `ct` on a taker are worth a move: the giver
/// has two more, and one of them is out of `(lower, upper)`.
fn worth_moving(cf: usize, ct: usize, (lower, upper): (usize, usize)) -> bool {
    cf > ct + 1 && (cf > upper || ct < lower)
}

struct Planner<'a> {
    disk: &'a BTreeMap<i32, DiskUse>,
    /// The fill (0..1) at and past which a broker takes no replica.
    full: f64,
    /// Replicas of the brokers that may take them (a move in progress counts where it
    /// goes).
    replicas: Tally,
    /// (topic, partition) → replicas, for every partition not being moved.
    settled: BTreeMap<(String, i32), Vec<i32>>,
    moved: BTreeSet<(String, i32)>,
    plan: Plan,
    budget: usize,
}

impl Planner<'_> {
    fn fill(&self, b: i32) -> f64 {
        self.disk.get(&b).map_or(0.0, DiskUse::fill)
    }

    /// The emptiest broker that may take a replica of a partition on `replicas`.
    fn taker(&self, replicas: &[i32]) -> Option<i32> {
        self.replicas
            .all
            .iter()
            .filter(|(b, _)| !replicas.contains(b) && self.fill(**b) < self.full)
            .min_by(|(a, ca), (b, cb)| {
                ca.cmp(cb)
                    .then(self.fill(**a).total_cmp(&self.fill(**b)))
                    .then(a.cmp(b))
            })
            .map(|(b, _)| *b)
    }

    /// The partitions of `topic` (all topics: `None`) not being moved.
    fn settled_of<'s>(
        &'s self,
        topic: Option<&'s str>,
    ) -> impl Iterator<Item = (&'s (String, i32), &'s Vec<i32>)> + 's {
        self.settled
            .iter()
            .filter(move |(k, _)| !self.moved.contains(*k) && topic.is_none_or(|t| k.0 == t))
    }

    fn start(&mut self, key: (String, i32), target: Vec<i32>) {
        debug_assert!(self.budget > 0 && !self.moved.contains(&key));
        self.settled.insert(key.clone(), target.clone());
        self.plan.moves.push(ReassignmentItem {
            topic: key.0.clone(),
            partition: key.1,
            target: Some(target),
            keep_replication_factor: true,
        });
        self.moved.insert(key);
        self.budget -= 1;
    }

    fn drain(&mut self, draining: &BTreeSet<i32>) {
        let keys: Vec<(String, i32)> = self
            .settled
            .iter()
            .filter(|(_, r)| r.iter().any(|b| draining.contains(b)))
            .map(|(k, _)| k.clone())
            .collect();
        for key in keys {
            if self.budget == 0 {
                return;
            }
            let mut target = self.settled[&key].clone();
            let mut taken = Vec::new();
            for i in 0..target.len() {
                if !draining.contains(&target[i]) {
                    continue;
                }
                // Counted as it is taken, so a second slot of the same partition goes to
                // the next emptiest broker.
                let Some(b) = self.taker(&target) else {
                    break;
                };
                *self.replicas.all.get_mut(&b).expect("a taker is counted") += 1;
                taken.push(b);
                target[i] = b;
            }
            if target.iter().any(|b| draining.contains(b)) {
                // No broker may take it: the partition stays until one joins or frees
                // disk space.
                for b in taken {
                    *self.replicas.all.get_mut(&b).expect("a taker is counted") -= 1;
                }
                self.plan.stranded.push(key);
                continue;
            }
            self.start(key, target);
        }
    }

    /// Replica moves until every topic, and then the cluster as a whole, is within the
    /// bounds: a topic's replicas spread over all brokers (a joining broker takes its
    /// share of each topic, so of each topic's traffic), and the totals even out by moves
    /// that keep every topic so.
    fn balance_replicas(&mut self, dev: u32) {
        while self.budget > 0 {
            let topics: Vec<String> = self.replicas.by_topic.keys().cloned().collect();
            let found = topics
                .iter()
                .find_map(|t| self.replica_move(Some(t), dev))
                .or_else(|| self.replica_move(None, dev));
            let Some((key, from, to)) = found else {
                return;
            };
            let mut target = self.settled[&key].clone();
            for r in target.iter_mut().filter(|r| **r == from) {
                *r = to;
            }
            self.replicas.shift(&key.0, from, to);
            self.start(key, target);
        }
    }

    /// The next replica to move within `topic` (or the cluster: `None`): from the
    /// fullest broker above the bounds (or any, to one below them) to the emptiest that
    /// can take it, a follower first; ties go by the cluster-wide counts, then disk.
    fn replica_move(&self, topic: Option<&str>, dev: u32) -> Option<((String, i32), i32, i32)> {
        let tally = &self.replicas;
        let (counts, limits) = tally.scope(topic, dev);
        let by_load = |a: &i32, b: &i32| {
            counts[a]
                .cmp(&counts[b])
                .then(tally.all[a].cmp(&tally.all[b]))
                .then(self.fill(*a).total_cmp(&self.fill(*b)))
                .then(a.cmp(b))
        };
        let mut givers: Vec<i32> = counts.keys().copied().collect();
        givers.sort_by(|a, b| by_load(b, a));
        let mut takers: Vec<i32> = counts
            .keys()
            .copied()
            .filter(|b| self.fill(*b) < self.full)
            .collect();
        takers.sort_by(by_load);
        for &from in &givers {
            for &to in &takers {
                if !worth_moving(counts[&from], counts[&to], limits) {
                    continue;
                }
                let candidates = self.settled_of(topic).filter(|(k, r)| {
                    r.contains(&from)
                        && !r.contains(&to)
                        && (topic.is_some() || tally.keeps_topic_even(&k.0, from, to, dev))
                });
                let mut leader_move = None;
                for (k, r) in candidates {
                    if r.first() != Some(&from) {
                        return Some((k.clone(), from, to));
                    }
                    leader_move.get_or_insert_with(|| k.clone());
                }
                if let Some(k) = leader_move {
                    return Some((k, from, to));
                }
            }
        }
        None
    }

    /// Preferred-leader moves, within each topic first and then over the cluster, as
    /// replicas are balanced; a preference only moves to an in-sync replica.
    fn balance_leaders(&mut self, image: &MetadataImage, dev: u32) {
        let mut leads = Tally::new(self.replicas.all.keys().copied());
        for ((topic, _), r) in &self.settled {
            if let Some(b) = r.first() {
                leads.add(topic, *b);
            }
        }
        while self.budget > 0 {
            let topics: Vec<String> = leads.by_topic.keys().cloned().collect();
            let found = topics
                .iter()
                .find_map(|t| self.leader_move(&leads, image, Some(t), dev))
                .or_else(|| self.leader_move(&leads, image, None, dev));
            let Some((key, from, to)) = found else {
                return;
            };
            let mut target = self.settled[&key].clone();
            target.retain(|b| *b != to);
            target.insert(0, to);
            leads.shift(&key.0, from, to);
            self.plan.reordered.push(key.clone());
            self.start(key, target);
        }
    }

    fn leader_move(
        &self,
        leads: &Tally,
        image: &MetadataImage,
        topic: Option<&str>,
        dev: u32,
    ) -> Option<((String, i32), i32, i32)> {
        let (counts, limits) = leads.scope(topic, dev);
        let mut order: Vec<i32> = counts.keys().copied().collect();
        order.sort_by_key(|b| (counts[b], leads.all[b], *b));
        order.iter().rev().find_map(|&from| {
            order.iter().find_map(|&to| {
                if !worth_moving(counts[&from], counts[&to], limits) {
                    return None;
                }
                self.settled_of(topic)
                    .find(|(k, r)| {
                        r.first() == Some(&from)
                            && r.contains(&to)
                            && (topic.is_some() || leads.keeps_topic_even(&k.0, from, to, dev))
                            && image
                                .topic(&k.0)
                                .and_then(|t| t.partition(k.1))
                                .is_some_and(|p| p.isr.contains(&to))
                    })
                    .map(|(k, _)| (k.clone(), from, to))
            })
        })
    }
}

/// The next wave (see the module doc) under `config` (`enabled` off: drains only; its
/// interval is the caller's).
pub fn plan(image: &MetadataImage, disk: &BTreeMap<i32, DiskUse>, config: &Balancer) -> Plan {
    let draining = image.draining_brokers();
    let mut in_progress = 0;
    let mut settled = BTreeMap::new();
    for t in image.topics.values() {
        for (i, p) in (0..).zip(&t.partitions) {
            if p.is_reassigning() {
                in_progress += 1;
            } else {
                settled.insert((t.name.clone(), i), p.replicas.clone());
            }
        }
    }
    let mut replicas = Tally::new(
        image
            .live_brokers()
            .map(|b| b.id)
            .filter(|b| !draining.contains(b)),
    );
    // Replicas still on draining brokers end up on the others: counted in the totals.
    for t in image.topics.values() {
        for p in &t.partitions {
            for b in p.target() {
                replicas.add(&t.name, b);
            }
        }
    }
    let mut planner = Planner {
        disk,
        replicas,
        settled,
        moved: BTreeSet::new(),
        plan: Plan::default(),
        full: f64::from(config.max_disk_usage_percent) / 100.0,
        budget: config.max_moves.saturating_sub(in_progress),
    };
    if planner.replicas.all.is_empty() {
        return Plan::default();
    }
    planner.drain(&draining);
    // Only with every broker up (or leaving): a broker that is briefly down keeps its
    // replicas, and evening out the others meanwhile would only move them twice.
    let all_up = image
        .brokers
        .keys()
        .all(|b| image.is_live(*b) || draining.contains(b));
    if config.enabled && all_up {
        planner.balance_replicas(config.max_deviation_percent);
        if planner.plan.moves.is_empty() && in_progress == 0 {
            planner.balance_leaders(image, config.max_deviation_percent);
        }
    }
    planner.plan
}

/// A throttled-replica list with `entries` added (`add`) or removed; items sorted.
fn edit_list(list: Option<&String>, entries: &BTreeSet<String>, add: bool) -> String {
    let mut items: BTreeSet<String> = list
        .map(|l| {
            l.split(',')
                .map(|s| s.trim().to_string())
                .filter(|s| !s.is_empty())
                .collect()
        })
        .unwrap_or_default();
    if items.contains("*") {
        return "*".into();
    }
    for e in entries {
        if add {
            items.insert(e.clone());
        } else {
            items.remove(e);
        }
    }
    items.into_iter().collect::<Vec<_>>().join(",")
}

/// Each topic's moves, by partition.
type Moves = BTreeMap<String, BTreeMap<i32, MovedReplicas>>;

/// The balancer's marked moves that have completed (or whose partition is gone): their
/// marks come off.
fn completed_moves(image: &MetadataImage) -> Moves {
    image
        .topics
        .values()
        .filter_map(|t| {
            let done: BTreeMap<i32, MovedReplicas> = t
                .balancer_moves
                .iter()
                .filter(|(p, _)| !t.partition(**p).is_some_and(|p| p.is_reassigning()))
                .map(|(p, m)| (*p, m.clone()))
                .collect();
            (!done.is_empty()).then(|| (t.name.clone(), done))
        })
        .collect()
}

/// What a wave's moves mark: the replicas each partition had and those it gains (moves
/// that only reorder gain nothing and copy nothing, so they are not marked).
fn moves_of(image: &MetadataImage, wave: &[ReassignmentItem]) -> Moves {
    let mut moves = Moves::new();
    for m in wave {
        let Some(p) = image.topic(&m.topic).and_then(|t| t.partition(m.partition)) else {
            continue;
        };
        let Some(target) = &m.target else { continue };
        let gains: Vec<i32> = target
            .iter()
            .copied()
            .filter(|b| !p.replicas.contains(b))
            .collect();
        if !gains.is_empty() {
            moves.entry(m.topic.clone()).or_default().insert(
                m.partition,
                MovedReplicas {
                    had: p.replicas.clone(),
                    gains,
                },
            );
        }
    }
    moves
}

/// The per-topic marks that put `moves` on (`add`) or take them off the throttled-replica
/// lists: leader entries for the replicas a partition had, follower entries for the ones
/// it gains. A topic whose lists already say as much (a `*`) is still listed, so its
/// record of the balancer's moves changes with the rest.
fn throttle_marks(image: &MetadataImage, moves: &Moves, add: bool) -> Vec<BalancerMarks> {
    moves
        .iter()
        .filter_map(|(topic, moves)| {
            let from = image.topic(topic)?.configs.clone();
            let mut to = from.clone();
            let entries = |of: fn(&MovedReplicas) -> &Vec<i32>| -> BTreeSet<String> {
                moves
                    .iter()
                    .flat_map(|(p, m)| of(m).iter().map(move |b| format!("{p}:{b}")))
                    .collect()
            };
            for (key, entries) in [
                (LEADER_THROTTLED, entries(|m| &m.had)),
                (FOLLOWER_THROTTLED, entries(|m| &m.gains)),
            ] {
                let list = edit_list(from.get(key), &entries, add);
                if list.is_empty() {
                    to.remove(key);
                } else {
                    to.insert(key.to_string(), list);
                }
            }
            Some(BalancerMarks {
                change: ConfigChange {
                    name: topic.clone(),
                    from,
                    to,
                },
                moves: moves.clone(),
            })
        })
        .collect()
}

/// Proposes (un)marking `moves`; whether every topic's marks were applied.
async fn mark(shared: &Shared, image: &MetadataImage, moves: &Moves, add: bool) -> bool {
    let topics = throttle_marks(image, moves, add);
    match propose(shared, Command::MarkBalancerMoves { add, topics }).await {
        Some(Outcome::Items(items)) => items.iter().all(Result::is_ok),
        _ => false,
    }
}

async fn propose(shared: &Shared, command: Command) -> Option<crate::command::Outcome> {
    let proposal = Proposal {
        id: Uuid::new_v4(),
        command,
    };
    match node::write_local(shared, proposal).await {
        Ok(applied) => Some(applied.outcome),
        Err(e) => {
            tracing::debug!(error = %e, "balancer proposal not committed");
            None
        }
    }
}

/// Runs for as long as the node does; acts only while the node leads.
pub(crate) async fn lead(shared: Arc<Shared>, config: Balancer) {
    let mut tick = tokio::time::interval(config.interval.max(Duration::from_millis(100)));
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    // Told once each time it changes: an operator waiting on a decommission learns why
    // it does not progress.
    let mut stranded_told = Vec::new();
    loop {
        tick.tick().await;
        if !node::is_leader(&shared) {
            continue;
        }
        let image = shared.sm.image();
        // Marks come off first, whoever marked them while leading: the next wave waits
        // for its lists to be clean.
        let done = completed_moves(&image);
        if !done.is_empty() {
            mark(&shared, &image, &done, false).await;
            continue;
        }
        let disk = shared.disk_use();
        let wave = plan(&image, &disk, &config);
        if wave.stranded != stranded_told {
            if !wave.stranded.is_empty() {
                let full: Vec<String> = disk
                    .iter()
                    .filter(|(_, d)| d.fill() * 100.0 >= f64::from(config.max_disk_usage_percent))
                    .map(|(b, d)| format!("broker {b} {:.0}%", d.fill() * 100.0))
                    .collect();
                tracing::warn!(
                    partitions = ?wave.stranded,
                    disks_over_limit = ?full,
                    limit_percent = config.max_disk_usage_percent,
                    "replicas on a decommissioned broker cannot move: no other broker may take \
                     them (each holds a replica already, or its disk is over the limit)"
                );
            }
            stranded_told = wave.stranded.clone();
        }
        if wave.moves.is_empty() {
            continue;
        }
        let moves = moves_of(&image, &wave.moves);
        if !moves.is_empty() && !mark(&shared, &image, &moves, true).await {
            // The topics changed meanwhile: plan again on the next image (marks that
            // did apply come off then, their partitions not moving).
            continue;
        }
        let n = wave.moves.len();
        let outcome = propose(
            &shared,
            Command::AlterPartitionReassignments { items: wave.moves },
        )
        .await;
        tracing::info!(partitions = n, reordered = wave.reordered.len(), outcome = ?outcome, "balancer moves started");
        if !wave.reordered.is_empty() {
            let outcome = propose(
                &shared,
                Command::ElectLeaders {
                    election: Election::Preferred,
                    partitions: wave.reordered,
                },
            )
            .await;
            tracing::debug!(outcome = ?outcome, "balancer's preferred elections");
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::test_images::{apply, cluster, create, join};

    /// The balancer's settings with `enabled` and `max_moves` (the rest by default).
    fn settings(enabled: bool, max_moves: usize) -> Balancer {
        Balancer {
            enabled,
            max_moves,
            ..Balancer::default()
        }
    }

    /// Applies a plan's moves and completes them (every added replica in sync).
    fn carry_out(img: &mut MetadataImage, plan: &Plan) {
        let outcome = apply(
            img,
            Command::AlterPartitionReassignments {
                items: plan.moves.clone(),
            },
        );
        assert!(
            matches!(&outcome, crate::Outcome::Items(v) if v.iter().all(Result::is_ok)),
            "{outcome:?}"
        );
        // Every added replica catches up: the move completes, as the controller
        // completes it once the whole target is in the ISR.
        for p in img
            .topics
            .values_mut()
            .flat_map(|t| t.partitions.iter_mut())
        {
            if p.is_reassigning() {
                p.replicas = p.target();
                p.isr = p.replicas.clone();
                p.adding.clear();
                p.removing.clear();
                if !p.replicas.contains(&p.leader) {
                    p.leader = p.replicas[0];
                }
            }
        }
    }

    fn replicas_per_broker(img: &MetadataImage) -> BTreeMap<i32, usize> {
        let mut n = BTreeMap::new();
        for p in &img.topics["t"].partitions {
            for b in &p.replicas {
                *n.entry(*b).or_insert(0) += 1;
            }
        }
        n
    }

    fn preferred_per_broker(img: &MetadataImage) -> BTreeMap<i32, usize> {
        let mut n = BTreeMap::new();
        for p in &img.topics["t"].partitions {
            *n.entry(p.replicas[0]).or_insert(0) += 1;
        }
        n
    }

    #[test]
    fn bounds_are_the_mean_give_or_take_the_deviation_in_whole_counts() {
        assert_eq!(bounds(24, 4, 10), (6, 6));
        assert_eq!(bounds(8, 3, 10), (2, 3));
        assert_eq!(bounds(100, 4, 10), (23, 27));
        assert_eq!(bounds(0, 3, 10), (0, 0));
    }

    #[test]
    fn a_joining_broker_takes_replicas_then_leaders_until_all_are_within_bounds() {
        let assignments: Vec<Vec<i32>> =
            (0..12).map(|i| vec![i % 3 + 1, (i + 1) % 3 + 1]).collect();
        let mut img = cluster(3, assignments);
        let none = BTreeMap::new();
        assert_eq!(
            plan(&img, &none, &settings(true, 8)),
            Plan::default(),
            "balanced"
        );
        join(&mut img, 4);
        let mut waves = 0;
        loop {
            let p = plan(&img, &none, &settings(true, 4));
            if p.moves.is_empty() {
                break;
            }
            assert!(p.moves.len() <= 4, "a wave is at most max_moves");
            carry_out(&mut img, &p);
            waves += 1;
            assert!(waves < 20, "converges");
        }
        let per = replicas_per_broker(&img);
        assert_eq!(per.values().copied().collect::<Vec<_>>(), vec![6, 6, 6, 6]);
        let leads = preferred_per_broker(&img);
        assert_eq!(
            leads.values().copied().collect::<Vec<_>>(),
            vec![3, 3, 3, 3]
        );
        for p in &img.topics["t"].partitions {
            let set: BTreeSet<_> = p.replicas.iter().collect();
            assert_eq!(set.len(), 2, "no duplicates: {:?}", p.replicas);
        }
    }

    #[test]
    fn switched_off_it_only_drains() {
        let assignments: Vec<Vec<i32>> = (0..6).map(|i| vec![i % 3 + 1, (i + 1) % 3 + 1]).collect();
        let mut img = cluster(3, assignments);
        join(&mut img, 4);
        let none = BTreeMap::new();
        assert_eq!(plan(&img, &none, &settings(false, 8)), Plan::default());
        img.broker_configs.insert(
            "2".into(),
            [(DECOMMISSION_KEY.to_string(), "true".to_string())].into(),
        );
        let p = plan(&img, &none, &settings(false, 8));
        assert_eq!(p.moves.len(), 4, "the four partitions on broker 2");
        carry_out(&mut img, &p);
        let per = replicas_per_broker(&img);
        assert!(!per.contains_key(&2), "{per:?}");
        assert_eq!(per.values().sum::<usize>(), 12);
        assert_eq!(
            plan(&img, &none, &settings(false, 8)),
            Plan::default(),
            "drained"
        );
    }

    #[test]
    fn a_partition_with_too_few_brokers_left_stays_where_it_is() {
        let mut img = cluster(3, vec![vec![1, 2], vec![2, 3], vec![3, 1]]);
        for b in ["1", "2"] {
            img.broker_configs.insert(
                b.into(),
                [(DECOMMISSION_KEY.to_string(), "true".to_string())].into(),
            );
        }
        // Only broker 3 is left: no partition can have two replicas off 1 and 2.
        let stuck = plan(&img, &BTreeMap::new(), &settings(true, 8));
        assert!(
            stuck.moves.is_empty() && stuck.reordered.is_empty(),
            "{stuck:?}"
        );
        assert_eq!(stuck.stranded.len(), 3, "{stuck:?}");
        join(&mut img, 4);
        let p = plan(&img, &BTreeMap::new(), &settings(true, 8));
        let targets: Vec<_> = p.moves.iter().map(|m| m.target.clone().unwrap()).collect();
        assert_eq!(targets, vec![vec![4, 3], vec![4, 3], vec![3, 4]]);
    }

    #[test]
    fn a_drain_with_every_other_disk_over_the_limit_is_stranded_not_lost() {
        let mut img = cluster(3, vec![vec![1, 2], vec![2, 3], vec![3, 1]]);
        join(&mut img, 4);
        img.broker_configs.insert(
            "3".into(),
            [(DECOMMISSION_KEY.to_string(), "true".to_string())].into(),
        );
        let full = DiskUse::from_blocks(100, 10, 0, 4096);
        let disk: BTreeMap<i32, DiskUse> = [1, 2, 4].into_iter().map(|b| (b, full)).collect();
        let p = plan(&img, &disk, &settings(false, 8));
        assert!(p.moves.is_empty(), "{p:?}");
        assert_eq!(p.stranded.len(), 2, "the partitions on broker 3: {p:?}");
        let p = plan(&img, &BTreeMap::new(), &settings(false, 8));
        assert_eq!((p.moves.len(), p.stranded.len()), (2, 0), "{p:?}");
    }

    #[test]
    fn a_full_disk_takes_nothing_and_a_wave_counts_moves_in_progress() {
        let assignments: Vec<Vec<i32>> = (0..6).map(|i| vec![i % 3 + 1, (i + 1) % 3 + 1]).collect();
        let mut img = cluster(3, assignments);
        join(&mut img, 4);
        let mut disk = BTreeMap::new();
        disk.insert(
            4,
            DiskUse {
                used_bytes: 90,
                total_bytes: 100,
            },
        );
        assert!(plan(&img, &disk, &settings(true, 8)).moves.is_empty());
        let roomier = Balancer {
            max_disk_usage_percent: 95,
            ..settings(true, 8)
        };
        assert!(
            !plan(&img, &disk, &roomier).moves.is_empty(),
            "90 % is not full under a 95 % limit"
        );
        disk.clear();
        let p = plan(&img, &BTreeMap::new(), &settings(true, 1));
        assert_eq!(p.moves.len(), 1);
        apply(
            &mut img,
            Command::AlterPartitionReassignments {
                items: p.moves.clone(),
            },
        );
        assert!(
            plan(&img, &disk, &settings(true, 1)).moves.is_empty(),
            "the move in progress fills the wave"
        );
    }

    /// Replicas and preferred leaderships of `topic` per broker.
    fn topic_counts(
        img: &MetadataImage,
        topic: &str,
    ) -> (BTreeMap<i32, usize>, BTreeMap<i32, usize>) {
        let (mut replicas, mut preferred) = (BTreeMap::new(), BTreeMap::new());
        for p in &img.topics[topic].partitions {
            for b in &p.replicas {
                *replicas.entry(*b).or_insert(0) += 1;
            }
            *preferred.entry(p.replicas[0]).or_insert(0) += 1;
        }
        (replicas, preferred)
    }

    /// The case that left a joining broker without any replica of the busy topic: its
    /// share of the cluster's replicas was all taken from `__consumer_offsets`, whose
    /// 150 replicas sort first. Each topic is spread over the four brokers now, and the
    /// totals are even too.
    #[test]
    fn a_joining_broker_takes_its_share_of_every_topic() {
        let mut img = cluster(
            3,
            (0..24)
                .map(|i| vec![i % 3 + 1, (i + 1) % 3 + 1, (i + 2) % 3 + 1])
                .collect(),
        );
        create(
            &mut img,
            "__consumer_offsets",
            (0..50)
                .map(|i| vec![(i + 1) % 3 + 1, (i + 2) % 3 + 1, i % 3 + 1])
                .collect(),
        );
        join(&mut img, 4);
        let none = BTreeMap::new();
        for wave in 0.. {
            assert!(wave < 100, "the balancer settles");
            let p = plan(&img, &none, &settings(true, 8));
            if p.moves.is_empty() {
                break;
            }
            carry_out(&mut img, &p);
        }
        for (topic, replicas) in [("t", 72), ("__consumer_offsets", 150)] {
            let (lower, upper) = bounds(replicas, 4, 10);
            let (per_broker, preferred) = topic_counts(&img, topic);
            assert!(
                per_broker.len() == 4 && per_broker.values().all(|n| (lower..=upper).contains(n)),
                "{topic}: {per_broker:?}"
            );
            let (lower, upper) = bounds(replicas / 3, 4, 10);
            assert!(
                preferred.len() == 4 && preferred.values().all(|n| (lower..=upper).contains(n)),
                "{topic} preferred: {preferred:?}"
            );
        }
        let total = replicas_per_broker_all(&img);
        let (lower, upper) = bounds(222, 4, 10);
        assert!(
            total.values().all(|n| (lower..=upper).contains(n)),
            "{total:?}"
        );
    }

    /// Topics of `(partitions, replication factor, rotation)` on brokers `1..=brokers`,
    /// each partition's replicas consecutive brokers from a start that rotates by
    /// `rotation` per partition (so some layouts are skewed, some even).
    fn layout(brokers: i32, topics: &[(usize, i32, i32)]) -> MetadataImage {
        let mut img = cluster(brokers, vec![vec![1]]);
        for (n, &(partitions, rf, rotation)) in topics.iter().enumerate() {
            let rf = rf.min(brokers);
            let assignments = (0..partitions as i32)
                .map(|i| {
                    (0..rf)
                        .map(|r| (i * rotation + r).rem_euclid(brokers) + 1)
                        .collect()
                })
                .collect();
            create(&mut img, &format!("topic-{n}"), assignments);
        }
        img
    }

    proptest::proptest! {
        #![proptest_config(proptest::prelude::ProptestConfig::with_cases(256))]

        /// Whatever the topics and their layout, a joining broker ends up with its
        /// share of the cluster's replicas and of every topic big enough to give it one,
        /// and the balancer settles.
        #[test]
        fn a_joining_broker_gets_its_share_of_any_layout(
            brokers in 2..=5i32,
            topics in proptest::collection::vec((1usize..=40, 1..=3i32, 0..=3i32), 1..=4),
            max_moves in 1usize..=8,
        ) {
            let mut img = layout(brokers, &topics);
            let joining = brokers + 1;
            join(&mut img, joining);
            let none = BTreeMap::new();
            let mut waves = 0;
            loop {
                let p = plan(&img, &none, &settings(true, max_moves));
                if p.moves.is_empty() {
                    break;
                }
                carry_out(&mut img, &p);
                waves += 1;
                proptest::prop_assert!(waves < 500, "the balancer settles");
            }
            let all = replicas_per_broker_all(&img);
            let total: usize = all.values().sum();
            let (lower, upper) = bounds(total, joining as usize, 10);
            proptest::prop_assert!(
                (1..=joining).all(|b| (lower..=upper).contains(all.get(&b).unwrap_or(&0))),
                "cluster-wide {all:?}, bounds {lower}..={upper}"
            );
            for topic in img.topics.keys().filter(|t| t.starts_with("topic-")) {
                let (per_broker, _) = topic_counts(&img, topic);
                let replicas: usize = per_broker.values().sum();
                let (lower, _) = bounds(replicas, joining as usize, 10);
                let got = per_broker.get(&joining).copied().unwrap_or(0);
                proptest::prop_assert!(got >= lower, "{topic}: {per_broker:?}, at least {lower} each");
            }
            for p in img.topics.values().flat_map(|t| &t.partitions) {
                let set: BTreeSet<_> = p.replicas.iter().collect();
                proptest::prop_assert_eq!(set.len(), p.replicas.len(), "no duplicates: {:?}", p.replicas);
            }
        }
    }

    fn replicas_per_broker_all(img: &MetadataImage) -> BTreeMap<i32, usize> {
        let mut n = BTreeMap::new();
        for p in img.topics.values().flat_map(|t| &t.partitions) {
            for b in &p.replicas {
                *n.entry(*b).or_insert(0) += 1;
            }
        }
        n
    }

    /// Partition t-0 moving from brokers 1 and 2 to 3 as well.
    fn one_move() -> Moves {
        let moved = MovedReplicas {
            had: vec![1, 2],
            gains: vec![3],
        };
        [("t".to_string(), [(0, moved)].into())].into()
    }

    #[test]
    fn throttle_marks_merge_into_the_lists_and_come_off_again() {
        let mut img = cluster(3, vec![vec![1, 2], vec![2, 3]]);
        img.topics
            .get_mut("t")
            .unwrap()
            .configs
            .insert(LEADER_THROTTLED.into(), "1:2".into());
        let moves = one_move();
        let add = throttle_marks(&img, &moves, true);
        assert_eq!(add.len(), 1);
        assert_eq!(add[0].change.to[LEADER_THROTTLED], "0:1,0:2,1:2");
        assert_eq!(add[0].change.to[FOLLOWER_THROTTLED], "0:3");
        img.topics.get_mut("t").unwrap().configs = add[0].change.to.clone();
        let remove = throttle_marks(&img, &moves, false);
        assert_eq!(remove[0].change.to[LEADER_THROTTLED], "1:2");
        assert!(!remove[0].change.to.contains_key(FOLLOWER_THROTTLED));
    }

    /// The marks of a wave are in the image: whichever controller applies the image
    /// once the moves complete finds them done and takes exactly them off, leaving an
    /// operator's entries.
    #[test]
    fn a_waves_marks_come_off_once_its_moves_complete_whoever_leads() {
        let mut img = cluster(3, vec![vec![1, 2], vec![2, 3], vec![3, 1], vec![1, 2]]);
        img.topics
            .get_mut("t")
            .unwrap()
            .configs
            .insert(FOLLOWER_THROTTLED.into(), "3:3".into());
        join(&mut img, 4);
        let wave = plan(&img, &BTreeMap::new(), &settings(true, 2));
        assert_eq!(wave.moves.len(), 2, "{wave:?}");
        let moves = moves_of(&img, &wave.moves);
        assert_eq!(moves["t"].len(), 2);
        let topics = throttle_marks(&img, &moves, true);
        let marked = apply(&mut img, Command::MarkBalancerMoves { add: true, topics });
        assert_eq!(marked, Outcome::Items(vec![Ok(())]));
        assert_eq!(img.topics["t"].balancer_moves, moves["t"]);
        apply(
            &mut img,
            Command::AlterPartitionReassignments {
                items: wave.moves.clone(),
            },
        );
        assert!(completed_moves(&img).is_empty(), "both still moving");
        carry_out(&mut img, &Plan::default());
        let done = completed_moves(&img);
        assert_eq!(done, moves);
        let topics = throttle_marks(&img, &done, false);
        let unmarked = apply(&mut img, Command::MarkBalancerMoves { add: false, topics });
        assert_eq!(unmarked, Outcome::Items(vec![Ok(())]));
        let t = &img.topics["t"];
        assert!(t.balancer_moves.is_empty());
        assert!(!t.configs.contains_key(LEADER_THROTTLED), "{:?}", t.configs);
        assert_eq!(
            t.configs[FOLLOWER_THROTTLED], "3:3",
            "the operator's entry stays"
        );
    }

    #[test]
    fn marks_computed_from_configs_that_changed_since_are_refused_whole() {
        let mut img = cluster(3, vec![vec![1, 2]]);
        let moves = one_move();
        let stale = throttle_marks(&img, &moves, true);
        img.topics
            .get_mut("t")
            .unwrap()
            .configs
            .insert("retention.ms".into(), "1000".into());
        let out = apply(
            &mut img,
            Command::MarkBalancerMoves {
                add: true,
                topics: stale,
            },
        );
        assert_eq!(
            out,
            Outcome::Items(vec![Err(crate::CommandError::Conflict)])
        );
        assert!(img.topics["t"].balancer_moves.is_empty());
        let gone: Moves = [("t".to_string(), [(5, MovedReplicas::default())].into())].into();
        let topics = throttle_marks(&img, &gone, true);
        let out = apply(&mut img, Command::MarkBalancerMoves { add: true, topics });
        assert_eq!(
            out,
            Outcome::Items(vec![Err(crate::CommandError::UnknownTopicOrPartition)])
        );
    }
}
