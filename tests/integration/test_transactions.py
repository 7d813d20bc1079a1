"""Transactions on one broker, with librdkafka's transactional producer and
read_committed consumers (confluent-kafka):

- a committed transaction is read whole by read_committed and read_uncommitted consumers;
  an aborted one is never read by read_committed, and read_uncommitted sees its records;
- a read_committed consumer stops at an open transaction (the last stable offset) and
  goes on once it commits; ListOffsets answers the LSO for read_committed;
- a second producer with the same transactional id fences the first (zombie fencing);
- a transaction its producer abandons is aborted by the coordinator after
  ``transaction.timeout.ms``, so the LSO moves on; the client's own abort afterwards (and
  one of a transaction the coordinator never saw) is answered as Kafka answers it;
- the coordinator's state survives a restart: a transaction committed before it is still
  committed, and an abandoned one is aborted after it;
- DescribeTransactions and ListTransactions report what the coordinator holds;
- a transactional batch opens a transaction in a partition only if the coordinator has
  the partition in the producer's transaction (KIP-890 part 1);
- a version 2 commit that overtakes its batch (the Java producer's race) is told to
  retry, and commits the batch once it is written;
- on three brokers, markers reach partitions other brokers lead, and a transaction left
  open when its coordinator is killed is aborted by the next coordinator, with
  read_committed consumers seeing exactly the committed records.
"""

from __future__ import annotations

import time
import uuid

import pytest
from confluent_kafka import Consumer, KafkaError, KafkaException, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic

import kwire as W
from launcher import wait_until

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


def end_offset(bootstrap: str, topic: str, partition: int = 0,
               isolation: str = "read_uncommitted") -> int:
    """The end offset ListOffsets (latest) gives a consumer of `isolation`: the high
    watermark, or for read_committed the last stable offset."""
    c = Consumer({"bootstrap.servers": bootstrap, "group.id": f"g-{uuid.uuid4()}",
                  "isolation.level": isolation})
    try:
        return c.get_watermark_offsets(TopicPartition(topic, partition), TIMEOUT)[1]
    finally:
        c.close()


def lso(bootstrap: str, topic: str, partition: int = 0) -> int:
    return end_offset(bootstrap, topic, partition, "read_committed")


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
    assert end_offset(broker.bootstrap, topic) == 3
    assert lso(broker.bootstrap, topic) == 1, "the open transaction holds the LSO"
    assert read_values(broker.bootstrap, topic, "read_committed", wait=2.0) == [b"before"]
    p.commit_transaction(TIMEOUT)
    # The marker follows the transaction: the LSO passes it.
    wait_until(lambda: lso(broker.bootstrap, topic) == 4, TIMEOUT, "the LSO to pass the marker")
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
    wait_until(lambda: lso(b.bootstrap, topic) == 2, 15, "the coordinator to abort the transaction")
    assert read_values(b.bootstrap, topic, "read_committed", wait=2.0) == []
    assert read_values(b.bootstrap, topic, "read_uncommitted", expect=1) == [b"abandoned"]


def test_an_abort_after_a_partition_is_answered_as_kafka_answers_it(broker_factory):
    """The states a network partition leaves a transaction in (nothing reached the
    coordinator; the coordinator aborted it when it timed out), and a client's abort then:
    answered as Apache Kafka 4.4 answers it (benches/txn_abort_against_kafka.py measured
    both side by side). Under transaction version 2 the abort of a transaction the
    coordinator already aborted is answered so that the client goes on, under the epoch the
    coordinator's abort took (one bump, not two: the client's epoch must be the last)."""
    import txn_abort_states
    b = broker_factory.start(extra_args=ABORT_CHECK_ARGS)
    create(b.bootstrap, "abort-states")
    answers = txn_abort_states.abort_answers(b.bootstrap, "abort-states", "it", wait_s=3.0)
    assert answers == txn_abort_states.KAFKA_ANSWERS


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
    wait_until(lambda: lso(b.bootstrap, topic) == 4, 20,
               "the restarted coordinator to abort the transaction")
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


def find_txn_coordinator(bootstrap: str, txn_id: str) -> None:
    """FindCoordinator (key type 1), which also creates __transaction_state."""
    wait_until(lambda: _coordinator_or_none(bootstrap, txn_id) is not None, TIMEOUT,
               f"a coordinator for {txn_id}")


def raw_init(bootstrap: str, txn_id: str) -> tuple[int, int]:
    """InitProducerId v1 for `txn_id` -> (producer id, epoch)."""
    body = W.string(txn_id) + W.i32(60_000)
    _, resp = W.roundtrip(bootstrap, W.request(22, 1, 7, body))
    r = W.Reader(resp)
    r.i32()
    code, pid, epoch = r.i16(), r.i64(), r.i16()
    assert code == 0, f"InitProducerId: error {code}"
    return pid, epoch


