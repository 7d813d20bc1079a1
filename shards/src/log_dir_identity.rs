//! Which disk each log directory is: a directory id (KIP-858's `directory.id`) written
//! into each log directory the first time the broker uses it, and the broker's record,
//! in its first directory, of every directory it has used.
//!
//! Invariant: a directory this broker has held partitions in is never taken for a new,
//! empty one. An unmounted disk leaves an empty mount point behind; a broker that
//! opened its partitions there would create them empty — and, where it was their only
//! in-sync replica, lead them with nothing acknowledged left. So at every start each
//! recorded directory must still be configured and still carry its id; otherwise the
//! start is refused, naming the directory, until its disk is back or the operator
//! takes it off the record (`forget`, `corelog forget-log-dir`).
//!
//! Files: `<dir>/log-dir.json` = `{"format": 1, "node_id": N, "directory_id": "..."}`;
//! `<first dir>/log-dirs.json` = `{"format": 1, "dirs": [{"path": "...", "directory_id":
//! "..."}]}`, both replaced atomically (written aside, synced, renamed).

use serde::{Deserialize, Serialize};
use std::path::{Path, PathBuf};
use uuid::Uuid;

/// The identity file of one log directory.
pub const IDENTITY_FILE: &str = "log-dir.json";
/// The record of the broker's directories, in its first directory.
pub const RECORD_FILE: &str = "log-dirs.json";
const FORMAT: u32 = 1;

