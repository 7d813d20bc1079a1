//! Broker configuration: command-line flags over an optional TOML file over defaults.
//!
//! TOML keys are the flag names (`data-dir = "..."`); Kafka's own dotted names are
//! accepted as aliases where the meaning is the same (`num.partitions`,
//! `auto.create.topics.enable`, `message.max.bytes`, `socket.request.max.bytes`,
//! `log.segment.bytes`, `log.flush.interval.ms`, `log.retention.ms`, ...). Unknown keys
//! are an error, so a typo never silently falls back to a default. Every topic config
//! has a broker-wide default, settable by its topic key with `--topic-default` and
//! validated by the same code as a topic override.

use crate::kafka_settings::{FileKey, KafkaSettings};
use crate::limits;
use crate::limits::{
    default_max_connections, parse_overrides, ConnectionLimitsConfig, MAX_CONNECTIONS_MIN,
};
use crate::listeners::SecurityProtocol;
use crate::security_config::SecurityConfig;
use anyhow::{bail, Context};
use clap::Args;
use corelog_shards::group::coordinator::GroupConfig;
use corelog_shards::group::share::group::{ShareBounds, ShareGroupConfig};
use corelog_shards::housekeeping::HousekeepingConfig;
use corelog_shards::txn::coordinator::TxnCoordinatorConfig;
use corelog_storage::{Durability, LogConfig};
use serde::Deserialize;
use std::net::SocketAddr;
use std::path::PathBuf;
use std::sync::Arc;

/// Default cleaner I/O budget per shard. Kafka leaves it unlimited; here it is set so a
/// compaction backlog never takes more than a small share of a disk's bandwidth away
/// from produce and fetch (benches/housekeeping.py measures the effect).
pub const CLEANER_IO_DEFAULT_BYTES_PER_SECOND: u64 = 32 << 20;

