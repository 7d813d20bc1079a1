//! Writing a transaction's markers: WriteTxnMarkers to the leader of every partition of
//! the transaction, until each has its marker; and the connections to other brokers that
//! the transaction requests between brokers go over (`BrokerLinks::ask`, also used by a
//! partition leader's verification with a coordinator elsewhere).
//!
//! The coordinator sends one request per leader with the transaction's partitions it
//! leads (to this broker too, through its own listener, as to any other), and asks
//! again — after a pause, with the leaders the metadata names then — for the partitions
//! not done: an unreachable leader, one that lost the leadership, a marker not yet
//! committed. A partition whose topic is gone needs no marker. A partition that answers
//! INVALID_PRODUCER_EPOCH or TRANSACTION_COORDINATOR_FENCED means this coordinator was
//! replaced (a newer producer or coordinator wrote there): sending stops and the
//! transaction is left to the coordinator that replaced this one.
//!
//! Invariant: `write` returns `Ok` only once every partition that still exists has its
//! marker committed (acks=all on its leader), and stops as soon as `still_ours` says the
//! coordinator no longer holds the transaction.

use super::rules::Markers;
use super::state::TxnPartition;
use crate::metadata::ClusterMetadata;
use corelog_kafka_client::connection::Connection;
use corelog_kafka_client::security::ClientSecurity;
use kafka_protocol::messages::write_txn_markers_request::{
    WritableTxnMarker, WritableTxnMarkerTopic,
};
use kafka_protocol::messages::{
    ApiKey, ProducerId, TopicName, WriteTxnMarkersRequest, WriteTxnMarkersResponse,
};
use kafka_protocol::protocol::{Decodable, Encodable, StrBytes};
use kafka_protocol::ResponseError;
use std::cell::RefCell;
use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::net::{SocketAddr, ToSocketAddrs};
use std::rc::Rc;
use std::sync::Arc;
use std::time::Duration;

const WRITE_TXN_MARKERS_VERSION: i16 = 1;
/// Between two rounds for the partitions not done (Kafka's `retry.backoff.ms`-like pause).
const RETRY_BACKOFF: Duration = Duration::from_millis(100);
/// A leader that does not answer within this is asked again on a new connection.
const REQUEST_TIMEOUT: Duration = Duration::from_secs(40);
const CONNECT_TIMEOUT: Duration = Duration::from_secs(5);

/// Why markers were not all written.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum MarkerError {
    /// This coordinator no longer holds the transaction (unloaded, or replaced).
    #[error("the coordinator no longer holds the transaction")]
    NotCoordinator,
    /// A partition refused the marker as stale: another producer or coordinator wrote
    /// there since.
    #[error("partition {topic}-{partition} refused the marker (error code {code})")]
    Fenced {
        topic: String,
        partition: i32,
        code: i16,
    },
}

/// What a partition's answer means for its marker.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Outcome {
    Done,
    Retry,
    Fenced,
}

fn outcome(code: i16) -> Outcome {
    match ResponseError::try_from_code(code) {
        None => Outcome::Done,
        Some(ResponseError::InvalidProducerEpoch)
        | Some(ResponseError::TransactionCoordinatorFenced) => Outcome::Fenced,
        // Everything else may pass: a new leader, a replica back in the ISR, a topic whose
        // deletion the metadata shows next round.
        Some(_) => Outcome::Retry,
    }
}

/// Connections to other brokers (and this one, through its listener) for the transaction
/// requests between brokers — markers, a partition leader's verification — one per
/// broker, made on first use and dropped when they fail.
pub struct BrokerLinks {
    node_id: i32,
    security: ClientSecurity,
    conns: RefCell<HashMap<i32, Rc<Connection>>>,
}

impl BrokerLinks {
    pub fn new(node_id: i32, security: ClientSecurity) -> BrokerLinks {
        BrokerLinks {
            node_id,
            security,
            conns: RefCell::new(HashMap::new()),
        }
    }

    /// Writes `markers` with `coordinator_epoch` (see the module doc); `metadata` gives
    /// the cluster as it is now, `still_ours` whether to go on.
    pub async fn write(
        &self,
        markers: &Markers,
        coordinator_epoch: i32,
        metadata: impl Fn() -> Arc<ClusterMetadata>,
        still_ours: impl Fn() -> bool,
    ) -> Result<(), MarkerError> {
        let mut left: BTreeSet<TxnPartition> = markers.partitions.clone();
        let mut round = 0u64;
        loop {
            if !still_ours() {
                return Err(MarkerError::NotCoordinator);
            }
            let meta = metadata();
            // A partition of a deleted topic needs no marker.
            left.retain(|(t, p)| meta.partition(t, *p).is_some());
            if left.is_empty() {
                return Ok(());
            }
            let mut by_leader: BTreeMap<i32, BTreeSet<TxnPartition>> = BTreeMap::new();
            for (t, p) in &left {
                if let Some(leader) = meta.partition(t, *p).map(|s| s.leader).filter(|l| *l >= 0) {
                    by_leader.entry(leader).or_default().insert((t.clone(), *p));
                }
            }
            let sends = by_leader.into_iter().map(|(leader, parts)| {
                let meta = meta.clone();
                async move {
                    let answers = self
                        .send(leader, &meta, markers, coordinator_epoch, &parts)
                        .await;
                    (leader, parts, answers)
                }
            });
            for (leader, parts, answers) in futures::future::join_all(sends).await {
                let Some(answers) = answers else {
                    continue; // unreachable: all of `parts` stay
                };
                for part in parts {
                    match answers.get(&part).copied().map(outcome) {
                        Some(Outcome::Done) => {
                            left.remove(&part);
                        }
                        Some(Outcome::Fenced) => {
                            return Err(MarkerError::Fenced {
                                code: answers.get(&part).copied().unwrap_or_default(),
                                topic: part.0,
                                partition: part.1,
                            });
                        }
                        Some(Outcome::Retry) | None => {
                            if round % 50 == 49 {
                                tracing::warn!(leader, topic = %part.0, partition = part.1, code = ?answers.get(&part), "a transaction marker is still not written");
                            }
                        }
                    }
                }
            }
            if left.is_empty() {
                return Ok(());
            }
            round += 1;
            glommio::timer::sleep(RETRY_BACKOFF).await;
        }
    }

