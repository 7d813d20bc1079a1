//! The fuzz targets' bodies: every decoder the broker runs on bytes it did not write —
//! request frames from clients, record batches from producers and leaders, the controller
//! port's messages from other brokers — or on files a crash may have torn — producer
//! snapshots, leader-epoch checkpoints, offset and time indexes, the cluster metadata's
//! Raft log and snapshot. Each takes arbitrary bytes and asserts what must hold whatever
//! they are: no panic, no allocation beyond what the input can justify, and, where the
//! decoder accepts, the invariants of what it produced (a re-encoded batch holds the same
//! records; a compacted batch is valid and a subset; a replayed metadata log keeps the
//! image's invariants).
//!
//! `fuzz/` drives each with libFuzzer (`cargo +nightly fuzz run <target>`,
//! `benches/fuzz.sh`); this crate's tests replay the seed corpora in `fuzz/corpus/` and
//! a fixed set of mutations of them on the stable toolchain, so CI runs every target
//! without libFuzzer.

use bytes::Bytes;
use corelog_controller::client_quotas::{EntityName, QuotaAlteration, QuotaEntity, QuotaOp};
use corelog_controller::raft_log;
use corelog_controller::rpc::{self, Envelope, Request, Response};
use corelog_controller::state_machine::{self, MetadataRaft, MetadataStateMachine};
use corelog_controller::Command;
use corelog_storage::batch::{self, Compression};
use corelog_storage::batch_filter::{self, Filtered};
use openraft::storage::RaftStateMachine;
use openraft::{Entry, LogId, Vote};

/// Every target, by the name of its corpus directory and libFuzzer binary.
pub const TARGETS: &[(&str, fn(&[u8]))] = &[
    ("request", request),
    ("record_batch", record_batch),
    ("compaction_filter", compaction_filter),
    ("producer_snapshot", producer_snapshot),
    ("leader_epoch_checkpoint", leader_epoch_checkpoint),
    ("segment_indexes", segment_indexes),
    ("checkpoints", checkpoints),
    ("metadata_log", metadata_log),
    ("metadata_snapshot", metadata_snapshot),
    ("controller_rpc", controller_rpc),
];

/// A request frame as a connection reads it (after the size prefix): the header, then
/// the body of every API and version the broker serves, decoded as its handler would.
pub fn request(data: &[u8]) {
    let Ok(frame) = corelog::kafka::frame::parse_request(Bytes::copy_from_slice(data)) else {
        return;
    };
    let _ = corelog::kafka::api::decode_request(frame);
}

/// Record batches as a produce request or a leader carries them: validation as a
/// producer's and as a stored batch; for a valid one, every record walked, and the batch
/// re-encoded in every codec, each copy valid and holding the same records.
pub fn record_batch(data: &[u8]) {
    let as_produced = batch::validate(data, 1 << 20);
    let as_stored = batch::validate_stored(data);
    if as_produced.is_ok() {
        assert!(
            as_stored.is_ok(),
            "a batch valid from a producer is valid stored"
        );
    }
    let Ok(header) = as_produced else {
        return;
    };
    let Some(records) = records_of(data) else {
        return;
    };
    assert!(records.len() <= header.record_count.max(0) as usize);
    for codec in [
        Compression::None,
        Compression::Gzip,
        Compression::Snappy,
        Compression::Lz4,
        Compression::Zstd,
    ] {
        let Ok(copy) = batch_filter::recompress(data, codec) else {
            continue;
        };
        batch::validate_stored(&copy).expect("a re-encoded batch is valid");
        assert_eq!(
            records_of(&copy).as_ref(),
            Some(&records),
            "a re-encoded batch holds the same records"
        );
    }
}

/// (offset, timestamp, key, tombstone) of each record, or `None` when the records do
/// not parse.
type Record = (i64, i64, Option<Vec<u8>>, bool);

fn records_of(batch: &[u8]) -> Option<Vec<Record>> {
    let mut out = Vec::new();
    batch_filter::for_each_record(batch, |r| {
        out.push((
            r.offset,
            r.timestamp_ms,
            r.key.map(<[u8]>::to_vec),
            r.is_tombstone,
        ))
    })
    .ok()?;
    Some(out)
}

