//! Where every field of the RecordBatch v2 header sits: its byte range from the start of
//! the batch, in wire order, each field big-endian (Kafka's `DefaultRecordBatch`).
//!
//! Code that reads or writes a header field by position names it here rather than
//! restating the offset. Compile-time asserts below the table check that the fields are
//! contiguous and as wide as their types, that [`FIELDS`] lists all of them in order,
//! that `batchLength` ends at [`LOG_OVERHEAD`], that the CRC-covered region
//! ([`CRC_START`]`..`) begins right after `crc` with `attributes`, and that `recordCount`
//! ends at [`BATCH_HEADER_LEN`]: a wrong number fails the build.

use core::ops::Range;

/// `baseOffset`, i64. In front of the CRC: the broker rewrites it in place.
pub const BASE_OFFSET: Range<usize> = 0..8;
/// `batchLength`, i32: the bytes of the batch after this field.
pub const BATCH_LENGTH: Range<usize> = 8..12;
/// `partitionLeaderEpoch`, i32. In front of the CRC: the broker rewrites it in place.
pub const PARTITION_LEADER_EPOCH: Range<usize> = 12..16;
/// `magic`, i8 (one byte: read it at `MAGIC.start`).
pub const MAGIC: Range<usize> = 16..17;
/// `crc`, u32: CRC-32C of `CRC_START..` (the end of the batch).
pub const CRC: Range<usize> = 17..21;
/// `attributes`, i16, the first field the CRC covers; its bits are the `*_BIT` and
/// `*_MASK` constants below.
pub const ATTRIBUTES: Range<usize> = 21..23;
/// `lastOffsetDelta`, i32.
pub const LAST_OFFSET_DELTA: Range<usize> = 23..27;
/// `baseTimestamp`, i64.
pub const BASE_TIMESTAMP: Range<usize> = 27..35;
/// `maxTimestamp`, i64.
pub const MAX_TIMESTAMP: Range<usize> = 35..43;
/// `producerId`, i64.
pub const PRODUCER_ID: Range<usize> = 43..51;
/// `producerEpoch`, i16.
pub const PRODUCER_EPOCH: Range<usize> = 51..53;
/// `baseSequence`, i32.
pub const BASE_SEQUENCE: Range<usize> = 53..57;
/// `recordCount`, i32, the last header field: the records follow.
pub const RECORD_COUNT: Range<usize> = 57..61;

/// Bytes in front of every batch that are not counted by `batchLength`: `baseOffset` (8)
/// and `batchLength` (4) itself. `total_len = LOG_OVERHEAD + batchLength`.
pub const LOG_OVERHEAD: usize = 12;

/// Length of the fixed RecordBatch v2 header, up to and including `recordCount`. The
/// records section starts here.
pub const BATCH_HEADER_LEN: usize = 61;

/// The CRC covers everything from `attributes` to the end of the batch. `baseOffset`,
/// `batchLength`, `partitionLeaderEpoch` and `magic` lie in front of it so that a broker
/// can assign offsets and stamp the leader epoch without recomputing it.
pub const CRC_START: usize = 21;

/// Every header field in wire order, with its width in bytes (the size of its type).
pub const FIELDS: [(Range<usize>, usize); 13] = [
    (BASE_OFFSET, size_of::<i64>()),
    (BATCH_LENGTH, size_of::<i32>()),
    (PARTITION_LEADER_EPOCH, size_of::<i32>()),
    (MAGIC, size_of::<i8>()),
    (CRC, size_of::<u32>()),
    (ATTRIBUTES, size_of::<i16>()),
    (LAST_OFFSET_DELTA, size_of::<i32>()),
    (BASE_TIMESTAMP, size_of::<i64>()),
    (MAX_TIMESTAMP, size_of::<i64>()),
    (PRODUCER_ID, size_of::<i64>()),
    (PRODUCER_EPOCH, size_of::<i16>()),
    (BASE_SEQUENCE, size_of::<i32>()),
    (RECORD_COUNT, size_of::<i32>()),
];

// The table is checked where it is written: a wrong number fails the build.
const _: () = {
    assert!(FIELDS[0].0.start == 0, "the header starts with baseOffset");
    let mut i = 0;
    while i < FIELDS.len() {
        let (field, width) = (&FIELDS[i].0, FIELDS[i].1);
        assert!(
            field.end - field.start == width,
            "a field is as wide as its type"
        );
        if i + 1 < FIELDS.len() {
            assert!(field.end == FIELDS[i + 1].0.start, "fields are contiguous");
        }
        i += 1;
    }
    assert!(
        FIELDS[FIELDS.len() - 1].0.end == BATCH_HEADER_LEN,
        "recordCount ends the header"
    );
    assert!(
        BATCH_LENGTH.end == LOG_OVERHEAD,
        "batchLength counts from its end"
    );
    assert!(CRC.end == CRC_START, "the covered region follows the crc");
    assert!(
        ATTRIBUTES.start == CRC_START,
        "the covered region starts at attributes"
    );
    assert!(
        PARTITION_LEADER_EPOCH.end <= CRC_START && BASE_OFFSET.end <= CRC_START,
        "the fields the broker rewrites lie outside the CRC"
    );
};

/// Attribute bits 0-2: the compression codec.
pub const COMPRESSION_MASK: i16 = 0x07;
/// Attribute bit 3: timestamps are broker log-append time rather than create time.
pub const TIMESTAMP_TYPE_BIT: i16 = 0x08;
/// Attribute bit 4: the batch belongs to a transaction.
pub const TRANSACTIONAL_BIT: i16 = 0x10;
/// Attribute bit 5: the batch holds a control record (transaction markers), never user
/// records.
pub const CONTROL_BIT: i16 = 0x20;
