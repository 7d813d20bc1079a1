//! Per-shard metrics: request counts, bytes, errors by Kafka error code and latency
//! histograms (HdrHistogram), per API.
//!
//! Recording is shard-local by construction: the recorder is a thread-local, and a shard
//! is one thread, so recording takes no lock, touches no other core's cache lines and
//! allocates nothing once an API has been seen (each histogram is allocated once, with
//! fixed bounds, on the first request of its API). Readers never touch a shard's
//! recorder: the HTTP endpoint asks every shard for a [`MetricsSnapshot`] over the mesh
//! and merges the copies.
//!
//! Histograms record microseconds, 1 µs .. 60 s, 3 significant digits (0.1 % error);
//! values outside are clamped, never dropped.

use hdrhistogram::Histogram;
use std::cell::RefCell;
use std::collections::BTreeMap;
use std::time::Duration;

pub const LATENCY_US_MIN: u64 = 1;
pub const LATENCY_US_MAX: u64 = 60_000_000;
pub const SIGNIFICANT_DIGITS: u8 = 3;

/// Latencies that are not a whole request.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Stage {
    /// A flusher round: direct-I/O write of the pending batches.
    Append,
    /// One group-commit `fdatasync`.
    Fsync,
    /// From a request frame being read to its handler starting.
    RequestQueue,
    /// From a cross-core message being sent to its handler starting on the other shard.
    Mesh,
    /// A follower's fetch from its leader: request sent to response read.
    ReplicaFetch,
    /// On a leader, an acks=all batch from its own sync to the high watermark passing
    /// it: the followers' fetch, write, sync and next fetch reporting their position.
    ReplicationWait,
    /// On a follower, the batches of one fetch response from being handed to the log to
    /// their sync (the write and the group commit they wait for).
    FollowerAppend,
}

impl Stage {
    pub const ALL: [Stage; 7] = [
        Stage::Append,
        Stage::Fsync,
        Stage::RequestQueue,
        Stage::Mesh,
        Stage::ReplicaFetch,
        Stage::ReplicationWait,
        Stage::FollowerAppend,
    ];

    pub fn name(self) -> &'static str {
        match self {
            Stage::Append => "append",
            Stage::Fsync => "fsync",
            Stage::RequestQueue => "request_queue",
            Stage::Mesh => "mesh",
            Stage::ReplicaFetch => "replica_fetch",
            Stage::ReplicationWait => "replication_wait",
            Stage::FollowerAppend => "follower_append",
        }
    }
}

pub fn new_histogram() -> Histogram<u64> {
    // Fixed bounds: the constructor cannot fail for these constants.
    Histogram::new_with_bounds(LATENCY_US_MIN, LATENCY_US_MAX, SIGNIFICANT_DIGITS)
        .expect("constant histogram bounds are valid")
}

fn micros(d: Duration) -> u64 {
    u64::try_from(d.as_micros())
        .unwrap_or(u64::MAX)
        .clamp(LATENCY_US_MIN, LATENCY_US_MAX)
}

/// Everything recorded for one API on one shard (or merged over shards).
#[derive(Clone)]
pub struct ApiMetrics {
    pub requests: u64,
    pub bytes_in: u64,
    pub bytes_out: u64,
    /// Kafka error code → count (partition- and topic-level codes included).
    pub errors: BTreeMap<i16, u64>,
    pub latency_us: Histogram<u64>,
}

impl ApiMetrics {
    fn new() -> Self {
        ApiMetrics {
            requests: 0,
            bytes_in: 0,
            bytes_out: 0,
            errors: BTreeMap::new(),
            latency_us: new_histogram(),
        }
    }

    fn merge(&mut self, other: &ApiMetrics) {
        self.requests += other.requests;
        self.bytes_in += other.bytes_in;
        self.bytes_out += other.bytes_out;
        for (code, n) in &other.errors {
            *self.errors.entry(*code).or_insert(0) += n;
        }
        // Same bounds on both sides: `add` cannot fail.
        let _ = self.latency_us.add(&other.latency_us);
    }
}

