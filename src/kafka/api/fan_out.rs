//! Splitting a request's partitions by owning shard and gathering the answers: the one
//! place every partition-level API (produce, fetch, list_offsets,
//! offset_for_leader_epoch, delete_records, describe_producers, …) does it.
//!
//! A handler walks its request in order and gives each partition an answer: either one
//! decided here ([`FanOut::refuse`], e.g. after [`leader_check`]) or one its owning shard
//! completes ([`FanOut::ask`]). [`FanOut::call`] then sends one mesh message per shard,
//! all shards in parallel, and fills each shard's answers into their partitions.
//!
//! Invariants: the answers come back in request order, one per partition asked or
//! refused, whatever order the shards answer in; a partition whose shard does not answer
//! (shutting down) is answered NOT_LEADER_OR_FOLLOWER; a shard is sent a message only
//! when it owns a partition asked.

use super::Ctx;
use crate::kafka::error_code;
use corelog_shards::mesh::{OffsetsOutput, PartitionError, ProduceOutput, Reply, ShardMessage};
use corelog_shards::metadata::ClusterMetadata;
use corelog_shards::routing::ShardId;
use corelog_shards::shard::Shard;
use futures::channel::oneshot;
use kafka_protocol::protocol::StrBytes;
use kafka_protocol::ResponseError;
use std::collections::HashMap;
use std::rc::Rc;

/// A partition's entry in a response: what the fan-out needs to answer it with an error.
pub trait PartitionAnswer {
    fn set_error(&mut self, error: ResponseError);

    /// The owning shard could not serve the partition (an answer type may say more than
    /// the code, e.g. which records were rejected).
    fn failed(&mut self, e: &PartitionError) {
        self.set_error(error_code::partition(e));
    }
}

/// What a shard answers for one partition: a result, alone or wrapped.
pub trait ShardAnswer {
    type Found;
    fn into_result(self) -> Result<Self::Found, PartitionError>;
}

impl<T> ShardAnswer for Result<T, PartitionError> {
    type Found = T;
    fn into_result(self) -> Self {
        self
    }
}

impl ShardAnswer for ProduceOutput {
    type Found = corelog_shards::mesh::ProduceAck;
    fn into_result(self) -> Result<Self::Found, PartitionError> {
        self.result
    }
}

impl ShardAnswer for OffsetsOutput {
    type Found = corelog_shards::mesh::FoundOffset;
    fn into_result(self) -> Result<Self::Found, PartitionError> {
        self.result
    }
}

/// Whether this broker leads `topic`-`partition`; the error code to answer when not.
pub fn leader_check(
    ctx: &Ctx,
    meta: &ClusterMetadata,
    topic: &str,
    partition: i32,
) -> Result<(), ResponseError> {
    meta.check_leader(ctx.config.node_id, topic, partition)
        .map_err(|e| error_code::not_served(&e))
}

/// Which partitions a request names more than once. Kafka answers each such partition
/// INVALID_REQUEST where one lookup may be costly (reading the log, listing thousands of
/// producers), so that a request cannot multiply them.
pub struct NamedOnce<'r> {
    named: HashMap<(&'r str, i32), usize>,
}

impl<'r> NamedOnce<'r> {
    /// Counts the (topic, partition) pairs of a request, in any order.
    pub fn count(partitions: impl IntoIterator<Item = (&'r str, i32)>) -> Self {
        let mut named = HashMap::new();
        for key in partitions {
            *named.entry(key).or_insert(0usize) += 1;
        }
        NamedOnce { named }
    }

    /// Whether the request names `topic`-`partition` exactly once.
    pub fn once(&self, topic: &str, partition: i32) -> bool {
        self.named.get(&(topic, partition)).copied().unwrap_or(0) == 1
    }
}

/// A partition sent to its owning shard: where its answer goes and what was asked.
pub struct Asked<I> {
    /// (topic index, partition index) in the request.
    pub slot: (usize, usize),
    pub owner: ShardId,
    pub input: I,
}

/// One request's answers `R`, in request order, and what its partitions ask their
/// owning shards (`I`).
pub struct FanOut<'a, R, I> {
    ctx: &'a Ctx,
    answers: Vec<Vec<R>>,
    asked: Vec<Asked<I>>,
}

impl<'a, R: PartitionAnswer, I> FanOut<'a, R, I> {
    /// For a request of `topics` topics.
    pub fn new(ctx: &'a Ctx, topics: usize) -> Self {
        FanOut {
            ctx,
            answers: Vec::with_capacity(topics),
            asked: Vec::new(),
        }
    }

    /// Starts the answers of the request's next topic, which names `partitions`.
    pub fn next_topic(&mut self, partitions: usize) {
        self.answers.push(Vec::with_capacity(partitions));
    }

    /// Answers the current topic's next partition here, as `answer` is.
    pub fn answer(&mut self, answer: R) {
        self.current().push(answer);
    }

