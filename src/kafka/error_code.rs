//! The only mapping from corelog's typed errors to Kafka error codes.
//!
//! Every match is exhaustive with no catch-all arm, so a new internal error cannot reach
//! a client without someone deciding its code. The choice of code drives client state
//! machines: retriable codes make clients retry, fatal ones surface to the application,
//! so a wrong one either hangs a client in retries or kills it.

use corelog_shards::group::types::GroupError;
use corelog_shards::mesh::{EpochError, PartitionError, TopicError};
use corelog_shards::txn::rules::TxnError;
use corelog_storage::batch::BatchError;
use corelog_storage::producer_state::SequenceError;
use corelog_storage::{AppendError, ReadError, RecordRule};
use kafka_protocol::messages::ApiKey;
use kafka_protocol::ResponseError;

pub fn batch(e: &BatchError) -> ResponseError {
    match e {
        BatchError::TooLarge { .. } => ResponseError::MessageTooLarge,
        BatchError::InvalidRecordCount | BatchError::InvalidRecord(_) => {
            ResponseError::InvalidRecord
        }
        BatchError::UnsupportedMagic(_) | BatchError::NewerMagic(_) => ResponseError::InvalidRecord,
        BatchError::TooShort
        | BatchError::InvalidLength
        | BatchError::Truncated
        | BatchError::CorruptCrc { .. }
        | BatchError::UnsupportedCompression(_) => ResponseError::CorruptMessage,
    }
}

pub fn partition(e: &PartitionError) -> ResponseError {
    match e {
        PartitionError::UnknownTopicOrPartition => ResponseError::UnknownTopicOrPartition,
        PartitionError::Append(a) => match a {
            AppendError::InvalidBatch(b) => batch(b),
            AppendError::Empty => ResponseError::CorruptMessage,
            AppendError::Storage(_) => ResponseError::KafkaStorageError,
            // The partition is moving or closing: clients refresh metadata and retry.
            AppendError::Closed => ResponseError::NotLeaderOrFollower,
            AppendError::RecordsRejected(r) => match r.rule {
                RecordRule::KeyRequired => ResponseError::InvalidRecord,
                RecordRule::TimestampOutOfRange => ResponseError::InvalidTimestamp,
            },
            AppendError::Sequence(SequenceError::OutOfOrder { .. }) => {
                ResponseError::OutOfOrderSequenceNumber
            }
            AppendError::Sequence(SequenceError::StaleEpoch { .. }) => {
                ResponseError::InvalidProducerEpoch
            }
            // A producer in a transaction wrote outside it.
            AppendError::Sequence(SequenceError::TxnOpen { .. }) => ResponseError::InvalidTxnState,
            // A marker from a coordinator that has since been replaced.
            AppendError::Sequence(SequenceError::CoordinatorFenced { .. }) => {
                ResponseError::TransactionCoordinatorFenced
            }
            // Only a follower's append of its leader's batches can fail so; no client
            // request reaches it.
            AppendError::OffsetMismatch { .. } => ResponseError::UnknownServerError,
        },
        PartitionError::Read(r) => match r {
            ReadError::OffsetOutOfRange { .. } => ResponseError::OffsetOutOfRange,
            ReadError::Storage(_) => ResponseError::KafkaStorageError,
            ReadError::Corrupt { .. } => ResponseError::KafkaStorageError,
        },
        PartitionError::Timeout => ResponseError::RequestTimedOut,
        PartitionError::ShuttingDown => ResponseError::NotLeaderOrFollower,
        // Retriable: producers back off and retry until retention frees space.
        PartitionError::DiskFull(_) => ResponseError::KafkaStorageError,
        PartitionError::NotEnoughReplicas { .. } => ResponseError::NotEnoughReplicas,
        PartitionError::NotEnoughReplicasAfterAppend => ResponseError::NotEnoughReplicasAfterAppend,
        PartitionError::NotLeaderOrFollower => ResponseError::NotLeaderOrFollower,
        PartitionError::ReplicaNotAvailable => ResponseError::ReplicaNotAvailable,
        PartitionError::Epoch(EpochError::Fenced { .. }) => ResponseError::FencedLeaderEpoch,
        PartitionError::Epoch(EpochError::Unknown { .. }) => ResponseError::UnknownLeaderEpoch,
        // A coordinator that cannot answer yet is no reason for the producer to look for
        // another leader: NOT_ENOUGH_REPLICAS, retriable for every producer, as Kafka's
        // leader answers.
        PartitionError::Unverified(
            TxnError::CoordinatorLoadInProgress
            | TxnError::CoordinatorNotAvailable
            | TxnError::NotCoordinator
            | TxnError::ConcurrentTransactions,
        ) => ResponseError::NotEnoughReplicas,
        PartitionError::Unverified(e) => txn(*e),
    }
}

