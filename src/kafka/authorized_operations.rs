//! The authorized-operations bit fields of KIP-430 (Metadata, DescribeCluster,
//! DescribeGroups, DescribeTopicPartitions).
//!
//! The constants are the operations each resource type supports (bit `n` set means
//! `AclOperation` code `n`): what Kafka reports without an authorizer, and the set
//! `access::Access::operations` narrows to those the principal's ACLs allow when one is
//! configured. A field a client did not ask for stays [`NOT_REQUESTED`].

/// Kafka's marker for "authorized operations were not requested".
pub const NOT_REQUESTED: i32 = i32::MIN;

// `AclOperation` codes.
const READ: u8 = 3;
const WRITE: u8 = 4;
const CREATE: u8 = 5;
const DELETE: u8 = 6;
const ALTER: u8 = 7;
const DESCRIBE: u8 = 8;
const CLUSTER_ACTION: u8 = 9;
const DESCRIBE_CONFIGS: u8 = 10;
const ALTER_CONFIGS: u8 = 11;
const IDEMPOTENT_WRITE: u8 = 12;

const fn bits(ops: &[u8]) -> i32 {
    let mut field = 0i32;
    let mut i = 0;
    while i < ops.len() {
        assert!(ops[i] < 31, "an operation code fits the 32-bit field");
        field |= 1 << ops[i];
        i += 1;
    }
    field
}

/// `AclEntry.supportedOperations(TOPIC)`.
pub const TOPIC: i32 = bits(&[
    READ,
    WRITE,
    CREATE,
    DESCRIBE,
    DELETE,
    ALTER,
    DESCRIBE_CONFIGS,
    ALTER_CONFIGS,
]);

/// `AclEntry.supportedOperations(GROUP)` (Kafka 4 added the group config operations).
pub const GROUP: i32 = bits(&[READ, DESCRIBE, DELETE, DESCRIBE_CONFIGS, ALTER_CONFIGS]);

/// `AclEntry.supportedOperations(CLUSTER)`.
pub const CLUSTER: i32 = bits(&[
    CREATE,
    CLUSTER_ACTION,
    DESCRIBE_CONFIGS,
    ALTER_CONFIGS,
    IDEMPOTENT_WRITE,
    ALTER,
    DESCRIBE,
]);

/// `field` when the client asked for it, else the not-requested marker.
pub fn if_requested(requested: bool, field: i32) -> i32 {
    if requested {
        field
    } else {
        NOT_REQUESTED
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn fields_match_kafkas_encoding() {
        // Values Apache Kafka answers without an authorizer (see the Java client's
        // Utils.from32BitField): topic 3..=8 and 10, 11; cluster 5, 7..=12.
        assert_eq!(TOPIC, 0b1101_1111_1000);
        assert_eq!(CLUSTER, 0b1_1111_1010_0000);
        assert_eq!(
            GROUP,
            (1 << 3) | (1 << 6) | (1 << 8) | (1 << 10) | (1 << 11)
        );
        assert_eq!(if_requested(false, TOPIC), NOT_REQUESTED);
    }
}
