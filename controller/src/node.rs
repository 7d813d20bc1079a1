//! A controller node: openraft, its log and state machine, the controller port, and the
//! duties of an active controller and of a broker, on a thread of their own.
//!
//! The node runs on one thread with a current-thread tokio runtime (openraft's), so
//! consensus never competes with a data-plane core for its thread, and a shard never
//! blocks on it: every call of [`ControllerNode`] is a future that a shard's executor can
//! await while the work runs here.
//!
//! Roles: a node named in `voters` is a voter (the voters initialise the quorum together
//! at first start); any other node joins as a learner, a non-voting member that follows
//! the log (Kafka's observer). Every node is also a broker: it registers, heartbeats, and
//! is fenced while silent (`liveness`).
//!
//! Files in `dir`: `node.json` (this node's id and, once known, its cluster's id: a node
//! refuses a directory of another node, and refuses to start when the quorum it reaches
//! is another cluster's), the Raft log (`raft_log`), the snapshot (`state_machine`).

use crate::balancer;
use crate::command::Command;
use crate::heartbeats::Heartbeats;
use crate::image::MetadataImage;
use crate::leader_balance;
use crate::liveness;
use crate::network::{CallError, ClusterIdCell, Network, PeerClient, PeerHealth};
pub use crate::node_config::NodeConfig;
use crate::node_state::{leader_addr, local_quorum, write_local, Liveness, Shared};
use crate::raft_log::RaftLog;
use crate::rpc::{Heartbeat, QuorumDescription, Request, Response, RpcError};
use crate::server;
use crate::state_machine::{Applied, MetadataRaft, MetadataStateMachine, Proposal};
use openraft::{BasicNode, Raft, SnapshotPolicy};
use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;
use std::io;
use std::path::Path;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};
use tokio::sync::watch;
use uuid::Uuid;

type NodeId = u64;

#[derive(Debug, thiserror::Error)]
pub enum NodeError {
    #[error("{0}")]
    Io(#[from] io::Error),
    #[error("{0}")]
    Refused(String),
}

#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ProposeError {
    #[error("no active controller answered within {0:?}")]
    Timeout(Duration),
    #[error("{0}")]
    Unavailable(String),
}

/// What is persisted about this node in `node.json`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
struct NodeIdentity {
    node_id: i32,
    cluster_id: Option<String>,
    /// The data directory's format (`DATA_DIR_FORMAT` when written); absent from data
    /// directories of releases before it, which are format 1. A release meeting a newer
    /// one refuses the directory: a later release raises it when it lays files out in a
    /// way this one would misread.
    #[serde(default = "first_format")]
    format: u32,
}

/// The data directory format this release writes and reads.
const DATA_DIR_FORMAT: u32 = 1;

fn first_format() -> u32 {
    1
}

const IDENTITY_FILE: &str = "node.json";
/// How often a registration that lacks its feature ranges is sent again.
const FEATURES_RESEND: Duration = Duration::from_secs(3);
/// How long one forwarded call may take before it is retried elsewhere.
const CALL_TIMEOUT: Duration = Duration::from_secs(5);
/// How long to wait between attempts when no controller is known.
const RETRY_BACKOFF: Duration = Duration::from_millis(100);

/// A running controller node; clones share it.
#[derive(Clone)]
pub struct ControllerNode {
    shared: Arc<Shared>,
    rt: tokio::runtime::Handle,
    stop: Arc<watch::Sender<bool>>,
    thread: Arc<Mutex<Option<std::thread::JoinHandle<()>>>>,
}

impl ControllerNode {
    /// Starts the node on a thread of its own; returns once it listens and its files are
    /// open, or with why it cannot start.
    pub fn start(config: NodeConfig) -> Result<ControllerNode, NodeError> {
        let (tx, rx) = std::sync::mpsc::channel();
        let thread = std::thread::Builder::new()
            .name("controller".into())
            .spawn(move || {
                let rt = match tokio::runtime::Builder::new_current_thread()
                    .enable_all()
                    .build()
                {
                    Ok(rt) => rt,
                    Err(e) => {
                        let _ = tx.send(Err(NodeError::Io(e)));
                        return;
                    }
                };
                let handle = rt.handle().clone();
                rt.block_on(async move {
                    match boot(config).await {
                        Ok((shared, listener)) => {
                            let (stop_tx, mut stop_rx) = watch::channel(false);
                            let stop_tx = Arc::new(stop_tx);
                            let _ = tx.send(Ok((shared.clone(), handle, stop_tx)));
                            run(shared.clone(), listener, &mut stop_rx).await;
                            if let Err(e) = shared.raft.shutdown().await {
                                tracing::warn!(error = %e, "stopping openraft");
                            }
                        }
                        Err(e) => {
                            let _ = tx.send(Err(e));
                        }
                    }
                });
            })?;
        let (shared, rt, stop) = rx.recv().map_err(|_| {
            NodeError::Refused("the controller thread exited while starting".into())
        })??;
        Ok(ControllerNode {
            shared,
            rt,
            stop,
            thread: Arc::new(Mutex::new(Some(thread))),
        })
    }

