//! The key/value codec of the records in the internal compacted topic `__consumer_offsets`.
//!
//! Owns the byte layout, and nothing else, of the two kinds of record a group coordinator
//! persists, laid out exactly as Apache Kafka lays them out (the non-flexible versions of
//! `OffsetCommitKey`, `OffsetCommitValue`, `GroupMetadataKey` and `GroupMetadataValue` in
//! Kafka's `group-coordinator/src/main/resources/common/message/*.json`), so that a data
//! directory's offsets topic reads like Kafka's and Kafka tooling that decodes the topic
//! (e.g. `kafka-console-consumer --formatter ...OffsetsMessageFormatter`) understands it.
//!
//! Layout. Every key and value starts with a big-endian `int16` schema version. Strings
//! are `int16` length + UTF-8 (length -1 is null, allowed only for nullable fields); bytes
//! are `int32` length + raw bytes; arrays are `int32` count + elements.
//!
//! - Key version 0 or 1: offset commit key — `group`, `topic`, `partition: int32`.
//!   Key version 2: group metadata key — `group`. Compaction keeps the last value per key.
//! - `OffsetCommitValue`: v0 `offset: int64, metadata, commit_timestamp: int64`;
//!   v1 adds `expire_timestamp: int64` at the end; v2 drops it again; v3 inserts
//!   `leader_epoch: int32` after `offset`.
//! - `GroupMetadataValue`: `protocol_type, generation: int32, protocol?, leader?`, then
//!   `current_state_timestamp: int64` (v2+), then the members array. A member is
//!   `member_id, group_instance_id? (v3+), client_id, client_host,
//!   rebalance_timeout: int32 (v1+), session_timeout: int32, subscription: bytes,
//!   assignment: bytes`.
//!
//! Invariants:
//! - Written versions: offset commit key v1 (Kafka's highest for that key), group metadata
//!   key v2, `OffsetCommitValue` v3, `GroupMetadataValue` v3. Read versions: keys 0–2,
//!   both values 0–3. Flexible (tagged-field) versions — `OffsetCommitValue` v4+,
//!   `GroupMetadataValue` v4+ — are neither written nor read: they are an
//!   [`OffsetsRecordError::UnknownVersion`].
//! - Round trip: `decode_x(&encode_x(v)) == Ok(v)` for every key and group value, and for
//!   every offset value whose `expire_timestamp_ms` is -1. v3 has no expire timestamp, so a
//!   value's `expire_timestamp_ms` is not persisted; it is only ever set (≠ -1) by decoding a
//!   v1 record (written by an old Kafka for a commit with an explicit retention time).
//! - Fields absent from an older version decode to Kafka's defaults: `leader_epoch` -1,
//!   `expire_timestamp_ms` -1, `current_state_timestamp_ms` -1, `group_instance_id` None,
//!   and `rebalance_timeout_ms` = the member's session timeout (what Kafka assumes for v0).
//! - Decoding treats its input as untrusted (it comes from disk): it never panics, never
//!   allocates more than the bytes present, and rejects a truncated record, a negative
//!   length, a null in a non-nullable field, invalid UTF-8 and trailing bytes.
//!
//! Not here: deciding what to do with a record that fails to decode or has an unknown key
//! version (e.g. KIP-848 consumer-group records, key versions 3+) — the loader decides;
//! tombstones (a record with a null value deletes its key; the caller sees no value and
//! calls no decoder); the record batches themselves; retention and expiry of offsets; and
//! validating request sizes (a string field over 32767 bytes cannot be encoded: see
//! [`try_encode_key`]).

use bytes::Bytes;

/// Offset commit key version written; Kafka writes its highest, 1 (0 has the same layout).
const OFFSET_KEY_VERSION: i16 = 1;
/// The group metadata key is always version 2 (versions 0–1 are offset commit keys).
const GROUP_KEY_VERSION: i16 = 2;
const OFFSET_VALUE_VERSION: i16 = 3;
const GROUP_VALUE_VERSION: i16 = 3;

/// The longest string an `int16` length prefix can describe.
pub const MAX_STRING_LEN: usize = i16::MAX as usize;

/// The smallest encoding of one member (v0: three empty strings, session timeout, two
/// empty byte arrays). Bounds the capacity reserved for a member count read from disk.
const MIN_MEMBER_LEN: usize = 3 * 2 + 4 + 2 * 4;

/// The key of a `__consumer_offsets` record.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub enum RecordKey {
    /// A committed offset of one partition for one group (value: [`OffsetValue`]).
    Offset {
        group: String,
        topic: String,
        partition: i32,
    },
    /// A group's membership and generation (value: [`GroupValue`]).
    GroupMetadata { group: String },
}

