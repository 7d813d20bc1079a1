//! Settings of one partition log, resolved from the broker defaults (and, later,
//! per-topic overrides) before the log is opened.

/// When an acknowledged produce is also on stable storage.
///
/// A completed direct-I/O write survives the death of the broker process; only
/// `fdatasync` makes it survive the loss of power. The default, [`Durability::AckAll`],
/// is the promise a single-node broker's users expect from `acks=all`: those produces
/// are answered after an `fdatasync` that covers them (one sync serves every produce
/// waiting on it — group commit). See kernel-notes.md for the measured cost.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Durability {
    /// Every acknowledged produce (acks=1 and acks=all) waits for `fdatasync`.
    Always,
    /// acks=all waits for `fdatasync`; acks=1 waits for the write to complete.
    AckAll,
    /// No produce waits for `fdatasync`; the log is synced every `flush_interval_ms`.
    Interval,
}

impl Durability {
    pub fn parse(text: &str) -> Option<Durability> {
        match text {
            "always" => Some(Durability::Always),
            "ack-all" | "ack_all" => Some(Durability::AckAll),
            "interval" => Some(Durability::Interval),
            _ => None,
        }
    }
}

#[derive(Debug, Clone)]
pub struct LogConfig {
    /// Roll to a new segment once the active one would grow past this (`segment.bytes`).
    pub segment_bytes: u64,
    /// Roll once the active segment is older than this (`segment.ms`).
    pub segment_ms: u64,
    /// Log bytes between two sparse offset-index entries (`index.interval.bytes`).
    pub index_interval_bytes: u32,
    /// Largest batch accepted (`message.max.bytes`, Kafka's default 1048588).
    pub max_batch_bytes: usize,
    /// Recent batches kept in memory per partition for fetches at the tail.
    pub tail_cache_bytes: usize,
    pub durability: Durability,
    /// Background `fdatasync` period when nothing else asks for one.
    pub flush_interval_ms: u64,
}

impl Default for LogConfig {
    fn default() -> Self {
        LogConfig {
            segment_bytes: 1 << 30,
            segment_ms: 7 * 24 * 3600 * 1000,
            index_interval_bytes: 4096,
            max_batch_bytes: 1_048_588,
            tail_cache_bytes: 2 << 20,
            durability: Durability::AckAll,
            flush_interval_ms: 1000,
        }
    }
}
