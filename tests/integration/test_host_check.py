"""`corelog check`: what the host gives the broker, line by line, with advice; exit 1 on a
failure (here a data directory on tmpfs, memory rather than a disk). The broker logs the
same cheap checks at start-up."""

from __future__ import annotations

import re
import subprocess
import tempfile
from pathlib import Path

import pytest

from launcher import corelog_bin

CHECKS = ["io_uring", "io_uring sysctl", "RLIMIT_MEMLOCK", "RLIMIT_NOFILE", "filesystem",
          "O_DIRECT", "free disk", "transparent hugepages", "cpu governor"]


def run_check(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([str(corelog_bin()), "check", *args], capture_output=True, text=True,
                          timeout=120)


def finding(out: str, name: str) -> str:
    for line in out.splitlines():
        if line[6:].startswith(name + " ") or line[6:].rstrip() == name:
            return line
    raise AssertionError(f"no {name!r} line in:\n{out}")


def test_every_check_reports_on_a_real_data_directory(tmp_path):
    r = run_check("--data-dir", str(tmp_path / "data"), "--shards", "2", "--measure", "16")
    out = r.stdout
    for name in CHECKS + ["disk bandwidth"]:
        line = finding(out, name)
        assert line[:4] in ("ok  ", "warn", "FAIL"), line
    assert finding(out, "O_DIRECT").startswith("ok"), out
    assert finding(out, "io_uring").startswith("ok"), out
    assert "MiB/s" in finding(out, "disk bandwidth"), out
    assert "partitions" in finding(out, "RLIMIT_NOFILE"), out
    assert out.strip().splitlines()[-1].startswith(f"{len(CHECKS) + 1} checks: 0 failed"), out
    assert r.returncode == 0, out
    assert (tmp_path / "data").is_dir(), "the data directory is created, as serve would"
    assert list((tmp_path / "data").iterdir()) == [], "the probes leave nothing behind"


def test_advice_names_what_to_change():
    # 10,000 connections out of this machine's descriptors leave little for partitions.
    with tempfile.TemporaryDirectory() as d:
        r = run_check("--data-dir", d, "--max-connections", "1000000")
    line = finding(r.stdout, "RLIMIT_NOFILE")
    assert line.startswith("warn"), r.stdout
    advice = r.stdout.splitlines()[r.stdout.splitlines().index(line) + 1]
    assert "->" in advice and "ulimit -n" in advice, advice


def test_descriptors_count_the_segment_file_bound_given():
    with tempfile.TemporaryDirectory() as d:
        r = run_check("--data-dir", d, "--max-connections", "100", "--max-open-segment-files", "100")
    line = finding(r.stdout, "RLIMIT_NOFILE")
    assert "100 for open segment files" in line, r.stdout
    assert line.startswith("warn"), "fewer than 1,024 open segment files is worth a warning"


@pytest.mark.skipif(not Path("/dev/shm").is_dir(), reason="no /dev/shm here")
def test_a_data_directory_in_memory_fails():
    with tempfile.TemporaryDirectory(dir="/dev/shm") as d:
        fs = subprocess.run(["stat", "-f", "-c", "%T", d], capture_output=True, text=True).stdout
        if "tmpfs" not in fs:
            pytest.skip(f"/dev/shm is {fs.strip()}, not tmpfs")
        r = run_check("--data-dir", d)
    assert r.returncode == 1, r.stdout
    assert finding(r.stdout, "filesystem").startswith("FAIL"), r.stdout
    assert "tmpfs" in finding(r.stdout, "filesystem"), r.stdout
    # Newer kernels take O_DIRECT on tmpfs, older ones refuse it: either is reported.
    assert finding(r.stdout, "O_DIRECT")[:4] in ("ok  ", "FAIL"), r.stdout


def test_the_broker_logs_the_cheap_checks_at_start(broker):
    text = re.sub(r"\x1b\[[0-9;]*m", "", broker.log_path.read_text(errors="replace"))
    for name in ["O_DIRECT", "RLIMIT_NOFILE", "filesystem", "free disk"]:
        assert f"check={name}" in text or f'check="{name}"' in text, \
            f"{name} is not in the start-up log:\n{broker.log_tail()}"
