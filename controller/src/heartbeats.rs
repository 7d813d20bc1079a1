//! A broker's heartbeats, sent to every voter of the quorum, not only to the active
//! controller.
//!
//! Every voter keeps what it hears (`liveness::heard`), whether it leads or not, so a
//! voter elected after the active controller died knows when it last heard each broker:
//! a broker that died together with the old controller is fenced a session timeout
//! after its own last heartbeat, not a session timeout after the new election.
//!
//! Invariants: at most one heartbeat is in flight to each voter, so a voter that does
//! not answer neither delays the heartbeats to the others nor gathers calls behind it;
//! a heartbeat offered while one is in flight is not dropped but kept as that voter's
//! next one (only the newest is kept), and sent as soon as the call in flight ends — the
//! heartbeat that says a restarted broker has caught up may come a few milliseconds after
//! the first one, and dropping it would leave the broker fenced until the next interval;
//! each call is bounded by [`liveness::call_timeout`], so a voter that becomes reachable
//! again hears this broker within one call timeout and one interval, which is the grace
//! a newly elected controller gives the table it kept as a follower (`liveness`).

use crate::liveness;
use crate::network::PeerClient;
use crate::node_state::Shared;
use crate::rpc::{Heartbeat, Request};
use std::collections::HashMap;
use std::sync::{Arc, Mutex, PoisonError};

type NodeId = u64;

/// This broker's connections to the voters, one per voter at its current address.
#[derive(Default)]
pub(crate) struct Heartbeats {
    voters: HashMap<NodeId, Voter>,
}

struct Voter {
    addr: String,
    /// What is to be sent next, and whether a sender is running; the sender alone uses
    /// the client.
    outbox: Arc<Mutex<Outbox<Heartbeat>>>,
    client: Arc<tokio::sync::Mutex<PeerClient>>,
}

impl Heartbeats {
    /// Records `hb` on this node and offers it to every other voter: sent at once where
    /// no heartbeat is in flight, else right after the one that is; does not wait for
    /// the answers.
    pub fn send(&mut self, shared: &Shared, hb: Heartbeat) {
        liveness::heard(shared, &hb);
        let voters: Vec<(NodeId, String)> = {
            let metrics = shared.raft.metrics();
            let metrics = metrics.borrow();
            let membership = metrics.membership_config.membership();
            membership
                .voter_ids()
                .filter(|id| *id != shared.id)
                .filter_map(|id| membership.get_node(&id).map(|n| (id, n.addr.clone())))
                .collect()
        };
        self.voters
            .retain(|id, v| voters.iter().any(|(i, a)| i == id && *a == v.addr));
        let timeout = liveness::call_timeout(shared.config.heartbeat_interval);
        for (id, addr) in voters {
            let voter = self.voters.entry(id).or_insert_with(|| {
                let client = PeerClient::new(
                    id,
                    addr.clone(),
                    shared.cluster_id.clone(),
                    shared.config.security.clone(),
                )
                .reporting_to(shared.peer_health.clone());
                Voter {
                    addr,
                    outbox: Arc::default(),
                    client: Arc::new(tokio::sync::Mutex::new(client)),
                }
            });
            if !lock(&voter.outbox).offer(hb.clone()) {
                continue;
            }
            let outbox = voter.outbox.clone();
            let client = voter.client.clone();
            tokio::spawn(async move {
                let mut client = client.lock().await;
                loop {
                    // The guard is dropped here, before the call is awaited.
                    let Some(hb) = lock(&outbox).next() else {
                        return;
                    };
                    if let Err(e) = client.call(Request::Heartbeat(hb), timeout).await {
                        tracing::debug!(voter = id, error = %e, "heartbeat");
                    }
                }
            });
        }
    }
}

fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(PoisonError::into_inner)
}

/// One voter's heartbeats waiting to be sent: at most one, the newest, and whether a
/// sender is running. `offer` says when a sender must be started; the sender takes from
/// `next` until it is empty, and the same call that finds it empty ends the sender, so
/// no offer is left behind with no sender to take it.
#[derive(Debug)]
struct Outbox<T> {
    pending: Option<T>,
    sending: bool,
}

impl<T> Default for Outbox<T> {
    fn default() -> Self {
        Self {
            pending: None,
            sending: false,
        }
    }
}

impl<T> Outbox<T> {
    /// Keeps `item` as the next to send (replacing an older one not yet sent); true when
    /// no sender is running, and the caller must start one.
    fn offer(&mut self, item: T) -> bool {
        self.pending = Some(item);
        !std::mem::replace(&mut self.sending, true)
    }

    /// The next item for the running sender, or `None`, which ends it.
    fn next(&mut self) -> Option<T> {
        debug_assert!(self.sending, "only a running sender takes from the outbox");
        let item = self.pending.take();
        self.sending = item.is_some();
        item
    }
}

#[cfg(test)]
mod tests {
    use super::Outbox;

    /// The heartbeat offered while another is in flight is the one sent next: a restarted
    /// broker's caught-up heartbeat, a few milliseconds after its first, is not lost.
    #[test]
    fn an_offer_while_sending_is_sent_next_and_only_the_newest_is_kept() {
        let mut out = Outbox::default();
        assert!(out.offer(1), "the first offer starts a sender");
        assert_eq!(out.next(), Some(1));
        // In flight: these wait, and only the newest is kept.
        assert!(!out.offer(2));
        assert!(!out.offer(3));
        assert_eq!(out.next(), Some(3));
        assert_eq!(out.next(), None, "the sender ends when nothing waits");
        assert!(
            out.offer(4),
            "an offer after the sender ended starts another"
        );
        assert_eq!(out.next(), Some(4));
    }
}
