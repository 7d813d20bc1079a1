//! A broker's log directories (Kafka's `log.dirs`, one per disk): which of them holds
//! each partition's log.
//!
//! Invariants: a partition's log lives in exactly one directory, found there at every
//! open (a partition found in two is refused: which copy is its log cannot be told); a
//! partition found in none is new on this broker and goes to the directory with the
//! most space available, less one segment for every partition placed on it before in
//! the same wave, so a topic created at once spreads over the disks instead of landing
//! whole on the emptiest; between equal spaces (directories on one filesystem), to the
//! one holding the fewest partitions. A directory that has failed takes no new partition, and a
//! partition found in it is not opened. With one directory nothing is looked up.

use crate::housekeeping::filesystem_space;
use crate::metadata::partition_dir;
use std::os::unix::fs::MetadataExt;
use std::path::PathBuf;

/// Why a partition has no directory to open in.
#[derive(Debug, PartialEq, Eq)]
pub enum Unplaced {
    /// It is in two directories (the message names both).
    InTwo(String),
    /// It is in a failed directory, or every directory has failed.
    Offline,
}

/// The directories of one wave of partition opens, with the space each has left.
pub struct Placement<'a> {
    dirs: &'a [PathBuf],
    /// Which of `dirs` have failed.
    offline: Vec<bool>,
    /// Bytes available to the broker in each directory's filesystem, less the segments
    /// placed there in this wave; measured when the first new partition is placed.
    free: Option<Vec<u64>>,
    /// Partitions in each directory (the tie-break between equal space: directories on
    /// one filesystem), counting those placed in this wave; measured with `free`.
    held: Vec<usize>,
}

