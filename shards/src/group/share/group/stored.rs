//! A share group as records (`super::super::records`): what changed since the
//! coordinator last wrote, the records that store it, and the replay that rebuilds the
//! group from them.
//!
//! Invariant (the tests' replay property): replaying, in order, every batch of
//! `records_for(take_changes())` written after each step gives a group equal to the
//! live one in everything stored — members with their metadata, epochs and
//! assignments, the group and target epochs, the targets, the metadata hash. Sessions
//! are not stored: a replayed member's session starts at the load, as Kafka's does.

use super::{ShareGroup, ShareGroupConfig, ShareMember};
use crate::group::consumer::assignment::TopicId;
use crate::group::share::records::{ShareRecordKey, ShareRecordValue};
use std::collections::{BTreeMap, BTreeSet};

/// What moved since the coordinator last took the changes.
#[derive(Debug, Default, Clone, PartialEq, Eq)]
pub struct ShareChanges {
    /// The group epoch (and with it the metadata hash) moved.
    pub epoch: bool,
    /// Members whose metadata (rack, client, subscription) changed, or that joined.
    pub members: BTreeSet<String>,
    /// A target was computed; these members' targets changed.
    pub target: Option<BTreeSet<String>>,
    /// Members whose epochs or assigned partitions changed.
    pub current: BTreeSet<String>,
    /// Members that left or were removed: their records are deleted.
    pub removed: BTreeSet<String>,
    /// The share partitions with state changed (record 15).
    pub state_partitions: bool,
}

impl ShareChanges {
    pub fn is_empty(&self) -> bool {
        *self == ShareChanges::default()
    }
}

/// A member's stored metadata (record type 10's value).
pub(super) fn metadata_of(m: &ShareMember) -> ShareRecordValue {
    ShareRecordValue::MemberMetadata {
        rack_id: m.rack_id.clone(),
        client_id: m.client_id.clone(),
        client_host: m.client_host.clone(),
        subscribed_topic_names: m.subscribed.iter().cloned().collect(),
    }
}

/// A digest of the subscribed topics (names, ids, partition counts), stored with the
/// group epoch. Kafka stores an xxh3 digest of its own layout here; this one is only
/// ever compared with itself, to see whether the topics changed across a reload.
pub(super) fn metadata_hash(subscribed: &BTreeMap<String, (TopicId, i32)>) -> i64 {
    if subscribed.is_empty() {
        return 0;
    }
    let mut crc = 0u32;
    for (name, (id, partitions)) in subscribed {
        crc = crc32c::crc32c_append(crc, &(name.len() as u32).to_be_bytes());
        crc = crc32c::crc32c_append(crc, name.as_bytes());
        crc = crc32c::crc32c_append(crc, id.as_bytes());
        crc = crc32c::crc32c_append(crc, &partitions.to_be_bytes());
    }
    // Never 0, the hash of no topics.
    i64::from(crc) | 1 << 32
}

impl ShareGroup {
    /// The changes since the last call: what the coordinator must write.
    pub fn take_changes(&mut self) -> ShareChanges {
        std::mem::take(&mut self.changes)
    }

    /// Puts back changes whose records were not written (a failed append): the next
    /// write carries them, and records are the group as it is then.
    pub fn keep_changes(&mut self, unwritten: ShareChanges) {
        let c = &mut self.changes;
        c.epoch |= unwritten.epoch;
        c.members.extend(unwritten.members);
        c.current.extend(unwritten.current);
        c.removed.extend(unwritten.removed);
        c.state_partitions |= unwritten.state_partitions;
        if let Some(t) = unwritten.target {
            c.target.get_or_insert_with(BTreeSet::new).extend(t);
        }
    }

