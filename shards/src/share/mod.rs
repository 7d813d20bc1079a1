//! Share groups (KIP-932): queues on the log. Several members of a share group read the
//! same partitions; each record is acquired by one member for a while and acknowledged
//! one by one.
//!
//! `partition`: the partition leader's state of one share partition (acquisition, locks,
//! delivery counts, acknowledgements, the start offset), pure and checked against a
//! model. `leader`: the share partitions a shard leads, loaded from and stored to the
//! share coordinator through a `Persister`; `aborted` the records a read_committed
//! group never gets. `coordinator`: the share coordinator, which
//! keeps that state in `__share_group_state`; `state` its durable form (snapshots and
//! updates, epochs, how batches combine) and `records` the codec of its records, laid out
//! as Kafka's. The share group's membership is `group::share`.

pub mod aborted;
pub mod coordinator;
pub mod fetch_span;
pub mod leader;
pub mod partition;
pub mod records;
pub mod state;

/// Wall-clock milliseconds (lock deadlines, timestamps of state records).
pub(crate) fn now_ms() -> i64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_millis() as i64)
        .unwrap_or(0)
}
