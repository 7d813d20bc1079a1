//! What ShareFetch and ShareAcknowledge share (KIP-932): the share session of a
//! connection, the acknowledgements' route to the shards that own their partitions, and
//! the release of a closed session's records. It serves no API itself.
//!
//! A share session is Kafka's: a member opens it with epoch 0 (replacing the one it had),
//! names the partitions it reads (kept by the session, less those it forgets), and
//! numbers each next request 1, 2, … (after `i32::MAX`, 1 again); -1 closes it after its
//! acknowledgements, and what the member still holds on its partitions is released. A
//! session lives with its connection, as Kafka's ends when the connection closes (its
//! records are released then too). At most `MAX_SHARE_SESSIONS` are open on a broker
//! (Kafka's `group.share.max.share.sessions`): a further epoch 0 is
//! SHARE_SESSION_LIMIT_REACHED.
//!
//! Invariant: `OPEN_SESSIONS` counts the sessions held by connections of this broker;
//! a session is counted once from its opening to its close or its connection's end.

use super::Ctx;
use corelog_shards::mesh::{ShardMessage, ShareRequest};
use corelog_shards::routing::TopicPartition;
use corelog_shards::shard::share_requests::ShareAckInput;
use corelog_shards::share::leader::ShareError;
use corelog_shards::share::partition::{AckBatch, AckType};
use futures::channel::oneshot;
use kafka_protocol::ResponseError;
use std::cell::RefCell;
use std::collections::{BTreeMap, BTreeSet};
use std::sync::atomic::{AtomicUsize, Ordering};
use uuid::Uuid;

/// Kafka's `group.share.max.share.sessions` default.
pub const MAX_SHARE_SESSIONS: usize = 2000;

static OPEN_SESSIONS: AtomicUsize = AtomicUsize::new(0);

/// The epoch of a request that opens a session, and of one that closes it.
pub const OPEN_EPOCH: i32 = 0;
pub const CLOSE_EPOCH: i32 = -1;

/// One connection's share session.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ShareSession {
    pub group: String,
    pub member: String,
    /// The epoch the next request must carry.
    pub next_epoch: i32,
    /// The partitions the member reads through it: (topic id, partition).
    pub partitions: BTreeSet<(Uuid, i32)>,
}

/// The share session a connection holds, if any, and the turns of the connection's
/// share requests: a connection's requests are served concurrently, but one share
/// request's session step and acknowledgements must come after the previous one's, as
/// Kafka serves a connection's requests one at a time (an ACCEPT, then a close, must not
/// become a release, then a refused ACCEPT).
#[derive(Default)]
pub struct ShareSessionSlot {
    session: RefCell<Option<ShareSession>>,
    /// (the next ticket to hand out, the ticket whose turn it is).
    turns: std::cell::Cell<(u64, u64)>,
    turn_ended: event_listener::Event,
}

impl Drop for ShareSessionSlot {
    fn drop(&mut self) {
        if self.session.get_mut().is_some() {
            OPEN_SESSIONS.fetch_sub(1, Ordering::Relaxed);
        }
    }
}

/// A share request's turn on its connection's session, until dropped.
pub struct Turn<'a> {
    slot: &'a ShareSessionSlot,
    ticket: u64,
}

impl Turn<'_> {
    /// Whether a later share request of the connection waits for this one (a long
    /// poll then ends: the client has moved on).
    pub fn others_wait(&self) -> bool {
        self.slot.turns.get().0 > self.ticket + 1
    }
}

impl Drop for Turn<'_> {
    fn drop(&mut self) {
        let (next, _) = self.slot.turns.get();
        self.slot.turns.set((next, self.ticket + 1));
        self.slot.turn_ended.notify(usize::MAX);
    }
}

/// Why a request's session epoch is refused (its top-level error).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SessionError {
    NotFound,
    InvalidEpoch,
    LimitReached,
}

impl SessionError {
    pub fn code(self) -> i16 {
        match self {
            SessionError::NotFound => ResponseError::ShareSessionNotFound,
            SessionError::InvalidEpoch => ResponseError::InvalidShareSessionEpoch,
            SessionError::LimitReached => ResponseError::ShareSessionLimitReached,
        }
        .code()
    }
}

