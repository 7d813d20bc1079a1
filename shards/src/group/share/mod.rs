//! Share groups' side of the group coordinator (KIP-932): membership and the assignment
//! of partitions to members, several members to a partition. `assignor` (Kafka's
//! `simple`), `group` (one group's heartbeats, epochs and target, pure; `group/stored.rs`
//! its records and replay) and `records` (the codec of its records in
//! `__consumer_offsets`, Kafka's types 10–15); `overrides` a share group's own configs
//! and `reset` the value of `share.auto.offset.reset`. The coordinator serves them in
//! `group::coordinator::share`, the edge in `kafka::api::share_group_*`. Kafka's
//! initialization of share state before a partition is assigned is not done here: the
//! partition's leader initializes it on first use.

pub mod assignor;
pub mod group;
pub mod overrides;
pub mod records;
pub mod reset;
