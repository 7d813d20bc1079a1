//! Log compaction (`cleanup.policy=compact`): the record-level machinery the log cleaner
//! needs to keep only the latest record per key.
//!
//! Owns: the bounded key → latest offset map ([`offset_map`]) and the pass that chooses
//! segments, rewrites them and swaps them in ([`cleaner`]). It builds on
//! `crate::batch_filter` (records of a batch in any codec) and `crate::segment_swap` (the
//! crash-safe swap), which the partition log uses too; the log never depends on this
//! module.
//!
//! Invariants: compaction never changes an offset. A rewritten batch keeps its base offset
//! and its `lastOffsetDelta`, so batches stay contiguous in offset space and a record
//! keeps the offset it was acknowledged with; only records disappear.
//!
//! Scheduling (which partition, when, at what priority) is the shard's housekeeping.

pub mod cleaner;
pub mod offset_map;
