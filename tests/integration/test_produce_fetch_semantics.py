"""Produce and fetch semantics that clients rely on, each once found broken by a client:

- Fetch keeps its response within the request's ``max_bytes`` (KIP-74): only the first
  batch of the first non-empty partition may exceed it. A librdkafka consumer whose
  ``receive.message.max.bytes`` is just above its ``fetch.max.bytes`` otherwise gets a
  response it refuses, and retries it forever.
- A batch refused for some of its records lists those records (KIP-467
  ``record_errors``): librdkafka fails them with INVALID_RECORD and the rest of the batch
  with its "different record" error, instead of failing all alike.
- FindCoordinator answers each key type as Kafka does: a group's and a transactional id's
  coordinator, INVALID_REQUEST for another type.
"""

from __future__ import annotations

import time

from confluent_kafka import Consumer, KafkaError, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic

import kwire as W

TIMEOUT = 30


def create(bootstrap: str, topic: str, partitions: int = 1, config: dict | None = None) -> None:
    admin = AdminClient({"bootstrap.servers": bootstrap})
    admin.create_topics([NewTopic(topic, partitions, 1, config=config or {})])[topic].result(TIMEOUT)


def produce_values(bootstrap: str, topic: str, partition: int, count: int, size: int,
                   batch_bytes: int) -> None:
    p = Producer({"bootstrap.servers": bootstrap, "linger.ms": 50, "batch.size": batch_bytes,
                  "compression.type": "none", "message.max.bytes": 4 << 20})
    errors = []
    for i in range(count):
        p.produce(topic, value=bytes([i % 251]) * size, partition=partition,
                  on_delivery=lambda err, msg: err and errors.append(err))
        if i % 500 == 0:
            p.poll(0)
    assert p.flush(TIMEOUT) == 0
    assert not errors, errors[:3]


def fetch_records(bootstrap: str, topic: str, partitions: list[int], max_bytes: int,
                  partition_max_bytes: int) -> dict[int, bytes]:
    frame = W.fetch_v4(1, topic, {p: 0 for p in partitions}, max_wait_ms=0, min_bytes=0,
                       max_bytes=max_bytes, partition_max_bytes=partition_max_bytes)
    _, body = W.roundtrip(bootstrap, frame, timeout=TIMEOUT)
    parsed = W.parse_fetch_v4(body)
    for p in partitions:
        assert parsed[(topic, p)]["error_code"] == 0, parsed[(topic, p)]
    return {p: parsed[(topic, p)]["records"] for p in partitions}


def test_fetch_response_stays_within_max_bytes(broker):
    topic = "fetch-max-bytes"
    create(broker.bootstrap, topic, partitions=2)
    # ~3 MiB per partition in batches of at most 64 KiB.
    for p in (0, 1):
        produce_values(broker.bootstrap, topic, p, count=3000, size=1000, batch_bytes=64 << 10)

    # A partition limit far above the response limit: the response limit wins.
    records = fetch_records(broker.bootstrap, topic, [0, 1], max_bytes=1_000_000,
                            partition_max_bytes=20 << 20)
    total = sum(len(r) for r in records.values())
    assert 900_000 <= total <= 1_000_000, total
    assert len(records[0]) > 0
    # The budget left after partition 0 is too small for another whole batch of 1.
    assert len(records[1]) == 0 or len(records[0]) + len(records[1]) <= 1_000_000
    batches = W.decode_batches(records[0])
    assert batches[0]["base_offset"] == 0
    assert all(b["crc_ok"] and b["records"] for b in batches)
    # Whole batches, densely: each starts where the one before ended.
    for a, b in zip(batches, batches[1:]):
        assert b["base_offset"] == a["base_offset"] + a["last_offset_delta"] + 1

    # Below one batch: exactly the first whole batch, so the consumer can progress.
    records = fetch_records(broker.bootstrap, topic, [0, 1], max_bytes=100,
                            partition_max_bytes=20 << 20)
    first = W.decode_batches(records[0])
    assert len(first) == 1 and first[0]["base_offset"] == 0
    assert len(records[0]) > 100
    assert records[1] == b""


