"""Leader epochs and the high watermark (the partition layer): every start of the broker
leads its partitions in a new epoch, batches carry it, OffsetForLeaderEpoch answers from
the leader-epoch cache, Fetch and ListOffsets check `current_leader_epoch`, Fetch v12+
answers a diverging `last_fetched_epoch`, and consumers read only below the high
watermark. librdkafka's consumer is driven across restarts (it validates its position
with OffsetForLeaderEpoch, KIP-320); the Java client's is in tests/java."""

from __future__ import annotations

import struct
import time
import urllib.request

from confluent_kafka import Consumer, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic

import kwire as W
from kwire import Flex, c_array, flex_roundtrip, tags

TIMEOUT = 30
W_NO_PROXY = urllib.request.build_opener(urllib.request.ProxyHandler({}))
API_FETCH = 1
API_LIST_OFFSETS = 2
API_OFFSET_FOR_LEADER_EPOCH = 23
NONE = 0
OFFSET_OUT_OF_RANGE = 1
FENCED_LEADER_EPOCH = 74
UNKNOWN_LEADER_EPOCH = 75


def create(bootstrap: str, topic: str, partitions: int = 1, config: dict | None = None) -> None:
    admin = AdminClient({"bootstrap.servers": bootstrap})
    for f in admin.create_topics([NewTopic(topic, partitions, 1, config=config or {})]).values():
        f.result(TIMEOUT)


def produce(bootstrap: str, topic: str, values: list[bytes], acks: str = "all") -> None:
    p = Producer({"bootstrap.servers": bootstrap, "acks": acks, "linger.ms": 0})
    errors = []
    for v in values:
        p.produce(topic, v, partition=0, on_delivery=lambda e, m: e and errors.append(e))
        p.flush(TIMEOUT)  # one batch per record, so every batch carries its own epoch
    assert p.flush(TIMEOUT) == 0 and not errors, errors


def metadata_epoch(bootstrap: str, topic: str) -> int:
    """The leader epoch Metadata v9 reports for partition 0."""
    # Metadata v10 (flexible, topics by name and id): no auto-creation, no cluster or
    # topic authorized operations.
    body = (c_array([b"\x00" * 16 + W.compact_string(topic) + tags()])
            + W.i8(0) + W.i8(0) + W.i8(0) + tags())
    r = flex_roundtrip(bootstrap, 3, 10, body)
    r.i32()  # throttle
    for _ in range(r.c_len()):  # brokers
        r.i32(); r.c_string(); r.i32(); r.c_string(); r.skip_tags()
    r.c_string()  # cluster id
    r.i32()  # controller
    epochs = {}
    for _ in range(r.c_len()):
        code, name, _id, _internal = r.i16(), r.c_string(), r.uuid(), r.i8()
        assert code == NONE, code
        for _ in range(r.c_len()):
            pcode, index, _leader, epoch = r.i16(), r.i32(), r.i32(), r.i32()
            assert pcode == NONE
            for _ in range(3):  # replicas, isr, offline
                for _ in range(r.c_len()):
                    r.i32()
            r.skip_tags()
            epochs[(name, index)] = epoch
        r.i32()  # topic authorized operations
        r.skip_tags()
    return epochs[(topic, 0)]


def offset_for_leader_epoch(bootstrap: str, topic: str, leader_epoch: int,
                            current_leader_epoch: int = -1) -> tuple[int, int, int]:
    """OffsetForLeaderEpoch v4 for partition 0 -> (error code, epoch, end offset)."""
    part = W.i32(0) + W.i32(current_leader_epoch) + W.i32(leader_epoch) + tags()
    body = W.i32(-1) + c_array([W.compact_string(topic) + c_array([part]) + tags()]) + tags()
    r = flex_roundtrip(bootstrap, API_OFFSET_FOR_LEADER_EPOCH, 4, body)
    r.i32()  # throttle
    assert r.c_len() == 1 and r.c_string() == topic
    assert r.c_len() == 1
    code, index, epoch, end = r.i16(), r.i32(), r.i32(), r.i64()
    assert index == 0
    return code, epoch, end


def fetch_v12(bootstrap: str, topic: str, offset: int, current_leader_epoch: int = -1,
              last_fetched_epoch: int = -1, isolation: int = 0) -> dict:
    """Fetch v12 of partition 0 (no wait) -> its fields, diverging epoch included."""
    part = (W.i32(0) + W.i32(current_leader_epoch) + W.i64(offset) + W.i32(last_fetched_epoch)
            + W.i64(-1) + W.i32(1 << 20) + tags())
    body = (W.i32(-1) + W.i32(0) + W.i32(0) + W.i32(1 << 20) + W.i8(isolation) + W.i32(0)
            + W.i32(-1) + c_array([W.compact_string(topic) + c_array([part]) + tags()])
            + c_array([]) + W.compact_string("") + tags())
    r = flex_roundtrip(bootstrap, API_FETCH, 12, body)
    r.i32(); assert r.i16() == NONE; r.i32()  # throttle, error, session
    assert r.c_len() == 1 and r.c_string() == topic and r.c_len() == 1
    out = {"partition": r.i32(), "error_code": r.i16(), "high_watermark": r.i64(),
           "last_stable_offset": r.i64(), "log_start_offset": r.i64()}
    aborted = r.c_len()
    out["aborted_transactions"] = None if aborted < 0 else aborted
    for _ in range(max(aborted, 0)):
        r.i64(); r.i64(); r.skip_tags()
    r.i32()  # preferred read replica
    n = r.uvarint() - 1
    out["records"] = b"" if n < 0 else r.take(n)
    out["diverging_epoch"] = None
    for _ in range(r.uvarint()):
        tag, size = r.uvarint(), r.uvarint()
        data = Flex(r.take(size))
        if tag == 0:
            out["diverging_epoch"] = (data.i32(), data.i64())
    return out


