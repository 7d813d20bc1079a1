//! Helpers shared by the storage tests: an executor per test and batch construction.

#![allow(dead_code)]

use corelog_storage::batch::{batches, BatchHeader};
use corelog_storage::batch_builder::{BatchBuilder, Record};
use corelog_storage::{Durability, LogConfig};

/// Runs the future made by `f` on a fresh glommio executor on a thread of its own (the
/// way a shard runs). A new thread each time: glommio keeps per-thread reactor state, and
/// a second executor on the same thread fails direct-I/O reads with EOPNOTSUPP.
pub fn run<G, F, T>(f: G) -> T
where
    G: FnOnce() -> F + Send + 'static,
    F: std::future::Future<Output = T> + 'static,
    T: Send + 'static,
{
    glommio::LocalExecutorBuilder::default()
        .spawn(f)
        .expect("glommio executor (io_uring) must start")
        .join()
        .expect("executor thread")
}

/// A batch of `count` records whose values encode (`tag`, index) and whose timestamps are
/// `base_ts + index`.
pub fn batch(tag: u32, count: usize, value_len: usize, base_ts: i64) -> Vec<u8> {
    let mut b = BatchBuilder::new(base_ts);
    for i in 0..count {
        let mut value = vec![0u8; value_len.max(8)];
        value[..4].copy_from_slice(&tag.to_be_bytes());
        value[4..8].copy_from_slice(&(i as u32).to_be_bytes());
        let key = format!("k{tag}-{i}");
        b.push(&Record {
            key: Some(key.as_bytes()),
            value: Some(&value),
            headers: &[("h", Some(b"v"))],
            timestamp_delta: i as i64,
        });
    }
    b.build()
}

pub fn small_config(segment_bytes: u64) -> LogConfig {
    LogConfig {
        segment_bytes,
        index_interval_bytes: 256,
        tail_cache_bytes: 8 * 1024,
        durability: Durability::AckAll,
        ..LogConfig::default()
    }
}

/// Headers of every batch in `bytes`, asserting they frame exactly.
pub fn headers(bytes: &[u8]) -> Vec<BatchHeader> {
    batches(bytes)
        .map(|r| r.expect("served bytes are whole batches").0)
        .collect()
}

/// Descriptors this process holds now.
pub fn open_descriptors() -> usize {
    std::fs::read_dir("/proc/self/fd").map_or(0, |d| d.count())
}
