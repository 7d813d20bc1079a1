//! Helpers shared by the storage tests: an executor per test and batch construction.

#![allow(dead_code)]

use corelog_storage::batch::{batches, BatchHeader};
use corelog_storage::batch_builder::{BatchBuilder, Record};
use corelog_storage::{Durability, LogConfig, PartitionLog};

pub use corelog_storage::test_executor::run;

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

/// A batch of `count` records from idempotent producer `pid` at `epoch`, sequences from
/// `seq`, timestamps from `base_ts`, no keys.
pub fn idem_at(pid: i64, epoch: i16, seq: i32, count: usize, base_ts: i64) -> Vec<u8> {
    let mut b = BatchBuilder::new(base_ts).producer(pid, epoch, seq);
    for i in 0..count {
        let value = format!("p{pid}-s{}", i64::from(seq) + i as i64);
        b.push(&Record {
            key: None,
            value: Some(value.as_bytes()),
            headers: &[],
            timestamp_delta: i as i64,
        });
    }
    b.build()
}

/// [`idem_at`] at timestamp 1,000.
pub fn idem(pid: i64, epoch: i16, seq: i32, count: usize) -> Vec<u8> {
    idem_at(pid, epoch, seq, count, 1_000)
}

/// Everything readable from the log start to the written end, as whole batches.
pub async fn read_all(log: &PartitionLog) -> Vec<u8> {
    let mut out = Vec::new();
    let mut at = log.log_start_offset();
    while at < log.written_offset() {
        let r = log.read(at, 1 << 20, i64::MAX).await.expect("read");
        let Some(last) = headers(&r.records).last().copied() else {
            break;
        };
        out.extend_from_slice(&r.records);
        at = last.last_offset() + 1;
    }
    out
}

/// A copy of a partition directory (a crash image when taken while the log is open: no
/// snapshot or index written at close).
pub fn copy_dir(from: &std::path::Path, to: &std::path::Path) {
    std::fs::create_dir_all(to).expect("mkdir");
    for e in std::fs::read_dir(from).expect("dir") {
        let p = e.expect("entry").path();
        std::fs::copy(&p, to.join(p.file_name().expect("name"))).expect("copy");
    }
}
