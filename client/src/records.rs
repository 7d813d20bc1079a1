//! RecordBatch v2 (magic 2) encoding and header-level decoding, written for the hot path.
//!
//! Producer side: `BatchBuilder` appends records straight into one reusable buffer (no
//! `Record` structs, no allocation per message) and finishes the batch once: header
//! fields, optional compression of the records section, CRC-32C.
//!
//! Consumer side: `for_each_batch` walks the batches of a fetch response by their
//! headers only (count and bytes per batch); `for_each_stamp` additionally walks the
//! records of one batch (decompressing it if needed) to read the send-time stamp from
//! the first 8 bytes of each value, which only e2e mode needs.
//!
//! Invariants:
//! - Every record in a built batch has timestamp delta 0 and offset delta equal to its
//!   index, so `last_offset_delta == count - 1` and `max_timestamp == base_timestamp`.
//! - Decoding never panics and never trusts a length: every read is bounds-checked, and
//!   a truncated trailing batch (normal at a fetch's byte limit) ends the walk quietly.
//! - Header fields are read and written only through `layout`, the header table shared
//!   with the storage engine (`corelog-record-batch`).

use core::ops::Range;

use crate::error::{ClientError, Result};
use bytes::{BufMut, Bytes, BytesMut};
use kafka_protocol::compression::{self as cmpr, Compressor, Decompressor};
use kafka_protocol::records::Compression;

use layout::{
    ATTRIBUTES, BASE_OFFSET, BATCH_LENGTH, COMPRESSION_MASK, CONTROL_BIT, CRC, CRC_START,
    LAST_OFFSET_DELTA, LOG_OVERHEAD, MAGIC, RECORD_COUNT,
};

/// Length of the v2 batch header; the records section starts here.
pub const BATCH_HEADER_BYTES: usize = layout::BATCH_HEADER_LEN;

/// The RecordBatch v2 header layout: each field's byte range from the start of the
/// batch, big-endian, in wire order. Its one owner is `corelog-record-batch`, a leaf that
/// the storage engine shares, so what this client builds and reads and what the log
/// stores are laid out by the same table.
use corelog_record_batch::layout;

/// The only batch format this client writes or reads.
const MAGIC_V2: u8 = 2;

/// Builds one record batch at a time into a reused buffer.
pub struct BatchBuilder {
    buf: BytesMut,
    /// Records section before compression (only used when compressing).
    scratch: BytesMut,
    compression: Compression,
    /// Bytes reserved when a batch opens; nothing is allocated until then, so a producer
    /// with a thousand idle partitions holds no batch memory for them.
    capacity: usize,
    count: i32,
    base_timestamp_ms: i64,
    /// Idempotent producer id and epoch; -1 for a plain producer.
    producer_id: i64,
    producer_epoch: i16,
    /// Sequence of the next batch's first record (this partition's stream).
    next_sequence: i32,
}

impl BatchBuilder {
    pub fn new(compression: Compression, capacity: usize) -> Self {
        BatchBuilder {
            buf: BytesMut::new(),
            scratch: BytesMut::new(),
            compression,
            capacity: capacity + BATCH_HEADER_BYTES,
            count: 0,
            base_timestamp_ms: 0,
            producer_id: -1,
            producer_epoch: -1,
            next_sequence: 0,
        }
    }

    /// Makes every batch from now on carry `producer_id`/`epoch` and consecutive
    /// sequence numbers, starting at 0 (wrapping at `i32::MAX` as Kafka's do).
    pub fn set_producer(&mut self, producer_id: i64, epoch: i16) {
        self.producer_id = producer_id;
        self.producer_epoch = epoch;
        self.next_sequence = 0;
    }

    pub fn is_empty(&self) -> bool {
        self.count == 0
    }

    pub fn count(&self) -> i32 {
        self.count
    }

    /// Bytes of records appended so far (uncompressed).
    pub fn records_bytes(&self) -> usize {
        if self.compression == Compression::None {
            self.buf.len().saturating_sub(BATCH_HEADER_BYTES)
        } else {
            self.scratch.len()
        }
    }

    /// Size one record takes in the records section, for "does it fit" checks.
    pub fn record_size(key_len: Option<usize>, value_len: usize) -> usize {
        let body = record_body_size(key_len, value_len, 0);
        body + varint_size(body as i64)
    }

