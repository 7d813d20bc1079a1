//! openraft's state machine: the metadata image, applied from the log, published to
//! subscribers, and snapshotted to `snapshot` in the controller's directory.
//!
//! Persistence is by snapshot (openraft's "persistent snapshot" mode): applying changes
//! memory only; a snapshot is written whole (temporary file, fsync, rename, directory
//! fsync) with a CRC32C of its contents in front, and at start the image is the snapshot
//! with the committed log after it re-applied by openraft. A snapshot that fails its CRC
//! refuses the start: it stands for purged log entries that exist nowhere else here.
//!
//! Exactly-once proposals: every entry carries the proposer's id for it; the outcomes of
//! the last `RECENT_PROPOSALS_MAX` ids are kept (and snapshotted), and an entry whose id
//! is among them is not applied again but answers the outcome it had. A proposer that
//! retries after a lost answer therefore never applies a command twice.
//!
//! Publishing: after each batch of applied entries the image is published as an
//! `Arc<MetadataImage>` on a watch channel; readers hold their `Arc` as long as they
//! like, and the next apply copies the image only while one is still held.
//!
//! Invariants: `last_applied` only grows; the published image's `applied` equals the
//! index of `last_applied`; `recent` holds each id once.

use crate::command::{Command, Outcome};
use crate::image::MetadataImage;
use openraft::storage::{RaftStateMachine, Snapshot};
use openraft::{
    BasicNode, Entry, EntryPayload, LogId, OptionalSend, RaftSnapshotBuilder, SnapshotMeta,
    StorageError, StorageIOError, StoredMembership,
};
use serde::{Deserialize, Serialize};
use std::collections::{HashMap, VecDeque};
use std::fs::{self, File};
use std::io::{self, Cursor, Write};
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex, MutexGuard};
use tokio::sync::watch;
use uuid::Uuid;

openraft::declare_raft_types!(
    /// The controller quorum's openraft types: entries are proposals of metadata
    /// commands, answered with their outcome.
    pub MetadataRaft:
        D = Proposal,
        R = Applied,
        NodeId = u64,
        Node = BasicNode,
        SnapshotData = Cursor<Vec<u8>>,
);

/// A command and the id its proposer gave it (the same on every retry).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Proposal {
    pub id: Uuid,
    pub command: Command,
}

/// What applying a proposal answered, and the log index it was first applied at.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Applied {
    pub index: u64,
    pub outcome: Outcome,
}

/// How many proposals' outcomes are remembered for retries.
pub const RECENT_PROPOSALS_MAX: usize = 4096;
const SNAPSHOT_FILE: &str = "snapshot";

type NodeId = u64;

/// The state a snapshot holds: the image and the remembered outcomes. As JSON, it is the
/// snapshot's data openraft ships to a follower that installs it.
#[derive(Debug, Clone, Default, Serialize, Deserialize)]
pub struct Contents {
    pub image: MetadataImage,
    pub recent: VecDeque<(Uuid, Applied)>,
}

#[derive(Serialize, Deserialize)]
struct SnapshotFile {
    meta: SnapshotMeta<NodeId, BasicNode>,
    contents: Contents,
}

struct State {
    image: Arc<MetadataImage>,
    recent: VecDeque<(Uuid, Applied)>,
    recent_ids: HashMap<Uuid, Applied>,
    last_applied: Option<LogId<NodeId>>,
    membership: StoredMembership<NodeId, BasicNode>,
    /// The latest snapshot: its meta and its data (`Contents` as JSON).
    snapshot: Option<(SnapshotMeta<NodeId, BasicNode>, Vec<u8>)>,
}

/// The state machine; clones share it (openraft's snapshot builder is one).
#[derive(Clone)]
pub struct MetadataStateMachine {
    dir: PathBuf,
    state: Arc<Mutex<State>>,
    published: Arc<watch::Sender<Arc<MetadataImage>>>,
}

impl MetadataStateMachine {
    /// Opens the state machine in `dir`, from its snapshot if there is one.
    pub fn open(dir: &Path) -> io::Result<MetadataStateMachine> {
        fs::create_dir_all(dir)?;
        let (contents, last_applied, membership, snapshot) = match read_snapshot(dir)? {
            Some((meta, contents, data)) => (
                contents,
                meta.last_log_id,
                meta.last_membership.clone(),
                Some((meta, data)),
            ),
            None => (Contents::default(), None, StoredMembership::default(), None),
        };
        let image = Arc::new(contents.image);
        let (tx, _) = watch::channel(image.clone());
        let recent_ids = contents.recent.iter().cloned().collect();
        Ok(MetadataStateMachine {
            dir: dir.to_path_buf(),
            state: Arc::new(Mutex::new(State {
                image,
                recent: contents.recent,
                recent_ids,
                last_applied,
                membership,
                snapshot,
            })),
            published: Arc::new(tx),
        })
    }

