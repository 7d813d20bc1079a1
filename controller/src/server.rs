//! The server side of the controller port: each connection is served in turn, one
//! request then its response. Raft messages go to openraft; proposals and joins are
//! taken only by the active controller (others answer `NotLeader` with the leader they
//! know, and the caller goes there); heartbeats are kept by every node, so that a voter
//! elected later knows who was alive before it led (`liveness`).
//!
//! A secured port (`port_security`) first finishes the connection's TLS handshake,
//! then takes its SASL login as the first request, then authorizes its principal; only
//! then are requests served, and a refusal closes only that connection.

use crate::liveness;
use crate::node_state::{self as node, Shared};
use crate::port_security::{self, Refusal, ANONYMOUS};
use crate::rpc::{
    read_frame, read_frame_max, write_frame, Envelope, Request, Response, RpcError, Stream,
};
use crate::state_machine::Proposal;
use openraft::BasicNode;
use std::net::SocketAddr;
use std::sync::Arc;
use tokio::io::BufReader;
use tokio::net::{TcpListener, TcpStream};

/// The largest first message a SASL port reads from a peer not yet authenticated.
const LOGIN_FRAME_MAX: usize = 64 << 10;

/// Connections at once between accept and admission (TLS, login): more are closed at
/// once, so a flood of them holds neither memory nor descriptors for long.
const ADMITTING_MAX: usize = 256;

/// A connection not admitted within this (its TLS handshake and login together) is closed.
const ADMISSION_TIMEOUT: std::time::Duration = std::time::Duration::from_secs(10);

pub(crate) async fn serve(shared: Arc<Shared>, listener: TcpListener) {
    let admitting = Arc::new(tokio::sync::Semaphore::new(ADMITTING_MAX));
    loop {
        match listener.accept().await {
            Ok((stream, peer)) => {
                let Ok(permit) = admitting.clone().try_acquire_owned() else {
                    audit(
                        &shared,
                        Some(peer),
                        None,
                        true,
                        "too many connections awaiting admission",
                    );
                    continue;
                };
                stream.set_nodelay(true).ok();
                tokio::spawn(connection(shared.clone(), stream, permit));
            }
            Err(e) => {
                tracing::warn!(error = %e, "controller port: accept");
                tokio::time::sleep(std::time::Duration::from_millis(100)).await;
            }
        }
    }
}

