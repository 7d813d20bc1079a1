//! Kafka RecordBatch v2: a zero-copy view of the 61-byte header, whole-batch validation,
//! in-place offset assignment and splitting a buffer into consecutive batches.
//!
//! Owns: the header's parse and in-place writes, the CRC-32C check, the record-level
//! walk of uncompressed batches, and the [`BatchError`] taxonomy. Where each header field
//! sits is not stated here but in [`layout`] (`corelog-record-batch`'s table, all
//! big-endian, re-exported), which the Kafka client shares.
//!
//! Invariants:
//! - Every function here is total over arbitrary input bytes: reads go through a cursor
//!   built on `split_first_chunk`/`split_at_checked`, lengths from the wire are checked
//!   against the bytes actually present, and nothing is allocated from a wire count. Bad
//!   bytes produce a [`BatchError`], never a panic.
//! - A buffer accepted by [`validate`] is exactly one whole magic-2 batch whose CRC
//!   matches, whose `lastOffsetDelta` agrees with `recordCount`, whose codec is known and,
//!   when uncompressed, whose records parse exactly and carry offset deltas 0, 1, 2, ...
//!   [`validate_stored`] accepts besides what the log cleaner leaves of such a batch:
//!   fewer records, with increasing deltas up to `lastOffsetDelta`.
//! - [`set_base_offset`] and [`set_partition_leader_epoch`] only touch bytes in front of
//!   the CRC-covered region (`[CRC_START..]`), so a valid batch stays valid.
//!
//! Does not: decompress (compressed batches are validated at the header level only;
//! their records are opaque), interpret record keys/values/headers, understand the legacy
//! magic 0/1 message sets, assign offsets across batches (the appender does), or perform
//! any I/O.

use core::ops::Range;

/// Where every field of the header sits. The table is `corelog-record-batch`'s (its one
/// owner, which the Kafka client shares); it is re-exported here so the storage engine's
/// code and its users name it as `batch::layout`. [`BatchHeader::parse`] reads the fields
/// in the table's order (a unit test checks it against the table).
pub use corelog_record_batch::layout;
pub use layout::{BATCH_HEADER_LEN, CRC_START, LOG_OVERHEAD};

/// The only batch format corelog stores.
pub const CURRENT_MAGIC: i8 = 2;

/// Smallest legal `batchLength`: the header bytes after the length field. A smaller value
/// cannot even describe its own header, and is what zero padding looks like.
const MIN_BATCH_LENGTH: i32 = (BATCH_HEADER_LEN - LOG_OVERHEAD) as i32;

use layout::{COMPRESSION_MASK, CONTROL_BIT, TIMESTAMP_TYPE_BIT, TRANSACTIONAL_BIT};

/// Why a byte range is not an acceptable record batch.
#[derive(Debug, thiserror::Error, Clone, PartialEq, Eq)]
pub enum BatchError {
    #[error("buffer shorter than the {BATCH_HEADER_LEN}-byte record batch header")]
    TooShort,
    #[error("batch length field is impossible or does not match the bytes supplied")]
    InvalidLength,
    #[error("batch header announces more bytes than the buffer holds")]
    Truncated,
    #[error("batch of {size} bytes exceeds the limit of {max} bytes")]
    TooLarge { size: usize, max: usize },
    #[error("unsupported record batch magic {0} (only 2 is supported)")]
    UnsupportedMagic(i8),
    /// A whole batch, its CRC-32C intact, of a format newer than this release stores: not a
    /// torn write (whose bytes would not check out), so never to be cut off as one.
    #[error("record batch magic {0} is newer than this release reads (magic 2)")]
    NewerMagic(i8),
    #[error("batch CRC-32C mismatch: header says {expected:#010x}, bytes give {actual:#010x}")]
    CorruptCrc { expected: u32, actual: u32 },
    #[error("record count is not positive or disagrees with lastOffsetDelta")]
    InvalidRecordCount,
    #[error("malformed record: {0}")]
    InvalidRecord(&'static str),
    #[error("unsupported compression codec {0}")]
    UnsupportedCompression(i16),
}

/// Compression codec, attribute bits 0-2.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Compression {
    None,
    Gzip,
    Snappy,
    Lz4,
    Zstd,
}

impl Compression {
    /// Decodes the codec from a batch's `attributes`; codes 5-7 are unassigned in Kafka.
    pub fn from_attributes(attributes: i16) -> Result<Compression, BatchError> {
        match attributes & COMPRESSION_MASK {
            0 => Ok(Compression::None),
            1 => Ok(Compression::Gzip),
            2 => Ok(Compression::Snappy),
            3 => Ok(Compression::Lz4),
            4 => Ok(Compression::Zstd),
            other => Err(BatchError::UnsupportedCompression(other)),
        }
    }
}

/// The decoded fixed header of one RecordBatch v2.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct BatchHeader {
    pub base_offset: i64,
    pub batch_length: i32,
    pub partition_leader_epoch: i32,
    pub magic: i8,
    pub crc: u32,
    pub attributes: i16,
    pub last_offset_delta: i32,
    pub base_timestamp: i64,
    pub max_timestamp: i64,
    pub producer_id: i64,
    pub producer_epoch: i16,
    pub base_sequence: i32,
    pub record_count: i32,
}

impl BatchHeader {
    /// Decodes the header from the start of `buf`.
    ///
    /// Checks only what is needed to frame the batch safely: at least
    /// [`BATCH_HEADER_LEN`] bytes and a `batchLength` that covers the header. It does not
    /// check the magic, the CRC, or that the whole batch is present; see [`validate`].
    pub fn parse(buf: &[u8]) -> Result<BatchHeader, BatchError> {
        let mut c = Cursor::new(buf.get(..BATCH_HEADER_LEN).ok_or(BatchError::TooShort)?);
        // The slice is exactly BATCH_HEADER_LEN bytes, so these reads cannot fail; the
        // `?` keeps the function total rather than relying on that arithmetic.
        let header = (|| {
            Some(BatchHeader {
                base_offset: c.i64()?,
                batch_length: c.i32()?,
                partition_leader_epoch: c.i32()?,
                magic: c.i8()?,
                crc: c.u32()?,
                attributes: c.i16()?,
                last_offset_delta: c.i32()?,
                base_timestamp: c.i64()?,
                max_timestamp: c.i64()?,
                producer_id: c.i64()?,
                producer_epoch: c.i16()?,
                base_sequence: c.i32()?,
                record_count: c.i32()?,
            })
        })()
        .ok_or(BatchError::TooShort)?;
        if header.batch_length < MIN_BATCH_LENGTH {
            return Err(BatchError::InvalidLength);
        }
        Ok(header)
    }

