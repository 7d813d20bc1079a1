//! Boot and shutdown of the thread-per-core server.
//!
//! Start-up: start this broker's controller node (`cluster`) and wait until the quorum
//! has admitted the broker (registered, unfenced, its metadata applied); start one
//! glommio executor per shard, pinned to
//! its own CPU (`PoolPlacement::MaxSpread`) when there are enough CPUs; every executor
//! joins the channel mesh (its mesh peer id *is* its shard id), opens the partitions it
//! owns, waits until every shard has done so, then binds the Kafka port with
//! SO_REUSEPORT and accepts. The process is ready (`/health`) when all shards listen.
//!
//! Shutdown (SIGINT/SIGTERM): shard 0 first moves this broker's leadership to other
//! brokers (`cluster::controlled_shutdown`); then every shard stops accepting and
//! reading new requests, lets in-flight ones answer (bounded by `SHUTDOWN_DRAIN_MS`), waits for all shards to
//! get there, then flushes, syncs and closes its logs.

use crate::config::BrokerConfig;
use crate::kafka::api::Ctx;
use crate::net::shutdown::ShutdownSignal;
use anyhow::Context;
use corelog_shards::mesh::{Envelope, MESH_CHANNEL_CAPACITY};
use corelog_shards::metadata::MetadataStore;
use corelog_shards::shard::{Shard, ShardConfig};
use corelog_shards::storage_context::DataDir;
use glommio::channels::channel_mesh::MeshBuilder;
use glommio::net::TcpListener;
use glommio::{LocalExecutorPoolBuilder, PoolPlacement};
use std::rc::Rc;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::Duration;

/// Process-wide state shared by all shards (atomics only; no locks on the hot path).
#[derive(Default)]
pub struct Lifecycle {
    pub stop: AtomicBool,
    pub opened: AtomicUsize,
    pub listening: AtomicUsize,
    pub drained: AtomicUsize,
    /// Shards whose group coordinator has replayed its __consumer_offsets partitions.
    pub groups_loaded: AtomicUsize,
    /// Set once a stopping broker has moved its leadership away (or given up trying):
    /// only then do the shards stop serving.
    pub handed_off: AtomicBool,
    pub closed: AtomicUsize,
    pub failed: AtomicBool,
}

impl Lifecycle {
    pub fn ready(&self, shards: usize) -> bool {
        self.listening.load(Ordering::Acquire) == shards && !self.stop.load(Ordering::Acquire)
    }
}

/// Waits (without blocking the reactor) until `counter` reaches `n` or the broker
/// failed to start.
async fn barrier(counter: &AtomicUsize, n: usize, life: &Lifecycle) -> bool {
    loop {
        if life.failed.load(Ordering::Acquire) {
            return false;
        }
        if counter.load(Ordering::Acquire) >= n {
            return true;
        }
        glommio::timer::sleep(Duration::from_millis(2)).await;
    }
}

