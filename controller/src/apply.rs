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

use crate::command::*;
use crate::image::{
    unclean_leader_election, validate_topic_name, without, BrokerRegistration, MetadataImage,
    PartitionImage, TopicImage, NO_LEADER,
};
use crate::placement::{self, Candidate};
use std::collections::BTreeMap;
impl MetadataImage {
    /// Applies `cmd`, the entry at log index `index` (> every index applied before).
    pub fn apply(&mut self, index: u64, cmd: &Command) -> Outcome {
        debug_assert!(index > self.applied, "log indexes only grow");
        self.applied = index;
        let out = match cmd {
            Command::InitCluster { cluster_id } => {
                if self.cluster_id.is_none() && !cluster_id.is_empty() {
                    self.cluster_id = Some(cluster_id.clone());
                }
                Outcome::Done(Ok(()))
            }
            Command::RegisterBroker {
                id,
                incarnation,
                endpoint,
                controller_addr,
                rack,
            } => Outcome::Done(self.register(
                index,
                *id,
                *incarnation,
                endpoint,
                controller_addr,
                rack,
            )),
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
            Command::DeleteTopics { names } => Outcome::Items(
                names
                    .iter()
                    .map(|n| match self.topics.remove(n) {
                        Some(t) => {
                            self.topic_ids.remove(&t.id);
                            Ok(())
                        }
                        None => Err(CommandError::UnknownTopic),
                    })
                    .collect(),
            ),
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
            Command::AlterClientQuotas { alterations } => {
                Outcome::Done(self.alter_client_quotas(alterations))
            }
            Command::AllocateProducerIds { broker, epoch } => {
                Outcome::ProducerIds(self.allocate_producer_ids(*broker, *epoch))
            }
            Command::ImportSingleNode(m) => Outcome::Done(self.import_single_node(m)),
        };
        debug_assert_eq!(self.check_invariants(), Ok(()), "after {cmd:?}");
        out
    }

    fn register(
        &mut self,
        index: u64,
        id: i32,
        incarnation: uuid::Uuid,
        endpoint: &crate::image::Endpoint,
        controller_addr: &str,
        rack: &Option<String>,
    ) -> Result<(), CommandError> {
        if id < 0 {
            return Err(CommandError::Invalid(format!("broker id {id} is negative")));
        }
        if let Some(b) = self.brokers.get(&id) {
            if b.incarnation == incarnation {
                return Ok(());
            }
            // A restart: what it led moves away until the new incarnation catches up.
            let old_epoch = b.epoch;
            self.set_fenced(id, old_epoch, true)?;
        }
        self.brokers.insert(
            id,
            BrokerRegistration {
                id,
                incarnation,
                epoch: index,
                endpoint: endpoint.clone(),
                controller_addr: controller_addr.to_string(),
                rack: rack.clone(),
                fenced: true,
                shutting_down: false,
            },
        );
        Ok(())
    }

    /// Fences or unfences registration `id` of `epoch` and re-elects its partitions.
    /// Unfencing a registration in controlled shutdown is refused: it would let a broker
    /// that is stopping lead again (an `UnfenceBroker` decided before the shutdown can
    /// commit after it).
    fn set_fenced(&mut self, id: i32, epoch: u64, fenced: bool) -> Result<(), CommandError> {
        match self.brokers.get_mut(&id) {
            Some(b) if b.epoch == epoch => {
                if !fenced && b.shutting_down {
                    return Err(CommandError::Invalid(format!(
                        "broker {id} is shutting down; it is unfenced only once it registers again"
                    )));
                }
                if b.fenced == fenced {
                    return Ok(());
                }
                b.fenced = fenced;
            }
            _ => return Err(CommandError::StaleBrokerEpoch(id)),
        }
        self.reelect(fenced.then_some(id), |_, p| p.replicas.contains(&id));
        Ok(())
    }

    /// Kafka's controlled shutdown: the registration is marked shutting down, then fenced
    /// (if it is not already: a fenced broker has had the fencing's effect). From here on
    /// nothing makes it active again but a new registration.
    fn controlled_shutdown(&mut self, id: i32, epoch: u64) -> Result<(), CommandError> {
        match self.brokers.get_mut(&id) {
            Some(b) if b.epoch == epoch => b.shutting_down = true,
            _ => return Err(CommandError::StaleBrokerEpoch(id)),
        }
        self.set_fenced(id, epoch, true)?;
        debug_assert!(self
            .brokers
            .get(&id)
            .is_some_and(|b| b.fenced && !b.is_active()));
        Ok(())
    }

    /// Runs the election on every partition `picks` (by topic and partition), first
    /// taking `leaving` (a broker just fenced) out of its ISR unless it is the last
    /// member. Partitions whose leader stays valid and whose ISR stays are untouched, so
    /// picking more partitions than are affected changes nothing more.
    fn reelect(
        &mut self,
        leaving: Option<i32>,
        picks: impl Fn(&TopicImage, &PartitionImage) -> bool,
    ) {
        let live: Vec<i32> = self.live_brokers().map(|b| b.id).collect();
        let cluster_configs = self.broker_configs.get("");
        for t in self.topics.values_mut() {
            let unclean = unclean_leader_election(&t.configs, cluster_configs);
            let picked: Vec<usize> = (0..t.partitions.len())
                .filter(|i| picks(t, &t.partitions[*i]))
                .collect();
            for i in picked {
                let p = &mut t.partitions[i];
                let mut next = p.clone();
                if let Some(id) = leaving {
                    if next.isr.len() > 1 {
                        next.isr.retain(|r| *r != id);
                    }
                }
                settle(&mut next, &live, unclean);
                change_partition(p, next);
            }
        }
    }

    /// Replaces a topic's overrides if they still are `from`; its offline partitions then
    /// get an unclean leader if that is now enabled.
    fn set_topic_configs(&mut self, c: &ConfigChange) -> Result<(), CommandError> {
        let t = self
            .topics
            .get_mut(&c.name)
            .ok_or(CommandError::UnknownTopic)?;
        if t.configs != c.from {
            return Err(CommandError::Conflict);
        }
        t.configs = c.to.clone();
        self.reelect(None, |t, p| t.name == c.name && !p.has_leader());
        Ok(())
    }

    /// Marks (`add`) or unmarks the balancer's moves on one topic: its configs change as
    /// `set_topic_configs` would change them, and its record of the balancer's moves
    /// gains or loses those partitions, in the same step.
    fn mark_balancer_moves(&mut self, add: bool, m: &BalancerMarks) -> Result<(), CommandError> {
        let t = self
            .topics
            .get(&m.change.name)
            .ok_or(CommandError::UnknownTopic)?;
        if add && m.moves.keys().any(|p| t.partition(*p).is_none()) {
            return Err(CommandError::UnknownTopicOrPartition);
        }
        self.set_topic_configs(&m.change)?;
        let marked = &mut self
            .topics
            .get_mut(&m.change.name)
            .expect("set_topic_configs found it")
            .balancer_moves;
        for (p, moved) in &m.moves {
            if add {
                marked.insert(*p, moved.clone());
            } else {
                marked.remove(p);
            }
        }
        Ok(())
    }

    /// One change of an `AlterPartition`: refused as [`Self::isr_change_refusal`] says,
    /// else applied. The leader stays, so only the partition epoch moves.
    fn alter_isr(
        &mut self,
        broker: i32,
        broker_epoch: u64,
        c: &IsrChange,
    ) -> Result<(), CommandError> {
        let (name, p) = self.isr_change_refusal(broker, broker_epoch, c)?;
        let isr: Vec<i32> = p
            .replicas
            .iter()
            .copied()
            .filter(|r| c.isr.contains(r))
            .collect();
        if isr == p.isr {
            return Ok(());
        }
        let mut next = p.clone();
        next.isr = isr;
        // An expansion may complete a reassignment (and hand a removed leader's place
        // over); otherwise the leader stays, and only the partition epoch moves.
        let live: Vec<i32> = self.live_brokers().map(|b| b.id).collect();
        let unclean = self.unclean_leader_election_of(name);
        settle(&mut next, &live, unclean);
        let name = name.clone();
        if let Some(p) = self.partition_mut(&name, c.partition) {
            change_partition(p, next);
            debug_assert!(
                p.leader_epoch > c.leader_epoch
                    || (p.leader == broker && p.leader_epoch == c.leader_epoch)
            );
        }
        Ok(())
    }

    /// Why this image refuses one change of an `AlterPartition`, Kafka's checks in
    /// order: the proposer is an active registration of that epoch, the partition
    /// exists, the proposer leads it in the epochs the change was computed from, the ISR
    /// is well formed and keeps the leader, and every broker it adds is active. A pure
    /// question of the image: the active controller asks it before writing a proposal
    /// (`node_state::write_local`), so a change it would refuse costs no log entry.
    /// Passed, it gives the partition's topic name and its current state.
    pub fn isr_change_refusal(
        &self,
        broker: i32,
        broker_epoch: u64,
        c: &IsrChange,
    ) -> Result<(&String, &PartitionImage), CommandError> {
        if !self
            .brokers
            .get(&broker)
            .is_some_and(|b| b.epoch == broker_epoch && b.is_active())
        {
            return Err(CommandError::StaleBrokerEpoch(broker));
        }
        let name = self
            .topic_ids
            .get(&c.topic_id)
            .ok_or(CommandError::UnknownTopicId)?;
        let p = self
            .topics
            .get(name)
            .and_then(|t| t.partition(c.partition))
            .ok_or(CommandError::UnknownTopicOrPartition)?;
        if p.leader != broker {
            return Err(CommandError::NotLeaderOrFollower);
        }
        if p.leader_epoch != c.leader_epoch {
            return Err(CommandError::FencedLeaderEpoch);
        }
        if p.partition_epoch != c.partition_epoch {
            return Err(CommandError::InvalidUpdateVersion);
        }
        check_isr(p, &c.isr)?;
        if let Some(r) = c
            .isr
            .iter()
            .find(|r| !p.isr.contains(r) && !self.is_live(**r))
        {
            return Err(CommandError::IneligibleReplica(*r));
        }
        Ok((name, p))
    }