def test_librdkafka_consumer_with_a_small_receive_limit_reads_everything(broker):
    topic = "fetch-receive-limit"
    create(broker.bootstrap, topic)
    produce_values(broker.bootstrap, topic, 0, count=6000, size=1000, batch_bytes=64 << 10)
    c = Consumer({"bootstrap.servers": broker.bootstrap, "group.id": "receive-limit",
                  "enable.auto.commit": False, "fetch.max.bytes": 1_000_000,
                  "max.partition.fetch.bytes": 20 << 20,
                  "receive.message.max.bytes": 1_000_000 + 512,
                  "enable.partition.eof": True})
    try:
        c.assign([TopicPartition(topic, 0, 0)])
        seen = 0
        deadline = time.monotonic() + TIMEOUT
        while seen < 6000:
            assert time.monotonic() < deadline, f"only {seen} of 6000 records in {TIMEOUT}s"
            m = c.poll(1.0)
            if m is None:
                continue
            if m.error():
                assert m.error().code() == KafkaError._PARTITION_EOF, m.error()
                continue
            assert m.offset() == seen
            seen += 1
    finally:
        c.close()


def test_record_errors_name_the_records_that_failed_the_batch(broker):
    topic = "record-errors"
    create(broker.bootstrap, topic, config={"cleanup.policy": "compact"})
    p = Producer({"bootstrap.servers": broker.bootstrap, "linger.ms": 1000,
                  "batch.num.messages": 100, "retries": 0, "enable.idempotence": False})
    results: dict[int, int] = {}
    keyless = set(range(5, 100, 10))  # 10 of the 100
    for i in range(100):
        key = None if i in keyless else f"k{i}".encode()
        p.produce(topic, key=key, value=f"v{i}".encode(), partition=0,
                  on_delivery=lambda err, msg, i=i: results.__setitem__(i, err.code() if err else 0))
    assert p.flush(TIMEOUT) == 0
    assert len(results) == 100
    failed = {i for i, code in results.items() if code == KafkaError.INVALID_RECORD}
    collateral = {i for i, code in results.items() if code == KafkaError._INVALID_DIFFERENT_RECORD}
    assert failed == keyless, results
    assert collateral == set(range(100)) - keyless, results


def test_raw_produce_v8_lists_record_errors(broker):
    topic = "record-errors-raw"
    create(broker.bootstrap, topic, config={"cleanup.policy": "compact"})
    now = int(time.time() * 1000)
    records = [(None if i in (1, 3) else b"k%d" % i, b"v", [], now) for i in range(5)]
    batch = W.record_batch(records, now)
    parts = [W.i32(0) + W.kbytes(batch)]
    body = W.string(None) + W.i16(-1) + W.i32(10_000) + W.array([W.string(topic) + W.array(parts)])
    _, resp = W.roundtrip(broker.bootstrap, W.request(0, 8, 9, body))
    r = W.Reader(resp)
    assert r.i32() == 1 and r.string() == topic and r.i32() == 1
    assert r.i32() == 0
    assert r.i16() == 87  # INVALID_RECORD
    r.i64(); r.i64(); r.i64()  # base offset, log append time, log start offset
    errors = [(r.i32(), r.string()) for _ in range(r.i32())]
    assert [i for i, _ in errors] == [1, 3]
    assert all("without key" in m for _, m in errors), errors
    message = r.string()
    assert message is not None and "2 record errors" in message, message


def test_raw_find_coordinator_key_types(broker):
    def find(key_type: int) -> tuple[int, int, str | None]:
        body = W.string("some-key") + W.i8(key_type)
        _, resp = W.roundtrip(broker.bootstrap, W.request(10, 1, 3, body))
        r = W.Reader(resp)
        r.i32()  # throttle
        code, message, node = r.i16(), r.string(), r.i32()
        return code, node, message
    assert find(0)[0] == 0
    code, node, _ = find(1)
    assert code == 0 and node >= 0, "a transactional id's coordinator is found"
    assert find(7)[:2] == (42, -1)
