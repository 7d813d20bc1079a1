//! The cluster's metadata as of one applied log index: brokers, topics and their
//! partitions, configs, client quotas and the producer-id high mark. The controller's
//! state machine owns the one mutable image; everyone else reads immutable snapshots of
//! it (`Arc<MetadataImage>`), each stamped with the log index it reflects (`applied`), so
//! a reader can tell which of two views is newer.
//!
//! Invariants (checked by `check_invariants`, asserted in debug builds after every
//! applied command):
//! - every partition has at least one replica, no replica twice, and every replica is a
//!   registered broker;
//! - the ISR is a non-empty subset of the replicas, in assignment order (so no member
//!   twice); the leader is -1 or a member of the ISR that can serve the partition
//!   (`can_serve`: active — registered, not fenced, not shutting down — with the
//!   partition's directory online);
//! - no election is missed: a partition without a leader has no ISR member that can
//!   serve it, and, when unclean leader election is enabled for its topic, no replica
//!   that can;
//! - a partition's directories name only its replicas;
//! - a reassignment's adding and removing replicas are disjoint replicas of the
//!   partition, the replicas list the target (the replicas not being removed) first, and
//!   a reassignment whose target is all in the ISR and whose leader is in the target has
//!   completed (it stays in progress only while a removed replica leads and no target
//!   replica is live to take over, or while nothing leads);
//! - a registration that is shutting down is fenced;
//! - the balancer's marked moves name partitions of their topic;
//! - topic ids are unique and `topic_ids` indexes exactly `topics`;
//! - epochs only grow (checked where they change, in `apply`).

use crate::client_quotas::ClientQuotas;
use serde::{Deserialize, Serialize};
use std::collections::{BTreeMap, BTreeSet, HashMap};
use uuid::Uuid;

/// The topic config (and cluster-wide broker config) that lets a partition with no live
/// ISR member be led by a live replica outside the ISR, at the price of the records only
/// the ISR had. "true" or "false"; off unless set.
pub const UNCLEAN_LEADER_ELECTION_ENABLE: &str = "unclean.leader.election.enable";

/// Kafka's limit: a partition directory name `<topic>-<partition>` must fit in 255 bytes.
pub const TOPIC_NAME_LEN_MAX: usize = 249;
/// No leader: every replica that could lead is fenced (Kafka's -1).
pub const NO_LEADER: i32 = -1;

/// Where a broker serves Kafka clients.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Endpoint {
    pub host: String,
    pub port: u16,
}

/// One of a broker's advertised listeners (Kafka's registration endpoints): a client
/// that connected on listener `name` reaches this broker at `host:port`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ListenerEndpoint {
    pub name: String,
    pub host: String,
    pub port: u16,
}

/// A registered broker. `epoch` is the log index of its latest registration (Kafka's
/// broker epoch): requests that carry an older one come from a previous incarnation.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct BrokerRegistration {
    pub id: i32,
    /// Chosen by the broker at each start: a new one is a restart.
    pub incarnation: Uuid,
    pub epoch: u64,
    /// Its inter-broker listener: where replicas fetch from it.
    pub endpoint: Endpoint,
    /// Its advertised listeners. Empty in images of earlier releases, whose brokers had
    /// the one listener `endpoint`.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub listeners: Vec<ListenerEndpoint>,
    /// Its controller/inter-broker listener, `host:port`.
    pub controller_addr: String,
    pub rack: Option<String>,
    /// A fenced broker leads nothing and is not offered to clients. Brokers register
    /// fenced and are unfenced once they have caught up with the metadata log.
    pub fenced: bool,
    /// In controlled shutdown (Kafka's): fenced and never unfenced again; only a new
    /// registration (a restart) clears it. Absent from images of earlier releases.
    #[serde(default)]
    pub shutting_down: bool,
    /// The feature levels its release supports; `None` for a release before feature
    /// levels.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub supported_features: Option<crate::features::FeatureRanges>,
    /// The ids of the log directories it registered with (KIP-858's `LogDirs`); empty
    /// from a release before directory ids.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub log_dirs: Vec<Uuid>,
    /// Those of `log_dirs` that failed since it registered (Kafka's offline
    /// directories): the partitions they hold are served by other replicas.
    #[serde(default, skip_serializing_if = "BTreeSet::is_empty")]
    pub offline_dirs: BTreeSet<Uuid>,
}

