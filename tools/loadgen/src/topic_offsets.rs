//! The topic's offsets at setup and for consumers that start from the beginning: one
//! ListOffsets per partition leader.

use anyhow::{anyhow, Result};
use corelog_kafka_client::cluster::Cluster;
use corelog_kafka_client::protocol;
use kafka_protocol::messages::{ApiKey, ListOffsetsResponse};
use std::collections::BTreeMap;

/// Offsets of every partition (earliest or latest), asking each partition's leader.
pub async fn list_offsets(cluster: &Cluster, which: i64) -> Result<Vec<i64>> {
    let n = cluster.partitions();
    let mut by_leader: BTreeMap<i32, Vec<i32>> = BTreeMap::new();
    for p in 0..n {
        by_leader
            .entry(cluster.leader(p))
            .or_default()
            .push(p as i32);
    }
    let topic = protocol::topic_name(&cluster.topic);
    let mut out = vec![-1i64; n];
    for (leader, parts) in by_leader {
        let conn = cluster.conn(leader).await?;
        let v = conn.versions().list_offsets;
        let req = protocol::list_offsets_request(&topic, &parts, which);
        let resp: ListOffsetsResponse = conn.request(ApiKey::ListOffsets, v, &req).await?;
        for t in &resp.topics {
            for p in &t.partitions {
                protocol::check(
                    p.error_code,
                    &format!("ListOffsets partition {}", p.partition_index),
                )?;
                if let Some(slot) = usize::try_from(p.partition_index)
                    .ok()
                    .and_then(|i| out.get_mut(i))
                {
                    *slot = p.offset;
                }
            }
        }
    }
    if let Some(p) = out.iter().position(|&o| o < 0) {
        return Err(anyhow!("ListOffsets gave no offset for partition {p}"));
    }
    Ok(out)
}
