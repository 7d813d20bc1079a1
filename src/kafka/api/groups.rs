//! The classic consumer-group protocol at the edge: FindCoordinator, JoinGroup,
//! SyncGroup, Heartbeat, LeaveGroup, OffsetCommit, OffsetFetch, DescribeGroups,
//! ListGroups, DeleteGroups, OffsetDelete.
//!
//! Each handler decodes the request into the coordinator's domain types
//! (`shards::group::types`), sends it to the group's coordinator shard — the owner of
//! partition `hash(group) % 50` of `__consumer_offsets` — over the mesh, and encodes the
//! answer. ListGroups asks every shard. This is a single node, so FindCoordinator always
//! names this broker; the routing to the right core happens inside.

use super::Ctx;
use crate::kafka::error_code;
use crate::kafka::frame::{decode_body, encode_response, FrameError, RequestFrame};
use bytes::BytesMut;
use futures::channel::oneshot;
use kafka_protocol::messages::delete_groups_response::DeletableGroupResult;
use kafka_protocol::messages::describe_groups_response::{DescribedGroup, DescribedGroupMember};
use kafka_protocol::messages::find_coordinator_response::Coordinator;
use kafka_protocol::messages::join_group_response::JoinGroupResponseMember;
use kafka_protocol::messages::leave_group_response::MemberResponse;
use kafka_protocol::messages::list_groups_response::ListedGroup;
use kafka_protocol::messages::offset_commit_response::{
    OffsetCommitResponsePartition, OffsetCommitResponseTopic,
};
use kafka_protocol::messages::offset_delete_response::{
    OffsetDeleteResponsePartition, OffsetDeleteResponseTopic,
};
use kafka_protocol::messages::offset_fetch_response::{
    OffsetFetchResponseGroup, OffsetFetchResponsePartition, OffsetFetchResponsePartitions,
    OffsetFetchResponseTopic, OffsetFetchResponseTopics,
};
use kafka_protocol::messages::*;
use kafka_protocol::protocol::StrBytes;
use kafka_protocol::ResponseError;
use shards::group::types::*;
use shards::mesh::ShardMessage;
use std::collections::BTreeMap;

fn s(v: &StrBytes) -> String {
    v.as_str().to_string()
}

fn sb(v: impl Into<String>) -> StrBytes {
    StrBytes::from_string(v.into())
}

fn code(e: &Option<GroupError>) -> i16 {
    e.as_ref().map(|e| error_code::group(e).code()).unwrap_or(0)
}

/// Sends `op` to `group`'s coordinator shard.
async fn call(ctx: &Ctx, group: &str, op: GroupOp) -> Option<GroupAnswer> {
    let target = ctx.shard.coordinator_of(group);
    let (tx, rx) = oneshot::channel();
    ctx.shard
        .call(target, ShardMessage::Group { op, reply: tx }, rx)
        .await
}

fn unavailable() -> GroupError {
    GroupError::CoordinatorNotAvailable
}

/// FindCoordinator's key types: 0 a group, 1 a transactional id. Transactions are not
/// implemented, so a transactional id gets TRANSACTIONAL_ID_AUTHORIZATION_FAILED, the
/// code InitProducerId and Produce give it too. It is fatal for librdkafka and the Java
/// client alike, so a transactional producer fails at once with an error that says what
/// is refused, instead of retrying the retriable COORDINATOR_NOT_AVAILABLE until its
/// own timeout. Any other key type is INVALID_REQUEST, as Kafka answers.
fn coordinator_key_error(key_type: i8) -> Option<ResponseError> {
    match key_type {
        0 => None,
        1 => Some(ResponseError::TransactionalIdAuthorizationFailed),
        _ => Some(ResponseError::InvalidRequest),
    }
}

fn coordinator_message(e: ResponseError) -> String {
    match e {
        ResponseError::TransactionalIdAuthorizationFailed => {
            "transactions are not supported by this broker".to_owned()
        }
        _ => "unknown coordinator key type".to_owned(),
    }
}

