//! The simulated network between nodes (and clients): every message is late by a
//! random delay, may be lost, may arrive twice, and does not arrive at all while its
//! link is cut. Messages race each other, so concurrent ones arrive in any order.
//!
//! Node 0 is the clients' side: producers and consumers talk to the nodes through it.

use crate::rng::Rng;
use corelog_storage::runtime::Runtime;
use std::cell::RefCell;
use std::collections::BTreeSet;
use std::time::Duration;

/// How bad the network is.
#[derive(Debug, Clone, Copy)]
pub struct NetFaults {
    /// Percent of messages lost.
    pub loss: u64,
    /// Percent of messages delivered twice.
    pub duplicate: u64,
    /// The longest a message is late, in milliseconds.
    pub max_delay_ms: u64,
}

impl NetFaults {
    pub const NONE: NetFaults = NetFaults {
        loss: 0,
        duplicate: 0,
        max_delay_ms: 1,
    };
}

pub struct Net {
    runtime: Runtime,
    rng: RefCell<Rng>,
    faults: std::cell::Cell<NetFaults>,
    /// Cut links, as (lower id, higher id).
    cut: RefCell<BTreeSet<(i32, i32)>>,
}

/// What became of a message.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Delivery {
    Lost,
    Once,
    Twice,
}

impl Net {
    pub fn new(runtime: Runtime, rng: Rng, faults: NetFaults) -> Net {
        Net {
            runtime,
            rng: RefCell::new(rng),
            faults: std::cell::Cell::new(faults),
            cut: RefCell::default(),
        }
    }

    pub fn set_faults(&self, faults: NetFaults) {
        self.faults.set(faults);
    }

    fn link(a: i32, b: i32) -> (i32, i32) {
        (a.min(b), a.max(b))
    }

    pub fn cut(&self, a: i32, b: i32) {
        self.cut.borrow_mut().insert(Net::link(a, b));
    }

    pub fn heal(&self, a: i32, b: i32) {
        self.cut.borrow_mut().remove(&Net::link(a, b));
    }

    pub fn heal_all(&self) {
        self.cut.borrow_mut().clear();
    }

    pub fn is_cut(&self, a: i32, b: i32) -> bool {
        self.cut.borrow().contains(&Net::link(a, b))
    }

    /// Sends a message from `from` to `to`: waits out its delay, then says whether it
    /// arrived (and whether twice). A link cut when it would arrive loses it.
    pub async fn send(&self, from: i32, to: i32) -> Delivery {
        let f = self.faults.get();
        let (delay, lost, twice) = {
            let mut rng = self.rng.borrow_mut();
            (
                rng.between(0, f.max_delay_ms.max(1)),
                rng.chance(f.loss),
                rng.chance(f.duplicate),
            )
        };
        self.runtime.sleep(Duration::from_millis(delay)).await;
        if lost || self.is_cut(from, to) {
            Delivery::Lost
        } else if twice {
            Delivery::Twice
        } else {
            Delivery::Once
        }
    }
}
