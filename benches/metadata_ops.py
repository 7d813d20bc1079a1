#!/usr/bin/env python3
"""What the controller quorum costs a single node: time from start to /health 200, the
latency of CreateTopics one after another (one Raft append and fdatasync, the apply, the
partition's open), and the time to /health 200 after a clean restart.

    python3 benches/metadata_ops.py [--creates 50]

Needs confluent-kafka and a release build (target/release/corelog or CORELOG_BIN)."""

from __future__ import annotations

import argparse
import os
import socket
import statistics
import subprocess
import tempfile
import time
import urllib.request
from pathlib import Path

from confluent_kafka.admin import AdminClient, NewTopic

REPO = Path(__file__).resolve().parent.parent
BROKER = Path(os.environ.get("CORELOG_BIN", REPO / "target/release/corelog"))
NO_PROXY = urllib.request.build_opener(urllib.request.ProxyHandler({}))


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def start(data: Path, port: int, http: int, controller: int) -> tuple[subprocess.Popen, float]:
    t0 = time.monotonic()
    proc = subprocess.Popen([str(BROKER), "serve", "--data-dir", str(data),
                             "--listen", f"127.0.0.1:{port}", "--http", f"127.0.0.1:{http}",
                             "--controller-listen", f"127.0.0.1:{controller}",
                             "--shards", "2", "--log-level", "warn"])
    while True:
        try:
            with NO_PROXY.open(f"http://127.0.0.1:{http}/health", timeout=1) as r:
                if r.status == 200:
                    return proc, time.monotonic() - t0
        except OSError:
            pass
        assert proc.poll() is None, "the broker exited"
        time.sleep(0.01)


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--creates", type=int, default=50)
    args = ap.parse_args()
    with tempfile.TemporaryDirectory() as work:
        data = Path(work) / "data"
        ports = free_port(), free_port(), free_port()
        proc, first = start(data, *ports)
        print(f"first start to /health 200: {first:.2f} s")
        admin = AdminClient({"bootstrap.servers": f"127.0.0.1:{ports[0]}"})
        took = []
        for i in range(args.creates):
            t = time.monotonic()
            admin.create_topics([NewTopic(f"m{i}", 1, 1)])[f"m{i}"].result(30)
            took.append(time.monotonic() - t)
        print(f"CreateTopics (1 partition), {args.creates} one after another: "
              f"median {statistics.median(took) * 1000:.1f} ms, max {max(took) * 1000:.1f} ms")
        proc.terminate()
        proc.wait()
        proc, again = start(data, *ports)
        print(f"restart to /health 200: {again:.2f} s")
        proc.terminate()
        proc.wait()


if __name__ == "__main__":
    main()
