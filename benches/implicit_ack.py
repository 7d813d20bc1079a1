#!/usr/bin/env python3
"""Where an acknowledged record without an offset comes from: librdkafka's implicit
acknowledgement, on corelog and on Apache Kafka in the same harness.

An idempotent librdkafka producer (acks=all, up to five requests in flight) writes to one
partition with three replicas while both followers of its leader are paused (SIGSTOP) for
the produce timeout plus up to 80 ms, one record every 20 ms (`request.timeout.ms`, which librdkafka also sends as the
Produce request's timeout). A request whose deadline passes before the followers resume is
answered REQUEST_TIMED_OUT by the leader ("possibly persisted": its records are in the
leader's log, waiting for the high watermark); a request behind it on the same connection
whose deadline comes after the resume is answered with its offsets. librdkafka then knows
the first request's records were written (the second one's sequence follows them) and
reports them delivered without an offset (`rd_kafka_dr_implicit_ack`: offset -1). Every
such record is in the log exactly once.

    python3 benches/implicit_ack.py [--peer kafka] [--rounds 20] [--timeout-ms 1500]

Prints, per broker kind, the records acknowledged, those acknowledged with offset -1, the
producer's "implicitly acked" debug lines and the Produce errors that came before them,
and whether every acknowledged record was read back exactly once. Results are written to
benches/results/<stamp>-implicit-ack-<kind>.json.
"""
from __future__ import annotations

import argparse
import logging
import os
import random
import signal
import sys
import tempfile
import threading
import time
from collections import Counter
from pathlib import Path

from confluent_kafka import Consumer, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "benches"))
from harness import write_json_results  # noqa: E402
from replication import CorelogCluster, KafkaCluster  # noqa: E402

TOPIC = "implicit-ack"


class DebugLines(logging.Handler):
    """Keeps the producer's debug lines that explain an implicit acknowledgement."""

    KEEP = ("IMPLICITACK", "encountered error", "DUPSEQ")

    def __init__(self):
        super().__init__()
        self.lines: list[str] = []

    def emit(self, record: logging.LogRecord) -> None:
        line = record.getMessage()
        if any(k in line for k in self.KEEP):
            self.lines.append(line)


def run(bootstrap: str, procs: list, rounds: int, timeout_ms: int, seed: int) -> dict:
    admin = AdminClient({"bootstrap.servers": bootstrap})
    admin.create_topics([NewTopic(TOPIC, 1, 3, config={"min.insync.replicas": "2"})])[TOPIC] \
        .result(60)
    time.sleep(2)
    leader = admin.list_topics(TOPIC, timeout=30).topics[TOPIC].partitions[0].leader
    followers = [p for i, p in enumerate(procs) if i + 1 != leader]
    debug = DebugLines()
    logger = logging.getLogger("producer")
    logger.setLevel(logging.DEBUG)
    logger.addHandler(debug)
    acked: list[tuple[bytes, int]] = []
    failed: list[str] = []

    def delivered(err, msg) -> None:
        if err is None:
            acked.append((msg.value(), msg.offset()))
        else:
            failed.append(str(err))

    p = Producer({"bootstrap.servers": bootstrap, "enable.idempotence": True, "acks": "all",
                  "linger.ms": 0, "request.timeout.ms": timeout_ms,
                  "message.timeout.ms": 300_000, "debug": "eos,msg"}, logger=logger)
    stop = threading.Event()

    def load() -> None:
        i = 0
        while not stop.is_set():
            try:
                p.produce(TOPIC, value=f"v{i}".encode(), on_delivery=delivered)
                i += 1
            except BufferError:
                pass
            p.poll(0)
            # Spread out, so the five requests in flight when the followers stop have
            # deadlines up to ~100 ms apart, and a resume can fall between them.
            time.sleep(0.02)

    writer = threading.Thread(target=load, daemon=True)
    writer.start()
    rng = random.Random(seed)
    try:
        for _ in range(rounds):
            time.sleep(1.0)
            pause = timeout_ms / 1000 + rng.uniform(0.0, 0.08)
            for f in followers:
                os.kill(f.pid, signal.SIGSTOP)
            time.sleep(pause)
            for f in followers:
                os.kill(f.pid, signal.SIGCONT)
    finally:
        for f in followers:
            os.kill(f.pid, signal.SIGCONT)
        stop.set()
        writer.join(30)
        p.flush(120)

    c = Consumer({"bootstrap.servers": bootstrap, "group.id": "implicit-ack-reader",
                  "auto.offset.reset": "earliest", "enable.auto.commit": False})
    high = c.get_watermark_offsets(TopicPartition(TOPIC, 0), timeout=30)[1]
    c.assign([TopicPartition(TOPIC, 0, 0)])
    read: list[bytes] = []
    deadline = time.monotonic() + 120
    while len(read) < high and time.monotonic() < deadline:
        read.extend(m.value() for m in c.consume(1000, timeout=1.0) if not m.error())
    c.close()
    counts = Counter(read)
    # confluent-kafka reports the offset librdkafka did not learn (-1) as None.
    without_offset = [v for v, o in acked if o is None or o < 0]
    errors_before = Counter(
        line.split("encountered error: ")[1].split(" (actions")[0]
        for line in debug.lines if "encountered error" in line)
    return {
        "acknowledged": len(acked),
        "acknowledged_without_offset": len(without_offset),
        "implicit_ack_lines": [l for l in debug.lines if "IMPLICITACK" in l][:10],
        "produce_errors_seen": dict(errors_before),
        "duplicate_sequence_lines": sum("DUPSEQ" in l for l in debug.lines),
        "delivery_failures": len(failed),
        "acknowledged_missing": sum(1 for v, _ in acked if counts[v] == 0),
        "read_more_than_once": sum(1 for v, n in counts.items() if n > 1),
        "without_offset_each_read_once": all(counts[v] == 1 for v in without_offset),
    }


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--peer", choices=["kafka"], help="three Apache Kafka brokers instead")
    ap.add_argument("--rounds", type=int, default=20)
    ap.add_argument("--timeout-ms", type=int, default=1500)
    ap.add_argument("--seed", type=int, default=1)
    args = ap.parse_args()
    work = Path(tempfile.mkdtemp(prefix="implicit-ack-"))
    if args.peer == "kafka":
        cluster = KafkaCluster(work)
        kind = "kafka"
    else:
        cluster = CorelogCluster(work, 3, 2)
        kind = "corelog"
    try:
        out = {"broker": kind, "rounds": args.rounds, "timeout_ms": args.timeout_ms,
               **run(cluster.bootstrap, cluster.procs, args.rounds, args.timeout_ms, args.seed)}
    finally:
        cluster.stop()
    write_json_results(f"implicit-ack-{kind}", out)
    return 0


if __name__ == "__main__":
    sys.exit(main())
