"""A client's abort of a transaction in the states a network partition leaves behind, in
raw frames, against any broker (corelog in test_transactions.py; Apache Kafka beside
corelog in benches/txn_abort_against_kafka.py, which is where the expected answers
below were measured: Kafka 4.4.0, single node).

The states:

- ``empty``: the transaction was begun by the client but nothing reached the coordinator
  (its AddPartitionsToTxn was lost with the coordinator cut off): EndTxn v1 (abort), as
  librdkafka sends it, on a fresh producer id;
- ``after_commit``: the same after a committed transaction (CompleteCommit);
- ``timed_out_v1``: the coordinator aborted the transaction when it timed out (the
  client's batches never got through), which fences the client's epoch; then the client's
  EndTxn v1 (abort) under its old epoch;
- ``timed_out_v2``: the same with transaction version 2 (Produce v12 adds the partition,
  EndTxn v5): the abort is answered so that the client goes on, under the epoch the
  coordinator's abort bumped to.

Each case returns what the client is told: the error code, and under version 2 the
producer id and epoch to go on with (relative: ``epoch+1``).
"""

from __future__ import annotations

import time

import kwire as W

FIND_COORDINATOR, INIT_PRODUCER_ID, ADD_PARTITIONS_TO_TXN, END_TXN = 10, 22, 24, 26

# What Apache Kafka 4.4.0 answers (benches/txn_abort_against_kafka.py measured it):
# INVALID_TXN_STATE (48) for an abort of a transaction the coordinator never saw, which
# librdkafka treats as fatal (confluentinc/librdkafka#4849: the Java producer sends no
# EndTxn when nothing was added); INVALID_PRODUCER_EPOCH (47, PRODUCER_FENCED under
# EndTxn v1) after the coordinator's own abort under version 1; under version 2 no error
# and the bumped epoch.
KAFKA_ANSWERS = {
    "empty": (48,),
    "after_commit": (48,),
    "timed_out_v1": (47,),
    "timed_out_v2": (0, "same-id", "epoch+1"),
}


def find_coordinator(bootstrap: str, txn_id: str) -> None:
    """FindCoordinator v1 of `txn_id` until one is found (Kafka creates its state log on
    the first lookup); single-node brokers only, so the coordinator is `bootstrap`."""
    body = W.string(txn_id) + W.i8(1)
    for _ in range(300):
        _, resp = W.roundtrip(bootstrap, W.request(FIND_COORDINATOR, 1, 4, body))
        r = W.Reader(resp)
        r.i32()
        if r.i16() == 0:
            return
        time.sleep(0.1)
    raise AssertionError(f"no coordinator for {txn_id}")


def init_producer_id(bootstrap: str, txn_id: str, timeout_ms: int) -> tuple[int, int]:
    """InitProducerId v1 -> (producer id, epoch)."""
    find_coordinator(bootstrap, txn_id)
    body = W.string(txn_id) + W.i32(timeout_ms)
    for _ in range(300):
        _, resp = W.roundtrip(bootstrap, W.request(INIT_PRODUCER_ID, 1, 1, body))
        r = W.Reader(resp)
        r.i32()
        code, pid, epoch = r.i16(), r.i64(), r.i16()
        if code in (14, 15, 16, 51):  # the state log is starting
            time.sleep(0.1)
            continue
        assert code == 0, f"InitProducerId: error {code}"
        return pid, epoch
    raise AssertionError("InitProducerId kept being refused")


def add_partition_v1(bootstrap: str, txn_id: str, pid: int, epoch: int, topic: str) -> int:
    """AddPartitionsToTxn v1 of partition 0 -> its error code."""
    body = (W.string(txn_id) + W.i64(pid) + W.i16(epoch)
            + W.array([W.string(topic) + W.array([W.i32(0)])]))
    for _ in range(100):
        _, resp = W.roundtrip(bootstrap, W.request(ADD_PARTITIONS_TO_TXN, 1, 2, body))
        r = W.Reader(resp)
        r.i32()
        assert r.i32() == 1 and r.string() == topic
        assert r.i32() == 1 and r.i32() == 0
        code = r.i16()
        if code != 51:
            return code
        time.sleep(0.1)
    return 51


