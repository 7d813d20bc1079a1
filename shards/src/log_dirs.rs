//! A broker's log directories (Kafka's `log.dirs`, one per disk): which of them holds
//! each partition's log.
//!
//! Invariants: a partition's log lives in exactly one directory, found there at every
//! open (a partition found in two is refused: which copy is its log cannot be told); a
//! partition found in none is new on this broker and goes to the directory with the
//! most space available, less one segment for every partition placed on it before in
//! the same wave, so a topic created at once spreads over the disks instead of landing
//! whole on the emptiest. With one directory nothing is looked up.

use crate::housekeeping::filesystem_space;
use crate::metadata::partition_dir;
use std::path::PathBuf;

/// The directories of one wave of partition opens, with the space each has left.
pub struct Placement<'a> {
    dirs: &'a [PathBuf],
    /// Bytes available to the broker in each directory's filesystem, less the segments
    /// placed there in this wave; measured when the first new partition is placed.
    free: Option<Vec<u64>>,
}

impl<'a> Placement<'a> {
    pub fn new(dirs: &'a [PathBuf]) -> Placement<'a> {
        debug_assert!(!dirs.is_empty(), "a broker has a log directory");
        Placement { dirs, free: None }
    }

    /// The directory of `topic`'s `partition`: the one holding it, or, for a new one,
    /// the one it is placed on, charged `segment_bytes`.
    pub fn locate(
        &mut self,
        topic: &str,
        partition: i32,
        segment_bytes: u64,
    ) -> Result<PathBuf, String> {
        if let [only] = self.dirs {
            return Ok(partition_dir(only, topic, partition));
        }
        let found = holding(self.dirs, topic, partition);
        match found.as_slice() {
            [one] => Ok(one.clone()),
            [] => {
                let free = self.free.get_or_insert_with(|| {
                    self.dirs
                        .iter()
                        .map(|d| filesystem_space(d).map_or(0, |(_, usable)| usable))
                        .collect()
                });
                let i = emptiest(free);
                free[i] = free[i].saturating_sub(segment_bytes);
                Ok(partition_dir(&self.dirs[i], topic, partition))
            }
            [a, b, ..] => Err(format!(
                "{topic}-{partition} is in two log directories ({} and {}): remove the copy that \
                 is not its log",
                a.display(),
                b.display()
            )),
        }
    }
}

/// The partition directories of `topic`'s `partition` that exist, in `dirs` order.
pub fn holding(dirs: &[PathBuf], topic: &str, partition: i32) -> Vec<PathBuf> {
    dirs.iter()
        .map(|d| partition_dir(d, topic, partition))
        .filter(|p| p.is_dir())
        .collect()
}

/// The index of the directory with the most bytes free (the first of equals).
pub fn emptiest(free: &[u64]) -> usize {
    debug_assert!(!free.is_empty());
    let mut best = 0;
    for (i, f) in free.iter().enumerate() {
        if *f > free[best] {
            best = i;
        }
    }
    best
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_emptiest_directory_is_the_first_of_equals() {
        assert_eq!(emptiest(&[5]), 0);
        assert_eq!(emptiest(&[5, 9, 9, 1]), 1);
        assert_eq!(emptiest(&[0, 0]), 0);
    }

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
        let e = place.locate("t", 0, 1).unwrap_err();
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
    fn one_directory_is_not_looked_in() {
        let dirs = [PathBuf::from("/nonexistent/corelog")];
        let mut place = Placement::new(&dirs);
        assert_eq!(
            place.locate("t", 3, 1).unwrap(),
            PathBuf::from("/nonexistent/corelog/t-3")
        );
    }
}