def raw_add_partitions(bootstrap: str, txn_id: str, pid: int, epoch: int, topic: str,
                       partitions: list[int]) -> dict[int, int]:
    """AddPartitionsToTxn v0 -> {partition: error code}."""
    body = (W.string(txn_id) + W.i64(pid) + W.i16(epoch)
            + W.array([W.string(topic) + W.array([W.i32(p) for p in partitions])]))
    _, resp = W.roundtrip(bootstrap, W.request(24, 0, 8, body))
    r = W.Reader(resp)
    r.i32()
    out = {}
    for _ in range(r.i32()):
        r.string()
        for _ in range(r.i32()):
            p = r.i32()
            out[p] = r.i16()
    return out


def raw_txn_produce(bootstrap: str, txn_id: str, topic: str, partition: int, pid: int,
                    epoch: int, seq: int = 0) -> int:
    """A transactional batch with the request's transactional id -> its error code."""
    now = int(time.time() * 1000)
    batch = W.record_batch([(None, f"{pid}-{seq}".encode(), [], now)], now, producer_id=pid,
                           producer_epoch=epoch, base_sequence=seq, attributes=0x10)
    with W.connect(bootstrap) as s:
        s.sendall(W.produce_v3(1, topic, {partition: batch}, transactional_id=txn_id))
        _, body = W.recv_response(s)
    return W.parse_produce_v3(body)[(topic, partition)]["error_code"]


def test_a_batch_opens_a_transaction_only_in_a_partition_the_coordinator_added(broker):
    """KIP-890 part 1: a partition leader appends the first transactional batch of a
    producer only once the coordinator says the partition is in its ongoing transaction,
    so no late or stray batch can leave a transaction no coordinator will end."""
    topic = "txn-verify"
    create(broker.bootstrap, topic, 2)
    find_txn_coordinator(broker.bootstrap, "txn-verify-1")
    pid, epoch = raw_init(broker.bootstrap, "txn-verify-1")
    assert raw_add_partitions(broker.bootstrap, "txn-verify-1", pid, epoch, topic, [0]) == {0: 0}
    assert raw_txn_produce(broker.bootstrap, "txn-verify-1", topic, 0, pid, epoch) == 0
    # Partition 1 was never added: INVALID_TXN_STATE (Produce v3), nothing written.
    assert raw_txn_produce(broker.bootstrap, "txn-verify-1", topic, 1, pid, epoch) == 48
    # A stale epoch: fenced (INVALID_PRODUCER_EPOCH); an id the coordinator never saw:
    # INVALID_PRODUCER_ID_MAPPING.
    assert raw_txn_produce(broker.bootstrap, "txn-verify-1", topic, 1, pid, epoch - 1) == 47
    assert raw_txn_produce(broker.bootstrap, "nobody", topic, 1, 424242, 0) == 49
    assert end_offset(broker.bootstrap, topic, 1) == 0
    assert lso(broker.bootstrap, topic) == 0, "partition 0's transaction is open"


def raw_init_v5(bootstrap: str, txn_id: str) -> tuple[int, int]:
    """InitProducerId v5 (flexible; a transaction version 2 client) -> (id, epoch)."""
    body = W.compact_string(txn_id) + W.i32(60_000) + W.i64(-1) + W.i16(-1) + W.tags()
    r = W.flex_roundtrip(bootstrap, 22, 5, body)
    r.i32()
    code, pid, epoch = r.i16(), r.i64(), r.i16()
    assert code == 0, f"InitProducerId: error {code}"
    return pid, epoch


def end_v5_body(txn_id: str, pid: int, epoch: int, commit: bool) -> bytes:
    return (W.compact_string(txn_id) + W.i64(pid) + W.i16(epoch) + W.i8(1 if commit else 0)
            + W.tags())


def parse_end_v5(r: W.Flex) -> tuple[int, int, int]:
    r.i32()
    return r.i16(), r.i64(), r.i16()


def raw_end_v5(bootstrap: str, txn_id: str, pid: int, epoch: int,
               commit: bool) -> tuple[int, int, int]:
    """EndTxn v5 (transaction version 2) -> (error code, producer id, epoch to go on with)."""
    return parse_end_v5(W.flex_roundtrip(bootstrap, 26, 5, end_v5_body(txn_id, pid, epoch, commit)))


def produce_v12_body(txn_id: str, topic: str, partition: int, pid: int, epoch: int,
                     seq: int) -> bytes:
    now = int(time.time() * 1000)
    batch = W.record_batch([(None, f"{pid}-{epoch}-{seq}".encode(), [], now)], now,
                           producer_id=pid, producer_epoch=epoch, base_sequence=seq,
                           attributes=0x10)
    part = W.i32(partition) + W.uvarint(len(batch) + 1) + batch + W.tags()
    return (W.compact_string(txn_id) + W.i16(-1) + W.i32(30_000)
            + W.c_array([W.compact_string(topic) + W.c_array([part]) + W.tags()]) + W.tags())


