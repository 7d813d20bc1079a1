//! Runs a unit test's future on a glommio executor of its own (the engine's I/O needs
//! one), and fails the test if the future panics.

pub(crate) fn run<F: std::future::Future<Output = ()> + 'static>(
    f: impl FnOnce() -> F + Send + 'static,
) {
    glommio::LocalExecutorBuilder::default()
        .spawn(f)
        .expect("executor")
        .join()
        .expect("join");
}
