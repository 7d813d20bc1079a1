//! Producer-state snapshot files: `<offset>.snapshot` in the partition directory, the
//! idempotent-producer state (see `producer_state`) covering every batch below `offset`.
//!
//! Written when a segment rolls (offset = the new segment's base) and on a clean close
//! (offset = the log end), as Kafka does. At open the newest snapshot at or below the
//! recovered log end is loaded, the batches it remembers at or past its offset are dropped
//! (a snapshot taken at a roll may already list batches still waiting to be written), and
//! the log from that offset on is replayed. So after a clean stop nothing is replayed, and
//! after a crash at most the batches written since the last roll are.
//!
//! Format (big-endian): `magic "CLPS"`, `version u16 = 3`, `crc32c u32` of everything after
//! it, `count u32`, then per producer: `producer_id i64, epoch i16, last_seen_ms i64,
//! last_timestamp_ms i64, coordinator_epoch i32, current_txn_first_offset i64 (-1: none),
//! batches u8`, and per batch `first_seq i32, last_seq i32, first_offset i64,
//! next_offset i64`; then (version 4) `count u32` and per transaction whose marker was not
//! yet below the high watermark: `producer_id i64, first_offset i64, last_offset i64,
//! aborted u8`. A file that fails any check is ignored (the next older one is used),
//! never trusted in part. Older versions are read too: version 3 lacks the completed
//! transactions (none held back), version 2 also the two transaction fields (no
//! coordinator, no open transaction), version 1 also `last_timestamp_ms` (unknown, -1).
//!
//! The completed transactions are kept because the replay after a snapshot only sees the
//! markers past it: a marker before it that the high watermark had not passed would be
//! forgotten, and a replica leading after the reopen would give a `read_committed`
//! consumer the transaction's records while its marker could still be lost.
//!
//! Invariant: a snapshot file is complete or absent (`checkpoint::replace_file`: written
//! to a temporary name, synced, then renamed). One is kept per roll, as Kafka keeps one
//! per segment, for as long as it can start a replay: every snapshot at or past the log
//! start, and the newest below it. A follower's truncation deletes the snapshots past its
//! cut, so the ones of earlier rolls are what its next open starts from; with only the
//! newest kept, two cuts in a row could leave none, and the replay that rebuilt the state
//! then would miss a transaction opened further back (a `read_committed` consumer given
//! its records before its marker).

use super::producer_state::{
    BatchMeta, CompletedTxn, ProducerEntry, ProducerState, BATCHES_RETAINED,
};
use crate::fs::Fs;
use std::collections::VecDeque;
use std::path::{Path, PathBuf};

pub const SNAPSHOT_SUFFIX: &str = "snapshot";
const MAGIC: &[u8; 4] = b"CLPS";
const VERSION: u16 = 4;
/// The version before the completed transactions, still read.
const VERSION_3: u16 = 3;
/// The version before the transaction fields, still read.
const VERSION_2: u16 = 2;
/// The version before `last_timestamp_ms`, still read.
const VERSION_1: u16 = 1;
const HEADER_LEN: usize = 4 + 2 + 4;
/// Smallest entry (version 1); version 2 adds 8 bytes, version 3 another 12.
const ENTRY_LEN: usize = 8 + 2 + 8 + 1;
const BATCH_LEN: usize = 4 + 4 + 8 + 8;
const COMPLETED_LEN: usize = 8 + 8 + 8 + 1;

pub fn path(dir: &Path, offset: i64) -> PathBuf {
    dir.join(file_name(offset))
}

fn file_name(offset: i64) -> String {
    format!("{offset:020}.{SNAPSHOT_SUFFIX}")
}

