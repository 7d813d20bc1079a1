//! The active controller's watch over brokers: who heartbeats, who is fenced.
//!
//! Heartbeats are not logged: only the active controller keeps them, in memory, and
//! only what they decide is committed — `FenceBroker` for a broker silent for the session
//! timeout, `UnfenceBroker` for a fenced broker that heartbeats in its current epoch and
//! has applied the log up to its own registration (so it knows every partition it holds)
//! and is not in controlled shutdown (a broker that is stopping stays fenced until it
//! registers again, as a new incarnation); a heartbeat that may unfence a broker wakes the
//! check at once, and the broker sends it as soon as it has caught up. A newly elected
//! controller has heard nobody
//! yet; it gives every unfenced broker one session timeout from its election before
//! fencing it.
//!
//! The first controller of a new cluster also names the cluster (`InitCluster`).

use crate::command::Command;
use crate::image::BrokerRegistration;
use crate::node_state::{self as node, Liveness, Shared};
use crate::rpc::Heartbeat;
use crate::state_machine::Proposal;
use std::sync::Arc;
use std::time::{Duration, Instant};
use uuid::Uuid;

/// How often the active controller checks its brokers.
const CHECK_INTERVAL: Duration = Duration::from_millis(250);

pub(crate) fn heard(shared: &Shared, hb: &Heartbeat) {
    {
        let mut l = shared.liveness.lock().unwrap_or_else(|p| p.into_inner());
        l.heard
            .insert(hb.broker, (Instant::now(), hb.epoch, hb.applied));
        if let Some(disk) = hb.disk {
            l.disk.insert(hb.broker, disk);
        }
    }
    // A fenced registration that is caught up is unfenced now, not at the next check.
    let unfencing = shared.sm.image().broker(hb.broker).is_some_and(|b| {
        b.fenced && !b.shutting_down && b.epoch == hb.epoch && hb.applied >= b.epoch
    });
    if unfencing {
        shared.liveness_wake.notify_one();
    }
}

/// Runs for as long as the node does; acts only while the node leads.
pub(crate) async fn lead(shared: Arc<Shared>) {
    let mut tick = tokio::time::interval(CHECK_INTERVAL);
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        tokio::select! {
            _ = tick.tick() => {}
            () = shared.liveness_wake.notified() => {}
        }
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
    out.extend(
        image
            .brokers
            .values()
            .filter_map(|b| decide_broker(b, l.heard.get(&b.id), now, since, timeout)),
    );
    out
}

/// What to do about one broker, last `heard` (when, in which epoch, having applied what),
/// when this node has led since `leading_since`: fence an unfenced broker not heard in
/// its epoch for `timeout`; unfence a fenced broker heard recently in its epoch that has
/// applied its own registration — never one in controlled shutdown, which stays fenced
/// until it registers again (apply refuses that too, but it is not proposed).
fn decide_broker(
    b: &BrokerRegistration,
    heard: Option<&(Instant, u64, u64)>,
    now: Instant,
    leading_since: Instant,
    timeout: Duration,
) -> Option<Command> {
    let heard = heard.filter(|(_, epoch, _)| *epoch == b.epoch);
    let recent = heard.is_some_and(|(at, _, _)| now.duration_since(*at) < timeout);
    let (id, epoch) = (b.id, b.epoch);
    if !b.fenced && !recent && now.duration_since(leading_since) >= timeout {
        return Some(Command::FenceBroker { id, epoch });
    }
    let caught_up = heard.is_some_and(|(_, _, applied)| *applied >= b.epoch);
    if b.fenced && !b.shutting_down && recent && caught_up {
        return Some(Command::UnfenceBroker { id, epoch });
    }
    None
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::image::Endpoint;

    fn broker(fenced: bool, shutting_down: bool) -> BrokerRegistration {
        BrokerRegistration {
            id: 1,
            incarnation: Uuid::from_u128(1),
            epoch: 7,
            endpoint: Endpoint {
                host: "h".into(),
                port: 1,
            },
            controller_addr: String::new(),
            rack: None,
            fenced,
            shutting_down,
        }
    }

    #[test]
    fn fences_the_silent_and_unfences_the_caught_up_but_never_one_shutting_down() {
        let timeout = Duration::from_secs(10);
        let since = Instant::now();
        let now = since + Duration::from_secs(60);
        let fresh = (now, 7, 7);
        let decide = |b: &BrokerRegistration, heard: Option<&(Instant, u64, u64)>| {
            decide_broker(b, heard, now, since, timeout)
        };
        let fence = Some(Command::FenceBroker { id: 1, epoch: 7 });
        let unfence = Some(Command::UnfenceBroker { id: 1, epoch: 7 });
        assert_eq!(decide(&broker(false, false), None), fence);
        // Heard, but in another epoch (an earlier incarnation): silent.
        assert_eq!(decide(&broker(false, false), Some(&(now, 6, 7))), fence);
        assert_eq!(decide(&broker(false, false), Some(&fresh)), None);
        assert_eq!(decide(&broker(true, false), Some(&fresh)), unfence);
        // Not caught up with its own registration yet.
        assert_eq!(decide(&broker(true, false), Some(&(now, 7, 6))), None);
        assert_eq!(decide(&broker(true, true), Some(&fresh)), None);
        assert_eq!(decide(&broker(true, true), None), None);
        // A new controller gives everyone a session timeout first.
        assert_eq!(
            decide_broker(&broker(false, false), None, since, since, timeout),
            None
        );
    }
}
