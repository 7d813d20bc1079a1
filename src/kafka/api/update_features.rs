//! UpdateFeatures (v0–v2, KIP-584): changes the cluster's finalized feature levels
//! through the controller (`AdminChange::UpdateFeatures`, decided by
//! `corelog_controller::features::update` when the change is applied), all or none, so
//! `kafka-features upgrade|downgrade|disable` works as against Kafka. Needs ALTER on the
//! cluster (CLUSTER_AUTHORIZATION_FAILED otherwise). A refusal is one top-level error,
//! INVALID_UPDATE_VERSION with Kafka's message; v0–v1 list every feature with its result
//! on success (v2 lists none), as Kafka answers.
//!
//! v0 carries `allow_downgrade` instead of the upgrade type: true is a safe downgrade.

use super::admin_change::ask_admin_shard;
use super::handler::{Call, Handler};
use super::Ctx;
use crate::kafka::access::{Access, Op};
use crate::kafka::error_code;
use crate::kafka::frame::FrameError;
use corelog_controller::features::{FeatureUpdate, UpgradeType};
use corelog_shards::mesh::{AdminChange, TopicError};
use kafka_protocol::messages::update_features_response::UpdatableFeatureResult;
use kafka_protocol::messages::{ApiKey, UpdateFeaturesRequest, UpdateFeaturesResponse};
use kafka_protocol::protocol::StrBytes;
use kafka_protocol::ResponseError;
use std::collections::BTreeSet;

/// The update a request's key asks for, or why it is refused at the edge.
fn update_of(
    key: &kafka_protocol::messages::update_features_request::FeatureUpdateKey,
    version: i16,
) -> Result<FeatureUpdate, TopicError> {
    let upgrade = if version == 0 {
        if key.allow_downgrade {
            UpgradeType::SafeDowngrade
        } else {
            UpgradeType::Upgrade
        }
    } else {
        match key.upgrade_type {
            1 => UpgradeType::Upgrade,
            2 => UpgradeType::SafeDowngrade,
            3 => UpgradeType::UnsafeDowngrade,
            _ => {
                return Err(TopicError::InvalidFeatureUpdate(format!(
                    "Invalid update version {} for feature {}. The controller does not support \
                     the given upgrade type.",
                    key.max_version_level, key.feature
                )))
            }
        }
    };
    Ok(FeatureUpdate {
        name: key.feature.to_string(),
        level: key.max_version_level,
        upgrade,
    })
}

fn refused(code: ResponseError, message: String) -> UpdateFeaturesResponse {
    let mut body = UpdateFeaturesResponse::default();
    body.error_code = code.code();
    body.error_message = Some(StrBytes::from_string(message));
    body
}

pub struct UpdateFeatures;

impl Handler for UpdateFeatures {
    const KEY: ApiKey = ApiKey::UpdateFeatures;
    const VERSIONS: (i16, i16) = (0, 2);
    type Request = UpdateFeaturesRequest;
    type Response = UpdateFeaturesResponse;

    async fn handle(
        ctx: &Ctx,
        req: Self::Request,
        call: &Call<'_>,
    ) -> Result<Self::Response, FrameError> {
        if !Access::new(ctx, call).allows_cluster(Op::Alter) {
            return Ok(refused(
                ResponseError::ClusterAuthorizationFailed,
                "Cluster authorization failed.".into(),
            ));
        }
        let mut names = BTreeSet::new();
        let mut updates = Vec::with_capacity(req.feature_updates.len());
        for key in &req.feature_updates {
            if !names.insert(key.feature.as_str()) {
                return Ok(refused(
                    ResponseError::InvalidRequest,
                    format!("The feature {} is named more than once.", key.feature),
                ));
            }
            match update_of(key, call.version) {
                Ok(u) => updates.push(u),
                Err(e) => return Ok(refused(error_code::topic(&e), e.to_string())),
            }
        }
        let legacy = ctx.config.configured_feature_levels().legacy();
        let validate_only = call.version >= 1 && req.validate_only;
        let result = ask_admin_shard(ctx, |reply| AdminChange::UpdateFeatures {
            updates,
            legacy,
            validate_only,
            reply,
        })
        .await
        .unwrap_or_else(|| Err(TopicError::Storage("the controller is unavailable".into())));
        match result {
            Err(e) => {
                tracing::warn!(error = %e, "a feature update refused");
                Ok(refused(error_code::topic(&e), e.to_string()))
            }
            Ok(()) => {
                if !validate_only {
                    tracing::info!(
                        features = ?req.feature_updates.iter().map(|k| (k.feature.to_string(), k.max_version_level)).collect::<Vec<_>>(),
                        "feature levels finalized"
                    );
                }
                let mut body = UpdateFeaturesResponse::default();
                body.error_message = None;
                if call.version < 2 {
                    for key in &req.feature_updates {
                        let mut r = UpdatableFeatureResult::default();
                        r.feature = key.feature.clone();
                        r.error_message = None;
                        body.results.push(r);
                    }
                }
                Ok(body)
            }
        }
    }

    fn error_codes(r: &Self::Response, each: &mut dyn FnMut(i16)) {
        each(r.error_code);
    }
}
