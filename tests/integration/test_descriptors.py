"""File descriptors follow the partitions in use, not the partitions that exist.

- Many partitions, few descriptors: with --max-open-segment-files 96, a broker carrying
  600 partitions (1,800 segment files) holds far fewer descriptors than partitions,
  every partition still reads back, across a SIGKILL, and /metrics shows the bound and
  the evictions.
- Out of descriptors: a broker whose RLIMIT_NOFILE is spent by connections logs what ran
  out ("out of file descriptors"), counts it, keeps running, and accepts again as soon
  as connections close.
"""

from __future__ import annotations

import os
import socket
import time

from confluent_kafka import Consumer, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic

import kwire as W
import launcher
from test_limits import metric_sum

PARTITIONS = 600
OPEN_FILES_MAX = 96


def descriptors(pid: int) -> int:
    return len(os.listdir(f"/proc/{pid}/fd"))


def produce_one_each(bootstrap: str, topic: str, n: int) -> None:
    errors = []
    p = Producer({"bootstrap.servers": bootstrap, "acks": "all", "linger.ms": 5})
    for i in range(n):
        p.produce(topic, value=f"m{i}".encode(), partition=i,
                  on_delivery=lambda err, _m: err and errors.append(err))
    assert p.flush(60) == 0
    assert not errors, errors[:3]


def read_all(bootstrap: str, topic: str, n: int) -> None:
    c = Consumer({"bootstrap.servers": bootstrap, "group.id": f"g-{time.time()}",
                  "enable.auto.commit": False, "fetch.wait.max.ms": 10})
    c.assign([TopicPartition(topic, i, 0) for i in range(n)])
    want = set(range(n))
    deadline = time.monotonic() + 60
    while want and time.monotonic() < deadline:
        for m in c.consume(1000, timeout=1):
            if m.error() is None:
                assert m.value() == f"m{m.partition()}".encode()
                want.discard(m.partition())
    c.close()
    assert not want, f"{len(want)} partitions did not read back"


def test_many_partitions_hold_few_descriptors(broker_factory):
    b = broker_factory(extra_args=["--max-open-segment-files", str(OPEN_FILES_MAX)])
    admin = AdminClient({"bootstrap.servers": b.bootstrap})
    admin.create_topics([NewTopic("many", PARTITIONS, 1)])["many"].result(60)
    produce_one_each(b.bootstrap, "many", PARTITIONS)
    read_all(b.bootstrap, "many", PARTITIONS)
    held = descriptors(b.proc.pid)
    # Segment files, plus connections, listeners, rings and the like (about 60 here);
    # without the bound the 600 partitions alone would hold 1,800.
    assert held < OPEN_FILES_MAX + 150, held
    assert metric_sum(b, "corelog_segment_files_open") <= OPEN_FILES_MAX
    assert metric_sum(b, "corelog_segment_files_open_max") == OPEN_FILES_MAX
    assert metric_sum(b, "corelog_segment_file_evictions") > 0

    b.kill()
    b.start()
    read_all(b.bootstrap, "many", PARTITIONS)
    assert descriptors(b.proc.pid) < OPEN_FILES_MAX + 150


class LimitedBroker(launcher.Broker):
    """A broker started under a hard RLIMIT_NOFILE of `nofile`."""

    nofile = 256

    def argv(self) -> list[str]:
        return ["prlimit", f"--nofile={self.nofile}:{self.nofile}", "--", *super().argv()]


def test_out_of_descriptors_is_logged_and_accepting_resumes(tmp_path):
    b = LimitedBroker(tmp_path, shards=2, extra_args=["--max-connections", "5000"])
    try:
        b.start()
        held = []
        # More connections than descriptors: the kernel completes them into the listen
        # backlog; the broker accepts until it has no descriptor left.
        for _ in range(LimitedBroker.nofile + 50):
            held.append(socket.create_connection(("127.0.0.1", b.port), timeout=5))
        deadline = time.monotonic() + 20
        while "out of file descriptors" not in b.log_path.read_text(errors="replace"):
            assert time.monotonic() < deadline, "no log line says descriptors ran out"
            time.sleep(0.2)
        assert b.is_running()
        for s in held:
            s.close()
        # Read once descriptors are back: the HTTP endpoint needs two of its own.
        deadline = time.monotonic() + 20
        while True:
            try:
                assert metric_sum(b, "corelog_accept_out_of_descriptors") > 0
                break
            except OSError:
                assert time.monotonic() < deadline, "/metrics did not answer again"
                time.sleep(0.2)
        # A new client is served again.
        deadline = time.monotonic() + 20
        while True:
            try:
                _, body = W.roundtrip(b.bootstrap, W.api_versions_v0(1), timeout=2)
                assert W.parse_api_versions_v0(body)[0] == 0
                break
            except (OSError, W.Closed):
                assert time.monotonic() < deadline, "the broker did not accept again"
                time.sleep(0.2)
        assert b.is_running()
    finally:
        b.teardown()
