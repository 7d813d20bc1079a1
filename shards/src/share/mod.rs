//! Share groups (KIP-932): queues on the log. Several members of a share group read the
//! same partitions; each record is acquired by one member for a while and acknowledged
//! one by one.
//!
//! Built so far, each pure and checked against a model: `partition`, the partition
//! leader's state of one share partition (acquisition, locks, delivery counts,
//! acknowledgements, the start offset); `state`, its durable form as the share
//! coordinator keeps it in `__share_group_state` (snapshots and updates, epochs, how
//! batches combine); `records`, the codec of its records, laid out as Kafka's. The share
//! group's membership is `group::share`. To come: the share coordinator and the
//! persister, ShareFetch /
//! ShareAcknowledge, ShareGroupHeartbeat at the edge, and the administration APIs.

pub mod coordinator;
pub mod partition;
pub mod records;
pub mod state;