/// The compaction filter: a valid stored batch filtered by a predicate taken from the
/// input keeps exactly the records the predicate kept, in a batch that is still valid.
pub fn compaction_filter(data: &[u8]) {
    let Some((&selector, batch)) = data.split_first() else {
        return;
    };
    if batch::validate_stored(batch).is_err() {
        return;
    }
    let Some(records) = records_of(batch) else {
        return;
    };
    let keep = |offset: i64| (selector >> (offset.rem_euclid(8))) & 1 == 1;
    match batch_filter::filter_batch(batch, |r| keep(r.offset)) {
        Err(_) => {}
        Ok(Filtered::Unchanged) => assert!(records.iter().all(|r| keep(r.0))),
        Ok(Filtered::Empty) => assert!(!records.iter().any(|r| keep(r.0))),
        Ok(Filtered::Rewritten(out)) => {
            batch::validate_stored(&out).expect("a compacted batch is valid");
            let kept: Vec<Record> = records.into_iter().filter(|r| keep(r.0)).collect();
            assert_eq!(records_of(&out), Some(kept), "exactly the kept records");
        }
    }
}

/// A producer-state snapshot file as a restart reads it.
pub fn producer_snapshot(data: &[u8]) {
    let _ = corelog_storage::producer_snapshot::decode(data, 1_700_000_000_000);
}

/// A leader-epoch checkpoint file: decoded, it encodes back to a file that decodes to the
/// same cache.
pub fn leader_epoch_checkpoint(data: &[u8]) {
    let Ok(text) = std::str::from_utf8(data) else {
        return;
    };
    let Ok(cache) = corelog_partition::leader_epoch_cache::LeaderEpochCache::decode(text) else {
        return;
    };
    let again = corelog_partition::leader_epoch_cache::LeaderEpochCache::decode(&cache.encode())
        .expect("an encoded cache decodes");
    assert_eq!(again.entries(), cache.entries());
}

/// The text checkpoints a start reads back: a one-number file (`log-start-offset`,
/// `cleaner-offset-checkpoint`) and a shard's high-watermark checkpoint. Whatever the
/// marks decode to encodes back to a file that decodes to the same marks, each the
/// highest the text gave its partition.
pub fn checkpoints(data: &[u8]) {
    let Ok(text) = std::str::from_utf8(data) else {
        return;
    };
    if let Ok(offset) = corelog_storage::checkpoint::decode(text) {
        assert_eq!(
            corelog_storage::checkpoint::decode(&format!("{offset}\n")),
            Ok(offset)
        );
    }
    let mut marks = std::collections::HashMap::new();
    corelog_shards::replication::decode_high_watermarks(text, &mut marks);
    // A topic name with a space or a line break cannot be written back as one line;
    // the broker never names a topic so (topic names are [a-zA-Z0-9._-]).
    marks.retain(|tp, _| !tp.topic.contains([' ', '\n', '\r']) && !tp.topic.is_empty());
    let encoded = corelog_shards::replication::encode_high_watermarks(&marks);
    let mut again = std::collections::HashMap::new();
    corelog_shards::replication::decode_high_watermarks(&encoded, &mut again);
    assert_eq!(
        again, marks,
        "a checkpoint decodes to the marks it was written from"
    );
}

/// A segment's offset and time indexes as recovery reads them (the first 16 bytes choose
/// the base offset and the log's length): every entry kept lies within the log and
/// increases.
pub fn segment_indexes(data: &[u8]) {
    let (head, rest) = data.split_at(data.len().min(16));
    let mut word = [0u8; 16];
    word[..head.len()].copy_from_slice(head);
    let base = i64::from_be_bytes(word[..8].try_into().expect("8 bytes"));
    let log_len = u64::from_be_bytes(word[8..].try_into().expect("8 bytes")) % (1 << 31);
    let offsets = corelog_storage::offset_index::OffsetIndex::decode(base, rest, log_len);
    for pair in offsets.entries().windows(2) {
        assert!(pair[0].relative_offset < pair[1].relative_offset);
        assert!(pair[0].position < pair[1].position);
    }
    assert!(offsets
        .entries()
        .iter()
        .all(|e| u64::from(e.position) < log_len));
    let _ =
        corelog_storage::time_index::TimeIndex::decode(base, rest, base.saturating_add(1 << 20));
}

/// The cluster metadata's Raft log (`raft.log` of the controller's directory) as a start
/// reads it, through the function `RaftLog::open` decodes it with. The input is the file;
/// it is decoded as it is, then again with every frame's CRC made right (libFuzzer could
/// hardly guess one, so without that it would only ever test torn frames). Decoding stops
/// at the first torn frame (what follows it starts with no whole frame) or reports a
/// corrupt one; the entries it kept are in index order, each at its frame's position;
/// re-encoded, they decode to the same entries; with the purge point moved to one of
/// them, exactly the later ones are kept. The entries from index 1 on (index 0 is
/// openraft's initial membership) are then applied by the state machine in order, as a
/// start replays the committed log, and every image keeps its invariants. The same bytes
/// are also decoded as the `vote`, `committed` and `purged` files beside the log.
pub fn metadata_log(data: &[u8]) {
    metadata_log_file(data);
    let fixed = with_frame_crcs(data);
    if fixed != data {
        metadata_log_file(&fixed);
    }
    value_file::<Vote<u64>>(data);
    value_file::<LogId<u64>>(data);
}

