"""Transactions on one broker, with librdkafka's transactional producer and
read_committed consumers (confluent-kafka):

- a committed transaction is read whole by read_committed and read_uncommitted consumers;
  an aborted one is never read by read_committed, and read_uncommitted sees its records;
- a read_committed consumer stops at an open transaction (the last stable offset) and
  goes on once it commits; ListOffsets answers the LSO for read_committed;
- a second producer with the same transactional id fences the first (zombie fencing);
- a transaction its producer abandons is aborted by the coordinator after
  ``transaction.timeout.ms``, so the LSO moves on;
- the coordinator's state survives a restart: a transaction committed before it is still
  committed, and an abandoned one is aborted after it;
- DescribeTransactions and ListTransactions report what the coordinator holds.
"""

from __future__ import annotations

import time
import uuid

import pytest
from confluent_kafka import Consumer, KafkaError, KafkaException, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic

import kwire as W

TIMEOUT = 30
ABORT_CHECK_ARGS = ["--transaction-abort-timed-out-transaction-cleanup-interval-ms", "300"]


def create(bootstrap: str, topic: str, partitions: int = 1) -> None:
    admin = AdminClient({"bootstrap.servers": bootstrap})
    admin.create_topics([NewTopic(topic, partitions, 1)])[topic].result(TIMEOUT)


def txn_producer(bootstrap: str, txn_id: str, **extra) -> Producer:
    conf = {"bootstrap.servers": bootstrap, "transactional.id": txn_id,
            "transaction.timeout.ms": 60_000, "linger.ms": 5}
    conf.update(extra)
    p = Producer(conf)
    p.init_transactions(TIMEOUT)
    return p


def read_values(bootstrap: str, topic: str, isolation: str, partitions: int = 1,
                expect: int | None = None, wait: float = 5.0) -> list[bytes]:
    """Every value of `topic` a consumer of `isolation` reads within `wait` seconds (or
    until it has `expect` of them)."""
    c = Consumer({"bootstrap.servers": bootstrap, "group.id": f"g-{uuid.uuid4()}",
                  "isolation.level": isolation, "auto.offset.reset": "earliest",
                  "enable.auto.commit": False})
    c.assign([TopicPartition(topic, p, 0) for p in range(partitions)])
    out: list[bytes] = []
    deadline = time.monotonic() + wait
    try:
        while time.monotonic() < deadline and (expect is None or len(out) < expect):
            m = c.poll(0.2)
            if m is None or m.error():
                continue
            out.append(m.value())
    finally:
        c.close()
    return out


def lso(bootstrap: str, topic: str) -> int:
    """The end offset a read_committed consumer is given (ListOffsets latest)."""
    c = Consumer({"bootstrap.servers": bootstrap, "group.id": f"g-{uuid.uuid4()}",
                  "isolation.level": "read_committed"})
    try:
        return c.get_watermark_offsets(TopicPartition(topic, 0), TIMEOUT)[1]
    finally:
        c.close()


def high_watermark(bootstrap: str, topic: str) -> int:
    c = Consumer({"bootstrap.servers": bootstrap, "group.id": f"g-{uuid.uuid4()}",
                  "isolation.level": "read_uncommitted"})
    try:
        return c.get_watermark_offsets(TopicPartition(topic, 0), TIMEOUT)[1]
    finally:
        c.close()


def wait_until(what: str, check, timeout: float = TIMEOUT) -> None:
    deadline = time.monotonic() + timeout
    while not check():
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        time.sleep(0.2)


def test_commit_and_abort_are_seen_as_kafka_shows_them(broker):
    topic = "txn-basic"
    create(broker.bootstrap, topic, 2)
    p = txn_producer(broker.bootstrap, "txn-basic-1")
    p.begin_transaction()
    for i in range(10):
        p.produce(topic, value=f"c{i}".encode(), partition=i % 2)
    p.commit_transaction(TIMEOUT)
    p.begin_transaction()
    for i in range(5):
        p.produce(topic, value=f"a{i}".encode(), partition=i % 2)
    p.flush(TIMEOUT)
    p.abort_transaction(TIMEOUT)
    p.begin_transaction()
    p.produce(topic, value=b"last", partition=0)
    p.commit_transaction(TIMEOUT)

    committed = read_values(broker.bootstrap, topic, "read_committed", 2, expect=11)
    assert sorted(committed) == sorted([f"c{i}".encode() for i in range(10)] + [b"last"])
    everything = read_values(broker.bootstrap, topic, "read_uncommitted", 2, expect=16)
    assert sorted(everything) == sorted(
        [f"c{i}".encode() for i in range(10)] + [f"a{i}".encode() for i in range(5)] + [b"last"])


def test_read_committed_stops_at_an_open_transaction(broker):
    topic = "txn-lso"
    create(broker.bootstrap, topic)
    plain = Producer({"bootstrap.servers": broker.bootstrap})
    plain.produce(topic, value=b"before")
    plain.flush(TIMEOUT)
    p = txn_producer(broker.bootstrap, "txn-lso-1")
    p.begin_transaction()
    p.produce(topic, value=b"inside")
    p.flush(TIMEOUT)
    plain.produce(topic, value=b"after")
    plain.flush(TIMEOUT)
    assert high_watermark(broker.bootstrap, topic) == 3
    assert lso(broker.bootstrap, topic) == 1, "the open transaction holds the LSO"
    assert read_values(broker.bootstrap, topic, "read_committed", wait=2.0) == [b"before"]
    p.commit_transaction(TIMEOUT)
    # The marker follows the transaction: the LSO passes it.
    wait_until("the LSO to pass the marker", lambda: lso(broker.bootstrap, topic) == 4)
    assert read_values(broker.bootstrap, topic, "read_committed", expect=3) == [
        b"before", b"inside", b"after"]


