//! The fixtures the families' unit tests share: a cluster of registered, unfenced
//! brokers, topics, and one-line ways to apply the commands the tests apply most.
//! Each applies its command as the next log entry and checks the image's invariants
//! after it (`next`), even where debug assertions are off.

use crate::command::*;
use crate::image::{Endpoint, MetadataImage, PartitionImage};
use std::collections::BTreeMap;
use uuid::Uuid;

pub(super) fn register(img: &mut MetadataImage, id: i32, rack: Option<&str>) -> u64 {
    register_with_dirs(img, id, rack, &[])
}

/// Registers broker `id` (a new incarnation: a restart if it was registered) with log
/// directories `dirs`, and unfences it; returns the registration's epoch.
pub(super) fn register_with_dirs(
    img: &mut MetadataImage,
    id: i32,
    rack: Option<&str>,
    dirs: &[Uuid],
) -> u64 {
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
            listeners: Vec::new(),
            controller_addr: format!("127.0.0.1:{}", 9100 + id),
            rack: rack.map(str::to_string),
            supported_features: None,
            log_dirs: dirs.to_vec(),
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
pub(super) fn next(img: &mut MetadataImage, cmd: Command) -> Outcome {
    let i = img.applied + 1;
    let out = img.apply(i, &cmd);
    assert_eq!(img.check_invariants(), Ok(()), "after {cmd:?}");
    out
}

pub(super) fn topic(name: &str, partitions: i32) -> NewTopic {
    NewTopic {
        name: name.into(),
        id: Uuid::new_v4(),
        partitions,
        replication_factor: 1,
        assignments: None,
        configs: BTreeMap::new(),
    }
}

pub(super) fn cluster(n: i32) -> (MetadataImage, Vec<u64>) {
    let mut img = MetadataImage::default();
    let epochs = (1..=n).map(|id| register(&mut img, id, None)).collect();
    (img, epochs)
}

/// A topic with explicit replica lists (its replication factor is theirs).
pub(super) fn assigned(name: &str, lists: Vec<Vec<i32>>) -> NewTopic {
    let mut t = topic(name, lists.len() as i32);
    t.replication_factor = lists[0].len() as i32;
    t.assignments = Some(lists);
    t
}

pub(super) fn create(img: &mut MetadataImage, t: NewTopic) -> Result<(), CommandError> {
    match next(img, Command::CreateTopics { topics: vec![t] }) {
        Outcome::Items(mut v) if v.len() == 1 => v.remove(0),
        other => panic!("{other:?}"),
    }
}

pub(super) fn part(img: &MetadataImage, name: &str, i: usize) -> PartitionImage {
    img.topic(name).unwrap().partitions[i].clone()
}

pub(super) fn fence(img: &mut MetadataImage, id: i32, fenced: bool) -> Result<(), CommandError> {
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
pub(super) fn isr_change(img: &MetadataImage, name: &str, i: i32, isr: &[i32]) -> IsrChange {
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
pub(super) fn set_isr(
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
pub(super) fn alter(
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

pub(super) fn shutdown(img: &mut MetadataImage, id: i32) -> Outcome {
    let epoch = img.broker(id).unwrap().epoch;
    next(img, Command::ControlledShutdown { id, epoch })
}

/// Turns unclean leader election on for the whole cluster (a broker-wide dynamic config).
pub(super) fn enable_unclean_cluster_wide(img: &mut MetadataImage) {
    let change = ConfigChange {
        name: String::new(),
        from: BTreeMap::new(),
        to: unclean("true"),
    };
    assert_eq!(
        next(img, Command::SetBrokerConfigs { change }),
        Outcome::Done(Ok(()))
    );
}

pub(super) fn unclean(on: &str) -> BTreeMap<String, String> {
    BTreeMap::from([(UNCLEAN_LEADER_ELECTION_ENABLE.to_string(), on.to_string())])
}

/// Moves partition `i` of `name` to `target` (`None`: cancels); its one result.
pub(super) fn reassign(
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
pub(super) fn moving(p: &PartitionImage) -> (Vec<i32>, Vec<i32>, Vec<i32>, Vec<i32>, i32) {
    (
        p.replicas.clone(),
        p.adding.clone(),
        p.removing.clone(),
        p.isr.clone(),
        p.leader,
    )
}
