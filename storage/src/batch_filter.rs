//! Record-level reading and filtering of one Kafka RecordBatch v2, compressed or not: what
//! the log cleaner needs to drop superseded records, and what produce-time checks on
//! compacted topics need (every record must have a key). Not on the produce hot path.
//!
//! Owns: decompression of a batch's records section (gzip, snappy in both framings, LZ4,
//! zstd) with a bound on the output, a record walk that tolerates the sparse offsets of an
//! already-compacted batch, and the rewrite of a batch around the records kept.
//!
//! Invariants:
//! - Total over arbitrary bytes, like [`crate::batch`]: bad input gives a
//!   [`BatchError`], never a panic; nothing is allocated from a wire count, and a records
//!   section never decompresses to more than [`MAX_DECOMPRESSED_BYTES`].
//! - The CRC is checked before anything else is read, so corruption is never laundered
//!   into a rewritten batch that carries a fresh, valid CRC.
//! - The callback ([`for_each_record`]) or predicate ([`filter_batch`]) only runs once the
//!   whole batch has parsed: it never sees a prefix of a batch that then turns out bad.
//! - Offset deltas must increase strictly within `0..=lastOffsetDelta`; they need not be
//!   dense, because a batch that was compacted before has gaps.
//! - A rewritten batch differs from the original only in `batchLength`, `crc`,
//!   `maxTimestamp` (create-time batches only), `recordCount` and the records section.
//!   Kept records are copied byte for byte (their deltas stay relative to the unchanged
//!   base offset and base timestamp) and recompressed with the same codec and, for snappy,
//!   the same framing. `lastOffsetDelta` keeps the original value, as Kafka's cleaner
//!   does (`overrideLastOffset(originalBatch.lastOffset())`): an idempotent producer's
//!   last sequence is `baseSequence + lastOffsetDelta`, and the batch still spans the same
//!   offsets, so the next batch's base offset stays `lastOffset + 1`.
//! - Consequently a rewritten batch (sparse offsets, `recordCount - 1 != lastOffsetDelta`)
//!   does not pass [`crate::batch::validate`], which is the produce-path check and
//!   requires dense offsets.
//!
//! Does not: decide which records to keep, decide whether a batch that loses every record
//! should survive as an empty header (Kafka keeps one to preserve producer state; that is
//! the caller's policy on [`Filtered::Empty`]), set the delete-horizon attribute, read
//! legacy magic 0/1 message sets, or do I/O.

use std::borrow::Cow;
use std::io::Read;

use bytes::BytesMut;
use kafka_protocol::compression::{Compressor, Gzip, Lz4, Snappy, Zstd};

use crate::batch::layout::{
    ATTRIBUTES, BATCH_LENGTH, COMPRESSION_MASK, MAX_TIMESTAMP, RECORD_COUNT, TIMESTAMP_TYPE_BIT,
};
use crate::batch::{
    parse_record, write_crc, write_field, BatchError, BatchHeader, Compression, Cursor,
    BATCH_HEADER_LEN, CRC_START, CURRENT_MAGIC, LOG_OVERHEAD,
};

/// Most bytes a records section may decompress to. A hard cap rather than a ratio to the
/// compressed size: repetitive values legitimately compress far beyond any fixed ratio
/// (zstd easily exceeds 1000x), while the cap is what actually bounds memory per call.
/// It is 64x Kafka's default `max.message.bytes` (1 MiB).
pub const MAX_DECOMPRESSED_BYTES: usize = 64 << 20;

/// snappy-java's stream magic ("xerial framing"), which the Java producer writes. Java's
/// reader, like this one, treats a records section not starting with it as raw snappy
/// (what librdkafka writes).
const XERIAL_MAGIC: &[u8; 8] = b"\x82SNAPPY\x00";
/// The magic plus two big-endian i32 version fields, which readers ignore.
const XERIAL_HEADER_LEN: usize = 16;

// Codec failures are reported as `InvalidRecord`: `BatchError` is matched exhaustively at
// the protocol edge, which maps `InvalidRecord` to Kafka's INVALID_RECORD.
const CORRUPT_PAYLOAD: BatchError =
    BatchError::InvalidRecord("compressed records are corrupt or truncated");
const PAYLOAD_TOO_LARGE: BatchError =
    BatchError::InvalidRecord("records decompress to more than the size limit");
const RECOMPRESS_FAILED: BatchError =
    BatchError::InvalidRecord("kept records could not be recompressed");

/// One record of a batch (compressed or not), as the cleaner needs it. Borrows from the
/// batch, or from the decompressed records owned by the call that hands it out.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RecordInfo<'a> {
    /// Absolute offset: base offset + offset delta.
    pub offset: i64,
    /// Create time (base timestamp + delta) or, for a log-append-time batch, the batch's
    /// max timestamp, as Kafka reports it.
    pub timestamp_ms: i64,
    pub key: Option<&'a [u8]>,
    /// The value is null: a delete marker for the key.
    pub is_tombstone: bool,
}

/// Outcome of [`filter_batch`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Filtered {
    /// Every record is kept: the caller keeps the original bytes.
    Unchanged,
    /// No record is kept.
    Empty,
    /// The new batch holding exactly the kept records.
    Rewritten(Vec<u8>),
}

