//! DescribeConfigs (v1–v4): topic, broker and group configs with their sources,
//! synonyms (v1+) and documentation (v3+); see `config_resources`.

use super::config_resources::{
    encode_entry, group_configs, s, security_configs, static_broker_configs, RESOURCE_BROKER,
    RESOURCE_GROUP, RESOURCE_TOPIC,
};
use super::handler::{Call, Handler};
use super::startup_configs;
use super::Ctx;
use crate::kafka::access::{Access, Op};
use crate::kafka::frame::FrameError;
use corelog_shards::kafka_broker_keys;
use corelog_shards::other_broker_configs;
use corelog_shards::topic_config::{self, Described};
use kafka_protocol::messages::describe_configs_response::DescribeConfigsResult;
use kafka_protocol::messages::{ApiKey, DescribeConfigsRequest, DescribeConfigsResponse};
use kafka_protocol::ResponseError;
use std::collections::HashSet;

pub struct DescribeConfigs;

impl Handler for DescribeConfigs {
    const KEY: ApiKey = ApiKey::DescribeConfigs;
    const VERSIONS: (i16, i16) = (1, 4);
    type Request = DescribeConfigsRequest;
    type Response = DescribeConfigsResponse;

    async fn handle(
        ctx: &Ctx,
        req: Self::Request,
        call: &Call<'_>,
    ) -> Result<Self::Response, FrameError> {
        let meta = ctx.shard.metadata.snapshot();
        let broker_defaults = meta.broker_defaults(&ctx.shard.config.log, ctx.config.node_id);
        let mut body = DescribeConfigsResponse::default();
        // A resource named twice is described once: the others get INVALID_REQUEST, so a
        // small request cannot ask for an enormous answer.
        let mut described_already = HashSet::new();
        let access = Access::new(ctx, call);
        for res in &req.resources {
            let mut out = DescribeConfigsResult::default();
            out.resource_type = res.resource_type;
            out.resource_name = res.resource_name.clone();
            let name = res.resource_name.as_str();
            let first = described_already.insert((res.resource_type, name.to_string()));
            // (entry, read-only) pairs.
            let checked = if first {
                super::config_resources::authorized(
                    &access,
                    Op::DescribeConfigs,
                    res.resource_type,
                    name,
                )
            } else {
                Err((
                    ResponseError::InvalidRequest,
                    format!("resource {name} is named more than once"),
                ))
            };
            let described: Result<Vec<(Described, bool)>, (ResponseError, String)> = match res
                .resource_type
            {
                _ if checked.is_err() => checked.map(|()| Vec::new()),
                RESOURCE_TOPIC => match meta.topic(name) {
                    Some(t) => Ok(topic_config::describe_topic(&broker_defaults, &t.configs)
                        .into_iter()
                        .map(|d| (d, false))
                        .collect()),
                    None => Err((
                        ResponseError::UnknownTopicOrPartition,
                        format!("topic {name} does not exist"),
                    )),
                },
                RESOURCE_BROKER if name.is_empty() => {
                    let own = topic_config::describe_cluster_default(&broker_defaults);
                    let named: HashSet<String> = own.iter().map(|d| d.name.clone()).collect();
                    let others =
                        other_broker_configs::describe_cluster_default(&broker_defaults, |n| {
                            named.contains(n)
                        });
                    Ok(own.into_iter().chain(others).map(|d| (d, false)).collect())
                }
                RESOURCE_BROKER if name == ctx.config.node_id.to_string() => {
                    // corelog's own keys (dynamic, then read at start), then the
                    // rest of Kafka's vocabulary and whatever else was stored.
                    let mut own: Vec<(Described, bool)> =
                        topic_config::describe_broker(&broker_defaults)
                            .into_iter()
                            .map(|d| (d, false))
                            .collect();
                    own.extend(
                        static_broker_configs(ctx)
                            .into_iter()
                            .chain(security_configs(ctx))
                            .map(|d| (d, true)),
                    );
                    let named: HashSet<String> = own.iter().map(|(d, _)| d.name.clone()).collect();
                    // corelog's other start-up keys with the values they took
                    // (STATIC where given in the file, or other than Kafka's default),
                    // then Kafka's keys it does not act on, and whatever else is stored.
                    let kafka = &ctx.config.kafka;
                    let mut given = kafka.not_acted_on.clone();
                    for key in kafka_broker_keys::all() {
                        let name = key.name;
                        if named.contains(name) || !kafka.read_at_start(name) {
                            continue;
                        }
                        let value = kafka
                            .given
                            .get(name)
                            .cloned()
                            .or_else(|| startup_configs::value_of(&ctx.config, name));
                        match value {
                            Some(v)
                                if kafka.given.contains_key(name)
                                    || key.default != Some(v.as_str()) =>
                            {
                                given.insert(name.to_string(), v);
                            }
                            _ => {}
                        }
                    }
                    let others = other_broker_configs::describe_broker(
                        &broker_defaults,
                        &given,
                        |n| {
                            named.contains(n)
                                || (kafka.read_at_start(n)
                                    && !given.contains_key(n)
                                    && startup_configs::value_of(&ctx.config, n).is_none())
                        },
                        |n| kafka.read_at_start(n),
                    );
                    own.extend(others);
                    Ok(own)
                }
                RESOURCE_BROKER => Err((
                    ResponseError::InvalidRequest,
                    format!("broker {name} is not this node ({})", ctx.config.node_id),
                )),
                RESOURCE_GROUP if name.is_empty() => Err((
                    ResponseError::InvalidRequest,
                    "group name must not be empty".to_string(),
                )),
                RESOURCE_GROUP => {
                    let meta = ctx.shard.metadata.snapshot();
                    Ok(group_configs(
                        &ctx.config.groups,
                        ctx.config.share_leader.delivery(),
                        meta.group_configs.get(name),
                    )
                    .into_iter()
                    .map(|d| (d, false))
                    .collect())
                }
                other => Err((
                    ResponseError::InvalidRequest,
                    format!("resource type {other} is not supported"),
                )),
            };
            match described {
                Ok(all) => {
                    out.configs = all
                        .iter()
                        .filter(|(d, _)| match &res.configuration_keys {
                            Some(keys) => keys.iter().any(|k| k.as_str() == d.name),
                            None => true,
                        })
                        .map(|(d, read_only)| encode_entry(d, *read_only, &req, call.version))
                        .collect();
                }
                Err((code, message)) => {
                    out.error_code = code.code();
                    out.error_message = Some(s(message));
                }
            }
            body.results.push(out);
        }
        Ok(body)
    }

    fn error_codes(r: &Self::Response, each: &mut dyn FnMut(i16)) {
        for res in &r.results {
            each(res.error_code);
        }
    }
}
