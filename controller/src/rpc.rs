//! What controllers and brokers say to one another on the controller port, and how it is
//! framed: `[length: u32 BE][message as JSON]`, one request then its response, in turn,
//! on a connection.
//!
//! Every request names the sender's cluster id once it knows one; a node of another
//! cluster is refused (`RpcError::ClusterMismatch`), so a broker started on a data
//! directory of another cluster can neither vote nor be followed here.

use crate::command::Command;
use crate::state_machine::{Applied, MetadataRaft};
use openraft::error::{InstallSnapshotError, RaftError};
use openraft::raft::{
    AppendEntriesRequest, AppendEntriesResponse, InstallSnapshotRequest, InstallSnapshotResponse,
    VoteRequest, VoteResponse,
};
use serde::de::DeserializeOwned;
use serde::{Deserialize, Serialize};
use std::io;
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt};
use uuid::Uuid;

/// The byte stream under a controller connection: TCP, or TLS over TCP.
pub trait Stream: AsyncRead + AsyncWrite + Unpin + Send + Sync {}
impl<T: AsyncRead + AsyncWrite + Unpin + Send + Sync> Stream for T {}

/// A frame longer than this is refused (a snapshot chunk is the largest message).
pub const FRAME_MAX: usize = 64 << 20;

type NodeId = u64;

#[derive(Debug, Serialize, Deserialize)]
pub struct Envelope<T> {
    pub cluster_id: Option<String>,
    pub body: T,
    /// The sender's controller protocol (`PROTOCOL`); 0, absent, from releases before
    /// feature levels, whose nodes a cluster that has finalized levels refuses: such a
    /// node would apply the log without the rules those levels need.
    #[serde(default)]
    pub protocol: u32,
}

/// The controller protocol this release speaks (sent in every `Envelope`).
pub const PROTOCOL: u32 = 1;

#[derive(Debug, Serialize, Deserialize)]
pub enum Request {
    AppendEntries(AppendEntriesRequest<MetadataRaft>),
    Vote(VoteRequest<NodeId>),
    InstallSnapshot(InstallSnapshotRequest<MetadataRaft>),
    /// A command for the active controller to commit; `id` makes retries idempotent.
    Propose {
        id: Uuid,
        command: Command,
    },
    /// A broker asks to follow the log as a non-voting member.
    Join {
        id: NodeId,
        addr: String,
    },
    Heartbeat(Heartbeat),
    /// The quorum as this node sees it (DescribeQuorum).
    DescribeQuorum,
    /// A SASL login: the first request on a connection to a SASL port, and only there.
    Authenticate(crate::port_security::Credentials),
}

/// A broker's liveness report to the active controller.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct Heartbeat {
    pub broker: i32,
    /// Its registration's epoch.
    pub epoch: u64,
    /// The last metadata log index it has applied.
    pub applied: u64,
    /// Its data filesystem (the balancer's disk check); absent from older brokers.
    #[serde(default)]
    pub disk: Option<DiskUse>,
}

/// A broker's data filesystem (that of its log directory with the most room, where its
/// next replica goes), from its heartbeats: bytes as `df` counts them, so
/// `fill` is its `Use%`.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub struct DiskUse {
    /// Blocks in use (total less free).
    pub used_bytes: u64,
    /// Used plus available to unprivileged users: blocks reserved for root (5 % by
    /// default on ext4, far more on some hosts) count as neither, so a filesystem with a
    /// large reserve is not taken for a full one.
    pub total_bytes: u64,
}

impl DiskUse {
    /// From `statvfs` counts (`blocks`, `free`, `available`, in `block`-byte units).
    pub fn from_blocks(blocks: u64, free: u64, available: u64, block: u64) -> DiskUse {
        let used = blocks.saturating_sub(free).saturating_mul(block);
        DiskUse {
            used_bytes: used,
            total_bytes: used.saturating_add(available.saturating_mul(block)),
        }
    }

    /// The filesystem holding `dir`.
    pub fn of(dir: &std::path::Path) -> Option<DiskUse> {
        let st = nix::sys::statvfs::statvfs(dir).ok()?;
        Some(DiskUse::from_blocks(
            st.blocks() as u64,
            st.blocks_free() as u64,
            st.blocks_available() as u64,
            st.fragment_size() as u64,
        ))
    }

    /// The used share, 0..=1 (`df`'s `Use%`); 0 for an empty count.
    pub fn fill(&self) -> f64 {
        if self.total_bytes == 0 {
            0.0
        } else {
            (self.used_bytes as f64 / self.total_bytes as f64).clamp(0.0, 1.0)
        }
    }
}

