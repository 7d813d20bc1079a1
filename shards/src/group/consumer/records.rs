//! The records of consumer-protocol groups in `__consumer_offsets`, laid out as Kafka's
//! (`ConsumerGroup*Key` and `ConsumerGroup*Value` in Kafka's
//! `group-coordinator/src/main/resources/common/message`), so a coordinator that takes a
//! partition over — or Kafka's tools reading the topic — rebuild every group exactly.
//!
//! Layout. A key is a big-endian `int16` version naming the record type, then its
//! fields in the non-flexible encoding (`int16`-length strings):
//! 3 group metadata (`group`), 4 partition metadata (`group`), 5 member metadata
//! (`group`, `member`), 6 target assignment metadata (`group`), 7 target assignment
//! member (`group`, `member`), 8 current member assignment (`group`, `member`).
//! A value is `int16` version 0, then its fields in the flexible encoding (compact
//! strings and arrays: unsigned varint length + 1, 0 for null; `uuid` 16 bytes), each
//! struct ending with its tagged fields (written empty, skipped when read) — except
//! the member metadata's tag 0, Kafka's `ClassicMemberMetadata` of a member that uses
//! the classic protocol: a nullable struct, written as its size + 1, the byte 1 and
//! then the struct, and read back.
//!
//! Invariants: `decode(encode(v)) == v` for every key and value; decoding treats its
//! input as untrusted (it comes from disk): it never panics, never allocates beyond the
//! bytes present, and refuses truncated input, a null where none is allowed, invalid
//! UTF-8 and trailing bytes. A tombstone (no value) deletes its key; the caller sees no
//! value and calls no decoder.

use super::assignment::Assignment;
use uuid::Uuid;

/// The key versions of consumer-group records (each names one record type).
pub const GROUP_METADATA: i16 = 3;
pub const PARTITION_METADATA: i16 = 4;
pub const MEMBER_METADATA: i16 = 5;
pub const TARGET_ASSIGNMENT_METADATA: i16 = 6;
pub const TARGET_ASSIGNMENT_MEMBER: i16 = 7;
pub const CURRENT_MEMBER_ASSIGNMENT: i16 = 8;

#[derive(Debug, Clone, PartialEq, Eq)]
pub enum RecordKey {
    GroupMetadata { group: String },
    PartitionMetadata { group: String },
    MemberMetadata { group: String, member: String },
    TargetAssignmentMetadata { group: String },
    TargetAssignmentMember { group: String, member: String },
    CurrentMemberAssignment { group: String, member: String },
}

impl RecordKey {
    pub fn group(&self) -> &str {
        match self {
            RecordKey::GroupMetadata { group }
            | RecordKey::PartitionMetadata { group }
            | RecordKey::MemberMetadata { group, .. }
            | RecordKey::TargetAssignmentMetadata { group }
            | RecordKey::TargetAssignmentMember { group, .. }
            | RecordKey::CurrentMemberAssignment { group, .. } => group,
        }
    }
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TopicMetadata {
    pub id: Uuid,
    pub name: String,
    pub partitions: i32,
    /// Per partition with any: (partition, the racks of its replicas).
    pub racks: Vec<(i32, Vec<String>)>,
}

#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct MemberMetadata {
    pub instance_id: Option<String>,
    pub rack_id: Option<String>,
    pub client_id: String,
    pub client_host: String,
    pub subscribed_topic_names: Vec<String>,
    pub subscribed_topic_regex: Option<String>,
    pub rebalance_timeout_ms: i32,
    pub server_assignor: Option<String>,
    /// Set for a member that uses the classic protocol (JoinGroup, SyncGroup) inside a
    /// consumer group: what a classic group needs of it (tag 0).
    pub classic: Option<ClassicMemberMetadata>,
}

/// A classic-protocol member's own settings (Kafka's `ClassicMemberMetadata`).
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct ClassicMemberMetadata {
    pub session_timeout_ms: i32,
    /// The protocols it joined with, in its order of preference.
    pub protocols: Vec<ClassicProtocol>,
}

#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct ClassicProtocol {
    pub name: String,
    /// Its embedded-protocol subscription (`ConsumerProtocolSubscription`).
    pub metadata: Vec<u8>,
}