    pub fn node_id(&self) -> i32 {
        self.shared.config.node_id
    }

    /// The latest applied metadata, and every later image as it is applied.
    pub fn subscribe(&self) -> watch::Receiver<Arc<MetadataImage>> {
        self.shared.sm.subscribe()
    }

    pub fn image(&self) -> Arc<MetadataImage> {
        self.shared.sm.image()
    }

    /// Calls `publish` with the current image and then with every later one, on the
    /// controller thread, in order.
    pub fn on_publish(&self, publish: impl Fn(Arc<MetadataImage>) + Send + 'static) {
        let mut images = self.shared.sm.subscribe();
        self.rt.spawn(async move {
            loop {
                let image = images.borrow_and_update().clone();
                publish(image);
                if images.changed().await.is_err() {
                    return;
                }
            }
        });
    }

    /// The active controller's id, if known.
    pub fn leader(&self) -> Option<i32> {
        self.shared
            .raft
            .metrics()
            .borrow()
            .current_leader
            .and_then(|l| i32::try_from(l).ok())
    }

    /// openraft's view of this node: term, state, log, snapshot and purge points.
    pub fn metrics(&self) -> openraft::RaftMetrics<NodeId, BasicNode> {
        self.shared.raft.metrics().borrow().clone()
    }

    /// This broker's registration epoch, once it is registered.
    pub fn registration(&self) -> watch::Receiver<Option<u64>> {
        self.shared.registered.subscribe()
    }

    /// Why this broker may not join the cluster, once it is known: the registration was
    /// refused for good, or this node's controller stopped (a metadata log record it
    /// cannot apply, a failed disk).
    pub fn refusal(&self) -> Option<String> {
        if let Some(why) = self.shared.refused.borrow().clone() {
            return Some(why);
        }
        match &self.shared.raft.metrics().borrow().running_state {
            Err(e) => Some(format!("the controller stopped: {e}")),
            Ok(()) => None,
        }
    }

    /// Commits `command` through the active controller (wherever it is), retrying for
    /// up to `timeout`; applied at most once however often it is retried.
    pub fn propose(
        &self,
        command: Command,
        timeout: Duration,
    ) -> impl std::future::Future<Output = Result<Applied, ProposeError>> + Send + 'static {
        let shared = self.shared.clone();
        let task = self
            .rt
            .spawn(async move { propose(&shared, command, timeout).await });
        async move {
            task.await
                .unwrap_or_else(|e| Err(ProposeError::Unavailable(format!("controller task: {e}"))))
        }
    }

    /// The result of applying `command` to the current image, without committing it
    /// (CreateTopics' validate-only).
    pub fn dry_run(&self, command: &Command) -> crate::command::Outcome {
        let mut image = (*self.image()).clone();
        let next = image.applied + 1;
        image.apply(next, command)
    }

    /// The quorum as the active controller sees it.
    pub fn describe_quorum(
        &self,
    ) -> impl std::future::Future<Output = Result<QuorumDescription, ProposeError>> + Send + 'static
    {
        let shared = self.shared.clone();
        let task = self.rt.spawn(async move {
            let deadline = Instant::now() + CALL_TIMEOUT;
            loop {
                if let Some(d) = local_quorum(&shared) {
                    return Ok(d);
                }
                if let Some((lid, addr)) = leader_addr(&shared) {
                    let mut c = PeerClient::new(
                        lid,
                        addr,
                        shared.cluster_id.clone(),
                        shared.config.security.clone(),
                    );
                    if let Ok(Response::DescribeQuorum(Ok(d))) =
                        c.call(Request::DescribeQuorum, CALL_TIMEOUT).await
                    {
                        return Ok(d);
                    }
                }
                if Instant::now() > deadline {
                    return Err(ProposeError::Timeout(CALL_TIMEOUT));
                }
                tokio::time::sleep(RETRY_BACKOFF).await;
            }
        });
        async move {
            task.await
                .unwrap_or_else(|e| Err(ProposeError::Unavailable(format!("controller task: {e}"))))
        }
    }

    /// Stops the node and waits for its thread.
    pub fn shutdown(&self) {
        let _ = self.stop.send(true);
        let thread = self.thread.lock().unwrap_or_else(|p| p.into_inner()).take();
        if let Some(t) = thread {
            let _ = t.join();
        }
    }
}

