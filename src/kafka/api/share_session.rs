//! What ShareFetch and ShareAcknowledge share (KIP-932) beside the connection's share
//! session (`crate::share_session`): the acknowledgements' checks and route to the
//! shards that own their partitions, and the release of a closed session's records. It
//! serves no API itself.

use super::Ctx;
pub use crate::share_session::{ShareSession, CLOSE_EPOCH};
use corelog_shards::mesh::ShareAckInput;
use corelog_shards::mesh::{ShardMessage, ShareRequest};
use corelog_shards::routing::TopicPartition;
use corelog_shards::share::leader::ShareError;
use corelog_shards::share::partition::{AckBatch, AckType};
use futures::channel::oneshot;
use kafka_protocol::ResponseError;
use std::collections::BTreeMap;
use uuid::Uuid;

/// Creates `__share_group_state` if the cluster has none yet (the share partitions'
/// state goes there from the first fetch on).
pub async fn ensure_state_topic(ctx: &Ctx) {
    if let Err(e) = super::admin_change::ensure_share_state_topic(ctx).await {
        tracing::warn!(error = %e, "creating {}", corelog_shards::share::coordinator::SHARE_STATE_TOPIC);
    }
}

/// A request's acknowledgement batches, checked as Kafka checks them before they reach a
/// share partition: types 0–3 (and 4, RENEW, only where `renew` allows it), one type
/// or one per offset, offsets in order and not overlapping.
pub fn ack_batches(
    batches: impl IntoIterator<Item = (i64, i64, Vec<i8>)>,
    renew: bool,
) -> Result<Vec<AckBatch>, String> {
    let mut out: Vec<AckBatch> = Vec::new();
    for (first, last, types) in batches {
        if first < 0 || last < first {
            return Err(format!("acknowledgement batch {first}..{last} is invalid"));
        }
        if out.last().is_some_and(|b| b.last >= first) {
            return Err("acknowledgement batches overlap or are out of order".into());
        }
        let types = types
            .into_iter()
            .map(|t| match AckType::from_id(t) {
                Some(AckType::Renew) if !renew => None,
                other => other,
            })
            .collect::<Option<Vec<_>>>()
            .ok_or_else(|| "an acknowledge type is not valid".to_string())?;
        if types.is_empty() {
            return Err("an acknowledgement batch has no type".into());
        }
        out.push(AckBatch { first, last, types });
    }
    Ok(out)
}

/// The error code and message of a share partition's failure.
pub fn share_error(e: &ShareError) -> (i16, Option<String>) {
    let code = match e {
        ShareError::NotLeaderOrFollower => ResponseError::NotLeaderOrFollower,
        ShareError::CoordinatorNotAvailable => ResponseError::CoordinatorNotAvailable,
        ShareError::InvalidRecordState(_) => ResponseError::InvalidRecordState,
        ShareError::InvalidRequest(_) => ResponseError::InvalidRequest,
        ShareError::Unknown(_) => ResponseError::UnknownServerError,
    };
    let message = match e {
        ShareError::InvalidRecordState(_) | ShareError::InvalidRequest(_) => Some(e.to_string()),
        _ => None,
    };
    (code.code(), message)
}

/// Sends each partition's acknowledgements to the shard that owns it; the answers come
/// back by partition.
pub async fn acknowledge(
    ctx: &Ctx,
    group: &str,
    member: &str,
    acks: Vec<ShareAckInput>,
) -> BTreeMap<(Uuid, i32), Result<(), ShareError>> {
    let mut by_shard: BTreeMap<usize, Vec<ShareAckInput>> = BTreeMap::new();
    for a in acks {
        by_shard
            .entry(ctx.shard.owner_of(&a.tp.topic, a.tp.partition))
            .or_default()
            .push(a);
    }
    let calls = by_shard.into_iter().map(|(shard, inputs)| async move {
        let keys: Vec<(Uuid, i32)> = inputs
            .iter()
            .map(|a| (a.topic_id, a.tp.partition))
            .collect();
        let (tx, rx) = oneshot::channel();
        let message = ShardMessage::Share(ShareRequest::Acknowledge {
            group: group.to_string(),
            member: member.to_string(),
            partitions: inputs,
            reply: tx,
        });
        let answers = ctx.shard.peers.call(shard, message, rx).await;
        keys.into_iter()
            .enumerate()
            .map(|(i, k)| {
                let r = answers
                    .as_ref()
                    .and_then(|a| a.get(i).cloned())
                    .unwrap_or(Err(ShareError::NotLeaderOrFollower));
                (k, r)
            })
            .collect::<Vec<_>>()
    });
    futures::future::join_all(calls)
        .await
        .into_iter()
        .flatten()
        .collect()
}

