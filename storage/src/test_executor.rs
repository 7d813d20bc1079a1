//! The one glommio test executor of the workspace's tests: runs a test's future on a
//! fresh glommio executor on a thread of its own (the way a shard runs) and hands back
//! what it returns; the test fails if the future panics or the executor cannot start.
//!
//! A new thread each time: glommio keeps per-thread reactor state, and a second
//! executor on the same thread fails direct-I/O reads with EOPNOTSUPP. Tests only; it is
//! public so that the other crates' tests share it.

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