#[derive(Debug, Clone, Default, Args, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub struct ServeArgs {
    /// Address the Kafka listener binds (every shard binds it with SO_REUSEPORT).
    #[arg(long)]
    pub listen: Option<SocketAddr>,
    /// HOST:PORT that Metadata gives clients (default: the listen address).
    #[arg(long)]
    pub advertise: Option<String>,
    /// Kafka's `listeners` (NAME://HOST:PORT, comma-separated), instead of --listen:
    /// every one is served, each client told the addresses of the listener it used.
    #[arg(long)]
    pub listeners: Option<String>,
    /// Kafka's `advertised.listeners`, instead of --advertise (default: `listeners`).
    #[arg(long)]
    #[serde(alias = "advertised.listeners")]
    pub advertised_listeners: Option<String>,
    /// Kafka's `listener.security.protocol.map` (NAME:PROTOCOL, comma-separated).
    #[arg(long)]
    #[serde(alias = "listener.security.protocol.map")]
    pub listener_security_protocol_map: Option<String>,
    /// Kafka's `inter.broker.listener.name` (default: PLAINTEXT).
    #[arg(long)]
    #[serde(alias = "inter.broker.listener.name")]
    pub inter_broker_listener_name: Option<String>,
    /// Kafka's `controller.listener.names`: the listener whose protocol (in
    /// `listener.security.protocol.map`) and `listener.name.<name>.*` settings secure the
    /// controller port (default: plaintext). When `listeners` names it, it binds the
    /// controller port instead of --controller-listen.
    #[arg(long)]
    #[serde(alias = "controller.listener.names")]
    pub controller_listener_names: Option<String>,
    /// Kafka's `authorizer.class.name`: `org.apache.kafka.metadata.authorizer.StandardAuthorizer`
    /// turns ACLs on (default: none, every request allowed).
    #[arg(long)]
    #[serde(alias = "authorizer.class.name")]
    pub authorizer_class_name: Option<String>,
    /// Kafka's `super.users`: principals that pass every ACL check (`User:a;User:b`).
    #[arg(long)]
    #[serde(alias = "super.users")]
    pub super_users: Option<String>,
    /// Kafka's `allow.everyone.if.no.acl.found` (default false); in the config file a
    /// boolean or, as `server.properties` writes it, "true"/"false".
    #[arg(long)]
    #[serde(
        alias = "allow.everyone.if.no.acl.found",
        default,
        deserialize_with = "bool_or_text"
    )]
    pub allow_everyone_if_no_acl_found: Option<bool>,
    /// Kafka's TLS keys (`ssl.*`, and `listener.name.<name>.ssl.*` for one listener),
    /// as in the config file: `--security ssl.keystore.location=/etc/corelog/broker.pem`
    /// (repeatable; a flag wins over the file).
    #[arg(long = "security", value_name = "KEY=VALUE")]
    #[serde(skip)]
    pub security: Vec<String>,
    /// Directory holding partition logs and cluster metadata (`./data` by default); the
    /// one-directory form of `log-dirs`.
    #[arg(long)]
    pub data_dir: Option<PathBuf>,
    /// Directories holding partition logs, comma-separated: one per disk, each partition
    /// on one of them, a new one on the directory with the most space available; the
    /// first also holds the cluster metadata. Give this or `data-dir`, not both.
    #[arg(long, value_name = "DIR,DIR,...")]
    #[serde(alias = "log.dirs")]
    pub log_dirs: Option<String>,
    /// Number of shards (cores); default one per available CPU.
    #[arg(long)]
    pub shards: Option<usize>,
    /// Address of the HTTP endpoint (/health).
    #[arg(long)]
    pub http: Option<SocketAddr>,
    /// TOML file with the same keys as these flags; flags win.
    #[arg(long)]
    #[serde(skip)]
    pub config: Option<PathBuf>,
    /// tracing filter, e.g. `info` or `corelog=debug,shards=debug`.
    #[arg(long)]
    pub log_level: Option<String>,
    /// This broker's node id in Metadata (Kafka's node.id).
    #[arg(long)]
    #[serde(alias = "node.id")]
    pub node_id: Option<i32>,
    /// Create unknown topics on Metadata/Produce (Kafka's auto.create.topics.enable).
    #[arg(long)]
    #[serde(alias = "auto.create.topics.enable")]
    pub auto_create_topics: Option<bool>,
    /// Hand each TLS session to the kernel (kTLS) when the kernel takes its cipher, so
    /// responses, spliced segment data included, are sealed without a copy to user
    /// space; `false` keeps every session in user space (rustls). Default true.
    #[arg(long)]
    pub tls_kernel_offload: Option<bool>,
    /// Partitions of an auto-created topic (Kafka's num.partitions).
    #[arg(long)]
    #[serde(alias = "num.partitions")]
    pub num_partitions: Option<i32>,
    /// Largest record batch accepted (Kafka's message.max.bytes).
    #[arg(long)]
    #[serde(alias = "message.max.bytes")]
    pub message_max_bytes: Option<usize>,
    /// Largest request frame accepted (Kafka's socket.request.max.bytes).
    #[arg(long)]
    #[serde(alias = "socket.request.max.bytes")]
    pub socket_request_max_bytes: Option<usize>,
    /// Segment size before a roll (Kafka's log.segment.bytes).
    #[arg(long)]
    #[serde(alias = "log.segment.bytes")]
    pub segment_bytes: Option<u64>,
    /// Segment age before a roll, ms (Kafka's log.roll.ms).
    #[arg(long)]
    #[serde(alias = "log.roll.ms")]
    pub segment_ms: Option<u64>,
    /// always | ack-all | interval — when an acknowledged produce is also fsynced.
    #[arg(long)]
    pub durability: Option<String>,
    /// Background fdatasync period, ms (Kafka's log.flush.interval.ms).
    #[arg(long)]
    #[serde(alias = "log.flush.interval.ms")]
    pub flush_interval_ms: Option<u64>,
    /// Partitions of __consumer_offsets when it is created (Kafka's
    /// offsets.topic.num.partitions).
    #[arg(long)]
    #[serde(alias = "offsets.topic.num.partitions")]
    pub offsets_topic_partitions: Option<i32>,
    /// How long an empty group's first rebalance waits for more members, ms (Kafka's
    /// group.initial.rebalance.delay.ms).
    #[arg(long)]
    #[serde(alias = "group.initial.rebalance.delay.ms")]
    pub group_initial_rebalance_delay_ms: Option<u64>,
    /// How long a consumer-protocol member (KIP-848) may go without a heartbeat, ms
    /// (Kafka's group.consumer.session.timeout.ms).
    #[arg(long)]
    #[serde(alias = "group.consumer.session.timeout.ms")]
    pub group_consumer_session_timeout_ms: Option<i32>,
    /// How often consumer-protocol members heartbeat, ms (Kafka's
    /// group.consumer.heartbeat.interval.ms).
    #[arg(long)]
    #[serde(alias = "group.consumer.heartbeat.interval.ms")]
    pub group_consumer_heartbeat_interval_ms: Option<i32>,
    /// The most members a consumer-protocol group may have (Kafka's
    /// group.consumer.max.size).
    #[arg(long)]
    #[serde(alias = "group.consumer.max.size")]
    pub group_consumer_max_size: Option<u32>,
    /// The server-side assignors, the default first: `uniform`, `range` (Kafka's
    /// group.consumer.assignors).
    #[arg(long)]
    #[serde(alias = "group.consumer.assignors")]
    pub group_consumer_assignors: Option<String>,
    /// The least session timeout a group's own config may set, ms (Kafka's
    /// group.consumer.min.session.timeout.ms, 45000, or the broker's session timeout
    /// if that is lower).
    #[arg(long)]
    #[serde(alias = "group.consumer.min.session.timeout.ms")]
    pub group_consumer_min_session_timeout_ms: Option<i32>,
    /// The greatest, ms (Kafka's group.consumer.max.session.timeout.ms, 60000, or the
    /// broker's session timeout if that is higher).
    #[arg(long)]
    #[serde(alias = "group.consumer.max.session.timeout.ms")]
    pub group_consumer_max_session_timeout_ms: Option<i32>,
    /// The least heartbeat interval a group's own config may set, ms (Kafka's
    /// group.consumer.min.heartbeat.interval.ms, 5000, or the broker's interval if lower).
    #[arg(long)]
    #[serde(alias = "group.consumer.min.heartbeat.interval.ms")]
    pub group_consumer_min_heartbeat_interval_ms: Option<i32>,
    /// The greatest, ms (Kafka's group.consumer.max.heartbeat.interval.ms, 15000, or the
    /// broker's interval if higher).
    #[arg(long)]
    #[serde(alias = "group.consumer.max.heartbeat.interval.ms")]
    pub group_consumer_max_heartbeat_interval_ms: Option<i32>,
    /// Whether groups change protocols with members in them: `bidirectional`
    /// (default), `upgrade`, `downgrade`, `disabled` (Kafka's
    /// group.consumer.migration.policy).
    #[arg(long)]
    #[serde(alias = "group.consumer.migration.policy")]
    pub group_consumer_migration_policy: Option<String>,
    /// Whether the cluster serves share groups (KIP-932; Kafka's finalized feature
    /// share.version: 0 off, 1 on, the default, as a new Kafka 4.2 cluster). Off, the
    /// share-group APIs answer UNSUPPORTED_VERSION. Set the same on every broker.
    #[arg(long)]
    #[serde(alias = "share.version")]
    pub share_version: Option<i16>,
    /// How long a share-group member may go without a heartbeat, ms (Kafka's
    /// group.share.session.timeout.ms, 45000).
    #[arg(long)]
    #[serde(alias = "group.share.session.timeout.ms")]
    pub group_share_session_timeout_ms: Option<i32>,
    /// How often share-group members heartbeat, ms (Kafka's
    /// group.share.heartbeat.interval.ms, 5000).
    #[arg(long)]
    #[serde(alias = "group.share.heartbeat.interval.ms")]
    pub group_share_heartbeat_interval_ms: Option<i32>,
    /// How long a share consumer holds the records it fetched before they are delivered
    /// again, ms (Kafka's group.share.record.lock.duration.ms, 30000).
    #[arg(long)]
    #[serde(alias = "group.share.record.lock.duration.ms")]
    pub group_share_record_lock_duration_ms: Option<i64>,
    /// Deliveries of a record before it is archived (Kafka's
    /// group.share.delivery.count.limit, 5, between 2 and 10).
    #[arg(long)]
    #[serde(alias = "group.share.delivery.count.limit")]
    pub group_share_delivery_count_limit: Option<u16>,
    /// Records in flight per share partition (Kafka's
    /// group.share.partition.max.record.locks, 2000, between 100 and 10000).
    #[arg(long)]
    #[serde(alias = "group.share.partition.max.record.locks")]
    pub group_share_partition_max_record_locks: Option<i64>,
    /// The least session timeout a share group's own config may set (Kafka's
    /// group.share.min.session.timeout.ms, 45000, or the broker's own value if that is lower).
    #[arg(long)]
    #[serde(alias = "group.share.min.session.timeout.ms")]
    pub group_share_min_session_timeout_ms: Option<i32>,
    /// The greatest (Kafka's group.share.max.session.timeout.ms, 60000, or the broker's own value if
    /// that is higher).
    #[arg(long)]
    #[serde(alias = "group.share.max.session.timeout.ms")]
    pub group_share_max_session_timeout_ms: Option<i32>,
    /// The least heartbeat interval a share group's own config may set (Kafka's
    /// group.share.min.heartbeat.interval.ms, 5000, or the broker's own value if that is lower).
    #[arg(long)]
    #[serde(alias = "group.share.min.heartbeat.interval.ms")]
    pub group_share_min_heartbeat_interval_ms: Option<i32>,
    /// The greatest (Kafka's group.share.max.heartbeat.interval.ms, 15000, or the broker's own value if
    /// that is higher).
    #[arg(long)]
    #[serde(alias = "group.share.max.heartbeat.interval.ms")]
    pub group_share_max_heartbeat_interval_ms: Option<i32>,
    /// The least record lock duration a share group's own config may set (Kafka's
    /// group.share.min.record.lock.duration.ms, 15000, or the broker's own value if that is lower).
    #[arg(long)]
    #[serde(alias = "group.share.min.record.lock.duration.ms")]
    pub group_share_min_record_lock_duration_ms: Option<i64>,
    /// The greatest (Kafka's group.share.max.record.lock.duration.ms, 60000, or the broker's own value if
    /// that is higher).
    #[arg(long)]
    #[serde(alias = "group.share.max.record.lock.duration.ms")]
    pub group_share_max_record_lock_duration_ms: Option<i64>,
    /// The least delivery count limit a share group's own config may set (Kafka's
    /// group.share.min.delivery.count.limit, 2, or the broker's own value if that is lower).
    #[arg(long)]
    #[serde(alias = "group.share.min.delivery.count.limit")]
    pub group_share_min_delivery_count_limit: Option<i64>,
    /// The greatest (Kafka's group.share.max.delivery.count.limit, 10, or the broker's own value if
    /// that is higher).
    #[arg(long)]
    #[serde(alias = "group.share.max.delivery.count.limit")]
    pub group_share_max_delivery_count_limit: Option<i64>,
    /// The least in-flight limit a share group's own config may set (Kafka's
    /// group.share.min.partition.max.record.locks, 100, or the broker's own value if that is lower).
    #[arg(long)]
    #[serde(alias = "group.share.min.partition.max.record.locks")]
    pub group_share_min_partition_max_record_locks: Option<i64>,
    /// The greatest (Kafka's group.share.max.partition.max.record.locks, 10000, or the broker's own value if
    /// that is higher).
    #[arg(long)]
    #[serde(alias = "group.share.max.partition.max.record.locks")]
    pub group_share_max_partition_max_record_locks: Option<i64>,
    /// The most members a share group may have (Kafka's group.share.max.size, 200).
    #[arg(long)]
    #[serde(alias = "group.share.max.size")]
    pub group_share_max_size: Option<u32>,
    /// Segment size of __consumer_offsets partitions (Kafka's offsets.topic.segment.bytes).
    #[arg(long)]
    #[serde(alias = "offsets.topic.segment.bytes")]
    pub offsets_topic_segment_bytes: Option<u64>,
    /// How long an empty group keeps its committed offsets, minutes (Kafka's
    /// offsets.retention.minutes, 10080).
    #[arg(long)]
    #[serde(alias = "offsets.retention.minutes")]
    pub offsets_retention_minutes: Option<u64>,
    /// The same in milliseconds, for finer control (wins over minutes).
    #[arg(long)]
    pub offsets_retention_ms: Option<u64>,
    /// Partitions of __transaction_state when it is created (Kafka's
    /// transaction.state.log.num.partitions, 50).
    #[arg(long)]
    #[serde(alias = "transaction.state.log.num.partitions")]
    pub transaction_state_log_num_partitions: Option<i32>,
    /// Replicas of each __transaction_state partition, at most one per live broker
    /// (Kafka's transaction.state.log.replication.factor, 3).
    #[arg(long)]
    #[serde(alias = "transaction.state.log.replication.factor")]
    pub transaction_state_log_replication_factor: Option<i32>,
    /// min.insync.replicas of __transaction_state (Kafka's transaction.state.log.min.isr,
    /// 2; at most its replication factor).
    #[arg(long)]
    #[serde(alias = "transaction.state.log.min.isr")]
    pub transaction_state_log_min_isr: Option<i32>,
    /// Segment size of __transaction_state partitions (Kafka's
    /// transaction.state.log.segment.bytes, 100 MiB).
    #[arg(long)]
    #[serde(alias = "transaction.state.log.segment.bytes")]
    pub transaction_state_log_segment_bytes: Option<u64>,
    /// The longest transaction timeout a producer may ask for, ms (Kafka's
    /// transaction.max.timeout.ms, 15 minutes).
    #[arg(long)]
    #[serde(alias = "transaction.max.timeout.ms")]
    pub transaction_max_timeout_ms: Option<i32>,
    /// How long a transactional id with no transaction in flight is kept after its last
    /// use, ms (Kafka's transactional.id.expiration.ms, 7 days).
    #[arg(long)]
    #[serde(alias = "transactional.id.expiration.ms")]
    pub transactional_id_expiration_ms: Option<i64>,
    /// How often transactions past their timeout are looked for and aborted, ms (Kafka's
    /// transaction.abort.timed.out.transaction.cleanup.interval.ms, 10 s).
    #[arg(long)]
    #[serde(alias = "transaction.abort.timed.out.transaction.cleanup.interval.ms")]
    pub transaction_abort_timed_out_transaction_cleanup_interval_ms: Option<u64>,
    /// How often expired transactional ids are removed, ms (Kafka's
    /// transaction.remove.expired.transaction.cleanup.interval.ms, 1 hour).
    #[arg(long)]
    #[serde(alias = "transaction.remove.expired.transaction.cleanup.interval.ms")]
    pub transaction_remove_expired_transaction_cleanup_interval_ms: Option<u64>,
    /// Whether a partition leader verifies with the coordinator a transactional batch
    /// that opens a transaction in its partition (Kafka's
    /// transaction.partition.verification.enable, true; KIP-890).
    #[arg(long)]
    #[serde(alias = "transaction.partition.verification.enable")]
    pub transaction_partition_verification_enable: Option<bool>,
    /// The transaction protocol version the cluster offers clients (Kafka's finalized
    /// feature transaction.version: 0, 1 or 2; 2 by default, as a new Kafka 4 cluster).
    /// At 2, clients that know it end each transaction under a new epoch and leave adding
    /// partitions to their leaders (KIP-890 part 2); older clients use version 1
    /// whatever this says. Set the same on every broker.
    #[arg(long)]
    #[serde(alias = "transaction.version")]
    pub transaction_version: Option<i16>,
    /// Age after which a segment is deleted, ms; -1 keeps data forever (Kafka's
    /// log.retention.ms; a topic's retention.ms overrides it).
    #[arg(long, allow_negative_numbers = true)]
    #[serde(alias = "log.retention.ms")]
    pub retention_ms: Option<i64>,
    /// Largest log of one partition before old segments are deleted; -1: unlimited
    /// (Kafka's log.retention.bytes).
    #[arg(long, allow_negative_numbers = true)]
    #[serde(alias = "log.retention.bytes")]
    pub retention_bytes: Option<i64>,
    /// A broker-wide default for any topic config, by its topic key:
    /// `--topic-default cleanup.policy=compact` (repeatable).
    #[arg(long = "topic-default", value_name = "KEY=VALUE")]
    #[serde(default)]
    pub topic_default: Vec<String>,
    /// How often each shard looks for segments to delete and logs to compact, ms
    /// (Kafka's log.retention.check.interval.ms).
    #[arg(long)]
    #[serde(alias = "log.retention.check.interval.ms")]
    pub retention_check_interval_ms: Option<u64>,
    /// Memory for the compaction key map of one shard, bytes (Kafka's
    /// log.cleaner.dedupe.buffer.size); a larger dirty log is compacted in passes.
    #[arg(long)]
    #[serde(alias = "log.cleaner.dedupe.buffer.size")]
    pub cleaner_dedupe_buffer_bytes: Option<u64>,
    /// The log cleaner's reads plus writes per second on one shard, bytes; 0: unlimited
    /// (Kafka's log.cleaner.io.max.bytes.per.second).
    #[arg(long)]
    #[serde(alias = "log.cleaner.io.max.bytes.per.second")]
    pub cleaner_io_max_bytes_per_second: Option<u64>,
    /// How often each shard looks for logs to compact, ms (Kafka's log.cleaner.backoff.ms).
    #[arg(long)]
    #[serde(alias = "log.cleaner.backoff.ms")]
    pub cleaner_backoff_ms: Option<u64>,
    /// Refuse produces while a log directory's filesystem is fuller than this, percent.
    #[arg(long)]
    pub disk_fill_max_percent: Option<f64>,
    /// Refuse produces while all partition logs together hold more than this, bytes.
    #[arg(long)]
    pub disk_budget_bytes: Option<u64>,
    /// How long a partition remembers an idle idempotent producer (its sequences, for
    /// duplicate detection), ms (Kafka's producer.id.expiration.ms, 1 day).
    #[arg(long)]
    #[serde(alias = "producer.id.expiration.ms")]
    pub producer_id_expiration_ms: Option<u64>,
    /// How often idle producers are looked for, ms (Kafka's
    /// producer.id.expiration.check.interval.ms, 10 minutes).
    #[arg(long)]
    #[serde(alias = "producer.id.expiration.check.interval.ms")]
    pub producer_id_expiration_check_interval_ms: Option<u64>,
    /// Most client connections open at once, broker-wide; beyond it acceptors wait for
    /// a slot and new clients wait in the listen backlog (Kafka's max.connections).
    /// Default: half the process's RLIMIT_NOFILE.
    #[arg(long)]
    #[serde(alias = "max.connections")]
    pub max_connections: Option<usize>,
    /// Most connections from one client IP; more are closed at once (Kafka's
    /// max.connections.per.ip). Default: unlimited.
    #[arg(long)]
    #[serde(alias = "max.connections.per.ip")]
    pub max_connections_per_ip: Option<usize>,
    /// Per-IP limits for given addresses, `IP:COUNT,IP:COUNT` (Kafka's
    /// max.connections.per.ip.overrides; IP literals only).
    #[arg(long)]
    #[serde(alias = "max.connections.per.ip.overrides")]
    pub max_connections_per_ip_overrides: Option<String>,
    /// Request frame bytes one shard holds at once; readers wait beyond it (Kafka's
    /// queued.max.request.bytes, per shard here). Default 256 MiB.
    #[arg(long)]
    #[serde(alias = "queued.max.request.bytes")]
    pub queued_max_request_bytes: Option<u64>,
    /// Requests read ahead on one connection before it stops reading (at least 5).
    #[arg(long)]
    pub max_inflight_requests_per_connection: Option<usize>,
    /// Tail-cache bytes of all partitions of one shard together. Default 512 MiB.
    #[arg(long)]
    pub tail_cache_shard_bytes: Option<u64>,
    /// Most segment files (logs and their indexes) open at once, broker-wide, split
    /// evenly over the shards; the least recently used closes past it and opens again
    /// when it is next read or written. Default: a quarter of RLIMIT_NOFILE.
    #[arg(long)]
    pub max_open_segment_files: Option<usize>,
    /// Longest a request frame's body may take to arrive once its memory is granted;
    /// a slower connection is closed. Default 60000.
    #[arg(long)]
    pub request_body_timeout_ms: Option<u64>,
    /// Kafka's `sasl.server.max.receive.size`: the largest request a connection may send
    /// before SASL has authenticated it; a larger one closes the connection unread
    /// (default 524288, Kafka's).
    #[arg(long)]
    #[serde(alias = "sasl.server.max.receive.size")]
    pub sasl_server_max_receive_size: Option<usize>,
    /// Samples in a client quota's rate window (Kafka's quota.window.num).
    #[arg(long)]
    #[serde(alias = "quota.window.num")]
    pub quota_window_num: Option<usize>,
    /// Length of one quota sample, seconds (Kafka's quota.window.size.seconds).
    #[arg(long)]
    #[serde(alias = "quota.window.size.seconds")]
    pub quota_window_size_seconds: Option<u64>,
    /// This broker's controller and inter-broker port, HOST:PORT (default
    /// 127.0.0.1:9093).
    #[arg(long)]
    pub controller_listen: Option<String>,
    /// The controller quorum's initial voters, `ID@HOST:PORT,...` (Kafka's
    /// controller.quorum.voters); default: this broker alone. A broker not among them
    /// follows the metadata log without voting.
    #[arg(long)]
    #[serde(alias = "controller.quorum.voters")]
    pub controller_voters: Option<String>,
    /// This broker's rack (Kafka's broker.rack): replicas spread over racks.
    #[arg(long)]
    #[serde(alias = "broker.rack")]
    pub rack: Option<String>,
    /// A broker that has not heartbeated for this long is fenced, ms (Kafka's
    /// broker.session.timeout.ms).
    #[arg(long)]
    #[serde(alias = "broker.session.timeout.ms")]
    pub broker_session_timeout_ms: Option<u64>,
    /// How often this broker heartbeats to the active controller, ms (Kafka's
    /// broker.heartbeat.interval.ms).
    #[arg(long)]
    #[serde(alias = "broker.heartbeat.interval.ms")]
    pub broker_heartbeat_interval_ms: Option<u64>,
    /// Metadata log entries between two snapshots of the metadata.
    #[arg(long)]
    pub metadata_snapshot_entries: Option<u64>,
    /// A follower that has not caught up with its leader for this long leaves the ISR,
    /// ms (Kafka's replica.lag.time.max.ms).
    #[arg(long)]
    #[serde(alias = "replica.lag.time.max.ms")]
    pub replica_lag_time_max_ms: Option<u64>,
    /// Replicas of a topic created without a replication factor (Kafka's
    /// default.replication.factor).
    #[arg(long)]
    #[serde(alias = "default.replication.factor")]
    pub default_replication_factor: Option<i32>,
    /// Replicas of `__consumer_offsets`, at most one per live broker when it is created
    /// (Kafka's offsets.topic.replication.factor).
    #[arg(long)]
    #[serde(alias = "offsets.topic.replication.factor")]
    pub offsets_topic_replication_factor: Option<i32>,
    /// Replicas of `__share_group_state`, at most one per live broker when it is
    /// created (Kafka's share.coordinator.state.topic.replication.factor, 3).
    #[arg(long)]
    #[serde(alias = "share.coordinator.state.topic.replication.factor")]
    pub share_coordinator_state_topic_replication_factor: Option<i32>,
    /// Its min.insync.replicas, at most its replicas (Kafka's
    /// share.coordinator.state.topic.min.isr, 2).
    #[arg(long)]
    #[serde(alias = "share.coordinator.state.topic.min.isr")]
    pub share_coordinator_state_topic_min_isr: Option<i32>,
    /// Partitions of `__share_group_state` when it is created (Kafka's
    /// share.coordinator.state.topic.num.partitions, 50).
    #[arg(long)]
    #[serde(alias = "share.coordinator.state.topic.num.partitions")]
    pub share_coordinator_state_topic_num_partitions: Option<i32>,
    /// Updates of a share partition's state between two snapshots of it (Kafka's
    /// share.coordinator.snapshot.update.records.per.snapshot, 500).
    #[arg(long)]
    #[serde(alias = "share.coordinator.snapshot.update.records.per.snapshot")]
    pub share_coordinator_snapshot_update_records_per_snapshot: Option<u32>,
    /// The active controller hands leadership back to preferred replicas (Kafka's
    /// auto.leader.rebalance.enable).
    #[arg(long)]
    #[serde(alias = "auto.leader.rebalance.enable")]
    pub auto_leader_rebalance_enable: Option<bool>,
    /// A broker leading fewer of the partitions it prefers than this share is given them
    /// back, % (Kafka's leader.imbalance.per.broker.percentage).
    #[arg(long)]
    #[serde(alias = "leader.imbalance.per.broker.percentage")]
    pub leader_imbalance_per_broker_percentage: Option<u32>,
    /// How often leader imbalance is checked, s (Kafka's
    /// leader.imbalance.check.interval.seconds).
    #[arg(long)]
    #[serde(alias = "leader.imbalance.check.interval.seconds")]
    pub leader_imbalance_check_interval_seconds: Option<u64>,
    /// The active controller moves replicas and leaders until every broker's counts are
    /// within 10 % of the mean (brokers being decommissioned are drained either way).
    #[arg(long)]
    #[serde(alias = "partition.balancer.enable")]
    pub partition_balancer_enable: Option<bool>,
    /// How often the partition balancer plans a wave of moves, ms.
    #[arg(long)]
    #[serde(alias = "partition.balancer.interval.ms")]
    pub partition_balancer_interval_ms: Option<u64>,
    /// Partitions moving at once (every reassignment counts), at most.
    #[arg(long)]
    #[serde(alias = "partition.balancer.max.moves")]
    pub partition_balancer_max_moves: Option<usize>,
    /// A broker whose data filesystem is fuller than this (percent, as `df` prints
    /// `Use%`: blocks reserved for root count as neither used nor free) is given no new
    /// replicas by the balancer.
    #[arg(long)]
    #[serde(alias = "partition.balancer.max.disk.usage.percent")]
    pub partition_balancer_max_disk_usage_percent: Option<u32>,
    /// For tests only: route segment writes and syncs through a fault layer that
    /// `POST /faults` on the HTTP endpoint arms (EIO, ENOSPC, torn writes, power loss).
    #[arg(long)]
    pub storage_fault_injection: Option<bool>,
}

