//! One producer: generates messages on the open-loop schedule (or as fast as possible),
//! batches them per partition, and sends each leader's ready batches in one Produce.
//!
//! Runs as a task on one executor, with a connection of its own to each leader (as every
//! Kafka producer has), so its in-flight requests are its own.
//!
//! Invariants:
//! - Work per message is an append into the partition's batch buffer (varints, key,
//!   8-byte stamp, filler copy) and a run-length stamp update; everything else — CRC,
//!   compression, request encoding, the in-flight wait, latency recording — is per batch.
//! - Each message's stamp is its *intended* send time (schedule slot under `--rate`,
//!   the moment it was appended otherwise). Produce latency is ack time minus that
//!   stamp, so time spent waiting for an in-flight slot or behind a stalled broker is
//!   counted, never omitted.
//! - A batch is sent when the next message would not fit in `--batch-size` or when it
//!   is `--linger-ms` old, whichever comes first; at the end every batch is sent and
//!   every response awaited before `run` returns.
//! - Without keys, partitions are filled one batch at a time in turn (Kafka's sticky
//!   partitioner, KIP-480: the next partition once the batch is closed, full or lingered;
//!   [`Sticky`]); with keys, `keys::partition_for` decides.
//!
//! Not here: retries. A refused batch is counted in `errors` (and the first few printed
//! with their Kafka error name); its messages are not re-sent.

use crate::exec_ctx::ExecCtx;
use crate::keys::{KeyGen, KEY_BYTES};
use crate::rate::Schedule;
use anyhow::{Context, Result};
use bytes::Bytes;
use corelog_kafka_client::connection::Connection;
use corelog_kafka_client::protocol;
use corelog_kafka_client::records::BatchBuilder;
use glommio::sync::Gate;
use kafka_protocol::messages::{ApiKey, ProduceResponse, TopicName};
use kafka_protocol::protocol::Decodable;
use std::collections::BTreeMap;
use std::rc::Rc;
use std::sync::atomic::Ordering;
use std::time::{Duration, Instant};

/// Filler for message values after the 8-byte stamp: text-like bytes so the codecs have
/// something realistic to do (roughly 2–4x compressible, like JSON logs).
const FILLER: &[u8] = b"{\"ts\":1700000000000,\"level\":\"info\",\"svc\":\"checkout\",\"msg\":\"order accepted\",\"user\":4711,\"items\":[17,23,42],\"region\":\"eu-west\"} ";

/// Under `--rate`, the longest run of due messages appended before yielding, so a sender
/// that fell far behind does not monopolise its executor.
const CATCH_UP_CHUNK: u64 = 4096;

struct Acc {
    builder: BatchBuilder,
    /// (intended µs, count) runs, in append order.
    stamps: Vec<(u64, u32)>,
    opened: Option<Instant>,
    payload_bytes: u64,
}

struct Producer {
    ctx: Rc<ExecCtx>,
    topic: TopicName,
    accs: Vec<Acc>,
    keys: KeyGen,
    record_bytes: usize,
    message_size: usize,
    batch_size: usize,
    linger: Duration,
    sticky: Sticky,
    gate: Gate,
    /// Partitions whose batch is ready to send (full or lingered), in no order.
    ready: Vec<usize>,
    /// This producer's own connection to each leader, as every Kafka producer has: its
    /// requests in flight (`--max-in-flight`) are its own, not shared with the other
    /// producers of its thread.
    conns: BTreeMap<i32, Rc<Connection>>,
}

/// The partition unkeyed messages go to: one until its batch is closed — full, or sent
/// after lingering — then the next (Kafka's sticky partitioner, KIP-480). Moving on only
/// when a batch fills would keep a producer whose rate never fills a batch within
/// `--linger-ms` on one partition for the whole run.
#[derive(Debug)]
struct Sticky {
    current: usize,
    partitions: usize,
}

impl Sticky {
    /// Producer `id` starts at its own partition, so producers spread from the start.
    fn new(id: usize, partitions: usize) -> Self {
        let partitions = partitions.max(1);
        Sticky {
            current: id % partitions,
            partitions,
        }
    }

    fn current(&self) -> usize {
        self.current
    }

