//! Splitting a request's partitions by owning shard and gathering the answers.
//!
//! Every partition-level API follows the same shape: tag each partition with the slot
//! its answer goes to, group by owning shard, send one mesh message per shard (all
//! shards in parallel), and put each answer back in its slot. A shard that does not
//! answer (shutting down) leaves its slots `None`; the caller picks the error code.

use futures::channel::oneshot;
use shards::mesh::{Reply, ShardMessage};
use shards::routing::ShardId;
use shards::shard::Shard;
use std::rc::Rc;

/// Where an answer goes: (topic index, partition index) in the request.
pub type Slot = (usize, usize);

pub struct PerShard<I> {
    lists: Vec<Vec<(Slot, I)>>,
}

impl<I> PerShard<I> {
    pub fn new(shard_count: usize) -> Self {
        PerShard {
            lists: (0..shard_count).map(|_| Vec::new()).collect(),
        }
    }

    pub fn push(&mut self, shard: ShardId, slot: Slot, item: I) {
        assert!(shard < self.lists.len(), "routing returns a valid shard");
        if let Some(list) = self.lists.get_mut(shard) {
            list.push((slot, item));
        }
    }

    /// One message per shard with items, built by `make`; answers come back with their
    /// slots, in no particular order.
    pub async fn call<O, M: Into<ShardMessage>>(
        self,
        shard: &Rc<Shard>,
        make: impl Fn(Vec<I>, Reply<Vec<O>>) -> M,
    ) -> Vec<(Slot, Option<O>)> {
        self.call_in_turn(shard, make, ()).await
    }

    /// As [`call`](Self::call), but `turn` is dropped as soon as every message is queued
    /// on its shard, before the answers are awaited (see `kafka::produce_order`).
    pub async fn call_in_turn<O, T, M: Into<ShardMessage>>(
        self,
        shard: &Rc<Shard>,
        make: impl Fn(Vec<I>, Reply<Vec<O>>) -> M,
        turn: T,
    ) -> Vec<(Slot, Option<O>)> {
        let mut asked = Vec::new();
        for (target, list) in self.lists.into_iter().enumerate() {
            if list.is_empty() {
                continue;
            }
            let (slots, items): (Vec<Slot>, Vec<I>) = list.into_iter().unzip();
            let (tx, rx) = oneshot::channel();
            let sent = shard.peers.tell(target, make(items, tx)).await;
            asked.push((slots, sent.then_some(rx)));
        }
        drop(turn);
        let mut out = Vec::new();
        for (slots, rx) in asked {
            let answers = match rx {
                Some(rx) => rx.await.unwrap_or_default(),
                None => Vec::new(),
            };
            let mut answers = answers.into_iter();
            for slot in slots {
                out.push((slot, answers.next()));
            }
        }
        out
    }
}
