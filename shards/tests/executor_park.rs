//! The vendored glommio never parks an executor with a woken task still queued (the
//! corelog patch in `vendor/glommio/src/executor/mod.rs`, `run_task_queues`; see
//! vendor/README.md). An executor whose preempt timer fires all the time must keep running
//! a task that sleeps in short steps: before the patch, a preemption noticed before any
//! queue ran was taken for "nothing to run", the executor slept in `io_uring_enter` with
//! the task's wake-up already consumed, and stayed asleep (broker start-ups hung on a
//! loaded machine).

use std::time::Duration;

#[test]
fn a_preempted_executor_keeps_running_its_woken_tasks() {
    let (done, finished) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        let ex = glommio::LocalExecutorBuilder::new(glommio::Placement::Unbound)
            .preempt_timer(Duration::from_micros(20))
            .make()
            .expect("an executor");
        ex.run(async {
            for _ in 0..5000 {
                glommio::timer::sleep(Duration::from_micros(100)).await;
            }
        });
        let _ = done.send(());
    });
    // 5,000 sleeps take a few seconds at most; a lost wake-up never ends.
    assert!(
        finished.recv_timeout(Duration::from_secs(60)).is_ok(),
        "the executor stopped running its task (parked with the task's wake-up consumed)"
    );
}