async fn connection(
    shared: Arc<Shared>,
    tcp: TcpStream,
    admitting: tokio::sync::OwnedSemaphorePermit,
) {
    let peer = tcp.peer_addr().ok();
    let admitted = tokio::time::timeout(ADMISSION_TIMEOUT, admit(&shared, tcp, peer)).await;
    let (mut stream, principal) = match admitted {
        Ok(Some(admitted)) => admitted,
        Ok(None) => return,
        Err(_) => {
            audit(&shared, peer, None, true, "not admitted in time");
            return;
        }
    };
    drop(admitting);
    let host = peer.map(|p| p.ip().to_string()).unwrap_or_default();
    loop {
        let envelope = match read_frame::<_, Envelope<Request>>(&mut stream).await {
            Ok(Some(e)) => e,
            Ok(None) => return,
            Err(e) => {
                tracing::debug!(?peer, error = %e, "controller port: closing a connection");
                return;
            }
        };
        // Each request, so that a revoked right ends the connections that had it.
        if !authorized(&shared, &principal, &host) {
            audit(
                &shared,
                peer,
                Some(&principal),
                false,
                "CLUSTER_ACTION on the cluster denied",
            );
            let answer = Response::Refused(RpcError::Unauthorized { principal });
            let _ = write_frame(&mut stream, &answer).await;
            return;
        }
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
    if envelope.protocol == 0 {
        let finalized = shared.sm.image().features.clone();
        if !finalized.is_empty() {
            let why = format!(
                "a node of a release without feature levels, and this cluster has finalized \
                 them ({}): it must not vote, lead or register; run a release that supports them",
                crate::features::describe(&finalized)
            );
            refused_old_release(&why);
            return Response::Refused(RpcError::Unavailable(why));
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
        // Only a connection's first request on a SASL port (`admit`) logs in.
        Request::Authenticate(_) => Response::Refused(RpcError::AuthenticationFailed),
    }
}

/// Logs a refused request of an earlier release's node, at most every ten seconds.
fn refused_old_release(why: &str) {
    use std::sync::atomic::{AtomicU64, Ordering};
    static LAST: AtomicU64 = AtomicU64::new(0);
    let now = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_secs())
        .unwrap_or(0);
    let last = LAST.load(Ordering::Relaxed);
    if now >= last + 10
        && LAST
            .compare_exchange(last, now, Ordering::Relaxed, Ordering::Relaxed)
            .is_ok()
    {
        tracing::error!(reason = %why, "controller port: refusing a node's request");
    }
}

/// Tells the broker's audit of a refused connection.
fn audit(
    shared: &Shared,
    peer: Option<SocketAddr>,
    principal: Option<&str>,
    authentication: bool,
    reason: &str,
) {
    if let Some(audit) = &shared.config.security.audit {
        audit(&Refusal {
            peer,
            principal,
            authentication,
            reason,
        });
    }
}

/// The connection once it may be served (TLS finished, SASL passed, principal
/// authorized), with its principal. `None`: refused (and audited), or gone.
async fn admit(
    shared: &Shared,
    tcp: TcpStream,
    peer: Option<SocketAddr>,
) -> Option<(BufReader<Box<dyn Stream>>, String)> {
    let security = &shared.config.security;
    let refuse = |principal: Option<&str>, authentication: bool, reason: &str| {
        audit(shared, peer, principal, authentication, reason)
    };
    let mut principal = ANONYMOUS.to_string();
    let stream: Box<dyn Stream> = match &security.tls {
        None => Box::new(tcp),
        Some(tls) => {
            let acceptor = tokio_rustls::TlsAcceptor::from(tls.server.clone());
            let accepted =
                tokio::time::timeout(port_security::HANDSHAKE_TIMEOUT, acceptor.accept(tcp)).await;
            let stream = match accepted {
                Ok(Ok(s)) => s,
                Ok(Err(e)) => {
                    refuse(None, true, &format!("TLS handshake: {e}"));
                    return None;
                }
                Err(_) => {
                    refuse(None, true, "no TLS handshake in time");
                    return None;
                }
            };
            let cert = stream
                .get_ref()
                .1
                .peer_certificates()
                .and_then(|c| c.first());
            if let Some(cert) = cert {
                // As Kafka: a certificate no mapping rule applies to fails authentication.
                match (tls.principal_of)(cert) {
                    Some(p) => principal = p,
                    None => {
                        refuse(None, true, "the client certificate maps to no principal");
                        return None;
                    }
                }
            }
            Box::new(stream)
        }
    };
    let mut stream = BufReader::new(stream);
    if let Some(sasl) = &security.sasl {
        // Bounded in size and time: nothing is known of the peer yet.
        let login = read_frame_max::<_, Envelope<Request>>(&mut stream, LOGIN_FRAME_MAX);
        let first = match tokio::time::timeout(port_security::HANDSHAKE_TIMEOUT, login).await {
            Ok(Ok(Some(first))) => first,
            Ok(Ok(None)) => return None,
            Ok(Err(_)) => {
                // Not the decoder's message: it may quote what the peer sent.
                refuse(None, true, "an unreadable login");
                return None;
            }
            Err(_) => {
                refuse(None, true, "no login in time");
                return None;
            }
        };
        let verdict = match first.body {
            Request::Authenticate(c) if c.mechanism == "PLAIN" => {
                if (sasl.verify)(&c.username, c.password.expose().as_bytes()) {
                    Ok(port_security::sasl_principal(&c.username))
                } else {
                    Err(format!("wrong password for user {:?}", shown(&c.username)))
                }
            }
            Request::Authenticate(c) => Err(format!(
                "SASL mechanism {} is not served here (PLAIN is)",
                shown(&c.mechanism)
            )),
            _ => Err("a request before SASL authentication".to_string()),
        };
        match verdict {
            Ok(p) => principal = p,
            Err(reason) => {
                refuse(None, true, &reason);
                tokio::time::sleep(sasl.failed_delay).await;
                let answer = Response::Authenticate(Err(RpcError::AuthenticationFailed));
                let _ = write_frame(&mut stream, &answer).await;
                return None;
            }
        }
        let host = peer.map(|p| p.ip().to_string()).unwrap_or_default();
        let answer = match authorized(shared, &principal, &host) {
            true => Response::Authenticate(Ok(())),
            false => Response::Authenticate(Err(RpcError::Unauthorized {
                principal: principal.clone(),
            })),
        };
        let denied = matches!(answer, Response::Authenticate(Err(_)));
        write_frame(&mut stream, &answer).await.ok()?;
        if denied {
            refuse(
                Some(&principal),
                false,
                "CLUSTER_ACTION on the cluster denied",
            );
            return None;
        }
        return Some((stream, principal));
    }
    let host = peer.map(|p| p.ip().to_string()).unwrap_or_default();
    if !authorized(shared, &principal, &host) {
        refuse(
            Some(&principal),
            false,
            "CLUSTER_ACTION on the cluster denied",
        );
        // Told on its first request, so the peer knows why rather than seeing a reset.
        let first = read_frame_max::<_, Envelope<Request>>(&mut stream, LOGIN_FRAME_MAX);
        let first = tokio::time::timeout(port_security::HANDSHAKE_TIMEOUT, first).await;
        if let Ok(Ok(Some(_))) = first {
            let answer = Response::Refused(RpcError::Unauthorized { principal });
            let _ = write_frame(&mut stream, &answer).await;
        }
        return None;
    }
    Some((stream, principal))
}

/// An attacker's text, cut short for the log.
fn shown(s: &str) -> &str {
    match s.char_indices().nth(64) {
        Some((i, _)) => &s[..i],
        None => s,
    }
}

fn authorized(shared: &Shared, principal: &str, host: &str) -> bool {
    let policy = shared.config.security.authorizer.as_ref();
    policy.is_none()
        || port_security::may_use_port(policy, &shared.sm.image().acls, principal, host)
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