/// Calls `f` for each record of `batch`, in order. `batch` must be exactly one whole
/// RecordBatch v2 with a valid CRC; a compressed records section is decompressed into a
/// buffer owned by this call. `f` is called only if every record parses.
pub fn for_each_record(batch: &[u8], mut f: impl FnMut(&RecordInfo<'_>)) -> Result<(), BatchError> {
    let opened = open(batch, MAX_DECOMPRESSED_BYTES)?;
    walk(&opened.header, &opened.records, |_| {})?;
    walk(&opened.header, &opened.records, |record| f(&record.info))
}

/// Keeps only the records of `batch` for which `keep` returns true (see the module doc for
/// what a rewrite preserves). `keep` is called once per record, in order, and only if
/// every record parses.
pub fn filter_batch(
    batch: &[u8],
    mut keep: impl FnMut(&RecordInfo<'_>) -> bool,
) -> Result<Filtered, BatchError> {
    let opened = open(batch, MAX_DECOMPRESSED_BYTES)?;
    let header = &opened.header;
    walk(header, &opened.records, |_| {})?;

    let mut kept = Vec::with_capacity(opened.records.len());
    let mut kept_count: i32 = 0;
    let mut kept_max_timestamp: Option<i64> = None;
    walk(header, &opened.records, |record| {
        if keep(&record.info) {
            kept.extend_from_slice(record.raw);
            // At most recordCount (an i32) records are visited.
            kept_count = kept_count.saturating_add(1);
            kept_max_timestamp = Some(kept_max_timestamp.map_or(record.info.timestamp_ms, |m| {
                m.max(record.info.timestamp_ms)
            }));
        }
    })?;
    if kept_count == header.record_count {
        return Ok(Filtered::Unchanged);
    }
    let Some(kept_max_timestamp) = kept_max_timestamp else {
        return Ok(Filtered::Empty);
    };
    // Log-append time is one broker timestamp for the whole batch, kept as is; create
    // time is per record, so the maximum is that of the records that remain.
    let max_timestamp = if header.is_log_append_time() {
        header.max_timestamp
    } else {
        kept_max_timestamp
    };

    let original_header = batch.get(..BATCH_HEADER_LEN).ok_or(BatchError::TooShort)?;
    let mut out = Vec::with_capacity(BATCH_HEADER_LEN + kept.len());
    out.extend_from_slice(original_header);
    compress(opened.codec, &kept, &mut out)?;
    let batch_length = out
        .len()
        .checked_sub(LOG_OVERHEAD)
        .and_then(|len| i32::try_from(len).ok())
        .ok_or(RECOMPRESS_FAILED)?;
    write_field(&mut out, BATCH_LENGTH, batch_length.to_be_bytes());
    write_field(&mut out, MAX_TIMESTAMP, max_timestamp.to_be_bytes());
    write_field(&mut out, RECORD_COUNT, kept_count.to_be_bytes());
    write_crc(&mut out);
    Ok(Filtered::Rewritten(out))
}

/// The same batch with its records section in `target`'s codec (`compression.type` of a
/// topic that is not `producer`). Snappy is written with the xerial framing the Java
/// client writes. Records are copied byte for byte; only the codec bits of the
/// attributes, `batchLength`, the CRC and the records section change.
pub fn recompress(batch: &[u8], target: Compression) -> Result<Vec<u8>, BatchError> {
    let opened = open(batch, MAX_DECOMPRESSED_BYTES)?;
    walk(&opened.header, &opened.records, |_| {})?;
    let codec = match target {
        Compression::None => Codec::None,
        Compression::Gzip => Codec::Gzip,
        Compression::Snappy => Codec::SnappyXerial,
        Compression::Lz4 => Codec::Lz4,
        Compression::Zstd => Codec::Zstd,
    };
    let original_header = batch.get(..BATCH_HEADER_LEN).ok_or(BatchError::TooShort)?;
    let mut out = Vec::with_capacity(batch.len());
    out.extend_from_slice(original_header);
    compress(codec, &opened.records, &mut out)?;
    let batch_length = out
        .len()
        .checked_sub(LOG_OVERHEAD)
        .and_then(|len| i32::try_from(len).ok())
        .ok_or(RECOMPRESS_FAILED)?;
    let attributes = (opened.header.attributes & !COMPRESSION_MASK) | target as i16;
    write_field(&mut out, BATCH_LENGTH, batch_length.to_be_bytes());
    write_field(&mut out, ATTRIBUTES, attributes.to_be_bytes());
    write_crc(&mut out);
    Ok(out)
}

/// Stamps a batch with log-append time `now_ms` (`message.timestamp.type=LogAppendTime`):
/// sets the timestamp-type attribute and `maxTimestamp`, and recomputes the CRC, as
/// Kafka's broker does. Records keep their create-time deltas; readers take every
/// record's timestamp from `maxTimestamp`. `batch` must be one whole validated batch.
pub fn stamp_log_append_time(batch: &mut [u8], now_ms: i64) {
    let Ok(header) = BatchHeader::parse(batch) else {
        return;
    };
    let attributes = header.attributes | TIMESTAMP_TYPE_BIT;
    write_field(batch, ATTRIBUTES, attributes.to_be_bytes());
    write_field(batch, MAX_TIMESTAMP, now_ms.to_be_bytes());
    write_crc(batch);
}

/// A records-section codec, with the snappy framing that must be reproduced on rewrite.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Codec {
    None,
    Gzip,
    SnappyXerial,
    SnappyRaw,
    Lz4,
    Zstd,
}

/// A checked batch with its records section in plain form.
struct Opened<'a> {
    header: BatchHeader,
    codec: Codec,
    /// The length-prefixed records back to back: borrowed when uncompressed.
    records: Cow<'a, [u8]>,
}

