//! One executor's view of the cluster: bootstrap, the topic's partition leaders, and one
//! connection per broker.
//!
//! Owns: the connections of one executor (never shared with another core), the broker
//! addresses and partition leaders learnt from Metadata.
//!
//! Invariants:
//! - A request for a partition goes to the connection of that partition's leader as of
//!   the last Metadata; every leader of the topic has a known address (checked when the
//!   metadata is read, so lookups later cannot miss).
//! - The topic is created at most once, by `ensure_topic`, and only when `--partitions`
//!   asks for it; an existing topic is used as it is (its partition count wins).
//!
//! Not here: leader changes during a run (no metadata refresh: a NOT_LEADER error is
//! counted and reported, which is what a benchmark of a stable cluster should show).

use super::connection::Connection;
use super::protocol::{self, Versions};
use crate::error::{ClientError, Result};
use crate::security::ClientSecurity;
use kafka_protocol::messages::{ApiKey, CreateTopicsResponse, MetadataResponse};
use kafka_protocol::ResponseError;
use std::cell::RefCell;
use std::collections::HashMap;
use std::net::{SocketAddr, ToSocketAddrs};
use std::rc::Rc;
use std::time::{Duration, Instant};

/// How long topic creation may take to show up in Metadata with leaders.
const TOPIC_READY_TIMEOUT: Duration = Duration::from_secs(30);

#[derive(Clone, Debug)]
pub struct ClientOptions {
    pub bootstrap: Vec<String>,
    pub client_id: String,
    pub max_in_flight: usize,
    pub connect_timeout: Duration,
    /// TLS and SASL, as the brokers' listener requires (plaintext by default).
    pub security: ClientSecurity,
}

pub struct Cluster {
    opts: ClientOptions,
    pub topic: String,
    /// Each broker's address and host name (what its certificate names).
    brokers: HashMap<i32, (SocketAddr, String)>,
    /// Leader node id of partition `i` at index `i`.
    leaders: Vec<i32>,
    conns: RefCell<HashMap<i32, Rc<Connection>>>,
    bootstrap: Rc<Connection>,
}

/// Resolves "host:port" to the first address; an unresolvable name is a connect error.
fn resolve(addr: &str) -> Result<SocketAddr> {
    addr.to_socket_addrs()
        .ok()
        .and_then(|mut a| a.next())
        .ok_or_else(|| ClientError::Unreachable {
            addr: addr.to_owned(),
            reason: "address does not resolve".into(),
        })
}

impl Cluster {
    /// Connects to the first reachable bootstrap broker. With `create` = Some((partitions,
    /// rf)), creates the topic if it is missing; with `auto_create`, lets the broker
    /// auto-create it (the producer default, as Kafka clients do).
    pub async fn connect(
        opts: ClientOptions,
        topic: &str,
        create: Option<(i32, i16)>,
        auto_create: bool,
    ) -> Result<Cluster> {
        let mut last_err = None;
        let mut bootstrap = None;
        for a in &opts.bootstrap {
            match async {
                let addr = resolve(a)?;
                let host = a.rsplit_once(':').map_or(a.as_str(), |(h, _)| h);
                let host = host.trim_start_matches('[').trim_end_matches(']');
                Connection::connect_with(
                    addr,
                    host,
                    &opts.client_id,
                    opts.max_in_flight,
                    opts.connect_timeout,
                    &opts.security,
                )
                .await
            }
            .await
            {
                Ok(c) => {
                    bootstrap = Some(c);
                    break;
                }
                Err(e) => last_err = Some(e),
            }
        }
        let bootstrap = match bootstrap {
            Some(b) => b,
            None => {
                return Err(last_err
                    .unwrap_or_else(|| ClientError::Metadata("no --bootstrap address".into())))
            }
        };
        let mut cluster = Cluster {
            opts,
            topic: topic.to_owned(),
            brokers: HashMap::new(),
            leaders: Vec::new(),
            conns: RefCell::new(HashMap::new()),
            bootstrap,
        };
        cluster.ensure_topic(create, auto_create).await?;
        Ok(cluster)
    }

    fn versions(&self) -> Versions {
        self.bootstrap.versions()
    }

    async fn metadata(&self, auto_create: bool) -> Result<MetadataResponse> {
        let v = self.versions().metadata;
        let req = protocol::metadata_request(&self.topic, auto_create);
        self.bootstrap.request(ApiKey::Metadata, v, &req).await
    }

