//! ApiVersions (v0–v4; v4 only lets the supported-features minimum be 0): what this
//! broker implements, and the KIP-511 fallback.
//!
//! From v3 the features (KIP-584): every feature this release supports
//! (`corelog_controller::features::supported`, those above level 0) and the cluster's
//! finalized levels (`feature_level`: the metadata log's, or this broker's configured
//! ones while a cluster upgraded from a release before feature levels has finalized
//! none), under the metadata log index as the features' epoch, as Kafka gives its
//! metadata offset. Kafka 4 clients pick transaction version 2 (KIP-890 part 2) from
//! it. The APIs of a feature at level 0 are left out, as Kafka leaves them out: the
//! consumer group protocol's at `group.version` 0 (share groups answer
//! UNSUPPORTED_VERSION at `share.version` 0).
//!
//! A client that sends a newer ApiVersions than we know gets a v0-format response with
//! UNSUPPORTED_VERSION and our ranges, so it can retry at a version we support. Clients
//! pick every version from this answer: advertising a version that is not fully served
//! breaks them as surely as leaving one out.

use super::handler::{Call, Handler};
use super::{Ctx, SUPPORTED_APIS};
use crate::kafka::frame::{encode_response, FrameError, RequestFrame};
use bytes::BytesMut;
use corelog_controller::features;
use kafka_protocol::messages::api_versions_response::{
    ApiVersion, FinalizedFeatureKey, SupportedFeatureKey,
};
use kafka_protocol::messages::{ApiKey, ApiVersionsRequest, ApiVersionsResponse};
use kafka_protocol::protocol::StrBytes;
use kafka_protocol::ResponseError;

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
        if !super::consumer_protocol_enabled(ctx) {
            r.api_keys.retain(|v| {
                v.api_key != ApiKey::ConsumerGroupHeartbeat as i16
                    && v.api_key != ApiKey::ConsumerGroupDescribe as i16
            });
        }
        for (name, range) in features::supported() {
            if range.max == 0 {
                continue;
            }
            let mut supported = SupportedFeatureKey::default();
            supported.min_version = range.min;
            supported.max_version = range.max;
            let level = super::feature_level(ctx, &name);
            supported.name = StrBytes::from_string(name);
            if level > 0 {
                let mut finalized = FinalizedFeatureKey::default();
                finalized.name = supported.name.clone();
                finalized.min_version_level = level;
                finalized.max_version_level = level;
                r.finalized_features.push(finalized);
            }
            r.supported_features.push(supported);
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
