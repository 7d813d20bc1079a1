//! An encoded response as the parts it is written in: the framing and small fields
//! copied into buffers, records by reference — tail-cache bytes as the cache holds them
//! (`Bytes`), segment-file ranges as ranges, which the connection sends with `splice`
//! (`net/frame_writer.rs`). So a fetch's records are never copied into a response buffer.
//!
//! kafka-protocol does the encoding; its `bytes` fields go through
//! `ByteBufMut::put_shared` (a marked patch in `vendor/kafka-protocol`), which
//! [`PartsBuf`] answers by keeping a reference. A records field that kafka-protocol
//! cannot hold as one `Bytes` without a copy — a file range, or several tail-cache
//! entries — is encoded as a placeholder of its length: a slice of a static zero region
//! the size of the largest range, which is never read (it stays unmapped memory), and
//! which the buffer recognises by its address and replaces with the next
//! [`DeferredRecords`], in encoding order.
//!
//! Invariants: the parts, in order, are exactly the bytes kafka-protocol would encode
//! into one buffer for the same response with the deferred records' bytes in place of
//! the placeholders (tested below); every placeholder is matched by one deferred records
//! of its length.

use crate::kafka::frame::FrameError;
use bytes::{BufMut, Bytes, BytesMut};
use corelog_storage::file_range::FILE_RANGE_MAX_BYTES;
use corelog_storage::FileRange;
use kafka_protocol::messages::{ApiKey, ResponseHeader};
use kafka_protocol::protocol::buf::ByteBufMut;
use kafka_protocol::protocol::Encodable;
use std::collections::VecDeque;
use std::ops::Range;

/// Records shorter than this are copied into the frame's buffer: a part of its own costs
/// a write of its own.
const SHARED_MIN_BYTES: usize = 16 << 10;

/// Stands for file ranges' records while a response is encoded. Zero-initialised and
/// (for the compiler) mutable, so it lands in `.bss`: address space only, never in the
/// binary and never resident, as long as nothing reads it — and nothing does. (An
/// immutable `static` of zeros would be placed in `.rodata`, 128 MiB of the executable.)
struct Placeholder(std::cell::UnsafeCell<[u8; FILE_RANGE_MAX_BYTES]>);

// SAFETY: never written; shared only as an immutable slice.
unsafe impl Sync for Placeholder {}

static PLACEHOLDER: Placeholder =
    Placeholder(std::cell::UnsafeCell::new([0; FILE_RANGE_MAX_BYTES]));

fn placeholder_region() -> &'static [u8] {
    // SAFETY: nothing ever writes the region, so a shared reference to it is sound.
    unsafe { &*PLACEHOLDER.0.get() }
}

/// Records that a response's placeholder stands for: storage's records sent by
/// reference, a segment-file range (sent with `splice`) or tail-cache entries (each sent
/// by reference, or copied into the frame's buffer when smaller than `SHARED_MIN_BYTES`).
pub use corelog_storage::ByReference as DeferredRecords;

/// The records field that stands for `records`: a placeholder of their length (see the
/// module doc). None when they are too long for one (over `PLACEHOLDER_MAX_BYTES`) or
/// empty.
pub fn placeholder(records: &DeferredRecords) -> Option<Bytes> {
    let len = records.len();
    (len > 0 && len <= PLACEHOLDER_MAX_BYTES)
        .then(|| Bytes::from_static(&placeholder_region()[..len]))
}

/// The longest records a placeholder can stand for: the largest file range.
pub const PLACEHOLDER_MAX_BYTES: usize = FILE_RANGE_MAX_BYTES;

fn is_placeholder(b: &Bytes) -> bool {
    !b.is_empty() && std::ptr::eq(b.as_ptr(), placeholder_region().as_ptr())
}

/// One piece of a response frame.
#[derive(Debug)]
pub enum FramePart {
    Bytes(Bytes),
    File(FileRange),
}

