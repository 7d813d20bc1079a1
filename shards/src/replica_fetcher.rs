//! Followers' fetchers: one task per (leader broker, shard) that fetches every partition
//! this shard follows from that leader in one Fetch request per round (Kafka's
//! `ReplicaFetcherThread`, one per owning core).
//!
//! A round asks the leader for each partition from its log end — the fetch offset says
//! "I hold everything below this" — with the epoch of the last batch held, so that the
//! leader answers a divergence instead of records (Fetch's `DivergingEpoch`, KIP-320).
//! What comes back is appended as it is; then the round waits until everything it
//! appended is acknowledged per the durability setting (with the default, synced: one
//! group commit per partition per round) before the next fetch. So the offset a
//! follower fetches from is never ahead of what it would keep across a power loss, and
//! the leader may count it for the high watermark.
//!
//! A divergence cuts the partition's log where the two logs agree (Kafka's
//! `AbstractFetcherThread` rules, below) and the next round fetches from there. The
//! leader's log start, moved by its retention or by DeleteRecords, is taken up (never
//! past this replica's high watermark), so a follower that becomes leader serves no
//! record its leader had deleted.
//!
//! A partition the leader refuses sits out a backoff before it is fetched again. Where
//! the refusal only says that one of the two brokers has not yet applied the metadata
//! the other acts on — a new partition its leader has not created yet, a leadership or
//! epoch one side has not taken up — the backoff starts at a few milliseconds and
//! doubles with each refusal in a row up to `replica.fetch.backoff.ms`
//! ([`backoff_after`]): metadata reaches every broker within milliseconds, and an
//! acks=all produce to a new partition waits for its followers' first fetch. For the
//! same reason a partition that a fetch the leader holds (its long poll) left out —
//! assigned since, or sitting out a backoff that has ended — does not wait for that
//! fetch: it is given up, with its connection, a moment later.
//!
//! Invariants: a partition is in at most one fetcher, the one of the leader the metadata
//! names (`assign` moves it); a response is applied to a partition only if it still
//! follows the same leader in the same epoch the request was built with; a partition
//! that failed sits out rounds for the backoff; no `RefCell` borrow crosses an `.await`.

use crate::metadata::ClusterMetadata;
use crate::replication_throttle::{self, ReplicationThrottles, Side};
use crate::routing::TopicPartition;
use corelog_kafka_client::connection::Connection;
use corelog_kafka_client::security::ClientSecurity;
use corelog_kafka_client::ClientError;
use corelog_partition::follower::{self, FollowerStep, LeaderAnswer};
use corelog_partition::{Cut, Partition};
use kafka_protocol::messages::fetch_request::{FetchPartition, FetchTopic, ReplicaState};
use kafka_protocol::messages::{ApiKey, BrokerId, FetchRequest, FetchResponse};
use kafka_protocol::ResponseError;
use std::cell::{Cell, RefCell};
use std::collections::{BTreeMap, HashMap};
use std::net::{SocketAddr, ToSocketAddrs};
use std::rc::{Rc, Weak};
use std::sync::Arc;
use std::time::{Duration, Instant};

/// The first backoff after a refusal that metadata propagation resolves.
const METADATA_BACKOFF_MIN: Duration = Duration::from_millis(10);

/// How long a fetch in flight may still answer once a partition it left out is due (newly
/// assigned, or done sitting out a backoff), before it is given up so that the partition
/// is fetched at once.
const MORE_TO_FETCH_GRACE: Duration = Duration::from_millis(5);

/// How often a fetcher refused by its leader says so again.
const WARN_AGAIN_AFTER: Duration = Duration::from_secs(60);

/// Fetch v15: replica state (id and broker epoch) in its own field, topics by id.
const FETCH_VERSION: i16 = 15;

