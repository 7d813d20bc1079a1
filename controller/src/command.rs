//! The metadata log's commands and what applying one answers.
//!
//! A command carries everything its effect depends on — ids, the configs it sets, the
//! seed of its replica placement — so applying it reads nothing but the image and the
//! command and gives the same result on every node. Whoever proposes a command has
//! validated what only it can (config values against the broker's defaults, quota
//! values); applying checks everything that depends on the image (existence, liveness,
//! epochs, bounds), because the image at apply time is the only one that counts.

use crate::client_quotas::QuotaAlteration;
use crate::image::{Endpoint, ListenerEndpoint, MovedReplicas};
use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;
use uuid::Uuid;

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub enum Command {
    /// The cluster's id, proposed by the first leader; ignored once one is set.
    InitCluster {
        cluster_id: String,
        /// The levels the new cluster is finalized at (the first leader's configuration);
        /// absent from logs of releases before feature levels.
        #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
        features: crate::features::FeatureLevels,
    },
    /// A broker (re)starting: a new incarnation replaces the old registration and starts
    /// fenced; the same incarnation again (a retried request) changes nothing.
    RegisterBroker {
        id: i32,
        incarnation: Uuid,
        endpoint: Endpoint,
        /// Absent from logs of earlier releases (one listener: `endpoint`).
        #[serde(default, skip_serializing_if = "Vec::is_empty")]
        listeners: Vec<ListenerEndpoint>,
        controller_addr: String,
        rack: Option<String>,
        /// The feature levels its release supports; absent from releases before feature
        /// levels.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        supported_features: Option<crate::features::FeatureRanges>,
        /// The ids of its log directories (KIP-858); absent from releases before
        /// directory ids.
        #[serde(default, skip_serializing_if = "Vec::is_empty")]
        log_dirs: Vec<Uuid>,
    },
    /// Where a broker's replicas live (KIP-858's AssignReplicasToDirs): one result per
    /// assignment, each applied on its own.
    AssignReplicasToDirs {
        broker: i32,
        /// Its registration's epoch: a request of an earlier incarnation is stale.
        broker_epoch: u64,
        assignments: Vec<DirAssignment>,
    },
    /// Log directories of a broker failed (Kafka's heartbeat `OfflineLogDirs`): the
    /// partitions they hold are led by, and in the ISR of, other replicas until the
    /// broker registers again.
    LogDirsOffline {
        broker: i32,
        broker_epoch: u64,
        dirs: Vec<Uuid>,
    },
    /// The broker missed its heartbeats: it leads nothing until unfenced.
    FenceBroker {
        id: i32,
        epoch: u64,
    },
    /// The broker has caught up with the log: it may lead again. Refused for a
    /// registration that is shutting down: only a new registration comes back.
    UnfenceBroker {
        id: i32,
        epoch: u64,
    },
    /// The broker is stopping (it got SIGTERM), Kafka's controlled shutdown: its
    /// registration is marked shutting down and fenced, so every partition it leads
    /// moves to another ISR member and it leaves every ISR it is not the last member of.
    /// It stays fenced, and is never elected, until it registers again (a restart is a
    /// new incarnation, which starts afresh).
    ControlledShutdown {
        id: i32,
        epoch: u64,
    },
    /// A partition leader shrinking or expanding its partitions' ISRs (Kafka's
    /// AlterPartition): one result per change, in order; each is applied on its own.
    AlterPartition {
        broker: i32,
        /// The leader's registration epoch: a request of an earlier incarnation is stale.
        broker_epoch: u64,
        changes: Vec<IsrChange>,
    },
    CreateTopics {
        topics: Vec<NewTopic>,
    },
    /// Kafka's AlterPartitionReassignments: one result per item, each applied on its own.
    AlterPartitionReassignments {
        items: Vec<ReassignmentItem>,
    },
    /// Kafka's ElectLeaders: one result per partition, each elected on its own.
    ElectLeaders {
        election: Election,
        partitions: Vec<(String, i32)>,
    },
    DeleteTopics {
        names: Vec<String>,
    },
    CreatePartitions {
        topics: Vec<NewPartitions>,
    },
    /// Replaces topics' overrides, each only if they still are `from` (the overrides the
    /// change was computed from), so two concurrent changes cannot lose one another.
    SetTopicConfigs {
        changes: Vec<ConfigChange>,
    },
    /// The same for one dynamic broker config layer ("" cluster-wide, "<id>" a broker).
    SetBrokerConfigs {
        change: ConfigChange,
    },
    /// The same for one group's configs (a GROUP config resource, Kafka 4's group
    /// configs: `consumer.session.timeout.ms`, ...), named by the group id.
    SetGroupConfigs {
        change: ConfigChange,
    },
    /// The balancer marks (`add`) or unmarks its moves: per topic, the throttled-replica
    /// lists change as `change` says (refused if the configs are no longer its `from`)
    /// and the topic's record of the balancer's moves gains or loses `moves`, so a
    /// controller that takes over knows which marks are the balancer's to take off.
    MarkBalancerMoves {
        add: bool,
        topics: Vec<BalancerMarks>,
    },
    AlterClientQuotas {
        alterations: Vec<QuotaAlteration>,
    },
    /// SCRAM credentials removed, then set (AlterUserScramCredentials, KIP-554).
    AlterScramCredentials {
        deletions: Vec<(String, crate::scram::ScramMechanism)>,
        upsertions: Vec<crate::scram::ScramUpsertion>,
    },
    /// ACLs added (CreateAcls; validated at the edge, one result each).
    CreateAcls {
        bindings: Vec<crate::acl::AclBinding>,
    },
    /// ACLs removed (DeleteAcls): what each filter selects in the image it is applied
    /// to, reported per filter (`Outcome::DeletedAcls`).
    DeleteAcls {
        filters: Vec<crate::acl::AclFilter>,
    },
    /// The next block of `PRODUCER_ID_BLOCK` producer ids, for a registered broker.
    AllocateProducerIds {
        broker: i32,
        epoch: u64,
    },
    /// Kafka's UpdateFeatures: the finalized feature levels change as `updates` say, all
    /// or none (`features::update`). `legacy` are the proposer's configured levels, the
    /// starting point where the cluster has finalized none yet.
    UpdateFeatures {
        updates: Vec<crate::features::FeatureUpdate>,
        legacy: crate::features::FeatureLevels,
    },
    /// The metadata a single node of an earlier release kept in its data directory,
    /// carried into a cluster that has no topic yet: every topic on that node, each
    /// partition led in the epoch after the one it had.
    ImportSingleNode(SingleNodeMetadata),
}

