//! The controller log against openraft's own storage test suite, and across reopening:
//! what was acknowledged survives, a torn tail is cut, purged entries stay gone.

use corelog_controller::RaftLog;
use openraft::storage::{RaftLogStorage, RaftStateMachine};
use openraft::testing::{log_id, StoreBuilder, Suite};
use openraft::{
    BasicNode, Entry, EntryPayload, LogId, OptionalSend, RaftLogReader, RaftSnapshotBuilder,
    Snapshot, SnapshotMeta, StorageError, StoredMembership, Vote,
};
use std::io::Cursor;
use std::sync::{Arc, Mutex};

openraft::declare_raft_types!(
    pub TestConfig:
        D = String,
        R = String,
);

type NodeId = u64;

/// A state machine for the suite: the applied commands, in order; snapshots are them as
/// JSON. The suite checks the log store and the state machine together.
#[derive(Default, Clone)]
struct Applied {
    inner: Arc<Mutex<AppliedState>>,
}

#[derive(Default)]
struct AppliedState {
    last_applied: Option<LogId<NodeId>>,
    membership: StoredMembership<NodeId, BasicNode>,
    commands: Vec<String>,
    snapshot: Option<(SnapshotMeta<NodeId, BasicNode>, Vec<u8>)>,
}

impl RaftSnapshotBuilder<TestConfig> for Applied {
    async fn build_snapshot(&mut self) -> Result<Snapshot<TestConfig>, StorageError<NodeId>> {
        let mut st = self.inner.lock().unwrap();
        let data = serde_json::to_vec(&st.commands).unwrap();
        let meta = SnapshotMeta {
            last_log_id: st.last_applied,
            last_membership: st.membership.clone(),
            snapshot_id: format!("{:?}", st.last_applied),
        };
        st.snapshot = Some((meta.clone(), data.clone()));
        Ok(Snapshot {
            meta,
            snapshot: Box::new(Cursor::new(data)),
        })
    }
}

impl RaftStateMachine<TestConfig> for Applied {
    type SnapshotBuilder = Applied;

    async fn applied_state(
        &mut self,
    ) -> Result<(Option<LogId<NodeId>>, StoredMembership<NodeId, BasicNode>), StorageError<NodeId>>
    {
        let st = self.inner.lock().unwrap();
        Ok((st.last_applied, st.membership.clone()))
    }

    async fn apply<I>(&mut self, entries: I) -> Result<Vec<String>, StorageError<NodeId>>
    where
        I: IntoIterator<Item = Entry<TestConfig>> + OptionalSend,
        I::IntoIter: OptionalSend,
    {
        let mut st = self.inner.lock().unwrap();
        let mut out = Vec::new();
        for e in entries {
            st.last_applied = Some(e.log_id);
            match e.payload {
                EntryPayload::Blank => {}
                EntryPayload::Normal(c) => st.commands.push(c),
                EntryPayload::Membership(m) => {
                    st.membership = StoredMembership::new(Some(e.log_id), m)
                }
            }
            out.push(String::new());
        }
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
        let mut st = self.inner.lock().unwrap();
        st.commands = serde_json::from_slice(&data).unwrap();
        st.last_applied = meta.last_log_id;
        st.membership = meta.last_membership.clone();
        st.snapshot = Some((meta.clone(), data));
        Ok(())
    }

    async fn get_current_snapshot(
        &mut self,
    ) -> Result<Option<Snapshot<TestConfig>>, StorageError<NodeId>> {
        let st = self.inner.lock().unwrap();
        Ok(st.snapshot.as_ref().map(|(meta, data)| Snapshot {
            meta: meta.clone(),
            snapshot: Box::new(Cursor::new(data.clone())),
        }))
    }
}

struct OnDisk;

impl StoreBuilder<TestConfig, RaftLog<TestConfig>, Applied, tempfile::TempDir> for OnDisk {
    async fn build(
        &self,
    ) -> Result<(tempfile::TempDir, RaftLog<TestConfig>, Applied), StorageError<NodeId>> {
        let dir = tempfile::tempdir().unwrap();
        let log = RaftLog::open(dir.path()).unwrap();
        Ok((dir, log, Applied::default()))
    }
}

#[test]
fn passes_openraft_storage_suite() {
    Suite::test_all(OnDisk).expect("openraft's storage suite");
}

fn entry(term: u64, index: u64, command: &str) -> Entry<TestConfig> {
    Entry {
        log_id: log_id(term, 1, index),
        payload: EntryPayload::Normal(command.to_owned()),
    }
}

async fn append(log: &mut RaftLog<TestConfig>, entries: Vec<Entry<TestConfig>>) {
    // The flushed callback needs a running Raft; blocking_append waits on it itself.
    openraft::storage::RaftLogStorageExt::blocking_append(log, entries)
        .await
        .expect("append");
}

async fn all(log: &mut RaftLog<TestConfig>) -> Vec<(u64, String)> {
    log.try_get_log_entries(..)
        .await
        .unwrap()
        .into_iter()
        .map(|e| match e.payload {
            EntryPayload::Normal(c) => (e.log_id.index, c),
            _ => (e.log_id.index, String::new()),
        })
        .collect()
}

