"""Retention, DeleteRecords, compaction and the disk budget on a real broker with real
segment files (tiny segments and fast housekeeping make it quick), driven by librdkafka
(confluent-kafka)."""

from __future__ import annotations

import glob
import os
import time

import pytest
from confluent_kafka import Consumer, KafkaError, KafkaException, Producer, TopicPartition
from confluent_kafka.admin import (AdminClient, AlterConfigOpType, ConfigEntry, ConfigResource,
                                   NewTopic)

import kwire

TIMEOUT = 30
FAST = ["--retention-check-interval-ms", "200", "--cleaner-backoff-ms", "200"]


def create(admin: AdminClient, topic: str, config: dict, partitions: int = 1) -> None:
    admin.create_topics([NewTopic(topic, partitions, 1, config=config)])[topic].result(TIMEOUT)


def produce(bootstrap: str, topic: str, items, **conf) -> int:
    """Produces (key, value, timestamp) items; returns how many were acknowledged."""
    p = Producer({"bootstrap.servers": bootstrap, "linger.ms": 5, "acks": "all", **conf})
    acked = []

    def report(err, msg):
        if err is None:
            acked.append(msg.offset())

    for key, value, ts in items:
        while True:
            try:
                p.produce(topic, key=key, value=value, timestamp=ts or 0, on_delivery=report)
                break
            except BufferError:
                p.poll(0.05)
    assert p.flush(TIMEOUT) == 0
    return len(acked)


def consume_all(bootstrap: str, topic: str, partition: int = 0, start: int = -2) -> list:
    """Every record from `start` (-2: earliest) to the high watermark, as
    (offset, key, value, (timestamp type, timestamp))."""
    c = Consumer({"bootstrap.servers": bootstrap, "group.id": f"reader-{time.time()}",
                  "enable.auto.commit": False, "auto.offset.reset": "earliest"})
    _, high = c.get_watermark_offsets(TopicPartition(topic, partition), timeout=TIMEOUT)
    c.assign([TopicPartition(topic, partition, start)])
    out = []
    deadline = time.time() + TIMEOUT
    while time.time() < deadline and (not out or out[-1][0] < high - 1) and high > 0:
        m = c.poll(0.5)
        if m is None:
            continue
        assert m.error() is None, m.error()
        out.append((m.offset(), m.key(), m.value(), m.timestamp()))
    c.close()
    return out


def watermarks(bootstrap: str, topic: str, partition: int = 0) -> tuple[int, int]:
    c = Consumer({"bootstrap.servers": bootstrap, "group.id": "wm"})
    try:
        return c.get_watermark_offsets(TopicPartition(topic, partition), timeout=TIMEOUT)
    finally:
        c.close()


def segment_files(b, topic: str, partition: int = 0) -> list[str]:
    return sorted(glob.glob(os.path.join(str(b.data_dir), f"{topic}-{partition}", "*.log")))


def wait_for(predicate, timeout: float = 20.0, what: str = "condition"):
    deadline = time.time() + timeout
    while time.time() < deadline:
        value = predicate()
        if value:
            return value
        time.sleep(0.2)
    raise AssertionError(f"timed out waiting for {what}")


def test_retention_by_size_deletes_oldest_segments(broker_factory):
    b = broker_factory.start(extra_args=FAST)
    admin = AdminClient({"bootstrap.servers": b.bootstrap})
    topic = "ret-size"
    create(admin, topic, {"segment.bytes": "16384", "retention.bytes": "65536"})
    n = produce(b.bootstrap, topic, [(None, b"x" * 1000, None) for _ in range(600)],
                **{"batch.size": 4000})
    assert n == 600
    # What is left is at least retention.bytes and at most that plus one segment and the
    # active one (Kafka's rule: delete a segment only if the rest still reaches the limit).
    def log_size():
        return sum(os.path.getsize(f) for f in segment_files(b, topic))

    wait_for(lambda: log_size() <= 65536 + 3 * 16384, what="retention to trim the log")
    assert log_size() >= 65536, log_size()
    low, high = watermarks(b.bootstrap, topic)
    assert low > 0 and high == 600
    records = consume_all(b.bootstrap, topic)
    assert [r[0] for r in records] == list(range(low, high))
    # Below the log start: OFFSET_OUT_OF_RANGE (with auto.offset.reset=error).
    c = Consumer({"bootstrap.servers": b.bootstrap, "group.id": "oor", "auto.offset.reset": "error"})
    c.assign([TopicPartition(topic, 0, 0)])
    err = None
    deadline = time.time() + TIMEOUT
    while err is None and time.time() < deadline:
        m = c.poll(0.5)
        if m is not None and m.error() is not None:
            err = m.error()
    c.close()
    assert err is not None and err.code() == KafkaError._AUTO_OFFSET_RESET, err