/// What a request's epoch does to the session `current` (pure): the session after it
/// (`None`: closed), and the session whose records are to be released (an older one
/// replaced is not: its records time out, as in Kafka). `fetch` says whether the request
/// is a ShareFetch (which may open a session) or a ShareAcknowledge (which may not).
pub fn step(
    current: Option<&ShareSession>,
    group: &str,
    member: &str,
    epoch: i32,
    fetch: bool,
) -> Result<Option<ShareSession>, SessionError> {
    let ours = current.filter(|s| s.group == group && s.member == member);
    match epoch {
        OPEN_EPOCH if fetch => Ok(Some(ShareSession {
            group: group.to_string(),
            member: member.to_string(),
            next_epoch: 1,
            partitions: BTreeSet::new(),
        })),
        OPEN_EPOCH => Err(SessionError::InvalidEpoch),
        CLOSE_EPOCH => match ours {
            Some(_) => Ok(None),
            None => Err(SessionError::NotFound),
        },
        e => match ours {
            None => Err(SessionError::NotFound),
            Some(s) if s.next_epoch != e => Err(SessionError::InvalidEpoch),
            Some(s) => {
                let mut next = s.clone();
                next.next_epoch = if e == i32::MAX { 1 } else { e + 1 };
                Ok(Some(next))
            }
        },
    }
}

impl ShareSessionSlot {
    /// Takes the next turn: call in request order, before anything waits, and hold the
    /// turn until the request is served.
    pub async fn turn(&self) -> Turn<'_> {
        let (next, serving) = self.turns.get();
        self.turns.set((next + 1, serving));
        let ticket = next;
        loop {
            if self.turns.get().1 == ticket {
                return Turn { slot: self, ticket };
            }
            let listener = self.turn_ended.listen();
            if self.turns.get().1 == ticket {
                return Turn { slot: self, ticket };
            }
            listener.await;
        }
    }

    pub fn get(&self) -> Option<ShareSession> {
        self.session.borrow().clone()
    }

    /// Applies a request's epoch; returns the session closed by it, if any.
    pub fn advance(
        &self,
        group: &str,
        member: &str,
        epoch: i32,
        fetch: bool,
    ) -> Result<Option<ShareSession>, SessionError> {
        let mut slot = self.session.borrow_mut();
        let next = step(slot.as_ref(), group, member, epoch, fetch)?;
        let opening = slot.is_none() && next.is_some();
        if opening && OPEN_SESSIONS.fetch_add(1, Ordering::Relaxed) >= MAX_SHARE_SESSIONS {
            OPEN_SESSIONS.fetch_sub(1, Ordering::Relaxed);
            return Err(SessionError::LimitReached);
        }
        if next.is_none() && slot.is_some() {
            OPEN_SESSIONS.fetch_sub(1, Ordering::Relaxed);
        }
        let closed = if next.is_none() { slot.take() } else { None };
        *slot = next;
        Ok(closed)
    }

    /// Adds and removes partitions of the open session.
    pub fn update(&self, add: impl IntoIterator<Item = (Uuid, i32)>, forget: &[(Uuid, i32)]) {
        if let Some(s) = self.session.borrow_mut().as_mut() {
            s.partitions.extend(add);
            for p in forget {
                s.partitions.remove(p);
            }
        }
    }

    /// The session, taken as its connection ends.
    pub fn take(&self) -> Option<ShareSession> {
        let taken = self.session.borrow_mut().take();
        if taken.is_some() {
            OPEN_SESSIONS.fetch_sub(1, Ordering::Relaxed);
        }
        taken
    }
}

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

    fn open() -> ShareSession {
        step(None, "g", "m", OPEN_EPOCH, true).unwrap().unwrap()
    }

    #[test]
    fn epochs_open_advance_and_close_a_session_as_kafkas_do() {
        let s = open();
        assert_eq!(s.next_epoch, 1);
        assert_eq!(
            step(Some(&s), "g", "m", 2, true),
            Err(SessionError::InvalidEpoch)
        );
        let s1 = step(Some(&s), "g", "m", 1, false).unwrap().unwrap();
        assert_eq!(s1.next_epoch, 2);
        assert_eq!(step(Some(&s1), "g", "m", -1, false), Ok(None));
        assert_eq!(step(None, "g", "m", 1, true), Err(SessionError::NotFound));
        assert_eq!(step(None, "g", "m", -1, true), Err(SessionError::NotFound));
        // Another member, or another group, has no session here.
        assert_eq!(
            step(Some(&s1), "g", "other", 2, true),
            Err(SessionError::NotFound)
        );
        // An acknowledgement cannot open a session.
        assert_eq!(
            step(None, "g", "m", 0, false),
            Err(SessionError::InvalidEpoch)
        );
        let mut late = s1.clone();
        late.next_epoch = i32::MAX;
        assert_eq!(
            step(Some(&late), "g", "m", i32::MAX, true)
                .unwrap()
                .unwrap()
                .next_epoch,
            1
        );
    }

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
