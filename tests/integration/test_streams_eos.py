"""Kafka Streams with ``processing.guarantee=exactly_once_v2`` on three brokers while
each broker in turn is killed (SIGKILL) and restarted.

Streams' exactly-once rests on everything corelog's transactions provide at once: the
transaction coordinator (InitProducerId fencing, AddPartitionsToTxn, EndTxn and the
markers to partitions other brokers lead), offsets committed inside the transaction
(``sendOffsetsToTransaction``: AddOffsetsToTxn, TxnOffsetCommit with the group's
generation), read_committed fetches of the store's changelog when a task restores it,
and the consumer group protocol that hands out the tasks, all on replicated partitions
whose leaders, group coordinator and transaction coordinator move when a broker dies.

The application (``java/StreamsCounter.java``, run as a single source file on Kafka's
jars) aggregates an input topic per key into "COUNT SUM" and writes every update to an
output topic (no record cache: one output record per input record), with two stream
threads, so two transactional producers. The input is produced in phases by an
idempotent acks=all producer. Each broker in turn is killed right after the first half
of a phase, while the application works through it; the second half is written to the
two survivors (min.insync.replicas 2), the application must commit the whole phase with
the broker dead, and the broker is restarted and every ISR whole again before the next
kill. The clients use whichever transaction version the brokers offer.

What a read_committed consumer of the output sees, both while it happens and read again
at the end, must be for every key exactly the aggregates after each of the key's input
records in turn: 1, 2, 3, ... with the sums of the input's values so far. An input record
processed twice (a transaction's output kept though its offsets were not, a changelog
restored with an aborted write) shows as a repeated count or a count past the input's;
one lost shows as a gap or a final count short of it. The application must neither die,
nor lose a stream thread to an uncaught exception, nor reach the ERROR state.
"""

from __future__ import annotations

import logging
import os
import shutil
import subprocess
import threading
import time
import uuid
from pathlib import Path

import pytest
from confluent_kafka import Consumer, KafkaError, KafkaException, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic

from launcher import bootstrap, die_with_parent, wait_until
from test_replication import FAST, ProducerLog, assert_exactly_once

ROOT = Path(__file__).resolve().parents[2]
LIBS = Path(os.environ.get("KAFKA_CLI_LIBS", ROOT / ".cache" / "kafka" / "libs"))
APP = Path(__file__).resolve().parent / "java" / "StreamsCounter.java"
LOG4J = ROOT / "tools" / "kafka-cli" / "log4j2.properties"

# Transactions a dead client left open are aborted within a second of their timeout.
BROKER_ARGS = [*FAST, "--transaction-abort-timed-out-transaction-cleanup-interval-ms", "300"]
PARTITIONS = 6
KEYS = 24
PER_PHASE = 400
TIMEOUT = 30
# How long the application has to process a phase (with a broker dead) or to recover.
PHASE_S = 45


def _have_streams_jars() -> bool:
    return shutil.which(os.environ.get("JAVA", "java")) is not None and any(
        LIBS.glob("kafka-streams-*.jar"))


class StreamsApp:
    """StreamsCounter in a child JVM: its stdout lines kept as they come, its log
    (Kafka's warnings and errors, stack traces) in ``log_path``."""

    def __init__(self, boot: str, app_id: str, source: str, sink: str, workdir: Path):
        self.log_path = workdir / "streams.log"
        self.lines: list[str] = []
        java = os.environ.get("JAVA", "java")
        # A small heap, one GC thread and no C2 compiler: the JVM shares two cores with
        # three brokers in CI.
        argv = [java, "-cp", f"{LIBS}/*", "-Xmx256m", "-XX:+UseSerialGC",
                "-XX:TieredStopAtLevel=1", f"-Dlog4j2.configurationFile={LOG4J}",
                str(APP), boot, app_id, source, sink, str(workdir / "state"), "2"]
        with open(self.log_path, "ab") as log:
            self.proc = subprocess.Popen(argv, stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                         stderr=log, text=True, preexec_fn=die_with_parent)
        self.reader = threading.Thread(target=self._read, daemon=True)
        self.reader.start()

    def _read(self) -> None:
        for line in self.proc.stdout:
            self.lines.append(line.rstrip("\n"))

    def describe(self) -> str:
        try:
            log = self.log_path.read_text(errors="replace").splitlines()
        except OSError:
            log = []
        return ("--- StreamsCounter stdout (last 30 lines) ---\n" + "\n".join(self.lines[-30:])
                + f"\n--- {self.log_path} (last 60 lines) ---\n" + "\n".join(log[-60:]))

    def assert_healthy(self) -> None:
        """Still running, no stream thread lost, never in ERROR."""
        bad = [l for l in self.lines if l.startswith("UNCAUGHT") or l.endswith(" ERROR")]
        assert not bad, f"the Streams application failed: {bad[:3]}\n{self.describe()}"
        assert self.proc.poll() is None, (
            f"the Streams application exited with {self.proc.returncode}\n{self.describe()}")

    def running(self) -> bool:
        self.assert_healthy()
        states = [l for l in self.lines if l.startswith("STATE ")]
        return bool(states) and states[-1].endswith(" RUNNING")

    def stop(self) -> int:
        """Closes its stdin (the application closes itself) and waits for it."""
        try:
            self.proc.stdin.close()
        except OSError:
            pass
        try:
            return self.proc.wait(timeout=40)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()
            raise AssertionError(f"the Streams application did not close\n{self.describe()}")

    def kill(self) -> None:
        if self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait()


