//! Builds well-formed Kafka RecordBatch v2 bytes, as a producer would send them.
//!
//! Owns: the encoding side of the record format (zigzag varints, the record layout) and
//! the assembly of a header with a correct `batchLength`, `lastOffsetDelta`,
//! `maxTimestamp` and CRC-32C. Used by unit tests, the property test, benchmarks and the
//! load generator, so it is public.
//!
//! Invariants: every batch from [`BatchBuilder::build`] with at least one record passes
//! [`crate::batch::validate`] (given a large enough size limit). Records are encoded
//! into one internal buffer as they are pushed, so building costs one copy of that buffer
//! and no per-record allocation.
//!
//! Does not: compress, assign real offsets
//! (base offset is 0; the broker rewrites it with
//! [`crate::batch::set_base_offset`]) or do I/O. Its input is trusted (the caller's
//! own data), so a field longer than `i32::MAX` bytes is a programming error and panics.

use crate::batch::{layout, write_crc, write_field, BATCH_HEADER_LEN, CURRENT_MAGIC, LOG_OVERHEAD};

/// One record to append. `timestamp_delta` is relative to the builder's base timestamp.
#[derive(Debug, Clone, Copy)]
pub struct Record<'a> {
    pub key: Option<&'a [u8]>,
    pub value: Option<&'a [u8]>,
    pub headers: &'a [(&'a str, Option<&'a [u8]>)],
    pub timestamp_delta: i64,
}

/// Accumulates records and emits one uncompressed, create-time RecordBatch v2.
#[derive(Debug, Clone)]
pub struct BatchBuilder {
    base_timestamp_ms: i64,
    producer_id: i64,
    producer_epoch: i16,
    base_sequence: i32,
    /// The transactional and control bits (`attributes`); never a codec or timestamp type.
    flags: i16,
    /// Largest `timestamp_delta` pushed; `None` while empty.
    max_timestamp_delta: Option<i64>,
    /// Number of records pushed; also the next record's offset delta.
    record_count: i32,
    /// The encoded records section, length-prefixed records back to back.
    records: Vec<u8>,
}

impl BatchBuilder {
    /// An empty builder for a non-idempotent producer (id, epoch, sequence all -1).
    pub fn new(base_timestamp_ms: i64) -> Self {
        BatchBuilder {
            base_timestamp_ms,
            producer_id: -1,
            producer_epoch: -1,
            base_sequence: -1,
            flags: 0,
            max_timestamp_delta: None,
            record_count: 0,
            records: Vec::new(),
        }
    }

    /// Sets the idempotent-producer fields.
    pub fn producer(mut self, producer_id: i64, producer_epoch: i16, base_sequence: i32) -> Self {
        self.producer_id = producer_id;
        self.producer_epoch = producer_epoch;
        self.base_sequence = base_sequence;
        self
    }

    /// Marks the batch transactional (a transactional producer's data).
    pub fn transactional(mut self) -> Self {
        self.flags |= layout::TRANSACTIONAL_BIT;
        self
    }

    /// Marks the batch a transactional control batch (a transaction marker).
    pub fn control(mut self) -> Self {
        self.flags |= layout::TRANSACTIONAL_BIT | layout::CONTROL_BIT;
        self
    }

    /// Encodes `record` onto the records section with the next offset delta.
    ///
    /// Panics if the batch already holds `i32::MAX` records or a field is longer than
    /// `i32::MAX` bytes: neither is representable on the wire.
    pub fn push(&mut self, record: &Record) {
        let offset_delta = self.record_count;
        // The record's length prefix comes first, so its body size is computed up front
        // instead of encoding into a scratch buffer and copying.
        let mut body_len = 1 // attributes
            + varlong_len(record.timestamp_delta)
            + varint_len(offset_delta)
            + nullable_len(record.key)
            + nullable_len(record.value)
            + varint_len(len_i32(record.headers.len()));
        for (key, value) in record.headers {
            body_len += varint_len(len_i32(key.len())) + key.len() + nullable_len(*value);
        }

        let out = &mut self.records;
        put_varint(out, len_i32(body_len));
        let start = out.len();
        out.push(0); // record attributes: unused in v2
        put_varlong(out, record.timestamp_delta);
        put_varint(out, offset_delta);
        put_nullable(out, record.key);
        put_nullable(out, record.value);
        put_varint(out, len_i32(record.headers.len()));
        for (key, value) in record.headers {
            put_varint(out, len_i32(key.len()));
            out.extend_from_slice(key.as_bytes());
            put_nullable(out, *value);
        }
        assert_eq!(out.len() - start, body_len, "record size precomputation");

        self.record_count = self
            .record_count
            .checked_add(1)
            .expect("more than i32::MAX records in one batch");
        self.max_timestamp_delta = Some(match self.max_timestamp_delta {
            Some(max) => max.max(record.timestamp_delta),
            None => record.timestamp_delta,
        });
    }