/// The listeners to serve: Kafka's `listeners` family when set, else one PLAINTEXT
/// listener from `--listen`/`--advertise` (default: plaintext on loopback port 9092).
/// Returns them with the inter-broker listener's name, and the controller port's
/// address when `listeners` names the controller listener (`controller`, upper case).
fn served_listeners(
    a: &ServeArgs,
    security: &SecurityConfig,
    controller: Option<&str>,
) -> anyhow::Result<(Vec<ServedListener>, String, Option<String>)> {
    let Some(listeners) = &a.listeners else {
        if a.advertised_listeners.is_some() || a.inter_broker_listener_name.is_some() {
            bail!("advertised.listeners and inter.broker.listener.name need listeners");
        }
        let bind = a
            .listen
            .unwrap_or_else(|| SocketAddr::from(([127, 0, 0, 1], 9092)));
        let advertised = match &a.advertise {
            Some(s) => {
                let (h, p) = s
                    .rsplit_once(':')
                    .context("--advertise must be HOST:PORT")?;
                let port: u16 = p.parse().context("--advertise port")?;
                (h.trim_matches(|c| c == '[' || c == ']').to_string(), port)
            }
            None => (bind.ip().to_string(), bind.port()),
        };
        let name = "PLAINTEXT".to_string();
        let only = ServedListener {
            name: name.clone(),
            protocol: SecurityProtocol::Plaintext,
            bind,
            advertised: Some(advertised),
            tls: None,
            sasl: None,
        };
        return Ok((vec![only], name, None));
    };
    if a.listen.is_some() || a.advertise.is_some() {
        bail!("set either listeners (Kafka's) or --listen/--advertise, not both");
    }
    let mut c = crate::listeners::parse(
        listeners,
        a.advertised_listeners.as_deref(),
        a.listener_security_protocol_map.as_deref(),
        a.inter_broker_listener_name.as_deref(),
    )?;
    // The controller listener is the controller port, not a Kafka listener (Kafka's
    // combined mode lists both in `listeners`).
    let mut controller_bind = None;
    if let Some(name) = controller {
        if let Some(i) = c.listeners.iter().position(|l| l.endpoint.name == name) {
            if c.inter_broker == name {
                bail!("the controller listener {name} cannot be the inter-broker listener");
            }
            if a.advertised_listeners.is_some() && c.advertised.iter().any(|e| e.name == name) {
                bail!("advertised.listeners must not contain the controller listener {name}");
            }
            let e = c.listeners.remove(i).endpoint;
            c.advertised.retain(|e| e.name != name);
            let host = if e.host.is_empty() {
                "0.0.0.0"
            } else {
                e.host.as_str()
            };
            let host = if host.contains(':') {
                format!("[{host}]")
            } else {
                host.to_string()
            };
            controller_bind = Some(format!("{host}:{}", e.port));
        }
    }
    let mut served = Vec::with_capacity(c.listeners.len());
    for l in &c.listeners {
        let name = &l.endpoint.name;
        let sasl = if l.protocol.uses_sasl() {
            Some(crate::sasl::SaslListener::from_config(security, name)?)
        } else {
            None
        };
        let tls = if l.protocol.uses_tls() {
            Some(crate::tls_config::server_config(security, name)?)
        } else {
            None
        };
        let advertised = match c.advertised.iter().find(|e| &e.name == name) {
            // A listener on every interface advertises this machine's name, as Kafka does.
            Some(e) if e.host.is_empty() => Some((machine_name()?, e.port)),
            Some(e) => Some((e.host.clone(), e.port)),
            None => None,
        };
        served.push(ServedListener {
            name: name.clone(),
            protocol: l.protocol,
            bind: bind_address(name, &l.endpoint.host, l.endpoint.port)?,
            advertised,
            tls,
            sasl,
        });
    }
    for name in security.overridden_listeners() {
        if !c.listeners.iter().any(|l| l.endpoint.name == name) && Some(name) != controller {
            bail!(
                "listener.name.{} settings name no listener",
                name.to_ascii_lowercase()
            );
        }
    }
    Ok((served, c.inter_broker, controller_bind))
}

/// Where a listener binds: an empty host is every interface, as in Kafka; a name is
/// resolved (its first address).
fn bind_address(listener: &str, host: &str, port: u16) -> anyhow::Result<SocketAddr> {
    if host.is_empty() {
        return Ok(SocketAddr::from(([0, 0, 0, 0], port)));
    }
    if let Ok(ip) = host.parse::<std::net::IpAddr>() {
        return Ok(SocketAddr::new(ip, port));
    }
    use std::net::ToSocketAddrs;
    (host, port)
        .to_socket_addrs()
        .with_context(|| format!("listener {listener}: resolving {host}"))?
        .next()
        .with_context(|| format!("listener {listener}: {host} has no address"))
}

fn machine_name() -> anyhow::Result<String> {
    std::fs::read_to_string("/proc/sys/kernel/hostname")
        .map(|h| h.trim().to_string())
        .context("this machine's hostname, to advertise a listener on every interface")
}