#[tokio::test(flavor = "current_thread")]
async fn reopening_keeps_what_was_written_and_cuts_a_torn_tail() {
    let dir = tempfile::tempdir().unwrap();
    {
        let mut log = RaftLog::<TestConfig>::open(dir.path()).unwrap();
        append(
            &mut log,
            (1..=5).map(|i| entry(1, i, &format!("c{i}"))).collect(),
        )
        .await;
        log.save_vote(&Vote::new(3, 2)).await.unwrap();
        log.save_committed(Some(log_id(1, 1, 4))).await.unwrap();
        log.truncate(log_id(1, 1, 5)).await.unwrap();
        append(&mut log, vec![entry(2, 5, "c5'")]).await;
    }
    // A crash in the middle of the next append: half a frame at the end.
    let path = dir.path().join("raft.log");
    let mut bytes = std::fs::read(&path).unwrap();
    let whole = bytes.len();
    bytes.extend_from_slice(&[0, 0, 0, 40, 1, 2, 3, 4, b'{']);
    std::fs::write(&path, &bytes).unwrap();

    let mut log = RaftLog::<TestConfig>::open(dir.path()).unwrap();
    assert_eq!(
        std::fs::metadata(&path).unwrap().len() as usize,
        whole,
        "torn tail cut"
    );
    let want: Vec<(u64, String)> = vec![
        (1, "c1".into()),
        (2, "c2".into()),
        (3, "c3".into()),
        (4, "c4".into()),
        (5, "c5'".into()),
    ];
    assert_eq!(all(&mut log).await, want);
    assert_eq!(log.read_vote().await.unwrap(), Some(Vote::new(3, 2)));
    assert_eq!(log.read_committed().await.unwrap(), Some(log_id(1, 1, 4)));
    let state = log.get_log_state().await.unwrap();
    assert_eq!(state.last_log_id, Some(log_id(2, 1, 5)));
    // Appending goes on after the cut.
    append(&mut log, vec![entry(2, 6, "c6")]).await;
    drop(log);
    let mut log = RaftLog::<TestConfig>::open(dir.path()).unwrap();
    assert_eq!(all(&mut log).await.last(), Some(&(6, "c6".to_owned())));
}

#[tokio::test(flavor = "current_thread")]
async fn purged_entries_stay_gone_and_the_file_shrinks() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("raft.log");
    let mut log = RaftLog::<TestConfig>::open(dir.path()).unwrap();
    append(
        &mut log,
        (1..=10).map(|i| entry(1, i, &"x".repeat(100))).collect(),
    )
    .await;
    let full = std::fs::metadata(&path).unwrap().len();
    log.purge(log_id(1, 1, 3)).await.unwrap();
    assert_eq!(
        std::fs::metadata(&path).unwrap().len(),
        full,
        "a small purge only records"
    );
    log.purge(log_id(1, 1, 7)).await.unwrap();
    assert!(
        std::fs::metadata(&path).unwrap().len() < full / 2,
        "more than half purged: rewritten"
    );
    append(&mut log, vec![entry(1, 11, "y")]).await;
    drop(log);
    for _ in 0..2 {
        let mut log = RaftLog::<TestConfig>::open(dir.path()).unwrap();
        let indexes: Vec<u64> = all(&mut log).await.into_iter().map(|(i, _)| i).collect();
        assert_eq!(indexes, vec![8, 9, 10, 11]);
        let state = log.get_log_state().await.unwrap();
        assert_eq!(state.last_purged_log_id, Some(log_id(1, 1, 7)));
        assert_eq!(state.last_log_id, Some(log_id(1, 1, 11)));
    }
    // Purged past everything: the log is empty but knows where it stands.
    let mut log = RaftLog::<TestConfig>::open(dir.path()).unwrap();
    log.purge(log_id(1, 1, 11)).await.unwrap();
    drop(log);
    let mut log = RaftLog::<TestConfig>::open(dir.path()).unwrap();
    assert!(all(&mut log).await.is_empty());
    assert_eq!(
        log.get_log_state().await.unwrap().last_log_id,
        Some(log_id(1, 1, 11))
    );
}

/// A frame whose checksum holds but whose entry does not decode is not a torn append:
/// cutting there would drop acknowledged entries, so the log refuses to open.
#[tokio::test(flavor = "current_thread")]
async fn an_undecodable_entry_is_an_error_not_a_cut() {
    let dir = tempfile::tempdir().unwrap();
    {
        let mut log = RaftLog::<TestConfig>::open(dir.path()).unwrap();
        append(&mut log, (1..=3).map(|i| entry(1, i, "c")).collect()).await;
    }
    let path = dir.path().join("raft.log");
    let mut bytes = std::fs::read(&path).unwrap();
    let body = b"{\"not\":\"an entry\"}";
    let mut frame = (body.len() as u32).to_be_bytes().to_vec();
    frame.extend_from_slice(&crc32c::crc32c(body).to_be_bytes());
    frame.extend_from_slice(body);
    // Put it first, so the three good entries follow it.
    frame.append(&mut bytes);
    std::fs::write(&path, &frame).unwrap();
    let err = RaftLog::<TestConfig>::open(dir.path())
        .err()
        .expect("refused");
    assert_eq!(err.kind(), std::io::ErrorKind::InvalidData);
    assert_eq!(std::fs::read(&path).unwrap(), frame, "nothing cut");
}
