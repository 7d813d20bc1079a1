//! The engine on the simulator's disk (`fs::MemFs`): a log written, crashed and opened
//! again keeps every acknowledged batch, whatever the crash keeps of the rest, and what
//! it keeps is a prefix of what was written — on glommio, and on a plain single-threaded
//! executor under simulated time (`runtime::SimTime`), where one seed replays one run.

mod common;

use common::*;
use corelog_storage::batch::batches;
use corelog_storage::context::{Clock, NoObserver, SystemClock};
use corelog_storage::file_cache::FileCache;
use corelog_storage::fs::{Fs, MemFs};
use corelog_storage::runtime::{Runtime, SimTime};
use corelog_storage::{AckLevel, LogContext, PartitionLog};
use std::path::PathBuf;
use std::rc::Rc;

/// Where a stored batch's CRC starts (after base offset, length, leader epoch, magic).
const CRC_AT: usize = 17;

fn context(fs: &MemFs, runtime: &Runtime) -> LogContext {
    let clock: Rc<dyn Clock> = match runtime {
        Runtime::Sim(t) => Rc::new(t.clone()),
        Runtime::Glommio => Rc::new(SystemClock),
    };
    LogContext {
        clock,
        observer: Rc::new(NoObserver),
        files: FileCache::in_memory(64, fs.clone()),
        runtime: runtime.clone(),
    }
}

/// A small deterministic generator (xorshift64*), so a failure names its seed.
struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        self.0.wrapping_mul(0x2545_F491_4F6C_DD1D)
    }

    fn chance(&mut self, percent: u64) -> bool {
        self.next() % 100 < percent
    }
}

/// One run of `seed`: three lives of a log on `fs`, two ending in a crash, each checking
/// that what survived holds every acknowledged batch and is a prefix of what was written.
/// Returns what the run saw (batches kept per life), for replay checks.
async fn lives(seed: u64, mut fs: MemFs, runtime: Runtime) -> Vec<usize> {
    let dir = PathBuf::from("/data/t-0");
    let mut rng = Rng(seed.wrapping_mul(0x9E37_79B9_7F4A_7C15) | 1);
    let mut written: Vec<Vec<u8>> = Vec::new();
    let mut acked = 0usize;
    let mut trace = Vec::new();
    for life in 0..3 {
        let log = PartitionLog::open(dir.clone(), small_config(4096), context(&fs, &runtime))
            .await
            .expect("open");
        let survived = read_all(&log).await;
        let kept: Vec<&[u8]> = batches(&survived)
            .map(|b| &survived[b.expect("whole batches").1])
            .collect();
        assert!(
            kept.len() >= acked,
            "seed {seed}: {} batches kept, {acked} acknowledged",
            kept.len()
        );
        for (i, (got, sent)) in kept.iter().zip(&written).enumerate() {
            // From the CRC on a batch is as sent: the log sets only its base offset and
            // leader epoch.
            assert_eq!(got[CRC_AT..], sent[CRC_AT..], "seed {seed}: batch {i}");
        }
        let kept = kept.len();
        trace.push(kept);
        written.truncate(kept);
        acked = kept;
        if life == 2 {
            log.close().await;
            break;
        }
        for i in 0..(5 + rng.next() % 30) as usize {
            let b = batch(
                (written.len() + i) as u32,
                1 + (rng.next() % 8) as usize,
                40,
                1_000,
            );
            let ticket = log.append(&b, 0).expect("append");
            written.push(b);
            if rng.chance(30) {
                log.wait(ticket, AckLevel::All).await.expect("synced");
                acked = written.len();
            } else if rng.chance(30) {
                // Written, not synced (acks=1): a crash may keep any part of it.
                log.wait(ticket, AckLevel::Leader).await.expect("written");
            }
        }
        // The crash: the process dies (nothing it still tries reaches the disk), and the
        // disk keeps what was synced and any part of the rest.
        fs.freeze();
        log.close().await;
        let keep_ops = (rng.next() % 4) as usize;
        let mut keep = Rng(rng.next() | 1);
        fs.crash(keep_ops, |_, _| keep.chance(50));
        fs = fs.next_life();
    }
    assert!(fs.exists(&dir));
    trace
}

#[test]
fn a_crash_keeps_every_acknowledged_batch_and_a_prefix_of_the_rest() {
    for seed in 1..=200u64 {
        run(move || async move {
            lives(seed, MemFs::new(), Runtime::Glommio).await;
        });
    }
}

