//! Controller nodes on loopback, each on its own thread as in the broker: a three-voter
//! quorum forms, spreads a topic over its brokers, survives the loss of its leader,
//! fences a silent broker and takes it back, lets an observer join, brings a node that
//! missed several snapshots up to date from a snapshot, and refuses a data directory of
//! another cluster.

use corelog_controller::command::{NewTopic, Outcome};
use corelog_controller::image::{Endpoint, NO_LEADER};
use corelog_controller::{Command, ControllerNode, MetadataImage, NodeConfig};
use std::collections::BTreeMap;
use std::path::Path;
use std::sync::Arc;
use std::time::{Duration, Instant};

const SESSION: Duration = Duration::from_secs(2);

/// A port free now, chosen below the kernel's ephemeral range (32768 and up by default):
/// a port the kernel handed out for `127.0.0.1:0` could be taken, between this choice and
/// the node's bind, as the source port of another test's outgoing connection (the tests
/// of this binary run at once), which made a node's start fail with AddrInUse.
fn free_port() -> u16 {
    use std::sync::atomic::{AtomicU32, Ordering};
    static NEXT: AtomicU32 = AtomicU32::new(0);
    let base = 20_000 + (std::process::id() % 60) * 100;
    loop {
        let n = NEXT.fetch_add(1, Ordering::Relaxed);
        let port = u16::try_from(base + n % 6_000).expect("below 32768");
        if std::net::TcpListener::bind(("127.0.0.1", port)).is_ok() {
            return port;
        }
    }
}

struct Cluster {
    root: tempfile::TempDir,
    voters: BTreeMap<i32, String>,
    nodes: BTreeMap<i32, ControllerNode>,
    snapshot_every: u64,
}

impl Cluster {
    fn new(voters: i32, snapshot_every: u64) -> Cluster {
        let voters = (1..=voters)
            .map(|id| (id, format!("127.0.0.1:{}", free_port())))
            .collect();
        Cluster {
            root: tempfile::tempdir().expect("tempdir"),
            voters,
            nodes: BTreeMap::new(),
            snapshot_every,
        }
    }

    fn config(&self, id: i32, dir: &Path, listen: String) -> NodeConfig {
        NodeConfig {
            node_id: id,
            dir: dir.to_path_buf(),
            listen,
            voters: self.voters.clone(),
            endpoint: Endpoint {
                host: "127.0.0.1".into(),
                port: 19000 + id as u16,
            },
            listeners: Vec::new(),
            rack: None,
            log_dirs: Vec::new(),
            log_dir_ids: Vec::new(),
            session_timeout: SESSION,
            heartbeat_interval: Duration::from_millis(300),
            snapshot_every: self.snapshot_every,
            initial_cluster_id: None,
            leader_balance: None,
            // The tests place partitions on purpose.
            balancer: corelog_controller::balancer::Balancer {
                enabled: false,
                ..Default::default()
            },
            security: Default::default(),
            features: corelog_controller::features::ConfiguredLevels {
                transaction_version: 2,
                share_version: 1,
            },
        }
    }

    fn start(&mut self, id: i32) {
        let listen = self
            .voters
            .get(&id)
            .cloned()
            .unwrap_or_else(|| format!("127.0.0.1:{}", 19100 + id));
        let dir = self.root.path().join(format!("node-{id}"));
        let node = ControllerNode::start(self.config(id, &dir, listen)).expect("node starts");
        self.nodes.insert(id, node);
    }

    fn stop(&mut self, id: i32) {
        if let Some(n) = self.nodes.remove(&id) {
            n.shutdown();
        }
    }

    fn node(&self, id: i32) -> &ControllerNode {
        &self.nodes[&id]
    }

    fn leader(&self, within: Duration) -> i32 {
        wait_for(within, "a leader among the running nodes", || {
            self.nodes
                .values()
                .filter_map(|n| n.leader())
                .find(|l| self.nodes.contains_key(l))
        })
    }

    /// Waits until every running node has applied the same image, and returns it.
    fn converged(&self, within: Duration) -> Arc<MetadataImage> {
        wait_for(within, "every node at the same image", || {
            let images: Vec<Arc<MetadataImage>> = self.nodes.values().map(|n| n.image()).collect();
            let first = serde_json::to_string(&*images[0]).ok()?;
            images
                .iter()
                .all(|i| serde_json::to_string(&**i).ok().as_deref() == Some(&first))
                .then(|| images[0].clone())
        })
    }
}