pub async fn find_coordinator(ctx: &Ctx, frame: &mut RequestFrame) -> Result<BytesMut, FrameError> {
    let req: FindCoordinatorRequest = decode_body(frame)?;
    let v = frame.api_version;
    let error = coordinator_key_error(req.key_type);
    // Kafka's error answer names no coordinator.
    let (node_id, host, port, code, message) = match error {
        None => (
            ctx.config.node_id,
            sb(ctx.config.advertise_host.clone()),
            ctx.config.advertise_port,
            0,
            None,
        ),
        Some(e) => (
            -1,
            sb(String::new()),
            -1,
            e.code(),
            Some(sb(coordinator_message(e))),
        ),
    };
    let mut body = FindCoordinatorResponse::default();
    if v >= 4 {
        for key in &req.coordinator_keys {
            let mut c = Coordinator::default();
            c.key = key.clone();
            c.node_id = BrokerId(node_id);
            c.host = host.clone();
            c.port = port;
            c.error_code = code;
            c.error_message = message.clone();
            error_code::count(ApiKey::FindCoordinator, code);
            body.coordinators.push(c);
        }
    } else {
        body.error_code = code;
        body.error_message = message;
        error_code::count(ApiKey::FindCoordinator, code);
        body.node_id = BrokerId(node_id);
        body.host = host;
        body.port = port;
    }
    encode_response(
        ApiKey::FindCoordinator,
        v,
        frame.header.correlation_id,
        &body,
    )
}

pub async fn join_group(
    ctx: &Ctx,
    frame: &mut RequestFrame,
    peer: &str,
) -> Result<BytesMut, FrameError> {
    let req: JoinGroupRequest = decode_body(frame)?;
    let v = frame.api_version;
    let group = s(&req.group_id.0);
    let op = GroupOp::Join(JoinRequest {
        group: group.clone(),
        member_id: s(&req.member_id),
        group_instance_id: req.group_instance_id.as_ref().map(s),
        client_id: frame.header.client_id.as_ref().map(s).unwrap_or_default(),
        client_host: format!("/{peer}"),
        session_timeout_ms: req.session_timeout_ms,
        // v0 has no rebalance timeout: it is the session timeout.
        rebalance_timeout_ms: if v >= 1 {
            req.rebalance_timeout_ms
        } else {
            req.session_timeout_ms
        },
        protocol_type: s(&req.protocol_type),
        protocols: req
            .protocols
            .iter()
            .map(|p| Protocol {
                name: s(&p.name),
                metadata: p.metadata.clone(),
            })
            .collect(),
        require_known_member_id: v >= 4,
    });
    let answer = match call(ctx, &group, op).await {
        Some(GroupAnswer::Join(a)) => a,
        _ => JoinAnswer::error(unavailable(), s(&req.member_id)),
    };
    let mut body = JoinGroupResponse::default();
    body.error_code = code(&answer.error);
    error_code::count(ApiKey::JoinGroup, body.error_code);
    body.generation_id = answer.generation;
    if v >= 9 {
        body.skip_assignment = answer.skip_assignment;
    }
    if v >= 7 {
        body.protocol_type = answer.protocol_type.map(sb);
    }
    body.protocol_name = if v >= 7 {
        answer.protocol_name.map(sb)
    } else {
        // Before v7 the field is not nullable.
        Some(sb(answer.protocol_name.unwrap_or_default()))
    };
    body.leader = sb(answer.leader);
    body.member_id = sb(answer.member_id);
    body.members = answer
        .members
        .into_iter()
        .map(|m| {
            let mut out = JoinGroupResponseMember::default();
            out.member_id = sb(m.member_id);
            if v >= 5 {
                out.group_instance_id = m.group_instance_id.map(sb);
            }
            out.metadata = m.metadata;
            out
        })
        .collect();
    encode_response(ApiKey::JoinGroup, v, frame.header.correlation_id, &body)
}