    /// One item of an `AlterPartitionReassignments` (KIP-455, Kafka's checks): `target`
    /// moves the partition to those replicas, `None` cancels the reassignment in
    /// progress. A new target replaces one in progress; the replicas it adds join as
    /// followers, and the reassignment completes once the whole target is in the ISR
    /// (at once when it already is). A cancel restores the original replicas and drops
    /// the added ones from the ISR; it is refused when that would leave no ISR member.
    fn reassign(&mut self, item: &ReassignmentItem) -> Result<(), CommandError> {
        let live: Vec<i32> = self.live_brokers().map(|b| b.id).collect();
        let unclean = self.unclean_leader_election_of(&item.topic);
        let p = self
            .topics
            .get(&item.topic)
            .and_then(|t| t.partition(item.partition))
            .ok_or(CommandError::UnknownTopicOrPartition)?;
        let mut next = p.clone();
        match &item.target {
            None if !p.is_reassigning() => return Err(CommandError::NoReassignmentInProgress),
            None => revert_reassignment(&mut next, &live)?,
            Some(target) => {
                check_target(target, |r| self.brokers.contains_key(&r))?;
                let original = p.original();
                if item.keep_replication_factor && target.len() != original.len() {
                    return Err(CommandError::InvalidReplicationFactor(format!(
                        "the target replicas {target:?} change the replication factor {}",
                        original.len()
                    )));
                }
                if p.is_reassigning() && *target == original {
                    revert_reassignment(&mut next, &live)?;
                } else {
                    let removing = without(&original, target);
                    next.adding = without(target, &original);
                    next.replicas = target.iter().chain(&removing).copied().collect();
                    next.removing = removing;
                    // The ISR in the new assignment order. A new target replacing one
                    // in progress may drop added replicas that joined the ISR: refused
                    // if they were all it had (see `keeps_isr`).
                    next.isr = next
                        .replicas
                        .iter()
                        .copied()
                        .filter(|r| p.isr.contains(r))
                        .collect();
                    if !keeps_isr(&p.isr, &next.isr, &live) {
                        return Err(CommandError::InvalidReplicaAssignment(format!(
                            "the target replicas {target:?} would leave no live in-sync replica of the ISR {:?}",
                            p.isr
                        )));
                    }
                }
            }
        }
        settle(&mut next, &live, unclean);
        let partition = self
            .partition_mut(&item.topic, item.partition)
            .ok_or(CommandError::UnknownTopicOrPartition)?;
        change_partition(partition, next);
        Ok(())
    }

    /// One partition of an `ElectLeaders` (Kafka's checks): preferred moves leadership to
    /// the first replica of the assignment when it is a live ISR member; unclean leads a
    /// partition that has no leader from its ISR if a member is live, else from its live
    /// replicas with an ISR of just the new leader. A partition that already has the
    /// leader asked for is ELECTION_NOT_NEEDED.
    fn elect_leader(
        &mut self,
        election: Election,
        topic: &str,
        partition: i32,
    ) -> Result<(), CommandError> {
        let live: Vec<i32> = self.live_brokers().map(|b| b.id).collect();
        let p = self
            .partition_mut(topic, partition)
            .ok_or(CommandError::UnknownTopicOrPartition)?;
        let mut next = p.clone();
        match election {
            Election::Preferred => {
                let preferred = p.replicas.first().copied().unwrap_or(NO_LEADER);
                if p.leader == preferred {
                    return Err(CommandError::ElectionNotNeeded);
                }
                if !p.isr.contains(&preferred) || !live.contains(&preferred) {
                    return Err(CommandError::PreferredLeaderNotAvailable(preferred));
                }
                next.leader = preferred;
            }
            Election::Unclean => {
                if p.has_leader() {
                    return Err(CommandError::ElectionNotNeeded);
                }
                elect(&mut next, &live, true);
                if !next.has_leader() {
                    return Err(CommandError::EligibleLeadersNotAvailable);
                }
            }
        }
        settle(&mut next, &live, false);
        change_partition(p, next);
        Ok(())
    }

    /// The partition `partition` of topic `name`, to change.
    fn partition_mut(&mut self, name: &str, partition: i32) -> Option<&mut PartitionImage> {
        let i = usize::try_from(partition).ok()?;
        self.topics.get_mut(name)?.partitions.get_mut(i)
    }

    /// Whether topic `name` may elect uncleanly (off for a topic not found).
    fn unclean_leader_election_of(&self, name: &str) -> bool {
        self.topics
            .get(name)
            .is_some_and(|t| unclean_leader_election(&t.configs, self.broker_configs.get("")))
    }

    /// Files a new topic under its name and its id (the one place both maps grow).
    fn add_topic(&mut self, topic: TopicImage) {
        debug_assert!(
            !self.topics.contains_key(&topic.name) && !self.topic_ids.contains_key(&topic.id)
        );
        self.topic_ids.insert(topic.id, topic.name.clone());
        self.topics.insert(topic.name.clone(), topic);
    }

    /// The brokers new replicas may go to: live and not being decommissioned.
    fn candidates(&self) -> Vec<Candidate> {
        let draining = self.draining_brokers();
        self.live_brokers()
            .filter(|b| !draining.contains(&b.id))
            .map(|b| Candidate {
                id: b.id,
                rack: b.rack.clone(),
            })
            .collect()
    }

    /// `count` new partitions from `first`: the explicit replica lists checked as
    /// Kafka's `validateManualPartitionAssignment` checks them, or placed over the live
    /// brokers.
    fn new_partitions(
        &self,
        explicit: &Option<Vec<Vec<i32>>>,
        first: i32,
        count: i32,
        replication_factor: i32,
        seed: u64,
    ) -> Result<Vec<PartitionImage>, CommandError> {
        if let Some(lists) = explicit {
            if i32::try_from(lists.len()).ok() != Some(count) {
                return Err(CommandError::InvalidReplicaAssignment(format!(
                    "Attempted to add {count} additional partition(s), but only {} assignment(s) were specified.",
                    lists.len()
                )));
            }
            let mut expected = usize::try_from(replication_factor)
                .ok()
                .filter(|rf| *rf > 0);
            let mut out = Vec::with_capacity(lists.len());
            for (i, replicas) in lists.iter().enumerate() {
                let partition = first.saturating_add(i32::try_from(i).unwrap_or(i32::MAX));
                out.push(self.manual_partition(replicas, expected, partition)?);
                expected.get_or_insert(replicas.len());
            }
            return Ok(out);
        }
        let lists = placement::assign(&self.candidates(), first, count, replication_factor, seed)
            .map_err(|e| CommandError::InvalidReplicationFactor(e.to_string()))?;
        Ok(lists.into_iter().map(new_partition).collect())
    }

    /// One partition of a manual assignment, Kafka's checks in order: a replica list that
    /// is not empty; each broker (in id order) registered and named once; as many
    /// replicas as `expected` (the topic's replication factor, or the first list's
    /// length); and at least one active replica. A fenced replica is allowed and left out
    /// of the ISR until its leader proposes it, as in Kafka; the leader is the first
    /// active one.
    fn manual_partition(
        &self,
        replicas: &[i32],
        expected: Option<usize>,
        partition: i32,
    ) -> Result<PartitionImage, CommandError> {
        let refuse = |m: String| Err(CommandError::InvalidReplicaAssignment(m));
        if replicas.is_empty() {
            return refuse(
                "The manual partition assignment includes an empty replica list.".into(),
            );
        }
        let mut sorted = replicas.to_vec();
        sorted.sort_unstable();
        for (i, b) in sorted.iter().enumerate() {
            if !self.brokers.contains_key(b) {
                return refuse(format!(
                    "The manual partition assignment includes broker {b}, but no such broker is registered."
                ));
            }
            if i > 0 && sorted[i - 1] == *b {
                return refuse(format!(
                    "The manual partition assignment includes the broker {b} more than once."
                ));
            }
        }
        if let Some(rf) = expected.filter(|rf| *rf != replicas.len()) {
            return refuse(format!(
                "The manual partition assignment includes a partition with {} replica(s), but this is not consistent with previous partitions, which have {rf} replica(s).",
                replicas.len()
            ));
        }
        let isr: Vec<i32> = replicas
            .iter()
            .copied()
            .filter(|b| self.is_live(*b))
            .collect();
        let Some(&leader) = isr.first() else {
            return refuse(format!(
                "All brokers specified in the manual partition assignment for partition {partition} are fenced or in controlled shutdown."
            ));
        };
        Ok(PartitionImage {
            leader,
            isr,
            ..new_partition(replicas.to_vec())
        })
    }

    fn create_topic(&mut self, t: &NewTopic) -> Result<(), CommandError> {
        validate_topic_name(&t.name).map_err(|e| CommandError::InvalidTopicName(e.to_string()))?;
        if self.topics.contains_key(&t.name) {
            return Err(CommandError::TopicAlreadyExists);
        }
        if t.id.is_nil() || self.topic_ids.contains_key(&t.id) {
            return Err(CommandError::Invalid(format!("topic id {} is taken", t.id)));
        }
        if t.partitions < 1 || t.partitions > PARTITIONS_PER_TOPIC_MAX {
            return Err(CommandError::InvalidPartitions(format!(
                "partition count must be between 1 and {PARTITIONS_PER_TOPIC_MAX}, got {}",
                t.partitions
            )));
        }
        if t.assignments.is_none() {
            check_replication_factor(t.replication_factor)?;
        }
        let partitions = self.new_partitions(
            &t.assignments,
            0,
            t.partitions,
            t.replication_factor,
            seed_of(t.id),
        )?;
        self.add_topic(TopicImage {
            name: t.name.clone(),
            id: t.id,
            configs: t.configs.clone(),
            partitions,
            balancer_moves: BTreeMap::new(),
        });
        Ok(())
    }