    /// The latest applied image, and every later one as it is applied.
    pub fn subscribe(&self) -> watch::Receiver<Arc<MetadataImage>> {
        self.published.subscribe()
    }

    pub fn image(&self) -> Arc<MetadataImage> {
        self.lock().image.clone()
    }

    /// The outcome of proposal `id` if it has been applied (and is still remembered).
    pub fn answered(&self, id: &Uuid) -> Option<Applied> {
        self.lock().recent_ids.get(id).cloned()
    }

    fn lock(&self) -> MutexGuard<'_, State> {
        // A panic while holding the lock is a bug that already stopped the controller.
        self.state.lock().unwrap_or_else(|p| p.into_inner())
    }
}

fn io_error(e: impl std::fmt::Display) -> io::Error {
    io::Error::new(io::ErrorKind::InvalidData, e.to_string())
}

/// The snapshot file in `dir`, decoded (`decode_snapshot_file`), and its data.
fn read_snapshot(
    dir: &Path,
) -> io::Result<Option<(SnapshotMeta<NodeId, BasicNode>, Contents, Vec<u8>)>> {
    let path = dir.join(SNAPSHOT_FILE);
    let bytes = match fs::read(&path) {
        Ok(b) => b,
        Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(None),
        Err(e) => return Err(e),
    };
    let (meta, contents) = decode_snapshot_file(&bytes)
        .map_err(|why| io_error(format!("{}: {why}", path.display())))?;
    let data = encode_snapshot_data(&contents)?;
    Ok(Some((meta, contents, data)))
}

/// A snapshot file's bytes as opening reads them (it calls this; so do the fuzz targets,
/// `tools/fuzz-targets`): `[crc32c of the rest: u32 BE][{"meta", "contents"} as JSON]`,
/// the CRC checked, then the contents loaded as `decode_snapshot_data` loads them.
pub fn decode_snapshot_file(
    bytes: &[u8],
) -> Result<(SnapshotMeta<NodeId, BasicNode>, Contents), String> {
    let (crc, body) = bytes.split_at_checked(4).ok_or("shorter than its header")?;
    let crc = u32::from_be_bytes(crc.try_into().map_err(|_| "header")?);
    if crc32c::crc32c(body) != crc {
        return Err("CRC mismatch: the snapshot is corrupt".into());
    }
    let file: SnapshotFile = serde_json::from_slice(body).map_err(|e| e.to_string())?;
    Ok((file.meta, load(file.contents)?))
}

/// A snapshot's data (`Contents` as JSON) as installing it from the leader reads it (it
/// calls this): the image re-indexed, and refused unless it keeps its invariants.
pub fn decode_snapshot_data(data: &[u8]) -> Result<Contents, String> {
    load(serde_json::from_slice(data).map_err(|e| e.to_string())?)
}

fn load(mut contents: Contents) -> Result<Contents, String> {
    contents.image.reindex();
    contents.image.check_invariants()?;
    // A newer release's snapshot: what it finalized, this release cannot serve.
    crate::features::check_supported(&contents.image.features)?;
    Ok(contents)
}

/// A snapshot's data: `Contents` as JSON.
pub fn encode_snapshot_data(contents: &Contents) -> io::Result<Vec<u8>> {
    serde_json::to_vec(contents).map_err(io_error)
}

/// A snapshot file's bytes, as `write_snapshot` writes them.
pub fn encode_snapshot_file(
    meta: &SnapshotMeta<NodeId, BasicNode>,
    contents: &Contents,
) -> io::Result<Vec<u8>> {
    #[derive(Serialize)]
    struct Ref<'a> {
        meta: &'a SnapshotMeta<NodeId, BasicNode>,
        contents: &'a Contents,
    }
    let body = serde_json::to_vec(&Ref { meta, contents }).map_err(io_error)?;
    let mut file = Vec::with_capacity(4 + body.len());
    file.extend_from_slice(&crc32c::crc32c(&body).to_be_bytes());
    file.extend_from_slice(&body);
    Ok(file)
}

