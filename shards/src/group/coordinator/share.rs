//! The coordinator's share groups (KIP-932): ShareGroupHeartbeat and ShareGroupDescribe,
//! their records in `__consumer_offsets` (types 10–14, `group::share::records`), the
//! replay, session expiry, listing and deletion.
//!
//! Share groups live beside the classic and consumer groups, in one namespace of group
//! ids: a share group's id is refused to the other protocols (JoinGroup:
//! INCONSISTENT_GROUP_PROTOCOL; offsets and consumer heartbeats: GROUP_ID_NOT_FOUND),
//! and a share heartbeat to an id another group holds is GROUP_ID_NOT_FOUND, as Kafka
//! answers ("Group X is not a share group").
//!
//! Invariants: what a heartbeat changed is written before it is answered (acks=all),
//! and a failed write puts its changes back so the next write carries them; a share
//! group exists in `shares` only while its partition is loaded here.

use super::{GroupCoordinator, KeyedRecord};
use crate::coordinator_log::{skip_record, NewerRecord};
use crate::group::consumer::group::TopicCatalog;
use crate::group::partition_for_group;
use crate::group::share::group::{
    ShareGroup, ShareGroupDescription, ShareHeartbeat, ShareHeartbeatAnswer,
};
use crate::group::share::records::{self as share_rec, ShareRecordKey, ShareRecordValue};
use crate::group::types::{GroupAnswer, GroupError, GroupListing, GroupOp, ShareScope};
use corelog_partition::Partition;
use std::rc::Rc;

/// The protocol and group type of share groups (ListGroups).
pub const SHARE_PROTOCOL_TYPE: &str = "share";

fn encode(
    records: Vec<(ShareRecordKey, Option<ShareRecordValue>)>,
) -> Result<Vec<KeyedRecord>, GroupError> {
    records
        .into_iter()
        .map(|(k, v)| {
            let key = share_rec::encode_key(&k)
                .map_err(|_| GroupError::TooLong("a group or member id"))?;
            Ok((key, v.as_ref().map(share_rec::encode_value)))
        })
        .collect()
}

impl GroupCoordinator {
    pub(super) fn is_share_group(&self, group: &str) -> bool {
        self.shares.borrow().contains_key(group)
    }

    /// The answer to an operation of another protocol on a share group's id, or `None`
    /// when `op` is not about a share group.
    pub(super) fn refuse_share_group(&self, op: &GroupOp) -> Option<GroupAnswer> {
        let group = op.group()?;
        if !self.is_share_group(group) {
            return None;
        }
        let e = match op {
            GroupOp::ShareHeartbeat { .. }
            | GroupOp::ShareDescribe { .. }
            | GroupOp::ShareScope { .. }
            | GroupOp::ShareStatePartitions { .. }
            | GroupOp::Delete { .. }
            | GroupOp::Describe { .. }
            | GroupOp::ConsumerDescribe { .. }
            | GroupOp::List => return None,
            GroupOp::Join(_) => GroupError::InconsistentGroupProtocol,
            GroupOp::Sync(_) | GroupOp::Heartbeat(_) | GroupOp::Leave { .. } => {
                GroupError::UnknownMemberId
            }
            GroupOp::Commit(_)
            | GroupOp::TxnCommit(_)
            | GroupOp::FetchOffsets { .. }
            | GroupOp::DeleteOffsets { .. }
            | GroupOp::ConsumerHeartbeat { .. } => GroupError::GroupIdNotFound,
        };
        Some(super::refused(op.clone(), e))
    }

    /// A ShareGroupHeartbeat: the group's step (`share::group`), then the records of
    /// what changed, answered once they are committed. A joining member creates the
    /// group; a refused first heartbeat leaves none behind.
    pub(super) async fn share_heartbeat(
        &self,
        group: String,
        hb: ShareHeartbeat,
        topics: &impl TopicCatalog,
        log_of: &impl Fn(i32) -> Option<Rc<Partition>>,
    ) -> Result<ShareHeartbeatAnswer, GroupError> {
        if group.is_empty() {
            return Err(GroupError::InvalidRequest("GroupId can't be empty.".into()));
        }
        if self.groups.borrow().contains_key(&group) {
            return Err(GroupError::GroupIdNotFound);
        }
        let now = self.mono_ms();
        let (answer, records, changes) = {
            let mut shares = self.shares.borrow_mut();
            let created = !shares.contains_key(&group);
            if created && hb.member_epoch != 0 {
                return Err(GroupError::GroupIdNotFound);
            }
            let g = shares
                .entry(group.clone())
                .or_insert_with(|| ShareGroup::new(group.clone()));
            let config = crate::group::share::overrides::membership(
                &self.config.share,
                &topics.group_configs(&group),
            );
            let answer = g.heartbeat(hb, topics, &config, now);
            if answer.is_err() && created {
                shares.remove(&group);
                return answer;
            }
            let changes = g.take_changes();
            let records = encode(g.records_for(&changes))?;
            (answer, records, changes)
        };
        if !records.is_empty() {
            if let Err(e) = self.append(&group, &records, log_of).await {
                if let Some(g) = self.shares.borrow_mut().get_mut(&group) {
                    g.keep_changes(changes);
                }
                return Err(e);
            }
        }
        answer
    }

