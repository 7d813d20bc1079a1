//! `/metrics`: the shards' snapshots in Prometheus text exposition (format 0.0.4),
//! encoded by the `prometheus-client` crate.
//!
//! Names follow Prometheus conventions (`_total` counters, `_seconds` histograms, base
//! units); every series a shard records has a `shard` label so a core that falls behind
//! is visible, and Prometheus sums over `shard` for the broker total. What only the whole
//! broker knows (consumer lag, open connections, the controller, the data directory's
//! filesystem, the process) has no `shard` label.

use super::process::ProcessMetrics;
use super::{api_name, error_name, BrokerMetrics, Scrape};
use corelog_metrics::{MetricsSnapshot, Stage};
use hdrhistogram::Histogram;
use prometheus_client::collector::Collector;
use prometheus_client::encoding::{DescriptorEncoder, NoLabelSet};
use prometheus_client::metrics::MetricType;
use prometheus_client::registry::Registry;

/// Upper bounds of the exported latency buckets, in seconds (100 µs .. 10 s).
const BUCKETS_S: [f64; 16] = [
    0.0001, 0.00025, 0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5,
    5.0, 10.0,
];

struct Snapshots {
    shards: Vec<MetricsSnapshot>,
    broker: BrokerMetrics,
    process: ProcessMetrics,
}

// `Collector` requires Debug; the snapshots are plain numbers not worth printing.
impl std::fmt::Debug for Snapshots {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "Snapshots({} shards)", self.shards.len())
    }
}

type Labels = Vec<(String, String)>;

fn shard_label(s: &MetricsSnapshot) -> String {
    s.shards
        .first()
        .map(|id| id.to_string())
        .unwrap_or_default()
}

/// (sum in seconds, count, per-bucket counts) of a µs histogram.
fn buckets(h: &Histogram<u64>) -> (f64, u64, Vec<(f64, u64)>) {
    let mut counts = vec![0u64; BUCKETS_S.len() + 1];
    let mut sum_us = 0f64;
    for v in h.iter_recorded() {
        let value_us = v.value_iterated_to();
        let n = v.count_at_value();
        sum_us += value_us as f64 * n as f64;
        let s = value_us as f64 / 1e6;
        let i = BUCKETS_S
            .iter()
            .position(|b| s <= *b)
            .unwrap_or(BUCKETS_S.len());
        if let Some(c) = counts.get_mut(i) {
            *c += n;
        }
    }
    let mut out: Vec<(f64, u64)> = BUCKETS_S
        .iter()
        .copied()
        .zip(counts.iter().copied())
        .collect();
    out.push((f64::INFINITY, counts.last().copied().unwrap_or(0)));
    (sum_us / 1e6, h.len(), out)
}

fn counter(
    encoder: &mut DescriptorEncoder,
    name: &str,
    help: &str,
    series: &[(Labels, u64)],
) -> Result<(), std::fmt::Error> {
    let mut m = encoder.encode_descriptor(name, help, None, MetricType::Counter)?;
    for (labels, v) in series {
        m.encode_family(labels)?
            .encode_counter::<NoLabelSet, u64, u64>(v, None)?;
    }
    Ok(())
}

fn gauge(
    encoder: &mut DescriptorEncoder,
    name: &str,
    help: &str,
    series: &[(Labels, u64)],
) -> Result<(), std::fmt::Error> {
    let mut m = encoder.encode_descriptor(name, help, None, MetricType::Gauge)?;
    for (labels, v) in series {
        let v = i64::try_from(*v).unwrap_or(i64::MAX);
        m.encode_family(labels)?.encode_gauge(&v)?;
    }
    Ok(())
}

