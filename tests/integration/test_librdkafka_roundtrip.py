"""Round trip through librdkafka (confluent-kafka): admin, producer, consumer,
ListOffsets, and durability across SIGKILL + restart."""

from __future__ import annotations

import os
import random
import time

import pytest

from confluent_kafka import (
    Consumer, KafkaError, Producer, TopicPartition,
    TIMESTAMP_CREATE_TIME,
)
from confluent_kafka.admin import AdminClient, NewTopic

NUM_PARTITIONS = 6
NUM_MESSAGES = 100_000
BASE_TS_MS = 1_700_000_000_000  # explicit, distinct CreateTime per message
CONSUME_DEADLINE_S = 60.0
# Topics default to message.timestamp.type=CreateTime, so the broker returns
# log_append_time=-1 and the delivery report carries our own timestamp.
CHECK_DR_TIMESTAMP = True


# ---------------------------------------------------------------------------
# message generation
# ---------------------------------------------------------------------------

def make_message(i: int, rng: random.Random) -> tuple[bytes, bytes, list, int]:
    key = f"key-{i:06d}".encode()
    # varying length (1..300), arbitrary bytes incl. NUL / 0xff
    value = f"v{i}:".encode() + rng.randbytes(rng.randint(0, 296))
    headers = [
        ("idx", str(i).encode()),
        ("bin", bytes([0x00, 0xFF, i & 0xFF, (i >> 8) & 0xFF, 0x80, 0x7F]) + rng.randbytes(rng.randint(0, 24))),
    ]
    if i % 10 == 0:
        headers.append(("null", None))  # header with a null value (length -1 on the wire)
    ts = BASE_TS_MS + i
    return key, value, headers, ts


def norm_headers(h) -> list:
    return [(k, None if v is None else bytes(v)) for k, v in (h or [])]


# ---------------------------------------------------------------------------
# helpers (take a bootstrap string so they can be reused)
# ---------------------------------------------------------------------------

def create_topic(bootstrap: str, topic: str, partitions: int) -> None:
    admin = AdminClient({"bootstrap.servers": bootstrap})
    futs = admin.create_topics([NewTopic(topic, num_partitions=partitions, replication_factor=1)],
                               operation_timeout=30, request_timeout=30)
    futs[topic].result(timeout=30)
    # wait until metadata shows all partitions with a leader
    deadline = time.monotonic() + 30
    while True:
        md = admin.list_topics(topic=topic, timeout=10)
        t = md.topics.get(topic)
        if (t is not None and t.error is None and len(t.partitions) == partitions
                and all(p.leader >= 0 and p.error is None for p in t.partitions.values())):
            return
        assert time.monotonic() < deadline, f"topic {topic} not ready in metadata: {t and t.partitions}"
        time.sleep(0.2)


def produce_all(bootstrap: str, topic: str, n: int, seed: int = 1234, **producer_extra) -> dict[int, list[tuple]]:
    """Produce n keyed messages; return {partition: [(offset, key, value, headers, ts)]}
    from the delivery reports, sorted by offset."""
    rng = random.Random(seed)
    producer = Producer({
        "bootstrap.servers": bootstrap,
        "acks": "all",
        "linger.ms": 5,
        "batch.size": 256 * 1024,
        "batch.num.messages": 10_000,
        "queue.buffering.max.messages": 200_000,
        "queue.buffering.max.kbytes": 256 * 1024,
        "compression.type": "none",
        "enable.idempotence": False,
        "message.timeout.ms": 60_000,
        **producer_extra,
    })
    sent: dict[bytes, tuple] = {}
    reports: dict[int, list[tuple]] = {}
    errors: list[str] = []
    delivered = 0

    def on_delivery(err, msg):
        nonlocal delivered
        delivered += 1
        if err is not None:
            if len(errors) < 20:
                errors.append(f"{msg.key()!r}: {err}")
            return
        key = msg.key()
        _, value, headers, ts = sent[key]
        ts_type, dr_ts = msg.timestamp()
        if CHECK_DR_TIMESTAMP and dr_ts != ts and len(errors) < 20:
            errors.append(f"{key!r}: delivery report timestamp {ts_type},{dr_ts} != {ts}")
        reports.setdefault(msg.partition(), []).append((msg.offset(), key, value, headers, ts))

    for i in range(n):
        key, value, headers, ts = make_message(i, rng)
        sent[key] = (key, value, headers, ts)
        while True:
            try:
                producer.produce(topic, value=value, key=key, headers=headers, timestamp=ts,
                                 on_delivery=on_delivery)
                break
            except BufferError:
                producer.poll(0.05)
        if i % 1000 == 0:
            producer.poll(0)
    remaining = producer.flush(90)
    assert remaining == 0, f"{remaining} messages not delivered after flush(90)"
    assert delivered == n, f"{delivered} delivery reports for {n} messages"
    assert not errors, f"delivery errors (first {len(errors)}): {errors}"

    for p, recs in reports.items():
        recs.sort(key=lambda r: r[0])
        offsets = [r[0] for r in recs]
        assert offsets == list(range(len(recs))), (
            f"partition {p}: delivery-report offsets are not 0..{len(recs) - 1} "
            f"(first few: {offsets[:10]}, duplicates: {len(offsets) - len(set(offsets))})")
    assert sum(len(r) for r in reports.values()) == n
    return reports