/// Offsets of the snapshot files in `dir`, ascending.
pub fn list(fs: &dyn Fs, dir: &Path) -> std::io::Result<Vec<i64>> {
    let mut out = Vec::new();
    for entry in fs.read_dir(dir)? {
        let Some(stem) = entry
            .file_name()
            .and_then(|n| n.to_str())
            .and_then(|n| n.strip_suffix(SNAPSHOT_SUFFIX))
            .and_then(|n| n.strip_suffix('.'))
        else {
            continue;
        };
        if stem.len() == 20 && stem.bytes().all(|b| b.is_ascii_digit()) {
            if let Ok(offset) = stem.parse() {
                out.push(offset);
            }
        }
    }
    out.sort_unstable();
    Ok(out)
}

pub fn encode(state: &ProducerState) -> Vec<u8> {
    let mut body = Vec::with_capacity(4 + state.len() * (ENTRY_LEN + 2 * BATCH_LEN));
    body.extend_from_slice(&(state.len() as u32).to_be_bytes());
    for (pid, e) in state.entries() {
        debug_assert!(e.batches.len() <= BATCHES_RETAINED);
        body.extend_from_slice(&pid.to_be_bytes());
        body.extend_from_slice(&e.epoch.to_be_bytes());
        body.extend_from_slice(&e.last_seen_ms.to_be_bytes());
        body.extend_from_slice(&e.last_timestamp_ms.to_be_bytes());
        body.extend_from_slice(&e.coordinator_epoch.to_be_bytes());
        body.extend_from_slice(&e.current_txn_first_offset.unwrap_or(-1).to_be_bytes());
        body.push(e.batches.len() as u8);
        for b in &e.batches {
            body.extend_from_slice(&b.first_seq.to_be_bytes());
            body.extend_from_slice(&b.last_seq.to_be_bytes());
            body.extend_from_slice(&b.first_offset.to_be_bytes());
            body.extend_from_slice(&b.next_offset.to_be_bytes());
        }
    }
    let completed: Vec<_> = state.unreplicated().collect();
    body.extend_from_slice(&(completed.len() as u32).to_be_bytes());
    for t in completed {
        body.extend_from_slice(&t.producer_id.to_be_bytes());
        body.extend_from_slice(&t.first_offset.to_be_bytes());
        body.extend_from_slice(&t.last_offset.to_be_bytes());
        body.push(u8::from(t.aborted));
    }
    let mut out = Vec::with_capacity(HEADER_LEN + body.len());
    out.extend_from_slice(MAGIC);
    out.extend_from_slice(&VERSION.to_be_bytes());
    out.extend_from_slice(&crc32c::crc32c(&body).to_be_bytes());
    out.extend_from_slice(&body);
    out
}

#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum SnapshotError {
    #[error("not a producer snapshot (bad magic)")]
    Header,
    /// Newer than this release (it writes `VERSION` and reads 1 to `VERSION`).
    #[error("producer snapshot version {0}, which this release does not read (it reads 1 to {VERSION}); the state is rebuilt from the log")]
    UnknownVersion(u16),
    #[error("checksum mismatch")]
    Checksum,
    #[error("truncated or malformed body")]
    Malformed,
}

struct Reader<'a>(&'a [u8]);

impl Reader<'_> {
    fn take<const N: usize>(&mut self) -> Result<[u8; N], SnapshotError> {
        let head = self.0.get(..N).ok_or(SnapshotError::Malformed)?;
        let out: [u8; N] = head.try_into().map_err(|_| SnapshotError::Malformed)?;
        self.0 = self.0.get(N..).unwrap_or_default();
        Ok(out)
    }
    fn i64(&mut self) -> Result<i64, SnapshotError> {
        self.take().map(i64::from_be_bytes)
    }
    fn i32(&mut self) -> Result<i32, SnapshotError> {
        self.take().map(i32::from_be_bytes)
    }
}

