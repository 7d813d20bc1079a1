//! The client side of the controller port: one connection per peer client, opened on
//! first use and dropped at the first error (the next call opens a new one), every call
//! bounded by a timeout. openraft gets its `RaftNetwork` from here; the node uses the same
//! client to forward proposals and heartbeats to the active controller.
//!
//! Reachability is reported here, not by openraft: openraft logs a warning and an error
//! for every failed replication or vote call (every 500 ms per unreachable peer), so its
//! network errors carry [`PEER_UNREACHABLE`] and the broker's log filter drops openraft's
//! events that do; [`PeerHealth`] (`peer_health.rs`) logs a peer's loss once, then at most
//! once a minute while it lasts (with how long), and its return. openraft's other errors
//! (storage) stay.

pub use crate::peer_health::PeerHealth;
use crate::peer_health::REPORT_AGAIN_AFTER;
use crate::port_security::PortSecurity;
use crate::rpc::{read_frame, write_frame, Envelope, Request, Response, RpcError, Stream};
use crate::state_machine::MetadataRaft;
use openraft::error::{
    InstallSnapshotError, NetworkError, RPCError, RaftError, RemoteError, Unreachable,
};
use openraft::network::{RPCOption, RaftNetwork, RaftNetworkFactory};
use openraft::raft::{
    AppendEntriesRequest, AppendEntriesResponse, InstallSnapshotRequest, InstallSnapshotResponse,
    VoteRequest, VoteResponse,
};
use openraft::BasicNode;
use std::collections::BTreeMap;
use std::io;
use std::sync::{Arc, Mutex, RwLock};
use std::time::{Duration, Instant};
use tokio::io::BufReader;
use tokio::net::TcpStream;

type NodeId = u64;

/// The cluster id this node knows (set once learned), stamped on every request.
#[derive(Clone, Default)]
pub struct ClusterIdCell(Arc<RwLock<Option<String>>>);

impl ClusterIdCell {
    pub fn get(&self) -> Option<String> {
        self.0.read().unwrap_or_else(|p| p.into_inner()).clone()
    }

    pub fn set(&self, id: String) {
        *self.0.write().unwrap_or_else(|p| p.into_inner()) = Some(id);
    }
}

/// A connection to one peer's controller port.
pub struct PeerClient {
    /// The peer's node id (for openraft's errors).
    target: NodeId,
    addr: String,
    cluster_id: ClusterIdCell,
    security: Arc<PortSecurity>,
    conn: Option<BufReader<Box<dyn Stream>>>,
    /// Where reachability is reported (openraft's clients only).
    health: Option<PeerHealth>,
}

/// Begins the text of every error that says a peer could not be reached or talked to.
pub const PEER_UNREACHABLE: &str = "controller peer unreachable";

#[derive(Debug, thiserror::Error)]
pub enum CallError {
    #[error("controller peer unreachable: cannot connect to {addr}: {source}")]
    Unreachable { addr: String, source: io::Error },
    #[error("controller peer unreachable: talking to {addr}: {source}")]
    Network { addr: String, source: io::Error },
    #[error("{addr} refused: {source}")]
    Refused { addr: String, source: RpcError },
}

impl PeerClient {
    pub fn new(
        target: NodeId,
        addr: String,
        cluster_id: ClusterIdCell,
        security: Arc<PortSecurity>,
    ) -> PeerClient {
        PeerClient {
            target,
            addr,
            cluster_id,
            security,
            conn: None,
            health: None,
        }
    }

    /// This client reports its peer's reachability to `health`.
    pub fn reporting_to(mut self, health: PeerHealth) -> PeerClient {
        self.health = Some(health);
        self
    }

    pub fn addr(&self) -> &str {
        &self.addr
    }

