//! The domain form of group requests and their answers. The protocol edge decodes Kafka
//! requests into these (validated, version differences resolved) and encodes the answers;
//! the coordinator never sees wire types.

use bytes::Bytes;

/// Why a group operation failed; the edge maps each to its Kafka error code.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum GroupError {
    #[error("the group id is empty, or longer than a group record can hold")]
    InvalidGroupId,
    #[error("session timeout outside the broker's allowed range")]
    InvalidSessionTimeout,
    #[error("unknown member id")]
    UnknownMemberId,
    #[error("the member must rejoin with the member id it was given")]
    MemberIdRequired,
    #[error("generation does not match the group's")]
    IllegalGeneration,
    #[error("protocol type or protocols inconsistent with the group")]
    InconsistentGroupProtocol,
    #[error("the group is rebalancing")]
    RebalanceInProgress,
    #[error("the group still has members")]
    GroupNotEmpty,
    #[error("the group does not exist")]
    GroupIdNotFound,
    #[error("the topic is still subscribed by a member")]
    GroupSubscribedToTopic,
    #[error("a newer instance with the same group.instance.id is active")]
    FencedInstanceId,
    #[error("the group coordinator is loading or unavailable")]
    CoordinatorNotAvailable,
    #[error("this broker is not the group's coordinator")]
    NotCoordinator,
    #[error("unknown topic or partition")]
    UnknownTopicOrPartition,
    #[error("offset metadata too large")]
    OffsetMetadataTooLarge,
    #[error("the commit is larger than a record batch may be")]
    CommitTooLarge,
    #[error("storing group state failed: {0}")]
    Storage(String),
    /// An ACL refused the operation on the group (checked at the edge).
    #[error("group authorization failed")]
    AuthorizationFailed,
    /// A transactional commit from a producer epoch older than the one the offsets
    /// partition knows: the producer was fenced.
    #[error("the producer's epoch is older than its current one")]
    InvalidProducerEpoch,
    /// OffsetFetch with `require_stable`: the partition has an offset committed in a
    /// transaction that has not ended yet (KIP-447; the client retries).
    #[error("a transactional offset commit of the partition is pending")]
    UnstableOffsetCommit,
    /// TxnOffsetCommit from a producer whose transaction does not hold the group's
    /// offsets partition, as its coordinator answered the partition leader's check (or
    /// a marker ended the transaction while it was asked).
    #[error("the group's offsets partition is not in the producer's transaction")]
    InvalidTxnState,
    /// The same, told to a client that knows TRANSACTION_ABORTABLE (TxnOffsetCommit
    /// v4+): it aborts the transaction and goes on.
    #[error("the transaction must be aborted")]
    TransactionAbortable,
    /// The transaction coordinator knows no such producer for the transactional id.
    #[error("the producer id does not match the transactional id's")]
    InvalidProducerIdMapping,
    /// A string the group's records would carry is longer than their format allows
    /// (`int16` lengths): flexible requests can send one, and it cannot be stored.
    #[error("{0} is longer than a group record can hold")]
    TooLong(&'static str),
    /// A consumer-protocol request that breaks the protocol's rules (KIP-848), with
    /// Kafka's message for it.
    #[error("{0}")]
    InvalidRequest(String),
    /// The member's epoch is neither its current one nor, with a subset of its
    /// partitions, its previous one: it must give up its partitions and rejoin.
    #[error("the member epoch is fenced; the member must abandon its partitions and rejoin")]
    FencedMemberEpoch,
    /// A static member joins under a group.instance.id another member still holds.
    #[error("the instance id is still used by another member, which must leave first")]
    UnreleasedInstanceId,
    #[error("the server assignor {0} is not supported")]
    UnsupportedAssignor(String),
    #[error("the subscribed topic regex is not valid: {0}")]
    InvalidRegularExpression(String),
    #[error("the group has reached its maximum size")]
    GroupMaxSizeReached,
    /// A consumer-protocol member commits (or fetches) at an epoch other than its
    /// current one: it retries with the epoch its next heartbeat brings.
    #[error("the member epoch is stale")]
    StaleMemberEpoch,
}

/// A protocol a member supports (e.g. "range", "cooperative-sticky") with its metadata.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Protocol {
    pub name: String,
    pub metadata: Bytes,
}

#[derive(Debug, Clone)]
pub struct JoinRequest {
    pub group: String,
    /// Empty for a first join.
    pub member_id: String,
    pub group_instance_id: Option<String>,
    pub client_id: String,
    pub client_host: String,
    pub session_timeout_ms: i32,
    pub rebalance_timeout_ms: i32,
    pub protocol_type: String,
    pub protocols: Vec<Protocol>,
    /// KIP-394 (JoinGroup v4+): a first join gets MEMBER_ID_REQUIRED and a member id.
    pub require_known_member_id: bool,
}

