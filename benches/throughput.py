#!/usr/bin/env python3
"""Produce and fetch throughput of a running broker, measured with a real client
(confluent-kafka, i.e. librdkafka).

Produces N messages of SIZE bytes at acks=1 with librdkafka batching (batch.size >=
16 KiB, linger), then reads them all back from offset 0 by partition assignment.
Prints one JSON object. Run it through benches/throughput.sh, which also measures the
disk's direct sequential write bandwidth in the same run.
"""
import argparse
import json
import time
import uuid

from confluent_kafka import Consumer, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--bootstrap", default="127.0.0.1:9092")
    ap.add_argument("--messages", type=int, default=500_000)
    ap.add_argument("--size", type=int, default=1024)
    ap.add_argument("--partitions", type=int, default=4)
    ap.add_argument("--acks", default="1")
    ap.add_argument("--batch-bytes", type=int, default=256 * 1024)
    args = ap.parse_args()

    topic = f"bench-{uuid.uuid4().hex[:8]}"
    admin = AdminClient({"bootstrap.servers": args.bootstrap})
    for f in admin.create_topics([NewTopic(topic, args.partitions, 1)]).values():
        f.result()

    payload = b"x" * args.size
    producer = Producer({
        "bootstrap.servers": args.bootstrap,
        "acks": args.acks,
        "linger.ms": 5,
        "batch.size": args.batch_bytes,
        "queue.buffering.max.messages": 1_000_000,
        "queue.buffering.max.kbytes": 1_048_576,
        "enable.idempotence": False,
    })
    errors = 0

    def on_delivery(err, _msg):
        nonlocal errors
        if err is not None:
            errors += 1

    start = time.perf_counter()
    cpu0 = time.process_time()
    for i in range(args.messages):
        while True:
            try:
                producer.produce(topic, payload, partition=i % args.partitions, on_delivery=on_delivery)
                break
            except BufferError:
                producer.poll(0.01)
        if i % 10_000 == 0:
            producer.poll(0)
    producer.flush(120)
    produce_s = time.perf_counter() - start
    produce_client_cpu_s = time.process_time() - cpu0

    consumer = Consumer({
        "bootstrap.servers": args.bootstrap,
        "group.id": "bench",
        "enable.auto.commit": False,
        "fetch.max.bytes": 52_428_800,
        "max.partition.fetch.bytes": 8_388_608,
        "queued.max.messages.kbytes": 1_048_576,
    })
    consumer.assign([TopicPartition(topic, p, 0) for p in range(args.partitions)])
    got = 0
    start = time.perf_counter()
    cpu0 = time.process_time()
    deadline = start + 300
    while got < args.messages and time.perf_counter() < deadline:
        for m in consumer.consume(10_000, 1.0):
            if m.error() is None:
                got += 1
    fetch_s = time.perf_counter() - start
    fetch_client_cpu_s = time.process_time() - cpu0
    consumer.close()

    mb = args.messages * args.size / 1e6
    print(json.dumps({
        "messages": args.messages,
        "message_bytes": args.size,
        "partitions": args.partitions,
        "acks": args.acks,
        "produce_s": round(produce_s, 3),
        "produce_msgs_per_s": round(args.messages / produce_s),
        "produce_mb_per_s": round(mb / produce_s, 1),
        "produce_errors": errors,
        "produce_client_cpu_s": round(produce_client_cpu_s, 2),
        "fetched": got,
        "fetch_s": round(fetch_s, 3),
        "fetch_msgs_per_s": round(got / fetch_s),
        "fetch_mb_per_s": round(got * args.size / 1e6 / fetch_s, 1),
        "fetch_client_cpu_s": round(fetch_client_cpu_s, 2),
    }))


if __name__ == "__main__":
    main()