impl ServeArgs {
    /// `self` (flags) over `file`.
    fn over(self, file: ServeArgs) -> ServeArgs {
        // The directories are one setting given two ways: flags that give either replace
        // the file's, whichever way the file gave them.
        let (data_dir, log_dirs) = if self.data_dir.is_some() || self.log_dirs.is_some() {
            (self.data_dir, self.log_dirs)
        } else {
            (file.data_dir, file.log_dirs)
        };
        ServeArgs {
            listen: self.listen.or(file.listen),
            advertise: self.advertise.or(file.advertise),
            listeners: self.listeners.or(file.listeners),
            advertised_listeners: self.advertised_listeners.or(file.advertised_listeners),
            listener_security_protocol_map: self
                .listener_security_protocol_map
                .or(file.listener_security_protocol_map),
            inter_broker_listener_name: self
                .inter_broker_listener_name
                .or(file.inter_broker_listener_name),
            controller_listener_names: self
                .controller_listener_names
                .or(file.controller_listener_names),
            authorizer_class_name: self.authorizer_class_name.or(file.authorizer_class_name),
            super_users: self.super_users.or(file.super_users),
            allow_everyone_if_no_acl_found: self
                .allow_everyone_if_no_acl_found
                .or(file.allow_everyone_if_no_acl_found),
            // The file's keys first, so a flag for the same key wins.
            security: file.security.into_iter().chain(self.security).collect(),
            data_dir,
            log_dirs,
            shards: self.shards.or(file.shards),
            http: self.http.or(file.http),
            storage_fault_injection: self
                .storage_fault_injection
                .or(file.storage_fault_injection),
            config: self.config,
            log_level: self.log_level.or(file.log_level),
            node_id: self.node_id.or(file.node_id),
            auto_create_topics: self.auto_create_topics.or(file.auto_create_topics),
            tls_kernel_offload: self.tls_kernel_offload.or(file.tls_kernel_offload),
            num_partitions: self.num_partitions.or(file.num_partitions),
            message_max_bytes: self.message_max_bytes.or(file.message_max_bytes),
            socket_request_max_bytes: self
                .socket_request_max_bytes
                .or(file.socket_request_max_bytes),
            segment_bytes: self.segment_bytes.or(file.segment_bytes),
            segment_ms: self.segment_ms.or(file.segment_ms),
            durability: self.durability.or(file.durability),
            flush_interval_ms: self.flush_interval_ms.or(file.flush_interval_ms),
            offsets_topic_partitions: self
                .offsets_topic_partitions
                .or(file.offsets_topic_partitions),
            group_initial_rebalance_delay_ms: self
                .group_initial_rebalance_delay_ms
                .or(file.group_initial_rebalance_delay_ms),
            group_consumer_session_timeout_ms: self
                .group_consumer_session_timeout_ms
                .or(file.group_consumer_session_timeout_ms),
            group_consumer_heartbeat_interval_ms: self
                .group_consumer_heartbeat_interval_ms
                .or(file.group_consumer_heartbeat_interval_ms),
            group_consumer_max_size: self
                .group_consumer_max_size
                .or(file.group_consumer_max_size),
            group_consumer_assignors: self
                .group_consumer_assignors
                .clone()
                .or(file.group_consumer_assignors.clone()),
            share_version: self.share_version.or(file.share_version),
            group_share_session_timeout_ms: self
                .group_share_session_timeout_ms
                .or(file.group_share_session_timeout_ms),
            group_share_heartbeat_interval_ms: self
                .group_share_heartbeat_interval_ms
                .or(file.group_share_heartbeat_interval_ms),
            group_share_max_size: self.group_share_max_size.or(file.group_share_max_size),
            group_share_min_session_timeout_ms: self
                .group_share_min_session_timeout_ms
                .or(file.group_share_min_session_timeout_ms),
            group_share_max_session_timeout_ms: self
                .group_share_max_session_timeout_ms
                .or(file.group_share_max_session_timeout_ms),
            group_share_min_heartbeat_interval_ms: self
                .group_share_min_heartbeat_interval_ms
                .or(file.group_share_min_heartbeat_interval_ms),
            group_share_max_heartbeat_interval_ms: self
                .group_share_max_heartbeat_interval_ms
                .or(file.group_share_max_heartbeat_interval_ms),
            group_share_min_record_lock_duration_ms: self
                .group_share_min_record_lock_duration_ms
                .or(file.group_share_min_record_lock_duration_ms),
            group_share_max_record_lock_duration_ms: self
                .group_share_max_record_lock_duration_ms
                .or(file.group_share_max_record_lock_duration_ms),
            group_share_min_delivery_count_limit: self
                .group_share_min_delivery_count_limit
                .or(file.group_share_min_delivery_count_limit),
            group_share_max_delivery_count_limit: self
                .group_share_max_delivery_count_limit
                .or(file.group_share_max_delivery_count_limit),
            group_share_min_partition_max_record_locks: self
                .group_share_min_partition_max_record_locks
                .or(file.group_share_min_partition_max_record_locks),
            group_share_max_partition_max_record_locks: self
                .group_share_max_partition_max_record_locks
                .or(file.group_share_max_partition_max_record_locks),
            group_share_record_lock_duration_ms: self
                .group_share_record_lock_duration_ms
                .or(file.group_share_record_lock_duration_ms),
            group_share_delivery_count_limit: self
                .group_share_delivery_count_limit
                .or(file.group_share_delivery_count_limit),
            group_share_partition_max_record_locks: self
                .group_share_partition_max_record_locks
                .or(file.group_share_partition_max_record_locks),
            group_consumer_migration_policy: self
                .group_consumer_migration_policy
                .clone()
                .or(file.group_consumer_migration_policy.clone()),
            group_consumer_min_session_timeout_ms: self
                .group_consumer_min_session_timeout_ms
                .or(file.group_consumer_min_session_timeout_ms),
            group_consumer_max_session_timeout_ms: self
                .group_consumer_max_session_timeout_ms
                .or(file.group_consumer_max_session_timeout_ms),
            group_consumer_min_heartbeat_interval_ms: self
                .group_consumer_min_heartbeat_interval_ms
                .or(file.group_consumer_min_heartbeat_interval_ms),
            group_consumer_max_heartbeat_interval_ms: self
                .group_consumer_max_heartbeat_interval_ms
                .or(file.group_consumer_max_heartbeat_interval_ms),
            offsets_topic_segment_bytes: self
                .offsets_topic_segment_bytes
                .or(file.offsets_topic_segment_bytes),
            offsets_retention_minutes: self
                .offsets_retention_minutes
                .or(file.offsets_retention_minutes),
            offsets_retention_ms: self.offsets_retention_ms.or(file.offsets_retention_ms),
            transaction_state_log_num_partitions: self
                .transaction_state_log_num_partitions
                .or(file.transaction_state_log_num_partitions),
            transaction_state_log_replication_factor: self
                .transaction_state_log_replication_factor
                .or(file.transaction_state_log_replication_factor),
            transaction_state_log_min_isr: self
                .transaction_state_log_min_isr
                .or(file.transaction_state_log_min_isr),
            transaction_state_log_segment_bytes: self
                .transaction_state_log_segment_bytes
                .or(file.transaction_state_log_segment_bytes),
            transaction_max_timeout_ms: self
                .transaction_max_timeout_ms
                .or(file.transaction_max_timeout_ms),
            transactional_id_expiration_ms: self
                .transactional_id_expiration_ms
                .or(file.transactional_id_expiration_ms),
            transaction_abort_timed_out_transaction_cleanup_interval_ms: self
                .transaction_abort_timed_out_transaction_cleanup_interval_ms
                .or(file.transaction_abort_timed_out_transaction_cleanup_interval_ms),
            transaction_remove_expired_transaction_cleanup_interval_ms: self
                .transaction_remove_expired_transaction_cleanup_interval_ms
                .or(file.transaction_remove_expired_transaction_cleanup_interval_ms),
            transaction_partition_verification_enable: self
                .transaction_partition_verification_enable
                .or(file.transaction_partition_verification_enable),
            transaction_version: self.transaction_version.or(file.transaction_version),
            retention_ms: self.retention_ms.or(file.retention_ms),
            retention_bytes: self.retention_bytes.or(file.retention_bytes),
            // The file's defaults first, so a flag for the same key wins.
            topic_default: file
                .topic_default
                .into_iter()
                .chain(self.topic_default)
                .collect(),
            retention_check_interval_ms: self
                .retention_check_interval_ms
                .or(file.retention_check_interval_ms),
            cleaner_dedupe_buffer_bytes: self
                .cleaner_dedupe_buffer_bytes
                .or(file.cleaner_dedupe_buffer_bytes),
            cleaner_backoff_ms: self.cleaner_backoff_ms.or(file.cleaner_backoff_ms),
            cleaner_io_max_bytes_per_second: self
                .cleaner_io_max_bytes_per_second
                .or(file.cleaner_io_max_bytes_per_second),
            disk_fill_max_percent: self.disk_fill_max_percent.or(file.disk_fill_max_percent),
            disk_budget_bytes: self.disk_budget_bytes.or(file.disk_budget_bytes),
            producer_id_expiration_ms: self
                .producer_id_expiration_ms
                .or(file.producer_id_expiration_ms),
            producer_id_expiration_check_interval_ms: self
                .producer_id_expiration_check_interval_ms
                .or(file.producer_id_expiration_check_interval_ms),
            max_connections: self.max_connections.or(file.max_connections),
            max_connections_per_ip: self.max_connections_per_ip.or(file.max_connections_per_ip),
            max_connections_per_ip_overrides: self
                .max_connections_per_ip_overrides
                .or(file.max_connections_per_ip_overrides),
            queued_max_request_bytes: self
                .queued_max_request_bytes
                .or(file.queued_max_request_bytes),
            max_inflight_requests_per_connection: self
                .max_inflight_requests_per_connection
                .or(file.max_inflight_requests_per_connection),
            tail_cache_shard_bytes: self.tail_cache_shard_bytes.or(file.tail_cache_shard_bytes),
            max_open_segment_files: self.max_open_segment_files.or(file.max_open_segment_files),
            request_body_timeout_ms: self
                .request_body_timeout_ms
                .or(file.request_body_timeout_ms),
            sasl_server_max_receive_size: self
                .sasl_server_max_receive_size
                .or(file.sasl_server_max_receive_size),
            quota_window_num: self.quota_window_num.or(file.quota_window_num),
            quota_window_size_seconds: self
                .quota_window_size_seconds
                .or(file.quota_window_size_seconds),
            controller_listen: self.controller_listen.or(file.controller_listen),
            controller_voters: self.controller_voters.or(file.controller_voters),
            rack: self.rack.or(file.rack),
            broker_session_timeout_ms: self
                .broker_session_timeout_ms
                .or(file.broker_session_timeout_ms),
            broker_heartbeat_interval_ms: self
                .broker_heartbeat_interval_ms
                .or(file.broker_heartbeat_interval_ms),
            metadata_snapshot_entries: self
                .metadata_snapshot_entries
                .or(file.metadata_snapshot_entries),
            replica_lag_time_max_ms: self
                .replica_lag_time_max_ms
                .or(file.replica_lag_time_max_ms),
            default_replication_factor: self
                .default_replication_factor
                .or(file.default_replication_factor),
            offsets_topic_replication_factor: self
                .offsets_topic_replication_factor
                .or(file.offsets_topic_replication_factor),
            share_coordinator_state_topic_replication_factor: self
                .share_coordinator_state_topic_replication_factor
                .or(file.share_coordinator_state_topic_replication_factor),
            share_coordinator_state_topic_min_isr: self
                .share_coordinator_state_topic_min_isr
                .or(file.share_coordinator_state_topic_min_isr),
            share_coordinator_state_topic_num_partitions: self
                .share_coordinator_state_topic_num_partitions
                .or(file.share_coordinator_state_topic_num_partitions),
            share_coordinator_snapshot_update_records_per_snapshot: self
                .share_coordinator_snapshot_update_records_per_snapshot
                .or(file.share_coordinator_snapshot_update_records_per_snapshot),
            auto_leader_rebalance_enable: self
                .auto_leader_rebalance_enable
                .or(file.auto_leader_rebalance_enable),
            leader_imbalance_per_broker_percentage: self
                .leader_imbalance_per_broker_percentage
                .or(file.leader_imbalance_per_broker_percentage),
            leader_imbalance_check_interval_seconds: self
                .leader_imbalance_check_interval_seconds
                .or(file.leader_imbalance_check_interval_seconds),
            partition_balancer_enable: self
                .partition_balancer_enable
                .or(file.partition_balancer_enable),
            partition_balancer_interval_ms: self
                .partition_balancer_interval_ms
                .or(file.partition_balancer_interval_ms),
            partition_balancer_max_moves: self
                .partition_balancer_max_moves
                .or(file.partition_balancer_max_moves),
            partition_balancer_max_disk_usage_percent: self
                .partition_balancer_max_disk_usage_percent
                .or(file.partition_balancer_max_disk_usage_percent),
        }
    }
}

/// The resolved configuration every shard gets a copy of.
#[derive(Debug, Clone)]
pub struct BrokerConfig {
    /// Every listener served, each bound by every shard; at least one.
    pub listeners: Vec<ServedListener>,
    /// The listener other brokers use (Kafka's `inter.broker.listener.name`), one of
    /// `listeners` and advertised.
    pub inter_broker_listener: String,
    /// `None`: no authorizer (every request allowed, ACL requests SECURITY_DISABLED).
    pub authorizer: Option<corelog_controller::acl::AuthorizerPolicy>,
    /// The inter-broker listener's advertised address.
    pub advertise_host: String,
    pub advertise_port: u16,
    /// The first log directory: it holds the cluster metadata and the high-watermark
    /// checkpoints beside its partitions.
    pub data_dir: PathBuf,
    /// Every log directory (`log.dirs`), `data_dir` first.
    pub log_dirs: Vec<PathBuf>,
    pub shards: usize,
    pub http: SocketAddr,
    /// `--storage-fault-injection`: tests arm storage faults over the HTTP endpoint.
    pub storage_fault_injection: bool,
    pub log_level: String,
    pub node_id: i32,
    pub auto_create_topics: bool,
    /// TLS sessions go to the kernel where it takes them (`net/ktls.rs`).
    pub tls_kernel_offload: bool,
    pub num_partitions: i32,
    pub socket_request_max_bytes: usize,
    pub log: LogConfig,
    pub groups: GroupConfig,
    /// The finalized `share.version` feature: share groups are served from 1.
    pub share_version: i16,
    /// The share coordinator (`__share_group_state`).
    pub share_state: corelog_shards::share::coordinator::ShareCoordinatorConfig,
    /// The share partitions' records: locks, delivery limit, records in flight.
    pub share_leader: corelog_shards::share::leader::ShareLeaderConfig,
    pub txns: TxnCoordinatorConfig,
    pub housekeeping: HousekeepingConfig,
    pub retention_check_interval_ms: u64,
    pub limits: LimitsConfig,
    pub quota: crate::quota::QuotaConfig,
    pub cluster: ClusterConfig,
    /// Kafka's keys: read at start, taken without effect, and the security values.
    pub kafka: KafkaSettings,
}

/// A listener this broker serves: where it binds, what it speaks, and what Metadata
/// gives the clients that connect on it.
#[derive(Debug, Clone)]
pub struct ServedListener {
    /// Upper case, as Kafka keeps listener names.
    pub name: String,
    pub protocol: SecurityProtocol,
    pub bind: SocketAddr,
    /// `None`: bound but not advertised (Kafka allows it; its clients get no brokers).
    pub advertised: Option<(String, u16)>,
    /// The TLS server settings of an SSL or SASL_SSL listener.
    pub tls: Option<crate::tls_config::TlsServerConfig>,
    /// The SASL settings of a SASL_PLAINTEXT or SASL_SSL listener.
    pub sasl: Option<crate::sasl::SaslListener>,
}

/// This broker's place in the cluster (docs/cluster.md).
#[derive(Debug, Clone)]
pub struct ClusterConfig {
    pub controller_listen: String,
    /// id → HOST:PORT.
    pub voters: std::collections::BTreeMap<i32, String>,
    pub rack: Option<String>,
    pub session_timeout: std::time::Duration,
    pub heartbeat_interval: std::time::Duration,
    pub snapshot_entries: u64,
    pub replication: corelog_shards::shard_config::ReplicationConfig,
    pub default_replication_factor: i32,
    pub offsets_topic_replication_factor: i32,
    pub share_state_replication_factor: i32,
    pub share_state_min_isr: i32,
    /// `None`: auto.leader.rebalance.enable is off.
    pub leader_balance: Option<corelog_controller::leader_balance::LeaderBalance>,
    pub balancer: corelog_controller::balancer::Balancer,
    /// How the controller port is secured (`inter_broker_security`).
    pub controller_security: Arc<corelog_controller::port_security::PortSecurity>,
}

/// Whether a configuration file's field takes the key `name` (its own name or a Kafka
/// alias): the fields are asked, so the answer never drifts from them.
pub fn file_takes(name: &str) -> bool {
    let mut table = toml::Table::new();
    table.insert(name.to_string(), toml::Value::String("0".into()));
    let mut ignored = false;
    let parsed = serde_ignored::deserialize(
        crate::lenient_toml::Lenient(toml::Value::Table(table)),
        |_| ignored = true,
    )
    .map(|_: ServeArgs| ());
    // A field that refuses "0" is still a field.
    parsed.is_err() || !ignored
}