/// A partition request this broker does not serve.
pub fn not_served(e: &corelog_shards::metadata::NotServed) -> ResponseError {
    match e {
        corelog_shards::metadata::NotServed::UnknownTopicOrPartition => {
            ResponseError::UnknownTopicOrPartition
        }
        corelog_shards::metadata::NotServed::NotLeader { .. } => ResponseError::NotLeaderOrFollower,
    }
}

pub fn topic(e: &TopicError) -> ResponseError {
    match e {
        TopicError::AlreadyExists => ResponseError::TopicAlreadyExists,
        TopicError::Unknown => ResponseError::UnknownTopicOrPartition,
        TopicError::InvalidName(_) => ResponseError::InvalidTopicException,
        TopicError::InvalidPartitions(_) => ResponseError::InvalidPartitions,
        TopicError::InvalidConfig(_) => ResponseError::InvalidConfig,
        TopicError::InvalidReplicationFactor(_) => ResponseError::InvalidReplicationFactor,
        TopicError::InvalidReplicaAssignment(_) => ResponseError::InvalidReplicaAssignment,
        TopicError::Duplicate => ResponseError::InvalidRequest,
        TopicError::Storage(_) => ResponseError::KafkaStorageError,
        TopicError::PolicyViolation(_) => ResponseError::PolicyViolation,
        // Retried inside the broker; should one still come out, the client retries.
        TopicError::Conflict | TopicError::NotController(_) => ResponseError::NotController,
        TopicError::Timeout(_) => ResponseError::RequestTimedOut,
        TopicError::NoReassignmentInProgress => ResponseError::NoReassignmentInProgress,
        TopicError::ElectionNotNeeded => ResponseError::ElectionNotNeeded,
        TopicError::PreferredLeaderNotAvailable(_) => ResponseError::PreferredLeaderNotAvailable,
        TopicError::EligibleLeadersNotAvailable => ResponseError::EligibleLeadersNotAvailable,
        TopicError::Invalid(_) => ResponseError::InvalidRequest,
        TopicError::InvalidFeatureUpdate(_) => ResponseError::InvalidUpdateVersion,
        TopicError::Unauthorized => ResponseError::TopicAuthorizationFailed,
    }
}

/// Counts a returned error code in the shard's metrics (0, success, is not counted).
pub fn count(api: ApiKey, code: i16) {
    if code != 0 {
        corelog_metrics::record_error(api as i16, code);
    }
}

/// A transaction coordinator's refusal (its typed errors name Kafka's codes one to one).
pub fn txn(e: TxnError) -> ResponseError {
    match e {
        TxnError::UnknownServerError => ResponseError::UnknownServerError,
        TxnError::CoordinatorLoadInProgress => ResponseError::CoordinatorLoadInProgress,
        TxnError::CoordinatorNotAvailable => ResponseError::CoordinatorNotAvailable,
        TxnError::NotCoordinator => ResponseError::NotCoordinator,
        TxnError::InvalidRequest => ResponseError::InvalidRequest,
        TxnError::InvalidProducerEpoch => ResponseError::InvalidProducerEpoch,
        TxnError::InvalidTxnState => ResponseError::InvalidTxnState,
        TxnError::InvalidProducerIdMapping => ResponseError::InvalidProducerIdMapping,
        TxnError::InvalidTransactionTimeout => ResponseError::InvalidTransactionTimeout,
        TxnError::ConcurrentTransactions => ResponseError::ConcurrentTransactions,
        TxnError::OperationNotAttempted => ResponseError::OperationNotAttempted,
        TxnError::ProducerFenced => ResponseError::ProducerFenced,
        TxnError::TransactionalIdNotFound => ResponseError::TransactionalIdNotFound,
        TxnError::TransactionAbortable => ResponseError::TransactionAbortable,
    }
}

