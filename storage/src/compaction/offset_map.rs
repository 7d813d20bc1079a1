//! The cleaner's key map: a 128-bit hash of each key → the latest offset seen for it,
//! with a hard bound on entries.
//!
//! Like Kafka's `SkimpyOffsetMap`, keys are stored as hashes, not bytes, so memory per key
//! is fixed whatever the key size; two keys whose 128-bit hashes collide would be treated
//! as one (probability ~n²/2¹²⁹, negligible for any log). The bound is what makes a
//! compaction pass use bounded memory: when the map is full the pass stops there and the
//! rest of the dirty log waits for the next pass.

use std::collections::HashMap;
use std::hash::{Hash, Hasher};

/// Bytes one entry costs in a `HashMap<u128, i64>`, with its control byte and load
/// factor, rounded up: what the memory budget is divided by.
pub const ENTRY_COST_BYTES: usize = 32;

pub struct OffsetMap {
    latest: HashMap<u128, i64>,
    max_entries: usize,
}

/// Two independent 64-bit SipHashes of `key` (distinct prefixes) as one 128-bit value.
pub fn key_hash(key: &[u8]) -> u128 {
    let half = |salt: u8| {
        let mut h = std::collections::hash_map::DefaultHasher::new();
        salt.hash(&mut h);
        key.hash(&mut h);
        h.finish()
    };
    (u128::from(half(0)) << 64) | u128::from(half(1))
}

impl OffsetMap {
    /// A map that holds at most `memory_bytes / ENTRY_COST_BYTES` keys (at least 16).
    pub fn with_memory(memory_bytes: usize) -> OffsetMap {
        let max_entries = (memory_bytes / ENTRY_COST_BYTES).max(16);
        OffsetMap {
            latest: HashMap::with_capacity(max_entries.min(1 << 16)),
            max_entries,
        }
    }

    pub fn len(&self) -> usize {
        self.latest.len()
    }

    pub fn is_empty(&self) -> bool {
        self.latest.is_empty()
    }

    /// Whether `more` new keys may still be added without passing the bound.
    pub fn has_room_for(&self, more: usize) -> bool {
        self.latest.len().saturating_add(more) <= self.max_entries
    }

    /// Records `offset` as the latest of `key`. Offsets are put in increasing order.
    pub fn put(&mut self, key: &[u8], offset: i64) {
        let slot = self.latest.entry(key_hash(key)).or_insert(offset);
        debug_assert!(*slot <= offset, "offsets are mapped in log order");
        *slot = offset;
    }

    pub fn get(&self, key: &[u8]) -> Option<i64> {
        self.latest.get(&key_hash(key)).copied()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn keeps_the_latest_offset_and_counts_room() {
        let mut m = OffsetMap::with_memory(16 * ENTRY_COST_BYTES);
        m.put(b"a", 1);
        m.put(b"b", 2);
        m.put(b"a", 7);
        assert_eq!(m.get(b"a"), Some(7));
        assert_eq!(m.get(b"b"), Some(2));
        assert_eq!(m.get(b"c"), None);
        assert_eq!(m.len(), 2);
        assert!(m.has_room_for(14));
        assert!(!m.has_room_for(15));
        assert_ne!(key_hash(b"a"), key_hash(b"b"));
    }
}