    fn create_partitions(&mut self, np: &NewPartitions) -> Result<(), CommandError> {
        let t = self
            .topics
            .get(&np.topic)
            .ok_or(CommandError::UnknownTopic)?;
        let current = t.partition_count();
        if np.count == current {
            return Err(CommandError::InvalidPartitions(format!(
                "Topic already has {current} partition(s)."
            )));
        }
        if np.count < current {
            return Err(CommandError::InvalidPartitions(format!(
                "The topic {} currently has {current} partition(s); {} would not be an increase.",
                np.topic, np.count
            )));
        }
        if np.count > PARTITIONS_PER_TOPIC_MAX {
            return Err(CommandError::InvalidPartitions(format!(
                "at most {PARTITIONS_PER_TOPIC_MAX} partitions per topic"
            )));
        }
        let rf = t
            .partitions
            .first()
            // The target's size: a partition being moved also lists the replicas it loses.
            .map(|p| i32::try_from(p.target().len()).unwrap_or(i32::MAX))
            .unwrap_or(1);
        let added = self.new_partitions(
            &np.assignments,
            current,
            np.count - current,
            rf,
            seed_of(t.id),
        )?;
        if let Some(t) = self.topics.get_mut(&np.topic) {
            t.partitions.extend(added);
        }
        Ok(())
    }

    fn set_broker_configs(&mut self, c: &ConfigChange) -> Result<(), CommandError> {
        if !(c.name.is_empty() || c.name.parse::<i32>().is_ok_and(|id| id >= 0)) {
            return Err(CommandError::Invalid(format!(
                "broker config resource {:?} is neither \"\" nor a broker id",
                c.name
            )));
        }
        let current = self
            .broker_configs
            .get(&c.name)
            .cloned()
            .unwrap_or_default();
        if current != c.from {
            return Err(CommandError::Conflict);
        }
        if c.to.is_empty() {
            self.broker_configs.remove(&c.name);
        } else {
            self.broker_configs.insert(c.name.clone(), c.to.clone());
        }
        if c.name.is_empty() {
            // The cluster-wide layer is every topic's default for unclean election.
            self.reelect(None, |_, p| !p.has_leader());
        }
        Ok(())
    }

    fn alter_client_quotas(
        &mut self,
        alterations: &[crate::client_quotas::QuotaAlteration],
    ) -> Result<(), CommandError> {
        if alterations.iter().any(|a| a.entity.is_empty()) {
            return Err(CommandError::Invalid(
                "a quota entity names no component".into(),
            ));
        }
        let mut next = self.client_quotas.clone();
        for a in alterations {
            next.apply(a);
        }
        // Every snapshot carries them all: bounded.
        if next.entries.len() > crate::client_quotas::QUOTA_ENTITIES_MAX {
            return Err(CommandError::PolicyViolation(format!(
                "more than {} quota entities",
                crate::client_quotas::QUOTA_ENTITIES_MAX
            )));
        }
        self.client_quotas = next;
        Ok(())
    }

    fn import_single_node(&mut self, m: &SingleNodeMetadata) -> Result<(), CommandError> {
        if !self.topics.is_empty() {
            return Err(CommandError::Invalid(
                "the cluster has topics already; a single node's metadata is imported only into a new cluster".into(),
            ));
        }
        if !self.is_live(m.broker) {
            return Err(CommandError::Invalid(format!(
                "broker {} is not live",
                m.broker
            )));
        }
        let mut names = std::collections::BTreeSet::new();
        let mut ids = std::collections::BTreeSet::new();
        for t in &m.topics {
            validate_topic_name(&t.name)
                .map_err(|e| CommandError::InvalidTopicName(e.to_string()))?;
            if !(1..=PARTITIONS_PER_TOPIC_MAX).contains(&t.partitions) || t.leader_epoch < 0 {
                return Err(CommandError::Invalid(format!(
                    "topic {}: {} partitions, epoch {}",
                    t.name, t.partitions, t.leader_epoch
                )));
            }
            if t.id.is_nil() || !names.insert(t.name.as_str()) || !ids.insert(t.id) {
                return Err(CommandError::Invalid(format!(
                    "topic {} or its id named twice",
                    t.name
                )));
            }
        }
        for t in &m.topics {
            let epoch = t.leader_epoch.saturating_add(1);
            let partitions = (0..t.partitions)
                .map(|_| PartitionImage {
                    replicas: vec![m.broker],
                    isr: vec![m.broker],
                    leader: m.broker,
                    leader_epoch: epoch,
                    partition_epoch: 0,
                    adding: Vec::new(),
                    removing: Vec::new(),
                })
                .collect();
            self.add_topic(TopicImage {
                name: t.name.clone(),
                id: t.id,
                configs: t.configs.clone(),
                partitions,
                balancer_moves: BTreeMap::new(),
            });
        }
        self.next_producer_id = self.next_producer_id.max(m.next_producer_id);
        self.client_quotas = m.client_quotas.clone();
        self.broker_configs = m.broker_configs.clone();
        Ok(())
    }

    fn allocate_producer_ids(&mut self, broker: i32, epoch: u64) -> Result<i64, CommandError> {
        if self.brokers.get(&broker).map(|b| b.epoch) != Some(epoch) {
            return Err(CommandError::StaleBrokerEpoch(broker));
        }
        let start = self.next_producer_id;
        self.next_producer_id = start
            .checked_add(PRODUCER_ID_BLOCK)
            .ok_or_else(|| CommandError::PolicyViolation("producer ids exhausted".into()))?;
        Ok(start)
    }
}

/// Replication factors this broker accepts (Kafka's "-1, the default" is resolved by the
/// proposer). The upper bound is the live brokers: placement and the explicit
/// assignments' checks refuse more replicas than there are.
fn check_replication_factor(rf: i32) -> Result<(), CommandError> {
    if rf < 1 {
        return Err(CommandError::InvalidReplicationFactor(format!(
            "replication factor must be at least 1, got {rf}"
        )));
    }
    Ok(())
}

/// The placement seed of a topic: its id, so a topic's partitions (and those added
/// later) are placed the same way everywhere.
fn seed_of(id: uuid::Uuid) -> u64 {
    let (hi, lo) = id.as_u64_pair();
    hi ^ lo
}

fn new_partition(replicas: Vec<i32>) -> PartitionImage {
    debug_assert!(!replicas.is_empty());
    PartitionImage {
        leader: replicas.first().copied().unwrap_or(NO_LEADER),
        isr: replicas.clone(),
        replicas,
        leader_epoch: 0,
        partition_epoch: 0,
        adding: Vec::new(),
        removing: Vec::new(),
    }
}

/// Elects `p`'s leader among the `live` brokers (the leadership rules of the module doc):
/// the current leader while it is a live ISR member, else the first live ISR member in
/// assignment order, else — only when `unclean` — the first live replica, which then is
/// the whole ISR, else nobody.
fn elect(p: &mut PartitionImage, live: &[i32], unclean: bool) {
    let eligible = |r: &i32| p.isr.contains(r) && live.contains(r);
    if eligible(&p.leader) {
        return;
    }
    p.leader = p
        .replicas
        .iter()
        .copied()
        .find(eligible)
        .unwrap_or(NO_LEADER);
    if p.leader == NO_LEADER && unclean {
        if let Some(r) = p.replicas.iter().copied().find(|r| live.contains(r)) {
            p.leader = r;
            p.isr = vec![r];
        }
    }
    debug_assert!(!p.has_leader() || (p.isr.contains(&p.leader) && live.contains(&p.leader)));
}

/// Completes `p`'s reassignment, then elects (every change of a partition ends here, so
/// a reassignment is never left in progress once it could complete).
fn settle(p: &mut PartitionImage, live: &[i32], unclean: bool) {
    complete_reassignment(p, live);
    elect(p, live, unclean);
    // An unclean election makes the ISR its new leader alone, which may be the whole
    // target; the new leader stays (it is an ISR member).
    complete_reassignment(p, live);
    elect(p, live, false);
}

/// Whether an ISR going from `before` to `after` keeps a member: never none, and a live
/// one if it had one (else the partition goes offline, and the replicas dropped from the
/// assignment delete the only copies that were in sync).
fn keeps_isr(before: &[i32], after: &[i32], live: &[i32]) -> bool {
    let has_live = |isr: &[i32]| isr.iter().any(|r| live.contains(r));
    !after.is_empty() && (has_live(after) || !has_live(before))
}

/// Completes `p`'s reassignment once its whole target is in the ISR (Kafka's
/// `completeReassignmentIfNeeded`): the replicas and the ISR become the target; a leader
/// being removed gives way to the first live ISR member of the target (the election
/// after this). Left in progress while the leader is being removed and no target replica
/// is live to take over.
fn complete_reassignment(p: &mut PartitionImage, live: &[i32]) {
    if !p.is_reassigning() {
        return;
    }
    let target = p.target();
    if !target.iter().all(|r| p.isr.contains(r)) {
        return;
    }
    if p.has_leader() && !target.contains(&p.leader) && !target.iter().any(|r| live.contains(r)) {
        return;
    }
    p.isr = target.clone();
    p.replicas = target;
    p.adding.clear();
    p.removing.clear();
}

/// Cancels `p`'s reassignment: the original replicas, the ISR without the added ones.
/// Refused when that would leave no ISR member, or no live one where there was one (see
/// `keeps_isr`).
fn revert_reassignment(p: &mut PartitionImage, live: &[i32]) -> Result<(), CommandError> {
    debug_assert!(p.is_reassigning());
    let isr = without(&p.isr, &p.adding);
    if !keeps_isr(&p.isr, &isr, live) {
        return Err(CommandError::InvalidReplicaAssignment(format!(
            "cancelling the reassignment would leave no live in-sync replica of {:?}",
            p.original()
        )));
    }
    p.replicas = p.original();
    p.isr = isr;
    p.adding.clear();
    p.removing.clear();
    Ok(())
}

