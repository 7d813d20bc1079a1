#!/usr/bin/env python3
"""What the controller quorum costs a single node: time from start to /health 200, the
latency of CreateTopics one after another (one Raft append and fdatasync, the apply, the
partition's open), and the time to /health 200 after a clean restart.

    python3 benches/metadata_ops.py [--creates 50]

Needs confluent-kafka and a release build (target/release/corelog or CORELOG_BIN)."""

from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
import time
from pathlib import Path

from confluent_kafka.admin import AdminClient, NewTopic

# The broker launcher the integration tests use (tests/integration/launcher.py).
sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "tests" / "integration"))
import launcher  # noqa: E402


def start(broker: launcher.Broker) -> float:
    """Starts the broker; returns seconds until /health answers 200 (asked every 10 ms)."""
    t0 = time.monotonic()
    broker.launch()
    broker.wait_healthy(timeout=120, poll_s=0.01)
    return time.monotonic() - t0


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--creates", type=int, default=50)
    args = ap.parse_args()
    with tempfile.TemporaryDirectory() as work:
        broker = launcher.Broker(Path(work), shards=2, log_level="warn")
        try:
            first = start(broker)
            print(f"first start to /health 200: {first:.2f} s")
            admin = AdminClient({"bootstrap.servers": broker.bootstrap})
            took = []
            for i in range(args.creates):
                t = time.monotonic()
                admin.create_topics([NewTopic(f"m{i}", 1, 1)])[f"m{i}"].result(30)
                took.append(time.monotonic() - t)
            print(f"CreateTopics (1 partition), {args.creates} one after another: "
                  f"median {statistics.median(took) * 1000:.1f} ms, max {max(took) * 1000:.1f} ms")
            broker.stop()
            again = start(broker)
            print(f"restart to /health 200: {again:.2f} s")
            broker.stop()
        finally:
            broker.teardown()


if __name__ == "__main__":
    main()
