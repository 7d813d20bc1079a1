"""The README's quick start, as a new user types it: the broker started in a fresh
working directory with no --data-dir (data in the default `./data`, a relative path),
then kcat writes 1,000 lines to a topic it auto-creates, reads them back, the broker
restarts on the same directory and every line is read again. No ERROR may be logged.

Only the ports are moved (a test cannot count on 9092 being free); everything else is
the README's `corelog serve`."""

from __future__ import annotations

import shutil
import subprocess
import tempfile
from pathlib import Path

import pytest

from launcher import Broker, stop_all

KCAT = shutil.which("kcat") or shutil.which("kafkacat")
pytestmark = pytest.mark.skipif(KCAT is None, reason="kcat not installed")


def kcat(*args: str, stdin: bytes | None = None, timeout: float = 60) -> bytes:
    p = subprocess.run([KCAT, *args], input=stdin, capture_output=True, timeout=timeout)
    assert p.returncode == 0, (f"kcat {' '.join(args)} -> {p.returncode}\n"
                               f"stderr: {p.stderr.decode(errors='replace')[-2000:]}")
    return p.stdout


def read_all(bootstrap: str, topic: str) -> list[str]:
    out = kcat("-b", bootstrap, "-C", "-t", topic, "-o", "beginning", "-e", "-q")
    return sorted(out.decode().splitlines())


def test_readme_quick_start_in_a_fresh_directory_with_the_default_data_dir():
    workdir = Path(tempfile.mkdtemp(prefix="corelog-quickstart-"))
    b = Broker(workdir, shards=None, name="quickstart", data_dir=workdir / "data")
    b.cwd = workdir
    b.pass_data_dir = False
    try:
        b.start()
        lines = [f"hello {i}" for i in range(1000)]
        kcat("-b", b.bootstrap, "-P", "-t", "hello", "-X", "acks=all",
             stdin=("\n".join(lines) + "\n").encode())
        assert read_all(b.bootstrap, "hello") == sorted(lines)
        # The data went where the user was: ./data of the directory the broker started in.
        assert any((workdir / "data").glob("hello-*")), sorted(p.name for p in (workdir / "data").iterdir())

        b.stop()
        b.start()
        assert read_all(b.bootstrap, "hello") == sorted(lines)
        b.stop()
        log = b.log_path.read_text(errors="replace")
        errors = [line for line in log.splitlines() if " ERROR " in line or line.startswith("ERROR")]
        assert not errors, "\n".join(errors[:20])
    finally:
        stop_all([b])
        shutil.rmtree(workdir, ignore_errors=True)


def test_version_names_the_release_and_the_commit():
    """`corelog --version` names the package version and the commit it was built from
    (one of this checkout's, when the broker was built from it)."""
    import re

    from launcher import corelog_bin
    out = subprocess.run([str(corelog_bin()), "--version"], capture_output=True, text=True,
                         timeout=30, check=True).stdout.strip()
    m = re.fullmatch(r"corelog (\d+\.\d+\.\d+) \(commit ([0-9a-f]{12}|unknown)\)", out)
    assert m, out
    root = Path(__file__).resolve().parents[2]
    version = re.search(r'^version = "([^"]+)"', (root / "Cargo.toml").read_text(), re.M)
    assert m.group(1) == version.group(1)
    head = subprocess.run(["git", "-C", str(root), "rev-parse", "--short=12", "HEAD"],
                          capture_output=True, text=True)
    if head.returncode == 0 and m.group(2) != "unknown":
        # A binary built before the last commit names the commit it was built from.
        built = subprocess.run(["git", "-C", str(root), "merge-base", "--is-ancestor",
                                m.group(2), "HEAD"])
        assert built.returncode == 0, f"{m.group(2)} is not a commit of this checkout"
