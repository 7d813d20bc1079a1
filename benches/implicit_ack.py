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
        [--seed 1] [--broker-arg='--durability interval' ...]

Prints, per broker kind, the records acknowledged, those acknowledged with offset -1, the
producer's "implicitly acked" debug lines and the Produce errors that came before them,
and whether every acknowledged record was read back exactly once. Results are written to
benches/results/<stamp>-implicit-ack-<kind>.json (`-<args>` appended when --broker-arg is
given).

Per round (`per_round`), times from the client's monotonic clock (the producer's debug
lines and delivery reports are taken when the writer polls, which it does continuously,
so within about a millisecond of librdkafka emitting them): the pause (SIGSTOP of the
first follower to SIGCONT of the last), the REQUEST_TIMED_OUT answers seen from this
round's SIGSTOP to the next one's and how many messages each timed-out request carried,
the Produce requests sent from 100 ms before the SIGSTOP to the SIGCONT (when, relative to
the SIGSTOP, and how many messages), the first REQUEST_TIMED_OUT after the SIGSTOP, and
the time from the SIGCONT to the first successful delivery report after it
(`resume_to_first_ack_ms`: the high watermark's advance plus the answer's way back).
"""
from __future__ import annotations

import argparse
import logging
import os
import random
import re
import shlex
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

    KEEP = ("IMPLICITACK", "encountered error", "DUPSEQ", "Produce MessageSet with")

    def __init__(self):
        super().__init__()
        self.lines: list[str] = []
        self.timed: list[tuple[float, str]] = []

    def emit(self, record: logging.LogRecord) -> None:
        line = record.getMessage()
        if any(k in line for k in self.KEEP):
            self.timed.append((time.monotonic(), line))
            if "Produce MessageSet with" not in line:
                self.lines.append(line)


SENT = re.compile(r"Produce MessageSet with (\d+) message\(s\).*?MsgId (\d+)")
FAILED = re.compile(r"with (\d+) message\(s\).*encountered error: ([^(]*?) \(actions")


def per_round(rounds: list[tuple[float, float]], timed: list[tuple[float, str]],
              acks: list[tuple[float, bool]]) -> list[dict]:
    """The per-round figures of the module docstring; `rounds` holds each round's
    (SIGSTOP, SIGCONT) times, `acks` each successful delivery report's (time, with
    offset)."""
    out = []
    for i, (stop, cont) in enumerate(rounds):
        end = rounds[i + 1][0] if i + 1 < len(rounds) else float("inf")
        timeouts = [(t, int(m.group(1))) for t, l in timed
                    if stop <= t < end and (m := FAILED.search(l)) and "timed out" in m.group(2)]
        sent = [(t, int(m.group(1)), int(m.group(2))) for t, l in timed
                if stop - 0.1 <= t <= cont and (m := SENT.search(l))]
        first = next((t for t, _ in acks if t >= cont and t < end), None)
        first_with_offset = next((t for t, o in acks if t >= cont and t < end and o), None)
        ms = lambda t: None if t is None else round((t - stop) * 1000, 1)  # noqa: E731
        out.append({
            "pause_ms": round((cont - stop) * 1000, 1),
            "timeouts": len(timeouts),
            "timed_out_request_messages": [n for _, n in timeouts],
            "first_timeout_after_stop_ms": ms(timeouts[0][0]) if timeouts else None,
            "last_timeout_after_stop_ms": ms(timeouts[-1][0]) if timeouts else None,
            "requests_sent_ms_messages": [[ms(t), n] for t, n, _ in sent],
            "resume_to_first_ack_ms":
                None if first is None else round((first - cont) * 1000, 1),
            "resume_to_first_ack_with_offset_ms":
                None if first_with_offset is None else round((first_with_offset - cont) * 1000, 1),
        })
    return out


def spread(values: list) -> dict:
    v = sorted(x for x in values if x is not None)
    if not v:
        return {}
    mean = sum(v) / len(v)
    sd = (sum((x - mean) ** 2 for x in v) / (len(v) - 1)) ** 0.5 if len(v) > 1 else 0.0
    return {"n": len(v), "mean": round(mean, 2), "sd": round(sd, 2), "min": v[0],
            "median": v[len(v) // 2], "max": v[-1]}


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
    acked_at: list[tuple[float, bool]] = []
    failed: list[str] = []

    def delivered(err, msg) -> None:
        if err is None:
            acked.append((msg.value(), msg.offset()))
            acked_at.append((time.monotonic(),
                             msg.offset() is not None and msg.offset() >= 0))
        else:
            failed.append(str(err))

    p = Producer({"bootstrap.servers": bootstrap, "enable.idempotence": True, "acks": "all",
                  "linger.ms": 0, "request.timeout.ms": timeout_ms,
                  "message.timeout.ms": 300_000, "debug": "eos,msg"}, logger=logger)
    stop = threading.Event()

    def load() -> None:
        i = 0
        next_at = time.monotonic()
        while not stop.is_set():
            try:
                p.produce(TOPIC, value=f"v{i}".encode(), on_delivery=delivered)
                i += 1
            except BufferError:
                pass
            # Spread out, so the five requests in flight when the followers stop have
            # deadlines up to ~100 ms apart, and a resume can fall between them. Polls
            # until the next record is due, so delivery reports and debug lines are
            # taken (and timed) as they come.
            next_at += 0.02
            while (left := next_at - time.monotonic()) > 0:
                p.poll(left)

    writer = threading.Thread(target=load, daemon=True)
    writer.start()
    rng = random.Random(seed)
    paused: list[tuple[float, float]] = []
    try:
        for _ in range(rounds):
            time.sleep(1.0)
            pause = timeout_ms / 1000 + rng.uniform(0.0, 0.08)
            stopped = time.monotonic()
            for f in followers:
                os.kill(f.pid, signal.SIGSTOP)
            time.sleep(pause)
            for f in followers:
                os.kill(f.pid, signal.SIGCONT)
            paused.append((stopped, time.monotonic()))
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
    rounds_out = per_round(paused, debug.timed, acked_at)
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
        "implicit_ack_messages": [
            int(m.group(1)) for l in debug.lines
            if (m := re.search(r"\] (\d+) message\(s\) implicitly acked", l))],
        "spread": {k: spread([r[k] for r in rounds_out])
                   for k in ("pause_ms", "timeouts", "first_timeout_after_stop_ms",
                             "resume_to_first_ack_ms", "resume_to_first_ack_with_offset_ms")},
        "per_round": rounds_out,
    }


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--peer", choices=["kafka"], help="three Apache Kafka brokers instead")
    ap.add_argument("--rounds", type=int, default=20)
    ap.add_argument("--timeout-ms", type=int, default=1500)
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--broker-arg", action="append", default=[],
                    help="extra corelog broker arguments, split as a shell would "
                         "(repeatable), e.g. --broker-arg='--durability interval'")
    args = ap.parse_args()
    broker_args = [a for s in args.broker_arg for a in shlex.split(s)]
    if broker_args and args.peer:
        ap.error("--broker-arg is for corelog brokers")
    work = Path(tempfile.mkdtemp(prefix="implicit-ack-"))
    if args.peer == "kafka":
        cluster = KafkaCluster(work)
        kind = "kafka"
    else:
        cluster = CorelogCluster(work, 3, 2, extra_args=broker_args)
        kind = "corelog"
    try:
        out = {"broker": kind, "broker_args": broker_args, "rounds": args.rounds,
               "timeout_ms": args.timeout_ms, "seed": args.seed,
               **run(cluster.bootstrap, cluster.procs, args.rounds, args.timeout_ms, args.seed)}
    finally:
        cluster.stop()
    label = "-".join(re.sub(r"[^A-Za-z0-9.=]+", "", a) for a in broker_args)
    write_json_results(f"implicit-ack-{kind}" + (f"-{label}" if label else ""), out)
    return 0


if __name__ == "__main__":
    sys.exit(main())
