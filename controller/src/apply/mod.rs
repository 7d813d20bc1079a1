//! Applying a command to the image: the only code that changes cluster metadata.
//!
//! Deterministic: the result depends on the image, the command and the log index alone
//! (no clock, no randomness, only ordered maps iterated), so every node that applies the
//! same log holds the same image. A command that fails a check changes nothing it failed
//! on; a command of several items applies the items that pass.
//!
//! Leadership rules (Kafka's, `PartitionChangeBuilder`): a broker may lead, or join an
//! ISR, while it is active — registered, not fenced, not in controlled shutdown. A
//! partition keeps its leader while the leader is an active ISR member; otherwise it is
//! led by the first replica, in assignment order, that is an active ISR member; when
//! there is none the partition is offline (leader -1), unless unclean leader election is
//! enabled for its topic (`unclean.leader.election.enable`, the topic's override else the
//! cluster-wide broker config, off by default): then the first active replica leads and
//! the ISR becomes just that replica, records only the old ISR had being lost. Elections
//! run on every partition of a broker whose liveness changes (fencing, unfencing, a
//! restart's new registration, controlled shutdown) and on the offline partitions of
//! every topic whose effective unclean setting may have changed. Fencing (and controlled
//! shutdown, which fences for good until the broker registers again) takes the broker out
//! of the ISR unless it is the last member (the ISR then keeps it, and the partition
//! waits for it, or elects uncleanly). The ISR otherwise changes by its leader's
//! `AlterPartition`, which never changes the leader unless it completes a reassignment,
//! and by reassignments (a completion or a cancel drops the replicas that go).
//! Every leader change bumps the leader epoch; every change of a partition bumps the
//! partition epoch.
//!
//! Reassignment (KIP-455, Kafka's `ReplicationControlManager`): a partition moved to new
//! replicas holds the target and the replicas being removed together while the added
//! ones catch up; every change of a partition ends in `settle`, which completes the
//! reassignment as soon as the whole target is in the ISR — the replicas become the
//! target, and a leader being removed hands over in the same change — and then elects.
//!
//! Layout: [`MetadataImage::apply`] below matches on the command and hands it to the
//! family that applies it, one file each: `brokers` (registration, fencing, controlled
//! shutdown, producer ids), `directories` (where replicas live, failed directories),
//! `topics` (topics and their partitions), `configs` (topic and
//! broker configs, the balancer's marks), `features` (`UpdateFeatures`), `quotas`
//! (client quotas), `isr` (`AlterPartition`), `reassign` (`AlterPartitionReassignments`), `import` (a single
//! node's metadata) and `leadership` (`ElectLeaders`, and the election and
//! partition-change rules above, which every family that changes a partition ends in).
//! `InitCluster`, which only sets the cluster id (and the new cluster's feature levels)
//! the first time one is given, is applied here. A family's methods on the image are
//! `pub(super)` at most, so `apply` stays the only way in. A family uses nothing of another but `leadership`'s rules, and `import`
//! `topics`' `add_topic`; `leadership` uses no family. After every command `apply`
//! checks the image's invariants (`check_invariants`, where debug assertions are on).

use crate::command::*;
use crate::image::{BrokerRegistration, MetadataImage};

mod brokers;
mod configs;
mod directories;
mod features;
mod import;
mod isr;
mod leadership;
mod quotas;
mod reassign;
#[cfg(test)]
mod test_support;
mod topics;