    pub(super) fn share_describe(&self, group: &str) -> Result<ShareGroupDescription, GroupError> {
        self.shares
            .borrow()
            .get(group)
            .map(ShareGroup::describe)
            .ok_or(GroupError::GroupIdNotFound)
    }

    pub(super) fn share_scope(&self, group: &str) -> Result<ShareScope, GroupError> {
        self.shares
            .borrow()
            .get(group)
            .map(|g| ShareScope {
                empty: g.is_empty(),
                epoch: g.epoch(),
                partitions: g.state_partitions(),
            })
            .ok_or(GroupError::GroupIdNotFound)
    }

    /// Records share partitions whose state an administrator reset or deleted (see
    /// [`GroupOp::ShareStatePartitions`]), written before the answer.
    pub(super) async fn share_state_partitions(
        &self,
        group: &str,
        add: Vec<crate::group::share::records::TopicPartitions>,
        forget: Vec<uuid::Uuid>,
        log_of: &impl Fn(i32) -> Option<Rc<Partition>>,
    ) -> Result<(), GroupError> {
        if group.is_empty() {
            return Err(GroupError::InvalidGroupId);
        }
        if self.groups.borrow().contains_key(group) {
            return Err(GroupError::GroupIdNotFound);
        }
        let (records, changes) = {
            let mut shares = self.shares.borrow_mut();
            let created = !shares.contains_key(group);
            let g = shares
                .entry(group.to_string())
                .or_insert_with(|| ShareGroup::new(group.to_string()));
            if !g.is_empty() {
                return Err(GroupError::GroupNotEmpty);
            }
            for (id, name, ps) in add {
                g.add_state_partitions(id, &name, ps);
            }
            g.forget_state_topics(&forget);
            let mut changes = g.take_changes();
            // A group made here is stored whole (its epoch record first of all).
            changes.epoch |= created;
            (encode(g.records_for(&changes))?, changes)
        };
        if !records.is_empty() {
            if let Err(e) = self.append(group, &records, log_of).await {
                if let Some(g) = self.shares.borrow_mut().get_mut(group) {
                    g.keep_changes(changes);
                }
                return Err(e);
            }
        }
        Ok(())
    }

    /// DeleteGroups of a share group: refused while it has members (NON_EMPTY_GROUP);
    /// otherwise its records are deleted, the group metadata last.
    pub(super) async fn delete_share_group(
        &self,
        group: &str,
        log_of: &impl Fn(i32) -> Option<Rc<Partition>>,
    ) -> Result<(), GroupError> {
        let tombstones = {
            let shares = self.shares.borrow();
            let g = shares.get(group).ok_or(GroupError::GroupIdNotFound)?;
            if !g.is_empty() {
                return Err(GroupError::GroupNotEmpty);
            }
            encode(g.tombstones())?
        };
        self.append(group, &tombstones, log_of).await?;
        let mut shares = self.shares.borrow_mut();
        // A member that joined during the append keeps the group (its records follow
        // the tombstones in the log).
        if shares.get(group).is_some_and(ShareGroup::is_empty) {
            shares.remove(group);
        }
        Ok(())
    }

    pub(super) fn share_listings(&self) -> Vec<GroupListing> {
        self.shares
            .borrow()
            .values()
            .map(|g| GroupListing {
                group: g.id().to_string(),
                protocol_type: SHARE_PROTOCOL_TYPE.to_string(),
                state: g.state(),
                group_type: SHARE_PROTOCOL_TYPE,
            })
            .collect()
    }

