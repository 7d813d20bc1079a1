//! The memory one shard lets its connections hold in request frames: Kafka's
//! `queued.max.request.bytes`, per shard here (`--queued-max-request-bytes`).
//!
//! A connection's reader takes a permit for a frame's declared size *before* it reads
//! the body, and the permit lives in the request's handler task, so it is given back
//! when the request has been handled (produce has copied its records into the log by
//! then; the frame's `Bytes` are dropped with the task). When the budget is spent,
//! readers wait for permits and read nothing more: back-pressure through TCP, the
//! client's bytes stay in the kernel's socket buffers. No frame is ever allocated
//! without its permit.
//!
//! A frame larger than the whole budget (possible when the budget is set below
//! `socket.request.max.bytes`) takes a permit for the whole budget: it waits until
//! nothing else holds memory and then runs alone. So the bound on frame bytes held by
//! one shard is `max(budget, socket.request.max.bytes)`; with the defaults (256 MiB
//! against 100 MiB) it is the budget.
//!
//! Invariants: permits held `<= budget` (glommio's `Semaphore` counts the units); the
//! permit is taken for the frame's full size up front, never grown afterwards, so two
//! half-read frames can never deadlock waiting for each other's memory; the semaphore
//! serves waiters in arrival order, so a large frame is not starved by small ones.
//!
//! Not here: response memory (responses are bounded by the in-flight bound per
//! connection and by the fetch limits in `limits.rs`). A client that declares a large
//! frame and trickles its body holds its permit until the connection's body timeout
//! (`--request-body-timeout-ms`, `connection.rs`) closes it.

use glommio::sync::{Semaphore, StaticPermit};
use std::rc::Rc;

pub struct RequestMemory {
    semaphore: Rc<Semaphore>,
    budget_bytes: u64,
}

/// Memory for one request frame, given back when dropped.
pub struct RequestMemoryPermit {
    _permit: StaticPermit,
}

impl RequestMemory {
    pub fn new(budget_bytes: u64) -> RequestMemory {
        assert!(budget_bytes > 0, "a zero budget would block every request");
        RequestMemory {
            semaphore: Rc::new(Semaphore::new(budget_bytes)),
            budget_bytes,
        }
    }

    /// Units a frame of `frame_bytes` takes: its size, clamped to the whole budget.
    fn units(&self, frame_bytes: usize) -> u64 {
        let units = u64::try_from(frame_bytes)
            .unwrap_or(u64::MAX)
            .min(self.budget_bytes);
        debug_assert!(units <= self.budget_bytes);
        units
    }

    /// Takes `frame_bytes` (clamped to the budget) if they are free now and nobody is
    /// waiting before us.
    pub fn try_acquire(&self, frame_bytes: usize) -> Option<RequestMemoryPermit> {
        let units = self.units(frame_bytes);
        self.semaphore
            .try_acquire_static_permit(units)
            .ok()
            .map(|p| RequestMemoryPermit { _permit: p })
    }

    /// Waits until `frame_bytes` (clamped to the budget) are free and takes them.
    /// `None` only if the semaphore was closed, which this module never does.
    pub async fn acquire(&self, frame_bytes: usize) -> Option<RequestMemoryPermit> {
        let units = self.units(frame_bytes);
        let p = self.semaphore.acquire_static_permit(units).await.ok()?;
        Some(RequestMemoryPermit { _permit: p })
    }

    /// Bytes not held by any frame now.
    pub fn available_bytes(&self) -> u64 {
        self.semaphore.available()
    }

    pub fn budget_bytes(&self) -> u64 {
        self.budget_bytes
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use corelog_storage::test_executor::run;
    use std::cell::Cell;
    use std::time::Duration;

    #[test]
    fn permits_bound_the_bytes_and_waiters_resume_on_release() {
        run(|| async {
            let m = Rc::new(RequestMemory::new(100));
            let a = m.try_acquire(60).expect("a");
            assert!(m.try_acquire(50).is_none());
            assert_eq!(m.available_bytes(), 40);
            let got = Rc::new(Cell::new(false));
            let (m2, got2) = (m.clone(), got.clone());
            let b = glommio::spawn_local(async move {
                let p = m2.acquire(50).await;
                got2.set(true);
                p
            });
            glommio::timer::sleep(Duration::from_millis(5)).await;
            assert!(!got.get(), "50 bytes are not free while 60 of 100 are held");
            drop(a);
            let b = b.await.expect("b");
            assert!(got.get());
            assert_eq!(m.available_bytes(), 50);
            drop(b);
            assert_eq!(m.available_bytes(), 100);
        });
    }

    #[test]
    fn a_frame_larger_than_the_budget_takes_all_of_it() {
        run(|| async {
            let m = RequestMemory::new(100);
            let big = m.acquire(1 << 30).await.expect("big");
            assert_eq!(m.available_bytes(), 0);
            drop(big);
            assert_eq!(m.available_bytes(), m.budget_bytes());
        });
    }
}
