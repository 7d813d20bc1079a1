//! Log compaction (`cleanup.policy=compact`): the record-level machinery the log cleaner
//! needs to keep only the latest record per key.
//!
//! Owns: reading the records of a stored batch whatever its codec, and rewriting a batch
//! with a subset of its records ([`batch_filter`]); the bounded key → latest offset map
//! ([`offset_map`]); the pass that chooses segments, rewrites and swaps them crash-safely
//! ([`cleaner`]).
//!
//! Invariants: compaction never changes an offset. A rewritten batch keeps its base offset
//! and its `lastOffsetDelta`, so batches stay contiguous in offset space and a record
//! keeps the offset it was acknowledged with; only records disappear.
//!
//! Scheduling (which partition, when, at what priority) is the shard's housekeeping.

pub mod batch_filter;
pub mod cleaner;
pub mod offset_map;
