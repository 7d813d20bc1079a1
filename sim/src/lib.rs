//! `corelog-sim`: corelog's deterministic simulator. The real storage engine and
//! partition layer run on disks in memory (`corelog_storage::fs::MemFs`) under simulated
//! time (`corelog_storage::runtime::SimTime`), on one thread, with faults injected on
//! purpose; one seed makes one exact run, so a failing seed is replayed as it failed.
//!
//! The fault model (kernel-notes.md, "Fault model"): a crash keeps what a node synced
//! and any subset of the sectors it wrote since, each whole, and a prefix of its
//! unsynced namespace changes; the network loses, delays (so reorders) and duplicates
//! messages and cuts links; a disk fails writes and syncs and fills up.
//!
//! `scenario::run` plays one seed. `replication` plays the replicated partitions and
//! checks what replication promises;
//! `transactions` plays transactions on them (the coordinator's rules, markers, the last
//! stable offset) and checks what read_committed promises;
//! `exec` is the executor and its clock; `net` the network; `rng` the only chance.

pub mod exec;
pub mod net;
pub mod replication;
pub mod rng;
pub mod scenario;
pub mod transactions;
