"""Transactions on three brokers under a seeded random schedule of faults.

Three transactional producers (librdkafka through confluent-kafka, one transactional.id
each) run transactions back to back, each writing a known set of records to partitions
of one or two topics (replication factor 3, min.insync.replicas 2); about half of them
consume records from a source partition of their own first and send the consumer's
position with ``send_offsets_to_transaction`` (consume-transform-produce, exactly once).
Each producer commits or aborts at random and writes down what it meant and what it got:
a transaction is *committed* when ``commit_transaction`` returned, *aborted* when it
never asked for a commit, and *unknown* when the commit raised (its records may be
there or not, but whole or not at all). Two read_committed consumers read every
partition throughout.

Meanwhile one broker at a time is SIGKILLed and restarted, SIGSTOPped and resumed, cut
off the network (its link down) or cut off from the other brokers only (still reachable
by the clients: a zombie leader or coordinator that does not know it yet). The
network faults need network namespaces (netns.py, root); without them only kills and
pauses run, on loopback.

Once everything is healed and every transaction has ended, every partition is read to
its end with read_committed again, and:

- no record of an aborted transaction is read, by any consumer at any time;
- every record of a committed transaction is read exactly once, where it was sent, in
  the order its producer wrote it;
- every transaction is read whole or not at all (each record carries its transaction's
  name, its index and the transaction's record count), an unknown one included, and the
  same by every consumer;
- the offsets of each producer's consumer group are those of its last transaction that
  committed, and the source ranges of the committed transactions follow one another with
  no gap and no overlap (what the producer resumes from after an abort or an unknown
  outcome is the group's committed offset, so a wrong one would show as either). An
  answer below the producer's own last commit is stale and asked again: a coordinator
  cut off from the other brokers answers from what it held then until it learns it was
  replaced (Kafka's does too); how many such answers came is printed.

What is reproducible: the seed (printed; ``CORELOG_TXN_FAULT_SEED`` sets it) decides the
faults, their victims (by role) and durations, and each producer's choices; the timing
of the clients and brokers against them is not. ``CORELOG_TXN_FAULT_SECONDS`` sets how
long faults are applied (default 50). ``CORELOG_TXN_FAULT_DEBUG`` turns on librdkafka's
debug contexts (``eos,cgrp,broker``, say) for the producers and their consumers, on
stderr as they happen, to tell what the clients did from what the brokers answered
(``CORELOG_IT_KEEP=1`` keeps the brokers' logs)."""

from __future__ import annotations

import gc
import os
import random
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
import traceback
from collections import Counter, defaultdict
from dataclasses import dataclass

import pytest
from confluent_kafka import (OFFSET_INVALID, Consumer, KafkaError, KafkaException, Producer,
                             TopicPartition)
from confluent_kafka.admin import AdminClient

from launcher import bootstrap, wait_until
from netns import can_make_namespaces, namespaced_cluster
from test_replication import FAST, create
from test_transactions import ABORT_CHECK_ARGS, coordinator_of

SEED = os.environ.get("CORELOG_TXN_FAULT_SEED")
FAULT_SECONDS = float(os.environ.get("CORELOG_TXN_FAULT_SECONDS", "50"))
DEBUG = os.environ.get("CORELOG_TXN_FAULT_DEBUG")

TOPICS = {"tf-a": 4, "tf-b": 2}
SOURCE = "tf-src"  # partition k is producer k's input
PRODUCERS = 3
SOURCE_RECORDS = 3000
CONSUMERS = 2
# Fewer partitions of the internal topics than Kafka's 50: less to move on every fault,
# and the coordinators of the three transactional ids and groups share brokers.
BROKER_ARGS = FAST + ABORT_CHECK_ARGS + ["--transaction-state-log-num-partitions", "6",
                                         "--offsets-topic-partitions", "6"]
# Short enough that a fault sometimes outlasts a transaction and its coordinator aborts
# it (the producer is fenced then), long enough that most transactions get through.
TXN_TIMEOUT_MS = 10_000
CALL_TIMEOUT = 10.0


