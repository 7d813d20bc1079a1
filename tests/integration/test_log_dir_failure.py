"""A failed disk takes only its own partitions (KIP-858's JBOD failure handling): a broker
with two log directories whose second disk starts failing every write gives up the
partitions on that disk — the controller leads them from other replicas and takes the
broker out of their ISRs — while it keeps leading the partitions on its first disk.
DescribeLogDirs shows the directory offline (KAFKA_STORAGE_ERROR). Restarted with the disk
replaced (empty, the old one forgotten), the broker makes its replicas there again from
their peers and rejoins their ISRs. Nothing acknowledged is lost. The disk procedures are docs/deployment.md's, as written:
<!-- runnable: add-disk --> and <!-- runnable: replace-disk -->."""

from __future__ import annotations

import os
import shlex
import shutil
import subprocess
import time
from pathlib import Path

import pytest
from confluent_kafka.admin import AdminClient, NewTopic

import launcher
from storage_faults import FAULTS, Load, check_log, fault
import kwire as W
from test_log_dirs import partitions_in
from test_docs import procedure
from test_replication import FAST, partition_state

TIMEOUT = 30
KAFKA_STORAGE_ERROR = 56


def add_disk(b: launcher.Broker) -> None:
    """Restarts ``b`` with a second disk, ``./disk2``, as docs/deployment.md's
    ``<!-- runnable: add-disk -->`` procedure says (its `corelog serve` flags, relative
    paths as written, run in the broker's directory)."""
    argv = shlex.split(procedure("docs/deployment.md", "add-disk"))
    assert argv[:2] == ["corelog", "serve"], argv
    b.stop()
    b.pass_data_dir = False
    b.cwd = b.workdir
    b.extra_args += argv[2:]
    b.start()
    assert (b.workdir / "disk2" / "log-dir.json").exists()


def replace_disk(b: launcher.Broker) -> None:
    """docs/deployment.md's ``<!-- runnable: replace-disk -->`` procedure, as written, in
    the stopped broker's directory."""
    argv = shlex.split(procedure("docs/deployment.md", "replace-disk"))
    assert argv[0] == "corelog", argv
    binary = b.binary or launcher.corelog_bin()
    out = subprocess.run([str(binary), *argv[1:]], cwd=b.workdir, capture_output=True, text=True)
    assert out.returncode == 0, out.stderr
    assert "forgotten" in out.stdout


def wait_for(pred, what: str, timeout: float = TIMEOUT):
    deadline = time.monotonic() + timeout
    while True:
        got = pred()
        if got:
            return got
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        time.sleep(0.2)


def fail_second_disk(brokers, node1, fail, topic: str = "jbod", n: int = 6) -> Load:
    """Node 1 leads every partition of ``topic`` (over both its disks) under a producer's
    load when ``fail()`` breaks its second disk; only that disk's partitions leave it, and
    the load goes on without an error. Returns the stopped load."""
    boot = launcher.bootstrap(brokers)
    admin = AdminClient({"bootstrap.servers": boot})
    admin.create_topics([NewTopic(topic, num_partitions=n, replica_assignment=[[1, 2, 3]] * n,
                                  config={"min.insync.replicas": "2"})])[topic].result(TIMEOUT)
    wait_for(lambda: all(l == 1 and len(isr) == 3
                         for l, _, isr in partition_state(brokers, topic).values()),
             "node 1 to lead every partition with a full ISR")
    data, disk2 = node1.workdir / "data", node1.workdir / "disk2"
    on_data, on_disk2 = partitions_in(data, topic), partitions_in(disk2, topic)
    assert on_data and on_disk2 and on_data | on_disk2 == set(range(n)), (on_data, on_disk2)

    load = Load(boot, topic).start()
    load.wait_acked(2_000)
    fail()

    def moved():
        state = partition_state(brokers, topic)
        gone = all(state[p][0] not in (-1, 1) and 1 not in state[p][2] for p in on_disk2)
        kept = all(state[p][0] == 1 and 1 in state[p][2] for p in on_data)
        return gone and kept and state
    wait_for(moved, "the failed disk's partitions to move, and only those")

    dirs = {Path(d.path).name: d for d in W.describe_log_dirs(node1.bootstrap, topic, list(range(n)))}
    assert dirs["disk2"].error_code == KAFKA_STORAGE_ERROR and not dirs["disk2"].partitions, dirs
    assert dirs["data"].error_code == 0 and set(dirs["data"].sizes) == on_data, dirs
    assert "a log directory failed: its partitions go offline on this broker" in node1.log_tail(3000)
    node1.assert_alive()

    before = load.count()
    load.wait_acked(before + 2_000)
    load.stop(flush=30)
    assert not load.errors, load.errors[:3]
    # Still led by node 1: the first disk's partitions never left it.
    state = partition_state(brokers, topic)
    assert all(state[p][0] == 1 for p in on_data), state
    return load


