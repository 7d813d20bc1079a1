"""The admin APIs newer clients rely on, by hand so that every field is checked:
DescribeTopicPartitions paging (KIP-966), DescribeCluster, ListOffsets v7-v9 special
timestamps (KIP-734 max timestamp, KIP-1005), DescribeProducers, DescribeLogDirs v4,
ListGroups v5 type filter, and the authorized operations of KIP-430 (all allowed without
an authorizer, as Kafka reports them). The Java, franz-go and CLI suites drive the same
APIs through the real clients."""

from __future__ import annotations

import time

from confluent_kafka import Consumer, Producer
from confluent_kafka.admin import AdminClient, NewTopic

import kwire as W

TIMEOUT = 30
TOPIC_OPS = 0b1101_1111_1000
CLUSTER_OPS = 0b1_1111_1010_0000


from kwire import Flex, c_array, flex_roundtrip, tags  # noqa: E402


def create(bootstrap: str, topics: dict[str, int]) -> None:
    admin = AdminClient({"bootstrap.servers": bootstrap})
    futs = admin.create_topics([NewTopic(t, n, 1) for t, n in topics.items()])
    for f in futs.values():
        f.result(TIMEOUT)


# --------------------------------------------------------------------------- DescribeTopicPartitions
def describe_topic_partitions(bootstrap, topics, limit, cursor=None):
    body = (c_array([W.compact_string(t) + tags() for t in topics]) + W.i32(limit)
            + (W.i8(-1) if cursor is None
               else W.i8(1) + W.compact_string(cursor[0]) + W.i32(cursor[1]) + tags())
            + tags())
    r = flex_roundtrip(bootstrap, 75, 0, body)
    r.i32()  # throttle
    out = []
    for _ in range(r.c_len()):
        code, name, _id, internal = r.i16(), r.c_string(), r.uuid(), r.i8()
        parts = []
        for _ in range(r.c_len()):
            pcode, index, leader, epoch = r.i16(), r.i32(), r.i32(), r.i32()
            replicas = [r.i32() for _ in range(r.c_len())]
            isr = [r.i32() for _ in range(r.c_len())]
            for _ in range(3):  # eligible leader replicas, last known ELR, offline
                n = r.c_len()
                [r.i32() for _ in range(max(n, 0))]
            r.skip_tags()
            assert (pcode, leader, replicas, isr) == (0, 0, [0], [0])
            parts.append(index)
        ops = r.i32()
        r.skip_tags()
        out.append((name, code, parts, ops))
    next_cursor = None
    if r.i8() == 1:
        next_cursor = (r.c_string(), r.i32())
        r.skip_tags()
    r.skip_tags()
    assert r.remaining() == 0
    return out, next_cursor


def test_describe_topic_partitions_pages_through_every_partition(broker):
    create(broker.bootstrap, {"dtp-a": 3, "dtp-b": 2})
    page, cursor = describe_topic_partitions(broker.bootstrap, ["dtp-b", "dtp-a"], 2)
    assert page == [("dtp-a", 0, [0, 1], TOPIC_OPS)] and cursor == ("dtp-a", 2)
    page, cursor = describe_topic_partitions(broker.bootstrap, ["dtp-b", "dtp-a"], 2, cursor)
    assert page == [("dtp-a", 0, [2], TOPIC_OPS), ("dtp-b", 0, [0], TOPIC_OPS)]
    assert cursor == ("dtp-b", 1)
    page, cursor = describe_topic_partitions(broker.bootstrap, ["dtp-b", "dtp-a"], 2, cursor)
    assert page == [("dtp-b", 0, [1], TOPIC_OPS)] and cursor is None
    # All topics when none is named, in name order.
    page, cursor = describe_topic_partitions(broker.bootstrap, [], 2000)
    assert [p[0] for p in page] == sorted(p[0] for p in page) and cursor is None
    assert {"dtp-a", "dtp-b"} <= {p[0] for p in page}
    # Unknown topics, and a cursor outside the named topics.
    page, _ = describe_topic_partitions(broker.bootstrap, ["dtp-nope"], 10)
    assert page == [("dtp-nope", 3, [], TOPIC_OPS)]
    page, _ = describe_topic_partitions(broker.bootstrap, ["dtp-a"], 10, ("dtp-b", 0))
    assert [(p[0], p[1]) for p in page] == [("dtp-a", 42)]