/// A boolean key given as TOML's boolean or as Kafka's text ("true", "false").
fn bool_or_text<'de, D: serde::Deserializer<'de>>(d: D) -> Result<Option<bool>, D::Error> {
    #[derive(Deserialize)]
    #[serde(untagged)]
    enum BoolOrText {
        Bool(bool),
        Text(String),
    }
    match BoolOrText::deserialize(d)? {
        BoolOrText::Bool(b) => Ok(Some(b)),
        BoolOrText::Text(t) => match t.trim().to_ascii_lowercase().as_str() {
            "true" => Ok(Some(true)),
            "false" => Ok(Some(false)),
            _ => Err(serde::de::Error::custom(format!(
                "{t:?} is not true or false"
            ))),
        },
    }
}

/// Kafka's authorizer class names that mean ACLs as the metadata log keeps them: KRaft's,
/// and ZooKeeper-era Kafka's, whose rules are the same.
const AUTHORIZERS: &[&str] = &[
    "org.apache.kafka.metadata.authorizer.StandardAuthorizer",
    "kafka.security.authorizer.AclAuthorizer",
];

/// The authorizer from Kafka's three keys; `None` when `authorizer.class.name` is unset
/// or empty (the other two then have no effect, as in Kafka, and are refused so that a
/// broker meant to be locked down is not started open).
fn authorizer_policy(
    class_name: Option<&str>,
    super_users: Option<&str>,
    allow_everyone: Option<bool>,
) -> anyhow::Result<Option<corelog_controller::acl::AuthorizerPolicy>> {
    let class_name = class_name.map(str::trim).unwrap_or_default();
    if class_name.is_empty() {
        if super_users.is_some() || allow_everyone.is_some() {
            bail!("super.users and allow.everyone.if.no.acl.found need authorizer.class.name");
        }
        return Ok(None);
    }
    if !AUTHORIZERS.contains(&class_name) {
        bail!(
            "authorizer.class.name {class_name} is not served (served: {})",
            AUTHORIZERS.join(", ")
        );
    }
    let mut users = Vec::new();
    for u in super_users.unwrap_or_default().split(';').map(str::trim) {
        if u.is_empty() {
            continue;
        }
        match u.split_once(':') {
            Some((kind, name)) if !kind.is_empty() && !name.is_empty() => users.push(u.to_string()),
            _ => bail!("super.users: {u:?} is not a principal (Type:name, e.g. User:admin)"),
        }
    }
    Ok(Some(corelog_controller::acl::AuthorizerPolicy {
        super_users: users,
        allow_everyone_if_no_acl_found: allow_everyone.unwrap_or(false),
    }))
}

/// The partition balancer from its flags (on, every 10 s, 8 moves at once, no new
/// replicas on a disk over 85 % full).
fn balancer(a: &ServeArgs) -> anyhow::Result<corelog_controller::balancer::Balancer> {
    let defaults = corelog_controller::balancer::Balancer::default();
    let interval_ms = a
        .partition_balancer_interval_ms
        .unwrap_or(defaults.interval.as_millis() as u64);
    if interval_ms == 0 {
        bail!("--partition-balancer-interval-ms must be above 0");
    }
    let max_moves = a.partition_balancer_max_moves.unwrap_or(defaults.max_moves);
    if max_moves == 0 {
        bail!("--partition-balancer-max-moves must be at least 1");
    }
    let max_disk_usage_percent = a
        .partition_balancer_max_disk_usage_percent
        .unwrap_or(defaults.max_disk_usage_percent);
    if !(1..=100).contains(&max_disk_usage_percent) {
        bail!("--partition-balancer-max-disk-usage-percent must be between 1 and 100");
    }
    Ok(corelog_controller::balancer::Balancer {
        enabled: a.partition_balancer_enable.unwrap_or(defaults.enabled),
        interval: std::time::Duration::from_millis(interval_ms),
        max_moves,
        max_disk_usage_percent,
        ..defaults
    })
}

/// The transaction coordinator's settings from their flags, with Kafka's defaults.
fn txn_config(a: &ServeArgs, offsets_partitions: i32) -> anyhow::Result<TxnCoordinatorConfig> {
    let d = TxnCoordinatorConfig::default();
    let partitions = a
        .transaction_state_log_num_partitions
        .unwrap_or(d.partitions);
    if !(1..=1000).contains(&partitions) {
        bail!("transaction-state-log-num-partitions must be between 1 and 1000");
    }
    let replication_factor = positive(
        a.transaction_state_log_replication_factor
            .unwrap_or(d.replication_factor),
        "transaction-state-log-replication-factor",
    )?;
    let min_isr = positive(
        a.transaction_state_log_min_isr.unwrap_or(d.min_isr),
        "transaction-state-log-min-isr",
    )?;
    let max_timeout_ms = positive(
        a.transaction_max_timeout_ms
            .unwrap_or(d.rules.max_timeout_ms),
        "transaction-max-timeout-ms",
    )?;
    let id_expiration_ms = a
        .transactional_id_expiration_ms
        .unwrap_or(d.rules.id_expiration_ms);
    if id_expiration_ms < 1 {
        bail!("transactional-id-expiration-ms must be at least 1");
    }
    let transaction_version = a
        .transaction_version
        .unwrap_or(corelog_shards::txn::TRANSACTION_VERSION_MAX);
    if !(0..=corelog_shards::txn::TRANSACTION_VERSION_MAX).contains(&transaction_version) {
        bail!(
            "transaction-version must be between 0 and {}",
            corelog_shards::txn::TRANSACTION_VERSION_MAX
        );
    }
    let interval = |ms: Option<u64>, default: std::time::Duration, flag: &str| {
        let ms = ms.unwrap_or(default.as_millis() as u64);
        if ms == 0 {
            bail!("{flag} must be above 0");
        }
        Ok(std::time::Duration::from_millis(ms))
    };
    Ok(TxnCoordinatorConfig {
        partitions,
        rules: corelog_shards::txn::rules::TxnConfig {
            max_timeout_ms,
            id_expiration_ms,
            server_tv2: transaction_version >= 2,
        },
        transaction_version,
        abort_timed_out_interval: interval(
            a.transaction_abort_timed_out_transaction_cleanup_interval_ms,
            d.abort_timed_out_interval,
            "transaction-abort-timed-out-transaction-cleanup-interval-ms",
        )?,
        remove_expired_interval: interval(
            a.transaction_remove_expired_transaction_cleanup_interval_ms,
            d.remove_expired_interval,
            "transaction-remove-expired-transaction-cleanup-interval-ms",
        )?,
        replication_factor,
        min_isr,
        // Index positions are 32-bit, as for every segment.
        segment_bytes: a
            .transaction_state_log_segment_bytes
            .unwrap_or(d.segment_bytes)
            .clamp(4096, u64::from(u32::MAX)),
        offsets_partitions,
        verify_partitions: a
            .transaction_partition_verification_enable
            .unwrap_or(d.verify_partitions),
    })
}

/// Preferred-leader rebalancing from its three flags (Kafka's defaults: on, 10 %, 300 s).
fn leader_balance(
    a: &ServeArgs,
) -> anyhow::Result<Option<corelog_controller::leader_balance::LeaderBalance>> {
    if !a.auto_leader_rebalance_enable.unwrap_or(true) {
        return Ok(None);
    }
    let percent = a.leader_imbalance_per_broker_percentage.unwrap_or(10);
    if percent > 100 {
        bail!("--leader-imbalance-per-broker-percentage must be at most 100");
    }
    let seconds = a.leader_imbalance_check_interval_seconds.unwrap_or(300);
    if seconds == 0 {
        bail!("--leader-imbalance-check-interval-seconds must be above 0");
    }
    Ok(Some(corelog_controller::leader_balance::LeaderBalance {
        check_interval: std::time::Duration::from_secs(seconds),
        max_imbalance_percent: percent,
    }))
}

impl ClusterConfig {
    fn resolve(
        a: &ServeArgs,
        node_id: i32,
        controller_bind: Option<String>,
    ) -> anyhow::Result<ClusterConfig> {
        if node_id < 0 {
            bail!("--node-id must not be negative");
        }
        if controller_bind.is_some() && a.controller_listen.is_some() {
            bail!("the controller listener is in listeners: leave --controller-listen unset");
        }
        let controller_listen = controller_bind
            .or_else(|| a.controller_listen.clone())
            .unwrap_or_else(|| "127.0.0.1:9093".into());
        controller_listen
            .rsplit_once(':')
            .and_then(|(_, p)| p.parse::<u16>().ok())
            .context("--controller-listen must be HOST:PORT")?;
        let voters = match &a.controller_voters {
            None => std::collections::BTreeMap::from([(node_id, controller_listen.clone())]),
            Some(list) => parse_voters(list)?,
        };
        let session_timeout = a.broker_session_timeout_ms.unwrap_or(9000);
        let heartbeat_interval = a.broker_heartbeat_interval_ms.unwrap_or(2000);
        if heartbeat_interval == 0 || heartbeat_interval >= session_timeout {
            bail!(
                "broker-heartbeat-interval-ms must be above 0 and below broker-session-timeout-ms"
            );
        }
        Ok(ClusterConfig {
            controller_listen,
            voters,
            rack: a.rack.clone().filter(|r| !r.is_empty()),
            session_timeout: std::time::Duration::from_millis(session_timeout),
            heartbeat_interval: std::time::Duration::from_millis(heartbeat_interval),
            snapshot_entries: a.metadata_snapshot_entries.unwrap_or(10_000).max(1),
            replication: corelog_shards::shard_config::ReplicationConfig {
                lag_time_max_ms: i64::try_from(a.replica_lag_time_max_ms.unwrap_or(30_000))
                    .unwrap_or(i64::MAX)
                    .max(1),
                ..Default::default()
            },
            default_replication_factor: positive(
                a.default_replication_factor.unwrap_or(1),
                "--default-replication-factor",
            )?,
            offsets_topic_replication_factor: positive(
                a.offsets_topic_replication_factor.unwrap_or(3),
                "--offsets-topic-replication-factor",
            )?,
            share_state_replication_factor: positive(
                a.share_coordinator_state_topic_replication_factor
                    .unwrap_or(3),
                "--share-coordinator-state-topic-replication-factor",
            )?,
            share_state_min_isr: positive(
                a.share_coordinator_state_topic_min_isr.unwrap_or(2),
                "--share-coordinator-state-topic-min-isr",
            )?,
            leader_balance: leader_balance(a)?,
            balancer: balancer(a)?,
            controller_security: Default::default(),
        })
    }
}

fn positive(value: i32, flag: &str) -> anyhow::Result<i32> {
    if value < 1 {
        bail!("{flag} must be at least 1");
    }
    Ok(value)
}

/// `ID@HOST:PORT,...`, Kafka's controller.quorum.voters.
fn parse_voters(list: &str) -> anyhow::Result<std::collections::BTreeMap<i32, String>> {
    let mut voters = std::collections::BTreeMap::new();
    for item in list.split(',').map(str::trim).filter(|s| !s.is_empty()) {
        let (id, addr) = item
            .split_once('@')
            .with_context(|| format!("controller voter {item:?} is not ID@HOST:PORT"))?;
        let id: i32 = id
            .parse()
            .with_context(|| format!("controller voter {item:?}: the id is not a number"))?;
        addr.rsplit_once(':')
            .and_then(|(_, p)| p.parse::<u16>().ok())
            .with_context(|| format!("controller voter {item:?}: the address is not HOST:PORT"))?;
        if id < 0 || voters.insert(id, addr.to_string()).is_some() {
            bail!("controller voter id {id} is negative or named twice");
        }
    }
    if voters.is_empty() {
        bail!("--controller-voters names no voter");
    }
    Ok(voters)
}

/// Connection and memory limits (docs/quotas-and-limits.md, "Limits"; `net/connection_limits.rs`,
/// `net/request_memory.rs`, `storage/src/tail_cache.rs`).
#[derive(Debug, Clone)]
pub struct LimitsConfig {
    pub connections: ConnectionLimitsConfig,
    pub queued_max_request_bytes: u64,
    pub max_inflight_requests_per_connection: usize,
    pub tail_cache_shard_bytes: u64,
    /// Segment files open at once, broker-wide (`corelog_storage::file_cache`).
    pub max_open_segment_files: usize,
    pub request_body_timeout: std::time::Duration,
    /// The largest request frame read before SASL has authenticated its connection.
    pub sasl_server_max_receive_size: usize,
}