    /// Number of records pushed.
    pub fn len(&self) -> usize {
        // record_count is never negative: it starts at 0 and only grows.
        self.record_count as usize
    }

    /// Whether no record has been pushed.
    pub fn is_empty(&self) -> bool {
        self.record_count == 0
    }

    /// Emits the batch: base offset 0, partition leader epoch -1, magic 2, uncompressed
    /// with create time, transactional or control as set.
    ///
    /// An empty builder yields a header-only batch with `recordCount` 0 and
    /// `lastOffsetDelta` -1, which `validate` rejects; it is useful for negative tests.
    pub fn build(&self) -> Vec<u8> {
        let batch_length = len_i32((BATCH_HEADER_LEN - LOG_OVERHEAD) + self.records.len());
        let max_timestamp = match self.max_timestamp_delta {
            Some(delta) => self.base_timestamp_ms.saturating_add(delta),
            None => self.base_timestamp_ms,
        };
        let mut out = Vec::with_capacity(BATCH_HEADER_LEN + self.records.len());
        // Every header field is written below (the layout's compile-time asserts say the
        // fields tile the header), so the zeroes only stand in until then.
        out.resize(BATCH_HEADER_LEN, 0);
        out.extend_from_slice(&self.records);
        let h = out.as_mut_slice();
        write_field(h, layout::BASE_OFFSET, 0i64.to_be_bytes());
        write_field(h, layout::BATCH_LENGTH, batch_length.to_be_bytes());
        write_field(h, layout::PARTITION_LEADER_EPOCH, (-1i32).to_be_bytes());
        write_field(h, layout::MAGIC, CURRENT_MAGIC.to_be_bytes());
        write_field(h, layout::ATTRIBUTES, self.flags.to_be_bytes());
        let last_offset_delta = self.record_count - 1;
        write_field(
            h,
            layout::LAST_OFFSET_DELTA,
            last_offset_delta.to_be_bytes(),
        );
        write_field(
            h,
            layout::BASE_TIMESTAMP,
            self.base_timestamp_ms.to_be_bytes(),
        );
        write_field(h, layout::MAX_TIMESTAMP, max_timestamp.to_be_bytes());
        write_field(h, layout::PRODUCER_ID, self.producer_id.to_be_bytes());
        write_field(h, layout::PRODUCER_EPOCH, self.producer_epoch.to_be_bytes());
        write_field(h, layout::BASE_SEQUENCE, self.base_sequence.to_be_bytes());
        write_field(h, layout::RECORD_COUNT, self.record_count.to_be_bytes());
        write_crc(h);
        out
    }
}

/// Appends a Kafka zigzag `varint` (i32).
pub fn put_varint(out: &mut Vec<u8>, value: i32) {
    put_uvarint(out, u64::from(zigzag32(value)));
}

/// Appends a Kafka zigzag `varlong` (i64).
pub fn put_varlong(out: &mut Vec<u8>, value: i64) {
    put_uvarint(out, zigzag64(value));
}

fn zigzag32(value: i32) -> u32 {
    ((value << 1) ^ (value >> 31)) as u32
}

fn zigzag64(value: i64) -> u64 {
    ((value << 1) ^ (value >> 63)) as u64
}

fn put_uvarint(out: &mut Vec<u8>, mut value: u64) {
    while value >= 0x80 {
        out.push((value as u8 & 0x7f) | 0x80);
        value >>= 7;
    }
    out.push(value as u8);
}

fn uvarint_len(value: u64) -> usize {
    // One byte per started 7-bit group; zero still takes one byte.
    let bits = (64 - value.leading_zeros()).max(1) as usize;
    bits.div_ceil(7)
}

fn varint_len(value: i32) -> usize {
    uvarint_len(u64::from(zigzag32(value)))
}

fn varlong_len(value: i64) -> usize {
    uvarint_len(zigzag64(value))
}

/// Wire size of a varint-length-prefixed nullable byte string.
fn nullable_len(bytes: Option<&[u8]>) -> usize {
    match bytes {
        Some(b) => varint_len(len_i32(b.len())) + b.len(),
        None => varint_len(-1),
    }
}

fn put_nullable(out: &mut Vec<u8>, bytes: Option<&[u8]>) {
    match bytes {
        Some(b) => {
            put_varint(out, len_i32(b.len()));
            out.extend_from_slice(b);
        }
        None => put_varint(out, -1),
    }
}

