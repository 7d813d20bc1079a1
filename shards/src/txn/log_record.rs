//! The key/value codec of the records in the internal compacted topic
//! `__transaction_state`.
//!
//! Owns the byte layout, and nothing else, of the one record a transaction coordinator
//! persists per transactional id, laid out as Apache Kafka lays it out
//! (`TransactionLogKey` v0 and `TransactionLogValue` v0–v1 in Kafka's
//! `transaction-coordinator/src/main/resources/common/message/*.json`), so that a data
//! directory's transaction log reads like Kafka's.
//!
//! Layout. Every key and value starts with a big-endian `int16` schema version.
//! - Key v0: `transactional_id` (`int16` length + UTF-8).
//! - Value v0: `producer_id: int64, producer_epoch: int16, timeout_ms: int32,
//!   state: int8, partitions: [topic: string, partition_ids: [int32]]? (null while Empty),
//!   last_update_ms: int64, start_ms: int64`; strings `int16` length + UTF-8, arrays
//!   `int32` count (-1: null).
//! - Value v1 (flexible): the same fields with compact strings and arrays (unsigned
//!   varint length + 1; 0: null), an empty tagged-field section after each partitions
//!   entry, and tagged fields at the end: 0 `previous_producer_id: int64` (default -1),
//!   1 `next_producer_id: int64` (-1), 2 `client_transaction_version: int16` (0).
//!
//! Invariants:
//! - Written: key v0; value v1, or v0 where the cluster's `transaction.version` is 0. A
//!   tagged field is written only when it differs from its default, as Kafka writes them.
//! - Round trip: `decode_value(&encode_value(v, version)) == Ok(v)` for both versions,
//!   except that v0 cannot carry the tagged fields (they decode to their defaults).
//! - Decoding treats its input as untrusted (it comes from disk): it never panics, never
//!   allocates more than the bytes present, and rejects a truncated record, a negative
//!   length where none may be, an unknown state, invalid UTF-8 and trailing bytes.
//!   Unknown tagged fields are skipped, as a newer Kafka's records may carry them.
//!
//! Not here: what a record means to the coordinator (`state`), tombstones (a null value
//! deletes its key; no decoder is called), and the record batches themselves.

use super::state::{Transit, TxnState};
use std::collections::BTreeMap;

pub const KEY_VERSION: i16 = 0;

/// A transactional id's record value.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct TxnLogValue {
    pub producer_id: i64,
    pub producer_epoch: i16,
    pub timeout_ms: i32,
    pub state: TxnState,
    /// Topic → partitions; `None` is written while Empty (Kafka's null).
    pub partitions: Option<BTreeMap<String, Vec<i32>>>,
    pub last_update_ms: i64,
    pub start_ms: i64,
    pub previous_producer_id: i64,
    pub next_producer_id: i64,
    pub client_transaction_version: i16,
}

#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum TxnRecordError {
    #[error("record truncated")]
    Truncated,
    #[error("unknown {what} version {version}")]
    UnknownVersion { what: &'static str, version: i16 },
    #[error("invalid length {0}")]
    BadLength(i64),
    #[error("unknown transaction state {0}")]
    UnknownState(i8),
    #[error("invalid UTF-8")]
    Utf8,
    #[error("{0} trailing bytes")]
    Trailing(usize),
    #[error("a string of {0} bytes cannot be encoded")]
    TooLong(usize),
}

type Result<T> = std::result::Result<T, TxnRecordError>;

/// The record value of a transition (`Transit`): partitions grouped by topic, none
/// (null) while Empty, the version 2 mark as client transaction version 2.
pub fn value_of(t: &Transit) -> TxnLogValue {
    let partitions = (t.state != TxnState::Empty).then(|| {
        let mut topics: BTreeMap<String, Vec<i32>> = BTreeMap::new();
        for (topic, p) in &t.partitions {
            topics.entry(topic.clone()).or_default().push(*p);
        }
        topics
    });
    TxnLogValue {
        producer_id: t.producer_id,
        producer_epoch: t.producer_epoch,
        timeout_ms: t.timeout_ms,
        state: t.state,
        partitions,
        last_update_ms: t.update_ms,
        start_ms: t.start_ms,
        previous_producer_id: t.previous_producer_id,
        next_producer_id: t.next_producer_id,
        client_transaction_version: if t.tv2 { 2 } else { 0 },
    }
}