/// How followers fetch (Kafka's `replica.fetch.*` settings).
#[derive(Debug, Clone)]
pub struct FetchConfig {
    /// `replica.fetch.wait.max.ms`: how long the leader may hold a fetch with no data.
    pub wait_max_ms: i32,
    /// `replica.fetch.max.bytes`: per partition.
    pub partition_max_bytes: i32,
    /// `replica.fetch.response.max.bytes`: per request.
    pub response_max_bytes: i32,
    /// `replica.fetch.backoff.ms`: after an error, before the partition is fetched again.
    pub backoff: Duration,
    /// `replica.socket.timeout.ms`: a fetch not answered within this is given up and
    /// its connection dropped (well above `wait_max_ms`, which the leader may hold it).
    pub request_timeout: Duration,
    /// How the inter-broker listener is spoken to: TLS and SASL as it requires.
    pub security: ClientSecurity,
}

impl Default for FetchConfig {
    fn default() -> Self {
        FetchConfig {
            wait_max_ms: 500,
            partition_max_bytes: 1 << 20,
            response_max_bytes: 10 << 20,
            backoff: Duration::from_millis(1000),
            request_timeout: Duration::from_secs(30),
            security: ClientSecurity::default(),
        }
    }
}

/// What a fetcher needs of the shard that holds the partitions.
pub trait ReplicaHost: 'static {
    fn node_id(&self) -> i32;
    /// This broker's registration epoch (-1 until registered).
    fn broker_epoch(&self) -> i64;
    fn metadata(&self) -> Arc<ClusterMetadata>;
    fn partition(&self, tp: &TopicPartition) -> Option<Rc<Partition>>;
    /// The broker's replication throttles (`replication_throttle`).
    fn throttles(&self) -> &ReplicationThrottles;
    /// Cuts the partition's log and puts the reopened partition in its place.
    fn truncate(
        self: Rc<Self>,
        tp: TopicPartition,
        cut: Cut,
    ) -> impl std::future::Future<Output = ()> + 'static;
}

/// A fetched partition's standing: sitting out a backoff until `until`, after `refusals`
/// answers in a row that were refusals (errors).
#[derive(Debug, Clone, Copy, Default)]
struct Standing {
    until: Option<Instant>,
    refusals: u32,
}

/// How long a partition sits out after its `refusals`-th refusal in a row (`error`
/// `None`: it failed here, e.g. its append): for a refusal that only says the two
/// brokers' metadata differ for a moment, from [`METADATA_BACKOFF_MIN`] doubling up to
/// `configured`; for anything else `configured` (`replica.fetch.backoff.ms`).
fn backoff_after(error: Option<ResponseError>, refusals: u32, configured: Duration) -> Duration {
    debug_assert!(refusals >= 1, "a backoff follows a refusal");
    let metadata_lag = matches!(
        error,
        Some(
            ResponseError::UnknownTopicOrPartition
                | ResponseError::UnknownTopicId
                | ResponseError::NotLeaderOrFollower
                | ResponseError::UnknownLeaderEpoch
                | ResponseError::FencedLeaderEpoch
        )
    );
    if !metadata_lag {
        return configured;
    }
    let doubled = METADATA_BACKOFF_MIN.saturating_mul(1 << refusals.saturating_sub(1).min(16));
    doubled.min(configured)
}

/// A shard's fetchers, one per leader it follows partitions of.
pub struct ReplicaFetchers<H: ReplicaHost> {
    config: FetchConfig,
    host: RefCell<Weak<H>>,
    by_leader: RefCell<HashMap<i32, Rc<Fetcher>>>,
}

struct Fetcher {
    leader: i32,
    partitions: RefCell<HashMap<TopicPartition, Standing>>,
    /// Fired when partitions are added, and to stop.
    changed: event_listener::Event,
    stopped: Cell<bool>,
}

impl<H: ReplicaHost> ReplicaFetchers<H> {
    pub fn new(config: FetchConfig) -> Self {
        ReplicaFetchers {
            config,
            host: RefCell::new(Weak::new()),
            by_leader: RefCell::new(HashMap::new()),
        }
    }

    /// Sets the shard the fetchers serve (once it exists).
    pub fn set_host(&self, host: Weak<H>) {
        *self.host.borrow_mut() = host;
    }

