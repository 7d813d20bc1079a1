"""Offsets committed in transactions (TxnOffsetCommit, KIP-98/KIP-447) against the real
broker, on raw frames (kwire): a transactional producer's commit is pending — not
answered by OffsetFetch, UNSTABLE_OFFSET_COMMIT with require_stable — until the
transaction's marker in the group's `__consumer_offsets` partition (WriteTxnMarkers, as
the transaction coordinator would send it, coordinator epoch 0) commits it or aborts it;
after a restart the replay of that partition agrees, an open transaction staying
pending.

Versions: TxnOffsetCommit v0 and v2 (classic encoding) and v3–v5 (flexible, member
fields; v5 is transaction version 2), OffsetFetch v7 (flexible, require_stable),
WriteTxnMarkers v1 (flexible), EndTxn v5.
"""

from __future__ import annotations

import time

import kwire as W
from coordinator_move import java_hash
from launcher import wait_until
from test_groups import create_topic

API_OFFSET_FETCH = 9
API_WRITE_TXN_MARKERS = 27
API_TXN_OFFSET_COMMIT = 28

ERR_NONE = 0
ERR_ILLEGAL_GENERATION = 22
ERR_INVALID_PRODUCER_EPOCH = 47
ERR_UNSTABLE_OFFSET_COMMIT = 88
# What a coordinator that is loading (or moving) answers; clients retry both.
RETRIABLE_GROUP_ERRORS = (14, 15, 16)  # LOAD_IN_PROGRESS, NOT_AVAILABLE, NOT_COORDINATOR

OFFSETS_TOPIC = "__consumer_offsets"


# ---------------------------------------------------------------------------
# raw frames
# ---------------------------------------------------------------------------

def txn_offset_commit(bootstrap: str, version: int, txn_id: str, group: str, pid: int,
                      epoch: int, topic: str, offsets: dict[int, int],
                      generation: int = -1, member: str = "",
                      instance: str | None = None) -> dict[int, int]:
    """TxnOffsetCommit -> {partition: error_code}. v0–v2 classic, v3 flexible."""
    if version < 3:
        parts = [W.i32(p) + W.i64(o) + (W.i32(-1) if version >= 2 else b"") + W.string("m")
                 for p, o in offsets.items()]
        body = (W.string(txn_id) + W.string(group) + W.i64(pid) + W.i16(epoch)
                + W.array([W.string(topic) + W.array(parts)]))
        _, resp = W.roundtrip(bootstrap, W.request(API_TXN_OFFSET_COMMIT, version, 11, body))
        r = W.Reader(resp)
        r.i32()  # throttle
        out = {}
        for _ in range(r.i32()):
            assert r.string() == topic
            for _ in range(r.i32()):
                p = r.i32()
                out[p] = r.i16()
        assert r.remaining() == 0, f"{r.remaining()} trailing bytes"
        return out
    parts = [W.i32(p) + W.i64(o) + W.i32(-1) + W.compact_string("m") + W.tags()
             for p, o in offsets.items()]
    body = (W.compact_string(txn_id) + W.compact_string(group) + W.i64(pid) + W.i16(epoch)
            + W.i32(generation) + W.compact_string(member) + W.compact_string(instance)
            + W.c_array([W.compact_string(topic) + W.c_array(parts) + W.tags()]) + W.tags())
    r = W.flex_roundtrip(bootstrap, API_TXN_OFFSET_COMMIT, version, body)
    r.i32()  # throttle
    out = {}
    for _ in range(r.c_len()):
        assert r.c_string() == topic
        for _ in range(r.c_len()):
            p = r.i32()
            out[p] = r.i16()
            r.skip_tags()
        r.skip_tags()
    r.skip_tags()
    assert r.remaining() == 0, f"{r.remaining()} trailing bytes"
    return out


def offset_fetch(bootstrap: str, group: str, topic: str, partitions: list[int],
                 require_stable: bool) -> tuple[int, dict[int, tuple[int, int]]]:
    """OffsetFetch v7 -> (group error, {partition: (committed offset, error_code)})."""
    body = (W.compact_string(group)
            + W.c_array([W.compact_string(topic) + W.c_array([W.i32(p) for p in partitions])
                         + W.tags()])
            + W.i8(1 if require_stable else 0) + W.tags())
    r = W.flex_roundtrip(bootstrap, API_OFFSET_FETCH, 7, body)
    r.i32()  # throttle
    out = {}
    for _ in range(r.c_len()):
        assert r.c_string() == topic
        for _ in range(r.c_len()):
            p, offset, _epoch, _meta, err = r.i32(), r.i64(), r.i32(), r.c_string(), r.i16()
            r.skip_tags()
            out[p] = (offset, err)
        r.skip_tags()
    error = r.i16()
    r.skip_tags()
    assert r.remaining() == 0, f"{r.remaining()} trailing bytes"
    return error, out