fn histogram(
    encoder: &mut DescriptorEncoder,
    name: &str,
    help: &str,
    series: &[(Labels, &Histogram<u64>)],
) -> Result<(), std::fmt::Error> {
    let mut m = encoder.encode_descriptor(name, help, None, MetricType::Histogram)?;
    for (labels, h) in series {
        let (sum, count, b) = buckets(h);
        m.encode_family(labels)?
            .encode_histogram::<NoLabelSet>(sum, count, &b, None)?;
    }
    Ok(())
}

fn float_metric(
    encoder: &mut DescriptorEncoder,
    name: &str,
    help: &str,
    kind: MetricType,
    value: Option<f64>,
) -> Result<(), std::fmt::Error> {
    let Some(v) = value else {
        return Ok(());
    };
    let mut m = encoder.encode_descriptor(name, help, None, kind)?;
    let labels: Labels = Vec::new();
    let mut family = m.encode_family(&labels)?;
    match kind {
        MetricType::Counter => family.encode_counter::<NoLabelSet, f64, u64>(&v, None),
        _ => family.encode_gauge(&v),
    }
}

/// The broker's own gauges: consumer lag, connections, the controller, the disk.
fn broker_metrics(encoder: &mut DescriptorEncoder, b: &BrokerMetrics) -> std::fmt::Result {
    let none: Labels = Vec::new();
    let one = |v: u64| vec![(none.clone(), v)];
    let mut lag = Vec::with_capacity(b.group_lag.len());
    let mut by_group: std::collections::BTreeMap<&str, (u64, u64)> = Default::default();
    for ((group, topic, partition), value) in &b.group_lag {
        lag.push((
            vec![
                ("group".to_string(), group.clone()),
                ("topic".to_string(), topic.clone()),
                ("partition".to_string(), partition.to_string()),
            ],
            *value,
        ));
        let (sum, max) = by_group.entry(group.as_str()).or_default();
        *sum = sum.saturating_add(*value);
        *max = (*max).max(*value);
    }
    let group_series = |f: fn(&(u64, u64)) -> u64| {
        by_group
            .iter()
            .map(|(g, v)| (vec![("group".to_string(), g.to_string())], f(v)))
            .collect::<Vec<_>>()
    };
    gauge(
        encoder,
        "corelog_consumer_group_lag",
        "Records a consumer group has not committed: the partition's high watermark minus the group's committed offset, for the groups this broker coordinates and the partitions it holds a replica of.",
        &lag,
    )?;
    gauge(
        encoder,
        "corelog_consumer_group_lag_sum",
        "corelog_consumer_group_lag summed over the group's partitions.",
        &group_series(|v| v.0),
    )?;
    gauge(
        encoder,
        "corelog_consumer_group_lag_max",
        "The largest corelog_consumer_group_lag of the group's partitions.",
        &group_series(|v| v.1),
    )?;
    gauge(
        encoder,
        "corelog_consumer_group_lag_unknown_partitions",
        "Committed partitions of groups this broker coordinates with no replica on this broker: their lag is not known here.",
        &one(b.group_lag_unknown),
    )?;
    gauge(
        encoder,
        "corelog_consumer_group_lag_groups_omitted",
        "Groups with committed offsets left out of the lag series by the bound on their number (10,000 partitions a broker).",
        &one(b.group_lag_groups_omitted),
    )?;
    gauge(
        encoder,
        "corelog_connections_open",
        "Client connections open now, every listener and shard together.",
        &one(b.connections_open),
    )?;
    gauge(
        encoder,
        "corelog_active_controller",
        "1 on the broker whose controller node leads the controller quorum, else 0.",
        &one(u64::from(b.active_controller)),
    )?;
    gauge(
        encoder,
        "corelog_offline_partitions",
        "Partitions without a leader, counted by the active controller (0 on other brokers).",
        &one(b.offline_partitions),
    )?;
    gauge(
        encoder,
        "corelog_fenced_brokers",
        "Registered brokers fenced (not serving), counted by the active controller (0 on other brokers).",
        &one(b.fenced_brokers),
    )?;
    if let Some((size, available)) = b.data_dir_filesystem {
        gauge(
            encoder,
            "corelog_data_dir_filesystem_size_bytes",
            "Size of the filesystem holding the data directory.",
            &one(size),
        )?;
        gauge(
            encoder,
            "corelog_data_dir_filesystem_available_bytes",
            "Bytes of the data directory's filesystem available to the broker (df's Avail).",
            &one(available),
        )?;
    }
    Ok(())
}