    /// `partition`'s batch was closed; if it was the sticky one, the next takes over.
    fn closed(&mut self, partition: usize) {
        if partition == self.current {
            self.current = (self.current + 1) % self.partitions;
        }
        debug_assert!(self.current < self.partitions);
    }
}

pub async fn run(ctx: Rc<ExecCtx>, id: usize, quota: Option<u64>) -> Result<()> {
    let f = &ctx.cfg.flags;
    let partitions = ctx.cluster.partitions();
    let keys = KeyGen::new(f.keys, f.seed.wrapping_add(id as u64));
    let key_len = keys.keyed().then_some(KEY_BYTES);
    let record_bytes = BatchBuilder::record_size(key_len, f.message_size);
    let mut p = Producer {
        topic: protocol::topic_name(&f.topic),
        accs: (0..partitions)
            .map(|_| Acc {
                builder: BatchBuilder::new(ctx.cfg.compression, f.batch_size + record_bytes),
                stamps: Vec::new(),
                opened: None,
                payload_bytes: 0,
            })
            .collect(),
        keys,
        record_bytes,
        message_size: f.message_size,
        batch_size: f.batch_size,
        linger: Duration::from_millis(f.linger_ms),
        sticky: Sticky::new(id, partitions),
        gate: Gate::new(),
        ready: Vec::new(),
        conns: BTreeMap::new(),
        ctx: ctx.clone(),
    };
    if f.idempotent {
        let (id, epoch) = init_producer_id(&ctx).await?;
        for acc in &mut p.accs {
            acc.builder.set_producer(id, epoch);
        }
    }
    let result = p.run_loop(quota).await;
    // Whatever stopped us, send what is batched and wait for every answer, so the
    // summary includes every message that was acknowledged.
    let flushed = p.flush_all().await;
    let _ = p.gate.close().await;
    result.and(flushed)
}

/// Asks the leader of partition 0 for a producer id (InitProducerId v1, no transactional
/// id), as an idempotent Kafka producer does once at start.
async fn init_producer_id(ctx: &ExecCtx) -> Result<(i64, i16)> {
    use kafka_protocol::messages::{InitProducerIdRequest, InitProducerIdResponse};
    let conn = ctx.cluster.conn(ctx.cluster.leader(0)).await?;
    let mut req = InitProducerIdRequest::default();
    req.transactional_id = None; // the codec's default is Some("")
    req.transaction_timeout_ms = 60_000;
    let resp: InitProducerIdResponse = conn.request(ApiKey::InitProducerId, 1, &req).await?;
    protocol::check(resp.error_code, "InitProducerId")?;
    Ok((resp.producer_id.0, resp.producer_epoch))
}

impl Producer {
    fn per_producer_rate(&self) -> Option<f64> {
        let f = &self.ctx.cfg.flags;
        f.rate.map(|r| r / f.producers as f64)
    }

    fn out_of_time(&self, now: Instant) -> bool {
        self.ctx.shared.should_stop() || self.ctx.deadline.is_some_and(|d| now >= d)
    }

    async fn run_loop(&mut self, quota: Option<u64>) -> Result<()> {
        let limit = quota.unwrap_or(u64::MAX);
        let schedule = self
            .per_producer_rate()
            .map(|r| Schedule::new(self.ctx.start, r));
        let per_batch = (self.batch_size / self.record_bytes).max(1) as u64;
        let mut sent = 0u64;
        while sent < limit {
            let now = Instant::now();
            if self.out_of_time(now) {
                break;
            }
            match &schedule {
                Some(s) => {
                    let due = s.due(now).min(limit).min(sent + CATCH_UP_CHUNK);
                    while sent < due {
                        let intended_us = self.ctx.clock.us(s.intended(sent));
                        self.append(intended_us, now);
                        sent += 1;
                    }
                    self.collect_lingered(Instant::now());
                    self.send_ready().await?;
                    // Sleep to the next slot or the next linger expiry, whichever is first.
                    let mut wake = s.intended(sent);
                    if let Some(l) = self.earliest_linger() {
                        wake = wake.min(l);
                    }
                    let now = Instant::now();
                    if wake > now {
                        glommio::timer::sleep(wake - now).await;
                    } else {
                        glommio::executor().yield_if_needed().await;
                    }
                }
                None => {
                    // As fast as possible: one batch's worth per turn, stamped now.
                    let n = per_batch.min(limit - sent);
                    let intended_us = self.ctx.clock.us(now);
                    for _ in 0..n {
                        self.append(intended_us, now);
                    }
                    sent += n;
                    self.collect_lingered(Instant::now());
                    self.send_ready().await?;
                    glommio::executor().yield_if_needed().await;
                }
            }
        }
        Ok(())
    }