@dataclass
class Txn:
    name: str  # p<producer>.<seq>
    producer: int
    seq: int
    placement: list[tuple[str, int]]  # (topic, partition) of record i
    intent: str  # "commit" or "abort"
    source: tuple[int, int] | None = None  # source offsets [start, end) sent to the txn
    outcome: str = "open"  # committed, aborted, unknown
    error: str = ""
    ended: float = 0.0  # wall clock, to find it in the brokers' logs
    rewound_to: int | None = None  # the group's offset fetched after it ended (not committed)

    def describe(self) -> str:
        ended = time.strftime("%H:%M:%S", time.gmtime(self.ended))
        return (f"{self.name} {self.intent}->{self.outcome} source={self.source} "
                f"rewound_to={self.rewound_to} ended={ended}.{int(self.ended * 1000) % 1000:03d}Z"
                f" {self.error}")

    def value(self, i: int) -> bytes:
        return f"{self.name}:{i}:{len(self.placement)}".encode()


def parse(value: bytes) -> tuple[str, int, int]:
    name, i, n = value.decode().split(":")
    return name, int(i), int(n)


def all_partitions() -> list[tuple[str, int]]:
    return [(t, p) for t, n in TOPICS.items() for p in range(n)]


class TxnProducer(threading.Thread):
    """One transactional id's application: transactions back to back until told to
    stop, each ended by a commit or an abort, and errors handled as librdkafka asks an
    application to (a retriable one retried, an abortable one aborted, a fatal one or a
    failed abort answered by a new producer instance, whose init_transactions fences
    the old one and ends its transaction)."""

    def __init__(self, k: int, boot: str, seed: str, ledger: list[Txn], stop: threading.Event):
        super().__init__(name=f"txn-producer-{k}", daemon=True)
        self.k, self.boot, self.ledger, self.stop = k, boot, ledger, stop
        self.rng = random.Random(f"{seed}/producer{k}")
        self.tid = f"tf-txn-{k}"
        self.group = f"tf-eos-{k}"
        self.errors: Counter[str] = Counter()
        self.instances = 0
        self.failure: BaseException | None = None
        self.pos: int | None = None  # next source offset to process; None: ask the group
        # Where this producer's last successful commit left its group: an answer of the
        # group's offset below it is stale (see rewind).
        self.known = 0
        self.stale_reads: list[str] = []

    # -- the producer --------------------------------------------------------
    def new_producer(self) -> Producer:
        """A new instance, initialized (retried until it is: the cluster may be in the
        middle of a fault)."""
        deadline = time.monotonic() + 120
        while True:
            p = Producer({"bootstrap.servers": self.boot, "transactional.id": self.tid,
                          "transaction.timeout.ms": TXN_TIMEOUT_MS,
                          "message.timeout.ms": TXN_TIMEOUT_MS - 1000,
                          "request.timeout.ms": 5000, "socket.timeout.ms": 5000,
                          # librdkafka's send_offsets_to_transaction waits without a
                          # limit for a group coordinator it had cached on a broker
                          # that a Metadata answer then left out (a fenced broker;
                          # Kafka leaves those out too) and that it decommissioned:
                          # until some other broker connection changes state
                          # (librdkafka issue 5511). Closing idle connections makes
                          # such changes every few seconds.
                          "connections.max.idle.ms": 5000,
                          "linger.ms": 2, "error_cb": self.on_error,
                          **({"debug": DEBUG} if DEBUG else {})})
            self.instances += 1
            while True:
                try:
                    p.init_transactions(CALL_TIMEOUT)
                    return p
                except KafkaException as e:
                    self.note("init", e)
                    if time.monotonic() > deadline:
                        raise
                    if not e.args[0].retriable():
                        break  # a fatal error: this instance is done, make another
            del p

    def on_error(self, err: KafkaError) -> None:
        # Transport errors while brokers are down are expected; counted for the report.
        self.errors[f"cb {err.name()}"] += 1

    def note(self, what: str, e: KafkaException) -> str:
        err = e.args[0]
        kind = "fatal" if err.fatal() else "abortable" if err.txn_requires_abort() else (
            "retriable" if err.retriable() else "other")
        self.errors[f"{what} {err.name()} ({kind})"] += 1
        return f"{what}: {err.name()} ({kind}) {err.str()}"

    def abort_or_replace(self, p: Producer) -> Producer:
        """After a failed call: abort the transaction if librdkafka lets us, else make a
        new instance (which aborts it, or completes a commit the coordinator decided)."""
        for _ in range(3):
            try:
                p.abort_transaction(CALL_TIMEOUT)
                return p
            except KafkaException as e:
                self.note("abort", e)
                if not e.args[0].retriable():
                    break
        return self.replace(p)

    def replace(self, p: Producer) -> Producer:
        try:
            p.purge()
        except (KafkaException, RuntimeError):
            pass
        del p
        return self.new_producer()

    # -- the source ----------------------------------------------------------
    def rewind(self, consumer: Consumer, after: Txn | None = None) -> None:
        """Resumes the source at the group's committed offset, as an application does
        after an abort (or a restart). require_stable (read_committed) waits for the
        marker of the transaction that just ended, so a pending offset is not read.

        An answer below the offset of this producer's own last successful commit is
        stale: a group coordinator cut off from the other brokers, fenced and replaced
        but not knowing it yet, answers from what it held when it was cut off (as
        Kafka's coordinator would). It is counted and asked again, as long as such a
        coordinator can take to find out; one still stale after that is used, and the
        processing it repeats fails the checks."""
        deadline = time.monotonic() + 15
        while True:
            try:
                tp, = consumer.committed([TopicPartition(SOURCE, self.k)],
                                         timeout=CALL_TIMEOUT)
            except KafkaException as e:
                self.note("committed", e)
                self.pos = None  # no consume-transform-produce until we know where we are
                return
            if max(tp.offset, 0) >= self.known or time.monotonic() > deadline:
                break
            self.stale_reads.append(f"{time.strftime('%H:%M:%S', time.gmtime())}Z: "
                                    f"{tp.offset} after a commit of {self.known}")
            time.sleep(0.2)
        self.pos = max(tp.offset, 0)
        if after is not None:
            after.rewound_to = tp.offset
        consumer.assign([TopicPartition(SOURCE, self.k, self.pos)])

    def take(self, consumer: Consumer, n: int) -> int:
        """Up to n records of the source from self.pos on, in order; how many."""
        got = 0
        for m in consumer.consume(n, timeout=1.0):
            if m.error():
                continue
            if m.offset() < self.pos + got:
                continue  # fetched before the last rewind
            if m.offset() > self.pos + got:
                # A gap (never expected): start over where this producer stands.
                consumer.assign([TopicPartition(SOURCE, self.k, self.pos)])
                return 0
            got += 1
        return got

    # -- the transactions ----------------------------------------------------
    def plan(self, seq: int) -> Txn:
        topics = self.rng.choice([["tf-a"], ["tf-b"], ["tf-a", "tf-b"]])
        parts = [(t, p) for t in topics for p in range(TOPICS[t])]
        n = self.rng.randint(2, 10)
        return Txn(f"p{self.k}.{seq}", self.k, seq, [self.rng.choice(parts) for _ in range(n)],
                   "commit" if self.rng.random() < 0.7 else "abort")

    def run(self) -> None:
        try:
            self.loop()
        except BaseException as e:  # reported by the test, with the ledger so far
            self.failure = e

    def loop(self) -> None:
        consumer = Consumer({"bootstrap.servers": self.boot, "group.id": self.group,
                             "isolation.level": "read_committed",
                             "enable.auto.commit": False, "auto.offset.reset": "earliest",
                             **({"debug": DEBUG} if DEBUG else {})})
        p = self.new_producer()
        self.rewind(consumer)
        seq = 0
        while not self.stop.is_set():
            seq += 1
            txn = self.plan(seq)
            consume = self.rng.random() < 0.5
            if consume and self.pos is None:
                self.rewind(consumer)
            if consume and self.pos is not None:
                # One output record per input record: as many as the source gave.
                got = self.take(consumer, len(txn.placement))
                if got:
                    txn.placement = txn.placement[:got]
                    txn.source = (self.pos, self.pos + got)
            self.ledger.append(txn)
            try:
                p.begin_transaction()
                for i, (topic, part) in enumerate(txn.placement):
                    p.produce(topic, value=txn.value(i), partition=part)
                if txn.source:
                    p.send_offsets_to_transaction(
                        [TopicPartition(SOURCE, self.k, txn.source[1])],
                        consumer.consumer_group_metadata(), CALL_TIMEOUT)
            except KafkaException as e:
                # Never asked to commit: aborted, whatever the abort itself does.
                txn.outcome, txn.error = "aborted", self.note("before end", e)
                txn.ended = time.time()
                p = self.abort_or_replace(p)
                if txn.source:
                    self.rewind(consumer, txn)
                continue
            if txn.intent == "abort":
                txn.outcome = "aborted"
                p = self.abort_or_replace(p)
                txn.ended = time.time()
                if txn.source:
                    self.rewind(consumer, txn)
                continue
            txn.outcome = "unknown"
            try:
                for attempt in range(3):
                    try:
                        p.commit_transaction(CALL_TIMEOUT)
                        break
                    except KafkaException as e:
                        # librdkafka: a retriable error (a timeout) is retried with the
                        # same call; the commit may be decided already.
                        if not e.args[0].retriable() or attempt == 2:
                            raise
                        self.note("commit (retried)", e)
                txn.outcome, txn.ended = "committed", time.time()
                if txn.source:
                    self.pos = self.known = txn.source[1]
            except KafkaException as e:
                txn.error, txn.ended = self.note("commit", e), time.time()
                p = self.abort_or_replace(p)
                if txn.source:
                    self.rewind(consumer, txn)
            time.sleep(self.rng.uniform(0, 0.03))
        consumer.close()


