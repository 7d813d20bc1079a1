//! `corelog-storage`: corelog's storage engine — one partition's log of Kafka record
//! batches on direct I/O, with its indexes, recovery, retention and compaction.
//!
//! It owns the files of a partition directory and nothing else. It knows nothing of
//! shards, the cross-core mesh, the broker's housekeeping schedule, metrics or the Kafka
//! protocol beyond the RecordBatch v2 format: wall time comes from the [`Clock`] it is
//! handed and what it measures goes to the [`Observer`] it is handed ([`context`]). Its
//! files live on the [`fs::Disk`] of its file cache (the kernel's, or the simulator's
//! [`fs::MemFs`]), and its monotonic clock, sleeps and background tasks come from the
//! [`runtime::Runtime`] it is handed (glommio's, or the simulator's [`runtime::SimTime`]):
//! the simulator runs the same engine on a disk in memory that can crash, under time it
//! controls, one seed replaying one run. It must
//! never depend on another corelog crate but the leaf `corelog-record-batch` (the
//! RecordBatch v2 header layout, shared with the Kafka client).
//!
//! A partition log is an ordered, append-only sequence of Kafka RecordBatch v2 bytes,
//! split into segments on disk.
//!
//! Layout of one partition directory (`<data-dir>/<topic>-<partition>/`):
//!
//! ```text
//! 00000000000000000000.log        record batches, exactly as clients sent them after
//!                                 validation and offset assignment
//! 00000000000000000000.index      sparse offset index: (relative offset u32, position u32)
//! 00000000000000000000.timeindex  time index: (max timestamp i64, relative offset u32)
//! 00000000000000004711.log        next segment, named by its base offset (20 digits)
//! 00000000000000000000.txnindex   aborted transactions whose marker is in the segment
//! 00000000000000004711.snapshot   idempotent producers' state below offset 4711
//! ...
//! ```
//!
//! Media assumptions: a completed direct-I/O write is in the
//! device and survives the death of the process; only `fdatasync` makes it survive power
//! loss; a write of one 4 KiB-aligned block never changes bytes outside that block; a torn
//! write can leave any suffix of the unsynced region as garbage or zeros. Recovery
//! therefore trusts sealed segments (synced at roll) and re-validates only the tail of the
//! active segment after its last index entry.

pub mod aligned_appender;
pub mod batch;
pub mod batch_builder;
pub mod batch_filter;
pub mod checkpoint;
pub mod compaction;
pub mod config;
pub mod context;
pub mod error;
pub mod fault;
pub mod file_cache;
pub mod file_range;
pub mod file_scan;
pub mod fs;
pub mod mem_file;
pub mod offset_index;
pub mod partition_log;
pub mod producer_snapshot;
pub mod producer_state;
pub mod records;

pub mod retention;
pub mod runtime;
pub mod segment;
pub mod segment_io;
pub mod segment_swap;
pub mod tail_cache;
pub mod tail_cache_budget;
#[doc(hidden)]
pub mod test_executor;
pub mod time_index;
pub mod txn_index;
pub mod txn_marker;

pub use config::{Durability, LogConfig};
pub use context::{Clock, LogContext, NoObserver, Observer, Stage, SystemClock};
pub use error::{AppendError, ReadError, RecordRule, RejectedRecords, StorageError};
pub use fault::StorageFaults;
pub use file_cache::{FileCache, FileCacheStats, SegmentFile};
pub use file_range::FileRange;
pub use partition_log::{AckLevel, AppendTicket, PartitionLog, ReadOutcome, TruncateOutcome};
pub use records::{ByReference, Carried, Records};
