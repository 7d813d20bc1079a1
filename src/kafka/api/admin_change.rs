//! What the admin APIs share: admin changes sent to shard 0
//! (`corelog_shards::admin_changes`), which commits them through the controller quorum,
//! and the creation of topics (also by Metadata and Produce auto-creation). It serves no
//! API itself.
//!
//! CreateTopics (v0–v7), DeleteTopics (v0–v6), CreatePartitions (v0–v3).
//!
//! All three go to shard 0, which validates the change, commits it through the active
//! controller and answers once this broker's shards have applied it. `__consumer_offsets`
//! is created here too, on the first FindCoordinator (as Kafka does), so that its
//! partitions spread over the brokers live by then.

use super::Ctx;
use corelog_shards::mesh::{AdminChange, NewTopic, Reply, ShardMessage, TopicError};
use corelog_shards::routing::ADMIN_SHARD;
use futures::channel::oneshot;
use kafka_protocol::protocol::StrBytes;

/// Sends an admin change to the admin shard (shard 0) and returns its reply, whatever
/// its type; `None` if the admin shard cannot be reached (shutdown), which each caller
/// answers in its own terms. The one way the edge asks for a metadata change:
/// [`send_admin_change`] is its form for changes answered item by item.
pub async fn ask_admin_shard<T>(
    ctx: &Ctx,
    request: impl FnOnce(Reply<T>) -> AdminChange,
) -> Option<T> {
    let (tx, rx) = oneshot::channel();
    let msg = ShardMessage::AdminChange(request(tx));
    ctx.shard.peers.call(ADMIN_SHARD, msg, rx).await
}

/// Sends an admin change about `n` items (topics, partitions, ACLs, ...) to the admin
/// shard and returns one outcome per item; every one is a storage error if the admin
/// shard cannot be reached (shutdown). Nothing is sent for no items.
pub async fn send_admin_change(
    ctx: &Ctx,
    n: usize,
    request: impl FnOnce(Reply<Vec<Result<(), TopicError>>>) -> AdminChange,
) -> Vec<Result<(), TopicError>> {
    if n == 0 {
        return Vec::new();
    }
    ask_admin_shard(ctx, request).await.unwrap_or_else(|| {
        (0..n)
            .map(|_| Err(TopicError::Storage("the controller is unavailable".into())))
            .collect()
    })
}

pub(super) async fn create_or_validate(
    ctx: &Ctx,
    topics: Vec<NewTopic>,
    validate_only: bool,
) -> Vec<Result<(), TopicError>> {
    send_admin_change(ctx, topics.len(), |reply| AdminChange::CreateTopics {
        topics,
        validate_only,
        reply,
    })
    .await
}

pub async fn create_via_admin_shard(
    ctx: &Ctx,
    topics: Vec<NewTopic>,
) -> Vec<Result<(), TopicError>> {
    create_or_validate(ctx, topics, false).await
}

pub(super) fn message(e: &TopicError) -> Option<StrBytes> {
    Some(StrBytes::from_string(e.to_string()))
}

/// Kafka's `auto.create.topics.enable` (Metadata and Produce naming topics that do not
/// exist): each of `names` created with the broker's defaults, except `__consumer_offsets`,
/// which is created as the group coordinators need it ([`ensure_offsets_topic`]) — never
/// as an ordinary topic of `num.partitions`, which would leave groups hashed to partitions
/// it lacks without a coordinator. One outcome per name, in order.
pub async fn auto_create(ctx: &Ctx, names: &[String]) -> Vec<Result<(), TopicError>> {
    let offsets = corelog_shards::group::OFFSETS_TOPIC;
    let ordinary: Vec<NewTopic> = names
        .iter()
        .filter(|n| n.as_str() != offsets)
        .map(|n| NewTopic {
            name: n.clone(),
            partitions: ctx.config.num_partitions,
            replication_factor: ctx.config.cluster.default_replication_factor,
            assignments: None,
            configs: Vec::new(),
        })
        .collect();
    let mut created = create_via_admin_shard(ctx, ordinary).await.into_iter();
    let mut out = Vec::with_capacity(names.len());
    for n in names {
        out.push(if n == offsets {
            ensure_offsets_topic(ctx).await
        } else {
            created
                .next()
                .unwrap_or_else(|| Err(TopicError::Storage("no answer from the controller".into())))
        });
    }
    out
}