/// Whether a list of brokers (replicas, a target, an ISR) names some, and none twice.
fn names_each_once(brokers: &[i32]) -> bool {
    let mut sorted = brokers.to_vec();
    sorted.sort_unstable();
    sorted.dedup();
    !brokers.is_empty() && sorted.len() == brokers.len()
}

/// A reassignment's target: some replicas, none twice, each a registered broker.
fn check_target(target: &[i32], registered: impl Fn(i32) -> bool) -> Result<(), CommandError> {
    if !names_each_once(target) {
        return Err(CommandError::InvalidReplicaAssignment(format!(
            "the target replicas {target:?} are empty or name a broker twice"
        )));
    }
    if let Some(r) = target.iter().find(|r| !registered(**r)) {
        return Err(CommandError::InvalidReplicaAssignment(format!(
            "broker {r} of the target replicas {target:?} is not registered"
        )));
    }
    Ok(())
}

/// The checks of a proposed ISR that need nothing but the partition: non-empty, nobody
/// twice, replicas only, the leader kept (an ISR without its leader would leave the
/// partition led from outside its ISR).
fn check_isr(p: &PartitionImage, isr: &[i32]) -> Result<(), CommandError> {
    if !names_each_once(isr) {
        return Err(CommandError::Invalid(format!(
            "ISR {isr:?} is empty or names a broker twice"
        )));
    }
    if let Some(r) = isr.iter().find(|r| !p.replicas.contains(r)) {
        return Err(CommandError::Invalid(format!(
            "ISR member {r} is not a replica of the partition ({:?})",
            p.replicas
        )));
    }
    if !isr.contains(&p.leader) {
        return Err(CommandError::Invalid(format!(
            "ISR {isr:?} leaves out the leader {}",
            p.leader
        )));
    }
    Ok(())
}

