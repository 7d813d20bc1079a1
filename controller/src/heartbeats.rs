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
//! each call is bounded by [`liveness::call_timeout`], so a voter that becomes reachable again
//! hears this broker within one call timeout and one interval, which is the grace a
//! newly elected controller gives the table it kept as a follower (`liveness`).

use crate::liveness;
use crate::network::PeerClient;
use crate::node_state::Shared;
use crate::rpc::{Heartbeat, Request};
use std::collections::HashMap;
use std::sync::Arc;
use tokio::sync::Mutex;

type NodeId = u64;

/// This broker's connections to the voters, one per voter at its current address.
#[derive(Default)]
pub(crate) struct Heartbeats {
    voters: HashMap<NodeId, (String, Arc<Mutex<PeerClient>>)>,
}

impl Heartbeats {
    /// Records `hb` on this node and sends it to every other voter whose previous
    /// heartbeat has been answered (or has failed); does not wait for the answers.
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
            .retain(|id, (addr, _)| voters.iter().any(|(v, a)| v == id && a == addr));
        let timeout = liveness::call_timeout(shared.config.heartbeat_interval);
        for (id, addr) in voters {
            let (_, client) = self.voters.entry(id).or_insert_with(|| {
                let client = PeerClient::new(
                    id,
                    addr.clone(),
                    shared.cluster_id.clone(),
                    shared.config.security.clone(),
                )
                .reporting_to(shared.peer_health.clone());
                (addr, Arc::new(Mutex::new(client)))
            });
            let Ok(mut client) = client.clone().try_lock_owned() else {
                continue;
            };
            let hb = hb.clone();
            tokio::spawn(async move {
                if let Err(e) = client.call(Request::Heartbeat(hb), timeout).await {
                    tracing::debug!(voter = id, error = %e, "heartbeat");
                }
            });
        }
    }
}
