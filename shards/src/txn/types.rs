//! What the edge asks a transaction coordinator shard, and what it answers: one
//! operation per Kafka API the coordinator serves, in the coordinator's own terms
//! (producer ids and epochs, partitions as (topic, index)), decoded from and encoded to
//! the wire at the edge.

use super::rules::{ProducerIdEpoch, TxnError, TxnOutcome};
use super::state::TxnPartition;
use std::collections::{BTreeMap, BTreeSet};

/// How partitions are added to a transaction.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum AddMode {
    /// AddPartitionsToTxn v0-v3 or AddOffsetsToTxn from the producer itself.
    Client,
    /// A partition leader asks whether the partitions are in the transaction (v4+ with
    /// verifyOnly, KIP-890 part 1).
    Verify,
    /// A partition leader adds them for a version 2 producer's produce (v5, verifyOnly
    /// false).
    Implicit,
}

pub enum TxnOp {
    InitProducerId {
        transactional_id: String,
        timeout_ms: i32,
        /// The producer a v3+ client resumes from (KIP-360), if any.
        expected: Option<ProducerIdEpoch>,
    },
    AddPartitions {
        transactional_id: String,
        producer: ProducerIdEpoch,
        partitions: BTreeSet<TxnPartition>,
        mode: AddMode,
    },
    AddOffsets {
        transactional_id: String,
        producer: ProducerIdEpoch,
        group: String,
    },
    EndTxn {
        transactional_id: String,
        producer: ProducerIdEpoch,
        outcome: TxnOutcome,
        /// EndTxn v5+: the client ends under transaction version 2.
        tv2: bool,
    },
    Describe {
        ids: Vec<String>,
    },
    List {
        /// State names to keep (empty: all).
        states: Vec<String>,
        /// Producer ids to keep (empty: all).
        producer_ids: Vec<i64>,
        /// Keep only transactions running at least this long (-1: all; v1+).
        min_duration_ms: i64,
    },
}

impl TxnOp {
    /// The transactional id an operation is about (`None` for those about many).
    pub fn transactional_id(&self) -> Option<&str> {
        match self {
            TxnOp::InitProducerId {
                transactional_id, ..
            }
            | TxnOp::AddPartitions {
                transactional_id, ..
            }
            | TxnOp::AddOffsets {
                transactional_id, ..
            }
            | TxnOp::EndTxn {
                transactional_id, ..
            } => Some(transactional_id),
            TxnOp::Describe { .. } | TxnOp::List { .. } => None,
        }
    }
}

/// One transactional id as DescribeTransactions and ListTransactions report it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct TxnDescription {
    pub transactional_id: String,
    pub state: &'static str,
    pub producer_id: i64,
    pub producer_epoch: i16,
    pub timeout_ms: i32,
    /// When the ongoing transaction began (-1 if none).
    pub start_ms: i64,
    pub partitions: BTreeSet<TxnPartition>,
}

pub enum TxnAnswer {
    /// InitProducerId, EndTxn: the producer id and epoch to go on with.
    Producer(Result<ProducerIdEpoch, TxnError>),
    /// AddPartitionsToTxn (client), AddOffsetsToTxn.
    Added(Result<(), TxnError>),
    /// AddPartitionsToTxn from a partition leader: per partition, `None` if it is in the
    /// transaction.
    Verified(Result<BTreeMap<TxnPartition, Option<TxnError>>, TxnError>),
    Described(Vec<(String, Result<TxnDescription, TxnError>)>),
    /// The ids of a shard, or COORDINATOR_LOAD_IN_PROGRESS while one of its partitions
    /// loads (Kafka lists nothing then: the list would miss ids).
    Listed(Result<Vec<TxnDescription>, TxnError>),
}