impl BrokerRegistration {
    /// Where a client that connected on `listener` reaches this broker (Kafka gives each
    /// client the addresses of its own listener); `None`: the broker has no such listener.
    pub fn endpoint_on(&self, listener: &str) -> Option<(&str, u16)> {
        if self.listeners.is_empty() {
            return Some((&self.endpoint.host, self.endpoint.port));
        }
        self.listeners
            .iter()
            .find(|l| l.name == listener)
            .map(|l| (l.host.as_str(), l.port))
    }

    /// May lead and join ISRs: not fenced, not shutting down (Kafka's "active").
    pub fn is_active(&self) -> bool {
        !self.fenced && !self.shutting_down
    }

    /// Whether a replica in directory `dir` (`None`: not assigned yet) is on a disk this
    /// registration has online: one it registered and has not reported failed. A
    /// replica whose directory is not assigned yet is taken to be online (a release
    /// before directory ids, or a replica its broker has not reported yet).
    pub fn has_online(&self, dir: Option<&Uuid>) -> bool {
        match dir {
            None => true,
            Some(d) => {
                !self.offline_dirs.contains(d)
                    && (self.log_dirs.is_empty() || self.log_dirs.contains(d))
            }
        }
    }
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct PartitionImage {
    /// The assignment, in preference order: the first live ISR member leads.
    pub replicas: Vec<i32>,
    pub isr: Vec<i32>,
    pub leader: i32,
    /// Grows by one with every leader change.
    pub leader_epoch: i32,
    /// Grows by one with every change of this partition's state.
    pub partition_epoch: i32,
    /// A reassignment in progress (KIP-455): the replicas being added, which fetch and
    /// must all join the ISR before the reassignment completes. `replicas` is then the
    /// target followed by `removing`. Both lists are empty when none is in progress.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub adding: Vec<i32>,
    /// The replicas a reassignment in progress removes once it completes.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub removing: Vec<i32>,
    /// The log directory each replica lives in, by broker (KIP-858's `Directories`, set
    /// by its broker's `AssignReplicasToDirs`); a replica not listed has none assigned
    /// yet. Only replicas are listed.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub directories: BTreeMap<i32, Uuid>,
}

impl PartitionImage {
    pub fn has_leader(&self) -> bool {
        self.leader != NO_LEADER
    }

    /// Whether a reassignment is in progress.
    pub fn is_reassigning(&self) -> bool {
        !self.adding.is_empty() || !self.removing.is_empty()
    }

    /// The replicas once the reassignment in progress completes (the replicas when none
    /// is), in preference order.
    pub fn target(&self) -> Vec<i32> {
        without(&self.replicas, &self.removing)
    }

    /// The replicas before the reassignment in progress began (the replicas when none
    /// is): what cancelling it restores.
    pub fn original(&self) -> Vec<i32> {
        without(&self.replicas, &self.adding)
    }
}

/// Whether broker `r` may lead `p` or join its ISR: registered, active, and with the
/// directory `p`'s replica lives in online.
pub fn can_serve(brokers: &BTreeMap<i32, BrokerRegistration>, p: &PartitionImage, r: i32) -> bool {
    brokers
        .get(&r)
        .is_some_and(|b| b.is_active() && b.has_online(p.directories.get(&r)))
}

/// The brokers that may lead `p` or join its ISR (`can_serve`), in id order: every
/// active one but those holding `p` on a directory they have offline.
pub fn live_for(brokers: &BTreeMap<i32, BrokerRegistration>, p: &PartitionImage) -> Vec<i32> {
    brokers
        .values()
        .filter(|b| b.is_active() && b.has_online(p.directories.get(&b.id)))
        .map(|b| b.id)
        .collect()
}

/// Whether broker `r` holds `p` on a directory it has offline (failed, or gone from
/// its registration): Kafka's offline replica.
pub fn is_offline_replica(
    brokers: &BTreeMap<i32, BrokerRegistration>,
    p: &PartitionImage,
    r: i32,
) -> bool {
    brokers
        .get(&r)
        .is_some_and(|b| !b.has_online(p.directories.get(&r)))
}

/// `of` without the members of `left_out`, in `of`'s order.
pub(crate) fn without(of: &[i32], left_out: &[i32]) -> Vec<i32> {
    of.iter()
        .copied()
        .filter(|r| !left_out.contains(r))
        .collect()
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct TopicImage {
    pub name: String,
    pub id: Uuid,
    /// Topic-level overrides (`retention.ms`, ...), validated before they were proposed.
    pub configs: BTreeMap<String, String>,
    /// Indexed by partition id.
    pub partitions: Vec<PartitionImage>,
    /// The balancer's moves marked on this topic's throttled-replica lists, by partition:
    /// kept in the image, so whichever controller leads when a move completes takes its
    /// marks off (and marks an operator set stay theirs).
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub balancer_moves: BTreeMap<i32, MovedReplicas>,
}

/// What one balancer move marked: leader entries for the replicas the partition had,
/// follower entries for the replicas it gains.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct MovedReplicas {
    pub had: Vec<i32>,
    pub gains: Vec<i32>,
}

impl TopicImage {
    pub fn partition_count(&self) -> i32 {
        i32::try_from(self.partitions.len()).unwrap_or(i32::MAX)
    }

