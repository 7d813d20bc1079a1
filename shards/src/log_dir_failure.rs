//! What the broker does when one of its log directories fails (a write or sync error of
//! a log in it: its disk is no longer trusted): Kafka's answer for JBOD. The partitions
//! of that directory go offline on this broker — every shard fails its logs there, stops
//! following with them and unloads the coordinators they carry — and the controller is
//! told (`LogDirsOffline`), which moves their leadership to other replicas and takes
//! this broker out of their ISRs. Every other partition keeps serving.
//!
//! The whole broker steps down instead (a controlled shutdown without the shutdown, as
//! when its only directory fails) when the failed directory is the first one (it holds
//! the metadata log and the high-watermark checkpoints; so a broker with one directory,
//! or with none left, always steps down), or before the cluster has directory ids (`replica_dirs::has_directory_ids`): the
//! controller could not tell one directory's partitions from another's.
//!
//! Invariants: a directory taken offline stays offline until the broker restarts; a
//! partition in an offline directory is neither opened again nor followed.

use crate::shard::Shard;
use corelog_storage::StorageError;

/// How the broker answers its failed directories.
#[derive(Debug, PartialEq, Eq)]
pub enum Response {
    /// These directories (indexes in `log.dirs`) go offline, the rest serve.
    Offline(Vec<usize>),
    /// The broker gives up leadership of everything until it restarts.
    StepDown,
}

/// The answer to `failed` (indexes in `log.dirs`, non-empty) of a broker with
/// `dir_count` directories, in a cluster that has directory ids or not.
pub fn respond(failed: &[usize], dir_count: usize, has_directory_ids: bool) -> Response {
    debug_assert!(!failed.is_empty());
    debug_assert!(failed.iter().all(|i| *i < dir_count));
    if !has_directory_ids || failed.contains(&0) {
        Response::StepDown
    } else {
        Response::Offline(failed.to_vec())
    }
}

impl Shard {
    /// Takes this shard's partitions in directory `i` of `log.dirs` offline: their logs
    /// fail (appends answer KAFKA_STORAGE_ERROR), their fetchers stop and the
    /// coordinators they carry unload. They stay in the table, failed, so requests are
    /// answered as Kafka answers an offline replica's.
    pub fn take_dir_offline(&self, i: usize) {
        let dir = self.config.log_dirs.get(i).cloned().unwrap_or_default();
        let mut n = 0;
        for (tp, log) in self.logs() {
            if self.log_dir_index(&log) != Some(i) {
                continue;
            }
            log.log().fail_with(StorageError::new(
                log.dir().display(),
                format!("log directory {} is offline", dir.display()),
            ));
            self.unload_partition(&tp);
            n += 1;
        }
        tracing::error!(shard = self.id, dir = %dir.display(), partitions = n, "log directory offline: its partitions are served by other replicas");
    }

    /// Whether `log` is in a directory that has failed.
    pub(crate) fn in_failed_dir(&self, log: &corelog_partition::Partition) -> bool {
        self.log_dir_index(log)
            .is_some_and(|i| self.data_dir.is_failed(i))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_a_further_directory_of_a_cluster_with_directory_ids_goes_offline_alone() {
        assert_eq!(respond(&[1], 3, true), Response::Offline(vec![1]));
        assert_eq!(respond(&[1, 2], 3, true), Response::Offline(vec![1, 2]));
        assert_eq!(
            respond(&[2, 1, 0], 3, true),
            Response::StepDown,
            "none left"
        );
        assert_eq!(respond(&[0], 3, true), Response::StepDown, "the metadata's");
        assert_eq!(
            respond(&[1], 3, false),
            Response::StepDown,
            "no directory ids"
        );
        assert_eq!(respond(&[0], 1, true), Response::StepDown);
    }
}