pub fn decode(bytes: &[u8], now_ms: i64) -> Result<ProducerState, SnapshotError> {
    let version = bytes
        .get(4..6)
        .and_then(|b| <[u8; 2]>::try_from(b).ok())
        .map(u16::from_be_bytes);
    let Some(version) = version.filter(|_| bytes.get(..4) == Some(&MAGIC[..])) else {
        return Err(SnapshotError::Header);
    };
    if !matches!(version, VERSION | VERSION_3 | VERSION_2 | VERSION_1) {
        return Err(SnapshotError::UnknownVersion(version));
    }
    let version = Some(version);
    let has_last_timestamp = matches!(version, Some(VERSION | VERSION_3 | VERSION_2));
    let has_txn = matches!(version, Some(VERSION | VERSION_3));
    let has_completed = version == Some(VERSION);
    let crc = bytes
        .get(6..10)
        .and_then(|b| <[u8; 4]>::try_from(b).ok())
        .map(u32::from_be_bytes)
        .ok_or(SnapshotError::Header)?;
    let body = bytes.get(HEADER_LEN..).unwrap_or_default();
    if crc32c::crc32c(body) != crc {
        return Err(SnapshotError::Checksum);
    }
    let mut r = Reader(body);
    let count = u32::from_be_bytes(r.take()?) as usize;
    // The count is checked against the bytes present before anything is sized from it.
    if count > r.0.len() / ENTRY_LEN {
        return Err(SnapshotError::Malformed);
    }
    let mut state = ProducerState::new();
    for _ in 0..count {
        let pid = r.i64()?;
        let epoch = i16::from_be_bytes(r.take()?);
        let last_seen_ms = r.i64()?;
        let last_timestamp_ms = if has_last_timestamp { r.i64()? } else { -1 };
        let (coordinator_epoch, txn_first) = if has_txn {
            (r.i32()?, r.i64()?)
        } else {
            (-1, -1)
        };
        if txn_first < -1 {
            return Err(SnapshotError::Malformed);
        }
        let [n] = r.take::<1>()?;
        if usize::from(n) > BATCHES_RETAINED {
            return Err(SnapshotError::Malformed);
        }
        let mut batches = VecDeque::with_capacity(usize::from(n));
        for _ in 0..n {
            let meta = BatchMeta {
                first_seq: r.i32()?,
                last_seq: r.i32()?,
                first_offset: r.i64()?,
                next_offset: r.i64()?,
            };
            if meta.first_offset >= meta.next_offset
                || batches
                    .back()
                    .is_some_and(|b: &BatchMeta| b.next_offset > meta.first_offset)
            {
                return Err(SnapshotError::Malformed);
            }
            batches.push_back(meta);
        }
        state.restore(
            pid,
            ProducerEntry {
                epoch,
                batches,
                last_seen_ms,
                last_timestamp_ms,
                current_txn_first_offset: (txn_first >= 0).then_some(txn_first),
                coordinator_epoch,
                epoch_from_marker: false,
            },
            now_ms,
        );
    }
    if has_completed {
        let count = u32::from_be_bytes(r.take()?) as usize;
        if count > r.0.len() / COMPLETED_LEN {
            return Err(SnapshotError::Malformed);
        }
        for _ in 0..count {
            let producer_id = r.i64()?;
            let first_offset = r.i64()?;
            let last_offset = r.i64()?;
            let [aborted] = r.take::<1>()?;
            if first_offset < 0 || last_offset < first_offset || aborted > 1 {
                return Err(SnapshotError::Malformed);
            }
            state.restore_unreplicated(CompletedTxn {
                producer_id,
                first_offset,
                last_offset,
                aborted: aborted == 1,
            });
        }
    }
    if !r.0.is_empty() {
        return Err(SnapshotError::Malformed);
    }
    Ok(state)
}

/// Writes `bytes` as the snapshot at `offset` and removes those no replay would start
/// from any more: below `log_start`, all but the newest. Blocking; run it off the reactor.
pub fn write(
    fs: &dyn Fs,
    dir: &Path,
    offset: i64,
    bytes: &[u8],
    log_start: i64,
) -> std::io::Result<()> {
    super::checkpoint::replace_file(fs, dir, &file_name(offset), bytes)?;
    let all = list(fs, dir)?;
    let below_start = all.iter().filter(|at| **at < log_start).count();
    for old in all.iter().take(below_start.saturating_sub(1)) {
        let _ = fs.remove_file(&path(dir, *old));
    }
    Ok(())
}