    /// Appends one record. The value is `stamp` (8 bytes, big-endian) followed by
    /// `value_len - 8` bytes of `filler` (or only a prefix of the stamp if `value_len < 8`).
    pub fn append(&mut self, key: Option<&[u8]>, stamp: u64, filler: &[u8], value_len: usize) {
        if self.count == 0 {
            self.base_timestamp_ms = now_unix_ms();
            self.buf.clear();
            self.scratch.clear();
            self.buf.reserve(self.capacity);
            if self.compression != Compression::None {
                self.scratch.reserve(self.capacity);
            }
            // Header placeholder; filled by `finish`.
            self.buf.put_bytes(0, BATCH_HEADER_BYTES);
        }
        let offset_delta = self.count as i64;
        let out = if self.compression == Compression::None {
            &mut self.buf
        } else {
            &mut self.scratch
        };
        let body = record_body_size(key.map(|k| k.len()), value_len, offset_delta);
        put_varint(out, body as i64);
        out.put_u8(0); // record attributes
        put_varint(out, 0); // timestamp delta
        put_varint(out, offset_delta);
        match key {
            Some(k) => {
                put_varint(out, k.len() as i64);
                out.put_slice(k);
            }
            None => put_varint(out, -1),
        }
        put_varint(out, value_len as i64);
        let stamp_bytes = stamp.to_be_bytes();
        let stamp_len = value_len.min(8);
        out.put_slice(&stamp_bytes[..stamp_len]);
        let mut rest = value_len - stamp_len;
        if filler.is_empty() {
            out.put_bytes(0, rest);
            rest = 0;
        }
        while rest > 0 {
            let n = rest.min(filler.len());
            out.put_slice(&filler[..n]);
            rest -= n;
        }
        put_varint(out, 0); // header count
        self.count += 1;
    }

    /// Completes the batch and returns it; the builder is empty afterwards.
    pub fn finish(&mut self) -> Result<Bytes> {
        assert!(self.count > 0, "finish on an empty batch");
        match self.compression {
            Compression::None => {}
            c => {
                let records = &self.scratch[..];
                // kafka-protocol's codecs take and return anyhow results.
                let put = |b: &mut BytesMut| -> anyhow::Result<()> {
                    b.put_slice(records);
                    Ok(())
                };
                match c {
                    Compression::Gzip => cmpr::Gzip::compress(&mut self.buf, put),
                    Compression::Snappy => cmpr::Snappy::compress(&mut self.buf, put),
                    Compression::Lz4 => cmpr::Lz4::compress(&mut self.buf, put),
                    Compression::Zstd => cmpr::Zstd::compress(&mut self.buf, put),
                    Compression::None => unreachable!(),
                }
                .map_err(|e| ClientError::Protocol(format!("compressing a batch: {e:#}")))?;
            }
        }
        let total = self.buf.len();
        let h = &mut self.buf[..BATCH_HEADER_BYTES];
        h[BASE_OFFSET].copy_from_slice(&0i64.to_be_bytes());
        let batch_length = i32::try_from(total - LOG_OVERHEAD)
            .map_err(|_| ClientError::Protocol("batch too large".into()))?;
        h[BATCH_LENGTH].copy_from_slice(&batch_length.to_be_bytes());
        h[layout::PARTITION_LEADER_EPOCH].copy_from_slice(&(-1i32).to_be_bytes());
        h[MAGIC.start] = MAGIC_V2;
        h[ATTRIBUTES].copy_from_slice(&(self.compression as i16).to_be_bytes());
        h[LAST_OFFSET_DELTA].copy_from_slice(&(self.count - 1).to_be_bytes());
        h[layout::BASE_TIMESTAMP].copy_from_slice(&self.base_timestamp_ms.to_be_bytes());
        h[layout::MAX_TIMESTAMP].copy_from_slice(&self.base_timestamp_ms.to_be_bytes());
        h[layout::PRODUCER_ID].copy_from_slice(&self.producer_id.to_be_bytes());
        h[layout::PRODUCER_EPOCH].copy_from_slice(&self.producer_epoch.to_be_bytes());
        let sequence = if self.producer_id >= 0 {
            let s = self.next_sequence;
            // i32 sequences wrap to 0 after i32::MAX.
            self.next_sequence = ((i64::from(s) + i64::from(self.count)) % (1i64 << 31)) as i32;
            s
        } else {
            -1
        };
        h[layout::BASE_SEQUENCE].copy_from_slice(&sequence.to_be_bytes());
        h[RECORD_COUNT].copy_from_slice(&self.count.to_be_bytes());
        let crc = crc32c::crc32c(&self.buf[CRC_START..]);
        self.buf[CRC].copy_from_slice(&crc.to_be_bytes());
        self.count = 0;
        // `split` hands the bytes out and keeps any spare capacity for the next batch.
        Ok(self.buf.split().freeze())
    }
}