/// Opens the files, binds the port, starts openraft and initialises the quorum.
async fn boot(config: NodeConfig) -> Result<(Arc<Shared>, tokio::net::TcpListener), NodeError> {
    if config.node_id < 0 {
        return Err(NodeError::Refused(format!(
            "node id {} is negative",
            config.node_id
        )));
    }
    std::fs::create_dir_all(&config.dir)?;
    let identity = load_identity(&config.dir, config.node_id)?;
    let cluster_id = ClusterIdCell::default();
    if let Some(id) = &identity.cluster_id {
        cluster_id.set(id.clone());
        check_cluster_of_voters(&config, id).await?;
    }
    let listener = tokio::net::TcpListener::bind(&config.listen)
        .await
        .map_err(|e| {
            io::Error::new(
                e.kind(),
                format!("controller listener {}: {e}", config.listen),
            )
        })?;
    let log = RaftLog::<MetadataRaft>::open(&config.dir.join("log"))?;
    let sm = MetadataStateMachine::open(&config.dir.join("state"))?;
    let raft_config = openraft::Config {
        cluster_name: "corelog".into(),
        heartbeat_interval: 100,
        election_timeout_min: 800,
        election_timeout_max: 1600,
        install_snapshot_timeout: 10_000,
        snapshot_policy: SnapshotPolicy::LogsSinceLast(config.snapshot_every.max(1)),
        max_in_snapshot_log_to_keep: config.snapshot_every.clamp(1, 1000),
        // openraft purges only once this many entries can go at once (default 256): with
        // snapshots more frequent than that, purging would wait for many of them.
        purge_batch_size: config.snapshot_every.clamp(1, 256),
        ..Default::default()
    }
    .validate()
    .map_err(|e| NodeError::Refused(format!("controller config: {e}")))?;
    let id = config.node_id as NodeId;
    let peer_health = PeerHealth::default();
    let raft = Raft::new(
        id,
        Arc::new(raft_config),
        Network {
            cluster_id: cluster_id.clone(),
            security: config.security.clone(),
            health: peer_health.clone(),
        },
        log,
        sm.clone(),
    )
    .await
    .map_err(|e| NodeError::Refused(format!("starting openraft: {e}")))?;
    if config.is_voter()
        && !raft
            .is_initialized()
            .await
            .map_err(|e| NodeError::Refused(e.to_string()))?
    {
        let voters: BTreeMap<NodeId, BasicNode> = config
            .voters
            .iter()
            .map(|(id, addr)| (*id as NodeId, BasicNode::new(addr)))
            .collect();
        // Every voter initialises with the same voters; openraft lets only one such
        // membership win, and refuses it where a log already exists.
        if let Err(e) = raft.initialize(voters).await {
            tracing::debug!(error = %e, "quorum already initialised");
        }
    }
    let (registered, _) = watch::channel(None);
    let (refused, _) = watch::channel(None);
    let shared = Arc::new(Shared {
        id,
        config,
        raft,
        sm,
        cluster_id,
        peer_health,
        liveness: Mutex::new(Liveness::default()),
        liveness_wake: tokio::sync::Notify::new(),
        registered,
        refused,
    });
    Ok((shared, listener))
}

/// Serves the port and runs the duties until `stop`.
async fn run(
    shared: Arc<Shared>,
    listener: tokio::net::TcpListener,
    stop: &mut watch::Receiver<bool>,
) {
    let mut tasks = vec![
        tokio::spawn(server::serve(shared.clone(), listener)),
        tokio::spawn(liveness::lead(shared.clone())),
        tokio::spawn(broker_duties(shared.clone())),
        tokio::spawn(keep_identity(shared.clone())),
        tokio::spawn(balancer::lead(
            shared.clone(),
            shared.config.balancer.clone(),
        )),
    ];
    if let Some(balance) = shared.config.leader_balance.clone() {
        tasks.push(tokio::spawn(leader_balance::lead(shared.clone(), balance)));
    }
    while !*stop.borrow() {
        if stop.changed().await.is_err() {
            break;
        }
    }
    for t in tasks {
        t.abort();
    }
}