def fetch_committed(bootstrap: str, group: str, topic: str, partitions: list[int],
                    require_stable: bool, timeout: float = 30.0) -> dict[int, tuple[int, int]]:
    """offset_fetch, retried while the coordinator loads (after a restart)."""
    deadline = time.monotonic() + timeout
    while True:
        error, out = offset_fetch(bootstrap, group, topic, partitions, require_stable)
        if error == ERR_NONE:
            return out
        assert error in RETRIABLE_GROUP_ERRORS, f"OffsetFetch of {group}: error {error}"
        assert time.monotonic() < deadline, f"coordinator of {group} not ready: {error}"
        time.sleep(0.2)


def write_txn_marker(bootstrap: str, pid: int, epoch: int, commit: bool,
                     partition: int) -> int:
    """WriteTxnMarkers v1 for one `__consumer_offsets` partition -> its error code."""
    marker = (W.i64(pid) + W.i16(epoch) + W.i8(1 if commit else 0)
              + W.c_array([W.compact_string(OFFSETS_TOPIC) + W.c_array([W.i32(partition)])
                           + W.tags()])
              + W.i32(0) + W.tags())
    r = W.flex_roundtrip(bootstrap, API_WRITE_TXN_MARKERS, 1, W.c_array([marker]) + W.tags())
    assert r.c_len() == 1
    assert r.i64() == pid
    assert r.c_len() == 1
    assert r.c_string() == OFFSETS_TOPIC
    assert r.c_len() == 1
    assert r.i32() == partition
    err = r.i16()
    r.skip_tags()
    r.skip_tags()
    r.skip_tags()
    r.skip_tags()
    assert r.remaining() == 0, f"{r.remaining()} trailing bytes"
    return err


def offsets_partition_of(bootstrap: str, group: str) -> int:
    """Kafka's partitionFor(group): abs(hashCode) % the offsets topic's partition count."""
    _, body = W.roundtrip(bootstrap, W.metadata_v1(5, [OFFSETS_TOPIC]))
    meta = W.parse_metadata_v1(body)["topics"][OFFSETS_TOPIC]
    count = len(meta["partitions"])
    assert count > 0, f"{OFFSETS_TOPIC} has no partitions: {meta}"
    return java_hash(group) % count


# ---------------------------------------------------------------------------
# the story
# ---------------------------------------------------------------------------

