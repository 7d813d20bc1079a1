//! The records of share groups in `__consumer_offsets`, laid out as Kafka's
//! (`ShareGroup*Key` and `ShareGroup*Value`), beside the classic and consumer groups'.
//!
//! Key: `int16` record type, then the group id and, for per-member records, the member
//! id (`int16`-length strings): 10 member metadata, 11 group metadata, 12 target
//! assignment metadata, 13 target assignment member, 14 current member assignment, 15
//! state-partition metadata.
//! Value: `int16` version 0, then the fields in the flexible encoding
//! (`coordinator_record`); member metadata: rack (nullable), client id, client host,
//! subscribed topic names; group metadata: epoch, metadata hash (`int64`); target
//! metadata: assignment epoch; target member: partitions by topic id; current
//! assignment: member epoch, previous epoch, state (`int8`, always 0: share members are
//! always stable), partitions by topic id; 15 state-partition metadata: the topics
//! (id, name, partitions) initializing and initialized, and those being deleted. A
//! tombstone (no value) deletes its key.
//!
//! Invariants: `decode(encode(x)) == x`; decoding never panics, and refuses truncated
//! input and trailing bytes.

use crate::coordinator_record::{Reader, RecordError, Result, Writer};
use crate::group::consumer::assignment::Assignment;

pub const MEMBER_METADATA: i16 = 10;
pub const GROUP_METADATA: i16 = 11;
pub const TARGET_ASSIGNMENT_METADATA: i16 = 12;
pub const TARGET_ASSIGNMENT_MEMBER: i16 = 13;
pub const CURRENT_MEMBER_ASSIGNMENT: i16 = 14;
pub const STATE_PARTITION_METADATA: i16 = 15;

/// A topic's partitions in record 15: (topic id, topic name, partitions).
pub type TopicPartitions = (uuid::Uuid, String, Vec<i32>);

#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ShareRecordKey {
    MemberMetadata { group: String, member: String },
    GroupMetadata { group: String },
    TargetAssignmentMetadata { group: String },
    TargetAssignmentMember { group: String, member: String },
    CurrentMemberAssignment { group: String, member: String },
    StatePartitionMetadata { group: String },
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ShareRecordValue {
    MemberMetadata {
        rack_id: Option<String>,
        client_id: String,
        client_host: String,
        subscribed_topic_names: Vec<String>,
    },
    GroupMetadata {
        epoch: i32,
        metadata_hash: i64,
    },
    TargetAssignmentMetadata {
        assignment_epoch: i32,
    },
    TargetAssignmentMember(Assignment),
    CurrentMemberAssignment {
        member_epoch: i32,
        previous_member_epoch: i32,
        assigned: Assignment,
    },
    /// The share partitions whose state the share coordinator may hold for the group.
    StatePartitionMetadata {
        initializing: Vec<TopicPartitions>,
        initialized: Vec<TopicPartitions>,
        /// (topic id, name) of topics whose state is being deleted.
        deleting: Vec<(uuid::Uuid, String)>,
    },
}

/// Whether a key of this type is a share group's.
pub fn is_share_key(bytes: &[u8]) -> bool {
    match bytes {
        [a, b, ..] => {
            (MEMBER_METADATA..=STATE_PARTITION_METADATA).contains(&i16::from_be_bytes([*a, *b]))
        }
        _ => false,
    }
}

pub fn encode_key(key: &ShareRecordKey) -> Result<Vec<u8>> {
    let (record_type, strings): (i16, Vec<&str>) = match key {
        ShareRecordKey::MemberMetadata { group, member } => (MEMBER_METADATA, vec![group, member]),
        ShareRecordKey::GroupMetadata { group } => (GROUP_METADATA, vec![group]),
        ShareRecordKey::TargetAssignmentMetadata { group } => {
            (TARGET_ASSIGNMENT_METADATA, vec![group])
        }
        ShareRecordKey::TargetAssignmentMember { group, member } => {
            (TARGET_ASSIGNMENT_MEMBER, vec![group, member])
        }
        ShareRecordKey::CurrentMemberAssignment { group, member } => {
            (CURRENT_MEMBER_ASSIGNMENT, vec![group, member])
        }
        ShareRecordKey::StatePartitionMetadata { group } => (STATE_PARTITION_METADATA, vec![group]),
    };
    let mut w = Writer(Vec::new());
    w.i16(record_type);
    for s in strings {
        w.i16(i16::try_from(s.len()).map_err(|_| RecordError::TooLong)?);
        w.0.extend_from_slice(s.as_bytes());
    }
    Ok(w.0)
}