/// Replaces the snapshot file atomically.
fn write_snapshot(
    dir: &Path,
    meta: &SnapshotMeta<NodeId, BasicNode>,
    contents: &Contents,
) -> io::Result<()> {
    let bytes = encode_snapshot_file(meta, contents)?;
    let tmp = dir.join(format!("{SNAPSHOT_FILE}.tmp"));
    let mut f = File::create(&tmp)?;
    f.write_all(&bytes)?;
    f.sync_all()?;
    drop(f);
    fs::rename(&tmp, dir.join(SNAPSHOT_FILE))?;
    File::open(dir)?.sync_all()
}

fn sm_error(e: io::Error) -> StorageError<NodeId> {
    StorageIOError::write_state_machine(&e).into()
}

impl State {
    fn remember(&mut self, id: Uuid, applied: Applied) {
        if self.recent.len() == RECENT_PROPOSALS_MAX {
            if let Some((old, _)) = self.recent.pop_front() {
                self.recent_ids.remove(&old);
            }
        }
        self.recent.push_back((id, applied.clone()));
        self.recent_ids.insert(id, applied);
        debug_assert_eq!(self.recent.len(), self.recent_ids.len());
    }

    fn contents(&self) -> Contents {
        Contents {
            image: (*self.image).clone(),
            recent: self.recent.clone(),
        }
    }
}

impl RaftSnapshotBuilder<MetadataRaft> for MetadataStateMachine {
    async fn build_snapshot(&mut self) -> Result<Snapshot<MetadataRaft>, StorageError<NodeId>> {
        let (meta, contents) = {
            let st = self.lock();
            let meta = SnapshotMeta {
                last_log_id: st.last_applied,
                last_membership: st.membership.clone(),
                snapshot_id: format!(
                    "{}-{}",
                    st.last_applied.map(|l| l.index).unwrap_or(0),
                    Uuid::new_v4().simple()
                ),
            };
            (meta, st.contents())
        };
        write_snapshot(&self.dir, &meta, &contents)
            .map_err(|e| StorageIOError::write_snapshot(Some(meta.signature()), &e))?;
        let data = encode_snapshot_data(&contents).map_err(sm_error)?;
        self.lock().snapshot = Some((meta.clone(), data.clone()));
        tracing::info!(
            index = meta.last_log_id.map(|l| l.index).unwrap_or(0),
            bytes = data.len(),
            "metadata snapshot written"
        );
        Ok(Snapshot {
            meta,
            snapshot: Box::new(Cursor::new(data)),
        })
    }
}

impl RaftStateMachine<MetadataRaft> for MetadataStateMachine {
    type SnapshotBuilder = MetadataStateMachine;

    async fn applied_state(
        &mut self,
    ) -> Result<(Option<LogId<NodeId>>, StoredMembership<NodeId, BasicNode>), StorageError<NodeId>>
    {
        let st = self.lock();
        Ok((st.last_applied, st.membership.clone()))
    }

    async fn apply<I>(&mut self, entries: I) -> Result<Vec<Applied>, StorageError<NodeId>>
    where
        I: IntoIterator<Item = Entry<MetadataRaft>> + OptionalSend,
        I::IntoIter: OptionalSend,
    {
        let mut st = self.lock();
        let mut out = Vec::new();
        for e in entries {
            debug_assert!(st.last_applied.is_none_or(|l| l.index < e.log_id.index));
            st.last_applied = Some(e.log_id);
            let index = e.log_id.index;
            let applied = match e.payload {
                EntryPayload::Blank => Applied {
                    index,
                    outcome: Outcome::None,
                },
                EntryPayload::Membership(m) => {
                    st.membership = StoredMembership::new(Some(e.log_id), m);
                    Applied {
                        index,
                        outcome: Outcome::None,
                    }
                }
                EntryPayload::Normal(p) => match st.recent_ids.get(&p.id) {
                    Some(done) => done.clone(),
                    None => {
                        let outcome = Arc::make_mut(&mut st.image).apply(index, &p.command);
                        // A record that finalizes levels this release cannot serve (a newer
                        // release's log): refused, which stops this node's controller, rather
                        // than served at levels it does not implement.
                        if let Err(why) = crate::features::check_supported(&st.image.features) {
                            let refused = io::Error::new(
                                io::ErrorKind::InvalidData,
                                format!("metadata log record {index}: {why}"),
                            );
                            tracing::error!(error = %refused, "refusing to apply the metadata log");
                            return Err(StorageIOError::apply(e.log_id, &refused).into());
                        }
                        let applied = Applied { index, outcome };
                        st.remember(p.id, applied.clone());
                        applied
                    }
                },
            };
            // Entries openraft writes itself advance the image's index too.
            let image = Arc::make_mut(&mut st.image);
            if image.applied < index {
                image.applied = index;
            }
            out.push(applied);
        }
        let image = st.image.clone();
        drop(st);
        self.published.send_replace(image);
        Ok(out)
    }