#[derive(Debug, Clone)]
pub struct JoinMember {
    pub member_id: String,
    pub group_instance_id: Option<String>,
    pub metadata: Bytes,
}

#[derive(Debug, Clone)]
pub struct JoinAnswer {
    pub error: Option<GroupError>,
    /// KIP-814: the (static) leader rejoined a stable group and must not reassign.
    pub skip_assignment: bool,
    pub generation: i32,
    pub protocol_type: Option<String>,
    pub protocol_name: Option<String>,
    pub leader: String,
    pub member_id: String,
    /// Filled for the leader only.
    pub members: Vec<JoinMember>,
}

impl JoinAnswer {
    pub fn error(e: GroupError, member_id: String) -> JoinAnswer {
        JoinAnswer {
            error: Some(e),
            skip_assignment: false,
            generation: -1,
            protocol_type: None,
            protocol_name: None,
            leader: String::new(),
            member_id,
            members: Vec::new(),
        }
    }
}

#[derive(Debug, Clone)]
pub struct SyncRequest {
    pub group: String,
    pub generation: i32,
    pub member_id: String,
    pub group_instance_id: Option<String>,
    pub protocol_type: Option<String>,
    pub protocol_name: Option<String>,
    /// (member id, assignment), from the leader.
    pub assignments: Vec<(String, Bytes)>,
}

#[derive(Debug, Clone)]
pub struct SyncAnswer {
    pub error: Option<GroupError>,
    pub protocol_type: Option<String>,
    pub protocol_name: Option<String>,
    pub assignment: Bytes,
}

impl SyncAnswer {
    pub fn error(e: GroupError) -> SyncAnswer {
        SyncAnswer {
            error: Some(e),
            protocol_type: None,
            protocol_name: None,
            assignment: Bytes::new(),
        }
    }
}

#[derive(Debug, Clone)]
pub struct HeartbeatRequest {
    pub group: String,
    pub generation: i32,
    pub member_id: String,
    pub group_instance_id: Option<String>,
}

#[derive(Debug, Clone)]
pub struct LeavingMember {
    pub member_id: String,
    pub group_instance_id: Option<String>,
}

#[derive(Debug, Clone)]
pub struct CommitRequest {
    pub group: String,
    /// -1 for a commit from outside the group protocol (assign() consumers, admin).
    pub generation: i32,
    pub member_id: String,
    pub group_instance_id: Option<String>,
    /// (topic, partition, offset, leader epoch, metadata)
    pub offsets: Vec<(String, i32, i64, i32, String)>,
}

/// A TxnOffsetCommit: offsets committed in producer `producer_id`'s transaction,
/// pending until the transaction's marker in the group's `__consumer_offsets` partition.
#[derive(Debug, Clone)]
pub struct TxnCommitRequest {
    pub group: String,
    pub transactional_id: String,
    pub producer_id: i64,
    pub producer_epoch: i16,
    /// -1 when not given (TxnOffsetCommit v0–v2 carry no member fields).
    pub generation: i32,
    /// Empty when not given.
    pub member_id: String,
    pub group_instance_id: Option<String>,
    /// (topic, partition, offset, leader epoch, metadata)
    pub offsets: Vec<(String, i32, i64, i32, String)>,
    /// The TxnOffsetCommit version: how the offsets partition's leader checks the
    /// transaction with its coordinator first (v5+: adds the partition to it).
    pub version: i16,
}

/// A committed offset.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Committed {
    pub offset: i64,
    pub leader_epoch: i32,
    pub metadata: String,
    pub commit_timestamp_ms: i64,
    /// Offset of the `__consumer_offsets` record that committed it. Of two commits of
    /// one partition the later record wins, whatever order they are applied in (Kafka's
    /// rule for a mix of regular and transactional commits).
    pub record_offset: i64,
}

/// One partition of an OffsetFetch answer: its committed offset (`None`: none), or why
/// it is not told (UNSTABLE_OFFSET_COMMIT).
pub type OffsetRow = (String, i32, Result<Option<Committed>, GroupError>);

#[derive(Debug, Clone)]
pub struct DescribedMember {
    pub member_id: String,
    pub group_instance_id: Option<String>,
    pub client_id: String,
    pub client_host: String,
    pub metadata: Bytes,
    pub assignment: Bytes,
}

#[derive(Debug, Clone)]
pub struct GroupDescription {
    pub group: String,
    /// Kafka's state names: Empty, PreparingRebalance, CompletingRebalance, Stable, Dead.
    pub state: &'static str,
    pub protocol_type: String,
    pub protocol: String,
    pub members: Vec<DescribedMember>,
}

#[derive(Debug, Clone)]
pub struct GroupListing {
    pub group: String,
    pub protocol_type: String,
    pub state: &'static str,
    /// Kafka's group type (ListGroups v5): "classic" or "consumer".
    pub group_type: &'static str,
}