/// A committed offset (Kafka's `OffsetCommitValue`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct OffsetValue {
    pub offset: i64,
    /// Leader epoch of the last consumed record; -1 when unknown.
    pub leader_epoch: i32,
    /// The client's metadata; a null from the request is stored as "" (as Kafka does).
    pub metadata: String,
    pub commit_timestamp_ms: i64,
    /// -1 when none. Not written (v3 has no such field); see the module invariants.
    pub expire_timestamp_ms: i64,
}

/// One member of a classic-protocol group (Kafka's `GroupMetadataValue.MemberMetadata`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct MemberValue {
    pub member_id: String,
    pub group_instance_id: Option<String>,
    pub client_id: String,
    pub client_host: String,
    pub rebalance_timeout_ms: i32,
    pub session_timeout_ms: i32,
    /// The member's metadata for the chosen protocol, opaque to the broker.
    pub subscription: Bytes,
    /// The assignment the leader gave the member, opaque to the broker.
    pub assignment: Bytes,
}

/// A group's state (Kafka's `GroupMetadataValue`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct GroupValue {
    pub protocol_type: String,
    pub generation: i32,
    pub protocol: Option<String>,
    pub leader: Option<String>,
    /// -1 when unknown (versions before 2).
    pub current_state_timestamp_ms: i64,
    pub members: Vec<MemberValue>,
}