class Reader:
    """A read_committed consumer of every partition of TOPICS from the start: what it
    read, at which offsets, and how far it has seen each partition's end."""

    def __init__(self, boot: str, name: str):
        self.name = name
        self.records: list[tuple[bytes, str, int, int]] = []
        self.eof: dict[tuple[str, int], int] = {}
        self.errors: Counter[str] = Counter()
        self.consumer = Consumer({
            "bootstrap.servers": boot, "group.id": f"tf-reader-{name}",
            "isolation.level": "read_committed", "enable.auto.commit": False,
            "enable.partition.eof": True, "fetch.wait.max.ms": 100,
            # An offset out of range would be a reset and a silent re-read: an error
            # instead, which stops the partition and shows as never reaching its end.
            "auto.offset.reset": "error",
            "error_cb": lambda err: self.errors.update([f"cb {err.name()}"])})
        self.consumer.assign([TopicPartition(t, p, 0) for t, p in all_partitions()])

    def poll(self) -> None:
        for m in self.consumer.consume(500, timeout=0.5):
            err = m.error()
            if err is None:
                self.records.append((m.value(), m.topic(), m.partition(), m.offset()))
            elif err.code() == KafkaError._PARTITION_EOF:
                self.eof[(m.topic(), m.partition())] = m.offset()
            else:
                self.errors[err.name()] += 1

    def caught_up(self, ends: dict[tuple[str, int], int]) -> bool:
        return all(self.eof.get(tp, -1) >= end for tp, end in ends.items())

    def read_to(self, ends: dict[tuple[str, int], int], timeout: float) -> None:
        deadline = time.monotonic() + timeout
        while not self.caught_up(ends):
            assert time.monotonic() < deadline, (
                f"reader {self.name} did not reach the ends {ends} in {timeout}s: at "
                f"{self.eof}; errors {dict(self.errors)}")
            self.poll()