/// Frames and checks `batch` (exactly one batch, magic 2, CRC, a non-negative count, a
/// known codec) and decompresses its records section.
fn open(batch: &[u8], max_decompressed: usize) -> Result<Opened<'_>, BatchError> {
    let header = BatchHeader::parse(batch)?;
    if header.total_len() != batch.len() {
        return Err(BatchError::InvalidLength);
    }
    if header.magic != CURRENT_MAGIC {
        return Err(BatchError::UnsupportedMagic(header.magic));
    }
    let actual = crc32c::crc32c(batch.get(CRC_START..).ok_or(BatchError::TooShort)?);
    if actual != header.crc {
        return Err(BatchError::CorruptCrc {
            expected: header.crc,
            actual,
        });
    }
    if header.record_count < 0 {
        return Err(BatchError::InvalidRecordCount);
    }
    let payload = batch.get(BATCH_HEADER_LEN..).ok_or(BatchError::TooShort)?;
    let (codec, records) = decompress(header.compression()?, payload, max_decompressed)?;
    Ok(Opened {
        header,
        codec,
        records,
    })
}

/// Decompresses a records section, refusing output beyond `limit` bytes.
fn decompress(
    compression: Compression,
    payload: &[u8],
    limit: usize,
) -> Result<(Codec, Cow<'_, [u8]>), BatchError> {
    let (codec, records) = match compression {
        Compression::None => return Ok((Codec::None, Cow::Borrowed(payload))),
        // Kafka writes a batch that lost all its records as a bare header, whatever its
        // codec; empty is not a valid stream in any codec, so it is special-cased.
        _ if payload.is_empty() => {
            let codec = match compression {
                Compression::Gzip => Codec::Gzip,
                Compression::Snappy => Codec::SnappyXerial,
                Compression::Lz4 => Codec::Lz4,
                _ => Codec::Zstd,
            };
            return Ok((codec, Cow::Borrowed(payload)));
        }
        // Java's GZIPInputStream reads concatenated members; so does MultiGzDecoder.
        Compression::Gzip => (
            Codec::Gzip,
            read_bounded(flate2::read::MultiGzDecoder::new(payload), limit)?,
        ),
        Compression::Lz4 => {
            let mut decoder = lz4::Decoder::new(payload).map_err(|_| CORRUPT_PAYLOAD)?;
            let records = read_bounded(&mut decoder, limit)?;
            // The LZ4 reader reports a stream that ends mid-frame as a clean EOF; only
            // `finish` tells whether the frame was complete.
            decoder.finish().1.map_err(|_| CORRUPT_PAYLOAD)?;
            (Codec::Lz4, records)
        }
        Compression::Zstd => {
            // The decoder's window is capped by zstd's default (2^27 bytes), which frames
            // from Kafka's own levels never exceed.
            let decoder = zstd::stream::read::Decoder::new(payload).map_err(|_| CORRUPT_PAYLOAD)?;
            (Codec::Zstd, read_bounded(decoder, limit)?)
        }
        Compression::Snappy if payload.starts_with(XERIAL_MAGIC) => {
            (Codec::SnappyXerial, xerial_decompress(payload, limit)?)
        }
        Compression::Snappy => (Codec::SnappyRaw, raw_snappy_decompress(payload, limit)?),
    };
    Ok((codec, Cow::Owned(records)))
}

/// Reads `reader` to the end, failing once it yields more than `limit` bytes.
fn read_bounded(reader: impl Read, limit: usize) -> Result<Vec<u8>, BatchError> {
    let mut out = Vec::new();
    let cap = u64::try_from(limit).unwrap_or(u64::MAX).saturating_add(1);
    reader
        .take(cap)
        .read_to_end(&mut out)
        .map_err(|_| CORRUPT_PAYLOAD)?;
    if out.len() > limit {
        return Err(PAYLOAD_TOO_LARGE);
    }
    Ok(out)
}

/// snappy-java's stream format: the 16-byte header, then blocks, each a big-endian u32
/// length followed by that many bytes of raw snappy. Every block announces its
/// decompressed length, which is checked against the limit before anything is allocated.
fn xerial_decompress(payload: &[u8], limit: usize) -> Result<Vec<u8>, BatchError> {
    let mut blocks = Cursor::new(payload.get(XERIAL_HEADER_LEN..).ok_or(CORRUPT_PAYLOAD)?);
    let mut out = Vec::new();
    while !blocks.is_empty() {
        let block_len = blocks.u32().ok_or(CORRUPT_PAYLOAD)?;
        let block_len = usize::try_from(block_len).map_err(|_| CORRUPT_PAYLOAD)?;
        let block = blocks.bytes(block_len).ok_or(CORRUPT_PAYLOAD)?;
        let len = snap::raw::decompress_len(block).map_err(|_| CORRUPT_PAYLOAD)?;
        let start = out.len();
        if len > limit.saturating_sub(start) {
            return Err(PAYLOAD_TOO_LARGE);
        }
        out.resize(start + len, 0);
        let dest = out.get_mut(start..).ok_or(CORRUPT_PAYLOAD)?;
        let written = snap::raw::Decoder::new()
            .decompress(block, dest)
            .map_err(|_| CORRUPT_PAYLOAD)?;
        if written != len {
            return Err(CORRUPT_PAYLOAD);
        }
    }
    Ok(out)
}

/// One raw snappy block (no framing), whose preamble announces the decompressed length.
fn raw_snappy_decompress(payload: &[u8], limit: usize) -> Result<Vec<u8>, BatchError> {
    let len = snap::raw::decompress_len(payload).map_err(|_| CORRUPT_PAYLOAD)?;
    if len > limit {
        return Err(PAYLOAD_TOO_LARGE);
    }
    snap::raw::Decoder::new()
        .decompress_vec(payload)
        .map_err(|_| CORRUPT_PAYLOAD)
}