/// Creates `__transaction_state` if it does not exist yet, as Kafka's coordinator does on
/// the first FindCoordinator for a transactional id: compacted,
/// `transaction.state.log.num.partitions` partitions,
/// `transaction.state.log.replication.factor` replicas (at most one per live broker) and
/// `transaction.state.log.min.isr` in-sync replicas (at most its replicas).
pub async fn ensure_transaction_topic(ctx: &Ctx) -> Result<(), TopicError> {
    let c = &ctx.config.txns;
    ensure_internal_topic(
        ctx,
        corelog_shards::txn::TRANSACTION_TOPIC,
        c.partitions,
        c.replication_factor,
        |replicas| {
            vec![
                ("cleanup.policy".into(), "compact".into()),
                (
                    "min.insync.replicas".into(),
                    c.min_isr.min(replicas).max(1).to_string(),
                ),
                ("segment.bytes".into(), c.segment_bytes.to_string()),
            ]
        },
    )
    .await
}

/// Creates `__consumer_offsets` if it does not exist yet: compacted, partitions as
/// configured, placed over the live brokers, `offsets.topic.replication.factor` replicas
/// (at most one per live broker).
pub async fn ensure_offsets_topic(ctx: &Ctx) -> Result<(), TopicError> {
    ensure_internal_topic(
        ctx,
        corelog_shards::group::OFFSETS_TOPIC,
        ctx.config.groups.offsets_partitions,
        ctx.config.cluster.offsets_topic_replication_factor,
        |_| vec![("cleanup.policy".into(), "compact".into())],
    )
    .await
}

/// Creates `__share_group_state` if it does not exist yet, as Kafka's share coordinator
/// does: `cleanup.policy=delete` with infinite retention (the coordinator prunes it),
/// `share.coordinator.state.topic.num.partitions` partitions, its replication factor (at
/// most one replica per live broker) and min.isr (at most its replicas).
pub async fn ensure_share_state_topic(ctx: &Ctx) -> Result<(), TopicError> {
    let min_isr = ctx.config.cluster.share_state_min_isr;
    ensure_internal_topic(
        ctx,
        corelog_shards::share::coordinator::SHARE_STATE_TOPIC,
        ctx.config.share_state.partitions,
        ctx.config.cluster.share_state_replication_factor,
        |replicas| {
            vec![
                ("cleanup.policy".into(), "delete".into()),
                ("retention.ms".into(), "-1".into()),
                ("retention.bytes".into(), "-1".into()),
                (
                    "min.insync.replicas".into(),
                    min_isr.min(replicas).max(1).to_string(),
                ),
            ]
        },
    )
    .await
}

/// Creates an internal topic if it does not exist yet, with `replication_factor`
/// replicas or as many as there are live brokers (a cluster smaller than the setting —
/// a single node — still gets its coordinators), and the configs `configs` gives for
/// that many replicas. One that exists is waited for until this broker's shards have
/// opened its partitions (a request racing the one that created it).
async fn ensure_internal_topic(
    ctx: &Ctx,
    topic: &str,
    partitions: i32,
    replication_factor: i32,
    configs: impl FnOnce(i32) -> Vec<(String, String)>,
) -> Result<(), TopicError> {
    let meta = ctx.shard.metadata.snapshot();
    if meta.topic(topic).is_some() {
        ctx.shard.metadata.wait_reconciled(meta.version()).await;
        return Ok(());
    }
    let live = i32::try_from(meta.live_brokers().count()).unwrap_or(i32::MAX);
    let replicas = replication_factor.min(live).max(1);
    let new = NewTopic {
        name: topic.into(),
        partitions,
        replication_factor: replicas,
        assignments: None,
        configs: configs(replicas),
    };
    match create_via_admin_shard(ctx, vec![new]).await.pop() {
        Some(Ok(())) | Some(Err(TopicError::AlreadyExists)) => Ok(()),
        Some(Err(e)) => Err(e),
        None => Err(TopicError::Storage("no answer from the controller".into())),
    }
}
