//! Keeps one connection's produce requests reaching their partitions in the order the
//! connection read them.
//!
//! A connection has several requests in flight, each served by its own task, and a
//! produce request reaches a partition of another core through that core's mesh channel.
//! Normally the tasks send in the order they were spawned, because each sends on its
//! first poll; but a task can wait before sending (a full mesh channel, or the creation
//! of a topic its produce names), and then a later request of the same connection could
//! overtake it. For an idempotent producer that is an out-of-order sequence, for any
//! producer reordered records. So a produce handler takes its connection's turn before it
//! sends anything and gives it back once every message of its request is queued on its
//! target cores (not when the answers come back): the sends of one connection are
//! serialised, the appends and waits are not.
//!
//! Invariant: turns are granted in the order the handlers ask, and they ask in the order
//! the connection spawned them — glommio runs a task queue's new tasks first-in first-out
//! and a produce handler asks before its first other `.await`.

use glommio::sync::{Permit, Semaphore};

pub struct ProduceOrder {
    gate: Semaphore,
}

impl Default for ProduceOrder {
    fn default() -> Self {
        ProduceOrder {
            gate: Semaphore::new(1),
        }
    }
}

impl ProduceOrder {
    /// Waits for this request's turn to send; the turn passes on when the permit drops.
    /// `None` only if the gate was closed, which nothing does: the request then goes
    /// without ordering rather than failing.
    pub async fn turn(&self) -> Option<Permit<'_>> {
        self.gate.acquire_permit(1).await.ok()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use corelog_storage::test_executor::run;
    use std::cell::RefCell;
    use std::rc::Rc;

    #[test]
    fn turns_follow_spawn_order_even_when_a_holder_waits() {
        run(|| async {
            let order = Rc::new(ProduceOrder::default());
            let sent = Rc::new(RefCell::new(Vec::new()));
            let mut tasks = Vec::new();
            for i in 0..5u32 {
                let (order, sent) = (order.clone(), sent.clone());
                tasks.push(glommio::spawn_local(async move {
                    let _turn = order.turn().await;
                    if i == 0 {
                        // The first request waits (a full channel) while holding its turn.
                        glommio::timer::sleep(std::time::Duration::from_millis(20)).await;
                    }
                    sent.borrow_mut().push(i);
                }));
            }
            for t in tasks {
                t.await;
            }
            assert_eq!(*sent.borrow(), vec![0, 1, 2, 3, 4]);
        });
    }
}
