//! Time and background tasks for the engine: glommio's on the broker's shards, or the
//! simulator's ([`SimTime`]), which decides when time passes and which task runs next.
//!
//! Everything in this crate and in `corelog-partition` that reads the monotonic clock,
//! waits a while or starts a task of its own goes through the [`Runtime`] its
//! `LogContext` holds, so that one seed replays one run exactly: in the simulator no
//! timer is the kernel's and no task is started behind its back.
//!
//! The glommio case is a match and the same calls as before (a [`Sleep`] is a glommio
//! `Timer`, no allocation). The simulator's time stands still while any task can run; its
//! driver moves it to the next deadline ([`SimTime::advance_to`]) once none can.
//!
//! Invariants of [`SimTime`]: time never goes back; a timer fires (its waker is woken)
//! exactly once, when time reaches its deadline, timers of one deadline in the order they
//! were set; a sleep dropped before its deadline leaves no timer behind.

use std::cell::{Cell, RefCell};
use std::collections::BTreeMap;
use std::future::Future;
use std::pin::Pin;
use std::rc::Rc;
use std::task::{Context, Poll, Waker};
use std::time::{Duration, Instant};

/// A task the simulator runs.
pub type SimTask = Pin<Box<dyn Future<Output = ()>>>;

/// The clock and task spawner of an owner's logs.
#[derive(Clone, Default)]
pub enum Runtime {
    /// The shard's glommio executor and the system's monotonic clock.
    #[default]
    Glommio,
    /// The simulator's time and tasks.
    Sim(SimTime),
}

impl Runtime {
    /// The monotonic clock.
    pub fn now(&self) -> Instant {
        match self {
            Runtime::Glommio => Instant::now(),
            Runtime::Sim(t) => t.now(),
        }
    }

    /// How long since `earlier` on the monotonic clock.
    pub fn since(&self, earlier: Instant) -> Duration {
        self.now().saturating_duration_since(earlier)
    }

    /// Completes after `d`.
    pub fn sleep(&self, d: Duration) -> Sleep {
        match self {
            Runtime::Glommio => Sleep::Glommio(glommio::timer::Timer::new(d)),
            Runtime::Sim(t) => Sleep::Sim(t.sleep_until(t.now() + d)),
        }
    }

    /// Runs `task` in the background, on this thread.
    pub fn spawn(&self, task: impl Future<Output = ()> + 'static) {
        match self {
            Runtime::Glommio => {
                glommio::spawn_local(task).detach();
            }
            Runtime::Sim(t) => t.spawn(Box::pin(task)),
        }
    }

    /// Lets other tasks run if this one has run long enough (glommio's preemption
    /// check); the simulator's tasks are never preempted.
    pub async fn yield_if_needed(&self) {
        if let Runtime::Glommio = self {
            glommio::yield_if_needed().await;
        }
    }
}

/// [`Runtime::sleep`]'s future.
pub enum Sleep {
    Glommio(glommio::timer::Timer),
    Sim(SimSleep),
}

impl Future for Sleep {
    type Output = ();

    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<()> {
        match self.get_mut() {
            Sleep::Glommio(t) => Pin::new(t).poll(cx).map(|_| ()),
            Sleep::Sim(s) => Pin::new(s).poll(cx),
        }
    }
}

/// The simulator's clock: monotonic time that moves only when its driver says, the
/// wall clock that goes with it, its timers and the spawner of its tasks. Cheap to clone:
/// clones share the clock.
#[derive(Clone)]
pub struct SimTime(Rc<SimInner>);

struct SimInner {
    /// The monotonic instant the run started at; its time is `start + elapsed`.
    start: Instant,
    elapsed: Cell<Duration>,
    /// The wall clock at the start, in milliseconds since the Unix epoch.
    wall_start_ms: i64,
    /// Pending timers by (deadline, order set).
    timers: RefCell<BTreeMap<(Duration, u64), Waker>>,
    next_timer: Cell<u64>,
    spawner: Box<dyn Fn(SimTask)>,
}

impl SimTime {
    /// A clock at wall time `wall_start_ms`, whose tasks go to `spawner` (the
    /// simulator's executor).
    pub fn new(wall_start_ms: i64, spawner: impl Fn(SimTask) + 'static) -> SimTime {
        SimTime(Rc::new(SimInner {
            start: Instant::now(),
            elapsed: Cell::new(Duration::ZERO),
            wall_start_ms,
            timers: RefCell::default(),
            next_timer: Cell::new(0),
            spawner: Box::new(spawner),
        }))
    }