/// The transition a record value describes, as a coordinator loading the log takes it
/// up. The epoch before the last bump is not stored (Kafka's neither): it is unknown
/// (-1) after a load.
pub fn transit_of(v: &TxnLogValue) -> Transit {
    let partitions = v
        .partitions
        .iter()
        .flat_map(|topics| topics.iter())
        .flat_map(|(topic, ps)| ps.iter().map(move |p| (topic.clone(), *p)))
        .collect();
    Transit {
        producer_id: v.producer_id,
        previous_producer_id: v.previous_producer_id,
        next_producer_id: v.next_producer_id,
        producer_epoch: v.producer_epoch,
        last_producer_epoch: -1,
        timeout_ms: v.timeout_ms,
        state: v.state,
        partitions,
        start_ms: v.start_ms,
        update_ms: v.last_update_ms,
        tv2: v.client_transaction_version >= 2,
    }
}

/// The value version a transition is written in: 1 (flexible, with the tagged fields)
/// when it carries anything only version 1 can hold, else 0.
pub fn value_version(t: &Transit) -> i16 {
    if t.tv2 || t.next_producer_id != -1 || t.previous_producer_id != -1 {
        1
    } else {
        0
    }
}

/// A key: `int16` version 0 and the transactional id.
pub fn encode_key(transactional_id: &str) -> Result<Vec<u8>> {
    let mut out = Vec::with_capacity(4 + transactional_id.len());
    out.extend_from_slice(&KEY_VERSION.to_be_bytes());
    put_string(&mut out, transactional_id)?;
    Ok(out)
}

pub fn decode_key(bytes: &[u8]) -> Result<String> {
    let mut r = Reader(bytes);
    let version = r.i16()?;
    if version != KEY_VERSION {
        return Err(TxnRecordError::UnknownVersion {
            what: "key",
            version,
        });
    }
    let id = r.string()?;
    r.end()?;
    Ok(id)
}

/// A value in `version` (0, or 1: flexible).
pub fn encode_value(v: &TxnLogValue, version: i16) -> Result<Vec<u8>> {
    assert!(version == 0 || version == 1, "value versions are 0 and 1");
    let flexible = version == 1;
    let mut out = Vec::with_capacity(64);
    out.extend_from_slice(&version.to_be_bytes());
    out.extend_from_slice(&v.producer_id.to_be_bytes());
    out.extend_from_slice(&v.producer_epoch.to_be_bytes());
    out.extend_from_slice(&v.timeout_ms.to_be_bytes());
    out.push(v.state.id() as u8);
    match &v.partitions {
        None if flexible => put_uvarint(&mut out, 0),
        None => out.extend_from_slice(&(-1i32).to_be_bytes()),
        Some(topics) => {
            put_len(&mut out, topics.len(), flexible);
            for (topic, ids) in topics {
                if flexible {
                    put_compact_string(&mut out, topic);
                } else {
                    put_string(&mut out, topic)?;
                }
                put_len(&mut out, ids.len(), flexible);
                for id in ids {
                    out.extend_from_slice(&id.to_be_bytes());
                }
                if flexible {
                    put_uvarint(&mut out, 0); // the entry's tagged fields
                }
            }
        }
    }
    out.extend_from_slice(&v.last_update_ms.to_be_bytes());
    out.extend_from_slice(&v.start_ms.to_be_bytes());
    if flexible {
        let mut tags: Vec<(u32, Vec<u8>)> = Vec::new();
        if v.previous_producer_id != -1 {
            tags.push((0, v.previous_producer_id.to_be_bytes().to_vec()));
        }
        if v.next_producer_id != -1 {
            tags.push((1, v.next_producer_id.to_be_bytes().to_vec()));
        }
        if v.client_transaction_version != 0 {
            tags.push((2, v.client_transaction_version.to_be_bytes().to_vec()));
        }
        put_uvarint(&mut out, tags.len() as u32);
        for (tag, data) in tags {
            put_uvarint(&mut out, tag);
            put_uvarint(&mut out, data.len() as u32);
            out.extend_from_slice(&data);
        }
    }
    Ok(out)
}