    /// Appends one message; marks its partition ready if the next one would not fit.
    fn append(&mut self, intended_us: u64, now: Instant) {
        let partitions = self.accs.len();
        let key_index = self.keys.next_index();
        let partition = match key_index {
            Some(k) => crate::keys::partition_for(k, partitions),
            None => self.sticky.current(),
        };
        let key = key_index.map(|k| self.keys.render(k));
        let acc = &mut self.accs[partition];
        if acc.builder.is_empty() {
            acc.opened = Some(now);
        }
        acc.builder
            .append(key, intended_us, FILLER, self.message_size);
        acc.payload_bytes += (self.message_size + key.map_or(0, |k| k.len())) as u64;
        match acc.stamps.last_mut() {
            Some((t, n)) if *t == intended_us && *n < u32::MAX => *n += 1,
            _ => acc.stamps.push((intended_us, 1)),
        }
        if acc.builder.records_bytes() + self.record_bytes > self.batch_size {
            acc.opened = None; // not lingering any more: it is ready now
            self.ready.push(partition);
            self.sticky.closed(partition);
        }
    }

    async fn conn(&mut self, leader: i32) -> Result<Rc<Connection>> {
        if let Some(c) = self.conns.get(&leader) {
            return Ok(c.clone());
        }
        let c = self.ctx.cluster.dedicated_conn(leader).await?;
        self.conns.insert(leader, c.clone());
        Ok(c)
    }

    fn earliest_linger(&self) -> Option<Instant> {
        self.accs
            .iter()
            .filter_map(|a| a.opened)
            .min()
            .map(|o| o + self.linger)
    }

    fn collect_lingered(&mut self, now: Instant) {
        for (i, a) in self.accs.iter_mut().enumerate() {
            if a.opened.is_some_and(|o| now >= o + self.linger) {
                a.opened = None;
                self.ready.push(i);
                self.sticky.closed(i);
            }
        }
    }

    async fn flush_all(&mut self) -> Result<()> {
        for (i, a) in self.accs.iter_mut().enumerate() {
            if !a.builder.is_empty() {
                a.opened = None;
                self.ready.push(i);
            }
        }
        self.send_ready().await
    }

    /// Sends every ready batch: one Produce per leader, carrying all of its batches.
    async fn send_ready(&mut self) -> Result<()> {
        if self.ready.is_empty() {
            return Ok(());
        }
        let mut by_leader: BTreeMap<i32, Vec<usize>> = BTreeMap::new();
        for p in self.ready.drain(..) {
            if !self.accs[p].builder.is_empty() {
                by_leader
                    .entry(self.ctx.cluster.leader(p))
                    .or_default()
                    .push(p);
            }
        }
        for (leader, mut parts) in by_leader {
            // A partition can be marked ready more than once between sends.
            parts.sort_unstable();
            parts.dedup();
            let conn = self.conn(leader).await?;
            let mut batches = Vec::with_capacity(parts.len());
            let mut sent = Vec::with_capacity(parts.len());
            for p in parts {
                let acc = &mut self.accs[p];
                let count = acc.builder.count();
                let records = acc.builder.finish().context("encoding a record batch")?;
                batches.push((p as i32, records));
                sent.push(SentBatch {
                    partition: p as i32,
                    count: count as u64,
                    payload_bytes: std::mem::take(&mut acc.payload_bytes),
                    stamps: std::mem::take(&mut acc.stamps),
                });
            }
            // Backpressure: wait for an in-flight slot before handing the request off.
            let slot = conn.reserve().await?;
            let ctx = self.ctx.clone();
            let topic = self.topic.clone();
            let pass = self
                .gate
                .enter()
                .map_err(|_| anyhow::anyhow!("producer gate closed"))?;
            glommio::spawn_local(async move {
                send_request(&ctx, &conn, slot, &topic, batches, sent).await;
                drop(pass);
            })
            .detach();
        }
        Ok(())
    }
}