/// One group operation, sent to the coordinator shard.
#[derive(Debug, Clone)]
pub enum GroupOp {
    Join(JoinRequest),
    Sync(SyncRequest),
    Heartbeat(HeartbeatRequest),
    Leave {
        group: String,
        members: Vec<LeavingMember>,
    },
    Commit(CommitRequest),
    TxnCommit(TxnCommitRequest),
    /// `None` topics: every committed offset of the group. `require_stable` (KIP-447):
    /// a partition with a pending transactional commit is UNSTABLE_OFFSET_COMMIT.
    FetchOffsets {
        group: String,
        topics: Option<Vec<(String, Vec<i32>)>>,
        require_stable: bool,
        /// OffsetFetch v9 (KIP-848): the member fetching, with its epoch, checked
        /// against a consumer-protocol group's member; `None` from an admin client.
        member: Option<(String, i32)>,
    },
    Describe {
        group: String,
    },
    List,
    Delete {
        group: String,
    },
    DeleteOffsets {
        group: String,
        partitions: Vec<(String, i32)>,
    },
    /// ConsumerGroupDescribe (KIP-848): GROUP_ID_NOT_FOUND for a group that is not a
    /// consumer-protocol group.
    ConsumerDescribe {
        group: String,
    },
    /// ConsumerGroupHeartbeat (KIP-848): served with the cluster's topics at hand, so
    /// the shard routes it to [`crate::group::coordinator::GroupCoordinator::consumer_heartbeat`].
    ConsumerHeartbeat {
        group: String,
        heartbeat: crate::group::consumer::group::Heartbeat,
    },
    /// ShareGroupHeartbeat (KIP-932).
    ShareHeartbeat {
        group: String,
        heartbeat: crate::group::share::group::ShareHeartbeat,
    },
    /// ShareGroupDescribe (KIP-932): GROUP_ID_NOT_FOUND for a group that is not a
    /// share group.
    ShareDescribe {
        group: String,
    },
    /// What the share-group administration needs of a share group: whether it is empty,
    /// its epoch, and the share partitions whose state it may have.
    ShareScope {
        group: String,
    },
    /// Records share partitions whose state was reset (`add`; a group not there yet is
    /// made, empty) or deleted (`forget`, by topic id), for an empty share group
    /// (NON_EMPTY_GROUP otherwise).
    ShareStatePartitions {
        group: String,
        add: Vec<crate::group::share::records::TopicPartitions>,
        forget: Vec<uuid::Uuid>,
    },
}

/// A share group as its administration sees it ([`GroupOp::ShareScope`]).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ShareScope {
    pub empty: bool,
    pub epoch: i32,
    pub partitions: Vec<crate::group::share::records::TopicPartitions>,
}

impl GroupOp {
    /// The group the operation is about; `None` for a listing of every group.
    pub fn group(&self) -> Option<&str> {
        match self {
            GroupOp::Join(r) => Some(&r.group),
            GroupOp::Sync(r) => Some(&r.group),
            GroupOp::Heartbeat(r) => Some(&r.group),
            GroupOp::Commit(r) => Some(&r.group),
            GroupOp::TxnCommit(r) => Some(&r.group),
            GroupOp::Leave { group, .. }
            | GroupOp::FetchOffsets { group, .. }
            | GroupOp::Describe { group }
            | GroupOp::Delete { group }
            | GroupOp::DeleteOffsets { group, .. }
            | GroupOp::ConsumerHeartbeat { group, .. }
            | GroupOp::ConsumerDescribe { group }
            | GroupOp::ShareHeartbeat { group, .. }
            | GroupOp::ShareDescribe { group }
            | GroupOp::ShareScope { group }
            | GroupOp::ShareStatePartitions { group, .. } => Some(group),
            GroupOp::List => None,
        }
    }