class Output:
    """A read_committed consumer of the whole output topic from its start: per key, the
    values in the order read."""

    def __init__(self, boot: str, topic: str):
        self.by_key: dict[str, list[str]] = {}
        self.count = 0
        self.consumer = Consumer({
            "bootstrap.servers": boot, "group.id": f"check-{uuid.uuid4()}",
            "isolation.level": "read_committed", "enable.auto.commit": False,
            "enable.partition.eof": True})
        self.consumer.assign([TopicPartition(topic, p, 0) for p in range(PARTITIONS)])

    def poll(self) -> int:
        for m in self.consumer.consume(1000, timeout=0.2):
            if m.error():
                if m.error().code() != KafkaError._PARTITION_EOF:
                    raise KafkaException(m.error())
                continue
            self.by_key.setdefault(m.key().decode(), []).append(m.value().decode())
            self.count += 1
        return self.count

    def close(self) -> None:
        self.consumer.close()


def read_input(boot: str, topic: str, expect: int) -> tuple[dict[str, list[int]], list[bytes]]:
    """The input topic as the log holds it: per key, the values in offset order (the
    order Streams processes them in), and every value."""
    c = Consumer({"bootstrap.servers": boot, "group.id": f"input-{uuid.uuid4()}",
                  "enable.auto.commit": False})
    c.assign([TopicPartition(topic, p, 0) for p in range(PARTITIONS)])
    by_key: dict[str, list[int]] = {}
    values: list[bytes] = []
    deadline = time.monotonic() + TIMEOUT
    try:
        while len(values) < expect and time.monotonic() < deadline:
            for m in c.consume(1000, timeout=0.5):
                if m.error():
                    raise KafkaException(m.error())
                by_key.setdefault(m.key().decode(), []).append(int(m.value()))
                values.append(m.value())
        # Anything past `expect` (a duplicate) shows within a moment.
        for m in c.consume(1000, timeout=1.0):
            if not m.error():
                by_key.setdefault(m.key().decode(), []).append(int(m.value()))
                values.append(m.value())
    finally:
        c.close()
    return by_key, values


def expected_aggregates(by_key: dict[str, list[int]]) -> dict[str, list[str]]:
    """Per key, "COUNT SUM" after each of its input records."""
    out = {}
    for key, values in by_key.items():
        total, seq = 0, []
        for n, v in enumerate(values, start=1):
            total += v
            seq.append(f"{n} {total}")
        out[key] = seq
    return out


def assert_exact(got: dict[str, list[str]], want: dict[str, list[str]], what: str) -> None:
    problems = []
    for key in sorted(set(want) | set(got)):
        g, w = got.get(key, []), want.get(key, [])
        if g == w:
            continue
        counts = [int(v.split()[0]) for v in g]
        i = next((i for i, (a, b) in enumerate(zip(g, w)) if a != b), min(len(g), len(w)))
        problems.append(
            f"{key}: {len(g)} updates for {len(w)} inputs, first difference at update {i + 1}"
            f" (got {g[i:i + 3]}, want {w[i:i + 3]}); counts repeated:"
            f" {len(counts) - len(set(counts))}, past the input's:"
            f" {sum(1 for c in counts if c > len(w))}")
    assert not problems, f"{what}: {len(problems)} keys wrong:\n" + "\n".join(problems[:10])


def isr_whole(admin: AdminClient) -> bool:
    """Every partition of every topic (the internal ones too) has a leader and its whole
    replica set in the ISR."""
    try:
        md = admin.list_topics(timeout=5)
    except KafkaException:
        return False
    return all(t.error is None and t.partitions and all(
        p.leader >= 0 and len(p.isrs) == len(p.replicas) for p in t.partitions.values())
        for t in md.topics.values())


@pytest.mark.skipif(not _have_streams_jars(),
                    reason="needs Java and Kafka Streams' jars (tools/kafka-cli/kafka-cli.sh --fetch)")