    /// Whole size of the batch on the wire: [`LOG_OVERHEAD`] + `batchLength`.
    ///
    /// `parse` guarantees `batch_length >= 49`; a negative length (only possible for a
    /// hand-built header) saturates to `LOG_OVERHEAD`.
    pub fn total_len(&self) -> usize {
        let body = usize::try_from(self.batch_length).unwrap_or(0);
        LOG_OVERHEAD.saturating_add(body)
    }

    /// Offset of the last record: `baseOffset + lastOffsetDelta`. Saturates rather than
    /// wrapping, because both fields come from the wire.
    pub fn last_offset(&self) -> i64 {
        self.base_offset
            .saturating_add(i64::from(self.last_offset_delta))
    }

    /// The codec in attribute bits 0-2; an error for the unassigned codes 5-7.
    pub fn compression(&self) -> Result<Compression, BatchError> {
        Compression::from_attributes(self.attributes)
    }

    /// Attribute bit 3: timestamps are broker log-append time rather than create time.
    pub fn is_log_append_time(&self) -> bool {
        self.attributes & TIMESTAMP_TYPE_BIT != 0
    }

    /// Attribute bit 4: the batch belongs to a transaction.
    pub fn is_transactional(&self) -> bool {
        self.attributes & TRANSACTIONAL_BIT != 0
    }

    /// Attribute bit 5: the batch holds a control record (transaction marker).
    pub fn is_control(&self) -> bool {
        self.attributes & CONTROL_BIT != 0
    }
}

/// Validates that `buf` is exactly one whole, intact RecordBatch v2 of at most
/// `max_batch_bytes` bytes, as a producer sends it, and returns its header.
///
/// Checks, in order: framing ([`BatchError::TooShort`], [`BatchError::InvalidLength`]),
/// size, magic, CRC-32C over `[CRC_START..]`, record count against `lastOffsetDelta`, codec,
/// and for uncompressed batches every record (see the module doc). The CRC is checked
/// before any record is walked so that corruption is reported as corruption rather than
/// as whatever malformed record it happens to produce.
pub fn validate(buf: &[u8], max_batch_bytes: usize) -> Result<BatchHeader, BatchError> {
    validate_as(buf, max_batch_bytes, Form::Produced)
}

/// Validates that `buf` is exactly one whole, intact RecordBatch v2 as a log may store
/// it: what [`validate`] accepts, or a batch the log cleaner rewrote. A cleaned batch
/// keeps its base offset and `lastOffsetDelta` but holds fewer records (none, even: Kafka
/// keeps an emptied batch that carries a producer's last sequence), so `recordCount` is
/// at most `lastOffsetDelta + 1` and the offset deltas of an uncompressed batch only
/// increase, within `[0, lastOffsetDelta]`. For batches that come from another log (a
/// follower's append of its leader's batches).
pub fn validate_stored(buf: &[u8]) -> Result<BatchHeader, BatchError> {
    validate_as(buf, usize::MAX, Form::Stored)
}

/// Which record layout a batch may have.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Form {
    /// As produced: offset deltas 0, 1, 2, … and `recordCount == lastOffsetDelta + 1`.
    Produced,
    /// As a log stores it after compaction: increasing deltas, possibly with gaps.
    Stored,
}

fn validate_as(buf: &[u8], max_batch_bytes: usize, form: Form) -> Result<BatchHeader, BatchError> {
    let header = BatchHeader::parse(buf)?;
    let size = header.total_len();
    if size != buf.len() {
        return Err(BatchError::InvalidLength);
    }
    if size > max_batch_bytes {
        return Err(BatchError::TooLarge {
            size,
            max: max_batch_bytes,
        });
    }
    if header.magic != CURRENT_MAGIC {
        let intact = buf
            .get(CRC_START..)
            .is_some_and(|covered| crc32c::crc32c(covered) == header.crc);
        if header.magic > CURRENT_MAGIC && intact {
            return Err(BatchError::NewerMagic(header.magic));
        }
        return Err(BatchError::UnsupportedMagic(header.magic));
    }
    let covered = buf.get(CRC_START..).ok_or(BatchError::TooShort)?;
    let actual = crc32c::crc32c(covered);
    if actual != header.crc {
        return Err(BatchError::CorruptCrc {
            expected: header.crc,
            actual,
        });
    }
    let counted = match form {
        Form::Produced => {
            header.record_count >= 1
                && header.record_count.checked_sub(1) == Some(header.last_offset_delta)
        }
        Form::Stored => {
            header.record_count >= 0
                && header.last_offset_delta >= 0
                && header.record_count - 1 <= header.last_offset_delta
        }
    };
    if !counted {
        return Err(BatchError::InvalidRecordCount);
    }
    if header.compression()? == Compression::None {
        let records = buf.get(BATCH_HEADER_LEN..).ok_or(BatchError::TooShort)?;
        walk_records(records, &header, form)?;
    }
    Ok(header)
}