type LogFile = raft_log::LogFile<Entry<MetadataRaft>>;

fn decode_log(bytes: &[u8], purged: Option<u64>) -> Result<LogFile, String> {
    raft_log::decode_log::<MetadataRaft>(bytes, purged)
}

fn metadata_log_file(bytes: &[u8]) {
    let Ok(log) = decode_log(bytes, None) else {
        return;
    };
    let len = usize::try_from(log.len).expect("a length in memory");
    assert!(len <= bytes.len());
    let tail = decode_log(&bytes[len..], None);
    assert!(
        matches!(&tail, Ok(t) if t.len == 0 && t.entries.is_empty()),
        "decoding stopped at a whole frame"
    );
    assert_eq!(log.purged_bytes, 0);
    let mut end = 0;
    for (index, (at, entry)) in &log.entries {
        assert_eq!(entry.log_id.index, *index);
        assert!(*at >= end && *at < log.len, "frames in file order");
        end = *at + 1;
    }
    assert_eq!(log.entries.values().next().map_or(0, |(at, _)| *at), 0);

    // Re-encoded, the same entries.
    let mut again = Vec::new();
    for (_, entry) in log.entries.values() {
        raft_log::encode_frame(entry, &mut again).expect("an entry that decoded encodes");
    }
    let reread = decode_log(&again, None).expect("re-encoded entries decode");
    assert_eq!(reread.len, again.len() as u64);
    assert!(
        reread
            .entries
            .iter()
            .map(|(i, (_, e))| (i, e))
            .eq(log.entries.iter().map(|(i, (_, e))| (i, e))),
        "re-encoded entries decode to the same entries"
    );

    // Purged up to one of them: the later ones kept, at the same positions.
    if let Some(&point) = log
        .entries
        .keys()
        .nth(bytes.len() % log.entries.len().max(1))
    {
        let purged = decode_log(bytes, Some(point)).expect("decodes with a purge point");
        assert_eq!(purged.len, log.len);
        let kept: Vec<_> = log.entries.range(point + 1..).collect();
        assert!(purged.entries.iter().eq(kept.iter().copied()));
        let first_kept = kept.first().map_or(log.len, |(_, (at, _))| *at);
        assert_eq!(purged.purged_bytes, first_kept);
    }

    // Replayed by the state machine.
    let entries: Vec<_> = log
        .entries
        .into_values()
        .map(|(_, e)| e)
        .filter(|e| e.log_id.index > 0)
        .collect();
    if entries.is_empty() {
        return;
    }
    let mut sm = state_machine().expect("a state machine in an empty directory opens");
    let count = entries.len();
    let last = entries.last().map(|e| e.log_id.index);
    let applied = futures_lite::future::block_on(sm.apply(entries)).expect("applies");
    assert_eq!(applied.len(), count);
    let image = sm.image();
    assert_eq!(Some(image.applied), last);
    image
        .check_invariants()
        .unwrap_or_else(|e| panic!("the replayed image breaks an invariant: {e}"));
}

/// A state machine with nothing applied: opened in an empty directory, where applying
/// writes nothing (only a snapshot would), so every process shares the one directory.
fn state_machine() -> std::io::Result<MetadataStateMachine> {
    MetadataStateMachine::open(&std::env::temp_dir().join("corelog-fuzz-state-machine"))
}

/// `bytes` with the CRC of every whole frame set to its body's, as `raft.log` frames
/// them: `[length: u32 BE][crc32c: u32 BE][body]`.
fn with_frame_crcs(bytes: &[u8]) -> Vec<u8> {
    let mut out = bytes.to_vec();
    let mut at = 0;
    while let Some(header) = out.get(at..at + 8) {
        let len = u32::from_be_bytes(header[..4].try_into().expect("4 bytes")) as usize;
        let Some(body) = out.get(at + 8..at + 8 + len) else {
            break;
        };
        let crc = crc32c::crc32c(body).to_be_bytes();
        out[at + 4..at + 8].copy_from_slice(&crc);
        at += 8 + len;
    }
    out
}