pub async fn sync_group(ctx: &Ctx, frame: &mut RequestFrame) -> Result<BytesMut, FrameError> {
    let req: SyncGroupRequest = decode_body(frame)?;
    let v = frame.api_version;
    let group = s(&req.group_id.0);
    let op = GroupOp::Sync(SyncRequest {
        group: group.clone(),
        generation: req.generation_id,
        member_id: s(&req.member_id),
        group_instance_id: req.group_instance_id.as_ref().map(s),
        protocol_type: req.protocol_type.as_ref().map(s),
        protocol_name: req.protocol_name.as_ref().map(s),
        assignments: req
            .assignments
            .iter()
            .map(|a| (s(&a.member_id), a.assignment.clone()))
            .collect(),
    });
    let answer = match call(ctx, &group, op).await {
        Some(GroupAnswer::Sync(a)) => a,
        _ => SyncAnswer::error(unavailable()),
    };
    let mut body = SyncGroupResponse::default();
    body.error_code = code(&answer.error);
    error_code::count(ApiKey::SyncGroup, body.error_code);
    if v >= 5 {
        body.protocol_type = answer.protocol_type.map(sb);
        body.protocol_name = answer.protocol_name.map(sb);
    }
    body.assignment = answer.assignment;
    encode_response(ApiKey::SyncGroup, v, frame.header.correlation_id, &body)
}

pub async fn heartbeat(ctx: &Ctx, frame: &mut RequestFrame) -> Result<BytesMut, FrameError> {
    let req: kafka_protocol::messages::HeartbeatRequest = decode_body(frame)?;
    let group = s(&req.group_id.0);
    let op = GroupOp::Heartbeat(shards::group::types::HeartbeatRequest {
        group: group.clone(),
        generation: req.generation_id,
        member_id: s(&req.member_id),
        group_instance_id: req.group_instance_id.as_ref().map(s),
    });
    let result = match call(ctx, &group, op).await {
        Some(GroupAnswer::Done(r)) => r,
        _ => Err(unavailable()),
    };
    let mut body = HeartbeatResponse::default();
    body.error_code = code(&result.err());
    error_code::count(ApiKey::Heartbeat, body.error_code);
    encode_response(
        ApiKey::Heartbeat,
        frame.api_version,
        frame.header.correlation_id,
        &body,
    )
}

pub async fn leave_group(ctx: &Ctx, frame: &mut RequestFrame) -> Result<BytesMut, FrameError> {
    let req: LeaveGroupRequest = decode_body(frame)?;
    let v = frame.api_version;
    let group = s(&req.group_id.0);
    // v0–v2 name one member; v3+ a batch (KIP-345).
    let members: Vec<LeavingMember> = if v >= 3 {
        req.members
            .iter()
            .map(|m| LeavingMember {
                member_id: s(&m.member_id),
                group_instance_id: m.group_instance_id.as_ref().map(s),
            })
            .collect()
    } else {
        vec![LeavingMember {
            member_id: s(&req.member_id),
            group_instance_id: None,
        }]
    };
    let answer = match call(
        ctx,
        &group,
        GroupOp::Leave {
            group: group.clone(),
            members: members.clone(),
        },
    )
    .await
    {
        Some(GroupAnswer::Leave(r)) => r,
        _ => Err(unavailable()),
    };
    let mut body = LeaveGroupResponse::default();
    match answer {
        Err(e) => body.error_code = error_code::group(&e).code(),
        Ok(per_member) => {
            if v >= 3 {
                for (m, r) in members.into_iter().zip(per_member) {
                    let mut out = MemberResponse::default();
                    out.member_id = sb(m.member_id);
                    out.group_instance_id = m.group_instance_id.map(sb);
                    out.error_code = code(&r.err());
                    error_code::count(ApiKey::LeaveGroup, out.error_code);
                    body.members.push(out);
                }
            } else if let Some(Err(e)) = per_member.into_iter().next() {
                body.error_code = error_code::group(&e).code();
            }
        }
    }
    error_code::count(ApiKey::LeaveGroup, body.error_code);
    encode_response(ApiKey::LeaveGroup, v, frame.header.correlation_id, &body)
}