def list_offsets_v4(bootstrap: str, topic: str, timestamp: int,
                    current_leader_epoch: int = -1) -> tuple[int, int, int]:
    """ListOffsets v4 (not flexible) for partition 0 -> (error, offset, leader epoch)."""
    part = W.i32(0) + W.i32(current_leader_epoch) + W.i64(timestamp)
    body = W.i32(-1) + W.i8(0) + W.array([W.string(topic) + W.array([part])])
    _, resp = W.roundtrip(bootstrap, W.request(API_LIST_OFFSETS, 4, 9, body))
    r = W.Reader(resp)
    r.i32()  # throttle
    assert r.i32() == 1 and r.string() == topic and r.i32() == 1
    index, code, _ts, offset, epoch = r.i32(), r.i16(), r.i64(), r.i64(), r.i32()
    assert index == 0
    return code, offset, epoch


def batch_epochs(records: bytes) -> list[tuple[int, int]]:
    """(base offset, partition leader epoch) of every batch."""
    out, pos = [], 0
    while pos + W.BATCH_HEADER_LEN <= len(records):
        base, = struct.unpack_from(">q", records, pos + W.BASE_OFFSET.start)
        length, = struct.unpack_from(">i", records, pos + W.BATCH_LENGTH.start)
        epoch, = struct.unpack_from(">i", records, pos + W.PARTITION_LEADER_EPOCH.start)
        out.append((base, epoch))
        pos += W.LOG_OVERHEAD + length
    return out


def test_each_start_leads_in_a_new_epoch_and_batches_carry_it(broker):
    topic = "epochs"
    create(broker.bootstrap, topic)
    first = metadata_epoch(broker.bootstrap, topic)
    produce(broker.bootstrap, topic, [b"a%d" % i for i in range(3)])
    broker.restart()
    # A restart is a new registration: the partition goes offline (one epoch) and comes
    # back led by the new incarnation (another), as in Kafka.
    second = metadata_epoch(broker.bootstrap, topic)
    assert second > first
    produce(broker.bootstrap, topic, [b"b%d" % i for i in range(2)])
    broker.restart()
    third = metadata_epoch(broker.bootstrap, topic)
    assert third > second

    f = fetch_v12(broker.bootstrap, topic, 0, current_leader_epoch=third)
    assert f["error_code"] == NONE and f["high_watermark"] == 5
    assert batch_epochs(f["records"]) == [(0, first), (1, first), (2, first),
                                          (3, second), (4, second)]

    # The cache: epoch `first` ended where `second` began, `second` at the end of its
    # writes (where `third`, which wrote nothing yet, began), the latest at the log end.
    assert offset_for_leader_epoch(broker.bootstrap, topic, first) == (NONE, first, 3)
    assert offset_for_leader_epoch(broker.bootstrap, topic, second) == (NONE, second, 5)
    assert offset_for_leader_epoch(broker.bootstrap, topic, third, third) == (NONE, third, 5)
    assert offset_for_leader_epoch(broker.bootstrap, topic, third + 5) == (NONE, -1, -1)
    # Stale and future current epochs are refused, as Kafka refuses them.
    assert offset_for_leader_epoch(broker.bootstrap, topic, first, first)[0] == FENCED_LEADER_EPOCH
    assert offset_for_leader_epoch(broker.bootstrap, topic, first, third + 1)[0] == UNKNOWN_LEADER_EPOCH
    code, _, _ = offset_for_leader_epoch(broker.bootstrap, "no-such-topic", 0)
    assert code == 3  # UNKNOWN_TOPIC_OR_PARTITION

    # ListOffsets v4 answers the epoch of what it found, and checks the current epoch.
    assert list_offsets_v4(broker.bootstrap, topic, -1) == (NONE, 5, third)
    assert list_offsets_v4(broker.bootstrap, topic, -2) == (NONE, 0, first)
    assert list_offsets_v4(broker.bootstrap, topic, -1, second)[0] == FENCED_LEADER_EPOCH
    assert list_offsets_v4(broker.bootstrap, topic, -1, third + 1)[0] == UNKNOWN_LEADER_EPOCH