    pub fn partition(&self, id: i32) -> Option<&PartitionImage> {
        usize::try_from(id)
            .ok()
            .and_then(|i| self.partitions.get(i))
    }
}

/// The dynamic broker config (on a broker's own resource) that starts (`true`) or
/// stops a broker's decommission (`balancer`).
pub const DECOMMISSION_KEY: &str = "corelog.decommission";

#[derive(Debug, Clone, Default, Serialize, Deserialize)]
pub struct MetadataImage {
    /// The log index this image reflects (0: nothing applied yet).
    pub applied: u64,
    /// Set by the first command the cluster ever applies; never changes after.
    pub cluster_id: Option<String>,
    pub brokers: BTreeMap<i32, BrokerRegistration>,
    pub topics: BTreeMap<String, TopicImage>,
    /// First producer id not yet handed out in a block: ids below it are never given out
    /// again.
    pub next_producer_id: i64,
    pub client_quotas: ClientQuotas,
    /// Dynamic broker configs by resource: "" the cluster-wide default, "<id>" one broker.
    pub broker_configs: BTreeMap<String, BTreeMap<String, String>>,
    /// Per-group configs by group id (GROUP config resources); absent from images of
    /// earlier releases.
    #[serde(default)]
    pub group_configs: BTreeMap<String, BTreeMap<String, String>>,
    /// SASL/SCRAM credentials (KIP-554); absent from images of earlier releases.
    #[serde(default)]
    pub scram: crate::scram::ScramCredentials,
    /// Access control lists; absent from images of earlier releases.
    #[serde(default)]
    pub acls: crate::acl::Acls,
    /// The finalized feature levels (`features`); empty in images of releases before
    /// feature levels, until the first `UpdateFeatures`.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub features: crate::features::FeatureLevels,
    /// Topic names by id, derived from `topics` (rebuilt after a snapshot is loaded).
    #[serde(skip)]
    pub(crate) topic_ids: HashMap<Uuid, String>,
}

impl MetadataImage {
    pub fn topic(&self, name: &str) -> Option<&TopicImage> {
        self.topics.get(name)
    }

    pub fn topic_by_id(&self, id: Uuid) -> Option<&TopicImage> {
        self.topic_ids.get(&id).and_then(|n| self.topics.get(n))
    }

    pub fn broker(&self, id: i32) -> Option<&BrokerRegistration> {
        self.brokers.get(&id)
    }

    /// Registered and active (not fenced, not shutting down), in id order.
    pub fn live_brokers(&self) -> impl Iterator<Item = &BrokerRegistration> {
        self.brokers.values().filter(|b| b.is_active())
    }

    /// The brokers being decommissioned: those whose own dynamic layer sets
    /// [`DECOMMISSION_KEY`] to true. They take no new replicas; the balancer drains them.
    pub fn draining_brokers(&self) -> std::collections::BTreeSet<i32> {
        self.broker_configs
            .iter()
            .filter(|(_, layer)| {
                layer
                    .get(DECOMMISSION_KEY)
                    .is_some_and(|v| v.trim().eq_ignore_ascii_case("true"))
            })
            .filter_map(|(name, _)| name.parse().ok())
            .collect()
    }

    /// Registered and active: may lead, join an ISR, take new replicas.
    pub fn is_live(&self, id: i32) -> bool {
        self.brokers.get(&id).is_some_and(|b| b.is_active())
    }

    /// Whether a partition of `topic` with no live ISR member is led by a live replica
    /// outside its ISR (see `unclean_leader_election`).
    pub fn unclean_leader_election(&self, topic: &TopicImage) -> bool {
        unclean_leader_election(&topic.configs, self.broker_configs.get(""))
    }

    /// Rebuilds the derived indexes (after deserialising a snapshot).
    pub(crate) fn reindex(&mut self) {
        self.topic_ids = self
            .topics
            .values()
            .map(|t| (t.id, t.name.clone()))
            .collect();
    }