/// One partition a request names, with the acknowledgement batches it carries
/// (first offset, last offset, types).
pub struct Named {
    pub topic_id: Uuid,
    pub partition: i32,
    pub batches: Vec<(i64, i64, Vec<i8>)>,
}

/// What became of one named partition: its error (an unknown topic id, a topic the
/// principal may not read), and the result of its acknowledgements if it carried any.
#[derive(Debug, Default)]
pub struct Settled {
    pub error: i16,
    pub ack: Option<(i16, Option<String>)>,
}

/// Checks the partitions a request names (the topic known, READ on it, the batches
/// well formed; RENEW only where `renew`: a v2 request that says it carries some) and
/// applies their acknowledgements on the shards that own them.
pub async fn settle(
    ctx: &Ctx,
    access: &crate::kafka::access::Access<'_>,
    group: &str,
    member: &str,
    named: Vec<Named>,
    renew: bool,
) -> BTreeMap<(Uuid, i32), Settled> {
    use crate::kafka::access::{Op, Resource};
    let meta = ctx.shard.metadata.snapshot();
    let mut out: BTreeMap<(Uuid, i32), Settled> = BTreeMap::new();
    let mut acks = Vec::new();
    for n in named {
        let s = out.entry((n.topic_id, n.partition)).or_default();
        let Some(name) = meta.topic_by_id(n.topic_id).map(|t| t.name.clone()) else {
            s.error = ResponseError::UnknownTopicId.code();
            continue;
        };
        if !access.allows(Op::Read, Resource::Topic, &name) {
            s.error = ResponseError::TopicAuthorizationFailed.code();
            continue;
        }
        if n.batches.is_empty() {
            continue;
        }
        match ack_batches(n.batches, renew) {
            Ok(batches) => acks.push(ShareAckInput {
                tp: TopicPartition {
                    topic: name.as_str().into(),
                    partition: n.partition,
                },
                topic_id: n.topic_id,
                batches,
            }),
            Err(m) => s.ack = Some((ResponseError::InvalidRequest.code(), Some(m))),
        }
    }
    for (key, result) in acknowledge(ctx, group, member, acks).await {
        out.entry(key).or_default().ack = Some(match result {
            Ok(()) => (0, None),
            Err(e) => share_error(&e),
        });
    }
    out
}

/// Releases what the member of a closed session holds on its partitions, on the shards
/// that own them.
pub async fn release(ctx: &Ctx, session: ShareSession) {
    let meta = ctx.shard.metadata.snapshot();
    let mut by_shard: BTreeMap<usize, Vec<(TopicPartition, Uuid)>> = BTreeMap::new();
    for (topic_id, partition) in &session.partitions {
        let Some(t) = meta.topic_by_id(*topic_id) else {
            continue;
        };
        let tp = TopicPartition {
            topic: t.name.as_str().into(),
            partition: *partition,
        };
        by_shard
            .entry(ctx.shard.owner_of(&tp.topic, *partition))
            .or_default()
            .push((tp, *topic_id));
    }
    let calls = by_shard.into_iter().map(|(shard, partitions)| {
        let (group, member) = (session.group.clone(), session.member.clone());
        async move {
            let (tx, rx) = oneshot::channel();
            let message = ShardMessage::Share(ShareRequest::Release {
                group,
                member,
                partitions,
                reply: tx,
            });
            ctx.shard.peers.call(shard, message, rx).await;
        }
    });
    futures::future::join_all(calls).await;
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn acknowledgement_batches_are_checked_before_they_go_anywhere() {
        let ok = ack_batches([(0, 3, vec![1]), (4, 5, vec![2, 3])], false).unwrap();
        assert_eq!(ok.len(), 2);
        assert!(ack_batches([(3, 2, vec![1])], false).is_err());
        assert!(ack_batches([(0, 3, vec![1]), (3, 4, vec![1])], false).is_err());
        assert!(ack_batches([(0, 0, vec![9])], false).is_err());
        assert!(
            ack_batches([(0, 0, vec![4])], false).is_err(),
            "RENEW needs v2"
        );
        assert!(ack_batches([(0, 0, vec![4])], true).is_ok());
        assert!(ack_batches([(0, 0, vec![])], false).is_err());
    }
}
