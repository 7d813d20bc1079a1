//! The bridge from the storage engine to this shard: the context every log of a shard is
//! opened with — the system clock, the engine's observations into the shard's metrics
//! recorder and the broker's [`DataDir`], and the shard's one cache of open segment files
//! (whose writes go through the armed storage faults when the broker runs with them).

use corelog_metrics::Stage;
use corelog_storage::{StorageError, StorageFaults};
use std::path::Path;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

/// The broker's data directory as all its shards see it: how many of its logs have
/// failed (a write or sync error: the directory's disk is no longer trusted, as Kafka
/// treats its one log directory) and, under test, the storage faults armed on it.
#[derive(Debug, Default)]
pub struct DataDir {
    failed_logs: AtomicUsize,
    first_failure: Mutex<Option<String>>,
    faults: Option<Arc<StorageFaults>>,
}

impl DataDir {
    pub fn new(faults: Option<Arc<StorageFaults>>) -> DataDir {
        DataDir {
            faults,
            ..DataDir::default()
        }
    }

    pub fn faults(&self) -> Option<&Arc<StorageFaults>> {
        self.faults.as_ref()
    }

    /// Logs failed since the broker started.
    pub fn failed_logs(&self) -> usize {
        self.failed_logs.load(Ordering::Acquire)
    }

    /// What the first failure said.
    pub fn first_failure(&self) -> Option<String> {
        self.first_failure
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .clone()
    }

    fn log_failed(&self, dir: &Path, error: &StorageError) {
        let mut first = self.first_failure.lock().unwrap_or_else(|p| p.into_inner());
        if first.is_none() {
            *first = Some(format!("{}: {error}", dir.display()));
        }
        drop(first);
        self.failed_logs.fetch_add(1, Ordering::AcqRel);
    }
}

/// The storage engine's observations, into this shard's recorder and the data directory.
#[derive(Debug, Clone)]
pub struct StorageObserver {
    data_dir: Arc<DataDir>,
}

impl corelog_storage::Observer for StorageObserver {
    fn stage(&self, stage: corelog_storage::Stage, latency: Duration) {
        let stage = match stage {
            corelog_storage::Stage::Append => Stage::Append,
            corelog_storage::Stage::Fsync => Stage::Fsync,
            corelog_storage::Stage::ReplicationWait => Stage::ReplicationWait,
            corelog_storage::Stage::FollowerAppend => Stage::FollowerAppend,
        };
        corelog_metrics::record_stage(stage, latency);
    }

    fn duplicate_batch(&self) {
        corelog_metrics::record_duplicate_batch();
    }

    fn appended(&self, records: u64) {
        corelog_metrics::record_appended_records(records);
    }

    fn log_failed(&self, dir: &Path, error: &StorageError) {
        corelog_metrics::record_log_failure();
        self.data_dir.log_failed(dir, error);
    }
}

/// The context every log of this shard is opened with: the system clock, observations
/// into this shard's recorder and `data_dir`, and one cache of at most `open_files`
/// segment files.
pub fn storage_context(open_files: usize, data_dir: &Arc<DataDir>) -> corelog_storage::LogContext {
    corelog_storage::LogContext {
        clock: std::rc::Rc::new(corelog_storage::SystemClock),
        observer: std::rc::Rc::new(StorageObserver {
            data_dir: data_dir.clone(),
        }),
        files: corelog_storage::FileCache::with_faults(open_files, data_dir.faults().cloned()),
        runtime: corelog_storage::runtime::Runtime::Glommio,
    }
}