    /// Every invariant of the module doc; the first one broken, if any.
    pub fn check_invariants(&self) -> Result<(), String> {
        if let Some(b) = self.brokers.values().find(|b| b.shutting_down && !b.fenced) {
            return Err(format!("broker {} is shutting down but not fenced", b.id));
        }
        if self.topic_ids.len() != self.topics.len() {
            return Err("topic id index out of step with topics (or duplicate ids)".into());
        }
        for (name, t) in &self.topics {
            if name != &t.name {
                return Err(format!("topic {} filed under {name}", t.name));
            }
            if self.topic_ids.get(&t.id) != Some(name) {
                return Err(format!("topic {name}: id {} not indexed", t.id));
            }
            if let Some(p) = t.balancer_moves.keys().find(|p| t.partition(**p).is_none()) {
                return Err(format!(
                    "{name}: balancer move marked on partition {p}, which it lacks"
                ));
            }
            for (i, p) in t.partitions.iter().enumerate() {
                let at = || format!("{name}-{i}");
                if p.replicas.is_empty() {
                    return Err(format!("{}: no replicas", at()));
                }
                let mut seen = p.replicas.clone();
                seen.sort_unstable();
                seen.dedup();
                if seen.len() != p.replicas.len() {
                    return Err(format!("{}: a replica twice in {:?}", at(), p.replicas));
                }
                if let Some(r) = p.replicas.iter().find(|r| !self.brokers.contains_key(r)) {
                    return Err(format!("{}: replica {r} is not a registered broker", at()));
                }
                if p.isr.is_empty() || !is_subsequence(&p.isr, &p.replicas) {
                    return Err(format!(
                        "{}: ISR {:?} is not a non-empty subset of replicas {:?} in their order",
                        at(),
                        p.isr,
                        p.replicas
                    ));
                }
                if let Some(b) = p.directories.keys().find(|b| !p.replicas.contains(b)) {
                    return Err(format!("{}: a directory for {b}, not a replica", at()));
                }
                if p.has_leader()
                    && (!p.isr.contains(&p.leader) || !can_serve(&self.brokers, p, p.leader))
                {
                    return Err(format!(
                        "{}: leader {} not a live ISR member",
                        at(),
                        p.leader
                    ));
                }
                if let Some(e) = reassignment_error(p) {
                    return Err(format!("{}: {e}", at()));
                }
                if !p.has_leader() {
                    let eligible: &[i32] = if self.unclean_leader_election(t) {
                        &p.replicas
                    } else {
                        &p.isr
                    };
                    if let Some(r) = eligible.iter().find(|r| can_serve(&self.brokers, p, **r)) {
                        return Err(format!("{}: no leader, yet {r} could lead", at()));
                    }
                }
            }
        }
        Ok(())
    }
}

/// What is wrong with `p`'s reassignment in progress, if anything (the module doc's
/// invariant).
fn reassignment_error(p: &PartitionImage) -> Option<String> {
    if !p.is_reassigning() {
        return None;
    }
    if let Some(r) = p
        .adding
        .iter()
        .chain(&p.removing)
        .find(|r| !p.replicas.contains(r))
    {
        return Some(format!("reassigned replica {r} is not a replica"));
    }
    if let Some(r) = p.adding.iter().find(|r| p.removing.contains(r)) {
        return Some(format!("replica {r} both added and removed"));
    }
    let target = p.target();
    if p.replicas.get(..target.len()) != Some(target.as_slice()) {
        return Some(format!(
            "replicas {:?} do not list the target {target:?} first",
            p.replicas
        ));
    }
    if target.iter().all(|r| p.isr.contains(r)) && p.has_leader() && target.contains(&p.leader) {
        return Some(format!(
            "reassignment to {target:?} left in progress with all of it in the ISR {:?}",
            p.isr
        ));
    }
    None
}

/// Whether `sub` is `of` with some members left out, the rest in the same order (so,
/// when `of` names nobody twice, neither does `sub`).
fn is_subsequence(sub: &[i32], of: &[i32]) -> bool {
    let mut rest = of.iter();
    sub.iter().all(|s| rest.any(|o| o == s))
}

/// The effective `unclean.leader.election.enable` of a topic: its override, else the
/// cluster-wide broker config layer (""), else off (Kafka's default). Values were checked
/// when proposed; anything but "true" (in any case, as Kafka parses booleans) is off.
pub(crate) fn unclean_leader_election(
    topic_configs: &BTreeMap<String, String>,
    cluster_configs: Option<&BTreeMap<String, String>>,
) -> bool {
    let key = UNCLEAN_LEADER_ELECTION_ENABLE;
    topic_configs
        .get(key)
        .or_else(|| cluster_configs.and_then(|c| c.get(key)))
        .is_some_and(|v| v.trim().eq_ignore_ascii_case("true"))
}

#[derive(Debug, thiserror::Error, Clone, PartialEq, Eq)]
pub enum TopicNameError {
    #[error("topic name is empty")]
    Empty,
    #[error("topic name is longer than {TOPIC_NAME_LEN_MAX} characters")]
    TooLong,
    #[error("topic name '.' and '..' are reserved")]
    Reserved,
    #[error("topic name may contain only ASCII letters, digits, '.', '_' and '-'")]
    IllegalCharacter,
}

/// Kafka's topic name rules.
pub fn validate_topic_name(name: &str) -> Result<(), TopicNameError> {
    if name.is_empty() {
        return Err(TopicNameError::Empty);
    }
    if name.len() > TOPIC_NAME_LEN_MAX {
        return Err(TopicNameError::TooLong);
    }
    if name == "." || name == ".." {
        return Err(TopicNameError::Reserved);
    }
    if !name
        .bytes()
        .all(|b| b.is_ascii_alphanumeric() || b == b'.' || b == b'_' || b == b'-')
    {
        return Err(TopicNameError::IllegalCharacter);
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn registrations_of_earlier_releases_load_as_not_shutting_down() {
        let old = r#"{"id":1,"incarnation":"00000000-0000-0000-0000-000000000001","epoch":3,
            "endpoint":{"host":"h","port":1},"controller_addr":"h:2","rack":null,"fenced":false}"#;
        let b: BrokerRegistration = serde_json::from_str(old).unwrap();
        assert!(!b.shutting_down && b.is_active());
        assert_eq!(
            b.endpoint_on("ANY"),
            Some(("h", 1)),
            "a broker of an earlier release has one listener, whatever its name"
        );
    }

    #[test]
    fn a_broker_is_reached_on_the_listener_a_client_came_in_on() {
        let mut b: BrokerRegistration = serde_json::from_str(
            r#"{"id":1,"incarnation":"00000000-0000-0000-0000-000000000001","epoch":7,
            "endpoint":{"host":"10.0.0.1","port":9092},"controller_addr":"h:2","rack":null,
            "fenced":false}"#,
        )
        .unwrap();
        b.listeners = vec![
            ListenerEndpoint {
                name: "INTERNAL".into(),
                host: "10.0.0.1".into(),
                port: 9092,
            },
            ListenerEndpoint {
                name: "EXTERNAL".into(),
                host: "kafka.example".into(),
                port: 9094,
            },
        ];
        assert_eq!(b.endpoint_on("EXTERNAL"), Some(("kafka.example", 9094)));
        assert_eq!(b.endpoint_on("INTERNAL"), Some(("10.0.0.1", 9092)));
        assert_eq!(b.endpoint_on("OTHER"), None);
        let json = serde_json::to_string(&b).unwrap();
        let back: BrokerRegistration = serde_json::from_str(&json).unwrap();
        assert_eq!(back, b, "listeners survive the metadata log");
    }

