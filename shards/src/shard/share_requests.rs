//! ShareFetch and ShareAcknowledge on the shard that owns the partitions (KIP-932): the
//! share partitions it leads (`share::leader`) acquire, acknowledge and release records;
//! a fetch reads the log within its byte budget, acquires within what it read, and the
//! batches holding the records acquired go back with their ranges. Also the
//! shard's persister, by which those share partitions reach the share coordinator:
//! over the mesh when this broker leads the state's `__share_group_state` partition,
//! else with the state APIs to the broker that does.
//!
//! Invariants: every input gets exactly one output, in input order; records go back
//! only with the acquired ranges they cover (the client hands out only records in
//! those ranges); a fetch acquires at most the request's record budget in all (more only
//! to end a log batch, in batch_optimized mode), and returns at most its byte budget
//! but for the first batch of the whole fetch.

use super::Shard;
use crate::mesh::{
    ShardMessage, ShareAckInput, ShareFetchInput, ShareFetchLimits, ShareFetchOutput,
};
use crate::routing::TopicPartition;
use crate::share::coordinator::{StateFailure, StateOp, StateView, SHARE_STATE_TOPIC};
use crate::share::fetch_span::ByteBudget;
use crate::share::leader::{Delivery, Persister, ShareError, ShareTarget};
use crate::share::now_ms;
use crate::share::partition::{RecordState, StateBatch};
use crate::share::records::ShareKey;
use futures::channel::oneshot;
use futures::future::LocalBoxFuture;
use kafka_protocol::messages::ApiKey;
use std::rc::Rc;
use std::time::Duration;
use uuid::Uuid;

/// Tries of a state operation whose coordinator is moving or loading.
const PERSISTER_TRIES: u32 = 20;
const PERSISTER_BACKOFF: Duration = Duration::from_millis(100);

impl Shard {
    /// A share group's delivery settings: the broker's with the group's configs
    /// applied.
    pub fn share_delivery(&self, group: &str) -> Delivery {
        let broker = self.config.share_leader.delivery();
        match self.metadata.snapshot().group_configs.get(group) {
            Some(layer) => crate::group::share::overrides::delivery(broker, layer),
            None => broker,
        }
    }

    /// Acquires records of `inputs` for `member` of `group` and answers them with their
    /// batches, the partitions in order, within `limits` as Kafka applies a ShareFetch's
    /// MaxRecords and MaxBytes: the records acquired count against MaxRecords across the
    /// partitions; each partition reads at most its own `max_bytes` and what is left of
    /// the fetch's, and the first batch found is returned whatever its size when nothing
    /// was returned before it.
    pub(super) async fn share_fetch(
        self: &Rc<Self>,
        group: &str,
        member: &str,
        inputs: Vec<ShareFetchInput>,
        limits: ShareFetchLimits,
    ) -> Vec<Result<ShareFetchOutput, ShareError>> {
        let delivery = self.share_delivery(group);
        let persister = ShardPersister(self.clone());
        let generation = self.share_leader.available_generation();
        let mut left = limits;
        let mut out = Vec::with_capacity(inputs.len());
        for input in inputs {
            let Some(log) = self.partition(&input.tp) else {
                out.push(Err(ShareError::NotLeaderOrFollower));
                continue;
            };
            let budget = ByteBudget {
                max_bytes: input.max_bytes.min(left.max_bytes),
                min_one_batch: left.min_one_batch,
                batch_optimized: left.batch_optimized,
            };
            let spent = left.max_records == 0 || (budget.max_bytes == 0 && !budget.min_one_batch);
            if spent {
                out.push(Ok(ShareFetchOutput {
                    high_watermark: log.high_watermark(),
                    available_generation: generation,
                    ..ShareFetchOutput::default()
                }));
                continue;
            }
            let t = ShareTarget {
                group,
                tp: &input.tp,
                topic_id: input.topic_id,
                log: &log,
                delivery,
            };
            let (acquired, records) = match self
                .share_leader
                .fetch(&t, member, &persister, left.max_records, budget, now_ms())
                .await
            {
                Ok(a) => a,
                Err(e) => {
                    out.push(Err(e));
                    continue;
                }
            };
            let n: i64 = acquired.iter().map(|a| a.last - a.first + 1).sum();
            left.max_records = left
                .max_records
                .saturating_sub(usize::try_from(n).unwrap_or(usize::MAX));
            let bytes = records.as_ref().map_or(0, |r| r.len());
            left.max_bytes = left.max_bytes.saturating_sub(bytes);
            if bytes > 0 {
                left.min_one_batch = false;
            }
            out.push(Ok(ShareFetchOutput {
                acquired,
                records,
                high_watermark: log.high_watermark(),
                available_generation: generation,
            }));
        }
        out
    }