/// A copy of one shard's metrics (or the merge of several), sendable across cores.
#[derive(Clone, Default)]
pub struct MetricsSnapshot {
    /// Shards merged into this snapshot.
    pub shards: Vec<usize>,
    /// Kafka API key → metrics.
    pub apis: BTreeMap<i16, ApiMetrics>,
    pub stages: BTreeMap<Stage, Histogram<u64>>,
    /// Connections closed for bad input (malformed or oversized frames, unknown APIs).
    pub connections_rejected: u64,
    pub connections_accepted: u64,
    /// Idempotent producers' retries answered with the original offsets (not written).
    pub duplicate_batches: u64,
    /// Partition logs failed by a write or sync error.
    pub log_failures: u64,
    /// Fetched record bytes sent from segment files with splice (never in user space).
    pub spliced_bytes: u64,
    /// TLS sessions established, by where their records are sealed.
    pub tls_sessions_kernel: u64,
    pub tls_sessions_user: u64,
    pub limits: LimitCounters,
    pub segment_files: SegmentFileCounters,
    /// Client quota throttling on this shard.
    pub quota: QuotaMetrics,
    pub replication: ReplicationMetrics,
    pub share: ShareMetrics,
    /// Records appended by this shard's leaders: produced batches and the coordinators'
    /// own records, not duplicates of idempotent retries, not markers, not replicas' copies.
    pub appended_records: u64,
    /// Bytes the shard's partition logs hold on disk (filled in at the snapshot).
    pub log_bytes: u64,
    /// Whether the shard refuses produces for the disk (budget or fill ratio), filled in
    /// at the snapshot.
    pub produce_refused_disk: bool,
    /// The committed offsets of the groups this shard coordinates (filled in at the
    /// snapshot, bounded: see [`GroupOffsets`]), the committed side of consumer lag.
    pub group_offsets: GroupOffsets,
}

/// The most consumer-lag partition series a broker exports (`group`, `topic`,
/// `partition`): each shard lists the committed offsets of at most its share of this
/// many, whole groups at a time, and counts the groups left out.
pub const GROUP_LAG_PARTITIONS_MAX: usize = 10_000;

/// One group's committed offset of one partition.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct GroupOffset {
    pub group: String,
    pub topic: String,
    pub partition: i32,
    pub committed: i64,
}

/// A coordinator shard's committed offsets, whole groups in group-name order up to a
/// bound on their count, and how many groups with committed offsets did not fit.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct GroupOffsets {
    pub offsets: Vec<GroupOffset>,
    pub groups_omitted: u64,
}

/// Share groups' records on the share partitions this shard leads (KIP-932): counters
/// since start, in records, and gauges the shard fills in when asked for a snapshot.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct ShareMetrics {
    /// Deliveries: records acquired by a member.
    pub acquired: u64,
    /// Acknowledged by their member: accepted, released, rejected, renewed, gaps.
    pub acknowledged: [u64; 5],
    /// Records whose lock ran out.
    pub lock_expired: u64,
    /// Records archived at the delivery limit.
    pub archived_at_limit: u64,
    /// Records of aborted transactions archived unread for read_committed groups.
    pub archived_unreadable: u64,
    /// Records given back when their member's share session ended.
    pub session_released: u64,
    /// Share partitions held in memory now, and their records in flight.
    pub partitions: u64,
    pub in_flight: u64,
}

impl ShareMetrics {
    /// The names of `acknowledged`'s entries, in order.
    pub const ACK_TYPES: [&'static str; 5] = ["accept", "release", "reject", "renew", "gap"];

    fn merge(&mut self, o: &ShareMetrics) {
        self.acquired += o.acquired;
        for (a, b) in self.acknowledged.iter_mut().zip(o.acknowledged) {
            *a += b;
        }
        self.lock_expired += o.lock_expired;
        self.archived_at_limit += o.archived_at_limit;
        self.archived_unreadable += o.archived_unreadable;
        self.session_released += o.session_released;
        self.partitions += o.partitions;
        self.in_flight += o.in_flight;
    }
}

/// Adds to this shard's share-group counters.
pub fn record_share(f: impl FnOnce(&mut ShareMetrics)) {
    RECORDER.with(|r| f(&mut r.borrow_mut().share));
}

/// Replication on one shard: counters since start, and gauges the shard fills in when
/// it is asked for a snapshot (they are not recorded).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct ReplicationMetrics {
    /// ISR changes this shard's leaders committed.
    pub isr_shrinks: u64,
    pub isr_expands: u64,
    /// ISR changes this shard's leaders proposed to the controller (committed, refused
    /// or lost), and those the controller refused.
    pub isr_shrink_proposals: u64,
    pub isr_expand_proposals: u64,
    pub isr_proposals_refused: u64,
    /// Partitions led here / followed here.
    pub leaders: u64,
    pub followers: u64,
    /// Led partitions whose ISR is smaller than their replica set (Kafka's
    /// UnderReplicatedPartitions), and those below `min.insync.replicas`.
    pub under_replicated: u64,
    pub under_min_isr: u64,
    /// The largest lag of a follower behind a leader of this shard, in offsets, and the
    /// longest time one has not been caught up, ms.
    pub follower_lag_offsets_max: u64,
    pub follower_lag_ms_max: u64,
    /// Offsets written by this shard's leaders but not yet committed (log end minus
    /// high watermark, summed).
    pub uncommitted_offsets: u64,
}