    /// One WriteTxnMarkers to `leader` for `parts`: each partition's error code, or
    /// `None` if the leader could not be asked.
    async fn send(
        &self,
        leader: i32,
        meta: &ClusterMetadata,
        markers: &Markers,
        coordinator_epoch: i32,
        parts: &BTreeSet<TxnPartition>,
    ) -> Option<HashMap<TxnPartition, i16>> {
        let mut topics: BTreeMap<&str, Vec<i32>> = BTreeMap::new();
        for (t, p) in parts {
            topics.entry(t.as_str()).or_default().push(*p);
        }
        let mut marker = WritableTxnMarker::default();
        marker.producer_id = ProducerId(markers.producer_id);
        marker.producer_epoch = markers.producer_epoch;
        marker.transaction_result = markers.commit;
        marker.coordinator_epoch = coordinator_epoch;
        for (t, ps) in topics {
            let mut topic = WritableTxnMarkerTopic::default();
            topic.name = TopicName(StrBytes::from_string(t.to_owned()));
            topic.partition_indexes = ps;
            marker.topics.push(topic);
        }
        let mut req = WriteTxnMarkersRequest::default();
        req.markers.push(marker);
        let resp: WriteTxnMarkersResponse = self
            .ask(
                leader,
                meta,
                ApiKey::WriteTxnMarkers,
                WRITE_TXN_MARKERS_VERSION,
                &req,
            )
            .await?;
        let mut out = HashMap::new();
        for m in resp.markers {
            for t in m.topics {
                for p in t.partitions {
                    out.insert((t.name.0.to_string(), p.partition_index), p.error_code);
                }
            }
        }
        Some(out)
    }

    /// One request to `broker` on its (cached) connection; `None`, the connection
    /// dropped, if it could not be made or was not answered in time.
    pub async fn ask<Req: Encodable, Resp: Decodable>(
        &self,
        broker: i32,
        meta: &ClusterMetadata,
        api: ApiKey,
        version: i16,
        req: &Req,
    ) -> Option<Resp> {
        let conn = self.connection(broker, meta).await?;
        let asked = conn.request::<Req, Resp>(api, version, req);
        let timeout = async {
            glommio::timer::sleep(REQUEST_TIMEOUT).await;
            Err(corelog_kafka_client::ClientError::Protocol(format!(
                "no answer to {api:?}"
            )))
        };
        match futures_lite::future::or(asked, timeout).await {
            Ok(resp) => Some(resp),
            Err(e) => {
                tracing::debug!(broker, ?api, error = %e, "a request to another broker failed");
                self.conns.borrow_mut().remove(&broker);
                None
            }
        }
    }

    async fn connection(&self, broker: i32, meta: &ClusterMetadata) -> Option<Rc<Connection>> {
        if let Some(c) = self.conns.borrow().get(&broker) {
            if !c.session_ending() {
                return Some(c.clone());
            }
        }
        let (addr, host) = broker_addr(meta, broker)?;
        let client_id = format!("corelog-txn-coordinator-{}", self.node_id);
        match Connection::connect_with(addr, &host, &client_id, 16, CONNECT_TIMEOUT, &self.security)
            .await
        {
            Ok(c) => {
                self.conns.borrow_mut().insert(broker, c.clone());
                Some(c)
            }
            Err(e) => {
                tracing::debug!(broker, %addr, error = %e, "connecting to write transaction markers");
                None
            }
        }
    }
}

/// The inter-broker address of `broker`, and the host name its certificate carries.
fn broker_addr(meta: &ClusterMetadata, broker: i32) -> Option<(SocketAddr, String)> {
    let b = meta.brokers.get(&broker)?;
    let addr = (b.endpoint.host.as_str(), b.endpoint.port)
        .to_socket_addrs()
        .ok()?
        .next()?;
    Some((addr, b.endpoint.host.clone()))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn answers_decide_each_marker() {
        assert_eq!(outcome(0), Outcome::Done);
        assert_eq!(
            outcome(ResponseError::InvalidProducerEpoch.code()),
            Outcome::Fenced
        );
        assert_eq!(
            outcome(ResponseError::TransactionCoordinatorFenced.code()),
            Outcome::Fenced
        );
        for retried in [
            ResponseError::NotLeaderOrFollower,
            ResponseError::UnknownTopicOrPartition,
            ResponseError::NotEnoughReplicas,
            ResponseError::RequestTimedOut,
            ResponseError::KafkaStorageError,
        ] {
            assert_eq!(outcome(retried.code()), Outcome::Retry, "{retried:?}");
        }
    }
}