    pub(super) async fn share_acknowledge(
        self: &Rc<Self>,
        group: &str,
        member: &str,
        inputs: Vec<ShareAckInput>,
    ) -> Vec<Result<(), ShareError>> {
        let delivery = self.share_delivery(group);
        let persister = ShardPersister(self.clone());
        let mut out = Vec::with_capacity(inputs.len());
        for input in inputs {
            let Some(log) = self.partition(&input.tp) else {
                out.push(Err(ShareError::NotLeaderOrFollower));
                continue;
            };
            let t = ShareTarget {
                group,
                tp: &input.tp,
                topic_id: input.topic_id,
                log: &log,
                delivery,
            };
            out.push(
                self.share_leader
                    .acknowledge(&t, member, &persister, &input.batches, now_ms())
                    .await,
            );
        }
        out
    }

    /// `member`'s share session on these partitions ended: what it holds is released.
    pub(super) async fn share_release(
        self: &Rc<Self>,
        group: &str,
        member: &str,
        partitions: Vec<(TopicPartition, Uuid)>,
    ) {
        let persister = ShardPersister(self.clone());
        for (tp, topic_id) in partitions {
            let Some(log) = self.partition(&tp) else {
                continue;
            };
            let t = ShareTarget {
                group,
                tp: &tp,
                topic_id,
                log: &log,
                delivery: self.share_delivery(group),
            };
            if let Err(e) = self.share_leader.release(&t, member, &persister).await {
                tracing::debug!(group, member, topic = %tp.topic, partition = tp.partition, error = %e, "releasing a share member's records");
            }
        }
    }

    /// Ends the acquisition locks that ran out (the share partitions' timer).
    pub(crate) async fn expire_share_locks(self: &Rc<Self>) {
        let now = now_ms();
        let persister = ShardPersister(self.clone());
        for (group, tp) in self.share_leader.due(now) {
            let Some(log) = self.partition(&tp) else {
                continue;
            };
            let Some(topic_id) = self.metadata.snapshot().topic(&tp.topic).map(|t| t.id) else {
                continue;
            };
            let t = ShareTarget {
                group: &group,
                tp: &tp,
                topic_id,
                log: &log,
                delivery: self.share_delivery(&group),
            };
            if let Err(e) = self.share_leader.expire(&t, &persister, now).await {
                tracing::debug!(group, topic = %tp.topic, partition = tp.partition, error = %e, "storing expired share locks");
            }
        }
    }
}

/// The shard's way to the share coordinator (see the module doc).
pub struct ShardPersister(pub Rc<Shard>);

impl Persister for ShardPersister {
    fn call(
        &self,
        key: ShareKey,
        op: StateOp,
    ) -> LocalBoxFuture<'_, Result<Option<StateView>, StateFailure>> {
        Box::pin(async move {
            let mut tries = 0;
            loop {
                let answer = self.once(key.clone(), op.clone()).await;
                tries += 1;
                match answer {
                    Err(StateFailure::NotCoordinator | StateFailure::CoordinatorNotAvailable)
                        if tries < PERSISTER_TRIES =>
                    {
                        glommio::timer::sleep(PERSISTER_BACKOFF).await;
                    }
                    other => return other,
                }
            }
        })
    }
}

impl ShardPersister {
    async fn once(&self, key: ShareKey, op: StateOp) -> Result<Option<StateView>, StateFailure> {
        let shard = &self.0;
        let meta = shard.metadata.snapshot();
        let state_partition = shard.share_state.partition_of(&key);
        let leader = meta
            .partition(SHARE_STATE_TOPIC, state_partition)
            .map(|p| p.leader)
            .filter(|l| *l >= 0)
            .ok_or(StateFailure::CoordinatorNotAvailable)?;
        if leader == shard.config.node_id {
            let target = shard.owner_of(SHARE_STATE_TOPIC, state_partition);
            let (tx, rx) = oneshot::channel();
            let message = ShardMessage::ShareState {
                key,
                op: Box::new(op),
                reply: tx,
            };
            return shard
                .peers
                .call(target, message, rx)
                .await
                .unwrap_or(Err(StateFailure::CoordinatorNotAvailable));
        }
        remote::call(shard, &meta, leader, key, op).await
    }
}