    /// `tp` is fetched from `leader` from now on (and from no other).
    pub fn assign(&self, tp: &TopicPartition, leader: i32) {
        let mut by_leader = self.by_leader.borrow_mut();
        for (l, f) in by_leader.iter() {
            if *l != leader {
                f.partitions.borrow_mut().remove(tp);
            }
        }
        let fetcher = by_leader.entry(leader).or_insert_with(|| {
            let f = Rc::new(Fetcher {
                leader,
                partitions: RefCell::new(HashMap::new()),
                changed: event_listener::Event::new(),
                stopped: Cell::new(false),
            });
            glommio::spawn_local(run(
                f.clone(),
                self.host.borrow().clone(),
                self.config.clone(),
            ))
            .detach();
            f
        });
        if fetcher
            .partitions
            .borrow_mut()
            .insert(tp.clone(), Standing::default())
            .is_none()
        {
            fetcher.changed.notify(usize::MAX);
        }
    }

    /// `tp` is fetched by no fetcher.
    pub fn remove(&self, tp: &TopicPartition) {
        for f in self.by_leader.borrow().values() {
            f.partitions.borrow_mut().remove(tp);
        }
    }

    /// Partitions fetched, per leader.
    pub fn assigned(&self) -> BTreeMap<i32, usize> {
        self.by_leader
            .borrow()
            .iter()
            .map(|(l, f)| (*l, f.partitions.borrow().len()))
            .collect()
    }

    /// Stops every fetcher (shutdown): no round starts after this.
    pub fn stop_all(&self) {
        for f in self.by_leader.borrow().values() {
            f.stopped.set(true);
            f.changed.notify(usize::MAX);
        }
    }
}

/// One partition of a request, as it was when the request was built.
struct Sent {
    partition: Rc<Partition>,
    leader_epoch: i32,
    fetch_offset: i64,
    /// The follower throttle's rate, when it counts this partition's bytes.
    throttle: Option<u64>,
}