def parse_produce_v12(r: W.Flex, topic: str, partition: int) -> int:
    assert r.c_len() == 1 and r.c_string() == topic
    assert r.c_len() == 1 and r.i32() == partition
    return r.i16()


def raw_txn_produce_v12(bootstrap: str, txn_id: str, topic: str, partition: int, pid: int,
                        epoch: int, seq: int = 0) -> int:
    """A transactional batch in Produce v12, whose leader adds the partition to the
    transaction itself (transaction version 2) -> its error code."""
    r = W.flex_roundtrip(bootstrap, 0, 12, produce_v12_body(txn_id, topic, partition, pid,
                                                            epoch, seq))
    return parse_produce_v12(r, topic, partition)


def pipelined(s, frames: list[tuple[int, int, bytes]]) -> list[W.Flex]:
    """Sends (api key, version, body) frames on connection `s` without waiting, then
    reads their answers, in order (the broker serves them at once, answers in order)."""
    s.sendall(b"".join(W.request(k, v, i, body, header_v2=True)
                       for i, (k, v, body) in enumerate(frames)))
    out = []
    for i in range(len(frames)):
        correlation, resp = W.recv_response(s)
        assert correlation == i
        r = W.Flex(resp)
        r.skip_tags()  # response header v1
        out.append(r)
    return out


def test_a_version_2_commit_that_overtakes_its_batch_is_told_to_retry(broker):
    """The Java producer under transaction version 2 can send EndTxn before the produce
    of the batch it just appended (its sender reads "no incomplete batches" just before
    the application's send and commit). The commit is then one of a transaction nothing
    was added to yet: CONCURRENT_TRANSACTIONS, so the client sends it again once its
    batch is answered, and the record is committed (Kafka answers INVALID_TXN_STATE,
    fatal to the producer). The commit is never decided before the batch's append."""
    topic, txn_id = "txn-early-commit", "txn-early-commit-1"
    create(broker.bootstrap, topic)
    find_txn_coordinator(broker.bootstrap, txn_id)
    pid, epoch = raw_init_v5(broker.bootstrap, txn_id)
    assert raw_end_v5(broker.bootstrap, txn_id, pid, epoch, True)[0] == 51, \
        "the commit came first: CONCURRENT_TRANSACTIONS"
    assert raw_txn_produce_v12(broker.bootstrap, txn_id, topic, 0, pid, epoch) == 0
    assert raw_end_v5(broker.bootstrap, txn_id, pid, epoch, True) == (0, pid, epoch + 1)
    assert read_values(broker.bootstrap, topic, "read_committed", expect=1) == \
        [f"{pid}-{epoch}-0".encode()]
    # The next transaction's commit overtakes its batch too; the batch then fails (say)
    # and the client aborts instead: nothing of it is ever read.
    assert raw_end_v5(broker.bootstrap, txn_id, pid, epoch + 1, True)[0] == 51
    assert raw_end_v5(broker.bootstrap, txn_id, pid, epoch + 1, False) == (0, pid, epoch + 2)
    assert raw_txn_produce_v12(broker.bootstrap, txn_id, topic, 0, pid, epoch + 1, 1) in (47, 90), \
        "a batch of the aborted epoch is fenced"
    assert lso(broker.bootstrap, topic) == end_offset(broker.bootstrap, topic), "nothing open"


def test_a_commit_ahead_of_its_batch_never_ends_the_transaction_before_the_batch(broker):
    """The same race as above, with the commit sent while the last transaction's end is
    still being completed (its markers), as a producer of one-record transactions does,
    and sent before the batch's answer — ahead of the batch itself, or just behind it.
    The commit and the batch's add then both wait for that end, and the add may be
    written first: a commit decided then would write its marker before the batch is
    appended, which refuses the batch (INVALID_TXN_STATE, fatal to the Java producer,
    which a loop of one-record transactions hit now and then). A commit ends only what
    its transaction held when it arrived: it is told CONCURRENT_TRANSACTIONS, the batch
    is appended, and the commit sent again after the batch's answer commits it."""
    topic, txn_id = "txn-early-commit-2", "txn-early-commit-2"
    b = broker.bootstrap
    create(b, topic, 2)
    find_txn_coordinator(b, txn_id)
    pid, epoch = raw_init_v5(b, txn_id)
    rounds = 60
    # One connection, so that the next transaction's commit and batch leave the moment
    # the last commit is answered, while its markers are still being written.
    with W.connect(b) as s:
        for i in range(rounds):
            partition = i % 2
            end = (26, 5, end_v5_body(txn_id, pid, epoch, True))
            batch = (0, 12, produce_v12_body(txn_id, topic, partition, pid, epoch, 0))
            if i % 3 == 0:
                end_answer, produce_answer = pipelined(s, [end, batch])
            else:
                produce_answer, end_answer = pipelined(s, [batch, end])
            answers = parse_end_v5(end_answer)[0], parse_produce_v12(produce_answer, topic,
                                                                     partition)
            assert answers == (51, 0), f"round {i}: (EndTxn, Produce) answered {answers}"
            [retry] = pipelined(s, [end])
            code, pid, epoch = parse_end_v5(retry)
            assert code == 0, f"round {i}: the commit's retry answered {code}"
    values = read_values(b, topic, "read_committed", partitions=2, expect=rounds)
    assert len(values) == rounds
    wait_until(lambda: all(lso(b, topic, p) == end_offset(b, topic, p) for p in (0, 1)),
               TIMEOUT, "the last commit's markers: nothing left open")