/// The state APIs to the broker leading the key's state partition.
mod remote {
    use super::*;
    use crate::metadata::ClusterMetadata;
    use kafka_protocol::messages::{
        delete_share_group_state_request as delete, initialize_share_group_state_request as init,
        read_share_group_state_request as read, read_share_group_state_summary_request as summary,
        write_share_group_state_request as write, DeleteShareGroupStateRequest,
        DeleteShareGroupStateResponse, InitializeShareGroupStateRequest,
        InitializeShareGroupStateResponse, ReadShareGroupStateRequest, ReadShareGroupStateResponse,
        ReadShareGroupStateSummaryRequest, ReadShareGroupStateSummaryResponse,
        WriteShareGroupStateRequest, WriteShareGroupStateResponse,
    };
    use kafka_protocol::protocol::StrBytes;
    use kafka_protocol::ResponseError;

    fn failure(code: i16, message: Option<&StrBytes>) -> Result<(), StateFailure> {
        let text = || message.map(|m| m.to_string()).unwrap_or_default();
        match ResponseError::try_from_code(code) {
            None => Ok(()),
            Some(ResponseError::NotCoordinator) => Err(StateFailure::NotCoordinator),
            Some(ResponseError::CoordinatorNotAvailable)
            | Some(ResponseError::CoordinatorLoadInProgress) => {
                Err(StateFailure::CoordinatorNotAvailable)
            }
            Some(ResponseError::UnknownTopicOrPartition) => {
                Err(StateFailure::UnknownTopicOrPartition)
            }
            Some(ResponseError::FencedLeaderEpoch) => Err(StateFailure::Fenced(
                crate::share::state::StateError::FencedLeaderEpoch(-1, -1),
            )),
            Some(ResponseError::FencedStateEpoch) => Err(StateFailure::Fenced(
                crate::share::state::StateError::FencedStateEpoch(-1, -1),
            )),
            Some(ResponseError::InvalidRequest) => Err(StateFailure::InvalidRequest(text())),
            Some(other) => Err(StateFailure::Storage(format!("{other:?}: {}", text()))),
        }
    }