impl ReplicationMetrics {
    fn merge(&mut self, o: &ReplicationMetrics) {
        self.isr_shrinks += o.isr_shrinks;
        self.isr_expands += o.isr_expands;
        self.isr_shrink_proposals += o.isr_shrink_proposals;
        self.isr_expand_proposals += o.isr_expand_proposals;
        self.isr_proposals_refused += o.isr_proposals_refused;
        self.leaders += o.leaders;
        self.followers += o.followers;
        self.under_replicated += o.under_replicated;
        self.under_min_isr += o.under_min_isr;
        self.follower_lag_offsets_max = self
            .follower_lag_offsets_max
            .max(o.follower_lag_offsets_max);
        self.follower_lag_ms_max = self.follower_lag_ms_max.max(o.follower_lag_ms_max);
        self.uncommitted_offsets += o.uncommitted_offsets;
    }
}

/// One ISR change committed by a leader of this shard.
pub fn record_isr_change(expand: bool) {
    RECORDER.with(|r| {
        let mut r = r.borrow_mut();
        if expand {
            r.replication.isr_expands += 1;
        } else {
            r.replication.isr_shrinks += 1;
        }
    });
}

/// One ISR change proposed by a leader of this shard.
pub fn record_isr_proposal(expand: bool) {
    RECORDER.with(|r| {
        let mut r = r.borrow_mut();
        if expand {
            r.replication.isr_expand_proposals += 1;
        } else {
            r.replication.isr_shrink_proposals += 1;
        }
    });
}

/// One ISR change of a leader of this shard that the controller refused.
pub fn record_isr_proposal_refused() {
    RECORDER.with(|r| r.borrow_mut().replication.isr_proposals_refused += 1);
}

/// How often the connection and memory limits were hit (docs/quotas-and-limits.md, "Limits").
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct LimitCounters {
    /// New connections closed because their IP was at `max.connections.per.ip`.
    pub connections_refused_per_ip: u64,
    /// Times an acceptor held a new connection waiting for a slot of `max.connections`.
    pub accept_waits: u64,
    /// Request frames whose reader waited for `queued.max.request.bytes`.
    pub request_memory_waits: u64,
    /// Accepts that found no file descriptor free (EMFILE/ENFILE).
    pub accept_out_of_descriptors: u64,
    /// Refused logins: SASL (wrong credentials, an unsupported mechanism) and failed
    /// TLS handshakes.
    pub failed_authentications: u64,
    /// Requests (or parts of them: a topic, a group) refused by an ACL.
    pub denied_operations: u64,
    /// Connections closed for a request over `sasl.server.max.receive.size` before
    /// they had authenticated.
    pub unauthenticated_oversize_requests: u64,
}

/// The shard's cache of open segment files (`corelog_storage::file_cache`), filled in by
/// the shard when it answers a snapshot.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct SegmentFileCounters {
    pub open: u64,
    pub capacity: u64,
    pub opens: u64,
    pub evictions: u64,
    /// Opens that failed for want of a descriptor.
    pub exhausted: u64,
}

impl SegmentFileCounters {
    fn merge(&mut self, o: &SegmentFileCounters) {
        self.open += o.open;
        self.capacity += o.capacity;
        self.opens += o.opens;
        self.evictions += o.evictions;
        self.exhausted += o.exhausted;
    }
}

impl LimitCounters {
    fn merge(&mut self, o: &LimitCounters) {
        self.connections_refused_per_ip += o.connections_refused_per_ip;
        self.accept_waits += o.accept_waits;
        self.request_memory_waits += o.request_memory_waits;
        self.accept_out_of_descriptors += o.accept_out_of_descriptors;
        self.failed_authentications += o.failed_authentications;
        self.denied_operations += o.denied_operations;
        self.unauthenticated_oversize_requests += o.unauthenticated_oversize_requests;
    }
}

/// Counts one hit of a limit on this shard.
pub fn record_limit(f: impl FnOnce(&mut LimitCounters)) {
    RECORDER.with(|r| f(&mut r.borrow_mut().limits));
}

/// Client quota throttle counts, per quota kind (indexed by `QuotaKind::index`).
#[derive(Clone, Copy, Debug, Default)]
pub struct QuotaMetrics {
    pub throttled: [u64; 3],
    pub throttle_ms: [u64; 3],
}

