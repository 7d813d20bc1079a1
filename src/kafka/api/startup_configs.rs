//! corelog's own start-up settings under Kafka's names, as DescribeConfigs shows them:
//! the value each resolved to when the broker started (given, or corelog's default).
//!
//! Invariant: every key of Kafka's vocabulary that corelog reads at start and that no
//! other row describes (`static_broker_configs`, `security_configs`) has a value here
//! (`every_key_read_at_start_is_described`), so a broker's DescribeConfigs lists Kafka's
//! whole vocabulary.

use crate::config::BrokerConfig;
use std::time::Duration;

/// The value `key` took at start, in Kafka's units and text; `None` for a key not read
/// at start, or one that resolved to nothing (a disabled feature's interval).
pub(super) fn value_of(c: &BrokerConfig, key: &str) -> Option<String> {
    let ms = |d: Duration| d.as_millis().to_string();
    let consumer = &c.groups.consumer;
    let share = &c.groups.share;
    let delivery = c.share_leader.delivery();
    let txns = &c.txns;
    let bound = |b: (i64, i64)| (b.0.to_string(), b.1.to_string());
    Some(match key {
        "authorizer.class.name" => match c.authorizer {
            Some(_) => "org.apache.kafka.metadata.authorizer.StandardAuthorizer".into(),
            None => String::new(),
        },
        "auto.leader.rebalance.enable" => c.cluster.leader_balance.is_some().to_string(),
        "leader.imbalance.check.interval.seconds" => c
            .cluster
            .leader_balance
            .as_ref()?
            .check_interval
            .as_secs()
            .to_string(),
        "leader.imbalance.per.broker.percentage" => c
            .cluster
            .leader_balance
            .as_ref()?
            .max_imbalance_percent
            .to_string(),
        "broker.heartbeat.interval.ms" => ms(c.cluster.heartbeat_interval),
        "broker.session.timeout.ms" => ms(c.cluster.session_timeout),
        "controller.listener.names" => c.kafka.controller_listener.clone().unwrap_or_default(),
        "controller.quorum.voters" => c
            .cluster
            .voters
            .iter()
            .map(|(id, addr)| format!("{id}@{addr}"))
            .collect::<Vec<_>>()
            .join(","),
        "default.replication.factor" => c.cluster.default_replication_factor.to_string(),
        "replica.lag.time.max.ms" => c.cluster.replication.lag_time_max_ms.to_string(),
        "group.consumer.assignors" => consumer
            .assignors
            .iter()
            .map(|a| a.name())
            .collect::<Vec<_>>()
            .join(","),
        "group.consumer.heartbeat.interval.ms" => consumer.heartbeat_interval_ms.to_string(),
        "group.consumer.session.timeout.ms" => consumer.session_timeout_ms.to_string(),
        "group.consumer.min.heartbeat.interval.ms" => {
            consumer.min_heartbeat_interval_ms.to_string()
        }
        "group.consumer.max.heartbeat.interval.ms" => {
            consumer.max_heartbeat_interval_ms.to_string()
        }
        "group.consumer.min.session.timeout.ms" => consumer.min_session_timeout_ms.to_string(),
        "group.consumer.max.session.timeout.ms" => consumer.max_session_timeout_ms.to_string(),
        "group.consumer.max.size" => consumer.max_size.to_string(),
        "group.consumer.migration.policy" => consumer.migration_policy.name().to_string(),
        "group.initial.rebalance.delay.ms" => ms(c.groups.initial_rebalance_delay),
        "offsets.retention.minutes" => (c.groups.offsets_retention.as_secs() / 60).to_string(),
        "offsets.topic.replication.factor" => {
            c.cluster.offsets_topic_replication_factor.to_string()
        }
        "offsets.topic.segment.bytes" => c.groups.offsets_segment_bytes.to_string(),
        "group.share.heartbeat.interval.ms" => share.heartbeat_interval_ms.to_string(),
        "group.share.session.timeout.ms" => share.session_timeout_ms.to_string(),
        "group.share.max.size" => share.max_size.to_string(),
        "group.share.record.lock.duration.ms" => delivery.record_lock_duration_ms.to_string(),
        "group.share.delivery.count.limit" => delivery.delivery_count_limit.to_string(),
        "group.share.partition.max.record.locks" => delivery.partition_max_record_locks.to_string(),
        "group.share.min.heartbeat.interval.ms" => bound(share.bounds.heartbeat_interval_ms).0,
        "group.share.max.heartbeat.interval.ms" => bound(share.bounds.heartbeat_interval_ms).1,
        "group.share.min.session.timeout.ms" => bound(share.bounds.session_timeout_ms).0,
        "group.share.max.session.timeout.ms" => bound(share.bounds.session_timeout_ms).1,
        "group.share.min.record.lock.duration.ms" => bound(share.bounds.record_lock_duration_ms).0,
        "group.share.max.record.lock.duration.ms" => bound(share.bounds.record_lock_duration_ms).1,
        "group.share.min.delivery.count.limit" => bound(share.bounds.delivery_count_limit).0,
        "group.share.max.delivery.count.limit" => bound(share.bounds.delivery_count_limit).1,
        "group.share.min.partition.max.record.locks" => {
            bound(share.bounds.partition_max_record_locks).0
        }
        "group.share.max.partition.max.record.locks" => {
            bound(share.bounds.partition_max_record_locks).1
        }
        "share.coordinator.snapshot.update.records.per.snapshot" => {
            c.share_state.updates_per_snapshot.to_string()
        }
        "share.coordinator.state.topic.num.partitions" => c.share_state.partitions.to_string(),
        "share.coordinator.state.topic.replication.factor" => {
            c.cluster.share_state_replication_factor.to_string()
        }
        "share.coordinator.state.topic.min.isr" => c.cluster.share_state_min_isr.to_string(),
        "log.cleaner.backoff.ms" => ms(c.housekeeping.cleaner_backoff),
        "log.cleaner.dedupe.buffer.size" => c.housekeeping.cleaner_buffer_bytes.to_string(),
        // Unlimited is Kafka's Double.MAX_VALUE.
        "log.cleaner.io.max.bytes.per.second" => match c.housekeeping.cleaner_io_bytes_per_second {
            Some(n) => format!("{n}.0"),
            None => "1.7976931348623157E308".into(),
        },
        "producer.id.expiration.ms" => c.housekeeping.producer_id_expiration_ms.to_string(),
        "max.connections" => c.limits.connections.total_max.to_string(),
        "max.connections.per.ip" => c
            .limits
            .connections
            .per_ip_max
            .map_or(i32::MAX.to_string(), |n| n.to_string()),
        "max.connections.per.ip.overrides" => {
            let mut o: Vec<String> = c
                .limits
                .connections
                .per_ip_overrides
                .iter()
                .map(|(ip, n)| format!("{ip}:{n}"))
                .collect();
            o.sort();
            o.join(",")
        }
        "queued.max.request.bytes" => c.limits.queued_max_request_bytes.to_string(),
        "quota.window.num" => c.quota.samples.to_string(),
        "quota.window.size.seconds" => (c.quota.window_ms / 1000).to_string(),
        "transaction.abort.timed.out.transaction.cleanup.interval.ms" => {
            ms(txns.abort_timed_out_interval)
        }
        "transaction.remove.expired.transaction.cleanup.interval.ms" => {
            ms(txns.remove_expired_interval)
        }
        "transaction.max.timeout.ms" => txns.rules.max_timeout_ms.to_string(),
        "transactional.id.expiration.ms" => txns.rules.id_expiration_ms.to_string(),
        "transaction.partition.verification.enable" => txns.verify_partitions.to_string(),
        "transaction.state.log.min.isr" => txns.min_isr.to_string(),
        "transaction.state.log.num.partitions" => txns.partitions.to_string(),
        "transaction.state.log.replication.factor" => txns.replication_factor.to_string(),
        "transaction.state.log.segment.bytes" => txns.segment_bytes.to_string(),
        _ => return None,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::ServeArgs;
    use corelog_shards::kafka_broker_keys;

    #[test]
    fn every_key_read_at_start_is_described() {
        let c = BrokerConfig::resolve(ServeArgs::default()).expect("defaults resolve");
        // Described by rows of their own.
        let own = |k: &str| {
            crate::security_config::KEYS.contains(&k)
                || [
                    "node.id",
                    "broker.id",
                    "broker.rack",
                    "log.dirs",
                    "listeners",
                    "advertised.listeners",
                    "listener.security.protocol.map",
                    "inter.broker.listener.name",
                    "num.partitions",
                    "auto.create.topics.enable",
                    "socket.request.max.bytes",
                    "offsets.topic.num.partitions",
                    "sasl.server.max.receive.size",
                    "log.retention.check.interval.ms",
                ]
                .contains(&k)
        };
        let missing: Vec<&str> = kafka_broker_keys::all()
            .iter()
            .map(|k| k.name)
            .filter(|k| c.kafka.read_at_start(k) && !own(k) && value_of(&c, k).is_none())
            .collect();
        assert_eq!(missing, Vec::<&str>::new());
        // Where corelog keeps Kafka's defaults, the values read as Kafka's.
        for key in [
            "group.consumer.session.timeout.ms",
            "group.share.record.lock.duration.ms",
            "transaction.max.timeout.ms",
            "offsets.retention.minutes",
            "broker.session.timeout.ms",
        ] {
            let kafka = kafka_broker_keys::lookup(key).and_then(|k| k.default);
            assert_eq!(value_of(&c, key).as_deref(), kafka, "{key}");
        }
    }
}
