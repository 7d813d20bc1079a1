//! The broker's log filter for openraft's network noise: openraft logs a warning and an
//! error for every failed replication or vote call to an unreachable peer (every 500 ms
//! per peer, hundreds of thousands of lines a day while one voter is down). The
//! controller's network reports a peer's reachability itself (`PeerHealth`: once when
//! lost, at most once a minute while it lasts, and when back), so openraft's warnings and
//! errors whose fields carry a network error — [`PEER_UNREACHABLE`], openraft's own RPC
//! timeout, or the backoff that follows one — are dropped here. Every other openraft event passes, its storage errors
//! included, and nothing outside openraft is looked at.

use corelog_controller::network::PEER_UNREACHABLE;
use std::fmt;
use tracing::field::{Field, Visit};
use tracing::{Event, Level, Subscriber};
use tracing_subscriber::layer::{Context, Layer};

/// Drops openraft's reports of unreachable peers (see the module doc).
pub struct OpenraftPeerNoise;

/// Whether an openraft event's rendered field says a peer could not be reached: a
/// network error of the controller's client, openraft's own RPC timeout, or the backoff
/// its replication enters after an unreachable peer (logged every 500 ms too).
pub fn is_peer_network_error(text: &str) -> bool {
    text.contains(PEER_UNREACHABLE)
        || is_rpc_timeout(text)
        || text.contains("backoff mode: drain events")
}

/// The calls openraft makes to a peer, as its `RPCTypes` print.
const PEER_CALLS: [&str; 3] = ["Vote", "AppendEntries", "InstallSnapshot"];

/// openraft's `Timeout` of a call to a peer, displayed ("timeout after 500ms when Vote
/// 1->2") or debugged ("Timeout { action: Vote, .. }"). Other timeouts — a wait for a
/// metric, a storage operation — are not about a peer and pass.
fn is_rpc_timeout(text: &str) -> bool {
    PEER_CALLS.iter().any(|call| {
        (text.contains("timeout after ") && text.contains(&format!(" when {call} ")))
            || text.contains(&format!("Timeout {{ action: {call},"))
    })
}

impl<S: Subscriber> Layer<S> for OpenraftPeerNoise {
    fn event_enabled(&self, event: &Event<'_>, _ctx: Context<'_, S>) -> bool {
        let meta = event.metadata();
        if *meta.level() > Level::WARN || !meta.target().starts_with("openraft") {
            return true;
        }
        let mut seen = NetworkErrorField(false);
        event.record(&mut seen);
        !seen.0
    }
}

struct NetworkErrorField(bool);

impl Visit for NetworkErrorField {
    fn record_debug(&mut self, _field: &Field, value: &dyn fmt::Debug) {
        if !self.0 {
            self.0 = is_peer_network_error(&format!("{value:?}"));
        }
    }

    fn record_str(&mut self, _field: &Field, value: &str) {
        self.0 |= is_peer_network_error(value);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::{Arc, Mutex};
    use tracing_subscriber::prelude::*;

    /// Collects the messages of the events that reach it.
    struct Sink(Arc<Mutex<Vec<String>>>);

    impl<S: Subscriber> Layer<S> for Sink {
        fn on_event(&self, event: &Event<'_>, _ctx: Context<'_, S>) {
            struct Message(String);
            impl Visit for Message {
                fn record_debug(&mut self, field: &Field, value: &dyn fmt::Debug) {
                    if field.name() == "message" {
                        self.0 = format!("{value:?}");
                    }
                }
            }
            let mut m = Message(String::new());
            event.record(&mut m);
            self.0.lock().expect("sink").push(m.0);
        }
    }

    #[test]
    fn drops_openraft_network_errors_only() {
        let seen = Arc::new(Mutex::new(Vec::new()));
        let subscriber = tracing_subscriber::registry()
            .with(OpenraftPeerNoise)
            .with(Sink(seen.clone()));
        let down = format!("{PEER_UNREACHABLE}: cannot connect to 127.0.0.1:1: refused");
        tracing::subscriber::with_default(subscriber, || {
            tracing::warn!(target: "openraft::replication", error = %down, "error replication to target=2");
            tracing::error!(target: "openraft::replication", err = %down, "RPCError");
            tracing::error!(target: "openraft::core", error = "timeout after 500ms when Vote 1->2", "timeout");
            tracing::warn!(target: "openraft::replication", interval = ?std::time::Duration::from_millis(500), "openraft::replication::ReplicationCore::backoff_drain_events backoff mode: drain events without processing them");
            tracing::error!(target: "openraft::replication", error = "storage error: disk full", "error replication to target=2");
            tracing::error!(target: "openraft::replication", error = "Timeout(Timeout { action: AppendEntries, id: 1, target: 2, timeout: 500ms })", "debugged RPC timeout");
            tracing::error!(target: "openraft::storage", error = "timeout after 5s when flushing the log", "a storage timeout passes");
            tracing::warn!(target: "openraft::metrics", error = "timeout after 2s when wait for leader", "a metrics wait passes");
            tracing::warn!(target: "corelog", error = %down, "a broker's own warning");
            tracing::info!(target: "openraft::core", error = %down, "openraft info passes");
        });
        assert_eq!(
            *seen.lock().expect("sink"),
            vec![
                "error replication to target=2",
                "a storage timeout passes",
                "a metrics wait passes",
                "a broker's own warning",
                "openraft info passes"
            ]
        );
    }
}