def test_retention_by_time_uses_record_timestamps(broker_factory):
    b = broker_factory.start(extra_args=FAST)
    admin = AdminClient({"bootstrap.servers": b.bootstrap})
    topic = "ret-time"
    create(admin, topic, {"segment.bytes": "8192", "retention.ms": "600000"})
    old = int(time.time() * 1000) - 3_600_000  # an hour ago: past retention
    produce(b.bootstrap, topic, [(None, b"o" * 500, old) for _ in range(100)], **{"batch.size": 2000})
    produce(b.bootstrap, topic, [(None, b"n" * 500, None) for _ in range(100)], **{"batch.size": 2000})
    low, high = wait_for(lambda: (lambda w: w if w[0] > 0 else None)(watermarks(b.bootstrap, topic)),
                         what="old segments to expire")
    assert high == 200
    # Only old records went: every new record is still there.
    assert 0 < low <= 100
    values = [r[2] for r in consume_all(b.bootstrap, topic)]
    assert values.count(b"n" * 500) == 100


def test_delete_records_moves_the_log_start_and_survives_restart(broker_factory):
    b = broker_factory.start(extra_args=FAST)
    admin = AdminClient({"bootstrap.servers": b.bootstrap})
    topic = "del-rec"
    create(admin, topic, {"segment.bytes": "8192"})
    produce(b.bootstrap, topic, [(None, b"v" * 200, None) for _ in range(300)], **{"batch.size": 1000})
    before = len(segment_files(b, topic))
    res = admin.delete_records([TopicPartition(topic, 0, 150)])
    (fut,) = res.values()
    assert fut.result(TIMEOUT).low_watermark == 150
    assert watermarks(b.bootstrap, topic) == (150, 300)
    assert consume_all(b.bootstrap, topic)[0][0] == 150
    assert len(segment_files(b, topic)) < before  # whole segments below 150 went
    # Past the high watermark: refused.
    res = admin.delete_records([TopicPartition(topic, 0, 10_000)])
    (fut,) = res.values()
    with pytest.raises(KafkaException) as e:
        fut.result(TIMEOUT)
    assert e.value.args[0].code() == KafkaError.OFFSET_OUT_OF_RANGE, e.value
    b.stop()
    b.restart()
    assert watermarks(b.bootstrap, topic) == (150, 300)


def test_compaction_keeps_the_last_value_per_key(broker_factory):
    b = broker_factory.start(extra_args=FAST)
    admin = AdminClient({"bootstrap.servers": b.bootstrap})
    topic = "compacted"
    create(admin, topic, {"cleanup.policy": "compact", "segment.bytes": "8192",
                          "min.cleanable.dirty.ratio": "0.01", "delete.retention.ms": "3600000"})
    model = {}
    items = []
    for i in range(3000):
        key = f"k{i % 40}".encode()
        value = None if i % 97 == 0 else f"v{i}".encode() * 8
        items.append((key, value, None))
        model[key] = value
    produce(b.bootstrap, topic, items, **{"compression.type": "lz4", "batch.size": 4000})

    def compacted():
        n = consume_all(b.bootstrap, topic)
        return n if len(n) < 1000 else None

    records = wait_for(compacted, timeout=30, what="compaction")
    offsets = [r[0] for r in records]
    assert offsets == sorted(offsets) and len(set(offsets)) == len(offsets)
    latest = {}
    for _, k, v, _ in records:
        latest[k] = v
    assert latest == model  # tombstones included, still within delete.retention.ms
    # A compacted topic refuses records without a key.
    p = Producer({"bootstrap.servers": b.bootstrap, "message.send.max.retries": 0})
    errors = []
    p.produce(topic, value=b"no key", on_delivery=lambda err, msg: errors.append(err))
    p.flush(TIMEOUT)
    assert errors and errors[0] is not None and errors[0].code() == KafkaError.INVALID_RECORD, errors
    # The compacted log is intact after a restart (further passes may shrink it more;
    # the last value of every key never changes).
    b.stop()
    b.restart()
    again = consume_all(b.bootstrap, topic)
    assert {k: v for _, k, v, _ in again} == model
    assert set(r[:3] for r in again) <= set(r[:3] for r in records)


def test_topic_compression_and_log_append_time_are_applied(broker_factory):
    b = broker_factory.start(extra_args=FAST)
    admin = AdminClient({"bootstrap.servers": b.bootstrap})
    topic = "recoded"
    create(admin, topic, {"compression.type": "gzip", "message.timestamp.type": "LogAppendTime"})
    old = int(time.time() * 1000) - 86_400_000
    produce(b.bootstrap, topic, [(b"k", b"v" * 100, old) for _ in range(10)])
    records = consume_all(b.bootstrap, topic)
    assert len(records) == 10
    for _, _, v, (ts_type, ts) in records:
        assert v == b"v" * 100
        assert ts_type == 2  # TIMESTAMP_LOG_APPEND_TIME
        assert abs(ts - time.time() * 1000) < 60_000
    (seg,) = segment_files(b, topic)
    with open(seg, "rb") as f:
        head = f.read(kwire.BATCH_HEADER_LEN)
    attributes = int.from_bytes(head[kwire.ATTRIBUTES], "big")
    assert attributes & 0x07 == 1, attributes  # stored gzip
    assert attributes & 0x08, attributes  # log-append time


