//! The leader-epoch cache of one partition: for every leader epoch, the first offset
//! written in it, persisted as `leader-epoch-checkpoint` in the partition directory in
//! Kafka's format (a version line `0`, a count line, then one `epoch start-offset` line
//! per entry).
//!
//! It answers "where did epoch E end?" (OffsetForLeaderEpoch, KIP-101 and KIP-320): the
//! start offset of the first epoch after E, or the log end for the latest epoch.
//!
//! Invariants: epochs strictly increase and start offsets never decrease along the
//! entries; the first entry starts at or after the log start (`truncate_from_start`)
//! and no entry starts past the log end once loaded (`truncate_from_end`). Every change
//! is persisted by the caller (`encode` then an atomic file replacement) before it is
//! relied on.

use std::fmt;

pub const CHECKPOINT_FILE: &str = "leader-epoch-checkpoint";
const VERSION: i64 = 0;

/// Kafka's "no epoch" (`RecordBatch.NO_PARTITION_LEADER_EPOCH`) and "no offset".
pub const UNDEFINED_EPOCH: i32 = -1;
pub const UNDEFINED_OFFSET: i64 = -1;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct EpochEntry {
    pub epoch: i32,
    pub start_offset: i64,
}

#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct LeaderEpochCache {
    entries: Vec<EpochEntry>,
}

#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("leader-epoch checkpoint line {line}: {reason}")]
pub struct DecodeError {
    pub line: usize,
    pub reason: &'static str,
}

impl LeaderEpochCache {
    pub fn entries(&self) -> &[EpochEntry] {
        &self.entries
    }

    pub fn latest(&self) -> Option<EpochEntry> {
        self.entries.last().copied()
    }

    /// Records that `epoch` starts at `start_offset` (Kafka's `assign`): a leader does so
    /// when it takes over, at its log end. An epoch not newer than the latest is ignored
    /// (returns false), as is a start before the latest entry's; a newer epoch starting
    /// where the latest one does replaces it (that epoch wrote nothing).
    pub fn assign(&mut self, epoch: i32, start_offset: i64) -> bool {
        if epoch < 0 || start_offset < 0 {
            return false;
        }
        if let Some(last) = self.entries.last() {
            if epoch <= last.epoch || start_offset < last.start_offset {
                return false;
            }
            if start_offset == last.start_offset {
                self.entries.pop();
            }
        }
        self.entries.push(EpochEntry {
            epoch,
            start_offset,
        });
        self.debug_check();
        true
    }

    /// The epoch of the record at `offset`: the last entry starting at or before it.
    pub fn epoch_for_offset(&self, offset: i64) -> Option<i32> {
        let i = self.entries.partition_point(|e| e.start_offset <= offset);
        i.checked_sub(1)
            .and_then(|i| self.entries.get(i))
            .map(|e| e.epoch)
    }

    /// Where epoch `requested` ended, as Kafka's `LeaderEpochFileCache.endOffsetFor`:
    /// - the latest epoch ends at `log_end_offset`;
    /// - an older epoch ends where the first newer epoch starts, reported with the largest
    ///   known epoch not above `requested` (or `requested` itself when it precedes every
    ///   entry);
    /// - an undefined epoch, an epoch past the latest or an empty cache end nowhere:
    ///   `(UNDEFINED_EPOCH, UNDEFINED_OFFSET)`.
    pub fn end_offset_for(&self, requested: i32, log_end_offset: i64) -> (i32, i64) {
        if requested == UNDEFINED_EPOCH {
            return (UNDEFINED_EPOCH, UNDEFINED_OFFSET);
        }
        if self.latest().is_some_and(|l| l.epoch == requested) {
            return (requested, log_end_offset);
        }
        let higher = self.entries.partition_point(|e| e.epoch <= requested);
        let Some(next) = self.entries.get(higher) else {
            return (UNDEFINED_EPOCH, UNDEFINED_OFFSET);
        };
        match higher.checked_sub(1).and_then(|i| self.entries.get(i)) {
            Some(floor) => (floor.epoch, next.start_offset),
            None => (requested, next.start_offset),
        }
    }