class LiveReader(threading.Thread):
    def __init__(self, boot: str, name: str):
        super().__init__(name=f"reader-{name}", daemon=True)
        self.reader = Reader(boot, name)
        self.ends: dict[tuple[str, int], int] | None = None  # set at the end: read to them
        self.failure: BaseException | None = None

    def run(self) -> None:
        try:
            while self.ends is None:
                self.reader.poll()
            self.reader.read_to(self.ends, 60)
        except BaseException as e:
            self.failure = e
        finally:
            self.reader.consumer.close()


# ---------------------------------------------------------------------------------------
# faults
# ---------------------------------------------------------------------------------------

class Faults:
    """Applies one fault at a time to one broker and undoes it."""

    def __init__(self, net, brokers, rng: random.Random):
        self.net, self.brokers, self.rng = net, brokers, rng
        self.kinds = ["kill", "pause"] + (["cut", "isolate"] if net else [])
        self.applied: list[str] = []
        self.started = time.monotonic()

    def victim(self) -> tuple[object, str]:
        # Half the time the coordinator of a transactional id: the broker whose faults
        # the transaction protocol feels most (EndTxn, markers, the state log); else
        # any broker, a partition leader or group coordinator as it happens.
        if self.rng.random() < 0.5:
            tid = f"tf-txn-{self.rng.randrange(PRODUCERS)}"
            try:
                node = coordinator_of(self.rng.choice(self.brokers).bootstrap, tid)
                return next(b for b in self.brokers if b.node_id == node), f"coordinator of {tid}"
            except Exception:  # no answer now: any broker will do
                pass
        return self.rng.choice(self.brokers), "any"

    def one(self) -> None:
        kind = self.rng.choice(self.kinds)
        b, role = self.victim()
        hold = self.rng.uniform(0.5, 8.0)
        at = time.monotonic() - self.started
        line = f"{at:6.1f}s {kind:8} node{b.node_id} ({role}) for {hold:.1f}s"
        print(line, flush=True)
        self.applied.append(line)
        if kind == "kill":
            b.kill()
            time.sleep(hold)
            b.start()
        elif kind == "pause":
            os.kill(b.proc.pid, signal.SIGSTOP)
            try:
                time.sleep(hold)
            finally:
                os.kill(b.proc.pid, signal.SIGCONT)
        elif kind == "cut":
            self.net.cut(b.node_id)
            try:
                time.sleep(hold)
            finally:
                self.net.heal(b.node_id)
        else:
            self.net.isolate(b.node_id)
            try:
                time.sleep(hold)
            finally:
                self.net.rejoin(b.node_id)

    def heal_all(self) -> None:
        """Undoes whatever may be left (after an exception in the middle of a fault)."""
        for b in self.brokers:
            if b.is_running():
                os.kill(b.proc.pid, signal.SIGCONT)
        if self.net:
            for i in range(1, len(self.brokers) + 1):
                try:
                    self.net.heal(i)
                except Exception:
                    pass
            for i in list(self.net.isolated):
                self.net.rejoin(i)
        for b in self.brokers:
            if not b.is_running():
                b.start()


