//! Share groups' side of the group coordinator (KIP-932): membership and the assignment
//! of partitions to members, several members to a partition. Built so far: `assignor`
//! (Kafka's `simple`) and `group` (one group's heartbeats, epochs and target, pure). To
//! come: the group's records in `__consumer_offsets`, the coordinator's wiring,
//! ShareGroupHeartbeat and ShareGroupDescribe at the edge.

pub mod assignor;
pub mod group;
