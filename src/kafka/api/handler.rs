//! The shape of every API handler, and the one place a request is decoded, answered,
//! its error codes counted and its response encoded.
//!
//! A handler is a type implementing [`Handler`] in the module named after its API: its
//! key and versions sit beside the code that serves them, and ApiVersions advertises
//! exactly what the handlers declare (`super::SUPPORTED_APIS`). Handlers see decoded
//! requests and return typed responses; they never touch frames, never count errors and
//! never encode.

use super::Ctx;
use crate::kafka::error_code;
use crate::kafka::frame::{FrameError, RequestFrame};
use crate::kafka::response_frame::{self, DeferredRecords, ResponseFrame};
use kafka_protocol::messages::{ApiKey, RequestHeader};
use kafka_protocol::protocol::{Decodable, Encodable};

/// What a handler knows of the request besides its body.
pub struct Call<'a> {
    /// The request's API version, within the handler's `VERSIONS`.
    pub version: i16,
    pub header: &'a RequestHeader,
    pub peer: std::net::SocketAddr,
    /// The quota decision made when the connection read the request.
    pub quota: &'a crate::quota::RequestQuota,
    /// Keeps the connection's produce requests in the order it read them.
    pub produce_order: &'a crate::kafka::produce_order::ProduceOrder,
    /// The connection's session (its authentication).
    pub session: &'a crate::session::Session,
}

/// One Kafka API as this broker serves it.
// Handlers run on the executor of the shard that read the request; their futures are
// never sent to another thread, so the trait needs no `Send` bounds.
#[allow(async_fn_in_trait)]
pub trait Handler {
    const KEY: ApiKey;
    /// The lowest and highest version served (inclusive).
    const VERSIONS: (i16, i16);
    type Request: Decodable;
    type Response: Encodable;

    async fn handle(
        ctx: &Ctx,
        request: Self::Request,
        call: &Call<'_>,
    ) -> Result<Self::Response, FrameError>;

    /// Every error code `response` carries, top level and per resource (the metrics
    /// count each one that is not 0).
    fn error_codes(response: &Self::Response, each: &mut dyn FnMut(i16));

    /// Whether the client waits for a response (Produce with acks=0 does not).
    fn responds(_request: &Self::Request) -> bool {
        true
    }

    /// The records `response`'s placeholders stand for (segment-file ranges, tail-cache
    /// entries), in the order it encodes them (`response_frame`); only Fetch has any.
    fn deferred_records(_response: &mut Self::Response) -> Vec<DeferredRecords> {
        Vec::new()
    }
}

/// Decodes `H`'s request body of `version` (a version `H` serves).
pub fn decode<H: Handler>(version: i16, body: &mut bytes::Bytes) -> Result<H::Request, FrameError> {
    H::Request::decode(body, version).map_err(|e| FrameError::Body {
        api: H::KEY,
        version,
        reason: e.to_string(),
    })
}

/// Serves one request of `H`'s API, whose version the dispatcher has checked.
pub async fn serve<H: Handler>(
    ctx: &Ctx,
    frame: RequestFrame,
    peer: std::net::SocketAddr,
    quota: &crate::quota::RequestQuota,
    produce_order: &crate::kafka::produce_order::ProduceOrder,
    session: &crate::session::Session,
) -> Result<Option<ResponseFrame>, FrameError> {
    debug_assert_eq!(frame.api_key, H::KEY);
    let RequestFrame {
        api_version,
        header,
        mut body,
        ..
    } = frame;
    let request = decode::<H>(api_version, &mut body)?;
    drop(body);
    let responds = H::responds(&request);
    let call = Call {
        version: api_version,
        header: &header,
        peer,
        quota,
        produce_order,
        session,
    };
    let mut response = H::handle(ctx, request, &call).await?;
    H::error_codes(&response, &mut |code| error_code::count(H::KEY, code));
    if !responds {
        return Ok(None);
    }
    let deferred = H::deferred_records(&mut response);
    response_frame::encode(
        H::KEY,
        api_version,
        header.correlation_id,
        &response,
        deferred,
    )
    .map(Some)
}
