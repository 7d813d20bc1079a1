//! Transactions: the coordinator of Kafka's transactional producers.
//!
//! A transactional id's coordinator is the shard that leads partition
//! `partition_for_transactional_id(id)` of the internal compacted topic
//! `__transaction_state`, found as Kafka finds it (the Java `hashCode` of the id, made
//! non-negative, modulo the partition count), so a client finds the same partition as on
//! Kafka. Each id's state (`state`) is a record of that partition, written before any
//! client is told of a change, and read back by the next leader.
//!
//! Modules: `state` (one id's states and the transitions it may make), `log_record` (the
//! record codec), `rules` (what each request does to an id's state, as Kafka decides it),
//! `coordinator` (a shard's ids: their writes, loading, timers), `markers` (the
//! WriteTxnMarkers that end a transaction in its partitions) and `types` (what the edge
//! asks and is answered).

pub mod coordinator;
pub mod log_record;
pub mod markers;
pub mod rules;
pub mod state;
pub mod types;

pub const TRANSACTION_TOPIC: &str = "__transaction_state";

/// The name of the feature clients read their transaction protocol from (ApiVersions'
/// finalized features), and the highest level served: 2, KIP-890 part 2.
pub const TRANSACTION_VERSION_FEATURE: &str = corelog_controller::features::TRANSACTION_VERSION;
pub const TRANSACTION_VERSION_MAX: i16 = corelog_controller::features::TRANSACTION_VERSION_MAX;

/// Kafka's `transaction.state.log.num.partitions` default.
pub const TRANSACTION_TOPIC_PARTITIONS_DEFAULT: i32 = 50;

/// The `__transaction_state` partition of a transactional id (Kafka's
/// `Utils.abs(id.hashCode) % n`, the same mapping as a group's).
pub fn partition_for_transactional_id(id: &str, partitions: i32) -> i32 {
    crate::group::partition_for_group(id, partitions)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ids_map_to_kafkas_partitions() {
        // Java's String.hashCode: "my-txn" -1061187895 (negative: made non-negative by
        // Kafka's Utils.abs, n & 0x7fffffff), "transactional-producer" 804003158,
        // "tx-1" 3572520; modulo 50.
        assert_eq!(partition_for_transactional_id("my-txn", 50), 3);
        assert_eq!(
            partition_for_transactional_id("transactional-producer", 50),
            8
        );
        assert_eq!(partition_for_transactional_id("tx-1", 50), 20);
    }
}