# ---------------------------------------------------------------------------------------
# three brokers
# ---------------------------------------------------------------------------------------

FAST = ["--broker-session-timeout-ms", "3000", "--broker-heartbeat-interval-ms", "500",
        "--replica-lag-time-max-ms", "3000"] + ABORT_CHECK_ARGS


def coordinator_of(bootstrap: str, txn_id: str) -> int:
    """The node id FindCoordinator (key type 1) names for `txn_id`."""
    body = W.string(txn_id) + W.i8(1)
    _, resp = W.roundtrip(bootstrap, W.request(10, 1, 9, body))
    r = W.Reader(resp)
    r.i32()
    code, _message, node = r.i16(), r.string(), r.i32()
    assert code == 0, f"FindCoordinator: error {code}"
    return node


def test_transactions_across_a_coordinator_kill_on_three_brokers(broker_factory):
    """A replicated topic and __transaction_state (3 replicas, min ISR 2) on three
    brokers. Transactions commit and abort with markers written to partitions led by other
    brokers; then the coordinator of a transaction left open is killed: the new
    coordinator loads the state and aborts it past its timeout, the producer's next
    instance fences it, and read_committed consumers see exactly the committed records."""
    brokers = broker_factory.cluster(voters=3, extra_args=FAST)
    boot = ",".join(b.bootstrap for b in brokers)
    admin = AdminClient({"bootstrap.servers": boot})
    admin.create_topics([NewTopic("txn-r3", 6, 3, config={"min.insync.replicas": "2"})])[
        "txn-r3"].result(TIMEOUT)
    p = txn_producer(boot, "txn-r3-1", **{"transaction.timeout.ms": 4000})
    committed = []
    for round_ in range(6):
        p.begin_transaction()
        values = [f"r{round_}-{i}".encode() for i in range(24)]
        for i, v in enumerate(values):
            p.produce("txn-r3", value=v, partition=i % 6)
        if round_ % 3 == 2:
            p.flush(TIMEOUT)
            p.abort_transaction(TIMEOUT)
        else:
            p.commit_transaction(TIMEOUT)
            committed += values
    # An open transaction, then its coordinator dies.
    p.begin_transaction()
    for i in range(6):
        p.produce("txn-r3", value=f"open-{i}".encode(), partition=i)
    p.flush(TIMEOUT)
    victim_id = _coordinator_or_none(boot, "txn-r3-1")
    victim = next(b for b in brokers if b.node_id == victim_id)
    victim.kill()
    survivors = [b for b in brokers if b is not victim]
    sboot = ",".join(b.bootstrap for b in survivors)
    wait_until(lambda: _coordinator_or_none(sboot, "txn-r3-1") not in (None, victim_id), 30,
               "a new coordinator for the transactional id")
    # The new coordinator aborts the open transaction once it times out: every
    # partition's LSO moves to its high watermark.
    def settled() -> bool:
        try:
            return all(lso(sboot, "txn-r3", part) == end_offset(sboot, "txn-r3", part)
                       for part in range(6))
        except KafkaException:
            return False
    wait_until(settled, 60, "the open transaction to be aborted by the new coordinator")
    # The producer's next instance goes on (fencing the old one) on the survivors.
    again = txn_producer(sboot, "txn-r3-1")
    again.begin_transaction()
    again.produce("txn-r3", value=b"after", partition=0)
    again.commit_transaction(TIMEOUT)
    committed.append(b"after")
    victim.start()
    got = read_values(boot, "txn-r3", "read_committed", 6, expect=len(committed), wait=30)
    assert sorted(got) == sorted(committed), "read_committed holds exactly the committed records"


def _coordinator_or_none(bootstrap: str, txn_id: str) -> int | None:
    for b in bootstrap.split(","):
        try:
            return coordinator_of(b, txn_id)
        except (OSError, AssertionError, W.Closed, TimeoutError):
            continue
    return None
