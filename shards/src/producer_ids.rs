//! The producer ids one shard hands out to idempotent producers (InitProducerId).
//!
//! Ids come in blocks of `PRODUCER_ID_BLOCK` from the controller, which persists each
//! block before handing it out: an id is never given out twice, by any shard, in any run
//! of the broker. A shard takes a new block only when its block is used up, one refill
//! at a time.

use crate::mesh::{AdminChange, Peers, TopicError, PRODUCER_ID_BLOCK};
use futures::channel::oneshot;
use glommio::sync::Semaphore;
use std::cell::RefCell;
use std::ops::Range;

pub struct ProducerIds {
    /// `[next, end)` of this shard's block.
    block: RefCell<Range<i64>>,
    /// One refill of `block` at a time.
    refill: Semaphore,
}

impl Default for ProducerIds {
    fn default() -> Self {
        ProducerIds {
            block: RefCell::new(0..0),
            refill: Semaphore::new(1),
        }
    }
}

impl ProducerIds {
    /// A producer id never handed out before, from this shard's block; a new block comes
    /// from the controller when it runs out.
    pub async fn allocate(&self, peers: &Peers) -> Result<i64, TopicError> {
        loop {
            if let Some(id) = self.block.borrow_mut().next() {
                return Ok(id);
            }
            let _refill = self.refill.acquire_permit(1).await;
            if !self.block.borrow().is_empty() {
                continue; // another request refilled it while this one waited
            }
            let (tx, rx) = oneshot::channel();
            let msg = AdminChange::AllocateProducerIds { reply: tx };
            let start = peers
                .call(crate::routing::ADMIN_SHARD, msg, rx)
                .await
                .unwrap_or_else(|| {
                    Err(TopicError::Storage("the controller is unavailable".into()))
                })?;
            debug_assert!(start >= 0, "producer ids are non-negative");
            *self.block.borrow_mut() = start..start + PRODUCER_ID_BLOCK;
        }
    }
}