pub async fn offset_commit(ctx: &Ctx, frame: &mut RequestFrame) -> Result<BytesMut, FrameError> {
    let req: OffsetCommitRequest = decode_body(frame)?;
    let v = frame.api_version;
    let group = s(&req.group_id.0);
    let meta = ctx.shard.metadata.snapshot();
    let mut offsets = Vec::new();
    // Partitions of unknown topics are refused up front, as Kafka does.
    let mut known: Vec<Vec<bool>> = Vec::with_capacity(req.topics.len());
    for t in &req.topics {
        let topic = s(&t.name.0);
        let mut k = Vec::with_capacity(t.partitions.len());
        for p in &t.partitions {
            let ok = meta.has_partition(&topic, p.partition_index);
            if ok {
                offsets.push((
                    topic.clone(),
                    p.partition_index,
                    p.committed_offset,
                    if v >= 6 { p.committed_leader_epoch } else { -1 },
                    p.committed_metadata.as_ref().map(s).unwrap_or_default(),
                ));
            }
            k.push(ok);
        }
        known.push(k);
    }
    let n = offsets.len();
    let results: Vec<Result<(), GroupError>> = if n == 0 {
        Vec::new()
    } else {
        let op = GroupOp::Commit(CommitRequest {
            group: group.clone(),
            // v0 carries no generation: a commit from outside the group protocol.
            generation: if v >= 1 {
                req.generation_id_or_member_epoch
            } else {
                -1
            },
            member_id: if v >= 1 {
                s(&req.member_id)
            } else {
                String::new()
            },
            group_instance_id: req.group_instance_id.as_ref().map(s),
            offsets,
        });
        match call(ctx, &group, op).await {
            Some(GroupAnswer::Commit(r)) => r,
            _ => vec![Err(unavailable()); n],
        }
    };
    let mut results = results.into_iter();
    let mut body = OffsetCommitResponse::default();
    for (t, k) in req.topics.iter().zip(known) {
        let mut tr = OffsetCommitResponseTopic::default();
        tr.name = t.name.clone();
        for (p, ok) in t.partitions.iter().zip(k) {
            let mut pr = OffsetCommitResponsePartition::default();
            pr.partition_index = p.partition_index;
            pr.error_code = if !ok {
                ResponseError::UnknownTopicOrPartition.code()
            } else {
                code(&results.next().and_then(|r| r.err()))
            };
            error_code::count(ApiKey::OffsetCommit, pr.error_code);
            tr.partitions.push(pr);
        }
        body.topics.push(tr);
    }
    encode_response(ApiKey::OffsetCommit, v, frame.header.correlation_id, &body)
}

/// One group's offsets as the OffsetFetch answer needs them.
async fn fetch_group_offsets(
    ctx: &Ctx,
    group: &str,
    topics: Option<Vec<(String, Vec<i32>)>>,
) -> Result<Vec<(String, i32, Option<Committed>)>, GroupError> {
    let op = GroupOp::FetchOffsets {
        group: group.to_string(),
        topics,
    };
    match call(ctx, group, op).await {
        Some(GroupAnswer::Offsets(r)) => r,
        _ => Err(unavailable()),
    }
}

/// One topic's committed offsets: (partition, committed or none).
type TopicOffsets = (String, Vec<(i32, Option<Committed>)>);

/// Groups (topic, partition, committed) by topic, keeping first-seen order.
fn by_topic(rows: Vec<(String, i32, Option<Committed>)>) -> Vec<TopicOffsets> {
    let mut order: Vec<String> = Vec::new();
    let mut map: BTreeMap<String, Vec<(i32, Option<Committed>)>> = BTreeMap::new();
    for (t, p, c) in rows {
        if !map.contains_key(&t) {
            order.push(t.clone());
        }
        map.entry(t).or_default().push((p, c));
    }
    order
        .into_iter()
        .map(|t| {
            let v = map.remove(&t).unwrap_or_default();
            (t, v)
        })
        .collect()
}

