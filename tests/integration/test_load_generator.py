"""corelog-load against a real broker where its own behaviour shapes what benchmarks
measure.

Unkeyed messages follow Kafka's sticky partitioner (KIP-480): a producer moves to the
next partition when its batch is closed, full or sent after lingering. A rate that never
fills a batch within `--linger-ms` must still spread over every partition; before, such
a run sent everything to one partition.
"""
from __future__ import annotations

import json
import subprocess
import tempfile
from pathlib import Path

from confluent_kafka import Consumer, TopicPartition

from launcher import corelog_bin


def test_unkeyed_messages_below_a_full_batch_spread_over_every_partition(broker):
    load = corelog_bin().parent / "corelog-load"
    partitions = 4
    with tempfile.TemporaryDirectory() as d:
        out = Path(d) / "load.json"
        # 2,000 msg/s of 1 KiB with a 256 KiB batch and 1 ms linger: about two messages
        # per batch, so no batch ever fills. acks=all: answered once the high watermark
        # (what the end offsets below report) covers them.
        done = subprocess.run(
            [str(load), "produce", "--bootstrap", broker.bootstrap, "--topic", "sticky",
             "--partitions", str(partitions), "--rate", "2000", "--messages", "2000",
             "--message-size", "1024", "--batch-size", "262144", "--linger-ms", "1",
             "--acks", "all",
             "--json", str(out)],
            capture_output=True, text=True, timeout=120)
        assert done.returncode == 0, done.stderr
        report = json.loads(out.read_text())
    assert report["messages"] == 2000 and report["errors"] == 0, report
    consumer = Consumer({"bootstrap.servers": broker.bootstrap, "group.id": "sticky-check"})
    try:
        ends = [consumer.get_watermark_offsets(TopicPartition("sticky", p), timeout=10)[1]
                for p in range(partitions)]
    finally:
        consumer.close()
    assert sum(ends) == 2000, ends
    # Each partition's batches are closed in turn: every one holds a fair share.
    assert min(ends) >= 2000 // partitions // 2, ends