pub fn decode_value(bytes: &[u8]) -> Result<TxnLogValue> {
    let mut r = Reader(bytes);
    let version = r.i16()?;
    if version != 0 && version != 1 {
        return Err(TxnRecordError::UnknownVersion {
            what: "value",
            version,
        });
    }
    let flexible = version == 1;
    let producer_id = r.i64()?;
    let producer_epoch = r.i16()?;
    let timeout_ms = r.i32()?;
    let state_id = r.take(1)?[0] as i8;
    let state = TxnState::from_id(state_id).ok_or(TxnRecordError::UnknownState(state_id))?;
    let partitions = match r.len(flexible)? {
        None => None,
        Some(n) => {
            let mut topics = BTreeMap::new();
            for _ in 0..n {
                let topic = if flexible {
                    r.compact_string()?
                } else {
                    r.string()?
                };
                let count = r.len(flexible)?.ok_or(TxnRecordError::BadLength(-1))?;
                r.need(count.saturating_mul(4))?;
                let ids: Vec<i32> = (0..count).map(|_| r.i32()).collect::<Result<_>>()?;
                if flexible {
                    r.skip_tags()?;
                }
                topics.insert(topic, ids);
            }
            Some(topics)
        }
    };
    let last_update_ms = r.i64()?;
    let start_ms = r.i64()?;
    let mut v = TxnLogValue {
        producer_id,
        producer_epoch,
        timeout_ms,
        state,
        partitions,
        last_update_ms,
        start_ms,
        previous_producer_id: -1,
        next_producer_id: -1,
        client_transaction_version: 0,
    };
    if flexible {
        let count = r.uvarint()?;
        for _ in 0..count {
            let tag = r.uvarint()?;
            let size = r.uvarint()? as usize;
            let mut data = Reader(r.take(size)?);
            match tag {
                0 => v.previous_producer_id = data.i64()?,
                1 => v.next_producer_id = data.i64()?,
                2 => v.client_transaction_version = data.i16()?,
                _ => continue, // a newer writer's field
            }
            data.end()?;
        }
    }
    r.end()?;
    Ok(v)
}

fn put_string(out: &mut Vec<u8>, s: &str) -> Result<()> {
    let len = i16::try_from(s.len()).map_err(|_| TxnRecordError::TooLong(s.len()))?;
    out.extend_from_slice(&len.to_be_bytes());
    out.extend_from_slice(s.as_bytes());
    Ok(())
}

fn put_compact_string(out: &mut Vec<u8>, s: &str) {
    put_uvarint(out, s.len() as u32 + 1);
    out.extend_from_slice(s.as_bytes());
}

fn put_len(out: &mut Vec<u8>, n: usize, flexible: bool) {
    if flexible {
        put_uvarint(out, n as u32 + 1);
    } else {
        out.extend_from_slice(&(n as i32).to_be_bytes());
    }
}

fn put_uvarint(out: &mut Vec<u8>, mut v: u32) {
    while v >= 0x80 {
        out.push((v as u8) | 0x80);
        v >>= 7;
    }
    out.push(v as u8);
}

/// Reads from the front of untrusted bytes.
struct Reader<'a>(&'a [u8]);

impl<'a> Reader<'a> {
    fn need(&self, n: usize) -> Result<()> {
        if self.0.len() < n {
            return Err(TxnRecordError::Truncated);
        }
        Ok(())
    }