async fn run<H: ReplicaHost>(fetcher: Rc<Fetcher>, host: Weak<H>, config: FetchConfig) {
    let mut conn: Option<Rc<Connection>> = None;
    let mut warned: Option<Instant> = None;
    loop {
        if fetcher.stopped.get() {
            return;
        }
        let listener = fetcher.changed.listen();
        let Some(h) = host.upgrade() else {
            return;
        };
        let meta = h.metadata();
        let now = Instant::now();
        let (sent, request, next_due) = build_request(&fetcher, &*h, &meta, &config, now);
        if sent.is_empty() {
            drop(h);
            match next_due {
                Some(due) => {
                    let wait = glommio::timer::sleep(due.saturating_duration_since(now));
                    futures_lite::future::or(listener, wait).await;
                }
                None => listener.await,
            }
            continue;
        }
        let Some((addr, leader_host)) = leader_addr(&meta, fetcher.leader) else {
            drop(h);
            glommio::timer::sleep(config.backoff).await;
            continue;
        };
        // A new connection before the leader's SASL session ends (KIP-368): one that
        // has ended is closed by the leader at the next fetch.
        let session_ending = conn.as_ref().is_some_and(|c| c.session_ending());
        if conn.as_ref().is_some_and(|c| c.addr != addr) || session_ending {
            conn = None;
        }
        let c = match &conn {
            Some(c) => c.clone(),
            None => {
                let client_id = format!("corelog-replica-{}", h.node_id());
                let connecting = Connection::connect_with(
                    addr,
                    &leader_host,
                    &client_id,
                    1,
                    Duration::from_secs(5),
                    &config.security,
                );
                match connecting.await {
                    Ok(c) => {
                        conn = Some(c.clone());
                        c
                    }
                    Err(e) => {
                        // A refusal (TLS, SASL) is a configuration to fix, not a broker
                        // that is down: said, at most once a minute per fetcher.
                        let refused = matches!(e, ClientError::Kafka { .. })
                            || e.to_string().contains("TLS handshake");
                        if refused && warned.is_none_or(|t| t.elapsed() >= WARN_AGAIN_AFTER) {
                            warned = Some(Instant::now());
                            tracing::warn!(leader = fetcher.leader, %addr, error = %e, "replica fetcher is refused by its leader");
                        } else {
                            tracing::debug!(leader = fetcher.leader, %addr, error = %e, "replica fetcher cannot reach its leader");
                        }
                        drop(h);
                        glommio::timer::sleep(config.backoff).await;
                        continue;
                    }
                }
            }
        };
        drop(h);
        let started = Instant::now();
        // A leader cut off or stopped answers nothing, and its TCP connection may not
        // break for minutes: give up on it (Kafka's replica.socket.timeout.ms).
        let timeout = async {
            glommio::timer::sleep(config.request_timeout).await;
            Err(corelog_kafka_client::ClientError::Connection {
                addr,
                reason: format!("no answer within {:?}", config.request_timeout),
            })
        };
        // A partition assigned, or done sitting out a backoff, while a fetch is held by
        // the leader (up to replica.fetch.wait.max.ms when the others are idle) is not
        // left waiting for it: unless the answer comes within a moment, the fetch is
        // given up with its connection (the leader answers a connection's requests in
        // order) and the next one asks for every partition. Only the fetch offsets count
        // at the leader, so records given up are fetched again.
        let more_to_fetch = async {
            match next_due {
                Some(due) => {
                    let due = glommio::timer::sleep(due.saturating_duration_since(started));
                    futures_lite::future::or(listener, due).await;
                }
                None => listener.await,
            }
            glommio::timer::sleep(MORE_TO_FETCH_GRACE).await;
            None
        };
        let fetched = futures_lite::future::or(
            async {
                let answered = futures_lite::future::or(
                    c.request::<_, FetchResponse>(ApiKey::Fetch, FETCH_VERSION, &request),
                    timeout,
                );
                Some(answered.await)
            },
            more_to_fetch,
        )
        .await;
        let Some(fetched) = fetched else {
            tracing::debug!(
                leader = fetcher.leader,
                "replica fetch given up for partitions it left out"
            );
            conn = None;
            continue;
        };
        let response: FetchResponse = match fetched {
            Ok(r) => {
                corelog_metrics::record_stage(
                    corelog_metrics::Stage::ReplicaFetch,
                    started.elapsed(),
                );
                r
            }
            Err(e) => {
                tracing::debug!(leader = fetcher.leader, %addr, error = %e, "replica fetch failed");
                conn = None;
                glommio::timer::sleep(config.backoff).await;
                continue;
            }
        };
        if response.error_code != 0 {
            // E.g. CLUSTER_AUTHORIZATION_FAILED: this broker's principal lacks
            // CLUSTER_ACTION. Said once a minute, as a refused connection is.
            if warned.is_none_or(|t| t.elapsed() >= WARN_AGAIN_AFTER) {
                warned = Some(Instant::now());
                tracing::warn!(leader = fetcher.leader, error = ?ResponseError::try_from_code(response.error_code), "replica fetch refused");
            }
            glommio::timer::sleep(config.backoff).await;
            continue;
        }
        let Some(h) = host.upgrade() else {
            return;
        };
        apply_response(&fetcher, h, &meta, sent, response, &config).await;
    }
}

