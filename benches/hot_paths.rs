//! Micro benchmarks of corelog's hot paths, each per batch (the unit the broker works in):
//!
//! - `batch_validate`: validating a 16 KiB RecordBatch v2 as produce does (CRC-32C over
//!   the batch, record structure walk).
//! - `offset_index_lookup`: a lookup in a full 1 GiB segment's sparse index.
//! - `segment_append`: appending 64 KiB batches to a partition log and waiting for the
//!   direct-I/O write (acks=1), on a real file in the system temp directory.
//! - `produce_request_decode`: parsing a 4-partition × 16 KiB Produce v9 frame.
//! - `fetch_response_encode`: framing a 4-partition × 1 MiB Fetch v12 response.
//!
//! Run: `cargo bench --bench hot_paths`. Results and the machine they came from go to
//! benches/RESULTS.md.

use bytes::{Bytes, BytesMut};
use corelog::kafka::frame;
use corelog_storage::batch;
use corelog_storage::batch_builder::{BatchBuilder, Record};
use corelog_storage::offset_index::OffsetIndex;
use corelog_storage::{AckLevel, LogConfig, PartitionLog};
use criterion::{criterion_group, criterion_main, BatchSize, Criterion, Throughput};
use kafka_protocol::messages::fetch_response::{FetchableTopicResponse, PartitionData};
use kafka_protocol::messages::produce_request::{PartitionProduceData, TopicProduceData};
use kafka_protocol::messages::{ApiKey, FetchResponse, ProduceRequest, RequestHeader, TopicName};
use kafka_protocol::protocol::{Encodable, StrBytes};
use std::time::{Duration, Instant};

fn batch_of(records: usize, value_len: usize) -> Vec<u8> {
    let value = vec![0x5au8; value_len];
    let mut b = BatchBuilder::new(1_700_000_000_000);
    for i in 0..records {
        let key = format!("key-{i}");
        b.push(&Record {
            key: Some(key.as_bytes()),
            value: Some(&value),
            headers: &[],
            timestamp_delta: i as i64,
        });
    }
    b.build()
}

fn bench_validate(c: &mut Criterion) {
    let b = batch_of(16, 1000);
    let mut g = c.benchmark_group("batch_validate");
    g.throughput(Throughput::Bytes(b.len() as u64));
    g.bench_function("16x1KiB", |bench| {
        bench.iter(|| batch::validate(std::hint::black_box(&b), usize::MAX).map(|h| h.record_count))
    });
    g.finish();
}

fn bench_index(c: &mut Criterion) {
    // A full 1 GiB segment: one entry per 4 KiB.
    let mut index = OffsetIndex::new(0);
    for i in 1..262_144u32 {
        index.append(i64::from(i) * 4, i * 4096);
    }
    let mut x = 12345u64;
    c.bench_function("offset_index_lookup/262144_entries", |bench| {
        bench.iter(|| {
            x = x
                .wrapping_mul(6364136223846793005)
                .wrapping_add(1442695040888963407);
            index.lookup(((x >> 33) % 1_048_576) as i64)
        })
    });
}

fn bench_append(c: &mut Criterion) {
    let b = batch_of(64, 1000);
    let len = b.len() as u64;
    let mut g = c.benchmark_group("segment_append");
    g.throughput(Throughput::Bytes(len));
    g.sample_size(20);
    g.bench_function("64KiB_acks1", |bench| {
        bench.iter_custom(|iters| {
            let b = b.clone();
            glommio::LocalExecutorBuilder::default()
                .spawn(move || async move {
                    let dir = tempfile::tempdir().expect("tempdir");
                    let log = PartitionLog::open(
                        dir.path().join("bench-0"),
                        LogConfig::default(),
                        corelog_storage::LogContext::system(),
                    )
                    .await
                    .expect("open");
                    let start = Instant::now();
                    for _ in 0..iters {
                        let t = log.append(&b, 0).expect("append");
                        log.wait(t, AckLevel::Leader).await.expect("written");
                    }
                    let elapsed = start.elapsed();
                    log.close().await;
                    elapsed
                })
                .expect("executor")
                .join()
                .unwrap_or(Duration::ZERO)
        })
    });
    g.finish();
}

fn produce_frame() -> Bytes {
    let records = Bytes::from(batch_of(16, 1000));
    let mut req = ProduceRequest::default();
    req.acks = -1;
    req.timeout_ms = 30_000;
    let mut topic = TopicProduceData::default();
    topic.name = TopicName(StrBytes::from_static_str("bench"));
    for p in 0..4 {
        let mut part = PartitionProduceData::default();
        part.index = p;
        part.records = Some(records.clone());
        topic.partition_data.push(part);
    }
    req.topic_data.push(topic);
    let version = 9;
    let mut header = RequestHeader::default();
    header.request_api_key = ApiKey::Produce as i16;
    header.request_api_version = version;
    header.correlation_id = 7;
    let mut out = BytesMut::new();
    header
        .encode(&mut out, ApiKey::Produce.request_header_version(version))
        .expect("header");
    req.encode(&mut out, version).expect("body");
    out.freeze()
}

fn bench_decode(c: &mut Criterion) {
    let bytes = produce_frame();
    let mut g = c.benchmark_group("produce_request_decode");
    g.throughput(Throughput::Bytes(bytes.len() as u64));
    g.bench_function("v9_4x16KiB", |bench| {
        bench.iter_batched(
            || bytes.clone(),
            |b| {
                let mut f = frame::parse_request(b).expect("frame");
                let r: ProduceRequest = frame::decode_body(&mut f).expect("decode");
                r.topic_data.len()
            },
            BatchSize::SmallInput,
        )
    });
    g.finish();
}

fn bench_fetch_encode(c: &mut Criterion) {
    let one_mib = Bytes::from(vec![7u8; 1 << 20]);
    let mut body = FetchResponse::default();
    let mut topic = FetchableTopicResponse::default();
    topic.topic = TopicName(StrBytes::from_static_str("bench"));
    for p in 0..4 {
        let mut part = PartitionData::default();
        part.partition_index = p;
        part.high_watermark = 1000;
        part.records = Some(one_mib.clone());
        topic.partitions.push(part);
    }
    body.responses.push(topic);
    let mut g = c.benchmark_group("fetch_response_encode");
    g.throughput(Throughput::Bytes(4 << 20));
    g.bench_function("v12_4x1MiB", |bench| {
        bench.iter(|| frame::encode_response(ApiKey::Fetch, 12, 1, &body).map(|b| b.len()))
    });
    g.finish();
}

criterion_group!(
    hot_paths,
    bench_validate,
    bench_index,
    bench_append,
    bench_decode,
    bench_fetch_encode
);
criterion_main!(hot_paths);
