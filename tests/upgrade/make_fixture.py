#!/usr/bin/env python3
"""Writes the previous-format fixture that tests/integration/test_previous_format.py opens
with the current broker: a single node's data directory as an earlier release left it
after a clean stop, archived as tests/fixtures/previous-format/<commit>-single-node.tar.gz.

It holds what each of the broker's formats is written for: a topic of 3 partitions with
idempotently produced records and a topic config, a compacted topic, committed offsets of
a consumer group (`__consumer_offsets`), a committed and an aborted transaction
(`__transaction_state`, markers, the aborted-transaction index), and the metadata log and
its snapshot of a cluster that has finalized no feature levels. What the test expects is
in the same folder, `<commit>-single-node.json`.

Usage (the earlier release built by rolling_upgrade.py, or any binary of it):
    python3 tests/upgrade/make_fixture.py --old-bin PATH [--commit 4b1de7b]
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tarfile
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent.parent
sys.path.insert(0, str(ROOT / "tests" / "integration"))

from confluent_kafka import Consumer, Producer, TopicPartition  # noqa: E402
from confluent_kafka.admin import AdminClient, NewTopic  # noqa: E402

from launcher import Broker  # noqa: E402

FIXTURES = ROOT / "tests" / "fixtures" / "previous-format"


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--old-bin", type=Path, required=True)
    ap.add_argument("--commit", default="4b1de7b")
    a = ap.parse_args()
    work = Path(tempfile.mkdtemp(prefix="corelog-fixture-"))
    b = Broker(work, shards=2, name="fixture")
    b.binary = a.old_bin.resolve()
    b.start()
    try:
        admin = AdminClient({"bootstrap.servers": b.bootstrap})
        fs = admin.create_topics([
            NewTopic("kept", 3, 1, config={"retention.ms": "604800000"}),
            NewTopic("compacted", 1, 1, config={"cleanup.policy": "compact"}),
            NewTopic("txn-topic", 1, 1),
        ])
        for f in fs.values():
            f.result()
        p = Producer({"bootstrap.servers": b.bootstrap, "enable.idempotence": True, "acks": "all"})
        for i in range(300):
            p.produce("kept", key=f"k{i}".encode(), value=f"v{i}".encode(), partition=i % 3)
        for i in range(20):
            p.produce("compacted", key=f"key{i % 5}".encode(), value=f"c{i}".encode())
        assert p.flush(30) == 0
        c = Consumer({"bootstrap.servers": b.bootstrap, "group.id": "fixture-group",
                      "enable.auto.commit": False})
        c.commit(offsets=[TopicPartition("kept", q, 50) for q in range(3)], asynchronous=False)
        c.close()
        t = Producer({"bootstrap.servers": b.bootstrap, "transactional.id": "fixture-txn"})
        t.init_transactions(30)
        t.begin_transaction()
        for i in range(10):
            t.produce("txn-topic", value=f"committed{i}".encode())
        t.commit_transaction(30)
        t.begin_transaction()
        for i in range(5):
            t.produce("txn-topic", value=f"aborted{i}".encode())
        assert t.flush(30) == 0  # written, so that the abort writes markers over them
        t.abort_transaction(30)
        version = subprocess.run([str(b.binary), "--version"], capture_output=True, text=True).stdout.strip()
    finally:
        b.stop()
    FIXTURES.mkdir(parents=True, exist_ok=True)
    name = f"{a.commit}-single-node"
    with tarfile.open(FIXTURES / f"{name}.tar.gz", "w:gz") as tar:
        tar.add(b.data_dir, arcname="data")
    (FIXTURES / f"{name}.json").write_text(json.dumps({
        "written_by": version,
        "commit": a.commit,
        "topics": {"kept": {"partitions": 3, "records_per_partition": 100,
                            "configs": {"retention.ms": "604800000"}},
                   "compacted": {"partitions": 1, "records": 20, "keys": 5},
                   "txn-topic": {"partitions": 1, "committed": 10, "aborted": 5}},
        "groups": {"fixture-group": {"kept": [50, 50, 50]}},
        "transactional_ids": ["fixture-txn"],
    }, indent=2) + "\n")
    print(f"wrote {FIXTURES / name}.tar.gz ({(FIXTURES / f'{name}.tar.gz').stat().st_size} bytes)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
