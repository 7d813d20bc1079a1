//! What a shard must do to make its partitions what a published metadata version says:
//! a pure plan, which the shard then carries out (`Shard::reconcile`).
//!
//! The plan: drop the open partitions whose topic is gone (or was deleted and created
//! again: another topic id) or no longer has a replica here; re-resolve the configs of
//! topics whose overrides changed, or of all when the broker config layers changed; open
//! the partitions this broker holds a replica of and the shard owns that are not open.
//! Each open partition's role (leader or follower, its epoch and ISR) is not planned:
//! the shard takes it up from the metadata after the plan (`Shard::apply_roles`).
//!
//! Invariants: a plan never both drops and opens the same partition unless its topic id
//! changed (drops are carried out first); `Reconciled` is advanced by the plan itself,
//! so the next plan compares against what this one decided.

use crate::mesh::TopicPartition;
use crate::metadata::ClusterMetadata;
use std::collections::{BTreeMap, HashMap, HashSet};
use std::sync::Arc;

/// What a shard last made of each topic it holds partitions of: the topic id and the
/// overrides its partitions were configured with; and the broker config layers.
#[derive(Default)]
pub struct Reconciled {
    topics: HashMap<Arc<str>, (uuid::Uuid, BTreeMap<String, String>)>,
    broker_configs: BTreeMap<String, BTreeMap<String, String>>,
}

/// One open partition as the plan needs to know it.
pub struct OpenPartition {
    pub tp: TopicPartition,
}

#[derive(Debug, Default, PartialEq, Eq)]
pub struct Plan {
    /// Closed and their directories removed.
    pub drop: BTreeMap<Arc<str>, Vec<i32>>,
    /// Every open partition's config re-resolved.
    pub reconfigure_all: bool,
    /// These topics' partitions re-resolved.
    pub reconfigure: Vec<Arc<str>>,
    pub open: BTreeMap<Arc<str>, Vec<i32>>,
}

impl Plan {
    pub fn is_empty(&self) -> bool {
        *self == Plan::default()
    }
}

/// The plan for broker `node`'s shard that owns what `owns` says, with `open` open.
pub fn plan(
    meta: &ClusterMetadata,
    node: i32,
    owns: impl Fn(&str, i32) -> bool,
    open: &[OpenPartition],
    reconciled: &mut Reconciled,
) -> Plan {
    let mut plan = Plan::default();
    let mut still_open: HashSet<TopicPartition> = HashSet::new();
    for o in open {
        let known = reconciled.topics.get(&o.tp.topic).map(|(id, _)| *id);
        let current = meta.topic(&o.tp.topic).map(|t| t.id);
        let gone = current.is_none()
            || (known.is_some() && known != current)
            || !meta.hosts(node, &o.tp.topic, o.tp.partition);
        if gone {
            plan.drop
                .entry(o.tp.topic.clone())
                .or_default()
                .push(o.tp.partition);
        } else {
            still_open.insert(o.tp.clone());
        }
    }
    reconciled
        .topics
        .retain(|t, _| still_open.iter().any(|tp| tp.topic == *t));
    if reconciled.broker_configs != meta.broker_configs {
        reconciled.broker_configs = meta.broker_configs.clone();
        plan.reconfigure_all = true;
    }
    for (t, held) in meta.hosted_by(node) {
        let name: Arc<str> = t.name.as_str().into();
        let mine: Vec<i32> = held.into_iter().filter(|p| owns(&name, *p)).collect();
        if mine.is_empty() {
            continue;
        }
        let before = reconciled
            .topics
            .insert(name.clone(), (t.id, t.configs.clone()));
        if before.is_some_and(|(id, c)| id == t.id && c != t.configs) && !plan.reconfigure_all {
            plan.reconfigure.push(name.clone());
        }
        for p in mine {
            let tp = TopicPartition {
                topic: name.clone(),
                partition: p,
            };
            if t.partition(p).is_some() && !still_open.contains(&tp) {
                plan.open.entry(name.clone()).or_default().push(p);
            }
        }
    }
    plan
}

#[cfg(test)]
mod tests {
    use super::*;
    use corelog_controller::command::{Command, NewTopic};
    use corelog_controller::image::Endpoint;
    use corelog_controller::MetadataImage;