pub fn run(
    config: BrokerConfig,
    life: Arc<Lifecycle>,
    metrics_queries: futures::channel::mpsc::Receiver<crate::metrics::MetricsQuery>,
    data_dir: Arc<DataDir>,
) -> anyhow::Result<()> {
    // Shard 0 takes the receiving end of the HTTP endpoint's metrics queries.
    let metrics_queries = Arc::new(std::sync::Mutex::new(Some(metrics_queries)));
    // Every log directory is the disk it was (or new), exists before it is checked, and
    // keeps nothing a deletion a crash interrupted left behind (the first's is cleared
    // with the metadata store).
    let dir_ids = corelog_shards::log_dir_identity::open(&config.log_dirs, config.node_id)?;
    for (dir, id) in config.log_dirs.iter().zip(&dir_ids) {
        tracing::info!(dir = %dir.display(), directory_id = %id, "log directory");
    }
    for dir in &config.log_dirs[1..] {
        corelog_shards::metadata::remove_deleted_leftovers(dir);
    }
    // A move between log directories that a crash interrupted is finished (its copy was
    // complete) or undone (it was not) before any partition opens.
    for finished in corelog_shards::dir_copy::finish_moves(&config.log_dirs) {
        tracing::info!(dir = %finished.display(), "finished a partition's move between log directories");
    }
    crate::host_check::log_at_startup(
        &config.log_dirs,
        config.shards,
        config.limits.connections.total_max,
        config.limits.max_open_segment_files,
    );
    crate::kernel::check_and_raise_memlock(config.shards);
    crate::kernel::raise_nofile(config.limits.connections.total_max);
    // One set of connection counts for the whole broker: connections arrive on every
    // shard (net/connection_limits.rs).
    let connection_limits =
        crate::net::connection_limits::ConnectionLimits::new(&config.limits.connections);
    let metadata = Arc::new(
        MetadataStore::new(&config.data_dir, config.shards)
            .with_context(|| format!("opening {}", config.data_dir.display()))?,
    );
    let node = crate::cluster::start_controller(&config, &dir_ids)?;
    {
        let metadata = metadata.clone();
        node.on_publish(move |image| metadata.publish(image));
    }
    match crate::cluster::wait_until_admitted(&node, &metadata, &life.stop) {
        Ok(true) => {}
        Ok(false) => {
            node.shutdown();
            return Ok(());
        }
        Err(e) => {
            node.shutdown();
            return Err(e);
        }
    }
    if let Err(e) = crate::cluster::import_single_node(&config, &node, &metadata) {
        node.shutdown();
        return Err(e);
    }
    let config = Arc::new(config);
    let shard_config = Arc::new(ShardConfig {
        node_id: config.node_id,
        data_dir: config.data_dir.clone(),
        log_dirs: config.log_dirs.clone(),
        log_dir_ids: dir_ids.clone(),
        log: config.log.clone(),
        shard_count: config.shards,
        groups: config.groups.clone(),
        txns: config.txns.clone(),
        share_state: config.share_state.clone(),
        share_leader: config.share_leader,
        housekeeping: config.housekeeping.clone(),
        tail_cache_shard_bytes: config.limits.tail_cache_shard_bytes,
        open_segment_files: (config.limits.max_open_segment_files / config.shards.max(1))
            .max(corelog_storage::file_cache::MIN_CAPACITY),
        replication: config.cluster.replication.clone(),
    });
    let n = config.shards;
    let cpus = std::thread::available_parallelism()
        .map(|c| c.get())
        .unwrap_or(1);
    let placement = if n <= cpus {
        PoolPlacement::MaxSpread(n, None)
    } else {
        tracing::warn!(
            shards = n,
            cpus,
            "more shards than CPUs: executors are not pinned"
        );
        PoolPlacement::Unbound(n)
    };
    let mesh = MeshBuilder::<Envelope, _>::full(n, MESH_CHANNEL_CAPACITY);
    let handles = LocalExecutorPoolBuilder::new(placement)
        .name("corelog-shard")
        .on_all_shards({
            let life = life.clone();
            let node = node.clone();
            let throttles =
                Arc::new(corelog_shards::replication_throttle::ReplicationThrottles::default());
            let data_dir = data_dir.clone();
            move || {
                let (mesh, config, shard_config, metadata, life, queries, node) = (
                    mesh.clone(),
                    config.clone(),
                    shard_config.clone(),
                    metadata.clone(),
                    life.clone(),
                    metrics_queries.clone(),
                    node.clone(),
                );
                let connection_limits = connection_limits.clone();
                let throttles = throttles.clone();
                let data_dir = data_dir.clone();
                async move {
                    let result = shard_main(
                        mesh,
                        config,
                        shard_config,
                        ClusterHandles {
                            metadata,
                            node,
                            throttles,
                            data_dir,
                        },
                        life.clone(),
                        queries,
                        connection_limits,
                    )
                    .await;
                    if let Err(e) = &result {
                        tracing::error!(error = %format!("{e:#}"), "shard failed");
                        life.failed.store(true, Ordering::Release);
                    }
                    result
                }
            }
        })
        .map_err(|e| anyhow::anyhow!("{e}"))
        .context(crate::kernel::IO_URING_HINT)?;
    let mut first_error = None;
    let joined = handles.join_all();
    node.shutdown();
    for r in joined {
        match r {
            Ok(Ok(())) => {}
            Ok(Err(e)) => {
                first_error.get_or_insert(e);
            }
            Err(e) => {
                first_error.get_or_insert(anyhow::anyhow!("shard executor: {e}"));
            }
        }
    }
    match first_error {
        Some(e) => Err(e),
        None => Ok(()),
    }
}