    /// Sends `req` and waits for its response, within `timeout` all told.
    pub async fn call(&mut self, req: Request, timeout: Duration) -> Result<Response, CallError> {
        let envelope = Envelope {
            cluster_id: self.cluster_id.get(),
            body: req,
            protocol: crate::rpc::PROTOCOL,
        };
        let addr = self.addr.clone();
        let result = tokio::time::timeout(timeout, self.exchange(&envelope)).await;
        let result = match result {
            Ok(r) => r,
            Err(_) => Err(CallError::Network {
                addr: addr.clone(),
                source: io::Error::new(
                    io::ErrorKind::TimedOut,
                    format!("no answer within {timeout:?}"),
                ),
            }),
        };
        if let Some(health) = &self.health {
            match &result {
                Ok(_) => health.up(self.target, &addr),
                Err(e) => health.down(self.target, &addr, e),
            }
        }
        match result {
            Ok(Response::Refused(e)) => {
                let e = CallError::Refused { addr, source: e };
                report_refusal(&e);
                Err(e)
            }
            Ok(r) => Ok(r),
            Err(e) => {
                report_refusal(&e);
                self.conn = None;
                Err(e)
            }
        }
    }

    async fn exchange(&mut self, envelope: &Envelope<Request>) -> Result<Response, CallError> {
        if self.conn.is_none() {
            self.conn = Some(self.open().await?);
        }
        let net = |source: io::Error| CallError::Network {
            addr: self.addr.clone(),
            source,
        };
        let conn = self
            .conn
            .as_mut()
            .ok_or_else(|| net(io::ErrorKind::NotConnected.into()))?;
        write_frame(conn, envelope).await.map_err(net)?;
        match read_frame::<_, Response>(conn).await.map_err(net)? {
            Some(r) => Ok(r),
            None => Err(net(io::Error::new(
                io::ErrorKind::UnexpectedEof,
                "connection closed",
            ))),
        }
    }
}

impl CallError {
    /// Whether the peer refused this node's credentials (its certificate, its SASL
    /// login or its principal's rights): a configuration to fix, not a peer down.
    pub fn is_refusal(&self) -> bool {
        match self {
            CallError::Refused { source, .. } => matches!(
                source,
                RpcError::AuthenticationFailed | RpcError::Unauthorized { .. }
            ),
            // rustls' alerts and certificate errors surface as invalid data.
            CallError::Unreachable { source, .. } => source.kind() == io::ErrorKind::InvalidData,
            CallError::Network { .. } => false,
        }
    }
}

/// Says that a peer refused this node, at most once a minute per peer: a broker with the
/// wrong credentials must tell its operator why it never joins.
pub fn report_refusal(e: &CallError) {
    static LAST: Mutex<BTreeMap<String, Instant>> = Mutex::new(BTreeMap::new());
    if !e.is_refusal() {
        return;
    }
    let addr = match e {
        CallError::Unreachable { addr, .. }
        | CallError::Network { addr, .. }
        | CallError::Refused { addr, .. } => addr,
    };
    let mut last = LAST.lock().unwrap_or_else(|p| p.into_inner());
    let due = last
        .get(addr)
        .is_none_or(|t| t.elapsed() >= REPORT_AGAIN_AFTER);
    if due {
        last.insert(addr.clone(), Instant::now());
        tracing::warn!(error = %e, "a controller peer refused this node's credentials");
    }
}

impl PeerClient {
    /// A new connection, through TLS and the SASL login where the port has them.
    async fn open(&self) -> Result<BufReader<Box<dyn Stream>>, CallError> {
        let unreachable = |source: io::Error| CallError::Unreachable {
            addr: self.addr.clone(),
            source,
        };
        let tcp = TcpStream::connect(&self.addr).await.map_err(unreachable)?;
        tcp.set_nodelay(true).ok();
        let stream: Box<dyn Stream> = match &self.security.tls {
            None => Box::new(tcp),
            Some(tls) => {
                let host = host_of(&self.addr);
                let name = rustls::pki_types::ServerName::try_from(host.to_string())
                    .map_err(|e| unreachable(io::Error::new(io::ErrorKind::InvalidInput, e)))?;
                let connector = tokio_rustls::TlsConnector::from(tls.client.clone());
                Box::new(connector.connect(name, tcp).await.map_err(unreachable)?)
            }
        };
        let mut stream = BufReader::new(stream);
        if let Some(sasl) = &self.security.sasl {
            let net = |source: io::Error| CallError::Network {
                addr: self.addr.clone(),
                source,
            };
            let login = Envelope {
                cluster_id: self.cluster_id.get(),
                body: Request::Authenticate(sasl.credentials()),
                protocol: crate::rpc::PROTOCOL,
            };
            write_frame(&mut stream, &login).await.map_err(net)?;
            match read_frame::<_, Response>(&mut stream).await.map_err(net)? {
                Some(Response::Authenticate(Ok(()))) => {}
                Some(Response::Authenticate(Err(e)) | Response::Refused(e)) => {
                    return Err(CallError::Refused {
                        addr: self.addr.clone(),
                        source: e,
                    })
                }
                _ => {
                    return Err(net(io::Error::new(
                        io::ErrorKind::InvalidData,
                        "the SASL login was not answered",
                    )))
                }
            }
        }
        Ok(stream)
    }
}