/// A `vote`, `committed` or `purged` file: decoded, it encodes to a file that decodes to
/// the same value.
fn value_file<T>(data: &[u8])
where
    T: serde::Serialize + serde::de::DeserializeOwned + PartialEq + std::fmt::Debug,
{
    let Ok(value) = raft_log::decode_value::<T>(data) else {
        return;
    };
    let bytes = raft_log::encode_value(&value).expect("a value that decoded encodes");
    let again = raft_log::decode_value::<T>(&bytes).expect("an encoded value decodes");
    assert_eq!(again, value);
}

/// The metadata snapshot file (`snapshot` of the controller's directory) as a start reads
/// it, through the function `MetadataStateMachine::open` loads it with — CRC, then JSON,
/// then the image re-indexed and refused unless it keeps its invariants — as it is and
/// with its CRC made right; and the same bytes as the snapshot data a follower installs
/// from its leader. What loads encodes to a file (or data) that loads to the same
/// snapshot, byte for byte once encoded again.
pub fn metadata_snapshot(data: &[u8]) {
    snapshot_file(data);
    if let Some(body) = data.get(4..) {
        let mut fixed = crc32c::crc32c(body).to_be_bytes().to_vec();
        fixed.extend_from_slice(body);
        if fixed != data {
            snapshot_file(&fixed);
        }
    }
    let Ok(contents) = state_machine::decode_snapshot_data(data) else {
        return;
    };
    contents
        .image
        .check_invariants()
        .expect("a loaded image is valid");
    let encoded = state_machine::encode_snapshot_data(&contents).expect("loaded data encodes");
    let again = state_machine::decode_snapshot_data(&encoded).expect("encoded data loads");
    assert_eq!(
        state_machine::encode_snapshot_data(&again).expect("encodes"),
        encoded,
        "snapshot data loads to the same contents"
    );
    assert_eq!(again.recent, contents.recent);
}

fn snapshot_file(bytes: &[u8]) {
    let Ok((meta, contents)) = state_machine::decode_snapshot_file(bytes) else {
        return;
    };
    contents
        .image
        .check_invariants()
        .expect("a loaded image is valid");
    let file = state_machine::encode_snapshot_file(&meta, &contents).expect("a snapshot encodes");
    let (meta2, again) =
        state_machine::decode_snapshot_file(&file).expect("an encoded snapshot loads");
    assert_eq!(meta2, meta);
    assert_eq!(again.recent, contents.recent);
    assert_eq!(
        state_machine::encode_snapshot_file(&meta2, &again).expect("encodes"),
        file,
        "a snapshot loads to the same snapshot"
    );
}

/// A frame body on the controller port (after its length), as `read_frame` decodes it:
/// as the request a controller serves (`Envelope<Request>`) and as the response a broker
/// or controller reads back (`Response`). A message that decodes encodes (as
/// `write_frame` does) to a body that decodes to the same message, byte for byte once
/// encoded again (not every message type has an equality; the encoding stands for it).
///
/// Decoded values only ever hold what a decoder produced, and decoding what they encode to
/// gives them back even where a decoder is inexact; so the input also gives a value to
/// encode first: its first 8 bytes as the bits of a client quota (an `f64` as a Kafka
/// client sends it), proposed as the controller port carries it, must decode to the same
/// bits.
pub fn controller_rpc(data: &[u8]) {
    round_trip::<Envelope<Request>>(data);
    round_trip::<Response>(data);
    quota_round_trip(data);
}

fn quota_round_trip(data: &[u8]) {
    let Some(bits) = data.get(..8) else {
        return;
    };
    let value = f64::from_bits(u64::from_be_bytes(bits.try_into().expect("8 bytes")));
    if !value.is_finite() {
        return; // refused at the protocol edge (and JSON has no NaN or infinity)
    }
    let command = Command::AlterClientQuotas {
        alterations: vec![QuotaAlteration {
            entity: QuotaEntity {
                user: Some(EntityName::Named("u".into())),
                client_id: None,
            },
            ops: vec![QuotaOp::Set("request_percentage".into(), value)],
        }],
    };
    let body = rpc::encode_body(&command).expect("a command encodes");
    let again: Command = rpc::decode_body(&body).expect("an encoded command decodes");
    assert_eq!(again, command, "a quota value comes back exactly");
}

fn round_trip<T: serde::Serialize + serde::de::DeserializeOwned>(body: &[u8]) {
    let Ok(msg) = rpc::decode_body::<T>(body) else {
        return;
    };
    // A message at most FRAME_MAX long may encode longer (escapes), and is refused then.
    let Ok(encoded) = rpc::encode_body(&msg) else {
        return;
    };
    let again = rpc::decode_body::<T>(&encoded).expect("an encoded message decodes");
    assert_eq!(
        rpc::encode_body(&again).expect("encodes"),
        encoded,
        "a message decodes to the same message"
    );
}