# --------------------------------------------------------------------------- DescribeCluster
def describe_cluster(bootstrap, version, endpoint_type=1, include_ops=True):
    body = W.i8(int(include_ops))
    if version >= 1:
        body += W.i8(endpoint_type)
    if version >= 2:
        body += W.i8(0)  # include fenced brokers
    r = flex_roundtrip(bootstrap, 60, version, body + tags())
    r.i32()
    code, message = r.i16(), r.c_string()
    if version >= 1:
        assert r.i8() == endpoint_type
    cluster_id, controller = r.c_string(), r.i32()
    brokers = []
    for _ in range(r.c_len()):
        b = (r.i32(), r.c_string(), r.i32(), r.c_string())
        if version >= 2:
            assert r.i8() == 0  # not fenced
        r.skip_tags()
        brokers.append(b)
    ops = r.i32()
    r.skip_tags()
    return code, message, cluster_id, controller, brokers, ops


def test_describe_cluster(broker):
    for v in (0, 1, 2):
        code, _, cluster_id, controller, brokers, ops = describe_cluster(broker.bootstrap, v)
        assert (code, controller, ops) == (0, 0, CLUSTER_OPS)
        assert brokers == [(0, "127.0.0.1", broker.port, None)] and len(cluster_id) > 0
    assert describe_cluster(broker.bootstrap, 2, include_ops=False)[5] == -2**31
    code, message, *_ = describe_cluster(broker.bootstrap, 1, endpoint_type=2)
    assert code == 114 and "CONTROLLER" in message  # MISMATCHED_ENDPOINT_TYPE
    assert describe_cluster(broker.bootstrap, 1, endpoint_type=9)[0] == 115  # UNSUPPORTED_ENDPOINT_TYPE


# --------------------------------------------------------------------------- ListOffsets
def list_offsets(bootstrap, version, topic, timestamp):
    """ListOffsets v7-v9 (flexible from v6) of partition 0 -> (code, timestamp, offset)."""
    part = W.i32(0) + W.i32(-1) + W.i64(timestamp) + tags()
    body = W.i32(-1) + W.i8(0) + c_array([W.compact_string(topic) + c_array([part]) + tags()]) + tags()
    r = flex_roundtrip(bootstrap, 2, version, body)
    r.i32()
    assert r.c_len() == 1 and r.c_string() == topic and r.c_len() == 1
    assert r.i32() == 0
    code, ts, offset, _epoch = r.i16(), r.i64(), r.i64(), r.i32()
    return code, ts, offset


def test_list_offsets_special_timestamps(broker):
    topic = "lo-special"
    create(broker.bootstrap, {topic: 1})
    now = int(time.time() * 1000)
    # Largest timestamp in the middle, twice: the first of them counts.
    stamps = [now - 5000, now - 1000, now - 3000, now - 1000, now - 4000]
    batch = W.record_batch([(b"k", b"v%d" % i, [], ts) for i, ts in enumerate(stamps)], stamps[0])
    _, resp = W.roundtrip(broker.bootstrap, W.produce_v3(1, topic, {0: batch}))
    assert W.parse_produce_v3(resp)[(topic, 0)]["error_code"] == 0
    assert list_offsets(broker.bootstrap, 7, topic, -3) == (0, now - 1000, 1)
    assert list_offsets(broker.bootstrap, 8, topic, -4) == (0, -1, 0)
    assert list_offsets(broker.bootstrap, 9, topic, -5) == (0, -1, -1)
    assert list_offsets(broker.bootstrap, 9, topic, -1) == (0, -1, 5)
    # The first record at or after the time (offsets, not timestamps, are ordered).
    assert list_offsets(broker.bootstrap, 9, topic, now - 3500) == (0, now - 1000, 1)
    assert list_offsets(broker.bootstrap, 9, topic, now - 4500) == (0, now - 1000, 1)
    assert list_offsets(broker.bootstrap, 9, topic, now - 5000) == (0, now - 5000, 0)
    # Below the log start the maximum is out of sight: the largest visible one counts.
    admin = AdminClient({"bootstrap.servers": broker.bootstrap})
    from confluent_kafka import TopicPartition
    admin.delete_records([TopicPartition(topic, 0, 4)])[TopicPartition(topic, 0, 4)].result(TIMEOUT)
    assert list_offsets(broker.bootstrap, 7, topic, -3) == (0, now - 4000, 4)
    assert list_offsets(broker.bootstrap, 8, topic, -4) == (0, -1, 4)
    empty = "lo-empty"
    create(broker.bootstrap, {empty: 1})
    assert list_offsets(broker.bootstrap, 7, empty, -3) == (0, -1, -1)