fn process_metrics(encoder: &mut DescriptorEncoder, p: &ProcessMetrics) -> std::fmt::Result {
    let to_f = |v: Option<u64>| v.map(|v| v as f64);
    float_metric(
        encoder,
        "process_resident_memory_bytes",
        "Resident memory size in bytes.",
        MetricType::Gauge,
        to_f(p.resident_memory_bytes),
    )?;
    float_metric(
        encoder,
        "process_virtual_memory_bytes",
        "Virtual memory size in bytes.",
        MetricType::Gauge,
        to_f(p.virtual_memory_bytes),
    )?;
    float_metric(
        encoder,
        "process_cpu_seconds",
        "Total user and system CPU time spent in seconds.",
        MetricType::Counter,
        p.cpu_seconds,
    )?;
    float_metric(
        encoder,
        "process_open_fds",
        "Number of open file descriptors.",
        MetricType::Gauge,
        to_f(p.open_fds),
    )?;
    float_metric(
        encoder,
        "process_max_fds",
        "Maximum number of open file descriptors.",
        MetricType::Gauge,
        to_f(p.max_fds),
    )?;
    float_metric(
        encoder,
        "process_start_time_seconds",
        "Start time of the process since unix epoch in seconds.",
        MetricType::Gauge,
        p.start_time_seconds,
    )
}