    async fn ensure_topic(&mut self, create: Option<(i32, i16)>, auto_create: bool) -> Result<()> {
        let started = Instant::now();
        let mut created = false;
        loop {
            let md = self.metadata(auto_create && create.is_none()).await?;
            let topic = md
                .topics
                .iter()
                .find(|t| t.name.as_ref().map(|n| n.0.as_str()) == Some(self.topic.as_str()));
            let code = topic
                .map(|t| t.error_code)
                .unwrap_or(ResponseError::UnknownTopicOrPartition.code());
            let ready = topic.filter(|t| {
                t.error_code == 0
                    && !t.partitions.is_empty()
                    && t.partitions.iter().all(|p| p.leader_id.0 >= 0)
            });
            if let Some(t) = ready {
                self.brokers = md
                    .brokers
                    .iter()
                    .map(|b| {
                        let addr = resolve(&format!("{}:{}", b.host.as_str(), b.port))?;
                        Ok((b.node_id.0, (addr, b.host.to_string())))
                    })
                    .collect::<Result<_>>()?;
                let n = t.partitions.len();
                let mut leaders = vec![-1; n];
                for p in &t.partitions {
                    let i = usize::try_from(p.partition_index)
                        .ok()
                        .filter(|&i| i < n)
                        .ok_or_else(|| {
                            ClientError::Metadata(format!(
                                "metadata lists partition {} of {n}",
                                p.partition_index
                            ))
                        })?;
                    if !self.brokers.contains_key(&p.leader_id.0) {
                        return Err(ClientError::Metadata(format!(
                            "partition {i} is led by broker {} which metadata does not list",
                            p.leader_id.0
                        )));
                    }
                    leaders[i] = p.leader_id.0;
                }
                if leaders.iter().any(|&l| l < 0) {
                    return Err(ClientError::Metadata(format!(
                        "metadata for {} does not cover every partition",
                        self.topic
                    )));
                }
                self.leaders = leaders;
                return Ok(());
            }
            let missing = code == ResponseError::UnknownTopicOrPartition.code();
            match create {
                Some((partitions, rf)) if missing && !created => {
                    self.create_topic(partitions, rf).await?;
                    created = true;
                }
                None if missing && !auto_create => {
                    return Err(ClientError::Metadata(format!(
                        "topic {} does not exist (give --partitions N to create it)",
                        self.topic
                    )))
                }
                _ => {}
            }
            if started.elapsed() > TOPIC_READY_TIMEOUT {
                return Err(ClientError::Metadata(format!(
                    "topic {} not ready after {:?}: {}",
                    self.topic,
                    TOPIC_READY_TIMEOUT,
                    protocol::error_name(code)
                )));
            }
            glommio::timer::sleep(Duration::from_millis(100)).await;
        }
    }

    async fn create_topic(&self, partitions: i32, rf: i16) -> Result<()> {
        let v = self.versions().create_topics.ok_or_else(|| {
            ClientError::Metadata(format!(
                "broker does not support CreateTopics; create {} yourself",
                self.topic
            ))
        })?;
        let req = protocol::create_topics_request(&self.topic, partitions, rf, 30_000);
        let resp: CreateTopicsResponse = self
            .bootstrap
            .request(ApiKey::CreateTopics, v, &req)
            .await?;
        for t in &resp.topics {
            // Someone else creating it first is fine.
            if t.error_code != 0 && t.error_code != ResponseError::TopicAlreadyExists.code() {
                let msg = t
                    .error_message
                    .as_ref()
                    .map(|m| m.as_str().to_owned())
                    .unwrap_or_default();
                return Err(ClientError::Metadata(format!(
                    "creating topic {}: {} {msg}",
                    self.topic,
                    protocol::error_name(t.error_code)
                )));
            }
        }
        Ok(())
    }

    pub fn partitions(&self) -> usize {
        self.leaders.len()
    }

    pub fn leader(&self, partition: usize) -> i32 {
        self.leaders.get(partition).copied().unwrap_or(-1)
    }

    /// A new connection to broker `node` for one caller alone, never shared or cached.
    /// Consumers fetch on one: Kafka answers a connection's requests one at a time, in
    /// order, so a long-poll Fetch on a connection producers also use holds their
    /// Produces until it returns (and it waits for data only those Produces bring).
    pub async fn dedicated_conn(&self, node: i32) -> Result<Rc<Connection>> {
        let (addr, host) = self
            .brokers
            .get(&node)
            .ok_or_else(|| ClientError::Metadata(format!("unknown broker {node}")))?;
        Connection::connect_with(
            *addr,
            host,
            &self.opts.client_id,
            self.opts.max_in_flight,
            self.opts.connect_timeout,
            &self.opts.security,
        )
        .await
    }

    /// The connection to broker `node`, connecting on first use. The bootstrap
    /// connection is reused when it is that broker.
    pub async fn conn(&self, node: i32) -> Result<Rc<Connection>> {
        if let Some(c) = self.conns.borrow().get(&node) {
            return Ok(c.clone());
        }
        let addr = self
            .brokers
            .get(&node)
            .ok_or_else(|| ClientError::Metadata(format!("unknown broker {node}")))?
            .0;
        let c = if addr == self.bootstrap.addr
            && !self
                .conns
                .borrow()
                .values()
                .any(|c| Rc::ptr_eq(c, &self.bootstrap))
        {
            self.bootstrap.clone()
        } else {
            self.dedicated_conn(node).await?
        };
        self.conns.borrow_mut().insert(node, c.clone());
        Ok(c)
    }
}