def isr_whole(admin: AdminClient) -> bool:
    """Every partition of the test's topics and of the internal ones that exist has a
    leader and every replica in its ISR."""
    try:
        md = admin.list_topics(timeout=5)
    except KafkaException:
        return False
    for name in [*TOPICS, SOURCE, "__transaction_state", "__consumer_offsets"]:
        topic = md.topics.get(name)
        if topic is None:
            continue
        for p in topic.partitions.values():
            if p.leader < 0 or sorted(p.isrs) != sorted(p.replicas):
                return False
    return True


def offsets(boot: str, isolation: str) -> dict[tuple[str, int], int]:
    """The end offset of every partition for `isolation`: the high watermark, or the last
    stable offset for read_committed."""
    c = Consumer({"bootstrap.servers": boot, "group.id": "tf-offsets",
                  "isolation.level": isolation})
    try:
        return {(t, p): c.get_watermark_offsets(TopicPartition(t, p), 10)[1]
                for t, p in all_partitions()}
    finally:
        c.close()


def no_open_transactions(boot: str) -> dict[tuple[str, int], int] | None:
    """Every partition's end offset if no transaction is open in any (each last stable
    offset at its high watermark), else None."""
    try:
        hw, lso = offsets(boot, "read_uncommitted"), offsets(boot, "read_committed")
    except KafkaException:
        return None
    return hw if hw == lso else None