    /// Drops what lies at or past `end_offset` (a log truncated to it, or recovered to
    /// it). Returns whether anything changed.
    pub fn truncate_from_end(&mut self, end_offset: i64) -> bool {
        let keep = self
            .entries
            .partition_point(|e| e.start_offset < end_offset);
        let changed = keep < self.entries.len();
        self.entries.truncate(keep);
        changed
    }

    /// The log start moved to `start_offset`: entries wholly below it go, and the entry
    /// containing it now starts there. Returns whether anything changed.
    pub fn truncate_from_start(&mut self, start_offset: i64) -> bool {
        let containing = self
            .entries
            .partition_point(|e| e.start_offset <= start_offset);
        let Some(first) = containing.checked_sub(1) else {
            return false;
        };
        let changed = first > 0 || self.entries[first].start_offset != start_offset;
        self.entries.drain(..first);
        if let Some(e) = self.entries.first_mut() {
            e.start_offset = start_offset;
        }
        self.debug_check();
        changed
    }

    /// The checkpoint file's text.
    pub fn encode(&self) -> String {
        let mut out = format!("{VERSION}\n{}\n", self.entries.len());
        for e in &self.entries {
            out.push_str(&format!("{} {}\n", e.epoch, e.start_offset));
        }
        out
    }

    /// Parses a checkpoint file. A file that is not exactly what `encode` writes (other
    /// version, wrong count, entries out of order, trailing garbage) is an error.
    pub fn decode(text: &str) -> Result<LeaderEpochCache, DecodeError> {
        let mut lines = text.lines().enumerate();
        let mut next = |reason| {
            lines
                .next()
                .map(|(i, l)| (i + 1, l.trim()))
                .ok_or(DecodeError { line: 0, reason })
        };
        let (line, version) = next("missing version")?;
        if version.parse::<i64>() != Ok(VERSION) {
            return Err(DecodeError {
                line,
                reason: "unknown version",
            });
        }
        let (line, count) = next("missing count")?;
        let count: usize = count.parse().map_err(|_| DecodeError {
            line,
            reason: "count is not a number",
        })?;
        let mut cache = LeaderEpochCache::default();
        for _ in 0..count {
            let (line, entry) = next("fewer entries than the count")?;
            let mut parts = entry.split_whitespace();
            let bad = DecodeError {
                line,
                reason: "an entry is not `epoch start-offset`",
            };
            let epoch: i32 = parts
                .next()
                .and_then(|p| p.parse().ok())
                .ok_or(bad.clone())?;
            let start: i64 = parts
                .next()
                .and_then(|p| p.parse().ok())
                .ok_or(bad.clone())?;
            if parts.next().is_some() || epoch < 0 || start < 0 {
                return Err(bad);
            }
            if let Some(last) = cache.entries.last() {
                if epoch <= last.epoch || start < last.start_offset {
                    return Err(DecodeError {
                        line,
                        reason: "entries out of order",
                    });
                }
            }
            cache.entries.push(EpochEntry {
                epoch,
                start_offset: start,
            });
        }
        if let Some((line, rest)) = lines.find(|(_, l)| !l.trim().is_empty()) {
            let _ = rest;
            return Err(DecodeError {
                line: line + 1,
                reason: "more entries than the count",
            });
        }
        Ok(cache)
    }

    fn debug_check(&self) {
        debug_assert!(
            self.entries
                .windows(2)
                .all(|w| w[0].epoch < w[1].epoch && w[0].start_offset <= w[1].start_offset),
            "epochs increase and start offsets never decrease: {self}"
        );
    }
}