    pub(super) async fn call(
        shard: &Shard,
        meta: &ClusterMetadata,
        broker: i32,
        key: ShareKey,
        op: StateOp,
    ) -> Result<Option<StateView>, StateFailure> {
        let links = shard.txns.links();
        let group = StrBytes::from_string(key.group.clone());
        let unreachable = || StateFailure::CoordinatorNotAvailable;
        match op {
            StateOp::Read { leader_epoch } => {
                let req = ReadShareGroupStateRequest::default()
                    .with_group_id(group)
                    .with_topics(vec![read::ReadStateData::default()
                        .with_topic_id(key.topic)
                        .with_partitions(vec![read::PartitionData::default()
                            .with_partition(key.partition)
                            .with_leader_epoch(leader_epoch)])]);
                let resp: ReadShareGroupStateResponse = links
                    .ask(broker, meta, ApiKey::ReadShareGroupState, 0, &req)
                    .await
                    .ok_or_else(unreachable)?;
                let p = resp
                    .results
                    .first()
                    .and_then(|t| t.partitions.first())
                    .ok_or_else(unreachable)?;
                failure(p.error_code, p.error_message.as_ref())?;
                let batches = p
                    .state_batches
                    .iter()
                    .filter_map(|b| {
                        Some(StateBatch {
                            first: b.first_offset,
                            last: b.last_offset,
                            state: RecordState::from_id(b.delivery_state)?,
                            deliveries: u16::try_from(b.delivery_count).ok()?,
                        })
                    })
                    .collect();
                Ok(Some(StateView {
                    state_epoch: p.state_epoch,
                    leader_epoch,
                    start_offset: p.start_offset,
                    delivery_complete_count: -1,
                    batches,
                }))
            }
            StateOp::Initialize {
                state_epoch,
                start_offset,
            } => {
                let req = InitializeShareGroupStateRequest::default()
                    .with_group_id(group)
                    .with_topics(vec![init::InitializeStateData::default()
                        .with_topic_id(key.topic)
                        .with_partitions(vec![init::PartitionData::default()
                            .with_partition(key.partition)
                            .with_state_epoch(state_epoch)
                            .with_start_offset(start_offset)])]);
                let resp: InitializeShareGroupStateResponse = links
                    .ask(broker, meta, ApiKey::InitializeShareGroupState, 0, &req)
                    .await
                    .ok_or_else(unreachable)?;
                let p = resp
                    .results
                    .first()
                    .and_then(|t| t.partitions.first())
                    .ok_or_else(unreachable)?;
                failure(p.error_code, p.error_message.as_ref())?;
                Ok(None)
            }
            StateOp::Write(w) => {
                let batches = w
                    .batches
                    .iter()
                    .map(|b| {
                        write::StateBatch::default()
                            .with_first_offset(b.first)
                            .with_last_offset(b.last)
                            .with_delivery_state(b.state.id())
                            .with_delivery_count(i16::try_from(b.deliveries).unwrap_or(i16::MAX))
                    })
                    .collect();
                let req = WriteShareGroupStateRequest::default()
                    .with_group_id(group)
                    .with_topics(vec![write::WriteStateData::default()
                        .with_topic_id(key.topic)
                        .with_partitions(vec![write::PartitionData::default()
                            .with_partition(key.partition)
                            .with_state_epoch(w.state_epoch)
                            .with_leader_epoch(w.leader_epoch)
                            .with_start_offset(w.start_offset)
                            .with_state_batches(batches)])]);
                let resp: WriteShareGroupStateResponse = links
                    .ask(broker, meta, ApiKey::WriteShareGroupState, 0, &req)
                    .await
                    .ok_or_else(unreachable)?;
                let p = resp
                    .results
                    .first()
                    .and_then(|t| t.partitions.first())
                    .ok_or_else(unreachable)?;
                failure(p.error_code, p.error_message.as_ref())?;
                Ok(None)
            }
            // The administration APIs' operations (AlterShareGroupOffsets reads the
            // summary, DeleteGroups deletes): to whichever broker leads the state.
            StateOp::ReadSummary { leader_epoch } => {
                let req = ReadShareGroupStateSummaryRequest::default()
                    .with_group_id(group)
                    .with_topics(vec![summary::ReadStateSummaryData::default()
                        .with_topic_id(key.topic)
                        .with_partitions(vec![summary::PartitionData::default()
                            .with_partition(key.partition)
                            .with_leader_epoch(leader_epoch)])]);
                let resp: ReadShareGroupStateSummaryResponse = links
                    .ask(broker, meta, ApiKey::ReadShareGroupStateSummary, 0, &req)
                    .await
                    .ok_or_else(unreachable)?;
                let p = resp
                    .results
                    .first()
                    .and_then(|t| t.partitions.first())
                    .ok_or_else(unreachable)?;
                failure(p.error_code, p.error_message.as_ref())?;
                Ok(Some(StateView {
                    state_epoch: p.state_epoch,
                    leader_epoch: p.leader_epoch,
                    start_offset: p.start_offset,
                    delivery_complete_count: -1,
                    batches: Vec::new(),
                }))
            }
            StateOp::Delete => {
                let req = DeleteShareGroupStateRequest::default()
                    .with_group_id(group)
                    .with_topics(vec![delete::DeleteStateData::default()
                        .with_topic_id(key.topic)
                        .with_partitions(vec![
                            delete::PartitionData::default().with_partition(key.partition)
                        ])]);
                let resp: DeleteShareGroupStateResponse = links
                    .ask(broker, meta, ApiKey::DeleteShareGroupState, 0, &req)
                    .await
                    .ok_or_else(unreachable)?;
                let p = resp
                    .results
                    .first()
                    .and_then(|t| t.partitions.first())
                    .ok_or_else(unreachable)?;
                failure(p.error_code, p.error_message.as_ref())?;
                Ok(None)
            }
        }
    }
}