def test_a_second_producer_fences_the_first(broker):
    topic = "txn-zombie"
    create(broker.bootstrap, topic)
    zombie = txn_producer(broker.bootstrap, "txn-zombie-1")
    zombie.begin_transaction()
    zombie.produce(topic, value=b"zombie")
    zombie.flush(TIMEOUT)
    # The new instance's init aborts the zombie's open transaction and fences it.
    fresh = txn_producer(broker.bootstrap, "txn-zombie-1")
    with pytest.raises(KafkaException) as e:
        zombie.produce(topic, value=b"late")
        zombie.commit_transaction(TIMEOUT)
    err = e.value.args[0]
    assert err.code() in (KafkaError._FENCED, KafkaError.PRODUCER_FENCED,
                          KafkaError.INVALID_PRODUCER_EPOCH), err
    fresh.begin_transaction()
    fresh.produce(topic, value=b"fresh")
    fresh.commit_transaction(TIMEOUT)
    assert read_values(broker.bootstrap, topic, "read_committed", expect=1, wait=5.0) == [b"fresh"]


def test_an_abandoned_transaction_times_out(broker_factory):
    b = broker_factory.start(extra_args=ABORT_CHECK_ARGS)
    topic = "txn-timeout"
    create(b.bootstrap, topic)
    p = txn_producer(b.bootstrap, "txn-timeout-1", **{"transaction.timeout.ms": 2000})
    p.begin_transaction()
    p.produce(topic, value=b"abandoned")
    p.flush(TIMEOUT)
    assert lso(b.bootstrap, topic) == 0
    # Nobody ends it: the coordinator aborts it past its timeout and the LSO moves on.
    wait_until("the coordinator to abort the transaction",
               lambda: lso(b.bootstrap, topic) == 2, timeout=15)
    assert read_values(b.bootstrap, topic, "read_committed", wait=2.0) == []
    assert read_values(b.bootstrap, topic, "read_uncommitted", expect=1) == [b"abandoned"]


def test_the_coordinator_state_survives_a_restart(broker_factory):
    b = broker_factory.start(extra_args=ABORT_CHECK_ARGS)
    topic = "txn-restart"
    create(b.bootstrap, topic)
    p = txn_producer(b.bootstrap, "txn-restart-1", **{"transaction.timeout.ms": 3000})
    p.begin_transaction()
    p.produce(topic, value=b"committed")
    p.commit_transaction(TIMEOUT)
    p.begin_transaction()
    p.produce(topic, value=b"abandoned")
    p.flush(TIMEOUT)
    b.stop()
    b.start()
    # The committed one is still committed; the open one is aborted once it times out,
    # by the coordinator that loaded it after the restart.
    wait_until("the restarted coordinator to abort the transaction",
               lambda: lso(b.bootstrap, topic) == 4, timeout=20)
    assert read_values(b.bootstrap, topic, "read_committed", expect=1) == [b"committed"]
    # The id goes on with a bumped epoch.
    again = txn_producer(b.bootstrap, "txn-restart-1")
    again.begin_transaction()
    again.produce(topic, value=b"again")
    again.commit_transaction(TIMEOUT)
    assert read_values(b.bootstrap, topic, "read_committed", expect=2) == [b"committed", b"again"]


def test_describe_and_list_transactions(broker):
    topic = "txn-describe"
    create(broker.bootstrap, topic)
    p = txn_producer(broker.bootstrap, "txn-describe-1")
    p.begin_transaction()
    p.produce(topic, value=b"x")
    p.flush(TIMEOUT)
    # ListTransactions v0: no filters.
    r = W.flex_roundtrip(broker.bootstrap, 66, 0, W.c_array([]) + W.c_array([]) + W.tags())
    r.i32()  # throttle
    assert r.i16() == 0
    assert r.c_len() == 0, "no unknown state filters"
    listed = {}
    for _ in range(r.c_len()):
        tid, pid, state = r.c_string(), r.i64(), r.c_string()
        r.skip_tags()
        listed[tid] = (pid, state)
    assert listed["txn-describe-1"][1] == "Ongoing", listed
    # An unknown state name is said back, and filters everything out.
    r = W.flex_roundtrip(broker.bootstrap, 66, 0,
                         W.c_array([W.compact_string("Sleeping")]) + W.c_array([]) + W.tags())
    r.i32()
    assert r.i16() == 0
    assert [r.c_string() for _ in range(r.c_len())] == ["Sleeping"]
    assert r.c_len() == 0
    # DescribeTransactions v0: the open transaction, and an id nobody used.
    body = W.c_array([W.compact_string("txn-describe-1"), W.compact_string("nobody")]) + W.tags()
    r = W.flex_roundtrip(broker.bootstrap, 65, 0, body)
    r.i32()
    assert r.c_len() == 2
    code, tid, state = r.i16(), r.c_string(), r.c_string()
    timeout_ms, start_ms, pid, epoch = r.i32(), r.i64(), r.i64(), r.i16()
    assert (code, tid, state) == (0, "txn-describe-1", "Ongoing")
    assert timeout_ms == 60_000 and start_ms > 0 and pid == listed[tid][0] and epoch >= 0
    topics = {}
    for _ in range(r.c_len()):
        name = r.c_string()
        parts = [r.i32() for _ in range(r.c_len())]
        r.skip_tags()
        topics[name] = parts
    assert topics == {topic: [0]}
    r.skip_tags()
    code, tid = r.i16(), r.c_string()
    # The unknown id's partition may be on this single broker: TRANSACTIONAL_ID_NOT_FOUND.
    assert (code, tid) == (105, "nobody")
    p.abort_transaction(TIMEOUT)
