//! Share groups' side of the group coordinator (KIP-932): membership and the assignment
//! of partitions to members, several members to a partition. Built so far: `assignor`
//! (Kafka's `simple`), `group` (one group's heartbeats, epochs and target, pure) and
//! `records` (the codec of its records in `__consumer_offsets`, Kafka's types 10–14).
//! To come: writing and replaying those records, the coordinator's wiring,
//! ShareGroupHeartbeat and ShareGroupDescribe at the edge.

pub mod assignor;
pub mod group;
pub mod records;
