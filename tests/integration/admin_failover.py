"""Admin clients across the death of the active controller, for the test
(`test_admin_failover.py`) and for the same run against Apache Kafka
(`benches/admin_against_kafka.py`, which also runs it on corelog with `--corelog`).

Long-lived admin clients — librdkafka's (confluent-kafka), Apache Kafka's Java
AdminClient (`java/AdminCreator.java`, run as a single source file) and two of
kafka-python's — each create a topic every `period` seconds, one at a time; the active
controller is killed (SIGKILL) among them. Each create is recorded with its wall-clock
start and end and its outcome. What a run gives: when the quorum had a new leader, and
for each client when its first create after the kill succeeded.

kafka-python's KafkaAdminClient asks one broker for Metadata once, keeps the controller
id of the answer for the client's life and sends every CreateTopics to that node; it asks
again only when a response says NOT_CONTROLLER (`KafkaAdminClient.
_send_request_to_controller`), never after a connection failure, a NodeNotReadyError or
an UnknownBrokerIdError. So its two clients are kept (recreated before any create counts)
until the id they cached is the one wanted: "kafka-python-survivor" (bootstrapped from a
broker that stays up) until it is not the broker to be killed, "kafka-python-killed"
(bootstrapped from the broker to be killed) until it is that broker.
"""
from __future__ import annotations

import os
import re
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
    # kafka-python only: the broker to be killed, which its client must have cached as
    # the controller (`pin`) or must not have (see `_kafka_python`).
    victim: int | None = None
    pin: bool = False
    # kafka-python only: the controller id its (last) client holds, and how many clients
    # were replaced before one had cached the id wanted.
    cached_controller: int | None = None
    replaced: int = 0

    def first_success_after(self, t: float) -> Create | None:
        return next((c for c in self.creates if c.start >= t and c.error is None), None)

    def failures_after(self, t: float) -> list[Create]:
        return [c for c in self.creates if c.start >= t and c.error is not None]

    def errors_after(self, t: float) -> dict[str, int]:
        """The failures begun at or after `t`, counted by the error's kind (librdkafka's
        error code, else the text up to the first parenthesis or colon: the exception's
        class)."""
        out: dict[str, int] = {}
        for c in self.failures_after(t):
            m = re.search(r"code=(\w+)", c.error)
            kind = m.group(1) if m else c.error.split("(", 1)[0].split(":", 1)[0].strip()
            out[kind] = out.get(kind, 0) + 1
        return out


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
    """kafka-python keeps the controller id of the first Metadata answer it gets (from a
    random broker it knows) for the client's life. Until the client has cached the id
    wanted (`c.victim` when `c.pin`, any other broker when not) and a create succeeded,
    it is replaced and its creates are not recorded; after that, the same client is kept
    whatever happens."""
    def wanted(cached: int | None) -> bool:
        return cached == c.victim if c.pin else cached not in (None, c.victim)

    admin = KafkaAdminClient(bootstrap_servers=c.bootstrap, request_timeout_ms=10_000)
    settled = c.victim is None
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
            c.cached_controller = admin._controller_id  # noqa: SLF001 - the id the client keeps
            if settled:
                c.creates.append(Create(name, start, time.time(), error))
            elif error is None and wanted(c.cached_controller):
                settled = True
            elif c.cached_controller is not None and not wanted(c.cached_controller):
                admin.close()
                c.replaced += 1
                admin = KafkaAdminClient(bootstrap_servers=c.bootstrap,
                                         request_timeout_ms=10_000)
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


RUNNERS = {"librdkafka": _librdkafka, "java": _java,
           "kafka-python-survivor": _kafka_python, "kafka-python-killed": _kafka_python}


def start(bootstraps: dict[str, str], period: float = 0.5,
          victim: int | None = None) -> list[tuple[Creator, threading.Thread]]:
    """Starts one creator per client named in `bootstraps` (client -> bootstrap; the
    clients are RUNNERS' keys). `victim`: the broker to be killed, which the
    "kafka-python-killed" client must have cached as its controller and the
    "kafka-python-survivor" one must not (see `_kafka_python`)."""
    out = []
    for client, bootstrap in bootstraps.items():
        kp = client.startswith("kafka-python")
        c = Creator(client, bootstrap, victim=victim if kp else None,
                    pin=client == "kafka-python-killed")
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


def wait_recovered(creators, killed_at: float, timeout: float,
                   clients: set[str] | None = None) -> None:
    """Until each client named in `clients` (all when None) has had a create succeed
    after the kill, or `timeout` has passed."""
    deadline = time.time() + timeout
    while time.time() < deadline:
        if all(c.first_success_after(killed_at) for c, _ in creators
               if clients is None or c.client in clients):
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


def details(creators, killed_at: float, elected_at: float) -> dict[str, dict]:
    """client -> what its creates after the kill were: how many, how many failed and
    with what, the end of the last one (s after the election), how many failed after the
    first success, and for kafka-python the controller id its client holds at the end
    and how many clients were replaced before the run (to cache the id wanted)."""
    out = {}
    for c, _ in creators:
        after = [x for x in c.creates if x.start >= killed_at]
        first = c.first_success_after(killed_at)
        d = {
            "creates_after_kill": len(after),
            "failed_after_kill": len(c.failures_after(killed_at)),
            "errors_after_kill": c.errors_after(killed_at),
            "watched_until_s_after_election": round(after[-1].end - elected_at, 2) if after else None,
            "failures_after_recovery": None if first is None else len(c.failures_after(first.end)),
        }
        if c.client.startswith("kafka-python"):
            d["victim"] = c.victim
            d["cached_controller_at_end"] = c.cached_controller
            d["clients_replaced_before_the_run"] = c.replaced
        out[c.client] = d
    return out
