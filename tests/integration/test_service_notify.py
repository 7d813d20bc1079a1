"""The broker as a systemd `Type=notify` service sees it: READY=1 once it serves,
WATCHDOG=1 at half of WATCHDOG_USEC while its shards answer, STOPPING=1 when SIGTERM
begins the stop, then a clean exit. The test is the service manager: it makes the
notification socket and reads the datagrams, as systemd does."""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import time
from pathlib import Path

from launcher import corelog_bin, free_port


def test_ready_watchdog_and_stopping_reach_the_service_manager(tmp_path: Path):
    sock_path = tmp_path / "notify.sock"
    manager = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
    manager.bind(str(sock_path))
    manager.settimeout(1)
    port, http, controller = free_port(), free_port(), free_port()
    env = {**os.environ, "NOTIFY_SOCKET": str(sock_path), "WATCHDOG_USEC": "1000000"}
    log = open(tmp_path / "broker.log", "wb")
    # systemd names the watched process in WATCHDOG_PID: a shell that sets it to its own
    # pid and execs the broker, which keeps the pid.
    serve = [str(corelog_bin()), "serve", "--listen", f"127.0.0.1:{port}", "--shards", "2",
             "--http", f"127.0.0.1:{http}", "--controller-listen", f"127.0.0.1:{controller}",
             "--data-dir", str(tmp_path / "data")]
    proc = subprocess.Popen(["sh", "-c", 'WATCHDOG_PID=$$ exec "$@"', "sh", *serve],
                            env=env, stdout=log, stderr=subprocess.STDOUT)
    got: list[tuple[float, str]] = []

    def read_until(pred, timeout: float) -> None:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline and not pred():
            try:
                got.append((time.monotonic(), manager.recv(4096).decode()))
            except socket.timeout:
                pass

    try:
        read_until(lambda: any("READY=1" in m for _, m in got), 60)
        assert any("READY=1" in m for _, m in got), got
        # Serving by then: a Kafka client connects.
        with socket.create_connection(("127.0.0.1", port), timeout=5):
            pass
        read_until(lambda: sum("WATCHDOG=1" in m for _, m in got) >= 3, 10)
        beats = [t for t, m in got if "WATCHDOG=1" in m]
        assert len(beats) >= 3, got
        assert all(0.3 < b - a < 1.0 for a, b in zip(beats, beats[1:])), beats
        proc.send_signal(signal.SIGTERM)
        read_until(lambda: any("STOPPING=1" in m for _, m in got), 30)
        assert any("STOPPING=1" in m for _, m in got), got
        assert proc.wait(timeout=60) == 0
        stopping = next(i for i, (_, m) in enumerate(got) if "STOPPING=1" in m)
        assert not any("WATCHDOG=1" in m for _, m in got[stopping + 1:])
        assert [m for _, m in got].index(next(m for _, m in got if "READY=1" in m)) < stopping
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
        manager.close()
        log.close()


def test_log_lines_carry_their_priority_for_journald_and_only_there(tmp_path: Path):
    """With JOURNAL_STREAM naming its standard output (as systemd sets it for a unit whose
    output goes to the journal), every line starts with its syslog priority, which
    journald turns into the entry's priority; with it naming another file, none does."""
    from launcher import Broker

    b = Broker(tmp_path / "journal", shards=1, name="journal")
    b.log_path.touch()
    st = os.stat(b.log_path)
    b.env = {"JOURNAL_STREAM": f"{st.st_dev}:{st.st_ino}"}
    b.start()
    b.stop()
    lines = [line for line in b.log_path.read_text().splitlines()
             if line and not line.startswith("=====")]
    assert lines and all(line[:3] in ("<3>", "<4>", "<6>", "<7>") for line in lines), lines[:5]
    assert any(line.startswith("<6>") and "INFO" in line and "corelog is serving" in line for line in lines)
    assert not any("\x1b[" in line for line in lines), "no colour codes"

    other = Broker(tmp_path / "plain", shards=1, name="plain")
    other.env = {"JOURNAL_STREAM": f"{st.st_dev}:{st.st_ino}"}  # not its output
    other.start()
    other.stop()
    plain = [line for line in other.log_path.read_text().splitlines()
             if line and not line.startswith("=====")]
    assert plain and not any(line.startswith("<") for line in plain), plain[:3]
