//! Share groups' side of the group coordinator (KIP-932): membership and the assignment
//! of partitions to members, several members to a partition. Built so far: `assignor`
//! (Kafka's `simple`). To come: the group itself (ShareGroupHeartbeat, epochs, records in
//! `__consumer_offsets`), ShareGroupDescribe.

pub mod assignor;
