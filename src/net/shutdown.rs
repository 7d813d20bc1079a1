//! The shard-local signal that stops accepting and closes connections.

use event_listener::Event;
use std::cell::Cell;

/// A shard-local shutdown flag that tasks can await.
#[derive(Default)]
pub struct ShutdownSignal {
    fired: Cell<bool>,
    event: Event,
}

impl ShutdownSignal {
    pub fn fire(&self) {
        self.fired.set(true);
        self.event.notify(usize::MAX);
    }

    pub async fn wait(&self) {
        loop {
            let l = self.event.listen();
            if self.fired.get() {
                return;
            }
            l.await;
        }
    }
}