/// The tag of `ClassicMemberMetadata` in a member-metadata value.
const CLASSIC_MEMBER_METADATA_TAG: u64 = 0;

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CurrentAssignment {
    pub member_epoch: i32,
    pub previous_member_epoch: i32,
    /// Kafka's `MemberState` value.
    pub state: i8,
    pub assigned: Assignment,
    pub pending_revocation: Assignment,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub enum RecordValue {
    GroupMetadata { epoch: i32 },
    PartitionMetadata { topics: Vec<TopicMetadata> },
    MemberMetadata(MemberMetadata),
    TargetAssignmentMetadata { assignment_epoch: i32 },
    TargetAssignmentMember(Assignment),
    CurrentMemberAssignment(CurrentAssignment),
}

pub use crate::coordinator_record::RecordError;
use crate::coordinator_record::{Reader, Result, Writer};

/// Whether a key of this version is a consumer-group record.
pub fn is_consumer_key(bytes: &[u8]) -> bool {
    key_version(bytes).is_some_and(|v| (GROUP_METADATA..=CURRENT_MEMBER_ASSIGNMENT).contains(&v))
}

fn key_version(bytes: &[u8]) -> Option<i16> {
    Some(i16::from_be_bytes([*bytes.first()?, *bytes.get(1)?]))
}

pub fn encode_key(key: &RecordKey) -> Result<Vec<u8>> {
    let mut out = Vec::new();
    let (version, strings): (i16, Vec<&str>) = match key {
        RecordKey::GroupMetadata { group } => (GROUP_METADATA, vec![group]),
        RecordKey::PartitionMetadata { group } => (PARTITION_METADATA, vec![group]),
        RecordKey::MemberMetadata { group, member } => (MEMBER_METADATA, vec![group, member]),
        RecordKey::TargetAssignmentMetadata { group } => (TARGET_ASSIGNMENT_METADATA, vec![group]),
        RecordKey::TargetAssignmentMember { group, member } => {
            (TARGET_ASSIGNMENT_MEMBER, vec![group, member])
        }
        RecordKey::CurrentMemberAssignment { group, member } => {
            (CURRENT_MEMBER_ASSIGNMENT, vec![group, member])
        }
    };
    out.extend_from_slice(&version.to_be_bytes());
    for s in strings {
        let len = i16::try_from(s.len()).map_err(|_| RecordError::TooLong)?;
        out.extend_from_slice(&len.to_be_bytes());
        out.extend_from_slice(s.as_bytes());
    }
    Ok(out)
}

pub fn decode_key(bytes: &[u8]) -> Result<RecordKey> {
    let mut r = Reader(bytes);
    let version = r.i16()?;
    let key = match version {
        GROUP_METADATA => RecordKey::GroupMetadata {
            group: r.key_string()?,
        },
        PARTITION_METADATA => RecordKey::PartitionMetadata {
            group: r.key_string()?,
        },
        MEMBER_METADATA => RecordKey::MemberMetadata {
            group: r.key_string()?,
            member: r.key_string()?,
        },
        TARGET_ASSIGNMENT_METADATA => RecordKey::TargetAssignmentMetadata {
            group: r.key_string()?,
        },
        TARGET_ASSIGNMENT_MEMBER => RecordKey::TargetAssignmentMember {
            group: r.key_string()?,
            member: r.key_string()?,
        },
        CURRENT_MEMBER_ASSIGNMENT => RecordKey::CurrentMemberAssignment {
            group: r.key_string()?,
            member: r.key_string()?,
        },
        v => return Err(RecordError::UnknownVersion(v)),
    };
    r.end()?;
    Ok(key)
}

pub fn encode_value(value: &RecordValue) -> Vec<u8> {
    let mut w = Writer(Vec::new());
    w.i16(0);
    match value {
        RecordValue::GroupMetadata { epoch } => w.i32(*epoch),
        RecordValue::PartitionMetadata { topics } => {
            w.len(topics.len());
            for t in topics {
                w.uuid(t.id);
                w.string(Some(&t.name));
                w.i32(t.partitions);
                w.len(t.racks.len());
                for (p, racks) in &t.racks {
                    w.i32(*p);
                    w.len(racks.len());
                    for r in racks {
                        w.string(Some(r));
                    }
                    w.no_tags();
                }
                w.no_tags();
            }
        }
        RecordValue::MemberMetadata(m) => {
            w.string(m.instance_id.as_deref());
            w.string(m.rack_id.as_deref());
            w.string(Some(&m.client_id));
            w.string(Some(&m.client_host));
            w.len(m.subscribed_topic_names.len());
            for n in &m.subscribed_topic_names {
                w.string(Some(n));
            }
            w.string(m.subscribed_topic_regex.as_deref());
            w.i32(m.rebalance_timeout_ms);
            w.string(m.server_assignor.as_deref());
        }
        RecordValue::TargetAssignmentMetadata { assignment_epoch } => w.i32(*assignment_epoch),
        RecordValue::TargetAssignmentMember(a) => w.assignment(a),
        RecordValue::CurrentMemberAssignment(c) => {
            w.i32(c.member_epoch);
            w.i32(c.previous_member_epoch);
            w.0.push(c.state as u8);
            w.assignment(&c.assigned);
            w.assignment(&c.pending_revocation);
        }
    }
    match value {
        RecordValue::MemberMetadata(MemberMetadata {
            classic: Some(c), ..
        }) => w.classic_member_tag(c),
        _ => w.no_tags(),
    }
    w.0
}

/// Decodes the value of a record whose key is `key`.
pub fn decode_value(key: &RecordKey, bytes: &[u8]) -> Result<RecordValue> {
    let mut r = Reader(bytes);
    match r.i16()? {
        0 => {}
        v => return Err(RecordError::UnknownVersion(v)),
    }
    let value = match key {
        RecordKey::GroupMetadata { .. } => RecordValue::GroupMetadata { epoch: r.i32()? },
        RecordKey::PartitionMetadata { .. } => {
            let n = r.len()?;
            let mut topics = Vec::new();
            for _ in 0..n {
                let id = r.uuid()?;
                let name = r.string()?.ok_or(RecordError::UnexpectedNull)?;
                let partitions = r.i32()?;
                let m = r.len()?;
                let mut racks = Vec::new();
                for _ in 0..m {
                    let p = r.i32()?;
                    let k = r.len()?;
                    let mut rs = Vec::new();
                    for _ in 0..k {
                        rs.push(r.string()?.ok_or(RecordError::UnexpectedNull)?);
                    }
                    r.skip_tags()?;
                    racks.push((p, rs));
                }
                r.skip_tags()?;
                topics.push(TopicMetadata {
                    id,
                    name,
                    partitions,
                    racks,
                });
            }
            RecordValue::PartitionMetadata { topics }
        }
        RecordKey::MemberMetadata { .. } => {
            let instance_id = r.string()?;
            let rack_id = r.string()?;
            let client_id = r.string()?.ok_or(RecordError::UnexpectedNull)?;
            let client_host = r.string()?.ok_or(RecordError::UnexpectedNull)?;
            let n = r.len()?;
            let mut subscribed_topic_names = Vec::new();
            for _ in 0..n {
                subscribed_topic_names.push(r.string()?.ok_or(RecordError::UnexpectedNull)?);
            }
            let subscribed_topic_regex = r.string()?;
            let rebalance_timeout_ms = r.i32()?;
            let server_assignor = r.string()?;
            let classic = r.member_tags()?;
            r.end()?;
            return Ok(RecordValue::MemberMetadata(MemberMetadata {
                instance_id,
                rack_id,
                client_id,
                client_host,
                subscribed_topic_names,
                subscribed_topic_regex,
                rebalance_timeout_ms,
                server_assignor,
                classic,
            }));
        }
        RecordKey::TargetAssignmentMetadata { .. } => RecordValue::TargetAssignmentMetadata {
            assignment_epoch: r.i32()?,
        },
        RecordKey::TargetAssignmentMember { .. } => {
            RecordValue::TargetAssignmentMember(r.assignment()?)
        }
        RecordKey::CurrentMemberAssignment { .. } => {
            RecordValue::CurrentMemberAssignment(CurrentAssignment {
                member_epoch: r.i32()?,
                previous_member_epoch: r.i32()?,
                state: r.i8()?,
                assigned: r.assignment()?,
                pending_revocation: r.assignment()?,
            })
        }
    };
    // The value's own tagged fields (none known here).
    r.skip_tags()?;
    r.end()?;
    Ok(value)
}

impl Writer {
    /// The tagged-fields section holding tag 0, a classic member's metadata: a
    /// nullable struct, so its size counts the byte 1 that says it is there.
    fn classic_member_tag(&mut self, c: &ClassicMemberMetadata) {
        let mut inner = Writer(Vec::new());
        inner.i32(c.session_timeout_ms);
        inner.len(c.protocols.len());
        for p in &c.protocols {
            inner.string(Some(&p.name));
            inner.bytes(&p.metadata);
            inner.no_tags();
        }
        inner.no_tags();
        self.uvarint(1);
        self.uvarint(CLASSIC_MEMBER_METADATA_TAG);
        self.uvarint(inner.0.len() as u64 + 1);
        self.uvarint(1);
        self.0.extend_from_slice(&inner.0);
    }
    fn bytes(&mut self, b: &[u8]) {
        self.len(b.len());
        self.0.extend_from_slice(b);
    }
    /// Partitions by topic id (Kafka's `TopicPartitions` array), also the share
    /// groups' records'.
    pub(crate) fn assignment(&mut self, a: &Assignment) {
        self.len(a.topics().len());
        for (t, ps) in a.topics() {
            self.uuid(*t);
            self.len(ps.len());
            for p in ps {
                self.i32(*p);
            }
            self.no_tags();
        }
    }
}

impl Reader<'_> {
    /// A member-metadata value's tagged fields: tag 0 is a classic member's metadata,
    /// others are skipped.
    fn member_tags(&mut self) -> Result<Option<ClassicMemberMetadata>> {
        let mut classic = None;
        for _ in 0..self.uvarint()? {
            let tag = self.uvarint()?;
            let size = usize::try_from(self.uvarint()?).map_err(|_| RecordError::Truncated)?;
            let mut field = Reader(self.take(size)?);
            if tag != CLASSIC_MEMBER_METADATA_TAG {
                continue;
            }
            if field.i8()? < 0 {
                field.end()?;
                continue;
            }
            let session_timeout_ms = field.i32()?;
            let mut protocols = Vec::new();
            for _ in 0..field.len()? {
                let name = field.string()?.ok_or(RecordError::UnexpectedNull)?;
                let n = field.len()?;
                let metadata = field.take(n)?.to_vec();
                field.skip_tags()?;
                protocols.push(ClassicProtocol { name, metadata });
            }
            field.skip_tags()?;
            field.end()?;
            classic = Some(ClassicMemberMetadata {
                session_timeout_ms,
                protocols,
            });
        }
        Ok(classic)
    }
    pub(crate) fn assignment(&mut self) -> Result<Assignment> {
        let mut a = Assignment::new();
        for _ in 0..self.len()? {
            let t = self.uuid()?;
            for _ in 0..self.len()? {
                a.insert(t, self.i32()?);
            }
            self.skip_tags()?;
        }
        Ok(a)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn keys() -> Vec<RecordKey> {
        let (g, m) = ("group".to_string(), "member-1".to_string());
        vec![
            RecordKey::GroupMetadata { group: g.clone() },
            RecordKey::PartitionMetadata { group: g.clone() },
            RecordKey::MemberMetadata {
                group: g.clone(),
                member: m.clone(),
            },
            RecordKey::TargetAssignmentMetadata { group: g.clone() },
            RecordKey::TargetAssignmentMember {
                group: g.clone(),
                member: m.clone(),
            },
            RecordKey::CurrentMemberAssignment {
                group: g,
                member: m,
            },
        ]
    }

    fn values() -> Vec<RecordValue> {
        let t = Uuid::from_u128(0x1234);
        let a = Assignment::from_partitions([(t, 0), (t, 3)]);
        vec![
            RecordValue::GroupMetadata { epoch: 7 },
            RecordValue::PartitionMetadata {
                topics: vec![TopicMetadata {
                    id: t,
                    name: "orders".into(),
                    partitions: 4,
                    racks: vec![(0, vec!["a".into(), "b".into()])],
                }],
            },
            RecordValue::MemberMetadata(MemberMetadata {
                instance_id: Some("i".into()),
                rack_id: None,
                client_id: "c".into(),
                client_host: "/127.0.0.1".into(),
                subscribed_topic_names: vec!["orders".into()],
                subscribed_topic_regex: Some("o.*".into()),
                rebalance_timeout_ms: 30_000,
                server_assignor: Some("uniform".into()),
                classic: None,
            }),
            RecordValue::TargetAssignmentMetadata {
                assignment_epoch: 7,
            },
            RecordValue::TargetAssignmentMember(a.clone()),
            RecordValue::CurrentMemberAssignment(CurrentAssignment {
                member_epoch: 7,
                previous_member_epoch: 6,
                state: 2,
                assigned: a,
                pending_revocation: Assignment::from_partitions([(t, 1)]),
            }),
        ]
    }

    #[test]
    fn keys_and_values_round_trip() {
        for (k, v) in keys().into_iter().zip(values()) {
            let kb = encode_key(&k).expect("encode");
            assert!(is_consumer_key(&kb));
            assert_eq!(decode_key(&kb), Ok(k.clone()));
            assert_eq!(decode_value(&k, &encode_value(&v)), Ok(v));
        }
    }

    #[test]
    fn a_classic_members_metadata_is_tag_0_and_round_trips() {
        let k = &keys()[2];
        let mut m = MemberMetadata {
            client_id: "c".into(),
            client_host: "h".into(),
            rebalance_timeout_ms: 5,
            ..MemberMetadata::default()
        };
        m.classic = Some(ClassicMemberMetadata {
            session_timeout_ms: 10_000,
            protocols: vec![ClassicProtocol {
                name: "range".into(),
                metadata: vec![0, 3, 1, 2],
            }],
        });
        let bytes = encode_value(&RecordValue::MemberMetadata(m.clone()));
        // The end: one tagged field, tag 0, size 19: the byte 1, then 18 of struct (the
        // int32 timeout, a one-element array of "range" and 4 bytes, two empty tag
        // sections).
        let tail = &bytes[bytes.len() - 22..];
        assert_eq!(&tail[..4], &[1, 0, 19, 1]);
        assert_eq!(&tail[4..8], &10_000i32.to_be_bytes());
        assert_eq!(
            decode_value(k, &bytes),
            Ok(RecordValue::MemberMetadata(m.clone()))
        );
        // Without it, the value ends with an empty tag section.
        m.classic = None;
        let bytes = encode_value(&RecordValue::MemberMetadata(m.clone()));
        assert_eq!(bytes.last(), Some(&0));
        assert_eq!(decode_value(k, &bytes), Ok(RecordValue::MemberMetadata(m)));
    }

    #[test]
    fn the_group_metadata_value_is_kafkas_bytes() {
        // int16 version 0, int32 epoch 5, no tagged fields.
        assert_eq!(
            encode_value(&RecordValue::GroupMetadata { epoch: 5 }),
            vec![0, 0, 0, 0, 0, 5, 0]
        );
        // Key version 3, then the group as an int16-length string.
        assert_eq!(
            encode_key(&RecordKey::GroupMetadata { group: "g".into() }),
            Ok(vec![0, 3, 0, 1, b'g'])
        );
    }

    #[test]
    fn classic_keys_are_not_consumer_keys() {
        assert!(!is_consumer_key(&[0, 1, 0, 0]));
        assert!(!is_consumer_key(&[0, 2]));
        assert!(!is_consumer_key(&[0]));
    }

    proptest! {
        /// Any bytes: an error or a value, never a panic; a truncated valid record is
        /// refused.
        #[test]
        fn decoding_arbitrary_bytes_never_panics(bytes in proptest::collection::vec(any::<u8>(), 0..200)) {
            if let Ok(k) = decode_key(&bytes) {
                let _ = decode_value(&k, &bytes);
            }
            for k in keys() {
                let _ = decode_value(&k, &bytes);
            }
        }

        #[test]
        fn truncated_values_are_refused(cut in 0usize..40) {
            for (k, v) in keys().into_iter().zip(values()) {
                let b = encode_value(&v);
                if cut < b.len() {
                    prop_assert!(decode_value(&k, &b[..cut]).is_err());
                }
            }
        }
    }
}
