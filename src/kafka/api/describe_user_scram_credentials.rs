//! DescribeUserScramCredentials (v0): corelog has no SASL, so no user has SCRAM
//! credentials. Describing all users answers an empty list; each named user is
//! RESOURCE_NOT_FOUND and a user named twice DUPLICATE_RESOURCE, with Kafka's messages.
//! `kafka-configs --describe --entity-type users` asks this after the user's quotas.

use super::handler::{Call, Handler};
use super::Ctx;
use crate::kafka::frame::FrameError;
use kafka_protocol::messages::describe_user_scram_credentials_response::DescribeUserScramCredentialsResult;
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
        _ctx: &Ctx,
        req: Self::Request,
        _call: &Call<'_>,
    ) -> Result<Self::Response, FrameError> {
        let mut body = DescribeUserScramCredentialsResponse::default();
        let users = req.users.unwrap_or_default();
        let mut named: HashMap<&str, usize> = HashMap::new();
        for u in &users {
            *named.entry(u.name.as_str()).or_default() += 1;
        }
        for u in &users {
            let mut out = DescribeUserScramCredentialsResult::default();
            out.user = u.name.clone();
            let (code, message) = if named.get(u.name.as_str()).copied().unwrap_or(0) > 1 {
                (
                    ResponseError::DuplicateResource,
                    "Cannot describe SCRAM credentials for the same user twice in a single request",
                )
            } else {
                (
                    ResponseError::ResourceNotFound,
                    "Attempt to describe a user credential that does not exist",
                )
            };
            out.error_code = code.code();
            out.error_message = Some(StrBytes::from_static_str(message));
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
