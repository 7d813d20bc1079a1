//! When the process has no descriptor left: the file cache gives half of its own back and
//! tries again; when even that finds none, a read fails with an error that says what ran
//! out, and a write waits (nothing acknowledged is lost, the log does not fail) until a
//! descriptor is free again.
//!
//! Its own test binary: it lowers RLIMIT_NOFILE, which is the whole process's.

mod common;

use common::*;
use corelog_storage::{AckLevel, FileCache, LogContext, PartitionLog, ReadError};
use nix::sys::resource::{getrlimit, setrlimit, Resource};
use std::time::Duration;

#[test]
fn running_out_of_descriptors_fails_reads_clearly_and_delays_writes() {
    let dir = tempfile::tempdir().expect("tempdir");
    let root = dir.path().to_path_buf();
    run(move || async move {
        let (soft, hard) = getrlimit(Resource::RLIMIT_NOFILE).expect("getrlimit");
        let config = corelog_storage::LogConfig {
            tail_cache_bytes: 0,
            ..small_config(1 << 20)
        };
        // A cache larger than what the process may open: the kernel's limit is hit first.
        let cache = FileCache::new(10_000);
        let context = LogContext {
            files: cache.clone(),
            ..LogContext::system()
        };
        let logs_n = 12;
        setrlimit(
            Resource::RLIMIT_NOFILE,
            open_descriptors() as u64 + 20,
            hard,
        )
        .expect("setrlimit");
        let mut logs = Vec::new();
        for i in 0..logs_n {
            let log =
                PartitionLog::open(root.join(format!("t-{i}")), config.clone(), context.clone())
                    .await
                    .expect("open under a low limit: the cache gives descriptors back");
            let t = log
                .append(&batch(i as u32, 2, 100, 1000), 0)
                .expect("append");
            log.wait(t, AckLevel::All).await.expect("acked");
            logs.push(log);
        }
        assert!(cache.stats().evictions > 0, "{:?}", cache.stats());

        // Take every descriptor left, and the cache's too.
        while cache.shed() > 0 {}
        glommio::timer::sleep(Duration::from_millis(20)).await;
        let mut hog = Vec::new();
        while let Ok(f) = std::fs::File::open("/dev/null") {
            hog.push(f);
        }
        assert_eq!(cache.stats().open, 0);
        let log = &logs[0];
        match log.read(0, 1 << 20, i64::MAX).await {
            Err(ReadError::Storage(e)) => {
                assert!(e.message.contains("out of file descriptors"), "{e}");
                assert!(e.out_of_descriptors);
            }
            other => panic!("a read without descriptors must fail clearly: {other:?}"),
        }
        assert!(cache.stats().exhausted > 0);
        // A write waits for a descriptor instead of failing the log.
        let t = log
            .append(&batch(50, 2, 100, 1000), 0)
            .expect("append is queued");
        let waited =
            futures_lite::future::or(async { Some(log.wait(t, AckLevel::All).await) }, async {
                glommio::timer::sleep(Duration::from_millis(300)).await;
                None
            })
            .await;
        assert!(
            waited.is_none(),
            "no write can complete without a descriptor"
        );
        assert!(log.failure().is_none(), "the log waits, it does not fail");
        drop(hog);
        log.wait(t, AckLevel::All)
            .await
            .expect("acked once descriptors are free");
        let out = log.read(0, 1 << 20, i64::MAX).await.expect("reads again");
        assert_eq!(headers(&out.records).len(), 2);
        for log in &logs {
            log.close().await;
        }
        setrlimit(Resource::RLIMIT_NOFILE, soft, hard).expect("restore");
    });
}