pub fn decode_key(bytes: &[u8]) -> Result<ShareRecordKey> {
    let mut r = Reader(bytes);
    let key = match r.i16()? {
        MEMBER_METADATA => ShareRecordKey::MemberMetadata {
            group: r.key_string()?,
            member: r.key_string()?,
        },
        GROUP_METADATA => ShareRecordKey::GroupMetadata {
            group: r.key_string()?,
        },
        TARGET_ASSIGNMENT_METADATA => ShareRecordKey::TargetAssignmentMetadata {
            group: r.key_string()?,
        },
        TARGET_ASSIGNMENT_MEMBER => ShareRecordKey::TargetAssignmentMember {
            group: r.key_string()?,
            member: r.key_string()?,
        },
        CURRENT_MEMBER_ASSIGNMENT => ShareRecordKey::CurrentMemberAssignment {
            group: r.key_string()?,
            member: r.key_string()?,
        },
        STATE_PARTITION_METADATA => ShareRecordKey::StatePartitionMetadata {
            group: r.key_string()?,
        },
        other => return Err(RecordError::UnknownVersion(other)),
    };
    r.end()?;
    Ok(key)
}

pub fn encode_value(value: &ShareRecordValue) -> Vec<u8> {
    let mut w = Writer(Vec::new());
    w.i16(0);
    match value {
        ShareRecordValue::MemberMetadata {
            rack_id,
            client_id,
            client_host,
            subscribed_topic_names,
        } => {
            w.string(rack_id.as_deref());
            w.string(Some(client_id));
            w.string(Some(client_host));
            w.len(subscribed_topic_names.len());
            for n in subscribed_topic_names {
                w.string(Some(n));
            }
        }
        ShareRecordValue::GroupMetadata {
            epoch,
            metadata_hash,
        } => {
            w.i32(*epoch);
            w.i64(*metadata_hash);
        }
        ShareRecordValue::TargetAssignmentMetadata { assignment_epoch } => w.i32(*assignment_epoch),
        ShareRecordValue::TargetAssignmentMember(a) => w.assignment(a),
        ShareRecordValue::CurrentMemberAssignment {
            member_epoch,
            previous_member_epoch,
            assigned,
        } => {
            w.i32(*member_epoch);
            w.i32(*previous_member_epoch);
            w.i8(0);
            w.assignment(assigned);
        }
        ShareRecordValue::StatePartitionMetadata {
            initializing,
            initialized,
            deleting,
        } => {
            write_topics(&mut w, initializing);
            write_topics(&mut w, initialized);
            w.len(deleting.len());
            for (id, name) in deleting {
                w.uuid(*id);
                w.string(Some(name));
                w.no_tags();
            }
        }
    }
    w.no_tags();
    w.0
}

/// Decodes the value of a record whose key is `key`.
pub fn decode_value(key: &ShareRecordKey, bytes: &[u8]) -> Result<ShareRecordValue> {
    let mut r = Reader(bytes);
    match r.i16()? {
        0 => {}
        v => return Err(RecordError::UnknownVersion(v)),
    }
    let value = match key {
        ShareRecordKey::MemberMetadata { .. } => {
            let rack_id = r.string()?;
            let client_id = r.string()?.ok_or(RecordError::UnexpectedNull)?;
            let client_host = r.string()?.ok_or(RecordError::UnexpectedNull)?;
            let mut subscribed_topic_names = Vec::new();
            for _ in 0..r.len()? {
                subscribed_topic_names.push(r.string()?.ok_or(RecordError::UnexpectedNull)?);
            }
            ShareRecordValue::MemberMetadata {
                rack_id,
                client_id,
                client_host,
                subscribed_topic_names,
            }
        }
        ShareRecordKey::GroupMetadata { .. } => ShareRecordValue::GroupMetadata {
            epoch: r.i32()?,
            metadata_hash: r.i64()?,
        },
        ShareRecordKey::TargetAssignmentMetadata { .. } => {
            ShareRecordValue::TargetAssignmentMetadata {
                assignment_epoch: r.i32()?,
            }
        }
        ShareRecordKey::TargetAssignmentMember { .. } => {
            ShareRecordValue::TargetAssignmentMember(r.assignment()?)
        }
        ShareRecordKey::CurrentMemberAssignment { .. } => {
            let member_epoch = r.i32()?;
            let previous_member_epoch = r.i32()?;
            let _state = r.i8()?;
            ShareRecordValue::CurrentMemberAssignment {
                member_epoch,
                previous_member_epoch,
                assigned: r.assignment()?,
            }
        }
        ShareRecordKey::StatePartitionMetadata { .. } => {
            let initializing = read_topics(&mut r)?;
            let initialized = read_topics(&mut r)?;
            let mut deleting = Vec::new();
            for _ in 0..r.len()? {
                let id = r.uuid()?;
                let name = r.string()?.ok_or(RecordError::UnexpectedNull)?;
                r.skip_tags()?;
                deleting.push((id, name));
            }
            ShareRecordValue::StatePartitionMetadata {
                initializing,
                initialized,
                deleting,
            }
        }
    };
    r.skip_tags()?;
    r.end()?;
    Ok(value)
}

