//! SaslAuthenticate (v0–v2, KIP-152): one token of the mechanism chosen in the
//! handshake. A refused token is answered SASL_AUTHENTICATION_FAILED with Kafka's
//! message after `connection.failed.authentication.delay.ms`, logged and counted, and
//! the connection is closed after the answer; only this connection waits. Outside an
//! exchange (no SASL on this listener, already authenticated) it is ILLEGAL_SASL_STATE.

use super::handler::{Call, Handler};
use super::Ctx;
use crate::kafka::frame::FrameError;
use crate::sasl::Step;
use bytes::Bytes;
use kafka_protocol::messages::{ApiKey, SaslAuthenticateRequest, SaslAuthenticateResponse};
use kafka_protocol::protocol::StrBytes;
use kafka_protocol::ResponseError;

pub struct SaslAuthenticate;

impl Handler for SaslAuthenticate {
    const KEY: ApiKey = ApiKey::SaslAuthenticate;
    const VERSIONS: (i16, i16) = (0, 2);
    type Request = SaslAuthenticateRequest;
    type Response = SaslAuthenticateResponse;

    async fn handle(
        ctx: &Ctx,
        req: Self::Request,
        call: &Call<'_>,
    ) -> Result<Self::Response, FrameError> {
        let mut body = SaslAuthenticateResponse::default();
        let Some(auth) = &call.session.auth else {
            body.error_code = ResponseError::IllegalSaslState.code();
            body.error_message = Some(StrBytes::from_static_str("this listener does not use SASL"));
            return Ok(body);
        };
        let meta = ctx.shard.metadata.snapshot();
        match auth.authenticate(&req.auth_bytes, |user, m| meta.scram.get(user, m).cloned()) {
            Step::Continue(bytes) => body.auth_bytes = Bytes::from(bytes),
            Step::Done(bytes) => {
                body.auth_bytes = Bytes::from(bytes);
                // v1+: how long the session lasts; the client re-authenticates before.
                if let Some(d) = auth.session_lifetime().filter(|_| call.version >= 1) {
                    body.session_lifetime_ms = i64::try_from(d.as_millis()).unwrap_or(i64::MAX);
                }
                tracing::debug!(peer = %call.peer, listener = %ctx.listener, user = auth.user().unwrap_or_default(), "authenticated");
            }
            Step::Failed(refusal) => {
                let principal = auth.claimed_principal();
                crate::sasl::audit_failure(
                    &ctx.listener,
                    call.peer,
                    principal.as_deref(),
                    &refusal.detail,
                );
                glommio::timer::sleep(auth.listener().failed_delay).await;
                body.error_code = ResponseError::SaslAuthenticationFailed.code();
                body.error_message = Some(StrBytes::from_string(refusal.to_client));
            }
        }
        Ok(body)
    }

    fn error_codes(r: &Self::Response, each: &mut dyn FnMut(i16)) {
        each(r.error_code);
    }
}