def group_offset(boot: str, k: int) -> int:
    """Producer k's group's committed offset of its source partition (require_stable)."""
    c = Consumer({"bootstrap.servers": boot, "group.id": f"tf-eos-{k}",
                  "isolation.level": "read_committed", "enable.auto.commit": False})
    try:
        tp, = c.committed([TopicPartition(SOURCE, k)], timeout=30)
        return tp.offset
    finally:
        c.close()


def stacks(thread: threading.Thread) -> str:
    """Where a thread that does not finish is: its Python stack and, with gdb, the native
    stacks of this process (a librdkafka call that does not return shows there)."""
    frame = sys._current_frames().get(thread.ident)
    out = [f"--- {thread.name}:", *(traceback.format_stack(frame) if frame else ["(gone)"])]
    if shutil.which("gdb"):
        # gdb stops this process while it looks: its output goes to a file, not to a pipe
        # this process would have to read meanwhile.
        with tempfile.TemporaryFile("w+") as f:
            subprocess.run(["gdb", "-p", str(os.getpid()), "-batch", "-nx",
                            "-ex", "thread apply all bt 25"], stdout=f, stderr=f)
            f.seek(0)
            # The threads running Python code (the test's): librdkafka's own are many.
            threads = f.read().split("\nThread ")
            out.extend("\nThread " + t for t in threads if "_PyEval" in t or "Py_" in t)
    return "".join(out)


# ---------------------------------------------------------------------------------------
# checks
# ---------------------------------------------------------------------------------------

def check_reader(reader: Reader, txns: dict[str, Txn]) -> tuple[set[str], list[str]]:
    """The transactions `reader` read, and what it got wrong."""
    problems: list[str] = []
    seen: dict[str, list[tuple[int, str, int, int]]] = defaultdict(list)
    for value, topic, part, offset in reader.records:
        name, i, n = parse(value)
        if name not in txns:
            problems.append(f"{reader.name}: a record of no transaction: {value!r}")
            continue
        seen[name].append((i, topic, part, offset))
    for name, recs in seen.items():
        t = txns[name]
        if t.outcome == "aborted":
            problems.append(f"{reader.name}: read {len(recs)} records of aborted {name} "
                            f"({t.intent}, {t.error or 'no error'}) at {sorted(recs)[:4]}")
        indexes = sorted(i for i, *_ in recs)
        if indexes != list(range(len(t.placement))):
            dups = [i for i, c in Counter(indexes).items() if c > 1]
            problems.append(
                f"{reader.name}: {name} ({t.outcome}) read as records {indexes} of "
                f"{len(t.placement)}" + (f", {dups} more than once at "
                                         f"{[r for r in recs if r[0] in dups]}" if dups else ""))
        for i, topic, part, offset in recs:
            if i < len(t.placement) and t.placement[i] != (topic, part):
                problems.append(f"{reader.name}: {name}[{i}] sent to {t.placement[i]}, read "
                                f"from {topic}-{part}@{offset}")
    for t in txns.values():
        if t.outcome == "committed" and t.name not in seen:
            problems.append(f"{reader.name}: committed {t.name} not read ({len(t.placement)} "
                            f"records to {sorted(set(t.placement))})")
    # A producer's records in a partition come in the order it wrote them: its
    # transactions one after another, each one's records in index order.
    by_partition: dict[tuple[str, int], list[tuple[int, int, int, str]]] = defaultdict(list)
    for value, topic, part, offset in reader.records:
        name, i, _ = parse(value)
        if name in txns:
            by_partition[(topic, part)].append((offset, txns[name].producer, txns[name].seq, i))
    for tp, recs in by_partition.items():
        last: dict[int, tuple[int, int, int]] = {}
        for offset, producer, seq, i in sorted(recs):
            if producer in last and last[producer][:2] >= (seq, i):
                problems.append(f"{reader.name}: {tp[0]}-{tp[1]}@{offset} holds p{producer}."
                                f"{seq}[{i}] after p{producer}.{last[producer][0]}"
                                f"[{last[producer][1]}] (at {last[producer][2]})")
            last[producer] = (seq, i, offset)
    return set(seen), problems