/// Appends `records` compressed with `codec` to `out`, in the framing Kafka clients read.
fn compress(codec: Codec, records: &[u8], out: &mut Vec<u8>) -> Result<(), BatchError> {
    // kafka-protocol's compressors take the plain bytes from a closure that fills their
    // scratch buffer.
    let fill = |scratch: &mut BytesMut| {
        scratch.extend_from_slice(records);
        Ok(())
    };
    let result = match codec {
        Codec::None => {
            out.extend_from_slice(records);
            Ok(())
        }
        Codec::Gzip => Gzip::compress(out, fill),
        Codec::SnappyXerial => Snappy::compress(out, fill),
        Codec::Lz4 => Lz4::compress(out, fill),
        Codec::Zstd => Zstd::compress(out, fill),
        Codec::SnappyRaw => {
            // kafka-protocol only writes xerial framing; a raw original stays raw.
            let compressed = snap::raw::Encoder::new()
                .compress_vec(records)
                .map_err(|_| RECOMPRESS_FAILED)?;
            out.extend_from_slice(&compressed);
            Ok(())
        }
    };
    result.map_err(|_| RECOMPRESS_FAILED)
}

/// A record as walked: its wire bytes (length prefix included) and what callers see.
struct WalkedRecord<'a> {
    raw: &'a [u8],
    info: RecordInfo<'a>,
}

