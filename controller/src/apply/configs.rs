//! Configs: `SetTopicConfigs` (a topic's overrides), `SetBrokerConfigs` (one broker's, or
//! the cluster-wide layer, named ""), `SetGroupConfigs` (one group's), and `MarkBalancerMoves` (a topic's configs and its
//! record of the balancer's moves, changed in one step).
//!
//! Every change is a compare-and-set: applied only while the configs are still the `from`
//! it was computed from, else refused (`Conflict`), so a change computed from configs no
//! longer there loses nothing. A change that may enable unclean leader election then
//! re-elects the offline partitions it covers: one topic's for a topic's overrides, every
//! topic's for the cluster-wide layer.

use crate::command::*;
use crate::image::MetadataImage;

impl MetadataImage {
    /// Replaces a topic's overrides if they still are `from`; its offline partitions then
    /// get an unclean leader if that is now enabled.
    pub(super) fn set_topic_configs(&mut self, c: &ConfigChange) -> Result<(), CommandError> {
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
    pub(super) fn mark_balancer_moves(
        &mut self,
        add: bool,
        m: &BalancerMarks,
    ) -> Result<(), CommandError> {
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

    /// Replaces a group's configs if they still are `from` (an empty `to` forgets them).
    /// The keys and values were checked by the broker that took the change.
    pub(super) fn set_group_configs(&mut self, c: &ConfigChange) -> Result<(), CommandError> {
        if c.name.is_empty() {
            return Err(CommandError::Invalid(
                "a group config resource names a group".into(),
            ));
        }
        let current = self.group_configs.get(&c.name).cloned().unwrap_or_default();
        if current != c.from {
            return Err(CommandError::Conflict);
        }
        if c.to.is_empty() {
            self.group_configs.remove(&c.name);
        } else {
            self.group_configs.insert(c.name.clone(), c.to.clone());
        }
        Ok(())
    }

    pub(super) fn set_broker_configs(&mut self, c: &ConfigChange) -> Result<(), CommandError> {
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
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::apply::test_support::*;
    use crate::image::NO_LEADER;
    use std::collections::BTreeMap;

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
    fn a_groups_configs_change_only_from_what_they_were() {
        let (mut img, _) = cluster(1);
        let layer =
            |v: &str| BTreeMap::from([("consumer.session.timeout.ms".to_string(), v.to_string())]);
        let change = |from, to| Command::SetGroupConfigs {
            change: ConfigChange {
                name: "g".into(),
                from,
                to,
            },
        };
        assert_eq!(
            next(&mut img, change(BTreeMap::new(), layer("50000"))),
            Outcome::Done(Ok(()))
        );
        assert_eq!(img.group_configs["g"], layer("50000"));
        // Computed from configs no longer there: refused, nothing changes.
        assert_eq!(
            next(&mut img, change(BTreeMap::new(), layer("55000"))),
            Outcome::Done(Err(CommandError::Conflict))
        );
        // Emptied: forgotten.
        assert_eq!(
            next(&mut img, change(layer("50000"), BTreeMap::new())),
            Outcome::Done(Ok(()))
        );
        assert!(img.group_configs.is_empty());
    }

    #[test]
    fn without_unclean_election_an_offline_partition_waits_for_its_isr() {
        let img = offline_with_a_live_replica_out_of_sync(BTreeMap::new());
        let p = part(&img, "t", 0);
        assert_eq!((p.leader, p.isr.clone()), (NO_LEADER, vec![1]));
        assert_eq!((p.leader_epoch, p.partition_epoch), (1, 2));
        // "false" is off too, whatever the cluster-wide default says.
        let mut img = offline_with_a_live_replica_out_of_sync(unclean("false"));
        enable_unclean_cluster_wide(&mut img);
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
        enable_unclean_cluster_wide(&mut img);
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
}