impl<'a> Placement<'a> {
    pub fn new(dirs: &'a [PathBuf]) -> Placement<'a> {
        Self::with_offline(dirs, vec![false; dirs.len()])
    }

    /// A wave over `dirs` of which those marked in `offline` have failed.
    pub fn with_offline(dirs: &'a [PathBuf], offline: Vec<bool>) -> Placement<'a> {
        debug_assert!(!dirs.is_empty(), "a broker has a log directory");
        debug_assert_eq!(dirs.len(), offline.len());
        Placement {
            dirs,
            offline,
            free: None,
            held: Vec::new(),
        }
    }

    /// The directory of `topic`'s `partition`: the one holding it, or, for a new one,
    /// the one it is placed on, charged `segment_bytes`.
    pub fn locate(
        &mut self,
        topic: &str,
        partition: i32,
        segment_bytes: u64,
    ) -> Result<PathBuf, Unplaced> {
        self.locate_preferring(topic, partition, segment_bytes, None)
    }

    /// As `locate`, but a new partition goes to directory `preferred` (an index into
    /// the directories) when it is online: where AlterReplicaLogDirs asked for it.
    pub fn locate_preferring(
        &mut self,
        topic: &str,
        partition: i32,
        segment_bytes: u64,
        preferred: Option<usize>,
    ) -> Result<PathBuf, Unplaced> {
        if let [only] = self.dirs {
            if self.offline[0] {
                return Err(Unplaced::Offline);
            }
            return Ok(partition_dir(only, topic, partition));
        }
        let found = holding(self.dirs, topic, partition);
        match found.as_slice() {
            [one]
                if self
                    .dirs
                    .iter()
                    .zip(&self.offline)
                    .any(|(d, off)| *off && one.parent() == Some(d.as_path())) =>
            {
                Err(Unplaced::Offline)
            }
            [one] => Ok(one.clone()),
            [] if preferred.is_some_and(|i| i < self.dirs.len() && !self.offline[i]) => {
                let i = preferred.unwrap_or_default();
                Ok(partition_dir(&self.dirs[i], topic, partition))
            }
            [] => {
                let (dirs, offline) = (self.dirs, &self.offline);
                if self.free.is_none() {
                    self.held = self.dirs.iter().map(|d| partitions_in(d)).collect();
                }
                let free = self.free.get_or_insert_with(|| {
                    // Measured once per filesystem, so that directories sharing one are
                    // equal however the space moves between two measurements.
                    let mut by_device: Vec<(u64, u64)> = Vec::new();
                    dirs.iter()
                        .zip(offline)
                        .map(|(d, off)| {
                            if *off {
                                return 0;
                            }
                            let device = std::fs::metadata(d).map(|m| m.dev()).ok();
                            if let Some(&(_, f)) =
                                by_device.iter().find(|(dev, _)| Some(*dev) == device)
                            {
                                return f;
                            }
                            let f = filesystem_space(d).map_or(0, |(_, usable)| usable);
                            if let Some(dev) = device {
                                by_device.push((dev, f));
                            }
                            f
                        })
                        .collect()
                });
                let held = &self.held;
                let Some(i) = (0..free.len())
                    .filter(|i| !self.offline[*i])
                    .max_by_key(|i| (free[*i], std::cmp::Reverse(held[*i]), std::cmp::Reverse(*i)))
                else {
                    return Err(Unplaced::Offline);
                };
                free[i] = free[i].saturating_sub(segment_bytes);
                self.held[i] += 1;
                Ok(partition_dir(&self.dirs[i], topic, partition))
            }
            [a, b, ..] => Err(Unplaced::InTwo(format!(
                "{topic}-{partition} is in two log directories ({} and {}): remove the copy that \
                 is not its log",
                a.display(),
                b.display()
            ))),
        }
    }
}

/// How many partition directories (`<topic>-<partition>`) `dir` holds.
fn partitions_in(dir: &std::path::Path) -> usize {
    std::fs::read_dir(dir).map_or(0, |entries| {
        entries
            .flatten()
            .filter(|e| e.file_type().is_ok_and(|t| t.is_dir()))
            .filter(|e| {
                e.file_name().to_str().is_some_and(|n| {
                    n.rsplit_once('-')
                        .is_some_and(|(t, p)| !t.is_empty() && p.parse::<u32>().is_ok())
                })
            })
            .count()
    })
}

/// The partition directories of `topic`'s `partition` that exist, in `dirs` order.
pub fn holding(dirs: &[PathBuf], topic: &str, partition: i32) -> Vec<PathBuf> {
    dirs.iter()
        .map(|d| partition_dir(d, topic, partition))
        .filter(|p| p.is_dir())
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_partition_is_found_where_it_is_and_refused_in_two() {
        let root = tempfile::tempdir().unwrap();
        let dirs: Vec<PathBuf> = ["a", "b"].iter().map(|n| root.path().join(n)).collect();
        for d in &dirs {
            std::fs::create_dir_all(d).unwrap();
        }
        std::fs::create_dir(dirs[1].join("t-0")).unwrap();
        let mut place = Placement::new(&dirs);
        assert_eq!(place.locate("t", 0, 1).unwrap(), dirs[1].join("t-0"));
        std::fs::create_dir(dirs[0].join("t-0")).unwrap();
        let Err(Unplaced::InTwo(e)) = place.locate("t", 0, 1) else {
            panic!("found in two")
        };
        assert!(e.contains("two log directories"), "{e}");
    }

    #[test]
    fn new_partitions_of_one_wave_spread_over_directories_of_equal_space() {
        let root = tempfile::tempdir().unwrap();
        let dirs: Vec<PathBuf> = ["a", "b"].iter().map(|n| root.path().join(n)).collect();
        for d in &dirs {
            std::fs::create_dir_all(d).unwrap();
        }
        // Both on one filesystem: equal space, so one segment's charge alternates them.
        let mut place = Placement::new(&dirs);
        let placed: Vec<PathBuf> = (0..4)
            .map(|p| place.locate("t", p, 1 << 30).unwrap())
            .map(|p| p.parent().unwrap().to_path_buf())
            .collect();
        assert_eq!(
            placed,
            [&dirs[0], &dirs[1], &dirs[0], &dirs[1]].map(|d| d.clone())
        );
    }

    #[test]
    fn a_failed_directory_takes_nothing_new_and_opens_nothing() {
        let root = tempfile::tempdir().unwrap();
        let dirs: Vec<PathBuf> = ["a", "b"].iter().map(|n| root.path().join(n)).collect();
        for d in &dirs {
            std::fs::create_dir_all(d).unwrap();
        }
        std::fs::create_dir(dirs[1].join("t-0")).unwrap();
        let mut place = Placement::with_offline(&dirs, vec![false, true]);
        assert_eq!(place.locate("t", 0, 1), Err(Unplaced::Offline));
        for p in 1..4 {
            assert_eq!(
                place.locate("t", p, 1 << 30).unwrap(),
                dirs[0].join(format!("t-{p}"))
            );
        }
        let mut none = Placement::with_offline(&dirs, vec![true, true]);
        assert_eq!(none.locate("t", 1, 1), Err(Unplaced::Offline));
        let one = [dirs[0].clone()];
        assert_eq!(
            Placement::with_offline(&one, vec![true]).locate("t", 1, 1),
            Err(Unplaced::Offline)
        );
    }

    #[test]
    fn equal_space_goes_to_the_directory_with_fewest_partitions() {
        let root = tempfile::tempdir().unwrap();
        let dirs: Vec<PathBuf> = ["a", "b"].iter().map(|n| root.path().join(n)).collect();
        for d in &dirs {
            std::fs::create_dir_all(d).unwrap();
        }
        for p in 0..3 {
            std::fs::create_dir(dirs[0].join(format!("old-{p}"))).unwrap();
        }
        std::fs::create_dir(dirs[0].join("__cluster_metadata")).unwrap();
        // One filesystem: equal space, so the fewest partitions decide, wave after wave.
        for p in 0..3 {
            let mut place = Placement::new(&dirs);
            let at = place.locate("t", p, 0).unwrap();
            std::fs::create_dir(&at).unwrap();
            assert_eq!(at.parent().unwrap(), dirs[1]);
        }
        let mut place = Placement::new(&dirs);
        assert_eq!(
            place.locate("t", 3, 0).unwrap().parent().unwrap(),
            dirs[0],
            "3 and 3: the first"
        );
    }

    #[test]
    fn one_directory_is_not_looked_in() {
        let dirs = [PathBuf::from("/nonexistent/corelog")];
        let mut place = Placement::new(&dirs);
        assert_eq!(
            place.locate("t", 3, 1).unwrap(),
            PathBuf::from("/nonexistent/corelog/t-3")
        );
    }
}