fn load_identity(dir: &Path, node_id: i32) -> Result<NodeIdentity, NodeError> {
    let path = dir.join(IDENTITY_FILE);
    match std::fs::read(&path) {
        Ok(bytes) => {
            let id: NodeIdentity = serde_json::from_slice(&bytes)
                .map_err(|e| NodeError::Refused(format!("{}: {e}", path.display())))?;
            if id.format > DATA_DIR_FORMAT {
                return Err(NodeError::Refused(format!(
                    "{}: the data directory is of format {}, newer than this release reads \
                     (format {DATA_DIR_FORMAT}); run the release that wrote it",
                    path.display(),
                    id.format
                )));
            }
            if id.node_id != node_id {
                return Err(NodeError::Refused(format!(
                    "{} belongs to node {}, not node {node_id}: refusing another node's data directory",
                    path.display(),
                    id.node_id
                )));
            }
            Ok(id)
        }
        Err(e) if e.kind() == io::ErrorKind::NotFound => {
            let id = NodeIdentity {
                node_id,
                cluster_id: None,
                format: DATA_DIR_FORMAT,
            };
            store_identity(dir, &id)?;
            Ok(id)
        }
        Err(e) => Err(e.into()),
    }
}

fn store_identity(dir: &Path, id: &NodeIdentity) -> io::Result<()> {
    use std::io::Write;
    let tmp = dir.join(format!("{IDENTITY_FILE}.tmp"));
    let mut f = std::fs::File::create(&tmp)?;
    f.write_all(
        &serde_json::to_vec_pretty(id)
            .map_err(|e| io::Error::new(io::ErrorKind::InvalidData, e))?,
    )?;
    f.sync_all()?;
    drop(f);
    std::fs::rename(&tmp, dir.join(IDENTITY_FILE))?;
    std::fs::File::open(dir)?.sync_all()
}

/// Refuses to start when a voter that answers belongs to another cluster (this data
/// directory is another cluster's). Voters that do not answer are not waited for.
async fn check_cluster_of_voters(config: &NodeConfig, ours: &str) -> Result<(), NodeError> {
    let cell = ClusterIdCell::default();
    cell.set(ours.to_string());
    for (id, addr) in config
        .voters
        .iter()
        .filter(|(id, _)| **id != config.node_id)
    {
        let mut c = PeerClient::new(
            *id as NodeId,
            addr.clone(),
            cell.clone(),
            config.security.clone(),
        );
        if let Err(CallError::Refused {
            source: RpcError::ClusterMismatch { ours: theirs, .. },
            ..
        }) = c
            .call(Request::DescribeQuorum, Duration::from_secs(2))
            .await
        {
            return Err(NodeError::Refused(format!(
                "{} holds cluster {ours}'s data, but voter {id} at {addr} belongs to cluster {theirs}: refusing to start on another cluster's data directory",
                config.dir.display()
            )));
        }
    }
    Ok(())
}

/// Persists the cluster id once the log names it, and stops the node from serving a
/// cluster other than the one its directory belongs to.
async fn keep_identity(shared: Arc<Shared>) {
    let mut images = shared.sm.subscribe();
    loop {
        let id = images.borrow_and_update().cluster_id.clone();
        if let Some(id) = id {
            match shared.cluster_id.get() {
                Some(known) if known == id => {}
                Some(known) => {
                    tracing::error!(ours = %known, log = %id, "the metadata log names another cluster than this data directory");
                }
                None => {
                    shared.cluster_id.set(id.clone());
                    let identity = NodeIdentity {
                        node_id: shared.config.node_id,
                        cluster_id: Some(id.clone()),
                        format: DATA_DIR_FORMAT,
                    };
                    if let Err(e) = store_identity(&shared.config.dir, &identity) {
                        tracing::error!(error = %e, "persisting the cluster id");
                    }
                    tracing::info!(cluster_id = %id, "cluster id");
                }
            }
        }
        if images.changed().await.is_err() {
            return;
        }
    }
}

