//! The durable state of one share partition, as the share coordinator keeps it in
//! `__share_group_state` (Kafka's `ShareCoordinatorShard`): its state epoch (the
//! group's, when it was initialized), the leader epoch of the last leader that wrote,
//! the start offset, and the state batches of the records in flight that are not plain
//! AVAILABLE-and-never-delivered.
//!
//! A write is recorded as a ShareUpdate (only the batches it changed) until
//! `updates_per_snapshot` updates have followed the last ShareSnapshot (the whole state);
//! then as a ShareSnapshot again, so a replay never reads more than that many updates
//! past a snapshot. Replaying the records in order rebuilds the state exactly
//! ([`PersistedState::replay`]).
//!
//! Batches combine as Kafka's `PersisterStateBatchCombiner` does: a newer batch wins
//! over the offsets it covers, neighbours alike merge, and nothing below the start
//! offset is kept.
//!
//! Fencing: a write from a leader epoch older than the stored one is FENCED_LEADER_EPOCH,
//! from a state epoch older than the stored one FENCED_STATE_EPOCH (-1 checks neither),
//! and a write to a partition never initialized is INVALID_REQUEST; nothing is recorded
//! then.

use super::partition::{RecordState, StateBatch};
use std::collections::BTreeMap;

/// Kafka's `share.coordinator.snapshot.update.records.per.snapshot` default.
pub const UPDATES_PER_SNAPSHOT: u32 = 500;

/// One record of `__share_group_state` (its value; the key names the share partition).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum StateRecord {
    Snapshot {
        snapshot_epoch: i32,
        state_epoch: i32,
        leader_epoch: i32,
        start_offset: i64,
        /// -1 when not known (KIP-1226's count of done records at or past the start).
        delivery_complete_count: i32,
        create_timestamp_ms: i64,
        write_timestamp_ms: i64,
        batches: Vec<StateBatch>,
    },
    Update {
        snapshot_epoch: i32,
        leader_epoch: i32,
        /// -1: unchanged.
        start_offset: i64,
        delivery_complete_count: i32,
        batches: Vec<StateBatch>,
    },
}

/// A WriteShareGroupState for one share partition.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct StateWrite {
    pub state_epoch: i32,
    pub leader_epoch: i32,
    /// -1: unchanged.
    pub start_offset: i64,
    pub delivery_complete_count: i32,
    pub batches: Vec<StateBatch>,
}

#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum StateError {
    #[error("the leader epoch {0} is older than the stored {1}")]
    FencedLeaderEpoch(i32, i32),
    #[error("the state epoch {0} is older than the stored {1}")]
    FencedStateEpoch(i32, i32),
    #[error("the share partition's state was never initialized")]
    Uninitialized,
}

/// One share partition's state, rebuilt from its records.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct PersistedState {
    pub snapshot_epoch: i32,
    pub state_epoch: i32,
    pub leader_epoch: i32,
    /// -1 until initialized with a start.
    pub start_offset: i64,
    pub delivery_complete_count: i32,
    pub create_timestamp_ms: i64,
    pub batches: Vec<StateBatch>,
    /// Updates replayed since the last snapshot.
    pub updates_since_snapshot: u32,
    /// Whether any record of this partition was replayed.
    pub initialized: bool,
}

impl PersistedState {
    /// Takes one record, in log order.
    pub fn replay(&mut self, record: &StateRecord) {
        match record {
            StateRecord::Snapshot {
                snapshot_epoch,
                state_epoch,
                leader_epoch,
                start_offset,
                delivery_complete_count,
                create_timestamp_ms,
                batches,
                ..
            } => {
                self.snapshot_epoch = *snapshot_epoch;
                self.state_epoch = self.state_epoch.max(*state_epoch);
                self.leader_epoch = self.leader_epoch.max(*leader_epoch);
                self.start_offset = *start_offset;
                self.delivery_complete_count = *delivery_complete_count;
                self.create_timestamp_ms = *create_timestamp_ms;
                self.batches = combine(&[], batches, *start_offset);
                self.updates_since_snapshot = 0;
            }
            StateRecord::Update {
                leader_epoch,
                start_offset,
                delivery_complete_count,
                batches,
                ..
            } => {
                self.leader_epoch = self.leader_epoch.max(*leader_epoch);
                if *start_offset != -1 {
                    self.start_offset = *start_offset;
                }
                self.delivery_complete_count = *delivery_complete_count;
                self.batches = combine(&self.batches, batches, self.start_offset);
                self.updates_since_snapshot += 1;
            }
        }
        self.initialized = true;
    }