def test_transactional_offsets_are_pending_until_their_marker(broker_factory):
    # These producers have no coordinator (the markers are sent by hand): with the
    # leaders' verification on, their commits would be refused (see the next test).
    broker = broker_factory(extra_args=["--transaction-partition-verification-enable", "false"])
    topic, group = "txo", "txo-group"
    create_topic(broker.bootstrap, topic, 2)
    b = broker.bootstrap
    # Producer 1000 commits partitions 0 and 1 in its transaction (v2): pending.
    assert txn_offset_commit(b, 2, "tx-a", group, 1000, 0, topic, {0: 10, 1: 11}) == \
        {0: ERR_NONE, 1: ERR_NONE}
    partition = offsets_partition_of(b, group)
    assert fetch_committed(b, group, topic, [0, 1], False) == \
        {0: (-1, ERR_NONE), 1: (-1, ERR_NONE)}, "a pending offset is not answered"
    assert fetch_committed(b, group, topic, [0, 1], True) == \
        {0: (-1, ERR_UNSTABLE_OFFSET_COMMIT), 1: (-1, ERR_UNSTABLE_OFFSET_COMMIT)}
    # The transaction coordinator's commit marker in the group's offsets partition.
    assert write_txn_marker(b, 1000, 0, True, partition) == ERR_NONE
    committed = {0: (10, ERR_NONE), 1: (11, ERR_NONE)}
    assert fetch_committed(b, group, topic, [0, 1], True) == committed

    # Producer 2000 (v3, no member fields) commits partition 0, then aborts.
    assert txn_offset_commit(b, 3, "tx-b", group, 2000, 0, topic, {0: 20}) == {0: ERR_NONE}
    assert fetch_committed(b, group, topic, [0, 1], True) == \
        {0: (-1, ERR_UNSTABLE_OFFSET_COMMIT), 1: (11, ERR_NONE)}
    assert fetch_committed(b, group, topic, [0, 1], False) == committed
    assert write_txn_marker(b, 2000, 0, False, partition) == ERR_NONE
    assert fetch_committed(b, group, topic, [0, 1], True) == committed, "an abort drops it"

    # v0 (no leader epoch) commits like v2; aborted too.
    assert txn_offset_commit(b, 0, "tx-c", group, 2500, 0, topic, {1: 25}) == {1: ERR_NONE}
    assert write_txn_marker(b, 2500, 0, False, partition) == ERR_NONE

    # v3 naming a generation of a group that does not exist: ILLEGAL_GENERATION.
    assert txn_offset_commit(b, 3, "tx-d", "txo-none", 2600, 0, topic, {0: 1},
                             generation=3, member="ghost") == {0: ERR_ILLEGAL_GENERATION}

    # A fenced producer epoch is refused; the current one's transaction aborts.
    assert txn_offset_commit(b, 2, "tx-e", group, 3000, 5, topic, {0: 30}) == {0: ERR_NONE}
    assert txn_offset_commit(b, 2, "tx-e", group, 3000, 4, topic, {0: 31}) == \
        {0: ERR_INVALID_PRODUCER_EPOCH}
    assert write_txn_marker(b, 3000, 5, False, partition) == ERR_NONE
    assert fetch_committed(b, group, topic, [0, 1], True) == committed

    # Producer 4000 leaves a transaction open across the restart.
    assert txn_offset_commit(b, 3, "tx-f", group, 4000, 0, topic, {1: 44}) == {1: ERR_NONE}

    broker.restart()
    b = broker.bootstrap
    # The replay: the committed transaction's offsets, none of the aborted ones, and the
    # open transaction still pending.
    assert fetch_committed(b, group, topic, [0, 1], False) == committed
    assert fetch_committed(b, group, topic, [0, 1], True) == \
        {0: (10, ERR_NONE), 1: (-1, ERR_UNSTABLE_OFFSET_COMMIT)}
    # Its marker, after the restart, commits it.
    assert write_txn_marker(b, 4000, 0, True, partition) == ERR_NONE
    assert fetch_committed(b, group, topic, [0, 1], True) == \
        {0: (10, ERR_NONE), 1: (44, ERR_NONE)}
    broker.assert_alive()


def end_txn_v5(bootstrap: str, txn_id: str, pid: int, epoch: int,
               commit: bool) -> tuple[int, int, int]:
    """EndTxn v5 (transaction version 2) -> (error code, producer id, epoch to go on with)."""
    body = (W.compact_string(txn_id) + W.i64(pid) + W.i16(epoch) + W.i8(1 if commit else 0)
            + W.tags())
    r = W.flex_roundtrip(bootstrap, 26, 5, body)
    r.i32()  # throttle
    out = r.i16(), r.i64(), r.i16()
    r.skip_tags()
    assert r.remaining() == 0, f"{r.remaining()} trailing bytes"
    return out


def test_offsets_join_a_transaction_only_through_its_coordinator(broker):
    """Before writing a transaction's offsets, the group's offsets partition checks with
    the transaction coordinator (Kafka's verification): a producer that never added the
    group (AddOffsetsToTxn) is refused — INVALID_TXN_STATE, TRANSACTION_ABORTABLE from
    v4 — and nothing is pending; from v5 (transaction version 2, no AddOffsetsToTxn) the
    check adds the partition to the transaction, whose end then commits the offsets."""
    from test_transactions import find_txn_coordinator, raw_init

    b = broker.bootstrap
    topic, group, txn_id = "txo-verify", "txo-verify-group", "txo-verify-tx"
    create_topic(b, topic, 1)
    find_txn_coordinator(b, txn_id)
    pid, epoch = raw_init(b, txn_id)
    assert txn_offset_commit(b, 3, txn_id, group, pid, epoch, topic, {0: 7}) == {0: 48}
    assert txn_offset_commit(b, 4, txn_id, group, pid, epoch, topic, {0: 7}) == {0: 120}
    assert fetch_committed(b, group, topic, [0], True) == {0: (-1, ERR_NONE)}, \
        "nothing pending"
    # A stale epoch is fenced before anything joins the transaction.
    assert txn_offset_commit(b, 5, txn_id, group, pid, epoch - 1, topic, {0: 7}) == \
        {0: ERR_INVALID_PRODUCER_EPOCH}
    assert txn_offset_commit(b, 5, txn_id, group, pid, epoch, topic, {0: 7}) == {0: ERR_NONE}
    assert fetch_committed(b, group, topic, [0], True) == \
        {0: (-1, ERR_UNSTABLE_OFFSET_COMMIT)}
    code, next_pid, next_epoch = end_txn_v5(b, txn_id, pid, epoch, True)
    assert (code, next_pid, next_epoch) == (ERR_NONE, pid, epoch + 1), \
        "version 2 ends under the next epoch"
    stable = wait_until(
        lambda: (lambda r: r if r[0][1] == ERR_NONE else None)(
            fetch_committed(b, group, topic, [0], True)),
        30, "the commit marker in the group's offsets partition")
    assert stable == {0: (7, ERR_NONE)}
    # The next transaction, under the new epoch; the old one is fenced.
    assert txn_offset_commit(b, 5, txn_id, group, pid, epoch, topic, {0: 9}) == \
        {0: ERR_INVALID_PRODUCER_EPOCH}
    assert txn_offset_commit(b, 5, txn_id, group, pid, next_epoch, topic, {0: 9}) == \
        {0: ERR_NONE}
    assert end_txn_v5(b, txn_id, pid, next_epoch, False) == (ERR_NONE, pid, next_epoch + 1)
    wait_until(lambda: fetch_committed(b, group, topic, [0], True) == {0: (7, ERR_NONE)},
               30, "the abort marker drops the pending offset")
    broker.assert_alive()


