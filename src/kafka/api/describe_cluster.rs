//! DescribeCluster (v0–v2): the brokers clients may talk to and the controller.
//!
//! A single node is the whole cluster: it lists itself (never fenced, no rack) and names
//! itself as controller, as a Kafka broker names a live broker, since clients never reach
//! the KRaft controllers. Asking a broker for the controllers' endpoints (endpoint type 2,
//! v1+) is MISMATCHED_ENDPOINT_TYPE, any other type UNSUPPORTED_ENDPOINT_TYPE, as Kafka
//! answers.

use super::handler::{Call, Handler};
use super::Ctx;
use crate::kafka::access::{Access, Resource, CLUSTER_NAME};
use crate::kafka::authorized_operations as ops;
use crate::kafka::frame::FrameError;
use kafka_protocol::messages::describe_cluster_response::DescribeClusterBroker;
use kafka_protocol::messages::{ApiKey, BrokerId, DescribeClusterRequest, DescribeClusterResponse};
use kafka_protocol::protocol::StrBytes;
use kafka_protocol::ResponseError;

const ENDPOINT_BROKERS: i8 = 1;
const ENDPOINT_CONTROLLERS: i8 = 2;

pub struct DescribeCluster;

impl Handler for DescribeCluster {
    const KEY: ApiKey = ApiKey::DescribeCluster;
    const VERSIONS: (i16, i16) = (0, 2);
    type Request = DescribeClusterRequest;
    type Response = DescribeClusterResponse;

    async fn handle(
        ctx: &Ctx,
        req: Self::Request,
        call: &Call<'_>,
    ) -> Result<Self::Response, FrameError> {
        let version = call.version;
        // v0 has no endpoint type: it asks for brokers.
        let endpoint_type = if version >= 1 {
            req.endpoint_type
        } else {
            ENDPOINT_BROKERS
        };
        let mut body = DescribeClusterResponse::default();
        if version >= 1 {
            body.endpoint_type = endpoint_type;
        }
        let meta = ctx.shard.metadata.snapshot();
        body.cluster_id = StrBytes::from_string(meta.cluster_id().to_string());
        body.cluster_authorized_operations = ops::if_requested(
            req.include_cluster_authorized_operations,
            Access::new(ctx, call).operations(ops::CLUSTER, Resource::Cluster, CLUSTER_NAME),
        );
        match endpoint_type {
            ENDPOINT_BROKERS => {
                body.brokers = meta
                    .live_brokers()
                    .filter_map(|b| {
                        let (host, port) = b.endpoint_on(&ctx.listener)?;
                        let mut broker = DescribeClusterBroker::default();
                        broker.broker_id = BrokerId(b.id);
                        broker.host = StrBytes::from_string(host.to_string());
                        broker.port = i32::from(port);
                        broker.rack = b.rack.clone().map(StrBytes::from_string);
                        Some(broker)
                    })
                    .collect();
                body.controller_id = BrokerId(super::metadata::named_controller(ctx, &meta));
            }
            other => {
                // Kafka's AuthHelper: asking a broker for controllers is a mismatch; an
                // unknown type is unsupported.
                let (error, message) = if other == ENDPOINT_CONTROLLERS {
                    (
                        ResponseError::MismatchedEndpointType,
                        "The request was sent to an endpoint of type BROKER, but we wanted an endpoint of type CONTROLLER".to_string(),
                    )
                } else {
                    (
                        ResponseError::UnsupportedEndpointType,
                        format!("Unsupported endpoint type {other}"),
                    )
                };
                body.error_code = error.code();
                body.error_message = Some(StrBytes::from_string(message));
                body.controller_id = BrokerId(-1);
            }
        }
        Ok(body)
    }

    fn error_codes(r: &Self::Response, each: &mut dyn FnMut(i16)) {
        each(r.error_code);
    }
}