/// What every shard shares of the broker: the published metadata, the controller node
/// that publishes it, the broker's replication throttles and its data directory.
struct ClusterHandles {
    metadata: Arc<MetadataStore>,
    node: corelog_controller::ControllerNode,
    throttles: Arc<corelog_shards::replication_throttle::ReplicationThrottles>,
    data_dir: Arc<DataDir>,
}

async fn shard_main(
    mesh: MeshBuilder<Envelope, glommio::channels::channel_mesh::Full>,
    config: Arc<BrokerConfig>,
    shard_config: Arc<ShardConfig>,
    cluster: ClusterHandles,
    life: Arc<Lifecycle>,
    metrics_queries: Arc<
        std::sync::Mutex<Option<futures::channel::mpsc::Receiver<crate::metrics::MetricsQuery>>>,
    >,
    connection_limits: Arc<crate::net::connection_limits::ConnectionLimits>,
) -> anyhow::Result<()> {
    let ClusterHandles {
        metadata,
        node,
        throttles,
        data_dir,
    } = cluster;
    let n = config.shards;
    let (senders, mut receivers) = mesh
        .join()
        .await
        .map_err(|_| anyhow::anyhow!("joining the shard mesh"))?;
    let id = senders.peer_id();
    tracing::debug!(shard = id, "joined the shard mesh");
    let shard = Shard::new(
        id,
        shard_config,
        metadata,
        senders,
        node,
        throttles,
        data_dir,
    );
    for (_, rx) in receivers.streams() {
        let shard = shard.clone();
        glommio::spawn_local(async move {
            while let Some(envelope) = rx.recv().await {
                corelog_metrics::record_stage(
                    corelog_metrics::Stage::Mesh,
                    envelope.sent_at.elapsed(),
                );
                glommio::spawn_local(shard.clone().handle(envelope.msg)).detach();
            }
        })
        .detach();
    }
    if id == 0 {
        // Taken once, at start-up, by the one shard that serves metrics queries.
        let rx = metrics_queries.lock().ok().and_then(|mut q| q.take());
        if let Some(rx) = rx {
            let connections = connection_limits.clone();
            glommio::spawn_local(crate::metrics::serve_queries(
                shard.clone(),
                rx,
                connections,
            ))
            .detach();
        }
    }
    if let Err(e) = shard.open_owned_partitions().await {
        life.failed.store(true, Ordering::Release);
        anyhow::bail!("shard {id}: opening partitions: {e}");
    }
    tracing::debug!(
        shard = id,
        partitions = shard.open_partition_count(),
        "partitions open"
    );
    life.opened.fetch_add(1, Ordering::AcqRel);
    if !barrier(&life.opened, n, &life).await {
        return Ok(());
    }

    // Every shard replays the `__consumer_offsets` partitions it holds (the topic is
    // created on the first FindCoordinator, when the cluster's brokers are up).
    shard.start_group_coordinator().await;
    shard.start_txn_coordinator();
    shard.housekeeping.start(shard.clone(), shard.peers.clone());
    shard.start_closing_idle_files();
    shard.start_replica_duties();
    life.groups_loaded.fetch_add(1, Ordering::AcqRel);
    if !barrier(&life.groups_loaded, n, &life).await {
        return Ok(());
    }

    let quotas = Rc::new(crate::quota::QuotaManager::new(config.quota, shard.clone()));
    glommio::spawn_local(quotas.clone().run_exchange()).detach();
    if config.tls_kernel_offload && config.listeners.iter().any(|l| l.tls.is_some()) {
        // Probed (and logged) once per process, before the first session needs it.
        crate::net::ktls::support();
    }
    let mut bound = Vec::with_capacity(config.listeners.len());
    for l in &config.listeners {
        let listener = TcpListener::bind(l.bind)
            .map_err(|e| anyhow::anyhow!("binding listener {} at {}: {e}", l.name, l.bind))?;
        let ctx = Rc::new(Ctx {
            shard: shard.clone(),
            config: config.clone(),
            quotas: quotas.clone(),
            listener: Rc::from(l.name.as_str()),
            tls: l.tls.clone(),
            sasl: l.sasl.clone(),
        });
        bound.push((ctx, listener));
    }
    let shutdown = Rc::new(ShutdownSignal::default());
    {
        // Turn the process-wide stop flag into this shard's signal, once shard 0 has
        // moved this broker's leadership away (controlled shutdown).
        let (life, shutdown, shard) = (life.clone(), shutdown.clone(), shard.clone());
        glommio::spawn_local(async move {
            while !life.stop.load(Ordering::Acquire) && !life.failed.load(Ordering::Acquire) {
                glommio::timer::sleep(Duration::from_millis(20)).await;
            }
            if id == 0 {
                if !life.failed.load(Ordering::Acquire) {
                    crate::cluster::controlled_shutdown(
                        &shard.node,
                        &shard.metadata,
                        shard.config.node_id,
                    )
                    .await;
                }
                life.handed_off.store(true, Ordering::Release);
            }
            while !life.handed_off.load(Ordering::Acquire) && !life.failed.load(Ordering::Acquire) {
                glommio::timer::sleep(Duration::from_millis(20)).await;
            }
            shutdown.fire();
        })
        .detach();
    }
    glommio::spawn_local(answer_log_dir_failures(shard.clone(), life.clone())).detach();
    life.listening.fetch_add(1, Ordering::AcqRel);
    if id == 0 {
        let listeners: Vec<String> = config
            .listeners
            .iter()
            .map(|l| format!("{}://{}", l.name, l.bind))
            .collect();
        tracing::info!(version = crate::VERSION, listeners = listeners.join(","), shards = n, data_dir = %config.data_dir.display(), "corelog is serving");
    }
    futures::future::join_all(bound.into_iter().map(|(ctx, listener)| {
        crate::net::listener::accept_loop(
            ctx,
            listener,
            shutdown.clone(),
            connection_limits.clone(),
        )
    }))
    .await;

    life.drained.fetch_add(1, Ordering::AcqRel);
    barrier(&life.drained, n, &life).await;
    shard.close_all().await;
    life.closed.fetch_add(1, Ordering::AcqRel);
    barrier(&life.closed, n, &life).await;
    tracing::debug!(shard = id, "shard stopped");
    Ok(())
}