pub async fn offset_fetch(ctx: &Ctx, frame: &mut RequestFrame) -> Result<BytesMut, FrameError> {
    let req: OffsetFetchRequest = decode_body(frame)?;
    let v = frame.api_version;
    let mut body = OffsetFetchResponse::default();
    if v >= 8 {
        // The multi-group form: every group and every partition asked for is answered
        // (PITFALLS: one broker dropped partitions here and clients consumed only one).
        for g in &req.groups {
            let group = s(&g.group_id.0);
            let topics = g.topics.as_ref().map(|ts| {
                ts.iter()
                    .map(|t| (s(&t.name.0), t.partition_indexes.clone()))
                    .collect()
            });
            let mut out = OffsetFetchResponseGroup::default();
            out.group_id = g.group_id.clone();
            match fetch_group_offsets(ctx, &group, topics).await {
                Err(e) => out.error_code = error_code::group(&e).code(),
                Ok(rows) => {
                    for (topic, parts) in by_topic(rows) {
                        let mut tr = OffsetFetchResponseTopics::default();
                        tr.name = TopicName(sb(topic));
                        for (p, c) in parts {
                            let mut pr = OffsetFetchResponsePartitions::default();
                            pr.partition_index = p;
                            pr.committed_offset = c.as_ref().map(|c| c.offset).unwrap_or(-1);
                            pr.committed_leader_epoch =
                                c.as_ref().map(|c| c.leader_epoch).unwrap_or(-1);
                            pr.metadata = Some(sb(c.map(|c| c.metadata).unwrap_or_default()));
                            tr.partitions.push(pr);
                        }
                        out.topics.push(tr);
                    }
                }
            }
            error_code::count(ApiKey::OffsetFetch, out.error_code);
            body.groups.push(out);
        }
    } else {
        let group = s(&req.group_id.0);
        let topics = req.topics.as_ref().map(|ts| {
            ts.iter()
                .map(|t| (s(&t.name.0), t.partition_indexes.clone()))
                .collect()
        });
        match fetch_group_offsets(ctx, &group, topics).await {
            Err(e) => {
                // v2+ has a top-level error code; before, the error goes per partition.
                if v >= 2 {
                    body.error_code = error_code::group(&e).code();
                }
            }
            Ok(rows) => {
                for (topic, parts) in by_topic(rows) {
                    let mut tr = OffsetFetchResponseTopic::default();
                    tr.name = TopicName(sb(topic));
                    for (p, c) in parts {
                        let mut pr = OffsetFetchResponsePartition::default();
                        pr.partition_index = p;
                        pr.committed_offset = c.as_ref().map(|c| c.offset).unwrap_or(-1);
                        if v >= 5 {
                            pr.committed_leader_epoch =
                                c.as_ref().map(|c| c.leader_epoch).unwrap_or(-1);
                        }
                        pr.metadata = Some(sb(c.map(|c| c.metadata).unwrap_or_default()));
                        tr.partitions.push(pr);
                    }
                    body.topics.push(tr);
                }
            }
        }
        error_code::count(ApiKey::OffsetFetch, body.error_code);
    }
    encode_response(ApiKey::OffsetFetch, v, frame.header.correlation_id, &body)
}

pub async fn describe_groups(ctx: &Ctx, frame: &mut RequestFrame) -> Result<BytesMut, FrameError> {
    let req: DescribeGroupsRequest = decode_body(frame)?;
    let v = frame.api_version;
    let mut body = DescribeGroupsResponse::default();
    for g in &req.groups {
        let group = s(&g.0);
        let mut out = DescribedGroup::default();
        out.group_id = g.clone();
        if v >= 3 {
            out.authorized_operations = crate::kafka::authorized_operations::if_requested(
                req.include_authorized_operations,
                crate::kafka::authorized_operations::GROUP,
            );
        }
        match call(
            ctx,
            &group,
            GroupOp::Describe {
                group: group.clone(),
            },
        )
        .await
        {
            Some(GroupAnswer::Described(d)) => {
                out.group_state = sb(d.state);
                out.protocol_type = sb(d.protocol_type);
                out.protocol_data = sb(d.protocol);
                out.members = d
                    .members
                    .into_iter()
                    .map(|m| {
                        let mut dm = DescribedGroupMember::default();
                        dm.member_id = sb(m.member_id);
                        if v >= 4 {
                            dm.group_instance_id = m.group_instance_id.map(sb);
                        }
                        dm.client_id = sb(m.client_id);
                        dm.client_host = sb(m.client_host);
                        dm.member_metadata = m.metadata;
                        dm.member_assignment = m.assignment;
                        dm
                    })
                    .collect();
            }
            _ => out.error_code = ResponseError::CoordinatorNotAvailable.code(),
        }
        error_code::count(ApiKey::DescribeGroups, out.error_code);
        body.groups.push(out);
    }
    encode_response(
        ApiKey::DescribeGroups,
        v,
        frame.header.correlation_id,
        &body,
    )
}

/// Kafka's name of the classic group protocol's type (ListGroups v5).
const CLASSIC_GROUP_TYPE: &str = "classic";