def test_timestamps_too_far_from_the_broker_clock_are_refused(broker_factory):
    b = broker_factory.start(extra_args=FAST)
    admin = AdminClient({"bootstrap.servers": b.bootstrap})
    topic = "ts-window"
    create(admin, topic, {"message.timestamp.difference.max.ms": "60000"})
    p = Producer({"bootstrap.servers": b.bootstrap})
    errors = []
    # One batch each (the check refuses a whole batch, as Kafka's does).
    p.produce(topic, value=b"old", timestamp=int(time.time() * 1000) - 86_400_000,
              on_delivery=lambda err, msg: errors.append(err))
    p.flush(TIMEOUT)
    p.produce(topic, value=b"now", on_delivery=lambda err, msg: errors.append(err))
    p.flush(TIMEOUT)
    codes = sorted(e.code() if e else 0 for e in errors)
    assert codes == sorted([0, KafkaError.INVALID_TIMESTAMP]), errors


def test_disk_budget_refuses_produce_and_resumes_after_retention(broker_factory):
    b = broker_factory.start(extra_args=FAST + ["--disk-budget-bytes", "200000"])
    admin = AdminClient({"bootstrap.servers": b.bootstrap})
    topic = "budget"
    create(admin, topic, {"segment.bytes": "16384"})
    acked = produce(b.bootstrap, topic, [(None, b"d" * 1000, None) for _ in range(300)],
                    **{"batch.size": 4000})
    assert acked == 300

    def refused():
        p = Producer({"bootstrap.servers": b.bootstrap, "message.timeout.ms": 1500})
        errs = []
        p.produce(topic, value=b"more", on_delivery=lambda err, msg: errs.append(err))
        p.flush(10)
        return errs and errs[0] is not None and errs[0]

    err = wait_for(refused, what="produce to be refused over the budget")
    assert err.code() in (KafkaError.KAFKA_STORAGE_ERROR, KafkaError._MSG_TIMED_OUT), err
    assert "disk budget" in b.log_tail(400)
    # Acknowledged data is all there (and nothing past the refusal was written).
    low, high = watermarks(b.bootstrap, topic)
    assert low == 0 and high >= 300
    assert len(consume_all(b.bootstrap, topic)) == high
    # Retention frees space; produce resumes by itself.
    res = ConfigResource(ConfigResource.Type.TOPIC, topic, incremental_configs=[
        ConfigEntry("retention.bytes", "50000", incremental_operation=AlterConfigOpType.SET)])
    admin.incremental_alter_configs([res])[res].result(TIMEOUT)
    wait_for(lambda: not refused(), what="produce to resume")


def test_delete_records_on_a_compact_only_topic_is_a_policy_violation(broker_factory):
    b = broker_factory.start(extra_args=FAST)
    admin = AdminClient({"bootstrap.servers": b.bootstrap})
    create(admin, "compact-only", {"cleanup.policy": "compact"})
    create(admin, "compact-delete", {"cleanup.policy": "compact,delete"})
    for topic in ("compact-only", "compact-delete"):
        produce(b.bootstrap, topic, [(b"k%d" % i, b"v", None) for i in range(10)])
    (fut,) = admin.delete_records([TopicPartition("compact-only", 0, 5)]).values()
    with pytest.raises(KafkaException) as e:
        fut.result(TIMEOUT)
    assert e.value.args[0].code() == KafkaError.POLICY_VIOLATION, e.value
    (fut,) = admin.delete_records([TopicPartition("compact-delete", 0, 5)]).values()
    assert fut.result(TIMEOUT).low_watermark == 5


def test_a_batch_too_large_once_stored_uncompressed_is_refused(broker_factory):
    b = broker_factory.start(extra_args=FAST)
    admin = AdminClient({"bootstrap.servers": b.bootstrap})
    create(admin, "stored-plain", {"compression.type": "uncompressed", "max.message.bytes": "4096"})
    p = Producer({"bootstrap.servers": b.bootstrap, "compression.type": "zstd",
                  "message.send.max.retries": 0, "message.max.bytes": 1_000_000})
    errors = []
    # Compresses to far below 4 KiB, is 64 KiB stored uncompressed.
    p.produce("stored-plain", value=b"z" * 65536, on_delivery=lambda err, msg: errors.append(err))
    p.produce("stored-plain", value=b"small", on_delivery=lambda err, msg: errors.append(err))
    p.flush(TIMEOUT)
    codes = sorted(e.code() if e else 0 for e in errors)
    assert KafkaError.MSG_SIZE_TOO_LARGE in codes, errors
    assert watermarks(b.bootstrap, "stored-plain")[1] <= 1
