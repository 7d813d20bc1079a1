//! The records of `__share_group_state` as Kafka lays them out (`ShareSnapshotKey/Value`,
//! `ShareUpdateKey/Value`), so the share state of a partition survives its coordinator
//! moving, and Kafka's tools read the topic.
//!
//! Key: `int16` record type (0 snapshot, 1 update), then the group id (`int16`-length
//! string), the topic id (16 bytes) and the partition (`int32`). Value (`int16` version
//! 0, flexible): a snapshot's snapshot epoch, state epoch, leader epoch, start offset,
//! create and write timestamps and state batches; an update's snapshot epoch, leader
//! epoch, start offset and state batches; a batch is first and last offset, delivery
//! state (`int8`) and delivery count (`int16`). The delivery-complete count is the
//! value's tag 0, written only when known (not -1), as Kafka writes it. A tombstone is a
//! snapshot key without a value.
//!
//! Invariants: `decode(encode(x)) == x`; decoding never panics on any input.

use super::partition::{RecordState, StateBatch};
use super::state::StateRecord;
use crate::coordinator_record::{Reader, RecordError, Result, Writer};
use uuid::Uuid;

pub const SNAPSHOT: i16 = 0;
pub const UPDATE: i16 = 1;

/// Which share partition a record is about.
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct ShareKey {
    pub group: String,
    pub topic: Uuid,
    pub partition: i32,
}

/// A record's key: its type and share partition.
pub fn encode_key(record_type: i16, key: &ShareKey) -> Result<Vec<u8>> {
    let mut w = Writer(Vec::new());
    w.i16(record_type);
    let len = i16::try_from(key.group.len()).map_err(|_| RecordError::TooLong)?;
    w.i16(len);
    w.0.extend_from_slice(key.group.as_bytes());
    w.uuid(key.topic);
    w.i32(key.partition);
    Ok(w.0)
}

pub fn decode_key(bytes: &[u8]) -> Result<(i16, ShareKey)> {
    let mut r = Reader(bytes);
    let record_type = r.i16()?;
    if record_type != SNAPSHOT && record_type != UPDATE {
        return Err(RecordError::UnknownVersion(record_type));
    }
    let key = ShareKey {
        group: r.key_string()?,
        topic: r.uuid()?,
        partition: r.i32()?,
    };
    r.end()?;
    Ok((record_type, key))
}

/// A record's value; its key's type is [`record_type`].
pub fn encode_value(record: &StateRecord) -> Vec<u8> {
    let mut w = Writer(Vec::new());
    w.i16(0);
    let dcc = match record {
        StateRecord::Snapshot {
            snapshot_epoch,
            state_epoch,
            leader_epoch,
            start_offset,
            delivery_complete_count,
            create_timestamp_ms,
            write_timestamp_ms,
            batches,
        } => {
            w.i32(*snapshot_epoch);
            w.i32(*state_epoch);
            w.i32(*leader_epoch);
            w.i64(*start_offset);
            w.i64(*create_timestamp_ms);
            w.i64(*write_timestamp_ms);
            write_batches(&mut w, batches);
            *delivery_complete_count
        }
        StateRecord::Update {
            snapshot_epoch,
            leader_epoch,
            start_offset,
            delivery_complete_count,
            batches,
        } => {
            w.i32(*snapshot_epoch);
            w.i32(*leader_epoch);
            w.i64(*start_offset);
            write_batches(&mut w, batches);
            *delivery_complete_count
        }
    };
    if dcc == -1 {
        w.no_tags();
    } else {
        w.uvarint(1);
        w.uvarint(0);
        w.uvarint(4);
        w.i32(dcc);
    }
    w.0
}

/// The key type a record is written under.
pub fn record_type(record: &StateRecord) -> i16 {
    match record {
        StateRecord::Snapshot { .. } => SNAPSHOT,
        StateRecord::Update { .. } => UPDATE,
    }
}