def check_offsets(txns: list[Txn], visible: set[str], committed: dict[int, int]) -> list[str]:
    """The source ranges of each producer's transactions that committed follow one
    another from 0, and its group's committed offset is where the last one ended."""
    problems = []
    for k in range(PRODUCERS):
        expected = 0
        for t in sorted((t for t in txns if t.producer == k and t.source), key=lambda t: t.seq):
            if t.name not in visible:
                continue
            if t.source[0] != expected:
                around = [u.describe() + (" [read]" if u.name in visible else "")
                          for u in txns if u.producer == k and u.source
                          and t.seq - 8 <= u.seq <= t.seq]
                problems.append(f"p{k}: {t.name} ({t.outcome}) processed source offsets "
                                f"{t.source}, the committed transactions before it ended at "
                                f"{expected}; its transactions with offsets before it:\n    "
                                + "\n    ".join(around))
            expected = t.source[1]
        # No committed transaction with offsets: the group has none (OFFSET_INVALID).
        want = expected if expected else OFFSET_INVALID
        if committed[k] != want:
            problems.append(f"p{k}: group tf-eos-{k} committed offset {committed[k]}, the "
                            f"last committed transaction's position {want}")
    return problems


# ---------------------------------------------------------------------------------------
# the test
# ---------------------------------------------------------------------------------------

@pytest.fixture
def txn_cluster(broker_factory):
    """(net, brokers): three brokers in namespaces of their own if this process can make
    them (net then cuts their links), else on loopback (net None)."""
    if can_make_namespaces():
        with namespaced_cluster(3, BROKER_ARGS, pool=broker_factory) as (net, brokers):
            yield net, brokers
            # Clients left in reference cycles (a callback that refers to its owner) go
            # now, while the addresses they know still lead to the brokers: once the
            # namespaces are gone, a reconnect would reach whatever routes them then.
            gc.collect()
    else:
        yield None, broker_factory.cluster(voters=3, extra_args=BROKER_ARGS)