impl Collector for Snapshots {
    fn encode(&self, mut encoder: DescriptorEncoder) -> Result<(), std::fmt::Error> {
        let mut requests = Vec::new();
        let mut received = Vec::new();
        let mut sent = Vec::new();
        let mut errors = Vec::new();
        let mut latency = Vec::new();
        let mut stages = Vec::new();
        let mut accepted = Vec::new();
        let mut rejected = Vec::new();
        let mut duplicates = Vec::new();
        let mut log_failures = Vec::new();
        let mut spliced = Vec::new();
        let mut tls_sessions = Vec::new();
        let (mut refused_ip, mut accept_waits, mut memory_waits) = (vec![], vec![], vec![]);
        let (mut accept_no_fd, mut files_open, mut files_capacity) = (vec![], vec![], vec![]);
        let (mut failed_auth, mut denied, mut unauth_oversize) = (vec![], vec![], vec![]);
        let (mut file_opens, mut file_evictions, mut files_exhausted) = (vec![], vec![], vec![]);
        let (mut throttled, mut throttle_ms) = (Vec::new(), Vec::new());
        let mut replication: Vec<(Vec<(String, String)>, corelog_metrics::ReplicationMetrics)> =
            Vec::new();
        let mut share: Vec<(Vec<(String, String)>, corelog_metrics::ShareMetrics)> = Vec::new();
        let mut share_acks = Vec::new();
        let (mut appended, mut log_bytes, mut refused_disk) = (vec![], vec![], vec![]);
        for s in &self.shards {
            let shard = shard_label(s);
            for (api, m) in &s.apis {
                let labels = vec![
                    ("api".to_string(), api_name(*api)),
                    ("shard".to_string(), shard.clone()),
                ];
                requests.push((labels.clone(), m.requests));
                received.push((labels.clone(), m.bytes_in));
                sent.push((labels.clone(), m.bytes_out));
                for (code, n) in &m.errors {
                    let mut l = labels.clone();
                    l.push(("code".into(), code.to_string()));
                    l.push(("error".into(), error_name(*code)));
                    errors.push((l, *n));
                }
                latency.push((labels, &m.latency_us));
            }
            for stage in Stage::ALL {
                if let Some(h) = s.stages.get(&stage) {
                    let labels = vec![
                        ("stage".to_string(), stage.name().to_string()),
                        ("shard".to_string(), shard.clone()),
                    ];
                    stages.push((labels, h));
                }
            }
            accepted.push((
                vec![("shard".to_string(), shard.clone())],
                s.connections_accepted,
            ));
            rejected.push((
                vec![("shard".to_string(), shard.clone())],
                s.connections_rejected,
            ));
            let by_shard = vec![("shard".to_string(), shard.clone())];
            duplicates.push((by_shard.clone(), s.duplicate_batches));
            appended.push((by_shard.clone(), s.appended_records));
            log_bytes.push((by_shard.clone(), s.log_bytes));
            refused_disk.push((by_shard.clone(), u64::from(s.produce_refused_disk)));
            log_failures.push((by_shard.clone(), s.log_failures));
            spliced.push((by_shard.clone(), s.spliced_bytes));
            for (path, n) in [
                ("kernel", s.tls_sessions_kernel),
                ("user", s.tls_sessions_user),
            ] {
                let mut labels = by_shard.clone();
                labels.push(("path".to_string(), path.to_string()));
                tls_sessions.push((labels, n));
            }
            refused_ip.push((by_shard.clone(), s.limits.connections_refused_per_ip));
            accept_waits.push((by_shard.clone(), s.limits.accept_waits));
            memory_waits.push((by_shard.clone(), s.limits.request_memory_waits));
            accept_no_fd.push((by_shard.clone(), s.limits.accept_out_of_descriptors));
            failed_auth.push((by_shard.clone(), s.limits.failed_authentications));
            denied.push((by_shard.clone(), s.limits.denied_operations));
            unauth_oversize.push((by_shard.clone(), s.limits.unauthenticated_oversize_requests));
            files_open.push((by_shard.clone(), s.segment_files.open));
            files_capacity.push((by_shard.clone(), s.segment_files.capacity));
            file_opens.push((by_shard.clone(), s.segment_files.opens));
            file_evictions.push((by_shard.clone(), s.segment_files.evictions));
            files_exhausted.push((by_shard.clone(), s.segment_files.exhausted));
            for (name, n) in corelog_metrics::ShareMetrics::ACK_TYPES
                .iter()
                .zip(s.share.acknowledged)
            {
                let mut labels = by_shard.clone();
                labels.push(("type".to_string(), name.to_string()));
                share_acks.push((labels, n));
            }
            share.push((by_shard.clone(), s.share));
            replication.push((by_shard, s.replication));
            for kind in corelog_shards::client_quota::QuotaKind::ALL {
                let i = kind.index();
                let labels = vec![
                    ("quota".to_string(), kind.name().to_string()),
                    ("shard".to_string(), shard.clone()),
                ];
                throttled.push((
                    labels.clone(),
                    s.quota.throttled.get(i).copied().unwrap_or(0),
                ));
                throttle_ms.push((labels, s.quota.throttle_ms.get(i).copied().unwrap_or(0)));
            }
        }
        counter(
            &mut encoder,
            "corelog_quota_throttled_responses",
            "Responses that throttled their client (throttle_time_ms > 0), by quota and shard.",
            &throttled,
        )?;
        counter(
            &mut encoder,
            "corelog_quota_throttle_milliseconds",
            "Throttle time given to clients, by quota and shard.",
            &throttle_ms,
        )?;
        counter(
            &mut encoder,
            "corelog_requests",
            "Kafka requests served, by API and shard.",
            &requests,
        )?;
        counter(
            &mut encoder,
            "corelog_request_received_bytes",
            "Request frame bytes received.",
            &received,
        )?;
        counter(
            &mut encoder,
            "corelog_response_sent_bytes",
            "Response frame bytes sent.",
            &sent,
        )?;
        counter(
            &mut encoder,
            "corelog_errors",
            "Kafka error codes returned (request-, topic- and partition-level), by API, code and shard.",
            &errors,
        )?;
        histogram(
            &mut encoder,
            "corelog_request_latency_seconds",
            "From a request frame read to its response ready, by API and shard.",
            &latency,
        )?;
        histogram(
            &mut encoder,
            "corelog_stage_latency_seconds",
            "Latency of internal stages: append (direct-I/O write), fsync (group commit), request_queue, mesh, replica_fetch (a follower's fetch round trip), replication_wait (a leader's acks=all batch from its sync to the high watermark), follower_append (a follower's fetched batches from append to sync).",
            &stages,
        )?;
        counter(
            &mut encoder,
            "corelog_connections_accepted",
            "Client connections accepted.",
            &accepted,
        )?;
        counter(
            &mut encoder,
            "corelog_connections_rejected",
            "Connections closed for bad input (malformed or oversized frames, unknown APIs).",
            &rejected,
        )?;
        counter(
            &mut encoder,
            "corelog_log_failures",
            "Partition logs failed by a write or fsync error (they answer KAFKA_STORAGE_ERROR; the broker gives up leadership until restarted).",
            &log_failures,
        )?;
        counter(
            &mut encoder,
            "corelog_idempotent_duplicate_batches",
            "Retried batches of idempotent producers answered with their original offsets instead of being written again.",
            &duplicates,
        )?;
        counter(
            &mut encoder,
            "corelog_connections_refused_per_ip",
            "New connections closed because their IP was at max.connections.per.ip.",
            &refused_ip,
        )?;
        counter(
            &mut encoder,
            "corelog_connection_limit_waits",
            "Times an acceptor stopped accepting until a slot of max.connections freed.",
            &accept_waits,
        )?;
        counter(
            &mut encoder,
            "corelog_request_memory_waits",
            "Request frames whose reader waited for queued.max.request.bytes.",
            &memory_waits,
        )?;
        counter(
            &mut encoder,
            "corelog_fetch_bytes_spliced",
            "Fetched record bytes sent from segment files with splice, never copied to user space.",
            &spliced,
        )?;
        counter(
            &mut encoder,
            "corelog_tls_sessions",
            "TLS sessions established, by where their records are sealed: kernel (kTLS) or user (rustls).",
            &tls_sessions,
        )?;
        // The controller port is served off the shards (its own threads).
        let controller = vec![("shard".to_string(), "controller".to_string())];
        let port = &crate::inter_broker_security::CONTROLLER_PORT_REFUSALS;
        failed_auth.push((controller.clone(), port.failed_authentications()));
        denied.push((controller, port.denied()));
        counter(
            &mut encoder,
            "corelog_failed_authentications",
            "Refused logins: SASL (wrong credentials, an unsupported mechanism) and failed TLS handshakes.",
            &failed_auth,
        )?;
        counter(
            &mut encoder,
            "corelog_denied_operations",
            "Operations an ACL refused: each topic, group or cluster action denied to a principal.",
            &denied,
        )?;
        counter(
            &mut encoder,
            "corelog_unauthenticated_oversize_requests",
            "Connections closed for a request larger than sasl.server.max.receive.size before they had authenticated.",
            &unauth_oversize,
        )?;
        counter(
            &mut encoder,
            "corelog_accept_out_of_descriptors",
            "Accepts that found no file descriptor free (EMFILE/ENFILE).",
            &accept_no_fd,
        )?;
        gauge(
            &mut encoder,
            "corelog_segment_files_open",
            "Segment files (logs and indexes) the shard holds open now.",
            &files_open,
        )?;
        gauge(
            &mut encoder,
            "corelog_segment_files_open_max",
            "Most segment files the shard holds open at once (--max-open-segment-files / shards).",
            &files_capacity,
        )?;
        counter(
            &mut encoder,
            "corelog_segment_file_opens",
            "Segment files opened (each one not open when an operation needed it).",
            &file_opens,
        )?;
        counter(
            &mut encoder,
            "corelog_segment_file_evictions",
            "Segment files closed because the shard's bound was reached.",
            &file_evictions,
        )?;
        let series = |f: fn(&corelog_metrics::ReplicationMetrics) -> u64| {
            replication
                .iter()
                .map(|(l, r)| (l.clone(), f(r)))
                .collect::<Vec<_>>()
        };
        counter(
            &mut encoder,
            "corelog_isr_shrinks",
            "ISR shrinks committed for partitions this shard leads.",
            &series(|r| r.isr_shrinks),
        )?;
        counter(
            &mut encoder,
            "corelog_isr_expands",
            "ISR expansions committed for partitions this shard leads.",
            &series(|r| r.isr_expands),
        )?;
        counter(
            &mut encoder,
            "corelog_isr_shrink_proposals",
            "ISR shrinks proposed to the controller for partitions this shard leads.",
            &series(|r| r.isr_shrink_proposals),
        )?;
        counter(
            &mut encoder,
            "corelog_isr_expand_proposals",
            "ISR expansions proposed to the controller for partitions this shard leads.",
            &series(|r| r.isr_expand_proposals),
        )?;
        counter(
            &mut encoder,
            "corelog_isr_proposals_refused",
            "ISR changes of partitions this shard leads that the controller refused.",
            &series(|r| r.isr_proposals_refused),
        )?;
        gauge(
            &mut encoder,
            "corelog_leader_partitions",
            "Partitions this shard leads.",
            &series(|r| r.leaders),
        )?;
        gauge(
            &mut encoder,
            "corelog_follower_partitions",
            "Partitions this shard follows.",
            &series(|r| r.followers),
        )?;
        gauge(
            &mut encoder,
            "corelog_under_replicated_partitions",
            "Led partitions whose ISR is smaller than their replica set.",
            &series(|r| r.under_replicated),
        )?;
        gauge(
            &mut encoder,
            "corelog_under_min_isr_partitions",
            "Led partitions whose ISR is below min.insync.replicas (acks=all is refused).",
            &series(|r| r.under_min_isr),
        )?;
        gauge(
            &mut encoder,
            "corelog_follower_lag_offsets_max",
            "The largest lag, in offsets, of a follower behind a leader of this shard.",
            &series(|r| r.follower_lag_offsets_max),
        )?;
        gauge(
            &mut encoder,
            "corelog_follower_lag_milliseconds_max",
            "The longest a follower of a leader of this shard has not been caught up.",
            &series(|r| r.follower_lag_ms_max),
        )?;
        gauge(
            &mut encoder,
            "corelog_uncommitted_offsets",
            "Offsets this shard's leaders hold above their high watermark (high-watermark lag).",
            &series(|r| r.uncommitted_offsets),
        )?;
        counter(
            &mut encoder,
            "corelog_segment_file_open_failures_no_descriptor",
            "Segment file opens that failed for want of a file descriptor.",
            &files_exhausted,
        )?;
        let share_series = |f: fn(&corelog_metrics::ShareMetrics) -> u64| {
            share
                .iter()
                .map(|(l, m)| (l.clone(), f(m)))
                .collect::<Vec<_>>()
        };
        counter(
            &mut encoder,
            "corelog_share_records_acquired",
            "Share-group deliveries: records acquired by a member, on share partitions this shard leads.",
            &share_series(|m| m.acquired),
        )?;
        counter(
            &mut encoder,
            "corelog_share_records_acknowledged",
            "Share-group records acknowledged by their member, by type (accept, release, reject, renew, gap).",
            &share_acks,
        )?;
        counter(
            &mut encoder,
            "corelog_share_records_lock_expired",
            "Share-group records whose acquisition lock ran out (delivered again, or archived at the limit).",
            &share_series(|m| m.lock_expired),
        )?;
        counter(
            &mut encoder,
            "corelog_share_records_archived_at_delivery_limit",
            "Share-group records archived because they were released or timed out at group.share.delivery.count.limit.",
            &share_series(|m| m.archived_at_limit),
        )?;
        counter(
            &mut encoder,
            "corelog_share_records_archived_aborted",
            "Records of aborted transactions archived unread for read_committed share groups.",
            &share_series(|m| m.archived_unreadable),
        )?;
        counter(
            &mut encoder,
            "corelog_share_records_session_released",
            "Share-group records given back when their member's share session ended.",
            &share_series(|m| m.session_released),
        )?;
        gauge(
            &mut encoder,
            "corelog_share_partitions",
            "Share partitions (a share group's view of a partition) held in memory by this shard.",
            &share_series(|m| m.partitions),
        )?;
        gauge(
            &mut encoder,
            "corelog_share_records_in_flight",
            "Records in the window of this shard's share partitions, from their start offset (all before it done) to their end.",
            &share_series(|m| m.in_flight),
        )?;
        counter(
            &mut encoder,
            "corelog_appended_records",
            "Records appended by this shard's leaders: produced batches and the coordinators' own records (not idempotent retries answered from the log, not transaction markers, not replicas' copies).",
            &appended,
        )?;
        gauge(
            &mut encoder,
            "corelog_log_size_bytes",
            "Bytes the shard's partition logs hold on disk.",
            &log_bytes,
        )?;
        gauge(
            &mut encoder,
            "corelog_produce_refused_disk",
            "1 while the shard refuses produces for the disk (--disk-budget-bytes or --disk-fill-max-percent), else 0.",
            &refused_disk,
        )?;
        broker_metrics(&mut encoder, &self.broker)?;
        process_metrics(&mut encoder, &self.process)?;
        Ok(())
    }
}

