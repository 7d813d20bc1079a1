//! Walking record batches stored in a segment file.
//!
//! Used by recovery (validate the tail, rebuild index entries) and by reads that start
//! between index entries. Reads are done in chunks of `SCAN_CHUNK_BYTES`; a batch that
//! straddles a chunk boundary is re-read from its start, so memory stays bounded by
//! `max(SCAN_CHUNK_BYTES, largest batch)` whatever the file size.

use super::batch::{self, BatchError, BatchHeader, BATCH_HEADER_LEN};
use crate::segment_io::OpenFile;

pub const SCAN_CHUNK_BYTES: u64 = 1 << 20;

/// How a scan stopped.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ScanEnd {
    /// The end position was reached exactly.
    Complete,
    /// Bytes at `position` do not form a valid batch (a torn or zeroed tail).
    Invalid { position: u64, reason: BatchError },
    /// The visitor asked to stop.
    Stopped,
}

/// Reads `len` bytes at `pos` from a segment file (glommio aligns a direct read itself).
pub async fn read_exact(file: &OpenFile, pos: u64, len: usize) -> std::io::Result<Vec<u8>> {
    let res = file.read_at(pos, len).await?;
    if res.len() < len {
        return Err(std::io::Error::new(
            std::io::ErrorKind::UnexpectedEof,
            format!("short read: {} of {len} bytes at {pos}", res.len()),
        ));
    }
    Ok(res[..len].to_vec())
}

/// Visits every valid batch in `[start, end)` of `file` in order. With `verify`, each
/// batch is fully validated as a log stores it (`batch::validate_stored`: CRC-32C,
/// record structure, a cleaned batch's gaps allowed); otherwise only its header.
/// The visitor gets the header, the batch's file position and its bytes, and returns
/// `false` to stop.
pub async fn scan(
    file: &OpenFile,
    start: u64,
    end: u64,
    verify: bool,
    mut visit: impl FnMut(&BatchHeader, u64, &[u8]) -> bool,
) -> std::io::Result<(u64, ScanEnd)> {
    let mut pos = start;
    while pos < end {
        let want = (end - pos).min(SCAN_CHUNK_BYTES) as usize;
        let chunk = read_exact(file, pos, want).await?;
        let mut consumed = 0usize;
        while consumed < chunk.len() {
            let at = pos + consumed as u64;
            let rest = chunk.get(consumed..).unwrap_or_default();
            if rest.len() < BATCH_HEADER_LEN {
                if at + rest.len() as u64 >= end {
                    return Ok((at, invalid(at, BatchError::TooShort)));
                }
                break; // the header straddles the chunk: re-read from `at`
            }
            let header = match BatchHeader::parse(rest) {
                Ok(h) => h,
                Err(e) => return Ok((at, invalid(at, e))),
            };
            let total = header.total_len();
            if at + total as u64 > end {
                return Ok((at, invalid(at, BatchError::Truncated)));
            }
            if total > rest.len() {
                if consumed == 0 {
                    // One batch larger than a chunk: read exactly that batch.
                    let whole = read_exact(file, at, total).await?;
                    if let Some(stop) = check_and_visit(&whole, &header, at, verify, &mut visit) {
                        return Ok((at, stop));
                    }
                    consumed = total;
                }
                break;
            }
            let bytes = rest.get(..total).unwrap_or_default();
            if let Some(stop) = check_and_visit(bytes, &header, at, verify, &mut visit) {
                return Ok((at, stop));
            }
            consumed += total;
        }
        assert!(consumed > 0 || pos >= end, "a scan always makes progress");
        pos += consumed as u64;
    }
    Ok((pos, ScanEnd::Complete))
}

fn invalid(position: u64, reason: BatchError) -> ScanEnd {
    ScanEnd::Invalid { position, reason }
}

fn check_and_visit(
    bytes: &[u8],
    header: &BatchHeader,
    pos: u64,
    verify: bool,
    visit: &mut impl FnMut(&BatchHeader, u64, &[u8]) -> bool,
) -> Option<ScanEnd> {
    if verify {
        if let Err(e) = batch::validate_stored(bytes) {
            return Some(invalid(pos, e));
        }
    }
    if !visit(header, pos, bytes) {
        // Report the position *of* the batch the visitor refused.
        return Some(ScanEnd::Stopped);
    }
    None
}
