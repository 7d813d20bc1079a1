//! The encoding of the coordinators' records (Kafka's `CoordinatorRecordSerde`): a key
//! is a big-endian `int16` record type, then its fields in the non-flexible encoding
//! (`int16`-length strings); a value is an `int16` version, then its fields in the
//! flexible encoding (compact strings and arrays: unsigned varint length + 1, 0 for
//! null; `uuid` 16 bytes), each struct ending with its tagged fields.
//!
//! Used by the consumer groups' records (`group::consumer::records`) and the share
//! state's (`share::records`). Reading treats its input as untrusted: it never panics,
//! never allocates beyond the bytes present, and refuses truncated input.

use uuid::Uuid;

#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum RecordError {
    #[error("record truncated")]
    Truncated,
    #[error("unknown version {0}")]
    UnknownVersion(i16),
    #[error("null in a non-nullable field")]
    UnexpectedNull,
    #[error("invalid UTF-8")]
    InvalidUtf8,
    #[error("{0} bytes after the record")]
    TrailingBytes(usize),
    #[error("a string longer than a key can hold")]
    TooLong,
}

pub(crate) type Result<T> = std::result::Result<T, RecordError>;

pub(crate) struct Writer(pub(crate) Vec<u8>);

impl Writer {
    pub(crate) fn i16(&mut self, v: i16) {
        self.0.extend_from_slice(&v.to_be_bytes());
    }
    pub(crate) fn i32(&mut self, v: i32) {
        self.0.extend_from_slice(&v.to_be_bytes());
    }
    pub(crate) fn i8(&mut self, v: i8) {
        self.0.push(v as u8);
    }
    pub(crate) fn i64(&mut self, v: i64) {
        self.0.extend_from_slice(&v.to_be_bytes());
    }
    pub(crate) fn uvarint(&mut self, mut v: u64) {
        while v >= 0x80 {
            self.0.push((v as u8) | 0x80);
            v >>= 7;
        }
        self.0.push(v as u8);
    }
    /// A compact array's or string's length (never null here).
    pub(crate) fn len(&mut self, n: usize) {
        self.uvarint(n as u64 + 1);
    }
    pub(crate) fn string(&mut self, s: Option<&str>) {
        match s {
            None => self.uvarint(0),
            Some(s) => {
                self.len(s.len());
                self.0.extend_from_slice(s.as_bytes());
            }
        }
    }
    pub(crate) fn uuid(&mut self, id: Uuid) {
        self.0.extend_from_slice(id.as_bytes());
    }
    pub(crate) fn no_tags(&mut self) {
        self.uvarint(0);
    }
}

pub(crate) struct Reader<'a>(pub(crate) &'a [u8]);

impl Reader<'_> {
    pub(crate) fn take(&mut self, n: usize) -> Result<&[u8]> {
        if self.0.len() < n {
            return Err(RecordError::Truncated);
        }
        let (head, rest) = self.0.split_at(n);
        self.0 = rest;
        Ok(head)
    }
    pub(crate) fn i8(&mut self) -> Result<i8> {
        Ok(self.take(1)?[0] as i8)
    }
    pub(crate) fn i16(&mut self) -> Result<i16> {
        let b = self.take(2)?;
        Ok(i16::from_be_bytes([b[0], b[1]]))
    }
    pub(crate) fn i64(&mut self) -> Result<i64> {
        let b = self.take(8)?;
        Ok(i64::from_be_bytes(b.try_into().expect("8 bytes")))
    }
    pub(crate) fn i32(&mut self) -> Result<i32> {
        let b = self.take(4)?;
        Ok(i32::from_be_bytes([b[0], b[1], b[2], b[3]]))
    }
    pub(crate) fn uvarint(&mut self) -> Result<u64> {
        let mut v = 0u64;
        for shift in (0..64).step_by(7) {
            let b = self.take(1)?[0];
            v |= u64::from(b & 0x7f) << shift;
            if b & 0x80 == 0 {
                return Ok(v);
            }
        }
        Err(RecordError::Truncated)
    }
    /// A compact array's length; a null array reads as empty. Bounded by the bytes
    /// left (every element takes at least one), so no allocation outgrows the input.
    pub(crate) fn len(&mut self) -> Result<usize> {
        let n = self.uvarint()?.saturating_sub(1);
        if n > self.0.len() as u64 {
            return Err(RecordError::Truncated);
        }
        Ok(n as usize)
    }
    pub(crate) fn string(&mut self) -> Result<Option<String>> {
        let n = self.uvarint()?;
        if n == 0 {
            return Ok(None);
        }
        let len = usize::try_from(n - 1).map_err(|_| RecordError::Truncated)?;
        let bytes = self.take(len)?;
        String::from_utf8(bytes.to_vec())
            .map(Some)
            .map_err(|_| RecordError::InvalidUtf8)
    }
    pub(crate) fn key_string(&mut self) -> Result<String> {
        let len = self.i16()?;
        let len = usize::try_from(len).map_err(|_| RecordError::UnexpectedNull)?;
        let bytes = self.take(len)?;
        String::from_utf8(bytes.to_vec()).map_err(|_| RecordError::InvalidUtf8)
    }
    pub(crate) fn uuid(&mut self) -> Result<Uuid> {
        let b = self.take(16)?;
        Uuid::from_slice(b).map_err(|_| RecordError::Truncated)
    }
    pub(crate) fn skip_tags(&mut self) -> Result<()> {
        let n = self.uvarint()?;
        for _ in 0..n {
            self.uvarint()?;
            let size = usize::try_from(self.uvarint()?).map_err(|_| RecordError::Truncated)?;
            self.take(size)?;
        }
        Ok(())
    }
    pub(crate) fn end(&self) -> Result<()> {
        if self.0.is_empty() {
            Ok(())
        } else {
            Err(RecordError::TrailingBytes(self.0.len()))
        }
    }
}
