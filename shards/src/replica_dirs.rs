//! A shard's report of where its replicas live (KIP-858's AssignReplicasToDirs): each
//! open partition whose directory the metadata does not name for this broker's replica
//! — a partition just created, one made again on a replaced disk, one from before
//! directory ids — is proposed to the controller with the directory it is open in.
//!
//! Invariants: a shard has at most one report in flight; every report follows a
//! reconciliation, so a partition opened by one is reported after it; a report that is
//! not committed is made again, from the metadata of that moment, after a pause; nothing
//! is reported before the cluster finalizes a `metadata.version` with directory ids
//! (`METADATA_VERSION_DIRECTORY_IDS`), so a release that does not know the command
//! never meets it in the log.

use crate::mesh::TopicPartition;
use crate::metadata::ClusterMetadata;
use crate::shard::Shard;
use corelog_controller::command::{Command, CommandError, DirAssignment, Outcome};
use corelog_controller::features::{METADATA_VERSION, METADATA_VERSION_DIRECTORY_IDS};
use std::rc::Rc;
use std::time::Duration;
use uuid::Uuid;

/// How long a shard waits for the controller to commit a report.
const REPORT_TIMEOUT: Duration = Duration::from_secs(5);
/// The pause before a report that was not committed is made again.
const RETRY_PAUSE: Duration = Duration::from_secs(1);

/// The assignments broker `node` owes the metadata: each of `open` (a partition and the
/// id of the directory it is open in) whose replica the metadata places elsewhere or
/// nowhere. None before the cluster has directory ids.
pub fn owed(
    meta: &ClusterMetadata,
    node: i32,
    open: impl IntoIterator<Item = (TopicPartition, Uuid)>,
) -> Vec<DirAssignment> {
    if !has_directory_ids(meta) {
        return Vec::new();
    }
    open.into_iter()
        .filter_map(|(tp, dir)| {
            let topic = meta.topic(&tp.topic)?;
            let p = topic.partition(tp.partition)?;
            (p.replicas.contains(&node) && p.directories.get(&node) != Some(&dir)).then(|| {
                DirAssignment {
                    topic_id: topic.id,
                    partition: tp.partition,
                    dir,
                }
            })
        })
        .collect()
}

/// Whether the cluster's finalized `metadata.version` carries directory ids.
pub fn has_directory_ids(meta: &ClusterMetadata) -> bool {
    meta.features
        .get(METADATA_VERSION)
        .is_some_and(|l| *l >= METADATA_VERSION_DIRECTORY_IDS)
}

impl Shard {
    /// Reports the directories of this shard's partitions the metadata does not have
    /// right (`owed`), unless a report is in flight (whose end checks again).
    pub(crate) fn report_directories(self: &Rc<Self>) {
        if self.reporting_dirs.replace(true) {
            return;
        }
        let shard = self.clone();
        glommio::spawn_local(async move {
            loop {
                let meta = shard.metadata.snapshot();
                let open = shard
                    .logs()
                    .into_iter()
                    .filter_map(|(tp, log)| Some((tp, shard.dir_id_of(&log)?)))
                    .collect::<Vec<_>>();
                let assignments = owed(&meta, shard.config.node_id, open);
                if assignments.is_empty() {
                    break;
                }
                let n = assignments.len();
                let command = Command::AssignReplicasToDirs {
                    broker: shard.config.node_id,
                    broker_epoch: (*shard.node.registration().borrow()).unwrap_or(0),
                    assignments,
                };
                // Not committed, or refused for a registration not yet current: again
                // after a pause. Refused otherwise: the metadata has moved on (the
                // replica went, the directory failed), and the next reconciliation
                // reports what is still owed.
                match shard.node.propose(command, REPORT_TIMEOUT).await {
                    Ok(applied) => {
                        let refused: Vec<CommandError> = match applied.outcome {
                            Outcome::Items(items) => items.into_iter().filter_map(|r| r.err()).collect(),
                            other => {
                                tracing::warn!(shard = shard.id, outcome = ?other, "reporting replica directories");
                                break;
                            }
                        };
                        tracing::debug!(shard = shard.id, partitions = n, refused = refused.len(), "replica directories reported");
                        if !refused.iter().any(|e| matches!(e, CommandError::StaleBrokerEpoch(_))) {
                            if let Some(e) = refused.first() {
                                tracing::info!(shard = shard.id, reason = %e, "a replica directory report refused");
                            }
                            break;
                        }
                    }
                    Err(e) => {
                        tracing::info!(shard = shard.id, error = %e, "replica directories not reported; trying again");
                    }
                }
                glommio::timer::sleep(RETRY_PAUSE).await;
            }
            shard.reporting_dirs.set(false);
        })
        .detach();
    }