/// Renders every shard's snapshot, the broker's gauges and the process's resources.
pub fn render(scrape: Scrape, process: ProcessMetrics) -> String {
    let mut registry = Registry::default();
    registry.register_collector(Box::new(Snapshots {
        shards: scrape.shards,
        broker: scrape.broker,
        process,
    }));
    let mut out = String::new();
    if prometheus_client::encoding::prometheus_text::encode(&mut out, &registry).is_err() {
        out.clear();
    }
    out
}

pub const CONTENT_TYPE: &str = "text/plain; version=0.0.4; charset=utf-8";

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn group_lag_has_partition_series_and_each_group_sum_and_max() {
        let mut broker = BrokerMetrics::default();
        for (group, partition, lag) in [("g", 0, 5), ("g", 1, 7), ("h", 0, 0)] {
            broker
                .group_lag
                .insert((group.into(), "t".into(), partition), lag);
        }
        broker.active_controller = true;
        let scrape = Scrape {
            shards: Vec::new(),
            broker,
        };
        let text = render(scrape, ProcessMetrics::default());
        for line in [
            "corelog_consumer_group_lag{group=\"g\",topic=\"t\",partition=\"0\"} 5",
            "corelog_consumer_group_lag{group=\"g\",topic=\"t\",partition=\"1\"} 7",
            "corelog_consumer_group_lag{group=\"h\",topic=\"t\",partition=\"0\"} 0",
            "corelog_consumer_group_lag_sum{group=\"g\"} 12",
            "corelog_consumer_group_lag_max{group=\"g\"} 7",
            "corelog_consumer_group_lag_sum{group=\"h\"} 0",
            "corelog_active_controller 1",
            "corelog_offline_partitions 0",
        ] {
            assert!(text.lines().any(|l| l == line), "{line} not in:\n{text}");
        }
        // What the system did not give is left out, not exported as 0.
        assert!(!text.contains("process_resident_memory_bytes"), "{text}");
        assert!(
            !text.contains("corelog_data_dir_filesystem_size_bytes"),
            "{text}"
        );
    }
}