/// Runs `f` on a single-threaded executor under simulated time: whenever no task can
/// run, time moves to the next timer. Returns `f`'s output and the time it took.
fn simulate<T: 'static>(
    f: impl FnOnce(Runtime) -> std::pin::Pin<Box<dyn std::future::Future<Output = T>>>,
) -> (T, std::time::Duration) {
    use futures::executor::LocalPool;
    use futures::task::LocalSpawnExt;
    let mut pool = LocalPool::new();
    let spawner = pool.spawner();
    let time = SimTime::new(1_700_000_000_000, move |task| {
        spawner.spawn_local(task).expect("spawn");
    });
    let out = Rc::new(std::cell::RefCell::new(None));
    let put = out.clone();
    let main = f(Runtime::Sim(time.clone()));
    pool.spawner()
        .spawn_local(async move {
            *put.borrow_mut() = Some(main.await);
        })
        .expect("spawn");
    loop {
        pool.run_until_stalled();
        if let Some(v) = out.borrow_mut().take() {
            return (v, time.elapsed());
        }
        let next = time
            .next_deadline()
            .expect("stalled with no timer set: a deadlock");
        time.advance_to(next);
    }
}

#[test]
fn under_simulated_time_a_seed_replays_the_same_run() {
    for seed in 1..=50u64 {
        let first = simulate(move |rt| Box::pin(lives(seed, MemFs::new(), rt)));
        let again = simulate(move |rt| Box::pin(lives(seed, MemFs::new(), rt)));
        assert_eq!(first, again, "seed {seed}");
    }
}

/// The log cleaner on the simulator's disk: a pass keeps each key's last record, and a
/// crash right after it (nothing unsynced kept) leaves the cleaned log.
#[test]
fn compaction_runs_on_the_memory_disk_and_survives_a_crash() {
    use corelog_storage::batch_builder::{BatchBuilder, Record};
    use corelog_storage::compaction::cleaner::clean;
    use corelog_storage::config::CleanupPolicy;
    use corelog_storage::LogConfig;
    run(|| async {
        let fs = MemFs::new();
        let dir = PathBuf::from("/data/c-0");
        let config = LogConfig {
            segment_bytes: 2048,
            index_interval_bytes: 256,
            cleanup: CleanupPolicy {
                delete: false,
                compact: true,
            },
            min_compaction_lag_ms: 0,
            file_delete_delay_ms: 0,
            ..LogConfig::default()
        };
        let rt = Runtime::Glommio;
        let log = PartitionLog::open(dir.clone(), config.clone(), context(&fs, &rt))
            .await
            .expect("open");
        for i in 0..200u32 {
            let key = format!("k{}", i % 5);
            let value = format!("v{i}");
            let mut b = BatchBuilder::new(1_000);
            b.push(&Record {
                key: Some(key.as_bytes()),
                value: Some(value.as_bytes()),
                headers: &[],
                timestamp_delta: 0,
            });
            let t = log.append(&b.build(), 0).expect("append");
            log.wait(t, AckLevel::All).await.expect("synced");
        }
        // (key, offset) of every record.
        let values = |bytes: &[u8]| -> Vec<(String, i64)> {
            let mut out = Vec::new();
            for r in batches(bytes) {
                let range = r.expect("whole batches").1;
                corelog_storage::batch_filter::for_each_record(&bytes[range], |rec| {
                    let key = String::from_utf8_lossy(rec.key.unwrap_or_default()).into_owned();
                    out.push((key, rec.offset));
                })
                .expect("records");
            }
            out
        };
        let before = values(&read_all(&log).await);
        assert_eq!(before.len(), 200);
        let stats = clean(&log, 1 << 20, 2_000, i64::MAX, true, None)
            .await
            .expect("clean")
            .expect("a pass ran");
        assert!(stats.segments_rewritten >= 2, "{stats:?}");
        let after = values(&read_all(&log).await);
        assert!(
            after.len() < before.len(),
            "compaction removed superseded records"
        );
        for k in 0..5i64 {
            let last = (format!("k{k}"), 195 + k);
            assert!(
                after.contains(&last),
                "the last record of each key stays: {last:?}"
            );
        }
        fs.freeze();
        log.close().await;
        fs.crash(0, |_, _| false);
        let fs = fs.next_life();
        let log = PartitionLog::open(dir, config, context(&fs, &rt))
            .await
            .expect("reopen");
        assert_eq!(
            values(&read_all(&log).await),
            after,
            "the cleaned log survives"
        );
        log.close().await;
    });
}