def test_a_transactional_producer_commits_a_consumers_offsets(broker):
    """librdkafka's consume-transform-produce loop (exactly-once): the offsets sent to
    the transaction (AddOffsetsToTxn, then TxnOffsetCommit v3 with the consumer's group
    metadata) are pending until the transaction coordinator's marker, committed by a
    commit and gone after an abort."""
    from confluent_kafka import Consumer, Producer, TopicPartition

    b = broker.bootstrap
    src, dst, group = "txo-in", "txo-out", "txo-eos"
    create_topic(b, src, 1)
    create_topic(b, dst, 1)
    plain = Producer({"bootstrap.servers": b})
    for i in range(10):
        plain.produce(src, f"v{i}".encode(), partition=0)
    assert plain.flush(30) == 0
    consumer = Consumer({"bootstrap.servers": b, "group.id": group,
                         "enable.auto.commit": False, "auto.offset.reset": "earliest",
                         "isolation.level": "read_committed"})
    producer = Producer({"bootstrap.servers": b, "transactional.id": "txo-eos-tx",
                         "transaction.timeout.ms": 60_000})
    try:
        consumer.subscribe([src])
        got = []
        deadline = time.monotonic() + 60
        while len(got) < 10:
            assert time.monotonic() < deadline, f"consumed {len(got)} of 10"
            m = consumer.poll(0.5)
            if m is not None and m.error() is None:
                got.append(m)
        producer.init_transactions(30)

        producer.begin_transaction()
        for m in got[:5]:
            producer.produce(dst, m.value(), partition=0)
        producer.send_offsets_to_transaction([TopicPartition(src, 0, 5)],
                                             consumer.consumer_group_metadata(), 30)
        assert fetch_committed(b, group, src, [0], True) == \
            {0: (-1, ERR_UNSTABLE_OFFSET_COMMIT)}, "pending until the transaction ends"
        assert fetch_committed(b, group, src, [0], False) == {0: (-1, ERR_NONE)}
        producer.commit_transaction(30)
        # EndTxn is answered once the commit is decided, before the markers are written
        # (as Kafka's coordinator does): until the marker in the group's partition,
        # require_stable keeps answering UNSTABLE_OFFSET_COMMIT — what KIP-447 is for.
        stable = wait_until(
            lambda: (lambda r: r if r[0][1] == ERR_NONE else None)(
                fetch_committed(b, group, src, [0], True)),
            30, "the commit marker in the group's offsets partition")
        assert stable == {0: (5, ERR_NONE)}

        producer.begin_transaction()
        for m in got[5:]:
            producer.produce(dst, m.value(), partition=0)
        producer.send_offsets_to_transaction([TopicPartition(src, 0, 10)],
                                             consumer.consumer_group_metadata(), 30)
        producer.abort_transaction(30)
        stable = wait_until(
            lambda: (lambda r: r if r[0][1] == ERR_NONE else None)(
                fetch_committed(b, group, src, [0], True)),
            30, "the abort marker in the group's offsets partition")
        assert stable == {0: (5, ERR_NONE)}, "an aborted transaction's offsets are never committed"
        # What the consumer itself reads back (OffsetFetch from librdkafka).
        committed = consumer.committed([TopicPartition(src, 0)], timeout=30)
        assert [(tp.partition, tp.offset) for tp in committed] == [(0, 5)]
    finally:
        consumer.close()
    broker.assert_alive()
