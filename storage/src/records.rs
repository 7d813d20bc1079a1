//! Whole record batches as a read hands them over — in memory, as tail-cache entries
//! sent by reference, or as a segment-file range — the byte-limit trim every reader of
//! them applies, and the form a response carries them in ([`Records::carried`]).
//!
//! Invariants: a `Records` value holds whole batches only, in offset order; `Cached`
//! holds at least two entries and none empty (one is `Memory`); a trim never splits a
//! batch and never returns less than the first batch; turning records into their carried
//! form copies nothing unless it must gather them into one buffer.

use crate::batch::batches;
use crate::file_range::FileRange;
use bytes::{Bytes, BytesMut};

/// Whole record batches, in memory or as a range of a segment file.
#[derive(Debug, Clone)]
pub enum Records {
    Memory(Bytes),
    /// Batches from the tail cache as several of its entries, in order: each is sent by
    /// reference, never gathered into one buffer. At least two, none empty.
    Cached(Vec<Bytes>),
    File(FileRange),
}

impl Records {
    pub fn len(&self) -> usize {
        match self {
            Records::Memory(b) => b.len(),
            Records::Cached(chunks) => chunks.iter().map(Bytes::len).sum(),
            Records::File(f) => f.len(),
        }
    }

    /// In-memory batches as the fewest variants can say them: none or one chunk is
    /// `Memory`, more are `Cached`. Empty chunks are dropped.
    pub fn from_chunks(mut chunks: Vec<Bytes>) -> Records {
        chunks.retain(|c| !c.is_empty());
        match chunks.len() {
            0 => Records::default(),
            1 => Records::Memory(chunks.pop().expect("one chunk")),
            _ => Records::Cached(chunks),
        }
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// The longest prefix of whole batches at most `max_bytes` long, but never less than
    /// the first batch (a consumer must always make progress), as the fewest variants say
    /// it. A file range is returned as it is: its read already kept to whole batches
    /// within the limit it was asked for, and trimming it would mean reading it.
    pub fn trim_to_whole_batches(self, max_bytes: usize) -> Records {
        match self {
            // Within the limit already: as it is, without walking its batches.
            Records::Memory(bytes) if bytes.len() <= max_bytes => Records::Memory(bytes),
            Records::Memory(bytes) => Records::Memory(trim_to_whole_batches(bytes, max_bytes)),
            Records::Cached(chunks) => {
                Records::from_chunks(trim_chunks_to_whole_batches(chunks, max_bytes))
            }
            file @ Records::File(_) => file,
        }
    }

    /// The records in the form a response carries them: in memory as they are, a file
    /// range and tail-cache entries by reference. Cached entries longer than
    /// `by_reference_max` together, more than a response can stand for by reference,
    /// are gathered into one buffer instead (copied once). A move, never a copy,
    /// otherwise.
    pub fn carried(self, by_reference_max: usize) -> Carried {
        match self {
            Records::Memory(bytes) => Carried::Inline(bytes),
            Records::Cached(chunks)
                if chunks.iter().map(Bytes::len).sum::<usize>() > by_reference_max =>
            {
                Carried::Inline(concat_chunks(chunks))
            }
            Records::Cached(chunks) => Carried::ByReference(ByReference::Cached(chunks)),
            Records::File(range) => Carried::ByReference(ByReference::File(range)),
        }
    }
}

/// How a response carries a read's records.
#[derive(Debug)]
pub enum Carried {
    /// One buffer, which the response's encoding holds as it is.
    Inline(Bytes),
    /// Records the response stands for and sends beside its encoded bytes, never copied
    /// into them.
    ByReference(ByReference),
}

/// Records sent by reference: a segment-file range (sent with `splice`) or tail-cache
/// entries (each sent as the cache holds it).
#[derive(Debug)]
pub enum ByReference {
    File(FileRange),
    /// At least two entries, none empty (what `Records::Cached` holds).
    Cached(Vec<Bytes>),
}

impl ByReference {
    pub fn len(&self) -> usize {
        match self {
            ByReference::File(f) => f.len(),
            ByReference::Cached(chunks) => chunks.iter().map(Bytes::len).sum(),
        }
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

impl Default for Records {
    fn default() -> Self {
        Records::Memory(Bytes::new())
    }
}

/// `chunks` in one buffer: the only chunk as it is, several copied once.
pub(crate) fn concat_chunks(mut chunks: Vec<Bytes>) -> Bytes {
    if chunks.len() <= 1 {
        return chunks.pop().unwrap_or_default();
    }
    let mut out = BytesMut::with_capacity(chunks.iter().map(Bytes::len).sum());
    for c in &chunks {
        out.extend_from_slice(c);
    }
    out.freeze()
}

/// [`trim_to_whole_batches`] over chunks of whole batches, in order: the longest prefix
/// at most `max_bytes` long, but never less than the first batch.
pub(crate) fn trim_chunks_to_whole_batches(chunks: Vec<Bytes>, max_bytes: usize) -> Vec<Bytes> {
    let mut out = Vec::with_capacity(chunks.len());
    let mut used = 0usize;
    for c in chunks {
        let room = max_bytes.saturating_sub(used);
        if c.len() <= room {
            used += c.len();
            out.push(c);
            continue;
        }
        let part = trim_to_whole_batches(c, room);
        if !part.is_empty() && (used == 0 || part.len() <= room) {
            out.push(part);
        }
        break;
    }
    out
}

/// The longest prefix of `bytes` made of whole batches and at most `max_bytes` long, but
/// never less than the first batch (a consumer must always make progress).
pub(crate) fn trim_to_whole_batches(bytes: Bytes, max_bytes: usize) -> Bytes {
    let mut end = 0;
    for item in batches(&bytes) {
        let Ok((_, range)) = item else { break };
        if end > 0 && range.end > max_bytes {
            break;
        }
        end = range.end;
    }
    bytes.slice(..end)
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;
    use crate::batch_builder::{BatchBuilder, Record};

    /// `chunks` buffers of `per_chunk` one-record batches each, with consecutive offsets
    /// from 0 (the tail cache's tests use them too).
    pub(crate) fn batch_chunks(chunks: usize, per_chunk: usize, value_len: usize) -> Vec<Bytes> {
        let value = vec![9u8; value_len];
        (0..chunks)
            .map(|c| {
                let mut bytes = Vec::new();
                for b in 0..per_chunk {
                    let mut builder = BatchBuilder::new(0);
                    builder.push(&Record {
                        key: None,
                        value: Some(&value),
                        headers: &[],
                        timestamp_delta: 0,
                    });
                    let mut batch = builder.build();
                    crate::batch::set_base_offset(&mut batch, (c * per_chunk + b) as i64);
                    bytes.extend_from_slice(&batch);
                }
                Bytes::from(bytes)
            })
            .collect()
    }

    #[test]
    fn trimming_chunks_keeps_whole_batches_and_at_least_one() {
        let chunks: Vec<Bytes> = batch_chunks(3, 2, 50);
        let batch_len = chunks[0].len() / 2;
        let lens = |v: &[Bytes]| v.iter().map(Bytes::len).collect::<Vec<_>>();
        let all = trim_chunks_to_whole_batches(chunks.clone(), usize::MAX);
        assert_eq!(lens(&all), vec![2 * batch_len; 3]);
        let some = trim_chunks_to_whole_batches(chunks.clone(), 3 * batch_len + 1);
        assert_eq!(lens(&some), vec![2 * batch_len, batch_len]);
        let one = trim_chunks_to_whole_batches(chunks.clone(), 1);
        assert_eq!(lens(&one), vec![batch_len]);
        assert!(trim_chunks_to_whole_batches(Vec::new(), 10).is_empty());
    }

    #[test]
    fn trimmed_records_say_themselves_with_the_fewest_variants() {
        let chunks = batch_chunks(3, 2, 50);
        let batch_len = chunks[0].len() / 2;
        let cached = Records::Cached(chunks.clone());
        match cached.clone().trim_to_whole_batches(batch_len + 1) {
            Records::Memory(b) => assert_eq!(b.len(), batch_len, "one batch, one buffer"),
            other => panic!("expected memory, got {other:?}"),
        }
        match cached.clone().trim_to_whole_batches(3 * batch_len) {
            Records::Cached(c) => assert_eq!(c.len(), 2),
            other => panic!("expected cached, got {other:?}"),
        }
        let one = Records::Memory(chunks[0].clone()).trim_to_whole_batches(1);
        assert_eq!(one.len(), batch_len, "never less than the first batch");
    }

    #[test]
    fn records_are_carried_by_reference_up_to_the_limit_and_gathered_beyond() {
        let chunks = batch_chunks(3, 2, 50);
        let total: usize = chunks.iter().map(Bytes::len).sum();
        match Records::Cached(chunks.clone()).carried(total) {
            Carried::ByReference(ByReference::Cached(c)) => {
                assert_eq!(c.len(), 3);
                assert_eq!(c[0].as_ptr(), chunks[0].as_ptr(), "the entries themselves");
            }
            other => panic!("expected cached by reference, got {other:?}"),
        }
        match Records::Cached(chunks.clone()).carried(total - 1) {
            Carried::Inline(b) => assert_eq!(b, concat_chunks(chunks.clone())),
            other => panic!("expected one buffer, got {other:?}"),
        }
        match Records::Memory(chunks[0].clone()).carried(0) {
            Carried::Inline(b) => assert_eq!(b.as_ptr(), chunks[0].as_ptr(), "not copied"),
            other => panic!("expected inline, got {other:?}"),
        }
    }
}