#[derive(Debug, Serialize, Deserialize)]
pub enum Response {
    AppendEntries(Result<AppendEntriesResponse<NodeId>, RaftError<NodeId>>),
    Vote(Result<VoteResponse<NodeId>, RaftError<NodeId>>),
    InstallSnapshot(
        Result<InstallSnapshotResponse<NodeId>, RaftError<NodeId, InstallSnapshotError>>,
    ),
    Propose(Result<Applied, RpcError>),
    Join(Result<(), RpcError>),
    Heartbeat(Result<(), RpcError>),
    DescribeQuorum(Result<QuorumDescription, RpcError>),
    Authenticate(Result<(), RpcError>),
    /// The request could not be handled at all.
    Refused(RpcError),
}

#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error, Serialize, Deserialize)]
pub enum RpcError {
    /// This node is not the active controller; `leader` is the one it knows of.
    #[error("not the active controller (leader: {leader:?})")]
    NotLeader { leader: Option<(NodeId, String)> },
    #[error("this node belongs to cluster {ours}, the request to cluster {theirs}")]
    ClusterMismatch { ours: String, theirs: String },
    #[error("the controller is shutting down or failed: {0}")]
    Unavailable(String),
    /// The SASL login failed, or a request came before it.
    #[error("authentication failed")]
    AuthenticationFailed,
    /// The peer's principal may not use the controller port (CLUSTER_ACTION).
    #[error("{principal} is not authorized for CLUSTER_ACTION on the cluster")]
    Unauthorized { principal: String },
}

/// One voter's or observer's replication state (DescribeQuorum, KIP-836).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ReplicaState {
    pub id: NodeId,
    /// Its controller address, `host:port`.
    pub addr: String,
    /// The last log index known to be on it (-1: unknown).
    pub log_end_offset: i64,
    /// Milliseconds since the leader last heard from it (-1: unknown).
    pub last_caught_up_ms_ago: i64,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct QuorumDescription {
    pub leader: Option<NodeId>,
    pub term: u64,
    pub high_watermark: i64,
    pub voters: Vec<ReplicaState>,
    pub observers: Vec<ReplicaState>,
}

/// A message's frame body, as `write_frame` sends it: its JSON, refused over
/// [`FRAME_MAX`].
pub fn encode_body<T: Serialize>(msg: &T) -> io::Result<Vec<u8>> {
    let body =
        serde_json::to_vec(msg).map_err(|e| io::Error::new(io::ErrorKind::InvalidData, e))?;
    if body.len() > FRAME_MAX {
        return Err(io::Error::new(
            io::ErrorKind::InvalidInput,
            format!(
                "a controller message of {} bytes is over the {FRAME_MAX}-byte limit",
                body.len()
            ),
        ));
    }
    Ok(body)
}

/// A frame's body (what follows its length), decoded as `read_frame` decodes it (it calls
/// this; so do the fuzz targets, `tools/fuzz-targets`).
pub fn decode_body<T: DeserializeOwned>(body: &[u8]) -> io::Result<T> {
    serde_json::from_slice(body).map_err(|e| io::Error::new(io::ErrorKind::InvalidData, e))
}

pub async fn write_frame<W, T>(w: &mut W, msg: &T) -> io::Result<()>
where
    W: AsyncWriteExt + Unpin,
    T: Serialize,
{
    let body = encode_body(msg)?;
    let mut frame = Vec::with_capacity(4 + body.len());
    frame.extend_from_slice(&(body.len() as u32).to_be_bytes());
    frame.extend_from_slice(&body);
    w.write_all(&frame).await?;
    w.flush().await
}

/// The next frame; `Ok(None)` at a clean end of the stream.
pub async fn read_frame<R, T>(r: &mut R) -> io::Result<Option<T>>
where
    R: AsyncReadExt + Unpin,
    T: DeserializeOwned,
{
    read_frame_max(r, FRAME_MAX).await
}

/// The next frame, refused over `max` bytes before anything is allocated for it (a
/// login, which an unauthenticated peer sends, is small).
pub async fn read_frame_max<R, T>(r: &mut R, max: usize) -> io::Result<Option<T>>
where
    R: AsyncReadExt + Unpin,
    T: DeserializeOwned,
{
    debug_assert!(max <= FRAME_MAX);
    let mut len = [0u8; 4];
    match r.read_exact(&mut len).await {
        Ok(_) => {}
        Err(e) if e.kind() == io::ErrorKind::UnexpectedEof => return Ok(None),
        Err(e) => return Err(e),
    }
    let len = u32::from_be_bytes(len) as usize;
    if len > max {
        return Err(io::Error::new(
            io::ErrorKind::InvalidData,
            format!("a controller frame of {len} bytes is over the {max}-byte limit"),
        ));
    }
    let mut body = vec![0u8; len];
    r.read_exact(&mut body).await?;
    decode_body(&body).map(Some)
}