    /// Answers the current topic's next partition here, with `error`.
    pub fn refuse(&mut self, mut answer: R, error: ResponseError) {
        answer.set_error(error);
        self.answer(answer);
    }

    /// Answers the current topic's next partition, `topic`-`partition`, once its owning
    /// shard has answered `input`.
    pub fn ask(&mut self, topic: &str, partition: i32, answer: R, input: I) {
        let owner = self.ctx.shard.owner_of(topic, partition);
        let topic_index = self.answers.len().saturating_sub(1);
        let answers = self.current();
        let slot = (topic_index, answers.len());
        answers.push(answer);
        self.asked.push(Asked { slot, owner, input });
    }

    fn current(&mut self) -> &mut Vec<R> {
        debug_assert!(!self.answers.is_empty(), "next_topic comes first");
        if self.answers.is_empty() {
            self.answers.push(Vec::new());
        }
        let last = self.answers.len() - 1;
        &mut self.answers[last]
    }

    /// The partitions asked so far, in request order.
    pub fn asked(&self) -> &[Asked<I>] {
        &self.asked
    }

    /// Sends what was asked (one message per shard, built by `make`, all shards in
    /// parallel) and fills each answer found into its partition with `fill`; a failure
    /// goes to [`PartitionAnswer::failed`]. The answers, in request order.
    pub async fn call<O: ShardAnswer, M: Into<ShardMessage>>(
        self,
        make: impl Fn(Vec<I>, Reply<Vec<O>>) -> M,
        fill: impl FnMut(&mut R, O::Found),
    ) -> Vec<Vec<R>> {
        self.call_in_turn(make, (), fill).await
    }

    /// As [`call`](Self::call), but `turn` is dropped as soon as every message is queued
    /// on its shard, before the answers are awaited (see `kafka::produce_order`).
    pub async fn call_in_turn<O: ShardAnswer, T, M: Into<ShardMessage>>(
        self,
        make: impl Fn(Vec<I>, Reply<Vec<O>>) -> M,
        turn: T,
        mut fill: impl FnMut(&mut R, O::Found),
    ) -> Vec<Vec<R>> {
        let FanOut {
            ctx,
            mut answers,
            asked,
        } = self;
        let mut per_shard = PerShard::new(ctx.shard.shard_count());
        let mut slots = Vec::with_capacity(asked.len());
        for (i, a) in asked.into_iter().enumerate() {
            per_shard.push(a.owner, i, a.input);
            slots.push(a.slot);
        }
        for (i, found) in per_shard.call_in_turn(&ctx.shard, make, turn).await {
            let Some(answer) = slots
                .get(i)
                .and_then(|(t, p)| answers.get_mut(*t).and_then(|parts| parts.get_mut(*p)))
            else {
                continue;
            };
            match found.map(ShardAnswer::into_result) {
                Some(Ok(found)) => fill(answer, found),
                Some(Err(e)) => answer.failed(&e),
                None => answer.set_error(ResponseError::NotLeaderOrFollower),
            }
        }
        answers
    }

    /// For requests that ask the same partitions more than once (fetch's long poll):
    /// sends each asked partition's `input` to its owner (one message per shard, built by
    /// `make`) and returns the answers in [`asked`](Self::asked) order, `None` where a
    /// shard did not answer.
    pub async fn gather<J, O, M: Into<ShardMessage>>(
        &self,
        input: impl Fn(&I) -> J,
        make: impl Fn(Vec<J>, Reply<Vec<O>>) -> M,
    ) -> Vec<Option<O>> {
        let mut per_shard = PerShard::new(self.ctx.shard.shard_count());
        for (i, a) in self.asked.iter().enumerate() {
            per_shard.push(a.owner, i, input(&a.input));
        }
        let mut out: Vec<Option<O>> = self.asked.iter().map(|_| None).collect();
        for (i, found) in per_shard.call(&self.ctx.shard, make).await {
            if let Some(slot) = out.get_mut(i) {
                *slot = found;
            }
        }
        out
    }

    /// Sends to each owner the asked partitions `input` picks (by position in
    /// [`asked`](Self::asked) order; `None` leaves one out) and completes when the first
    /// shard answers. `false`, at once, when no partition was picked.
    pub async fn first_answer<J, M: Into<ShardMessage>>(
        &self,
        input: impl Fn(usize, &I) -> Option<J>,
        make: impl Fn(Vec<J>, Reply<()>) -> M,
    ) -> bool {
        let mut per_shard = PerShard::new(self.ctx.shard.shard_count());
        for (i, a) in self.asked.iter().enumerate() {
            if let Some(j) = input(i, &a.input) {
                per_shard.push(a.owner, i, j);
            }
        }
        per_shard.first_answer(&self.ctx.shard, make).await
    }

