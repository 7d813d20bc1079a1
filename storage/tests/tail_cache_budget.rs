//! The shard-wide tail-cache budget over many real partition logs: however many
//! partitions are open and written, their caches together stay within the shard budget;
//! closing partitions gives the others a larger share; evicted data is still read back
//! from disk.

mod common;

use common::*;
use corelog_storage::tail_cache_budget::TailCacheBudget;
use corelog_storage::LogContext;
use corelog_storage::{AckLevel, LogConfig, PartitionLog};
use std::rc::Rc;

const PARTITION_MAX_BYTES: usize = 64 * 1024;
const SHARD_BYTES: u64 = 512 * 1024;

fn config() -> LogConfig {
    LogConfig {
        tail_cache_bytes: PARTITION_MAX_BYTES,
        ..small_config(1 << 20)
    }
}

async fn append_acked(log: &PartitionLog, bytes: &[u8]) {
    let t = log.append(bytes, 0).expect("append");
    log.wait(t, AckLevel::All).await.expect("ack");
}

fn held(logs: &[Rc<PartitionLog>]) -> usize {
    logs.iter().map(|l| l.tail_cache_held_bytes()).sum()
}

#[test]
fn many_partitions_stay_within_the_shard_budget() {
    let dir = tempfile::tempdir().expect("tempdir");
    let root = dir.path().to_path_buf();
    run(move || async move {
        let budget = TailCacheBudget {
            shard_bytes: SHARD_BYTES,
            partition_max_bytes: PARTITION_MAX_BYTES,
        };
        let mut logs: Vec<Rc<PartitionLog>> = Vec::new();
        // 32 partitions: the even share (16 KiB) is below the per-partition 64 KiB.
        for p in 0..32 {
            let log =
                PartitionLog::open(root.join(format!("t-{p}")), config(), LogContext::system())
                    .await
                    .expect("open");
            logs.push(log);
            budget.apply(logs.iter().map(|l| &**l));
            assert!(held(&logs) as u64 <= SHARD_BYTES);
        }
        // Each partition gets ~40 KiB written: more than its 16 KiB share.
        for (p, log) in logs.iter().enumerate() {
            for i in 0..10 {
                append_acked(log, &batch(p as u32 * 100 + i, 4, 1000, 1_000)).await;
                assert!(held(&logs) as u64 <= SHARD_BYTES);
                assert!(log.tail_cache_held_bytes() <= budget.share(logs.len()));
            }
            assert!(
                log.tail_cache_held_bytes() > 0,
                "the newest batches are cached"
            );
        }
        let all_open = held(&logs);
        assert!(all_open as u64 <= SHARD_BYTES, "{all_open} > {SHARD_BYTES}");

        // Everything is still readable: what the cache evicted comes from disk.
        for (p, log) in logs.iter().enumerate() {
            let out = log.read(0, 1 << 20, i64::MAX).await.expect("read");
            let hs = headers(&out.records);
            assert_eq!(hs.first().map(|h| h.base_offset), Some(0), "partition {p}");
            assert_eq!(out.end_offset, 40);
        }

        // Close all but four: their share grows back to the per-partition limit, and
        // new writes fill it.
        for log in logs.drain(4..) {
            log.close().await;
        }
        budget.apply(logs.iter().map(|l| &**l));
        assert_eq!(budget.share(logs.len()), PARTITION_MAX_BYTES);
        for (p, log) in logs.iter().enumerate() {
            for i in 0..20 {
                append_acked(log, &batch(9000 + p as u32 * 100 + i, 4, 1000, 2_000)).await;
            }
            assert!(log.tail_cache_held_bytes() > 16 * 1024);
            assert!(log.tail_cache_held_bytes() <= PARTITION_MAX_BYTES);
        }
        assert!(held(&logs) as u64 <= SHARD_BYTES);
        for log in &logs {
            log.close().await;
        }
    });
}