/// The request for every partition not sitting out a backoff or held back by the
/// follower's replication throttle (outside the ISR while the bucket is in debt: Kafka's
/// shouldFollowerThrottle; outside the ISR otherwise, asking for at most what the bucket
/// holds); also when the next one that sits out is due.
fn build_request<H: ReplicaHost>(
    fetcher: &Fetcher,
    host: &H,
    meta: &ClusterMetadata,
    config: &FetchConfig,
    now: Instant,
) -> (HashMap<TopicPartition, Sent>, FetchRequest, Option<Instant>) {
    let mut sent = HashMap::new();
    let mut topics: BTreeMap<Arc<str>, FetchTopic> = BTreeMap::new();
    let mut next_due: Option<Instant> = None;
    let node = host.node_id();
    let rate = replication_throttle::configured_rate(&meta.broker_configs, node, Side::Follower);
    for (tp, standing) in fetcher.partitions.borrow_mut().iter_mut() {
        if let Some(until) = standing.until {
            if until > now {
                next_due = Some(next_due.map_or(until, |d| d.min(until)));
                continue;
            }
            standing.until = None;
        }
        let Some(partition) = host.partition(tp) else {
            continue;
        };
        if partition.following() != Some(fetcher.leader) {
            continue;
        }
        let Some(topic) = meta.topic(&tp.topic) else {
            continue;
        };
        let throttle = replication_throttle::applies(
            rate,
            Some(&topic.configs),
            Side::Follower,
            tp.partition,
            node,
        );
        let mut max_bytes = config.partition_max_bytes;
        if let Some(rate) = throttle {
            let in_sync = topic
                .partition(tp.partition)
                .is_some_and(|p| p.isr.contains(&node));
            if !in_sync {
                match host.throttles().allowance(Side::Follower, rate, now) {
                    Ok(bytes) => {
                        max_bytes = max_bytes.min(i32::try_from(bytes).unwrap_or(i32::MAX))
                    }
                    Err(held) => {
                        let until = now + held;
                        next_due = Some(next_due.map_or(until, |d| d.min(until)));
                        continue;
                    }
                }
            }
        }
        let mut fp = FetchPartition::default();
        fp.partition = tp.partition;
        fp.current_leader_epoch = partition.leader_epoch();
        fp.fetch_offset = partition.log_end_offset();
        fp.last_fetched_epoch = partition.latest_epoch();
        fp.log_start_offset = partition.log_start_offset();
        fp.partition_max_bytes = max_bytes;
        topics
            .entry(tp.topic.clone())
            .or_insert_with(|| {
                let mut t = FetchTopic::default();
                t.topic_id = topic.id;
                t
            })
            .partitions
            .push(fp);
        sent.insert(
            tp.clone(),
            Sent {
                leader_epoch: partition.leader_epoch(),
                fetch_offset: partition.log_end_offset(),
                throttle,
                partition,
            },
        );
    }
    let mut request = FetchRequest::default();
    let mut replica = ReplicaState::default();
    replica.replica_id = BrokerId(host.node_id());
    replica.replica_epoch = host.broker_epoch();
    request.replica_state = replica;
    request.max_wait_ms = config.wait_max_ms;
    request.min_bytes = 1;
    request.max_bytes = config.response_max_bytes;
    // A full fetch each round: no incremental session (KIP-227).
    request.session_id = 0;
    request.session_epoch = -1;
    request.topics = topics.into_values().collect();
    (sent, request, next_due)
}

/// The leader's inter-broker address, and its host name (what its certificate names).
fn leader_addr(meta: &ClusterMetadata, leader: i32) -> Option<(SocketAddr, String)> {
    let b = meta.brokers.get(&leader)?;
    let addr = (b.endpoint.host.as_str(), b.endpoint.port)
        .to_socket_addrs()
        .ok()?
        .next()?;
    Some((addr, b.endpoint.host.clone()))
}

/// A partition the leader answered with records or none, no error and no divergence.
struct Fetched {
    tp: TopicPartition,
    partition: Rc<Partition>,
    records: Option<bytes::Bytes>,
    leader_high_watermark: i64,
    leader_log_start: i64,
}