/// Why a record could not be decoded (or, for [`OffsetsRecordError::TooLong`], encoded).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum OffsetsRecordError {
    #[error("truncated record: {field} needs {needed} bytes, {remaining} remain")]
    Truncated {
        field: &'static str,
        needed: usize,
        remaining: usize,
    },
    #[error("unknown {record} version {version}")]
    UnknownVersion { record: &'static str, version: i16 },
    #[error("{field} is not valid UTF-8")]
    InvalidUtf8 { field: &'static str },
    /// Also a null (-1) where the field is not nullable.
    #[error("{field} has invalid length {len}")]
    NegativeLength { field: &'static str, len: i32 },
    #[error("{count} bytes after the end of the {record}")]
    TrailingBytes { record: &'static str, count: usize },
    #[error("{field} is {len} long, over the format's limit of {max}")]
    TooLong {
        field: &'static str,
        len: usize,
        max: usize,
    },
}

type Result<T> = std::result::Result<T, OffsetsRecordError>;

// ---------------------------------------------------------------------------------------
// Encoding
// ---------------------------------------------------------------------------------------

/// Encodes a key (offset commit key v1 or group metadata key v2).
///
/// # Panics
/// If a string is longer than [`MAX_STRING_LEN`] bytes; see [`try_encode_key`].
pub fn encode_key(key: &RecordKey) -> Vec<u8> {
    try_encode_key(key).unwrap_or_else(|e| panic!("unencodable __consumer_offsets key: {e}"))
}

/// Encodes an offset value as `OffsetCommitValue` v3 (drops `expire_timestamp_ms`).
///
/// # Panics
/// If `metadata` is longer than [`MAX_STRING_LEN`] bytes; see [`try_encode_offset_value`].
pub fn encode_offset_value(v: &OffsetValue) -> Vec<u8> {
    try_encode_offset_value(v)
        .unwrap_or_else(|e| panic!("unencodable __consumer_offsets offset value: {e}"))
}

/// Encodes a group value as `GroupMetadataValue` v3.
///
/// # Panics
/// If a string is longer than [`MAX_STRING_LEN`] bytes, or a byte array or the member
/// list longer than `i32::MAX`; see [`try_encode_group_value`].
pub fn encode_group_value(v: &GroupValue) -> Vec<u8> {
    try_encode_group_value(v)
        .unwrap_or_else(|e| panic!("unencodable __consumer_offsets group value: {e}"))
}

/// [`encode_key`] without the panic. A string over 32767 bytes has no `int16` length, and
/// Kafka rejects such strings at the protocol edge; a caller that takes them from a
/// flexible (varint-length) request and does not check must use this.
pub fn try_encode_key(key: &RecordKey) -> Result<Vec<u8>> {
    let mut w = Writer::default();
    match key {
        RecordKey::Offset {
            group,
            topic,
            partition,
        } => {
            w.i16(OFFSET_KEY_VERSION);
            w.string(group, "group")?;
            w.string(topic, "topic")?;
            w.i32(*partition);
        }
        RecordKey::GroupMetadata { group } => {
            w.i16(GROUP_KEY_VERSION);
            w.string(group, "group")?;
        }
    }
    Ok(w.buf)
}

/// [`encode_offset_value`] without the panic.
pub fn try_encode_offset_value(v: &OffsetValue) -> Result<Vec<u8>> {
    let mut w = Writer::default();
    w.i16(OFFSET_VALUE_VERSION);
    w.i64(v.offset);
    w.i32(v.leader_epoch);
    w.string(&v.metadata, "metadata")?;
    w.i64(v.commit_timestamp_ms);
    Ok(w.buf)
}

/// [`encode_group_value`] without the panic.
pub fn try_encode_group_value(v: &GroupValue) -> Result<Vec<u8>> {
    let mut w = Writer::default();
    w.i16(GROUP_VALUE_VERSION);
    w.string(&v.protocol_type, "protocol_type")?;
    w.i32(v.generation);
    w.nullable_string(v.protocol.as_deref(), "protocol")?;
    w.nullable_string(v.leader.as_deref(), "leader")?;
    w.i64(v.current_state_timestamp_ms);
    w.i32(len_i32(v.members.len(), "members")?);
    for m in &v.members {
        w.string(&m.member_id, "member_id")?;
        w.nullable_string(m.group_instance_id.as_deref(), "group_instance_id")?;
        w.string(&m.client_id, "client_id")?;
        w.string(&m.client_host, "client_host")?;
        w.i32(m.rebalance_timeout_ms);
        w.i32(m.session_timeout_ms);
        w.bytes(&m.subscription, "subscription")?;
        w.bytes(&m.assignment, "assignment")?;
    }
    Ok(w.buf)
}

fn len_i32(len: usize, field: &'static str) -> Result<i32> {
    i32::try_from(len).map_err(|_| OffsetsRecordError::TooLong {
        field,
        len,
        max: i32::MAX as usize,
    })
}

#[derive(Default)]
struct Writer {
    buf: Vec<u8>,
}

impl Writer {
    fn i16(&mut self, v: i16) {
        self.buf.extend_from_slice(&v.to_be_bytes());
    }

    fn i32(&mut self, v: i32) {
        self.buf.extend_from_slice(&v.to_be_bytes());
    }

    fn i64(&mut self, v: i64) {
        self.buf.extend_from_slice(&v.to_be_bytes());
    }

    fn string(&mut self, s: &str, field: &'static str) -> Result<()> {
        // Checked rather than truncated: a cut group id or topic would silently become
        // the key of a different group or partition.
        let len = i16::try_from(s.len()).map_err(|_| OffsetsRecordError::TooLong {
            field,
            len: s.len(),
            max: MAX_STRING_LEN,
        })?;
        self.i16(len);
        self.buf.extend_from_slice(s.as_bytes());
        Ok(())
    }

    fn nullable_string(&mut self, s: Option<&str>, field: &'static str) -> Result<()> {
        match s {
            Some(s) => self.string(s, field),
            None => {
                self.i16(-1);
                Ok(())
            }
        }
    }

    fn bytes(&mut self, b: &[u8], field: &'static str) -> Result<()> {
        self.i32(len_i32(b.len(), field)?);
        self.buf.extend_from_slice(b);
        Ok(())
    }
}

// ---------------------------------------------------------------------------------------
// Decoding
// ---------------------------------------------------------------------------------------

/// Decodes a key of version 0, 1 (offset commit) or 2 (group metadata).
pub fn decode_key(bytes: &[u8]) -> Result<RecordKey> {
    let mut r = Reader::new(bytes);
    let version = r.i16("key version")?;
    let key = match version {
        0 | 1 => RecordKey::Offset {
            group: r.string("group")?,
            topic: r.string("topic")?,
            partition: r.i32("partition")?,
        },
        2 => RecordKey::GroupMetadata {
            group: r.string("group")?,
        },
        version => {
            return Err(OffsetsRecordError::UnknownVersion {
                record: "key",
                version,
            })
        }
    };
    r.finish("key")?;
    Ok(key)
}

/// Decodes an `OffsetCommitValue` of version 0–3.
pub fn decode_offset_value(bytes: &[u8]) -> Result<OffsetValue> {
    let mut r = Reader::new(bytes);
    let version = r.i16("offset value version")?;
    if !(0..=3).contains(&version) {
        return Err(OffsetsRecordError::UnknownVersion {
            record: "offset commit value",
            version,
        });
    }
    let offset = r.i64("offset")?;
    let leader_epoch = if version >= 3 {
        r.i32("leader_epoch")?
    } else {
        -1
    };
    let metadata = r.string("metadata")?;
    let commit_timestamp_ms = r.i64("commit_timestamp")?;
    let expire_timestamp_ms = if version == 1 {
        r.i64("expire_timestamp")?
    } else {
        -1
    };
    r.finish("offset commit value")?;
    Ok(OffsetValue {
        offset,
        leader_epoch,
        metadata,
        commit_timestamp_ms,
        expire_timestamp_ms,
    })
}

/// Decodes a `GroupMetadataValue` of version 0–3.
pub fn decode_group_value(bytes: &[u8]) -> Result<GroupValue> {
    let mut r = Reader::new(bytes);
    let version = r.i16("group value version")?;
    if !(0..=3).contains(&version) {
        return Err(OffsetsRecordError::UnknownVersion {
            record: "group metadata value",
            version,
        });
    }
    let protocol_type = r.string("protocol_type")?;
    let generation = r.i32("generation")?;
    let protocol = r.nullable_string("protocol")?;
    let leader = r.nullable_string("leader")?;
    let current_state_timestamp_ms = if version >= 2 {
        r.i64("current_state_timestamp")?
    } else {
        -1
    };
    let count = r.i32("members count")?;
    let count = usize::try_from(count).map_err(|_| OffsetsRecordError::NegativeLength {
        field: "members",
        len: count,
    })?;
    // The count is untrusted: reserve no more members than the remaining bytes could hold.
    let mut members = Vec::with_capacity(count.min(r.remaining() / MIN_MEMBER_LEN));
    for _ in 0..count {
        let member_id = r.string("member_id")?;
        let group_instance_id = if version >= 3 {
            r.nullable_string("group_instance_id")?
        } else {
            None
        };
        let client_id = r.string("client_id")?;
        let client_host = r.string("client_host")?;
        let rebalance_timeout = if version >= 1 {
            Some(r.i32("rebalance_timeout")?)
        } else {
            None
        };
        let session_timeout_ms = r.i32("session_timeout")?;
        members.push(MemberValue {
            member_id,
            group_instance_id,
            client_id,
            client_host,
            // v0 predates a separate rebalance timeout; Kafka uses the session timeout.
            rebalance_timeout_ms: rebalance_timeout.unwrap_or(session_timeout_ms),
            session_timeout_ms,
            subscription: r.bytes("subscription")?,
            assignment: r.bytes("assignment")?,
        });
    }
    r.finish("group metadata value")?;
    Ok(GroupValue {
        protocol_type,
        generation,
        protocol,
        leader,
        current_state_timestamp_ms,
        members,
    })
}

/// A cursor over untrusted bytes: every read checks the bytes present first, so no length
/// from the input can cause a panic or an allocation larger than the input itself.
struct Reader<'a> {
    buf: &'a [u8],
}

impl<'a> Reader<'a> {
    fn new(buf: &'a [u8]) -> Self {
        Self { buf }
    }

    fn remaining(&self) -> usize {
        self.buf.len()
    }

    fn take(&mut self, n: usize, field: &'static str) -> Result<&'a [u8]> {
        if self.buf.len() < n {
            return Err(OffsetsRecordError::Truncated {
                field,
                needed: n,
                remaining: self.buf.len(),
            });
        }
        let (head, tail) = self.buf.split_at(n);
        self.buf = tail;
        Ok(head)
    }

    fn array<const N: usize>(&mut self, field: &'static str) -> Result<[u8; N]> {
        let mut a = [0u8; N];
        a.copy_from_slice(self.take(N, field)?);
        Ok(a)
    }

    fn i16(&mut self, field: &'static str) -> Result<i16> {
        Ok(i16::from_be_bytes(self.array(field)?))
    }

    fn i32(&mut self, field: &'static str) -> Result<i32> {
        Ok(i32::from_be_bytes(self.array(field)?))
    }

    fn i64(&mut self, field: &'static str) -> Result<i64> {
        Ok(i64::from_be_bytes(self.array(field)?))
    }

    fn str_of_len(&mut self, len: usize, field: &'static str) -> Result<String> {
        let raw = self.take(len, field)?;
        std::str::from_utf8(raw)
            .map(str::to_owned)
            .map_err(|_| OffsetsRecordError::InvalidUtf8 { field })
    }

    fn string(&mut self, field: &'static str) -> Result<String> {
        let len = self.i16(field)?;
        let len = usize::try_from(len).map_err(|_| OffsetsRecordError::NegativeLength {
            field,
            len: len.into(),
        })?;
        self.str_of_len(len, field)
    }

    fn nullable_string(&mut self, field: &'static str) -> Result<Option<String>> {
        match self.i16(field)? {
            -1 => Ok(None),
            len => match usize::try_from(len) {
                Ok(len) => self.str_of_len(len, field).map(Some),
                Err(_) => Err(OffsetsRecordError::NegativeLength {
                    field,
                    len: len.into(),
                }),
            },
        }
    }

    fn bytes(&mut self, field: &'static str) -> Result<Bytes> {
        let len = self.i32(field)?;
        let len =
            usize::try_from(len).map_err(|_| OffsetsRecordError::NegativeLength { field, len })?;
        Ok(Bytes::copy_from_slice(self.take(len, field)?))
    }

    /// Every field of a known version is required, so bytes left over mean the record is
    /// not what its version says: corrupt, or from a writer that disagrees on the layout.
    fn finish(&self, record: &'static str) -> Result<()> {
        if self.buf.is_empty() {
            Ok(())
        } else {
            Err(OffsetsRecordError::TrailingBytes {
                record,
                count: self.buf.len(),
            })
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn offset_key() -> RecordKey {
        RecordKey::Offset {
            group: "my-group".into(),
            topic: "orders".into(),
            partition: 7,
        }
    }

    fn offset_value() -> OffsetValue {
        OffsetValue {
            offset: 1_234_567_890_123,
            leader_epoch: 5,
            metadata: "meta-ü".into(),
            commit_timestamp_ms: 1_700_000_000_000,
            expire_timestamp_ms: -1,
        }
    }

    fn group_value() -> GroupValue {
        GroupValue {
            protocol_type: "consumer".into(),
            generation: 3,
            protocol: Some("range".into()),
            leader: Some("m-1".into()),
            current_state_timestamp_ms: 1_700_000_000_001,
            members: vec![
                MemberValue {
                    member_id: "m-1".into(),
                    group_instance_id: Some("instance-a".into()),
                    client_id: "client".into(),
                    client_host: "/10.0.0.1".into(),
                    rebalance_timeout_ms: 300_000,
                    session_timeout_ms: 45_000,
                    subscription: Bytes::from_static(b"\x00\x01sub"),
                    assignment: Bytes::from_static(b"\x00\x01assign"),
                },
                MemberValue {
                    member_id: "m-2".into(),
                    group_instance_id: None,
                    client_id: String::new(),
                    client_host: "/10.0.0.2".into(),
                    rebalance_timeout_ms: 60_000,
                    session_timeout_ms: 10_000,
                    subscription: Bytes::new(),
                    assignment: Bytes::new(),
                },
            ],
        }
    }

    /// Hand-built bytes in the wire format, independent of the encoder under test.
    #[derive(Default)]
    struct Raw(Vec<u8>);

    impl Raw {
        fn i16(mut self, v: i16) -> Self {
            self.0.extend_from_slice(&v.to_be_bytes());
            self
        }
        fn i32(mut self, v: i32) -> Self {
            self.0.extend_from_slice(&v.to_be_bytes());
            self
        }
        fn i64(mut self, v: i64) -> Self {
            self.0.extend_from_slice(&v.to_be_bytes());
            self
        }
        fn str(self, s: &str) -> Self {
            self.i16(s.len() as i16).raw(s.as_bytes())
        }
        fn bytes(self, b: &[u8]) -> Self {
            self.i32(b.len() as i32).raw(b)
        }
        fn raw(mut self, b: &[u8]) -> Self {
            self.0.extend_from_slice(b);
            self
        }
    }

    #[test]
    fn keys_round_trip() {
        for key in [
            offset_key(),
            RecordKey::GroupMetadata {
                group: "my-group".into(),
            },
            RecordKey::Offset {
                group: String::new(),
                topic: "t".into(),
                partition: -1,
            },
        ] {
            assert_eq!(decode_key(&encode_key(&key)), Ok(key));
        }
    }

    #[test]
    fn keys_have_kafkas_layout() {
        let expected = Raw::default().i16(1).str("my-group").str("orders").i32(7).0;
        assert_eq!(encode_key(&offset_key()), expected);
        let group = RecordKey::GroupMetadata { group: "g".into() };
        assert_eq!(encode_key(&group), vec![0, 2, 0, 1, b'g']);
    }

    #[test]
    fn offset_key_version_0_decodes() {
        let bytes = Raw::default().i16(0).str("my-group").str("orders").i32(7).0;
        assert_eq!(decode_key(&bytes), Ok(offset_key()));
    }

    #[test]
    fn unknown_key_versions_are_errors() {
        for version in [-1i16, 3, 4, i16::MAX] {
            let bytes = Raw::default().i16(version).str("g").0;
            assert_eq!(
                decode_key(&bytes),
                Err(OffsetsRecordError::UnknownVersion {
                    record: "key",
                    version
                })
            );
        }
    }

    #[test]
    fn offset_value_round_trips_as_v3() {
        let v = offset_value();
        let bytes = encode_offset_value(&v);
        let expected = Raw::default()
            .i16(3)
            .i64(v.offset)
            .i32(5)
            .str("meta-ü")
            .i64(v.commit_timestamp_ms)
            .0;
        assert_eq!(bytes, expected);
        assert_eq!(decode_offset_value(&bytes), Ok(v));

        let empty = OffsetValue {
            offset: 0,
            leader_epoch: -1,
            metadata: String::new(),
            commit_timestamp_ms: 0,
            expire_timestamp_ms: -1,
        };
        assert_eq!(decode_offset_value(&encode_offset_value(&empty)), Ok(empty));
    }

    #[test]
    fn expire_timestamp_is_not_written() {
        // v3 has no such field: documented loss, pinned so a change is deliberate.
        let v = OffsetValue {
            expire_timestamp_ms: 99,
            ..offset_value()
        };
        let decoded = decode_offset_value(&encode_offset_value(&v)).expect("test data decodes");
        assert_eq!(decoded.expire_timestamp_ms, -1);
        assert_eq!(decoded.offset, v.offset);
    }

    #[test]
    fn offset_value_older_versions_decode() {
        let v0 = Raw::default().i16(0).i64(42).str("m").i64(1000).0;
        let v1 = Raw::default().i16(1).i64(42).str("m").i64(1000).i64(2000).0;
        let v2 = Raw::default().i16(2).i64(42).str("m").i64(1000).0;
        let expect = |expire| OffsetValue {
            offset: 42,
            leader_epoch: -1,
            metadata: "m".into(),
            commit_timestamp_ms: 1000,
            expire_timestamp_ms: expire,
        };
        assert_eq!(decode_offset_value(&v0), Ok(expect(-1)));
        assert_eq!(decode_offset_value(&v1), Ok(expect(2000)));
        assert_eq!(decode_offset_value(&v2), Ok(expect(-1)));
    }

    #[test]
    fn offset_value_unknown_versions_are_errors() {
        // 4 is Kafka's first flexible version: not read (its tagged fields would be
        // mistaken for trailing garbage anyway).
        for version in [-1i16, 4, 5] {
            let bytes = Raw::default().i16(version).i64(1).i32(-1).str("").i64(0).0;
            assert!(matches!(
                decode_offset_value(&bytes),
                Err(OffsetsRecordError::UnknownVersion { version: v, .. }) if v == version
            ));
        }
    }

    #[test]
    fn group_value_round_trips_as_v3() {
        let v = group_value();
        let bytes = encode_group_value(&v);
        assert_eq!(&bytes[..2], &[0, 3]);
        assert_eq!(decode_group_value(&bytes), Ok(v));

        let empty = GroupValue {
            protocol_type: String::new(),
            generation: 0,
            protocol: None,
            leader: None,
            current_state_timestamp_ms: -1,
            members: Vec::new(),
        };
        assert_eq!(decode_group_value(&encode_group_value(&empty)), Ok(empty));
    }

    #[test]
    fn group_value_has_kafkas_layout() {
        let v = group_value();
        let m0 = &v.members[0];
        let m1 = &v.members[1];
        let expected = Raw::default()
            .i16(3)
            .str("consumer")
            .i32(3)
            .str("range")
            .str("m-1")
            .i64(v.current_state_timestamp_ms)
            .i32(2)
            .str("m-1")
            .str("instance-a")
            .str("client")
            .str("/10.0.0.1")
            .i32(m0.rebalance_timeout_ms)
            .i32(m0.session_timeout_ms)
            .bytes(&m0.subscription)
            .bytes(&m0.assignment)
            .str("m-2")
            .i16(-1)
            .str("")
            .str("/10.0.0.2")
            .i32(m1.rebalance_timeout_ms)
            .i32(m1.session_timeout_ms)
            .bytes(b"")
            .bytes(b"")
            .0;
        assert_eq!(encode_group_value(&v), expected);
    }

    /// One member, laid out for `version`.
    fn group_bytes(version: i16) -> Vec<u8> {
        let mut r = Raw::default()
            .i16(version)
            .str("consumer")
            .i32(9)
            .i16(-1)
            .str("L");
        if version >= 2 {
            r = r.i64(777);
        }
        r = r.i32(1).str("L");
        if version >= 3 {
            r = r.str("static-1");
        }
        r = r.str("cid").str("/h");
        if version >= 1 {
            r = r.i32(60_000);
        }
        r.i32(10_000).bytes(b"s").bytes(b"a").0
    }

    #[test]
    fn group_value_older_versions_decode() {
        for version in 0..=3i16 {
            let g = decode_group_value(&group_bytes(version)).expect("test data decodes");
            assert_eq!(g.protocol_type, "consumer");
            assert_eq!(g.generation, 9);
            assert_eq!(g.protocol, None);
            assert_eq!(g.leader.as_deref(), Some("L"));
            let ts = if version >= 2 { 777 } else { -1 };
            assert_eq!(g.current_state_timestamp_ms, ts, "v{version}");
            let m = &g.members[..];
            assert_eq!(m.len(), 1);
            let instance = (version >= 3).then(|| "static-1".to_string());
            assert_eq!(m[0].group_instance_id, instance, "v{version}");
            // v0 has no rebalance timeout: the session timeout stands in, as in Kafka.
            let rebalance = if version >= 1 { 60_000 } else { 10_000 };
            assert_eq!(m[0].rebalance_timeout_ms, rebalance, "v{version}");
            assert_eq!(m[0].session_timeout_ms, 10_000);
            assert_eq!(m[0].client_id, "cid");
            assert_eq!(m[0].client_host, "/h");
            assert_eq!(&m[0].subscription[..], b"s");
            assert_eq!(&m[0].assignment[..], b"a");
        }
    }

    #[test]
    fn group_value_unknown_versions_are_errors() {
        for version in [-1i16, 4] {
            let mut bytes = group_bytes(3);
            bytes[..2].copy_from_slice(&version.to_be_bytes());
            assert!(matches!(
                decode_group_value(&bytes),
                Err(OffsetsRecordError::UnknownVersion { version: v, .. }) if v == version
            ));
        }
    }

    #[test]
    fn every_truncation_is_an_error() {
        type Fails = fn(&[u8]) -> bool;
        let records: Vec<(Vec<u8>, Fails)> = vec![
            (encode_key(&offset_key()), |b| decode_key(b).is_err()),
            (
                encode_key(&RecordKey::GroupMetadata { group: "g".into() }),
                |b| decode_key(b).is_err(),
            ),
            (encode_offset_value(&offset_value()), |b| {
                decode_offset_value(b).is_err()
            }),
            (Raw::default().i16(1).i64(1).str("m").i64(2).i64(3).0, |b| {
                decode_offset_value(b).is_err()
            }),
            (encode_group_value(&group_value()), |b| {
                decode_group_value(b).is_err()
            }),
            (group_bytes(0), |b| decode_group_value(b).is_err()),
        ];
        for (bytes, fails) in records {
            for len in 0..bytes.len() {
                assert!(
                    fails(&bytes[..len]),
                    "prefix of {len}/{} bytes",
                    bytes.len()
                );
            }
            assert!(!fails(&bytes), "the whole record decodes");
        }
    }

    #[test]
    fn truncation_reports_the_field() {
        let bytes = encode_key(&offset_key());
        assert_eq!(
            decode_key(&bytes[..bytes.len() - 1]),
            Err(OffsetsRecordError::Truncated {
                field: "partition",
                needed: 4,
                remaining: 3
            })
        );
    }

    #[test]
    fn trailing_bytes_are_an_error() {
        let mut bytes = encode_offset_value(&offset_value());
        bytes.push(0);
        assert_eq!(
            decode_offset_value(&bytes),
            Err(OffsetsRecordError::TrailingBytes {
                record: "offset commit value",
                count: 1
            })
        );
        let mut key = encode_key(&offset_key());
        key.extend_from_slice(&[1, 2]);
        assert!(matches!(
            decode_key(&key),
            Err(OffsetsRecordError::TrailingBytes { count: 2, .. })
        ));
    }

    #[test]
    fn negative_and_null_lengths_are_errors() {
        // Null in a non-nullable string.
        let key = Raw::default().i16(2).i16(-1).0;
        assert_eq!(
            decode_key(&key),
            Err(OffsetsRecordError::NegativeLength {
                field: "group",
                len: -1
            })
        );
        // Below -1 in a nullable string.
        let g = Raw::default().i16(3).str("c").i32(1).i16(-2).0;
        assert_eq!(
            decode_group_value(&g),
            Err(OffsetsRecordError::NegativeLength {
                field: "protocol",
                len: -2
            })
        );
        // Negative member count.
        let g = Raw::default()
            .i16(3)
            .str("c")
            .i32(1)
            .i16(-1)
            .i16(-1)
            .i64(0)
            .i32(-1)
            .0;
        assert_eq!(
            decode_group_value(&g),
            Err(OffsetsRecordError::NegativeLength {
                field: "members",
                len: -1
            })
        );
        // Negative byte-array length.
        let g = Raw::default()
            .i16(0)
            .str("c")
            .i32(1)
            .i16(-1)
            .i16(-1)
            .i32(1)
            .str("m")
            .str("c")
            .str("h")
            .i32(1)
            .i32(i32::MIN)
            .0;
        assert_eq!(
            decode_group_value(&g),
            Err(OffsetsRecordError::NegativeLength {
                field: "subscription",
                len: i32::MIN
            })
        );
    }

    #[test]
    fn huge_lengths_fail_without_allocating() {
        // Each claims far more than is present; a decoder that trusted the length would
        // allocate gigabytes (or panic) before noticing.
        let key = Raw::default().i16(2).i16(i16::MAX).raw(b"abc").0;
        assert!(matches!(
            decode_key(&key),
            Err(OffsetsRecordError::Truncated { needed: 32767, .. })
        ));
        let g = Raw::default()
            .i16(3)
            .str("c")
            .i32(1)
            .i16(-1)
            .i16(-1)
            .i64(0)
            .i32(i32::MAX)
            .0;
        assert!(matches!(
            decode_group_value(&g),
            Err(OffsetsRecordError::Truncated { .. })
        ));
        let g = Raw::default()
            .i16(0)
            .str("c")
            .i32(1)
            .i16(-1)
            .i16(-1)
            .i32(1)
            .str("m")
            .str("c")
            .str("h")
            .i32(1)
            .i32(i32::MAX)
            .0;
        assert!(matches!(
            decode_group_value(&g),
            Err(OffsetsRecordError::Truncated {
                field: "subscription",
                ..
            })
        ));
    }

    #[test]
    fn invalid_utf8_is_an_error() {
        let key = Raw::default().i16(2).i16(2).raw(&[0xc3, 0x28]).0;
        assert_eq!(
            decode_key(&key),
            Err(OffsetsRecordError::InvalidUtf8 { field: "group" })
        );
    }

    #[test]
    fn oversized_strings_are_refused_not_truncated() {
        let long = "x".repeat(MAX_STRING_LEN + 1);
        let key = RecordKey::GroupMetadata { group: long };
        assert_eq!(
            try_encode_key(&key),
            Err(OffsetsRecordError::TooLong {
                field: "group",
                len: MAX_STRING_LEN + 1,
                max: MAX_STRING_LEN
            })
        );
        let v = OffsetValue {
            metadata: "y".repeat(MAX_STRING_LEN + 1),
            ..offset_value()
        };
        assert!(try_encode_offset_value(&v).is_err());
        // The limit itself is fine.
        let max = RecordKey::GroupMetadata {
            group: "z".repeat(MAX_STRING_LEN),
        };
        assert_eq!(decode_key(&encode_key(&max)), Ok(max));
    }

    fn arb_string() -> impl Strategy<Value = String> {
        proptest::collection::vec(any::<char>(), 0..12).prop_map(|c| c.into_iter().collect())
    }

    fn arb_bytes() -> impl Strategy<Value = Bytes> {
        proptest::collection::vec(any::<u8>(), 0..24).prop_map(Bytes::from)
    }

    fn arb_member() -> impl Strategy<Value = MemberValue> {
        (
            (arb_string(), proptest::option::of(arb_string())),
            (arb_string(), arb_string()),
            (any::<i32>(), any::<i32>()),
            (arb_bytes(), arb_bytes()),
        )
            .prop_map(
                |((id, inst), (cid, host), (rt, st), (sub, asg))| MemberValue {
                    member_id: id,
                    group_instance_id: inst,
                    client_id: cid,
                    client_host: host,
                    rebalance_timeout_ms: rt,
                    session_timeout_ms: st,
                    subscription: sub,
                    assignment: asg,
                },
            )
    }

    proptest! {
        #[test]
        fn prop_keys_round_trip(group in arb_string(), topic in arb_string(), p in any::<i32>(),
                                is_offset in any::<bool>()) {
            let key = if is_offset {
                RecordKey::Offset { group, topic, partition: p }
            } else {
                RecordKey::GroupMetadata { group }
            };
            prop_assert_eq!(decode_key(&encode_key(&key)), Ok(key));
        }

        #[test]
        fn prop_offset_values_round_trip(offset in any::<i64>(), epoch in any::<i32>(),
                                         metadata in arb_string(), ts in any::<i64>()) {
            let v = OffsetValue {
                offset,
                leader_epoch: epoch,
                metadata,
                commit_timestamp_ms: ts,
                expire_timestamp_ms: -1,
            };
            prop_assert_eq!(decode_offset_value(&encode_offset_value(&v)), Ok(v));
        }

        #[test]
        fn prop_group_values_round_trip(protocol_type in arb_string(), generation in any::<i32>(),
                                        protocol in proptest::option::of(arb_string()),
                                        leader in proptest::option::of(arb_string()),
                                        ts in any::<i64>(),
                                        members in proptest::collection::vec(arb_member(), 0..4)) {
            let v = GroupValue {
                protocol_type,
                generation,
                protocol,
                leader,
                current_state_timestamp_ms: ts,
                members,
            };
            prop_assert_eq!(decode_group_value(&encode_group_value(&v)), Ok(v));
        }

        #[test]
        fn prop_arbitrary_bytes_never_panic(bytes in proptest::collection::vec(any::<u8>(), 0..96),
                                            version in 0i16..=3) {
            // Steer half the inputs past the version check so the field readers get fuzzed.
            let mut steered = version.to_be_bytes().to_vec();
            steered.extend_from_slice(&bytes);
            for b in [&bytes[..], &steered[..]] {
                let _ = decode_key(b);
                let _ = decode_offset_value(b);
                let _ = decode_group_value(b);
            }
        }
    }
}
