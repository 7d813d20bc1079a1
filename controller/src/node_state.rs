//! What a node's parts share — openraft, the state machine, the cluster id, the
//! liveness table — and the questions they all ask of it: who leads, where, and how to
//! write on this node's own openraft.

use crate::command::{Command, CommandError, Outcome};
use crate::network::{ClusterIdCell, PeerHealth};
use crate::node_config::NodeConfig;
use crate::rpc::{QuorumDescription, ReplicaState, RpcError};
use crate::state_machine::{Applied, MetadataRaft, MetadataStateMachine, Proposal};
use openraft::error::{ClientWriteError, RaftError};
use openraft::{Raft, ServerState};
use std::collections::{BTreeSet, HashMap};
use std::sync::Mutex;
use std::time::Instant;
use tokio::sync::watch;

type NodeId = u64;

/// What the active controller has heard from brokers (kept and used by `liveness`).
#[derive(Default)]
pub(crate) struct Liveness {
    /// The term this node leads in and since when; `None` while it does not lead.
    pub leading: Option<(u64, Instant)>,
    /// broker → (when last heard, its epoch then, its applied index then).
    pub heard: HashMap<i32, (Instant, u64, u64)>,
    /// broker → its data filesystem, as last heard.
    pub disk: std::collections::BTreeMap<i32, crate::rpc::DiskUse>,
}

/// What the server, the duties and the handle share.
pub(crate) struct Shared {
    pub id: NodeId,
    pub config: NodeConfig,
    pub raft: Raft<MetadataRaft>,
    pub sm: MetadataStateMachine,
    pub cluster_id: ClusterIdCell,
    /// What this node's calls to its peers say of their reachability: openraft's calls
    /// and the heartbeats (a follower calls its leader only with heartbeats).
    pub peer_health: PeerHealth,
    pub liveness: Mutex<Liveness>,
    /// Raised when a heartbeat may unfence a broker, so the active controller decides at
    /// once instead of at its next check.
    pub liveness_wake: tokio::sync::Notify,
    /// This broker's registration epoch once registered.
    pub registered: watch::Sender<Option<u64>>,
    /// Why this broker cannot join, once the controller said so (its release cannot
    /// serve the cluster's finalized feature levels); it stops trying.
    pub refused: watch::Sender<Option<String>>,
}

/// The active controller as this node knows it: its id and controller address.
pub(crate) fn leader_addr(shared: &Shared) -> Option<(NodeId, String)> {
    let m = shared.raft.metrics().borrow().clone();
    let leader = m.current_leader?;
    let addr = m
        .membership_config
        .membership()
        .get_node(&leader)
        .map(|n| n.addr.clone())?;
    Some((leader, addr))
}

pub(crate) fn is_leader(shared: &Shared) -> bool {
    let m = shared.raft.metrics();
    let m = m.borrow();
    m.current_leader == Some(shared.id) && m.state == ServerState::Leader
}

/// How long a write on this node's openraft may take before the proposer tries again.
/// A write this node appended as leader and whose entry a new leader then replaced — by
/// a snapshot install, after this node restarted still believing it led — is never
/// answered by openraft; without a bound, a broker's registration waited forever. A
/// retry carries the same proposal id, which the state machine answers once
/// (`recent_ids`), so a write that was merely slow is not applied twice.
const CLIENT_WRITE_TIMEOUT: std::time::Duration = std::time::Duration::from_secs(5);

/// How often a write in flight looks whether this node is still the leader.
const LEADERSHIP_CHECK: std::time::Duration = std::time::Duration::from_millis(50);

