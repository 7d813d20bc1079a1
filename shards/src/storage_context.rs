//! The bridge from the storage engine to this shard: the context every log of a shard is
//! opened with — the system clock, the engine's observations into the shard's metrics
//! recorder, and the shard's one cache of open segment files.

use corelog_metrics::Stage;
use std::time::Duration;

/// The storage engine's observations, into this shard's recorder.
#[derive(Debug, Default, Clone, Copy)]
pub struct StorageObserver;

impl corelog_storage::Observer for StorageObserver {
    fn stage(&self, stage: corelog_storage::Stage, latency: Duration) {
        let stage = match stage {
            corelog_storage::Stage::Append => Stage::Append,
            corelog_storage::Stage::Fsync => Stage::Fsync,
        };
        corelog_metrics::record_stage(stage, latency);
    }

    fn duplicate_batch(&self) {
        corelog_metrics::record_duplicate_batch();
    }
}

/// The context every log of this shard is opened with: the system clock, observations
/// into this shard's recorder, and one cache of at most `open_files` segment files.
pub fn storage_context(open_files: usize) -> corelog_storage::LogContext {
    corelog_storage::LogContext {
        clock: std::rc::Rc::new(corelog_storage::SystemClock),
        observer: std::rc::Rc::new(StorageObserver),
        files: corelog_storage::FileCache::new(open_files),
    }
}