/// Walks exactly `recordCount` records filling `records`, checking each record's
/// structure and that offset deltas increase strictly within `0..=lastOffsetDelta`.
///
/// `recordCount` is only a loop bound: every iteration consumes at least one byte or
/// fails, so a huge count on a short buffer ends at the first missing byte.
fn walk<'a>(
    header: &BatchHeader,
    records: &'a [u8],
    mut visit: impl FnMut(WalkedRecord<'a>),
) -> Result<(), BatchError> {
    let mut c = Cursor::new(records);
    let mut previous_delta: Option<i32> = None;
    for _ in 0..header.record_count {
        let start = c.remaining();
        let length = c.varint().ok_or(BatchError::InvalidRecord(
            "record length is not a valid varint",
        ))?;
        let length = usize::try_from(length)
            .map_err(|_| BatchError::InvalidRecord("negative record length"))?;
        let body = c
            .bytes(length)
            .ok_or(BatchError::InvalidRecord("record length exceeds the batch"))?;
        let consumed = start.len() - c.remaining().len();
        let raw = start
            .get(..consumed)
            .ok_or(BatchError::InvalidRecord("record length exceeds the batch"))?;
        let fields = parse_record(body)?;

        // Increasing deltas keep offsets unique and ordered, which the cleaner's "latest
        // offset per key" relies on; the bound keeps them inside the batch's span.
        let in_order = previous_delta.is_none_or(|p| fields.offset_delta > p);
        if fields.offset_delta < 0 || fields.offset_delta > header.last_offset_delta || !in_order {
            return Err(BatchError::InvalidRecord(
                "record offset deltas are not increasing within lastOffsetDelta",
            ));
        }
        previous_delta = Some(fields.offset_delta);
        let offset = header
            .base_offset
            .checked_add(i64::from(fields.offset_delta))
            .ok_or(BatchError::InvalidRecord("record offset overflows"))?;
        let timestamp_ms = if header.is_log_append_time() {
            header.max_timestamp
        } else {
            header
                .base_timestamp
                .checked_add(fields.timestamp_delta)
                .ok_or(BatchError::InvalidRecord("record timestamp overflows"))?
        };
        visit(WalkedRecord {
            raw,
            info: RecordInfo {
                offset,
                timestamp_ms,
                key: fields.key,
                is_tombstone: fields.value_is_null,
            },
        });
    }
    if !c.is_empty() {
        return Err(BatchError::InvalidRecord(
            "bytes remain after the last record",
        ));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::batch::{layout, validate};
    use crate::batch_builder::{BatchBuilder, Record as BuilderRecord};
    use bytes::Bytes;
    use core::ops::Range;
    use kafka_protocol::protocol::StrBytes;
    use kafka_protocol::records::{
        Compression as KCompression, Record, RecordBatchDecoder, RecordBatchEncoder,
        RecordEncodeOptions, TimestampType,
    };
    use proptest::prelude::*;

    const CODECS: [KCompression; 5] = [
        KCompression::None,
        KCompression::Gzip,
        KCompression::Snappy,
        KCompression::Lz4,
        KCompression::Zstd,
    ];
    const BASE_OFFSET: i64 = 1000;
    const BASE_TS: i64 = 1_700_000_000_000;

    /// A record at `BASE_OFFSET + delta`, in a batch of producer 7 / epoch 2 whose
    /// sequence follows the offset (kafka-protocol's encoder groups records by that).
    fn record(
        delta: i64,
        ts_delta: i64,
        key: Option<&[u8]>,
        value: Option<&[u8]>,
        headers: &[(&str, Option<&[u8]>)],
    ) -> Record {
        Record {
            transactional: false,
            control: false,
            delete_horizon: false,
            partition_leader_epoch: 5,
            producer_id: 7,
            producer_epoch: 2,
            timestamp_type: TimestampType::Creation,
            offset: BASE_OFFSET + delta,
            sequence: 40 + delta as i32,
            timestamp: BASE_TS + ts_delta,
            key: key.map(Bytes::copy_from_slice),
            value: value.map(Bytes::copy_from_slice),
            headers: headers
                .iter()
                .map(|(k, v)| {
                    (
                        StrBytes::from_string((*k).to_owned()),
                        v.map(Bytes::copy_from_slice),
                    )
                })
                .collect(),
        }
    }

    /// Keys, a null key, tombstones, headers (one with a null value), and timestamps out
    /// of order, the largest on record 3.
    fn sample() -> Vec<Record> {
        vec![
            record(0, 0, Some(b"k0"), Some(b"v0"), &[]),
            record(1, 5, Some(b"k1"), None, &[("h", Some(b"x"))]),
            record(2, 2, None, Some(b"unkeyed"), &[]),
            record(
                3,
                90,
                Some(b"k0"),
                Some(b"v0-again"),
                &[("a", None), ("b", Some(b""))],
            ),
            record(4, 7, Some(b"k4"), None, &[]),
            record(5, 3, Some(b""), Some(b"empty key"), &[]),
        ]
    }

    /// One batch holding `records`, encoded by kafka-protocol.
    fn encode(records: &[Record], codec: KCompression) -> Vec<u8> {
        let mut buf = Vec::new();
        RecordBatchEncoder::encode(
            &mut buf,
            records,
            &RecordEncodeOptions {
                version: 2,
                compression: codec,
            },
        )
        .expect("test records encode");
        assert_eq!(
            BatchHeader::parse(&buf).expect("encoded").total_len(),
            buf.len(),
            "the encoder made exactly one batch"
        );
        buf
    }

    fn decode(batch: &[u8]) -> (KCompression, Vec<Record>) {
        let set = RecordBatchDecoder::decode(&mut Bytes::copy_from_slice(batch))
            .expect("kafka-protocol decodes the batch");
        (set.compression, set.records)
    }

    /// A record as `for_each_record` reports it: offset, timestamp, key, tombstone.
    type Info = (i64, i64, Option<Vec<u8>>, bool);

    fn infos(batch: &[u8]) -> Result<Vec<Info>, BatchError> {
        let mut out = Vec::new();
        for_each_record(batch, |r| {
            out.push((
                r.offset,
                r.timestamp_ms,
                r.key.map(<[u8]>::to_vec),
                r.is_tombstone,
            ))
        })?;
        Ok(out)
    }

    fn expected_infos(records: &[&Record]) -> Vec<Info> {
        records
            .iter()
            .map(|r| {
                (
                    r.offset,
                    r.timestamp,
                    r.key.as_ref().map(|k| k.to_vec()),
                    r.value.is_none(),
                )
            })
            .collect()
    }

    fn fix_crc(buf: &mut [u8]) {
        write_crc(buf);
    }

    /// Sets `bits` in the `attributes` field (CRC left stale).
    fn set_attribute_bits(buf: &mut [u8], bits: i16) {
        let attributes = i16::from_be_bytes(buf[ATTRIBUTES].try_into().expect("2 bytes"));
        write_field(buf, ATTRIBUTES, (attributes | bits).to_be_bytes());
    }

    /// `batch` with its records section replaced, length and CRC fixed, so a test reaches
    /// the decompressor or the record walk rather than the framing checks.
    fn with_payload(batch: &[u8], payload: &[u8]) -> Vec<u8> {
        let mut out = batch[..BATCH_HEADER_LEN].to_vec();
        out.extend_from_slice(payload);
        let len = (out.len() - LOG_OVERHEAD) as i32;
        write_field(&mut out, BATCH_LENGTH, len.to_be_bytes());
        fix_crc(&mut out);
        out
    }

    fn rewritten(f: Filtered) -> Vec<u8> {
        match f {
            Filtered::Rewritten(b) => b,
            other => panic!("expected a rewrite, got {other:?}"),
        }
    }

    /// Checks everything a rewrite must preserve or recompute, against the original
    /// records and the mask of kept ones.
    fn check_rewrite(original: &[u8], records: &[Record], keep: &[bool], out: &[u8]) {
        let before = BatchHeader::parse(original).expect("original parses");
        let after = BatchHeader::parse(out).expect("rewrite parses");
        let kept: Vec<&Record> = records
            .iter()
            .zip(keep)
            .filter_map(|(r, k)| k.then_some(r))
            .collect();

        assert_eq!(after.total_len(), out.len());
        assert_eq!(after.crc, crc32c::crc32c(&out[CRC_START..]));
        assert_eq!(after.base_offset, before.base_offset);
        assert_eq!(after.partition_leader_epoch, before.partition_leader_epoch);
        assert_eq!(after.magic, 2);
        assert_eq!(after.attributes, before.attributes);
        assert_eq!(after.last_offset_delta, before.last_offset_delta);
        assert_eq!(after.base_timestamp, before.base_timestamp);
        assert_eq!(after.producer_id, before.producer_id);
        assert_eq!(after.producer_epoch, before.producer_epoch);
        assert_eq!(after.base_sequence, before.base_sequence);
        assert_eq!(after.record_count as usize, kept.len());
        let max_ts = if before.is_log_append_time() {
            before.max_timestamp
        } else {
            kept.iter().map(|r| r.timestamp).max().expect("some kept")
        };
        assert_eq!(after.max_timestamp, max_ts);
        // Kept record bytes are verbatim, so an uncompressed rewrite is a subsequence.
        if before.compression() == Ok(Compression::None) {
            assert!(out.len() < original.len());
        }
        // Sparse offsets are what validate (the produce-path check) exists to reject.
        assert_eq!(
            validate(out, usize::MAX),
            Err(BatchError::InvalidRecordCount)
        );

        let (codec, decoded) = decode(out);
        let (original_codec, _) = decode(original);
        assert_eq!(codec, original_codec);
        // kafka-protocol reports base + delta as the timestamp whatever the type.
        let kept_owned: Vec<Record> = kept
            .iter()
            .map(|r| Record {
                timestamp_type: if before.is_log_append_time() {
                    TimestampType::LogAppend
                } else {
                    TimestampType::Creation
                },
                ..(*r).clone()
            })
            .collect();
        assert_eq!(decoded, kept_owned);
        assert_eq!(infos(out).expect("rewrite reads back"), {
            let mut e = expected_infos(&kept);
            if before.is_log_append_time() {
                e.iter_mut().for_each(|i| i.1 = before.max_timestamp);
            }
            e
        });
    }

    #[test]
    fn reads_every_record_of_every_codec() {
        let records = sample();
        for codec in CODECS {
            let batch = encode(&records, codec);
            assert!(validate(&batch, usize::MAX).is_ok(), "{codec:?}");
            let all: Vec<&Record> = records.iter().collect();
            assert_eq!(infos(&batch), Ok(expected_infos(&all)), "{codec:?}");
        }
    }

    #[test]
    fn filters_every_codec() {
        let records = sample();
        // Drops the first record, the one with the largest timestamp and the last one.
        let keep = [false, true, true, false, true, false];
        for codec in CODECS {
            let batch = encode(&records, codec);
            let mut seen = Vec::new();
            let out = rewritten(
                filter_batch(&batch, |r| {
                    seen.push(r.offset);
                    keep[(r.offset - BASE_OFFSET) as usize]
                })
                .expect("filters"),
            );
            assert_eq!(
                seen,
                (1000..1006).collect::<Vec<_>>(),
                "keep sees each once"
            );
            check_rewrite(&batch, &records, &keep, &out);
            if codec == KCompression::Snappy {
                assert!(out[BATCH_HEADER_LEN..].starts_with(XERIAL_MAGIC));
            }
            // A compacted batch compacts again (sparse offset deltas on input).
            let again =
                rewritten(filter_batch(&out, |r| r.offset != BASE_OFFSET + 2).expect("refilters"));
            check_rewrite(
                &batch,
                &records,
                &[false, true, false, false, true, false],
                &again,
            );
        }
    }

    #[test]
    fn keep_all_is_unchanged_and_keep_none_is_empty() {
        let records = sample();
        for codec in CODECS {
            let batch = encode(&records, codec);
            assert_eq!(filter_batch(&batch, |_| true), Ok(Filtered::Unchanged));
            assert_eq!(filter_batch(&batch, |_| false), Ok(Filtered::Empty));
        }
    }

    #[test]
    fn records_without_a_tail_keep_the_last_offset() {
        // Keeping a prefix still spans the whole original batch.
        let records = sample();
        let batch = encode(&records, KCompression::Lz4);
        let out = rewritten(filter_batch(&batch, |r| r.offset < BASE_OFFSET + 2).expect("ok"));
        let h = BatchHeader::parse(&out).expect("parses");
        assert_eq!((h.record_count, h.last_offset_delta), (2, 5));
        assert_eq!(h.last_offset(), BASE_OFFSET + 5);
    }

    #[test]
    fn log_append_time_keeps_the_batch_timestamp() {
        let records = sample();
        for codec in CODECS {
            let mut batch = encode(&records, codec);
            // kafka-protocol's encoder never sets the bit; a broker stamps it like this.
            set_attribute_bits(&mut batch, TIMESTAMP_TYPE_BIT);
            write_field(&mut batch, MAX_TIMESTAMP, (BASE_TS + 5000).to_be_bytes());
            fix_crc(&mut batch);
            let got = infos(&batch).expect("reads");
            assert!(got.iter().all(|r| r.1 == BASE_TS + 5000));
            let keep = [true, false, false, false, false, true];
            let out = rewritten(
                filter_batch(&batch, |r| keep[(r.offset - BASE_OFFSET) as usize]).expect("ok"),
            );
            check_rewrite(&batch, &records, &keep, &out);
            assert_eq!(
                BatchHeader::parse(&out).expect("parses").max_timestamp,
                BASE_TS + 5000
            );
        }
    }

    #[test]
    fn transactional_and_control_bits_survive() {
        let mut records = sample();
        for r in &mut records {
            r.transactional = true;
        }
        let batch = encode(&records, KCompression::Zstd);
        assert!(BatchHeader::parse(&batch)
            .expect("parses")
            .is_transactional());
        let keep = [true, true, false, true, false, false];
        let out = rewritten(
            filter_batch(&batch, |r| keep[(r.offset - BASE_OFFSET) as usize]).expect("ok"),
        );
        check_rewrite(&batch, &records, &keep, &out);

        let mut batch = encode(&sample(), KCompression::None);
        set_attribute_bits(&mut batch, layout::CONTROL_BIT);
        fix_crc(&mut batch);
        let out = rewritten(filter_batch(&batch, |r| r.offset == BASE_OFFSET).expect("ok"));
        assert!(BatchHeader::parse(&out).expect("parses").is_control());
    }

    #[test]
    fn raw_snappy_is_read_and_rewritten_raw() {
        // librdkafka's framing: the records section is one raw snappy block.
        let records = sample();
        let plain = encode(&records, KCompression::None);
        let raw = snap::raw::Encoder::new()
            .compress_vec(&plain[BATCH_HEADER_LEN..])
            .expect("compresses");
        assert!(!raw.starts_with(XERIAL_MAGIC));
        let mut batch = with_payload(&plain, &raw);
        set_attribute_bits(&mut batch, 0x02); // snappy
        fix_crc(&mut batch);
        let all: Vec<&Record> = records.iter().collect();
        assert_eq!(infos(&batch), Ok(expected_infos(&all)));

        let keep = [true, false, true, false, true, false];
        let out = rewritten(
            filter_batch(&batch, |r| keep[(r.offset - BASE_OFFSET) as usize]).expect("ok"),
        );
        let payload = &out[BATCH_HEADER_LEN..];
        assert!(!payload.starts_with(XERIAL_MAGIC), "raw framing is kept");
        assert!(snap::raw::decompress_len(payload).is_ok());
        check_rewrite(&batch, &records, &keep, &out);
    }

    #[test]
    fn multi_block_xerial_is_read() {
        // Over snappy-java's 32 KiB block size, so the stream has several blocks.
        let big = vec![b'z'; 100_000];
        let records = vec![
            record(0, 0, Some(b"a"), Some(&big), &[]),
            record(1, 1, Some(b"b"), Some(&big), &[]),
        ];
        let batch = encode(&records, KCompression::Snappy);
        let out = rewritten(filter_batch(&batch, |r| r.offset == BASE_OFFSET + 1).expect("ok"));
        check_rewrite(&batch, &records, &[false, true], &out);
    }

    #[test]
    fn batch_without_records_is_unchanged() {
        // What Kafka's cleaner leaves when it keeps an emptied batch: a bare header.
        for codec_bits in [0, 1, 2, 3, 4] {
            let mut batch = BatchBuilder::new(BASE_TS).build();
            set_attribute_bits(&mut batch, codec_bits);
            fix_crc(&mut batch);
            assert_eq!(infos(&batch), Ok(vec![]));
            assert_eq!(filter_batch(&batch, |_| false), Ok(Filtered::Unchanged));
        }
    }

    #[test]
    fn rejects_bad_framing() {
        let batch = encode(&sample(), KCompression::Gzip);
        assert_eq!(infos(&batch[..40]), Err(BatchError::TooShort));
        assert_eq!(
            infos(&batch[..batch.len() - 1]),
            Err(BatchError::InvalidLength)
        );
        let mut longer = batch.clone();
        longer.push(0);
        assert_eq!(infos(&longer), Err(BatchError::InvalidLength));

        let mut bad = batch.clone();
        bad[layout::MAGIC.start] = 1;
        assert_eq!(infos(&bad), Err(BatchError::UnsupportedMagic(1)));

        let mut bad = batch.clone();
        let last = bad.len() - 1;
        bad[last] ^= 1;
        assert!(matches!(infos(&bad), Err(BatchError::CorruptCrc { .. })));
        assert!(matches!(
            filter_batch(&bad, |_| true),
            Err(BatchError::CorruptCrc { .. })
        ));

        let mut bad = batch.clone();
        set_attribute_bits(&mut bad, COMPRESSION_MASK);
        fix_crc(&mut bad);
        assert_eq!(infos(&bad), Err(BatchError::UnsupportedCompression(7)));

        let mut bad = batch;
        write_field(&mut bad, RECORD_COUNT, (-1i32).to_be_bytes());
        fix_crc(&mut bad);
        assert_eq!(infos(&bad), Err(BatchError::InvalidRecordCount));
    }

    #[test]
    fn rejects_bad_records_before_calling_back() {
        let mut b = BatchBuilder::new(BASE_TS);
        for key in [b"a", b"b", b"c"] {
            b.push(&BuilderRecord {
                key: Some(key),
                value: Some(b"v"),
                headers: &[],
                timestamp_delta: 0,
            });
        }
        let good = b.build();
        let set_i32 = |buf: &mut Vec<u8>, range: Range<usize>, v: i32| {
            buf[range].copy_from_slice(&v.to_be_bytes());
            fix_crc(buf);
        };
        let mut cases = Vec::new();
        // lastOffsetDelta below the last record's delta.
        let mut bad = good.clone();
        set_i32(&mut bad, layout::LAST_OFFSET_DELTA, 1);
        cases.push(bad);
        // More records announced than present.
        let mut bad = good.clone();
        set_i32(&mut bad, RECORD_COUNT, 4);
        cases.push(bad);
        // Fewer announced than present: bytes remain.
        let mut bad = good.clone();
        set_i32(&mut bad, RECORD_COUNT, 2);
        cases.push(bad);
        // A repeated offset delta (record 2 claims delta 1).
        let mut bad = good.clone();
        // Each record is 9 bytes: len, attrs, ts, delta, key len, key, value len, value,
        // header count.
        let third = bad.len() - 9;
        assert_eq!(bad[third + 3], 4, "zigzag delta 2");
        bad[third + 3] = 2;
        fix_crc(&mut bad);
        cases.push(bad);
        // A value running past its record.
        let mut bad = good.clone();
        let last = bad.len() - 3;
        bad[last] = 0x7e;
        fix_crc(&mut bad);
        cases.push(bad);

        for (i, bad) in cases.iter().enumerate() {
            let mut called = false;
            let got = for_each_record(bad, |_| called = true);
            assert!(
                matches!(got, Err(BatchError::InvalidRecord(_))),
                "case {i}: {got:?}"
            );
            assert!(!called, "case {i}: callback ran on a bad batch");
            let got = filter_batch(bad, |_| {
                called = true;
                false
            });
            assert!(
                matches!(got, Err(BatchError::InvalidRecord(_))),
                "case {i}: {got:?}"
            );
            assert!(!called, "case {i}: predicate ran on a bad batch");
        }
    }

    #[test]
    fn corrupt_compressed_payloads_are_errors() {
        let records = sample();
        for codec in [
            KCompression::Gzip,
            KCompression::Snappy,
            KCompression::Lz4,
            KCompression::Zstd,
        ] {
            let batch = encode(&records, codec);
            let payload = &batch[BATCH_HEADER_LEN..];
            // Every truncation, with length and CRC fixed so the codec sees it.
            for cut in 1..payload.len() {
                let bad = with_payload(&batch, &payload[..cut]);
                assert!(infos(&bad).is_err(), "{codec:?} cut to {cut}");
                assert!(
                    filter_batch(&bad, |_| true).is_err(),
                    "{codec:?} cut to {cut}"
                );
            }
            // Every single-byte corruption: an error or, where a codec has no checksum
            // over that byte, some records; never a panic.
            for at in 0..payload.len() {
                let mut p = payload.to_vec();
                p[at] ^= 0xa5;
                let bad = with_payload(&batch, &p);
                let _ = infos(&bad);
                let _ = filter_batch(&bad, |r| r.offset % 2 == 0);
            }
            // Garbage of the right codec.
            let bad = with_payload(&batch, &[0xff; 40]);
            assert!(infos(&bad).is_err(), "{codec:?} garbage");
        }
        // A truncated xerial stream whose header survives.
        let batch = encode(&records, KCompression::Snappy);
        let bad = with_payload(&batch, &batch[BATCH_HEADER_LEN..BATCH_HEADER_LEN + 16]);
        assert_eq!(
            infos(&bad),
            Err(BatchError::InvalidRecord(
                "record length is not a valid varint"
            ))
        );
    }

    #[test]
    fn decompression_is_bounded_per_codec() {
        let zeros = vec![0u8; 1 << 20];
        let compressed = |codec: Codec| {
            let mut out = Vec::new();
            compress(codec, &zeros, &mut out).expect("compresses");
            out
        };
        let cases = [
            (Compression::Gzip, Codec::Gzip),
            (Compression::Snappy, Codec::SnappyXerial),
            (Compression::Snappy, Codec::SnappyRaw),
            (Compression::Lz4, Codec::Lz4),
            (Compression::Zstd, Codec::Zstd),
        ];
        for (compression, codec) in cases {
            let payload = compressed(codec);
            let (got_codec, plain) =
                decompress(compression, &payload, zeros.len()).expect("within the limit");
            assert_eq!((got_codec, plain.len()), (codec, zeros.len()));
            assert_eq!(
                decompress(compression, &payload, zeros.len() - 1).map(|_| ()),
                Err(PAYLOAD_TOO_LARGE),
                "{codec:?}"
            );
        }
    }

    #[test]
    fn decompression_bomb_is_refused() {
        // 65 MiB of zeros is a few KiB of zstd; the batch itself is tiny and valid.
        let mut payload = Vec::new();
        compress(Codec::Zstd, &vec![0u8; 65 << 20], &mut payload).expect("compresses");
        assert!(payload.len() < 1 << 20);
        let mut batch = with_payload(&encode(&sample(), KCompression::None), &payload);
        set_attribute_bits(&mut batch, 0x04); // zstd
        fix_crc(&mut batch);
        assert!(
            validate(&batch, usize::MAX).is_ok(),
            "the header checks pass"
        );
        assert_eq!(infos(&batch), Err(PAYLOAD_TOO_LARGE));
        // A raw snappy preamble announcing 1 GiB is refused before allocating it.
        let mut preamble = Vec::new();
        let mut n: u32 = 1 << 30;
        while n >= 0x80 {
            preamble.push((n as u8 & 0x7f) | 0x80);
            n >>= 7;
        }
        preamble.push(n as u8);
        preamble.extend_from_slice(&[0; 8]);
        assert_eq!(
            decompress(Compression::Snappy, &preamble, MAX_DECOMPRESSED_BYTES).map(|_| ()),
            Err(PAYLOAD_TOO_LARGE)
        );
    }

    fn arb_record() -> impl Strategy<Value = (Option<Vec<u8>>, Option<Vec<u8>>, u8, i64)> {
        (
            proptest::option::of(proptest::collection::vec(any::<u8>(), 0..8)),
            proptest::option::of(proptest::collection::vec(any::<u8>(), 0..40)),
            0u8..3,
            -50i64..50,
        )
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(64))]

        #[test]
        fn random_masks_round_trip(
            raw in proptest::collection::vec(arb_record(), 1..24),
            codec in 0usize..5,
            mask in proptest::collection::vec(any::<bool>(), 24),
            second in proptest::collection::vec(any::<bool>(), 24),
        ) {
            let codec = CODECS[codec];
            let records: Vec<Record> = raw
                .iter()
                .enumerate()
                .map(|(i, (k, v, h, ts))| {
                    let headers: Vec<(&str, Option<&[u8]>)> = (0..*h)
                        .map(|j| (["x", "y", "z"][j as usize], Some(&b"hv"[..j as usize])))
                        .collect();
                    // Timestamps relative to the first record, which is the batch base.
                    let ts = if i == 0 { 0 } else { 100 + ts };
                    record(i as i64, ts, k.as_deref(), v.as_deref(), &headers)
                })
                .collect();
            let batch = encode(&records, codec);
            let all: Vec<&Record> = records.iter().collect();
            prop_assert_eq!(infos(&batch), Ok(expected_infos(&all)));

            let keep = &mask[..records.len()];
            let got = filter_batch(&batch, |r| keep[(r.offset - BASE_OFFSET) as usize])
                .expect("filters");
            let kept = keep.iter().filter(|k| **k).count();
            let out = match got {
                Filtered::Unchanged => {
                    prop_assert_eq!(kept, records.len());
                    return Ok(());
                }
                Filtered::Empty => {
                    prop_assert_eq!(kept, 0);
                    return Ok(());
                }
                Filtered::Rewritten(out) => out,
            };
            prop_assert!(kept > 0 && kept < records.len());
            check_rewrite(&batch, &records, keep, &out);

            // Compacting the compacted batch again.
            let both: Vec<bool> = keep.iter().zip(&second).map(|(a, b)| *a && *b).collect();
            match filter_batch(&out, |r| both[(r.offset - BASE_OFFSET) as usize])
                .expect("refilters")
            {
                Filtered::Unchanged => prop_assert_eq!(both.iter().filter(|k| **k).count(), kept),
                Filtered::Empty => prop_assert!(both.iter().all(|k| !k)),
                Filtered::Rewritten(again) => check_rewrite(&batch, &records, &both, &again),
            }
        }
    }
}
