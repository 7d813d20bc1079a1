//! Consumer groups: the classic group protocol's coordinator and committed offsets.
//!
//! A group's coordinator is the shard that owns partition `partition_for_group(group)` of
//! the internal compacted topic `__consumer_offsets` (as Kafka: the Java `hashCode` of the
//! group id, made non-negative, modulo the partition count). Everything about a group —
//! members, generations, assignments, committed offsets — lives on that one shard; other
//! shards forward group requests to it over the mesh. Group metadata and offsets are
//! records in that partition (Kafka's key/value schema, `offsets_record`), replayed at
//! start-up.
//!
//! Modules: `types` (the domain requests and answers the protocol edge maps to and from),
//! `state` (one classic group's state machine), `consumer` (groups of the consumer
//! protocol, KIP-848), `share` (share groups, KIP-932; being built), `coordinator` (a
//! shard's groups, persistence and timers),
//! `offsets_record` (the record codec).

pub mod consumer;
pub mod coordinator;
pub mod offsets_record;
pub mod share;
pub mod state;
pub mod types;

pub const OFFSETS_TOPIC: &str = "__consumer_offsets";

/// Kafka's `offsets.topic.num.partitions` default.
pub const OFFSETS_TOPIC_PARTITIONS_DEFAULT: i32 = 50;

/// Java's `String.hashCode` over UTF-16 code units, as Kafka computes it, so a group maps
/// to the same `__consumer_offsets` partition as on Kafka.
pub fn java_string_hash(s: &str) -> i32 {
    s.encode_utf16()
        .fold(0i32, |h, c| h.wrapping_mul(31).wrapping_add(i32::from(c)))
}

/// The `__consumer_offsets` partition of a group (Kafka's `Utils.abs(hash) % n`).
pub fn partition_for_group(group: &str, partitions: i32) -> i32 {
    assert!(partitions > 0, "the offsets topic has partitions");
    // Kafka's Utils.abs maps i32::MIN to 0 (`n & 0x7fffffff`).
    (java_string_hash(group) & 0x7fff_ffff) % partitions
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn matches_java_hash_code() {
        // Values computed with Java's "…".hashCode().
        assert_eq!(java_string_hash(""), 0);
        assert_eq!(java_string_hash("a"), 97);
        assert_eq!(java_string_hash("group"), 98_629_247);
        assert_eq!(java_string_hash("my-consumer-group"), 1_513_705_513);
        assert_eq!(java_string_hash("zzzzzzzzzzzzzz"), -1_886_561_600);
        assert!((0..50).contains(&partition_for_group("my-consumer-group", 50)));
        assert_eq!(partition_for_group("group", 50), 98_629_247 % 50);
    }
}