def consumer_config(bootstrap: str, **extra) -> dict:
    cfg = {
        "bootstrap.servers": bootstrap,
        # required by librdkafka; with assign() and no commits no group protocol is needed
        "group.id": "corelog-it-assign-only",
        "enable.auto.commit": False,
        "enable.auto.offset.store": False,
        "enable.partition.eof": True,
        "auto.offset.reset": "error",
        "check.crcs": True,
        "fetch.max.bytes": 50 * 1024 * 1024,
        "max.partition.fetch.bytes": 8 * 1024 * 1024,
        "fetch.min.bytes": 1,
        "fetch.wait.max.ms": 100,
        "queued.min.messages": 200_000,
        "queued.max.messages.kbytes": 256 * 1024,
    }
    cfg.update(extra)
    return cfg


def consume_all(bootstrap: str, topic: str, expected: dict[int, int]) -> dict[int, list[tuple]]:
    """Read every partition in ``expected`` ({partition: count}) from offset 0 to EOF.
    Returns {partition: [(offset, key, value, headers, ts)]}."""
    consumer = Consumer(consumer_config(bootstrap))
    got: dict[int, list[tuple]] = {p: [] for p in expected}
    errors: list[str] = []
    try:
        consumer.assign([TopicPartition(topic, p, 0) for p in expected])
        done = {p for p, c in expected.items() if c == 0}
        deadline = time.monotonic() + CONSUME_DEADLINE_S
        while len(done) < len(expected):
            assert time.monotonic() < deadline, (
                f"timed out consuming: got { {p: len(v) for p, v in got.items()} }, "
                f"expected {expected}; errors: {errors[:10]}")
            for msg in consumer.consume(num_messages=10_000, timeout=1.0):
                err = msg.error()
                if err is not None:
                    if err.code() == KafkaError._PARTITION_EOF:
                        if len(got[msg.partition()]) >= expected[msg.partition()]:
                            done.add(msg.partition())
                        continue
                    errors.append(f"p{msg.partition()}: {err}")
                    assert len(errors) < 20 and not err.fatal(), f"consumer errors: {errors}"
                    continue
                ts_type, ts = msg.timestamp()
                assert ts_type == TIMESTAMP_CREATE_TIME, (
                    f"p{msg.partition()} offset {msg.offset()}: timestamp type {ts_type}, want CreateTime")
                got[msg.partition()].append(
                    (msg.offset(), msg.key(), msg.value(), norm_headers(msg.headers()), ts))
                if len(got[msg.partition()]) >= expected[msg.partition()]:
                    done.add(msg.partition())
    finally:
        consumer.close()
    return got


def verify(reports: dict[int, list[tuple]], got: dict[int, list[tuple]], label: str) -> None:
    for p in sorted(reports):
        want, have = reports[p], got.get(p, [])
        assert len(have) == len(want), f"[{label}] partition {p}: read {len(have)} messages, produced {len(want)}"
        for w, h in zip(want, have):
            if (w[0], w[1], w[2], norm_headers(w[3]), w[4]) != h:
                raise AssertionError(
                    f"[{label}] partition {p} mismatch at offset {w[0]}:\n"
                    f"  produced (offset,key,value[:40],headers,ts) = "
                    f"{(w[0], w[1], w[2][:40], norm_headers(w[3]), w[4])}\n"
                    f"  consumed                                   = "
                    f"{(h[0], h[1], h[2][:40] if h[2] is not None else None, h[3], h[4])}")


def check_watermarks(bootstrap: str, topic: str, counts: dict[int, int], label: str) -> None:
    consumer = Consumer(consumer_config(bootstrap))
    try:
        for p, n in sorted(counts.items()):
            low, high = consumer.get_watermark_offsets(TopicPartition(topic, p), timeout=15, cached=False)
            assert (low, high) == (0, n), f"[{label}] partition {p}: watermarks (low, high)={(low, high)}, want (0, {n})"
    finally:
        consumer.close()