/// Walks the records of an uncompressed batch, checking that exactly `recordCount`
/// records fill `records`, that each one's fields fill exactly its declared length, and
/// that its offset delta fits `form`.
///
/// `recordCount` is only a loop bound: every iteration consumes at least one byte or
/// fails, so a huge count on a short buffer ends at the first missing byte.
fn walk_records(records: &[u8], header: &BatchHeader, form: Form) -> Result<(), BatchError> {
    let mut c = Cursor::new(records);
    let mut previous_delta = -1;
    for index in 0..header.record_count {
        let length = c.varint().ok_or(BatchError::InvalidRecord(
            "record length is not a valid varint",
        ))?;
        let length = usize::try_from(length)
            .map_err(|_| BatchError::InvalidRecord("negative record length"))?;
        let body = c
            .bytes(length)
            .ok_or(BatchError::InvalidRecord("record length exceeds the batch"))?;
        let delta = walk_record(body)?;
        let in_place = match form {
            // Offsets inside a produced batch are dense; a gap or reordering would make
            // the broker's offset assignment (base + delta) disagree with what the
            // producer meant.
            Form::Produced => delta == index,
            Form::Stored => delta > previous_delta && delta <= header.last_offset_delta,
        };
        if !in_place {
            return Err(BatchError::InvalidRecord(match form {
                Form::Produced => "record offset delta does not equal its position in the batch",
                Form::Stored => "record offset deltas do not increase within the batch",
            }));
        }
        previous_delta = delta;
    }
    if !c.is_empty() {
        return Err(BatchError::InvalidRecord(
            "bytes remain after the last record",
        ));
    }
    Ok(())
}

/// Checks one record body's grammar and returns its offset delta.
fn walk_record(body: &[u8]) -> Result<i32, BatchError> {
    Ok(parse_record(body)?.offset_delta)
}

/// The fields of one record body that the walk needs.
pub(crate) struct RecordFields<'a> {
    pub(crate) timestamp_delta: i64,
    pub(crate) offset_delta: i32,
    pub(crate) key: Option<&'a [u8]>,
    pub(crate) value_is_null: bool,
}

/// Parses one record body (everything after its length varint), which must be consumed
/// exactly: the record grammar, shared by validation (which also wants dense offset
/// deltas, `walk_record`) and the record filter of `crate::batch_filter`.
pub(crate) fn parse_record(body: &[u8]) -> Result<RecordFields<'_>, BatchError> {
    let mut c = Cursor::new(body);
    c.i8().ok_or(BatchError::InvalidRecord(
        "record truncated before attributes",
    ))?;
    let timestamp_delta = c
        .varlong()
        .ok_or(BatchError::InvalidRecord("bad record timestamp delta"))?;
    let offset_delta = c
        .varint()
        .ok_or(BatchError::InvalidRecord("bad record offset delta"))?;
    let key = c
        .nullable_bytes()
        .ok_or(BatchError::InvalidRecord("bad record key"))?;
    let value = c
        .nullable_bytes()
        .ok_or(BatchError::InvalidRecord("bad record value"))?;
    let header_count = c
        .varint()
        .ok_or(BatchError::InvalidRecord("bad record header count"))?;
    if header_count < 0 {
        return Err(BatchError::InvalidRecord("negative record header count"));
    }
    for _ in 0..header_count {
        // Header keys are non-null strings in Kafka; values may be null.
        let key_len = c
            .varint()
            .ok_or(BatchError::InvalidRecord("bad record header key length"))?;
        let key_len = usize::try_from(key_len)
            .map_err(|_| BatchError::InvalidRecord("null or negative record header key"))?;
        c.bytes(key_len).ok_or(BatchError::InvalidRecord(
            "record header key exceeds the record",
        ))?;
        c.nullable_bytes()
            .ok_or(BatchError::InvalidRecord("bad record header value"))?;
    }
    if !c.is_empty() {
        return Err(BatchError::InvalidRecord(
            "record fields do not fill its declared length",
        ));
    }
    Ok(RecordFields {
        timestamp_delta,
        offset_delta,
        key,
        value_is_null: value.is_none(),
    })
}

/// One record of an uncompressed batch, borrowed from the batch bytes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RecordView<'a> {
    pub offset: i64,
    pub timestamp_ms: i64,
    pub key: Option<&'a [u8]>,
    pub value: Option<&'a [u8]>,
}

/// The records of an uncompressed batch (what the broker's own internal topics hold).
/// `None` for a compressed batch or malformed records; headers are skipped.
pub fn records(batch: &[u8]) -> Option<Vec<RecordView<'_>>> {
    let header = BatchHeader::parse(batch).ok()?;
    if header.compression().ok()? != Compression::None {
        return None;
    }
    let mut c = Cursor::new(batch.get(BATCH_HEADER_LEN..header.total_len())?);
    let count = usize::try_from(header.record_count).ok()?;
    // Bounded by the bytes present: every record takes at least 7 bytes.
    let mut out = Vec::with_capacity(count.min(batch.len() / 7));
    for _ in 0..count {
        let length = usize::try_from(c.varint()?).ok()?;
        let mut r = Cursor::new(c.bytes(length)?);
        r.i8()?;
        let ts = header.base_timestamp.checked_add(r.varlong()?)?;
        let delta = r.varint()?;
        let key = r.nullable_bytes()?;
        let value = r.nullable_bytes()?;
        out.push(RecordView {
            offset: header.base_offset.checked_add(i64::from(delta))?,
            timestamp_ms: ts,
            key,
            value,
        });
    }
    Some(out)
}

/// Writes `base_offset` into a batch in place. Outside the CRC, so the CRC stays valid.
///
/// Panics if `batch` is shorter than a header: callers pass only validated batches.
pub fn set_base_offset(batch: &mut [u8], base_offset: i64) {
    assert!(
        batch.len() >= BATCH_HEADER_LEN,
        "set_base_offset on a {}-byte slice",
        batch.len()
    );
    write_field(batch, layout::BASE_OFFSET, base_offset.to_be_bytes());
}

/// Writes `partitionLeaderEpoch` into a batch in place. Outside the CRC, so the CRC stays
/// valid.
///
/// Panics if `batch` is shorter than a header: callers pass only validated batches.
pub fn set_partition_leader_epoch(batch: &mut [u8], epoch: i32) {
    assert!(
        batch.len() >= BATCH_HEADER_LEN,
        "set_partition_leader_epoch on a {}-byte slice",
        batch.len()
    );
    write_field(batch, layout::PARTITION_LEADER_EPOCH, epoch.to_be_bytes());
}

/// The `magic` byte of the batch starting at `batch`, or `None` if the buffer ends before
/// it. Reads only that byte: the cheap first check of a buffer of unknown format.
#[inline]
pub fn magic(batch: &[u8]) -> Option<i8> {
    batch
        .get(layout::MAGIC.start)
        .map(|&byte| i8::from_be_bytes([byte]))
}