def test_streams_exactly_once_v2_through_a_kill_of_each_broker(broker_factory, tmp_path):
    brokers = broker_factory.cluster(voters=3, extra_args=BROKER_ARGS)
    boot = bootstrap(brokers)
    source, sink, app_id = "eos-input", "eos-output", "eos-counter"
    admin = AdminClient({"bootstrap.servers": boot})
    configs = {"min.insync.replicas": "2"}
    for f in admin.create_topics([NewTopic(source, PARTITIONS, 3, config=configs),
                                  NewTopic(sink, PARTITIONS, 3, config=configs)]).values():
        f.result(TIMEOUT)

    # The JVM compiles the application while the first phase is produced.
    app = StreamsApp(boot, app_id, source, sink, tmp_path)
    try:
        run_phases(brokers, boot, admin, app, source, sink)
    finally:
        app.kill()


def run_phases(brokers, boot: str, admin: AdminClient, app: StreamsApp, source: str,
               sink: str) -> None:
    """The phases and kills, then the checks of the input and the output."""
    output = Output(boot, sink)
    producer_log = ProducerLog()
    logger = logging.getLogger(f"librdkafka.streams-eos.{id(producer_log)}")
    logger.propagate = False
    logger.setLevel(logging.DEBUG)
    logger.addHandler(producer_log)
    producer = Producer({"bootstrap.servers": boot, "acks": "all", "enable.idempotence": True,
                         "linger.ms": 5, "message.timeout.ms": 60_000,
                         "request.timeout.ms": 10_000, "debug": "eos", "logger": logger})
    acked: list[bytes] = []
    errors: list[str] = []

    def on_delivery(err, msg):
        if err:
            errors.append(str(err))
        else:
            acked.append(msg.value())

    produced = 0

    def produce(n: int) -> None:
        nonlocal produced
        for i in range(produced, produced + n):
            # Values are the record's number: every sum tells which records made it.
            producer.produce(source, key=f"k{i % KEYS}".encode(), value=str(i).encode(),
                             on_delivery=on_delivery)
        produced += n
        assert producer.flush(PHASE_S) == 0, "input not acknowledged"
        assert not errors, f"input refused: {errors[:3]}"

    phases: list[str] = []

    def caught_up(what: str) -> None:
        """Until the committed output has one record per input record."""
        t = time.monotonic()
        wait_until(lambda: app.assert_healthy() or output.poll() >= produced, PHASE_S,
                   lambda: f"{what}: {output.count} of {produced} updates committed\n"
                           f"{app.describe()}")
        app.assert_healthy()
        phases.append(f"{what} {time.monotonic() - t:.1f}s")

    started = time.monotonic()
    produce(PER_PHASE)
    wait_until(app.running, PHASE_S, lambda: f"the application to run\n{app.describe()}")
    caught_up("before any kill")
    for victim in brokers:
        # Killed while the application works through the first half of a phase:
        # transactions are open on partitions it leads, and it may be their or the group's
        # coordinator. The second half is written to the two survivors.
        produce(PER_PHASE // 2)
        victim.kill()
        t = time.monotonic()
        produce(PER_PHASE // 2)
        phases.append(f"{victim.name} killed, input written {time.monotonic() - t:.1f}s")
        caught_up(f"{victim.name} dead")
        t = time.monotonic()
        victim.restart()
        wait_until(lambda: isr_whole(admin), PHASE_S,
                   f"every ISR whole again after {victim.name}'s restart")
        phases.append(f"{victim.name} back {time.monotonic() - t:.1f}s")
    produce(PER_PHASE)
    caught_up("after the last restart")
    rc = app.stop()
    assert rc == 0, f"the Streams application exited with {rc}\n{app.describe()}"
    elapsed = time.monotonic() - started

    # The input as the log holds it is the reference: librdkafka may write a record twice
    # when it bumps its epoch (assert_exactly_once), and Streams must then count it twice.
    by_key, values = read_input(boot, source, produced)
    assert_exactly_once(acked, values, producer_log.epoch_bumps)
    want = expected_aggregates(by_key)
    output.poll()
    assert_exact(output.by_key, want, "the output read as it was committed")
    output.close()
    again = Output(boot, sink)
    wait_until(lambda: again.poll() >= len(values), TIMEOUT,
               lambda: f"the output read again: {again.count} of {len(values)}")
    again.poll()
    again.close()
    assert_exact(again.by_key, want, "the output read again at the end")
    # For the log: how long each step took (the output of a phase committed once it was
    # written: with a broker dead, how long Streams took to recover), and how many times a stream thread was
    # fenced and rejoined (its tasks closed, their stores restored from the changelogs).
    fenced = app.log_path.read_text(errors="replace").count(
        "Detected that the thread is being fenced")
    print(f"streams eos: {produced} records, {len(brokers)} kills, {elapsed:.1f}s; phases: "
          f"{', '.join(phases)}; stream threads fenced: {fenced}")