    /// The records that store `changes` (a `None` value deletes its key), in Kafka's
    /// order: removed members, member metadata, group epoch, target, current
    /// assignments. A member both removed and back is deleted, then written as it is.
    pub fn records_for(
        &self,
        changes: &ShareChanges,
    ) -> Vec<(ShareRecordKey, Option<ShareRecordValue>)> {
        let group = || self.id.clone();
        let mut out = Vec::new();
        for id in &changes.removed {
            let member = || id.clone();
            out.push((
                ShareRecordKey::CurrentMemberAssignment {
                    group: group(),
                    member: member(),
                },
                None,
            ));
            out.push((
                ShareRecordKey::TargetAssignmentMember {
                    group: group(),
                    member: member(),
                },
                None,
            ));
            out.push((
                ShareRecordKey::MemberMetadata {
                    group: group(),
                    member: member(),
                },
                None,
            ));
        }
        let present = |ids: &BTreeSet<String>| -> Vec<String> {
            ids.iter()
                .filter(|id| self.members.contains_key(*id))
                .cloned()
                .collect()
        };
        // Re-joined after a removal: all its records again.
        let rejoined: BTreeSet<String> = present(&changes.removed).into_iter().collect();
        for id in present(&changes.members.union(&rejoined).cloned().collect()) {
            out.push((
                ShareRecordKey::MemberMetadata {
                    group: group(),
                    member: id.clone(),
                },
                Some(metadata_of(&self.members[&id])),
            ));
        }
        if changes.state_partitions {
            out.push((
                ShareRecordKey::StatePartitionMetadata { group: group() },
                Some(ShareRecordValue::StatePartitionMetadata {
                    initializing: Vec::new(),
                    initialized: self.state_partitions(),
                    deleting: Vec::new(),
                }),
            ));
        }
        if changes.epoch {
            out.push((
                ShareRecordKey::GroupMetadata { group: group() },
                Some(ShareRecordValue::GroupMetadata {
                    epoch: self.epoch,
                    metadata_hash: self.metadata_hash,
                }),
            ));
        }
        let targets: Option<BTreeSet<String>> = match &changes.target {
            Some(t) => Some(t.union(&rejoined).cloned().collect()),
            None if !rejoined.is_empty() => Some(rejoined.clone()),
            None => None,
        };
        if let Some(members) = targets {
            for id in &members {
                if let Some(t) = self.target.get(id) {
                    out.push((
                        ShareRecordKey::TargetAssignmentMember {
                            group: group(),
                            member: id.clone(),
                        },
                        Some(ShareRecordValue::TargetAssignmentMember(t.clone())),
                    ));
                }
            }
            out.push((
                ShareRecordKey::TargetAssignmentMetadata { group: group() },
                Some(ShareRecordValue::TargetAssignmentMetadata {
                    assignment_epoch: self.assignment_epoch,
                }),
            ));
        }
        for id in present(&changes.current.union(&rejoined).cloned().collect()) {
            let m = &self.members[&id];
            out.push((
                ShareRecordKey::CurrentMemberAssignment {
                    group: group(),
                    member: id.clone(),
                },
                Some(ShareRecordValue::CurrentMemberAssignment {
                    member_epoch: m.epoch,
                    previous_member_epoch: m.previous_epoch,
                    assigned: m.assigned.clone(),
                }),
            ));
        }
        out
    }

    /// Every record of the group as it is.
    pub fn all_records(&self) -> Vec<(ShareRecordKey, Option<ShareRecordValue>)> {
        let ids: BTreeSet<String> = self.members.keys().cloned().collect();
        self.records_for(&ShareChanges {
            epoch: true,
            members: ids.clone(),
            target: Some(self.target.keys().cloned().collect()),
            current: ids,
            removed: BTreeSet::new(),
            state_partitions: true,
        })
    }

    /// The records that delete the group (DeleteGroups of an empty group), in Kafka's
    /// order (`ShareGroup.createGroupTombstoneRecords`): the group metadata last, so a
    /// replay cut short still finds the group.
    pub fn tombstones(&self) -> Vec<(ShareRecordKey, Option<ShareRecordValue>)> {
        let group = || self.id.clone();
        let mut out = Vec::new();
        for id in self.members.keys() {
            out.push((
                ShareRecordKey::CurrentMemberAssignment {
                    group: group(),
                    member: id.clone(),
                },
                None,
            ));
        }
        for id in self
            .members
            .keys()
            .chain(self.target.keys())
            .collect::<BTreeSet<_>>()
        {
            out.push((
                ShareRecordKey::TargetAssignmentMember {
                    group: group(),
                    member: id.clone(),
                },
                None,
            ));
        }
        out.push((
            ShareRecordKey::TargetAssignmentMetadata { group: group() },
            None,
        ));
        for id in self.members.keys() {
            out.push((
                ShareRecordKey::MemberMetadata {
                    group: group(),
                    member: id.clone(),
                },
                None,
            ));
        }
        out.push((
            ShareRecordKey::StatePartitionMetadata { group: group() },
            None,
        ));
        out.push((ShareRecordKey::GroupMetadata { group: group() }, None));
        out
    }

