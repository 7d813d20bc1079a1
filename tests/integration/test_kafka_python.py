"""Round trip and topic administration through kafka-python (3.x, pure Python
protocol implementation: an independent check next to librdkafka)."""

from __future__ import annotations

import time

import pytest
from kafka import KafkaAdminClient, KafkaConsumer, KafkaProducer, TopicPartition
from kafka.errors import InvalidTopicError, TopicAlreadyExistsError
from launcher import wait_until

NUM_MESSAGES = 2_000
NUM_PARTITIONS = 3
BASE_TS_MS = 1_650_000_000_000


def admin_client(bootstrap: str) -> KafkaAdminClient:
    return KafkaAdminClient(bootstrap_servers=bootstrap, client_id="corelog-it-admin",
                            request_timeout_ms=30_000)


def topic_names(admin: KafkaAdminClient) -> set[str]:
    return set(admin.list_topics())


def partition_count(admin: KafkaAdminClient, topic: str) -> int:
    (t,) = [t for t in admin.describe_topics([topic]) if t["name"] == topic]
    assert t["error_code"] == 0, f"describe_topics({topic}) -> {t}"
    return len(t["partitions"])


def round_trip(topic: str, n: int, **client) -> list[bytes]:
    """Produces ``n`` values to ``topic`` with kafka-python and reads the topic back
    from the start (``client``: the connection settings, security included)."""
    producer = KafkaProducer(**client)
    for i in range(n):
        producer.send(topic, b"kp-%d" % i)
    producer.flush(30)
    producer.close()
    consumer = KafkaConsumer(topic, auto_offset_reset="earliest", consumer_timeout_ms=10_000,
                             **client)
    got = [m.value for m in consumer]
    consumer.close()
    return got


def produce(bootstrap: str, topic: str, messages: list[tuple], partition: int | None = None) -> list:
    """messages: [(key, value, headers, ts)] -> [RecordMetadata]"""
    # corelog has no InitProducerId yet, so no idempotence; no retries so that
    # broker errors surface instead of being retried away.
    producer = KafkaProducer(bootstrap_servers=bootstrap, acks="all", linger_ms=5,
                             enable_idempotence=False, retries=0,
                             max_in_flight_requests_per_connection=1)
    try:
        futures = [producer.send(topic, key=k, value=v, headers=h, timestamp_ms=ts, partition=partition)
                   for k, v, h, ts in messages]
        producer.flush(timeout=60)
        return [f.get(timeout=30) for f in futures]
    finally:
        producer.close(timeout=10)


def consume(bootstrap: str, topic: str, partitions: list[int], expected_total: int, timeout_s: float = 60.0):
    consumer = KafkaConsumer(bootstrap_servers=bootstrap, group_id=None, enable_auto_commit=False,
                             auto_offset_reset="none", fetch_max_wait_ms=100,
                             max_partition_fetch_bytes=4 * 1024 * 1024)
    got = {p: [] for p in partitions}
    try:
        consumer.assign([TopicPartition(topic, p) for p in partitions])
        consumer.seek_to_beginning()
        deadline = time.monotonic() + timeout_s
        while sum(len(v) for v in got.values()) < expected_total:
            assert time.monotonic() < deadline, (
                f"timed out: consumed { {p: len(v) for p, v in got.items()} }, want {expected_total} total")
            for tp, records in consumer.poll(timeout_ms=500, max_records=5_000).items():
                got[tp.partition].extend(records)
    finally:
        consumer.close()
    return got


def test_kafka_python_roundtrip(broker):
    topic = "it-kafka-python"
    admin = admin_client(broker.bootstrap)
    try:
        admin.create_topics({topic: {"num_partitions": NUM_PARTITIONS, "replication_factor": 1}})
        wait_until(lambda: topic in topic_names(admin), 15, f"{topic} in metadata")
        assert partition_count(admin, topic) == NUM_PARTITIONS
    finally:
        admin.close()

    messages = []
    for i in range(NUM_MESSAGES):
        messages.append((
            f"k{i}".encode(),
            (f"value-{i}-".encode() + bytes(range(256)))[: 20 + i % 200],
            [("n", str(i).encode()), ("bin", bytes([i & 0xFF, 0, 0xFF, 0x80]))],
            BASE_TS_MS + i,
        ))
    metas = produce(broker.bootstrap, topic, messages)
    by_partition: dict[int, list] = {}
    for msg, md in zip(messages, metas):
        assert md.topic == topic
        by_partition.setdefault(md.partition, []).append((md.offset, msg))
    assert sum(len(v) for v in by_partition.values()) == NUM_MESSAGES
    for p, lst in by_partition.items():
        lst.sort(key=lambda x: x[0])
        assert [o for o, _ in lst] == list(range(len(lst))), f"partition {p}: offsets not dense from 0"

    verify_consumed(broker.bootstrap, topic, by_partition, "before restart")

    # clean shutdown (SIGTERM, exit 0) and restart on the same data dir
    broker.stop()
    broker.restart()
    verify_consumed(broker.bootstrap, topic, by_partition, "after SIGTERM+restart")