impl QuotaMetrics {
    fn merge(&mut self, other: &QuotaMetrics) {
        for (a, b) in self.throttled.iter_mut().zip(other.throttled) {
            *a += b;
        }
        for (a, b) in self.throttle_ms.iter_mut().zip(other.throttle_ms) {
            *a += b;
        }
    }
}

/// A response that throttled its client for `ms` under the quota kind with index
/// `kind_index` (the broker's quota kinds number themselves `0..3`).
pub fn record_quota_throttle(kind_index: usize, ms: u64) {
    let i = kind_index;
    RECORDER.with(|r| {
        let q = &mut r.borrow_mut().quota;
        if let Some(n) = q.throttled.get_mut(i) {
            *n += 1;
        }
        if let Some(t) = q.throttle_ms.get_mut(i) {
            *t += ms;
        }
    });
}

impl MetricsSnapshot {
    pub fn merge(&mut self, other: &MetricsSnapshot) {
        self.shards.extend_from_slice(&other.shards);
        for (api, m) in &other.apis {
            self.apis
                .entry(*api)
                .or_insert_with(ApiMetrics::new)
                .merge(m);
        }
        for (stage, h) in &other.stages {
            let _ = self
                .stages
                .entry(*stage)
                .or_insert_with(new_histogram)
                .add(h);
        }
        self.connections_rejected += other.connections_rejected;
        self.connections_accepted += other.connections_accepted;
        self.duplicate_batches += other.duplicate_batches;
        self.log_failures += other.log_failures;
        self.spliced_bytes += other.spliced_bytes;
        self.tls_sessions_kernel += other.tls_sessions_kernel;
        self.tls_sessions_user += other.tls_sessions_user;
        self.limits.merge(&other.limits);
        self.segment_files.merge(&other.segment_files);
        self.quota.merge(&other.quota);
        self.replication.merge(&other.replication);
        self.share.merge(&other.share);
        self.appended_records += other.appended_records;
        self.log_bytes += other.log_bytes;
        self.produce_refused_disk |= other.produce_refused_disk;
        self.group_offsets
            .offsets
            .extend_from_slice(&other.group_offsets.offsets);
        self.group_offsets.groups_omitted += other.group_offsets.groups_omitted;
    }

    pub fn merged(snapshots: &[MetricsSnapshot]) -> MetricsSnapshot {
        let mut all = MetricsSnapshot::default();
        for s in snapshots {
            all.merge(s);
        }
        all
    }
}

struct Recorder {
    apis: BTreeMap<i16, ApiMetrics>,
    stages: BTreeMap<Stage, Histogram<u64>>,
    connections_rejected: u64,
    connections_accepted: u64,
    duplicate_batches: u64,
    log_failures: u64,
    spliced_bytes: u64,
    tls_sessions_kernel: u64,
    tls_sessions_user: u64,
    limits: LimitCounters,
    quota: QuotaMetrics,
    replication: ReplicationMetrics,
    share: ShareMetrics,
    appended_records: u64,
}

thread_local! {
    static RECORDER: RefCell<Recorder> = RefCell::new(Recorder {
        apis: BTreeMap::new(),
        stages: Stage::ALL.iter().map(|s| (*s, new_histogram())).collect(),
        connections_rejected: 0,
        connections_accepted: 0,
        duplicate_batches: 0,
        log_failures: 0,
        spliced_bytes: 0,
        tls_sessions_kernel: 0,
        tls_sessions_user: 0,
        limits: LimitCounters {
            connections_refused_per_ip: 0,
            accept_waits: 0,
            request_memory_waits: 0,
            accept_out_of_descriptors: 0,
            failed_authentications: 0,
            denied_operations: 0,
            unauthenticated_oversize_requests: 0,
        },
        quota: QuotaMetrics::default(),
        replication: ReplicationMetrics::default(),
        share: ShareMetrics::default(),
        appended_records: 0,
    });
}

fn with_api(api: i16, f: impl FnOnce(&mut ApiMetrics)) {
    RECORDER.with(|r| {
        let mut r = r.borrow_mut();
        f(r.apis.entry(api).or_insert_with(ApiMetrics::new));
    });
}

/// One request of `api` served in `latency`, with its frame sizes.
pub fn record_request(api: i16, latency: Duration, bytes_in: usize, bytes_out: usize) {
    with_api(api, |m| {
        m.requests += 1;
        m.bytes_in += bytes_in as u64;
        m.bytes_out += bytes_out as u64;
        m.latency_us.saturating_record(micros(latency));
    });
}

