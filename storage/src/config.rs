//! Settings of one partition log: the broker-wide defaults with the topic's overrides
//! applied. The engine does not parse configuration: its owner names, parses and
//! validates every key and hands the result over whole.
//!
//! A `LogConfig` is a plain value. A partition holds its current copy and takes a new
//! one whole when the topic's configuration is altered; nothing reads half of an update.

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

impl LogConfig {
    /// The syncer's period: unsynced data never waits longer than this for `fdatasync`.
    pub fn sync_period_ms(&self) -> u64 {
        let flush_ms = u64::try_from(self.flush_ms).unwrap_or(u64::MAX);
        self.flush_interval_ms.min(flush_ms).max(1)
    }
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

/// Which of the two cleanup policies a topic uses (`cleanup.policy`); both may be on.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct CleanupPolicy {
    /// Delete whole old segments by time and size (`delete`).
    pub delete: bool,
    /// Keep only the last record per key in the cleanable part of the log (`compact`).
    pub compact: bool,
}

/// Whose clock stamps the records (`message.timestamp.type`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum TimestampType {
    /// The producer's timestamps are kept (checked against the allowed difference).
    CreateTime,
    /// The broker stamps each batch with its own clock at append.
    LogAppendTime,
}

/// The codec batches are stored with (`compression.type`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum CompressionType {
    /// Stored as the producer sent them.
    Producer,
    Uncompressed,
    Gzip,
    Snappy,
    Lz4,
    Zstd,
}

#[derive(Debug, Clone, PartialEq)]
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
    /// Roll once the active segment's offset index holds this many bytes
    /// (`segment.index.bytes`).
    pub segment_index_bytes: u32,
    /// Delete sealed segments whose newest record is older than this; -1: never
    /// (`retention.ms`).
    pub retention_ms: i64,
    /// Delete the oldest sealed segments while the log is larger than this; -1: never
    /// (`retention.bytes`).
    pub retention_bytes: i64,
    pub cleanup: CleanupPolicy,
    /// How long tombstones survive compaction (`delete.retention.ms`).
    pub delete_retention_ms: i64,
    /// Records younger than this are never compacted (`min.compaction.lag.ms`).
    pub min_compaction_lag_ms: i64,
    /// A record older than this is compacted even below the dirty ratio
    /// (`max.compaction.lag.ms`).
    pub max_compaction_lag_ms: i64,
    /// Compact once dirty bytes / cleanable bytes reach this (`min.cleanable.dirty.ratio`).
    pub min_cleanable_dirty_ratio: f64,
    pub timestamp_type: TimestampType,
    /// Largest allowed distance between a CreateTime timestamp and the broker's clock
    /// (`message.timestamp.difference.max.ms`).
    pub timestamp_difference_max_ms: i64,
    pub compression: CompressionType,
    /// Replicas that must acknowledge `acks=all` (`min.insync.replicas`): with a smaller
    /// ISR, `acks=all` is refused with NOT_ENOUGH_REPLICAS and the high watermark waits.
    pub min_insync_replicas: i32,
    /// Whether a replica outside the ISR may lead when no ISR member is alive, at the
    /// cost of what only the ISR held (`unclean.leader.election.enable`). The controller
    /// decides elections; the log only carries the setting for DescribeConfigs.
    pub unclean_leader_election_enable: bool,
    /// Replicas throttled on their leader (`leader.replication.throttled.replicas`: `*`
    /// or `partition:broker,…`). Replication reads it; the log only carries it for
    /// DescribeConfigs.
    pub leader_replication_throttled_replicas: String,
    /// Replicas throttled on their follower (`follower.replication.throttled.replicas`).
    pub follower_replication_throttled_replicas: String,
    /// Deleted segment files stay (renamed `.deleted`) this long before they are
    /// unlinked (`file.delete.delay.ms`).
    pub file_delete_delay_ms: i64,
    /// Kafka's `flush.messages`: a produce that leaves this many or more offsets unsynced
    /// is acknowledged only after an `fdatasync` covering it, whatever `durability` says
    /// (1: every produce waits for the sync). `i64::MAX`: `durability` alone decides.
    pub flush_messages: i64,
    /// Kafka's `flush.ms`: unsynced data is synced at least this often (the background
    /// period is the smaller of this and `flush_interval_ms`). `i64::MAX`: no more often
    /// than `flush_interval_ms`.
    pub flush_ms: i64,
}

/// The defaults are Kafka's own, so a topic described without overrides reads as it
/// would on Apache Kafka.
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
            segment_index_bytes: 10 << 20,
            retention_ms: 7 * 24 * 3600 * 1000,
            retention_bytes: -1,
            cleanup: CleanupPolicy {
                delete: true,
                compact: false,
            },
            delete_retention_ms: 24 * 3600 * 1000,
            min_compaction_lag_ms: 0,
            max_compaction_lag_ms: i64::MAX,
            min_cleanable_dirty_ratio: 0.5,
            timestamp_type: TimestampType::CreateTime,
            timestamp_difference_max_ms: i64::MAX,
            compression: CompressionType::Producer,
            min_insync_replicas: 1,
            unclean_leader_election_enable: false,
            leader_replication_throttled_replicas: String::new(),
            follower_replication_throttled_replicas: String::new(),
            file_delete_delay_ms: 60_000,
            flush_messages: i64::MAX,
            flush_ms: i64::MAX,
        }
    }
}