impl LimitsConfig {
    fn resolve(a: &ServeArgs) -> anyhow::Result<LimitsConfig> {
        let total_max = match a.max_connections {
            Some(n) if n < MAX_CONNECTIONS_MIN => bail!("max-connections must be at least 1"),
            Some(n) => n,
            None => default_max_connections(),
        };
        let per_ip_overrides = match &a.max_connections_per_ip_overrides {
            Some(text) => parse_overrides(text)
                .map_err(|e| anyhow::anyhow!("max-connections-per-ip-overrides: {e}"))?,
            None => Default::default(),
        };
        let queued_max_request_bytes = a
            .queued_max_request_bytes
            .unwrap_or(limits::QUEUED_MAX_REQUEST_BYTES_DEFAULT);
        if queued_max_request_bytes < 64 << 10 {
            bail!("queued-max-request-bytes must be at least 65536");
        }
        let inflight = a
            .max_inflight_requests_per_connection
            .unwrap_or(limits::INFLIGHT_REQUESTS_PER_CONNECTION_MAX);
        if !(limits::INFLIGHT_REQUESTS_PER_CONNECTION_MIN..=1024).contains(&inflight) {
            bail!("max-inflight-requests-per-connection must be between 5 and 1024");
        }
        Ok(LimitsConfig {
            connections: ConnectionLimitsConfig {
                total_max,
                per_ip_max: a.max_connections_per_ip,
                per_ip_overrides,
            },
            queued_max_request_bytes,
            max_inflight_requests_per_connection: inflight,
            tail_cache_shard_bytes: a
                .tail_cache_shard_bytes
                .unwrap_or(limits::TAIL_CACHE_SHARD_BYTES_DEFAULT),
            max_open_segment_files: match a.max_open_segment_files {
                Some(n) if n < limits::OPEN_SEGMENT_FILES_MIN => bail!(
                    "max-open-segment-files must be at least {}",
                    limits::OPEN_SEGMENT_FILES_MIN
                ),
                Some(n) => n,
                None => limits::default_max_open_segment_files(),
            },
            request_body_timeout: std::time::Duration::from_millis(
                a.request_body_timeout_ms
                    .unwrap_or(limits::REQUEST_BODY_TIMEOUT_MS_DEFAULT)
                    .max(100),
            ),
            sasl_server_max_receive_size: match a.sasl_server_max_receive_size {
                Some(0) => bail!("sasl-server-max-receive-size must be at least 1"),
                Some(n) => n,
                None => limits::SASL_SERVER_MAX_RECEIVE_SIZE_DEFAULT,
            },
        })
    }
}

impl BrokerConfig {
    /// The feature levels configured here (`transaction-version`, `share-version`): a new
    /// cluster is finalized at them, and they are served while a cluster upgraded from a
    /// release before feature levels has finalized none (`corelog_controller::features`).
    pub fn configured_feature_levels(&self) -> corelog_controller::features::ConfiguredLevels {
        corelog_controller::features::ConfiguredLevels {
            transaction_version: self.txns.transaction_version,
            share_version: self.share_version,
        }
    }

    pub fn resolve(flags: ServeArgs) -> anyhow::Result<BrokerConfig> {
        let mut not_acted_on = std::collections::BTreeMap::new();
        let mut file_table = toml::Table::new();
        let file = match &flags.config {
            Some(path) => {
                let text = std::fs::read_to_string(path)
                    .with_context(|| format!("reading {}", path.display()))?;
                let mut table = toml::from_str::<toml::Table>(&text)
                    .with_context(|| format!("parsing {}", path.display()))?;
                let security = crate::security_config::take_from_file(&mut table)
                    .with_context(|| format!("parsing {}", path.display()))?;
                // Kafka's text forms of numbers and booleans are taken, as a
                // `server.properties` converted line by line writes them. Keys the
                // fields do not take are Kafka's others, or an error (`kafka_settings`).
                let mut outside = Vec::new();
                let mut file: ServeArgs = serde_ignored::deserialize(
                    crate::lenient_toml::Lenient(toml::Value::Table(table.clone())),
                    |path| {
                        if let serde_ignored::Path::Map {
                            parent: serde_ignored::Path::Root,
                            key,
                        } = path
                        {
                            outside.push(key);
                        }
                    },
                )
                .with_context(|| format!("parsing {}", path.display()))?;
                for key in outside {
                    let value = &table[&key];
                    match crate::kafka_settings::sort_file_key(&key, value)
                        .with_context(|| format!("parsing {}", path.display()))?
                    {
                        FileKey::TopicDefault(pair) => file.topic_default.push(pair),
                        FileKey::NotActedOn(k, text) => {
                            not_acted_on.insert(k.name.to_string(), text);
                        }
                    }
                }
                file.security = security
                    .into_iter()
                    .map(|(k, v)| format!("{k}={v}"))
                    .collect();
                file_table = table;
                file
            }
            None => ServeArgs::default(),
        };
        let a = flags.over(file);
        let log_dirs = crate::paths::log_dirs(a.data_dir.clone(), a.log_dirs.as_deref())?;
        let security_values: std::collections::BTreeMap<String, String> = a
            .security
            .iter()
            .filter_map(|kv| kv.split_once('='))
            .filter(|(k, _)| crate::security_config::KEYS.contains(&k.trim()))
            .map(|(k, v)| (k.trim().to_string(), v.trim().to_string()))
            .collect();
        let limits_config = LimitsConfig::resolve(&a)?;
        let security = SecurityConfig::from_pairs(a.security.iter().map(|kv| {
            kv.split_once('=')
                .map_or((kv.as_str(), ""), |(k, v)| (k.trim(), v.trim()))
        }))?;
        let controller_names: Vec<String> = a
            .controller_listener_names
            .as_deref()
            .unwrap_or_default()
            .split(',')
            .map(str::trim)
            .filter(|n| !n.is_empty())
            .map(str::to_ascii_uppercase)
            .collect();
        // Kafka's controllers bind every name; this broker has one controller port.
        if controller_names.len() > 1 {
            bail!(
                "controller.listener.names names {} listeners; one is served (the controller port)",
                controller_names.len()
            );
        }
        let controller_listener = controller_names.into_iter().next();
        let controller_listener_name = controller_listener.clone();
        let (listeners, inter_broker_listener, controller_bind) =
            served_listeners(&a, &security, controller_listener.as_deref())?;
        let (advertise_host, advertise_port) = listeners
            .iter()
            .find(|l| l.name == inter_broker_listener)
            .and_then(|l| l.advertised.clone())
            .context("the inter-broker listener is advertised")?;
        let shards = a.shards.unwrap_or_else(|| {
            std::thread::available_parallelism()
                .map(|n| n.get())
                .unwrap_or(1)
        });
        if shards == 0 || shards > 1024 {
            bail!("--shards must be between 1 and 1024");
        }
        let num_partitions = a.num_partitions.unwrap_or(1);
        if num_partitions < 1 {
            bail!("num-partitions must be at least 1");
        }
        let defaults = LogConfig::default();
        let durability = match a.durability.as_deref() {
            None => defaults.durability,
            Some(d) => Durability::parse(d).with_context(|| {
                format!("unknown durability {d:?} (always | ack-all | interval)")
            })?,
        };
        let message_max_bytes = a.message_max_bytes.unwrap_or(limits::MESSAGE_MAX_BYTES);
        let socket_request_max_bytes = a
            .socket_request_max_bytes
            .unwrap_or(limits::SOCKET_REQUEST_MAX_BYTES);
        if message_max_bytes < 64 || message_max_bytes >= socket_request_max_bytes {
            bail!("message-max-bytes must be at least 64 and below socket-request-max-bytes");
        }
        let segment_bytes = a.segment_bytes.unwrap_or(defaults.segment_bytes);
        if segment_bytes < 4096 || segment_bytes > u64::from(u32::MAX) {
            bail!("segment-bytes must be between 4096 and 4294967295 (index positions are 32-bit)");
        }
        let offsets_partitions = a
            .offsets_topic_partitions
            .unwrap_or(corelog_shards::group::OFFSETS_TOPIC_PARTITIONS_DEFAULT);
        if !(1..=1000).contains(&offsets_partitions) {
            bail!("offsets-topic-partitions must be between 1 and 1000");
        }
        let groups = GroupConfig {
            offsets_partitions,
            initial_rebalance_delay: std::time::Duration::from_millis(
                a.group_initial_rebalance_delay_ms.unwrap_or(3000),
            ),
            // Index positions are 32-bit, as for every segment.
            offsets_segment_bytes: a
                .offsets_topic_segment_bytes
                .unwrap_or(100 << 20)
                .clamp(4096, u64::from(u32::MAX)),
            offsets_retention: match (a.offsets_retention_ms, a.offsets_retention_minutes) {
                (Some(ms), _) => std::time::Duration::from_millis(ms),
                (None, Some(min)) => std::time::Duration::from_secs(min.saturating_mul(60)),
                (None, None) => std::time::Duration::from_secs(10080 * 60),
            },
            consumer: consumer_group_config(&a)?,
            share: share_group_config(&a)?,
        };
        let share_state = share_coordinator_config(&a)?;
        let share_leader = share_leader_config(&a)?;
        let share_version = a.share_version.unwrap_or(SHARE_VERSION_MAX);
        if !(0..=SHARE_VERSION_MAX).contains(&share_version) {
            bail!("share-version must be 0 or {SHARE_VERSION_MAX}");
        }
        let txns = txn_config(&a, offsets_partitions)?;
        let mut log = LogConfig {
            segment_bytes,
            segment_ms: a.segment_ms.unwrap_or(defaults.segment_ms),
            max_batch_bytes: message_max_bytes,
            durability,
            flush_interval_ms: a.flush_interval_ms.unwrap_or(defaults.flush_interval_ms),
            ..defaults
        };
        let dedicated = [
            ("retention.ms", a.retention_ms.map(|v| v.to_string())),
            ("retention.bytes", a.retention_bytes.map(|v| v.to_string())),
        ];
        for (key, value) in dedicated
            .iter()
            .filter_map(|(k, v)| v.as_ref().map(|v| (*k, v.as_str())))
        {
            corelog_shards::topic_config::set(&mut log, key, value)
                .map_err(|e| anyhow::anyhow!("{e}"))?;
        }
        for item in &a.topic_default {
            let (key, value) = item
                .split_once('=')
                .with_context(|| format!("--topic-default {item:?} is not KEY=VALUE"))?;
            corelog_shards::topic_config::set(&mut log, key.trim(), value.trim())
                .map_err(|e| anyhow::anyhow!("--topic-default: {e}"))?;
        }
        let retention_check_interval_ms = a.retention_check_interval_ms.unwrap_or(300_000).max(10);
        let disk_fill_max_percent = a.disk_fill_max_percent.unwrap_or(95.0);
        if !(1.0..=100.0).contains(&disk_fill_max_percent) {
            bail!("disk-fill-max-percent must be between 1 and 100");
        }
        let housekeeping = HousekeepingConfig {
            check_interval: std::time::Duration::from_millis(retention_check_interval_ms),
            cleaner_backoff: std::time::Duration::from_millis(
                a.cleaner_backoff_ms.unwrap_or(15_000).max(10),
            ),
            cleaner_buffer_bytes: a
                .cleaner_dedupe_buffer_bytes
                .unwrap_or(16 << 20)
                .clamp(1 << 10, 1 << 34) as usize,
            cleaner_io_bytes_per_second: match a.cleaner_io_max_bytes_per_second {
                Some(0) => None,
                Some(n) => Some(n),
                None => Some(CLEANER_IO_DEFAULT_BYTES_PER_SECOND),
            },
            disk_fill_max_ratio: disk_fill_max_percent / 100.0,
            disk_budget_bytes: a.disk_budget_bytes,
            producer_id_expiration_ms: a
                .producer_id_expiration_ms
                .unwrap_or(86_400_000)
                .clamp(1, i64::MAX as u64) as i64,
            producer_id_expiration_check_interval: std::time::Duration::from_millis(
                a.producer_id_expiration_check_interval_ms
                    .unwrap_or(600_000)
                    .max(10),
            ),
        };
        let quota_defaults = crate::quota::QuotaConfig::default();
        let quota_samples = a.quota_window_num.unwrap_or(quota_defaults.samples);
        if !(2..=3600).contains(&quota_samples) {
            bail!("quota-window-num must be between 2 and 3600");
        }
        let quota_window_s = a
            .quota_window_size_seconds
            .unwrap_or(quota_defaults.window_ms / 1000);
        if !(1..=3600).contains(&quota_window_s) {
            bail!("quota-window-size-seconds must be between 1 and 3600");
        }
        let quota = crate::quota::QuotaConfig {
            samples: quota_samples,
            window_ms: quota_window_s * 1000,
        };
        let node_id = a.node_id.unwrap_or(0);
        let authorizer = authorizer_policy(
            a.authorizer_class_name.as_deref(),
            a.super_users.as_deref(),
            a.allow_everyone_if_no_acl_found,
        )?;
        let mut cluster = ClusterConfig::resolve(&a, node_id, controller_bind)?;
        if controller_listener.is_none() {
            let secured_elsewhere = authorizer.is_some()
                || listeners
                    .iter()
                    .any(|l| l.protocol.uses_tls() || l.protocol.uses_sasl());
            cluster.controller_security =
                Arc::new(crate::inter_broker_security::unconfigured_controller_port(
                    node_id,
                    &cluster.voters,
                    secured_elsewhere,
                )?);
        }
        if let Some(name) = &controller_listener {
            let protocol =
                crate::listeners::protocol_of(name, a.listener_security_protocol_map.as_deref())?;
            cluster.controller_security = Arc::new(
                crate::inter_broker_security::controller_port(
                    &security,
                    name,
                    protocol,
                    authorizer.clone(),
                )
                .with_context(|| format!("the controller listener {name}"))?,
            );
        }
        let inter_broker_protocol = listeners
            .iter()
            .find(|l| l.name == inter_broker_listener)
            .map(|l| l.protocol)
            .context("the inter-broker listener is served")?;
        cluster.replication.fetch.security = crate::inter_broker_security::inter_broker_client(
            &security,
            &inter_broker_listener,
            inter_broker_protocol,
        )
        .with_context(|| format!("the inter-broker listener {inter_broker_listener}"))?;
        Ok(BrokerConfig {
            cluster,
            quota,
            housekeeping,
            retention_check_interval_ms,
            groups,
            share_version,
            share_state,
            share_leader,
            txns,
            listeners,
            inter_broker_listener,
            advertise_host,
            advertise_port,
            data_dir: log_dirs[0].clone(),
            log_dirs,
            shards,
            http: a
                .http
                .unwrap_or_else(|| SocketAddr::from(([127, 0, 0, 1], 9644))),
            storage_fault_injection: a.storage_fault_injection.unwrap_or(false),
            log_level: a.log_level.unwrap_or_else(|| "info".into()),
            node_id,
            authorizer,
            auto_create_topics: a.auto_create_topics.unwrap_or(true),
            tls_kernel_offload: a.tls_kernel_offload.unwrap_or(true),
            num_partitions,
            socket_request_max_bytes,
            log,
            limits: limits_config,
            kafka: KafkaSettings::new(
                file_takes,
                security_values,
                not_acted_on,
                &file_table,
                controller_listener_name,
            ),
        })
    }
}