def test_a_failed_disk_takes_only_its_own_partitions(broker_factory):
    """The storage fault layer fails every write and sync under the second disk; the disk
    is then replaced."""
    brokers = broker_factory.cluster(3, extra_args=FAST + FAULTS)
    node1 = brokers[0]
    add_disk(node1)
    boot = launcher.bootstrap(brokers)
    topic, n = "jbod", 6
    disk2 = node1.workdir / "disk2"

    def fail():
        fault(node1, "fail write eio path=/disk2/")
        fault(node1, "fail sync eio path=/disk2/")
    load = fail_second_disk(brokers, node1, fail, topic, n)

    # The disk is replaced: an empty one at the same place. The broker refuses it until
    # the old one is forgotten, then makes the lost replicas again from their leaders.
    node1.stop()
    shutil.rmtree(disk2)
    disk2.mkdir()
    node1.launch()
    assert node1.proc.wait(TIMEOUT) != 0
    assert "corelog forget-log-dir" in node1.log_tail(200)
    replace_disk(node1)
    node1.start()
    wait_for(lambda: all(len(isr) == 3 for _, _, isr in partition_state(brokers, topic).values()),
             "node 1 back in every ISR", timeout=60)
    dirs = W.describe_log_dirs(node1.bootstrap, topic, list(range(n)))
    assert all(d.error_code == 0 for d in dirs), dirs
    held = {p: size for d in dirs for p, size in d.sizes.items()}
    assert set(held) == set(range(n)) and all(s > 0 for s in held.values()), dirs
    check_log(boot, topic, n, {k: v[0] for k, v in load.acked.items()})


@pytest.mark.skipif(os.geteuid() != 0 or not shutil.which("losetup") or not shutil.which("mkfs.ext4"),
                    reason="mounting a loop filesystem needs root, losetup and mkfs.ext4")
@pytest.mark.parametrize("failure", ["read-only remount", "EIO"])
def test_a_real_filesystem_failing_under_one_directory(broker_factory, failure):
    """The second disk is a real ext4 filesystem on a loop device, mounted by the test, that
    fails as disks do: the kernel remounts it read-only after an error (ext4's
    ``errors=remount-ro``, triggered through its ``trigger_fs_error``), or the device
    behind it shrinks away so every write past its new end gets EIO."""
    brokers = broker_factory.cluster(3, extra_args=FAST)
    node1 = brokers[0]
    image, disk2 = node1.workdir / "disk2.img", node1.workdir / "disk2"
    # A sparse filesystem as large as the space left on the first disk's, so that new
    # partitions are placed on both (each goes to the one with the most space left).
    st = os.statvfs(node1.workdir)
    subprocess.run(["truncate", "-s", str(st.f_bavail * st.f_frsize), str(image)], check=True)
    subprocess.run(["mkfs.ext4", "-q", "-F", "-m", "0", "-N", "4096", str(image)], check=True)
    loop = subprocess.run(["losetup", "-f", "--show", str(image)], check=True,
                          capture_output=True, text=True).stdout.strip()
    disk2.mkdir()
    try:
        subprocess.run(["mount", "-o", "errors=remount-ro", loop, str(disk2)], check=True)
        add_disk(node1)

        def fail():
            if failure == "EIO":
                subprocess.run(["truncate", "-s", "1M", str(image)], check=True)
                subprocess.run(["losetup", "-c", loop], check=True)
            else:
                Path(f"/sys/fs/ext4/{Path(loop).name}/trigger_fs_error").write_text("1")
        fail_second_disk(brokers, node1, fail)
    finally:
        node1.stop()
        subprocess.run(["umount", "-l", str(disk2)], check=False)
        subprocess.run(["losetup", "-d", loop], check=False)
