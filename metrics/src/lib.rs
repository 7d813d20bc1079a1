//! `corelog-metrics`: latency histograms and counters, and their `.hgrm` text form.
//!
//! - The per-shard recorder (request counts, bytes, errors by Kafka error code, latency
//!   histograms per API and per stage, limit and quota counters): a thread-local, so a
//!   shard records without a lock and without touching another core's cache lines.
//! - [`hgrm`]: HdrHistogram's percentile-distribution text and a percentile summary, for
//!   the broker's endpoint and the load generator's reports alike.
//!
//! It depends on no other corelog crate: the broker's shards, the HTTP endpoint and the
//! load generator all use it, and it must stay small enough for a tool to take along.

pub mod hgrm;
pub mod plot;
mod recorder;

pub use recorder::*;