/// Writes `bytes` (a field's big-endian encoding) into `field`, one of the [`layout`]
/// ranges, of the batch starting at `batch`. Does nothing if the buffer ends before the
/// field; panics if `N` is not the field's width (a mistake in the caller, never input).
/// Does not touch the CRC: for a field from `CRC_START` on, follow with [`write_crc`].
#[inline]
pub fn write_field<const N: usize>(batch: &mut [u8], field: Range<usize>, bytes: [u8; N]) {
    if let Some(at) = batch.get_mut(field) {
        at.copy_from_slice(&bytes);
    }
}

/// Computes the CRC-32C of the covered region (`CRC_START..`, to the end of `batch`) and
/// writes it into the `crc` field: what any change to a covered field ends with. `batch`
/// must be exactly one batch. Does nothing if it is shorter than the `crc` field's end.
#[inline]
pub fn write_crc(batch: &mut [u8]) {
    let crc = crc32c::crc32c(batch.get(CRC_START..).unwrap_or_default());
    write_field(batch, layout::CRC, crc.to_be_bytes());
}

/// Iterates over consecutive batches laid end to end in `buf` (a produce request's
/// records, or a log segment being scanned).
pub fn batches(buf: &[u8]) -> BatchIter<'_> {
    BatchIter {
        buf,
        pos: 0,
        done: false,
    }
}

/// Iterator returned by [`batches`].
///
/// Yields each batch's header and its byte range within the buffer. Only framing is
/// checked (header present, `batchLength` plausible, batch within the buffer); callers
/// [`validate`] each range as they need. It ends with `None` exactly at the end of the
/// buffer; if the remaining bytes cannot be framed it yields one error
/// ([`BatchError::Truncated`] when a header, or a batch it announces, runs past the end;
/// [`BatchError::InvalidLength`] for an impossible length such as zero padding) and then
/// ends, because nothing after an unframeable batch can be located.
#[derive(Debug, Clone)]
pub struct BatchIter<'a> {
    buf: &'a [u8],
    pos: usize,
    done: bool,
}

impl BatchIter<'_> {
    /// Byte position of the next batch: after an error, where the unframeable bytes begin
    /// (recovery truncates a torn tail there).
    pub fn position(&self) -> usize {
        self.pos
    }

    fn frame(&self, rest: &[u8]) -> Result<BatchHeader, BatchError> {
        if rest.len() < BATCH_HEADER_LEN {
            // A partial header. If its length field is readable and impossible, say so;
            // otherwise the bytes were cut short.
            let length = rest
                .get(layout::BATCH_LENGTH)
                .and_then(|b| b.try_into().ok())
                .map(i32::from_be_bytes);
            return match length {
                Some(len) if len < MIN_BATCH_LENGTH => Err(BatchError::InvalidLength),
                _ => Err(BatchError::Truncated),
            };
        }
        let header = BatchHeader::parse(rest)?;
        if header.total_len() > rest.len() {
            return Err(BatchError::Truncated);
        }
        Ok(header)
    }
}

impl Iterator for BatchIter<'_> {
    type Item = Result<(BatchHeader, Range<usize>), BatchError>;

    fn next(&mut self) -> Option<Self::Item> {
        if self.done {
            return None;
        }
        let rest = match self.buf.get(self.pos..) {
            Some(rest) if !rest.is_empty() => rest,
            _ => {
                self.done = true;
                return None;
            }
        };
        match self.frame(rest) {
            Ok(header) => {
                let start = self.pos;
                // frame() checked total_len <= rest.len(), so this cannot exceed buf.len().
                let end = start.saturating_add(header.total_len());
                self.pos = end;
                Some(Ok((header, start..end)))
            }
            Err(e) => {
                self.done = true;
                Some(Err(e))
            }
        }
    }
}

/// A bounds-checked big-endian reader. Every read returns `None` instead of reading past
/// the end, which is how "bound everything by the bytes present" is enforced.
/// Crate-visible so that `crate::batch_filter` parses records with the same rules.
pub(crate) struct Cursor<'a> {
    rest: &'a [u8],
}

impl<'a> Cursor<'a> {
    pub(crate) fn new(buf: &'a [u8]) -> Self {
        Cursor { rest: buf }
    }

    pub(crate) fn is_empty(&self) -> bool {
        self.rest.is_empty()
    }