fn now_unix_ms() -> i64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_millis() as i64)
        .unwrap_or(0)
}

fn record_body_size(key_len: Option<usize>, value_len: usize, offset_delta: i64) -> usize {
    1 + 1
        + varint_size(offset_delta)
        + match key_len {
            Some(k) => varint_size(k as i64) + k,
            None => 1,
        }
        + varint_size(value_len as i64)
        + value_len
        + 1
}

fn zigzag(v: i64) -> u64 {
    ((v << 1) ^ (v >> 63)) as u64
}

pub fn varint_size(v: i64) -> usize {
    let mut z = zigzag(v);
    let mut n = 1;
    while z >= 0x80 {
        z >>= 7;
        n += 1;
    }
    n
}

pub fn put_varint(out: &mut BytesMut, v: i64) {
    let mut z = zigzag(v);
    while z >= 0x80 {
        out.put_u8((z as u8) | 0x80);
        z >>= 7;
    }
    out.put_u8(z as u8);
}

/// Reads a zigzag varint at `*pos`, advancing it. `None` on truncation or overlong input.
pub fn get_varint(buf: &[u8], pos: &mut usize) -> Option<i64> {
    let mut z: u64 = 0;
    for shift in (0..64).step_by(7) {
        let b = *buf.get(*pos)?;
        *pos += 1;
        z |= u64::from(b & 0x7f) << shift;
        if b & 0x80 == 0 {
            return Some(((z >> 1) as i64) ^ -((z & 1) as i64));
        }
    }
    None
}

/// What the consumer needs from one batch header.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct BatchInfo {
    pub base_offset: i64,
    pub last_offset: i64,
    pub records: i32,
    pub bytes: usize,
    pub compression: i16,
    pub control: bool,
}

/// Header field readers: `None` if `b` ends before `field` (a `layout` range).
fn be_i64(b: &[u8], field: Range<usize>) -> Option<i64> {
    Some(i64::from_be_bytes(b.get(field)?.try_into().ok()?))
}
fn be_i32(b: &[u8], field: Range<usize>) -> Option<i32> {
    Some(i32::from_be_bytes(b.get(field)?.try_into().ok()?))
}
fn be_i16(b: &[u8], field: Range<usize>) -> Option<i16> {
    Some(i16::from_be_bytes(b.get(field)?.try_into().ok()?))
}

/// Calls `f(info, whole_batch_bytes)` for each complete batch in a fetch's records.
/// Stops at the first incomplete batch; errors on a non-v2 or malformed batch.
pub fn for_each_batch(
    records: &[u8],
    mut f: impl FnMut(BatchInfo, &[u8]) -> Result<()>,
) -> Result<()> {
    let mut pos = 0usize;
    while pos + LOG_OVERHEAD <= records.len() {
        let rest = &records[pos..];
        let (Some(base_offset), Some(len)) =
            (be_i64(rest, BASE_OFFSET), be_i32(rest, BATCH_LENGTH))
        else {
            break;
        };
        let Ok(len) = usize::try_from(len) else {
            return Err(ClientError::Protocol(format!(
                "negative batch length {len}"
            )));
        };
        let total = LOG_OVERHEAD + len;
        if total > rest.len() {
            break; // partial batch at the fetch's byte limit
        }
        let batch = &rest[..total];
        if total < BATCH_HEADER_BYTES {
            return Err(ClientError::Protocol(format!(
                "batch of {total} bytes is shorter than a v2 header"
            )));
        }
        let magic = batch[MAGIC.start];
        if magic != MAGIC_V2 {
            return Err(ClientError::Protocol(format!(
                "record batch magic {magic} (only v2 is supported)"
            )));
        }
        let attributes = be_i16(batch, ATTRIBUTES).unwrap_or(0);
        let last_delta = be_i32(batch, LAST_OFFSET_DELTA).unwrap_or(0);
        let count = be_i32(batch, RECORD_COUNT).unwrap_or(0);
        let info = BatchInfo {
            base_offset,
            last_offset: base_offset.saturating_add(i64::from(last_delta)),
            records: count,
            bytes: total,
            compression: attributes & COMPRESSION_MASK,
            control: attributes & CONTROL_BIT != 0,
        };
        f(info, batch)?;
        pos += total;
    }
    Ok(())
}

