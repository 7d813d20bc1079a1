//! The bridge from the storage engine to this shard: the context every log of a shard is
//! opened with — the system clock, the engine's observations into the shard's metrics
//! recorder and the broker's [`DataDir`], and the shard's one cache of open segment files
//! (whose writes go through the armed storage faults when the broker runs with them).

use corelog_metrics::Stage;
use corelog_storage::{StorageError, StorageFaults};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

/// The broker's log directories as all its shards see them: which have failed (a write
/// or sync error of one of its logs: the directory's disk is no longer trusted, as Kafka
/// treats a log directory) and, under test, the storage faults armed on them.
///
/// Invariants: a directory, once failed, stays failed until the broker restarts;
/// `failed_logs` counts every log failure, in whichever directory.
#[derive(Debug, Default)]
pub struct DataDir {
    /// `log.dirs`, the first (metadata, checkpoints) first.
    dirs: Vec<PathBuf>,
    /// What each directory's first failure said (`None`: online), by index in `dirs`.
    failures: Mutex<Vec<Option<String>>>,
    failed_logs: AtomicUsize,
    faults: Option<Arc<StorageFaults>>,
}

impl DataDir {
    /// The health of `dirs` (`log.dirs`, in order), all online.
    pub fn new(dirs: Vec<PathBuf>, faults: Option<Arc<StorageFaults>>) -> DataDir {
        DataDir {
            failures: Mutex::new(vec![None; dirs.len()]),
            dirs,
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

    /// The failed directories, by index in `log.dirs`, each with what its first failure
    /// said.
    pub fn failed_dirs(&self) -> Vec<(usize, String)> {
        self.failures
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .iter()
            .enumerate()
            .filter_map(|(i, f)| Some((i, f.clone()?)))
            .collect()
    }

    /// Whether directory `i` of `log.dirs` has failed.
    pub fn is_failed(&self, i: usize) -> bool {
        self.failures
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .get(i)
            .is_some_and(Option::is_some)
    }

    /// Marks the directory holding `path` (a partition's directory, or one of `log.dirs`
    /// itself) failed, for `why`; the first directory when `path` is under none.
    pub fn mark_failed(&self, path: &Path, why: &str) {
        let i = self
            .dirs
            .iter()
            .position(|d| path == d || path.parent() == Some(d.as_path()))
            .unwrap_or(0);
        let mut failures = self.failures.lock().unwrap_or_else(|p| p.into_inner());
        if let Some(f @ None) = failures.get_mut(i) {
            *f = Some(format!("{}: {why}", path.display()));
        }
    }

    fn log_failed(&self, dir: &Path, error: &StorageError) {
        self.mark_failed(dir, &error.to_string());
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
