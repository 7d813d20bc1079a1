//! Retention: which sealed segments may go, and the log start offset checkpoint.
//!
//! A partition's log starts at its *log start offset*. It moves forward only, for three
//! reasons: time retention (`retention.ms`: a sealed segment whose newest record is
//! older goes), size retention (`retention.bytes`: the oldest sealed segments go while
//! the log stays at least that large without them — Kafka's rule), and DeleteRecords
//! (the offset a client names). The first two delete whole segments, so the start is
//! the first remaining segment's base; DeleteRecords may stop inside a segment, so that
//! offset is persisted in `log-start-offset` beside the segments and read back at open.
//!
//! Invariants: the active (last) segment is never chosen; only a contiguous prefix of
//! segments is chosen (a log never has holes); the checkpoint is written (fsync, rename)
//! before a moved start is acknowledged.

pub const LOG_START_CHECKPOINT: &str = "log-start-offset";

/// What retention sees of one segment.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct SegmentStat {
    pub base_offset: i64,
    pub size: u64,
    /// Largest record timestamp (`i64::MIN` for an empty segment).
    pub max_timestamp_ms: i64,
}

/// The offset below which whole segments are past retention: the base of the first
/// segment to keep. `segments` are in offset order, the last one active. `None` when
/// nothing is due.
pub fn retention_cut(
    segments: &[SegmentStat],
    retention_ms: i64,
    retention_bytes: i64,
    now_ms: i64,
) -> Option<i64> {
    let (active, sealed) = segments.split_last()?;
    let mut total: u64 = segments.iter().map(|s| s.size).sum();
    let mut cut = 0usize;
    for seg in sealed {
        let expired =
            retention_ms >= 0 && seg.max_timestamp_ms < now_ms.saturating_sub(retention_ms);
        // Kafka deletes a segment for size only if the log is still at least
        // `retention.bytes` without it.
        let oversized = retention_bytes >= 0
            && total.saturating_sub(retention_bytes as u64) >= seg.size
            && total > retention_bytes as u64;
        if !(expired || oversized) {
            break;
        }
        total -= seg.size;
        cut += 1;
    }
    if cut == 0 {
        return None;
    }
    Some(
        sealed
            .get(cut)
            .map_or(active.base_offset, |s| s.base_offset),
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    fn segs(spec: &[(i64, u64, i64)]) -> Vec<SegmentStat> {
        spec.iter()
            .map(|&(base_offset, size, max_timestamp_ms)| SegmentStat {
                base_offset,
                size,
                max_timestamp_ms,
            })
            .collect()
    }

    #[test]
    fn time_retention_takes_an_expired_prefix_and_never_the_active_segment() {
        let s = segs(&[(0, 100, 10), (10, 100, 20), (20, 100, 500), (30, 100, 5)]);
        // now 1000, retention 900: everything older than 100 expires.
        assert_eq!(retention_cut(&s, 900, -1, 1000), Some(20));
        // The active segment (base 30) is old too, but stays; a young segment stops
        // the prefix.
        assert_eq!(retention_cut(&s, 100, -1, 1000), Some(30));
        assert_eq!(retention_cut(&s, -1, -1, 1000), None);
        assert_eq!(retention_cut(&s, 5000, -1, 1000), None);
        assert_eq!(retention_cut(&segs(&[(0, 100, 1)]), 0, -1, 1000), None);
    }

    #[test]
    fn size_retention_keeps_at_least_the_limit() {
        let s = segs(&[(0, 100, 0), (10, 100, 0), (20, 100, 0), (30, 50, 0)]);
        // 350 bytes, limit 200: dropping 100 leaves 250 >= 200, dropping another leaves
        // 150 < 200: only one goes.
        assert_eq!(retention_cut(&s, -1, 200, 0), Some(10));
        assert_eq!(retention_cut(&s, -1, 150, 0), Some(20));
        assert_eq!(retention_cut(&s, -1, 0, 0), Some(30));
        assert_eq!(retention_cut(&s, -1, 350, 0), None);
    }
}