fn write_topics(w: &mut Writer, topics: &[TopicPartitions]) {
    w.len(topics.len());
    for (id, name, partitions) in topics {
        w.uuid(*id);
        w.string(Some(name));
        w.len(partitions.len());
        for p in partitions {
            w.i32(*p);
        }
        w.no_tags();
    }
}

fn read_topics(r: &mut Reader) -> Result<Vec<TopicPartitions>> {
    let mut out = Vec::new();
    for _ in 0..r.len()? {
        let id = r.uuid()?;
        let name = r.string()?.ok_or(RecordError::UnexpectedNull)?;
        let mut partitions = Vec::new();
        for _ in 0..r.len()? {
            partitions.push(r.i32()?);
        }
        r.skip_tags()?;
        out.push((id, name, partitions));
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;
    use uuid::Uuid;

    fn pairs() -> Vec<(ShareRecordKey, ShareRecordValue)> {
        let (g, m) = ("g".to_string(), "m".to_string());
        let t = Uuid::from_u128(5);
        let a = Assignment::from_partitions([(t, 0), (t, 2)]);
        vec![
            (
                ShareRecordKey::MemberMetadata {
                    group: g.clone(),
                    member: m.clone(),
                },
                ShareRecordValue::MemberMetadata {
                    rack_id: Some("r".into()),
                    client_id: "c".into(),
                    client_host: "/127.0.0.1".into(),
                    subscribed_topic_names: vec!["q".into()],
                },
            ),
            (
                ShareRecordKey::GroupMetadata { group: g.clone() },
                ShareRecordValue::GroupMetadata {
                    epoch: 4,
                    metadata_hash: -7,
                },
            ),
            (
                ShareRecordKey::TargetAssignmentMetadata { group: g.clone() },
                ShareRecordValue::TargetAssignmentMetadata {
                    assignment_epoch: 4,
                },
            ),
            (
                ShareRecordKey::TargetAssignmentMember {
                    group: g.clone(),
                    member: m.clone(),
                },
                ShareRecordValue::TargetAssignmentMember(a.clone()),
            ),
            (
                ShareRecordKey::StatePartitionMetadata { group: g.clone() },
                ShareRecordValue::StatePartitionMetadata {
                    initializing: vec![],
                    initialized: vec![(t, "q".into(), vec![0, 1])],
                    deleting: vec![(t, "q".into())],
                },
            ),
            (
                ShareRecordKey::CurrentMemberAssignment {
                    group: g,
                    member: m,
                },
                ShareRecordValue::CurrentMemberAssignment {
                    member_epoch: 4,
                    previous_member_epoch: 3,
                    assigned: a,
                },
            ),
        ]
    }

    #[test]
    fn keys_and_values_round_trip() {
        for (k, v) in pairs() {
            let kb = encode_key(&k).expect("a key");
            assert!(is_share_key(&kb));
            assert_eq!(decode_key(&kb), Ok(k.clone()));
            assert_eq!(decode_value(&k, &encode_value(&v)), Ok(v));
        }
        // Type 11, then the group as an int16-length string; epoch 4, hash, no tags.
        assert_eq!(
            encode_key(&ShareRecordKey::GroupMetadata { group: "g".into() }),
            Ok(vec![0, 11, 0, 1, b'g'])
        );
        assert!(!is_share_key(&[0, 3, 0, 1, b'g']));
    }

    proptest! {
        #[test]
        fn arbitrary_bytes_never_panic(bytes in proptest::collection::vec(any::<u8>(), 0..120)) {
            if let Ok(k) = decode_key(&bytes) {
                let _ = decode_value(&k, &bytes);
            }
            for (k, _) in pairs() {
                let _ = decode_value(&k, &bytes);
            }
        }

        #[test]
        fn truncated_values_are_refused(cut in 0usize..60) {
            for (k, v) in pairs() {
                let b = encode_value(&v);
                if cut < b.len() {
                    prop_assert!(decode_value(&k, &b[..cut]).is_err());
                }
            }
        }
    }
}
