//! ApiVersions (v0–v4; v4 only lets the supported-features minimum be 0): what this
//! broker implements, and the KIP-511 fallback.
//!
//! From v3 the features (KIP-584): `transaction.version` supported up to 2 and finalized
//! at the configured level (none at 0), under the metadata log index as the features'
//! epoch, as Kafka gives its metadata offset. Kafka 4 clients pick transaction version 2
//! (KIP-890 part 2) from it. `share.version` likewise, supported up to 1 and finalized
//! at `--share-version` (1 by default): share groups are served at 1.
//!
//! A client that sends a newer ApiVersions than we know gets a v0-format response with
//! UNSUPPORTED_VERSION and our ranges, so it can retry at a version we support. Clients
//! pick every version from this answer: advertising a version that is not fully served
//! breaks them as surely as leaving one out.

use super::handler::{Call, Handler};
use super::{Ctx, SUPPORTED_APIS};
use crate::kafka::frame::{encode_response, FrameError, RequestFrame};
use bytes::BytesMut;
use corelog_shards::txn::{TRANSACTION_VERSION_FEATURE, TRANSACTION_VERSION_MAX};
use kafka_protocol::messages::api_versions_response::{
    ApiVersion, FinalizedFeatureKey, SupportedFeatureKey,
};
use kafka_protocol::messages::{ApiKey, ApiVersionsRequest, ApiVersionsResponse};
use kafka_protocol::protocol::StrBytes;
use kafka_protocol::ResponseError;

/// Kafka's feature for share groups (KIP-932).
const SHARE_VERSION_FEATURE: &str = "share.version";

fn response(error_code: i16) -> ApiVersionsResponse {
    let mut r = ApiVersionsResponse::default();
    r.error_code = error_code;
    r.api_keys = SUPPORTED_APIS
        .iter()
        .map(|(k, min, max)| {
            let mut v = ApiVersion::default();
            v.api_key = *k as i16;
            v.min_version = *min;
            v.max_version = *max;
            v
        })
        .collect();
    r
}

pub struct ApiVersions;

impl Handler for ApiVersions {
    const KEY: ApiKey = ApiKey::ApiVersions;
    const VERSIONS: (i16, i16) = (0, 4);
    // v3 carries the client's software name/version; nothing here depends on them, but a
    // body that does not decode is a malformed request.
    type Request = ApiVersionsRequest;
    type Response = ApiVersionsResponse;

    async fn handle(
        ctx: &Ctx,
        _request: Self::Request,
        _call: &Call<'_>,
    ) -> Result<Self::Response, FrameError> {
        let mut r = response(0);
        let mut supported = SupportedFeatureKey::default();
        supported.name = StrBytes::from_static_str(TRANSACTION_VERSION_FEATURE);
        supported.min_version = 0;
        supported.max_version = TRANSACTION_VERSION_MAX;
        r.supported_features.push(supported);
        let mut share = SupportedFeatureKey::default();
        share.name = StrBytes::from_static_str(SHARE_VERSION_FEATURE);
        share.min_version = 0;
        share.max_version = crate::config::SHARE_VERSION_MAX;
        r.supported_features.push(share);
        if ctx.config.share_version > 0 {
            let mut finalized = FinalizedFeatureKey::default();
            finalized.name = StrBytes::from_static_str(SHARE_VERSION_FEATURE);
            finalized.min_version_level = ctx.config.share_version;
            finalized.max_version_level = ctx.config.share_version;
            r.finalized_features.push(finalized);
        }
        let level = ctx.config.txns.transaction_version;
        if level > 0 {
            let mut finalized = FinalizedFeatureKey::default();
            finalized.name = StrBytes::from_static_str(TRANSACTION_VERSION_FEATURE);
            finalized.min_version_level = level;
            finalized.max_version_level = level;
            r.finalized_features.push(finalized);
        }
        r.finalized_features_epoch =
            i64::try_from(ctx.shard.metadata.snapshot().version()).unwrap_or(i64::MAX);
        Ok(r)
    }

    fn error_codes(r: &Self::Response, each: &mut dyn FnMut(i16)) {
        each(r.error_code);
    }
}

pub fn unsupported_version(frame: &RequestFrame) -> Result<BytesMut, FrameError> {
    let body = response(ResponseError::UnsupportedVersion.code());
    crate::kafka::error_code::count(ApiKey::ApiVersions, body.error_code);
    encode_response(ApiKey::ApiVersions, 0, frame.header.correlation_id, &body)
}