def end_txn_v1(bootstrap: str, txn_id: str, pid: int, epoch: int, commit: bool) -> int:
    """EndTxn v1 -> its error code (CONCURRENT_TRANSACTIONS asked again)."""
    body = W.string(txn_id) + W.i64(pid) + W.i16(epoch) + W.i8(1 if commit else 0)
    for _ in range(100):
        _, resp = W.roundtrip(bootstrap, W.request(END_TXN, 1, 3, body))
        r = W.Reader(resp)
        r.i32()
        code = r.i16()
        if code != 51:
            return code
        time.sleep(0.1)
    return 51


def end_txn_v5(bootstrap: str, txn_id: str, pid: int, epoch: int,
               commit: bool) -> tuple[int, int, int]:
    """EndTxn v5 -> (error code, producer id, epoch), CONCURRENT_TRANSACTIONS asked again."""
    body = (W.compact_string(txn_id) + W.i64(pid) + W.i16(epoch) + W.i8(1 if commit else 0)
            + W.tags())
    for _ in range(100):
        r = W.flex_roundtrip(bootstrap, END_TXN, 5, body)
        r.i32()
        answer = r.i16(), r.i64(), r.i16()
        if answer[0] != 51:
            return answer
        time.sleep(0.1)
    return answer


def produce_v12(bootstrap: str, txn_id: str, topic: str, pid: int, epoch: int) -> int:
    """One transactional batch in Produce v12 to partition 0 (its leader adds the
    partition, transaction version 2) -> its error code."""
    now = int(time.time() * 1000)
    batch = W.record_batch([(None, b"cut-off", [], now)], now, producer_id=pid,
                           producer_epoch=epoch, base_sequence=0, attributes=0x10)
    part = W.i32(0) + W.uvarint(len(batch) + 1) + batch + W.tags()
    body = (W.compact_string(txn_id) + W.i16(-1) + W.i32(30_000)
            + W.c_array([W.compact_string(topic) + W.c_array([part]) + W.tags()]) + W.tags())
    r = W.flex_roundtrip(bootstrap, 0, 12, body)
    assert r.c_len() == 1 and r.c_string() == topic
    assert r.c_len() == 1 and r.i32() == 0
    return r.i16()


def abort_answers(bootstrap: str, topic: str, tag: str, txn_timeout_ms: int = 1000,
                  wait_s: float = 6.0) -> dict[str, tuple]:
    """Every case against the broker at `bootstrap` (`topic` exists, partition 0 led
    there; the broker aborts timed out transactions within `wait_s` of their timeout)."""
    out: dict[str, tuple] = {}

    txn = f"{tag}-empty"
    pid, epoch = init_producer_id(bootstrap, txn, 60_000)
    out["empty"] = (end_txn_v1(bootstrap, txn, pid, epoch, commit=False),)

    txn = f"{tag}-after-commit"
    pid, epoch = init_producer_id(bootstrap, txn, 60_000)
    assert add_partition_v1(bootstrap, txn, pid, epoch, topic) == 0
    assert end_txn_v1(bootstrap, txn, pid, epoch, commit=True) == 0
    out["after_commit"] = (end_txn_v1(bootstrap, txn, pid, epoch, commit=False),)

    txn = f"{tag}-timed-out-v1"
    pid, epoch = init_producer_id(bootstrap, txn, txn_timeout_ms)
    assert add_partition_v1(bootstrap, txn, pid, epoch, topic) == 0
    time.sleep(txn_timeout_ms / 1000 + wait_s)
    out["timed_out_v1"] = (end_txn_v1(bootstrap, txn, pid, epoch, commit=False),)

    txn = f"{tag}-timed-out-v2"
    pid, epoch = init_producer_id(bootstrap, txn, txn_timeout_ms)
    assert produce_v12(bootstrap, txn, topic, pid, epoch) == 0
    time.sleep(txn_timeout_ms / 1000 + wait_s)
    code, got_pid, got_epoch = end_txn_v5(bootstrap, txn, pid, epoch, commit=False)
    out["timed_out_v2"] = (code, "same-id" if got_pid == pid else got_pid,
                           f"epoch+{got_epoch - epoch}" if got_epoch >= epoch else got_epoch)
    return out
