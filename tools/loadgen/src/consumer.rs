//! One consumer: fetches its share of the partitions (partition p belongs to consumer
//! `p % consumers`) from their leaders, counting messages and bytes, and in e2e mode
//! reading each message's send stamp for end-to-end latency.
//!
//! Runs as tasks on one executor (one fetch loop per leader broker) and uses only that
//! executor's connections.
//!
//! Invariants:
//! - One Fetch outstanding per (consumer, leader): the next fetch offsets depend on the
//!   previous answer, exactly as in a Kafka consumer. Each such fetch loop has a
//!   connection of its own, never the producers' (`Cluster::dedicated_conn`).
//! - A partition's offset only moves forward, to one past the last offset of the last
//!   complete batch returned; records below the requested offset (a broker may return a
//!   whole batch that starts earlier) are not counted twice.
//! - `consume` starts at the earliest offset, `e2e` at the latest as of setup (so it
//!   only sees this run's messages).
//!
//! Not here: consumer groups and offset commits. Partition assignment is static.

use crate::cli::Mode;
use crate::exec_ctx::{consumers_done, ExecCtx};
use anyhow::{anyhow, Result};
use corelog_kafka_client::connection::Connection;
use corelog_kafka_client::protocol;
use corelog_kafka_client::records::{for_each_batch, for_each_stamp};
use kafka_protocol::messages::{ApiKey, FetchResponse};
use kafka_protocol::ResponseError;
use std::collections::BTreeMap;
use std::rc::Rc;
use std::sync::atomic::Ordering;
use std::time::Instant;

pub async fn run(ctx: Rc<ExecCtx>, id: usize) -> Result<()> {
    let f = &ctx.cfg.flags;
    let mut by_leader: BTreeMap<i32, Vec<(i32, i64)>> = BTreeMap::new();
    for p in (0..ctx.cluster.partitions()).filter(|p| p % f.consumers == id) {
        let offset = *ctx
            .start_offsets
            .get(p)
            .ok_or_else(|| anyhow!("no start offset for partition {p}"))?;
        by_leader
            .entry(ctx.cluster.leader(p))
            .or_default()
            .push((p as i32, offset));
    }
    let mut loops = Vec::new();
    for (leader, parts) in by_leader {
        // Its own connection, as a Kafka consumer has: see `Cluster::dedicated_conn`.
        let conn = ctx.cluster.dedicated_conn(leader).await?;
        loops.push(glommio::spawn_local(fetch_loop(ctx.clone(), conn, parts)));
    }
    let mut result = Ok(());
    for l in loops {
        let r = l.await;
        if result.is_ok() {
            result = r;
        }
    }
    result
}

async fn fetch_loop(
    ctx: Rc<ExecCtx>,
    conn: Rc<Connection>,
    mut parts: Vec<(i32, i64)>,
) -> Result<()> {
    let f = &ctx.cfg.flags;
    let topic = protocol::topic_name(&f.topic);
    let version = conn.versions().fetch;
    let e2e = ctx.cfg.mode == Mode::E2e;
    while !consumers_done(&ctx) {
        let req = protocol::fetch_request(
            &topic,
            &parts,
            f.fetch_max_wait_ms,
            f.fetch_max_bytes,
            f.partition_fetch_max_bytes,
        );
        let sent_at = Instant::now();
        let resp: FetchResponse = conn.request(ApiKey::Fetch, version, &req).await?;
        let done = Instant::now();
        let done_us = ctx.clock.us(done);
        let mut rec = ctx.rec.borrow_mut();
        let measuring = rec.measuring(done_us);
        if resp.error_code != 0 {
            if measuring {
                rec.now.consumed.errors += 1;
            }
            ctx.shared
                .print_error(|| format!("fetch: {}", protocol::error_name(resp.error_code)));
            drop(rec);
            glommio::timer::sleep(std::time::Duration::from_millis(100)).await;
            continue;
        }
        let (mut messages, mut bytes) = (0u64, 0u64);
        let mut reset = Vec::new();
        for t in &resp.responses {
            for pd in &t.partitions {
                let Some(slot) = parts.iter_mut().find(|(p, _)| *p == pd.partition_index) else {
                    continue;
                };
                if pd.error_code != 0 {
                    if measuring {
                        rec.now.consumed.errors += 1;
                    }
                    ctx.shared.print_error(|| {
                        format!(
                            "fetch partition {}: {}",
                            pd.partition_index,
                            protocol::error_name(pd.error_code)
                        )
                    });
                    if pd.error_code == ResponseError::OffsetOutOfRange.code() {
                        reset.push(pd.partition_index);
                    }
                    continue;
                }
                let Some(records) = pd.records.as_ref() else {
                    continue;
                };
                let fetch_offset = slot.1;
                let mut next = fetch_offset;
                for_each_batch(records, |info, batch| {
                    if info.last_offset < fetch_offset {
                        return Ok(());
                    }
                    next = next.max(info.last_offset + 1);
                    if info.control {
                        return Ok(());
                    }
                    let first = info.base_offset.max(fetch_offset);
                    let n = if info.base_offset >= fetch_offset {
                        u64::try_from(info.records).unwrap_or(0)
                    } else {
                        u64::try_from(info.last_offset - first + 1).unwrap_or(0)
                    };
                    messages += n;
                    bytes += info.bytes as u64;
                    if e2e && measuring {
                        for_each_stamp(batch, |off, stamp| {
                            if off >= fetch_offset {
                                rec.now.consumed.record_e2e(stamp, done_us);
                            }
                        })?;
                    }
                    Ok(())
                })
                .map_err(|e| anyhow!("partition {}: bad record data: {e:#}", pd.partition_index))?;
                slot.1 = next;
            }
        }
        ctx.shared.consumed.fetch_add(messages, Ordering::Relaxed);
        if measuring && messages > 0 {
            rec.now.consumed.record_count(messages, bytes, done_us);
            // Fetch round trip, for fetches that returned data (an empty long-poll
            // measures the broker's max-wait, not its speed).
            rec.now
                .consumed
                .latency
                .saturating_record(done.duration_since(sent_at).as_micros() as u64);
        }
        drop(rec);
        if !reset.is_empty() {
            let earliest =
                crate::topic_offsets::list_offsets(&ctx.cluster, protocol::OFFSET_EARLIEST).await?;
            for (p, off) in parts.iter_mut() {
                if reset.contains(p) {
                    *off = earliest.get(*p as usize).copied().unwrap_or(*off);
                }
            }
        }
        glommio::executor().yield_if_needed().await;
    }
    Ok(())
}