    /// The bytes not read yet (to slice out exactly what a sequence of reads consumed).
    pub(crate) fn remaining(&self) -> &'a [u8] {
        self.rest
    }

    fn array<const N: usize>(&mut self) -> Option<[u8; N]> {
        let (head, rest) = self.rest.split_first_chunk::<N>()?;
        self.rest = rest;
        Some(*head)
    }

    pub(crate) fn bytes(&mut self, n: usize) -> Option<&'a [u8]> {
        let (head, rest) = self.rest.split_at_checked(n)?;
        self.rest = rest;
        Some(head)
    }

    fn u8(&mut self) -> Option<u8> {
        self.array::<1>().map(u8::from_be_bytes)
    }

    pub(crate) fn i8(&mut self) -> Option<i8> {
        self.array::<1>().map(i8::from_be_bytes)
    }

    fn i16(&mut self) -> Option<i16> {
        self.array::<2>().map(i16::from_be_bytes)
    }

    fn i32(&mut self) -> Option<i32> {
        self.array::<4>().map(i32::from_be_bytes)
    }

    pub(crate) fn u32(&mut self) -> Option<u32> {
        self.array::<4>().map(u32::from_be_bytes)
    }

    fn i64(&mut self) -> Option<i64> {
        self.array::<8>().map(i64::from_be_bytes)
    }

    /// Unsigned LEB128 of at most `max_bytes` bytes. Longer encodings are rejected, as
    /// Kafka's `ByteUtils` does, so a run of continuation bytes cannot be read forever.
    fn uvarint(&mut self, max_bytes: u32) -> Option<u64> {
        let mut value: u64 = 0;
        for i in 0..max_bytes {
            let byte = self.u8()?;
            // i < 10, so the shift is < 64; bits shifted past 63 are dropped, and callers
            // truncate to their width like Kafka's int/long arithmetic.
            value |= u64::from(byte & 0x7f) << (7 * i);
            if byte & 0x80 == 0 {
                return Some(value);
            }
        }
        None
    }

    /// Zigzag varint (Kafka `varint`, an i32), at most 5 bytes.
    pub(crate) fn varint(&mut self) -> Option<i32> {
        // Truncation to 32 bits is intentional: it mirrors Kafka's int arithmetic.
        let raw = self.uvarint(5)? as u32;
        Some(((raw >> 1) as i32) ^ -((raw & 1) as i32))
    }

    /// Zigzag varlong (Kafka `varlong`, an i64), at most 10 bytes.
    pub(crate) fn varlong(&mut self) -> Option<i64> {
        let raw = self.uvarint(10)?;
        Some(((raw >> 1) as i64) ^ -((raw & 1) as i64))
    }

    /// A varint length followed by that many bytes; -1 means null. Returns `Some(None)`
    /// for null and `None` for a length below -1 or past the end.
    pub(crate) fn nullable_bytes(&mut self) -> Option<Option<&'a [u8]>> {
        let len = self.varint()?;
        if len == -1 {
            return Some(None);
        }
        let len = usize::try_from(len).ok()?;
        self.bytes(len).map(Some)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::batch_builder::{put_varint, put_varlong, BatchBuilder, Record};

    const MAX: usize = 1 << 20;

    fn record<'a>(key: &'a [u8], value: &'a [u8]) -> Record<'a> {
        Record {
            key: Some(key),
            value: Some(value),
            headers: &[],
            timestamp_delta: 0,
        }
    }

    /// A three-record batch exercising null key, null value, headers and deltas.
    fn sample() -> Vec<u8> {
        let headers: [(&str, Option<&[u8]>); 2] = [("h1", Some(b"v1")), ("h2", None)];
        let mut b = BatchBuilder::new(1_700_000_000_000).producer(42, 3, 100);
        b.push(&record(b"k0", b"v0"));
        b.push(&Record {
            key: None,
            value: Some(b"value-1"),
            headers: &headers,
            timestamp_delta: 7,
        });
        b.push(&Record {
            key: Some(b"k2"),
            value: None,
            headers: &[],
            timestamp_delta: -3,
        });
        b.build()
    }

    /// Recomputes the CRC after a test has edited bytes inside the covered region, so the
    /// edit is reported as what it is rather than as corruption.
    fn fix_crc(buf: &mut [u8]) {
        write_crc(buf);
    }

    fn set_i32(buf: &mut [u8], field: Range<usize>, v: i32) {
        write_field(buf, field, v.to_be_bytes());
    }

    /// Sets `bits` in the `attributes` field (CRC left stale).
    fn set_attribute_bits(buf: &mut [u8], bits: i16) {
        let attributes = i16::from_be_bytes(buf[layout::ATTRIBUTES].try_into().expect("2 bytes"));
        write_field(buf, layout::ATTRIBUTES, (attributes | bits).to_be_bytes());
    }

    /// Builds a batch whose records section is `records` verbatim, with the given count.
    fn with_records(records: &[u8], record_count: i32) -> Vec<u8> {
        let mut buf = BatchBuilder::new(0).build();
        buf.truncate(BATCH_HEADER_LEN);
        buf.extend_from_slice(records);
        let batch_length = (buf.len() - LOG_OVERHEAD) as i32;
        set_i32(&mut buf, layout::BATCH_LENGTH, batch_length);
        set_i32(&mut buf, layout::LAST_OFFSET_DELTA, record_count - 1);
        set_i32(&mut buf, layout::RECORD_COUNT, record_count);
        fix_crc(&mut buf);
        buf
    }

    /// Encodes one record body field-by-field (offset delta given), prefixed by its length.
    fn raw_record(offset_delta: i32, body_tail: &[u8]) -> Vec<u8> {
        let mut body = vec![0u8]; // attributes
        put_varlong(&mut body, 0); // timestamp delta
        put_varint(&mut body, offset_delta);
        body.extend_from_slice(body_tail);
        let mut out = Vec::new();
        put_varint(&mut out, body.len() as i32);
        out.extend_from_slice(&body);
        out
    }

    /// key null, value null, no headers.
    const EMPTY_TAIL: &[u8] = &[0x01, 0x01, 0x00];

    #[test]
    fn crc32c_is_castagnoli() {
        assert_eq!(crc32c::crc32c(b"123456789"), 0xE306_9283);
    }

    #[test]
    fn parse_reads_every_header_field() {
        let mut buf = sample();
        set_base_offset(&mut buf, 1000);
        set_partition_leader_epoch(&mut buf, 9);
        let h = BatchHeader::parse(&buf).expect("test data is valid");
        assert_eq!(h.base_offset, 1000);
        assert_eq!(h.batch_length as usize, buf.len() - LOG_OVERHEAD);
        assert_eq!(h.partition_leader_epoch, 9);
        assert_eq!(h.magic, 2);
        assert_eq!(
            h.crc,
            u32::from_be_bytes(buf[layout::CRC].try_into().expect("test data is valid"))
        );
        assert_eq!(h.attributes, 0);
        assert_eq!(h.last_offset_delta, 2);
        assert_eq!(h.base_timestamp, 1_700_000_000_000);
        assert_eq!(h.max_timestamp, 1_700_000_000_007);
        assert_eq!(h.producer_id, 42);
        assert_eq!(h.producer_epoch, 3);
        assert_eq!(h.base_sequence, 100);
        assert_eq!(h.record_count, 3);
        assert_eq!(h.total_len(), buf.len());
        assert_eq!(h.last_offset(), 1002);
    }

    #[test]
    fn parse_reads_each_field_where_the_layout_table_puts_it() {
        // Distinct bytes everywhere, so a field read from the wrong place shows.
        let mut buf: Vec<u8> = (0..BATCH_HEADER_LEN as u8).collect();
        set_i32(&mut buf, layout::BATCH_LENGTH, MIN_BATCH_LENGTH);
        let h = BatchHeader::parse(&buf).expect("a long enough length");
        let at = |field: Range<usize>| &buf[field];
        let i64_at = |f| i64::from_be_bytes(at(f).try_into().expect("8 bytes"));
        let i32_at = |f| i32::from_be_bytes(at(f).try_into().expect("4 bytes"));
        let i16_at = |f| i16::from_be_bytes(at(f).try_into().expect("2 bytes"));
        assert_eq!(h.base_offset, i64_at(layout::BASE_OFFSET));
        assert_eq!(h.batch_length, i32_at(layout::BATCH_LENGTH));
        assert_eq!(
            h.partition_leader_epoch,
            i32_at(layout::PARTITION_LEADER_EPOCH)
        );
        assert_eq!(Some(h.magic), magic(&buf));
        let crc = u32::from_be_bytes(at(layout::CRC).try_into().expect("4 bytes"));
        assert_eq!(h.crc, crc);
        assert_eq!(h.attributes, i16_at(layout::ATTRIBUTES));
        assert_eq!(h.last_offset_delta, i32_at(layout::LAST_OFFSET_DELTA));
        assert_eq!(h.base_timestamp, i64_at(layout::BASE_TIMESTAMP));
        assert_eq!(h.max_timestamp, i64_at(layout::MAX_TIMESTAMP));
        assert_eq!(h.producer_id, i64_at(layout::PRODUCER_ID));
        assert_eq!(h.producer_epoch, i16_at(layout::PRODUCER_EPOCH));
        assert_eq!(h.base_sequence, i32_at(layout::BASE_SEQUENCE));
        assert_eq!(h.record_count, i32_at(layout::RECORD_COUNT));
        assert_eq!(magic(&buf[..layout::MAGIC.start]), None);
    }

    #[test]
    fn parse_rejects_short_and_impossible_lengths() {
        let buf = sample();
        assert_eq!(
            BatchHeader::parse(&buf[..BATCH_HEADER_LEN - 1]),
            Err(BatchError::TooShort)
        );
        assert!(BatchHeader::parse(&buf[..BATCH_HEADER_LEN]).is_ok());
        let mut bad = buf.clone();
        set_i32(&mut bad, layout::BATCH_LENGTH, MIN_BATCH_LENGTH - 1);
        assert_eq!(BatchHeader::parse(&bad), Err(BatchError::InvalidLength));
        set_i32(&mut bad, layout::BATCH_LENGTH, -1);
        assert_eq!(BatchHeader::parse(&bad), Err(BatchError::InvalidLength));
        assert_eq!(
            BatchHeader::parse(&[0u8; BATCH_HEADER_LEN]),
            Err(BatchError::InvalidLength)
        );
    }

    #[test]
    fn attribute_bits() {
        let mut h = BatchHeader::parse(&sample()).expect("test data is valid");
        assert_eq!(h.compression(), Ok(Compression::None));
        assert!(!h.is_log_append_time() && !h.is_transactional() && !h.is_control());
        h.attributes = 0b0011_1011;
        assert_eq!(h.compression(), Ok(Compression::Lz4));
        assert!(h.is_log_append_time() && h.is_transactional() && h.is_control());
        let codecs = [
            Compression::None,
            Compression::Gzip,
            Compression::Snappy,
            Compression::Lz4,
            Compression::Zstd,
        ];
        for (code, codec) in codecs.iter().enumerate() {
            assert_eq!(Compression::from_attributes(code as i16 | 0x30), Ok(*codec));
        }
        for code in 5..8 {
            assert_eq!(
                Compression::from_attributes(code),
                Err(BatchError::UnsupportedCompression(code))
            );
        }
    }

    #[test]
    fn validate_accepts_built_batch() {
        let buf = sample();
        let h = validate(&buf, MAX).expect("test data is valid");
        assert_eq!(h, BatchHeader::parse(&buf).expect("test data is valid"));
        assert_eq!(validate(&buf, buf.len()), Ok(h));
    }

    #[test]
    fn validate_rejects_length_mismatch() {
        let buf = sample();
        assert_eq!(validate(&buf[..40], MAX), Err(BatchError::TooShort));
        assert_eq!(
            validate(&buf[..buf.len() - 1], MAX),
            Err(BatchError::InvalidLength)
        );
        let mut longer = buf.clone();
        longer.push(0);
        assert_eq!(validate(&longer, MAX), Err(BatchError::InvalidLength));
    }

    #[test]
    fn validate_rejects_too_large() {
        let buf = sample();
        assert_eq!(
            validate(&buf, buf.len() - 1),
            Err(BatchError::TooLarge {
                size: buf.len(),
                max: buf.len() - 1
            })
        );
    }

    #[test]
    fn validate_rejects_other_magic() {
        let mut buf = sample();
        buf[layout::MAGIC.start] = 1;
        assert_eq!(magic(&buf), Some(1));
        assert_eq!(validate(&buf, MAX), Err(BatchError::UnsupportedMagic(1)));
    }

    #[test]
    fn a_whole_batch_of_a_newer_magic_is_told_apart_from_garbage() {
        let mut buf = sample();
        // (The magic byte sits before the CRC-covered region.)
        buf[layout::MAGIC.start] = 3;
        assert_eq!(validate_stored(&buf), Err(BatchError::NewerMagic(3)));
        // Garbage that happens to read as magic 3: its CRC does not hold.
        let last = buf.len() - 1;
        buf[last] ^= 0x01;
        assert_eq!(validate_stored(&buf), Err(BatchError::UnsupportedMagic(3)));
    }

    #[test]
    fn validate_reports_crc_mismatch() {
        let mut buf = sample();
        let expected = BatchHeader::parse(&buf).expect("test data is valid").crc;
        let last = buf.len() - 1;
        buf[last] ^= 0x01;
        let actual = crc32c::crc32c(&buf[CRC_START..]);
        assert_eq!(
            validate(&buf, MAX),
            Err(BatchError::CorruptCrc { expected, actual })
        );
    }

    #[test]
    fn validate_rejects_bad_record_counts() {
        // recordCount 0.
        let buf = with_records(&[], 0);
        assert_eq!(validate(&buf, MAX), Err(BatchError::InvalidRecordCount));
        // lastOffsetDelta disagrees with recordCount.
        let mut buf = sample();
        set_i32(&mut buf, layout::LAST_OFFSET_DELTA, 1);
        fix_crc(&mut buf);
        assert_eq!(validate(&buf, MAX), Err(BatchError::InvalidRecordCount));
        // Negative count.
        let mut buf = sample();
        set_i32(&mut buf, layout::RECORD_COUNT, -1);
        set_i32(&mut buf, layout::LAST_OFFSET_DELTA, -2);
        fix_crc(&mut buf);
        assert_eq!(validate(&buf, MAX), Err(BatchError::InvalidRecordCount));
    }

    #[test]
    fn validate_rejects_unknown_codec() {
        let mut buf = sample();
        set_attribute_bits(&mut buf, 0x07);
        fix_crc(&mut buf);
        assert_eq!(
            validate(&buf, MAX),
            Err(BatchError::UnsupportedCompression(7))
        );
    }

    #[test]
    fn compressed_records_are_opaque() {
        // A gzip batch's records are not walked: garbage after the header is accepted.
        let mut buf = with_records(&[0xff, 0xff, 0xff], 5);
        set_attribute_bits(&mut buf, 0x01);
        fix_crc(&mut buf);
        assert_eq!(
            validate(&buf, MAX)
                .expect("test data is valid")
                .compression(),
            Ok(Compression::Gzip)
        );
        // The same bytes uncompressed are rejected.
        let buf = with_records(&[0xff, 0xff, 0xff], 5);
        assert!(matches!(
            validate(&buf, MAX),
            Err(BatchError::InvalidRecord(_))
        ));
    }

    #[test]
    fn hand_encoded_records_are_accepted() {
        let mut records = raw_record(0, EMPTY_TAIL);
        records.extend(raw_record(1, EMPTY_TAIL));
        assert!(validate(&with_records(&records, 2), MAX).is_ok());
    }

    #[test]
    fn validate_rejects_wrong_offset_delta() {
        let mut records = raw_record(0, EMPTY_TAIL);
        records.extend(raw_record(2, EMPTY_TAIL));
        assert!(matches!(
            validate(&with_records(&records, 2), MAX),
            Err(BatchError::InvalidRecord(_))
        ));
    }

    /// A batch the cleaner left: `count` records with `deltas`, `last_offset_delta` kept.
    fn cleaned(deltas: &[i32], last_offset_delta: i32) -> Vec<u8> {
        let records: Vec<u8> = deltas
            .iter()
            .flat_map(|d| raw_record(*d, EMPTY_TAIL))
            .collect();
        let mut buf = with_records(&records, deltas.len() as i32);
        set_i32(&mut buf, layout::LAST_OFFSET_DELTA, last_offset_delta);
        fix_crc(&mut buf);
        buf
    }

    #[test]
    fn validate_stored_takes_what_the_cleaner_leaves_and_nothing_else() {
        for (deltas, last) in [
            (&[0, 3][..], 4),
            (&[4][..], 4),
            (&[][..], 2),
            (&[0, 1, 2][..], 2),
        ] {
            let buf = cleaned(deltas, last);
            let h = validate_stored(&buf).expect("a cleaned batch is a stored batch");
            assert_eq!(
                (h.record_count, h.last_offset_delta),
                (deltas.len() as i32, last)
            );
            if deltas.len() as i32 != last + 1 {
                assert!(
                    validate(&buf, MAX).is_err(),
                    "but not a produced one: {deltas:?}"
                );
            }
        }
        for (deltas, last) in [
            (&[3, 1][..], 4),  // deltas going back
            (&[1, 1][..], 4),  // a delta twice
            (&[0, 5][..], 4),  // past lastOffsetDelta
            (&[-1, 2][..], 4), // negative
        ] {
            assert!(
                matches!(
                    validate_stored(&cleaned(deltas, last)),
                    Err(BatchError::InvalidRecord(_))
                ),
                "{deltas:?} of {last}"
            );
        }
        // More records than offsets, or a negative range.
        assert_eq!(
            validate_stored(&cleaned(&[0, 1, 2], 1)).err(),
            Some(BatchError::InvalidRecordCount)
        );
        assert_eq!(
            validate_stored(&cleaned(&[], -1)).err(),
            Some(BatchError::InvalidRecordCount)
        );
    }

    #[test]
    fn validate_rejects_fewer_records_than_count() {
        let records = raw_record(0, EMPTY_TAIL);
        assert!(matches!(
            validate(&with_records(&records, 2), MAX),
            Err(BatchError::InvalidRecord(_))
        ));
    }

    #[test]
    fn validate_rejects_trailing_bytes_after_records() {
        let mut records = raw_record(0, EMPTY_TAIL);
        records.push(0);
        assert!(matches!(
            validate(&with_records(&records, 1), MAX),
            Err(BatchError::InvalidRecord(_))
        ));
    }

    #[test]
    fn validate_rejects_record_longer_than_batch() {
        let mut records = raw_record(0, EMPTY_TAIL);
        records[0] = 0x7e; // length 63, only 6 body bytes present
        assert!(matches!(
            validate(&with_records(&records, 1), MAX),
            Err(BatchError::InvalidRecord(_))
        ));
        let mut records = raw_record(0, EMPTY_TAIL);
        records[0] = 0x01; // length -1
        assert!(matches!(
            validate(&with_records(&records, 1), MAX),
            Err(BatchError::InvalidRecord(_))
        ));
    }

    #[test]
    fn validate_rejects_record_fields_not_filling_length() {
        // An extra byte inside the record's declared length.
        let records = raw_record(0, &[0x01, 0x01, 0x00, 0x00]);
        assert!(matches!(
            validate(&with_records(&records, 1), MAX),
            Err(BatchError::InvalidRecord(_))
        ));
        // A value length running past the record (but not past the batch).
        // The value must be bounded by the record, not by the rest of the batch.
        let mut records = raw_record(0, &[0x01, 0x04, 0x00]);
        records.extend_from_slice(&[0, 0, 0, 0]);
        assert_eq!(
            validate(&with_records(&records, 1), MAX),
            Err(BatchError::InvalidRecord("bad record value"))
        );
    }

    #[test]
    fn validate_rejects_bad_key_and_headers() {
        let cases: [&[u8]; 5] = [
            &[0x03, 0x01, 0x00],             // key length -2
            &[0x01, 0x01, 0x01],             // header count -1
            &[0x01, 0x01, 0x02, 0x01, 0x01], // header key null
            &[0x01, 0x01, 0x02, 0x08, b'a'], // header key past the end
            &[0x01, 0x01, 0x02, 0x02, b'a'], // header value missing
        ];
        for tail in cases {
            let records = raw_record(0, tail);
            assert!(
                matches!(
                    validate(&with_records(&records, 1), MAX),
                    Err(BatchError::InvalidRecord(_))
                ),
                "accepted tail {tail:?}"
            );
        }
        // The well-formed counterpart of the last cases: one header "a" -> null.
        let records = raw_record(0, &[0x01, 0x01, 0x02, 0x02, b'a', 0x01]);
        assert!(validate(&with_records(&records, 1), MAX).is_ok());
    }

    #[test]
    fn huge_counts_on_short_buffers_fail_fast() {
        // Header count i32::MAX with no header bytes.
        let records = raw_record(0, &[0x01, 0x01, 0xfe, 0xff, 0xff, 0xff, 0x0f]);
        assert_eq!(
            validate(&with_records(&records, 1), MAX),
            Err(BatchError::InvalidRecord("bad record header key length"))
        );
        // Record count i32::MAX with one record present.
        let records = raw_record(0, EMPTY_TAIL);
        assert_eq!(
            validate(&with_records(&records, i32::MAX), MAX),
            Err(BatchError::InvalidRecord(
                "record length is not a valid varint"
            ))
        );
    }

    #[test]
    fn varints_decode_zigzag_and_reject_overlong() {
        let values = [0, -1, 1, 63, -64, 64, 300, i32::MAX, i32::MIN];
        for v in values {
            let mut buf = Vec::new();
            put_varint(&mut buf, v);
            let mut c = Cursor::new(&buf);
            assert_eq!(c.varint(), Some(v));
            assert!(c.is_empty());
        }
        for v in [0i64, -1, 1, i64::MAX, i64::MIN, 1 << 40] {
            let mut buf = Vec::new();
            put_varlong(&mut buf, v);
            let mut c = Cursor::new(&buf);
            assert_eq!(c.varlong(), Some(v));
            assert!(c.is_empty());
        }
        assert_eq!(Cursor::new(&[0x02]).varint(), Some(1));
        assert_eq!(Cursor::new(&[0x03]).varint(), Some(-2));
        assert_eq!(
            Cursor::new(&[0x80, 0x80, 0x80, 0x80, 0x80, 0x00]).varint(),
            None
        );
        assert_eq!(Cursor::new(&[0x80]).varint(), None);
        assert_eq!(Cursor::new(&[0xff; 11]).varlong(), None);
    }

    #[test]
    fn setters_keep_crc_valid() {
        let mut buf = sample();
        set_base_offset(&mut buf, i64::MAX - 10);
        set_partition_leader_epoch(&mut buf, 77);
        let h = validate(&buf, MAX).expect("test data is valid");
        assert_eq!(h.base_offset, i64::MAX - 10);
        assert_eq!(h.partition_leader_epoch, 77);
        assert_eq!(h.last_offset(), i64::MAX - 8);
    }

    #[test]
    #[should_panic]
    fn setters_assert_header_present() {
        set_base_offset(&mut [0u8; BATCH_HEADER_LEN - 1], 1);
    }

    #[test]
    fn iterates_consecutive_batches() {
        let a = sample();
        let mut one = BatchBuilder::new(5);
        one.push(&record(b"x", b"y"));
        let b = one.build();
        let mut buf = a.clone();
        buf.extend_from_slice(&b);
        let got: Vec<_> = batches(&buf).collect();
        assert_eq!(got.len(), 2);
        let (ha, ra) = got[0].clone().expect("test data is valid");
        let (hb, rb) = got[1].clone().expect("test data is valid");
        assert_eq!(ra, 0..a.len());
        assert_eq!(rb, a.len()..buf.len());
        assert_eq!(ha.record_count, 3);
        assert_eq!(hb.record_count, 1);
        assert!(validate(&buf[rb], MAX).is_ok());
        assert_eq!(batches(&[]).next(), None);
    }

    #[test]
    fn iteration_reports_truncation_then_ends() {
        let a = sample();
        let mut buf = a.clone();
        buf.extend_from_slice(&a[..a.len() - 1]);
        let mut it = batches(&buf);
        assert!(it.next().expect("test data is valid").is_ok());
        assert_eq!(it.next(), Some(Err(BatchError::Truncated)));
        assert_eq!(it.position(), a.len());
        assert_eq!(it.next(), None);
        assert_eq!(it.next(), None);

        // A partial header is truncation too.
        let mut it = batches(&a[..20]);
        assert_eq!(it.next(), Some(Err(BatchError::Truncated)));
        assert_eq!(it.next(), None);
        let mut it = batches(&a[..5]);
        assert_eq!(it.next(), Some(Err(BatchError::Truncated)));
        assert_eq!(it.next(), None);
    }

    #[test]
    fn iteration_stops_at_zero_padding() {
        let a = sample();
        let mut buf = a.clone();
        buf.extend_from_slice(&[0u8; 4096]);
        let mut it = batches(&buf);
        assert!(it.next().expect("test data is valid").is_ok());
        assert_eq!(it.next(), Some(Err(BatchError::InvalidLength)));
        assert_eq!(it.position(), a.len());
        assert_eq!(it.next(), None);
        // Zero padding shorter than a header is recognised as well.
        let mut buf = a.clone();
        buf.extend_from_slice(&[0u8; 30]);
        let mut it = batches(&buf);
        assert!(it.next().expect("test data is valid").is_ok());
        assert_eq!(it.next(), Some(Err(BatchError::InvalidLength)));
    }
}