async fn propose(
    shared: &Shared,
    command: Command,
    timeout: Duration,
) -> Result<Applied, ProposeError> {
    let deadline = Instant::now() + timeout;
    let proposal = Proposal {
        id: Uuid::new_v4(),
        command,
    };
    loop {
        let attempt = match write_local(shared, proposal.clone()).await {
            Ok(a) => return Ok(a),
            Err(RpcError::NotLeader {
                leader: Some((lid, addr)),
            }) if lid != shared.id => {
                let mut c = PeerClient::new(
                    lid,
                    addr,
                    shared.cluster_id.clone(),
                    shared.config.security.clone(),
                );
                let req = Request::Propose {
                    id: proposal.id,
                    command: proposal.command.clone(),
                };
                c.call(req, CALL_TIMEOUT.min(timeout)).await
            }
            Err(RpcError::Unavailable(e))
                if shared.raft.metrics().borrow().running_state.is_err() =>
            {
                return Err(ProposeError::Unavailable(e));
            }
            Err(_) => Err(CallError::Refused {
                addr: String::new(),
                source: RpcError::NotLeader { leader: None },
            }),
        };
        match attempt {
            Ok(Response::Propose(Ok(a))) => return Ok(a),
            Err(CallError::Refused {
                source: e @ RpcError::ClusterMismatch { .. },
                ..
            }) => return Err(ProposeError::Unavailable(e.to_string())),
            _ => {}
        }
        if Instant::now() >= deadline {
            return Err(ProposeError::Timeout(timeout));
        }
        tokio::time::sleep(RETRY_BACKOFF).await;
    }
}

/// This broker's registration as `incarnation`, with the feature ranges of its release.
fn registration(shared: &Shared, incarnation: Uuid) -> Command {
    Command::RegisterBroker {
        id: shared.config.node_id,
        incarnation,
        endpoint: shared.config.endpoint.clone(),
        listeners: shared.config.listeners.clone(),
        controller_addr: shared.config.advertised(),
        rack: shared.config.rack.clone(),
        supported_features: Some(crate::features::supported()),
        log_dirs: shared.config.log_dir_ids.clone(),
    }
}

/// This node as a broker: joins the log (a non-voter asks to), registers, then
/// heartbeats to every voter for as long as it runs (`heartbeats`).
async fn broker_duties(shared: Arc<Shared>) {
    if !shared.config.is_voter() {
        join(&shared).await;
    }
    let incarnation = Uuid::new_v4();
    let epoch = loop {
        let cmd = registration(&shared, incarnation);
        match propose(&shared, cmd, Duration::from_secs(30)).await {
            Ok(Applied {
                index,
                outcome: crate::command::Outcome::Done(Ok(())),
            }) => break index,
            Ok(Applied {
                outcome:
                    crate::command::Outcome::Done(Err(
                        crate::command::CommandError::UnsupportedFeatures(why),
                    )),
                ..
            }) => {
                tracing::error!(reason = %why, "registration refused");
                shared.refused.send_replace(Some(why));
                return;
            }
            Ok(other) => tracing::error!(outcome = ?other, "registration refused"),
            Err(e) => tracing::warn!(error = %e, "registering with the controller"),
        }
        tokio::time::sleep(Duration::from_secs(1)).await;
    };
    tracing::info!(broker = shared.config.node_id, epoch, "registered");
    shared.registered.send_replace(Some(epoch));
    let mut tick = tokio::time::interval(shared.config.heartbeat_interval);
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    let mut images = shared.sm.subscribe();
    let mut heartbeats = Heartbeats::default();
    // Whether a heartbeat has told the controller that this registration is caught up.
    let mut told_caught_up = false;
    // When this registration was last sent again to record its feature ranges.
    let mut features_resent: Option<Instant> = None;
    loop {
        tokio::select! {
            _ = tick.tick() => {
                // A registration relayed by a controller of a release before feature levels
                // lost its feature ranges on the way (that release drops the field), and
                // no level could be finalized while it lacks them: it is sent again, with
                // the same incarnation, which only records them. At most every
                // `FEATURES_RESEND`, since such a controller drops them again.
                let lacking = shared.sm.image().broker(shared.config.node_id).is_some_and(|b| {
                    b.epoch == epoch && b.incarnation == incarnation && b.supported_features.is_none()
                });
                if lacking && features_resent.is_none_or(|t| t.elapsed() >= FEATURES_RESEND) {
                    features_resent = Some(Instant::now());
                    let cmd = registration(&shared, incarnation);
                    let shared = shared.clone();
                    tokio::spawn(async move {
                        if let Err(e) = propose(&shared, cmd, FEATURES_RESEND).await {
                            tracing::debug!(error = %e, "recording this broker's feature ranges");
                        }
                    });
                }
            }
            changed = images.changed() => {
                if changed.is_err() {
                    return;
                }
                let image = images.borrow_and_update().clone();
                if !image.broker(shared.config.node_id).is_some_and(|b| b.epoch == epoch && b.fenced) {
                    told_caught_up = false;
                }
                if !caught_up_heartbeat_due(&image, shared.config.node_id, epoch, told_caught_up) {
                    continue;
                }
            }
        }
        let hb = Heartbeat {
            broker: shared.config.node_id,
            epoch,
            applied: shared.sm.image().applied,
            disk: roomiest_disk(&shared.config, &shared.sm.image()),
        };
        told_caught_up |= hb.applied >= epoch;
        heartbeats.send(&shared, hb);
    }
}