/// The host of a `host:port` address (an IPv6 host without its brackets).
fn host_of(addr: &str) -> &str {
    let host = addr.rsplit_once(':').map_or(addr, |(h, _)| h);
    host.trim_start_matches('[').trim_end_matches(']')
}

/// openraft's network: a `PeerClient` per target.
#[derive(Clone)]
pub struct Network {
    pub cluster_id: ClusterIdCell,
    pub security: Arc<PortSecurity>,
    pub health: PeerHealth,
}

impl RaftNetworkFactory<MetadataRaft> for Network {
    type Network = PeerClient;

    async fn new_client(&mut self, target: NodeId, node: &BasicNode) -> PeerClient {
        PeerClient::new(
            target,
            node.addr.clone(),
            self.cluster_id.clone(),
            self.security.clone(),
        )
        .reporting_to(self.health.clone())
    }
}

fn to_rpc_error<E: std::error::Error>(e: CallError) -> RPCError<NodeId, BasicNode, E> {
    match e {
        CallError::Unreachable { .. } => RPCError::Unreachable(Unreachable::new(&e)),
        _ => RPCError::Network(NetworkError::new(&e)),
    }
}

fn unexpected<E: std::error::Error>(addr: &str) -> RPCError<NodeId, BasicNode, E> {
    let e = io::Error::new(
        io::ErrorKind::InvalidData,
        format!("{addr} answered another request"),
    );
    RPCError::Network(NetworkError::new(&e))
}

fn remote<E: std::error::Error>(target: NodeId, e: E) -> RPCError<NodeId, BasicNode, E> {
    RPCError::RemoteError(RemoteError::new(target, e))
}

impl RaftNetwork<MetadataRaft> for PeerClient {
    async fn append_entries(
        &mut self,
        rpc: AppendEntriesRequest<MetadataRaft>,
        option: RPCOption,
    ) -> Result<AppendEntriesResponse<NodeId>, RPCError<NodeId, BasicNode, RaftError<NodeId>>> {
        let target = self.target;
        match self
            .call(Request::AppendEntries(rpc), option.hard_ttl())
            .await
            .map_err(to_rpc_error)?
        {
            Response::AppendEntries(r) => r.map_err(|e| remote(target, e)),
            _ => Err(unexpected(&self.addr)),
        }
    }

    async fn install_snapshot(
        &mut self,
        rpc: InstallSnapshotRequest<MetadataRaft>,
        option: RPCOption,
    ) -> Result<
        InstallSnapshotResponse<NodeId>,
        RPCError<NodeId, BasicNode, RaftError<NodeId, InstallSnapshotError>>,
    > {
        let target = self.target;
        match self
            .call(Request::InstallSnapshot(rpc), option.hard_ttl())
            .await
            .map_err(to_rpc_error)?
        {
            Response::InstallSnapshot(r) => r.map_err(|e| remote(target, e)),
            _ => Err(unexpected(&self.addr)),
        }
    }

    async fn vote(
        &mut self,
        rpc: VoteRequest<NodeId>,
        option: RPCOption,
    ) -> Result<VoteResponse<NodeId>, RPCError<NodeId, BasicNode, RaftError<NodeId>>> {
        let target = self.target;
        match self
            .call(Request::Vote(rpc), option.hard_ttl())
            .await
            .map_err(to_rpc_error)?
        {
            Response::Vote(r) => r.map_err(|e| remote(target, e)),
            _ => Err(unexpected(&self.addr)),
        }
    }
}