    pub fn now(&self) -> Instant {
        self.0.start + self.0.elapsed.get()
    }

    /// How long the run has lasted.
    pub fn elapsed(&self) -> Duration {
        self.0.elapsed.get()
    }

    /// The wall clock: the start's plus the time elapsed.
    pub fn now_ms(&self) -> i64 {
        self.0.wall_start_ms + self.0.elapsed.get().as_millis() as i64
    }

    pub fn sleep_until(&self, deadline: Instant) -> SimSleep {
        SimSleep {
            time: self.clone(),
            deadline: deadline.saturating_duration_since(self.0.start),
            timer: None,
        }
    }

    pub fn spawn(&self, task: SimTask) {
        (self.0.spawner)(task)
    }

    /// The earliest deadline of a pending timer.
    pub fn next_deadline(&self) -> Option<Instant> {
        self.0
            .timers
            .borrow()
            .keys()
            .next()
            .map(|(d, _)| self.0.start + *d)
    }

    /// Moves time to `to` (never back) and wakes every timer due by then, earliest first.
    pub fn advance_to(&self, to: Instant) {
        let to = to.saturating_duration_since(self.0.start);
        if to > self.0.elapsed.get() {
            self.0.elapsed.set(to);
        }
        let now = self.0.elapsed.get();
        loop {
            let due = {
                let mut timers = self.0.timers.borrow_mut();
                match timers.first_key_value() {
                    Some((&(deadline, _), _)) if deadline <= now => timers.pop_first(),
                    _ => None,
                }
            };
            match due {
                Some((_, waker)) => waker.wake(),
                None => break,
            }
        }
    }
}

/// A simulated sleep: ready once the clock reaches its deadline.
pub struct SimSleep {
    time: SimTime,
    /// Since the clock's start.
    deadline: Duration,
    /// Its pending timer, once polled.
    timer: Option<(Duration, u64)>,
}

impl Future for SimSleep {
    type Output = ();

    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<()> {
        let me = self.get_mut();
        let inner = &me.time.0;
        if inner.elapsed.get() >= me.deadline {
            if let Some(key) = me.timer.take() {
                inner.timers.borrow_mut().remove(&key);
            }
            return Poll::Ready(());
        }
        let key = *me.timer.get_or_insert_with(|| {
            let n = inner.next_timer.get();
            inner.next_timer.set(n + 1);
            (me.deadline, n)
        });
        inner.timers.borrow_mut().insert(key, cx.waker().clone());
        Poll::Pending
    }
}

impl Drop for SimSleep {
    fn drop(&mut self) {
        if let Some(key) = self.timer.take() {
            self.time.0.timers.borrow_mut().remove(&key);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::atomic::{AtomicUsize, Ordering};
    use std::sync::Arc;
    use std::task::Wake;

    struct Count(AtomicUsize);

    impl Wake for Count {
        fn wake(self: Arc<Self>) {
            self.0.fetch_add(1, Ordering::SeqCst);
        }
    }

    #[test]
    fn sleeps_end_when_the_driver_moves_time_past_them_in_deadline_order() {
        let t = SimTime::new(1_000, |_| {});
        let start = t.now();
        let count = Arc::new(Count(AtomicUsize::new(0)));
        let waker = Waker::from(count.clone());
        let mut cx = Context::from_waker(&waker);
        let mut long = Box::pin(t.sleep_until(start + Duration::from_millis(50)));
        let mut short = Box::pin(t.sleep_until(start + Duration::from_millis(10)));
        assert!(long.as_mut().poll(&mut cx).is_pending());
        assert!(short.as_mut().poll(&mut cx).is_pending());
        assert_eq!(t.next_deadline(), Some(start + Duration::from_millis(10)));
        t.advance_to(start + Duration::from_millis(10));
        assert_eq!(
            count.0.load(Ordering::SeqCst),
            1,
            "only the short one fired"
        );
        assert!(short.as_mut().poll(&mut cx).is_ready());
        assert!(long.as_mut().poll(&mut cx).is_pending());
        assert_eq!(t.now_ms(), 1_010);
        drop(long);
        assert_eq!(t.next_deadline(), None, "a dropped sleep leaves no timer");
        t.advance_to(start);
        assert_eq!(
            t.elapsed(),
            Duration::from_millis(10),
            "time never goes back"
        );
    }
}