impl FramePart {
    pub fn len(&self) -> usize {
        match self {
            FramePart::Bytes(b) => b.len(),
            FramePart::File(f) => f.len(),
        }
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

/// A whole response frame (size prefix, header, body) as its parts.
#[derive(Debug)]
pub struct ResponseFrame {
    parts: Vec<FramePart>,
    len: usize,
}

impl ResponseFrame {
    /// A frame already encoded in one buffer.
    pub fn whole(bytes: BytesMut) -> ResponseFrame {
        let len = bytes.len();
        ResponseFrame {
            parts: vec![FramePart::Bytes(bytes.freeze())],
            len,
        }
    }

    /// Bytes on the wire.
    pub fn len(&self) -> usize {
        self.len
    }

    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    pub fn into_parts(self) -> Vec<FramePart> {
        self.parts
    }
}

/// Encodes a response frame; `deferred` are the records `body`'s placeholders stand for,
/// in the order the body encodes them.
pub fn encode<T: Encodable>(
    api_key: ApiKey,
    api_version: i16,
    correlation_id: i32,
    body: &T,
    deferred: Vec<DeferredRecords>,
) -> Result<ResponseFrame, FrameError> {
    let failed = |e: anyhow::Error| FrameError::Body {
        api: api_key,
        version: api_version,
        reason: format!("encoding the response: {e}"),
    };
    let header_version = api_key.response_header_version(api_version);
    let header = ResponseHeader::default().with_correlation_id(correlation_id);
    let size = header
        .compute_size(header_version)
        .and_then(|h| body.compute_size(api_version).map(|b| h + b))
        .map_err(failed)?;
    let mut buf = PartsBuf::new(deferred, size.min(64 << 10));
    buf.put_i32(size as i32);
    header
        .encode(&mut buf, header_version)
        .and_then(|_| body.encode(&mut buf, api_version))
        .map_err(failed)?;
    let frame = buf.finish();
    debug_assert_eq!(frame.len, 4 + size, "the frame is as long as its size says");
    Ok(frame)
}

/// A kafka-protocol buffer that keeps large `bytes` fields by reference and puts the
/// deferred records in place of their placeholders.
struct PartsBuf {
    parts: Vec<FramePart>,
    /// Bytes in `parts`.
    done: usize,
    current: BytesMut,
    deferred: VecDeque<DeferredRecords>,
}

impl PartsBuf {
    fn new(deferred: Vec<DeferredRecords>, capacity: usize) -> PartsBuf {
        PartsBuf {
            parts: Vec::new(),
            done: 0,
            current: BytesMut::with_capacity(capacity),
            deferred: deferred.into(),
        }
    }

    fn put_bytes(&mut self, bytes: &Bytes) {
        if bytes.len() >= SHARED_MIN_BYTES {
            self.push(FramePart::Bytes(bytes.clone()));
        } else {
            self.current.put_slice(bytes);
        }
    }

    fn push(&mut self, part: FramePart) {
        if !self.current.is_empty() {
            let bytes = self.current.split().freeze();
            self.done += bytes.len();
            self.parts.push(FramePart::Bytes(bytes));
        }
        self.done += part.len();
        self.parts.push(part);
    }

    fn finish(mut self) -> ResponseFrame {
        assert!(
            self.deferred.is_empty(),
            "all deferred records have a placeholder in the response"
        );
        let tail = self.current.split().freeze();
        if !tail.is_empty() {
            self.done += tail.len();
            self.parts.push(FramePart::Bytes(tail));
        }
        ResponseFrame {
            parts: self.parts,
            len: self.done,
        }
    }
}

// SAFETY: every method hands on to `current`, a `BytesMut`, whose `BufMut` contract
// holds; `done` only counts bytes already moved out of it.
unsafe impl BufMut for PartsBuf {
    fn remaining_mut(&self) -> usize {
        self.current.remaining_mut()
    }

    unsafe fn advance_mut(&mut self, cnt: usize) {
        // SAFETY: the caller initialised `cnt` bytes of `current`'s chunk.
        unsafe { self.current.advance_mut(cnt) }
    }

    fn chunk_mut(&mut self) -> &mut bytes::buf::UninitSlice {
        self.current.chunk_mut()
    }

    fn put_slice(&mut self, src: &[u8]) {
        self.current.put_slice(src);
    }
}

impl ByteBufMut for PartsBuf {
    fn offset(&self) -> usize {
        self.done + self.current.len()
    }

    /// Message encoders never seek; a forward seek (a gap) pads, a backward one stays
    /// within the buffer not yet split off.
    fn seek(&mut self, offset: usize) {
        assert!(offset >= self.done, "no seek back into a finished part");
        self.current.resize(offset - self.done, 0);
    }

    fn range(&mut self, r: Range<usize>) -> &mut [u8] {
        assert!(r.start >= self.done, "no access to a finished part");
        &mut self.current[r.start - self.done..r.end - self.done]
    }

    fn put_shared(&mut self, bytes: &Bytes) {
        if !is_placeholder(bytes) {
            self.put_bytes(bytes);
            return;
        }
        let records = self
            .deferred
            .pop_front()
            .expect("a placeholder is encoded only for deferred records");
        assert_eq!(
            records.len(),
            bytes.len(),
            "deferred records come in encoding order"
        );
        match records {
            DeferredRecords::File(range) => self.push(FramePart::File(range)),
            DeferredRecords::Cached(chunks) => {
                for c in &chunks {
                    self.put_bytes(c);
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use kafka_protocol::messages::fetch_response::{FetchableTopicResponse, PartitionData};
    use kafka_protocol::messages::{FetchResponse, TopicName};
    use kafka_protocol::protocol::StrBytes;

    fn response(records: Vec<Option<Bytes>>) -> FetchResponse {
        let mut topic = FetchableTopicResponse::default();
        topic.topic = TopicName(StrBytes::from_static_str("t"));
        for (i, r) in records.into_iter().enumerate() {
            let mut p = PartitionData::default();
            p.partition_index = i as i32;
            p.high_watermark = 1000 + i as i64;
            p.records = r;
            if i % 2 == 1 {
                p.diverging_epoch.epoch = 3;
                p.diverging_epoch.end_offset = 99;
            }
            topic.partitions.push(p);
        }
        let mut body = FetchResponse::default();
        body.throttle_time_ms = 5;
        body.responses.push(topic);
        body
    }

    fn whole(frame: ResponseFrame) -> Vec<u8> {
        let mut out = Vec::new();
        for part in frame.into_parts() {
            match part {
                FramePart::Bytes(b) => out.extend_from_slice(&b),
                FramePart::File(_) => panic!("no file ranges here"),
            }
        }
        out
    }

    #[test]
    fn parts_are_the_bytes_kafka_protocol_encodes_for_every_version() {
        let big = Bytes::from(vec![7u8; SHARED_MIN_BYTES * 2]);
        let small = Bytes::from_static(b"small records");
        for version in 4..=18 {
            let body = response(vec![
                Some(big.clone()),
                None,
                Some(small.clone()),
                Some(big.clone()),
            ]);
            let frame = encode(ApiKey::Fetch, version, 42, &body, Vec::new()).expect("encode");
            let parts = frame.parts.len();
            let one = crate::kafka::frame::encode_response(ApiKey::Fetch, version, 42, &body)
                .expect("encode whole");
            assert_eq!(whole(frame), one.to_vec(), "version {version}");
            assert!(
                parts >= 4,
                "the large records are parts of their own (v{version}: {parts})"
            );
        }
    }

    #[test]
    fn placeholders_become_the_file_ranges_in_order() {
        let dir = tempfile::tempdir().expect("tempdir");
        let path = dir.path().join("seg");
        std::fs::write(&path, vec![1u8; 300_000]).expect("write");
        let range = |pos, len| FileRange::new(std::fs::File::open(&path).expect("open"), pos, len);
        let (a, b) = (range(0, 70_000), range(100, 90_000));
        let file = |r: &FileRange| DeferredRecords::File(r.clone());
        for version in [4, 11, 12, 13, 16, 18] {
            let body = response(vec![
                placeholder(&file(&a)),
                Some(Bytes::from_static(b"x")),
                placeholder(&file(&b)),
            ]);
            let frame =
                encode(ApiKey::Fetch, version, 1, &body, vec![file(&a), file(&b)]).expect("encode");
            let len = frame.len();
            let kinds: Vec<&str> = frame
                .parts
                .iter()
                .map(|p| match p {
                    FramePart::Bytes(_) => "bytes",
                    FramePart::File(_) => "file",
                })
                .collect();
            // From v12 tagged fields follow the last records; before, the frame ends there.
            let mut want = vec!["bytes", "file", "bytes", "file"];
            if version >= 12 {
                want.push("bytes");
            }
            assert_eq!(kinds, want, "v{version}");
            // With the ranges' bytes in place of the placeholders, the frame is what
            // kafka-protocol encodes for the same records as bytes.
            let real = response(vec![
                Some(Bytes::from(vec![1u8; 70_000])),
                Some(Bytes::from_static(b"x")),
                Some(Bytes::from(vec![1u8; 90_000])),
            ]);
            let one = crate::kafka::frame::encode_response(ApiKey::Fetch, version, 1, &real)
                .expect("encode whole");
            let mut rebuilt = Vec::new();
            for part in frame.into_parts() {
                match part {
                    FramePart::Bytes(b) => rebuilt.extend_from_slice(&b),
                    FramePart::File(f) => rebuilt.extend(std::iter::repeat_n(1u8, f.len())),
                }
            }
            assert_eq!(rebuilt.len(), len);
            assert_eq!(rebuilt, one.to_vec(), "version {version}");
        }
    }

    /// Several tail-cache entries behind one placeholder go out as the entries
    /// themselves (the large ones by reference), and the frame is what kafka-protocol
    /// encodes for their concatenation.
    #[test]
    fn cached_chunks_are_sent_by_reference_in_place_of_their_placeholder() {
        let chunk = |byte: u8, len: usize| Bytes::from(vec![byte; len]);
        let chunks = vec![
            chunk(1, SHARED_MIN_BYTES * 2),
            chunk(2, 100),
            chunk(3, SHARED_MIN_BYTES),
        ];
        let joined: Vec<u8> = chunks.iter().flat_map(|c| c.iter().copied()).collect();
        for version in [4, 11, 12, 16, 18] {
            let cached = DeferredRecords::Cached(chunks.clone());
            let body = response(vec![Some(Bytes::from_static(b"x")), placeholder(&cached)]);
            let frame = encode(ApiKey::Fetch, version, 7, &body, vec![cached]).expect("encode");
            let shared: Vec<*const u8> = frame
                .parts
                .iter()
                .filter_map(|p| match p {
                    FramePart::Bytes(b) => Some(b.as_ptr()),
                    FramePart::File(_) => None,
                })
                .collect();
            assert!(
                shared.contains(&chunks[0].as_ptr()),
                "v{version}: large entry by reference"
            );
            assert!(
                shared.contains(&chunks[2].as_ptr()),
                "v{version}: large entry by reference"
            );
            let real = response(vec![
                Some(Bytes::from_static(b"x")),
                Some(Bytes::from(joined.clone())),
            ]);
            let one = crate::kafka::frame::encode_response(ApiKey::Fetch, version, 7, &real)
                .expect("encode whole");
            assert_eq!(whole(frame), one.to_vec(), "version {version}");
        }
    }
}