    async fn get_snapshot_builder(&mut self) -> Self::SnapshotBuilder {
        self.clone()
    }

    async fn begin_receiving_snapshot(
        &mut self,
    ) -> Result<Box<Cursor<Vec<u8>>>, StorageError<NodeId>> {
        Ok(Box::new(Cursor::new(Vec::new())))
    }

    async fn install_snapshot(
        &mut self,
        meta: &SnapshotMeta<NodeId, BasicNode>,
        snapshot: Box<Cursor<Vec<u8>>>,
    ) -> Result<(), StorageError<NodeId>> {
        let data = snapshot.into_inner();
        let read_err = |e: io::Error| {
            StorageError::from(StorageIOError::read_snapshot(Some(meta.signature()), &e))
        };
        let contents = decode_snapshot_data(&data).map_err(|e| read_err(io_error(e)))?;
        write_snapshot(&self.dir, meta, &contents)
            .map_err(|e| StorageIOError::write_snapshot(Some(meta.signature()), &e))?;
        let image = Arc::new(contents.image);
        {
            let mut st = self.lock();
            st.image = image.clone();
            st.recent_ids = contents.recent.iter().cloned().collect();
            st.recent = contents.recent;
            st.last_applied = meta.last_log_id;
            st.membership = meta.last_membership.clone();
            st.snapshot = Some((meta.clone(), data));
        }
        tracing::info!(
            index = meta.last_log_id.map(|l| l.index).unwrap_or(0),
            "metadata snapshot installed"
        );
        self.published.send_replace(image);
        Ok(())
    }