    /// Whether every string this operation may write into `__consumer_offsets` fits
    /// the records' `int16` lengths (`offsets_record::MAX_STRING_LEN`): a group id that
    /// does not is INVALID_GROUP_ID, any other field `TooLong`. A member id the
    /// coordinator makes for a first join is the client id and
    /// `GENERATED_MEMBER_ID_SUFFIX_LEN` more characters.
    pub fn check_storable(&self) -> Result<(), GroupError> {
        use crate::group::offsets_record::MAX_STRING_LEN;
        use crate::group::state::GENERATED_MEMBER_ID_SUFFIX_LEN;
        let fits = |s: &str| s.len() <= MAX_STRING_LEN;
        let fits_opt = |s: &Option<String>| s.as_deref().is_none_or(fits);
        if !self.group().is_none_or(fits) {
            return Err(GroupError::InvalidGroupId);
        }
        let too_long = |field| Err(GroupError::TooLong(field));
        match self {
            GroupOp::Join(r) => {
                if !fits(&r.member_id) || !fits_opt(&r.group_instance_id) {
                    return too_long("a member id");
                }
                if r.client_id.len() + GENERATED_MEMBER_ID_SUFFIX_LEN > MAX_STRING_LEN
                    || !fits(&r.client_host)
                {
                    return too_long("the client id");
                }
                if !fits(&r.protocol_type) || !r.protocols.iter().all(|p| fits(&p.name)) {
                    return too_long("a protocol name");
                }
            }
            GroupOp::ConsumerHeartbeat { heartbeat: h, .. } => {
                if !fits(&h.member_id) || !fits_opt(&h.instance_id) || !fits_opt(&h.rack_id) {
                    return too_long("a member id");
                }
                if !fits(&h.client_id) || !fits(&h.client_host) {
                    return too_long("the client id");
                }
                if !fits_opt(&h.server_assignor) || !fits_opt(&h.subscribed_topic_regex) {
                    return too_long("an assignor name or topic pattern");
                }
                if !h.subscribed_topic_names.iter().flatten().all(|t| fits(t)) {
                    return too_long("a topic name");
                }
            }
            GroupOp::ShareHeartbeat { heartbeat: h, .. } => {
                if !fits(&h.member_id) || !fits_opt(&h.rack_id) {
                    return too_long("a member id");
                }
                if !fits(&h.client_id) || !fits(&h.client_host) {
                    return too_long("the client id");
                }
                if !h.subscribed_topic_names.iter().flatten().all(|t| fits(t)) {
                    return too_long("a topic name");
                }
            }
            GroupOp::Commit(CommitRequest { offsets, .. })
            | GroupOp::TxnCommit(TxnCommitRequest { offsets, .. })
                if !offsets.iter().all(|(topic, ..)| fits(topic)) =>
            {
                return too_long("a topic name");
            }
            _ => {}
        }
        Ok(())
    }
}

#[derive(Debug, Clone)]
pub enum GroupAnswer {
    Join(JoinAnswer),
    Sync(SyncAnswer),
    Done(Result<(), GroupError>),
    /// Per member, in request order.
    Leave(Result<Vec<Result<(), GroupError>>, GroupError>),
    /// Per offset, in request order (OffsetCommit and TxnOffsetCommit).
    Commit(Vec<Result<(), GroupError>>),
    Offsets(Result<Vec<OffsetRow>, GroupError>),
    Described(GroupDescription),
    Listed(Vec<GroupListing>),
    /// Per partition, in request order.
    OffsetsDeleted(Result<Vec<Result<(), GroupError>>, GroupError>),
    ConsumerHeartbeat(Result<crate::group::consumer::group::HeartbeatAnswer, GroupError>),
    ConsumerDescribed(Result<crate::group::consumer::group::ConsumerGroupDescription, GroupError>),
    ShareHeartbeat(Result<crate::group::share::group::ShareHeartbeatAnswer, GroupError>),
    ShareDescribed(Result<crate::group::share::group::ShareGroupDescription, GroupError>),
    ShareScope(Result<ShareScope, GroupError>),
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::group::offsets_record::MAX_STRING_LEN;

    fn join(client_id_len: usize, instance_id_len: usize) -> GroupOp {
        GroupOp::Join(JoinRequest {
            group: "g".into(),
            member_id: String::new(),
            group_instance_id: Some("i".repeat(instance_id_len)),
            client_id: "c".repeat(client_id_len),
            client_host: "/127.0.0.1".into(),
            session_timeout_ms: 10_000,
            rebalance_timeout_ms: 10_000,
            protocol_type: "consumer".into(),
            protocols: vec![Protocol {
                name: "range".into(),
                metadata: Bytes::new(),
            }],
            require_known_member_id: true,
        })
    }

    /// The member id a first join is given (the client id, a dash and a UUID) must fit
    /// the group record as much as the strings the client sent.
    #[test]
    fn a_join_is_refused_when_a_string_it_would_store_cannot_be_stored() {
        assert_eq!(join(MAX_STRING_LEN - 37, 1).check_storable(), Ok(()));
        assert_eq!(
            join(MAX_STRING_LEN - 36, 1).check_storable(),
            Err(GroupError::TooLong("the client id"))
        );
        assert_eq!(join(1, MAX_STRING_LEN).check_storable(), Ok(()));
        assert_eq!(
            join(1, MAX_STRING_LEN + 1).check_storable(),
            Err(GroupError::TooLong("a member id"))
        );
        let long_group = GroupOp::FetchOffsets {
            group: "g".repeat(MAX_STRING_LEN + 1),
            topics: None,
            require_stable: false,
            member: None,
        };
        assert_eq!(long_group.check_storable(), Err(GroupError::InvalidGroupId));
    }
}
