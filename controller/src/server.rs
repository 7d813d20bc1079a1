//! The server side of the controller port: each connection is served in turn, one
//! request then its response. Raft messages go to openraft; proposals and joins are
//! taken only by the active controller (others answer `NotLeader` with the leader they
//! know, and the caller goes there); heartbeats are kept by every node, so that a voter
//! elected later knows who was alive before it led (`liveness`).

use crate::liveness;
use crate::node_state::{self as node, Shared};
use crate::rpc::{read_frame, write_frame, Envelope, Request, Response, RpcError};
use crate::state_machine::Proposal;
use openraft::BasicNode;
use std::sync::Arc;
use tokio::io::BufReader;
use tokio::net::{TcpListener, TcpStream};

pub(crate) async fn serve(shared: Arc<Shared>, listener: TcpListener) {
    loop {
        match listener.accept().await {
            Ok((stream, _)) => {
                stream.set_nodelay(true).ok();
                tokio::spawn(connection(shared.clone(), stream));
            }
            Err(e) => {
                tracing::warn!(error = %e, "controller port: accept");
                tokio::time::sleep(std::time::Duration::from_millis(100)).await;
            }
        }
    }
}

async fn connection(shared: Arc<Shared>, stream: TcpStream) {
    let peer = stream.peer_addr().ok();
    let mut stream = BufReader::new(stream);
    loop {
        let envelope = match read_frame::<_, Envelope<Request>>(&mut stream).await {
            Ok(Some(e)) => e,
            Ok(None) => return,
            Err(e) => {
                tracing::debug!(?peer, error = %e, "controller port: closing a connection");
                return;
            }
        };
        let response = handle(&shared, envelope).await;
        if let Err(e) = write_frame(&mut stream, &response).await {
            tracing::debug!(?peer, error = %e, "controller port: writing a response");
            return;
        }
    }
}

async fn handle(shared: &Shared, envelope: Envelope<Request>) -> Response {
    if let (Some(ours), Some(theirs)) = (shared.cluster_id.get(), envelope.cluster_id) {
        if ours != theirs {
            return Response::Refused(RpcError::ClusterMismatch { ours, theirs });
        }
    }
    match envelope.body {
        Request::AppendEntries(r) => Response::AppendEntries(shared.raft.append_entries(r).await),
        Request::Vote(r) => Response::Vote(shared.raft.vote(r).await),
        Request::InstallSnapshot(r) => {
            Response::InstallSnapshot(shared.raft.install_snapshot(r).await)
        }
        Request::Propose { id, command } => {
            Response::Propose(node::write_local(shared, Proposal { id, command }).await)
        }
        Request::Join { id, addr } => Response::Join(join(shared, id, addr).await),
        Request::Heartbeat(hb) => {
            liveness::heard(shared, &hb);
            Response::Heartbeat(Ok(()))
        }
        Request::DescribeQuorum => {
            Response::DescribeQuorum(node::local_quorum(shared).ok_or_else(|| not_leader(shared)))
        }
    }
}

fn not_leader(shared: &Shared) -> RpcError {
    RpcError::NotLeader {
        leader: node::leader_addr(shared),
    }
}

/// Adds a learner, unless it already is a member at that address.
async fn join(shared: &Shared, id: u64, addr: String) -> Result<(), RpcError> {
    if !node::is_leader(shared) {
        return Err(not_leader(shared));
    }
    let known = shared
        .raft
        .metrics()
        .borrow()
        .membership_config
        .membership()
        .get_node(&id)
        .is_some_and(|n| n.addr == addr);
    if known {
        return Ok(());
    }
    shared
        .raft
        .add_learner(id, BasicNode::new(addr), false)
        .await
        .map(|_| ())
        .map_err(|e| match e.forward_to_leader::<BasicNode>() {
            Some(_) => not_leader(shared),
            None => RpcError::Unavailable(e.to_string()),
        })
}