    fn take(&mut self, n: usize) -> Result<&'a [u8]> {
        self.need(n)?;
        let (head, rest) = self.0.split_at(n);
        self.0 = rest;
        Ok(head)
    }

    fn i16(&mut self) -> Result<i16> {
        Ok(i16::from_be_bytes(
            self.take(2)?.try_into().expect("2 bytes"),
        ))
    }

    fn i32(&mut self) -> Result<i32> {
        Ok(i32::from_be_bytes(
            self.take(4)?.try_into().expect("4 bytes"),
        ))
    }

    fn i64(&mut self) -> Result<i64> {
        Ok(i64::from_be_bytes(
            self.take(8)?.try_into().expect("8 bytes"),
        ))
    }

    fn uvarint(&mut self) -> Result<u32> {
        let mut v: u32 = 0;
        for shift in (0..35).step_by(7) {
            let b = self.take(1)?[0];
            v |= u32::from(b & 0x7f).checked_shl(shift).unwrap_or(0);
            if b & 0x80 == 0 {
                return Ok(v);
            }
        }
        Err(TxnRecordError::BadLength(i64::from(v)))
    }

    /// An array length: `int32` (-1 null), or compact (`uvarint` length + 1, 0 null).
    fn len(&mut self, flexible: bool) -> Result<Option<usize>> {
        let n = if flexible {
            i64::from(self.uvarint()?) - 1
        } else {
            i64::from(self.i32()?)
        };
        match n {
            -1 => Ok(None),
            n if n < 0 => Err(TxnRecordError::BadLength(n)),
            n => Ok(Some(n as usize)),
        }
    }

    fn utf8(&mut self, n: usize) -> Result<String> {
        let bytes = self.take(n)?;
        String::from_utf8(bytes.to_vec()).map_err(|_| TxnRecordError::Utf8)
    }

    fn string(&mut self) -> Result<String> {
        let n = self.i16()?;
        if n < 0 {
            return Err(TxnRecordError::BadLength(i64::from(n)));
        }
        self.utf8(n as usize)
    }

    fn compact_string(&mut self) -> Result<String> {
        let n = i64::from(self.uvarint()?) - 1;
        if n < 0 {
            return Err(TxnRecordError::BadLength(n));
        }
        self.utf8(n as usize)
    }

    fn skip_tags(&mut self) -> Result<()> {
        for _ in 0..self.uvarint()? {
            self.uvarint()?;
            let size = self.uvarint()? as usize;
            self.take(size)?;
        }
        Ok(())
    }

    fn end(&self) -> Result<()> {
        match self.0.len() {
            0 => Ok(()),
            n => Err(TxnRecordError::Trailing(n)),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn transits_round_trip_through_their_records() {
        let t = Transit {
            producer_id: 7,
            previous_producer_id: 6,
            next_producer_id: -1,
            producer_epoch: 3,
            last_producer_epoch: -1,
            timeout_ms: 60_000,
            state: TxnState::Ongoing,
            partitions: [
                ("a".to_owned(), 1),
                ("a".to_owned(), 0),
                ("b".to_owned(), 4),
            ]
            .into_iter()
            .collect(),
            start_ms: 100,
            update_ms: 200,
            tv2: true,
        };
        let v = value_of(&t);
        assert_eq!(
            v.partitions.as_ref().map(|p| p["a"].clone()),
            Some(vec![0, 1])
        );
        let bytes = encode_value(&v, value_version(&t)).expect("encodes");
        let back = transit_of(&decode_value(&bytes).expect("decodes"));
        assert_eq!(back, t);
        let empty = Transit {
            state: TxnState::Empty,
            partitions: Default::default(),
            tv2: false,
            previous_producer_id: -1,
            ..t
        };
        assert_eq!(value_of(&empty).partitions, None);
        assert_eq!(value_version(&empty), 0);
    }

    fn ongoing() -> TxnLogValue {
        TxnLogValue {
            producer_id: 4000,
            producer_epoch: 3,
            timeout_ms: 60_000,
            state: TxnState::Ongoing,
            partitions: Some(BTreeMap::from([
                ("orders".to_string(), vec![0, 2]),
                ("__consumer_offsets".to_string(), vec![17]),
            ])),
            last_update_ms: 1_700_000_000_123,
            start_ms: 1_700_000_000_000,
            previous_producer_id: -1,
            next_producer_id: -1,
            client_transaction_version: 0,
        }
    }

    #[test]
    fn the_key_is_kafkas() {
        // int16 version 0, int16 length 6, "my-txn".
        assert_eq!(
            encode_key("my-txn").unwrap(),
            b"\x00\x00\x00\x06my-txn".to_vec()
        );
        assert_eq!(decode_key(b"\x00\x00\x00\x06my-txn").unwrap(), "my-txn");
        assert!(matches!(
            decode_key(b"\x00\x01\x00\x00"),
            Err(TxnRecordError::UnknownVersion { .. })
        ));
    }

    #[test]
    fn version_0_is_kafkas_layout() {
        let mut v = ongoing();
        v.partitions = Some(BTreeMap::from([("t".to_string(), vec![5])]));
        let mut want = vec![0, 0]; // version
        want.extend_from_slice(&4000i64.to_be_bytes());
        want.extend_from_slice(&3i16.to_be_bytes());
        want.extend_from_slice(&60_000i32.to_be_bytes());
        want.push(1); // Ongoing
        want.extend_from_slice(&1i32.to_be_bytes()); // one topic
        want.extend_from_slice(b"\x00\x01t");
        want.extend_from_slice(&1i32.to_be_bytes()); // one partition
        want.extend_from_slice(&5i32.to_be_bytes());
        want.extend_from_slice(&1_700_000_000_123i64.to_be_bytes());
        want.extend_from_slice(&1_700_000_000_000i64.to_be_bytes());
        assert_eq!(encode_value(&v, 0).unwrap(), want);
        assert_eq!(decode_value(&want).unwrap(), v);
    }

    #[test]
    fn version_1_is_compact_with_tagged_fields() {
        let mut v = ongoing();
        v.partitions = Some(BTreeMap::from([("t".to_string(), vec![5])]));
        v.client_transaction_version = 2;
        let bytes = encode_value(&v, 1).unwrap();
        let mut want = vec![0, 1];
        want.extend_from_slice(&4000i64.to_be_bytes());
        want.extend_from_slice(&3i16.to_be_bytes());
        want.extend_from_slice(&60_000i32.to_be_bytes());
        want.push(1);
        want.push(2); // one topic, compact
        want.extend_from_slice(b"\x02t"); // compact string
        want.push(2); // one partition, compact
        want.extend_from_slice(&5i32.to_be_bytes());
        want.push(0); // the entry's tagged fields
        want.extend_from_slice(&1_700_000_000_123i64.to_be_bytes());
        want.extend_from_slice(&1_700_000_000_000i64.to_be_bytes());
        want.extend_from_slice(&[1, 2, 2, 0, 2]); // one tag: 2, 2 bytes, int16 2
        assert_eq!(bytes, want);
        assert_eq!(decode_value(&bytes).unwrap(), v);
    }

    #[test]
    fn values_round_trip_in_both_versions() {
        let mut rotated = ongoing();
        rotated.state = TxnState::PrepareCommit;
        rotated.previous_producer_id = 3999;
        rotated.next_producer_id = 4001;
        rotated.client_transaction_version = 2;
        let mut empty = ongoing();
        empty.state = TxnState::Empty;
        empty.partitions = None;
        empty.start_ms = -1;
        for v in [ongoing(), rotated.clone(), empty] {
            assert_eq!(decode_value(&encode_value(&v, 1).unwrap()).unwrap(), v);
            let mut plain = v.clone();
            plain.previous_producer_id = -1;
            plain.next_producer_id = -1;
            plain.client_transaction_version = 0;
            assert_eq!(
                decode_value(&encode_value(&v, 0).unwrap()).unwrap(),
                plain,
                "v0 has no tagged fields"
            );
        }
    }

    #[test]
    fn unknown_tags_are_skipped() {
        let mut bytes = encode_value(&ongoing(), 1).unwrap();
        assert_eq!(bytes.pop(), Some(0), "no tags");
        bytes.extend_from_slice(&[1, 9, 3, 0xaa, 0xbb, 0xcc]); // tag 9, 3 bytes
        assert_eq!(decode_value(&bytes).unwrap(), ongoing());
    }

    #[test]
    fn bad_bytes_are_errors_never_panics() {
        let good = encode_value(&ongoing(), 1).unwrap();
        for n in 0..good.len() {
            assert!(decode_value(&good[..n]).is_err(), "truncated at {n}");
        }
        let mut trailing = good.clone();
        trailing.push(0);
        assert_eq!(decode_value(&trailing), Err(TxnRecordError::Trailing(1)));
        let mut state = good.clone();
        state[16] = 9;
        assert_eq!(decode_value(&state), Err(TxnRecordError::UnknownState(9)));
        // A huge partition count in v0 is refused before anything is allocated.
        let mut huge = encode_value(&ongoing(), 0).unwrap();
        let at = 2 + 8 + 2 + 4 + 1 + 4 + 2 + "__consumer_offsets".len();
        huge[at..at + 4].copy_from_slice(&i32::MAX.to_be_bytes());
        assert_eq!(decode_value(&huge), Err(TxnRecordError::Truncated));
        assert!(matches!(
            decode_value(b"\x00\x02"),
            Err(TxnRecordError::UnknownVersion { .. })
        ));
    }
}
