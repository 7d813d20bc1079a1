"""Fetches served from segment files with splice (zero-copy) read back exactly.

With the tail cache all but off (--tail-cache-shard-bytes 65536), every fetch of the data
below reads the segment files, and a fetch of 64 KiB or more is answered with a range of
the file sent by splice (corelog_fetch_bytes_spliced_total counts it). librdkafka and
kafka-python consume everything back in order, with large and small batches (the range
ends at a boundary the offset index knows), and with a partition limit below the batch
size (one whole batch per fetch, as Kafka).
"""

from __future__ import annotations

import time

from confluent_kafka import Consumer, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic
from kafka import KafkaConsumer
from kafka import TopicPartition as KTopicPartition

from test_limits import metric_sum

PARTITIONS = 3
MESSAGES = 3000  # per partition


def value(p: int, i: int, size: int) -> bytes:
    head = f"{p}:{i}:".encode()
    return head + b"v" * (size - len(head))


def produce(bootstrap: str, topic: str, size: int, linger_ms: int, batch_bytes: int) -> None:
    errors = []
    p = Producer({"bootstrap.servers": bootstrap, "acks": "all", "linger.ms": linger_ms,
                  "batch.size": batch_bytes, "compression.type": "none",
                  "enable.idempotence": True})
    for i in range(MESSAGES):
        for part in range(PARTITIONS):
            p.produce(topic, value(part, i, size), partition=part,
                      on_delivery=lambda err, _m: err and errors.append(err))
        if i % 500 == 0:
            p.poll(0)
    assert p.flush(60) == 0
    assert not errors, errors[:3]


def check(got: dict[int, list[bytes]], size: int) -> None:
    for part in range(PARTITIONS):
        assert len(got[part]) == MESSAGES, (part, len(got[part]))
        for i, v in enumerate(got[part]):
            assert v == value(part, i, size), (part, i, v[:20])


def consume_librdkafka(bootstrap: str, topic: str, **conf) -> dict[int, list[bytes]]:
    c = Consumer({"bootstrap.servers": bootstrap, "group.id": f"zc-{time.time()}",
                  "enable.auto.commit": False, **conf})
    c.assign([TopicPartition(topic, p, 0) for p in range(PARTITIONS)])
    got: dict[int, list[bytes]] = {p: [] for p in range(PARTITIONS)}
    deadline = time.monotonic() + 60
    while sum(map(len, got.values())) < PARTITIONS * MESSAGES and time.monotonic() < deadline:
        for m in c.consume(1000, timeout=1):
            assert m.error() is None, m.error()
            assert m.offset() == len(got[m.partition()]), "in order, no gaps or repeats"
            got[m.partition()].append(m.value())
    c.close()
    return got


def consume_kafka_python(bootstrap: str, topic: str, **conf) -> dict[int, list[bytes]]:
    c = KafkaConsumer(bootstrap_servers=bootstrap, group_id=None, enable_auto_commit=False,
                      auto_offset_reset="earliest", fetch_max_wait_ms=100, **conf)
    c.assign([KTopicPartition(topic, p) for p in range(PARTITIONS)])
    c.seek_to_beginning()
    got: dict[int, list[bytes]] = {p: [] for p in range(PARTITIONS)}
    deadline = time.monotonic() + 60
    try:
        while sum(map(len, got.values())) < PARTITIONS * MESSAGES and time.monotonic() < deadline:
            for tp, msgs in c.poll(timeout_ms=500).items():
                for m in msgs:
                    assert m.offset == len(got[tp.partition]), "in order, no gaps or repeats"
                    got[tp.partition].append(m.value)
    finally:
        c.close()
    return got


def test_disk_fetches_go_out_by_splice_and_read_back_exactly(broker_factory):
    b = broker_factory(extra_args=["--tail-cache-shard-bytes", "65536"])
    admin = AdminClient({"bootstrap.servers": b.bootstrap})
    topics = [NewTopic(t, PARTITIONS, 1) for t in ("big", "small", "limited")]
    for f in admin.create_topics(topics).values():
        f.result(30)
    # Large batches (every batch has an index entry) and small ones (most do not).
    produce(b.bootstrap, "big", 2048, 20, 256 * 1024)
    produce(b.bootstrap, "small", 100, 0, 16 * 1024)
    before = metric_sum(b, "corelog_fetch_bytes_spliced")

    check(consume_librdkafka(b.bootstrap, "big"), 2048)
    check(consume_kafka_python(b.bootstrap, "big"), 2048)
    spliced = metric_sum(b, "corelog_fetch_bytes_spliced") - before
    data = 2 * PARTITIONS * MESSAGES * 2048  # read twice
    assert spliced > data // 2, f"only {spliced} of about {data} bytes went out by splice"

    check(consume_librdkafka(b.bootstrap, "small"), 100)
    check(consume_kafka_python(b.bootstrap, "small"), 100)

    # A partition limit below the batch size: one whole batch per fetch.
    produce(b.bootstrap, "limited", 2048, 20, 256 * 1024)
    check(consume_librdkafka(b.bootstrap, "limited", **{"max.partition.fetch.bytes": 65536}), 2048)
    check(consume_kafka_python(b.bootstrap, "limited", max_partition_fetch_bytes=65536), 2048)
    assert b.is_running()


def test_pipelined_fetches_of_spliced_and_cached_data_answer_in_order(broker_factory):
    """Many fetches in flight on one connection, some answered from segment files by
    splice and some small ones from memory, come back in request order and whole."""
    import kwire as W

    b = broker_factory(extra_args=["--tail-cache-shard-bytes", "65536"])
    admin = AdminClient({"bootstrap.servers": b.bootstrap})
    for f in admin.create_topics([NewTopic("pipe", PARTITIONS, 1)]).values():
        f.result(30)
    produce(b.bootstrap, "pipe", 2048, 20, 256 * 1024)
    before = metric_sum(b, "corelog_fetch_bytes_spliced")
    # (partition, offset, partition_max_bytes): large reads splice, tiny ones do not.
    asks = [(i % PARTITIONS, (i * 97) % MESSAGES, 1 << 20 if i % 2 == 0 else 4096)
            for i in range(24)]
    frames = b"".join(
        W.fetch_v4(500 + i, "pipe", {p: off}, max_wait_ms=0, partition_max_bytes=limit)
        for i, (p, off, limit) in enumerate(asks))
    with W.connect(b.bootstrap) as s:
        s.sendall(frames)
        answers = [W.recv_response(s, timeout=20) for _ in asks]
    for i, ((cid, body), (p, off, limit)) in enumerate(zip(answers, asks)):
        assert cid == 500 + i, "in request order"
        part = W.parse_fetch_v4(body)[("pipe", p)]
        assert part["error_code"] == 0
        batches = W.decode_batches(part["records"])
        assert batches, f"fetch {i} read something"
        first = batches[0]
        assert first["base_offset"] <= off <= first["base_offset"] + len(first["records"]) - 1
        expected = first["base_offset"]
        for batch in batches:
            assert batch["base_offset"] == expected, "whole, contiguous batches"
            for j, rec in enumerate(batch["records"]):
                assert rec["value"] == value(p, expected + j, 2048)
            expected += len(batch["records"])
        if limit == 4096:
            assert len(batches) == 1, "one whole batch beyond a small limit"
    assert metric_sum(b, "corelog_fetch_bytes_spliced") > before