    fn image() -> MetadataImage {
        let mut img = MetadataImage::default();
        for id in [1, 2] {
            let i = img.applied + 1;
            img.apply(
                i,
                &Command::RegisterBroker {
                    id,
                    incarnation: uuid::Uuid::from_u128(id as u128),
                    endpoint: Endpoint {
                        host: "h".into(),
                        port: 1,
                    },
                    listeners: Vec::new(),
                    controller_addr: String::new(),
                    rack: None,
                    supported_features: None,
                    log_dirs: Vec::new(),
                },
            );
            let j = img.applied + 1;
            img.apply(j, &Command::UnfenceBroker { id, epoch: i });
        }
        img
    }

    fn create(img: &mut MetadataImage, name: &str, id: u128) {
        let i = img.applied + 1;
        img.apply(
            i,
            &Command::CreateTopics {
                topics: vec![NewTopic {
                    name: name.into(),
                    id: uuid::Uuid::from_u128(id),
                    partitions: 4,
                    replication_factor: 1,
                    assignments: Some(vec![vec![1], vec![2], vec![1], vec![2]]),
                    configs: BTreeMap::new(),
                }],
            },
        );
    }

    fn meta(img: &MetadataImage) -> ClusterMetadata {
        ClusterMetadata::new(Arc::new(img.clone()))
    }

    fn open_of(plan: &Plan) -> Vec<OpenPartition> {
        plan.open
            .iter()
            .flat_map(|(t, ps)| {
                ps.iter().map(|p| OpenPartition {
                    tp: TopicPartition {
                        topic: t.clone(),
                        partition: *p,
                    },
                })
            })
            .collect()
    }

    #[test]
    fn opens_what_is_held_here_and_drops_what_was_replaced() {
        let mut img = image();
        create(&mut img, "t", 1);
        let mut done = Reconciled::default();
        let all = |_: &str, _: i32| true;
        let first = plan(&meta(&img), 1, all, &[], &mut done);
        assert_eq!(
            first.open.get("t"),
            Some(&vec![0, 2]),
            "broker 1 holds partitions 0 and 2"
        );
        let open = open_of(&first);
        assert!(
            plan(&meta(&img), 1, all, &open, &mut done).is_empty(),
            "nothing more to do"
        );
        // Only what this shard owns.
        let mut other = Reconciled::default();
        let p = plan(&meta(&img), 1, |_, p| p == 2, &[], &mut other);
        assert_eq!(p.open.get("t"), Some(&vec![2]));

        // Deleted and created again under the same name: dropped, then opened anew.
        let i = img.applied + 1;
        img.apply(
            i,
            &Command::DeleteTopics {
                names: vec!["t".into()],
            },
        );
        create(&mut img, "t", 2);
        let again = plan(&meta(&img), 1, all, &open, &mut done);
        assert_eq!(again.drop.get("t"), Some(&vec![0, 2]));
        assert_eq!(again.open.get("t"), Some(&vec![0, 2]));
    }

    #[test]
    fn configs_and_epochs_followed() {
        let mut img = image();
        create(&mut img, "t", 1);
        let mut done = Reconciled::default();
        let all = |_: &str, _: i32| true;
        let open = open_of(&plan(&meta(&img), 1, all, &[], &mut done));
        let i = img.applied + 1;
        img.apply(
            i,
            &Command::SetTopicConfigs {
                changes: vec![corelog_controller::command::ConfigChange {
                    name: "t".into(),
                    from: BTreeMap::new(),
                    to: BTreeMap::from([("retention.ms".to_string(), "5".to_string())]),
                }],
            },
        );
        let p = plan(&meta(&img), 1, all, &open, &mut done);
        assert_eq!(p.reconfigure, vec![Arc::<str>::from("t")]);
        // A restart of broker 1: offline, then led again in a newer epoch.
        let i = img.applied + 1;
        img.apply(
            i,
            &Command::RegisterBroker {
                id: 1,
                incarnation: uuid::Uuid::from_u128(99),
                endpoint: Endpoint {
                    host: "h".into(),
                    port: 1,
                },
                listeners: Vec::new(),
                controller_addr: String::new(),
                rack: None,
                supported_features: None,
                log_dirs: Vec::new(),
            },
        );
        let j = img.applied + 1;
        img.apply(j, &Command::UnfenceBroker { id: 1, epoch: i });
        // The partitions stay open: their new leadership is the shard's to take up
        // (`Shard::apply_roles`), not a plan's.
        let p = plan(&meta(&img), 1, all, &open, &mut done);
        assert!(p.is_empty(), "{p:?}");
    }
}
