//! The active controller's watch over brokers: who heartbeats, who is fenced.
//!
//! Heartbeats are not logged: every voter keeps the last one of each broker in memory
//! (brokers heartbeat to all voters, `heartbeats`), and only what the active controller
//! decides is committed — `FenceBroker` for a broker silent for the session timeout,
//! `UnfenceBroker` for a fenced broker that heartbeats in its current epoch and has
//! applied the log up to its own registration (so it knows every partition it holds) and
//! is not in controlled shutdown (a broker that is stopping stays fenced until it
//! registers again, as a new incarnation); a heartbeat that may unfence a broker wakes the
//! check at once, and the broker sends it as soon as it has caught up.
//!
//! A newly elected controller judges a broker it heard as a follower by that broker's own
//! silence, once a short grace has passed (one heartbeat call timeout and two intervals:
//! long enough for every live broker that can reach it to be heard again, should its table
//! be stale because it was itself cut off). So a broker that died with the old controller
//! is fenced a session timeout after its last heartbeat, as any other dead broker is, not
//! a session timeout after the election. A broker it never heard in its current epoch
//! (this node started after that, or the broker heartbeats only to the leader) gets one
//! session timeout from the election before it is fenced.
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
                l.leading = None;
                continue;
            }
            if l.leading.map(|(t, _)| t) != Some(term) {
                l.leading = Some((term, Instant::now()));
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
    let clock = Clock {
        now: Instant::now(),
        leading_since: since,
        timeout: shared.config.session_timeout,
        grace: grace(shared.config.heartbeat_interval),
    };
    let image = shared.sm.image();
    let mut out = Vec::new();
    if image.cluster_id.is_none() {
        out.push(Command::InitCluster {
            cluster_id: shared
                .config
                .initial_cluster_id
                .clone()
                .unwrap_or_else(|| Uuid::new_v4().simple().to_string()),
            features: shared.config.features.bootstrap(),
        });
    }
    out.extend(
        image
            .brokers
            .values()
            .filter_map(|b| decide_broker(b, l.heard.get(&b.id), &clock)),
    );
    out
}

/// The times one round of decisions is made against.
struct Clock {
    now: Instant,
    /// When this node's current term as leader began.
    leading_since: Instant,
    /// The broker session timeout.
    timeout: Duration,
    /// How long after its election this node trusts the silences in its table.
    grace: Duration,
}

/// How long one heartbeat call may take: one interval, and never under half a second
/// (a loaded two-core machine answers a 100 ms interval late without anything being
/// wrong, and each timeout costs a reconnection).
pub(crate) fn call_timeout(interval: Duration) -> Duration {
    interval.max(Duration::from_millis(500))
}

/// The grace a new controller gives the table it kept as a follower: a live broker that
/// can reach it has been heard within one call timeout and one interval (`heartbeats`),
/// plus one interval of slack.
fn grace(heartbeat_interval: Duration) -> Duration {
    call_timeout(heartbeat_interval) + 2 * heartbeat_interval
}

/// What to do about one broker, last `heard` (when, in which epoch, having applied
/// what): fence an unfenced broker silent in its epoch for the session timeout — judged
/// by its own silence once the grace after the election has passed, or, if this node has
/// not heard it in that epoch, a whole session timeout after the election; unfence a
/// fenced broker heard recently in its epoch that has applied its own registration —
/// never one in controlled shutdown, which stays fenced until it registers again (apply
/// refuses that too, but it is not proposed).
fn decide_broker(
    b: &BrokerRegistration,
    heard: Option<&(Instant, u64, u64)>,
    clock: &Clock,
) -> Option<Command> {
    let heard = heard.filter(|(_, epoch, _)| *epoch == b.epoch);
    let recent = heard.is_some_and(|(at, _, _)| clock.now.duration_since(*at) < clock.timeout);
    let led_for = clock.now.duration_since(clock.leading_since);
    let judged = led_for
        >= if heard.is_some() {
            clock.grace
        } else {
            clock.timeout
        };
    let (id, epoch) = (b.id, b.epoch);
    if !b.fenced && !recent && judged {
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

    #[test]
    fn a_heartbeat_call_waits_one_interval_but_never_under_half_a_second() {
        assert_eq!(call_timeout(Duration::from_secs(2)), Duration::from_secs(2));
        assert_eq!(
            call_timeout(Duration::from_millis(100)),
            Duration::from_millis(500)
        );
    }
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
            listeners: Vec::new(),
            controller_addr: String::new(),
            rack: None,
            fenced,
            shutting_down,
            supported_features: None,
            log_dirs: Vec::new(),
            offline_dirs: Default::default(),
        }
    }

    fn clock(since: Instant, now: Instant) -> Clock {
        Clock {
            now,
            leading_since: since,
            timeout: Duration::from_secs(10),
            grace: Duration::from_secs(2),
        }
    }

    #[test]
    fn fences_the_silent_and_unfences_the_caught_up_but_never_one_shutting_down() {
        let since = Instant::now();
        let now = since + Duration::from_secs(60);
        let fresh = (now, 7, 7);
        let decide = |b: &BrokerRegistration, heard: Option<&(Instant, u64, u64)>| {
            decide_broker(b, heard, &clock(since, now))
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
    }

    /// A broker that died with the old controller is fenced a session timeout after its
    /// own last heartbeat, which the new controller heard as a follower — not a session
    /// timeout after the election.
    #[test]
    fn a_new_controller_fences_by_the_silence_it_heard_as_a_follower() {
        let died = Instant::now();
        let elected = died + Duration::from_secs(2);
        let last = (died, 7, 7);
        let fence = Some(Command::FenceBroker { id: 1, epoch: 7 });
        let at = |after_death: u64| clock(elected, died + Duration::from_secs(after_death));
        // Before its session timeout has passed: not yet.
        assert_eq!(
            decide_broker(&broker(false, false), Some(&last), &at(9)),
            None
        );
        // A session timeout after its last heartbeat, 8 s into the new term.
        assert_eq!(
            decide_broker(&broker(false, false), Some(&last), &at(10)),
            fence
        );
        // Silent long before the election: fenced once the grace has passed, not before
        // (a table kept while this node was cut off is refreshed by then).
        let long_silent = (died, 7, 7);
        let elected_late = died + Duration::from_secs(30);
        let c = |after: u64| clock(elected_late, elected_late + Duration::from_secs(after));
        assert_eq!(
            decide_broker(&broker(false, false), Some(&long_silent), &c(1)),
            None
        );
        assert_eq!(
            decide_broker(&broker(false, false), Some(&long_silent), &c(2)),
            fence
        );
        // Never heard in its epoch: a whole session timeout from the election.
        assert_eq!(decide_broker(&broker(false, false), None, &c(9)), None);
        assert_eq!(decide_broker(&broker(false, false), None, &c(10)), fence);
    }

    #[test]
    fn the_grace_covers_a_call_timeout_and_two_intervals() {
        assert_eq!(grace(Duration::from_secs(2)), Duration::from_secs(6));
        assert_eq!(
            grace(Duration::from_millis(100)),
            Duration::from_millis(700)
        );
    }
}