/// `group.consumer.*`, checked as Kafka checks them: the heartbeat interval below the
/// session timeout, every assignor known.
fn consumer_group_config(
    a: &ServeArgs,
) -> anyhow::Result<corelog_shards::group::consumer::group::ConsumerGroupConfig> {
    use corelog_shards::group::consumer::assignor::AssignorKind;
    use corelog_shards::group::consumer::group::{ConsumerGroupConfig, MigrationPolicy};
    let defaults = ConsumerGroupConfig::default();
    let migration_policy = match &a.group_consumer_migration_policy {
        None => defaults.migration_policy,
        Some(name) => MigrationPolicy::from_name(name).ok_or_else(|| {
            anyhow::anyhow!("group-consumer-migration-policy: unknown policy {name:?} (bidirectional, upgrade, downgrade, disabled)")
        })?,
    };
    let session = a
        .group_consumer_session_timeout_ms
        .unwrap_or(defaults.session_timeout_ms);
    let interval = a
        .group_consumer_heartbeat_interval_ms
        .unwrap_or(defaults.heartbeat_interval_ms);
    if session < 1 || interval < 1 || interval >= session {
        bail!("group-consumer-heartbeat-interval-ms must be at least 1 and below group-consumer-session-timeout-ms");
    }
    let assignors = match &a.group_consumer_assignors {
        None => defaults.assignors,
        Some(list) => list
            .split(',')
            .map(str::trim)
            .filter(|n| !n.is_empty())
            .map(|n| {
                AssignorKind::from_name(n).ok_or_else(|| {
                    anyhow::anyhow!(
                        "group-consumer-assignors: unknown assignor {n:?} (uniform, range)"
                    )
                })
            })
            .collect::<anyhow::Result<Vec<_>>>()?,
    };
    if assignors.is_empty() {
        bail!("group-consumer-assignors must name at least one assignor");
    }
    // Kafka's bounds, widened to take in the broker's own values when those are set
    // outside them (a test broker with a short session, say) and no bound was given.
    let min_session = a
        .group_consumer_min_session_timeout_ms
        .unwrap_or(defaults.min_session_timeout_ms.min(session));
    let max_session = a
        .group_consumer_max_session_timeout_ms
        .unwrap_or(defaults.max_session_timeout_ms.max(session));
    let min_interval = a
        .group_consumer_min_heartbeat_interval_ms
        .unwrap_or(defaults.min_heartbeat_interval_ms.min(interval));
    let max_interval = a
        .group_consumer_max_heartbeat_interval_ms
        .unwrap_or(defaults.max_heartbeat_interval_ms.max(interval));
    if !(min_session..=max_session).contains(&session) {
        bail!("group-consumer-session-timeout-ms ({session}) must be within group-consumer-min-session-timeout-ms ({min_session}) and group-consumer-max-session-timeout-ms ({max_session})");
    }
    if !(min_interval..=max_interval).contains(&interval) {
        bail!("group-consumer-heartbeat-interval-ms ({interval}) must be within group-consumer-min-heartbeat-interval-ms ({min_interval}) and group-consumer-max-heartbeat-interval-ms ({max_interval})");
    }
    Ok(ConsumerGroupConfig {
        session_timeout_ms: session,
        heartbeat_interval_ms: interval,
        max_size: a
            .group_consumer_max_size
            .map_or(defaults.max_size, |n| n as usize),
        assignors,
        migration_policy,
        min_session_timeout_ms: min_session,
        max_session_timeout_ms: max_session,
        min_heartbeat_interval_ms: min_interval,
        max_heartbeat_interval_ms: max_interval,
    })
}

/// The highest `share.version` served (KIP-932 as Kafka 4.2 finalized it).
pub const SHARE_VERSION_MAX: i16 = corelog_controller::features::SHARE_VERSION_MAX;

/// The share partitions' settings (`group.share.*` of records), checked as Kafka checks
/// them, except that a lock may be as short as 100 ms (tests of redelivery).
fn share_leader_config(
    a: &ServeArgs,
) -> anyhow::Result<corelog_shards::share::leader::ShareLeaderConfig> {
    let defaults = corelog_shards::share::leader::ShareLeaderConfig::default();
    let lock_ms = a
        .group_share_record_lock_duration_ms
        .unwrap_or(defaults.lock_ms);
    if !(100..=3_600_000).contains(&lock_ms) {
        bail!("group-share-record-lock-duration-ms must be between 100 and 3600000");
    }
    let delivery_limit = a
        .group_share_delivery_count_limit
        .unwrap_or(defaults.limits.delivery_limit);
    if !(2..=10).contains(&delivery_limit) {
        bail!("group-share-delivery-count-limit must be between 2 and 10");
    }
    let max_in_flight = a
        .group_share_partition_max_record_locks
        .unwrap_or(defaults.limits.max_in_flight);
    if !(100..=10_000).contains(&max_in_flight) {
        bail!("group-share-partition-max-record-locks must be between 100 and 10000");
    }
    Ok(corelog_shards::share::leader::ShareLeaderConfig {
        limits: corelog_shards::share::partition::ShareLimits {
            max_in_flight,
            delivery_limit,
        },
        lock_ms,
    })
}

/// The share coordinator's settings (`share.coordinator.*`).
fn share_coordinator_config(
    a: &ServeArgs,
) -> anyhow::Result<corelog_shards::share::coordinator::ShareCoordinatorConfig> {
    let defaults = corelog_shards::share::coordinator::ShareCoordinatorConfig::default();
    let partitions = a
        .share_coordinator_state_topic_num_partitions
        .unwrap_or(defaults.partitions);
    if !(1..=1000).contains(&partitions) {
        bail!("share-coordinator-state-topic-num-partitions must be between 1 and 1000");
    }
    Ok(corelog_shards::share::coordinator::ShareCoordinatorConfig {
        partitions,
        updates_per_snapshot: a
            .share_coordinator_snapshot_update_records_per_snapshot
            .unwrap_or(defaults.updates_per_snapshot),
        ..defaults
    })
}