impl fmt::Display for LeaderEpochCache {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let list: Vec<String> = self
            .entries
            .iter()
            .map(|e| format!("{}@{}", e.epoch, e.start_offset))
            .collect();
        write!(f, "[{}]", list.join(", "))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn cache(entries: &[(i32, i64)]) -> LeaderEpochCache {
        let mut c = LeaderEpochCache::default();
        for &(e, o) in entries {
            assert!(c.assign(e, o), "assign {e}@{o}");
        }
        c
    }

    #[test]
    fn end_offsets_follow_kafka() {
        let c = cache(&[(1, 0), (3, 100), (5, 250)]);
        assert_eq!(
            c.end_offset_for(5, 300),
            (5, 300),
            "latest ends at the log end"
        );
        assert_eq!(c.end_offset_for(3, 300), (3, 250));
        assert_eq!(
            c.end_offset_for(4, 300),
            (3, 250),
            "a gap answers with the floor"
        );
        assert_eq!(c.end_offset_for(1, 300), (1, 100));
        assert_eq!(c.end_offset_for(0, 300), (0, 0), "before every entry");
        assert_eq!(
            c.end_offset_for(6, 300),
            (UNDEFINED_EPOCH, UNDEFINED_OFFSET)
        );
        assert_eq!(
            c.end_offset_for(UNDEFINED_EPOCH, 300),
            (UNDEFINED_EPOCH, UNDEFINED_OFFSET)
        );
        assert_eq!(
            LeaderEpochCache::default().end_offset_for(0, 10),
            (UNDEFINED_EPOCH, UNDEFINED_OFFSET)
        );
    }

    #[test]
    fn assign_keeps_order_and_replaces_empty_epochs() {
        let mut c = cache(&[(0, 0)]);
        assert!(!c.assign(0, 10), "same epoch");
        assert!(c.assign(2, 10));
        assert!(!c.assign(1, 20), "older epoch");
        assert!(!c.assign(3, 5), "start before the latest");
        assert!(c.assign(3, 10), "epoch 2 wrote nothing");
        assert_eq!(
            c.entries(),
            &[
                EpochEntry {
                    epoch: 0,
                    start_offset: 0
                },
                EpochEntry {
                    epoch: 3,
                    start_offset: 10
                }
            ]
        );
    }

    #[test]
    fn truncation_from_both_ends() {
        let mut c = cache(&[(0, 0), (1, 100), (2, 200)]);
        assert!(c.truncate_from_start(150));
        assert_eq!(
            c.entries()[0],
            EpochEntry {
                epoch: 1,
                start_offset: 150
            }
        );
        assert!(!c.truncate_from_start(150));
        assert!(
            !c.truncate_from_start(10),
            "below the first entry changes nothing"
        );
        assert!(c.truncate_from_end(200));
        assert_eq!(
            c.latest(),
            Some(EpochEntry {
                epoch: 1,
                start_offset: 150
            })
        );
        assert!(!c.truncate_from_end(1000));
        assert_eq!(c.epoch_for_offset(149), None);
        assert_eq!(c.epoch_for_offset(150), Some(1));
        assert_eq!(c.epoch_for_offset(10_000), Some(1));
    }

    #[test]
    fn checkpoint_text_round_trips_and_rejects_damage() {
        let c = cache(&[(0, 0), (4, 17)]);
        assert_eq!(c.encode(), "0\n2\n0 0\n4 17\n");
        assert_eq!(LeaderEpochCache::decode(&c.encode()), Ok(c));
        assert_eq!(
            LeaderEpochCache::decode("0\n0\n"),
            Ok(LeaderEpochCache::default())
        );
        for bad in [
            "",
            "1\n0\n",
            "0\n",
            "0\nx\n",
            "0\n2\n0 0\n",
            "0\n1\n0\n",
            "0\n1\n0 0 0\n",
            "0\n2\n3 10\n2 20\n",
            "0\n2\n1 10\n2 5\n",
            "0\n1\n0 0\n1 1\n",
            "0\n1\n-1 0\n",
        ] {
            assert!(LeaderEpochCache::decode(bad).is_err(), "{bad:?} is refused");
        }
    }
}