/// Calls `f(offset, stamp)` for each record of one batch whose value is at least 8 bytes.
pub fn for_each_stamp(batch: &[u8], mut f: impl FnMut(i64, u64)) -> Result<()> {
    let base =
        be_i64(batch, BASE_OFFSET).ok_or_else(|| ClientError::Protocol("short batch".into()))?;
    let attributes =
        be_i16(batch, ATTRIBUTES).ok_or_else(|| ClientError::Protocol("short batch".into()))?;
    let count =
        be_i32(batch, RECORD_COUNT).ok_or_else(|| ClientError::Protocol("short batch".into()))?;
    let section = batch
        .get(BATCH_HEADER_BYTES..)
        .ok_or_else(|| ClientError::Protocol("short batch".into()))?;
    let mut walk = |recs: &[u8]| -> Result<()> {
        let mut pos = 0usize;
        for _ in 0..count.max(0) {
            let len = get_varint(recs, &mut pos)
                .ok_or_else(|| ClientError::Protocol("truncated record".into()))?;
            let len = usize::try_from(len)
                .map_err(|_| ClientError::Protocol("negative record length".into()))?;
            let end = pos
                .checked_add(len)
                .filter(|&e| e <= recs.len())
                .ok_or_else(|| ClientError::Protocol("truncated record".into()))?;
            let rec = &recs[pos..end];
            let mut p = 1usize; // attributes
            let parsed = (|| {
                get_varint(rec, &mut p)?; // timestamp delta
                let od = get_varint(rec, &mut p)?;
                let kl = get_varint(rec, &mut p)?;
                if kl > 0 {
                    p = p.checked_add(kl as usize)?;
                }
                let vl = get_varint(rec, &mut p)?;
                if vl < 8 {
                    return Some((od, None));
                }
                let v = rec.get(p..p + 8)?;
                Some((od, Some(u64::from_be_bytes(v.try_into().ok()?))))
            })();
            match parsed {
                Some((od, Some(stamp))) => f(base.saturating_add(od), stamp),
                Some((_, None)) => {}
                None => return Err(ClientError::Protocol("malformed record".into())),
            }
            pos = end;
        }
        Ok(())
    };
    let mut input = section;
    // kafka-protocol's codecs take and return anyhow results.
    let inner = |b: &mut Bytes| walk(b).map_err(anyhow::Error::from);
    let decoded = match attributes & COMPRESSION_MASK {
        0 => return walk(section),
        1 => cmpr::Gzip::decompress(&mut input, inner),
        2 => cmpr::Snappy::decompress(&mut input, inner),
        3 => cmpr::Lz4::decompress(&mut input, inner),
        4 => cmpr::Zstd::decompress(&mut input, inner),
        c => {
            return Err(ClientError::Protocol(format!(
                "unknown compression codec {c}"
            )))
        }
    };
    decoded.map_err(|e| match e.downcast::<ClientError>() {
        Ok(e) => e,
        Err(e) => ClientError::Protocol(format!("decompressing a batch: {e:#}")),
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use kafka_protocol::records::RecordBatchDecoder;

    fn build(c: Compression, n: u64, key: bool) -> Bytes {
        let mut b = BatchBuilder::new(c, 64 * 1024);
        let filler = [b'x'; 64];
        for i in 0..n {
            let k = format!("k{i}");
            b.append(key.then_some(k.as_bytes()), 1000 + i, &filler, 100);
        }
        b.finish().unwrap()
    }

    #[test]
    fn built_batches_decode_with_the_reference_decoder() {
        for c in [
            Compression::None,
            Compression::Gzip,
            Compression::Snappy,
            Compression::Lz4,
            Compression::Zstd,
        ] {
            let mut bytes = build(c, 10, true);
            let sets = RecordBatchDecoder::decode_all(&mut bytes).unwrap();
            assert_eq!(sets.len(), 1);
            let recs = &sets[0].records;
            assert_eq!(recs.len(), 10, "{c:?}");
            assert_eq!(recs[3].offset, 3);
            assert_eq!(recs[3].key.as_deref(), Some(&b"k3"[..]));
            let v = recs[3].value.as_ref().unwrap();
            assert_eq!(v.len(), 100);
            assert_eq!(u64::from_be_bytes(v[..8].try_into().unwrap()), 1003);
        }
    }

    #[test]
    fn idempotent_batches_carry_consecutive_sequences() {
        let mut b = BatchBuilder::new(Compression::None, 4096);
        b.set_producer(42, 3);
        let mut seqs = vec![];
        for count in [3, 2, 1] {
            for i in 0..count {
                b.append(None, i, &[0; 8], 16);
            }
            let mut bytes = b.finish().unwrap();
            let sets = RecordBatchDecoder::decode_all(&mut bytes).unwrap();
            let r = &sets[0].records[0];
            assert_eq!((r.producer_id, r.producer_epoch), (42, 3));
            seqs.push(r.sequence);
        }
        assert_eq!(seqs, vec![0, 3, 5]);
        b.next_sequence = i32::MAX;
        b.append(None, 0, &[0; 8], 16);
        b.append(None, 0, &[0; 8], 16);
        b.finish().unwrap();
        assert_eq!(b.next_sequence, 1, "sequences wrap at i32::MAX");
    }

    #[test]
    fn record_size_matches_encoding() {
        let mut b = BatchBuilder::new(Compression::None, 4096);
        b.append(None, 1, &[0; 8], 1024);
        assert_eq!(b.records_bytes(), BatchBuilder::record_size(None, 1024));
    }

    #[test]
    fn walks_batches_and_stamps_and_stops_at_partial() {
        let a = build(Compression::None, 5, false);
        let z = build(Compression::Zstd, 3, false);
        let mut all = BytesMut::new();
        all.put_slice(&a);
        // Give the second batch base offset 5, as a broker would.
        let mut z2 = BytesMut::from(&z[..]);
        z2[BASE_OFFSET].copy_from_slice(&5i64.to_be_bytes());
        all.put_slice(&z2);
        all.put_slice(&a[..20]); // truncated trailing batch
        let mut infos = vec![];
        let mut stamps = vec![];
        for_each_batch(&all, |info, batch| {
            infos.push(info);
            for_each_stamp(batch, |off, s| stamps.push((off, s)))
        })
        .unwrap();
        assert_eq!(infos.len(), 2);
        assert_eq!(infos[1].last_offset, 7);
        assert_eq!(stamps.len(), 8);
        assert_eq!(stamps[6], (6, 1001));
    }

    #[test]
    fn garbage_never_panics() {
        let mut seed = 0x1234_5678_u64;
        for len in 0..400 {
            let mut v = vec![0u8; len];
            for b in v.iter_mut() {
                seed ^= seed << 13;
                seed ^= seed >> 7;
                seed ^= seed << 17;
                *b = seed as u8;
            }
            if len > MAGIC.end {
                v[MAGIC.start] = MAGIC_V2;
            }
            let _ = for_each_batch(&v, |_, batch| for_each_stamp(batch, |_, _| {}));
        }
    }

    #[test]
    fn varints_round_trip() {
        for v in [
            0i64,
            1,
            -1,
            63,
            -64,
            64,
            300,
            -300,
            i32::MAX as i64,
            i64::MIN,
            i64::MAX,
        ] {
            let mut b = BytesMut::new();
            put_varint(&mut b, v);
            assert_eq!(b.len(), varint_size(v));
            let mut p = 0;
            assert_eq!(get_varint(&b, &mut p), Some(v));
        }
    }
}