def test_fetch_checks_the_leader_epoch_and_answers_divergence(broker):
    topic = "diverge"
    create(broker.bootstrap, topic)
    produce(broker.bootstrap, topic, [b"x", b"y"])
    old = metadata_epoch(broker.bootstrap, topic)
    broker.restart()
    produce(broker.bootstrap, topic, [b"z"])
    now = metadata_epoch(broker.bootstrap, topic)

    assert fetch_v12(broker.bootstrap, topic, 0, current_leader_epoch=old)["error_code"] == FENCED_LEADER_EPOCH
    assert fetch_v12(broker.bootstrap, topic, 0, current_leader_epoch=now + 1)["error_code"] == UNKNOWN_LEADER_EPOCH
    ok = fetch_v12(broker.bootstrap, topic, 2, current_leader_epoch=now, last_fetched_epoch=old)
    assert ok["error_code"] == NONE and ok["diverging_epoch"] is None
    assert batch_epochs(ok["records"]) == [(2, now)]
    # A fetcher that claims to hold offset 3 in the old epoch, which ended at 2 here:
    # told where to truncate, and given no records.
    d = fetch_v12(broker.bootstrap, topic, 3, current_leader_epoch=now, last_fetched_epoch=old)
    assert d["error_code"] == NONE and d["records"] == b""
    assert d["diverging_epoch"] == (old, 2)
    # An epoch past the latest is not known to end anywhere.
    far = fetch_v12(broker.bootstrap, topic, 1, last_fetched_epoch=now + 3)
    assert far["error_code"] == OFFSET_OUT_OF_RANGE

    committed = fetch_v12(broker.bootstrap, topic, 0, isolation=1)
    assert committed["error_code"] == NONE and committed["aborted_transactions"] == 0
    assert committed["last_stable_offset"] == committed["high_watermark"] == 3
    assert fetch_v12(broker.bootstrap, topic, 0)["aborted_transactions"] is None


def test_librdkafka_consumer_follows_epochs_across_restarts(broker):
    """The consumer is fenced by the restart's new epoch, validates its position with
    OffsetForLeaderEpoch and goes on: every record exactly once, in order."""
    topic = "epoch-consume"
    create(broker.bootstrap, topic)
    c = Consumer({"bootstrap.servers": broker.bootstrap, "group.id": "epochs",
                  "auto.offset.reset": "earliest", "enable.auto.commit": False,
                  "topic.metadata.refresh.interval.ms": 500})
    c.assign([TopicPartition(topic, 0, 0)])
    seen, epochs = [], set()

    def drain(expect: int) -> None:
        deadline = time.monotonic() + TIMEOUT
        while len(seen) < expect and time.monotonic() < deadline:
            m = c.poll(0.5)
            if m is None or m.error():
                continue
            seen.append(m.value())
            epochs.add(m.leader_epoch())
        assert len(seen) == expect, f"{len(seen)} of {expect} records: {seen}"

    try:
        for round_ in range(3):
            produce(broker.bootstrap, topic, [b"r%d-%d" % (round_, i) for i in range(5)])
            drain(5 * (round_ + 1))
            if round_ < 2:
                broker.restart()
    finally:
        c.close()
    assert seen == [b"r%d-%d" % (r, i) for r in range(3) for i in range(5)]
    assert len(epochs) == 3, f"records of three epochs: {epochs}"
    with W_NO_PROXY.open(f"http://{broker.http}/metrics", timeout=10) as r:
        metrics = r.read().decode()
    validations = [line for line in metrics.splitlines()
                   if line.startswith("corelog_requests_total") and 'api="OffsetForLeaderEpoch"' in line]
    assert validations and float(validations[0].rsplit(" ", 1)[1]) > 0, validations


def test_high_watermark_is_what_acks_all_acknowledges(broker_factory):
    """Under the default durability the high watermark is the synced offset: an acks=1
    record a consumer waits for is synced for it (no wait for the sync timer), and under
    `interval` the written offset is the high watermark."""
    for durability in ("ack-all", "interval"):
        b = broker_factory(extra_args=["--durability", durability, "--flush-interval-ms", "60000"])
        topic = f"hw-{durability}"
        create(b.bootstrap, topic)
        produce(b.bootstrap, topic, [b"one"], acks="1")
        c = Consumer({"bootstrap.servers": b.bootstrap, "group.id": "hw",
                      "auto.offset.reset": "earliest", "fetch.wait.max.ms": 5000})
        c.assign([TopicPartition(topic, 0, 0)])
        started = time.monotonic()
        try:
            m = None
            while m is None and time.monotonic() - started < TIMEOUT:
                m = c.poll(1)
            assert m is not None and not m.error() and m.value() == b"one"
        finally:
            c.close()
        # Far below the 60 s sync interval: the waiting reader asked for the sync.
        assert time.monotonic() - started < 10
        f = fetch_v12(b.bootstrap, topic, 0)
        assert f["high_watermark"] == 1 and f["last_stable_offset"] == 1