/// One partition's new ISR, computed by its leader from the state it names: applied only
/// if the partition is still in that state (same leader epoch and partition epoch), so a
/// change computed from an older state can never undo a newer one.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct IsrChange {
    pub topic_id: Uuid,
    pub partition: i32,
    pub leader_epoch: i32,
    pub partition_epoch: i32,
    /// The ISR proposed; stored in assignment order whatever order it comes in.
    pub isr: Vec<i32>,
}

/// One replica's directory in an `AssignReplicasToDirs`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct DirAssignment {
    pub topic_id: Uuid,
    pub partition: i32,
    pub dir: Uuid,
}

/// Which leader an `ElectLeaders` asks for (Kafka's `ElectionType`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub enum Election {
    /// The preferred replica (the first of the assignment), if it is a live ISR member.
    Preferred,
    /// For a partition without a leader: the first live ISR member, else the first live
    /// replica (losing what only the ISR held), whatever the topic's setting.
    Unclean,
}

/// One partition of an `AlterPartitionReassignments`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ReassignmentItem {
    pub topic: String,
    pub partition: i32,
    /// The replicas to move to, in preference order; `None` cancels the reassignment in
    /// progress.
    pub target: Option<Vec<i32>>,
    /// Refuse a target with another number of replicas than the partition has (KIP-860,
    /// AlterPartitionReassignments v1 with `allowReplicationFactorChange` false).
    #[serde(default)]
    pub keep_replication_factor: bool,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct SingleNodeMetadata {
    /// The node that held every partition (a live broker of this cluster).
    pub broker: i32,
    pub topics: Vec<SingleNodeTopic>,
    pub next_producer_id: i64,
    pub client_quotas: crate::client_quotas::ClientQuotas,
    pub broker_configs: BTreeMap<String, BTreeMap<String, String>>,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct SingleNodeTopic {
    pub name: String,
    pub id: Uuid,
    pub partitions: i32,
    pub configs: BTreeMap<String, String>,
    /// The epoch its partitions were last led in.
    pub leader_epoch: i32,
}

/// Producer ids handed out at a time (Kafka's block size).
pub const PRODUCER_ID_BLOCK: i64 = 1000;
/// Upper bound on partitions per topic, so one command cannot open unbounded files.
pub const PARTITIONS_PER_TOPIC_MAX: i32 = 10_000;
pub use crate::image::UNCLEAN_LEADER_ELECTION_ENABLE;

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct NewTopic {
    pub name: String,
    /// Chosen by the proposer (random); applying refuses an id already in use.
    pub id: Uuid,
    pub partitions: i32,
    pub replication_factor: i32,
    /// Explicit replica lists, one per partition (CreateTopics' assignments); placed by
    /// `placement` when absent.
    pub assignments: Option<Vec<Vec<i32>>>,
    pub configs: BTreeMap<String, String>,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct NewPartitions {
    pub topic: String,
    /// The new total.
    pub count: i32,
    pub assignments: Option<Vec<Vec<i32>>>,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ConfigChange {
    /// Topic name, or broker config resource.
    pub name: String,
    pub from: BTreeMap<String, String>,
    pub to: BTreeMap<String, String>,
}

/// One topic's part of a [`Command::MarkBalancerMoves`].
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct BalancerMarks {
    pub change: ConfigChange,
    pub moves: BTreeMap<i32, MovedReplicas>,
}

/// Why a command (or one item of it) was not applied. The broker maps each to a Kafka
/// error code at its edge.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error, Serialize, Deserialize)]
pub enum CommandError {
    #[error("topic already exists")]
    TopicAlreadyExists,
    #[error("unknown topic")]
    UnknownTopic,
    #[error("invalid topic name: {0}")]
    InvalidTopicName(String),
    #[error("{0}")]
    InvalidPartitions(String),
    #[error("{0}")]
    InvalidReplicationFactor(String),
    #[error("{0}")]
    InvalidReplicaAssignment(String),
    #[error("{0}")]
    InvalidConfig(String),
    /// The state the change was computed from has changed meanwhile: compute it again.
    #[error("changed concurrently; retry")]
    Conflict,
    /// Also: the broker is fenced (a fenced broker proposes nothing on its partitions).
    #[error("broker {0} is not registered in that epoch")]
    StaleBrokerEpoch(i32),
    #[error("unknown topic id")]
    UnknownTopicId,
    #[error("unknown topic or partition")]
    UnknownTopicOrPartition,
    /// The proposer does not lead the partition.
    #[error("not the leader of the partition")]
    NotLeaderOrFollower,
    /// The proposer's leader epoch is not the partition's.
    #[error("fenced leader epoch")]
    FencedLeaderEpoch,
    /// The partition changed since the proposer read it (its partition epoch moved on).
    #[error("the partition epoch is not the current one")]
    InvalidUpdateVersion,
    /// The broker may not join the ISR: not registered, fenced or shutting down.
    #[error("broker {0} is not eligible to join the ISR")]
    IneligibleReplica(i32),
    #[error("{0}")]
    PolicyViolation(String),
    /// A feature update refused (Kafka's INVALID_UPDATE_VERSION), in Kafka's words.
    #[error("{0}")]
    InvalidFeatureUpdate(String),
    /// A broker whose release cannot serve the cluster's finalized feature levels.
    #[error("{0}")]
    UnsupportedFeatures(String),
    /// A cancel of a partition that is not being reassigned.
    #[error("no reassignment is in progress for the partition")]
    NoReassignmentInProgress,
    /// ElectLeaders: the partition already has the leader asked for.
    #[error("the partition already has the leader this election would give it")]
    ElectionNotNeeded,
    /// ElectLeaders (preferred): the preferred replica is not a live ISR member.
    #[error("the preferred replica {0} is not a live member of the ISR")]
    PreferredLeaderNotAvailable(i32),
    /// ElectLeaders (unclean): no replica of the partition is live.
    #[error("no replica of the partition is live")]
    EligibleLeadersNotAvailable,
    /// A directory that is not one of the broker's online log directories.
    #[error("log directory {0} is not one of the broker's online log directories")]
    LogDirNotFound(Uuid),
    #[error("{0}")]
    Invalid(String),
}

/// What applying a command answers.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub enum Outcome {
    /// A command with one result.
    Done(Result<(), CommandError>),
    /// A command of several items: one result each, in order.
    Items(Vec<Result<(), CommandError>>),
    /// `DeleteAcls`: per filter, the ACLs it removed.
    DeletedAcls(Vec<Vec<crate::acl::AclBinding>>),
    /// `AllocateProducerIds`: the first id of the block.
    ProducerIds(Result<i64, CommandError>),
    /// Openraft's own entries (blank, membership) answer nothing.
    None,
}