    /// The id of the log directory `log` is open in.
    fn dir_id_of(&self, log: &corelog_partition::Partition) -> Option<Uuid> {
        let i = self.log_dir_index(log)?;
        self.config.log_dir_ids.get(i).copied()
    }

    /// Which of `log.dirs` `log` is open in.
    pub(crate) fn log_dir_index(&self, log: &corelog_partition::Partition) -> Option<usize> {
        self.config
            .log_dirs
            .iter()
            .position(|d| log.dir().parent() == Some(d.as_path()))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use corelog_controller::command::NewTopic;
    use corelog_controller::image::Endpoint;
    use corelog_controller::MetadataImage;
    use std::sync::Arc;

    fn apply(img: &mut MetadataImage, c: Command) -> Outcome {
        let i = img.applied + 1;
        img.apply(i, &c)
    }

    /// Broker 1 with directories `a` and `b`, a topic `t` of two partitions on it, at
    /// `metadata.version` `level`.
    fn image(level: i16, a: Uuid, b: Uuid) -> MetadataImage {
        let mut img = MetadataImage::default();
        img.features.insert(METADATA_VERSION.into(), level);
        apply(
            &mut img,
            Command::RegisterBroker {
                id: 1,
                incarnation: Uuid::from_u128(1),
                endpoint: Endpoint {
                    host: "h".into(),
                    port: 1,
                },
                listeners: Vec::new(),
                controller_addr: String::new(),
                rack: None,
                supported_features: Some(corelog_controller::features::supported()),
                log_dirs: vec![a, b],
            },
        );
        apply(&mut img, Command::UnfenceBroker { id: 1, epoch: 1 });
        apply(
            &mut img,
            Command::CreateTopics {
                topics: vec![NewTopic {
                    name: "t".into(),
                    id: Uuid::from_u128(7),
                    partitions: 2,
                    replication_factor: 1,
                    assignments: Some(vec![vec![1], vec![1]]),
                    configs: Default::default(),
                }],
            },
        );
        img
    }

    fn tp(p: i32) -> TopicPartition {
        TopicPartition {
            topic: "t".into(),
            partition: p,
        }
    }

    #[test]
    fn owes_what_the_metadata_does_not_have_and_nothing_before_directory_ids() {
        let (a, b) = (Uuid::from_u128(0xa), Uuid::from_u128(0xb));
        let open = || vec![(tp(0), a), (tp(1), b), (tp(5), a)];
        let old = ClusterMetadata::new(Arc::new(image(METADATA_VERSION_DIRECTORY_IDS - 1, a, b)));
        assert!(owed(&old, 1, open()).is_empty());

        let mut img = image(METADATA_VERSION_DIRECTORY_IDS, a, b);
        let meta = ClusterMetadata::new(Arc::new(img.clone()));
        let first = owed(&meta, 1, open());
        assert_eq!(
            first
                .iter()
                .map(|d| (d.partition, d.dir))
                .collect::<Vec<_>>(),
            vec![(0, a), (1, b)],
            "the partition the metadata lacks is not reported"
        );
        assert!(
            owed(&meta, 2, open()).is_empty(),
            "not a replica of broker 2"
        );
        apply(
            &mut img,
            Command::AssignReplicasToDirs {
                broker: 1,
                broker_epoch: 1,
                assignments: first,
            },
        );
        let meta = ClusterMetadata::new(Arc::new(img));
        assert!(owed(&meta, 1, open()).is_empty());
        assert_eq!(owed(&meta, 1, vec![(tp(0), b)]).len(), 1, "moved to b");
    }
}
