//! The consumer's embedded protocol: what a classic-protocol consumer puts in its
//! JoinGroup metadata (`ConsumerProtocolSubscription`) and reads from its SyncGroup
//! assignment (`ConsumerProtocolAssignment`). A consumer group reads both to take a
//! classic member in, and writes the assignment it computed for one (KIP-848's
//! online migration).
//!
//! Each is an `int16` version, then the body at that version. A version above the
//! highest known (3) is read as 3, as Kafka's `ConsumerProtocol` does: later versions
//! only add fields. Input is untrusted: a malformed one is an error, never a panic.

use bytes::{Bytes, BytesMut};
use kafka_protocol::messages::consumer_protocol_assignment::{
    ConsumerProtocolAssignment, TopicPartition as AssignedTopic,
};
use kafka_protocol::messages::consumer_protocol_subscription::{
    ConsumerProtocolSubscription, TopicPartition as OwnedTopic,
};
use kafka_protocol::messages::TopicName;
use kafka_protocol::protocol::{Decodable, Encodable, StrBytes};

/// The highest version of the embedded protocol this module knows.
pub const MAX_VERSION: i16 = 3;

/// Partitions by topic name.
pub type NamedPartitions = Vec<(String, Vec<i32>)>;

/// A classic member's subscription, as its JoinGroup metadata tells it.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct Subscription {
    pub topics: Vec<String>,
    /// What it owns now (version 1+; a cooperative consumer reports it, an eager one
    /// has given everything up before it joins).
    pub owned: NamedPartitions,
    pub rack: Option<String>,
}

#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("malformed consumer protocol {0}")]
pub struct Malformed(&'static str);

/// The version a subscription or assignment starts with.
pub fn version(bytes: &[u8]) -> Result<i16, Malformed> {
    match bytes {
        [a, b, ..] if i16::from_be_bytes([*a, *b]) >= 0 => Ok(i16::from_be_bytes([*a, *b])),
        _ => Err(Malformed("version")),
    }
}

pub fn parse_subscription(bytes: &[u8]) -> Result<Subscription, Malformed> {
    let v = version(bytes)?.min(MAX_VERSION);
    let mut body = Bytes::copy_from_slice(&bytes[2..]);
    let s = ConsumerProtocolSubscription::decode(&mut body, v)
        .map_err(|_| Malformed("subscription"))?;
    Ok(Subscription {
        topics: s.topics.iter().map(|t| t.to_string()).collect(),
        owned: s
            .owned_partitions
            .iter()
            .map(|t| (t.topic.to_string(), t.partitions.clone()))
            .collect(),
        rack: s.rack_id.as_ref().map(|r| r.to_string()),
    })
}

pub fn parse_assignment(bytes: &[u8]) -> Result<NamedPartitions, Malformed> {
    if bytes.is_empty() {
        // A member that never received an assignment.
        return Ok(Vec::new());
    }
    let v = version(bytes)?.min(MAX_VERSION);
    let mut body = Bytes::copy_from_slice(&bytes[2..]);
    let a =
        ConsumerProtocolAssignment::decode(&mut body, v).map_err(|_| Malformed("assignment"))?;
    Ok(a.assigned_partitions
        .iter()
        .map(|t| (t.topic.to_string(), t.partitions.clone()))
        .collect())
}

/// A subscription at `version` (clamped to what this module writes): what a classic
/// consumer sends.
pub fn subscription_bytes(version: i16, s: &Subscription) -> Vec<u8> {
    let v = version.clamp(0, MAX_VERSION);
    let wire = ConsumerProtocolSubscription::default()
        .with_topics(
            s.topics
                .iter()
                .map(|t| StrBytes::from_string(t.clone()))
                .collect(),
        )
        .with_owned_partitions(
            s.owned
                .iter()
                .map(|(t, ps)| {
                    OwnedTopic::default()
                        .with_topic(TopicName(StrBytes::from_string(t.clone())))
                        .with_partitions(ps.clone())
                })
                .collect(),
        )
        .with_rack_id(s.rack.clone().map(StrBytes::from_string));
    let mut out = BytesMut::new();
    out.extend_from_slice(&v.to_be_bytes());
    wire.encode(&mut out, v)
        .expect("a subscription encodes at every known version");
    out.to_vec()
}

/// An assignment at `version` (clamped to what this module writes), for a member
/// whose subscription came at that version.
pub fn assignment_bytes(version: i16, partitions: &NamedPartitions) -> Vec<u8> {
    let v = version.clamp(0, MAX_VERSION);
    let a = ConsumerProtocolAssignment::default().with_assigned_partitions(
        partitions
            .iter()
            .map(|(t, ps)| {
                AssignedTopic::default()
                    .with_topic(TopicName(StrBytes::from_string(t.clone())))
                    .with_partitions(ps.clone())
            })
            .collect(),
    );
    let mut out = BytesMut::new();
    out.extend_from_slice(&v.to_be_bytes());
    a.encode(&mut out, v)
        .expect("an assignment encodes at every known version");
    out.to_vec()
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn orders(version: i16) -> Vec<u8> {
        subscription_bytes(
            version,
            &Subscription {
                topics: vec!["orders".into()],
                owned: vec![("orders".into(), vec![0, 2])],
                rack: Some("r1".into()),
            },
        )
    }

    #[test]
    fn subscriptions_read_at_their_version() {
        let v0 = parse_subscription(&orders(0)).expect("v0");
        assert_eq!(v0.topics, vec!["orders"]);
        assert!(v0.owned.is_empty() && v0.rack.is_none());
        let v3 = parse_subscription(&orders(3)).expect("v3");
        assert_eq!(v3.owned, vec![("orders".to_string(), vec![0, 2])]);
        assert_eq!(v3.rack.as_deref(), Some("r1"));
        // A later version is read as the highest known one.
        let mut v9 = orders(3);
        v9[1] = 9;
        assert_eq!(parse_subscription(&v9), Ok(v3));
    }

    #[test]
    fn assignments_round_trip() {
        let parts = vec![("a".to_string(), vec![1, 3]), ("b".to_string(), vec![0])];
        for v in 0..=MAX_VERSION {
            let b = assignment_bytes(v, &parts);
            assert_eq!(version(&b), Ok(v));
            assert_eq!(parse_assignment(&b), Ok(parts.clone()));
        }
        assert_eq!(parse_assignment(&[]), Ok(Vec::new()));
    }

    proptest! {
        #[test]
        fn arbitrary_bytes_never_panic(bytes in proptest::collection::vec(any::<u8>(), 0..64)) {
            let _ = parse_subscription(&bytes);
            let _ = parse_assignment(&bytes);
        }
    }
}