/// How often each shard looks at the log directories' health.
const STORAGE_HEALTH_CHECK: Duration = Duration::from_millis(50);

/// How long shard 0 waits for the controller to commit a `LogDirsOffline`, and pauses
/// before asking again.
const LOG_DIRS_OFFLINE_TIMEOUT: Duration = Duration::from_secs(5);

/// A log of this broker failed (a write or fsync error): its directory is no longer
/// trusted — after a failed `fdatasync` nothing says what any file of it holds. What
/// follows is `log_dir_failure::respond`'s: that directory's partitions go offline on
/// every shard and shard 0 tells the controller (`LogDirsOffline`), which leads them
/// elsewhere; or, when the first directory failed, none is left, or the cluster has no
/// directory ids, the broker gives up leadership as Kafka does when its only log
/// directory fails — a controlled shutdown without the shutdown: the controller leads
/// every partition of this broker elsewhere and takes it out of every ISR, and it stays
/// fenced (answering NOT_LEADER_OR_FOLLOWER, which clients retry at the new leaders)
/// until it is restarted, when recovery checks every log. The failed partitions answer
/// KAFKA_STORAGE_ERROR meanwhile; on a single node that is all that changes.
async fn answer_log_dir_failures(shard: Rc<Shard>, life: Arc<Lifecycle>) {
    use corelog_shards::log_dir_failure::{respond, Response};
    let mut offline: Vec<usize> = Vec::new();
    loop {
        if life.stop.load(Ordering::Acquire) || life.failed.load(Ordering::Acquire) {
            return;
        }
        let failed = shard.data_dir.failed_dirs();
        if failed.len() == offline.len() {
            glommio::timer::sleep(STORAGE_HEALTH_CHECK).await;
            continue;
        }
        let indexes: Vec<usize> = failed.iter().map(|(i, _)| *i).collect();
        let meta = shard.metadata.snapshot();
        let has_ids = corelog_shards::replica_dirs::has_directory_ids(&meta);
        match respond(&indexes, shard.config.log_dirs.len(), has_ids) {
            Response::StepDown => {
                if shard.id == 0 {
                    let failure = failed
                        .iter()
                        .map(|(_, why)| why.as_str())
                        .collect::<Vec<_>>()
                        .join("; ");
                    tracing::error!(failure, "a log directory failed: this broker gives up leadership until it is restarted");
                    crate::cluster::controlled_shutdown(
                        &shard.node,
                        &shard.metadata,
                        shard.config.node_id,
                    )
                    .await;
                }
                return;
            }
            Response::Offline(dirs) => {
                for i in dirs.iter().filter(|i| !offline.contains(i)) {
                    if shard.id == 0 {
                        let why = failed
                            .iter()
                            .find(|(f, _)| f == i)
                            .map(|(_, w)| w.as_str())
                            .unwrap_or_default();
                        tracing::error!(dir = %shard.config.log_dirs[*i].display(), failure = why, "a log directory failed: its partitions go offline on this broker");
                    }
                    shard.take_dir_offline(*i);
                }
                offline = dirs;
                if shard.id == 0 {
                    let ids: Vec<uuid::Uuid> = offline
                        .iter()
                        .filter_map(|i| shard.config.log_dir_ids.get(*i).copied())
                        .collect();
                    report_offline_dirs(&shard, ids, &life).await;
                }
            }
        }
    }
}