    /// The answers, in request order, and what was asked, in request order.
    pub fn into_parts(self) -> (Vec<Vec<R>>, Vec<Asked<I>>) {
        (self.answers, self.asked)
    }
}

/// Items grouped by owning shard, each with the key its answer comes back with.
struct PerShard<I> {
    lists: Vec<Vec<(usize, I)>>,
}

impl<I> PerShard<I> {
    fn new(shard_count: usize) -> Self {
        PerShard {
            lists: (0..shard_count).map(|_| Vec::new()).collect(),
        }
    }

    fn push(&mut self, shard: ShardId, key: usize, item: I) {
        assert!(shard < self.lists.len(), "routing returns a valid shard");
        if let Some(list) = self.lists.get_mut(shard) {
            list.push((key, item));
        }
    }

    /// One message per shard with items, built by `make`; answers come back with their
    /// keys, in no particular order.
    async fn call<O, M: Into<ShardMessage>>(
        self,
        shard: &Rc<Shard>,
        make: impl Fn(Vec<I>, Reply<Vec<O>>) -> M,
    ) -> Vec<(usize, Option<O>)> {
        self.call_in_turn(shard, make, ()).await
    }

    /// As [`call`](Self::call), but `turn` is dropped as soon as every message is queued
    /// on its shard, before the answers are awaited (see `kafka::produce_order`).
    async fn call_in_turn<O, T, M: Into<ShardMessage>>(
        self,
        shard: &Rc<Shard>,
        make: impl Fn(Vec<I>, Reply<Vec<O>>) -> M,
        turn: T,
    ) -> Vec<(usize, Option<O>)> {
        let mut asked = Vec::new();
        for (target, list) in self.lists.into_iter().enumerate() {
            if list.is_empty() {
                continue;
            }
            let (keys, items): (Vec<usize>, Vec<I>) = list.into_iter().unzip();
            let (tx, rx) = oneshot::channel();
            let sent = shard.peers.tell(target, make(items, tx)).await;
            asked.push((keys, sent.then_some(rx)));
        }
        drop(turn);
        let mut out = Vec::new();
        for (keys, rx) in asked {
            let answers = match rx {
                Some(rx) => rx.await.unwrap_or_default(),
                None => Vec::new(),
            };
            let mut answers = answers.into_iter();
            for key in keys {
                out.push((key, answers.next()));
            }
        }
        out
    }

    /// One message per shard with items, built by `make`; completes when the first shard
    /// answers (or is found gone). `false`, at once, when there are no items.
    async fn first_answer<M: Into<ShardMessage>>(
        self,
        shard: &Rc<Shard>,
        make: impl Fn(Vec<I>, Reply<()>) -> M,
    ) -> bool {
        let calls: Vec<_> = self
            .lists
            .into_iter()
            .enumerate()
            .filter(|(_, list)| !list.is_empty())
            .map(|(target, list)| {
                let items = list.into_iter().map(|(_, item)| item).collect();
                let (tx, rx) = oneshot::channel();
                let msg = make(items, tx);
                let shard = shard.clone();
                Box::pin(async move {
                    shard.peers.call(target, msg, rx).await;
                })
            })
            .collect();
        if calls.is_empty() {
            return false;
        }
        futures::future::select_all(calls).await;
        true
    }
}

/// A response's endpoint of a broker (Fetch and Produce each have their own type).
pub trait NodeEndpointOf: Default {
    fn set(&mut self, node_id: i32, host: &str, port: u16, rack: Option<&str>);
}

macro_rules! node_endpoint_of {
    ($($t:ty),*) => {$(
        impl NodeEndpointOf for $t {
            fn set(&mut self, node_id: i32, host: &str, port: u16, rack: Option<&str>) {
                self.node_id = kafka_protocol::messages::BrokerId(node_id);
                self.host = StrBytes::from_string(host.to_string());
                self.port = i32::from(port);
                self.rack = rack.map(|r| StrBytes::from_string(r.to_string()));
            }
        }
    )*};
}

node_endpoint_of!(
    kafka_protocol::messages::fetch_response::NodeEndpoint,
    kafka_protocol::messages::produce_response::NodeEndpoint
);

/// The endpoints of the leaders named in NOT_LEADER_OR_FOLLOWER answers (KIP-951).
/// Each by its address on `listener`, the one the request came in on.
pub fn node_endpoints<E: NodeEndpointOf>(
    meta: &ClusterMetadata,
    leaders: &std::collections::BTreeSet<i32>,
    listener: &str,
) -> Vec<E> {
    leaders
        .iter()
        .filter_map(|id| meta.broker(*id))
        .filter_map(|b| {
            let (host, port) = b.endpoint_on(listener)?;
            let mut e = E::default();
            e.set(b.id, host, port, b.rack.as_deref());
            Some(e)
        })
        .collect()
}