/// Replaces `p` by `next`, bumping the epochs if anything changed.
fn change_partition(p: &mut PartitionImage, mut next: PartitionImage) {
    if next == *p {
        return;
    }
    if next.leader != p.leader {
        next.leader_epoch = p.leader_epoch.saturating_add(1);
    }
    next.partition_epoch = p.partition_epoch.saturating_add(1);
    debug_assert!(next.leader_epoch >= p.leader_epoch && next.partition_epoch > p.partition_epoch);
    *p = next;
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::image::Endpoint;
    use std::collections::BTreeMap;
    use uuid::Uuid;

    fn register(img: &mut MetadataImage, id: i32, rack: Option<&str>) -> u64 {
        let index = img.applied + 1;
        let out = img.apply(
            index,
            &Command::RegisterBroker {
                id,
                incarnation: Uuid::new_v4(),
                endpoint: Endpoint {
                    host: "127.0.0.1".into(),
                    port: 9000 + id as u16,
                },
                controller_addr: format!("127.0.0.1:{}", 9100 + id),
                rack: rack.map(str::to_string),
            },
        );
        assert_eq!(out, Outcome::Done(Ok(())));
        let next = img.applied + 1;
        assert_eq!(
            img.apply(next, &Command::UnfenceBroker { id, epoch: index }),
            Outcome::Done(Ok(()))
        );
        index
    }

    /// Applies `cmd` as the next entry; checks the invariants even where debug
    /// assertions are off (release test builds).
    fn next(img: &mut MetadataImage, cmd: Command) -> Outcome {
        let i = img.applied + 1;
        let out = img.apply(i, &cmd);
        assert_eq!(img.check_invariants(), Ok(()), "after {cmd:?}");
        out
    }

    fn topic(name: &str, partitions: i32) -> NewTopic {
        NewTopic {
            name: name.into(),
            id: Uuid::new_v4(),
            partitions,
            replication_factor: 1,
            assignments: None,
            configs: BTreeMap::new(),
        }
    }

    fn cluster(n: i32) -> (MetadataImage, Vec<u64>) {
        let mut img = MetadataImage::default();
        let epochs = (1..=n).map(|id| register(&mut img, id, None)).collect();
        (img, epochs)
    }

    #[test]
    fn topics_spread_over_live_brokers() {
        let (mut img, _) = cluster(3);
        let out = next(
            &mut img,
            Command::CreateTopics {
                topics: vec![topic("t", 30), topic("t", 1)],
            },
        );
        assert_eq!(
            out,
            Outcome::Items(vec![Ok(()), Err(CommandError::TopicAlreadyExists)])
        );
        let t = img.topic("t").unwrap();
        let mut per = BTreeMap::new();
        for p in &t.partitions {
            assert_eq!(p.replicas, p.isr);
            assert_eq!(Some(&p.leader), p.replicas.first());
            *per.entry(p.leader).or_insert(0) += 1;
        }
        assert_eq!(per.values().copied().collect::<Vec<_>>(), vec![10, 10, 10]);
        assert_eq!(img.topic_by_id(t.id).map(|t| t.name.as_str()), Some("t"));
    }

    /// A topic with explicit replica lists (its replication factor is theirs).
    fn assigned(name: &str, lists: Vec<Vec<i32>>) -> NewTopic {
        let mut t = topic(name, lists.len() as i32);
        t.replication_factor = lists[0].len() as i32;
        t.assignments = Some(lists);
        t
    }

    fn create(img: &mut MetadataImage, t: NewTopic) -> Result<(), CommandError> {
        match next(img, Command::CreateTopics { topics: vec![t] }) {
            Outcome::Items(mut v) if v.len() == 1 => v.remove(0),
            other => panic!("{other:?}"),
        }
    }

    fn part(img: &MetadataImage, name: &str, i: usize) -> PartitionImage {
        img.topic(name).unwrap().partitions[i].clone()
    }

    fn fence(img: &mut MetadataImage, id: i32, fenced: bool) -> Result<(), CommandError> {
        let epoch = img.broker(id).unwrap().epoch;
        let cmd = if fenced {
            Command::FenceBroker { id, epoch }
        } else {
            Command::UnfenceBroker { id, epoch }
        };
        match next(img, cmd) {
            Outcome::Done(r) => r,
            other => panic!("{other:?}"),
        }
    }

    /// A change of partition `i` of `name` to `isr`, computed from its current state.
    fn isr_change(img: &MetadataImage, name: &str, i: i32, isr: &[i32]) -> IsrChange {
        let t = img.topic(name).unwrap();
        let p = t.partition(i).unwrap();
        IsrChange {
            topic_id: t.id,
            partition: i,
            leader_epoch: p.leader_epoch,
            partition_epoch: p.partition_epoch,
            isr: isr.to_vec(),
        }
    }

    /// `broker` proposes partition `i` of `name` to have `isr`, from its current state.
    fn set_isr(
        img: &mut MetadataImage,
        broker: i32,
        name: &str,
        i: i32,
        isr: &[i32],
    ) -> Result<(), CommandError> {
        let change = isr_change(img, name, i, isr);
        let mut v = alter(img, broker, vec![change]);
        assert_eq!(v.len(), 1);
        v.remove(0)
    }

    /// `broker`, in its current epoch, proposes `changes`.
    fn alter(
        img: &mut MetadataImage,
        broker: i32,
        changes: Vec<IsrChange>,
    ) -> Vec<Result<(), CommandError>> {
        let broker_epoch = img.broker(broker).unwrap().epoch;
        match next(
            img,
            Command::AlterPartition {
                broker,
                broker_epoch,
                changes,
            },
        ) {
            Outcome::Items(v) => v,
            other => panic!("{other:?}"),
        }
    }

    fn shutdown(img: &mut MetadataImage, id: i32) -> Outcome {
        let epoch = img.broker(id).unwrap().epoch;
        next(img, Command::ControlledShutdown { id, epoch })
    }

    fn unclean(on: &str) -> BTreeMap<String, String> {
        BTreeMap::from([(UNCLEAN_LEADER_ELECTION_ENABLE.to_string(), on.to_string())])
    }

    #[test]
    fn replication_factor_checked() {
        let (mut img, _) = cluster(2);
        let mut t = topic("rf", 1);
        t.replication_factor = 3;
        assert!(matches!(
            create(&mut img, t),
            Err(CommandError::InvalidReplicationFactor(_))
        ));
        let mut t = topic("rf", 1);
        t.replication_factor = 0;
        assert!(matches!(
            create(&mut img, t),
            Err(CommandError::InvalidReplicationFactor(_))
        ));
        let mut t = topic("rf", 1);
        t.replication_factor = 2;
        assert_eq!(create(&mut img, t), Ok(()));
        // Only live brokers count: with one fenced, two replicas no longer fit.
        fence(&mut img, 2, true).unwrap();
        let mut t = topic("rf2", 1);
        t.replication_factor = 2;
        assert!(matches!(
            create(&mut img, t),
            Err(CommandError::InvalidReplicationFactor(_))
        ));
        let mut img = MetadataImage::default();
        assert!(matches!(
            next(&mut img, Command::CreateTopics { topics: vec![topic("none", 1)] }),
            Outcome::Items(v) if matches!(v[0], Err(CommandError::InvalidReplicationFactor(_)))
        ));
        assert!(img.topics.is_empty());
    }

    #[test]
    fn fencing_moves_leaders_and_unfencing_restores_them() {
        let (mut img, epochs) = cluster(3);
        next(
            &mut img,
            Command::CreateTopics {
                topics: vec![topic("t", 6)],
            },
        );
        let led_by_2: Vec<usize> = img
            .topic("t")
            .unwrap()
            .partitions
            .iter()
            .enumerate()
            .filter(|(_, p)| p.leader == 2)
            .map(|(i, _)| i)
            .collect();
        assert_eq!(led_by_2.len(), 2);
        assert_eq!(
            next(
                &mut img,
                Command::FenceBroker {
                    id: 2,
                    epoch: epochs[1]
                }
            ),
            Outcome::Done(Ok(()))
        );
        for i in &led_by_2 {
            let p = &img.topic("t").unwrap().partitions[*i];
            // One replica: nobody else can lead; the ISR keeps its last member.
            assert_eq!(
                (p.leader, p.leader_epoch, p.partition_epoch),
                (NO_LEADER, 1, 1)
            );
            assert_eq!(p.isr, vec![2]);
        }
        // Fencing twice changes nothing; a stale epoch is refused.
        next(
            &mut img,
            Command::FenceBroker {
                id: 2,
                epoch: epochs[1],
            },
        );
        assert_eq!(
            img.topic("t").unwrap().partitions[led_by_2[0]].leader_epoch,
            1
        );
        assert_eq!(
            next(
                &mut img,
                Command::UnfenceBroker {
                    id: 2,
                    epoch: epochs[1] + 100
                }
            ),
            Outcome::Done(Err(CommandError::StaleBrokerEpoch(2)))
        );
        next(
            &mut img,
            Command::UnfenceBroker {
                id: 2,
                epoch: epochs[1],
            },
        );
        for i in &led_by_2 {
            let p = &img.topic("t").unwrap().partitions[*i];
            assert_eq!((p.leader, p.leader_epoch, p.partition_epoch), (2, 2, 2));
        }
        // New topics avoid a fenced broker.
        next(
            &mut img,
            Command::FenceBroker {
                id: 2,
                epoch: epochs[1],
            },
        );
        next(
            &mut img,
            Command::CreateTopics {
                topics: vec![topic("u", 10)],
            },
        );
        assert!(img
            .topic("u")
            .unwrap()
            .partitions
            .iter()
            .all(|p| p.leader != 2));
    }

    #[test]
    fn a_restart_is_a_new_registration() {
        let (mut img, epochs) = cluster(2);
        next(
            &mut img,
            Command::CreateTopics {
                topics: vec![topic("t", 2)],
            },
        );
        let index = img.applied + 1;
        let reg = Command::RegisterBroker {
            id: 1,
            incarnation: Uuid::new_v4(),
            endpoint: Endpoint {
                host: "h".into(),
                port: 1,
            },
            controller_addr: "h:2".into(),
            rack: None,
        };
        img.apply(index, &reg);
        let b = img.broker(1).unwrap();
        assert!(b.fenced && b.epoch == index && b.epoch != epochs[0]);
        assert!(img
            .topic("t")
            .unwrap()
            .partitions
            .iter()
            .all(|p| p.leader != 1));
        // The same incarnation again (a retry) is no new registration.
        let again = img.applied + 1;
        img.apply(again, &reg);
        assert_eq!(img.broker(1).unwrap().epoch, index);
        assert_eq!(
            next(
                &mut img,
                Command::AllocateProducerIds {
                    broker: 1,
                    epoch: epochs[0]
                }
            ),
            Outcome::ProducerIds(Err(CommandError::StaleBrokerEpoch(1)))
        );
        assert_eq!(
            next(
                &mut img,
                Command::AllocateProducerIds {
                    broker: 1,
                    epoch: index
                }
            ),
            Outcome::ProducerIds(Ok(0))
        );
        assert_eq!(
            next(
                &mut img,
                Command::AllocateProducerIds {
                    broker: 2,
                    epoch: epochs[1]
                }
            ),
            Outcome::ProducerIds(Ok(PRODUCER_ID_BLOCK))
        );
    }

    #[test]
    fn partitions_grow_configs_compare_and_set_topics_delete() {
        let (mut img, _) = cluster(3);
        next(
            &mut img,
            Command::CreateTopics {
                topics: vec![topic("t", 2)],
            },
        );
        let grow = |count| Command::CreatePartitions {
            topics: vec![NewPartitions {
                topic: "t".into(),
                count,
                assignments: None,
            }],
        };
        assert!(
            matches!(next(&mut img, grow(2)), Outcome::Items(v) if matches!(v[0], Err(CommandError::InvalidPartitions(_))))
        );
        assert_eq!(next(&mut img, grow(9)), Outcome::Items(vec![Ok(())]));
        assert_eq!(img.topic("t").unwrap().partition_count(), 9);
        let set = |from: &[(&str, &str)], to: &[(&str, &str)]| Command::SetTopicConfigs {
            changes: vec![ConfigChange {
                name: "t".into(),
                from: from
                    .iter()
                    .map(|(k, v)| (k.to_string(), v.to_string()))
                    .collect(),
                to: to
                    .iter()
                    .map(|(k, v)| (k.to_string(), v.to_string()))
                    .collect(),
            }],
        };
        assert_eq!(
            next(&mut img, set(&[], &[("retention.ms", "1")])),
            Outcome::Items(vec![Ok(())])
        );
        // Computed from what is no longer there: refused, so nothing is lost.
        assert_eq!(
            next(&mut img, set(&[], &[("segment.ms", "5")])),
            Outcome::Items(vec![Err(CommandError::Conflict)])
        );
        assert_eq!(
            img.topic("t")
                .unwrap()
                .configs
                .get("retention.ms")
                .map(String::as_str),
            Some("1")
        );
        assert_eq!(
            next(
                &mut img,
                Command::DeleteTopics {
                    names: vec!["t".into(), "t".into()]
                }
            ),
            Outcome::Items(vec![Ok(()), Err(CommandError::UnknownTopic)])
        );
        assert!(img.topics.is_empty() && img.topic_ids.is_empty());
    }

    #[test]
    fn explicit_assignments_are_checked() {
        let (mut img, _) = cluster(2);
        let mut t = topic("a", 2);
        t.assignments = Some(vec![vec![2], vec![1]]);
        assert_eq!(
            next(&mut img, Command::CreateTopics { topics: vec![t] }),
            Outcome::Items(vec![Ok(())])
        );
        assert_eq!(img.topic("a").unwrap().partitions[0].leader, 2);
        for bad in [vec![vec![7], vec![1]], vec![vec![1]], vec![vec![], vec![1]]] {
            let mut t = topic("b", 2);
            t.assignments = Some(bad);
            assert!(matches!(
                next(&mut img, Command::CreateTopics { topics: vec![t] }),
                Outcome::Items(v) if matches!(v[0], Err(CommandError::InvalidReplicaAssignment(_)))
            ));
        }
    }

    #[test]
    fn a_single_nodes_metadata_is_imported_once() {
        let (mut img, _) = cluster(1);
        let import = Command::ImportSingleNode(SingleNodeMetadata {
            broker: 1,
            topics: vec![SingleNodeTopic {
                name: "old".into(),
                id: Uuid::from_u128(5),
                partitions: 3,
                configs: BTreeMap::from([("retention.ms".into(), "9".into())]),
                leader_epoch: 4,
            }],
            next_producer_id: 3000,
            client_quotas: Default::default(),
            broker_configs: BTreeMap::new(),
        });
        assert_eq!(next(&mut img, import.clone()), Outcome::Done(Ok(())));
        let t = img.topic("old").unwrap();
        assert_eq!(t.partition_count(), 3);
        assert!(t
            .partitions
            .iter()
            .all(|p| p.leader == 1 && p.leader_epoch == 5));
        assert_eq!(img.next_producer_id, 3000);
        assert!(matches!(
            next(&mut img, import),
            Outcome::Done(Err(CommandError::Invalid(_)))
        ));
    }

    #[test]
    fn replicated_partitions_start_with_every_replica_in_sync() {
        let (mut img, _) = cluster(3);
        let mut t = topic("r", 12);
        t.replication_factor = 3;
        assert_eq!(create(&mut img, t), Ok(()));
        let mut leaders = BTreeMap::new();
        for p in &img.topic("r").unwrap().partitions {
            let mut distinct = p.replicas.clone();
            distinct.sort_unstable();
            assert_eq!(distinct, vec![1, 2, 3]);
            assert_eq!(p.isr, p.replicas);
            assert_eq!(Some(&p.leader), p.replicas.first());
            assert_eq!((p.leader_epoch, p.partition_epoch), (0, 0));
            *leaders.entry(p.leader).or_insert(0) += 1;
        }
        assert_eq!(leaders.values().copied().collect::<Vec<_>>(), vec![4, 4, 4]);
        // Explicit lists of several replicas, and more partitions like them.
        assert_eq!(
            create(&mut img, assigned("a", vec![vec![3, 1], vec![2, 3]])),
            Ok(())
        );
        let p = part(&img, "a", 0);
        assert_eq!((p.leader, p.isr.clone()), (3, vec![3, 1]));
        let grow = |assignments| Command::CreatePartitions {
            topics: vec![NewPartitions {
                topic: "a".into(),
                count: 3,
                assignments: Some(assignments),
            }],
        };
        assert!(matches!(
            next(&mut img, grow(vec![vec![1]])),
            Outcome::Items(v) if matches!(v[0], Err(CommandError::InvalidReplicaAssignment(_)))
        ));
        assert_eq!(
            next(&mut img, grow(vec![vec![1, 2]])),
            Outcome::Items(vec![Ok(())])
        );
        let p = part(&img, "a", 2);
        assert_eq!((p.leader, p.isr.clone()), (1, vec![1, 2]));
    }

    /// Kafka's `validateManualPartitionAssignment`: the first failing check answers, in
    /// its order; a fenced replica is allowed outside the ISR, but not every replica.
    #[test]
    fn manual_assignments_are_checked_as_kafka_checks_them() {
        let (mut img, _) = cluster(3);
        let refusal = |img: &mut MetadataImage, lists: Vec<Vec<i32>>| match create(
            img,
            NewTopic {
                replication_factor: -1,
                ..assigned("m", lists)
            },
        ) {
            Err(CommandError::InvalidReplicaAssignment(m)) => m,
            other => panic!("{other:?}"),
        };
        assert_eq!(
            refusal(&mut img, vec![vec![]]),
            "The manual partition assignment includes an empty replica list."
        );
        // Brokers in id order: 9 is unknown before 2 is repeated.
        assert_eq!(
            refusal(&mut img, vec![vec![9, 2, 2]]),
            "The manual partition assignment includes the broker 2 more than once."
        );
        assert_eq!(
            refusal(&mut img, vec![vec![2, 9]]),
            "The manual partition assignment includes broker 9, but no such broker is registered."
        );
        assert_eq!(
            refusal(&mut img, vec![vec![1, 2], vec![3]]),
            "The manual partition assignment includes a partition with 1 replica(s), but this is not consistent with previous partitions, which have 2 replica(s)."
        );
        fence(&mut img, 1, true).unwrap();
        fence(&mut img, 2, true).unwrap();
        assert_eq!(
            refusal(&mut img, vec![vec![3], vec![2]]),
            "All brokers specified in the manual partition assignment for partition 1 are fenced or in controlled shutdown."
        );
        create(&mut img, assigned("m", vec![vec![1, 3, 2]])).unwrap();
        let p = part(&img, "m", 0);
        assert_eq!(
            (p.leader, p.replicas.clone(), p.isr.clone()),
            (3, vec![1, 3, 2], vec![3])
        );
        let grow = |count, assignments| Command::CreatePartitions {
            topics: vec![NewPartitions {
                topic: "m".into(),
                count,
                assignments,
            }],
        };
        let answer = |o: Outcome| match o {
            Outcome::Items(mut v) => v.remove(0),
            other => panic!("{other:?}"),
        };
        assert_eq!(
            answer(next(&mut img, grow(1, None))),
            Err(CommandError::InvalidPartitions(
                "Topic already has 1 partition(s).".into()
            ))
        );
        assert_eq!(
            answer(next(&mut img, grow(3, Some(vec![vec![3, 2, 1]])))),
            Err(CommandError::InvalidReplicaAssignment(
                "Attempted to add 2 additional partition(s), but only 1 assignment(s) were specified.".into()
            ))
        );
        assert!(answer(next(&mut img, grow(2, Some(vec![vec![3, 2]])))).is_err());
        assert_eq!(
            answer(next(&mut img, grow(2, Some(vec![vec![2, 1, 3]])))),
            Ok(())
        );
        let p = part(&img, "m", 1);
        assert_eq!((p.leader, p.isr.clone()), (3, vec![3]));
    }

    /// Moves partition `i` of `name` to `target` (`None`: cancels); its one result.
    fn reassign(
        img: &mut MetadataImage,
        name: &str,
        i: i32,
        target: Option<Vec<i32>>,
    ) -> Result<(), CommandError> {
        let item = ReassignmentItem {
            topic: name.into(),
            partition: i,
            target,
            keep_replication_factor: false,
        };
        match next(
            img,
            Command::AlterPartitionReassignments { items: vec![item] },
        ) {
            Outcome::Items(mut v) if v.len() == 1 => v.remove(0),
            other => panic!("{other:?}"),
        }
    }

    /// (replicas, adding, removing, ISR, leader) of a partition.
    fn moving(p: &PartitionImage) -> (Vec<i32>, Vec<i32>, Vec<i32>, Vec<i32>, i32) {
        (
            p.replicas.clone(),
            p.adding.clone(),
            p.removing.clone(),
            p.isr.clone(),
            p.leader,
        )
    }

    #[test]
    fn a_reassignment_completes_once_the_target_is_in_sync_and_the_removed_leader_hands_over() {
        let (mut img, _) = cluster(3);
        create(&mut img, assigned("t", vec![vec![1, 2]])).unwrap();
        reassign(&mut img, "t", 0, Some(vec![2, 3])).unwrap();
        // Target first, then the replica being removed; the leader stays meanwhile.
        let p = part(&img, "t", 0);
        assert_eq!(moving(&p), (vec![2, 3, 1], vec![3], vec![1], vec![2, 1], 1));
        assert_eq!((p.leader_epoch, p.partition_epoch), (0, 1));
        assert_eq!((p.target(), p.original()), (vec![2, 3], vec![2, 1]));
        // Broker 3 caught up: its leader adds it to the ISR, which completes the move and
        // hands leadership from 1 (removed) to 2 in the same change.
        set_isr(&mut img, 1, "t", 0, &[1, 2, 3]).unwrap();
        let p = part(&img, "t", 0);
        assert_eq!(moving(&p), (vec![2, 3], vec![], vec![], vec![2, 3], 2));
        assert_eq!((p.leader_epoch, p.partition_epoch), (1, 2));
        assert!(!p.is_reassigning());
        // Nothing to cancel now.
        assert_eq!(
            reassign(&mut img, "t", 0, None),
            Err(CommandError::NoReassignmentInProgress)
        );
        // A new order of the same replicas is complete at once; the leader stays.
        reassign(&mut img, "t", 0, Some(vec![3, 2])).unwrap();
        let p = part(&img, "t", 0);
        assert_eq!(moving(&p), (vec![3, 2], vec![], vec![], vec![3, 2], 2));
    }

    #[test]
    fn a_cancelled_reassignment_restores_the_original_replicas() {
        let (mut img, _) = cluster(4);
        create(&mut img, assigned("t", vec![vec![1, 2]])).unwrap();
        reassign(&mut img, "t", 0, Some(vec![3, 4])).unwrap();
        assert_eq!(
            moving(&part(&img, "t", 0)),
            (vec![3, 4, 1, 2], vec![3, 4], vec![1, 2], vec![1, 2], 1)
        );
        // One added replica in sync: not complete while the other is not.
        set_isr(&mut img, 1, "t", 0, &[1, 2, 3]).unwrap();
        assert_eq!(part(&img, "t", 0).isr, vec![3, 1, 2]);
        // A new target replaces the one in progress, measured from the original replicas:
        // [2, 3] is in sync already, so it is complete at once, 1 handing over to 2.
        reassign(&mut img, "t", 0, Some(vec![2, 3])).unwrap();
        assert_eq!(
            moving(&part(&img, "t", 0)),
            (vec![2, 3], vec![], vec![], vec![2, 3], 2)
        );
        // Cancelled instead: back to 1, 2.
        let (mut img, _) = cluster(4);
        create(&mut img, assigned("t", vec![vec![1, 2]])).unwrap();
        reassign(&mut img, "t", 0, Some(vec![3, 4])).unwrap();
        set_isr(&mut img, 1, "t", 0, &[1, 2, 3]).unwrap();
        reassign(&mut img, "t", 0, None).unwrap();
        let p = part(&img, "t", 0);
        assert_eq!(moving(&p), (vec![1, 2], vec![], vec![], vec![1, 2], 1));
        // A target equal to the original replicas cancels too.
        reassign(&mut img, "t", 0, Some(vec![1, 3])).unwrap();
        reassign(&mut img, "t", 0, Some(vec![1, 2])).unwrap();
        assert_eq!(moving(&part(&img, "t", 0)).0, vec![1, 2]);
        assert!(!part(&img, "t", 0).is_reassigning());
    }

    #[test]
    fn reassignments_are_checked() {
        let (mut img, _) = cluster(3);
        create(&mut img, assigned("t", vec![vec![1]])).unwrap();
        for bad in [vec![], vec![2, 2], vec![2, 9]] {
            assert!(
                matches!(
                    reassign(&mut img, "t", 0, Some(bad.clone())),
                    Err(CommandError::InvalidReplicaAssignment(_))
                ),
                "{bad:?}"
            );
        }
        assert_eq!(
            reassign(&mut img, "t", 1, Some(vec![2])),
            Err(CommandError::UnknownTopicOrPartition)
        );
        assert_eq!(
            reassign(&mut img, "nope", 0, Some(vec![2])),
            Err(CommandError::UnknownTopicOrPartition)
        );
        assert_eq!(part(&img, "t", 0).partition_epoch, 0, "nothing changed");

        // Cancelling must leave an ISR member: here only an added replica is in sync.
        reassign(&mut img, "t", 0, Some(vec![2, 3])).unwrap();
        set_isr(&mut img, 1, "t", 0, &[1, 2]).unwrap();
        fence(&mut img, 1, true).unwrap();
        let p = part(&img, "t", 0);
        assert_eq!(moving(&p), (vec![2, 3, 1], vec![2, 3], vec![1], vec![2], 2));
        assert!(matches!(
            reassign(&mut img, "t", 0, None),
            Err(CommandError::InvalidReplicaAssignment(_))
        ));
    }

    #[test]
    fn a_reassignment_may_be_held_to_the_replication_factor() {
        let (mut img, _) = cluster(3);
        create(&mut img, assigned("t", vec![vec![1, 2]])).unwrap();
        let item = |target: Vec<i32>| ReassignmentItem {
            topic: "t".into(),
            partition: 0,
            target: Some(target),
            keep_replication_factor: true,
        };
        let out = next(
            &mut img,
            Command::AlterPartitionReassignments {
                items: vec![item(vec![1, 2, 3]), item(vec![3, 2])],
            },
        );
        assert!(matches!(
            out,
            Outcome::Items(v) if matches!(v[0], Err(CommandError::InvalidReplicationFactor(_)))
                && v[1] == Ok(())
        ));
        assert_eq!(part(&img, "t", 0).target(), vec![3, 2]);
    }

    /// Elects partition `i` of `name`; its one result.
    fn elect_one(
        img: &mut MetadataImage,
        election: Election,
        name: &str,
        i: i32,
    ) -> Result<(), CommandError> {
        let cmd = Command::ElectLeaders {
            election,
            partitions: vec![(name.into(), i)],
        };
        match next(img, cmd) {
            Outcome::Items(mut v) if v.len() == 1 => v.remove(0),
            other => panic!("{other:?}"),
        }
    }

    #[test]
    fn preferred_and_unclean_elections_on_request() {
        let (mut img, _) = cluster(3);
        create(&mut img, assigned("t", vec![vec![1, 2, 3]])).unwrap();
        use Election::*;
        assert_eq!(
            elect_one(&mut img, Preferred, "t", 0),
            Err(CommandError::ElectionNotNeeded)
        );
        // 1 goes and comes back: 2 leads, 1 is back in the ISR but does not lead.
        fence(&mut img, 1, true).unwrap();
        fence(&mut img, 1, false).unwrap();
        assert_eq!(part(&img, "t", 0).leader, 2);
        assert_eq!(
            elect_one(&mut img, Preferred, "t", 0),
            Err(CommandError::PreferredLeaderNotAvailable(1)),
            "not in the ISR yet"
        );
        set_isr(&mut img, 2, "t", 0, &[1, 2, 3]).unwrap();
        let before = part(&img, "t", 0).leader_epoch;
        assert_eq!(elect_one(&mut img, Preferred, "t", 0), Ok(()));
        let p = part(&img, "t", 0);
        assert_eq!((p.leader, p.leader_epoch), (1, before + 1));
        assert_eq!(
            elect_one(&mut img, Preferred, "t", 7),
            Err(CommandError::UnknownTopicOrPartition)
        );
        // Unclean: only for a partition without a leader; from a live replica outside
        // the ISR when no ISR member is live, the topic's setting notwithstanding.
        assert_eq!(
            elect_one(&mut img, Unclean, "t", 0),
            Err(CommandError::ElectionNotNeeded)
        );
        create(&mut img, assigned("u", vec![vec![1, 2]])).unwrap();
        fence(&mut img, 2, true).unwrap();
        fence(&mut img, 1, true).unwrap();
        assert_eq!(part(&img, "u", 0).isr, vec![1]);
        assert_eq!(
            elect_one(&mut img, Unclean, "u", 0),
            Err(CommandError::EligibleLeadersNotAvailable)
        );
        fence(&mut img, 2, false).unwrap();
        assert_eq!(
            part(&img, "u", 0).leader,
            NO_LEADER,
            "unclean is off for the topic"
        );
        assert_eq!(elect_one(&mut img, Unclean, "u", 0), Ok(()));
        let p = part(&img, "u", 0);
        assert_eq!((p.leader, p.isr.clone()), (2, vec![2]));
    }

    #[test]
    fn an_unclean_election_that_makes_the_target_the_isr_completes_the_move() {
        let (mut img, _) = cluster(2);
        let mut t = assigned("t", vec![vec![1]]);
        t.configs = unclean("true");
        create(&mut img, t).unwrap();
        reassign(&mut img, "t", 0, Some(vec![2])).unwrap();
        // 1 dies before 2 caught up: 2 leads uncleanly, alone in the ISR, so the move
        // is complete in the same change.
        fence(&mut img, 1, true).unwrap();
        assert_eq!(
            moving(&part(&img, "t", 0)),
            (vec![2], vec![], vec![], vec![2], 2)
        );
    }

    #[test]
    fn a_new_target_or_a_cancel_keeps_a_live_in_sync_replica() {
        let (mut img, _) = cluster(3);
        create(&mut img, assigned("t", vec![vec![1]])).unwrap();
        reassign(&mut img, "t", 0, Some(vec![2, 3])).unwrap();
        set_isr(&mut img, 1, "t", 0, &[1, 2]).unwrap();
        fence(&mut img, 1, true).unwrap();
        let before = part(&img, "t", 0);
        assert_eq!(
            moving(&before),
            (vec![2, 3, 1], vec![2, 3], vec![1], vec![2], 2)
        );
        // Dropping 2, the only live in-sync replica, is refused either way.
        assert!(matches!(
            reassign(&mut img, "t", 0, Some(vec![3])),
            Err(CommandError::InvalidReplicaAssignment(_))
        ));
        assert!(matches!(
            reassign(&mut img, "t", 0, None),
            Err(CommandError::InvalidReplicaAssignment(_))
        ));
        assert_eq!(part(&img, "t", 0), before, "nothing changed");
    }

    #[test]
    fn new_partitions_of_a_topic_being_moved_get_its_target_replication_factor() {
        let (mut img, _) = cluster(3);
        create(&mut img, assigned("t", vec![vec![1, 2]])).unwrap();
        reassign(&mut img, "t", 0, Some(vec![3])).unwrap();
        assert_eq!(
            part(&img, "t", 0).replicas.len(),
            3,
            "target and removed together"
        );
        let grow = Command::CreatePartitions {
            topics: vec![NewPartitions {
                topic: "t".into(),
                count: 2,
                assignments: None,
            }],
        };
        assert_eq!(next(&mut img, grow), Outcome::Items(vec![Ok(())]));
        assert_eq!(part(&img, "t", 1).replicas.len(), 1);
    }

    #[test]
    fn a_reassignment_goes_on_through_a_failover() {
        let (mut img, _) = cluster(3);
        create(&mut img, assigned("t", vec![vec![1, 2]])).unwrap();
        reassign(&mut img, "t", 0, Some(vec![2, 3])).unwrap();
        // The leader, being removed, dies: the target's in-sync replica leads.
        fence(&mut img, 1, true).unwrap();
        assert_eq!(
            moving(&part(&img, "t", 0)),
            (vec![2, 3, 1], vec![3], vec![1], vec![2], 2)
        );
        // The new leader adds the caught-up replica: complete, though 1 is gone.
        set_isr(&mut img, 2, "t", 0, &[2, 3]).unwrap();
        assert_eq!(
            moving(&part(&img, "t", 0)),
            (vec![2, 3], vec![], vec![], vec![2, 3], 2)
        );
    }

    #[test]
    fn partitions_of_earlier_releases_load_without_a_reassignment() {
        let old =
            r#"{"replicas":[1,2],"isr":[1,2],"leader":1,"leader_epoch":3,"partition_epoch":4}"#;
        let p: PartitionImage = serde_json::from_str(old).expect("loads");
        assert!(!p.is_reassigning());
        assert_eq!(
            serde_json::to_string(&p).expect("saves"),
            old,
            "and saves the same"
        );
    }

    #[test]
    fn fencing_shrinks_isrs_and_moves_leaders_within_them() {
        let (mut img, _) = cluster(3);
        create(&mut img, assigned("t", vec![vec![1, 2, 3], vec![2, 1, 3]])).unwrap();
        fence(&mut img, 1, true).unwrap();
        let p = part(&img, "t", 0);
        assert_eq!((p.leader, p.isr.clone()), (2, vec![2, 3]));
        assert_eq!((p.leader_epoch, p.partition_epoch), (1, 1));
        // A follower fenced: the ISR shrinks, the leader (and its epoch) stays.
        let q = part(&img, "t", 1);
        assert_eq!((q.leader, q.isr.clone()), (2, vec![2, 3]));
        assert_eq!((q.leader_epoch, q.partition_epoch), (0, 1));
        // Unfenced, it leads nothing: it rejoins ISRs only by their leaders' AlterPartition.
        fence(&mut img, 1, false).unwrap();
        assert_eq!(part(&img, "t", 0), p);
        assert_eq!(part(&img, "t", 1), q);
        // Its leader keeps a partition even once the first replica is back in sync.
        assert_eq!(set_isr(&mut img, 2, "t", 0, &[1, 2, 3]), Ok(()));
        fence(&mut img, 3, true).unwrap();
        let p = part(&img, "t", 0);
        assert_eq!((p.leader, p.isr.clone()), (2, vec![1, 2]));
        assert_eq!((p.leader_epoch, p.partition_epoch), (1, 3));
    }

    #[test]
    fn alter_partition_checks_in_order() {
        let (mut img, epochs) = cluster(3);
        create(&mut img, assigned("t", vec![vec![1, 2, 3]])).unwrap();
        let good = isr_change(&img, "t", 0, &[1, 3]);
        let with = |f: &dyn Fn(&mut IsrChange)| {
            let mut c = good.clone();
            f(&mut c);
            c
        };
        let stale = next(
            &mut img,
            Command::AlterPartition {
                broker: 1,
                broker_epoch: epochs[0] + 100,
                changes: vec![good.clone()],
            },
        );
        assert_eq!(
            stale,
            Outcome::Items(vec![Err(CommandError::StaleBrokerEpoch(1))])
        );
        let unknown = next(
            &mut img,
            Command::AlterPartition {
                broker: 9,
                broker_epoch: epochs[0],
                changes: vec![good.clone()],
            },
        );
        assert_eq!(
            unknown,
            Outcome::Items(vec![Err(CommandError::StaleBrokerEpoch(9))])
        );
        let refused = alter(
            &mut img,
            1,
            vec![
                with(&|c| c.topic_id = Uuid::from_u128(77)),
                with(&|c| c.partition = 1),
                with(&|c| c.partition = -1),
                with(&|c| c.leader_epoch = 1),
                with(&|c| c.partition_epoch = 1),
            ],
        );
        assert_eq!(
            refused,
            vec![
                Err(CommandError::UnknownTopicId),
                Err(CommandError::UnknownTopicOrPartition),
                Err(CommandError::UnknownTopicOrPartition),
                Err(CommandError::FencedLeaderEpoch),
                Err(CommandError::InvalidUpdateVersion),
            ]
        );
        assert_eq!(
            alter(&mut img, 2, vec![good.clone()]),
            vec![Err(CommandError::NotLeaderOrFollower)]
        );
        for isr in [vec![], vec![1, 1], vec![1, 4], vec![2, 3]] {
            let r = alter(&mut img, 1, vec![with(&|c| c.isr = isr.clone())]);
            assert!(
                matches!(r[..], [Err(CommandError::Invalid(_))]),
                "{isr:?}: {r:?}"
            );
        }
        // Nothing refused changed anything.
        assert_eq!(part(&img, "t", 0), new_partition(vec![1, 2, 3]));
        // A fenced broker proposes nothing, even in its epoch.
        fence(&mut img, 1, true).unwrap();
        assert_eq!(
            alter(&mut img, 1, vec![good]),
            vec![Err(CommandError::StaleBrokerEpoch(1))]
        );
    }

    #[test]
    fn alter_partition_shrinks_then_expands_the_isr() {
        let (mut img, _) = cluster(3);
        create(&mut img, assigned("t", vec![vec![1, 2, 3]])).unwrap();
        assert_eq!(set_isr(&mut img, 1, "t", 0, &[3, 1]), Ok(()));
        let p = part(&img, "t", 0);
        // Stored in assignment order; the leader and its epoch stay.
        assert_eq!((p.leader, p.isr.clone()), (1, vec![1, 3]));
        assert_eq!((p.leader_epoch, p.partition_epoch), (0, 1));
        // The same ISR again: nothing changes, not even the partition epoch.
        assert_eq!(set_isr(&mut img, 1, "t", 0, &[1, 3]), Ok(()));
        assert_eq!(part(&img, "t", 0), p);
        // A change computed from the state before the shrink is refused.
        let mut old = isr_change(&img, "t", 0, &[1, 2, 3]);
        old.partition_epoch = 0;
        assert_eq!(
            alter(&mut img, 1, vec![old]),
            vec![Err(CommandError::InvalidUpdateVersion)]
        );
        // Only an active broker joins: not a fenced one ...
        fence(&mut img, 2, true).unwrap();
        assert_eq!(part(&img, "t", 0), p);
        assert_eq!(
            set_isr(&mut img, 1, "t", 0, &[1, 2, 3]),
            Err(CommandError::IneligibleReplica(2))
        );
        fence(&mut img, 2, false).unwrap();
        // ... and two changes of one partition in one command: the second is stale.
        let expand = isr_change(&img, "t", 0, &[2, 1, 3]);
        assert_eq!(
            alter(&mut img, 1, vec![expand.clone(), expand]),
            vec![Ok(()), Err(CommandError::InvalidUpdateVersion)]
        );
        let p = part(&img, "t", 0);
        assert_eq!((p.leader, p.isr.clone()), (1, vec![1, 2, 3]));
        assert_eq!((p.leader_epoch, p.partition_epoch), (0, 2));
        // Not one shutting down either.
        assert_eq!(set_isr(&mut img, 1, "t", 0, &[1, 2]), Ok(()));
        assert_eq!(shutdown(&mut img, 3), Outcome::Done(Ok(())));
        assert_eq!(
            set_isr(&mut img, 1, "t", 0, &[1, 2, 3]),
            Err(CommandError::IneligibleReplica(3))
        );
    }

    /// Replicas [1, 2], with 2 out of the ISR, then 1 fenced: nobody in sync is live.
    fn offline_with_a_live_replica_out_of_sync(configs: BTreeMap<String, String>) -> MetadataImage {
        let (mut img, _) = cluster(2);
        let mut t = assigned("t", vec![vec![1, 2]]);
        t.configs = configs;
        create(&mut img, t).unwrap();
        assert_eq!(set_isr(&mut img, 1, "t", 0, &[1]), Ok(()));
        fence(&mut img, 1, true).unwrap();
        img
    }

    #[test]
    fn without_unclean_election_an_offline_partition_waits_for_its_isr() {
        let img = offline_with_a_live_replica_out_of_sync(BTreeMap::new());
        let p = part(&img, "t", 0);
        assert_eq!((p.leader, p.isr.clone()), (NO_LEADER, vec![1]));
        assert_eq!((p.leader_epoch, p.partition_epoch), (1, 2));
        // "false" is off too, whatever the cluster-wide default says.
        let mut img = offline_with_a_live_replica_out_of_sync(unclean("false"));
        let set = ConfigChange {
            name: String::new(),
            from: BTreeMap::new(),
            to: unclean("true"),
        };
        assert_eq!(
            next(&mut img, Command::SetBrokerConfigs { change: set }),
            Outcome::Done(Ok(()))
        );
        assert_eq!(part(&img, "t", 0).leader, NO_LEADER);
    }

    #[test]
    fn unclean_election_leads_from_outside_the_isr() {
        // Enabled beforehand: the fencing itself elects uncleanly.
        let img = offline_with_a_live_replica_out_of_sync(unclean("true"));
        let p = part(&img, "t", 0);
        assert_eq!((p.leader, p.isr.clone()), (2, vec![2]));
        assert_eq!((p.leader_epoch, p.partition_epoch), (1, 2));

        // Enabled for the topic while offline.
        let mut img = offline_with_a_live_replica_out_of_sync(BTreeMap::new());
        let set = Command::SetTopicConfigs {
            changes: vec![ConfigChange {
                name: "t".into(),
                from: BTreeMap::new(),
                to: unclean("true"),
            }],
        };
        assert_eq!(next(&mut img, set), Outcome::Items(vec![Ok(())]));
        let p = part(&img, "t", 0);
        assert_eq!((p.leader, p.isr.clone()), (2, vec![2]));
        assert_eq!((p.leader_epoch, p.partition_epoch), (2, 3));

        // Enabled cluster-wide while offline.
        let mut img = offline_with_a_live_replica_out_of_sync(BTreeMap::new());
        let set = ConfigChange {
            name: String::new(),
            from: BTreeMap::new(),
            to: unclean("true"),
        };
        assert_eq!(
            next(&mut img, Command::SetBrokerConfigs { change: set }),
            Outcome::Done(Ok(()))
        );
        assert_eq!(part(&img, "t", 0).leader, 2);

        // Nobody live at all: offline, until an out-of-sync replica is unfenced.
        let (mut img, _) = cluster(2);
        let mut t = assigned("t", vec![vec![1, 2]]);
        t.configs = unclean("true");
        create(&mut img, t).unwrap();
        assert_eq!(set_isr(&mut img, 1, "t", 0, &[1]), Ok(()));
        fence(&mut img, 2, true).unwrap();
        fence(&mut img, 1, true).unwrap();
        assert_eq!(part(&img, "t", 0).leader, NO_LEADER);
        fence(&mut img, 2, false).unwrap();
        let p = part(&img, "t", 0);
        assert_eq!((p.leader, p.isr.clone(), p.leader_epoch), (2, vec![2], 2));
    }

    #[test]
    fn controlled_shutdown_fences_for_good_until_the_broker_registers_again() {
        let (mut img, epochs) = cluster(3);
        create(&mut img, assigned("t", vec![vec![1, 2, 3]])).unwrap();
        create(&mut img, assigned("s", vec![vec![1]])).unwrap();
        assert_eq!(
            next(
                &mut img,
                Command::ControlledShutdown {
                    id: 1,
                    epoch: epochs[0] + 100
                }
            ),
            Outcome::Done(Err(CommandError::StaleBrokerEpoch(1)))
        );
        assert!(img.broker(1).unwrap().is_active());
        assert_eq!(shutdown(&mut img, 1), Outcome::Done(Ok(())));
        let b = img.broker(1).unwrap();
        assert!(b.fenced && b.shutting_down && !img.is_live(1));
        // Exactly fencing's effect: leadership moves, the ISR shrinks but keeps its last.
        let p = part(&img, "t", 0);
        assert_eq!(
            (p.leader, p.isr.clone(), p.leader_epoch),
            (2, vec![2, 3], 1)
        );
        let q = part(&img, "s", 0);
        assert_eq!(
            (q.leader, q.isr.clone(), q.leader_epoch),
            (NO_LEADER, vec![1], 1)
        );
        // A retry changes nothing; unfencing is refused; new replicas go elsewhere.
        let before = serde_json::to_string(&img.topics).unwrap();
        assert_eq!(shutdown(&mut img, 1), Outcome::Done(Ok(())));
        assert!(matches!(
            fence(&mut img, 1, false),
            Err(CommandError::Invalid(_))
        ));
        assert!(img.broker(1).unwrap().fenced);
        assert_eq!(serde_json::to_string(&img.topics).unwrap(), before);
        let mut t = topic("u", 1);
        t.replication_factor = 3;
        assert!(matches!(
            create(&mut img, t),
            Err(CommandError::InvalidReplicationFactor(_))
        ));
        // Named explicitly, it is a replica outside the ISR (Kafka's manual assignment);
        // alone, it cannot lead.
        assert!(matches!(
            create(&mut img, assigned("u", vec![vec![1]])),
            Err(CommandError::InvalidReplicaAssignment(_))
        ));
        create(&mut img, assigned("u", vec![vec![1, 2]])).unwrap();
        let u = part(&img, "u", 0);
        assert_eq!(
            (u.leader, u.replicas.clone(), u.isr.clone()),
            (2, vec![1, 2], vec![2])
        );
        // Not even an unclean election picks it.
        let set = ConfigChange {
            name: String::new(),
            from: BTreeMap::new(),
            to: unclean("true"),
        };
        assert_eq!(
            next(&mut img, Command::SetBrokerConfigs { change: set }),
            Outcome::Done(Ok(()))
        );
        assert_eq!(part(&img, "s", 0).leader, NO_LEADER);
        fence(&mut img, 3, true).unwrap();
        fence(&mut img, 2, true).unwrap();
        let p = part(&img, "t", 0);
        assert_eq!((p.leader, p.isr.clone()), (NO_LEADER, vec![2]));
        // A restart is a new registration: fenced until caught up, then active again.
        let epoch = register(&mut img, 1, None);
        let b = img.broker(1).unwrap();
        assert!(b.epoch == epoch && !b.shutting_down && b.is_active());
        let q = part(&img, "s", 0);
        assert_eq!((q.leader, q.isr.clone(), q.leader_epoch), (1, vec![1], 2));
        let p = part(&img, "t", 0);
        assert_eq!((p.leader, p.isr.clone()), (1, vec![1]));
    }

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
                    controller_addr: String::new(),
                    rack: Some(format!("r{}", id % 2)),
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