/// Proposes `LogDirsOffline` for `dirs` until it is committed (or refused: the
/// registration it was for is gone, and a new one starts without them).
async fn report_offline_dirs(shard: &Rc<Shard>, dirs: Vec<uuid::Uuid>, life: &Lifecycle) {
    while !life.stop.load(Ordering::Acquire) {
        let Some(epoch) = *shard.node.registration().borrow() else {
            glommio::timer::sleep(STORAGE_HEALTH_CHECK).await;
            continue;
        };
        let command = corelog_controller::command::Command::LogDirsOffline {
            broker: shard.config.node_id,
            broker_epoch: epoch,
            dirs: dirs.clone(),
        };
        match shard.node.propose(command, LOG_DIRS_OFFLINE_TIMEOUT).await {
            Ok(applied) => {
                match applied.outcome {
                    corelog_controller::command::Outcome::Done(Ok(())) => {
                        tracing::info!(dirs = ?dirs, "the controller has the failed log directories");
                    }
                    other => tracing::warn!(outcome = ?other, "failed log directories refused"),
                }
                return;
            }
            Err(e) => {
                tracing::warn!(error = %e, "failed log directories not committed; trying again");
                glommio::timer::sleep(LOG_DIRS_OFFLINE_TIMEOUT).await;
            }
        }
    }
}