    /// The record an InitializeShareGroupState writes: a snapshot at `state_epoch`, its
    /// start (-1 for one `share.auto.offset.reset` decides later), nothing in flight.
    pub fn initialize(&self, state_epoch: i32, start_offset: i64, now_ms: i64) -> StateRecord {
        StateRecord::Snapshot {
            snapshot_epoch: if self.initialized {
                self.snapshot_epoch + 1
            } else {
                0
            },
            state_epoch,
            leader_epoch: 0,
            start_offset,
            delivery_complete_count: -1,
            create_timestamp_ms: now_ms,
            write_timestamp_ms: now_ms,
            batches: Vec::new(),
        }
    }

    /// The record a WriteShareGroupState writes, or why it is refused.
    pub fn write(
        &self,
        w: &StateWrite,
        updates_per_snapshot: u32,
        now_ms: i64,
    ) -> Result<StateRecord, StateError> {
        if !self.initialized {
            return Err(StateError::Uninitialized);
        }
        if w.leader_epoch != -1 && w.leader_epoch < self.leader_epoch {
            return Err(StateError::FencedLeaderEpoch(
                w.leader_epoch,
                self.leader_epoch,
            ));
        }
        if w.state_epoch != -1 && w.state_epoch < self.state_epoch {
            return Err(StateError::FencedStateEpoch(
                w.state_epoch,
                self.state_epoch,
            ));
        }
        let leader_epoch = w.leader_epoch.max(self.leader_epoch);
        if self.updates_since_snapshot >= updates_per_snapshot {
            let start = if w.start_offset == -1 {
                self.start_offset
            } else {
                w.start_offset
            };
            return Ok(StateRecord::Snapshot {
                snapshot_epoch: self.snapshot_epoch + 1,
                state_epoch: self.state_epoch.max(w.state_epoch),
                leader_epoch,
                start_offset: start,
                delivery_complete_count: w.delivery_complete_count,
                create_timestamp_ms: now_ms,
                write_timestamp_ms: now_ms,
                batches: combine(&self.batches, &w.batches, start),
            });
        }
        Ok(StateRecord::Update {
            snapshot_epoch: self.snapshot_epoch,
            leader_epoch,
            start_offset: w.start_offset,
            delivery_complete_count: w.delivery_complete_count,
            batches: combine(&[], &w.batches, -1),
        })
    }
}