    /// Replays one share-group record into its group.
    pub(super) fn apply_share(
        &self,
        key: &[u8],
        value: Option<&[u8]>,
        offset: i64,
    ) -> Result<(), NewerRecord> {
        let k = match share_rec::decode_key(key) {
            Ok(k) => k,
            Err(e) => return skip_record("share group record key", e, offset),
        };
        let group = match &k {
            ShareRecordKey::MemberMetadata { group, .. }
            | ShareRecordKey::GroupMetadata { group }
            | ShareRecordKey::TargetAssignmentMetadata { group }
            | ShareRecordKey::TargetAssignmentMember { group, .. }
            | ShareRecordKey::CurrentMemberAssignment { group, .. }
            | ShareRecordKey::StatePartitionMetadata { group } => group.clone(),
        };
        let value = match value.map(|v| share_rec::decode_value(&k, v)) {
            Some(Ok(v)) => Some(v),
            Some(Err(e)) => return skip_record("share group record value", e, offset),
            None => None,
        };
        let mut shares = self.shares.borrow_mut();
        let g = shares
            .entry(group.clone())
            .or_insert_with(|| ShareGroup::new(group.clone()));
        if !g.restore(&k, value) {
            shares.remove(&group);
        }
        Ok(())
    }

    /// Ends the replay of `partition`'s share groups.
    pub(super) fn finish_share_restore(&self, partition: i32) {
        let now = self.mono_ms();
        let n = self.config.offsets_partitions;
        for (id, g) in self.shares.borrow_mut().iter_mut() {
            if partition_for_group(id, n) == partition {
                g.finish_restore(now, &self.config.share);
            }
        }
    }

    pub(super) fn forget_share_groups(&self, partition: i32) {
        let n = self.config.offsets_partitions;
        self.shares
            .borrow_mut()
            .retain(|id, _| partition_for_group(id, n) != partition);
    }

    /// Removes the share-group members whose session ran out, and returns the groups
    /// with records to write ([`Self::store_share_changes`]).
    pub(super) fn expire_share_members(&self) -> Vec<String> {
        let now = self.mono_ms();
        let mut changed = Vec::new();
        for (id, g) in self.shares.borrow_mut().iter_mut() {
            let expired = g.expired(now);
            for member in &expired {
                tracing::info!(group = %id, member = %member, "share group member removed: its session timed out");
                g.remove_member(member);
            }
            if !expired.is_empty() {
                changed.push(id.clone());
            }
        }
        changed
    }

