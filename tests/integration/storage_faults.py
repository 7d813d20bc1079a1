"""Helpers of the storage-fault tests: arming a broker's fault layer over its HTTP
endpoint (`--storage-fault-injection true`), a producer load that keeps what was
acknowledged and when, and the check that a log holds every acknowledged record."""

from __future__ import annotations

import random
import threading
import time
import urllib.error
import urllib.request

from confluent_kafka import Consumer, KafkaError, Producer, TopicPartition

FAULTS = ["--storage-fault-injection", "true"]


def fault(broker, command: str, timeout: float = 10.0) -> str:
    """Runs one fault command on the broker; returns what it said. A power loss never
    answers: use power_loss()."""
    req = urllib.request.Request(f"http://{broker.http}/faults", data=command.encode(), method="POST")
    with urllib.request.urlopen(req, timeout=timeout) as r:
        return r.read().decode()


def power_loss(broker, torn: bool = False, timeout: float = 20.0) -> None:
    """Cuts the broker's power: it drops what it had not synced and dies (SIGKILL)."""
    req = urllib.request.Request(f"http://{broker.http}/faults",
                                 data=b"power-loss torn" if torn else b"power-loss", method="POST")
    try:
        urllib.request.urlopen(req, timeout=timeout).read()
    except (urllib.error.URLError, ConnectionError, TimeoutError, OSError):
        pass  # the connection dies with the process
    deadline = time.monotonic() + timeout
    while broker.proc.poll() is None:
        assert time.monotonic() < deadline, "the broker survived its power loss"
        time.sleep(0.05)
    assert broker.proc.returncode == -9, f"died of {broker.proc.returncode}, not SIGKILL"


class Load:
    """An idempotent acks=all producer (unless overridden) writing unique keys to every
    partition of ``topic`` from a thread; ``acked`` maps (partition, offset) to
    (key, ack time on the monotonic clock)."""

    def __init__(self, bootstrap: str, topic: str, seed: int = 7, rate: float | None = None, **config):
        self.topic = topic
        self.rng = random.Random(seed)
        self.acked: dict[tuple[int, int], tuple[bytes, float]] = {}
        self.errors: list[KafkaError] = []
        self.lock = threading.Lock()
        self.stop_flag = threading.Event()
        self.producer = Producer({
            "bootstrap.servers": bootstrap, "acks": "all", "enable.idempotence": True,
            "linger.ms": 2, "message.timeout.ms": 60_000, "socket.timeout.ms": 5_000,
            "retry.backoff.ms": 100, "queue.buffering.max.messages": 20_000,
            "topic.metadata.refresh.interval.ms": 1_000, **config})
        self.sent = 0
        # Records per second at most (None: as fast as the broker acknowledges).
        self.rate = rate
        self.thread = threading.Thread(target=self._run, daemon=True)

    def _delivered(self, err, msg):
        with self.lock:
            if err is not None:
                self.errors.append(err)
                return
            key = (msg.partition(), msg.offset())
            assert key not in self.acked, f"offset {key} acknowledged twice"
            self.acked[key] = (msg.key(), time.monotonic())

    def _run(self):
        while not self.stop_flag.is_set():
            key = b"k%09d" % self.sent
            value = key * self.rng.randint(2, 60)
            try:
                self.producer.produce(self.topic, key=key, value=value, on_delivery=self._delivered)
            except BufferError:
                self.producer.poll(0.01)
                continue
            self.sent += 1
            if self.sent % 100 == 0:
                self.producer.poll(0)
                time.sleep(0.002 if self.rate is None else 100 / self.rate)
        self.producer.poll(0)

    def start(self) -> "Load":
        self.thread.start()
        return self

    def count(self) -> int:
        with self.lock:
            return len(self.acked)

    def wait_acked(self, n: int, timeout: float = 30.0) -> None:
        deadline = time.monotonic() + timeout
        while self.count() < n:
            assert time.monotonic() < deadline, f"only {self.count()} of {n} acknowledged"
            time.sleep(0.02)

    def stop(self, flush: float = 0.0) -> None:
        self.stop_flag.set()
        self.thread.join(10)
        if flush:
            self.producer.flush(flush)
        else:
            self.producer.purge()
            self.producer.poll(0.5)


def read_log(bootstrap: str, topic: str, partitions: int) -> dict[int, list[tuple[int, bytes]]]:
    """Every record of every partition from offset 0 to the end, CRCs checked."""
    c = Consumer({"bootstrap.servers": bootstrap, "group.id": "storage-faults-check",
                  "enable.auto.commit": False, "enable.partition.eof": True,
                  "auto.offset.reset": "error", "check.crcs": True})
    try:
        ends = {}
        for p in range(partitions):
            low, high = c.get_watermark_offsets(TopicPartition(topic, p), timeout=15, cached=False)
            assert low == 0, f"partition {p} starts at {low}"
            ends[p] = high
        got: dict[int, list[tuple[int, bytes]]] = {p: [] for p in range(partitions)}
        todo = {p for p, h in ends.items() if h > 0}
        c.assign([TopicPartition(topic, p, 0) for p in todo])
        deadline = time.monotonic() + 60
        while todo:
            assert time.monotonic() < deadline, f"partitions {todo} not read to their end"
            m = c.poll(0.5)
            if m is None:
                continue
            if m.error():
                if m.error().code() == KafkaError._PARTITION_EOF:
                    if m.offset() >= ends[m.partition()]:
                        todo.discard(m.partition())
                    continue
                raise AssertionError(f"read failed: {m.error()}")
            got[m.partition()].append((m.offset(), m.key()))
            if m.offset() + 1 >= ends[m.partition()]:
                todo.discard(m.partition())
        return got
    finally:
        c.close()


def check_log(bootstrap: str, topic: str, partitions: int,
              must_hold: dict[tuple[int, int], bytes]) -> int:
    """The log is dense from 0 in every partition, holds no key twice, and holds every
    record of ``must_hold`` ((partition, offset) -> key) at its offset. Returns how many
    records it holds."""
    got = read_log(bootstrap, topic, partitions)
    keys = set()
    total = 0
    for p, records in got.items():
        offsets = [o for o, _ in records]
        assert offsets == list(range(len(offsets))), f"partition {p} has a hole or a repeat"
        for _, k in records:
            assert k not in keys, f"key {k!r} stored twice"
            keys.add(k)
        total += len(records)
    for (p, o), k in must_hold.items():
        assert o < len(got[p]), f"acknowledged offset {o} of partition {p} is gone (log ends at {len(got[p])})"
        assert got[p][o][1] == k, f"partition {p} offset {o} holds {got[p][o][1]!r}, acknowledged {k!r}"
    return total