    /// Replays one record; `None` deletes. The group is whole once
    /// [`Self::finish_restore`] has run. Returns false for a group-metadata tombstone:
    /// the group is gone.
    pub fn restore(&mut self, key: &ShareRecordKey, value: Option<ShareRecordValue>) -> bool {
        match (key, value) {
            (ShareRecordKey::GroupMetadata { .. }, None) => return false,
            (
                _,
                Some(ShareRecordValue::GroupMetadata {
                    epoch,
                    metadata_hash,
                }),
            ) => {
                self.epoch = epoch;
                self.metadata_hash = metadata_hash;
            }
            (
                _,
                Some(ShareRecordValue::StatePartitionMetadata {
                    initializing,
                    initialized,
                    ..
                }),
            ) => {
                self.state_partitions = BTreeMap::new();
                for (id, name, ps) in initializing.into_iter().chain(initialized) {
                    self.state_partitions
                        .entry(id)
                        .or_insert_with(|| (name, BTreeSet::new()))
                        .1
                        .extend(ps);
                }
            }
            (ShareRecordKey::StatePartitionMetadata { .. }, None) => {
                self.state_partitions.clear();
            }
            (_, Some(ShareRecordValue::TargetAssignmentMetadata { assignment_epoch })) => {
                self.assignment_epoch = assignment_epoch;
            }
            (
                ShareRecordKey::MemberMetadata { member, .. },
                Some(ShareRecordValue::MemberMetadata {
                    rack_id,
                    client_id,
                    client_host,
                    subscribed_topic_names,
                }),
            ) => {
                let m = self.member_entry(member);
                m.rack_id = rack_id;
                m.client_id = client_id;
                m.client_host = client_host;
                m.subscribed = subscribed_topic_names.into_iter().collect();
            }
            (
                ShareRecordKey::TargetAssignmentMember { member, .. },
                Some(ShareRecordValue::TargetAssignmentMember(a)),
            ) => {
                self.target.insert(member.clone(), a);
            }
            (
                ShareRecordKey::CurrentMemberAssignment { member, .. },
                Some(ShareRecordValue::CurrentMemberAssignment {
                    member_epoch,
                    previous_member_epoch,
                    assigned,
                }),
            ) => {
                let m = self.member_entry(member);
                m.epoch = member_epoch;
                m.previous_epoch = previous_member_epoch;
                m.assigned = assigned;
            }
            (ShareRecordKey::MemberMetadata { member, .. }, None) => {
                self.members.remove(member);
            }
            (ShareRecordKey::TargetAssignmentMember { member, .. }, None) => {
                self.target.remove(member);
            }
            (ShareRecordKey::CurrentMemberAssignment { member, .. }, None) => {
                if let Some(m) = self.members.get_mut(member) {
                    m.epoch = 0;
                    m.previous_epoch = 0;
                    m.assigned = Default::default();
                }
            }
            // A key and a value of different types: the codec decodes by the key, so
            // this is not a record this group wrote.
            _ => {}
        }
        true
    }

    fn member_entry(&mut self, id: &str) -> &mut ShareMember {
        self.members
            .entry(id.to_string())
            .or_insert_with(|| ShareMember::new(id.to_string()))
    }

    /// Ends a replay: every session starts at `now_ms`, and the topics are looked at
    /// again at the next heartbeat (the stored hash tells whether they changed).
    pub fn finish_restore(&mut self, now_ms: i64, config: &ShareGroupConfig) {
        let members = &self.members;
        self.target.retain(|id, _| members.contains_key(id));
        for m in self.members.values_mut() {
            m.session_deadline_ms = now_ms + i64::from(config.session_timeout_ms);
        }
        self.subscribed.clear();
        self.catalog_version = None;
        self.changes = ShareChanges::default();
    }
}