pub fn decode_value(record_type: i16, bytes: &[u8]) -> Result<StateRecord> {
    let mut r = Reader(bytes);
    match r.i16()? {
        0 => {}
        v => return Err(RecordError::UnknownVersion(v)),
    }
    let mut record = match record_type {
        SNAPSHOT => StateRecord::Snapshot {
            snapshot_epoch: r.i32()?,
            state_epoch: r.i32()?,
            leader_epoch: r.i32()?,
            start_offset: r.i64()?,
            create_timestamp_ms: r.i64()?,
            write_timestamp_ms: r.i64()?,
            batches: read_batches(&mut r)?,
            delivery_complete_count: -1,
        },
        UPDATE => StateRecord::Update {
            snapshot_epoch: r.i32()?,
            leader_epoch: r.i32()?,
            start_offset: r.i64()?,
            batches: read_batches(&mut r)?,
            delivery_complete_count: -1,
        },
        other => return Err(RecordError::UnknownVersion(other)),
    };
    // Tagged fields: tag 0 is the delivery-complete count; others are skipped.
    for _ in 0..r.uvarint()? {
        let tag = r.uvarint()?;
        let size = usize::try_from(r.uvarint()?).map_err(|_| RecordError::Truncated)?;
        let mut field = Reader(r.take(size)?);
        if tag == 0 {
            let v = field.i32()?;
            field.end()?;
            match &mut record {
                StateRecord::Snapshot {
                    delivery_complete_count,
                    ..
                }
                | StateRecord::Update {
                    delivery_complete_count,
                    ..
                } => *delivery_complete_count = v,
            }
        }
    }
    r.end()?;
    Ok(record)
}

fn write_batches(w: &mut Writer, batches: &[StateBatch]) {
    w.len(batches.len());
    for b in batches {
        w.i64(b.first);
        w.i64(b.last);
        w.i8(b.state.id());
        w.i16(i16::try_from(b.deliveries).unwrap_or(i16::MAX));
        w.no_tags();
    }
}

fn read_batches(r: &mut Reader<'_>) -> Result<Vec<StateBatch>> {
    let n = r.len()?;
    let mut out = Vec::new();
    for _ in 0..n {
        let first = r.i64()?;
        let last = r.i64()?;
        let state = RecordState::from_id(r.i8()?).ok_or(RecordError::UnexpectedNull)?;
        let deliveries = u16::try_from(r.i16()?.max(0)).unwrap_or(0);
        r.skip_tags()?;
        out.push(StateBatch {
            first,
            last,
            state,
            deliveries,
        });
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn snapshot(dcc: i32) -> StateRecord {
        StateRecord::Snapshot {
            snapshot_epoch: 3,
            state_epoch: 2,
            leader_epoch: 7,
            start_offset: 100,
            delivery_complete_count: dcc,
            create_timestamp_ms: 1_700_000_000_000,
            write_timestamp_ms: 1_700_000_000_500,
            batches: vec![StateBatch {
                first: 100,
                last: 104,
                state: RecordState::Archived,
                deliveries: 5,
            }],
        }
    }

    #[test]
    fn keys_and_values_round_trip_with_and_without_the_tag() {
        let key = ShareKey {
            group: "g".into(),
            topic: Uuid::from_u128(9),
            partition: 3,
        };
        let kb = encode_key(SNAPSHOT, &key).expect("a key");
        assert_eq!(&kb[..5], &[0, 0, 0, 1, b'g']);
        assert_eq!(decode_key(&kb), Ok((SNAPSHOT, key)));
        for dcc in [-1, 4] {
            let v = snapshot(dcc);
            let bytes = encode_value(&v);
            assert_eq!(decode_value(record_type(&v), &bytes), Ok(v));
        }
        // Without the count the value ends with an empty tag section.
        assert_eq!(encode_value(&snapshot(-1)).last(), Some(&0));
        let u = StateRecord::Update {
            snapshot_epoch: 3,
            leader_epoch: 8,
            start_offset: -1,
            delivery_complete_count: 2,
            batches: Vec::new(),
        };
        assert_eq!(decode_value(UPDATE, &encode_value(&u)), Ok(u));
    }

    proptest! {
        #[test]
        fn arbitrary_bytes_never_panic(bytes in proptest::collection::vec(any::<u8>(), 0..120)) {
            let _ = decode_key(&bytes);
            let _ = decode_value(SNAPSHOT, &bytes);
            let _ = decode_value(UPDATE, &bytes);
        }

        #[test]
        fn truncated_values_are_refused(cut in 0usize..60) {
            let b = encode_value(&snapshot(4));
            if cut < b.len() {
                prop_assert!(decode_value(SNAPSHOT, &b[..cut]).is_err());
            }
        }
    }
}
