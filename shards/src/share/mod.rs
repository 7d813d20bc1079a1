//! Share groups (KIP-932): queues on the log. Several members of a share group read the
//! same partitions; each record is acquired by one member for a while and acknowledged
//! one by one.
//!
//! Built so far: `partition`, the partition leader's state of one share partition
//! (acquisition, locks, delivery counts, acknowledgements, the start offset), pure and
//! checked against a per-record model. To come: the share group coordinator
//! (ShareGroupHeartbeat), ShareFetch / ShareAcknowledge, the durable share state in
//! `__share_group_state`, and the administration APIs.

pub mod partition;