    #[test]
    fn subsequences() {
        assert!(is_subsequence(&[1, 3], &[1, 2, 3]));
        assert!(is_subsequence(&[2], &[1, 2, 3]));
        assert!(!is_subsequence(&[3, 1], &[1, 2, 3]));
        assert!(!is_subsequence(&[1, 1], &[1, 2, 3]));
        assert!(!is_subsequence(&[4], &[1, 2, 3]));
    }

    #[test]
    fn unclean_election_is_the_topic_override_else_the_cluster_default_else_off() {
        let key = UNCLEAN_LEADER_ELECTION_ENABLE;
        let conf = |v: &str| BTreeMap::from([(key.to_string(), v.to_string())]);
        let none = BTreeMap::new();
        assert!(!unclean_leader_election(&none, None));
        assert!(!unclean_leader_election(&none, Some(&none)));
        assert!(unclean_leader_election(&none, Some(&conf("true"))));
        assert!(unclean_leader_election(&conf("TRUE"), None));
        assert!(!unclean_leader_election(
            &conf("false"),
            Some(&conf("true"))
        ));
        assert!(unclean_leader_election(&conf("true"), Some(&conf("false"))));
    }

    #[test]
    fn topic_names() {
        assert!(validate_topic_name("orders.v1_x-2").is_ok());
        assert_eq!(validate_topic_name(""), Err(TopicNameError::Empty));
        assert_eq!(validate_topic_name(".."), Err(TopicNameError::Reserved));
        assert_eq!(
            validate_topic_name("a/b"),
            Err(TopicNameError::IllegalCharacter)
        );
        assert_eq!(
            validate_topic_name(&"x".repeat(250)),
            Err(TopicNameError::TooLong)
        );
    }
}