struct SentBatch {
    partition: i32,
    count: u64,
    payload_bytes: u64,
    stamps: Vec<(u64, u32)>,
}

/// Sends one Produce and records its outcome per partition. Never fails: a refused or
/// lost batch becomes `errors`, because the run should go on and report it.
async fn send_request(
    ctx: &ExecCtx,
    conn: &Connection,
    slot: glommio::sync::StaticPermit,
    topic: &TopicName,
    batches: Vec<(i32, Bytes)>,
    sent: Vec<SentBatch>,
) {
    let f = &ctx.cfg.flags;
    let version = conn.versions().produce;
    let req = protocol::produce_request(topic, f.acks, f.request_timeout_ms, batches);
    let outcome: Result<Option<ProduceResponse>> = if f.acks == 0 {
        let r = conn
            .send_only(ApiKey::Produce, version, &req)
            .await
            .map(|_| None);
        drop(slot);
        r.map_err(Into::into)
    } else {
        let r = conn.call(&slot, ApiKey::Produce, version, &req).await;
        drop(slot);
        r.map_err(anyhow::Error::from).and_then(|mut b| {
            ProduceResponse::decode(&mut b, version)
                .context("decoding Produce response")
                .map(Some)
        })
    };
    let done_us = ctx.clock.now_us();
    let mut rec = ctx.rec.borrow_mut();
    let measuring = rec.measuring(done_us);
    let mut fail = |b: &SentBatch, why: &dyn Fn() -> String| {
        if measuring {
            rec.now.produced.record_errors(b.count, done_us);
        }
        ctx.shared
            .print_error(|| format!("produce to partition {}: {}", b.partition, why()));
    };
    match outcome {
        Err(e) => {
            for b in &sent {
                fail(b, &|| format!("{e:#}"));
            }
        }
        Ok(None) => {
            // acks=0: nothing comes back; "acknowledged" means written to the socket.
            drop(fail);
            for b in &sent {
                ctx.shared.acked.fetch_add(b.count, Ordering::Relaxed);
                if measuring {
                    rec.now
                        .produced
                        .record_completed(&b.stamps, b.payload_bytes, done_us);
                }
            }
        }
        Ok(Some(resp)) => {
            let mut answered = vec![None; sent.len()];
            for t in &resp.responses {
                for pr in &t.partition_responses {
                    if let Some(i) = sent.iter().position(|b| b.partition == pr.index) {
                        answered[i] = Some((pr.error_code, pr.error_message.clone()));
                    }
                }
            }
            let mut ok = Vec::new();
            for (b, a) in sent.iter().zip(answered) {
                match a {
                    Some((0, _)) => ok.push(b),
                    Some((code, msg)) => fail(b, &|| {
                        let m = msg
                            .as_ref()
                            .map(|m| format!(": {}", m.as_str()))
                            .unwrap_or_default();
                        format!("{}{m}", protocol::error_name(code))
                    }),
                    None => fail(b, &|| {
                        "no answer for this partition in the Produce response".to_owned()
                    }),
                }
            }
            drop(fail);
            for b in ok {
                ctx.shared.acked.fetch_add(b.count, Ordering::Relaxed);
                if measuring {
                    rec.now
                        .produced
                        .record_completed(&b.stamps, b.payload_bytes, done_us);
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::Sticky;

    #[test]
    fn a_lingered_batch_moves_unkeyed_messages_to_the_next_partition() {
        let mut s = Sticky::new(0, 3);
        assert_eq!(s.current(), 0);
        s.closed(0); // lingered or full: either closes the batch
        assert_eq!(s.current(), 1);
        s.closed(1);
        s.closed(2);
        assert_eq!(s.current(), 0, "wraps around");
    }

    #[test]
    fn closing_another_partitions_batch_leaves_the_sticky_one() {
        let mut s = Sticky::new(1, 4);
        s.closed(0);
        s.closed(3);
        assert_eq!(s.current(), 1);
    }

    #[test]
    fn producers_start_apart_and_one_partition_is_always_itself() {
        assert_eq!(Sticky::new(5, 4).current(), 1);
        let mut one = Sticky::new(3, 1);
        one.closed(0);
        assert_eq!(one.current(), 0);
        assert_eq!(Sticky::new(0, 0).current(), 0, "no partitions known yet: 0");
    }
}
