//! Property test: any sequence of appends, reads, segment rolls and restarts returns
//! exactly what was acknowledged, in order: the real log against a `Vec` model, checked
//! after every step.

mod common;

use common::*;
use corelog_storage::batch::{self, batches};
use corelog_storage::LogContext;
use corelog_storage::{AckLevel, PartitionLog};
use proptest::prelude::*;

#[derive(Debug, Clone)]
enum Op {
    /// Append `n` batches of `records` records with values of `len` bytes, in one request.
    Append {
        n: usize,
        records: usize,
        len: usize,
    },
    /// Read from the acknowledged batch at this index (modulo the count) with this limit.
    Read {
        at: usize,
        inside: usize,
        max_bytes: usize,
    },
    /// Close and reopen the log.
    Restart,
}

fn op() -> impl Strategy<Value = Op> {
    prop_oneof![
        6 => (1usize..3, 1usize..6, 1usize..700).prop_map(|(n, records, len)| Op::Append { n, records, len }),
        4 => (any::<usize>(), any::<usize>(), 1usize..6000).prop_map(|(at, inside, max_bytes)| Op::Read { at, inside, max_bytes }),
        1 => Just(Op::Restart),
    ]
}

/// One acknowledged batch as the model knows it: offsets and the exact stored bytes.
#[derive(Clone)]
struct Stored {
    base: i64,
    last: i64,
    bytes: Vec<u8>,
}

async fn check(ops: Vec<Op>, dir: std::path::PathBuf) -> Result<(), String> {
    // Tiny segments so that rolls happen constantly.
    let config = small_config(4096 * 2);
    let mut log = PartitionLog::open(dir.clone(), config.clone(), LogContext::system())
        .await
        .map_err(|e| e.to_string())?;
    let mut model: Vec<Stored> = Vec::new();
    let mut tag = 0u32;
    for op in ops {
        match op {
            Op::Append { n, records, len } => {
                let mut request = Vec::new();
                let mut parts = Vec::new();
                for _ in 0..n {
                    tag += 1;
                    let b = batch(tag, records, len, 1_000 + i64::from(tag));
                    parts.push(b.clone());
                    request.extend_from_slice(&b);
                }
                let t = log.append(&request, 0).map_err(|e| e.to_string())?;
                log.wait(t, AckLevel::All)
                    .await
                    .map_err(|e| e.to_string())?;
                let mut base = t.base_offset;
                let expected_base = model.last().map(|s| s.last + 1).unwrap_or(0);
                if base != expected_base {
                    return Err(format!("base offset {base}, expected {expected_base}"));
                }
                for mut b in parts {
                    batch::set_base_offset(&mut b, base);
                    batch::set_partition_leader_epoch(&mut b, 0);
                    let last = base + records as i64 - 1;
                    model.push(Stored {
                        base,
                        last,
                        bytes: b,
                    });
                    base = last + 1;
                }
            }
            Op::Read {
                at,
                inside,
                max_bytes,
            } => {
                if model.is_empty() {
                    continue;
                }
                let i = at % model.len();
                let s = &model[i];
                let offset = s.base + (inside % ((s.last - s.base + 1) as usize)) as i64;
                let r = log
                    .read(offset, max_bytes, i64::MAX)
                    .await
                    .map_err(|e| e.to_string())?;
                // Must be model batches i, i+1, ... j (whole, in order), at least batch i.
                let mut pos = 0usize;
                let mut k = i;
                for item in batches(&r.records) {
                    let (_, range) = item.map_err(|e| format!("served bytes do not frame: {e}"))?;
                    let want = model
                        .get(k)
                        .ok_or("served more batches than were written")?;
                    if r.records[range.clone()] != want.bytes[..] {
                        return Err(format!(
                            "batch at offset {} differs from what was acknowledged",
                            want.base
                        ));
                    }
                    pos = range.end;
                    k += 1;
                }
                if k == i {
                    return Err(format!("read at {offset} returned no batch"));
                }
                if pos != r.records.len() {
                    return Err("trailing bytes after the last whole batch".into());
                }
                if k > i + 1 && pos > max_bytes {
                    return Err(format!("{pos} bytes served for max_bytes {max_bytes}"));
                }
                let end = model.last().map(|s| s.last + 1).unwrap_or(0);
                if r.end_offset != end {
                    return Err(format!("high watermark {} != {end}", r.end_offset));
                }
            }
            Op::Restart => {
                log.close().await;
                log = PartitionLog::open(dir.clone(), config.clone(), LogContext::system())
                    .await
                    .map_err(|e| e.to_string())?;
                let end = model.last().map(|s| s.last + 1).unwrap_or(0);
                if log.written_offset() != end {
                    return Err(format!(
                        "after restart the log ends at {}, expected {end}",
                        log.written_offset()
                    ));
                }
            }
        }
    }
    log.close().await;
    Ok(())
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 24, max_shrink_iters: 64, ..ProptestConfig::default() })]
    #[test]
    fn log_returns_exactly_what_was_acknowledged(ops in proptest::collection::vec(op(), 1..60)) {
        let dir = tempfile::tempdir().expect("tempdir");
        let path = dir.path().join("t-0");
        let result = run(move || check(ops, path));
        prop_assert!(result.is_ok(), "{}", result.err().unwrap_or_default());
    }
}