pub fn group(e: &GroupError) -> ResponseError {
    match e {
        GroupError::InvalidGroupId => ResponseError::InvalidGroupId,
        GroupError::InvalidSessionTimeout => ResponseError::InvalidSessionTimeout,
        GroupError::UnknownMemberId => ResponseError::UnknownMemberId,
        GroupError::MemberIdRequired => ResponseError::MemberIdRequired,
        GroupError::IllegalGeneration => ResponseError::IllegalGeneration,
        GroupError::InconsistentGroupProtocol => ResponseError::InconsistentGroupProtocol,
        GroupError::RebalanceInProgress => ResponseError::RebalanceInProgress,
        GroupError::GroupNotEmpty => ResponseError::NonEmptyGroup,
        GroupError::GroupIdNotFound => ResponseError::GroupIdNotFound,
        GroupError::GroupSubscribedToTopic => ResponseError::GroupSubscribedToTopic,
        GroupError::FencedInstanceId => ResponseError::FencedInstanceId,
        GroupError::CoordinatorNotAvailable => ResponseError::CoordinatorNotAvailable,
        GroupError::NotCoordinator => ResponseError::NotCoordinator,
        GroupError::UnknownTopicOrPartition => ResponseError::UnknownTopicOrPartition,
        GroupError::OffsetMetadataTooLarge => ResponseError::OffsetMetadataTooLarge,
        GroupError::CommitTooLarge => ResponseError::InvalidCommitOffsetSize,
        // A failed write of group state: retriable, the client finds the coordinator again.
        GroupError::Storage(_) => ResponseError::CoordinatorNotAvailable,
        GroupError::AuthorizationFailed => ResponseError::GroupAuthorizationFailed,
        // A fenced transactional producer (Kafka's code since 2.7: the client aborts).
        GroupError::InvalidProducerEpoch => ResponseError::InvalidProducerEpoch,
        // Retriable: the client asks again once the transaction has ended.
        GroupError::UnstableOffsetCommit => ResponseError::UnstableOffsetCommit,
        GroupError::InvalidTxnState => ResponseError::InvalidTxnState,
        GroupError::TransactionAbortable => ResponseError::TransactionAbortable,
        GroupError::InvalidProducerIdMapping => ResponseError::InvalidProducerIdMapping,
        GroupError::TooLong(_) | GroupError::InvalidRequest(_) => ResponseError::InvalidRequest,
        GroupError::FencedMemberEpoch => ResponseError::FencedMemberEpoch,
        GroupError::UnreleasedInstanceId => ResponseError::UnreleasedInstanceId,
        GroupError::UnsupportedAssignor(_) => ResponseError::UnsupportedAssignor,
        GroupError::InvalidRegularExpression(_) => ResponseError::InvalidRegularExpression,
        GroupError::GroupMaxSizeReached => ResponseError::GroupMaxSizeReached,
        GroupError::StaleMemberEpoch => ResponseError::StaleMemberEpoch,
    }
}

pub fn quota(e: &crate::quota::entity::QuotaError) -> ResponseError {
    use crate::quota::entity::QuotaError;
    match e {
        QuotaError::EmptyEntity
        | QuotaError::UnknownEntityType(_)
        | QuotaError::DuplicateEntityType(_)
        | QuotaError::UnsupportedEntityType(_)
        | QuotaError::DuplicateEntity
        | QuotaError::UnknownKey(_)
        | QuotaError::DuplicateKey(_)
        | QuotaError::InvalidValue { .. }
        | QuotaError::InvalidFilter(_) => ResponseError::InvalidRequest,
        QuotaError::Storage(_) => ResponseError::UnknownServerError,
        QuotaError::TooMany(_) => ResponseError::PolicyViolation,
    }
}