/// The broker's share-group settings (`group.share.*`), checked as Kafka checks them.
fn share_group_config(a: &ServeArgs) -> anyhow::Result<ShareGroupConfig> {
    let defaults = ShareGroupConfig::default();
    let session = a
        .group_share_session_timeout_ms
        .unwrap_or(defaults.session_timeout_ms);
    let interval = a
        .group_share_heartbeat_interval_ms
        .unwrap_or(defaults.heartbeat_interval_ms);
    if session < 1 || interval < 1 || interval >= session {
        bail!("group-share-heartbeat-interval-ms must be at least 1 and below group-share-session-timeout-ms");
    }
    let max_size = a
        .group_share_max_size
        .map_or(defaults.max_size, |n| n as usize);
    if !(1..=1000).contains(&max_size) {
        bail!("group-share-max-size must be between 1 and 1000");
    }
    // Kafka's bounds, widened to take in the broker's own values when those are set
    // outside them and no bound was given (as for consumer groups).
    let leader = share_leader_config(a)?;
    let kafka = ShareBounds::default();
    let bound = |name: &str,
                 (kafka_min, kafka_max): (i64, i64),
                 min: Option<i64>,
                 max: Option<i64>,
                 own: i64|
     -> anyhow::Result<(i64, i64)> {
        let (min, max) = (
            min.unwrap_or(kafka_min.min(own)),
            max.unwrap_or(kafka_max.max(own)),
        );
        if !(min..=max).contains(&own) {
            bail!("group-share-{name} ({own}) must be within group-share-min-{name} ({min}) and group-share-max-{name} ({max})");
        }
        Ok((min, max))
    };
    let bounds = ShareBounds {
        session_timeout_ms: bound(
            "session-timeout-ms",
            kafka.session_timeout_ms,
            a.group_share_min_session_timeout_ms.map(i64::from),
            a.group_share_max_session_timeout_ms.map(i64::from),
            i64::from(session),
        )?,
        heartbeat_interval_ms: bound(
            "heartbeat-interval-ms",
            kafka.heartbeat_interval_ms,
            a.group_share_min_heartbeat_interval_ms.map(i64::from),
            a.group_share_max_heartbeat_interval_ms.map(i64::from),
            i64::from(interval),
        )?,
        record_lock_duration_ms: bound(
            "record-lock-duration-ms",
            kafka.record_lock_duration_ms,
            a.group_share_min_record_lock_duration_ms,
            a.group_share_max_record_lock_duration_ms,
            leader.lock_ms,
        )?,
        delivery_count_limit: bound(
            "delivery-count-limit",
            kafka.delivery_count_limit,
            a.group_share_min_delivery_count_limit,
            a.group_share_max_delivery_count_limit,
            i64::from(leader.limits.delivery_limit),
        )?,
        partition_max_record_locks: bound(
            "partition-max-record-locks",
            kafka.partition_max_record_locks,
            a.group_share_min_partition_max_record_locks,
            a.group_share_max_partition_max_record_locks,
            leader.limits.max_in_flight,
        )?,
    };
    Ok(ShareGroupConfig {
        session_timeout_ms: session,
        heartbeat_interval_ms: interval,
        max_size,
        bounds,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn defaults() {
        let c = BrokerConfig::resolve(ServeArgs::default()).expect("defaults resolve");
        assert_eq!(c.listeners.len(), 1);
        assert_eq!(c.listeners[0].bind.to_string(), "127.0.0.1:9092");
        assert_eq!(c.listeners[0].name, "PLAINTEXT");
        assert_eq!(c.inter_broker_listener, "PLAINTEXT");
        assert_eq!(c.advertise_port, 9092);
        assert_eq!(c.log.max_batch_bytes, 1_048_588);
        assert!(c.auto_create_topics);
        assert_eq!(c.num_partitions, 1);
    }

    #[test]
    fn share_group_bounds_are_kafkas_widened_to_the_brokers_own_values() {
        let c = BrokerConfig::resolve(ServeArgs::default()).expect("defaults resolve");
        assert_eq!(c.groups.share.bounds, ShareBounds::default());
        let short = ServeArgs {
            group_share_record_lock_duration_ms: Some(1_000),
            group_share_max_delivery_count_limit: Some(8),
            ..ServeArgs::default()
        };
        let b = BrokerConfig::resolve(short)
            .expect("resolves")
            .groups
            .share
            .bounds;
        assert_eq!(b.record_lock_duration_ms, (1_000, 60_000));
        assert_eq!(b.delivery_count_limit, (2, 8));
        let outside = ServeArgs {
            group_share_record_lock_duration_ms: Some(1_000),
            group_share_min_record_lock_duration_ms: Some(2_000),
            ..ServeArgs::default()
        };
        let e = BrokerConfig::resolve(outside).unwrap_err().to_string();
        assert!(e.contains("group-share-min-record-lock-duration-ms"), "{e}");
    }

    #[test]
    fn cluster_flags() {
        let c = BrokerConfig::resolve(ServeArgs::default()).expect("defaults resolve");
        assert_eq!(c.cluster.controller_listen, "127.0.0.1:9093");
        assert_eq!(
            c.cluster.voters,
            std::collections::BTreeMap::from([(0, "127.0.0.1:9093".to_string())]),
            "alone, a broker is its own quorum"
        );
        assert_eq!(c.cluster.session_timeout.as_millis(), 9000);
        let args = ServeArgs {
            node_id: Some(2),
            controller_voters: Some("1@h1:9093, 2@h2:9093,3@[::1]:9093".into()),
            rack: Some("r1".into()),
            ..Default::default()
        };
        let c = BrokerConfig::resolve(args).expect("resolves");
        assert_eq!(c.cluster.voters.len(), 3);
        assert_eq!(c.cluster.voters[&3], "[::1]:9093");
        assert_eq!(c.cluster.rack.as_deref(), Some("r1"));
        for bad in ["", "1@h", "x@h:1", "1@h:1,1@h:2", "-1@h:1"] {
            let args = ServeArgs {
                controller_voters: Some(bad.into()),
                ..Default::default()
            };
            assert!(BrokerConfig::resolve(args).is_err(), "{bad:?} is refused");
        }
        let args = ServeArgs {
            broker_heartbeat_interval_ms: Some(9000),
            ..Default::default()
        };
        assert!(
            BrokerConfig::resolve(args).is_err(),
            "heartbeats within the session"
        );
    }

    #[test]
    fn file_with_kafka_aliases_and_flags_win() {
        let dir = tempfile::tempdir().expect("tempdir");
        let path = dir.path().join("c.toml");
        std::fs::write(
            &path,
            "\"num.partitions\" = 3\nshards = 2\n\"auto.create.topics.enable\" = false\n",
        )
        .expect("write");
        let flags = ServeArgs {
            config: Some(path),
            shards: Some(1),
            ..Default::default()
        };
        let c = BrokerConfig::resolve(flags).expect("resolve");
        assert_eq!(c.num_partitions, 3);
        assert_eq!(c.shards, 1);
        assert!(!c.auto_create_topics);
    }

    #[test]
    fn kafka_text_values_from_a_converted_server_properties_are_taken() {
        let dir = tempfile::tempdir().expect("tempdir");
        let path = dir.path().join("c.toml");
        std::fs::write(
            &path,
            "\"num.partitions\" = \"3\"\n\"auto.create.topics.enable\" = \"false\"\n\
             \"log.retention.ms\" = \"604800000\"\n\"message.max.bytes\" = \" 1048588 \"\n",
        )
        .expect("write");
        let c = BrokerConfig::resolve(ServeArgs {
            config: Some(path.clone()),
            ..Default::default()
        })
        .expect("resolve");
        assert_eq!(c.num_partitions, 3);
        assert!(!c.auto_create_topics);
        std::fs::write(&path, "\"auto.create.topics.enable\" = \"maybe\"\n").expect("write");
        let e = format!(
            "{:#}",
            BrokerConfig::resolve(ServeArgs {
                config: Some(path),
                ..Default::default()
            })
            .expect_err("not a boolean")
        );
        assert!(e.contains("\"maybe\" is not true or false"), "{e}");
    }

    #[test]
    fn kafka_listener_keys_set_the_address_and_what_is_advertised() {
        let dir = tempfile::tempdir().expect("tempdir");
        let path = dir.path().join("c.toml");
        std::fs::write(
            &path,
            "listeners = \"CLIENT://127.0.0.1:19092\"\n\
             \"advertised.listeners\" = \"CLIENT://broker-1.example:29092\"\n\
             \"listener.security.protocol.map\" = \"CLIENT:PLAINTEXT\"\n\
             \"inter.broker.listener.name\" = \"CLIENT\"\n",
        )
        .expect("write");
        let at = |extra: ServeArgs| {
            BrokerConfig::resolve(ServeArgs {
                config: Some(path.clone()),
                ..extra
            })
        };
        let c = at(ServeArgs::default()).expect("resolve");
        assert_eq!(c.listeners[0].bind.to_string(), "127.0.0.1:19092");
        assert_eq!(
            (c.advertise_host.as_str(), c.advertise_port),
            ("broker-1.example", 29092)
        );
        let both = at(ServeArgs {
            listen: Some("127.0.0.1:9092".parse().expect("addr")),
            ..Default::default()
        });
        assert!(both.is_err(), "listeners and --listen together are refused");
        let sasl = BrokerConfig::resolve(ServeArgs {
            listeners: Some("SASL_PLAINTEXT://127.0.0.1:9093".into()),
            inter_broker_listener_name: Some("SASL_PLAINTEXT".into()),
            ..Default::default()
        });
        let e = format!("{:#}", sasl.expect_err("no mechanisms"));
        assert!(e.contains("sasl.enabled.mechanisms"), "{e}");
        let tls = BrokerConfig::resolve(ServeArgs {
            listeners: Some("SSL://127.0.0.1:9093".into()),
            inter_broker_listener_name: Some("SSL".into()),
            ..Default::default()
        });
        let e = format!("{:#}", tls.expect_err("no keystore"));
        assert!(e.contains("ssl.keystore.location"), "{e}");
        let typo = BrokerConfig::resolve(ServeArgs {
            security: vec!["ssl.keystore.locaton=/k.pem".into()],
            ..Default::default()
        });
        assert!(typo.is_err(), "an unknown security key is refused");
    }

    #[test]
    fn the_controller_listener_secures_and_may_bind_the_controller_port() {
        let jaas = r#"org.apache.kafka.common.security.plain.PlainLoginModule required username="broker" password="pw" user_broker="pw";"#;
        let args = |listeners: &str| ServeArgs {
            listeners: Some(listeners.into()),
            listener_security_protocol_map: Some(
                "PLAINTEXT:PLAINTEXT,CONTROLLER:SASL_PLAINTEXT".into(),
            ),
            controller_listener_names: Some("CONTROLLER".into()),
            security: vec![
                "listener.name.controller.sasl.enabled.mechanisms=PLAIN".into(),
                format!("listener.name.controller.plain.sasl.jaas.config={jaas}"),
            ],
            ..Default::default()
        };
        // Kafka's combined mode: the controller listener among `listeners` is the port.
        let c = BrokerConfig::resolve(args(
            "PLAINTEXT://127.0.0.1:19092,CONTROLLER://127.0.0.1:19093",
        ))
        .expect("resolve");
        assert_eq!(
            c.listeners.len(),
            1,
            "the controller port is no Kafka listener"
        );
        assert_eq!(c.cluster.controller_listen, "127.0.0.1:19093");
        let port = &c.cluster.controller_security;
        assert!(port.tls.is_none());
        assert_eq!(
            port.sasl.as_ref().map(|s| s.username.as_str()),
            Some("broker")
        );
        // Or only named: --controller-listen binds, the listener's settings secure it.
        let c = BrokerConfig::resolve(args("PLAINTEXT://127.0.0.1:19092")).expect("resolve");
        assert_eq!(c.cluster.controller_listen, "127.0.0.1:9093");
        assert!(c.cluster.controller_security.sasl.is_some());
        // One controller port: a second name is refused, not ignored.
        let two = BrokerConfig::resolve(ServeArgs {
            controller_listener_names: Some("CONTROLLER,OTHER".into()),
            ..args("PLAINTEXT://127.0.0.1:19092")
        });
        assert!(format!("{:#}", two.expect_err("two names")).contains("one is served"));
        // Without controller.listener.names the port is plaintext, as before.
        let c = BrokerConfig::resolve(ServeArgs::default()).expect("resolve");
        assert!(c.cluster.controller_security.sasl.is_none());
        assert!(c.cluster.replication.fetch.security.is_plaintext());
    }

    #[test]
    fn several_listeners_each_bound_and_advertised_by_name() {
        let c = BrokerConfig::resolve(ServeArgs {
            listeners: Some("INTERNAL://127.0.0.1:19092,EXTERNAL://localhost:19094".into()),
            advertised_listeners: Some(
                "INTERNAL://10.0.0.5:19092,EXTERNAL://kafka.example:9094".into(),
            ),
            listener_security_protocol_map: Some("INTERNAL:PLAINTEXT,EXTERNAL:PLAINTEXT".into()),
            inter_broker_listener_name: Some("internal".into()),
            ..Default::default()
        })
        .expect("resolve");
        let names: Vec<&str> = c.listeners.iter().map(|l| l.name.as_str()).collect();
        assert_eq!(names, ["INTERNAL", "EXTERNAL"]);
        assert_eq!(c.listeners[1].bind.port(), 19094, "a host name is resolved");
        assert!(c.listeners[1].bind.ip().is_loopback());
        assert_eq!(
            c.listeners[1].advertised,
            Some(("kafka.example".to_string(), 9094))
        );
        assert_eq!(c.inter_broker_listener, "INTERNAL");
        assert_eq!(
            (c.advertise_host.as_str(), c.advertise_port),
            ("10.0.0.5", 19092),
            "other brokers are given the inter-broker listener"
        );
        let unadvertised = BrokerConfig::resolve(ServeArgs {
            listeners: Some("A://127.0.0.1:19092,B://127.0.0.1:19093".into()),
            advertised_listeners: Some("A://127.0.0.1:19092".into()),
            listener_security_protocol_map: Some("A:PLAINTEXT,B:PLAINTEXT".into()),
            inter_broker_listener_name: Some("A".into()),
            ..Default::default()
        })
        .expect("a listener may be bound without being advertised");
        assert_eq!(unadvertised.listeners[1].advertised, None);
    }

    #[test]
    fn authorizer_from_kafkas_keys() {
        let dir = tempfile::tempdir().expect("tempdir");
        let resolve = |text: &str| {
            let path = dir.path().join("a.toml");
            std::fs::write(&path, text).expect("write");
            BrokerConfig::resolve(ServeArgs {
                config: Some(path),
                ..Default::default()
            })
            .map(|c| c.authorizer)
        };
        const CLASS: &str =
            "\"authorizer.class.name\" = \"org.apache.kafka.metadata.authorizer.StandardAuthorizer\"\n";
        let p = resolve(&format!(
            "{CLASS}\"super.users\" = \"User:admin; User:broker\"\n\
             \"allow.everyone.if.no.acl.found\" = \"true\"\n"
        ))
        .expect("resolve")
        .expect("an authorizer");
        assert_eq!(p.super_users, ["User:admin", "User:broker"]);
        assert!(p.allow_everyone_if_no_acl_found, "Kafka's text form");
        let p = resolve(&format!(
            "{CLASS}\"allow.everyone.if.no.acl.found\" = false\n"
        ))
        .expect("resolve")
        .expect("an authorizer");
        assert!(!p.allow_everyone_if_no_acl_found && p.super_users.is_empty());
        assert_eq!(
            resolve("").expect("resolve"),
            None,
            "no authorizer by default"
        );
        assert!(
            resolve("\"super.users\" = \"User:a\"\n").is_err(),
            "without an authorizer"
        );
        assert!(resolve("\"authorizer.class.name\" = \"com.example.Mine\"\n").is_err());
        assert!(resolve(&format!("{CLASS}\"super.users\" = \"admin\"\n")).is_err());
        assert!(resolve(&format!(
            "{CLASS}\"allow.everyone.if.no.acl.found\" = \"yes\"\n"
        ))
        .is_err());
    }

    #[test]
    fn limits_from_flags_and_kafka_keys() {
        let dir = tempfile::tempdir().expect("tempdir");
        let path = dir.path().join("c.toml");
        std::fs::write(
            &path,
            "\"max.connections\" = 50\n\"max.connections.per.ip\" = 5\n\
             \"max.connections.per.ip.overrides\" = \"127.0.0.2:7\"\n\
             \"queued.max.request.bytes\" = 4194304\n",
        )
        .expect("write");
        let flags = ServeArgs {
            config: Some(path),
            max_connections: Some(40),
            ..Default::default()
        };
        let c = BrokerConfig::resolve(flags).expect("resolve").limits;
        assert_eq!(c.connections.total_max, 40, "the flag wins");
        assert_eq!(c.connections.per_ip_max, Some(5));
        assert_eq!(
            c.connections
                .per_ip_overrides
                .get(&"127.0.0.2".parse().expect("ip")),
            Some(&7)
        );
        assert_eq!(c.queued_max_request_bytes, 4 << 20);
        let d = BrokerConfig::resolve(ServeArgs::default())
            .expect("defaults")
            .limits;
        assert!(d.connections.total_max >= 64);
        assert_eq!(
            d.connections.per_ip_max, None,
            "per IP is unlimited by default"
        );
        assert_eq!(d.max_inflight_requests_per_connection, 16);
        for bad in [
            ServeArgs {
                max_connections: Some(0),
                ..Default::default()
            },
            ServeArgs {
                max_inflight_requests_per_connection: Some(4),
                ..Default::default()
            },
            ServeArgs {
                queued_max_request_bytes: Some(1000),
                ..Default::default()
            },
            ServeArgs {
                max_connections_per_ip_overrides: Some("somehost:3".into()),
                ..Default::default()
            },
        ] {
            assert!(BrokerConfig::resolve(bad).is_err());
        }
    }

    #[test]
    fn unknown_key_is_an_error() {
        let dir = tempfile::tempdir().expect("tempdir");
        let path = dir.path().join("c.toml");
        std::fs::write(&path, "num-partitons = 3\n").expect("write");
        let flags = ServeArgs {
            config: Some(path),
            ..Default::default()
        };
        assert!(BrokerConfig::resolve(flags).is_err());
    }

    #[test]
    fn quota_window_from_file_alias_and_flag() {
        let c = BrokerConfig::resolve(ServeArgs::default()).expect("defaults resolve");
        assert_eq!(c.quota, crate::quota::QuotaConfig::default());
        assert_eq!(c.quota.samples, 30);
        let dir = tempfile::tempdir().expect("tempdir");
        let path = dir.path().join("c.toml");
        std::fs::write(
            &path,
            "\"quota.window.num\" = 11\nquota-window-size-seconds = 2\n",
        )
        .expect("write");
        let flags = ServeArgs {
            config: Some(path),
            quota_window_num: Some(5),
            ..Default::default()
        };
        let c = BrokerConfig::resolve(flags).expect("resolve");
        assert_eq!(c.quota.samples, 5);
        assert_eq!(c.quota.window_ms, 2000);
        let bad = ServeArgs {
            quota_window_num: Some(1),
            ..Default::default()
        };
        assert!(BrokerConfig::resolve(bad).is_err());
    }
}
