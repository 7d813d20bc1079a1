//! Authorization at the edge: what a handler asks before it serves a resource — may
//! this connection's principal, from its address, perform an operation on a topic, a
//! group, a transactional id or the cluster — decided by the ACLs of the metadata image
//! (`corelog_controller::acl`, Kafka's `StandardAuthorizer` rules).
//!
//! Handlers make an [`Access`] once per request and ask it per resource, never per
//! record or batch; without an authorizer configured every answer is yes at the cost of
//! one branch. A refusal through [`Access::allows`] is audited: counted
//! (`corelog_denied_operations`) and logged, rate-limited per shard, with the principal,
//! the address, the listener, the resource and the operation. [`Access::may`] asks
//! quietly, for what Kafka filters without refusing (topics left out of a Metadata
//! answer, KIP-430's authorized-operation bits).

use super::api::handler::Call;
use super::api::Ctx;
use corelog_controller::acl::{AclOperation, AuthorizerPolicy, Requester, ResourceType};
use corelog_shards::metadata::ClusterMetadata;
use std::sync::Arc;
use std::time::Duration;

pub use corelog_controller::acl::{AclOperation as Op, ResourceType as Resource, CLUSTER_NAME};

/// One request's view of the authorizer.
pub struct Access<'a> {
    /// `None`: no authorizer, everything allowed.
    decide: Option<(&'a AuthorizerPolicy, Arc<ClusterMetadata>)>,
    who: Requester<'a>,
    call: &'a Call<'a>,
    listener: &'a str,
}

impl<'a> Access<'a> {
    pub fn new(ctx: &'a Ctx, call: &'a Call<'a>) -> Access<'a> {
        Access {
            decide: ctx
                .config
                .authorizer
                .as_ref()
                .map(|p| (p, ctx.shard.metadata.snapshot())),
            who: Requester {
                principal: call.session.principal(),
                host: &call.session.host,
            },
            call,
            listener: &ctx.listener,
        }
    }

    /// Whether an authorizer is configured.
    pub fn enabled(&self) -> bool {
        self.decide.is_some()
    }

    /// Whether `op` on the resource is allowed; a refusal is audited.
    pub fn allows(&self, op: AclOperation, resource: ResourceType, name: &str) -> bool {
        let allowed = self.may(op, resource, name);
        if !allowed {
            self.audit(op, resource, name);
        }
        allowed
    }

    /// `allows` on the cluster resource.
    pub fn allows_cluster(&self, op: AclOperation) -> bool {
        self.allows(op, ResourceType::Cluster, CLUSTER_NAME)
    }

    /// Whether `op` on the resource is allowed, without auditing a refusal.
    pub fn may(&self, op: AclOperation, resource: ResourceType, name: &str) -> bool {
        match &self.decide {
            None => true,
            Some((policy, meta)) => meta.acls.authorize(policy, self.who, op, resource, name),
        }
    }

    /// With an authorizer: a check of DESCRIBE on topics for this request's principal
    /// and address, that outlives the request (the group coordinator filters the topics
    /// a consumer group's patterns match with it, on whichever shard coordinates it).
    /// Quiet: a topic left out is not a refusal.
    pub fn topic_describe_check(
        &self,
    ) -> Option<corelog_shards::group::consumer::group::DescribeFilter> {
        let (policy, meta) = self.decide.as_ref()?;
        let policy = (*policy).clone();
        let meta = meta.clone();
        let principal = self.who.principal.to_string();
        let host = self.who.host.to_string();
        Some(corelog_shards::group::consumer::group::DescribeFilter(
            Arc::new(move |topic: &str| {
                let who = Requester {
                    principal: &principal,
                    host: &host,
                };
                meta.acls.authorize(
                    &policy,
                    who,
                    AclOperation::Describe,
                    ResourceType::Topic,
                    topic,
                )
            }),
        ))
    }

    /// Whether a topic of this name may be created (Kafka: CREATE on the cluster, or on
    /// the topic), without auditing: auto-creation is skipped, not refused.
    pub fn may_create_topic(&self, name: &str) -> bool {
        self.may(AclOperation::Create, ResourceType::Cluster, CLUSTER_NAME)
            || self.may(AclOperation::Create, ResourceType::Topic, name)
    }

    /// Whether `op` is allowed on some resource of the type (Kafka's
    /// `authorizeByResourceType`), without auditing.
    pub fn may_on_any(&self, op: AclOperation, resource: ResourceType) -> bool {
        match &self.decide {
            None => true,
            Some((policy, meta)) => meta.acls.authorize_any(policy, self.who, op, resource),
        }
    }

    /// KIP-430's field: of the operations in `supported` (a bit per `AclOperation`
    /// code), those allowed on the resource.
    pub fn operations(&self, supported: i32, resource: ResourceType, name: &str) -> i32 {
        if self.decide.is_none() {
            return supported;
        }
        (0..31)
            .filter(|bit| supported & (1 << bit) != 0)
            .filter(|bit| {
                AclOperation::from_wire(*bit as i8).is_some_and(|op| self.may(op, resource, name))
            })
            .fold(0, |field, bit| field | (1 << bit))
    }

    /// Counts and logs (at most a line a second per shard, with how many were left out)
    /// one refused operation.
    pub fn audit(&self, op: AclOperation, resource: ResourceType, name: &str) {
        corelog_metrics::record_limit(|c| c.denied_operations += 1);
        thread_local! {
            static LOG: crate::rate_limited_log::RateLimitedLog =
                crate::rate_limited_log::RateLimitedLog::new(Duration::from_secs(1));
        }
        LOG.with(|log| {
            if let Some(suppressed) = log.allow(std::time::Instant::now()) {
                tracing::warn!(
                    principal = self.who.principal,
                    peer = %self.call.peer,
                    listener = self.listener,
                    api = ?kafka_protocol::messages::ApiKey::try_from(self.call.header.request_api_key).ok(),
                    operation = ?op,
                    resource_type = ?resource,
                    resource = name,
                    suppressed,
                    "operation denied"
                );
            }
        });
    }
}