impl MetadataImage {
    /// Applies `cmd`, the entry at log index `index` (> every index applied before).
    pub fn apply(&mut self, index: u64, cmd: &Command) -> Outcome {
        debug_assert!(index > self.applied, "log indexes only grow");
        self.applied = index;
        let out = match cmd {
            Command::InitCluster {
                cluster_id,
                features,
            } => {
                if self.cluster_id.is_none() && !cluster_id.is_empty() {
                    self.cluster_id = Some(cluster_id.clone());
                    if self.features.is_empty() {
                        self.features = features.clone();
                    }
                }
                Outcome::Done(Ok(()))
            }
            Command::RegisterBroker {
                id,
                incarnation,
                endpoint,
                listeners,
                controller_addr,
                rack,
                supported_features,
                log_dirs,
            } => Outcome::Done(self.register(BrokerRegistration {
                id: *id,
                incarnation: *incarnation,
                epoch: index,
                endpoint: endpoint.clone(),
                listeners: listeners.clone(),
                controller_addr: controller_addr.clone(),
                rack: rack.clone(),
                fenced: true,
                shutting_down: false,
                supported_features: supported_features.clone(),
                log_dirs: log_dirs.clone(),
                offline_dirs: Default::default(),
            })),
            Command::AssignReplicasToDirs {
                broker,
                broker_epoch,
                assignments,
            } => Outcome::Items(
                assignments
                    .iter()
                    .map(|a| self.assign_dir(*broker, *broker_epoch, a))
                    .collect(),
            ),
            Command::LogDirsOffline {
                broker,
                broker_epoch,
                dirs,
            } => Outcome::Done(self.dirs_offline(*broker, *broker_epoch, dirs)),
            Command::UpdateFeatures { updates, legacy } => {
                Outcome::Done(self.update_features(updates, legacy))
            }
            Command::FenceBroker { id, epoch } => Outcome::Done(self.set_fenced(*id, *epoch, true)),
            Command::UnfenceBroker { id, epoch } => {
                Outcome::Done(self.set_fenced(*id, *epoch, false))
            }
            Command::ControlledShutdown { id, epoch } => {
                Outcome::Done(self.controlled_shutdown(*id, *epoch))
            }
            Command::AlterPartition {
                broker,
                broker_epoch,
                changes,
            } => Outcome::Items(
                changes
                    .iter()
                    .map(|c| self.alter_isr(*broker, *broker_epoch, c))
                    .collect(),
            ),
            Command::CreateTopics { topics } => {
                Outcome::Items(topics.iter().map(|t| self.create_topic(t)).collect())
            }
            Command::AlterPartitionReassignments { items } => {
                Outcome::Items(items.iter().map(|i| self.reassign(i)).collect())
            }
            Command::ElectLeaders {
                election,
                partitions,
            } => Outcome::Items(
                partitions
                    .iter()
                    .map(|(t, p)| self.elect_leader(*election, t, *p))
                    .collect(),
            ),
            Command::DeleteTopics { names } => {
                Outcome::Items(names.iter().map(|n| self.delete_topic(n)).collect())
            }
            Command::CreatePartitions { topics } => {
                Outcome::Items(topics.iter().map(|t| self.create_partitions(t)).collect())
            }
            Command::SetTopicConfigs { changes } => {
                Outcome::Items(changes.iter().map(|c| self.set_topic_configs(c)).collect())
            }
            Command::MarkBalancerMoves { add, topics } => Outcome::Items(
                topics
                    .iter()
                    .map(|m| self.mark_balancer_moves(*add, m))
                    .collect(),
            ),
            Command::SetBrokerConfigs { change } => Outcome::Done(self.set_broker_configs(change)),
            Command::SetGroupConfigs { change } => Outcome::Done(self.set_group_configs(change)),
            Command::AlterClientQuotas { alterations } => {
                Outcome::Done(self.alter_client_quotas(alterations))
            }
            Command::AlterScramCredentials {
                deletions,
                upsertions,
            } => {
                self.scram.alter(deletions, upsertions);
                Outcome::Done(Ok(()))
            }
            Command::CreateAcls { bindings } => {
                self.acls.create(bindings);
                Outcome::Items(vec![Ok(()); bindings.len()])
            }
            Command::DeleteAcls { filters } => Outcome::DeletedAcls(self.acls.delete(filters)),
            Command::AllocateProducerIds { broker, epoch } => {
                Outcome::ProducerIds(self.allocate_producer_ids(*broker, *epoch))
            }
            Command::ImportSingleNode(m) => Outcome::Done(self.import_single_node(m)),
        };
        debug_assert_eq!(self.check_invariants(), Ok(()), "after {cmd:?}");
        out
    }
}

/// Whether a list of brokers (replicas, a target, an ISR) names some, and none twice.
fn names_each_once(brokers: &[i32]) -> bool {
    let mut sorted = brokers.to_vec();
    sorted.sort_unstable();
    sorted.dedup();
    !brokers.is_empty() && sorted.len() == brokers.len()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::apply::test_support::*;
    use crate::image::Endpoint;
    use uuid::Uuid;

    #[test]
    fn same_log_same_image() {
        let log: Vec<Command> = {
            let mut v = Vec::new();
            for id in 1..=3 {
                v.push(Command::RegisterBroker {
                    id,
                    incarnation: Uuid::from_u128(id as u128),
                    endpoint: Endpoint {
                        host: "h".into(),
                        port: id as u16,
                    },
                    listeners: Vec::new(),
                    controller_addr: String::new(),
                    rack: Some(format!("r{}", id % 2)),
                    supported_features: None,
                    log_dirs: Vec::new(),
                });
            }
            for (i, id) in (1..=3).enumerate() {
                v.push(Command::UnfenceBroker {
                    id,
                    epoch: i as u64 + 1,
                });
            }
            for k in 0..5 {
                let mut t = topic(&format!("t{k}"), 7);
                t.id = Uuid::from_u128(1000 + k);
                v.push(Command::CreateTopics { topics: vec![t] });
            }
            v.push(Command::FenceBroker { id: 3, epoch: 3 });
            let mut t = topic("r", 4);
            t.id = Uuid::from_u128(2000);
            t.replication_factor = 2;
            t.configs = unclean("true");
            v.push(Command::CreateTopics { topics: vec![t] });
            v.push(Command::ControlledShutdown { id: 2, epoch: 2 });
            v
        };
        let run = || {
            let mut img = MetadataImage::default();
            for (i, c) in log.iter().enumerate() {
                img.apply(i as u64 + 1, c);
            }
            serde_json::to_string(&img).unwrap()
        };
        assert_eq!(run(), run());
    }
}
