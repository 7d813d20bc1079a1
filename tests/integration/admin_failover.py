"""Admin clients across the death of the active controller, for the test
(`test_admin_failover.py`) and for the same run against Apache Kafka
(`benches/admin_failover.py`).

Three long-lived admin clients — librdkafka's (confluent-kafka), Apache Kafka's Java
AdminClient (`java/AdminCreator.java`, run as a single source file) and kafka-python's —
each create a topic every `period` seconds, one at a time; the active controller is
killed (SIGKILL) among them. Each create is recorded with its wall-clock start and end
and its outcome. What a run gives: when the quorum had a new leader, and for each client
when its first create after the kill succeeded.
"""
from __future__ import annotations

import os
import subprocess
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path

from confluent_kafka.admin import AdminClient, NewTopic
from kafka import KafkaAdminClient
from kafka.admin import NewTopic as KpNewTopic

import kwire

ROOT = Path(__file__).resolve().parents[2]
LIBS = Path(os.environ.get("KAFKA_CLI_LIBS", ROOT / ".cache" / "kafka" / "libs"))
JAVA_CREATOR = Path(__file__).resolve().parent / "java" / "AdminCreator.java"


@dataclass
class Create:
    name: str
    start: float
    end: float
    error: str | None


@dataclass
class Creator:
    """One client's creates, appended as they finish."""
    client: str
    bootstrap: str
    creates: list[Create] = field(default_factory=list)
    stop: threading.Event = field(default_factory=threading.Event)
    # kafka-python only: a broker its client must not have cached as the controller.
    avoid_controller: int | None = None

    def first_success_after(self, t: float) -> Create | None:
        return next((c for c in self.creates if c.start >= t and c.error is None), None)

    def failures_after(self, t: float) -> list[Create]:
        return [c for c in self.creates if c.start >= t and c.error is not None]


def _librdkafka(c: Creator, prefix: str, period: float) -> None:
    admin = AdminClient({"bootstrap.servers": c.bootstrap})
    i = 0
    while not c.stop.is_set():
        name, start = f"{prefix}{i}", time.time()
        try:
            admin.create_topics([NewTopic(name, num_partitions=1, replication_factor=1)],
                                request_timeout=10)[name].result(25)
            error = None
        except Exception as e:  # noqa: BLE001 - recorded, judged by the caller
            error = repr(e)
        c.creates.append(Create(name, start, time.time(), error))
        i += 1
        time.sleep(max(0.0, period - (time.time() - start)))


def _kafka_python(c: Creator, prefix: str, period: float) -> None:
    """kafka-python asks a random broker it knows which one is the controller (whichever
    broker answers names itself) and keeps that id for the client's life. A client that
    cached `c.avoid_controller` (the broker to be killed) is replaced before any of its
    creates is recorded, so the run measures a client that was sent to a survivor."""
    admin = KafkaAdminClient(bootstrap_servers=c.bootstrap, request_timeout_ms=10_000)
    settled = c.avoid_controller is None
    try:
        i = 0
        while not c.stop.is_set():
            name, start = f"{prefix}{i}", time.time()
            try:
                admin.create_topics([KpNewTopic(name, 1, 1)], timeout_ms=10_000)
                error = None
            except Exception as e:  # noqa: BLE001
                error = repr(e)
            i += 1
            if not settled:
                cached = admin._controller_id  # noqa: SLF001 - the id the client keeps
                if cached == c.avoid_controller:
                    admin.close()
                    admin = KafkaAdminClient(bootstrap_servers=c.bootstrap,
                                             request_timeout_ms=10_000)
                settled = cached not in (None, c.avoid_controller) and error is None
            if settled:
                c.creates.append(Create(name, start, time.time(), error))
            time.sleep(max(0.0, period - (time.time() - start)))
    finally:
        admin.close()


def _java(c: Creator, prefix: str, period: float) -> None:
    java = os.environ.get("JAVA", "java")
    proc = subprocess.Popen(
        [java, "-cp", f"{LIBS}/*", "-Dorg.slf4j.simpleLogger.defaultLogLevel=error",
         str(JAVA_CREATOR), c.bootstrap, prefix, "100000", str(int(period * 1000))],
        stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True)
    watcher = threading.Thread(target=lambda: (c.stop.wait(), proc.kill()), daemon=True)
    watcher.start()
    for line in proc.stdout:
        parts = line.rstrip("\n").split(" ", 4)
        if len(parts) < 4:
            continue
        name, start, end, outcome = parts[0], int(parts[1]), int(parts[2]), parts[3]
        error = None if outcome == "ok" else (parts[4] if len(parts) > 4 else outcome)
        c.creates.append(Create(name, start / 1000, end / 1000, error))
    proc.wait()


RUNNERS = {"librdkafka": _librdkafka, "java": _java, "kafka-python": _kafka_python}


def start(bootstraps: dict[str, str], period: float = 0.5,
          victim: int | None = None) -> list[tuple[Creator, threading.Thread]]:
    """Starts one creator per client named in `bootstraps` (client -> bootstrap).
    `victim`: the broker to be killed, which kafka-python's client must not have cached
    as its controller (see `_kafka_python`)."""
    out = []
    for client, bootstrap in bootstraps.items():
        c = Creator(client, bootstrap, avoid_controller=victim if client == "kafka-python" else None)
        prefix = f"af-{client.replace('-', '')}-{int(time.time() * 1000) % 100000}-"
        t = threading.Thread(target=RUNNERS[client], args=(c, prefix, period), daemon=True)
        t.start()
        out.append((c, t))
    return out


def wait_first_successes(creators, n: int, timeout: float) -> None:
    deadline = time.time() + timeout
    while time.time() < deadline:
        if all(sum(1 for x in c.creates if x.error is None) >= n for c, _ in creators):
            return
        time.sleep(0.2)
    raise AssertionError("creators did not get going: "
                         + "; ".join(f"{c.client}: {c.creates[-3:]}" for c, _ in creators))


def wait_new_leader(survivors: list[str], old: int, timeout: float) -> float:
    """When a survivor first names a quorum leader other than `old`."""
    deadline = time.time() + timeout
    while time.time() < deadline:
        for b in survivors:
            try:
                leader = kwire.describe_quorum_leader(b, timeout=2)
            except (OSError, AssertionError, kwire.Closed, TimeoutError):
                continue
            if leader not in (-1, old):
                return time.time()
        time.sleep(0.05)
    raise AssertionError(f"no new quorum leader within {timeout}s")


def wait_recovered(creators, killed_at: float, timeout: float) -> None:
    deadline = time.time() + timeout
    while time.time() < deadline:
        if all(c.first_success_after(killed_at) for c, _ in creators):
            return
        time.sleep(0.2)


def stop(creators) -> None:
    for c, _ in creators:
        c.stop.set()
    for _, t in creators:
        t.join(40)


def report(creators, killed_at: float, elected_at: float) -> dict[str, float | None]:
    """client -> seconds from the new leader's election to the end of the client's first
    successful create begun after the kill (None: none succeeded)."""
    out = {}
    for c, _ in creators:
        first = c.first_success_after(killed_at)
        out[c.client] = None if first is None else round(first.end - elected_at, 2)
    return out