    async fn get_current_snapshot(
        &mut self,
    ) -> Result<Option<Snapshot<MetadataRaft>>, StorageError<NodeId>> {
        let st = self.lock();
        Ok(st.snapshot.as_ref().map(|(meta, data)| Snapshot {
            meta: meta.clone(),
            snapshot: Box::new(Cursor::new(data.clone())),
        }))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::command::{NewTopic, Outcome};
    use openraft::{CommittedLeaderId, LogId};
    use std::collections::BTreeMap;

    fn entry(index: u64, id: Uuid, command: Command) -> Entry<MetadataRaft> {
        Entry {
            log_id: LogId::new(CommittedLeaderId::new(1, 1), index),
            payload: EntryPayload::Normal(Proposal { id, command }),
        }
    }

    fn register(id: i32) -> Command {
        Command::RegisterBroker {
            id,
            incarnation: Uuid::from_u128(id as u128),
            endpoint: crate::image::Endpoint {
                host: "h".into(),
                port: 1,
            },
            listeners: Vec::new(),
            controller_addr: String::new(),
            rack: None,
            supported_features: None,
            log_dirs: Vec::new(),
        }
    }

    fn run<F: std::future::Future>(f: F) -> F::Output {
        tokio::runtime::Builder::new_current_thread()
            .build()
            .expect("runtime")
            .block_on(f)
    }

    #[test]
    fn a_retried_proposal_applies_once_across_a_snapshot_and_reopen() {
        let dir = tempfile::tempdir().expect("tempdir");
        let mut sm = MetadataStateMachine::open(dir.path()).expect("open");
        let create = Command::CreateTopics {
            topics: vec![NewTopic {
                name: "t".into(),
                id: Uuid::from_u128(7),
                partitions: 1,
                replication_factor: 1,
                assignments: None,
                configs: BTreeMap::new(),
            }],
        };
        let pid = Uuid::new_v4();
        let out = run(sm.apply([
            entry(1, Uuid::new_v4(), register(1)),
            entry(
                2,
                Uuid::new_v4(),
                Command::UnfenceBroker { id: 1, epoch: 1 },
            ),
            entry(3, pid, create.clone()),
            entry(4, pid, create.clone()),
        ]))
        .expect("apply");
        let first = Applied {
            index: 3,
            outcome: Outcome::Items(vec![Ok(())]),
        };
        assert_eq!(out[2], first);
        assert_eq!(out[3], first, "the retry answers the first outcome");
        assert_eq!(sm.image().applied, 4);
        run(sm.build_snapshot()).expect("snapshot");

        let mut again = MetadataStateMachine::open(dir.path()).expect("reopen");
        assert_eq!(
            serde_json::to_value(&*again.image()).unwrap(),
            serde_json::to_value(&*sm.image()).unwrap()
        );
        let (applied, _) = run(again.applied_state()).expect("state");
        assert_eq!(applied.map(|l| l.index), Some(4));
        let out = run(again.apply([entry(5, pid, create)])).expect("apply");
        assert_eq!(out[0], first);
        assert_eq!(again.image().topics.len(), 1);
    }

    /// Every finite f64, as a client quota, comes back bit for bit from the log's frames,
    /// the snapshot file and the controller port (serde_json's `float_roundtrip`: without
    /// it 99.99999999999999 decoded as 100.0, so the proposer and the other nodes held
    /// different quotas).
    #[test]
    fn quota_values_survive_every_encoding_exactly() {
        use crate::client_quotas::{EntityName, QuotaAlteration, QuotaEntity, QuotaOp};
        let mut values = vec![99.99999999999999, 1116039.5085255767, 0.1, 5e-324, -0.0];
        let mut x: u64 = 0x9e37_79b9_7f4a_7c15;
        while values.len() < 20_000 {
            x ^= x >> 12;
            x ^= x << 25;
            x ^= x >> 27;
            let v = f64::from_bits(x.wrapping_mul(0x2545_f491_4f6c_dd1d));
            if v.is_finite() {
                values.push(v);
            }
        }
        let entity = QuotaEntity {
            user: Some(EntityName::Named("u".into())),
            client_id: None,
        };
        let command = Command::AlterClientQuotas {
            alterations: vec![QuotaAlteration {
                entity: entity.clone(),
                ops: values
                    .iter()
                    .enumerate()
                    .map(|(i, v)| QuotaOp::Set(format!("k{i}"), *v))
                    .collect(),
            }],
        };
        let bits = |c: &Command| -> Vec<u64> {
            let Command::AlterClientQuotas { alterations } = c else {
                panic!("{c:?}")
            };
            alterations[0]
                .ops
                .iter()
                .map(|op| match op {
                    QuotaOp::Set(_, v) => v.to_bits(),
                    QuotaOp::Remove(_) => panic!("{op:?}"),
                })
                .collect()
        };
        let want: Vec<u64> = values.iter().map(|v| v.to_bits()).collect();

        let e = entry(1, Uuid::from_u128(1), command.clone());
        let mut frames = Vec::new();
        crate::raft_log::encode_frame(&e, &mut frames).expect("encodes");
        let log = crate::raft_log::decode_log::<MetadataRaft>(&frames, None).expect("decodes");
        let EntryPayload::Normal(p) = &log.entries[&1].1.payload else {
            panic!("not a proposal")
        };
        assert_eq!(bits(&p.command), want, "through the log");

        let body = crate::rpc::encode_body(&command).expect("encodes");
        let again: Command = crate::rpc::decode_body(&body).expect("decodes");
        assert_eq!(bits(&again), want, "through the controller port");

        let mut contents = Contents::default();
        contents.image.client_quotas.apply(&QuotaAlteration {
            entity: entity.clone(),
            ops: vec![QuotaOp::Set("request_percentage".into(), 99.99999999999999)],
        });
        let file = encode_snapshot_file(&SnapshotMeta::default(), &contents).expect("encodes");
        let (_, loaded) = decode_snapshot_file(&file).expect("loads");
        assert_eq!(
            loaded
                .image
                .client_quotas
                .get(&entity)
                .map(|q| q["request_percentage"].to_bits()),
            Some(99.99999999999999f64.to_bits()),
            "through the snapshot"
        );
    }

    #[test]
    fn a_corrupt_snapshot_refuses_the_open() {
        let dir = tempfile::tempdir().expect("tempdir");
        let mut sm = MetadataStateMachine::open(dir.path()).expect("open");
        run(sm.apply([entry(1, Uuid::new_v4(), register(1))])).expect("apply");
        run(sm.build_snapshot()).expect("snapshot");
        let path = dir.path().join(SNAPSHOT_FILE);
        let mut bytes = fs::read(&path).expect("read");
        let last = bytes.len() - 2;
        bytes[last] ^= 0x20;
        fs::write(&path, &bytes).expect("write");
        let err = MetadataStateMachine::open(dir.path())
            .err()
            .expect("refused");
        assert!(err.to_string().contains("CRC mismatch"), "{err}");
    }
}