/// The filesystem of this broker's online log directory with the most bytes available:
/// where its next new replica goes (`log_dirs` placement), so what the balancer weighs
/// when it asks whether the broker may take one. A directory the image has offline is
/// left out; with none online, the first directory's.
fn roomiest_disk(config: &NodeConfig, image: &MetadataImage) -> Option<balancer::DiskUse> {
    let offline = image
        .broker(config.node_id)
        .map(|b| b.offline_dirs.clone())
        .unwrap_or_default();
    config
        .log_dirs
        .iter()
        .zip(&config.log_dir_ids)
        .filter(|(_, id)| !offline.contains(id))
        .filter_map(|(dir, _)| balancer::DiskUse::of(dir))
        .max_by_key(|d| d.total_bytes.saturating_sub(d.used_bytes))
        .or_else(|| balancer::DiskUse::of(&config.dir))
}

/// Whether broker `id`, registered in `epoch`, should heartbeat now rather than at its
/// next tick: the controller unfences a fenced registration once a heartbeat shows it
/// has applied the log up to that registration (Kafka's broker sends its next heartbeat
/// at once when it catches up). So the first image that is caught up while the
/// registration is fenced sends one, unless a heartbeat since it was fenced has said so
/// already; a registration in controlled shutdown stays fenced whatever it says.
fn caught_up_heartbeat_due(image: &MetadataImage, id: i32, epoch: u64, told: bool) -> bool {
    !told
        && image.applied >= epoch
        && image
            .broker(id)
            .is_some_and(|b| b.epoch == epoch && b.fenced && !b.shutting_down)
}

/// Asks the voters, in turn, to add this node as a learner, until one has.
async fn join(shared: &Shared) {
    let me = shared.config.advertised();
    loop {
        if shared
            .raft
            .metrics()
            .borrow()
            .membership_config
            .membership()
            .get_node(&shared.id)
            .is_some_and(|n| n.addr == me)
        {
            return;
        }
        let mut targets: Vec<(NodeId, String)> = leader_addr(shared).into_iter().collect();
        targets.extend(
            shared
                .config
                .voters
                .iter()
                .map(|(id, a)| (*id as NodeId, a.clone())),
        );
        for (id, addr) in targets {
            let mut c = PeerClient::new(
                id,
                addr,
                shared.cluster_id.clone(),
                shared.config.security.clone(),
            );
            let req = Request::Join {
                id: shared.id,
                addr: me.clone(),
            };
            if let Ok(Response::Join(Ok(()))) = c.call(req, CALL_TIMEOUT).await {
                tracing::info!(via = id, "joined the metadata log as an observer");
                return;
            }
        }
        tokio::time::sleep(Duration::from_millis(500)).await;
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::test_images::{apply, join};

    /// A restarted broker's registration is fenced until a heartbeat shows it caught up:
    /// it heartbeats at the first image that has applied the registration, once.
    #[test]
    fn a_fenced_registration_heartbeats_as_soon_as_it_is_applied() {
        let mut img = MetadataImage::default();
        join(&mut img, 1);
        let epoch = img.broker(1).expect("registered").epoch;
        apply(&mut img, Command::FenceBroker { id: 1, epoch });
        assert!(caught_up_heartbeat_due(&img, 1, epoch, false));
        assert!(
            !caught_up_heartbeat_due(&img, 1, epoch, true),
            "said already"
        );
        // An image that has not applied the registration yet (a newer epoch): wait.
        assert!(!caught_up_heartbeat_due(&img, 1, img.applied + 5, false));
        // Unfenced, or stopping: nothing to hurry.
        apply(&mut img, Command::UnfenceBroker { id: 1, epoch });
        assert!(!caught_up_heartbeat_due(&img, 1, epoch, false));
        apply(&mut img, Command::ControlledShutdown { id: 1, epoch });
        assert!(!caught_up_heartbeat_due(&img, 1, epoch, false));
        assert!(
            !caught_up_heartbeat_due(&img, 2, epoch, false),
            "unknown broker"
        );
    }
}
