//! Every fuzz target over its seed corpus (`fuzz/corpus/<target>/`, captured from real
//! clients and real broker files by `fuzz/capture_seeds.py`; a `regression-*` file is an
//! input that once failed) and over a fixed set of mutations of each seed — bit flips,
//! overwritten and inserted bytes, truncations and splices, from a seeded generator, so a
//! failure reproduces. This is the CI smoke of the fuzz targets on the stable toolchain;
//! `benches/fuzz.sh` runs them under libFuzzer.

use std::path::PathBuf;

/// Mutations per seed (and per target, at least this many in all).
const MUTATIONS: usize = 2000;

fn corpus(target: &str) -> Vec<(PathBuf, Vec<u8>)> {
    let dir = PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("../../fuzz/corpus")
        .join(target);
    let mut files: Vec<_> = std::fs::read_dir(&dir)
        .unwrap_or_else(|e| panic!("{}: {e}", dir.display()))
        .map(|e| e.expect("a directory entry").path())
        .collect();
    files.sort();
    files
        .into_iter()
        .map(|p| {
            let bytes = std::fs::read(&p).expect("a seed file");
            (p, bytes)
        })
        .collect()
}

/// xorshift64*: deterministic, no dependency.
struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        self.0.wrapping_mul(0x2545_f491_4f6c_dd1d)
    }

    fn below(&mut self, n: usize) -> usize {
        (self.next() % n.max(1) as u64) as usize
    }
}

fn mutate(rng: &mut Rng, seed: &[u8], other: &[u8]) -> Vec<u8> {
    let mut m = seed.to_vec();
    for _ in 0..1 + rng.below(4) {
        match rng.below(6) {
            0 if !m.is_empty() => {
                let i = rng.below(m.len());
                m[i] ^= 1 << rng.below(8);
            }
            1 if !m.is_empty() => {
                let i = rng.below(m.len());
                m[i] = [0x00, 0xff, 0x7f, 0x80, 0x01][rng.below(5)];
            }
            2 => {
                let i = rng.below(m.len() + 1);
                let n = 1 + rng.below(8);
                let bytes: Vec<u8> = (0..n).map(|_| rng.next() as u8).collect();
                m.splice(i..i, bytes);
            }
            3 => m.truncate(rng.below(m.len() + 1)),
            4 if !other.is_empty() => {
                let at = rng.below(m.len() + 1);
                let from = rng.below(other.len());
                m.truncate(at);
                m.extend_from_slice(&other[from..]);
            }
            _ if m.len() >= 4 => {
                // A length or count field made huge or negative.
                let i = rng.below(m.len() - 3);
                m[i..i + 4].copy_from_slice(&[0x7f, 0xff, 0xff, 0xff][..]);
            }
            _ => {}
        }
    }
    m
}

#[test]
fn every_target_survives_its_seeds_and_their_mutations() {
    for (name, target) in corelog_fuzz_targets::TARGETS {
        let seeds = corpus(name);
        assert!(!seeds.is_empty(), "{name} has seeds");
        let mut rng = Rng(0x9e37_79b9_7f4a_7c15 ^ name.len() as u64);
        for (i, (path, seed)) in seeds.iter().enumerate() {
            let result = std::panic::catch_unwind(|| target(seed));
            assert!(result.is_ok(), "{name}: seed {} fails", path.display());
            let other = &seeds[(i + 1) % seeds.len()].1;
            for n in 0..MUTATIONS {
                let input = mutate(&mut rng, seed, other);
                let result = std::panic::catch_unwind(|| target(&input));
                assert!(
                    result.is_ok(),
                    "{name}: mutation {n} of seed {} fails; input (hex): {}",
                    path.display(),
                    input.iter().map(|b| format!("{b:02x}")).collect::<String>()
                );
            }
        }
    }
}

/// The seeds are what they stand for — frames the broker serves, batches it stores, the
/// controller's files and messages — so the mutations start from inputs that reach deep
/// into each decoder.
#[test]
fn the_seeds_are_valid_inputs() {
    for (path, frame) in corpus("request") {
        let parsed = corelog::kafka::frame::parse_request(bytes::Bytes::from(frame))
            .unwrap_or_else(|e| panic!("{}: {e}", path.display()));
        let api = parsed.api_key;
        corelog::kafka::api::decode_request(parsed)
            .unwrap_or_else(|e| panic!("{} ({api:?}): {e}", path.display()));
    }
    for (path, batch) in corpus("record_batch") {
        corelog_storage::batch::validate(&batch, 1 << 20)
            .unwrap_or_else(|e| panic!("{}: {e:?}", path.display()));
    }
    for (path, bytes) in corpus("metadata_log") {
        use corelog_controller::raft_log;
        use corelog_controller::state_machine::MetadataRaft;
        let log = raft_log::decode_log::<MetadataRaft>(&bytes, None);
        let entries = log.as_ref().map_or(0, |l| l.entries.len());
        let vote = raft_log::decode_value::<openraft::Vote<u64>>(&bytes).is_ok();
        let log_id = raft_log::decode_value::<openraft::LogId<u64>>(&bytes).is_ok();
        assert!(
            entries > 0 || vote || log_id,
            "{}: neither a log with entries nor a vote, committed or purged file ({:?})",
            path.display(),
            log.err()
        );
    }
    for (path, bytes) in corpus("metadata_snapshot") {
        corelog_controller::state_machine::decode_snapshot_file(&bytes)
            .unwrap_or_else(|e| panic!("{}: {e}", path.display()));
    }
    // A `regression-*` input is whatever once failed, not a message.
    let captured = |(path, _): &(PathBuf, Vec<u8>)| {
        !path
            .file_name()
            .and_then(|n| n.to_str())
            .is_some_and(|n| n.starts_with("regression-"))
    };
    for (path, body) in corpus("controller_rpc").into_iter().filter(captured) {
        use corelog_controller::rpc::{decode_body, Envelope, Request, Response};
        let request = decode_body::<Envelope<Request>>(&body).is_ok();
        let response = decode_body::<Response>(&body).is_ok();
        assert!(
            request || response,
            "{}: no controller message",
            path.display()
        );
    }
}
