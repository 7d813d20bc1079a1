"""Several log directories per broker (Kafka's `log.dirs`, one per disk): a broker given
two relative directories, as an operator types them, spreads a new topic's partitions
over both, finds each partition where it is after a restart, reports each directory in
DescribeLogDirs (v4: with its filesystem's space), and refuses a partition it finds in
both directories rather than guess which copy is its log."""

from __future__ import annotations

import shutil
import subprocess
import tempfile
import time
from pathlib import Path

import pytest
from confluent_kafka import Consumer, Producer
from confluent_kafka.admin import AdminClient, NewTopic

import kwire as W
import launcher
from launcher import Broker

TIMEOUT = 30


@pytest.fixture
def two_dir_broker():
    work = Path(tempfile.mkdtemp(prefix="corelog-it-logdirs-"))
    b = Broker(work, shards=2, extra_args=["--log-dirs", "./disk1/corelog,./disk2/corelog"])
    b.pass_data_dir = False
    b.cwd = work
    yield b
    if b.proc is not None and b.proc.poll() is None:
        b.stop()
    shutil.rmtree(work, ignore_errors=True)


def partitions_in(d: Path, topic: str) -> set[int]:
    if not d.is_dir():
        return set()
    return {int(p.name.rsplit("-", 1)[1]) for p in d.iterdir()
            if p.is_dir() and p.name.rsplit("-", 1)[0] == topic}


def test_partitions_spread_over_log_dirs_and_are_found_again(two_dir_broker):
    b = two_dir_broker.start()
    disk1, disk2 = b.workdir / "disk1" / "corelog", b.workdir / "disk2" / "corelog"
    topic, n = "spread", 8
    admin = AdminClient({"bootstrap.servers": b.bootstrap})
    for f in admin.create_topics([NewTopic(topic, n, 1)]).values():
        f.result(TIMEOUT)
    p = Producer({"bootstrap.servers": b.bootstrap, "acks": "all"})
    for i in range(800):
        p.produce(topic, value=f"v{i}".encode(), partition=i % n)
    assert p.flush(TIMEOUT) == 0

    in1, in2 = partitions_in(disk1, topic), partitions_in(disk2, topic)
    assert in1 and in2, f"one directory took every partition: {in1} / {in2}"
    assert in1 | in2 == set(range(n)) and not in1 & in2
    assert (disk1 / "__cluster_metadata").is_dir(), "the first directory holds the metadata"

    dirs = W.describe_log_dirs(b.bootstrap, topic, list(range(n)))
    assert [d.path for d in dirs] == [str(disk1), str(disk2)]
    assert all(d.error_code == 0 for d in dirs)
    assert set(dirs[0].sizes) == in1 and set(dirs[1].sizes) == in2
    assert all(size > 0 for d in dirs for size in d.sizes.values())
    assert all(d.total_bytes > 0 for d in dirs)

    # After a restart every partition is opened where it is, with its records.
    b.stop()
    b.start()
    assert (partitions_in(disk1, topic), partitions_in(disk2, topic)) == (in1, in2)
    c = Consumer({"bootstrap.servers": b.bootstrap, "group.id": "g", "auto.offset.reset": "earliest"})
    c.subscribe([topic])
    got = set()
    deadline = time.time() + TIMEOUT
    while len(got) < 800 and time.time() < deadline:
        m = c.poll(0.5)
        if m is not None and not m.error():
            got.add(m.value())
    c.close()
    assert len(got) == 800


def test_a_partition_in_both_directories_is_refused_not_guessed(two_dir_broker):
    b = two_dir_broker.start()
    disk1, disk2 = b.workdir / "disk1" / "corelog", b.workdir / "disk2" / "corelog"
    admin = AdminClient({"bootstrap.servers": b.bootstrap})
    for f in admin.create_topics([NewTopic("twice", 2, 1)]).values():
        f.result(TIMEOUT)
    p = Producer({"bootstrap.servers": b.bootstrap})
    p.produce("twice", value=b"x", partition=0)
    assert p.flush(TIMEOUT) == 0
    b.stop()
    (holder, other) = (disk1, disk2) if 0 in partitions_in(disk1, "twice") else (disk2, disk1)
    shutil.copytree(holder / "twice-0", other / "twice-0")
    # Opening that partition fails, and a partition that fails to open at start stops
    # the broker, naming both copies.
    b.launch()
    assert b.proc.wait(TIMEOUT) != 0
    log = b.log_path.read_text()
    assert f"twice-0 is in two log directories ({disk1 / 'twice-0'} and {disk2 / 'twice-0'})" in log


def test_data_dir_and_log_dirs_together_are_refused(tmp_path):
    b = Broker(tmp_path, extra_args=["--log-dirs", "./a,./b"])
    b.cwd = tmp_path
    with pytest.raises(Exception):
        b.start()
    assert "not both" in b.log_path.read_text()


def test_a_directory_whose_disk_is_gone_refuses_the_start_until_forgotten(two_dir_broker):
    """An unmounted disk leaves an empty mount point: the broker must not take it for a new
    disk and create empty logs there. It refuses to start, naming the directory and its id,
    until the operator says the disk is lost for good (`corelog forget-log-dir`)."""
    b = two_dir_broker.start()
    disk2 = b.workdir / "disk2" / "corelog"
    b.stop()
    (b.workdir / "unmounted").mkdir()
    disk2.rename(b.workdir / "unmounted" / "corelog")
    disk2.mkdir()
    b.launch()
    assert b.proc.wait(TIMEOUT) != 0
    log = b.log_path.read_text()
    assert f"log directory {disk2} held this broker's partitions" in log
    assert "empty or missing its id" in log and "corelog forget-log-dir" in log

    # Lost for good: forgotten, the empty directory starts as a new disk.
    binary = b.binary or launcher.corelog_bin()
    out = subprocess.run([str(binary), "forget-log-dir", "--data-dir", "./disk1/corelog",
                          "./disk2/corelog"], cwd=b.workdir, capture_output=True, text=True)
    assert out.returncode == 0, out.stderr
    assert "forgotten" in out.stdout
    b.start()
    assert (disk2 / "log-dir.json").exists()