def test_transactions_under_random_faults(txn_cluster):
    net, brokers = txn_cluster
    seed = SEED or str(random.randrange(1 << 32))
    print(f"\nseed {seed} (rerun with CORELOG_TXN_FAULT_SEED={seed}); faults for "
          f"{FAULT_SECONDS:.0f}s: {'kill, pause, cut, isolate' if net else 'kill, pause'}",
          flush=True)
    boot = bootstrap(brokers)
    for topic, n in {**TOPICS, SOURCE: PRODUCERS}.items():
        create(brokers, topic, n, 3, {"min.insync.replicas": "2"})
    loader = Producer({"bootstrap.servers": boot, "acks": "all", "enable.idempotence": True,
                       "linger.ms": 5})
    for k in range(PRODUCERS):
        for i in range(SOURCE_RECORDS):
            loader.produce(SOURCE, value=f"src{k}-{i}".encode(), partition=k)
    assert loader.flush(60) == 0
    admin = AdminClient({"bootstrap.servers": boot})
    wait_until(lambda: isr_whole(admin), 30, "every ISR whole before the faults", 0.5)

    ledger: list[Txn] = []
    stop = threading.Event()
    producers = [TxnProducer(k, boot, seed, ledger, stop) for k in range(PRODUCERS)]
    readers = [LiveReader(boot, f"live{i}") for i in range(CONSUMERS)]
    faults = Faults(net, brokers, random.Random(f"{seed}/faults"))
    for t in [*producers, *readers]:
        t.start()
    try:
        wait_until(lambda: sum(t.outcome == "committed" for t in ledger) >= PRODUCERS * 3, 60,
                   "the producers commit before the faults")
        end = time.monotonic() + FAULT_SECONDS
        while time.monotonic() < end:
            time.sleep(faults.rng.uniform(0.5, 2.5))
            faults.one()
            # The next fault waits until the cluster has recovered from this one (every
            # replica back in every ISR), so that one broker at a time is ever missing:
            # with min.insync.replicas 2, nothing acknowledged may then be lost.
            try:
                wait_until(lambda: isr_whole(admin), 20, "every ISR whole again", 0.5)
            except AssertionError as e:
                print(f"  {e}; going on", flush=True)
    finally:
        faults.heal_all()
    wait_until(lambda: isr_whole(admin), 60, "every ISR whole after the faults", 0.5)

    stop.set()
    for t in producers:
        t.join(90)
        assert not t.is_alive(), (f"{t.name} did not finish its last transaction (seed "
                                  f"{seed})\n{stacks(t)}")
        if t.failure:
            raise AssertionError(f"{t.name} failed") from t.failure
    # Every transaction has ended (committed, aborted, or ended by a new instance's
    # init_transactions): every partition's last stable offset reaches its high
    # watermark, or a transaction hangs.
    ends = wait_until(lambda: no_open_transactions(boot), 30,
                      lambda: f"no open transaction (high watermarks "
                              f"{offsets(boot, 'read_uncommitted')}, last stable offsets "
                              f"{offsets(boot, 'read_committed')})", 0.5)
    for t in readers:
        t.ends = ends
    final = Reader(boot, "final")
    try:
        final.read_to(ends, 60)
    finally:
        final.consumer.close()
    for t in readers:
        t.join(90)
        assert not t.is_alive(), f"{t.name} did not reach the end (seed {seed})"
        if t.failure:
            raise AssertionError(f"{t.name} failed") from t.failure
    committed_offsets = {k: group_offset(boot, k) for k in range(PRODUCERS)}

    txns = {t.name: t for t in ledger}
    outcomes = Counter(t.outcome for t in ledger)
    problems: list[str] = []
    visible, final_problems = check_reader(final, txns)
    problems += final_problems
    for t in readers:
        seen, wrong = check_reader(t.reader, txns)
        problems += wrong
        if seen != visible:
            problems.append(f"{t.reader.name} read transactions the final read did not: "
                            f"{sorted(seen - visible)[:5]}, and missed "
                            f"{sorted(visible - seen)[:5]}")
    problems += check_offsets(ledger, visible, committed_offsets)

    unknown = [t for t in ledger if t.outcome == "unknown"]
    ctp = [t for t in ledger if t.source and t.name in visible]
    print(f"seed {seed}: {len(faults.applied)} faults; {len(ledger)} transactions "
          f"{dict(outcomes)}, of the unknown {sum(t.name in visible for t in unknown)} "
          f"committed; {len(ctp)} committed with offsets; {len(final.records)} records "
          f"read; group offsets {committed_offsets}; producer instances "
          f"{[p.instances for p in producers]}")
    for p in producers:
        print(f"  {p.name} errors: {dict(p.errors.most_common(8))}")
        if p.stale_reads:
            print(f"  {p.name}: {len(p.stale_reads)} stale answers of its group's offset, "
                  f"asked again: {p.stale_reads[:3]}")
    for t in unknown:
        print(f"  unknown {t.name} ({'committed' if t.name in visible else 'aborted'}): {t.error}")
    for line in faults.applied:
        print(f"  {line}")
    assert not problems, f"seed {seed}: {len(problems)} violations:\n" + "\n".join(problems[:40])
    assert faults.applied, "faults were applied"
    assert outcomes["committed"] >= PRODUCERS and outcomes["aborted"] >= 1, outcomes
    assert ctp, "some transaction committed offsets"
    for b in brokers:
        b.assert_alive()
