//! `corelog admin`: operations on a running cluster, through the Kafka protocol of any of
//! its brokers (no side channel: what the command does, an admin client can do too).
//!
//! `decommission --node N`: sets the dynamic broker config `corelog.decommission=true` on
//! broker N (IncrementalAlterConfigs on BROKER "N"); the active controller then places no
//! new replica there and moves every replica it holds to the other brokers, each move a
//! reassignment (see the controller's `balancer`). `--cancel` deletes the config. With
//! `--wait`, Metadata is read every second until no partition names N among its replicas
//! (every reassignment listed by ListPartitionReassignments included), and the command
//! says how many are left meanwhile; N can then be stopped for good.

use anyhow::{bail, Context};
use corelog_controller::image::DECOMMISSION_KEY;
use corelog_kafka_client::connection::Connection;
use kafka_protocol::messages::incremental_alter_configs_request::{
    AlterConfigsResource, AlterableConfig,
};
use kafka_protocol::messages::{
    ApiKey, IncrementalAlterConfigsRequest, IncrementalAlterConfigsResponse, MetadataRequest,
    MetadataResponse,
};
use kafka_protocol::protocol::StrBytes;
use std::net::{SocketAddr, ToSocketAddrs};
use std::time::{Duration, Instant};

#[derive(clap::Args, Debug)]
pub struct AdminArgs {
    #[command(subcommand)]
    pub command: AdminCommand,
}

#[derive(clap::Subcommand, Debug)]
pub enum AdminCommand {
    /// Drain a broker before it is removed: every replica moves to the other brokers.
    Decommission(DecommissionArgs),
}

#[derive(clap::Args, Debug)]
pub struct DecommissionArgs {
    /// The broker to drain.
    #[arg(long)]
    pub node: i32,
    /// Any broker of the cluster, HOST:PORT (its Kafka listener).
    #[arg(long, default_value = "127.0.0.1:9092")]
    pub bootstrap: String,
    /// Stop the decommission: the broker takes replicas again (moves in progress finish).
    #[arg(long)]
    pub cancel: bool,
    /// Wait until the broker holds no replica, saying how many are left.
    #[arg(long)]
    pub wait: bool,
    /// Give up waiting after this many seconds (exit code 1).
    #[arg(long, default_value_t = 3600)]
    pub timeout_seconds: u64,
}

const CONNECT_TIMEOUT: Duration = Duration::from_secs(10);
/// IncrementalAlterConfigs v1 and Metadata v9: flexible versions every broker serves.
const ALTER_CONFIGS_VERSION: i16 = 1;
const METADATA_VERSION: i16 = 9;

/// Runs `args` on a one-thread executor of its own (the client is glommio's).
pub fn run(args: AdminArgs) -> anyhow::Result<()> {
    let AdminCommand::Decommission(d) = args.command;
    glommio::LocalExecutorBuilder::default()
        .name("corelog-admin")
        .spawn(move || async move { decommission(d).await })
        .map_err(|e| anyhow::anyhow!("starting the admin executor: {e}"))?
        .join()
        .map_err(|e| anyhow::anyhow!("admin executor: {e}"))?
}

fn resolve(bootstrap: &str) -> anyhow::Result<SocketAddr> {
    bootstrap
        .to_socket_addrs()
        .with_context(|| format!("resolving {bootstrap}"))?
        .next()
        .with_context(|| format!("{bootstrap} names no address"))
}

async fn decommission(args: DecommissionArgs) -> anyhow::Result<()> {
    if args.node < 0 {
        bail!("--node must be a broker id (0 or above)");
    }
    let addr = resolve(&args.bootstrap)?;
    let conn = Connection::connect(addr, "corelog-admin", 1, CONNECT_TIMEOUT)
        .await
        .with_context(|| format!("connecting to {addr}"))?;
    let mut op = AlterableConfig::default();
    op.name = StrBytes::from_static_str(DECOMMISSION_KEY);
    if args.cancel {
        op.config_operation = 1; // DELETE
    } else {
        op.config_operation = 0; // SET
        op.value = Some(StrBytes::from_static_str("true"));
    }
    let mut resource = AlterConfigsResource::default();
    resource.resource_type = 4; // BROKER
    resource.resource_name = StrBytes::from_string(args.node.to_string());
    resource.configs = vec![op];
    let mut request = IncrementalAlterConfigsRequest::default();
    request.resources = vec![resource];
    let response: IncrementalAlterConfigsResponse = conn
        .request(
            ApiKey::IncrementalAlterConfigs,
            ALTER_CONFIGS_VERSION,
            &request,
        )
        .await
        .context("IncrementalAlterConfigs")?;
    for r in &response.responses {
        if r.error_code != 0 {
            bail!(
                "broker {} refused: error {} ({})",
                args.node,
                r.error_code,
                r.error_message.as_deref().unwrap_or("")
            );
        }
    }
    if args.cancel {
        println!("decommission of broker {} cancelled", args.node);
        return Ok(());
    }
    println!("decommission of broker {} started", args.node);
    if !args.wait {
        return Ok(());
    }
    let deadline = Instant::now() + Duration::from_secs(args.timeout_seconds);
    let mut last = usize::MAX;
    loop {
        let left = replicas_on(&conn, args.node).await?;
        if left == 0 {
            println!("broker {} holds no replica: it can be removed", args.node);
            return Ok(());
        }
        if left != last {
            println!("broker {}: {left} replicas left", args.node);
            last = left;
        }
        if Instant::now() >= deadline {
            bail!(
                "broker {} still holds {left} replicas after {} s",
                args.node,
                args.timeout_seconds
            );
        }
        glommio::timer::sleep(Duration::from_secs(1)).await;
    }
}

/// Partitions that name `node` among their replicas (a partition being moved off it
/// still does until the move completes).
async fn replicas_on(conn: &Connection, node: i32) -> anyhow::Result<usize> {
    let mut request = MetadataRequest::default();
    request.topics = None; // every topic
    let response: MetadataResponse = conn
        .request(ApiKey::Metadata, METADATA_VERSION, &request)
        .await
        .context("Metadata")?;
    Ok(response
        .topics
        .iter()
        .flat_map(|t| &t.partitions)
        .filter(|p| p.replica_nodes.iter().any(|r| r.0 == node))
        .count())
}