def check_offsets_for_times(bootstrap: str, topic: str, reports: dict[int, list[tuple]], label: str) -> None:
    """ListOffsets by timestamp: a record's own timestamp finds that record (timestamps
    grow with the message index, so within a partition they are increasing)."""
    consumer = Consumer(consumer_config(bootstrap))
    try:
        queries, want = [], []
        for p, recs in sorted(reports.items()):
            if not recs:
                continue
            for r in (recs[0], recs[len(recs) // 2], recs[-1]):
                queries.append(TopicPartition(topic, p, r[4]))
                want.append((p, r[0]))
            queries.append(TopicPartition(topic, p, recs[-1][4] + 1))   # after the last record
            want.append((p, -1))
            queries.append(TopicPartition(topic, p, recs[0][4] - 10**6))  # before the first
            want.append((p, 0))
        got = []
        for q in queries:  # one at a time: several timestamps per partition
            (res,) = consumer.offsets_for_times([q], timeout=15)
            assert res.error is None, f"[{label}] offsets_for_times p{q.partition} ts={q.offset}: {res.error}"
            got.append((res.partition, res.offset))
        assert got == want, f"[{label}] offsets_for_times: got {got}, want {want}"
    finally:
        consumer.close()


# ---------------------------------------------------------------------------
# tests
# ---------------------------------------------------------------------------

def test_librdkafka_roundtrip_survives_sigkill(broker):
    topic = "it-librdkafka-roundtrip"
    create_topic(broker.bootstrap, topic, NUM_PARTITIONS)

    t0 = time.monotonic()
    reports = produce_all(broker.bootstrap, topic, NUM_MESSAGES)
    counts = {p: len(reports.get(p, [])) for p in range(NUM_PARTITIONS)}
    t_produce = time.monotonic() - t0
    # keyed messages must spread over the partitions (sanity check on the test itself)
    assert sum(1 for c in counts.values() if c > 0) >= NUM_PARTITIONS - 1, counts
    reports = {p: reports.get(p, []) for p in range(NUM_PARTITIONS)}

    check_watermarks(broker.bootstrap, topic, counts, "before kill")
    t0 = time.monotonic()
    verify(reports, consume_all(broker.bootstrap, topic, counts), "before kill")
    t_consume = time.monotonic() - t0

    broker.kill()
    broker.restart()

    check_watermarks(broker.bootstrap, topic, counts, "after SIGKILL+restart")
    verify(reports, consume_all(broker.bootstrap, topic, counts), "after SIGKILL+restart")
    check_offsets_for_times(broker.bootstrap, topic, reports, "after SIGKILL+restart")
    print(f"produce {NUM_MESSAGES} msgs: {t_produce:.1f}s, consume: {t_consume:.1f}s, per-partition: {counts}")

    broker.stop()


@pytest.mark.parametrize("codec", ["gzip", "snappy", "lz4", "zstd"])
def test_librdkafka_compressed_roundtrip(broker, codec):
    """Compressed batches are stored as sent and read back intact by the client."""
    topic = f"it-compressed-{codec}"
    create_topic(broker.bootstrap, topic, 2)
    reports = produce_all(broker.bootstrap, topic, 5_000, seed=99, **{"compression.type": codec, "linger.ms": 20})
    reports = {p: reports.get(p, []) for p in range(2)}
    counts = {p: len(v) for p, v in reports.items()}
    check_watermarks(broker.bootstrap, topic, counts, codec)
    verify(reports, consume_all(broker.bootstrap, topic, counts), codec)


def test_librdkafka_large_messages_and_too_large(broker):
    topic = "it-large"
    create_topic(broker.bootstrap, topic, 1)
    producer = Producer({"bootstrap.servers": broker.bootstrap, "acks": "all", "linger.ms": 0,
                         "compression.type": "none", "message.max.bytes": 4_000_000,
                         "message.timeout.ms": 30_000, "retries": 0})
    results = []
    values = [os.urandom(900_000) for _ in range(3)]
    for i, v in enumerate(values):
        producer.produce(topic, key=f"big{i}".encode(), value=v, partition=0,
                         on_delivery=lambda err, msg: results.append((err, msg.offset())))
        producer.flush(30)
    # > message.max.bytes (1048588) after framing -> MESSAGE_TOO_LARGE from the broker
    producer.produce(topic, key=b"too-big", value=os.urandom(1_100_000), partition=0,
                     on_delivery=lambda err, msg: results.append((err, msg.offset())))
    assert producer.flush(30) == 0
    assert [(e, o) for e, o in results[:3]] == [(None, 0), (None, 1), (None, 2)], results[:3]
    err = results[3][0]
    assert err is not None and err.code() == KafkaError.MSG_SIZE_TOO_LARGE, f"oversized message: {err}"

    got = consume_all(broker.bootstrap, topic, {0: 3})
    assert [(o, k, v) for o, k, v, _h, _t in got[0]] == [(i, f"big{i}".encode(), v) for i, v in enumerate(values)]
    check_watermarks(broker.bootstrap, topic, {0: 3}, "large")