/// Writes `proposal` on this node's openraft: `Err(NotLeader)` when another node leads,
/// `Err(Unavailable)` when the write failed, was not answered in time, or this node
/// stopped leading while it waited (the proposer then asks the new leader).
pub(crate) async fn write_local(shared: &Shared, proposal: Proposal) -> Result<Applied, RpcError> {
    let leading = is_leader(shared);
    if leading {
        if let Some(refused) = refused_without_writing(shared, &proposal) {
            return Ok(refused);
        }
    }
    let lost_leadership = async {
        loop {
            tokio::time::sleep(LEADERSHIP_CHECK).await;
            if leading && !is_leader(shared) {
                return;
            }
        }
    };
    let result = tokio::select! {
        r = shared.raft.client_write(proposal) => r,
        () = lost_leadership => {
            return Err(RpcError::Unavailable("this node stopped leading while writing".into()));
        }
        () = tokio::time::sleep(CLIENT_WRITE_TIMEOUT) => {
            tracing::warn!(
                timeout_ms = CLIENT_WRITE_TIMEOUT.as_millis() as u64,
                "a metadata write was not answered; proposing it again"
            );
            return Err(RpcError::Unavailable(format!(
                "not answered within {CLIENT_WRITE_TIMEOUT:?}"
            )));
        }
    };
    match result {
        Ok(r) => Ok(r.data),
        Err(RaftError::APIError(ClientWriteError::ForwardToLeader(f))) => {
            Err(RpcError::NotLeader {
                leader: f.leader_id.zip(f.leader_node.map(|n| n.addr)),
            })
        }
        Err(e) => Err(RpcError::Unavailable(e.to_string())),
    }
}

/// The answer to an `AlterPartition` every change of which the active controller's image
/// refuses: Kafka's controller answers such a request without writing a record, and so
/// does this one. Without it, a leader whose follower the controller had just fenced
/// wrote one refused entry per proposal until its own metadata caught up. A change that
/// might pass is written, and applying it checks it again against the image of its
/// turn. A proposal already applied (a retry) gets its recorded outcome.
fn refused_without_writing(shared: &Shared, proposal: &Proposal) -> Option<Applied> {
    let Command::AlterPartition {
        broker,
        broker_epoch,
        changes,
    } = &proposal.command
    else {
        return None;
    };
    if let Some(done) = shared.sm.answered(&proposal.id) {
        return Some(done);
    }
    let image = shared.sm.image();
    let refusals: Vec<Result<(), CommandError>> = changes
        .iter()
        .map(|c| {
            image
                .isr_change_refusal(*broker, *broker_epoch, c)
                .map(|_| ())
        })
        .collect();
    if refusals.iter().any(Result::is_ok) {
        return None;
    }
    Some(Applied {
        index: image.applied,
        outcome: Outcome::Items(refusals),
    })
}

/// The quorum's state when this node is the active controller.
pub(crate) fn local_quorum(shared: &Shared) -> Option<QuorumDescription> {
    if !is_leader(shared) {
        return None;
    }
    let m = shared.raft.metrics().borrow().clone();
    let membership = m.membership_config.membership();
    let voters: BTreeSet<NodeId> = membership.voter_ids().collect();
    let replication = m.replication.clone().unwrap_or_default();
    let state = |id: NodeId| ReplicaState {
        id,
        addr: membership
            .get_node(&id)
            .map(|n| n.addr.clone())
            .unwrap_or_default(),
        log_end_offset: if id == shared.id {
            m.last_log_index.map(|i| i as i64).unwrap_or(-1)
        } else {
            replication
                .get(&id)
                .and_then(|l| l.as_ref())
                .map(|l| l.index as i64)
                .unwrap_or(-1)
        },
        last_caught_up_ms_ago: -1,
    };
    Some(QuorumDescription {
        leader: Some(shared.id),
        term: m.current_term,
        high_watermark: m.last_applied.map(|l| l.index as i64).unwrap_or(-1),
        voters: voters.iter().map(|id| state(*id)).collect(),
        observers: membership
            .learner_ids()
            .filter(|id| !voters.contains(id))
            .map(state)
            .collect(),
    })
}

impl Shared {
    /// Every broker's data filesystem, as the active controller last heard it.
    pub(crate) fn disk_use(&self) -> std::collections::BTreeMap<i32, crate::rpc::DiskUse> {
        self.liveness
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .disk
            .clone()
    }
}