/// `newer` painted over `base`: the offsets a newer batch covers take its state and
/// count; neighbours alike merge; nothing below `start` stays (a batch crossing it is
/// cut there). -1 keeps everything.
pub fn combine(base: &[StateBatch], newer: &[StateBatch], start: i64) -> Vec<StateBatch> {
    // first offset -> (last, state, deliveries), non-overlapping.
    let mut map: BTreeMap<i64, (i64, RecordState, u16)> = BTreeMap::new();
    for b in base.iter().chain(newer) {
        if b.last < b.first {
            continue;
        }
        // Cut what overlaps [b.first, b.last] out of the map.
        let overlapping: Vec<i64> = map
            .range(..=b.last)
            .filter(|(_, (last, _, _))| *last >= b.first)
            .map(|(first, _)| *first)
            .collect();
        for first in overlapping {
            let (last, state, n) = map.remove(&first).expect("listed above");
            if first < b.first {
                map.insert(first, (b.first - 1, state, n));
            }
            if last > b.last {
                map.insert(b.last + 1, (last, state, n));
            }
        }
        map.insert(b.first, (b.last, b.state, b.deliveries));
    }
    let mut out: Vec<StateBatch> = Vec::new();
    for (first, (last, state, deliveries)) in map {
        if start >= 0 && last < start {
            continue;
        }
        let first = if start >= 0 { first.max(start) } else { first };
        if let Some(prev) = out.last_mut() {
            if prev.last + 1 == first && prev.state == state && prev.deliveries == deliveries {
                prev.last = last;
                continue;
            }
        }
        out.push(StateBatch {
            first,
            last,
            state,
            deliveries,
        });
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn batch(first: i64, last: i64, state: RecordState, deliveries: u16) -> StateBatch {
        StateBatch {
            first,
            last,
            state,
            deliveries,
        }
    }

    #[test]
    fn a_newer_batch_wins_and_nothing_below_the_start_stays() {
        let base = vec![batch(0, 9, RecordState::Available, 1)];
        let newer = vec![batch(3, 4, RecordState::Acknowledged, 1)];
        assert_eq!(
            combine(&base, &newer, 2),
            vec![
                batch(2, 2, RecordState::Available, 1),
                batch(3, 4, RecordState::Acknowledged, 1),
                batch(5, 9, RecordState::Available, 1),
            ]
        );
    }

    #[test]
    fn writes_are_fenced_by_older_epochs_and_refused_before_initialization() {
        let mut s = PersistedState::default();
        let w = StateWrite {
            state_epoch: 1,
            leader_epoch: 5,
            start_offset: 0,
            delivery_complete_count: -1,
            batches: Vec::new(),
        };
        assert_eq!(s.write(&w, 2, 0), Err(StateError::Uninitialized));
        s.replay(&s.initialize(2, -1, 0));
        assert_eq!(s.write(&w, 2, 0), Err(StateError::FencedStateEpoch(1, 2)));
        let w = StateWrite {
            state_epoch: 2,
            ..w
        };
        let r = s.write(&w, 2, 0).expect("a write");
        s.replay(&r);
        let stale = StateWrite {
            leader_epoch: 4,
            ..w
        };
        assert_eq!(
            s.write(&stale, 2, 0),
            Err(StateError::FencedLeaderEpoch(4, 5))
        );
    }

    fn batches() -> impl Strategy<Value = Vec<StateBatch>> {
        proptest::collection::vec(
            (
                0i64..40,
                0i64..6,
                prop_oneof![Just(0i8), Just(2i8), Just(4i8)],
                0u16..4,
            ),
            0..5,
        )
        .prop_map(|v| {
            v.into_iter()
                .map(|(f, n, s, d)| batch(f, f + n, RecordState::from_id(s).expect("known"), d))
                .collect()
        })
    }

    proptest! {
        /// Writes recorded as updates and snapshots, replayed in order, give the same
        /// state as painting every write's batches over the last, one offset at a time,
        /// above the start.
        #[test]
        fn a_replay_of_the_records_is_the_writes_applied_in_order(
            writes in proptest::collection::vec((batches(), prop_oneof![Just(-1i64), 0i64..20]), 1..12),
            per_snapshot in 0u32..4,
        ) {
            let mut s = PersistedState::default();
            s.replay(&s.initialize(1, 0, 0));
            let mut model: BTreeMap<i64, (RecordState, u16)> = BTreeMap::new();
            let mut start = 0i64;
            let mut log = vec![s.initialize(1, 0, 0)];
            for (bs, new_start) in writes {
                let w = StateWrite {
                    state_epoch: 1,
                    leader_epoch: 0,
                    start_offset: new_start,
                    delivery_complete_count: -1,
                    batches: bs.clone(),
                };
                let r = s.write(&w, per_snapshot, 0).expect("not fenced");
                s.replay(&r);
                log.push(r);
                for b in &bs {
                    for o in b.first..=b.last {
                        model.insert(o, (b.state, b.deliveries));
                    }
                }
                if new_start != -1 {
                    start = new_start;
                }
                model.retain(|o, _| *o >= start);
            }
            let mut replayed = PersistedState::default();
            for r in &log {
                replayed.replay(r);
            }
            prop_assert_eq!(&replayed.batches, &s.batches);
            prop_assert_eq!(replayed.start_offset, start);
            let flat: BTreeMap<i64, (RecordState, u16)> = s
                .batches
                .iter()
                .flat_map(|b| (b.first..=b.last).map(move |o| (o, (b.state, b.deliveries))))
                .collect();
            prop_assert_eq!(flat, model);
            for b in &s.batches {
                prop_assert!(b.first <= b.last && b.first >= start, "{:?} (start {})", b, start);
            }
            prop_assert!(s.updates_since_snapshot <= per_snapshot);
        }
    }
}