/// Loads the newest readable snapshot at or below `log_end`, removing those past it (they
/// describe batches a crash lost). Returns the state with the batches at or past the
/// snapshot's offset dropped, and that offset (where replay starts); an empty state and
/// `None` when there is no usable snapshot.
pub fn load(fs: &dyn Fs, dir: &Path, log_end: i64, now_ms: i64) -> (ProducerState, Option<i64>) {
    remove_temporaries(fs, dir);
    let offsets = list(fs, dir).unwrap_or_default();
    for &offset in offsets.iter().rev() {
        let p = path(dir, offset);
        if offset > log_end {
            let _ = fs.remove_file(&p);
            continue;
        }
        match fs
            .read(&p)
            .map_err(|e| e.to_string())
            .and_then(|b| decode(&b, now_ms).map_err(|e| e.to_string()))
        {
            Ok(mut state) => {
                state.forget_batches_from(offset);
                return (state, Some(offset));
            }
            Err(e) => {
                tracing::warn!(path = %p.display(), error = %e, "ignoring unreadable producer snapshot");
            }
        }
    }
    (ProducerState::new(), None)
}

/// A crash between writing a snapshot and renaming it leaves a `.snapshot.tmp`.
fn remove_temporaries(fs: &dyn Fs, dir: &Path) {
    let Ok(entries) = fs.read_dir(dir) else {
        return;
    };
    for entry in entries {
        let tmp = entry
            .file_name()
            .and_then(|n| n.to_str())
            .is_some_and(|n| n.ends_with(".snapshot.tmp"));
        if tmp {
            let _ = fs.remove_file(&entry);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::fs::KernelFs;
    use crate::producer_state::ProducerBatch;
    use crate::txn_marker::MarkerKind;

    fn sample() -> ProducerState {
        let mut s = ProducerState::new();
        for pid in 0..20i64 {
            for i in 0..7 {
                let b = ProducerBatch {
                    producer_id: pid,
                    epoch: (pid % 3) as i16,
                    first_seq: i * 2,
                    last_seq: i * 2 + 1,
                    max_timestamp: 1_600_000_000_000 + i64::from(i),
                    // Every fourth producer is in a transaction.
                    transactional: pid % 4 == 0,
                };
                let first = pid * 1000 + i64::from(i) * 2;
                s.record(&b, first, first + 2, 1_700_000_000_000 + pid, i64::MAX);
            }
            if pid % 4 == 1 {
                let at = pid * 1000 + 20;
                s.record_marker(pid, (pid % 3) as i16, 9, MarkerKind::Abort, at, 0);
            }
        }
        s
    }

    #[test]
    fn round_trips() {
        let s = sample();
        let back = decode(&encode(&s), i64::MAX).expect("decodes");
        assert_eq!(back.len(), s.len());
        for (pid, e) in s.entries() {
            assert_eq!(back.get(pid), Some(e));
        }
        assert!(decode(&encode(&ProducerState::new()), 0)
            .expect("empty")
            .is_empty());
    }

    #[test]
    fn open_transactions_survive_a_snapshot_unless_it_is_taken_before_them() {
        let s = sample();
        let mut back = decode(&encode(&s), i64::MAX).expect("decodes");
        assert_eq!(
            back.get(4).and_then(|e| e.current_txn_first_offset),
            Some(4000)
        );
        assert_eq!(back.get(5).map(|e| e.coordinator_epoch), Some(9));
        assert_eq!(back.first_unstable_offset(i64::MAX), Some(0));
        // Loaded at offset 8000: the transaction opened at 8000 is replayed, not kept.
        back.forget_batches_from(8000);
        assert_eq!(back.get(8).and_then(|e| e.current_txn_first_offset), None);
        assert_eq!(
            back.get(4).and_then(|e| e.current_txn_first_offset),
            Some(4000)
        );
    }

    /// A transaction whose marker the high watermark had not passed holds the last stable
    /// offset after a reload as before it, until the high watermark passes the marker.
    #[test]
    fn completed_transactions_not_yet_replicated_survive_a_snapshot() {
        let mut s = ProducerState::new();
        let b = ProducerBatch {
            producer_id: 9,
            epoch: 0,
            first_seq: 0,
            last_seq: 1,
            max_timestamp: 0,
            transactional: true,
        };
        s.record(&b, 100, 102, 0, i64::MAX);
        s.record_marker(9, 0, 1, MarkerKind::Commit, 110, 0)
            .expect("the transaction ends");
        assert_eq!(s.first_unstable_offset(105), Some(100));
        let mut back = decode(&encode(&s), i64::MAX).expect("decodes");
        back.forget_batches_from(120);
        assert_eq!(back.first_unstable_offset(105), Some(100), "held back");
        assert_eq!(back.first_unstable_offset(111), None, "passed");
        // A snapshot taken before the marker: the replay brings it back, not the file.
        let mut back = decode(&encode(&s), i64::MAX).expect("decodes");
        back.forget_batches_from(110);
        assert_eq!(back.first_unstable_offset(105), None);
    }

    #[test]
    fn a_newer_version_is_refused_by_its_number() {
        let mut file = encode(&ProducerState::new());
        file[4..6].copy_from_slice(&(VERSION + 1).to_be_bytes());
        let e = decode(&file, 0).unwrap_err();
        assert_eq!(e, SnapshotError::UnknownVersion(VERSION + 1));
        assert!(
            e.to_string().contains(&format!("version {}", VERSION + 1)),
            "{e}"
        );
        file[..4].copy_from_slice(b"XXXX");
        assert_eq!(decode(&file, 0).unwrap_err(), SnapshotError::Header);
    }

    #[test]
    fn version_3_files_are_read_without_completed_transactions() {
        let s = sample();
        let v4 = encode(&s);
        // Version 3 is version 4 without the (here empty) list of completed ones.
        let body = &v4[HEADER_LEN..v4.len() - 4];
        let mut file = MAGIC.to_vec();
        file.extend_from_slice(&VERSION_3.to_be_bytes());
        file.extend_from_slice(&crc32c::crc32c(body).to_be_bytes());
        file.extend_from_slice(body);
        let back = decode(&file, i64::MAX).expect("a version 3 file decodes");
        assert_eq!(back.len(), s.len());
        assert_eq!(
            back.get(4).and_then(|e| e.current_txn_first_offset),
            Some(4000)
        );
    }

    #[test]
    fn version_2_files_are_read_without_transactions() {
        let mut body = 1u32.to_be_bytes().to_vec();
        body.extend_from_slice(&7i64.to_be_bytes());
        body.extend_from_slice(&2i16.to_be_bytes());
        body.extend_from_slice(&1000i64.to_be_bytes());
        body.extend_from_slice(&1500i64.to_be_bytes());
        body.push(0);
        let mut file = MAGIC.to_vec();
        file.extend_from_slice(&VERSION_2.to_be_bytes());
        file.extend_from_slice(&crc32c::crc32c(&body).to_be_bytes());
        file.extend_from_slice(&body);
        let state = decode(&file, i64::MAX).expect("a version 2 file decodes");
        let e = state.get(7).expect("the producer");
        assert_eq!((e.last_timestamp_ms, e.coordinator_epoch), (1500, -1));
        assert_eq!(e.current_txn_first_offset, None);
    }

    #[test]
    fn version_1_files_are_read_without_the_last_timestamp() {
        // One producer (id 7, epoch 2, last seen 1000) with one batch, as version 1 wrote it.
        let mut body = 1u32.to_be_bytes().to_vec();
        body.extend_from_slice(&7i64.to_be_bytes());
        body.extend_from_slice(&2i16.to_be_bytes());
        body.extend_from_slice(&1000i64.to_be_bytes());
        body.push(1);
        for v in [0i32, 4] {
            body.extend_from_slice(&v.to_be_bytes());
        }
        for v in [10i64, 15] {
            body.extend_from_slice(&v.to_be_bytes());
        }
        let mut file = MAGIC.to_vec();
        file.extend_from_slice(&VERSION_1.to_be_bytes());
        file.extend_from_slice(&crc32c::crc32c(&body).to_be_bytes());
        file.extend_from_slice(&body);
        let state = decode(&file, i64::MAX).expect("a version 1 file decodes");
        let e = state.get(7).expect("the producer");
        assert_eq!(
            (e.epoch, e.last_seen_ms, e.last_timestamp_ms),
            (2, 1000, -1)
        );
        assert_eq!(
            e.batches.back().map(|b| (b.last_seq, b.next_offset)),
            Some((4, 15))
        );
    }

    #[test]
    fn any_damage_is_detected() {
        let bytes = encode(&sample());
        for cut in [0, 3, 9, 10, 11, bytes.len() - 1] {
            assert!(decode(&bytes[..cut], 0).is_err(), "truncated at {cut}");
        }
        for at in [0, 5, 7, 12, bytes.len() / 2, bytes.len() - 1] {
            let mut bad = bytes.clone();
            bad[at] ^= 0x40;
            assert!(decode(&bad, 0).is_err(), "flipped byte {at}");
        }
        // A huge count with a valid checksum must not allocate or read out of bounds.
        let mut body = u32::MAX.to_be_bytes().to_vec();
        body.extend_from_slice(&[0u8; 5]);
        let mut hostile = MAGIC.to_vec();
        hostile.extend_from_slice(&VERSION.to_be_bytes());
        hostile.extend_from_slice(&crc32c::crc32c(&body).to_be_bytes());
        hostile.extend_from_slice(&body);
        assert_eq!(decode(&hostile, 0).err(), Some(SnapshotError::Malformed));
    }

    #[test]
    fn load_prefers_the_newest_usable_snapshot_at_or_below_the_end() {
        let dir = tempfile::tempdir().expect("tempdir");
        let s = sample();
        write(&KernelFs, dir.path(), 100, &encode(&s), 0).expect("write");
        write(&KernelFs, dir.path(), 5_000, &encode(&s), 0).expect("write");
        // Past the recovered end: removed. Below it: loaded, batches past it dropped.
        std::fs::write(dir.path().join("x.snapshot.tmp"), b"torn").expect("write");
        let (state, at) = load(&KernelFs, dir.path(), 4_999, i64::MAX);
        assert!(
            !dir.path().join("x.snapshot.tmp").exists(),
            "temporaries removed"
        );
        assert_eq!(at, Some(100));
        assert_eq!(list(&KernelFs, dir.path()).expect("list"), vec![100]);
        assert!(state
            .entries()
            .all(|(_, e)| e.batches.iter().all(|b| b.first_offset < 100)));
        assert_eq!(state.len(), s.len(), "entries stay even without batches");
        // A damaged newest one falls back to the older.
        write(&KernelFs, dir.path(), 200, b"garbage", 0).expect("write");
        assert_eq!(load(&KernelFs, dir.path(), 1_000, i64::MAX).1, Some(100));
        // Every one at or past the log start stays, and the newest below it.
        for o in [300, 400, 500] {
            write(&KernelFs, dir.path(), o, &encode(&s), 0).expect("write");
        }
        assert_eq!(
            list(&KernelFs, dir.path()).expect("list"),
            vec![100, 200, 300, 400, 500]
        );
        write(&KernelFs, dir.path(), 600, &encode(&s), 450).expect("write");
        assert_eq!(
            list(&KernelFs, dir.path()).expect("list"),
            vec![400, 500, 600]
        );
    }
}