impl Drop for Cluster {
    fn drop(&mut self) {
        let ids: Vec<i32> = self.nodes.keys().copied().collect();
        for id in ids {
            self.stop(id);
        }
    }
}

fn wait_for<T>(within: Duration, what: &str, mut f: impl FnMut() -> Option<T>) -> T {
    let deadline = Instant::now() + within;
    loop {
        if let Some(v) = f() {
            return v;
        }
        assert!(Instant::now() < deadline, "timed out waiting for {what}");
        std::thread::sleep(Duration::from_millis(50));
    }
}

/// Waits on the test's own thread: the futures run their work on the nodes' threads.
fn block<F: std::future::Future>(f: F) -> F::Output {
    tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .expect("runtime")
        .block_on(f)
}

fn create(node: &ControllerNode, name: &str, partitions: i32) -> Outcome {
    let cmd = Command::CreateTopics {
        topics: vec![NewTopic {
            name: name.into(),
            id: uuid::Uuid::new_v4(),
            partitions,
            replication_factor: 1,
            assignments: None,
            configs: BTreeMap::new(),
        }],
    };
    block(node.propose(cmd, Duration::from_secs(20)))
        .expect("committed")
        .outcome
}

fn all_live(image: &MetadataImage, ids: &[i32]) -> bool {
    ids.iter().all(|id| image.is_live(*id))
}

#[test]
fn three_voters_spread_fail_over_fence_and_take_back() {
    let mut c = Cluster::new(3, 1000);
    for id in 1..=3 {
        c.start(id);
    }
    let leader = c.leader(Duration::from_secs(10));
    wait_for(Duration::from_secs(10), "three live brokers", || {
        all_live(&c.node(leader).image(), &[1, 2, 3]).then_some(())
    });
    // Proposed on a follower: carried to the leader.
    let follower = (1..=3).find(|id| *id != leader).unwrap();
    assert_eq!(
        create(c.node(follower), "spread", 30),
        Outcome::Items(vec![Ok(())])
    );
    let image = c.converged(Duration::from_secs(10));
    assert!(image.cluster_id.is_some());
    let mut per_broker = BTreeMap::new();
    for p in &image.topic("spread").unwrap().partitions {
        *per_broker.entry(p.leader).or_insert(0) += 1;
    }
    assert_eq!(per_broker, BTreeMap::from([(1, 10), (2, 10), (3, 10)]));

    // The leader goes: a new one within 10 s, and creates still work.
    let led_by_old: Vec<usize> = image
        .topic("spread")
        .unwrap()
        .partitions
        .iter()
        .enumerate()
        .filter(|(_, p)| p.leader == leader)
        .map(|(i, _)| i)
        .collect();
    let t0 = Instant::now();
    c.stop(leader);
    let new_leader = c.leader(Duration::from_secs(10));
    assert_ne!(new_leader, leader);
    assert!(t0.elapsed() < Duration::from_secs(10));
    assert_eq!(
        create(c.node(new_leader), "after", 3),
        Outcome::Items(vec![Ok(())])
    );
    // Silent past the session timeout: fenced, its partitions offline.
    let image = wait_for(Duration::from_secs(15), "the old leader fenced", || {
        let i = c.node(new_leader).image();
        (!i.is_live(leader)).then_some(i)
    });
    for p in &led_by_old {
        let part = &image.topic("spread").unwrap().partitions[*p];
        assert_eq!((part.leader, part.leader_epoch), (NO_LEADER, 1));
    }
    assert!(image
        .topic("after")
        .unwrap()
        .partitions
        .iter()
        .all(|p| p.leader != leader));

    // Back with the same directory: a new incarnation, unfenced once caught up, and it
    // leads its partitions again in a new epoch.
    c.start(leader);
    let image = wait_for(Duration::from_secs(15), "the old leader back", || {
        let i = c.node(new_leader).image();
        all_live(&i, &[1, 2, 3]).then_some(i)
    });
    for p in &led_by_old {
        let part = &image.topic("spread").unwrap().partitions[*p];
        assert_eq!(part.leader, leader);
        assert!(part.leader_epoch >= 2);
    }
    let image = c.converged(Duration::from_secs(10));
    assert_eq!(image.topics.len(), 2);

    // Everything restarted: the same metadata.
    let before = serde_json::to_value(&image.topics).unwrap();
    for id in 1..=3 {
        c.stop(id);
    }
    for id in 1..=3 {
        c.start(id);
    }
    c.leader(Duration::from_secs(10));
    let image = c.converged(Duration::from_secs(10));
    assert_eq!(serde_json::to_value(&image.topics).unwrap(), before);
}

