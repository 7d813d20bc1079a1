//! OffsetFetch (v0–v9): committed offsets of one group (v0–v7) or of several (v8+), all
//! partitions or the named ones. From v9 (KIP-848) a consumer-protocol member names
//! itself and its epoch: fetched at another epoch, the group answers
//! STALE_MEMBER_EPOCH (ILLEGAL_GENERATION for a classic member in a consumer group),
//! an unknown member UNKNOWN_MEMBER_ID; without them (an admin client) nothing is
//! checked.
//!
//! Offsets committed in a transaction that has not ended are never answered. With
//! `require_stable` (v7+, KIP-447) a partition that has one is answered
//! UNSTABLE_OFFSET_COMMIT (partition level, offset -1, as Kafka), so a consumer that
//! starts while a transactional producer's commit is undecided waits instead of reading
//! from an offset about to be replaced.

use super::group_routing::{ask_coordinator, s, sb, unavailable};
use super::handler::{Call, Handler};
use super::Ctx;
use crate::kafka::access::{Access, Op, Resource};
use crate::kafka::error_code;
use crate::kafka::frame::FrameError;
use corelog_shards::group::types::{Committed, GroupAnswer, GroupError, GroupOp};
use kafka_protocol::messages::offset_fetch_response::{
    OffsetFetchResponseGroup, OffsetFetchResponsePartition, OffsetFetchResponsePartitions,
    OffsetFetchResponseTopic, OffsetFetchResponseTopics,
};
use kafka_protocol::messages::*;
use kafka_protocol::ResponseError;
use std::collections::BTreeMap;

/// A partition's committed offset (or none), or why it is not told.
type Told = Result<Option<Committed>, ResponseError>;
type Row = (String, i32, Told);

/// One group's offsets as the OffsetFetch answer needs them. The principal needs
/// DESCRIBE on the group (GROUP_AUTHORIZATION_FAILED), and on each topic: a named topic
/// it may not describe is TOPIC_AUTHORIZATION_FAILED per partition; asked for all, such
/// topics are left out.
async fn fetch_group_offsets(
    ctx: &Ctx,
    access: &Access<'_>,
    group: &str,
    topics: Option<Vec<(String, Vec<i32>)>>,
    require_stable: bool,
    member: Option<(String, i32)>,
) -> Result<Vec<Row>, GroupError> {
    if !access.allows(Op::Describe, Resource::Group, group) {
        return Err(GroupError::AuthorizationFailed);
    }
    let mut denied = Vec::new();
    let topics = topics.map(|ts| {
        let (allowed, refused): (Vec<_>, Vec<_>) = ts
            .into_iter()
            .partition(|(t, _)| access.allows(Op::Describe, Resource::Topic, t));
        denied = refused;
        allowed
    });
    let all = topics.is_none();
    let mut rows: Vec<Row> = if topics.as_ref().is_some_and(|t| t.is_empty()) && !denied.is_empty()
    {
        Vec::new()
    } else {
        let op = GroupOp::FetchOffsets {
            group: group.to_string(),
            topics,
            require_stable,
            member,
        };
        match ask_coordinator(ctx, group, op).await {
            Ok(GroupAnswer::Offsets(r)) => r?
                .into_iter()
                .filter(|(t, _, _)| !all || access.may(Op::Describe, Resource::Topic, t))
                .map(|(t, p, c)| (t, p, c.map_err(|e| error_code::group(&e))))
                .collect(),
            Err(e) => return Err(e),
            _ => return Err(unavailable()),
        }
    };
    for (t, parts) in denied {
        for p in parts {
            rows.push((t.clone(), p, Err(ResponseError::TopicAuthorizationFailed)));
        }
    }
    Ok(rows)
}

/// Groups rows by topic, keeping first-seen order.
fn by_topic(rows: Vec<Row>) -> Vec<TopicOffsets> {
    let mut order: Vec<String> = Vec::new();
    let mut map: BTreeMap<String, Vec<(i32, Told)>> = BTreeMap::new();
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

/// One topic's committed offsets: (partition, committed or none, or why not told).
type TopicOffsets = (String, Vec<(i32, Told)>);

pub struct OffsetFetch;

impl Handler for OffsetFetch {
    const KEY: ApiKey = ApiKey::OffsetFetch;
    const VERSIONS: (i16, i16) = (0, 9);
    type Request = OffsetFetchRequest;
    type Response = OffsetFetchResponse;

    async fn handle(
        ctx: &Ctx,
        req: Self::Request,
        call: &Call<'_>,
    ) -> Result<Self::Response, FrameError> {
        let v = call.version;
        // The field exists from v7 (the decoder leaves it false before).
        let require_stable = v >= 7 && req.require_stable;
        let mut body = OffsetFetchResponse::default();
        let access = Access::new(ctx, call);
        if v >= 8 {
            // The multi-group form: every group and every partition asked for is answered
            // (a broker that dropped partitions here left clients consuming only one).
            for g in &req.groups {
                let group = s(&g.group_id.0);
                let topics = g.topics.as_ref().map(|ts| {
                    ts.iter()
                        .map(|t| (s(&t.name.0), t.partition_indexes.clone()))
                        .collect()
                });
                // v9: the member and its epoch, unless neither is given (Kafka's rule:
                // a null member id and a negative epoch are not checked).
                let member =
                    (v >= 9 && (g.member_id.is_some() || g.member_epoch >= 0)).then(|| {
                        (
                            g.member_id.as_ref().map(s).unwrap_or_default(),
                            g.member_epoch,
                        )
                    });
                let mut out = OffsetFetchResponseGroup::default();
                out.group_id = g.group_id.clone();
                match fetch_group_offsets(ctx, &access, &group, topics, require_stable, member)
                    .await
                {
                    Err(e) => out.error_code = error_code::group(&e).code(),
                    Ok(rows) => {
                        for (topic, parts) in by_topic(rows) {
                            let mut tr = OffsetFetchResponseTopics::default();
                            tr.name = TopicName(sb(topic));
                            for (p, c) in parts {
                                let mut pr = OffsetFetchResponsePartitions::default();
                                pr.partition_index = p;
                                let c = c.unwrap_or_else(|e| {
                                    pr.error_code = e.code();
                                    None
                                });
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
                body.groups.push(out);
            }
        } else {
            let group = s(&req.group_id.0);
            let topics = req.topics.as_ref().map(|ts| {
                ts.iter()
                    .map(|t| (s(&t.name.0), t.partition_indexes.clone()))
                    .collect()
            });
            match fetch_group_offsets(ctx, &access, &group, topics, require_stable, None).await {
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
                            let c = c.unwrap_or_else(|e| {
                                pr.error_code = e.code();
                                None
                            });
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
        }
        Ok(body)
    }

    fn error_codes(r: &Self::Response, each: &mut dyn FnMut(i16)) {
        each(r.error_code);
        for t in &r.topics {
            for p in &t.partitions {
                each(p.error_code);
            }
        }
        for g in &r.groups {
            each(g.error_code);
            for t in &g.topics {
                for p in &t.partitions {
                    each(p.error_code);
                }
            }
        }
    }
}