/// Appends what came back, waits until it is acknowledged here, takes up the leader's
/// high watermark and log start, and cuts diverged logs.
async fn apply_response<H: ReplicaHost>(
    fetcher: &Fetcher,
    host: Rc<H>,
    meta: &ClusterMetadata,
    mut sent: HashMap<TopicPartition, Sent>,
    response: FetchResponse,
    config: &FetchConfig,
) {
    let mut fetched = Vec::new();
    let mut truncations = Vec::new();
    let mut failed = Vec::new();
    for t in response.responses {
        let Some(topic) = meta.topic_by_id(t.topic_id) else {
            continue;
        };
        let name: Arc<str> = topic.name.as_str().into();
        for p in t.partitions {
            let tp = TopicPartition {
                topic: name.clone(),
                partition: p.partition_index,
            };
            let Some(s) = sent.remove(&tp) else {
                continue;
            };
            // Applied only to the partition the request was built for, still following
            // this leader in the same epoch.
            let current = host.partition(&tp);
            if !current.is_some_and(|c| Rc::ptr_eq(&c, &s.partition))
                || s.partition.following() != Some(fetcher.leader)
                || s.partition.leader_epoch() != s.leader_epoch
            {
                continue;
            }
            let error = ResponseError::try_from_code(p.error_code);
            let answer = match error {
                None if p.diverging_epoch.epoch >= 0 => LeaderAnswer::Diverging {
                    epoch: p.diverging_epoch.epoch,
                    end_offset: p.diverging_epoch.end_offset,
                },
                None => LeaderAnswer::Records {
                    records: p.records.as_deref(),
                    high_watermark: p.high_watermark,
                    log_start_offset: p.log_start_offset,
                },
                Some(ResponseError::OffsetOutOfRange) => LeaderAnswer::OutOfRange {
                    log_start_offset: p.log_start_offset,
                    high_watermark: p.high_watermark,
                },
                Some(e) => {
                    tracing::debug!(topic = %tp.topic, partition = tp.partition, leader = fetcher.leader, error = ?e, "replica fetch of a partition failed");
                    LeaderAnswer::Failed
                }
            };
            let step = follower::decide(&s.partition, s.fetch_offset, answer);
            if !matches!(step, FollowerStep::Backoff) {
                // Answered: the next refusal is the first in a row again.
                if let Some(standing) = fetcher.partitions.borrow_mut().get_mut(&tp) {
                    standing.refusals = 0;
                }
            }
            match step {
                FollowerStep::TakeUp {
                    records,
                    high_watermark,
                    log_start_offset,
                } => {
                    if let (Some(rate), Some(records)) = (s.throttle, records) {
                        host.throttles().record(
                            Side::Follower,
                            rate,
                            records.len(),
                            Instant::now(),
                        );
                    }
                    fetched.push(Fetched {
                        tp,
                        partition: s.partition,
                        // The response's buffer, shared: no copy.
                        records: records.and(p.records.clone()),
                        leader_high_watermark: high_watermark,
                        leader_log_start: log_start_offset,
                    });
                }
                FollowerStep::Cut(cut) => truncations.push((tp, cut)),
                FollowerStep::Backoff => failed.push((tp, error)),
            }
        }
    }
    // Every partition's append happens at the first poll, in order; then they wait
    // together (`follower::take_up`).
    let acknowledged = futures::future::join_all(fetched.into_iter().map(|f| async move {
        let done = follower::take_up(
            &f.partition,
            f.records.as_deref(),
            f.leader_high_watermark,
            f.leader_log_start,
        )
        .await;
        let e = done.err()?;
        tracing::warn!(topic = %f.tp.topic, partition = f.tp.partition, error = %e, "a replicated round of a partition failed");
        Some((f.tp, None))
    }))
    .await;
    failed.extend(acknowledged.into_iter().flatten());
    for (tp, cut) in truncations {
        host.clone().truncate(tp, cut).await;
    }
    let now = Instant::now();
    let mut partitions = fetcher.partitions.borrow_mut();
    for (tp, error) in failed {
        if let Some(standing) = partitions.get_mut(&tp) {
            standing.refusals = standing.refusals.saturating_add(1);
            standing.until = Some(now + backoff_after(error, standing.refusals, config.backoff));
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const CONFIGURED: Duration = Duration::from_millis(1000);

    /// A leader that has not yet created a new partition is asked again within
    /// milliseconds, then less and less often, never less often than configured.
    #[test]
    fn a_refusal_metadata_resolves_backs_off_from_milliseconds_up_to_the_configured() {
        let unknown = Some(ResponseError::UnknownTopicOrPartition);
        let waits: Vec<u128> = (1..=9)
            .map(|n| backoff_after(unknown, n, CONFIGURED).as_millis())
            .collect();
        assert_eq!(waits, [10, 20, 40, 80, 160, 320, 640, 1000, 1000]);
        assert_eq!(backoff_after(unknown, u32::MAX, CONFIGURED), CONFIGURED);
        for e in [
            ResponseError::UnknownTopicId,
            ResponseError::NotLeaderOrFollower,
            ResponseError::UnknownLeaderEpoch,
            ResponseError::FencedLeaderEpoch,
        ] {
            assert_eq!(backoff_after(Some(e), 1, CONFIGURED), METADATA_BACKOFF_MIN);
        }
    }

    /// A refusal metadata does not resolve, or a failure here, waits the whole backoff.
    #[test]
    fn any_other_refusal_waits_the_configured_backoff() {
        for e in [
            Some(ResponseError::KafkaStorageError),
            Some(ResponseError::ClusterAuthorizationFailed),
            None,
        ] {
            assert_eq!(backoff_after(e, 1, CONFIGURED), CONFIGURED);
        }
    }
}