#[test]
fn an_observer_joins_and_takes_partitions() {
    let mut c = Cluster::new(3, 1000);
    for id in 1..=4 {
        c.start(id);
    }
    let leader = c.leader(Duration::from_secs(10));
    wait_for(Duration::from_secs(15), "four live brokers", || {
        all_live(&c.node(leader).image(), &[1, 2, 3, 4]).then_some(())
    });
    assert_eq!(create(c.node(4), "four", 8), Outcome::Items(vec![Ok(())]));
    let image = c.converged(Duration::from_secs(10));
    let on_4 = image
        .topic("four")
        .unwrap()
        .partitions
        .iter()
        .filter(|p| p.leader == 4)
        .count();
    assert_eq!(on_4, 2);
    // The leader the observer reports is the quorum's current one (an election may
    // have moved it since it was first seen, on a loaded machine).
    let q = wait_for(
        Duration::from_secs(10),
        "the observer to report the leader",
        || {
            let q = block(c.node(4).describe_quorum()).expect("quorum");
            let now = c.leader(Duration::from_secs(10));
            (q.leader == Some(now as u64)).then_some(q)
        },
    );
    assert_eq!(
        q.voters.iter().map(|v| v.id).collect::<Vec<_>>(),
        vec![1, 2, 3]
    );
    assert_eq!(
        q.observers.iter().map(|v| v.id).collect::<Vec<_>>(),
        vec![4]
    );
}

#[test]
fn a_node_behind_several_snapshots_catches_up_from_one() {
    let mut c = Cluster::new(3, 8);
    for id in 1..=3 {
        c.start(id);
    }
    let leader = c.leader(Duration::from_secs(10));
    wait_for(Duration::from_secs(10), "three live brokers", || {
        all_live(&c.node(leader).image(), &[1, 2, 3]).then_some(())
    });
    let behind = (1..=3).find(|id| *id != leader).unwrap();
    let left_at = c.node(behind).image().applied;
    c.stop(behind);
    for i in 0..40 {
        assert_eq!(
            create(c.node(leader), &format!("t{i}"), 1),
            Outcome::Items(vec![Ok(())])
        );
    }
    // openraft purges behind a snapshot once no replication to the absent node holds
    // the entries (its next attempt fails within its back-off).
    let purged = wait_for(
        Duration::from_secs(10),
        "the leader purging past the absent node",
        || {
            let purged = c
                .node(leader)
                .metrics()
                .purged
                .map(|l| l.index)
                .unwrap_or(0);
            (purged > left_at).then_some(purged)
        },
    );
    c.start(behind);
    let image = c.converged(Duration::from_secs(20));
    assert_eq!(image.topics.len(), 40);
    assert!(image.applied > left_at + 40);
    // What it missed had been purged from the leader's log: it came as a snapshot.
    let installed = c
        .node(behind)
        .metrics()
        .snapshot
        .map(|l| l.index)
        .unwrap_or(0);
    assert!(
        installed >= purged,
        "snapshot at {installed}, leader purged to {purged}"
    );
}

#[test]
fn another_clusters_data_directory_is_refused() {
    let mut a = Cluster::new(1, 1000);
    a.start(1);
    wait_for(Duration::from_secs(10), "cluster a named", || {
        a.node(1).image().cluster_id.clone()
    });
    a.stop(1);
    let foreign = a.root.path().join("node-1");

    let mut b = Cluster::new(1, 1000);
    b.start(1);
    wait_for(Duration::from_secs(10), "cluster b named", || {
        b.node(1).image().cluster_id.clone()
    });
    // Another node's directory.
    let listen = format!("127.0.0.1:{}", free_port());
    let mut config = b.config(2, &foreign, listen.clone());
    let refused = ControllerNode::start(config.clone())
        .err()
        .expect("refused");
    assert!(
        refused.to_string().contains("belongs to node 1"),
        "{refused}"
    );
    // The right node id, but the voters it reaches are cluster b's.
    config.node_id = 1;
    config.voters = BTreeMap::from([(1, listen), (9, b.voters[&1].clone())]);
    let refused = ControllerNode::start(config).err().expect("refused");
    assert!(refused.to_string().contains("another cluster"), "{refused}");
}
