//! SaslHandshake (v0–v1): the client names its SASL mechanism and is told the
//! listener's enabled ones. After v0 the client sends its tokens bare, without
//! SaslAuthenticate (before KIP-152; `net/connection.rs` reads them), as Kafka 3.x
//! serves them: old clients (kafka-python 2.0, Sarama before 1.41) send v0, and
//! librdkafka before 2.10 needs v0 advertised to use SASL at all. A mechanism the listener does not
//! enable is answered UNSUPPORTED_SASL_MECHANISM after
//! `connection.failed.authentication.delay.ms`, and the connection is closed after the
//! answer, as Kafka does; a handshake on a listener without SASL, or a second one, is
//! ILLEGAL_SASL_STATE.

use super::handler::{Call, Handler};
use super::Ctx;
use crate::kafka::frame::FrameError;
use crate::sasl::HandshakeRefusal;
use kafka_protocol::messages::{ApiKey, SaslHandshakeRequest, SaslHandshakeResponse};
use kafka_protocol::protocol::StrBytes;
use kafka_protocol::ResponseError;

pub struct SaslHandshake;

impl Handler for SaslHandshake {
    const KEY: ApiKey = ApiKey::SaslHandshake;
    const VERSIONS: (i16, i16) = (0, 1);
    type Request = SaslHandshakeRequest;
    type Response = SaslHandshakeResponse;

    async fn handle(
        ctx: &Ctx,
        req: Self::Request,
        call: &Call<'_>,
    ) -> Result<Self::Response, FrameError> {
        let mut body = SaslHandshakeResponse::default();
        let Some(auth) = &call.session.auth else {
            body.error_code = ResponseError::IllegalSaslState.code();
            return Ok(body);
        };
        body.mechanisms = auth
            .listener()
            .mechanisms
            .iter()
            .map(|m| StrBytes::from_string(m.clone()))
            .collect();
        match auth.handshake(req.mechanism.as_str()) {
            Ok(()) if call.version == 0 => auth.use_bare_tokens(),
            Ok(()) => {}
            Err(HandshakeRefusal::Unsupported) => {
                crate::sasl::audit_failure(
                    &ctx.listener,
                    call.peer,
                    None,
                    "unsupported SASL mechanism",
                );
                // Held back like any failed authentication, so a client retrying a
                // mechanism it will never get cannot spin.
                glommio::timer::sleep(auth.listener().failed_delay).await;
                body.error_code = ResponseError::UnsupportedSaslMechanism.code();
            }
            Err(HandshakeRefusal::OutOfTurn) => {
                body.error_code = ResponseError::IllegalSaslState.code();
            }
        }
        Ok(body)
    }

    fn error_codes(r: &Self::Response, each: &mut dyn FnMut(i16)) {
        each(r.error_code);
    }
}