# --------------------------------------------------------------------------- DescribeProducers
def test_describe_producers_lists_the_idempotent_producer(broker):
    topic = "dp-topic"
    create(broker.bootstrap, {topic: 2})
    p = Producer({"bootstrap.servers": broker.bootstrap, "enable.idempotence": True, "linger.ms": 0})
    for i in range(7):
        p.produce(topic, value=b"x", partition=0)
        p.flush(TIMEOUT)
    body = c_array([W.compact_string(topic) + c_array([W.i32(0), W.i32(1), W.i32(9)]) + tags()]) + tags()
    r = flex_roundtrip(broker.bootstrap, 61, 0, body)
    r.i32()
    assert r.c_len() == 1 and r.c_string() == topic
    parts = {}
    for _ in range(r.c_len()):
        index, code, _msg = r.i32(), r.i16(), r.c_string()
        producers = []
        for _ in range(r.c_len()):
            producers.append((r.i64(), r.i32(), r.i32(), r.i64(), r.i32(), r.i64()))
            r.skip_tags()
        r.skip_tags()
        parts[index] = (code, producers)
    assert parts[1] == (0, []) and parts[9] == (3, [])
    code, [(pid, epoch, last_seq, last_ts, coord_epoch, txn_start)] = parts[0]
    assert code == 0 and pid >= 0 and epoch == 0 and last_seq == 6
    assert abs(last_ts - time.time() * 1000) < 60_000 and (coord_epoch, txn_start) == (-1, -1)


# --------------------------------------------------------------------------- DescribeLogDirs
def test_describe_log_dirs_v4(broker):
    topic = "ldirs"
    create(broker.bootstrap, {topic: 2})
    p = Producer({"bootstrap.servers": broker.bootstrap})
    for _ in range(100):
        p.produce(topic, value=b"x" * 100, partition=1)
    p.flush(TIMEOUT)
    time.sleep(0.2)
    [d] = W.describe_log_dirs(broker.bootstrap, topic, [0, 1, 5])
    assert d.error_code == 0 and d.path == str(broker.data_dir)
    assert all((lag, future) == (0, False) for _, lag, future in d.partitions.values())
    assert set(d.sizes) == {0, 1} and d.sizes[0] == 0 and d.sizes[1] > 100 * 100
    assert d.total_bytes > d.usable_bytes > 0


# --------------------------------------------------------------------------- ListGroups v5
def test_list_groups_v5_filters_by_type(broker):
    topic = "lg5"
    create(broker.bootstrap, {topic: 1})
    c = Consumer({"bootstrap.servers": broker.bootstrap, "group.id": "lg5-group",
                  "auto.offset.reset": "earliest"})
    c.subscribe([topic])
    deadline = time.monotonic() + TIMEOUT
    while not c.assignment():
        assert time.monotonic() < deadline
        c.poll(0.2)

    def groups(types):
        body = c_array([]) + c_array([W.compact_string(t) for t in types]) + tags()
        r = flex_roundtrip(broker.bootstrap, 16, 5, body)
        r.i32()
        assert r.i16() == 0
        out = []
        for _ in range(r.c_len()):
            out.append((r.c_string(), r.c_string(), r.c_string(), r.c_string()))
            r.skip_tags()
        return out
    try:
        assert ("lg5-group", "consumer", "Stable", "classic") in groups([])
        assert ("lg5-group", "consumer", "Stable", "classic") in groups(["Classic"])
        assert groups(["consumer", "share"]) == []
    finally:
        c.close()


# --------------------------------------------------------------------------- Metadata KIP-430
def test_metadata_reports_authorized_operations_when_asked(broker):
    topic = "md-ops"
    create(broker.bootstrap, {topic: 1})

    def metadata(include: bool):
        body = (c_array([W.i8(0) * 16 + W.compact_string(topic) + tags()]) + W.i8(0)
                + W.i8(int(include)) + W.i8(int(include)) + tags())
        r = flex_roundtrip(broker.bootstrap, 3, 10, body)
        r.i32()
        for _ in range(r.c_len()):
            r.i32(); r.c_string(); r.i32(); r.c_string(); r.skip_tags()
        r.c_string(); r.i32()  # cluster id, controller
        assert r.c_len() == 1
        code, name, _id, _internal = r.i16(), r.c_string(), r.uuid(), r.i8()
        for _ in range(r.c_len()):
            r.i16(); r.i32(); r.i32(); r.i32()
            for _ in range(3):
                [r.i32() for _ in range(r.c_len())]
            r.skip_tags()
        topic_ops = r.i32()
        r.skip_tags()
        cluster_ops = r.i32()
        r.skip_tags()
        assert r.remaining() == 0 and (code, name) == (0, topic)
        return topic_ops, cluster_ops
    assert metadata(True) == (TOPIC_OPS, CLUSTER_OPS)
    assert metadata(False) == (-2**31, -2**31)
