//! Client quotas (Kafka semantics): produce and fetch byte rates per user (the
//! connection's authenticated principal) and client id, with defaults and overrides
//! resolved in Kafka's precedence.
//!
//! - [`entity`]: which configured quota applies to a client, and its sensor's name.
//! - [`sampled_rate`]: the windowed rate (one-second samples) and the throttle formula.
//! - [`manager`]: per-shard sensors, the once-a-second cross-shard exchange, and the
//!   per-connection throttle (the connection holds its next reads, KIP-219).
//!
//! Configuration lives in the cluster metadata (`ClientQuotas`), written only by the
//! controller through AlterClientQuotas and read lock-free by every shard.
//! `request_percentage` (percent of one core's time spent handling the client's
//! requests) is enforced by holding the connection only; `controller_mutation_rate` is
//! accepted and stored (as Kafka does) but not enforced.

pub mod entity;
pub mod manager;
pub mod sampled_rate;

pub use manager::{
    admit, charge_request_time, timed, ConnectionThrottle, QuotaClient, QuotaConfig, QuotaManager,
    RequestQuota,
};
