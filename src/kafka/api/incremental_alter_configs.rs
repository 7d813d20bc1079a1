//! IncrementalAlterConfigs (v0–v1): set, delete, append and subtract per key; each
//! resource is validated whole and changed by the controller (see `config_resources`).

use super::config_resources::{alter, check_resource, named_twice, outcomes};
use super::handler::{Call, Handler};
use super::Ctx;
use crate::kafka::frame::FrameError;
use corelog_shards::mesh::{ConfigOp, ConfigOps};
use kafka_protocol::messages::{
    incremental_alter_configs_response, ApiKey, IncrementalAlterConfigsRequest,
    IncrementalAlterConfigsResponse,
};

pub struct IncrementalAlterConfigs;

impl Handler for IncrementalAlterConfigs {
    const KEY: ApiKey = ApiKey::IncrementalAlterConfigs;
    const VERSIONS: (i16, i16) = (0, 1);
    type Request = IncrementalAlterConfigsRequest;
    type Response = IncrementalAlterConfigsResponse;

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
                let ops: Result<Vec<ConfigOp>, String> = r
                    .configs
                    .iter()
                    .map(|c| {
                        let name = c.name.to_string();
                        let value = c.value.as_ref().map(|v| v.to_string());
                        match (c.config_operation, value) {
                            (0, Some(v)) => Ok(ConfigOp::Set(name, v)),
                            (1, _) => Ok(ConfigOp::Delete(name)),
                            (2, Some(v)) => Ok(ConfigOp::Append(name, v)),
                            (3, Some(v)) => Ok(ConfigOp::Subtract(name, v)),
                            (0 | 2 | 3, None) => {
                                Err(format!("Null value not supported for: {name}"))
                            }
                            (op, _) => Err(format!("unknown config operation {op} for {name}")),
                        }
                    })
                    .collect();
                let mut keys: Vec<&str> = r.configs.iter().map(|c| c.name.as_str()).collect();
                keys.sort_unstable();
                let repeated = keys.windows(2).any(|w| w[0] == w[1]);
                let ops = if repeated {
                    Err("a config key is named more than once".to_string())
                } else {
                    ops.map(ConfigOps::Incremental)
                };
                check_resource(
                    ctx,
                    &access,
                    r.resource_type,
                    r.resource_name.as_str(),
                    dup,
                    ops,
                )
            })
            .collect();
        let outcomes_of = alter(ctx, checked, req.validate_only).await;
        let mut body = IncrementalAlterConfigsResponse::default();
        let resources = req
            .resources
            .iter()
            .map(|r| (r.resource_type, &r.resource_name));
        for (t, name, code, message) in outcomes(resources, outcomes_of) {
            let mut out =
                incremental_alter_configs_response::AlterConfigsResourceResponse::default();
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
