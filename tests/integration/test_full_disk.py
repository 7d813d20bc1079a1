"""A full disk for real: the broker's data directory on a small ext4 filesystem of the
test's own (a loop-mounted image), filled to 100 % under load by another writer. The
broker stays up, refuses produces with KAFKA_STORAGE_ERROR, loses nothing it
acknowledged, and takes produces again once space is freed.

Needs root (mount); the test set-up runs as root."""

from __future__ import annotations

import errno
import os
import shutil
import subprocess
import tempfile
import threading
import time
from pathlib import Path

import pytest

from launcher import Broker
from storage_faults import Load, check_log
from test_storage_faults import KAFKA_STORAGE_ERROR, create, produce_raw

FS_MIB = 48


@pytest.fixture
def small_fs():
    root = Path(tempfile.mkdtemp(prefix="corelog-fulldisk-"))
    image, mnt = root / "disk.img", root / "mnt"
    mnt.mkdir()
    with open(image, "wb") as f:
        f.truncate(FS_MIB << 20)
    # No blocks reserved for root: the broker runs as root and would write into them.
    subprocess.run(["mkfs.ext4", "-q", "-m", "0", str(image)], check=True)
    subprocess.run(["mount", "-o", "loop", str(image), str(mnt)], check=True)
    try:
        yield mnt
    finally:
        subprocess.run(["umount", "-l", str(mnt)], check=False)
        shutil.rmtree(root, ignore_errors=True)


def fill(path: Path) -> int:
    """Writes ``path`` until the filesystem has no block left; returns its size."""
    chunk = b"\xff" * (1 << 20)
    written = 0
    try:
        f = open(path, "wb", buffering=0)
    except OSError as e:
        assert e.errno == errno.ENOSPC, e
        return 0
    with f:
        for size in (1 << 20, 4096, 512):
            while True:
                try:
                    written += f.write(chunk[:size])
                except OSError as e:
                    assert e.errno == errno.ENOSPC, e
                    break
        try:
            os.fsync(f.fileno())
        except OSError:
            pass
    return written


class KeepFull:
    """Takes, every few milliseconds, whatever blocks the filesystem has free again: the
    broker frees some of its own on a full disk (a failed checkpoint's temporary file, a
    sealed segment's or index's preallocated tail), and its writes waiting for space
    retry only every 250 ms, so kept full from outside they find none."""

    def __init__(self, fs: Path):
        self.fs = fs
        self.stop_flag = threading.Event()
        self.thread = threading.Thread(target=self._run, daemon=True)

    def _run(self):
        while not self.stop_flag.is_set():
            if os.statvfs(self.fs).f_bavail > 0:
                fill(self.fs / f"filler-{time.monotonic_ns()}")
            time.sleep(0.005)

    def __enter__(self) -> "KeepFull":
        self.thread.start()
        return self

    def __exit__(self, *exc):
        self.stop_flag.set()
        self.thread.join(10)


def test_a_full_filesystem_refuses_produces_and_recovers_when_space_returns(broker_factory, small_fs):
    wd = Path(tempfile.mkdtemp(prefix="corelog-it-fulldisk-"))
    broker_factory.workdirs.append(wd)
    # The broker's own fill check off (100 %): the device's ENOSPC is what is tested.
    b = Broker(wd, extra_args=["--disk-fill-max-percent", "100", "--segment-bytes", str(4 << 20)])
    b.data_dir = small_fs / "data"
    b.data_dir.mkdir()
    broker_factory.brokers.append(b)
    b.start()
    topic = "full-disk"
    partitions = 3
    create(b.bootstrap, topic, partitions)
    load = Load(b.bootstrap, topic, **{"message.timeout.ms": 300_000}).start()
    load.wait_acked(2_000)

    fill(small_fs / "filler")
    st = os.statvfs(small_fs)
    assert st.f_bavail == 0, f"{st.f_bavail} blocks still free"
    with KeepFull(small_fs):
        # Full: what the segments had preallocated runs out, then every produce is
        # refused with Kafka's error while the broker stays up.
        deadline = time.monotonic() + 60
        refusing: set[int] = set()
        while len(refusing) < partitions:
            for p in set(range(partitions)) - refusing:
                r = produce_raw(b.bootstrap, topic, p, [b"x" * 1000], timeout_ms=2_000)
                if r["error_code"] == KAFKA_STORAGE_ERROR:
                    refusing.add(p)
                else:
                    # Acknowledged into preallocated space, or REQUEST_TIMED_OUT while queued.
                    assert r["error_code"] in (0, 7), r
            assert time.monotonic() < deadline, f"only partitions {refusing} refused on a full disk"
        stalled = load.count()
        time.sleep(2)
        b.assert_alive()
        assert load.count() - stalled < 500, "produces went on on a full disk"
    assert "filesystem full" in b.log_tail(2000)

    # Space returns: the queued batches are written, the producer's retries acknowledged.
    for f in small_fs.glob("filler*"):
        f.unlink()
    load.wait_acked(load.count() + 2_000, timeout=60)
    load.stop(flush=60)
    assert not load.errors, load.errors[:3]
    assert produce_raw(b.bootstrap, topic, 0, [b"after"])["error_code"] == 0
    check_log(b.bootstrap, topic, partitions, {k: v[0] for k, v in load.acked.items()})
    b.assert_alive()
    # And after a restart, recovery finds the same log.
    b.stop()
    b.start()
    check_log(b.bootstrap, topic, partitions, {k: v[0] for k, v in load.acked.items()})
