//! The syncer task: one `fdatasync` of the active segment whenever a waiter or the
//! durability setting asks for one. A sync covers everything written when it was issued
//! (group commit), and writes go on while it runs.
//!
//! Invariant: `synced_offset` only grows and never passes `written_offset`.

use super::{storage_err, PartitionLog, DESCRIPTOR_RETRY};
use crate::context::Stage;
use crate::file_cache::is_out_of_descriptors;
use std::rc::Rc;
use std::time::Duration;

impl PartitionLog {
    /// Group commit: whenever a waiter wants a sync (or the interval has passed with
    /// unsynced data), one `fdatasync` of the active segment covers everything written
    /// when it was issued. It runs beside the flusher, so writes — and acks=1 produces —
    /// never wait behind a sync.
    pub(super) async fn syncer(log: Rc<PartitionLog>) {
        let runtime = log.context.runtime.clone();
        let mut last_sync = runtime.now();
        loop {
            let (file, target) = loop {
                // Read each round: `flush.ms` may be altered while the log is open.
                let interval = Duration::from_millis(log.config.borrow().sync_period_ms());
                let listener = log.sync_work.listen();
                {
                    let st = log.state.borrow();
                    if st.closed {
                        return;
                    }
                    let dirty = st.written_offset > st.synced_offset;
                    let wanted = st.sync_wanted > st.synced_offset;
                    if dirty && (wanted || runtime.since(last_sync) >= interval) {
                        // Read together: every offset below `target` is in this file or
                        // in a sealed (already synced) segment.
                        break (st.active_file.clone(), st.written_offset);
                    }
                    if !dirty {
                        // Nothing to sync: the flusher wakes us after its next write, so
                        // an idle log never wakes on the timer (`flush.ms` may be 1).
                        drop(st);
                        listener.await;
                        continue;
                    }
                }
                let due = interval.saturating_sub(runtime.since(last_sync));
                futures_lite::future::or(listener, runtime.sleep(due)).await;
            };
            let started = runtime.now();
            let opened = match file.open().await {
                Ok(f) => f,
                Err(e) if is_out_of_descriptors(&e) => {
                    // Nothing is lost by waiting: the data is written, only its sync is
                    // late (and so are the acks=all produces that wait for it).
                    runtime.sleep(DESCRIPTOR_RETRY).await;
                    continue;
                }
                Err(e) => {
                    log.fail(storage_err(&log.dir, e));
                    return;
                }
            };
            if let Err(e) = file.sync_data(&opened).await {
                log.fail(storage_err(&log.dir, e));
                return;
            }
            drop(opened);
            last_sync = runtime.now();
            log.context
                .observer
                .stage(Stage::Fsync, runtime.since(started));
            log.syncs.set(log.syncs.get() + 1);
            let mut st = log.state.borrow_mut();
            if target > st.synced_offset {
                st.synced_offset = target;
            }
            assert!(
                st.synced_offset <= st.written_offset,
                "nothing is synced before it is written"
            );
            drop(st);
            log.progress.notify(usize::MAX);
        }
    }
}