def verify_consumed(bootstrap: str, topic: str, by_partition: dict, label: str) -> None:
    got = consume(bootstrap, topic, list(range(NUM_PARTITIONS)), NUM_MESSAGES)
    for p in range(NUM_PARTITIONS):
        want = by_partition.get(p, [])
        have = got[p]
        assert len(have) == len(want), f"[{label}] partition {p}: consumed {len(have)}, produced {len(want)}"
        for (off, (k, v, h, ts)), rec in zip(want, have):
            assert (rec.offset, rec.key, rec.value, [(hk, bytes(hv)) for hk, hv in rec.headers], rec.timestamp,
                    rec.timestamp_type) == (off, k, v, h, ts, 0), (
                f"[{label}] partition {p} offset {off}: consumed {rec!r}, produced {(k, v, h, ts)}")


def test_kafka_python_topic_admin(broker):
    topic = "it-admin-topic"
    admin = admin_client(broker.bootstrap)
    try:
        admin.create_topics({topic: {"num_partitions": 2, "replication_factor": 1}})
        wait_until(lambda: topic in topic_names(admin), 15, f"{topic} in metadata")
        assert partition_count(admin, topic) == 2

        # creating it again -> TOPIC_ALREADY_EXISTS (36)
        with pytest.raises(TopicAlreadyExistsError):
            admin.create_topics({topic: {"num_partitions": 2, "replication_factor": 1}})
        res = admin.create_topics({topic: {"num_partitions": 2, "replication_factor": 1}}, raise_errors=False)
        assert [t["error_code"] for t in res["topics"]] == [36], res

        # illegal names -> INVALID_TOPIC_EXCEPTION (17)
        for bad in ["bad topic name!", "..", "x" * 250, "slash/inside"]:
            with pytest.raises(InvalidTopicError):
                admin.create_topics({bad: {"num_partitions": 1, "replication_factor": 1}})
            res = admin.create_topics({bad: {"num_partitions": 1, "replication_factor": 1}}, raise_errors=False)
            assert [t["error_code"] for t in res["topics"]] == [17], (bad, res)
        assert not any(n in topic_names(admin) for n in ["bad topic name!", "..", "slash/inside"])

        # bad partition counts / replication factors (single broker)
        res = admin.create_topics({"it-zero-partitions": {"num_partitions": 0, "replication_factor": 1}},
                                  raise_errors=False)
        assert [t["error_code"] for t in res["topics"]] == [37], f"num_partitions=0: {res}"  # INVALID_PARTITIONS
        res = admin.create_topics({"it-rf3": {"num_partitions": 1, "replication_factor": 3}}, raise_errors=False)
        assert [t["error_code"] for t in res["topics"]] == [38], f"replication_factor=3: {res}"  # INVALID_REPLICATION_FACTOR
        assert not {"it-zero-partitions", "it-rf3"} & topic_names(admin)

        # CreatePartitions 2 -> 5
        admin.create_partitions({topic: 5})
        wait_until(lambda: partition_count(admin, topic) == 5, 15, f"{topic} to have 5 partitions")
        # shrinking or keeping the count is refused with INVALID_PARTITIONS (37)
        for count in (3, 5):
            res = admin.create_partitions({topic: count}, raise_errors=False)
            assert [r.error_code for r in res.results] == [37], f"create_partitions({count}): {res}"
        assert partition_count(admin, topic) == 5
        # unknown topic -> UNKNOWN_TOPIC_OR_PARTITION (3)
        res = admin.create_partitions({"it-no-such-topic": 4}, raise_errors=False)
        assert [r.error_code for r in res.results] == [3], res
        res = admin.delete_topics(["it-no-such-topic"], raise_errors=False)
        assert [t["error_code"] for t in res["topics"]] == [3], res

        # the new partitions are usable
        metas = produce(broker.bootstrap, topic, [(b"k", b"in-new-partition", [], BASE_TS_MS)], partition=4)
        assert (metas[0].partition, metas[0].offset) == (4, 0)
        got = consume(broker.bootstrap, topic, [4], 1)
        assert [(r.offset, r.key, r.value) for r in got[4]] == [(0, b"k", b"in-new-partition")]

        # DeleteTopics removes it (and its data) ...
        metas = produce(broker.bootstrap, topic, [(b"k", b"old-%d" % i, [], BASE_TS_MS) for i in range(3)], partition=0)
        assert [m.offset for m in metas] == [0, 1, 2]
        admin.delete_topics([topic])
        wait_until(lambda: topic not in topic_names(admin), 15, f"{topic} to disappear from metadata")
    finally:
        admin.close()

    # ... also after a restart (the deletion is persistent)
    broker.stop()
    broker.restart()
    admin = admin_client(broker.bootstrap)
    try:
        assert topic not in topic_names(admin), "deleted topic is back after restart"
        # re-creating the name gives a fresh, empty topic
        admin.create_topics({topic: {"num_partitions": 1, "replication_factor": 1}})
        wait_until(lambda: topic in topic_names(admin), 15, f"re-created {topic} in metadata")
        assert partition_count(admin, topic) == 1
        consumer = KafkaConsumer(bootstrap_servers=broker.bootstrap, group_id=None, enable_auto_commit=False)
        try:
            tp = TopicPartition(topic, 0)
            assert consumer.beginning_offsets([tp]) == {tp: 0}
            assert consumer.end_offsets([tp]) == {tp: 0}, "re-created topic still holds old records"
        finally:
            consumer.close()
        metas = produce(broker.bootstrap, topic, [(b"k2", b"fresh", [], BASE_TS_MS)], partition=0)
        assert (metas[0].partition, metas[0].offset) == (0, 0)
        got = consume(broker.bootstrap, topic, [0], 1)
        assert [(r.offset, r.value) for r in got[0]] == [(0, b"fresh")]
    finally:
        admin.close()
