//! DescribeUserScramCredentials (v0, KIP-554): each user's SCRAM mechanisms and
//! iteration counts from the metadata log (never the keys). No users named (or a null
//! list) describes every user that has a credential; a named user without one is
//! RESOURCE_NOT_FOUND and a user named twice DUPLICATE_RESOURCE, with Kafka's messages.
//! `kafka-configs --describe --entity-type users` asks this after the user's quotas.

use super::handler::{Call, Handler};
use super::Ctx;
use crate::kafka::access::{Access, Op};
use crate::kafka::frame::FrameError;
use kafka_protocol::messages::describe_user_scram_credentials_response::{
    CredentialInfo, DescribeUserScramCredentialsResult,
};
use kafka_protocol::messages::{
    ApiKey, DescribeUserScramCredentialsRequest, DescribeUserScramCredentialsResponse,
};
use kafka_protocol::protocol::StrBytes;
use kafka_protocol::ResponseError;
use std::collections::HashMap;

pub struct DescribeUserScramCredentials;

impl Handler for DescribeUserScramCredentials {
    const KEY: ApiKey = ApiKey::DescribeUserScramCredentials;
    const VERSIONS: (i16, i16) = (0, 0);
    type Request = DescribeUserScramCredentialsRequest;
    type Response = DescribeUserScramCredentialsResponse;

    async fn handle(
        ctx: &Ctx,
        req: Self::Request,
        call: &Call<'_>,
    ) -> Result<Self::Response, FrameError> {
        let mut body = DescribeUserScramCredentialsResponse::default();
        // DESCRIBE on the cluster.
        if !Access::new(ctx, call).allows_cluster(Op::Describe) {
            body.error_code = ResponseError::ClusterAuthorizationFailed.code();
            body.error_message = Some(StrBytes::from_static_str("Cluster authorization failed."));
            return Ok(body);
        }
        let meta = ctx.shard.metadata.snapshot();
        let users: Vec<String> = match req.users.filter(|u| !u.is_empty()) {
            Some(named) => named.iter().map(|u| u.name.to_string()).collect(),
            None => meta.scram.users().map(str::to_string).collect(),
        };
        let mut counts: HashMap<&str, usize> = HashMap::new();
        for u in &users {
            *counts.entry(u.as_str()).or_default() += 1;
        }
        for u in &users {
            let mut out = DescribeUserScramCredentialsResult::default();
            out.user = StrBytes::from_string(u.clone());
            let found = meta.scram.describe(u);
            if counts.get(u.as_str()).copied().unwrap_or(0) > 1 {
                out.error_code = ResponseError::DuplicateResource.code();
                out.error_message = Some(StrBytes::from_static_str(
                    "Cannot describe SCRAM credentials for the same user twice in a single request",
                ));
            } else if let Some(infos) = found {
                out.credential_infos = infos
                    .into_iter()
                    .map(|(m, iterations)| {
                        let mut c = CredentialInfo::default();
                        c.mechanism = m.wire();
                        c.iterations = iterations;
                        c
                    })
                    .collect();
            } else {
                out.error_code = ResponseError::ResourceNotFound.code();
                out.error_message = Some(StrBytes::from_static_str(
                    "Attempt to describe a user credential that does not exist",
                ));
            }
            body.results.push(out);
        }
        Ok(body)
    }

    fn error_codes(r: &Self::Response, each: &mut dyn FnMut(i16)) {
        each(r.error_code);
        for res in &r.results {
            each(res.error_code);
        }
    }
}
