//! Runs a unit test's future on a glommio executor of its own (the engine's I/O needs
//! one), on a thread of its own, and hands back what it returns; fails the test if the
//! future panics.

pub(crate) fn run<F, T>(f: impl FnOnce() -> F + Send + 'static) -> T
where
    F: std::future::Future<Output = T> + 'static,
    T: Send + 'static,
{
    glommio::LocalExecutorBuilder::default()
        .spawn(f)
        .expect("executor")
        .join()
        .expect("join")
}
