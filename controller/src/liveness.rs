//! The active controller's watch over brokers: who heartbeats, who is fenced.
//!
//! Heartbeats are not logged: only the active controller keeps them, in memory, and
//! only what they decide is committed — `FenceBroker` for a broker silent for the session
//! timeout, `UnfenceBroker` for a fenced broker that heartbeats in its current epoch and
//! has applied the log up to its own registration (so it knows every partition it holds).
//! A newly elected controller has heard nobody yet; it gives every unfenced broker one
//! session timeout from its election before fencing it.
//!
//! The first controller of a new cluster also names the cluster (`InitCluster`).

use crate::command::Command;
use crate::node_state::{self as node, Liveness, Shared};
use crate::rpc::Heartbeat;
use crate::state_machine::Proposal;
use std::sync::Arc;
use std::time::{Duration, Instant};
use uuid::Uuid;

/// How often the active controller checks its brokers.
const CHECK_INTERVAL: Duration = Duration::from_millis(250);

pub(crate) fn heard(shared: &Shared, hb: &Heartbeat) {
    let mut l = shared.liveness.lock().unwrap_or_else(|p| p.into_inner());
    l.heard
        .insert(hb.broker, (Instant::now(), hb.epoch, hb.applied));
}

/// Runs for as long as the node does; acts only while the node leads.
pub(crate) async fn lead(shared: Arc<Shared>) {
    let mut tick = tokio::time::interval(CHECK_INTERVAL);
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        tick.tick().await;
        let term = shared.raft.metrics().borrow().current_term;
        let decisions = {
            let mut l = shared.liveness.lock().unwrap_or_else(|p| p.into_inner());
            if !node::is_leader(&shared) {
                *l = Liveness::default();
                continue;
            }
            if l.leading.map(|(t, _)| t) != Some(term) {
                l.leading = Some((term, Instant::now()));
                l.heard.clear();
            }
            decide(&l, &shared)
        };
        for command in decisions {
            let proposal = Proposal {
                id: Uuid::new_v4(),
                command,
            };
            if let Err(e) = node::write_local(&shared, proposal.clone()).await {
                tracing::debug!(error = %e, command = ?proposal.command, "liveness decision not committed");
            } else {
                tracing::info!(command = ?proposal.command, "liveness");
            }
        }
    }
}

fn decide(l: &Liveness, shared: &Shared) -> Vec<Command> {
    let Some((_, since)) = l.leading else {
        return Vec::new();
    };
    let now = Instant::now();
    let timeout = shared.config.session_timeout;
    let image = shared.sm.image();
    let mut out = Vec::new();
    if image.cluster_id.is_none() {
        out.push(Command::InitCluster {
            cluster_id: shared
                .config
                .initial_cluster_id
                .clone()
                .unwrap_or_else(|| Uuid::new_v4().simple().to_string()),
        });
    }
    for b in image.brokers.values() {
        let heard = l.heard.get(&b.id).filter(|(_, epoch, _)| *epoch == b.epoch);
        let recent = heard.is_some_and(|(at, _, _)| now.duration_since(*at) < timeout);
        if !b.fenced && !recent && now.duration_since(since) >= timeout {
            out.push(Command::FenceBroker {
                id: b.id,
                epoch: b.epoch,
            });
        }
        if b.fenced && recent && heard.is_some_and(|(_, _, applied)| *applied >= b.epoch) {
            out.push(Command::UnfenceBroker {
                id: b.id,
                epoch: b.epoch,
            });
        }
    }
    out
}
