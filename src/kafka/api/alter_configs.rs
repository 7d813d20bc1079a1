//! AlterConfigs (v0–v2): replaces a topic's or broker's whole set of overrides; each
//! resource is validated whole and changed by the controller (see `config_resources`).

use super::config_resources::{alter, check_resource, named_twice, outcomes};
use super::handler::{Call, Handler};
use super::Ctx;
use crate::kafka::frame::FrameError;
use corelog_shards::mesh::ConfigOps;
use kafka_protocol::messages::{
    alter_configs_response, AlterConfigsRequest, AlterConfigsResponse, ApiKey,
};

pub struct AlterConfigs;

impl Handler for AlterConfigs {
    const KEY: ApiKey = ApiKey::AlterConfigs;
    const VERSIONS: (i16, i16) = (0, 2);
    type Request = AlterConfigsRequest;
    type Response = AlterConfigsResponse;

    async fn handle(
        ctx: &Ctx,
        req: Self::Request,
        call: &Call<'_>,
    ) -> Result<Self::Response, FrameError> {
        let access = crate::kafka::access::Access::new(ctx, call);
        let twice = named_twice(
            req.resources
                .iter()
                .map(|r| (r.resource_type, r.resource_name.as_str())),
        );
        let checked = req
            .resources
            .iter()
            .map(|r| {
                let dup = twice.contains(&(r.resource_type, r.resource_name.to_string()));
                // AlterConfigs replaces the whole override set; a null value is "not set".
                let pairs = r
                    .configs
                    .iter()
                    .filter_map(|c| {
                        c.value
                            .as_ref()
                            .map(|v| (c.name.to_string(), v.to_string()))
                    })
                    .collect();
                check_resource(
                    ctx,
                    &access,
                    r.resource_type,
                    r.resource_name.as_str(),
                    dup,
                    Ok(ConfigOps::Replace(pairs)),
                )
            })
            .collect();
        let outcomes_of = alter(ctx, checked, req.validate_only).await;
        let mut body = AlterConfigsResponse::default();
        let resources = req
            .resources
            .iter()
            .map(|r| (r.resource_type, &r.resource_name));
        for (t, name, code, message) in outcomes(resources, outcomes_of) {
            let mut out = alter_configs_response::AlterConfigsResourceResponse::default();
            (
                out.resource_type,
                out.resource_name,
                out.error_code,
                out.error_message,
            ) = (t, name, code, message);
            body.responses.push(out);
        }
        Ok(body)
    }

    fn error_codes(r: &Self::Response, each: &mut dyn FnMut(i16)) {
        for res in &r.responses {
            each(res.error_code);
        }
    }
}