/// One error code returned by `api` (for a partition, a topic or the whole request).
pub fn record_error(api: i16, code: i16) {
    debug_assert_ne!(code, 0, "code 0 is success, not an error");
    with_api(api, |m| *m.errors.entry(code).or_insert(0) += 1);
}

pub fn record_stage(stage: Stage, latency: Duration) {
    RECORDER.with(|r| {
        if let Some(h) = r.borrow_mut().stages.get_mut(&stage) {
            h.saturating_record(micros(latency));
        }
    });
}

pub fn record_connection_accepted() {
    RECORDER.with(|r| r.borrow_mut().connections_accepted += 1);
}

pub fn record_connection_rejected() {
    RECORDER.with(|r| r.borrow_mut().connections_rejected += 1);
}

pub fn record_duplicate_batch() {
    RECORDER.with(|r| r.borrow_mut().duplicate_batches += 1);
}

/// Records appended by a leader of this shard (one call per append, not per record).
pub fn record_appended_records(records: u64) {
    RECORDER.with(|r| r.borrow_mut().appended_records += records);
}

pub fn record_log_failure() {
    RECORDER.with(|r| r.borrow_mut().log_failures += 1);
}

/// Counts a TLS session established on this shard: `kernel` when the kernel seals its
/// records (kTLS), else rustls in user space.
pub fn record_tls_session(kernel: bool) {
    RECORDER.with(|r| {
        let mut r = r.borrow_mut();
        if kernel {
            r.tls_sessions_kernel += 1;
        } else {
            r.tls_sessions_user += 1;
        }
    });
}

/// Counts record bytes a connection of this shard sent with splice.
pub fn record_sent_by_splice(bytes: u64) {
    RECORDER.with(|r| r.borrow_mut().spliced_bytes += bytes);
}

/// A copy of this shard's metrics.
pub fn snapshot(shard: usize) -> MetricsSnapshot {
    RECORDER.with(|r| {
        let r = r.borrow();
        MetricsSnapshot {
            shards: vec![shard],
            apis: r.apis.clone(),
            stages: r.stages.clone(),
            connections_rejected: r.connections_rejected,
            connections_accepted: r.connections_accepted,
            duplicate_batches: r.duplicate_batches,
            log_failures: r.log_failures,
            spliced_bytes: r.spliced_bytes,
            tls_sessions_kernel: r.tls_sessions_kernel,
            tls_sessions_user: r.tls_sessions_user,
            limits: r.limits,
            segment_files: SegmentFileCounters::default(),
            quota: r.quota,
            replication: r.replication,
            share: r.share,
            appended_records: r.appended_records,
            log_bytes: 0,
            produce_refused_disk: false,
            group_offsets: GroupOffsets::default(),
        }
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn records_and_merges_across_threads() {
        // Each thread is a shard with its own recorder.
        let snaps: Vec<MetricsSnapshot> = (0..3)
            .map(|shard| {
                std::thread::spawn(move || {
                    for i in 0..100u64 {
                        record_request(0, Duration::from_micros(100 + i), 1000, 50);
                    }
                    record_error(0, 2);
                    record_stage(Stage::Fsync, Duration::from_millis(2));
                    snapshot(shard)
                })
                .join()
                .expect("thread")
            })
            .collect();
        let all = MetricsSnapshot::merged(&snaps);
        assert_eq!(all.shards, vec![0, 1, 2]);
        let produce = all.apis.get(&0).expect("produce metrics");
        assert_eq!(produce.requests, 300);
        assert_eq!(produce.bytes_in, 300_000);
        assert_eq!(produce.errors.get(&2), Some(&3));
        assert_eq!(produce.latency_us.len(), 300);
        assert!(produce.latency_us.value_at_quantile(0.5) >= 140);
        assert!(produce.latency_us.max() >= 199);
        assert_eq!(all.stages.get(&Stage::Fsync).map(|h| h.len()), Some(3));
    }

    #[test]
    fn out_of_range_latencies_are_clamped_not_dropped() {
        std::thread::spawn(|| {
            record_request(1, Duration::from_secs(3600), 0, 0);
            record_request(1, Duration::ZERO, 0, 0);
            let s = snapshot(0);
            let h = &s.apis.get(&1).expect("fetch").latency_us;
            assert_eq!(h.len(), 2);
            assert!(h.max() >= LATENCY_US_MAX - LATENCY_US_MAX / 1000);
        })
        .join()
        .expect("thread");
    }
}