#[derive(Debug, Serialize, Deserialize)]
struct Identity {
    format: u32,
    node_id: i32,
    directory_id: Uuid,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Recorded {
    pub path: PathBuf,
    pub directory_id: Uuid,
}

#[derive(Debug, Default, Serialize, Deserialize)]
struct Record {
    format: u32,
    dirs: Vec<Recorded>,
}

/// What a start found wrong with the directories: why it is refused.
#[derive(Debug, thiserror::Error, PartialEq)]
pub enum DirError {
    #[error("log directory {path} held this broker's partitions (directory id {id}) and is {now}: mount the disk that holds it; if that disk is lost for good, `corelog forget-log-dir --data-dir {first} {path}` (its partitions' replicas on this broker are then made again from their other replicas)")]
    Lost {
        path: String,
        id: Uuid,
        now: &'static str,
        first: String,
    },
    #[error("log directory {path} belongs to node {other}, not to this node {node}")]
    OtherNode { path: String, other: i32, node: i32 },
    #[error("{path}: format {format}, newer than this release reads ({FORMAT}): run the release that wrote it")]
    Newer { path: String, format: u32 },
    #[error("{path}: {error}")]
    Io { path: String, error: String },
}

fn io(path: &Path, e: impl std::fmt::Display) -> DirError {
    DirError::Io {
        path: path.display().to_string(),
        error: e.to_string(),
    }
}

fn read_json<T: for<'de> Deserialize<'de>>(path: &Path) -> Result<Option<T>, DirError> {
    match std::fs::read(path) {
        Ok(bytes) => serde_json::from_slice(&bytes)
            .map(Some)
            .map_err(|e| io(path, e)),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(None),
        Err(e) => Err(io(path, e)),
    }
}

fn write_json(path: &Path, value: &impl Serialize) -> Result<(), DirError> {
    use std::io::Write;
    let tmp = path.with_extension("json.tmp");
    let bytes = serde_json::to_vec_pretty(value).map_err(|e| io(path, e))?;
    let mut f = std::fs::File::create(&tmp).map_err(|e| io(&tmp, e))?;
    f.write_all(&bytes)
        .and_then(|()| f.sync_all())
        .map_err(|e| io(&tmp, e))?;
    std::fs::rename(&tmp, path).map_err(|e| io(path, e))?;
    if let Some(parent) = path.parent() {
        std::fs::File::open(parent)
            .and_then(|d| d.sync_all())
            .map_err(|e| io(parent, e))?;
    }
    Ok(())
}

/// Checks and identifies `dirs` (`log.dirs`, the first holding the record) for node
/// `node_id` at start: each directory's id, in `dirs` order. Directories are created
/// and given an id where they have none — unless the record says the broker used them
/// before (`DirError::Lost`), or a recorded directory is no longer configured.
pub fn open(dirs: &[PathBuf], node_id: i32) -> Result<Vec<Uuid>, DirError> {
    let first = dirs.first().expect("a broker has a log directory");
    std::fs::create_dir_all(first).map_err(|e| io(first, e))?;
    let record_path = first.join(RECORD_FILE);
    let mut record: Record = read_json(&record_path)?.unwrap_or(Record {
        format: FORMAT,
        dirs: Vec::new(),
    });
    if record.format > FORMAT {
        return Err(DirError::Newer {
            path: record_path.display().to_string(),
            format: record.format,
        });
    }
    let lost = |r: &Recorded, now| DirError::Lost {
        path: r.path.display().to_string(),
        id: r.directory_id,
        now,
        first: first.display().to_string(),
    };
    for r in &record.dirs {
        if !dirs.contains(&r.path) {
            return Err(lost(r, "no longer in log.dirs"));
        }
    }
    let mut ids = Vec::with_capacity(dirs.len());
    for dir in dirs {
        let recorded = record.dirs.iter().find(|r| &r.path == dir);
        let identity_path = dir.join(IDENTITY_FILE);
        let found: Option<Identity> = read_json(&identity_path)?;
        let id = match (found, recorded) {
            (Some(i), _) if i.format > FORMAT => {
                return Err(DirError::Newer {
                    path: identity_path.display().to_string(),
                    format: i.format,
                })
            }
            (Some(i), _) if i.node_id != node_id => {
                return Err(DirError::OtherNode {
                    path: dir.display().to_string(),
                    other: i.node_id,
                    node: node_id,
                })
            }
            (Some(i), Some(r)) if i.directory_id != r.directory_id => {
                return Err(lost(r, "another disk's (its id differs)"))
            }
            (Some(i), _) => i.directory_id,
            (None, Some(r)) => return Err(lost(r, "empty or missing its id")),
            (None, None) => {
                // New to this broker: a disk added, or the first start (a directory of
                // an earlier release, with partitions but no id, is adopted as it is).
                std::fs::create_dir_all(dir).map_err(|e| io(dir, e))?;
                let id = Uuid::new_v4();
                write_json(
                    &identity_path,
                    &Identity {
                        format: FORMAT,
                        node_id,
                        directory_id: id,
                    },
                )?;
                id
            }
        };
        if recorded.is_none() {
            record.dirs.push(Recorded {
                path: dir.clone(),
                directory_id: id,
            });
            write_json(&record_path, &record)?;
        }
        ids.push(id);
    }
    Ok(ids)
}

/// Takes `dir` off the record in `first` (a disk lost for good): the next start gives
/// a new, empty directory there an id of its own. Whether it was recorded.
pub fn forget(first: &Path, dir: &Path) -> Result<bool, DirError> {
    let record_path = first.join(RECORD_FILE);
    let Some(mut record) = read_json::<Record>(&record_path)? else {
        return Ok(false);
    };
    let before = record.dirs.len();
    record.dirs.retain(|r| r.path != dir);
    if record.dirs.len() == before {
        return Ok(false);
    }
    write_json(&record_path, &record)?;
    Ok(true)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn dirs(root: &Path, names: &[&str]) -> Vec<PathBuf> {
        names.iter().map(|n| root.join(n)).collect()
    }

    #[test]
    fn ids_are_given_once_and_kept() {
        let root = tempfile::tempdir().unwrap();
        let d = dirs(root.path(), &["a", "b"]);
        let ids = open(&d, 1).unwrap();
        assert_ne!(ids[0], ids[1]);
        assert_eq!(open(&d, 1).unwrap(), ids);
        // A disk added later gets an id of its own; the others keep theirs.
        let more = dirs(root.path(), &["a", "b", "c"]);
        let ids3 = open(&more, 1).unwrap();
        assert_eq!(ids3[..2], ids[..]);
        assert!(matches!(
            open(&more, 2),
            Err(DirError::OtherNode { other: 1, .. })
        ));
    }

    #[test]
    fn a_directory_that_lost_its_disk_refuses_the_start_until_forgotten() {
        let root = tempfile::tempdir().unwrap();
        let d = dirs(root.path(), &["a", "b"]);
        let ids = open(&d, 1).unwrap();
        // The disk under b is not mounted: an empty mount point.
        std::fs::remove_dir_all(&d[1]).unwrap();
        std::fs::create_dir(&d[1]).unwrap();
        let e = open(&d, 1).unwrap_err();
        assert!(
            matches!(&e, DirError::Lost { id, .. } if *id == ids[1]),
            "{e}"
        );
        assert!(e.to_string().contains("forget-log-dir"), "{e}");
        // Nor may it be dropped from log.dirs unnoticed.
        assert!(matches!(open(&d[..1], 1), Err(DirError::Lost { .. })));
        // Lost for good: forgotten, the new disk is taken with a new id.
        assert!(forget(&d[0], &d[1]).unwrap());
        let again = open(&d, 1).unwrap();
        assert_eq!(again[0], ids[0]);
        assert_ne!(again[1], ids[1]);
    }

    #[test]
    fn another_disks_id_is_refused() {
        let root = tempfile::tempdir().unwrap();
        let d = dirs(root.path(), &["a", "b", "c"]);
        open(&d, 1).unwrap();
        // b and c swapped behind the broker's back (mount points exchanged).
        let tmp = root.path().join("t");
        std::fs::rename(&d[1], &tmp).unwrap();
        std::fs::rename(&d[2], &d[1]).unwrap();
        std::fs::rename(&tmp, &d[2]).unwrap();
        assert!(matches!(open(&d, 1), Err(DirError::Lost { .. })));
    }
}