fn len_i32(len: usize) -> i32 {
    i32::try_from(len).expect("record field longer than i32::MAX bytes")
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::batch::{validate, BatchError, BatchHeader, CRC_START};

    const MAX: usize = 1 << 20;

    fn kv<'a>(key: &'a [u8], value: &'a [u8], delta: i64) -> Record<'a> {
        Record {
            key: Some(key),
            value: Some(value),
            headers: &[],
            timestamp_delta: delta,
        }
    }

    fn sample() -> BatchBuilder {
        let headers: [(&str, Option<&[u8]>); 2] = [("trace", Some(b"abc")), ("empty", None)];
        let mut b = BatchBuilder::new(1_000).producer(7, 2, 40);
        b.push(&kv(b"a", b"1", 5));
        b.push(&Record {
            key: None,
            value: None,
            headers: &headers,
            timestamp_delta: 20,
        });
        b.push(&kv(b"c", &[0u8; 300], -4));
        b
    }

    #[test]
    fn built_batch_validates() {
        let b = sample();
        assert_eq!(b.len(), 3);
        assert!(!b.is_empty());
        let buf = b.build();
        let h = validate(&buf, MAX).expect("test data is valid");
        assert_eq!(h.record_count, 3);
    }

    #[test]
    fn header_fields_round_trip() {
        let buf = sample().build();
        let h = BatchHeader::parse(&buf).expect("test data is valid");
        assert_eq!(
            h,
            BatchHeader {
                base_offset: 0,
                batch_length: (buf.len() - LOG_OVERHEAD) as i32,
                partition_leader_epoch: -1,
                magic: 2,
                crc: crc32c::crc32c(&buf[CRC_START..]),
                attributes: 0,
                last_offset_delta: 2,
                base_timestamp: 1_000,
                max_timestamp: 1_020,
                producer_id: 7,
                producer_epoch: 2,
                base_sequence: 40,
                record_count: 3,
            }
        );
    }

    #[test]
    fn defaults_are_non_idempotent() {
        let mut b = BatchBuilder::new(-1);
        b.push(&kv(b"", b"", -10));
        let h = validate(&b.build(), MAX).expect("test data is valid");
        assert_eq!(
            (h.producer_id, h.producer_epoch, h.base_sequence),
            (-1, -1, -1)
        );
        assert_eq!(h.max_timestamp, -11);
    }

    #[test]
    fn any_single_byte_flip_in_crc_region_is_detected() {
        let buf = sample().build();
        let expected = crc32c::crc32c(&buf[CRC_START..]);
        for i in CRC_START..buf.len() {
            for flip in [0x01u8, 0x80, 0xff] {
                let mut bad = buf.clone();
                bad[i] ^= flip;
                match validate(&bad, MAX) {
                    Err(BatchError::CorruptCrc { expected: e, .. }) => assert_eq!(e, expected),
                    other => panic!("flip {flip:#x} at {i} gave {other:?}"),
                }
            }
        }
    }

    #[test]
    fn record_encoding_matches_kafka() {
        // key "k", value "v", no headers, delta 0, offset delta 0:
        // length 8 (zigzag 0x10), attrs 0, ts 0, offset 0, keylen 1 (0x02) 'k',
        // valuelen 1 (0x02) 'v', header count 0.
        let mut b = BatchBuilder::new(0);
        b.push(&kv(b"k", b"v", 0));
        let buf = b.build();
        assert_eq!(
            &buf[BATCH_HEADER_LEN..],
            &[0x10, 0x00, 0x00, 0x00, 0x02, b'k', 0x02, b'v', 0x00]
        );
    }

    #[test]
    fn varint_lengths_match_encoding() {
        for v in [0, 1, -1, 63, 64, -64, -65, 8191, 8192, i32::MAX, i32::MIN] {
            let mut out = Vec::new();
            put_varint(&mut out, v);
            assert_eq!(out.len(), varint_len(v), "varint {v}");
        }
        for v in [0, 1, -1, 1 << 35, -(1 << 35), i64::MAX, i64::MIN] {
            let mut out = Vec::new();
            put_varlong(&mut out, v);
            assert_eq!(out.len(), varlong_len(v), "varlong {v}");
        }
        let mut out = Vec::new();
        put_varint(&mut out, 300);
        assert_eq!(out, [0xd8, 0x04]);
    }

    #[test]
    fn empty_builder_yields_invalid_batch() {
        let b = BatchBuilder::new(0);
        assert!(b.is_empty());
        let buf = b.build();
        assert_eq!(buf.len(), BATCH_HEADER_LEN);
        assert_eq!(validate(&buf, MAX), Err(BatchError::InvalidRecordCount));
    }

    #[test]
    fn many_records_validate() {
        let mut b = BatchBuilder::new(0);
        let value = [7u8; 100];
        for i in 0..1000 {
            b.push(&kv(b"key", &value, i));
        }
        let h = validate(&b.build(), MAX).expect("test data is valid");
        assert_eq!(h.record_count, 1000);
        assert_eq!(h.last_offset_delta, 999);
        assert_eq!(h.max_timestamp, 999);
    }
}