    /// Writes what changed in these share groups (a member's removal by a timer). A
    /// failure is logged and the changes are kept for the group's next write.
    pub async fn store_share_changes(
        &self,
        groups: Vec<String>,
        log_of: impl Fn(i32) -> Option<Rc<Partition>>,
    ) {
        for group in groups {
            if !self.serves_group(&group) {
                continue;
            }
            let (records, changes) = {
                let mut shares = self.shares.borrow_mut();
                let Some(g) = shares.get_mut(&group) else {
                    continue;
                };
                let changes = g.take_changes();
                (encode(g.records_for(&changes)), changes)
            };
            let result = match records {
                Ok(r) if r.is_empty() => Ok(0),
                Ok(r) => self.append(&group, &r, &log_of).await,
                Err(e) => Err(e),
            };
            if let Err(e) = result {
                if let Some(g) = self.shares.borrow_mut().get_mut(&group) {
                    g.keep_changes(changes);
                }
                tracing::warn!(group = %group, error = %e, "storing a share group's member removal");
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::super::tests::{ask, open, OneTopic, GROUP};
    use super::*;
    use crate::group::coordinator::GroupConfig;
    use crate::group::types::CommitRequest;
    use corelog_storage::test_executor::run;

    async fn share_beat(
        c: &GroupCoordinator,
        log: &Rc<Partition>,
        member: &str,
        epoch: i32,
        join: bool,
    ) -> Result<ShareHeartbeatAnswer, GroupError> {
        let l = log.clone();
        let op = GroupOp::ShareHeartbeat {
            group: GROUP.into(),
            heartbeat: ShareHeartbeat {
                member_id: member.into(),
                member_epoch: epoch,
                subscribed_topic_names: join.then(|| vec!["t".into()]),
                client_id: "c".into(),
                client_host: "/127.0.0.1".into(),
                ..ShareHeartbeat::default()
            },
        };
        match c.handle(op, &OneTopic, move |_| Some(l.clone())).await {
            GroupAnswer::ShareHeartbeat(r) => r,
            other => panic!("not a share heartbeat answer: {other:?}"),
        }
    }

    async fn loaded(log: &Rc<Partition>) -> GroupCoordinator {
        let c = GroupCoordinator::new(GroupConfig::default());
        c.load_partition(c.offsets_partition(GROUP), log.clone())
            .await;
        c
    }

    fn described(c: &GroupCoordinator) -> Vec<(String, i32, usize)> {
        let d = c.share_describe(GROUP).expect("a share group");
        d.members
            .iter()
            .map(|m| (m.member_id.clone(), m.epoch, m.assigned.len()))
            .collect()
    }

    #[test]
    fn a_share_group_is_stored_and_reloaded_and_its_members_go_on() {
        run(move || async move {
            let dir = tempfile::tempdir().expect("tempdir");
            let log = open(dir.path()).await;
            let c = loaded(&log).await;
            let a = share_beat(&c, &log, "a", 0, true).await.expect("a joins");
            let b = share_beat(&c, &log, "b", 0, true).await.expect("b joins");
            let a = share_beat(&c, &log, "a", a.member_epoch, false)
                .await
                .expect("a beats");
            assert_eq!((a.member_epoch, b.member_epoch), (2, 2));
            let before = described(&c);
            assert_eq!(before, vec![("a".into(), 2, 2), ("b".into(), 2, 2)]);

            let again = loaded(&log).await;
            assert_eq!(described(&again), before);
            let d = again.share_describe(GROUP).expect("described");
            assert_eq!((d.state, d.epoch, d.assignment_epoch), ("Stable", 2, 2));
            // Members go on at their epochs, without a new epoch.
            let a2 = share_beat(&again, &log, "a", 2, false)
                .await
                .expect("a after reload");
            assert_eq!((a2.member_epoch, a2.assignment), (2, None));
            // b leaves; the reload after that knows it.
            share_beat(&again, &log, "b", -1, false)
                .await
                .expect("b leaves");
            let third = loaded(&log).await;
            assert_eq!(described(&third), vec![("a".into(), 2, 2)]);
            assert_eq!(third.share_describe(GROUP).expect("d").epoch, 3);
            let listed = match ask(&third, &log, GroupOp::List).await {
                GroupAnswer::Listed(l) => l,
                other => panic!("{other:?}"),
            };
            assert_eq!(listed.len(), 1);
            assert_eq!((listed[0].group_type, listed[0].state), ("share", "Stable"));
        });
    }

    #[test]
    fn other_protocols_cannot_use_a_share_groups_id_nor_it_theirs() {
        run(move || async move {
            let dir = tempfile::tempdir().expect("tempdir");
            let log = open(dir.path()).await;
            let c = loaded(&log).await;
            share_beat(&c, &log, "a", 0, true).await.expect("a joins");
            let commit = GroupOp::Commit(CommitRequest {
                group: GROUP.into(),
                generation: -1,
                member_id: String::new(),
                group_instance_id: None,
                offsets: vec![("t".into(), 0, 5, -1, String::new())],
            });
            match ask(&c, &log, commit.clone()).await {
                GroupAnswer::Commit(r) => assert_eq!(r, vec![Err(GroupError::GroupIdNotFound)]),
                other => panic!("{other:?}"),
            }
            // A group of another type refuses a share member.
            let other_log = open(&dir.path().join("other")).await;
            let c2 = loaded(&other_log).await;
            match ask(&c2, &other_log, commit).await {
                GroupAnswer::Commit(r) => assert_eq!(r, vec![Ok(())]),
                other => panic!("{other:?}"),
            }
            assert_eq!(
                share_beat(&c2, &other_log, "a", 0, true).await,
                Err(GroupError::GroupIdNotFound)
            );
        });
    }

    #[test]
    fn only_an_empty_share_group_is_deleted_and_stays_deleted() {
        run(move || async move {
            let dir = tempfile::tempdir().expect("tempdir");
            let log = open(dir.path()).await;
            let c = loaded(&log).await;
            share_beat(&c, &log, "a", 0, true).await.expect("a joins");
            let delete = GroupOp::Delete {
                group: GROUP.into(),
            };
            match ask(&c, &log, delete.clone()).await {
                GroupAnswer::Done(r) => assert_eq!(r, Err(GroupError::GroupNotEmpty)),
                other => panic!("{other:?}"),
            }
            share_beat(&c, &log, "a", -1, false)
                .await
                .expect("a leaves");
            match ask(&c, &log, delete).await {
                GroupAnswer::Done(r) => assert_eq!(r, Ok(())),
                other => panic!("{other:?}"),
            }
            assert_eq!(
                c.share_describe(GROUP).err(),
                Some(GroupError::GroupIdNotFound)
            );
            let again = loaded(&log).await;
            assert_eq!(
                again.share_describe(GROUP).err(),
                Some(GroupError::GroupIdNotFound)
            );
            // The id is free again, for any protocol.
            share_beat(&again, &log, "b", 0, true)
                .await
                .expect("a new group");
        });
    }
}