pub async fn list_groups(ctx: &Ctx, frame: &mut RequestFrame) -> Result<BytesMut, FrameError> {
    let req: ListGroupsRequest = decode_body(frame)?;
    let v = frame.api_version;
    let calls = (0..ctx.shard.shard_count()).map(|target| {
        let (tx, rx) = oneshot::channel();
        ctx.shard.call(
            target,
            ShardMessage::Group {
                op: GroupOp::List,
                reply: tx,
            },
            rx,
        )
    });
    let filter: Vec<String> = req
        .states_filter
        .iter()
        .map(|x| s(x).to_ascii_lowercase())
        .collect();
    // v5 (KIP-848) filters by group type; every group here is a classic one.
    let classic_wanted = req.types_filter.is_empty()
        || req
            .types_filter
            .iter()
            .any(|t| t.as_str().eq_ignore_ascii_case(CLASSIC_GROUP_TYPE));
    let mut body = ListGroupsResponse::default();
    for answer in futures::future::join_all(calls).await {
        match answer {
            Some(GroupAnswer::Listed(groups)) => {
                for g in groups {
                    if !classic_wanted
                        || (!filter.is_empty() && !filter.contains(&g.state.to_ascii_lowercase()))
                    {
                        continue;
                    }
                    let mut out = ListedGroup::default();
                    out.group_id = GroupId(sb(g.group));
                    out.protocol_type = sb(g.protocol_type);
                    if v >= 4 {
                        out.group_state = sb(g.state);
                    }
                    if v >= 5 {
                        out.group_type = sb(CLASSIC_GROUP_TYPE.to_string());
                    }
                    body.groups.push(out);
                }
            }
            _ => body.error_code = ResponseError::CoordinatorNotAvailable.code(),
        }
    }
    error_code::count(ApiKey::ListGroups, body.error_code);
    encode_response(ApiKey::ListGroups, v, frame.header.correlation_id, &body)
}

pub async fn delete_groups(ctx: &Ctx, frame: &mut RequestFrame) -> Result<BytesMut, FrameError> {
    let req: DeleteGroupsRequest = decode_body(frame)?;
    let mut body = DeleteGroupsResponse::default();
    for g in &req.groups_names {
        let group = s(&g.0);
        let mut out = DeletableGroupResult::default();
        out.group_id = g.clone();
        out.error_code = match call(
            ctx,
            &group,
            GroupOp::Delete {
                group: group.clone(),
            },
        )
        .await
        {
            Some(GroupAnswer::Done(r)) => code(&r.err()),
            _ => ResponseError::CoordinatorNotAvailable.code(),
        };
        error_code::count(ApiKey::DeleteGroups, out.error_code);
        body.results.push(out);
    }
    encode_response(
        ApiKey::DeleteGroups,
        frame.api_version,
        frame.header.correlation_id,
        &body,
    )
}

pub async fn offset_delete(ctx: &Ctx, frame: &mut RequestFrame) -> Result<BytesMut, FrameError> {
    let req: OffsetDeleteRequest = decode_body(frame)?;
    let group = s(&req.group_id.0);
    let partitions: Vec<(String, i32)> = req
        .topics
        .iter()
        .flat_map(|t| {
            t.partitions
                .iter()
                .map(move |p| (s(&t.name.0), p.partition_index))
        })
        .collect();
    let answer = match call(
        ctx,
        &group,
        GroupOp::DeleteOffsets {
            group: group.clone(),
            partitions,
        },
    )
    .await
    {
        Some(GroupAnswer::OffsetsDeleted(r)) => r,
        _ => Err(unavailable()),
    };
    let mut body = OffsetDeleteResponse::default();
    match answer {
        Err(e) => body.error_code = error_code::group(&e).code(),
        Ok(results) => {
            let mut results = results.into_iter();
            for t in &req.topics {
                let mut tr = OffsetDeleteResponseTopic::default();
                tr.name = t.name.clone();
                for p in &t.partitions {
                    let mut pr = OffsetDeleteResponsePartition::default();
                    pr.partition_index = p.partition_index;
                    pr.error_code = code(&results.next().and_then(|r| r.err()));
                    error_code::count(ApiKey::OffsetDelete, pr.error_code);
                    tr.partitions.push(pr);
                }
                body.topics.push(tr);
            }
        }
    }
    error_code::count(ApiKey::OffsetDelete, body.error_code);
    encode_response(
        ApiKey::OffsetDelete,
        frame.api_version,
        frame.header.correlation_id,
        &body,
    )
}
